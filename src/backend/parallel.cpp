// The kernel thread pool: parallel loops of compiled kernels (Stmt::parallel) split their
// iterations into contiguous ranges run on the process's OpenMP thread pool. PyTorch's bundled
// libgomp has the soname libgomp.so.1, so inside a Python process PyTorch, oneDNN and xjit's
// kernels share one pool: a separate pool (LLVM's, before) competed with OpenMP workers that
// spin between parallel regions, which on a small machine cost whole scheduler slices.
//
// Threads: XJIT_NUM_THREADS caps them, else OpenMP's (torch.set_num_threads sets it). A loop goes
// parallel only when its total work (iterations x elements per iteration) reaches
// kMinWorkPerThread per extra thread, so that tiny kernels pay no dispatch; inside another
// parallel region it runs on the calling thread, and so does every loop in a forked child: GNU
// OpenMP's pool does not survive fork (a DataLoader worker would deadlock), as PyTorch also
// runs single-threaded in forked children.
#include "llvm_codegen.h"
#include "xjit/backend/jit.h"

#include <omp.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <vector>

namespace xjit::backend {
namespace {

/// Elements a thread must get for a parallel split to pay off (~tens of microseconds of work
/// against a few microseconds of dispatch and wake-up).
constexpr int64_t kMinWorkPerThread = int64_t(1) << 15;

std::atomic<bool> gForkedChild{false};
void markForkedChild() { gForkedChild.store(true); }
const bool gAtForkRegistered = pthread_atfork(nullptr, nullptr, markForkedChild) == 0;

int threadCap() {
  static const int cap = [] {
    if (const char *v = std::getenv("XJIT_NUM_THREADS"); v && *v) {
      long n = std::strtol(v, nullptr, 10);
      if (n >= 1) return int(n);
    }
    return 0; // no cap
  }();
  return cap;
}

int availableThreads() {
  (void)gAtForkRegistered;
  if (gForkedChild.load(std::memory_order_relaxed)) return 1;
  int n = std::max(1, omp_get_max_threads());
  return threadCap() > 0 ? std::min(n, threadCap()) : n;
}

std::atomic<uint64_t> gSplits{0};

} // namespace

unsigned kernelThreads() { return unsigned(availableThreads()); }
uint64_t parallelSplits() { return gSplits.load(); }

int64_t parallelParts(int64_t n, int64_t work) {
  if (n <= 0) return 1;
  int64_t total = n * std::max<int64_t>(work, 1);
  int64_t parts = std::min<int64_t>({int64_t(availableThreads()), n, total / kMinWorkPerThread});
  return parts <= 1 || omp_in_parallel() ? 1 : parts;
}

void parallelRanges(int64_t n, int64_t parts, const std::function<void(int64_t, int64_t)> &fn) {
  parts = std::min(parts, n);
  if (parts <= 1) {
    if (n > 0) fn(0, n);
    return;
  }
  ++gSplits;
#pragma omp parallel for num_threads(int(parts)) schedule(static, 1)
  for (int64_t i = 0; i < parts; ++i)
    fn(n * i / parts, n * (i + 1) / parts);
}

void parallelCopy(const Tensor &dst, const Tensor &src) {
  const bool sameShape = dst.sizes() == src.sizes();
  int64_t d = 0; // src's outermost dim of more than one element
  while (d < src.rank() && src.size(d) == 1)
    ++d;
  const int64_t rows = d < src.rank() ? src.size(d) : 1,
                inner = src.numel() / std::max<int64_t>(rows, 1);
  const int64_t parts = rows > 1 && dst.dtype() == src.dtype() && dst.numel() == src.numel() &&
                                (sameShape || dst.isContiguous())
                            ? parallelParts(rows, inner)
                            : 1;
  if (parts <= 1) return dst.copyFrom(src);
  const size_t k = size_t(d);
  parallelRanges(rows, parts, [&](int64_t r0, int64_t r1) {
    std::vector<int64_t> sizes = src.sizes();
    sizes[k] = r1 - r0;
    Tensor from = src.view(sizes, src.strides(), src.offset() + r0 * src.strides()[k]);
    Tensor to = sameShape ? dst.view(sizes, dst.strides(), dst.offset() + r0 * dst.strides()[k])
                          : dst.view(sizes, contiguousStrides(sizes), dst.offset() + r0 * inner);
    to.copyFrom(from);
  });
}

extern "C" int32_t xjit_rt_parallel_for(ParallelTask task, void *const *data, const int64_t *sizes,
                                        const int64_t *strides, const uint64_t *scalars, int64_t n,
                                        int64_t work) {
  if (n <= 0) return 0;
  const int64_t parts = parallelParts(n, work);
  if (parts <= 1) return task(data, sizes, strides, scalars, 0, n);
  ++gSplits;
  std::vector<int32_t> codes(size_t(parts), 0);
  auto begin = [&](int64_t i) { return n * i / parts; };
#pragma omp parallel for num_threads(int(parts)) schedule(static, 1)
  for (int64_t i = 0; i < parts; ++i)
    codes[size_t(i)] = task(data, sizes, strides, scalars, begin(i), begin(i + 1));
  for (int32_t c : codes)
    if (c != 0) return c;
  return 0;
}

} // namespace xjit::backend
