// The interface between the backend (libxjit_native) and the LLVM engine: code generation and
// linking with LLVM (llvm_engine.cpp), built as libxjit_llvm.so in the Python build so that it
// is loaded to compile and unloaded after (its relocated tables, statics and heap leave the
// process; docs/decisions.md). Executables link it statically. Kernel code outlives the engine:
// the linker writes it to pages owned by the kernels (CodePages), not by LLVM.
#pragma once

#include "xjit/backend/jit.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace xjit::backend {

/// Pipeline::Kernel. The inputs are clean loops from the kernel IR; what they need is SSA form
/// for accumulators, loop-invariant hoisting (stride and parameter loads, broadcast operands),
/// rotation into do-while form, and vectorization. (Also part of the compile cache key.)
inline constexpr const char *kKernelPipeline =
    "always-inline,function(sroa,early-cse,instcombine<no-verify-fixpoint>,simplifycfg,"
    "loop-mssa(licm,loop-rotate),loop(indvars),loop-vectorize,instcombine<no-verify-fixpoint>,"
    "simplifycfg,loop-mssa(licm),early-cse)";

/// Wall-clock milliseconds since t (CompileTimes, counters).
using Clock = std::chrono::steady_clock;
inline double msSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

/// Linked kernel code: mmap'd pages unmapped (by libxjit_native) when the last kernel holding
/// them goes away.
struct CodePages {
  std::vector<std::pair<void *, size_t>> regions;
  std::vector<void *> frames; // eh-frame sections registered with the unwinder
  CodePages() = default;
  CodePages(const CodePages &) = delete;
  CodePages &operator=(const CodePages &) = delete;
  ~CodePages();
};

struct ObjectToLink {
  std::string_view object; // a relocatable object file
  std::string_view symbol; // its kernel's entry
};

/// The engine's functions (one table; the only symbol libxjit_llvm.so exports returns it).
struct LlvmEngine {
  /// Registers the native target, parses `llvmArgs` (LLVM options, once per load) and creates
  /// the linker; returns the host CPU's name and features as given to LLVM.
  /// `machinesMade` counts the target machines it makes (backendCounters).
  void (*start)(const std::string &llvmArgs, std::string &cpu, std::string &features,
                std::atomic<uint64_t> &machinesMade);
  /// Kernel IR -> object file (`symbol` is its entry); fills times.emit, optimize and codegen,
  /// and with keepText the optimized LLVM IR and the assembly. Throws xjit::Error.
  std::string (*buildObject)(const Kernel &k, const std::string &symbol, Pipeline pipeline,
                             bool keepText, CompileTimes &times, std::string &llvmIR,
                             std::string &assembly);
  /// Links the objects together (with libm, libc and the kernels' runtime helpers), resolves
  /// each one's symbol into entries and hands the code's pages to `code`. Returns "" or the
  /// linker's error (then `code` holds whatever was already placed).
  std::string (*link)(std::span<const ObjectToLink> objects, CodePages &code,
                      std::vector<KernelEntry> &entries);
  /// Frees the linker and the target machines; start() again before the next use. `unloading`:
  /// the library is unloaded next, so LLVM's own globals are freed too (llvm_shutdown).
  void (*stop)(bool unloading);
};

} // namespace xjit::backend

extern "C" const xjit::backend::LlvmEngine *xjit_llvm_engine();

namespace xjit::backend {

/// How the backend reaches the engine: linked in (executables, llvm_engine_linked.cpp; `handle`
/// stays null) or dlopen'ed from libxjit_llvm.so beside libxjit_native (llvm_engine_loader.cpp).
/// Throws xjit::Error (internal) when it cannot be loaded.
const LlvmEngine *loadLlvmEngine(void *&handle);
/// dlclose for a loaded engine (nothing for a linked one).
void unloadLlvmEngine(void *handle);

} // namespace xjit::backend
