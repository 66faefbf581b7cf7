// Poolings through oneDNN's pooling_v2 primitive (dilation support): max_pool{1,2,3}d,
// avg_pool{1,2,3}d (count_include_pad or not), and the adaptive poolings when every window has
// the same size (input divisible by the output, e.g. global pooling). The `_with_indices`
// variants and divisor_override stay on the reference kernel.
//
// ceil_mode is expressed as extra right padding; for an average that counts padding the
// divisor then differs from PyTorch's (which clips windows at the padded border), so such
// shapes run the reference kernel. Max pooling: oneDNN does not propagate NaN the way PyTorch
// does (docs/backend.md).
#include "dnnl_kernels.h"

#include "ops/nn_util.h"
#include "ops/op_util.h"
#include "xjit/ir/op_registry.h"

#include <sstream>

namespace xjit::backend::dnnl_kernels {
namespace {

enum class PoolKind { Max, Avg, AdaptiveMax, AdaptiveAvg };

struct PoolSpec {
  std::string name;
  size_t nd = 2;
  PoolKind kind = PoolKind::Max;
  Dims kernel, stride, padding, dilation, outputSize;
  bool ceil = false, includePad = true, channelsLast = false;
  Source x;
  DType dtype = DType::F32;
};

int64_t floorDiv(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
int64_t ceilDiv(int64_t a, int64_t b) { return -floorDiv(-a, b); }

class PoolPlan : public Plan {
public:
  dnnl::pooling_v2_forward prim;
  std::string impl;
  const PoolSpec *spec = nullptr;
  memory::desc srcDesc, dstDesc;
  Densify toSrc;

  void run(std::span<const RtValue> in, const Tensor &out) const override {
    Tensor x = tensorOf(spec->x, in);
    if (toSrc) x = toSrc(x, spec->dtype);
    std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, wrap(srcDesc, x)},
                                            {DNNL_ARG_DST, wrap(dstDesc, out)}};
    execute(prim, args);
  }
  std::string info() const override { return impl; }
};

class PoolKernel : public LibraryKernel {
public:
  explicit PoolKernel(PoolSpec s) : s_(std::move(s)) {}

  std::string describe() const override {
    return "oneDNN pooling for " + s_.name + " (" + std::string(dtypeName(s_.dtype)) + ", " +
           (s_.channelsLast ? "channels-last" : "channels-first") + ")";
  }

  std::unique_ptr<Plan> makePlan(std::span<const RtValue> in) const override {
    Tensor X = tensorOf(s_.x, in);
    size_t nd = s_.nd;
    if (X.numel() == 0) throw InternalKernelError("pool: empty input");
    bool unbatched = static_cast<size_t>(X.rank()) == nd + 1;
    DimMap map = spatialMap(nd, unbatched, s_.channelsLast);
    Dims xs = X.sizes(), xst = X.strides();
    map.apply(xs, xst);
    bool adaptive = s_.kind == PoolKind::AdaptiveMax || s_.kind == PoolKind::AdaptiveAvg;
    bool isMax = s_.kind == PoolKind::Max || s_.kind == PoolKind::AdaptiveMax;
    memory::dims kernel, strides, dilation, padL, padR;
    Dims out = {xs[0], xs[1]};
    for (size_t d = 0; d < nd; ++d) {
      int64_t L = xs[2 + d];
      if (adaptive) {
        int64_t o = s_.outputSize[d] < 0 ? L : s_.outputSize[d];
        if (o <= 0 || L % o != 0) throw InternalKernelError("adaptive pool: uneven windows");
        kernel.push_back(L / o);
        strides.push_back(L / o);
        dilation.push_back(0);
        padL.push_back(0);
        padR.push_back(0);
        out.push_back(o);
        continue;
      }
      int64_t k = s_.kernel[d], s = s_.stride[d], p = s_.padding[d], dil = s_.dilation[d];
      int64_t eff = dil * (k - 1) + 1, n = L + 2 * p - eff;
      int64_t o = (s_.ceil ? ceilDiv(n, s) : floorDiv(n, s)) + 1;
      if (s_.ceil && (o - 1) * s >= L + p) --o;
      if (o < 1) throw KernelError("pool: output too small");
      int64_t pr = std::max(p, (o - 1) * s + eff - L - p);
      if (pr > p && !isMax && s_.includePad)
        throw InternalKernelError("avg pool: ceil_mode window past the padding (divisor differs)");
      if ((L - eff + p + pr) / s + 1 != o) throw InternalKernelError("pool: output size mismatch");
      kernel.push_back(k);
      strides.push_back(s);
      dilation.push_back(dil - 1);
      padL.push_back(p);
      padR.push_back(pr);
      out.push_back(o);
    }
    Dims result = out;
    if (s_.channelsLast) {
      result.erase(result.begin() + 1);
      result.push_back(out[1]);
    }
    if (unbatched) result.erase(result.begin());
    Dims ds = result, dst = contiguousStrides(result);
    map.apply(ds, dst);

    memory::data_type dt = *dnnlType(s_.dtype);
    auto plan = std::make_unique<PoolPlan>();
    plan->spec = &s_;
    plan->resultSizes = result;
    plan->dtype = s_.dtype;
    memory::desc srcUser = stridedDesc(xs, xst, dt);
    if (isDense(X)) {
      plan->srcDesc = srcUser;
    } else { // dense in the op's layout, like the result
      Dims ir = X.sizes(), st = contiguousStrides(ir);
      map.apply(ir, st);
      plan->srcDesc = stridedDesc(ir, st, dt);
      plan->toSrc = Densify(srcUser, plan->srcDesc);
    }
    plan->dstDesc = stridedDesc(ds, dst, dt);
    dnnl::algorithm alg = isMax           ? dnnl::algorithm::pooling_max
                          : s_.includePad ? dnnl::algorithm::pooling_avg_include_padding
                                          : dnnl::algorithm::pooling_avg_exclude_padding;
    dnnl::pooling_v2_forward::desc desc(dnnl::prop_kind::forward_inference, alg, plan->srcDesc,
                                        plan->dstDesc, strides, kernel, dilation, padL, padR);
    dnnl::pooling_v2_forward::primitive_desc pd(desc, userScratchpad(), cpuEngine());
    plan->impl = pd.impl_info_str();
    plan->prim = dnnl::pooling_v2_forward(pd);
    return plan;
  }

private:
  PoolSpec s_;
};

PoolKind poolKind(const std::string &n) {
  if (n.rfind("max_pool", 0) == 0) return PoolKind::Max;
  if (n.rfind("avg_pool", 0) == 0) return PoolKind::Avg;
  if (n.rfind("adaptive_max_pool", 0) == 0) return PoolKind::AdaptiveMax;
  return PoolKind::AdaptiveAvg;
}

} // namespace

std::string whyNotPool(const CallIR &call) {
  const Op &op = *call.anchor;
  if (poolKind(op.name()) == PoolKind::Avg && ops::hasAttrValue(op, "divisor_override"))
    return op.name() + ": divisor_override";
  return "";
}

std::unique_ptr<LibraryKernel> makePoolKernel(const CallIR &call) {
  const Op &op = *call.anchor;
  PoolSpec s;
  s.name = op.name();
  s.kind = poolKind(s.name);
  s.nd = static_cast<size_t>(s.name[s.name.size() - 2] - '0');
  if (s.kind == PoolKind::AdaptiveMax || s.kind == PoolKind::AdaptiveAvg) {
    s.outputSize = ops::nn::spatialInts(op, "output_size", s.nd, -1);
  } else {
    s.kernel = ops::nn::spatialInts(op, "kernel_size", s.nd, 1);
    s.stride = ops::attrInts(op, "stride").empty() ? s.kernel
                                                   : ops::nn::spatialInts(op, "stride", s.nd, 1);
    s.padding = ops::nn::spatialInts(op, "padding", s.nd, 0);
    s.dilation =
        s.kind == PoolKind::Max ? ops::nn::spatialInts(op, "dilation", s.nd, 1) : Dims(s.nd, 1);
    s.ceil = ops::attrBool(op, "ceil_mode");
    if (s.kind == PoolKind::Avg) s.includePad = ops::attrBool(op, "count_include_pad");
  }
  s.channelsLast = ops::attrStr(op, "layout") == "nhwc";
  s.x = call.operands[0];
  s.dtype = call.resultType.dtype();
  return std::make_unique<PoolKernel>(std::move(s));
}

} // namespace xjit::backend::dnnl_kernels
