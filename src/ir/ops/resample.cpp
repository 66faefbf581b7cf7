// upsample_linear1d, upsample_bilinear2d, upsample_trilinear3d (F.interpolate's linear modes,
// ATen's ops of those names) and their gradients upsample_*_backward: the rows, the one-pass
// kernels the CPU target runs in units (resample.h), and plain reference kernels in double.
#include "resample.h"

#include <cmath>

namespace xjit {

namespace ops::nn {

bool fusedMultiplyAdd() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
#else
  return true;
#endif
}

template <class T>
LinearTaps<T> linearTaps(int64_t in, int64_t out, bool alignCorners, double scale, bool fused) {
  LinearTaps<T> t;
  // area_pixel_compute_scale (compute_scales_value: 1/scale where one is given, else in/out)
  const T ratio = alignCorners ? (out > 1 ? static_cast<T>(in - 1) / static_cast<T>(out - 1) : T(0))
                  : scale > 0. ? static_cast<T>(1.0 / scale)
                               : static_cast<T>(in) / static_cast<T>(out);
  for (int64_t o = 0; o < out; ++o) {
    if (out == in) { // compute_source_index_and_lambda's copy case
      t.i0.push_back(o), t.i1.push_back(o), t.w0.push_back(T(1)), t.w1.push_back(T(0));
      continue;
    }
    // area_pixel_compute_source_index, guard_index_and_lambda
    // ATen's AVX2 / AVX-512 builds contract ratio * (o + 0.5) - 0.5 into one multiply-add.
    const T half = static_cast<T>(0.5), center = static_cast<T>(o) + half;
    T src = alignCorners ? ratio * static_cast<T>(o)
            : fused      ? std::fma(ratio, center, -half)
                         : ratio * center - half;
    if (!alignCorners && src < T(0)) src = T(0);
    // floorf as ATen's guard_index_and_lambda: f64 indices are floored in float too.
    const int64_t i0 = std::min(static_cast<int64_t>(std::floor(static_cast<float>(src))), in - 1);
    const T l1 = std::min(std::max(src - static_cast<T>(i0), T(0)), T(1));
    t.i0.push_back(i0);
    t.i1.push_back(i0 + (i0 < in - 1 ? 1 : 0));
    t.w0.push_back(T(1) - l1);
    t.w1.push_back(l1);
  }
  return t;
}
template LinearTaps<float> linearTaps(int64_t, int64_t, bool, double, bool);
template LinearTaps<double> linearTaps(int64_t, int64_t, bool, double, bool);

LinearResampleAttrs linearResampleAttrs(const Op &op) {
  const std::string &n = op.name();
  LinearResampleAttrs a{.op = n, .nd = static_cast<size_t>(n[n.find('d') - 1] - '0')};
  a.alignCorners = attrBool(op, "align_corners");
  const bool backward = n.ends_with("_backward");
  std::vector<int64_t> &sizes = backward ? a.inputSize : a.outputSize;
  const char *sizeName = backward ? "input_size" : "output_size";
  sizes = attrInts(op, sizeName);
  if (sizes.size() != a.nd)
    inferFail(n + ": " + sizeName + " must have " + std::to_string(a.nd) + " values, got " +
              dimsStr(sizes));
  for (int64_t s : sizes)
    if (s < 1) inferFail(n + ": " + sizeName + " must be positive, got " + dimsStr(sizes));
  if (const Attr *s = op.attrOrNull("scales")) a.scales = s->asFloats();
  if (!a.scales.empty() && a.scales.size() != a.nd)
    inferFail(n + ": scales must be empty or have " + std::to_string(a.nd) + " values");
  a.scales.resize(a.nd, 0.0);
  return a;
}

} // namespace ops::nn

namespace {

using namespace ops;
using namespace ops::nn;

/// The result shape: x's batch and channels with the spatial sizes (checking x's rank).
Shape resampledShape(const LinearResampleAttrs &a, const Shape &x,
                     const std::vector<int64_t> &spatial) {
  if (x.size() != a.nd + 2)
    inferFail(a.op + ": input must be batched [N, C, spatial...] with " + std::to_string(a.nd) +
              " spatial dims, got shape " + shapeStr(x));
  Shape out = x;
  for (size_t d = 0; d < a.nd; ++d)
    out[2 + d] = DimExpr(spatial[d]);
  return out;
}

std::vector<Type> linearResampleInfer(const Op &op) {
  const Type &x = tensorOperand(op, 0);
  const LinearResampleAttrs a = linearResampleAttrs(op);
  if (x.dtype() != DType::F32 && x.dtype() != DType::F64)
    inferFail(a.op + ": input must be f32 or f64");
  const bool backward = !a.inputSize.empty();
  return {Type::tensor(
      x.dtype(), resampledShape(a, x.shape(), backward ? a.inputSize : a.outputSize), x.device())};
}

// ---- the one-pass kernels ----

/// One dim's taps with the input positions as element offsets (index * stride).
template <class T> struct Tap {
  int64_t o0, o1;
  T w0, w1;
};

/// Per spatial dim lifted to three (leading dims of size 1: one tap, weight 1): the taps
/// of `in` -> `out` with offsets along `stride`.
template <class T>
std::array<std::vector<Tap<T>>, 3>
liftedTaps(const LinearResampleAttrs &a, const std::vector<int64_t> &in,
           const std::vector<int64_t> &out, const Dims3 &stride, bool fused) {
  std::array<std::vector<Tap<T>>, 3> taps;
  for (size_t d = 0; d < 3; ++d) {
    if (d < 3 - a.nd) {
      taps[d] = {Tap<T>{0, 0, T(1), T(0)}};
      continue;
    }
    const size_t s = d - (3 - a.nd);
    LinearTaps<T> t = linearTaps<T>(in[s], out[s], a.alignCorners, a.scales[s], fused);
    for (size_t o = 0; o < t.i0.size(); ++o)
      taps[d].push_back({t.i0[o] * stride[d], t.i1[o] * stride[d], t.w0[o], t.w1[o]});
  }
  return taps;
}

/// a * b + c, rounded once where ATen's CPU kernels are (their AVX2 / AVX-512 builds contract
/// these products and sums into fused multiply-adds), else twice as its baseline build does.
template <bool Fused, class T> [[gnu::always_inline]] inline T mulAdd(T a, T b, T c) {
  if constexpr (Fused)
    return std::fma(a, b, c);
  else
    return a * b + c;
}

/// ATen's Interpolate<N>: t0 * w0 + t1 * w1 of the outer dim's two inner interpolations.
template <class T, size_t N, bool Fused>
[[gnu::always_inline]] inline T lerp(const T *p, const Tap<T> *const *t) {
  const Tap<T> &a = *t[0];
  if constexpr (N == 1)
    return mulAdd<Fused>(p[a.o0], a.w0, p[a.o1] * a.w1);
  else
    return mulAdd<Fused>(lerp<T, N - 1, Fused>(p + a.o0, t + 1), a.w0,
                         lerp<T, N - 1, Fused>(p + a.o1, t + 1) * a.w1);
}

/// ATen's backward: g times the product of the weights (outer dims first) added at each
/// neighbour, the outer dim's first neighbour first.
template <class T, size_t N, bool Fused>
[[gnu::always_inline]] inline void spread(T *p, const Tap<T> *const *t, T w, T g) {
  const Tap<T> &a = *t[0];
  if constexpr (N == 1) {
    p[a.o0] = mulAdd<Fused>(w * a.w0, g, p[a.o0]);
    p[a.o1] = mulAdd<Fused>(w * a.w1, g, p[a.o1]);
  } else {
    spread<T, N - 1, Fused>(p + a.o0, t + 1, w * a.w0, g);
    spread<T, N - 1, Fused>(p + a.o1, t + 1, w * a.w1, g);
  }
}

/// spread's neighbours in its order, with their weight products (g's factor): channels-last
/// units add them a run of channels at a time, in the same order per element.
template <class T, size_t N>
[[gnu::always_inline]] inline void corners(const Tap<T> *const *t, int64_t offset, T w,
                                           int64_t *offsets, T *weights) {
  const Tap<T> &a = *t[0];
  if constexpr (N == 1) {
    offsets[0] = offset + a.o0, weights[0] = w * a.w0;
    offsets[1] = offset + a.o1, weights[1] = w * a.w1;
  } else {
    constexpr size_t half = size_t{1} << (N - 1);
    corners<T, N - 1>(t + 1, offset + a.o0, w * a.w0, offsets, weights);
    corners<T, N - 1>(t + 1, offset + a.o1, w * a.w1, offsets + half, weights + half);
  }
}

/// Strides of a [N, C, spatial...] tensor, lifted to three spatial dims.
PlaneStrides liftedStrides(const Tensor &t, size_t nd) {
  PlaneStrides s{.batch = t.strides()[0], .channel = t.strides()[1]};
  for (size_t d = 0; d < nd; ++d)
    s.spatial[3 - nd + d] = t.strides()[2 + d];
  return s;
}

Dims3 liftedSizes(const std::vector<int64_t> &sizes, size_t nd) {
  Dims3 s{1, 1, 1};
  for (size_t d = 0; d < nd; ++d)
    s[3 - nd + d] = sizes[2 + d];
  return s;
}

/// The geometry of one call: `src` is read at the taps, `dst` is written per `out` position.
template <class T> struct Geometry {
  std::array<std::vector<Tap<T>>, 3> taps; // per position of the `out` grid
  PlaneStrides src, dst;
  Dims3 out; // the grid the taps are indexed by (the forward's output)
  int64_t batch = 0, channels = 0, channelBlock = 1;
  bool channelsLast = false;
  // The channels-first forward's passes (separablePlane): D taps as depths, H taps as
  // offsets of scratch rows; W taps as `taps`.
  std::array<std::vector<Tap<T>>, 3> passTaps;
};

/// Calls body(taps, offset) at every position of the forward's output grid with the offset
/// along `stride`. The outer dims' taps are local copies, which stores through a T* cannot
/// alias: the compiler keeps them in registers across the inner loops.
template <class T, size_t N, class Body>
[[gnu::always_inline]] inline void forEachPosition(const Geometry<T> &g, const Dims3 &stride,
                                                   Body &&body) {
  for (int64_t od = 0; od < g.out[0]; ++od) {
    const Tap<T> td = g.taps[0][od];
    for (int64_t oh = 0; oh < g.out[1]; ++oh) {
      const Tap<T> th = g.taps[1][oh];
      for (int64_t ow = 0; ow < g.out[2]; ++ow) {
        const Tap<T> *t[3] = {&td, &th, &g.taps[2][ow]};
        body(t + 3 - N, od * stride[0] + oh * stride[1] + ow * stride[2]);
      }
    }
  }
}

/// One channels-first plane of the forward in passes from the innermost dim out: each input
/// row interpolated along W once (ATen's Interpolate<1>, reused by every output row that reads
/// it), then those rows combined along H (and the H-combined planes along D) a whole row at a
/// time, a vector loop. Every intermediate is the value ATen's nested formula computes, so y is
/// the same bit for bit. Scratch: one input depth's rows along W [in H][out W], and (3-d) the
/// two H-combined planes [out H][out W] the current output plane reads, made on demand (the
/// source depths only grow with the output's), so it stays a few planes for any depth.
template <class T, size_t N, bool Fused>
void separablePlane(const T *xc, T *yc, const Geometry<T> &g, const Dims3 &in, T *scratch) {
  const int64_t ow = g.out[2], oh = g.out[1];
  T *alongW = scratch;
  // Rows a0, a1 weighted into dst, elementwise.
  auto combine = [ow](const T *a0, const T *a1, const Tap<T> t, T *dst) {
    for (int64_t i = 0; i < ow; ++i)
      dst[i] = mulAdd<Fused>(a0[i], t.w0, a1[i] * t.w1);
  };
  // Input depth d's rows along W, then combined along H into dst (rows dstRow apart).
  auto planeAlongH = [&](int64_t d, T *dst, int64_t dstRow) {
    for (int64_t h = 0; h < in[1]; ++h) {
      const T *row = xc + d * g.src.spatial[0] + h * g.src.spatial[1];
      T *r = alongW + h * ow;
      for (int64_t w = 0; w < ow; ++w) {
        const Tap<T> &t = g.taps[2][static_cast<size_t>(w)];
        r[w] = mulAdd<Fused>(row[t.o0], t.w0, row[t.o1] * t.w1);
      }
    }
    for (int64_t o = 0; o < oh; ++o) {
      const Tap<T> t = g.passTaps[1][static_cast<size_t>(o)];
      combine(alongW + t.o0, alongW + t.o1, t, dst + o * dstRow);
    }
  };
  if constexpr (N == 2) {
    planeAlongH(0, yc, g.dst.spatial[1]);
  } else {
    T *planes[2] = {scratch + in[1] * ow, scratch + in[1] * ow + oh * ow};
    int64_t held[2] = {-1, -1};
    // The H-combined plane of depth d, made in the slot that does not hold `keep`.
    auto plane = [&](int64_t d, int64_t keep) -> const T * {
      for (int k = 0; k < 2; ++k)
        if (held[k] == d) return planes[k];
      const int k = held[0] == keep ? 1 : held[1] == keep ? 0 : held[0] <= held[1] ? 0 : 1;
      planeAlongH(d, planes[k], ow);
      held[k] = d;
      return planes[k];
    };
    for (int64_t od = 0; od < g.out[0]; ++od) {
      const Tap<T> t = g.passTaps[0][static_cast<size_t>(od)]; // offsets are depths here
      const T *p0 = plane(t.o0, -1), *p1 = plane(t.o1, t.o0);
      for (int64_t o = 0; o < oh; ++o)
        combine(p0 + o * ow, p1 + o * ow, t, yc + od * g.dst.spatial[0] + o * g.dst.spatial[1]);
    }
  }
}

/// Units [begin, end) of the forward: y at every output position.
template <class T, size_t N, bool Fused>
void forwardUnits(const T *x, T *y, const Geometry<T> &g, const Dims3 &in, int64_t begin,
                  int64_t end) {
  std::vector<T> scratch;
  if (N > 1 && !g.channelsLast)
    scratch.resize(static_cast<size_t>((in[1] + 2 * g.out[1]) * g.out[2]));
  const int64_t blocks = ceilDiv(g.channels, g.channelBlock);
  for (int64_t u = begin; u < end; ++u) {
    const int64_t n = u / blocks, c0 = u % blocks * g.channelBlock,
                  c1 = std::min(g.channels, c0 + g.channelBlock);
    const T *xn = x + n * g.src.batch;
    T *yn = y + n * g.dst.batch;
    if (g.channelsLast) { // channels innermost (unit stride): a vector loop per position
      forEachPosition<T, N>(g, g.dst.spatial, [&](const Tap<T> *const *t, int64_t o) {
        T *ys = yn + o;
        for (int64_t c = c0; c < c1; ++c)
          ys[c] = lerp<T, N, Fused>(xn + c, t);
      });
      continue;
    }
    for (int64_t c = c0; c < c1; ++c) {
      const T *xc = xn + c * g.src.channel;
      T *yc = yn + c * g.dst.channel;
      if constexpr (N > 1)
        separablePlane<T, N, Fused>(xc, yc, g, in, scratch.data());
      else
        forEachPosition<T, N>(g, g.dst.spatial, [&](const Tap<T> *const *t, int64_t o) {
          yc[o] = lerp<T, N, Fused>(xc, t);
        });
    }
  }
}

/// Units [begin, end) of the gradient: zeros in the unit's channels of dx, then each gy
/// element spread to its neighbours in output order.
template <class T, size_t N, bool Fused>
void backwardUnits(const T *gy, T *dx, const Geometry<T> &g, const Dims3 &in, int64_t begin,
                   int64_t end) {
  const int64_t blocks = ceilDiv(g.channels, g.channelBlock);
  for (int64_t u = begin; u < end; ++u) {
    const int64_t n = u / blocks, c0 = u % blocks * g.channelBlock,
                  c1 = std::min(g.channels, c0 + g.channelBlock);
    const T *gn = gy + n * g.src.batch;
    T *dn = dx + n * g.dst.batch;
    // Zeros in memory order: a run of channels per position (channels-last), else planes.
    const int64_t cs = g.channelsLast ? c1 - c0 : 1;
    for (int64_t c = c0; c < c1; c += cs)
      for (int64_t d = 0; d < in[0]; ++d)
        for (int64_t h = 0; h < in[1]; ++h)
          for (int64_t w = 0; w < in[2]; ++w) {
            T *z = dn + c * g.dst.channel + d * g.dst.spatial[0] + h * g.dst.spatial[1] +
                   w * g.dst.spatial[2];
            std::fill(z, z + cs, T(0));
          }
    if (g.channelsLast) { // per output position, each neighbour's run of channels in turn
      constexpr size_t K = size_t{1} << N;
      forEachPosition<T, N>(g, g.src.spatial, [&](const Tap<T> *const *t, int64_t o) {
        int64_t offsets[K];
        T weights[K];
        corners<T, N>(t, 0, T(1), offsets, weights);
        const T *gs = gn + o;
        for (size_t k = 0; k < K; ++k) {
          T *q = dn + offsets[k];
          const T w = weights[k];
          for (int64_t c = c0; c < c1; ++c)
            q[c] = mulAdd<Fused>(w, gs[c], q[c]);
        }
      });
      continue;
    }
    for (int64_t c = c0; c < c1; ++c) {
      const T *gc = gn + c * g.src.channel;
      T *dc = dn + c * g.dst.channel;
      forEachPosition<T, N>(g, g.src.spatial, [&](const Tap<T> *const *t, int64_t o) {
        spread<T, N, Fused>(dc, t, T(1), gc[o]);
      });
    }
  }
}

/// Units [begin, end) of the forward or the gradient, for the spatial rank.
template <class T, bool Fused>
[[gnu::always_inline]] inline void units(const T *src, T *dst, const Geometry<T> &g,
                                         const Dims3 &in, size_t nd, bool backward, int64_t begin,
                                         int64_t end) {
  auto body = [&]<size_t N>() {
    if (backward)
      backwardUnits<T, N, Fused>(src, dst, g, in, begin, end);
    else
      forwardUnits<T, N, Fused>(src, dst, g, in, begin, end);
  };
  if (nd == 1) body.template operator()<1>();
  if (nd == 2) body.template operator()<2>();
  if (nd == 3) body.template operator()<3>();
}

// The fused variants compiled for AVX2 + FMA (one function per dtype: GCC's target attribute
// takes no templates) and picked at run time, as max_pool_backward.cpp's clones are.
#if defined(__x86_64__) && defined(__GNUC__)
#define XJIT_FMA_UNITS [[gnu::target("avx2,fma"), gnu::flatten]]
#else
#define XJIT_FMA_UNITS
#endif

XJIT_FMA_UNITS void fusedUnitsF32(const float *src, float *dst, const Geometry<float> &g,
                                  const Dims3 &in, size_t nd, bool backward, int64_t begin,
                                  int64_t end) {
  units<float, true>(src, dst, g, in, nd, backward, begin, end);
}

XJIT_FMA_UNITS void fusedUnitsF64(const double *src, double *dst, const Geometry<double> &g,
                                  const Dims3 &in, size_t nd, bool backward, int64_t begin,
                                  int64_t end) {
  units<double, true>(src, dst, g, in, nd, backward, begin, end);
}

/// A fresh [N, C, spatial...] tensor in `like`'s memory order (channels-last or first).
Tensor allocateLike(const Tensor &like, size_t nd, std::vector<int64_t> sizes, bool last,
                    const Allocate &allocate) {
  if (!last) return allocate(like.dtype(), std::move(sizes));
  return channelView(allocate(like.dtype(), permuted(sizes, channelPerm(sizes.size(), nd, true))),
                     nd, false);
}

/// Runs the forward (or the gradient) of `a` with `src` read and the result allocated.
Tensor runLinearResample(const LinearResampleAttrs &a, const Tensor &src, bool backward,
                         const Allocate &allocate, int64_t parts, const UnitRunner &run) {
  const size_t nd = a.nd;
  const std::vector<int64_t> &ss = src.sizes();
  const Shape out = atRuntime(
      [&] { return resampledShape(a, shapeOf(ss), backward ? a.inputSize : a.outputSize); });
  if (src.dtype() != DType::F32 && src.dtype() != DType::F64)
    kernelFail(a.op + ": input must be f32 or f64");
  const std::vector<int64_t> outSizes = sizesOf(out);
  // Channels innermost when src has them so (dst is allocated alike): unit channel strides.
  const bool last = src.strides()[1] == 1 && ss[1] > 1;
  Tensor dst = allocateLike(src, nd, outSizes, last, allocate);
  // The taps index the forward's output grid and read its input.
  const std::vector<int64_t> &fwdIn = backward ? outSizes : ss, &fwdOut = backward ? ss : outSizes;
  std::vector<int64_t> inSpatial(fwdIn.begin() + 2, fwdIn.end()),
      outSpatial(fwdOut.begin() + 2, fwdOut.end());
  const bool fused = fusedMultiplyAdd();
  auto go = [&](auto zero) {
    using T = decltype(zero);
    Geometry<T> g{.src = liftedStrides(src, nd),
                  .dst = liftedStrides(dst, nd),
                  .out = liftedSizes(fwdOut, nd),
                  .batch = ss[0],
                  .channels = ss[1],
                  .channelBlock = channelBlockFor(ss[0], ss[1], parts),
                  .channelsLast = last};
    g.taps =
        liftedTaps<T>(a, inSpatial, outSpatial, backward ? g.dst.spatial : g.src.spatial, fused);
    if (!backward && !last) // separablePlane's: D taps as depths, H taps along [in H][out W]
      g.passTaps = liftedTaps<T>(a, inSpatial, outSpatial, Dims3{1, g.out[2], 1}, fused);
    if (g.batch == 0 || g.channels == 0) return;
    const T *s = reinterpret_cast<const T *>(src.data());
    T *d = reinterpret_cast<T *>(dst.data());
    const Dims3 in = liftedSizes(fwdIn, nd);
    const int64_t count = g.batch * ceilDiv(g.channels, g.channelBlock);
    run(count, [&](int64_t begin, int64_t end) {
      if (!fused)
        units<T, false>(s, d, g, in, nd, backward, begin, end);
      else if constexpr (std::is_same_v<T, float>)
        fusedUnitsF32(s, d, g, in, nd, backward, begin, end);
      else
        fusedUnitsF64(s, d, g, in, nd, backward, begin, end);
    });
  };
  if (src.dtype() == DType::F32)
    go(float{});
  else
    go(double{});
  return dst;
}

// ---- reference kernels: each output element as its weighted sum, in double ----

std::vector<RtValue> linearResampleReference(const Op &op, std::span<const RtValue> in) {
  const LinearResampleAttrs a = linearResampleAttrs(op);
  const Tensor &src = in[0].tensor();
  const bool backward = !a.inputSize.empty();
  const std::vector<int64_t> outSizes = sizesOf(atRuntime([&] {
    return resampledShape(a, shapeOf(src.sizes()), backward ? a.inputSize : a.outputSize);
  }));
  const std::vector<int64_t> &fwdIn = backward ? outSizes : src.sizes(),
                             &fwdOut = backward ? src.sizes() : outSizes;
  // Per spatial dim, the taps (ATen's indices and weights in the opmath type).
  std::vector<LinearTaps<double>> taps;
  const bool fused = fusedMultiplyAdd();
  for (size_t d = 0; d < a.nd; ++d) {
    if (src.dtype() == DType::F32) {
      LinearTaps<float> t =
          linearTaps<float>(fwdIn[2 + d], fwdOut[2 + d], a.alignCorners, a.scales[d], fused);
      taps.push_back({t.i0, t.i1, {t.w0.begin(), t.w0.end()}, {t.w1.begin(), t.w1.end()}});
    } else {
      taps.push_back(
          linearTaps<double>(fwdIn[2 + d], fwdOut[2 + d], a.alignCorners, a.scales[d], fused));
    }
  }
  const std::vector<double> s = load<double>(src);
  std::vector<double> small(static_cast<size_t>(product(fwdIn)), 0.0);
  std::vector<double> large(backward ? 0 : static_cast<size_t>(product(fwdOut)), 0.0);
  // For every forward output element and each of its 2^nd neighbours: y[o] += w * x[i]
  // (forward), dx[i] += w * gy[o] (gradient).
  forEachIndex(fwdOut, [&](const std::vector<int64_t> &o, int64_t linear) {
    for (int64_t corner = 0; corner < (int64_t{1} << a.nd); ++corner) {
      std::vector<int64_t> i = o;
      double w = 1.0;
      for (size_t d = 0; d < a.nd; ++d) {
        const bool hi = (corner >> (a.nd - 1 - d)) & 1;
        const size_t k = static_cast<size_t>(o[2 + d]);
        i[2 + d] = hi ? taps[d].i1[k] : taps[d].i0[k];
        w *= hi ? taps[d].w1[k] : taps[d].w0[k];
      }
      const auto at = static_cast<size_t>(linearIndex(fwdIn, i));
      if (backward)
        small[at] += w * s[static_cast<size_t>(linear)];
      else
        large[static_cast<size_t>(linear)] += w * s[at];
    }
  });
  return {backward ? store<double>(small, src.dtype(), outSizes)
                   : store<double>(large, src.dtype(), outSizes)};
}

void addLinearResampleRows(OpRegistry &r, size_t nd, const std::string &name) {
  const std::string dims = std::to_string(nd);
  const AttrSpec alignCorners{
      .name = "align_corners", .kind = AttrKind::Bool, .defaultValue = Attr(false)};
  const AttrSpec scales{
      .name = "scales", .kind = AttrKind::Floats, .defaultValue = Attr(Attr::Floats{})};
  r.add({.name = name,
         .summary = "F.interpolate's " + name.substr(9, name.size() - 11) +
                    " mode on a batched [N, C, " + dims +
                    " spatial dims] f32 or f64 input: output_size (spatial), align_corners, "
                    "scales (per spatial dim, the scale_factor ATen is given; [] or <= 0: "
                    "input/output size). Source indices and weights as ATen's, in the "
                    "opmath type.",
         .operands = {{"input"}},
         .attrs = {{.name = "output_size", .kind = AttrKind::Ints}, alignCorners, scales},
         .infer = linearResampleInfer,
         .kernel = linearResampleReference});
  r.add({.name = name + "_backward",
         .summary = "The gradient of " + name +
                    "'s input [N, C, input_size...] for its output's gradient grad_output: "
                    "each grad_output element times its weights added at its neighbours; "
                    "align_corners and scales as the forward's.",
         .operands = {{"grad_output"}},
         .attrs = {{.name = "input_size", .kind = AttrKind::Ints}, alignCorners, scales},
         .infer = linearResampleInfer,
         .kernel = linearResampleReference});
}

} // namespace

namespace ops::nn {

Tensor upsampleLinear(const LinearResampleAttrs &a, const Tensor &x, const Allocate &allocate,
                      int64_t parts, const UnitRunner &run) {
  return runLinearResample(a, x, false, allocate, parts, run);
}

Tensor upsampleLinearBackward(const LinearResampleAttrs &a, const Tensor &gy,
                              const Allocate &allocate, int64_t parts, const UnitRunner &run) {
  return runLinearResample(a, gy, true, allocate, parts, run);
}

void registerResampleOps(OpRegistry &r) {
  addLinearResampleRows(r, 1, "upsample_linear1d");
  addLinearResampleRows(r, 2, "upsample_bilinear2d");
  addLinearResampleRows(r, 3, "upsample_trilinear3d");
}

} // namespace ops::nn

} // namespace xjit
