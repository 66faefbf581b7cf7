// Inlines each custom_vjp's forward region in place of the op (its backward region is dropped):
// graphs that are not differentiated compute the Function's forward like any other ops.
#include "passes.h"

namespace xjit::passes {

/// The forward region of custom_vjp `op` copied before it; its results replaced by the yielded
/// outputs. Returns everything it yields (the outputs, then the saved values autodiff's rule
/// reads); `op` is left in place without uses.
std::vector<Value *> inlineCustomVjpForward(Op &op) {
  std::unordered_map<const Value *, Value *> map;
  const Block &fwd = *op.region(0);
  for (size_t i = 0; i < op.numOperands(); ++i)
    map[fwd.argument(i)] = op.operand(i);
  std::vector<Value *> yielded = copyBlockOps(fwd, *op.parentBlock(), &op, map);
  for (size_t i = 0; i < op.numResults(); ++i)
    op.result(i)->replaceAllUsesWith(yielded.at(i));
  return yielded;
}

bool runInlineCustomVjp(Graph &g, PassContext &ctx) {
  bool changed = false;
  for (;;) { // one at a time: a forward may hold another custom_vjp, copied with it
    Op *found = nullptr;
    g.walk([&](Op *op) {
      if (!found && op->name() == "custom_vjp") found = op;
    });
    if (!found) return changed;
    inlineCustomVjpForward(*found);
    found->parentBlock()->erase(found);
    ctx.count("functions-inlined");
    changed = true;
  }
}

} // namespace xjit::passes
