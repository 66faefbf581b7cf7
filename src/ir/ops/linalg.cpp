// Linear algebra: matmul with torch.matmul's rank rules and its fixed-rank forms (mm, bmm, mv,
// dot), the bias-fused forms (linear, addmm, baddbmm) and outer. One table row per op; one
// batched-GEMM kernel over contiguous buffers serves them all.
#include "nn_util.h"

#include <algorithm>
#include <cmath>
#include <optional>

namespace xjit {
namespace {

using namespace ops;
using namespace ops::nn;

Shape broadcastIn(const std::string &op, const Shape &a, const Shape &b) {
  try {
    return broadcastShapes(a, b);
  } catch (const TypeInferenceError &e) {
    inferFail(op + ": " + e.what());
  }
}

/// `from` must broadcast to `to` without growing it (a bias never changes the result shape).
void checkBroadcastsTo(const std::string &op, const Shape &from, const Shape &to) {
  std::string msg = op + ": bias of shape " + shapeStr(from) +
                    " does not broadcast to the result shape " + shapeStr(to);
  if (from.size() > to.size()) inferFail(msg);
  size_t lead = to.size() - from.size();
  for (size_t i = 0; i < from.size(); ++i)
    if (from[i] != DimExpr(1)) checkDimEq(from[i], to[lead + i], msg);
}

/// torch.matmul's result shape: 1-D operands get a dim prepended (lhs) or appended (rhs) that
/// is removed again; leading dims broadcast.
Shape matmulShape(const std::string &op, const Shape &a, const Shape &b, bool broadcastBatch) {
  if (a.empty() || b.empty())
    inferFail(op + ": both arguments need at least 1 dimension, got shapes " + shapeStr(a) +
              " and " + shapeStr(b));
  bool aVec = a.size() == 1, bVec = b.size() == 1;
  const DimExpr &ka = a.back(), &kb = bVec ? b[0] : b[b.size() - 2];
  checkDimEq(ka, kb,
             op + ": shapes " + shapeStr(a) + " and " + shapeStr(b) + " cannot be multiplied (" +
                 ka.str() + " vs " + kb.str() + ")");
  Shape batchA(a.begin(), a.end() - (aVec ? 1 : 2)), batchB(b.begin(), b.end() - (bVec ? 1 : 2));
  Shape out;
  if (broadcastBatch) {
    out = broadcastIn(op, batchA, batchB);
  } else {
    for (size_t i = 0; i < batchA.size(); ++i)
      checkDimEq(batchA[i], batchB[i],
                 op + ": batch dims of " + shapeStr(a) + " and " + shapeStr(b) + " must match");
    out = batchA;
  }
  if (!aVec) out.push_back(a[a.size() - 2]);
  if (!bVec) out.push_back(b.back());
  return out;
}

/// For each matrix of the broadcast batch `out`, the index of the matrix it reads in `in`.
std::vector<int64_t> batchSources(const std::vector<int64_t> &out, const std::vector<int64_t> &in) {
  int64_t n = product(out);
  std::vector<int64_t> src(static_cast<size_t>(n), 0);
  std::vector<int64_t> inStrides = contiguousStrides(in);
  size_t lead = out.size() - in.size();
  for (int64_t lin = 0; lin < n; ++lin) {
    int64_t rem = lin, s = 0;
    for (size_t d = out.size(); d-- > 0;) {
      int64_t i = rem % out[d];
      rem /= out[d];
      if (d >= lead && in[d - lead] != 1) s += i * inStrides[d - lead];
    }
    src[static_cast<size_t>(lin)] = s;
  }
  return src;
}

/// a · b with torch.matmul's rank rules, as a contiguous buffer of the result.
template <Acc T> std::vector<T> matmulBuffer(const Tensor &a, const Tensor &b) {
  // A 1-D operand has the same row-major layout as its [1,k] / [k,1] matrix form.
  std::vector<int64_t> as = a.sizes(), bs = b.sizes();
  if (as.size() == 1) as.insert(as.begin(), 1);
  if (bs.size() == 1) bs.push_back(1);
  int64_t n = as[as.size() - 2], k = as.back(), m = bs.back();
  std::vector<int64_t> batchA(as.begin(), as.end() - 2), batchB(bs.begin(), bs.end() - 2);
  std::vector<int64_t> batch = broadcastSizes(batchA, batchB);
  int64_t nb = product(batch);
  std::vector<T> A = load<T>(a), B = load<T>(b), C(static_cast<size_t>(nb * n * m), T{});
  if (C.empty() || k == 0) return C;
  if (product(batchB) == 1 && product(batchA) == nb) {
    // One shared rhs matrix (e.g. linear's weight): fold the batch into the rows.
    gemm(A.data(), B.data(), C.data(), nb * n, k, m);
    return C;
  }
  std::vector<int64_t> srcA = batchSources(batch, batchA), srcB = batchSources(batch, batchB);
  for (int64_t i = 0; i < nb; ++i)
    gemm(A.data() + srcA[i] * n * k, B.data() + srcB[i] * k * m, C.data() + i * n * m, n, k, m);
  return C;
}

/// c = alpha * c + beta * bias (bias broadcast to `sizes`); beta == 0 ignores the bias, NaNs
/// included, as torch does. Integer dtypes use the truncated integer alpha/beta, as torch does.
template <Acc T>
void applyBias(std::vector<T> &c, const std::vector<int64_t> &sizes, const Tensor *bias,
               double alpha, double beta) {
  auto conv = [](double v) {
    if constexpr (std::same_as<T, double>)
      return v;
    else
      return static_cast<uint64_t>(static_cast<int64_t>(v));
  };
  T a = conv(alpha), bt = conv(beta);
  if (alpha != 1)
    for (T &v : c)
      v *= a;
  if (!bias || beta == 0) return;
  std::vector<T> bv = load<T>(expandTo(*bias, sizes));
  for (size_t i = 0; i < c.size(); ++i)
    c[i] += beta == 1 ? bv[i] : bt * bv[i];
}

/// A matmul-family op: result = alpha * (lhs · rhs) + beta * bias.
struct MatmulForm {
  const char *name;
  const char *summary;
  std::vector<OperandSpec> operands;
  size_t lhs, rhs;                    // operand indices of the factors
  int bias = -1;                      // operand index of the (optional) bias, or -1
  std::vector<int64_t> lhsRanks = {}; // allowed ranks; empty: any >= 1
  std::vector<int64_t> rhsRanks = {};
  bool transposeRhs = false; // linear: weight is [out, in]
  bool broadcastBatch = true;
  bool scaled = false; // beta / alpha attributes
  bool causal = false; // the optional `causal` attribute (matmul)
  bool fpmath = false; // the optional `fpmath` attribute (f32 products PyTorch may run in bf16)
};

/// The values of matmul's `causal` attribute (set by the causal-products pass): a promise that
/// one operand is triangular, its other triangle zero, in each matrix's own last two dims with
/// the diagonal at the top left (attention's is_causal), so that a backend may skip the blocks
/// that multiply those zeros. One exception: a line (a row of lhs_lower/rhs_lower's matrix, a
/// column of lhs_upper's) may be NaN throughout, zeros included (a softmax row over a NaN);
/// a backend that skips checks the line's first element. The reference kernel computes the
/// whole product.
constexpr const char *kCausalModes[] = {"lhs_lower", "lhs_upper", "rhs_lower"};

/// The `fpmath` attribute (set by the bf16-products pass when PyTorch's mkldnn matmul precision
/// is "bf16", torch.set_float32_matmul_precision("medium")): "bf16" allows a backend to compute
/// an f32 product from operands rounded to bf16, accumulating in f32, as eager's oneDNN does
/// then. The reference kernel computes the exact product (the tighter bound).
void checkFpmath(const std::string &name, const Op &op, const Type &a) {
  const Attr *m = op.attrOrNull("fpmath");
  if (!m) return;
  if (m->asStr() != "bf16") inferFail(name + ": fpmath must be bf16, got '" + m->asStr() + "'");
  if (a.dtype() != DType::F32)
    inferFail(name + ": fpmath applies to f32 products, got " + std::string(dtypeName(a.dtype())));
}

void checkRank(const MatmulForm &f, const char *what, const Shape &s,
               const std::vector<int64_t> &ranks) {
  if (ranks.empty()) return;
  for (int64_t r : ranks)
    if (static_cast<int64_t>(s.size()) == r) return;
  std::string allowed;
  for (size_t i = 0; i < ranks.size(); ++i)
    allowed += (i ? " or " : "") + std::to_string(ranks[i]);
  inferFail(std::string(f.name) + ": " + what + " must have " + allowed + " dims, got shape " +
            shapeStr(s));
}

Shape transposed(const Shape &s) {
  Shape t = s;
  if (t.size() >= 2) std::swap(t[t.size() - 1], t[t.size() - 2]);
  return t;
}

Shape formShape(const MatmulForm &f, const Shape &lhs, const Shape &rhs, const Shape *bias) {
  checkRank(f, f.operands[f.lhs].name.c_str(), lhs, f.lhsRanks);
  checkRank(f, f.operands[f.rhs].name.c_str(), rhs, f.rhsRanks);
  Shape out = matmulShape(f.name, lhs, f.transposeRhs ? transposed(rhs) : rhs, f.broadcastBatch);
  if (bias) checkBroadcastsTo(f.name, *bias, out);
  return out;
}

std::vector<Type> formInfer(const MatmulForm &f, const Op &op) {
  const Type &a = tensorOperand(op, f.lhs), &b = tensorOperand(op, f.rhs);
  requireNotBool(f.name, f.operands[f.lhs].name, a);
  requireSameDType(f.name, f.operands[f.lhs].name, a, f.operands[f.rhs].name, b);
  const Type *bias = f.bias >= 0 ? optionalTensor(op, f.bias) : nullptr;
  if (bias) requireSameDType(f.name, f.operands[f.lhs].name, a, f.operands[f.bias].name, *bias);
  if (f.scaled) {
    attrFloat(op, "alpha");
    attrFloat(op, "beta");
  }
  if (const Attr *c = f.causal ? op.attrOrNull("causal") : nullptr) {
    if (std::find(std::begin(kCausalModes), std::end(kCausalModes), c->asStr()) ==
        std::end(kCausalModes))
      inferFail(std::string(f.name) + ": causal must be lhs_lower, lhs_upper or rhs_lower, got '" +
                c->asStr() + "'");
    if (a.rank() < 2 || b.rank() < 2)
      inferFail(std::string(f.name) + ": causal needs operands of rank >= 2");
  }
  if (f.fpmath) checkFpmath(f.name, op, a);
  return {a.withShape(formShape(f, a.shape(), b.shape(), bias ? &bias->shape() : nullptr))};
}

std::vector<RtValue> formKernel(const MatmulForm &f, const Op &op, std::span<const RtValue> in) {
  Tensor a = in[f.lhs].tensor(), b = in[f.rhs].tensor();
  std::optional<Tensor> bias;
  if (f.bias >= 0 && present(in, f.bias)) bias = in[f.bias].tensor();
  Shape biasShape = bias ? shapeOf(bias->sizes()) : Shape{};
  std::vector<int64_t> sizes = sizesOf(atRuntime([&] {
    return formShape(f, shapeOf(a.sizes()), shapeOf(b.sizes()), bias ? &biasShape : nullptr);
  }));
  if (f.transposeRhs && b.rank() == 2)
    b = b.view({b.size(1), b.size(0)}, {b.strides()[1], b.strides()[0]}, b.offset());
  double alpha = f.scaled ? attrFloat(op, "alpha") : 1, beta = f.scaled ? attrFloat(op, "beta") : 1;
  DType dt = resultDType(op);
  return {withAcc(dt, [&](auto zero) {
    using T = decltype(zero);
    std::vector<T> c = matmulBuffer<T>(a, b);
    applyBias(c, sizes, bias ? &*bias : nullptr, alpha, beta);
    return store<T>(c, dt, sizes);
  })};
}

OpDef formRow(const MatmulForm &f) {
  std::vector<AttrSpec> attrs;
  if (f.scaled)
    attrs = {{.name = "beta", .kind = AttrKind::Float, .defaultValue = Attr(1.0)},
             {.name = "alpha", .kind = AttrKind::Float, .defaultValue = Attr(1.0)}};
  if (f.causal) attrs = {{.name = "causal", .kind = AttrKind::Str, .optional = true}};
  if (f.fpmath) attrs.push_back({.name = "fpmath", .kind = AttrKind::Str, .optional = true});
  return OpDef{
      .name = f.name,
      .summary = f.summary,
      .operands = f.operands,
      .attrs = std::move(attrs),
      .infer = [f](const Op &op) { return formInfer(f, op); },
      .kernel = [f](const Op &op, std::span<const RtValue> in) { return formKernel(f, op, in); },
  };
}

const std::vector<MatmulForm> &matmulForms() {
  static const std::vector<MatmulForm> forms = {
      {.name = "matmul",
       .summary = "torch.matmul: 1-D·1-D is a dot product, a 1-D lhs (rhs) gets a dim prepended "
                  "(appended) and removed again, leading batch dims broadcast. Operands share "
                  "one non-bool dtype; integers wrap. Optional `causal` (lhs_lower, lhs_upper, "
                  "rhs_lower): a promise that the operand's other triangle is zero (each "
                  "matrix, diagonal at the top left; set by causal-products) except on lines "
                  "(rows; lhs_upper: columns) that are NaN throughout, so a backend may skip it.",
       .operands = {{"self"}, {"other"}},
       .lhs = 0,
       .rhs = 1,
       .causal = true,
       .fpmath = true},
      {.name = "mm",
       .summary = "Matrix product of two 2-D tensors of one dtype.",
       .operands = {{"self"}, {"mat2"}},
       .lhs = 0,
       .rhs = 1,
       .lhsRanks = {2},
       .rhsRanks = {2},
       .fpmath = true},
      {.name = "bmm",
       .summary = "Batched matrix product of [b,n,k] and [b,k,m] (no broadcasting).",
       .operands = {{"self"}, {"mat2"}},
       .lhs = 0,
       .rhs = 1,
       .lhsRanks = {3},
       .rhsRanks = {3},
       .broadcastBatch = false,
       .fpmath = true},
      {.name = "mv",
       .summary = "Matrix-vector product of [n,k] and [k].",
       .operands = {{"self"}, {"vec"}},
       .lhs = 0,
       .rhs = 1,
       .lhsRanks = {2},
       .rhsRanks = {1}},
      {.name = "dot",
       .summary = "Dot product of two 1-D tensors of one dtype (0-d result).",
       .operands = {{"self"}, {"tensor"}},
       .lhs = 0,
       .rhs = 1,
       .lhsRanks = {1},
       .rhsRanks = {1}},
      {.name = "linear",
       .summary = "F.linear: input · weight^T + bias; weight is [out,in] (or [in]: the "
                  "result drops the feature dim), bias broadcasts to the result.",
       .operands = {{"input"}, {"weight"}, {.name = "bias", .optional = true}},
       .lhs = 0,
       .rhs = 1,
       .bias = 2,
       .rhsRanks = {1, 2},
       .transposeRhs = true,
       .fpmath = true},
      {.name = "addmm",
       .summary = "beta * self + alpha * (mat1 · mat2) for 2-D mat1, mat2; self broadcasts to "
                  "the result; beta == 0 ignores self (NaNs too). Integer dtypes truncate "
                  "alpha/beta to integers.",
       .operands = {{"self"}, {"mat1"}, {"mat2"}},
       .lhs = 1,
       .rhs = 2,
       .bias = 0,
       .lhsRanks = {2},
       .rhsRanks = {2},
       .scaled = true,
       .fpmath = true},
      {.name = "baddbmm",
       .summary = "beta * self + alpha * bmm(batch1, batch2); self broadcasts to the [b,n,m] "
                  "result; beta == 0 ignores self.",
       .operands = {{"self"}, {"batch1"}, {"batch2"}},
       .lhs = 1,
       .rhs = 2,
       .bias = 0,
       .lhsRanks = {3},
       .rhsRanks = {3},
       .broadcastBatch = false,
       .scaled = true,
       .fpmath = true},
  };
  return forms;
}

OpDef outerRow() {
  return OpDef{
      .name = "outer",
      .summary = "Outer product of two 1-D tensors: result[i,j] = self[i] * vec2[j], dtypes "
                 "promoted (bool: logical and).",
      .operands = {{"self"}, {"vec2"}},
      .infer =
          [](const Op &op) {
            const Type &a = tensorOperand(op, 0), &b = tensorOperand(op, 1);
            if (a.rank() != 1 || b.rank() != 1)
              inferFail("outer: both operands must be 1-D, got " + a.str() + " and " + b.str());
            return std::vector<Type>{
                a.withDType(resultTypeOfOperands(op)).withShape({a.shape()[0], b.shape()[0]})};
          },
      .kernel =
          [](const Op &op, std::span<const RtValue> in) {
            const Tensor &a = in[0].tensor(), &b = in[1].tensor();
            DType dt = resultDType(op);
            return std::vector<RtValue>{withAcc(dt, [&](auto zero) {
              using T = decltype(zero);
              std::vector<T> av = load<T>(a.to(dt)), bv = load<T>(b.to(dt));
              std::vector<T> c(av.size() * bv.size());
              for (size_t i = 0; i < av.size(); ++i)
                for (size_t j = 0; j < bv.size(); ++j)
                  c[i * bv.size() + j] = av[i] * bv[j];
              return store<T>(c, dt, {a.size(0), b.size(0)});
            })};
          },
  };
}

} // namespace

void registerLinalgOps(OpRegistry &r) {
  for (const MatmulForm &f : matmulForms())
    r.add(formRow(f));
  r.add(outerRow());
  ops::nn::registerLayerOps(r);
  ops::nn::registerGroupedOps(r);
}

} // namespace xjit
