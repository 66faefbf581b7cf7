// Marks f32 products that PyTorch would run in bf16: with its mkldnn matmul precision "bf16"
// (torch.set_float32_matmul_precision("medium"), torch.backends.mkldnn.matmul.fp32_precision)
// eager's matmul, mm, bmm, linear, addmm, baddbmm and attention round their f32 operands to bf16
// and accumulate in f32 (oneDNN's fpmath mode bf16, AMX or AVX512-BF16 where the CPU has them).
// The frontend runs this pass only on graphs captured under that setting; it sets `fpmath =
// "bf16"` on those ops, and the backend gives their oneDNN primitives the same fpmath mode
// (where eager's size rule would: more than 16^3 multiply-adds). Products left unmarked, or
// computed by other kernels (a single-row product's multiply-sum loop), stay exact f32: never
// less precise than eager's.
#include "passes.h"

#include <set>
#include <string>

namespace xjit::passes {

bool runBf16Products(Graph &g, PassContext &ctx) {
  static const std::set<std::string, std::less<>> kProducts = {
      "matmul", "mm", "bmm", "linear", "addmm", "baddbmm", "scaled_dot_product_attention"};
  bool changed = false;
  g.walk([&](Op *op) {
    if (!kProducts.count(op->name()) || op->hasAttr("fpmath") || op->numResults() != 1 ||
        !op->result()->type().isTensor() || op->result()->type().dtype() != DType::F32)
      return;
    op->setAttr("fpmath", Attr(std::string("bf16")));
    ctx.count("products-marked");
    changed = true;
  });
  return changed;
}

} // namespace xjit::passes
