// xjit-bench-passes: times the default "inference" pass pipeline on a 10,000-op graph shaped
// like a captured transformer encoder (linear/matmul/add/gelu/layer_norm/reshape/transpose/
// softmax) with the redundancies a tracer leaves behind: duplicated subexpressions, x*1 and
// x+0, reshape and transpose round trips, cast round trips, scale divisions, dead branches
// and dead shape arithmetic. Prints the median of 5 runs and, per pass, the time and op counts.
//
//   xjit-bench-passes [--ops N] [--runs R] [--pipeline P] [--print]
#include "xjit/ir/builder.h"
#include "xjit/ir/printer.h"
#include "xjit/ir/verifier.h"
#include "xjit/passes/pass.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

namespace {

using namespace xjit;

constexpr int64_t kSeq = 64, kHidden = 256, kHeads = 4, kHeadDim = kHidden / kHeads, kFf = 1024;

/// One encoder layer on x [s0, kSeq, kHidden]; its weights are graph inputs (not frozen).
class LayerBuilder {
public:
  LayerBuilder(Graph &g, Builder &b) : g_(g), b_(b) {}

  Value *weight(std::vector<int64_t> shape) {
    Shape s(shape.begin(), shape.end());
    return g_.addInput(Type::tensor(DType::F32, s), "w" + std::to_string(g_.numInputs()));
  }

  Value *linear(Value *x, int64_t in, int64_t out) {
    return b_.op("linear", {x, weight({out, in}), weight({out})});
  }

  Value *layerNorm(Value *x, Value *w, Value *bias) {
    return b_.op("layer_norm", {x, w, bias},
                 {{"normalized_shape", Attr(std::vector<int64_t>{kHidden})}});
  }
  Value *layerNorm(Value *x) { return layerNorm(x, weight({kHidden}), weight({kHidden})); }

  // [s0, S, H*D] -> [s0, H, S, D], through a reshape round trip a tracer leaves.
  Value *heads(Value *x) {
    Value *flat = b_.op("reshape", {x}, {{"shape", Attr(std::vector<int64_t>{-1, kHidden})}});
    Value *back =
        b_.op("reshape", {flat}, {{"shape", Attr(std::vector<int64_t>{-1, kSeq, kHidden})}});
    Value *split = b_.op("reshape", {back},
                         {{"shape", Attr(std::vector<int64_t>{-1, kSeq, kHeads, kHeadDim})}});
    return b_.op("transpose", {split}, {{"dim0", 1}, {"dim1", 2}});
  }

  Value *layer(Value *x) {
    Value *one = b_.constantFloat(1.0), *zero = b_.constantInt(0);
    // The pre-norm is traced twice, once for q and once for k/v (a duplicated subexpression).
    Value *lnw = weight({kHidden}), *lnb = weight({kHidden});
    Value *hq = layerNorm(x, lnw, lnb), *hkv = layerNorm(x, lnw, lnb);
    Value *q = heads(linear(hq, kHidden, kHidden));
    Value *k = heads(linear(hkv, kHidden, kHidden));
    Value *v = heads(linear(hkv, kHidden, kHidden));
    Value *kt = b_.op("transpose", {k}, {{"dim0", -2}, {"dim1", -1}});
    Value *scores = b_.op("matmul", {q, kt});
    Value *scale = b_.constantFloat(8.0); // sqrt(head_dim): a power of two
    Value *scaled = b_.op("mul", {b_.op("div", {scores, scale}), one});
    Value *probs = b_.op("softmax", {scaled}, {{"dim", -1}});
    // Dead: an attention-probability dropout traced in eval mode, and a mask that is unused.
    Value *dropped = b_.op("dropout", {probs}, {{"p", 0.1}, {"train", false}});
    b_.op("exp", {scaled});
    Value *ctx = b_.op("matmul", {dropped, v});
    Value *vt = b_.op("transpose", {b_.op("transpose", {ctx}, {{"dim0", 1}, {"dim1", 2}})},
                      {{"dim0", 1}, {"dim1", 2}}); // a transpose round trip
    Value *merged = b_.op(
        "reshape", {b_.op("contiguous", {b_.op("transpose", {vt}, {{"dim0", 1}, {"dim1", 2}})})},
        {{"shape", Attr(std::vector<int64_t>{-1, kSeq, kHidden})}});
    Value *attn = linear(merged, kHidden, kHidden);
    Value *x1 = b_.op("add", {b_.op("add", {x, attn}), zero});
    // Feed-forward, with a cast round trip through f64 and a clone of a fresh value.
    Value *h2 = layerNorm(x1);
    Value *up = b_.op("gelu", {linear(h2, kHidden, kFf)});
    Value *wide =
        b_.op("cast", {b_.op("cast", {up}, {{"dtype", DType::F64}})}, {{"dtype", DType::F32}});
    Value *down = linear(b_.op("clone", {wide}), kFf, kHidden);
    Value *x2 = b_.op("add", {x1, down});
    // Dead shape arithmetic (folds to constants, then goes) and a branch on a constant.
    Value *seq = b_.op("size", {x2}, {{"dim", 1}});
    b_.op("mul", {seq, b_.op("mul", {b_.constantInt(kHeads), b_.constantInt(kHeadDim)})});
    Value *flag = b_.constantBool(false);
    Op *branch = b_.createWithTypes("if", {flag}, {x2->type()});
    Builder then(branch->region(0)), other(branch->region(1));
    then.createWithTypes("yield", {then.op("neg", {x2})}, {});
    other.createWithTypes("yield", {x2}, {});
    return branch->result(0);
  }

private:
  Graph &g_;
  Builder &b_;
};

std::unique_ptr<Graph> buildGraph(size_t targetOps) {
  auto g = std::make_unique<Graph>("encoder");
  Value *x = g->addInput(Type::tensor(DType::F32, {DimExpr::symbol("s0"), kSeq, kHidden}), "x");
  Builder b(g->body());
  LayerBuilder layers(*g, b);
  while (g->numOps() < targetOps)
    x = layers.layer(x);
  b.createWithTypes("return", {x}, {});
  return g;
}

/// CPU time of this thread in ms: on a shared machine wall time also counts waiting for a core.
double threadCpuMs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

} // namespace

int main(int argc, char **argv) {
  size_t ops = 10000;
  int runs = 5;
  std::string pipeline = "inference";
  bool print = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--ops" && i + 1 < argc)
      ops = std::strtoul(argv[++i], nullptr, 10);
    else if (a == "--runs" && i + 1 < argc)
      runs = std::max(1, std::atoi(argv[++i]));
    else if (a == "--pipeline" && i + 1 < argc)
      pipeline = argv[++i];
    else if (a == "--print")
      print = true;
    else {
      std::fprintf(stderr,
                   "usage: xjit-bench-passes [--ops N] [--runs R] [--pipeline P] [--print]\n");
      return 1;
    }
  }
  try {
    auto graph = buildGraph(ops);
    if (auto errs = verifyGraph(*graph); !errs.empty()) {
      std::fprintf(stderr, "benchmark graph does not verify: %s\n", errs[0].c_str());
      return 2;
    }
    // Each step runs in its own PassManager so its CPU time can be taken alone.
    std::vector<passes::PassStep> steps = passes::parsePipeline(pipeline);
    std::vector<double> totals, cpuTotals;
    std::vector<std::vector<passes::PassRecord>> records(steps.size());
    std::vector<std::vector<double>> cpu(steps.size());
    std::unique_ptr<Graph> last;
    for (int r = 0; r < runs; ++r) {
      auto g = graph->clone(); // not timed
      double wall = 0, cpuSum = 0;
      for (size_t s = 0; s < steps.size(); ++s) {
        passes::PassManager pm;
        pm.add(steps[s]);
        double c0 = threadCpuMs();
        passes::PassRecord rec = pm.run(*g).at(0);
        cpu[s].push_back(threadCpuMs() - c0);
        cpuSum += cpu[s].back();
        wall += rec.milliseconds;
        records[s].push_back(std::move(rec));
      }
      totals.push_back(wall);
      cpuTotals.push_back(cpuSum);
      last = std::move(g);
    }
    if (auto errs = verifyGraph(*last); !errs.empty()) {
      std::fprintf(stderr, "pipeline output does not verify: %s\n", errs[0].c_str());
      return 2;
    }
    std::printf("pipeline '%s' on a %zu-op graph (%zu inputs), median of %d runs: %.2f ms wall, "
                "%.2f ms cpu; %zu ops after\n",
                pipeline.c_str(), graph->numOps(), graph->numInputs(), runs, median(totals),
                median(cpuTotals), last->numOps());
    std::printf("%-20s %9s %9s %8s %8s  statistics\n", "pass", "wall ms", "cpu ms", "ops in",
                "ops out");
    for (size_t s = 0; s < steps.size(); ++s) {
      std::vector<double> wall;
      for (const auto &rec : records[s])
        wall.push_back(rec.milliseconds);
      const auto &rec = records[s][0];
      std::printf("%-20s %9.2f %9.2f %8zu %8zu ", rec.name.c_str(), median(wall), median(cpu[s]),
                  rec.opsBefore, rec.opsAfter);
      for (const auto &[k, v] : rec.stats)
        std::printf(" %s=%lld", k.c_str(), static_cast<long long>(v));
      std::printf("\n");
    }
    if (print) std::printf("%s", printGraph(*last).c_str());
  } catch (const std::exception &e) {
    std::fprintf(stderr, "xjit-bench-passes: %s\n", e.what());
    return 2;
  }
  return 0;
}
