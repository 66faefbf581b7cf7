// Entry points of the passes, one per file in this folder; the table in pass_table.cpp names
// them. Internal to the passes layer.
#pragma once

#include "xjit/passes/pass.h"

namespace xjit::passes {

// Each: bool run<Name>(Graph &g, PassContext &ctx) -- returns whether g changed.
// (declarations are added next to the rows of pass_table.cpp, grouped by file)

} // namespace xjit::passes
