// Entry points of the passes, one per file in this folder; the table in pass_table.cpp names
// them. Internal to the passes layer.
#pragma once

#include "xjit/passes/pass.h"

namespace xjit::passes {

// Each: bool run<Name>(Graph &g, PassContext &ctx) -- returns whether g changed.
// (declarations are added next to the rows of pass_table.cpp, grouped by file)

/// Copies custom_vjp `op`'s forward region before it and points its results' uses at the copy's
/// outputs; returns the values the region yields (the outputs, then the saved values;
/// inline_custom_vjp.cpp; autodiff's rule for the op uses it too).
std::vector<Value *> inlineCustomVjpForward(Op &op);

} // namespace xjit::passes
