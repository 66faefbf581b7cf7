// Linear resampling and its gradient on the CPU target. The kernels cut the work into units
// that own disjoint channels of the result (a batch element's block of channels), so they run
// on the kernel thread pool with no atomics and the same result on any number of threads; the
// result is uninitialized host memory (the forward writes every element, the gradient zeroes
// its channels before its adds).
#include "resample.h"

#include "ops/resample.h"
#include "xjit/backend/host_buffers.h"
#include "xjit/backend/jit.h" // parallelParts, parallelRanges

namespace xjit::backend {
namespace {

class LinearResampleExecutable : public Executable {
public:
  explicit LinearResampleExecutable(const Op &op)
      : attrs_(ops::nn::linearResampleAttrs(op)), describe_(op.describe()),
        backward_(op.name().ends_with("_backward")) {}

  std::vector<RtValue> run(std::span<const RtValue> inputs) const override {
    const Tensor &src = inputs[0].tensor();
    // A thread per ~32K elements of the larger side, as the compiled kernels' parallel loops.
    const int64_t parts = parallelParts(std::max(src.numel(), resultNumel(src)), 1);
    auto runner = [parts](int64_t units, const std::function<void(int64_t, int64_t)> &fn) {
      parallelRanges(units, parts, fn);
    };
    return {RtValue(backward_
                        ? ops::nn::upsampleLinearBackward(attrs_, src, hostTensor, parts, runner)
                        : ops::nn::upsampleLinear(attrs_, src, hostTensor, parts, runner))};
  }

  std::vector<std::pair<std::string, std::string>> dumpFiles() const override {
    return {{attrs_.op + ".native", describe_ + ": the op's kernel in units, on up to " +
                                        std::to_string(kernelThreads()) + " threads\n"}};
  }

private:
  int64_t resultNumel(const Tensor &src) const {
    int64_t n = src.rank() >= 2 ? src.size(0) * src.size(1) : 0;
    for (int64_t s : backward_ ? attrs_.inputSize : attrs_.outputSize)
      n *= s;
    return n;
  }

  ops::nn::LinearResampleAttrs attrs_;
  std::string describe_;
  bool backward_;
};

} // namespace

bool isLinearResample(const Op &op) {
  std::string_view n = op.name();
  if (n.ends_with("_backward")) n.remove_suffix(9);
  return n == "upsample_linear1d" || n == "upsample_bilinear2d" || n == "upsample_trilinear3d";
}

std::string whyNotLinearResample(const Op &op) {
  DType t = op.operand(0)->type().dtype();
  return t == DType::F32 || t == DType::F64 ? "" : op.name() + ": f32 and f64 only";
}

std::shared_ptr<const Executable> makeLinearResampleExecutable(const Op &op) {
  return std::make_shared<LinearResampleExecutable>(op);
}

} // namespace xjit::backend
