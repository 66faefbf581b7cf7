// Large host buffers are anonymous mappings whose pages are kept after release and handed out
// again, for any size, instead of going back to the kernel.
//
// Why keep them: a training step's results (the forward's saved values, the backward's
// gradients) are freed by PyTorch between and within steps (zero_grad, the backward freeing
// saved values at their last use). glibc serves buffers this large by mmap, or from the top of
// its heap, and gives them back to the kernel on free, so the next ones are fresh pages: one
// page fault and a kernel zero-fill per 4 KiB (~3 us here: 73 ms per 100 MB). The MLP step's
// backward measured 28-29 ms without faults and 36-40 ms with its 4-8k faults (docs/perf.md,
// "Training steps").
//
// Why any size (session 23): kept only for a request of the same size, the saved values the
// backward frees could not serve its gradients (other sizes), so the step's peak was eager's
// plus the kept buffers (5-8% over). Here a released buffer's pages serve the next request of
// any size: a request takes a kept block of its size whole, else the front of a larger one
// (split in place: no system call), else moves the largest kept blocks' pages into a new
// mapping with mremap (the page tables move: ~0.4 ms per 100 MB, no fault, no zero-fill) and
// only what they do not cover is fresh. Fresh pages are thus taken only when the kept ones run
// out, so the memory held (live plus kept) grows no higher than the live buffers' peak.
// Released neighbours coalesce. A block is a run of whole mappings or parts of one (mremap moves
// only within one mapping), at most kMaxSegments per buffer.
//
// Bounded: at most kMaxCachedBytes are kept (more go back to the kernel), and
// releaseCompilerMemory (after compiles) drops them all, so memory kept across models is bounded
// too. XJIT_HOST_BUFFER_CACHE=0 turns this off (glibc's buffers, A/B measurements).
//
// A warm start's first run takes the same faults for its fresh results and arena (GPT-2's
// 25.7 MB of logits: 11 ms in the first call's LM head). Those buffers' sizes are known from
// an earlier process (HostBufferRecording), so makeHostBuffersAhead faults them in on another
// thread while the capture runs and leaves them here, for a request of their own size.
#include "xjit/backend/host_buffers.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <pthread.h>
#include <string_view>
#include <sys/mman.h>
#include <sys/resource.h>
#include <thread>
#include <unistd.h>
#include <unordered_map>

namespace xjit::backend {
namespace {

constexpr size_t kMinCachedBytes = size_t(1) << 20;   // smaller ones: glibc's bins reuse them
constexpr size_t kMaxCachedBytes = size_t(512) << 20; // a GPT step's results are about 120 MB
// Mappings per buffer: bounds one request's mremap calls.
constexpr size_t kMaxSegments = 64;
// Mappings of large buffers, live and kept, past which kept pages are no longer moved and a
// released buffer of several is unmapped: splits add mappings, and the kernel allows a process
// 65530 (vm.max_map_count) in all.
constexpr int64_t kMaxMappings = 8192;

size_t pageSize() {
  static const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return page;
}

/// Kept pages at some address, `size` bytes: `segments` are the lengths of the mappings (or
/// parts of one) they span, in address order.
struct Block {
  size_t size = 0;
  std::vector<size_t> segments;
};

/// Splits off the front `n` bytes of `b` (0 < n < b.size); `b` keeps the rest.
Block splitFront(Block &b, size_t n) {
  Block front;
  front.size = n;
  size_t i = 0;
  while (n > 0) {
    if (b.segments[i] <= n) {
      front.segments.push_back(b.segments[i]);
      n -= b.segments[i++];
    } else {
      front.segments.push_back(n);
      b.segments[i] -= n;
      n = 0;
    }
  }
  b.segments.erase(b.segments.begin(), b.segments.begin() + static_cast<std::ptrdiff_t>(i));
  b.size -= front.size;
  return front;
}

struct Cache {
  std::mutex mutex;
  std::map<uintptr_t, Block> released; // by address: neighbours coalesce
  std::multimap<size_t, uintptr_t> bySize;
  std::unordered_multimap<size_t, void *> ahead; // made ahead: taken by their own size only
  size_t bytes = 0;                              // kept: released and made ahead
  uint64_t drops = 0; // dropCachedHostBuffers calls: buffers made before are late
  uint64_t madeAhead = 0, aheadUsed = 0;
  HostBufferCounters counters; // counters.mappings: see kMaxMappings
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

// The Cache functions below are called with its lock held.

void eraseBySize(Cache &c, size_t size, uintptr_t at) {
  auto [first, last] = c.bySize.equal_range(size);
  for (auto it = first; it != last; ++it)
    if (it->second == at) {
      c.bySize.erase(it);
      return;
    }
}

Block takeReleased(Cache &c, std::map<uintptr_t, Block>::iterator it) {
  Block b = std::move(it->second);
  eraseBySize(c, b.size, it->first);
  c.released.erase(it);
  c.bytes -= b.size;
  return b;
}

/// Keeps `b` at `at`, merged with released neighbours (as long as the merged block spans at
/// most kMaxSegments mappings).
void keepReleased(Cache &c, uintptr_t at, Block b) {
  auto next = c.released.lower_bound(at);
  if (next != c.released.end() && at + b.size == next->first &&
      b.segments.size() + next->second.segments.size() <= kMaxSegments) {
    Block after = takeReleased(c, next);
    b.segments.insert(b.segments.end(), after.segments.begin(), after.segments.end());
    b.size += after.size;
  }
  auto prev = c.released.lower_bound(at);
  if (prev != c.released.begin()) {
    --prev;
    if (prev->first + prev->second.size == at &&
        b.segments.size() + prev->second.segments.size() <= kMaxSegments) {
      at = prev->first;
      Block before = takeReleased(c, prev);
      before.segments.insert(before.segments.end(), b.segments.begin(), b.segments.end());
      before.size += b.size;
      b = std::move(before);
    }
  }
  c.bySize.emplace(b.size, at);
  c.bytes += b.size;
  c.released.emplace(at, std::move(b));
}

/// Pages for a request of `n` bytes (a multiple of the page size).
struct Pages {
  void *data = nullptr;
  std::vector<size_t> segments;
  bool ahead = false; // a buffer made ahead
  size_t fresh = 0;   // bytes of new pages (faulted in by their first write)
  bool taken = false; // from kept pages whole, no system call
  size_t remaps = 0;  // mremap calls that moved kept pages in
  int64_t mappingsAdded = 0;
};

/// Pieces of kept pages to move into a new mapping.
struct Plan {
  std::vector<std::pair<uintptr_t, Block>> pieces;
};

/// Takes what the cache holds for `n` bytes: a block of that size whole (released before made
/// ahead, as a process without those would have reused the former too), the front of the
/// smallest larger released block, or else released blocks, largest first, to move (`plan`).
Pages takeKept(Cache &c, size_t n, Plan &plan) {
  Pages got;
  if (auto it = c.bySize.find(n); it != c.bySize.end()) {
    uintptr_t at = it->second;
    got.segments = takeReleased(c, c.released.find(at)).segments;
    got.data = reinterpret_cast<void *>(at);
    got.taken = true;
    return got;
  }
  if (auto it = c.ahead.find(n); it != c.ahead.end()) {
    got.data = it->second;
    got.segments = {n};
    got.ahead = got.taken = true;
    c.ahead.erase(it);
    c.bytes -= n;
    ++c.aheadUsed;
    return got;
  }
  if (auto it = c.bySize.lower_bound(n); it != c.bySize.end()) {
    uintptr_t at = it->second;
    Block rest = takeReleased(c, c.released.find(at));
    const size_t before = rest.segments.size();
    got.segments = splitFront(rest, n).segments;
    c.counters.mappings +=
        static_cast<int64_t>(got.segments.size() + rest.segments.size() - before);
    got.data = reinterpret_cast<void *>(at);
    got.taken = true;
    keepReleased(c, at + n, std::move(rest));
    return got;
  }
  size_t need = n, segments = 1; // 1: the fresh tail
  while (need > 0 && !c.bySize.empty() && c.counters.mappings < kMaxMappings) {
    auto largest = std::prev(c.bySize.end());
    uintptr_t at = largest->second;
    auto it = c.released.find(at);
    if (segments + it->second.segments.size() > kMaxSegments) break;
    Block b = takeReleased(c, it);
    if (b.size > need) {
      const size_t before = b.segments.size();
      Block front = splitFront(b, need);
      c.counters.mappings +=
          static_cast<int64_t>(front.segments.size() + b.segments.size() - before);
      keepReleased(c, at + need, std::move(b));
      b = std::move(front);
    }
    need -= b.size;
    segments += b.segments.size();
    plan.pieces.emplace_back(at, std::move(b));
  }
  return got;
}

/// A new mapping of `n` bytes with the plan's pieces moved to its front; the rest is fresh.
Pages mapAndMove(size_t n, Plan &plan) {
  Pages got;
  void *p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    int64_t unmapped = 0;
    for (auto &[at, b] : plan.pieces) {
      ::munmap(reinterpret_cast<void *>(at), b.size);
      unmapped += static_cast<int64_t>(b.segments.size());
    }
    std::lock_guard<std::mutex> lock(cache().mutex);
    cache().counters.mappings -= unmapped;
    throw std::bad_alloc();
  }
  got.data = p;
  auto *dest = static_cast<char *>(p);
  size_t moved = 0;
  bool failed = false;
  for (auto &[at, b] : plan.pieces) {
    if (failed) { // pages that could not be moved go back to the kernel
      ::munmap(reinterpret_cast<void *>(at), b.size);
      got.mappingsAdded -= static_cast<int64_t>(b.segments.size());
      continue;
    }
    size_t off = 0;
    for (size_t len : b.segments) {
      void *from = reinterpret_cast<void *>(at + off);
      if (!failed &&
          ::mremap(from, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, dest + moved) != MAP_FAILED) {
        got.segments.push_back(len);
        moved += len;
        ++got.remaps;
      } else {
        // Not expected (a segment is always within one mapping; the map count could run
        // out): the new mapping's rest stays fresh.
        failed = true;
        ::munmap(from, len);
        --got.mappingsAdded;
      }
      off += len;
    }
  }
  if (moved < n) {
    got.segments.push_back(n - moved);
    ++got.mappingsAdded; // the new mapping's rest
  }
  got.fresh = n - moved;
  return got;
}

void release(void *p, size_t n, std::vector<size_t> segments) {
  Cache &c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    if (c.bytes + n <= kMaxCachedBytes &&
        (segments.size() == 1 || c.counters.mappings < kMaxMappings)) {
      keepReleased(c, reinterpret_cast<uintptr_t>(p), Block{n, std::move(segments)});
      return;
    }
    c.counters.mappings -= static_cast<int64_t>(segments.size());
  }
  ::munmap(p, n);
}

thread_local std::vector<int64_t> *tRecording = nullptr;

size_t pageRounded(int64_t nbytes) {
  const size_t page = pageSize();
  return (static_cast<size_t>(std::max<int64_t>(nbytes, 1)) + page - 1) / page * page;
}

std::shared_ptr<Storage> smallBuffer(int64_t nbytes) {
  size_t n = (static_cast<size_t>(std::max<int64_t>(nbytes, 1)) + 63) / 64 * 64;
  void *p = std::aligned_alloc(64, n);
  if (!p) throw std::bad_alloc();
  return std::make_shared<Storage>(p, nbytes, [p] { std::free(p); });
}

} // namespace

std::shared_ptr<Storage> hostBuffer(int64_t nbytes) {
  if (static_cast<size_t>(nbytes) < kMinCachedBytes || !cacheEnabled()) {
    // What a process without buffers made ahead takes fresh (glibc's large buffers are).
    if (tRecording && static_cast<size_t>(nbytes) >= kMinCachedBytes) tRecording->push_back(nbytes);
    return smallBuffer(nbytes);
  }
  const size_t n = pageRounded(nbytes);
  Cache &c = cache();
  Plan plan;
  Pages got;
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    got = takeKept(c, n, plan);
  }
  if (!got.taken) got = mapAndMove(n, plan);
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    c.counters.freshBytes += got.fresh;
    c.counters.reusedBytes += n - got.fresh;
    c.counters.remaps += got.remaps;
    c.counters.mappings += got.mappingsAdded;
  }
  // What a process without buffers made ahead takes fresh: a request the released buffers
  // covered (within the call) is not one more to make ahead.
  if (tRecording && (got.fresh > 0 || got.ahead)) tRecording->push_back(nbytes);
  void *p = got.data;
  return std::make_shared<Storage>(p, nbytes, [p, n, segments = std::move(got.segments)]() mutable {
    release(p, n, std::move(segments));
  });
}

void dropCachedHostBuffers() {
  Cache &c = cache();
  std::map<uintptr_t, Block> released;
  std::unordered_multimap<size_t, void *> ahead;
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    released.swap(c.released);
    ahead.swap(c.ahead);
    c.bySize.clear();
    c.bytes = 0;
    ++c.drops;
  }
  int64_t unmapped = static_cast<int64_t>(ahead.size());
  for (auto &[at, b] : released) {
    ::munmap(reinterpret_cast<void *>(at), b.size);
    unmapped += static_cast<int64_t>(b.segments.size());
  }
  for (auto &[n, p] : ahead)
    ::munmap(p, n);
  std::lock_guard<std::mutex> lock(c.mutex);
  c.counters.mappings -= unmapped;
}

int64_t cachedHostBufferBytes() {
  Cache &c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  return static_cast<int64_t>(c.bytes);
}

HostBufferCounters hostBufferCounters() {
  Cache &c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.counters;
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
    const size_t page = pageSize();
    size_t total = 0;
    for (int64_t nbytes : sizes) {
      if (static_cast<size_t>(nbytes) < kMinCachedBytes) continue;
      size_t n = pageRounded(nbytes);
      total += n;
      if (total > kMaxCachedBytes) continue;
      void *p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) break;
      // Written before anyone can take it: a buffer in the cache belongs to its taker.
      for (size_t i = 0; i < n; i += page)
        static_cast<volatile char *>(p)[i] = 0;
      std::unique_lock<std::mutex> lock(c.mutex);
      // Too late (the first run is over and its release dropped the cache), or no room.
      if (c.drops != drops || c.bytes + n > kMaxCachedBytes) {
        lock.unlock();
        ::munmap(p, n);
        continue;
      }
      c.ahead.emplace(n, p);
      c.bytes += n;
      ++c.counters.mappings;
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
