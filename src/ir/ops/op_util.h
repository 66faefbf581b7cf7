// Shared helpers for op rows: attribute access, PyTorch type promotion and broadcasting for
// inference, and the strided element loops the reference kernels are written with.
#pragma once

#include "xjit/ir/op_registry.h"

#include <cmath>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace xjit::ops {

// ---- attributes (value or OpDef default; throws TypeInferenceError when missing) ----
int64_t attrInt(const Op &op, std::string_view name);
double attrFloat(const Op &op, std::string_view name); // accepts int attrs
bool attrBool(const Op &op, std::string_view name);
const std::string &attrStr(const Op &op, std::string_view name);
const std::vector<int64_t> &attrInts(const Op &op, std::string_view name);
DType attrDType(const Op &op, std::string_view name);
bool hasAttrValue(const Op &op, std::string_view name); // set or defaulted

// ---- inference ----
[[noreturn]] void inferFail(const std::string &msg); // throws TypeInferenceError
/// Operand i must be a tensor; returns its type.
const Type &tensorOperand(const Op &op, size_t i);
/// Numpy/PyTorch broadcasting of two shapes. Symbolic dims: 1 broadcasts; equal expressions
/// match; a symbol against a static non-1 dim or another symbol is assumed equal (the frontend
/// guards such assumptions) and the static / first dim is kept.
Shape broadcastShapes(const Shape &a, const Shape &b);
/// torch.result_type over tensors and scalars: dimensioned tensors, then 0-d tensors, then
/// Python scalars, each tier participating only if it raises the category.
DType resultType(std::span<const Type> types);
DType resultTypeOfOperands(const Op &op, size_t first = 0, size_t count = SIZE_MAX);
/// Wraps a negative dim; throws if out of range. rank 0 accepts -1 and 0.
int64_t normDim(int64_t dim, int64_t rank);
/// Reduction dims: empty list means all dims. Sorted, unique.
std::vector<int64_t> normDims(const std::vector<int64_t> &dims, int64_t rank);
/// Shape after reducing `dims` (kept as size 1 when keepdim).
Shape reducedShape(const Shape &s, const std::vector<int64_t> &dims, bool keepdim);
/// The result-type float dtype for ops like sqrt/exp on integer inputs (int/bool -> f32).
DType floatResultDType(DType d);

// ---- kernels ----
[[noreturn]] void kernelFail(const std::string &msg); // throws KernelError
/// Concrete broadcasting of run-time sizes.
std::vector<int64_t> broadcastSizes(const std::vector<int64_t> &a, const std::vector<int64_t> &b);
/// A stride-0 view of t broadcast to `sizes`.
Tensor expandTo(const Tensor &t, const std::vector<int64_t> &sizes);
/// A 0-d tensor holding a scalar run-time value (or the tensor itself).
Tensor asTensor(const RtValue &v, DType dtype);
/// Input i of a kernel as a tensor (scalars become 0-d tensors of the op's promoted dtype).
Tensor tensorArg(const Op &op, std::span<const RtValue> in, size_t i);
/// Declared dtype of result i.
DType resultDType(const Op &op, size_t i = 0);
/// Calls f(index, linear) for every multi-index of `sizes` in row-major order.
void forEachIndex(const std::vector<int64_t> &sizes,
                  const std::function<void(const std::vector<int64_t> &, int64_t)> &f);
/// Linear row-major index of a multi-index.
int64_t linearIndex(const std::vector<int64_t> &sizes, const std::vector<int64_t> &idx);

using FloatFn = std::function<double(std::span<const double>)>;
using IntFn = std::function<int64_t(std::span<const int64_t>)>;
/// Broadcasts inputs and evaluates per element. Computes with `floatFn` in double when
/// `computeDType` is floating, else with `intFn` in int64 (nullptr: use floatFn on ints); the
/// result is rounded/converted to `outDType`.
Tensor mapElements(std::span<const Tensor> inputs, DType computeDType, DType outDType,
                   const FloatFn &floatFn, const IntFn &intFn = nullptr);

/// Rounds a double to what `dtype` can hold (float16/bfloat16/float32 rounding), for kernels
/// that must reproduce intermediate rounding.
double roundTo(DType dtype, double v);

} // namespace xjit::ops
