// The LLVM engine as a library of its own (the Python build): libxjit_llvm.so, installed beside
// libxjit_native.so, is dlopen'ed when a compile or link needs it and dlclose'd by releases, so
// that its relocated tables, statics and heap are not part of the steady state.
#include "llvm_engine.h"
#include "xjit/ir/diagnostics.h"

#include <dlfcn.h>

#include <string>

namespace xjit::backend {

const LlvmEngine *loadLlvmEngine(void *&handle) {
  Dl_info self{};
  if (!dladdr(reinterpret_cast<void *>(&loadLlvmEngine), &self) || !self.dli_fname)
    throw Error(ErrorKind::Internal, "cannot find the path of libxjit_native.so");
  std::string path = self.dli_fname;
  path = path.substr(0, path.rfind('/') + 1) + "libxjit_llvm.so";
  handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle)
    throw Error(ErrorKind::Internal, std::string("cannot load the LLVM engine: ") + dlerror());
  auto entry = reinterpret_cast<const LlvmEngine *(*)()>(dlsym(handle, "xjit_llvm_engine"));
  if (!entry) {
    std::string why = dlerror();
    dlclose(handle);
    handle = nullptr;
    throw Error(ErrorKind::Internal, path + ": " + why);
  }
  return entry();
}

void unloadLlvmEngine(void *handle) {
  if (handle) dlclose(handle);
}

} // namespace xjit::backend
