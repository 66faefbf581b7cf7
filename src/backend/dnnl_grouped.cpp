// grouped_mm and grouped_mm_weight (mixture-of-experts products) through oneDNN's sgemm: one
// call per non-empty group on views of the operands, the group boundaries read from `offs` at
// run time (the result's shape is static, its row ranges per group are data). f32 only (bf16
// and f64 run the reference kernel); rows in no group, and empty groups' weight gradients, are
// written as zeros.
#include "dnnl_kernels.h"

#include "ops/grouped.h"
#include "xjit/ir/op_registry.h"

#include <cstring>

namespace xjit::backend::dnnl_kernels {
namespace {

/// A row-major matrix view for sgemm: its data, leading dimension, and whether it is stored
/// transposed ('T': element (i, j) at data[j * ld + i]).
struct Matrix {
  const float *data;
  int64_t ld;
  char trans;
};

/// The [rows, cols] matrix at `data` with element strides (rs, cs) as sgemm reads it, or
/// nullopt when neither stride is 1 (the caller copies the operand dense).
std::optional<Matrix> matrixOf(const float *data, int64_t rows, int64_t cols, int64_t rs,
                               int64_t cs) {
  // A unit dim's stride is arbitrary: a single row (column) is read with any ld.
  const int64_t r1 = std::max<int64_t>(rows, 1), c1 = std::max<int64_t>(cols, 1);
  if ((cs == 1 || cols <= 1) && (rows <= 1 || rs >= c1))
    return Matrix{data, rows <= 1 ? c1 : rs, 'N'};
  if ((rs == 1 || rows <= 1) && (cols <= 1 || cs >= r1))
    return Matrix{data, cols <= 1 ? r1 : cs, 'T'};
  return std::nullopt;
}

/// `t` itself when every matrix along its last two dims is sgemm-readable, else a dense copy.
Tensor readable(const Tensor &t) {
  const size_t r = t.sizes().size();
  const int64_t rows = t.size(r - 2), cols = t.size(r - 1);
  return matrixOf(nullptr, rows, cols, t.strides()[r - 2], t.strides()[r - 1]) ? t
                                                                               : t.contiguousCopy();
}

/// The [rows, cols] matrix `offset` elements after t.data(), with t's last two strides.
Matrix matrixAt(const Tensor &t, int64_t offset, int64_t rows, int64_t cols) {
  const size_t r = t.sizes().size();
  auto m = matrixOf(reinterpret_cast<const float *>(t.data()) + offset, rows, cols,
                    t.strides()[r - 2], t.strides()[r - 1]);
  if (!m) throw InternalKernelError("grouped_mm: operand not readable by sgemm");
  return *m;
}

/// c[m x n] (row-major, ldc n) = a[m x k] · b[k x n].
void sgemm(const Matrix &a, const Matrix &b, float *c, int64_t m, int64_t n, int64_t k) {
  if (k == 0) {
    std::memset(c, 0, static_cast<size_t>(m * n) * sizeof(float));
    return;
  }
  if (dnnl_sgemm(a.trans, b.trans, m, n, k, 1.f, a.data, a.ld, b.data, b.ld, 0.f, c, n) !=
      dnnl_success)
    throw InternalKernelError("grouped_mm: dnnl_sgemm failed");
}

class GroupedPlan : public Plan {
public:
  bool weightGrad = false; // grouped_mm_weight
  Source x, y, offs;       // y: grouped_mm's weight [E,K,N], grouped_mm_weight's grad [T,N]

  void run(std::span<const RtValue> in, const Tensor &out) const override {
    const Tensor xs = readable(tensorOf(x, in)), ys = readable(tensorOf(y, in));
    const int64_t t = xs.size(0), k = xs.size(1), n = out.size(out.rank() - 1);
    const std::vector<int64_t> ends =
        ops::nn::groupEnds(weightGrad ? "grouped_mm_weight" : "grouped_mm", tensorOf(offs, in), t);
    auto *c = reinterpret_cast<float *>(out.data());
    int64_t start = 0;
    for (size_t e = 0; e < ends.size(); start = ends[e++]) {
      const int64_t rows = ends[e] - start;
      const int64_t xRow = start * xs.strides()[0]; // elements from xs.data()
      if (weightGrad) {
        float *ce = c + static_cast<int64_t>(e) * k * n;
        if (rows == 0) {
          std::memset(ce, 0, static_cast<size_t>(k * n) * sizeof(float));
          continue;
        }
        Matrix xe = matrixAt(xs, xRow, rows, k);
        // x_e^T: the same memory read with the other transpose flag.
        xe.trans = xe.trans == 'N' ? 'T' : 'N';
        sgemm(xe, matrixAt(ys, start * ys.strides()[0], rows, n), ce, k, n, rows);
      } else if (rows > 0) {
        sgemm(matrixAt(xs, xRow, rows, k),
              matrixAt(ys, static_cast<int64_t>(e) * ys.strides()[0], k, n), c + start * n, rows, n,
              k);
      }
    }
    if (!weightGrad && start < t) // rows after the last group
      std::memset(c + start * n, 0, static_cast<size_t>((t - start) * n) * sizeof(float));
  }
  // "gemm:" counts the plan as one on oneDNN's gemm kernels (their warm-up, library_warm_up.h).
  std::string info() const override { return "gemm:jit dnnl_sgemm per group"; }
};

class GroupedKernel : public LibraryKernel {
public:
  explicit GroupedKernel(const CallIR &call) : name_(call.anchor->name()) {
    plan_.weightGrad = name_ == "grouped_mm_weight";
    plan_.x = call.operands[0], plan_.y = call.operands[1], plan_.offs = call.operands[2];
  }
  std::unique_ptr<Plan> makePlan(std::span<const RtValue> in) const override {
    auto p = std::make_unique<GroupedPlan>(plan_);
    const Tensor x = tensorOf(plan_.x, in), y = tensorOf(plan_.y, in);
    p->resultSizes = plan_.weightGrad ? Dims{tensorOf(plan_.offs, in).numel(), x.size(1), y.size(1)}
                                      : Dims{x.size(0), y.size(2)};
    return p;
  }
  std::string describe() const override { return "oneDNN sgemm per group for " + name_ + " (f32)"; }

private:
  std::string name_;
  GroupedPlan plan_;
};

} // namespace

std::string whyNotGrouped(const CallIR &call) {
  const Op &op = *call.anchor;
  if (!call.postOps.empty()) return op.name() + ": no post-ops";
  for (size_t i = 0; i < 2; ++i)
    if (op.operand(i)->type().dtype() != DType::F32) return op.name() + ": f32 only";
  return "";
}

std::unique_ptr<LibraryKernel> makeGroupedKernel(const CallIR &call) {
  return std::make_unique<GroupedKernel>(call);
}

} // namespace xjit::backend::dnnl_kernels
