// Creation ops (no tensor data read): arange, linspace, eye, full/zeros/ones/empty and their
// *_like and new_* forms, and the size queries size/numel/dim. The `dtype` attribute is optional
// where PyTorch infers it; `empty` tensors are zero-filled.
#include "ops/movement_util.h"
#include "xjit/ir/sym_attr.h"

#include <cmath>

namespace xjit {

using namespace ops;
using namespace ops::mv;

namespace {

using Results = std::vector<RtValue>;
using In = std::span<const RtValue>;

Results one(Tensor t) { return {RtValue(std::move(t))}; }

const Attr &attrOf(const Op &op, std::string_view name) {
  const Attr *a = op.attrOrNull(name);
  if (!a)
    inferFail(op.name() + ": missing required attribute '" + std::string(name) + "'");
  if (a->kind() != AttrKind::Int && a->kind() != AttrKind::Float && a->kind() != AttrKind::Bool)
    inferFail(op.name() + ": attribute '" + std::string(name) + "' must be a number, got " +
              a->str());
  return *a;
}

// The dtype attribute when given, else `fallback`.
DType dtypeOr(const Op &op, DType fallback) {
  return hasAttrValue(op, "dtype") ? attrDType(op, "dtype") : fallback;
}

// The dtype PyTorch gives a Python number (int -> i64, float -> f32, bool -> bool).
DType dtypeOfNumber(const Attr &a) {
  return defaultDTypeFor(a.kind() == AttrKind::Int    ? DTypeCategory::Integer
                         : a.kind() == AttrKind::Bool ? DTypeCategory::Bool
                                                      : DTypeCategory::Floating);
}

Shape shapeAttr(const Op &op) {
  if (isSymbolicSize(op, "shape")) { // dims over shape symbols (docs/ir.md, "Symbolic sizes")
    auto dims = sizeAttrDims(op, "shape");
    if (!dims) inferFail(op.name() + ": bad symbolic shape " + op.attr("shape").asStr());
    for (const DimExpr &d : *dims)
      if (d.isStatic() && d.value() < 0)
        inferFail(op.name() + ": negative dimension " + d.str() + " in shape");
    return *dims;
  }
  Shape s;
  for (int64_t d : attrInts(op, "shape")) {
    if (d < 0)
      inferFail(op.name() + ": negative dimension " + std::to_string(d) + " in shape");
    s.push_back(d);
  }
  return s;
}

std::vector<int64_t> sizesOf(const Type &t) {
  std::vector<int64_t> out;
  for (const DimExpr &d : t.shape())
    out.push_back(d.value());
  return out;
}

// ---- arange ----

// Follows ATen's arange_out: integer dtypes compute in int64 from truncated bounds, floating ones
// in double; the length is computed in double (exactly in int64 for int64 output).
struct Arange {
  DType dtype;
  double start, end, step;
  int64_t istart, istep;
  int64_t length;
};

Arange arangeOf(const Op &op) {
  const Attr &s = attrOf(op, "start"), &e = attrOf(op, "end"), &st = attrOf(op, "step");
  bool allInt =
      s.kind() != AttrKind::Float && e.kind() != AttrKind::Float && st.kind() != AttrKind::Float;
  Arange a{dtypeOr(op, allInt ? DType::I64 : defaultDTypeFor(DTypeCategory::Floating)),
           s.asNumber(),
           e.asNumber(),
           st.asNumber(),
           0,
           0,
           0};
  if (a.dtype == DType::Bool)
    inferFail("arange: not implemented for bool");
  if (!std::isfinite(a.start) || !std::isfinite(a.end))
    inferFail("arange: unsupported range: " + s.str() + " -> " + e.str());
  bool integral = !isFloating(a.dtype);
  a.istart = static_cast<int64_t>(a.start);
  a.istep = static_cast<int64_t>(a.step);
  int64_t iend = static_cast<int64_t>(a.end);
  double step = integral ? double(a.istep) : a.step;
  double start = integral ? double(a.istart) : a.start, end = integral ? double(iend) : a.end;
  if (step == 0)
    inferFail("arange: step must be nonzero");
  if (!((step > 0 && end >= start) || (step < 0 && end <= start)))
    inferFail("arange: upper bound and lower bound inconsistent with step sign");
  double size;
  if (a.dtype == DType::I64) {
    int64_t sgn = a.istep > 0 ? 1 : -1;
    size = double((iend - a.istart + a.istep - sgn) / a.istep);
  } else {
    size = std::ceil((a.end - a.start) / a.step);
  }
  if (!(size >= 0 && size < 9.2e18))
    inferFail("arange: invalid length " + std::to_string(size));
  a.length = static_cast<int64_t>(size);
  return a;
}

// arange with a symbolic start or end (docs/ir.md, "Symbolic sizes"): integer bounds and a
// positive integer step; the length is (end - start) / step rounded up, assumed non-negative.
Type symbolicArangeType(const Op &op) {
  auto start = sizeAttrDim(op, "start"), end = sizeAttrDim(op, "end");
  const Attr &step = attrOf(op, "step");
  if (!start || !end || step.kind() != AttrKind::Int || step.asInt() <= 0)
    inferFail("arange: symbolic bounds need integer bounds and a positive integer step");
  DType dtype = dtypeOr(op, DType::I64);
  if (dtype == DType::Bool) inferFail("arange: not implemented for bool");
  int64_t st = step.asInt();
  DimExpr length = st == 1 ? *end - *start : (*end - *start + DimExpr(st - 1)).floorDiv(st);
  return Type::tensor(dtype, {length});
}

Results arangeKernel(const Op &op, In) {
  Arange a = arangeOf(op);
  Tensor out = Tensor::empty(a.dtype, {a.length});
  // f16/bf16 accumulate in f32, f32/f64 in double (ATen's CPU acc_type).
  DType acc = a.dtype == DType::F16 || a.dtype == DType::BF16 ? DType::F32 : DType::F64;
  for (int64_t i = 0; i < a.length; ++i) {
    if (isFloating(a.dtype))
      out.setDouble(
          i, roundTo(acc, roundTo(acc, a.start) + roundTo(acc, roundTo(acc, a.step) * double(i))));
    else
      out.setInt(i, a.istart + a.istep * i);
  }
  return one(out);
}

// ---- linspace ----

int64_t linspaceSteps(const Op &op) {
  int64_t steps = attrInt(op, "steps");
  if (steps < 0)
    inferFail("linspace: number of steps must be non-negative, got " + std::to_string(steps));
  return steps;
}

// ATen's linspace kernel: the first half counts up from start, the second down from end; float
// dtypes compute in their own precision, integer ones with a double step.
Results linspaceKernel(const Op &op, In) {
  DType dt = resultDType(op);
  int64_t steps = linspaceSteps(op);
  Tensor out = Tensor::empty(dt, {steps});
  double start = attrFloat(op, "start"), end = attrFloat(op, "end");
  bool fp = isFloating(dt);
  auto rt = [&](double v) { return fp ? roundTo(dt, v) : v; };
  if (fp) {
    start = rt(start);
    end = rt(end);
  } else {
    start = std::trunc(start);
    end = std::trunc(end);
  }
  if (steps == 1) { // ATen fills with start (the step would divide by zero)
    out.setDouble(0, start);
    return one(out);
  }
  double step = steps > 1 ? rt(rt(end - start) / rt(double(steps - 1))) : 0;
  int64_t half = steps / 2;
  for (int64_t i = 0; i < steps; ++i) {
    double v = i < half ? rt(start + rt(step * rt(double(i))))
                        : rt(end - rt(step * rt(double(steps - i - 1))));
    // ATen's build contracts start + step * i into one fused multiply-add for f32 and f64 (one
    // rounding): linspace(-1, 1, 7)[3] is -2.98e-8 there, 0 with two roundings (fuzzer seed
    // 10410: the sign of a product of it decided a where()).
    double k = i < half ? double(i) : -double(steps - i - 1), from = i < half ? start : end;
    if (dt == DType::F32)
      v = std::fmaf(float(step), float(k), float(from));
    else if (dt == DType::F64)
      v = std::fma(step, k, from);
    out.setDouble(i, v);
  }
  return one(out);
}

// ---- fill-style ops: full/zeros/ones/empty, *_like, new_* ----

enum class Fill { Zero, One, Value };

Scalar fillScalar(const Op &op, Fill f) {
  if (f == Fill::Zero)
    return Scalar::fromInt(0);
  if (f == Fill::One)
    return Scalar::fromInt(1);
  return Scalar::fromAttr(attrOf(op, "fill_value"));
}

// How a fill-style op gets its shape and default dtype.
enum class ShapeFrom { Attr, Like, New };

Type fillType(const Op &op, ShapeFrom from, Fill fill) {
  if (fill == Fill::Value)
    attrOf(op, "fill_value"); // required: check it is there and a number
  if (from == ShapeFrom::Like) {
    const Type &t = tensorOperand(op, 0);
    return t.withDType(dtypeOr(op, t.dtype()));
  }
  if (from == ShapeFrom::New) {
    const Type &t = tensorOperand(op, 0);
    return t.withShape(shapeAttr(op)).withDType(dtypeOr(op, t.dtype()));
  }
  DType fallback = fill == Fill::Value ? dtypeOfNumber(attrOf(op, "fill_value"))
                                       : defaultDTypeFor(DTypeCategory::Floating);
  return Type::tensor(dtypeOr(op, fallback), shapeAttr(op));
}

OpDef fillRow(std::string name, std::string summary, ShapeFrom from, Fill fill) {
  std::vector<OperandSpec> operands;
  std::vector<AttrSpec> attrs;
  if (from != ShapeFrom::Attr)
    operands.push_back({"self"});
  if (from != ShapeFrom::Like)
    attrs.push_back({"shape", AttrKind::Ints});
  if (fill == Fill::Value)
    attrs.push_back(numberAttr("fill_value"));
  attrs.push_back(optionalAttr("dtype", AttrKind::DType));
  return {.name = std::move(name),
          .summary = std::move(summary),
          .operands = std::move(operands),
          .attrs = std::move(attrs),
          .traits = from == ShapeFrom::Attr ? kConstantLike : kShapeOnly,
          .infer = [from, fill](const Op &op) -> std::vector<Type> {
            return {fillType(op, from, fill)};
          },
          .kernel = [from, fill](const Op &op, In in) -> Results {
            std::vector<int64_t> sizes =
                from == ShapeFrom::Like ? tensorIn(op, in, 0).sizes() : attrInts(op, "shape");
            Tensor out = Tensor::empty(resultDType(op), sizes);
            if (fill != Fill::Zero)
              mv::fill(out, fillScalar(op, fill));
            return one(out);
          }};
}

// ---- size queries ----

OpDef queryRow(std::string name, std::string summary, std::vector<AttrSpec> attrs,
               int64_t (*query)(const Op &, const Tensor &)) {
  return {.name = std::move(name),
          .summary = std::move(summary),
          .operands = {{"self"}},
          .attrs = std::move(attrs),
          .traits = kShapeOnly,
          .infer = [](const Op &op) -> std::vector<Type> {
            const Type &t = tensorOperand(op, 0);
            if (op.name() == "size") {
              if (t.rank() == 0)
                inferFail("size: a 0-d tensor has no dimensions");
              normDim(attrInt(op, "dim"), t.rank());
            }
            return {Type::intTy()};
          },
          .kernel = [query](const Op &op, In in) -> Results {
            return {RtValue(query(op, tensorIn(op, in, 0)))};
          }};
}

} // namespace

void registerCreationOps(OpRegistry &r) {
  r.add({.name = "arange",
         .summary = "Values start, start+step, ... below end; int64 if all bounds are ints, else "
                    "the default float dtype",
         .attrs = {{"start", AttrKind::Float, Attr(int64_t{0})},
                   {"end", AttrKind::Float},
                   {"step", AttrKind::Float, Attr(int64_t{1})},
                   optionalAttr("dtype", AttrKind::DType)},
         .traits = kConstantLike,
         .infer = [](const Op &op) -> std::vector<Type> {
           if (isSymbolicSize(op, "start") || isSymbolicSize(op, "end"))
             return {symbolicArangeType(op)};
           Arange a = arangeOf(op);
           return {Type::tensor(a.dtype, {a.length})};
         },
         .kernel = arangeKernel});
  r.add({.name = "linspace",
         .summary = "steps values evenly spaced from start to end inclusive",
         .attrs = {{"start", AttrKind::Float},
                   {"end", AttrKind::Float},
                   {"steps", AttrKind::Int},
                   {"dtype", AttrKind::DType, Attr(DType::F32)}},
         .traits = kConstantLike,
         .infer = [](const Op &op) -> std::vector<Type> {
           attrOf(op, "start"), attrOf(op, "end");
           return {Type::tensor(attrDType(op, "dtype"), {linspaceSteps(op)})};
         },
         .kernel = linspaceKernel});
  r.add({.name = "eye",
         .summary = "n x m matrix (m defaults to n) with ones on the diagonal",
         .attrs = {{"n", AttrKind::Int},
                   optionalAttr("m", AttrKind::Int),
                   {"dtype", AttrKind::DType, Attr(DType::F32)}},
         .traits = kConstantLike,
         .infer = [](const Op &op) -> std::vector<Type> {
           int64_t n = attrInt(op, "n"), m = hasAttrValue(op, "m") ? attrInt(op, "m") : n;
           if (n < 0 || m < 0)
             inferFail("eye: n and m must be non-negative, got " + std::to_string(n) + ", " +
                       std::to_string(m));
           return {Type::tensor(attrDType(op, "dtype"), {n, m})};
         },
         .kernel = [](const Op &op, In) -> Results {
           Tensor out = Tensor::empty(resultDType(op), sizesOf(op.result(0)->type()));
           int64_t n = out.sizes()[0], m = out.sizes()[1];
           for (int64_t i = 0; i < std::min(n, m); ++i)
             out.setInt(i * m + i, 1);
           return one(out);
         }});

  struct FillForm {
    const char *name, *summary;
    ShapeFrom from;
    Fill fill;
  };
  static const FillForm forms[] = {
      {"full", "Tensor of shape filled with fill_value (dtype from the value by default)",
       ShapeFrom::Attr, Fill::Value},
      {"zeros", "Tensor of shape filled with 0", ShapeFrom::Attr, Fill::Zero},
      {"ones", "Tensor of shape filled with 1", ShapeFrom::Attr, Fill::One},
      {"empty", "Uninitialized tensor of shape (zero-filled here)", ShapeFrom::Attr, Fill::Zero},
      {"full_like", "Tensor like self filled with fill_value", ShapeFrom::Like, Fill::Value},
      {"zeros_like", "Tensor like self filled with 0", ShapeFrom::Like, Fill::Zero},
      {"ones_like", "Tensor like self filled with 1", ShapeFrom::Like, Fill::One},
      {"empty_like", "Uninitialized tensor like self (zero-filled here)", ShapeFrom::Like,
       Fill::Zero},
      {"new_full", "Tensor of shape with self's dtype by default, filled with fill_value",
       ShapeFrom::New, Fill::Value},
      {"new_zeros", "Tensor of shape with self's dtype by default, filled with 0", ShapeFrom::New,
       Fill::Zero},
      {"new_ones", "Tensor of shape with self's dtype by default, filled with 1", ShapeFrom::New,
       Fill::One},
      {"new_empty", "Uninitialized tensor of shape with self's dtype by default (zero-filled)",
       ShapeFrom::New, Fill::Zero},
  };
  for (const FillForm &f : forms)
    r.add(fillRow(f.name, f.summary, f.from, f.fill));

  r.add(queryRow("size", "Size of dim (an int)", {{"dim", AttrKind::Int}},
                 [](const Op &op, const Tensor &t) {
                   return t.sizes()[normDim(attrInt(op, "dim"), t.rank())];
                 }));
  r.add(queryRow("numel", "Number of elements (an int)", {},
                 [](const Op &, const Tensor &t) { return t.numel(); }));
  r.add(queryRow("dim", "Number of dims (an int)", {},
                 [](const Op &, const Tensor &t) { return t.rank(); }));
  // A Python number carried into the graph as a 0-d tensor (a float input, Capture::
  // floatInputs): ops then take it as a scalar operand, promoted as a Python number is.
  r.add({.name = "item",
         .summary = "The value of a 0-d tensor as a Python number (float, int or bool)",
         .operands = {{"self"}},
         .infer = [](const Op &op) -> std::vector<Type> {
           const Type &t = tensorOperand(op, 0);
           if (t.rank() != 0)
             inferFail("item: expected a 0-d tensor, got " + t.str());
           switch (dtypeCategory(t.dtype())) {
           case DTypeCategory::Bool:
             return {Type::boolTy()};
           case DTypeCategory::Integer:
             return {Type::intTy()};
           case DTypeCategory::Floating:
             break;
           }
           return {Type::floatTy()};
         },
         .kernel = [](const Op &op, In in) -> Results {
           const Tensor &t = tensorIn(op, in, 0);
           switch (dtypeCategory(t.dtype())) {
           case DTypeCategory::Bool:
             return {RtValue(t.getInt(0) != 0)};
           case DTypeCategory::Integer:
             return {RtValue(t.getInt(0))};
           case DTypeCategory::Floating:
             break;
           }
           return {RtValue(t.getDouble(0))};
         }});
}

} // namespace xjit
