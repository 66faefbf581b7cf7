// backend="eager" and --check's op-by-op comparison: a captured graph walked op by op, each op
// computed by PyTorch (the table in python/xjit/_eager.py), or by the reference interpreter for
// ops PyTorch has no row for (constants among them).
#pragma once

#include "xjit/frontend/capture.h"

#include <map>
#include <string>
#include <vector>

namespace xjit::frontend {

/// python/xjit/_eager.py's entry points (imported once; kept for the life of the process).
struct EagerModule {
  PyObject *runOp = nullptr;
  PyObject *compareOp = nullptr;
  PyObject *runOpMeta = nullptr;
  PyObject *toMeta = nullptr;
  PyObject *emptyMeta = nullptr;
  PyObject *layoutOf = nullptr; // output layouts (output_layout.cpp)
  PyObject *relayout = nullptr;
  PyObject *metaStrided = nullptr; // a meta tensor of given sizes and strides
};
/// Throws PyErrorSet when xjit._eager cannot be imported.
const EagerModule &eagerModule();

/// The PyTorch callables of a graph's external_call ops, by their `callee` attribute.
using ExternalCallables = std::map<int64_t, PyRef>;

/// Runs `g` op by op with PyTorch on `inputs` (torch tensors and Python values, as the graph's
/// sources give them); returns the graph outputs as Python objects. In-place ops write the
/// input tensors themselves. Throws PyErrorSet (a Python exception is set) or xjit::Error.
std::vector<PyRef> runEager(const Graph &g, const std::vector<PyRef> &inputs,
                            const ExternalCallables &externals);

/// The layouts eager would give the graph's outputs: `g` walked as runEager does, on meta tensors
/// made from `inputs` (their sizes and strides; PyTorch's meta kernels follow eager's stride
/// rules). Returns each output's meta tensor (or Python value); `unknown[i]` is set where the
/// walk could not follow an op that output depends on (an op without a meta kernel whose
/// operands are not all contiguous, a view op, a branch on a tensor's value). An op that fails
/// on meta tensors with contiguous operands is taken to make a contiguous result (TensorIterator
/// and library kernels do). External calls (PyTorch fallbacks, which the analyzer already ran
/// on meta tensors at capture) run on the meta tensors too; one that fails makes its results
/// unknown (it may return a view). `eagerRaises` is set (to the op and PyTorch's message) where
/// eager itself would raise: a `view` its operand's strides do not allow (the graph's view
/// copies). `laidOut` (optional) gets, for each external_call with `layout_of` >= 0 (or that
/// readsStorage) the walk ran on known operands, that operand's meta tensor: the layout eager
/// gives it. Throws PyErrorSet only for an interrupt.
/// Whether `op` is a PyTorch fallback that addresses its operand's storage directly
/// (`as_strided` and its kin): its values depend on the operand's strides, storage offset and
/// on how the tensor it views lays out its storage, not only on the operand's values.
bool readsStorage(const Op &op);
/// readsStorage by the callee's name (`as_strided`, not `Tensor.as_strided`).
bool readsStorageCallee(std::string_view callee);

std::vector<PyRef> runMeta(const Graph &g, const std::vector<PyRef> &inputs,
                           const ExternalCallables &externals, std::vector<bool> &unknown,
                           std::string &eagerRaises, std::map<const Op *, PyRef> *laidOut = nullptr,
                           const SymbolBindings *symbols = nullptr);

/// --check: walks `g` as runEager does and, for every op, also runs it in the reference
/// interpreter on the same operands. Returns "" when every op agrees, else a description of the
/// first op whose results differ, with its source location, e.g.
/// "first differing op: 'gelu' at model.py:12 (forward): result[0]: max abs difference 0.02".
/// Never throws: a failure is described in the returned text.
std::string firstDifferingOp(const Graph &g, const std::vector<PyRef> &inputs,
                             const ExternalCallables &externals);

} // namespace xjit::frontend
