// Host memory for the CPU target's buffers (results, arenas): 64-byte aligned, not zero-filled,
// the pages of large ones kept after release and reused for any size (see host_buffers.cpp).
#pragma once

#include "xjit/ir/tensor.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace xjit::backend {

/// Uninitialized host memory of `nbytes`, 64-byte aligned. A buffer of 1 MiB or more is a
/// mapping of its own, made of the pages of buffers released earlier as far as they go (a
/// released buffer of its size, the front of a larger one, or several moved together).
std::shared_ptr<Storage> hostBuffer(int64_t nbytes);

/// A contiguous tensor of uninitialized host memory (hostBuffer), for results written whole.
Tensor hostTensor(DType dtype, const std::vector<int64_t> &sizes);

/// Frees the released large buffers kept for reuse (releaseCompilerMemory calls it; tests).
void dropCachedHostBuffers();

/// Bytes of released large buffers kept for reuse now.
int64_t cachedHostBufferBytes();

/// What large hostBuffers were made of, since the process started: bytes of new pages, bytes
/// of kept pages reused, and mremap calls that moved kept pages into a new buffer; and the
/// mappings (or parts of one) that large buffers, live or kept, span now.
struct HostBufferCounters {
  uint64_t freshBytes = 0, reusedBytes = 0, remaps = 0;
  int64_t mappings = 0;
  uint64_t lends = 0; // lendHostBufferPages calls that lent
};
HostBufferCounters hostBufferCounters();

/// For a large hostBuffer held across calls but used only during them (a compiled graph's
/// arena): its pages go to the kept ones, for any request, while its address range stays
/// reserved and inaccessible, until reclaimHostBufferPages backs the range again with kept
/// pages, or fresh ones (the contents are not kept). Returns whether the pages were lent: not
/// for a buffer under 4 MiB (the system calls would cost short calls more than they save), one
/// not made by hostBuffer or already lent, or with XJIT_LEND_ARENAS=0. Not thread-safe for one
/// buffer: its owner lends and reclaims it.
bool lendHostBufferPages(Storage &buffer);
/// Makes a lent buffer usable again (no-op for one not lent). Throws std::bad_alloc when the
/// kernel gives no memory.
void reclaimHostBufferPages(Storage &buffer);

/// While one lives, the large buffers (1 MiB or more) that hostBuffer hands out fresh on this
/// thread (or from those made ahead) are listed, by size: a frame's first call records the
/// buffers it needs (its arena, its results), and a later process makes them ahead
/// (makeHostBuffersAhead). A buffer reused from an earlier release is not listed. Nests.
class HostBufferRecording {
public:
  HostBufferRecording();
  ~HostBufferRecording();
  HostBufferRecording(const HostBufferRecording &) = delete;
  HostBufferRecording &operator=(const HostBufferRecording &) = delete;
  const std::vector<int64_t> &sizes() const { return sizes_; }

private:
  std::vector<int64_t> sizes_;
  std::vector<int64_t> *outer_;
};

/// Starts a thread (below the caller's priority) that allocates buffers of these sizes, writes
/// a byte per page (the page faults: ~1.5 us per 4 KiB here, 11 ms for GPT-2's logits) and
/// keeps them for reuse, where hostBuffer finds them: the capture and compile of a warm start
/// overlap the faults its first run would take. Buffers not taken by the next release of the
/// compiler's memory (releaseCompilerMemory, after the first run) are freed by it. No-op when
/// buffers are not reused (XJIT_HOST_BUFFER_CACHE=0), with XJIT_BUFFERS_AHEAD=0, or when the
/// sizes are empty. Returns whether it started a thread.
bool makeHostBuffersAhead(std::vector<int64_t> sizes);
/// Buffers made ahead so far, and how many of them a hostBuffer call took (backendCounters'
/// `host_buffers_ahead`, `host_buffers_ahead_used`).
uint64_t hostBuffersMadeAhead();
uint64_t hostBuffersAheadUsed();
/// Waits (10 s at most) for a thread of makeHostBuffersAhead to finish (tests).
void waitForHostBuffersAhead();

} // namespace xjit::backend
