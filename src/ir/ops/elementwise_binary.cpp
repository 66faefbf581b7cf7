// Binary elementwise ops over tensor-or-scalar operands: arithmetic, division and remainders,
// powers, comparisons, logical and bitwise ops. Tensor operands follow torch.result_type and
// broadcasting; two Python scalars give a Python scalar with Python's semantics (bool behaves as
// int in arithmetic, division by zero is an error).
#include "ops/elementwise_util.h"

#include <cmath>

namespace xjit::ops::ew {
namespace {

/// How the result dtype follows from the promoted operand dtype.
enum class Result { Promoted, Float, Bool };

struct Impl {
  Float2 f;
  Int2 i;
};
/// Builds the scalar functions from attributes, the compute dtype and the run-time operands.
using Maker = std::function<Impl(const Op &, DType, std::span<const RtValue>)>;

struct BinaryDef {
  std::string name, summary;
  Result result = Result::Promoted;
  uint8_t mask = kAnyDType; // accepted promoted dtypes
  std::vector<AttrSpec> attrs = {};
  Maker make;
  /// Extra inference check, given the promoted (tensors) or compute (scalars) dtype.
  std::function<void(const Op &, DType)> check = nullptr;
  /// Result kind depending on attributes (div's rounding_mode); overrides `result`.
  std::function<Result(const Op &)> resultOf = nullptr;
  bool commutative = false;
  bool boolStaysBool = false;  // two Python bools give a bool (bitwise, max/min), not an int
  bool zeroDivIsError = false; // Python raises ZeroDivisionError for scalar operands
  /// For f16/bf16 results PyTorch's CPU kernel reads a one-element `other` operand in f32 without
  /// first rounding it to the tensor's dtype (mul, div, floor_divide).
  bool otherScalarInOpMath = false;
};

/// Python scalars compute in i64 / f64 (or bool for bitwise and max/min of two bools).
DType scalarComputeDType(const BinaryDef &d, const Type &a, const Type &b) {
  auto cat = std::max(a.category(), b.category());
  if (cat == DTypeCategory::Floating)
    return DType::F64;
  if (cat == DTypeCategory::Bool && (d.boolStaysBool || d.result == Result::Bool))
    return DType::Bool;
  return DType::I64;
}

DType resultDTypeOf(Result r, DType compute) {
  switch (r) {
  case Result::Float:
    return floatResultDType(compute);
  case Result::Bool:
    return DType::Bool;
  default:
    return compute;
  }
}

Result resultKind(const BinaryDef &d, const Op &op) {
  return d.resultOf ? d.resultOf(op) : d.result;
}

std::vector<Type> inferBinary(const BinaryDef &d, const Op &op) {
  const Type &a = tensorOrScalarOperand(op, 0), &b = tensorOrScalarOperand(op, 1);
  Result r = resultKind(d, op);
  if (a.isScalar() && b.isScalar()) {
    DType compute = scalarComputeDType(d, a, b);
    requireDType(op, d.mask, compute, "scalar operand");
    if (d.check)
      d.check(op, compute);
    DType out = r == Result::Float ? DType::F64 : resultDTypeOf(r, compute);
    return {scalarType(dtypeCategory(out))};
  }
  DType promoted = resultTypeOfOperands(op, 0, 2);
  requireDType(op, d.mask, promoted, "promoted");
  if (d.check)
    d.check(op, promoted);
  return {broadcastResult(op, 0, 2, resultDTypeOf(r, promoted))};
}

/// Two Python scalars: computed in i64 / f64 (or bool) and returned as a Python scalar.
RtValue runScalars(const BinaryDef &d, const Op &op, std::span<const RtValue> in) {
  Result r = resultKind(d, op);
  DType compute = scalarComputeDType(d, op.operand(0)->type(), op.operand(1)->type());
  DType out = r == Result::Float ? DType::F64 : resultDTypeOf(r, compute);
  Impl impl = d.make(op, compute, in);
  bool useFloat = isFloating(compute) || r == Result::Float;
  if (d.zeroDivIsError && (useFloat ? in[1].toDouble() == 0 : in[1].toInt() == 0))
    kernelFail(op.name() + ": ZeroDivisionError");
  if (useFloat) {
    double v = impl.f(in[0].toDouble(), in[1].toDouble());
    if (out == DType::Bool)
      return RtValue(v != 0);
    return RtValue(v);
  }
  int64_t v = impl.i(in[0].toInt(), in[1].toInt());
  if (out == DType::Bool)
    return RtValue(v != 0);
  return RtValue(v);
}

std::vector<RtValue> runBinary(const BinaryDef &d, const Op &op, std::span<const RtValue> in) {
  if (in.size() != 2)
    kernelFail(op.name() + ": expected 2 operands");
  if (!in[0].isTensor() && !in[1].isTensor())
    return std::vector<RtValue>(1, runScalars(d, op, in));
  DType out = resultDType(op);
  DType compute = resultKind(d, op) == Result::Float ? out : resultTypeOfOperands(op, 0, 2);
  bool otherIsScalar = !in[1].isTensor() || in[1].tensor().numel() == 1;
  if (d.otherScalarInOpMath && otherIsScalar && (compute == DType::F16 || compute == DType::BF16))
    compute = DType::F32; // f16/bf16 inputs convert to f32 exactly; the result still rounds
  Impl impl = d.make(op, compute, in);
  Tensor t =
      map2(operandAs(in, 0, compute), operandAs(in, 1, compute), compute, out, impl.f, impl.i);
  return std::vector<RtValue>(1, RtValue(std::move(t)));
}

void addBinary(OpRegistry &r, BinaryDef d) {
  auto def = std::make_shared<const BinaryDef>(std::move(d));
  r.add(OpDef{
      .name = def->name,
      .summary = def->summary,
      .operands = {{"self"}, {"other"}},
      .attrs = def->attrs,
      .traits = kElementwise | (def->commutative ? kCommutative : kNoTraits),
      .infer = [def](const Op &op) { return inferBinary(*def, op); },
      .kernel = [def](const Op &op,
                      std::span<const RtValue> in) { return runBinary(*def, op, in); },
  });
}

Maker fixed(Float2 f, Int2 i) {
  return [f, i](const Op &, DType, std::span<const RtValue>) { return Impl{f, i}; };
}

// ---- division family, as PyTorch's CPU kernels compute them (in the op-math
// type: float for f16/bf16/f32, so intermediate rounding matches) ----

[[noreturn]] void zeroDivision() { kernelFail("ZeroDivisionError"); }

template <class T> T divFloor(T a, T b) {
  if (b == 0)
    return a / b;
  T mod = std::fmod(a, b);
  T div = (a - mod) / b;
  if (mod != 0 && (b < 0) != (mod < 0))
    div -= T(1);
  if (div == 0)
    return std::copysign(T(0), a / b);
  T floordiv = std::floor(div);
  if (div - floordiv > T(0.5))
    floordiv += T(1);
  return floordiv;
}

template <class T> T remainderOf(T a, T b) {
  T mod = std::fmod(a, b);
  if (mod != 0 && (b < 0) != (mod < 0))
    mod += b;
  return mod;
}

/// The float function evaluated in the op-math type of `compute`.
Float2 inOpMath(DType compute, float (*f32)(float, float), double (*f64)(double, double)) {
  if (compute == DType::F64)
    return f64;
  return [f32](double a, double b) {
    return static_cast<double>(f32(static_cast<float>(a), static_cast<float>(b)));
  };
}

int64_t intDivTrunc(int64_t a, int64_t b) {
  if (b == 0)
    zeroDivision();
  return b == -1 ? wrapNeg(a) : a / b; // INT64_MIN / -1 wraps instead of trapping
}

int64_t intDivFloor(int64_t a, int64_t b) {
  if (b == 0)
    zeroDivision();
  if (b == -1)
    return wrapNeg(a);
  int64_t q = a / b, rem = a % b;
  return (rem != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

int64_t intRemainder(int64_t a, int64_t b) {
  if (b == 0)
    zeroDivision();
  if (b == -1)
    return 0;
  int64_t m = a % b;
  return (m != 0 && ((m < 0) != (b < 0))) ? m + b : m;
}

int64_t intFmod(int64_t a, int64_t b) {
  if (b == 0)
    zeroDivision();
  return b == -1 ? 0 : a % b;
}

/// Integer power with wrapping; negative exponents give 0 except for bases 1 and -1 (torch).
int64_t intPow(int64_t base, int64_t exp) {
  if (exp < 0) {
    if (base == 1)
      return 1;
    if (base == -1)
      return (exp % 2) ? -1 : 1;
    return 0;
  }
  int64_t result = 1;
  while (exp) {
    if (exp & 1)
      result = wrapMul(result, base);
    exp >>= 1;
    base = wrapMul(base, base);
  }
  return result;
}

Maker divMaker() {
  return [](const Op &op, DType c, std::span<const RtValue>) -> Impl {
    const std::string &mode = attrStr(op, "rounding_mode");
    if (mode == "trunc")
      return {inOpMath(
                  c, [](float a, float b) { return std::trunc(a / b); },
                  [](double a, double b) { return std::trunc(a / b); }),
              intDivTrunc};
    if (mode == "floor")
      return {inOpMath(c, divFloor<float>, divFloor<double>), intDivFloor};
    return {[](double a, double b) { return a / b; }, nullptr};
  };
}

// ---- add / sub with alpha ----

void checkAlpha(const Op &op, DType d) {
  const Attr *alpha = op.attrOrNull("alpha");
  if (alpha && alpha->kind() == AttrKind::Float && !isFloating(d))
    inferFail(op.name() + ": for integral input tensors, argument alpha must "
                          "not be a floating point number");
}

Maker addMaker(double sign) {
  return [sign](const Op &op, DType, std::span<const RtValue>) -> Impl {
    double alpha = attrFloat(op, "alpha") * sign;
    int64_t ialpha = static_cast<int64_t>(alpha);
    return {[alpha](double a, double b) { return a + alpha * b; },
            [ialpha](int64_t a, int64_t b) { return wrapAdd(a, wrapMul(ialpha, b)); }};
  };
}

// ---- comparisons, min/max ----

Float2 nanPropagating(double (*f)(double, double)) {
  return [f](double a, double b) { return std::isnan(a) || std::isnan(b) ? kNaN : f(a, b); };
}

void addArithmetic(OpRegistry &r) {
  const AttrSpec alpha = attrDef("alpha", AttrKind::Float, Attr(int64_t{1}));
  addBinary(r, {.name = "add",
                .summary = "self + alpha * other",
                .attrs = {alpha},
                .make = addMaker(1),
                .check = checkAlpha});
  addBinary(r, {.name = "sub",
                .summary = "self - alpha * other (bool operands rejected, as in torch)",
                .attrs = {alpha},
                .make = addMaker(-1),
                .check = [](const Op &op, DType d) {
                  checkAlpha(op, d);
                  if (allScalars(op, 0, 2))
                    return;
                  for (size_t i = 0; i < 2; ++i)
                    if (op.operand(i)->type().category() == DTypeCategory::Bool)
                      inferFail("sub: subtraction, the `-` operator, with a bool tensor "
                                "is not "
                                "supported; if you are trying to invert a mask, use "
                                "logical_not instead");
                }});
  addBinary(r, {.name = "mul",
                .summary = "self * other",
                .make = fixed([](double a, double b) { return a * b; }, wrapMul),
                .commutative = true,
                .otherScalarInOpMath = true});
  addBinary(r, {.name = "div",
                .summary = "self / other; rounding_mode \"\" (true division, float result), "
                           "\"trunc\" or \"floor\" (keep the promoted dtype)",
                .mask = kAnyDType,
                .attrs = {attrDef("rounding_mode", AttrKind::Str, Attr(""))},
                .make = divMaker(),
                .check =
                    [](const Op &op, DType d) {
                      const std::string &mode = attrStr(op, "rounding_mode");
                      if (mode != "" && mode != "trunc" && mode != "floor")
                        inferFail("div: rounding_mode must be \"\", \"trunc\" or "
                                  "\"floor\", got \"" +
                                  mode + "\"");
                      if (mode != "")
                        requireDType(op, kNumeric, d, "promoted");
                    },
                .resultOf =
                    [](const Op &op) {
                      return attrStr(op, "rounding_mode").empty() ? Result::Float
                                                                  : Result::Promoted;
                    },
                .zeroDivIsError = true,
                .otherScalarInOpMath = true});
  addBinary(r, {.name = "floor_divide",
                .summary = "floor(self / other), keeping the promoted dtype",
                .mask = kNumeric,
                .make =
                    [](const Op &, DType c, std::span<const RtValue>) {
                      return Impl{inOpMath(c, divFloor<float>, divFloor<double>), intDivFloor};
                    },
                .zeroDivIsError = true,
                .otherScalarInOpMath = true});
  addBinary(r, {.name = "remainder",
                .summary = "self - floor(self / other) * other (sign of the divisor, Python %)",
                .mask = kNumeric,
                .make =
                    [](const Op &, DType c, std::span<const RtValue>) {
                      return Impl{inOpMath(c, remainderOf<float>, remainderOf<double>),
                                  intRemainder};
                    },
                .zeroDivIsError = true});
  addBinary(r, {.name = "fmod",
                .summary = "C fmod: remainder with the sign of the dividend",
                .mask = kNumeric,
                .make = fixed([](double a, double b) { return std::fmod(a, b); }, intFmod),
                .zeroDivIsError = true});
  addBinary(r, {.name = "pow",
                .summary = "self ** other; integer tensors to negative scalar powers "
                           "are errors",
                .make =
                    [](const Op &op, DType c, std::span<const RtValue> in) {
                      if (!isFloating(c) && (in[1].isInt() || in[1].isBool()) && in[1].toInt() < 0)
                        kernelFail("pow: integers to negative integer powers are not allowed");
                      return Impl{[](double a, double b) { return std::pow(a, b); }, intPow};
                    },
                // torch special-cases a bool exponent (x ** True is x, x ** False is 1), so only
                // that form accepts bool tensors.
                .check =
                    [](const Op &op, DType d) {
                      if (d == DType::Bool && op.operand(1)->type().kind() != TypeKind::Bool)
                        inferFail("pow: not supported for bool tensors");
                    }});
}

void addFloatMath(OpRegistry &r) {
  addBinary(r, {.name = "atan2",
                .summary = "arctangent of self / other with the quadrant (float result)",
                .result = Result::Float,
                .make = fixed([](double a, double b) { return std::atan2(a, b); }, nullptr)});
  addBinary(r, {.name = "hypot",
                .summary = "sqrt(self^2 + other^2), floating dtypes only",
                .mask = kFloatOk,
                .make = fixed([](double a, double b) { return std::hypot(a, b); }, nullptr),
                .commutative = true});
  addBinary(r, {.name = "copysign",
                .summary = "|self| with the sign bit of other (float result)",
                .result = Result::Float,
                .make = fixed([](double a, double b) { return std::copysign(a, b); }, nullptr)});
  addBinary(r, {.name = "xlogy",
                .summary = "self * log(other), 0 where self == 0 unless other is NaN",
                .result = Result::Float,
                .make = fixed(
                    [](double x, double y) {
                      if (std::isnan(y))
                        return kNaN;
                      return x == 0 ? 0.0 : x * std::log(y);
                    },
                    nullptr)});
}

void addMinMax(OpRegistry &r) {
  auto mx = [](double a, double b) { return a > b ? a : b; };
  auto mn = [](double a, double b) { return a < b ? a : b; };
  auto imx = [](int64_t a, int64_t b) { return std::max(a, b); };
  auto imn = [](int64_t a, int64_t b) { return std::min(a, b); };
  addBinary(r, {.name = "maximum",
                .summary = "elementwise max; NaN propagates",
                .make = fixed(nanPropagating(mx), imx),
                .commutative = true,
                .boolStaysBool = true});
  addBinary(r, {.name = "minimum",
                .summary = "elementwise min; NaN propagates",
                .make = fixed(nanPropagating(mn), imn),
                .commutative = true,
                .boolStaysBool = true});
  addBinary(r, {.name = "fmax",
                .summary = "elementwise max ignoring NaN (NaN only if both are NaN)",
                .make = fixed(
                    [mx](double a, double b) {
                      return std::isnan(a) ? b : std::isnan(b) ? a : mx(a, b);
                    },
                    imx),
                .commutative = true,
                .boolStaysBool = true});
  addBinary(r, {.name = "fmin",
                .summary = "elementwise min ignoring NaN (NaN only if both are NaN)",
                .make = fixed(
                    [mn](double a, double b) {
                      return std::isnan(a) ? b : std::isnan(b) ? a : mn(a, b);
                    },
                    imn),
                .commutative = true,
                .boolStaysBool = true});
}

/// Rows whose result is bool: comparisons in the promoted dtype, and logical ops.
struct PredicateRow {
  const char *name, *summary;
  bool (*f)(double, double);
  bool (*i)(int64_t, int64_t);
  bool commutative;
};

template <class T> bool eqOf(T a, T b) { return a == b; }
template <class T> bool neOf(T a, T b) { return a != b; }
template <class T> bool ltOf(T a, T b) { return a < b; }
template <class T> bool leOf(T a, T b) { return a <= b; }
template <class T> bool gtOf(T a, T b) { return a > b; }
template <class T> bool geOf(T a, T b) { return a >= b; }
template <class T> bool andOf(T a, T b) { return a != 0 && b != 0; }
template <class T> bool orOf(T a, T b) { return a != 0 || b != 0; }
template <class T> bool xorOf(T a, T b) { return (a != 0) != (b != 0); }

#define XJIT_PRED(fn) fn<double>, fn<int64_t>
const PredicateRow kPredicateRows[] = {
    {"eq", "self == other", XJIT_PRED(eqOf), true},
    {"ne", "self != other", XJIT_PRED(neOf), true},
    {"lt", "self < other", XJIT_PRED(ltOf), false},
    {"le", "self <= other", XJIT_PRED(leOf), false},
    {"gt", "self > other", XJIT_PRED(gtOf), false},
    {"ge", "self >= other", XJIT_PRED(geOf), false},
    {"logical_and", "self != 0 and other != 0", XJIT_PRED(andOf), true},
    {"logical_or", "self != 0 or other != 0", XJIT_PRED(orOf), true},
    {"logical_xor", "(self != 0) != (other != 0)", XJIT_PRED(xorOf), true},
};
#undef XJIT_PRED

struct BitwiseRow {
  const char *name, *summary;
  int64_t (*i)(int64_t, int64_t);
};
const BitwiseRow kBitwiseRows[] = {
    {"bitwise_and", "self & other (integers and bool)", [](int64_t a, int64_t b) { return a & b; }},
    {"bitwise_or", "self | other (integers and bool)", [](int64_t a, int64_t b) { return a | b; }},
    {"bitwise_xor", "self ^ other (integers and bool)", [](int64_t a, int64_t b) { return a ^ b; }},
};

} // namespace

void registerBinaryOps(OpRegistry &r) {
  addArithmetic(r);
  addFloatMath(r);
  addMinMax(r);
  for (const PredicateRow &p : kPredicateRows) {
    auto f = p.f;
    auto i = p.i;
    addBinary(r, {.name = p.name,
                  .summary = p.summary,
                  .result = Result::Bool,
                  .make = fixed([f](double a, double b) { return double(f(a, b)); },
                                [i](int64_t a, int64_t b) -> int64_t { return i(a, b); }),
                  .commutative = p.commutative});
  }
  for (const BitwiseRow &b : kBitwiseRows)
    addBinary(r, {.name = b.name,
                  .summary = b.summary,
                  .mask = kIntegral,
                  .make = fixed(nullptr, b.i),
                  .commutative = true,
                  .boolStaysBool = true});
}

} // namespace xjit::ops::ew
