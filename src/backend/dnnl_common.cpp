// Shared pieces of the oneDNN library kernels: engine, strided memory, post-ops, weight packing.
#include "dnnl_common.h"

#include "xjit/backend/content_tags.h"
#include "xjit/backend/jit.h" // parallelParts, parallelRanges

#include "ops/op_util.h"
#include "xjit/ir/op_registry.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <mutex>
#include <omp.h>
#include <unordered_map>

namespace xjit::backend::dnnl_kernels {

dnnl::engine &cpuEngine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

dnnl::stream &threadStream() {
  thread_local dnnl::stream s(cpuEngine());
  return s;
}

std::optional<memory::data_type> dnnlType(DType d) {
  switch (d) {
  case DType::F32: return memory::data_type::f32;
  case DType::BF16: return memory::data_type::bf16;
  default: return std::nullopt;
  }
}

Tensor allocateOutput(DType d, const Dims &sizes) {
  int64_t n = 1;
  for (int64_t s : sizes)
    n *= s;
  int64_t nbytes = std::max<int64_t>(n * dtypeSize(d), 1);
  size_t rounded = (static_cast<size_t>(nbytes) + 63) / 64 * 64;
  void *p = std::aligned_alloc(64, rounded);
  if (!p)
    throw InternalKernelError("out of memory allocating " + std::to_string(nbytes) + " bytes");
  auto storage = std::make_shared<Storage>(p, nbytes, [p] { std::free(p); });
  return Tensor(std::move(storage), d, sizes, contiguousStrides(sizes));
}

memory::desc stridedDesc(const Dims &dims, const Dims &strides, memory::data_type dt) {
  memory::dims d(dims.begin(), dims.end()), s(strides.begin(), strides.end());
  // The stride of a size-1 dim does not matter to the data, but oneDNN's implementations
  // recognize layouts by exact strides. Tensors give size-1 dims the stride of their layout
  // (kept); dims inserted by a DimMap or broadcast (stride 0) get the dense value: outermost
  // when only size-1 dims precede them, else just outside the next dim, so [2,1,3] with
  // strides [3,0,1] reads as row-major and a leading unit batch does not break NHWC.
  int64_t outer = 1;
  for (size_t i = 0; i < s.size(); ++i)
    outer = std::max(outer, s[i] * std::max<int64_t>(d[i], 1));
  size_t lead = 0; // dims [0, lead) all have size 1
  while (lead < d.size() && d[lead] == 1)
    ++lead;
  for (size_t i = s.size(); i-- > 0;)
    if (d[i] == 1 && s[i] <= 0)
      s[i] = i < lead ? outer : i + 1 < s.size() ? s[i + 1] * std::max<int64_t>(d[i + 1], 1) : 1;
  return memory::desc(d, dt, s);
}

memory wrap(const memory::desc &md, const Tensor &t) {
  return memory(md, cpuEngine(), static_cast<void *>(t.data()));
}

memory reorderedCopy(const memory &src, const memory::desc &md) {
  memory dst(md, cpuEngine());
  dnnl::reorder prim(dnnl::reorder::primitive_desc(src, dst, userScratchpad()));
  std::unordered_map<int, memory> args = {{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, dst}};
  execute(prim, args);
  return dst;
}

memory::desc denseDesc(const Dims &dims, memory::data_type dt) {
  return stridedDesc(dims, contiguousStrides(dims), dt);
}

bool isReferenceImpl(const dnnl::primitive_desc_base &pd) {
  return std::string(pd.impl_info_str()).rfind("ref", 0) == 0;
}

dnnl::primitive_attr userScratchpad(dnnl::primitive_attr attr) {
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

void execute(const dnnl::primitive &prim, std::unordered_map<int, memory> &args) {
  // The scratchpad is the caller's (every primitive is made with userScratchpad): this build of
  // oneDNN shares its library-managed scratchpad between primitives, so two threads running
  // compiled graphs at once corrupted each other's matmuls. One buffer per thread suffices:
  // execution is synchronous.
  const dnnl_memory_desc_t *md =
      dnnl_primitive_desc_query_md(prim.get_primitive_desc(), dnnl_query_scratchpad_md, 0);
  if (md && md->ndims > 0) {
    // Not a zero-filled std::vector: pages a primitive leaves untouched stay unmapped.
    void *scratch = threadScratch(ScratchSlot::Scratchpad, dnnl_memory_desc_get_size(md));
    args[DNNL_ARG_SCRATCHPAD] = memory(memory::desc(*md), cpuEngine(), scratch);
  }
  dnnl::stream &s = threadStream();
  prim.execute(s, args);
  s.wait();
}

Densify::Densify(const memory::desc &from, const memory::desc &to)
    : active_(true), from_(from), to_(to),
      prim_(dnnl::reorder::primitive_desc(cpuEngine(), from, cpuEngine(), to, userScratchpad())),
      winograd_(planWinogradWeights(from, to)) {}

void Densify::reorder(const Tensor &t, const memory &to) const {
  if (winograd_) {
    transformWinogradWeights(*winograd_, reinterpret_cast<const float *>(t.data()),
                             static_cast<float *>(to.get_data_handle()));
    return;
  }
  std::unordered_map<int, memory> args = {{DNNL_ARG_FROM, wrap(from_, t)}, {DNNL_ARG_TO, to}};
  execute(prim_, args);
}

void *threadScratch(ScratchSlot slot, size_t bytes) {
  struct Buffer {
    std::unique_ptr<char, decltype(&std::free)> data{nullptr, &std::free};
    size_t size = 0;
  };
  thread_local std::array<Buffer, static_cast<size_t>(ScratchSlot::Count)> buffers;
  Buffer &b = buffers[static_cast<size_t>(slot)];
  if (!b.data || b.size < bytes) {
    size_t rounded = std::max<size_t>((bytes + 63) / 64 * 64, 64);
    b.data.reset(static_cast<char *>(std::aligned_alloc(64, rounded)));
    if (!b.data) throw std::bad_alloc();
    b.size = rounded;
  }
  return b.data.get();
}

memory Densify::intoScratch(const Tensor &t, ScratchSlot slot) const {
  memory to(to_, cpuEngine(), threadScratch(slot, to_.get_size()));
  reorder(t, to);
  return to;
}

memory Densify::intoNew(const Tensor &t) const {
  memory to(to_, cpuEngine());
  reorder(t, to);
  return to;
}

Tensor Densify::operator()(const Tensor &t, DType dt) const {
  Tensor out = allocateOutput(dt, {static_cast<int64_t>(to_.get_size()) / dtypeSize(dt)});
  reorder(t, wrap(to_, out));
  return out;
}

bool DimMap::apply(Dims &sizes, Dims &strides) const {
  for (int p : insertUnit) {
    sizes.insert(sizes.begin() + p, 1);
    strides.insert(strides.begin() + p, 0);
  }
  if (!perm.empty()) {
    Dims s, st;
    for (int i : perm) {
      s.push_back(sizes[static_cast<size_t>(i)]);
      st.push_back(strides[static_cast<size_t>(i)]);
    }
    sizes = std::move(s);
    strides = std::move(st);
  }
  if (mergeLeading > 1) {
    size_t k = static_cast<size_t>(mergeLeading);
    // Merging needs each outer dim to step over the whole inner run (size-1 dims are free);
    // broadcast dims (stride 0) merge only with other broadcast dims.
    int64_t size = 1, stride = 0;
    bool any = false, allZero = true;
    for (size_t i = k; i-- > 0;) {
      if (sizes[i] == 1) continue;
      if (!any) {
        stride = strides[i];
        allZero = stride == 0;
        any = true;
      } else if (allZero ? strides[i] != 0 : strides[i] != stride * size) {
        return false;
      }
      size *= sizes[i];
    }
    sizes.erase(sizes.begin(), sizes.begin() + static_cast<ptrdiff_t>(k));
    strides.erase(strides.begin(), strides.begin() + static_cast<ptrdiff_t>(k));
    sizes.insert(sizes.begin(), size);
    strides.insert(strides.begin(), allZero ? 0 : stride);
  }
  return true;
}

DimMap spatialMap(size_t nd, bool unbatched, bool channelsLast) {
  DimMap m;
  if (unbatched) m.insertUnit.push_back(0);
  if (channelsLast) {
    int r = static_cast<int>(nd) + 2;
    m.perm = {0, r - 1};
    for (int i = 1; i < r - 1; ++i)
      m.perm.push_back(i);
  }
  return m;
}

bool isDense(const Tensor &t) {
  int64_t expect = 1;
  for (int64_t i = t.rank(); i-- > 0;) {
    if (t.size(i) == 1) continue;
    if (t.strides()[static_cast<size_t>(i)] != expect) return false;
    expect *= t.size(i);
  }
  return true;
}

// ---- operands ----

Tensor tensorOf(const Source &s, std::span<const RtValue> in) {
  if (!s.present()) return {};
  const RtValue &v = s.get(in);
  return v.isTensor() ? v.tensor() : Tensor();
}

memory PackedWeights::get(const memory::desc &userDesc, const memory::desc &want) const {
  std::lock_guard lock(mu_);
  for (auto &[md, mem] : packed_)
    if (md == want) return mem;
  memory user(userDesc, cpuEngine(), static_cast<void *>(value_.data()));
  memory packed = userDesc == want ? user : reorderedCopy(user, want);
  packed_.emplace_back(want, packed);
  return packed;
}

namespace {
std::atomic<uint64_t> gWeightPacks{0}, gWeightPackHits{0}, gWeightReorders{0}, gWeightsInPlace{0};
} // namespace

namespace {
/// The reordered copies of tagged weights, by tag (a tag names one tensor's contents), for the
/// whole process.
struct TaggedCopies {
  struct Packed {
    memory::desc from, to;
    memory packed;
  };
  std::mutex mu;
  std::unordered_map<uint64_t, std::vector<Packed>> byTag;

  static TaggedCopies &instance() {
    static TaggedCopies *copies = [] {
      onContentTagRetired([](uint64_t tag) {
        TaggedCopies &c = instance();
        std::vector<Packed> dropped; // freed outside the lock
        std::lock_guard lock(c.mu);
        if (auto it = c.byTag.find(tag); it != c.byTag.end()) {
          dropped = std::move(it->second);
          c.byTag.erase(it);
        }
      });
      return new TaggedCopies; // never destroyed: kernels may run during static destruction
    }();
    return *copies;
  }
  /// Under `mu`.
  const memory *find(uint64_t tag, const memory::desc &from, const memory::desc &to) const {
    auto it = byTag.find(tag);
    if (it == byTag.end()) return nullptr;
    for (const Packed &p : it->second)
      if (p.from == from && p.to == to) return &p.packed;
    return nullptr;
  }
};
} // namespace

namespace {
/// The process-wide copy of tagged weight `w` in the layout `reorder.to()`.
memory taggedCopy(uint64_t tag, const Tensor &w, const Densify &reorder) {
  TaggedCopies &copies = TaggedCopies::instance();
  {
    std::lock_guard lock(copies.mu);
    if (const memory *p = copies.find(tag, reorder.from(), reorder.to())) {
      gWeightPackHits.fetch_add(1, std::memory_order_relaxed);
      return *p;
    }
  }
  // Reordered outside the lock; a thread racing on the same tag makes an identical copy and
  // the first stored wins (the second looks again under the lock before storing).
  memory packed = reorder.intoNew(w);
  gWeightPacks.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard lock(copies.mu);
  if (const memory *p = copies.find(tag, reorder.from(), reorder.to())) return *p;
  copies.byTag[tag].push_back({reorder.from(), reorder.to(), packed});
  return packed;
}
} // namespace

void countWeightsInPlace() { gWeightsInPlace.fetch_add(1, std::memory_order_relaxed); }

memory runtimeWeights(const Tensor &w, const memory::desc &userDesc, const Densify &reorder) {
  if (!reorder) return wrap(userDesc, w);
  if (uint64_t tag = currentContentTag(w.data())) return taggedCopy(tag, w, reorder);
  gWeightReorders.fetch_add(1, std::memory_order_relaxed);
  return reorder.intoScratch(w, ScratchSlot::Weights);
}

WeightPackCounters weightPackTotals() {
  return {gWeightPacks.load(), gWeightPackHits.load(), gWeightReorders.load(),
          gWeightsInPlace.load()};
}

} // namespace xjit::backend::dnnl_kernels

namespace xjit::backend::dnnl_kernels {

// ---- post-ops ----

namespace {

/// Non-overlapping and without gaps: the elements fill exactly their span (size-1 dims and
/// their strides ignored).
bool isDenseLayout(const Dims &sizes, const Dims &strides) {
  std::vector<std::pair<int64_t, int64_t>> dims; // (stride, size) of the dims larger than 1
  for (size_t d = 0; d < sizes.size(); ++d)
    if (sizes[d] != 1) dims.emplace_back(strides[d], sizes[d]);
  std::sort(dims.begin(), dims.end());
  int64_t expected = 1;
  for (const auto &[stride, size] : dims) {
    if (stride != expected) return false;
    expected *= size;
  }
  return true;
}

/// The IR result's index space seen by a (broadcast) operand: sizes of the result, strides of
/// the operand (0 along broadcast dims), right-aligned as in broadcasting.
void broadcastView(const Tensor &t, const Dims &resultSizes, Dims &sizes, Dims &strides) {
  sizes = resultSizes;
  strides.assign(resultSizes.size(), 0);
  size_t lead = resultSizes.size() - static_cast<size_t>(t.rank());
  for (size_t i = 0; i < static_cast<size_t>(t.rank()); ++i)
    if (t.sizes()[i] != 1) strides[lead + i] = t.strides()[i];
}

} // namespace

BoundPostOps::BoundPostOps(const std::vector<PostOp> &ops, std::span<const RtValue> in,
                           const Dims &resultSizes, const DimMap &map, bool dense,
                           dnnl::post_ops &po, const memory::desc *dstLayout)
    : map_(map) {
  Dims dstSizes = resultSizes, dstStrides = contiguousStrides(resultSizes);
  if (!map.apply(dstSizes, dstStrides)) throw InternalKernelError("result dims cannot be mapped");
  for (size_t i = 0; i < ops.size(); ++i) {
    const PostOp &p = ops[i];
    if (!p.binary) {
      po.append_eltwise(1.0f, p.alg, p.alpha, p.beta);
      continue;
    }
    const RtValue &v = p.other.get(in);
    Binary b{static_cast<int>(i), p.other, {}, dense, resultSizes};
    if (!v.isTensor()) { // a Python scalar: one f32 element broadcast everywhere
      b.materialize = true;
      b.md = memory::desc(memory::dims(dstSizes.size(), 1), memory::data_type::f32,
                          memory::dims(dstSizes.size(), 1));
    } else {
      const Tensor &t = v.tensor();
      auto dt = dnnlType(t.dtype());
      if (!dt) b.materialize = true;
      Dims sizes, strides;
      broadcastView(t, resultSizes, sizes, strides);
      if (!b.materialize && t.numel() == 1) {
        sizes.assign(dstSizes.size(), 1);
        b.md = stridedDesc(sizes, Dims(sizes.size(), 1), *dt);
      } else if (!b.materialize && map.apply(sizes, strides)) {
        bool full = dstLayout && sizes == dstSizes && *dt == dstLayout->data_type();
        for (size_t d = 0; d < sizes.size(); ++d)
          if (strides[d] == 0) {
            sizes[d] = 1; // oneDNN broadcasts along size-1 dims
            full = full && dstSizes[d] == 1;
          }
        b.md = stridedDesc(sizes, strides, *dt);
        // oneDNN 2.6's matmul reads a binary operand with gaps between its elements as if it
        // were dense (x[:, :1] of a [2, 6, 8] tensor, batch stride 48 for [2, 1, 8]; fuzzer
        // seed 13421): such an operand is materialized.
        if (!isDenseLayout(sizes, strides)) b.materialize = true;
        if (dstLayout && full && b.md != *dstLayout) {
          b.toDstLayout = std::make_shared<const Densify>(b.md, *dstLayout);
          b.md = *dstLayout;
        }
      } else {
        b.materialize = true;
      }
      if (b.materialize && t.numel() == 1)
        b.md = memory::desc(memory::dims(dstSizes.size(), 1), memory::data_type::f32,
                            memory::dims(dstSizes.size(), 1));
      else if (b.materialize)
        b.md = stridedDesc(dstSizes, dstStrides, memory::data_type::f32);
    }
    po.append_binary(p.alg, b.md);
    binaries_.push_back(b);
  }
}

Tensor BoundPostOps::materialized(const Binary &b, std::span<const RtValue> in) const {
  const RtValue &v = b.src.get(in);
  if (!v.isTensor()) {
    Tensor t = allocateOutput(DType::F32, {1});
    *reinterpret_cast<float *>(t.data()) = static_cast<float>(v.toDouble());
    return t;
  }
  const Tensor &t = v.tensor();
  if (t.numel() == 1) {
    Tensor one = allocateOutput(DType::F32, {1});
    *reinterpret_cast<float *>(one.data()) = static_cast<float>(t.getDouble(0));
    return one;
  }
  // The operand expanded to the full result shape, contiguous, f32.
  Dims sizes, strides;
  broadcastView(t, b.resultSizes, sizes, strides);
  Tensor full = allocateOutput(DType::F32, b.resultSizes);
  full.copyFrom(t.view(sizes, strides, t.offset()));
  return full;
}

void BoundPostOps::bind(std::span<const RtValue> in, std::unordered_map<int, memory> &args,
                        std::vector<Tensor> &keep) const {
  for (const Binary &b : binaries_) {
    Tensor t;
    if (b.materialize) {
      t = materialized(b, in);
    } else {
      t = b.src.get(in).tensor();
      if (b.toDstLayout) t = (*b.toDstLayout)(t, t.dtype());
    }
    keep.push_back(t);
    args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(b.index) | DNNL_ARG_SRC_1] = wrap(b.md, t);
  }
}

bool eltwiseFor(const Op &op, PostOp &out) {
  using A = dnnl::algorithm;
  const std::string &n = op.name();
  auto set = [&](A a, double alpha = 0, double beta = 0) {
    out.binary = false;
    out.alg = a;
    out.alpha = static_cast<float>(alpha);
    out.beta = static_cast<float>(beta);
    return true;
  };
  constexpr double kInf = std::numeric_limits<double>::infinity();
  if (n == "relu") return set(A::eltwise_relu);
  if (n == "leaky_relu") return set(A::eltwise_relu, ops::attrFloat(op, "negative_slope"));
  if (n == "elu") return set(A::eltwise_elu, ops::attrFloat(op, "alpha"));
  if (n == "tanh") return set(A::eltwise_tanh);
  if (n == "sigmoid") return set(A::eltwise_logistic);
  if (n == "exp") return set(A::eltwise_exp);
  if (n == "log") return set(A::eltwise_log);
  if (n == "sqrt") return set(A::eltwise_sqrt);
  if (n == "abs") return set(A::eltwise_abs);
  if (n == "square") return set(A::eltwise_square);
  if (n == "neg") return set(A::eltwise_linear, -1.0, 0.0);
  if (n == "silu") return set(A::eltwise_swish, 1.0);
  if (n == "hardswish") return set(A::eltwise_hardswish);
  if (n == "relu6") return set(A::eltwise_clip_v2, 0.0, 6.0);
  if (n == "hardtanh")
    return set(A::eltwise_clip_v2, ops::attrFloat(op, "min_val"), ops::attrFloat(op, "max_val"));
  if (n == "clamp") {
    double lo = ops::hasAttrValue(op, "min") ? ops::attrFloat(op, "min") : -kInf;
    double hi = ops::hasAttrValue(op, "max") ? ops::attrFloat(op, "max") : kInf;
    if (lo > hi) return false; // torch gives max there; clip would give min
    return set(A::eltwise_clip_v2, lo, hi);
  }
  if (n == "gelu") {
    const std::string &a = ops::attrStr(op, "approximate");
    if (a == "none") return set(A::eltwise_gelu_erf);
    if (a == "tanh") return set(A::eltwise_gelu_tanh);
    return false;
  }
  return false;
}

bool dropsNaN(const PostOp &p) {
  using A = dnnl::algorithm;
  if (p.binary) return p.alg == A::binary_max || p.alg == A::binary_min;
  return (p.alg == A::eltwise_relu && p.alpha == 0) || p.alg == A::eltwise_clip ||
         p.alg == A::eltwise_clip_v2;
}

namespace {
/// Whether `t`'s elements fill one gap-free block of memory starting at `t.data()`, in some
/// dim order (contiguous, channels-last, any permutation): such a tensor can be scanned as a
/// flat array when the order does not matter.
bool fillsOneBlock(const Tensor &t) {
  std::vector<std::pair<int64_t, int64_t>> dims; // (stride, size) of the non-unit dims
  for (int64_t i = 0; i < t.rank(); ++i)
    if (t.size(i) != 1) dims.emplace_back(t.strides()[static_cast<size_t>(i)], t.size(i));
  std::sort(dims.begin(), dims.end());
  int64_t expect = 1;
  for (auto [stride, size] : dims) {
    if (stride != expect) return false;
    expect *= size;
  }
  return true;
}

/// Whether any of n elements is bad (`isBad(v)` true), split over threads for large tensors.
/// The scan runs before every call of a NaN-guarded kernel (max pooling, relu epilogues), so it
/// must cost a fraction of the kernel: ResNet-18's 3.2 MB pooling input took 0.7 ms element by
/// element. Flags OR-ed into a fixed number of lanes let -O2's SLP vectorizer turn the inner
/// loop into a few vector operations per 16 elements, with no early exit.
template <class T, class IsBad> bool anyBad(const T *p, int64_t n, IsBad isBad) {
  constexpr int64_t kLanes = 16;
  const int64_t blocks = n / kLanes;
  auto scanBlocks = [&](int64_t b0, int64_t b1) {
    uint32_t lanes[kLanes] = {};
    for (int64_t b = b0; b < b1; ++b)
      for (int64_t j = 0; j < kLanes; ++j)
        lanes[j] |= uint32_t(isBad(p[b * kLanes + j]));
    uint32_t all = 0;
    for (uint32_t v : lanes)
      all |= v;
    return all != 0;
  };
  bool any = false;
  // An OpenMP region costs ~0.3 us even when it runs on one thread: small scans (the rows of a
  // causal product's skipped part, thousands per call) stay out of it.
  if (blocks < (int64_t(1) << 15)) {
    any = scanBlocks(0, blocks);
  } else {
#pragma omp parallel reduction(|| : any)
    {
      const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
      any = scanBlocks(blocks * t / threads, blocks * (t + 1) / threads);
    }
  }
  for (int64_t i = blocks * kLanes; i < n; ++i)
    any = any || isBad(p[i]);
  return any;
}

/// Whether n elements of `dtype` (f32 or bf16) from p hold a NaN, or with !nanOnly an infinity.
bool spanHasNonFinite(const char *p, int64_t n, DType dtype, bool nanOnly) {
  if (dtype == DType::F32) {
    const auto *f = reinterpret_cast<const float *>(p);
    // NaN is unordered with itself; v - v is NaN (not 0) for an infinity too.
    return nanOnly ? anyBad(f, n, [](float v) { return v != v; })
                   : anyBad(f, n, [](float v) { return v - v != 0.f; });
  }
  const auto *h = reinterpret_cast<const uint16_t *>(p); // exponent all ones
  return nanOnly ? anyBad(h, n, [](uint16_t v) { return (v & 0x7fff) > 0x7f80; })
                 : anyBad(h, n, [](uint16_t v) { return (v & 0x7f80) == 0x7f80; });
}

/// spanHasNonFinite over n elements `step` apart (a column of a row-major block).
bool stridedHasNonFinite(const char *p, int64_t n, int64_t step, DType dtype, bool nanOnly) {
  bool any = false;
  if (dtype == DType::F32) {
    const auto *f = reinterpret_cast<const float *>(p);
    for (int64_t i = 0; i < n; ++i) {
      float v = f[i * step];
      any |= nanOnly ? v != v : v - v != 0.f;
    }
    return any;
  }
  const auto *h = reinterpret_cast<const uint16_t *>(p);
  for (int64_t i = 0; i < n; ++i) {
    uint16_t v = h[i * step];
    any |= nanOnly ? (v & 0x7fff) > 0x7f80 : (v & 0x7f80) == 0x7f80;
  }
  return any;
}

} // namespace

bool hasNonFinite(const Tensor &t, bool nanOnly) {
  if ((t.dtype() != DType::F32 && t.dtype() != DType::BF16) || t.numel() == 0) return false;
  if (fillsOneBlock(t)) // order does not matter: scan the memory block
    return spanHasNonFinite(t.data(), t.numel(), t.dtype(), nanOnly);
  // Else runs along the smallest stride (contiguous rows of a block of a matrix, the column of
  // one), one after another over the other dims: the dims by decreasing stride, the innermost
  // ones merged into the run where they lie back to back. A causal product scans ~3/4 of a
  // strided q/k/v operand per call in runs of 64: the runs go to the kernel threads when there
  // are enough elements, and a strided run is read in place (no per-element index arithmetic).
  std::vector<std::pair<int64_t, int64_t>> dims; // (stride, size) of the non-unit dims
  for (int64_t i = 0; i < t.rank(); ++i)
    if (t.size(i) != 1) dims.emplace_back(t.strides()[static_cast<size_t>(i)], t.size(i));
  std::sort(dims.begin(), dims.end(), std::greater<>());
  const int64_t step = dims.back().first; // of the run's elements
  int64_t run = dims.back().second;
  dims.pop_back();
  while (!dims.empty() && dims.back().first == step * run) {
    run *= dims.back().second;
    dims.pop_back();
  }
  const int64_t runs = t.numel() / run, elem = dtypeSize(t.dtype());
  auto offsetOf = [&dims](int64_t r) { // of run r, the innermost dim counting first
    int64_t offset = 0;
    for (size_t d = dims.size(); d-- > 0; r /= dims[d].second)
      offset += (r % dims[d].second) * dims[d].first;
    return offset;
  };
  auto scanRuns = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const char *p = t.data() + offsetOf(r) * elem;
      if (step == 1 ? spanHasNonFinite(p, run, t.dtype(), nanOnly)
                    : stridedHasNonFinite(p, run, step, t.dtype(), nanOnly))
        return true;
    }
    return false;
  };
  const int64_t parts = parallelParts(runs, run);
  if (parts <= 1) return scanRuns(0, runs);
  std::atomic<bool> any{false};
  parallelRanges(runs, parts, [&](int64_t r0, int64_t r1) {
    if (scanRuns(r0, r1)) any.store(true, std::memory_order_relaxed);
  });
  return any.load();
}

bool binaryFor(const std::string &name, dnnl::algorithm &alg) {
  using A = dnnl::algorithm;
  if (name == "add")
    alg = A::binary_add;
  else if (name == "sub")
    alg = A::binary_sub;
  else if (name == "mul")
    alg = A::binary_mul;
  else if (name == "div")
    alg = A::binary_div;
  else if (name == "maximum")
    alg = A::binary_max;
  else if (name == "minimum")
    alg = A::binary_min;
  else
    return false;
  return true;
}

} // namespace xjit::backend::dnnl_kernels
