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
#include "xjit/backend/host_buffers.h"

#include <cstdlib>
#include <mutex>
#include <new>
#include <string_view>
#include <unordered_map>

namespace xjit::backend {
namespace {

constexpr size_t kMinCachedBytes = size_t(1) << 20;   // smaller ones: glibc's bins reuse them
constexpr size_t kMaxCachedBytes = size_t(512) << 20; // a GPT step's results are about 120 MB

struct Cache {
  std::mutex mutex;
  std::unordered_multimap<size_t, void *> free; // released buffers by (rounded) size
  size_t bytes = 0;
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

void *takeCached(size_t n) {
  if (n < kMinCachedBytes || !cacheEnabled()) return nullptr;
  Cache &c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  auto it = c.free.find(n);
  if (it == c.free.end()) return nullptr;
  void *p = it->second;
  c.free.erase(it);
  c.bytes -= n;
  return p;
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
  size_t n = (static_cast<size_t>(std::max<int64_t>(nbytes, 1)) + 63) / 64 * 64;
  void *p = takeCached(n);
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
  }
  for (auto &[n, p] : dropped)
    std::free(p);
}

int64_t cachedHostBufferBytes() {
  Cache &c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  return static_cast<int64_t>(c.bytes);
}

Tensor hostTensor(DType dtype, const std::vector<int64_t> &sizes) {
  int64_t n = 1;
  for (int64_t s : sizes)
    n *= s;
  return Tensor(hostBuffer(n * dtypeSize(dtype)), dtype, sizes, contiguousStrides(sizes));
}

} // namespace xjit::backend
