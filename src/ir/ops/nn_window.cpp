#include "nn_window.h"

#include <cmath>
#include <limits>

namespace xjit::ops::nn {
namespace {

Dims3 lift3(const std::vector<int64_t> &v, int64_t fill) {
  Dims3 d{fill, fill, fill};
  for (size_t i = 0; i < v.size(); ++i)
    d[3 - v.size() + i] = v[i];
  return d;
}

/// The range [lo, hi) of o in [0, count) for which o*stride + offset lies in [0, size).
std::pair<int64_t, int64_t> validRange(int64_t count, int64_t stride, int64_t offset,
                                       int64_t size) {
  int64_t lo = std::max<int64_t>(0, ceilDiv(-offset, stride));
  int64_t hi = std::min<int64_t>(count, floorDiv(size - 1 - offset, stride) + 1);
  return {lo, std::max(lo, hi)};
}

int64_t vol(const Dims3 &d) { return d[0] * d[1] * d[2]; }

template <class T> T sumAsSigned(T a, T b) {
  if constexpr (std::same_as<T, int64_t>) // wraps like the integer kernels, without UB
    return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
  else
    return a + b;
}

} // namespace

ConvWindow ConvWindow::lift(const std::vector<int64_t> &in, const std::vector<int64_t> &out,
                            const std::vector<int64_t> &kernel, const std::vector<int64_t> &stride,
                            const std::vector<int64_t> &pad, const std::vector<int64_t> &dil) {
  return {lift3(in, 1),     lift3(out, 1), lift3(kernel, 1),
          lift3(stride, 1), lift3(pad, 0), lift3(dil, 1)};
}

template <Acc T>
std::vector<T> convForward(const std::vector<T> &x, const std::vector<T> &w,
                           const std::vector<T> &bias, int64_t n, int64_t cin, int64_t cout,
                           int64_t groups, const ConvWindow &g) {
  int64_t inVol = vol(g.in), outVol = vol(g.out), kVol = vol(g.kernel);
  int64_t cinG = cin / groups, coutG = cout / groups;
  std::vector<T> y(static_cast<size_t>(n * cout * outVol), T{});
  for (int64_t b = 0; b < n; ++b)
    for (int64_t oc = 0; oc < cout; ++oc) {
      T *yc = &y[(b * cout + oc) * outVol];
      if (!bias.empty()) std::fill(yc, yc + outVol, bias[oc]);
      int64_t grp = oc / coutG;
      for (int64_t icg = 0; icg < cinG; ++icg) {
        const T *xc = &x[(b * cin + grp * cinG + icg) * inVol];
        const T *wk = &w[(oc * cinG + icg) * kVol];
        for (int64_t kd = 0; kd < g.kernel[0]; ++kd)
          for (int64_t kh = 0; kh < g.kernel[1]; ++kh)
            for (int64_t kw = 0; kw < g.kernel[2]; ++kw) {
              T wv = wk[(kd * g.kernel[1] + kh) * g.kernel[2] + kw];
              // Output o reads input o*stride - pad + k*dil; only in-bounds reads contribute.
              int64_t offD = kd * g.dil[0] - g.pad[0], offH = kh * g.dil[1] - g.pad[1],
                      offW = kw * g.dil[2] - g.pad[2];
              auto [d0, d1] = validRange(g.out[0], g.stride[0], offD, g.in[0]);
              auto [h0, h1] = validRange(g.out[1], g.stride[1], offH, g.in[1]);
              auto [w0, w1] = validRange(g.out[2], g.stride[2], offW, g.in[2]);
              for (int64_t od = d0; od < d1; ++od)
                for (int64_t oh = h0; oh < h1; ++oh) {
                  const T *xr =
                      xc +
                      ((od * g.stride[0] + offD) * g.in[1] + oh * g.stride[1] + offH) * g.in[2];
                  T *yr = yc + (od * g.out[1] + oh) * g.out[2];
                  for (int64_t ow = w0; ow < w1; ++ow)
                    yr[ow] += wv * xr[ow * g.stride[2] + offW];
                }
            }
      }
    }
  return y;
}

template <Acc T>
std::vector<T> convTransposed(const std::vector<T> &x, const std::vector<T> &w,
                              const std::vector<T> &bias, int64_t n, int64_t cin, int64_t cout,
                              int64_t groups, const ConvWindow &g) {
  int64_t inVol = vol(g.in), outVol = vol(g.out), kVol = vol(g.kernel);
  int64_t cinG = cin / groups, coutG = cout / groups;
  std::vector<T> y(static_cast<size_t>(n * cout * outVol), T{});
  for (int64_t b = 0; b < n; ++b) {
    if (!bias.empty())
      for (int64_t oc = 0; oc < cout; ++oc)
        std::fill(&y[(b * cout + oc) * outVol], &y[(b * cout + oc) * outVol] + outVol, bias[oc]);
    for (int64_t ic = 0; ic < cin; ++ic) {
      const T *xc = &x[(b * cin + ic) * inVol];
      int64_t grp = ic / cinG;
      for (int64_t ocg = 0; ocg < coutG; ++ocg) {
        T *yc = &y[(b * cout + grp * coutG + ocg) * outVol];
        const T *wk = &w[(ic * coutG + ocg) * kVol];
        for (int64_t kd = 0; kd < g.kernel[0]; ++kd)
          for (int64_t kh = 0; kh < g.kernel[1]; ++kh)
            for (int64_t kw = 0; kw < g.kernel[2]; ++kw) {
              T wv = wk[(kd * g.kernel[1] + kh) * g.kernel[2] + kw];
              // Input i writes output i*stride - pad + k*dil when that is in bounds.
              int64_t offD = kd * g.dil[0] - g.pad[0], offH = kh * g.dil[1] - g.pad[1],
                      offW = kw * g.dil[2] - g.pad[2];
              auto [d0, d1] = validRange(g.in[0], g.stride[0], offD, g.out[0]);
              auto [h0, h1] = validRange(g.in[1], g.stride[1], offH, g.out[1]);
              auto [w0, w1] = validRange(g.in[2], g.stride[2], offW, g.out[2]);
              for (int64_t id = d0; id < d1; ++id)
                for (int64_t ih = h0; ih < h1; ++ih) {
                  const T *xr = xc + (id * g.in[1] + ih) * g.in[2];
                  T *yr = yc + ((id * g.stride[0] + offD) * g.out[1] + ih * g.stride[1] + offH) *
                                   g.out[2];
                  for (int64_t iw = w0; iw < w1; ++iw)
                    yr[iw * g.stride[2] + offW] += wv * xr[iw];
                }
            }
      }
    }
  }
  return y;
}

Taps windowTaps(int64_t inSize, int64_t outSize, int64_t kernel, int64_t stride, int64_t pad,
                int64_t dil) {
  Taps t{.inSize = inSize};
  for (int64_t o = 0; o < outSize; ++o) {
    int64_t start = o * stride - pad;
    std::vector<int64_t> p;
    for (int64_t j = 0; j < kernel; ++j)
      if (int64_t i = start + j * dil; i >= 0 && i < inSize) p.push_back(i);
    t.pos.push_back(std::move(p));
    t.padded.push_back(std::min(start + kernel, inSize + pad) - start);
  }
  return t;
}

Taps adaptiveTaps(int64_t inSize, int64_t outSize) {
  Taps t{.inSize = inSize};
  for (int64_t o = 0; o < outSize; ++o) {
    int64_t start = o * inSize / outSize, end = ((o + 1) * inSize + outSize - 1) / outSize;
    std::vector<int64_t> p;
    for (int64_t i = start; i < end; ++i)
      p.push_back(i);
    t.pos.push_back(std::move(p));
    t.padded.push_back(end - start);
  }
  return t;
}

std::array<Taps, 3> liftTaps(std::vector<Taps> taps) {
  std::array<Taps, 3> out;
  for (Taps &t : out)
    t = Taps{.inSize = 1, .pos = {{0}}, .padded = {1}};
  for (size_t i = 0; i < taps.size(); ++i)
    out[3 - taps.size() + i] = std::move(taps[i]);
  return out;
}

namespace {

/// Calls f(outLinear, taps of dims 0..2) for every output position of one plane.
template <class F> void forEachWindow(const std::array<Taps, 3> &t, F &&f) {
  int64_t o = 0;
  for (size_t d = 0; d < t[0].pos.size(); ++d)
    for (size_t h = 0; h < t[1].pos.size(); ++h)
      for (size_t w = 0; w < t[2].pos.size(); ++w)
        f(o++, d, h, w);
}

int64_t outVolume(const std::array<Taps, 3> &t) {
  return static_cast<int64_t>(t[0].pos.size() * t[1].pos.size() * t[2].pos.size());
}

} // namespace

template <class T>
std::vector<T> maxPool(const std::vector<T> &x, int64_t planes, const std::array<Taps, 3> &t,
                       std::vector<int64_t> *indices) {
  int64_t inVol = t[0].inSize * t[1].inSize * t[2].inSize, outVol = outVolume(t);
  std::vector<T> y(static_cast<size_t>(planes * outVol));
  if (indices) indices->assign(y.size(), 0);
  for (int64_t p = 0; p < planes; ++p) {
    const T *xp = &x[p * inVol];
    forEachWindow(t, [&](int64_t o, size_t d, size_t h, size_t w) {
      T best = std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity()
                                                    : std::numeric_limits<T>::lowest();
      int64_t bestIdx = -1;
      for (int64_t id : t[0].pos[d])
        for (int64_t ih : t[1].pos[h])
          for (int64_t iw : t[2].pos[w]) {
            int64_t i = (id * t[1].inSize + ih) * t[2].inSize + iw;
            T v = xp[i];
            bool isNan = false;
            if constexpr (std::floating_point<T>) isNan = std::isnan(v);
            if (bestIdx < 0) bestIdx = i; // PyTorch starts from the window's first tap
            if (v > best || isNan) {
              best = v;
              bestIdx = i;
            }
          }
      y[p * outVol + o] = best;
      if (indices) (*indices)[p * outVol + o] = bestIdx;
    });
  }
  return y;
}

template <class T>
std::vector<T> avgPool(const std::vector<T> &x, int64_t planes, const std::array<Taps, 3> &t,
                       bool countIncludePad, int64_t divisor) {
  int64_t inVol = t[0].inSize * t[1].inSize * t[2].inSize, outVol = outVolume(t);
  std::vector<T> y(static_cast<size_t>(planes * outVol));
  for (int64_t p = 0; p < planes; ++p) {
    const T *xp = &x[p * inVol];
    forEachWindow(t, [&](int64_t o, size_t d, size_t h, size_t w) {
      T sum{};
      for (int64_t id : t[0].pos[d])
        for (int64_t ih : t[1].pos[h])
          for (int64_t iw : t[2].pos[w])
            sum = sumAsSigned(sum, xp[(id * t[1].inSize + ih) * t[2].inSize + iw]);
      int64_t div =
          divisor > 0 ? divisor
          : countIncludePad
              ? t[0].padded[d] * t[1].padded[h] * t[2].padded[w]
              : static_cast<int64_t>(t[0].pos[d].size() * t[1].pos[h].size() * t[2].pos[w].size());
      // An empty window (possible only past the input in ceil_mode) averages to zero.
      y[p * outVol + o] = div == 0 ? T{} : sum / static_cast<T>(div);
    });
  }
  return y;
}

template <Acc T>
std::vector<T> convWeightGrad(const std::vector<T> &x, const std::vector<T> &gy, int64_t n,
                              int64_t cin, int64_t cout, int64_t groups, const ConvWindow &g) {
  int64_t inVol = vol(g.in), outVol = vol(g.out), kVol = vol(g.kernel);
  int64_t cinG = cin / groups, coutG = cout / groups;
  std::vector<T> dw(static_cast<size_t>(cout * cinG * kVol), T{});
  for (int64_t oc = 0; oc < cout; ++oc) {
    int64_t grp = oc / coutG;
    for (int64_t icg = 0; icg < cinG; ++icg) {
      T *dk = &dw[(oc * cinG + icg) * kVol];
      for (int64_t kd = 0; kd < g.kernel[0]; ++kd)
        for (int64_t kh = 0; kh < g.kernel[1]; ++kh)
          for (int64_t kw = 0; kw < g.kernel[2]; ++kw) {
            // The forward's output o read input o*stride - pad + k*dil with this weight.
            int64_t offD = kd * g.dil[0] - g.pad[0], offH = kh * g.dil[1] - g.pad[1],
                    offW = kw * g.dil[2] - g.pad[2];
            auto [d0, d1] = validRange(g.out[0], g.stride[0], offD, g.in[0]);
            auto [h0, h1] = validRange(g.out[1], g.stride[1], offH, g.in[1]);
            auto [w0, w1] = validRange(g.out[2], g.stride[2], offW, g.in[2]);
            T acc{};
            for (int64_t b = 0; b < n; ++b) {
              const T *xc = &x[(b * cin + grp * cinG + icg) * inVol];
              const T *gc = &gy[(b * cout + oc) * outVol];
              for (int64_t od = d0; od < d1; ++od)
                for (int64_t oh = h0; oh < h1; ++oh) {
                  const T *xr =
                      xc +
                      ((od * g.stride[0] + offD) * g.in[1] + oh * g.stride[1] + offH) * g.in[2];
                  const T *gr = gc + (od * g.out[1] + oh) * g.out[2];
                  for (int64_t ow = w0; ow < w1; ++ow)
                    acc += gr[ow] * xr[ow * g.stride[2] + offW];
                }
            }
            dk[(kd * g.kernel[1] + kh) * g.kernel[2] + kw] = acc;
          }
    }
  }
  return dw;
}

template std::vector<double> convForward(const std::vector<double> &, const std::vector<double> &,
                                         const std::vector<double> &, int64_t, int64_t, int64_t,
                                         int64_t, const ConvWindow &);
template std::vector<uint64_t> convForward(const std::vector<uint64_t> &,
                                           const std::vector<uint64_t> &,
                                           const std::vector<uint64_t> &, int64_t, int64_t, int64_t,
                                           int64_t, const ConvWindow &);
template std::vector<double> convTransposed(const std::vector<double> &,
                                            const std::vector<double> &,
                                            const std::vector<double> &, int64_t, int64_t, int64_t,
                                            int64_t, const ConvWindow &);
template std::vector<uint64_t> convTransposed(const std::vector<uint64_t> &,
                                              const std::vector<uint64_t> &,
                                              const std::vector<uint64_t> &, int64_t, int64_t,
                                              int64_t, int64_t, const ConvWindow &);
template std::vector<double> convWeightGrad(const std::vector<double> &,
                                            const std::vector<double> &, int64_t, int64_t, int64_t,
                                            int64_t, const ConvWindow &);
template std::vector<uint64_t> convWeightGrad(const std::vector<uint64_t> &,
                                              const std::vector<uint64_t> &, int64_t, int64_t,
                                              int64_t, int64_t, const ConvWindow &);
template std::vector<double> maxPool(const std::vector<double> &, int64_t,
                                     const std::array<Taps, 3> &, std::vector<int64_t> *);
template std::vector<int64_t> maxPool(const std::vector<int64_t> &, int64_t,
                                      const std::array<Taps, 3> &, std::vector<int64_t> *);
template std::vector<double> avgPool(const std::vector<double> &, int64_t,
                                     const std::array<Taps, 3> &, bool, int64_t);
template std::vector<int64_t> avgPool(const std::vector<int64_t> &, int64_t,
                                      const std::array<Taps, 3> &, bool, int64_t);

} // namespace xjit::ops::nn
