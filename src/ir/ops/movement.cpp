// Shape and view ops: reshape/view, permute/transpose, expand, squeeze/unsqueeze, flatten, slicing,
// splitting, diagonal, contiguous/clone. View ops return strided views sharing operand 0's storage
// wherever PyTorch returns a view; reshape-like ops copy only when the strides do not allow a view
// (those rows carry kView meaning "may alias operand 0").
#include "ops/movement_util.h"
#include "xjit/ir/sym_attr.h"

#include <algorithm>
#include <climits>

namespace xjit {

using namespace ops;
using namespace ops::mv;

namespace {

using Results = std::vector<RtValue>;
using In = std::span<const RtValue>;

const Type &self(const Op &op) { return tensorOperand(op, 0); }
Results one(Tensor t) { return {RtValue(std::move(t))}; }
std::string intsStr(const std::vector<int64_t> &v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i)
    s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

// ---- reshape family: the result is a view when the strides allow it, else a
// copy ----

Tensor reshapeTensor(const Tensor &t, const std::vector<int64_t> &sizes, bool mustView,
                     const std::string &opName) {
  if (auto strides = viewStrides(t.sizes(), t.strides(), sizes))
    return t.view(sizes, *strides, t.offset());
  if (mustView)
    kernelFail(opName +
               ": view size is not compatible with input tensor's size and stride (at least one "
               "dimension spans across two contiguous subspaces); use reshape instead");
  Tensor c = t.contiguousCopy();
  return c.view(sizes, contiguousStrides(sizes), c.offset());
}

// A reshape target with symbolic dims (docs/ir.md, "Symbolic sizes"): taken as given; a -1 is
// the number of elements divided by the other dims, which must divide exactly as expressions.
// Whether the element counts agree is checked when the kernel runs with the evaluated sizes.
Shape symbolicReshapeShape(const Shape &target, const Shape &in, const std::string &name) {
  Shape out = target;
  int64_t minusOne = -1;
  DimExpr known(1);
  // Dims the target shares with the input cancel first ([s0,s1,8] -> [s0,s1,2,-1] divides 8 by
  // 2): DimExpr divides exactly only by constants.
  std::vector<DimExpr> rest(in.begin(), in.end());
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i] == DimExpr(-1)) {
      if (minusOne >= 0) inferFail(name + ": only one dimension can be inferred");
      minusOne = static_cast<int64_t>(i);
      continue;
    }
    if (target[i].isStatic() && target[i].value() < 0)
      inferFail(name + ": invalid shape dimension " + target[i].str());
    if (auto it = std::find(rest.begin(), rest.end(), target[i]); it != rest.end())
      rest.erase(it);
    else
      known = known * target[i];
  }
  if (minusOne >= 0) {
    DimExpr numel(1);
    for (const DimExpr &d : rest)
      numel = numel * d;
    DimExpr inferred = numel.floorDiv(known);
    if (inferred * known != numel)
      inferFail(name + ": cannot infer the -1 of " + shapeStr(target) + " from " + numel.str() +
                " elements");
    out[static_cast<size_t>(minusOne)] = inferred;
  }
  return out;
}

std::vector<Type> inferReshape(const Op &op) {
  const Type &t = self(op);
  if (isSymbolicSize(op, "shape")) {
    auto target = sizeAttrDims(op, "shape");
    if (!target) inferFail(op.name() + ": bad symbolic shape " + op.attr("shape").asStr());
    return {t.withShape(symbolicReshapeShape(*target, t.shape(), op.name()))};
  }
  return {t.withShape(inferReshapeShape(attrInts(op, "shape"), numelOf(t.shape()), op.name()))};
}

Results reshapeKernel(const Op &op, In in, bool mustView) {
  const Tensor &t = tensorIn(op, in, 0);
  auto sizes = reshapeSizes(attrInts(op, "shape"), t.numel(), op.name());
  return one(reshapeTensor(t, sizes, mustView, op.name()));
}

// flatten(start_dim, end_dim): 0-d tensors become 1-d.
std::pair<int64_t, int64_t> flattenRange(const Op &op, int64_t rank) {
  int64_t r = std::max<int64_t>(rank, 1);
  int64_t s = normDim(attrInt(op, "start_dim"), r), e = normDim(attrInt(op, "end_dim"), r);
  if (s > e)
    inferFail("flatten: start_dim cannot come after end_dim");
  return {s, e};
}

template <class D> std::vector<D> flattened(const std::vector<D> &sizes, int64_t s, int64_t e) {
  if (sizes.empty())
    return {D(1)};
  std::vector<D> out(sizes.begin(), sizes.begin() + s);
  D prod(1);
  for (int64_t i = s; i <= e; ++i)
    prod = prod * sizes[i];
  out.push_back(prod);
  out.insert(out.end(), sizes.begin() + e + 1, sizes.end());
  return out;
}

// unflatten(dim, sizes): one dim split into several, sizes may hold one -1.
template <class D>
std::vector<D> unflattened(const std::vector<D> &sizes, int64_t dim, const std::vector<D> &parts) {
  std::vector<D> out(sizes.begin(), sizes.begin() + dim);
  out.insert(out.end(), parts.begin(), parts.end());
  out.insert(out.end(), sizes.begin() + dim + 1, sizes.end());
  return out;
}

// ---- permutations ----

std::vector<int64_t> transposePerm(int64_t rank, int64_t d0, int64_t d1) {
  std::vector<int64_t> perm(static_cast<size_t>(rank));
  for (int64_t i = 0; i < rank; ++i)
    perm[i] = i;
  if (rank > 0)
    std::swap(perm[normDim(d0, rank)], perm[normDim(d1, rank)]);
  else
    normDim(d0, rank), normDim(d1, rank); // validates 0 / -1
  return perm;
}

std::vector<int64_t> tPerm(const Op &op, int64_t rank) {
  if (rank > 2)
    inferFail("t: expects a tensor with <= 2 dimensions, got " + std::to_string(rank));
  return rank == 2 ? std::vector<int64_t>{1, 0} : transposePerm(rank, 0, 0);
}

std::vector<int64_t> movedimPerm(const Op &op, int64_t rank) {
  const auto &src = attrInts(op, "source");
  const auto &dst = attrInts(op, "destination");
  if (src.size() != dst.size())
    inferFail("movedim: source and destination must have the same number of dims, got " +
              std::to_string(src.size()) + " and " + std::to_string(dst.size()));
  std::vector<int64_t> perm(static_cast<size_t>(rank), -1);
  std::vector<bool> used(static_cast<size_t>(rank), false), placed(perm.size(), false);
  for (size_t i = 0; i < src.size(); ++i) {
    int64_t s = normDim(src[i], rank), d = normDim(dst[i], rank);
    if (rank == 0)
      continue;
    if (used[s] || placed[d])
      inferFail("movedim: repeated dim in source or destination");
    perm[d] = s;
    used[s] = placed[d] = true;
  }
  // The remaining dims keep their relative order in the free slots.
  size_t next = 0;
  for (int64_t d = 0; d < rank; ++d) {
    if (perm[d] >= 0)
      continue;
    while (used[next])
      ++next;
    perm[d] = static_cast<int64_t>(next++);
  }
  return perm;
}

Shape permuted(const Shape &s, const std::vector<int64_t> &perm) {
  Shape out;
  for (int64_t p : perm)
    out.push_back(s[p]);
  return out;
}

using PermFn = std::vector<int64_t> (*)(const Op &, int64_t);

OpDef permuteRow(std::string name, std::string summary, std::vector<AttrSpec> attrs, PermFn perm) {
  return {.name = std::move(name),
          .summary = std::move(summary),
          .operands = {{"self"}},
          .attrs = std::move(attrs),
          .traits = kView,
          .infer = [perm](const Op &op) -> std::vector<Type> {
            const Type &t = self(op);
            return {t.withShape(permuted(t.shape(), perm(op, t.rank())))};
          },
          .kernel = [perm](const Op &op, In in) -> Results {
            const Tensor &t = tensorIn(op, in, 0);
            return one(permuteView(t, perm(op, t.rank())));
          }};
}

// ---- expand ----

Shape expandShape(const Shape &in, const std::vector<int64_t> &target, const std::string &name) {
  if (target.size() < in.size())
    inferFail(name + ": the number of sizes provided (" + std::to_string(target.size()) +
              ") must be greater or equal to the number of dimensions in the tensor (" +
              std::to_string(in.size()) + ")");
  size_t lead = target.size() - in.size();
  Shape out;
  for (size_t i = 0; i < target.size(); ++i) {
    int64_t t = target[i];
    if (i < lead) {
      if (t < 0)
        inferFail(name + ": the expanded size " + std::to_string(t) +
                  " isn't allowed in a leading, non-existing dimension " + std::to_string(i));
      out.push_back(t);
      continue;
    }
    const DimExpr &d = in[i - lead];
    if (t == -1)
      out.push_back(d);
    else if (t < 0)
      inferFail(name + ": invalid expanded size " + std::to_string(t));
    else if (d.isStatic() && d.value() != 1 && d.value() != t)
      inferFail(name + ": the expanded size (" + std::to_string(t) +
                ") must match the existing size (" + d.str() + ") at non-singleton dimension " +
                std::to_string(i) + "; target sizes " + intsStr(target));
    else
      out.push_back(t); // a symbolic dim is assumed to be t or 1 (guarded by
                        // the frontend)
  }
  return out;
}

// An expand target with symbolic sizes: the static entries are checked as above; a symbolic
// entry needs a source dim of 1 or the same expression (checked again, evaluated, by the kernel).
Shape symbolicExpandShape(const Shape &in, const Op &op) {
  auto target = sizeAttrDims(op, "shape");
  if (!target) inferFail("expand: bad symbolic shape " + op.attr("shape").asStr());
  size_t lead = target->size() - std::min(target->size(), in.size());
  std::vector<int64_t> statics;
  for (size_t i = 0; i < target->size(); ++i)
    statics.push_back((*target)[i].staticValue().value_or(i < lead ? 1 : -1));
  Shape out = expandShape(in, statics, "expand");
  for (size_t i = 0; i < target->size(); ++i) {
    const DimExpr &d = (*target)[i];
    if (d.isStatic()) continue;
    if (i >= lead && in[i - lead] != DimExpr(1) && in[i - lead] != d)
      inferFail("expand: the expanded size " + d.str() + " must match the existing size " +
                in[i - lead].str() + " at non-singleton dimension " + std::to_string(i));
    out[i] = d;
  }
  return out;
}

Tensor expandKernel(const Tensor &t, const std::vector<int64_t> &target, const std::string &name) {
  size_t lead = target.size() - static_cast<size_t>(t.rank());
  std::vector<int64_t> sizes(target.size()), strides(target.size(), 0);
  for (size_t i = 0; i < target.size(); ++i) {
    if (i < lead) {
      sizes[i] = target[i];
      continue;
    }
    int64_t d = t.sizes()[i - lead];
    int64_t want = target[i] == -1 ? d : target[i];
    if (d != want && d != 1)
      kernelFail(name + ": the expanded size (" + std::to_string(want) +
                 ") must match the existing size (" + std::to_string(d) + ") at dimension " +
                 std::to_string(i));
    sizes[i] = want;
    strides[i] = d == want ? t.strides()[i - lead] : 0;
  }
  return t.view(sizes, strides, t.offset());
}

// ---- squeeze / unsqueeze ----

// Dims squeezed: the listed ones (or all) whose declared size is the static 1. A symbolic dim is
// never squeezed (PyTorch's dynamic shapes assume symbols are not 1).
std::vector<bool> squeezeMask(const Op &op, const Shape &s) {
  std::vector<bool> mask(s.size(), false);
  const Attr *dims = op.attrOrNull("dim");
  int64_t rank = static_cast<int64_t>(s.size());
  auto isOne = [&](int64_t d) { return s[d].isStatic() && s[d].value() == 1; };
  if (!dims) {
    for (int64_t d = 0; d < rank; ++d)
      mask[d] = isOne(d);
    return mask;
  }
  for (int64_t d : dims->asInts()) {
    int64_t n = normDim(d, rank);
    if (rank > 0)
      mask[n] = isOne(n);
  }
  return mask;
}

// ---- slicing ----

std::vector<Type> inferSlice(const Op &op) {
  const Type &t = self(op);
  if (t.rank() == 0)
    inferFail("slice: cannot slice a 0-d tensor");
  int64_t dim = normDim(attrInt(op, "dim"), t.rank());
  int64_t step = attrInt(op, "step");
  if (step <= 0)
    inferFail("slice: step must be positive, got " + std::to_string(step));
  Shape s = t.shape();
  if (isSymbolicSize(op, "start") || isSymbolicSize(op, "end")) {
    // Symbolic bounds are offsets assumed to lie in [0, size] (no clamping, no wrapping); the
    // kernel runs with the evaluated bounds and its result is checked against this length.
    auto start = sizeAttrDim(op, "start"), end = sizeAttrDim(op, "end");
    if (!start || !end) inferFail("slice: bad symbolic bound");
    if (start->isStatic() && start->value() < 0)
      inferFail("slice: a negative start with a symbolic end is not supported");
    DimExpr e = *end;
    if (end->isStatic())
      e = end->value() == INT64_MAX ? s[dim] : end->value() < 0 ? s[dim] + *end : *end;
    s[dim] = step == 1 ? e - *start : (e - *start + DimExpr(step - 1)).floorDiv(step);
    return {t.withShape(s)};
  }
  s[dim] = resolveSlice(s[dim], attrInt(op, "start"), attrInt(op, "end"), step).length;
  return {t.withShape(s)};
}

Results sliceKernel(const Op &op, In in) {
  const Tensor &t = tensorIn(op, in, 0);
  int64_t dim = normDim(attrInt(op, "dim"), t.rank()), step = attrInt(op, "step");
  int64_t size = t.sizes()[dim], startAttr = attrInt(op, "start"), endAttr = attrInt(op, "end");
  // On a symbolic dim the result type assumed the bounds in range; a run-time size that breaks
  // the assumption fails like a failed shape guard instead of producing a mistyped view.
  const DimExpr &declared = tensorOperand(op, 0).shape()[dim];
  if (!declared.isStatic() && !sliceAssumptionHolds(size, startAttr, endAttr))
    kernelFail("slice: the graph assumes bounds " + std::to_string(startAttr) + ":" +
               (endAttr == INT64_MAX ? std::string() : std::to_string(endAttr)) +
               " lie within dimension " + std::to_string(dim) + " (size " + declared.str() +
               "), but its size is " + std::to_string(size) + " at run time");
  auto [start, len] = resolveSlice(size, startAttr, endAttr, step);
  return one(sliceView(t, dim, start, len, step));
}

int64_t checkedIndex(const std::string &name, int64_t index, int64_t size, int64_t dim) {
  if (index < -size || index >= size)
    kernelFail(name + ": index " + std::to_string(index) + " out of range for tensor of size " +
               std::to_string(size) + " at dimension " + std::to_string(dim));
  return index < 0 ? index + size : index;
}

std::vector<Type> inferSelect(const Op &op) {
  const Type &t = self(op);
  if (t.rank() == 0)
    inferFail("select: cannot be applied to a 0-d tensor");
  int64_t dim = normDim(attrInt(op, "dim"), t.rank()), index = attrInt(op, "index");
  if (auto size = t.shape()[dim].staticValue(); size && (index < -*size || index >= *size))
    inferFail("select: index " + std::to_string(index) + " out of range for tensor of size " +
              std::to_string(*size) + " at dimension " + std::to_string(dim));
  return {t.withShape(dropDim(t.shape(), dim))};
}

std::vector<Type> inferNarrow(const Op &op) {
  const Type &t = self(op);
  if (t.rank() == 0)
    inferFail("narrow: cannot be applied to a 0-d tensor");
  int64_t dim = normDim(attrInt(op, "dim"), t.rank());
  if (isSymbolicSize(op, "start") || isSymbolicSize(op, "length")) {
    // Symbolic sizes: an offset and a length assumed to lie within the dim (no wrapping from
    // the end); the kernel runs with the evaluated values and fails when they do not.
    auto start = sizeAttrDim(op, "start"), length = sizeAttrDim(op, "length");
    if (!start || !length)
      inferFail("narrow: bad symbolic size");
    if ((start->isStatic() && start->value() < 0) || (length->isStatic() && length->value() < 0))
      inferFail("narrow: a symbolic narrow needs a non-negative start and length, got start " +
                start->str() + ", length " + length->str());
    Shape s = t.shape();
    s[dim] = *length;
    return {t.withShape(s)};
  }
  int64_t start = attrInt(op, "start"), length = attrInt(op, "length");
  if (length < 0)
    inferFail("narrow: length must be non-negative, got " + std::to_string(length));
  if (auto size = t.shape()[dim].staticValue()) {
    if (start < -*size || start > *size)
      inferFail("narrow: start " + std::to_string(start) + " out of range for dimension of size " +
                std::to_string(*size));
    int64_t s = start < 0 ? start + *size : start;
    if (s + length > *size)
      inferFail("narrow: start (" + std::to_string(start) + ") + length (" +
                std::to_string(length) + ") exceeds dimension size (" + std::to_string(*size) +
                ")");
  }
  Shape s = t.shape();
  s[dim] = length;
  return {t.withShape(s)};
}

Results narrowKernel(const Op &op, In in) {
  const Tensor &t = tensorIn(op, in, 0);
  int64_t dim = normDim(attrInt(op, "dim"), t.rank());
  int64_t size = t.sizes()[dim], start = attrInt(op, "start"), length = attrInt(op, "length");
  if (start < 0)
    start += size;
  if (start < 0 || start + length > size)
    kernelFail("narrow: start (" + std::to_string(attrInt(op, "start")) + ") + length (" +
               std::to_string(length) + ") exceeds dimension size (" + std::to_string(size) + ")");
  return one(sliceView(t, dim, start, length));
}

// ---- splitting (multi-result views) ----

// Piece sizes along the split dim; `size` is the static dim size.
std::vector<int64_t> splitSizes(const Op &op, int64_t size) {
  const std::string &name = op.name();
  std::vector<int64_t> pieces;
  if (name == "split_with_sizes") {
    pieces = attrInts(op, "split_sizes");
    int64_t sum = 0;
    for (int64_t p : pieces) {
      if (p < 0)
        inferFail("split_with_sizes: split sizes must be non-negative, got " + intsStr(pieces));
      sum += p;
    }
    if (sum != size)
      inferFail("split_with_sizes: split sizes " + intsStr(pieces) +
                " do not sum to the dimension size " + std::to_string(size));
    return pieces;
  }
  if (name == "unbind")
    return std::vector<int64_t>(static_cast<size_t>(size), 1);
  int64_t splitSize;
  if (name == "chunk") {
    int64_t chunks = attrInt(op, "chunks");
    if (chunks <= 0)
      inferFail("chunk: number of chunks must be positive, got " + std::to_string(chunks));
    if (size == 0)
      return std::vector<int64_t>(static_cast<size_t>(chunks), 0);
    splitSize = (size + chunks - 1) / chunks;
  } else {
    splitSize = attrInt(op, "split_size");
    if (splitSize < 0 || (splitSize == 0 && size != 0))
      inferFail("split: split_size must be positive, got " + std::to_string(splitSize));
  }
  if (size == 0)
    return {0};
  for (int64_t at = 0; at < size; at += splitSize)
    pieces.push_back(std::min(splitSize, size - at));
  return pieces;
}

int64_t splitDim(const Op &op, int64_t rank) {
  if (rank == 0)
    inferFail(op.name() + ": cannot be applied to a 0-d tensor");
  return normDim(attrInt(op, "dim"), rank);
}

std::vector<Type> inferSplit(const Op &op) {
  const Type &t = self(op);
  int64_t dim = splitDim(op, t.rank());
  const DimExpr &size = t.shape()[dim];
  if (isSymbolicSize(op, "split_sizes")) {
    // Sizes over shape symbols: taken as given (the kernel checks that the evaluated sizes sum
    // to the dim); only a sum that differs in every run is an error here.
    auto sizes = sizeAttrDims(op, "split_sizes");
    if (!sizes)
      inferFail("split_with_sizes: bad symbolic split sizes");
    DimExpr sum(0);
    for (const DimExpr &p : *sizes) {
      if (p.isStatic() && p.value() < 0)
        inferFail("split_with_sizes: split sizes must be non-negative, got " + shapeStr(*sizes));
      sum = sum + p;
    }
    if ((sum - size).isStatic() && sum != size)
      inferFail("split_with_sizes: split sizes " + shapeStr(*sizes) +
                " do not sum to the dimension size " + size.str());
    std::vector<Type> out;
    for (const DimExpr &p : *sizes) {
      Shape s = t.shape();
      s[dim] = p;
      out.push_back(t.withShape(s));
    }
    return out;
  }
  // split_with_sizes on a symbolic dim: the sizes are taken as given (the frontend guards sums).
  std::vector<int64_t> pieces;
  if (op.name() == "split_with_sizes" && !size.isStatic()) {
    pieces = attrInts(op, "split_sizes");
    for (int64_t p : pieces)
      if (p < 0)
        inferFail("split_with_sizes: split sizes must be non-negative, got " + intsStr(pieces));
  } else
    pieces = splitSizes(op, requireStatic(size, op.name(), "the split dimension"));
  std::vector<Type> out;
  for (int64_t p : pieces) {
    Shape s = t.shape();
    if (op.name() == "unbind")
      s.erase(s.begin() + dim);
    else
      s[dim] = p;
    out.push_back(t.withShape(s));
  }
  return out;
}

Results splitKernel(const Op &op, In in) {
  const Tensor &t = tensorIn(op, in, 0);
  int64_t dim = normDim(attrInt(op, "dim"), t.rank());
  std::vector<int64_t> pieces;
  try {
    pieces = splitSizes(op, t.sizes()[dim]);
  } catch (const TypeInferenceError &e) {
    kernelFail(e.what());
  }
  Results out;
  int64_t at = 0;
  for (int64_t p : pieces) {
    out.emplace_back(op.name() == "unbind" ? selectView(t, dim, at) : sliceView(t, dim, at, p));
    at += p;
  }
  return out;
}

OpDef splitRow(std::string name, std::string summary, std::vector<AttrSpec> attrs) {
  return {.name = std::move(name),
          .summary = std::move(summary),
          .operands = {{"self"}},
          .attrs = std::move(attrs),
          .traits = kView,
          .infer = inferSplit,
          .kernel = splitKernel};
}

// ---- diagonal ----

struct DiagPlan {
  int64_t dim1, dim2, offset;
};

DiagPlan diagPlan(const Op &op, int64_t rank) {
  if (rank < 2)
    inferFail("diagonal: expects a tensor with at least 2 dims, got " + std::to_string(rank));
  int64_t d1 = normDim(attrInt(op, "dim1"), rank), d2 = normDim(attrInt(op, "dim2"), rank);
  if (d1 == d2)
    inferFail("diagonal: dim1 and dim2 cannot be the same dimension (" + std::to_string(d1) + ")");
  return {d1, d2, attrInt(op, "offset")};
}

template <class D> std::vector<D> diagSizes(const std::vector<D> &s, const DiagPlan &p) {
  std::vector<D> out;
  for (size_t i = 0; i < s.size(); ++i)
    if (static_cast<int64_t>(i) != p.dim1 && static_cast<int64_t>(i) != p.dim2)
      out.push_back(s[i]);
  return out;
}

DimExpr diagLength(const DimExpr &a, const DimExpr &b, int64_t offset) {
  DimExpr x = offset >= 0 ? a : a + DimExpr(offset);
  DimExpr y = offset >= 0 ? b - DimExpr(offset) : b;
  if (x.isStatic() && y.isStatic())
    return std::max<int64_t>(std::min(x.value(), y.value()), 0);
  if (x == y)
    return x;
  inferFail("diagonal: the diagonal length of dims " + a.str() + " and " + b.str() +
            " must be static");
}

Tensor diagonalKernel(const Op &op, const Tensor &t) {
  DiagPlan p = diagPlan(op, t.rank());
  int64_t n1 = t.sizes()[p.dim1], n2 = t.sizes()[p.dim2];
  int64_t len = diagLength(n1, n2, p.offset).value();
  int64_t s1 = t.strides()[p.dim1], s2 = t.strides()[p.dim2];
  int64_t offset = t.offset();
  if (len > 0)
    offset += p.offset >= 0 ? p.offset * s2 : -p.offset * s1;
  auto sizes = diagSizes(t.sizes(), p), strides = diagSizes(t.strides(), p);
  sizes.push_back(len);
  strides.push_back(s1 + s2);
  return t.view(sizes, strides, offset);
}

AttrSpec attrI(std::string name, int64_t def) {
  return {std::move(name), AttrKind::Int, Attr(def)};
}
AttrSpec attrReq(std::string name, AttrKind kind) { return {std::move(name), kind}; }

} // namespace

void registerMovementOps(OpRegistry &r) {
  r.add({.name = "reshape",
         .summary = "Tensor with the same elements in a new shape (one dim may be -1); a view when "
                    "the strides allow, else a copy",
         .operands = {{"self"}},
         .attrs = {attrReq("shape", AttrKind::Ints)},
         .traits = kView,
         .infer = inferReshape,
         .kernel = [](const Op &op, In in) { return reshapeKernel(op, in, false); }});
  r.add(
      {.name = "view",
       .summary =
           "View with a new shape (one dim may be -1); fails when the strides do not allow a view",
       .operands = {{"self"}},
       .attrs = {attrReq("shape", AttrKind::Ints)},
       .traits = kView,
       .infer = inferReshape,
       .kernel = [](const Op &op, In in) { return reshapeKernel(op, in, true); }});
  r.add({.name = "flatten",
         .summary = "Merges dims start_dim..end_dim into one (a view when possible)",
         .operands = {{"self"}},
         .attrs = {attrI("start_dim", 0), attrI("end_dim", -1)},
         .traits = kView,
         .infer = [](const Op &op) -> std::vector<Type> {
           const Type &t = self(op);
           auto [s, e] = flattenRange(op, t.rank());
           return {t.withShape(flattened(t.shape(), s, e))};
         },
         .kernel = [](const Op &op, In in) -> Results {
           const Tensor &t = tensorIn(op, in, 0);
           auto [s, e] = flattenRange(op, t.rank());
           return one(reshapeTensor(t, flattened(t.sizes(), s, e), false, op.name()));
         }});
  r.add({.name = "unflatten",
         .summary = "Splits dim into the given sizes (one may be -1)",
         .operands = {{"self"}},
         .attrs = {attrReq("dim", AttrKind::Int), attrReq("sizes", AttrKind::Ints)},
         .traits = kView,
         .infer = [](const Op &op) -> std::vector<Type> {
           const Type &t = self(op);
           if (t.rank() == 0)
             inferFail("unflatten: cannot be applied to a 0-d tensor");
           int64_t dim = normDim(attrInt(op, "dim"), t.rank());
           if (isSymbolicSize(op, "sizes")) { // as a symbolic reshape of that one dim
             auto sizes = sizeAttrDims(op, "sizes");
             if (!sizes || sizes->empty())
               inferFail("unflatten: bad symbolic sizes");
             Shape parts = symbolicReshapeShape(*sizes, {t.shape()[dim]}, "unflatten");
             return {t.withShape(unflattened(t.shape(), dim, parts))};
           }
           const auto &sizes = attrInts(op, "sizes");
           if (sizes.empty())
             inferFail("unflatten: sizes must be non-empty");
           Shape parts = inferReshapeShape(sizes, t.shape()[dim], "unflatten");
           return {t.withShape(unflattened(t.shape(), dim, parts))};
         },
         .kernel = [](const Op &op, In in) -> Results {
           const Tensor &t = tensorIn(op, in, 0);
           int64_t dim = normDim(attrInt(op, "dim"), t.rank());
           auto parts = reshapeSizes(attrInts(op, "sizes"), t.sizes()[dim], "unflatten");
           return one(reshapeTensor(t, unflattened(t.sizes(), dim, parts), true, "unflatten"));
         }});

  r.add(permuteRow("permute", "Reorders dims: result dim i is input dim dims[i]",
                   {attrReq("dims", AttrKind::Ints)}, [](const Op &op, int64_t rank) {
                     return normPermutation(attrInts(op, "dims"), rank, "permute");
                   }));
  r.add(permuteRow("transpose", "Swaps dims dim0 and dim1",
                   {attrReq("dim0", AttrKind::Int), attrReq("dim1", AttrKind::Int)},
                   [](const Op &op, int64_t rank) {
                     return transposePerm(rank, attrInt(op, "dim0"), attrInt(op, "dim1"));
                   }));
  r.add(permuteRow("t", "Transposes a tensor of at most 2 dims", {}, tPerm));
  r.add(permuteRow("movedim", "Moves dims at source to destination, others keep their order",
                   {attrReq("source", AttrKind::Ints), attrReq("destination", AttrKind::Ints)},
                   movedimPerm));

  r.add({.name = "expand",
         .summary = "Broadcast view to shape (-1 keeps a dim; new dims lead)",
         .operands = {{"self"}},
         .attrs = {attrReq("shape", AttrKind::Ints)},
         .traits = kView,
         .infer = [](const Op &op) -> std::vector<Type> {
           const Type &t = self(op);
           if (isSymbolicSize(op, "shape"))
             return {t.withShape(symbolicExpandShape(t.shape(), op))};
           return {t.withShape(expandShape(t.shape(), attrInts(op, "shape"), "expand"))};
         },
         .kernel = [](const Op &op, In in) -> Results {
           return one(expandKernel(tensorIn(op, in, 0), attrInts(op, "shape"), "expand"));
         }});
  r.add({.name = "expand_as",
         .summary = "Broadcast view of self to other's shape",
         .operands = {{"self"}, {"other"}},
         .traits = kView,
         .infer = [](const Op &op) -> std::vector<Type> {
           const Type &t = self(op);
           const Shape &target = tensorOperand(op, 1).shape();
           std::vector<int64_t> sizes;
           // Check static dims through expandShape; symbolic target dims are kept as they are.
           for (const DimExpr &d : target)
             sizes.push_back(d.staticValue().value_or(-1));
           size_t lead = target.size() - std::min(target.size(), t.shape().size());
           for (size_t i = 0; i < lead; ++i)
             if (sizes[i] < 0)
               sizes[i] = 1;
           expandShape(t.shape(), sizes, "expand_as");
           return {t.withShape(target)};
         },
         .kernel = [](const Op &op, In in) -> Results {
           return one(expandKernel(tensorIn(op, in, 0), tensorIn(op, in, 1).sizes(), "expand_as"));
         }});

  r.add({.name = "squeeze",
         .summary = "Removes size-1 dims: those listed in dim, or all when dim is absent",
         .operands = {{"self"}},
         .attrs = {optionalAttr("dim", AttrKind::Ints)},
         .traits = kView,
         .infer = [](const Op &op) -> std::vector<Type> {
           const Type &t = self(op);
           auto mask = squeezeMask(op, t.shape());
           Shape s;
           for (size_t i = 0; i < mask.size(); ++i)
             if (!mask[i])
               s.push_back(t.shape()[i]);
           return {t.withShape(s)};
         },
         .kernel = [](const Op &op, In in) -> Results {
           const Tensor &t = tensorIn(op, in, 0);
           auto mask = squeezeMask(op, tensorOperand(op, 0).shape());
           std::vector<int64_t> sizes, strides;
           for (size_t i = 0; i < mask.size(); ++i) {
             if (mask[i])
               continue;
             sizes.push_back(t.sizes()[i]);
             strides.push_back(t.strides()[i]);
           }
           return one(t.view(sizes, strides, t.offset()));
         }});
  r.add({.name = "unsqueeze",
         .summary = "Inserts a size-1 dim at dim (in [-rank-1, rank])",
         .operands = {{"self"}},
         .attrs = {attrReq("dim", AttrKind::Int)},
         .traits = kView,
         .infer = [](const Op &op) -> std::vector<Type> {
           const Type &t = self(op);
           int64_t dim = normDim(attrInt(op, "dim"), t.rank() + 1);
           Shape s = t.shape();
           s.insert(s.begin() + dim, DimExpr(1));
           return {t.withShape(s)};
         },
         .kernel = [](const Op &op, In in) -> Results {
           const Tensor &t = tensorIn(op, in, 0);
           return one(unsqueezeView(t, normDim(attrInt(op, "dim"), t.rank() + 1)));
         }});

  r.add({.name = "slice",
         .summary = "Elements start:end:step along dim (Python clamping; step > 0)",
         .operands = {{"self"}},
         .attrs = {attrI("dim", 0), attrI("start", 0), attrI("end", INT64_MAX), attrI("step", 1)},
         .traits = kView,
         .infer = inferSlice,
         .kernel = sliceKernel});
  r.add({.name = "select",
         .summary = "The slice at index along dim, removing dim (negative index from the end)",
         .operands = {{"self"}},
         .attrs = {attrReq("dim", AttrKind::Int), attrReq("index", AttrKind::Int)},
         .traits = kView,
         .infer = inferSelect,
         .kernel = [](const Op &op, In in) -> Results {
           const Tensor &t = tensorIn(op, in, 0);
           int64_t dim = normDim(attrInt(op, "dim"), t.rank());
           int64_t index = checkedIndex("select", attrInt(op, "index"), t.sizes()[dim], dim);
           return one(selectView(t, dim, index));
         }});
  r.add({.name = "narrow",
         .summary = "length elements along dim from start (negative start from the end)",
         .operands = {{"self"}},
         .attrs = {attrReq("dim", AttrKind::Int), attrReq("start", AttrKind::Int),
                   attrReq("length", AttrKind::Int)},
         .traits = kView,
         .infer = inferNarrow,
         .kernel = narrowKernel});

  r.add(splitRow("split", "Views of split_size elements along dim (the last may be smaller)",
                 {attrReq("split_size", AttrKind::Int), attrI("dim", 0)}));
  r.add(splitRow("split_with_sizes", "Views of the given sizes along dim",
                 {attrReq("split_sizes", AttrKind::Ints), attrI("dim", 0)}));
  r.add(splitRow("chunk", "At most `chunks` equal views along dim (the last may be smaller)",
                 {attrReq("chunks", AttrKind::Int), attrI("dim", 0)}));
  r.add(splitRow("unbind", "Every slice along dim, each without dim", {attrI("dim", 0)}));

  r.add({.name = "diagonal",
         .summary = "View of the diagonal of dims dim1, dim2 (offset > 0 above), appended last",
         .operands = {{"self"}},
         .attrs = {attrI("offset", 0), attrI("dim1", 0), attrI("dim2", 1)},
         .traits = kView,
         .infer = [](const Op &op) -> std::vector<Type> {
           const Type &t = self(op);
           DiagPlan p = diagPlan(op, t.rank());
           Shape s = diagSizes(t.shape(), p);
           s.push_back(diagLength(t.shape()[p.dim1], t.shape()[p.dim2], p.offset));
           return {t.withShape(s)};
         },
         .kernel = [](const Op &op, In in) -> Results {
           return one(diagonalKernel(op, tensorIn(op, in, 0)));
         }});

  auto sameType = [](const Op &op) -> std::vector<Type> { return {self(op)}; };
  r.add({.name = "contiguous",
         .summary = "self if already contiguous, else a contiguous copy (may alias self)",
         .operands = {{"self"}},
         .traits = kView,
         .infer = sameType,
         .kernel = [](const Op &op, In in) -> Results {
           const Tensor &t = tensorIn(op, in, 0);
           return one(t.isContiguous() ? t : t.contiguousCopy());
         }});
  r.add({.name = "clone",
         .summary = "A fresh copy",
         .operands = {{"self"}},
         .infer = sameType,
         .kernel = [](const Op &op, In in) -> Results {
           return one(tensorIn(op, in, 0).contiguousCopy());
         }});
  r.add({.name = "alias",
         .summary = "A view of the whole of self",
         .operands = {{"self"}},
         .traits = kView,
         .infer = sameType,
         .kernel = [](const Op &op, In in) -> Results {
           const Tensor &t = tensorIn(op, in, 0);
           return one(t.view(t.sizes(), t.strides(), t.offset()));
         }});

  registerCombineOps(r);
}

} // namespace xjit
