// The per-code-object cache of compiled entries, stored in the code object's co_extra slot
// (_PyCode_SetExtra) so the hook finds it with one pointer load. A code object the hook must
// never compile (a library frame, a generator) holds a shared marker: the cost of skipping it
// is that one load and compare.
#pragma once

#include "guards.h"
#include "output_layout.h"
#include "param_versions.h"
#include "sources.h"

#include "xjit/frontend/capture.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace xjit::runtime {
class CompiledGraph;
} // namespace xjit::runtime

namespace xjit::frontend {

/// How to rebuild an object from the graph outputs (OutputNode with sources resolved to slots).
struct OutPlan {
  OutputNode::Kind kind;
  int64_t index = 0; // GraphOutput
  int slot = -1;     // FromSource
  PyRef object;      // Constant / NamedTuple type
  std::vector<OutPlan> children;
  std::vector<PyRef> keys;
  std::shared_ptr<const OutPlan> definition; // Shared: built once per call (index: its number)
};

struct EffectPlan {
  SideEffect::Kind kind;
  int target = -1; // slot of the target (not for SetGlobal)
  PyRef name;      // interned attribute / global name
  PyRef key;
  OutPlan value;
  std::string text; // for errors, e.g. "L['self'].count = ..."
  // TensorCopy whose value is graph output `inPlaceOutput`, which the native runtime may compute
  // in the target's own memory (runtime reinplace): the copy is skipped when it did (-1: never).
  int64_t inPlaceOutput = -1;
};

enum class EntryAction : uint8_t {
  RunGraph,  // run the compiled graph instead of the frame
  RunPython, // run the frame in Python (a capture xjit cannot run, e.g.
             // autograd through its inputs): the guards only say when that decision holds
};

/// One compiled version of a frame, valid while its guards hold.
struct CompiledEntry {
  CompiledEntry() = default;
  CompiledEntry(const CompiledEntry &) = delete;
  CompiledEntry &operator=(const CompiledEntry &) = delete;
  ~CompiledEntry();

  SourceTable sources;
  std::unique_ptr<GuardSet> guards;
  std::vector<std::string> guardText;
  EntryAction action = EntryAction::RunGraph;
  std::string pythonReason; // RunPython: why
  // RunPython for a reason of this frame's own (a graph break in a loop, a gradient it stops, a
  // grad-mode change), the frame not a module's method (a training loop): the library model
  // forwards it calls compile as frames of their own (eval_frame.cpp libraryRootsOff).
  bool calleesCompile = false;
  uint64_t optionsKey = 0; // the scope options it was compiled under
  std::vector<int> inputSlots;
  std::vector<Type> inputTypes;
  std::vector<bool> intInputs;   // per input: carries a symbolic Python int (Capture::intInputs)
  std::vector<bool> floatInputs; // per input: carries a Python float (Capture::floatInputs)
  std::unique_ptr<Graph> graph;  // what runs (after the pass pipeline)
  std::shared_ptr<const runtime::CompiledGraph> compiled; // backend="xjit": graph, compiled
  OutPlan result;
  // The layout eager gives each graph output (output_layout.h), and the outputs that have one
  // to keep (checked after each run, copied into it where the graph made another).
  std::vector<OutputLayout> outputLayouts;
  std::vector<size_t> laidOutOutputs;
  // Per graph output: the program can see it (not only copied back into an input it wrote).
  std::vector<bool> visibleOutputs;
  // Per graph output: eager's storage it is (Capture::outputStorages; -1 unknown).
  std::vector<int> outputStorages;
  bool separatesOutputs = false; // visible outputs of two eager tensors or more
  std::vector<EffectPlan> effects;
  std::vector<int> entrySlots;      // sources read by outputs/effects, evaluated before the graph
  std::vector<int64_t> externalIds; // registered external functions (unregistered on destroy)
  std::map<int64_t, PyRef> externalCallables; // registered id -> PyTorch callable (eager, check)
  bool rerunnable = true; // the graph writes nothing the caller sees (no in-place
                          // ops, no external calls): the frame may run after it fails
  bool eager = false;     // backend="eager": the graph runs op by op with PyTorch
  // Content tags of the nn.Parameter inputs (param_versions.h): set for native graphs that
  // write none of their inputs, so library kernels reorder a weight again only when it changed.
  std::unique_ptr<ParameterVersions> paramVersions;
  int graphId = -1; // index of this graph in the event log
  // A capture that stops at a graph break (Capture::breakPoint): `result` builds the arguments
  // of breakCode, which runs the breaking instruction and the rest of the frame.
  PyRef breakCode;
  bool breakGradEnabled = true;
  int gradModeAtExit = -1;  // Capture::gradModeAtExit
  uint32_t autocastKey = 0; // Capture::autocastKey: runs only under that autocast state
  // Capture::matmulBf16: products marked bf16 (bf16-products), so it runs only while eager's
  // matmul precision is bf16. An entry captured without it runs under either (exact f32 is
  // never less precise than eager's).
  bool matmulBf16 = false;
  uint64_t hits = 0;
  // Set: the graph runs as a compiled training step under autograd (training.h).
  std::shared_ptr<struct TrainingStep> training;
};

struct CodeCache {
  enum State : uint8_t {
    Active, // compile / run entries
    Python, // always run in Python (graph break, internal error, recompile limit)
    NoWork, // its captures so far did no tensor work: Python until noWorkCountdown reaches 0
  };
  State state = Active;
  // A frame whose capture does no tensor work may do some on a later call (its first call took
  // a branch without any, or got no tensors): it is captured again after 1, 4, 16 and 64 calls,
  // then runs in Python for good (driver.cpp kNoWorkRetries).
  uint32_t noWorkCountdown = 0;
  uint8_t noWorkCaptures = 0;
  bool forceRoot = false;        // compiled even if its file is filtered (xjit.jit(fn) on it)
  bool libraryRoot = false;      // a library model's forward called from Python (eval_frame.cpp)
  bool recompileLimited = false; // past the recompile limit: misses run in Python
  std::vector<std::shared_ptr<CompiledEntry>> entries;
  int compiles = 0;
  bool dynamic = false;                    // automatic dynamic shapes after a size miss
  std::vector<std::string> dynamicSources; // sources whose dims became symbolic
  // Modules guarded by type from the next capture on (AnalyzeOptions::sharedModules): another
  // instance of the class of a module an entry guarded by identity reached the frame.
  std::vector<std::string> sharedModules;
  bool sharingRefused = false; // a capture relied on module identities: identity guards only
  std::string lastFailure;     // the guard that failed on the latest miss
  std::string pythonReason;
  bool warned = false;
};

/// One load: nullptr (never seen), skippedMarker() or the cache.
CodeCache *lookupCache(PyCodeObject *code);
/// Marks a code object as never compiled (filtered file, generator, module body...).
void markSkipped(PyCodeObject *code);
bool isSkippedMarker(const CodeCache *c);
/// The cache of `code`, created if missing or if it was a skip marker. Throws PyErrorSet.
CodeCache &ensureCache(PyCodeObject *code);
/// Drops every entry of every live cache and forgets skip decisions that depended on
/// captures (xjit.explain starts from a clean slate). Filter decisions stay.
void resetAllCaches();
/// Requests the co_extra index; call once at module init. Throws PyErrorSet.
void initCodeExtra();

} // namespace xjit::frontend
