// Helpers shared by the semantic passes.
#include "semantic_util.h"

#include "xjit/ir/op_registry.h"

#include <algorithm>
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

Value *perChannel(Builder &b, std::string_view reduce, Value *v, std::optional<DType> accumulate) {
  constexpr int64_t kTwoStageMinValues = int64_t(1) << 16;
  const Type &t = v->type();
  const int64_t rank = t.rank();
  std::vector<int64_t> spatial;
  for (int64_t d = 2; d < rank; ++d)
    spatial.push_back(d);
  auto over = [&](Value *x, std::vector<int64_t> dims) {
    AttrMap attrs{{"dims", dims}, {"keepdim", true}};
    if (accumulate && x->type().dtype() != *accumulate) attrs.emplace("dtype", Attr(*accumulate));
    return b.op(reduce, {x}, std::move(attrs));
  };
  // Small activations stay one kernel: a second kernel costs more than a thread saves there.
  int64_t count = 1;
  for (const DimExpr &d : t.shape())
    count = d.isStatic() ? count * d.value() : 0;
  if (spatial.empty() || count < kTwoStageMinValues || t.shape()[0].value() == 1) {
    spatial.insert(spatial.begin(), 0);
    return over(v, spatial);
  }
  // (A mean of the per-sample means is the mean: every sample has as many values.)
  return over(over(v, spatial), {0});
}

BatchStatistics batchStatistics(Builder &b, Value *x) {
  const DType dt = x->type().dtype();
  BatchStatistics s;
  s.wideMean = perChannel(b, "mean", x, DType::F64);
  s.mean = dt == DType::F64 ? s.wideMean : b.op("cast", {s.wideMean}, {{"dtype", dt}});
  Value *centered = b.op("sub", {x, s.mean});
  s.var = perChannel(b, "mean", b.op("mul", {centered, centered}), DType::F64);
  if (dt != DType::F64) s.var = b.op("cast", {s.var}, {{"dtype", dt}});
  return s;
}

std::optional<std::vector<int64_t>> staticSizes(const Value *v) {
  std::vector<int64_t> s;
  for (const DimExpr &d : v->type().shape()) {
    if (!d.isStatic()) return std::nullopt;
    s.push_back(d.value());
  }
  return s;
}

AttrMap joinedProductAttrs(const std::vector<const Op *> &ops) {
  AttrMap attrs;
  if (!ops.empty() &&
      std::all_of(ops.begin(), ops.end(), [](const Op *op) { return op->hasAttr("fpmath"); }))
    attrs.emplace("fpmath", *ops.front()->attrOrNull("fpmath"));
  return attrs;
}

} // namespace xjit::passes
