// torch.einsum as IR ops: each operand's labels summed out where nothing else needs them, then
// the operands contracted left to right, a pair at a time, as PyTorch's sumproduct_pair does
// without opt_einsum: both permuted to [batch, free, contracted] and [batch, contracted, free],
// reshaped to 3-d and multiplied by matmul, the product reshaped and permuted to the labels
// still needed. Every step is an op with a gradient. Static sizes only; a label repeated in one
// operand (a diagonal) stays PyTorch's op.
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

/// The labels of one side of the equation ("ij", "b...d"): letters as 0-51, "..." as -1.
std::optional<std::vector<int>> parseLabels(const std::string &s) {
  std::vector<int> out;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == ' ') continue;
    if (c == '.') {
      if (s.compare(i, 3, "...") != 0) return std::nullopt;
      out.push_back(-1);
      i += 2;
    } else if (c >= 'a' && c <= 'z') {
      out.push_back(c - 'a');
    } else if (c >= 'A' && c <= 'Z') {
      out.push_back(26 + (c - 'A'));
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

/// `x` with the dims whose labels are not in `keep` summed out.
Labeled sumOut(Analyzer &a, Labeled x, const std::set<int> &keep) {
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
  if (dims.empty()) return x;
  r.t = a.emit1("sum", {x.t}, {{"dims", Attr(dims)}, {"keepdim", Attr(false)}});
  return r;
}

int64_t product(const std::vector<int64_t> &v) {
  return std::accumulate(v.begin(), v.end(), int64_t(1), std::multiplies<>());
}

/// The contraction of x and y over their shared labels not in `keep`; the result's labels:
/// the shared ones kept (batch), then x's own, then y's own.
Labeled contract(Analyzer &a, const Labeled &x, const Labeled &y, const std::set<int> &keep) {
  std::vector<int> batch, left, right, summed;
  std::map<int, int64_t> size;
  for (size_t d = 0; d < x.labels.size(); ++d)
    size[x.labels[d]] = x.sizes[d];
  for (size_t d = 0; d < y.labels.size(); ++d)
    size[y.labels[d]] = std::max(size[y.labels[d]], y.sizes[d]);
  for (int l : x.labels) {
    const bool shared = std::count(y.labels.begin(), y.labels.end(), l) > 0;
    (shared ? (keep.count(l) ? batch : summed) : left).push_back(l);
  }
  for (int l : y.labels)
    if (std::count(x.labels.begin(), x.labels.end(), l) == 0) right.push_back(l);
  // Each operand permuted to its groups' order, a size-1 dim broadcast where the other has more.
  auto arrange = [&](const Labeled &t, std::initializer_list<const std::vector<int> *> groups) {
    std::vector<int64_t> perm, sizes, full;
    for (const std::vector<int> *g : groups)
      for (int l : *g) {
        const auto at = std::find(t.labels.begin(), t.labels.end(), l) - t.labels.begin();
        perm.push_back(at);
        sizes.push_back(t.sizes[size_t(at)]);
        full.push_back(size[l]);
      }
    VarPtr r = permuted(a, t.t, perm);
    if (sizes != full) r = a.emit1("expand", {r}, {{"shape", Attr(full)}});
    return std::make_pair(r, full);
  };
  auto sizesOf = [&](const std::vector<int> &g) {
    std::vector<int64_t> s;
    for (int l : g)
      s.push_back(size[l]);
    return s;
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
  auto needed = [&](size_t after) {
    std::set<int> keep(out.begin(), out.end());
    for (size_t j = after; j < xs.size(); ++j)
      keep.insert(xs[j].labels.begin(), xs[j].labels.end());
    return keep;
  };
  Labeled acc = sumOut(a, xs[0], needed(1));
  for (size_t i = 1; i < xs.size(); ++i) {
    std::set<int> keep = needed(i + 1);
    std::set<int> withAcc = keep;
    withAcc.insert(acc.labels.begin(), acc.labels.end());
    Labeled y = sumOut(a, xs[i], withAcc);
    std::set<int> accKeep = keep;
    accKeep.insert(y.labels.begin(), y.labels.end());
    acc = sumOut(a, acc, accKeep);
    acc = contract(a, acc, y, keep);
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
  return r;
}

} // namespace xjit::frontend
