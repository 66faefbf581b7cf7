// Host tensors and f16/bf16 conversions.
#include "xjit/ir/tensor.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#if defined(__SSE2__)
#include <xmmintrin.h>
#endif

namespace xjit {

namespace {
constinit std::atomic<LargeStorageAllocator> gLargeStorageAllocator{nullptr};
} // namespace

void setLargeStorageAllocator(LargeStorageAllocator allocator) {
  gLargeStorageAllocator.store(allocator);
}

Storage::Storage(int64_t nbytes) : nbytes_(nbytes) {
  if (nbytes >= (int64_t(1) << 20))
    if (LargeStorageAllocator large = gLargeStorageAllocator.load()) {
      data_ = large(nbytes, &release_);
      if (data_) {
        std::memset(data_, 0, static_cast<size_t>(nbytes));
        return;
      }
    }
  // Round up so aligned_alloc's size is a multiple of the alignment; never zero bytes.
  size_t n = static_cast<size_t>(std::max<int64_t>(nbytes, 1) + 63) / 64 * 64;
  data_ = std::aligned_alloc(64, n);
  if (!data_) throw std::bad_alloc();
  std::memset(data_, 0, n);
  release_ = [p = data_] { std::free(p); };
}

Storage::Storage(void *data, int64_t nbytes, std::function<void()> release)
    : data_(data), nbytes_(nbytes), release_(std::move(release)) {}

Storage::~Storage() {
  if (release_) release_();
}

std::vector<int64_t> contiguousStrides(const std::vector<int64_t> &sizes) {
  std::vector<int64_t> strides(sizes.size());
  int64_t s = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    strides[i] = s;
    s *= std::max<int64_t>(sizes[i], 1);
  }
  return strides;
}

Tensor Tensor::empty(DType dtype, std::vector<int64_t> sizes) {
  int64_t n = 1;
  for (auto s : sizes) {
    if (s < 0) throw std::invalid_argument("negative tensor size");
    n *= s;
  }
  auto storage = std::make_shared<Storage>(n * dtypeSize(dtype));
  auto strides = contiguousStrides(sizes);
  return Tensor(std::move(storage), dtype, std::move(sizes), std::move(strides), 0);
}

Tensor::Tensor(std::shared_ptr<Storage> storage, DType dtype, std::vector<int64_t> sizes,
               std::vector<int64_t> strides, int64_t offset)
    : storage_(std::move(storage)), dtype_(dtype), sizes_(std::move(sizes)),
      strides_(std::move(strides)), offset_(offset) {
  if (sizes_.size() != strides_.size()) throw std::invalid_argument("sizes/strides rank mismatch");
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (auto s : sizes_)
    n *= s;
  return n;
}

bool Tensor::isContiguous() const {
  int64_t expected = 1;
  for (size_t i = sizes_.size(); i-- > 0;) {
    if (sizes_[i] == 1) continue;
    if (sizes_[i] == 0) return true;
    if (strides_[i] != expected) return false;
    expected *= sizes_[i];
  }
  return true;
}

char *Tensor::data() const {
  return static_cast<char *>(storage_->data()) + offset_ * dtypeSize(dtype_);
}

int64_t Tensor::elementOffset(int64_t linear) const {
  int64_t off = offset_;
  for (size_t i = sizes_.size(); i-- > 0;) {
    int64_t s = sizes_[i];
    off += (linear % s) * strides_[i];
    linear /= s;
  }
  return off;
}

// ---- f16 / bf16 ----
uint16_t floatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) // inf or nan
    return static_cast<uint16_t>(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0u));
  if (absx >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u); // overflow -> inf
  if (absx < 0x38800000u) {                                              // subnormal or zero
    // Scale into the subnormal range with the FPU's round-to-nearest-even.
    float a;
    std::memcpy(&a, &absx, 4);
    float scaled = a * 16777216.0f; // 2^24: one unit = smallest f16 subnormal
    auto q = static_cast<uint32_t>(std::nearbyint(scaled));
    return static_cast<uint16_t>(sign | q);
  }
  uint32_t mant = absx & 0x7fffffu;
  uint32_t exp = (absx >> 23) - 127 + 15;
  uint32_t h = (exp << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h; // carries into exp correctly
  return static_cast<uint16_t>(sign | h);
}

float halfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t x;
  if (exp == 0) {
    float v = std::ldexp(static_cast<float>(mant), -24);
    std::memcpy(&x, &v, 4);
    x |= sign;
  } else if (exp == 31) {
    x = sign | 0x7f800000u | (mant << 13);
  } else {
    x = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

uint16_t floatToBFloat16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u); // nan
  uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

float bfloat16ToFloat(uint16_t b) {
  uint32_t x = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

// ---- element access ----
namespace {
template <class T> T load(const char *base, int64_t off) {
  T v;
  std::memcpy(&v, base + off * static_cast<int64_t>(sizeof(T)), sizeof(T));
  return v;
}
template <class T> void store(char *base, int64_t off, T v) {
  std::memcpy(base + off * static_cast<int64_t>(sizeof(T)), &v, sizeof(T));
}
// Float -> integer like a C cast, but defined for out-of-range values (torch's result there is
// platform-specific; we saturate NaN to 0 and wrap through int64).
int64_t floatToInt64(double v) {
  if (std::isnan(v)) return 0;
  if (v >= 9.2233720368547758e18) return INT64_MAX;
  if (v <= -9.2233720368547758e18) return INT64_MIN;
  return static_cast<int64_t>(v);
}
} // namespace

double loadDouble(DType dtype, const void *vbase, int64_t off) {
  const char *base = static_cast<const char *>(vbase);
  switch (dtype) {
  case DType::F64: return load<double>(base, off);
  case DType::F32: return load<float>(base, off);
  case DType::F16: return halfToFloat(load<uint16_t>(base, off));
  case DType::BF16: return bfloat16ToFloat(load<uint16_t>(base, off));
  default: return static_cast<double>(loadInt(dtype, vbase, off));
  }
}

int64_t loadInt(DType dtype, const void *vbase, int64_t off) {
  const char *base = static_cast<const char *>(vbase);
  switch (dtype) {
  case DType::Bool: return load<uint8_t>(base, off) != 0;
  case DType::U8: return load<uint8_t>(base, off);
  case DType::I8: return load<int8_t>(base, off);
  case DType::I16: return load<int16_t>(base, off);
  case DType::I32: return load<int32_t>(base, off);
  case DType::I64: return load<int64_t>(base, off);
  default: return floatToInt64(loadDouble(dtype, vbase, off));
  }
}

void storeDouble(DType dtype, void *vbase, int64_t off, double v) {
  char *base = static_cast<char *>(vbase);
  switch (dtype) {
  case DType::F64: return store<double>(base, off, v);
  case DType::F32: return store<float>(base, off, static_cast<float>(v));
  // 16-bit formats round through f32, as PyTorch rounds its f32 intermediate.
  case DType::F16: return store<uint16_t>(base, off, floatToHalf(static_cast<float>(v)));
  case DType::BF16: return store<uint16_t>(base, off, floatToBFloat16(static_cast<float>(v)));
  case DType::Bool: return store<uint8_t>(base, off, v != 0.0);
  default: return storeInt(dtype, vbase, off, floatToInt64(v));
  }
}

void storeInt(DType dtype, void *vbase, int64_t off, int64_t v) {
  char *base = static_cast<char *>(vbase);
  switch (dtype) {
  case DType::Bool: return store<uint8_t>(base, off, v != 0);
  case DType::U8: return store<uint8_t>(base, off, static_cast<uint8_t>(v));
  case DType::I8: return store<int8_t>(base, off, static_cast<int8_t>(v));
  case DType::I16: return store<int16_t>(base, off, static_cast<int16_t>(v));
  case DType::I32: return store<int32_t>(base, off, static_cast<int32_t>(v));
  case DType::I64: return store<int64_t>(base, off, v);
  default: return storeDouble(dtype, vbase, off, static_cast<double>(v));
  }
}

double Tensor::getDouble(int64_t i) const {
  return loadDouble(dtype_, storage_->data(), elementOffset(i));
}
int64_t Tensor::getInt(int64_t i) const {
  return loadInt(dtype_, storage_->data(), elementOffset(i));
}
void Tensor::setDouble(int64_t i, double v) const {
  storeDouble(dtype_, storage_->data(), elementOffset(i), v);
}
void Tensor::setInt(int64_t i, int64_t v) const {
  storeInt(dtype_, storage_->data(), elementOffset(i), v);
}

Tensor Tensor::view(std::vector<int64_t> sizes, std::vector<int64_t> strides,
                    int64_t offset) const {
  return Tensor(storage_, dtype_, std::move(sizes), std::move(strides), offset);
}

namespace {

/// One e0 x e1 tile of tiledTransposeCopy: source rows (index a) have unit stride and columns
/// (b) stride ss1; destination rows stride ds0 and columns unit stride. 4-byte elements go by
/// 4x4 blocks transposed in SSE registers (bit moves and shuffles: any 4-byte dtype, NaN
/// payloads kept), the rest one element at a time.
template <size_t B>
void copyTransposedTile(char *d, const char *s, int64_t e0, int64_t e1, int64_t ds0, int64_t ss1) {
  auto one = [&](int64_t a, int64_t b) {
    std::memcpy(d + (a * ds0 + b) * int64_t(B), s + (a + b * ss1) * int64_t(B), B);
  };
  int64_t a = 0;
#if defined(__SSE2__)
  if constexpr (B == 4) {
    for (; a + 4 <= e0; a += 4) {
      int64_t b = 0;
      for (; b + 4 <= e1; b += 4) {
        const float *sp = reinterpret_cast<const float *>(s) + a + b * ss1;
        __m128 c0 = _mm_loadu_ps(sp), c1 = _mm_loadu_ps(sp + ss1);
        __m128 c2 = _mm_loadu_ps(sp + 2 * ss1), c3 = _mm_loadu_ps(sp + 3 * ss1);
        _MM_TRANSPOSE4_PS(c0, c1, c2, c3); // columns b..b+3 -> rows a..a+3
        float *dp = reinterpret_cast<float *>(d) + a * ds0 + b;
        _mm_storeu_ps(dp, c0);
        _mm_storeu_ps(dp + ds0, c1);
        _mm_storeu_ps(dp + 2 * ds0, c2);
        _mm_storeu_ps(dp + 3 * ds0, c3);
      }
      for (; b < e1; ++b)
        for (int64_t k = 0; k < 4; ++k)
          one(a + k, b);
    }
  }
#endif
  for (; a < e0; ++a)
    for (int64_t b = 0; b < e1; ++b)
      one(a, b);
}

/// stridedCopy when the source's unit-stride dim is the second last and the destination's the
/// last (a transposition): those two dims are copied in 32x32 tiles, so that the source lines
/// (and pages) a tile reads stay in cache while the tile's rows use them; a plain row-by-row
/// copy reads one line, and at 2048 wide one page, per element. The other dims by an odometer.
template <size_t B>
void tiledTransposeCopy(char *dst, const char *src, const std::vector<int64_t> &sizes,
                        const std::vector<int64_t> &dstStrides,
                        const std::vector<int64_t> &srcStrides) {
  constexpr int64_t kTile = 32;
  size_t rank = sizes.size();
  int64_t n0 = sizes[rank - 2], n1 = sizes[rank - 1];
  int64_t ds0 = dstStrides[rank - 2], ds1 = dstStrides[rank - 1];
  int64_t ss0 = srcStrides[rank - 2], ss1 = srcStrides[rank - 1];
  std::vector<int64_t> idx(rank - 2, 0);
  int64_t dOff = 0, sOff = 0; // elements
  while (true) {
    for (int64_t i0 = 0; i0 < n0; i0 += kTile)
      for (int64_t i1 = 0; i1 < n1; i1 += kTile)
        copyTransposedTile<B>(dst + (dOff + i0 * ds0 + i1 * ds1) * int64_t(B),
                              src + (sOff + i0 * ss0 + i1 * ss1) * int64_t(B),
                              std::min(kTile, n0 - i0), std::min(kTile, n1 - i1), ds0, ss1);
    size_t k = rank - 2;
    while (k-- > 0) {
      dOff += dstStrides[k];
      sOff += srcStrides[k];
      if (++idx[k] < sizes[k]) break;
      dOff -= dstStrides[k] * sizes[k];
      sOff -= srcStrides[k] * sizes[k];
      idx[k] = 0;
    }
    if (k == size_t(-1)) return;
  }
}

/// dst[i] = src[i] over a strided nest (strides in elements, shared sizes): the inner dim as a
/// tight loop of fixed-size element copies, the outer dims by an odometer. Layout conversions
/// (contiguous of a permuted view, reshape of a transposed one) go through here: the generic
/// per-element path computes each index by division and converts through double, ~20x slower.
template <size_t B>
void stridedCopy(char *dst, const char *src, std::vector<int64_t> sizes,
                 std::vector<int64_t> dstStrides, std::vector<int64_t> srcStrides) {
  // A short inner dim (NCHW -> NHWC of an RGB image: 3 channels) would make the inner loop
  // three elements long: the dim read with the smallest stride goes innermost instead (each
  // element is copied once whatever the order).
  if (size_t r = sizes.size(); r >= 2 && sizes[r - 1] < 16) {
    size_t best = r - 1;
    for (size_t k = 0; k + 1 < r; ++k)
      if (sizes[k] >= 16 && std::abs(srcStrides[k]) < std::abs(srcStrides[best])) best = k;
    for (auto *v : {&sizes, &dstStrides, &srcStrides}) {
      int64_t moved = (*v)[best];
      v->erase(v->begin() + static_cast<std::ptrdiff_t>(best));
      v->push_back(moved);
    }
  }
  size_t rank = sizes.size();
  if (rank == 0) {
    std::memcpy(dst, src, B);
    return;
  }
  // A transposition: the source's unit-stride dim (not the last) moves next to the last (each
  // element is copied once whatever the order) and the two run in tiles.
  if (rank >= 2 && dstStrides[rank - 1] == 1 && srcStrides[rank - 1] != 1 &&
      sizes[rank - 1] >= 16) {
    for (size_t k = 0; k + 1 < rank; ++k) {
      if (srcStrides[k] != 1 || sizes[k] < 16) continue;
      for (auto *v : {&sizes, &dstStrides, &srcStrides}) {
        int64_t moved = (*v)[k];
        v->erase(v->begin() + static_cast<std::ptrdiff_t>(k));
        v->insert(v->end() - 1, moved);
      }
      return tiledTransposeCopy<B>(dst, src, sizes, dstStrides, srcStrides);
    }
  }
  int64_t inner = sizes[rank - 1];
  int64_t ds = dstStrides[rank - 1] * int64_t(B), ss = srcStrides[rank - 1] * int64_t(B);
  std::vector<int64_t> idx(rank, 0);
  int64_t dOff = 0, sOff = 0;
  while (true) {
    char *d = dst + dOff;
    const char *s = src + sOff;
    if (ds == int64_t(B) && ss == int64_t(B)) {
      std::memcpy(d, s, size_t(inner) * B);
    } else {
      for (int64_t i = 0; i < inner; ++i, d += ds, s += ss)
        std::memcpy(d, s, B);
    }
    size_t k = rank - 1;
    while (k-- > 0) {
      dOff += dstStrides[k] * int64_t(B);
      sOff += srcStrides[k] * int64_t(B);
      if (++idx[k] < sizes[k]) break;
      dOff -= dstStrides[k] * int64_t(B) * sizes[k];
      sOff -= srcStrides[k] * int64_t(B) * sizes[k];
      idx[k] = 0;
    }
    if (k == size_t(-1)) return;
  }
}

} // namespace

void Tensor::copyFrom(const Tensor &src) const {
  int64_t n = numel();
  if (src.numel() != n) throw std::invalid_argument("copyFrom: element count mismatch");
  // Same dtype and either the same shape or a contiguous destination (elements in row-major
  // order of src): a raw strided copy.
  if (n > 0 && src.dtype_ == dtype_ && (src.sizes_ == sizes_ || isContiguous())) {
    std::vector<int64_t> dstStrides =
        src.sizes_ == sizes_ ? strides_ : contiguousStrides(src.sizes_);
    char *d = static_cast<char *>(storage_->data()) + offset_ * dtypeSize(dtype_);
    const char *s =
        static_cast<const char *>(src.storage_->data()) + src.offset_ * dtypeSize(dtype_);
    switch (dtypeSize(dtype_)) {
    case 1: return stridedCopy<1>(d, s, src.sizes_, dstStrides, src.strides_);
    case 2: return stridedCopy<2>(d, s, src.sizes_, dstStrides, src.strides_);
    case 4: return stridedCopy<4>(d, s, src.sizes_, dstStrides, src.strides_);
    case 8: return stridedCopy<8>(d, s, src.sizes_, dstStrides, src.strides_);
    default: break;
    }
  }
  bool viaFloat = isFloating(src.dtype_) && isFloating(dtype_);
  bool fromFloat = isFloating(src.dtype_);
  for (int64_t i = 0; i < n; ++i) {
    if (viaFloat || fromFloat)
      setDouble(i, src.getDouble(i));
    else
      setInt(i, src.getInt(i));
  }
}

Tensor Tensor::contiguousCopy() const {
  Tensor out = empty(dtype_, sizes_);
  if (isContiguous() && numel() > 0) {
    std::memcpy(out.data(), data(), static_cast<size_t>(numel() * dtypeSize(dtype_)));
    return out;
  }
  out.copyFrom(*this);
  return out;
}

Tensor Tensor::to(DType dtype) const {
  Tensor out = empty(dtype, sizes_);
  out.copyFrom(*this);
  return out;
}

bool Tensor::equals(const Tensor &o) const {
  if (dtype_ != o.dtype_ || sizes_ != o.sizes_) return false;
  for (int64_t i = 0, n = numel(); i < n; ++i) {
    if (isFloating(dtype_)) {
      double a = getDouble(i), b = o.getDouble(i);
      if (!(a == b || (std::isnan(a) && std::isnan(b)))) return false;
    } else if (getInt(i) != o.getInt(i)) {
      return false;
    }
  }
  return true;
}

} // namespace xjit
