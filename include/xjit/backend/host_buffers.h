// Host memory for the CPU target's buffers (results, arenas): 64-byte aligned, not zero-filled,
// large ones kept for reuse after release (see host_buffers.cpp).
#pragma once

#include "xjit/ir/tensor.h"

#include <cstdint>
#include <memory>

namespace xjit::backend {

/// Uninitialized host memory of `nbytes`, 64-byte aligned. A buffer of 1 MiB or more comes from
/// the buffers of the same size released earlier when there is one.
std::shared_ptr<Storage> hostBuffer(int64_t nbytes);

/// A contiguous tensor of uninitialized host memory (hostBuffer), for results written whole.
Tensor hostTensor(DType dtype, const std::vector<int64_t> &sizes);

/// Frees the released large buffers kept for reuse (releaseCompilerMemory calls it; tests).
void dropCachedHostBuffers();

/// Bytes of released large buffers kept for reuse now.
int64_t cachedHostBufferBytes();

} // namespace xjit::backend
