// Winograd weight transform for oneDNN's f32 Winograd convolutions: dense OIHW 3x3 weights
// into the `wino` memory formats oneDNN 2.6's AVX-512 kernels take (aaOio and aaOBiOo for
// F(2x2,3x3), OBaaIBOIio for F(4x4,3x3)).
//
// Why not oneDNN's own reorder: its `wino_reorder` reads the weights across output channels
// one element at a time and goes through a full-size intermediate, 5-20x slower than this
// (one thread: 128x128x3x3 4.6-6.9 ms against 0.22 ms, 512x512x3x3 39 against 2.2 ms;
// docs/perf.md "Session 7", "Session 11"), and a module's weights are transformed on every
// call (docs/backend.md "A module's weights"). The layouts are those oneDNN's reorder writes (its
// src/cpu/x64/wino_reorder.hpp); tests/cpp/winograd_weights_test.cpp compares this transform
// with oneDNN's reorder on every shape and format, and formats or descriptors it does not
// know (int8 scales, other tile sizes) keep oneDNN's reorder.
#pragma once

#include <dnnl.hpp>

#include <cstdint>
#include <optional>

namespace xjit::backend::dnnl_kernels {

/// Where the transform writes: the blocking of one `wino` destination descriptor.
struct WinogradWeightLayout {
  int alpha = 0;             // tile size after transform: 4 for F(2x2,3x3), 6 for F(4x4,3x3)
  int format = 0;            // dnnl_wino_memory_format_t
  int64_t oc = 0, ic = 0;    // channels, padded to the blocks
  int64_t outC = 0, inC = 0; // the source weight's channels
  int64_t ocBlock = 0, icBlock = 0, oc2Block = 1, ic2Block = 1;
  float G[6][3] = {};     // the transform matrix: U = G g G^T per (oc, ic)
  int64_t tileStride = 0; // elements from one (a, b) of the transformed tile to the next
};

/// The layout for transforming `from` (dense row-major f32 [O, I, 3, 3]) into `to`, or nullopt
/// when this transform does not handle the pair (the caller then uses oneDNN's reorder).
std::optional<WinogradWeightLayout> planWinogradWeights(const dnnl::memory::desc &from,
                                                        const dnnl::memory::desc &to);

/// Writes every element of the destination (padding included) from `src`.
void transformWinogradWeights(const WinogradWeightLayout &layout, const float *src, float *dst);

} // namespace xjit::backend::dnnl_kernels
