// Sliding-window kernels shared by the 1-d, 2-d and 3-d convolutions and poolings. Every op
// is run as its 3-d form: a lower-rank op gets leading spatial dims of size 1 with kernel 1,
// stride 1, dilation 1 and no padding, which changes neither the values nor the flattened
// spatial indices (so max-pool indices come out right for every rank).
#pragma once

#include "nn_util.h"

#include <array>
#include <functional>
#include <numeric>

namespace xjit::ops::nn {

using Dims3 = std::array<int64_t, 3>;

/// Spatial geometry of a convolution (or transposed convolution).
struct ConvWindow {
  Dims3 in{1, 1, 1}, out{1, 1, 1}, kernel{1, 1, 1}, stride{1, 1, 1}, pad{0, 0, 0}, dil{1, 1, 1};
  /// Lifts per-dim values of an nd-dim op (nd <= 3); `pad` is the left/top/front padding.
  static ConvWindow lift(const std::vector<int64_t> &in, const std::vector<int64_t> &out,
                         const std::vector<int64_t> &kernel, const std::vector<int64_t> &stride,
                         const std::vector<int64_t> &pad, const std::vector<int64_t> &dil);
};

/// y[n, cout, out...] of a grouped convolution of x[n, cin, in...] with w[cout, cin/groups,
/// kernel...], plus bias[cout] when given (empty: none). Contiguous buffers.
template <Acc T>
std::vector<T> convForward(const std::vector<T> &x, const std::vector<T> &w,
                           const std::vector<T> &bias, int64_t n, int64_t cin, int64_t cout,
                           int64_t groups, const ConvWindow &g);
/// Transposed convolution: x[n, cin, in...] with w[cin, cout/groups, kernel...] scattered to
/// y[n, cout, out...]: y[o*stride - pad + k*dil] += x[o] * w[k]; plus bias.
template <Acc T>
std::vector<T> convTransposed(const std::vector<T> &x, const std::vector<T> &w,
                              const std::vector<T> &bias, int64_t n, int64_t cin, int64_t cout,
                              int64_t groups, const ConvWindow &g);
/// The gradient of a convolution's weight: dw[cout, cin/groups, kernel...] = the sum over the
/// batch and the output positions o of gy[n, cout, o] * x[n, cin, o*stride - pad + k*dil].
template <Acc T>
std::vector<T> convWeightGrad(const std::vector<T> &x, const std::vector<T> &gy, int64_t n,
                              int64_t cin, int64_t cout, int64_t groups, const ConvWindow &g);

/// The input positions each output position of one spatial dim reads, and its window size
/// counted with padding (for avg_pool's count_include_pad).
struct Taps {
  int64_t inSize = 1;
  std::vector<std::vector<int64_t>> pos; // per output index: in-bounds input indices
  std::vector<int64_t> padded;           // per output index
};
/// Pooling window o*stride - pad + j*dil, j < kernel; avg_pool's padded size clips at
/// inSize + pad as PyTorch does (ceil_mode windows may overhang).
Taps windowTaps(int64_t inSize, int64_t outSize, int64_t kernel, int64_t stride, int64_t pad,
                int64_t dil);
/// Adaptive pooling: [floor(o*in/out), ceil((o+1)*in/out)).
Taps adaptiveTaps(int64_t inSize, int64_t outSize);
/// Lifts per-dim taps to three dims (leading dims of size 1 with one tap).
std::array<Taps, 3> liftTaps(std::vector<Taps> taps);

/// Max over each window of x[planes, in...] -> out[planes, out...]; NaN wins and, like
/// PyTorch, a later NaN moves the index. indices (flattened spatial) when non-null.
template <class T>
std::vector<T> maxPool(const std::vector<T> &x, int64_t planes, const std::array<Taps, 3> &t,
                       std::vector<int64_t> *indices);
/// Element (n, c, d, h, w) of a strided [N, C, spatial...] tensor lifted to three spatial dims
/// (a lower-rank op's leading spatial strides are 0): n*batch + c*channel + spatial . (d, h, w).
struct PlaneStrides {
  int64_t batch = 0, channel = 0;
  Dims3 spatial{0, 0, 0};
};
/// new[i] = old[perm[i]]: moves the channel dim of a [N, C, spatial...] or [C, spatial...]
/// shape last, or back. Other ranks are left alone (the shape rules reject them).
std::vector<size_t> channelPerm(size_t rank, size_t nd, bool toLast);
template <class V> V permuted(const V &v, const std::vector<size_t> &perm) {
  V out;
  for (size_t i : perm)
    out.push_back(v[i]);
  return out;
}
/// A strided view of t with its dims moved to or from channels-last.
Tensor channelView(const Tensor &t, size_t nd, bool toLast);
/// The channels per unit of a kernel cut into (batch element, channel block) units: at least
/// `parts` units, in equal numbers per part when the batch allows (3 images on 2 threads: 2
/// channel blocks each), blocks of whole cache lines (16) of channels.
inline int64_t channelBlockFor(int64_t batch, int64_t channels, int64_t parts) {
  const int64_t perBatch = std::clamp<int64_t>(
      parts / std::gcd(std::max<int64_t>(batch, 1), std::max<int64_t>(parts, 1)), 1,
      std::max<int64_t>(1, ceilDiv(channels, 16)));
  return std::max<int64_t>(1, ceilDiv(ceilDiv(channels, perBatch), 16) * 16);
}
/// max_pool's gradient, cut into units that own disjoint parts of dx: unit u is batch element
/// u / blocks and channels [b * channelBlock, (b + 1) * channelBlock) for b = u % blocks. So
/// units run in any order or on any threads with the same result, with no atomics.
struct MaxPoolGradPlan {
  std::array<Taps, 3> taps;
  PlaneStrides xs, gs, dxs;
  int64_t batch = 0, channels = 0, channelBlock = 1;
  int64_t blocks() const { return ceilDiv(channels, channelBlock); }
  int64_t units() const { return batch * blocks(); }
};
/// Units [begin, end) of max_pool's gradient: each writes its part of dx (zeros, then every
/// g[n, c, o] added at o's window argmax, found as maxPool finds it: the first maximum; a
/// window holding NaN, its last NaN). Per element of dx the adds come in output order, as in
/// PyTorch's backward, so the sums round alike (max_pool_backward.cpp).
template <class T>
void maxPoolBackward(const T *x, const T *g, T *dx, const MaxPoolGradPlan &plan, int64_t begin,
                     int64_t end);
/// A pooling op's window attributes, per spatial dim (adaptive pooling: outputSize only).
struct PoolConfig {
  std::vector<int64_t> kernel, stride, padding, dilation, outputSize;
  bool ceil = false;
};
/// max_pool{1,2,3}d_backward's attributes, read (and checked) once.
struct MaxPoolGradAttrs {
  std::string op;
  size_t nd = 0;
  PoolConfig window;
};
MaxPoolGradAttrs maxPoolGradAttrs(const Op &op);
/// Runs fn(begin, end) over ranges that together cover [0, units) once: in one call, or
/// split over threads.
using UnitRunner =
    std::function<void(int64_t units, const std::function<void(int64_t, int64_t)> &fn)>;
/// max_pool{1,2,3}d_backward(gy, x) (f32 or f64; the shapes are checked): dx in x's
/// memory order (channels-last for a channels-last x), its buffer from `allocate` (every
/// element is written, so it may come uninitialized), computed as at least `parts` units when
/// the batch and channels allow, which `run` runs.
Tensor maxPoolBackwardDx(const MaxPoolGradAttrs &attrs, const Tensor &gy, const Tensor &x,
                         const std::function<Tensor(DType, std::vector<int64_t>)> &allocate,
                         int64_t parts, const UnitRunner &run);
/// Sum over each window divided by: divisor if > 0, else the padded window size
/// (countIncludePad) or the number of in-bounds taps. Integer T divides truncating to zero.
template <class T>
std::vector<T> avgPool(const std::vector<T> &x, int64_t planes, const std::array<Taps, 3> &t,
                       bool countIncludePad, int64_t divisor);

} // namespace xjit::ops::nn
