// What a derivative rule of the autodiff pass sees, shared by the rule tables: autodiff.cpp
// (elementwise, views, reductions, linear algebra), autodiff_rules_movement.cpp (copying
// movement ops and scans: stack, repeat, pad, roll, flip, cumsum...) and autodiff_rules_nn.cpp
// (convolution, pooling, batch_norm).
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

/// v converted to dtype d (v itself when it has it).
Value *castTo(Builder &b, Value *v, DType d);

/// Sums a broadcast gradient back to the shape (and dtype) of the operand it flowed from.
Value *sumTo(RuleArgs &a, Value *g, const Value *operand);
/// The same, to type `t` (a gradient summed before a transpose back to its operand's layout).
Value *sumToType(RuleArgs &a, Value *g, const Type &t);
/// The gradient of a tensor operand i (nullptr when it needs none or is a Python scalar).
Value *gradFor(RuleArgs &a, size_t i, Value *g);
/// The reduced dims of a sum/mean-like op, normalized and sorted (all dims when empty).
std::vector<int64_t> reducedDims(const Op &op, const char *attr, int64_t rank);
/// A reduction's gradient broadcast back over the reduced dims to x's shape.
Value *expandReduced(RuleArgs &a, Value *g, const std::vector<int64_t> &dims, bool keepdim,
                     Value *x);

/// A number attribute (int or float) of op, or dflt when absent.
double floatAttr(const Op &op, const char *name, double dflt);

/// Dim d of a rank-`rank` tensor in [0, rank).
inline int64_t normDim(int64_t d, int64_t rank) { return d < 0 ? d + rank : d; }

/// Adds the rules of autodiff_rules_movement.cpp (stack, repeat, tile, pad, roll, flip, narrow,
/// index_select, index, index_put, scatter, scatter_add, cumsum) to the table.
void addMovementRules(std::map<std::string, Rule> &table);

/// Adds the rules of autodiff_rules_math.cpp (more elementwise math, activations, clamp,
/// maximum/minimum, max/min, logsumexp, var/std, rms_norm, baddbmm...) to the table.
void addMathRules(std::map<std::string, Rule> &table);

/// Adds the rules of autodiff_rules_nn.cpp (conv, pooling, batch_norm) to the table.
void addNnRules(std::map<std::string, Rule> &table);

/// Ops with several results that autodiff_rules_nn.cpp differentiates (gradient of result 0).
bool nnMultiResultRule(std::string_view name);

/// False for results that never carry a gradient although they are computed from values that
/// do: batch_norm_with_update's new running statistics, which eager updates outside autograd,
/// and a custom_vjp's results that its Function marks non-differentiable.
bool resultCarriesGradient(const Op &op, size_t result);

} // namespace xjit::passes::autodiff_rules
