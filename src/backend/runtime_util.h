// Run-time shape checks shared by the kernel launcher and runLowered: binding the shape symbols
// of declared types to the sizes of actual tensors.
#pragma once

#include "xjit/ir/dim.h"

#include <cstdint>
#include <string>
#include <vector>

namespace xjit::backend {

/// Checks static dims and binds dims that are one atom (a symbol s0, or a floor division such
/// as (s0+1)//2) to the actual sizes, or checks them against an earlier binding. Returns "" or
/// what does not fit.
std::string bindShape(SymbolBindings &bindings, const Shape &declared,
                      const std::vector<int64_t> &actual);
/// After every bindShape: checks compound dims (s0*2) whose atoms are bound.
std::string checkShape(const SymbolBindings &bindings, const Shape &declared,
                       const std::vector<int64_t> &actual);

} // namespace xjit::backend
