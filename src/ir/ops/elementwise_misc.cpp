// Elementwise ops with their own operand contracts: clamp (scalar bounds as attributes), where,
// cast, lerp, addcmul and addcdiv.
#include "ops/elementwise_util.h"

#include <cmath>

namespace xjit::ops::ew {
namespace {

using Results = std::vector<RtValue>;
using In = std::span<const RtValue>;

/// The Python scalar type an attribute value promotes as (Int/Float/Bool attrs).
Type attrScalarType(const Attr &a) {
  switch (a.kind()) {
  case AttrKind::Int:
    return Type::intTy();
  case AttrKind::Bool:
    return Type::boolTy();
  default:
    return Type::floatTy();
  }
}

/// Whether operand i is present (not left off and not a `none` placeholder).
bool hasOperand(const Op &op, size_t i) {
  return i < op.numOperands() && op.operand(i)->type().kind() != TypeKind::None;
}
bool hasOperand(In in, size_t i) { return i < in.size() && !in[i].isNone(); }

const Tensor &tensorIn(const Op &op, In in, size_t i) {
  if (i >= in.size() || !in[i].isTensor())
    kernelFail(op.name() + ": operand " + std::to_string(i) + " must be a tensor");
  return in[i].tensor();
}

// ---- clamp ----

std::vector<Type> inferClamp(const Op &op) {
  const Type &self = tensorOperand(op, 0);
  const Attr *lo = op.attrOrNull("min"), *hi = op.attrOrNull("max");
  if (!lo && !hi)
    inferFail("clamp: at least one of 'min' or 'max' must be given");
  std::vector<Type> types{self};
  for (const Attr *b : {lo, hi})
    if (b)
      types.push_back(attrScalarType(*b));
  DType d = resultType(types);
  requireDType(op, kNumeric, d, "promoted");
  for (const Attr *b : {lo, hi})
    if (b && !scalarFits(d, b->asNumber()))
      inferFail("clamp: bound " + b->str() + " cannot be converted to " +
                std::string(dtypeName(d)) + " without overflow");
  return {self.withDType(d)};
}

Results clampKernel(const Op &op, In in) {
  DType out = resultDType(op);
  const Attr *lo = op.attrOrNull("min"), *hi = op.attrOrNull("max");
  // Bounds are first converted to the result dtype, as torch converts the scalars.
  double flo = lo ? roundTo(out, lo->asNumber()) : -INFINITY;
  double fhi = hi ? roundTo(out, hi->asNumber()) : INFINITY;
  // Integer bounds wrap into the dtype (torch lets -1 bound a u8 tensor as 255).
  auto intBound = [out](const Attr *b, int64_t none) {
    if (!b)
      return none;
    Tensor t = Tensor::empty(out, {});
    t.setInt(0, b->kind() == AttrKind::Int ? b->asInt() : static_cast<int64_t>(b->asNumber()));
    return t.getInt(0);
  };
  int64_t ilo = intBound(lo, INT64_MIN), ihi = intBound(hi, INT64_MAX);
  return {map1(
      tensorIn(op, in, 0), out, out,
      [=](double x) {
        if (std::isnan(x) || std::isnan(flo) || std::isnan(fhi))
          return kNaN;
        return std::min(std::max(x, flo), fhi);
      },
      [=](int64_t x) { return std::min(std::max(x, ilo), ihi); })};
}

// ---- where ----

std::vector<Type> inferWhere(const Op &op) {
  const Type &cond = tensorOperand(op, 0);
  if (cond.dtype() != DType::Bool && cond.dtype() != DType::U8)
    inferFail("where: expected condition to be a bool tensor, got dtype " +
              std::string(dtypeName(cond.dtype())));
  tensorOrScalarOperand(op, 1);
  tensorOrScalarOperand(op, 2);
  return {broadcastResult(op, 0, 3, resultTypeOfOperands(op, 1, 2))};
}

Results whereKernel(const Op &op, In in) {
  DType out = resultDType(op);
  Tensor ins[] = {tensorIn(op, in, 0), operandAs(in, 1, out), operandAs(in, 2, out)};
  return {mapAll(
      ins, out, out, [](std::span<const double> v) { return v[0] != 0 ? v[1] : v[2]; },
      [](std::span<const int64_t> v) { return v[0] != 0 ? v[1] : v[2]; })};
}

// ---- lerp ----

/// lerp takes its weight as a third operand (tensor or scalar) or as the `weight` attribute.
std::vector<Type> inferLerp(const Op &op) {
  const Type &start = tensorOperand(op, 0), &end = tensorOperand(op, 1);
  requireDType(op, kFloatOk, start.dtype());
  if (end.dtype() != start.dtype())
    inferFail("lerp: expected dtype " + std::string(dtypeName(start.dtype())) +
              " for `end` but got dtype " + std::string(dtypeName(end.dtype())));
  bool weightOperand = hasOperand(op, 2), weightAttr = op.attrOrNull("weight") != nullptr;
  if (weightOperand == weightAttr)
    inferFail("lerp: give the weight either as the third operand or as the "
              "`weight` attribute");
  if (weightOperand) {
    const Type &w = tensorOrScalarOperand(op, 2);
    if (w.isTensor() && w.rank() > 0 && w.dtype() != start.dtype())
      inferFail("lerp: expected dtype " + std::string(dtypeName(start.dtype())) +
                " for `weight` but got dtype " + std::string(dtypeName(w.dtype())));
    return {broadcastResult(op, 0, 3, start.dtype())};
  }
  return {broadcastResult(op, 0, 2, start.dtype())};
}

Results lerpKernel(const Op &op, In in) {
  DType out = resultDType(op);
  Tensor w;
  if (hasOperand(in, 2)) {
    w = operandAs(in, 2, out);
  } else {
    w = Tensor::empty(out, {});
    w.setDouble(0, attrFloat(op, "weight"));
  }
  Tensor ins[] = {tensorIn(op, in, 0), tensorIn(op, in, 1), w};
  // torch's formula: interpolate from the nearer end point for accuracy.
  return {mapAll(
      ins, out, out,
      [](std::span<const double> v) {
        double s = v[0], e = v[1], wt = v[2];
        return std::fabs(wt) < 0.5 ? s + wt * (e - s) : e - (e - s) * (1.0 - wt);
      },
      nullptr)};
}

// ---- addcmul / addcdiv ----

std::vector<Type> inferAddc(const Op &op, bool divide) {
  for (size_t i = 0; i < 3; ++i)
    tensorOperand(op, i);
  DType d = resultTypeOfOperands(op, 0, 3);
  requireDType(op, kNumeric, d, "promoted");
  if (divide && !isFloating(op.operand(1)->type().dtype()) &&
      !isFloating(op.operand(2)->type().dtype()))
    inferFail("addcdiv: integer division with addcdiv is not supported; use a "
              "floating point "
              "tensor1 or tensor2");
  return {broadcastResult(op, 0, 3, d)};
}

Results addcKernel(const Op &op, In in, bool divide) {
  DType out = resultDType(op);
  double value = attrFloat(op, "value");
  auto ivalue = static_cast<int64_t>(value); // integral results truncate value, like torch
  Tensor ins[] = {operandAs(in, 0, out), operandAs(in, 1, out), operandAs(in, 2, out)};
  if (divide)
    return {mapAll(
        ins, out, out, [=](std::span<const double> v) { return v[0] + value * v[1] / v[2]; },
        nullptr)};
  return {mapAll(
      ins, out, out, [=](std::span<const double> v) { return v[0] + value * v[1] * v[2]; },
      [=](std::span<const int64_t> v) {
        return wrapAdd(v[0], wrapMul(wrapMul(ivalue, v[1]), v[2]));
      })};
}

} // namespace

void registerMiscOps(OpRegistry &r) {
  r.add(OpDef{
      .name = "clamp",
      .summary = "min(max(self, min), max) with scalar bounds; NaN propagates; "
                 "integer "
                 "tensors with integer bounds stay integers",
      .operands = {{"self"}},
      .attrs = {attrOpt("min", AttrKind::Float), attrOpt("max", AttrKind::Float)},
      .traits = kElementwise,
      .infer = inferClamp,
      .kernel = clampKernel,
  });
  r.add(OpDef{
      .name = "where",
      .summary = "condition ? self : other, with promotion of self and other",
      .operands = {{"condition"}, {"self"}, {"other"}},
      .traits = kElementwise,
      .infer = inferWhere,
      .kernel = whereKernel,
  });
  r.add(OpDef{
      .name = "cast",
      .summary = "converts to `dtype` (float -> int truncates toward zero, "
                 "like torch)",
      .operands = {{"self"}},
      .attrs = {{"dtype", AttrKind::DType}},
      .traits = kElementwise,
      .infer =
          [](const Op &op) {
            return std::vector<Type>{tensorOperand(op, 0).withDType(attrDType(op, "dtype"))};
          },
      .kernel = [](const Op &op,
                   In in) { return Results{tensorIn(op, in, 0).to(attrDType(op, "dtype"))}; },
  });
  r.add(OpDef{
      .name = "lerp",
      .summary = "self + weight * (end - self); weight is the third operand or "
                 "an attribute",
      .operands = {{"self"}, {"end"}, {.name = "weight", .optional = true}},
      .attrs = {attrOpt("weight", AttrKind::Float)},
      .traits = kElementwise,
      .infer = inferLerp,
      .kernel = lerpKernel,
  });
  r.add(OpDef{
      .name = "addcmul",
      .summary = "self + value * tensor1 * tensor2",
      .operands = {{"self"}, {"tensor1"}, {"tensor2"}},
      .attrs = {attrDef("value", AttrKind::Float, Attr(int64_t{1}))},
      .traits = kElementwise,
      .infer = [](const Op &op) { return inferAddc(op, false); },
      .kernel = [](const Op &op, In in) { return addcKernel(op, in, false); },
  });
  r.add(OpDef{
      .name = "addcdiv",
      .summary = "self + value * tensor1 / tensor2 (tensor1 or tensor2 must be "
                 "floating)",
      .operands = {{"self"}, {"tensor1"}, {"tensor2"}},
      .attrs = {attrDef("value", AttrKind::Float, Attr(int64_t{1}))},
      .traits = kElementwise,
      .infer = [](const Op &op) { return inferAddc(op, true); },
      .kernel = [](const Op &op, In in) { return addcKernel(op, in, true); },
  });
}

} // namespace xjit::ops::ew
