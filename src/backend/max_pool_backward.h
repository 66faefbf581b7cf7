// max_pool{1,2,3}d_backward on the CPU target: the op's kernel (src/ir/ops/max_pool_backward.cpp)
// run in units on the kernel thread pool.
#pragma once

#include "xjit/backend/target.h"

namespace xjit::backend {

bool isMaxPoolBackward(const Op &op);
/// "" when the executable runs op (f32 or f64), else why not.
std::string whyNotMaxPoolBackward(const Op &op);
std::shared_ptr<const Executable> makeMaxPoolBackwardExecutable(const Op &op);

} // namespace xjit::backend
