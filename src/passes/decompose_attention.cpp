// Attention decomposition: scaled_dot_product_attention on f32 becomes matmul, scale, mask,
// softmax and matmul, so that a native backend runs the two matmuls on its library kernels
// (with the scale and mask as epilogues) and the softmax as a fused reduction, instead of the
// op's reference kernel.
//
// Exactly the reference's semantics: scores = (q @ kᵀ) * scale (scale defaults to 1/sqrt(E));
// a bool mask (or is_causal: key j > query i) sets masked scores to -inf, a float mask is added;
// a row whose scores are all -inf gives zeros (torch's safe softmax), not NaN — the decomposition
// tests amax(row) == -inf, which a NaN score never satisfies, so NaN still propagates.
// A dropout_noise operand multiplies the softmax weights (eager's at::dropout of them).
// Left alone: dtypes other than f32 (the reference accumulates in double), enable_gqa with
// differing head counts, and is_causal with symbolic sequence lengths.
#include "passes.h"
#include "semantic_util.h"

#include "xjit/ir/builder.h"

#include <cmath>
#include <limits>
#include <vector>

namespace xjit::passes {
namespace {

bool attrBoolOr(const Op &op, std::string_view name, bool dflt) {
  const Attr *a = op.attrOrNull(name);
  return a && a->kind() == AttrKind::Bool ? a->asBool() : dflt;
}

/// A constant bool [L, S] tensor, true where key j > query i (what is_causal masks).
Tensor causalMask(int64_t l, int64_t s) {
  Tensor t = Tensor::empty(DType::Bool, {l, s});
  for (int64_t i = 0; i < l; ++i)
    for (int64_t j = 0; j < s; ++j)
      t.setDouble(i * s + j, j > i ? 1.0 : 0.0);
  return t;
}

/// Where a bool mask (true: attend) masks: logical_not(mask), computed here for a constant mask
/// (transformers' causal masks are constants after folding), so that causal-products sees the
/// triangle and no kernel negates it per call.
Value *maskedWhere(Builder &b, Value *mask) {
  const Tensor *t = constantTensor(mask);
  if (!t) return b.op("logical_not", {mask});
  Tensor negated = Tensor::empty(DType::Bool, t->sizes());
  for (int64_t i = 0; i < t->numel(); ++i)
    negated.setDouble(i, t->getDouble(i) == 0 ? 1.0 : 0.0);
  return b.constantTensor(negated);
}

bool decompose(Op *op, PassContext &ctx) {
  Value *q = op->operand(0), *k = op->operand(1), *v = op->operand(2);
  auto optional = [&](size_t i) {
    return op->numOperands() > i && op->operand(i)->type().isTensor() ? op->operand(i) : nullptr;
  };
  Value *mask = optional(3), *noise = optional(4);
  const Type &qt = q->type();
  if (qt.dtype() != DType::F32 || k->type().dtype() != DType::F32 ||
      v->type().dtype() != DType::F32)
    return false;
  if (const Attr *d = op->attrOrNull("dropout_p"); d && d->asNumber() != 0) return false;
  const Shape &qs = qt.shape(), &ks = k->type().shape();
  if (attrBoolOr(*op, "enable_gqa", false) && qs.size() >= 3 && ks.size() >= 3 &&
      qs[qs.size() - 3] != ks[ks.size() - 3])
    return false;
  bool causal = attrBoolOr(*op, "is_causal", false);
  std::optional<int64_t> l = qs[qs.size() - 2].staticValue(), s = ks[ks.size() - 2].staticValue();
  if (causal && (!l || !s)) return false;
  std::optional<int64_t> e = qs.back().staticValue();
  const Attr *scaleAttr = op->attrOrNull("scale");
  bool hasScale = scaleAttr != nullptr;
  if (!hasScale && !e) return false;
  double scale = hasScale ? scaleAttr->asNumber() : 1.0 / std::sqrt(static_cast<double>(*e));

  Builder b(op->parentBlock(), op);
  b.setLoc(op->loc());
  Value *kt = b.op("transpose", {k}, {{"dim0", int64_t(-2)}, {"dim1", int64_t(-1)}});
  Value *scores = b.op("mul", {b.op("matmul", {q, kt}), b.constantFloat(scale)});
  Value *ninf = nullptr; // made on first use: only masking needs -inf
  auto minusInf = [&] {
    if (!ninf) ninf = b.constantFloat(-std::numeric_limits<double>::infinity());
    return ninf;
  };
  if (mask && mask->type().dtype() == DType::Bool)
    scores = b.op("masked_fill", {scores, maskedWhere(b, mask), minusInf()});
  else if (mask)
    scores = b.op("add", {scores, mask});
  if (causal)
    scores = b.op("masked_fill", {scores, b.constantTensor(causalMask(*l, *s)), minusInf()});
  Value *probs = b.op("softmax", {scores}, {{"dim", int64_t(-1)}});
  if (mask) { // a mask can make a row all -inf (is_causal alone never masks key 0)
    Value *rowMax = b.op("amax", {scores}, {{"dims", std::vector<int64_t>{-1}}, {"keepdim", true}});
    probs = b.op("masked_fill", {probs, b.op("eq", {rowMax, minusInf()}), b.constantFloat(0.0)});
  }
  if (noise) probs = b.op("mul", {probs, noise});
  Value *out = b.op("matmul", {probs, v});
  if (!replaceIfSameType(op, out)) return false;
  ctx.count("attentions-decomposed");
  return true;
}

} // namespace

bool runDecomposeAttention(Graph &g, PassContext &ctx) {
  bool changed = false;
  for (Op *op : opsNamed(g, "scaled_dot_product_attention"))
    changed |= decompose(op, ctx);
  return changed;
}

} // namespace xjit::passes
