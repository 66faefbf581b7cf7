// What the bytecode analyzer hands to the frame hook: a captured graph, where each of its
// inputs is read from at call time, the guards under which it may be reused, how to rebuild
// the frame's return value from the graph outputs, and the Python side effects to replay.
//
// This header is the contract between the analyzer (src/frontend/analyzer*) and the frame hook /
// guard / driver side (src/frontend/eval_frame*, guards*, driver*). It uses the CPython API.
#pragma once

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "xjit/ir/ir.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace xjit::frontend {

/// An owned reference to a Python object (Py_XINCREF/Py_XDECREF). The GIL must be held.
/// References still alive after Python has finalized (static caches destroyed at exit) are
/// leaked, not released: the objects' memory is gone with the interpreter.
class PyRef {
public:
  PyRef() = default;
  static PyRef borrow(PyObject *o) {
    Py_XINCREF(o);
    return PyRef(o);
  }
  static PyRef steal(PyObject *o) { return PyRef(o); }
  PyRef(const PyRef &o) : o_(o.o_) { Py_XINCREF(o_); }
  PyRef(PyRef &&o) noexcept : o_(o.o_) { o.o_ = nullptr; }
  PyRef &operator=(PyRef o) noexcept {
    std::swap(o_, o.o_);
    return *this;
  }
  ~PyRef() {
    if (o_ && Py_IsInitialized()) Py_DECREF(o_);
  }
  PyObject *get() const { return o_; }
  PyObject *release() {
    PyObject *o = o_;
    o_ = nullptr;
    return o;
  }
  explicit operator bool() const { return o_ != nullptr; }

private:
  explicit PyRef(PyObject *o) : o_(o) {}
  PyObject *o_ = nullptr;
};

/// An access path from the frame to a Python object, e.g. L[self].layers[2].weight.
/// Evaluated at call time to fetch graph inputs and guarded values.
struct SourceStep {
  enum Kind : uint8_t {
    Local,        // frame local slot `index` (fast locals, arguments first); `name` for messages
    Cell,         // the contents of closure cell / free variable slot `index` (localsplus index)
    CellObject,   // the cell object of free variable slot `index` itself (to write cell_contents)
    Global,       // f_globals[name], falling back to builtins
    Attr,         // getattr(prev, name)
    Item,         // prev[index] (list/tuple/ModuleList)
    DictKey,      // prev[key] with `key` a str or int constant
    ContextValue, // prev.get() of contextvars.ContextVar prev, in the calling context
  };
  Kind kind;
  int64_t index = 0;
  std::string name;
  PyRef key; // DictKey only
};
using Source = std::vector<SourceStep>;
/// "L['self'].layers[2].weight", for guards' messages and logs.
std::string sourceStr(const Source &s);

/// One assumption of a capture, checked before the capture is reused.
struct Guard {
  enum Kind : uint8_t {
    TensorMatch,   // a torch.Tensor with this dtype/device/requires_grad/rank/sizes/strides
    TypeIs,        // type(x) is `object`
    IdIs,          // x is `object` (modules, functions, classes)
    Equals,        // x == `object` for int/float/bool/str/None/tuples of those (with TypeIs)
    LenIs,         // len(x) == `length` (lists, tuples, dicts, ModuleList)
    DictKeysAre,   // list(x.keys()) == `object` (a list)
    GlobalStateIs, // torch.is_grad_enabled() == (length != 0) -- `source` empty
    SizeAtMost,    // lhs <= rhs, dim expressions over the shape symbols the entry's tensor
                   // guards bind (a slice bound within its dim, split sizes that sum to it)
                   // -- `source` empty
    NoOverlap,     // no tensor the graph writes in place shares memory with another tensor
                   // input: the tensors at `source` and `others`, of which the first
                   // `length` are written (one guard per entry: sorted ranges, O(n log n))
    IntSymbol,     // a Python int (exactly int, not bool) of at least 2 that binds the shape
                   // symbol `symbols[0]` (a symbolic int argument, Capture::intInputs), like
                   // a symbolic tensor dim
    NotIn,         // `object` (a str) is not a key of x, a dict (a module instance's __dict__
                   // does not shadow a class attribute the capture resolved)
    NoModuleHooks, // the nn.Module x has no forward, forward-pre, backward or backward-pre
                   // hooks (its four hook dicts are empty: a module call the capture inlined)
    FloatCompare,  // x, exactly a float, compares with the number `object` by the Python rich
                   // comparison `length` (Py_LT...Py_GE) as True: the branch a capture took on
                   // a float input (`if s > 0:`, Capture::floatInputs)
  };
  Kind kind;
  Source source;
  PyRef object;
  int64_t length = 0;
  // TensorMatch: dtype name ("f32", xjit dtype names), device str, requires_grad, sizes and
  // strides (-1: symbolic/any, the dim's symbol is named in `symbols`).
  std::string dtype, device;
  bool requiresGrad = false;
  std::vector<int64_t> sizes, strides;
  std::vector<std::string> symbols; // per dim: "" static, else the symbol name (e.g. "s0");
                                    // IntSymbol: the one symbol the int binds
  // TensorMatch: the input's layout class (output_layout.h layoutClass), when the layouts of
  // the graph's outputs were derived from it (empty: not checked).
  std::vector<int8_t> layout;
  // SizeAtMost: the two sides as dim expression text ("s1", "s0+2"), as ir/dim.h parses it.
  std::string lhs, rhs;
  std::vector<Source> others; // NoOverlap
  /// Human-readable form, e.g. "L['x']: tensor f32[s0,128] cpu requires_grad=False".
  std::string description;
};

/// How to build the frame's return value (or any reconstructed object).
struct OutputNode {
  enum Kind : uint8_t {
    GraphOutput, // output `index` of the compiled graph (a tensor or a scalar)
    Constant,    // `object`
    FromSource,  // the object at `source` (e.g. returning an input unchanged)
    Tuple,
    List,
    Dict,       // children; Dict: `keys` parallel to children
    NamedTuple, // object(*children): a namedtuple type, or a callable taking the fields
                // positionally (torch.Size, torch.return_types.* structseqs)
    Shared,     // `definition`, built once per call however often it occurs (in the result,
                // the side effects' values or a break's arguments): object `index` of the
                // capture's shared objects, so an object made in the frame that is both stored
                // and returned comes back as one object, as in Python
  };
  Kind kind;
  int64_t index = 0;
  PyRef object;
  Source source;
  std::vector<OutputNode> children;
  std::vector<PyRef> keys;
  std::shared_ptr<const OutputNode> definition; // Shared
};

/// A Python-visible effect of the captured code, replayed after the graph runs, in order.
struct SideEffect {
  enum Kind : uint8_t {
    SetAttr,    // setattr(target, name, value)
    SetGlobal,  // f_globals[name] = value
    ListAppend, // target.append(value)
    SetItem,    // target[key] = value
    TensorCopy, // target.copy_(value): an in-place write to a tensor the caller can see
  };
  Kind kind;
  Source target;
  std::string name;
  PyRef key;
  OutputNode value;
};

/// A capture that ends at a graph break in the middle of the frame (docs/frontend.md, "Graph
/// breaks"): after the graph runs and the side effects are replayed, `result` (a tuple) holds
/// the arguments of `breakCode` -- the frame's value stack and live locals as they are just
/// before the breaking instruction. The driver makes a function of `breakCode` (the frame's
/// globals and closure), sets the grad mode to `gradEnabled`, and calls it: it runs the breaking
/// instruction in Python and continues in a resume function, which the hook compiles in turn.
struct BreakPoint {
  /// How the reason of a break at `tensor.backward()` starts (the one break a training step
  /// compiles across: training.cpp).
  static constexpr std::string_view kAtBackward = "tensor.backward()";
  int offset = 0;  // the breaking instruction (group) in the frame's code
  PyRef breakCode; // a code object (bytecode_rewrite.h); never compiled by the hook
  bool gradEnabled = true;
  std::string reason; // why the capture stopped (the graph break)
  SourceLoc where;
};

/// A successful capture of a whole frame, or of the frame up to a graph break.
struct Capture {
  std::unique_ptr<Graph> graph;
  std::vector<Source> inputs; // graph input i is fetched from inputs[i] at call time
  /// Graph inputs whose source holds a Python int rather than a tensor (a symbolic int
  /// argument, docs/frontend.md "Symbolic int arguments"): the input's type is `u8[sym]` and
  /// the driver passes a zero-stride view of one byte with `sym` = the int elements, so the
  /// runtime binds the int's symbol like any tensor dim; the graph reads it with `size`.
  std::vector<size_t> intInputs;
  /// Inputs that carry a Python float read at run time (an optimizer's learning rate, which a
  /// scheduler changes every step): the input's type is `f64[]` and the driver passes the
  /// float as a 0-d tensor; its guard checks only that it is a float.
  std::vector<size_t> floatInputs;
  std::vector<Guard> guards;
  OutputNode result;
  std::vector<SideEffect> sideEffects;
  /// PyTorch fallback nodes: an `external_call` op whose attribute `callee` is an INDEX into
  /// this table (not a registered id). When it compiles the capture, the driver registers each
  /// callable with registerExternalFunction (tensors cross as torch tensors, ints/floats/bools/
  /// None/str as Python objects, lists as lists, opaque objects as themselves; the callable's
  /// result is one value, or a tuple/list when the op has several results) and rewrites `callee`
  /// to the registered id. Keyword arguments are bound into the callable (functools.partial).
  std::vector<PyRef> fallbackCallables;
  double captureMilliseconds = 0;
  std::optional<BreakPoint> breakPoint; // set: the capture stops at a graph break
  uint32_t autocastKey = 0; // AutocastState::key() at frame entry: the entry's autocast state
  bool matmulBf16 = false;  // captured under PyTorch's bf16 matmul precision (ambientMatmulBf16)
  int gradModeAtExit = -1;  // 0/1: the frame leaves grad mode disabled/enabled (e.g. a resume
                            // function that exits a `with torch.no_grad()` block); -1: unchanged
  /// No op of the graph would be recorded by autograd in eager (every op ran with grad mode
  /// disabled or on tensors that do not require grad, e.g. `with torch.no_grad():` inside the
  /// frame): the graph may run even when the frame starts with grad enabled and parameters
  /// that require grad.
  bool autogradFree = false;
  /// An op read a tensor that requires grad without autograd recording it (detach(), a
  /// torch.no_grad() region inside the frame): differentiating the graph would be wrong there.
  bool cutsGradient = false;
  /// Tensors computed without gradient that the frame made leaves requiring grad
  /// (`t.requires_grad = True`, wav2vec2's feature encoder): graph values whose ops eager
  /// records from there on. The driver runs the frame in Python when an output they reach is
  /// not reached by an input that requires grad (its requires_grad would differ from eager's).
  std::vector<Value *> gradLeaves;
  /// Per graph output: which of eager's tensors' storage it is (its view base, or itself),
  /// numbered from 0; -1 for a non-tensor. Outputs of different numbers are separate tensors
  /// in eager: the driver copies one that the graph hands out on another's storage (eager's
  /// `h.contiguous()` and `h.reshape(-1)` of a transposed h are two copies; the graph, which
  /// computes h contiguous, views it twice).
  std::vector<int> outputStorages;
};

/// Why a frame (or part of it) could not be captured.
struct GraphBreak {
  std::string reason;    // "call to print", "data-dependent control flow on a tensor", ...
  SourceLoc where;       // the user's file:line
  bool internal = false; // an xjit bug rather than an unsupported construct
  std::string errorId;   // stable id for internal errors, e.g. "XJIT-E0003"
};

/// capture without graphBreak: the whole frame; graphBreak without capture: the frame runs in
/// Python; both: the capture stops at the break (capture->breakPoint) and the frame resumes in
/// Python there.
struct AnalyzeResult {
  std::optional<Capture> capture;
  std::optional<GraphBreak> graphBreak;
  /// Not empty: the capture relied on something of a shared module (sharedModules) that no guard
  /// can check (two modules being one object, a write to one), so this result is a capture with
  /// every module guarded by identity; the reason.
  std::string sharingRefused;
};

/// The frame's inputs as the analyzer sees them (borrowed references; valid during the call).
struct FrameView {
  PyCodeObject *code;
  PyObject *function; // the PyFunctionObject (closure, defaults, globals)
  PyObject *globals;
  PyObject *builtins;
  // co_nlocalsplus slots; arguments first; may hold NULLs. As at frame entry: free-variable
  // slots hold the closure's cells (as after COPY_FREE_VARS), cell-variable slots hold the
  // argument's value itself (MAKE_CELL has not run) or NULL.
  PyObject *const *localsplus;
  int nlocalsplus;
};

/// "L['x'] size(1)": one dim of an input in AnalyzeOptions::dynamicSources.
inline std::string dynamicDimKey(const std::string &source, size_t dim) {
  return source + " size(" + std::to_string(dim) + ")";
}

struct AnalyzeOptions {
  int inlineDepth = 16;       // recursion limit for inlining user functions
  bool dynamicShapes = false; // mark input dims symbolic (after a recompile on a shape change)
  /// When not empty, only these get symbolic dims: a source (every dim of it) or one dim of a
  /// source (dynamicDimKey), as automatic dynamic shapes records what changed; the source of a
  /// Python int makes that int symbolic (an IntSymbol guard and a Capture::intInputs input).
  std::vector<std::string> dynamicSources;
  bool resumeAfterBreaks = true; // capture up to a graph break and resume after it (false: a
                                 // break makes the whole frame run in Python)
  /// Sources of modules guarded by type instead of identity, and with them every module reached
  /// from them (its submodules): one entry serves every instance of the class (what the capture
  /// read from them is guarded at its source). An instance of another class at such a source
  /// fails the type guard and recompiles.
  std::vector<std::string> sharedModules;
};

/// Symbolically executes the frame's bytecode over abstract values. Never throws: internal
/// errors come back as a GraphBreak with internal = true.
AnalyzeResult analyzeFrame(const FrameView &frame, const AnalyzeOptions &opts = {});

} // namespace xjit::frontend
