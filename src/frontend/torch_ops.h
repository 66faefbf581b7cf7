// The torch -> IR op table: rows map PyTorch callables (torch.*, Tensor methods,
// torch.nn.functional.*) to IR ops. A row names its targets, the Python signature (bound like
// Python binds arguments, defaults included) and either an IR op with an operand/attribute mapping
// or a custom lowering for calls whose meaning depends on argument types (x.view(*shape),
// torch.max overloads, creation ops...). nn.Module types have their own small table of lowerings
// that read the module's attributes and call the functional rows.
#pragma once

#include "abstract.h"

#include <map>
#include <string>
#include <vector>

namespace xjit::frontend {

class Analyzer;

/// Arguments bound to a row's signature: every parameter present (defaults filled in).
struct BoundArgs {
  std::map<std::string, VarPtr, std::less<>> values;
  std::vector<VarPtr> varargs; // a `*name` parameter's values
  const VarPtr &at(std::string_view name) const;
  bool isNone(std::string_view name) const; // absent or None
};

using LowerFn = VarPtr (*)(Analyzer &, BoundArgs &, const struct TorchRow &);

struct TorchRow {
  /// Space-separated targets: "torch.add", "Tensor.add", "F.relu" (torch.nn.functional),
  /// "torch.special.expit"...
  const char *targets;
  /// Python signature: "input, other, *, alpha=1"; "*size" collects extra positionals; defaults
  /// are Python literals.
  const char *signature;
  /// IR op for the generic lowering (or the op a custom lowering uses).
  const char *op = "";
  /// Generic lowering: "operand operand | attr attr" where an attribute may be renamed
  /// "pyname->irname". Parameters named in neither are ignored (e.g. `inplace` is handled).
  const char *mapping = "";
  LowerFn custom = nullptr;
  /// Type of a multi-result op's Python result, e.g. "torch.return_types.max".
  const char *resultType = "";
};

/// Whether v is None (or absent).
bool isNoneVar(const VarPtr &v);

/// torch.lstm / gru / rnn_tanh / rnn_relu unrolled into IR ops (torch_rnn.cpp); nullptr where
/// the call stays a PyTorch fallback node.
VarPtr lowerRecurrent(Analyzer &a, BoundArgs &b, const TorchRow &row);

/// F.interpolate's nearest / nearest-exact / linear modes as gathers (torch_resample.cpp);
/// nullptr where the call stays a PyTorch fallback node.
VarPtr lowerInterpolate(Analyzer &a, BoundArgs &b, const TorchRow &row);

/// torch.einsum as permutes, reshapes, sums and matmuls (torch_einsum.cpp); nullptr where the
/// call stays a PyTorch fallback node.
VarPtr lowerEinsum(Analyzer &a, BoundArgs &b, const TorchRow &row);

/// torch._native_multi_head_attention / F.multi_head_attention_forward (what
/// nn.MultiheadAttention calls) as projections + scaled_dot_product_attention
/// (torch_attention.cpp); nullptr where the call stays a PyTorch fallback node.
VarPtr lowerNativeMha(Analyzer &a, BoundArgs &b, const TorchRow &row);
VarPtr lowerMhaForward(Analyzer &a, BoundArgs &b, const TorchRow &row);

/// Lowering entry points (called by the Analyzer).
VarPtr lowerTorchRow(Analyzer &a, const TorchRow &row, const Args &args, bool *matched);
const std::vector<const TorchRow *> *rowsForCallable(PyObject *fn);
const std::vector<const TorchRow *> *rowsForTensorMethod(const std::string &name);

} // namespace xjit::frontend
