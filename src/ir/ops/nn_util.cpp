#include "nn_util.h"

#include <cstring>

namespace xjit::ops::nn {

bool present(const Op &op, size_t i) {
  return i < op.numOperands() && op.operand(i)->type().kind() != TypeKind::None;
}

bool present(std::span<const RtValue> in, size_t i) { return i < in.size() && !in[i].isNone(); }

const Type *optionalTensor(const Op &op, size_t i) {
  if (!present(op, i))
    return nullptr;
  return &tensorOperand(op, i);
}

void requireFloating(std::string_view op, std::string_view what, const Type &t) {
  if (!isFloating(t.dtype()))
    inferFail(std::string(op) + ": " + std::string(what) +
              " must be a floating-point tensor, got " + t.str());
}

void requireNotBool(std::string_view op, std::string_view what, const Type &t) {
  if (t.dtype() == DType::Bool)
    inferFail(std::string(op) + ": " + std::string(what) + " of dtype bool is not supported");
}

void requireSameDType(std::string_view op, std::string_view aName, const Type &a,
                      std::string_view bName, const Type &b) {
  if (a.dtype() != b.dtype())
    inferFail(std::string(op) + ": " + std::string(aName) + " and " + std::string(bName) +
              " must have the same dtype, got " + std::string(dtypeName(a.dtype())) + " and " +
              std::string(dtypeName(b.dtype())));
}

Shape shapeOf(const std::vector<int64_t> &sizes) { return Shape(sizes.begin(), sizes.end()); }

std::vector<int64_t> sizesOf(const Shape &s) {
  std::vector<int64_t> out;
  out.reserve(s.size());
  for (const DimExpr &d : s) {
    if (!d.isStatic())
      kernelFail("internal: symbolic dim " + d.str() + " in a run-time shape");
    out.push_back(d.value());
  }
  return out;
}

void checkDimEq(const DimExpr &a, const DimExpr &b, const std::string &msg) {
  if (a.isStatic() && b.isStatic() && a.value() != b.value())
    inferFail(msg);
}

void checkDimAtLeast(const DimExpr &d, int64_t min, const std::string &msg) {
  if (d.isStatic() && d.value() < min)
    inferFail(msg);
}

std::string dimsStr(const std::vector<int64_t> &v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i)
    s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

std::vector<int64_t> spatialInts(const Op &op, std::string_view name, size_t n, int64_t min) {
  const std::vector<int64_t> &v = attrInts(op, name);
  if (v.size() != 1 && v.size() != n)
    inferFail(op.name() + ": " + std::string(name) + " must have 1 or " + std::to_string(n) +
              " values, got " + dimsStr(v));
  std::vector<int64_t> out = v.size() == 1 ? std::vector<int64_t>(n, v[0]) : v;
  for (int64_t x : out)
    if (x < min)
      inferFail(op.name() + ": " + std::string(name) + " must be >= " + std::to_string(min) +
                ", got " + dimsStr(v));
  return out;
}

int64_t product(std::span<const int64_t> v) {
  int64_t p = 1;
  for (int64_t x : v)
    p *= x;
  return p;
}

namespace {

/// Reads t's elements in row-major order through raw typed pointers (any strides, an odometer
/// over the dims instead of per-element offset arithmetic), converted by `conv`.
template <class Src, class T, class Conv> void gather(const Tensor &t, T *out, Conv conv) {
  const Src *base = reinterpret_cast<const Src *>(t.data());
  int64_t n = t.numel();
  if (t.isContiguous()) {
    for (int64_t i = 0; i < n; ++i)
      out[i] = conv(base[i]);
    return;
  }
  const std::vector<int64_t> &sizes = t.sizes(), &strides = t.strides();
  std::vector<int64_t> idx(sizes.size(), 0);
  int64_t off = 0;
  for (int64_t i = 0; i < n; ++i) {
    out[i] = conv(base[off]);
    for (size_t d = sizes.size(); d-- > 0;) {
      if (++idx[d] < sizes[d]) {
        off += strides[d];
        break;
      }
      off -= strides[d] * (sizes[d] - 1);
      idx[d] = 0;
    }
  }
}

/// A value as the buffer type: integer buffers take the C-cast int64 (wrapping in uint64).
template <class T, class V> T as(V v) {
  if constexpr (std::integral<T>)
    return static_cast<T>(static_cast<int64_t>(v));
  else
    return static_cast<T>(v);
}

template <class Src, class T> void convertRaw(const Tensor &t, T *out) {
  gather<Src>(t, out, [](Src v) { return as<T>(v); });
}

template <class Dst, class T> void storeRaw(char *p, std::span<const T> in) {
  Dst *d = reinterpret_cast<Dst *>(p);
  for (size_t i = 0; i < in.size(); ++i)
    d[i] = as<Dst>(in[i]); // integers wrap like a C cast
}

} // namespace

template <Elem T> std::vector<T> load(const Tensor &t) {
  int64_t n = t.numel();
  std::vector<T> out(static_cast<size_t>(n));
  if (n == 0)
    return out;
  T *o = out.data();
  switch (t.dtype()) {
  case DType::F32:
    convertRaw<float>(t, o);
    break;
  case DType::F64:
    convertRaw<double>(t, o);
    break;
  case DType::I64:
    convertRaw<int64_t>(t, o);
    break;
  case DType::I32:
    convertRaw<int32_t>(t, o);
    break;
  case DType::I16:
    convertRaw<int16_t>(t, o);
    break;
  case DType::I8:
    convertRaw<int8_t>(t, o);
    break;
  case DType::U8:
    convertRaw<uint8_t>(t, o);
    break;
  case DType::Bool:
    convertRaw<bool>(t, o);
    break;
  case DType::F16:
    gather<uint16_t>(t, o, [](uint16_t h) { return as<T>(halfToFloat(h)); });
    break;
  case DType::BF16:
    gather<uint16_t>(t, o, [](uint16_t h) { return as<T>(bfloat16ToFloat(h)); });
    break;
  }
  return out;
}

template <Elem T> Tensor store(std::span<const T> data, DType dtype, std::vector<int64_t> sizes) {
  Tensor out = Tensor::empty(dtype, std::move(sizes));
  if (static_cast<int64_t>(data.size()) != out.numel())
    kernelFail("internal: buffer of " + std::to_string(data.size()) + " values for a tensor of " +
               std::to_string(out.numel()));
  char *p = out.data();
  if constexpr (std::same_as<T, double>) {
    if (dtype == DType::F32)
      storeRaw<float>(p, data);
    else if (dtype == DType::F64)
      storeRaw<double>(p, data);
    else // f16/bf16 rounding and float->int conversion live in Tensor::setDouble
      for (size_t i = 0; i < data.size(); ++i)
        out.setDouble(static_cast<int64_t>(i), data[i]);
  } else {
    switch (dtype) {
    case DType::I64:
      storeRaw<int64_t>(p, data);
      break;
    case DType::I32:
      storeRaw<int32_t>(p, data);
      break;
    case DType::I16:
      storeRaw<int16_t>(p, data);
      break;
    case DType::I8:
      storeRaw<int8_t>(p, data);
      break;
    case DType::U8:
      storeRaw<uint8_t>(p, data);
      break;
    default:
      for (size_t i = 0; i < data.size(); ++i)
        out.setInt(static_cast<int64_t>(i), static_cast<int64_t>(data[i]));
    }
  }
  return out;
}

template std::vector<double> load<double>(const Tensor &);
template std::vector<uint64_t> load<uint64_t>(const Tensor &);
template Tensor store<double>(std::span<const double>, DType, std::vector<int64_t>);
template Tensor store<uint64_t>(std::span<const uint64_t>, DType, std::vector<int64_t>);
template std::vector<int64_t> load<int64_t>(const Tensor &);
template Tensor store<int64_t>(std::span<const int64_t>, DType, std::vector<int64_t>);

} // namespace xjit::ops::nn
