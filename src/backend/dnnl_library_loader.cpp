// The oneDNN path as a library of its own (the Python build; dnnl_library.h): libxjit_dnnl.so,
// installed beside libxjit_native.so, is dlopen'ed by the first compile of a library call and
// stays loaded (its executables' code and oneDNN's primitives are in it).
#include "dnnl_library.h"
#include "sibling_library.h"

#include <mutex>

namespace xjit::backend {
namespace {

std::atomic<const DnnlLibrary *> gLibrary{nullptr};
std::mutex gLoadMutex;

} // namespace

const DnnlLibrary &dnnlLibrary() {
  if (const DnnlLibrary *loaded = gLibrary.load(std::memory_order_acquire)) return *loaded;
  std::lock_guard lock(gLoadMutex);
  if (const DnnlLibrary *loaded = gLibrary.load()) return *loaded;
  void *handle = nullptr; // never closed
  void *entry =
      openSiblingLibrary("libxjit_dnnl.so", "xjit_dnnl_library", "the oneDNN path", handle);
  const DnnlLibrary *library = reinterpret_cast<const DnnlLibrary *(*)()>(entry)();
  gLibrary.store(library, std::memory_order_release);
  return *library;
}

const DnnlLibrary *loadedDnnlLibrary() { return gLibrary.load(std::memory_order_acquire); }

} // namespace xjit::backend
