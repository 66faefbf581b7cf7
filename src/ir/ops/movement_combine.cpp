// Copying data-movement ops: cat, stack, pad, repeat/tile, flip, roll, triu/tril, masked_fill. Each
// returns a fresh contiguous tensor.
#include "ops/movement_util.h"
#include "xjit/ir/sym_attr.h"

#include <algorithm>
#include <optional>

namespace xjit::ops::mv {
namespace {

using Results = std::vector<RtValue>;
using In = std::span<const RtValue>;

Results one(Tensor t) { return {RtValue(std::move(t))}; }

// ---- cat / stack ----

// torch.cat still skips 1-d empty tensors, whatever the other tensors' shapes (legacy).
bool legacyEmpty(const Type &t) {
  return t.rank() == 1 && t.shape()[0].isStatic() && t.shape()[0].value() == 0;
}
bool legacyEmpty(const Tensor &t) { return t.rank() == 1 && t.sizes()[0] == 0; }

DType promotedDType(const Op &op) {
  if (op.numOperands() == 0) inferFail(op.name() + ": expects a non-empty list of tensors");
  DType d = tensorOperand(op, 0).dtype();
  for (size_t i = 1; i < op.numOperands(); ++i)
    d = promoteTypes(d, tensorOperand(op, i).dtype());
  return d;
}

// Merges a dim of another operand into `acc`: static dims must agree; a symbolic dim is assumed
// equal to the other (the frontend guards it) and a static one is preferred.
void mergeDim(DimExpr &acc, const DimExpr &d, const std::string &what) {
  if (acc.isStatic() && d.isStatic() && acc.value() != d.value()) inferFail(what);
  if (!acc.isStatic() && d.isStatic()) acc = d;
}

std::vector<Type> inferCat(const Op &op) {
  DType dtype = promotedDType(op);
  const Type *first = nullptr;
  std::optional<Shape> out;
  int64_t dim = 0;
  for (size_t i = 0; i < op.numOperands(); ++i) {
    const Type &t = tensorOperand(op, i);
    if (legacyEmpty(t)) continue;
    if (t.rank() == 0)
      inferFail("cat: zero-dimensional tensor (at position " + std::to_string(i) +
                ") cannot be concatenated");
    if (!first) {
      first = &t;
      dim = normDim(attrInt(op, "dim"), t.rank());
      out = t.shape();
      continue;
    }
    if (t.rank() != first->rank())
      inferFail("cat: tensors must have the same number of dimensions: got " +
                std::to_string(first->rank()) + " and " + std::to_string(t.rank()));
    for (int64_t d = 0; d < t.rank(); ++d) {
      if (d == dim) {
        (*out)[d] = (*out)[d] + t.shape()[d];
        continue;
      }
      mergeDim((*out)[d], t.shape()[d],
               "cat: sizes of tensors must match except in dimension " + std::to_string(dim) +
                   ". Expected size " + (*out)[d].str() + " but got size " + t.shape()[d].str() +
                   " for tensor number " + std::to_string(i) + " in the list");
    }
  }
  const Type &t0 = tensorOperand(op, 0);
  if (!first) return {t0.withDType(dtype).withShape({0})};
  return {first->withDType(dtype).withShape(*out)};
}

Results catKernel(const Op &op, In in) {
  std::vector<Tensor> parts;
  for (size_t i = 0; i < in.size(); ++i)
    parts.push_back(tensorIn(op, in, i));
  int64_t dim = 0;
  std::vector<int64_t> sizes = catSizes(parts, attrInt(op, "dim"), &dim);
  Tensor out = Tensor::empty(resultDType(op), sizes);
  catInto(parts, dim, out);
  return one(out);
}

std::vector<Type> inferStack(const Op &op) {
  DType dtype = promotedDType(op);
  const Type &t0 = tensorOperand(op, 0);
  Shape s = t0.shape();
  for (size_t i = 1; i < op.numOperands(); ++i) {
    const Type &t = tensorOperand(op, i);
    if (t.rank() != t0.rank())
      inferFail("stack: expects each tensor to be equal size, but got " + t0.str() +
                " at entry 0 and " + t.str() + " at entry " + std::to_string(i));
    for (int64_t d = 0; d < t.rank(); ++d)
      mergeDim(s[d], t.shape()[d],
               "stack: expects each tensor to be equal size, but got " + t0.str() +
                   " at entry 0 and " + t.str() + " at entry " + std::to_string(i));
  }
  int64_t dim = normDim(attrInt(op, "dim"), t0.rank() + 1);
  s.insert(s.begin() + dim, DimExpr(static_cast<int64_t>(op.numOperands())));
  return {t0.withDType(dtype).withShape(s)};
}

Results stackKernel(const Op &op, In in) {
  std::vector<Tensor> parts;
  for (size_t i = 0; i < in.size(); ++i)
    parts.push_back(tensorIn(op, in, i));
  int64_t dim = 0;
  std::vector<int64_t> sizes = stackSizes(parts, attrInt(op, "dim"), &dim);
  Tensor out = Tensor::empty(resultDType(op), sizes);
  stackInto(parts, dim, out);
  return one(out);
}

} // namespace

// ---- cat ----

std::vector<int64_t> catSizes(std::vector<Tensor> &parts, int64_t dimAttr, int64_t *dim) {
  std::erase_if(parts, [](const Tensor &t) { return legacyEmpty(t); });
  if (parts.empty()) return {0};
  *dim = normDim(dimAttr, parts[0].rank());
  std::vector<int64_t> sizes = parts[0].sizes();
  sizes[size_t(*dim)] = 0;
  for (const Tensor &p : parts) {
    for (int64_t d = 0; d < p.rank(); ++d)
      if (d != *dim && (p.rank() != parts[0].rank() || p.sizes()[size_t(d)] != sizes[size_t(d)]))
        kernelFail("cat: sizes of tensors must match except in dimension " + std::to_string(*dim));
    sizes[size_t(*dim)] += p.sizes()[size_t(*dim)];
  }
  return sizes;
}

void catInto(std::span<const Tensor> parts, int64_t dim, const Tensor &out, CopyPart copy) {
  int64_t at = 0;
  for (const Tensor &p : parts) {
    Tensor slice = sliceView(out, dim, at, p.sizes()[size_t(dim)]);
    copy ? copy(slice, p) : slice.copyFrom(p);
    at += p.sizes()[size_t(dim)];
  }
}

std::vector<int64_t> stackSizes(std::span<const Tensor> parts, int64_t dimAttr, int64_t *dim) {
  const Tensor &t0 = parts[0];
  *dim = normDim(dimAttr, t0.rank() + 1);
  for (size_t i = 1; i < parts.size(); ++i)
    if (parts[i].sizes() != t0.sizes())
      kernelFail("stack: expects each tensor to be equal size (entry " + std::to_string(i) + ")");
  std::vector<int64_t> sizes = t0.sizes();
  sizes.insert(sizes.begin() + *dim, static_cast<int64_t>(parts.size()));
  return sizes;
}

void stackInto(std::span<const Tensor> parts, int64_t dim, const Tensor &out, CopyPart copy) {
  for (size_t i = 0; i < parts.size(); ++i) {
    Tensor slice = selectView(out, dim, static_cast<int64_t>(i));
    copy ? copy(slice, parts[i]) : slice.copyFrom(parts[i]);
  }
}

// ---- pad ----

PadMode padMode(const Op &op) {
  const std::string &m = attrStr(op, "mode");
  if (m == "constant") return PadMode::Constant;
  if (m == "reflect") return PadMode::Reflect;
  if (m == "replicate") return PadMode::Replicate;
  if (m == "circular") return PadMode::Circular;
  inferFail("pad: unknown mode '" + m + "' (expected constant, reflect, replicate or circular)");
}

std::vector<std::pair<int64_t, int64_t>> padAmounts(const Op &op, int64_t rank) {
  const auto &pad = attrInts(op, "pad");
  if (pad.size() % 2 != 0) inferFail("pad: padding length must be divisible by 2");
  if (static_cast<int64_t>(pad.size()) > 2 * rank)
    inferFail("pad: padding length " + std::to_string(pad.size()) +
              " is too large for a tensor of rank " + std::to_string(rank));
  std::vector<std::pair<int64_t, int64_t>> out(static_cast<size_t>(rank), {0, 0});
  for (size_t k = 0; k < pad.size() / 2; ++k)
    out[rank - 1 - k] = {pad[2 * k], pad[2 * k + 1]};
  return out;
}

namespace {

// Checks one padded dim of static size n; returns an error message or "".
std::string checkPad(PadMode mode, int64_t n, int64_t before, int64_t after, int64_t dim) {
  std::string where = " (dim " + std::to_string(dim) + " of size " + std::to_string(n) + ", pad (" +
                      std::to_string(before) + ", " + std::to_string(after) + "))";
  if (n + before + after < 0) return "pad: the padded size would be negative" + where;
  if (before == 0 && after == 0) return "";
  if (mode == PadMode::Reflect && (before >= n || after >= n))
    return "pad: padding size should be less than the corresponding input dimension" + where;
  if (mode == PadMode::Replicate && n == 0)
    return "pad: cannot replicate-pad an empty dimension" + where;
  if (mode == PadMode::Circular && (before > n || after > n))
    return "pad: padding value causes wrapping around more than once" + where;
  return "";
}

std::vector<Type> inferPad(const Op &op) {
  const Type &t = tensorOperand(op, 0);
  PadMode mode = padMode(op);
  auto amounts = padAmounts(op, t.rank());
  Shape s = t.shape();
  for (int64_t d = 0; d < t.rank(); ++d) {
    auto [b, a] = amounts[d];
    if (auto n = s[d].staticValue())
      if (auto why = checkPad(mode, *n, b, a, d); !why.empty()) inferFail(why);
    s[d] = s[d] + DimExpr(b + a);
  }
  return {t.withShape(s)};
}

int64_t padSource(PadMode mode, int64_t j, int64_t n) {
  switch (mode) {
  case PadMode::Constant: return j;
  case PadMode::Reflect: return j < 0 ? -j : (j >= n ? 2 * (n - 1) - j : j);
  case PadMode::Replicate: return std::clamp<int64_t>(j, 0, n - 1);
  case PadMode::Circular: return ((j % n) + n) % n;
  }
  return j;
}

Results padKernel(const Op &op, In in) {
  const Tensor &t = tensorIn(op, in, 0);
  PadMode mode = padMode(op);
  auto amounts = padAmounts(op, t.rank());
  std::vector<int64_t> sizes = t.sizes();
  for (int64_t d = 0; d < t.rank(); ++d) {
    auto [b, a] = amounts[d];
    if (auto why = checkPad(mode, sizes[d], b, a, d); !why.empty()) kernelFail(why);
    sizes[d] += b + a;
  }
  bool growsOnly = std::all_of(amounts.begin(), amounts.end(),
                               [](const auto &ba) { return ba.first >= 0 && ba.second >= 0; });
  if (mode == PadMode::Constant && growsOnly) {
    // Fill, then one strided copy of the input into the interior: element by element through
    // remap, a [1,48,64,64] pad took 10 ms, three quarters of EfficientNet's run time (its
    // ZeroPad2d before each strided depthwise conv runs here).
    Tensor out = Tensor::empty(t.dtype(), sizes);
    double value = attrFloat(op, "value");
    if (value != 0.0) { // empty() is zero-filled
      Tensor fill = Tensor::empty(t.dtype(), {1});
      fill.setDouble(0, value);
      out.copyFrom(fill.view(sizes, std::vector<int64_t>(sizes.size(), 0), 0));
    }
    int64_t offset = 0;
    for (size_t d = 0; d < sizes.size(); ++d)
      offset += amounts[d].first * out.strides()[d];
    if (t.numel() > 0) out.view(t.sizes(), out.strides(), offset).copyFrom(t);
    return one(out);
  }
  return one(remap(
      t, sizes,
      [&](const std::vector<int64_t> &idx, std::vector<int64_t> &src) {
        for (size_t d = 0; d < idx.size(); ++d) {
          int64_t n = t.sizes()[d];
          int64_t j = padSource(mode, idx[d] - amounts[d].first, n);
          if (j < 0 || j >= n) return false;
          src[d] = j;
        }
        return true;
      },
      Scalar::fromDouble(attrFloat(op, "value"))));
}

// ---- repeat / tile ----

std::vector<int64_t> repeatsOf(const Op &op, int64_t rank) {
  std::vector<int64_t> reps = attrInts(op, op.name() == "tile" ? "dims" : "repeats");
  if (op.name() == "tile" && static_cast<int64_t>(reps.size()) < rank)
    reps.insert(reps.begin(), rank - static_cast<int64_t>(reps.size()), 1);
  if (static_cast<int64_t>(reps.size()) < rank)
    inferFail("repeat: number of dimensions of repeat dims (" + std::to_string(reps.size()) +
              ") can not be smaller than number of dimensions of tensor (" + std::to_string(rank) +
              ")");
  for (int64_t r : reps)
    if (r < 0) inferFail(op.name() + ": repeats must be non-negative, got " + std::to_string(r));
  return reps;
}

template <class D, class R>
std::vector<D> repeatedSizes(const std::vector<D> &sizes, const std::vector<R> &reps) {
  size_t lead = reps.size() - sizes.size();
  std::vector<D> out;
  for (size_t i = 0; i < reps.size(); ++i)
    out.push_back(i < lead ? D(reps[i]) : sizes[i - lead] * D(reps[i]));
  return out;
}

// repeat with repeats over shape symbols: the result dims are products of expressions.
Shape symbolicRepeats(const Op &op, const Type &t) {
  auto reps = sizeAttrDims(op, "repeats");
  if (!reps) inferFail("repeat: bad symbolic repeats");
  if (static_cast<int64_t>(reps->size()) < t.rank())
    inferFail("repeat: number of dimensions of repeat dims (" + std::to_string(reps->size()) +
              ") can not be smaller than number of dimensions of tensor (" +
              std::to_string(t.rank()) + ")");
  for (const DimExpr &r : *reps)
    if (r.isStatic() && r.value() < 0)
      inferFail("repeat: repeats must be non-negative, got " + shapeStr(*reps));
  return repeatedSizes(t.shape(), *reps);
}

OpDef repeatRow(std::string name, std::string summary, std::string attr) {
  return {.name = std::move(name),
          .summary = std::move(summary),
          .operands = {{"self"}},
          .attrs = {{std::move(attr), AttrKind::Ints}},
          .infer = [](const Op &op) -> std::vector<Type> {
            const Type &t = tensorOperand(op, 0);
            if (isSymbolicSize(op, "repeats")) return {t.withShape(symbolicRepeats(op, t))};
            return {t.withShape(repeatedSizes(t.shape(), repeatsOf(op, t.rank())))};
          },
          .kernel = [](const Op &op, In in) -> Results {
            const Tensor &t = tensorIn(op, in, 0);
            auto reps = repeatsOf(op, t.rank());
            size_t lead = reps.size() - static_cast<size_t>(t.rank());
            return one(remap(t, repeatedSizes(t.sizes(), reps),
                             [&](const std::vector<int64_t> &idx, std::vector<int64_t> &src) {
                               for (size_t d = 0; d < src.size(); ++d)
                                 src[d] = idx[lead + d] % t.sizes()[d];
                               return true;
                             }));
          }};
}

// ---- flip / roll ----

std::vector<bool> flipMask(const Op &op, int64_t rank) {
  std::vector<bool> mask(static_cast<size_t>(std::max<int64_t>(rank, 1)), false);
  for (int64_t d : attrInts(op, "dims")) {
    int64_t n = normDim(d, rank);
    if (mask[n]) inferFail("flip: dims has duplicates (dim " + std::to_string(d) + ")");
    mask[n] = true;
  }
  return mask;
}

std::vector<int64_t> rollShifts(const Op &op, int64_t rank) {
  const auto &shifts = attrInts(op, "shifts");
  const auto &dims = attrInts(op, "dims");
  if (dims.empty()) {
    if (shifts.size() != 1)
      inferFail("roll: shifts must have one element when dims is empty, got " +
                std::to_string(shifts.size()));
    return {};
  }
  if (shifts.size() != dims.size())
    inferFail("roll: shifts and dimensions must align: shifts has " +
              std::to_string(shifts.size()) + " elements, dims has " + std::to_string(dims.size()));
  std::vector<int64_t> perDim(static_cast<size_t>(std::max<int64_t>(rank, 1)), 0);
  for (size_t i = 0; i < dims.size(); ++i)
    perDim[normDim(dims[i], rank)] += shifts[i];
  return perDim;
}

int64_t wrap(int64_t i, int64_t n) { return ((i % n) + n) % n; }

Results rollKernel(const Op &op, In in) {
  const Tensor &t = tensorIn(op, in, 0);
  auto shifts = rollShifts(op, t.rank());
  int64_t numel = t.numel();
  if (shifts.empty()) { // roll the flattened tensor, keep the shape
    Tensor out = Tensor::empty(t.dtype(), t.sizes());
    int64_t s = attrInts(op, "shifts")[0];
    for (int64_t i = 0; i < numel; ++i)
      copyElement(out, i, t, wrap(i - s, numel));
    return one(out);
  }
  // Per dim, the input's [0, n-s) lands at [s, n) and [n-s, n) at [0, s): 2^k block copies for
  // k rolled dims, each one strided copyFrom (element by element through remap, Swin's cyclic
  // shift of a [1,32,32,48] tensor took 1.6 ms, 40% of its run time).
  Tensor out = Tensor::empty(t.dtype(), t.sizes());
  if (numel == 0) return one(out);
  size_t rank = static_cast<size_t>(t.rank());
  std::vector<size_t> rolled;
  std::vector<int64_t> s(rank, 0);
  for (size_t d = 0; d < rank; ++d) {
    s[d] = wrap(shifts[d], t.sizes()[d]);
    if (s[d] != 0) rolled.push_back(d);
  }
  for (uint64_t piece = 0; piece < (uint64_t{1} << rolled.size()); ++piece) {
    std::vector<int64_t> sizes = t.sizes();
    int64_t from = t.offset(), to = out.offset();
    for (size_t k = 0; k < rolled.size(); ++k) {
      size_t d = rolled[k];
      int64_t n = t.sizes()[d];
      bool wrapped = (piece >> k) & 1; // the tail [n-s, n) that moves to the front
      sizes[d] = wrapped ? s[d] : n - s[d];
      from += (wrapped ? n - s[d] : 0) * t.strides()[d];
      to += (wrapped ? 0 : s[d]) * out.strides()[d];
    }
    out.view(sizes, out.strides(), to).copyFrom(t.view(sizes, t.strides(), from));
  }
  return one(out);
}

// ---- triu / tril ----

OpDef triangleRow(std::string name, std::string summary, bool upper) {
  return {.name = std::move(name),
          .summary = std::move(summary),
          .operands = {{"self"}},
          .attrs = {{"diagonal", AttrKind::Int, Attr(0)}},
          .infer = [](const Op &op) -> std::vector<Type> {
            const Type &t = tensorOperand(op, 0);
            if (t.rank() < 2)
              inferFail(op.name() + ": input tensor must have at least 2 dimensions, got " +
                        std::to_string(t.rank()));
            return {t};
          },
          .kernel = [upper](const Op &op, In in) -> Results {
            const Tensor &t = tensorIn(op, in, 0);
            int64_t diag = attrInt(op, "diagonal");
            size_t r = static_cast<size_t>(t.rank());
            return one(remap(t, t.sizes(),
                             [&](const std::vector<int64_t> &idx, std::vector<int64_t> &src) {
                               int64_t k = idx[r - 1] - idx[r - 2];
                               src = idx;
                               return upper ? k >= diag : k <= diag;
                             }));
          }};
}

// ---- masked_fill ----

// The fill value comes from the optional `value` operand (a number or a 0-d tensor) or else the
// `value` attribute.
Scalar fillValue(const Op &op, In in, size_t operand) {
  if (hasInput(in, operand)) return Scalar::fromRt(in[operand], op.name());
  const Attr *a = op.attrOrNull("value");
  if (!a) kernelFail(op.name() + ": needs a value (operand or attribute)");
  return Scalar::fromAttr(*a);
}

void checkFillValue(const Op &op, size_t operand) {
  if (hasOperand(op, operand)) {
    const Type &v = op.operand(operand)->type();
    if (!(v.isScalar() || (v.isTensor() && v.rank() == 0)))
      inferFail(op.name() + ": value must be a number or a 0-dimensional tensor, got " + v.str());
  } else if (!op.attrOrNull("value")) {
    inferFail(op.name() + ": needs a value (operand or attribute)");
  }
}

std::vector<Type> inferMaskedFill(const Op &op) {
  const Type &t = tensorOperand(op, 0);
  const Type &mask = tensorOperand(op, 1);
  if (mask.dtype() != DType::Bool)
    inferFail("masked_fill: expected a bool mask, got " + mask.str());
  checkFillValue(op, 2);
  return {t.withShape(broadcastShapes(t.shape(), mask.shape()))};
}

Results maskedFillKernel(const Op &op, In in) {
  const Tensor &t = tensorIn(op, in, 0);
  const Tensor &mask = tensorIn(op, in, 1);
  Scalar value = fillValue(op, in, 2);
  auto sizes = broadcastSizes(t.sizes(), mask.sizes());
  Tensor te = expandTo(t, sizes), me = expandTo(mask, sizes);
  Tensor out = Tensor::empty(t.dtype(), sizes);
  for (int64_t i = 0, n = out.numel(); i < n; ++i) {
    if (me.getInt(i))
      setScalar(out, i, value);
    else
      copyElement(out, i, te, i);
  }
  return one(out);
}

} // namespace

void registerCombineOps(OpRegistry &r) {
  r.add({.name = "cat",
         .summary = "Concatenates tensors along dim (dtypes promoted; 1-d empty tensors skipped)",
         .operands = {{.name = "tensors", .variadic = true}},
         .attrs = {{"dim", AttrKind::Int, Attr(0)}},
         .infer = inferCat,
         .kernel = catKernel});
  r.add({.name = "stack",
         .summary = "Stacks equal-shaped tensors along a new dim",
         .operands = {{.name = "tensors", .variadic = true}},
         .attrs = {{"dim", AttrKind::Int, Attr(0)}},
         .infer = inferStack,
         .kernel = stackKernel});
  r.add({.name = "pad",
         .summary = "Pads (or crops, when negative) trailing dims; pad lists (before, after) pairs "
                    "from the last dim; mode constant, reflect, replicate or circular",
         .operands = {{"self"}},
         .attrs = {{"pad", AttrKind::Ints},
                   {"mode", AttrKind::Str, Attr("constant")},
                   {"value", AttrKind::Float, Attr(0.0)}},
         .infer = inferPad,
         .kernel = padKernel});
  r.add(
      repeatRow("repeat", "Tiles self repeats[i] times along each dim (new dims lead)", "repeats"));
  r.add(repeatRow("tile", "repeat, with dims padded with leading 1s to self's rank", "dims"));
  r.add({.name = "flip",
         .summary = "Reverses the order of elements along dims",
         .operands = {{"self"}},
         .attrs = {{"dims", AttrKind::Ints}},
         .infer = [](const Op &op) -> std::vector<Type> {
           const Type &t = tensorOperand(op, 0);
           flipMask(op, t.rank());
           return {t};
         },
         .kernel = [](const Op &op, In in) -> Results {
           const Tensor &t = tensorIn(op, in, 0);
           auto mask = flipMask(op, t.rank());
           return one(remap(t, t.sizes(), [&](const std::vector<int64_t> &idx, auto &src) {
             for (size_t d = 0; d < idx.size(); ++d)
               src[d] = mask[d] ? t.sizes()[d] - 1 - idx[d] : idx[d];
             return true;
           }));
         }});
  r.add({.name = "roll",
         .summary = "Rotates elements by shifts along dims (dims empty: the flattened tensor)",
         .operands = {{"self"}},
         .attrs = {{"shifts", AttrKind::Ints}, {"dims", AttrKind::Ints, Attr(Attr::Ints{})}},
         .infer = [](const Op &op) -> std::vector<Type> {
           const Type &t = tensorOperand(op, 0);
           rollShifts(op, t.rank());
           return {t};
         },
         .kernel = rollKernel});
  r.add(triangleRow(
      "triu",
      "Keeps elements on and above the diagonal-th diagonal of the last two dims, zeroes the rest",
      true));
  r.add(triangleRow(
      "tril",
      "Keeps elements on and below the diagonal-th diagonal of the last two dims, zeroes the rest",
      false));
  r.add({.name = "masked_fill",
         .summary = "self with value where the (broadcast) bool mask is true; value is the "
                    "optional operand (number or 0-d tensor) or the attribute",
         .operands = {{"self"}, {"mask"}, {.name = "value", .optional = true}},
         .attrs = {numberAttr("value", true)},
         // Elementwise over the broadcast of self and mask: native kernels fuse it (attention
         // masks) instead of running this reference kernel.
         .traits = kElementwise,
         .infer = inferMaskedFill,
         .kernel = maskedFillKernel});
}

} // namespace xjit::ops::mv
