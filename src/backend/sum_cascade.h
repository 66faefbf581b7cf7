// Cascaded float sums: which accumulators a loop of the kernel IR sums floats into across its
// iterations, and the blocks the code generator (llvm_codegen.cpp) cuts such a loop into, so
// that the rounding error of a long sum grows with the number of levels, not with its length.
#pragma once

#include "xjit/backend/kernel_ir.h"

#include <vector>

namespace xjit::backend {

/// Elements per block of an innermost summing loop (the vectorized one): 32 adds per partial
/// sum with AVX-512's 16 lanes and two interleaved vectors.
inline constexpr int64_t kSumBlock = 1024;
/// Sums per level of the cascade above the blocks, and iterations per block of an outer loop.
inline constexpr int64_t kSumFanIn = 32;
/// Levels of blocks of a loop whose extent is not static.
inline constexpr int kSumLevels = 3;

/// False when XJIT_SUM_CASCADE=0 (read once; for A/B measurements, and part of the compile
/// cache key): float sums then run as before session 15, each vector partial sum and the
/// parallel chunks' sums added in order, and var / std sum their squares in f32.
bool sumCascadeEnabled();

/// A float accumulator that a loop sums into across its iterations.
struct CascadedSum {
  int64_t acc = 0;
  /// An array accumulator: the lane loop inside the summing loop that it is reduced in (its
  /// extent bounds the lanes the loop touches); null for a scalar, or when the lanes are reduced
  /// in more than one loop.
  const Stmt *laneLoop = nullptr;
};

/// The f32 / f64 accumulators that `loop`'s body combines with Add across the loop's iterations:
/// reduced somewhere inside it (an array accumulator at a lane that does not depend on `loop`),
/// and neither initialized nor read inside it.
std::vector<CascadedSum> cascadedSums(const Kernel &k, const Stmt &loop);

/// Iterations per block of each level of the cascade for a summing `loop`, largest first
/// (empty: no blocks, the loop sums into a fresh accumulator as a whole). An innermost
/// vectorized loop's blocks are kSumBlock, kSumBlock * kSumFanIn, ...; an outer or scalar loop's
/// kSumFanIn, kSumFanIn^2, ...;
/// only those shorter than a static extent, kSumLevels of them for a symbolic one.
std::vector<int64_t> cascadeBlocks(const Stmt &loop);

} // namespace xjit::backend
