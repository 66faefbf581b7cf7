// The LLVM engine linked into the program (executables: tests, tools, benchmarks).
#include "llvm_engine.h"

namespace xjit::backend {

const LlvmEngine *loadLlvmEngine(void *&handle) {
  handle = nullptr;
  return xjit_llvm_engine();
}

void unloadLlvmEngine(void *) {}

} // namespace xjit::backend
