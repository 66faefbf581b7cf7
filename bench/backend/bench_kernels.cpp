// Micro-benchmark of the CPU backend (not a test; figures go to docs/backend.md):
//   1. LLVM compile time per kernel (median and p90): every single-op f32 kernel of the
//      elementwise table and a set of fused chains, each compiled from scratch.
//   2. Bandwidth of large fused elementwise kernels on one thread, against memcpy's bandwidth
//      measured the same way: y = gelu(x * a + b) (a, b 0-d) and y = x * a + b (a, b full size).
//
// Usage: xjit-bench-kernels [--elements N] [--repeats R] [--compile-only] [--bandwidth-only]
// Bytes moved count every read and write once (memcpy of n bytes moves 2n).
#include "xjit/backend/jit.h"
#include "xjit/backend/lower.h"
#include "xjit/ir/builder.h"
#include "xjit/ir/op_registry.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace xjit;
using namespace xjit::backend;

namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[std::min(v.size() - 1, size_t(p * double(v.size() - 1) + 0.5))];
}

Type f32(std::vector<int64_t> dims) {
  Shape s(dims.begin(), dims.end());
  return Type::tensor(DType::F32, s);
}

/// A graph of one unary or binary f32 op (default attributes) over [s0, 128].
std::unique_ptr<Graph> singleOpGraph(const std::string &name) {
  auto g = std::make_unique<Graph>(name);
  Shape s{DimExpr::symbol("s0"), DimExpr(128)};
  Value *x = g->addInput(Type::tensor(DType::F32, s), "x");
  Value *y = g->addInput(Type::tensor(DType::F32, s), "y");
  Builder b(g->body());
  const OpDef &def = OpRegistry::instance().get(name);
  std::vector<Value *> operands{x};
  if (def.minOperands() >= 2) operands.push_back(y);
  if (def.minOperands() >= 3) operands.push_back(y);
  AttrMap attrs;
  if (name == "clamp") attrs["min"] = Attr(-1.0);
  if (name == "cast") attrs["dtype"] = Attr(DType::F64);
  if (name == "lerp") attrs["weight"] = Attr(0.3);
  if (name == "where") operands = {b.op("gt", {x, y}), x, y};
  Value *r = b.op(name, operands, attrs);
  b.createWithTypes("return", {r}, {});
  return g;
}

/// Fused chains of 3-6 ops with broadcasting, like a fusion pass would form.
std::vector<std::unique_ptr<Graph>> fusedGraphs() {
  std::vector<std::unique_ptr<Graph>> out;
  auto make = [&](const std::string &name, auto body) {
    auto g = std::make_unique<Graph>(name);
    Value *x = g->addInput(Type::tensor(DType::F32, {DimExpr::symbol("s0"), DimExpr(768)}), "x");
    Value *w = g->addInput(f32({768}), "w");
    Value *c = g->addInput(f32({}), "c");
    Builder b(g->body());
    b.createWithTypes("return", {body(b, x, w, c)}, {});
    out.push_back(std::move(g));
  };
  make("bias_gelu",
       [](Builder &b, Value *x, Value *w, Value *) { return b.op("gelu", {b.op("add", {x, w})}); });
  make("bias_gelu_tanh", [](Builder &b, Value *x, Value *w, Value *) {
    return b.op("gelu", {b.op("add", {x, w})}, {{"approximate", Attr("tanh")}});
  });
  make("scale_bias_silu", [](Builder &b, Value *x, Value *w, Value *c) {
    return b.op("silu", {b.op("add", {b.op("mul", {x, c}), w})});
  });
  make("residual_relu", [](Builder &b, Value *x, Value *w, Value *c) {
    Value *t = b.op("add", {b.op("mul", {x, w}), c});
    return b.op("relu", {b.op("add", {t, x})});
  });
  make("sigmoid_gate", [](Builder &b, Value *x, Value *w, Value *c) {
    Value *g = b.op("sigmoid", {b.op("mul", {x, w})});
    return b.op("sub", {b.op("mul", {x, g}), c});
  });
  make("tanh_clamp", [](Builder &b, Value *x, Value *w, Value *c) {
    Value *t = b.op("tanh", {b.op("div", {x, c})});
    return b.op("clamp", {b.op("mul", {t, w})}, {{"min", Attr(-0.5)}, {"max", Attr(0.5)}});
  });
  make("exp_log_where", [](Builder &b, Value *x, Value *w, Value *c) {
    Value *e = b.op("exp", {b.op("neg", {b.op("abs", {x})})});
    Value *l = b.op("log", {b.op("add", {e, c})});
    return b.op("where", {b.op("gt", {x, w}), l, e});
  });
  make("erf_pow_max", [](Builder &b, Value *x, Value *w, Value *c) {
    Value *p = b.op("pow", {b.op("erf", {x}), b.constantFloat(2.0)});
    return b.op("maximum", {b.op("mul", {p, w}), c});
  });
  return out;
}

void benchCompile() {
  std::vector<double> total, opt, cg, cpu;
  auto compileOne = [&](const Graph &g) {
    LoweredKernel lk = lowerElementwiseBlock(*g.body(), g.name());
    auto ck = Jit::instance().compile(lk.kernel);
    total.push_back(ck->times().total());
    opt.push_back(ck->times().optimize);
    cg.push_back(ck->times().codegen);
    cpu.push_back(ck->times().cpu);
  };
  int singles = 0;
  for (const std::string &name : elementwiseOpNames()) {
    // Ops that do not take f32 operands (bitwise ops) are skipped.
    try {
      compileOne(*singleOpGraph(name));
      ++singles;
    } catch (const TypeInferenceError &) {
    }
  }
  size_t singleCount = total.size();
  std::vector<double> singleTotal(total.begin(), total.end());
  for (auto &g : fusedGraphs())
    compileOne(*g);
  std::vector<double> fused(total.begin() + long(singleCount), total.end());
  std::printf("compile (ms): %d single-op kernels: median %.2f, p90 %.2f; %zu fused kernels: "
              "median %.2f, p90 %.2f\n",
              singles, percentile(singleTotal, 0.5), percentile(singleTotal, 0.9), fused.size(),
              percentile(fused, 0.5), percentile(fused, 0.9));
  std::printf("  all %zu: median %.2f ms wall (optimize %.2f, codegen %.2f); thread CPU time "
              "median %.2f ms, p90 %.2f ms\n",
              total.size(), percentile(total, 0.5), percentile(opt, 0.5), percentile(cg, 0.5),
              percentile(cpu, 0.5), percentile(cpu, 0.9));
  std::vector<double> fusedCpu(cpu.begin() + long(singleCount), cpu.end());
  std::printf("  fused kernels: thread CPU time median %.2f ms\n", percentile(fusedCpu, 0.5));
}

Tensor randomTensor(int64_t n, uint32_t seed) {
  Tensor t = Tensor::empty(DType::F32, {n});
  auto *p = reinterpret_cast<float *>(t.data());
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-3.f, 3.f);
  for (int64_t i = 0; i < n; ++i)
    p[i] = u(rng);
  return t;
}

void benchBandwidth(int64_t n, int repeats) {
  const double gb = 1e-9;
  Tensor src = randomTensor(n, 1), dst = Tensor::empty(DType::F32, {n});
  auto bytes = double(n * 4);
  std::printf("bandwidth: %lld f32 per stream (%.0f MB); GB/s count each read and write once; "
              "best and median of %d rounds, each timing memcpy and then the kernel\n",
              (long long)n, bytes / 1e6, repeats);

  struct Case {
    const char *name;
    bool fullOperands; // a, b as large as x (4 streams) or 0-d (2 streams)
    bool gelu;
  };
  for (Case c : {Case{"y = gelu(x * a + b), a, b 0-d", false, true},
                 Case{"y = x * a + b, a, b full", true, false},
                 Case{"y = gelu(x * a + b), a, b full", true, true}}) {
    Graph g("bw");
    Shape big{DimExpr::symbol("n")};
    Value *x = g.addInput(Type::tensor(DType::F32, big), "x");
    Type abType = c.fullOperands ? Type::tensor(DType::F32, big) : f32({});
    Value *a = g.addInput(abType, "a"), *bv = g.addInput(abType, "b");
    Builder b(g.body());
    Value *y = b.op("add", {b.op("mul", {x, a}), bv});
    if (c.gelu) y = b.op("gelu", {y});
    b.createWithTypes("return", {y}, {});
    LoweredKernel lk = lowerElementwiseBlock(*g.body(), "bw");
    auto ck = Jit::instance().compile(lk.kernel);
    Tensor ta = c.fullOperands ? randomTensor(n, 2) : Tensor::empty(DType::F32, {});
    Tensor tb = c.fullOperands ? randomTensor(n, 3) : Tensor::empty(DType::F32, {});
    if (!c.fullOperands) {
      ta.setDouble(0, 0.7);
      tb.setDouble(0, 0.1);
    }
    std::vector<Tensor> buffers{src, ta, tb, dst};
    // Alternating rounds, so that both see the same interference from other processes.
    std::vector<double> tCopy, tKernel;
    std::memcpy(dst.data(), src.data(), size_t(bytes));
    ck->run(buffers);
    for (int r = 0; r < repeats; ++r) {
      auto t0 = Clock::now();
      std::memcpy(dst.data(), src.data(), size_t(bytes));
      auto t1 = Clock::now();
      ck->run(buffers);
      auto t2 = Clock::now();
      tCopy.push_back(seconds(t0, t1));
      tKernel.push_back(seconds(t1, t2));
    }
    double moved = bytes * (c.fullOperands ? 4 : 2);
    auto bw = [&](double bytesMoved, double t) { return bytesMoved / t * gb; };
    double copyBest = bw(2 * bytes, percentile(tCopy, 0)),
           copyMed = bw(2 * bytes, percentile(tCopy, 0.5));
    double kBest = bw(moved, percentile(tKernel, 0)), kMed = bw(moved, percentile(tKernel, 0.5));
    std::printf("%-32s kernel %.2f GB/s best, %.2f median; memcpy %.2f best, %.2f median; "
                "%.0f%% of memcpy (best), %.0f%% (median)\n",
                c.name, kBest, kMed, copyBest, copyMed, 100 * kBest / copyBest,
                100 * kMed / copyMed);
  }
}

} // namespace

int main(int argc, char **argv) {
  int64_t n = 16 << 20;
  int repeats = 20;
  bool compile = true, bandwidth = true;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--elements" && i + 1 < argc)
      n = std::stoll(argv[++i]);
    else if (a == "--repeats" && i + 1 < argc)
      repeats = std::stoi(argv[++i]);
    else if (a == "--compile-only")
      bandwidth = false;
    else if (a == "--bandwidth-only")
      compile = false;
    else {
      std::fprintf(stderr,
                   "usage: xjit-bench-kernels [--elements N] [--repeats R] [--compile-only] "
                   "[--bandwidth-only]\n");
      return 2;
    }
  }
  std::printf("host: %s, single thread\n", Jit::instance().cpuName().c_str());
  if (compile) benchCompile();
  if (bandwidth) benchBandwidth(n, repeats);
  return 0;
}
