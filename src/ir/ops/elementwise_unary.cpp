// Unary elementwise ops: math functions, rounding, activations and predicates. Each row names a
// dtype rule (which input dtypes are accepted and what the result dtype is, as in PyTorch) and a
// scalar function; parameterized rows build their function from the op's attributes.
#include "ops/elementwise_util.h"

#include <cmath>
#include <numbers>

namespace xjit::ops::ew {
namespace {

enum class Kind {
  FloatMath, // any dtype; integers and bool compute in f32 (exp, sin,
             // sigmoid...)
  FloatOnly, // floating dtypes only (activations, frac)
  Numeric,   // integers and floats, same dtype out (neg, abs, floor, relu...)
  AnyDType,  // every dtype, same dtype out (sign, nan_to_num)
  Predicate, // every dtype, bool out (isnan, logical_not...)
  Integral,  // integers and bool only (bitwise_not)
  Square,    // like pow(x, 2): bool becomes i64
};

uint8_t maskOf(Kind k) {
  switch (k) {
  case Kind::FloatOnly:
    return kFloatOk;
  case Kind::Numeric:
    return kNumeric;
  case Kind::Integral:
    return kIntegral;
  default:
    return kAnyDType;
  }
}

DType resultOf(Kind k, DType in) {
  switch (k) {
  case Kind::FloatMath:
    return floatResultDType(in);
  case Kind::Predicate:
    return DType::Bool;
  case Kind::Square:
    return in == DType::Bool ? DType::I64 : in;
  default:
    return in;
  }
}

struct Impl {
  Float1 f;
  Int1 i; // null: integer inputs never reach this op (or compute through f)
};
/// Builds the scalar functions from the op's attributes and the compute dtype.
using Maker = std::function<Impl(const Op &, DType)>;
/// Extra inference checks on attributes against the input dtype.
using Check = std::function<void(const Op &, DType)>;

void addUnary(OpRegistry &r, std::string name, std::string summary, Kind kind,
              std::vector<AttrSpec> attrs, Maker make, Check check = nullptr) {
  r.add(OpDef{
      .name = std::move(name),
      .summary = std::move(summary),
      .operands = {{"self"}},
      .attrs = std::move(attrs),
      .traits = kElementwise,
      .infer =
          [kind, check](const Op &op) {
            const Type &t = tensorOperand(op, 0);
            requireDType(op, maskOf(kind), t.dtype());
            if (check)
              check(op, t.dtype());
            return std::vector<Type>{t.withDType(resultOf(kind, t.dtype()))};
          },
      .kernel =
          [kind, make](const Op &op, std::span<const RtValue> in) {
            if (in.empty() || !in[0].isTensor())
              kernelFail(op.name() + ": expected a tensor");
            const Tensor &x = in[0].tensor();
            DType out = resultDType(op);
            // Predicates look at the input as it is; the others compute in the result dtype
            // (PyTorch's integer -> float promotion happens before the math).
            DType compute = kind == Kind::Predicate ? x.dtype() : out;
            Impl impl = make(op, compute);
            return std::vector<RtValue>{map1(x, compute, out, impl.f, impl.i)};
          },
  });
}

// ---- rows without attributes: a table of functions ----

using F = double (*)(double);
using I = int64_t (*)(int64_t);

struct SimpleRow {
  const char *name;
  const char *summary;
  Kind kind;
  F f;
  I i = nullptr;
};

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double softplus1(double x) { return std::log1p(std::exp(x)); }
// NaN-propagating clamp of x into [lo, hi] (comparisons with NaN are false).
double clampNaN(double x, double lo, double hi) { return x < lo ? lo : (x > hi ? hi : x); }
int64_t clampInt(int64_t x, int64_t lo, int64_t hi) { return x < lo ? lo : (x > hi ? hi : x); }

constexpr double kSeluAlpha = 1.6732632423543772848170429916717;
constexpr double kSeluScale = 1.0507009873554804934193349852946;

const SimpleRow kSimpleRows[] = {
    // Float math: integer and bool inputs give f32.
    {"exp", "e to the power x", Kind::FloatMath, [](double x) { return std::exp(x); }},
    {"exp2", "2 to the power x", Kind::FloatMath, [](double x) { return std::exp2(x); }},
    {"expm1", "exp(x) - 1", Kind::FloatMath, [](double x) { return std::expm1(x); }},
    {"log", "natural logarithm", Kind::FloatMath, [](double x) { return std::log(x); }},
    {"log2", "base-2 logarithm", Kind::FloatMath, [](double x) { return std::log2(x); }},
    {"log10", "base-10 logarithm", Kind::FloatMath, [](double x) { return std::log10(x); }},
    {"log1p", "log(1 + x)", Kind::FloatMath, [](double x) { return std::log1p(x); }},
    {"sqrt", "square root", Kind::FloatMath, [](double x) { return std::sqrt(x); }},
    {"rsqrt", "1 / sqrt(x)", Kind::FloatMath, [](double x) { return 1.0 / std::sqrt(x); }},
    {"reciprocal", "1 / x", Kind::FloatMath, [](double x) { return 1.0 / x; }},
    {"sin", "sine", Kind::FloatMath, [](double x) { return std::sin(x); }},
    {"cos", "cosine", Kind::FloatMath, [](double x) { return std::cos(x); }},
    {"tan", "tangent", Kind::FloatMath, [](double x) { return std::tan(x); }},
    {"asin", "arcsine", Kind::FloatMath, [](double x) { return std::asin(x); }},
    {"acos", "arccosine", Kind::FloatMath, [](double x) { return std::acos(x); }},
    {"atan", "arctangent", Kind::FloatMath, [](double x) { return std::atan(x); }},
    {"sinh", "hyperbolic sine", Kind::FloatMath, [](double x) { return std::sinh(x); }},
    {"cosh", "hyperbolic cosine", Kind::FloatMath, [](double x) { return std::cosh(x); }},
    {"tanh", "hyperbolic tangent", Kind::FloatMath, [](double x) { return std::tanh(x); }},
    {"asinh", "inverse hyperbolic sine", Kind::FloatMath, [](double x) { return std::asinh(x); }},
    {"acosh", "inverse hyperbolic cosine", Kind::FloatMath, [](double x) { return std::acosh(x); }},
    {"atanh", "inverse hyperbolic tangent", Kind::FloatMath,
     [](double x) { return std::atanh(x); }},
    {"sigmoid", "1 / (1 + exp(-x))", Kind::FloatMath, sigmoid},
    {"erf", "Gauss error function", Kind::FloatMath, [](double x) { return std::erf(x); }},
    {"erfc", "1 - erf(x)", Kind::FloatMath, [](double x) { return std::erfc(x); }},
    {"lgamma", "log |gamma(x)|", Kind::FloatMath, [](double x) { return std::lgamma(x); }},

    // Same dtype out; bool is rejected like in torch.
    {"neg", "-x", Kind::Numeric, [](double x) { return -x; }, wrapNeg},
    {"abs", "|x| (integers wrap: abs(-128 as i8) is -128)", Kind::Numeric,
     [](double x) { return std::fabs(x); }, [](int64_t x) { return x < 0 ? wrapNeg(x) : x; }},
    {"floor", "round toward -inf (identity on integers)", Kind::Numeric,
     [](double x) { return std::floor(x); }, [](int64_t x) { return x; }},
    {"ceil", "round toward +inf (identity on integers)", Kind::Numeric,
     [](double x) { return std::ceil(x); }, [](int64_t x) { return x; }},
    {"trunc", "round toward zero (identity on integers)", Kind::Numeric,
     [](double x) { return std::trunc(x); }, [](int64_t x) { return x; }},
    {"relu", "max(x, 0), NaN propagates", Kind::Numeric, [](double x) { return x < 0 ? 0.0 : x; },
     [](int64_t x) { return x < 0 ? 0 : x; }},
    {"relu6", "min(max(x, 0), 6), NaN propagates", Kind::Numeric,
     [](double x) { return clampNaN(x, 0, 6); }, [](int64_t x) { return clampInt(x, 0, 6); }},
    {"sign", "-1, 0 or 1 (0 for NaN)", Kind::AnyDType,
     [](double x) { return x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0); },
     [](int64_t x) -> int64_t { return (x > 0) - (x < 0); }},
    {"square", "x * x (bool gives i64)", Kind::Square, [](double x) { return x * x; },
     [](int64_t x) { return wrapMul(x, x); }},

    // Floating dtypes only.
    {"frac", "x - trunc(x)", Kind::FloatOnly, [](double x) { return x - std::trunc(x); }},
    {"silu", "x * sigmoid(x)", Kind::FloatOnly, [](double x) { return x / (1.0 + std::exp(-x)); }},
    {"mish", "x * tanh(softplus(x))", Kind::FloatOnly,
     [](double x) { return x * std::tanh(softplus1(x)); }},
    {"selu", "scale * elu(x, alpha) with the self-normalizing constants", Kind::FloatOnly,
     [](double x) { return kSeluScale * (x > 0 ? x : kSeluAlpha * std::expm1(x)); }},
    {"hardswish", "x * min(max(x + 3, 0), 6) / 6", Kind::FloatOnly,
     [](double x) { return x * std::min(std::max(x + 3.0, 0.0), 6.0) / 6.0; }},
    {"hardsigmoid", "min(max(x + 3, 0), 6) / 6", Kind::FloatOnly,
     [](double x) { return std::min(std::max(x + 3.0, 0.0), 6.0) / 6.0; }},
    {"log_sigmoid", "log(sigmoid(x)), computed stably", Kind::FloatOnly,
     [](double x) { return std::min(x, 0.0) - std::log1p(std::exp(-std::fabs(x))); }},

    // Bool results.
    {"isnan", "x is NaN", Kind::Predicate, [](double x) { return double(std::isnan(x)); },
     [](int64_t) -> int64_t { return 0; }},
    {"isinf", "x is +-inf", Kind::Predicate, [](double x) { return double(std::isinf(x)); },
     [](int64_t) -> int64_t { return 0; }},
    {"isposinf", "x is +inf", Kind::Predicate, [](double x) { return double(x == INFINITY); },
     [](int64_t) -> int64_t { return 0; }},
    {"isneginf", "x is -inf", Kind::Predicate, [](double x) { return double(x == -INFINITY); },
     [](int64_t) -> int64_t { return 0; }},
    {"isfinite", "x is neither inf nor NaN", Kind::Predicate,
     [](double x) { return double(std::isfinite(x)); }, [](int64_t) -> int64_t { return 1; }},
    {"signbit", "the sign bit of x is set (true for -0.0)", Kind::Predicate,
     [](double x) { return double(std::signbit(x)); }, [](int64_t x) -> int64_t { return x < 0; }},
    {"logical_not", "x == 0", Kind::Predicate, [](double x) { return double(x == 0); },
     [](int64_t x) -> int64_t { return x == 0; }},
};

Maker fixed(F f, I i) {
  return [f, i](const Op &, DType) { return Impl{f, i ? Int1(i) : Int1()}; };
}

// ---- rows with attributes ----

void addRounding(OpRegistry &r) {
  // round(x, decimals): half to even; with decimals, torch scales in the op-math type (f32 for
  // f16/bf16/f32), so we reproduce that rounding of the scaled value.
  addUnary(
      r, "round", "round half to even, optionally to `decimals` decimal places", Kind::Numeric,
      {attrDef("decimals", AttrKind::Int, Attr(int64_t{0}))},
      [](const Op &op, DType d) -> Impl {
        int64_t decimals = attrInt(op, "decimals");
        if (decimals == 0)
          return {[](double x) { return std::nearbyint(x); }, [](int64_t x) { return x; }};
        DType opmath = d == DType::F64 ? DType::F64 : DType::F32;
        double scale = roundTo(opmath, std::pow(10.0, static_cast<double>(std::abs(decimals))));
        bool negative = decimals < 0;
        return {[=](double x) {
                  return negative
                             ? roundTo(opmath, std::nearbyint(roundTo(opmath, x / scale)) * scale)
                             : roundTo(opmath, std::nearbyint(roundTo(opmath, x * scale)) / scale);
                },
                nullptr};
      },
      [](const Op &op, DType d) {
        if (attrInt(op, "decimals") != 0 && !isFloating(d))
          inferFail("round: decimals is only supported for floating point "
                    "inputs, got " +
                    std::string(dtypeName(d)));
      });
}

void addActivations(OpRegistry &r) {
  addUnary(
      r, "gelu", "x * Phi(x); approximate = \"none\" (erf) or \"tanh\"", Kind::FloatOnly,
      {attrDef("approximate", AttrKind::Str, Attr("none"))},
      [](const Op &op, DType) -> Impl {
        if (attrStr(op, "approximate") == "tanh")
          return {[](double x) {
                    const double k = std::sqrt(2.0 / std::numbers::pi);
                    return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
                  },
                  nullptr};
        return {[](double x) { return 0.5 * x * (1.0 + std::erf(x / std::numbers::sqrt2)); },
                nullptr};
      },
      [](const Op &op, DType) {
        const std::string &a = attrStr(op, "approximate");
        if (a != "none" && a != "tanh")
          inferFail("gelu: approximate must be \"none\" or \"tanh\", got \"" + a + "\"");
      });

  addUnary(r, "softplus", "log(1 + exp(beta * x)) / beta; x where beta * x > threshold",
           Kind::FloatOnly,
           {attrDef("beta", AttrKind::Float, Attr(1.0)),
            attrDef("threshold", AttrKind::Float, Attr(20.0))},
           [](const Op &op, DType) -> Impl {
             double beta = attrFloat(op, "beta"), threshold = attrFloat(op, "threshold");
             return {[=](double x) {
                       return x * beta > threshold ? x : std::log1p(std::exp(x * beta)) / beta;
                     },
                     nullptr};
           });

  addUnary(r, "elu", "x for x > 0, alpha * (exp(x) - 1) otherwise", Kind::FloatOnly,
           {attrDef("alpha", AttrKind::Float, Attr(1.0))}, [](const Op &op, DType) -> Impl {
             double alpha = attrFloat(op, "alpha");
             return {[=](double x) { return x > 0 ? x : alpha * std::expm1(x); }, nullptr};
           });

  addUnary(
      r, "celu", "x for x > 0, alpha * (exp(x / alpha) - 1) otherwise", Kind::FloatOnly,
      {attrDef("alpha", AttrKind::Float, Attr(1.0))},
      [](const Op &op, DType) -> Impl {
        double alpha = attrFloat(op, "alpha");
        return {[=](double x) { return x > 0 ? x : alpha * std::expm1(x / alpha); }, nullptr};
      },
      [](const Op &op, DType) {
        if (attrFloat(op, "alpha") == 0)
          inferFail("celu: alpha cannot be 0");
      });

  addUnary(r, "leaky_relu", "x for x > 0, negative_slope * x otherwise", Kind::FloatOnly,
           {attrDef("negative_slope", AttrKind::Float, Attr(0.01))},
           [](const Op &op, DType) -> Impl {
             double slope = attrFloat(op, "negative_slope");
             return {[=](double x) { return x > 0 ? x : x * slope; }, nullptr};
           });

  addUnary(
      r, "hardtanh", "clamp(x, min_val, max_val), NaN propagates", Kind::Numeric,
      {attrDef("min_val", AttrKind::Float, Attr(-1.0)),
       attrDef("max_val", AttrKind::Float, Attr(1.0))},
      [](const Op &op, DType) -> Impl {
        double lo = attrFloat(op, "min_val"), hi = attrFloat(op, "max_val");
        auto ilo = static_cast<int64_t>(lo), ihi = static_cast<int64_t>(hi);
        return {[=](double x) { return clampNaN(x, lo, hi); },
                [=](int64_t x) { return clampInt(x, ilo, ihi); }};
      },
      [](const Op &op, DType d) {
        double lo = attrFloat(op, "min_val"), hi = attrFloat(op, "max_val");
        if (lo > hi)
          inferFail("hardtanh: min_val cannot be greater than max_val");
        if (d == DType::U8 && lo < 0)
          inferFail("hardtanh: cannot do hardtanh on an unsigned type with "
                    "negative limits");
      });

  addUnary(r, "logit",
           "log(x / (1 - x)), x first clamped to [eps, 1 - eps] when eps >= 0 "
           "is given",
           Kind::FloatMath, {attrOpt("eps", AttrKind::Float)}, [](const Op &op, DType) -> Impl {
             double eps = hasAttrValue(op, "eps") ? attrFloat(op, "eps") : -1.0;
             return {[=](double x) {
                       if (eps >= 0)
                         x = clampNaN(x, eps, 1.0 - eps);
                       return std::log(x / (1.0 - x));
                     },
                     nullptr};
           });

  addUnary(r, "nan_to_num",
           "replaces NaN by `nan`, +inf by `posinf` and -inf by `neginf` "
           "(default: the dtype's "
           "largest / lowest finite value); identity on integers",
           Kind::AnyDType,
           {attrDef("nan", AttrKind::Float, Attr(0.0)), attrOpt("posinf", AttrKind::Float),
            attrOpt("neginf", AttrKind::Float)},
           [](const Op &op, DType d) -> Impl {
             double nan = attrFloat(op, "nan");
             double pos = hasAttrValue(op, "posinf") ? attrFloat(op, "posinf") : floatMax(d);
             double neg = hasAttrValue(op, "neginf") ? attrFloat(op, "neginf") : -floatMax(d);
             return {[=](double x) {
                       return std::isnan(x) ? nan : x == INFINITY ? pos : x == -INFINITY ? neg : x;
                     },
                     [](int64_t x) { return x; }};
           });

  addUnary(r, "bitwise_not", "~x (logical not on bool)", Kind::Integral, {},
           [](const Op &, DType d) -> Impl {
             if (d == DType::Bool)
               return {nullptr, [](int64_t x) -> int64_t { return x == 0; }};
             return {nullptr, [](int64_t x) { return ~x; }};
           });
}

} // namespace

void registerUnaryOps(OpRegistry &r) {
  for (const SimpleRow &row : kSimpleRows)
    addUnary(r, row.name, row.summary, row.kind, {}, fixed(row.f, row.i));
  addRounding(r);
  addActivations(r);
}

} // namespace xjit::ops::ew
