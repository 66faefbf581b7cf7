// Training steps: a capture whose inputs require grad, with grad mode on, runs as a
// torch.autograd.Function (python/xjit/_training.py) whose forward and backward are the two
// graphs the autodiff pass makes, each compiled like an inference graph.
#pragma once

#include "cache.h"
#include "sources.h"

#include <memory>
#include <string>
#include <vector>

namespace xjit::frontend {

/// A graph output that is a view of another (DINOv2's `pooler_output = last_hidden_state[:, 0]`):
/// not an output of the autograd Function but rebuilt after it as that view of the other output
/// (`steps`, for xjit._training.output_view), so that, as in eager, autograd carries its
/// gradient through its base and the two share memory, version counter and `_base`.
struct OutputView {
  size_t output = 0, base = 0;
  PyRef steps;
  /// Attributes of `steps` that are symbolic sizes (None there): evaluated per call from the
  /// shape symbols the graph inputs bind.
  struct SymbolicAttr {
    size_t step = 0;
    std::string key;
    Shape dims;
    bool list = false; // a list of sizes (a shape), else one
  };
  std::vector<SymbolicAttr> symbolic;
};

/// What a training entry keeps: the inputs that require grad (the guards pin them), then,
/// once compiled, the two graphs (owned by a capsule that autograd's saved context also holds).
struct TrainingStep {
  std::vector<bool> requiresGrad;
  std::vector<OutputView> outputViews;
  size_t hiddenOutputs = 0; // the last graph outputs, added by addHiddenViewBases
  /// passes::gradientReach of the graph as captured: the inputs each output's gradient reaches
  /// in eager, which get zeros where passes folded the connection away (not None).
  std::vector<std::vector<size_t>> reachBeforePasses;
  PyRef capsule;       // the compiled graphs, passed to xjit._training.run
  PyRef info;          // (saved_inputs, grad_outputs, wrt, ...): Info in xjit/_training.py
  std::string summary; // for explain: "training step: forward N ops, backward M ops, ..."
};

/// Why the capture cannot run as a compiled training step ("" when it can): a graph break inside
/// a loop of `code` (the frame's), gradient cuts (detach, no_grad regions), a grad-mode change,
/// a backend other than "xjit", --check.
std::string trainingRefusal(const Capture &cap, PyCodeObject *code, bool xjitBackend, bool check);

/// Why the graph's outputs would not require grad as in eager ("" when they would): an output
/// that one of `leaves` (Capture::gradLeaves) reaches and no input whose `requiresGrad` is set
/// reaches (`requiresGrad` empty: none is).
std::string gradLeafRefusal(const Graph &g, const std::vector<Value *> &leaves,
                            const std::vector<bool> &requiresGrad);

/// Adds, as extra graph outputs after the program's, the computed tensors that two or more
/// outputs view but the program does not return (`h = ...; return h[:, 0], h[:, 1]`): the
/// Function returns them, and the views are rebuilt on them (OutputView) as eager's views of a
/// tensor nobody else sees. Returns how many it added.
size_t addHiddenViewBases(Graph &g);

/// A step for the entry's inputs as they are now (which require grad).
std::shared_ptr<TrainingStep> newTrainingStep(const CompiledEntry &e, SourceValues &values);

/// Differentiates e.graph (after the cleanup pipeline) and compiles the forward and backward
/// graphs natively. Returns "" or why the graph cannot train (no derivative rule, an output
/// aliasing an input...); then the frame runs in Python. `id`/`loc` name --dump files.
std::string compileTraining(CompiledEntry &e, const SourceLoc &loc, int id);

/// Whether saved-tensor hooks are set (torch.autograd.graph.saved_tensors_hooks: checkpoint's
/// recompute bookkeeping, save_on_cpu): a training entry then runs its frame in Python, since
/// the hooks would see the compiled step's saved values, not eager's (a checkpointed function
/// recomputed in eager would not match them).
bool savedTensorHooksActive();

/// Runs a compiled training entry on the graph inputs: the outputs, recorded by autograd.
std::vector<PyRef> runTraining(const CompiledEntry &e, const std::vector<PyRef> &inputs);

/// Replaces each output of `done` (the graph outputs, in eager's layouts) that is a view of
/// another (TrainingStep::outputViews) by that view of the other; `inputTypes` and `inputs` (the
/// graph's) bind the symbols of symbolic view sizes. Throws PyErrorSet.
void rebuildOutputViews(const TrainingStep &step, const std::vector<Type> &inputTypes,
                        const std::vector<PyRef> &inputs, std::vector<PyRef> &done);

/// xjit._frontend.training_forward(step, inputs) -> outputs + saved (one list) and
/// training_backward(step, values) -> grads: run one compiled graph on torch tensors.
PyObject *trainingForward(PyObject *capsule, PyObject *inputs);
PyObject *trainingBackward(PyObject *capsule, PyObject *values);

} // namespace xjit::frontend
