// What the frontend did, for xjit.explain, tests and XJIT_LOG: compiled graphs, graph breaks,
// recompilations, cache hits; plus the process-wide settings (xjit.config / environment), the
// warning and error types, and stderr logging.
#pragma once

#include "py_util.h"

#include "xjit/ir/ir.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace xjit::frontend {

enum LogFlag : unsigned {
  kLogGraphBreaks = 1u << 0,
  kLogGuards = 1u << 1,
  kLogRecompiles = 1u << 2,
  kLogGraphs = 1u << 3,
  kLogBytecode = 1u << 4,
  kLogDynamic = 1u << 5, // shape specializations: which symbolic size became static, and where
  kLogPasses = 1u << 6,  // per-pass time and statistics of each graph's compile (runtime)
};
/// "graph_breaks,guards" -> flags; unknown names throw std::invalid_argument.
unsigned parseLogFlags(const std::string &text);

struct Settings {
  int recompileLimit = 8;
  bool strict = false; // XJIT_STRICT: every graph break / fallback raises
  unsigned log = 0;    // LogFlag bits (XJIT_LOG)
  std::string dumpDir; // --dump: IR before/after passes
  std::string
      inject; // test-only failure injection: "analyze", "compile", "run", "reject", "native"
  bool profile = false; // time the hook and graph execution (bench/frontend_overhead.py)
  std::vector<std::string> skipPrefixes; // files whose frames are never roots
};
Settings &settings();

/// "<dir>/003-forward": where --dump writes the files of graph `id` captured in loc's function
/// (IR, kernels, bytecode); "" without --dump or for a negative id.
std::string dumpPrefix(int id, const SourceLoc &loc);

/// --dump: writes g's IR to <dumpPrefix(id, loc)>.<stage>.xir ("before", "after", "forward"...).
void dumpGraph(const Graph &g, int id, const SourceLoc &loc, const std::string &stage);

/// The Python classes of the frontend's diagnostics (set by the module at import).
struct PyClasses {
  PyObject *warning = nullptr;      // xjit.XjitWarning (a UserWarning)
  PyObject *compileError = nullptr; // xjit.XjitCompileError (a RuntimeError)
  PyObject *checkCompare = nullptr; // callable(compiled, eager) -> str | None, for --check
};
PyClasses &pyClasses();

struct GraphEvent {
  int id = 0;
  SourceLoc where;
  std::string backend;
  std::map<std::string, int> ops; // op name -> count (return excluded)
  int numOps = 0;
  int numInputs = 0, numOutputs = 0;
  std::vector<std::string> guards;
  std::vector<std::string> inputs; // sources
  double captureMs = 0, compileMs = 0;
  bool runsInPython = false; // RunPython entry (backend eager, autograd...)
  std::string note;          // why it runs in Python
  std::string ir;            // only while recording
};

struct BreakEvent {
  SourceLoc frame; // the frame that runs in Python (resumed: the frame that broke)
  SourceLoc where; // where the analyzer stopped
  std::string reason;
  bool internal = false;
  std::string errorId;
  bool resumed = false; // the graph before it was compiled; a resume function continues
};

struct RecompileEvent {
  SourceLoc frame;
  std::string guard; // the failing guard
  int compiles = 0;
};

struct CheckEvent {
  SourceLoc frame;
  std::string message; // empty: outputs matched
};

struct Counters {
  uint64_t cacheHits = 0, cacheMisses = 0, compiles = 0, framesInPython = 0, skippedNoOps = 0;
  // Graph outputs copied after a run into the layout eager gives them (restoreLayouts).
  uint64_t layoutCopies = 0;
  // Captures whose output layouts PyTorch's meta kernels decided (the rules stopped).
  uint64_t layoutMetaWalks = 0;
  // Settings::profile: frames the hook handled, time in the hook, time running graphs.
  uint64_t profiledFrames = 0, hookNs = 0, graphNs = 0;
};

struct EventLog {
  bool recording = false; // keep IR text and every event detail (xjit.explain)
  std::vector<GraphEvent> graphs;
  std::vector<BreakEvent> breaks;
  std::vector<RecompileEvent> recompiles;
  std::vector<CheckEvent> checks;
  Counters counters;
};
EventLog &events();

/// Writes "[xjit] <line>\n" to sys.stderr (falls back to the C stream). Never throws; keeps
/// a pending Python error intact.
void logLine(const std::string &line);

/// warnings.warn(message, XjitWarning) attributed to the user's file:line. Returns false if the
/// warning machinery raised (e.g. -W error): the exception is left set.
bool warnUser(const std::string &message, const SourceLoc &where);

/// Sets XjitCompileError(message) as the pending exception.
void raiseCompileError(const std::string &message);

/// "model.py:12 (f)" with the file shortened to its basename.
std::string shortLoc(const SourceLoc &loc);

} // namespace xjit::frontend
