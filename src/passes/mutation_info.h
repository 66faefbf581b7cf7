// Which values may be written in place: a may-alias partition of the graph's values (views,
// in-place results, if/loop plumbing, tuples) with the partitions that an in-place op or an
// opaque side-effecting op may write. Cleanup passes consult it before merging, folding or
// forwarding values, because two equal expressions over memory that is written between them
// are not equal.
#pragma once

#include "xjit/ir/ir.h"

#include <unordered_map>
#include <vector>

namespace xjit::passes {

class MutationInfo {
public:
  explicit MutationInfo(const Graph &g);

  /// True if v, or any value that may share its storage, may be written by an in-place op or
  /// an op with side effects (external_call) anywhere in the graph. Values created after the
  /// analysis are answered by following view/in-place chains to an analysed value (a fresh
  /// result is never written).
  bool mayBeWritten(const Value *v) const;
  /// True if the graph writes any tensor at all.
  bool anyWrites() const { return anyWrites_; }
  /// Records that `replacement` took the place of `old` (RAUW): it now shares old's partition,
  /// so it is written wherever old was.
  void noteReplaced(const Value *old, const Value *replacement);
  /// Forgets the values of an op about to be erased (results, and everything in its regions),
  /// so a later value allocated at the same address is not taken for it.
  void forgetOp(const Op *op) {
    if (anyWrites_) forgetValues(op);
  }

private:
  int node(const Value *v); // the value's node, created on first sight
  int find(int n) const;
  void unite(const Value *a, const Value *b);
  void markWritten(const Value *v);
  void visitBlock(const Block *b);
  void forgetValues(const Op *op);
  /// The analysed value that v is (or views): v itself if known, else along aliasing ops.
  const Value *known(const Value *v) const;

  std::unordered_map<const Value *, int> node_;
  mutable std::vector<int> parent_;
  std::vector<char> written_; // by root node
  bool anyWrites_ = false;
};

/// True for ops whose results alias operand 0 (views and in-place ops).
bool aliasesOperand(const Op &op);

/// True if v, or a chain of views of it, leaves the graph: returned (also inside a tuple), or
/// yielded by a nested block (conservatively: the if/loop result may be returned); uses by
/// `except` are not followed. The caller may write what it gets after the call, so two such
/// values must share storage exactly where eager's do: a pass must not merge two fresh ones,
/// nor cut a returned view off a base that leaves too (fuzzer seed 10156: a folded view;
/// `zeros(2), zeros(2)` merged into one tensor).
bool escapesGraph(const Value *v, const Op *except = nullptr);

/// The value a chain of views (and in-place results) starts from.
const Value *viewRootOf(const Value *v);

/// Calls visit(a, b) for each pair of values that an `if` or `loop` makes share storage: a
/// result and what the regions yield for it; for a loop also its initial value and the body's
/// carried argument. Returns false, visiting nothing, for any other op.
template <class Visit> bool forEachControlFlowAlias(Op &op, Visit &&visit) {
  if (op.name() == "if") {
    for (size_t r = 0; r < 2; ++r)
      if (Op *y = op.region(r)->terminator())
        for (size_t i = 0; i < op.numResults() && i < y->numOperands(); ++i)
          visit(op.result(i), y->operand(i));
    return true;
  }
  if (op.name() != "loop") return false;
  Block *body = op.region(0);
  Op *y = body->terminator();
  for (size_t i = 0; i < op.numResults(); ++i) {
    visit(op.result(i), op.operand(2 + i));
    if (i + 1 < body->numArguments()) visit(op.result(i), body->argument(i + 1));
    if (y && i + 1 < y->numOperands()) visit(op.result(i), y->operand(i + 1));
  }
  return true;
}

} // namespace xjit::passes
