// backend="xjit": a capture's optimized graph compiled by the runtime for the CPU (native
// kernels, static memory plan), with the reference interpreter as the fallback for any graph
// the runtime cannot compile.
#pragma once

#include "cache.h"

#include "xjit/ir/value.h"

#include <memory>
#include <string>
#include <vector>

namespace xjit::frontend {

/// Stable id of the warning for a graph that could not be compiled natively.
inline constexpr const char *kNativeCompileError = "XJIT-E0103";

/// Compiles e.graph with the runtime on the CPU target into e.compiled. Any failure leaves
/// e.compiled empty (the graph then runs in the reference interpreter) and warns once, naming
/// the frame; returns false only when that warning raised (-W error: the exception is set).
/// With --dump, writes the runtime's graph and each kernel's files next to the graph's IR dumps
/// (graph `id`): <dir>/<id>-<function>[.<part>].runtime.xir and .<kernel file> (loop IR, LLVM
/// IR, assembly); `part` tells a training step's "forward" and "backward" graphs apart.
bool compileNative(CompiledEntry &e, const SourceLoc &loc, int id, const std::string &part = "");

/// The number of oneDNN gemm plans made so far (0 without the runtime), taken before a capture
/// for markGemmUse.
uint64_t gemmPlansBefore();
/// Before capturing frame `f` at `loc`: when an argument is a tensor (a capture that will
/// likely compile) and the LLVM engine is not loaded, starts loading it on a thread of its own;
/// when an earlier process marked the frame (its graphs ran oneDNN's gemm implementation),
/// starts making gemm's kernels on another. The capture and compile overlap both
/// (xjit/backend/library_warm_up.h).
void warmUpLibrariesFor(const FrameView &f, const SourceLoc &loc);
/// Registers a Python atexit callback that waits for the compiler's library threads (the gemm
/// warm-up, the LLVM preload) before the interpreter's teardown and C++ static destructors,
/// and tells the backend so (xjit/backend/library_warm_up.h). Sets a Python error on failure.
void waitForLibraryThreadsAtExit();
/// After a capture's first run: marks the frame for later processes when that compile and run
/// made gemm plans (more than `before`).
void markGemmUse(const SourceLoc &loc, uint64_t before);

/// Around a frame's capture, compile and first run (backend "xjit", the compile cache on): makes
/// the large buffers that an earlier process's first call of the frame took (its arena, its
/// results) on a thread, so that this call's run finds them faulted in (a note in the compile
/// cache, once per frame and process; xjit/backend/host_buffers.h), and lists the ones this
/// call takes. finish(), after the first run, writes that list as the frame's note when it
/// differs from the one read.
class FirstCallBuffers {
public:
  explicit FirstCallBuffers(const SourceLoc &loc);
  ~FirstCallBuffers();
  FirstCallBuffers(const FirstCallBuffers &) = delete;
  FirstCallBuffers &operator=(const FirstCallBuffers &) = delete;
  void finish();

private:
  struct State;
  std::unique_ptr<State> state_;
};

/// Runs an entry's graph: natively when it was compiled, else in the reference interpreter.
std::vector<RtValue> runGraph(const CompiledEntry &e, std::vector<RtValue> inputs);

} // namespace xjit::frontend
