// scatter, scatter_add and scatter_reduce on the CPU target: a native loop over the index in
// place of the reference kernel's element-by-element walk.
#pragma once

#include "xjit/backend/target.h"

namespace xjit::backend {

bool isScatter(const Op &op);
/// "" when the executable runs op (f32 / f64 self, int64 index), else why not.
std::string whyNotScatter(const Op &op);
std::shared_ptr<const Executable> makeScatterExecutable(const Op &op);

} // namespace xjit::backend
