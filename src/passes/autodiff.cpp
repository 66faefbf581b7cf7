// Reverse-mode autodiff: splits a graph into a forward graph (outputs + saved values) and a
// backward graph (grad outputs + saved values -> input grads), with one derivative rule per op.
//
// How: the joint graph is built first (the derivative rules append, in reverse op order, the ops
// computing each input's gradient), then partitioned as AOTAutograd's default partitioner does:
// the forward keeps the ops its outputs need; every other op the gradients need runs in the
// backward, so values that rules derive from forward values (sigmoid's derivative from its
// input, layer_norm's normalized input...) are recomputed there and only their operands are
// saved; values a rule marks (RuleArgs::computeInForward: batch norm's statistics) are computed
// in the forward and saved instead. Anything the table does not cover throws AutodiffUnsupported:
// the frame then runs under PyTorch's autograd, never with a wrong gradient.
#include "autodiff_rules.h"
#include "passes.h"

#include "xjit/ir/builder.h"
#include "xjit/ir/diagnostics.h"
#include "xjit/ir/op_registry.h"
#include "xjit/ir/sym_attr.h"
#include "xjit/passes/autodiff.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <numbers>
#include <optional>
#include <set>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

namespace xjit::passes {

namespace autodiff_rules {

void unsupported(const Op &op, const std::string &why) {
  throw AutodiffUnsupported(op.describe() + ": " + why);
}

std::vector<int64_t> staticShape(const Op &op, const Value *v) {
  std::optional<std::vector<int64_t>> s = staticSizes(v);
  if (!s) unsupported(op, "needs a static shape, has " + v->type().str());
  return *s;
}

double floatAttr(const Op &op, const char *name, double dflt) {
  const Attr *a = op.attrOrNull(name);
  return a && (a->kind() == AttrKind::Float || a->kind() == AttrKind::Int) ? a->asNumber() : dflt;
}

Value *castTo(Builder &b, Value *v, DType d) {
  return v->type().dtype() == d ? v : b.op("cast", {v}, {{"dtype", d}});
}

/// Sums a broadcast gradient back to the shape (and dtype) of the operand it flowed from.
Value *sumTo(RuleArgs &a, Value *g, const Value *operand) {
  return sumToType(a, g, operand->type());
}

Value *sumToType(RuleArgs &a, Value *g, const Type &t) {
  const Shape &gs = g->type().shape(), &ts = t.shape();
  if (gs.size() < ts.size()) unsupported(a.op, "gradient of lower rank than its operand");
  const size_t lead = gs.size() - ts.size();
  std::vector<int64_t> keep;
  for (size_t j = 0; j < ts.size(); ++j) {
    if (ts[j] == gs[lead + j]) continue;
    if (ts[j] == DimExpr(1))
      keep.push_back(static_cast<int64_t>(lead + j));
    else
      unsupported(a.op, "cannot match the broadcast dims " + t.str() + " and " + g->type().str());
  }
  if (!keep.empty()) g = a.b.op("sum", {g}, {{"dims", keep}, {"keepdim", true}});
  if (lead > 0) {
    std::vector<int64_t> leading;
    for (size_t i = 0; i < lead; ++i)
      leading.push_back(static_cast<int64_t>(i));
    g = a.b.op("sum", {g}, {{"dims", leading}, {"keepdim", false}});
  }
  return castTo(a.b, g, t.dtype());
}

/// The gradient of a tensor operand i (nullptr when it needs none or is a Python scalar).
Value *gradFor(RuleArgs &a, size_t i, Value *g) {
  if (i >= a.need.size() || !a.need[i] || !a.x(i)->type().isTensor()) return nullptr;
  return sumTo(a, g, a.x(i));
}

/// The reduced dims of a sum/mean-like op, normalized and sorted (all dims when empty).
std::vector<int64_t> reducedDims(const Op &op, const char *attr, int64_t rank) {
  std::vector<int64_t> dims;
  if (const Attr *d = op.attrOrNull(attr); d && d->kind() == AttrKind::Ints) dims = d->asInts();
  if (dims.empty())
    for (int64_t i = 0; i < rank; ++i)
      dims.push_back(i);
  for (int64_t &d : dims)
    d = normDim(d, rank);
  std::sort(dims.begin(), dims.end());
  return dims;
}

/// A reduction's gradient broadcast back over the reduced dims to x's shape.
Value *expandReduced(RuleArgs &a, Value *g, const std::vector<int64_t> &dims, bool keepdim,
                     Value *x) {
  if (!keepdim)
    for (int64_t d : dims)
      g = a.un("unsqueeze", g, {{"dim", d}});
  // A static shape keeps x itself out of the backward's inputs (only its shape is needed).
  std::optional<std::vector<int64_t>> shape = staticSizes(x);
  if (!shape) return a.b.op("expand_as", {g, x});
  return a.un("expand", g, {{"shape", *shape}});
}

} // namespace autodiff_rules

bool runDecomposeAttention(Graph &g, PassContext &ctx); // decompose_attention.cpp
bool runCausalProducts(Graph &g, PassContext &ctx);     // causal_products.cpp

namespace {

using Ints = std::vector<int64_t>;

bool isFloatTensor(const Value *v) { return v->type().isTensor() && isFloating(v->type().dtype()); }

using autodiff_rules::castTo;
using autodiff_rules::expandReduced;
using autodiff_rules::gradFor;
using autodiff_rules::normDim;
using autodiff_rules::reducedDims;
using autodiff_rules::Rule;
using autodiff_rules::RuleArgs;
using autodiff_rules::staticShape;
using autodiff_rules::staticSizes;
using autodiff_rules::sumTo;
using autodiff_rules::unsupported;

bool attrBool(const Op &op, std::string_view name, bool dflt) {
  const Attr *a = op.attrOrNull(name);
  return a && a->kind() == AttrKind::Bool ? a->asBool() : dflt;
}

void requireNoDTypeAttr(const RuleArgs &a) {
  if (const Attr *d = a.op.attrOrNull("dtype"); d && d->kind() == AttrKind::DType)
    unsupported(a.op, "a dtype attribute (no rule for the conversion)");
}

/// Whether v is a transposed view whose row dim (-2) is its source's last dim: a `t`, or a
/// `transpose` / `permute` that moves the source's last dim to -2 (attention's k.transpose(-2,
/// -1), a weight's W.t()). Its gradient, written row-major, maps back to the source with a
/// strided last dim.
bool columnMajorView(const Value *v) {
  const Op *def = v->definingOp();
  const int64_t rank = v->type().isTensor() ? v->type().rank() : 0;
  if (!def || rank < 2 || def->numOperands() != 1) return false;
  if (def->name() == "t") return rank == 2;
  if (def->name() == "transpose") {
    const Attr *d0 = def->attrOrNull("dim0"), *d1 = def->attrOrNull("dim1");
    if (!d0 || !d1 || d0->kind() != AttrKind::Int || d1->kind() != AttrKind::Int) return false;
    const int64_t x = normDim(d0->asInt(), rank), y = normDim(d1->asInt(), rank);
    return std::min(x, y) == rank - 2 && std::max(x, y) == rank - 1;
  }
  if (def->name() == "permute") {
    const Attr *dims = def->attrOrNull("dims");
    if (!dims || dims->kind() != AttrKind::Ints || int64_t(dims->asInts().size()) != rank)
      return false;
    return normDim(dims->asInts()[size_t(rank - 2)], rank) == rank - 1;
  }
  return false;
}

/// matmul-like product gradients: dA = g·Bᵀ, dB = Aᵀ·g, each summed to its operand's shape.
/// An operand that is a column-major view (columnMajorView) gets its gradient as the transpose
/// of the transposed product (dBᵀ = gᵀ·A), the same work: then it maps back to the operand's
/// source contiguous in its last dim (attention's key gradient: the merge of heads that
/// follows copies 64-float runs instead of single floats, and so does its bias sum).
std::vector<Value *> productRule(RuleArgs &a, const char *product) {
  Value *A = a.x(0), *B = a.x(1);
  if (A->type().rank() < 2 || B->type().rank() < 2) unsupported(a.op, "a 1-D operand");
  auto tr = [&](Value *v) {
    return a.un("transpose", v, {{"dim0", int64_t(-2)}, {"dim1", int64_t(-1)}});
  };
  // The transposed gradient is summed over the broadcast dims before it is transposed back:
  // a sum over them reads a transposed view strided (a [1, N, K] weight gradient of a batch of
  // one: 1.6 ms instead of 0.14).
  auto transposedType = [](const Value *v) {
    const Type &t = v->type();
    Shape s = t.shape();
    std::swap(s[s.size() - 2], s[s.size() - 1]);
    return Type::tensor(t.dtype(), s, t.device());
  };
  std::vector<Value *> r(a.op.numOperands(), nullptr);
  if (a.need[0])
    r[0] = columnMajorView(A) ? tr(sumToType(a, a.b.op(product, {B, tr(a.g)}), transposedType(A)))
                              : sumTo(a, a.b.op(product, {a.g, tr(B)}), A);
  if (a.need[1])
    r[1] = columnMajorView(B) ? tr(sumToType(a, a.b.op(product, {tr(a.g), A}), transposedType(B)))
                              : sumTo(a, a.b.op(product, {tr(A), a.g}), B);
  return r;
}

/// The split/chunk gradient cat(reshape(x_0), ..., reshape(x_n), dim) as
/// reshape(cat(x_0, ..., x_n, dim)) when every piece's gradient is a reshape that merges dims
/// [dim, dim+k] of same-shaped x_i into `dim` (and keeps the others): attention's q/k/v
/// gradients, [B,T,H,D] transposed views of [B,H,T,D] products merged to [B,T,H*D]. Each reshape
/// of a transposed view is a copy; the cat then copies again. Concatenating the views along the
/// head dim copies once, and the merge of the contiguous result is a view. nullptr: not that
/// pattern (a piece without a gradient, gradients of other shapes).
Value *catBeforeReshape(RuleArgs &a, const std::vector<Value *> &pieces, int64_t dim) {
  if (pieces.size() < 2) return nullptr;
  std::vector<Value *> sources;
  Ints srcShape;
  for (Value *p : pieces) {
    const Op *def = p ? p->definingOp() : nullptr;
    if (!def || def->name() != "reshape" || def->numOperands() != 1) return nullptr;
    Value *src = def->operand(0);
    if (!src->type().isTensor() || src->type().dtype() != p->type().dtype()) return nullptr;
    std::optional<Ints> s = staticSizes(src);
    if (!s) return nullptr;
    if (sources.empty())
      srcShape = *s;
    else if (*s != srcShape)
      return nullptr;
    sources.push_back(src);
  }
  std::optional<Ints> pieceSizes = staticSizes(pieces[0]);
  if (!pieceSizes) return nullptr;
  const Ints &pieceShape = *pieceSizes;
  const int64_t rank = static_cast<int64_t>(pieceShape.size());
  const int64_t srcRank = static_cast<int64_t>(srcShape.size());
  dim = normDim(dim, rank);
  const int64_t merged = srcRank - rank + 1; // source dims merged into `dim`
  if (dim < 0 || dim >= rank || merged < 2) return nullptr;
  for (int64_t j = 0; j < dim; ++j)
    if (srcShape[size_t(j)] != pieceShape[size_t(j)]) return nullptr;
  for (int64_t j = dim + 1; j < rank; ++j)
    if (srcShape[size_t(j + merged - 1)] != pieceShape[size_t(j)]) return nullptr;
  int64_t product = 1;
  for (int64_t j = dim; j < dim + merged; ++j)
    product *= srcShape[size_t(j)];
  if (product != pieceShape[size_t(dim)]) return nullptr;
  Value *joined = a.b.op("cat", sources, {{"dim", dim}});
  Ints shape = pieceShape;
  shape[size_t(dim)] *= static_cast<int64_t>(pieces.size());
  return a.un("reshape", joined, {{"shape", shape}});
}

/// d/dx of gelu: Phi(x) + x·phi(x) (erf form) or the derivative of the tanh approximation.
Value *geluDerivative(RuleArgs &a, Value *x) {
  const Attr *ap = a.op.attrOrNull("approximate");
  const std::string mode = ap && ap->kind() == AttrKind::Str ? ap->asStr() : "none";
  if (mode == "tanh") {
    // 0.5 x (1 + tanh u) = x s, s = sigmoid(2u), u = k (x + c x^3): d/dx = s + x s (1 - s) u' 2.
    // s and s (1 - s) come from e = exp(-2|u|) (s = 1 / (1 + e) or e / (1 + e) by the sign of u,
    // s (1 - s) = e / (1 + e)^2), not from 1 - tanh(u)^2: that cancels for |u| in 4..9, where
    // its rounding is then multiplied by x u' (~x^3; eager's gelu_backward errs so, 3e-6 on
    // randn * 2 inputs).
    const double k = std::sqrt(2.0 / std::numbers::pi), c = 0.044715;
    Value *x2 = a.mul(x, x);
    Value *u = a.mul(a.mul(x, a.bin("add", a.mul(x2, a.f(c)), a.f(1.0))), a.f(k));
    Value *e = a.un("exp", a.mul(a.un("abs", u), a.f(-2.0)));
    Value *r = a.un("reciprocal", a.bin("add", e, a.f(1.0)));
    Value *er = a.mul(e, r);
    Value *s = a.b.op("where", {a.bin("ge", u, a.f(0.0)), r, er});
    Value *dInner2 = a.mul(a.bin("add", a.mul(x2, a.f(3 * c)), a.f(1.0)), a.f(2 * k));
    return a.bin("add", s, a.mul(a.mul(x, a.mul(er, r)), dInner2));
  }
  if (mode != "none") unsupported(a.op, "approximate = '" + mode + "'");
  Value *cdf = a.mul(a.bin("add", a.un("erf", a.mul(x, a.f(1.0 / std::numbers::sqrt2))), a.f(1.0)),
                     a.f(0.5));
  Value *pdf = a.mul(a.un("exp", a.mul(a.mul(x, x), a.f(-0.5))),
                     a.f(1.0 / std::sqrt(2.0 * std::numbers::pi)));
  return a.bin("add", cdf, a.mul(x, pdf));
}

/// One rule per op, tinygrad / PyTorch derivatives.yaml style: the gradient of each operand
/// given the gradient g of the result. Rules for unary ops return only operand 0's.
const std::map<std::string, Rule> &ruleTable() {
  static const std::map<std::string, Rule> table = [] {
    std::map<std::string, Rule> t;
    auto unary = [&](const char *name, std::function<Value *(RuleArgs &)> dx) {
      t[name] = [dx](RuleArgs &a) -> std::vector<Value *> { return {a.mul(a.g, dx(a))}; };
    };
    // -- elementwise arithmetic (broadcasting: sumTo) --
    t["add"] = [](RuleArgs &a) -> std::vector<Value *> {
      const Attr *al = a.op.attrOrNull("alpha");
      const double alpha = al ? al->asNumber() : 1.0;
      Value *gy = alpha == 1.0 ? a.g : a.mul(a.g, a.f(alpha));
      return {gradFor(a, 0, a.g), a.need[1] ? gradFor(a, 1, gy) : nullptr};
    };
    t["sub"] = [](RuleArgs &a) -> std::vector<Value *> {
      const Attr *al = a.op.attrOrNull("alpha");
      const double alpha = al ? al->asNumber() : 1.0;
      return {gradFor(a, 0, a.g), a.need[1] ? gradFor(a, 1, a.mul(a.g, a.f(-alpha))) : nullptr};
    };
    t["mul"] = [](RuleArgs &a) -> std::vector<Value *> {
      return {a.need[0] ? gradFor(a, 0, a.mul(a.g, a.x(1))) : nullptr,
              a.need[1] ? gradFor(a, 1, a.mul(a.g, a.x(0))) : nullptr};
    };
    t["div"] = [](RuleArgs &a) -> std::vector<Value *> {
      if (const Attr *m = a.op.attrOrNull("rounding_mode");
          m && m->kind() == AttrKind::Str && !m->asStr().empty())
        unsupported(a.op, "rounding division has no gradient");
      Value *gx = a.bin("div", a.g, a.x(1));
      return {a.need[0] ? gradFor(a, 0, gx) : nullptr,
              a.need[1] ? gradFor(a, 1, a.un("neg", a.mul(gx, a.out()))) : nullptr};
    };
    t["neg"] = [](RuleArgs &a) -> std::vector<Value *> { return {a.un("neg", a.g)}; };
    // Reached only for an in-place fill autograd records (stopsGradient): zero gradient.
    t["zeros_like"] = t["full_like"] = [](RuleArgs &) -> std::vector<Value *> { return {nullptr}; };
    t["where"] = [](RuleArgs &a) -> std::vector<Value *> {
      Value *zero = a.f(0.0);
      return {nullptr, a.need[1] ? gradFor(a, 1, a.b.op("where", {a.x(0), a.g, zero})) : nullptr,
              a.need[2] ? gradFor(a, 2, a.b.op("where", {a.x(0), zero, a.g})) : nullptr};
    };
    t["masked_fill"] = [](RuleArgs &a) -> std::vector<Value *> {
      if (a.op.numOperands() > 2 && a.need[2])
        unsupported(a.op, "a fill value that needs a gradient");
      std::vector<Value *> r(a.op.numOperands(), nullptr);
      r[0] = gradFor(a, 0, a.b.op("masked_fill", {a.g, a.x(1), a.f(0.0)}));
      return r;
    };
    // -- unary elementwise: g * f'(x), from the result where that is cheaper --
    // threshold_backward selects: g where the result is positive, else 0, even where g is NaN or
    // infinite (fuzzer seed 40322: sqrt(abs(relu(x))) at x < 0, whose g is inf; a mask product
    // gave NaN).
    t["relu"] = [](RuleArgs &a) -> std::vector<Value *> {
      Value *zero = a.f(0.0);
      return {a.b.op("where", {a.bin("gt", a.out(), zero), a.g, zero})};
    };
    unary("gelu", [](RuleArgs &a) { return geluDerivative(a, a.x(0)); });
    unary("tanh", [](RuleArgs &a) { return a.bin("sub", a.f(1.0), a.mul(a.out(), a.out())); });
    unary("sigmoid", [](RuleArgs &a) { return a.mul(a.out(), a.bin("sub", a.f(1.0), a.out())); });
    // d/dx log(sigmoid(x)) = 1 - sigmoid(x) = sigmoid(-x), exact for large |x| either way.
    unary("log_sigmoid", [](RuleArgs &a) { return a.un("sigmoid", a.un("neg", a.x(0))); });
    unary("silu", [](RuleArgs &a) {
      Value *s = a.un("sigmoid", a.x(0));
      Value *oneMinus = a.bin("sub", a.f(1.0), s);
      return a.mul(s, a.bin("add", a.mul(a.x(0), oneMinus), a.f(1.0)));
    });
    unary("exp", [](RuleArgs &a) { return a.out(); });
    unary("log", [](RuleArgs &a) { return a.un("reciprocal", a.x(0)); });
    unary("sqrt", [](RuleArgs &a) { return a.bin("div", a.f(0.5), a.out()); });
    unary("rsqrt",
          [](RuleArgs &a) { return a.mul(a.mul(a.out(), a.mul(a.out(), a.out())), a.f(-0.5)); });
    unary("reciprocal", [](RuleArgs &a) { return a.un("neg", a.mul(a.out(), a.out())); });
    unary("square", [](RuleArgs &a) { return a.mul(a.x(0), a.f(2.0)); });
    t["pow"] = [](RuleArgs &a) -> std::vector<Value *> {
      if (a.x(1)->type().isTensor()) unsupported(a.op, "a tensor exponent");
      if (a.x(1)->definingOp() == nullptr || a.x(1)->definingOp()->name() != "constant")
        unsupported(a.op, "an exponent that is not a constant");
      const double c = a.x(1)->definingOp()->attr("value").asNumber();
      Value *d = a.mul(a.bin("pow", a.x(0), a.f(c - 1.0)), a.f(c));
      return {a.mul(a.g, d), nullptr};
    };
    // -- multi-result views: the pieces' gradients joined again (zeros for unused pieces) --
    auto joinPieces = [](RuleArgs &a, bool stacked) -> std::vector<Value *> {
      const Attr *d = a.op.attrOrNull("dim");
      const int64_t dim = d ? d->asInt() : 0;
      if (!stacked)
        if (Value *joined = catBeforeReshape(a, a.gs, dim)) return {joined};
      std::vector<Value *> parts;
      for (size_t i = 0; i < a.op.numResults(); ++i) {
        Value *gi = a.gs[i] ? a.gs[i] : a.un("zeros_like", a.op.result(i));
        parts.push_back(stacked ? a.un("unsqueeze", gi, {{"dim", dim}}) : gi);
      }
      return {a.b.op("cat", parts, {{"dim", dim}})};
    };
    t["split"] = t["chunk"] =
        t["split_with_sizes"] = [joinPieces](RuleArgs &a) { return joinPieces(a, false); };
    t["unbind"] = [joinPieces](RuleArgs &a) { return joinPieces(a, true); };
    t["cat"] = [](RuleArgs &a) -> std::vector<Value *> {
      const int64_t rank = a.out()->type().rank();
      const int64_t dim = normDim(a.op.attrOrNull("dim") ? a.op.attr("dim").asInt() : 0, rank);
      std::vector<Value *> r;
      int64_t start = 0;
      for (size_t i = 0; i < a.op.numOperands(); ++i) {
        auto size = a.x(i)->type().shape()[static_cast<size_t>(dim)].staticValue();
        if (!size) unsupported(a.op, "a cat along a symbolic dim");
        r.push_back(
            a.need[i] ? a.un("slice", a.g, {{"dim", dim}, {"start", start}, {"end", start + *size}})
                      : nullptr);
        start += *size;
      }
      return r;
    };
    auto identity = [](RuleArgs &a) -> std::vector<Value *> { return {gradFor(a, 0, a.g)}; };
    t["contiguous"] = t["clone"] = t["alias"] = identity;
    // The kept triangle passes the gradient through; the zeroed one gets none.
    t["tril"] = t["triu"] = [](RuleArgs &a) -> std::vector<Value *> {
      const Attr *d = a.op.attrOrNull("diagonal");
      return {a.un(a.op.name(), a.g, {{"diagonal", d ? d->asInt() : int64_t{0}}})};
    };
    t["dropout"] = [](RuleArgs &a) -> std::vector<Value *> {
      const Attr *p = a.op.attrOrNull("p");
      if (attrBool(a.op, "train", true) && (!p || p->asNumber() != 0.0))
        unsupported(a.op, "dropout in training mode with p > 0 (its mask is not reproduced)");
      return {a.g};
    };
    t["cast"] = t["to_copy"] = [](RuleArgs &a) -> std::vector<Value *> {
      if (const Attr *d = a.op.attrOrNull("device"); d && d->kind() == AttrKind::Str)
        unsupported(a.op, "a device transfer");
      return {castTo(a.b, a.g, a.x(0)->type().dtype())};
    };
    // -- views: the inverse movement of the gradient --
    auto reshapeBack = [](RuleArgs &a) -> std::vector<Value *> {
      return {a.un("reshape", a.g, {{"shape", staticShape(a.op, a.x(0))}})};
    };
    t["reshape"] = t["view"] = t["flatten"] = t["unflatten"] = t["squeeze"] = reshapeBack;
    t["unsqueeze"] = [](RuleArgs &a) -> std::vector<Value *> {
      const int64_t d = normDim(a.op.attr("dim").asInt(), a.out()->type().rank());
      return {a.un("squeeze", a.g, {{"dim", Ints{d}}})};
    };
    t["permute"] = [](RuleArgs &a) -> std::vector<Value *> {
      const Ints &dims = a.op.attr("dims").asInts();
      Ints inverse(dims.size());
      for (size_t i = 0; i < dims.size(); ++i)
        inverse[static_cast<size_t>(normDim(dims[i], static_cast<int64_t>(dims.size())))] =
            static_cast<int64_t>(i);
      return {a.un("permute", a.g, {{"dims", inverse}})};
    };
    t["transpose"] = [](RuleArgs &a) -> std::vector<Value *> {
      return {a.un("transpose", a.g, {{"dim0", a.op.attr("dim0")}, {"dim1", a.op.attr("dim1")}})};
    };
    t["t"] = [](RuleArgs &a) -> std::vector<Value *> { return {a.un("t", a.g)}; };
    t["expand"] = identity;
    t["expand_as"] = [](RuleArgs &a) -> std::vector<Value *> {
      return {gradFor(a, 0, a.g), nullptr};
    };
    t["slice"] = [](RuleArgs &a) -> std::vector<Value *> {
      // Zero-pad the gradient back along the sliced dim; a step k first spreads it to every
      // k-th element (g as [len, 1] padded to [len, k], merged: GPT-J's x[..., ::2]).
      const Attr *st = a.op.attrOrNull("step");
      const int64_t step = st ? st->asInt() : 1;
      if (step < 1) unsupported(a.op, "a slice with step < 1");
      const int64_t rank = a.x(0)->type().rank();
      const int64_t dim = normDim(a.op.attrOrNull("dim") ? a.op.attr("dim").asInt() : 0, rank);
      const auto size = a.x(0)->type().shape()[static_cast<size_t>(dim)].staticValue();
      if (!size) unsupported(a.op, "a slice of a symbolic dim");
      auto clampIdx = [&](int64_t v) {
        if (v < 0) v += *size;
        return std::clamp<int64_t>(v, 0, *size);
      };
      const int64_t start = clampIdx(a.op.attrOrNull("start") ? a.op.attr("start").asInt() : 0);
      const int64_t end =
          std::max(start, clampIdx(a.op.attrOrNull("end") ? a.op.attr("end").asInt() : *size));
      Value *g = a.g;
      int64_t length = end - start;
      if (step > 1) {
        Ints spread = staticShape(a.op, g);
        const int64_t picked = spread[size_t(dim)];
        Ints pad(static_cast<size_t>(2 * (rank - dim)), 0); // along the new dim dim + 1
        pad[pad.size() - 1] = step - 1;
        g = a.un("pad", a.un("unsqueeze", g, {{"dim", dim + 1}}), {{"pad", pad}});
        spread[size_t(dim)] = picked * step;
        g = a.un("reshape", g, {{"shape", spread}});
        length = std::min(picked * step, *size - start); // the trailing zeros past the end go
        if (length < picked * step)
          g = a.un("slice", g, {{"dim", dim}, {"start", int64_t(0)}, {"end", length}});
      }
      Ints pad(static_cast<size_t>(2 * (rank - dim)), 0);
      pad[pad.size() - 2] = start;
      pad[pad.size() - 1] = *size - start - length;
      return {a.un("pad", g, {{"pad", pad}})};
    };
    t["select"] = [](RuleArgs &a) -> std::vector<Value *> {
      const int64_t rank = a.x(0)->type().rank();
      const int64_t dim = normDim(a.op.attr("dim").asInt(), rank);
      const auto size = a.x(0)->type().shape()[static_cast<size_t>(dim)].staticValue();
      if (!size) unsupported(a.op, "a select on a symbolic dim");
      int64_t index = a.op.attr("index").asInt();
      if (index < 0) index += *size;
      Ints pad(static_cast<size_t>(2 * (rank - dim)), 0);
      pad[pad.size() - 2] = index;
      pad[pad.size() - 1] = *size - index - 1;
      return {a.un("pad", a.un("unsqueeze", a.g, {{"dim", dim}}), {{"pad", pad}})};
    };
    // -- reductions --
    t["sum"] = [](RuleArgs &a) -> std::vector<Value *> {
      requireNoDTypeAttr(a);
      const Ints dims = reducedDims(a.op, "dims", a.x(0)->type().rank());
      return {expandReduced(a, a.g, dims, attrBool(a.op, "keepdim", false), a.x(0))};
    };
    t["mean"] = [](RuleArgs &a) -> std::vector<Value *> {
      requireNoDTypeAttr(a);
      const Ints dims = reducedDims(a.op, "dims", a.x(0)->type().rank());
      int64_t n = 1;
      Value *symbolic = nullptr; // the product of the symbolic reduced sizes (an int), if any
      for (int64_t d : dims) {
        const DimExpr &dim = a.x(0)->type().shape()[static_cast<size_t>(d)];
        if (dim.isStatic()) {
          n *= dim.value();
          continue;
        }
        Value *size = a.un("size", a.x(0), {{"dim", d}});
        symbolic = symbolic ? a.bin("mul", symbolic, size) : size;
      }
      Value *g = a.mul(a.g, a.f(1.0 / static_cast<double>(n)));
      if (symbolic) g = a.bin("div", g, symbolic);
      return {expandReduced(a, g, dims, attrBool(a.op, "keepdim", false), a.x(0))};
    };
    // A `dtype` attribute casts the input first (BLOOM's f32 attention softmax): the gradient
    // is computed in the result's dtype and cast back to the input's.
    t["softmax"] = [](RuleArgs &a) -> std::vector<Value *> {
      Value *gy = a.mul(a.g, a.out());
      Value *s = a.b.op("sum", {gy}, {{"dims", Ints{a.op.attr("dim").asInt()}}, {"keepdim", true}});
      return {castTo(a.b, a.bin("sub", gy, a.mul(a.out(), s)), a.x(0)->type().dtype())};
    };
    t["log_softmax"] = [](RuleArgs &a) -> std::vector<Value *> {
      Value *s =
          a.b.op("sum", {a.g}, {{"dims", Ints{a.op.attr("dim").asInt()}}, {"keepdim", true}});
      return {
          castTo(a.b, a.bin("sub", a.g, a.mul(a.un("exp", a.out()), s)), a.x(0)->type().dtype())};
    };
    // -- linear algebra --
    t["matmul"] = [](RuleArgs &a) { return productRule(a, "matmul"); };
    t["mm"] = [](RuleArgs &a) { return productRule(a, "mm"); };
    t["bmm"] = [](RuleArgs &a) { return productRule(a, "bmm"); };
    t["linear"] = [](RuleArgs &a) -> std::vector<Value *> {
      Value *x = a.x(0), *w = a.x(1);
      if (w->type().rank() != 2 || x->type().rank() < 1) unsupported(a.op, "a 1-D weight");
      std::vector<Value *> r(a.op.numOperands(), nullptr);
      if (a.need[0]) r[0] = sumTo(a, a.b.op("matmul", {a.g, w}), x);
      if (a.need[1]) {
        const int64_t in = staticShape(a.op, w)[1], out = staticShape(a.op, w)[0];
        Value *g2 = a.un("reshape", a.g, {{"shape", Ints{-1, out}}});
        Value *x2 = a.un("reshape", x, {{"shape", Ints{-1, in}}});
        r[1] = castTo(a.b, a.b.op("mm", {a.un("t", g2), x2}), w->type().dtype());
      }
      if (a.op.numOperands() > 2 && a.need[2]) r[2] = sumTo(a, a.g, a.x(2));
      return r;
    };
    t["addmm"] = [](RuleArgs &a) -> std::vector<Value *> {
      const Attr *be = a.op.attrOrNull("beta"), *al = a.op.attrOrNull("alpha");
      const double beta = be ? be->asNumber() : 1.0, alpha = al ? al->asNumber() : 1.0;
      Value *g = alpha == 1.0 ? a.g : a.mul(a.g, a.f(alpha));
      std::vector<Value *> r(3, nullptr);
      if (a.need[0])
        r[0] = beta == 0.0 ? nullptr : sumTo(a, beta == 1.0 ? a.g : a.mul(a.g, a.f(beta)), a.x(0));
      if (a.need[1]) r[1] = a.b.op("mm", {g, a.un("t", a.x(2))});
      if (a.need[2]) r[2] = a.b.op("mm", {a.un("t", a.x(1)), g});
      return r;
    };
    // beta·self + alpha·bmm(b1, b2) (BLOOM's alibi scores): addmm's rule over batches.
    t["baddbmm"] = [](RuleArgs &a) -> std::vector<Value *> {
      const Attr *be = a.op.attrOrNull("beta"), *al = a.op.attrOrNull("alpha");
      const double beta = be ? be->asNumber() : 1.0, alpha = al ? al->asNumber() : 1.0;
      Value *g = alpha == 1.0 ? a.g : a.mul(a.g, a.f(alpha));
      auto tr = [&](Value *v) {
        return a.un("transpose", v, {{"dim0", int64_t(1)}, {"dim1", int64_t(2)}});
      };
      std::vector<Value *> r(3, nullptr);
      if (a.need[0] && beta != 0.0)
        r[0] = sumTo(a, beta == 1.0 ? a.g : a.mul(a.g, a.f(beta)), a.x(0));
      if (a.need[1]) r[1] = castTo(a.b, a.b.op("bmm", {g, tr(a.x(2))}), a.x(1)->type().dtype());
      if (a.need[2]) r[2] = castTo(a.b, a.b.op("bmm", {tr(a.x(1)), g}), a.x(2)->type().dtype());
      return r;
    };
    // Grouped product (mixture-of-experts): per group, g·W_e^T and x_e^T·g; offs has none.
    t["grouped_mm"] = [](RuleArgs &a) -> std::vector<Value *> {
      std::vector<Value *> r(3, nullptr);
      if (a.need[0]) {
        Value *wt = a.un("transpose", a.x(1), {{"dim0", int64_t(1)}, {"dim1", int64_t(2)}});
        r[0] = a.b.op("grouped_mm", {a.g, wt, a.x(2)});
      }
      if (a.need[1]) r[1] = a.b.op("grouped_mm_weight", {a.x(0), a.g, a.x(2)});
      return r;
    };
    // -- normalization and embedding --
    t["layer_norm"] = [](RuleArgs &a) -> std::vector<Value *> {
      Value *x = a.x(0);
      const int64_t rank = x->type().rank();
      const int64_t k = static_cast<int64_t>(a.op.attr("normalized_shape").asInts().size());
      const Attr *e = a.op.attrOrNull("eps");
      const double eps = e ? e->asNumber() : 1e-5;
      Ints norm, lead;
      for (int64_t d = 0; d < rank; ++d)
        (d >= rank - k ? norm : lead).push_back(d);
      // Recomputed in the backward from x: mean, 1/std and the normalized input.
      auto meanOver = [&](Value *v) {
        return a.b.op("mean", {v}, {{"dims", norm}, {"keepdim", true}});
      };
      Value *centered = a.bin("sub", x, meanOver(x));
      Value *rstd = a.un("rsqrt", a.bin("add", meanOver(a.mul(centered, centered)), a.f(eps)));
      Value *xhat = a.mul(centered, rstd);
      Value *w = a.op.numOperands() > 1 && a.x(1)->type().isTensor() ? a.x(1) : nullptr;
      Value *b = a.op.numOperands() > 2 && a.x(2)->type().isTensor() ? a.x(2) : nullptr;
      std::vector<Value *> r(a.op.numOperands(), nullptr);
      auto sumLead = [&](Value *v) {
        return lead.empty() ? v : a.b.op("sum", {v}, {{"dims", lead}, {"keepdim", false}});
      };
      if (w && a.need[1]) r[1] = sumLead(a.mul(a.g, xhat));
      if (b && a.need[2]) r[2] = sumLead(a.g);
      if (a.need[0]) {
        Value *gh = w ? a.mul(a.g, w) : a.g;
        Value *inner =
            a.bin("sub", a.bin("sub", gh, meanOver(gh)), a.mul(xhat, meanOver(a.mul(gh, xhat))));
        r[0] = a.mul(inner, rstd);
      }
      return r;
    };
    t["embedding"] = [](RuleArgs &a) -> std::vector<Value *> {
      Value *w = a.x(0), *idx = a.x(1);
      const Attr *pi = a.op.attrOrNull("padding_idx");
      const int64_t pad = pi ? pi->asInt() : -1;
      Value *g = a.g;
      if (pad >= 0) { // rows of padding_idx get no gradient, as in torch
        Value *isPad =
            a.un("unsqueeze", a.bin("eq", idx, a.b.constantInt(pad)), {{"dim", int64_t(-1)}});
        g = a.b.op("masked_fill", {g, isPad, a.f(0.0)});
      }
      Value *zeros = a.un("zeros_like", w);
      return {a.b.op("index_put", {zeros, g, idx}, {{"accumulate", true}}), nullptr};
    };
    // out[i][j] = x[index[i][j]][j] (dim 0): each gradient element adds into the element it was
    // read from (an index read twice accumulates; F.cross_entropy picks one class per row).
    t["gather"] = [](RuleArgs &a) -> std::vector<Value *> {
      Value *zeros = a.un("zeros_like", a.x(0));
      return {a.b.op("scatter_add", {zeros, a.x(1), a.g}, {{"dim", a.op.attr("dim").asInt()}}),
              nullptr};
    };
    autodiff_rules::addMovementRules(t); // stack, repeat, pad, roll, cumsum...
    autodiff_rules::addMathRules(t);     // sin, clamp, maximum, amax, var, rms_norm...
    autodiff_rules::addNnRules(t);       // conv, pooling, batch_norm: autodiff_rules_nn.cpp
    return t;
  }();
  return table;
}

/// Ops with several results whose rules read RuleArgs::gs.
bool multiResultRule(std::string_view name) {
  return name == "split" || name == "chunk" || name == "split_with_sizes" || name == "unbind" ||
         name == "custom_vjp" || name == "topk" || name == "sort" ||
         autodiff_rules::nnMultiResultRule(name);
}

/// The gradients of a custom_vjp's operands: its backward region copied before `before`, with
/// the saved values its inlined forward yielded (`yielded`: outputs, then saved) and the
/// results' gradients, zeros where none reaches a result (PyTorch materializes them so too).
/// A `none` gradient is none (nullptr).
std::vector<Value *> customVjpRule(RuleArgs &a, const std::vector<Value *> &yielded, Block *into,
                                   Op *before) {
  const Op &op = a.op;
  const Block &bwd = *op.region(1);
  const size_t outputs = op.numResults(), saved = yielded.size() - outputs;
  std::unordered_map<const Value *, Value *> map;
  for (size_t k = 0; k < saved; ++k)
    map[bwd.argument(k)] = yielded[outputs + k];
  for (size_t i = 0; i < outputs; ++i)
    map[bwd.argument(saved + i)] = a.gs[i] ? a.gs[i] : a.un("zeros_like", yielded[i]);
  std::vector<Value *> grads = copyBlockOps(bwd, *into, before, map);
  for (Value *&g : grads)
    if (g->type().kind() == TypeKind::None) g = nullptr;
  return grads;
}

/// Ops whose results never carry a gradient (integer/bool results are already excluded): those
/// that read only their operands' shapes (zeros_like, new_zeros, size), histc's counts, and
/// `x.detach()` (an alias the frontend marks `autodiff.stop`).
bool stopsGradient(const Op &op) {
  if (op.hasAttr("autodiff.stop")) return true;
  // An in-place fill of a tensor autograd tracks (`t.zero_()`, `t[...] = 7`; the frontend marks
  // it): eager records it, so the result requires grad and its gradient to t is zero.
  if (op.hasAttr("autodiff.fill")) return false;
  return op.def().has(kShapeOnly) || op.name() == "histc"; // histc: as in eager
}

void checkDifferentiable(const Graph &g) {
  g.walk([](Op *op) {
    // A custom_vjp's regions are its forward and its rule (their ops are checked in turn).
    if (op->numRegions() > 0 && op->name() != "custom_vjp")
      unsupported(*op, "control flow is not differentiated");
    if (op->def().has(kInPlace)) unsupported(*op, "an in-place op");
    // A call into PyTorch is fine while no gradient flows through it (dropout's noise):
    // buildJoint refuses one that a gradient reaches.
    if (op->def().has(kSideEffect) && !op->def().has(kTerminator) && op->name() != "external_call")
      unsupported(*op, "an op with side effects");
  });
}

struct Joint {
  std::unique_ptr<Graph> graph;
  size_t numInputs = 0, numOutputs = 0;
  std::vector<size_t> gradOutputs, wrt;
  std::vector<Value *> computeInForward; // rules' RuleArgs::computeInForward
};

/// For each of `outs`, the positions in `wrt` whose inputs it depends on through values that
/// carry a gradient (`needs`): the inputs autograd connects it to.
std::vector<std::vector<size_t>> reachedInputs(const Graph &g, const std::vector<size_t> &wrt,
                                               const std::unordered_set<const Value *> &needs,
                                               const std::vector<Value *> &outs) {
  const size_t words = (wrt.size() + 63) / 64;
  std::unordered_map<const Value *, std::vector<uint64_t>> deps;
  for (size_t k = 0; k < wrt.size(); ++k) {
    auto &bits = deps[g.input(wrt[k])];
    bits.resize(words);
    bits[k / 64] |= uint64_t{1} << (k % 64);
  }
  for (Op *op : *g.body()) {
    // A custom Function's backward that yields `none` for an input (`return g, None`) does not
    // connect that input, as autograd does not.
    const Op *yield = op->name() == "custom_vjp" ? op->region(1)->terminator() : nullptr;
    for (const auto &r : op->results()) {
      if (!needs.count(r.get())) continue;
      std::vector<uint64_t> bits(words);
      for (size_t k = 0; k < op->numOperands(); ++k) {
        Value *v = op->operand(k);
        if (yield && k < yield->numOperands() && yield->operand(k)->type().kind() == TypeKind::None)
          continue;
        if (auto it = deps.find(v); it != deps.end() && needs.count(v))
          for (size_t w = 0; w < words; ++w)
            bits[w] |= it->second[w];
      }
      deps[r.get()] = std::move(bits);
    }
  }
  std::vector<std::vector<size_t>> reach;
  for (const Value *out : outs) {
    std::vector<size_t> &ks = reach.emplace_back();
    if (auto it = deps.find(out); it != deps.end())
      for (size_t k = 0; k < wrt.size(); ++k)
        if (it->second[k / 64] >> (k % 64) & 1) ks.push_back(k);
  }
  return reach;
}

/// The gradient of an input no gradient reaches: zeros of its shape, so the backward does not
/// read the input (its training Function would save it, and the caller writing it in place
/// before backward, e.g. `v += w` after a graph break, would then raise). A symbolic shape is
/// the op's symbolic size; differentiate() passes the backward a carrier that binds its symbols.
Value *zerosGradient(Builder &b, Value *input) {
  const Type &t = input->type();
  return b.op("zeros", {}, {{"shape", makeSizeAttr(t.shape())}, {"dtype", t.dtype()}});
}

/// The symbols that dims of `t` equal to one symbol bind (those a graph input binds).
std::set<std::string> boundSymbols(const Type &t) {
  std::set<std::string> names;
  if (!t.isTensor()) return names;
  SymbolBindings any;
  bindShapeSymbols(t.shape(), std::vector<int64_t>(t.shape().size(), 0), any);
  for (const auto &[sym, v] : any)
    names.insert(sym);
  return names;
}

/// The values that carry a gradient from the inputs marked in requiresGrad (autograd's
/// connected values); `wrt` gets those inputs. `refuseCalls`: a PyTorch call a gradient reaches
/// throws AutodiffUnsupported (it has no rule).
std::unordered_set<const Value *> gradientCarriers(const Graph &g,
                                                   const std::vector<bool> &requiresGrad,
                                                   std::vector<size_t> &wrt, bool refuseCalls) {
  std::unordered_set<const Value *> needs;
  // An input no op reads gets no gradient (None, as in eager) rather than a zeros output: an
  // nn.LSTM's parameters are inputs twice, as `_flat_weights[i]` and as `weight_ih_l0`...
  for (size_t i = 0; i < g.numInputs(); ++i)
    if (i < requiresGrad.size() && requiresGrad[i] && isFloatTensor(g.input(i)) &&
        g.input(i)->hasUses()) {
      needs.insert(g.input(i));
      wrt.push_back(i);
    }
  for (Op *op : *g.body()) {
    if (op->def().has(kTerminator) || stopsGradient(*op)) continue;
    bool any = std::any_of(op->operands().begin(), op->operands().end(),
                           [&](Value *v) { return needs.count(v) > 0; });
    if (!any) continue;
    if (refuseCalls && op->name() == "external_call") {
      const Attr *name = op->attrOrNull("name");
      const std::string what = name && !name->asStr().empty() ? " " + name->asStr() : "";
      unsupported(*op, "a call into PyTorch" + what + " (no rule)");
    }
    for (size_t ri = 0; ri < op->numResults(); ++ri)
      if (isFloatTensor(op->result(ri)) && autodiff_rules::resultCarriesGradient(*op, ri))
        needs.insert(op->result(ri));
  }
  return needs;
}

Joint buildJoint(const Graph &src, const std::vector<bool> &requiresGrad,
                 const std::vector<bool> &outputsWithoutGradient = {}) {
  Joint j;
  j.graph = src.clone();
  Graph &g = *j.graph;
  // Attention as matmul/softmax/matmul, each with a rule (f32; other dtypes keep the op, which
  // has none, and run under PyTorch's autograd).
  PassContext decompose;
  runDecomposeAttention(g, decompose);
  checkDifferentiable(g);
  j.numInputs = g.numInputs();
  std::unordered_set<const Value *> needs = gradientCarriers(g, requiresGrad, j.wrt, true);
  Op *ret = g.body()->terminator();
  std::vector<Op *> ops;
  for (Op *op : *g.body())
    if (op != ret) ops.push_back(op);
  const std::vector<Value *> outs = g.outputs();
  j.numOutputs = outs.size();
  std::unordered_map<const Value *, Value *> grads;
  Builder b(g.body(), ret);
  auto accumulate = [&](const Value *v, Value *gv) {
    auto [it, fresh] = grads.emplace(v, gv);
    if (!fresh) it->second = b.op("add", {it->second, gv});
  };
  auto takesGradient = [&](size_t i) {
    return needs.count(outs[i]) &&
           !(i < outputsWithoutGradient.size() && outputsWithoutGradient[i]);
  };
  for (size_t i = 0; i < outs.size(); ++i)
    if (takesGradient(i)) {
      j.gradOutputs.push_back(i);
      Value *gin = g.addInput(outs[i]->type(), "grad_" + std::to_string(i));
      accumulate(outs[i], gin);
    }
  auto accumulateAll = [&](Op *op, const std::vector<Value *> &operandGrads) {
    for (size_t k = 0; k < operandGrads.size() && k < op->numOperands(); ++k)
      if (operandGrads[k] && needs.count(op->operand(k))) {
        if (operandGrads[k]->type() != op->operand(k)->type())
          unsupported(*op, "the gradient of operand " + std::to_string(k) + " has type " +
                               operandGrads[k]->type().str() + ", not " +
                               op->operand(k)->type().str());
        accumulate(op->operand(k), operandGrads[k]);
      }
  };
  std::unordered_set<const Op *> inlined; // custom_vjp ops whose forward is inlined
  for (auto it = ops.rbegin(); it != ops.rend(); ++it) {
    Op *op = *it;
    if (op->numResults() == 0) continue;
    auto gi = grads.find(op->result(0));
    bool hasGrad = false;
    for (const auto &r : op->results())
      hasGrad |= grads.count(r.get()) > 0;
    if (!hasGrad) continue;
    std::vector<Value *> resultGrads;
    for (const auto &r : op->results()) {
      auto it = grads.find(r.get());
      resultGrads.push_back(it != grads.end() ? it->second : nullptr);
    }
    if (op->numResults() != 1 && !multiResultRule(op->name()))
      unsupported(*op, "an op with several results");
    b.setLoc(op->loc());
    Value *g0 = gi != grads.end() ? gi->second : b.op("zeros_like", {op->result(0)});
    RuleArgs args{b, *op, g0, resultGrads, {}, &j.computeInForward};
    bool anyNeed = false;
    for (Value *v : op->operands()) {
      args.need.push_back(needs.count(v) > 0);
      anyNeed |= args.need.back();
    }
    if (!anyNeed) continue;
    if (op->name() == "custom_vjp") { // the Function's own backward is the rule
      inlined.insert(op);
      accumulateAll(op, customVjpRule(args, inlineCustomVjpForward(*op), g.body(), ret));
      continue;
    }
    auto rule = ruleTable().find(op->name());
    if (rule == ruleTable().end()) unsupported(*op, "no derivative rule for '" + op->name() + "'");
    accumulateAll(op, rule->second(args));
  }
  // Functions no gradient reached compute their forward like other ops; then none is left.
  for (Op *op : ops)
    if (op->name() == "custom_vjp") {
      if (!inlined.count(op)) inlineCustomVjpForward(*op);
      g.body()->erase(op);
    }
  b.setLoc(ret->loc());
  // The outputs again: an inlined custom_vjp's results were replaced in them.
  std::vector<Value *> results = g.outputs();
  for (size_t i : j.wrt) {
    auto it = grads.find(g.input(i));
    results.push_back(it != grads.end() ? it->second : zerosGradient(b, g.input(i)));
  }
  ret->setOperands(results);
  // Causal attention's backward products, marked here: after the partition the backward sees
  // the saved probabilities as an input, not as a causal softmax.
  runCausalProducts(g, decompose);
  return j;
}

Op *copyOp(Block *into, const Op *op, std::unordered_map<const Value *, Value *> &map) {
  std::vector<Value *> operands;
  for (Value *v : op->operands())
    operands.push_back(map.at(v));
  std::vector<Type> types;
  for (const auto &r : op->results())
    types.push_back(r->type());
  auto copy = std::make_unique<Op>(&op->def(), operands, types, op->attrs(), op->loc());
  copy->removeAttr("autodiff.recompute"); // the partition's mark, done with
  Op *placed = into->push_back(std::move(copy));
  for (size_t i = 0; i < op->numResults(); ++i) {
    placed->result(i)->setName(op->result(i)->name());
    map[op->result(i)] = placed->result(i);
  }
  return placed;
}

/// Whether the backward recomputes `op`'s results rather than saving them: an op of an
/// activation-checkpointed region (the frontend marks `autodiff.recompute`), pure, whose results
/// no forward op outside the region reads (a value leaving the region is saved, as the ops
/// after it keep it in eager).
bool recomputedInBackward(const Op &op, const std::unordered_set<const Op *> &fwd) {
  if (!op.hasAttr("autodiff.recompute") || !op.def().isPure() || op.numRegions() > 0 ||
      op.name() == "external_call")
    return false;
  for (const auto &r : op.results())
    for (const Use &u : r->uses())
      if ((fwd.count(u.user) && !u.user->hasAttr("autodiff.recompute")) ||
          u.user->def().has(kTerminator))
        return false;
  return true;
}

} // namespace

std::vector<std::vector<size_t>> gradientReach(const Graph &g,
                                               const std::vector<bool> &requiresGrad) {
  std::vector<size_t> wrt;
  const std::unordered_set<const Value *> needs = gradientCarriers(g, requiresGrad, wrt, false);
  std::vector<std::vector<size_t>> reach = reachedInputs(g, wrt, needs, g.outputs());
  for (std::vector<size_t> &inputs : reach)
    for (size_t &k : inputs)
      k = wrt[k];
  return reach;
}

std::unique_ptr<Graph> jointGraph(const Graph &g, const std::vector<bool> &requiresGrad,
                                  std::vector<size_t> *gradOutputs, std::vector<size_t> *wrt) {
  Joint j = buildJoint(g, requiresGrad);
  if (gradOutputs) *gradOutputs = j.gradOutputs;
  if (wrt) *wrt = j.wrt;
  return std::move(j.graph);
}

AutodiffGraphs differentiate(const Graph &src, const std::vector<bool> &requiresGrad,
                             const std::vector<bool> &outputsWithoutGradient) {
  Joint j = buildJoint(src, requiresGrad, outputsWithoutGradient);
  Graph &g = *j.graph;
  Op *ret = g.body()->terminator();
  const std::vector<Value *> results = g.outputs();
  // Forward: the ops the original outputs need.
  std::unordered_set<const Op *> fwd, bwd;
  std::vector<const Value *> work(results.begin(),
                                  results.begin() + static_cast<long>(j.numOutputs));
  while (!work.empty()) {
    const Value *v = work.back();
    work.pop_back();
    Op *def = v->definingOp();
    if (!def || !fwd.insert(def).second) continue;
    for (Value *o : def->operands())
      work.push_back(o);
  }
  // Values rules asked for in the forward join it with the ops they need, unless one of those
  // reads an output's gradient (they must be computable from the forward's inputs alone).
  for (const Value *v : j.computeInForward) {
    std::unordered_set<const Op *> need;
    std::vector<const Value *> todo = {v};
    bool forwardOnly = true;
    while (!todo.empty() && forwardOnly) {
      const Value *u = todo.back();
      todo.pop_back();
      Op *def = u->definingOp();
      if (!def) {
        forwardOnly = u->index() < j.numInputs;
        continue;
      }
      if (fwd.count(def) || !need.insert(def).second) continue;
      for (Value *o : def->operands())
        todo.push_back(o);
    }
    if (forwardOnly) fwd.insert(need.begin(), need.end());
  }
  // Backward: every other op the gradients need; forward values it reads are saved (constants,
  // which have no operands, are rebuilt in the backward instead).
  std::vector<const Value *> savedValues;
  std::unordered_set<const Op *> recomputed; // forward ops the backward runs again
  std::set<size_t> savedInputs;
  std::unordered_set<const Value *> seen;
  work.assign(results.begin() + static_cast<long>(j.numOutputs), results.end());
  while (!work.empty()) {
    const Value *v = work.back();
    work.pop_back();
    if (!seen.insert(v).second) continue;
    Op *def = v->definingOp();
    if (!def) {
      if (v->index() < j.numInputs) savedInputs.insert(v->index());
      continue;
    }
    // (A PyTorch call in the forward, e.g. dropout's noise, is saved: calling it again would
    // draw other random numbers.) Values of a checkpointed region are recomputed instead.
    if (fwd.count(def) && (def->numOperands() > 0 || def->name() == "external_call")) {
      if (!recomputedInBackward(*def, fwd)) {
        savedValues.push_back(v);
        continue;
      }
      recomputed.insert(def);
    }
    if (!bwd.insert(def).second) continue;
    for (Value *o : def->operands())
      work.push_back(o);
  }
  // Saved values in forward order (deterministic signatures).
  std::unordered_map<const Op *, size_t> order;
  for (Op *op : *g.body())
    order[op] = order.size();
  std::sort(savedValues.begin(), savedValues.end(), [&](const Value *x, const Value *y) {
    size_t ox = order.at(x->definingOp()), oy = order.at(y->definingOp());
    return ox != oy ? ox < oy : x->index() < y->index();
  });

  // Symbols the backward's sizes name that none of its inputs binds (an unreached input's zeros
  // gradient of a symbolic shape): a forward input binding each is passed as a shape carrier.
  std::set<std::string> bound;
  for (const Value *v : savedValues)
    bound.merge(boundSymbols(v->type()));
  for (size_t i : savedInputs)
    bound.merge(boundSymbols(g.input(i)->type()));
  for (size_t i = j.numInputs; i < g.numInputs(); ++i)
    bound.merge(boundSymbols(g.input(i)->type()));
  std::set<std::string> unbound;
  for (const Op *op : bwd)
    for (std::string &sym : symbolicSizeSymbols(*op))
      if (!bound.count(sym)) unbound.insert(std::move(sym));
  std::vector<size_t> shapeInputs;
  for (size_t i = 0; i < j.numInputs && !unbound.empty(); ++i) {
    std::set<std::string> syms = boundSymbols(g.input(i)->type());
    if (std::erase_if(unbound, [&](const std::string &s) { return syms.count(s) > 0; }))
      shapeInputs.push_back(i);
  }

  AutodiffGraphs r;
  r.numOutputs = j.numOutputs;
  r.shapeInputs = shapeInputs;
  r.numSaved = savedValues.size();
  r.savedInputs.assign(savedInputs.begin(), savedInputs.end());
  r.gradOutputs = j.gradOutputs;
  r.wrt = j.wrt;

  r.forward = std::make_unique<Graph>(src.name() + ".forward");
  std::unordered_map<const Value *, Value *> fmap;
  for (size_t i = 0; i < j.numInputs; ++i) { // (the same tensors: their layout hints hold)
    fmap[g.input(i)] = r.forward->addInput(g.input(i)->type(), g.input(i)->name());
    fmap[g.input(i)]->setUnitDimHint(g.input(i)->unitDimHint());
  }
  for (Op *op : *g.body())
    if (op != ret && fwd.count(op)) copyOp(r.forward->body(), op, fmap);
  std::vector<Value *> fouts;
  for (size_t i = 0; i < j.numOutputs; ++i)
    fouts.push_back(fmap.at(results[i]));
  for (const Value *v : savedValues)
    fouts.push_back(fmap.at(v));
  r.forward->body()->push_back(
      std::make_unique<Op>(&ret->def(), fouts, std::vector<Type>{}, AttrMap{}, ret->loc()));

  r.backward = std::make_unique<Graph>(src.name() + ".backward");
  std::unordered_map<const Value *, Value *> bmap;
  for (const Value *v : savedValues)
    bmap[v] = r.backward->addInput(v->type(), v->name().empty() ? "saved" : v->name());
  for (size_t i : r.savedInputs) {
    bmap[g.input(i)] = r.backward->addInput(g.input(i)->type(), g.input(i)->name());
    bmap[g.input(i)]->setUnitDimHint(g.input(i)->unitDimHint());
  }
  for (size_t i : r.shapeInputs) // (bmap keeps the input itself: no op reads the carrier)
    r.backward->addInput(g.input(i)->type(), g.input(i)->name() + "_shape");
  for (size_t i = j.numInputs; i < g.numInputs(); ++i)
    bmap[g.input(i)] = r.backward->addInput(g.input(i)->type(), g.input(i)->name());
  // Recomputed ops go right before their first reader, so that a checkpointed region's values
  // live while its gradients are computed, not through the whole backward.
  std::function<Value *(const Value *)> ready = [&](const Value *v) -> Value * {
    if (auto it = bmap.find(v); it != bmap.end()) return it->second;
    const Op *def = v->definingOp();
    for (const Value *o : def->operands())
      ready(o);
    copyOp(r.backward->body(), def, bmap);
    return bmap.at(v);
  };
  for (Op *op : *g.body()) {
    if (op == ret || !bwd.count(op) || recomputed.count(op)) continue;
    for (const Value *o : op->operands())
      ready(o);
    copyOp(r.backward->body(), op, bmap);
  }
  std::vector<Value *> bouts;
  for (size_t i = j.numOutputs; i < results.size(); ++i)
    bouts.push_back(ready(results[i]));
  r.backward->body()->push_back(
      std::make_unique<Op>(&ret->def(), bouts, std::vector<Type>{}, AttrMap{}, ret->loc()));
  return r;
}

std::vector<std::string> differentiableOps() {
  std::vector<std::string> names;
  for (const auto &[name, rule] : ruleTable())
    names.push_back(name);
  return names;
}

/// The table entry: with `wrt` empty (the default) it leaves the graph alone; else it replaces
/// the graph by the joint, forward or backward graph (for xjit-opt and lit tests).
bool runAutodiff(Graph &g, PassContext &ctx) {
  const std::string &wrt = ctx.option("wrt");
  if (wrt.empty()) return false;
  std::vector<bool> flags(g.numInputs(), wrt == "all");
  if (wrt != "all") {
    std::stringstream ss(wrt);
    std::string item;
    while (std::getline(ss, item, ','))
      if (size_t i = std::stoul(item); i < flags.size()) flags[i] = true;
  }
  const std::string &part = ctx.option("part");
  std::unique_ptr<Graph> out;
  try {
    if (part == "joint") {
      out = jointGraph(g, flags);
    } else {
      AutodiffGraphs r = differentiate(g, flags);
      out = std::move(part == "forward" ? r.forward : r.backward);
      ctx.count("saved-values", static_cast<int64_t>(r.numSaved));
    }
  } catch (const AutodiffUnsupported &ex) {
    throw Error(ErrorKind::User, std::string("autodiff: ") + ex.what());
  }
  out->setName(g.name());
  g = std::move(*out);
  ctx.count("graphs-differentiated");
  return true;
}

} // namespace xjit::passes
