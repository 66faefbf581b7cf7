// Running a lowered region: bind the region's inputs to the kernel's parameters, allocate the
// outputs with their run-time shapes, run.
#include "runtime_util.h"
#include "xjit/backend/jit.h"
#include "xjit/backend/lower.h"
#include "xjit/ir/op_registry.h"

namespace xjit::backend {

namespace {

/// What the inputs say about the kernel's symbolic dims: the atoms bound by bindShape, and
/// every declared input dim with its actual size (a dim such as (s0-1)//2+1 is read back as
/// itself even when no atom of it is bound).
struct InputShapes {
  SymbolBindings bindings;
  std::vector<std::pair<const DimExpr *, int64_t>> dims;

  std::optional<int64_t> valueOf(const DimExpr &d) const {
    if (auto v = d.staticValue()) return v;
    for (const auto &[declared, actual] : dims)
      if (*declared == d) return actual;
    return d.evaluate(bindings);
  }
};

/// Binds the kernel's parameters to the region's inputs; returns their shapes.
InputShapes bindInputs(const LoweredKernel &lk, std::span<const RtValue> inputs,
                       std::vector<Tensor> &buffers, std::vector<RtValue> &scalars) {
  const std::string &name = lk.kernel.name;
  if (inputs.size() != lk.inputTypes.size())
    throw InternalKernelError(name + ": expected " + std::to_string(lk.inputTypes.size()) +
                              " inputs, got " + std::to_string(inputs.size()));
  InputShapes shapes;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Type &t = lk.inputTypes[i];
    if (t.isTensor()) {
      if (!inputs[i].isTensor())
        throw InternalKernelError(name + ": input " + std::to_string(i) +
                                  " must be a tensor, got " + inputs[i].kindName());
      const std::vector<int64_t> &sizes = inputs[i].tensor().sizes();
      std::string why = bindShape(shapes.bindings, t.shape(), sizes);
      if (!why.empty()) throw KernelError(name + ": input " + std::to_string(i) + ": " + why);
      for (size_t d = 0; d < sizes.size(); ++d)
        if (!t.shape()[d].isStatic()) shapes.dims.emplace_back(&t.shape()[d], sizes[d]);
    }
    if (lk.inputBuffer[i] >= 0) buffers[size_t(lk.inputBuffer[i])] = inputs[i].tensor();
    if (lk.inputScalar[i] >= 0) scalars[size_t(lk.inputScalar[i])] = inputs[i];
  }
  return shapes;
}

/// LoweredKernel::sameSize: dims a symbolic broadcast assumed equal must be equal now (PyTorch
/// would broadcast a 1 against n, or fail; the kernel would read past the size-1 operand or
/// size its result wrongly). A size that cannot be known from the inputs fails as well.
void checkSameSize(const LoweredKernel &lk, const InputShapes &shapes) {
  for (const auto &[a, b] : lk.sameSize) {
    std::optional<int64_t> va = shapes.valueOf(a), vb = shapes.valueOf(b);
    if (va && vb && *va == *vb) continue;
    auto show = [](const DimExpr &d, std::optional<int64_t> v) {
      return d.str() + (v ? " = " + std::to_string(*v) : " (not known from the inputs)");
    };
    throw KernelError(lk.kernel.name + ": symbolic broadcast: the kernel was compiled for " +
                      a.str() + " == " + b.str() + " (a broadcast of symbolic dims), but " +
                      show(a, va) + " and " + show(b, vb) + " at run time");
  }
}

std::vector<int64_t> outputSizes(const LoweredKernel &lk, const InputShapes &shapes, size_t o) {
  const Type &t = lk.outputTypes[o];
  std::vector<int64_t> sizes;
  for (const DimExpr &d : t.shape()) {
    auto v = shapes.valueOf(d);
    if (!v || *v < 0)
      throw InternalKernelError(lk.kernel.name + ": cannot size output " + std::to_string(o) +
                                " (" + t.str() + ") from the input shapes");
    sizes.push_back(*v);
  }
  return sizes;
}

/// Outputs computed in place of an input (BufferParam::aliasOf): the kernel reads that input
/// through the output's memory. Where the caller gave the output memory of its own, the input is
/// copied into it first (the input itself is then not written).
void bindInPlaceOutputs(const LoweredKernel &lk, std::vector<Tensor> &buffers) {
  for (int64_t b : lk.outputBuffer) {
    const int64_t in = lk.kernel.buffers[size_t(b)].aliasOf;
    if (in < 0) continue;
    Tensor &out = buffers[size_t(b)];
    Tensor &source = buffers[size_t(in)];
    if (source.data() == out.data() && source.strides() == out.strides()) continue;
    out.copyFrom(source);
    source = out;
  }
}

} // namespace

std::vector<RtValue> runLowered(const LoweredKernel &lk, const CompiledKernel &ck,
                                std::span<const RtValue> inputs) {
  std::vector<Tensor> buffers(lk.kernel.buffers.size());
  std::vector<RtValue> scalars(lk.kernel.scalars.size());
  InputShapes shapes = bindInputs(lk, inputs, buffers, scalars);
  checkSameSize(lk, shapes);
  std::vector<RtValue> outputs;
  for (size_t o = 0; o < lk.outputTypes.size(); ++o) {
    Tensor out = Tensor::empty(lk.outputTypes[o].dtype(), outputSizes(lk, shapes, o));
    buffers[size_t(lk.outputBuffer[o])] = out;
    outputs.emplace_back(out);
  }
  bindInPlaceOutputs(lk, buffers);
  ck.run(buffers, scalars);
  return outputs;
}

void runLoweredInto(const LoweredKernel &lk, const CompiledKernel &ck,
                    std::span<const RtValue> inputs, std::span<const Tensor> outputs) {
  std::vector<Tensor> buffers(lk.kernel.buffers.size());
  std::vector<RtValue> scalars(lk.kernel.scalars.size());
  InputShapes shapes = bindInputs(lk, inputs, buffers, scalars);
  checkSameSize(lk, shapes);
  if (outputs.size() != lk.outputTypes.size())
    throw InternalKernelError(lk.kernel.name + ": expected " +
                              std::to_string(lk.outputTypes.size()) + " output buffers, got " +
                              std::to_string(outputs.size()));
  for (size_t o = 0; o < outputs.size(); ++o) {
    const Tensor &out = outputs[o];
    if (out.dtype() != lk.outputTypes[o].dtype() || !out.isContiguous() ||
        out.sizes() != outputSizes(lk, shapes, o))
      throw InternalKernelError(lk.kernel.name + ": output buffer " + std::to_string(o) +
                                " does not have the result's dtype and size, or is not contiguous");
    buffers[size_t(lk.outputBuffer[o])] = out;
  }
  bindInPlaceOutputs(lk, buffers);
  ck.run(buffers, scalars);
}

} // namespace xjit::backend
