// Abstract values of the bytecode analyzer: what a Python stack slot or local holds during
// symbolic execution. Tensors and symbolic sizes stand for IR values computed by the graph;
// everything else is a Python object known at capture time (a constant, a module, a function...)
// or a container of abstract values. Values are shared (std::shared_ptr) so aliasing behaves like
// Python's: a list appended to through one name is seen through every other.
#pragma once

#include "autocast.h"
#include "xjit/frontend/capture.h"
#include "xjit/ir/ir.h"

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace xjit::frontend {

enum class VarKind : uint8_t {
  Null,         // the NULL that CPython pushes below a callable (PUSH_NULL, LOAD_GLOBAL bit 0)
  Object,       // a Python object known at capture time
  Tensor,       // a torch.Tensor computed by (or fed into) the graph
  SymInt,       // a Python int derived from a symbolic tensor size
  SymFloat,     // a Python float read at run time (a graph input, Capture::floatInputs)
  Tuple,        // a tuple (or torch.Size / a structseq) of abstract values
  List,         // a list of abstract values (mutable)
  Dict,         // a dict with constant keys (mutable)
  Slice,        // slice(start, stop, step) of abstract values
  Module,       // a torch.nn.Module instance
  Function,     // a function made by MAKE_FUNCTION during the analysis (closure of abstract cells)
  Bound,        // a bound method: `self` plus a function, or a builtin method name of `self`
  Cell,         // a closure cell
  Iterator,     // an iterator over a known sequence of abstract values (unrolled loops)
  GradMode,     // torch.no_grad() / enable_grad() / set_grad_enabled(b) context manager
  GradExit,     // the __exit__ of such a context manager: restores the previous grad mode
  AutocastMode, // torch.autocast("cpu", ...) context manager (autocast.h)
  AutocastExit, // its __exit__: restores the previous autocast state
  Super,        // super() bound to a class and an instance
  Dataclass,    // an instance of a @dataclass built during the analysis (e.g. a ModelOutput)
  Instance,     // an instance of a plain Python class built during the analysis (e.g. a KV cache)
  Partial,      // functools.partial(f, *args, **kw) made in the frame of abstract values
};

struct Var {
  explicit Var(VarKind k) : kind(k) {}
  virtual ~Var() = default;
  Var(const Var &) = delete;
  Var &operator=(const Var &) = delete;
  const VarKind kind;
  /// Where the frame's caller can reach this object (guards, graph inputs, side effects).
  std::optional<Source> source;
};
using VarPtr = std::shared_ptr<Var>;

struct NullVar : Var {
  static constexpr VarKind Kind = VarKind::Null;
  NullVar() : Var(VarKind::Null) {}
};

struct ObjectVar : Var {
  static constexpr VarKind Kind = VarKind::Object;
  explicit ObjectVar(PyRef o) : Var(VarKind::Object), obj(std::move(o)) {}
  PyRef obj;
};

/// One view op on the way from a view's base to the view: op(view-so-far, extra...) with attrs,
/// result `result` (split-like ops have several).
struct ViewStep {
  std::string op;
  AttrMap attrs;
  std::vector<VarPtr> extra;
  size_t result = 0;
};

struct TensorVar : Var {
  static constexpr VarKind Kind = VarKind::Tensor;
  explicit TensorVar(Value *v) : Var(VarKind::Tensor), value(v) {}
  Value *value;                    // the IR value holding the tensor's current contents
  bool requiresGrad = false;       // what `tensor.requires_grad` reads
  bool isInput = false;            // a graph input fetched from `source`
  bool mutated = false;            // written in place (an input: the caller must see it)
  std::shared_ptr<TensorVar> base; // the tensor this one views (its root), for aliasing checks
  uint64_t version = 0;            // bumped by every in-place write
  uint64_t baseVersion = 0;        // base->version when this view was made (or last re-read)
  std::vector<ViewStep> viewSteps; // the view ops from base to this view (replayed on the base)
  std::string viewOpaque;   // non-empty: why viewSteps do not reproduce the view (PyTorch may copy)
  bool viewReplays = false; // viewOpaque, but viewSteps replayed in Python on the caller's
                            // base make eager's tensor (a reshape-like step choosing view or
                            // copy on the run's strides, a PyTorch fallback's view called again)
  bool viewOverlaps = false;   // an expand on the way: several elements share memory
  bool viewContiguous = false; // contiguous in eager (a reshape/contiguous of it is a view)
  bool viewAssumesContiguousBase = false; // viewSteps hold only while the input base is
                                          // contiguous (its strides are guarded once relied on)
  std::vector<int64_t> inputStrides;      // an input's strides at capture time
  uintptr_t inputLo = 0, inputHi = 0;     // the bytes an input's elements span at capture
  bool usedInGraph = false;               // an input whose value an op reads
  bool stridesRead = false;               // the capture depends on the input's strides (guard them)
  bool intCarrier = false; // the u8[sym] input carrying a symbolic Python int (Capture::intInputs)
  bool floatCarrier = false; // the f64[] input carrying a Python float (Capture::floatInputs)
  // An op autograd records read it (or a view of it): eager may have saved it for backward.
  bool readWithGrad = false;
  // The ops autograd records that save it (or a view of it) for their backward
  // (Analyzer::noteSavedReads): an in-place write after them makes eager's backward raise.
  // (The op's definition too: an op erased later leaves a dangling address, never read.)
  std::vector<std::pair<const Op *, const OpDef *>> savedBy;
  // A view made under no_grad of a tensor that requires grad (or a view of such a view): as in
  // eager it never carries a gradient, and a write through it with grad enabled raises.
  bool noGradView = false;
  // A tensor that requires grad written under no_grad: the data the caller's tensor gets
  // (`value` is the same data with the gradient the tensor's; Analyzer::writtenWithoutGrad).
  Value *leafData = nullptr;
  const Type &type() const { return value->type(); }
};

struct SymIntVar : Var {
  static constexpr VarKind Kind = VarKind::SymInt;
  SymIntVar(DimExpr e, int64_t h, Value *v)
      : Var(VarKind::SymInt), expr(std::move(e)), hint(h), value(v) {}
  DimExpr expr; // over the graph's shape symbols
  int64_t hint; // its value in the frame being captured
  Value *value; // an IR int computing it
};

/// A Python float the graph reads at run time: ops take it as a scalar operand (a Python
/// number's type promotion); where Python needs its value the analysis restarts with it
/// guarded by value (Analyzer::specializeFloat).
struct SymFloatVar : Var {
  static constexpr VarKind Kind = VarKind::SymFloat;
  SymFloatVar(double h, Value *v, std::vector<std::string> k)
      : Var(VarKind::SymFloat), hint(h), value(v), inputs(std::move(k)) {}
  double hint;                     // its value in the frame being captured
  Value *value;                    // an IR float computing it
  std::vector<std::string> inputs; // the sources of the float inputs it is computed from
  std::optional<Source> input;     // where the caller passes it: the float input itself
};

struct TupleVar : Var {
  static constexpr VarKind Kind = VarKind::Tuple;
  explicit TupleVar(std::vector<VarPtr> i, PyRef type = {})
      : Var(VarKind::Tuple), items(std::move(i)), structType(std::move(type)) {}
  std::vector<VarPtr> items;
  PyRef structType; // torch.Size, a namedtuple / structseq type, or empty for a plain tuple
};

struct ListVar : Var {
  static constexpr VarKind Kind = VarKind::List;
  explicit ListVar(std::vector<VarPtr> i) : Var(VarKind::List), items_(std::move(i)) {}
  /// A list the caller can see (a global, a closure cell, an attribute) whose items are wrapped,
  /// and its length and items guarded, only when the capture reads them: `load` returns them.
  /// A list the frame only appends to (a hook collecting outputs) is captured once for any
  /// length; its appends are replayed after the graph (SideEffect::ListAppend).
  explicit ListVar(std::function<std::vector<VarPtr>()> load)
      : Var(VarKind::List), load_(std::move(load)) {}
  /// The items (wrapping a list read from the caller on first use).
  std::vector<VarPtr> &items() {
    if (load_) {
      auto load = std::move(load_);
      load_ = nullptr;
      std::vector<VarPtr> appended = std::move(items_);
      items_ = load();
      items_.insert(items_.end(), appended.begin(), appended.end());
    }
    return items_;
  }
  /// Appends without reading the items.
  void append(VarPtr v) { items_.push_back(std::move(v)); }

private:
  std::function<std::vector<VarPtr>()> load_;
  std::vector<VarPtr> items_; // while load_ is set: the items appended so far
};

struct DictVar : Var {
  static constexpr VarKind Kind = VarKind::Dict;
  DictVar() : Var(VarKind::Dict) {}
  std::vector<std::pair<PyRef, VarPtr>> items; // insertion order; keys are hashable constants
};

struct SliceVar : Var {
  static constexpr VarKind Kind = VarKind::Slice;
  SliceVar(VarPtr a, VarPtr b, VarPtr c)
      : Var(VarKind::Slice), start(std::move(a)), stop(std::move(b)), step(std::move(c)) {}
  VarPtr start, stop, step;
};

struct ModuleVar : Var {
  static constexpr VarKind Kind = VarKind::Module;
  explicit ModuleVar(PyRef o) : Var(VarKind::Module), obj(std::move(o)) {}
  PyRef obj;
  bool shared = false; // guarded by type, not identity (AnalyzeOptions::sharedModules)
};

struct CellVar : Var {
  static constexpr VarKind Kind = VarKind::Cell;
  explicit CellVar(VarPtr c) : Var(VarKind::Cell), contents(std::move(c)) {}
  VarPtr contents; // nullptr: empty cell
};

struct FunctionVar : Var {
  static constexpr VarKind Kind = VarKind::Function;
  FunctionVar() : Var(VarKind::Function) {}
  PyRef code;                          // the PyCodeObject
  PyRef globals;                       // the defining frame's globals dict
  std::optional<Source> globalsSource; // how guards reach those globals (nullopt: root globals)
  bool trustedGlobals = false;         // globals of a library module: read without guards
  VarPtr defaults;                     // TupleVar or nullptr
  VarPtr kwdefaults;                   // DictVar or nullptr
  std::vector<VarPtr> closure;         // CellVars, for the code's free variables
  std::string qualname;
};

struct BoundVar : Var {
  static constexpr VarKind Kind = VarKind::Bound;
  BoundVar(VarPtr s, VarPtr f, std::string n)
      : Var(VarKind::Bound), self(std::move(s)), func(std::move(f)), name(std::move(n)) {}
  VarPtr self;
  VarPtr func;      // the function to call with self first; nullptr: builtin method `name`
  std::string name; // method name (for builtin methods and messages)
};

struct PartialVar : Var {
  static constexpr VarKind Kind = VarKind::Partial;
  PartialVar() : Var(VarKind::Partial) {}
  VarPtr func;
  std::vector<VarPtr> args;
  std::vector<std::pair<std::string, VarPtr>> kw;
};

struct IteratorVar : Var {
  static constexpr VarKind Kind = VarKind::Iterator;
  explicit IteratorVar(std::vector<VarPtr> i) : Var(VarKind::Iterator), items(std::move(i)) {}
  std::vector<VarPtr> items;
  size_t pos = 0;
};

struct GradModeVar : Var {
  static constexpr VarKind Kind = VarKind::GradMode;
  explicit GradModeVar(bool e) : Var(VarKind::GradMode), enabled(e) {}
  bool enabled;
};

struct GradExitVar : Var {
  static constexpr VarKind Kind = VarKind::GradExit;
  explicit GradExitVar(bool r) : Var(VarKind::GradExit), restore(r) {}
  bool restore;
};

struct AutocastModeVar : Var {
  static constexpr VarKind Kind = VarKind::AutocastMode;
  explicit AutocastModeVar(AutocastState s) : Var(VarKind::AutocastMode), state(s) {}
  AutocastState state;
};

struct AutocastExitVar : Var {
  static constexpr VarKind Kind = VarKind::AutocastExit;
  explicit AutocastExitVar(AutocastState r) : Var(VarKind::AutocastExit), restore(r) {}
  AutocastState restore;
};

struct SuperVar : Var {
  static constexpr VarKind Kind = VarKind::Super;
  SuperVar(PyRef c, VarPtr s) : Var(VarKind::Super), cls(std::move(c)), self(std::move(s)) {}
  PyRef cls; // look up attributes after this class in type(self).__mro__
  VarPtr self;
};

struct DataclassVar : Var {
  static constexpr VarKind Kind = VarKind::Dataclass;
  explicit DataclassVar(PyRef c) : Var(VarKind::Dataclass), cls(std::move(c)) {}
  PyRef cls;
  std::vector<std::pair<std::string, VarPtr>> fields; // declaration order
  /// A dict subclass (transformers' ModelOutput): its items are the fields that are not None.
  bool mapping = false;
  VarPtr *find(const std::string &name) {
    for (auto &[k, v] : fields)
      if (k == name) return &v;
    return nullptr;
  }
};

/// An instance of a plain Python class constructed inside the captured code: `cls.__init__` was
/// inlined on it and its instance dictionary is abstract. When it escapes (returned, stored where
/// the caller can see it) it is rebuilt after the graph runs: `object.__new__(cls)`, then its
/// attributes set from the graph outputs and constants (analyzer_instance.cpp).
struct InstanceVar : Var {
  static constexpr VarKind Kind = VarKind::Instance;
  explicit InstanceVar(PyRef c) : Var(VarKind::Instance), cls(std::move(c)) {}
  PyRef cls;
  std::optional<Source> clsSource; // where the caller reaches the class (methods' globals)
  std::vector<std::pair<std::string, VarPtr>> attrs; // its __dict__, in insertion order
  VarPtr *find(const std::string &name) {
    for (auto &[k, v] : attrs)
      if (k == name) return &v;
    return nullptr;
  }
};

template <class T> T *as(const VarPtr &v) {
  return v && v->kind == T::Kind ? static_cast<T *>(v.get()) : nullptr;
}

/// Call arguments: positional, then keyword (in call order).
struct Args {
  std::vector<VarPtr> pos;
  std::vector<std::pair<std::string, VarPtr>> kw;
  const VarPtr *find(std::string_view name) const {
    for (auto &[k, v] : kw)
      if (k == name) return &v;
    return nullptr;
  }
};

/// Kind names for messages ("tensor", "list", ...).
const char *varKindName(VarKind k);

} // namespace xjit::frontend
