// The xjit graph IR.
//
// Semantics
// - A Graph is a function: its body Block takes the graph inputs as block arguments and ends
//   with a `return` op whose operands are the graph outputs.
// - Values are in SSA form: each is defined once, by an op result or a block argument, and
//   every use is dominated by its definition. A value defined in a block is visible in that
//   block after its definition and in all blocks nested below it; never outside the block.
// - Ops run in order. An op's meaning is given by its OpDef in the registry (op_registry.h):
//   operand and attribute contract, result-type inference, traits, and a reference kernel that
//   defines exactly what it computes. Pure ops may be reordered, merged or removed by passes;
//   ops with the SideEffect trait (and in-place ops, which write their first operand) may not
//   be reordered across each other, removed, or duplicated.
// - Control flow is structured, as TorchScript's prim::If / prim::Loop:
//   * if(%cond) has two regions (then, else) of one block each, without arguments; each ends
//     in `yield(...)` with values matching the if's result types.
//   * loop(%max_trip_count: int, %initial_condition: bool, %carried...) has one region whose
//     block takes (%iteration: int, %carried...) and ends in `yield(%continue: bool,
//     %carried_next...)`. The body runs while iteration < max_trip_count and the condition
//     (initial, then the yielded one) is true. The loop's results are the final carried values.
//     No phi nodes: loop-carried values are block arguments.
// - Types are static facts: a tensor type fixes dtype, rank, device and each dim (a constant or
//   a symbolic expression over shape symbols shared across the graph). Tensors at run time may
//   have any strides; ops define their results as fresh tensors unless they have the View trait
//   (result aliases operand 0) or the InPlace trait (result is operand 0, written in place).
// - Every op carries the user's source location, used in every diagnostic.
#pragma once

#include "xjit/ir/attr.h"
#include "xjit/ir/type.h"

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace xjit {

class Op;
class Block;
class Graph;
struct OpDef;

/// Where the user's code that produced an op lives.
struct SourceLoc {
  std::string file;
  int line = 0;
  std::string function;
  bool known() const { return !file.empty(); }
  /// "model.py:12 (forward)" or "<unknown>".
  std::string str() const;
  bool operator==(const SourceLoc &o) const {
    return file == o.file && line == o.line && function == o.function;
  }
};

/// One use of a value: operand `index` of `user`.
struct Use {
  Op *user;
  unsigned index;
};

class Value {
public:
  const Type &type() const { return type_; }
  void setType(Type t) { type_ = std::move(t); }
  /// Name hint from the text or the frontend (printer keeps it when unique).
  const std::string &name() const { return name_; }
  void setName(std::string n) { name_ = std::move(n); }

  /// Defining op (nullptr for block arguments) and result index, or owning block and arg index.
  Op *definingOp() const { return op_; }
  Block *ownerBlock() const { return block_; }
  unsigned index() const { return index_; }
  bool isBlockArgument() const { return op_ == nullptr; }

  /// For a graph input: the dim the frontend saw with unit stride when it compiled the graph
  /// (`{unit_dim = d}` in the text), where that is not the last; -1 when not known. A hint
  /// only, never a fact: kernels lay their fast versions out for it and their stride checks
  /// still decide at run time (a transposed or channels_last input then runs vectorized).
  int unitDimHint() const { return unitDimHint_; }
  void setUnitDimHint(int d) { unitDimHint_ = d; }

  const std::vector<Use> &uses() const { return uses_; }
  bool hasUses() const { return !uses_.empty(); }
  /// Points every use of this value at `other`.
  void replaceAllUsesWith(Value *other);

private:
  friend class Op;
  friend class Block;
  Value(Type t, Op *op, Block *block, unsigned index)
      : type_(std::move(t)), op_(op), block_(block), index_(index) {}
  Type type_;
  std::string name_;
  Op *op_;
  Block *block_;
  unsigned index_;
  int unitDimHint_ = -1;
  std::vector<Use> uses_;
};

class Block {
public:
  Block() = default;
  ~Block();
  Block(const Block &) = delete;
  Block &operator=(const Block &) = delete;

  Op *parentOp() const { return parent_; }

  // Arguments.
  Value *addArgument(Type t, std::string name = "");
  const std::vector<std::unique_ptr<Value>> &arguments() const { return args_; }
  Value *argument(size_t i) const { return args_.at(i).get(); }
  size_t numArguments() const { return args_.size(); }
  /// Removes an argument that has no uses.
  void eraseArgument(size_t i);

  // Ops, as an intrusive doubly linked list.
  Op *front() const { return first_; }
  Op *back() const { return last_; }
  bool empty() const { return first_ == nullptr; }
  size_t size() const;
  /// The terminator (return / yield) or nullptr.
  Op *terminator() const;
  /// Takes ownership; inserts before `before` (nullptr: at the end). Returns the op.
  Op *insert(std::unique_ptr<Op> op, Op *before = nullptr);
  Op *push_back(std::unique_ptr<Op> op) { return insert(std::move(op), nullptr); }
  /// Unlinks and returns ownership.
  std::unique_ptr<Op> remove(Op *op);
  /// Unlinks and destroys; the op's results must have no uses.
  void erase(Op *op);

  struct Iterator {
    Op *cur;
    Op *operator*() const { return cur; }
    Iterator &operator++();
    bool operator!=(const Iterator &o) const { return cur != o.cur; }
  };
  Iterator begin() const { return {first_}; }
  Iterator end() const { return {nullptr}; }

private:
  friend class Op;
  Op *parent_ = nullptr;
  std::vector<std::unique_ptr<Value>> args_;
  Op *first_ = nullptr;
  Op *last_ = nullptr;
};

class Op {
public:
  /// Creates a detached op. `def` is the registry entry (see OpRegistry::lookup).
  Op(const OpDef *def, std::vector<Value *> operands, std::vector<Type> resultTypes,
     AttrMap attrs = {}, SourceLoc loc = {});
  ~Op();
  Op(const Op &) = delete;
  Op &operator=(const Op &) = delete;

  const OpDef &def() const { return *def_; }
  const std::string &name() const;

  // Operands.
  size_t numOperands() const { return operands_.size(); }
  Value *operand(size_t i) const { return operands_.at(i); }
  const std::vector<Value *> &operands() const { return operands_; }
  void setOperand(size_t i, Value *v);
  void setOperands(std::vector<Value *> vs);

  // Results.
  size_t numResults() const { return results_.size(); }
  Value *result(size_t i = 0) const { return results_.at(i).get(); }
  const std::vector<std::unique_ptr<Value>> &results() const { return results_; }
  /// Removes a result that has no uses (renumbers the others).
  void eraseResult(size_t i);
  Value *addResult(Type t);

  // Attributes.
  const AttrMap &attrs() const { return attrs_; }
  bool hasAttr(std::string_view k) const { return attrs_.find(k) != attrs_.end(); }
  const Attr &attr(std::string_view k) const;
  /// The attribute or the OpDef's default for it.
  const Attr *attrOrNull(std::string_view k) const;
  void setAttr(std::string k, Attr v) { attrs_[std::move(k)] = std::move(v); }
  void removeAttr(std::string_view k);

  // Regions: each region is one block owned by this op.
  size_t numRegions() const { return regions_.size(); }
  Block *region(size_t i) const { return regions_.at(i).get(); }
  Block *addRegion();

  const SourceLoc &loc() const { return loc_; }
  void setLoc(SourceLoc l) { loc_ = std::move(l); }

  Block *parentBlock() const { return block_; }
  Op *prev() const { return prev_; }
  Op *next() const { return next_; }
  /// The op that (transitively) contains this op's block, or nullptr at graph level.
  Op *parentOp() const;
  /// True if `this` is `ancestor` or nested in one of its regions.
  bool isInside(const Op *ancestor) const;

  /// "'matmul' at model.py:12 (forward)" for diagnostics.
  std::string describe() const;

private:
  friend class Block;
  const OpDef *def_;
  std::vector<Value *> operands_;
  std::vector<std::unique_ptr<Value>> results_;
  AttrMap attrs_;
  std::vector<std::unique_ptr<Block>> regions_;
  SourceLoc loc_;
  Block *block_ = nullptr;
  Op *prev_ = nullptr;
  Op *next_ = nullptr;
};

class Graph {
public:
  explicit Graph(std::string name = "main");
  const std::string &name() const { return name_; }
  void setName(std::string n) { name_ = std::move(n); }
  Block *body() const { return body_.get(); }

  size_t numInputs() const { return body_->numArguments(); }
  Value *input(size_t i) const { return body_->argument(i); }
  Value *addInput(Type t, std::string name = "") { return body_->addArgument(std::move(t), std::move(name)); }
  /// The `return` op's operands.
  std::vector<Value *> outputs() const;
  std::vector<Type> outputTypes() const;

  /// Deep copy (values remapped; names, attributes, locations kept).
  std::unique_ptr<Graph> clone() const;

  /// Visits every op, in order, nested blocks included (pre-order). f must not erase ops.
  template <class F> void walk(F &&f) const { walkBlock(body_.get(), f); }
  template <class F> static void walkBlock(Block *b, F &f) {
    for (Op *op : *b) {
      f(op);
      for (size_t r = 0; r < op->numRegions(); ++r) walkBlock(op->region(r), f);
    }
  }
  size_t numOps() const;

private:
  std::string name_;
  std::unique_ptr<Block> body_;
};

/// Copies the ops of `src` but its terminator into `dst` before `before` (nullptr: at the end),
/// each operand mapped through `map` (values not in it are used as they are; the copies'
/// results join it). Returns the terminator's operands, mapped: inlining a region whose block
/// arguments `map` binds (custom_vjp's forward and backward).
std::vector<Value *> copyBlockOps(const Block &src, Block &dst, Op *before,
                                  std::unordered_map<const Value *, Value *> &map);

} // namespace xjit
