// torch.utils.checkpoint.checkpoint(fn, *args, ...) captured as fn(*args) inline, its ops marked
// `autodiff.recompute`: a training step's partition recomputes their values in the backward
// instead of saving them, as eager's checkpoint recomputes fn (docs/frontend.md "Activation
// checkpointing"). Values are eager's: fn runs once, on the same operands, drawing the same
// random numbers (the checkpoint's recompute restores the generator for the same draws).
#include "analyzer.h"

#include <algorithm>
#include <iterator>

namespace xjit::frontend {
namespace {

struct CheckpointApi {
  PyObject *checkpoint = nullptr, *noopContext = nullptr;
};

const CheckpointApi &checkpointApi() {
  static CheckpointApi api = [] {
    CheckpointApi c;
    PyRef mod = PyRef::steal(PyImport_ImportModule("torch.utils.checkpoint"));
    if (!mod) {
      PyErr_Clear();
      return c;
    }
    c.checkpoint = PyObject_GetAttrString(mod.get(), "checkpoint");
    c.noopContext = PyObject_GetAttrString(mod.get(), "noop_context_fn");
    if (!c.checkpoint || !c.noopContext) {
      PyErr_Clear();
      Py_CLEAR(c.checkpoint);
      Py_CLEAR(c.noopContext);
    }
    return c;
  }();
  return api;
}

/// Whether a tensor among `v` (through tuples and lists) requires grad.
bool anyRequiresGrad(Analyzer &a, const VarPtr &v) {
  if (auto *t = as<TensorVar>(v)) return t->requiresGrad;
  if (v->kind == VarKind::Tuple || v->kind == VarKind::List)
    for (const VarPtr &item : a.sequenceItems(v, "argument"))
      if (anyRequiresGrad(a, item)) return true;
  return false;
}

} // namespace

VarPtr checkpointCall(Analyzer &a, PyObject *fn, const Args &args) {
  const CheckpointApi &api = checkpointApi();
  if (!api.checkpoint || fn != api.checkpoint) return nullptr;
  if (args.pos.empty()) a.fail("torch.utils.checkpoint.checkpoint() without a function");
  // checkpoint's own keywords; the others go to fn (use_reentrant=False only, as in eager).
  static const char *const own[] = {"use_reentrant", "context_fn", "determinism_check",
                                    "debug",         "early_stop", "preserve_rng_state"};
  Args inner;
  inner.pos.assign(args.pos.begin() + 1, args.pos.end());
  for (const auto &[k, v] : args.kw)
    if (std::find(std::begin(own), std::end(own), k) == std::end(own)) inner.kw.emplace_back(k, v);
  const VarPtr *reentrantVar = args.find("use_reentrant");
  PyRef reentrant = reentrantVar ? a.asPython(*reentrantVar) : PyRef();
  // Without use_reentrant eager warns at every call (and takes the reentrant kind): left to it.
  if (!reentrant || reentrant.get() == Py_None)
    a.fail("torch.utils.checkpoint.checkpoint without use_reentrant (PyTorch warns)");
  const bool isReentrant = PyObject_IsTrue(reentrant.get()) == 1;
  // A selective-checkpoint policy (context_fn) runs user contexts around fn: not modeled.
  if (const VarPtr *ctx = args.find("context_fn")) {
    PyRef c = a.asPython(*ctx);
    if (!c || c.get() != api.noopContext)
      a.fail("torch.utils.checkpoint.checkpoint with a context_fn");
  }
  if (isReentrant) {
    // Eager raises on keywords for fn; with no input that requires grad it warns and its
    // outputs need no grad (the parameters inside get none): both left to eager.
    if (!inner.kw.empty()) a.fail("reentrant torch.utils.checkpoint.checkpoint with keywords");
    if (a.gradEnabled()) {
      bool any = false;
      for (const VarPtr &v : inner.pos)
        any = any || anyRequiresGrad(a, v);
      if (!any)
        a.fail("reentrant torch.utils.checkpoint.checkpoint with no input that requires grad");
    }
  }
  Block *block = a.builder().block();
  Op *before = block->back();
  VarPtr result = a.call(args.pos[0], inner);
  if (a.gradEnabled() && a.builder().block() == block && !a.builder().insertionBefore())
    for (Op *op = before ? before->next() : block->front(); op; op = op->next())
      op->setAttr("autodiff.recompute", Attr(true));
  return result;
}

} // namespace xjit::frontend
