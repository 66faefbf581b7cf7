// Private helpers shared by the elementwise op rows (elementwise*.cpp): dtype-class checks,
// tensor-or-scalar operands, result types of broadcasting ops, and thin kernel adapters over
// ops::mapElements. Integer helpers wrap like the fixed-width C types instead of overflowing.
#pragma once

#include "ops/op_util.h"

#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <vector>

namespace xjit::ops::ew {

// Parts of registerElementwiseOps, one per file.
void registerUnaryOps(OpRegistry &r);  // elementwise_unary.cpp
void registerBinaryOps(OpRegistry &r); // elementwise_binary.cpp
void registerMiscOps(OpRegistry &r);   // elementwise_misc.cpp: clamp, where, cast, lerp...

/// An attribute slot with a default, an optional one (may be absent) and a required one.
inline AttrSpec attrDef(std::string name, AttrKind kind, Attr def) {
  return {.name = std::move(name), .kind = kind, .defaultValue = std::move(def)};
}
inline AttrSpec attrOpt(std::string name, AttrKind kind) {
  return {.name = std::move(name), .kind = kind, .optional = true};
}

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

/// The dtype classes an op accepts.
enum DTypeMask : uint8_t {
  kBoolOk = 1,
  kIntOk = 2,
  kFloatOk = 4,
  kNumeric = kIntOk | kFloatOk,
  kIntegral = kBoolOk | kIntOk,
  kAnyDType = kBoolOk | kIntOk | kFloatOk,
};

bool dtypeAllowed(uint8_t mask, DType d);
/// Throws TypeInferenceError ("<op>: <what> dtype <d> is not supported (expected ...)") when d
/// is not in mask.
void requireDType(const Op &op, uint8_t mask, DType d, std::string_view what = "input");

/// Operand i must be a tensor or a Python scalar (int, float, bool); returns its type.
const Type &tensorOrScalarOperand(const Op &op, size_t i);
/// Broadcast shape and device of operands [first, first + count) (scalars act as 0-d tensors). At
/// least one must be a tensor; devices must agree except for 0-d tensors.
Type broadcastResult(const Op &op, size_t first, size_t count, DType dtype);
/// The Python scalar type of a category (bool, int, float).
Type scalarType(DTypeCategory c);
/// True when every operand in [first, first + count) is a Python scalar.
bool allScalars(const Op &op, size_t first, size_t count);

// ---- kernels ----
using Float1 = std::function<double(double)>;
using Int1 = std::function<int64_t(int64_t)>;
using Float2 = std::function<double(double, double)>;
using Int2 = std::function<int64_t(int64_t, int64_t)>;

/// Run-time operand i as a tensor converted to `d` (scalars become 0-d tensors); inputs are
/// converted first because PyTorch computes in the common dtype (e.g. i64 -> f32 rounds).
Tensor operandAs(std::span<const RtValue> in, size_t i, DType d);
/// mapElements over inputs already in `compute`, with a bool output normalized to 0/1.
Tensor mapAll(std::span<const Tensor> inputs, DType compute, DType out, const FloatFn &f,
              const IntFn &i);
Tensor map1(const Tensor &x, DType compute, DType out, const Float1 &f, const Int1 &i);
Tensor map2(const Tensor &a, const Tensor &b, DType compute, DType out, const Float2 &f,
            const Int2 &i);

/// Whether an (int or float) number fits the range of `d` (for clamp bounds, like torch's "value
/// cannot be converted to type ... without overflow").
bool scalarFits(DType d, double v);
/// Largest finite value of a floating dtype.
double floatMax(DType d);

// ---- wrapping int64 arithmetic (no UB on overflow) ----
inline int64_t wrapAdd(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}
inline int64_t wrapSub(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
}
inline int64_t wrapMul(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}
inline int64_t wrapNeg(int64_t a) { return wrapSub(0, a); }

} // namespace xjit::ops::ew
