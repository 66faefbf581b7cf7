// The elementwise op family: unary math and activations, binary arithmetic / comparison / logical /
// bitwise ops over tensor-or-scalar operands, and clamp, where, cast, lerp, addcmul, addcdiv. The
// rows live in elementwise_{unary,binary,misc}.cpp.
#include "ops/elementwise_util.h"

namespace xjit {

void registerElementwiseOps(OpRegistry &r) {
  ops::ew::registerUnaryOps(r);
  ops::ew::registerBinaryOps(r);
  ops::ew::registerMiscOps(r);
}

} // namespace xjit
