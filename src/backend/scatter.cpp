// scatter, scatter_add and scatter_reduce on the CPU target. The reference kernel walks the index
// element by element through generic index arithmetic and doubles (3.5x slower than eager's
// scatter_add on a [20000, 64] index). Here typed loops go over the index in row-major order,
// split over the kernel threads along a dim other than `dim`: a result element is written only
// by the index positions that share its other coordinates, so the parts write disjoint elements
// and each element takes its values in the reference's (and eager's) order, in the result's
// dtype: the reference kernel's results bit for bit. Anything else (0-d tensors, an index larger
// than self or src where it may not be, an index out of range, other dtypes) runs the reference
// kernel, which also raises the op's errors.
#include "scatter.h"

#include "ops/movement_util.h"         // scatterReduceOf
#include "xjit/backend/host_buffers.h" // hostTensor
#include "xjit/backend/jit.h"          // parallelCopy, parallelParts, parallelRanges
#include "xjit/ir/builder.h"

#include <atomic>
#include <cmath>
#include <limits>
#include <optional>

namespace xjit::backend {
namespace {

using ops::mv::ScatterReduce;

template <class T> T combine(T a, T b, ScatterReduce r) {
  switch (r) {
  case ScatterReduce::None: return b;
  case ScatterReduce::Sum:
  case ScatterReduce::Mean: return a + b;
  case ScatterReduce::Prod: return a * b;
  case ScatterReduce::Max:
    return std::isnan(a) || std::isnan(b) ? std::numeric_limits<T>::quiet_NaN() : std::max(a, b);
  case ScatterReduce::Min:
    return std::isnan(a) || std::isnan(b) ? std::numeric_limits<T>::quiet_NaN() : std::min(a, b);
  }
  return b;
}

/// One call's operands: `out` (contiguous, self's values), the index and src (or a value).
template <class T> struct Scatter {
  T *out;
  const int64_t *index;
  const T *src = nullptr; // null: `value` everywhere
  T value = 0;
  std::vector<int64_t> sizes, outStrides, indexStrides, srcStrides; // over the index's dims
  int64_t dim = 0, dimSize = 0;
  ScatterReduce reduce = ScatterReduce::None;
  int32_t *count = nullptr; // values combined per element (mean, include_self=false), else null

  /// The index positions whose dim `split` lies in [r0, r1), in row-major order; false at the
  /// first index out of range.
  bool run(size_t split, int64_t r0, int64_t r1) const {
    if (count) // a value replaces the element when it is the first combined there
      return loop(split, r0, r1, [this](T &e, T v, int64_t j) {
        e = combine(e, v, count[j] == 0 ? ScatterReduce::None : reduce);
        ++count[j];
      });
    switch (reduce) { // the reduction out of the inner loop
    case ScatterReduce::None: return loop(split, r0, r1, [](T &e, T v, int64_t) { e = v; });
    case ScatterReduce::Sum:
    case ScatterReduce::Mean: return loop(split, r0, r1, [](T &e, T v, int64_t) { e += v; });
    case ScatterReduce::Prod: return loop(split, r0, r1, [](T &e, T v, int64_t) { e *= v; });
    default: return loop(split, r0, r1, [this](T &e, T v, int64_t) { e = combine(e, v, reduce); });
    }
  }

  template <class Fold> bool loop(size_t split, int64_t r0, int64_t r1, Fold fold) const {
    const size_t rank = sizes.size(), last = rank - 1;
    if (r0 >= r1) return true;
    std::vector<int64_t> idx(rank, 0), lo(rank, 0), hi(sizes);
    lo[split] = idx[split] = r0;
    hi[split] = r1;
    const int64_t inner = hi[last] - lo[last], dimStride = outStrides[size_t(dim)];
    const int64_t xs = indexStrides[last], ss = src ? srcStrides[last] : 0;
    const int64_t os = int64_t(last) == dim ? 0 : outStrides[last];
    while (true) {
      int64_t o = 0, x = 0, s = 0;
      for (size_t d = 0; d < rank; ++d) {
        if (int64_t(d) != dim) o += idx[d] * outStrides[d];
        x += idx[d] * indexStrides[d];
        if (src) s += idx[d] * srcStrides[d];
      }
      const int64_t *ix = index + x;
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t t = ix[i * xs];
        if (t < 0 || t >= dimSize) return false;
        const int64_t j = o + t * dimStride + i * os;
        fold(out[j], src ? src[s + i * ss] : value, j);
      }
      size_t d = last; // the odometer over the other dims
      while (d-- > 0) {
        if (++idx[d] < hi[d]) break;
        idx[d] = lo[d];
      }
      if (d == size_t(-1)) return true;
    }
  }
};

class ScatterExecutable : public Executable {
public:
  explicit ScatterExecutable(const Op &op)
      : reduce_(ops::mv::scatterReduceOf(op)), describe_(op.describe()) {
    dim_ = op.attr("dim").asInt();
    includeSelf_ = !op.attrOrNull("include_self") || op.attr("include_self").asBool();
    if (ops::hasAttrValue(op, "value")) value_ = op.attr("value").asNumber();
    // The reference kernel runs on a copy of the op in a graph of its own (the executable
    // outlives the graph it was compiled from).
    Builder b(reference_.body());
    std::vector<Value *> operands;
    for (const Value *v : op.operands())
      operands.push_back(reference_.addInput(v->type()));
    referenceOp_ = b.createWithTypes(op.name(), operands, {op.result(0)->type()}, op.attrs());
  }

  std::vector<RtValue> run(std::span<const RtValue> inputs) const override {
    const Tensor &self = inputs[0].tensor();
    Tensor out = hostTensor(self.dtype(), self.sizes());
    runInto(inputs, {&out, 1});
    return {RtValue(out)};
  }

  bool canRunInto() const override { return true; }
  void runInto(std::span<const RtValue> inputs, std::span<const Tensor> outputs) const override {
    const Tensor &out = outputs[0];
    if (!(out.dtype() == DType::F32 ? tryRun<float>(inputs, out)
                                    : out.dtype() == DType::F64 && tryRun<double>(inputs, out))) {
      std::vector<RtValue> r = referenceOp_->def().kernel(*referenceOp_, inputs);
      out.copyFrom(r[0].tensor());
    }
  }

  std::vector<std::pair<std::string, std::string>> dumpFiles() const override {
    return {{referenceOp_->name() + ".native", describe_ +
                                                   ": typed loops over the index on up to " +
                                                   std::to_string(kernelThreads()) + " threads\n"}};
  }

private:
  /// False where the reference kernel must run (and raise the op's error, if any).
  template <class T> bool tryRun(std::span<const RtValue> inputs, const Tensor &out) const {
    const Tensor &self = inputs[0].tensor(), &index = inputs[1].tensor();
    const bool hasSrc = inputs.size() > 2 && inputs[2].isTensor();
    const int64_t rank = self.rank();
    if (rank == 0 || index.rank() != rank || index.dtype() != DType::I64 ||
        self.dtype() != out.dtype() || out.sizes() != self.sizes() || !out.isContiguous())
      return false;
    const int64_t dim = dim_ < 0 ? dim_ + rank : dim_;
    if (dim < 0 || dim >= rank) return false;
    Scatter<T> s;
    if (hasSrc) {
      const Tensor &src = inputs[2].tensor();
      if (src.rank() != rank || src.dtype() != self.dtype()) return false;
      s.src = reinterpret_cast<const T *>(src.data());
      s.srcStrides = src.strides();
      for (int64_t d = 0; d < rank; ++d)
        if (index.size(d) > src.size(d)) return false;
    } else if (inputs.size() > 2 && !inputs[2].isNone()) {
      if (inputs[2].isTensor()) return false;
      s.value = static_cast<T>(inputs[2].toDouble());
    } else if (value_) {
      s.value = static_cast<T>(*value_);
    } else {
      return false;
    }
    for (int64_t d = 0; d < rank; ++d)
      if (d != dim && index.size(d) > self.size(d)) return false;
    parallelCopy(out, self);
    if (index.numel() == 0) return true;
    s.out = reinterpret_cast<T *>(out.data());
    s.index = reinterpret_cast<const int64_t *>(index.data());
    s.sizes = index.sizes();
    s.outStrides = out.strides();
    s.indexStrides = index.strides();
    s.dim = dim;
    s.dimSize = self.size(dim);
    s.reduce = reduce_;
    std::vector<int32_t> count;
    if (reduce_ == ScatterReduce::Mean || !includeSelf_) {
      count.assign(size_t(out.numel()), includeSelf_ ? 1 : 0);
      s.count = count.data();
    }
    // Split along the largest dim other than `dim` (none: one part).
    size_t split = size_t(dim);
    for (int64_t d = 0; d < rank; ++d)
      if (d != dim && (split == size_t(dim) || index.size(d) > index.size(int64_t(split))))
        split = size_t(d);
    const int64_t n = index.size(int64_t(split));
    const int64_t parts = split == size_t(dim) ? 1 : parallelParts(n, index.numel() / n);
    std::atomic<bool> inRange{true};
    parallelRanges(n, parts, [&](int64_t r0, int64_t r1) {
      if (!s.run(split, r0, r1)) inRange.store(false);
    });
    if (!inRange.load()) return false;
    if (reduce_ == ScatterReduce::Mean) {
      T *o = s.out;
      for (int64_t j = 0, e = out.numel(); j < e; ++j)
        o[j] = o[j] / static_cast<T>(std::max<int32_t>(count[size_t(j)], 1));
    }
    return true;
  }

  ScatterReduce reduce_;
  int64_t dim_ = 0;
  bool includeSelf_ = true;
  std::optional<double> value_;
  std::string describe_;
  Graph reference_{"scatter_reference"};
  Op *referenceOp_ = nullptr;
};

} // namespace

bool isScatter(const Op &op) {
  const std::string &n = op.name();
  return n == "scatter" || n == "scatter_add" || n == "scatter_reduce";
}

std::string whyNotScatter(const Op &op) {
  DType t = op.result(0)->type().dtype();
  if (t != DType::F32 && t != DType::F64) return op.name() + ": f32 and f64 only";
  if (op.operand(1)->type().dtype() != DType::I64) return op.name() + ": int64 index only";
  return "";
}

std::shared_ptr<const Executable> makeScatterExecutable(const Op &op) {
  return std::make_shared<ScatterExecutable>(op);
}

} // namespace xjit::backend
