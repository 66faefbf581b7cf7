// The layouts (strides) eager PyTorch gives a graph's outputs, derived at capture and restored
// after each run: programs can observe strides (`.stride()`, `.is_contiguous()`, `.view()`
// raising, whether `reshape` copies), so a compiled graph must hand back what eager would.
#pragma once

#include "eager.h"

#include "xjit/frontend/capture.h"
#include "xjit/ir/interpreter.h"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

namespace xjit::frontend {

/// The layout eager gives one graph output.
struct OutputLayout {
  enum Kind : uint8_t {
    Any,   // not a tensor, or returned as the graph makes it
    Dense, // non-overlapping and dense, dims ordered `order` (outermost first): the strides
           // follow from the sizes (valid for symbolic sizes). Contiguous is order 0..n-1.
    Exact, // `strides` and `offset` as recorded (expanded or strided views; static sizes)
  };
  Kind kind = Any;
  std::vector<int> order;
  std::vector<int64_t> strides;
  int64_t offset = 0;
  // Dense, but a view at an offset with symbolic sizes (`v[:, 1:]` of a transposed v): its
  // order is eager's at the capture's sizes. Where the graph's strides differ and it shares
  // memory with another output, it keeps them (a copy would cut the two apart).
  bool symbolicView = false;
  // Any, but a strided view (gaps, overlaps) with symbolic sizes of a tensor eager lays out dense
  // in this order (the meta walk's `_base`): its strides are size expressions the walk does not
  // keep, and computing that tensor in this order (computeViewedBasesInLayouts) gives the view
  // eager's strides at any sizes. Not checked after the run. Empty otherwise.
  std::vector<int> baseOrder;
};

/// A PyTorch fallback that addresses its operand's storage (readsStorage: `as_strided`): the
/// layout eager gives that operand, and the dense dim order eager lays out the tensor whose
/// storage it is (empty where the operand is no view of a fresh tensor).
struct StorageRead {
  OutputLayout operand;
  std::vector<int> storageOrder;
};

/// What the capture found: one layout per graph output, or `derived` false where the meta walk
/// could not tell an output's layout (the entry then runs in Python, with `reason`).
/// `callOrders`: for each external_call with `layout_of` >= 0 (dropout's noise), the dense dim
/// order eager gives that operand (layoutCallsInEagersOrder). `storageReads`: for each call that
/// readsStorage, eager's layout of what it reads (computeStorageReadsInLayouts).
struct OutputLayouts {
  std::vector<OutputLayout> outputs;
  bool derived = true;
  std::string reason;
  std::map<const Op *, std::vector<int>> callOrders;
  std::map<const Op *, StorageRead> storageReads;
};

/// Walks the captured graph `g` on meta tensors made from `inputs` (runMeta) and records each
/// output's layout. `symbolic`: the graph has symbolic sizes (an exact layout then is recorded
/// only for an output whose strides cannot depend on them; a strided view of a computed tensor
/// gets its OutputLayout::baseOrder). Throws PyErrorSet for an interrupt.
OutputLayouts deriveOutputLayouts(const Graph &g, const std::vector<PyRef> &inputs,
                                  const ExternalCallables &externals, bool symbolic);

/// Eager's output layouts decided without PyTorch, where ATen's stride rules settle them:
/// inputs dense in `inputOrders` (per graph input, its dim order; empty for non-tensors), and
/// every op either makes a fresh contiguous result (matmul family, contiguous operands of a
/// non-view op, constants), permutes its operand (permute/transpose/t), keeps its layout
/// (clone, cast, in-place ops), views it (slices, expand, reshape-like views by ATen's
/// computeStride), or lays out an elementwise result as TensorIterator does (its fast setup,
/// else its reorder_dimensions over the operands' strides, broadcasting included); docs/
/// frontend.md *Output layouts*. Returns false where an op falls outside
/// (the meta walk then decides): the walk's first meta op imports torch._dynamo (1.5-2.5 s once
/// per process on the test machine), which most graphs thus never pay.
/// `stoppedAt` (optional) gets the op where the rules stopped, for XJIT_LOG=graphs.
bool staticOutputLayouts(const Graph &g, const std::vector<std::vector<int>> &inputOrders,
                         std::vector<OutputLayout> &out, const Op **stoppedAt = nullptr);

/// Eager's strides for `v`, a tensor of the graph `g` (one being captured, say), where the rules
/// of staticOutputLayouts settle them from the ops computing v alone (static sizes); graph
/// inputs dense in `inputOrders` (per argument; empty where unknown: an op reading it stops the
/// rules). nullopt where the rules stop. The capture asks where a reshape or contiguous of a
/// computed tensor may copy: whether eager views or copies follows from these strides (through
/// ComputedStrides, for many tensors of one graph).
std::optional<std::vector<int64_t>>
staticStridesOf(const Graph &g, const Value *v, const std::vector<std::vector<int>> &inputOrders);

/// staticStridesOf for the tensors of a graph being captured, asked one after another: the rules
/// lay out each op once, in body order, as far as the tensor asked for (a capture appends its
/// ops to the body), rather than again over all the ops computing each tensor asked for, which
/// made a capture quadratic in its graph's size (GPT-2 of 48 layers: 46% of its capture).
class ComputedStrides {
public:
  ComputedStrides();
  ~ComputedStrides();
  std::optional<std::vector<int64_t>> of(const Graph &g, const Value *v,
                                         const std::vector<std::vector<int>> &inputOrders);

private:
  struct State;
  std::unique_ptr<State> state_;
};

/// ATen's is_contiguous: the dims of size other than 1 have the compact strides.
bool stridesAreContiguous(const std::vector<int64_t> &sizes, const std::vector<int64_t> &strides);

/// The sizes of `t` where all are static; nullopt otherwise.
std::optional<std::vector<int64_t>> staticSizesOf(const Type &t);

/// The strides of a view of `sizes`/`strides` as `shape` (ATen's computeStride); nullopt where
/// no view has that shape (reshape copies, view raises).
std::optional<std::vector<int64_t>> reshapeViewStrides(const std::vector<int64_t> &sizes,
                                                       const std::vector<int64_t> &strides,
                                                       const std::vector<int64_t> &shape);

/// The annotation marking the analyzer's clone(expand_as(v, x)) for a write of all of x from v
/// (`x.copy_(v)`, `x[...] = v`: Analyzer::wholeWrite).
inline constexpr const char *kWholeWriteAttr = "layout.whole_write";

/// The tensor x that `op` writes in place, as the analyzer functionalizes such a write: through
/// a view of x (Analyzer::writeThroughView), `reshape(index_put(reshape(x), values,
/// positions))` back to x's shape, the positions views of an arange; or all of x, a clone of
/// `expand_as(v, x)` marked kWholeWriteAttr. Else null. Eager writes x in place, which keeps
/// its layout (fuzzer seed 14038: `v3 = v2.clone(); v3[:, :1].clamp_(min=0)` of a transposed
/// v2 stays transposed; seed 33525: `v2.copy_(a)` of a permuted a keeps v2's): the layout rules
/// and the meta walk give the result x's.
const Value *writtenInPlace(const Op &op);

/// Rewrites `g` (a captured graph about to be optimized for the native backend) so that it
/// computes the outputs `which` whose layout is a dense dim order other than the one the graph
/// would give them (a fresh result is contiguous, a permute of one permuted) in that order: the
/// output y, and every other use of it, becomes permute(contiguous(permute(y, order)), inverse),
/// a view with eager's strides of a buffer the `sink-permutes` pass then computes in memory
/// order. Outputs sharing y's memory (views of it) stay views of it, as in eager. Outputs that
/// are written in place, views of inputs or of ops the graph cannot predict are left to the copy
/// after the run (inLayout). Returns the number of outputs rewritten.
int computeOutputsInLayouts(Graph &g, const std::vector<OutputLayout> &layouts,
                            const std::vector<size_t> &which);

/// Rewrites each external_call of `callOrders` whose operand k = `layout_of` eager lays out in a
/// dense order other than contiguous (the graph's: a fresh result is contiguous): the call gets
/// empty_like(permute(x, order)) for its operand empty_like(x), a like of x's dims in eager's
/// memory order, and its result (of that operand's shape) is permuted back. A call that fills
/// its result in memory order (dropout's noise: bernoulli_ on empty_like(x), whose strides are
/// a dense x's) then draws what eager draws for a transposed or channels_last x. Returns the
/// number of calls rewritten; throws std::runtime_error for a call whose result is not of its
/// operand's shape.
int layoutCallsInEagersOrder(Graph &g, const std::map<const Op *, std::vector<int>> &callOrders);

/// Rewrites `g` so that the operand of each call of `storageReads` (a PyTorch fallback such as
/// `as_strided`, which reads its operand's storage past the view: fuzzer seed 103108) views a
/// tensor the graph computes in eager's dim order, as computeViewedBasesInLayouts does for the
/// bases of outputs. Returns "" when every operand then has eager's layout and storage (or
/// views a graph input, or a fallback's result: PyTorch's own tensors), else why not: the frame
/// then runs in Python, whose `as_strided` reads eager's storage.
std::string computeStorageReadsInLayouts(Graph &g,
                                         const std::map<const Op *, StorageRead> &storageReads);

/// The dim order whose dense strides are exactly `strides`; empty when there is none.
std::vector<int> denseOrder(const std::vector<int64_t> &sizes, const std::vector<int64_t> &strides);

/// As denseOrder, but the strides of size-1 dims may be anything (`x[:, :n]` of a [1, N, ...]
/// tensor: PyTorch calls it contiguous, its stride 0 is N*...): an order whose dense strides
/// equal `strides` on every dim of size > 1, size-1 dims placed by their stride. Empty when
/// there is none, or for an empty tensor.
std::vector<int> denseOrderOfSignificantDims(const std::vector<int64_t> &sizes,
                                             const std::vector<int64_t> &strides);

/// Whether `sizes`/`strides` (a run's output) already are `layout`.
bool hasLayout(const OutputLayout &layout, const std::vector<int64_t> &sizes,
               const std::vector<int64_t> &strides);

/// Whether `sizes`/`strides` address the same elements as `layout` does: they differ from it
/// only in the strides of size-1 dims, or the tensor is empty. Such an output is re-strided as a
/// view (inLayout), so it keeps sharing memory with what it views, as in eager (fuzzer seed
/// 13316: `a.reshape(1, -1)` of a [1, 2] input of strides (1, 1) is eager's view (2, 1)).
bool restridesOnly(const OutputLayout &layout, const std::vector<int64_t> &sizes,
                   const std::vector<int64_t> &strides);

/// `value` (a torch tensor) in `layout`: itself when it already is, a view of it with eager's
/// strides where only those of size-1 dims differ (restridesOnly), else a copy in it.
/// Throws PyErrorSet.
PyRef inLayout(const OutputLayout &layout, PyRef value);

/// The layout class of a tensor input (guards): per dim, -1 for a size-1 dim, else the rank of
/// its stride among the other dims' (0 largest; equal strides share a rank; -2 for stride 0),
/// then 1 if the tensor is non-overlapping and dense. Eager's stride rules (TensorIterator's dim
/// order, conv's memory format) depend on the inputs' layouts only through this class.
std::vector<int8_t> layoutClass(const int64_t *sizes, const int64_t *strides, int ndim);

/// layoutClass(sizes, strides, ndim) == layout, without allocating for contiguous tensors (a
/// guard checks it on every call for every tensor input).
bool hasLayoutClass(const std::vector<int8_t> &layout, const int64_t *sizes, const int64_t *strides,
                    int ndim);

} // namespace xjit::frontend
