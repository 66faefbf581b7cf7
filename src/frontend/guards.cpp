#include "guards.h"

#include "output_layout.h"

#include "tensor_bridge.h"

#include "xjit/ir/diagnostics.h"

#include <algorithm>

namespace xjit::frontend {

namespace {

std::string shortRepr(PyObject *o) {
  if (!o) return "<dead object>";
  if (PyLong_Check(o) || PyFloat_Check(o) || PyUnicode_Check(o) || PyBool_Check(o) ||
      o == Py_None || PyTuple_Check(o) || PyList_Check(o)) {
    if (PyObject *r = PyObject_Repr(o)) {
      const char *c = PyUnicode_AsUTF8(r);
      std::string s = c ? c : "?";
      Py_DECREF(r);
      PyErr_Clear();
      return s.size() > 80 ? s.substr(0, 77) + "..." : s;
    }
    PyErr_Clear();
  }
  char buf[64];
  snprintf(buf, sizeof buf, " object at %p>", static_cast<void *>(o));
  return std::string("<") + Py_TYPE(o)->tp_name + buf;
}

const char *boolStr(bool b) { return b ? "True" : "False"; }

/// The bytes [first, second) a tensor's elements span (empty for no elements).
std::pair<uintptr_t, uintptr_t> byteRange(const dlpack::DLTensor &t) {
  auto lo = reinterpret_cast<uintptr_t>(t.data) + t.byte_offset;
  int64_t last = 0, stride = 1;
  for (int32_t d = t.ndim - 1; d >= 0; --d) {
    if (t.shape[d] == 0) return {lo, lo};
    int64_t s = t.strides ? t.strides[d] : stride;
    last += (t.shape[d] - 1) * (s < 0 ? -s : s);
    stride *= t.shape[d];
  }
  return {lo, lo + static_cast<uintptr_t>((last + 1) * ((t.dtype.bits * t.dtype.lanes + 7) / 8))};
}

std::string relationStr(const Guard &g) { return g.lhs + " <= " + g.rhs; }

} // namespace

GuardSet::GuardSet(const std::vector<Guard> &guards, SourceTable &table) {
  for (const Guard &g : guards) {
    Compiled c;
    c.kind = g.kind;
    c.description = g.description;
    if (!g.source.empty())
      c.slot = table.add(g.source);
    else if (g.kind != Guard::GlobalStateIs && g.kind != Guard::SizeAtMost)
      throw Error(ErrorKind::Internal, "guard without a source: " + g.description);
    sourceText_.push_back(c.slot >= 0 ? table.str(c.slot) : "");
    c.length = g.length;
    c.object = g.object;
    for (const Source &o : g.others)
      c.others.push_back(table.add(o));
    if (g.kind == Guard::IdIs && g.object) {
      // A weak reference where possible: a cache entry must not keep modules alive.
      if (PyType_SUPPORTS_WEAKREFS(Py_TYPE(g.object.get()))) {
        if (PyObject *w = PyWeakref_NewRef(g.object.get(), nullptr)) {
          c.object = PyRef::steal(w);
          c.weak = true;
        } else {
          PyErr_Clear();
        }
      }
    }
    if (g.kind == Guard::IntSymbol) {
      if (g.symbols.size() != 1 || g.symbols[0].empty())
        throw Error(ErrorKind::Internal, "int symbol guard without its symbol: " + g.description);
      auto it = std::find(symbolNames_.begin(), symbolNames_.end(), g.symbols[0]);
      c.symbols = {static_cast<int>(it - symbolNames_.begin())};
      if (it == symbolNames_.end()) symbolNames_.push_back(g.symbols[0]);
    }
    if (g.kind == Guard::TensorMatch) {
      std::optional<DType> dt = parseDType(g.dtype);
      if (!dt)
        throw Error(ErrorKind::Internal, "tensor guard with unknown dtype '" + g.dtype + "'");
      c.dtype = static_cast<int>(*dt);
      std::optional<dlpack::Device> dev = parseDevice(g.device.empty() ? "cpu" : g.device);
      if (!dev)
        throw Error(ErrorKind::Internal, "tensor guard with unknown device '" + g.device + "'");
      c.deviceType = dev->device_type;
      c.deviceId = dev->device_id;
      c.requiresGrad = g.requiresGrad;
      c.sizes = g.sizes;
      c.strides = g.strides;
      c.layout = g.layout;
      if (!c.strides.empty() && c.strides.size() != c.sizes.size())
        throw Error(ErrorKind::Internal, "tensor guard with " + std::to_string(c.sizes.size()) +
                                             " sizes but " + std::to_string(c.strides.size()) +
                                             " strides");
      c.symbols.assign(c.sizes.size(), -1);
      for (size_t d = 0; d < g.symbols.size() && d < c.sizes.size(); ++d) {
        if (g.symbols[d].empty()) continue;
        auto it = std::find(symbolNames_.begin(), symbolNames_.end(), g.symbols[d]);
        c.symbols[d] = static_cast<int>(it - symbolNames_.begin());
        if (it == symbolNames_.end()) symbolNames_.push_back(g.symbols[d]);
      }
    }
    guards_.push_back(std::move(c));
  }
  // Size relations name symbols that tensor guards bind: parsed once every symbol is known.
  for (size_t i = 0; i < guards.size(); ++i) {
    if (guards[i].kind != Guard::SizeAtMost) continue;
    Compiled &c = guards_[i];
    for (auto [text, expr] : {std::pair{&guards[i].lhs, &c.lhs}, {&guards[i].rhs, &c.rhs}}) {
      std::optional<DimExpr> d = parseDimExpr(*text);
      if (!d) throw Error(ErrorKind::Internal, "size guard with a malformed size '" + *text + "'");
      for (const std::string &sym : d->symbols())
        if (std::find(symbolNames_.begin(), symbolNames_.end(), sym) == symbolNames_.end())
          throw Error(ErrorKind::Internal, "size guard '" + relationStr(guards[i]) + "' names " +
                                               sym + ", which no tensor guard binds");
      *expr = *d;
    }
    hasSizeRelations_ = true;
  }
}

std::vector<std::string> GuardSet::sizeMismatches(SourceValues &values) const {
  std::vector<std::string> out;
  for (size_t i = 0; i < guards_.size(); ++i) {
    const Compiled &g = guards_[i];
    if (g.kind != Guard::TensorMatch) continue;
    const dlpack::DLTensor *t = values.tensor(g.slot);
    if (!t || t->ndim != static_cast<int32_t>(g.sizes.size())) continue;
    for (size_t d = 0; d < g.sizes.size(); ++d)
      if (g.symbols[d] < 0 && g.sizes[d] >= 0 && g.sizes[d] != t->shape[d])
        out.push_back(dynamicDimKey(sourceText_[i], d));
  }
  PyErr_Clear();
  return out;
}

std::vector<std::string> GuardSet::numberMismatches(SourceValues &values) const {
  std::vector<std::string> out;
  for (size_t i = 0; i < guards_.size(); ++i) {
    const Compiled &g = guards_[i];
    if (g.kind != Guard::Equals || !g.object) continue;
    PyTypeObject *type = Py_TYPE(g.object.get());
    if (type != &PyLong_Type && type != &PyFloat_Type) continue;
    PyObject *v = values.get(g.slot);
    if (v && Py_TYPE(v) == type && PyObject_RichCompareBool(v, g.object.get(), Py_EQ) == 0)
      out.push_back(sourceText_[i]);
  }
  PyErr_Clear();
  return out;
}

std::vector<std::string> GuardSet::sharableModules(SourceValues &values) const {
  std::vector<std::string> out;
  PyObject *moduleType = reinterpret_cast<PyObject *>(torchHandles().moduleType);
  for (size_t i = 0; i < guards_.size(); ++i) {
    const Compiled &g = guards_[i];
    if (g.kind != Guard::IdIs || !g.object) continue;
    PyObject *expected = g.weak ? PyWeakref_GET_OBJECT(g.object.get()) : g.object.get();
    PyObject *v = values.get(g.slot);
    if (!v || v == expected || expected == Py_None || Py_TYPE(v) != Py_TYPE(expected)) continue;
    if (PyObject_IsInstance(v, moduleType) == 1) out.push_back(sourceText_[i]);
  }
  PyErr_Clear();
  return out;
}

namespace {
/// One line: descriptions may embed multi-line reprs (modules).
std::string oneLine(std::string s) {
  std::string out;
  bool space = false;
  for (char c : s) {
    if (c == '\n' || c == '\r' || c == '\t' || c == ' ') {
      space = true;
      continue;
    }
    if (space && !out.empty()) out += ' ';
    space = false;
    out += c;
  }
  return out;
}
} // namespace

std::vector<std::string> GuardSet::descriptions() const {
  std::vector<std::string> out;
  for (size_t i = 0; i < guards_.size(); ++i) {
    const Compiled &g = guards_[i];
    if (!g.description.empty()) {
      out.push_back(oneLine(g.description));
      continue;
    }
    const std::string &src = sourceText_[i];
    switch (g.kind) {
    case Guard::TensorMatch: {
      std::string dims;
      for (size_t d = 0; d < g.sizes.size(); ++d)
        dims += (d ? "," : "") + (g.symbols[d] >= 0 ? symbolNames_[size_t(g.symbols[d])]
                                                    : std::to_string(g.sizes[d]));
      out.push_back(src + ": tensor " + std::string(dtypeName(DType(g.dtype))) + "[" + dims + "] " +
                    deviceStr({g.deviceType, g.deviceId}) +
                    " requires_grad=" + boolStr(g.requiresGrad));
      break;
    }
    case Guard::TypeIs:
      out.push_back("type(" + src + ") is " +
                    (g.object
                         ? std::string(reinterpret_cast<PyTypeObject *>(g.object.get())->tp_name)
                         : "?"));
      break;
    case Guard::IdIs:
      out.push_back(src + " is " +
                    shortRepr(g.weak ? PyWeakref_GET_OBJECT(g.object.get()) : g.object.get()));
      break;
    case Guard::Equals: out.push_back(src + " == " + shortRepr(g.object.get())); break;
    case Guard::LenIs: out.push_back("len(" + src + ") == " + std::to_string(g.length)); break;
    case Guard::DictKeysAre:
      out.push_back("list(" + src + ".keys()) == " + shortRepr(g.object.get()));
      break;
    case Guard::GlobalStateIs:
      out.push_back(std::string("torch.is_grad_enabled() == ") + boolStr(g.length != 0));
      break;
    case Guard::SizeAtMost: out.push_back(g.lhs.str() + " <= " + g.rhs.str()); break;
    case Guard::IntSymbol:
      out.push_back(src + ": int " + symbolNames_[size_t(g.symbols[0])] + " >= 2");
      break;
    case Guard::NoOverlap: out.push_back(g.description); break;
    case Guard::NotIn: out.push_back(shortRepr(g.object.get()) + " not in " + src); break;
    case Guard::NoModuleHooks: out.push_back(src + " has no hooks"); break;
    case Guard::FloatCompare:
      out.push_back(src + " compares with " + shortRepr(g.object.get()));
      break;
    }
  }
  return out;
}

bool GuardSet::check(SourceValues &values, GuardFailure *why) const {
  // Symbols bound by earlier tensor guards of this check; small, so no allocation for the
  // common static-shape case.
  std::vector<int64_t> bound(symbolNames_.size(), -1);
  for (size_t i = 0; i < guards_.size(); ++i) {
    if (guards_[i].kind == Guard::SizeAtMost) continue; // below, once every symbol is bound
    if (!checkOne(guards_[i], values, bound, why)) {
      if (PyErr_Occurred()) PyErr_Clear();
      if (why) why->guard = static_cast<int>(i);
      return false;
    }
  }
  if (!hasSizeRelations_) return true;
  SymbolBindings symbols;
  for (size_t s = 0; s < symbolNames_.size(); ++s)
    if (bound[s] >= 0) symbols.emplace(symbolNames_[s], bound[s]);
  for (size_t i = 0; i < guards_.size(); ++i)
    if (guards_[i].kind == Guard::SizeAtMost && !checkSizeAtMost(guards_[i], symbols, why)) {
      if (why) why->guard = static_cast<int>(i);
      return false;
    }
  return true;
}

bool GuardSet::checkSizeAtMost(const Compiled &g, const SymbolBindings &b,
                               GuardFailure *why) const {
  std::optional<int64_t> lhs = g.lhs.evaluate(b), rhs = g.rhs.evaluate(b);
  if (lhs && rhs && *lhs <= *rhs) return true;
  if (why) {
    why->detail = g.lhs.str() + " <= " + g.rhs.str();
    if (lhs && rhs)
      why->detail += " (" + std::to_string(*lhs) + " <= " + std::to_string(*rhs) + ")";
    why->source = "";
    // Not a size mismatch of one input: automatic dynamic shapes keeps its symbolic dims, and
    // the new capture specializes what does not fit.
    why->size = false;
  }
  return false;
}

bool GuardSet::checkOne(const Compiled &g, SourceValues &values, std::vector<int64_t> &bound,
                        GuardFailure *why) const {
  const std::string *src = g.slot >= 0 ? &sourceText_[size_t(&g - guards_.data())] : nullptr;
  auto fail = [&](auto &&detail) {
    if (why) {
      why->detail = detail();
      why->source = src ? *src : "";
      why->size = false;
    }
    return false;
  };
  if (g.kind == Guard::GlobalStateIs) {
    PyObject *r = PyObject_CallNoArgs(torchHandles().isGradEnabled);
    bool ok = r && (r == Py_True) == (g.length != 0);
    Py_XDECREF(r);
    return ok || fail([&] {
             return std::string("torch.is_grad_enabled() == ") + boolStr(g.length != 0);
           });
  }
  PyObject *v = values.get(g.slot);
  if (!v) return fail([&] { return *src + " exists"; });
  switch (g.kind) {
  case Guard::TensorMatch: return checkTensor(g, values, bound, why);
  case Guard::IntSymbol: return checkIntSymbol(g, v, bound, why);
  case Guard::TypeIs:
    return reinterpret_cast<PyObject *>(Py_TYPE(v)) == g.object.get() || fail([&] {
             return "type(" + *src + ") is " +
                    reinterpret_cast<PyTypeObject *>(g.object.get())->tp_name;
           });
  case Guard::IdIs: {
    PyObject *expected = g.weak ? PyWeakref_GET_OBJECT(g.object.get()) : g.object.get();
    return v == expected || fail([&] { return *src + " is " + shortRepr(expected); });
  }
  case Guard::Equals: {
    if (v == g.object.get()) return true;
    int eq = Py_TYPE(v) == Py_TYPE(g.object.get())
                 ? PyObject_RichCompareBool(v, g.object.get(), Py_EQ)
                 : 0;
    return eq == 1 || fail([&] { return *src + " == " + shortRepr(g.object.get()); });
  }
  case Guard::LenIs:
    return PyObject_Length(v) == g.length ||
           fail([&] { return "len(" + *src + ") == " + std::to_string(g.length); });
  case Guard::DictKeysAre: {
    PyObject *keys = PyDict_Check(v) ? dictKeysInOrder(v) : nullptr;
    int eq = keys ? PyObject_RichCompareBool(keys, g.object.get(), Py_EQ) : 0;
    Py_XDECREF(keys);
    return eq == 1 ||
           fail([&] { return "list(" + *src + ".keys()) == " + shortRepr(g.object.get()); });
  }
  case Guard::NoModuleHooks: {
    // The instance dict's own entries: one lookup each, no attribute protocol.
    static PyObject *const names[] = {
        internedStr("_forward_hooks"), internedStr("_forward_pre_hooks"),
        internedStr("_backward_hooks"), internedStr("_backward_pre_hooks")};
    PyObject **dictPtr = _PyObject_GetDictPtr(v);
    bool empty = dictPtr && *dictPtr && PyDict_Check(*dictPtr);
    for (PyObject *name : names) {
      if (!empty) break;
      PyObject *hooks = PyDict_GetItemWithError(*dictPtr, name);
      empty = !hooks || (PyDict_Check(hooks) ? PyDict_GET_SIZE(hooks) == 0 : false);
    }
    return empty || fail([&] { return *src + " has no hooks"; });
  }
  case Guard::FloatCompare: {
    int r = PyFloat_CheckExact(v) ? PyObject_RichCompareBool(v, g.object.get(), int(g.length)) : 0;
    return r == 1 || fail([&] { return g.description; });
  }
  case Guard::NotIn: {
    int in = PyDict_Check(v) ? PyDict_Contains(v, g.object.get()) : 1;
    return in == 0 || fail([&] { return shortRepr(g.object.get()) + " not in " + *src; });
  }
  case Guard::NoOverlap: {
    const dlpack::DLTensor *t = values.tensor(g.slot);
    if (!t) return fail([&] { return "isinstance(" + *src + ", torch.Tensor)"; });
    // The byte ranges of all of them, sorted by start: a range overlaps an earlier one exactly
    // when it starts before the largest end seen so far (of the written ranges, for a range
    // that is only read).
    struct Range {
      uintptr_t lo, hi;
      bool written;
    };
    std::vector<Range> ranges;
    ranges.reserve(g.others.size() + 1);
    auto add = [&](const dlpack::DLTensor &d, bool written) {
      std::pair<uintptr_t, uintptr_t> r = byteRange(d);
      if (r.first < r.second) ranges.push_back({r.first, r.second, written});
    };
    add(*t, true);
    for (size_t k = 0; k < g.others.size(); ++k)
      if (const dlpack::DLTensor *u = values.tensor(g.others[k])) // (else its own guard fails)
        add(*u, int64_t(k) + 1 < g.length);
    std::sort(ranges.begin(), ranges.end(),
              [](const Range &a, const Range &b) { return a.lo < b.lo; });
    uintptr_t endAll = 0, endWritten = 0;
    for (const Range &r : ranges) {
      if (r.lo < (r.written ? endAll : endWritten))
        return fail([&] { return "tensors the graph writes share no memory with other inputs"; });
      endAll = std::max(endAll, r.hi);
      if (r.written) endWritten = std::max(endWritten, r.hi);
    }
    return true;
  }
  case Guard::GlobalStateIs:
  case Guard::SizeAtMost: break;
  }
  return true;
}

bool GuardSet::checkIntSymbol(const Compiled &g, PyObject *v, std::vector<int64_t> &bound,
                              GuardFailure *why) const {
  const std::string &src = sourceText_[size_t(&g - guards_.data())];
  const int s = g.symbols[0];
  const std::string &name = symbolNames_[size_t(s)];
  auto fail = [&](std::string detail) {
    if (why) {
      why->detail = std::move(detail);
      why->source = src;
      why->size = false;
    }
    return false;
  };
  // Exactly int: a bool (an int subclass) or an IntEnum is specialized by value elsewhere.
  if (!PyLong_CheckExact(v)) return fail("type(" + src + ") is int");
  int overflow = 0;
  const long long n = PyLong_AsLongLongAndOverflow(v, &overflow);
  if (overflow || (n == -1 && PyErr_Occurred())) {
    PyErr_Clear();
    return fail(src + " fits in int64");
  }
  // At least 2, like a symbolic dim: the capture may have decided `n > 0` or `n == 1` on that,
  // and 0, 1 and negative ints recompile with the value static.
  if (n < 2) return fail(src + " >= 2 (" + name + ")");
  if (bound[size_t(s)] < 0)
    bound[size_t(s)] = n;
  else if (bound[size_t(s)] != n)
    return fail(src + " == " + name + " (bound to " + std::to_string(bound[size_t(s)]) + ")");
  return true;
}

bool GuardSet::checkTensor(const Compiled &g, SourceValues &values, std::vector<int64_t> &bound,
                           GuardFailure *why) const {
  const std::string &src = sourceText_[size_t(&g - guards_.data())];
  auto fail = [&](std::string detail, bool size = false) {
    if (why) {
      why->detail = std::move(detail);
      why->source = src;
      why->size = size;
    }
    return false;
  };
  const dlpack::DLTensor *t = values.tensor(g.slot);
  if (!t) return fail("isinstance(" + src + ", torch.Tensor)");
  std::optional<DType> dt = dtypeFromDLPack(t->dtype);
  if (!dt || int(*dt) != g.dtype)
    return fail(src + ".dtype == torch." + std::string(dtypeName(DType(g.dtype))));
  if (t->device.device_type != g.deviceType || t->device.device_id != g.deviceId)
    return fail(src + ".device == " + deviceStr({g.deviceType, g.deviceId}));
  if (t->ndim != static_cast<int32_t>(g.sizes.size()))
    return fail(src + ".dim() == " + std::to_string(g.sizes.size()));
  for (size_t d = 0; d < g.sizes.size(); ++d) {
    const int64_t size = t->shape[d];
    if (int s = g.symbols[d]; s >= 0) {
      // A symbolic size is at least 2, as at capture (sizes 0 and 1 are static there): the
      // capture may have decided comparisons such as `seq == 1` on that (torch.compile's 0/1
      // specialization).
      if (size < 2)
        return fail(src + " size(" + std::to_string(d) + ") >= 2 (" + symbolNames_[size_t(s)] +
                    ")");
      if (bound[size_t(s)] < 0)
        bound[size_t(s)] = size;
      else if (bound[size_t(s)] != size)
        return fail(src + " size(" + std::to_string(d) + ") == " + symbolNames_[size_t(s)] +
                        " (bound to " + std::to_string(bound[size_t(s)]) + ")",
                    true);
    } else if (g.sizes[d] >= 0 && g.sizes[d] != size) {
      return fail(src + " size(" + std::to_string(d) + ") == " + std::to_string(g.sizes[d]), true);
    }
  }
  if (!g.strides.empty()) {
    int64_t expect = 1; // strides == NULL means compact row-major
    std::vector<int64_t> compact(g.sizes.size());
    for (size_t d = g.sizes.size(); d-- > 0;) {
      compact[d] = expect;
      expect *= t->shape[d];
    }
    for (size_t d = 0; d < g.strides.size(); ++d) {
      const int64_t stride = t->strides ? t->strides[d] : compact[d];
      if (g.strides[d] >= 0 && g.strides[d] != stride)
        return fail(src + " stride(" + std::to_string(d) + ") == " + std::to_string(g.strides[d]));
    }
  }
  if (!g.layout.empty() && !hasLayoutClass(g.layout, t->shape, t->strides, t->ndim))
    return fail(src + " has the memory layout (dim order) it had at capture");
  int rg = requiresGrad(values.get(g.slot));
  bool ok = rg >= 0 && (rg == 1) == g.requiresGrad;
  return ok || fail(src + ".requires_grad == " + boolStr(g.requiresGrad));
}

} // namespace xjit::frontend
