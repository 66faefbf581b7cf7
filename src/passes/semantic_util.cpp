// Helpers shared by the semantic passes.
#include "semantic_util.h"

#include "xjit/ir/op_registry.h"

#include <unordered_set>

namespace xjit::passes {

const Tensor *constantTensor(const Value *v) {
  const Op *def = v->definingOp();
  if (!def || def->name() != "constant") return nullptr;
  const Attr *a = def->attrOrNull("value");
  return a && a->kind() == AttrKind::Tensor ? &a->asTensor() : nullptr;
}

Value *presentOperand(const Op &op, size_t i) {
  if (i >= op.numOperands()) return nullptr;
  Value *v = op.operand(i);
  return v->type().kind() == TypeKind::None ? nullptr : v;
}

namespace {
size_t eraseIfDead(Op *op, std::unordered_set<const Op *> &erased) {
  if (!op->def().isPure() || op->numRegions() > 0) return 0;
  for (const auto &r : op->results())
    if (r->hasUses()) return 0;
  std::vector<Op *> producers;
  for (Value *v : op->operands())
    if (Op *d = v->definingOp()) producers.push_back(d);
  op->parentBlock()->erase(op);
  erased.insert(op);
  size_t n = 1;
  // A producer may have been erased already through another one (or be listed twice).
  for (Op *d : producers)
    if (!erased.count(d)) n += eraseIfDead(d, erased);
  return n;
}
} // namespace

size_t eraseIfDead(Op *op) {
  std::unordered_set<const Op *> erased;
  return eraseIfDead(op, erased);
}

bool replaceIfSameType(Op *op, Value *v) {
  if (v->type() != op->result(0)->type()) {
    eraseIfDead(v->definingOp());
    return false;
  }
  v->setName(op->result(0)->name());
  replaceOp(op, {v});
  return true;
}

std::vector<Op *> opsNamed(Graph &g, std::string_view name) {
  std::vector<Op *> found;
  g.walk([&](Op *op) {
    if (op->name() == name) found.push_back(op);
  });
  return found;
}

void replaceOp(Op *op, const std::vector<Value *> &replacements) {
  for (size_t i = 0; i < op->numResults(); ++i)
    op->result(i)->replaceAllUsesWith(replacements[i]);
  std::vector<Op *> producers;
  for (Value *v : op->operands())
    if (Op *d = v->definingOp()) producers.push_back(d);
  op->parentBlock()->erase(op);
  std::unordered_set<const Op *> erased;
  for (Op *d : producers)
    if (!erased.count(d)) eraseIfDead(d, erased);
}

} // namespace xjit::passes
