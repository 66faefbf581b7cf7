// The oneDNN path linked in (executables: tests, tools, benchmarks; dnnl_library.h).
#include "dnnl_library.h"

namespace xjit::backend {

const DnnlLibrary &dnnlLibrary() { return *xjit_dnnl_library(); }

const DnnlLibrary *loadedDnnlLibrary() { return xjit_dnnl_library(); }

} // namespace xjit::backend
