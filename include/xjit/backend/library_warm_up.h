// oneDNN's gemm kernels made ahead, on a thread of their own. Its `gemm:jit` implementation
// (strided attention products, causal blocks, one-row products) generates all of its kernels
// at its first call in a process: ~29 ms of CPU inside a warm start's first run. A graph's
// oneDNN plans are made at that run, too late to overlap the work with anything. So the frontend
// leaves a mark in the compile cache (compileCacheMark) for a frame whose graphs ran a gemm plan,
// and a later process that captures the same frame starts the work before the capture, which
// the capture and compile (single-threaded) then overlap. A missing or stale mark costs that
// time or one idle thread's work, never a result (docs/runtime.md "Warm start"). Products planned
// on gemm while the kernels are being made run on dense copies instead (GemmStandbyPlan).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace xjit::backend {

/// The mark's key for a frame's code: its file, qualified name and first line, and the
/// compiler's identity.
std::string gemmMarkKey(const std::string &file, const std::string &function, int line);

/// Starts, once per process, a thread that loads the oneDNN path and makes gemm's kernels. A
/// product planned on gemm meanwhile runs a substitute that does not wait for them
/// (gemmKernelsPending); other gemm calls wait for them inside oneDNN. The oneDNN path also
/// starts it when it plans a gemm product without a mark (the first process). A process that
/// exits or forks meanwhile waits for the thread first. XJIT_GEMM_WARMUP=0 turns it off (A/B
/// runs; gemm products then make the kernels inline). `atPlan`: called by such a product.
/// Returns whether this call started it.
bool startGemmWarmUp(bool atPlan = false);
/// A product planned on gemm starts the warm-up itself (no mark: the first process) only in a
/// host that waits for these threads at its exit before static destructors run: oneDNN makes
/// statics on the thread, whose destructors (registered after the process's `atexit` hooks,
/// so run before them) would tear them down under it. The Python frontend waits in an
/// `atexit` callback of its own (run before the interpreter's teardown) and says so here.
void hostWaitsForLibraryThreadsAtExit();
bool hostWaitsAtExit();
/// Waits for the gemm warm-up and the LLVM engine preload threads (10 s at most each).
void waitForLibraryThreads();

/// Whether the warm-up thread is making gemm's kernels right now (started, not finished).
bool gemmKernelsPending();
/// Tests: gemmKernelsPending() answers `pending` until called again with std::nullopt.
void setGemmKernelsPendingForTesting(std::optional<bool> pending);
/// Whether startGemmWarmUp has run in this process (started the thread or found it off).
bool gemmWarmUpRequested();
/// Threads started by a mark (0 or 1; backendCounters' `gemm_warm_ups`), and by a product
/// planned on gemm without one (`gemm_warm_ups_at_plans`).
uint64_t gemmWarmUpsStarted();
uint64_t gemmWarmUpsAtPlans();

/// Starts a thread that loads and starts the LLVM engine (~3 ms of dlopen and ~1-2 ms of
/// start-up, which every compile or cache link needs first) when it is not loaded and no such
/// thread is running: the capture, single-threaded, overlaps it. The release after a graph's
/// first run unloads the engine as before. A process that exits or forks meanwhile waits for
/// the thread first. XJIT_PRELOAD=0 turns it off (A/B runs). Returns whether it started one.
bool preloadLlvmEngine();
/// Threads started by preloadLlvmEngine (backendCounters' `llvm_engine_preloads`).
uint64_t llvmEnginePreloadsStarted();

} // namespace xjit::backend
