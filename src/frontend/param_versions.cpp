// Content tags for a compiled entry's parameters, from PyTorch's version counters
// (param_versions.h).
#include "param_versions.h"

#include "tensor_bridge.h"

#include <cstdlib>
#include <cstring>

namespace xjit::frontend {
namespace {

/// tensor._version, or -1 with a Python error set. The attribute is a data descriptor of
/// torch's tensor base class, called directly (no MRO walk per call), as requiresGrad does.
[[maybe_unused]] int64_t tensorVersion(PyObject *tensor) {
  static PyObject *name = internedStr("_version");
  static PyObject *descr = [] {
    PyObject *d = _PyType_Lookup(torchHandles().tensorType, name);
    Py_XINCREF(d);
    return d;
  }();
  PyObject *r = descr && Py_TYPE(descr)->tp_descr_get
                    ? Py_TYPE(descr)->tp_descr_get(descr, tensor,
                                                   reinterpret_cast<PyObject *>(Py_TYPE(tensor)))
                    : PyObject_GetAttr(tensor, name);
  if (!r) return -1;
  long long v = PyLong_AsLongLong(r);
  Py_DECREF(r);
  if (v == -1 && PyErr_Occurred()) return -1;
  return v;
}

} // namespace

bool weightCacheEnabled() {
  static const bool on = [] {
    const char *v = std::getenv("XJIT_WEIGHT_CACHE");
    return !v || std::strcmp(v, "0") != 0;
  }();
  return on;
}

void ParameterVersions::release(Seen &s) {
  Py_XDECREF(s.pin);
  Py_XDECREF(s.param);
  s = Seen{};
}

ParameterVersions::~ParameterVersions() {
  if (!Py_IsInitialized()) return; // interpreter shutdown: the references no longer matter
  for (Seen &s : seen_)
    release(s);
}

void ParameterVersions::tag(size_t input, PyObject *param, const void *data,
                            backend::ContentTags &tags) {
#ifndef XJIT_FRONTEND_HAVE_RUNTIME
  // Tags come from the backend's counter; without the runtime (no backend) nothing reads them.
  (void)input, (void)param, (void)data, (void)tags;
#else
  const int64_t version = tensorVersion(param);
  if (version < 0) {
    PyErr_Clear();
    return;
  }
  if (seen_.size() <= input) seen_.resize(input + 1);
  Seen &s = seen_[input];
  if (s.param != param || s.data != data || s.version != version) {
    release(s);
    // The storage object, not a DLPack export: an export references the parameter's
    // TensorImpl, whose storage `.data = ...` swaps in place.
    static PyObject *storageName = internedStr("untyped_storage");
    PyObject *pin = PyObject_CallMethodNoArgs(param, storageName);
    if (!pin) {
      PyErr_Clear();
      return; // not pinned: no tag (the kernels reorder per call)
    }
    Py_INCREF(param);
    s = Seen{param, data, version, backend::newContentTag(), pin};
  }
  tags.add(data, s.tag);
#endif
}

} // namespace xjit::frontend
