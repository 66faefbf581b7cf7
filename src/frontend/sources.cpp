#include "sources.h"

#include "tensor_bridge.h"

#include <unordered_map>

namespace xjit::frontend {

namespace {

std::string reprOf(PyObject *o) {
  if (!o) return "?";
  PyObject *r = PyObject_Repr(o);
  if (!r) {
    PyErr_Clear();
    return "?";
  }
  const char *c = PyUnicode_AsUTF8(r);
  std::string s = c ? c : "?";
  Py_DECREF(r);
  if (!c) PyErr_Clear();
  return s;
}

std::string stepStr(const SourceStep &st) {
  switch (st.kind) {
  case SourceStep::Local:
  case SourceStep::Cell: return "L['" + st.name + "']";
  case SourceStep::CellObject: return "cell(L['" + st.name + "'])";
  case SourceStep::Global: return "G['" + st.name + "']";
  case SourceStep::Attr: return "." + st.name;
  case SourceStep::Item: return "[" + std::to_string(st.index) + "]";
  case SourceStep::ContextValue: return ".get()";
  case SourceStep::DictKey: {
    // Keys that are objects (an optimizer's state is keyed by its parameters) are named by
    // identity: their repr may be long, and equal reprs must not make two sources one.
    PyObject *k = st.key.get();
    if (k && !PyUnicode_Check(k) && !PyLong_Check(k) && !PyBytes_Check(k) && !PyFloat_Check(k) &&
        !PyTuple_Check(k)) {
      char id[32];
      std::snprintf(id, sizeof id, "%p", static_cast<void *>(k));
      return std::string("[<") + Py_TYPE(k)->tp_name + " at " + id + ">]";
    }
    return "[" + reprOf(k) + "]";
  }
  }
  return "?";
}

/// nn.Module subclasses that keep the default attribute protocol (Module.__getattr__ over
/// _parameters/_buffers/_modules, object.__getattribute__), cached per type. Holding a
/// reference to each type keeps its address from being reused by another type.
bool isPlainModuleType(PyTypeObject *tp) {
  static std::unordered_map<PyTypeObject *, bool> cache;
  if (auto it = cache.find(tp); it != cache.end()) return it->second;
  const TorchHandles &t = torchHandles();
  static PyObject *getattrName = internedStr("__getattr__");
  static PyObject *getattributeName = internedStr("__getattribute__");
  static PyObject *objectGetattribute =
      PyDict_GetItemString(PyBaseObject_Type.tp_dict, "__getattribute__");
  bool plain = PyType_IsSubtype(tp, t.moduleType) &&
               _PyType_Lookup(tp, getattrName) == t.moduleGetattr &&
               _PyType_Lookup(tp, getattributeName) == objectGetattribute;
  Py_INCREF(tp);
  cache.emplace(tp, plain);
  return plain;
}

/// getattr(module, name) without running Module.__getattr__ in Python: exactly the lookup
/// order of the default protocol when the type has no attribute of that name. Returns a new
/// reference or nullptr with an error set.
PyObject *moduleGetAttr(PyObject *obj, PyObject *name) {
  static PyObject *keys[3] = {internedStr("_parameters"), internedStr("_buffers"),
                              internedStr("_modules")};
  if (_PyType_Lookup(Py_TYPE(obj), name) == nullptr) {
    if (PyObject **dictPtr = _PyObject_GetDictPtr(obj); dictPtr && *dictPtr) {
      PyObject *dict = *dictPtr;
      if (PyObject *v = PyDict_GetItemWithError(dict, name)) {
        Py_INCREF(v);
        return v;
      }
      for (PyObject *k : keys) {
        PyObject *d = PyDict_GetItemWithError(dict, k);
        if (d && PyDict_Check(d))
          if (PyObject *v = PyDict_GetItemWithError(d, name)) {
            Py_INCREF(v);
            return v;
          }
      }
      if (PyErr_Occurred()) return nullptr;
    }
  }
  return PyObject_GetAttr(obj, name);
}

PyObject *getItem(PyObject *obj, int64_t index, PyObject *indexObj) {
  if (PyList_CheckExact(obj) || PyTuple_CheckExact(obj)) {
    Py_ssize_t n = Py_SIZE(obj), i = index < 0 ? index + n : index;
    if (i < 0 || i >= n) {
      PyErr_SetString(PyExc_IndexError, "index out of range");
      return nullptr;
    }
    PyObject *v = PyList_CheckExact(obj) ? PyList_GET_ITEM(obj, i) : PyTuple_GET_ITEM(obj, i);
    Py_INCREF(v);
    return v;
  }
  if (torchLoaded()) {
    // nn.ModuleList: modules live in _modules under str(index) (ModuleList.__getitem__).
    static PyObject *getitemName = internedStr("__getitem__");
    static PyObject *modulesName = internedStr("_modules");
    if (_PyType_Lookup(Py_TYPE(obj), getitemName) == torchHandles().moduleListGetitem) {
      PyObject **dictPtr = _PyObject_GetDictPtr(obj);
      PyObject *mods =
          dictPtr && *dictPtr ? PyDict_GetItemWithError(*dictPtr, modulesName) : nullptr;
      if (mods && PyDict_Check(mods)) {
        Py_ssize_t n = PyDict_GET_SIZE(mods), i = index < 0 ? index + n : index;
        if (i >= 0 && i < n) {
          PyRef key = PyRef::steal(PyUnicode_FromFormat("%zd", i));
          if (PyObject *v = key ? PyDict_GetItemWithError(mods, key.get()) : nullptr) {
            Py_INCREF(v);
            return v;
          }
        }
      }
      if (PyErr_Occurred()) return nullptr;
    }
  }
  return PyObject_GetItem(obj, indexObj);
}

} // namespace

std::string sourceStr(const Source &s) {
  std::string out;
  for (const SourceStep &st : s)
    out += stepStr(st);
  return out;
}

int SourceTable::add(const Source &s) {
  int parent = -1;
  for (const SourceStep &st : s) {
    auto [it, inserted] = bySignature_.try_emplace(
        Signature{parent, int(st.kind), st.index, stepStr(st)}, static_cast<int>(nodes_.size()));
    if (inserted) {
      const std::string &piece = std::get<3>(it->first);
      Node n{parent, st.kind, st.index, {}, {}, parent < 0 ? piece : nodes_[parent].text + piece};
      if (!st.name.empty()) n.name = PyRef::steal(internedStr(st.name.c_str()));
      if (st.kind == SourceStep::DictKey)
        n.key = st.key;
      else if (st.kind == SourceStep::Item)
        n.key = checked(PyLong_FromLongLong(st.index));
      nodes_.push_back(std::move(n));
    }
    parent = it->second;
  }
  if (parent < 0) throw std::invalid_argument("an empty source");
  return parent;
}

PyObject *frameSlot(const FrameView &f, int64_t index, bool cell) {
  if (index < 0 || index >= f.nlocalsplus) return nullptr;
  const int firstFree = f.nlocalsplus - f.code->co_nfreevars;
  if (index >= firstFree) {
    PyObject *closure = PyFunction_GET_CLOSURE(f.function);
    if (!closure || !PyTuple_Check(closure) || index - firstFree >= PyTuple_GET_SIZE(closure))
      return nullptr;
    return PyCell_GET(PyTuple_GET_ITEM(closure, index - firstFree));
  }
  PyObject *v = f.localsplus[index];
  if (cell && v && PyCell_Check(v)) return PyCell_GET(v);
  return v;
}

PyObject *frameCell(const FrameView &f, int64_t index) {
  const int firstFree = f.nlocalsplus - f.code->co_nfreevars;
  if (index < firstFree || index >= f.nlocalsplus) return nullptr;
  PyObject *closure = PyFunction_GET_CLOSURE(f.function);
  if (!closure || !PyTuple_Check(closure) || index - firstFree >= PyTuple_GET_SIZE(closure))
    return nullptr;
  return PyTuple_GET_ITEM(closure, index - firstFree);
}

SourceValues::SourceValues(const SourceTable &table, const FrameView &frame)
    : table_(table), frame_(frame), slots_(table.size()) {}

SourceValues::~SourceValues() {
  for (Slot &s : slots_)
    Py_XDECREF(s.value);
}

PyObject *SourceValues::evaluate(const SourceTable::Node &n, PyObject *parent) {
  switch (n.kind) {
  case SourceStep::Local:
  case SourceStep::Cell: {
    PyObject *v = frameSlot(frame_, n.index, n.kind == SourceStep::Cell);
    Py_XINCREF(v);
    return v;
  }
  case SourceStep::CellObject: {
    PyObject *v = frameCell(frame_, n.index);
    Py_XINCREF(v);
    return v;
  }
  case SourceStep::Global: {
    PyObject *v = PyDict_GetItemWithError(frame_.globals, n.name.get());
    if (!v && !PyErr_Occurred() && frame_.builtins && PyDict_Check(frame_.builtins))
      v = PyDict_GetItemWithError(frame_.builtins, n.name.get());
    Py_XINCREF(v);
    return v;
  }
  case SourceStep::Attr:
    if (torchLoaded() && isPlainModuleType(Py_TYPE(parent)))
      return moduleGetAttr(parent, n.name.get());
    return PyObject_GetAttr(parent, n.name.get());
  case SourceStep::Item: return getItem(parent, n.index, n.key.get());
  case SourceStep::DictKey:
    // A dict subclass's own storage, as the analyzer read it: an overridden __getitem__ (the
    // analyzer inlines it) may compute something else, e.g. transformers' ACT2FN builds a new
    // module per lookup from the class stored under the key.
    if (PyDict_Check(parent)) {
      PyObject *v = PyDict_GetItemWithError(parent, n.key.get());
      Py_XINCREF(v);
      return v;
    }
    return PyObject_GetItem(parent, n.key.get());
  case SourceStep::ContextValue: {
    PyObject *v = nullptr; // stays null (a missing value) when the variable has none
    if (!PyContextVar_CheckExact(parent) || PyContextVar_Get(parent, nullptr, &v) < 0)
      return nullptr;
    return v;
  }
  }
  return nullptr;
}

PyObject *SourceValues::get(int slot) {
  Slot &s = slots_[static_cast<size_t>(slot)];
  if (s.state == 0) {
    const SourceTable::Node &n = table_.nodes_[static_cast<size_t>(slot)];
    PyObject *parent = n.parent >= 0 ? get(n.parent) : nullptr;
    s.value = (n.parent < 0 || parent) ? evaluate(n, parent) : nullptr;
    s.state = s.value ? 1 : 2;
    if (!s.value) PyErr_Clear();
  }
  return s.value;
}

const dlpack::DLTensor *SourceValues::tensor(int slot) {
  Slot &s = slots_[static_cast<size_t>(slot)];
  if (s.tstate == 0) {
    PyObject *v = get(slot);
    s.tstate = 2;
    if (v && isPlainTensor(v)) {
      if (tensorView(v, &s.dl))
        s.tstate = 1;
      else
        PyErr_Clear();
    }
  }
  return s.tstate == 1 ? &s.dl : nullptr;
}

} // namespace xjit::frontend
