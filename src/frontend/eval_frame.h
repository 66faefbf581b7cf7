// The PEP 523 frame hook: version-independent policy (which frames are compiled, the cache
// lookup, guard checks, recompiles and the recompile limit) over a small per-CPython-version
// layer (eval_frame_311.cpp: _PyInterpreterFrame access, installing the hook).
//
// The hook is installed while any scope is active (xjit.jit calls, in any thread) or while
// whole-program mode is on (the CLI), and it compiles frames only in threads that enabled it:
// a thread-local flag is checked first. A second thread-local flag ("busy") stops captures
// while the frontend itself runs Python code (analysis, graph execution, side effects).
#pragma once

#include "driver.h"

namespace xjit::frontend {

struct ThreadState {
  int depth = 0;                      // active xjit.jit scopes in this thread
  const ScopeOptions *opts = nullptr; // the innermost scope's options
  bool busy = false;                  // the frontend is running Python code
  int libraryRootsOff = 0;            // frames running in Python for autograd or past the
                                      // recompile limit: library model forwards they call are
                                      // not compiled meanwhile (eval_frame.cpp)
  int optimizerSteps = 0;             // optimizer steps run through xjit/_optim.py `step`
                                      // (eval_frame.cpp): their own frames run as written
};
ThreadState &threadState();

/// Sets busy for the current thread during its lifetime.
class BusyScope {
public:
  BusyScope() : ts_(threadState()), prev_(ts_.busy) { ts_.busy = true; }
  ~BusyScope() { ts_.busy = prev_; }
  BusyScope(const BusyScope &) = delete;
  BusyScope &operator=(const BusyScope &) = delete;

private:
  ThreadState &ts_;
  bool prev_;
};

/// Enables compilation in this thread with `opts` (which must outlive the scope). Returns the
/// previous options, to pass to exitScope. Throws PyErrorSet if the hook is unsupported here.
const ScopeOptions *enterScope(const ScopeOptions *opts);
void exitScope(const ScopeOptions *previous);
/// Whole-program mode: every thread compiles with `opts` (nullptr: off).
void setProgramOptions(const ScopeOptions *opts);
bool hookInstalled();

/// The hook's decision for one frame, called by the version layer when this thread is enabled
/// and not busy. Returns the frame's result (nullptr: an exception is set).
PyObject *handleFrame(const FrameView &f, EvalDefault evalDefault);
/// The frame's first argument if it is a torch.nn.Module (the `self` of a module method),
/// else nullptr (borrowed).
PyObject *moduleSelf(const FrameView &f);
/// Whether the frame is a module's method (moduleSelf) or named `forward` (a resume function of
/// one passes other values first).
bool isModuleMethod(const FrameView &f);
/// The options in force for this thread (scope, else program), or nullptr.
inline const ScopeOptions *activeOptions();

// ---- implemented by the version layer (eval_frame_3XX.cpp) ----
namespace platform {
/// Whether this build has a hook for the running CPython (else a message why not).
bool supported(std::string *why);
void install();
void uninstall();
} // namespace platform

extern const ScopeOptions *gProgramOptions;

inline const ScopeOptions *activeOptions() {
  const ThreadState &ts = threadState();
  if (ts.busy) return nullptr;
  return ts.depth > 0 ? ts.opts : gProgramOptions;
}

} // namespace xjit::frontend
