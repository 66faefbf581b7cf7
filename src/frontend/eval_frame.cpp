#include "eval_frame.h"

#include "analyzer.h"
#include "bytecode_rewrite.h"
#include "events.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>

namespace xjit::frontend {

const ScopeOptions *gProgramOptions = nullptr;

PyObject *moduleSelf(const FrameView &f) {
  if (f.code->co_argcount < 1 || f.nlocalsplus < 1 || !f.localsplus[0]) return nullptr;
  static PyObject *moduleType = nullptr; // torch.nn.Module (torch is imported by now)
  if (!moduleType) {
    PyObject *mod = PyImport_ImportModule("torch.nn.modules.module");
    moduleType = mod ? PyObject_GetAttrString(mod, "Module") : nullptr; // kept for good
    Py_XDECREF(mod);
    if (!moduleType || !PyType_Check(moduleType)) {
      Py_CLEAR(moduleType);
      PyErr_Clear();
      return nullptr;
    }
  }
  PyObject *self = f.localsplus[0];
  return PyObject_TypeCheck(self, reinterpret_cast<PyTypeObject *>(moduleType)) ? self : nullptr;
}

namespace {

int gActiveScopes = 0; // across threads; the GIL protects it
bool gInstalled = false;

void ensureInstalled() {
  if (gInstalled) return;
  std::string why;
  if (!platform::supported(&why)) {
    PyErr_SetString(PyExc_RuntimeError, why.c_str());
    throw PyErrorSet();
  }
  platform::install();
  gInstalled = true;
}

void maybeUninstall() {
  if (gInstalled && gActiveScopes == 0 && !gProgramOptions) {
    platform::uninstall();
    gInstalled = false;
  }
}

bool hasPrefix(const char *s, const std::string &prefix) {
  return std::strncmp(s, prefix.c_str(), prefix.size()) == 0;
}

enum class SkipReason : uint8_t {
  None,    // a root
  Always,  // never a root: module/class body, generator, comprehension, code without a file
  Library, // a file of the standard library, an installed package, torch or xjit
};

/// Frames that are never compiled as roots: module and class bodies (they run once),
/// generators and coroutines (their frames outlive the call), comprehension frames (part of
/// their parent), code without a source file, and (`Library`) code from the standard library,
/// installed packages, torch and xjit.
SkipReason skipReason(PyCodeObject *code) {
  const int flags = code->co_flags;
  if (!(flags & CO_OPTIMIZED) || !(flags & CO_NEWLOCALS)) return SkipReason::Always;
  if (flags & (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR | CO_ITERABLE_COROUTINE))
    return SkipReason::Always;
  const char *name = PyUnicode_AsUTF8(code->co_name);
  const char *file = PyUnicode_AsUTF8(code->co_filename);
  if (!name || !file) {
    PyErr_Clear();
    return SkipReason::Always;
  }
  if (!std::strcmp(name, "<listcomp>") || !std::strcmp(name, "<dictcomp>") ||
      !std::strcmp(name, "<setcomp>") || !std::strcmp(name, "<genexpr>"))
    return SkipReason::Always;
  // "<frozen ...>", and "<string>" code made by exec (namedtuple, dataclasses) of libraries;
  // such user code can still be compiled through xjit.jit (mark_root).
  if (file[0] == '<') return SkipReason::Always;
  for (const std::string &p : settings().skipPrefixes)
    if (hasPrefix(file, p)) return SkipReason::Library;
  return SkipReason::None;
}

bool codeNamed(PyCodeObject *code, const char *name) {
  const char *n = PyUnicode_AsUTF8(code->co_name);
  if (!n) PyErr_Clear();
  return n && std::strcmp(n, name) == 0;
}

} // namespace

bool isModuleMethod(const FrameView &f) { return moduleSelf(f) || codeNamed(f.code, "forward"); }

namespace {

/// A module's constructor (`__init__` of an nn.Module, user code or not) is not a root: it runs
/// once per instance, and the analyzer does not construct modules, so a capture of it would be
/// a chain of graph breaks (one per submodule it makes) for nothing to compile.
bool isModuleConstructor(const FrameView &f) {
  return codeNamed(f.code, "__init__") && moduleSelf(f);
}

/// Whether a library frame is the `forward` of a model called from Python: `self` (the first
/// argument) is an nn.Module of an installed package or of torch.nn. Such a frame is reached
/// from the hook only when its caller runs in Python (a captured caller inlines it): a model
/// called at the top level of a script, or from a frame that fell back or broke at that call.
/// Compiling it as a root is what a user of `python -m xjit` expects of `out = model(x)`.
/// Other torch code (fx, dynamo, jit wrappers: modules outside torch.nn; torch.nn.parallel) and
/// xjit's own wrapper (JitModule, which enables the hook itself) stay filtered.
bool isLibraryModelForward(const FrameView &f) {
  if (!codeNamed(f.code, "forward")) return false;
  PyObject *self = moduleSelf(f);
  if (!self) return false;
  static PyObject *moduleName = internedStr("__module__");
  PyRef owner =
      PyRef::steal(PyObject_GetAttr(reinterpret_cast<PyObject *>(Py_TYPE(self)), moduleName));
  const char *owner_name =
      owner && PyUnicode_Check(owner.get()) ? PyUnicode_AsUTF8(owner.get()) : nullptr;
  if (!owner_name) {
    PyErr_Clear();
    return false;
  }
  auto startsWith = [&](const char *prefix) {
    return std::strncmp(owner_name, prefix, std::strlen(prefix)) == 0;
  };
  if (startsWith("xjit.") || !std::strcmp(owner_name, "xjit")) return false;
  if ((startsWith("torch.") || !std::strcmp(owner_name, "torch")) && !startsWith("torch.nn."))
    return false;
  // DataParallel / DistributedDataParallel: replication, threads, gradient buckets.
  if (startsWith("torch.nn.parallel.")) return false;
  return true;
}

/// Nothing can be captured before the program imports torch (and importing it for a program
/// that does not use it would cost seconds): until then every frame runs as usual.
bool torchImported() {
  static bool seen = false;
  if (seen) return true;
  PyObject *torch = PyDict_GetItemString(PyImport_GetModuleDict(), "torch"); // borrowed
  if (!torch) return false;
  // Frames run while torch itself is still being imported are not compiled either.
  static PyObject *specName = internedStr("__spec__");
  static PyObject *initializingName = internedStr("_initializing");
  PyObject *spec = PyObject_GetAttr(torch, specName);
  PyObject *init = spec ? PyObject_GetAttr(spec, initializingName) : nullptr;
  seen = !init || init == Py_False;
  Py_XDECREF(spec);
  Py_XDECREF(init);
  PyErr_Clear();
  return seen;
}

/// `test(probe())`; false when the probe is missing or raises.
template <class Test> bool probeSays(PyObject *probe, Test test) {
  if (!probe) return false;
  PyObject *r = PyObject_CallNoArgs(probe);
  if (!r) {
    PyErr_Clear();
    return false;
  }
  const bool yes = test(r);
  Py_DECREF(r);
  return yes;
}

/// Whether another tracer of PyTorch programs is running in this thread, so that the frame must
/// run exactly as written: torch.jit.trace's tracer records the ops the frame runs (a compiled
/// graph would hide them: the trace would hold its outputs as constants); torch.fx's symbolic
/// tracing runs the frame on Proxy objects; TorchDynamo (torch.compile, torch.export) has its
/// own frame callback set. Checked only for frames that would be compiled or run compiled
/// (about 0.15 us: two C calls and a dict lookup).
bool otherTracerActive() {
  struct Probes {
    PyObject *jitTracingState = nullptr; // torch._C._get_tracing_state
    PyObject *dynamoCallback = nullptr;  // torch._C._dynamo.eval_frame.get_eval_frame_callback
    PyObject *fxGlobals = nullptr;       // torch.fx._symbolic_trace's globals, once imported
  };
  static Probes p = [] {
    Probes q;
    PyObject *c = PyDict_GetItemString(PyImport_GetModuleDict(), "torch._C"); // borrowed
    q.jitTracingState = c ? PyObject_GetAttrString(c, "_get_tracing_state") : nullptr;
    PyObject *ef = PyImport_ImportModule("torch._C._dynamo.eval_frame");
    q.dynamoCallback = ef ? PyObject_GetAttrString(ef, "get_eval_frame_callback") : nullptr;
    Py_XDECREF(ef);
    PyErr_Clear();
    return q;
  }();
  if (!p.fxGlobals) {
    PyObject *fx = PyDict_GetItemString(PyImport_GetModuleDict(), "torch.fx._symbolic_trace");
    if (fx && PyModule_Check(fx)) {
      p.fxGlobals = PyModule_GetDict(fx);
      Py_XINCREF(p.fxGlobals); // kept for good
    }
  }
  if (p.fxGlobals && PyDict_GetItemString(p.fxGlobals, "_is_fx_tracing_flag") == Py_True)
    return true;
  auto returnsSomething = [](PyObject *r) { return r != Py_None; };
  return probeSays(p.jitTracingState, returnsSomething) ||
         probeSays(p.dynamoCallback, returnsSomething);
}

/// Whether a TorchDispatchMode is pushed (a FLOP counter, a tracer: it must see the frame's
/// ops), in which case the frame runs in Python, and which autocast state the frame runs under:
/// the key of the entries it may use (AutocastState::key), or nullopt when the frame runs in
/// Python (autocast on for another device). This is what lets the analyzer fold the dispatch
/// mode stack to empty and torch.is_autocast_enabled() to the capture's state. Two C calls while
/// autocast is off, six while it is on.
std::optional<uint32_t> autocastKeyUnlessDispatchMode(std::string *why) {
  struct Probes {
    PyObject *autocast = nullptr; // torch._C._is_any_autocast_enabled
    PyObject *modes = nullptr;    // torch._C._len_torch_dispatch_stack
  };
  static Probes p = [] {
    Probes q;
    PyObject *c = PyDict_GetItemString(PyImport_GetModuleDict(), "torch._C"); // borrowed
    q.autocast = c ? PyObject_GetAttrString(c, "_is_any_autocast_enabled") : nullptr;
    PyErr_Clear();
    q.modes = c ? PyObject_GetAttrString(c, "_len_torch_dispatch_stack") : nullptr;
    PyErr_Clear();
    return q; // kept for good
  }();
  auto on = [](PyObject *r) {
    return r != Py_False && !(PyLong_CheckExact(r) && PyLong_AsLong(r) == 0);
  };
  if (probeSays(p.modes, on)) return std::nullopt;
  if (!probeSays(p.autocast, on)) return 0u;
  std::optional<AutocastState> s = ambientAutocast(why);
  if (!s) return std::nullopt;
  return s->key();
}

/// xjit.explain lists a frame that runs in Python because of the autocast state (once per run
/// of frames in a row).
void noteAutocastRefusal(PyCodeObject *code, const std::string &why) {
  EventLog &log = events();
  if (!log.recording) return;
  SourceLoc loc = codeLoc(code);
  const std::string reason = "the frame runs in Python: " + why;
  if (!log.breaks.empty() && log.breaks.back().frame.function == loc.function &&
      log.breaks.back().frame.line == loc.line && log.breaks.back().reason == reason)
    return;
  log.breaks.push_back({loc, loc, reason, false, "", false});
}

} // namespace

ThreadState &threadState() {
  thread_local ThreadState ts;
  return ts;
}

const ScopeOptions *enterScope(const ScopeOptions *opts) {
  ensureInstalled();
  ThreadState &ts = threadState();
  const ScopeOptions *prev = ts.opts;
  ts.opts = opts;
  ++ts.depth;
  ++gActiveScopes;
  return prev;
}

void exitScope(const ScopeOptions *previous) {
  ThreadState &ts = threadState();
  ts.opts = previous;
  --ts.depth;
  --gActiveScopes;
  maybeUninstall();
}

void setProgramOptions(const ScopeOptions *opts) {
  if (opts) ensureInstalled();
  gProgramOptions = opts;
  maybeUninstall();
}

bool hookInstalled() { return gInstalled; }

namespace {
PyObject *handleFrameImpl(const FrameView &f, EvalDefault evalDefault);
} // namespace

PyObject *handleFrame(const FrameView &f, EvalDefault evalDefault) {
  if (!settings().profile) return handleFrameImpl(f, evalDefault);
  // Profiling (bench/frontend_overhead.py) counts only frames the hook served entirely from a
  // compiled entry: a frame that ran in Python would add its whole execution.
  struct Ctx {
    EvalDefault inner;
    bool ran = false;
  } ctx{evalDefault};
  EvalDefault tracked{[](void *p) {
                        auto *c = static_cast<Ctx *>(p);
                        c->ran = true;
                        return c->inner();
                      },
                      &ctx};
  auto t0 = std::chrono::steady_clock::now();
  PyObject *r = handleFrameImpl(f, tracked);
  if (!ctx.ran) {
    Counters &c = events().counters;
    c.hookNs += static_cast<uint64_t>((std::chrono::steady_clock::now() - t0).count());
    ++c.profiledFrames;
  }
  return r;
}

namespace {

/// Runs the frame in Python without compiling the library model forwards it calls: a frame past
/// the recompile limit (its inputs keep changing: so would theirs, and each would recompile up
/// to the limit in turn, level by level of the model).
PyObject *evalWithoutLibraryRoots(EvalDefault evalDefault) {
  ThreadState &ts = threadState();
  ++ts.libraryRootsOff;
  PyObject *r = evalDefault();
  --ts.libraryRootsOff;
  return r;
}

/// The code of torch.optim's step wrapper (Optimizer.profile_hook_step's `wrapper`, one code
/// object for every optimizer class), or nullptr.
PyCodeObject *optimizerStepWrapperCode() {
  static PyCodeObject *code = [] {
    BusyScope busy; // an import running code would re-enter the hook (and this initializer)
    PyCodeObject *found = nullptr;
    PyObject *mod = PyImport_ImportModule("torch.optim.optimizer");
    PyObject *cls = mod ? PyObject_GetAttrString(mod, "Optimizer") : nullptr;
    PyObject *fn = cls ? PyObject_GetAttrString(cls, "profile_hook_step") : nullptr;
    PyObject *outer = fn && PyFunction_Check(fn) ? PyFunction_GET_CODE(fn) : nullptr;
    PyObject *consts = outer ? reinterpret_cast<PyCodeObject *>(outer)->co_consts : nullptr;
    for (Py_ssize_t i = 0; consts && i < PyTuple_GET_SIZE(consts); ++i) {
      PyObject *c = PyTuple_GET_ITEM(consts, i);
      if (PyCode_Check(c) && codeNamed(reinterpret_cast<PyCodeObject *>(c), "wrapper")) {
        found = reinterpret_cast<PyCodeObject *>(c);
        Py_INCREF(c); // kept for good
      }
    }
    Py_XDECREF(fn);
    Py_XDECREF(cls);
    Py_XDECREF(mod);
    PyErr_Clear();
    return found;
  }();
  return code;
}

/// `opt.step()` of a stock SGD, Adam or AdamW called from Python (a training loop that runs in
/// Python, or at module level): its frame is torch.optim's wrapper, library code that is never a
/// root, so it runs as xjit/_optim.py's `step(fn, opt)` instead, a root whose capture is the
/// stock update (analyzer_optim.cpp), compiled as `xjit.jit(lambda: opt.step())` would be. Any
/// other call of the wrapper, and the wrapper's frames while such a step runs, run as written.
PyObject *runOptimizerStep(const FrameView &f, const ScopeOptions &opts, EvalDefault evalDefault) {
  ThreadState &ts = threadState();
  if (ts.optimizerSteps || opts.fullgraph || settings().strict || f.nlocalsplus < 2 || !f.function)
    return evalDefault();
  PyObject *args = f.localsplus[0], *kwargs = f.localsplus[1]; // wrapper(*args, **kwargs)
  if (!args || !PyTuple_CheckExact(args) || PyTuple_GET_SIZE(args) != 1 || !kwargs ||
      !PyDict_Check(kwargs) || PyDict_GET_SIZE(kwargs) != 0)
    return evalDefault();
  PyObject *opt = PyTuple_GET_ITEM(args, 0);
  if (!isStockOptimizerStep(opt, f.function) || otherTracerActive()) return evalDefault();
  // Called by a frame's break code, the step is the breaking call: its capture just failed (the
  // first step, which makes the state; hooks): it runs as written. (The caller is still the
  // thread's current frame: the new frame starts being evaluated after the hook.)
  if (PyFrameObject *caller = PyEval_GetFrame()) {
    PyCodeObject *code = PyFrame_GetCode(caller);
    const bool fromBreakCode = rewrite::isBreakCode(code);
    Py_DECREF(code);
    if (fromBreakCode) return evalDefault();
  }
  static PyObject *stepOf = [] {
    BusyScope busy;
    PyObject *mod = PyImport_ImportModule("xjit._optim");
    PyObject *fn = mod ? PyObject_GetAttrString(mod, "step_of") : nullptr; // kept for good
    Py_XDECREF(mod);
    PyErr_Clear();
    return fn;
  }();
  if (!stepOf) return evalDefault();
  // This optimizer's own copy of xjit._optim.step (its own cache and recompile limit).
  PyRef step;
  {
    BusyScope busy;
    step = PyRef::steal(PyObject_CallOneArg(stepOf, opt));
    try {
      if (step && PyFunction_Check(step.get()))
        ensureCache(reinterpret_cast<PyCodeObject *>(PyFunction_GET_CODE(step.get()))).forceRoot =
            true;
      else
        step = PyRef();
    } catch (const PyErrorSet &) {
      step = PyRef();
    }
    PyErr_Clear();
  }
  if (!step) return evalDefault();
  ++ts.optimizerSteps;
  PyObject *r = PyObject_CallFunctionObjArgs(step.get(), f.function, opt, nullptr);
  --ts.optimizerSteps;
  return r;
}

PyObject *handleFrameImpl(const FrameView &f, EvalDefault evalDefault) {
  if (!torchImported()) return evalDefault();
  const ScopeOptions *opts = activeOptions();
  if (f.code == optimizerStepWrapperCode()) return runOptimizerStep(f, *opts, evalDefault);
  CodeCache *c = lookupCache(f.code);
  if (!c) {
    const SkipReason skip = skipReason(f.code);
    const bool libraryRoot = skip == SkipReason::Library && isLibraryModelForward(f);
    if (libraryRoot && threadState().libraryRootsOff) return evalDefault(); // not yet
    if ((skip != SkipReason::None && !libraryRoot) ||
        (skip == SkipReason::None && isModuleConstructor(f))) {
      markSkipped(f.code);
      return evalDefault();
    }
    try {
      c = &ensureCache(f.code);
    } catch (const PyErrorSet &) {
      PyErr_Clear();
      return evalDefault();
    }
    c->libraryRoot = libraryRoot;
  } else if (isSkippedMarker(c) || c->state != CodeCache::Active ||
             (c->libraryRoot && threadState().libraryRootsOff)) {
    if (isSkippedMarker(c)) return evalDefault();
    if (c->recompileLimited) return evalWithoutLibraryRoots(evalDefault);
    if (c->state != CodeCache::NoWork || (c->libraryRoot && threadState().libraryRootsOff) ||
        --c->noWorkCountdown > 0)
      return evalDefault();
    c->state = CodeCache::Active; // no tensor work so far: capture it again (driver.cpp)
  }
  if (otherTracerActive()) return evalDefault();
  std::string autocastRefusal;
  const std::optional<uint32_t> autocastKey = autocastKeyUnlessDispatchMode(&autocastRefusal);
  if (!autocastKey) {
    if (!autocastRefusal.empty()) noteAutocastRefusal(f.code, autocastRefusal);
    return evalDefault();
  }

  // Guard checks may run Python (__eq__, properties): nothing is captured meanwhile.
  const uint64_t key = opts->key();
  std::shared_ptr<CompiledEntry> hit;
  std::optional<SourceValues> values;
  GuardFailure why;
  std::optional<bool> matmulBf16; // read once, for the first entry that depends on it
  {
    BusyScope busy;
    // By index, holding each entry: guard checks may run Python, during which another thread
    // may add entries to this cache (or xjit.explain may reset it).
    for (size_t i = 0; i < c->entries.size(); ++i) {
      std::shared_ptr<CompiledEntry> e = c->entries[i];
      if (e->optionsKey != key) {
        why = GuardFailure{-1, "compiled under other xjit.jit options", "", false};
        continue;
      }
      if (e->autocastKey != *autocastKey) {
        why = GuardFailure{-1, "compiled under another torch.autocast state", "", false};
        continue;
      }
      if (e->matmulBf16 && !(matmulBf16 ? *matmulBf16 : *(matmulBf16 = ambientMatmulBf16()))) {
        why = GuardFailure{-1, "compiled under PyTorch's bf16 matmul precision", "", false};
        continue;
      }
      values.emplace(e->sources, f);
      if (e->guards->check(*values, &why)) {
        hit = e;
        break;
      }
    }
  }
  if (hit) return runEntry(hit, *values, *c, *opts, evalDefault);
  values.reset();

  EventLog &log = events();
  ++log.counters.cacheMisses;
  // Past the recompile limit the entries still serve the calls they match (as torch.compile's
  // cache size limit does): the first 8 instances of a block whose resume function specializes
  // on a float keep their compiled halves. Only the misses run in Python.
  if (c->recompileLimited) return evalWithoutLibraryRoots(evalDefault);
  if (!c->entries.empty()) {
    c->lastFailure = why.detail;
    SourceLoc loc = codeLoc(f.code);
    if (c->compiles > settings().recompileLimit) {
      std::string msg = "xjit: " + loc.function + " at " + shortLoc({loc.file, loc.line, ""}) +
                        " recompiled " + std::to_string(c->compiles - 1) +
                        " times; last failing guard: " + why.detail +
                        "; calls its entries do not match run in Python from now on";
      if (!fallBackToPython(f, *c, *opts, msg, /*isError=*/false, /*keepEntries=*/true))
        return nullptr;
      c->recompileLimited = true;
      return evalWithoutLibraryRoots(evalDefault);
    }
    log.recompiles.push_back({loc, why.detail, c->compiles});
    if (settings().log & kLogRecompiles)
      logLine("recompiling " + shortLoc(loc) + ": guard failed: " + why.detail);
    // What the latest entry's guards say changed (GuardSet::sizeMismatches and the like),
    // read on this frame, and adding to a list of sources only what it lacks.
    auto onLatest = [&](std::vector<std::string> (GuardSet::*list)(SourceValues &) const) {
      BusyScope busy;
      const CompiledEntry &last = *c->entries.back();
      SourceValues now(last.sources, f);
      return (*last.guards.*list)(now);
    };
    auto addNew = [](std::vector<std::string> &to, const std::string &s) {
      if (std::find(to.begin(), to.end(), s) != to.end()) return false;
      to.push_back(s);
      return true;
    };
    if (opts->dynamic == -1 && why.size) {
      // Automatic dynamic shapes: every input dim whose size changed since the latest entry.
      c->dynamic = true;
      std::vector<std::string> changed = onLatest(&GuardSet::sizeMismatches);
      if (changed.empty()) changed.push_back(why.source); // no dim found: the whole input
      for (const std::string &s : changed)
        addNew(c->dynamicSources, s);
    }
    // XJIT_NO_MODULE_SHARING=1: one entry per module instance, as before (A/B benchmarks).
    static const bool noSharing = [] {
      const char *v = std::getenv("XJIT_NO_MODULE_SHARING");
      return v && *v && std::string(v) != "0";
    }();
    if (!c->sharingRefused && !noSharing) {
      // Another instance of a module's class (a repeated block, one more nn.Linear): the next
      // entry guards that module by type and what its capture read from it, and serves them all.
      for (const std::string &s : onLatest(&GuardSet::sharableModules))
        if (addNew(c->sharedModules, s) && (settings().log & kLogRecompiles))
          logLine("module " + s + " of " + shortLoc(loc) + " is shared: guarded by type");
    }
    if (opts->dynamic == -1) {
      // Automatic dynamic for Python ints (a decoding loop's `start_pos`) and floats (a scale
      // from .item(), a learning rate): every int or float guarded by value in the latest entry
      // that now holds another number of its type becomes symbolic (a float: a graph input).
      for (const std::string &s : onLatest(&GuardSet::numberMismatches))
        if (addNew(c->dynamicSources, s)) {
          c->dynamic = true;
          if (settings().log & kLogDynamic)
            logLine("number " + s + " of " + shortLoc(loc) + " changed: symbolic from now on");
        }
    }
  }
  return compileAndRun(f, *c, *opts, evalDefault);
}

} // namespace

} // namespace xjit::frontend

#if !(PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000)
// No version layer for this CPython yet (3.12 / 3.13 add eval_frame_312.cpp ...): xjit.jit
// raises a clear error instead of hooking frames it cannot read.
namespace xjit::frontend::platform {
bool supported(std::string *why) {
  *why = "xjit's frame hook supports CPython 3.11 only (this is " PY_VERSION ")";
  return false;
}
void install() {}
void uninstall() {}
} // namespace xjit::frontend::platform
#endif
