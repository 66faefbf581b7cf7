// Builds ops with inferred result types at an insertion point, for the frontend, passes and
// tests: b.create("add", {x, y}, {{"alpha", 1.0}}).
#pragma once

#include "xjit/ir/ir.h"
#include "xjit/ir/op_registry.h"

#include <string_view>
#include <vector>

namespace xjit {

class Builder {
public:
  /// Inserts at the end of `block`, or before `before` when given.
  explicit Builder(Block *block, Op *before = nullptr) : block_(block), before_(before) {}
  void setInsertionPoint(Block *block, Op *before = nullptr) {
    block_ = block;
    before_ = before;
  }
  Block *block() const { return block_; }
  /// The op new ops go before (nullptr: the block's end).
  Op *insertionBefore() const { return before_; }
  void setLoc(SourceLoc loc) { loc_ = std::move(loc); }
  const SourceLoc &loc() const { return loc_; }

  /// Creates an op whose result types come from its InferFn (throws TypeInferenceError).
  Op *create(std::string_view name, std::vector<Value *> operands, AttrMap attrs = {});
  /// Creates an op with explicit result types (ops without inference: if, loop, constant...).
  Op *createWithTypes(std::string_view name, std::vector<Value *> operands,
                      std::vector<Type> resultTypes, AttrMap attrs = {});
  /// Shorthand: single-result create.
  Value *op(std::string_view name, std::vector<Value *> operands, AttrMap attrs = {}) {
    return create(name, std::move(operands), std::move(attrs))->result(0);
  }
  Value *constantInt(int64_t v);
  Value *constantFloat(double v);
  Value *constantBool(bool v);
  Value *constantTensor(const Tensor &t);

private:
  Block *block_;
  Op *before_;
  SourceLoc loc_;
};

} // namespace xjit
