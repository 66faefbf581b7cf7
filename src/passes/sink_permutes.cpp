// sink-permutes: computes a tensor that is permuted and then copied, contiguous(permute(y, P)),
// in the permuted order to begin with. The permute moves into the ops that compute y, as long as
// they can compute in any dim order and nothing else reads their result: elementwise ops (their
// operands are permuted instead; smaller broadcast operands are padded with size-1 dims first),
// reductions (the kept dims permuted, the reduced ones left in place) and channels-first
// convolutions permuted to channels-last (they become `layout = "nhwc"`, their input made
// dense NHWC by a `contiguous`, which copies only an input not already laid out so). Permutes it
// meets fold with it (a transposed input read in memory order), so the loops then walk the memory
// of the permuted operands in order and the copy is gone: the contiguous of a fresh result is
// dropped.
//
// Also a reduction of permute(y), y an elementwise result nothing else reads: y is computed in
// the permuted order (the same rebuild), so that the fuse pass makes it the reduction's
// prologue instead of writing it (batch norm's (x - mean)^2 of a channels-last activation,
// reduced in channels-first order).
//
// The frontend asks for such copies where eager lays a graph output out as a permutation of
// contiguous (`x.t() * 2` keeps x's transposed strides; a conv on a channels_last input gives a
// channels_last result): it returns permute(contiguous(permute(y, P)), P^-1), a view with
// eager's strides (docs/frontend.md, *Output layouts*). Values are unchanged (the same elements
// in another order), so the pass is exact.
#include "mutation_info.h"
#include "passes.h"
#include "semantic_util.h"

#include "xjit/ir/builder.h"
#include "xjit/ir/op_registry.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <optional>
#include <set>

namespace xjit::passes {
namespace {

using Perm = std::vector<int64_t>; // result dim i is operand dim perm[i]

bool isIdentity(const Perm &p) {
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i] != int64_t(i)) return false;
  return true;
}

/// The permutation a permute-like view applies, or nullopt for other ops (or attributes that
/// are not plain ints).
std::optional<Perm> permutationOf(const Op &op) {
  if (op.numOperands() != 1 || !op.operand(0)->type().isTensor()) return std::nullopt;
  const int64_t rank = op.operand(0)->type().rank();
  auto norm = [&](int64_t d) { return d < 0 ? d + rank : d; };
  Perm p(static_cast<size_t>(rank));
  std::iota(p.begin(), p.end(), 0);
  if (op.name() == "permute") {
    const Attr *dims = op.attrOrNull("dims");
    if (!dims || dims->kind() != AttrKind::Ints || dims->asInts().size() != size_t(rank))
      return std::nullopt;
    for (int64_t i = 0; i < rank; ++i) {
      p[size_t(i)] = norm(dims->asInts()[size_t(i)]);
      if (p[size_t(i)] < 0 || p[size_t(i)] >= rank) return std::nullopt;
    }
  } else if (op.name() == "transpose") {
    const Attr *a = op.attrOrNull("dim0"), *b = op.attrOrNull("dim1");
    if (!a || !b || a->kind() != AttrKind::Int || b->kind() != AttrKind::Int) return std::nullopt;
    const int64_t d0 = norm(a->asInt()), d1 = norm(b->asInt());
    if (d0 < 0 || d0 >= rank || d1 < 0 || d1 >= rank) return std::nullopt;
    std::swap(p[size_t(d0)], p[size_t(d1)]);
  } else if (op.name() == "t") {
    if (rank == 2) std::swap(p[0], p[1]);
  } else {
    return std::nullopt;
  }
  return p;
}

/// The channels-last permutation of a batched channels-first tensor of `rank`: [0, 2, ..., 1].
Perm channelsLast(int64_t rank) {
  Perm p = {0};
  for (int64_t i = 2; i < rank; ++i)
    p.push_back(i);
  p.push_back(1);
  return p;
}

/// The shape of permute(y, p).
Shape permutedShape(const Value *y, const Perm &p) {
  Shape s;
  for (int64_t d : p)
    s.push_back(y->type().shape()[size_t(d)]);
  return s;
}

bool isConv(const Op &op) {
  const std::string &n = op.name();
  return n == "conv1d" || n == "conv2d" || n == "conv3d";
}

class Sinker {
public:
  explicit Sinker(PassContext &ctx) : ctx_(ctx) {}

  /// Rewrites contiguous(permute-like(y)) at `copy`. Returns whether the graph changed.
  bool rewrite(Op *copy) {
    Op *view = copy->operand(0)->definingOp();
    if (!view || view->parentBlock() != copy->parentBlock()) return false;
    std::optional<Perm> p = permutationOf(*view);
    if (!p) return false;
    block_ = copy->parentBlock();
    Value *r = permuted(view->operand(0), *p, copy, view->result(0)->uses().size() == 1);
    if (!fresh(r)) {
      // Nothing computes in the permuted order (y is read elsewhere, or made by an op that
      // cannot reorder): the copy stays as it was.
      undo(0);
      replaced_.clear();
      return false;
    }
    replaceOp(copy, {r}); // also erases the permute and the ops computing y, now dead
    ctx_.count("copies-removed");
    ctx_.count("ops-reordered", int64_t(replaced_.size()));
    replaced_.clear();
    created_.clear();
    return true;
  }

  /// A reduction of permute(y), y an elementwise result read by nothing else: y computed in the
  /// permuted order instead, reading its operands through views, so that the fuse pass makes
  /// it the reduction's prologue rather than a tensor written and read back (batch norm's
  /// (x - mean)^2 over a channels-last activation the layout pass computes channels-last:
  /// one pass over x instead of three). Returns whether the graph changed.
  bool rewriteReductionOperand(Op *red) {
    if (red->numOperands() != 1) return false;
    Op *view = red->operand(0)->definingOp();
    if (!view || view->parentBlock() != red->parentBlock() || view->result(0)->uses().size() != 1)
      return false;
    std::optional<Perm> p = permutationOf(*view);
    if (!p) return false;
    Value *y = view->operand(0);
    const Op *d = y->definingOp();
    if (!d || !d->def().has(kElementwise)) return false;
    block_ = red->parentBlock();
    if (!rebuildable(y)) return false;
    Value *r = permuted(y, *p, red);
    if (!fresh(r)) {
      undo(0);
      replaced_.clear();
      return false;
    }
    red->setOperand(0, r);
    eraseIfDead(view);
    ctx_.count("reduction-prologues-reordered");
    replaced_.clear();
    created_.clear();
    return true;
  }

private:
  /// Erases the ops made since `mark` (newest first: nothing else uses them).
  void undo(size_t mark) {
    while (created_.size() > mark) {
      Op *op = created_.back();
      created_.pop_back();
      op->parentBlock()->erase(op);
    }
  }

  /// A result of a computing op: the runtime's kernels give it contiguous.
  static bool fresh(const Value *v) {
    const Op *d = v->definingOp();
    return d && d->def().isPure() && d->def().kernel && !aliasesOperand(*d) &&
           d->name() != "constant" && d->name() != "tuple_get" && d->numRegions() == 0;
  }

  /// Whether y's producer may be rebuilt to compute in another order: pure, in this block,
  /// and y read by nothing else (it would be computed twice).
  bool rebuildable(const Value *y) const {
    const Op *d = y->definingOp();
    if (!d || d->parentBlock() != block_ || !d->def().isPure() || d->numResults() != 1 ||
        d->numRegions() != 0 || y->uses().empty())
      return false;
    for (const Use &u : y->uses()) // one reader (x * x reads x twice)
      if (u.user != y->uses().front().user) return false;
    return true;
  }

  Value *create(Op *before, std::string_view name, std::vector<Value *> operands,
                AttrMap attrs = {}) {
    Builder b(block_, before);
    b.setLoc(before->loc());
    Op *op = b.create(name, std::move(operands), std::move(attrs));
    created_.push_back(op);
    return op->result(0);
  }

  Value *view(Value *y, const Perm &p, Op *before) {
    if (isIdentity(p)) return y;
    return create(before, "permute", {y}, {{"dims", Attr(p)}});
  }

  /// permute(y, p), computed by ops that produce it in that order where y's producers allow;
  /// new ops are inserted before `before`. `sole`: the views between y and the op asking for
  /// it are read by nothing else (else y stays needed as it is: rebuilding it would compute it
  /// twice).
  Value *permuted(Value *y, const Perm &p, Op *before, bool sole = true) {
    if (isIdentity(p)) return y;
    Op *d = y->definingOp();
    if (!d || d->parentBlock() != block_) return view(y, p, before);
    if (std::optional<Perm> q = permutationOf(*d)) {
      // permute(permute(x, q), p) = permute(x, q o p)
      Perm r(p.size());
      for (size_t i = 0; i < p.size(); ++i)
        r[i] = (*q)[size_t(p[i])];
      return permuted(d->operand(0), r, before, sole && d->result(0)->uses().size() == 1);
    }
    if (!sole || !rebuildable(y) || !d->result(0)->type().isTensor()) return view(y, p, before);
    // Only new ops are made (the old ones stay as they are until the copy is replaced), so a
    // rebuild that fails part way is undone by erasing what it made.
    const size_t createdBefore = created_.size(), replacedBefore = replaced_.size();
    Value *r = nullptr;
    try {
      if (d->def().has(kElementwise))
        r = elementwise(d, p);
      else if (d->def().has(kReduction))
        r = reduction(d, p);
      else if (isConv(*d))
        r = conv(d, p);
    } catch (const TypeInferenceError &) {
      r = nullptr; // a rebuilt op its inference rejects: keep the view
    }
    if (r && !(r->type().dtype() == y->type().dtype() && permutedShape(y, p) == r->type().shape()))
      r = nullptr; // (cannot happen: each rebuild permutes its result like p)
    if (!r) {
      undo(createdBefore);
      replaced_.resize(replacedBefore);
      return view(y, p, before);
    }
    r->setName(y->name());
    replaced_.push_back(d);
    return r;
  }

  /// An elementwise op computing in order p: its operands permuted (broadcast ones padded).
  Value *elementwise(Op *d, const Perm &p) {
    const int64_t rank = d->result(0)->type().rank();
    if (int64_t(p.size()) != rank) return nullptr;
    for (Value *v : d->operands())
      if (v->type().isTensor() && v->type().rank() > rank) return nullptr;
    std::vector<Value *> operands;
    std::map<const Value *, Value *> done; // an operand read twice is rebuilt once
    for (Value *v : d->operands()) {
      const Type &t = v->type();
      if (!t.isTensor() || t.rank() == 0) {
        operands.push_back(v);
        continue;
      }
      if (auto it = done.find(v); it != done.end()) {
        operands.push_back(it->second);
        continue;
      }
      Value *x = v;
      for (int64_t r = t.rank(); r < rank; ++r)
        x = create(d, "unsqueeze", {x}, {{"dim", 0}});
      operands.push_back(done[v] = permuted(x, p, d));
    }
    return create(d, d->name(), std::move(operands), d->attrs());
  }

  /// A reduction whose result comes out in order p: the kept dims of its operand permuted.
  Value *reduction(Op *d, const Perm &p) {
    static const std::set<std::string, std::less<>> supported = {"sum", "mean", "prod", "amax",
                                                                 "amin"};
    if (!supported.count(d->name()) || d->numOperands() != 1) return nullptr;
    Value *w = d->operand(0);
    const int64_t n = w->type().rank();
    const Attr *dimsAttr = d->attrOrNull("dims");
    const Attr *keepAttr = d->attrOrNull("keepdim");
    if (!dimsAttr || dimsAttr->kind() != AttrKind::Ints || dimsAttr->asInts().empty())
      return nullptr;
    const bool keepdim = keepAttr && keepAttr->kind() == AttrKind::Bool && keepAttr->asBool();
    std::vector<bool> reduced(static_cast<size_t>(n), false);
    for (int64_t dim : dimsAttr->asInts()) {
      const int64_t k = dim < 0 ? dim + n : dim;
      if (k < 0 || k >= n) return nullptr;
      reduced[size_t(k)] = true;
    }
    Perm q;
    AttrMap attrs = d->attrs();
    if (keepdim) {
      if (int64_t(p.size()) != n) return nullptr;
      q = p;
      std::vector<int64_t> dims;
      for (int64_t j = 0; j < n; ++j)
        if (reduced[size_t(p[size_t(j)])]) dims.push_back(j);
      attrs["dims"] = Attr(dims);
    } else {
      // Result dim i is operand dim kept[i]; the reduced dims stay where they are and the kept
      // positions take kept[p[0]], kept[p[1]], ...
      std::vector<int64_t> kept;
      for (int64_t k = 0; k < n; ++k)
        if (!reduced[size_t(k)]) kept.push_back(k);
      if (p.size() != kept.size()) return nullptr;
      q.resize(size_t(n));
      size_t next = 0;
      for (int64_t k = 0; k < n; ++k)
        q[size_t(k)] = reduced[size_t(k)] ? k : kept[size_t(p[next++])];
    }
    return create(d, d->name(), {permuted(w, q, d)}, std::move(attrs));
  }

  /// A channels-first convolution permuted to channels-last: the same convolution in NHWC.
  Value *conv(Op *d, const Perm &p) {
    const Attr *layout = d->attrOrNull("layout");
    if (layout && !(layout->kind() == AttrKind::Str && layout->asStr() == "nchw")) return nullptr;
    const int64_t rank = d->result(0)->type().rank();
    const int64_t nd = d->name()[4] - '0';
    if (rank != nd + 2 || p != channelsLast(rank)) return nullptr; // batched inputs only
    std::vector<Value *> operands = d->operands();
    // oneDNN's NHWC kernels want a dense NHWC input: a strided view (a channels-first input
    // permuted) took one 1x4x6x6 conv from 0.4 ms to 12 ms. `contiguous` copies only where the
    // input is not already laid out channels-last (a channels_last graph input is not).
    operands[0] = permuted(operands[0], p, d);
    if (!fresh(operands[0])) operands[0] = create(d, "contiguous", {operands[0]});
    AttrMap attrs = d->attrs();
    attrs["layout"] = Attr("nhwc");
    return create(d, d->name(), std::move(operands), std::move(attrs));
  }

  PassContext &ctx_;
  Block *block_ = nullptr;
  std::vector<Op *> replaced_; // old ops computing the permuted values in the old order
  std::vector<Op *> created_;  // ops made by the current rewrite, in order
};

} // namespace

bool runSinkPermutes(Graph &g, PassContext &ctx) {
  bool changed = false;
  Sinker sinker(ctx);
  for (Op *copy : opsNamed(g, "contiguous"))
    if (copy->parentOp() == nullptr || copy->parentOp()->name() != "fusion")
      changed |= sinker.rewrite(copy);
  for (const char *name : {"sum", "mean"})
    for (Op *red : opsNamed(g, name))
      if (red->parentOp() == nullptr || red->parentOp()->name() != "fusion")
        changed |= sinker.rewriteReductionOperand(red);
  return changed;
}

} // namespace xjit::passes
