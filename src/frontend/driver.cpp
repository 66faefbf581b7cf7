#include "driver.h"

#include "analyzer_bridge.h"
#include "bytecode_rewrite.h"
#include "eager.h"
#include "eval_frame.h"
#include "events.h"
#include "native_backend.h"
#include "output_layout.h"
#include "tensor_bridge.h"
#include "training.h"

#include "xjit/ir/diagnostics.h"
#include "xjit/ir/interpreter.h"
#include "xjit/ir/op_registry.h"
#include "xjit/ir/printer.h"
#include "xjit/ir/verifier.h"
#ifdef XJIT_FRONTEND_HAVE_PASSES
#include "xjit/passes/autodiff.h"
#include "xjit/passes/pass.h"
#endif

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <set>
#include <tuple>

namespace xjit::frontend {

/// Whether every reader of `op`'s results computes a new value from it (no view, in-place
/// write, region, PyTorch call or return), so that it can read the aliased value directly.
static bool onlyComputedFrom(const Op &op) {
  for (const auto &r : op.results())
    for (const Use &u : r->uses()) {
      const OpDef &d = u.user->def();
      if (d.has(kView) || d.has(kInPlace) || d.has(kSideEffect) || d.has(kTerminator) ||
          u.user->numRegions() > 0 || u.user->name() == "external_call")
        return false;
    }
  return true;
}

#ifdef XJIT_FRONTEND_NO_ANALYZER
// Built without src/frontend/analyzer*.cpp: every frame runs in Python, with one warning.
AnalyzeResult analyzeFrame(const FrameView &, const AnalyzeOptions &) {
  AnalyzeResult r;
  r.graphBreak =
      GraphBreak{"this build of xjit has no bytecode analyzer", {}, true, errors::kNoAnalyzer};
  return r;
}
#endif

const char *backendName(Backend b) {
  switch (b) {
  case Backend::Xjit: return "xjit";
  case Backend::Interp: return "interp";
  case Backend::Eager: return "eager";
  }
  return "?";
}

SourceLoc codeLoc(PyCodeObject *code) {
  SourceLoc loc;
  if (const char *f = PyUnicode_AsUTF8(code->co_filename)) loc.file = f;
  if (const char *q = PyUnicode_AsUTF8(code->co_qualname)) loc.function = q;
  PyErr_Clear();
  loc.line = code->co_firstlineno;
  return loc;
}

namespace {

using Clock = std::chrono::steady_clock;
double msSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

/// "[1, 2]", for log lines.
std::string listStr(const std::vector<int64_t> &v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i)
    s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

/// A failure inside xjit while compiling or running a frame (never the user's fault).
struct InternalFailure {
  const char *id;
  std::string reason;
};

// ---- Python exceptions raised by external (PyTorch fallback) calls ----------------------------
// The interpreter turns a kernel's exception into xjit::Error; the Python exception itself is
// parked here so that the user sees exactly what PyTorch raised.
struct PendingError {
  PyObject *type = nullptr, *value = nullptr, *tb = nullptr;
};
thread_local PendingError gPending;

void parkPythonError() {
  Py_CLEAR(gPending.type);
  Py_CLEAR(gPending.value);
  Py_CLEAR(gPending.tb);
  PyErr_Fetch(&gPending.type, &gPending.value, &gPending.tb);
}

bool restoreParkedError() {
  if (!gPending.type) return false;
  PyErr_Restore(gPending.type, gPending.value, gPending.tb);
  gPending = {};
  return true;
}


void registerExternals(Graph &g, const std::vector<PyRef> &callables, CompiledEntry &e) {
  std::vector<Op *> calls;
  g.walk([&](Op *op) {
    if (op->name() == "external_call") calls.push_back(op);
  });
  for (Op *op : calls) {
    int64_t index = op->attr("callee").asInt();
    if (index < 0 || index >= static_cast<int64_t>(callables.size()))
      throw InternalFailure{errors::kCompile, "external_call refers to fallback callable " +
                                                  std::to_string(index) + " of " +
                                                  std::to_string(callables.size())};
    // The registry may outlive the interpreter (static destructors at exit): the callable's
    // reference is dropped only while Python is alive, with the GIL.
    PyObject *callable = callables[static_cast<size_t>(index)].get();
    Py_INCREF(callable);
    std::shared_ptr<PyObject> fn(callable, [](PyObject *o) {
      if (!Py_IsInitialized()) return;
      PyGILState_STATE g = PyGILState_Ensure();
      Py_DECREF(o);
      PyGILState_Release(g);
    });
    const size_t nres = op->numResults();
    std::string name = op->attrOrNull("name") ? op->attr("name").asStr() : "";
    // An operand that is a view made in the graph goes on its base's whole storage, as eager's
    // (`v[::2].as_strided(...)` reaches past the view; fuzzer seed 23597).
    std::vector<bool> views(op->numOperands());
    for (size_t i = 0; i < views.size(); ++i) {
      const Op *def = op->operand(i)->definingOp();
      views[i] = def && def->def().has(kView);
    }
    int64_t id = registerExternalFunction([fn, nres, name, views](std::span<const RtValue> in) {
      PyGILState_STATE gil = PyGILState_Ensure();
      struct Release {
        PyGILState_STATE g;
        ~Release() { PyGILState_Release(g); }
      } release{gil};
      try {
        PyRef args = checked(PyTuple_New(static_cast<Py_ssize_t>(in.size())));
        for (size_t i = 0; i < in.size(); ++i)
          PyTuple_SET_ITEM(args.get(), static_cast<Py_ssize_t>(i),
                           (!in[i].isTensor() ? fromRtValue(in[i])
                            : i < views.size() && views[i]
                                ? exportOnWholeStorage(in[i].tensor())
                                : exportTensorOnTorchStorage(in[i].tensor()))
                               .release());
        PyRef r = checked(PyObject_Call(fn.get(), args.get(), nullptr));
        std::vector<RtValue> out;
        if (nres == 1) {
          out.push_back(toRtValue(r.get()));
        } else {
          PyRef seq = checked(PySequence_Fast(r.get(), "a fallback call with several results "
                                                       "must return a tuple or list"));
          if (static_cast<size_t>(PySequence_Fast_GET_SIZE(seq.get())) != nres) {
            PyErr_Format(PyExc_RuntimeError,
                         "fallback call '%s' returned %zd values, the graph "
                         "expects %zu",
                         name.c_str(), PySequence_Fast_GET_SIZE(seq.get()), nres);
            throw PyErrorSet();
          }
          for (size_t i = 0; i < nres; ++i)
            out.push_back(toRtValue(PySequence_Fast_GET_ITEM(seq.get(), Py_ssize_t(i))));
        }
        return out;
      } catch (const PyErrorSet &) {
        parkPythonError();
        throw KernelError("the PyTorch fallback '" + name + "' raised");
      }
    });
    e.externalIds.push_back(id);
    e.externalCallables[id] = callables[static_cast<size_t>(index)];
    op->setAttr("callee", Attr(id));
  }
}

// ---- output plans ---------------------------------------------------------------------------

void addEntrySlot(CompiledEntry &e, int slot) {
  if (std::find(e.entrySlots.begin(), e.entrySlots.end(), slot) == e.entrySlots.end())
    e.entrySlots.push_back(slot);
}

OutPlan planOutput(const OutputNode &n, CompiledEntry &e, const Graph &g) {
  OutPlan p;
  p.kind = n.kind;
  p.index = n.index;
  p.object = n.object;
  p.keys = n.keys;
  switch (n.kind) {
  case OutputNode::GraphOutput: {
    std::vector<Value *> outs = g.outputs();
    if (n.index < 0 || n.index >= static_cast<int64_t>(outs.size()))
      throw InternalFailure{errors::kCompile, "the output plan refers to graph output " +
                                                  std::to_string(n.index) + " of " +
                                                  std::to_string(outs.size())};
    // A graph input returned unchanged is the caller's own object (identity is preserved).
    Value *v = outs[static_cast<size_t>(n.index)];
    if (v->isBlockArgument() && v->ownerBlock() == g.body()) {
      p.kind = OutputNode::FromSource;
      p.slot = e.inputSlots.at(v->index());
      addEntrySlot(e, p.slot);
    }
    break;
  }
  case OutputNode::FromSource:
    p.slot = e.sources.add(n.source);
    addEntrySlot(e, p.slot);
    break;
  case OutputNode::Dict:
    if (n.keys.size() != n.children.size())
      throw InternalFailure{errors::kCompile, "a dict output with " +
                                                  std::to_string(n.keys.size()) + " keys and " +
                                                  std::to_string(n.children.size()) + " values"};
    break;
  case OutputNode::Shared:
    if (!n.definition || n.index < 0)
      throw InternalFailure{errors::kCompile, "a shared output without its definition"};
    p.definition = std::make_shared<const OutPlan>(planOutput(*n.definition, e, g));
    break;
  default: break;
  }
  for (const OutputNode &c : n.children)
    p.children.push_back(planOutput(c, e, g));
  return p;
}

/// Clears the view replays of the outputs built in its scope, also when building them raised.
struct ClearInputViewReplays {
  ~ClearInputViewReplays() { clearInputViewReplays(); }
};

/// Builds the object described by `p`. Graph outputs are converted once each, so that the same
/// output used twice is the same Python object (as in eager); so are shared objects, kept in
/// `done` after the graph outputs. Throws PyErrorSet.
PyRef buildOutput(const OutPlan &p, const std::vector<RtValue> &outs, std::vector<PyRef> &done,
                  SourceValues &values) {
  switch (p.kind) {
  case OutputNode::Shared: {
    const size_t at = outs.size() + static_cast<size_t>(p.index);
    if (done.size() <= at) done.resize(at + 1);
    if (!done[at]) {
      PyRef built = buildOutput(*p.definition, outs, done, values);
      done[at] = std::move(built); // (done may have grown while building)
    }
    return done[at];
  }
  case OutputNode::GraphOutput: {
    PyRef &slot = done.at(static_cast<size_t>(p.index));
    // A view is a view of its whole base's storage as in eager: of the caller's tensor for a
    // view of an input (as_strided of it after a graph break reaches past the view, fuzzer
    // seed 5224), of the graph's buffer for a slice of a value not returned (seed 23597).
    const RtValue &v = outs.at(static_cast<size_t>(p.index));
    if (!slot) slot = v.isTensor() ? exportOnWholeStorage(v.tensor()) : fromRtValue(v);
    return slot;
  }
  case OutputNode::Constant: return p.object;
  case OutputNode::FromSource: {
    PyObject *o = values.get(p.slot);
    if (!o) {
      PyErr_Format(PyExc_RuntimeError, "xjit: the object at %s disappeared during the call",
                   "a captured source");
      throw PyErrorSet();
    }
    return PyRef::borrow(o);
  }
  case OutputNode::Tuple:
  case OutputNode::List:
  case OutputNode::NamedTuple: {
    const Py_ssize_t n = static_cast<Py_ssize_t>(p.children.size());
    PyRef items = checked(p.kind == OutputNode::List ? PyList_New(n) : PyTuple_New(n));
    for (Py_ssize_t i = 0; i < n; ++i) {
      PyObject *v = buildOutput(p.children[size_t(i)], outs, done, values).release();
      if (p.kind == OutputNode::List)
        PyList_SET_ITEM(items.get(), i, v);
      else
        PyTuple_SET_ITEM(items.get(), i, v);
    }
    if (p.kind == OutputNode::NamedTuple)
      return checked(PyObject_Call(p.object.get(), items.get(), nullptr));
    return items;
  }
  case OutputNode::Dict: {
    PyRef d = checked(PyDict_New());
    for (size_t i = 0; i < p.children.size(); ++i) {
      PyRef v = buildOutput(p.children[i], outs, done, values);
      if (PyDict_SetItem(d.get(), p.keys[i].get(), v.get()) != 0) throw PyErrorSet();
    }
    return d;
  }
  }
  return PyRef::borrow(Py_None);
}

/// Whether a graph output is the target tensor's own memory, laid out as it is: the runtime
/// wrote it in place (reinplace), so copying it into the target would copy it onto itself.
bool alreadyInPlace(const RtValue &out, const dlpack::DLTensor *target) {
  if (!target || !out.isTensor()) return false;
  const Tensor &t = out.tensor();
  if (!t.storage() || t.data() != static_cast<char *>(target->data) + target->byte_offset ||
      t.rank() != target->ndim)
    return false;
  int64_t contiguous = 1;
  for (int d = target->ndim - 1; d >= 0; --d) {
    const int64_t stride = target->strides ? target->strides[d] : contiguous;
    if (t.sizes()[size_t(d)] != target->shape[d] ||
        (t.sizes()[size_t(d)] > 1 && t.strides()[size_t(d)] != stride))
      return false;
    contiguous *= target->shape[d];
  }
  return true;
}

bool gradEnabled();
void setGradMode(bool enabled);

/// Whether `t` is a leaf tensor that requires grad.
bool leafRequiringGrad(PyObject *t) {
  static PyObject *requiresGradName = internedStr("requires_grad");
  static PyObject *isLeafName = internedStr("is_leaf");
  PyRef rg = checked(PyObject_GetAttr(t, requiresGradName));
  if (rg.get() != Py_True) return false;
  PyRef leaf = checked(PyObject_GetAttr(t, isLeafName));
  return leaf.get() == Py_True;
}

/// torch._C._increment_version(tensors): what an in-place op does to each tensor it writes.
void bumpVersions(const std::vector<PyObject *> &tensors) {
  static PyObject *increment = [] {
    PyRef c = checked(PyImport_ImportModule("torch._C"));
    return checked(PyObject_GetAttrString(c.get(), "_increment_version")).release();
  }();
  PyRef tuple = checked(PyTuple_New(static_cast<Py_ssize_t>(tensors.size())));
  for (size_t i = 0; i < tensors.size(); ++i) {
    Py_INCREF(tensors[i]);
    PyTuple_SET_ITEM(tuple.get(), static_cast<Py_ssize_t>(i), tensors[i]);
  }
  checked(PyObject_CallOneArg(increment, tuple.get()));
}

void replayEffects(const CompiledEntry &e, const std::vector<RtValue> &outs,
                   std::vector<PyRef> &done, SourceValues &values) {
  static PyObject *appendName = internedStr("append");
  static PyObject *copyName = internedStr("copy_");
  // Tensors the graph wrote in place: their version counters are bumped as an in-place op
  // would (autograd's check of saved tensors, the weight cache's tags).
  std::vector<PyObject *> writtenInPlace;
  int grad = -1; // torch.is_grad_enabled(), asked once a copy needs it
  for (const EffectPlan &fx : e.effects) {
    if (fx.inPlaceOutput >= 0 &&
        alreadyInPlace(outs.at(size_t(fx.inPlaceOutput)), values.tensor(fx.target))) {
      writtenInPlace.push_back(values.get(fx.target));
      continue;
    }
    PyRef value = buildOutput(fx.value, outs, done, values);
    PyObject *target = fx.target >= 0 ? values.get(fx.target) : nullptr;
    if (fx.kind != SideEffect::SetGlobal && !target) {
      PyErr_Format(PyExc_RuntimeError, "xjit: cannot replay '%s': its target disappeared",
                   fx.text.c_str());
      throw PyErrorSet();
    }
    int rc = 0;
    switch (fx.kind) {
    case SideEffect::SetAttr: rc = PyObject_SetAttr(target, fx.name.get(), value.get()); break;
    case SideEffect::SetGlobal:
      rc = PyDict_SetItem(values.frame().globals, fx.name.get(), value.get());
      break;
    case SideEffect::ListAppend:
      rc = PyList_CheckExact(target)
               ? PyList_Append(target, value.get())
               : (checked(PyObject_CallMethodOneArg(target, appendName, value.get())), 0);
      break;
    case SideEffect::SetItem: rc = PyObject_SetItem(target, fx.key.get(), value.get()); break;
    case SideEffect::TensorCopy:
      // The graph may already have written the caller's memory in place (zero-copy inputs);
      // copying a tensor onto memory it shares is then a no-op. A leaf that requires grad was
      // written under no_grad (the analyzer refuses it otherwise; an optimizer step), so it is
      // copied into under no_grad too.
      if (grad < 0) grad = gradEnabled() ? 1 : 0;
      if (grad == 1 && leafRequiringGrad(target)) {
        setGradMode(false);
        PyObject *r = PyObject_CallMethodOneArg(target, copyName, value.get());
        setGradMode(true);
        checked(r);
      } else {
        checked(PyObject_CallMethodOneArg(target, copyName, value.get()));
      }
      break;
    }
    if (rc != 0) throw PyErrorSet();
  }
  if (!writtenInPlace.empty()) bumpVersions(writtenInPlace);
}

/// The value of the Python int carried by input `i` (Capture::intInputs; its IntSymbol guard
/// checked that it is an int of at least 2).
int64_t carriedInt(const CompiledEntry &e, size_t i, PyObject *o) {
  long long n = o && PyLong_CheckExact(o) ? PyLong_AsLongLong(o) : -1;
  if (n < 0) {
    PyErr_Clear();
    throw InternalFailure{errors::kRun, "graph input " + std::to_string(i) + " (" +
                                            e.sources.str(e.inputSlots[i]) +
                                            ") is not the int its guard checked"};
  }
  return n;
}

/// The run-time carrier of a symbolic int: a u8 tensor of `n` elements that all alias one
/// byte (stride 0; the graph reads only its size).
Tensor intCarrier(int64_t n) {
  static const Tensor byte = Tensor::empty(DType::U8, {1});
  return byte.view({n}, {0}, 0);
}

/// The same as a torch tensor (backend="eager", --check, the meta walk of output layouts).
PyRef torchIntCarrier(int64_t n) {
  static PyObject *byte = [] {
    PyObject *torch = PyImport_ImportModule("torch");
    PyObject *uint8 = torch ? PyObject_GetAttrString(torch, "uint8") : nullptr;
    PyObject *kw = uint8 ? Py_BuildValue("{s:O}", "dtype", uint8) : nullptr;
    PyObject *empty = torch ? PyObject_GetAttrString(torch, "zeros") : nullptr;
    PyObject *args = Py_BuildValue("(())"); // torch.zeros((), dtype=torch.uint8)
    PyObject *t = empty && kw && args ? PyObject_Call(empty, args, kw) : nullptr;
    Py_XDECREF(torch);
    Py_XDECREF(uint8);
    Py_XDECREF(kw);
    Py_XDECREF(empty);
    Py_XDECREF(args);
    return t; // a 0-d uint8 tensor, kept for the process
  }();
  if (!byte) throw PyErrorSet();
  return checked(PyObject_CallMethod(byte, "expand", "L", static_cast<long long>(n)));
}

/// The Python float carried by input `i` (Capture::floatInputs; its guard checked the type).
double carriedFloat(const CompiledEntry &e, size_t i, PyObject *o) {
  if (!o || !PyFloat_Check(o))
    throw InternalFailure{errors::kRun, "graph input " + std::to_string(i) + " (" +
                                            e.sources.str(e.inputSlots[i]) +
                                            ") is not the float its guard checked"};
  return PyFloat_AS_DOUBLE(o);
}

/// The run-time carrier of a float: a 0-d f64 tensor.
Tensor floatCarrier(double v) {
  Tensor t = Tensor::empty(DType::F64, {});
  t.setDouble(0, v);
  return t;
}

/// The graph's inputs; with `tags`, also the content tags of its nn.Parameter inputs.
std::vector<RtValue> fetchInputs(const CompiledEntry &e, SourceValues &values,
                                 backend::ContentTags *tags = nullptr) {
  std::vector<RtValue> in;
  in.reserve(e.inputSlots.size());
  for (size_t i = 0; i < e.inputSlots.size(); ++i) {
    const int slot = e.inputSlots[i];
    PyObject *o = values.get(slot);
    if (!o)
      throw InternalFailure{errors::kRun, "graph input " + std::to_string(i) + " (" +
                                              e.sources.str(slot) + ") cannot be read"};
    if (e.intInputs[i]) {
      in.emplace_back(intCarrier(carriedInt(e, i, o)));
      continue;
    }
    if (e.floatInputs[i]) {
      in.emplace_back(floatCarrier(carriedFloat(e, i, o)));
      continue;
    }
    if (e.inputTypes[i].isTensor()) {
      if (const dlpack::DLTensor *dl = values.tensor(slot)) {
        in.emplace_back(importTensor(o, *dl));
        if (tags && Py_TYPE(o) == torchHandles().parameterType)
          e.paramVersions->tag(i, o, in.back().tensor().data(), *tags);
        continue;
      }
    }
    in.push_back(toRtValue(o, &e.inputTypes[i]));
  }
  return in;
}

/// The graph's inputs as Python objects (the eager backend's operands): the sources' objects
/// themselves, or copies of the tensors (--check, which must not write the caller's tensors).
std::vector<PyRef> pythonInputs(const CompiledEntry &e, SourceValues &values, bool copyTensors) {
  static PyObject *cloneName = internedStr("clone");
  std::vector<PyRef> in;
  for (size_t i = 0; i < e.inputSlots.size(); ++i) {
    PyObject *o = values.get(e.inputSlots[i]);
    if (!o)
      throw InternalFailure{errors::kRun, "graph input " + std::to_string(i) + " (" +
                                              e.sources.str(e.inputSlots[i]) + ") cannot be read"};
    if (e.intInputs[i]) {
      in.push_back(torchIntCarrier(carriedInt(e, i, o)));
      continue;
    }
    if (e.floatInputs[i]) {
      in.push_back(exportTensor(floatCarrier(carriedFloat(e, i, o))));
      continue;
    }
    in.push_back(copyTensors && isPlainTensor(o) ? checked(PyObject_CallMethodNoArgs(o, cloneName))
                                                 : PyRef::borrow(o));
  }
  return in;
}

/// backend="eager": the graph op by op with PyTorch. A failure is xjit's (an op PyTorch was
/// given wrongly), reported as an internal error; the frame may then rerun in Python.
std::vector<PyRef> runEagerChecked(const CompiledEntry &e, const std::vector<PyRef> &in) {
  try {
    return runEager(*e.graph, in, e.externalCallables);
  } catch (const PyErrorSet &) {
    if (interruptPending()) throw;
    throw std::runtime_error("backend='eager': " + takePyErrorMessage());
  }
}

// ---- compile --------------------------------------------------------------------------------

/// The frame's local-plus slots as the analyzer expects them (free variables as their cells).
std::vector<PyObject *> analyzerSlots(const FrameView &f) {
  std::vector<PyObject *> slots(f.localsplus, f.localsplus + f.nlocalsplus);
  const int nfree = f.code->co_nfreevars;
  PyObject *closure = PyFunction_GET_CLOSURE(f.function);
  for (int i = 0; i < nfree && closure && i < PyTuple_GET_SIZE(closure); ++i)
    slots[size_t(f.nlocalsplus - nfree + i)] = PyTuple_GET_ITEM(closure, i);
  return slots;
}

bool anyInputRequiresGrad(const CompiledEntry &e, SourceValues &values) {
  static PyObject *requiresGrad = internedStr("requires_grad");
  for (size_t i = 0; i < e.inputSlots.size(); ++i) {
    if (!e.inputTypes[i].isTensor()) continue;
    PyObject *o = values.get(e.inputSlots[i]);
    if (!o || !isPlainTensor(o)) continue;
    PyObject *rg = PyObject_GetAttr(o, requiresGrad);
    bool yes = rg == Py_True;
    Py_XDECREF(rg);
    PyErr_Clear();
    if (yes) return true;
  }
  return false;
}

bool gradEnabled() {
  PyObject *r = PyObject_CallNoArgs(torchHandles().isGradEnabled);
  bool yes = r == Py_True;
  Py_XDECREF(r);
  PyErr_Clear();
  return yes;
}

std::map<std::string, int> opCounts(const Graph &g, int *total) {
  std::map<std::string, int> ops;
  *total = 0;
  g.walk([&](Op *op) {
    if (op->def().has(kTerminator)) return;
    ++ops[op->name()];
    ++*total;
  });
  return ops;
}

/// XJIT_LOG=bytecode: the disassembly of each frame handed to the analyzer.
void logBytecode(PyCodeObject *code, const SourceLoc &loc) {
  PyObject *dis = PyImport_ImportModule("dis");
  PyObject *bc = dis ? PyObject_CallMethod(dis, "Bytecode", "O", code) : nullptr;
  PyObject *text = bc ? PyObject_CallMethod(bc, "dis", nullptr) : nullptr;
  const char *c = text && PyUnicode_Check(text) ? PyUnicode_AsUTF8(text) : nullptr;
  logLine("bytecode of " + shortLoc(loc) + ":\n" + (c ? c : "<unavailable>"));
  Py_XDECREF(text);
  Py_XDECREF(bc);
  Py_XDECREF(dis);
  PyErr_Clear();
}

enum class CompileStatus { Entry, Python, Skip, Raised };

/// Records a graph break / internal failure and decides what happens to the frame.
CompileStatus onBreak(const FrameView &f, CodeCache &cache, const ScopeOptions &opts,
                      const GraphBreak &gb) {
  SourceLoc frame = codeLoc(f.code);
  SourceLoc where = gb.where.known() ? gb.where : frame;
  EventLog &log = events();
  log.breaks.push_back({frame, where, gb.reason, gb.internal, gb.errorId});
  if (settings().log & kLogGraphBreaks)
    logLine("graph break in " + shortLoc(frame) + " at " + shortLoc({where.file, where.line, ""}) +
            ": " + gb.reason + (gb.internal ? " [" + gb.errorId + "]" : ""));
  cache.state = CodeCache::Python;
  cache.pythonReason = gb.reason;
  ++log.counters.framesInPython;
  std::string at = shortLoc({where.file, where.line, ""});
  if (opts.fullgraph || settings().strict) {
    std::string what = gb.internal ? "internal error " + gb.errorId : "graph break";
    raiseCompileError("xjit: " + what + " in " + frame.function + " at " + at + ": " + gb.reason);
    return CompileStatus::Raised;
  }
  if (gb.internal && !cache.warned) {
    cache.warned = true;
    if (!warnUser("xjit: " + gb.errorId + " at " + at + ": internal error while compiling " +
                      frame.function + ": " + gb.reason + "; running it in Python",
                  where))
      return CompileStatus::Raised;
  }
  return CompileStatus::Python;
}

/// Records a graph break after which the frame resumes (its capture stops there). Returns false
/// when an exception is set.
bool recordResumedBreak(const FrameView &f, const GraphBreak &gb) {
  SourceLoc frame = codeLoc(f.code);
  SourceLoc where = gb.where.known() ? gb.where : frame;
  events().breaks.push_back({frame, where, gb.reason, false, "", /*resumed=*/true});
  if (settings().log & kLogGraphBreaks)
    logLine("graph break in " + shortLoc(frame) + " at " + shortLoc({where.file, where.line, ""}) +
            ": " + gb.reason + " (the graph before it is compiled; the frame resumes after it)");
  return true;
}

CompileStatus internalBreak(const FrameView &f, CodeCache &cache, const ScopeOptions &opts,
                            const InternalFailure &fail) {
  GraphBreak gb{fail.reason, codeLoc(f.code), true, fail.id};
  return onBreak(f, cache, opts, gb);
}

/// XJIT_LOG=bytecode / --dump: the break code and the resume codes it calls.
void logRewrittenCode(const CompiledEntry &e, const FrameView &f, int offset) {
  const bool log = settings().log & kLogBytecode, dump = !settings().dumpDir.empty();
  if (!log && !dump) return;
  const SourceLoc loc = codeLoc(f.code);
  std::string text = "graph break in " + shortLoc(loc) + " at offset " + std::to_string(offset) +
                     "; break code:\n" + rewrite::disassemble(e.breakCode.get());
  PyObject *consts = reinterpret_cast<PyCodeObject *>(e.breakCode.get())->co_consts;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(consts); ++i)
    if (PyCode_Check(PyTuple_GET_ITEM(consts, i)) &&
        rewrite::isResumeCode(reinterpret_cast<PyCodeObject *>(PyTuple_GET_ITEM(consts, i)))) {
      PyObject *c = PyTuple_GET_ITEM(consts, i);
      text += "resume code " +
              std::string(PyUnicode_AsUTF8(reinterpret_cast<PyCodeObject *>(c)->co_qualname)) +
              ":\n" + rewrite::disassemble(c);
    }
  PyErr_Clear();
  if (log) logLine(text);
  if (dump) {
    static int serial = 0;
    std::ofstream out(dumpPrefix(serial++, loc) + ".bytecode.txt");
    out << "# " << shortLoc(loc) << " (" << loc.file << ")\n" << text;
  }
}

/// torch.set_grad_enabled(enabled) where the mode differs. Throws PyErrorSet.
void setGradMode(bool enabled) {
  if (gradEnabled() == enabled) return;
  PyRef torch = checked(PyImport_ImportModule("torch"));
  checked(PyObject_CallMethod(torch.get(), "set_grad_enabled", "O", enabled ? Py_True : Py_False));
}

/// An exception leaving a break code went through the pieces of one frame (break code, resume
/// function, the next break code -- resume functions run by the hook leave no entry) where
/// Python would show one frame: an entry of a generated piece followed by another piece of the
/// same function is dropped from the traceback, so it reads as without xjit (the last piece
/// shows the line).
void hideGeneratedFrames() {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  std::vector<PyRef> chain; // holds every entry while the links change
  for (PyObject *t = tb; t && PyTraceBack_Check(t);
       t = reinterpret_cast<PyObject *>(reinterpret_cast<PyTracebackObject *>(t)->tb_next))
    chain.push_back(PyRef::borrow(t));
  // Per entry: the user's function of a generated piece ("" for any other frame).
  std::vector<std::string> piece;
  for (const PyRef &t : chain) {
    PyCodeObject *code = PyFrame_GetCode(reinterpret_cast<PyTracebackObject *>(t.get())->tb_frame);
    const bool generated = rewrite::isBreakCode(code) || rewrite::isResumeCode(code);
    piece.push_back(generated ? rewrite::userQualname(code) + "@" +
                                    (PyUnicode_AsUTF8(code->co_filename) ?: "")
                              : "");
    Py_DECREF(code);
  }
  PyErr_Clear();
  std::vector<PyObject *> kept;
  for (size_t i = 0; i < chain.size(); ++i)
    if (piece[i].empty() || i + 1 == chain.size() || piece[i + 1] != piece[i])
      kept.push_back(chain[i].get());
  for (size_t i = 0; i < kept.size(); ++i) {
    auto *t = reinterpret_cast<PyTracebackObject *>(kept[i]);
    PyTracebackObject *next =
        i + 1 < kept.size() ? reinterpret_cast<PyTracebackObject *>(kept[i + 1]) : nullptr;
    Py_XINCREF(next);
    Py_XSETREF(t->tb_next, next);
  }
  PyObject *head = kept.empty() ? nullptr : kept[0];
  Py_XINCREF(head);
  if (value && head && PyExceptionInstance_Check(value)) PyException_SetTraceback(value, head);
  Py_XDECREF(tb);
  PyErr_Restore(type, value, head);
}

/// Runs the rest of a frame whose capture stopped at a graph break: the break code, as a
/// function of the frame's globals and closure, on the rebuilt stack and locals.
PyObject *continueAfterBreak(const CompiledEntry &e, const PyRef &args, const FrameView &f) {
  PyRef fn = checked(PyFunction_New(e.breakCode.get(), f.globals));
  if (PyObject *closure = f.function ? PyFunction_GET_CLOSURE(f.function) : nullptr)
    if (PyFunction_SetClosure(fn.get(), closure) != 0) throw PyErrorSet();
  setGradMode(e.breakGradEnabled);
  PyObject *result = PyObject_Call(fn.get(), args.get(), nullptr);
  if (!result) hideGeneratedFrames();
  return result;
}

/// A Python sequence of ints (tensor.size(), tensor.stride()).
std::vector<int64_t> intsOf(const PyRef &seq) {
  std::vector<int64_t> out;
  PyRef fast = checked(PySequence_Fast(seq.get(), "a tuple of ints"));
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fast.get()); ++i) {
    const long long v = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fast.get(), i));
    if (v == -1 && PyErr_Occurred()) throw PyErrorSet();
    out.push_back(v);
  }
  return out;
}

/// The layouts eager gives the graph's outputs (output_layout.h), from the inputs of this call;
/// the tensor inputs' layout classes are guarded, so a later call with inputs laid out otherwise
/// (a transposed one, channels_last) recompiles. Where a tensor output's layout cannot be
/// derived, the entry runs in Python (eager's layout is then not known). `callOrders` gets the
/// layouts dropout's noise is drawn in (layoutCallsInEagersOrder), `storageReads` those of what
/// `as_strided` fallbacks read (computeStorageReadsInLayouts).
void deriveLayouts(CompiledEntry &e, const Graph &g, SourceValues &values,
                   const std::vector<PyRef> &fallbacks, std::vector<Guard> &guards,
                   std::map<const Op *, std::vector<int>> &callOrders,
                   std::map<const Op *, StorageRead> &storageReads) {
  // XJIT_NO_OUTPUT_LAYOUTS=1: outputs as the graph makes them, as before layouts were kept
  // (for A/B benchmarks of their cost only: strides may then differ from eager's).
  static const bool off = [] {
    const char *v = std::getenv("XJIT_NO_OUTPUT_LAYOUTS");
    return v && *v && std::string(v) != "0";
  }();
  if (off) return;
  std::vector<PyRef> in = pythonInputs(e, values, false);
  bool symbolic = false;
  for (const Type &t : e.inputTypes)
    if (t.isTensor())
      for (const DimExpr &d : t.shape())
        symbolic = symbolic || !d.isStatic();
  OutputLayouts layouts;
  try {
    // Before registerExternals, an external_call's `callee` indexes the capture's fallbacks.
    ExternalCallables externals;
    for (size_t i = 0; i < fallbacks.size(); ++i)
      externals[int64_t(i)] = fallbacks[i];
    // Where simple rules settle the layouts, PyTorch's meta kernels are not needed.
    std::vector<std::vector<int>> inputOrders(e.inputSlots.size());
    bool dense = true;
    std::string notDense; // the input that is not, for the log
    // (Strides as PyTorch reports them: DLPack views normalize those of size-1 dims.)
    static PyObject *sizeName = internedStr("size");
    static PyObject *strideName = internedStr("stride");
    for (size_t i = 0; i < e.inputSlots.size() && dense; ++i) {
      if (!e.inputTypes[i].isTensor() || e.intInputs[i]) continue; // (read by `size` only)
      if (!isPlainTensor(in[i].get())) {
        dense = false;
        break;
      }
      std::vector<int64_t> sizes =
          intsOf(checked(PyObject_CallMethodNoArgs(in[i].get(), sizeName)));
      std::vector<int64_t> strides =
          intsOf(checked(PyObject_CallMethodNoArgs(in[i].get(), strideName)));
      inputOrders[i] = denseOrder(sizes, strides);
      // Dense but for the strides of size-1 dims (a slice `x[:, :n]` of a batch of one): the
      // rules lay out the outputs as for its dense twin; they differ from eager's only in the
      // strides of size-1 dims, which address no element (inLayout re-strides an output whose
      // strides differ there; docs/frontend.md "Output layouts").
      if (inputOrders[i].empty()) inputOrders[i] = denseOrderOfSignificantDims(sizes, strides);
      dense = !inputOrders[i].empty() || sizes.empty();
      if (!dense)
        notDense = "input " + std::to_string(i) + " (sizes " + listStr(sizes) + ", strides " +
                   listStr(strides) + ") is not dense";
    }
    // XJIT_LAYOUT_META_WALK=1: PyTorch's meta kernels decide every layout (A/B benchmarks).
    static const bool metaOnly = [] {
      const char *v = std::getenv("XJIT_LAYOUT_META_WALK");
      return v && *v && std::string(v) != "0";
    }();
    const Op *stoppedAt = nullptr;
    if (metaOnly || !dense || !staticOutputLayouts(g, inputOrders, layouts.outputs, &stoppedAt)) {
      if (settings().log & kLogGraphs)
        logLine("output layouts of " + g.name() + ": PyTorch's meta kernels decide (" +
                (!dense
                     ? (notDense.empty() ? std::string("an input is not a plain tensor") : notDense)
                 : stoppedAt ? "the rules stop at " + stoppedAt->describe()
                             : std::string("the rules stop")) +
                ")");
      ++events().counters.layoutMetaWalks;
      KeepRngState keep; // a fallback without tensor operands runs on the CPU
      layouts = deriveOutputLayouts(g, in, externals, symbolic);
    }
  } catch (const PyErrorSet &) {
    if (interruptPending()) throw;
    layouts.derived = false;
    layouts.reason = "deriving the outputs' layouts failed: " + takePyErrorMessage();
  } catch (const std::exception &ex) {
    PyErr_Clear();
    layouts.derived = false;
    layouts.reason = std::string("deriving the outputs' layouts failed: ") + ex.what();
  }
  if (!layouts.derived && e.action == EntryAction::RunGraph) {
    e.action = EntryAction::RunPython;
    e.pythonReason = layouts.reason;
  }
  e.outputLayouts = std::move(layouts.outputs);
  callOrders = std::move(layouts.callOrders);
  storageReads = std::move(layouts.storageReads);
  for (Guard &guard : guards) {
    if (guard.kind != Guard::TensorMatch) continue;
    const int slot = e.sources.add(guard.source);
    if (std::find(e.inputSlots.begin(), e.inputSlots.end(), slot) == e.inputSlots.end()) continue;
    if (const dlpack::DLTensor *t = values.tensor(slot))
      guard.layout = layoutClass(t->shape, t->strides, t->ndim);
  }
}

/// Marks each graph input whose tensor this call gives laid out with unit stride in another dim
/// than the last (a transposed matrix, a channels_last image) with that dim (unitDimHint): the
/// native kernels reading it then get fast versions laid out for it, not only their general
/// (scalar) one. The inputs' layout classes are guarded (deriveLayouts), so later calls give
/// the same dim; the kernels' stride checks decide at run time all the same.
void hintInputUnitDims(Graph &g, const CompiledEntry &e, SourceValues &values) {
  for (size_t i = 0; i < e.inputSlots.size() && i < g.numInputs(); ++i) {
    if (!e.inputTypes[i].isTensor() || e.intInputs[i] || e.floatInputs[i]) continue;
    const dlpack::DLTensor *t = values.tensor(e.inputSlots[i]);
    if (!t || !t->strides || t->ndim < 2) continue;
    const int last = t->ndim - 1;
    if (t->shape[last] == 1 || t->strides[last] == 1) continue; // as the kernels expect
    int unit = -1; // -2: more than one (an overlapping view): no hint
    for (int d = 0; d < t->ndim; ++d)
      if (t->shape[d] > 1 && t->strides[d] == 1) unit = unit == -1 ? d : -2;
    if (unit >= 0 && g.input(i)->type().isTensor() && g.input(i)->type().rank() == t->ndim)
      g.input(i)->setUnitDimHint(unit);
  }
}

void markSeen(const OutPlan &p, std::vector<bool> &seen) {
  if (p.kind == OutputNode::GraphOutput && p.index >= 0 && size_t(p.index) < seen.size())
    seen[size_t(p.index)] = true;
  if (p.definition) markSeen(*p.definition, seen);
  for (const OutPlan &c : p.children)
    markSeen(c, seen);
}

/// The outputs whose layout is kept: those the program can see (in the result, a break's
/// arguments, a stored value). One only copied into an input (a write to it) needs none.
void selectLaidOutOutputs(CompiledEntry &e) {
  std::vector<bool> seen(e.outputLayouts.size(), false);
  markSeen(e.result, seen);
  // A training step's hidden view bases (addHiddenViewBases): their views are seen.
  const size_t hidden = e.training ? e.training->hiddenOutputs : 0;
  for (size_t i = seen.size() - std::min(hidden, seen.size()); i < seen.size(); ++i)
    seen[i] = true;
  for (const EffectPlan &fx : e.effects)
    if (fx.kind != SideEffect::TensorCopy || fx.value.kind != OutputNode::GraphOutput)
      markSeen(fx.value, seen);
  for (size_t i = 0; i < e.outputLayouts.size(); ++i)
    if (seen[i] &&
        (e.outputLayouts[i].kind != OutputLayout::Any || !e.outputLayouts[i].baseOrder.empty()))
      e.laidOutOutputs.push_back(i);
  e.visibleOutputs = std::move(seen);
}

/// Moves each visible graph output that the graph hands out on the storage of an earlier one
/// where eager's two are separate tensors (Capture::outputStorages) onto a copy of that
/// storage: a write by the caller to one must not reach the other. Outputs of one eager tensor
/// move onto one copy, at their offsets, so they still view each other. (The graph views where
/// eager copies: `h.contiguous()`, `h.reshape(-1)` of an h eager lays out transposed and the
/// graph contiguous.)
void separateOutputs(const CompiledEntry &e, std::vector<RtValue> &outs) {
  if (!e.separatesOutputs) return; // (one eager tensor or none among the visible outputs)
  // Per storage the graph handed out: the eager tensor seen on it first; and the copies made
  // for the others (storage, eager tensor, copy). Few outputs: linear scans.
  std::vector<std::pair<const void *, int>> firsts;
  std::vector<std::tuple<const void *, int, std::shared_ptr<Storage>>> copies;
  for (size_t i = 0; i < outs.size() && i < e.outputStorages.size(); ++i) {
    const int eagers = e.outputStorages[i];
    if (eagers < 0 || i >= e.visibleOutputs.size() || !e.visibleOutputs[i] || !outs[i].isTensor() ||
        !outs[i].tensor().storage())
      continue;
    const Tensor &t = outs[i].tensor();
    const void *storage = t.storage().get();
    auto first = std::find_if(firsts.begin(), firsts.end(),
                              [&](const auto &f) { return f.first == storage; });
    if (first == firsts.end()) {
      firsts.emplace_back(storage, eagers);
      continue;
    }
    if (first->second == eagers) continue;
    auto made = std::find_if(copies.begin(), copies.end(), [&](const auto &c) {
      return std::get<0>(c) == storage && std::get<1>(c) == eagers;
    });
    if (made == copies.end()) made = copies.emplace(copies.end(), storage, eagers, nullptr);
    std::shared_ptr<Storage> &copy = std::get<2>(*made);
    if (!copy) {
      const int64_t n = t.storage()->nbytes();
      copy = Tensor(t.storage(), DType::U8, {n}, {1}, 0).contiguousCopy().storage();
      ++events().counters.layoutCopies;
    }
    outs[i] = RtValue(Tensor(copy, t.dtype(), t.sizes(), t.strides(), t.offset()));
  }
}

/// Puts each graph output into the layout eager gives it (CompiledEntry::outputLayouts): an
/// output already in it is left alone (its Python object is made later, as for any output);
/// another is copied into it. Throws PyErrorSet.
void restoreLayouts(const CompiledEntry &e, const std::vector<RtValue> &outs,
                    std::vector<PyRef> &done) {
  if (e.outputLayouts.size() != outs.size()) return; // (cannot happen: outputs are fixed)
  for (size_t i : e.laidOutOutputs) {
    const OutputLayout &layout = e.outputLayouts[i];
    if (!done[i]) {
      const RtValue &v = outs[i];
      if (!v.isTensor() || hasLayout(layout, v.tensor().sizes(), v.tensor().strides())) continue;
      const bool copies = !restridesOnly(layout, v.tensor().sizes(), v.tensor().strides());
      // A copy would cut it off from another output sharing its memory (a view of it, or the
      // same tensor returned twice), which eager keeps connected: the frame runs in Python,
      // where it can (below for a graph that cannot be rerun). An output the program never
      // sees (a value only copied back into the input it wrote) keeps nothing connected: a
      // view of that input is rebuilt on the input itself (_xjit_input_view; fuzzer seed 89:
      // `v = a.squeeze(0); a[...] = 7; return v` under dynamic=True).
      // A graph that cannot be rerun (it wrote the caller's tensors, or called PyTorch) keeps
      // such an output in the graph's strides instead: other strides than eager's, but the
      // outputs stay views of each other (fuzzer seed 23716: `v1.index_put_(...)`, a fallback,
      // then `v3 = v1.squeeze()`; a write to v3 after a graph break missed v1 when v1 was copied).
      // So does a view at an offset with symbolic sizes whose order eager's was only at the
      // capture's sizes (OutputLayout::symbolicView).
      // An empty view addresses no element: nothing of it stays connected (fuzzer seed 140204:
      // `v5[1:]` of a batch of one next to v5).
      bool shared = false;
      for (size_t j = 0; copies && j < outs.size() && !shared; ++j)
        shared = j != i && j < e.visibleOutputs.size() && e.visibleOutputs[j] &&
                 outs[j].isTensor() && v.tensor().storage() &&
                 outs[j].tensor().storage() == v.tensor().storage() && v.tensor().numel() > 0 &&
                 outs[j].tensor().numel() > 0;
      if (shared && e.rerunnable && !layout.symbolicView)
        throw InternalFailure{errors::kRun, "graph output " + std::to_string(i) +
                                                " shares memory with another output and is not in "
                                                "eager's layout"};
      done[i] = exportOnWholeStorage(v.tensor());
      if (shared) continue;
      if (copies) ++events().counters.layoutCopies;
    }
    done[i] = inLayout(layout, done[i]);
  }
}

std::shared_ptr<CompiledEntry> buildEntry(const FrameView &f, Capture &cap,
                                          const ScopeOptions &opts) {
  if (settings().inject == "compile")
    throw InternalFailure{errors::kCompile, "injected failure (XJIT_TEST_INJECT=compile)"};
  auto e = std::make_shared<CompiledEntry>();
  e->optionsKey = opts.key();
  if (!cap.graph) throw InternalFailure{errors::kCompile, "the capture has no graph"};
  Graph &g = *cap.graph;
  if (g.numInputs() != cap.inputs.size())
    throw InternalFailure{errors::kCompile, "the graph has " + std::to_string(g.numInputs()) +
                                                " inputs but the capture gives " +
                                                std::to_string(cap.inputs.size()) + " sources"};
  e->outputStorages = cap.outputStorages;
  for (size_t i = 0; i < cap.inputs.size(); ++i) {
    e->inputSlots.push_back(e->sources.add(cap.inputs[i]));
    e->inputTypes.push_back(g.input(i)->type());
  }
  e->intInputs.assign(cap.inputs.size(), false);
  for (size_t i : cap.intInputs)
    if (i < e->intInputs.size()) e->intInputs[i] = true;
  e->floatInputs.assign(cap.inputs.size(), false);
  for (size_t i : cap.floatInputs)
    if (i < e->floatInputs.size()) e->floatInputs[i] = true;
  SourceValues values(e->sources, f);
  // Graphs compute without autograd: where an input requires grad, the entry is only valid
  // for the grad mode seen now, and with grad enabled the frame runs in Python.
  std::vector<Guard> guards = cap.guards;
  const bool hasModeGuard = std::any_of(
      guards.begin(), guards.end(), [](const Guard &g) { return g.kind == Guard::GlobalStateIs; });
  if (anyInputRequiresGrad(*e, values)) {
    const bool grad = gradEnabled();
    Guard mode{Guard::GlobalStateIs};
    mode.length = grad ? 1 : 0;
    if (!hasModeGuard) guards.push_back(std::move(mode));
    if (grad && !cap.autogradFree) {
      // A training step: compiled forward and backward graphs under a torch.autograd.Function
      // (training.h) where the capture allows it, else the frame runs under eager autograd.
      std::string why = trainingRefusal(cap, f.code, opts.backend == Backend::Xjit, opts.check);
      if (why.empty()) {
        e->training = newTrainingStep(*e, values);
        why = gradLeafRefusal(g, cap.gradLeaves, e->training->requiresGrad);
        if (!why.empty())
          e->training.reset();
        else // before the layouts: the views are rebuilt on such a base in eager's layout
          e->training->hiddenOutputs = addHiddenViewBases(g);
      }
      if (!why.empty()) {
        e->action = EntryAction::RunPython;
        e->pythonReason = "an input requires grad while grad mode is enabled and " + why;
        // The reasons that stay with this frame: what it calls can train compiled.
        e->calleesCompile =
            (cap.breakPoint || cap.cutsGradient || cap.gradModeAtExit >= 0) && !isModuleMethod(f);
      }
    }
  }
  if (!e->training && e->action != EntryAction::RunPython) {
    // Without a training step the outputs require no grad: eager's do where a leaf the frame
    // made reaches them.
    if (std::string why = gradLeafRefusal(g, cap.gradLeaves, {}); !why.empty()) {
      e->action = EntryAction::RunPython;
      e->pythonReason = why;
    }
  }
  std::map<const Op *, std::vector<int>> callOrders;
  std::map<const Op *, StorageRead> storageReads;
  deriveLayouts(*e, g, values, cap.fallbackCallables, guards, callOrders, storageReads);
  hintInputUnitDims(g, *e, values);
  // Dropout's noise drawn in eager's memory order of its input (a transposed or channels_last
  // input: another mask than a contiguous draw), and the tensors `as_strided` reads past its
  // view in eager's order, on every backend.
  if (e->action == EntryAction::RunGraph) {
    layoutCallsInEagersOrder(g, callOrders);
    if (std::string why = computeStorageReadsInLayouts(g, storageReads); !why.empty()) {
      e->action = EntryAction::RunPython;
      e->pythonReason = why;
    }
  }
  e->guards = std::make_unique<GuardSet>(guards, e->sources);
  e->guardText = e->guards->descriptions();
  e->result = planOutput(cap.result, *e, g);
  for (const SideEffect &s : cap.sideEffects) {
    EffectPlan fx;
    fx.kind = s.kind;
    if (s.kind != SideEffect::SetGlobal) {
      fx.target = e->sources.add(s.target);
      addEntrySlot(*e, fx.target);
    }
    if (!s.name.empty()) fx.name = PyRef::steal(internedStr(s.name.c_str()));
    fx.key = s.key;
    fx.value = planOutput(s.value, *e, g);
    fx.text = (fx.target >= 0 ? e->sources.str(fx.target) : "G") + "." + s.name;
    e->effects.push_back(std::move(fx));
  }
  selectLaidOutOutputs(*e);
  {
    std::set<int> eagerTensors; // of the visible outputs (separateOutputs)
    for (size_t i = 0; i < e->outputStorages.size() && i < e->visibleOutputs.size(); ++i)
      if (e->visibleOutputs[i] && e->outputStorages[i] >= 0)
        eagerTensors.insert(e->outputStorages[i]);
    e->separatesOutputs = eagerTensors.size() > 1;
  }
  // Outputs eager lays out as a permutation (transposed, channels_last) are computed in that
  // order by the native code, so no copy after the run (restoreLayouts) is needed for them.
  if (opts.backend == Backend::Xjit && e->action == EntryAction::RunGraph)
    computeOutputsInLayouts(g, e->outputLayouts, e->laidOutOutputs);
  e->eager = opts.backend == Backend::Eager;
  e->gradModeAtExit = cap.gradModeAtExit;
  e->autocastKey = cap.autocastKey;
  e->matmulBf16 = cap.matmulBf16;
  if (cap.breakPoint) {
    e->breakCode = cap.breakPoint->breakCode;
    e->breakGradEnabled = cap.breakPoint->gradEnabled;
    logRewrittenCode(*e, f, cap.breakPoint->offset);
  }
  registerExternals(g, cap.fallbackCallables, *e);
  g.walk([&](Op *op) {
    if (op->def().has(kInPlace) || (op->def().has(kSideEffect) && !op->def().has(kTerminator)))
      e->rerunnable = false;
  });
#ifdef XJIT_FRONTEND_HAVE_RUNTIME
  // A graph that writes its inputs could change a parameter within the call, after its tag
  // was taken: only graphs that write none get tags.
  if (e->rerunnable && !e->eager && (opts.weightCache || weightCacheForced()))
    e->paramVersions = std::make_unique<ParameterVersions>();
#endif
  e->graph = std::move(cap.graph);
  return e;
}

/// Verifies the capture and runs the backend's pass pipeline. Returns compile milliseconds.
double optimize(CompiledEntry &e, const ScopeOptions &opts, int id, const SourceLoc &loc) {
  Clock::time_point t0 = Clock::now();
  Graph &g = *e.graph;
  dumpGraph(g, id, loc, "before");
  std::vector<std::string> problems = verifyGraph(g);
  if (!problems.empty())
    throw InternalFailure{errors::kCompile, "the captured graph does not verify: " + problems[0]};
#ifdef XJIT_FRONTEND_HAVE_PASSES
  if (opts.backend == Backend::Xjit && passes::namedPipelines().count("inference")) {
    passes::PassManagerOptions pmOpts;
    pmOpts.log = settings().log & kLogPasses; // then the runtime's own pipeline (compileNative)
    passes::PassManager pm(pmOpts);
    // A training step keeps its custom autograd Functions (custom_vjp) for autodiff.
    const bool training = e.training && e.action == EntryAction::RunGraph;
    // Only autodiff reads these marks. Kept, an `autodiff.stop` alias of a parameter (what an
    // optimizer step's update reads under no_grad) hid the parameter from reinplace, and the
    // update went to a fresh buffer copied back after the run. An alias that reaches an output
    // or a view keeps its mark (canonicalize keeps the alias): `x.detach()` is a new tensor.
    if (!training)
      g.walk([](Op *op) {
        op->removeAttr("autodiff.recompute");
        if (op->hasAttr("autodiff.stop") && onlyComputedFrom(*op)) op->removeAttr("autodiff.stop");
      });
    if (training)
      e.training->reachBeforePasses = passes::gradientReach(g, e.training->requiresGrad);
    pm.addPipeline(training ? "cleanup" : "inference");
    pm.run(g);
  }
#endif
  dumpGraph(g, id, loc, "after");
  if (e.training && e.action == EntryAction::RunGraph) {
    if (std::string why = compileTraining(e, loc, id); !why.empty()) {
      e.training.reset();
      e.action = EntryAction::RunPython;
      e.pythonReason =
          "an input requires grad while grad mode is enabled and it cannot train: " + why;
    }
    return msSince(t0);
  }
  // An entry that runs in Python never runs its graph: no native code for it.
  if (opts.backend == Backend::Xjit && e.action == EntryAction::RunGraph &&
      !compileNative(e, loc, id))
    throw PyErrorSet();
  return msSince(t0);
}

/// Runs the analyzer on the frame (as at entry). Every failure becomes an internal graph break
/// in *r; returns false only for a pending interrupt, which must propagate.
bool analyze(const FrameView &f, const CodeCache &cache, const ScopeOptions &opts,
             const SourceLoc &loc, AnalyzeResult *r, double *captureMs) {
  std::vector<PyObject *> slots = analyzerSlots(f);
  FrameView view = f;
  view.localsplus = slots.data();
  if (settings().log & kLogBytecode) logBytecode(f.code, loc);
  AnalyzeOptions aopts;
  aopts.dynamicShapes = opts.dynamic == 1 || (opts.dynamic == -1 && cache.dynamic);
  if (opts.dynamic == -1) aopts.dynamicSources = cache.dynamicSources;
  aopts.resumeAfterBreaks = !(opts.fullgraph || settings().strict);
  if (!cache.sharingRefused) aopts.sharedModules = cache.sharedModules;
  Clock::time_point t0 = Clock::now();
  auto internal = [&](std::string reason) {
    *r = AnalyzeResult{};
    r->graphBreak = GraphBreak{std::move(reason), loc, true, errors::kAnalyzer};
  };
  try {
    if (settings().inject == "analyze")
      throw InternalFailure{errors::kAnalyzer, "injected failure (XJIT_TEST_INJECT=analyze)"};
    *r = analyzeFrame(view, aopts);
    if (interruptPending()) throw PyErrorSet();
    if (PyErr_Occurred())
      throw InternalFailure{errors::kAnalyzer,
                            "the analyzer left a Python error set: " + takePyErrorMessage()};
    if (!r->capture && !r->graphBreak)
      throw InternalFailure{errors::kAnalyzer, "the analyzer returned no result"};
    if (r->capture && r->capture->captureMilliseconds > 0)
      *captureMs = r->capture->captureMilliseconds;
    else
      *captureMs = msSince(t0);
    return true;
  } catch (const InternalFailure &fail) {
    internal(fail.reason);
  } catch (const PyErrorSet &) {
    if (interruptPending()) return false; // Ctrl-C while analyzing: nothing recorded
    internal(takePyErrorMessage());
  } catch (const std::exception &ex) {
    PyErr_Clear();
    internal(ex.what());
  }
  *captureMs = msSince(t0);
  return true;
}

/// Whether a captured graph computes anything (ops other than constants and the return).
bool hasWork(const Graph &g) {
  bool work = false;
  g.walk([&](Op *op) {
    work = work || !(op->def().has(kTerminator) || op->def().has(kConstantLike));
  });
  return work;
}

/// Records a compiled graph in the event log (explain) and logs it (XJIT_LOG=graphs,guards).
void recordGraph(CompiledEntry &e, const ScopeOptions &opts, const SourceLoc &loc, double captureMs,
                 double compileMs) {
  EventLog &log = events();
  GraphEvent ev;
  ev.id = static_cast<int>(log.graphs.size());
  ev.where = loc;
  ev.backend = backendName(opts.backend);
  ev.ops = opCounts(*e.graph, &ev.numOps);
  ev.numInputs = static_cast<int>(e.inputSlots.size());
  ev.numOutputs = static_cast<int>(e.graph->outputs().size());
  ev.guards = e.guardText;
  for (int s : e.inputSlots)
    ev.inputs.push_back(e.sources.str(s));
  ev.captureMs = captureMs;
  ev.compileMs = compileMs;
  ev.runsInPython = e.action == EntryAction::RunPython;
  // (A training entry that runs in Python for another reason, e.g. output layouts that could
  // not be derived, has no summary: its note is that reason.)
  ev.note = e.training && !ev.runsInPython ? e.training->summary : e.pythonReason;
  if (log.recording || (settings().log & kLogGraphs)) ev.ir = printGraph(*e.graph);
  e.graphId = ev.id;
  const std::string name = "graph " + std::to_string(ev.id);
  if (settings().log & kLogGraphs)
    logLine(name + " for " + shortLoc(loc) + ": " + std::to_string(ev.numOps) + " ops, backend " +
            ev.backend + (ev.runsInPython ? " (runs in Python: " + ev.note + ")" : "") + "\n" +
            ev.ir);
  if (settings().log & kLogGuards) {
    std::string text = "guards of " + name + " (" + shortLoc(loc) + "):";
    for (const std::string &g : ev.guards)
      text += "\n  " + g;
    logLine(text);
  }
  log.graphs.push_back(std::move(ev));
  ++log.counters.compiles;
}

/// A capture -> a ready entry (passes run, externals registered), recorded in the event log.
/// Throws InternalFailure, PyErrorSet or std::exception.
std::shared_ptr<CompiledEntry> compileCapture(const FrameView &f, Capture &cap,
                                              const ScopeOptions &opts, const SourceLoc &loc,
                                              double captureMs) {
  // A frame that breaks before any tensor work still gets an entry (it leads to the resume
  // function), but its empty graph is not reported as a graph (explain, logs, --dump).
  const bool report = !(cap.breakPoint && cap.graph && !hasWork(*cap.graph));
  std::shared_ptr<CompiledEntry> e = buildEntry(f, cap, opts);
  double compileMs =
      optimize(*e, opts, report ? static_cast<int>(events().graphs.size()) : -1, loc);
  if (report) recordGraph(*e, opts, loc, captureMs, compileMs);
  return e;
}

} // namespace

bool fallBackToPython(const FrameView &f, CodeCache &cache, const ScopeOptions &opts,
                      const std::string &message, bool isError, bool keepEntries) {
  cache.pythonReason = message;
  if (!keepEntries) {
    cache.state = CodeCache::Python;
    cache.entries.clear();
  }
  ++events().counters.framesInPython;
  if (settings().log & kLogRecompiles) logLine(message);
  if (opts.fullgraph || settings().strict) {
    raiseCompileError(message);
    return false;
  }
  if (cache.warned && !isError) return true;
  cache.warned = true;
  // A library model's forward the user did not ask for (eval_frame.cpp) reaching the recompile
  // limit (e.g. one entry per instance of a layer class) is no news to them: it is logged and
  // reported by explain, and runs as it would without xjit.
  if (cache.libraryRoot && !isError) return true;
  return warnUser(message, codeLoc(f.code));
}

PyObject *compileAndRun(const FrameView &f, CodeCache &cache, const ScopeOptions &opts,
                        EvalDefault evalDefault) {
  const SourceLoc loc = codeLoc(f.code);
  std::shared_ptr<CompiledEntry> entry;
  CompileStatus status = CompileStatus::Entry;
  const bool native = opts.backend == Backend::Xjit;
  const uint64_t gemmPlans = native ? gemmPlansBefore() : 0;
  if (native) warmUpLibrariesFor(f, loc);
  std::optional<FirstCallBuffers> buffers;
  if (native) buffers.emplace(loc);
  {
    BusyScope busy;
    double captureMs = 0;
    AnalyzeResult r;
    if (!analyze(f, cache, opts, loc, &r, &captureMs)) return nullptr;
    if (!r.sharingRefused.empty()) {
      cache.sharingRefused = true; // this frame keeps one entry per module instance
      if (settings().log & kLogRecompiles)
        logLine("modules of " + shortLoc(loc) + " not shared: " + r.sharingRefused);
    }
    if (!r.capture) {
      status = onBreak(f, cache, opts, *r.graphBreak);
    } else if (r.capture->breakPoint && !recordResumedBreak(f, *r.graphBreak)) {
      status = CompileStatus::Raised;
    } else if (r.capture->graph && !r.capture->breakPoint && !hasWork(*r.capture->graph)) {
      // Nothing to compute (a helper on Python values, an __init__ setting attributes): not
      // worth a guard check per call; not a graph break. A later call may do tensor work (the
      // first took a branch without any, or got no tensors), so the frame is captured again
      // after 1, 4, 16 and 64 calls in Python (a countdown, no per-call check), then runs in
      // Python for good, like a skipped file.
      constexpr int kNoWorkRetries = 4;
      status = CompileStatus::Skip;
      cache.pythonReason = "no tensor operations";
      ++events().counters.skippedNoOps;
      if (++cache.noWorkCaptures > kNoWorkRetries) {
        cache.state = CodeCache::Python;
      } else {
        cache.state = CodeCache::NoWork;
        cache.noWorkCountdown = 1u << (2 * (cache.noWorkCaptures - 1));
      }
    } else {
      try {
        entry = compileCapture(f, *r.capture, opts, loc, captureMs);
      } catch (const InternalFailure &fail) {
        entry.reset();
        status = internalBreak(f, cache, opts, fail);
      } catch (const PyErrorSet &) {
        entry.reset();
        if (interruptPending()) return nullptr;
        status = internalBreak(f, cache, opts, {errors::kCompile, takePyErrorMessage()});
      } catch (const std::exception &ex) {
        entry.reset();
        PyErr_Clear();
        status = internalBreak(f, cache, opts, {errors::kCompile, ex.what()});
      }
    }
  }
  if (status == CompileStatus::Raised) return nullptr;
  if (!entry) return evalDefault();
  if (entry->breakCode) {
    // The break code runs in Python; the resume functions it makes are compiled like the frame
    // (also when its file is filtered and the frame was passed to xjit.jit, or is a library
    // model's forward), and share the modules the frame shares from their first entry (each
    // entry's break code makes resume functions of its own).
    markSkipped(reinterpret_cast<PyCodeObject *>(entry->breakCode.get()));
    PyObject *consts = reinterpret_cast<PyCodeObject *>(entry->breakCode.get())->co_consts;
    const bool sharing = !cache.sharingRefused && !cache.sharedModules.empty();
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(consts); ++i)
      if (PyCode_Check(PyTuple_GET_ITEM(consts, i)) &&
          (cache.forceRoot || cache.libraryRoot || sharing) &&
          rewrite::isResumeCode(reinterpret_cast<PyCodeObject *>(PyTuple_GET_ITEM(consts, i)))) {
        try {
          CodeCache &resume =
              ensureCache(reinterpret_cast<PyCodeObject *>(PyTuple_GET_ITEM(consts, i)));
          resume.forceRoot = resume.forceRoot || cache.forceRoot || cache.libraryRoot;
          resume.libraryRoot = cache.libraryRoot;
          if (sharing && resume.entries.empty()) resume.sharedModules = cache.sharedModules;
        } catch (const PyErrorSet &) {
          PyErr_Clear();
        }
      }
  }
  cache.entries.push_back(entry);
  ++cache.compiles;
  // Its guards must hold for the very call they were made from; else the capture is wrong.
  SourceValues values(entry->sources, f);
  GuardFailure why;
  bool ok;
  {
    BusyScope busy;
    ok = entry->guards->check(values, &why);
  }
  if (!ok) {
    std::string msg = std::string("xjit: ") + errors::kGuardsOnCapture + " at " + shortLoc(loc) +
                      ": internal error: a fresh capture's guard fails on its own inputs (" +
                      why.detail + "); running it in Python";
    return fallBackToPython(f, cache, opts, msg, true) ? evalDefault() : nullptr;
  }
  PyObject *out = runEntry(entry, values, cache, opts, evalDefault, /*countHit=*/false);
  if (native) {
    markGemmUse(loc, gemmPlans);
    if (out) buffers->finish();
  }
  return out;
}

namespace {

/// --check: the graph runs on copies of the tensor inputs, then the frame runs in Python (its
/// result is what the program gets) and the two are compared.
PyObject *runChecked(const std::shared_ptr<CompiledEntry> &e, SourceValues &values,
                     EvalDefault evalDefault) {
  static PyObject *cloneName = internedStr("clone");
  const SourceLoc loc = codeLoc(values.frame().code);
  PyRef compiled;
  std::string failure;
  std::vector<PyRef> opInputs; // the inputs as at entry, for the op-by-op comparison
  {
    BusyScope busy;
    try {
      // A graph that writes its inputs (in place) gets copies taken now: the frame runs after.
      opInputs = pythonInputs(*e, values, !e->rerunnable);
      std::vector<RtValue> outs;
      std::vector<PyRef> done;
      if (e->eager) {
        done = runEagerChecked(*e, pythonInputs(*e, values, true));
        outs.resize(done.size());
      } else {
        std::vector<RtValue> in;
        for (size_t i = 0; i < e->inputSlots.size(); ++i) {
          PyObject *o = values.get(e->inputSlots[i]);
          if (e->intInputs[i]) {
            in.emplace_back(intCarrier(carriedInt(*e, i, o)));
          } else if (e->floatInputs[i]) {
            in.emplace_back(floatCarrier(carriedFloat(*e, i, o)));
          } else if (o && isPlainTensor(o)) {
            PyRef copy = checked(PyObject_CallMethodNoArgs(o, cloneName));
            in.emplace_back(importTensor(copy.get()));
          } else {
            in.push_back(toRtValue(o ? o : Py_None, &e->inputTypes[i]));
          }
        }
        outs = runGraph(*e, std::move(in));
        done.resize(outs.size());
        separateOutputs(*e, outs);
      }
      restoreLayouts(*e, outs, done);
      ClearInputViewReplays replays;
      compiled = buildOutput(e->result, outs, done, values);
    } catch (const InternalFailure &fail) {
      failure = fail.reason;
    } catch (const PyErrorSet &) {
      restoreParkedError();
      failure = takePyErrorMessage();
    } catch (const std::exception &ex) {
      if (restoreParkedError())
        failure = takePyErrorMessage();
      else
        failure = ex.what();
    }
  }
  PyObject *eager = evalDefault();
  if (!eager) return nullptr;
  std::string message;
  if (!failure.empty()) {
    message = "the compiled graph failed: " + failure;
  } else if (PyObject *cmp = pyClasses().checkCompare) {
    BusyScope busy;
    PyObject *r = PyObject_CallFunctionObjArgs(cmp, compiled.get(), eager, nullptr);
    if (!r) {
      message = "comparing outputs failed: " + takePyErrorMessage();
    } else {
      if (PyUnicode_Check(r)) message = PyUnicode_AsUTF8(r);
      Py_DECREF(r);
    }
  }
  if (!message.empty() && failure.empty()) {
    // Which op: the graph again, op by op, each op in PyTorch and in the reference interpreter
    // on the same operands.
    BusyScope busy;
    std::string op = firstDifferingOp(*e->graph, opInputs, e->externalCallables);
    message += "; " + (op.empty() ? std::string("every op agrees with PyTorch on its own operands "
                                                "(the capture differs from the Python code)")
                                  : op);
  }
  events().checks.push_back({loc, message});
  if (!message.empty()) {
    if (!warnUser("xjit --check: " + loc.function + " at " + shortLoc({loc.file, loc.line, ""}) +
                      ": " + message,
                  loc)) {
      Py_DECREF(eager);
      return nullptr;
    }
  }
  return eager;
}

} // namespace

namespace {
void runInterpreter(const CompiledEntry &e, std::vector<RtValue> in, std::vector<RtValue> &outs) {
  if (settings().profile) {
    Clock::time_point t0 = Clock::now();
    outs = runGraph(e, std::move(in));
    events().counters.graphNs +=
        static_cast<uint64_t>(std::chrono::nanoseconds(Clock::now() - t0).count());
  } else {
    outs = runGraph(e, std::move(in));
  }
}
} // namespace

PyObject *runEntry(const std::shared_ptr<CompiledEntry> &e, SourceValues &values, CodeCache &cache,
                   const ScopeOptions &opts, EvalDefault evalDefault, bool countHit) {
  if (countHit) {
    ++e->hits;
    ++events().counters.cacheHits;
  }
  if (e->action == EntryAction::RunPython) {
    if (e->calleesCompile) return evalDefault();
    // A frame running in Python (autograd through its parameters): the forwards of library
    // modules it calls would each be captured only to run in Python for the same reason; they
    // are not compiled while it runs (eval_frame.cpp).
    ThreadState &ts = threadState();
    ++ts.libraryRootsOff;
    PyObject *r = evalDefault();
    --ts.libraryRootsOff;
    return r;
  }
  // --check compares whole frames: a frame that breaks runs in Python (its resume functions
  // are checked as frames of their own).
  if (opts.check) return e->breakCode ? evalDefault() : runChecked(e, values, evalDefault);
  if (e->training) {
    bool hooked;
    try {
      hooked = savedTensorHooksActive();
    } catch (const PyErrorSet &) {
      PyErr_Clear();
      hooked = true;
    }
    if (hooked) return evalDefault();
  }
  bool graphRan = false;
  bool rejectedValues = false; // a kernel rejected this call's values (ErrorKind::User)
  std::string reason;
  PyRef breakArgs; // the stack and live locals at a graph break
  try {
    BusyScope busy;
    for (int slot : e->entrySlots)
      values.get(slot); // sources as the frame saw them at entry
    if (settings().inject == "run")
      throw InternalFailure{errors::kRun, "injected failure (XJIT_TEST_INJECT=run)"};
    if (settings().inject == "reject") // a kernel rejecting values Python accepts
      throw Error(ErrorKind::User, "injected rejection (XJIT_TEST_INJECT=reject)");
    std::vector<RtValue> outs;
    std::vector<PyRef> done, trainingInputs;
    if (e->eager) {
      std::vector<PyRef> in = pythonInputs(*e, values, false);
      graphRan = true;
      done = runEagerChecked(*e, in);
      outs.resize(done.size());
    } else if (e->training) {
      // Nothing is written before it returns: a failure inside runs the frame in Python.
      trainingInputs = pythonInputs(*e, values, false);
      done = runTraining(*e, trainingInputs);
      graphRan = true;
      outs.resize(done.size());
    } else {
      backend::ContentTags tags;
      std::vector<RtValue> in = fetchInputs(*e, values, e->paramVersions ? &tags : nullptr);
      graphRan = true;
#ifdef XJIT_FRONTEND_HAVE_RUNTIME
      backend::ContentTagScope tagScope(&tags);
#endif
      runInterpreter(*e, std::move(in), outs);
      done.resize(outs.size());
      separateOutputs(*e, outs);
    }
    restoreLayouts(*e, outs, done);
    if (e->training) rebuildOutputViews(*e->training, e->inputTypes, trainingInputs, done);
    ClearInputViewReplays replays;
    PyRef result = buildOutput(e->result, outs, done, values);
    replayEffects(*e, outs, done, values);
    if (e->gradModeAtExit >= 0) setGradMode(e->gradModeAtExit == 1);
    if (!e->breakCode) return result.release();
    breakArgs = std::move(result);
  } catch (const InternalFailure &fail) {
    reason = fail.reason;
  } catch (const PyErrorSet &) {
    // After the graph: an error from rebuilding outputs or replaying effects, which the frame
    // itself would have raised. Before it: reading the inputs failed (an xjit problem).
    if (graphRan || interruptPending()) return nullptr;
    reason = takePyErrorMessage();
  } catch (const std::exception &ex) {
    if (restoreParkedError()) {
      // A PyTorch fallback raised: when the frame cannot simply rerun, that is the error.
      if (!e->rerunnable) return nullptr;
      reason = takePyErrorMessage();
    } else {
      reason = ex.what();
      auto *xe = dynamic_cast<const Error *>(&ex);
      rejectedValues = xe && xe->kind() == ErrorKind::User;
    }
  }
  if (breakArgs) { // outside the busy scope: the resume functions are compiled in turn
    try {
      return continueAfterBreak(*e, breakArgs, values.frame());
    } catch (const PyErrorSet &) {
      return nullptr;
    }
  }
  PyErr_Clear();
  const SourceLoc loc = codeLoc(values.frame().code);
  if (graphRan && !e->rerunnable) {
    PyErr_Format(PyExc_RuntimeError,
                 "xjit: %s at %s: the compiled graph failed after writing to its inputs, so the "
                 "frame cannot be rerun in Python: %s",
                 errors::kRun, shortLoc(loc).c_str(), reason.c_str());
    return nullptr;
  }
  if (rejectedValues && !opts.fullgraph && !settings().strict) {
    // A kernel rejected this call's values (an index out of range): this call runs in Python,
    // which raises the program's own error, and the frame stays compiled for the next call.
    // Python accepting them is xjit's bug: then it warns and runs the frame in Python for good.
    PyObject *result = evalDefault();
    if (!result) return nullptr;
    std::string msg = std::string("xjit: ") + errors::kRun + " at " +
                      shortLoc({loc.file, loc.line, ""}) + ": the compiled graph of " +
                      loc.function + " rejected values that Python accepts: " + reason +
                      "; running it in Python";
    if (fallBackToPython(values.frame(), cache, opts, msg, true)) return result;
    Py_DECREF(result); // the warning became an error
    return nullptr;
  }
  std::string msg = std::string("xjit: ") + errors::kRun + " at " +
                    shortLoc({loc.file, loc.line, ""}) + ": internal error running the graph of " +
                    loc.function + ": " + reason + "; running it in Python";
  return fallBackToPython(values.frame(), cache, opts, msg, true) ? evalDefault() : nullptr;
}

} // namespace xjit::frontend
