// Group-norm decomposition: group_norm(x [N, C, spatial...], G) normalizes each sample's
// channel groups, which is a layer norm over the rows of x viewed as [N, G, C/G * spatial]:
//   y = reshape(layer_norm(reshape(x, [N, G, L]), [L], eps), x's shape) * w[C, 1...] + b[C, 1...]
// The layer norm and the affine map are native loop kernels (a row op, then elementwise), where
// the reference kernel computes in double element by element (~1 ms per call on wav2vec2's
// feature encoder). Both compute the mean and the biased variance of a row; the native row op
// accumulates in f32 (f64 for f64), as eager's CPU kernel does, so results agree with eager
// within f32 rounding. Left alone: symbolic sizes, dtypes other than f32/f64, parameters of
// another dtype than x, inputs of rank < 2 or channels not divisible by the groups (the
// reference kernel reports those).
#include "passes.h"
#include "semantic_util.h"

#include "xjit/ir/builder.h"

namespace xjit::passes {
namespace {

bool decompose(Op *gn, PassContext &ctx) {
  Value *x = gn->operand(0);
  const Type &xt = x->type();
  DType dt = xt.dtype();
  if (!xt.isTensor() || (dt != DType::F32 && dt != DType::F64) || xt.rank() < 2) return false;
  std::optional<std::vector<int64_t>> sizes = staticSizes(x);
  if (!sizes) return false;
  const std::vector<int64_t> &shape = *sizes;
  const int64_t groups = gn->attr("num_groups").asInt(), channels = shape[1];
  if (groups <= 0 || channels % groups != 0) return false;
  int64_t row = channels / groups;
  for (size_t d = 2; d < shape.size(); ++d)
    row *= shape[d];
  std::vector<Value *> params; // weight, bias: [C] of x's dtype
  for (size_t i = 1; i < 3; ++i) {
    Value *p = gn->numOperands() > i ? gn->operand(i) : nullptr;
    if (p && p->type().kind() == TypeKind::None) p = nullptr;
    if (p && (!p->type().isTensor() || p->type().dtype() != dt || p->type().rank() != 1))
      return false;
    params.push_back(p);
  }
  const double eps = gn->attrOrNull("eps") ? gn->attrOrNull("eps")->asNumber() : 1e-5;

  Builder b(gn->parentBlock(), gn);
  b.setLoc(gn->loc());
  Value *rows = b.op("reshape", {x}, {{"shape", std::vector<int64_t>{shape[0], groups, row}}});
  Value *normed =
      b.op("layer_norm", {rows}, {{"normalized_shape", std::vector<int64_t>{row}}, {"eps", eps}});
  Value *y = b.op("reshape", {normed}, {{"shape", shape}});
  std::vector<int64_t> perChannel(shape.size() - 1, 1); // [C, 1...] against [N, C, spatial...]
  perChannel[0] = channels;
  if (params[0]) y = b.op("mul", {y, b.op("reshape", {params[0]}, {{"shape", perChannel}})});
  if (params[1]) y = b.op("add", {y, b.op("reshape", {params[1]}, {{"shape", perChannel}})});
  if (!replaceIfSameType(gn, y)) return false;
  ctx.count("group-norms-decomposed");
  return true;
}

} // namespace

bool runDecomposeGroupNorm(Graph &g, PassContext &ctx) {
  bool changed = false;
  for (Op *op : opsNamed(g, "group_norm"))
    changed |= decompose(op, ctx);
  return changed;
}

} // namespace xjit::passes
