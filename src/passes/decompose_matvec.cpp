// Matrix-vector decomposition: a linear/matmul/mm/addmm whose input is a single row (batch-1
// inference, one decode step) becomes a multiply and a sum over the features,
//   linear(x, W, b) = sum(x[None, :] * W, dim=1) + b        (W is [N, K]),
// which the fuse pass turns into one loop kernel: it streams the weight once, row by row, and
// takes the bias and the activation after it as its epilogue. A library GEMM call at M = 1 does
// the same memory-bound work with a per-call setup and, for xjit, its own megabytes of code
// (docs/perf.md, "Session 9: matrix-vector products").
//
// Only the row form is rewritten: the weight read along its contiguous feature dim (F.linear's
// [N, K] weight, or matmul's rhs when it is the transpose of a 2-D [N, K] tensor). A plain
// [K, N] rhs (GPT-2's Conv1D) would be a reduction over its outer dim, which the library does
// as fast or faster (columns=true rewrites it anyway, for experiments).
// Results agree with eager within f32 rounding (a different summation order), not bit for bit.
// Left alone: dtypes other than f32/f64, more than one row, symbolic sizes, 1-D weights,
// batched rhs.
#include "passes.h"
#include "semantic_util.h"

#include "xjit/ir/builder.h"

#include <algorithm>
#include <optional>

namespace xjit::passes {
namespace {

using Ints = std::vector<int64_t>;

/// K when x is a single row of K static features: [K], [1, K], [1, 1, K], ...
std::optional<int64_t> singleRowFeatures(const Type &t) {
  if (!t.isTensor() || t.rank() < 1) return std::nullopt;
  const Shape &s = t.shape();
  for (size_t i = 0; i + 1 < s.size(); ++i)
    if (s[i].staticValue() != 1) return std::nullopt;
  return s.back().staticValue();
}

bool floatingMatch(const Type &a, const Type &b) {
  return a.dtype() == b.dtype() && (a.dtype() == DType::F32 || a.dtype() == DType::F64);
}

/// Whether v is a view of a value with its last two dims swapped (transpose, t, mT-like
/// permute): a reduction over its last dim then reads strided memory.
bool lastDimsSwapped(const Value *v) {
  const Op *op = v->definingOp();
  if (!op || op->numOperands() != 1) return false;
  const int64_t rank = v->type().rank();
  auto norm = [rank](int64_t d) { return d < 0 ? d + rank : d; };
  if (op->name() == "t") return rank == 2;
  if (op->name() == "transpose") {
    int64_t a = norm(op->attr("dim0").asInt()), b = norm(op->attr("dim1").asInt());
    return std::max(a, b) == rank - 1 && std::min(a, b) == rank - 2;
  }
  if (op->name() == "permute") {
    const Ints &d = op->attr("dims").asInts();
    return d.size() >= 2 && norm(d[d.size() - 1]) == rank - 2 && norm(d[d.size() - 2]) == rank - 1;
  }
  return false;
}

/// W when v is the transpose of a 2-D W (t, transpose of its two dims, permute [1, 0]).
Value *transposedFrom(Value *v) {
  return v->type().rank() == 2 && lastDimsSwapped(v) ? v->definingOp()->operand(0) : nullptr;
}

double attrNumberOr(const Op &op, std::string_view name, double dflt) {
  const Attr *a = op.attrOrNull(name);
  return a ? a->asNumber() : dflt;
}

struct MatvecParts {
  Value *x = nullptr;      // the single row
  int64_t k = 0;           // its features
  Value *weight = nullptr; // [N, K] (row form) or [K, N] (column form)
  bool rowForm = true;     // weight is [N, K]
  Value *bias = nullptr;   // added to the product, broadcast to the result
  double alpha = 1, beta = 1;
};

std::optional<MatvecParts> match(Op *op) {
  MatvecParts p;
  const std::string &name = op->name();
  if (name == "linear") {
    p.x = op->operand(0);
    p.weight = op->operand(1);
    p.bias = presentOperand(*op, 2);
  } else if (name == "matmul" || name == "mm" || name == "addmm") {
    size_t lhs = name == "addmm" ? 1 : 0;
    p.x = op->operand(lhs);
    Value *rhs = op->operand(lhs + 1);
    if (rhs->type().rank() != 2) return std::nullopt;
    if (Value *w = transposedFrom(rhs)) {
      p.weight = w;
    } else {
      p.weight = rhs;
      p.rowForm = false;
    }
    if (name == "addmm") {
      p.bias = op->operand(0);
      p.alpha = attrNumberOr(*op, "alpha", 1);
      p.beta = attrNumberOr(*op, "beta", 1);
    }
  } else {
    return std::nullopt;
  }
  const Type &wt = p.weight->type();
  std::optional<int64_t> k = singleRowFeatures(p.x->type());
  if (!k || wt.rank() != 2 || !floatingMatch(p.x->type(), wt)) return std::nullopt;
  p.k = *k;
  if (wt.shape()[p.rowForm ? 1 : 0].staticValue() != k || !wt.shape()[p.rowForm ? 0 : 1].isStatic())
    return std::nullopt;
  if (p.bias && (!p.bias->type().isTensor() || !floatingMatch(p.bias->type(), wt)))
    return std::nullopt;
  return p;
}

bool decompose(Op *op, bool columns, PassContext &ctx) {
  std::optional<MatvecParts> p = match(op);
  if (!p || (!p->rowForm && !columns)) return false;
  const int64_t k = p->k;
  const Type &result = op->result(0)->type();

  Builder b(op->parentBlock(), op);
  b.setLoc(op->loc());
  // [K] against [N, K] (row form), or [K, 1] against [K, N]: the product broadcasts, the sum
  // goes over K.
  Ints rowShape = p->rowForm ? Ints{k} : Ints{k, 1};
  Value *row = p->x->type().shape().size() == rowShape.size() && p->rowForm
                   ? p->x
                   : b.op("reshape", {p->x}, {{"shape", rowShape}});
  Value *products = b.op("mul", {row, p->weight});
  Value *y = b.op("sum", {products}, {{"dims", Ints{p->rowForm ? 1 : 0}}, {"keepdim", false}});
  if (p->alpha != 1) y = b.op("mul", {y, b.constantFloat(p->alpha)});
  // A bias of at most one dim broadcasts the same against [N] as against the result's
  // [1, ..., N]: add it before the reshape, inside the reduction's epilogue.
  Value *bias = p->bias && p->beta != 0 ? p->bias : nullptr;
  if (bias && p->beta != 1) bias = b.op("mul", {bias, b.constantFloat(p->beta)});
  if (bias && bias->type().rank() <= 1) y = b.op("add", {y, bias});
  if (result.rank() != 1) {
    Ints shape;
    for (const DimExpr &d : result.shape())
      shape.push_back(*d.staticValue());
    y = b.op("reshape", {y}, {{"shape", shape}});
  }
  if (bias && bias->type().rank() > 1) y = b.op("add", {y, bias});
  if (!replaceIfSameType(op, y)) return false;
  ctx.count(p->rowForm ? "rows-decomposed" : "columns-decomposed");
  return true;
}

/// Elements at which a column product over a strided inner dim stays a decomposition.
constexpr int64_t kStridedColumnElements = int64_t(1) << 16;

/// A (batched) matmul with a single column, both operands of rank >= 2 with static shapes:
/// [..., M, K] x [..., K, 1] is sum(A * Bᵀ, -1) (a reduction over A's rows, within rounding),
/// broadcasting the batch dims as matmul does. The library's call costs ~10 us for a few
/// hundred flops (Mamba's scan: ssm_state @ C_i per step, 1,300 calls per forward); as loop ops
/// they fuse with what makes their operands. A column product over a strided inner dim (A a
/// transposed view) is kept for the library past kStridedColumnElements. (An inner dim of 1,
/// the outer product, as a broadcast multiply made Mamba's training step slower: its fusions
/// with the states' updates lowered as 32x8 tiles; 43-46 -> 50 ms, so those stay library calls.)
bool decomposeSmallProduct(Op *op, PassContext &ctx) {
  if (op->name() != "matmul" && op->name() != "bmm") return false;
  Value *a = op->operand(0), *b = op->operand(1);
  const Type &ta = a->type(), &tb = b->type(), &result = op->result(0)->type();
  if (!ta.isTensor() || !tb.isTensor() || ta.rank() < 2 || tb.rank() < 2 ||
      !floatingMatch(ta, tb) || !isStaticShape(ta.shape()) || !isStaticShape(tb.shape()) ||
      !isStaticShape(result.shape()))
    return false;
  const int64_t k = ta.shape()[size_t(ta.rank() - 1)].value();
  const int64_t n = tb.shape()[size_t(tb.rank() - 1)].value();
  if (n != 1 || k == 1) return false;
  if (lastDimsSwapped(a) && numelOf(ta.shape()).value() > kStridedColumnElements) return false;
  Builder bld(op->parentBlock(), op);
  bld.setLoc(op->loc());
  Value *row = bld.op("transpose", {b}, {{"dim0", int64_t(-2)}, {"dim1", int64_t(-1)}});
  Value *y = bld.op("sum", {bld.op("mul", {a, row})}, {{"dims", Ints{-1}}, {"keepdim", true}});
  if (!replaceIfSameType(op, y)) return false;
  ctx.count("column-products");
  return true;
}

} // namespace

bool runDecomposeMatvec(Graph &g, PassContext &ctx) {
  bool columns = ctx.option("columns") == "true";
  bool changed = false;
  for (const char *name : {"linear", "matmul", "mm", "addmm"})
    for (Op *op : opsNamed(g, name))
      changed |= decompose(op, columns, ctx);
  for (const char *name : {"matmul", "bmm"})
    for (Op *op : opsNamed(g, name))
      changed |= decomposeSmallProduct(op, ctx);
  return changed;
}

} // namespace xjit::passes
