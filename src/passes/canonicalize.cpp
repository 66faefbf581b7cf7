// Canonicalization: applies the rewrite rules of canonicalize_rules.cpp to a fixed point with
// a worklist, erasing the pure ops that the rewrites leave unused.
#include "canonicalize.h"

#include "passes.h"
#include "xjit/ir/builder.h"
#include "xjit/ir/op_registry.h"

#include <string>
#include <unordered_map>
#include <unordered_set>

namespace xjit::passes {

// ---- Rewriter ----

Value *Rewriter::create(std::string_view name, std::vector<Value *> operands, AttrMap attrs) {
  for (Value *v : operands)
    if (!v) return nullptr;
  Builder b(root_.parentBlock(), &root_);
  b.setLoc(root_.loc());
  try {
    Op *op = b.create(name, std::move(operands), std::move(attrs));
    created_.push_back(op);
    return op->numResults() == 1 ? op->result(0) : nullptr;
  } catch (const std::exception &) {
    return nullptr; // inference rejects this form: the rule does not apply
  }
}

Value *Rewriter::constantInt(int64_t v) {
  Builder b(root_.parentBlock(), &root_);
  b.setLoc(root_.loc());
  Value *c = b.constantInt(v);
  created_.push_back(c->definingOp());
  return c;
}

Value *Rewriter::constantFloat(double v) {
  Builder b(root_.parentBlock(), &root_);
  b.setLoc(root_.loc());
  Value *c = b.constantFloat(v);
  created_.push_back(c->definingOp());
  return c;
}

Value *Rewriter::coerce(Value *x, const Type &target) {
  if (!x) return nullptr;
  const Type &t = x->type();
  if (t == target) return x;
  if (!t.isTensor() || !target.isTensor() || t.device() != target.device()) return nullptr;
  if (t.rank() > target.rank()) return nullptr;
  if (t.dtype() != target.dtype()) {
    x = create("cast", {x}, {{"dtype", Attr(target.dtype())}});
    if (!x || x->type() == target) return x;
  }
  // Broadcast: keep x's own dims (-1), give new or size-1 dims their static target size.
  std::vector<int64_t> sizes;
  size_t lead = static_cast<size_t>(target.rank() - t.rank());
  for (size_t i = 0; i < target.shape().size(); ++i) {
    const DimExpr &d = target.shape()[i];
    if (i >= lead && t.shape()[i - lead] == d)
      sizes.push_back(-1);
    else if (d.isStatic())
      sizes.push_back(d.value());
    else
      return nullptr;
  }
  return create("expand", {x}, {{"shape", Attr(sizes)}});
}

bool Rewriter::isFresh(const Value *v) const {
  for (Op *c : created_)
    if (v->definingOp() == c) return !aliasesOperand(*c);
  return false;
}

namespace {
/// True if v is a graph input or a view chain of one.
bool reachesGraphInput(const Value *v) {
  while (const Op *def = v->definingOp()) {
    if (!aliasesOperand(*def)) return false;
    v = def->operand(0);
  }
  return v->ownerBlock() && !v->ownerBlock()->parentOp();
}

/// True if v, or a view chain of it, is returned by the graph: the caller then holds it and may
/// write it (or what it aliases) after the call, so it must not alias what eager keeps apart.
/// With `throughReshape` false, reshape/flatten end the chain (they copy what they cannot view),
/// except one to the same shape: that is a view of anything (and reshape-noop drops it), so
/// contiguous(expand(a)).reshape(same shape) would be returned as a view of input a (fuzzer
/// seed 563).
bool escapes(const Value *v, bool throughReshape, int depth = 0) {
  if (depth > 16) return true; // a long chain of views: assume it escapes
  for (const Use &u : v->uses()) {
    if (u.user->name() == "return" && !u.user->parentOp()) return true;
    if (!throughReshape && (u.user->name() == "reshape" || u.user->name() == "flatten") &&
        u.user->result(0)->type() != v->type())
      continue;
    if (u.index == 0 && aliasesOperand(*u.user))
      for (size_t r = 0; r < u.user->numResults(); ++r)
        if (escapes(u.user->result(r), throughReshape, depth + 1)) return true;
  }
  return false;
}

/// True if v is an expand that broadcasts, or a view chain of one: elements of v share memory
/// (a write to it raises in PyTorch), so a graph output eager computes fresh must not become it
/// (fuzzer seed 44492: `torch.zeros(n, 3) + v` of a one-element v, folded to an expand of v and
/// returned with its row: stride 0, and the copy into eager's layout would cut the two apart).
bool broadcastView(const Value *v) {
  while (const Op *def = v->definingOp()) {
    if (!aliasesOperand(*def) || def->numOperands() == 0) return false;
    if ((def->name() == "expand" || def->name() == "expand_as") &&
        !(def->result(0)->type().shape() == def->operand(0)->type().shape()))
      return true;
    v = def->operand(0);
  }
  return false;
}

/// The tensor a view chain starts from.
const Value *viewRoot(const Value *v) {
  while (const Op *def = v->definingOp()) {
    if (!aliasesOperand(*def) || def->numOperands() == 0) break;
    v = def->operand(0);
  }
  return v;
}

/// Ops whose results are fresh tensors (not views of an operand, not forwarded values).
bool computesFresh(const Op &op) {
  const std::string &n = op.name();
  return !aliasesOperand(op) && n != "if" && n != "loop" && n != "custom_vjp" && n != "tuple_get" &&
         n != "tuple_construct";
}
} // namespace

bool Rewriter::escapes(const Value *v, bool throughReshape) const {
  return ::xjit::passes::escapes(v, throughReshape);
}

bool Rewriter::replace(const std::vector<Value *> &values) {
  if (values.size() != root_.numResults()) return false;
  for (size_t i = 0; i < values.size(); ++i) {
    Value *v = values[i], *old = root_.result(i);
    if (!v || v->type() != old->type()) return false;
    if (computesFresh(root_) && !isFresh(v)) {
      if (written(old) || written(v)) return false;
      // Not for a graph output, or a view of one, that would alias a graph input or another
      // output: the caller (or the code after a graph break) may write one of them after the
      // call (clone(a).t() returned as a view of a; (t, t.clone()) as one tensor twice).
      // (Eval-mode dropout and a cast to the own dtype return their operand itself in eager.)
      bool eagerReturnsOperand =
          (root_.name() == "dropout" || root_.name() == "cast") && v == root_.operand(0);
      if (escapes(old, true) && (reachesGraphInput(v) || broadcastView(v) ||
                                 (!eagerReturnsOperand && escapes(viewRoot(v), true))))
        return false;
    }
  }
  for (size_t i = 0; i < values.size(); ++i)
    for (const Use &u : root_.result(i)->uses())
      affected_.push_back(u.user);
  for (size_t i = 0; i < values.size(); ++i) {
    values[i]->setName(values[i]->name().empty() ? root_.result(i)->name() : values[i]->name());
    mutation_.noteReplaced(root_.result(i), values[i]);
    root_.result(i)->replaceAllUsesWith(values[i]);
  }
  return true;
}

void Rewriter::rollback() {
  for (auto it = created_.rbegin(); it != created_.rend(); ++it) {
    mutation_.forgetOp(*it);
    (*it)->parentBlock()->erase(*it);
  }
  created_.clear();
}

// ---- driver ----

namespace {

class Canonicalizer {
public:
  Canonicalizer(Graph &g, PassContext &ctx) : g_(g), mutation_(g), ctx_(ctx) {
    for (const CanonicalizeRule &r : canonicalizeRules())
      for (std::string_view root : r.roots)
        byRoot_[std::string(root)].push_back(&r);
  }

  bool run() {
    for (;;) {
      pushAll();
      while (!stack_.empty()) {
        Op *op = stack_.back();
        stack_.pop_back();
        if (!pending_.erase(op)) continue; // erased, or already processed
        visit(op);
      }
      // Erasing a write (an untaken branch with an in-place op) or an aliasing edge (an inlined
      // loop no longer carries a written value into x) can make copies and forwarding legal
      // elsewhere: analyse again and revisit, to reach a fixed point.
      if (!aliasingChanged_) return changed_;
      aliasingChanged_ = false;
      mutation_ = MutationInfo(g_);
    }
  }

private:
  /// The values op and the ops in its regions read from outside op: what may die with it.
  static std::vector<Value *> operandsWithin(Op *op) {
    std::vector<Value *> out;
    auto visit = [&](auto &self, Op *o) -> void {
      for (Value *v : o->operands()) {
        Op *def = v->isBlockArgument() ? v->ownerBlock()->parentOp() : v->definingOp();
        if (o == op || !def || !def->isInside(op)) out.push_back(v);
      }
      for (size_t r = 0; r < o->numRegions(); ++r)
        for (Op *inner : *o->region(r))
          self(self, inner);
    };
    visit(visit, op);
    return out;
  }

  void pushAll() {
    std::vector<Op *> all;
    g_.walk([&](Op *op) { all.push_back(op); });
    for (auto it = all.rbegin(); it != all.rend(); ++it)
      push(*it); // first op on top
  }

  void push(Op *op) {
    if (pending_.insert(op).second) stack_.push_back(op);
  }

  /// The rules for an op, looked up by name once per OpDef.
  const std::vector<const CanonicalizeRule *> *rulesFor(const Op *op) {
    auto [it, inserted] = byDef_.try_emplace(&op->def(), nullptr);
    if (inserted) {
      auto named = byRoot_.find(op->name());
      it->second = named == byRoot_.end() ? nullptr : &named->second;
    }
    return it->second;
  }

  void visit(Op *op) {
    const auto *rules = rulesFor(op);
    if (!rules) return;
    for (const CanonicalizeRule *rule : *rules) {
      Rewriter rw(*op, mutation_);
      if (!rule->apply(*op, rw)) {
        rw.rollback();
        continue;
      }
      ctx_.count(rule->name);
      changed_ = true;
      for (Op *c : rw.created())
        push(c);
      for (Op *m : rw.moved())
        push(m);
      // Users of the replaced values may now match (neg(neg(x)) once the inner one is x).
      for (Op *u : rw.affected())
        push(u);
      // What the root read from outside may die with it (what inlined ops read stays used).
      std::vector<Value *> operands = operandsWithin(op);
      erase(op);
      eraseDeadProducers(operands);
      return;
    }
  }

  void forget(Op *op) {
    pending_.erase(op);
    if (mutation_.anyWrites() && !op->def().has(kTerminator) &&
        (!op->def().isPure() || aliasesOperand(*op) || op->numRegions() > 0 ||
         op->name() == "tuple_construct" || op->name() == "tuple_get"))
      aliasingChanged_ = true;
    for (size_t r = 0; r < op->numRegions(); ++r)
      for (Op *inner : *op->region(r))
        forget(inner);
  }

  void erase(Op *op) {
    for (const auto &r : op->results())
      for (const Use &u : r->uses())
        push(u.user);
    forget(op);
    mutation_.forgetOp(op);
    op->parentBlock()->erase(op);
  }

  /// Erases the pure producers of `values` that nothing uses any more, and then theirs.
  void eraseDeadProducers(const std::vector<Value *> &values) {
    std::vector<Op *> work;
    for (Value *v : values)
      if (Op *def = v->definingOp()) work.push_back(def);
    std::unordered_set<Op *> erased; // an op may be reached twice (mul(x, x))
    while (!work.empty()) {
      Op *def = work.back();
      work.pop_back();
      if (erased.count(def) || def->numRegions() > 0 || !def->def().isPure()) continue;
      bool used = false;
      for (const auto &r : def->results())
        used |= r->hasUses();
      if (used) continue;
      for (Value *o : def->operands())
        if (Op *p = o->definingOp()) work.push_back(p);
      forget(def);
      mutation_.forgetOp(def);
      erased.insert(def);
      def->parentBlock()->erase(def);
    }
  }

  Graph &g_;
  MutationInfo mutation_;
  PassContext &ctx_;
  std::unordered_map<std::string, std::vector<const CanonicalizeRule *>> byRoot_;
  std::unordered_map<const OpDef *, const std::vector<const CanonicalizeRule *> *> byDef_;
  bool aliasingChanged_ = false;
  std::vector<Op *> stack_;
  std::unordered_set<Op *> pending_;
  bool changed_ = false;
};

} // namespace

bool runCanonicalize(Graph &g, PassContext &ctx) { return Canonicalizer(g, ctx).run(); }

std::vector<std::string> canonicalizeRuleNames() {
  std::vector<std::string> names;
  for (const CanonicalizeRule &r : canonicalizeRules())
    names.push_back(r.name);
  return names;
}

} // namespace xjit::passes
