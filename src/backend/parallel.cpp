// The kernel thread pool: parallel loops of compiled kernels (Stmt::parallel) split their
// iterations into contiguous ranges run on LLVM's thread pool (llvm::StdThreadPool, one worker
// per core less the calling thread, which runs the first range itself). LLVM's pool is already
// linked and well kept; its task groups let several kernels run at once from different threads,
// and a kernel started on a pool thread (nested) waits by running tasks rather than blocking.
//
// Threads: XJIT_NUM_THREADS, else the machine's hardware threads (llvm::hardware_concurrency).
// A loop goes parallel only when its total work (iterations x elements per iteration) reaches
// kMinWorkPerThread per extra thread, so that tiny kernels pay no dispatch (a few microseconds).
#include "llvm_codegen.h"
#include "xjit/backend/jit.h"

#include <llvm/Support/ThreadPool.h>
#include <llvm/Support/Threading.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <pthread.h>
#include <vector>

namespace xjit::backend {
namespace {

/// Elements a thread must get for a parallel split to pay off (~tens of microseconds of work
/// against a few microseconds of dispatch and wake-up).
constexpr int64_t kMinWorkPerThread = int64_t(1) << 15;

unsigned configuredThreads() {
  if (const char *v = std::getenv("XJIT_NUM_THREADS"); v && *v) {
    long n = std::strtol(v, nullptr, 10);
    if (n >= 1) return unsigned(n);
  }
  return std::max(1u, llvm::hardware_concurrency().compute_thread_count());
}

struct Pool {
  unsigned threads = configuredThreads();
  // Workers for all but the calling thread; none when single-threaded.
  std::unique_ptr<llvm::StdThreadPool>
      pool = threads > 1
                 ? std::make_unique<llvm::StdThreadPool>(llvm::hardware_concurrency(threads - 1))
                 : nullptr;
};

std::atomic<uint64_t> gSplits{0};

// The pool, created on first use and never destroyed (kernels may run during static
// destruction). A forked child (a DataLoader worker, multiprocessing) inherits the pool object
// but not its threads, so tasks queued there would never run: the child drops it (leaked, its
// threads do not exist) and creates its own on first use.
std::mutex gPoolMutex;
std::atomic<Pool *> gPool{nullptr};

void lockForFork() { gPoolMutex.lock(); }
void unlockAfterFork() { gPoolMutex.unlock(); }
void resetInChild() {
  gPool.store(nullptr);
  gPoolMutex.unlock();
}

Pool &pool() {
  if (Pool *p = gPool.load(std::memory_order_acquire)) return *p;
  static const bool registered = [] {
    pthread_atfork(lockForFork, unlockAfterFork, resetInChild);
    return true;
  }();
  (void)registered;
  std::lock_guard<std::mutex> lock(gPoolMutex);
  if (!gPool.load()) gPool.store(new Pool());
  return *gPool.load();
}

} // namespace

unsigned kernelThreads() { return pool().threads; }
uint64_t parallelSplits() { return gSplits.load(); }

extern "C" int32_t xjit_rt_parallel_for(ParallelTask task, void *const *data, const int64_t *sizes,
                                        const int64_t *strides, const uint64_t *scalars, int64_t n,
                                        int64_t work) {
  if (n <= 0) return 0;
  Pool &p = pool();
  int64_t total = n * std::max<int64_t>(work, 1);
  int64_t parts = std::min<int64_t>({int64_t(p.threads), n, total / kMinWorkPerThread});
  if (parts <= 1 || !p.pool) return task(data, sizes, strides, scalars, 0, n);
  ++gSplits;
  std::vector<int32_t> codes(size_t(parts), 0);
  auto begin = [&](int64_t i) { return n * i / parts; };
  {
    llvm::ThreadPoolTaskGroup group(*p.pool);
    for (int64_t i = 1; i < parts; ++i)
      group.async([&, i] {
        codes[size_t(i)] = task(data, sizes, strides, scalars, begin(i), begin(i + 1));
      });
    codes[0] = task(data, sizes, strides, scalars, 0, begin(1));
    group.wait();
  }
  for (int32_t c : codes)
    if (c != 0) return c;
  return 0;
}

} // namespace xjit::backend
