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
#include <numeric>
#include <pthread.h>
#include <string_view>
#include <sys/mman.h>
#include <sys/resource.h>
#include <thread>
#include <unistd.h>
#include <unordered_map>
#include <unordered_set>

namespace xjit::backend {
namespace {

constexpr size_t kMinCachedBytes = size_t(1) << 20;   // smaller ones: glibc's bins reuse them
constexpr size_t kMaxCachedBytes = size_t(512) << 20; // a GPT step's results are about 120 MB
// Mappings per buffer: bounds one request's mremap calls.
constexpr size_t kMaxSegments = 64;
// Buffers held across calls but used only during them (a compiled graph's arena) lend their
// pages between calls from this size on: smaller ones would pay system calls on short calls.
constexpr size_t kMinLentBytes = size_t(4) << 20;
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

/// A large buffer handed out: its mappings, and whether its pages are lent (lendHostBufferPages).
struct LiveBuffer {
  std::vector<size_t> segments;
  bool lent = false;
};

struct Cache {
  std::mutex mutex;
  std::unordered_map<uintptr_t, LiveBuffer> live; // by address
  std::map<uintptr_t, Block> released;            // by address: neighbours coalesce
  std::multimap<size_t, uintptr_t> bySize;
  std::unordered_multimap<size_t, void *> ahead; // made ahead: taken by their own size only
  std::unordered_multiset<size_t> aheadPending;  // sizes makeHostBuffersAhead has yet to make
  size_t bytes = 0;                              // kept: released and made ahead
  uint64_t drops = 0; // dropCachedHostBuffers calls: buffers made before are late
  uint64_t madeAhead = 0, aheadUsed = 0;
  HostBufferCounters counters; // counters.mappings: see kMaxMappings
  // makeHostBuffersAhead's threads running (tests wait for them).
  int aheadThreads = 0;
  std::condition_variable aheadDone; // notified as each buffer made ahead is done
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

/// Takes the released block at `at`, or its front `n` bytes when it is larger (the rest stays).
Block takeFront(Cache &c, uintptr_t at, size_t n) {
  Block b = takeReleased(c, c.released.find(at));
  if (b.size <= n) return b;
  const size_t before = b.segments.size();
  Block front = splitFront(b, n);
  c.counters.mappings += static_cast<int64_t>(front.segments.size() + b.segments.size() - before);
  keepReleased(c, at + n, std::move(b));
  return front;
}

/// Released blocks to move for `n` bytes, largest first, into `plan` (as many as kMaxSegments
/// and kMaxMappings allow, counting one segment for the rest).
void planLargestFirst(Cache &c, size_t n, Plan &plan) {
  size_t need = n, segments = 1;
  while (need > 0 && !c.bySize.empty() && c.counters.mappings < kMaxMappings) {
    uintptr_t at = std::prev(c.bySize.end())->second;
    if (segments + c.released.at(at).segments.size() > kMaxSegments) break;
    Block b = takeFront(c, at, need);
    need -= b.size;
    segments += b.segments.size();
    plan.pieces.emplace_back(at, std::move(b));
  }
}

/// Takes what the cache holds for `n` bytes: a block of that size whole (released before made
/// ahead, as a process without those would have reused the former too), the front of the
/// smallest larger released block, or else released blocks, largest first, to move (`plan`).
Pages takeKept(Cache &c, size_t n, Plan &plan) {
  Pages got;
  auto fit = c.bySize.lower_bound(n);
  if (fit == c.bySize.end() || fit->first != n) {
    if (auto it = c.ahead.find(n); it != c.ahead.end()) {
      got.data = it->second;
      got.segments = {n};
      got.ahead = got.taken = true;
      c.ahead.erase(it);
      c.bytes -= n;
      ++c.aheadUsed;
      return got;
    }
  }
  if (fit != c.bySize.end()) {
    uintptr_t at = fit->second;
    got.segments = takeFront(c, at, n).segments;
    got.data = reinterpret_cast<void *>(at);
    got.taken = true;
    return got;
  }
  planLargestFirst(c, n, plan);
  return got;
}

/// Moves the plan's pieces to `dest` one after another (mremap, replacing what is mapped
/// there); adds what was moved to `got`. Pieces that cannot be moved (not expected: a segment
/// is always within one mapping, but the map count could run out) go back to the kernel.
size_t movePieces(char *dest, Plan &plan, Pages &got) {
  size_t moved = 0;
  bool failed = false;
  for (auto &[at, b] : plan.pieces) {
    if (failed) {
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
        failed = true;
        ::munmap(from, len);
        --got.mappingsAdded;
      }
      off += len;
    }
  }
  return moved;
}

void unmapPieces(Plan &plan) {
  int64_t unmapped = 0;
  for (auto &[at, b] : plan.pieces) {
    ::munmap(reinterpret_cast<void *>(at), b.size);
    unmapped += static_cast<int64_t>(b.segments.size());
  }
  std::lock_guard<std::mutex> lock(cache().mutex);
  cache().counters.mappings -= unmapped;
}

/// A new mapping of `n` bytes with the plan's pieces moved to its front; the rest is fresh.
Pages mapAndMove(size_t n, Plan &plan) {
  Pages got;
  void *p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    unmapPieces(plan);
    throw std::bad_alloc();
  }
  got.data = p;
  size_t moved = movePieces(static_cast<char *>(p), plan, got);
  if (moved < n) {
    got.segments.push_back(n - moved);
    ++got.mappingsAdded; // the new mapping's rest
  }
  got.fresh = n - moved;
  return got;
}

/// Counts what the buffer of `n` bytes at `at` was made of and notes its mappings (lock held).
LiveBuffer &recordPages(Cache &c, size_t n, Pages &got, uintptr_t at) {
  c.counters.freshBytes += got.fresh;
  c.counters.reusedBytes += n - got.fresh;
  c.counters.remaps += got.remaps;
  c.counters.mappings += got.mappingsAdded;
  LiveBuffer &live = c.live[at];
  live.segments = std::move(got.segments);
  return live;
}

void release(void *p, size_t n) {
  Cache &c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    auto it = c.live.find(reinterpret_cast<uintptr_t>(p));
    LiveBuffer buffer = std::move(it->second);
    c.live.erase(it);
    if (!buffer.lent && c.bytes + n <= kMaxCachedBytes &&
        (buffer.segments.size() == 1 || c.counters.mappings < kMaxMappings)) {
      keepReleased(c, reinterpret_cast<uintptr_t>(p), Block{n, std::move(buffer.segments)});
      return;
    }
    c.counters.mappings -= static_cast<int64_t>(buffer.segments.size());
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

namespace {

/// A large buffer (1 MiB or more, reuse on) of kept or fresh pages; `n` its page-rounded size.
void *largeBuffer(int64_t nbytes, size_t n) {
  Cache &c = cache();
  Plan plan;
  Pages got;
  {
    std::unique_lock<std::mutex> lock(c.mutex);
    // A buffer of this size still being made ahead: waiting for it costs no more than faulting
    // fresh pages here, while taking fresh pages would fault them twice (the thread's copy then
    // sits unused until the release after the first run drops it). Bounded, should the thread
    // be starved.
    if (c.aheadPending.count(n) != 0 && c.ahead.count(n) == 0 && c.bySize.count(n) == 0)
      c.aheadDone.wait_for(lock, std::chrono::milliseconds(200),
                           [&] { return c.ahead.count(n) != 0 || c.aheadPending.count(n) == 0; });
    got = takeKept(c, n, plan);
  }
  if (!got.taken) got = mapAndMove(n, plan);
  // What a process without buffers made ahead takes fresh: a request the released buffers
  // covered (within the call) is not one more to make ahead.
  if (tRecording && (got.fresh > 0 || got.ahead)) tRecording->push_back(nbytes);
  std::lock_guard<std::mutex> lock(c.mutex);
  recordPages(c, n, got, reinterpret_cast<uintptr_t>(got.data));
  return got.data;
}

/// Storage(nbytes)'s large buffers (reference kernels' results, Tensor::empty): the same kept
/// pages, so that they neither fault in fresh pages every call nor hold glibc memory the kept
/// pages could have served.
void *largeStorage(int64_t nbytes, std::function<void()> *releaseFn) {
  if (static_cast<size_t>(nbytes) < kMinCachedBytes || !cacheEnabled()) return nullptr;
  const size_t n = pageRounded(nbytes);
  void *p = largeBuffer(nbytes, n);
  *releaseFn = [p, n] { release(p, n); };
  return p;
}

[[maybe_unused]] const bool kLargeStorageInstalled =
    (setLargeStorageAllocator(&largeStorage), true);

} // namespace

std::shared_ptr<Storage> hostBuffer(int64_t nbytes) {
  if (static_cast<size_t>(nbytes) < kMinCachedBytes || !cacheEnabled()) {
    // What a process without buffers made ahead takes fresh (glibc's large buffers are).
    if (tRecording && static_cast<size_t>(nbytes) >= kMinCachedBytes) tRecording->push_back(nbytes);
    return smallBuffer(nbytes);
  }
  const size_t n = pageRounded(nbytes);
  void *p = largeBuffer(nbytes, n);
  return std::make_shared<Storage>(p, nbytes, [p, n] { release(p, n); });
}

bool lendHostBufferPages(Storage &buffer) {
  static const bool enabled = [] {
    const char *v = std::getenv("XJIT_LEND_ARENAS");
    return !(v && std::string_view(v) == "0");
  }();
  const size_t n = pageRounded(buffer.nbytes());
  if (!enabled || !cacheEnabled() || n < kMinLentBytes) return false;
  const auto p = reinterpret_cast<uintptr_t>(buffer.data());
  Cache &c = cache();
  std::vector<size_t> segments;
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    auto it = c.live.find(p);
    if (it == c.live.end() || it->second.lent || c.bytes + n > kMaxCachedBytes ||
        c.counters.mappings >= kMaxMappings)
      return false;
    segments = it->second.segments;
  }
  // The pages move to a range of their own, kept for any request. The buffer's range stays
  // mapped meanwhile (MREMAP_DONTUNMAP: no hole another thread's mapping could take), then is
  // replaced by one inaccessible reservation: a stray access faults instead of reading zeros.
  void *to = ::mmap(nullptr, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (to == MAP_FAILED) return false;
  size_t off = 0;
  for (size_t len : segments) {
    if (::mremap(reinterpret_cast<void *>(p + off), len, len,
                 MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP,
                 static_cast<char *>(to) + off) == MAP_FAILED)
      break;
    off += len;
  }
  bool reserved = off == n && ::mmap(reinterpret_cast<void *>(p), n, PROT_NONE,
                                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1,
                                     0) != MAP_FAILED;
  if (!reserved) {
    // Not expected: the pages moved so far go back where they were.
    size_t back = 0;
    for (size_t len : segments) {
      if (back >= off) break;
      ::mremap(static_cast<char *>(to) + back, len, len, MREMAP_MAYMOVE | MREMAP_FIXED,
               reinterpret_cast<void *>(p + back));
      back += len;
    }
    ::munmap(to, n);
    return false;
  }
  std::lock_guard<std::mutex> lock(c.mutex);
  LiveBuffer &live = c.live.at(p);
  live.lent = true;
  live.segments = {n}; // the reservation
  ++c.counters.mappings;
  ++c.counters.lends;
  keepReleased(c, reinterpret_cast<uintptr_t>(to), Block{n, std::move(segments)});
  return true;
}

void reclaimHostBufferPages(Storage &buffer) {
  const auto p = reinterpret_cast<uintptr_t>(buffer.data());
  const size_t n = pageRounded(buffer.nbytes());
  Cache &c = cache();
  Plan plan;
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    auto it = c.live.find(p);
    if (it == c.live.end() || !it->second.lent) return;
    // Likely the pages it lent: a block of its size, else the front of a larger one.
    if (auto fit = c.bySize.lower_bound(n); fit != c.bySize.end()) {
      const uintptr_t at = fit->second; // takeFront erases fit
      plan.pieces.emplace_back(at, takeFront(c, at, n));
    } else {
      planLargestFirst(c, n, plan);
    }
  }
  Pages got;
  char *dest = reinterpret_cast<char *>(p);
  const size_t moved = movePieces(dest, plan, got);
  if (moved < n) {
    // The rest of the reservation becomes fresh memory.
    if (::mprotect(dest + moved, n - moved, PROT_READ | PROT_WRITE) != 0 &&
        ::mmap(dest + moved, n - moved, PROT_READ | PROT_WRITE,
               MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED)
      throw std::bad_alloc();
    got.segments.push_back(n - moved);
  } else {
    --got.mappingsAdded; // the reservation is gone
  }
  got.fresh = n - moved;
  std::lock_guard<std::mutex> lock(c.mutex);
  recordPages(c, n, got, p).lent = false;
}

void dropCachedHostBuffers() {
  Cache &c = cache();
  std::map<uintptr_t, Block> released, kept;
  std::unordered_multimap<size_t, void *> ahead;
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    // An arena lent between calls takes pages back at its next call: one block that can serve
    // each stays (the smallest large enough: likely its own pages). Dropped, the next call
    // faults the whole arena in again (ResNet-18 b8: 53 MB, 13.8k faults, on the second call
    // after the release that follows the first run).
    std::vector<size_t> lent;
    for (const auto &[at, live] : c.live)
      if (live.lent)
        lent.push_back(std::accumulate(live.segments.begin(), live.segments.end(), size_t(0)));
    std::sort(lent.begin(), lent.end(), std::greater<>());
    for (size_t n : lent)
      if (auto fit = c.bySize.lower_bound(n); fit != c.bySize.end()) {
        const uintptr_t at = fit->second;
        kept.emplace(at, takeReleased(c, c.released.find(at)));
      }
    released.swap(c.released);
    ahead.swap(c.ahead);
    c.bySize.clear();
    c.bytes = 0;
    for (auto &[at, b] : kept) {
      c.bySize.emplace(b.size, at);
      c.bytes += b.size;
      c.released.emplace(at, std::move(b));
    }
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
                       cache().aheadPending.clear(); // no thread makes them in the child
                       cache().mutex.unlock();
                     });
  });
  uint64_t drops;
  std::erase_if(sizes,
                [](int64_t nbytes) { return static_cast<size_t>(nbytes) < kMinCachedBytes; });
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    drops = c.drops;
    ++c.aheadThreads;
    for (int64_t nbytes : sizes)
      c.aheadPending.insert(pageRounded(nbytes));
  }
  std::thread([&c, drops, sizes = std::move(sizes)] {
    // Below the capture's priority (on a busy machine it keeps its share), above the gemm
    // warm-up's (library_warm_up.cpp), whose products have a standby meanwhile.
    ::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 10);
    const size_t page = pageSize();
    size_t total = 0;
    auto done = [&c](size_t n) { // lock held
      c.aheadPending.erase(c.aheadPending.find(n));
      c.aheadDone.notify_all();
    };
    for (size_t i = 0; i < sizes.size(); ++i) {
      size_t n = pageRounded(sizes[i]);
      total += n;
      void *p = total > kMaxCachedBytes ? MAP_FAILED
                                        : ::mmap(nullptr, n, PROT_READ | PROT_WRITE,
                                                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) {
        std::lock_guard<std::mutex> lock(c.mutex);
        done(n);
        continue;
      }
      // Written before anyone can take it: a buffer in the cache belongs to its taker.
      for (size_t off = 0; off < n; off += page)
        static_cast<volatile char *>(p)[off] = 0;
      std::unique_lock<std::mutex> lock(c.mutex);
      // Too late (the first run is over and its release dropped the cache), or no room.
      if (c.drops != drops || c.bytes + n > kMaxCachedBytes) {
        done(n);
        lock.unlock();
        ::munmap(p, n);
        continue;
      }
      c.ahead.emplace(n, p);
      c.bytes += n;
      ++c.counters.mappings;
      ++c.madeAhead;
      done(n);
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
