// Conversions between Python objects and the IR's run-time values and attributes, for the nanobind
// module. Tensors cross the boundary zero-copy through DLPack (or the buffer protocol): inputs are
// borrowed (the Python object is kept alive by the xjit::Storage that wraps it) and outputs are
// exported with a capsule that owns a reference to their xjit::Storage.
#pragma once

#include "xjit/ir/attr.h"
#include "xjit/ir/op_registry.h"
#include "xjit/ir/value.h"

#include <nanobind/nanobind.h>

#include <string>

namespace xjit::py {

namespace nb = nanobind;

/// The array library outputs are returned in.
enum class Framework { NumPy, Torch };
Framework parseFramework(const std::string &name);

/// True for objects that expose __dlpack__ or the buffer protocol (tensors, arrays), excluding
/// str/bytes-like objects.
bool isArrayLike(nb::handle obj);

/// Wraps a CPU tensor/array without copying. Read-only arrays are copied (kernels of in-place ops
/// may write their operands).
Tensor importTensor(nb::handle obj);

/// Python value -> run-time value: None, bool, int, float, str, list/tuple (recursively), tensors
/// (zero-copy); anything else becomes an opaque object that holds a reference.
RtValue toRtValue(nb::handle obj);

/// The inputs of a call of `g` (Python semantics: an int is accepted where a float is declared).
std::vector<RtValue> graphInputs(const Graph &g, const nb::sequence &inputs);

/// The static type describing a run-time value (tensors get their exact static shape).
Type typeOf(const RtValue &v);

/// Run-time value -> Python. Tensors are exported zero-copy in `fw` (bf16 always as torch: numpy
/// has no bfloat16); tensors with negative strides are copied first since torch rejects
/// them.
nb::object fromRtValue(const RtValue &v, Framework fw);

/// Python attribute value -> Attr, guided by the op's AttrSpec for `name` when there is one (a str
/// names a dtype for DType attrs, a type for Type attrs; a single int/float is wrapped for list
/// attrs). Ints stay ints for Float attrs: `alpha=2` and `alpha=2.0` differ in PyTorch.
Attr toAttr(const OpDef *def, const std::string &name, nb::handle value);
AttrMap toAttrMap(const OpDef *def, nb::handle dict);
/// Attr -> Python (dtypes and types as their text, tensors as text).
nb::object attrToPython(const Attr &a);

} // namespace xjit::py
