// torch.einsum as IR ops: each operand's labels summed out where nothing else needs them, then
// the operands contracted left to right, a pair at a time, as PyTorch's sumproduct_pair does
// without opt_einsum: both permuted to [batch, free, contracted] and [batch, contracted, free],
// reshaped to 3-d and multiplied by matmul, the product reshaped and permuted to the labels
// still needed; a pair with nothing to contract is a broadcast mul. The groups and their order
// are ATen's (a label is batch only where both operands have it at a size above 1, dims in
// ATen's aligned order), so the result has eager's strides too. Every step is an op with a
// gradient. Static sizes only; a label repeated in one operand (a diagonal) stays PyTorch's op.
#include "torch_ops.h"

#include "analyzer.h"
#include "py_util.h"

#include <algorithm>
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

/// `x` with the dims whose labels are not in `keep` summed out, as ATen sums its operand
/// permuted to the aligned order (`aligned`: label -> index), which gives a result contiguous
/// in that order; with `squeezeOnes`, where they all have size 1, squeezed instead (a view;
/// ATen keeps them as size-1 dims until the end; a lone operand's result, which ATen sums into
/// a new tensor, must not be one).
Labeled sumOut(Analyzer &a, Labeled x, const std::set<int> &keep, const std::map<int, int> &aligned,
               bool squeezeOnes = true) {
  bool any = false, ones = squeezeOnes;
  for (size_t d = 0; d < x.labels.size(); ++d)
    if (!keep.count(x.labels[d])) {
      any = true;
      ones = ones && x.sizes[d] == 1;
    }
  if (!any) return x;
  if (!ones) {
    std::vector<int64_t> perm(x.labels.size());
    std::iota(perm.begin(), perm.end(), 0);
    std::stable_sort(perm.begin(), perm.end(), [&](int64_t p, int64_t q) {
      return aligned.at(x.labels[size_t(p)]) < aligned.at(x.labels[size_t(q)]);
    });
    Labeled p{permuted(a, x.t, perm), {}, {}};
    for (int64_t d : perm) {
      p.labels.push_back(x.labels[size_t(d)]);
      p.sizes.push_back(x.sizes[size_t(d)]);
    }
    x = std::move(p);
  }
  std::vector<int64_t> dims;
  Labeled r{nullptr, {}, {}};
  for (size_t d = 0; d < x.labels.size(); ++d) {
    if (keep.count(x.labels[d])) {
      r.labels.push_back(x.labels[d]);
      r.sizes.push_back(x.sizes[d]);
    } else {
      dims.push_back(int64_t(d));
    }
  }
  r.t = ones ? a.emit1("squeeze", {x.t}, {{"dim", Attr(dims)}})
             : a.emit1("sum", {x.t}, {{"dims", Attr(dims)}, {"keepdim", Attr(false)}});
  return r;
}

int64_t product(const std::vector<int64_t> &v) {
  return std::accumulate(v.begin(), v.end(), int64_t(1), std::multiplies<>());
}

/// The size of label l in t (1 where t has no such dim, as ATen's aligned operands).
int64_t labelSize(const Labeled &t, int l) {
  const auto at = std::find(t.labels.begin(), t.labels.end(), l);
  return at == t.labels.end() ? 1 : t.sizes[size_t(at - t.labels.begin())];
}

/// The contraction of x and y over their shared labels not in `keep`, as ATen's sumproduct_pair:
/// a label both have at a size above 1 is batch (kept) or contracted; one only x has above 1
/// is x's own (kept) or summed out of x first, likewise for y; a kept label neither has above
/// 1 counts as y's. Each group in ATen's aligned order (`aligned`: label -> index). The
/// result's labels: batch, then x's own, then y's own (or y's, then x's, as ATen's product
/// lays them out); with nothing contracted, the aligned operands' broadcast product (mul, laid
/// out as TensorIterator lays it out), in aligned order.
Labeled contract(Analyzer &a, Labeled x, Labeled y, const std::set<int> &keep,
                 const std::map<int, int> &aligned) {
  std::vector<int> all = x.labels;
  for (int l : y.labels)
    if (std::count(all.begin(), all.end(), l) == 0) all.push_back(l);
  std::sort(all.begin(), all.end(), [&](int p, int q) { return aligned.at(p) < aligned.at(q); });
  std::vector<int> batch, left, right, summed;
  std::set<int> dropped; // not kept and not contracted: summed now where one operand has them
  for (int l : all) {
    const bool inX = labelSize(x, l) != 1, inY = labelSize(y, l) != 1;
    if (!keep.count(l)) {
      if (inX && inY) {
        summed.push_back(l);
      } else {
        dropped.insert(l);
      }
    } else {
      (inX && inY ? batch : inX ? left : right).push_back(l);
    }
  }
  auto drop = [&](const Labeled &t) {
    std::set<int> kept;
    for (int l : t.labels)
      if (!dropped.count(l)) kept.insert(l);
    return sumOut(a, t, kept, aligned);
  };
  x = drop(x);
  y = drop(y);
  std::map<int, int64_t> size;
  for (int l : all)
    size[l] = std::max(labelSize(x, l), labelSize(y, l));
  auto sizesOf = [&](const std::vector<int> &g) {
    std::vector<int64_t> s;
    for (int l : g)
      s.push_back(size[l]);
    return s;
  };
  if (summed.empty()) {
    // ATen: at::mul of the two aligned operands (unsqueezed where a label is missing).
    std::vector<int> u = batch;
    u.insert(u.end(), left.begin(), left.end());
    u.insert(u.end(), right.begin(), right.end());
    std::sort(u.begin(), u.end(), [&](int p, int q) { return aligned.at(p) < aligned.at(q); });
    auto align = [&](const Labeled &t) {
      std::vector<int64_t> perm;
      for (int l : u)
        if (const auto at = std::find(t.labels.begin(), t.labels.end(), l); at != t.labels.end())
          perm.push_back(at - t.labels.begin());
      VarPtr r = permuted(a, t.t, perm);
      for (size_t k = 0; k < u.size(); ++k)
        if (std::count(t.labels.begin(), t.labels.end(), u[k]) == 0)
          r = a.emit1("unsqueeze", {r}, {{"dim", Attr(int64_t(k))}});
      return r;
    };
    return Labeled{a.emit1("mul", {align(x), align(y)}), u, sizesOf(u)};
  }
  // ATen multiplies the other way round, [batch, y's own, x's own], where every dim of its
  // aligned operands that is neither batch, x's own nor contracted (y's own, and the size-1
  // dims of labels both lack) comes before all of x's own in the aligned order (observed on
  // torch 2.13: `ij,jk->ki` is contiguous).
  int lastOfY = -1;
  for (const auto &[l, at] : aligned)
    if (std::count(batch.begin(), batch.end(), l) + std::count(left.begin(), left.end(), l) +
            std::count(summed.begin(), summed.end(), l) ==
        0)
      lastOfY = std::max(lastOfY, at);
  if (!left.empty() && lastOfY >= 0 && lastOfY < aligned.at(left.front())) {
    std::swap(x, y);
    std::swap(left, right);
  }
  // Each operand permuted to its groups' order; its other labels (size 1) go last.
  auto arrange = [&](const Labeled &t, std::initializer_list<const std::vector<int> *> groups) {
    std::vector<int64_t> perm, sizes;
    for (const std::vector<int> *g : groups)
      for (int l : *g)
        if (const auto at = std::find(t.labels.begin(), t.labels.end(), l); at != t.labels.end())
          perm.push_back(at - t.labels.begin());
    for (size_t d = 0; d < t.labels.size(); ++d)
      if (std::count(perm.begin(), perm.end(), int64_t(d)) == 0) perm.push_back(int64_t(d));
    for (int64_t d : perm)
      sizes.push_back(t.sizes[size_t(d)]);
    return std::make_pair(permuted(a, t.t, perm), sizes);
  };
  const std::vector<int64_t> b = sizesOf(batch), m = sizesOf(left), k = sizesOf(summed),
                             n = sizesOf(right);
  auto [xa, xs] = arrange(x, {&batch, &left, &summed});
  auto [ya, ys] = arrange(y, {&batch, &summed, &right});
  VarPtr x3 = reshaped(a, xa, xs, {product(b), product(m), product(k)});
  VarPtr y3 = reshaped(a, ya, ys, {product(b), product(k), product(n)});
  VarPtr z = a.emit1("matmul", {x3, y3});
  Labeled r{nullptr, batch, b};
  r.labels.insert(r.labels.end(), left.begin(), left.end());
  r.labels.insert(r.labels.end(), right.begin(), right.end());
  r.sizes.insert(r.sizes.end(), m.begin(), m.end());
  r.sizes.insert(r.sizes.end(), n.begin(), n.end());
  r.t = reshaped(a, z, {product(b), product(m), product(n)}, r.sizes);
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
  // Left to right: the labels still needed are the output's and the later operands'.
  // (A later operand's label of size 1 does not count, as in ATen's dim_counts.)
  auto needed = [&](size_t after) {
    std::set<int> keep(out.begin(), out.end());
    for (size_t j = after; j < xs.size(); ++j)
      for (size_t d = 0; d < xs[j].labels.size(); ++d)
        if (xs[j].sizes[d] != 1) keep.insert(xs[j].labels[d]);
    return keep;
  };
  // ATen's aligned dim order: the output's labels, then the ellipsis dims not in it, then the
  // contracted labels by subscript.
  std::map<int, int> aligned;
  for (int l : out)
    aligned.emplace(l, int(aligned.size()));
  for (const auto &[l, n] : count)
    if (l >= kEllipsisLabel && !aligned.count(l)) aligned.emplace(l, int(aligned.size()));
  for (const auto &[l, n] : count)
    if (!aligned.count(l)) aligned.emplace(l, int(aligned.size()));
  Labeled acc = sumOut(a, xs[0], needed(1), aligned, xs.size() > 1);
  for (size_t i = 1; i < xs.size(); ++i) {
    std::set<int> keep = needed(i + 1);
    std::set<int> withAcc = keep;
    withAcc.insert(acc.labels.begin(), acc.labels.end());
    Labeled y = sumOut(a, xs[i], withAcc, aligned);
    std::set<int> accKeep = keep;
    accKeep.insert(y.labels.begin(), y.labels.end());
    acc = sumOut(a, acc, accKeep, aligned);
    acc = contract(a, acc, y, keep, aligned);
  }
  // Broadcast output dims a single operand kept at size 1 stay 1, as in eager.
  std::vector<int64_t> perm;
  for (int l : out) {
    const auto at = std::find(acc.labels.begin(), acc.labels.end(), l);
    if (at == acc.labels.end()) return nullptr; // (an ellipsis dim no operand has)
    perm.push_back(at - acc.labels.begin());
  }
  if (perm.size() != acc.labels.size()) return nullptr;
  VarPtr r = permuted(a, acc.t, perm);
  // A lone operand with nothing summed: eager returns a view of it (its permute, or an alias).
  if (r == operands[0]) r = a.emit1("alias", {r});
  // ATen views a product to drop the contracted labels' dims, which restrides size-1 dims.
  const bool ones = std::find(acc.sizes.begin(), acc.sizes.end(), 1) != acc.sizes.end();
  if (xs.size() > 1 && aligned.size() > out.size() && ones) {
    std::vector<int64_t> shape;
    for (int l : out)
      shape.push_back(size[l]);
    r = a.emit1("reshape", {r}, {{"shape", Attr(shape)}});
  }
  return r;
}

} // namespace xjit::frontend
