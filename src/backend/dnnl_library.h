// How the CPU target reaches its oneDNN path (dnnl_kernels.h, the only code that needs libdnnl)
// without loading oneDNN: the Python build keeps that path in libxjit_dnnl.so, loaded by the
// first compile of a library call (dnnl_library_loader.cpp), so that a process whose graphs
// have none (MLP b1: its matrix-vector products are LLVM reductions) never maps libdnnl and
// its relocated data (docs/decisions.md). Executables link the path in (dnnl_library_linked.cpp).
#pragma once

#include "xjit/backend/content_tags.h"
#include "xjit/backend/target.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

namespace xjit::backend {

/// The oneDNN path's entry points (dnnl_kernels.h) and counters (backendCounters).
struct DnnlLibrary {
  std::string (*whyNotSupported)(const Op &op);
  std::shared_ptr<const Executable> (*compile)(const Op &op, const TargetOptions &opts);
  /// Executables shared by identical calls; oneDNN primitives made per shape, shape-generic.
  const std::atomic<uint64_t> *kernelsShared, *plansMade, *genericPlansMade;
  WeightPackCounters (*weightPacks)();
  /// Plans run on oneDNN's gemm implementation (`gemm:jit`), whose kernels are made at its
  /// first call in a process; and that first call, on a 2x2 product (library_warm_up.h).
  const std::atomic<uint64_t> *gemmPlansMade;
  void (*makeGemmKernels)();
};

/// The path, loaded on first use (throws Error when it cannot be loaded). Never unloaded: its
/// executables' code is in it.
const DnnlLibrary &dnnlLibrary();
/// The path if it is loaded, else null (the counters are read without loading it).
const DnnlLibrary *loadedDnnlLibrary();

namespace dnnl_kernels {
// Which ops the path takes (library_calls.cpp), decided without oneDNN.
/// A library op, or an `epilogue` fusion (anchored on one).
bool isLibraryCall(const Op &op);
bool isLibraryOpName(const std::string &name);
bool isMatmulOp(const std::string &name);
bool isConvOp(const std::string &name);
bool isPoolOp(const std::string &name);
bool isConvWeightOp(const std::string &name); // conv{1,2,3}d_weight
bool isGroupedOp(const std::string &name);    // grouped_mm, grouped_mm_weight
} // namespace dnnl_kernels

} // namespace xjit::backend

/// The entry of libxjit_dnnl.so (defined in dnnl_kernels.cpp).
extern "C" const xjit::backend::DnnlLibrary *xjit_dnnl_library();
