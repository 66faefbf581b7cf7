// What the fuse pass (fuse.cpp) may group, as data: which ops are elementwise, broadcast
// views, reductions, row-wise normalizations and epilogue anchors, which consumers of an
// anchor are post-ops the backend's library call can apply, and which producers are cheap
// enough to recompute in several groups. Internal to the passes layer.
#pragma once

#include "xjit/ir/ir.h"

#include <optional>
#include <string_view>
#include <vector>

namespace xjit::passes::fuse_rules {

enum class FuseClass : uint8_t {
  None,        // never fused
  Elementwise, // kElementwise with one tensor result
  Broadcast,   // a view that only re-indexes (expand, unsqueeze...): fused when consumed inside
  Reduction,   // kReduction with `dims`/`keepdim`, one tensor result
  Row,         // softmax, log_softmax, layer_norm, rms_norm: reduce rows, result full-shaped
  Anchor,      // matmul / linear / conv: a library call that takes post-ops
};

FuseClass classify(const Op &op);
/// matmul/linear/addmm/baddbmm/bmm/mm and the convolutions: library calls (oneDNN) with post-ops.
bool isLibraryProduct(std::string_view name);

/// The loop structure of a reduction or row op: the full (input) shape and the reduced axes
/// (sorted, non-negative).
struct ReduceAxes {
  Shape full;
  std::vector<int64_t> dims;
};
std::optional<ReduceAxes> reduceAxes(const Op &op);

/// Whether `op`, an elementwise consumer of the anchor chain's current value `chain`, is a
/// post-op the backend's library call applies (an activation, or a binary op with the chain as
/// its left operand, or either operand when commutative, and a tensor or scalar other operand).
bool isPostOp(const Op &op, const Value *chain);

/// Whether a convolution anchor takes post-op `op` (already `isPostOp`): not a multiplication
/// by a per-channel (or any partial-shape) tensor, which oneDNN 2.6 runs as a binary post-op
/// 3-8x slower than the convolution itself (the stem and 1x1 convolutions of ResNet-18 with a
/// decomposed batch norm); such a mul is left to a native elementwise kernel.
/// A transposed convolution takes no binary post-op with a tensor operand (oneDNN 2.6 runs
/// it with its reference deconvolution).
bool convTakesPostOp(const Op &anchor, const Op &op, const Value *chain);
/// A causal product (matmul with `causal`) takes only post-ops whose other operand, if any, is
/// one element: its blocks write views of the result, and oneDNN 2.6 runs a tensor binary
/// post-op on a strided result with its reference matmul (~100x slower).
bool causalTakesPostOp(const Op &op, const Value *chain);

/// Whether unary post-ops `earlier` and `later` of one chain map to the same oneDNN eltwise
/// algorithm with other parameters (clamp(min=0) then clamp(-5, 5); relu then leaky_relu):
/// oneDNN 2.6's post-op injector keeps one instance per algorithm, so the later one ran with
/// the earlier one's bounds (fuzzer seed 22866, a wrong answer). The chain stops before it.
bool eltwiseParamsClash(const Op &earlier, const Op &later);

/// Elementwise and broadcast ops cheap enough to recompute in every group that reads them
/// (a view, or one arithmetic op per element with at most one tensor operand that is not a
/// single element).
bool isCheap(const Op &op);

} // namespace xjit::passes::fuse_rules
