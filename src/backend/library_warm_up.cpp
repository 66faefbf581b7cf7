// oneDNN's gemm kernels made ahead on a thread of their own (library_warm_up.h).
#include "xjit/backend/library_warm_up.h"

#include "dnnl_library.h"

#include "xjit/backend/compile_cache.h"
#include "xjit/backend/jit.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <pthread.h>
#include <string_view>
#include <sys/resource.h>
#include <thread>
#include <unistd.h>

namespace xjit::backend {
namespace {

/// Never destroyed: the thread may outlive static destructors that run before the exit hook.
struct WarmUp {
  std::once_flag once;
  std::atomic<bool> requested{false};
  std::atomic<uint64_t> started{0};
  std::atomic<uint64_t> fromMarks{0}, atPlans{0}; // who started it
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<bool> done{false};
  pid_t owner = 0; // a forked child has no such thread
};

WarmUp &warmUp() {
  static WarmUp *w = new WarmUp;
  return *w;
}

/// Waits for the thread (~30 ms at most): at exit, so that oneDNN is not torn down under it,
/// and before a fork, so that the child does not inherit oneDNN's once-flag half taken (its
/// first gemm call would wait for a thread it does not have).
void waitForThread() {
  WarmUp &w = warmUp();
  if (w.owner != ::getpid()) return;
  std::unique_lock lock(w.mu);
  w.cv.wait_for(lock, std::chrono::seconds(10), [&] { return w.done.load(); });
}

} // namespace

std::string gemmMarkKey(const std::string &file, const std::string &function, int line) {
  return compileCacheKey(
      {"gemm warm-up mark", compilerIdentity(), file, function, std::to_string(line)});
}

bool startGemmWarmUp(bool atPlan) {
  WarmUp &w = warmUp();
  bool now = false;
  std::call_once(w.once, [&] {
    w.requested = true;
    const char *v = std::getenv("XJIT_GEMM_WARMUP");
    if (v && std::string_view(v) == "0") return;
    w.owner = ::getpid();
    std::atexit(waitForThread);
    ::pthread_atfork(waitForThread, nullptr, nullptr);
    std::thread([&w] {
      // The lowest priority: on a busy machine the capture keeps the process's share of the
      // CPU (a run that waits for the kernels gives it back); a free core runs it all the same.
      ::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 19);
      try { // loading the path too: the compile would load it on the calling thread
        dnnlLibrary().makeGemmKernels();
      } catch (...) { // no oneDNN path: the compile that needs it reports that
      }
      std::lock_guard lock(w.mu);
      w.done = true;
      w.cv.notify_all();
    }).detach();
    w.started = 1;
    (atPlan ? w.atPlans : w.fromMarks) = 1;
    now = true;
  });
  return now;
}

namespace {

/// Never destroyed, as WarmUp.
struct EnginePreload {
  std::mutex mu;
  std::condition_variable cv;
  int running = 0;
  bool hooked = false;
  std::atomic<uint64_t> started{0};
};

EnginePreload &enginePreload() {
  static EnginePreload *p = new EnginePreload;
  return *p;
}

/// As waitForThread: no exit or fork while the thread is inside dlopen or LLVM's start-up.
void waitForEnginePreload() {
  EnginePreload &p = enginePreload();
  std::unique_lock lock(p.mu);
  p.cv.wait_for(lock, std::chrono::seconds(10), [&] { return p.running == 0; });
}

} // namespace

bool preloadLlvmEngine() {
  static const bool enabled = [] {
    const char *v = std::getenv("XJIT_PRELOAD");
    return !(v && std::string_view(v) == "0");
  }();
  if (!enabled || Jit::engineLoaded()) return false;
  EnginePreload &p = enginePreload();
  {
    std::lock_guard lock(p.mu);
    if (p.running > 0) return false;
    if (!p.hooked) {
      std::atexit(waitForEnginePreload);
      ::pthread_atfork(waitForEnginePreload, nullptr, nullptr);
      p.hooked = true;
    }
    ++p.running;
  }
  // The default priority, unlike the gemm warm-up's: the compile that follows the capture
  // waits for this work, so a low priority would only delay it on a busy machine.
  std::thread([&p] {
    try {
      Jit::preloadEngine();
    } catch (...) { // no engine: the compile that needs it reports that
    }
    std::lock_guard lock(p.mu);
    --p.running;
    p.cv.notify_all();
  }).detach();
  ++p.started;
  return true;
}

uint64_t llvmEnginePreloadsStarted() { return enginePreload().started.load(); }

bool gemmWarmUpRequested() { return warmUp().requested.load(); }

namespace {
std::atomic<bool> gHostWaitsAtExit{false};
} // namespace

void hostWaitsForLibraryThreadsAtExit() { gHostWaitsAtExit = true; }

bool hostWaitsAtExit() { return gHostWaitsAtExit.load(); }

namespace {
std::atomic<int> gPendingForTesting{-1}; // -1: the thread's state
} // namespace

void setGemmKernelsPendingForTesting(std::optional<bool> pending) {
  gPendingForTesting.store(pending ? int(*pending) : -1, std::memory_order_release);
}

bool gemmKernelsPending() {
  if (int p = gPendingForTesting.load(std::memory_order_acquire); p >= 0) return p == 1;
  const WarmUp &w = warmUp();
  return w.started.load(std::memory_order_acquire) != 0 && !w.done.load(std::memory_order_acquire);
}

uint64_t gemmWarmUpsStarted() { return warmUp().fromMarks.load(); }

uint64_t gemmWarmUpsAtPlans() { return warmUp().atPlans.load(); }

void waitForLibraryThreads() {
  waitForThread();
  waitForEnginePreload();
}

} // namespace xjit::backend
