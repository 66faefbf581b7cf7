// The runtime's part of the nanobind module xjit._xjit (compile, CompiledGraph).
#pragma once

#include <nanobind/nanobind.h>

namespace xjit::py {

void bindRuntime(nanobind::module_ &m);

} // namespace xjit::py
