// Half-precision products in f32: a linear, matmul, mm, bmm, addmm, baddbmm or convolution
// (fuse_rules::isLibraryProduct) whose floating operands are all f16 gets them cast to f32 and
// its result cast back to f16, so that it runs on the f32 library kernels: oneDNN has no f16
// products on CPUs without AVX512-FP16 (torch.autocast(dtype=torch.float16) on BERT-base ran
// every linear on the reference kernel, 75-350 ms each). The same values as an f16 product with
// f32 accumulation: every f16 value is an f32 value, and the result is rounded to f16 once.
#include "fuse_rules.h"
#include "passes.h"
#include "semantic_util.h"

#include "xjit/ir/builder.h"

#include <vector>

namespace xjit::passes {
namespace {

bool widen(Op *op, PassContext &ctx) {
  if (op->numResults() != 1 || !op->result()->type().isTensor() ||
      op->result()->type().dtype() != DType::F16)
    return false;
  for (Value *v : op->operands())
    if (v->type().isTensor() && isFloating(v->type().dtype()) && v->type().dtype() != DType::F16)
      return false;
  Builder b(op->parentBlock(), op);
  b.setLoc(op->loc());
  std::vector<Value *> operands;
  for (Value *v : op->operands())
    operands.push_back(v->type().isTensor() && v->type().dtype() == DType::F16
                           ? b.op("cast", {v}, {{"dtype", DType::F32}})
                           : v);
  Op *wide = b.create(op->name(), operands, op->attrs());
  Value *back = b.op("cast", {wide->result()}, {{"dtype", DType::F16}});
  if (!replaceIfSameType(op, back)) return false;
  ctx.count("products-widened");
  return true;
}

} // namespace

bool runWidenHalfProducts(Graph &g, PassContext &ctx) {
  std::vector<Op *> ops;
  g.walk([&](Op *op) {
    if (fuse_rules::isLibraryProduct(op->name())) ops.push_back(op);
  });
  bool changed = false;
  for (Op *op : ops)
    changed |= widen(op, ctx);
  return changed;
}

} // namespace xjit::passes
