#include "ops/movement_util.h"

#include <algorithm>
#include <climits>

namespace xjit::ops::mv {

int64_t requireStatic(const DimExpr &d, std::string_view opName, std::string_view what) {
  if (!d.isStatic())
    inferFail(std::string(opName) + ": " + std::string(what) + " must be static, got " + d.str());
  return d.value();
}

Shape dropDim(const Shape &shape, int64_t dim) {
  Shape out = shape;
  out.erase(out.begin() + dim);
  return out;
}

std::vector<int64_t> normPermutation(const std::vector<int64_t> &dims, int64_t rank,
                                     std::string_view opName) {
  if (static_cast<int64_t>(dims.size()) != rank)
    inferFail(std::string(opName) + ": number of dims (" + std::to_string(dims.size()) +
              ") does not match the tensor's rank " + std::to_string(rank));
  std::vector<int64_t> perm;
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (int64_t d : dims) {
    int64_t n = normDim(d, rank);
    if (rank > 0 && seen[static_cast<size_t>(n)])
      inferFail(std::string(opName) + ": dim " + std::to_string(d) + " repeats");
    if (rank > 0)
      seen[static_cast<size_t>(n)] = true;
    perm.push_back(n);
  }
  return perm;
}

Shape inferReshapeShape(const std::vector<int64_t> &target, const DimExpr &numel,
                        std::string_view opName) {
  std::string name(opName);
  int64_t known = 1;
  int inferIdx = -1;
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i] == -1) {
      if (inferIdx >= 0)
        inferFail(name + ": only one dimension can be inferred (-1)");
      inferIdx = static_cast<int>(i);
    } else if (target[i] < 0) {
      inferFail(name + ": invalid shape dimension " + std::to_string(target[i]));
    } else {
      known *= target[i];
    }
  }
  Shape out(target.begin(), target.end());
  auto mismatch = [&] {
    std::string s = "[";
    for (size_t i = 0; i < target.size(); ++i)
      s += (i ? "," : "") + std::to_string(target[i]);
    inferFail(name + ": shape " + s + "] is invalid for input of size " + numel.str());
  };
  if (inferIdx >= 0) {
    // -1 with zero known elements is ambiguous (torch rejects it too).
    if (known == 0)
      mismatch();
    DimExpr rest = numel.mod(known);
    if (rest.isStatic() && rest.value() != 0)
      mismatch();
    out[static_cast<size_t>(inferIdx)] = numel.floorDiv(known);
  } else if (numel.isStatic() && numel.value() != known) {
    mismatch();
  }
  return out;
}

AttrSpec optionalAttr(std::string name, AttrKind kind) {
  return {.name = std::move(name), .kind = kind, .optional = true};
}

AttrSpec numberAttr(std::string name, bool optional) {
  return {.name = std::move(name), .kind = AttrKind::Float, .optional = optional, .anyKind = true};
}

SliceRange resolveSlice(const DimExpr &size, int64_t start, int64_t end, int64_t step) {
  if (size.isStatic()) {
    auto [s, len] = resolveSlice(size.value(), start, end, step);
    return {s, len};
  }
  // Symbolic: a bound is taken literally (or from the end when negative); INT64_MAX and other ends
  // past any plausible size mean "to the end".
  DimExpr s = start >= 0 ? DimExpr(start) : size + DimExpr(start);
  DimExpr e = end == INT64_MAX ? size : (end >= 0 ? DimExpr(end) : size + DimExpr(end));
  if (start >= 0 && end >= 0 && end != INT64_MAX && end <= start)
    return {s, 0};
  DimExpr len = step == 1 ? e - s : (e - s + DimExpr(step - 1)).floorDiv(step);
  return {s, len};
}

bool sliceAssumptionHolds(int64_t size, int64_t start, int64_t end) {
  if (start >= 0 && end >= 0 && end != INT64_MAX && end <= start)
    return true; // always empty
  int64_t s = start >= 0 ? start : size + start;
  int64_t e = end == INT64_MAX ? size : (end >= 0 ? end : size + end);
  return 0 <= s && s <= e && e <= size;
}

std::pair<int64_t, int64_t> resolveSlice(int64_t size, int64_t start, int64_t end, int64_t step) {
  if (start < 0)
    start += size;
  if (end < 0)
    end += size;
  start = std::clamp<int64_t>(start, 0, size);
  end = std::clamp<int64_t>(end, start, size);
  return {start, (end - start + step - 1) / step};
}

const Tensor &tensorIn(const Op &op, std::span<const RtValue> in, size_t i) {
  if (i >= in.size() || !in[i].isTensor())
    kernelFail(op.name() + ": operand " + std::to_string(i) + " must be a tensor, got " +
               (i < in.size() ? in[i].kindName() : "nothing"));
  return in[i].tensor();
}

bool hasOperand(const Op &op, size_t i) {
  return i < op.numOperands() && op.operand(i)->type().kind() != TypeKind::None;
}

bool hasInput(std::span<const RtValue> in, size_t i) { return i < in.size() && !in[i].isNone(); }

Scalar Scalar::fromDouble(double v) { return {DTypeCategory::Floating, v, 0}; }
Scalar Scalar::fromInt(int64_t v) { return {DTypeCategory::Integer, static_cast<double>(v), v}; }
Scalar Scalar::fromBool(bool v) { return {DTypeCategory::Bool, v ? 1.0 : 0.0, v ? 1 : 0}; }

Scalar Scalar::fromAttr(const Attr &a) {
  switch (a.kind()) {
  case AttrKind::Int:
    return fromInt(a.asInt());
  case AttrKind::Bool:
    return fromBool(a.asBool());
  case AttrKind::Float:
    return fromDouble(a.asFloat());
  default:
    throw KernelError("expected a number attribute, got " + a.str());
  }
}

Scalar Scalar::fromRt(const RtValue &v, std::string_view opName) {
  if (v.isBool())
    return fromBool(v.toBool());
  if (v.isInt())
    return fromInt(v.toInt());
  if (v.isFloat())
    return fromDouble(v.toDouble());
  if (v.isTensor()) {
    const Tensor &t = v.tensor();
    if (t.numel() != 1)
      kernelFail(std::string(opName) + ": value must be a scalar or a one-element tensor, got " +
                 std::to_string(t.numel()) + " elements");
    if (isFloating(t.dtype()))
      return fromDouble(t.getDouble(0));
    if (t.dtype() == DType::Bool)
      return fromBool(t.getInt(0) != 0);
    return fromInt(t.getInt(0));
  }
  kernelFail(std::string(opName) + ": value must be a number, got " + v.kindName());
}

// Tensor::setDouble converts like a C cast (NaN -> 0, saturating), as torch's fill does.
void setScalar(const Tensor &t, int64_t linear, const Scalar &s) {
  if (s.category == DTypeCategory::Floating)
    t.setDouble(linear, s.f);
  else
    t.setInt(linear, s.i);
}

void fill(const Tensor &t, const Scalar &s) {
  for (int64_t i = 0, n = t.numel(); i < n; ++i)
    setScalar(t, i, s);
}

void copyElement(const Tensor &dst, int64_t di, const Tensor &src, int64_t si) {
  if (isFloating(src.dtype()))
    dst.setDouble(di, src.getDouble(si));
  else
    dst.setInt(di, src.getInt(si));
}

// A port of ATen's computeStride: walks the old dims in contiguous chunks and fits the new dims
// into each chunk.
std::optional<std::vector<int64_t>> viewStrides(const std::vector<int64_t> &sizes,
                                                const std::vector<int64_t> &strides,
                                                const std::vector<int64_t> &newSizes) {
  if (sizes.empty())
    return std::vector<int64_t>(newSizes.size(), 1);
  int64_t numel = 1;
  for (int64_t s : sizes)
    numel *= s;
  if (numel == 0 && sizes == newSizes)
    return strides;
  std::vector<int64_t> out(newSizes.size());
  if (numel == 0) {
    for (int64_t d = static_cast<int64_t>(newSizes.size()) - 1; d >= 0; --d)
      out[d] = d == static_cast<int64_t>(newSizes.size()) - 1
                   ? 1
                   : std::max<int64_t>(newSizes[d + 1], 1) * out[d + 1];
    return out;
  }
  int64_t viewD = static_cast<int64_t>(newSizes.size()) - 1;
  int64_t chunkBaseStride = strides.back();
  int64_t tensorNumel = 1, viewNumel = 1;
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    tensorNumel *= sizes[d];
    if (d == 0 || (sizes[d - 1] != 1 && strides[d - 1] != tensorNumel * chunkBaseStride)) {
      while (viewD >= 0 && (viewNumel < tensorNumel || newSizes[viewD] == 1)) {
        out[viewD] = viewNumel * chunkBaseStride;
        viewNumel *= newSizes[viewD];
        --viewD;
      }
      if (viewNumel != tensorNumel)
        return std::nullopt;
      if (d > 0) {
        chunkBaseStride = strides[d - 1];
        tensorNumel = 1;
        viewNumel = 1;
      }
    }
  }
  if (viewD != -1)
    return std::nullopt;
  return out;
}

std::vector<int64_t> reshapeSizes(const std::vector<int64_t> &target, int64_t numel,
                                  std::string_view opName) {
  std::vector<int64_t> out = target;
  int64_t known = 1;
  int64_t inferIdx = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1)
      inferIdx = static_cast<int64_t>(i);
    else
      known *= out[i];
  }
  bool ok = inferIdx >= 0 ? known != 0 && numel % known == 0 : known == numel;
  if (!ok)
    kernelFail(std::string(opName) + ": shape is invalid for input of size " +
               std::to_string(numel));
  if (inferIdx >= 0)
    out[static_cast<size_t>(inferIdx)] = numel / known;
  return out;
}

Tensor sliceView(const Tensor &t, int64_t dim, int64_t start, int64_t length, int64_t step) {
  auto sizes = t.sizes();
  auto strides = t.strides();
  int64_t offset = t.offset() + (length > 0 ? start * strides[dim] : 0);
  sizes[dim] = length;
  strides[dim] *= step;
  return t.view(sizes, strides, offset);
}

Tensor selectView(const Tensor &t, int64_t dim, int64_t index) {
  auto sizes = t.sizes();
  auto strides = t.strides();
  int64_t offset = t.offset() + index * strides[dim];
  sizes.erase(sizes.begin() + dim);
  strides.erase(strides.begin() + dim);
  return t.view(sizes, strides, offset);
}

Tensor permuteView(const Tensor &t, const std::vector<int64_t> &perm) {
  std::vector<int64_t> sizes, strides;
  for (int64_t p : perm) {
    sizes.push_back(t.sizes()[p]);
    strides.push_back(t.strides()[p]);
  }
  return t.view(sizes, strides, t.offset());
}

Tensor unsqueezeView(const Tensor &t, int64_t dim) {
  auto sizes = t.sizes();
  auto strides = t.strides();
  int64_t stride = dim < t.rank() ? sizes[dim] * strides[dim] : 1;
  sizes.insert(sizes.begin() + dim, 1);
  strides.insert(strides.begin() + dim, stride);
  return t.view(sizes, strides, t.offset());
}

Tensor remap(const Tensor &t, const std::vector<int64_t> &outSizes, const SourceFn &srcOf,
             const Scalar &outside) {
  Tensor out = Tensor::empty(t.dtype(), outSizes);
  std::vector<int64_t> src(static_cast<size_t>(t.rank()));
  forEachIndex(outSizes, [&](const std::vector<int64_t> &idx, int64_t linear) {
    if (srcOf(idx, src))
      copyElement(out, linear, t, linearIndex(t.sizes(), src));
    else
      setScalar(out, linear, outside);
  });
  return out;
}

std::vector<int64_t> unravel(int64_t linear, const std::vector<int64_t> &sizes) {
  std::vector<int64_t> idx(sizes.size());
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    idx[d] = sizes[d] ? linear % sizes[d] : 0;
    linear = sizes[d] ? linear / sizes[d] : 0;
  }
  return idx;
}

} // namespace xjit::ops::mv
