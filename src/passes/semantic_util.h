// Small helpers shared by the semantic and decomposition passes (freeze, erase-device-ops,
// functionalize, mixed-precision, decompose-*): reading constant operands, optional operands,
// finding ops to rewrite, and replacing or removing what a rewrite built or left dead.
#pragma once

#include "xjit/ir/builder.h"
#include "xjit/ir/ir.h"
#include "xjit/ir/tensor.h"

#include <optional>
#include <string_view>
#include <vector>

namespace xjit::passes {

/// The tensor held by a `constant` op defining v, or nullptr.
const Tensor *constantTensor(const Value *v);

/// Operand i of op, or nullptr when it is left off or passed as `none`.
Value *presentOperand(const Op &op, size_t i);

/// Replaces every use of op's results by `replacements` (one per result), erases op and then
/// the producers of its operands that are left dead (eraseIfDead).
void replaceOp(Op *op, const std::vector<Value *> &replacements);

/// Erases op if it is pure, has no regions and none of its results is used, then does the same
/// for the ops that defined its operands. Returns the number of ops erased.
size_t eraseIfDead(Op *op);

/// Replaces op's one result by `v`, built by a rewrite, when their types agree (the rewrite's
/// shape inference agrees with the op's); otherwise erases what was built for `v` and leaves
/// op as it is. Returns whether op was replaced.
bool replaceIfSameType(Op *op, Value *v);

/// v's sizes when all are static, else nothing.
std::optional<std::vector<int64_t>> staticSizes(const Value *v);

/// The ops named `name` in g, nested blocks included, collected before any is rewritten.
std::vector<Op *> opsNamed(Graph &g, std::string_view name);

/// `reduce` ("mean" or "sum") of v over every dim but the channels (dim 1), kept as size 1:
/// batch norm's per-channel statistics. With spatial dims, a batch of several and 2^16 values
/// or more (static sizes), in two stages, the spatial dims per (sample, channel) first, then
/// the batch: each stage's kernel
/// splits over threads (one pass over a channels-last activation keeping only its channels,
/// blocked along them, has a single row: one thread), and the f32 sums are shorter. Batch
/// norm's decomposition and its derivative rule build the same ops, which CSE then merges.
/// `accumulate` (a mean's dtype attribute): the reductions add in that dtype.
Value *perChannel(Builder &b, std::string_view reduce, Value *v,
                  std::optional<DType> accumulate = std::nullopt);

/// Batch norm's batch statistics of x [N, C, ...] per channel, [1, C, 1, ...], accumulated in
/// f64 as eager accumulates them (in f32, the mean's error, times the mean's size over the
/// deviation's, gave the normalized output up to 2.7x eager's error against f64): `wideMean`
/// (f64), `mean` it rounded to x's dtype (eager's saved mean), `var` the biased variance of
/// x - mean in x's dtype. The decomposition and the derivative rule build the same ops, which
/// CSE merges.
struct BatchStatistics {
  Value *wideMean, *mean, *var;
};
BatchStatistics batchStatistics(Builder &b, Value *x);

/// The attributes an op joining the products `ops` (a batched or merged product) keeps of
/// theirs: bf16-products' `fpmath` where every one has it (exact f32 is always allowed).
AttrMap joinedProductAttrs(const std::vector<const Op *> &ops);

} // namespace xjit::passes
