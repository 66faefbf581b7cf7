// From a frame to a running compiled entry: analyze the frame's bytecode, compile the capture
// (pass pipeline, external PyTorch callables, guards, output plan), and run it on later calls.
// Every internal failure ends with the frame running in Python and one warning carrying a
// stable error id; fullgraph / XJIT_STRICT turn breaks and fallbacks into XjitCompileError.
#pragma once

#include "cache.h"

#include "xjit/frontend/capture.h"

#include <cstdint>
#include <string>

namespace xjit::frontend {

enum class Backend : uint8_t {
  Xjit,   // pass pipeline "inference", then the reference interpreter (native backend pending)
  Interp, // the captured graph in the reference interpreter, unoptimized
  Eager,  // PyTorch itself (until op-by-op execution lands: the frame runs in Python)
};
const char *backendName(Backend b);

/// Options of one compile scope (xjit.jit(...)) or of the whole program (the CLI).
struct ScopeOptions {
  Backend backend = Backend::Xjit;
  bool fullgraph = false;
  int dynamic = -1;   // -1: automatic (dynamic after a size miss), 0: never, 1: from the start
  bool check = false; // run the frame in Python too and compare (--check)
  std::string device = "cpu";
  /// Reorder module weights for oneDNN once per parameter version instead of per call
  /// (param_versions.h: writes that bypass PyTorch's version counter are not seen, so opt-in).
  bool weightCache = false;
  /// Entries compiled under other options are not reused.
  uint64_t key() const {
    return uint64_t(backend) | uint64_t(fullgraph) << 8 | uint64_t(dynamic + 1) << 9 |
           uint64_t(check) << 11 | uint64_t(weightCache) << 12;
  }
};

/// Stable ids of internal errors (docs/frontend.md lists them).
namespace errors {
inline constexpr const char *kAnalyzer = "XJIT-E0001";        // the analyzer failed
inline constexpr const char *kCompile = "XJIT-E0100";         // compiling a capture failed
inline constexpr const char *kRun = "XJIT-E0101";             // running a compiled graph failed
inline constexpr const char *kGuardsOnCapture = "XJIT-E0102"; // a fresh capture's guards fail
inline constexpr const char *kNoAnalyzer = "XJIT-E0200";      // built without the analyzer
} // namespace errors

/// Runs the frame in Python (the default evaluator); returns its result (nullptr: raised).
using EvalDefaultFn = PyObject *(*)(void *ctx);
struct EvalDefault {
  EvalDefaultFn fn;
  void *ctx;
  PyObject *operator()() const { return fn(ctx); }
};

/// "file:line (qualname)" of a frame's code.
SourceLoc codeLoc(PyCodeObject *code);

/// A miss on a frame whose cache may compile: analyzes, compiles, stores the entry in `cache`
/// and runs it; or marks the frame to run in Python. Returns the frame's result (nullptr with
/// an exception set when it raised, or a fullgraph/strict error).
PyObject *compileAndRun(const FrameView &f, CodeCache &cache, const ScopeOptions &opts,
                        EvalDefault evalDefault);

/// Runs an entry whose guards passed on `values` (countHit: a cache hit, not a fresh compile).
PyObject *runEntry(const std::shared_ptr<CompiledEntry> &entry, SourceValues &values,
                   CodeCache &cache, const ScopeOptions &opts, EvalDefault evalDefault,
                   bool countHit = true);

/// The frame stops being compiled: runs in Python from now on, with a warning (and an error
/// under fullgraph/strict). Returns false if an exception is now set. With keepEntries (the
/// recompile limit) its compiled entries stay and keep serving the calls they match.
bool fallBackToPython(const FrameView &f, CodeCache &cache, const ScopeOptions &opts,
                      const std::string &message, bool isError, bool keepEntries = false);

} // namespace xjit::frontend
