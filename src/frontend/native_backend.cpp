// backend="xjit" execution: compileGraph on the CPU target, the interpreter as the fallback.
#include "native_backend.h"
#include "analyzer_bridge.h"

#include "events.h"

#include "xjit/ir/interpreter.h"
#include "xjit/ir/printer.h"

#ifdef XJIT_FRONTEND_HAVE_RUNTIME
#include "xjit/backend/compile_cache.h"
#include "xjit/backend/host_buffers.h"
#include "xjit/backend/jit.h"
#include "xjit/backend/library_warm_up.h"
#include "xjit/backend/release_memory.h"
#include "xjit/runtime/runtime.h"
#endif

#include <algorithm>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <unordered_set>

namespace xjit::frontend {

namespace {

#ifdef XJIT_FRONTEND_HAVE_RUNTIME
/// Per graph output, the graph input that a TensorCopy effect copies it into after each run
/// (a write to an input, functionalized), else -1: the runtime may compute those outputs in the
/// input's memory (reinplace), and the effect then finds them there.
std::vector<int> outputWritesInput(CompiledEntry &e) {
  std::vector<int> writes(e.graph->outputs().size(), -1);
  for (EffectPlan &fx : e.effects) {
    if (fx.kind != SideEffect::TensorCopy || fx.value.kind != OutputNode::GraphOutput) continue;
    auto input = std::find(e.inputSlots.begin(), e.inputSlots.end(), fx.target);
    const size_t out = static_cast<size_t>(fx.value.index);
    if (input == e.inputSlots.end() || out >= writes.size()) continue;
    const size_t in = static_cast<size_t>(input - e.inputSlots.begin());
    if (!(e.graph->input(in)->type() == e.graph->outputs()[out]->type())) continue;
    writes[out] = static_cast<int>(in);
    fx.inPlaceOutput = fx.value.index;
  }
  return writes;
}
#endif

} // namespace

bool compileNative(CompiledEntry &e, const SourceLoc &loc, int id, const std::string &part) {
#ifdef XJIT_FRONTEND_HAVE_RUNTIME
  std::string dumpTo = dumpPrefix(id, loc);
  if (!dumpTo.empty() && !part.empty()) dumpTo += "." + part;
  std::string failure;
  try {
    if (settings().inject == "native")
      throw std::runtime_error("injected failure (XJIT_TEST_INJECT=native)");
    runtime::CompileOptions opts;
    opts.target.keepText = !dumpTo.empty();
    opts.logPasses = settings().log & kLogPasses;
    opts.outputWritesInput = outputWritesInput(e);
    // Under PyTorch's bf16 matmul precision the products run as eager's do (bf16-products).
    if (e.matmulBf16) opts.pipeline = "bf16-products," + opts.pipeline;
    e.compiled = std::make_shared<const runtime::CompiledGraph>(
        runtime::compileGraph(*e.graph, runtime::cpuTarget(), opts));
    // A run now writes the caller's tensors while it runs: after a failure the frame cannot
    // simply run again in Python.
    if (e.compiled->stats().writesInputsInPlace) e.rerunnable = false;
    backend::noteCompile();
  } catch (const std::exception &ex) {
    e.compiled.reset();
    failure = ex.what();
  }
  if (!failure.empty())
    return warnUser(std::string("xjit: ") + kNativeCompileError + " at " +
                        shortLoc({loc.file, loc.line, ""}) +
                        ": internal error compiling the graph of " + loc.function +
                        " to native code: " + failure + "; it runs in the reference interpreter",
                    loc);
  if (!dumpTo.empty()) {
    // The graph the kernels were generated from: after the runtime's own pipeline (fusion,
    // memory plan), which the frontend's "after" dump precedes.
    std::ofstream(dumpTo + ".runtime.xir") << printGraph(e.compiled->graph());
    for (const auto &[name, text] : e.compiled->dumpFiles())
      std::ofstream(dumpTo + "." + name) << text;
  }
#else
  (void)e, (void)loc, (void)id, (void)part;
#endif
  return true;
}

uint64_t gemmPlansBefore() {
#ifdef XJIT_FRONTEND_HAVE_RUNTIME
  return backend::libraryGemmPlansMade();
#else
  return 0;
#endif
}

void warmUpLibrariesFor(const FrameView &f, const SourceLoc &loc) {
#ifdef XJIT_FRONTEND_HAVE_RUNTIME
  // Frames without a tensor argument rarely compile: they would keep the engine loaded, as
  // nothing releases it after them. A tensor in *args or **kwargs counts.
  auto holdsTensor = [](PyObject *o) {
    if (isTensor(o)) return true;
    if (PyTuple_Check(o))
      for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(o); ++i)
        if (isTensor(PyTuple_GET_ITEM(o, i))) return true;
    if (PyDict_Check(o)) {
      Py_ssize_t pos = 0;
      PyObject *key = nullptr, *value = nullptr;
      while (PyDict_Next(o, &pos, &key, &value))
        if (isTensor(value)) return true;
    }
    return false;
  };
  for (int i = 0; i < f.nlocalsplus; ++i)
    if (f.localsplus[i] && holdsTensor(f.localsplus[i])) {
      backend::preloadLlvmEngine();
      break;
    }
  // One stat() per capture until the process has started (or turned off) the warm-up.
  if (backend::gemmWarmUpRequested() || !backend::compileCacheEnabled()) return;
  if (backend::compileCacheMarked(backend::gemmMarkKey(loc.file, loc.function, loc.line)))
    backend::startGemmWarmUp();
#else
  (void)f, (void)loc;
#endif
}

void waitForLibraryThreadsAtExit() {
#ifdef XJIT_FRONTEND_HAVE_RUNTIME
  static PyMethodDef wait = {"_wait_for_library_threads",
                             [](PyObject *, PyObject *) -> PyObject * {
                               Py_BEGIN_ALLOW_THREADS backend::waitForLibraryThreads();
                               Py_END_ALLOW_THREADS Py_RETURN_NONE;
                             },
                             METH_NOARGS, nullptr};
  PyObject *atexit = PyImport_ImportModule("atexit");
  PyObject *fn = atexit ? PyCFunction_New(&wait, nullptr) : nullptr;
  PyObject *r = fn ? PyObject_CallMethod(atexit, "register", "O", fn) : nullptr;
  Py_XDECREF(r);
  Py_XDECREF(fn);
  Py_XDECREF(atexit);
  if (!r) throw PyErrorSet();
  backend::hostWaitsForLibraryThreadsAtExit();
#endif
}

void markGemmUse(const SourceLoc &loc, uint64_t before) {
#ifdef XJIT_FRONTEND_HAVE_RUNTIME
  if (backend::libraryGemmPlansMade() <= before || !backend::compileCacheEnabled()) return;
  std::string key = backend::gemmMarkKey(loc.file, loc.function, loc.line);
  if (!backend::compileCacheMarked(key)) backend::compileCacheMark(key);
#else
  (void)loc, (void)before;
#endif
}

#ifdef XJIT_FRONTEND_HAVE_RUNTIME
struct FirstCallBuffers::State {
  std::string key;
  std::optional<std::string> note; // as read before the capture
  backend::HostBufferRecording recording;
};
#else
struct FirstCallBuffers::State {};
#endif

FirstCallBuffers::FirstCallBuffers(const SourceLoc &loc) {
#ifdef XJIT_FRONTEND_HAVE_RUNTIME
  if (!backend::compileCacheEnabled()) return;
  state_ = std::make_unique<State>();
  state_->key = backend::compileCacheKey({"first-call buffers", backend::compilerIdentity(),
                                          loc.file, loc.function, std::to_string(loc.line)});
  state_->note = backend::compileCacheNote(state_->key);
  // Once per frame and process: a recapture (a recompile, a new module instance) finds the
  // buffers of the earlier first run released to the cache, or freed with the compiler's memory.
  static std::mutex mu;
  static std::unordered_set<std::string> made;
  std::vector<int64_t> sizes;
  std::istringstream in(state_->note.value_or(""));
  for (int64_t n; in >> n && n > 0;)
    sizes.push_back(n);
  std::lock_guard lock(mu);
  if (!sizes.empty() && made.insert(state_->key).second &&
      backend::makeHostBuffersAhead(std::move(sizes)) &&
      std::getenv("XJIT_TEST_BUFFERS_AHEAD_WAIT"))
    backend::waitForHostBuffersAhead(); // tests: the run then takes them for sure
#else
  (void)loc;
#endif
}

FirstCallBuffers::~FirstCallBuffers() = default;

void FirstCallBuffers::finish() {
#ifdef XJIT_FRONTEND_HAVE_RUNTIME
  if (!state_) return;
  // Under 2 MiB the faults cost a millisecond or so: not worth a note and a thread.
  constexpr int64_t kMinNotedBytes = int64_t(2) << 20;
  int64_t total = 0;
  std::string text;
  for (int64_t n : state_->recording.sizes()) {
    total += n;
    text += std::to_string(n) + " ";
  }
  if (total < kMinNotedBytes || state_->note == text) return;
  backend::compileCacheWriteNote(state_->key, text);
#endif
}

std::vector<RtValue> runGraph(const CompiledEntry &e, std::vector<RtValue> inputs) {
#ifdef XJIT_FRONTEND_HAVE_RUNTIME
  if (e.compiled) {
    std::vector<RtValue> outs = e.compiled->run(std::move(inputs));
    // After the first run of a new graph, the compiler's code and freed heap are given back
    // (xjit/backend/release_memory.h); other runs test a flag or two.
    backend::afterRun();
    return outs;
  }
#endif
  return interpret(*e.graph, std::move(inputs));
}

} // namespace xjit::frontend
