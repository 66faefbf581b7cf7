// The runtime: compiles a graph once into a flat program of pre-resolved kernels with a static
// memory plan, then runs it with little more work per call than calling the kernels.
//
// compileGraph clones the graph, runs the code-generation passes (fuse, plan-memory) on the
// clone and turns every op into one instruction:
//   - an Executable from the Target (fusion regions, single ops, library ops), writing into the
//     planned arena slot of its results when it can (Executable::runInto);
//   - otherwise the op's reference kernel from the registry (a fusion the target does not take
//     runs its body op by op, each op asking the target again);
//   - `external_call` (PyTorch fallback nodes) through the external-function registry,
//     resolved at compile time;
//   - `if` and `loop` natively, on their blocks compiled the same way (no fallback);
//   - `constant` evaluated once at compile time.
// Values live in numbered slots of a per-call frame; nothing is looked up by name or pointer
// per call. docs/runtime.md describes the execution model, the memory plan and threading.
#pragma once

#include "xjit/backend/target.h"
#include "xjit/ir/ir.h"
#include "xjit/ir/value.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace xjit::runtime {

/// The code-generation passes compileGraph runs by default (docs/runtime.md).
/// `layout` runs chains of two or more convolutions channels-last, so that oneDNN's NHWC
/// kernels read and write the activations with no reorder between convs (docs/perf.md).
/// sink-permutes computes outputs that eager lays out permuted (transposed, channels_last) in
/// that order instead of copying them (docs/frontend.md, *Output layouts*).
/// widen-half-products runs f16 products on f32 library kernels (none for f16 on most CPUs).
/// decompose-matvec computes a linear/matmul of one input row (batch 1, a decode step) as a
/// fused multiply-sum loop instead of a library GEMM call (docs/passes.md).
/// batch-row-products computes single-row linears sharing a weight that do not depend on each
/// other (an unrolled recurrence's input projections) as one GEMM before decompose-matvec.
/// merge-product-sums computes a sum of products over small inner dims (a weight's gradient
/// summed over a recurrence's steps) as one library GEMM (docs/passes.md).
/// plan-memory plans no in-place updates: the runtime would give each its own arena slice
/// (kernels do not write over their operands), which no other value can reuse.
/// reinplace writes outputs the caller copies back into an input into that input's memory
/// (CompileOptions::outputWritesInput; a no-op without it).
inline constexpr const char *kDefaultPipeline =
    "decompose-attention,causal-products,widen-half-products,decompose-batch-norm,"
    "decompose-group-norm,merge-product-sums,batch-row-products,decompose-matvec,layout,"
    "sink-permutes,fuse,collapse-reduced-dims,reinplace,plan-memory{in-place=false}";
/// kDefaultPipeline, or XJIT_PIPELINE when set (read once; for experiments and debugging).
const std::string &defaultPipeline();

struct CompileOptions {
  /// Passes run on the clone before compiling ("" runs none: the graph must then carry its own
  /// mem.* plan, or it runs without an arena). Default: kDefaultPipeline, or $XJIT_PIPELINE.
  std::string pipeline = defaultPipeline();
  /// false: every op runs its reference kernel (debugging; the memory plan is then unused).
  bool useTarget = true;
  /// Check each call's tensor inputs against the declared dtypes, ranks and static sizes.
  bool checkInputs = true;
  /// Passed to Target::compile (keepText for --dump).
  backend::TargetOptions target;
  /// Per graph output, the graph input the caller copies it into after each run (-1: none;
  /// empty: none at all), as the frontend does for writes to inputs. The `reinplace` pass then
  /// computes such an output in the input's own memory where nothing reads the input's old
  /// contents afterwards (set as `return`'s io.input_of). The caller's copy then finds the
  /// output already in place.
  std::vector<int> outputWritesInput;
  /// Per-pass time, op counts and statistics to stderr, then the code generation time
  /// (XJIT_LOG=passes).
  bool logPasses = false;
};

/// How the ops of a compiled graph are executed (all nesting levels counted).
struct CompileStats {
  int targetOps = 0;        // instructions run by a target Executable
  int referenceOps = 0;     // reference kernels on the host
  int externalOps = 0;      // external_call (PyTorch fallback nodes)
  int controlFlowOps = 0;   // if / loop run by the runtime
  int inlinedFusions = 0;   // fusion ops the target did not take, run op by op
  int constants = 0;        // evaluated at compile time
  int64_t arenaBytes = 0;   // the static memory plan's arena per concurrent call
  int plannedResults = 0;   // results written into the arena
  int plannedCopies = 0;    // of those: lone reshape/flatten/contiguous copies (CopyInto)
  bool fuseSkipped = false; // the graph writes values in place: fuse was left out
  /// reinplace wrote outputs into their inputs' memory: a run writes the caller's tensors
  /// while it runs, not only through the caller's copy after it.
  bool writesInputsInPlace = false;
  /// Results plan-memory lets overwrite an operand, given their own arena slice instead
  /// (generated kernels assume their buffers do not alias).
  int inPlaceSeparated = 0;
  /// "<op description>: <reason>" for ops a target was asked for and did not compile.
  std::vector<std::string> notCompiled;
};

/// A graph ready to run. Thread-safe: run() may be called from several threads at once (each
/// concurrent call takes its own frame and arena from a pool; arenas are reused across calls).
class CompiledGraph {
public:
  CompiledGraph(CompiledGraph &&) noexcept;
  CompiledGraph &operator=(CompiledGraph &&) noexcept;
  ~CompiledGraph();

  /// Runs on the graph inputs; returns the graph outputs. Output tensors never share memory
  /// with the arena (they are freshly allocated, or inputs returned as they are), so they can
  /// be handed to the caller without a copy. Errors throw xjit::Error naming the op and its
  /// source location (ErrorKind::User for bad inputs and kernel failures).
  std::vector<RtValue> run(std::vector<RtValue> inputs) const;

  /// The graph as compiled (after the code-generation passes, with its mem.* annotations).
  const Graph &graph() const;
  const CompileStats &stats() const;
  /// Every target executable's dump files (kernel IR, LLVM IR, assembly with
  /// TargetOptions::keepText), names prefixed by the instruction's index.
  std::vector<std::pair<std::string, std::string>> dumpFiles() const;

  struct Impl;

private:
  friend CompiledGraph compileGraph(const Graph &, backend::Target &, const CompileOptions &);
  explicit CompiledGraph(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// Compiles g for `target`, which must outlive the result. Throws xjit::Error when the graph
/// cannot be compiled (a pass fails, an external function is not registered, an op has no
/// kernel); a target that fails to compile one op only sends that op to its reference kernel.
CompiledGraph compileGraph(const Graph &g, backend::Target &target,
                           const CompileOptions &opts = {});

/// XJIT_PROFILE (docs/runtime.md): time per instruction kind of every compiled graph. The
/// level (0 off, 1 grouped by kind, 2 per instruction) is read from the environment once;
/// setProfileLevel overrides it for graphs compiled afterwards. profileReport is the table
/// printed at exit (empty when nothing was timed); profileReset zeroes the counters.
int profileLevel();
void setProfileLevel(int level);
std::string profileReport();
void profileReset();

/// The process-wide CPU target (created on first use, never destroyed).
backend::Target &cpuTarget();

} // namespace xjit::runtime
