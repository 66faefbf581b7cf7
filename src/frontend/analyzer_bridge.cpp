// PyTorch bridge of the analyzer (see analyzer_bridge.h).
#include "analyzer_bridge.h"
#include "py_util.h"

#include <array>
#include <cstring>

namespace xjit::frontend {

void throwPyError(const std::string &what) {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  std::string msg = what;
  if (value) {
    PyObject *s = PyObject_Str(value);
    const char *tn = type ? reinterpret_cast<PyTypeObject *>(type)->tp_name : "error";
    msg += std::string(": ") + tn;
    if (s && PyUnicode_Check(s)) msg += std::string(": ") + PyUnicode_AsUTF8(s);
    Py_XDECREF(s);
  }
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
  PyErr_Clear();
  throw PyError(msg);
}

PyRef check(PyObject *o, const char *what) {
  if (!o) throwPyError(what);
  return PyRef::steal(o);
}

namespace {

struct TorchHandles {
  PyRef torch, tensorType, parameterType, bufferType, moduleType, empty;
  std::array<PyRef, kNumDTypes> dtypes;
};

const TorchHandles &handles() {
  static TorchHandles *h = [] {
    auto *t = new TorchHandles();
    t->torch = check(PyImport_ImportModule("torch"), "import torch");
    t->tensorType = check(PyObject_GetAttrString(t->torch.get(), "Tensor"), "torch.Tensor");
    PyRef nn = check(PyImport_ImportModule("torch.nn"), "import torch.nn");
    t->parameterType = check(PyObject_GetAttrString(nn.get(), "Parameter"), "nn.Parameter");
    t->moduleType = check(PyObject_GetAttrString(nn.get(), "Module"), "nn.Module");
    if (PyObject *b = PyObject_GetAttrString(nn.get(), "Buffer"))
      t->bufferType = PyRef::steal(b);
    else
      PyErr_Clear();
    t->empty = check(PyObject_GetAttrString(t->torch.get(), "empty"), "torch.empty");
    static const char *const names[kNumDTypes] = {"bool",    "uint8",  "int8",    "int16",
                                                  "int32",   "int64",  "float16", "bfloat16",
                                                  "float32", "float64"};
    for (int i = 0; i < kNumDTypes; ++i)
      t->dtypes[i] = check(PyObject_GetAttrString(t->torch.get(), names[i]), names[i]);
    return t;
  }();
  return *h;
}

int64_t pyInt(PyObject *o, const char *what) {
  int64_t v = PyLong_AsLongLong(o);
  if (v == -1 && PyErr_Occurred()) throwPyError(what);
  return v;
}

std::vector<int64_t> intTuple(PyObject *seq, const char *what) {
  PyRef fast = check(PySequence_Fast(seq, what), what);
  Py_ssize_t n = PySequence_Fast_GET_SIZE(fast.get());
  std::vector<int64_t> out(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i)
    out[static_cast<size_t>(i)] = pyInt(PySequence_Fast_GET_ITEM(fast.get(), i), what);
  return out;
}

// Python side of fallback calls: rebuilds arguments from a compact template.
constexpr const char *kFallbackSource = R"PY(
def _xjit_make_fallback(fn, args, kwargs):
    def build(t, ops):
        k = t[0]
        if k == 0:
            return ops[t[1]]
        if k == 1:
            return t[1]
        items = [build(x, ops) for x in t[1]]
        return tuple(items) if k == 2 else items
    def call(*ops):
        return fn(*[build(t, ops) for t in args], **{k: build(t, ops) for k, t in kwargs})
    call.__qualname__ = call.__name__ = "xjit_fallback_" + getattr(fn, "__name__", "call")
    call.__wrapped__ = fn
    return call

def _xjit_drop_nones(call, nones):
    # The tensors of a tuple result that holds None at `nones`, as at capture (F.multi_head_
    # attention_forward's weights with need_weights=False); None elsewhere raises, and the
    # frame runs in Python.
    def dropped(*ops):
        r = call(*ops)
        if tuple(i for i, x in enumerate(r) if x is None) != nones:
            raise RuntimeError("a PyTorch fallback returned None at other positions than at capture")
        kept = tuple(x for x in r if x is not None)
        return kept[0] if len(kept) == 1 else kept  # one result: a tensor, as other fallbacks
    dropped.__qualname__ = dropped.__name__ = call.__name__
    dropped.__wrapped__ = call.__wrapped__
    return dropped
)PY";

PyObject *fallbackHelper(const char *name) {
  static PyObject *globals = [] {
    PyObject *g = check(PyDict_New(), "dict").release(); // kept for good
    PyDict_SetItemString(g, "__builtins__", PyEval_GetBuiltins());
    PyRef code = check(Py_CompileString(kFallbackSource, "<xjit-fallback>", Py_file_input),
                       "compiling the fallback helper");
    check(PyEval_EvalCode(code.get(), g, g), "fallback helper");
    return g;
  }();
  return PyDict_GetItemString(globals, name); // borrowed, alive with `globals`
}

PyObject *fallbackMaker() { return fallbackHelper("_xjit_make_fallback"); }

PyRef templateToPython(const ArgTemplate &t) {
  switch (t.kind) {
  case ArgTemplate::Operand:
    return check(Py_BuildValue("(iL)", 0, static_cast<long long>(t.operand)), "template");
  case ArgTemplate::Constant:
    return check(Py_BuildValue("(iO)", 1, t.constant.get() ? t.constant.get() : Py_None),
                 "template");
  case ArgTemplate::Tuple:
  case ArgTemplate::List: {
    PyRef items = check(PyTuple_New(static_cast<Py_ssize_t>(t.items.size())), "template");
    for (size_t i = 0; i < t.items.size(); ++i)
      PyTuple_SET_ITEM(items.get(), static_cast<Py_ssize_t>(i),
                       templateToPython(t.items[i]).release());
    return check(Py_BuildValue("(iO)", t.kind == ArgTemplate::Tuple ? 2 : 3, items.get()),
                 "template");
  }
  }
  return PyRef::borrow(Py_None);
}

} // namespace

PyObject *torchModule() { return handles().torch.get(); }
PyObject *torchTensorType() { return handles().tensorType.get(); }
PyObject *torchParameterType() { return handles().parameterType.get(); }
PyObject *torchModuleType() { return handles().moduleType.get(); }

KeepRngState::KeepRngState(bool keep) {
  if (!keep) return;
  state_ = PyRef::steal(PyObject_CallMethod(torchModule(), "get_rng_state", nullptr));
  if (!state_) PyErr_Clear(); // nothing to put back
}

KeepRngState::~KeepRngState() {
  if (!state_) return;
  PyObject *type, *value, *tb; // a pending error (the call failed) stays pending
  PyErr_Fetch(&type, &value, &tb);
  PyObject *r = PyObject_CallMethod(torchModule(), "set_rng_state", "O", state_.get());
  if (!r) PyErr_Clear();
  Py_XDECREF(r);
  PyErr_Restore(type, value, tb);
}

bool isTorchDtypeInfoType(PyObject *o) {
  auto lookup = [](const char *name) {
    PyObject *t = PyObject_GetAttrString(torchModule(), name); // held for the process
    if (!t) PyErr_Clear();
    return t;
  };
  static PyObject *const finfo = lookup("finfo");
  static PyObject *const iinfo = lookup("iinfo");
  return o && ((finfo && o == finfo) || (iinfo && o == iinfo));
}

bool isTorchDtypeInfo(PyObject *o) {
  return o && isTorchDtypeInfoType(reinterpret_cast<PyObject *>(Py_TYPE(o)));
}

std::optional<DType> dtypeFromTorch(PyObject *dtype) {
  const TorchHandles &h = handles();
  for (int i = 0; i < kNumDTypes; ++i)
    if (h.dtypes[i].get() == dtype) return static_cast<DType>(i);
  return std::nullopt;
}

PyObject *torchDtype(DType d) { return handles().dtypes[static_cast<size_t>(d)].get(); }

std::optional<Device> deviceFromTorch(PyObject *device) {
  PyRef type = PyRef::steal(PyObject_GetAttrString(device, "type"));
  PyRef index = PyRef::steal(PyObject_GetAttrString(device, "index"));
  if (!type || !index || !PyUnicode_Check(type.get())) {
    PyErr_Clear();
    return std::nullopt;
  }
  Device d;
  d.kind = PyUnicode_AsUTF8(type.get());
  d.index = index.get() == Py_None ? -1 : static_cast<int>(PyLong_AsLong(index.get()));
  return d;
}

PyRef torchDevice(const Device &d) {
  PyRef dev = check(PyObject_GetAttrString(torchModule(), "device"), "torch.device");
  return check(PyObject_CallFunction(dev.get(), "s", d.str().c_str()), "torch.device()");
}

bool isTensor(PyObject *o) {
  int r = PyObject_IsInstance(o, torchTensorType());
  if (r < 0) PyErr_Clear();
  return r > 0;
}

std::optional<TensorMeta> readTensorMeta(PyObject *t, std::string *why) {
  const TorchHandles &h = handles();
  PyObject *type = reinterpret_cast<PyObject *>(Py_TYPE(t));
  if (type != h.tensorType.get() && type != h.parameterType.get() &&
      !(h.bufferType && type == h.bufferType.get())) {
    *why = std::string("tensor subclass ") + Py_TYPE(t)->tp_name;
    return std::nullopt;
  }
  // (Attribute names interned once, torch.strided compared by identity: a capture reads every
  // parameter of a model here.)
  static PyObject *layoutAttr = internedStr("layout"), *dtypeAttr = internedStr("dtype"),
                  *quantizedAttr = internedStr("is_quantized"), *shapeAttr = internedStr("shape"),
                  *strideAttr = internedStr("stride"), *deviceAttr = internedStr("device"),
                  *requiresGradAttr = internedStr("requires_grad");
  static PyObject *strided = check(PyObject_GetAttrString(torchModule(), "strided"),
                                   "torch.strided")
                                 .release(); // held for the process
  PyRef layout = check(PyObject_GetAttr(t, layoutAttr), "tensor.layout");
  if (layout.get() != strided) {
    PyRef layoutStr = check(PyObject_Str(layout.get()), "str(layout)");
    *why = std::string("tensor with layout ") + PyUnicode_AsUTF8(layoutStr.get());
    return std::nullopt;
  }
  TensorMeta m;
  PyRef dtype = check(PyObject_GetAttr(t, dtypeAttr), "tensor.dtype");
  std::optional<DType> d = dtypeFromTorch(dtype.get());
  if (!d) {
    PyRef s = check(PyObject_Str(dtype.get()), "str(dtype)");
    *why = std::string("tensor of dtype ") + PyUnicode_AsUTF8(s.get());
    return std::nullopt;
  }
  m.dtype = *d;
  if (PyRef q = PyRef::steal(PyObject_GetAttr(t, quantizedAttr)); !q)
    PyErr_Clear();
  else if (q.get() == Py_True) {
    *why = "quantized tensor";
    return std::nullopt;
  }
  PyRef shape = check(PyObject_GetAttr(t, shapeAttr), "tensor.shape");
  m.sizes = intTuple(shape.get(), "tensor.shape");
  PyRef strides = check(PyObject_CallMethodNoArgs(t, strideAttr), "tensor.stride()");
  m.strides = intTuple(strides.get(), "tensor.stride()");
  PyRef dev = check(PyObject_GetAttr(t, deviceAttr), "tensor.device");
  std::optional<Device> device = deviceFromTorch(dev.get());
  if (!device) {
    *why = "tensor on an unknown device";
    return std::nullopt;
  }
  m.device = *device;
  PyRef rg = check(PyObject_GetAttr(t, requiresGradAttr), "tensor.requires_grad");
  m.requiresGrad = rg.get() == Py_True;
  return m;
}

PyRef makeFallbackCallable(PyObject *fn, const std::vector<ArgTemplate> &args,
                           const std::vector<std::pair<std::string, ArgTemplate>> &kwargs) {
  PyRef a = check(PyTuple_New(static_cast<Py_ssize_t>(args.size())), "tuple");
  for (size_t i = 0; i < args.size(); ++i)
    PyTuple_SET_ITEM(a.get(), static_cast<Py_ssize_t>(i), templateToPython(args[i]).release());
  PyRef kw = check(PyTuple_New(static_cast<Py_ssize_t>(kwargs.size())), "tuple");
  for (size_t i = 0; i < kwargs.size(); ++i) {
    PyRef t = templateToPython(kwargs[i].second);
    PyTuple_SET_ITEM(
        kw.get(), static_cast<Py_ssize_t>(i),
        check(Py_BuildValue("(sO)", kwargs[i].first.c_str(), t.get()), "kw").release());
  }
  return check(PyObject_CallFunctionObjArgs(fallbackMaker(), fn, a.get(), kw.get(), nullptr),
               "making a fallback callable");
}

PyRef dropNones(PyObject *callable, const std::vector<Py_ssize_t> &nones) {
  PyRef positions = check(PyTuple_New(static_cast<Py_ssize_t>(nones.size())), "tuple");
  for (size_t i = 0; i < nones.size(); ++i)
    PyTuple_SET_ITEM(positions.get(), static_cast<Py_ssize_t>(i), PyLong_FromSsize_t(nones[i]));
  return check(PyObject_CallFunctionObjArgs(fallbackHelper("_xjit_drop_nones"), callable,
                                            positions.get(), nullptr),
               "wrapping a fallback callable");
}

PyRef metaTensor(DType dtype, const std::vector<int64_t> &sizes) {
  PyRef shape = check(PyTuple_New(static_cast<Py_ssize_t>(sizes.size())), "tuple");
  for (size_t i = 0; i < sizes.size(); ++i)
    PyTuple_SET_ITEM(shape.get(), static_cast<Py_ssize_t>(i), PyLong_FromLongLong(sizes[i]));
  PyRef args = check(PyTuple_Pack(1, shape.get()), "tuple");
  PyRef kwargs = check(Py_BuildValue("{sOss}", "dtype", torchDtype(dtype), "device", "meta"), "kw");
  return check(PyObject_Call(handles().empty.get(), args.get(), kwargs.get()), "torch.empty(meta)");
}

} // namespace xjit::frontend
