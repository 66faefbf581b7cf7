// Causal products: marks the matmuls of causal attention with a triangular operand (matmul's
// `causal` attribute), so that the native backend skips the blocks of the inner dim that
// multiply its zeros: the probabilities times v in the forward and, on autodiff's joint graph,
// the backward's three products with the probabilities or the score gradient (q, k and v
// gradients). The two products that make a full score matrix (q·kᵀ and the probabilities'
// gradient) are left whole: computing only their lower blocks was not faster (docs/perf.md).
//
// A matrix (the last two dims, diagonal at the top left as in is_causal's mask) is lower-zero
// when every entry with j > i is zero: masked_fill(x, causal, 0) (value as operand or
// attribute), masked_fill(z, m, 0) of such a z with m the same along z's rows (attention's fully
// masked rows set to 0)
// and tril(x) with diagonal <= 0 (triu(x) with diagonal >= 0 is upper-zero); softmax
// over the last dim of masked_fill(x, causal, -inf) (exp(-inf) is 0, key 0 is never masked),
// whose rows are lower-zero or NaN throughout (a NaN or Inf score), which the `causal`
// attribute allows (the backend checks each line's first element); a mul with such a factor
// that is not broadcast along the matrix dims, when the other factor is a finite splat or zero
// on the same triangle, and such a dividend over a finite nonzero splat (another factor could
// make eager's zeros NaN: 0 * Inf, 0 / 0). A transpose of the last two dims makes it upper-zero
// (and back). A matmul with a lower-zero (upper-zero) lhs gets lhs_lower (lhs_upper), else with
// a lower-zero rhs rhs_lower. The skipped terms are 0 * x, NaN in eager for an infinite or NaN
// x: the backend scans the part of the other operand that its blocks skip and runs the whole
// product when it holds one (docs/backend.md), so the results are the full product's.
#include "constant_value.h"
#include "passes.h"
#include "semantic_util.h"

#include <cmath>
#include <cstdint>
#include <optional>
#include <unordered_map>
#include <utility>

namespace xjit::passes {
namespace {

enum class Zero { None, Lower, Upper };

/// The static [rows, cols] of a tensor of rank >= 2.
std::optional<std::pair<int64_t, int64_t>> matrixDims(const Value *v) {
  const Type &t = v->type();
  if (!t.isTensor() || t.rank() < 2) return std::nullopt;
  std::optional<int64_t> r = t.shape()[t.rank() - 2].staticValue();
  std::optional<int64_t> c = t.shape()[t.rank() - 1].staticValue();
  if (!r || !c) return std::nullopt;
  return std::make_pair(*r, *c);
}

bool isLastDim(const Op &op, std::string_view attr) {
  const Attr *d = op.attrOrNull(attr);
  if (!d || d->kind() != AttrKind::Int) return false;
  int64_t rank = op.operand(0)->type().rank();
  return d->asInt() == -1 || d->asInt() == rank - 1;
}

class CausalFacts {
public:
  /// Whether m is a constant bool mask, true exactly where j > i, for matrices like v's.
  bool isCausalMask(const Value *m, const Value *v) {
    auto [it, fresh] = masks_.emplace(m, false);
    if (fresh) it->second = checkMask(m);
    std::optional<std::pair<int64_t, int64_t>> dims = matrixDims(v);
    return it->second && dims && matrixDims(m) == dims;
  }

  Zero zero(const Value *v) const {
    auto it = zero_.find(v);
    return it == zero_.end() ? Zero::None : it->second;
  }

  /// The forward facts of op's result, from its operands' (ops in order).
  void inferZero(const Op &op) {
    if (op.numResults() != 1 || op.numOperands() == 0) return;
    const Value *out = op.result(0);
    if (!matrixDims(out)) return;
    const std::string &n = op.name();
    const Value *x = op.operand(0);
    Zero z = Zero::None;
    if (n == "masked_fill" && fillValue(op) == 0.0)
      z = isCausalMask(op.operand(1), out) ? Zero::Lower : fillsWholeLines(x, op.operand(1), out);
    else if ((n == "tril" || n == "triu") && x->type() == out->type())
      z = triangleZero(op);
    else if (n == "softmax" && isLastDim(op, "dim") && !op.attrOrNull("dtype"))
      z = maskedToMinusInf(x) ? Zero::Lower : Zero::None;
    else if (n == "mul" && op.numOperands() == 2)
      z = zeroTimes(x, op.operand(1), out) != Zero::None ? zeroTimes(x, op.operand(1), out)
                                                         : zeroTimes(op.operand(1), x, out);
    else if (n == "div" && op.numOperands() == 2)
      z = finiteSplat(op.operand(1), /*nonzero=*/true) ? fullMatrixZero(x, out) : Zero::None;
    else if (n == "neg" || n == "clone" || n == "contiguous" || n == "alias")
      z = fullMatrixZero(x, out);
    else if (n == "transpose" && swapsMatrixDims(op))
      z = zero(x) == Zero::Lower ? Zero::Upper : zero(x) == Zero::Upper ? Zero::Lower : Zero::None;
    if (z != Zero::None) zero_[out] = z;
  }

private:
  static bool swapsMatrixDims(const Op &op) {
    int64_t rank = op.operand(0)->type().rank();
    auto norm = [rank](int64_t d) { return d < 0 ? d + rank : d; };
    int64_t a = norm(op.attr("dim0").asInt()), b = norm(op.attr("dim1").asInt());
    return std::min(a, b) == rank - 2 && std::max(a, b) == rank - 1;
  }
  /// v's fact when v is not broadcast along the matrix dims of `out`.
  Zero fullMatrixZero(const Value *v, const Value *out) const {
    return matrixDims(v) == matrixDims(out) ? zero(v) : Zero::None;
  }
  /// The fact of masked_fill(v, m, 0): v's, when m is the same along each of v's lines (rows
  /// of a lower-zero matrix, columns of an upper-zero one), so that a line that is NaN
  /// throughout stays so or becomes zeros (a mask varying along it would leave NaN only in the
  /// skipped part).
  Zero fillsWholeLines(const Value *v, const Value *m, const Value *out) const {
    Zero z = fullMatrixZero(v, out);
    const Type &t = m->type();
    if (z == Zero::None || !t.isTensor()) return Zero::None;
    int64_t rank = t.rank();
    auto isOne = [&](int64_t fromEnd) {
      std::optional<int64_t> d = t.shape()[size_t(rank - fromEnd)].staticValue();
      return d && *d == 1;
    };
    bool same = z == Zero::Lower ? rank < 1 || isOne(1) : rank < 2 || isOne(2);
    return same ? z : Zero::None;
  }
  /// masked_fill's value: the operand, else the attribute.
  static std::optional<double> fillValue(const Op &op) {
    if (op.numOperands() < 2) return std::nullopt;
    if (op.numOperands() > 2) return splatValue(op.operand(2));
    const Attr *v = op.attrOrNull("value");
    return v ? std::optional<double>(v->asNumber()) : std::nullopt;
  }
  /// tril keeps j <= i + diagonal (lower-zero for diagonal <= 0), triu keeps j >= i + diagonal
  /// (upper-zero for diagonal >= 0).
  static Zero triangleZero(const Op &op) {
    const Attr *d = op.attrOrNull("diagonal");
    int64_t diagonal = d ? d->asInt() : 0;
    if (op.name() == "tril") return diagonal <= 0 ? Zero::Lower : Zero::None;
    return diagonal >= 0 ? Zero::Upper : Zero::None;
  }
  /// The fact of v * w: v's, when w cannot turn v's zeros into NaN (0 * Inf): w is a finite
  /// splat (a scale) or zero on the same triangle (0 * 0; a NaN line stays NaN throughout).
  Zero zeroTimes(const Value *v, const Value *w, const Value *out) const {
    Zero z = fullMatrixZero(v, out);
    return z != Zero::None && (finiteSplat(w, /*nonzero=*/false) || zero(w) == z) ? z : Zero::None;
  }
  /// Whether every element of v is one known finite number (and not 0, when asked: 0 / 0).
  static bool finiteSplat(const Value *v, bool nonzero) {
    std::optional<double> c = splatValue(v);
    return c && std::isfinite(*c) && (!nonzero || *c != 0);
  }
  bool maskedToMinusInf(const Value *x) {
    const Op *def = x->definingOp();
    if (!def || def->name() != "masked_fill") return false;
    std::optional<double> fill = fillValue(*def);
    return fill && std::isinf(*fill) && *fill < 0 && isCausalMask(def->operand(1), x);
  }
  static bool checkMask(const Value *m) {
    const Tensor *t = constantTensor(m);
    if (!t || t->dtype() != DType::Bool || t->rank() < 2) return false;
    const int64_t rows = t->size(t->rank() - 2), cols = t->size(t->rank() - 1);
    if (t->numel() != rows * cols) return false;
    // On the bytes (a bool is one byte, 0 or 1), not per element through getDouble.
    Tensor dense = t->isContiguous() ? *t : t->contiguousCopy();
    const auto *p = reinterpret_cast<const uint8_t *>(dense.data());
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j)
        if ((p[i * cols + j] != 0) != (j > i)) return false;
    return true;
  }

  std::unordered_map<const Value *, bool> masks_;
  std::unordered_map<const Value *, Zero> zero_;
};

const char *causalMode(CausalFacts &facts, const Op &op) {
  const Value *a = op.operand(0), *b = op.operand(1), *out = op.result(0);
  if (!matrixDims(a) || !matrixDims(b) || !matrixDims(out)) return nullptr;
  if (facts.zero(a) == Zero::Lower) return "lhs_lower";
  if (facts.zero(a) == Zero::Upper) return "lhs_upper";
  if (facts.zero(b) == Zero::Lower) return "rhs_lower";
  return nullptr;
}

} // namespace

bool runCausalProducts(Graph &g, PassContext &ctx) {
  CausalFacts facts;
  for (Op *op : *g.body())
    facts.inferZero(*op);
  bool changed = false;
  for (Op *op : *g.body())
    if (op->name() == "matmul" && op->numOperands() == 2 && !op->attrOrNull("causal"))
      if (const char *mode = causalMode(facts, *op)) {
        op->setAttr("causal", std::string(mode));
        ctx.count(std::string("products-") + mode);
        changed = true;
      }
  return changed;
}

} // namespace xjit::passes
