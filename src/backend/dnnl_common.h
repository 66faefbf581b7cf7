// Shared pieces of the oneDNN library kernels (dnnl_*.cpp): the engine, memory descriptors
// over strided xjit tensors, where a call's operands come from (run() inputs or compile-time
// constants), post-ops, and the per-shape plan interface the executable caches.
//
// A library kernel is built in two steps. At compile time the IR (one op, or an `epilogue`
// fusion anchored on one) is read into a LibraryKernel: attributes, operand sources, post-ops,
// constant weights. At run time, for each distinct set of input sizes and strides, the kernel
// makes a Plan (oneDNN primitives for those shapes, weights reordered once into the layout the
// primitive prefers); plans are cached by the executable (dnnl_kernels.cpp).
#pragma once

#include "winograd_weights.h"
#include "xjit/backend/content_tags.h"
#include "xjit/backend/target.h"
#include "xjit/ir/value.h"

#include <dnnl.hpp>

#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace xjit::backend::dnnl_kernels {

using dnnl::memory;
using Dims = std::vector<int64_t>;

dnnl::engine &cpuEngine();
/// One stream per thread: oneDNN streams are not meant to be shared between threads.
dnnl::stream &threadStream();

/// f32 and bf16 (the dtypes the library path serves); nullopt for the others.
std::optional<memory::data_type> dnnlType(DType d);
/// A contiguous tensor whose memory is not zero-filled (every element is written by the call).
Tensor allocateOutput(DType d, const Dims &sizes);
/// A plain memory descriptor with explicit strides (in elements).
memory::desc stridedDesc(const Dims &dims, const Dims &strides, memory::data_type dt);
/// A oneDNN memory over a tensor's data, no copy. The tensor must outlive the memory's use.
memory wrap(const memory::desc &md, const Tensor &t);
/// A dense copy of `src` (any strides) into a fresh buffer in the layout `md`.
memory reorderedCopy(const memory &src, const memory::desc &md);

/// How an IR tensor's dims map onto oneDNN's logical dims of the call (e.g. [N,H,W,C] of a
/// channels-last conv onto [N,C,H,W], [C,L] of an unbatched conv onto [1,C,L], [B,S,N] of a
/// linear onto [B*S,N]). Applied to the result, the inputs and the post-op operands alike.
struct DimMap {
  std::vector<int> insertUnit; // first: unit dims inserted at these result positions (ascending)
  std::vector<int> perm;       // then: new[i] = old[perm[i]] (empty: identity)
  int mergeLeading = 0;        // then: the first k dims merged into one (0 or 1: none)
  /// False when the strides do not allow the merge (the view would need a copy).
  bool apply(Dims &sizes, Dims &strides) const;
};

/// The map of a conv/pool tensor ([N,C,sp...], [C,sp...], or channels-last [N,sp...,C] /
/// [sp...,C]) onto oneDNN's [N,C,sp...].
DimMap spatialMap(size_t nd, bool unbatched, bool channelsLast);
/// Whether `t` is dense (contiguous in its own dim order, size-1 dims ignored).
bool isDense(const Tensor &t);

/// A value the call reads: input `input` of run(), or a compile-time constant (a `constant`
/// op's value: prepacked weights, scalar factors).
struct Source {
  int input = -1;
  std::optional<RtValue> constant;
  bool present() const { return input >= 0 || constant.has_value(); }
  const RtValue &get(std::span<const RtValue> in) const {
    return constant ? *constant : in[static_cast<size_t>(input)];
  }
};

/// One post-op of an epilogue, applied by oneDNN to the f32 accumulator in order.
struct PostOp {
  bool binary = false;
  dnnl::algorithm alg = dnnl::algorithm::undef;
  float alpha = 0, beta = 0; // eltwise parameters
  Source other; // binary: the second operand (tensor broadcast to the result, or scalar)
};

/// The binary post-op operands of one plan: descriptors fixed per plan, data bound per call.
class Densify;

class BoundPostOps {
public:
  /// Appends `ops` to `po`. Binary operands are mapped to the dst's oneDNN dims with `map`
  /// (`resultSizes` is the IR result shape); `dense` forces every binary operand to be
  /// materialized as a dense tensor of the full result shape (for primitives that reject
  /// broadcast or strided operands). `dstLayout`, when given, is the primitive's blocked dst
  /// layout: full-shape operands (residuals) are then reordered into it per call, since
  /// oneDNN's jit kernels only take an unbroadcast binary operand in the dst's own layout
  /// (a plain NCHW residual against an nChw16c dst sends the conv to the im2col gemm, ~10x
  /// slower).
  BoundPostOps(const std::vector<PostOp> &ops, std::span<const RtValue> in, const Dims &resultSizes,
               const DimMap &map, bool dense, dnnl::post_ops &po,
               const memory::desc *dstLayout = nullptr);
  /// Adds the operands' memories for this call to `args`; `keep` holds temporaries alive.
  void bind(std::span<const RtValue> in, std::unordered_map<int, memory> &args,
            std::vector<Tensor> &keep) const;

private:
  struct Binary {
    int index; // position in the post-op list
    Source src;
    memory::desc md;
    bool materialize; // scalar, dtype conversion, or `dense`: a fresh dense tensor per call
    Dims resultSizes;
    std::shared_ptr<const Densify> toDstLayout; // a full-shape operand, into `dstLayout`
  };
  std::vector<Binary> binaries_;
  DimMap map_;
  Tensor materialized(const Binary &b, std::span<const RtValue> in) const;
};

/// The call for one set of input shapes: primitives created, constant weights reordered.
class Plan {
public:
  virtual ~Plan() = default;
  DType dtype = DType::F32;
  Dims resultSizes; // the IR result's run-time sizes
  /// The result's sizes for these inputs: `resultSizes`, except for a plan that takes every
  /// shape (LibraryKernel::makeGenericPlan).
  virtual Dims resultSizesFor(std::span<const RtValue>) const { return resultSizes; }
  /// Whether the plan runs these inputs: a per-shape plan is looked up by their shape; a
  /// shape-generic one checks.
  virtual bool takes(std::span<const RtValue>) const { return true; }
  /// Runs on `in`, writing the result into `out`: contiguous, of dtype `dtype` and sizes
  /// `resultSizes`, not aliasing any input.
  virtual void run(std::span<const RtValue> in, const Tensor &out) const = 0;
  /// The oneDNN implementation chosen (for --dump), e.g. "brg:avx512_core".
  virtual std::string info() const = 0;
};

/// Per-thread buffers for a primitive's operands reordered per call (a convolution's weights),
/// which die when the primitive returns: one buffer per slot and thread, grown to the largest
/// size asked for and reused by every later call, instead of a fresh allocation per call
/// (ResNet-18: 20 convolutions' weights, 45 MB, per call, whose freed blocks glibc's malloc
/// kept: 43 MB held free after the steady calls).
/// ConvSrc: a Winograd convolution's input in its blocked layout, or an im2col convolution's
/// columns (one plan never uses both: one buffer, ResNet-18 b1 -0.8 MB); ConvDst: a Winograd
/// convolution's result in its blocked layout; Scratchpad: the primitive's own (execute).
enum class ScratchSlot { Weights, ConvSrc, ConvDst, Scratchpad, Count };
/// At least `bytes` bytes, 64-byte aligned, owned by the calling thread.
void *threadScratch(ScratchSlot slot, size_t bytes);

/// Makes a dense copy of a strided operand for primitives that want dense memory: a reorder
/// from the user's descriptor to a dense one, created once per plan.
class Densify {
public:
  Densify() = default;
  Densify(const memory::desc &from, const memory::desc &to);
  explicit operator bool() const { return active_; }
  /// A fresh tensor holding `t` (described by `from`) in the layout `to`.
  Tensor operator()(const Tensor &t, DType dt) const;
  /// `t` in the layout `to`, written into the calling thread's scratch buffer `slot`
  /// (threadScratch): valid until that slot is used again on this thread.
  memory intoScratch(const Tensor &t, ScratchSlot slot) const;
  /// `t` in the layout `to`, in a new buffer the returned memory owns.
  memory intoNew(const Tensor &t) const;
  const memory::desc &from() const { return from_; }
  /// True when this is a Winograd weight transform done by xjit's fast code (winograd_weights.h).
  bool fastWinograd() const { return winograd_.has_value(); }
  const memory::desc &to() const { return to_; }

private:
  bool active_ = false;
  memory::desc from_, to_;
  dnnl::reorder prim_;
  // Into a Winograd layout: xjit's transform instead of oneDNN's slower reorder.
  std::optional<WinogradWeightLayout> winograd_;
  void reorder(const Tensor &t, const memory &to) const;
};

/// The dense row-major descriptor of `dims`.
memory::desc denseDesc(const Dims &dims, memory::data_type dt);
/// True if oneDNN fell back to a reference (slow) implementation.
bool isReferenceImpl(const dnnl::primitive_desc_base &pd);
/// Executes `prim` on this thread's stream and waits.
/// `attr` with a user-managed scratchpad: every primitive is made with it, and execute() passes
/// a per-thread scratchpad (concurrent calls must not share oneDNN's global one).
dnnl::primitive_attr userScratchpad(dnnl::primitive_attr attr = {});
/// Runs `prim` on this thread's stream and waits.
void execute(const dnnl::primitive &prim, std::unordered_map<int, memory> &args);

/// One library op (with its post-ops), as read from the IR at compile time.
class LibraryKernel {
public:
  virtual ~LibraryKernel() = default;
  /// Builds the plan for these inputs; throws (dnnl::error, KernelError) when oneDNN cannot
  /// run them, and the executable then runs the reference kernel for this shape.
  virtual std::unique_ptr<Plan> makePlan(std::span<const RtValue> in) const = 0;
  /// A plan for every shape of these inputs' ranks (oneDNN run-time dims), used once the
  /// shapes vary from call to call; nullptr where the kernel has none for these inputs.
  virtual std::unique_ptr<Plan> makeGenericPlan(std::span<const RtValue>) const { return nullptr; }
  /// One line for --dump: the op, its post-ops and the prepacking.
  virtual std::string describe() const = 0;
};

/// Constant weights reordered into the layouts primitives asked for, shared by all plans of
/// one kernel (different shapes usually pick the same layout).
class PackedWeights {
public:
  explicit PackedWeights(Tensor value) : value_(std::move(value)) {}
  const Tensor &value() const { return value_; }
  /// `value` viewed through `userDesc`, reordered into `want` (once per distinct layout).
  memory get(const memory::desc &userDesc, const memory::desc &want) const;

private:
  Tensor value_;
  mutable std::mutex mu_;
  mutable std::vector<std::pair<memory::desc, memory>> packed_;
};

/// What a library kernel passes as its weights argument for a run-time weight `w` described
/// by `reorder.from()`: `w` itself when no reorder is needed; for a weight the caller tagged as
/// unchanged since an earlier call (xjit/backend/content_tags.h: the frontend tags module
/// parameters by PyTorch's version counter), its copy in the layout `reorder.to()`, made once
/// per tag and shared by every kernel of the process (a weight used by many instructions is
/// reordered once) until the tag is retired (retireContentTag: the parameter changed or died);
/// else a per-call copy in the thread's scratch buffer.
memory runtimeWeights(const Tensor &w, const memory::desc &userDesc, const Densify &reorder);
/// Counts a call that read its run-time weights as they are (backend_stats' weights_in_place).
void countWeightsInPlace();
/// The weight counters (backendCounters, through DnnlLibrary).
WeightPackCounters weightPackTotals();

/// Eltwise algorithm for a unary post-op; false when oneDNN has none for it.
bool eltwiseFor(const Op &op, PostOp &out);
/// Binary algorithm for add/sub/mul/div/maximum/minimum with the chain as left operand.
bool binaryFor(const std::string &name, dnnl::algorithm &alg);

/// Whether a post-op loses NaN (relu, clip / hardtanh / relu6 / clamp, maximum, minimum).
bool dropsNaN(const PostOp &p);
/// Whether a float tensor (any strides) holds a NaN, or with !nanOnly also an infinity.
bool hasNonFinite(const Tensor &t, bool nanOnly);

/// The run's tensor for source `s`, or an undefined tensor when absent/None.
Tensor tensorOf(const Source &s, std::span<const RtValue> in);

} // namespace xjit::backend::dnnl_kernels
