// In-process compilation of kernels to machine code for the host CPU with LLVM ORC (LLJIT), in
// an engine that is loaded to compile and unloaded after (llvm_engine.h). One JIT per process;
// compile() and running compiled kernels are thread-safe. A CompiledKernel keeps its code alive
// until the last reference goes away, whether the engine is loaded or not.
#pragma once

#include "xjit/backend/kernel_ir.h"
#include "xjit/ir/value.h"

#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace xjit::backend {

enum class Pipeline : uint8_t {
  /// A short pipeline for generated loop kernels (the default): always-inline, SROA, early CSE,
  /// instcombine, simplifycfg, LICM, loop rotation, indvars, the loop vectorizer, cleanup. About
  /// half the compile time of LLVM's O3 for the same vector code on these kernels.
  Kernel,
  LLVMDefault, // LLVM's O3 module pipeline
  None,        // only always-inline (debugging)
};

struct CompileOptions {
  Pipeline pipeline = Pipeline::Kernel;
  bool keepText = false; // keep the loop IR, the optimized LLVM IR and the assembly (--dump)
  /// Key the kernel like the persistent compile cache (compile_cache.h): share a live identical
  /// kernel's code, else look the object up in the cache and store it there after a miss (the
  /// cache parts only when the cache is on). Ignored with keepText (the text needs LLVM).
  bool useCache = true;
};

/// Where compile time goes, in milliseconds.
struct CompileTimes {
  double emit = 0;     // kernel IR -> LLVM IR
  double optimize = 0; // LLVM's O2/O3 pipeline (vectorizer included)
  double codegen = 0;  // machine code, linking, symbol lookup
  /// CPU time of the compiling thread over all three: what the compile costs on an idle
  /// machine (wall times include waiting for a core on a loaded one).
  double cpu = 0;
  double total() const { return emit + optimize + codegen; }
};

class CompiledKernel {
public:
  ~CompiledKernel();
  CompiledKernel(const CompiledKernel &) = delete;
  CompiledKernel &operator=(const CompiledKernel &) = delete;

  const Kernel &kernel() const { return kernel_; }
  KernelEntry entry() const { return entry_; }
  const CompileTimes &times() const { return times_; }
  /// Whether the code came from the persistent compile cache (LLVM did not run).
  bool fromCache() const { return fromCache_; }
  /// With CompileOptions::keepText, else empty.
  const std::string &loopIR() const { return loopIR_; }
  const std::string &llvmIR() const { return llvmIR_; }
  const std::string &assembly() const { return assembly_; }

  /// Runs on host tensors (one per buffer parameter, outputs allocated by the caller) and scalar
  /// values (one per scalar parameter). Checks dtypes, ranks and sizes against the parameters
  /// (symbolic sizes must be bound consistently) and throws KernelError on a mismatch or when
  /// the kernel stops with an error. When the strides fail the kernel's stride check, the
  /// kernel's general version runs instead (compiled by the first call that needs it).
  void run(std::span<const Tensor> buffers, std::span<const RtValue> scalars = {}) const;
  /// Whether the general version has been compiled (tests).
  bool generalCompiled() const;
  /// Whether the code is linked (false only between a LinkBatch's compile and its finish()).
  bool linked() const { return entry_ != nullptr; }

private:
  friend class Jit;
  friend class LinkBatch;
  CompiledKernel() = default;
  Kernel kernel_;
  KernelEntry entry_ = nullptr;
  CompileTimes times_;
  bool fromCache_ = false;
  std::string loopIR_, llvmIR_, assembly_;
  std::shared_ptr<void> code_; // its code's pages (CodePages), unmapped with the last holder
  CompileOptions options_;     // also for the general version
  mutable std::once_flag generalOnce_;
  mutable std::shared_ptr<const CompiledKernel> general_; // Kernel::general, once compiled
};

class Jit {
public:
  /// The process-wide JIT (created on first use).
  static Jit &instance();
  /// Compiles a kernel (verified first; an invalid kernel throws xjit::Error, internal).
  /// `printed`: printKernel(k), when the caller has made it already (it keys the kernel).
  std::shared_ptr<const CompiledKernel> compile(const Kernel &k, const CompileOptions &opts = {},
                                                const std::string *printed = nullptr);
  /// The host CPU and its features as given to LLVM ("znver4", "+avx2,+avx512f,...").
  const std::string &cpuName() const;
  const std::string &cpuFeatures() const;
  /// Stops the LLVM engine (its linker, target machines and heap) and, in the Python build,
  /// unloads libxjit_llvm.so; kernels keep their code, and the next compile or link loads it
  /// again. Returns false when it was not loaded or a compile or link is using it. For
  /// releaseCompilerMemory, once the compiles are done.
  static bool releaseEngine();
  /// Loads and starts the LLVM engine now if it is not loaded (the next compile or link finds
  /// it ready; releaseEngine unloads it as before). For a thread of its own (library_warm_up.h).
  static void preloadEngine();
  /// Whether the engine is loaded now.
  static bool engineLoaded();

  ~Jit();
  Jit(const Jit &) = delete;
  Jit &operator=(const Jit &) = delete;

private:
  friend class LinkBatch;
  Jit();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Counts a kernel whose compile was answered by an identical live executable
/// (`kernels_shared` and `kernel_executables_shared`): the target's executable sharing answers
/// before Jit::compile is asked.
void noteKernelShared();

/// Links the kernels of one compiled graph together: while a LinkBatch is alive on a thread,
/// Jit::compile on that thread loads (or compiles) each kernel's object but does not link it;
/// finish() links them all into one JITDylib with one lookup (JITLink's fixed cost per
/// JITDylib and lookup paid once per graph, not once per kernel: docs/perf.md, "Session 6"),
/// and the kernels share that code's lifetime. Kernels are not runnable before finish()
/// (run() throws KernelError). Only kernels keyed for the compile cache are batched (with the
/// persistent cache off too); the others (keepText, useCache = false) link at once. A batch inside
/// a batch on the same thread joins the outer one. finish() throws xjit::Error (internal) when a
/// freshly compiled object does not link; a cached object that does not link is compiled again.
class LinkBatch {
public:
  LinkBatch();
  /// Without finish() (an exception unwinding a compile), drops what was not linked.
  ~LinkBatch();
  LinkBatch(const LinkBatch &) = delete;
  LinkBatch &operator=(const LinkBatch &) = delete;
  void finish();
  /// The batch collecting this thread's compiles, or null.
  static LinkBatch *current();

  struct Pending;

private:
  friend class Jit;
  LinkBatch *outer_ = nullptr; // non-null: this batch joined an outer one
  bool joined_ = false;
  std::vector<Pending> pending_;
};

/// Threads the parallel loops of compiled kernels run on: XJIT_NUM_THREADS, else the hardware
/// threads (parallel.cpp).
unsigned kernelThreads();
/// How many parallel loops this process has split across threads (tests, --explain).
uint64_t parallelSplits();
/// How many ranges the parallel loops cut n iterations of `work` elements each into: one per
/// kMinWorkPerThread elements up to kernelThreads(); 1 inside a parallel region (parallel.cpp).
int64_t parallelParts(int64_t n, int64_t work);
/// Runs fn(begin, end) over `parts` ranges that cover [0, n) (at most n), one per thread of the
/// kernel pool; fn must not throw. Native kernels written in C++ thread themselves with it.
void parallelRanges(int64_t n, int64_t parts, const std::function<void(int64_t, int64_t)> &fn);
/// dst.copyFrom(src) (same shape, or a contiguous dst taking src's elements in row-major
/// order) with src's outermost dim split over the kernel threads when the copy is large: the
/// runtime's layout copies and cat's slices (the GPT step's q/k/v gradients: 3 MB per layer).
void parallelCopy(const Tensor &dst, const Tensor &src);
/// Process-wide totals of Jit::compile (tests, benchmarks of warm starts).
struct JitTotals {
  /// Kernels compiled with LLVM (every compile that was not a cache hit): a second process
  /// running the same program with a filled cache stays at 0.
  uint64_t llvmCompilations = 0;
  uint64_t cacheLinks = 0; // kernels loaded from the persistent cache and linked
  double llvmMs = 0;       // wall time of the LLVM compiles (IR, optimization, machine code)
  double cacheLinkMs = 0;  // wall time of the cache hits (read, validate, link)
  /// General versions (Kernel::general) compiled or linked because a call's strides needed
  /// them; each is also counted above as a compilation or a cache link.
  uint64_t generalVersions = 0;
  /// LinkBatch::finish calls that linked something, and the objects they linked together.
  uint64_t batchLinks = 0, batchedObjects = 0;
};
JitTotals jitTotals();
/// jitTotals() and compileCacheStats() as (name, value) pairs, for the Python modules' stats
/// ("llvm_compilations", "llvm_ms", "cache_links", "cache_link_ms", "cache_hits", ...). Both
/// Python extensions load one backend (libxjit_native.so), so both report the same counts.
std::vector<std::pair<std::string, double>> backendCounters();
/// Library (oneDNN) calls that reused an identical call's executable (dnnl_kernels.cpp).
uint64_t libraryKernelsShared();
/// oneDNN plans made for one shape each, and plans made for every shape of a call whose sizes
/// vary (matmuls with run-time dims).
uint64_t libraryPlansMade();
uint64_t libraryGenericPlansMade();
/// Of those, plans on oneDNN's gemm implementation (library_warm_up.h).
uint64_t libraryGemmPlansMade();

/// Writes <dir>/<kernel name>.loops, .ll and .s (compiled with keepText); creates dir.
void dumpKernel(const CompiledKernel &k, const std::string &dir);

} // namespace xjit::backend
