#include "py_util.h"

namespace xjit::frontend {

std::string takePyErrorMessage() {
  PyObject *type = nullptr, *value = nullptr, *tb = nullptr;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  std::string out = "unknown Python error";
  if (type) {
    out = reinterpret_cast<PyTypeObject *>(type)->tp_name;
    if (PyObject *s = value ? PyObject_Str(value) : nullptr) {
      if (const char *c = PyUnicode_AsUTF8(s); c && *c) out += std::string(": ") + c;
      Py_DECREF(s);
    }
  }
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
  PyErr_Clear();
  return out;
}

std::string takePyErrorType() {
  PyObject *type = nullptr, *value = nullptr, *tb = nullptr;
  PyErr_Fetch(&type, &value, &tb);
  std::string name = type ? reinterpret_cast<PyTypeObject *>(type)->tp_name : "error";
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
  return name;
}

std::string utf8(PyObject *s) {
  if (!s || !PyUnicode_Check(s)) return "";
  const char *c = PyUnicode_AsUTF8(s);
  if (!c) {
    PyErr_Clear();
    return "";
  }
  return c;
}

std::string moduleNameOf(PyObject *o) {
  PyObject *m = PyObject_GetAttrString(o, "__module__");
  if (!m) {
    PyErr_Clear();
    return "";
  }
  std::string s = utf8(m);
  Py_DECREF(m);
  return s;
}

PyObject *dictKeysInOrder(PyObject *d) {
  if (!PyODict_Check(d)) return PyDict_Keys(d);
  // OrderedDict's own iterator (C), not a subclass's keys() override.
  PyObject *it = PyODict_Type.tp_iter(d);
  if (!it) return nullptr;
  PyObject *keys = PySequence_List(it);
  Py_DECREF(it);
  return keys;
}

PyObject *internedStr(const char *s) {
  PyObject *o = PyUnicode_InternFromString(s);
  if (!o) throw PyErrorSet();
  return o; // immortal for our purposes: the reference is never dropped
}

} // namespace xjit::frontend
