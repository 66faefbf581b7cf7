// Sums of matrix products over small inner dims as one product over the concatenated inner dim:
//   A_1 B_1 + A_2 B_2 + ... + A_n B_n = [A_1 ... A_n] [B_1; ...; B_n]
// A weight's gradient in a recurrence (an RNN unrolled over T steps, a Python loop over
// nn.LSTMCell) is such a sum: one product per step of the step's gradient and input, each of
// inner dim the batch, added into the weight's [M, N] gradient T - 1 times. As one library GEMM
// of inner dim T x batch it reads each operand once and writes [M, N] once.
//
// Only where the concatenated operands are no larger than the adds saved (sum of K_i (M + N) <=
// (n - 1) M N): a forward's x W_1 + h W_2 (inner dims the features) is left alone. Results agree
// within f32 rounding (the GEMM's summation order), not bit for bit. Left alone: dtypes other
// than f32/f64, symbolic sizes, products or adds used elsewhere, adds with alpha or broadcasting.
#include "passes.h"
#include "semantic_util.h"

#include "xjit/ir/builder.h"

#include <vector>

namespace xjit::passes {
namespace {

using Ints = std::vector<int64_t>;

/// Whether v is an add (alpha 1) of v's own type (no broadcasting).
bool isPlainAdd(const Value *v, const Type &type) {
  const Op *op = v->definingOp();
  if (!op || op->name() != "add" || op->numOperands() != 2 || v->type() != type) return false;
  const Attr *alpha = op->attrOrNull("alpha");
  return !alpha || alpha->asNumber() == 1.0;
}

/// Whether the add `op` is the root of a sum tree: not the only operand use of another add.
bool isRoot(const Op *op) {
  const Value *v = op->result(0);
  if (v->uses().size() != 1) return true;
  const Op *user = v->uses()[0].user;
  return user->numResults() != 1 || !isPlainAdd(user->result(0), v->type());
}

/// The terms of the sum rooted at v: through adds used once, of v's type.
void collectTerms(Value *v, const Type &type, bool root, std::vector<Value *> &terms) {
  if (isPlainAdd(v, type) && (root || v->uses().size() == 1)) {
    for (size_t i = 0; i < 2; ++i)
      collectTerms(v->definingOp()->operand(i), type, false, terms);
    return;
  }
  terms.push_back(v);
}

/// A 2-D mm used once, of static sizes and a floating dtype.
bool mergeableProduct(const Value *v, const Type &type) {
  const Op *op = v->definingOp();
  if (!op || op->name() != "mm" || v->uses().size() != 1 || v->type() != type) return false;
  if (type.dtype() != DType::F32 && type.dtype() != DType::F64) return false;
  return staticSizes(op->operand(0)) && staticSizes(op->operand(1)) && staticSizes(v);
}

/// W when v is the transpose of a 2-D W (`t`, or `transpose` of its two dims).
Value *transposeOf(Value *v) {
  const Op *op = v->definingOp();
  if (!op || v->type().rank() != 2) return nullptr;
  if (op->name() == "t" || op->name() == "transpose") return op->operand(0);
  return nullptr;
}

bool mergeSum(Op *root, PassContext &ctx) {
  Value *sum = root->result(0);
  const Type type = sum->type();
  std::vector<Value *> terms, products, rest;
  collectTerms(sum, type, true, terms);
  for (Value *t : terms)
    (mergeableProduct(t, type) ? products : rest).push_back(t);
  if (products.size() < 2) return false;
  const Ints mn = *staticSizes(sum);
  int64_t copied = 0;
  for (Value *p : products)
    copied += (*staticSizes(p->definingOp()->operand(0)))[1] * (mn[0] + mn[1]);
  if (copied > int64_t(products.size() - 1) * mn[0] * mn[1]) return false;

  Builder b(root->parentBlock(), root);
  b.setLoc(root->loc());
  std::vector<Value *> lhs, lhsRows, rhs;
  bool transposed = true; // every lhs a transpose: concatenate their rows (contiguous copies)
  for (Value *p : products) {
    Value *a = p->definingOp()->operand(0);
    lhs.push_back(a);
    rhs.push_back(p->definingOp()->operand(1));
    Value *rows = transposeOf(a);
    transposed = transposed && rows;
    lhsRows.push_back(rows);
  }
  Value *a = transposed ? b.op("t", {b.op("cat", lhsRows, {{"dim", int64_t(0)}})})
                        : b.op("cat", lhs, {{"dim", int64_t(1)}});
  std::vector<const Op *> merging;
  for (Value *p : products)
    merging.push_back(p->definingOp());
  Value *merged =
      b.op("mm", {a, b.op("cat", rhs, {{"dim", int64_t(0)}})}, joinedProductAttrs(merging));
  for (Value *t : rest)
    merged = b.op("add", {merged, t});
  if (!replaceIfSameType(root, merged)) return false;
  ctx.count("products-merged", static_cast<int64_t>(products.size()));
  ctx.count("sums-merged");
  return true;
}

} // namespace

bool runMergeProductSums(Graph &g, PassContext &ctx) {
  std::vector<Op *> roots;
  for (Op *op : opsNamed(g, "add"))
    if (isRoot(op)) roots.push_back(op);
  bool changed = false;
  for (Op *root : roots)
    changed |= mergeSum(root, ctx);
  return changed;
}

} // namespace xjit::passes
