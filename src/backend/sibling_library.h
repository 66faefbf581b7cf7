// Libraries installed beside libxjit_native.so and loaded when first needed: the LLVM engine
// (llvm_engine_loader.cpp) and the oneDNN path (dnnl_library_loader.cpp).
#pragma once

namespace xjit::backend {

/// dlopen's `file` (RTLD_NOW | RTLD_LOCAL) from the directory of the library holding this code
/// and returns its symbol `entry`, with the library's handle in `handle`. Throws Error naming
/// `what` when either fails (nothing stays loaded then).
void *openSiblingLibrary(const char *file, const char *entry, const char *what, void *&handle);

} // namespace xjit::backend
