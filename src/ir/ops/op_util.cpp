// Shared helpers for op rows: attributes, promotion, broadcasting, element loops.
#include "ops/op_util.h"

#include <algorithm>
#include <cmath>

namespace xjit::ops {

// ---- attributes ----
static const Attr &requireAttr(const Op &op, std::string_view name) {
  const Attr *a = op.attrOrNull(name);
  if (!a) inferFail("missing required attribute '" + std::string(name) + "'");
  return *a;
}

static void requireKind(const Attr &a, AttrKind k, std::string_view name, const char *what) {
  if (a.kind() != k) inferFail("attribute '" + std::string(name) + "' must be " + what + ", got " + a.str());
}

int64_t attrInt(const Op &op, std::string_view name) {
  const Attr &a = requireAttr(op, name);
  if (a.kind() == AttrKind::Bool) return a.asBool();
  requireKind(a, AttrKind::Int, name, "an integer");
  return a.asInt();
}

double attrFloat(const Op &op, std::string_view name) {
  const Attr &a = requireAttr(op, name);
  if (a.kind() != AttrKind::Float && a.kind() != AttrKind::Int && a.kind() != AttrKind::Bool)
    inferFail("attribute '" + std::string(name) + "' must be a number, got " + a.str());
  return a.asNumber();
}

bool attrBool(const Op &op, std::string_view name) {
  const Attr &a = requireAttr(op, name);
  if (a.kind() == AttrKind::Int) return a.asInt() != 0;
  requireKind(a, AttrKind::Bool, name, "a bool");
  return a.asBool();
}

const std::string &attrStr(const Op &op, std::string_view name) {
  const Attr &a = requireAttr(op, name);
  requireKind(a, AttrKind::Str, name, "a string");
  return a.asStr();
}

const std::vector<int64_t> &attrInts(const Op &op, std::string_view name) {
  const Attr &a = requireAttr(op, name);
  requireKind(a, AttrKind::Ints, name, "a list of integers");
  return a.asInts();
}

DType attrDType(const Op &op, std::string_view name) {
  const Attr &a = requireAttr(op, name);
  if (a.kind() == AttrKind::Str) // tolerate "f32" written as a string
    if (auto d = parseDType(a.asStr())) return *d;
  requireKind(a, AttrKind::DType, name, "a dtype");
  return a.asDType();
}

bool hasAttrValue(const Op &op, std::string_view name) { return op.attrOrNull(name) != nullptr; }

// ---- inference ----
void inferFail(const std::string &msg) { throw TypeInferenceError(msg); }

const Type &tensorOperand(const Op &op, size_t i) {
  if (i >= op.numOperands()) inferFail("missing operand " + std::to_string(i));
  const Type &t = op.operand(i)->type();
  if (!t.isTensor()) {
    const auto &specs = op.def().operands;
    std::string name = i < specs.size() ? specs[i].name : specs.empty() ? "?" : specs.back().name;
    inferFail("operand '" + name + "' must be a tensor, got " + t.str());
  }
  return t;
}

Shape broadcastShapes(const Shape &a, const Shape &b) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    // Align from the right.
    const DimExpr *da = i < n - a.size() ? nullptr : &a[i - (n - a.size())];
    const DimExpr *db = i < n - b.size() ? nullptr : &b[i - (n - b.size())];
    if (!da) { out[i] = *db; continue; }
    if (!db) { out[i] = *da; continue; }
    auto sa = da->staticValue(), sb = db->staticValue();
    if (sa && *sa == 1) out[i] = *db;
    else if (sb && *sb == 1) out[i] = *da;
    else if (*da == *db) out[i] = *da;
    else if (sa && sb)
      inferFail("shapes " + shapeStr(a) + " and " + shapeStr(b) + " cannot be broadcast (dim " +
                std::to_string(i) + ": " + da->str() + " vs " + db->str() + ")");
    else out[i] = sb ? *db : *da; // symbolic: assumed equal; keep the static one
  }
  return out;
}

namespace {
enum Tier { kDim, kZeroDim, kWrapped };
DType combineCategories(std::optional<DType> higher, std::optional<DType> lower) {
  if (!higher) return *lower;
  if (!lower) return *higher;
  if (isFloating(*higher)) return *higher;
  if (*higher == DType::Bool || isFloating(*lower)) return promoteTypes(*higher, *lower);
  return *higher;
}
} // namespace

DType resultType(std::span<const Type> types) {
  std::optional<DType> tiers[3];
  for (const Type &t : types) {
    if (t.kind() == TypeKind::None) continue;
    Tier tier;
    DType d;
    if (t.isTensor()) {
      tier = t.rank() == 0 ? kZeroDim : kDim;
      d = t.dtype();
    } else if (t.isScalar()) {
      tier = kWrapped;
      d = defaultDTypeFor(t.category());
    } else {
      inferFail("expected a tensor or a number, got " + t.str());
    }
    tiers[tier] = tiers[tier] ? promoteTypes(*tiers[tier], d) : d;
  }
  if (!tiers[kDim] && !tiers[kZeroDim] && !tiers[kWrapped]) inferFail("no operands to promote");
  std::optional<DType> lower =
      tiers[kZeroDim] || tiers[kWrapped]
          ? std::optional<DType>(combineCategories(tiers[kZeroDim], tiers[kWrapped]))
          : std::nullopt;
  return combineCategories(tiers[kDim], lower);
}

DType resultTypeOfOperands(const Op &op, size_t first, size_t count) {
  std::vector<Type> types;
  for (size_t i = first; i < op.numOperands() && i - first < count; ++i)
    types.push_back(op.operand(i)->type());
  return resultType(types);
}

int64_t normDim(int64_t dim, int64_t rank) {
  int64_t r = std::max<int64_t>(rank, 1); // 0-d tensors accept dim 0 and -1
  if (dim < -r || dim >= r)
    inferFail("dimension " + std::to_string(dim) + " is out of range for a tensor of rank " +
              std::to_string(rank) + " (expected in [" + std::to_string(-r) + ", " +
              std::to_string(r - 1) + "])");
  return dim < 0 ? dim + r : dim;
}

std::vector<int64_t> normDims(const std::vector<int64_t> &dims, int64_t rank) {
  std::vector<int64_t> out;
  if (dims.empty()) {
    for (int64_t i = 0; i < rank; ++i) out.push_back(i);
    return out;
  }
  for (int64_t d : dims) {
    int64_t n = normDim(d, rank);
    if (std::find(out.begin(), out.end(), n) != out.end())
      inferFail("dimension " + std::to_string(d) + " appears twice in the reduction dims");
    out.push_back(n);
  }
  std::sort(out.begin(), out.end());
  if (rank == 0) out.clear(); // reducing a 0-d tensor over dim 0 is the identity reduction
  return out;
}

Shape reducedShape(const Shape &s, const std::vector<int64_t> &dims, bool keepdim) {
  Shape out;
  for (int64_t i = 0; i < static_cast<int64_t>(s.size()); ++i) {
    bool reduced = std::find(dims.begin(), dims.end(), i) != dims.end();
    if (!reduced) out.push_back(s[i]);
    else if (keepdim) out.push_back(DimExpr(1));
  }
  return out;
}

DType floatResultDType(DType d) { return isFloating(d) ? d : DType::F32; }

// ---- kernels ----
void kernelFail(const std::string &msg) { throw KernelError(msg); }

std::vector<int64_t> broadcastSizes(const std::vector<int64_t> &a, const std::vector<int64_t> &b) {
  size_t n = std::max(a.size(), b.size());
  std::vector<int64_t> out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1)
      kernelFail("sizes " + std::to_string(da) + " and " + std::to_string(db) + " at dim " +
                 std::to_string(i) + " cannot be broadcast");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Tensor expandTo(const Tensor &t, const std::vector<int64_t> &sizes) {
  size_t n = sizes.size();
  if (static_cast<size_t>(t.rank()) > n) kernelFail("cannot expand to fewer dimensions");
  std::vector<int64_t> strides(n, 0);
  size_t lead = n - static_cast<size_t>(t.rank());
  for (size_t i = 0; i < static_cast<size_t>(t.rank()); ++i) {
    int64_t s = t.sizes()[i];
    if (s == sizes[lead + i]) strides[lead + i] = t.strides()[i];
    else if (s != 1) kernelFail("cannot expand size " + std::to_string(s) + " to " + std::to_string(sizes[lead + i]));
  }
  return t.view(sizes, strides, t.offset());
}

Tensor asTensor(const RtValue &v, DType dtype) {
  if (v.isTensor()) return v.tensor();
  Tensor t = Tensor::empty(dtype, {});
  if (v.isFloat()) t.setDouble(0, v.toDouble());
  else if (v.isInt() || v.isBool()) t.setInt(0, v.toInt());
  else kernelFail(std::string("expected a tensor or a number, got ") + v.kindName());
  return t;
}

Tensor tensorArg(const Op &op, std::span<const RtValue> in, size_t i) {
  if (i >= in.size()) kernelFail("missing operand " + std::to_string(i));
  if (in[i].isTensor()) return in[i].tensor();
  return asTensor(in[i], resultTypeOfOperands(op));
}

DType resultDType(const Op &op, size_t i) {
  const Type &t = op.result(i)->type();
  if (!t.isTensor()) kernelFail("result " + std::to_string(i) + " is not a tensor");
  return t.dtype();
}

void forEachIndex(const std::vector<int64_t> &sizes,
                  const std::function<void(const std::vector<int64_t> &, int64_t)> &f) {
  int64_t n = 1;
  for (auto s : sizes) n *= s;
  if (n == 0) return;
  std::vector<int64_t> idx(sizes.size(), 0);
  for (int64_t linear = 0; linear < n; ++linear) {
    f(idx, linear);
    for (size_t d = sizes.size(); d-- > 0;) {
      if (++idx[d] < sizes[d]) break;
      idx[d] = 0;
    }
  }
}

int64_t linearIndex(const std::vector<int64_t> &sizes, const std::vector<int64_t> &idx) {
  int64_t l = 0;
  for (size_t d = 0; d < sizes.size(); ++d) l = l * sizes[d] + idx[d];
  return l;
}

Tensor mapElements(std::span<const Tensor> inputs, DType computeDType, DType outDType,
                   const FloatFn &floatFn, const IntFn &intFn) {
  std::vector<int64_t> sizes;
  for (const auto &t : inputs) sizes = broadcastSizes(sizes, t.sizes());
  std::vector<Tensor> ins;
  for (const auto &t : inputs) ins.push_back(expandTo(t, sizes));
  Tensor out = Tensor::empty(outDType, sizes);
  bool useFloat = isFloating(computeDType) || !intFn;
  size_t k = ins.size(), rank = sizes.size();
  std::vector<double> fargs(k);
  std::vector<int64_t> iargs(k);
  std::vector<int64_t> offs(k), idx(rank, 0);
  for (size_t j = 0; j < k; ++j) offs[j] = ins[j].offset();
  int64_t n = out.numel();
  char *obase = static_cast<char *>(out.storage()->data());
  for (int64_t linear = 0; linear < n; ++linear) {
    if (useFloat) {
      for (size_t j = 0; j < k; ++j) {
        // Inputs are first converted to the compute dtype, as PyTorch does.
        double v = loadDouble(ins[j].dtype(), ins[j].storage()->data(), offs[j]);
        fargs[j] = isFloating(computeDType) ? roundTo(computeDType, v) : v;
      }
      storeDouble(outDType, obase, linear, floatFn(fargs));
    } else {
      for (size_t j = 0; j < k; ++j) iargs[j] = loadInt(ins[j].dtype(), ins[j].storage()->data(), offs[j]);
      storeInt(outDType, obase, linear, intFn(iargs));
    }
    // Advance the multi-index and every input's element offset.
    for (size_t d = rank; d-- > 0;) {
      if (++idx[d] < sizes[d]) {
        for (size_t j = 0; j < k; ++j) offs[j] += ins[j].strides()[d];
        break;
      }
      for (size_t j = 0; j < k; ++j) offs[j] -= ins[j].strides()[d] * (sizes[d] - 1);
      idx[d] = 0;
    }
  }
  return out;
}

double roundTo(DType dtype, double v) {
  switch (dtype) {
  case DType::F32: return static_cast<float>(v);
  case DType::F16: return halfToFloat(floatToHalf(static_cast<float>(v)));
  case DType::BF16: return bfloat16ToFloat(floatToBFloat16(static_cast<float>(v)));
  default: return v;
  }
}

} // namespace xjit::ops
