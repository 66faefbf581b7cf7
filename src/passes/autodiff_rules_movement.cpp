// Derivative rules of the autodiff pass for movement ops that copy (stack, repeat, tile, pad,
// roll, flip, narrow, index_select, index) and for cumsum. Each gradient is the adjoint of the op's
// index map, written with forward ops:
//   stack:        the slices of g along the new dim (cat's rule)
//   repeat, tile: g reshaped to [copies, size] pairs and summed over the copies
//   pad:          constant: g cropped (and zero-padded where the forward cropped);
//                 reflect / replicate / circular: the crop plus each border added back onto
//                 the elements it was read from (aten's reflection_pad_backward,
//                 replication_pad_backward)
//   roll, flip:   the same op with the opposite shifts / the same dims
//   index_select, index: g added at the indices read (scatter_add, index_put accumulate)
//   index_put:    values: g read at the written positions; self: g, those positions zeroed
//   scatter(_add): src: g gathered at the written positions; self: g, those zeroed (scatter)
//   scatter_reduce: sum / mean (g over counts) / amax, amin (g shared among the equal values)
//   topk, sort:   g of the values scattered into zeros at their indices (each element once)
//   cumsum:       the reverse cumsum of g (cumsum{reverse}, one native scan)
#include "autodiff_rules.h"

#include <numeric>

namespace xjit::passes::autodiff_rules {
namespace {

using Ints = std::vector<int64_t>;

int64_t intAttr(const Op &op, const char *name, int64_t dflt) {
  const Attr *a = op.attrOrNull(name);
  return a && a->kind() == AttrKind::Int ? a->asInt() : dflt;
}

Ints intsAttr(const Op &op, const char *name) {
  const Attr *a = op.attrOrNull(name);
  return a && a->kind() == AttrKind::Ints ? a->asInts() : Ints{};
}

/// `pad`'s attribute for `before` / `after` elements along dim d of a rank-`rank` tensor.
Ints padOfDim(int64_t rank, int64_t d, int64_t before, int64_t after) {
  Ints pad(static_cast<size_t>(2 * (rank - d)), 0);
  pad[pad.size() - 2] = before;
  pad[pad.size() - 1] = after;
  return pad;
}

Value *sliceDim(RuleArgs &a, Value *v, int64_t d, int64_t start, int64_t end) {
  return a.un("slice", v, {{"dim", d}, {"start", start}, {"end", end}});
}

Value *zeroPadDim(RuleArgs &a, Value *v, int64_t d, int64_t before, int64_t after) {
  if (before == 0 && after == 0) return v;
  return a.un("pad", v, {{"pad", padOfDim(v->type().rank(), d, before, after)}});
}

// ---- stack, repeat / tile ----

std::vector<Value *> stackRule(RuleArgs &a) {
  const int64_t dim = normDim(intAttr(a.op, "dim", 0), a.out()->type().rank());
  std::vector<Value *> r;
  for (size_t i = 0; i < a.op.numOperands(); ++i)
    r.push_back(a.need[i] ? castTo(a.b, a.un("select", a.g, {{"dim", dim}, {"index", int64_t(i)}}),
                                   a.x(i)->type().dtype())
                          : nullptr);
  return r;
}

/// repeat (repeats, new dims leading) and tile (dims, padded with leading 1s): each element of
/// x is read once per copy, so its gradient sums g over the copies: g as [r_0, s_0, r_1, s_1...]
/// (after the new leading dims), summed over the new dims and every r_i.
std::vector<Value *> repeatRule(RuleArgs &a) {
  const Ints xs = staticShape(a.op, a.x(0));
  const int64_t rank = static_cast<int64_t>(xs.size());
  Ints reps = intsAttr(a.op, a.op.name() == "tile" ? "dims" : "repeats");
  if (a.op.name() == "tile" && static_cast<int64_t>(reps.size()) < rank)
    reps.insert(reps.begin(), static_cast<size_t>(rank) - reps.size(), 1);
  if (static_cast<int64_t>(reps.size()) < rank) unsupported(a.op, "fewer repeats than dims");
  const size_t lead = reps.size() - xs.size();
  Ints split, summed;
  for (size_t i = 0; i < lead; ++i) {
    summed.push_back(static_cast<int64_t>(split.size()));
    split.push_back(reps[i]);
  }
  for (size_t j = 0; j < xs.size(); ++j) {
    if (reps[lead + j] != 1) {
      summed.push_back(static_cast<int64_t>(split.size()));
      split.push_back(reps[lead + j]);
    }
    split.push_back(xs[j]);
  }
  if (summed.empty()) return {a.g};
  Value *tiled = a.un("reshape", a.g, {{"shape", split}});
  return {a.b.op("sum", {tiled}, {{"dims", summed}, {"keepdim", false}})};
}

// ---- pad ----

/// The gradient along one dim of size n padded by (before, after) >= 0 in a mode that reads
/// the borders from inside: the interior of g plus each border added at its source elements.
Value *borderAdjoint(RuleArgs &a, Value *g, int64_t d, int64_t n, int64_t before, int64_t after,
                     const std::string &mode) {
  Value *dx = sliceDim(a, g, d, before, before + n);
  auto add = [&](Value *part) { dx = a.bin("add", dx, part); };
  auto flipped = [&](Value *v) { return a.un("flip", v, {{"dims", Ints{d}}}); };
  auto summed = [&](Value *v) {
    return a.b.op("sum", {v}, {{"dims", Ints{d}}, {"keepdim", true}});
  };
  if (before > 0) {
    Value *left = sliceDim(a, g, d, 0, before);
    if (mode == "reflect") // out[k] = x[before - k]: x[1..before] in reverse
      add(zeroPadDim(a, flipped(left), d, 1, n - 1 - before));
    else if (mode == "replicate") // x[0]
      add(zeroPadDim(a, summed(left), d, 0, n - 1));
    else // circular: x[n - before + k]
      add(zeroPadDim(a, left, d, n - before, 0));
  }
  if (after > 0) {
    Value *right = sliceDim(a, g, d, before + n, before + n + after);
    if (mode == "reflect") // out[before + n + k] = x[n - 2 - k]: x[n-1-after..n-2] reversed
      add(zeroPadDim(a, flipped(right), d, n - 1 - after, 1));
    else if (mode == "replicate") // x[n - 1]
      add(zeroPadDim(a, summed(right), d, n - 1, 0));
    else // circular: x[k]
      add(zeroPadDim(a, right, d, 0, n - after));
  }
  return dx;
}

std::vector<Value *> padRule(RuleArgs &a) {
  const Ints xs = staticShape(a.op, a.x(0));
  const int64_t rank = static_cast<int64_t>(xs.size());
  const Ints pad = intsAttr(a.op, "pad");
  const Attr *m = a.op.attrOrNull("mode");
  const std::string mode = m && m->kind() == AttrKind::Str ? m->asStr() : "constant";
  if (pad.size() % 2 != 0 || static_cast<int64_t>(pad.size()) > 2 * rank)
    unsupported(a.op, "a malformed pad list");
  Value *g = a.g;
  if (mode == "constant") {
    // Crop what the forward added (slices: views), then zero-pad what it cropped.
    const Ints gs = staticShape(a.op, g);
    Ints restore(pad.size(), 0);
    bool crops = false;
    for (size_t k = 0; k < pad.size() / 2; ++k) {
      const int64_t d = rank - 1 - static_cast<int64_t>(k);
      const int64_t before = pad[2 * k], after = pad[2 * k + 1];
      const int64_t size = gs[size_t(d)];
      if (before > 0 || after > 0)
        g = sliceDim(a, g, d, std::max<int64_t>(before, 0), size - std::max<int64_t>(after, 0));
      restore[2 * k] = std::max<int64_t>(-before, 0);
      restore[2 * k + 1] = std::max<int64_t>(-after, 0);
      crops |= before < 0 || after < 0;
    }
    if (crops) g = a.un("pad", g, {{"pad", restore}});
    return {g};
  }
  if (mode != "reflect" && mode != "replicate" && mode != "circular")
    unsupported(a.op, "pad mode '" + mode + "'");
  for (size_t k = 0; k < pad.size() / 2; ++k) {
    const int64_t d = rank - 1 - static_cast<int64_t>(k);
    const int64_t before = pad[2 * k], after = pad[2 * k + 1];
    if (before == 0 && after == 0) continue;
    if (before < 0 || after < 0) unsupported(a.op, "a negative pad in mode '" + mode + "'");
    g = borderAdjoint(a, g, d, xs[size_t(d)], before, after, mode);
  }
  return {g};
}

// ---- roll, flip, narrow, index_select ----

std::vector<Value *> rollRule(RuleArgs &a) {
  Ints shifts = intsAttr(a.op, "shifts");
  for (int64_t &s : shifts)
    s = -s;
  return {a.un("roll", a.g, {{"shifts", shifts}, {"dims", intsAttr(a.op, "dims")}})};
}

std::vector<Value *> flipRule(RuleArgs &a) {
  return {a.un("flip", a.g, {{"dims", intsAttr(a.op, "dims")}})};
}

std::vector<Value *> narrowRule(RuleArgs &a) {
  const int64_t rank = a.x(0)->type().rank();
  const int64_t dim = normDim(a.op.attr("dim").asInt(), rank);
  const std::optional<int64_t> size = a.x(0)->type().shape()[size_t(dim)].staticValue();
  if (!size) unsupported(a.op, "a narrow of a symbolic dim");
  int64_t start = a.op.attr("start").asInt();
  if (start < 0) start += *size;
  const int64_t length = a.op.attr("length").asInt();
  return {zeroPadDim(a, a.g, dim, start, *size - start - length)};
}

/// out = x.index_select(dim, index): g scatter_added along dim at index (broadcast over the
/// other dims; an index selected twice accumulates).
std::vector<Value *> indexSelectRule(RuleArgs &a) {
  const int64_t rank = a.x(0)->type().rank();
  if (rank == 0) unsupported(a.op, "a 0-d input");
  const int64_t dim = normDim(a.op.attr("dim").asInt(), rank);
  Ints along(static_cast<size_t>(rank), 1);
  along[size_t(dim)] = -1;
  Value *idx = a.un("reshape", a.x(1), {{"shape", along}});
  idx = a.un("expand", idx, {{"shape", staticShape(a.op, a.g)}});
  Value *zeros = a.un("zeros_like", a.x(0));
  return {a.b.op("scatter_add", {zeros, idx, a.g}, {{"dim", dim}}), nullptr};
}

/// out = x[i0, i1, ...] (advanced indexing): g added into zeros at the same indices (aten's
/// index_backward: an element read twice accumulates).
std::vector<Value *> indexRule(RuleArgs &a) {
  std::vector<Value *> operands = {a.un("zeros_like", a.x(0)), a.g};
  for (size_t i = 1; i < a.op.numOperands(); ++i)
    operands.push_back(a.x(i));
  std::vector<Value *> r(a.op.numOperands(), nullptr);
  r[0] = a.b.op("index_put", operands, {{"accumulate", true}});
  return r;
}

/// out = index_put(self, values, i0, i1, ...) (aten's derivatives.yaml for index_put_): values
/// get g read at the written positions, g[i0, i1, ...], summed to their broadcast shape (with
/// accumulate false and a position written twice, each write gets that position's gradient, as
/// in eager); self gets g itself when the values were added (accumulate), else g with the
/// written positions zeroed (their old contents were overwritten). Index operands (integer
/// tensors, `none` for a whole dim) get none.
std::vector<Value *> indexPutRule(RuleArgs &a) {
  const Attr *acc = a.op.attrOrNull("accumulate");
  const bool accumulate = acc && acc->kind() == AttrKind::Bool && acc->asBool();
  std::vector<Value *> r(a.op.numOperands(), nullptr);
  auto withIndices = [&](std::vector<Value *> operands) {
    for (size_t i = 2; i < a.op.numOperands(); ++i)
      operands.push_back(a.x(i));
    return operands;
  };
  if (a.need[0]) {
    if (accumulate) {
      r[0] = a.g;
    } else {
      Value *zero =
          a.b.op("zeros", {}, {{"shape", Ints{}}, {"dtype", a.g->type().dtype()}}); // broadcast
      r[0] = a.b.op("index_put", withIndices({a.g, zero}), {{"accumulate", false}});
    }
  }
  if (a.need[1]) {
    Value *values = a.x(1);
    Value *picked = a.b.op("index", withIndices({a.g}));
    // Values with extra leading size-1 dims (index_put strips them before broadcasting).
    if (picked->type().rank() < values->type().rank())
      picked = a.un("reshape", picked, {{"shape", staticShape(a.op, values)}});
    r[1] = sumTo(a, picked, values);
  }
  return r;
}

/// out = scatter_add(self, index, src) / scatter(self, index, src | value) along dim
/// (derivatives.yaml): src gets g read where it was written, g.gather(dim, index); self gets g
/// itself when src was added, else g with the written positions zeroed (overwritten). Eager's
/// backward raises for an index smaller than src (the gathered gradient has index's shape), and
/// scatter's `reduce` modes have no rule: both stay eager's.
std::vector<Value *> scatterRule(RuleArgs &a) {
  if (a.op.attrOrNull("reduce")) unsupported(a.op, "a reduce mode");
  const bool adds = a.op.name() == "scatter_add";
  const int64_t dim = a.op.attr("dim").asInt();
  std::vector<Value *> r(a.op.numOperands(), nullptr);
  if (a.need[0])
    r[0] = adds ? a.g : a.b.op("scatter", {a.g, a.x(1)}, {{"dim", dim}, {"value", Attr(0.0)}});
  if (a.op.numOperands() > 2 && a.need[2] && a.x(2)->type().isTensor()) {
    if (!(a.x(1)->type().shape() == a.x(2)->type().shape()))
      unsupported(a.op, "an index of another shape than src (eager's backward raises)");
    r[2] = a.b.op("gather", {a.g, a.x(1)}, {{"dim", dim}});
  }
  return r;
}

/// out = scatter_reduce(self, index, src) along dim, reduce sum / mean / amax / amin (eager's
/// scatter_reduce_backward): sum as scatter_add; mean divides g by each element's count of
/// values (self's included or not; 1 where none was scattered); amax / amin share g evenly among
/// the values equal to the result (self's where it equals it, the src values equal to the
/// result at their target). Without self in the reduction, self gets nothing where a value was
/// scattered. prod (zeros need eager's special cases) stays eager's.
std::vector<Value *> scatterReduceRule(RuleArgs &a) {
  const std::string &reduce = a.op.attr("reduce").asStr();
  if (reduce == "prod") unsupported(a.op, "reduce prod");
  if (!(a.x(1)->type().shape() == a.x(2)->type().shape()))
    unsupported(a.op, "an index of another shape than src (eager's backward raises)");
  const bool includeSelf = !a.op.attrOrNull("include_self") || a.op.attr("include_self").asBool();
  const int64_t dim = a.op.attr("dim").asInt();
  const DType dt = a.x(0)->type().dtype();
  Value *index = a.x(1);
  auto gather = [&](Value *v) { return a.b.op("gather", {v, index}, {{"dim", dim}}); };
  auto scatterAdd = [&](Value *into, Value *v) {
    return a.b.op("scatter_add", {into, index, v}, {{"dim", dim}});
  };
  Value *gSelf = a.g, *gSrc = nullptr;
  if (reduce == "sum") {
    gSrc = gather(a.g);
  } else if (reduce == "mean") {
    Value *n =
        scatterAdd(a.un(includeSelf ? "ones_like" : "zeros_like", a.g), a.un("ones_like", a.x(2)));
    gSelf = a.bin("div", a.g, a.b.op("clamp", {n}, {{"min", Attr(1.0)}}));
    gSrc = gather(gSelf);
  } else if (reduce == "amax" || reduce == "amin") {
    Value *selfIs = castTo(a.b, a.bin("eq", a.x(0), a.out()), dt);
    Value *srcIs = castTo(a.b, a.bin("eq", a.x(2), gather(a.out())), dt);
    Value *share = a.bin("div", a.g, scatterAdd(selfIs, srcIs));
    gSelf = a.mul(selfIs, share);
    gSrc = a.mul(srcIs, gather(share));
  } else {
    unsupported(a.op, "reduce " + reduce);
  }
  if (!includeSelf) gSelf = a.b.op("scatter", {gSelf, index}, {{"dim", dim}, {"value", Attr(0.0)}});
  return {a.need[0] ? gSelf : nullptr, nullptr, a.need[2] ? gSrc : nullptr};
}

// ---- cumsum ----

/// d/dx_j of out_i = sum_{k <= i} x_k is 1 for i >= j: dx_j = sum_{i >= j} g_i, the cumsum of
/// g from the end of the dim (one native scan, docs/backend.md "Scans"); a reverse cumsum's
/// gradient is the forward one.
std::vector<Value *> cumsumRule(RuleArgs &a) {
  Value *x = a.x(0);
  if (x->type().rank() == 0) return {castTo(a.b, a.g, x->type().dtype())};
  const Attr *r = a.op.attrOrNull("reverse");
  const bool reverse = !(r && r->asBool());
  Value *dx = a.un("cumsum", a.g, {{"dim", a.op.attr("dim").asInt()}, {"reverse", reverse}});
  return {castTo(a.b, dx, x->type().dtype())};
}

/// topk / sort: values[..., j] = x[..., indices[..., j]] along dim, each element of x at most
/// once, so g goes back to where it was read (scatter_add into zeros; Mixtral's router).
std::vector<Value *> selectedValuesRule(RuleArgs &a) {
  Value *g = a.gs.at(0); // the indices (result 1) are integers: no gradient
  if (!g) return {nullptr};
  Value *zeros = a.un("zeros_like", a.x(0));
  return {a.b.op("scatter_add", {zeros, a.op.result(1), g}, {{"dim", a.op.attr("dim").asInt()}})};
}

} // namespace

void addMovementRules(std::map<std::string, Rule> &t) {
  t["stack"] = stackRule;
  t["repeat"] = t["tile"] = repeatRule;
  t["pad"] = padRule;
  t["roll"] = rollRule;
  t["flip"] = flipRule;
  t["narrow"] = narrowRule;
  t["index_select"] = indexSelectRule;
  t["index"] = indexRule;
  t["index_put"] = indexPutRule;
  t["scatter"] = t["scatter_add"] = scatterRule;
  t["scatter_reduce"] = scatterReduceRule;
  t["cumsum"] = cumsumRule;
  t["topk"] = t["sort"] = selectedValuesRule;
}

} // namespace xjit::passes::autodiff_rules
