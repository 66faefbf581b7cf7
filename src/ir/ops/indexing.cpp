// Indexing ops: index_select, gather / take_along_dim, the scatter family, masked_scatter and the
// in-place writes copy_ / fill_. Advanced indexing (index, index_put) and sorting live in
// movement_advindex.cpp and movement_sort.cpp and are registered from here.
#include "ops/movement_util.h"

#include <algorithm>
#include <cmath>
#include <optional>

namespace xjit {

using namespace ops;
using namespace ops::mv;

namespace {

using Results = std::vector<RtValue>;
using In = std::span<const RtValue>;

Results one(Tensor t) { return {RtValue(std::move(t))}; }

// gather/scatter treat a 0-d tensor as 1-d of size 1 (torch's ensure_nonempty_dim).
int64_t nonEmptyRank(const Type &t) { return std::max<int64_t>(t.rank(), 1); }
DimExpr nonEmptySize(const Type &t, int64_t d) { return t.rank() == 0 ? DimExpr(1) : t.shape()[d]; }
Tensor nonEmpty(const Tensor &t) { return t.rank() == 0 ? t.view({1}, {1}, t.offset()) : t; }

void requireIndexDType(const Op &op, size_t i, bool allowInt32) {
  const Type &t = tensorOperand(op, i);
  if (t.dtype() != DType::I64 && !(allowInt32 && t.dtype() == DType::I32))
    inferFail(op.name() + ": expected dtype " + (allowInt32 ? "int32 or int64" : "int64") +
              " for index, got " + std::string(dtypeName(t.dtype())));
}

int64_t indexValue(const Op &op, int64_t v, int64_t size, int64_t dim, bool wrapNegative) {
  if (wrapNegative && v < 0 && v >= -size) v += size;
  if (v < 0 || v >= size)
    kernelFail(op.name() + ": index " + std::to_string(v) + " is out of bounds for dimension " +
               std::to_string(dim) + " with size " + std::to_string(size));
  return v;
}

Scalar elementAt(const Tensor &t, int64_t i) {
  return isFloating(t.dtype()) ? Scalar::fromDouble(t.getDouble(i)) : Scalar::fromInt(t.getInt(i));
}

// ---- index_select ----

std::vector<Type> inferIndexSelect(const Op &op) {
  const Type &t = tensorOperand(op, 0);
  const Type &index = tensorOperand(op, 1);
  requireIndexDType(op, 1, true);
  if (index.rank() > 1) inferFail("index_select: index must be 0-d or 1-d, got " + index.str());
  int64_t dim = normDim(attrInt(op, "dim"), t.rank());
  if (t.rank() == 0) return {t};
  Shape s = t.shape();
  s[dim] = index.rank() == 0 ? DimExpr(1) : index.shape()[0];
  return {t.withShape(s)};
}

Results indexSelectKernel(const Op &op, In in) {
  const Tensor &t = tensorIn(op, in, 0);
  const Tensor &index = tensorIn(op, in, 1);
  Tensor self = nonEmpty(t);
  int64_t dim = normDim(attrInt(op, "dim"), t.rank());
  std::vector<int64_t> sizes = self.sizes();
  sizes[dim] = index.numel();
  Tensor out = Tensor::empty(t.dtype(), t.rank() == 0 ? std::vector<int64_t>{} : sizes);
  Tensor outView = nonEmpty(out);
  for (int64_t k = 0; k < index.numel(); ++k) {
    int64_t j = indexValue(op, index.getInt(k), self.sizes()[dim], dim, false);
    sliceView(outView, dim, k, 1).copyFrom(sliceView(self, dim, j, 1));
  }
  return one(out);
}

// ---- gather / take_along_dim ----

// Index sizes may not exceed self's except along dim (static dims only; kernels
// re-check).
void checkIndexFits(const Op &op, const Type &index, const Type &other, int64_t dim,
                    const char *otherName) {
  for (int64_t d = 0; d < nonEmptyRank(index); ++d) {
    if (d == dim) continue;
    auto a = nonEmptySize(index, d).staticValue(), b = nonEmptySize(other, d).staticValue();
    if (a && b && *a > *b)
      inferFail(op.name() + ": size of index (" + std::to_string(*a) + ") exceeds size of " +
                otherName + " (" + std::to_string(*b) + ") at dimension " + std::to_string(d));
  }
}

void checkSameRank(const Op &op, const Type &a, const Type &b, const char *what) {
  if (nonEmptyRank(a) != nonEmptyRank(b))
    inferFail(op.name() + ": index tensor must have the same number of dimensions as " + what +
              " (" + std::to_string(b.rank()) + "), got " + std::to_string(a.rank()));
}

std::vector<Type> inferGather(const Op &op) {
  const Type &t = tensorOperand(op, 0);
  const Type &index = tensorOperand(op, 1);
  requireIndexDType(op, 1, false);
  checkSameRank(op, index, t, "input");
  int64_t dim = normDim(attrInt(op, "dim"), t.rank());
  checkIndexFits(op, index, t, dim, "input");
  return {t.withShape(index.shape())};
}

// out[idx] = self[idx with idx[dim] = index[idx]]; `index` and `self` are broadcast alike except
// along dim.
Tensor gatherAlong(const Op &op, const Tensor &self, const Tensor &index, int64_t dim,
                   bool wrapNegative, const std::vector<int64_t> &outSizes) {
  Tensor s = nonEmpty(self), ix = nonEmpty(index);
  for (int64_t d = 0; d < ix.rank(); ++d)
    if (d != dim && ix.sizes()[d] > s.sizes()[d])
      kernelFail(op.name() + ": size of index exceeds size of input at dimension " +
                 std::to_string(d));
  Tensor out = Tensor::empty(self.dtype(), outSizes);
  std::vector<int64_t> src;
  forEachIndex(ix.sizes(), [&](const std::vector<int64_t> &idx, int64_t linear) {
    src = idx;
    src[dim] = indexValue(op, ix.getInt(linear), s.sizes()[dim], dim, wrapNegative);
    copyElement(out, linear, s, linearIndex(s.sizes(), src));
  });
  return out;
}

Results gatherKernel(const Op &op, In in) {
  const Tensor &t = tensorIn(op, in, 0);
  const Tensor &index = tensorIn(op, in, 1);
  int64_t dim = normDim(attrInt(op, "dim"), t.rank());
  return one(gatherAlong(op, t, index, dim, false, index.sizes()));
}

// take_along_dim: without dim, both are flattened; with dim, self and indices broadcast in every
// dim but dim.
template <class D>
std::vector<D>
takeAlongSizes(const std::vector<D> &self, const std::vector<D> &index, int64_t dim,
               const std::function<std::vector<D>(std::vector<D>, std::vector<D>)> &bcast) {
  std::vector<D> a = self, b = index;
  a[dim] = D(1);
  b[dim] = D(1);
  std::vector<D> out = bcast(a, b);
  out[dim] = index[dim];
  return out;
}

std::vector<Type> inferTakeAlongDim(const Op &op) {
  const Type &t = tensorOperand(op, 0);
  const Type &index = tensorOperand(op, 1);
  requireIndexDType(op, 1, false);
  if (!hasAttrValue(op, "dim")) return {t.withShape({numelOf(index.shape())})};
  if (t.rank() != index.rank())
    inferFail(
        "take_along_dim: input and indices should have the same number of dimensions, but got " +
        std::to_string(t.rank()) + " and " + std::to_string(index.rank()));
  int64_t dim = normDim(attrInt(op, "dim"), t.rank());
  if (t.rank() == 0) return {t};
  return {t.withShape(takeAlongSizes<DimExpr>(t.shape(), index.shape(), dim, broadcastShapes))};
}

Results takeAlongDimKernel(const Op &op, In in) {
  const Tensor &t = tensorIn(op, in, 0);
  const Tensor &index = tensorIn(op, in, 1);
  if (!hasAttrValue(op, "dim")) {
    Tensor flat = t.contiguousCopy(), ix = index.contiguousCopy();
    flat = flat.view({t.numel()}, {1}, flat.offset());
    ix = ix.view({index.numel()}, {1}, ix.offset());
    return one(gatherAlong(op, flat, ix, 0, true, {index.numel()}));
  }
  int64_t dim = normDim(attrInt(op, "dim"), t.rank());
  if (t.rank() == 0) return one(gatherAlong(op, t, index, 0, true, {}));
  auto sizes = takeAlongSizes<int64_t>(t.sizes(), index.sizes(), dim, broadcastSizes);
  auto selfSizes = sizes, indexSizes = sizes;
  selfSizes[dim] = t.sizes()[dim];
  return one(
      gatherAlong(op, expandTo(t, selfSizes), expandTo(index, indexSizes), dim, true, sizes));
}

// ---- scatter family ----

using Reduce = ScatterReduce;

std::vector<Type> inferScatter(const Op &op) {
  const Type &t = tensorOperand(op, 0);
  const Type &index = tensorOperand(op, 1);
  requireIndexDType(op, 1, false);
  scatterReduceOf(op);
  int64_t dim = normDim(attrInt(op, "dim"), t.rank());
  checkSameRank(op, index, t, "self");
  checkIndexFits(op, index, t, dim, "self");
  if (hasOperand(op, 2) && op.operand(2)->type().isTensor()) {
    const Type &src = tensorOperand(op, 2);
    if (src.dtype() != t.dtype())
      inferFail(op.name() + ": expected self.dtype to be equal to src.dtype, got " +
                std::string(dtypeName(t.dtype())) + " and " + std::string(dtypeName(src.dtype())));
    checkSameRank(op, index, src, "src");
    for (int64_t d = 0; d < nonEmptyRank(index); ++d) {
      auto a = nonEmptySize(index, d).staticValue(), b = nonEmptySize(src, d).staticValue();
      if (a && b && *a > *b)
        inferFail(op.name() + ": size of index (" + std::to_string(*a) + ") exceeds size of src (" +
                  std::to_string(*b) + ") at dimension " + std::to_string(d));
    }
  } else if (op.name() != "scatter") {
    tensorOperand(op, 2); // scatter_add / scatter_reduce need a src tensor
  } else if (hasOperand(op, 2)) {
    if (!op.operand(2)->type().isScalar())
      inferFail("scatter: src must be a tensor or a number, got " + op.operand(2)->type().str());
  } else if (!op.attrOrNull("value")) {
    inferFail("scatter: needs a src tensor or a value");
  }
  return {t};
}

// Folds v into out[j] (values round to out's dtype at every step, as torch's in-place update).
void combine(const Tensor &out, int64_t j, const Scalar &v, Reduce r) {
  if (r == Reduce::None) return setScalar(out, j, v);
  if (isFloating(out.dtype())) {
    double a = out.getDouble(j), b = v.category == DTypeCategory::Floating ? v.f : double(v.i);
    double res = r == Reduce::Sum || r == Reduce::Mean ? a + b
                 : r == Reduce::Prod                   ? a * b
                 : std::isnan(a) || std::isnan(b)      ? NAN
                 : r == Reduce::Max                    ? std::max(a, b)
                                                       : std::min(a, b);
    return out.setDouble(j, res);
  }
  int64_t a = out.getInt(j), b = v.i;
  // Unsigned wrap-around avoids signed-overflow UB; the store wraps to the dtype anyway.
  auto ua = static_cast<uint64_t>(a), ub = static_cast<uint64_t>(b);
  uint64_t res = r == Reduce::Sum || r == Reduce::Mean ? ua + ub
                 : r == Reduce::Prod
                     ? ua * ub
                     : static_cast<uint64_t>(r == Reduce::Max ? std::max(a, b) : std::min(a, b));
  out.setInt(j, static_cast<int64_t>(res));
}

Tensor scatterInto(const Op &op, In in, Tensor out) {
  const Tensor &index = tensorIn(op, in, 1);
  int64_t dim = normDim(attrInt(op, "dim"), out.rank());
  Reduce r = scatterReduceOf(op);
  bool includeSelf = !op.attrOrNull("include_self") || attrBool(op, "include_self");
  std::optional<Tensor> src;
  std::optional<Scalar> value;
  if (hasInput(in, 2) && in[2].isTensor())
    src = nonEmpty(in[2].tensor());
  else if (hasInput(in, 2))
    value = Scalar::fromRt(in[2], op.name());
  else
    value = Scalar::fromAttr(op.attr("value"));
  Tensor o = nonEmpty(out), ix = nonEmpty(index);
  for (int64_t d = 0; d < ix.rank(); ++d) {
    if ((d != dim && ix.sizes()[d] > o.sizes()[d]) || (src && ix.sizes()[d] > src->sizes()[d]))
      kernelFail(op.name() + ": size of index exceeds size of self or src at dimension " +
                 std::to_string(d));
  }
  // Without self in the reduction, the first value scattered to a target replaces it (the same
  // as starting from the reduction's identity); mean divides by the number of values combined.
  std::vector<int64_t> count(static_cast<size_t>(o.numel()), includeSelf ? 1 : 0);
  std::vector<int64_t> target;
  forEachIndex(ix.sizes(), [&](const std::vector<int64_t> &idx, int64_t linear) {
    target = idx;
    target[dim] = indexValue(op, ix.getInt(linear), o.sizes()[dim], dim, false);
    int64_t j = linearIndex(o.sizes(), target);
    Scalar v = src ? elementAt(*src, linearIndex(src->sizes(), idx)) : *value;
    int64_t &c = count[static_cast<size_t>(j)];
    combine(o, j, v, c == 0 ? Reduce::None : r);
    ++c;
  });
  if (r == Reduce::Mean) {
    for (int64_t j = 0; j < o.numel(); ++j) {
      int64_t c = std::max<int64_t>(count[static_cast<size_t>(j)], 1);
      if (isFloating(o.dtype())) {
        o.setDouble(j, o.getDouble(j) / static_cast<double>(c));
      } else { // integer mean rounds toward -inf, like torch's floor division
        int64_t a = o.getInt(j);
        o.setInt(j, a / c - ((a % c != 0) && ((a < 0) != (c < 0))));
      }
    }
  }
  return out;
}

Results scatterKernel(const Op &op, In in) {
  return one(scatterInto(op, in, tensorIn(op, in, 0).contiguousCopy()));
}

OpDef scatterRow(std::string name, std::string summary, std::vector<AttrSpec> attrs,
                 bool srcOptional) {
  attrs.insert(attrs.begin(), AttrSpec{"dim", AttrKind::Int});
  return {.name = std::move(name),
          .summary = std::move(summary),
          .operands = {{"self"}, {"index"}, {.name = "src", .optional = srcOptional}},
          .attrs = std::move(attrs),
          .infer = inferScatter,
          .kernel = scatterKernel};
}

// ---- masked_scatter ----

std::vector<Type> inferMaskedScatter(const Op &op) {
  const Type &t = tensorOperand(op, 0);
  const Type &mask = tensorOperand(op, 1);
  const Type &source = tensorOperand(op, 2);
  if (mask.dtype() != DType::Bool)
    inferFail("masked_scatter: expected a bool mask, got " + mask.str());
  if (source.dtype() != t.dtype())
    inferFail("masked_scatter: expected self and source to have the same dtype, got " +
              std::string(dtypeName(t.dtype())) + " and " + std::string(dtypeName(source.dtype())));
  return {t.withShape(broadcastShapes(t.shape(), mask.shape()))};
}

Results maskedScatterKernel(const Op &op, In in) {
  const Tensor &t = tensorIn(op, in, 0);
  const Tensor &mask = tensorIn(op, in, 1);
  const Tensor &source = tensorIn(op, in, 2);
  auto sizes = broadcastSizes(t.sizes(), mask.sizes());
  Tensor out = expandTo(t, sizes).contiguousCopy(), m = expandTo(mask, sizes);
  int64_t next = 0;
  for (int64_t i = 0, n = out.numel(); i < n; ++i) {
    if (!m.getInt(i)) continue;
    if (next >= source.numel())
      kernelFail("masked_scatter: number of elements in source < number of ones in mask");
    copyElement(out, i, source, next++);
  }
  return one(out);
}

// ---- in-place writes ----

std::vector<Type> inferCopy(const Op &op) {
  const Type &dst = tensorOperand(op, 0);
  const Type &src = tensorOperand(op, 1);
  Shape b = broadcastShapes(dst.shape(), src.shape());
  if (b.size() != dst.shape().size())
    inferFail("copy_: source " + src.str() + " cannot be broadcast to destination " + dst.str());
  for (size_t i = 0; i < b.size(); ++i)
    if (b[i].isStatic() && dst.shape()[i].isStatic() && b[i] != dst.shape()[i])
      inferFail("copy_: source " + src.str() + " cannot be broadcast to destination " + dst.str());
  return {dst};
}

std::vector<Type> inferFill(const Op &op) {
  const Type &t = tensorOperand(op, 0);
  if (hasOperand(op, 1)) {
    const Type &v = op.operand(1)->type();
    if (!(v.isScalar() || (v.isTensor() && v.rank() == 0)))
      inferFail("fill_: value must be a number or a 0-dimensional tensor, got " + v.str());
  } else if (!op.attrOrNull("value")) {
    inferFail("fill_: needs a value (operand or attribute)");
  }
  return {t};
}

} // namespace

namespace ops::mv {

ScatterReduce scatterReduceOf(const Op &op) {
  if (op.name() == "scatter_add") return ScatterReduce::Sum;
  const Attr *a = op.attrOrNull("reduce");
  if (!a && op.name() == "scatter_reduce")
    inferFail("scatter_reduce: missing required attribute 'reduce'");
  if (!a) return ScatterReduce::None;
  if (a->kind() != AttrKind::Str) inferFail(op.name() + ": reduce must be a string");
  const std::string &r = a->asStr();
  if (op.name() == "scatter") {
    if (r == "add") return ScatterReduce::Sum;
    if (r == "multiply") return ScatterReduce::Prod;
    inferFail("scatter: reduce argument must be either add or multiply, got '" + r + "'");
  }
  if (r == "sum") return ScatterReduce::Sum;
  if (r == "prod") return ScatterReduce::Prod;
  if (r == "mean") return ScatterReduce::Mean;
  if (r == "amax") return ScatterReduce::Max;
  if (r == "amin") return ScatterReduce::Min;
  inferFail("scatter_reduce: reduce argument must be one of sum, prod, mean, amax, amin, got '" +
            r + "'");
}

} // namespace ops::mv

void registerIndexingOps(OpRegistry &r) {
  r.add({.name = "index_select",
         .summary = "Slices of self along dim at the positions in a 1-d index (no wrap-around)",
         .operands = {{"self"}, {"index"}},
         .attrs = {{"dim", AttrKind::Int}},
         .infer = inferIndexSelect,
         .kernel = indexSelectKernel});
  r.add({.name = "gather",
         .summary = "out[i][j] = self[index[i][j]][j] (dim 0); index has self's rank",
         .operands = {{"self"}, {"index"}},
         .attrs = {{"dim", AttrKind::Int}},
         .infer = inferGather,
         .kernel = gatherKernel});
  r.add({.name = "take_along_dim",
         .summary = "gather with self and indices broadcast except along dim (negative indices "
                    "wrap); without dim both are flattened",
         .operands = {{"self"}, {"indices"}},
         .attrs = {optionalAttr("dim", AttrKind::Int)},
         .infer = inferTakeAlongDim,
         .kernel = takeAlongDimKernel});
  r.add(scatterRow("scatter",
                   "A copy of self with self[index[i][j]][j] = src[i][j] (dim 0); src is a tensor "
                   "or a number (operand or `value` attribute); reduce add/multiply",
                   {optionalAttr("reduce", AttrKind::Str), numberAttr("value", true)}, true));
  r.add(scatterRow("scatter_add", "scatter that adds src into self (duplicates accumulate)", {},
                   false));
  r.add(scatterRow("scatter_reduce",
                   "scatter reducing with sum, prod, mean, amax or amin; include_self false leaves "
                   "self out of the reduction where a value is scattered",
                   {{"reduce", AttrKind::Str}, {"include_self", AttrKind::Bool, Attr(true)}},
                   false));
  r.add({.name = "masked_scatter",
         .summary = "self with consecutive source elements where the (broadcast) mask is true",
         .operands = {{"self"}, {"mask"}, {"source"}},
         .infer = inferMaskedScatter,
         .kernel = maskedScatterKernel});
  r.add({.name = "copy_",
         .summary = "Copies src (broadcast, dtype converted) into self; returns self",
         .operands = {{"self"}, {"src"}},
         .traits = kInPlace,
         .infer = inferCopy,
         .kernel = [](const Op &op, In in) -> Results {
           const Tensor &dst = tensorIn(op, in, 0);
           const Tensor &src = tensorIn(op, in, 1);
           // Read everything first: src may alias dst.
           dst.copyFrom(expandTo(src, dst.sizes()).contiguousCopy());
           return one(dst);
         }});
  r.add({.name = "fill_",
         .summary = "Fills self with value (operand: number or 0-d tensor, or attribute)",
         .operands = {{"self"}, {.name = "value", .optional = true}},
         .attrs = {numberAttr("value", true)},
         .traits = kInPlace,
         .infer = inferFill,
         .kernel = [](const Op &op, In in) -> Results {
           const Tensor &t = tensorIn(op, in, 0);
           fill(t, hasInput(in, 1) ? Scalar::fromRt(in[1], "fill_")
                                   : Scalar::fromAttr(op.attr("value")));
           return one(t);
         }});
  registerAdvancedIndexOps(r);
  registerSortOps(r);
}

} // namespace xjit
