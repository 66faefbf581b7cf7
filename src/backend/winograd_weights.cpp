// Winograd weight transform (see winograd_weights.h for why it is not oneDNN's reorder).
#include "winograd_weights.h"

#include "xjit/backend/jit.h"

#include <cstring>

namespace xjit::backend::dnnl_kernels {
namespace {

// The transform matrices of oneDNN's kernels (F(2x2,3x3) and its scaled F(4x4,3x3)).
constexpr double kG2x3[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
constexpr double kG4x3[6][3] = {{1.13777777777778, 0, 0},
                                {-0.688403361344538, -0.430252100840336, -0.26890756302521},
                                {-0.688403361344538, 0.430252100840336, -0.26890756302521},
                                {0.119514472455649, 0.179271708683473, 0.26890756302521},
                                {0.119514472455649, -0.179271708683473, 0.26890756302521},
                                {0, 0, 1}};
constexpr int64_t kMaxBlock = 64;

/// Offset of element (a, b, input channel i, output channel ob * ocBlock) in the destination;
/// the next ocBlock output channels follow it contiguously in every format, and in every
/// format it is offsetOf(0, 0, i, ob) + (a * alpha + b) * WinogradWeightLayout::tileStride.
int64_t offsetOf(const WinogradWeightLayout &w, int64_t a, int64_t b, int64_t i, int64_t ob) {
  const int64_t A = w.alpha, nbOc = w.oc / w.ocBlock, nbIc = w.ic / w.icBlock;
  const int64_t ib = i / w.icBlock, ii = i % w.icBlock;
  switch (w.format) {
  case dnnl_wino_wei_aaOio: return (((a * A + b) * nbOc + ob) * w.ic + i) * w.ocBlock;
  case dnnl_wino_wei_aaOBiOo: {
    const int64_t occ = ob / w.oc2Block, ob2 = ob % w.oc2Block;
    return (((a * A + b) * (nbOc / w.oc2Block) + occ) * nbIc + ib) * w.oc2Block * w.icBlock *
               w.ocBlock +
           (ii * w.oc2Block + ob2) * w.ocBlock;
  }
  default: { // dnnl_wino_wei_OBaaIBOIio
    const int64_t occ = ob / w.oc2Block, ob2 = ob % w.oc2Block;
    const int64_t icc = ib / w.ic2Block, ib2 = ib % w.ic2Block;
    return ((((((occ * A + a) * A + b) * (nbIc / w.ic2Block) + icc) * w.oc2Block + ob2) *
                 w.ic2Block +
             ib2) *
                w.icBlock +
            ii) *
           w.ocBlock;
  }
  }
}

/// One block of ocBlock output channels against input channel i: loads the 3x3 kernels
/// (zeros for padded channels), computes U = G g G^T with the output channels as the vector
/// dim, and stores each of the alpha x alpha rows of ocBlock values.
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
void transformBlock(const WinogradWeightLayout &w, const float *src, float *dst, int64_t ob,
                    int64_t i) {
  const int64_t B = w.ocBlock;
  const int A = w.alpha;
  // One offset per block (offsetOf divides by run-time blocks: once per stored row it was a
  // fifth of the time), strided loads and vector stores (a run-time-size memcpy went through
  // libc): 256x256x3x3 1.28 -> 0.47 ms, one thread, cold weights.
  float *out = dst + offsetOf(w, 0, 0, i, ob);
  float g[9][kMaxBlock], t[6][3][kMaxBlock];
  if ((ob + 1) * B <= w.outC && i < w.inC) { // no padded channel: a strided (gather) load
    const float *s = src + (ob * B * w.inC + i) * 9;
    const int64_t step = w.inC * 9;
    for (int kl = 0; kl < 9; ++kl)
#pragma omp simd
      for (int64_t o = 0; o < B; ++o)
        g[kl][o] = s[o * step + kl];
  } else {
    for (int64_t o = 0; o < B; ++o) {
      const int64_t oc = ob * B + o;
      const bool real = oc < w.outC && i < w.inC;
      const float *s = src + (oc * w.inC + i) * 9;
      for (int kl = 0; kl < 9; ++kl)
        g[kl][o] = real ? s[kl] : 0.f;
    }
  }
  for (int a = 0; a < A; ++a) // t = G g
    for (int l = 0; l < 3; ++l) {
      const float c0 = w.G[a][0], c1 = w.G[a][1], c2 = w.G[a][2];
#pragma omp simd
      for (int64_t o = 0; o < B; ++o)
        t[a][l][o] = c0 * g[l][o] + c1 * g[3 + l][o] + c2 * g[6 + l][o];
    }
  for (int a = 0; a < A; ++a) // U = t G^T, stored straight into the destination
    for (int b = 0; b < A; ++b) {
      const float c0 = w.G[b][0], c1 = w.G[b][1], c2 = w.G[b][2];
      float *u = out + (a * A + b) * w.tileStride;
#pragma omp simd
      for (int64_t o = 0; o < B; ++o)
        u[o] = c0 * t[a][0][o] + c1 * t[a][1][o] + c2 * t[a][2][o];
    }
}

} // namespace

std::optional<WinogradWeightLayout> planWinogradWeights(const dnnl::memory::desc &from,
                                                        const dnnl::memory::desc &to) {
  const dnnl_memory_desc_t &f = from.data, &t = to.data;
  if (t.format_kind != dnnl_format_kind_wino || f.format_kind != dnnl_blocked ||
      f.data_type != dnnl_f32 || t.data_type != dnnl_f32 || f.ndims != 4 || f.offset0 != 0 ||
      f.format_desc.blocking.inner_nblks != 0 || f.dims[2] != 3 || f.dims[3] != 3)
    return std::nullopt;
  int64_t stride = 1; // dense row-major OIHW
  for (int d = 3; d >= 0; --d) {
    if (f.dims[d] > 1 && f.format_desc.blocking.strides[d] != stride) return std::nullopt;
    stride *= f.dims[d];
  }
  const dnnl_wino_desc_t &d = t.format_desc.wino_desc;
  WinogradWeightLayout w;
  w.format = d.wino_format;
  const bool tile4 = w.format == dnnl_wino_wei_OBaaIBOIio && d.alpha == 6;
  const bool tile2 =
      (w.format == dnnl_wino_wei_aaOBiOo || w.format == dnnl_wino_wei_aaOio) && d.alpha == 4;
  if (d.r != 3 || d.adj_scale != 1.f || !(tile4 || tile2)) return std::nullopt;
  w.alpha = d.alpha;
  w.oc = d.oc;
  w.ic = d.ic;
  w.ocBlock = d.oc_block;
  w.icBlock = d.ic_block;
  w.oc2Block = w.format == dnnl_wino_wei_aaOio ? 1 : d.oc2_block;
  w.ic2Block = tile4 ? d.ic2_block : 1;
  w.outC = f.dims[0];
  w.inC = f.dims[1];
  if (w.ocBlock <= 0 || w.ocBlock > kMaxBlock || w.icBlock <= 0 || w.oc2Block <= 0 ||
      w.ic2Block <= 0 || w.oc % w.ocBlock != 0 || w.ic % w.icBlock != 0 ||
      (w.oc / w.ocBlock) % w.oc2Block != 0 || (w.ic / w.icBlock) % w.ic2Block != 0 ||
      w.outC > w.oc || w.inC > w.ic ||
      static_cast<int64_t>(to.get_size()) !=
          int64_t(w.alpha) * w.alpha * w.oc * w.ic * int64_t(sizeof(float)))
    return std::nullopt;
  for (int a = 0; a < w.alpha; ++a)
    for (int k = 0; k < 3; ++k)
      w.G[a][k] = static_cast<float>(tile4 ? kG4x3[a][k] : kG2x3[a][k]);
  w.tileStride = offsetOf(w, 0, 1, 0, 0);
  return w;
}

void transformWinogradWeights(const WinogradWeightLayout &w, const float *src, float *dst) {
  const int64_t blocks = w.oc / w.ocBlock, work = blocks * w.ic;
  // Split over threads as the compiled kernels are (parallel.cpp's minimum work per thread; one
  // range in a forked child, where OpenMP's pool is gone).
  parallelRanges(work, parallelParts(work, w.alpha * w.alpha * w.ocBlock),
                 [&](int64_t begin, int64_t end) {
                   for (int64_t job = begin; job < end; ++job)
                     transformBlock(w, src, dst, job / w.ic, job % w.ic);
                 });
}

} // namespace xjit::backend::dnnl_kernels
