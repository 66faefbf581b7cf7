// collapse-reduced-dims: a reduction over a trailing run of dims (mean over H and W of
// [N, C, H, W]) becomes a reduction over one dim of their product ([N, C, H*W]): the kernel's
// innermost loop then runs over all of them, where over W alone it was too short to vectorize
// well (W = 56: three vectors and a remainder, and a horizontal sum per row of W; 7 for
// ResNet's global pooling). So does a trailing run of kept dims (a sum over the channels of
// [N, C, H, W] keeps H and W): the kernel's lanes run along H*W, not W-long blocks. Runs after
// fuse, on reduction fusions and on reductions left alone.
//
// The operands are flattened over the run (`flatten`, a view of a contiguous tensor: only
// operands that are graph inputs without a unit_dim hint or results of ops that make a fresh
// tensor, whose runtime buffers are contiguous) and the results that kept the run unflattened
// back. A fusion qualifies when every op in it is elementwise or one of the reductions below,
// all reductions reduce the same dims, and every tensor in it has the run's full sizes, or
// sizes 1, or none of its dims (broadcast from the right), so that merging the run means the
// same for each; where the run is reduced, a result without it (keepdim = false) must go
// straight to the fusion's yield (broadcast against the full shape, it would align with other
// dims once merged; a kept run stays the trailing dims of such a result).
// Left alone: symbolic sizes in the run, reductions over every dim (their own parallel path),
// last dims of 256 or more (long enough loops), and operands that are views or laid out
// otherwise (flatten would copy them).
#include "fuse_rules.h"
#include "passes.h"

#include "xjit/ir/builder.h"

#include <algorithm>
#include <optional>
#include <unordered_map>

namespace xjit::passes {
namespace {

using Ints = std::vector<int64_t>;

constexpr int64_t kLongInnerDim = 256;

bool collapsibleReduction(const Op &op) {
  static const std::vector<std::string_view> names = {"sum",  "mean", "amax", "amin",
                                                      "prod", "var",  "std"};
  return fuse_rules::classify(op) == fuse_rules::FuseClass::Reduction &&
         std::find(names.begin(), names.end(), op.name()) != names.end();
}

/// The trailing run of dims [first, rank) to merge: all reduced, or all kept.
struct Run {
  int64_t rank = 0, first = 0;
  bool reduced = true;
  Ints sizes; // static sizes of the run's dims
};

/// The run of a reduction with `axes`, if worth merging.
std::optional<Run> trailingRun(const fuse_rules::ReduceAxes &axes) {
  const int64_t rank = int64_t(axes.full.size());
  if (rank < 2 || int64_t(axes.dims.size()) == rank) return std::nullopt; // every dim
  auto isReduced = [&](int64_t d) {
    return std::find(axes.dims.begin(), axes.dims.end(), d) != axes.dims.end();
  };
  Run run{rank, rank, isReduced(rank - 1), {}};
  while (run.first > 0 && isReduced(run.first - 1) == run.reduced &&
         axes.full[size_t(run.first - 1)].isStatic())
    --run.first;
  if (rank - run.first < 2) return std::nullopt;
  for (int64_t d = run.first; d < rank; ++d)
    run.sizes.push_back(axes.full[size_t(d)].value());
  if (run.sizes.back() >= kLongInnerDim) return std::nullopt;
  int64_t outer = 1;
  for (size_t i = 0; i + 1 < run.sizes.size(); ++i)
    outer *= run.sizes[i];
  if (outer <= 1) return std::nullopt; // nothing to merge
  return run;
}

/// How a tensor of type t (broadcast from the right against the full shape) sees the run.
enum class Span { Full, Ones, Absent, Mixed };

Span spanOf(const Type &t, const Run &run) {
  if (!t.isTensor()) return Span::Absent;
  const int64_t off = run.rank - t.rank();
  if (off < 0) return Span::Mixed;
  bool full = true, ones = true, absent = true, present = true;
  for (int64_t d = run.first; d < run.rank; ++d) {
    const int64_t j = d - off;
    if (j < 0) {
      present = false;
      continue;
    }
    absent = false;
    std::optional<int64_t> n = t.shape()[size_t(j)].staticValue();
    full = full && n == run.sizes[size_t(d - run.first)];
    ones = ones && n == 1;
  }
  if (absent) return Span::Absent;
  if (!present) return Span::Mixed;
  return full ? Span::Full : ones ? Span::Ones : Span::Mixed;
}

/// t with the run merged: its product (Full) or one 1 (Ones).
Type collapsed(const Type &t, const Run &run, Span span) {
  const int64_t off = run.rank - t.rank();
  Shape s(t.shape().begin(), t.shape().begin() + (run.first - off));
  int64_t n = 1;
  for (int64_t v : run.sizes)
    n *= v;
  s.push_back(DimExpr(span == Span::Full ? n : 1));
  return t.withShape(s);
}

/// Whether flattening operand v over the run is a view: a fresh tensor (a runtime buffer, laid
/// out contiguously) or a graph input the frontend saw with unit stride in its last dim. Size-1
/// dims (Ones) merge as a view whatever the strides.
bool flattensAsView(const Value *v, Span span) {
  if (span == Span::Ones) return true;
  if (const Op *def = v->definingOp()) return !def->def().has(kView);
  return v->unitDimHint() < 0;
}

Ints newDims(const Ints &dims, const Run &run) {
  Ints out;
  for (int64_t d : dims) {
    int64_t m = std::min(d, run.first);
    if (std::find(out.begin(), out.end(), m) == out.end()) out.push_back(m);
  }
  return out;
}

/// Flattens `v` (an operand of `user`) over the run, before `user`.
Value *flattenOperand(Value *v, const Run &run, Op *user) {
  Builder b(user->parentBlock(), user);
  b.setLoc(user->loc());
  const int64_t off = run.rank - v->type().rank();
  return b.op("flatten", {v}, {{"start_dim", run.first - off}, {"end_dim", v->type().rank() - 1}});
}

/// Gives result r of `op` its collapsed type and points its uses at an unflatten of it.
void unflattenResult(Value *r, const Run &run, Span span, Op *op) {
  const Type before = r->type();
  r->setType(collapsed(before, run, span));
  Builder b(op->parentBlock(), op->next());
  b.setLoc(op->loc());
  const int64_t off = run.rank - before.rank();
  Ints sizes;
  for (int64_t d = run.first; d < run.rank; ++d)
    sizes.push_back(span == Span::Full ? run.sizes[size_t(d - run.first)] : 1);
  Op *back = b.create("unflatten", {r}, {{"dim", run.first - off}, {"sizes", sizes}});
  for (const Use &u : std::vector<Use>(r->uses()))
    if (u.user != back) u.user->setOperand(u.index, back->result());
}

/// A reduction outside any fusion.
bool collapseReduction(Op *op) {
  if (!collapsibleReduction(*op)) return false;
  auto axes = fuse_rules::reduceAxes(*op);
  if (!axes) return false;
  auto run = trailingRun(*axes);
  if (!run || !flattensAsView(op->operand(0), Span::Full)) return false;
  op->setOperand(0, flattenOperand(op->operand(0), *run, op));
  op->setAttr("dims", Attr(newDims(axes->dims, *run)));
  if (!run->reduced)
    unflattenResult(op->result(), *run, Span::Full, op); // it keeps the run's sizes
  else if (op->attrOrNull("keepdim")->asBool())
    unflattenResult(op->result(), *run, Span::Ones, op);
  return true;
}

/// A reduction fusion (fuse.cpp) whose region qualifies (see the top of the file).
bool collapseFusion(Op *fusion) {
  if (fusion->numRegions() != 1) return false;
  const Attr *kind = fusion->attrOrNull("kind");
  if (!kind || kind->kind() != AttrKind::Str || kind->asStr() != "reduction") return false;
  Block &body = *fusion->region(0);
  std::optional<fuse_rules::ReduceAxes> axes;
  for (Op *op : body) {
    if (op == body.terminator()) continue;
    if (fuse_rules::classify(*op) == fuse_rules::FuseClass::Elementwise) continue;
    if (!collapsibleReduction(*op)) return false;
    auto a = fuse_rules::reduceAxes(*op);
    if (!a || (axes && (a->full != axes->full || a->dims != axes->dims))) return false;
    axes = a;
  }
  if (!axes) return false;
  auto run = trailingRun(*axes);
  if (!run) return false;
  // Every tensor's span, checked before anything changes.
  std::unordered_map<const Value *, Span> spans;
  auto admit = [&](const Value *v) {
    Span s = spanOf(v->type(), *run);
    spans[v] = s;
    return s != Span::Mixed;
  };
  for (const auto &a : body.arguments())
    if (!admit(a.get())) return false;
  for (Op *op : body) {
    if (op == body.terminator()) continue;
    const bool dropsRun =
        run->reduced && collapsibleReduction(*op) && !op->attrOrNull("keepdim")->asBool();
    if (dropsRun) {
      spans[op->result()] = Span::Absent; // its dims are the kept ones: unchanged
      for (const Use &u : op->result()->uses())
        if (u.user != body.terminator()) return false;
      continue;
    }
    if (!admit(op->result())) return false;
  }
  for (size_t i = 0; i < fusion->numOperands(); ++i) {
    Span s = spans.at(body.argument(i));
    if (s != Span::Absent && !flattensAsView(fusion->operand(i), s)) return false;
  }
  // Rewrite: the operands flattened outside, every value's type inside, the reductions' dims,
  // the results unflattened after the fusion.
  for (size_t i = 0; i < fusion->numOperands(); ++i) {
    Value *arg = body.argument(i);
    Span s = spans.at(arg);
    if (s == Span::Absent) continue;
    fusion->setOperand(i, flattenOperand(fusion->operand(i), *run, fusion));
    arg->setType(collapsed(arg->type(), *run, s));
  }
  for (Op *op : body) {
    if (op == body.terminator()) continue;
    if (collapsibleReduction(*op)) op->setAttr("dims", Attr(newDims(axes->dims, *run)));
    Span s = spans.at(op->result());
    if (s != Span::Absent) op->result()->setType(collapsed(op->result()->type(), *run, s));
  }
  for (size_t i = 0; i < fusion->numResults(); ++i) {
    Span s = spans.at(body.terminator()->operand(i));
    if (s != Span::Absent) unflattenResult(fusion->result(i), *run, s, fusion);
  }
  return true;
}

} // namespace

bool runCollapseReducedDims(Graph &g, PassContext &ctx) {
  std::vector<Op *> candidates;
  g.walk([&](Op *op) {
    if (op->name() == "fusion" || collapsibleReduction(*op)) candidates.push_back(op);
  });
  bool changed = false;
  for (Op *op : candidates) {
    if (op->parentOp() && op->parentOp()->name() == "fusion") continue; // inside a fusion
    if (op->name() == "fusion" ? collapseFusion(op) : collapseReduction(op)) {
      ctx.count(op->name() == "fusion" ? "fusions-collapsed" : "reductions-collapsed");
      changed = true;
    }
  }
  return changed;
}

} // namespace xjit::passes
