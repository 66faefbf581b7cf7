// Reverse-mode differentiation of a captured graph into a forward and a backward graph, as
// AOTAutograd does for torch.compile: the frontend runs the forward inside a
// torch.autograd.Function whose backward runs the backward graph (docs/passes.md "autodiff").
#pragma once

#include "xjit/ir/ir.h"

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace xjit::passes {

/// The graph cannot be differentiated (an op without a derivative rule, control flow, an
/// in-place op...): the caller runs the frame under PyTorch's autograd instead. what() says why.
struct AutodiffUnsupported : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// The two graphs of a differentiated graph g.
///   forward:  g's inputs -> (g's outputs..., saved...)
///   backward: (saved..., the inputs of g listed in savedInputs..., one grad per entry of
///              gradOutputs...) -> (one grad per entry of wrt...)
/// Saved values are intermediates of the forward that the backward reads; inputs of g that the
/// backward reads are not returned by the forward (the caller keeps them).
struct AutodiffGraphs {
  std::unique_ptr<Graph> forward;
  std::unique_ptr<Graph> backward;
  size_t numOutputs = 0;           // g's outputs (forward results before the saved ones)
  size_t numSaved = 0;             // forward results after g's outputs
  std::vector<size_t> savedInputs; // inputs of g the backward reads, in its input order
  /// Inputs of g whose shapes only the backward needs (symbols of a symbolic size no other
  /// backward input binds): it takes a carrier of each, a tensor of that shape (stride 0 will
  /// do), after the saved inputs, so the Function need not save the input itself.
  std::vector<size_t> shapeInputs;
  std::vector<size_t> gradOutputs; // outputs of g that have a gradient (float, depend on wrt)
  std::vector<size_t> wrt;         // inputs of g whose gradients backward returns
};

/// Differentiates g with respect to the inputs marked in requiresGrad (one flag per input;
/// only float tensor inputs count). Outputs flagged in outputsWithoutGradient take no gradient
/// (the caller rebuilds them as views of another output, through which autograd carries
/// theirs). Throws AutodiffUnsupported when it cannot.
AutodiffGraphs differentiate(const Graph &g, const std::vector<bool> &requiresGrad,
                             const std::vector<bool> &outputsWithoutGradient = {});

/// For each output of g, the inputs (indices of g's inputs marked in requiresGrad) that
/// autograd connects it to: those reached through values that carry a gradient. Read on the
/// graph as captured, before passes: a pass that folds a connected value away (`t.zero_()` then
/// `+ b` as `b`) leaves the gradient zero, and eager still gives those inputs zeros, not None.
std::vector<std::vector<size_t>> gradientReach(const Graph &g,
                                               const std::vector<bool> &requiresGrad);

/// The joint graph, for tests and `xjit-opt --passes=autodiff`: inputs (g's inputs..., one grad
/// per gradOutputs entry...), results (g's outputs..., one grad per wrt input...).
std::unique_ptr<Graph> jointGraph(const Graph &g, const std::vector<bool> &requiresGrad,
                                  std::vector<size_t> *gradOutputs = nullptr,
                                  std::vector<size_t> *wrt = nullptr);

/// The ops the derivative table covers, sorted (docs/passes.md lists them).
std::vector<std::string> differentiableOps();

} // namespace xjit::passes
