// Size attributes that are symbolic expressions over shape symbols, like torch.compile's SymInts:
// slice start/end, expand/reshape/view targets, arange bounds, the shapes of factories, narrow
// start/length, repeat counts, unflatten and split_with_sizes sizes (`{end = s0+1}`,
// `{shape = [1, s0]}`). They are evaluated at run time from the symbols the
// graph inputs' shapes bind (docs/ir.md, "Symbolic sizes").
//
// Storage: an attribute slot that accepts symbolic sizes (symbolicSizeSlot) holds either its
// ordinary static kind (Int, Float, Ints) or a string with the canonical text of the dims
// ("s0+1", "[1,s0]"). A string is never a legal value of those slots otherwise, so the two cannot
// be confused; a static value is always stored as the static kind (makeSizeAttr), so equal sizes
// have one representation. This keeps the Attr variant (attr.h) unchanged.
#pragma once

#include "xjit/ir/attr.h"
#include "xjit/ir/dim.h"
#include "xjit/ir/ir.h"
#include "xjit/ir/value.h"

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace xjit {

/// How a slot's symbolic value is shaped: one dim (arange end) or a list (a shape).
enum class SizeSlotForm : uint8_t { None, Dim, Dims };

/// Whether attribute `attr` of op `op` may hold a symbolic size, and in which form.
SizeSlotForm symbolicSizeSlot(std::string_view op, std::string_view attr);

/// A size attribute: Int (or Ints) when every dim is static, else the symbolic string form.
Attr makeSizeAttr(const DimExpr &d);
Attr makeSizeAttr(const Shape &dims);

/// The dims of a symbolic value in a slot of the given form; nullopt when `a` is not symbolic
/// (not a string) or its text does not parse.
std::optional<Shape> symbolicDims(const Attr &a, SizeSlotForm form);
/// One dim: an Int attribute or a symbolic single-dim attribute; nullopt otherwise (a float).
std::optional<DimExpr> sizeAttrDim(const Op &op, std::string_view name);
/// A list of dims: an Ints attribute or a symbolic list attribute; nullopt otherwise.
std::optional<Shape> sizeAttrDims(const Op &op, std::string_view name);

/// True if attribute `name` of `op` is a symbolic size.
bool isSymbolicSize(const Op &op, std::string_view name);
/// True if any attribute of `op` is a symbolic size. Passes that read sizes as static integers
/// leave such ops alone.
bool hasSymbolicSizes(const Op &op);
/// Every shape symbol the op's symbolic sizes name.
std::vector<std::string> symbolicSizeSymbols(const Op &op);

/// An op with its symbolic sizes evaluated, for running its reference kernel: a detached copy
/// whose operands are private placeholders of the same types (the original's use lists are not
/// touched, so concurrent calls may resolve the same op).
class ResolvedOp {
public:
  ResolvedOp(const Op &op, const SymbolBindings &bindings);
  ~ResolvedOp();
  ResolvedOp(const ResolvedOp &) = delete;
  ResolvedOp &operator=(const ResolvedOp &) = delete;
  const Op &op() const { return *op_; }
  /// Checks the kernel's results against the original op's result types evaluated under the
  /// bindings (a symbolic size outside the range its type assumed, e.g. a slice end past the
  /// dim); throws KernelError naming the size.
  void checkResults(const std::vector<RtValue> &results) const;

private:
  const Op &original_;
  const SymbolBindings &bindings_;
  Block placeholders_;
  std::unique_ptr<Op> op_;
};

/// Binds the plain symbols (dims that are exactly one symbol) of `t` against `sizes`; returns
/// false if one disagrees with an earlier binding.
bool bindShapeSymbols(const Shape &t, const std::vector<int64_t> &sizes, SymbolBindings &b);

} // namespace xjit
