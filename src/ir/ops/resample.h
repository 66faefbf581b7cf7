// Linear resampling (upsample_linear1d, upsample_bilinear2d, upsample_trilinear3d) and its
// gradient: ATen's source indices and weights per output position, and the one-pass kernels
// that the CPU target runs in units on its thread pool (src/backend/resample.cpp).
#pragma once

#include "nn_window.h" // UnitRunner, PlaneStrides

namespace xjit::ops::nn {

/// One spatial dim of a linear resampling: output position o reads input positions i0[o] and
/// i1[o] with weights w0[o] and w1[o], computed as ATen's compute_source_index_and_lambda does
/// in the kernel's opmath type T (float for f32, double for f64). scale <= 0: none given.
/// fused: with ATen's multiply-adds rounded once (fusedMultiplyAdd()).
template <class T> struct LinearTaps {
  std::vector<int64_t> i0, i1;
  std::vector<T> w0, w1;
};
template <class T>
LinearTaps<T> linearTaps(int64_t in, int64_t out, bool alignCorners, double scale, bool fused);
/// Whether ATen's CPU kernels run their AVX2 / AVX-512 builds here, whose compiler contracts
/// a * b + c into fused multiply-adds (the kernels below then round as they do).
bool fusedMultiplyAdd();

/// An upsample_*linear* op's or its gradient's attributes, read (and checked) once.
struct LinearResampleAttrs {
  std::string op;
  size_t nd = 0;
  bool alignCorners = false;
  std::vector<double> scales;      // per spatial dim; <= 0: none (in / out)
  std::vector<int64_t> outputSize; // the forward's: output_size (spatial)
  std::vector<int64_t> inputSize;  // the gradient's: input_size (spatial)
};
LinearResampleAttrs linearResampleAttrs(const Op &op);

using Allocate = std::function<Tensor(DType, std::vector<int64_t>)>;
/// y = upsample(x) (f32 or f64, [N, C, spatial...], any strides): each output element from
/// its 2, 4 or 8 neighbours in one pass, in ATen's order of operations (weights of the outer
/// dim applied last), so NCHW results match eager's kernel. y in x's memory order (channels-
/// last for a channels-last x) from `allocate` (fully written: it may come uninitialized), as
/// at least `parts` (batch element, channel block) units, which `run` runs.
Tensor upsampleLinear(const LinearResampleAttrs &a, const Tensor &x, const Allocate &allocate,
                      int64_t parts, const UnitRunner &run);
/// dx = the gradient of upsample's input for its output's gradient gy: each gy element's
/// weighted value added to its neighbours, in output order with ATen's products, so each dx
/// element sums in eager's order. Units own disjoint channels of dx: no atomics, the same
/// result on any number of threads. dx in gy's memory order.
Tensor upsampleLinearBackward(const LinearResampleAttrs &a, const Tensor &gy,
                              const Allocate &allocate, int64_t parts, const UnitRunner &run);

} // namespace xjit::ops::nn
