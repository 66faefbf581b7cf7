// Dropout's noise from PyTorch's CPU generator state: PyTorch's bernoulli_(p) on a CPU tensor
// draws element by element (cpu_serial_kernel: two mt19937 words, a double, a compare; ~6 ns an
// element), which made the noise a tenth of a BERT fine-tuning step. The same words come out of
// a whole-state mt19937 twist and temper in vector loops, and the compare needs only integers.
#include "dropout_draws.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

namespace xjit::frontend {
namespace {

constexpr int kN = 624, kM = 397; // mt19937's state words and twist offset
constexpr uint32_t kMatrixA = 0x9908b0dfu, kUpper = 0x80000000u, kLower = 0x7fffffffu;

// torch.get_rng_state()'s CPU layout (CPUGeneratorImplStateLegacy): u64 initial seed, i32
// left, i32 seeded, u64 next, u64 state[624], then the normal-sample cache (left untouched).
constexpr size_t kLeftAt = 8, kNextAt = 16, kStateAt = 24;

inline uint32_t twist(uint32_t u, uint32_t v) {
  return (((u & kUpper) | (v & kLower)) >> 1) ^ (-(v & 1u) & kMatrixA);
}

/// mt19937's next_state over the whole state, in the order PyTorch's engine runs it: the first
/// loop reads only words it has not written yet, the second reads words written 227 before.
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
void twistState(uint32_t *p) {
  for (int i = 0; i < kN - kM; ++i)
    p[i] = p[i + kM] ^ twist(p[i], p[i + 1]);
  for (int i = kN - kM; i < kN - 1; ++i)
    p[i] = p[i + kM - kN] ^ twist(p[i], p[i + 1]);
  p[kN - 1] = p[kM - 1] ^ twist(p[kN - 1], p[0]);
}

/// mt19937's output: n state words tempered into dst.
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
void temper(const uint32_t *src, uint32_t *dst, int n) {
  for (int i = 0; i < n; ++i) {
    uint32_t y = src[i];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    dst[i] = y;
  }
}

/// Element j from words 2j (high) and 2j+1 (low): at::uniform_real_distribution<double> takes
/// the low 53 bits of (hi << 32 | lo) times 2^-53, and bernoulli keeps it when below p; that is
/// the integer compare m < ceil(p * 2^53), exact.
template <class T>
inline __attribute__((always_inline)) void keepBelowAs(const uint32_t *words, int64_t pairs,
                                                       uint64_t threshold, T scale, T *out) {
  constexpr uint64_t kMask53 = (uint64_t(1) << 53) - 1;
  for (int64_t j = 0; j < pairs; ++j) {
    const uint64_t m = ((uint64_t(words[2 * j]) << 32) | words[2 * j + 1]) & kMask53;
    out[j] = m < threshold ? scale : T(0);
  }
}

/// keepBelowAs for f32 or f64 results (one function: target_clones takes no templates).
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
void keepBelow(const uint32_t *words, int64_t pairs, uint64_t threshold, double scale, void *out,
               bool f64) {
  if (f64)
    keepBelowAs(words, pairs, threshold, scale, static_cast<double *>(out));
  else
    keepBelowAs(words, pairs, threshold, static_cast<float>(scale), static_cast<float *>(out));
}

template <class T>
bool draw(uint8_t *bytes, size_t size, double keep, T scale, T *out, int64_t count) {
  if (size != kTorchCpuRngStateBytes || !(keep >= 0.0 && keep <= 1.0)) return false;
  int32_t left;
  uint64_t next;
  std::memcpy(&left, bytes + kLeftAt, sizeof left);
  std::memcpy(&next, bytes + kNextAt, sizeof next);
  // After a twist left + next == 625 (the engine's left counts down to 1, next up); a fresh
  // seed has left == 1, next == 0. Anything else is not a state this code can continue.
  if (left < 1 || left > kN || (left != 1 && left + next != kN + 1)) return false;
  alignas(64) uint32_t state[kN];
  for (int i = 0; i < kN; ++i) {
    uint64_t w;
    std::memcpy(&w, bytes + kStateAt + 8 * i, sizeof w);
    state[i] = static_cast<uint32_t>(w);
  }
  // ceil(keep * 2^53): keep * 2^53 is exact (a power of two), at most 2^53.
  const double scaled = keep * 9007199254740992.0;
  uint64_t threshold = static_cast<uint64_t>(scaled);
  if (static_cast<double>(threshold) < scaled) ++threshold;

  alignas(64) uint32_t words[kN + 2];
  int64_t done = 0;
  int carried = 0; // a word drawn before a twist whose pair comes after it (words[0])
  while (done < count) {
    if (left == 1) { // the engine twists when its left counts down to 0
      twistState(state);
      left = kN + 1;
      next = 0;
    }
    const int64_t want = 2 * (count - done) - carried;
    const int take = static_cast<int>(std::min<int64_t>(left - 1, want));
    temper(state + next, words + carried, take);
    next += take;
    left -= take;
    const int64_t have = carried + take;
    keepBelow(words, have / 2, threshold, scale, out + done, std::is_same_v<T, double>);
    done += have / 2;
    carried = static_cast<int>(have & 1);
    if (carried) words[0] = words[have - 1];
  }
  std::memcpy(bytes + kLeftAt, &left, sizeof left);
  std::memcpy(bytes + kNextAt, &next, sizeof next);
  for (int i = 0; i < kN; ++i) {
    const uint64_t w = state[i];
    std::memcpy(bytes + kStateAt + 8 * i, &w, sizeof w);
  }
  return true;
}

} // namespace

bool drawBernoulliNoise(uint8_t *state, size_t stateBytes, double keep, float scale, float *out,
                        int64_t count) {
  return draw(state, stateBytes, keep, scale, out, count);
}

bool drawBernoulliNoise(uint8_t *state, size_t stateBytes, double keep, double scale, double *out,
                        int64_t count) {
  return draw(state, stateBytes, keep, scale, out, count);
}

} // namespace xjit::frontend
