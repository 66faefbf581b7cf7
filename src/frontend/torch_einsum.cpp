// torch.einsum as IR ops, step by step as ATen's einsum does it without opt_einsum (torch
// 2.13), so that the result has eager's values and strides: each operand unsqueezed and permuted
// to the aligned dims (the output's labels, then the contracted ones), then contracted left to
// right a pair at a time as sumproduct_pair does: a dim only one of the pair has above size 1
// and no later operand has is summed first; the pair's product is a broadcast mul where nothing
// is contracted, else both permuted to [batch, free, contracted] and [batch, contracted, free],
// reshaped to 3-d and multiplied by matmul, the product viewed and permuted back. Every step is
// an op with a gradient. Static sizes only; a label repeated in one operand (a diagonal) stays
// PyTorch's op.
#include "torch_ops.h"

#include "analyzer.h"
#include "py_util.h"

#include <algorithm>
#include <deque>
#include <map>
#include <numeric>
#include <optional>
#include <set>

namespace xjit::frontend {

namespace {

/// An operand with one label per dim (ints: letters, then one per ellipsis dim) and its sizes.
struct Labeled {
  VarPtr t;
  std::vector<int> labels;
  std::vector<int64_t> sizes;
};

constexpr int kEllipsisLabel = 1000; // ellipsis dim k (counted from the left) is 1000 + k

/// The labels of one side of the equation ("ij", "b...d"): letters as ATen's subscripts, A-Z
/// as 0-25 and a-z as 26-51 (the implicit output lists them in that order), "..." as -1.
std::optional<std::vector<int>> parseLabels(const std::string &s) {
  std::vector<int> out;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == ' ') continue;
    if (c == '.') {
      if (s.compare(i, 3, "...") != 0) return std::nullopt;
      out.push_back(-1);
      i += 2;
    } else if (c >= 'A' && c <= 'Z') {
      out.push_back(c - 'A');
    } else if (c >= 'a' && c <= 'z') {
      out.push_back(26 + (c - 'a'));
    } else {
      return std::nullopt;
    }
  }
  if (std::count(out.begin(), out.end(), -1) > 1) return std::nullopt;
  return out;
}

/// The labels with "..." replaced by `ellipsisDims` ellipsis labels, right-aligned to `maxDims`
/// (an operand with fewer ellipsis dims broadcasts over the leading ones).
std::vector<int> expandEllipsis(const std::vector<int> &labels, int64_t ellipsisDims,
                                int64_t maxDims) {
  std::vector<int> out;
  for (int l : labels) {
    if (l != -1) {
      out.push_back(l);
      continue;
    }
    for (int64_t k = maxDims - ellipsisDims; k < maxDims; ++k)
      out.push_back(kEllipsisLabel + int(k));
  }
  return out;
}

VarPtr permuted(Analyzer &a, const VarPtr &t, const std::vector<int64_t> &perm) {
  std::vector<int64_t> identity(perm.size());
  std::iota(identity.begin(), identity.end(), 0);
  if (perm == identity) return t;
  return a.emit1("permute", {t}, {{"dims", Attr(perm)}});
}

VarPtr reshaped(Analyzer &a, const VarPtr &t, const std::vector<int64_t> &from,
                const std::vector<int64_t> &to) {
  if (from == to) return t;
  return a.emit1("reshape", {t}, {{"shape", Attr(to)}});
}

int64_t product(const std::vector<int64_t> &v) {
  return std::accumulate(v.begin(), v.end(), int64_t(1), std::multiplies<>());
}

/// The size of label l in t (1 where t has no such dim, as in ATen's aligned operands).
int64_t labelSize(const Labeled &t, int l) {
  const auto at = std::find(t.labels.begin(), t.labels.end(), l);
  return at == t.labels.end() ? 1 : t.sizes[size_t(at - t.labels.begin())];
}

/// t in ATen's aligned form: a dim for every label of the equation, in the aligned order
/// `order`; an operand's missing labels are unsqueezed at its end, then all permuted, as ATen
/// prepares each operand (so the strides of those size-1 dims are ATen's too).
Labeled alignedForm(Analyzer &a, const Labeled &t, const std::vector<int> &order) {
  if (t.labels == order) return t;
  Labeled r{t.t, order, {}};
  std::vector<int64_t> perm(order.size(), -1);
  int64_t dim = 0;
  for (int l : t.labels)
    perm[size_t(std::find(order.begin(), order.end(), l) - order.begin())] = dim++;
  for (int64_t &p : perm)
    if (p == -1) {
      r.t = a.emit1("unsqueeze", {r.t}, {{"dim", Attr(dim)}});
      p = dim++;
    }
  r.t = permuted(a, r.t, perm);
  for (int l : order)
    r.sizes.push_back(labelSize(t, l));
  return r;
}

/// ATen's sumproduct_pair of x and y (each an operand or an earlier product) over the aligned
/// dims `sumDims` (both have them above size 1), keeping every dim: with nothing to sum, the
/// aligned forms' broadcast mul (TensorIterator lays it out from their strides); else the dims
/// both have above 1 are batch (lro), those only x has x's own (lo), all others y's own (ro);
/// x permuted to [lro, lo, summed] and y to [lro, summed, ro], each reshaped to 3-d, matmul,
/// the product viewed as [lro, lo, 1 per summed dim, ro] and permuted back to the aligned
/// order. ATen multiplies the other way round, [lro, ro, ..., lo], where every ro dim comes
/// before every lo dim in the aligned order (observed on torch 2.13: `ij,jk->ki` is
/// contiguous). matmul's product is contiguous whatever its operands' layouts, so they are
/// permuted from the form they have (their size-1 dims last) rather than aligned first. With
/// `compact`, the product keeps only its dims above size 1, in the product's order.
Labeled sumProductPair(Analyzer &a, const Labeled &x, const Labeled &y,
                       const std::vector<int64_t> &sumDims, const std::vector<int> &order,
                       bool compact) {
  std::vector<int64_t> sizes;
  for (int l : order)
    sizes.push_back(std::max(labelSize(x, l), labelSize(y, l)));
  if (sumDims.empty()) {
    VarPtr z = a.emit1("mul", {alignedForm(a, x, order).t, alignedForm(a, y, order).t});
    return Labeled{z, order, sizes};
  }
  std::vector<int64_t> lro, lo, ro;
  for (int64_t p = 0; p < int64_t(order.size()); ++p) {
    if (std::count(sumDims.begin(), sumDims.end(), p)) continue;
    const bool sl = labelSize(x, order[size_t(p)]) != 1, sr = labelSize(y, order[size_t(p)]) != 1;
    (sl && sr ? lro : sl ? lo : ro).push_back(p);
  }
  const bool swap = !lo.empty() && !ro.empty() && ro.back() < lo.front();
  const Labeled &first = swap ? y : x, &second = swap ? x : y;
  const std::vector<int64_t> &own1 = swap ? ro : lo, &own2 = swap ? lo : ro;
  auto sizesAt = [&](const std::vector<int64_t> &dims) {
    std::vector<int64_t> s;
    for (int64_t p : dims)
      s.push_back(sizes[size_t(p)]);
    return s;
  };
  // t's dims permuted to the labels of `groups` in turn (those it has), its others last.
  auto arrange = [&](const Labeled &t, std::initializer_list<const std::vector<int64_t> *> groups,
                     const std::vector<int64_t> &shape3) {
    std::vector<int64_t> perm, from;
    for (const std::vector<int64_t> *g : groups)
      for (int64_t p : *g)
        if (const auto at = std::find(t.labels.begin(), t.labels.end(), order[size_t(p)]);
            at != t.labels.end())
          perm.push_back(at - t.labels.begin());
    for (size_t d = 0; d < t.labels.size(); ++d)
      if (std::count(perm.begin(), perm.end(), int64_t(d)) == 0) perm.push_back(int64_t(d));
    for (int64_t d : perm)
      from.push_back(t.sizes[size_t(d)]);
    return reshaped(a, permuted(a, t.t, perm), from, shape3);
  };
  const int64_t nb = product(sizesAt(lro)), n1 = product(sizesAt(own1)),
                nk = product(sizesAt(sumDims)), n2 = product(sizesAt(own2));
  VarPtr z = a.emit1("matmul", {arrange(first, {&lro, &own1, &sumDims}, {nb, n1, nk}),
                                arrange(second, {&lro, &sumDims, &own2}, {nb, nk, n2})});
  std::vector<int64_t> outDims = lro;
  outDims.insert(outDims.end(), own1.begin(), own1.end());
  outDims.insert(outDims.end(), sumDims.begin(), sumDims.end());
  outDims.insert(outDims.end(), own2.begin(), own2.end());
  for (int64_t p : sumDims)
    sizes[size_t(p)] = 1;
  if (compact) {
    // Only its dims above size 1, in the product's order (views whose strides nothing reads).
    Labeled r{nullptr, {}, {}};
    for (int64_t p : outDims)
      if (sizes[size_t(p)] != 1) {
        r.labels.push_back(order[size_t(p)]);
        r.sizes.push_back(sizes[size_t(p)]);
      }
    r.t = reshaped(a, z, {nb, n1, n2}, r.sizes);
    return r;
  }
  VarPtr r = a.emit1("reshape", {z}, {{"shape", Attr(sizesAt(outDims))}});
  std::vector<int64_t> back(order.size());
  for (size_t k = 0; k < outDims.size(); ++k)
    back[size_t(outDims[k])] = int64_t(k);
  return Labeled{permuted(a, r, back), order, sizes};
}

/// t summed over the aligned dims `dims`, kept as size-1 dims, as ATen sums an operand before
/// a product where no later operand has those labels above size 1 (on its aligned form: the
/// sum is contiguous in the aligned order).
Labeled sumKeepingDims(Analyzer &a, const Labeled &t, const std::vector<int64_t> &dims,
                       const std::vector<int> &order) {
  Labeled r = alignedForm(a, t, order);
  r.t = a.emit1("sum", {r.t}, {{"dims", Attr(dims)}, {"keepdim", Attr(true)}});
  for (int64_t p : dims)
    r.sizes[size_t(p)] = 1;
  return r;
}

} // namespace

VarPtr lowerEinsum(Analyzer &a, BoundArgs &b, const TorchRow &) {
  PyRef eq = a.asPython(b.at("equation"));
  if (!eq || !PyUnicode_Check(eq.get())) return nullptr;
  const std::string equation = utf8(eq.get());
  std::vector<VarPtr> operands = b.varargs;
  if (operands.size() == 1 && !as<TensorVar>(operands[0]))
    operands = a.sequenceItems(operands[0], "einsum operands"); // einsum(eq, [a, b])
  if (operands.empty()) return nullptr;
  const size_t arrow = equation.find("->");
  const std::string lhs = equation.substr(0, arrow);
  std::vector<std::string> sides;
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    sides.push_back(
        lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (sides.size() != operands.size()) return nullptr; // PyTorch raises
  // Each operand's labels, ellipsis dims numbered from the right alike in all.
  std::vector<std::vector<int>> parsed;
  std::vector<int64_t> ellipsisDims;
  int64_t maxEllipsis = 0;
  for (size_t i = 0; i < operands.size(); ++i) {
    auto *t = as<TensorVar>(operands[i]);
    std::optional<std::vector<int>> l = parseLabels(sides[i]);
    if (!t || !l) return nullptr;
    const int64_t named =
        int64_t(std::count_if(l->begin(), l->end(), [](int x) { return x >= 0; }));
    const bool hasEllipsis = named != int64_t(l->size());
    const int64_t rank = t->type().rank();
    if (rank < named || (!hasEllipsis && rank != named)) return nullptr; // PyTorch raises
    ellipsisDims.push_back(hasEllipsis ? rank - named : 0);
    maxEllipsis = std::max(maxEllipsis, ellipsisDims.back());
    parsed.push_back(std::move(*l));
  }
  std::vector<Labeled> xs;
  std::map<int, int> count; // operands per label
  for (size_t i = 0; i < operands.size(); ++i) {
    const TensorVar &t = *as<TensorVar>(operands[i]);
    Labeled x{operands[i], expandEllipsis(parsed[i], ellipsisDims[i], maxEllipsis), {}};
    for (const DimExpr &d : t.type().shape()) {
      if (!d.isStatic()) return nullptr;
      x.sizes.push_back(d.value());
    }
    std::set<int> seen(x.labels.begin(), x.labels.end());
    if (seen.size() != x.labels.size()) return nullptr; // a diagonal
    for (int l : seen)
      ++count[l];
    xs.push_back(std::move(x));
  }
  // Sizes of a label must agree (or be 1: broadcast).
  std::map<int, int64_t> size;
  for (const Labeled &x : xs)
    for (size_t d = 0; d < x.labels.size(); ++d) {
      int64_t &s = size[x.labels[d]];
      if (s > 1 && x.sizes[d] > 1 && s != x.sizes[d]) return nullptr; // PyTorch raises
      s = std::max(s, x.sizes[d]);
    }
  // The output's labels: as written, else the ellipsis dims then the labels used once, sorted.
  std::vector<int> out;
  if (arrow != std::string::npos) {
    std::optional<std::vector<int>> o = parseLabels(equation.substr(arrow + 2));
    if (!o) return nullptr;
    out = expandEllipsis(*o, maxEllipsis, maxEllipsis);
    std::set<int> distinct(out.begin(), out.end());
    if (distinct.size() != out.size()) return nullptr; // PyTorch raises
    for (int l : out)
      if (!count.count(l) && l < kEllipsisLabel) return nullptr; // PyTorch raises
  } else {
    for (int64_t k = 0; k < maxEllipsis; ++k)
      out.push_back(kEllipsisLabel + int(k));
    for (const auto &[l, n] : count)
      if (n == 1 && l < kEllipsisLabel) out.push_back(l);
  }
  const DType dtype = as<TensorVar>(xs[0].t)->type().dtype();
  if ((dtype != DType::F32 && dtype != DType::F64) ||
      !std::all_of(xs.begin(), xs.end(),
                   [&](const Labeled &x) { return as<TensorVar>(x.t)->type().dtype() == dtype; }))
    return nullptr; // (mixed dtypes: PyTorch's promotion or error)
  // ATen's aligned dim order: the output's labels, then the ellipsis dims not in it, then the
  // contracted labels by subscript.
  std::vector<int> order = out;
  for (const auto &[l, n] : count)
    if (l >= kEllipsisLabel && std::count(order.begin(), order.end(), l) == 0) order.push_back(l);
  for (const auto &[l, n] : count)
    if (std::count(order.begin(), order.end(), l) == 0) order.push_back(l);
  const int64_t outDims = int64_t(out.size()), dims = int64_t(order.size());
  if (xs.size() == 1) {
    // A lone operand: its aligned form, summed over the contracted dims.
    VarPtr r = alignedForm(a, xs[0], order).t;
    if (dims > outDims) {
      std::vector<int64_t> summed(size_t(dims - outDims));
      std::iota(summed.begin(), summed.end(), outDims);
      r = a.emit1("sum", {r}, {{"dims", Attr(summed)}, {"keepdim", Attr(false)}});
    }
    // With nothing summed eager returns a view of it (its permute, or an alias).
    return r == operands[0] ? a.emit1("alias", {r}) : r;
  }
  // Per contracted dim, the operands that have it above size 1 (ATen's dim_counts).
  std::vector<int64_t> counts(size_t(dims), 0);
  for (const Labeled &x : xs)
    for (size_t d = 0; d < x.labels.size(); ++d)
      if (x.sizes[d] != 1)
        ++counts[size_t(std::find(order.begin(), order.end(), x.labels[d]) - order.begin())];
  // Left to right, each product replacing its pair at the front, as ATen without a path: a dim
  // both have above 1 is summed in the product once no later operand has it; one only one of
  // them has above 1, where no later operand has it, is summed out of that one first.
  // Two operands and no output dim of size 1 (the common case): the product's dims of size 1,
  // whose strides nothing reads then, are left out (fewer view ops).
  const bool compact =
      xs.size() == 2 && std::all_of(out.begin(), out.end(), [&](int l) { return size[l] != 1; });
  std::deque<Labeled> ops(xs.begin(), xs.end());
  while (ops.size() > 1) {
    Labeled x = ops[0], y = ops[1];
    ops.erase(ops.begin(), ops.begin() + 2);
    std::vector<int64_t> summed, xSums, ySums;
    for (int64_t p = outDims; p < dims; ++p) {
      const bool inX = labelSize(x, order[size_t(p)]) != 1,
                 inY = labelSize(y, order[size_t(p)]) != 1;
      int64_t &n = counts[size_t(p)];
      if (inX && inY) {
        if (--n == 1) {
          summed.push_back(p);
          n = 0;
        }
      } else if (n == 1 && (inX || inY)) {
        (inX ? xSums : ySums).push_back(p);
        n = 0;
      }
    }
    if (!xSums.empty()) x = sumKeepingDims(a, x, xSums, order);
    if (!ySums.empty()) y = sumKeepingDims(a, y, ySums, order);
    ops.push_front(sumProductPair(a, x, y, summed, order, compact));
  }
  if (ops[0].labels != order) { // compact: the output's labels, permuted to their order
    std::vector<int64_t> perm;
    for (int l : out)
      perm.push_back(std::find(ops[0].labels.begin(), ops[0].labels.end(), l) -
                     ops[0].labels.begin());
    return permuted(a, ops[0].t, perm);
  }
  // The contracted dims are size 1 now: a view without them.
  VarPtr r = ops[0].t;
  if (dims > outDims) {
    std::vector<int64_t> shape;
    for (int l : out)
      shape.push_back(size[l]);
    r = a.emit1("reshape", {r}, {{"shape", Attr(shape)}});
  }
  return r;
}

} // namespace xjit::frontend
