// What a derivative rule of the autodiff pass sees, shared by the rule tables: autodiff.cpp
// (elementwise, movement, reductions, linear algebra) and autodiff_rules_nn.cpp (convolution,
// pooling, batch_norm).
#pragma once

#include "semantic_util.h"

#include "xjit/ir/builder.h"
#include "xjit/ir/ir.h"

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace xjit::passes::autodiff_rules {

/// The op, the gradient of its result 0, and which operands need a gradient. A rule returns one
/// gradient per operand (nullptr: none) and appends the ops computing them with `b`.
struct RuleArgs {
  Builder &b;
  const Op &op;
  Value *g;                // the gradient of result 0
  std::vector<Value *> gs; // of each result (nullptr: none reaches it), for multi-result ops
  std::vector<bool> need;
  /// Values the rule derives from forward values alone that the partition computes in the
  /// forward and saves rather than recomputing them in the backward (batch norm's per-channel
  /// statistics: a few floats saved instead of two passes over the activation).
  std::vector<Value *> *computeInForward = nullptr;
  Value *x(size_t i) const { return op.operand(i); }
  Value *out() const { return op.result(0); }
  Value *f(double v) const { return b.constantFloat(v); }
  Value *un(std::string_view name, Value *a, AttrMap attrs = {}) const {
    return b.op(name, {a}, std::move(attrs));
  }
  Value *bin(std::string_view name, Value *a, Value *c) const { return b.op(name, {a, c}); }
  Value *mul(Value *a, Value *c) const { return bin("mul", a, c); }
};
using Rule = std::function<std::vector<Value *>(RuleArgs &)>;

/// Throws AutodiffUnsupported for `op` (the frame then runs under PyTorch's autograd).
[[noreturn]] void unsupported(const Op &op, const std::string &why);

using passes::staticSizes; // semantic_util.h

/// v's static sizes; unsupported(op) when one is symbolic.
std::vector<int64_t> staticShape(const Op &op, const Value *v);

/// Adds the rules of autodiff_rules_nn.cpp (conv, pooling, batch_norm) to the table.
void addNnRules(std::map<std::string, Rule> &table);

/// Ops with several results that autodiff_rules_nn.cpp differentiates (gradient of result 0).
bool nnMultiResultRule(std::string_view name);

/// False for results that never carry a gradient although they are computed from values that
/// do: batch_norm_with_update's new running statistics, which eager updates outside autograd,
/// and a custom_vjp's results that its Function marks non-differentiable.
bool resultCarriesGradient(const Op &op, size_t result);

} // namespace xjit::passes::autodiff_rules
