// The canonicalization rules as data: one row per rule with the ops it applies to and its
// rewrite. Every rewrite keeps each result's type exactly and its value bit-identical, except
// where a row's comment says otherwise (signed zero of x+0, pow(x,0.5) at -inf and -0).
#include "canonicalize.h"

#include "constant_value.h"
#include "xjit/ir/op_registry.h"
#include "xjit/ir/sym_attr.h"

#include <cmath>
#include <numeric>
#include <set>

namespace xjit::passes {
namespace {

// ---- helpers ----

bool isSplat(const Value *v, double k) {
  auto s = splatValue(v);
  return s && *s == k;
}

Op *producer(const Value *v, std::initializer_list<std::string_view> names) {
  Op *def = v->definingOp();
  if (!def) return nullptr;
  for (std::string_view n : names)
    if (def->name() == n) return def;
  return nullptr;
}

double numberAttr(const Op &op, std::string_view name, double fallback) {
  const Attr *a = op.attrOrNull(name);
  if (!a) return fallback;
  if (a->kind() == AttrKind::Int) return static_cast<double>(a->asInt());
  if (a->kind() == AttrKind::Float) return a->asFloat();
  return fallback;
}

int64_t intAttr(const Op &op, std::string_view name, int64_t fallback) {
  const Attr *a = op.attrOrNull(name);
  return a && a->kind() == AttrKind::Int ? a->asInt() : fallback;
}

/// A Python int/float scalar given by a `constant` op (not bool: torch special-cases bools).
std::optional<double> scalarConstant(const Value *v) {
  const Op *def = v->definingOp();
  if (!def || def->name() != "constant") return std::nullopt;
  const Attr *a = def->attrOrNull("value");
  if (!a) return std::nullopt;
  if (a->kind() == AttrKind::Int) return static_cast<double>(a->asInt());
  if (a->kind() == AttrKind::Float) return a->asFloat();
  return std::nullopt;
}

std::optional<bool> boolConstant(const Value *v) {
  const Op *def = v->definingOp();
  if (!def || def->name() != "constant") return std::nullopt;
  const Attr *a = def->attrOrNull("value");
  if (!a || a->kind() != AttrKind::Bool) return std::nullopt;
  return a->asBool();
}

std::optional<int64_t> intConstant(const Value *v) {
  const Op *def = v->definingOp();
  if (!def || def->name() != "constant") return std::nullopt;
  const Attr *a = def->attrOrNull("value");
  if (!a || a->kind() != AttrKind::Int) return std::nullopt;
  return a->asInt();
}

bool isIntegerTyped(const Type &t) {
  if (t.isTensor()) return isIntegral(t.dtype());
  return t.kind() == TypeKind::Int;
}

/// The permutation a permute-like view applies (result dim i is input dim perm[i]), read off
/// its own type inference on an input with distinct dims, so every form (permute, transpose,
/// t, movedim) is covered by its registry row.
std::optional<std::vector<int64_t>> permutationOf(const Op &op) {
  const Type &in = op.operand(0)->type();
  if (!in.isTensor() || !op.def().infer) return std::nullopt;
  // The common forms directly (the probe below allocates an op).
  int64_t rank = in.rank();
  auto norm = [rank](int64_t d) { return d < 0 ? d + rank : d; };
  if (op.name() == "transpose" && rank > 0) {
    int64_t a = norm(intAttr(op, "dim0", 0)), b = norm(intAttr(op, "dim1", 0));
    if (a < 0 || b < 0 || a >= rank || b >= rank) return std::nullopt;
    std::vector<int64_t> perm(static_cast<size_t>(rank));
    std::iota(perm.begin(), perm.end(), 0);
    std::swap(perm[static_cast<size_t>(a)], perm[static_cast<size_t>(b)]);
    return perm;
  }
  if (op.name() == "permute") {
    const Attr *dims = op.attrOrNull("dims");
    if (!dims || dims->kind() != AttrKind::Ints ||
        dims->asInts().size() != static_cast<size_t>(rank))
      return std::nullopt;
    std::vector<int64_t> perm;
    std::vector<bool> seen(static_cast<size_t>(rank), false);
    for (int64_t d : dims->asInts()) {
      d = norm(d);
      if (d < 0 || d >= rank || seen[static_cast<size_t>(d)]) return std::nullopt;
      seen[static_cast<size_t>(d)] = true;
      perm.push_back(d);
    }
    return perm;
  }
  Shape probe;
  for (int64_t i = 0; i < in.rank(); ++i)
    probe.push_back(DimExpr(1000 + i));
  Block scratch;
  Value *arg = scratch.addArgument(in.withShape(probe));
  Op copy(&op.def(), {arg}, {}, op.attrs());
  std::vector<Type> out;
  try {
    out = op.def().infer(copy);
  } catch (const std::exception &) {
    return std::nullopt;
  }
  if (out.size() != 1 || !out[0].isTensor() || out[0].rank() != in.rank()) return std::nullopt;
  std::vector<int64_t> perm;
  for (const DimExpr &d : out[0].shape())
    perm.push_back(d.value() - 1000);
  return perm;
}

bool isIdentity(const std::vector<int64_t> &perm) {
  for (size_t i = 0; i < perm.size(); ++i)
    if (perm[i] != static_cast<int64_t>(i)) return false;
  return true;
}

/// Every value of dtype `from` is exactly representable in `to`.
bool exactlyWidens(DType from, DType to) {
  if (from == to || from == DType::Bool) return true;
  auto in = [&](std::initializer_list<DType> ds) {
    for (DType d : ds)
      if (d == to) return true;
    return false;
  };
  switch (from) {
  case DType::U8:
    return in(
        {DType::I16, DType::I32, DType::I64, DType::F16, DType::BF16, DType::F32, DType::F64});
  case DType::I8:
    return in(
        {DType::I16, DType::I32, DType::I64, DType::F16, DType::BF16, DType::F32, DType::F64});
  case DType::I16: return in({DType::I32, DType::I64, DType::F32, DType::F64});
  case DType::I32: return in({DType::I64, DType::F64});
  case DType::F16:
  case DType::BF16: return in({DType::F32, DType::F64});
  case DType::F32: return to == DType::F64;
  default: return false;
  }
}

// Reshape-like ops: same elements in row-major order, new sizes. These never copy (they view
// or fail); reshape and flatten may copy a non-contiguous input.
const std::initializer_list<std::string_view> kReshapeLike = {"reshape",   "view",    "flatten",
                                                              "unflatten", "squeeze", "unsqueeze"};
bool mayCopy(const Op &op) { return op.name() == "reshape" || op.name() == "flatten"; }

const std::initializer_list<std::string_view> kPermuteLike = {"permute", "transpose", "t",
                                                              "movedim"};

// ---- arithmetic identities ----

// x * 1, 1 * x -> x (cast/expanded to the product's type when promotion or broadcasting
// changes it: exact, multiplying by one rounds nothing).
bool mulByOne(Op &op, Rewriter &rw) {
  for (size_t i = 0; i < 2; ++i) {
    if (!isSplat(op.operand(i), 1.0)) continue;
    if (rw.replace(rw.coerce(op.operand(1 - i), op.result(0)->type()))) return true;
    rw.rollback();
  }
  return false;
}

// x + a*0 -> x (a finite), 0 + 1*x -> x, x - a*0 -> x. For floats, -0.0 + 0.0 is +0.0 while
// the rewrite keeps -0.0: the one accepted difference (as PyTorch's inductor does), invisible
// to comparisons and arithmetic except through 1/x and copysign.
bool addZero(Op &op, Rewriter &rw) {
  double alpha = numberAttr(op, "alpha", 1.0);
  if (std::isfinite(alpha) && isSplat(op.operand(1), 0.0)) {
    if (rw.replace(rw.coerce(op.operand(0), op.result(0)->type()))) return true;
    rw.rollback();
  }
  if (op.name() == "add" && alpha == 1.0 && isSplat(op.operand(0), 0.0))
    return rw.replace(rw.coerce(op.operand(1), op.result(0)->type()));
  return false;
}

// x - x -> 0 for integers only (for floats inf - inf and NaN - NaN are NaN).
bool subSelf(Op &op, Rewriter &rw) {
  if (op.operand(0) != op.operand(1) || numberAttr(op, "alpha", 1.0) != 1.0) return false;
  const Type &t = op.result(0)->type();
  if (!isIntegerTyped(t) || !isIntegerTyped(op.operand(0)->type())) return false;
  if (t.kind() == TypeKind::Int) return rw.replace(rw.constantInt(0));
  return rw.replace(rw.create("zeros_like", {op.operand(0)}));
}

// x / 1 -> x (true division: cast to the float result; floor/trunc only for integers).
bool divByOne(Op &op, Rewriter &rw) {
  if (!isSplat(op.operand(1), 1.0)) return false;
  const Attr *mode = op.attrOrNull("rounding_mode");
  bool trueDiv = !mode || mode->kind() != AttrKind::Str || mode->asStr().empty();
  if (!trueDiv && !isIntegerTyped(op.result(0)->type())) return false;
  return rw.replace(rw.coerce(op.operand(0), op.result(0)->type()));
}

// x / c -> x * (1/c) for a scalar c = ±2^k: 1/c is exact, so both round the same real number
// once and the results are bit-identical. Other divisors are left alone (x * (1/3) is not
// x / 3).
bool divToMul(Op &op, Rewriter &rw) {
  const Attr *mode = op.attrOrNull("rounding_mode");
  if (mode && mode->kind() == AttrKind::Str && !mode->asStr().empty()) return false;
  auto c = scalarConstant(op.operand(1));
  if (!c || *c == 0 || std::fabs(*c) == 1 || !std::isfinite(*c)) return false;
  int exp = 0;
  double mant = std::frexp(*c, &exp);
  if (std::fabs(mant) != 0.5 || exp < -60 || exp > 60) return false;
  return rw.replace(rw.create("mul", {op.operand(0), rw.constantFloat(1.0 / *c)}));
}

// pow(x, 1) -> x; pow(x, 2) -> x * x (exact wherever pow is correctly rounded: always for
// f32/f16/bf16 and integers, whose square is exact in double; f64 pow is within 0.52 ulp, so
// x*x can differ in the last bit, and is the more accurate); pow(x, 0.5) -> sqrt(x) for
// floating x (differs at -inf: pow gives +inf, sqrt NaN; and pow(-0, 0.5) is +0, sqrt -0).
bool powConstant(Op &op, Rewriter &rw) {
  auto e = scalarConstant(op.operand(1));
  if (!e) return false;
  Value *x = op.operand(0);
  const Type &t = op.result(0)->type();
  if (*e == 1.0) return rw.replace(rw.coerce(x, t));
  if (*e == 2.0) {
    Value *xt = x;
    if (x->type().isTensor() && t.isTensor() && x->type().dtype() != t.dtype())
      xt = rw.create("cast", {x}, {{"dtype", Attr(t.dtype())}});
    return rw.replace(rw.create("mul", {xt, xt}));
  }
  if (*e == 0.5 && x->type().isTensor() && isFloating(x->type().dtype()))
    return rw.replace(rw.create("sqrt", {x}));
  return false;
}

// neg(neg(x)), bitwise_not(bitwise_not(x)), logical_not(logical_not(x)) on bool -> x.
bool involution(Op &op, Rewriter &rw) {
  Op *inner = producer(op.operand(0), {op.name()});
  if (!inner) return false;
  Value *x = inner->operand(0);
  if (op.name() == "logical_not" && !(x->type().isTensor() ? x->type().dtype() == DType::Bool
                                                           : x->type().kind() == TypeKind::Bool))
    return false;
  return rw.replace(x);
}

// f(f(x)) -> f(x) for idempotent f (relu, abs, floor, ceil, trunc, sign, round without
// decimals); abs(neg(x)) -> abs(x).
bool idempotentUnary(Op &op, Rewriter &rw) {
  if (op.name() == "round" && intAttr(op, "decimals", 0) != 0) return false;
  if (Op *inner = producer(op.operand(0), {op.name()}); inner && inner->attrs() == op.attrs())
    return rw.replace(inner->result(0));
  if (op.name() == "abs")
    if (Op *neg = producer(op.operand(0), {"neg"}))
      return rw.replace(rw.create("abs", {neg->operand(0)}));
  return false;
}

// where(c, x, x) -> x (broadcast to the result).
bool whereSame(Op &op, Rewriter &rw) {
  if (op.numOperands() != 3 || op.operand(1) != op.operand(2)) return false;
  return rw.replace(rw.coerce(op.operand(1), op.result(0)->type()));
}

// ---- views and copies ----

// Permute-like views with the identity permutation -> x; two in a row -> one permute (or x
// when they cancel). Exact: the composed view has the same sizes and strides.
bool permuteFold(Op &op, Rewriter &rw) {
  auto outer = permutationOf(op);
  if (!outer) return false;
  if (isIdentity(*outer)) return rw.replace(op.operand(0));
  Op *inner = producer(op.operand(0), kPermuteLike);
  if (!inner) return false;
  auto first = permutationOf(*inner);
  if (!first) return false;
  std::vector<int64_t> perm;
  for (int64_t d : *outer)
    perm.push_back((*first)[static_cast<size_t>(d)]);
  Value *x = inner->operand(0);
  if (isIdentity(perm)) return rw.replace(x);
  return rw.replace(rw.create("permute", {x}, {{"dims", Attr(perm)}}));
}

// reshape/view/flatten/unflatten to the operand's own type -> x (a same-size view).
bool reshapeSameShape(Op &op, Rewriter &rw) {
  if (op.result(0)->type() != op.operand(0)->type()) return false;
  return rw.replace(op.operand(0));
}

// reshape(reshape(x)) and other reshape-like chains -> one reshape of x (a view when both
// are views). When x's storage is written in place, a chain with an op that may copy is kept:
// the copy would not see the writes.
bool reshapeChain(Op &op, Rewriter &rw) {
  Op *inner = producer(op.operand(0), kReshapeLike);
  if (!inner) return false;
  Value *x = inner->operand(0);
  bool copies = mayCopy(op) || mayCopy(*inner);
  if (copies && (rw.written(x) || rw.written(op.result(0)))) return false;
  const Type &t = op.result(0)->type();
  if (t == x->type()) return rw.replace(x);
  std::vector<int64_t> shape;
  if (isStaticShape(t.shape())) {
    for (const DimExpr &d : t.shape())
      shape.push_back(d.value());
  } else if (const Attr *a = op.attrOrNull("shape"); a && a->kind() == AttrKind::Ints) {
    shape = a->asInts();
  } else {
    return false;
  }
  return rw.replace(rw.create(copies ? "reshape" : "view", {x}, {{"shape", Attr(shape)}}));
}

// reshape/view with a -1 (or otherwise differently spelled) shape whose result is static ->
// the same op with the static sizes spelled out, so equal reshapes compare equal for CSE.
bool reshapeStaticShape(Op &op, Rewriter &rw) {
  const Type &t = op.result(0)->type();
  const Attr *a = op.attrOrNull("shape");
  if (!isStaticShape(t.shape()) || !a || a->kind() != AttrKind::Ints) return false;
  std::vector<int64_t> shape;
  for (const DimExpr &d : t.shape())
    shape.push_back(d.value());
  if (a->asInts() == shape) return false;
  return rw.replace(rw.create(op.name(), {op.operand(0)}, {{"shape", Attr(shape)}}));
}

// squeeze(unsqueeze(x)), unsqueeze(squeeze(x)) back to x's type -> x: they only add and drop
// size-1 dims, so equal sizes mean the same elements.
bool squeezeUnsqueeze(Op &op, Rewriter &rw) {
  Op *inner = producer(op.operand(0), {op.name() == "squeeze" ? "unsqueeze" : "squeeze"});
  if (!inner || op.result(0)->type() != inner->operand(0)->type()) return false;
  return rw.replace(inner->operand(0));
}

// expand/expand_as to the operand's type -> x; expand(expand(x)) -> expand(x) and
// expand_as(x, y) -> expand(x) (static shape: y's old value need not be kept for its shape).
bool expandFold(Op &op, Rewriter &rw) {
  const Type &t = op.result(0)->type();
  if (t == op.operand(0)->type()) return rw.replace(op.operand(0));
  if (!isStaticShape(t.shape())) return false;
  Op *inner = producer(op.operand(0), {"expand", "expand_as"});
  if (op.name() == "expand" && !inner) return false;
  std::vector<int64_t> shape;
  for (const DimExpr &d : t.shape())
    shape.push_back(d.value());
  Value *x = op.name() == "expand" ? inner->operand(0) : op.operand(0);
  return rw.replace(rw.create("expand", {x}, {{"shape", Attr(shape)}}));
}

// slice(x, d, 0, >= size, 1) and narrow(x, d, 0, size) -> x.
bool sliceIdentity(Op &op, Rewriter &rw) {
  if (hasSymbolicSizes(op)) return false; // intAttr would read a symbolic start as the default
  if (op.result(0)->type() != op.operand(0)->type() || intAttr(op, "start", 0) != 0) return false;
  if (op.name() == "slice" && intAttr(op, "step", 1) != 1) return false;
  return rw.replace(op.operand(0));
}

// alias(x) -> x, but for a detach() that a training step's autodiff must stop at.
bool aliasNoop(Op &op, Rewriter &rw) {
  return !op.hasAttr("autodiff.stop") && rw.replace(op.operand(0));
}

// contiguous(x) -> x when x is freshly computed (kernels return contiguous tensors) or when
// nothing writes x's storage (then a copy and x are indistinguishable).
// True if a `view` reads v, directly or through other views of it: `view` needs strides that
// its shape can be laid over, so the contiguous copy in front of it must stay (GPT-Neo's
// permute(...).contiguous().view(...) failed at run time without it).
bool feedsStrideSensitiveView(const Value *v, int depth = 0) {
  if (depth > 16) return true; // a long chain of views: keep the copy rather than walk on
  for (const Use &u : v->uses()) {
    if (u.user->name() == "view") return true;
    if (u.index == 0 && aliasesOperand(*u.user))
      for (size_t r = 0; r < u.user->numResults(); ++r)
        if (feedsStrideSensitiveView(u.user->result(r), depth + 1)) return true;
  }
  return false;
}

bool contiguousNoop(Op &op, Rewriter &rw) {
  Value *x = op.operand(0);
  const Op *def = x->definingOp();
  bool fresh = def && def->def().isPure() && def->def().kernel && !aliasesOperand(*def) &&
               def->name() != "constant" && def->name() != "tuple_get";
  if (!fresh && (rw.written(x) || rw.written(op.result(0)))) return false;
  // x may be a strided view (a permute): only a fresh result is known to be contiguous.
  if (!fresh && feedsStrideSensitiveView(op.result(0))) return false;
  // A returned contiguous(x) of a view is eager's own contiguous tensor: without the copy the
  // caller would get x's strides and a tensor sharing memory with an input or another output.
  // (A reshape behind it copies when x's strides need it: the copy can still go there.)
  if (!fresh && rw.escapes(op.result(0), false)) return false;
  return rw.replace(x);
}

// Whether a returned copy of x must stay because x is a view that need not be dense (an expand,
// a slice): eager's copy is a dense tensor, and x itself would be copied into that layout after
// the run, which cuts it off from another output viewing it (fuzzer seed 20445: `v[...] = 7`
// is clone(expand(7)); `return v, v.permute(0, 1)` ran in Python with XJIT-E0101). Views that
// keep a dense operand dense (permutes, reshapes, squeezes) leave the copy to go.
bool keepsCopyOfStridedView(const Op &op, const Rewriter &rw) {
  static const std::set<std::string, std::less<>> kDenseViews = {
      "permute",   "transpose", "t",         "reshape", "view",       "flatten",
      "unflatten", "squeeze",   "unsqueeze", "alias",   "contiguous", "movedim"};
  const Op *def = op.operand(0)->definingOp();
  return def && aliasesOperand(*def) && !kDenseViews.count(def->name()) &&
         rw.escapes(op.result(0), true);
}

/// A zero `pad` along one dim only: its operand, that dim and the operand's [start, end) there.
struct PaddedRun {
  Value *inner;
  int64_t dim, start, end;
};

std::optional<PaddedRun> paddedRun(const Value *v) {
  Op *pad = producer(v, {"pad"});
  if (!pad || numberAttr(*pad, "value", 0.0) != 0.0) return std::nullopt;
  if (const Attr *m = pad->attrOrNull("mode"); m && m->asStr() != "constant") return std::nullopt;
  const Type &t = v->type();
  if (!isStaticShape(t.shape())) return std::nullopt;
  const Attr *amounts = pad->attrOrNull("pad"); // (before, after) pairs from the last dim
  if (!amounts || amounts->kind() != AttrKind::Ints) return std::nullopt;
  const std::vector<int64_t> &pairs = amounts->asInts();
  std::optional<PaddedRun> run;
  for (size_t k = 0; 2 * k + 1 < pairs.size(); ++k) {
    const int64_t d = t.rank() - 1 - int64_t(k), before = pairs[2 * k], after = pairs[2 * k + 1];
    if (before == 0 && after == 0) continue;
    if (run || d < 0 || before < 0 || after < 0) return std::nullopt; // two dims, or a crop
    run = PaddedRun{pad->operand(0), d, before, t.shape()[size_t(d)].value() - after};
  }
  return run;
}

// add(pad(a), pad(b)) of zero pads along the same dim whose runs do not overlap: a and b side
// by side -> pad(cat(a, zeros of the gap, b)), a cat operand of that dim spliced in. Autodiff
// accumulates a select's or slice's gradient as a full-size pad per use: a tensor read at each
// step of an unrolled loop (Mamba's scan: 64 selects) summed 64 full tensors; now one cat.
// Exact except signed zero: a -0.0 of a or b next to the other's padding stays -0.0 (+0.0 in
// eager's sum).
bool addDisjointPads(Op &op, Rewriter &rw) {
  if (op.numOperands() != 2 || numberAttr(op, "alpha", 1.0) != 1.0) return false;
  const Type &t = op.result(0)->type();
  if (op.operand(0)->type() != t || op.operand(1)->type() != t) return false;
  std::optional<PaddedRun> a = paddedRun(op.operand(0)), b = paddedRun(op.operand(1));
  if (!a || !b || a->dim != b->dim) return false;
  if (b->start < a->start) std::swap(a, b);
  if (a->end > b->start) return false; // they overlap
  const int64_t d = a->dim;
  std::vector<Value *> pieces;
  auto append = [&](Value *v) {
    Op *cat = producer(v, {"cat"});
    const int64_t rank = v->type().rank();
    if (cat && cat->numOperands() > 0 && (intAttr(*cat, "dim", 0) + rank) % rank == d)
      pieces.insert(pieces.end(), cat->operands().begin(), cat->operands().end());
    else
      pieces.push_back(v);
  };
  append(a->inner);
  if (b->start > a->end) {
    std::vector<int64_t> gap;
    for (const DimExpr &e : t.shape())
      gap.push_back(e.value());
    gap[size_t(d)] = b->start - a->end;
    Value *zeros = rw.create("zeros", {}, {{"shape", Attr(gap)}, {"dtype", Attr(t.dtype())}});
    if (!zeros) return false;
    pieces.push_back(zeros);
  }
  append(b->inner);
  Value *joined = rw.create("cat", pieces, {{"dim", d}});
  if (!joined) return false;
  const int64_t size = t.shape()[size_t(d)].value();
  if (a->start == 0 && b->end == size) return rw.replace(joined);
  std::vector<int64_t> pad(size_t(2 * (t.rank() - d)), 0);
  pad[pad.size() - 2] = a->start;
  pad[pad.size() - 1] = size - b->end;
  return rw.replace(rw.create("pad", {joined}, {{"pad", Attr(pad)}}));
}

// clone(x), cat([x]), dropout in eval mode or with p = 0 -> x (copies of x; the guards in
// Rewriter::replace keep them when either side is written in place).
bool copyNoop(Op &op, Rewriter &rw) {
  if (op.name() == "cat" && op.numOperands() != 1) return false;
  if (op.name() == "dropout") {
    const Attr *train = op.attrOrNull("train");
    bool eval = train && train->kind() == AttrKind::Bool && !train->asBool();
    if (!eval && numberAttr(op, "p", 0.5) != 0.0) return false;
  } else if (keepsCopyOfStridedView(op, rw)) {
    return false;
  }
  return rw.replace(op.operand(0));
}

// cast(x) to x's own dtype -> x; cast(cast(x: A, B), C) -> cast(x, C) (or x when C is A) when
// B holds every value of A exactly, so the inner cast rounds nothing.
bool castFold(Op &op, Rewriter &rw) {
  Value *x = op.operand(0);
  const Type &t = op.result(0)->type();
  if (t == x->type()) return rw.replace(x);
  Op *inner = producer(x, {"cast"});
  if (!inner) return false;
  Value *src = inner->operand(0);
  if (!src->type().isTensor() || !exactlyWidens(src->type().dtype(), x->type().dtype()))
    return false;
  if (src->type() == t) return rw.replace(src);
  return rw.replace(rw.create("cast", {src}, {{"dtype", Attr(t.dtype())}}));
}

// tuple_get(tuple_construct(a, b, ...), i) -> the i-th element.
bool tupleGet(Op &op, Rewriter &rw) {
  Op *tuple = producer(op.operand(0), {"tuple_construct"});
  if (!tuple) return false;
  int64_t n = static_cast<int64_t>(tuple->numOperands()), i = intAttr(op, "index", 0);
  if (i < -n || i >= n) return false;
  return rw.replace(tuple->operand(static_cast<size_t>(i < 0 ? i + n : i)));
}

// index(x, none, ..., c) with one constant index tensor c of consecutive in-range values
// (Falcon's fused_qkv[..., [-2], :]) -> clone(slice(x)): index's copy, through a view the fuse
// pass reads like any other (the reference index kernel took 158 us per call there).
bool indexSlice(Op &op, Rewriter &rw) {
  const Type &t = op.operand(0)->type();
  std::optional<size_t> at;
  for (size_t i = 1; i < op.numOperands(); ++i) {
    if (op.operand(i)->type().kind() == TypeKind::None) continue;
    if (at) return false;
    at = i;
  }
  if (!t.isTensor() || !at || int64_t(*at) > t.rank()) return false;
  const int64_t dim = int64_t(*at) - 1;
  std::optional<int64_t> size = t.shape()[size_t(dim)].staticValue();
  const Op *def = producer(op.operand(*at), {"constant"});
  const Attr *a = def ? def->attrOrNull("value") : nullptr;
  if (!size || !a || a->kind() != AttrKind::Tensor) return false;
  const Tensor &c = a->asTensor(); // i64 / i32 only: bool and u8 tensors index as masks
  if (c.rank() != 1 || c.numel() == 0 || (c.dtype() != DType::I64 && c.dtype() != DType::I32))
    return false;
  int64_t start = 0;
  for (int64_t k = 0; k < c.numel(); ++k) {
    int64_t v = c.getInt(k) < 0 ? c.getInt(k) + *size : c.getInt(k);
    if (v < 0 || v >= *size || (k > 0 && v != start + k)) return false; // out of range: its error
    if (k == 0) start = v;
  }
  Value *slice = rw.create("slice", {op.operand(0)},
                           {{"dim", Attr(dim)},
                            {"start", Attr(start)},
                            {"end", Attr(start + c.numel())},
                            {"step", Attr(int64_t(1))}});
  return rw.replace(rw.create("clone", {slice}));
}

// max_dim / min_dim -> amax / amin and argmax / argmin over the same dim: two single-result
// reductions native backends fuse into one kernel (the reference computes the same values and
// first-occurrence indices, NaN first). Not for bool (argmax rejects it) or 0-d operands.
bool extremumSplit(Op &op, Rewriter &rw) {
  const Type &t = op.operand(0)->type();
  if (!t.isTensor() || t.rank() == 0 || t.dtype() == DType::Bool) return false;
  bool mx = op.name() == "max_dim";
  int64_t dim = intAttr(op, "dim", 0);
  const Attr *k = op.attrOrNull("keepdim");
  bool keepdim = k && k->kind() == AttrKind::Bool && k->asBool();
  Value *values =
      rw.create(mx ? "amax" : "amin", {op.operand(0)},
                {{"dims", Attr(std::vector<int64_t>{dim})}, {"keepdim", Attr(keepdim)}});
  Value *indices = rw.create(mx ? "argmax" : "argmin", {op.operand(0)},
                             {{"dim", Attr(dim)}, {"keepdim", Attr(keepdim)}});
  return rw.replace({values, indices});
}

// ---- control flow ----

/// Moves the ops of `b` (but its terminator) before `before`; returns the terminator.
Op *inlineBlock(Block *b, Op *before, Rewriter &rw) {
  Op *term = b->terminator();
  while (b->front() != term) {
    Op *op = b->front();
    before->parentBlock()->insert(b->remove(op), before);
    rw.noteMoved(op);
  }
  return term;
}

// if(true/false) -> the taken region's ops, inlined; results are its yielded values.
bool ifConstant(Op &op, Rewriter &rw) {
  auto cond = boolConstant(op.operand(0));
  if (!cond) return false;
  Block *taken = op.region(*cond ? 0 : 1);
  Op *yield = taken->terminator();
  if (!yield || yield->numOperands() != op.numResults()) return false;
  for (size_t i = 0; i < op.numResults(); ++i)
    if (yield->operand(i)->type() != op.result(i)->type()) return false;
  inlineBlock(taken, &op, rw);
  return rw.replace(yield->operands());
}

// A loop that runs zero times (trip count <= 0 or initial condition false) -> its initial
// carried values; one that runs exactly once (trip count 1, condition true) -> its body
// inlined with iteration 0.
bool loopTrips(Op &op, Rewriter &rw) {
  auto trips = intConstant(op.operand(0));
  auto cond = boolConstant(op.operand(1));
  std::vector<Value *> inits(op.operands().begin() + 2, op.operands().end());
  if ((trips && *trips <= 0) || (cond && !*cond)) return rw.replace(inits);
  if (!trips || *trips != 1 || !cond || !*cond) return false;
  Block *body = op.region(0);
  Op *yield = body->terminator();
  if (!yield || yield->numOperands() != inits.size() + 1) return false;
  Value *iteration = rw.constantInt(0);
  iteration->setName(body->argument(0)->name());
  body->argument(0)->replaceAllUsesWith(iteration);
  for (size_t i = 0; i < inits.size(); ++i)
    body->argument(i + 1)->replaceAllUsesWith(inits[i]);
  inlineBlock(body, &op, rw);
  return rw.replace(std::vector<Value *>(yield->operands().begin() + 1, yield->operands().end()));
}

} // namespace

const std::vector<CanonicalizeRule> &canonicalizeRules() {
  static const std::vector<CanonicalizeRule> rules = {
      {"mul-by-one", {"mul"}, mulByOne, "x*1, 1*x -> x"},
      {"add-zero", {"add", "sub"}, addZero, "x+0, 0+x, x-0 -> x (float: -0.0+0 keeps -0.0)"},
      {"add-disjoint-pads",
       {"add"},
       addDisjointPads,
       "pad(a) + pad(b), zero pads along one dim, disjoint -> pad(cat(a, zeros, b))"},
      {"sub-self", {"sub"}, subSelf, "x-x -> 0 for integer dtypes"},
      {"div-by-one", {"div"}, divByOne, "x/1 -> x"},
      {"div-to-mul", {"div"}, divToMul, "x/c -> x*(1/c) for c = ±2^k (bit-identical)"},
      {"pow-constant",
       {"pow"},
       powConstant,
       "pow(x,1) -> x, pow(x,2) -> x*x, pow(x,0.5) -> sqrt(x)"},
      {"involution",
       {"neg", "bitwise_not", "logical_not"},
       involution,
       "neg(neg(x)), ~~x, not(not(x)) -> x"},
      {"idempotent-unary",
       {"relu", "abs", "floor", "ceil", "trunc", "sign", "round"},
       idempotentUnary,
       "f(f(x)) -> f(x) for relu/abs/floor/ceil/trunc/sign/round; abs(neg(x)) -> abs(x)"},
      {"where-same", {"where"}, whereSame, "where(c, x, x) -> x"},
      {"permute-fold", kPermuteLike, permuteFold,
       "identity permute/transpose -> x; permute chains -> one permute (or x)"},
      {"reshape-same-shape",
       {"reshape", "view", "flatten", "unflatten"},
       reshapeSameShape,
       "reshape to the operand's own shape -> x"},
      {"reshape-chain",
       {"reshape", "view", "flatten", "unflatten"},
       reshapeChain,
       "reshape(reshape(x)) (and view/flatten/unflatten/squeeze/unsqueeze chains) -> one reshape"},
      {"reshape-static-shape",
       {"reshape", "view"},
       reshapeStaticShape,
       "reshape(x, [-1, 4]) with a static result -> reshape(x, [6, 4])"},
      {"squeeze-unsqueeze",
       {"squeeze", "unsqueeze"},
       squeezeUnsqueeze,
       "squeeze(unsqueeze(x)) / unsqueeze(squeeze(x)) back to x's shape -> x"},
      {"expand-fold",
       {"expand", "expand_as"},
       expandFold,
       "expand to the same shape -> x; expand(expand(x)), static expand_as(x, y) -> expand(x)"},
      {"slice-identity", {"slice", "narrow"}, sliceIdentity, "slices covering the whole dim -> x"},
      {"alias-noop", {"alias"}, aliasNoop, "alias(x) -> x"},
      {"contiguous-noop",
       {"contiguous"},
       contiguousNoop,
       "contiguous of a fresh result, or of storage nobody writes -> x"},
      {"copy-noop",
       {"clone", "cat", "dropout"},
       copyNoop,
       "clone(x), cat([x]), eval-mode dropout -> x when neither is written in place"},
      {"index-slice",
       {"index"},
       indexSlice,
       "index(x, none, ..., c) with constant consecutive indices c -> clone(slice(x))"},
      {"extremum-split",
       {"max_dim", "min_dim"},
       extremumSplit,
       "max_dim / min_dim -> amax / amin and argmax / argmin over the same dim"},
      {"cast-fold",
       {"cast"},
       castFold,
       "cast to own dtype -> x; cast chains through an exact widening -> one cast"},
      {"tuple-get", {"tuple_get"}, tupleGet, "tuple_get(tuple_construct(...), i) -> element i"},
      {"if-constant", {"if"}, ifConstant, "if with a constant condition -> the taken region"},
      {"loop-trips",
       {"loop"},
       loopTrips,
       "loops with 0 trips -> initial values; with exactly 1 -> body inlined"},
  };
  return rules;
}

} // namespace xjit::passes
