// The integer power helper compiled kernels call (llvm_codegen.h): here in the backend, not in
// the LLVM engine, because kernels run after the engine is unloaded.
#include "llvm_codegen.h"

namespace xjit::backend {

extern "C" int64_t xjit_rt_ipow_i64(int64_t base, int64_t exp) {
  // The reference kernel's integer power: wrapping, and negative exponents give 0 except for
  // bases 1 and -1.
  if (exp < 0) {
    if (base == 1) return 1;
    if (base == -1) return (exp % 2) ? -1 : 1;
    return 0;
  }
  uint64_t result = 1, b = static_cast<uint64_t>(base);
  for (auto e = static_cast<uint64_t>(exp); e; e >>= 1) {
    if (e & 1) result *= b;
    b *= b;
  }
  return static_cast<int64_t>(result);
}

} // namespace xjit::backend
