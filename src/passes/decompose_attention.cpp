// Attention decomposition: scaled_dot_product_attention on f32 (bf16/f16) becomes matmul, scale,
// mask, softmax and matmul, so that a native backend runs the two matmuls on its library kernels
// (with the scale and mask as epilogues) and the softmax as a fused reduction, instead of the
// op's reference kernel.
//
// Exactly the reference's semantics: scores = (q @ kᵀ) * scale (scale defaults to 1/sqrt(E));
// a bool mask (or is_causal: key j > query i) sets masked scores to -inf, a float mask is added;
// a row whose scores are all -inf gives zeros (torch's safe softmax), not NaN — the decomposition
// tests amax(row) == -inf, which a NaN score never satisfies, so NaN still propagates (not
// needed under a constant mask that attends in every row, such as a causal one).
// A dropout_noise operand multiplies the softmax weights (eager's at::dropout of them).
// bf16/f16 q, k, v (torch.autocast) are cast to f32 first and the result rounded once.
// Left alone: other dtypes (the reference accumulates in double), enable_gqa with
// differing head counts, and is_causal with symbolic sequence lengths.
#include "passes.h"
#include "semantic_util.h"

#include "xjit/ir/builder.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <tuple>
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
  auto *p = reinterpret_cast<uint8_t *>(t.data());
  for (int64_t i = 0; i < l; ++i)
    for (int64_t j = 0; j < s; ++j)
      p[i * s + j] = j > i;
  return t;
}

/// logical_not of a constant bool tensor, on its bytes (a bool is one byte, 0 or 1): per
/// element through Tensor::getDouble it was most of this pass's time on LLaMA's [128,128]
/// masks.
Tensor negatedMask(const Tensor &mask) {
  Tensor in = mask.isContiguous() ? mask : mask.contiguousCopy();
  Tensor out = Tensor::empty(DType::Bool, mask.sizes());
  const auto *p = reinterpret_cast<const uint8_t *>(in.data());
  auto *q = reinterpret_cast<uint8_t *>(out.data());
  for (int64_t i = 0, n = mask.numel(); i < n; ++i)
    q[i] = p[i] == 0;
  return out;
}

/// The constants this pass makes, one per mask and block: every layer of a model gets the
/// same mask, so its negation (and causal-products' check of it) is made once.
struct MaskConstants {
  std::map<std::pair<const Value *, const Block *>, Value *> negated;
  std::map<std::tuple<int64_t, int64_t, const Block *>, Value *> causal;
  std::map<const Value *, bool> attendsEveryRow; // attendsEveryRow's answer per mask
};

/// Whether `mask` is a constant under which every query attends to some key: each row (last
/// dim) of a bool mask holds a true, of a float mask a value above -inf. Then no row of scores
/// is all -inf by the mask (a causal mask's diagonal), and the decomposition needs no check
/// for such rows (an amax and a select over the scores: ~40% of GPT-2's masked softmax).
bool attendsEveryRow(Value *mask, MaskConstants &made) {
  auto [it, fresh] = made.attendsEveryRow.try_emplace(mask, false);
  if (!fresh) return it->second;
  const Tensor *t = constantTensor(mask);
  if (!t || t->rank() == 0 || t->numel() == 0) return false;
  const Tensor c = t->isContiguous() ? *t : t->contiguousCopy();
  const int64_t cols = c.size(c.rank() - 1), rows = c.numel() / cols;
  const DType dt = c.dtype();
  if (dt != DType::Bool && dt != DType::F32) return false;
  for (int64_t r = 0; r < rows; ++r) {
    bool attends = false;
    for (int64_t j = 0; j < cols && !attends; ++j) {
      const int64_t i = r * cols + j;
      attends = dt == DType::Bool ? reinterpret_cast<const uint8_t *>(c.data())[i] != 0
                                  : reinterpret_cast<const float *>(c.data())[i] >
                                        -std::numeric_limits<float>::infinity();
    }
    if (!attends) return false;
  }
  return it->second = true;
}

/// Where a bool mask (true: attend) masks: logical_not(mask), computed here for a constant mask
/// (transformers' causal masks are constants after folding), so that causal-products sees the
/// triangle and no kernel negates it per call.
Value *maskedWhere(Builder &b, Value *mask, const Block *block, MaskConstants &made) {
  const Tensor *t = constantTensor(mask);
  if (!t || t->dtype() != DType::Bool) return b.op("logical_not", {mask});
  Value *&c = made.negated[{mask, block}];
  if (!c) c = b.constantTensor(negatedMask(*t));
  return c;
}

bool decompose(Op *op, PassContext &ctx, MaskConstants &made) {
  Value *q = op->operand(0), *k = op->operand(1), *v = op->operand(2);
  auto optional = [&](size_t i) {
    return op->numOperands() > i && op->operand(i)->type().isTensor() ? op->operand(i) : nullptr;
  };
  Value *mask = optional(3), *noise = optional(4);
  const Type &qt = q->type();
  const DType dt = qt.dtype();
  if ((dt != DType::F32 && dt != DType::BF16 && dt != DType::F16) || k->type().dtype() != dt ||
      v->type().dtype() != dt)
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
  if (dt != DType::F32) {
    // bf16/f16 (torch.autocast's attention): computed in f32 and rounded once, where eager's
    // flash kernel keeps f32 scores and rounds the weights to the low dtype for the second
    // product; the two products are small next to a model's linears.
    auto wide = [&](Value *x) { return b.op("cast", {x}, {{"dtype", DType::F32}}); };
    q = wide(q), k = wide(k), v = wide(v);
    if (mask && mask->type().dtype() == dt) mask = wide(mask);
    if (noise && noise->type().dtype() == dt) noise = wide(noise);
  }
  Value *kt = b.op("transpose", {k}, {{"dim0", int64_t(-2)}, {"dim1", int64_t(-1)}});
  // bf16-products' mark carries over to the two products.
  AttrMap productAttrs;
  if (const Attr *m = op->attrOrNull("fpmath")) productAttrs.emplace("fpmath", *m);
  Value *scores = b.op("mul", {b.op("matmul", {q, kt}, productAttrs), b.constantFloat(scale)});
  Value *ninf = nullptr; // made on first use: only masking needs -inf
  auto minusInf = [&] {
    if (!ninf) ninf = b.constantFloat(-std::numeric_limits<double>::infinity());
    return ninf;
  };
  if (mask && mask->type().dtype() == DType::Bool)
    scores =
        b.op("masked_fill", {scores, maskedWhere(b, mask, op->parentBlock(), made), minusInf()});
  else if (mask)
    scores = b.op("add", {scores, mask});
  if (causal) {
    Value *&c = made.causal[{*l, *s, op->parentBlock()}];
    if (!c) c = b.constantTensor(causalMask(*l, *s));
    scores = b.op("masked_fill", {scores, c, minusInf()});
  }
  Value *probs = b.op("softmax", {scores}, {{"dim", int64_t(-1)}});
  // A mask can make a row all -inf (is_causal alone never masks key 0; attendsEveryRow).
  if (mask && !attendsEveryRow(mask, made)) {
    Value *rowMax = b.op("amax", {scores}, {{"dims", std::vector<int64_t>{-1}}, {"keepdim", true}});
    probs = b.op("masked_fill", {probs, b.op("eq", {rowMax, minusInf()}), b.constantFloat(0.0)});
  }
  if (noise) probs = b.op("mul", {probs, noise});
  Value *out = b.op("matmul", {probs, v}, productAttrs);
  if (dt != DType::F32) out = b.op("cast", {out}, {{"dtype", dt}});
  if (!replaceIfSameType(op, out)) return false;
  ctx.count("attentions-decomposed");
  return true;
}

} // namespace

bool runDecomposeAttention(Graph &g, PassContext &ctx) {
  bool changed = false;
  MaskConstants made;
  for (Op *op : opsNamed(g, "scaled_dot_product_attention"))
    changed |= decompose(op, ctx, made);
  return changed;
}

} // namespace xjit::passes
