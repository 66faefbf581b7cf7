// Dead code elimination: removes pure ops whose results are unused, unused if results and
// loop-carried values that only feed themselves, recursively into regions.
#include "passes.h"

#include "xjit/ir/op_registry.h"

#include <unordered_set>

namespace xjit::passes {
namespace {

class Dce {
public:
  explicit Dce(PassContext &ctx) : ctx_(ctx) {}

  /// One sweep over a block, last op first, so an op is visited after all its users in the
  /// same block and in the regions of later ops. Returns whether the block (after the sweep)
  /// still holds an op with an effect, which keeps a parent if/loop alive.
  bool sweep(Block *b) {
    bool effects = false;
    for (Op *op = b->back(); op;) {
      Op *prev = op->prev();
      bool opEffects = !op->def().isPure();
      if (op->def().has(kTerminator)) opEffects = false; // yield/return belong to the block
      if (op->numRegions() > 0) {
        removeDeadResults(op);
        for (size_t r = 0; r < op->numRegions(); ++r)
          opEffects |= sweep(op->region(r));
      }
      if (op->def().has(kTerminator) || opEffects || anyResultUsed(op)) {
        effects |= opEffects;
      } else {
        ctx_.count("ops-removed", static_cast<int64_t>(countOps(op)));
        b->erase(op);
        changed_ = true;
      }
      op = prev;
    }
    return effects;
  }

  bool changed() const { return changed_; }
  void resetChanged() { changed_ = false; }

private:
  static bool anyResultUsed(const Op *op) {
    for (const auto &r : op->results())
      if (r->hasUses()) return true;
    return false;
  }

  static size_t countOps(const Op *op) {
    size_t n = 1;
    for (size_t r = 0; r < op->numRegions(); ++r)
      for (Op *inner : *op->region(r))
        n += countOps(inner);
    return n;
  }

  static void dropOperand(Op *op, size_t i) {
    std::vector<Value *> operands = op->operands();
    operands.erase(operands.begin() + static_cast<ptrdiff_t>(i));
    op->setOperands(std::move(operands));
  }

  void removeDeadResults(Op *op) {
    if (op->name() == "if") {
      for (size_t i = op->numResults(); i-- > 0;) {
        if (op->result(i)->hasUses()) continue;
        for (size_t r = 0; r < 2; ++r)
          if (Op *y = op->region(r)->terminator(); y && i < y->numOperands()) dropOperand(y, i);
        op->eraseResult(i);
        noteResultRemoved();
      }
    } else if (op->name() == "loop") {
      Block *body = op->region(0);
      Op *y = body->terminator();
      if (!y) return;
      for (size_t i = op->numResults(); i-- > 0;) {
        std::unordered_set<Op *> chain;
        if (op->result(i)->hasUses() || !onlyFeedsItself(body, y, i, chain)) continue;
        dropOperand(y, i + 1);
        for (Op *inner = body->back(); inner;) { // users before their operands
          Op *prev = inner->prev();
          if (chain.count(inner)) {
            body->erase(inner);
            ctx_.count("ops-removed");
          }
          inner = prev;
        }
        body->eraseArgument(i + 1);
        dropOperand(op, i + 2);
        op->eraseResult(i);
        noteResultRemoved();
      }
    }
  }

  /// True if carried value i only computes its own next value: everything derived from its
  /// block argument (by pure ops of the body) flows nowhere but into yield slot i. Then, with
  /// the loop's result unused, the whole chain is dead (the sweep removes it once the yield
  /// no longer reads it). `seen` receives the ops of that chain.
  static bool onlyFeedsItself(Block *body, Op *yield, size_t i, std::unordered_set<Op *> &seen) {
    std::vector<Value *> work{body->argument(i + 1)};
    while (!work.empty()) {
      Value *v = work.back();
      work.pop_back();
      for (const Use &u : v->uses()) {
        if (u.user == yield) {
          if (u.index != i + 1) return false;
          continue;
        }
        Op *user = u.user;
        if (user->parentBlock() != body || user->numRegions() > 0 || !user->def().isPure())
          return false;
        if (!seen.insert(user).second) continue;
        if (seen.size() > 4096) return false; // a bound, not a limit real loops reach
        for (const auto &r : user->results())
          work.push_back(r.get());
      }
    }
    return true;
  }

  void noteResultRemoved() {
    ctx_.count("results-removed");
    changed_ = true;
  }

  PassContext &ctx_;
  bool changed_ = false;
};

} // namespace

bool runDce(Graph &g, PassContext &ctx) {
  Dce dce(ctx);
  bool changed = false;
  // A sweep finds every dead op except those kept alive only through a loop-carried value
  // that the same sweep removed; repeat until nothing changes (rarely more than twice).
  do {
    dce.resetChanged();
    dce.sweep(g.body());
    changed |= dce.changed();
  } while (dce.changed());
  return changed;
}

} // namespace xjit::passes
