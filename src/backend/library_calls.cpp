// Which ops the CPU target's oneDNN path takes (dnnl_library.h): decided from names and
// attributes only, so that a graph without library calls never loads oneDNN.
#include "dnnl_library.h"

#include "xjit/ir/value.h"

namespace xjit::backend::dnnl_kernels {

bool isMatmulOp(const std::string &n) {
  return n == "matmul" || n == "mm" || n == "bmm" || n == "linear" || n == "addmm" ||
         n == "baddbmm";
}

bool isConvOp(const std::string &n) {
  return n == "conv1d" || n == "conv2d" || n == "conv3d" || n == "conv_transpose1d" ||
         n == "conv_transpose2d" || n == "conv_transpose3d";
}

bool isConvWeightOp(const std::string &n) {
  return n == "conv1d_weight" || n == "conv2d_weight" || n == "conv3d_weight";
}

bool isPoolOp(const std::string &n) {
  for (const char *base : {"max_pool", "avg_pool", "adaptive_max_pool", "adaptive_avg_pool"})
    for (const char *d : {"1d", "2d", "3d"})
      if (n == std::string(base) + d) return true;
  return false;
}

bool isGroupedOp(const std::string &n) { return n == "grouped_mm" || n == "grouped_mm_weight"; }

bool isLibraryOpName(const std::string &n) {
  return isMatmulOp(n) || isConvOp(n) || isPoolOp(n) || isConvWeightOp(n) || isGroupedOp(n);
}

bool isLibraryCall(const Op &op) {
  if (op.name() != "fusion") return isLibraryOpName(op.name());
  const Attr *kind = op.attrOrNull("kind");
  return kind && kind->kind() == AttrKind::Str && kind->asStr() == "epilogue";
}

} // namespace xjit::backend::dnnl_kernels
