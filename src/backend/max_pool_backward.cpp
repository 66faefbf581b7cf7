// max_pool{1,2,3}d_backward on the CPU target. The op's kernel cuts the work into units that own
// disjoint parts of dx (a batch element's block of channels), so they run on the kernel thread
// pool with no atomics and give the reference kernel's dx bit for bit; its result is
// uninitialized host memory, which the units zero-fill row by row before their adds.
#include "max_pool_backward.h"

#include "ops/nn_window.h" // maxPoolBackwardDx
#include "xjit/backend/host_buffers.h"
#include "xjit/backend/jit.h" // parallelParts, parallelRanges

namespace xjit::backend {
namespace {

class MaxPoolBackwardExecutable : public Executable {
public:
  explicit MaxPoolBackwardExecutable(const Op &op)
      : attrs_(ops::nn::maxPoolGradAttrs(op)), describe_(op.describe()) {}

  std::vector<RtValue> run(std::span<const RtValue> inputs) const override {
    const Tensor &gy = inputs[0].tensor(), &x = inputs[1].tensor();
    // A thread per ~32K elements of x, as the compiled kernels' parallel loops.
    const int64_t parts = parallelParts(x.numel(), 1);
    Tensor dx = ops::nn::maxPoolBackwardDx(
        attrs_, gy, x, hostTensor, parts,
        [parts](int64_t units, const std::function<void(int64_t, int64_t)> &fn) {
          parallelRanges(units, parts, fn);
        });
    return {RtValue(dx)};
  }

  std::vector<std::pair<std::string, std::string>> dumpFiles() const override {
    return {{attrs_.op + ".native", describe_ + ": the op's kernel in units, on up to " +
                                        std::to_string(kernelThreads()) + " threads\n"}};
  }

private:
  ops::nn::MaxPoolGradAttrs attrs_;
  std::string describe_;
};

} // namespace

bool isMaxPoolBackward(const Op &op) {
  const std::string &n = op.name();
  return n == "max_pool1d_backward" || n == "max_pool2d_backward" || n == "max_pool3d_backward";
}

std::string whyNotMaxPoolBackward(const Op &op) {
  DType t = op.operand(1)->type().dtype();
  return t == DType::F32 || t == DType::F64 ? "" : op.name() + ": f32 and f64 only";
}

std::shared_ptr<const Executable> makeMaxPoolBackwardExecutable(const Op &op) {
  return std::make_shared<MaxPoolBackwardExecutable>(op);
}

} // namespace xjit::backend
