// torch.autocast while capturing: `with torch.autocast("cpu", ...)` blocks change the state ops
// are captured under, and each call of an autocast-listed function gets eager's casts of its
// floating arguments first (docs/frontend.md, "Autocast").
#include "analyzer.h"

#include <functional>

namespace xjit::frontend {

namespace {

/// The last component of a dotted name ("torch.nn.functional.linear" -> "linear").
std::string_view lastName(std::string_view n) {
  size_t dot = n.rfind('.');
  return dot == std::string_view::npos ? n : n.substr(dot + 1);
}

/// Eager autocast casts floating tensors other than f64 (is_autocast_eligible).
bool eligible(const VarPtr &v) {
  auto *t = as<TensorVar>(v);
  return t && isFloating(t->type().dtype()) && t->type().dtype() != DType::F64;
}

} // namespace

Args Analyzer::autocastArgs(std::string_view targets, const Args &args) {
  if (!autocast_.enabled) return args;
  AutocastPolicy policy = AutocastPolicy::None;
  std::string_view name;
  for (size_t at = 0; at < targets.size() && policy == AutocastPolicy::None;) {
    size_t end = targets.find(' ', at);
    if (end == std::string_view::npos) end = targets.size();
    name = lastName(targets.substr(at, end - at));
    policy = autocastPolicy(name);
    at = end + 1;
  }
  if (policy == AutocastPolicy::None) {
    // F.pad's reflect and replicate modes run the fp32-listed reflection/replication kernels.
    if (lastName(targets) == "pad" && !args.pos.empty() && eligible(args.pos[0]) &&
        as<TensorVar>(args.pos[0])->type().dtype() != DType::F32) {
      const VarPtr *mode = args.pos.size() > 2 ? &args.pos[2] : args.find("mode");
      PyRef m = mode ? asPython(*mode) : PyRef();
      if (mode && !(m && PyUnicode_Check(m.get()) && utf8(m.get()) == "constant"))
        fail("F.pad with a non-constant mode on a low-precision tensor under torch.autocast");
    }
    return args;
  }
  if (policy == AutocastPolicy::Refuse)
    fail(std::string(name) + " under torch.autocast (eager's casts depend on its arguments)");

  // Every tensor argument, also inside tuples and lists (cat's, stack's).
  auto forEachTensor = [&](const std::function<VarPtr(const VarPtr &)> &map) {
    std::function<VarPtr(const VarPtr &)> visit = [&](const VarPtr &v) -> VarPtr {
      if (v->kind == VarKind::Tensor) return map(v);
      if (v->kind != VarKind::Tuple && v->kind != VarKind::List) return v;
      std::vector<VarPtr> items = sequenceItems(v, "argument");
      bool changed = false;
      for (VarPtr &i : items) {
        VarPtr n = visit(i);
        changed |= n != i;
        i = std::move(n);
      }
      if (!changed) return v;
      if (v->kind == VarKind::List) return std::make_shared<ListVar>(std::move(items));
      return std::make_shared<TupleVar>(std::move(items));
    };
    Args out;
    for (const VarPtr &v : args.pos)
      out.pos.push_back(visit(v));
    for (const auto &[k, v] : args.kw)
      out.kw.emplace_back(k, visit(v));
    return out;
  };

  DType to = policy == AutocastPolicy::Lower ? autocast_.dtype : DType::F32;
  if (policy == AutocastPolicy::Promote) {
    std::optional<DType> widest;
    forEachTensor([&](const VarPtr &v) {
      if (eligible(v)) {
        DType d = as<TensorVar>(v)->type().dtype();
        widest = widest ? promoteTypes(*widest, d) : d;
      }
      return v;
    });
    if (!widest) return args;
    to = *widest;
  }
  return forEachTensor([&](const VarPtr &v) {
    return eligible(v) && as<TensorVar>(v)->type().dtype() != to ? castTo(v, to) : v;
  });
}

VarPtr Analyzer::autocastCall(PyObject *fn, const std::string &qualname, const Args &args) {
  static PyObject *autocastType = [] {
    PyObject *amp = PyImport_ImportModule("torch.amp.autocast_mode");
    PyObject *t = amp ? PyObject_GetAttrString(amp, "autocast") : nullptr;
    Py_XDECREF(amp);
    PyErr_Clear();
    return t; // kept for good
  }();
  static PyObject *cpuAutocastType = [] {
    PyObject *amp = PyImport_ImportModule("torch.cpu.amp.autocast_mode");
    PyObject *t = amp ? PyObject_GetAttrString(amp, "autocast") : nullptr;
    Py_XDECREF(amp);
    PyErr_Clear();
    return t;
  }();
  // An argument known at capture time: positional `i` or keyword `name`; nullptr if absent.
  auto argument = [&](size_t i, const char *name) -> PyRef {
    const VarPtr *v = i < args.pos.size() ? &args.pos[i] : args.find(name);
    if (!v) return PyRef();
    PyRef p = asPython(*v);
    if (!p) fail(std::string("torch.autocast's ") + name + " is not known at capture time");
    return p;
  };
  auto device = [&](size_t i, const char *name) {
    PyRef d = argument(i, name);
    if (!d) return std::string("cuda"); // torch.is_autocast_enabled(): CUDA's state
    PyRef s = PyRef::steal(PyObject_Str(d.get()));
    return s ? utf8(s.get()) : std::string();
  };

  if (fn == autocastType || fn == cpuAutocastType) {
    // torch.autocast(device_type, dtype=None, enabled=True, cache_enabled=None);
    // torch.cpu.amp.autocast(enabled=True, dtype=torch.bfloat16, cache_enabled=True).
    const bool cpuClass = fn == cpuAutocastType;
    if (!cpuClass) {
      std::string dev = device(0, "device_type");
      if (dev != "cpu")
        fail("torch.autocast for device '" + dev + "' (only the CPU's is captured)");
    }
    PyRef dtype = argument(1, "dtype");
    PyRef enabled = argument(cpuClass ? 0 : 2, "enabled");
    PyRef cache = argument(cpuClass ? 2 : 3, "cache_enabled");
    AutocastState s = autocast_;
    s.enabled = !enabled || PyObject_IsTrue(enabled.get()) == 1;
    if (dtype && dtype.get() != Py_None) {
      std::optional<DType> d = dtypeFromTorch(dtype.get());
      if (!d || (*d != DType::BF16 && *d != DType::F16))
        fail("torch.autocast on the CPU with a dtype other than bfloat16 or float16");
      s.dtype = *d;
    } else if (cpuClass) {
      s.dtype = DType::BF16;
    } else if (!entryAutocast_.enabled && autocast_ == entryAutocast_ && s.dtype != DType::BF16) {
      // The default is torch.get_autocast_dtype("cpu"), which a disabled entry's key omits.
      fail("torch.autocast(\"cpu\") without a dtype while the default is not bfloat16");
    }
    if (cache && cache.get() != Py_None)
      s.cache = PyObject_IsTrue(cache.get()) == 1;
    else if (cpuClass)
      s.cache = true;
    return std::make_shared<AutocastModeVar>(s);
  }

  if (qualname == "is_autocast_enabled")
    return boolean(device(0, "device_type") == "cpu" && autocast_.enabled);
  if (qualname == "_is_any_autocast_enabled" || qualname == "is_autocast_cpu_enabled")
    return boolean(autocast_.enabled);
  if (qualname == "is_autocast_cache_enabled") return boolean(autocast_.cache);
  if (qualname == "get_autocast_cpu_dtype" ||
      (qualname == "get_autocast_dtype" && device(0, "device_type") == "cpu"))
    return constant(torchDtype(autocast_.dtype));
  return nullptr;
}

} // namespace xjit::frontend
