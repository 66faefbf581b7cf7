// The analyzer's bridge to PyTorch through the Python C API (no libtorch): dtypes and devices,
// tensor metadata at capture time, meta tensors, and the callables behind `external_call`
// fallback nodes (the driver registers them; tensors cross at run time in tensor_bridge.h).
#pragma once

#include "xjit/frontend/capture.h"
#include "xjit/ir/type.h"

#include <optional>
#include <span>
#include <string>
#include <vector>

namespace xjit::frontend {

/// A Python error set by a C API call, turned into a C++ exception (message includes the Python
/// exception). The Python error indicator is cleared.
class PyError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};
/// Throws PyError describing (and clearing) the current Python exception, prefixed by `what`.
[[noreturn]] void throwPyError(const std::string &what);
/// Returns o, or throws PyError if o is null.
PyRef check(PyObject *o, const char *what);

/// The imported `torch` module and friends (imported on first use; the GIL must be held).
PyObject *torchModule();
PyObject *torchTensorType();    // torch.Tensor
PyObject *torchParameterType(); // torch.nn.Parameter
PyObject *torchModuleType();    // torch.nn.Module

/// Puts torch's CPU generator state back at scope exit (when `keep`): compile-time calls of
/// PyTorch fallbacks on meta tensors still run a random function with only constant arguments
/// (`torch.rand(shape)`, HF's drop_path) on the CPU, and its draws must not shift eager's stream.
class KeepRngState {
public:
  explicit KeepRngState(bool keep = true);
  ~KeepRngState();
  KeepRngState(const KeepRngState &) = delete;
  KeepRngState &operator=(const KeepRngState &) = delete;

private:
  PyRef state_;
};
/// torch.finfo / torch.iinfo (the class), and instances of them: immutable facts about a dtype.
bool isTorchDtypeInfoType(PyObject *o);
bool isTorchDtypeInfo(PyObject *o);

std::optional<DType> dtypeFromTorch(PyObject *dtype);
/// torch.<dtype> object for an xjit dtype (borrowed, lives as long as torch).
PyObject *torchDtype(DType d);
std::optional<Device> deviceFromTorch(PyObject *device);
/// A torch.device object for `d`.
PyRef torchDevice(const Device &d);

/// What the analyzer reads from a torch.Tensor.
struct TensorMeta {
  DType dtype = DType::F32;
  std::vector<int64_t> sizes, strides;
  Device device;
  bool requiresGrad = false;
};
/// Reads a tensor's metadata; nullopt (with `why`) for unsupported tensors (complex dtypes,
/// sparse or quantized layouts, tensor subclasses other than Parameter/Buffer).
std::optional<TensorMeta> readTensorMeta(PyObject *t, std::string *why);
bool isTensor(PyObject *o); // isinstance(o, torch.Tensor)

/// A template of a fallback call: how to rebuild the Python arguments from the external_call's
/// operands (tensors and scalars) and the constants captured with it.
struct ArgTemplate {
  enum Kind : uint8_t { Operand, Constant, Tuple, List } kind = Constant;
  int64_t operand = 0;
  PyRef constant;
  std::vector<ArgTemplate> items;
};
/// A Python callable `f(*operands)` that calls fn(*args, **kwargs) with the templates filled in.
PyRef makeFallbackCallable(PyObject *fn, const std::vector<ArgTemplate> &args,
                           const std::vector<std::pair<std::string, ArgTemplate>> &kwargs);
/// `callable` (a fallback callable whose tuple result holds None at `nones`) returning the
/// tensors only; None at other positions at run time raises.
PyRef dropNones(PyObject *callable, const std::vector<Py_ssize_t> &nones);
/// torch.empty(sizes, dtype=..., device="meta") for fallback shape inference.
PyRef metaTensor(DType dtype, const std::vector<int64_t> &sizes);
/// Forgets the view replays of the outputs just built (analyzer_output.cpp: the replays of one
/// call share their steps, so that views eager made of one copy stay views of one copy).
void clearInputViewReplays();

} // namespace xjit::frontend
