// upsample_linear1d / upsample_bilinear2d / upsample_trilinear3d and their gradients on the CPU
// target: the ops' one-pass kernels (src/ir/ops/resample.cpp) run in units on the kernel
// thread pool.
#pragma once

#include "xjit/backend/target.h"

namespace xjit::backend {

bool isLinearResample(const Op &op);
/// "" when the executable runs op (f32 or f64), else why not.
std::string whyNotLinearResample(const Op &op);
std::shared_ptr<const Executable> makeLinearResampleExecutable(const Op &op);

} // namespace xjit::backend
