// Dropout's noise drawn from PyTorch's CPU generator state in native code: the same numbers as
// eager's `empty(n).bernoulli_(keep).div_(keep)`, several times faster (python/xjit/_dropout.py
// checks them against PyTorch's own draws before it uses them; docs/decisions.md).
#pragma once

#include <cstddef>
#include <cstdint>

namespace xjit::frontend {

/// Size in bytes of the state torch.get_rng_state() returns for the CPU generator (its legacy
/// mt19937 record plus the cached normal sample), the only layout drawBernoulliNoise reads.
constexpr size_t kTorchCpuRngStateBytes = 5056;

/// Writes `count` draws of PyTorch's CPU bernoulli_(keep) (two mt19937 words per element, the
/// first the high half of a 53-bit uniform, kept when below `keep`) into `out`, as `scale` for a
/// kept element and 0 otherwise, and advances `state` (torch.get_rng_state()'s bytes) past them.
/// False, with nothing written, when the state's counters are not a layout it knows.
bool drawBernoulliNoise(uint8_t *state, size_t stateBytes, double keep, float scale, float *out,
                        int64_t count);
bool drawBernoulliNoise(uint8_t *state, size_t stateBytes, double keep, double scale, double *out,
                        int64_t count);

} // namespace xjit::frontend
