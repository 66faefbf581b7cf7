// max_pool's gradient kernel (the op max_pool{1,2,3}d_backward): per window position, every
// channel's argmax found again from x and g added there. Both the reference kernel and what the
// CPU target runs (its units on threads, src/backend/max_pool_backward.cpp).
#include "nn_window.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

namespace xjit::ops::nn {
namespace {

/// One output row's windows: the in-bounds taps of window w are [start[w], start[w + 1]) of
/// x and dx (offsets from the batch element's channel 0), in PyTorch's scan order.
struct RowTaps {
  std::vector<int64_t> x, dx;
  std::vector<size_t> start;
  /// Windows [lo, hi) have every tap and are translations of each other: window w + 1's taps
  /// are window w's plus xStep in x, dxStep in dx (all windows but the clipped edge ones).
  size_t lo = 0, hi = 0;
  int64_t xStep = 0, dxStep = 0;
};

/// One channel of one window: the argmax (branch-free: a branch per tap mispredicted ~1 in 3
/// on random data and took 4x longer): the maximum, then its first tap; a window holding NaN,
/// its last NaN, as PyTorch's scan moves on `val > max || isnan(val)`; g added there.
template <class T>
[[gnu::always_inline]] inline void windowChannel(const T *x, T g, T *dx, const int64_t *xo,
                                                 const int64_t *dxo, size_t n) {
  T best = -std::numeric_limits<T>::infinity();
  bool nan = false;
  for (size_t j = 0; j < n; ++j) {
    const T v = x[xo[j]];
    best = v > best ? v : best;
    nan |= v != v;
  }
  size_t pick = 0; // an all -inf window: its first tap, where PyTorch's scan starts
  if (!nan)
    for (size_t j = n; j-- > 0;)
      pick = x[xo[j]] == best ? j : pick;
  else
    for (size_t j = 0; j < n; ++j)
      pick = x[xo[j]] != x[xo[j]] ? j : pick;
  dx[dxo[pick]] += g;
}

/// One window over kVectors vectors of contiguous channels (channels-last x and dx): the same
/// picks as windowChannel per lane. g goes to dx by an add under a mask per tap: the lanes not
/// picked add +0, which changes no element of dx (it starts at +0, and a sum is -0 only of two
/// -0). Several vectors at once: each one's compares and selects form a chain through the taps.
template <class T, int kVectors>
[[gnu::always_inline]] inline void windowVectors(const T *x, const T *g, int64_t gc, T *dx,
                                                 const int64_t *xo, const int64_t *dxo, size_t n) {
  using V [[gnu::vector_size(64)]] = T;
  using M = decltype(V{} != V{});
  constexpr int kLanes = 64 / sizeof(T);
  constexpr T kNaN = std::numeric_limits<T>::quiet_NaN();
  V best[kVectors], gv[kVectors];
  M nan[kVectors];
  for (int k = 0; k < kVectors; ++k) {
    best[k] = V{} - std::numeric_limits<T>::infinity();
    nan[k] = best[k] != best[k];
    for (int c = 0; c < kLanes; ++c)
      gv[k][c] = g[(k * kLanes + c) * gc];
  }
  for (size_t j = 0; j < n; ++j)
    for (int k = 0; k < kVectors; ++k) {
      V v;
      std::memcpy(&v, x + xo[j] + k * kLanes, sizeof v);
      best[k] = v > best[k] ? v : best[k];
      nan[k] |= v != v;
    }
  M nanAny = nan[0];
  for (int k = 1; k < kVectors; ++k)
    nanAny |= nan[k];
  uint64_t words[8]; // the mask's lanes ORed as words (lane by lane took 16 extracts)
  std::memcpy(words, &nanAny, sizeof words);
  const bool anyNan = ((words[0] | words[1]) | (words[2] | words[3])) |
                      ((words[4] | words[5]) | (words[6] | words[7]));
  if (anyNan) // equal to no tap: those lanes go below
    for (int k = 0; k < kVectors; ++k)
      best[k] = nan[k] ? V{} + kNaN : best[k];
  // The first tap equal to the maximum: once hit, the lane's maximum becomes NaN.
  for (size_t j = 0; j < n; ++j)
    for (int k = 0; k < kVectors; ++k) {
      V v, d;
      std::memcpy(&v, x + xo[j] + k * kLanes, sizeof v);
      std::memcpy(&d, dx + dxo[j] + k * kLanes, sizeof d);
      const auto hit = v == best[k];
      d += hit ? gv[k] : V{};
      std::memcpy(dx + dxo[j] + k * kLanes, &d, sizeof d);
      best[k] = hit ? V{} + kNaN : best[k];
    }
  if (anyNan)
    for (int k = 0; k < kVectors; ++k)
      for (int c = 0; c < kLanes; ++c)
        if (nan[k][c]) {
          const int64_t l = k * kLanes + c;
          size_t pick = 0;
          for (size_t j = 0; j < n; ++j)
            pick = x[xo[j] + l] != x[xo[j] + l] ? j : pick;
          dx[dxo[pick] + l] += gv[k][c];
        }
}

/// Channels-first: kLanes neighbouring windows of one channel from an interior run (RowTaps),
/// lane l being window w + l, whose taps are window w's shifted by l * step in x (loaded as a
/// vector: one load for step 1, two and a shuffle for step 2, else element by element). The
/// same picks as windowChannel; the adds go lane by lane in output order, since neighbouring
/// windows may pick the same element.
template <class T, int kStep>
[[gnu::always_inline]] inline void windowsAlongRow(const T *x, const T *g, int64_t gStep, T *dx,
                                                   const int64_t *xo, const int64_t *dxo, size_t n,
                                                   int64_t step, int64_t dxStep) {
  using V [[gnu::vector_size(64)]] = T;
  using M = decltype(V{} != V{});
  using Index = std::conditional_t<sizeof(T) == 4, int32_t, int64_t>; // M's lanes
  constexpr int kLanes = 64 / sizeof(T);
  constexpr T kNaN = std::numeric_limits<T>::quiet_NaN();
  // Step 2: lanes p[0], p[2], ... p[2 * kLanes - 2] from a = p[0, kLanes) and
  // b = p[kLanes - 1, 2 * kLanes - 1) (not one further: the buffer may end there).
  M evens;
  for (int l = 0; l < kLanes; ++l)
    evens[l] = 2 * l < kLanes ? 2 * l : 2 * l + 1;
  auto load = [&](V &v, const T *p) { // by reference: a vector return would change the ABI
    if constexpr (kStep == 1) {
      std::memcpy(&v, p, sizeof v);
    } else if constexpr (kStep == 2) {
      V a, b;
      std::memcpy(&a, p, sizeof a);
      std::memcpy(&b, p + kLanes - 1, sizeof b);
      v = __builtin_shuffle(a, b, evens);
    } else {
      for (int l = 0; l < kLanes; ++l)
        v[l] = p[l * step];
    }
  };
  V best = V{} - std::numeric_limits<T>::infinity(), gv;
  for (int l = 0; l < kLanes; ++l)
    gv[l] = g[l * gStep];
  M nan = best != best, pick = nan;
  for (size_t j = 0; j < n; ++j) {
    V v;
    load(v, x + xo[j]);
    best = v > best ? v : best;
    nan |= v != v;
  }
  best = nan ? V{} + kNaN : best; // equal to no tap: those lanes are picked below
  for (size_t j = 0; j < n; ++j) {
    V v;
    load(v, x + xo[j]);
    const auto hit = v == best;
    pick = hit ? M{} + Index(j) : pick;
    best = hit ? V{} + kNaN : best;
  }
  for (int l = 0; l < kLanes; ++l) {
    size_t j = size_t(pick[l]);
    if (nan[l]) // a window holding NaN: its last NaN
      for (size_t k = 0; k < n; ++k)
        j = x[xo[k] + l * step] != x[xo[k] + l * step] ? k : j;
    dx[dxo[j] + l * dxStep] += gv[l];
  }
}

/// Zero-fills input row (id, ih) of dx for `channels` channels from dn.
template <class T, bool kDense>
void zeroRow(T *dn, int64_t id, int64_t ih, int64_t channels, int64_t width,
             const PlaneStrides &s) {
  T *row = dn + id * s.spatial[0] + ih * s.spatial[1];
  if constexpr (kDense) {
    for (int64_t iw = 0; iw < width; ++iw)
      std::fill_n(row + iw * s.spatial[2], channels, T(0));
  } else {
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t iw = 0; iw < width; ++iw)
        row[c * s.channel + iw * s.spatial[2]] = T(0);
  }
}

/// The windows of an output row whose taps span input rows pd x ph, offsets taken from input
/// row (pd[0], ph[0]). Rows whose pd and ph are the same steps apart (all but the clipped
/// ones at the edges) share them.
void rowTaps(const MaxPoolGradPlan &p, const std::vector<int64_t> &pd,
             const std::vector<int64_t> &ph, RowTaps &r) {
  r.x.clear();
  r.dx.clear();
  r.start.assign(1, 0);
  for (const std::vector<int64_t> &pw : p.taps[2].pos) {
    for (int64_t id : pd)
      for (int64_t ih : ph)
        for (int64_t iw : pw) {
          const int64_t d = id - pd[0], h = ih - ph[0];
          r.x.push_back(d * p.xs.spatial[0] + h * p.xs.spatial[1] + iw * p.xs.spatial[2]);
          r.dx.push_back(d * p.dxs.spatial[0] + h * p.dxs.spatial[1] + iw * p.dxs.spatial[2]);
        }
    r.start.push_back(r.x.size());
  }
  // The interior run: the windows with the most taps, while each is its predecessor shifted.
  size_t most = 0, windows = r.start.size() - 1;
  for (size_t w = 0; w < windows; ++w)
    most = std::max(most, r.start[w + 1] - r.start[w]);
  r.lo = r.hi = 0;
  for (size_t w = 0; w < windows && r.hi == 0; ++w)
    if (r.start[w + 1] - r.start[w] == most) r.lo = w, r.hi = w + 1;
  if (most == 0 || r.hi >= windows) return;
  r.xStep = r.x[r.start[r.lo + 1]] - r.x[r.start[r.lo]];
  r.dxStep = r.dx[r.start[r.lo + 1]] - r.dx[r.start[r.lo]];
  auto shifted = [&](size_t w) {
    if (r.start[w + 1] - r.start[w] != most) return false;
    for (size_t j = 0; j < most; ++j)
      if (r.x[r.start[w] + j] != r.x[r.start[w - 1] + j] + r.xStep ||
          r.dx[r.start[w] + j] != r.dx[r.start[w - 1] + j] + r.dxStep)
        return false;
    return true;
  };
  while (r.hi < windows && shifted(r.hi))
    ++r.hi;
}

/// pd and ph as steps from their first element: equal keys, equal rowTaps.
void rowKey(const std::vector<int64_t> &pd, const std::vector<int64_t> &ph,
            std::vector<int64_t> &key) {
  key.clear();
  for (int64_t id : pd)
    key.push_back(id - pd[0]);
  key.push_back(-1);
  for (int64_t ih : ph)
    key.push_back(ih - ph[0]);
}

/// kDense: x and dx hold the channels contiguously (channels-last): each window runs over
/// vectors of channels. Otherwise channel by channel, each over the row's windows (a channel's
/// rows are contiguous there).
template <class T, bool kDense>
[[gnu::always_inline]] inline void units(const T *x, const T *g, T *dx, const MaxPoolGradPlan &p,
                                         int64_t begin, int64_t end) {
  constexpr int64_t kLanes = 64 / sizeof(T);
  const std::array<Taps, 3> &t = p.taps;
  const int64_t height = t[1].inSize, width = t[2].inSize, rows = t[0].inSize * height;
  const size_t outW = t[2].pos.size();
  RowTaps r;
  std::vector<int64_t> key, rKey; // r's rowKey
  for (int64_t u = begin; u < end; ++u) {
    const int64_t n = u / p.blocks(), c0 = u % p.blocks() * p.channelBlock,
                  channels = std::min(p.channels, c0 + p.channelBlock) - c0;
    const T *xn = x + n * p.xs.batch + c0 * p.xs.channel;
    const T *gn = g + n * p.gs.batch + c0 * p.gs.channel;
    T *dn = dx + n * p.dxs.batch + c0 * p.dxs.channel;
    // dx's input rows (d, h) are zero-filled just before the first window that reaches them
    // (the last row a window reaches only grows in output order), so the adds find them in
    // cache.
    int64_t zeroed = 0;
    auto zeroTo = [&](int64_t row) {
      for (; zeroed < row; ++zeroed)
        zeroRow<T, kDense>(dn, zeroed / height, zeroed % height, channels, width, p.dxs);
    };
    for (size_t od = 0; od < t[0].pos.size(); ++od)
      for (size_t oh = 0; oh < t[1].pos.size(); ++oh) {
        const std::vector<int64_t> &pd = t[0].pos[od], &ph = t[1].pos[oh];
        if (pd.empty() || ph.empty()) continue;
        zeroTo(pd.back() * height + ph.back() + 1);
        rowKey(pd, ph, key);
        if (key != rKey) {
          rowTaps(p, pd, ph, r);
          rKey.swap(key);
        }
        const T *xr = xn + pd[0] * p.xs.spatial[0] + ph[0] * p.xs.spatial[1];
        T *dr = dn + pd[0] * p.dxs.spatial[0] + ph[0] * p.dxs.spatial[1];
        const T *gr = gn + int64_t(od) * p.gs.spatial[0] + int64_t(oh) * p.gs.spatial[1];
        if constexpr (kDense) {
          for (size_t ow = 0; ow < outW; ++ow) {
            const int64_t *xo = r.x.data() + r.start[ow], *dxo = r.dx.data() + r.start[ow];
            const size_t taps = r.start[ow + 1] - r.start[ow];
            const T *gw = gr + int64_t(ow) * p.gs.spatial[2];
            if (taps == 0) continue;
            int64_t c = 0;
            for (; c + 4 * kLanes <= channels; c += 4 * kLanes)
              windowVectors<T, 4>(xr + c, gw + c * p.gs.channel, p.gs.channel, dr + c, xo, dxo,
                                  taps);
            for (; c + kLanes <= channels; c += kLanes)
              windowVectors<T, 1>(xr + c, gw + c * p.gs.channel, p.gs.channel, dr + c, xo, dxo,
                                  taps);
            for (; c < channels; ++c)
              windowChannel(xr + c, gw[c * p.gs.channel], dr + c, xo, dxo, taps);
          }
        } else {
          for (int64_t c = 0; c < channels; ++c) {
            const T *xc = xr + c * p.xs.channel, *gc = gr + c * p.gs.channel;
            T *dc = dr + c * p.dxs.channel;
            for (size_t ow = 0; ow < outW;) {
              const int64_t *xo = r.x.data() + r.start[ow], *dxo = r.dx.data() + r.start[ow];
              const size_t taps = r.start[ow + 1] - r.start[ow];
              const T *gw = gc + int64_t(ow) * p.gs.spatial[2];
              if (ow >= r.lo && ow + kLanes <= r.hi) {
                if (r.xStep == 1)
                  windowsAlongRow<T, 1>(xc, gw, p.gs.spatial[2], dc, xo, dxo, taps, 1, r.dxStep);
                else if (r.xStep == 2)
                  windowsAlongRow<T, 2>(xc, gw, p.gs.spatial[2], dc, xo, dxo, taps, 2, r.dxStep);
                else
                  windowsAlongRow<T, 0>(xc, gw, p.gs.spatial[2], dc, xo, dxo, taps, r.xStep,
                                        r.dxStep);
                ow += kLanes;
                continue;
              }
              if (taps) windowChannel(xc, *gw, dc, xo, dxo, taps);
              ++ow;
            }
          }
        }
      }
    zeroTo(rows);
  }
}

// One function per dtype (target_clones takes no templates), compiled for AVX-512, AVX2 and
// the baseline and picked at load time, as winograd_weights.cpp and dropout_draws.cpp do.
#if defined(__x86_64__) && defined(__GNUC__)
#define XJIT_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define XJIT_VECTOR_CLONES
#endif

XJIT_VECTOR_CLONES void unitsF32(const float *x, const float *g, float *dx,
                                 const MaxPoolGradPlan &p, int64_t begin, int64_t end, bool dense) {
  dense ? units<float, true>(x, g, dx, p, begin, end)
        : units<float, false>(x, g, dx, p, begin, end);
}

XJIT_VECTOR_CLONES void unitsF64(const double *x, const double *g, double *dx,
                                 const MaxPoolGradPlan &p, int64_t begin, int64_t end, bool dense) {
  dense ? units<double, true>(x, g, dx, p, begin, end)
        : units<double, false>(x, g, dx, p, begin, end);
}

} // namespace

template <class T>
void maxPoolBackward(const T *x, const T *g, T *dx, const MaxPoolGradPlan &plan, int64_t begin,
                     int64_t end) {
  const bool dense = plan.xs.channel == 1 && plan.dxs.channel == 1;
  if constexpr (std::is_same_v<T, float>)
    unitsF32(x, g, dx, plan, begin, end, dense);
  else
    unitsF64(x, g, dx, plan, begin, end, dense);
}

template void maxPoolBackward(const float *, const float *, float *, const MaxPoolGradPlan &,
                              int64_t, int64_t);
template void maxPoolBackward(const double *, const double *, double *, const MaxPoolGradPlan &,
                              int64_t, int64_t);

} // namespace xjit::ops::nn
