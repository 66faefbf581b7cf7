// Private helpers of the neural-network op families (linalg, conv/pool, norm, layers):
// optional operands, dtype checks, shape checks shared by inference and kernels, and
// contiguous typed buffers that the compute loops run over.
#pragma once

#include "op_util.h"

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace xjit::ops::nn {

// Rows registered from registerLinalgOps but kept in their own file (nn_layers.cpp):
// embedding, dropout, scaled_dot_product_attention, pixel_shuffle/unshuffle.
void registerLayerOps(OpRegistry &r);
// histc, grouped_mm and grouped_mm_weight (grouped.cpp).
void registerGroupedOps(OpRegistry &r);
// upsample_linear1d, upsample_bilinear2d, upsample_trilinear3d and their gradients
// (resample.cpp), registered from registerConvPoolOps.
void registerResampleOps(OpRegistry &r);

// ---- optional operands ----
/// Operand i is given and is not None.
bool present(const Op &op, size_t i);
bool present(std::span<const RtValue> in, size_t i);
/// Type of optional tensor operand i, or nullptr when absent; fails if given but not a tensor.
const Type *optionalTensor(const Op &op, size_t i);

// ---- dtype checks (fail with "<op>: <what> ...") ----
void requireFloating(std::string_view op, std::string_view what, const Type &t);
void requireNotBool(std::string_view op, std::string_view what, const Type &t);
void requireSameDType(std::string_view op, std::string_view aName, const Type &a,
                      std::string_view bName, const Type &b);

// ---- shapes, shared by inference (symbolic) and kernels (static) ----
Shape shapeOf(const std::vector<int64_t> &sizes);
std::vector<int64_t> sizesOf(const Shape &s); // all dims must be static
/// Fails with msg when both dims are static and differ; symbolic dims are assumed equal (the
/// kernel re-checks them at run time).
void checkDimEq(const DimExpr &a, const DimExpr &b, const std::string &msg);
/// Fails with msg when a static dim is < min.
void checkDimAtLeast(const DimExpr &d, int64_t min, const std::string &msg);
std::string dimsStr(const std::vector<int64_t> &v); // "[1, 2]"

/// Runs a shape function on run-time shapes inside a kernel: its TypeInferenceError becomes
/// a KernelError (a symbolic dim that was assumed equal at inference may differ at run time).
template <class F> auto atRuntime(F &&f) -> decltype(f()) {
  try {
    return f();
  } catch (const TypeInferenceError &e) {
    kernelFail(e.what());
  }
}

/// A per-spatial-dim integer list attribute (stride, padding, ...): n values, or one value
/// that applies to every dim, like PyTorch's int-or-tuple arguments. Fails when any value is
/// below `min`.
std::vector<int64_t> spatialInts(const Op &op, std::string_view name, size_t n, int64_t min);

// ---- buffers ----
/// Integer kernels compute in uint64 so that overflow wraps exactly as a C cast of the int64
/// result would, without signed-overflow UB; floating kernels compute in double.
template <class T>
concept Acc = std::same_as<T, double> || std::same_as<T, uint64_t>;
/// Buffer element types: the accumulators, and int64 where signed order matters (max pool).
template <class T>
concept Elem = Acc<T> || std::same_as<T, int64_t>;

/// Element values of t in row-major order (any strides; raw typed reads, no per-element
/// virtual dispatch). Integer buffers of floating tensors truncate, like a C cast.
template <Elem T> std::vector<T> load(const Tensor &t);
/// A fresh contiguous tensor of `dtype` holding `data` (rounded / wrapped to the dtype).
template <Elem T> Tensor store(std::span<const T> data, DType dtype, std::vector<int64_t> sizes);

/// Calls f(double{}) for floating dtypes and f(uint64_t{}) otherwise: the accumulator type.
template <class F> decltype(auto) withAcc(DType d, F &&f) {
  if (isFloating(d)) return f(double{});
  return f(uint64_t{});
}

/// c[n×m] += a[n×k] · b[k×m], all contiguous row-major. The inner loop runs unit-stride over
/// rows of b and c; tiling k and m keeps a tile of b in cache across all rows of a (a BERT-sized
/// linear streams its weight once per tile, not once per row). Each c[i,j] still sums its
/// products in increasing p, so results do not depend on the tiling.
template <Acc T> void gemm(const T *a, const T *b, T *c, int64_t n, int64_t k, int64_t m) {
  constexpr int64_t kTileK = 128, kTileM = 256;
  for (int64_t p0 = 0; p0 < k; p0 += kTileK)
    for (int64_t j0 = 0; j0 < m; j0 += kTileM) {
      int64_t p1 = std::min(k, p0 + kTileK), j1 = std::min(m, j0 + kTileM);
      for (int64_t i = 0; i < n; ++i) {
        T *ci = c + i * m;
        for (int64_t p = p0; p < p1; ++p) {
          T av = a[i * k + p];
          const T *bp = b + p * m;
          for (int64_t j = j0; j < j1; ++j)
            ci[j] += av * bp[j];
        }
      }
    }
}

/// Python floor / ceil division by a positive divisor.
inline int64_t floorDiv(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
inline int64_t ceilDiv(int64_t a, int64_t b) { return -floorDiv(-a, b); }

/// Product of sizes.
int64_t product(std::span<const int64_t> v);

} // namespace xjit::ops::nn
