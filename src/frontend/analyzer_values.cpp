// Python objects in the analysis: wrapping objects reachable from the frame (with their guards),
// globals, attribute access on modules and objects, truth values and sequences.
#include "analyzer.h"

#include <structmember.h>

#include <cstdio>
#include <cstring>

namespace xjit::frontend {

namespace {

std::string reprOf(PyObject *o) {
  PyObject *r = PyObject_Repr(o);
  if (!r) {
    PyErr_Clear();
    return "<?>";
  }
  std::string s = utf8(r);
  Py_DECREF(r);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

/// What an identity guard shows of its object: repr() for classes and built-in types' objects
/// (modules, functions: short and telling), else "<Type object at 0x...>". A Python-level
/// __repr__ can be costly: nn.Module's walks every submodule (GPT-2's is ~10 KB), and a
/// capture makes one identity guard per module it reads: 10% of GPT-2's capture went there.
std::string identityRepr(PyObject *o) {
  if (PyType_Check(o) || !PyType_HasFeature(Py_TYPE(o), Py_TPFLAGS_HEAPTYPE)) return reprOf(o);
  char address[32];
  std::snprintf(address, sizeof address, "%p", static_cast<void *>(o));
  return std::string("<") + Py_TYPE(o)->tp_name + " object at " + address + ">";
}

SourceStep itemStep(int64_t i) { return SourceStep{SourceStep::Item, i, "", {}}; }

// Immutable values whose equality is their identity for the analysis: they can be folded and
// guarded with Equals.
bool isScalarConstant(PyObject *o) {
  return o == Py_None || PyBool_Check(o) || PyLong_CheckExact(o) || PyFloat_CheckExact(o) ||
         PyUnicode_CheckExact(o) || PyBytes_CheckExact(o) || PyComplex_CheckExact(o) ||
         o == Py_Ellipsis;
}

bool isConstantTuple(PyObject *o) {
  if (!PyTuple_Check(o)) return false;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(o); ++i) {
    PyObject *it = PyTuple_GET_ITEM(o, i);
    if (!isScalarConstant(it) && !isConstantTuple(it)) return false;
  }
  return true;
}

PyObject *typeLookup(PyObject *type, const std::string &name) {
  PyRef n = check(PyUnicode_FromString(name.c_str()), "str");
  return _PyType_Lookup(reinterpret_cast<PyTypeObject *>(type), n.get()); // borrowed
}

bool isDataDescriptor(PyObject *d) { return Py_TYPE(d)->tp_descr_set != nullptr; }

} // namespace

std::string sourceKey(const Source &s) { return sourceStr(s); }

const char *varKindName(VarKind k) {
  switch (k) {
  case VarKind::Null: return "NULL";
  case VarKind::Object: return "object";
  case VarKind::Tensor: return "tensor";
  case VarKind::SymInt: return "int";
  case VarKind::SymFloat: return "float";
  case VarKind::Tuple: return "tuple";
  case VarKind::List: return "list";
  case VarKind::Dict: return "dict";
  case VarKind::Slice: return "slice";
  case VarKind::Module: return "module";
  case VarKind::Function: return "function";
  case VarKind::Bound: return "method";
  case VarKind::Partial: return "functools.partial";
  case VarKind::Cell: return "cell";
  case VarKind::Iterator: return "iterator";
  case VarKind::GradMode: return "grad mode context";
  case VarKind::GradExit: return "grad mode exit";
  case VarKind::AutocastMode: return "autocast context";
  case VarKind::AutocastExit: return "autocast exit";
  case VarKind::Super: return "super";
  case VarKind::Dataclass: return "dataclass instance";
  case VarKind::Instance: return "instance";
  }
  return "?";
}

// ---------------------------------------------------------------------------------------------
// Constants

VarPtr Analyzer::constant(PyObject *o) { return std::make_shared<ObjectVar>(PyRef::borrow(o)); }

VarPtr Analyzer::constantSteal(PyObject *o) {
  if (!o) throwPyError("evaluating a constant");
  return std::make_shared<ObjectVar>(PyRef::steal(o));
}

VarPtr Analyzer::frameSet(PyRef set) {
  VarPtr &v = frameSets_[set.get()];
  if (!v) v = std::make_shared<ObjectVar>(std::move(set)); // (it keeps the set alive)
  return v;
}

VarPtr Analyzer::makeFrameSet(const std::vector<VarPtr> &items) {
  VarPtr set = frameSet(check(PySet_New(nullptr), "set()"));
  for (const VarPtr &item : items)
    addToFrameSet(set, item);
  return set;
}

void Analyzer::addToFrameSet(const VarPtr &set, const VarPtr &item) {
  auto *o = as<ObjectVar>(set);
  if (!o || !isFrameSet(o->obj.get())) fail("internal: adding to a set not made in the frame");
  PyRef k = asPython(item);
  // A tensor hashes by identity: the set's contents would depend on run-time objects.
  if (!k || isTensor(k.get())) fail("a set of values known only at run time");
  if (PySet_Add(o->obj.get(), k.get()) < 0) {
    PyErr_Clear();
    fail(std::string("a set of unhashable ") + Py_TYPE(k.get())->tp_name + " values");
  }
}

VarPtr Analyzer::none() { return constant(Py_None); }
VarPtr Analyzer::boolean(bool b) { return constant(b ? Py_True : Py_False); }
VarPtr Analyzer::integer(int64_t v) { return constantSteal(PyLong_FromLongLong(v)); }

bool Analyzer::isTrustedModuleName(const std::string &name) const {
  static const char *const roots[] = {
      "torch",     "math",        "operator",    "functools",
      "itertools", "collections", "typing",      "typing_extensions",
      "abc",       "enum",        "builtins",    "numbers",
      "warnings",  "inspect",     "dataclasses", "types",
      "copy",      "_operator",   "_functools",  "_collections_abc",
      "numpy",     "contextlib",  "re",          "string",
      "weakref"};
  std::string root = name.substr(0, name.find('.'));
  for (const char *r : roots)
    if (root == r) return true;
  return false;
}

bool Analyzer::isModuleObject(PyObject *o) {
  int r = PyObject_IsInstance(o, torchModuleType());
  if (r < 0) PyErr_Clear();
  return r > 0;
}

// ---------------------------------------------------------------------------------------------
// Guards

void Analyzer::addGuard(Guard g) {
  std::string key = std::to_string(g.kind) + ":" +
                    (g.kind == Guard::SizeAtMost ? g.lhs + "<=" + g.rhs : sourceKey(g.source));
  if (g.kind == Guard::NotIn) key += ":" + utf8(g.object.get());
  if (g.kind == Guard::FloatCompare) key += ":" + g.description;
  if (!guardKeys_.insert(key).second) return;
  guards_.push_back(std::move(g));
}

void Analyzer::guardType(const Source &src, PyObject *type) {
  Guard g;
  g.kind = Guard::TypeIs;
  g.source = src;
  g.object = PyRef::borrow(type);
  g.description = sourceKey(src) + ": type is " + reinterpret_cast<PyTypeObject *>(type)->tp_name;
  addGuard(std::move(g));
}

void Analyzer::guardEquals(const Source &src, PyObject *value) {
  guardType(src, reinterpret_cast<PyObject *>(Py_TYPE(value)));
  Guard g;
  g.kind = Guard::Equals;
  g.source = src;
  g.object = PyRef::borrow(value);
  g.description = sourceKey(src) + " == " + reprOf(value);
  addGuard(std::move(g));
}

void Analyzer::guardId(const Source &src, PyObject *value) {
  Guard g;
  g.kind = Guard::IdIs;
  g.source = src;
  g.object = PyRef::borrow(value);
  g.description = sourceKey(src) + " is " + identityRepr(value);
  addGuard(std::move(g));
}

void Analyzer::guardLen(const Source &src, int64_t n) {
  Guard g;
  g.kind = Guard::LenIs;
  g.source = src;
  g.length = n;
  g.description = "len(" + sourceKey(src) + ") == " + std::to_string(n);
  addGuard(std::move(g));
}

void Analyzer::guardNotIn(const Source &src, const std::string &name) {
  Guard g;
  g.kind = Guard::NotIn;
  g.source = src;
  g.object = check(PyUnicode_FromString(name.c_str()), "str");
  g.description = "'" + name + "' not in " + sourceKey(src);
  addGuard(std::move(g));
}

bool Analyzer::sharedSource(const Source &src) const {
  if (opts_.sharedModules.empty()) return false;
  std::string key = sourceKey(src);
  for (const std::string &root : opts_.sharedModules)
    if (key.compare(0, root.size(), root) == 0 &&
        (key.size() == root.size() || key[root.size()] == '.' || key[root.size()] == '['))
      return true;
  return false;
}

void Analyzer::refuseIfShared(const VarPtr &v, const std::string &what) const {
  if (auto *m = as<ModuleVar>(v); m && m->shared)
    throw SharingRefused{what + " of module " + sourceKey(*m->source)};
}

// ---------------------------------------------------------------------------------------------
// Objects reachable from the frame

VarPtr Analyzer::wrapSourced(PyObject *o, const Source &src) {
  std::string key = sourceKey(src);
  if (auto it = sourceCache_.find(key); it != sourceCache_.end()) return it->second;
  VarPtr v;
  if (VarPtr sym = symbolicInt(o, src)) {
    v = sym;
  } else if (VarPtr f = symbolicFloat(o, src)) {
    v = f;
  } else if (isScalarConstant(o) || isConstantTuple(o)) {
    guardEquals(src, o);
    v = constant(o);
  } else if (isTensor(o)) {
    v = tensorInput(o, src);
  } else if (Py_TYPE(o) == reinterpret_cast<PyTypeObject *>(gradModeExitType())) {
    // A resume function continuing inside `with torch.no_grad()` (graph breaks).
    guardType(src, gradModeExitType());
    PyRef restore = check(PyObject_GetAttrString(o, "restore"), "GradModeExit.restore");
    guardEquals(plus(src, SourceStep{SourceStep::Attr, 0, "restore", {}}), restore.get());
    v = std::make_shared<GradExitVar>(restore.get() == Py_True);
  } else if (isModuleObject(o)) {
    auto m = std::make_shared<ModuleVar>(PyRef::borrow(o));
    // A shared module: any instance of its class; what the capture reads from it is guarded at
    // its own source, and a class attribute it resolves is guarded as not shadowed (getAttr).
    m->shared = sharedSource(src);
    if (m->shared)
      guardType(src, reinterpret_cast<PyObject *>(Py_TYPE(o)));
    else
      guardId(src, o);
    v = m;
  } else if (PyList_Check(o)) {
    guardType(src, reinterpret_cast<PyObject *>(Py_TYPE(o)));
    v = sourcedList(o, src);
  } else if (PyTuple_Check(o)) {
    guardType(src, reinterpret_cast<PyObject *>(Py_TYPE(o)));
    Py_ssize_t n = PySequence_Size(o);
    guardLen(src, n);
    std::vector<VarPtr> items;
    for (Py_ssize_t i = 0; i < n; ++i) {
      PyObject *item = PyTuple_Check(o) ? PyTuple_GET_ITEM(o, i) : PyList_GET_ITEM(o, i);
      PyRef hold = PyRef::borrow(item);
      items.push_back(wrapSourced(item, plus(src, itemStep(i))));
    }
    PyRef type =
        PyTuple_CheckExact(o) ? PyRef() : PyRef::borrow(reinterpret_cast<PyObject *>(Py_TYPE(o)));
    v = std::make_shared<TupleVar>(std::move(items), type);
  } else if (PyAnySet_CheckExact(o)) {
    // Membership and iteration read its items: they are guarded by value, against a snapshot
    // (the caller may mutate this very set between calls). Items other than constants
    // (tensors, objects) are not compared: only the length is guarded, and membership tests
    // and iteration are graph breaks.
    bool constantItems = true;
    PyRef it = check(PyObject_GetIter(o), "iter(set)");
    while (PyRef item = PyRef::steal(PyIter_Next(it.get())))
      constantItems =
          constantItems && (isScalarConstant(item.get()) || isConstantTuple(item.get()));
    if (PyErr_Occurred()) throwPyError("iterating a set");
    guardType(src, reinterpret_cast<PyObject *>(Py_TYPE(o)));
    if (constantItems) {
      Guard g;
      g.kind = Guard::Equals;
      g.source = src;
      g.object = PySet_CheckExact(o) ? check(PySet_New(o), "set()") : PyRef::borrow(o);
      g.description = key + " == " + reprOf(o);
      addGuard(std::move(g));
      setsByValue_.insert(o);
    } else {
      guardLen(src, PySet_GET_SIZE(o));
    }
    v = constant(o);
  } else if (PyDict_CheckExact(o)) {
    guardType(src, reinterpret_cast<PyObject *>(&PyDict_Type));
    auto d = std::make_shared<DictVar>();
    PyRef keys = check(PyDict_Keys(o), "dict.keys()");
    Guard g;
    g.kind = Guard::DictKeysAre;
    g.source = src;
    g.object = keys;
    g.description = "list(" + key + ".keys()) == " + reprOf(keys.get());
    addGuard(std::move(g));
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(keys.get()); ++i) {
      PyObject *k = PyList_GET_ITEM(keys.get(), i);
      // bytes keys: os.environ._data (os.environ.get() in library code).
      if (!PyUnicode_CheckExact(k) && !PyLong_CheckExact(k) && !PyBytes_CheckExact(k))
        fail("dict " + key + " with a key of type " + Py_TYPE(k)->tp_name);
      PyObject *val = PyDict_GetItem(o, k);
      d->items.emplace_back(
          PyRef::borrow(k),
          wrapSourced(val, plus(src, SourceStep{SourceStep::DictKey, 0, "", PyRef::borrow(k)})));
    }
    v = d;
  } else if (PyCell_Check(o)) {
    PyObject *c = PyCell_GET(o);
    v = std::make_shared<CellVar>(c ? wrapSourced(c, plus(src, attrStep("cell_contents")))
                                    : nullptr);
  } else if (PyMethod_Check(o) || (PyCFunction_Check(o) && PyCFunction_GET_SELF(o) &&
                                   !PyModule_Check(PyCFunction_GET_SELF(o)))) {
    // A bound method is a new object at every attribute read: it is guarded through the
    // object it is bound to (and, for Python methods, the function).
    guardType(src, reinterpret_cast<PyObject *>(Py_TYPE(o)));
    PyObject *self = PyMethod_Check(o) ? PyMethod_GET_SELF(o) : PyCFunction_GET_SELF(o);
    guardId(plus(src, attrStep("__self__")), self);
    if (PyMethod_Check(o)) guardId(plus(src, attrStep("__func__")), PyMethod_GET_FUNCTION(o));
    v = constant(o);
  } else if (PyFunction_Check(o) || PyType_Check(o) || PyModule_Check(o) || PyCFunction_Check(o) ||
             dtypeFromTorch(o)) {
    guardId(src, o);
    v = constant(o);
  } else if (std::strcmp(Py_TYPE(o)->tp_name, "torch.device") == 0) {
    guardType(src, reinterpret_cast<PyObject *>(Py_TYPE(o)));
    Guard g;
    g.kind = Guard::Equals;
    g.source = src;
    g.object = PyRef::borrow(o);
    g.description = key + " == " + reprOf(o);
    addGuard(std::move(g));
    v = constant(o);
  } else {
    // Any other object: its type is fixed; attributes read later get their own guards.
    guardType(src, reinterpret_cast<PyObject *>(Py_TYPE(o)));
    v = constant(o);
  }
  if (!v->source) v->source = src;
  sourceCache_[key] = v;
  return v;
}

VarPtr Analyzer::sourcedList(PyObject *list, const Source &src) {
  // The analyzer never mutates the caller's list (appends are replayed after the graph), so
  // its items are the same whenever they are first read.
  return std::make_shared<ListVar>([this, obj = PyRef::borrow(list), src] {
    Py_ssize_t n = PyList_GET_SIZE(obj.get());
    guardLen(src, n);
    std::vector<VarPtr> items;
    for (Py_ssize_t i = 0; i < n; ++i) {
      PyRef item = PyRef::borrow(PyList_GET_ITEM(obj.get(), i));
      items.push_back(wrapSourced(item.get(), plus(src, itemStep(i))));
    }
    return items;
  });
}

VarPtr Analyzer::containerView(const VarPtr &v) {
  auto *o = as<ObjectVar>(v);
  if (!o) return v;
  PyObject *obj = o->obj.get();
  bool isDict = PyDict_Check(obj), isSeq = PyList_Check(obj) || PyTuple_Check(obj);
  if (!isDict && !isSeq) return v;
  if (!o->source) {
    if (isConstantTuple(obj)) return v;
    fail(std::string("a ") + Py_TYPE(obj)->tp_name + " the frame cannot reach");
  }
  std::string key = sourceKey(*o->source) + "#view";
  if (auto it = sourceCache_.find(key); it != sourceCache_.end()) return it->second;
  const Source &src = *o->source;
  VarPtr view;
  if (isDict) {
    PyRef keys = check(dictKeysInOrder(obj), "dict.keys()");
    Guard g;
    g.kind = Guard::DictKeysAre;
    g.source = src;
    g.object = keys;
    g.description = "list(" + sourceKey(src) + ".keys()) == " + reprOf(keys.get());
    addGuard(std::move(g));
    auto d = std::make_shared<DictVar>();
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(keys.get()); ++i) {
      PyObject *k = PyList_GET_ITEM(keys.get(), i);
      if (!PyUnicode_CheckExact(k) && !PyLong_CheckExact(k) && !PyBytes_CheckExact(k))
        fail("dict " + sourceKey(src) + " with a key of type " + Py_TYPE(k)->tp_name);
      d->items.emplace_back(
          PyRef::borrow(k),
          wrapSourced(PyDict_GetItem(obj, k),
                      plus(src, SourceStep{SourceStep::DictKey, 0, "", PyRef::borrow(k)})));
    }
    view = d;
  } else if (PyList_Check(obj)) {
    view = sourcedList(obj, src);
  } else {
    Py_ssize_t n = PySequence_Size(obj);
    guardLen(src, n);
    std::vector<VarPtr> items;
    for (Py_ssize_t i = 0; i < n; ++i)
      items.push_back(wrapSourced(PyTuple_GET_ITEM(obj, i), plus(src, itemStep(i))));
    view = std::make_shared<TupleVar>(std::move(items));
  }
  view->source = src;
  sourceCache_[key] = view;
  return view;
}

VarPtr Analyzer::callDunder(const VarPtr &obj, const char *name, std::vector<VarPtr> args) {
  PyObject *o = nullptr, *type = nullptr;
  if (auto *ov = as<ObjectVar>(obj)) o = ov->obj.get();
  if (auto *m = as<ModuleVar>(obj)) o = m->obj.get();
  if (o) type = reinterpret_cast<PyObject *>(Py_TYPE(o));
  if (auto *inst = as<InstanceVar>(obj)) type = inst->cls.get();
  if (!type || (o && (PyType_Check(o) || PyModule_Check(o)))) return nullptr;
  PyObject *fn = typeLookup(type, name);
  if (!fn || !PyFunction_Check(fn)) return nullptr;
  VarPtr f = constant(fn);
  if (obj->source) f->source = plus(plus(*obj->source, attrStep("__class__")), attrStep(name));
  if (auto *inst = as<InstanceVar>(obj); inst && inst->clsSource)
    f->source = plus(*inst->clsSource, attrStep(name));
  Args a;
  a.pos = std::move(args);
  return call(std::make_shared<BoundVar>(obj, f, name), a);
}

VarPtr Analyzer::loadGlobal(Frame &f, const std::string &name) {
  if (auto it = globalOverlay.find({f.globals.get(), name}); it != globalOverlay.end())
    return it->second;
  PyObject *o = PyDict_GetItemString(f.globals.get(), name.c_str());
  if (o) {
    Source src =
        f.globalsSource
            ? plus(*f.globalsSource, SourceStep{SourceStep::DictKey, 0, "",
                                                check(PyUnicode_FromString(name.c_str()), "str")})
            : Source{SourceStep{SourceStep::Global, 0, name, {}}};
    if (f.trustedGlobals && !isTensor(o) && !PyList_Check(o) && !PyDict_Check(o) && !PySet_Check(o))
      return constant(o);
    // Without a source for the globals, src would name the captured frame's own globals.
    if (!f.globalsSource && f.globals.get() != rootGlobals())
      fail("global '" + name + "' of another module read by a function the caller cannot reach");
    return wrapSourced(o, src);
  }
  PyObject *b = PyDict_GetItemString(f.builtins.get(), name.c_str());
  if (b) return constant(b); // builtins are not guarded
  fail("name '" + name + "' is not defined");
}

// ---------------------------------------------------------------------------------------------
// Attributes

namespace {

// Attribute lookup on a class instance without running Python code: (kind, object).
enum class Found {
  None,
  Property,
  DataDescr,
  Instance,
  ClassFunc,
  StaticMethod,
  ClassMethod,
  ClassAttr
};

Found lookupInstanceAttr(PyObject *obj, const std::string &name, PyObject **out) {
  PyObject *type = reinterpret_cast<PyObject *>(Py_TYPE(obj));
  PyObject *d = typeLookup(type, name);
  if (d && Py_TYPE(d) == &PyProperty_Type) {
    *out = d;
    return Found::Property;
  }
  if (d && isDataDescriptor(d)) {
    *out = d;
    return Found::DataDescr;
  }
  PyObject **dictptr = _PyObject_GetDictPtr(obj);
  if (dictptr && *dictptr) {
    PyObject *v = PyDict_GetItemString(*dictptr, name.c_str());
    if (v) {
      *out = v;
      return Found::Instance;
    }
  }
  if (!d) return Found::None;
  *out = d;
  if (PyFunction_Check(d)) return Found::ClassFunc;
  if (Py_TYPE(d) == &PyStaticMethod_Type) return Found::StaticMethod;
  if (Py_TYPE(d) == &PyClassMethod_Type) return Found::ClassMethod;
  return Found::ClassAttr;
}

} // namespace

VarPtr Analyzer::getAttr(const VarPtr &obj, const std::string &name) {
  switch (obj->kind) {
  case VarKind::Tensor: return tensorAttr(obj, name);
  case VarKind::Dataclass: return dataclassAttr(obj, name);
  case VarKind::Instance: return instanceAttr(obj, name);
  case VarKind::Module:
  case VarKind::Object: {
    PyObject *o = obj->kind == VarKind::Module ? as<ModuleVar>(obj)->obj.get()
                                               : as<ObjectVar>(obj)->obj.get();
    if (auto it = attrOverlay.find({o, name}); it != attrOverlay.end()) return it->second;
    const std::optional<Source> &src = obj->source;
    auto sourced = [&](PyObject *v) -> VarPtr {
      if (src) return wrapSourced(v, plus(*src, attrStep(name)));
      if (isTensor(v)) fail("tensor attribute '" + name + "' of an object the frame cannot reach");
      return constant(v);
    };
    // Introspection results (inspect.Signature, Parameter...) are immutable descriptions.
    if (obj->kind == VarKind::Object && !PyModule_Check(o) && !PyType_Check(o) &&
        moduleNameOf(reinterpret_cast<PyObject *>(Py_TYPE(o))) == "inspect") {
      PyObject *v = PyObject_GetAttrString(o, name.c_str());
      if (!v) {
        PyErr_Clear();
        fail(std::string("'") + Py_TYPE(o)->tp_name + "' object has no attribute '" + name + "'");
      }
      return constantSteal(v);
    }
    // Python modules: torch and other libraries are trusted (their attributes are not guarded).
    if (PyModule_Check(o)) {
      PyObject *v = PyObject_GetAttrString(o, name.c_str());
      if (!v) {
        PyErr_Clear();
        fail("module '" + moduleNameOf(o) + utf8(PyModule_GetNameObject(o)) +
             "' has no attribute '" + name + "'");
      }
      PyRef hold = PyRef::steal(v);
      const char *mn = PyModule_GetName(o);
      if (!mn) PyErr_Clear();
      if (mn && isTrustedModuleName(mn) && !isTensor(v)) return constant(v);
      return sourced(v);
    }
    // Immutable constants and classes: attributes are pure functions of the object.
    if (obj->kind == VarKind::Object &&
        (isScalarConstant(o) || isConstantTuple(o) || PyType_Check(o) || dtypeFromTorch(o) ||
         std::strcmp(Py_TYPE(o)->tp_name, "torch.device") == 0 || isTorchDtypeInfo(o) ||
         PyCFunction_Check(o) || PyFunction_Check(o))) {
      if (PyType_Check(o)) {
        // A classmethod/staticmethod/function on a class: unwrap like the descriptor does.
        PyObject *v = PyObject_GetAttrString(o, name.c_str());
        if (!v) {
          PyErr_Clear();
          fail("type object '" + std::string(reinterpret_cast<PyTypeObject *>(o)->tp_name) +
               "' has no attribute '" + name + "'");
        }
        PyRef hold = PyRef::steal(v);
        std::string mod = moduleNameOf(o);
        if (isTrustedModuleName(mod) && !isTensor(v)) return constant(v);
        return sourced(v);
      }
      PyObject *v = PyObject_GetAttrString(o, name.c_str());
      if (!v) {
        PyErr_Clear();
        fail("'" + std::string(Py_TYPE(o)->tp_name) + "' object has no attribute '" + name + "'");
      }
      return constantSteal(v);
    }
    // Instances (nn.Module and plain objects).
    PyObject *found = nullptr;
    Found kind = lookupInstanceAttr(o, name, &found);
    bool isMod = obj->kind == VarKind::Module;
    std::optional<Source> classFnSource;
    if (src) classFnSource = plus(plus(*src, attrStep("__class__")), attrStep(name));
    // Resolved through the (type-guarded) class: another instance must not shadow it.
    if (isMod && as<ModuleVar>(obj)->shared &&
        (kind == Found::Property || kind == Found::ClassFunc || kind == Found::StaticMethod ||
         kind == Found::ClassMethod))
      guardNotIn(plus(*src, attrStep("__dict__")), name);
    switch (kind) {
    case Found::Property: {
      PyObject *fget = reinterpret_cast<PyObject *>(found);
      PyRef getter = check(PyObject_GetAttrString(fget, "fget"), "property.fget");
      if (getter.get() == Py_None) fail("unreadable property '" + name + "'");
      Args a;
      a.pos.push_back(obj);
      // Through the class (type(obj).name is the property itself): the getter's globals get a
      // source (transformers' loss_function reads its module's LOSS_MAPPING dict).
      std::optional<Source> getterSource;
      if (classFnSource) getterSource = plus(*classFnSource, attrStep("fget"));
      return callObject(getter.get(), getterSource, a);
    }
    case Found::DataDescr:
    case Found::Instance:
    case Found::ClassAttr: {
      if (kind == Found::Instance) return sourced(found);
      PyObject *v = PyObject_GetAttrString(o, name.c_str());
      if (!v) throwPyError("getattr " + name);
      PyRef hold = PyRef::steal(v);
      if (PyMethod_Check(v)) {
        // A bound method made by a custom descriptor: call through its function.
        return std::make_shared<BoundVar>(obj, constant(PyMethod_GET_FUNCTION(v)), name);
      }
      return sourced(v);
    }
    case Found::ClassFunc: {
      VarPtr fn = constant(found);
      fn->source = classFnSource;
      return std::make_shared<BoundVar>(obj, fn, name);
    }
    case Found::StaticMethod: {
      PyRef f = check(PyObject_GetAttrString(found, "__func__"), "staticmethod.__func__");
      return constant(f.get());
    }
    case Found::ClassMethod: {
      PyRef f = check(PyObject_GetAttrString(found, "__func__"), "classmethod.__func__");
      return std::make_shared<BoundVar>(constant(reinterpret_cast<PyObject *>(Py_TYPE(o))),
                                        constant(f.get()), name);
    }
    case Found::None: break;
    }
    if (isMod) {
      // nn.Module.__getattr__: parameters, buffers, submodules.
      static const char *const stores[] = {"_parameters", "_buffers", "_modules"};
      for (const char *store : stores) {
        PyRef d = PyRef::steal(PyObject_GetAttrString(o, store));
        if (!d) {
          PyErr_Clear();
          continue;
        }
        if (!PyDict_Check(d.get())) continue;
        PyObject *v = PyDict_GetItemString(d.get(), name.c_str());
        if (v) {
          if (!src && v == Py_None) return none(); // a frame-built module's empty buffer slot
          if (!src) fail("module attribute '" + name + "' of a module the frame cannot reach");
          return wrapSourced(v, plus(*src, attrStep(name)));
        }
      }
    } else if (typeLookup(reinterpret_cast<PyObject *>(Py_TYPE(o)), "__getattr__") ||
               typeLookup(reinterpret_cast<PyObject *>(Py_TYPE(o)), "__getattribute__") !=
                   PyDict_GetItemString(PyBaseObject_Type.tp_dict, "__getattribute__")) {
      // A name only __getattr__ / a custom __getattribute__ knows (transformers' configs map
      // num_hidden_layers to n_layer): read through Python, guarded at its source.
      PyObject *v = PyObject_GetAttrString(o, name.c_str());
      if (v) {
        PyRef hold = PyRef::steal(v);
        return sourced(v);
      }
      PyErr_Clear();
    }
    fail("'" + std::string(Py_TYPE(o)->tp_name) + "' object has no attribute '" + name + "'");
  }
  case VarKind::Tuple: {
    auto *t = as<TupleVar>(obj);
    if (t->structType) {
      PyRef fields = PyRef::steal(PyObject_GetAttrString(t->structType.get(), "_fields"));
      if (!fields) {
        PyErr_Clear();
        // structseq (torch.return_types.*): n_fields / field names through the type's members.
        PyObject *d = typeLookup(t->structType.get(), name);
        if (d && Py_TYPE(d) == &PyMemberDescr_Type) {
          auto *m = reinterpret_cast<PyMemberDescrObject *>(d);
          Py_ssize_t idx = m->d_member->offset / static_cast<Py_ssize_t>(sizeof(PyObject *)) -
                           (offsetof(PyTupleObject, ob_item) / sizeof(PyObject *));
          if (idx >= 0 && static_cast<size_t>(idx) < t->items.size())
            return t->items[static_cast<size_t>(idx)];
        }
      } else if (PyTuple_Check(fields.get())) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(fields.get()); ++i)
          if (utf8(PyTuple_GET_ITEM(fields.get(), i)) == name &&
              static_cast<size_t>(i) < t->items.size())
            return t->items[static_cast<size_t>(i)];
      }
      // Other attributes of a namedtuple class: methods and properties the user wrote are
      // inlined on the tuple, plain class attributes (`_fields`, constants) are read as
      // constants; tuple's own methods and namedtuple's helpers (`_asdict`, `_replace`, defined
      // in `collections`) go to callMethod below.
      if (PyObject *d = typeLookup(t->structType.get(), name)) {
        PyRef hold = PyRef::borrow(d);
        if (PyFunction_Check(d)) {
          PyObject *mod = PyFunction_GET_MODULE(d);
          if (!(mod && PyUnicode_Check(mod) && utf8(mod) == "collections"))
            return std::make_shared<BoundVar>(obj, constant(d), name);
        } else if (Py_TYPE(d) == &PyProperty_Type) {
          PyRef fget = check(PyObject_GetAttrString(d, "fget"), "property.fget");
          if (fget.get() == Py_None) fail("unreadable property '" + name + "'");
          Args a;
          a.pos.push_back(obj);
          return call(constant(fget.get()), a);
        } else if (!Py_TYPE(d)->tp_descr_get) {
          return constant(d);
        }
      }
    }
    return std::make_shared<BoundVar>(obj, nullptr, name);
  }
  case VarKind::List:
  case VarKind::Dict:
  case VarKind::SymInt: return std::make_shared<BoundVar>(obj, nullptr, name);
  case VarKind::SymFloat: specializeFloat(obj); // s.is_integer(), s.real...
  case VarKind::Function: {
    auto *f = as<FunctionVar>(obj);
    if (name == "__name__" || name == "__qualname__")
      return constantSteal(PyUnicode_FromString(f->qualname.c_str()));
    if (name == "__code__") return constant(f->code.get());
    fail("attribute '" + name + "' of a local function");
  }
  case VarKind::Bound: {
    auto *b = as<BoundVar>(obj);
    if (name == "__self__") return b->self;
    if (name == "__func__" && b->func) return b->func;
    if (name == "__name__") return constantSteal(PyUnicode_FromString(b->name.c_str()));
    fail("attribute '" + name + "' of a bound method");
  }
  case VarKind::Super: {
    auto *s = as<SuperVar>(obj);
    PyObject *selfType = nullptr;
    if (auto *m = as<ModuleVar>(s->self))
      selfType = reinterpret_cast<PyObject *>(Py_TYPE(m->obj.get()));
    // super(cls, C) with C a subclass of cls (zero-argument super() in a classmethod): the
    // lookup starts after cls in C's MRO and binds nothing but classmethods (to C).
    bool ofClass = false;
    if (auto *o = as<ObjectVar>(s->self)) {
      PyObject *obj = o->obj.get();
      ofClass = PyType_Check(obj) && PyType_Check(s->cls.get()) &&
                PyType_IsSubtype(reinterpret_cast<PyTypeObject *>(obj),
                                 reinterpret_cast<PyTypeObject *>(s->cls.get()));
      selfType = ofClass ? obj : reinterpret_cast<PyObject *>(Py_TYPE(obj));
    }
    if (auto *inst = as<InstanceVar>(s->self)) selfType = inst->cls.get();
    if (!selfType) fail("super() of a " + typeName(s->self));
    PyObject *mro = reinterpret_cast<PyTypeObject *>(selfType)->tp_mro;
    bool after = false;
    for (Py_ssize_t i = 0; mro && i < PyTuple_GET_SIZE(mro); ++i) {
      PyObject *cls = PyTuple_GET_ITEM(mro, i);
      if (!after) {
        after = cls == s->cls.get();
        continue;
      }
      PyObject *dict = reinterpret_cast<PyTypeObject *>(cls)->tp_dict;
      PyObject *v = PyDict_GetItemString(dict, name.c_str());
      if (!v) continue;
      // object.__init__ of an instance made in the frame: nothing to do (callMethod).
      if (s->self->kind == VarKind::Instance &&
          cls == reinterpret_cast<PyObject *>(&PyBaseObject_Type) && name == "__init__")
        return std::make_shared<BoundVar>(s->self, nullptr, name);
      if (PyFunction_Check(v))
        return ofClass ? constant(v) : std::make_shared<BoundVar>(s->self, constant(v), name);
      if (Py_TYPE(v) == &PyStaticMethod_Type)
        return constantSteal(PyObject_GetAttrString(v, "__func__"));
      if (Py_TYPE(v) == &PyClassMethod_Type)
        return std::make_shared<BoundVar>(
            constant(selfType), constantSteal(PyObject_GetAttrString(v, "__func__")), name);
      if (Py_TYPE(v) == &PyMethodDescr_Type || Py_TYPE(v) == &PyWrapperDescr_Type)
        return ofClass ? constant(v) : std::make_shared<BoundVar>(s->self, constant(v), name);
      // Other descriptors (a property: its getter would run) are not modeled; a builtin
      // function (`act = torch.relu`) is no descriptor: returned as it is, unbound.
      if (Py_TYPE(v)->tp_descr_get)
        fail("super() attribute '" + name + "' is a " + Py_TYPE(v)->tp_name);
      return constant(v);
    }
    fail("'super' object has no attribute '" + name + "'");
  }
  default: fail("attribute '" + name + "' of a " + typeName(obj));
  }
}

bool Analyzer::hasAttr(const VarPtr &obj, const std::string &name) {
  if (auto *m = as<ModuleVar>(obj)) {
    if (attrOverlay.count({m->obj.get(), name})) return true;
    int r = PyObject_HasAttrString(m->obj.get(), name.c_str());
    if (m->source) {
      // hasattr's answer is a guarded fact: the attribute read (or its absence) must not change.
      if (r) getAttr(obj, name);
      // Absent: from the places Module.__getattr__ looks (the class is guarded by the module's
      // identity or type). Also for a module guarded by identity, which may gain the attribute
      // (`self.calls = getattr(self, "calls", 0) + 1` read 0 on every call before).
      if (!r)
        for (const char *where : {"__dict__", "_parameters", "_buffers", "_modules"})
          guardNotIn(plus(*m->source, attrStep(where)), name);
    }
    return r != 0;
  }
  if (auto *o = as<ObjectVar>(obj)) {
    if (attrOverlay.count({o->obj.get(), name})) return true;
    return PyObject_HasAttrString(o->obj.get(), name.c_str()) != 0;
  }
  if (obj->kind == VarKind::Instance) {
    std::optional<bool> r = instanceHasAttr(obj, name);
    if (!r) fail("hasattr() through the __getattr__ of a " + typeName(obj));
    return *r;
  }
  if (obj->kind == VarKind::Tensor) {
    int r = PyObject_HasAttrString(torchTensorType(), name.c_str());
    static const char *const instanceAttrs[] = {"shape", "dtype", "device",  "requires_grad",
                                                "grad",  "data",  "is_leaf", "grad_fn"};
    for (const char *a : instanceAttrs)
      if (name == a) return true;
    return r != 0;
  }
  try {
    getAttr(obj, name);
    return true;
  } catch (const BreakError &) {
    return false;
  }
}

void Analyzer::setAttr(const VarPtr &obj, const std::string &name, const VarPtr &value) {
  if (auto *t = as<TensorVar>(obj); t && name == "requires_grad")
    return setRequiresGrad(*t, value, /*method=*/false);
  if (auto *d = as<DataclassVar>(obj)) {
    VarPtr *f = d->find(name);
    if (!f) fail("setting attribute '" + name + "' that is not a field of a dataclass");
    *f = value;
    return;
  }
  if (obj->kind == VarKind::Instance) return instanceSetAttr(obj, name, value);
  PyObject *o = nullptr;
  if (auto *m = as<ModuleVar>(obj)) o = m->obj.get();
  if (auto *ov = as<ObjectVar>(obj)) o = ov->obj.get();
  if (!o || !obj->source || PyModule_Check(o) || PyType_Check(o) || isScalarConstant(o))
    fail("attribute assignment '" + name + "' on a " + typeName(obj));
  // The write is read back by object (attrOverlay): two shared modules may be one object.
  refuseIfShared(obj, "attribute assignment '" + name + "'");
  PyObject *type = reinterpret_cast<PyObject *>(Py_TYPE(o));
  PyObject *d = typeLookup(type, name);
  if (d && Py_TYPE(d) == &PyProperty_Type) fail("assignment to property '" + name + "'");
  attrOverlay[{o, name}] = value;
  recordEffect({SideEffect::SetAttr, *obj->source, name, {}, value});
}

std::pair<VarPtr, VarPtr> Analyzer::loadMethod(const VarPtr &obj, const std::string &name) {
  return {std::make_shared<NullVar>(), getAttr(obj, name)};
}

// ---------------------------------------------------------------------------------------------
// Conversions and truth

PyRef Analyzer::asPython(const VarPtr &v) {
  switch (v->kind) {
  case VarKind::Object: return as<ObjectVar>(v)->obj;
  case VarKind::Tuple:
  case VarKind::List: {
    const std::vector<VarPtr> &items =
        v->kind == VarKind::Tuple ? as<TupleVar>(v)->items : as<ListVar>(v)->items();
    PyRef out = check(v->kind == VarKind::Tuple ? PyTuple_New(static_cast<Py_ssize_t>(items.size()))
                                                : PyList_New(static_cast<Py_ssize_t>(items.size())),
                      "container");
    for (size_t i = 0; i < items.size(); ++i) {
      PyRef it = asPython(items[i]);
      if (!it) return {};
      if (v->kind == VarKind::Tuple)
        PyTuple_SET_ITEM(out.get(), static_cast<Py_ssize_t>(i), it.release());
      else
        PyList_SET_ITEM(out.get(), static_cast<Py_ssize_t>(i), it.release());
    }
    auto *t = as<TupleVar>(v);
    if (t && t->structType) {
      PyObject *ctor = t->structType.get();
      // namedtuples take fields as arguments; torch.Size and structseqs take one sequence.
      if (PyObject_HasAttrString(ctor, "_fields"))
        return check(PyObject_Call(ctor, out.get(), nullptr), "namedtuple");
      return check(PyObject_CallOneArg(ctor, out.get()), "tuple type");
    }
    return out;
  }
  case VarKind::Dict: {
    PyRef d = check(PyDict_New(), "dict");
    for (auto &[k, val] : as<DictVar>(v)->items) {
      PyRef pv = asPython(val);
      if (!pv) return {};
      PyDict_SetItem(d.get(), k.get(), pv.get());
    }
    return d;
  }
  case VarKind::Slice: {
    auto *s = as<SliceVar>(v);
    PyRef a = asPython(s->start), b = asPython(s->stop), c = asPython(s->step);
    if (!a || !b || !c) return {};
    return check(PySlice_New(a.get(), b.get(), c.get()), "slice");
  }
  case VarKind::Module:
    refuseIfShared(v, "the object itself"); // a constant of this very instance
    return as<ModuleVar>(v)->obj;
  case VarKind::Bound: { // a method of a known object, e.g. for inspect.signature(self.fn)
    auto *b = as<BoundVar>(v);
    if (!b->func) return {};
    PyRef self = asPython(b->self), fn = asPython(b->func);
    if (!self || !fn) return {};
    return check(PyMethod_New(fn.get(), self.get()), "bound method");
  }
  case VarKind::SymInt: {
    auto *s = as<SymIntVar>(v);
    if (s->expr.isStatic()) return check(PyLong_FromLongLong(s->expr.value()), "int");
    specialize(s->expr);
  }
  case VarKind::SymFloat: specializeFloat(v);
  default: return {};
  }
}

std::optional<int64_t> Analyzer::asInt(const VarPtr &v) {
  if (auto *o = as<ObjectVar>(v)) {
    if (PyLong_Check(o->obj.get())) {
      int overflow = 0;
      long long x = PyLong_AsLongLongAndOverflow(o->obj.get(), &overflow);
      if (overflow) return std::nullopt;
      return x;
    }
    if (PyObject_HasAttrString(o->obj.get(), "__index__") && !PyFloat_Check(o->obj.get())) {
      PyObject *i = PyNumber_Index(o->obj.get());
      if (!i) {
        PyErr_Clear();
        return std::nullopt;
      }
      long long x = PyLong_AsLongLong(i);
      Py_DECREF(i);
      if (PyErr_Occurred()) {
        PyErr_Clear();
        return std::nullopt;
      }
      return x;
    }
  }
  if (auto *s = as<SymIntVar>(v)) {
    if (s->expr.isStatic()) return s->expr.value();
    specialize(s->expr);
  }
  return std::nullopt;
}

std::optional<double> Analyzer::asNumber(const VarPtr &v) {
  if (auto *o = as<ObjectVar>(v)) {
    if (PyFloat_Check(o->obj.get())) return PyFloat_AS_DOUBLE(o->obj.get());
  }
  if (v->kind == VarKind::SymFloat) specializeFloat(v);
  if (auto i = asInt(v)) return static_cast<double>(*i);
  return std::nullopt;
}

bool Analyzer::truthy(const VarPtr &v) {
  switch (v->kind) {
  case VarKind::Object: {
    PyObject *o = as<ObjectVar>(v)->obj.get();
    PyTypeObject *t = Py_TYPE(o);
    bool known = isScalarConstant(o) || PyTuple_Check(o) || PyType_Check(o) || PyModule_Check(o) ||
                 PyFunction_Check(o) || PyCFunction_Check(o) || PyMethod_Check(o) ||
                 dtypeFromTorch(o) || PyFrozenSet_Check(o) || isFrameSet(o) ||
                 (PyAnySet_Check(o) && v->source) || // (its length is guarded)
                 ((!t->tp_as_number || !t->tp_as_number->nb_bool) &&
                  (!t->tp_as_mapping || !t->tp_as_mapping->mp_length) &&
                  (!t->tp_as_sequence || !t->tp_as_sequence->sq_length));
    if (!known) {
      if (VarPtr r = callDunder(v, "__bool__", {})) return truthy(r);
      if (VarPtr r = callDunder(v, "__len__", {})) return truthy(r);
      fail(std::string("truth value of a ") + t->tp_name + " object");
    }
    int r = PyObject_IsTrue(o);
    if (r < 0) throwPyError("bool()");
    return r != 0;
  }
  case VarKind::Tensor:
    fail("data-dependent control flow: the truth value of a tensor (if/while/and/or/not on a "
         "tensor) needs its data");
  case VarKind::SymInt: {
    auto *s = as<SymIntVar>(v);
    if (s->expr.isStatic()) return s->expr.value() != 0;
    // `if n:` is `n != 0`: decided for a symbol (at least 2), else specialized (compareOp).
    return truthy(compareOp(3, v, integer(0)));
  }
  case VarKind::SymFloat: // `if s:` is `s != 0.0`
    return truthy(compareOp(3, v, constantSteal(PyFloat_FromDouble(0.0))));
  case VarKind::Tuple: return !as<TupleVar>(v)->items.empty();
  case VarKind::List: return !as<ListVar>(v)->items().empty();
  case VarKind::Dict: return !as<DictVar>(v)->items.empty();
  case VarKind::Module: {
    PyObject *m = as<ModuleVar>(v)->obj.get();
    if (PyObject_HasAttrString(reinterpret_cast<PyObject *>(Py_TYPE(m)), "__len__"))
      return length(v) != 0;
    return true;
  }
  case VarKind::Dataclass: return !as<DataclassVar>(v)->mapping || !dataclassItems(v).empty();
  case VarKind::Instance: {
    if (VarPtr r = callDunder(v, "__bool__", {})) return truthy(r);
    if (VarPtr r = callDunder(v, "__len__", {})) return truthy(r);
    PyObject *cls = as<InstanceVar>(v)->cls.get();
    if (typeLookup(cls, "__bool__") || typeLookup(cls, "__len__"))
      fail("truth value of a " + typeName(v) + " (__bool__/__len__ not written in Python)");
    return true;
  }
  case VarKind::Null: throw BreakError("internal: truth value of NULL", currentLoc(), true);
  default: return true;
  }
}

std::string Analyzer::typeName(const VarPtr &v) {
  if (auto *o = as<ObjectVar>(v)) return Py_TYPE(o->obj.get())->tp_name;
  if (auto *m = as<ModuleVar>(v)) return Py_TYPE(m->obj.get())->tp_name;
  if (auto *d = as<DataclassVar>(v)) return reinterpret_cast<PyTypeObject *>(d->cls.get())->tp_name;
  if (auto *i = as<InstanceVar>(v)) return reinterpret_cast<PyTypeObject *>(i->cls.get())->tp_name;
  return varKindName(v->kind);
}

std::string Analyzer::describe(const VarPtr &v) {
  if (auto *o = as<ObjectVar>(v)) return reprOf(o->obj.get());
  if (auto *t = as<TensorVar>(v)) return "tensor " + t->type().str();
  if (v->source) return typeName(v) + " " + sourceKey(*v->source);
  return typeName(v);
}

// ---------------------------------------------------------------------------------------------
// Sequences

int64_t Analyzer::length(const VarPtr &v) {
  switch (v->kind) {
  case VarKind::Tuple: return static_cast<int64_t>(as<TupleVar>(v)->items.size());
  case VarKind::List: return static_cast<int64_t>(as<ListVar>(v)->items().size());
  case VarKind::Dict: return static_cast<int64_t>(as<DictVar>(v)->items.size());
  case VarKind::Iterator: {
    auto *it = as<IteratorVar>(v);
    return static_cast<int64_t>(it->items.size() - it->pos);
  }
  case VarKind::Tensor: {
    auto *t = as<TensorVar>(v);
    if (t->type().rank() == 0) fail("len() of a 0-d tensor");
    VarPtr n = sizeOf(v, 0);
    if (auto i = asInt(n)) return *i;
    fail("len() of a tensor with a symbolic first dim");
  }
  case VarKind::Dataclass:
    if (!as<DataclassVar>(v)->mapping) fail("len() of a " + typeName(v));
    return static_cast<int64_t>(dataclassItems(v).size());
  case VarKind::Module: {
    auto *m = as<ModuleVar>(v);
    Py_ssize_t n = PyObject_Size(m->obj.get());
    if (n < 0) throwPyError("len(module)");
    if (m->source) guardLen(*m->source, n);
    return n;
  }
  case VarKind::Object: {
    auto *o = as<ObjectVar>(v);
    if (VarPtr r = callDunder(v, "__len__", {})) {
      std::optional<int64_t> n = asInt(r);
      if (!n) fail("__len__ returned a " + typeName(r));
      return *n;
    }
    Py_ssize_t n = PyObject_Size(o->obj.get());
    if (n < 0) {
      PyErr_Clear();
      fail(std::string("len() of a ") + Py_TYPE(o->obj.get())->tp_name);
    }
    if (o->source && !isConstantTuple(o->obj.get()) && !isScalarConstant(o->obj.get()))
      guardLen(*o->source, n);
    return n;
  }
  case VarKind::Instance: {
    VarPtr r = callDunder(v, "__len__", {});
    std::optional<int64_t> n = r ? asInt(r) : std::nullopt;
    if (!n) fail("len() of a " + typeName(v));
    return *n;
  }
  default: fail("len() of a " + typeName(v));
  }
}

std::vector<VarPtr> Analyzer::sequenceItems(const VarPtr &v, const char *what) {
  switch (v->kind) {
  case VarKind::Tuple: return as<TupleVar>(v)->items;
  case VarKind::List: return as<ListVar>(v)->items();
  case VarKind::Iterator: {
    auto *it = as<IteratorVar>(v);
    std::vector<VarPtr> rest(it->items.begin() + static_cast<long>(it->pos), it->items.end());
    it->pos = it->items.size();
    return rest;
  }
  case VarKind::Dict: {
    std::vector<VarPtr> keys;
    for (auto &[k, val] : as<DictVar>(v)->items)
      keys.push_back(constant(k.get()));
    return keys;
  }
  case VarKind::Dataclass: {
    if (!as<DataclassVar>(v)->mapping) fail("iterating a " + typeName(v));
    std::vector<VarPtr> keys;
    for (auto &[k, val] : dataclassItems(v))
      keys.push_back(constantSteal(PyUnicode_FromString(k.c_str())));
    return keys;
  }
  case VarKind::Tensor: {
    int64_t n = length(v);
    std::vector<VarPtr> out;
    for (int64_t i = 0; i < n; ++i)
      out.push_back(tensorGetItem(v, integer(i)));
    return out;
  }
  case VarKind::Module: {
    auto *m = as<ModuleVar>(v);
    PyObject *o = m->obj.get();
    int64_t n = length(v);
    PyRef it = check(PyObject_GetIter(o), "iter(module)");
    std::vector<VarPtr> out;
    bool isDict = PyObject_HasAttrString(o, "keys");
    for (int64_t i = 0; i < n; ++i) {
      PyRef item = PyRef::steal(PyIter_Next(it.get()));
      if (!item) {
        if (PyErr_Occurred()) throwPyError("iterating a module");
        break;
      }
      if (isDict) { // ModuleDict iterates over its keys (only its length is guarded)
        refuseIfShared(v, "iterating the keys");
        out.push_back(constant(item.get()));
        continue;
      }
      if (!m->source) fail("iterating a module the frame cannot reach");
      out.push_back(wrapSourced(item.get(), plus(*m->source, itemStep(i))));
    }
    return out;
  }
  case VarKind::Object: {
    auto *ov = as<ObjectVar>(v);
    PyObject *o = ov->obj.get();
    bool pure = isConstantTuple(o) || PyUnicode_Check(o) || PyRange_Check(o) || setItemsKnown(o) ||
                (PyFrozenSet_Check(o) && !ov->source) || PyBytes_Check(o) || PyDictKeys_Check(o) ||
                PyDictValues_Check(o) || PyDictItems_Check(o);
    if (!pure) fail(std::string("iterating a ") + Py_TYPE(o)->tp_name + " (" + what + ")");
    PyRef it = check(PyObject_GetIter(o), "iter()");
    std::vector<VarPtr> out;
    while (PyObject *item = PyIter_Next(it.get())) {
      out.push_back(constantSteal(item));
      if (out.size() > 1000000) fail("iterating over a million items");
    }
    if (PyErr_Occurred()) throwPyError("iterating");
    return out;
  }
  case VarKind::Instance: {
    // collections.abc.Sequence's mixin __iter__ indexes until IndexError, which the analyzer
    // cannot catch: it is read as self[0..len(self)) (a Sequence's __len__ and __getitem__
    // agree, as the ABC requires).
    PyObject *cls = as<InstanceVar>(v)->cls.get();
    static PyObject *sequenceIter = [] {
      PyRef abc = check(PyImport_ImportModule("collections.abc"), "import collections.abc");
      PyRef seq = check(PyObject_GetAttrString(abc.get(), "Sequence"), "Sequence");
      return check(PyObject_GetAttrString(seq.get(), "__iter__"), "Sequence.__iter__").release();
    }();
    if (typeLookup(cls, "__iter__") == sequenceIter) {
      int64_t n = length(v);
      std::vector<VarPtr> out;
      for (int64_t i = 0; i < n; ++i)
        out.push_back(getItem(v, integer(i)));
      return out;
    }
    // __iter__ written in Python (a generator method is inlined to the items it yields).
    VarPtr it = callDunder(v, "__iter__", {});
    if (!it || it->kind == VarKind::Instance)
      fail(std::string("iterating a ") + typeName(v) + " (" + what + ")");
    return sequenceItems(it, what);
  }
  default: fail(std::string("iterating a ") + typeName(v) + " (" + what + ")");
  }
}

std::vector<VarPtr> Analyzer::iterate(const VarPtr &v) { return sequenceItems(v, "iteration"); }

VarPtr Analyzer::makeIterator(const VarPtr &v) {
  if (v->kind == VarKind::Iterator) return v;
  return std::make_shared<IteratorVar>(sequenceItems(v, "for loop"));
}

} // namespace xjit::frontend
