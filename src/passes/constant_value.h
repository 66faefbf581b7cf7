// What passes can know statically about a value's contents: the value of a constant (or of a
// constant-like op without operands, evaluated), and the one number every element of a tensor
// is known to hold (splat), for algebraic rewrites.
#pragma once

#include "xjit/ir/ir.h"
#include "xjit/ir/value.h"

#include <optional>

namespace xjit::passes {

/// True for `constant` and for constant-like ops without operands (zeros, full, arange...).
bool isConstantSource(const Op *op);

/// The run-time value of v when it is given by a constant source and, for tensors, has at most
/// maxElements elements. Constant-like ops are evaluated with their reference kernel.
std::optional<RtValue> constantValue(const Value *v, int64_t maxElements);

/// If every element of v (a scalar or a tensor) is known to be the same number, that number as
/// the stored value (after rounding to v's dtype): constants, zeros/ones/full and their
/// _like / new_ forms. NaN is returned as NaN; callers compare with ==.
std::optional<double> splatValue(const Value *v);

} // namespace xjit::passes
