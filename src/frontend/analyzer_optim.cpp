// `opt.step()` of a stock torch.optim optimizer (SGD, Adam, AdamW) captured as graph ops: the
// parameters, gradients, state tensors and hyperparameters are read from the object under
// guards, and the update is inlined from xjit/_optim.py, which follows torch.optim's
// single-tensor path op for op. Tracing torch.optim's own step instead would meet its profiler
// context, grad-mode wrappers, lazy state creation and `step_t.item()` (one graph per step
// count); the stock classes' updates are few and documented, so they are written once.
#include "analyzer.h"
#include "tensor_bridge.h"

#include <algorithm>
#include <optional>
#include <set>
#include <string_view>

namespace xjit::frontend {
namespace {

enum class OptimizerKind { None, SGD, Adam };

PyRef attr(PyObject *o, const char *name) {
  PyRef r = PyRef::steal(PyObject_GetAttrString(o, name));
  if (!r) PyErr_Clear();
  return r;
}

/// The code object of `fn` after following its `__wrapped__` chain (null if none).
PyObject *unwrappedCode(PyObject *fn, int *depth) {
  PyRef f = PyRef::borrow(fn);
  *depth = 0;
  while (PyRef w = attr(f.get(), "__wrapped__")) {
    f = std::move(w);
    ++*depth;
  }
  return PyFunction_Check(f.get()) ? PyFunction_GET_CODE(f.get()) : nullptr;
}

/// The stock classes, their raw `step` code objects and Optimizer.zero_grad as torch.optim
/// defines it (wrapped by torch._disable_dynamo), read once.
struct Stock {
  PyObject *sgd = nullptr, *adam = nullptr, *adamw = nullptr;
  PyObject *sgdStep = nullptr, *adamStep = nullptr; // the raw `step` code objects
  PyObject *zeroGrad = nullptr;                     // Optimizer.zero_grad (the wrapper)
};

const Stock &stockTable() {
  static const Stock stock = [] {
    Stock s;
    PyRef optim = PyRef::steal(PyImport_ImportModule("torch.optim"));
    if (!optim) {
      PyErr_Clear();
      return s;
    }
    auto cls = [&](const char *name) { return attr(optim.get(), name).release(); };
    s.sgd = cls("SGD");
    s.adam = cls("Adam");
    s.adamw = cls("AdamW");
    auto rawStep = [](PyObject *c) -> PyObject * {
      if (!c) return nullptr;
      PyObject *d = reinterpret_cast<PyTypeObject *>(c)->tp_dict;
      PyObject *step = d ? PyDict_GetItemString(d, "step") : nullptr;
      int depth = 0;
      PyObject *code = step ? unwrappedCode(step, &depth) : nullptr;
      Py_XINCREF(code);
      return code;
    };
    s.sgdStep = rawStep(s.sgd);
    s.adamStep = rawStep(s.adam);
    if (PyRef base = attr(optim.get(), "Optimizer")) {
      PyObject *d = reinterpret_cast<PyTypeObject *>(base.get())->tp_dict;
      s.zeroGrad = d ? PyDict_GetItemString(d, "zero_grad") : nullptr;
      Py_XINCREF(s.zeroGrad);
    }
    return s;
  }();
  return stock;
}

/// Which stock optimizer `opt` is, when `fn` (the function `opt.step` calls) is that class's
/// step as torch.optim wraps it: Optimizer.profile_hook_step's wrapper around
/// _use_grad_for_differentiable's wrapper around the class's `step`. Subclasses and replaced
/// steps are traced like other code.
OptimizerKind stockOptimizer(PyObject *opt, PyObject *fn) {
  const Stock &stock = stockTable();
  PyObject *type = reinterpret_cast<PyObject *>(Py_TYPE(opt));
  OptimizerKind kind = type == stock.sgd                           ? OptimizerKind::SGD
                       : type == stock.adam || type == stock.adamw ? OptimizerKind::Adam
                                                                   : OptimizerKind::None;
  if (kind == OptimizerKind::None || !PyFunction_Check(fn)) return OptimizerKind::None;
  auto *wrapper = reinterpret_cast<PyCodeObject *>(PyFunction_GET_CODE(fn));
  if (utf8(wrapper->co_name) != "wrapper" ||
      utf8(wrapper->co_qualname).find("profile_hook_step") == std::string::npos)
    return OptimizerKind::None;
  int depth = 0;
  PyObject *code = unwrappedCode(fn, &depth);
  PyObject *expected = kind == OptimizerKind::SGD ? stock.sgdStep : stock.adamStep;
  return depth == 2 && code && code == expected ? kind : OptimizerKind::None;
}

Source dictKey(const Source &src, PyObject *key) {
  return plus(src, SourceStep{SourceStep::DictKey, 0, "", PyRef::borrow(key)});
}
Source dictKey(const Source &src, const char *key) {
  return plus(src, SourceStep{SourceStep::DictKey, 0, "", check(PyUnicode_FromString(key), "str")});
}

/// Guards that the dict at `src` keeps the keys `dict` has now.
void guardDictKeys(Analyzer &a, const Source &src, PyObject *dict) {
  Guard g;
  g.kind = Guard::DictKeysAre;
  g.source = src;
  g.object = check(PyDict_Keys(dict), "dict.keys()");
  g.description = sourceKey(src) + ": the same " + std::to_string(PyDict_GET_SIZE(dict)) + " keys";
  a.addGuard(std::move(g));
}

/// A parameter group's hyperparameter, guarded by value at its source.
struct Group {
  Analyzer &a;
  PyObject *dict;
  Source src;

  PyObject *get(const char *key) const {
    PyObject *v = PyDict_GetItemString(dict, key);
    if (!v) a.fail(std::string("optimizer parameter group without '") + key + "'");
    return v;
  }
  PyObject *guarded(const char *key) const {
    PyObject *v = get(key);
    a.guardEquals(dictKey(src, key), v);
    return v;
  }
  /// A float hyperparameter (a tensor learning rate or beta would need its value at run time).
  VarPtr number(const char *key) const {
    PyObject *v = get(key);
    if (!PyFloat_Check(v) && !PyLong_Check(v))
      a.fail(std::string("optimizer hyperparameter '") + key + "' of type " + Py_TYPE(v)->tp_name +
             " (a float is captured; tensors are not)");
    guarded(key);
    return a.constant(v);
  }
  /// The learning rate: a float is read at run time (a scheduler changes it every step and
  /// must not recompile the step); an int is guarded by value.
  VarPtr learningRate() const {
    PyObject *v = get("lr");
    if (!PyFloat_Check(v)) return number("lr");
    return a.floatInput(dictKey(src, "lr"));
  }
  bool flag(const char *key) const {
    PyObject *v = guarded(key);
    return PyObject_IsTrue(v) == 1;
  }
  /// A flag the capture does not model: must be off (None or False).
  void off(const char *key, const char *what) const {
    PyObject *v = PyDict_GetItemString(dict, key);
    if (!v) return;
    guarded(key);
    if (v != Py_None && v != Py_False) a.fail(std::string("optimizer with ") + what);
  }
};

/// The stock step of `self` (`func` the function its `step` calls); `instanceStep`: an instance
/// attribute `step` does not matter (called through an LR scheduler's wrapper, which is that
/// attribute, or as the class's function `func(opt)`).
VarPtr stockStep(Analyzer &a, const VarPtr &self, const VarPtr &func, const Args &args,
                 bool instanceStep) {
  auto *selfObj = as<ObjectVar>(self);
  auto *funcObj = as<ObjectVar>(func);
  if (!selfObj || !funcObj || !self->source || !args.pos.empty() || !args.kw.empty())
    return nullptr;
  PyObject *opt = selfObj->obj.get();
  OptimizerKind kind = stockOptimizer(opt, funcObj->obj.get());
  if (kind == OptimizerKind::None) return nullptr;
  const Source &S = *self->source;
  const std::string name = Py_TYPE(opt)->tp_name;

  // The object and the step it runs: its type, the class's wrapped step, and its instance
  // attributes (no `step` of its own, no grad scaler's grad_scale / found_inf).
  a.guardType(S, reinterpret_cast<PyObject *>(Py_TYPE(opt)));
  a.guardId(plus(plus(S, attrStep("__class__")), attrStep("step")), funcObj->obj.get());
  PyRef instanceDict = attr(opt, "__dict__");
  if (!instanceDict || !PyDict_Check(instanceDict.get())) return nullptr;
  for (std::string_view absent : {"step", "grad_scale", "found_inf"})
    if (PyDict_GetItemString(instanceDict.get(), absent.data()) &&
        !(instanceStep && absent == "step"))
      a.fail(name + " with an instance attribute '" + std::string(absent) + "'");
  guardDictKeys(a, plus(S, attrStep("__dict__")), instanceDict.get());
  // Step hooks, the optimizer's own and the global ones (optimizer.py's globals, reached
  // through the wrapper the class's step is).
  Source wrapperGlobals =
      plus(plus(plus(S, attrStep("__class__")), attrStep("step")), attrStep("__globals__"));
  PyObject *globals = PyFunction_GET_GLOBALS(funcObj->obj.get());
  for (const char *hooks : {"_optimizer_step_pre_hooks", "_optimizer_step_post_hooks"}) {
    PyRef h = attr(opt, hooks);
    if (!h || PyObject_Length(h.get()) != 0) {
      PyErr_Clear();
      a.fail(name + ".step() with step hooks");
    }
    a.guardLen(plus(S, attrStep(hooks)), 0);
  }
  for (const char *hooks : {"_global_optimizer_pre_hooks", "_global_optimizer_post_hooks"}) {
    PyObject *h = PyDict_GetItemString(globals, hooks);
    if (!h || PyObject_Length(h) != 0) {
      PyErr_Clear();
      a.fail(name + ".step() with global optimizer step hooks");
    }
    a.guardLen(dictKey(wrapperGlobals, hooks), 0);
  }
  PyRef defaults = attr(opt, "defaults");
  if (!defaults || !PyDict_Check(defaults.get())) return nullptr;
  Group{a, defaults.get(), plus(S, attrStep("defaults"))}.off("differentiable",
                                                              "differentiable=True");

  PyRef groups = attr(opt, "param_groups");
  PyRef state = attr(opt, "state");
  if (!groups || !PyList_CheckExact(groups.get()) || !state || !PyDict_Check(state.get()))
    return nullptr;
  const Source groupsSrc = plus(S, attrStep("param_groups"));
  const Source stateSrc = plus(S, attrStep("state"));
  a.guardType(groupsSrc, reinterpret_cast<PyObject *>(&PyList_Type));
  a.guardLen(groupsSrc, PyList_GET_SIZE(groups.get()));

  PyRef xoptim = check(PyImport_ImportModule("xjit._optim"), "import xjit._optim");
  PyRef update =
      check(PyObject_GetAttrString(xoptim.get(), kind == OptimizerKind::SGD ? "sgd" : "adam"),
            "xjit._optim update");
  const bool gradWas = a.gradEnabled();
  a.setGradEnabled(false); // the step runs under no_grad (differentiable=False)
  for (Py_ssize_t gi = 0; gi < PyList_GET_SIZE(groups.get()); ++gi) {
    PyObject *groupDict = PyList_GET_ITEM(groups.get(), gi);
    if (!PyDict_CheckExact(groupDict)) a.fail(name + " parameter group that is not a dict");
    Source gsrc = plus(groupsSrc, SourceStep{SourceStep::Item, gi, "", {}});
    a.guardType(gsrc, reinterpret_cast<PyObject *>(&PyDict_Type));
    Group g{a, groupDict, gsrc};
    g.off("capturable", "capturable=True");
    g.off("differentiable", "differentiable=True");
    g.off("fused", "fused=True");
    Args call;
    call.kw.emplace_back("lr", g.learningRate());
    call.kw.emplace_back("weight_decay", g.number("weight_decay"));
    call.kw.emplace_back("maximize", a.boolean(g.flag("maximize")));
    bool amsgrad = false, momentum = false;
    if (kind == OptimizerKind::Adam) {
      PyObject *betas = g.get("betas");
      if (!PyTuple_CheckExact(betas) || PyTuple_GET_SIZE(betas) != 2)
        a.fail(name + " betas that are not a tuple of two floats");
      for (Py_ssize_t i = 0; i < 2; ++i)
        if (!PyFloat_Check(PyTuple_GET_ITEM(betas, i)) && !PyLong_Check(PyTuple_GET_ITEM(betas, i)))
          a.fail(name + " betas that are not floats");
      g.guarded("betas");
      call.kw.emplace_back("beta1", a.constant(PyTuple_GET_ITEM(betas, 0)));
      call.kw.emplace_back("beta2", a.constant(PyTuple_GET_ITEM(betas, 1)));
      call.kw.emplace_back("eps", g.number("eps"));
      amsgrad = g.flag("amsgrad");
      call.kw.emplace_back("amsgrad", a.boolean(amsgrad));
      call.kw.emplace_back("decoupled_weight_decay", a.boolean(g.flag("decoupled_weight_decay")));
    } else {
      PyObject *m = g.get("momentum");
      momentum = PyObject_IsTrue(m) == 1;
      call.kw.emplace_back("momentum", g.number("momentum"));
      call.kw.emplace_back("dampening", g.number("dampening"));
      call.kw.emplace_back("nesterov", a.boolean(g.flag("nesterov")));
    }

    PyObject *params = g.get("params");
    if (!PyList_CheckExact(params)) a.fail(name + " parameter list that is not a list");
    Source psrc = dictKey(gsrc, "params");
    a.guardType(psrc, reinterpret_cast<PyObject *>(&PyList_Type));
    a.guardLen(psrc, PyList_GET_SIZE(params));
    // The update's lists: parameters with a gradient, their gradients and state tensors.
    std::vector<std::vector<VarPtr>> lists(kind == OptimizerKind::SGD ? 3 : 6);
    for (Py_ssize_t pi = 0; pi < PyList_GET_SIZE(params); ++pi) {
      PyObject *p = PyList_GET_ITEM(params, pi);
      Source src = plus(psrc, SourceStep{SourceStep::Item, pi, "", {}});
      // The state is keyed by the parameter object itself.
      a.guardId(src, p);
      // A zero_grad() earlier in the capture changed .grad after the object was read.
      if (a.attrOverlay.count({p, "grad"}))
        a.fail(name + ".step() after zero_grad() in the same capture");
      PyRef grad = attr(p, "grad");
      Source gradSrc = plus(src, attrStep("grad"));
      if (!grad || grad.get() == Py_None) {
        a.guardId(gradSrc, Py_None);
        continue;
      }
      if (!isTensor(grad.get())) a.fail(name + " parameter whose .grad is not a tensor");
      PyObject *st = PyDict_GetItem(state.get(), p); // no defaultdict insertion
      const bool needsState = kind == OptimizerKind::Adam || momentum;
      if (needsState && (!st || !PyDict_Check(st) || PyDict_GET_SIZE(st) == 0)) {
        // The first step makes the state (eager, in Python); the capture after it is reused.
        Guard len;
        len.kind = Guard::LenIs;
        len.source = stateSrc;
        len.length = PyObject_Length(state.get());
        len.description = "len(" + sourceKey(stateSrc) + ") == " + std::to_string(len.length);
        a.failWhile(name + ".step() before its state exists (the first step runs in Python)",
                    {std::move(len)});
      }
      lists[0].push_back(a.wrapSourced(p, src));
      lists[1].push_back(a.wrapSourced(grad.get(), gradSrc));
      if (!needsState) continue;
      Source ssrc = dictKey(stateSrc, p);
      auto stateTensor = [&](const char *key) {
        PyObject *t = PyDict_GetItemString(st, key);
        if (!t || !isTensor(t)) a.fail(name + " state without tensor '" + key + "'");
        return a.wrapSourced(t, dictKey(ssrc, key));
      };
      if (kind == OptimizerKind::SGD) {
        lists[2].push_back(stateTensor("momentum_buffer"));
        continue;
      }
      lists[2].push_back(stateTensor("exp_avg"));
      lists[3].push_back(stateTensor("exp_avg_sq"));
      if (amsgrad) lists[4].push_back(stateTensor("max_exp_avg_sq"));
      lists[5].push_back(stateTensor("step"));
    }
    for (auto &l : lists)
      call.pos.push_back(std::make_shared<ListVar>(std::move(l)));
    a.callObject(update.get(), std::nullopt, call);
  }
  a.setGradEnabled(gradWas);
  return a.none();
}

/// zero_grad's one argument, set_to_none (default True), when it is a known bool.
std::optional<bool> setToNoneArg(Analyzer &a, const Args &args) {
  if (args.pos.size() + args.kw.size() > 1) return std::nullopt;
  const VarPtr *flag = args.pos.empty() ? args.find("set_to_none") : &args.pos[0];
  if (!flag) return args.kw.empty() ? std::optional<bool>(true) : std::nullopt;
  PyRef v = a.asPython(*flag);
  if (!v || !PyBool_Check(v.get())) return std::nullopt;
  return v.get() == Py_True;
}

/// One parameter's part of zero_grad: `.grad` set to None (a side effect, replayed after the
/// graph; setting None where it is None already changes nothing, so the gradient needs no guard)
/// or, for set_to_none=False, zeroed in place. Eager first detaches a gradient that has a
/// history, which a capture would have to model: such a gradient is a graph break (`who`).
void clearGrad(Analyzer &a, PyObject *p, const Source &src, bool setToNone,
               const std::string &who) {
  if (setToNone) {
    a.recordEffect({SideEffect::SetAttr, src, "grad", {}, a.none()});
    a.attrOverlay[{p, "grad"}] = a.none();
    return;
  }
  PyRef grad = attr(p, "grad");
  const Source gradSrc = plus(src, attrStep("grad"));
  if (!grad || grad.get() == Py_None) {
    a.guardId(gradSrc, Py_None);
    return;
  }
  if (!isTensor(grad.get()) || requiresGrad(grad.get()) != 0)
    a.fail(who + " of a gradient that requires grad");
  VarPtr g = a.wrapSourced(grad.get(), gradSrc);
  a.callMethod(g, "zero_", {});
  a.attrOverlay[{p, "grad"}] = g;
}

/// Optimizer.zero_grad(set_to_none) of any optimizer whose class keeps the base class's: each
/// parameter's gradient cleared (clearGrad). Eager runs it under torch._disable_dynamo, which is
/// what made it a graph break.
VarPtr zeroGrad(Analyzer &a, const VarPtr &self, const VarPtr &func, const Args &args) {
  auto *selfObj = as<ObjectVar>(self);
  auto *funcObj = as<ObjectVar>(func);
  const Stock &stock = stockTable();
  if (!selfObj || !funcObj || !self->source || !stock.zeroGrad ||
      funcObj->obj.get() != stock.zeroGrad)
    return nullptr;
  std::optional<bool> setToNone = setToNoneArg(a, args);
  if (!setToNone) return nullptr;
  PyObject *opt = selfObj->obj.get();
  const Source &S = *self->source;
  const std::string name = Py_TYPE(opt)->tp_name;
  // The method found is the base class's (no override, no instance attribute: the attribute
  // names are guarded as for the step).
  a.guardType(S, reinterpret_cast<PyObject *>(Py_TYPE(opt)));
  a.guardId(plus(plus(S, attrStep("__class__")), attrStep("zero_grad")), stock.zeroGrad);
  PyRef instanceDict = attr(opt, "__dict__");
  if (!instanceDict || !PyDict_Check(instanceDict.get()) ||
      PyDict_GetItemString(instanceDict.get(), "zero_grad"))
    return nullptr;
  guardDictKeys(a, plus(S, attrStep("__dict__")), instanceDict.get());
  PyRef groups = attr(opt, "param_groups");
  if (!groups || !PyList_CheckExact(groups.get())) return nullptr;
  const Source groupsSrc = plus(S, attrStep("param_groups"));
  a.guardType(groupsSrc, reinterpret_cast<PyObject *>(&PyList_Type));
  a.guardLen(groupsSrc, PyList_GET_SIZE(groups.get()));
  for (Py_ssize_t gi = 0; gi < PyList_GET_SIZE(groups.get()); ++gi) {
    PyObject *group = PyList_GET_ITEM(groups.get(), gi);
    PyObject *params = PyDict_CheckExact(group) ? PyDict_GetItemString(group, "params") : nullptr;
    if (!params || !PyList_CheckExact(params)) a.fail(name + ".zero_grad() of an unusual group");
    const Source gsrc = plus(groupsSrc, SourceStep{SourceStep::Item, gi, "", {}});
    a.guardType(gsrc, reinterpret_cast<PyObject *>(&PyDict_Type));
    const Source psrc = dictKey(gsrc, "params");
    a.guardType(psrc, reinterpret_cast<PyObject *>(&PyList_Type));
    a.guardLen(psrc, PyList_GET_SIZE(params));
    for (Py_ssize_t pi = 0; pi < PyList_GET_SIZE(params); ++pi) {
      PyObject *p = PyList_GET_ITEM(params, pi);
      const Source src = plus(psrc, SourceStep{SourceStep::Item, pi, "", {}});
      a.guardId(src, p);
      clearGrad(a, p, src, *setToNone, name + ".zero_grad(set_to_none=False)");
    }
  }
  return a.none();
}

/// The parameters of module `m` (at `src`) and of its submodules, each once, with their sources
/// (named_parameters' walk); the guards keep the module tree and its parameters as they are.
void moduleParameters(Analyzer &a, PyObject *m, const Source &src, std::set<PyObject *> &modules,
                      std::vector<std::pair<PyObject *, Source>> &params) {
  if (!modules.insert(m).second) return;
  PyRef own = attr(m, "_parameters"), children = attr(m, "_modules");
  if (!own || !children || !PyDict_Check(own.get()) || !PyDict_Check(children.get()))
    a.fail("module.zero_grad() of a module without _parameters / _modules dicts");
  for (auto [dict, field] : {std::pair{own.get(), "_parameters"}, {children.get(), "_modules"}}) {
    const Source dsrc = plus(src, attrStep(field));
    guardDictKeys(a, dsrc, dict);
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(dict, &pos, &key, &value)) {
      if (!PyUnicode_Check(key)) a.fail("module.zero_grad() of a module with a non-str name");
      const Source item = dictKey(dsrc, key);
      a.guardId(item, value);
      if (value == Py_None) continue;
      if (dict == children.get()) {
        moduleParameters(a, value, item, modules, params);
      } else if (std::none_of(params.begin(), params.end(),
                              [&](const auto &p) { return p.first == value; })) {
        params.emplace_back(value, item);
      }
    }
  }
}

/// nn.Module.zero_grad(set_to_none) of a module whose class keeps nn.Module's: each parameter's
/// gradient cleared as Optimizer.zero_grad does (clearGrad), in named_parameters' order.
VarPtr moduleZeroGrad(Analyzer &a, const VarPtr &self, const VarPtr &func, const Args &args) {
  auto *mod = as<ModuleVar>(self);
  auto *funcObj = as<ObjectVar>(func);
  if (!mod || !funcObj || !self->source) return nullptr;
  a.refuseIfShared(self, "zero_grad() (parameters collected by identity)");
  PyRef base = attr(torchModuleType(), "zero_grad");
  if (!base || funcObj->obj.get() != base.get()) return nullptr;
  std::optional<bool> setToNone = setToNoneArg(a, args);
  if (!setToNone) return nullptr;
  PyObject *m = mod->obj.get();
  const Source &S = *self->source;
  PyRef instanceDict = attr(m, "__dict__");
  // A DataParallel replica (`_is_replica`) only warns: not modeled.
  if (!instanceDict || !PyDict_Check(instanceDict.get()) ||
      PyDict_GetItemString(instanceDict.get(), "_is_replica") ||
      PyDict_GetItemString(instanceDict.get(), "zero_grad"))
    return nullptr;
  a.guardId(plus(plus(S, attrStep("__class__")), attrStep("zero_grad")), base.get());
  guardDictKeys(a, plus(S, attrStep("__dict__")), instanceDict.get());
  std::set<PyObject *> modules;
  std::vector<std::pair<PyObject *, Source>> params;
  moduleParameters(a, m, S, modules, params);
  for (const auto &[p, src] : params)
    clearGrad(a, p, src, *setToNone, "module.zero_grad(set_to_none=False)");
  return a.none();
}

} // namespace

VarPtr optimizerStep(Analyzer &a, const VarPtr &self, const VarPtr &func, const Args &args) {
  return stockStep(a, self, func, args, false);
}

VarPtr optimizerZeroGrad(Analyzer &a, const VarPtr &self, const VarPtr &func, const Args &args) {
  return self->kind == VarKind::Module ? moduleZeroGrad(a, self, func, args)
                                       : zeroGrad(a, self, func, args);
}

VarPtr optimizerStepCall(Analyzer &a, PyObject *fn, const Args &args) {
  if (args.pos.size() != 1 || !args.kw.empty()) return nullptr;
  auto *opt = as<ObjectVar>(args.pos[0]);
  if (!opt || stockOptimizer(opt->obj.get(), fn) == OptimizerKind::None) return nullptr;
  return stockStep(a, args.pos[0], a.constant(fn), {}, true);
}

bool isStockOptimizerStep(PyObject *opt, PyObject *fn) {
  return stockOptimizer(opt, fn) != OptimizerKind::None;
}

VarPtr scheduledOptimizerStep(Analyzer &a, PyObject *fn, const std::optional<Source> &fnSource,
                              const Args &args) {
  // An LR scheduler replaces `opt.step` by a function of its own (torch.optim.lr_scheduler's
  // patch_track_step_called): it sets opt._opt_called = True and calls the class's step, the
  // optimizer held through a weak reference.
  if (!PyFunction_Check(fn) || !fnSource || fnSource->size() < 2 ||
      fnSource->back().kind != SourceStep::Attr || fnSource->back().name != "step")
    return nullptr;
  PyRef marker = attr(fn, "_wrapped_by_lr_sched");
  if (marker.get() != Py_True) return nullptr;
  auto *code = reinterpret_cast<PyCodeObject *>(PyFunction_GET_CODE(fn));
  PyObject *closure = PyFunction_GET_CLOSURE(fn);
  PyRef names = attr(reinterpret_cast<PyObject *>(code), "co_freevars");
  if (!closure || !names || !PyTuple_Check(names.get()) ||
      PyTuple_GET_SIZE(names.get()) != PyTuple_GET_SIZE(closure))
    return nullptr;
  PyObject *func = nullptr, *optRef = nullptr;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(closure); ++i) {
    const std::string n = utf8(PyTuple_GET_ITEM(names.get(), i));
    PyObject *cell = PyTuple_GET_ITEM(closure, i);
    if (n == "func") func = PyCell_GET(cell);
    if (n == "opt_ref") optRef = PyCell_GET(cell);
  }
  if (!func || !optRef || !PyWeakref_Check(optRef)) return nullptr;
  PyObject *opt = PyWeakref_GetObject(optRef);
  if (!opt || opt == Py_None) return nullptr;
  Source optSource(fnSource->begin(), fnSource->end() - 1);
  a.guardId(optSource, opt);
  VarPtr self = a.wrapSourced(opt, optSource);
  VarPtr step = stockStep(a, self, a.constant(func), args, true);
  if (step) a.setAttr(self, "_opt_called", a.boolean(true));
  return step;
}

} // namespace xjit::frontend
