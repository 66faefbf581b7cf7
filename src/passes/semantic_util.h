// Small helpers shared by the semantic passes (freeze, erase-device-ops, functionalize,
// mixed-precision): reading constant operands, optional operands, and removing what a rewrite
// left dead.
#pragma once

#include "xjit/ir/ir.h"
#include "xjit/ir/tensor.h"

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

} // namespace xjit::passes
