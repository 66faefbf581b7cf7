// The LLVM engine as a library of its own (the Python build): libxjit_llvm.so, installed beside
// libxjit_native.so, is dlopen'ed when a compile or link needs it and dlclose'd by releases, so
// that its relocated tables, statics and heap are not part of the steady state.
#include "llvm_engine.h"
#include "sibling_library.h"

#include <dlfcn.h>

namespace xjit::backend {

const LlvmEngine *loadLlvmEngine(void *&handle) {
  void *entry =
      openSiblingLibrary("libxjit_llvm.so", "xjit_llvm_engine", "the LLVM engine", handle);
  return reinterpret_cast<const LlvmEngine *(*)()>(entry)();
}

void unloadLlvmEngine(void *handle) {
  if (handle) dlclose(handle);
}

} // namespace xjit::backend
