// The elementwise lowering table: one row per IR op, mapping the op's operand elements to a
// scalar expression of the kernel IR. Each row names how the op picks its compute dtype (as its
// reference kernel in src/ir/ops/elementwise_*.cpp does) and a formula written with the same
// operations, in the same order, as the reference, so results agree exactly where the arithmetic
// is exactly rounded and within a few ulp where math functions are approximated.
//
// Operands are converted as the reference converts them: first to the compute dtype (a Python
// float scalar rounds to f32, a bf16 tensor is already bf16), then to the arithmetic dtype:
// f16 / bf16 compute in f32 (PyTorch's op-math type), bool in i64 (the reference's integer
// path; a bool result is `!= 0`). The driver casts the formula's value to the result dtype.
#include "lower_internal.h"

#include "ops/elementwise_util.h" // ops::resultTypeOfOperands, attr helpers, floatMax
#include "xjit/ir/op_registry.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numbers>
#include <optional>

namespace xjit::backend::ew {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

/// How an op picks the dtype it computes in.
enum class Compute : uint8_t {
  Out,      // the result dtype (float math, same-dtype unary ops, float-result binary ops, misc)
  In0,      // operand 0's dtype (predicates)
  Promoted, // torch.result_type of operands 0 and 1 (binary ops)
  DivMode,  // div: Out for true division, Promoted with a rounding mode
};

DType opMath(DType compute) {
  if (compute == DType::F16 || compute == DType::BF16) return DType::F32;
  return compute == DType::Bool ? DType::I64 : compute;
}

struct Ctx {
  const Op &op;
  const std::vector<Expr> &raw;
  DType compute, c;
  const AssertFn &addAssert;

  Expr arg(size_t i) const { return cast(c, cast(compute, raw[i])); }
  Expr x() const { return arg(0); }
  Expr y() const { return arg(1); }
  /// A constant in the arithmetic dtype.
  Expr k(double v) const { return isFloating(c) ? constFloat(c, v) : constInt(c, int64_t(v)); }
  bool fl() const { return isFloating(c); }
  double attrF(std::string_view n) const { return ops::attrFloat(op, n); }
  bool hasAttr(std::string_view n) const { return ops::hasAttrValue(op, n); }
};

using Fn = Expr (*)(const Ctx &);

struct Row {
  const char *name;
  Compute compute;
  Fn fn;
  /// PyTorch's CPU kernel reads a one-element `other` of an f16/bf16 op in f32 (mul, div,
  /// floor_divide), as the reference does.
  bool otherScalarInOpMath = false;
};

// ---- a small expression vocabulary ----

Expr add(Expr a, Expr b) { return binary(BinaryOp::Add, std::move(a), std::move(b)); }
Expr sub(Expr a, Expr b) { return binary(BinaryOp::Sub, std::move(a), std::move(b)); }
Expr mul(Expr a, Expr b) { return binary(BinaryOp::Mul, std::move(a), std::move(b)); }
Expr div(Expr a, Expr b) { return binary(BinaryOp::Div, std::move(a), std::move(b)); }
Expr rem(Expr a, Expr b) { return binary(BinaryOp::Rem, std::move(a), std::move(b)); }
Expr lt(Expr a, Expr b) { return compare(CmpOp::Lt, std::move(a), std::move(b)); }
Expr gt(Expr a, Expr b) { return compare(CmpOp::Gt, std::move(a), std::move(b)); }
Expr eq(Expr a, Expr b) { return compare(CmpOp::Eq, std::move(a), std::move(b)); }
Expr ne(Expr a, Expr b) { return compare(CmpOp::Ne, std::move(a), std::move(b)); }
Expr un(UnaryOp op, Expr a) { return unary(op, std::move(a)); }
Expr isNan(Expr a) { return unary(UnaryOp::IsNan, std::move(a)); }
Expr orB(Expr a, Expr b) { return binary(BinaryOp::Or, std::move(a), std::move(b)); }
Expr andB(Expr a, Expr b) { return binary(BinaryOp::And, std::move(a), std::move(b)); }

/// x < lo ? lo : (x > hi ? hi : x): NaN passes through (the reference's clampNaN / clampInt).
Expr clampNaN(const Expr &x, const Expr &lo, const Expr &hi) {
  return select(lt(x, lo), lo, select(gt(x, hi), hi, x));
}

/// Python floor division, as the reference's divFloor<T> computes it (PyTorch's formula).
Expr divFloorFloat(const Ctx &c, const Expr &a, const Expr &b) {
  Expr mod = rem(a, b);
  Expr d = div(sub(a, mod), b);
  Expr adjust = andB(ne(mod, c.k(0)), ne(lt(b, c.k(0)), lt(mod, c.k(0))));
  d = select(adjust, sub(d, c.k(1)), d);
  Expr floored = un(UnaryOp::Floor, d);
  floored = select(gt(sub(d, floored), c.k(0.5)), add(floored, c.k(1)), floored);
  Expr zero = binary(BinaryOp::CopySign, c.k(0), div(a, b));
  return select(eq(b, c.k(0)), div(a, b), select(eq(d, c.k(0)), zero, floored));
}

Expr divFloorInt(const Ctx &c, const Expr &a, const Expr &b) {
  Expr q = div(a, b), r = rem(a, b);
  Expr adjust = andB(ne(r, c.k(0)), ne(lt(a, c.k(0)), lt(b, c.k(0))));
  return select(adjust, sub(q, c.k(1)), q);
}

/// Remainder with the sign of the divisor (Python %).
Expr pythonRem(const Ctx &c, const Expr &a, const Expr &b) {
  Expr m = rem(a, b);
  Expr adjust = andB(ne(m, c.k(0)), ne(lt(b, c.k(0)), lt(m, c.k(0))));
  return select(adjust, add(m, b), m);
}

/// std::max(a, b) / std::min(a, b) on doubles: (a < b) ? b : a and (b < a) ? b : a.
Expr stdMax(const Expr &a, const Expr &b) { return select(lt(a, b), b, a); }
Expr stdMin(const Expr &a, const Expr &b) { return select(lt(b, a), b, a); }

// ---- unary rows ----

/// Math functions applied as they are (integers and bool were converted to the float result).
const std::pair<const char *, UnaryOp> kMathRows[] = {
    {"exp", UnaryOp::Exp},         {"exp2", UnaryOp::Exp2},
    {"expm1", UnaryOp::Expm1},     {"log", UnaryOp::Log},
    {"log2", UnaryOp::Log2},       {"log10", UnaryOp::Log10},
    {"log1p", UnaryOp::Log1p},     {"sqrt", UnaryOp::Sqrt},
    {"rsqrt", UnaryOp::Rsqrt},     {"reciprocal", UnaryOp::Reciprocal},
    {"sin", UnaryOp::Sin},         {"cos", UnaryOp::Cos},
    {"tan", UnaryOp::Tan},         {"asin", UnaryOp::Asin},
    {"acos", UnaryOp::Acos},       {"atan", UnaryOp::Atan},
    {"sinh", UnaryOp::Sinh},       {"cosh", UnaryOp::Cosh},
    {"tanh", UnaryOp::Tanh},       {"asinh", UnaryOp::Asinh},
    {"acosh", UnaryOp::Acosh},     {"atanh", UnaryOp::Atanh},
    {"sigmoid", UnaryOp::Sigmoid}, {"erf", UnaryOp::Erf},
    {"erfc", UnaryOp::Erfc},       {"lgamma", UnaryOp::Lgamma},
    {"neg", UnaryOp::Neg},         {"abs", UnaryOp::Abs},
};

/// floor / ceil / trunc are the identity on integers.
template <UnaryOp Op> Expr roundingRule(const Ctx &c) { return c.fl() ? un(Op, c.x()) : c.x(); }

constexpr double kSeluAlpha = 1.6732632423543772848170429916717;
constexpr double kSeluScale = 1.0507009873554804934193349852946;

Expr hardsigmoidCore(const Ctx &c, const Expr &x) {
  Expr t = add(x, c.k(3));
  return stdMin(stdMax(t, c.k(0)), c.k(6));
}

Expr roundRule(const Ctx &c) {
  int64_t decimals = ops::attrInt(c.op, "decimals");
  if (!c.fl()) return c.x();
  if (decimals == 0) return un(UnaryOp::RoundEven, c.x());
  // The scale rounds to the op-math dtype and so does every step (torch's CPU kernel).
  double scale = std::pow(10.0, double(std::abs(decimals)));
  Expr s = constFloat(c.c, c.c == DType::F64 ? scale : double(float(scale)));
  if (decimals < 0) return mul(un(UnaryOp::RoundEven, div(c.x(), s)), s);
  return div(un(UnaryOp::RoundEven, mul(c.x(), s)), s);
}

/// The erf form as PyTorch's CPU kernel computes it (GeluKernel.cpp: x * (1 / sqrt 2), a product
/// rather than a division). The tanh form 0.5 x (1 + tanh u) as x sigmoid(2u), u = k (x + c x^3):
/// equal, one exp and one division instead of tanh's exp, polynomial and division, and no
/// cancellation in 1 + tanh u for x < 0 (eager's rounding there, up to 4e-7 absolute, is the
/// difference between the two).
Expr geluRule(const Ctx &c) {
  Expr x = c.x();
  if (ops::attrStr(c.op, "approximate") == "tanh") {
    Expr cube = mul(c.k(0.044715), mul(mul(x, x), x));
    return mul(x,
               un(UnaryOp::Sigmoid, mul(c.k(2 * std::sqrt(2.0 / std::numbers::pi)), add(x, cube))));
  }
  return mul(mul(c.k(0.5), x), add(c.k(1), un(UnaryOp::Erf, mul(x, c.k(1 / std::numbers::sqrt2)))));
}

Expr hardtanhRule(const Ctx &c) {
  double lo = c.attrF("min_val"), hi = c.attrF("max_val");
  if (c.fl()) return clampNaN(c.x(), c.k(lo), c.k(hi));
  // Integer bounds are compared in i64 (they may lie outside the dtype); the result wraps.
  return clampNaN(cast(DType::I64, c.x()), constIdx(int64_t(lo)), constIdx(int64_t(hi)));
}

Expr nanToNumRule(const Ctx &c) {
  if (!c.fl()) return c.x();
  double nan = c.attrF("nan");
  double pos = c.hasAttr("posinf") ? c.attrF("posinf") : ops::ew::floatMax(c.compute);
  double neg = c.hasAttr("neginf") ? c.attrF("neginf") : -ops::ew::floatMax(c.compute);
  Expr x = c.x();
  return select(isNan(x), c.k(nan),
                select(eq(x, c.k(kInf)), c.k(pos), select(eq(x, c.k(-kInf)), c.k(neg), x)));
}

const Row kUnaryRows[] = {
    {"floor", Compute::Out, roundingRule<UnaryOp::Floor>},
    {"ceil", Compute::Out, roundingRule<UnaryOp::Ceil>},
    {"trunc", Compute::Out, roundingRule<UnaryOp::Trunc>},
    {"round", Compute::Out, roundRule},
    {"relu", Compute::Out, [](const Ctx &c) { return select(lt(c.x(), c.k(0)), c.k(0), c.x()); }},
    {"relu6", Compute::Out, [](const Ctx &c) { return clampNaN(c.x(), c.k(0), c.k(6)); }},
    {"sign", Compute::Out,
     [](const Ctx &c) {
       Expr x = c.x();
       return select(gt(x, c.k(0)), c.k(1), select(lt(x, c.k(0)), c.k(-1), c.k(0)));
     }},
    {"square", Compute::Out, [](const Ctx &c) { return mul(c.x(), c.x()); }},
    {"frac", Compute::Out, [](const Ctx &c) { return sub(c.x(), un(UnaryOp::Trunc, c.x())); }},
    {"silu", Compute::Out,
     [](const Ctx &c) {
       return div(c.x(), add(c.k(1), un(UnaryOp::Exp, un(UnaryOp::Neg, c.x()))));
     }},
    {"mish", Compute::Out,
     [](const Ctx &c) {
       Expr sp = un(UnaryOp::Log1p, un(UnaryOp::Exp, c.x()));
       return mul(c.x(), un(UnaryOp::Tanh, sp));
     }},
    {"selu", Compute::Out,
     [](const Ctx &c) {
       Expr neg = mul(c.k(kSeluAlpha), un(UnaryOp::Expm1, c.x()));
       return mul(c.k(kSeluScale), select(gt(c.x(), c.k(0)), c.x(), neg));
     }},
    {"hardswish", Compute::Out,
     [](const Ctx &c) { return div(mul(c.x(), hardsigmoidCore(c, c.x())), c.k(6)); }},
    {"hardsigmoid", Compute::Out,
     [](const Ctx &c) { return div(hardsigmoidCore(c, c.x()), c.k(6)); }},
    {"log_sigmoid", Compute::Out,
     [](const Ctx &c) {
       Expr x = c.x();
       Expr tail = un(UnaryOp::Log1p, un(UnaryOp::Exp, un(UnaryOp::Neg, un(UnaryOp::Abs, x))));
       return sub(stdMin(x, c.k(0)), tail);
     }},
    {"gelu", Compute::Out, geluRule},
    {"softplus", Compute::Out,
     [](const Ctx &c) {
       double beta = c.attrF("beta"), threshold = c.attrF("threshold");
       Expr xb = mul(c.x(), c.k(beta));
       Expr soft = div(un(UnaryOp::Log1p, un(UnaryOp::Exp, xb)), c.k(beta));
       return select(gt(xb, c.k(threshold)), c.x(), soft);
     }},
    {"elu", Compute::Out,
     [](const Ctx &c) {
       Expr neg = mul(c.k(c.attrF("alpha")), un(UnaryOp::Expm1, c.x()));
       return select(gt(c.x(), c.k(0)), c.x(), neg);
     }},
    {"celu", Compute::Out,
     [](const Ctx &c) {
       double alpha = c.attrF("alpha");
       Expr neg = mul(c.k(alpha), un(UnaryOp::Expm1, div(c.x(), c.k(alpha))));
       return select(gt(c.x(), c.k(0)), c.x(), neg);
     }},
    {"leaky_relu", Compute::Out,
     [](const Ctx &c) {
       return select(gt(c.x(), c.k(0)), c.x(), mul(c.x(), c.k(c.attrF("negative_slope"))));
     }},
    {"hardtanh", Compute::Out, hardtanhRule},
    {"logit", Compute::Out,
     [](const Ctx &c) {
       Expr x = c.x();
       if (c.hasAttr("eps")) {
         double eps = c.attrF("eps");
         if (eps >= 0) x = clampNaN(x, c.k(eps), c.k(1.0 - eps));
       }
       return un(UnaryOp::Log, div(x, sub(c.k(1), x)));
     }},
    {"nan_to_num", Compute::Out, nanToNumRule},
    {"bitwise_not", Compute::Out,
     [](const Ctx &c) {
       return c.compute == DType::Bool ? eq(c.x(), c.k(0)) : un(UnaryOp::Not, c.x());
     }},
    // Predicates look at the input in its own dtype.
    {"isnan", Compute::In0, [](const Ctx &c) { return c.fl() ? isNan(c.x()) : constBool(false); }},
    {"isinf", Compute::In0,
     [](const Ctx &c) { return c.fl() ? un(UnaryOp::IsInf, c.x()) : constBool(false); }},
    {"isposinf", Compute::In0,
     [](const Ctx &c) { return c.fl() ? eq(c.x(), c.k(kInf)) : constBool(false); }},
    {"isneginf", Compute::In0,
     [](const Ctx &c) { return c.fl() ? eq(c.x(), c.k(-kInf)) : constBool(false); }},
    {"isfinite", Compute::In0,
     [](const Ctx &c) {
       return c.fl() ? lt(un(UnaryOp::Abs, c.x()), c.k(kInf)) : constBool(true);
     }},
    {"signbit", Compute::In0,
     [](const Ctx &c) { return c.fl() ? un(UnaryOp::SignBit, c.x()) : lt(c.x(), c.k(0)); }},
    {"logical_not", Compute::In0, [](const Ctx &c) { return eq(c.x(), c.k(0)); }},
};

// ---- binary rows ----

Expr addSub(const Ctx &c, double sign) {
  double alpha = c.attrF("alpha") * sign;
  if (c.fl()) return alpha == 1 ? add(c.x(), c.y()) : add(c.x(), mul(c.k(alpha), c.y()));
  auto ialpha = static_cast<int64_t>(alpha);
  return ialpha == 1 ? add(c.x(), c.y()) : add(c.x(), mul(constInt(c.c, ialpha), c.y()));
}

Expr divRule(const Ctx &c) {
  const std::string &mode = ops::attrStr(c.op, "rounding_mode");
  if (mode == "trunc") return c.fl() ? un(UnaryOp::Trunc, div(c.x(), c.y())) : div(c.x(), c.y());
  if (mode == "floor")
    return c.fl() ? divFloorFloat(c, c.x(), c.y()) : divFloorInt(c, c.x(), c.y());
  return div(c.x(), c.y());
}

/// The value of a constant exponent (through casts), if it is one.
std::optional<double> constantValue(Expr e) {
  while (e->kind == ExprKind::Cast)
    e = e->args[0];
  if (e->kind != ExprKind::Const) return std::nullopt;
  return isFloating(e->dtype) ? e->fval : double(e->ival);
}

Expr powRule(const Ctx &c) {
  const Type &e = c.op.operand(1)->type();
  if (!isFloating(c.compute) && (e.kind() == TypeKind::Int || e.kind() == TypeKind::Bool))
    c.addAssert(compare(CmpOp::Ge, cast(DType::I64, c.raw[1]), constIdx(0)),
                "pow: integers to negative integer powers are not allowed");
  // x ** 2 and x ** 3 (GPT-2's gelu, RMSNorm's variance) as products, as PyTorch's CPU kernel
  // computes them: exact for every IEEE value up to rounding, and vectorized, where the general
  // pow is a libm call in f64 per element (~20x slower).
  if (c.fl()) {
    std::optional<double> k = constantValue(c.raw[1]);
    if (k == 2.0) return mul(c.x(), c.x());
    if (k == 3.0) return mul(mul(c.x(), c.x()), c.x());
  }
  return binary(BinaryOp::Pow, c.x(), c.y());
}

Expr fmaxMin(const Ctx &c, bool isMax) {
  Expr x = c.x(), y = c.y();
  Expr pick = binary(isMax ? BinaryOp::Max : BinaryOp::Min, x, y);
  if (!c.fl()) return pick;
  return select(isNan(x), y, select(isNan(y), x, pick));
}

Expr truth(const Ctx &c, const Expr &v) { return ne(v, c.k(0)); }

const Row kBinaryRows[] = {
    {"add", Compute::Promoted, [](const Ctx &c) { return addSub(c, 1); }},
    {"sub", Compute::Promoted, [](const Ctx &c) { return addSub(c, -1); }},
    {"mul", Compute::Promoted, [](const Ctx &c) { return mul(c.x(), c.y()); }, true},
    {"div", Compute::DivMode, divRule, true},
    {"floor_divide", Compute::Promoted,
     [](const Ctx &c) {
       return c.fl() ? divFloorFloat(c, c.x(), c.y()) : divFloorInt(c, c.x(), c.y());
     },
     true},
    {"remainder", Compute::Promoted, [](const Ctx &c) { return pythonRem(c, c.x(), c.y()); }},
    {"fmod", Compute::Promoted, [](const Ctx &c) { return rem(c.x(), c.y()); }},
    {"pow", Compute::Promoted, powRule},
    {"atan2", Compute::Out, [](const Ctx &c) { return binary(BinaryOp::Atan2, c.x(), c.y()); }},
    {"hypot", Compute::Promoted,
     [](const Ctx &c) { return binary(BinaryOp::Hypot, c.x(), c.y()); }},
    {"copysign", Compute::Out,
     [](const Ctx &c) { return binary(BinaryOp::CopySign, c.x(), c.y()); }},
    {"xlogy", Compute::Out,
     [](const Ctx &c) {
       Expr x = c.x(), y = c.y();
       return select(isNan(y), c.k(kNaN),
                     select(eq(x, c.k(0)), c.k(0), mul(x, un(UnaryOp::Log, y))));
     }},
    {"maximum", Compute::Promoted,
     [](const Ctx &c) { return binary(BinaryOp::Max, c.x(), c.y()); }},
    {"minimum", Compute::Promoted,
     [](const Ctx &c) { return binary(BinaryOp::Min, c.x(), c.y()); }},
    {"fmax", Compute::Promoted, [](const Ctx &c) { return fmaxMin(c, true); }},
    {"fmin", Compute::Promoted, [](const Ctx &c) { return fmaxMin(c, false); }},
    {"eq", Compute::Promoted, [](const Ctx &c) { return eq(c.x(), c.y()); }},
    {"ne", Compute::Promoted, [](const Ctx &c) { return ne(c.x(), c.y()); }},
    {"lt", Compute::Promoted, [](const Ctx &c) { return lt(c.x(), c.y()); }},
    {"le", Compute::Promoted, [](const Ctx &c) { return compare(CmpOp::Le, c.x(), c.y()); }},
    {"gt", Compute::Promoted, [](const Ctx &c) { return gt(c.x(), c.y()); }},
    {"ge", Compute::Promoted, [](const Ctx &c) { return compare(CmpOp::Ge, c.x(), c.y()); }},
    {"logical_and", Compute::Promoted,
     [](const Ctx &c) { return andB(truth(c, c.x()), truth(c, c.y())); }},
    {"logical_or", Compute::Promoted,
     [](const Ctx &c) { return orB(truth(c, c.x()), truth(c, c.y())); }},
    {"logical_xor", Compute::Promoted,
     [](const Ctx &c) { return binary(BinaryOp::Xor, truth(c, c.x()), truth(c, c.y())); }},
    {"bitwise_and", Compute::Promoted, [](const Ctx &c) { return andB(c.x(), c.y()); }},
    {"bitwise_or", Compute::Promoted, [](const Ctx &c) { return orB(c.x(), c.y()); }},
    {"bitwise_xor", Compute::Promoted,
     [](const Ctx &c) { return binary(BinaryOp::Xor, c.x(), c.y()); }},
};

// ---- clamp, where, cast, lerp, addcmul, addcdiv ----

Expr clampRule(const Ctx &c) {
  const Attr *lo = c.op.attrOrNull("min"), *hi = c.op.attrOrNull("max");
  Expr x = c.x();
  if (c.fl()) {
    // Bounds round to the result dtype first, as torch converts the scalars.
    double flo = lo ? ops::roundTo(c.compute, lo->asNumber()) : -kInf;
    double fhi = hi ? ops::roundTo(c.compute, hi->asNumber()) : kInf;
    if (std::isnan(flo) || std::isnan(fhi)) return c.k(kNaN);
    return select(isNan(x), x, stdMin(stdMax(x, c.k(flo)), c.k(fhi)));
  }
  // Integer bounds wrap into the dtype (a -1 bound of a u8 tensor is 255).
  auto bound = [&](const Attr *b) {
    Tensor t = Tensor::empty(c.compute, {});
    t.setInt(0, b->kind() == AttrKind::Int ? b->asInt() : static_cast<int64_t>(b->asNumber()));
    return constInt(c.c, t.getInt(0));
  };
  if (lo) x = select(lt(x, bound(lo)), bound(lo), x);
  if (hi) x = select(lt(bound(hi), x), bound(hi), x);
  return x;
}

Expr lerpRule(const Ctx &c) {
  Expr s = c.x(), e = c.y();
  bool weightOperand = c.raw.size() > 2 && c.raw[2];
  Expr w = weightOperand ? c.arg(2) : c.k(c.attrF("weight"));
  Expr diff = sub(e, s);
  Expr near = add(s, mul(w, diff));
  Expr far = sub(e, mul(diff, sub(c.k(1), w)));
  return select(lt(un(UnaryOp::Abs, w), c.k(0.5)), near, far);
}

Expr addcRule(const Ctx &c, bool divide) {
  double value = c.attrF("value");
  Expr v = c.fl() ? c.k(value) : constInt(c.c, static_cast<int64_t>(value));
  Expr scaled = mul(v, c.arg(1));
  return add(c.x(), divide ? div(scaled, c.arg(2)) : mul(scaled, c.arg(2)));
}

/// self where the mask is false, the fill value (operand 2, else the attribute) where it is true.
Expr maskedFillRule(const Ctx &c) {
  bool valueOperand = c.raw.size() > 2 && c.raw[2];
  Expr value = valueOperand ? c.arg(2) : c.k(c.attrF("value"));
  return select(cast(DType::Bool, c.raw[1]), value, c.x());
}

const Row kMiscRows[] = {
    {"clamp", Compute::Out, clampRule},
    {"where", Compute::Out,
     [](const Ctx &c) { return select(cast(DType::Bool, c.raw[0]), c.arg(1), c.arg(2)); }},
    {"cast", Compute::Out,
     [](const Ctx &c) { return cast(ops::attrDType(c.op, "dtype"), c.raw[0]); }},
    {"lerp", Compute::Out, lerpRule},
    {"masked_fill", Compute::Out, maskedFillRule},
    {"addcmul", Compute::Out, [](const Ctx &c) { return addcRule(c, false); }},
    {"addcdiv", Compute::Out, [](const Ctx &c) { return addcRule(c, true); }},
};

/// Every row by name, unary math rows included.
const std::map<std::string, Row, std::less<>> &table() {
  static const auto *t = [] {
    auto *m = new std::map<std::string, Row, std::less<>>();
    // Math rows have no function: lower() applies their UnaryOp (mathOpOf) to the operand.
    for (const auto &[name, op] : kMathRows)
      (*m)[name] = Row{name, Compute::Out, nullptr};
    for (const Row &r : kUnaryRows)
      (*m)[r.name] = r;
    for (const Row &r : kBinaryRows)
      (*m)[r.name] = r;
    for (const Row &r : kMiscRows)
      (*m)[r.name] = r;
    return m;
  }();
  return *t;
}

UnaryOp mathOpOf(std::string_view name) {
  for (const auto &[n, op] : kMathRows)
    if (name == n) return op;
  return UnaryOp::Neg;
}

DType computeDType(const Row &row, const Op &op) {
  DType out = op.result(0)->type().dtype();
  DType compute = out;
  switch (row.compute) {
  case Compute::Out: break;
  case Compute::In0: compute = op.operand(0)->type().dtype(); break;
  case Compute::Promoted: compute = ops::resultTypeOfOperands(op, 0, 2); break;
  case Compute::DivMode:
    if (!ops::attrStr(op, "rounding_mode").empty()) compute = ops::resultTypeOfOperands(op, 0, 2);
    break;
  }
  if (row.otherScalarInOpMath && (compute == DType::F16 || compute == DType::BF16)) {
    const Type &other = op.operand(1)->type();
    bool oneElement = !other.isTensor() || numelOf(other.shape()) == DimExpr(1);
    if (oneElement) compute = DType::F32; // f16/bf16 inputs convert exactly; only the result rounds
  }
  return compute;
}

} // namespace

bool supports(const Op &op, std::string *why) {
  auto fail = [&](std::string m) {
    if (why) *why = op.name() + ": " + std::move(m);
    return false;
  };
  const auto &t = table();
  if (t.find(op.name()) == t.end()) return fail("no elementwise lowering rule");
  if (op.numResults() != 1 || !op.result(0)->type().isTensor())
    return fail("the result is not a tensor (Python scalar arithmetic stays on the host)");
  for (size_t i = 0; i < op.numOperands(); ++i) {
    const Type &ty = op.operand(i)->type();
    if (!ty.isTensor() && !ty.isScalar() && ty.kind() != TypeKind::None)
      return fail("operand " + std::to_string(i) + " has type " + ty.str());
  }
  return true;
}

Expr lower(const Op &op, const std::vector<Expr> &operands, const AssertFn &addAssert) {
  const Row &row = table().at(op.name());
  DType compute = computeDType(row, op);
  Ctx ctx{op, operands, compute, opMath(compute), addAssert};
  Expr r = row.fn ? row.fn(ctx) : un(mathOpOf(op.name()), ctx.x());
  return cast(op.result(0)->type().dtype(), r);
}

std::vector<std::string> names() {
  std::vector<std::string> out;
  for (const auto &[name, row] : table())
    out.push_back(name);
  return out;
}

} // namespace xjit::backend::ew
