// Large host buffers are kept for reuse after release instead of going back to glibc at once.
//
// Why: a training step's results (the forward's saved values, the backward's gradients) are
// buffers of the same sizes every step, freed by PyTorch between steps (zero_grad, the end of
// backward). glibc serves buffers this large by mmap, or from the top of its heap, and gives
// them back to the kernel on free (munmap, or a trim of the heap top past M_TRIM_THRESHOLD), so
// the next step's buffers are fresh pages: one page fault and a kernel zero-fill per 4 KiB. The
// MLP step's backward measured 28-29 ms without faults and 36-40 ms with its 4-8k faults
// (docs/perf.md, "Training steps"). Kept here, a buffer of the same size is reused without a
// fault. Bounded: at most kMaxCachedBytes are kept (more are freed as before), and
// releaseCompilerMemory (after compiles) drops them all, so memory kept across models is
// bounded too. XJIT_HOST_BUFFER_CACHE=0 turns the reuse off (A/B measurements).
//
// A warm start's first run takes the same faults for its fresh results and arena (GPT-2's
// 25.7 MB of logits: 11 ms in the first call's LM head). Those buffers' sizes are known from
// an earlier process (HostBufferRecording), so makeHostBuffersAhead faults them in on another
// thread while the capture runs and leaves them here.
#include "xjit/backend/host_buffers.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <new>
#include <pthread.h>
#include <string_view>
#include <sys/resource.h>
#include <thread>
#include <unistd.h>
#include <unordered_map>
#include <unordered_set>

namespace xjit::backend {
namespace {

constexpr size_t kMinCachedBytes = size_t(1) << 20;   // smaller ones: glibc's bins reuse them
constexpr size_t kMaxCachedBytes = size_t(512) << 20; // a GPT step's results are about 120 MB

struct Cache {
  std::mutex mutex;
  std::unordered_multimap<size_t, void *> free; // released buffers by (rounded) size
  size_t bytes = 0;
  std::unordered_set<void *> ahead; // made ahead, not taken yet
  uint64_t drops = 0;               // dropCachedHostBuffers calls: buffers made before are late
  uint64_t madeAhead = 0, aheadUsed = 0;
  // makeHostBuffersAhead's threads running (tests wait for them).
  int aheadThreads = 0;
  std::condition_variable aheadDone;
};

Cache &cache() {
  static Cache *c = new Cache(); // never destroyed: buffers are released until process exit
  return *c;
}

bool cacheEnabled() {
  static const bool enabled = [] {
    const char *v = std::getenv("XJIT_HOST_BUFFER_CACHE");
    return !(v && std::string_view(v) == "0");
  }();
  return enabled;
}

/// A kept buffer of n bytes, or nullptr. One released by an earlier call is taken before one
/// made ahead (*ahead: it was), as a process without them would have reused the former too.
void *takeCached(size_t n, bool *ahead) {
  *ahead = false;
  if (n < kMinCachedBytes || !cacheEnabled()) return nullptr;
  Cache &c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  auto [first, last] = c.free.equal_range(n);
  if (first == last) return nullptr;
  auto it = std::find_if(first, last, [&](const auto &e) { return !c.ahead.count(e.second); });
  if (it == last) it = first;
  void *p = it->second;
  c.free.erase(it);
  c.bytes -= n;
  if (c.ahead.erase(p)) {
    ++c.aheadUsed;
    *ahead = true;
  }
  return p;
}

thread_local std::vector<int64_t> *tRecording = nullptr;

size_t roundedSize(int64_t nbytes) {
  return (static_cast<size_t>(std::max<int64_t>(nbytes, 1)) + 63) / 64 * 64;
}

void release(void *p, size_t n) {
  if (n >= kMinCachedBytes && cacheEnabled()) {
    Cache &c = cache();
    std::lock_guard<std::mutex> lock(c.mutex);
    if (c.bytes + n <= kMaxCachedBytes) {
      c.free.emplace(n, p);
      c.bytes += n;
      return;
    }
  }
  std::free(p);
}

} // namespace

std::shared_ptr<Storage> hostBuffer(int64_t nbytes) {
  size_t n = roundedSize(nbytes);
  bool ahead = false;
  void *p = takeCached(n, &ahead);
  // What a process without buffers made ahead takes fresh: a buffer reused within the call
  // (a size freed and asked again) is not one more to make ahead.
  if (tRecording && n >= kMinCachedBytes && (!p || ahead)) tRecording->push_back(nbytes);
  if (!p) p = std::aligned_alloc(64, n);
  if (!p) throw std::bad_alloc();
  return std::make_shared<Storage>(p, nbytes, [p, n] { release(p, n); });
}

void dropCachedHostBuffers() {
  Cache &c = cache();
  std::unordered_multimap<size_t, void *> dropped;
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    dropped.swap(c.free);
    c.bytes = 0;
    c.ahead.clear();
    ++c.drops;
  }
  for (auto &[n, p] : dropped)
    std::free(p);
}

int64_t cachedHostBufferBytes() {
  Cache &c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  return static_cast<int64_t>(c.bytes);
}

HostBufferRecording::HostBufferRecording() : outer_(tRecording) { tRecording = &sizes_; }

HostBufferRecording::~HostBufferRecording() {
  tRecording = outer_;
  if (outer_) outer_->insert(outer_->end(), sizes_.begin(), sizes_.end());
}

bool makeHostBuffersAhead(std::vector<int64_t> sizes) {
  static const bool enabled = [] {
    const char *v = std::getenv("XJIT_BUFFERS_AHEAD");
    return !(v && std::string_view(v) == "0");
  }();
  if (!enabled || !cacheEnabled() || sizes.empty()) return false;
  Cache &c = cache();
  // A fork while the thread holds the lock would leave the child's cache locked for good; the
  // child has no such thread.
  static std::once_flag hooked;
  std::call_once(hooked, [] {
    ::pthread_atfork([] { cache().mutex.lock(); }, [] { cache().mutex.unlock(); },
                     [] {
                       cache().aheadThreads = 0;
                       cache().mutex.unlock();
                     });
  });
  uint64_t drops;
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    drops = c.drops;
    ++c.aheadThreads;
  }
  std::thread([&c, drops, sizes = std::move(sizes)] {
    // Below the capture's priority (on a busy machine it keeps its share), above the gemm
    // warm-up's (library_warm_up.cpp), whose products have a standby meanwhile.
    ::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 10);
    const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    size_t total = 0;
    for (int64_t nbytes : sizes) {
      size_t n = roundedSize(nbytes);
      total += n;
      if (n < kMinCachedBytes || total > kMaxCachedBytes) continue;
      void *p = std::aligned_alloc(64, n);
      if (!p) break;
      // Written before anyone can take it: a buffer in the cache belongs to its taker.
      for (size_t i = 0; i < n; i += page)
        static_cast<volatile char *>(p)[i] = 0;
      std::unique_lock<std::mutex> lock(c.mutex);
      // Too late (the first run is over and its release dropped the cache), or no room.
      if (c.drops != drops || c.bytes + n > kMaxCachedBytes) {
        lock.unlock();
        std::free(p);
        continue;
      }
      c.free.emplace(n, p);
      c.bytes += n;
      c.ahead.insert(p);
      ++c.madeAhead;
    }
    std::lock_guard<std::mutex> lock(c.mutex);
    --c.aheadThreads;
    c.aheadDone.notify_all();
  }).detach();
  return true;
}

uint64_t hostBuffersMadeAhead() {
  Cache &c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.madeAhead;
}

uint64_t hostBuffersAheadUsed() {
  Cache &c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.aheadUsed;
}

void waitForHostBuffersAhead() {
  Cache &c = cache();
  std::unique_lock<std::mutex> lock(c.mutex);
  c.aheadDone.wait_for(lock, std::chrono::seconds(10), [&] { return c.aheadThreads == 0; });
}

Tensor hostTensor(DType dtype, const std::vector<int64_t> &sizes) {
  int64_t n = 1;
  for (int64_t s : sizes)
    n *= s;
  return Tensor(hostBuffer(n * dtypeSize(dtype)), dtype, sizes, contiguousStrides(sizes));
}

} // namespace xjit::backend
