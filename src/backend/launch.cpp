// Running a lowered region: bind the region's inputs to the kernel's parameters, allocate the
// outputs with their run-time shapes, run.
#include "runtime_util.h"
#include "xjit/backend/jit.h"
#include "xjit/backend/lower.h"
#include "xjit/ir/op_registry.h"

namespace xjit::backend {

namespace {

/// Binds the kernel's parameters to the region's inputs; returns the shape-symbol bindings.
SymbolBindings bindInputs(const LoweredKernel &lk, std::span<const RtValue> inputs,
                          std::vector<Tensor> &buffers, std::vector<RtValue> &scalars) {
  const std::string &name = lk.kernel.name;
  if (inputs.size() != lk.inputTypes.size())
    throw KernelError(name + ": expected " + std::to_string(lk.inputTypes.size()) +
                      " inputs, got " + std::to_string(inputs.size()));
  SymbolBindings bindings;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Type &t = lk.inputTypes[i];
    if (t.isTensor()) {
      if (!inputs[i].isTensor())
        throw KernelError(name + ": input " + std::to_string(i) + " must be a tensor, got " +
                          inputs[i].kindName());
      std::string why = bindShape(bindings, t.shape(), inputs[i].tensor().sizes());
      if (!why.empty()) throw KernelError(name + ": input " + std::to_string(i) + ": " + why);
    }
    if (lk.inputBuffer[i] >= 0) buffers[size_t(lk.inputBuffer[i])] = inputs[i].tensor();
    if (lk.inputScalar[i] >= 0) scalars[size_t(lk.inputScalar[i])] = inputs[i];
  }
  return bindings;
}

std::vector<int64_t> outputSizes(const LoweredKernel &lk, const SymbolBindings &bindings,
                                 size_t o) {
  const Type &t = lk.outputTypes[o];
  std::vector<int64_t> sizes;
  for (const DimExpr &d : t.shape()) {
    auto v = d.evaluate(bindings);
    if (!v || *v < 0)
      throw KernelError(lk.kernel.name + ": cannot size output " + std::to_string(o) + " (" +
                        t.str() + ") from the input shapes");
    sizes.push_back(*v);
  }
  return sizes;
}

} // namespace

std::vector<RtValue> runLowered(const LoweredKernel &lk, const CompiledKernel &ck,
                                std::span<const RtValue> inputs) {
  std::vector<Tensor> buffers(lk.kernel.buffers.size());
  std::vector<RtValue> scalars(lk.kernel.scalars.size());
  SymbolBindings bindings = bindInputs(lk, inputs, buffers, scalars);
  std::vector<RtValue> outputs;
  for (size_t o = 0; o < lk.outputTypes.size(); ++o) {
    Tensor out = Tensor::empty(lk.outputTypes[o].dtype(), outputSizes(lk, bindings, o));
    buffers[size_t(lk.outputBuffer[o])] = out;
    outputs.emplace_back(out);
  }
  ck.run(buffers, scalars);
  return outputs;
}

void runLoweredInto(const LoweredKernel &lk, const CompiledKernel &ck,
                    std::span<const RtValue> inputs, std::span<const Tensor> outputs) {
  std::vector<Tensor> buffers(lk.kernel.buffers.size());
  std::vector<RtValue> scalars(lk.kernel.scalars.size());
  SymbolBindings bindings = bindInputs(lk, inputs, buffers, scalars);
  if (outputs.size() != lk.outputTypes.size())
    throw KernelError(lk.kernel.name + ": expected " + std::to_string(lk.outputTypes.size()) +
                      " output buffers, got " + std::to_string(outputs.size()));
  for (size_t o = 0; o < outputs.size(); ++o) {
    const Tensor &out = outputs[o];
    if (out.dtype() != lk.outputTypes[o].dtype() || !out.isContiguous() ||
        out.sizes() != outputSizes(lk, bindings, o))
      throw KernelError(lk.kernel.name + ": output buffer " + std::to_string(o) +
                        " does not have the result's dtype and size, or is not contiguous");
    buffers[size_t(lk.outputBuffer[o])] = out;
  }
  ck.run(buffers, scalars);
}

} // namespace xjit::backend
