// Instances of @dataclass types built inside the captured code (model outputs, small configs):
// their fields are abstract values; the frame's result rebuilds them by calling the class with
// the final field values. transformers' ModelOutput (a dataclass that is also an OrderedDict of
// its non-None fields, indexable by position or name) is modeled natively.
#include "analyzer.h"
#include "torch_ops.h"

#include <algorithm>

namespace xjit::frontend {

namespace {

PyObject *dataclassesModule() {
  static PyObject *m = check(PyImport_ImportModule("dataclasses"), "import dataclasses").release();
  return m;
}

} // namespace

VarPtr Analyzer::makeDataclass(PyObject *cls, const Args &args) {
  PyRef fieldsFn = check(PyObject_GetAttrString(dataclassesModule(), "fields"), "fields");
  PyRef missing = check(PyObject_GetAttrString(dataclassesModule(), "MISSING"), "MISSING");
  PyRef fields = check(PyObject_CallOneArg(fieldsFn.get(), cls), "dataclasses.fields()");
  auto obj = std::make_shared<DataclassVar>(PyRef::borrow(cls));
  obj->mapping = PyObject_IsSubclass(cls, reinterpret_cast<PyObject *>(&PyDict_Type)) == 1;
  std::string qn = reinterpret_cast<PyTypeObject *>(cls)->tp_name;
  size_t pos = 0;
  std::vector<bool> usedKw(args.kw.size(), false);
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(fields.get()); ++i) {
    PyObject *f = PyTuple_GET_ITEM(fields.get(), i);
    PyRef nameObj = check(PyObject_GetAttrString(f, "name"), "field.name");
    std::string name = utf8(nameObj.get());
    PyRef init = check(PyObject_GetAttrString(f, "init"), "field.init");
    VarPtr value;
    if (init.get() == Py_True) {
      if (pos < args.pos.size()) {
        value = args.pos[pos++];
      } else {
        for (size_t k = 0; k < args.kw.size(); ++k)
          if (args.kw[k].first == name) {
            value = args.kw[k].second;
            usedKw[k] = true;
          }
      }
    }
    if (!value) {
      PyRef def = check(PyObject_GetAttrString(f, "default"), "field.default");
      PyRef factory = check(PyObject_GetAttrString(f, "default_factory"), "field.default_factory");
      if (def.get() != missing.get()) {
        value = constant(def.get());
      } else if (factory.get() != missing.get()) {
        PyRef made = check(PyObject_CallNoArgs(factory.get()), "default_factory()");
        if (PyList_Check(made.get()) && PyList_GET_SIZE(made.get()) == 0)
          value = std::make_shared<ListVar>(std::vector<VarPtr>{});
        else if (PyDict_Check(made.get()) && PyDict_GET_SIZE(made.get()) == 0)
          value = std::make_shared<DictVar>();
        else
          value = constant(made.get());
      } else {
        fail(qn + "() missing required argument '" + name + "'");
      }
    }
    obj->fields.emplace_back(name, value);
  }
  if (pos < args.pos.size()) fail(qn + "() takes " + std::to_string(pos) + " positional arguments");
  for (size_t k = 0; k < args.kw.size(); ++k)
    if (!usedKw[k]) fail(qn + "() got an unexpected keyword argument '" + args.kw[k].first + "'");
  if (obj->mapping) {
    // ModelOutput.__post_init__ with a dict or iterable first field re-keys the instance.
    auto *first = as<ObjectVar>(obj->fields.empty() ? nullptr : obj->fields[0].second);
    bool othersNone = true;
    for (size_t i = 1; i < obj->fields.size(); ++i) {
      auto *o = as<ObjectVar>(obj->fields[i].second);
      othersNone &= o && o->obj.get() == Py_None;
    }
    if (othersNone && !obj->fields.empty() && obj->fields[0].second->kind != VarKind::Tensor &&
        !(first && first->obj.get() == Py_None))
      fail(qn + "() built from a mapping or iterable first field");
    return obj;
  }
  if (PyObject *post = PyObject_GetAttrString(cls, "__post_init__")) {
    PyRef hold = PyRef::steal(post);
    Args a;
    a.pos.push_back(obj);
    call(constant(post), a);
  } else {
    PyErr_Clear();
  }
  return obj;
}

std::vector<std::pair<std::string, VarPtr>> Analyzer::dataclassItems(const VarPtr &obj) {
  auto *d = as<DataclassVar>(obj);
  std::vector<std::pair<std::string, VarPtr>> out;
  for (auto &[k, v] : d->fields) {
    auto *o = as<ObjectVar>(v);
    if (o && o->obj.get() == Py_None) continue;
    out.emplace_back(k, v);
  }
  return out;
}

VarPtr Analyzer::dataclassGetItem(const VarPtr &obj, const VarPtr &key) {
  auto *d = as<DataclassVar>(obj);
  if (!d->mapping)
    fail(std::string("subscript of a ") + reinterpret_cast<PyTypeObject *>(d->cls.get())->tp_name);
  std::vector<std::pair<std::string, VarPtr>> items = dataclassItems(obj);
  PyRef k = asPython(key);
  if (k && PyUnicode_Check(k.get())) {
    for (auto &[name, v] : items)
      if (name == utf8(k.get())) return v;
    fail("KeyError: '" + utf8(k.get()) + "'");
  }
  std::vector<VarPtr> values;
  for (auto &[name, v] : items)
    values.push_back(v);
  return getItem(std::make_shared<TupleVar>(std::move(values)), key);
}

void Analyzer::dataclassSetItem(const VarPtr &obj, const VarPtr &key, const VarPtr &value) {
  auto *d = as<DataclassVar>(obj);
  PyRef k = asPython(key);
  const char *cls = reinterpret_cast<PyTypeObject *>(d->cls.get())->tp_name;
  if (!d->mapping || !k || !PyUnicode_Check(k.get()))
    fail(std::string("item assignment on a ") + cls);
  std::string name = utf8(k.get());
  auto f = std::find_if(d->fields.begin(), d->fields.end(),
                        [&](const auto &field) { return field.first == name; });
  // ModelOutput.__setitem__ sets the key and the attribute. The items are modeled as the
  // non-None fields in declaration order: a new key is appended to the mapping, so it must come
  // after every key already there, and a None value would be a key the model does not have.
  if (f == d->fields.end()) fail(std::string(cls) + " item '" + name + "' that is not a field");
  if (isNoneVar(value)) fail(std::string(cls) + " item '" + name + "' set to None");
  if (isNoneVar(f->second) &&
      !std::all_of(f + 1, d->fields.end(), [](const auto &g) { return isNoneVar(g.second); }))
    fail(std::string(cls) + " item '" + name + "' added before items already set");
  f->second = value;
}

VarPtr Analyzer::dataclassAttr(const VarPtr &obj, const std::string &name) {
  auto *d = as<DataclassVar>(obj);
  if (VarPtr *f = d->find(name)) return *f;
  static const char *const mappingMethods[] = {
      "keys", "values", "items", "get", "to_tuple", "__getitem__", "__contains__", "__len__"};
  if (d->mapping)
    for (const char *m : mappingMethods)
      if (name == m) return std::make_shared<BoundVar>(obj, nullptr, name);
  PyObject *cls = d->cls.get();
  PyRef n = check(PyUnicode_FromString(name.c_str()), "str");
  PyObject *attr = _PyType_Lookup(reinterpret_cast<PyTypeObject *>(cls), n.get());
  if (!attr)
    fail(std::string("'") + reinterpret_cast<PyTypeObject *>(cls)->tp_name +
         "' object has no attribute '" + name + "'");
  if (Py_TYPE(attr) == &PyProperty_Type) {
    PyRef getter = check(PyObject_GetAttrString(attr, "fget"), "property.fget");
    Args a;
    a.pos.push_back(obj);
    return call(constant(getter.get()), a);
  }
  if (PyFunction_Check(attr)) return std::make_shared<BoundVar>(obj, constant(attr), name);
  if (Py_TYPE(attr) == &PyStaticMethod_Type)
    return constantSteal(PyObject_GetAttrString(attr, "__func__"));
  if (Py_TYPE(attr) == &PyClassMethod_Type)
    return std::make_shared<BoundVar>(
        constant(cls), constantSteal(PyObject_GetAttrString(attr, "__func__")), name);
  if (PyCallable_Check(attr)) fail("method '" + name + "' of a dataclass implemented in C");
  return constant(attr); // a class attribute
}

VarPtr Analyzer::dataclassMethod(const VarPtr &obj, const std::string &name, const Args &args) {
  std::vector<std::pair<std::string, VarPtr>> items = dataclassItems(obj);
  if (name == "keys" || name == "values" || name == "items" || name == "to_tuple") {
    std::vector<VarPtr> out;
    for (auto &[k, v] : items) {
      VarPtr key = constantSteal(PyUnicode_FromString(k.c_str()));
      if (name == "keys")
        out.push_back(key);
      else if (name == "items")
        out.push_back(std::make_shared<TupleVar>(std::vector<VarPtr>{key, v}));
      else
        out.push_back(v);
    }
    if (name == "to_tuple") return std::make_shared<TupleVar>(std::move(out));
    return std::make_shared<ListVar>(std::move(out));
  }
  if (name == "get") {
    if (args.pos.empty()) fail("get() needs a key");
    PyRef k = asPython(args.pos[0]);
    for (auto &[key, v] : items)
      if (k && PyUnicode_Check(k.get()) && key == utf8(k.get())) return v;
    return args.pos.size() > 1 ? args.pos[1] : none();
  }
  if (name == "__getitem__" && args.pos.size() == 1) return dataclassGetItem(obj, args.pos[0]);
  if (name == "__contains__" && args.pos.size() == 1) return boolean(contains(obj, args.pos[0]));
  if (name == "__len__") return integer(static_cast<int64_t>(items.size()));
  fail("dataclass method " + name + "()");
}

} // namespace xjit::frontend
