// Rewrite machinery shared by the canonicalize driver (canonicalize.cpp) and its rule table
// (canonicalize_rules.cpp). Internal to the passes layer.
#pragma once

#include "mutation_info.h"
#include "xjit/ir/ir.h"

#include <optional>
#include <string_view>
#include <vector>

namespace xjit::passes {

/// What a rule sees and does: builds ops before the root op (with its location), replaces the
/// root's results, and checks the guards that keep a rewrite exact. A rule that returns false
/// has every op it created erased again; a rule must not move or erase ops before it knows it
/// will succeed.
class Rewriter {
public:
  Rewriter(Op &root, MutationInfo &mutation) : root_(root), mutation_(mutation) {}

  Op &root() const { return root_; }

  /// A new op with inferred result types before the root; nullptr if inference rejects it.
  Value *create(std::string_view name, std::vector<Value *> operands, AttrMap attrs = {});
  Value *constantInt(int64_t v);
  Value *constantFloat(double v);

  /// x converted to `target` the way elementwise ops convert their inputs: a cast for another
  /// dtype and an expand for a broadcast shape. nullptr if that needs more (a symbolic dim
  /// that is not x's own, a scalar to a tensor, ...).
  Value *coerce(Value *x, const Type &target);

  /// Replaces the root's results by `values` (exactly equal types, else false and nothing
  /// happens). When the root computes a fresh tensor and a replacement is an existing value
  /// (or a view of one), the rewrite makes two values share storage that did not: allowed only
  /// if neither is ever written in place, and not for a graph output (or a view of one) that
  /// would then alias a graph input. The root is erased (its regions with it).
  bool replace(const std::vector<Value *> &values);
  bool replace(Value *v) { return replace(std::vector<Value *>{v}); }

  /// True if v, or a view chain of it, is a graph output (the caller may write it later); with
  /// `throughReshape` false, not counting chains through reshape/flatten (which may copy).
  bool escapes(const Value *v, bool throughReshape) const;

  /// True if v, or anything that may share its storage, is written in place.
  bool written(const Value *v) const { return mutation_.mayBeWritten(v); }

  const std::vector<Op *> &created() const { return created_; }
  /// Erases the ops created so far (the rule failed).
  void rollback();
  /// Ops moved out of regions before the root (If/Loop inlining), for the driver's worklist.
  void noteMoved(Op *op) { moved_.push_back(op); }
  const std::vector<Op *> &moved() const { return moved_; }
  /// Ops that used the replaced results (they now use the replacements).
  const std::vector<Op *> &affected() const { return affected_; }

private:
  bool isFresh(const Value *v) const;
  Op &root_;
  MutationInfo &mutation_;
  std::vector<Op *> created_;
  std::vector<Op *> moved_;
  std::vector<Op *> affected_;
};

/// One canonicalization rule: the ops it applies to and the rewrite, which returns whether it
/// rewrote the root. `doc` is the one-line description in docs/passes.md.
struct CanonicalizeRule {
  const char *name;
  std::vector<std::string_view> roots;
  bool (*apply)(Op &root, Rewriter &rw);
  const char *doc;
};

/// The rule table, in priority order (the first rule that applies to an op wins).
const std::vector<CanonicalizeRule> &canonicalizeRules();

} // namespace xjit::passes
