// Parallel loops: kernels large enough to split across the kernel thread pool agree with the
// reference interpreter (elementwise in the flat, unit-stride and general versions, reductions
// over inner and outer axes, norms), odd extents split at uneven boundaries, an error raised in
// one range stops the kernel, and tiny kernels stay on the calling thread. The pool gets three
// threads here (XJIT_NUM_THREADS, unless set by the caller) so that the splits happen on any
// machine; tolerances as in backend_reduction_test.cpp.
#include "xjit/backend/jit.h"
#include "xjit/backend/lower.h"
#include "xjit/ir/interpreter.h"
#include "xjit/ir/op_registry.h"
#include "xjit/ir/parser.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace xjit::backend {
namespace {

const bool kThreadsSet = [] {
  setenv("XJIT_NUM_THREADS", "3", /*overwrite=*/0);
  return true;
}();

Tensor randomTensor(DType d, const std::vector<int64_t> &sizes, std::mt19937 &rng) {
  Tensor t = Tensor::empty(d, sizes);
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (isFloating(d))
      t.setDouble(i, std::uniform_real_distribution<double>(-3, 3)(rng));
    else
      t.setInt(i, std::uniform_int_distribution<int64_t>(1, 9)(rng));
  }
  return t;
}

struct Compiled {
  LoweredKernel lk;
  std::shared_ptr<const CompiledKernel> ck;
};

Compiled compile(const Graph &g) {
  LoweredKernel lk = lowerElementwiseBlock(*g.body(), g.name());
  auto ck = Jit::instance().compile(lk.kernel);
  return {std::move(lk), std::move(ck)};
}

std::string compareWithInterpreter(const Graph &g, const Compiled &c,
                                   const std::vector<RtValue> &in, double rowSize) {
  std::vector<RtValue> ref = interpret(g, in), got = runLowered(c.lk, *c.ck, in);
  for (size_t o = 0; o < ref.size(); ++o) {
    const Tensor &r = ref[o].tensor(), &a = got[o].tensor();
    if (r.sizes() != a.sizes()) return "output " + std::to_string(o) + ": sizes differ";
    for (int64_t i = 0; i < r.numel(); ++i) {
      double x = a.getDouble(i), y = r.getDouble(i);
      if (!(x == y || std::abs(x - y) <= 2e-5 * (std::abs(y) + rowSize)))
        return "output " + std::to_string(o) + " element " + std::to_string(i) + ": compiled " +
               std::to_string(x) + ", reference " + std::to_string(y);
    }
  }
  return "";
}

std::string check(const std::string &text, const std::vector<Tensor> &inputs, double rowSize = 1) {
  auto g = parseGraph(text);
  Compiled c = compile(*g);
  std::string loops = printKernel(c.lk.kernel);
  if (loops.find("parallel for") == std::string::npos) return "no parallel loop:\n" + loops;
  std::vector<RtValue> in;
  for (const Tensor &t : inputs)
    in.emplace_back(t);
  return compareWithInterpreter(*g, c, in, rowSize);
}

TEST(BackendParallel, TinyKernelsStayOnOneThread) {
  EXPECT_GE(kernelThreads(), 2u);
  auto g = parseGraph(R"(graph @tiny(%x: f32[64,64]) -> (f32[64,64]) {
  %y = exp(%x) : f32[64,64]
  return(%y)
})");
  Compiled c = compile(*g);
  std::mt19937 rng(0);
  uint64_t before = parallelSplits();
  std::vector<RtValue> in = {RtValue(randomTensor(DType::F32, {64, 64}, rng))};
  EXPECT_EQ(compareWithInterpreter(*g, c, in, 1), "");
  EXPECT_EQ(parallelSplits(), before);
  auto big = parseGraph(R"(graph @big(%x: f32[256,1024]) -> (f32[256,1024]) {
  %y = exp(%x) : f32[256,1024]
  return(%y)
})");
  Compiled cb = compile(*big);
  std::vector<RtValue> bin = {RtValue(randomTensor(DType::F32, {256, 1024}, rng))};
  EXPECT_EQ(compareWithInterpreter(*big, cb, bin, 1), "");
  EXPECT_EQ(parallelSplits(), before + 1);
}

TEST(BackendParallel, LargeElementwiseKernelsMatch) {
  std::mt19937 rng(1);
  // 257 x 1031 elements: contiguous (the flat version) and with a broadcast row.
  Tensor x = randomTensor(DType::F32, {257, 1031}, rng), b = randomTensor(DType::F32, {1031}, rng);
  EXPECT_EQ(check(R"(graph @ew(%x: f32[257,1031], %b: f32[1031]) -> (f32[257,1031]) {
  %a = add(%x, %b) : f32[257,1031]
  %t = tanh(%a) : f32[257,1031]
  %y = mul(%t, %x) : f32[257,1031]
  return(%y)
})",
                  {x, b}),
            "");
  // A transposed input (the general strided version), odd extents.
  Tensor base = randomTensor(DType::F32, {1031, 257}, rng);
  Tensor xt = base.view({257, 1031}, {1, 257}, 0);
  EXPECT_EQ(check(R"(graph @ewt(%x: f32[257,1031]) -> (f32[257,1031]) {
  %y = exp(%x) : f32[257,1031]
  return(%y)
})",
                  {xt}),
            "");
}

TEST(BackendParallel, LargeReductionsMatch) {
  std::mt19937 rng(2);
  Tensor x = randomTensor(DType::F32, {301, 517}, rng);
  EXPECT_EQ(check(R"(graph @sm(%x: f32[301,517]) -> (f32[301,517], f32[301]) {
  %y = softmax(%x) {dim = 1} : f32[301,517]
  %v = var(%x) {dims = [1]} : f32[301]
  return(%y, %v)
})",
                  {x}, 23),
            "");
  // An outer-axis reduction: parallel over the kept (column) dim.
  EXPECT_EQ(check(R"(graph @cols(%x: f32[301,517]) -> (f32[517]) {
  %y = sum(%x) {dims = [0]} : f32[517]
  return(%y)
})",
                  {x}, 18),
            "");
  Tensor h = randomTensor(DType::F32, {3, 167, 256}, rng), w = randomTensor(DType::F32, {256}, rng);
  EXPECT_EQ(check(R"(graph @ln(%x: f32[3,167,256], %w: f32[256]) -> (f32[3,167,256]) {
  %y = layer_norm(%x, %w, %w) {normalized_shape = [256]} : f32[3,167,256]
  return(%y)
})",
                  {h, w}, 16),
            "");
}

// A leading batch of one: the parallel loop is the first dim of another extent (the heads of
// [1,H,S,S] attention scores, the rows of [1,S,D] layer_norm input, a broadcast elementwise
// kernel's rows); with the outermost dim, these kernels ran on one thread.
TEST(BackendParallel, LeadingUnitDimsStillSplit) {
  std::mt19937 rng(5);
  Tensor s = randomTensor(DType::F32, {1, 6, 97, 131}, rng);
  Tensor h = randomTensor(DType::F32, {1, 301, 256}, rng), w = randomTensor(DType::F32, {256}, rng);
  Tensor e = randomTensor(DType::F32, {1, 301, 257}, rng), b = randomTensor(DType::F32, {257}, rng);
  struct Case {
    const char *text;
    std::vector<Tensor> inputs;
    double rowSize;
  } cases[] = {
      {R"(graph @scores(%x: f32[1,6,97,131]) -> (f32[1,6,97,131]) {
  %y = softmax(%x) {dim = -1} : f32[1,6,97,131]
  return(%y)
})",
       {s},
       1},
      {R"(graph @ln(%x: f32[1,301,256], %w: f32[256]) -> (f32[1,301,256]) {
  %y = layer_norm(%x, %w, %w) {normalized_shape = [256]} : f32[1,301,256]
  return(%y)
})",
       {h, w},
       16},
      {R"(graph @bias(%x: f32[1,301,257], %b: f32[257]) -> (f32[1,301,257]) {
  %a = add(%x, %b) : f32[1,301,257]
  %y = tanh(%a) : f32[1,301,257]
  return(%y)
})",
       {e, b},
       1},
  };
  for (const Case &c : cases) {
    uint64_t before = parallelSplits();
    EXPECT_EQ(check(c.text, c.inputs, c.rowSize), "") << c.text;
    EXPECT_GT(parallelSplits(), before) << "ran on one thread:\n" << c.text;
  }
}

TEST(BackendParallel, ReductionsOverEveryDimRunInChunks) {
  std::mt19937 rng(4);
  Tensor x = randomTensor(DType::F32, {301, 517}, rng);
  auto g = parseGraph(R"(graph @all(%x: f32[301,517]) -> (f32[], f32[1,1], f32[], f32[]) {
  %a = abs(%x) : f32[301,517]
  %s = sum(%a) {dims = [0, 1]} : f32[]
  %m = mean(%x) {dims = [0, 1], keepdim = true} : f32[1,1]
  %mx = amax(%x) {dims = [0, 1]} : f32[]
  %v = var(%x) {dims = [0, 1]} : f32[]
  return(%s, %m, %mx, %v)
})");
  Compiled c = compile(*g);
  std::string loops = printKernel(c.lk.kernel);
  // sum, mean, amax and var's mean pass are chunked; var's second pass reads the mean: serial.
  EXPECT_NE(loops.find("partials"), std::string::npos) << loops;
  std::vector<RtValue> in = {RtValue(x)};
  uint64_t before = parallelSplits();
  EXPECT_EQ(compareWithInterpreter(*g, c, in, std::sqrt(301.0 * 517)), "");
  EXPECT_GT(parallelSplits(), before);
  // Deterministic: the chunks do not depend on the threads, so one thread gives the same bits.
  std::vector<RtValue> two = runLowered(c.lk, *c.ck, in);
  int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  uint64_t single = parallelSplits();
  std::vector<RtValue> one = runLowered(c.lk, *c.ck, in);
  EXPECT_EQ(parallelSplits(), single);
  omp_set_num_threads(threads);
  for (size_t o = 0; o < one.size(); ++o)
    EXPECT_EQ(one[o].tensor().getDouble(0), two[o].tensor().getDouble(0)) << "output " << o;
  // Integers (exact), odd extents, a product, and NaN propagating through the max of chunks.
  Tensor i = randomTensor(DType::I64, {1031, 97}, rng);
  EXPECT_EQ(check(R"(graph @ints(%x: i64[1031,97]) -> (i64[], i64[]) {
  %s = sum(%x) {dims = [0, 1]} : i64[]
  %m = amin(%x) {dims = [1, 0]} : i64[]
  return(%s, %m)
})",
                  {i}),
            "");
  Tensor n = randomTensor(DType::F32, {2, 300, 200}, rng);
  n.setDouble(2 * 300 * 200 - 5, NAN); // in the last chunk
  auto gn = parseGraph(R"(graph @nan(%x: f32[2,300,200]) -> (f32[]) {
  %m = amax(%x) {dims = [0, 1, 2]} : f32[]
  return(%m)
})");
  Compiled cn = compile(*gn);
  EXPECT_NE(printKernel(cn.lk.kernel).find("partials"), std::string::npos);
  EXPECT_TRUE(std::isnan(
      runLowered(cn.lk, *cn.ck, std::vector<RtValue>{RtValue(n)}).at(0).tensor().getDouble(0)));
  // Fewer outer iterations than chunks (one chunk per iteration), and a 1-d input.
  Tensor v = randomTensor(DType::F32, {100003}, rng);
  EXPECT_EQ(check(R"(graph @vec(%x: f32[100003]) -> (f32[]) {
  %s = sum(%x) {dims = [0]} : f32[]
  return(%s)
})",
                  {v}, std::sqrt(100003.0)),
            "");
}

TEST(BackendParallel, ForkedChildrenRunParallelKernels) {
  // The parent's pool threads do not exist in a forked child (GNU OpenMP's pool does not survive
  // fork): the child must run its kernels on its own thread rather than wait forever.
  auto g = parseGraph(R"(graph @big(%x: f32[256,1024]) -> (f32[256,1024]) {
  %y = sigmoid(%x) : f32[256,1024]
  return(%y)
})");
  Compiled c = compile(*g);
  std::mt19937 rng(6);
  std::vector<RtValue> in = {RtValue(randomTensor(DType::F32, {256, 1024}, rng))};
  uint64_t before = parallelSplits();
  ASSERT_EQ(compareWithInterpreter(*g, c, in, 1), ""); // the pool exists now
  ASSERT_GT(parallelSplits(), before);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    alarm(60); // a deadlock fails the test instead of hanging it
    uint64_t splits = parallelSplits();
    bool ok = compareWithInterpreter(*g, c, in, 1).empty() && parallelSplits() == splits;
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
}

TEST(BackendParallel, AnErrorInOneRangeStopsTheKernel) {
  auto g = parseGraph(R"(graph @div(%x: i64[300,400], %y: i64[300,400]) -> (i64[300,400]) {
  %z = div(%x, %y) {rounding_mode = "trunc"} : i64[300,400]
  return(%z)
})");
  Compiled c = compile(*g);
  std::mt19937 rng(3);
  Tensor x = randomTensor(DType::I64, {300, 400}, rng),
         y = randomTensor(DType::I64, {300, 400}, rng);
  std::vector<RtValue> in = {RtValue(x), RtValue(y)};
  EXPECT_NO_THROW(runLowered(c.lk, *c.ck, in));
  y.setInt(299 * 400 + 17, 0); // in the last range
  EXPECT_THROW(runLowered(c.lk, *c.ck, in), KernelError);
}

} // namespace
} // namespace xjit::backend

namespace xjit::backend {
namespace {

// The pool's own contract, through the runtime entry point the generated code calls.
using Task = int32_t (*)(void *const *, const int64_t *, const int64_t *, const uint64_t *, int64_t,
                         int64_t);
extern "C" int32_t xjit_rt_parallel_for(Task task, void *const *data, const int64_t *sizes,
                                        const int64_t *strides, const uint64_t *scalars, int64_t n,
                                        int64_t work);

int32_t countIterations(void *const *data, const int64_t *, const int64_t *, const uint64_t *,
                        int64_t begin, int64_t end) {
  auto *counts = static_cast<std::atomic<int32_t> *>(data[0]);
  for (int64_t i = begin; i < end; ++i)
    counts[i].fetch_add(1, std::memory_order_relaxed);
  return 0;
}

int32_t failAtMarkedIterations(void *const *data, const int64_t *, const int64_t *,
                               const uint64_t *, int64_t begin, int64_t end) {
  const int32_t *codes = static_cast<const int32_t *>(data[0]);
  for (int64_t i = begin; i < end; ++i)
    if (codes[i] != 0) return codes[i];
  return 0;
}

TEST(BackendParallel, EveryIterationRunsOnceUnderConcurrentCallers) {
  // Four threads each run 300 loops of assorted lengths at once: every iteration of every loop
  // runs exactly once.
  auto caller = [](int seed, std::string *failure) {
    std::mt19937 rng(seed);
    for (int call = 0; call < 300 && failure->empty(); ++call) {
      int64_t n = std::uniform_int_distribution<int64_t>(1, 5000)(rng);
      std::vector<std::atomic<int32_t>> counts(static_cast<size_t>(n));
      void *data[] = {counts.data()};
      if (xjit_rt_parallel_for(countIterations, data, nullptr, nullptr, nullptr, n, 1 << 12) != 0)
        *failure = "nonzero code";
      for (int64_t i = 0; i < n && failure->empty(); ++i)
        if (counts[size_t(i)].load() != 1)
          *failure = "call " + std::to_string(call) + " (n " + std::to_string(n) + "): iteration " +
                     std::to_string(i) + " ran " + std::to_string(counts[size_t(i)].load()) +
                     " times";
    }
  };
  std::vector<std::string> failures(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back(caller, t, &failures[size_t(t)]);
  for (std::thread &t : threads)
    t.join();
  for (const std::string &f : failures)
    EXPECT_EQ(f, "");
}

TEST(BackendParallel, TheFirstFailingRangeInOrderGivesTheCode) {
  // Ranges run on any thread; the code returned is the lowest failing range's, so the error
  // message does not depend on timing.
  const int64_t n = 4096;
  std::vector<int32_t> codes(size_t(n), 0);
  codes[4000] = 7;
  codes[3000] = 5;
  void *data[] = {codes.data()};
  for (int i = 0; i < 50; ++i)
    ASSERT_EQ(
        xjit_rt_parallel_for(failAtMarkedIterations, data, nullptr, nullptr, nullptr, n, 1 << 12),
        5);
  codes[3000] = 0;
  EXPECT_EQ(
      xjit_rt_parallel_for(failAtMarkedIterations, data, nullptr, nullptr, nullptr, n, 1 << 12), 7);
}

// Native kernels written in C++ (the max-pool gradient) split their work with parallelParts
// and parallelRanges: the same rule as the compiled loops, every index once.
TEST(BackendParallel, NativeRangesFollowTheLoopsRule) {
  EXPECT_EQ(parallelParts(1000, 1), 1); // below 32K elements per extra thread
  EXPECT_EQ(parallelParts(0, 1), 1);
  const int64_t parts = parallelParts(int64_t(1) << 20, 1);
  EXPECT_EQ(parts, std::min<int64_t>(kernelThreads(), 32));
  const int64_t n = 1001;
  std::vector<std::atomic<int>> hits(n);
  uint64_t before = parallelSplits();
  parallelRanges(n, 3, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      hits[size_t(i)].fetch_add(1);
  });
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(hits[size_t(i)].load(), 1) << i;
  EXPECT_EQ(parallelSplits(), before + 1);
  int calls = 0;
  parallelRanges(1, 4, [&](int64_t begin, int64_t end) { calls += begin == 0 && end == 1; });
  EXPECT_EQ(calls, 1); // at most n ranges: one, on the calling thread
  EXPECT_EQ(parallelSplits(), before + 1);
}

/// A tensor of `sizes` whose elements are 0, 1, 2... in row-major order, laid out with its dims
/// in memory order `order` (outermost first).
Tensor iota(const std::vector<int64_t> &sizes, const std::vector<size_t> &order) {
  std::vector<int64_t> strides(sizes.size());
  int64_t step = 1;
  for (size_t k = order.size(); k-- > 0;) {
    strides[order[k]] = step;
    step *= sizes[order[k]];
  }
  Tensor t(std::make_shared<Storage>(step * 4), DType::F32, sizes, strides, 0);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.setDouble(i, double(i));
  return t;
}

TEST(BackendParallel, ParallelCopyMatchesCopyFrom) {
  // Large enough to split (2^17+ elements); a transposed source, a strided destination slice, a
  // contiguous destination of another shape (a reshape's copy), leading unit dims.
  struct Case {
    std::vector<int64_t> src, dst;
    std::vector<size_t> srcOrder;
    bool dstSlice;
  };
  const std::vector<Case> cases = {
      {{8, 4, 128, 64}, {8, 4, 128, 64}, {0, 2, 1, 3}, false},
      {{8, 128, 4, 64}, {8, 128, 4, 64}, {0, 2, 1, 3}, true},
      {{1, 1, 300, 700}, {1, 1, 300, 700}, {0, 1, 3, 2}, false},
      {{512, 256}, {256, 512}, {1, 0}, false},
      {{3, 100001}, {3, 100001}, {0, 1}, true},
  };
  const uint64_t before = parallelSplits();
  for (const Case &c : cases) {
    Tensor src = iota(c.src, c.srcOrder);
    Tensor want = Tensor::empty(DType::F32, c.dst);
    want.copyFrom(src);
    // A slice: each row of the destination is part of a row twice as long, one element in.
    std::vector<int64_t> wide = c.dst;
    wide.back() *= 2;
    Tensor backing = Tensor::empty(DType::F32, wide);
    Tensor dst =
        c.dstSlice ? backing.view(c.dst, backing.strides(), 1) : Tensor::empty(DType::F32, c.dst);
    parallelCopy(dst, src);
    for (int64_t i = 0; i < want.numel(); ++i)
      ASSERT_EQ(dst.getDouble(i), want.getDouble(i)) << "element " << i;
  }
  if (kernelThreads() > 1) EXPECT_GT(parallelSplits(), before);
}

} // namespace
} // namespace xjit::backend
