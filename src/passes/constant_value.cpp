// Static knowledge of values: constants and splats.
#include "constant_value.h"

#include "xjit/ir/op_registry.h"

#include <cmath>

namespace xjit::passes {
namespace {

/// v as the dtype stores it (f16 rounding, integer truncation and wrapping, bool != 0).
double storedAs(DType dtype, double v) {
  Tensor t = Tensor::empty(dtype, {});
  t.setDouble(0, v);
  return t.getDouble(0);
}

std::optional<double> numberOf(const Attr &a) {
  switch (a.kind()) {
  case AttrKind::Int: return static_cast<double>(a.asInt());
  case AttrKind::Float: return a.asFloat();
  case AttrKind::Bool: return a.asBool() ? 1.0 : 0.0;
  default: return std::nullopt;
  }
}

std::optional<double> tensorSplat(const Tensor &t) {
  if (t.numel() == 0) return std::nullopt;
  double first = t.getDouble(0);
  bool nan = std::isnan(first);
  for (int64_t i = 1, n = t.numel(); i < n; ++i) {
    double x = t.getDouble(i);
    if (nan ? !std::isnan(x) : x != first) return std::nullopt;
    // Integer dtypes read as double can merge distinct large int64 values; compare exactly.
    if (!isFloating(t.dtype()) && t.getInt(i) != t.getInt(0)) return std::nullopt;
  }
  return first;
}

} // namespace

bool isConstantSource(const Op *op) {
  if (!op) return false;
  if (op->name() == "constant") return true;
  return op->def().has(kConstantLike) && op->numOperands() == 0 && op->def().kernel &&
         op->numRegions() == 0;
}

std::optional<RtValue> constantValue(const Value *v, int64_t maxElements) {
  const Op *op = v->definingOp();
  if (!isConstantSource(op)) return std::nullopt;
  const Type &t = v->type();
  if (t.isTensor()) {
    auto n = numelOf(t.shape()).staticValue();
    if (!n || *n > maxElements) return std::nullopt;
  }
  if (op->name() == "constant") {
    const Attr *a = op->attrOrNull("value");
    if (!a) return RtValue();
    switch (a->kind()) {
    case AttrKind::Int: return RtValue(a->asInt());
    case AttrKind::Float: return RtValue(a->asFloat());
    case AttrKind::Bool: return RtValue(a->asBool());
    case AttrKind::Str: return RtValue(a->asStr());
    case AttrKind::Tensor: return RtValue(a->asTensor());
    default: return std::nullopt;
    }
  }
  try {
    std::vector<RtValue> out = op->def().kernel(*op, {});
    if (v->index() < out.size()) return out[v->index()];
  } catch (const std::exception &) {
    // Invalid attributes: leave it to the run time to report.
  }
  return std::nullopt;
}

std::optional<double> splatValue(const Value *v) {
  const Op *op = v->definingOp();
  if (!op) return std::nullopt;
  const Type &t = v->type();
  const std::string &name = op->name();
  if (name == "constant") {
    const Attr *a = op->attrOrNull("value");
    if (!a) return std::nullopt;
    if (a->kind() == AttrKind::Tensor) return tensorSplat(a->asTensor());
    return numberOf(*a);
  }
  if (!t.isTensor()) return std::nullopt;
  std::optional<double> fill;
  if (name == "zeros" || name == "zeros_like" || name == "new_zeros")
    fill = 0.0;
  else if (name == "ones" || name == "ones_like" || name == "new_ones")
    fill = 1.0;
  else if (name == "full" || name == "full_like" || name == "new_full")
    if (const Attr *a = op->attrOrNull("fill_value")) fill = numberOf(*a);
  if (!fill) return std::nullopt;
  return storedAs(t.dtype(), *fill);
}

} // namespace xjit::passes
