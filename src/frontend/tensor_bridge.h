// Tensors and values between PyTorch and the IR runtime, zero-copy through DLPack's C exchange
// API (torch._C._dlpack_exchange_api: no Python call per tensor), with the legacy capsule
// functions as fallback. torch is reached only through the Python C API: no libtorch linking.
#pragma once

#include "dlpack_abi.h"
#include "py_util.h"

#include "xjit/ir/type.h"
#include "xjit/ir/value.h"

#include <optional>
#include <string>

namespace xjit::frontend {

/// torch objects the frontend needs, looked up once on first use (imports torch).
struct TorchHandles {
  PyTypeObject *tensorType = nullptr;    // torch.Tensor
  PyTypeObject *parameterType = nullptr; // torch.nn.Parameter
  PyTypeObject *moduleType = nullptr;    // torch.nn.Module
  PyObject *moduleGetattr = nullptr;     // torch.nn.Module.__getattr__ (the function)
  PyObject *moduleListGetitem = nullptr; // torch.nn.ModuleList.__getitem__
  PyObject *isGradEnabled = nullptr;     // torch.is_grad_enabled
  PyObject *dtypes[kNumDTypes] = {};     // torch.float32, ... indexed by xjit::DType
  const dlpack::ExchangeAPI *api = nullptr;
  PyObject *toDlpack = nullptr, *fromDlpack = nullptr; // legacy capsule path
};
/// Throws PyErrorSet if torch cannot be imported.
const TorchHandles &torchHandles();
/// True once torchHandles() succeeded (cheap; never imports).
bool torchLoaded();

/// torch.Tensor or nn.Parameter exactly: other subclasses may override operators
/// (__torch_function__), so they are never treated as plain tensors.
bool isPlainTensor(PyObject *o);

/// A non-owning view of a tensor's memory and layout, valid while the tensor lives and is not
/// resized. Returns false with a Python exception set when the tensor cannot be exported.
bool tensorView(PyObject *tensor, dlpack::DLTensor *out);
std::optional<DType> dtypeFromDLPack(dlpack::DataType t);
/// tensor.requires_grad: 1, 0, or -1 with a Python error set.
int requiresGrad(PyObject *tensor);
/// "cpu", "cuda:0", ...
std::string deviceStr(dlpack::Device d);
/// The inverse of deviceStr; nullopt for devices DLPack cannot name.
std::optional<dlpack::Device> parseDevice(const std::string &s);

/// Wraps a CPU tensor's memory (viewed by `view`) without copying; the Storage keeps `tensor`
/// alive. Throws xjit::Error (user) for an unsupported dtype or device.
Tensor importTensor(PyObject *tensor, const dlpack::DLTensor &view);
Tensor importTensor(PyObject *tensor);
/// A torch tensor sharing `t`'s memory (a new reference). Throws PyErrorSet.
PyRef exportTensor(const Tensor &t);
/// Like exportTensor, but where t views a graph input (memory importTensor wrapped), a view
/// of that torch tensor: its storage is the input's, not just the bytes t spans, as eager's
/// view's would be. For PyTorch fallbacks that reach past the view (as_strided of a view of an
/// input, fuzzer seed 5224). Costs a Python call.
PyRef exportTensorOnTorchStorage(const Tensor &t);
/// A torch tensor sharing t's memory whose storage is t's whole base, as eager's view's is: on
/// the input's torch tensor where t views a graph input (exportTensorOnTorchStorage), else,
/// where t spans only part of its own storage (a slice of a value the graph does not return),
/// an `as_strided` view of that whole storage, so that `as_strided` of it reaches past its
/// elements as in eager (fuzzer seed 23597). For graph outputs and the operands of PyTorch
/// fallbacks that are views made in the graph. Costs a Python call for such views only.
PyRef exportOnWholeStorage(const Tensor &t);

/// Python value -> run-time value, guided by the graph input type when given (a Python int
/// fed to a float input becomes a float). Tensors are zero-copy; containers recurse; other
/// objects become opaque objects holding a reference.
RtValue toRtValue(PyObject *o, const Type *expected = nullptr);
/// Run-time value -> Python (a new reference). Throws PyErrorSet.
PyRef fromRtValue(const RtValue &v);

} // namespace xjit::frontend
