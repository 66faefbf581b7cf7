// The oneDNN path as a library of its own (the Python build; dnnl_library.h): libxjit_dnnl.so,
// installed beside libxjit_native.so, is dlopen'ed by the first compile of a library call and
// stays loaded (its executables' code and oneDNN's primitives are in it).
#include "dnnl_library.h"
#include "xjit/ir/diagnostics.h"

#include <dlfcn.h>

#include <mutex>
#include <string>

namespace xjit::backend {
namespace {

std::atomic<const DnnlLibrary *> gLibrary{nullptr};
std::mutex gLoadMutex;

} // namespace

const DnnlLibrary &dnnlLibrary() {
  if (const DnnlLibrary *loaded = gLibrary.load(std::memory_order_acquire)) return *loaded;
  std::lock_guard lock(gLoadMutex);
  if (const DnnlLibrary *loaded = gLibrary.load()) return *loaded;
  Dl_info self{};
  if (!dladdr(reinterpret_cast<void *>(&loadedDnnlLibrary), &self) || !self.dli_fname)
    throw Error(ErrorKind::Internal, "cannot find the path of libxjit_native.so");
  std::string path = self.dli_fname;
  path = path.substr(0, path.rfind('/') + 1) + "libxjit_dnnl.so";
  void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle)
    throw Error(ErrorKind::Internal, std::string("cannot load the oneDNN path: ") + dlerror());
  auto entry = reinterpret_cast<const DnnlLibrary *(*)()>(dlsym(handle, "xjit_dnnl_library"));
  if (!entry) {
    std::string why = dlerror();
    dlclose(handle);
    throw Error(ErrorKind::Internal, path + ": " + why);
  }
  const DnnlLibrary *library = entry();
  gLibrary.store(library, std::memory_order_release);
  return *library;
}

const DnnlLibrary *loadedDnnlLibrary() { return gLibrary.load(std::memory_order_acquire); }

} // namespace xjit::backend
