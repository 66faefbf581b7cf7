// The pass table: every pass with its name, one-line summary, options and statistics.
#include "passes.h"

namespace xjit::passes {

// Entry points (one file each in src/passes).
// -- cleanup passes --
// -- semantic passes (freezing, device erasure, functionalization, mixed precision) --
// -- code-generation preparation (layout, fusion, memory planning) --

const std::vector<PassInfo> &passTable() {
  static const std::vector<PassInfo> table = {
      // -- cleanup passes --
      // -- semantic passes --
      // -- code-generation preparation --
  };
  return table;
}

} // namespace xjit::passes
