// Running a lowered region: bind the region's inputs to the kernel's parameters, allocate the
// outputs with their run-time shapes, run.
#include "runtime_util.h"
#include "xjit/backend/jit.h"
#include "xjit/backend/lower.h"
#include "xjit/ir/op_registry.h"

namespace xjit::backend {

std::vector<RtValue> runLowered(const LoweredKernel &lk, const CompiledKernel &ck,
                                std::span<const RtValue> inputs) {
  const std::string &name = lk.kernel.name;
  if (inputs.size() != lk.inputTypes.size())
    throw KernelError(name + ": expected " + std::to_string(lk.inputTypes.size()) +
                      " inputs, got " + std::to_string(inputs.size()));
  std::vector<Tensor> buffers(lk.kernel.buffers.size());
  std::vector<RtValue> scalars(lk.kernel.scalars.size());
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
  std::vector<RtValue> outputs;
  for (size_t o = 0; o < lk.outputTypes.size(); ++o) {
    const Type &t = lk.outputTypes[o];
    std::vector<int64_t> sizes;
    for (const DimExpr &d : t.shape()) {
      auto v = d.evaluate(bindings);
      if (!v || *v < 0)
        throw KernelError(name + ": cannot size output " + std::to_string(o) + " (" + t.str() +
                          ") from the input shapes");
      sizes.push_back(*v);
    }
    Tensor out = Tensor::empty(t.dtype(), sizes);
    buffers[size_t(lk.outputBuffer[o])] = out;
    outputs.emplace_back(out);
  }
  ck.run(buffers, scalars);
  return outputs;
}

} // namespace xjit::backend
