#include "convert.h"

#include "xjit/ir/parser.h"

#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <algorithm>
#include <array>
#include <optional>

namespace xjit::py {

namespace {

namespace dl = nb::dlpack;

// ---- dtypes ----

dl::dtype toDLPack(DType t) {
  dl::dtype_code code;
  switch (dtypeCategory(t)) {
  case DTypeCategory::Bool: code = dl::dtype_code::Bool; break;
  case DTypeCategory::Integer:
    code = t == DType::U8 ? dl::dtype_code::UInt : dl::dtype_code::Int;
    break;
  default: code = t == DType::BF16 ? dl::dtype_code::Bfloat : dl::dtype_code::Float; break;
  }
  return dl::dtype{static_cast<uint8_t>(code), static_cast<uint8_t>(dtypeSize(t) * 8), 1};
}

std::optional<DType> fromDLPack(dl::dtype dt) {
  for (int i = 0; i < kNumDTypes; ++i)
    if (toDLPack(static_cast<DType>(i)) == dt) return static_cast<DType>(i);
  return std::nullopt;
}

/// torch.dtype objects print as "torch.float32"; the canonical names map to IR dtypes.
std::optional<DType> torchDTypeByName(std::string_view name) {
  static constexpr std::array<std::pair<std::string_view, DType>, 10> kNames{{
      {"torch.float64", DType::F64},
      {"torch.float32", DType::F32},
      {"torch.float16", DType::F16},
      {"torch.bfloat16", DType::BF16},
      {"torch.int64", DType::I64},
      {"torch.int32", DType::I32},
      {"torch.int16", DType::I16},
      {"torch.int8", DType::I8},
      {"torch.uint8", DType::U8},
      {"torch.bool", DType::Bool},
  }};
  for (const auto &[n, t] : kNames)
    if (n == name) return t;
  return std::nullopt;
}

/// "torch.dtype", "numpy.ndarray", "int" (builtins unqualified), for checks and messages.
std::string typeName(nb::handle obj) {
  nb::handle t = obj.type();
  nb::object mod = nb::getattr(t, "__module__", nb::none());
  std::string qual = nb::cast<std::string>(nb::getattr(t, "__qualname__"));
  if (!PyUnicode_Check(mod.ptr())) return qual;
  std::string m = nb::cast<std::string>(mod);
  return m == "builtins" ? qual : m + "." + qual;
}

bool isTorchDType(nb::handle obj) { return typeName(obj) == "torch.dtype"; }

// ---- opaque Python objects ----

/// Deleter of OpaqueObject handles that hold a Python reference; its type also marks handles that
/// are PyObject* (std::get_deleter), so only those are turned back into Python objects.
struct PyObjectDeleter {
  void operator()(void *p) const {
    nb::gil_scoped_acquire gil;
    Py_DECREF(static_cast<PyObject *>(p));
  }
};

// ---- tensors ----

/// Wraps an imported array's memory in a Storage that keeps the array alive. Negative strides are
/// allowed: the storage starts at the lowest addressed element.
Tensor wrapArray(const nb::ndarray<> &arr, DType dtype) {
  const size_t ndim = arr.ndim();
  std::vector<int64_t> sizes(ndim), strides(ndim);
  int64_t lo = 0, hi = 0, numel = 1;
  for (size_t i = 0; i < ndim; ++i) {
    sizes[i] = static_cast<int64_t>(arr.shape(i));
    strides[i] = arr.stride(i);
    numel *= sizes[i];
  }
  if (numel > 0) {
    for (size_t i = 0; i < ndim; ++i) {
      int64_t extent = (sizes[i] - 1) * strides[i];
      (extent < 0 ? lo : hi) += extent;
    }
  }
  const int64_t item = dtypeSize(dtype);
  char *base = static_cast<char *>(arr.data()) + lo * item;
  int64_t nbytes = numel > 0 ? (hi - lo + 1) * item : 0;
  // The release runs when the last tensor on this storage dies, possibly on a thread that has
  // released the GIL; dropping the nanobind reference needs the GIL.
  auto keep = std::make_shared<nb::ndarray<>>(arr);
  auto storage = std::make_shared<Storage>(base, nbytes, [keep]() mutable {
    nb::gil_scoped_acquire gil;
    keep.reset();
  });
  return Tensor(std::move(storage), dtype, std::move(sizes), std::move(strides), -lo);
}

std::string describeDLPackDType(dl::dtype dt) {
  static constexpr std::array<const char *, 7> kCodes{"int",    "uint",    "float", "opaque",
                                                      "bfloat", "complex", "bool"};
  std::string code = dt.code < kCodes.size() ? kCodes[dt.code] : "code" + std::to_string(dt.code);
  std::string s = code + std::to_string(dt.bits);
  if (dt.lanes != 1) s += "x" + std::to_string(dt.lanes);
  return s;
}

nb::object exportTensor(Tensor t, Framework fw) {
  if (std::any_of(t.strides().begin(), t.strides().end(), [](int64_t s) { return s < 0; }))
    t = t.contiguousCopy();
  if (t.dtype() == DType::BF16) fw = Framework::Torch; // numpy has no bfloat16
  auto *keep = new std::shared_ptr<Storage>(t.storage());
  nb::capsule owner(keep,
                    [](void *p) noexcept { delete static_cast<std::shared_ptr<Storage> *>(p); });
  std::vector<size_t> shape(t.sizes().begin(), t.sizes().end());
  const std::vector<int64_t> &strides = t.strides();
  if (fw == Framework::Torch) {
    nb::ndarray<nb::pytorch, nb::device::cpu> arr(t.data(), shape.size(), shape.data(), owner,
                                                  strides.data(), toDLPack(t.dtype()));
    return arr.cast();
  }
  nb::ndarray<nb::numpy, nb::device::cpu> arr(t.data(), shape.size(), shape.data(), owner,
                                              strides.data(), toDLPack(t.dtype()));
  return arr.cast();
}

} // namespace

Framework parseFramework(const std::string &name) {
  if (name == "numpy") return Framework::NumPy;
  if (name == "torch") return Framework::Torch;
  throw nb::value_error(("framework must be 'numpy' or 'torch', not '" + name + "'").c_str());
}

bool isArrayLike(nb::handle obj) {
  if (PyBytes_Check(obj.ptr()) || PyByteArray_Check(obj.ptr()) || PyUnicode_Check(obj.ptr()))
    return false;
  return nb::ndarray_check(obj);
}

Tensor importTensor(nb::handle obj) {
  nb::ndarray<> arr;
  bool readOnly = false;
  if (!nb::try_cast(obj, arr, /*convert=*/false)) {
    nb::ndarray<nb::ro> ro;
    if (!nb::try_cast(obj, ro, /*convert=*/false))
      throw nb::type_error(
          ("cannot read a " + typeName(obj) + " as a tensor through DLPack or the buffer protocol")
              .c_str());
    arr = nb::ndarray<>(ro);
    readOnly = true;
  }
  if (arr.device_type() != nb::device::cpu::value)
    throw nb::value_error(("the reference interpreter runs on CPU tensors only; got a " +
                           typeName(obj) + " on DLPack device type " +
                           std::to_string(arr.device_type()))
                              .c_str());
  std::optional<DType> dtype = fromDLPack(arr.dtype());
  if (!dtype)
    throw nb::type_error(("unsupported tensor dtype " + describeDLPackDType(arr.dtype()) +
                          " (xjit supports f64, f32, f16, bf16, i64, i32, i16, i8, u8, bool)")
                             .c_str());
  Tensor t = wrapArray(arr, *dtype);
  return readOnly ? t.contiguousCopy() : t;
}

RtValue toRtValue(nb::handle obj) {
  PyObject *p = obj.ptr();
  if (obj.is_none()) return RtValue();
  if (PyBool_Check(p)) return RtValue(p == Py_True);
  if (PyLong_Check(p)) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(p, &overflow);
    if (overflow != 0) throw nb::value_error("integer does not fit in 64 bits");
    return RtValue(static_cast<int64_t>(v));
  }
  if (PyFloat_Check(p)) return RtValue(PyFloat_AsDouble(p));
  if (PyUnicode_Check(p)) return RtValue(nb::cast<std::string>(obj));
  if (PyList_Check(p) || PyTuple_Check(p)) {
    RtList items;
    for (nb::handle item : obj)
      items.push_back(toRtValue(item));
    return RtValue(std::move(items));
  }
  if (isArrayLike(obj)) return RtValue(importTensor(obj));
  Py_INCREF(p);
  return RtValue(OpaqueObject{std::shared_ptr<void>(p, PyObjectDeleter{})});
}

std::vector<RtValue> graphInputs(const Graph &g, const nb::sequence &inputs) {
  std::vector<RtValue> ins;
  for (nb::handle h : inputs) {
    RtValue v = toRtValue(h);
    size_t i = ins.size();
    if (v.isInt() && i < g.numInputs() && g.input(i)->type().kind() == TypeKind::Float)
      v = RtValue(static_cast<double>(v.toInt()));
    ins.push_back(std::move(v));
  }
  return ins;
}

Type typeOf(const RtValue &v) {
  if (v.isNone()) return Type::none();
  if (v.isTensor()) {
    const Tensor &t = v.tensor();
    return Type::tensor(t.dtype(), Shape(t.sizes().begin(), t.sizes().end()));
  }
  if (v.isBool()) return Type::boolTy();
  if (v.isInt()) return Type::intTy();
  if (v.isFloat()) return Type::floatTy();
  if (v.isStr()) return Type::strTy();
  if (v.isObject()) return Type::object();
  // Lists: list<T> when every element has the same type, else a tuple of the element types.
  std::vector<Type> elems;
  for (const RtValue &e : v.list())
    elems.push_back(typeOf(e));
  if (!elems.empty() &&
      std::all_of(elems.begin(), elems.end(), [&](const Type &t) { return t == elems[0]; }))
    return Type::list(elems[0]);
  return Type::tuple(std::move(elems));
}

nb::object fromRtValue(const RtValue &v, Framework fw) {
  if (v.isNone()) return nb::none();
  if (v.isTensor()) return exportTensor(v.tensor(), fw);
  if (v.isBool()) return nb::bool_(v.toBool());
  if (v.isInt()) return nb::int_(v.toInt());
  if (v.isFloat()) return nb::float_(v.toDouble());
  if (v.isStr()) return nb::str(v.str().c_str(), v.str().size());
  if (v.isList()) {
    nb::list out;
    for (const RtValue &e : v.list())
      out.append(fromRtValue(e, fw));
    return out;
  }
  const std::shared_ptr<void> &h = v.object().handle;
  if (h && std::get_deleter<PyObjectDeleter>(h))
    return nb::borrow(static_cast<PyObject *>(h.get()));
  throw nb::type_error("an opaque object that was not created from Python cannot be returned");
}

// ---- attributes ----

namespace {

DType dtypeFromAttr(const std::string &name, nb::handle value) {
  if (isTorchDType(value)) {
    std::string s = nb::cast<std::string>(nb::str(value));
    if (auto t = torchDTypeByName(s)) return *t;
    throw nb::type_error(("attribute '" + name + "': unsupported dtype " + s).c_str());
  }
  if (!PyUnicode_Check(value.ptr()))
    throw nb::type_error(("attribute '" + name +
                          "': expected a dtype name such as 'f32' or a torch.dtype, got " +
                          typeName(value))
                             .c_str());
  std::string s = nb::cast<std::string>(value);
  if (auto t = parseDType(s)) return *t;
  throw nb::value_error(("attribute '" + name + "': '" + s +
                         "' is not a dtype (expected f64, f32, f16, bf16, i64, i32, i16, i8, "
                         "u8 or bool)")
                            .c_str());
}

Attr listAttr(const std::string &name, nb::handle value, std::optional<AttrKind> kind) {
  Attr::Ints ints;
  Attr::Floats floats;
  bool anyFloat = kind == AttrKind::Floats;
  for (nb::handle item : value) {
    PyObject *p = item.ptr();
    if (PyBool_Check(p) || !(PyLong_Check(p) || PyFloat_Check(p)))
      throw nb::type_error(
          ("attribute '" + name + "': list elements must be int or float, got " + typeName(item))
              .c_str());
    if (PyFloat_Check(p)) anyFloat = true;
    floats.push_back(PyFloat_AsDouble(p));
    if (PyLong_Check(p)) ints.push_back(nb::cast<int64_t>(item));
  }
  if (anyFloat) return Attr(std::move(floats));
  return Attr(std::move(ints));
}

} // namespace

Attr toAttr(const OpDef *def, const std::string &name, nb::handle value) {
  const AttrSpec *spec = def ? def->attrSpec(name) : nullptr;
  std::optional<AttrKind> kind;
  if (spec) kind = spec->kind;
  PyObject *p = value.ptr();
  if (kind == AttrKind::DType || isTorchDType(value)) return Attr(dtypeFromAttr(name, value));
  if (PyBool_Check(p)) return Attr(p == Py_True);
  if (PyLong_Check(p)) {
    int64_t v = nb::cast<int64_t>(value);
    if (kind == AttrKind::Ints) return Attr(Attr::Ints{v});
    if (kind == AttrKind::Floats) return Attr(Attr::Floats{static_cast<double>(v)});
    return Attr(v);
  }
  if (PyFloat_Check(p)) {
    double v = PyFloat_AsDouble(p);
    if (kind == AttrKind::Floats) return Attr(Attr::Floats{v});
    return Attr(v);
  }
  if (PyUnicode_Check(p)) {
    std::string s = nb::cast<std::string>(value);
    if (kind == AttrKind::Type) return Attr(parseType(s));
    return Attr(std::move(s));
  }
  if (PyList_Check(p) || PyTuple_Check(p)) return listAttr(name, value, kind);
  if (isArrayLike(value)) return Attr(importTensor(value).contiguousCopy());
  throw nb::type_error(
      ("attribute '" + name + "': cannot convert a " + typeName(value) + " to an attribute")
          .c_str());
}

AttrMap toAttrMap(const OpDef *def, nb::handle dict) {
  AttrMap out;
  if (dict.is_none()) return out;
  for (auto [k, v] : nb::cast<nb::dict>(dict)) {
    std::string name = nb::cast<std::string>(k);
    out[name] = toAttr(def, name, v);
  }
  return out;
}

nb::object attrToPython(const Attr &a) {
  switch (a.kind()) {
  case AttrKind::Int: return nb::int_(a.asInt());
  case AttrKind::Float: return nb::float_(a.asFloat());
  case AttrKind::Bool: return nb::bool_(a.asBool());
  case AttrKind::Str: return nb::str(a.asStr().c_str());
  case AttrKind::Ints: {
    nb::list l;
    for (int64_t v : a.asInts())
      l.append(nb::int_(v));
    return l;
  }
  case AttrKind::Floats: {
    nb::list l;
    for (double v : a.asFloats())
      l.append(nb::float_(v));
    return l;
  }
  case AttrKind::DType: return nb::str(std::string(dtypeName(a.asDType())).c_str());
  case AttrKind::Type: return nb::str(a.asType().str().c_str());
  case AttrKind::Tensor: return nb::str(a.str().c_str());
  }
  return nb::none();
}

} // namespace xjit::py
