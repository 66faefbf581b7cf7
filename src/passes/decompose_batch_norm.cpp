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
// Left alone: training mode, missing running stats, dtypes other than f32/f64 (f16/bf16 inputs
// have f32 parameters and round once in the reference), parameters of another dtype than x.
#include "passes.h"
#include "semantic_util.h"

#include "xjit/ir/builder.h"

namespace xjit::passes {
namespace {

bool present(const Op &op, size_t i) {
  return op.numOperands() > i && op.operand(i)->type().isTensor();
}

bool decompose(Op *bn, PassContext &ctx) {
  const Attr *training = bn->attrOrNull("training");
  if (training && training->asBool()) return false;
  if (!present(*bn, 3) || !present(*bn, 4)) return false;
  Value *x = bn->operand(0);
  const Type &xt = x->type();
  DType dt = xt.dtype();
  if ((dt != DType::F32 && dt != DType::F64) || xt.rank() < 2) return false;
  for (size_t i = 1; i < 5; ++i) {
    if (!present(*bn, i)) continue;
    const Type &pt = bn->operand(i)->type();
    if (pt.dtype() != dt || pt.rank() != 1) return false;
  }
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
  Value *y = b.op("add", {b.op("mul", {x, scale}), shift});
  if (!replaceIfSameType(bn, y)) return false;
  ctx.count("batch-norms-decomposed");
  return true;
}

} // namespace

bool runDecomposeBatchNorm(Graph &g, PassContext &ctx) {
  bool changed = false;
  for (Op *op : opsNamed(g, "batch_norm"))
    changed |= decompose(op, ctx);
  return changed;
}

} // namespace xjit::passes
