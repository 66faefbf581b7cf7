#include "tensor_bridge.h"

#include "xjit/ir/diagnostics.h"

#include <algorithm>
#include <array>
#include <memory>
#include <unordered_map>
#include <utility>

namespace xjit::frontend {

namespace {

constexpr std::array<const char *, kNumDTypes> kTorchDTypeNames = {
    "bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64",
};

dlpack::DataType toDLPack(DType t) {
  uint8_t code;
  switch (t) {
  case DType::Bool: code = dlpack::kDLBool; break;
  case DType::U8: code = dlpack::kDLUInt; break;
  case DType::BF16: code = dlpack::kDLBfloat; break;
  default: code = isFloating(t) ? dlpack::kDLFloat : dlpack::kDLInt;
  }
  return {code, static_cast<uint8_t>(dtypeSize(t) * 8), 1};
}

TorchHandles *gTorch = nullptr;

/// Storages that wrap a torch tensor's memory (importTensor), with that tensor (borrowed: the
/// storage holds a reference) and the dtype it was imported as. An entry is dropped, with the
/// GIL, when its storage is freed.
struct ImportedFrom {
  PyObject *tensor;
  DType dtype;
};
std::unordered_map<const Storage *, ImportedFrom> &importedStorages() {
  static auto *storages = new std::unordered_map<const Storage *, ImportedFrom>();
  return *storages;
}

TorchHandles *loadTorch() {
  auto h = std::make_unique<TorchHandles>();
  PyRef torch = checked(PyImport_ImportModule("torch"));
  PyRef tensor = checked(PyObject_GetAttrString(torch.get(), "Tensor"));
  PyRef nn = checked(PyImport_ImportModule("torch.nn"));
  PyRef param = checked(PyObject_GetAttrString(nn.get(), "Parameter"));
  h->tensorType = reinterpret_cast<PyTypeObject *>(tensor.release()); // kept for the process
  h->parameterType = reinterpret_cast<PyTypeObject *>(param.release());
  PyRef module = checked(PyObject_GetAttrString(nn.get(), "Module"));
  PyRef moduleList = checked(PyObject_GetAttrString(nn.get(), "ModuleList"));
  h->moduleGetattr =
      PyDict_GetItemString(reinterpret_cast<PyTypeObject *>(module.get())->tp_dict, "__getattr__");
  h->moduleListGetitem = PyDict_GetItemString(
      reinterpret_cast<PyTypeObject *>(moduleList.get())->tp_dict, "__getitem__");
  Py_XINCREF(h->moduleGetattr);
  Py_XINCREF(h->moduleListGetitem);
  h->moduleType = reinterpret_cast<PyTypeObject *>(module.release());
  h->isGradEnabled = checked(PyObject_GetAttrString(torch.get(), "is_grad_enabled")).release();
  for (int i = 0; i < kNumDTypes; ++i)
    h->dtypes[i] = checked(PyObject_GetAttrString(torch.get(), kTorchDTypeNames[i])).release();
  PyRef C = checked(PyObject_GetAttrString(torch.get(), "_C"));
  PyRef getApi = PyRef::steal(PyObject_GetAttrString(C.get(), "_dlpack_exchange_api"));
  PyRef capsule = getApi ? PyRef::steal(PyObject_CallNoArgs(getApi.get())) : PyRef();
  if (capsule)
    h->api = static_cast<const dlpack::ExchangeAPI *>(
        PyCapsule_GetPointer(capsule.get(), "dlpack_exchange_api"));
  // The capsule wraps a static struct; dropping it leaves the pointer valid (documented ABI).
  if (!h->api || h->api->header.version.major != dlpack::kMajorVersion ||
      !h->api->dltensor_from_py_object_no_sync || !h->api->managed_tensor_to_py_object_no_sync) {
    PyErr_Clear();
    PyErr_SetString(PyExc_ImportError, "xjit's frontend needs torch's DLPack exchange API "
                                       "(torch._C._dlpack_exchange_api, DLPack 1.x; torch >= 2.9)");
    throw PyErrorSet();
  }
  return h.release();
}

// Deleter of opaque-object handles holding a Python reference; its type marks such handles.
struct PyObjectDeleter {
  void operator()(void *p) const {
    if (!Py_IsInitialized()) return;
    PyGILState_STATE g = PyGILState_Ensure();
    Py_DECREF(static_cast<PyObject *>(p));
    PyGILState_Release(g);
  }
};

struct ExportCtx {
  dlpack::ManagedTensorVersioned managed;
  std::shared_ptr<Storage> storage;
  std::vector<int64_t> sizes, strides;
};

void deleteExport(dlpack::ManagedTensorVersioned *m) {
  delete static_cast<ExportCtx *>(m->manager_ctx);
}

RtValue scalarTensor(PyObject *o, DType dtype) {
  Tensor t = Tensor::empty(dtype, {});
  if (PyFloat_Check(o))
    t.setDouble(0, PyFloat_AsDouble(o));
  else
    t.setInt(0, PyLong_AsLongLong(o));
  if (PyErr_Occurred()) throw PyErrorSet();
  return RtValue(std::move(t));
}

PyRef tupleOf(const std::vector<int64_t> &xs) {
  PyRef tuple = checked(PyTuple_New(static_cast<Py_ssize_t>(xs.size())));
  for (size_t i = 0; i < xs.size(); ++i)
    PyTuple_SET_ITEM(tuple.get(), static_cast<Py_ssize_t>(i),
                     checked(PyLong_FromLongLong(xs[i])).release());
  return tuple;
}

/// base.as_strided(t's sizes, t's strides, offset). Throws PyErrorSet.
PyRef asStrided(PyObject *base, const Tensor &t, int64_t offset) {
  static PyObject *name = internedStr("as_strided");
  PyRef sizes = tupleOf(t.sizes()), strides = tupleOf(t.strides());
  PyRef storageOffset = checked(PyLong_FromLongLong(offset));
  return checked(PyObject_CallMethodObjArgs(base, name, sizes.get(), strides.get(),
                                            storageOffset.get(), nullptr));
}

} // namespace

const TorchHandles &torchHandles() {
  if (!gTorch) gTorch = loadTorch();
  return *gTorch;
}

bool torchLoaded() { return gTorch != nullptr; }

bool isPlainTensor(PyObject *o) {
  const TorchHandles &t = torchHandles();
  PyTypeObject *tp = Py_TYPE(o);
  return tp == t.tensorType || tp == t.parameterType;
}

bool tensorView(PyObject *tensor, dlpack::DLTensor *out) {
  return torchHandles().api->dltensor_from_py_object_no_sync(tensor, out) == 0;
}

std::optional<DType> dtypeFromDLPack(dlpack::DataType t) {
  if (t.lanes != 1) return std::nullopt;
  switch (t.code) {
  case dlpack::kDLBool:
    if (t.bits == 8) return DType::Bool;
    break;
  case dlpack::kDLUInt:
    if (t.bits == 8) return DType::U8;
    break;
  case dlpack::kDLInt:
    switch (t.bits) {
    case 8: return DType::I8;
    case 16: return DType::I16;
    case 32: return DType::I32;
    case 64: return DType::I64;
    }
    break;
  case dlpack::kDLFloat:
    switch (t.bits) {
    case 16: return DType::F16;
    case 32: return DType::F32;
    case 64: return DType::F64;
    }
    break;
  case dlpack::kDLBfloat:
    if (t.bits == 16) return DType::BF16;
    break;
  }
  return std::nullopt;
}

int requiresGrad(PyObject *tensor) {
  // requires_grad is a data descriptor of torch's tensor base class (it wins over an instance
  // __dict__), so calling it directly is exactly getattr, without the MRO walk per call.
  static PyObject *name = internedStr("requires_grad");
  static PyObject *descr = [] {
    PyObject *d = _PyType_Lookup(torchHandles().tensorType, name);
    Py_XINCREF(d);
    return d;
  }();
  PyObject *r = descr && PyType_IsSubtype(Py_TYPE(tensor), torchHandles().tensorType) &&
                        Py_TYPE(descr)->tp_descr_get && Py_TYPE(descr)->tp_descr_set
                    ? Py_TYPE(descr)->tp_descr_get(descr, tensor,
                                                   reinterpret_cast<PyObject *>(Py_TYPE(tensor)))
                    : PyObject_GetAttr(tensor, name);
  if (!r) return -1;
  int yes = r == Py_True;
  Py_DECREF(r);
  return yes;
}

std::string deviceStr(dlpack::Device d) {
  switch (d.device_type) {
  case dlpack::kDLCPU: return "cpu";
  case dlpack::kDLCUDA: return "cuda:" + std::to_string(d.device_id);
  default:
    return "dlpack-device-" + std::to_string(d.device_type) + ":" + std::to_string(d.device_id);
  }
}

std::optional<dlpack::Device> parseDevice(const std::string &s) {
  if (s == "cpu") return dlpack::Device{dlpack::kDLCPU, 0};
  if (s == "cuda") return dlpack::Device{dlpack::kDLCUDA, 0};
  if (s.rfind("cuda:", 0) == 0) {
    try {
      return dlpack::Device{dlpack::kDLCUDA, std::stoi(s.substr(5))};
    } catch (const std::exception &) {
      return std::nullopt;
    }
  }
  return std::nullopt;
}

Tensor importTensor(PyObject *tensor, const dlpack::DLTensor &v) {
  if (v.device.device_type != dlpack::kDLCPU)
    throw Error(ErrorKind::User,
                "the reference interpreter runs on CPU tensors only; got a tensor on " +
                    deviceStr(v.device));
  std::optional<DType> dtype = dtypeFromDLPack(v.dtype);
  if (!dtype)
    throw Error(ErrorKind::User, "unsupported tensor dtype (DLPack code " +
                                     std::to_string(v.dtype.code) + ", " +
                                     std::to_string(v.dtype.bits) + " bits)");
  const size_t ndim = static_cast<size_t>(v.ndim);
  std::vector<int64_t> sizes(v.shape, v.shape + ndim), strides(ndim);
  if (v.strides)
    strides.assign(v.strides, v.strides + ndim);
  else
    strides = contiguousStrides(sizes);
  // The storage spans the addressed elements; torch strides are never negative.
  int64_t numel = 1, last = 0;
  for (size_t i = 0; i < ndim; ++i) {
    numel *= sizes[i];
    last += (sizes[i] - 1) * strides[i];
  }
  const int64_t item = dtypeSize(*dtype);
  char *base = static_cast<char *>(v.data) + v.byte_offset;
  Py_INCREF(tensor);
  auto key = std::make_shared<const Storage *>(nullptr);
  auto storage = std::make_shared<Storage>(base, numel > 0 ? (last + 1) * item : 0, [tensor, key] {
    // The last user of the memory may be a thread without the GIL (or the interpreter may
    // be shutting down, when the reference no longer matters).
    if (!Py_IsInitialized()) return;
    PyGILState_STATE g = PyGILState_Ensure();
    importedStorages().erase(*key);
    Py_DECREF(tensor);
    PyGILState_Release(g);
  });
  *key = storage.get();
  importedStorages()[storage.get()] = {tensor, *dtype};
  return Tensor(std::move(storage), *dtype, std::move(sizes), std::move(strides), 0);
}

Tensor importTensor(PyObject *tensor) {
  dlpack::DLTensor v;
  if (!tensorView(tensor, &v)) throw PyErrorSet();
  return importTensor(tensor, v);
}

PyRef exportTensor(const Tensor &t) {
  auto *ctx = new ExportCtx{};
  ctx->storage = t.storage();
  ctx->sizes = t.sizes();
  ctx->strides = t.strides();
  dlpack::ManagedTensorVersioned &m = ctx->managed;
  m.version = {dlpack::kMajorVersion, 0};
  m.manager_ctx = ctx;
  m.deleter = deleteExport;
  m.flags = 0;
  if (t.offset() < 0 ||
      std::any_of(ctx->strides.begin(), ctx->strides.end(), [](int64_t s) { return s < 0; })) {
    // torch rejects negative strides; a copy is the only faithful export.
    delete ctx;
    return exportTensor(t.contiguousCopy());
  }
  // torch's importer wants byte_offset == 0: the view's first element is the data pointer.
  m.dl_tensor.data = t.storage() ? t.data() : nullptr;
  m.dl_tensor.byte_offset = 0;
  m.dl_tensor.device = {dlpack::kDLCPU, 0};
  m.dl_tensor.ndim = static_cast<int32_t>(ctx->sizes.size());
  m.dl_tensor.dtype = toDLPack(t.dtype());
  m.dl_tensor.shape = ctx->sizes.data();
  m.dl_tensor.strides = ctx->strides.data();
  void *out = nullptr;
  // Ownership of `m` passes to torch, on failure too.
  if (torchHandles().api->managed_tensor_to_py_object_no_sync(&m, &out) != 0) throw PyErrorSet();
  return PyRef::steal(static_cast<PyObject *>(out));
}

PyRef exportTensorOnTorchStorage(const Tensor &t) {
  auto it = importedStorages().find(t.storage().get());
  if (it == importedStorages().end() || it->second.dtype != t.dtype() || t.offset() < 0 ||
      std::any_of(t.strides().begin(), t.strides().end(), [](int64_t s) { return s < 0; }))
    return exportTensor(t);
  PyObject *src = it->second.tensor;
  int grad = requiresGrad(src);
  if (grad != 0) { // keep autograd out of it (a view of a leaf that requires grad)
    if (grad < 0) throw PyErrorSet();
    return exportTensor(t);
  }
  PyRef srcOffset = checked(PyObject_CallMethod(src, "storage_offset", nullptr));
  long long offset = PyLong_AsLongLong(srcOffset.get());
  if (offset == -1 && PyErr_Occurred()) throw PyErrorSet();
  return asStrided(src, t, offset + t.offset());
}

PyRef exportOnWholeStorage(const Tensor &t) {
  if (!t.storage() || importedStorages().count(t.storage().get()) || t.offset() < 0 ||
      std::any_of(t.strides().begin(), t.strides().end(), [](int64_t s) { return s < 0; }))
    return exportTensorOnTorchStorage(t);
  // The bytes t spans from its storage's start; a view that spans them all needs nothing more.
  const int64_t item = dtypeSize(t.dtype()), nbytes = t.storage()->nbytes();
  int64_t last = t.offset();
  for (int64_t d = 0; d < t.rank(); ++d) {
    if (t.size(d) == 0) return exportTensor(t); // no elements: nothing to reach past
    last += (t.size(d) - 1) * t.strides()[size_t(d)];
  }
  if ((t.offset() == 0 && (last + 1) * item == nbytes) || nbytes % item != 0)
    return exportTensor(t);
  PyRef whole = exportTensor(Tensor(t.storage(), t.dtype(), {nbytes / item}, {1}, 0));
  return asStrided(whole.get(), t, t.offset());
}

RtValue toRtValue(PyObject *o, const Type *expected) {
  const TypeKind want = expected ? expected->kind() : TypeKind::Object;
  if (o == Py_None) return RtValue();
  if (PyBool_Check(o)) {
    if (want == TypeKind::Tensor) return scalarTensor(o, expected->dtype());
    return RtValue(o == Py_True);
  }
  if (PyLong_Check(o) || PyFloat_Check(o)) {
    if (want == TypeKind::Tensor) return scalarTensor(o, expected->dtype());
    if (PyFloat_Check(o)) return RtValue(PyFloat_AsDouble(o));
    if (want == TypeKind::Float) {
      double d = PyLong_AsDouble(o);
      if (d == -1.0 && PyErr_Occurred()) throw PyErrorSet();
      return RtValue(d);
    }
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow) throw Error(ErrorKind::User, "integer does not fit in 64 bits");
    return RtValue(static_cast<int64_t>(v));
  }
  if (PyUnicode_Check(o)) {
    Py_ssize_t n = 0;
    const char *s = PyUnicode_AsUTF8AndSize(o, &n);
    if (!s) throw PyErrorSet();
    return RtValue(std::string(s, static_cast<size_t>(n)));
  }
  if (PyList_Check(o) || PyTuple_Check(o)) {
    PyRef fast = checked(PySequence_Fast(o, "a list or tuple"));
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(fast.get());
    RtList items;
    items.reserve(static_cast<size_t>(n));
    const bool perElement = expected && expected->kind() == TypeKind::Tuple &&
                            expected->elements().size() == static_cast<size_t>(n);
    for (Py_ssize_t i = 0; i < n; ++i) {
      const Type *et = perElement ? &expected->elements()[static_cast<size_t>(i)]
                       : expected && expected->kind() == TypeKind::List ? &expected->elementType()
                                                                        : nullptr;
      items.push_back(toRtValue(PySequence_Fast_GET_ITEM(fast.get(), i), et));
    }
    return RtValue(std::move(items));
  }
  if (isPlainTensor(o)) return RtValue(importTensor(o));
  Py_INCREF(o);
  return RtValue(OpaqueObject{std::shared_ptr<void>(o, PyObjectDeleter{})});
}

PyRef fromRtValue(const RtValue &v) {
  if (v.isNone()) return PyRef::borrow(Py_None);
  if (v.isTensor()) return exportTensor(v.tensor());
  if (v.isBool()) return PyRef::borrow(v.toBool() ? Py_True : Py_False);
  if (v.isInt()) return checked(PyLong_FromLongLong(v.toInt()));
  if (v.isFloat()) return checked(PyFloat_FromDouble(v.toDouble()));
  if (v.isStr())
    return checked(
        PyUnicode_FromStringAndSize(v.str().data(), static_cast<Py_ssize_t>(v.str().size())));
  if (v.isList()) {
    const RtList &l = v.list();
    PyRef out = checked(PyList_New(static_cast<Py_ssize_t>(l.size())));
    for (size_t i = 0; i < l.size(); ++i)
      PyList_SET_ITEM(out.get(), static_cast<Py_ssize_t>(i), fromRtValue(l[i]).release());
    return out;
  }
  const std::shared_ptr<void> &h = v.object().handle;
  if (h && std::get_deleter<PyObjectDeleter>(h))
    return PyRef::borrow(static_cast<PyObject *>(h.get()));
  PyErr_SetString(PyExc_TypeError, "an opaque run-time object not created from Python");
  throw PyErrorSet();
}

} // namespace xjit::frontend
