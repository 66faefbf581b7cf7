// Private interface between the fusion lowering (lower_fusion.cpp) and the table of elementwise
// rules (elementwise_rules.cpp).
#pragma once

#include "xjit/backend/kernel_ir.h"
#include "xjit/ir/ir.h"

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace xjit::backend::ew {

/// Adds a kernel-level check (run once before the loops) failing with `message`. Rules use it for
/// conditions on scalar operands, which do not depend on the element.
using AssertFn = std::function<void(Expr ok, std::string message)>;

/// Whether the table has a rule for the op; when not, *why says so.
bool supports(const Op &op, std::string *why);
/// The scalar expression computing one element of op's result from its operands' elements
/// (tensor elements in their dtype; Python scalars as f64 / i64 / bool). The result has the op's
/// result dtype. Call only when supports(op).
Expr lower(const Op &op, const std::vector<Expr> &operands, const AssertFn &addAssert);
/// Names of the ops in the table, sorted.
std::vector<std::string> names();

} // namespace xjit::backend::ew

namespace xjit::backend::red {

/// Reductions and row ops a loop kernel computes (reduction_rules.cpp).
enum class Kind : uint8_t {
  Sum,
  Prod,
  Mean,
  Max, // amax, max (all dims)
  Min, // amin, min (all dims)
  Var,
  Std,
  Softmax,
  LogSoftmax,
  LayerNorm,
  RmsNorm,
  Norm,   // vector p-norm
  ArgMax, // first index of the maximum (NaN first), i64
  ArgMin,
};

struct Info {
  Kind kind;
  std::vector<int64_t> dims; // reduced dims of operand 0, normalized and sorted
  bool keepdim = false;
  bool rowOp = false; // the result has operand 0's shape (softmax, norms)
};

/// Info for an op a reduction kernel computes, or nullopt (and *why) when it is not one.
std::optional<Info> classify(const Op &op, std::string *why);
/// Whether the op is a reduction or row op at all (supported or not).
bool isReductionLike(const Op &op);

} // namespace xjit::backend::red
