// Mixture-of-experts dispatch ops: histc (tokens per expert, any float histogram) and the grouped
// matrix products over rows sorted by group (grouped_mm and its weight gradient
// grouped_mm_weight). Their results have static shapes; only the group boundaries are data.
#include "grouped.h"

#include "nn_util.h"

#include <cmath>
#include <limits>

namespace xjit::ops::nn {

std::vector<int64_t> groupEnds(std::string_view op, const Tensor &offs, int64_t rows) {
  std::vector<int64_t> ends(static_cast<size_t>(offs.numel()));
  int64_t prev = 0;
  for (size_t e = 0; e < ends.size(); ++e) {
    int64_t end = offs.getInt(static_cast<int64_t>(e));
    if (end < prev || end > rows)
      kernelFail(std::string(op) + ": offsets must be non-decreasing within [0, " +
                 std::to_string(rows) + "], got " + std::to_string(end) + " after " +
                 std::to_string(prev));
    ends[e] = prev = end;
  }
  return ends;
}

namespace {

// ---- histc ----

/// ATen's histc on CPU, computed in the input's own type T as ATen's kernel does: the edges are
/// min and max (the data's extrema when equal, widened by 1 when still equal); an element in
/// [min, max] goes to bin (x - min) * bins / (max - min) truncated, the last bin taking max
/// itself; NaN and elements outside are not counted.
template <class T> Tensor histcOf(const Op &op, const Tensor &x) {
  const int64_t bins = attrInt(op, "bins");
  double lo = attrFloat(op, "min"), hi = attrFloat(op, "max");
  const int64_t n = x.numel();
  if (lo == hi && n > 0) {
    lo = std::numeric_limits<double>::infinity(), hi = -lo;
    for (int64_t i = 0; i < n; ++i) {
      double v = x.getDouble(i);
      if (std::isnan(v)) lo = hi = v; // aminmax propagates NaN: the check below reports it
      if (std::isnan(lo)) break;
      lo = std::min(lo, v), hi = std::max(hi, v);
    }
  }
  if (lo == hi) lo -= 1, hi += 1;
  if (!std::isfinite(lo) || !std::isfinite(hi))
    kernelFail("histc: range of [" + std::to_string(lo) + ", " + std::to_string(hi) +
               "] is not finite");
  if (!(lo < hi)) kernelFail("histc: max must be larger than min");
  const T left = static_cast<T>(lo), right = static_cast<T>(hi);
  std::vector<double> counts(static_cast<size_t>(bins), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    const T v = static_cast<T>(x.getDouble(i));
    if (!(v >= left && v <= right)) continue;
    auto pos = static_cast<int64_t>((v - left) * static_cast<T>(bins) / (right - left));
    if (pos == bins) pos -= 1;
    counts[static_cast<size_t>(pos)] += 1;
  }
  return store<double>(counts, x.dtype(), {bins});
}

OpDef histcRow() {
  return OpDef{
      .name = "histc",
      .summary = "torch.histc: counts of the elements in `bins` equal bins over [min, max] "
                 "(min == max: the data's extrema), in the input's float dtype. No gradient.",
      .operands = {{"input"}},
      .attrs = {{"bins", AttrKind::Int, Attr(int64_t{100})},
                {"min", AttrKind::Float, Attr(int64_t{0})},
                {"max", AttrKind::Float, Attr(int64_t{0})}},
      .infer =
          [](const Op &op) {
            const Type &x = tensorOperand(op, 0);
            if (x.dtype() != DType::F32 && x.dtype() != DType::F64)
              inferFail("histc: input must be f32 or f64, got " + x.str());
            const int64_t bins = attrInt(op, "bins");
            if (bins <= 0) inferFail("histc: bins must be > 0, got " + std::to_string(bins));
            if (attrFloat(op, "min") > attrFloat(op, "max"))
              inferFail("histc: max must be larger than min");
            return std::vector<Type>{x.withShape({DimExpr(bins)})};
          },
      .kernel =
          [](const Op &op, std::span<const RtValue> in) {
            const Tensor &x = in[0].tensor();
            return std::vector<RtValue>{x.dtype() == DType::F32 ? histcOf<float>(op, x)
                                                                : histcOf<double>(op, x)};
          },
  };
}

// ---- grouped_mm, grouped_mm_weight ----

/// grouped_mm: input [T,K], weight [E,K,N], offs [E] -> [T,N]; grouped_mm_weight: input [T,K],
/// grad [T,N], offs [E] -> [E,K,N]. offs holds integers.
std::vector<Type> groupedInfer(const Op &op) {
  const std::string &name = op.name();
  const bool weightGrad = name == "grouped_mm_weight";
  const std::string other = weightGrad ? "grad" : "weight";
  const Type &x = tensorOperand(op, 0), &y = tensorOperand(op, 1), &offs = tensorOperand(op, 2);
  if (x.rank() != 2 || y.rank() != (weightGrad ? 2 : 3))
    inferFail(name + ": expected input [T,K] and " +
              (weightGrad ? "grad [T,N]" : "weight [E,K,N]") + ", got " + x.str() + " and " +
              y.str());
  requireFloating(name, "input", x);
  requireSameDType(name, "input", x, other, y);
  checkDimEq(x.shape()[weightGrad ? 0 : 1], y.shape()[weightGrad ? 0 : 1],
             name + ": input " + x.str() + " and " + other + " " + y.str() + " differ in " +
                 (weightGrad ? "T" : "K"));
  if (offs.rank() != 1 || !isIntegral(offs.dtype()))
    inferFail(name + ": offs must be a 1-D integer tensor, got " + offs.str());
  const DimExpr &groups = offs.shape()[0];
  if (weightGrad) return {x.withShape({groups, x.shape()[1], y.shape()[1]})};
  checkDimEq(groups, y.shape()[0],
             name + ": offs has " + groups.str() + " groups, expected " + y.shape()[0].str());
  return {x.withShape({x.shape()[0], y.shape()[2]})};
}

/// out[rows of e] = x[rows of e] · w[e]; rows in no group are 0.
std::vector<RtValue> groupedMmKernel(const Op &op, std::span<const RtValue> in) {
  const Tensor &x = in[0].tensor(), &w = in[1].tensor();
  const int64_t t = x.size(0), k = x.size(1), n = w.size(2);
  if (w.size(1) != k || in[2].tensor().numel() != w.size(0))
    kernelFail("grouped_mm: input, weight and offs do not fit");
  std::vector<int64_t> ends = groupEnds("grouped_mm", in[2].tensor(), t);
  std::vector<double> a = load<double>(x), b = load<double>(w), c(static_cast<size_t>(t * n));
  for (int64_t e = 0, start = 0; e < static_cast<int64_t>(ends.size()); start = ends[e++])
    gemm(a.data() + start * k, b.data() + e * k * n, c.data() + start * n, ends[e] - start, k, n);
  return {store<double>(c, resultDType(op), {t, n})};
}

/// out[e] = x[rows of e]^T · g[rows of e]; a group without rows gives 0.
std::vector<RtValue> groupedMmWeightKernel(const Op &op, std::span<const RtValue> in) {
  const Tensor &x = in[0].tensor(), &g = in[1].tensor();
  const int64_t t = x.size(0), k = x.size(1), n = g.size(1);
  if (g.size(0) != t) kernelFail("grouped_mm_weight: input and grad differ in rows");
  std::vector<int64_t> ends = groupEnds("grouped_mm_weight", in[2].tensor(), t);
  const int64_t groups = static_cast<int64_t>(ends.size());
  // x^T as a [K,T] buffer, so that each group's product is a gemm over a column range.
  std::vector<double> xv = load<double>(x), gv = load<double>(g), xt(xv.size());
  for (int64_t i = 0; i < t; ++i)
    for (int64_t p = 0; p < k; ++p)
      xt[static_cast<size_t>(p * t + i)] = xv[static_cast<size_t>(i * k + p)];
  std::vector<double> c(static_cast<size_t>(groups * k * n)), part;
  for (int64_t e = 0, start = 0; e < groups; start = ends[e++]) {
    const int64_t rows = ends[e] - start;
    if (rows == 0) continue;
    std::vector<double> xe(static_cast<size_t>(k * rows));
    for (int64_t p = 0; p < k; ++p)
      std::copy_n(xt.begin() + p * t + start, rows, xe.begin() + p * rows);
    gemm(xe.data(), gv.data() + start * n, c.data() + e * k * n, k, rows, n);
  }
  return {store<double>(c, resultDType(op), {groups, k, n})};
}

} // namespace

void registerGroupedOps(OpRegistry &r) {
  r.add(histcRow());
  r.add(OpDef{
      .name = "grouped_mm",
      .summary = "Grouped matrix product: input [T,K] rows sorted by group, weight [E,K,N], offs "
                 "[E] cumulative row counts (non-decreasing, <= T); rows [offs[e-1], offs[e]) "
                 "times weight[e], rows from offs[E-1] on are 0. Result [T,N].",
      .operands = {{"input"}, {"weight"}, {"offs"}},
      .infer = groupedInfer,
      .kernel = groupedMmKernel,
  });
  r.add(OpDef{
      .name = "grouped_mm_weight",
      .summary = "grouped_mm's weight gradient: for each group e, input[rows of e]^T · "
                 "grad[rows of e] (0 for an empty group). Result [E,K,N].",
      .operands = {{"input"}, {"grad"}, {"offs"}},
      .infer = groupedInfer,
      .kernel = groupedMmWeightKernel,
  });
}

} // namespace xjit::ops::nn
