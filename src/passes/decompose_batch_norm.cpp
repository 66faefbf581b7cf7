// Batch-norm decomposition: an eval-mode batch_norm whose parameters are run-time values (a
// module's parameters reach the compiler as graph inputs, so `freeze` cannot fold them) becomes
// the per-channel affine map it applies, y = x * scale + shift with
//   scale = weight * rsqrt(running_var + eps),  shift = bias - running_mean * scale
// computed on the [C] vectors and viewed as [C, 1, ...]. The fuse pass then takes the mul and
// add as binary post-ops of the convolution that produces x (one pass over the activation,
// inside oneDNN), and the tiny [C] ops as one small kernel, instead of the reference kernel,
// which computes in double over the whole activation.
//
// This is how PyTorch's own CPU kernel computes eval-mode batch norm (alpha/beta per channel),
// so results agree with eager within f32 rounding, not bit for bit with the reference, which
// evaluates (x - mean) / sqrt(var + eps) * w + b in double.
// Training mode (batch_norm with training=true, batch_norm_with_update: a training step's
// forward) decomposes the same way with the batch statistics, as PyTorch's CPU kernel computes
// them: mean and biased variance per channel accumulated in f64 as eager's are (native
// reductions, each in two stages: batchStatistics in semantic_util.h), alpha = w / sqrt(var +
// eps), beta = b - mean * alpha in f64 rounded once, y = x * alpha + beta; batch_norm_with_update's
// new running statistics are (1 - m) * running + m * batch statistic, the variance unbiased (x n /
// (n-1)). Not bit for bit with eager: within f32 rounding of it. Left alone: missing running stats
// in eval mode, a training batch of one value per channel (eager raises; the reference kernel
// raises too), dtypes other than f32/f64 (in eval mode a bf16/f16 input with f32 parameters, as
// torch.autocast makes, computes x * scale + shift in f32 and rounds once, like eager's kernel),
// parameters of another dtype than x.
#include "passes.h"
#include "semantic_util.h"

#include "xjit/ir/builder.h"

namespace xjit::passes {
namespace {

bool present(const Op &op, size_t i) {
  return op.numOperands() > i && op.operand(i)->type().isTensor();
}

bool decomposeTraining(Op *bn, PassContext &ctx);

/// An f32/f64 input of rank >= 2 and 1-D weight, bias and statistics of its dtype (where given);
/// with `lowInput`, also a bf16/f16 input with f32 parameters (torch.autocast's convolutions feed
/// batch norm bf16 activations).
bool operandsDecompose(const Op &bn, bool lowInput = false) {
  const Type &xt = bn.operand(0)->type();
  DType dt = xt.dtype();
  if (lowInput && (dt == DType::BF16 || dt == DType::F16))
    dt = DType::F32;
  else if (dt != DType::F32 && dt != DType::F64)
    return false;
  if (xt.rank() < 2) return false;
  for (size_t i = 1; i < 5; ++i) {
    if (!present(bn, i)) continue;
    const Type &pt = bn.operand(i)->type();
    if (pt.dtype() != dt || pt.rank() != 1) return false;
  }
  return true;
}

bool decompose(Op *bn, PassContext &ctx) {
  const Attr *training = bn->attrOrNull("training");
  if (bn->name() == "batch_norm_with_update" || (training && training->asBool()))
    return decomposeTraining(bn, ctx);
  if (!present(*bn, 3) || !present(*bn, 4)) return false;
  Value *x = bn->operand(0);
  const Type &xt = x->type();
  if (!operandsDecompose(*bn, /*lowInput=*/true)) return false;
  std::optional<int64_t> channels = xt.shape()[1].staticValue();
  if (!channels) return false;
  double eps = bn->attrOrNull("eps")->asNumber();

  Builder b(bn->parentBlock(), bn);
  b.setLoc(bn->loc());
  Value *mean = bn->operand(3), *var = bn->operand(4);
  Value *scale = b.op("rsqrt", {b.op("add", {var, b.constantFloat(eps)})});
  if (present(*bn, 1)) scale = b.op("mul", {bn->operand(1), scale});
  Value *shift = b.op("neg", {b.op("mul", {mean, scale})});
  if (present(*bn, 2)) shift = b.op("add", {bn->operand(2), shift});
  // [C] -> [C, 1, ...] so that it broadcasts over the spatial dims of [N, C, spatial...].
  if (xt.rank() > 2) {
    std::vector<int64_t> shape(size_t(xt.rank() - 1), 1);
    shape[0] = *channels;
    scale = b.op("reshape", {scale}, {{"shape", shape}});
    shift = b.op("reshape", {shift}, {{"shape", shape}});
  }
  // A bf16/f16 x promotes to f32 against the f32 scale; rounded once, as eager's kernel does.
  Value *y = b.op("add", {b.op("mul", {x, scale}), shift});
  if (y->type().dtype() != xt.dtype()) y = b.op("cast", {y}, {{"dtype", xt.dtype()}});
  if (!replaceIfSameType(bn, y)) return false;
  ctx.count("batch-norms-decomposed");
  return true;
}

bool decomposeTraining(Op *bn, PassContext &ctx) {
  const bool update = bn->name() == "batch_norm_with_update";
  Value *x = bn->operand(0);
  const Type &xt = x->type();
  if (!operandsDecompose(*bn)) return false;
  if (update && (!present(*bn, 3) || !present(*bn, 4))) return false;
  // Per channel n = N * spatial values; one (or none) would divide by zero below.
  int64_t n = 1;
  for (int64_t d = 0; d < xt.rank(); ++d) {
    auto size = xt.shape()[size_t(d)].staticValue();
    if (!size) return false;
    if (d != 1) n *= *size;
  }
  const int64_t channels = xt.shape()[1].value();
  if (n < 2) return false;
  const double eps = bn->attrOrNull("eps")->asNumber();
  Builder b(bn->parentBlock(), bn);
  b.setLoc(bn->loc());
  std::vector<int64_t> perChannelShape(size_t(xt.rank()), 1);
  perChannelShape[1] = channels;
  auto channelwise = [&](Value *v) { return b.op("reshape", {v}, {{"shape", perChannelShape}}); };
  const BatchStatistics stats = batchStatistics(b, x); // [1, C, 1...]
  Value *mean = stats.mean, *var = stats.var;
  Value *alpha = b.op("rsqrt", {b.op("add", {var, b.constantFloat(eps)})});
  if (present(*bn, 1)) alpha = b.op("mul", {alpha, channelwise(bn->operand(1))});
  // beta = bias - mean * alpha from the f64 mean, rounded once: x * alpha is about mean * alpha
  // where the mean is large against the deviation, so beta's rounding is the output's error.
  auto wide = [&](Value *v) {
    return v->type().dtype() == DType::F64 ? v : b.op("cast", {v}, {{"dtype", DType::F64}});
  };
  Value *beta = b.op("neg", {b.op("mul", {stats.wideMean, wide(alpha)})});
  if (present(*bn, 2)) beta = b.op("add", {wide(channelwise(bn->operand(2))), beta});
  if (xt.dtype() != DType::F64) beta = b.op("cast", {beta}, {{"dtype", xt.dtype()}});
  Value *y = b.op("add", {b.op("mul", {x, alpha}), beta});
  std::vector<Value *> results = {y};
  if (update) {
    const double m = bn->attrOrNull("momentum")->asNumber();
    auto flat = [&](Value *v) {
      return b.op("reshape", {v}, {{"shape", std::vector<int64_t>{channels}}});
    };
    auto blend = [&](Value *running, Value *batch, double scale) {
      return b.op("add", {b.op("mul", {running, b.constantFloat(1.0 - m)}),
                          b.op("mul", {flat(batch), b.constantFloat(m * scale)})});
    };
    results.push_back(blend(bn->operand(3), mean, 1.0));
    results.push_back(blend(bn->operand(4), var, double(n) / double(n - 1)));
  }
  for (size_t i = 0; i < results.size(); ++i)
    if (results[i]->type() != bn->result(i)->type()) {
      for (Value *r : results)
        eraseIfDead(r->definingOp());
      return false;
    }
  for (size_t i = 0; i < results.size(); ++i)
    results[i]->setName(bn->result(i)->name());
  replaceOp(bn, results);
  ctx.count("batch-norms-decomposed");
  return true;
}

} // namespace

bool runDecomposeBatchNorm(Graph &g, PassContext &ctx) {
  bool changed = false;
  for (const char *name : {"batch_norm", "batch_norm_with_update"})
    for (Op *op : opsNamed(g, name))
      changed |= decompose(op, ctx);
  return changed;
}

} // namespace xjit::passes
