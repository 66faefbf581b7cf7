// xjit._frontend: the frame hook's Python surface. xjit.jit / xjit.explain / the CLI
// (python/xjit/jit.py, explain.py, __main__.py) are thin wrappers over it.
#include "cache.h"
#include "dropout_draws.h"
#include "eval_frame.h"
#include "events.h"
#include "native_backend.h"
#include "tensor_bridge.h"
#include "training.h"
#include "xjit/backend/jit.h"

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

namespace nb = nanobind;
using namespace xjit;
using namespace xjit::frontend;

namespace {

Backend parseBackend(const std::string &name) {
  if (name == "xjit") return Backend::Xjit;
  if (name == "interp") return Backend::Interp;
  if (name == "eager") return Backend::Eager;
  throw nb::value_error(
      ("backend must be 'xjit', 'interp' or 'eager', not '" + name + "'").c_str());
}

nb::dict locDict(const SourceLoc &l) {
  nb::dict d;
  d["file"] = l.file;
  d["line"] = l.line;
  d["function"] = l.function;
  return d;
}

nb::dict eventsDict() {
  const EventLog &log = events();
  nb::list graphs, breaks, recompiles, checks;
  for (const GraphEvent &g : log.graphs) {
    nb::dict d = locDict(g.where);
    d["id"] = g.id;
    d["backend"] = g.backend;
    nb::dict ops;
    for (const auto &[name, n] : g.ops)
      ops[name.c_str()] = n;
    d["ops"] = ops;
    d["op_count"] = g.numOps;
    d["num_inputs"] = g.numInputs;
    d["num_outputs"] = g.numOutputs;
    d["guards"] = g.guards;
    d["inputs"] = g.inputs;
    d["capture_ms"] = g.captureMs;
    d["compile_ms"] = g.compileMs;
    d["runs_in_python"] = g.runsInPython;
    d["note"] = g.note;
    d["ir"] = g.ir;
    graphs.append(d);
  }
  for (const BreakEvent &b : log.breaks) {
    nb::dict d = locDict(b.where);
    d["frame"] = locDict(b.frame);
    d["reason"] = b.reason;
    d["internal"] = b.internal;
    d["error_id"] = b.errorId;
    d["resumed"] = b.resumed;
    breaks.append(d);
  }
  for (const RecompileEvent &r : log.recompiles) {
    nb::dict d = locDict(r.frame);
    d["guard"] = r.guard;
    d["compiles"] = r.compiles;
    recompiles.append(d);
  }
  for (const CheckEvent &c : log.checks) {
    nb::dict d = locDict(c.frame);
    d["message"] = c.message;
    checks.append(d);
  }
  nb::dict counters;
  counters["cache_hits"] = log.counters.cacheHits;
  counters["cache_misses"] = log.counters.cacheMisses;
  counters["compiles"] = log.counters.compiles;
  counters["frames_in_python"] = log.counters.framesInPython;
  counters["skipped_no_ops"] = log.counters.skippedNoOps;
  counters["layout_copies"] = log.counters.layoutCopies;
  counters["layout_meta_walks"] = log.counters.layoutMetaWalks;
  counters["profiled_frames"] = log.counters.profiledFrames;
  counters["hook_ns"] = log.counters.hookNs;
  counters["graph_ns"] = log.counters.graphNs;
  nb::dict out;
  out["graphs"] = graphs;
  out["breaks"] = breaks;
  out["recompiles"] = recompiles;
  out["checks"] = checks;
  out["counters"] = counters;
  return out;
}

PyCodeObject *asCode(nb::handle h) {
  if (!PyCode_Check(h.ptr())) throw nb::type_error("expected a code object");
  return reinterpret_cast<PyCodeObject *>(h.ptr());
}

/// Runs a frontend call that may have left a Python error (PyErrorSet) in nanobind's terms.
template <class F> decltype(auto) pyCall(F &&f) {
  try {
    return f();
  } catch (const PyErrorSet &) {
    throw nb::python_error();
  }
}

} // namespace

NB_MODULE(_frontend, m) {
  m.doc() = "xjit's frontend: PEP 523 frame hook, guards, per-code cache and driver";
  // Options objects held by jit wrappers live until interpreter exit: not leaks.
  nb::set_leak_warnings(false);
  pyCall([] {
    initCodeExtra();
    return 0;
  });
  pyCall([] {
    waitForLibraryThreadsAtExit();
    return 0;
  });

  PyObject *warning = PyErr_NewExceptionWithDoc(
      "xjit.XjitWarning",
      "A frame could not be compiled (internal error, recompile limit): it runs in Python.",
      PyExc_UserWarning, nullptr);
  PyObject *compileError = PyErr_NewExceptionWithDoc(
      "xjit.XjitCompileError", "A graph break or fallback under fullgraph=True / XJIT_STRICT=1.",
      PyExc_RuntimeError, nullptr);
  if (!warning || !compileError) throw nb::python_error();
  pyClasses().warning = warning; // kept for the life of the process
  pyClasses().compileError = compileError;
  m.attr("XjitWarning") = nb::borrow(warning);
  m.attr("XjitCompileError") = nb::borrow(compileError);

  nb::class_<ScopeOptions>(m, "Options")
      .def(
          "__init__",
          [](ScopeOptions *self, const std::string &backend, const std::string &device,
             bool fullgraph, std::optional<bool> dynamic, bool check, bool weightCache) {
            if (device != "cpu")
              throw nb::value_error(("device must be 'cpu' (the reference interpreter runs on "
                                     "CPU), not '" +
                                     device + "'")
                                        .c_str());
            new (self) ScopeOptions{parseBackend(backend),
                                    fullgraph,
                                    dynamic ? int(*dynamic) : -1,
                                    check,
                                    device,
                                    weightCache};
          },
          nb::arg("backend") = "xjit", nb::arg("device") = "cpu", nb::arg("fullgraph") = false,
          nb::arg("dynamic") = nb::none(), nb::arg("check") = false,
          nb::arg("weight_cache") = false)
      .def_prop_ro("backend", [](const ScopeOptions &o) { return backendName(o.backend); })
      .def_ro("device", &ScopeOptions::device)
      .def_ro("fullgraph", &ScopeOptions::fullgraph)
      .def_prop_ro("dynamic",
                   [](const ScopeOptions &o) -> std::optional<bool> {
                     if (o.dynamic < 0) return std::nullopt;
                     return o.dynamic == 1;
                   })
      .def_ro("check", &ScopeOptions::check)
      .def_ro("weight_cache", &ScopeOptions::weightCache)
      .def("__repr__", [](const ScopeOptions &o) {
        return std::string("Options(backend='") + backendName(o.backend) +
               "', fullgraph=" + (o.fullgraph ? "True" : "False") + ", dynamic=" +
               (o.dynamic < 0 ? "None"
                : o.dynamic   ? "True"
                              : "False") +
               ", check=" + (o.check ? "True" : "False") +
               ", weight_cache=" + (o.weightCache ? "True" : "False") + ")";
      });

  m.def(
      "call",
      [](const ScopeOptions &opts, nb::handle fn, nb::tuple args, nb::dict kwargs) {
        const ScopeOptions *prev = pyCall([&] { return enterScope(&opts); });
        PyObject *r = PyObject_Call(fn.ptr(), args.ptr(), kwargs.ptr());
        exitScope(prev);
        if (!r) throw nb::python_error();
        return nb::steal(r);
      },
      nb::arg("opts"), nb::arg("fn"), nb::arg("args"), nb::arg("kwargs"),
      "fn(*args, **kwargs) with frames compiled under opts, in this thread, for this call\n"
      "(args: a tuple, kwargs: a dict).");
  m.def(
      "enable_program",
      [](nb::object opts) {
        // The options object is kept alive while program mode is on (a plain reference: a
        // static nb::object would be released after the interpreter is gone).
        static PyObject *keep = nullptr;
        if (opts.is_none()) {
          setProgramOptions(nullptr);
          Py_CLEAR(keep);
          return;
        }
        const ScopeOptions *o = &nb::cast<const ScopeOptions &>(opts);
        pyCall([&] {
          setProgramOptions(o);
          return 0;
        });
        Py_XDECREF(keep);
        keep = opts.inc_ref().ptr();
      },
      nb::arg("opts").none(),
      "Compile frames of every thread under opts (None: stop); the CLI's whole-program mode.");
  m.def("hook_installed", &hookInstalled);
  m.def(
      "mark_root",
      [](nb::handle code) {
        CodeCache &c = pyCall([&]() -> CodeCache & { return ensureCache(asCode(code)); });
        c.forceRoot = true;
      },
      "Compile this code object's frames even if its file is filtered (library code).");
  m.def(
      "code_state",
      [](nb::handle code) {
        nb::dict d;
        CodeCache *c = lookupCache(asCode(code));
        d["state"] = !c                              ? "unseen"
                     : isSkippedMarker(c)            ? "skipped"
                     : c->state == CodeCache::Python ? "python"
                     : c->recompileLimited           ? "limited"
                     : c->state == CodeCache::NoWork ? "no_work"
                                                     : "active";
        d["entries"] = c && !isSkippedMarker(c) ? c->entries.size() : 0;
        d["compiles"] = c && !isSkippedMarker(c) ? c->compiles : 0;
        d["reason"] = c && !isSkippedMarker(c) ? c->pythonReason : "";
        uint64_t hits = 0;
        if (c && !isSkippedMarker(c))
          for (const auto &e : c->entries)
            hits += e->hits;
        d["hits"] = hits;
        return d;
      },
      "The cache state of a code object (tests and debugging).");
  m.def(
      "reset",
      [] {
        resetAllCaches();
        events() = EventLog{events().recording};
      },
      "Forget every compiled entry and every event.");
  m.def(
      "training_forward",
      [](nb::handle step, nb::handle inputs) {
        PyObject *r = trainingForward(step.ptr(), inputs.ptr());
        if (!r) throw nb::python_error();
        return nb::steal(r);
      },
      nb::arg("step"), nb::arg("inputs"),
      "Runs a training step's compiled forward graph: its outputs, then the saved values.");
  m.def(
      "training_backward",
      [](nb::handle step, nb::handle values) {
        PyObject *r = trainingBackward(step.ptr(), values.ptr());
        if (!r) throw nb::python_error();
        return nb::steal(r);
      },
      nb::arg("step"), nb::arg("values"),
      "Runs a training step's compiled backward graph: (saved, saved inputs, grad outputs) ->\n"
      "the gradients of the inputs that require grad.");
  m.def("events", &eventsDict, "Compiled graphs, graph breaks, recompiles, checks, counters.");
  m.def(
      "set_recording", [](bool on) { events().recording = on; },
      "Keep IR text of compiled graphs in the event log (xjit.explain).");
  m.def(
      "configure",
      [](std::optional<int> recompileLimit, std::optional<std::string> log,
         std::optional<bool> strict, std::optional<std::string> dumpDir,
         std::optional<std::string> inject, std::optional<std::vector<std::string>> skipPrefixes,
         nb::object checkCompare, std::optional<bool> profile) {
        Settings &s = settings();
        if (recompileLimit) {
          if (*recompileLimit < 0) throw nb::value_error("recompile_limit must be >= 0");
          s.recompileLimit = *recompileLimit;
        }
        if (log) {
          try {
            s.log = parseLogFlags(*log);
          } catch (const std::invalid_argument &e) {
            throw nb::value_error(e.what());
          }
        }
        if (strict) s.strict = *strict;
        if (dumpDir) s.dumpDir = *dumpDir;
        if (inject) {
          if (!inject->empty() && *inject != "analyze" && *inject != "compile" &&
              *inject != "run" && *inject != "reject" && *inject != "native")
            throw nb::value_error(
                "inject must be '', 'analyze', 'compile', 'run', 'reject' or 'native'");
          s.inject = *inject;
        }
        if (skipPrefixes) s.skipPrefixes = *skipPrefixes;
        if (profile) s.profile = *profile;
        if (!checkCompare.is_none()) {
          Py_XDECREF(pyClasses().checkCompare);
          pyClasses().checkCompare = checkCompare.inc_ref().ptr();
        }
      },
      nb::arg("recompile_limit") = nb::none(), nb::arg("log") = nb::none(),
      nb::arg("strict") = nb::none(), nb::arg("dump_dir") = nb::none(),
      nb::arg("inject") = nb::none(), nb::arg("skip_prefixes") = nb::none(),
      nb::arg("check_compare") = nb::none(), nb::arg("profile") = nb::none(),
      "Process-wide settings (xjit.config).");
  m.def(
      "draw_bernoulli_noise",
      [](nb::ndarray<uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu> state,
         nb::ndarray<nb::c_contig, nb::device::cpu> out, double keep, double scale) {
        const auto n = static_cast<int64_t>(out.size());
        if (out.dtype() == nb::dtype<float>())
          return drawBernoulliNoise(state.data(), state.size(), keep, static_cast<float>(scale),
                                    static_cast<float *>(out.data()), n);
        if (out.dtype() == nb::dtype<double>())
          return drawBernoulliNoise(state.data(), state.size(), keep, scale,
                                    static_cast<double *>(out.data()), n);
        return false;
      },
      nb::arg("state"), nb::arg("out"), nb::arg("keep"), nb::arg("scale"),
      "Fills out (f32/f64, contiguous) with PyTorch's CPU bernoulli_(keep) draws times scale from\n"
      "state (torch.get_rng_state()'s bytes), advancing it; False if the state is not one it\n"
      "knows (python/xjit/_dropout.py).");
  // Counters of the process's one backend (libxjit_native.so, shared with _xjit).
  m.def("backend_stats", &backend::backendCounters);
  m.def("settings", [] {
    const Settings &s = settings();
    nb::dict d;
    d["recompile_limit"] = s.recompileLimit;
    d["log"] = s.log;
    d["strict"] = s.strict;
    d["dump_dir"] = s.dumpDir;
    d["inject"] = s.inject;
    d["skip_prefixes"] = s.skipPrefixes;
    return d;
  });
}
