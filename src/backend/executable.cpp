// Executable's default runInto: run, then copy the results into the caller's buffers (targets
// whose kernels write into given memory override it and report canRunInto()).
#include "xjit/backend/target.h"
#include "xjit/ir/op_registry.h"

namespace xjit::backend {

void Executable::runInto(std::span<const RtValue> inputs, std::span<const Tensor> outputs) const {
  std::vector<RtValue> results = run(inputs);
  if (results.size() != outputs.size())
    throw InternalKernelError("executable returned " + std::to_string(results.size()) +
                              " results for " + std::to_string(outputs.size()) + " output buffers");
  for (size_t i = 0; i < results.size(); ++i) {
    if (!results[i].isTensor() || results[i].tensor().sizes() != outputs[i].sizes())
      throw InternalKernelError("result " + std::to_string(i) + " does not fit its output buffer");
    outputs[i].copyFrom(results[i].tensor());
  }
}

} // namespace xjit::backend
