// The bytecode analyzer's internals, shared by src/frontend/analyzer*.cpp and torch_ops*.cpp.
//
// Symbolic execution: each frame (the captured one and every inlined callee) runs instruction by
// instruction over abstract values (abstract.h). Python control flow is followed only where it
// is decided by values known at capture time (the decision becomes a guard); anything else is a
// graph break (BreakError), and the whole frame then runs in Python. Tensor operations append ops
// to one IR graph through a Builder whose location is the current instruction's line.
#pragma once

#include "abstract.h"
#include "analyzer_bridge.h"
#include "analyzer_bytecode.h"
#include "output_layout.h"
#include "py_util.h"

#include "xjit/ir/builder.h"

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

namespace xjit::frontend {

/// `s` followed by `step` (sources of attributes, items... read during analysis).
inline Source plus(const Source &s, SourceStep step) {
  Source r = s;
  r.push_back(std::move(step));
  return r;
}
inline SourceStep attrStep(const std::string &n) { return SourceStep{SourceStep::Attr, 0, n, {}}; }

/// Function `name` defined by Python `source` (compiled once per call site: callers keep the
/// result in a static), for output adapters that are simpler written in Python. New reference.
PyObject *pythonHelper(const char *source, const char *name);
/// The names of (name, value) pairs as a tuple of str (the `names` argument of those helpers).
PyRef namesTuple(const std::vector<std::pair<std::string, VarPtr>> &pairs);

/// Thrown inside the analysis to abandon the capture.
struct BreakError : std::exception {
  BreakError(std::string r, SourceLoc w, bool internal = false)
      : reason(std::move(r)), where(std::move(w)), internal(internal) {}
  const char *what() const noexcept override { return reason.c_str(); }
  std::string reason;
  SourceLoc where;
  bool internal;
  // The captured frame's instruction being executed when the break happened (an inlined call's
  // break is at its CALL), and how many times the analysis had reached it: where a graph break
  // in the middle of the frame stops the capture (-1 / 0: not in the frame's own bytecode).
  int rootPc = -1;
  int rootVisit = 0;
  // The break holds only while these hold (a state of the caller's objects that later calls
  // change, such as an optimizer's state made by its first step): the capture that stops at
  // the break keeps them, so a call that fails them captures the frame again.
  std::vector<Guard> guards;
};

/// Thrown when the analysis reaches AnalyzeStop: the capture ends there (a graph break).
struct StopCapture : std::exception {};

/// The capture relies on a shared module (AnalyzeOptions::sharedModules) in a way no guard can
/// check: analyzeFrame captures the frame again with modules guarded by identity.
struct SharingRefused {
  std::string reason;
};

/// Where a capture that breaks in the middle of the frame stops: before the visit-th execution
/// of the instruction at `offset` of the captured frame.
struct AnalyzeStop {
  int offset = 0;
  int visit = 0;
};

/// Thrown when a symbolic size must become static (Python control flow or a static attribute
/// depends on it); the analysis restarts with that symbol specialized.
struct SpecializeError : std::exception {
  explicit SpecializeError(std::string s) : symbol(std::move(s)) {}
  std::string symbol;
};

/// One frame of symbolic execution.
struct Frame {
  PyRef code;
  std::shared_ptr<const bc::DecodedCode> decoded;
  PyRef globals, builtins;
  std::optional<Source> globalsSource; // nullopt: the captured frame's own globals
  bool trustedGlobals = false;         // a library module's globals: read without guards
  std::vector<VarPtr> locals;          // co_nlocalsplus slots
  std::vector<VarPtr> stack;
  std::vector<VarPtr> closure; // CellVars copied in by COPY_FREE_VARS
  PyRef kwnames;               // set by KW_NAMES for the next CALL
  int pc = 0;                  // offset of the instruction being executed
  int line = -1;
  int depth = 0;          // 0: the captured frame
  bool generator = false; // collect YIELD_VALUE values instead of suspending
  std::vector<VarPtr> yields;
  std::string filename, qualname;
  Frame *parent = nullptr;
  PyCodeObject *co() const { return reinterpret_cast<PyCodeObject *>(code.get()); }
};

struct PendingEffect {
  SideEffect::Kind kind;
  Source target;
  std::string name;
  PyRef key;
  VarPtr value;
};

class Analyzer {
public:
  Analyzer(const FrameView &frame, const AnalyzeOptions &opts,
           const std::set<std::string> &specialized);
  ~Analyzer();
  Capture run();
  /// Set before run(): stop at this point and capture the frame state there (a graph break).
  std::optional<AnalyzeStop> stopAt;

  // ---- errors ----
  [[noreturn]] void fail(const std::string &reason) const;
  /// fail(), for a break that holds only while `guards` do (BreakError::guards).
  [[noreturn]] void failWhile(const std::string &reason, std::vector<Guard> guards) const;
  SourceLoc currentLoc() const;

  // ---- frames (analyzer.cpp) ----
  VarPtr runFrame(Frame &f);
  Frame *current() const { return frame_; }
  /// Inlines a Python function: binds `args` to `code`'s parameters and runs it.
  VarPtr inlineCall(PyObject *code, PyObject *globals, const std::optional<Source> &globalsSource,
                    bool trustedGlobals, VarPtr defaults, VarPtr kwdefaults,
                    std::vector<VarPtr> closure, const Args &args, const std::string &qualname);

  // ---- Python values (analyzer_values.cpp) ----
  VarPtr constant(PyObject *o);      // a known object without a source (borrowed reference)
  VarPtr constantSteal(PyObject *o); // same, taking ownership; throws on nullptr
  VarPtr none();
  VarPtr boolean(bool b);
  VarPtr integer(int64_t v);
  /// A `set` the frame makes ({a, b}, set(...), comprehensions, set methods' results) of
  /// hashable constants: a real set private to the analysis, so its methods run for real
  /// (add, issubset, ...), and rebuilt per call where it escapes (outputOf).
  VarPtr frameSet(PyRef set);
  bool isFrameSet(PyObject *o) const { return frameSets_.count(o) != 0; }
  /// Whether the analysis may read the items of set or frozenset `o`: one the frame made, or
  /// the caller's, guarded by value.
  bool setItemsKnown(PyObject *o) const { return isFrameSet(o) || setsByValue_.count(o) != 0; }
  /// A new frame set of `items` (each a hashable constant; otherwise a graph break).
  VarPtr makeFrameSet(const std::vector<VarPtr> &items);
  /// Adds constant `item` to frame set `set`.
  void addToFrameSet(const VarPtr &set, const VarPtr &item);
  /// The abstract value for an object the caller can reach at `src`, with its guards: tensors
  /// become graph inputs, modules and functions are guarded by identity, Python scalars by
  /// value, containers by type and length with their items wrapped in turn.
  VarPtr wrapSourced(PyObject *o, const Source &src);
  /// A list the caller can see, as a ListVar whose length and items are guarded and wrapped only
  /// when the capture reads them (a list the frame only appends to is captured for any length).
  VarPtr sourcedList(PyObject *list, const Source &src);
  /// A global of frame f (with guards unless the globals are trusted).
  VarPtr loadGlobal(Frame &f, const std::string &name);
  VarPtr getAttr(const VarPtr &obj, const std::string &name);
  bool hasAttr(const VarPtr &obj, const std::string &name);
  void setAttr(const VarPtr &obj, const std::string &name, const VarPtr &value);
  /// LOAD_METHOD: returns (callable, self) where self may be a NullVar.
  std::pair<VarPtr, VarPtr> loadMethod(const VarPtr &obj, const std::string &name);
  /// The Python object for a fully known value (constants, tuples of constants...), else null.
  PyRef asPython(const VarPtr &v);
  /// Truth value; tensors are a graph break (data-dependent control flow).
  bool truthy(const VarPtr &v);
  std::optional<int64_t> asInt(const VarPtr &v); // ints/bools (static SymInts included)
  std::optional<double> asNumber(const VarPtr &v);
  std::string describe(const VarPtr &v);
  std::string typeName(const VarPtr &v);
  /// Items of a tuple/list/iterator/known sequence for unpacking and iteration.
  std::vector<VarPtr> sequenceItems(const VarPtr &v, const char *what);
  std::vector<VarPtr> iterate(const VarPtr &v); // GET_ITER + exhaust
  /// A dict/list/tuple object (subclasses included) the frame reaches, read as a DictVar /
  /// ListVar / TupleVar with its items (guarded); other values are returned as they are.
  VarPtr containerView(const VarPtr &v);
  /// Calls a special method (__getitem__, __len__...) written in Python on a known object;
  /// nullptr when its type has none (or implements it in C).
  VarPtr callDunder(const VarPtr &obj, const char *name, std::vector<VarPtr> args);
  VarPtr makeIterator(const VarPtr &v);
  int64_t length(const VarPtr &v);
  bool isModuleObject(PyObject *o);
  bool isTrustedModuleName(const std::string &name) const;
  /// A guard, deduplicated by kind and source.
  void addGuard(Guard g);
  void guardEquals(const Source &src, PyObject *value);
  void guardId(const Source &src, PyObject *value);
  void guardType(const Source &src, PyObject *type);
  void guardLen(const Source &src, int64_t n);
  /// `name` not in the dict at `src` (NotIn).
  void guardNotIn(const Source &src, const std::string &name);
  /// Whether the module at `src` is guarded by type (at or below a shared module's source).
  bool sharedSource(const Source &src) const;
  /// Throws SharingRefused when `v` is a shared module: the capture is about to rely on its
  /// identity (`what`).
  void refuseIfShared(const VarPtr &v, const std::string &what) const;
  void recordEffect(PendingEffect e) { effects_.push_back(std::move(e)); }
  /// Attribute assignments made during the analysis (read back before the real object).
  std::map<std::pair<PyObject *, std::string>, VarPtr> attrOverlay;
  std::map<std::pair<PyObject *, std::string>, VarPtr> globalOverlay;

  // ---- calls (analyzer_calls.cpp) ----
  VarPtr call(const VarPtr &callable, const Args &args);
  VarPtr callObject(PyObject *fn, const std::optional<Source> &fnSource, const Args &args);
  VarPtr callWeakref(PyObject *ref, const std::optional<Source> &refSource, const Args &args);
  VarPtr callModule(const VarPtr &module, const Args &args);
  /// A call of a module with forward (pre-)hooks, as nn.Module._call_impl makes it: pre-hooks,
  /// forward, forward hooks, with the hook dicts guarded (analyzer_hooks.cpp).
  VarPtr callModuleWithHooks(const VarPtr &module, const Args &args);
  VarPtr callMethod(const VarPtr &self, const std::string &name, const Args &args);
  VarPtr makeFunction(Frame &f, int flags);
  bool gradEnabled() const { return gradEnabled_; }

  // ---- torch.autocast (analyzer_autocast.cpp) ----
  const AutocastState &autocastState() const { return autocast_; }
  /// `args` of the PyTorch function named by `targets` (TorchRow::targets, or one name) with
  /// the casts that eager autocast applies to them; `args` unchanged while autocast is off or
  /// for functions autocast does not list.
  Args autocastArgs(std::string_view targets, const Args &args);
  /// torch.autocast / torch.amp.autocast / torch.cpu.amp.autocast constructed (a context
  /// manager), or torch's autocast queries answered from the capture's state; nullptr for
  /// other functions.
  VarPtr autocastCall(PyObject *fn, const std::string &qualname, const Args &args);
  void setGradEnabled(bool e) { gradEnabled_ = e; }
  void noteGradientCut() { cutsGradient_ = true; }
  /// `t.requires_grad = flag` / `t.requires_grad_(flag)`: a graph break unless it changes
  /// nothing, or makes a tensor computed without gradient a leaf that requires grad
  /// (Capture::gradLeaves). `method`: `requires_grad_()` (which, unlike the attribute, a
  /// non-leaf that requires grad takes when the flag stays True).
  void setRequiresGrad(TensorVar &t, const VarPtr &flag, bool method);
  bool gradientCut() const { return cutsGradient_; }
  void setGradientCut(bool cut) { cutsGradient_ = cut; }
  void noteRecordedForAutograd() { recordedForAutograd_ = true; }
  /// Set while a torch.autograd.Function's forward or backward is captured into this
  /// custom_vjp's regions: an in-place write to a tensor made outside them is a graph break
  /// there (mark_dirty semantics are not modeled).
  const Op *customVjp = nullptr;
  /// Ops of abandoned custom_vjp captures, detached but kept: abstract values may still name
  /// their values.
  std::vector<std::unique_ptr<Op>> abandonedOps;

  // ---- dataclass instances (analyzer_dataclass.cpp) ----
  /// cls(*args, **kwargs) for a @dataclass: fields bound like its generated __init__, then
  /// __post_init__ inlined (ModelOutput's mapping bookkeeping is modeled instead).
  VarPtr makeDataclass(PyObject *cls, const Args &args);
  VarPtr dataclassAttr(const VarPtr &obj, const std::string &name);
  VarPtr dataclassMethod(const VarPtr &obj, const std::string &name, const Args &args);
  /// The mapping view of a ModelOutput-like instance: (key, value) of the non-None fields.
  std::vector<std::pair<std::string, VarPtr>> dataclassItems(const VarPtr &obj);
  VarPtr dataclassGetItem(const VarPtr &obj, const VarPtr &key);
  /// `obj[key] = value` on a ModelOutput-like instance: the field `key` set.
  void dataclassSetItem(const VarPtr &obj, const VarPtr &key, const VarPtr &value);

  // ---- instances of plain Python classes (analyzer_instance.cpp) ----
  /// cls(*args, **kwargs) for a plain Python class: __init__ inlined on an abstract instance;
  /// a graph break when its instances cannot be modeled (a custom __new__, __slots__...).
  VarPtr makeInstance(PyObject *cls, const std::optional<Source> &clsSource, const Args &args);
  VarPtr instanceAttr(const VarPtr &obj, const std::string &name);
  /// hasattr() on an instance; nullopt: not decidable at capture time (a __getattr__).
  std::optional<bool> instanceHasAttr(const VarPtr &obj, const std::string &name);
  void instanceSetAttr(const VarPtr &obj, const std::string &name, const VarPtr &value);

  // ---- operators (analyzer_ops.cpp) ----
  VarPtr binaryOp(int nb, const VarPtr &a, const VarPtr &b);
  VarPtr compareOp(int cmp, const VarPtr &a, const VarPtr &b);
  /// A comparison of symbolic sizes or ints (`if n > 4:`) decided by this call's values, the
  /// outcome kept as size guards (like torch.compile's guards on a relation) where one or two
  /// inequalities express it; nullopt where they cannot (`n == 5` False: specialize).
  std::optional<bool> guardedComparison(int cmp, const VarPtr &a, const VarPtr &b);
  bool dataclassEquals(const VarPtr &a, const VarPtr &b);
  VarPtr unaryOp(int opcode, const VarPtr &a);
  bool isSame(const VarPtr &a, const VarPtr &b);
  bool contains(const VarPtr &container, const VarPtr &item);
  VarPtr getItem(const VarPtr &obj, const VarPtr &key);
  void setItem(const VarPtr &obj, const VarPtr &key, const VarPtr &value);
  void delItem(const VarPtr &obj, const VarPtr &key);
  VarPtr formatValue(const VarPtr &v, int conversion, const VarPtr &spec);

  // ---- tensors (analyzer_tensor.cpp) ----
  Builder &builder() { return builder_; }
  Graph &graph() { return *graph_; }
  /// Appends an op (location: the current instruction) and wraps tensor results.
  std::vector<VarPtr> emit(std::string_view op, const std::vector<VarPtr> &operands,
                           AttrMap attrs = {}, bool view = false);
  /// `fill` (a zeros_like/full_like that overwrites t in place) annotated `autodiff.fill` when t
  /// requires grad: autograd records eager's in-place fill (a zero gradient), so the result still
  /// requires grad and t's inputs get zeros, not None.
  VarPtr markTrackedFill(VarPtr fill, const VarPtr &t);
  /// t's new value after a write of all of it from `v` (cast to t's dtype; broadcast to t's
  /// shape here): a fresh copy, or where(true, v, t) when t requires grad, as autograd records
  /// eager's copy (a zero gradient to t's old value, the result requiring grad).
  VarPtr wholeWrite(const VarPtr &t, const VarPtr &v);
  VarPtr emit1(std::string_view op, const std::vector<VarPtr> &operands, AttrMap attrs = {},
               bool view = false) {
    return emit(op, operands, std::move(attrs), view).at(0);
  }
  /// An IR value for an operand: tensors, Python numbers (constants), SymInts, None.
  Value *irValue(const VarPtr &v);
  /// Wraps an IR value as an abstract value (tensors, ints, floats, bools).
  VarPtr wrapIr(Value *v, bool requiresGrad);
  VarPtr tensorAttr(const VarPtr &t, const std::string &name);
  VarPtr tensorMethod(const VarPtr &t, const std::string &name, const Args &args);
  VarPtr tensorBinary(int nb, const VarPtr &a, const VarPtr &b, bool reflected);
  VarPtr tensorCompare(int cmp, const VarPtr &a, const VarPtr &b);
  VarPtr tensorGetItem(const VarPtr &t, const VarPtr &key);
  /// The attributes of `slice` along `dim` (of size `size`) from Python's bounds, with the
  /// guards a symbolic bound or dim needs.
  AttrMap sliceAttrs(int64_t dim, const std::optional<DimExpr> &start,
                     const std::optional<DimExpr> &stop, int64_t step, const DimExpr &size);
  /// Python's slice bounds as offsets [start, end) within a dim of `size`, with the guards (or
  /// specializations) that keep them there.
  std::pair<DimExpr, DimExpr> sliceRange(const std::optional<DimExpr> &start,
                                         const std::optional<DimExpr> &stop, const DimExpr &size);
  void tensorSetItem(const VarPtr &t, const VarPtr &key, const VarPtr &value);
  /// Makes `target` hold `newValue` (an in-place write): every alias sees it.
  void assignInPlace(const VarPtr &target, const VarPtr &newValue);
  void checkWriteKeepsSavedResult(TensorVar &t, const Value *data) const;
  void noteSavedReads(const Op &op, const std::vector<VarPtr> &operands);
  /// The value a tensor that requires grad holds after `data` is written into it under
  /// torch.no_grad() in a training step: `data`, whose gradient autodiff gives the tensor as it
  /// was (a leaf input: its .grad). A graph break where eager's backward may refuse it.
  Value *writtenWithoutGrad(TensorVar &t, Value *data);
  /// Marks the tensors (and their views' bases) an op autograd records reads, where they require
  /// grad or view one that does (TensorVar::readWithGrad).
  void noteReadWithGrad(const std::vector<VarPtr> &operands);
  /// A graph break where an in-place op on a view reads another view of the same base (eager
  /// rejects overlapping memory, or its result depends on the copy order).
  void checkViewWriteOperands(const VarPtr &target, const std::vector<VarPtr> &operands);
  /// assignInPlace of a view: the new value is written into its base.
  /// Another input whose memory overlaps input `t` and that the graph writes (or reads, with
  /// `usedToo`), or nullptr.
  const TensorVar *inputOverlap(const TensorVar &t, bool usedToo) const;
  void assignThroughView(const VarPtr &target, const VarPtr &newValue);
  /// A graph break for an in-place write to `target` while customVjp is set, unless one of
  /// its regions made it.
  void checkFunctionWrite(const Value *target) const;
  /// Reads an input tensor from `src` (deduplicated by source).
  VarPtr tensorInput(PyObject *t, const Source &src);
  /// The Python float at `src` as a graph input read at run time (a 0-d f64 tensor the driver
  /// makes per call, Capture::floatInputs), guarded only to be a float.
  VarPtr floatInput(const Source &src);
  /// A constant tensor embedded in the graph (torch.tensor(...) of constants).
  VarPtr constantTensor(PyObject *t);
  /// Calls a PyTorch function at run time through an external_call op; output types come from
  /// running it on meta tensors now.
  /// `resultTypes`, where the caller knows them, may be symbolic: operands of symbolic shape
  /// are then allowed (the meta run uses their sizes at this call).
  VarPtr fallbackCall(PyObject *fn, const std::string &name, const Args &args,
                      const std::vector<Type> *resultTypes = nullptr);
  VarPtr shapeTuple(const VarPtr &t);
  VarPtr sizeOf(const VarPtr &t, int64_t dim);
  bool anyRequiresGrad(const std::vector<VarPtr> &vs) const;
  /// A view whose base was written since it was made reads the base again (its view ops
  /// replayed); a graph break where they cannot be.
  void touchView(const VarPtr &t);
  /// `view`'s view ops applied to `from` (its base, or a tensor of the base's shape).
  VarPtr replayView(const TensorVar &view, VarPtr from);
  /// Eager's strides for `v`, a tensor the graph computes, where the layout rules settle them
  /// from the ops computing it (staticStridesOf; the inputs' dense orders are guarded by their
  /// layout class); nullopt where they do not.
  std::optional<std::vector<int64_t>> computedStrides(const Value *v) const;

  // ---- torch functions (torch_ops.cpp) ----
  /// Calls a torch function / Tensor method / F.* / module type the op table knows; returns
  /// nullptr if the table has no row for `fn`.
  VarPtr callTorchFunction(PyObject *fn, const Args &args);
  VarPtr callTensorMethodRow(const std::string &name, const VarPtr &self, const Args &args,
                             bool *found);
  VarPtr callModuleRow(const VarPtr &module, const Args &args, bool *found);

  const AnalyzeOptions &opts() const { return opts_; }
  PyObject *rootGlobals() const { return view_.globals; }

  // Capture being built.
  std::vector<PendingEffect> effects_;
  std::vector<std::shared_ptr<TensorVar>> inputTensors_;
  /// Per graph argument (a tensor input), its dims' order where it is dense (computedStrides).
  std::vector<std::vector<int>> inputDenseOrders_;
  mutable ComputedStrides computedStrides_; // (computedStrides: ops laid out once)
  /// The input tensors by the object each source held at capture (the first source of each):
  /// what a weak reference to one of them dereferences to (callWeakref).
  std::vector<std::pair<PyRef, std::shared_ptr<TensorVar>>> inputObjects_;
  std::vector<PyRef> fallbacks_;

private:
  Capture finish(const VarPtr &result);
  /// The capture up to the stop point: its result is the tuple of the break code's arguments
  /// (bytecode_rewrite.h), the stack and live locals rebuilt from the graph outputs.
  Capture finishAtBreak(Frame &f);
  Capture finishWith(
      const std::function<OutputNode(std::vector<Value *> &, std::map<Value *, int64_t> &)> &result,
      bool sameGradMode);
  OutputNode outputOf(const VarPtr &v, std::vector<Value *> &outputs,
                      std::map<Value *, int64_t> &outputIndex);
  /// Whether `o`, an argument of the captured frame, is a function the original frame made
  /// before a graph break that the break code passed on (the frame is resume code).
  bool madeBeforeTheBreak(PyObject *o) const;

  FrameView view_;
  AnalyzeOptions opts_;
  std::set<std::string> specialized_;
  std::unique_ptr<Graph> graph_;
  Builder builder_;
  Frame *frame_ = nullptr;
  bool gradEnabled_ = true;
  bool gradEnabledAtEntry_ = true;   // a training step's no_grad regions: stopped operands
  AutocastState autocast_;           // the CPU autocast state ops are captured under
  AutocastState entryAutocast_;      // at frame entry: the compiled entry is keyed on it
  std::string autocastRefusal_;      // set: the ambient autocast state cannot be modelled
  bool recordedForAutograd_ = false; // an op was emitted that eager autograd would record
  std::vector<Value *> gradLeaves_;  // Capture::gradLeaves
  bool cutsGradient_ = false;        // Capture::cutsGradient
  int64_t budget_ = 2'000'000;       // instructions executed across all frames
  std::vector<Guard> guards_;
  std::set<std::string> guardKeys_;
  std::map<std::string, VarPtr> sourceCache_; // source string -> value read from it
  std::unordered_map<PyObject *, std::shared_ptr<const bc::DecodedCode>> decoded_;
  std::vector<PyRef> keepAlive_;
  SymbolBindings symbolHints_;                   // symbol -> its value in this frame
  std::map<int64_t, std::string> symbolForSize_; // duck sizing: equal sizes share a symbol
  int intSymbols_ = 0;                           // symbols of symbolic ints made (i0, i1...)
  std::map<int, int> visits_; // captured frame: instruction offset -> times reached
  // Objects made in the frame that are rebuilt after the graph, one Shared output each (null
  // while its definition is being built: reached again from inside itself is a cycle).
  struct SharedOutput {
    int64_t index = 0;
    std::shared_ptr<const OutputNode> definition;
  };
  std::map<const Var *, SharedOutput> sharedOutputs_;
  // Per graph output of the capture being finished: eager's tensor whose storage it is (its
  // view base, or itself; null for a non-tensor), Capture::outputStorages.
  std::vector<const Var *> outputRoots_;
  bool returning_ = false; // finishing at the frame's return (not at a graph break)
  // functools.partial objects the frame made (call arguments, keywords), made again for each
  // call when they escape (outputOf).
  struct MadePartial {
    VarPtr var; // (keeps the key alive)
    PyRef args, keywords;
  };
  std::map<const Var *, MadePartial> madePartials_;
  std::map<const PyObject *, VarPtr> frameSets_; // frameSet(): each set's one abstract value
  std::set<const PyObject *> setsByValue_;       // the caller's sets guarded by their items
  friend class AnalyzerAccess;

public:
  std::shared_ptr<const bc::DecodedCode> decodedFor(PyObject *code);
  /// Dims of a new input: symbolic (per opts; sizes 0 and 1 stay static) or static; `symbols`
  /// gets each dim's symbol name ("" for static dims).
  Shape inputShape(const std::vector<int64_t> &sizes, const Source &src,
                   std::vector<std::string> &symbols);
  /// Whether `src` reaches module state (through a module's attributes) or a global: such
  /// inputs stay static unless automatic dynamic saw them change.
  bool isModuleState(const Source &src) const;
  /// A Python int at `src` as a symbolic int (SymIntVar over a new symbol, bound by an
  /// IntSymbol guard and a carrier input, Capture::intInputs) when the options make it dynamic;
  /// nullptr: it stays a constant guarded by value.
  VarPtr symbolicInt(PyObject *o, const Source &src);
  /// A Python float at `src` as a run-time input (SymFloatVar over a float carrier) when the
  /// options make it dynamic, as symbolicInt decides for ints; nullptr: a guarded constant.
  VarPtr symbolicFloat(PyObject *o, const Source &src);
  /// `a op b` (op a BINARY_OP code, not in-place) where one side is a float input and neither
  /// is a tensor: add/sub/mul/div of numbers stay in the graph, anything else specializes.
  VarPtr floatBinary(int base, const VarPtr &a, const VarPtr &b);
  /// `a cmp b` (cmp 0..5: < <= == != > >=) of a float input and a number: its outcome at this
  /// call, kept as a FloatCompare guard; nullopt where that does not apply (a computed float,
  /// NaN, another operand), and the float is then guarded by value.
  std::optional<bool> guardedFloatComparison(int cmp, const VarPtr &a, const VarPtr &b);
  /// Whether a number at `src` is dynamic under the options (automatic dynamic: listed in
  /// dynamicSources; dynamic=True: a frame input, not module state, a global or a default).
  bool dynamicNumber(const Source &src) const;
  /// Restarts the analysis with the float inputs `s` is computed from guarded by value.
  [[noreturn]] void specializeFloat(const VarPtr &s) const;
  /// Restarts the analysis with the (first) symbol of `e` made static.
  [[noreturn]] void specialize(const DimExpr &e) const;
  int64_t hintOf(const DimExpr &e) const;
  /// Before an elementwise op broadcasts its operands: two different sizes at a dim, one of
  /// them symbolic, are assumed equal by the IR's type inference. Guards that they are (or
  /// specializes where this call broadcasts a size of 1, or where they differ).
  void checkSymbolicBroadcast(const std::vector<VarPtr> &operands);
  /// Records that the capture assumes `lo <= hi` on every call (a symbolic slice bound within
  /// its dim, split sizes that fit...), as a SizeAtMost guard over the shape symbols, like
  /// torch.compile's range guards; nothing when the expressions alone decide it. The caller has
  /// checked that it holds at this call (else it specializes, so Python's semantics apply).
  void assumeAtMost(const DimExpr &lo, const DimExpr &hi, const std::string &what);
  /// assumeAtMost both ways: `a == b` on every call.
  void assumeEqual(const DimExpr &a, const DimExpr &b, const std::string &what) {
    assumeAtMost(a, b, what);
    assumeAtMost(b, a, what);
  }
  /// The offset of int index `index` (negative: from the end) into a symbolic dim of `size`,
  /// assumed within it on every call; out of range at this call, the size is specialized, so
  /// eager's IndexError is raised at capture.
  DimExpr indexWithin(int64_t index, const DimExpr &size);
  /// A symbolic int index (x[:, start_pos]) at or after 0, assumed within `size` on every call;
  /// out of range at this call, it is specialized (eager's IndexError at capture).
  DimExpr symbolicIndexWithin(const DimExpr &index, const DimExpr &size);
  VarPtr castTo(const VarPtr &t, DType dtype);
};

/// A function's or class's `__qualname__` (else `__name__`, else its type's name).
std::string qualnameOf(PyObject *fn);
/// Whether `obj.attr` exists and has a non-zero len() (errors cleared).
bool hasNonEmpty(PyObject *obj, const char *attr);

/// `SomeFunction.apply(*args)` of a torch.autograd.Function (analyzer_function.cpp): its forward
/// inlined where apply records no backward, else the forward and backward as a custom_vjp op;
/// nullptr: not such a call, or one that cannot be captured (apply then runs as a PyTorch call).
VarPtr functionApply(Analyzer &a, PyObject *fn, const std::optional<Source> &fnSource,
                     const Args &args);

/// `torch.utils.checkpoint.checkpoint(fn, *args, ...)` as `fn(*args)` inline, its ops marked for
/// recompute in a training step's backward (analyzer_checkpoint.cpp); nullptr when `fn` is not
/// checkpoint.
VarPtr checkpointCall(Analyzer &a, PyObject *fn, const Args &args);

/// `opt.step()` of a stock torch.optim SGD, Adam or AdamW as graph ops (analyzer_optim.cpp);
/// nullptr when `self`/`func` are not such a step (it is then traced like other code).
VarPtr optimizerStep(Analyzer &a, const VarPtr &self, const VarPtr &func, const Args &args);
/// `step(opt)` where `step` is a stock optimizer's step function (the class's `step` called as a
/// function: what the hook compiles for `opt.step()` called from Python, xjit/_optim.py `step`).
VarPtr optimizerStepCall(Analyzer &a, PyObject *fn, const Args &args);
/// Whether `fn(opt)` is the stock step of SGD, Adam or AdamW `opt` (eval_frame.cpp).
bool isStockOptimizerStep(PyObject *opt, PyObject *fn);
/// `opt.zero_grad(set_to_none=...)` of an optimizer with torch.optim's own zero_grad (the
/// gradients set to None or zeroed), or `model.zero_grad()` of a module with nn.Module's (set to
/// None); nullptr when it is not that.
VarPtr optimizerZeroGrad(Analyzer &a, const VarPtr &self, const VarPtr &func, const Args &args);
/// The same for `opt.step()` where an LR scheduler has wrapped the step (`fn` the wrapper, read
/// at `fnSource` = <optimizer>.step); nullptr when it is not that.
VarPtr scheduledOptimizerStep(Analyzer &a, PyObject *fn, const std::optional<Source> &fnSource,
                              const Args &args);

/// The type of the `__exit__` stand-in passed to a resume function that continues inside a
/// `with torch.no_grad()` block (GradModeExit(restore)); the analyzer reads it as a GradExitVar.
PyObject *gradModeExitType();

/// build(*values) rebuilding an instance made in the frame: `object.__new__(cls)` with its
/// attributes (in `inst.attrs` order) set from the values (analyzer_instance.cpp).
PyRef instanceConstructor(const InstanceVar &inst);

/// "L['self'].fc.weight" (sourceStr): a readable, unique key for a source (messages, guard
/// deduplication, AnalyzeOptions::dynamicSources).
std::string sourceKey(const Source &s);

} // namespace xjit::frontend
