// Private interface between the fusion lowering (lower_fusion.cpp) and the table of elementwise
// rules (elementwise_rules.cpp).
#pragma once

#include "xjit/backend/kernel_ir.h"
#include "xjit/ir/ir.h"

#include <functional>
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
