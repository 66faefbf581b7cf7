// Derivative rules of the autodiff pass for the rest of the elementwise math, activations and
// reductions models use: trigonometric and hyperbolic functions, log/exp variants, abs and
// the piecewise-constant ops (zero gradient), clamp, maximum/minimum, softplus, mish,
// log_sigmoid, selu, celu, nan_to_num, addcmul/addcdiv/lerp, max/min over everything (ties
// share the gradient evenly, as PyTorch's), logsumexp, var/std, rms_norm, baddbmm, dot / mv /
// outer, remainder / fmod, atan2, hypot, logit, pixel_shuffle and movedim. PyTorch's
// derivatives.yaml formulas, written with forward ops.
#include "autodiff_rules.h"

#include <cmath>
#include <limits>
#include <numbers>

namespace xjit::passes::autodiff_rules {
namespace {

using Ints = std::vector<int64_t>;

bool keepdimOf(const Op &op) {
  const Attr *k = op.attrOrNull("keepdim");
  return k && k->kind() == AttrKind::Bool && k->asBool();
}

Value *where(RuleArgs &a, Value *cond, Value *then, Value *otherwise) {
  return a.b.op("where", {cond, then, otherwise});
}

// ---- unary math: g · f'(x) ----

using Derivative = Value *(*)(RuleArgs &);

Value *dSin(RuleArgs &a) { return a.un("cos", a.x(0)); }
Value *dCos(RuleArgs &a) { return a.un("neg", a.un("sin", a.x(0))); }
Value *dTan(RuleArgs &a) { return a.bin("add", a.mul(a.out(), a.out()), a.f(1.0)); }
Value *dSinh(RuleArgs &a) { return a.un("cosh", a.x(0)); }
Value *dCosh(RuleArgs &a) { return a.un("sinh", a.x(0)); }
Value *oneMinusSquare(RuleArgs &a) { return a.bin("sub", a.f(1.0), a.mul(a.x(0), a.x(0))); }
Value *dAsin(RuleArgs &a) { return a.un("rsqrt", oneMinusSquare(a)); }
Value *dAcos(RuleArgs &a) { return a.un("neg", a.un("rsqrt", oneMinusSquare(a))); }
Value *dAtan(RuleArgs &a) {
  return a.un("reciprocal", a.bin("add", a.mul(a.x(0), a.x(0)), a.f(1.0)));
}
Value *dAsinh(RuleArgs &a) { return a.un("rsqrt", a.bin("add", a.mul(a.x(0), a.x(0)), a.f(1.0))); }
Value *dAcosh(RuleArgs &a) { return a.un("rsqrt", a.bin("sub", a.mul(a.x(0), a.x(0)), a.f(1.0))); }
Value *dAtanh(RuleArgs &a) { return a.un("reciprocal", oneMinusSquare(a)); }
Value *dLog1p(RuleArgs &a) { return a.un("reciprocal", a.bin("add", a.x(0), a.f(1.0))); }
Value *dExpm1(RuleArgs &a) { return a.bin("add", a.out(), a.f(1.0)); }
Value *dLog2(RuleArgs &a) { return a.un("reciprocal", a.mul(a.x(0), a.f(std::numbers::ln2))); }
Value *dLog10(RuleArgs &a) { return a.un("reciprocal", a.mul(a.x(0), a.f(std::numbers::ln10))); }
Value *dExp2(RuleArgs &a) { return a.mul(a.out(), a.f(std::numbers::ln2)); }
Value *dErf(RuleArgs &a) {
  return a.mul(a.un("exp", a.un("neg", a.mul(a.x(0), a.x(0)))),
               a.f(2.0 / std::sqrt(std::numbers::pi)));
}
Value *dErfc(RuleArgs &a) { return a.un("neg", dErf(a)); }
Value *dAbs(RuleArgs &a) { return a.un("sign", a.x(0)); } // sgn: 0 at 0, as PyTorch
Value *dLogSigmoid(RuleArgs &a) { return a.un("sigmoid", a.un("neg", a.x(0))); }
Value *dMish(RuleArgs &a) {
  // tanh(softplus(x)) + x·sigmoid(x)·(1 - tanh(softplus(x))²)
  Value *t = a.un("tanh", a.un("softplus", a.x(0)));
  Value *s = a.un("sigmoid", a.x(0));
  return a.bin("add", t, a.mul(a.mul(a.x(0), s), a.bin("sub", a.f(1.0), a.mul(t, t))));
}

const std::pair<const char *, Derivative> kUnary[] = {
    {"sin", dSin},     {"cos", dCos},     {"tan", dTan},
    {"sinh", dSinh},   {"cosh", dCosh},   {"asin", dAsin},
    {"acos", dAcos},   {"atan", dAtan},   {"asinh", dAsinh},
    {"acosh", dAcosh}, {"atanh", dAtanh}, {"log1p", dLog1p},
    {"expm1", dExpm1}, {"log2", dLog2},   {"log10", dLog10},
    {"exp2", dExp2},   {"erf", dErf},     {"erfc", dErfc},
    {"abs", dAbs},     {"mish", dMish},   {"log_sigmoid", dLogSigmoid}};

/// softplus(beta, threshold): g·sigmoid(beta·x), and g where beta·x > threshold (linear there).
std::vector<Value *> softplusRule(RuleArgs &a) {
  const double beta = floatAttr(a.op, "beta", 1.0), threshold = floatAttr(a.op, "threshold", 20.0);
  Value *bx = a.mul(a.x(0), a.f(beta));
  return {where(a, a.bin("gt", bx, a.f(threshold)), a.g, a.mul(a.g, a.un("sigmoid", bx)))};
}

/// selu and celu: elu_backward from the input (x <= 0: g·scale·alpha·exp(x·input_scale)).
std::vector<Value *> seluRule(RuleArgs &a) {
  const double alpha = 1.6732632423543772848170429916717, scale = 1.0507009873554804934193349852946;
  Value *neg = a.mul(a.g, a.mul(a.un("exp", a.x(0)), a.f(alpha * scale)));
  return {where(a, a.bin("le", a.x(0), a.f(0.0)), neg, a.mul(a.g, a.f(scale)))};
}

std::vector<Value *> celuRule(RuleArgs &a) {
  const double alpha = floatAttr(a.op, "alpha", 1.0);
  Value *neg = a.mul(a.g, a.un("exp", a.mul(a.x(0), a.f(1.0 / alpha))));
  return {where(a, a.bin("le", a.x(0), a.f(0.0)), neg, a.g)};
}

/// floor, ceil, round, trunc, sign: zero almost everywhere, PyTorch's zeros_like(grad). A real
/// zero gradient, not none: the rules before it multiply it by their derivatives, and where one
/// is NaN or infinite (pow of a negative base) eager's gradient is NaN (fuzzer seed 34233).
std::vector<Value *> zeroRule(RuleArgs &a) { return {a.un("zeros_like", a.g)}; }

/// clamp(min, max): g where min <= x <= max (a NaN x gets none).
std::vector<Value *> clampRule(RuleArgs &a) {
  Value *inside = nullptr;
  auto also = [&](Value *c) { inside = inside ? a.bin("logical_and", inside, c) : c; };
  if (const Attr *lo = a.op.attrOrNull("min"); lo) also(a.bin("ge", a.x(0), a.f(lo->asNumber())));
  if (const Attr *hi = a.op.attrOrNull("max"); hi) also(a.bin("le", a.x(0), a.f(hi->asNumber())));
  if (a.op.numOperands() > 1) unsupported(a.op, "tensor bounds");
  return {inside ? where(a, inside, a.g, a.f(0.0)) : a.g};
}

/// nan_to_num: g where x is finite, 0 where it was replaced.
std::vector<Value *> nanToNumRule(RuleArgs &a) {
  return {where(a, a.un("isfinite", a.x(0)), a.g, a.f(0.0))};
}

// ---- binary and ternary elementwise (broadcasting: sumTo) ----

/// maximum / minimum: g to the larger (smaller) operand, half to each where they are equal.
/// As in eager, an operand gets none only where the other one wins, so where either is NaN
/// (no comparison holds) both get g.
std::vector<Value *> extremumRule(RuleArgs &a, const char *wins) {
  Value *x = a.x(0), *y = a.x(1);
  Value *half = a.mul(a.g, a.f(0.5));
  Value *tie = a.bin("eq", x, y);
  auto share = [&](Value *lost) { return where(a, lost, a.f(0.0), where(a, tie, half, a.g)); };
  return {a.need[0] ? gradFor(a, 0, share(a.bin(wins, y, x))) : nullptr,
          a.need[1] ? gradFor(a, 1, share(a.bin(wins, x, y))) : nullptr};
}

std::vector<Value *> addcmulRule(RuleArgs &a) {
  Value *gv = a.mul(a.g, a.f(floatAttr(a.op, "value", 1.0)));
  return {gradFor(a, 0, a.g), a.need[1] ? gradFor(a, 1, a.mul(gv, a.x(2))) : nullptr,
          a.need[2] ? gradFor(a, 2, a.mul(gv, a.x(1))) : nullptr};
}

std::vector<Value *> addcdivRule(RuleArgs &a) {
  Value *gv = a.bin("div", a.mul(a.g, a.f(floatAttr(a.op, "value", 1.0))), a.x(2));
  Value *dDen = a.need[2] ? a.un("neg", a.bin("div", a.mul(gv, a.x(1)), a.x(2))) : nullptr;
  return {gradFor(a, 0, a.g), a.need[1] ? gradFor(a, 1, gv) : nullptr,
          dDen ? gradFor(a, 2, dDen) : nullptr};
}

/// lerp(self, end, weight) = self + weight·(end - self); weight an operand or an attribute.
std::vector<Value *> lerpRule(RuleArgs &a) {
  const bool operandWeight = a.op.numOperands() > 2;
  Value *w = operandWeight ? a.x(2) : a.f(floatAttr(a.op, "weight", 0.0));
  std::vector<Value *> r(a.op.numOperands(), nullptr);
  if (a.need[0]) r[0] = gradFor(a, 0, a.mul(a.g, a.bin("sub", a.f(1.0), w)));
  if (a.need[1]) r[1] = gradFor(a, 1, a.mul(a.g, w));
  if (operandWeight && a.need[2]) r[2] = gradFor(a, 2, a.mul(a.g, a.bin("sub", a.x(1), a.x(0))));
  return r;
}

/// remainder / fmod: x - y·floor(x/y) (trunc for fmod): g, and -g·floor(x/y) for y.
std::vector<Value *> remainderRule(RuleArgs &a) {
  const char *rounding = a.op.name() == "fmod" ? "trunc" : "floor";
  return {gradFor(a, 0, a.g),
          a.need[1]
              ? gradFor(a, 1, a.un("neg", a.mul(a.g, a.un(rounding, a.bin("div", a.x(0), a.x(1))))))
              : nullptr};
}

/// atan2(y, x): g·x/(x² + y²) for y, -g·y/(x² + y²) for x.
std::vector<Value *> atan2Rule(RuleArgs &a) {
  Value *y = a.x(0), *x = a.x(1);
  Value *scale = a.bin("div", a.g, a.bin("add", a.mul(x, x), a.mul(y, y)));
  return {a.need[0] ? gradFor(a, 0, a.mul(scale, x)) : nullptr,
          a.need[1] ? gradFor(a, 1, a.un("neg", a.mul(scale, y))) : nullptr};
}

/// hypot(a, b): g·a/out, g·b/out.
std::vector<Value *> hypotRule(RuleArgs &a) {
  Value *scale = a.bin("div", a.g, a.out());
  return {a.need[0] ? gradFor(a, 0, a.mul(scale, a.x(0))) : nullptr,
          a.need[1] ? gradFor(a, 1, a.mul(scale, a.x(1))) : nullptr};
}

/// logit(eps): g/(x·(1-x)); outside [eps, 1-eps] 0 with eps, outside [0, 1] NaN without
/// (PyTorch's logit_backward).
std::vector<Value *> logitRule(RuleArgs &a) {
  Value *x = a.x(0);
  Value *dx = a.bin("div", a.g, a.mul(x, a.bin("sub", a.f(1.0), x)));
  const Attr *e = a.op.attrOrNull("eps");
  const double lo = e ? e->asNumber() : 0.0;
  Value *outside = a.bin("logical_or", a.bin("lt", x, a.f(lo)), a.bin("gt", x, a.f(1.0 - lo)));
  return {where(a, outside, a.f(e ? 0.0 : std::numeric_limits<double>::quiet_NaN()), dx)};
}

// ---- reductions ----

/// max / min over everything: g shared evenly by the elements equal to the result (PyTorch's
/// evenly_distribute_backward). amax / amin over dims are refused: canonicalize's
/// extremum-split makes torch.max(x, dim)'s values an amax, whose gradient in eager goes to
/// the first maximum only, while amax's own is shared by the tied maxima; after the split the
/// two look alike (a relu's zeros tie).
std::vector<Value *> extremeValueRule(RuleArgs &a) {
  if (a.op.name() == "amax" || a.op.name() == "amin")
    unsupported(a.op, "a max over dims (torch.max(x, dim) and amax differ on ties)");
  Value *x = a.x(0);
  const Ints dims = reducedDims(a.op, "dims", x->type().rank());
  const bool keepdim = keepdimOf(a.op);
  Value *hit = a.bin("eq", x, expandReduced(a, a.out(), dims, keepdim, x));
  Value *count = a.b.op("sum", {castTo(a.b, hit, a.g->type().dtype())},
                        {{"dims", dims}, {"keepdim", keepdim}});
  Value *share = expandReduced(a, a.bin("div", a.g, count), dims, keepdim, x);
  return {where(a, hit, share, a.f(0.0))};
}

/// logsumexp: g·exp(x - out), broadcast back.
std::vector<Value *> logsumexpRule(RuleArgs &a) {
  Value *x = a.x(0);
  const Ints dims = reducedDims(a.op, "dims", x->type().rank());
  const bool keepdim = keepdimOf(a.op);
  Value *p = a.un("exp", a.bin("sub", x, expandReduced(a, a.out(), dims, keepdim, x)));
  return {a.mul(expandReduced(a, a.g, dims, keepdim, x), p)};
}

/// var: g·2(x - mean)/(N - correction); std: g·(x - mean)/((N - correction)·std), 0 where
/// std is 0 (PyTorch masks those).
std::vector<Value *> varianceRule(RuleArgs &a) {
  Value *x = a.x(0);
  const Ints xs = staticShape(a.op, x);
  const Ints dims = reducedDims(a.op, "dims", x->type().rank());
  const bool keepdim = keepdimOf(a.op);
  int64_t n = 1;
  for (int64_t d : dims)
    n *= xs[size_t(d)];
  const double dof = static_cast<double>(n) - floatAttr(a.op, "correction", 1.0);
  Value *centered = a.bin("sub", x, a.b.op("mean", {x}, {{"dims", dims}, {"keepdim", true}}));
  Value *g = expandReduced(a, a.g, dims, keepdim, x);
  if (a.op.name() == "var") return {a.mul(a.mul(g, centered), a.f(2.0 / dof))};
  Value *sd = expandReduced(a, a.out(), dims, keepdim, x);
  Value *dx = a.bin("div", a.mul(g, centered), a.mul(sd, a.f(dof)));
  return {where(a, a.bin("eq", sd, a.f(0.0)), a.f(0.0), dx)};
}

/// rms_norm(x, w): y = x·r·w with r = rsqrt(mean(x²) + eps) over the normalized dims;
/// dx = r·(ĝ - x·r²·mean(ĝ·x)) with ĝ = g·w; dw = Σ g·x·r over the leading dims.
std::vector<Value *> rmsNormRule(RuleArgs &a) {
  Value *x = a.x(0);
  const int64_t rank = x->type().rank();
  const int64_t k = static_cast<int64_t>(a.op.attr("normalized_shape").asInts().size());
  const Attr *e = a.op.attrOrNull("eps");
  if (!e) unsupported(a.op, "eps = None (the dtype's epsilon)");
  Ints norm, lead;
  for (int64_t d = 0; d < rank; ++d)
    (d >= rank - k ? norm : lead).push_back(d);
  auto meanOver = [&](Value *v) {
    return a.b.op("mean", {v}, {{"dims", norm}, {"keepdim", true}});
  };
  Value *r = a.un("rsqrt", a.bin("add", meanOver(a.mul(x, x)), a.f(e->asNumber())));
  Value *w = a.op.numOperands() > 1 && a.x(1)->type().isTensor() ? a.x(1) : nullptr;
  std::vector<Value *> out(a.op.numOperands(), nullptr);
  if (w && a.need[1]) {
    Value *gx = a.mul(a.g, a.mul(x, r));
    out[1] = lead.empty() ? gx : a.b.op("sum", {gx}, {{"dims", lead}, {"keepdim", false}});
  }
  if (a.need[0]) {
    Value *gh = w ? a.mul(a.g, w) : a.g;
    Value *inner = a.bin("sub", gh, a.mul(a.mul(x, a.mul(r, r)), meanOver(a.mul(gh, x))));
    out[0] = a.mul(inner, r);
  }
  return out;
}

// ---- linear algebra, views ----

/// baddbmm(self, b1, b2) = beta·self + alpha·b1·b2.
std::vector<Value *> baddbmmRule(RuleArgs &a) {
  const double beta = floatAttr(a.op, "beta", 1.0), alpha = floatAttr(a.op, "alpha", 1.0);
  Value *g = alpha == 1.0 ? a.g : a.mul(a.g, a.f(alpha));
  auto tr = [&](Value *v) {
    return a.un("transpose", v, {{"dim0", int64_t(1)}, {"dim1", int64_t(2)}});
  };
  std::vector<Value *> r(3, nullptr);
  if (a.need[0] && beta != 0.0) r[0] = gradFor(a, 0, beta == 1.0 ? a.g : a.mul(a.g, a.f(beta)));
  if (a.need[1]) r[1] = castTo(a.b, a.b.op("bmm", {g, tr(a.x(2))}), a.x(1)->type().dtype());
  if (a.need[2]) r[2] = castTo(a.b, a.b.op("bmm", {tr(a.x(1)), g}), a.x(2)->type().dtype());
  return r;
}

/// dot(a, b): g·b, g·a; mv(A, v): g ⊗ v, Aᵀ·g; outer(a, b): g·b, gᵀ·a.
std::vector<Value *> vectorProductRule(RuleArgs &a) {
  Value *x = a.x(0), *y = a.x(1);
  auto col = [&](Value *v) { return a.un("unsqueeze", v, {{"dim", int64_t(1)}}); };
  std::vector<Value *> r(2, nullptr);
  const std::string &n = a.op.name();
  if (n == "dot") {
    if (a.need[0]) r[0] = a.mul(a.g, y);
    if (a.need[1]) r[1] = a.mul(a.g, x);
  } else if (n == "mv") {
    if (a.need[0]) r[0] = a.mul(col(a.g), a.un("unsqueeze", y, {{"dim", int64_t(0)}}));
    if (a.need[1]) r[1] = a.b.op("mv", {a.un("t", x), a.g});
  } else { // outer
    if (a.need[0]) r[0] = a.b.op("mv", {a.g, y});
    if (a.need[1]) r[1] = a.b.op("mv", {a.un("t", a.g), x});
  }
  for (size_t i = 0; i < 2; ++i)
    if (r[i]) r[i] = castTo(a.b, r[i], a.x(i)->type().dtype());
  return r;
}

/// pixel_shuffle and pixel_unshuffle undo each other.
std::vector<Value *> pixelShuffleRule(RuleArgs &a) {
  if (a.op.name() == "pixel_shuffle")
    return {
        a.un("pixel_unshuffle", a.g, {{"downscale_factor", a.op.attr("upscale_factor").asInt()}})};
  return {a.un("pixel_shuffle", a.g, {{"upscale_factor", a.op.attr("downscale_factor").asInt()}})};
}

std::vector<Value *> movedimRule(RuleArgs &a) {
  return {a.un("movedim", a.g,
               {{"source", a.op.attr("destination")}, {"destination", a.op.attr("source")}})};
}

} // namespace

void addMathRules(std::map<std::string, Rule> &t) {
  for (const auto &[name, derivative] : kUnary)
    t[name] = [d = derivative](RuleArgs &a) -> std::vector<Value *> { return {a.mul(a.g, d(a))}; };
  t["softplus"] = softplusRule;
  t["selu"] = seluRule;
  t["celu"] = celuRule;
  t["floor"] = t["ceil"] = t["round"] = t["trunc"] = t["sign"] = zeroRule;
  t["frac"] = [](RuleArgs &a) -> std::vector<Value *> { return {a.g}; };
  t["clamp"] = clampRule;
  t["nan_to_num"] = nanToNumRule;
  t["maximum"] = [](RuleArgs &a) { return extremumRule(a, "gt"); };
  t["minimum"] = [](RuleArgs &a) { return extremumRule(a, "lt"); };
  t["addcmul"] = addcmulRule;
  t["addcdiv"] = addcdivRule;
  t["lerp"] = lerpRule;
  t["amax"] = t["amin"] = t["max"] = t["min"] = extremeValueRule;
  t["logsumexp"] = logsumexpRule;
  t["var"] = t["std"] = varianceRule;
  t["rms_norm"] = rmsNormRule;
  t["baddbmm"] = baddbmmRule;
  t["movedim"] = movedimRule;
  t["remainder"] = t["fmod"] = remainderRule;
  t["atan2"] = atan2Rule;
  t["hypot"] = hypotRule;
  t["logit"] = logitRule;
  t["dot"] = t["mv"] = t["outer"] = vectorProductRule;
  t["pixel_shuffle"] = t["pixel_unshuffle"] = pixelShuffleRule;
}

} // namespace xjit::passes::autodiff_rules
