// Module calls with forward hooks: nn.Module._call_impl's hook protocol inlined (pre-hooks,
// forward, forward hooks), each hook traced like other Python code.
#include "analyzer.h"
#include "torch_ops.h"

namespace xjit::frontend {

namespace {

/// Whether hook id `key` is in the module's dict `attr` (`_forward_hooks_with_kwargs`...). Read
/// at capture time without a guard: a hook's flags are set when it is registered, under its
/// handle's id (a process-wide counter, never reused), and the guard on the hook dict's keys
/// already pins which registrations the capture ran.
bool hookFlag(PyObject *module, const char *attr, PyObject *key) {
  PyRef d = PyRef::steal(PyObject_GetAttrString(module, attr));
  if (!d) {
    PyErr_Clear();
    return false;
  }
  int in = PyDict_Check(d.get()) ? PyDict_Contains(d.get(), key) : 0;
  if (in < 0) PyErr_Clear();
  return in == 1;
}

} // namespace

VarPtr Analyzer::callModuleWithHooks(const VarPtr &module, const Args &args) {
  PyObject *o = as<ModuleVar>(module)->obj.get();
  // Another instance of the class has hooks of its own (closures made per instance): the frame
  // keeps entries per instance.
  refuseIfShared(module, "forward hooks");
  if (!module->source) fail("forward hooks on a module the frame cannot reach");
  const Source &src = *module->source;
  // The hook dicts read as dicts of the caller's: their keys (the handles' ids, in order) are
  // guarded, so adding or removing a hook captures again; the hooks are guarded by identity.
  // An empty one (most modules have hooks of one kind only) is guarded by its length: no list
  // of keys made at every call.
  auto hooksOf = [&](const char *attr) {
    if (!hasNonEmpty(o, attr)) {
      guardLen(plus(src, attrStep(attr)), 0);
      return std::make_shared<DictVar>();
    }
    VarPtr d = containerView(getAttr(module, attr));
    if (!as<DictVar>(d)) fail(std::string("module ") + attr + " that is not a dict");
    return std::static_pointer_cast<DictVar>(d);
  };
  std::shared_ptr<DictVar> pre = hooksOf("_forward_pre_hooks"), post = hooksOf("_forward_hooks");
  // Backward hooks stay a graph break (callModule): guarded absent.
  for (const char *h : {"_backward_hooks", "_backward_pre_hooks"})
    guardLen(plus(src, attrStep(h)), 0);

  VarPtr hookArgs = std::make_shared<TupleVar>(args.pos);
  auto kwargs = std::make_shared<DictVar>();
  for (const auto &[k, v] : args.kw)
    kwargs->items.emplace_back(check(PyUnicode_FromString(k.c_str()), "str"), v);
  VarPtr hookKwargs = kwargs;

  for (const auto &[id, hook] : pre->items) {
    Args a;
    if (hookFlag(o, "_forward_pre_hooks_with_kwargs", id.get())) {
      a.pos = {module, hookArgs, hookKwargs};
      VarPtr r = call(hook, a);
      if (isNoneVar(r)) continue;
      auto *t = as<TupleVar>(r);
      if (!t || t->items.size() != 2)
        fail("forward pre-hook must return None or a tuple of (new_args, new_kwargs)");
      hookArgs = t->items[0];
      hookKwargs = t->items[1];
    } else {
      a.pos = {module, hookArgs};
      VarPtr r = call(hook, a);
      if (isNoneVar(r)) continue;
      hookArgs = as<TupleVar>(r) ? r : std::make_shared<TupleVar>(std::vector<VarPtr>{r});
    }
  }

  Args forwardArgs;
  forwardArgs.pos = sequenceItems(hookArgs, "forward arguments");
  auto *kw = as<DictVar>(containerView(hookKwargs));
  if (!kw) fail("forward keyword arguments that are not a dict");
  for (const auto &[k, v] : kw->items) {
    if (!PyUnicode_Check(k.get())) fail("forward keyword argument that is not a str");
    forwardArgs.kw.emplace_back(utf8(k.get()), v);
  }
  bool found = false;
  VarPtr result = callModuleRow(module, forwardArgs, &found);
  if (!found) result = call(getAttr(module, "forward"), forwardArgs);

  for (const auto &[id, hook] : post->items) {
    Args a;
    if (hookFlag(o, "_forward_hooks_with_kwargs", id.get()))
      a.pos = {module, hookArgs, hookKwargs, result};
    else
      a.pos = {module, hookArgs, result};
    VarPtr r = call(hook, a);
    if (!isNoneVar(r)) result = r;
  }
  return result;
}

} // namespace xjit::frontend
