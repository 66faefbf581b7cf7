// Micro-benchmark of the oneDNN library kernels of the CPU target (not a test; figures in
// docs/perf.md): for matmul / linear / conv shapes, the time per call of the compiled
// Executable (median over repeats), its GFLOP/s, and the first call (primitive creation and
// weight prepacking) separately. Weights are `constant` ops, so they are prepacked once; the
// epilogue variants run the fuse pass first (bias + activation / residual as post-ops).
//
// Usage: xjit-bench-library-kernels [--repeats R] [--bf16]
// The side-by-side comparison with PyTorch is bench/backend/library_kernels.py.
#include "xjit/backend/target.h"
#include "xjit/ir/builder.h"
#include "xjit/passes/pass.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

using namespace xjit;
using namespace xjit::backend;

namespace {

using Clock = std::chrono::steady_clock;

Tensor randomTensor(DType d, const std::vector<int64_t> &sizes, std::mt19937 &rng) {
  Tensor t = Tensor::empty(d, sizes);
  std::uniform_real_distribution<double> u(-1, 1);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.setDouble(i, u(rng));
  return t;
}

struct Case {
  std::string name;
  double flops;
  std::unique_ptr<Graph> g;
  std::vector<RtValue> inputs;
};

/// y = op(x, W [, b]) [post...] with constant W and b, fused by the fuse pass.
Case makeCase(const std::string &name, const std::string &op, DType dt, std::vector<int64_t> x,
              std::vector<int64_t> w, bool bias, AttrMap attrs, std::vector<std::string> post,
              double flops, std::mt19937 &rng) {
  Case c{name, flops, std::make_unique<Graph>("bench"), {}};
  Builder b(c.g->body());
  Value *xv = c.g->addInput(Type::tensor(dt, Shape(x.begin(), x.end())));
  c.inputs.push_back(randomTensor(dt, x, rng));
  std::vector<Value *> operands = {xv, b.constantTensor(randomTensor(dt, w, rng))};
  if (bias) operands.push_back(b.constantTensor(randomTensor(dt, {w[0]}, rng)));
  Value *y = b.op(op, operands, std::move(attrs));
  for (const std::string &p : post) {
    if (p == "add") {
      Value *r = c.g->addInput(y->type());
      std::vector<int64_t> sizes;
      for (const DimExpr &d : y->type().shape())
        sizes.push_back(*d.staticValue());
      c.inputs.push_back(randomTensor(dt, sizes, rng));
      y = b.op("add", {y, r});
    } else {
      y = b.op(p, {y});
    }
  }
  b.createWithTypes("return", {y}, {});
  passes::PassContext ctx(
      {{"max-group-size", "64"}, {"min-group-size", "2"}, {"duplicate-cheap", "true"}});
  passes::lookupPass("fuse")->run(*c.g, ctx);
  return c;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

} // namespace

int main(int argc, char **argv) {
  int repeats = 15;
  DType dt = DType::F32;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--repeats") && i + 1 < argc)
      repeats = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--bf16"))
      dt = DType::BF16;
  }
  std::mt19937 rng(7);
  auto conv2dFlops = [](double n, double cin, double cout, double oh, double ow, double k) {
    return 2 * n * cout * oh * ow * cin * k * k;
  };
  std::vector<Case> cases;
  cases.push_back(makeCase("linear 128x768 -> 3072 + gelu (BERT FFN)", "linear", dt, {128, 768},
                           {3072, 768}, true, {}, {"gelu"}, 2.0 * 128 * 768 * 3072, rng));
  cases.push_back(makeCase("linear 128x3072 -> 768 + residual", "linear", dt, {128, 3072},
                           {768, 3072}, true, {}, {"add"}, 2.0 * 128 * 768 * 3072, rng));
  cases.push_back(makeCase("linear 512x1024 -> 1024", "linear", dt, {512, 1024}, {1024, 1024},
                           false, {}, {}, 2.0 * 512 * 1024 * 1024, rng));
  cases.push_back(makeCase("conv2d 1x64x56x56 3x3 64 + bias + relu", "conv2d", dt, {1, 64, 56, 56},
                           {64, 64, 3, 3}, true, {{"padding", Attr(std::vector<int64_t>{1})}},
                           {"relu"}, conv2dFlops(1, 64, 64, 56, 56, 3), rng));
  cases.push_back(
      makeCase("conv2d 1x56x56x64 (nhwc) 3x3 64 + bias + relu", "conv2d", dt, {1, 56, 56, 64},
               {64, 64, 3, 3}, true,
               {{"padding", Attr(std::vector<int64_t>{1})}, {"layout", Attr(std::string("nhwc"))}},
               {"relu"}, conv2dFlops(1, 64, 64, 56, 56, 3), rng));
  cases.push_back(makeCase("conv2d 1x256x14x14 3x3 256", "conv2d", dt, {1, 256, 14, 14},
                           {256, 256, 3, 3}, false, {{"padding", Attr(std::vector<int64_t>{1})}},
                           {}, conv2dFlops(1, 256, 256, 14, 14, 3), rng));
  cases.push_back(makeCase("conv1d 8x64x512 k3 128", "conv1d", dt, {8, 64, 512}, {128, 64, 3}, true,
                           {{"padding", Attr(std::vector<int64_t>{1})}}, {},
                           2.0 * 8 * 128 * 512 * 64 * 3, rng));

  // Tiny problems: the time is the executable's per-call overhead (plan lookup, oneDNN memory
  // objects, execution, output allocation).
  cases.push_back(makeCase("linear 4x8 -> 4 (overhead)", "linear", dt, {4, 8}, {4, 8}, true, {}, {},
                           2.0 * 4 * 8 * 4, rng));
  cases.push_back(makeCase("linear 4x8 -> 4 + relu + residual (overhead)", "linear", dt, {4, 8},
                           {4, 8}, true, {}, {"relu", "add"}, 2.0 * 4 * 8 * 4, rng));

  std::unique_ptr<Target> target = makeCpuTarget();
  std::printf("%-50s %10s %10s %10s\n", "case", "first ms", "median us", "GFLOP/s");
  for (Case &c : cases) {
    const Op *call = nullptr;
    for (const Op *op : *c.g->body())
      if (op->name() == "fusion" || op->name() == "linear" || op->name().rfind("conv", 0) == 0)
        call = op;
    std::string why = target->whyNotSupported(*call);
    if (!why.empty()) {
      std::printf("%-50s not supported: %s\n", c.name.c_str(), why.c_str());
      continue;
    }
    auto exe = target->compile(*call);
    std::vector<RtValue> in;
    for (const Value *v : call->operands()) {
      if (v->isBlockArgument()) {
        in.push_back(c.inputs[v->index()]);
      } else {
        const Attr &a = v->definingOp()->attr("value");
        in.push_back(a.kind() == AttrKind::Tensor ? RtValue(a.asTensor()) : RtValue(a.asNumber()));
      }
    }
    auto t0 = Clock::now();
    exe->run(in);
    double first = std::chrono::duration<double>(Clock::now() - t0).count();
    // Calls per repeat: about 50 ms of work.
    t0 = Clock::now();
    exe->run(in);
    double one = std::chrono::duration<double>(Clock::now() - t0).count();
    int calls = std::max(1, static_cast<int>(0.05 / std::max(one, 1e-7)));
    std::vector<double> per;
    for (int r = 0; r < repeats; ++r) {
      auto s = Clock::now();
      for (int i = 0; i < calls; ++i)
        exe->run(in);
      per.push_back(std::chrono::duration<double>(Clock::now() - s).count() / calls);
    }
    double med = median(per);
    std::printf("%-50s %10.2f %10.1f %10.1f\n", c.name.c_str(), first * 1e3, med * 1e6,
                c.flops / med * 1e-9);
  }
  return 0;
}
