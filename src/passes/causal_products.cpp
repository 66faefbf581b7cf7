// Causal products: marks the matmuls of causal attention with a triangular operand (matmul's
// `causal` attribute), so that the native backend skips the blocks of the inner dim that
// multiply its zeros: the probabilities times v in the forward and, on autodiff's joint graph,
// the backward's three products with the probabilities or the score gradient (q, k and v
// gradients). The two products that make a full score matrix (q·kᵀ and the probabilities'
// gradient) are left whole: computing only their lower blocks was not faster (docs/perf.md).
//
// A matrix (the last two dims, diagonal at the top left as in is_causal's mask) is lower-zero
// when every entry with j > i is zero: masked_fill(x, causal, 0); softmax over the last dim of
// masked_fill(x, causal, -inf) (exp(-inf) is 0, key 0 is never masked); a mul or div with a
// lower-zero dividend or factor that is not broadcast along the matrix dims. A transpose of the
// last two dims makes it upper-zero (and back). A matmul with a lower-zero (upper-zero) lhs
// gets lhs_lower (lhs_upper), else with a lower-zero rhs rhs_lower. The skipped terms are
// 0 * x, NaN in eager for an infinite or NaN x: the backend scans the part of the other operand
// that its blocks skip and runs the whole product when it holds one (docs/backend.md), so the
// results are the full product's. Not scanned (it would cost the blocks' gain): the triangular
// operand's zeros themselves, which are NaN only where a fact's own input was non-finite there
// (0 * Inf in a mul; a softmax row that is NaN throughout).
#include "constant_value.h"
#include "passes.h"
#include "semantic_util.h"

#include <cmath>
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
    if (n == "masked_fill" && op.numOperands() > 2 && isCausalMask(op.operand(1), out) &&
        splatValue(op.operand(2)) == 0.0)
      z = Zero::Lower;
    else if (n == "softmax" && isLastDim(op, "dim") && !op.attrOrNull("dtype"))
      z = maskedToMinusInf(x) ? Zero::Lower : Zero::None;
    else if (n == "mul" && op.numOperands() == 2)
      z = fullMatrixZero(x, out) != Zero::None ? fullMatrixZero(x, out)
                                               : fullMatrixZero(op.operand(1), out);
    else if (n == "div" || n == "neg" || n == "clone" || n == "contiguous" || n == "alias")
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
  bool maskedToMinusInf(const Value *x) {
    const Op *def = x->definingOp();
    if (!def || def->name() != "masked_fill" || def->numOperands() < 3) return false;
    std::optional<double> fill = splatValue(def->operand(2));
    return fill && std::isinf(*fill) && *fill < 0 && isCausalMask(def->operand(1), x);
  }
  static bool checkMask(const Value *m) {
    const Tensor *t = constantTensor(m);
    if (!t || t->dtype() != DType::Bool || t->rank() < 2) return false;
    const int64_t rows = t->size(t->rank() - 2), cols = t->size(t->rank() - 1);
    if (t->numel() != rows * cols) return false;
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j)
        if ((t->getDouble(i * cols + j) != 0) != (j > i)) return false;
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
