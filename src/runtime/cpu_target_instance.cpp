// The process-wide CPU target shared by every caller of the runtime in a process.
#include "xjit/runtime/runtime.h"

namespace xjit::runtime {

backend::Target &cpuTarget() {
  // Never destroyed: compiled graphs held by Python objects may outlive static destructors.
  static backend::Target *target = backend::makeCpuTarget().release();
  return *target;
}

} // namespace xjit::runtime
