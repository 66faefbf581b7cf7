// Private helpers shared by the data-movement, indexing and creation op families (movement.cpp,
// indexing.cpp, creation.cpp): shape arithmetic for inference, strided views and element copies for
// the reference kernels, and scalar fill values.
#pragma once

#include "ops/op_util.h"

#include <functional>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace xjit::ops::mv {

// ---- inference ----

/// Static value of a dim, or an inference error naming the op and what needs
/// it.
int64_t requireStatic(const DimExpr &d, std::string_view opName, std::string_view what);
/// Dims of `shape` except `dim`.
Shape dropDim(const Shape &shape, int64_t dim);
/// A permutation attribute checked against rank: every dim exactly once
/// (negative allowed).
std::vector<int64_t> normPermutation(const std::vector<int64_t> &dims, int64_t rank,
                                     std::string_view opName);
/// Resolves a reshape target with at most one -1 against the number of
/// elements.
Shape inferReshapeShape(const std::vector<int64_t> &target, const DimExpr &numel,
                        std::string_view opName);

/// A Python-style slice resolved against a dim: the start offset and number of
/// elements.
struct SliceRange {
  DimExpr start;
  DimExpr length;
};
/// Clamps start/end like Python (end may be INT64_MAX). Static dims clamp
/// exactly; on symbolic dims the bounds are assumed in range (the frontend
/// guards that assumption).
SliceRange resolveSlice(const DimExpr &size, int64_t start, int64_t end, int64_t step);
/// Whether a run-time size satisfies the in-range assumption resolveSlice makes for symbolic dims
/// (else the declared result size would be wrong).
bool sliceAssumptionHolds(int64_t size, int64_t start, int64_t end);
/// Run-time version of resolveSlice.
std::pair<int64_t, int64_t> resolveSlice(int64_t size, int64_t start, int64_t end, int64_t step);

/// pad's `mode` attribute (an inference error for an unknown one).
enum class PadMode { Constant, Reflect, Replicate, Circular };
PadMode padMode(const Op &op);
/// (before, after) padding per dim of a tensor of `rank`, from pad's last-dim-first list.
std::vector<std::pair<int64_t, int64_t>> padAmounts(const Op &op, int64_t rank);

/// An attribute that may be absent (Op::attrOrNull returns nullptr).
AttrSpec optionalAttr(std::string name, AttrKind kind);
/// A Python number attribute: int, float or bool.
AttrSpec numberAttr(std::string name, bool optional = false);

// ---- kernels ----

/// Operand i of a kernel, which must be a tensor.
const Tensor &tensorIn(const Op &op, std::span<const RtValue> in, size_t i);
/// Whether operand i is present (not left off and not None).
bool hasOperand(const Op &op, size_t i);
bool hasInput(std::span<const RtValue> in, size_t i);

/// A Python number used to fill tensors (from an attribute, a scalar operand or
/// a 0-d tensor).
struct Scalar {
  DTypeCategory category = DTypeCategory::Floating;
  double f = 0;
  int64_t i = 0;
  static Scalar fromDouble(double v);
  static Scalar fromInt(int64_t v);
  static Scalar fromBool(bool v);
  static Scalar fromAttr(const Attr &a);
  /// From a run-time int/float/bool or a one-element tensor.
  static Scalar fromRt(const RtValue &v, std::string_view opName);
};
/// Stores `s` at a linear index, converted like torch's fill (float->int
/// truncates).
void setScalar(const Tensor &t, int64_t linear, const Scalar &s);
void fill(const Tensor &t, const Scalar &s);
/// dst[di] = src[si] with dtype conversion; exact for same-dtype copies.
void copyElement(const Tensor &dst, int64_t di, const Tensor &src, int64_t si);

/// Strides that view (sizes, strides) as newSizes without copying, as torch's
/// computeStride; nullopt when the layout does not allow it.
std::optional<std::vector<int64_t>> viewStrides(const std::vector<int64_t> &sizes,
                                                const std::vector<int64_t> &strides,
                                                const std::vector<int64_t> &newSizes);
/// Resolves a -1 in a run-time reshape target; throws KernelError on a
/// mismatch.
std::vector<int64_t> reshapeSizes(const std::vector<int64_t> &target, int64_t numel,
                                  std::string_view opName);

/// cat's result sizes: drops the legacy empty 1-d tensors (which cat skips) from `parts` and sets
/// *dim to dimAttr normalized; a kernel error when the sizes differ except along dim.
std::vector<int64_t> catSizes(std::vector<Tensor> &parts, int64_t dimAttr, int64_t *dim);
/// How catInto / stackInto copy a part into its view of `out` (dst, src): Tensor::copyFrom by
/// default; the CPU backend passes its threaded copy.
using CopyPart = void (*)(const Tensor &dst, const Tensor &src);
/// Copies each part into its slice of `out` along dim, in order (cat written into `out`).
void catInto(std::span<const Tensor> parts, int64_t dim, const Tensor &out,
             CopyPart copy = nullptr);
/// stack's result sizes (parts of equal sizes, else a kernel error); sets *dim to dimAttr
/// normalized over the result's rank.
std::vector<int64_t> stackSizes(std::span<const Tensor> parts, int64_t dimAttr, int64_t *dim);
/// Copies part i into index i of `out` along dim (stack written into `out`).
void stackInto(std::span<const Tensor> parts, int64_t dim, const Tensor &out,
               CopyPart copy = nullptr);

/// The scatter family's reduction: scatter's `reduce` (add, multiply) or none, scatter_add's
/// sum, scatter_reduce's `reduce`; an inference error for an unknown one.
enum class ScatterReduce { None, Sum, Prod, Mean, Max, Min };
ScatterReduce scatterReduceOf(const Op &op);

/// Views sharing t's storage.
Tensor sliceView(const Tensor &t, int64_t dim, int64_t start, int64_t length, int64_t step = 1);
Tensor selectView(const Tensor &t, int64_t dim, int64_t index);
Tensor permuteView(const Tensor &t, const std::vector<int64_t> &perm);
Tensor unsqueezeView(const Tensor &t, int64_t dim);

/// A new tensor of t's dtype: out[idx] = t[src] where srcOf(idx, src) fills src
/// (sized like t's rank) and returns true, or `outside` where it returns false.
using SourceFn = std::function<bool(const std::vector<int64_t> &idx, std::vector<int64_t> &src)>;
Tensor remap(const Tensor &t, const std::vector<int64_t> &outSizes, const SourceFn &srcOf,
             const Scalar &outside = Scalar::fromInt(0));

/// Multi-index of a linear row-major index.
std::vector<int64_t> unravel(int64_t linear, const std::vector<int64_t> &sizes);

// ---- registration of the families' sub-tables (called from register*Ops) ----
void registerCombineOps(OpRegistry &r);       // movement_combine.cpp
void registerSortOps(OpRegistry &r);          // movement_sort.cpp
void registerAdvancedIndexOps(OpRegistry &r); // movement_advindex.cpp

} // namespace xjit::ops::mv
