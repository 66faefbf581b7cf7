// Per-call overhead of the runtime: a graph of 10 tiny elementwise ops (8 floats each), compiled
// without fusion so that each op is its own native kernel, timed per call; minus the time of
// calling the same 10 kernels directly on prepared buffers ("kernel time"). Side by side in one
// process, alternating, medians over repeats. Also: the fused graph (one kernel) and the
// reference interpreter on the same graph. Not a test: figures go to docs/perf.md.
#include "xjit/ir/interpreter.h"
#include "xjit/ir/parser.h"
#include "xjit/runtime/runtime.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <new>
#include <vector>

using namespace xjit;
using Clock = std::chrono::steady_clock;

// Counts heap allocations made through operator new (std::vector, shared_ptr, Tensor), to
// report how many allocations a call makes beyond the kernels' own.
static std::atomic<int64_t> gNews{0};
void *operator new(size_t n) {
  gNews.fetch_add(1, std::memory_order_relaxed);
  if (void *p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void *p) noexcept { std::free(p); }
void operator delete(void *p, size_t) noexcept { std::free(p); }

namespace {

const char *kGraph = R"(
graph @tiny(%x: f32[8], %y: f32[8]) -> (f32[8]) {
  %0 = add(%x, %y) : f32[8]
  %1 = mul(%0, %x) : f32[8]
  %2 = sub(%1, %y) : f32[8]
  %3 = relu(%2) : f32[8]
  %4 = neg(%3) : f32[8]
  %5 = abs(%4) : f32[8]
  %6 = add(%5, %0) : f32[8]
  %7 = mul(%6, %1) : f32[8]
  %8 = tanh(%7) : f32[8]
  %9 = add(%8, %x) : f32[8]
  return(%9)
})";

/// Nanoseconds per iteration of f, over `iters` iterations.
double nsPer(int iters, const std::function<void()> &f) {
  auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i)
    f();
  return std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / iters;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

} // namespace

int main(int argc, char **argv) {
  int repeats = argc > 1 ? std::atoi(argv[1]) : 15;
  const int iters = 20000;
  auto g = parseGraph(kGraph, "tiny.xir");
  backend::Target &target = runtime::cpuTarget();

  // Each op its own kernel: plan-memory only (no fuse).
  runtime::CompiledGraph unfused = runtime::compileGraph(*g, target, {.pipeline = "plan-memory"});
  runtime::CompiledGraph fused = runtime::compileGraph(*g, target);
  if (unfused.stats().targetOps != 10) {
    std::fprintf(stderr, "expected 10 native kernels, got %d\n", unfused.stats().targetOps);
    return 1;
  }

  Tensor x = Tensor::empty(DType::F32, {8}), y = Tensor::empty(DType::F32, {8});
  for (int64_t i = 0; i < 8; ++i) {
    x.setDouble(i, 0.1 * double(i) - 0.3);
    y.setDouble(i, 0.05 * double(i));
  }
  std::vector<RtValue> inputs{x, y};

  // The same 10 kernels called directly: operands prepared once, outputs preallocated.
  struct Call {
    std::shared_ptr<const backend::Executable> exe;
    std::vector<RtValue> in;
    std::vector<Tensor> out;
  };
  std::vector<Call> calls;
  {
    std::map<const Value *, RtValue> values{{g->input(0), x}, {g->input(1), y}};
    for (Op *op : *g->body()) {
      if (op->name() == "return") break;
      Call c;
      c.exe = target.compile(*op);
      for (Value *v : op->operands())
        c.in.push_back(values.at(v));
      c.out.push_back(Tensor::empty(DType::F32, {8}));
      values[op->result()] = c.out.back();
      calls.push_back(std::move(c));
    }
  }

  auto newsPer = [](const std::function<void()> &f) {
    int64_t before = gNews.load();
    for (int i = 0; i < 100; ++i)
      f();
    return double(gNews.load() - before) / 100;
  };
  double newsRuntime = newsPer([&] { unfused.run(inputs); });
  double newsKernels = newsPer([&] {
    for (const Call &c : calls)
      c.exe->runInto(c.in, c.out);
  });

  std::vector<double> tUnfused, tKernels, tFused, tInterp;
  for (int r = 0; r < repeats; ++r) {
    tUnfused.push_back(nsPer(iters, [&] { unfused.run(inputs); }));
    tKernels.push_back(nsPer(iters, [&] {
      for (const Call &c : calls)
        c.exe->runInto(c.in, c.out);
    }));
    tFused.push_back(nsPer(iters, [&] { fused.run(inputs); }));
    tInterp.push_back(nsPer(iters / 10, [&] { interpret(*g, inputs); }));
  }
  double unf = median(tUnfused), ker = median(tKernels);
  std::printf("graph of 10 tiny ops (f32[8]), medians of %d repeats x %d calls (ns per call)\n",
              repeats, iters);
  std::printf("  runtime, 10 native kernels:       %8.0f\n", unf);
  std::printf("  the 10 kernels called directly:    %8.0f\n", ker);
  std::printf("  runtime overhead beyond kernels:   %8.0f  (%.0f per op)\n", unf - ker,
              (unf - ker) / 10);
  std::printf("  allocations per call: runtime %.0f, kernels alone %.0f\n", newsRuntime,
              newsKernels);
  std::printf("  runtime, fused (1 native kernel):  %8.0f\n", median(tFused));
  std::printf("  reference interpreter:             %8.0f\n", median(tInterp));
  return 0;
}
