// Instances of plain Python classes constructed inside the captured code (transformers'
// DynamicCache and its layers, user helper objects), as TorchDynamo models them: the instance
// dictionary is abstract, __init__ and methods are inlined on it, attribute reads and writes go
// to that dictionary, isinstance() sees the class. Nothing is constructed at capture time; an
// instance that escapes (returned, stored where the caller can see it) is rebuilt after the graph
// runs by `object.__new__(cls)` and its dictionary filled from graph outputs and constants.
//
// Only classes whose instances behave like a dictionary of attributes qualify (see
// unsupportedReason): anything with its own allocation or attribute protocol (a custom __new__,
// __setattr__, __getattribute__, __slots__, a metaclass, a built-in base, a finalizer) stays a
// graph break.
#include "analyzer.h"

namespace xjit::frontend {

namespace {

PyObject *typeAttr(PyObject *cls, const char *name) {
  PyRef n = check(PyUnicode_InternFromString(name), "str");
  return _PyType_Lookup(reinterpret_cast<PyTypeObject *>(cls), n.get()); // borrowed
}

PyObject *objectAttr(const char *name) {
  return PyDict_GetItemString(PyBaseObject_Type.tp_dict, name); // borrowed
}

const char *clsName(PyObject *cls) { return reinterpret_cast<PyTypeObject *>(cls)->tp_name; }

// Why instances of `cls` cannot be modeled as a dictionary of attributes ("" when they can).
std::string unsupportedReason(PyObject *cls) {
  auto *t = reinterpret_cast<PyTypeObject *>(cls);
  // abc.ABCMeta only adds the abstract-method check (done here); other metaclasses may change
  // how instances are made.
  static PyObject *abcMeta = [] {
    PyRef abc = check(PyImport_ImportModule("abc"), "import abc");
    return check(PyObject_GetAttrString(abc.get(), "ABCMeta"), "abc.ABCMeta").release();
  }();
  if (Py_TYPE(cls) != &PyType_Type && reinterpret_cast<PyObject *>(Py_TYPE(cls)) != abcMeta)
    return std::string("its metaclass is ") + Py_TYPE(cls)->tp_name;
  if (t->tp_flags & Py_TPFLAGS_IS_ABSTRACT) return "it is abstract";
  PyObject *mro = t->tp_mro;
  if (!mro || PyTuple_GET_SIZE(mro) < 2) return "no method resolution order";
  Py_ssize_t n = PyTuple_GET_SIZE(mro);
  if (PyTuple_GET_ITEM(mro, n - 1) != reinterpret_cast<PyObject *>(&PyBaseObject_Type))
    return "its last base is not object";
  for (Py_ssize_t i = 0; i + 1 < n; ++i) {
    auto *c = reinterpret_cast<PyTypeObject *>(PyTuple_GET_ITEM(mro, i));
    if (!(c->tp_flags & Py_TPFLAGS_HEAPTYPE))
      return std::string("it derives from the built-in type ") + c->tp_name;
    // Empty __slots__ (abc.ABC's) add nothing; others make attributes data descriptors.
    PyObject *slots = PyDict_GetItemString(c->tp_dict, "__slots__");
    if (slots && !(PyTuple_Check(slots) && PyTuple_GET_SIZE(slots) == 0)) return "__slots__";
  }
  if (t->tp_dictoffset == 0) return "no instance dictionary";
  static const char *const protocol[] = {"__new__", "__setattr__", "__delattr__",
                                         "__getattribute__"};
  for (const char *name : protocol)
    if (typeAttr(cls, name) != objectAttr(name)) return std::string("a custom ") + name;
  if (typeAttr(cls, "__del__")) return "a __del__ finalizer";
  PyObject *init = typeAttr(cls, "__init__");
  if (init != objectAttr("__init__") && !(init && PyFunction_Check(init)))
    return "an __init__ that is not a Python function";
  return "";
}

// build(*values) for a rebuilt instance: object.__new__(T) with `names` set in its __dict__ (no
// __init__: the captured code already ran it; __setattr__ is object's, checked above).
PyRef instanceBuilder(PyObject *cls, const std::vector<std::pair<std::string, VarPtr>> &attrs) {
  static PyObject *make = pythonHelper("def _xjit_instance(T, names):\n"
                                       "    def build(*values):\n"
                                       "        obj = object.__new__(T)\n"
                                       "        obj.__dict__.update(zip(names, values))\n"
                                       "        return obj\n"
                                       "    build.__qualname__ = T.__qualname__\n"
                                       "    return build\n",
                                       "_xjit_instance");
  return check(PyObject_CallFunctionObjArgs(make, cls, namesTuple(attrs).get(), nullptr),
               "instance builder");
}

} // namespace

// A function found on the class, with the source its globals are reached through (functions of
// a class the caller cannot reach read their module's globals as constants).
static VarPtr classFunction(Analyzer &a, const InstanceVar &inst, PyObject *fn,
                            const std::string &name) {
  VarPtr f = a.constant(fn);
  if (inst.clsSource) f->source = plus(*inst.clsSource, attrStep(name));
  return f;
}

// The getter or setter (`which`: "fget" / "fset") of the property found on the class as `name`,
// with its source as for methods; null when the property has none.
static VarPtr propertyAccessor(Analyzer &a, const InstanceVar &inst, PyObject *prop,
                               const std::string &name, const char *which) {
  PyRef fn = check(PyObject_GetAttrString(prop, which), which);
  if (fn.get() == Py_None) return nullptr;
  VarPtr f = a.constant(fn.get());
  if (inst.clsSource) f->source = plus(plus(*inst.clsSource, attrStep(name)), attrStep(which));
  return f;
}

VarPtr Analyzer::makeInstance(PyObject *cls, const std::optional<Source> &clsSource,
                              const Args &args) {
  std::string why = unsupportedReason(cls);
  if (!why.empty())
    fail(std::string("constructing an instance of ") + clsName(cls) + " (" + why + ")");
  auto obj = std::make_shared<InstanceVar>(PyRef::borrow(cls));
  obj->clsSource = clsSource;
  PyObject *init = typeAttr(cls, "__init__");
  if (init == objectAttr("__init__")) {
    if (!args.pos.empty() || !args.kw.empty())
      fail(std::string(clsName(cls)) + "() takes no arguments");
    return obj;
  }
  VarPtr fn = classFunction(*this, *obj, init, "__init__");
  VarPtr r = call(std::make_shared<BoundVar>(obj, fn, "__init__"), args);
  auto *o = as<ObjectVar>(r);
  if (!o || o->obj.get() != Py_None) fail("__init__() should return None");
  return obj;
}

VarPtr Analyzer::instanceAttr(const VarPtr &obj, const std::string &name) {
  auto *inst = as<InstanceVar>(obj);
  PyObject *cls = inst->cls.get();
  if (name == "__class__") {
    VarPtr c = constant(cls);
    c->source = inst->clsSource;
    return c;
  }
  if (name == "__dict__") fail("the __dict__ of an instance made in the frame");
  PyObject *d = typeAttr(cls, name.c_str());
  // Data descriptors of the class come before the instance dictionary (Python's order).
  if (d && Py_TYPE(d) == &PyProperty_Type) {
    VarPtr fget = propertyAccessor(*this, *inst, d, name, "fget");
    if (!fget) fail("unreadable property '" + name + "'");
    Args a;
    a.pos.push_back(obj);
    return call(fget, a);
  }
  if (d && Py_TYPE(d)->tp_descr_set)
    fail("attribute '" + name + "' of a " + clsName(cls) + " is a data descriptor");
  if (VarPtr *v = inst->find(name)) return *v;
  if (d) {
    if (PyFunction_Check(d))
      return std::make_shared<BoundVar>(obj, classFunction(*this, *inst, d, name), name);
    if (Py_TYPE(d) == &PyStaticMethod_Type)
      return constantSteal(PyObject_GetAttrString(d, "__func__"));
    if (Py_TYPE(d) == &PyClassMethod_Type)
      return std::make_shared<BoundVar>(constant(cls),
                                        constantSteal(PyObject_GetAttrString(d, "__func__")), name);
    if (Py_TYPE(d)->tp_descr_get) {
      // object's own methods (__repr__, __eq__...) and other C descriptors.
      if (Py_TYPE(d) == &PyMethodDescr_Type || Py_TYPE(d) == &PyWrapperDescr_Type)
        return std::make_shared<BoundVar>(obj, nullptr, name);
      fail("attribute '" + name + "' of a " + clsName(cls) + " is a " + Py_TYPE(d)->tp_name);
    }
    // A plain class attribute: guarded where the caller reaches the class (it may change
    // between calls), a constant of a class the caller cannot reach.
    if (inst->clsSource) return wrapSourced(d, plus(*inst->clsSource, attrStep(name)));
    return constant(d);
  }
  if (typeAttr(cls, "__getattr__"))
    fail("attribute '" + name + "' of a " + clsName(cls) + " through __getattr__");
  fail(std::string("'") + clsName(cls) + "' object has no attribute '" + name + "'");
}

std::optional<bool> Analyzer::instanceHasAttr(const VarPtr &obj, const std::string &name) {
  auto *inst = as<InstanceVar>(obj);
  if (name == "__class__" || inst->find(name) || typeAttr(inst->cls.get(), name.c_str()))
    return true;
  if (typeAttr(inst->cls.get(), "__getattr__")) return std::nullopt;
  return false;
}

void Analyzer::instanceSetAttr(const VarPtr &obj, const std::string &name, const VarPtr &value) {
  auto *inst = as<InstanceVar>(obj);
  PyObject *d = typeAttr(inst->cls.get(), name.c_str());
  if (d && Py_TYPE(d)->tp_descr_set) {
    if (Py_TYPE(d) == &PyProperty_Type) {
      VarPtr fset = propertyAccessor(*this, *inst, d, name, "fset");
      if (!fset) fail("assignment to read-only property '" + name + "'");
      Args a;
      a.pos = {obj, value};
      call(fset, a);
      return;
    }
    fail("assignment to data descriptor '" + name + "' of a " + clsName(inst->cls.get()));
  }
  if (name == "__class__" || name == "__dict__")
    fail("assignment to " + name + " of an instance made in the frame");
  if (VarPtr *v = inst->find(name))
    *v = value;
  else
    inst->attrs.emplace_back(name, value);
}

PyRef instanceConstructor(const InstanceVar &inst) {
  return instanceBuilder(inst.cls.get(), inst.attrs);
}

} // namespace xjit::frontend
