// openSiblingLibrary (sibling_library.h).
#include "sibling_library.h"
#include "xjit/ir/diagnostics.h"

#include <dlfcn.h>

#include <string>

namespace xjit::backend {

void *openSiblingLibrary(const char *file, const char *entry, const char *what, void *&handle) {
  Dl_info self{};
  if (!dladdr(reinterpret_cast<void *>(&openSiblingLibrary), &self) || !self.dli_fname)
    throw Error(ErrorKind::Internal, "cannot find the path of libxjit_native.so");
  std::string path = self.dli_fname;
  path = path.substr(0, path.rfind('/') + 1) + file;
  handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle)
    throw Error(ErrorKind::Internal, std::string("cannot load ") + what + ": " + dlerror());
  void *symbol = dlsym(handle, entry);
  if (!symbol) {
    std::string why = dlerror();
    dlclose(handle);
    handle = nullptr;
    throw Error(ErrorKind::Internal, path + ": " + why);
  }
  return symbol;
}

} // namespace xjit::backend
