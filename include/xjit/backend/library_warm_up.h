// oneDNN's gemm kernels made ahead, on a thread of their own. Its `gemm:jit` implementation
// (strided attention products, causal blocks, one-row products) generates all of its kernels
// at its first call in a process: ~29 ms of CPU inside a warm start's first run. A graph's
// oneDNN plans are made at that run, too late to overlap the work with anything. So the frontend
// leaves a mark in the compile cache (compileCacheMark) for a frame whose graphs ran a gemm plan,
// and a later process that captures the same frame starts the work before the capture, which
// the capture and compile (single-threaded) then overlap. A missing or stale mark costs that
// time or one idle thread's work, never a result (docs/runtime.md "Warm start").
#pragma once

#include <cstdint>
#include <string>

namespace xjit::backend {

/// The mark's key for a frame's code: its file, qualified name and first line, and the
/// compiler's identity.
std::string gemmMarkKey(const std::string &file, const std::string &function, int line);

/// Starts, once per process, a thread that loads the oneDNN path and makes gemm's kernels; a
/// run that reaches a gemm product sooner waits for them inside oneDNN. A process that exits
/// or forks meanwhile waits for the thread first. XJIT_GEMM_WARMUP=0 turns it off (A/B runs).
/// Returns whether this call started it.
bool startGemmWarmUp();
/// Whether startGemmWarmUp has run in this process (started the thread or found it off).
bool gemmWarmUpRequested();
/// Threads started (0 or 1; backendCounters' `gemm_warm_ups`).
uint64_t gemmWarmUpsStarted();

/// Starts a thread that loads and starts the LLVM engine (~3 ms of dlopen and ~1-2 ms of
/// start-up, which every compile or cache link needs first) when it is not loaded and no such
/// thread is running: the capture, single-threaded, overlaps it. The release after a graph's
/// first run unloads the engine as before. A process that exits or forks meanwhile waits for
/// the thread first. XJIT_PRELOAD=0 turns it off (A/B runs). Returns whether it started one.
bool preloadLlvmEngine();
/// Threads started by preloadLlvmEngine (backendCounters' `llvm_engine_preloads`).
uint64_t llvmEnginePreloadsStarted();

} // namespace xjit::backend
