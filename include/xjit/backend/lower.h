// Lowering of elementwise / broadcast regions of the graph IR to the kernel IR.
//
// A region is a block whose arguments are its inputs (tensors and Python scalars) and whose
// terminator (yield in a `fusion` op, return in a graph) gives its outputs. Its ops must be
// elementwise ops of the lowering table, constants, and index-remapping views (expand,
// expand_as, unsqueeze, squeeze, permute, transpose, t, static slice / select / narrow,
// contiguous, clone, alias). Each output's element at an index is computed by walking back
// through the ops, remapping the index through views and broadcasting, to loads of the inputs.
//
// Outputs of one shape share one loop nest over that shape (row-major). Each nest is versioned:
// a flat 1-d loop when every buffer it touches is contiguous and none is broadcast, else unit
// inner strides; the general strided nest is the fallback, by default in a second kernel
// (Kernel::general) compiled only when a call's strides need it. Inputs may have any strides;
// a dim broadcast by the types (static 1 against another size) reads with stride 0.
#pragma once

#include "xjit/backend/kernel_ir.h"
#include "xjit/ir/ir.h"
#include "xjit/ir/value.h"

#include <span>
#include <string>
#include <utility>
#include <vector>

namespace xjit::backend {

class CompiledKernel;

/// A region lowered to one kernel, and how the kernel's parameters bind to the region.
struct LoweredKernel {
  Kernel kernel;
  std::vector<Type> inputTypes, outputTypes;
  std::vector<int64_t> inputBuffer;  // per region input: its buffer parameter, or -1
  std::vector<int64_t> inputScalar;  // per region input: its scalar parameter, or -1
  std::vector<int64_t> outputBuffer; // per region output: its buffer parameter
  /// Pairs of dims the kernel reads as one size although the types do not prove it: a
  /// broadcast of two symbolic dims (s1 against s2, or s1 against 4) that shape inference
  /// assumed equal. Neither is a static 1, so the kernel indexes both with the same loop
  /// variable; if one were 1 at run time it would read out of bounds. The launcher checks
  /// every pair against the actual sizes before running.
  std::vector<std::pair<DimExpr, DimExpr>> sameSize;
};

struct LowerOptions {
  bool fastPaths = true; // emit the contiguous / unit-stride versions of each loop nest
  /// With fastPaths: the general strided nests go into a kernel of their own (Kernel::general,
  /// compiled on the first call that needs it) instead of an if/else in this one, which halves
  /// the code LLVM compiles up front. False: one kernel holding every version.
  bool lazyGeneral = true;
  /// Check the kernel (verifyKernel) before returning it. The CPU target turns this off in
  /// release builds: Jit::compile verifies every kernel it compiles (emitKernelModule, the
  /// cold path), and a kernel whose key hits (the compile cache, or a live identical kernel)
  /// has the very text of one verified when it was first compiled.
  bool verify = true;
};

/// "" when `op` may be part of an elementwise kernel, else the reason it may not.
std::string whyNotElementwise(const Op &op);
/// "" when every op of the block lowers, else the first reason one does not.
std::string whyNotLowerable(const Block &body);

/// Lowers a block; throws xjit::Error (internal) naming the first op that does not lower.
LoweredKernel lowerElementwiseBlock(const Block &body, const std::string &name,
                                    const LowerOptions &opts = {});
/// A `fusion` op: its one region.
LoweredKernel lowerFusion(const Op &fusion, const LowerOptions &opts = {});
/// A text that determines lowerFusion(fusion, opts) entirely: the region's ops, attrs, types and
/// value names, the fusion's attrs but its memory plan's, and what the lowering reads from the
/// values bound to the region's inputs (folded number constants, the dim expected to have unit
/// stride, slice views). Equal keys give equal kernels, so a target can share one executable
/// without lowering again (the 12 layers of GPT-2). "" when there is no such text.
std::string fusionLoweringKey(const Op &fusion, const LowerOptions &opts = {});
/// A single op; the region inputs are its operands, the outputs its results.
LoweredKernel lowerElementwiseOp(const Op &op, const LowerOptions &opts = {});

/// "" when `op` is a scan the CPU target compiles (cumsum, lower_scan.cpp), else why not.
std::string whyNotScan(const Op &op);
/// A scan op: its own loops (a running accumulator along the dim), not an elementwise region.
LoweredKernel lowerScan(const Op &op, const LowerOptions &opts = {});

/// Ops of the elementwise table (views and constants not included), sorted.
std::vector<std::string> elementwiseOpNames();

/// Runs a lowered kernel on the region's inputs: binds shape symbols from the input sizes,
/// allocates contiguous outputs and runs. Throws KernelError for inputs that do not fit the
/// types or when the kernel fails (e.g. integer division by zero).
std::vector<RtValue> runLowered(const LoweredKernel &lk, const CompiledKernel &ck,
                                std::span<const RtValue> inputs);
/// The same, writing into caller-allocated contiguous outputs of the results' dtypes and sizes
/// (the runtime's arena slices); they must not alias the inputs (kernels assume noalias).
void runLoweredInto(const LoweredKernel &lk, const CompiledKernel &ck,
                    std::span<const RtValue> inputs, std::span<const Tensor> outputs);

} // namespace xjit::backend
