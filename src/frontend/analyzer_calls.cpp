// Calls in the analysis: inlining of Python functions, builtins evaluated symbolically, methods
// of lists/dicts/tuples, nn.Module calls, functions made by MAKE_FUNCTION, and the dispatch to
// the torch op table or a PyTorch fallback.
#include "analyzer.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <unordered_map>

namespace xjit::frontend {

std::string qualnameOf(PyObject *fn) {
  PyObject *q = PyObject_GetAttrString(fn, "__qualname__");
  if (!q) {
    PyErr_Clear();
    q = PyObject_GetAttrString(fn, "__name__");
    if (!q) {
      PyErr_Clear();
      return Py_TYPE(fn)->tp_name;
    }
  }
  std::string s = utf8(q);
  Py_DECREF(q);
  return s;
}

bool hasNonEmpty(PyObject *obj, const char *attr) {
  PyObject *d = PyObject_GetAttrString(obj, attr);
  if (!d) {
    PyErr_Clear();
    return false;
  }
  Py_ssize_t n = PyObject_Size(d);
  Py_DECREF(d);
  if (n < 0) PyErr_Clear();
  return n > 0;
}

using Builtin = std::function<VarPtr(Analyzer &, const Args &)>;

// ---------------------------------------------------------------------------------------------
// Builtins (functions of the `builtins` module and a few library helpers), keyed by identity.

namespace {

void noKw(Analyzer &a, const Args &args, const char *fn) {
  if (!args.kw.empty()) a.fail(std::string(fn) + "() with keyword arguments");
}

/// Whether fn is marked as a trace-time constant: `_dynamo_marked_constant` (what
/// torch._dynamo.assume_constant_result sets, and what transformers sets on its install and
/// capability probes, under an lru_cache) on fn or on the function an lru_cache wraps.
bool isMarkedConstantResult(PyObject *fn) {
  PyRef target = PyRef::borrow(fn);
  if (!PyFunction_Check(fn)) {
    if (std::strcmp(Py_TYPE(fn)->tp_name, "functools._lru_cache_wrapper") != 0) return false;
    target = PyRef::steal(PyObject_GetAttrString(fn, "__wrapped__"));
    if (!target || !PyFunction_Check(target.get())) {
      PyErr_Clear();
      return false;
    }
  }
  PyRef marked = PyRef::steal(PyObject_GetAttrString(target.get(), "_dynamo_marked_constant"));
  if (!marked) {
    PyErr_Clear();
    return false;
  }
  int truth = PyObject_IsTrue(marked.get());
  if (truth < 0) PyErr_Clear();
  return truth == 1;
}

PyObject *partialType() {
  static PyObject *type = [] {
    PyRef functools = check(PyImport_ImportModule("functools"), "import functools");
    return check(PyObject_GetAttrString(functools.get(), "partial"), "functools.partial").release();
  }();
  return type;
}

VarPtr callReal(Analyzer &a, PyObject *fn, const Args &args, const std::string &name) {
  PyRef pos = check(PyTuple_New(static_cast<Py_ssize_t>(args.pos.size())), "tuple");
  for (size_t i = 0; i < args.pos.size(); ++i) {
    PyRef v = a.asPython(args.pos[i]);
    if (!v) a.fail(name + "() on a value known only at run time (" + a.describe(args.pos[i]) + ")");
    PyTuple_SET_ITEM(pos.get(), static_cast<Py_ssize_t>(i), v.release());
  }
  PyRef kw;
  if (!args.kw.empty()) {
    kw = check(PyDict_New(), "dict");
    for (auto &[k, v] : args.kw) {
      PyRef pv = a.asPython(v);
      if (!pv) a.fail(name + "() on a value known only at run time");
      PyDict_SetItemString(kw.get(), k.c_str(), pv.get());
    }
  }
  PyObject *r = PyObject_Call(fn, pos.get(), kw.get());
  if (!r) a.fail(name + "() raises " + takePyErrorType());
  // A fresh list ("a.b".split("."), sorted(...)) is abstract like a list display, so it can be
  // iterated, indexed and mutated; its items are constants.
  if (PyList_CheckExact(r)) {
    PyRef hold = PyRef::steal(r);
    std::vector<VarPtr> items;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(r); ++i)
      items.push_back(a.constant(PyList_GET_ITEM(r, i)));
    return std::make_shared<ListVar>(std::move(items));
  }
  return a.constantSteal(r);
}

/// A torch.nn module without parameters, buffers or submodules built from constants inside the
/// frame (`loss_fct = CrossEntropyLoss()` in Hugging Face's task heads), or a transformers
/// activation module (`ACT2FN["silu"]` builds a new one at every lookup: Mamba's conv path):
/// built once at capture and inlined like the caller's modules. It has no source, so returning
/// or storing it fails (a later call would get this object, not a new one). Null when it does
/// not qualify.
VarPtr statelessTorchModule(Analyzer &a, PyObject *fn, const Args &args, const std::string &qn) {
  const std::string mod = moduleNameOf(fn);
  if (mod.rfind("torch.nn.modules.", 0) != 0 && mod != "transformers.activations") return nullptr;
  for (const VarPtr &v : args.pos)
    if (v->kind == VarKind::Tensor) return nullptr;
  for (const auto &kv : args.kw)
    if (kv.second->kind == VarKind::Tensor) return nullptr;
  VarPtr built = callReal(a, fn, args, qn);
  PyRef m = a.asPython(built);
  if (!m) return nullptr;
  for (const char *table : {"_parameters", "_buffers", "_modules"}) {
    PyRef d = PyRef::steal(PyObject_GetAttrString(m.get(), table));
    if (!d) {
      PyErr_Clear();
      return nullptr;
    }
    if (!PyDict_Check(d.get())) return nullptr;
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(d.get(), &pos, &key, &value))
      if (value != Py_None) return nullptr;
  }
  return std::make_shared<ModuleVar>(std::move(m));
}

// The types isinstance() sees for an abstract value.
PyRef pyTypeOf(Analyzer &a, const VarPtr &v) {
  switch (v->kind) {
  case VarKind::Object:
    return PyRef::borrow(reinterpret_cast<PyObject *>(Py_TYPE(as<ObjectVar>(v)->obj.get())));
  case VarKind::Module:
    return PyRef::borrow(reinterpret_cast<PyObject *>(Py_TYPE(as<ModuleVar>(v)->obj.get())));
  case VarKind::Tensor: return PyRef::borrow(torchTensorType());
  case VarKind::SymInt: return PyRef::borrow(reinterpret_cast<PyObject *>(&PyLong_Type));
  case VarKind::SymFloat: return PyRef::borrow(reinterpret_cast<PyObject *>(&PyFloat_Type));
  case VarKind::Tuple: {
    auto *t = as<TupleVar>(v);
    return t->structType ? t->structType
                         : PyRef::borrow(reinterpret_cast<PyObject *>(&PyTuple_Type));
  }
  case VarKind::List: return PyRef::borrow(reinterpret_cast<PyObject *>(&PyList_Type));
  case VarKind::Dict: return PyRef::borrow(reinterpret_cast<PyObject *>(&PyDict_Type));
  case VarKind::Slice: return PyRef::borrow(reinterpret_cast<PyObject *>(&PySlice_Type));
  case VarKind::Function: return PyRef::borrow(reinterpret_cast<PyObject *>(&PyFunction_Type));
  case VarKind::Bound: return PyRef::borrow(reinterpret_cast<PyObject *>(&PyMethod_Type));
  case VarKind::Partial: return PyRef::borrow(partialType());
  case VarKind::Dataclass: return as<DataclassVar>(v)->cls;
  case VarKind::Instance: return as<InstanceVar>(v)->cls;
  default: a.fail(std::string("type() of a ") + varKindName(v->kind));
  }
}

std::vector<VarPtr> argsOrIterable(Analyzer &a, const Args &args) {
  if (args.pos.size() == 1) return a.iterate(args.pos[0]);
  return args.pos;
}

// The sort keys of min/max/sorted: key(item) through the analyzer (a lambda or function is
// inlined), or the items themselves.
std::vector<VarPtr> sortKeys(Analyzer &a, const Args &args, const std::vector<VarPtr> &items) {
  const VarPtr *key = args.find("key");
  if (!key || ((*key)->kind == VarKind::Object && as<ObjectVar>(*key)->obj.get() == Py_None))
    return items;
  std::vector<VarPtr> keys;
  keys.reserve(items.size());
  for (const VarPtr &item : items) {
    Args ka;
    ka.pos = {item};
    keys.push_back(a.call(*key, ka));
  }
  return keys;
}

// min/max over Python values (tensors would need a data-dependent comparison). Like Python, the
// first of equal items wins.
VarPtr minMax(Analyzer &a, const Args &args, bool isMax) {
  for (auto &[k, v] : args.kw)
    if (k != "key" && k != "default") a.fail("min/max with keyword " + k + "=");
  Args positional;
  positional.pos = args.pos;
  std::vector<VarPtr> items = argsOrIterable(a, positional);
  if (items.empty()) {
    if (const VarPtr *d = args.find("default")) return *d;
    a.fail("min/max of an empty sequence");
  }
  std::vector<VarPtr> keys = sortKeys(a, args, items);
  size_t best = 0;
  for (size_t i = 1; i < items.size(); ++i) {
    VarPtr better = a.compareOp(isMax ? 4 /* > */ : 0 /* < */, keys[i], keys[best]);
    if (a.truthy(better)) best = i;
  }
  return items[best];
}

// sorted(iterable, key=..., reverse=...) over Python values: a stable sort on `<` of the keys
// (reverse=True keeps equal items in order, as Python's does). Comparing tensors would be a
// data-dependent decision: the comparison fails and the call is a graph break.
VarPtr sortedCall(Analyzer &a, const Args &args) {
  if (args.pos.size() != 1) a.fail("sorted() takes one positional argument");
  for (auto &[k, v] : args.kw)
    if (k != "key" && k != "reverse") a.fail("sorted() with keyword " + k + "=");
  std::vector<VarPtr> items = a.iterate(args.pos[0]);
  std::vector<VarPtr> keys = sortKeys(a, args, items);
  bool reverse = false;
  if (const VarPtr *r = args.find("reverse")) reverse = a.truthy(*r);
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t i, size_t j) {
    return a.truthy(reverse ? a.compareOp(0 /* < */, keys[j], keys[i])
                            : a.compareOp(0 /* < */, keys[i], keys[j]));
  });
  std::vector<VarPtr> out;
  out.reserve(items.size());
  for (size_t i : order)
    out.push_back(items[i]);
  return std::make_shared<ListVar>(std::move(out));
}

const std::unordered_map<std::string, Builtin> &builtinTable() {
  static const std::unordered_map<std::string, Builtin> table = {
      {"len",
       [](Analyzer &a, const Args &args) -> VarPtr {
         noKw(a, args, "len");
         if (args.pos.size() != 1) a.fail("len() takes one argument");
         if (args.pos[0]->kind == VarKind::Tensor) return a.sizeOf(args.pos[0], 0);
         return a.integer(a.length(args.pos[0]));
       }},
      {"isinstance",
       [](Analyzer &a, const Args &args) -> VarPtr {
         if (args.pos.size() != 2) a.fail("isinstance() takes two arguments");
         PyRef cls = a.asPython(args.pos[1]);
         if (!cls) a.fail("isinstance() with a class known only at run time");
         if (auto *o = as<ObjectVar>(args.pos[0])) {
           int r = PyObject_IsInstance(o->obj.get(), cls.get());
           if (r < 0) throwPyError("isinstance");
           return a.boolean(r);
         }
         if (auto *m = as<ModuleVar>(args.pos[0])) {
           int r = PyObject_IsInstance(m->obj.get(), cls.get());
           if (r < 0) throwPyError("isinstance");
           return a.boolean(r);
         }
         PyRef t = pyTypeOf(a, args.pos[0]);
         int r = PyObject_IsSubclass(t.get(), cls.get());
         if (r < 0) throwPyError("issubclass");
         return a.boolean(r);
       }},
      {"issubclass",
       [](Analyzer &a, const Args &args) -> VarPtr {
         return callReal(a, PyDict_GetItemString(PyEval_GetBuiltins(), "issubclass"), args,
                         "issubclass");
       }},
      {"type",
       [](Analyzer &a, const Args &args) -> VarPtr {
         if (args.pos.size() != 1) a.fail("type() with three arguments");
         PyRef t = pyTypeOf(a, args.pos[0]);
         VarPtr r = a.constant(t.get());
         // Where the caller reaches the class: its attributes (a counter, `type(self).n += 1`)
         // are then guarded instead of read as constants.
         const VarPtr &v = args.pos[0];
         if (v->source && (v->kind == VarKind::Object || v->kind == VarKind::Module))
           r->source = plus(*v->source, attrStep("__class__"));
         if (auto *inst = as<InstanceVar>(v)) r->source = inst->clsSource;
         return r;
       }},
      {"getattr",
       [](Analyzer &a, const Args &args) -> VarPtr {
         if (args.pos.size() < 2 || args.pos.size() > 3) a.fail("getattr() takes 2 or 3 arguments");
         PyRef n = a.asPython(args.pos[1]);
         if (!n || !PyUnicode_Check(n.get())) a.fail("getattr() with a non-constant name");
         std::string name = utf8(n.get());
         if (args.pos.size() == 3 && !a.hasAttr(args.pos[0], name)) return args.pos[2];
         return a.getAttr(args.pos[0], name);
       }},
      {"hasattr",
       [](Analyzer &a, const Args &args) -> VarPtr {
         if (args.pos.size() != 2) a.fail("hasattr() takes 2 arguments");
         PyRef n = a.asPython(args.pos[1]);
         if (!n || !PyUnicode_Check(n.get())) a.fail("hasattr() with a non-constant name");
         return a.boolean(a.hasAttr(args.pos[0], utf8(n.get())));
       }},
      {"setattr",
       [](Analyzer &a, const Args &args) -> VarPtr {
         if (args.pos.size() != 3) a.fail("setattr() takes 3 arguments");
         PyRef n = a.asPython(args.pos[1]);
         if (!n || !PyUnicode_Check(n.get())) a.fail("setattr() with a non-constant name");
         a.setAttr(args.pos[0], utf8(n.get()), args.pos[2]);
         return a.none();
       }},
      {"range",
       [](Analyzer &a, const Args &args) -> VarPtr {
         return callReal(a, reinterpret_cast<PyObject *>(&PyRange_Type), args, "range");
       }},
      {"enumerate",
       [](Analyzer &a, const Args &args) -> VarPtr {
         if (args.pos.empty()) a.fail("enumerate() without arguments");
         int64_t start = 0;
         if (args.pos.size() > 1) start = a.asInt(args.pos[1]).value_or(0);
         if (const VarPtr *s = args.find("start")) start = a.asInt(*s).value_or(0);
         std::vector<VarPtr> out;
         for (VarPtr &v : a.iterate(args.pos[0]))
           out.push_back(std::make_shared<TupleVar>(std::vector<VarPtr>{a.integer(start++), v}));
         return std::make_shared<IteratorVar>(std::move(out));
       }},
      {"zip",
       [](Analyzer &a, const Args &args) -> VarPtr {
         std::vector<std::vector<VarPtr>> seqs;
         size_t n = SIZE_MAX;
         for (const VarPtr &s : args.pos) {
           seqs.push_back(a.iterate(s));
           n = std::min(n, seqs.back().size());
         }
         if (const VarPtr *strict = args.find("strict"); strict && a.truthy(*strict))
           for (auto &s : seqs)
             if (s.size() != n) a.fail("zip(strict=True) of sequences of different lengths");
         if (seqs.empty()) n = 0;
         std::vector<VarPtr> out;
         for (size_t i = 0; i < n; ++i) {
           std::vector<VarPtr> t;
           for (auto &s : seqs)
             t.push_back(s[i]);
           out.push_back(std::make_shared<TupleVar>(std::move(t)));
         }
         return std::make_shared<IteratorVar>(std::move(out));
       }},
      {"reversed",
       [](Analyzer &a, const Args &args) -> VarPtr {
         if (args.pos.size() != 1) a.fail("reversed() takes one argument");
         std::vector<VarPtr> items = a.iterate(args.pos[0]);
         std::reverse(items.begin(), items.end());
         return std::make_shared<IteratorVar>(std::move(items));
       }},
      {"iter",
       [](Analyzer &a, const Args &args) -> VarPtr {
         if (args.pos.size() != 1) a.fail("iter() with a sentinel");
         return a.makeIterator(args.pos[0]);
       }},
      {"next",
       [](Analyzer &a, const Args &args) -> VarPtr {
         auto *it = args.pos.empty() ? nullptr : as<IteratorVar>(args.pos[0]);
         if (!it) a.fail("next() of a non-iterator");
         if (it->pos < it->items.size()) return it->items[it->pos++];
         if (args.pos.size() > 1) return args.pos[1];
         a.fail("next() raises StopIteration");
       }},
      {"sorted", sortedCall},
      {"min", [](Analyzer &a, const Args &args) { return minMax(a, args, false); }},
      {"max", [](Analyzer &a, const Args &args) { return minMax(a, args, true); }},
      {"sum",
       [](Analyzer &a, const Args &args) -> VarPtr {
         if (args.pos.empty()) a.fail("sum() without arguments");
         VarPtr acc = args.pos.size() > 1 ? args.pos[1] : a.integer(0);
         if (const VarPtr *s = args.find("start")) acc = *s;
         for (VarPtr &v : a.iterate(args.pos[0]))
           acc = a.binaryOp(bc::NB_ADD, acc, v);
         return acc;
       }},
      {"all",
       [](Analyzer &a, const Args &args) -> VarPtr {
         for (VarPtr &v : a.iterate(args.pos.at(0)))
           if (!a.truthy(v)) return a.boolean(false);
         return a.boolean(true);
       }},
      {"any",
       [](Analyzer &a, const Args &args) -> VarPtr {
         for (VarPtr &v : a.iterate(args.pos.at(0)))
           if (a.truthy(v)) return a.boolean(true);
         return a.boolean(false);
       }},
      {"abs",
       [](Analyzer &a, const Args &args) -> VarPtr {
         if (args.pos.size() != 1) a.fail("abs() takes one argument");
         if (args.pos[0]->kind == VarKind::Tensor) return a.emit1("abs", {args.pos[0]});
         return a.unaryOp(-1, args.pos[0]);
       }},
      {"tuple",
       [](Analyzer &a, const Args &args) -> VarPtr {
         if (args.pos.empty()) return std::make_shared<TupleVar>(std::vector<VarPtr>{});
         return std::make_shared<TupleVar>(a.iterate(args.pos[0]));
       }},
      {"set",
       [](Analyzer &a, const Args &args) -> VarPtr {
         noKw(a, args, "set");
         if (args.pos.size() > 1) a.fail("set() takes at most one argument");
         return a.makeFrameSet(args.pos.empty() ? std::vector<VarPtr>{} : a.iterate(args.pos[0]));
       }},
      {"list",
       [](Analyzer &a, const Args &args) -> VarPtr {
         if (args.pos.empty()) return std::make_shared<ListVar>(std::vector<VarPtr>{});
         return std::make_shared<ListVar>(a.iterate(args.pos[0]));
       }},
      {"dict",
       [](Analyzer &a, const Args &args) -> VarPtr {
         VarPtr d = std::make_shared<DictVar>();
         if (!args.pos.empty()) {
           if (auto *src = as<DictVar>(args.pos[0])) {
             for (auto &[k, v] : src->items)
               a.setItem(d, a.constant(k.get()), v);
           } else {
             for (VarPtr &kv : a.iterate(args.pos[0])) {
               std::vector<VarPtr> p = a.sequenceItems(kv, "dict item");
               if (p.size() != 2) a.fail("dict() item of length " + std::to_string(p.size()));
               a.setItem(d, p[0], p[1]);
             }
           }
         }
         for (auto &[k, v] : args.kw)
           a.setItem(d, a.constantSteal(PyUnicode_FromString(k.c_str())), v);
         return d;
       }},
      {"int",
       [](Analyzer &a, const Args &args) -> VarPtr {
         if (args.pos.size() == 1 && args.pos[0]->kind == VarKind::SymInt) return args.pos[0];
         if (args.pos.size() == 1 && args.pos[0]->kind == VarKind::Tensor)
           a.fail("int() of a tensor (reads its data)");
         return callReal(a, reinterpret_cast<PyObject *>(&PyLong_Type), args, "int");
       }},
      {"float",
       [](Analyzer &a, const Args &args) -> VarPtr {
         if (args.pos.size() == 1 && args.pos[0]->kind == VarKind::SymFloat) return args.pos[0];
         if (args.pos.size() == 1 && args.pos[0]->kind == VarKind::Tensor)
           a.fail("float() of a tensor (reads its data)");
         return callReal(a, reinterpret_cast<PyObject *>(&PyFloat_Type), args, "float");
       }},
      {"bool",
       [](Analyzer &a, const Args &args) -> VarPtr {
         if (args.pos.empty()) return a.boolean(false);
         return a.boolean(a.truthy(args.pos[0]));
       }},
      {"slice",
       [](Analyzer &a, const Args &args) -> VarPtr {
         std::vector<VarPtr> p = args.pos;
         if (p.size() == 1) return std::make_shared<SliceVar>(a.none(), p[0], a.none());
         if (p.size() == 2) return std::make_shared<SliceVar>(p[0], p[1], a.none());
         if (p.size() == 3) return std::make_shared<SliceVar>(p[0], p[1], p[2]);
         a.fail("slice() takes 1 to 3 arguments");
       }},
      {"callable",
       [](Analyzer &a, const Args &args) -> VarPtr {
         const VarPtr &v = args.pos.at(0);
         if (auto *o = as<ObjectVar>(v)) return a.boolean(PyCallable_Check(o->obj.get()));
         return a.boolean(v->kind == VarKind::Function || v->kind == VarKind::Bound ||
                          v->kind == VarKind::Module);
       }},
      {"map",
       [](Analyzer &a, const Args &args) -> VarPtr {
         if (args.pos.size() < 2) a.fail("map() takes a function and iterables");
         std::vector<std::vector<VarPtr>> seqs;
         size_t n = SIZE_MAX;
         for (size_t i = 1; i < args.pos.size(); ++i) {
           seqs.push_back(a.iterate(args.pos[i]));
           n = std::min(n, seqs.back().size());
         }
         std::vector<VarPtr> out;
         for (size_t i = 0; i < n; ++i) {
           Args ca;
           for (auto &s : seqs)
             ca.pos.push_back(s[i]);
           out.push_back(a.call(args.pos[0], ca));
         }
         return std::make_shared<IteratorVar>(std::move(out));
       }},
      {"filter",
       [](Analyzer &a, const Args &args) -> VarPtr {
         if (args.pos.size() != 2) a.fail("filter() takes 2 arguments");
         std::vector<VarPtr> out;
         bool identity =
             as<ObjectVar>(args.pos[0]) && as<ObjectVar>(args.pos[0])->obj.get() == Py_None;
         for (VarPtr &v : a.iterate(args.pos[1])) {
           Args ca;
           ca.pos.push_back(v);
           if (a.truthy(identity ? v : a.call(args.pos[0], ca))) out.push_back(v);
         }
         return std::make_shared<IteratorVar>(std::move(out));
       }},
      {"super",
       [](Analyzer &a, const Args &args) -> VarPtr {
         if (args.pos.size() == 2) {
           PyRef cls = a.asPython(args.pos[0]);
           if (!cls || !PyType_Check(cls.get())) a.fail("super() with a non-class");
           return std::make_shared<SuperVar>(cls, args.pos[1]);
         }
         if (!args.pos.empty()) a.fail("super() with one argument");
         Frame *f = a.current();
         PyCodeObject *co = f->co();
         VarPtr cls;
         for (int i = 0; i < co->co_nlocalsplus; ++i) {
           if (utf8(PyTuple_GET_ITEM(co->co_localsplusnames, i)) == "__class__")
             if (auto *c = as<CellVar>(f->locals[static_cast<size_t>(i)])) cls = c->contents;
         }
         if (!cls || co->co_argcount == 0 || f->locals.empty()) a.fail("super() without a class");
         VarPtr self = f->locals[0];
         if (auto *c = as<CellVar>(self)) self = c->contents;
         PyRef clsObj = a.asPython(cls);
         if (!clsObj) a.fail("super() with an unknown __class__");
         return std::make_shared<SuperVar>(clsObj, self);
       }},
      {"print", [](Analyzer &a, const Args &) -> VarPtr { a.fail("call to print()"); }},
      {"input", [](Analyzer &a, const Args &) -> VarPtr { a.fail("call to input()"); }},
      {"open", [](Analyzer &a, const Args &) -> VarPtr { a.fail("call to open()"); }},
      {"id", [](Analyzer &a, const Args &) -> VarPtr { a.fail("call to id()"); }},
  };
  return table;
}

// Pure builtins evaluated at capture time on constant arguments.
bool isPureBuiltinName(const std::string &n) {
  static const char *const names[] = {"round",  "divmod", "pow", "str",  "repr",
                                      "format", "ord",    "chr", "hash", "frozenset",
                                      "bin",    "hex",    "oct", "ascii"};
  for (const char *p : names)
    if (n == p) return true;
  return false;
}

// operator.<name> -> BINARY_OP / COMPARE_OP argument.
int operatorBinary(const std::string &n) {
  static const std::pair<const char *, int> ops[] = {
      {"add", bc::NB_ADD},
      {"sub", bc::NB_SUBTRACT},
      {"mul", bc::NB_MULTIPLY},
      {"truediv", bc::NB_TRUE_DIVIDE},
      {"floordiv", bc::NB_FLOOR_DIVIDE},
      {"mod", bc::NB_REMAINDER},
      {"pow", bc::NB_POWER},
      {"matmul", bc::NB_MATRIX_MULTIPLY},
      {"and_", bc::NB_AND},
      {"or_", bc::NB_OR},
      {"xor", bc::NB_XOR},
      {"lshift", bc::NB_LSHIFT},
      {"rshift", bc::NB_RSHIFT},
      {"iadd", bc::NB_INPLACE_ADD},
      {"imul", bc::NB_INPLACE_ADD + bc::NB_MULTIPLY}};
  for (auto &[k, v] : ops)
    if (n == k) return v;
  return -1;
}

int operatorCompare(const std::string &n) {
  static const char *const names[] = {"lt", "le", "eq", "ne", "gt", "ge"};
  for (int i = 0; i < 6; ++i)
    if (n == names[i]) return i;
  return -1;
}

} // namespace

// ---------------------------------------------------------------------------------------------
// Dispatch

namespace {
/// module.children() / module.named_children() of nn.Module itself (not an override): the
/// submodules from `_modules` (its keys guarded, each submodule guarded by identity), without
/// repeats, as a list of the same items the generator would give. nullptr: not such a call.
VarPtr moduleChildren(Analyzer &a, const VarPtr &self, const std::string &name, const VarPtr &func,
                      const Args &args) {
  if (self->kind != VarKind::Module || (name != "children" && name != "named_children"))
    return nullptr;
  a.refuseIfShared(self, name + "() (repeats dropped by identity)");
  auto *f = as<ObjectVar>(func);
  if (!f || !args.pos.empty() || !args.kw.empty()) return nullptr;
  PyRef base = check(PyObject_GetAttrString(torchModuleType(), name.c_str()), "Module method");
  if (f->obj.get() != base.get()) return nullptr;
  auto *mods = as<DictVar>(a.getAttr(self, "_modules"));
  if (!mods) return nullptr;
  std::vector<VarPtr> out;
  std::vector<PyObject *> seen;
  for (auto &[k, v] : mods->items) {
    auto *m = as<ModuleVar>(v);
    if (!m || std::find(seen.begin(), seen.end(), m->obj.get()) != seen.end()) continue;
    seen.push_back(m->obj.get());
    if (name == "children")
      out.push_back(v);
    else
      out.push_back(std::make_shared<TupleVar>(std::vector<VarPtr>{a.constant(k.get()), v}));
  }
  return std::make_shared<ListVar>(std::move(out));
}

/// os.environ.get(k[, d]) / os.environ[k] / k in os.environ with constant arguments (library
/// code reads settings this way, e.g. transformers' SDPA integration): evaluated now. Reading
/// os.environ._data through its source guards the environment's keys and values, so a changed
/// variable recompiles. nullptr: not such a call.
VarPtr environLookup(Analyzer &a, const VarPtr &self, const std::string &name, const Args &args) {
  auto *o = as<ObjectVar>(self);
  if (!o || !o->source || std::strcmp(Py_TYPE(o->obj.get())->tp_name, "_Environ") != 0)
    return nullptr;
  if (name != "get" && name != "__getitem__" && name != "__contains__") return nullptr;
  if (!args.kw.empty()) return nullptr;
  PyRef pos = check(PyTuple_New(static_cast<Py_ssize_t>(args.pos.size())), "tuple");
  for (size_t i = 0; i < args.pos.size(); ++i) {
    PyRef v = a.asPython(args.pos[i]);
    if (!v) return nullptr;
    PyTuple_SET_ITEM(pos.get(), static_cast<Py_ssize_t>(i), v.release());
  }
  a.getAttr(self, "_data"); // the guards
  PyRef method = PyRef::steal(PyObject_GetAttrString(o->obj.get(), name.c_str()));
  PyRef r = method ? PyRef::steal(PyObject_Call(method.get(), pos.get(), nullptr)) : PyRef();
  if (!r) {
    PyErr_Clear();
    a.fail("os.environ." + name + "() raises");
  }
  return a.constant(r.get());
}

} // namespace

VarPtr Analyzer::call(const VarPtr &callable, const Args &args) {
  switch (callable->kind) {
  case VarKind::Object:
    return callObject(as<ObjectVar>(callable)->obj.get(), callable->source, args);
  case VarKind::Function: {
    auto *f = as<FunctionVar>(callable);
    return inlineCall(f->code.get(), f->globals.get(), f->globalsSource, f->trustedGlobals,
                      f->defaults, f->kwdefaults, f->closure, args, f->qualname);
  }
  case VarKind::Bound: {
    auto *b = as<BoundVar>(callable);
    if (!b->func) return callMethod(b->self, b->name, args);
    if (VarPtr r = environLookup(*this, b->self, b->name, args)) return r;
    if (VarPtr r = moduleChildren(*this, b->self, b->name, b->func, args)) return r;
    if (b->name == "step")
      if (VarPtr r = optimizerStep(*this, b->self, b->func, args)) return r;
    if (b->name == "zero_grad")
      if (VarPtr r = optimizerZeroGrad(*this, b->self, b->func, args)) return r;
    Args a2;
    a2.pos.reserve(args.pos.size() + 1);
    a2.pos.push_back(b->self);
    a2.pos.insert(a2.pos.end(), args.pos.begin(), args.pos.end());
    a2.kw = args.kw;
    return call(b->func, a2);
  }
  case VarKind::Partial: {
    // The stored arguments first; a keyword of the call wins over a stored one.
    auto *p = as<PartialVar>(callable);
    Args a2;
    a2.pos = p->args;
    a2.pos.insert(a2.pos.end(), args.pos.begin(), args.pos.end());
    for (const auto &[k, v] : p->kw)
      if (!args.find(k)) a2.kw.emplace_back(k, v);
    a2.kw.insert(a2.kw.end(), args.kw.begin(), args.kw.end());
    return call(p->func, a2);
  }
  case VarKind::Module: return callModule(callable, args);
  case VarKind::Instance: return call(getAttr(callable, "__call__"), args);
  case VarKind::GradExit: gradEnabled_ = as<GradExitVar>(callable)->restore; return none();
  case VarKind::AutocastExit: autocast_ = as<AutocastExitVar>(callable)->restore; return none();
  default: fail("calling a " + typeName(callable));
  }
}

/// `ref()` of a weak reference the frame reaches (nn.RNNBase's check that its flat weights are
/// still its parameters: `ref() is not getattr(self, name)`): the referent is an input tensor
/// of this capture, reached through its own source. The weak reference is guarded by identity
/// (it always refers to the same object, or to None once that died) and the tensor's source by
/// identity too, so at run time `ref()` is the object at that source, and `is` compares alike.
VarPtr Analyzer::callWeakref(PyObject *ref, const std::optional<Source> &refSource,
                             const Args &args) {
  if (!args.pos.empty() || !args.kw.empty()) fail("calling a weak reference with arguments");
  if (!refSource) fail("calling a weak reference the frame cannot reach");
  guardId(*refSource, ref);
  PyObject *referent = PyWeakref_GetObject(ref); // borrowed
  if (referent == Py_None) return none();        // dead, and stays dead
  for (auto &[obj, tv] : inputObjects_)
    if (obj.get() == referent) {
      guardId(*tv->source, referent);
      return tv;
    }
  fail(std::string("calling a weak reference to a ") + Py_TYPE(referent)->tp_name +
       " that is not an input tensor of the frame");
}

VarPtr Analyzer::callObject(PyObject *fn, const std::optional<Source> &fnSource, const Args &args) {
  // 1. The torch op table (torch.*, Tensor.*, F.*).
  if (VarPtr r = callTorchFunction(fn, args)) return r;
  if (PyWeakref_CheckRefExact(fn)) return callWeakref(fn, fnSource, args);

  // 1b. functools.partial(f, *args, **kw) made in the frame, every argument a Python object
  // known at capture time (constants and guarded objects: `partial(F.gelu, approximate="tanh")`):
  // made now, called through 4b; if it escapes it is made again after each call's graph
  // (madePartials_), a new object per call as in Python. With other arguments (tensors,
  // containers, modules, functions made in the frame) it is a PartialVar (below).
  if (fn == partialType()) {
    std::vector<PyRef> pos;
    std::vector<std::pair<std::string, PyRef>> kw;
    for (const VarPtr &v : args.pos)
      if (auto *o = as<ObjectVar>(v)) pos.push_back(o->obj);
    for (const auto &[k, v] : args.kw)
      if (auto *o = as<ObjectVar>(v)) kw.emplace_back(k, o->obj);
    if (!pos.empty() && pos.size() == args.pos.size() && kw.size() == args.kw.size()) {
      PyRef t = check(PyTuple_New(static_cast<Py_ssize_t>(pos.size())), "tuple");
      for (size_t i = 0; i < pos.size(); ++i)
        PyTuple_SET_ITEM(t.get(), static_cast<Py_ssize_t>(i), PyRef(pos[i]).release());
      PyRef d = check(PyDict_New(), "dict");
      for (const auto &[k, v] : kw)
        if (PyDict_SetItemString(d.get(), k.c_str(), v.get()) != 0) check(nullptr, "dict");
      PyObject *made = PyObject_Call(fn, t.get(), d.get());
      if (!made) {
        PyErr_Clear();
        fail("functools.partial() raises");
      }
      VarPtr r = constantSteal(made);
      madePartials_[r.get()] = {r, std::move(t), std::move(d)};
      return r;
    }
    // Other arguments (a module, tensors: transformers' gradient-checkpointing layers call
    // checkpoint(partial(forward, self, **kwargs), *args)): an abstract partial, which the frame
    // may call but not return or store.
    if (!args.pos.empty()) {
      auto p = std::make_shared<PartialVar>();
      p->func = args.pos[0];
      p->args.assign(args.pos.begin() + 1, args.pos.end());
      p->kw = args.kw;
      return p;
    }
  }

  std::string qn = qualnameOf(fn);
  std::string mod = moduleNameOf(fn);

  // 2. Builtins.
  if (PyCFunction_Check(fn) && PyCFunction_GET_SELF(fn) &&
      PyModule_Check(PyCFunction_GET_SELF(fn)) &&
      std::strcmp(PyModule_GetName(PyCFunction_GET_SELF(fn)), "builtins") == 0) {
    auto &table = builtinTable();
    if (auto it = table.find(qn); it != table.end()) return it->second(*this, args);
    if (isPureBuiltinName(qn)) return callReal(*this, fn, args, qn);
    fail("call to builtin " + qn + "()");
  }
  if (PyType_Check(fn)) {
    auto &table = builtinTable();
    static const char *const typeBuiltins[] = {
        "range", "enumerate", "zip",  "reversed", "tuple", "list",   "dict",  "set",
        "int",   "float",     "bool", "slice",    "map",   "filter", "super", "type"};
    if (reinterpret_cast<PyTypeObject *>(fn)->tp_flags & Py_TPFLAGS_IMMUTABLETYPE ||
        PyType_HasFeature(reinterpret_cast<PyTypeObject *>(fn), Py_TPFLAGS_BASETYPE)) {
      for (const char *b : typeBuiltins)
        if (fn == PyDict_GetItemString(PyEval_GetBuiltins(), b)) return table.at(b)(*this, args);
    }
    if (fn == reinterpret_cast<PyObject *>(&PyUnicode_Type) ||
        fn == reinterpret_cast<PyObject *>(&PyFrozenSet_Type))
      return callReal(*this, fn, args, qn);
    // Exceptions are built (the raise that follows is the graph break).
    if (PyObject_IsSubclass(fn, PyExc_BaseException) == 1) return callReal(*this, fn, args, qn);
    // namedtuple classes and torch.Size.
    if (PyObject_IsSubclass(fn, reinterpret_cast<PyObject *>(&PyTuple_Type)) == 1) {
      if (PyObject_HasAttrString(fn, "_fields")) {
        PyRef fields = check(PyObject_GetAttrString(fn, "_fields"), "_fields");
        PyRef defaults = check(PyObject_GetAttrString(fn, "_field_defaults"), "_field_defaults");
        std::vector<VarPtr> items;
        Py_ssize_t nf = PyTuple_GET_SIZE(fields.get());
        for (Py_ssize_t i = 0; i < nf; ++i) {
          std::string f = utf8(PyTuple_GET_ITEM(fields.get(), i));
          if (static_cast<size_t>(i) < args.pos.size()) {
            items.push_back(args.pos[static_cast<size_t>(i)]);
          } else if (const VarPtr *v = args.find(f)) {
            items.push_back(*v);
          } else if (PyObject *d = PyDict_GetItemString(defaults.get(), f.c_str())) {
            items.push_back(constant(d));
          } else {
            fail(qn + "() missing field '" + f + "'");
          }
        }
        return std::make_shared<TupleVar>(std::move(items), PyRef::borrow(fn));
      }
      if (args.pos.size() <= 1 && args.kw.empty()) {
        std::vector<VarPtr> items = args.pos.empty() ? std::vector<VarPtr>{} : iterate(args.pos[0]);
        return std::make_shared<TupleVar>(std::move(items), PyRef::borrow(fn));
      }
    }
    if (PyObject_HasAttrString(fn, "__dataclass_fields__")) return makeDataclass(fn, args);
    // torch.finfo(dtype) / torch.iinfo(dtype): facts about a dtype, known at capture time (T5's
    // and GPT-Neo's attention masks fill with torch.finfo(dtype).min).
    if (isTorchDtypeInfoType(fn)) return callReal(*this, fn, args, qn);
    if (isModuleObject(fn) || PyObject_IsSubclass(fn, torchModuleType()) == 1) {
      if (VarPtr m = statelessTorchModule(*this, fn, args, qn)) return m;
      fail("constructing a module (" + qn + ") inside the captured code");
    }
    if (isTrustedModuleName(mod)) return fallbackCall(fn, qn, args);
    return makeInstance(fn, fnSource, args); // a graph break when its instances cannot be modeled
  }

  // 3. Library helpers with a known meaning.
  if (mod == "operator" || mod == "_operator") {
    std::string n = qn;
    if (int nb = operatorBinary(n); nb >= 0 && args.pos.size() == 2)
      return binaryOp(nb, args.pos[0], args.pos[1]);
    if (int cmp = operatorCompare(n); cmp >= 0 && args.pos.size() == 2)
      return compareOp(cmp, args.pos[0], args.pos[1]);
    if (n == "getitem" && args.pos.size() == 2) return getItem(args.pos[0], args.pos[1]);
    if (n == "neg" && args.pos.size() == 1) return unaryOp(bc::UNARY_NEGATIVE, args.pos[0]);
    if (n == "not_" && args.pos.size() == 1) return boolean(!truthy(args.pos[0]));
    if (n == "contains" && args.pos.size() == 2) return boolean(contains(args.pos[0], args.pos[1]));
    if (n == "is_" && args.pos.size() == 2) return boolean(isSame(args.pos[0], args.pos[1]));
    if (n == "is_not" && args.pos.size() == 2) return boolean(!isSame(args.pos[0], args.pos[1]));
    return callReal(*this, fn, args, "operator." + n);
  }
  if (mod == "math") return callReal(*this, fn, args, "math." + qn);
  // Introspection of known functions (inspect.signature(self.forward).parameters ...).
  if (mod == "inspect") return callReal(*this, fn, args, "inspect." + qn);
  // PyTorch's API usage telemetry (first statement of nn.Module.__init__ and of many torch
  // entry points): no effect on the program, so not worth a graph break in every module
  // constructor a script runs.
  if (mod == "torch._C" && qn == "_log_api_usage_once") return constant(Py_None);
  if ((mod == "functools" || mod == "_functools") && qn == "reduce") {
    if (args.pos.size() < 2) fail("functools.reduce() takes 2 or 3 arguments");
    std::vector<VarPtr> items = iterate(args.pos[1]);
    size_t i = 0;
    VarPtr acc;
    if (args.pos.size() == 3) {
      acc = args.pos[2];
    } else {
      if (items.empty()) fail("reduce() of an empty sequence");
      acc = items[i++];
    }
    for (; i < items.size(); ++i) {
      Args ca;
      ca.pos = {acc, items[i]};
      acc = call(args.pos[0], ca);
    }
    return acc;
  }

  // 3a. transformers' capture_outputs installs its output-capturing forward hooks on the model
  // the first time outputs are requested (once: a flag on the model, set under a lock). Run now,
  // as eager runs it at that call, so that the capture inlines the hooks it installed (their
  // dicts guarded) instead of breaking at the lock.
  if (mod == "transformers.utils.output_capturing" && qn == "maybe_install_capturing_hooks") {
    callReal(*this, fn, args, qn);
    return none();
  }

  // 3b. Trace-time constants: called now with arguments known at capture time, the result a
  // constant (wav2vec2's is_fsdp_managed_module asks is_torch_distributed_available()).
  if (isMarkedConstantResult(fn)) return callReal(*this, fn, args, qn);

  // 3c. torch.autograd.Function.apply: its forward inlined, or with a gradient to record, its
  // forward and backward captured as a custom_vjp (analyzer_function.cpp).
  if (VarPtr r = functionApply(*this, fn, fnSource, args)) return r;

  // 3d. Activation checkpointing: the function inlined, its values recomputed in the backward.
  if (VarPtr r = checkpointCall(*this, fn, args)) return r;

  if (VarPtr r = scheduledOptimizerStep(*this, fn, fnSource, args)) return r;
  if (VarPtr r = optimizerStepCall(*this, fn, args)) return r;
  // 4. Python functions: inlined (PyTorch's own helpers on tensors run through a fallback).
  if (PyFunction_Check(fn)) {
    PyObject *globals = PyFunction_GET_GLOBALS(fn);
    bool trusted = isTrustedModuleName(mod);
    bool tensorArgs = false;
    for (const VarPtr &v : args.pos)
      tensorArgs |= v->kind == VarKind::Tensor;
    for (auto &[k, v] : args.kw)
      tensorArgs |= v->kind == VarKind::Tensor;
    // Module code is inlined like the user's: nn.modules, and parametrizations (weight_norm's
    // _WeightNorm.forward takes the module itself, which a fallback node cannot pass).
    // F._canonical_mask / _none_or_dtype (nn.MultiheadAttention's mask handling: dtype checks
    // and a bool mask's masked_fill) are inlined too, so that its masks stay in the graph.
    const bool maskHelper =
        mod == "torch.nn.functional" && (qn == "_canonical_mask" || qn == "_none_or_dtype");
    // checkpoint_sequential's segments are checkpoint calls (analyzer_checkpoint.cpp).
    const bool checkpointHelper = mod == "torch.utils.checkpoint" && qn == "checkpoint_sequential";
    if (trusted && mod.rfind("torch", 0) == 0 && tensorArgs && !maskHelper && !checkpointHelper &&
        mod.rfind("torch.nn.modules", 0) != 0 && mod.rfind("torch.nn.utils.parametriz", 0) != 0)
      return fallbackCall(fn, mod + "." + qn, args);
    std::optional<Source> globalsSource;
    if (globals != rootGlobals()) {
      if (fnSource)
        globalsSource = plus(*fnSource, attrStep("__globals__"));
      else
        trusted = true; // unreachable functions' globals are read as constants
    }
    VarPtr defaults, kwdefaults;
    PyObject *d = PyFunction_GET_DEFAULTS(fn);
    if (d && d != Py_None) {
      if (fnSource && !trusted) {
        defaults = wrapSourced(d, plus(*fnSource, attrStep("__defaults__")));
      } else {
        // Item by item: a default that is not a constant (copy.deepcopy's `_nil=[]`) is an
        // object of its own; the tuple as one constant could not be iterated.
        std::vector<VarPtr> items;
        for (Py_ssize_t i = 0; PyTuple_Check(d) && i < PyTuple_GET_SIZE(d); ++i)
          items.push_back(constant(PyTuple_GET_ITEM(d, i)));
        defaults = std::make_shared<TupleVar>(std::move(items));
      }
    }
    PyObject *kd = PyFunction_GET_KW_DEFAULTS(fn);
    if (kd && kd != Py_None) {
      auto dv = std::make_shared<DictVar>();
      PyObject *k, *v;
      Py_ssize_t pos = 0;
      while (PyDict_Next(kd, &pos, &k, &v))
        dv->items.emplace_back(PyRef::borrow(k), constant(v));
      kwdefaults = dv;
    }
    std::vector<VarPtr> closure;
    PyObject *cl = PyFunction_GET_CLOSURE(fn);
    if (cl && PyTuple_Check(cl)) {
      for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(cl); ++i) {
        PyObject *cell = PyTuple_GET_ITEM(cl, i);
        if (fnSource) {
          Source cs = plus(plus(*fnSource, attrStep("__closure__")),
                           SourceStep{SourceStep::Item, i, "", {}});
          closure.push_back(wrapSourced(cell, cs));
        } else {
          PyObject *c = PyCell_GET(cell);
          if (c && isTensor(c)) fail("closure over a tensor of a function the frame cannot reach");
          closure.push_back(std::make_shared<CellVar>(c ? constant(c) : nullptr));
        }
      }
    }
    return inlineCall(PyFunction_GET_CODE(fn), globals, globalsSource, trusted, defaults,
                      kwdefaults, std::move(closure), args, qn);
  }
  if (PyMethod_Check(fn)) {
    PyObject *self = PyMethod_GET_SELF(fn);
    VarPtr selfVar = fnSource ? wrapSourced(self, plus(*fnSource, attrStep("__self__")))
                              : (isModuleObject(self) ? nullptr : constant(self));
    if (!selfVar) fail("bound method of a module the frame cannot reach");
    Args a2;
    a2.pos.push_back(selfVar);
    a2.pos.insert(a2.pos.end(), args.pos.begin(), args.pos.end());
    a2.kw = args.kw;
    VarPtr func = constant(PyMethod_GET_FUNCTION(fn));
    if (fnSource) func->source = plus(*fnSource, attrStep("__func__"));
    return call(func, a2);
  }

  // 4b. functools.partial objects made outside the frame: their function called with the stored
  // arguments first.
  if (PyObject_TypeCheck(fn, reinterpret_cast<PyTypeObject *>(partialType()))) {
    PyRef func = check(PyObject_GetAttrString(fn, "func"), "partial.func");
    PyRef pargs = check(PyObject_GetAttrString(fn, "args"), "partial.args");
    PyRef pkw = check(PyObject_GetAttrString(fn, "keywords"), "partial.keywords");
    if (!PyTuple_Check(pargs.get()) || !PyDict_Check(pkw.get()))
      fail("a functools.partial subclass");
    // Sourced: the stored arguments are guarded like any other input (a tensor among them is an
    // input); unsourced: they are constants.
    auto item = [&](PyObject *o, const char *attr, SourceStep step) {
      return fnSource ? wrapSourced(o, plus(plus(*fnSource, attrStep(attr)), step)) : constant(o);
    };
    Args a2;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(pargs.get()); ++i)
      a2.pos.push_back(
          item(PyTuple_GET_ITEM(pargs.get(), i), "args", SourceStep{SourceStep::Item, i, "", {}}));
    a2.pos.insert(a2.pos.end(), args.pos.begin(), args.pos.end());
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(pkw.get(), &pos, &k, &v)) {
      if (!PyUnicode_Check(k)) fail("functools.partial with a non-string keyword");
      std::string name = utf8(k);
      if (args.find(name)) continue; // the call's keyword wins
      a2.kw.emplace_back(
          name, item(v, "keywords", SourceStep{SourceStep::DictKey, 0, "", PyRef::borrow(k)}));
    }
    a2.kw.insert(a2.kw.end(), args.kw.begin(), args.kw.end());
    VarPtr funcVar = fnSource ? wrapSourced(func.get(), plus(*fnSource, attrStep("func")))
                              : constant(func.get());
    return call(funcVar, a2);
  }

  // 4c. Instances of user classes with a Python __call__: the method inlined on the instance
  // (PyTorch's and other libraries' callables, e.g. torch.ops packets, keep their handling below).
  if (!PyType_Check(fn) && !isModuleObject(fn) && !isTrustedModuleName(mod)) {
    static PyObject *callName = PyUnicode_InternFromString("__call__");
    PyObject *callFn = _PyType_Lookup(Py_TYPE(fn), callName);
    if (callFn && PyFunction_Check(callFn)) {
      VarPtr selfVar = fnSource ? wrapSourced(fn, *fnSource) : constant(fn);
      Args a2;
      a2.pos.push_back(selfVar);
      a2.pos.insert(a2.pos.end(), args.pos.begin(), args.pos.end());
      a2.kw = args.kw;
      return call(constant(callFn), a2);
    }
  }

  // 4c. ContextVar.get() (transformers' output-capturing hooks ask whether a collector is
  // active): the value in the calling context, read at a source of its own and guarded like
  // any value the frame reaches (None by value, a dict by its keys...).
  if (PyCFunction_Check(fn) && PyCFunction_GET_SELF(fn) &&
      PyContextVar_CheckExact(PyCFunction_GET_SELF(fn))) {
    PyObject *var = PyCFunction_GET_SELF(fn);
    if (std::strcmp(reinterpret_cast<PyCFunctionObject *>(fn)->m_ml->ml_name, "get") != 0)
      fail("ContextVar." + qn + "()");
    if (!fnSource) fail("ContextVar.get() of a variable the frame cannot reach");
    if (!args.kw.empty() || args.pos.size() > 1) fail("ContextVar.get() with these arguments");
    PyObject *value = nullptr;
    if (PyContextVar_Get(var, nullptr, &value) < 0) throwPyError("ContextVar.get()");
    if (!value) {
      // No value and no default of its own: a guard cannot express "still unset".
      if (args.pos.empty()) fail("ContextVar.get() of a variable with no value (LookupError)");
      fail("ContextVar.get(default) of a variable with no value");
    }
    PyRef hold = PyRef::steal(value);
    return wrapSourced(value, plus(plus(*fnSource, attrStep("__self__")),
                                   SourceStep{SourceStep::ContextValue, 0, "", {}}));
  }

  // 5. Builtin methods of immutable constants ("a,b".split(","), (1, 2).index(2)...).
  if (PyCFunction_Check(fn)) {
    PyObject *self = PyCFunction_GET_SELF(fn);
    if (self && (PyUnicode_Check(self) || PyLong_Check(self) || PyFloat_Check(self) ||
                 PyTuple_Check(self) || PyBytes_Check(self) || PyRange_Check(self) ||
                 PyFrozenSet_Check(self) || dtypeFromTorch(self)))
      return callReal(*this, fn, args, qn);
    // A set the frame made is private to the analysis: its methods, mutating ones included,
    // run on it; a new set they return (union, copy...) is one the frame made too.
    if (self && isFrameSet(self)) {
      VarPtr r = callReal(*this, fn, args, qn);
      if (auto *o = as<ObjectVar>(r); o && PySet_CheckExact(o->obj.get())) return frameSet(o->obj);
      return r;
    }
  }

  // 5b. Methods of builtin containers called through their type (dict.get(d, k), and
  // super().get(k) in a dict subclass): the receiver is read as an abstract container.
  if (Py_TYPE(fn) == &PyMethodDescr_Type && !args.pos.empty()) {
    PyTypeObject *owner = reinterpret_cast<PyMethodDescrObject *>(fn)->d_common.d_type;
    std::string name = reinterpret_cast<PyMethodDescrObject *>(fn)->d_method->ml_name;
    if (owner == &PyDict_Type || owner == &PyList_Type || owner == &PyTuple_Type) {
      VarPtr self = containerView(args.pos[0]);
      Args rest;
      rest.pos.assign(args.pos.begin() + 1, args.pos.end());
      rest.kw = args.kw;
      if (self->kind == VarKind::Object) return callReal(*this, fn, args, qn);
      return callMethod(self, name, rest);
    }
    if (owner == &PyUnicode_Type || owner == &PyLong_Type || owner == &PyFloat_Type ||
        owner == &PyBytes_Type)
      return callReal(*this, fn, args, qn);
  }

  // 6. Other PyTorch functions: run by PyTorch at run time (fallback node), or evaluated now when
  // they only answer a question about constants.
  if (isTrustedModuleName(mod) &&
      (mod.rfind("torch", 0) == 0 || qn.rfind("torch", 0) == 0 || mod.empty())) {
    static const char *const stateful[] = {"manual_seed",
                                           "seed",
                                           "set_default_dtype",
                                           "set_default_device",
                                           "set_printoptions",
                                           "use_deterministic_algorithms",
                                           "set_num_threads",
                                           "set_rng_state",
                                           "save",
                                           "load"};
    for (const char *s : stateful)
      if (qn == s || (qn.size() > std::strlen(s) &&
                      qn.compare(qn.size() - std::strlen(s), std::string::npos, s) == 0))
        fail("call to torch." + qn + " (changes global state)");
    return fallbackCall(fn, (mod.empty() ? "" : mod + ".") + qn, args);
  }
  // transformers' logger.warning_once / info_once are cached per message: run now with their
  // constant arguments, they print what eager prints on its first call and nothing after, as
  // eager (PreTrainedModel.loss_function warns on every forward of a model with labels).
  if (mod == "transformers.utils.logging" && (qn == "warning_once" || qn == "info_once")) {
    callReal(*this, fn, args, qn);
    return none();
  }
  fail("call to " + (mod.empty() ? "" : mod + ".") + qn +
       " (a function the analyzer cannot see into)");
}

VarPtr Analyzer::callModule(const VarPtr &module, const Args &args) {
  auto *m = as<ModuleVar>(module);
  PyObject *o = m->obj.get();
  for (const char *h : {"_backward_hooks", "_backward_pre_hooks"})
    if (hasNonEmpty(o, h)) fail(std::string("module with ") + h);
  static PyObject *mm = [] {
    return check(PyImport_ImportModule("torch.nn.modules.module"), "import").release();
  }();
  static const char *const globalHooks[] = {"_global_forward_hooks", "_global_forward_pre_hooks",
                                            "_global_backward_hooks", "_global_backward_pre_hooks"};
  for (const char *h : globalHooks)
    if (hasNonEmpty(mm, h)) fail(std::string("global module hooks (") + h + ")");
  if (hasNonEmpty(o, "_forward_hooks") || hasNonEmpty(o, "_forward_pre_hooks"))
    return callModuleWithHooks(module, args); // analyzer_hooks.cpp
  // A hook registered later (on this instance, or on another one where the module is shared)
  // captures again. Modules built in the frame (no source) have none.
  if (m->source) {
    Guard g;
    g.kind = Guard::NoModuleHooks;
    g.source = *m->source;
    g.description = sourceKey(g.source) + " has no hooks";
    addGuard(std::move(g));
  }
  bool found = false;
  VarPtr r = callModuleRow(module, args, &found);
  if (found) return r;
  return call(getAttr(module, "forward"), args);
}

// ---------------------------------------------------------------------------------------------
// Methods of abstract containers

VarPtr Analyzer::callMethod(const VarPtr &self, const std::string &name, const Args &args) {
  if (self->kind == VarKind::Tensor) return tensorMethod(self, name, args);
  if (self->kind == VarKind::Dataclass) return dataclassMethod(self, name, args);
  if (self->kind == VarKind::Instance) {
    if (name == "__init__" && args.pos.empty() && args.kw.empty()) return none(); // object's
    fail("method " + name + "() of a " + typeName(self) + " implemented in C");
  }
  auto needArgs = [&](size_t lo, size_t hi) {
    if (args.pos.size() < lo || args.pos.size() > hi || !args.kw.empty())
      fail(typeName(self) + "." + name + "() with " + std::to_string(args.pos.size()) +
           " arguments");
  };
  if (auto *l = as<ListVar>(self)) {
    auto mutateSourced = [&](const char *what) {
      if (l->source) fail(std::string("list.") + what + "() on a list the caller can see");
    };
    if (name == "append") {
      needArgs(1, 1);
      l->append(args.pos[0]);
      if (l->source) recordEffect({SideEffect::ListAppend, *l->source, "", {}, args.pos[0]});
      return none();
    }
    if (name == "extend") {
      needArgs(1, 1);
      for (VarPtr &v : iterate(args.pos[0])) {
        l->append(v);
        if (l->source) recordEffect({SideEffect::ListAppend, *l->source, "", {}, v});
      }
      return none();
    }
    if (name == "pop") {
      needArgs(0, 1);
      mutateSourced("pop");
      if (l->items().empty()) fail("pop from empty list");
      int64_t i = args.pos.empty() ? -1 : asInt(args.pos[0]).value_or(-1);
      int64_t n = static_cast<int64_t>(l->items().size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) fail("pop index out of range");
      VarPtr v = l->items()[static_cast<size_t>(i)];
      l->items().erase(l->items().begin() + i);
      return v;
    }
    if (name == "insert") {
      needArgs(2, 2);
      mutateSourced("insert");
      int64_t n = static_cast<int64_t>(l->items().size());
      int64_t i = asInt(args.pos[0]).value_or(n);
      if (i < 0) i = std::max<int64_t>(0, i + n);
      i = std::min(i, n);
      l->items().insert(l->items().begin() + i, args.pos[1]);
      return none();
    }
    if (name == "clear") {
      needArgs(0, 0);
      mutateSourced("clear");
      l->items().clear();
      return none();
    }
    if (name == "reverse") {
      needArgs(0, 0);
      mutateSourced("reverse");
      std::reverse(l->items().begin(), l->items().end());
      return none();
    }
    if (name == "copy") {
      needArgs(0, 0);
      return std::make_shared<ListVar>(l->items());
    }
    if (name == "index" || name == "count") {
      needArgs(1, 1);
      int64_t count = 0;
      for (size_t i = 0; i < l->items().size(); ++i) {
        if (truthy(compareOp(2, l->items()[i], args.pos[0]))) {
          if (name == "index") return integer(static_cast<int64_t>(i));
          ++count;
        }
      }
      if (name == "index") fail("list.index(x): x not in list");
      return integer(count);
    }
    fail("list." + name + "()");
  }
  if (auto *t = as<TupleVar>(self)) {
    if (name == "index" || name == "count") {
      needArgs(1, 1);
      int64_t count = 0;
      for (size_t i = 0; i < t->items.size(); ++i) {
        if (truthy(compareOp(2, t->items[i], args.pos[0]))) {
          if (name == "index") return integer(static_cast<int64_t>(i));
          ++count;
        }
      }
      if (name == "index") fail("tuple.index(x): x not in tuple");
      return integer(count);
    }
    if (t->structType && name == "_asdict") {
      PyRef fields = check(PyObject_GetAttrString(t->structType.get(), "_fields"), "_fields");
      auto d = std::make_shared<DictVar>();
      for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(fields.get()); ++i)
        d->items.emplace_back(PyRef::borrow(PyTuple_GET_ITEM(fields.get(), i)),
                              t->items.at(static_cast<size_t>(i)));
      return d;
    }
    if (t->structType && name == "_replace" && args.pos.empty() &&
        PyObject_HasAttrString(t->structType.get(), "_fields")) {
      PyRef fields = check(PyObject_GetAttrString(t->structType.get(), "_fields"), "_fields");
      std::vector<VarPtr> items = t->items;
      size_t used = 0;
      for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(fields.get()); ++i)
        if (const VarPtr *v = args.find(utf8(PyTuple_GET_ITEM(fields.get(), i)))) {
          items.at(static_cast<size_t>(i)) = *v;
          ++used;
        }
      if (used != args.kw.size()) fail("_replace() with a field the namedtuple lacks");
      return std::make_shared<TupleVar>(std::move(items), t->structType);
    }
    if (name == "numel" && t->structType) { // torch.Size.numel()
      VarPtr acc = integer(1);
      for (VarPtr &v : t->items)
        acc = binaryOp(bc::NB_MULTIPLY, acc, v);
      return acc;
    }
    fail("tuple." + name + "()");
  }
  if (auto *d = as<DictVar>(self)) {
    auto keyVar = [&](const PyRef &k) { return constant(k.get()); };
    if (name == "items" || name == "keys" || name == "values") {
      needArgs(0, 0);
      std::vector<VarPtr> out;
      for (auto &[k, v] : d->items) {
        if (name == "items")
          out.push_back(std::make_shared<TupleVar>(std::vector<VarPtr>{keyVar(k), v}));
        else
          out.push_back(name == "keys" ? keyVar(k) : v);
      }
      return std::make_shared<ListVar>(std::move(out)); // a snapshot view, iterated in order
    }
    if (name == "get") {
      needArgs(1, 2);
      if (contains(self, args.pos[0])) return getItem(self, args.pos[0]);
      return args.pos.size() > 1 ? args.pos[1] : none();
    }
    if (name == "update") {
      if (args.pos.size() > 1) fail("dict.update() with several arguments");
      if (!args.pos.empty()) {
        if (auto *o = as<DictVar>(args.pos[0])) {
          for (auto &[k, v] : o->items)
            setItem(self, constant(k.get()), v);
        } else {
          for (VarPtr &kv : iterate(args.pos[0])) {
            std::vector<VarPtr> p = sequenceItems(kv, "dict item");
            setItem(self, p.at(0), p.at(1));
          }
        }
      }
      for (auto &[k, v] : args.kw)
        setItem(self, constantSteal(PyUnicode_FromString(k.c_str())), v);
      return none();
    }
    if (name == "pop") {
      needArgs(1, 2);
      if (d->source) fail("dict.pop() on a dict the caller can see");
      PyRef k = asPython(args.pos[0]);
      for (auto it = d->items.begin(); it != d->items.end(); ++it)
        if (k && PyObject_RichCompareBool(it->first.get(), k.get(), Py_EQ) == 1) {
          VarPtr v = it->second;
          d->items.erase(it);
          return v;
        }
      if (args.pos.size() > 1) return args.pos[1];
      fail("dict.pop(): key not found");
    }
    if (name == "setdefault") {
      needArgs(1, 2);
      if (contains(self, args.pos[0])) return getItem(self, args.pos[0]);
      VarPtr v = args.pos.size() > 1 ? args.pos[1] : none();
      setItem(self, args.pos[0], v);
      return v;
    }
    if (name == "copy") {
      needArgs(0, 0);
      auto c = std::make_shared<DictVar>();
      c->items = d->items;
      return c;
    }
    if (name == "__contains__") {
      needArgs(1, 1);
      return boolean(contains(self, args.pos[0]));
    }
    if (name == "__getitem__") {
      needArgs(1, 1);
      return getItem(self, args.pos[0]);
    }
    fail("dict." + name + "()");
  }
  if (self->kind == VarKind::SymInt) {
    if (name == "__index__" || name == "__int__") return self;
    fail("int." + name + "() of a symbolic size");
  }
  fail(typeName(self) + "." + name + "()");
}

// ---------------------------------------------------------------------------------------------
// MAKE_FUNCTION

VarPtr Analyzer::makeFunction(Frame &f, int flags) {
  auto &st = f.stack;
  auto pop = [&]() {
    if (st.empty())
      throw BreakError("internal: stack underflow in MAKE_FUNCTION", currentLoc(), true);
    VarPtr v = st.back();
    st.pop_back();
    return v;
  };
  VarPtr code = pop();
  auto fn = std::make_shared<FunctionVar>();
  auto *co = as<ObjectVar>(code);
  if (!co || !PyCode_Check(co->obj.get())) fail("internal: MAKE_FUNCTION without a code object");
  fn->code = co->obj;
  fn->globals = f.globals;
  fn->globalsSource = f.globalsSource;
  fn->trustedGlobals = f.trustedGlobals;
  fn->qualname = utf8(reinterpret_cast<PyCodeObject *>(co->obj.get())->co_qualname);
  if (flags & 0x08) {
    VarPtr closure = pop();
    fn->closure = sequenceItems(closure, "closure");
  }
  if (flags & 0x04) pop(); // annotations
  if (flags & 0x02) {
    VarPtr kwd = pop();
    if (kwd->kind != VarKind::Dict) fail("internal: keyword defaults are not a dict");
    fn->kwdefaults = kwd;
  }
  if (flags & 0x01) fn->defaults = pop();
  return fn;
}

} // namespace xjit::frontend
