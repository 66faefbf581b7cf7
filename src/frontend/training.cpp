// Compiled training steps: the autodiff pass's forward and backward graphs, compiled natively and
// run by a torch.autograd.Function (python/xjit/_training.py), as AOTAutograd does.
#include "training.h"

#include "analyzer_bytecode.h"
#include "events.h"
#include "native_backend.h"
#include "py_util.h"
#include "tensor_bridge.h"

#include "xjit/ir/builder.h"
#include "xjit/ir/op_registry.h"
#include "xjit/ir/sym_attr.h"

#ifdef XJIT_FRONTEND_HAVE_RUNTIME
#include "xjit/runtime/runtime.h"
#endif
#ifdef XJIT_FRONTEND_HAVE_PASSES
#include "xjit/passes/autodiff.h"
#include "xjit/passes/pass.h"
#endif

#include <map>
#include <optional>
#include <set>
#include <tuple>

namespace xjit::frontend {
namespace {

constexpr const char *kCapsuleName = "xjit.training_graphs";

/// The compiled forward and backward graphs of one training entry. savedPermutes: per saved
/// value (the backward's first inputs), the dims of the `permute` view the forward returns it
/// as, or empty; the backward takes that view's source buffer (see takeSavedBuffers).
struct TrainingGraphs {
  CompiledEntry forward, backward;
  std::vector<std::vector<int64_t>> savedPermutes;
};

TrainingGraphs &graphsOf(PyObject *capsule) {
  auto *p =
      static_cast<std::shared_ptr<TrainingGraphs> *>(PyCapsule_GetPointer(capsule, kCapsuleName));
  if (!p) throw PyErrorSet();
  return **p;
}

PyRef indexTuple(const std::vector<size_t> &v) {
  PyRef t = checked(PyTuple_New(static_cast<Py_ssize_t>(v.size())));
  for (size_t i = 0; i < v.size(); ++i)
    PyTuple_SET_ITEM(t.get(), static_cast<Py_ssize_t>(i),
                     checked(PyLong_FromSize_t(v[i])).release());
  return t;
}

/// The IR value a view chain starts from.
const Value *viewRoot(const Value *v) {
  while (v->definingOp() && v->definingOp()->def().has(kView) && v->definingOp()->numOperands() > 0)
    v = v->definingOp()->operand(0);
  return v;
}

/// Gives each value the forward saves for the backward that is a view of an input the step
/// writes back after the run (a TensorCopy effect) a copy of its own, made at the end of the
/// forward: the view would read the written contents in the backward, where eager's autograd
/// kept the old ones (fuzzer seed 155885: `v = a[:, 1:]; v[:, 0].mul_(w); return v` saved a's
/// column for w's gradient, and the write-back of a doubled it).
void copySavedViewsOfWrittenInputs(Graph &fwd, size_t numOutputs, const CompiledEntry &e) {
  std::set<const Value *> written;
  for (const EffectPlan &fx : e.effects)
    if (fx.kind == SideEffect::TensorCopy)
      for (size_t i = 0; i < e.inputSlots.size() && i < fwd.numInputs(); ++i)
        if (e.inputSlots[i] == fx.target) written.insert(fwd.input(i));
  Op *ret = fwd.body()->terminator();
  if (written.empty() || !ret) return;
  Builder b(fwd.body(), ret);
  b.setLoc(ret->loc());
  for (size_t k = numOutputs; k < ret->numOperands(); ++k) {
    Value *v = ret->operand(k);
    if (v->type().isTensor() && !v->isBlockArgument() && written.count(viewRoot(v)))
      ret->setOperand(k, b.op("clone", {v}));
  }
}

/// Why the forward's outputs cannot be autograd.Function outputs ("" if they can): an output
/// that is (a view of) an input, or two outputs sharing memory, would need the view tracking
/// autograd gives eager tensors. Outputs flagged in `rebuilt` (OutputView) are not Function
/// outputs.
std::string outputAliasing(const Graph &fwd, size_t numOutputs, const std::vector<bool> &rebuilt) {
  std::set<const Value *> roots;
  const std::vector<Value *> outs = fwd.outputs();
  for (size_t i = 0; i < numOutputs; ++i) {
    if (!outs[i]->type().isTensor()) return "output " + std::to_string(i) + " is not a tensor";
    const Value *root = viewRoot(outs[i]);
    if (root->isBlockArgument())
      return "output " + std::to_string(i) + " is a graph input or a view of one";
    if (i < rebuilt.size() && rebuilt[i]) continue;
    if (!roots.insert(root).second)
      return "outputs share memory (one is a view of another, or both of a tensor not returned)";
  }
  return "";
}

/// An IR attribute as a Python value (null: a kind the replay cannot take, a symbolic size).
PyRef attrToPython(const Attr &a) {
  switch (a.kind()) {
  case AttrKind::Int: return checked(PyLong_FromLongLong(a.asInt()));
  case AttrKind::Bool: return PyRef::borrow(a.asBool() ? Py_True : Py_False);
  case AttrKind::Ints: {
    PyRef l = checked(PyList_New(0));
    for (int64_t i : a.asInts())
      if (PyList_Append(l.get(), checked(PyLong_FromLongLong(i)).get()) != 0) throw PyErrorSet();
    return l;
  }
  default: return PyRef();
  }
}

/// The steps that make `v` from `root` through view ops, for xjit._training.output_view: a list
/// of (name, attributes), null when an op has no replay there. Ops that only regroup dims (view,
/// flatten, unflatten) replay as a reshape to v's shape: a view where the base's strides allow
/// it, as eager's was; a detach (alias marked autodiff.stop) as detach. A symbolic size is None
/// in the list and recorded in `symbolic`, evaluated per call (rebuildOutputViews).
PyRef viewSteps(const Value *v, const Value *root,
                std::vector<OutputView::SymbolicAttr> &symbolic) {
  static const std::set<std::string, std::less<>> replayed = {
      "select", "slice",   "narrow",    "transpose", "permute", "t",         "movedim",
      "expand", "squeeze", "unsqueeze", "diagonal",  "alias",   "contiguous"};
  static const std::set<std::string, std::less<>> regroup = {"reshape", "view", "flatten",
                                                             "unflatten"};
  std::vector<const Op *> chain;
  for (; v != root; v = v->definingOp()->operand(0))
    chain.push_back(v->definingOp());
  PyRef steps = checked(PyList_New(0));
  auto set = [](PyObject *dict, const std::string &key, const PyRef &value) {
    if (PyDict_SetItemString(dict, key.c_str(), value.get()) != 0) throw PyErrorSet();
  };
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    const Op &op = **it;
    if (op.numResults() != 1) return PyRef();
    const size_t index = static_cast<size_t>(PyList_GET_SIZE(steps.get()));
    std::string name = op.name();
    PyRef attrs = checked(PyDict_New());
    if (name == "alias" && op.hasAttr("autodiff.stop")) {
      name = "detach";
    } else if (regroup.count(name)) {
      const Shape &shape = op.result(0)->type().shape();
      name = "reshape";
      if (isStaticShape(shape)) {
        std::vector<int64_t> sizes;
        for (const DimExpr &d : shape)
          sizes.push_back(d.value());
        set(attrs.get(), "shape", attrToPython(Attr(sizes)));
      } else {
        symbolic.push_back({index, "shape", shape, true});
        set(attrs.get(), "shape", PyRef::borrow(Py_None));
      }
    } else if (replayed.count(name)) {
      for (const auto &[key, a] : op.attrs()) {
        if (isSymbolicSize(op, key)) {
          const SizeSlotForm form = symbolicSizeSlot(name, key);
          std::optional<Shape> dims = symbolicDims(a, form);
          if (!dims) return PyRef();
          symbolic.push_back({index, key, *dims, form == SizeSlotForm::Dims});
          set(attrs.get(), key, PyRef::borrow(Py_None));
          continue;
        }
        PyRef value = attrToPython(a);
        if (!value) return PyRef();
        set(attrs.get(), key, value);
      }
    } else {
      return PyRef();
    }
    PyRef step = checked(Py_BuildValue("(sO)", name.c_str(), attrs.get()));
    if (PyList_Append(steps.get(), step.get()) != 0) throw PyErrorSet();
  }
  return steps;
}

/// The graph outputs that are views of another output (not of an input), with their steps.
[[maybe_unused]] std::vector<OutputView> outputViewsOf(const Graph &g) {
  const std::vector<Value *> outs = g.outputs();
  std::map<const Value *, size_t> outputOf;
  for (size_t i = 0; i < outs.size(); ++i)
    outputOf.emplace(outs[i], i);
  // The symbols a call binds (rebuildOutputViews): the plain ones of the inputs' shapes.
  std::set<std::string, std::less<>> bound;
  for (size_t i = 0; i < g.numInputs(); ++i)
    if (g.input(i)->type().isTensor())
      for (const DimExpr &d : g.input(i)->type().shape())
        if (std::vector<std::string> s = d.symbols(); s.size() == 1 && d == DimExpr::symbol(s[0]))
          bound.insert(s[0]);
  auto allBound = [&](const std::vector<OutputView::SymbolicAttr> &symbolic) {
    for (const OutputView::SymbolicAttr &a : symbolic)
      for (const DimExpr &d : a.dims)
        for (const std::string &s : d.symbols())
          if (!bound.count(s)) return false;
    return true;
  };
  std::vector<OutputView> views;
  for (size_t j = 0; j < outs.size(); ++j) {
    if (!outs[j]->type().isTensor()) continue;
    const Value *root = viewRoot(outs[j]);
    auto base = outputOf.find(root);
    if (root == outs[j] || base == outputOf.end()) continue;
    std::vector<OutputView::SymbolicAttr> symbolic;
    if (PyRef steps = viewSteps(outs[j], root, symbolic); steps && allBound(symbolic))
      views.push_back({j, base->second, steps, std::move(symbolic)});
  }
  return views;
}

/// The plain shape symbols the graph inputs bind (symbolic ints ride on carriers' shapes).
SymbolBindings inputSymbols(const std::vector<Type> &types, const std::vector<PyRef> &inputs) {
  SymbolBindings b;
  for (size_t i = 0; i < types.size() && i < inputs.size(); ++i) {
    if (!types[i].isTensor() || isStaticShape(types[i].shape())) continue;
    dlpack::DLTensor t;
    if (!inputs[i] || !tensorView(inputs[i].get(), &t)) {
      PyErr_Clear();
      continue;
    }
    bindShapeSymbols(types[i].shape(), std::vector<int64_t>(t.shape, t.shape + t.ndim), b);
  }
  return b;
}

/// `steps` with the symbolic sizes evaluated (a fresh list: the entry's stays as it is).
PyRef resolvedSteps(const OutputView &v, const SymbolBindings &b) {
  const Py_ssize_t n = PyList_GET_SIZE(v.steps.get());
  PyRef steps = checked(PyList_New(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject *step = PyList_GET_ITEM(v.steps.get(), i);
    PyRef attrs = checked(PyDict_Copy(PyTuple_GET_ITEM(step, 1)));
    for (const OutputView::SymbolicAttr &s : v.symbolic) {
      if (s.step != size_t(i)) continue;
      PyRef value = checked(PyList_New(0));
      for (const DimExpr &d : s.dims) {
        std::optional<int64_t> size = d.evaluate(b);
        if (!size)
          throw std::runtime_error("the size " + d.str() + " of an output view is not bound");
        PyRef item = checked(PyLong_FromLongLong(*size));
        if (!s.list)
          value = item;
        else if (PyList_Append(value.get(), item.get()) != 0)
          throw PyErrorSet();
      }
      if (PyDict_SetItemString(attrs.get(), s.key.c_str(), value.get()) != 0) throw PyErrorSet();
    }
    PyList_SET_ITEM(
        steps.get(), i,
        checked(Py_BuildValue("(OO)", PyTuple_GET_ITEM(step, 0), attrs.get())).release());
  }
  return steps;
}

std::vector<RtValue> rtValues(PyObject *seq, const std::vector<Type> &types) {
  PyRef fast = checked(PySequence_Fast(seq, "expected a sequence"));
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(fast.get());
  if (static_cast<size_t>(n) != types.size())
    throw std::runtime_error("the compiled training graph takes " + std::to_string(types.size()) +
                             " values, got " + std::to_string(n));
  std::vector<RtValue> in;
  in.reserve(types.size());
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject *o = PySequence_Fast_GET_ITEM(fast.get(), i);
    in.push_back(isPlainTensor(o) ? RtValue(importTensor(o)) : toRtValue(o, &types[size_t(i)]));
  }
  return in;
}

PyRef pyList(const std::vector<RtValue> &vs, size_t from, size_t to) {
  PyRef l = checked(PyList_New(static_cast<Py_ssize_t>(to - from)));
  for (size_t i = from; i < to; ++i)
    PyList_SET_ITEM(l.get(), static_cast<Py_ssize_t>(i - from), fromRtValue(vs[i]).release());
  return l;
}

std::vector<Type> inputTypes(const Graph &g) {
  std::vector<Type> t;
  for (size_t i = 0; i < g.numInputs(); ++i)
    t.push_back(g.input(i)->type());
  return t;
}

/// The saved values (forward outputs from numOutputs on) that the compiled forward returns as
/// `permute` views: the layout pass keeps convolution activations channels-last and returns
/// channels-first views of the buffers. The backward graph, compiled on its own, would take
/// them as channels-first inputs whose strides only the run shows (its kernels then guess unit
/// strides wrongly and run their general strided versions); instead its input k becomes the
/// view's source, permuted in the graph, so its passes and kernels see the memory order.
/// Returns the permute dims per saved value (empty: left as it was).
std::vector<std::vector<int64_t>> takeSavedBuffers(Graph &bwd, const Graph &fwd, size_t numOutputs,
                                                   size_t numSaved) {
  std::vector<std::vector<int64_t>> perms(numSaved);
  const std::vector<Value *> outs = fwd.outputs();
  for (size_t k = 0; k < numSaved && numOutputs + k < outs.size() && k < bwd.numInputs(); ++k) {
    const Op *view = outs[numOutputs + k]->definingOp();
    if (!view || view->name() != "permute" || !view->operand(0)->type().isTensor()) continue;
    Value *in = bwd.input(k);
    const Type oldType = in->type();
    const std::vector<Use> uses = in->uses();
    in->setType(view->operand(0)->type());
    Builder b(bwd.body(), bwd.body()->empty() ? nullptr : bwd.body()->front());
    Value *permuted = b.op("permute", {in}, {{"dims", view->attr("dims")}});
    if (!(permuted->type() == oldType)) { // not expected: keep the input as it was
      bwd.body()->erase(permuted->definingOp());
      in->setType(oldType);
      continue;
    }
    for (const Use &u : uses)
      u.user->setOperand(u.index, permuted);
    perms[k] = view->attr("dims").asInts();
  }
  return perms;
}

/// The source of a `permute(t, dims)` view: t's sizes and strides put back in source order.
Tensor permuteSource(const Tensor &view, const std::vector<int64_t> &dims) {
  std::vector<int64_t> sizes(dims.size()), strides(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    const auto d = static_cast<size_t>(dims[i] < 0 ? dims[i] + view.rank() : dims[i]);
    sizes.at(d) = view.sizes().at(i);
    strides.at(d) = view.strides().at(i);
  }
  return view.view(sizes, strides, view.offset());
}

/// A C++ failure becomes a Python RuntimeError (the driver then runs the frame in Python).
template <class F> PyObject *pyCall(F &&f) {
  try {
    return f();
  } catch (const PyErrorSet &) {
    return nullptr;
  } catch (const std::exception &ex) {
    PyErr_SetString(PyExc_RuntimeError, ex.what());
    return nullptr;
  }
}

/// Whether the instruction at `offset` is inside a loop of `code`: a backward jump after it
/// lands at or before it.
[[maybe_unused]] bool breaksInsideLoop(PyCodeObject *code, int offset) {
  try {
    const bc::DecodedCode d = bc::decode(code);
    for (const bc::Instr &in : d.instrs)
      if (bc::isBackwardJump(in.opcode) && in.offset > offset && in.target <= offset) return true;
    return false;
  } catch (const std::exception &) {
    PyErr_Clear();
    return true; // unreadable: as if it were (the frame runs in Python)
  }
}

} // namespace

std::string trainingRefusal(const Capture &cap, PyCodeObject *code, bool xjitBackend, bool check) {
#ifndef XJIT_FRONTEND_HAVE_PASSES
  (void)cap, (void)code, (void)xjitBackend, (void)check;
  return "this build has no passes (autodiff)";
#else
  if (!xjitBackend) return "training steps compile with backend='xjit' only";
  if (check) return "--check runs training frames in Python";
  // A break after the forward (at `loss.backward()`) is what a step function does: the graph
  // before it trains compiled, the break code runs backward, the rest resumes. Any other break
  // (`.item()`, a print) splits a differentiable computation: the resumed code keeps building
  // eager's autograd graph on the Function's outputs, and its in-place writes meet what the
  // Function saved (fuzz seed 1013: a copy_ into a view after the break raised at backward
  // where eager does not); such frames run in Python, as before session 16.
  if (cap.breakPoint && !cap.breakPoint->reason.starts_with(BreakPoint::kAtBackward))
    return "the frame has a graph break other than at tensor.backward()";
  // Inside a loop every iteration would resume in a new function (nested, up to 16, each
  // compiling the forward again): such a frame runs in Python and the model and optimizer step
  // it calls compile as frames of their own (CompiledEntry::calleesCompile).
  if (cap.breakPoint && breaksInsideLoop(code, cap.breakPoint->offset))
    return "the frame has a graph break inside a loop";
  // Side effects are replayed after the forward, as in inference: a tensor they store (a
  // hidden state appended to a list) is an output of the autograd Function like the result,
  // so it carries its gradient. In-place writes to tensors the caller sees (batch_norm's
  // running statistics) are checked by compileTraining to carry no gradient.
  if (cap.cutsGradient)
    return "the frame stops a gradient (a view or an in-place write of a tensor that requires "
           "grad in a torch.no_grad() region)";
  if (cap.gradModeAtExit >= 0) return "the frame changes grad mode";
  return "";
#endif
}

std::string gradLeafRefusal(const Graph &g, const std::vector<Value *> &leaves,
                            const std::vector<bool> &requiresGrad) {
  if (leaves.empty()) return "";
  // Forward reachability over the ops in order; a leaf is compared by address only (its op may
  // be gone: then it reaches nothing, or an op at a reused address refuses a bit more).
  const std::set<const Value *> leafSet(leaves.begin(), leaves.end());
  std::set<const Value *> fromLeaf, fromInput;
  for (size_t i = 0; i < g.numInputs() && i < requiresGrad.size(); ++i)
    if (requiresGrad[i]) fromInput.insert(g.input(i));
  g.walk([&](const Op *op) {
    bool leaf = false, input = false;
    for (size_t i = 0; i < op->numOperands(); ++i) {
      leaf = leaf || fromLeaf.count(op->operand(i));
      input = input || fromInput.count(op->operand(i));
    }
    for (size_t r = 0; r < op->numResults(); ++r) {
      const Value *v = op->result(r);
      if (leaf || leafSet.count(v)) fromLeaf.insert(v);
      if (input) fromInput.insert(v);
    }
  });
  for (const Value *out : g.outputs())
    if (fromLeaf.count(out) && !fromInput.count(out))
      return "a tensor the frame made require grad (t.requires_grad = True) reaches an output "
             "that no input's gradient reaches";
  return "";
}

size_t addHiddenViewBases(Graph &g) {
  const std::vector<Value *> outs = g.outputs();
  const std::set<const Value *> returned(outs.begin(), outs.end());
  std::map<Value *, size_t> viewers; // root -> outputs viewing it
  std::vector<Value *> hidden;
  for (Value *out : outs) {
    if (!out->type().isTensor()) continue;
    auto *root = const_cast<Value *>(viewRoot(out));
    if (root == out || root->isBlockArgument() || returned.count(root)) continue;
    if (++viewers[root] == 2) hidden.push_back(root);
  }
  if (hidden.empty()) return 0;
  Op *ret = g.body()->terminator();
  std::vector<Value *> operands = ret->operands();
  operands.insert(operands.end(), hidden.begin(), hidden.end());
  ret->setOperands(std::move(operands));
  return hidden.size();
}

std::shared_ptr<TrainingStep> newTrainingStep(const CompiledEntry &e, SourceValues &values) {
  auto step = std::make_shared<TrainingStep>();
  step->requiresGrad.assign(e.inputSlots.size(), false);
  for (size_t i = 0; i < e.inputSlots.size(); ++i) {
    if (!e.inputTypes[i].isTensor() || e.intInputs[i]) continue;
    PyObject *o = values.get(e.inputSlots[i]);
    if (o && isPlainTensor(o)) {
      const int rg = requiresGrad(o);
      if (rg < 0) PyErr_Clear();
      step->requiresGrad[i] = rg == 1;
    }
  }
  return step;
}

std::string compileTraining(CompiledEntry &e, const SourceLoc &loc, int id) {
#ifndef XJIT_FRONTEND_HAVE_PASSES
  (void)e, (void)loc, (void)id;
  return "this build has no passes (autodiff)";
#else
  // Outputs that are views of other outputs are rebuilt after the step (OutputView): they take
  // no gradient of their own and need no layout of their own.
  e.training->outputViews = outputViewsOf(*e.graph);
  std::vector<bool> rebuilt(e.graph->outputs().size(), false);
  for (const OutputView &v : e.training->outputViews)
    rebuilt[v.output] = true;
  std::erase_if(e.laidOutOutputs, [&](size_t i) { return i < rebuilt.size() && rebuilt[i]; });
  passes::AutodiffGraphs ad;
  try {
    ad = passes::differentiate(*e.graph, e.training->requiresGrad, rebuilt);
  } catch (const passes::AutodiffUnsupported &ex) {
    return std::string("autodiff: ") + ex.what();
  }
  if (std::string why = outputAliasing(*ad.forward, ad.numOutputs, rebuilt); !why.empty())
    return why;
  copySavedViewsOfWrittenInputs(*ad.forward, ad.numOutputs, e);
  // A write replayed with copy_ would not be recorded by autograd: only values without a
  // gradient (running statistics, counters) may be written in place.
  const std::set<size_t> differentiable(ad.gradOutputs.begin(), ad.gradOutputs.end());
  for (const EffectPlan &fx : e.effects)
    if (fx.kind == SideEffect::TensorCopy &&
        (fx.value.kind != OutputNode::GraphOutput ||
         differentiable.count(static_cast<size_t>(fx.value.index))))
      return "it writes a value that needs a gradient in place (" + fx.text + ")";
  auto graphs = std::make_shared<TrainingGraphs>();
  const std::tuple<CompiledEntry *, std::unique_ptr<Graph> *, const char *> parts[] = {
      {&graphs->forward, &ad.forward, "forward"}, {&graphs->backward, &ad.backward, "backward"}};
  for (auto [entry, graph, part] : parts) {
    if (graph == &ad.backward) {
      // The forward as it runs: after the runtime's pipeline (layout), when it compiled.
      const Graph *fwd = graphs->forward.graph.get();
#ifdef XJIT_FRONTEND_HAVE_RUNTIME
      if (graphs->forward.compiled) fwd = &graphs->forward.compiled->graph();
#endif
      graphs->savedPermutes = takeSavedBuffers(**graph, *fwd, ad.numOutputs, ad.numSaved);
    }
    passes::PassManager pm;
    // The forward's batch norms decomposed before CSE: their statistics are then the same ops
    // as the ones autodiff saves for the backward (RuleArgs::computeInForward), computed once.
    if (graph == &ad.forward) pm.addPipeline("decompose-batch-norm");
    pm.addPipeline("inference");
    pm.run(**graph);
    dumpGraph(**graph, id, loc, part);
    entry->inputTypes = inputTypes(**graph);
    entry->graph = std::move(*graph);
    if (!compileNative(*entry, loc, id, part)) throw PyErrorSet();
  }
  const size_t forwardOps = graphs->forward.graph->numOps(),
               backwardOps = graphs->backward.graph->numOps();
  auto *owner = new std::shared_ptr<TrainingGraphs>(std::move(graphs));
  PyObject *capsule = PyCapsule_New(owner, kCapsuleName, [](PyObject *c) {
    delete static_cast<std::shared_ptr<TrainingGraphs> *>(PyCapsule_GetPointer(c, kCapsuleName));
  });
  if (!capsule) {
    delete owner;
    throw PyErrorSet();
  }
  e.training->capsule = PyRef::steal(capsule);
  PyRef info = checked(PyTuple_New(6));
  PyTuple_SET_ITEM(info.get(), 0, indexTuple(ad.savedInputs).release());
  PyTuple_SET_ITEM(info.get(), 1, indexTuple(ad.gradOutputs).release());
  PyTuple_SET_ITEM(info.get(), 2, indexTuple(ad.wrt).release());
  PyTuple_SET_ITEM(info.get(), 3, checked(PyLong_FromSize_t(ad.numOutputs)).release());
  PyTuple_SET_ITEM(info.get(), 4, indexTuple(ad.shapeInputs).release());
  // Rebuilt outputs (views of another output) take their gradient through that one.
  const std::vector<std::vector<size_t>> &before = e.training->reachBeforePasses;
  PyRef reach = checked(PyTuple_New(static_cast<Py_ssize_t>(ad.numOutputs)));
  for (size_t i = 0; i < ad.numOutputs; ++i)
    PyTuple_SET_ITEM(
        reach.get(), static_cast<Py_ssize_t>(i),
        indexTuple(i < before.size() && !rebuilt[i] ? before[i] : std::vector<size_t>{}).release());
  PyTuple_SET_ITEM(info.get(), 5, reach.release());
  e.training->info = std::move(info);
  e.training->summary = "training step: forward " + std::to_string(forwardOps) + " ops (" +
                        std::to_string(ad.numSaved) + " values saved for backward), backward " +
                        std::to_string(backwardOps) + " ops, gradients of " +
                        std::to_string(ad.wrt.size()) + " inputs";
  return "";
#endif
}

bool savedTensorHooksActive() {
  static PyObject *top = [] {
    PyRef mod = checked(PyImport_ImportModule("torch._C._autograd"));
    return checked(PyObject_GetAttrString(mod.get(), "_top_saved_tensors_default_hooks")).release();
  }();
  PyRef hooks = checked(PyObject_CallOneArg(top, Py_False));
  return hooks.get() != Py_None;
}

std::vector<PyRef> runTraining(const CompiledEntry &e, const std::vector<PyRef> &inputs) {
  static PyObject *run = [] {
    PyRef mod = checked(PyImport_ImportModule("xjit._training"));
    return checked(PyObject_GetAttrString(mod.get(), "run")).release();
  }();
  PyRef args = checked(PyList_New(static_cast<Py_ssize_t>(inputs.size())));
  for (size_t i = 0; i < inputs.size(); ++i)
    PyList_SET_ITEM(args.get(), static_cast<Py_ssize_t>(i),
                    PyRef::borrow(inputs[i].get()).release());
  PyRef outs = checked(PyObject_CallFunctionObjArgs(run, e.training->capsule.get(),
                                                    e.training->info.get(), args.get(), nullptr));
  PyRef fast = checked(PySequence_Fast(outs.get(), "xjit._training.run returns a sequence"));
  std::vector<PyRef> done;
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fast.get()); ++i)
    done.push_back(PyRef::borrow(PySequence_Fast_GET_ITEM(fast.get(), i)));
  return done;
}

void rebuildOutputViews(const TrainingStep &step, const std::vector<Type> &inputTypes,
                        const std::vector<PyRef> &inputs, std::vector<PyRef> &done) {
  if (step.outputViews.empty()) return;
  static PyObject *outputView = [] {
    PyRef mod = checked(PyImport_ImportModule("xjit._training"));
    return checked(PyObject_GetAttrString(mod.get(), "output_view")).release();
  }();
  std::optional<SymbolBindings> symbols;
  for (const OutputView &v : step.outputViews) {
    if (v.output >= done.size() || v.base >= done.size() || !done[v.base]) continue;
    PyRef steps = v.steps;
    if (!v.symbolic.empty()) {
      if (!symbols) symbols = inputSymbols(inputTypes, inputs);
      steps = resolvedSteps(v, *symbols);
    }
    done[v.output] =
        checked(PyObject_CallFunctionObjArgs(outputView, done[v.base].get(), steps.get(), nullptr));
  }
}

PyObject *trainingForward(PyObject *capsule, PyObject *inputs) {
  return pyCall([&]() -> PyObject * {
    const CompiledEntry &fwd = graphsOf(capsule).forward;
    std::vector<RtValue> outs = runGraph(fwd, rtValues(inputs, fwd.inputTypes));
    return pyList(outs, 0, outs.size()).release();
  });
}

PyObject *trainingBackward(PyObject *capsule, PyObject *values) {
  return pyCall([&]() -> PyObject * {
    const TrainingGraphs &graphs = graphsOf(capsule);
    const CompiledEntry &bwd = graphs.backward;
    std::vector<RtValue> in = rtValues(values, bwd.inputTypes);
    // The graph holds them now and drops each after its last use (the caller's list is emptied,
    // as AOTAutograd's boxed calls take their arguments).
    if (PyList_Check(values) && PyList_SetSlice(values, 0, PyList_GET_SIZE(values), nullptr) != 0)
      throw PyErrorSet();
    for (size_t k = 0; k < graphs.savedPermutes.size() && k < in.size(); ++k)
      if (!graphs.savedPermutes[k].empty() && in[k].isTensor())
        in[k] = RtValue(permuteSource(in[k].tensor(), graphs.savedPermutes[k]));
    std::vector<RtValue> grads = runGraph(bwd, std::move(in));
    return pyList(grads, 0, grads.size()).release();
  });
}

} // namespace xjit::frontend
