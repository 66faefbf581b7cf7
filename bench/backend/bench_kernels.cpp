// Micro-benchmark of the CPU backend (not a test; figures go to docs/perf.md and docs/backend.md):
//   1. LLVM compile time per kernel (median and p90): every single-op f32 kernel of the
//      elementwise table, a set of fused chains and reduction kernels, each compiled from
//      scratch (cache off); then cold vs warm persistent compile cache for the fused and
//      reduction kernels (a fresh cache directory: the first compile stores, the second loads).
//   2. Bandwidth of large fused elementwise and reduction kernels, against memcpy's bandwidth
//      measured the same way in alternating rounds: on the kernel thread pool against memcpy
//      split over the same number of threads (XJIT_NUM_THREADS=1 gives single-thread figures).
//
// Usage: xjit-bench-kernels [--elements N] [--repeats R] [--compile-only] [--bandwidth-only]
//                           [--all-versions] (bandwidth of kernels holding every version)
// Bytes moved count every read and write once (memcpy of n bytes moves 2n).
#include "xjit/backend/compile_cache.h"
#include "xjit/backend/jit.h"
#include "xjit/backend/lower.h"
#include "xjit/ir/builder.h"
#include "xjit/ir/op_registry.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace xjit;
using namespace xjit::backend;

namespace {

using Clock = std::chrono::steady_clock;

/// How the bandwidth kernels are lowered (--all-versions: one kernel holding the general
/// version too, as before session 4, to compare the fast code of both).
LowerOptions gBandwidthLowering;

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

/// Reduction kernels as the fuse pass forms them, over rows of 1024 (a symbolic row count).
std::vector<std::unique_ptr<Graph>> reductionGraphs() {
  std::vector<std::unique_ptr<Graph>> out;
  auto make = [&](const std::string &name, auto body) {
    auto g = std::make_unique<Graph>(name);
    Value *x = g->addInput(Type::tensor(DType::F32, {DimExpr::symbol("s0"), DimExpr(1024)}), "x");
    Value *w = g->addInput(f32({1024}), "w");
    Builder b(g->body());
    b.createWithTypes("return", {body(b, x, w)}, {});
    out.push_back(std::move(g));
  };
  auto dims = [](int64_t d, bool keep) {
    return AttrMap{{"dims", Attr(std::vector<int64_t>{d})}, {"keepdim", Attr(keep)}};
  };
  make("row_sum", [&](Builder &b, Value *x, Value *) { return b.op("sum", {x}, dims(1, false)); });
  make("softmax", [](Builder &b, Value *x, Value *) {
    return b.op("softmax", {x}, {{"dim", Attr(int64_t{1})}});
  });
  make("softmax_decomposed", [&](Builder &b, Value *x, Value *) {
    Value *e = b.op("exp", {b.op("sub", {x, b.op("amax", {x}, dims(-1, true))})});
    return b.op("div", {e, b.op("sum", {e}, dims(-1, true))});
  });
  make("add_layer_norm", [](Builder &b, Value *x, Value *w) {
    Value *h = b.op("add", {x, w});
    return b.op("layer_norm", {h, w, w}, {{"normalized_shape", Attr(std::vector<int64_t>{1024})}});
  });
  make("rms_norm", [](Builder &b, Value *x, Value *w) {
    return b.op("rms_norm", {x, w}, {{"normalized_shape", Attr(std::vector<int64_t>{1024})}});
  });
  make("col_sum", [&](Builder &b, Value *x, Value *) { return b.op("sum", {x}, dims(0, true)); });
  // Every dim reduced: parallel chunks with partial results (docs/backend.md, "Threads").
  make("all_sum", [&](Builder &b, Value *x, Value *) {
    return b.op("sum", {x}, {{"dims", Attr(std::vector<int64_t>{0, 1})}, {"keepdim", Attr(false)}});
  });
  return out;
}

/// Compile times of every kernel lowered with `opts`, from scratch (cache off).
void benchCompileTimes(const LowerOptions &opts, const char *label) {
  setCompileCacheEnabled(false);
  std::printf("%s:\n", label);
  std::vector<double> total, opt, cg, cpu;
  auto compileOne = [&](const Graph &g) {
    LoweredKernel lk = lowerElementwiseBlock(*g.body(), g.name(), opts);
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
  size_t beforeReductions = total.size();
  for (auto &g : reductionGraphs())
    compileOne(*g);
  std::vector<double> redTotal(total.begin() + long(beforeReductions), total.end());
  std::vector<double> redCpu(cpu.begin() + long(beforeReductions), cpu.end());
  std::printf("  %zu reduction kernels: median %.2f ms wall, p90 %.2f; thread CPU median %.2f\n",
              redTotal.size(), percentile(redTotal, 0.5), percentile(redTotal, 0.9),
              percentile(redCpu, 0.5));
}

void benchCompile() {
  // Side by side, alternating: kernels holding the general strided nest too (as before session
  // 4), and the default, where it is a separate kernel compiled only when a call needs it.
  for (int round = 0; round < 2; ++round) {
    benchCompileTimes({.lazyGeneral = false}, "every version in one kernel");
    benchCompileTimes({}, "fast versions only, general version on demand (default)");
  }
  auto reductions = reductionGraphs();

  // Cold vs warm persistent cache: a fresh directory, each kernel compiled twice.
  std::string dir =
      (std::filesystem::temp_directory_path() / ("xjit-bench-cache-" + std::to_string(getpid())))
          .string();
  setenv("XJIT_CACHE_DIR", dir.c_str(), 1);
  setCompileCacheEnabled(true);
  std::vector<double> cold, warm;
  auto timeCompile = [](const Graph &g, bool expectHit) {
    auto t0 = Clock::now();
    LoweredKernel lk = lowerElementwiseBlock(*g.body(), g.name());
    auto ck = Jit::instance().compile(lk.kernel);
    double ms = seconds(t0, Clock::now()) * 1e3;
    if (ck->fromCache() != expectHit) std::fprintf(stderr, "unexpected cache result\n");
    return ms;
  };
  auto fusedForCache = fusedGraphs();
  std::vector<const Graph *> all;
  for (auto &g : fusedForCache)
    all.push_back(g.get());
  for (auto &g : reductions)
    all.push_back(g.get());
  for (const Graph *g : all)
    cold.push_back(timeCompile(*g, false));
  for (const Graph *g : all)
    warm.push_back(timeCompile(*g, true));
  std::printf("cache: %zu fused + reduction kernels, lowering + compile: cold (miss, store) median "
              "%.2f ms, p90 %.2f; warm (hit, link only) median %.3f ms, p90 %.3f\n",
              all.size(), percentile(cold, 0.5), percentile(cold, 0.9), percentile(warm, 0.5),
              percentile(warm, 0.9));
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
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

/// memcpy split into `threads` contiguous parts copied at once (the reference for kernels on
/// the same number of threads).
void parallelMemcpy(void *dst, const void *src, size_t bytes, unsigned threads) {
  if (threads <= 1) {
    std::memcpy(dst, src, bytes);
    return;
  }
  std::vector<std::thread> workers;
  size_t part = (bytes / threads + 63) / 64 * 64;
  for (unsigned t = 1; t < threads; ++t) {
    size_t begin = std::min(bytes, part * t), end = std::min(bytes, part * (t + 1));
    workers.emplace_back([=] {
      std::memcpy(static_cast<char *>(dst) + begin, static_cast<const char *>(src) + begin,
                  end - begin);
    });
  }
  std::memcpy(dst, src, std::min(bytes, part));
  for (auto &w : workers)
    w.join();
}

struct BandwidthResult {
  double kernelBest, kernelMedian, copyBest, copyMedian; // GB/s
};

/// Alternating rounds of memcpy (src -> scratch, `copyBytes`) and the kernel.
BandwidthResult timeAgainstMemcpy(const CompiledKernel &ck, const std::vector<Tensor> &buffers,
                                  double kernelBytes, const Tensor &src, const Tensor &scratch,
                                  double copyBytes, int repeats) {
  unsigned threads = kernelThreads();
  std::vector<double> tCopy, tKernel;
  parallelMemcpy(scratch.data(), src.data(), size_t(copyBytes), threads);
  ck.run(buffers);
  for (int r = 0; r < repeats; ++r) {
    auto t0 = Clock::now();
    parallelMemcpy(scratch.data(), src.data(), size_t(copyBytes), threads);
    auto t1 = Clock::now();
    ck.run(buffers);
    auto t2 = Clock::now();
    tCopy.push_back(seconds(t0, t1));
    tKernel.push_back(seconds(t1, t2));
  }
  auto bw = [](double bytesMoved, double t) { return bytesMoved / t * 1e-9; };
  return {bw(kernelBytes, percentile(tKernel, 0)), bw(kernelBytes, percentile(tKernel, 0.5)),
          bw(2 * copyBytes, percentile(tCopy, 0)), bw(2 * copyBytes, percentile(tCopy, 0.5))};
}

void printBandwidth(const char *name, const BandwidthResult &r) {
  std::printf("%-34s kernel %.2f GB/s best, %.2f median; memcpy %.2f best, %.2f median; "
              "%.0f%% of memcpy (best), %.0f%% (median)\n",
              name, r.kernelBest, r.kernelMedian, r.copyBest, r.copyMedian,
              100 * r.kernelBest / r.copyBest, 100 * r.kernelMedian / r.copyMedian);
}

void benchReductionBandwidth(int64_t n, int repeats) {
  const int64_t cols = 1024, rows = std::max<int64_t>(1, n / cols);
  Tensor x = randomTensor(rows * cols, 4).view({rows, cols}, {cols, 1}, 0);
  Tensor w = randomTensor(cols, 5);
  Tensor scratch = Tensor::empty(DType::F32, {rows * cols});
  auto bytes = double(rows * cols * 4);
  for (auto &g : reductionGraphs()) {
    LoweredKernel lk = lowerElementwiseBlock(*g->body(), g->name(), gBandwidthLowering);
    auto ck = Jit::instance().compile(lk.kernel);
    std::vector<Tensor> buffers;
    double moved = 0;
    for (const BufferParam &p : lk.kernel.buffers) {
      std::vector<int64_t> sizes;
      for (const DimExpr &d : p.sizes)
        sizes.push_back(d.isStatic() ? d.value() : rows);
      Tensor t = p.output ? Tensor::empty(p.dtype, sizes) : (p.rank() == 2 ? x : w);
      buffers.push_back(t);
      moved += double(t.numel() * 4);
    }
    std::string name = g->name() + " [" + std::to_string(rows) + "x1024]";
    printBandwidth(name.c_str(),
                   timeAgainstMemcpy(*ck, buffers, moved, x, scratch, bytes, repeats));
  }
}

void benchBandwidth(int64_t n, int repeats) {
  Tensor src = randomTensor(n, 1), dst = Tensor::empty(DType::F32, {n});
  auto bytes = double(n * 4);
  std::printf("bandwidth: %lld f32 per stream (%.0f MB), %u threads; GB/s count each read and "
              "write once; best and median of %d rounds, each timing memcpy (same threads) and "
              "then the kernel\n",
              (long long)n, bytes / 1e6, kernelThreads(), repeats);

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
    LoweredKernel lk = lowerElementwiseBlock(*g.body(), "bw", gBandwidthLowering);
    auto ck = Jit::instance().compile(lk.kernel);
    Tensor ta = c.fullOperands ? randomTensor(n, 2) : Tensor::empty(DType::F32, {});
    Tensor tb = c.fullOperands ? randomTensor(n, 3) : Tensor::empty(DType::F32, {});
    if (!c.fullOperands) {
      ta.setDouble(0, 0.7);
      tb.setDouble(0, 0.1);
    }
    std::vector<Tensor> buffers{src, ta, tb, dst};
    // Alternating rounds, so that both see the same interference from other processes.
    double moved = bytes * (c.fullOperands ? 4 : 2);
    printBandwidth(c.name, timeAgainstMemcpy(*ck, buffers, moved, src, dst, bytes, repeats));
  }
  // bf16 in and out (computed in f32, rounded per op): half the bytes per element.
  {
    Graph g("bw_bf16");
    Value *x = g.addInput(Type::tensor(DType::BF16, {DimExpr::symbol("n")}), "x");
    Builder b(g.body());
    b.createWithTypes("return", {b.op("add", {b.op("mul", {x, x}), x})}, {});
    LoweredKernel lk = lowerElementwiseBlock(*g.body(), "bw_bf16", gBandwidthLowering);
    auto ck = Jit::instance().compile(lk.kernel);
    Tensor xb = src.to(DType::BF16), yb = Tensor::empty(DType::BF16, {n});
    printBandwidth("y = x * x + x, bf16",
                   timeAgainstMemcpy(*ck, {xb, yb}, bytes, src, dst, bytes / 2, repeats));
  }
  benchReductionBandwidth(n, repeats);
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
    else if (a == "--all-versions")
      gBandwidthLowering.lazyGeneral = false;
    else {
      std::fprintf(stderr,
                   "usage: xjit-bench-kernels [--elements N] [--repeats R] [--compile-only] "
                   "[--bandwidth-only] [--all-versions]\n");
      return 2;
    }
  }
  std::printf("host: %s, %u kernel threads (XJIT_NUM_THREADS), %u hardware threads\n",
              Jit::instance().cpuName().c_str(), kernelThreads(),
              std::thread::hardware_concurrency());
  if (compile) benchCompile();
  if (bandwidth) benchBandwidth(n, repeats);
  return 0;
}
