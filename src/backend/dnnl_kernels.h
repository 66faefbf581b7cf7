// The oneDNN library path of the CPU target: matmul-family ops (matmul, mm, bmm, linear,
// addmm, baddbmm), forward convolutions (conv1d/2d/3d), convolution weight gradients
// (conv1d/2d/3d_weight) and poolings, alone or as the anchor of an `epilogue` fusion group
// (post-ops: bias, activations, binary ops with another tensor or a scalar), and the grouped
// products (grouped_mm, grouped_mm_weight; alone). cpu_target.cpp routes these ops here;
// everything else goes to LLVM.
#pragma once

#include "dnnl_common.h"
#include "dnnl_library.h"

namespace xjit::backend::dnnl_kernels {

/// A library call as read from the IR: the anchor op, where each of its operands comes from,
/// and the post-ops applied to its result. Valid during compilation only (points into the IR).
struct CallIR {
  const Op *anchor = nullptr;
  std::vector<Source> operands; // the anchor's operands, in order (absent optional: !present())
  std::vector<PostOp> postOps;
  Type resultType; // of the last value (the call's one result)
};

/// "" when compile(op) gives a oneDNN executable. Shape-dependent limits that only show at
/// run time (a broadcast oneDNN rejects, a ceil-mode window) make the executable run the
/// reference kernel for those shapes instead (never a wrong answer).
std::string whyNotSupported(const Op &op);
std::shared_ptr<const Executable> compile(const Op &op, const TargetOptions &opts);

// The op families (dnnl_matmul.cpp, dnnl_conv.cpp, dnnl_pool.cpp).
std::string whyNotMatmul(const CallIR &call);
std::string whyNotConv(const CallIR &call);
std::string whyNotPool(const CallIR &call);
std::string whyNotConvWeight(const CallIR &call);
std::string whyNotGrouped(const CallIR &call); // dnnl_grouped.cpp
std::unique_ptr<LibraryKernel> makeMatmulKernel(const CallIR &call);
std::unique_ptr<LibraryKernel> makeConvKernel(const CallIR &call);
std::unique_ptr<LibraryKernel> makePoolKernel(const CallIR &call);
std::unique_ptr<LibraryKernel> makeConvWeightKernel(const CallIR &call);
std::unique_ptr<LibraryKernel> makeGroupedKernel(const CallIR &call);

} // namespace xjit::backend::dnnl_kernels
