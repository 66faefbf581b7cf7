// The kernel thread pool: parallel loops of compiled kernels (Stmt::parallel) split their
// iterations into contiguous chunks that the calling thread and the pool's workers claim one at
// a time, and the call returns as soon as every chunk is done.
//
// Why not OpenMP's `parallel for` (sessions 5-9): its region ends in a barrier that waits for
// every thread of the team to arrive, including a worker the scheduler has not run yet. On a
// busy machine (2 cores, other processes runnable) that is a scheduler slice per kernel: MLP b1
// at 2 threads took 56 ms a call instead of 2.5 ms. Here a worker that is late finds no chunk
// left and goes back to sleep; the caller waits only for chunks a worker has started.
//
// Workers sleep on a futex (C++20 atomic wait) after a short spin, so between kernels they do
// not compete with the OpenMP workers of PyTorch and oneDNN (which spin between their regions).
// Threads: XJIT_NUM_THREADS caps them, else OpenMP's (torch.set_num_threads sets it: PyTorch's
// bundled libgomp has the soname libgomp.so.1, the one linked here). A loop goes parallel only
// when its total work (iterations x elements per iteration) reaches kMinWorkPerThread per extra
// thread, so that tiny kernels pay no dispatch; inside an OpenMP region, on a pool worker, while
// another thread's loop holds the pool, and in a forked child (the pool's threads do not survive
// fork) it runs on the calling thread.
#include "llvm_codegen.h"
#include "xjit/backend/jit.h"

#include <omp.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace xjit::backend {
namespace {

/// Elements a thread must get for a parallel split to pay off (~tens of microseconds of work
/// against a few microseconds of wake-up).
constexpr int64_t kMinWorkPerThread = int64_t(1) << 15;
/// Chunks per thread: finer than one per thread so that a worker descheduled in the middle of a
/// chunk holds back a small part of the loop, not half of it.
constexpr int64_t kChunksPerThread = 4;
/// Polls before a worker sleeps, and before the caller waiting on a started chunk sleeps (a few
/// tens of microseconds: consecutive kernels of one call find the workers awake).
constexpr int kSpinPolls = 4000;

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

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
/// Set on pool workers and on a thread while it runs a pool loop: a loop nested in a chunk runs
/// on its thread.
thread_local bool tInPoolLoop = false;

/// One loop at a time: its chunks are claimed through `claim_`, which holds the job's generation
/// (high 32 bits) and its unclaimed chunks (low 32). A claim is a compare-and-swap that only
/// succeeds while the job is current and has chunks left, so a worker never runs a chunk of a
/// finished job, and the job's fields cannot change under a claimed chunk (the next job waits
/// for `done_`).
class KernelPool {
public:
  int32_t run(ParallelTask task, void *const *data, const int64_t *sizes, const int64_t *strides,
              const uint64_t *scalars, int64_t n, int64_t chunks, int threads) {
    std::unique_lock lock(mu_, std::try_to_lock);
    if (!lock) return task(data, sizes, strides, scalars, 0, n); // another thread's loop
    int workers = ensureWorkers(threads - 1);
    if (workers == 0) return task(data, sizes, strides, scalars, 0, n);
    job_ = Job{task, data, sizes, strides, scalars, n, chunks};
    workersTakingPart_.store(workers, std::memory_order_relaxed);
    tInPoolLoop = true;
    firstError_.store(kNoError, std::memory_order_relaxed);
    done_.store(0, std::memory_order_relaxed);
    uint32_t generation = ++generation_;
    claim_.store(uint64_t(generation) << 32 | uint64_t(chunks), std::memory_order_release);
    wake_.store(generation, std::memory_order_release);
    wake_.notify_all();
    work(generation);
    for (int polls = 0; done_.load(std::memory_order_acquire) != uint32_t(chunks); ++polls) {
      if (polls < kSpinPolls) {
        cpuRelax();
      } else {
        uint32_t seen = done_.load(std::memory_order_acquire);
        if (seen != uint32_t(chunks)) done_.wait(seen, std::memory_order_acquire);
      }
    }
    tInPoolLoop = false;
    uint64_t error = firstError_.load(std::memory_order_relaxed);
    return error == kNoError ? 0 : int32_t(uint32_t(error));
  }

private:
  struct Job {
    ParallelTask task = nullptr;
    void *const *data = nullptr;
    const int64_t *sizes = nullptr, *strides = nullptr;
    const uint64_t *scalars = nullptr;
    int64_t n = 0, chunks = 0;
  };

  /// Claims and runs chunks of job `generation` until none is left.
  void work(uint32_t generation) {
    uint64_t state = claim_.load(std::memory_order_acquire);
    for (;;) {
      uint32_t left = uint32_t(state);
      if (uint32_t(state >> 32) != generation || left == 0) return;
      if (!claim_.compare_exchange_weak(state, state - 1, std::memory_order_acq_rel,
                                        std::memory_order_acquire))
        continue;
      // The job cannot change before this chunk is counted done; read it before that.
      const Job job = job_;
      int64_t chunk = job.chunks - left;
      int64_t begin = job.n * chunk / job.chunks, end = job.n * (chunk + 1) / job.chunks;
      if (int32_t c = job.task(job.data, job.sizes, job.strides, job.scalars, begin, end)) {
        // Keep the code of the first failing range in range order (a deterministic message).
        uint64_t mine = uint64_t(chunk) << 32 | uint32_t(c);
        uint64_t seen = firstError_.load(std::memory_order_relaxed);
        while (mine < seen &&
               !firstError_.compare_exchange_weak(seen, mine, std::memory_order_relaxed))
          ;
      }
      if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 == uint32_t(job.chunks))
        done_.notify_one();
      state = claim_.load(std::memory_order_acquire);
    }
  }

  void workerLoop(int index) {
    tInPoolLoop = true;
    uint32_t seen = 0;
    for (;;) {
      uint32_t now = wake_.load(std::memory_order_acquire);
      for (int polls = 0; now == seen && polls < kSpinPolls; ++polls) {
        cpuRelax();
        now = wake_.load(std::memory_order_acquire);
      }
      if (now == seen) {
        wake_.wait(seen, std::memory_order_acquire);
        continue;
      }
      seen = now;
      // Workers beyond the loop's thread count sit it out (torch.set_num_threads lowered).
      if (index < workersTakingPart_.load(std::memory_order_relaxed)) work(now);
    }
  }

  /// Starts workers up to `count`; returns how many there are, at most `count` (fewer when the
  /// system refuses a thread).
  int ensureWorkers(int count) {
    while (workers_ < count) {
      try {
        // Detached and never joined: the pool lives until the process exits (a join at exit
        // could wait on a worker blocked inside an interpreter that is shutting down).
        std::thread(&KernelPool::workerLoop, this, workers_).detach();
      } catch (const std::system_error &) {
        break;
      }
      ++workers_;
    }
    return std::min(workers_, count);
  }

  std::mutex mu_;
  Job job_;
  std::atomic<uint64_t> claim_{0};
  std::atomic<uint32_t> done_{0};
  std::atomic<uint32_t> wake_{0};
  static constexpr uint64_t kNoError = ~uint64_t(0);
  std::atomic<uint64_t> firstError_{kNoError}; // (chunk << 32 | code) of the first failing range
  std::atomic<int> workersTakingPart_{0};
  uint32_t generation_ = 0;
  int workers_ = 0;
};

KernelPool &pool() {
  static KernelPool *p = new KernelPool; // leaked: detached workers use it until exit
  return *p;
}

} // namespace

unsigned kernelThreads() { return unsigned(availableThreads()); }
uint64_t parallelSplits() { return gSplits.load(); }

extern "C" int32_t xjit_rt_parallel_for(ParallelTask task, void *const *data, const int64_t *sizes,
                                        const int64_t *strides, const uint64_t *scalars, int64_t n,
                                        int64_t work) {
  if (n <= 0) return 0;
  int64_t total = n * std::max<int64_t>(work, 1);
  int64_t threads = std::min<int64_t>({int64_t(availableThreads()), n, total / kMinWorkPerThread});
  if (threads <= 1 || tInPoolLoop || omp_in_parallel())
    return task(data, sizes, strides, scalars, 0, n);
  ++gSplits;
  int64_t chunks = std::min<int64_t>({n, threads * kChunksPerThread, int64_t(1) << 30});
  return pool().run(task, data, sizes, strides, scalars, n, chunks, int(threads));
}

} // namespace xjit::backend
