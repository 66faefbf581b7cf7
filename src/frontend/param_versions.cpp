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

bool weightCacheForced() {
  static const bool on = [] {
    const char *v = std::getenv("XJIT_WEIGHT_CACHE");
    return v && std::strcmp(v, "1") == 0;
  }();
  return on;
}

void ParameterVersions::release(Seen &s) {
#ifdef XJIT_FRONTEND_HAVE_RUNTIME
  backend::retireContentTag(s.tag); // the kernels' copies made under it go too
#endif
  // Dropping our (only) reference to the weakref unregisters its callback.
  Py_XDECREF(s.param);
  Py_XDECREF(s.pin);
  s = Seen{};
}

ParameterVersions::~ParameterVersions() {
  if (!Py_IsInitialized()) return; // interpreter shutdown: the references no longer matter
  for (Seen &s : seen_)
    release(s);
  Py_XDECREF(onDeath_);
}

PyObject *ParameterVersions::forget(PyObject *self, PyObject *weakref) {
  auto *owner = static_cast<ParameterVersions *>(PyCapsule_GetPointer(self, nullptr));
  if (!owner) return nullptr;
  // Only the pin goes now: the weakref itself (dead from now on, so the next call's check fails
  // and releases it) must not be freed inside its own callback.
  for (Seen &s : owner->seen_)
    if (s.param == weakref) {
#ifdef XJIT_FRONTEND_HAVE_RUNTIME
      backend::retireContentTag(s.tag);
#endif
      Py_CLEAR(s.pin);
      s.tag = 0;
    }
  Py_RETURN_NONE;
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
  if (!s.param || PyWeakref_GetObject(s.param) != param || s.data != data || s.version != version) {
    release(s);
    if (!onDeath_) {
      static PyMethodDef def = {"xjit_parameter_died", &ParameterVersions::forget, METH_O, nullptr};
      PyObject *self = PyCapsule_New(this, nullptr, nullptr);
      onDeath_ = self ? PyCFunction_New(&def, self) : nullptr;
      Py_XDECREF(self);
      if (!onDeath_) {
        PyErr_Clear();
        return;
      }
    }
    // The storage object, not a DLPack export: an export references the parameter's
    // TensorImpl, whose storage `.data = ...` swaps in place.
    static PyObject *storageName = internedStr("untyped_storage");
    PyObject *pin = PyObject_CallMethodNoArgs(param, storageName);
    if (!pin) {
      PyErr_Clear();
      return; // not pinned: no tag (the kernels reorder per call)
    }
    PyObject *weak = PyWeakref_NewRef(param, onDeath_);
    if (!weak) {
      PyErr_Clear();
      Py_DECREF(pin);
      return;
    }
    s = Seen{weak, data, version, backend::newContentTag(), pin};
  }
  tags.add(data, s.tag);
#endif
}

} // namespace xjit::frontend
