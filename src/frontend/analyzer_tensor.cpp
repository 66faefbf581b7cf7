// Tensors in the analysis: graph inputs and their symbolic shapes, emitting ops, tensor
// attributes and methods, Python operators on tensors, indexing and indexed assignment, in-place
// writes (expressed functionally) and PyTorch fallback calls.
#include "analyzer.h"
#include "events.h"
#include "output_layout.h"
#include "tensor_bridge.h"

#include "xjit/ir/op_registry.h"
#include "xjit/ir/sym_attr.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <optional>
#include <set>

namespace xjit::frontend {

using namespace bc;

namespace {

/// Whether `v` is `base` or a view of it through view ops of the graph (each viewing its
/// operand 0).
bool viewsInGraph(const Value *v, const Value *base) {
  for (int depth = 0; v && depth < 256; ++depth) {
    if (v == base) return true;
    const Op *def = v->definingOp();
    if (!def || !def->def().has(kView) || def->numOperands() == 0) return false;
    v = def->operand(0);
  }
  return false;
}

// A graph input name from its source: L['self'].fc.weight -> self_fc_weight.
std::string inputName(const Source &src) {
  std::string out;
  for (const SourceStep &s : src) {
    std::string part;
    switch (s.kind) {
    case SourceStep::Local:
    case SourceStep::Cell:
    case SourceStep::CellObject:
    case SourceStep::Global:
    case SourceStep::Attr: part = s.name; break;
    case SourceStep::Item: part = std::to_string(s.index); break;
    case SourceStep::ContextValue: part = "value"; break;
    case SourceStep::DictKey:
      part = PyUnicode_Check(s.key.get()) ? utf8(s.key.get()) : "key";
      break;
    }
    if (part.rfind("__", 0) == 0) continue; // __closure__, __globals__...
    if (!out.empty()) out += "_";
    out += part;
  }
  std::string clean;
  for (char c : out)
    clean += (std::isalnum(static_cast<unsigned char>(c)) || c == '_') ? c : '_';
  if (clean.empty() || std::isdigit(static_cast<unsigned char>(clean[0]))) clean = "in_" + clean;
  return clean;
}

int binaryIrOp(int base, const char **name) {
  switch (base) {
  case NB_ADD: *name = "add"; return 1;
  case NB_SUBTRACT: *name = "sub"; return 1;
  case NB_MULTIPLY: *name = "mul"; return 1;
  case NB_TRUE_DIVIDE: *name = "div"; return 1;
  case NB_FLOOR_DIVIDE: *name = "floor_divide"; return 1;
  case NB_REMAINDER: *name = "remainder"; return 1;
  case NB_POWER: *name = "pow"; return 1;
  case NB_MATRIX_MULTIPLY: *name = "matmul"; return 1;
  case NB_AND: *name = "bitwise_and"; return 1;
  case NB_OR: *name = "bitwise_or"; return 1;
  case NB_XOR: *name = "bitwise_xor"; return 1;
  case NB_LSHIFT: *name = "bitwise_left_shift"; return 0;
  case NB_RSHIFT: *name = "bitwise_right_shift"; return 0;
  default: return -1;
  }
}

} // namespace

// ---------------------------------------------------------------------------------------------
// Inputs and shapes

Shape Analyzer::inputShape(const std::vector<int64_t> &sizes, const Source &src,
                           std::vector<std::string> &symbols) {
  // Only the frame's own inputs (arguments, their items, closure values) get symbolic dims;
  // parameters and buffers (reached through attributes) keep static shapes.
  bool dynamic = opts_.dynamicShapes;
  // Automatic dynamic shapes lists what changed: a whole source, or single dims of it (like
  // torch.compile, a dim that kept its size stays static).
  const std::vector<std::string> &listed = opts_.dynamicSources;
  auto isListed = [&](const std::string &key) {
    return std::find(listed.begin(), listed.end(), key) != listed.end();
  };
  std::string key = dynamic && !listed.empty() ? sourceKey(src) : std::string();
  // The parameters and buffers of a shared module keep static shapes (torch.compile's
  // force_parameter_static_shapes): a size that "changed" there is another instance's, and an
  // instance of other sizes gets an entry of its own (a conv's kernel must be static).
  if (dynamic && sharedSource(src) && isModuleState(src)) dynamic = false;
  if (dynamic) {
    bool changed = !key.empty() && isListed(key);
    for (size_t i = 0; !key.empty() && !changed && i < sizes.size(); ++i)
      changed = isListed(dynamicDimKey(key, i));
    if (!changed && isModuleState(src)) dynamic = false;
  }
  bool wholeSource = listed.empty() || isListed(key);
  Shape shape;
  symbols.assign(sizes.size(), "");
  for (size_t i = 0; i < sizes.size(); ++i) {
    int64_t n = sizes[i];
    bool dimDynamic = dynamic && (wholeSource || isListed(dynamicDimKey(key, i)));
    if (!dimDynamic || n < 2 || specialized_.count(std::to_string(n))) {
      shape.emplace_back(n);
      continue;
    }
    auto it = symbolForSize_.find(n);
    if (it == symbolForSize_.end()) {
      std::string name = "s" + std::to_string(symbolForSize_.size());
      it = symbolForSize_.emplace(n, name).first;
      symbolHints_[name] = n;
    }
    symbols[i] = it->second;
    shape.push_back(DimExpr::symbol(it->second));
  }
  return shape;
}

bool Analyzer::isModuleState(const Source &src) const {
  // Module state (parameters and buffers, reached through a module's attributes) and globals
  // stay static, unless automatic dynamic saw them change. Attributes of other objects are
  // inputs like the frame's arguments: a KV cache's keys (past_key_values.layers[0].keys) grow
  // by one per decoding step.
  for (size_t i = 0; i < src.size(); ++i) {
    if (src[i].kind == SourceStep::Global) return true;
    if (src[i].kind != SourceStep::Attr) continue;
    auto parent = sourceCache_.find(sourceKey(Source(src.begin(), src.begin() + i)));
    if (parent == sourceCache_.end() || parent->second->kind == VarKind::Module) return true;
  }
  return false;
}

VarPtr Analyzer::symbolicInt(PyObject *o, const Source &src) {
  if (!opts_.dynamicShapes || !PyLong_CheckExact(o)) return nullptr;
  int overflow = 0;
  const long long n = PyLong_AsLongLongAndOverflow(o, &overflow);
  if (overflow || n == -1) PyErr_Clear();
  // 0, 1 and negative ints stay static (a symbol is at least 2, as for dims), as does a value
  // a restart of the analysis specialized (Python control flow needed it: range(n)).
  if (overflow || n < 2 || specialized_.count(std::to_string(n)) || !dynamicNumber(src))
    return nullptr;
  const std::string key = sourceKey(src);
  // Its own symbol (no duck sizing with dims of the same size: an int that changes at every
  // call would otherwise be tied to a dim at the first symbolic capture).
  const std::string name = "i" + std::to_string(intSymbols_++);
  symbolHints_[name] = n;
  // The carrier: a u8[name] input the driver builds from the int (a zero-stride view of one
  // byte), so the runtime binds the symbol from its size like any dim; `size` reads it.
  Value *in =
      graph_->addInput(Type::tensor(DType::U8, {DimExpr::symbol(name)}), inputName(src) + "_int");
  auto carrier = std::make_shared<TensorVar>(in);
  carrier->isInput = true;
  carrier->intCarrier = true;
  carrier->source = src;
  inputTensors_.push_back(carrier);
  Guard g;
  g.kind = Guard::IntSymbol;
  g.source = src;
  g.symbols = {name};
  g.description = key + ": int " + name + " >= 2 (symbolic)";
  addGuard(std::move(g));
  Value *v = builder_.op("size", {in}, {{"dim", Attr(int64_t{0})}});
  return std::make_shared<SymIntVar>(DimExpr::symbol(name), n, v);
}

bool Analyzer::dynamicNumber(const Source &src) const {
  const std::vector<std::string> &listed = opts_.dynamicSources;
  // Automatic dynamic: only numbers whose value changed between calls.
  if (!listed.empty())
    return std::find(listed.begin(), listed.end(), sourceKey(src)) != listed.end();
  // dynamic=True: the frame's own inputs, as torch.compile does (numbers of modules, globals
  // and defaults are configuration, specialized).
  if (isModuleState(src)) return false;
  for (const SourceStep &s : src)
    if (s.kind == SourceStep::Attr && (s.name == "__defaults__" || s.name == "__kwdefaults__"))
      return false;
  return true;
}

VarPtr Analyzer::symbolicFloat(PyObject *o, const Source &src) {
  // As torch.compile's specialize_float=False: a float that changed between calls becomes a
  // graph input (a 0-d f64 carrier read by `item`), unless a restart specialized it.
  if (!opts_.dynamicShapes || !PyFloat_CheckExact(o)) return nullptr;
  const std::string key = sourceKey(src);
  if (specialized_.count("float " + key) || !dynamicNumber(src)) return nullptr;
  VarPtr carrier = floatInput(src);
  Value *v = builder_.op("item", {irValue(carrier)});
  auto f = std::make_shared<SymFloatVar>(PyFloat_AS_DOUBLE(o), v, std::vector<std::string>{key});
  f->input = src;
  return f;
}

void Analyzer::specializeFloat(const VarPtr &v) const {
  auto *s = as<SymFloatVar>(v);
  if (!s || s->inputs.empty())
    throw BreakError("internal: specializing a float", currentLoc(), true);
  if (settings().log & kLogDynamic)
    logLine("specializing float " + s->inputs[0] + " at " + shortLoc(currentLoc()) +
            "; the capture restarts with it guarded by value");
  throw SpecializeError("float " + s->inputs[0]);
}

void Analyzer::specialize(const DimExpr &e) const {
  std::vector<std::string> syms = e.symbols();
  if (syms.empty()) throw BreakError("internal: specializing a static size", currentLoc(), true);
  auto it = symbolHints_.find(syms[0]);
  if (it == symbolHints_.end())
    throw BreakError("internal: unknown symbol " + syms[0], currentLoc(), true);
  if (settings().log & kLogDynamic)
    logLine("specializing " + syms[0] + " = " + std::to_string(it->second) + " (from " + e.str() +
            ") at " + shortLoc(currentLoc()) + "; the capture restarts with that size static");
  throw SpecializeError(std::to_string(it->second));
}

int64_t Analyzer::hintOf(const DimExpr &e) const {
  std::optional<int64_t> v = e.evaluate(symbolHints_);
  if (!v) throw BreakError("internal: cannot evaluate size " + e.str(), currentLoc(), true);
  return *v;
}

namespace {
/// Whether `e` is at least 0 whatever its symbols are, read from its canonical text. Symbols
/// are sizes of at least 2 (the tensor guards check that): without a '-' every term is
/// non-negative (floor divisions and modulos of non-negative parts included); and a polynomial
/// whose non-constant terms have positive coefficients (no '-', '//' or '%' once the constant
/// is taken off: those need not be monotone) is smallest with every symbol 2, so `s1-2` is
/// known. Conservative: an undecided relation only costs a guard.
bool knownNonNegative(const DimExpr &e) {
  if (e.isStatic()) return e.value() >= 0;
  if (e.str().find('-') == std::string::npos) return true;
  SymbolBindings zeros, twos;
  for (const std::string &s : e.symbols()) {
    zeros[s] = 0;
    twos[s] = 2;
  }
  std::optional<int64_t> constant = e.evaluate(zeros), smallest = e.evaluate(twos);
  if (!constant || !smallest) return false;
  const std::string rest = (e - DimExpr(*constant)).str();
  return rest.find_first_of("-/%") == std::string::npos && *smallest >= 0;
}
} // namespace

void Analyzer::assumeAtMost(const DimExpr &lo, const DimExpr &hi, const std::string &what) {
  const DimExpr room = hi - lo;
  // Static: the same at every call, so nothing to guard (an op whose sizes are all static
  // checks them itself and fails at capture as it does in eager).
  if (room.isStatic() || knownNonNegative(room)) return;
  if (hintOf(room) < 0)
    throw BreakError("internal: assuming " + lo.str() + " <= " + hi.str() + " (" + what +
                         "), which does not hold at this call",
                     currentLoc(), true);
  Guard g;
  g.kind = Guard::SizeAtMost;
  g.lhs = lo.str();
  g.rhs = hi.str();
  g.description = g.lhs + " <= " + g.rhs + " (" + what + " at " + shortLoc(currentLoc()) + ")";
  addGuard(std::move(g));
}

VarPtr Analyzer::tensorInput(PyObject *t, const Source &src) {
  std::string why;
  std::optional<TensorMeta> m = readTensorMeta(t, &why);
  if (!m) fail("unsupported input " + sourceKey(src) + ": " + why);
  std::vector<std::string> symbols;
  Shape shape = inputShape(m->sizes, src, symbols);
  Value *in = graph_->addInput(Type::tensor(m->dtype, shape, m->device), inputName(src));
  auto tv = std::make_shared<TensorVar>(in);
  tv->isInput = true;
  tv->requiresGrad = m->requiresGrad;
  tv->source = src;
  tv->inputStrides = m->strides;
  inputDenseOrders_.resize(graph_->body()->numArguments());
  inputDenseOrders_.back() = denseOrder(m->sizes, m->strides);
  // An input with a stride-0 dim (an expanded tensor) has elements that share memory: the
  // graph cannot write it (or a view of it) back, so such writes are graph breaks as writes
  // to an expanded view are; eager writes a view that does not overlap (fuzzer seed 10722).
  // The layout-class guard tells stride-0 dims apart.
  for (size_t d = 0; d < m->sizes.size(); ++d)
    tv->viewOverlaps |= m->sizes[d] > 1 && m->strides[d] == 0;
  // The bytes it spans: an input written in place must not share memory with one the graph
  // reads (or writes) (inputOverlap).
  if (PyRef p = PyRef::steal(PyObject_CallMethod(t, "data_ptr", nullptr));
      p && PyLong_Check(p.get())) {
    int64_t last = 0;
    bool empty = false;
    for (size_t d = 0; d < m->sizes.size(); ++d) {
      empty |= m->sizes[d] == 0;
      last += (m->sizes[d] - 1) * std::abs(m->strides[d]);
    }
    if (!empty) {
      tv->inputLo = PyLong_AsSize_t(p.get());
      tv->inputHi = tv->inputLo + static_cast<uintptr_t>((last + 1) * dtypeSize(m->dtype));
    }
  }
  if (PyErr_Occurred()) PyErr_Clear();
  inputTensors_.push_back(tv);
  inputObjects_.emplace_back(PyRef::borrow(t), tv);
  // The TensorMatch guard is completed in finish() (strides only if the capture read them).
  Guard g;
  g.kind = Guard::TensorMatch;
  g.source = src;
  g.dtype = std::string(dtypeName(m->dtype));
  g.device = m->device.str();
  g.requiresGrad = m->requiresGrad;
  for (size_t i = 0; i < m->sizes.size(); ++i)
    g.sizes.push_back(symbols[i].empty() ? m->sizes[i] : -1);
  g.symbols = symbols;
  g.description = sourceKey(src) + ": tensor " + std::string(dtypeName(m->dtype)) +
                  shapeStr(shape) + " " + g.device +
                  " requires_grad=" + (m->requiresGrad ? "True" : "False");
  addGuard(std::move(g));
  return tv;
}

VarPtr Analyzer::floatInput(const Source &src) {
  const std::string key = sourceKey(src) + "#float";
  if (auto it = sourceCache_.find(key); it != sourceCache_.end()) return it->second;
  guardType(src, reinterpret_cast<PyObject *>(&PyFloat_Type));
  Value *in = graph_->addInput(Type::tensor(DType::F64, {}), inputName(src) + "_float");
  auto carrier = std::make_shared<TensorVar>(in);
  carrier->isInput = true;
  carrier->floatCarrier = true;
  carrier->source = src;
  inputTensors_.push_back(carrier);
  sourceCache_[key] = carrier;
  return carrier;
}

VarPtr Analyzer::constantTensor(PyObject *t) {
  Tensor host = importTensor(t).contiguousCopy();
  Value *v = builder_.constantTensor(host);
  return std::make_shared<TensorVar>(v);
}

// ---------------------------------------------------------------------------------------------
// Emitting ops

const TensorVar *Analyzer::inputOverlap(const TensorVar &t, bool usedToo) const {
  if (t.inputLo == t.inputHi) return nullptr;
  for (const auto &u : inputTensors_)
    if (u.get() != &t && (u->mutated || (usedToo && u->usedInGraph)) && u->inputLo < t.inputHi &&
        t.inputLo < u->inputHi)
      return u.get();
  return nullptr;
}

Value *Analyzer::irValue(const VarPtr &v) {
  if (auto *t = as<TensorVar>(v)) {
    touchView(v);
    if (t->isInput && !t->usedInGraph) {
      // Its value at entry is what the graph reads: stale if an input it overlaps was written.
      if (const TensorVar *u = inputOverlap(*t, false))
        fail("reads " + sourceKey(*t->source) + ", which shares memory with " +
             sourceKey(*u->source) + ", written in place before");
      t->usedInGraph = true;
    }
    return t->value;
  }
  if (auto *s = as<SymIntVar>(v)) return s->value;
  if (auto *s = as<SymFloatVar>(v)) return s->value;
  if (auto *o = as<ObjectVar>(v)) {
    PyObject *p = o->obj.get();
    if (PyBool_Check(p)) return builder_.constantBool(p == Py_True);
    if (PyLong_Check(p)) {
      int overflow = 0;
      long long x = PyLong_AsLongLongAndOverflow(p, &overflow);
      if (overflow) fail("integer constant out of the int64 range");
      return builder_.constantInt(x);
    }
    if (PyFloat_Check(p)) return builder_.constantFloat(PyFloat_AS_DOUBLE(p));
    if (p == Py_None) return builder_.createWithTypes("constant", {}, {Type::none()})->result(0);
  }
  fail("a " + typeName(v) + " (" + describe(v) + ") as a tensor operand");
}

bool Analyzer::anyRequiresGrad(const std::vector<VarPtr> &vs) const {
  for (const VarPtr &v : vs)
    if (auto *t = as<TensorVar>(v); t && t->requiresGrad) return true;
  return false;
}

void Analyzer::touchView(const VarPtr &v) {
  auto *t = as<TensorVar>(v);
  if (!t || !t->base || t->base->version == t->baseVersion) return;
  if (!t->viewOpaque.empty())
    fail("a view is used after its base tensor was written in place (" + t->viewOpaque + ")");
  if (t->viewAssumesContiguousBase) t->base->stridesRead = true;
  t->baseVersion = t->base->version;
  VarPtr from = t->base;
  if (t->noGradView && t->base->requiresGrad) // read again, it still carries no gradient
    from = std::make_shared<TensorVar>(
        builder_.create("alias", {t->base->value}, {{"autodiff.stop", Attr(true)}})->result(0));
  t->value = as<TensorVar>(replayView(*t, from))->value;
}

DimExpr Analyzer::symbolicIndexWithin(const DimExpr &index, const DimExpr &size) {
  if (hintOf(index) < 0 || hintOf(index) >= hintOf(size)) specialize(index);
  assumeAtMost(DimExpr(0), index, "index");
  assumeAtMost(index + DimExpr(1), size, "index");
  return index;
}

DimExpr Analyzer::indexWithin(int64_t index, const DimExpr &size) {
  if (index >= hintOf(size) || index < -hintOf(size)) specialize(size);
  const DimExpr at = index < 0 ? size + DimExpr(index) : DimExpr(index);
  assumeAtMost(DimExpr(0), at, "index");
  assumeAtMost(at + DimExpr(1), size, "index");
  return at;
}

VarPtr Analyzer::replayView(const TensorVar &view, VarPtr from) {
  const std::vector<ViewStep> steps = view.viewSteps;
  for (const ViewStep &s : steps) {
    std::vector<VarPtr> operands{from};
    operands.insert(operands.end(), s.extra.begin(), s.extra.end());
    from = emit(s.op, operands, s.attrs).at(s.result);
  }
  return from;
}

void Analyzer::checkViewWriteOperands(const VarPtr &target, const std::vector<VarPtr> &operands) {
  auto *t = as<TensorVar>(target);
  if (!t) return;
  for (const VarPtr &o : operands) {
    auto *a = as<TensorVar>(o);
    if (!a || a == t) continue;
    if (t->base && (a->base == t->base || a == t->base.get()))
      fail("in-place write to a view from another view of the same tensor (PyTorch rejects "
           "overlapping memory or copies in order)");
    // x.mul_(x[0]): eager writes row 0 before the later rows read it (the graph would read a
    // snapshot).
    if (!t->base && a->base.get() == t)
      fail("in-place write to a tensor from a view of itself (PyTorch rejects overlapping "
           "memory or computes in order)");
  }
}

namespace {

/// Whether `root` (a tensor that is no view) is contiguous in eager: only an input's strides
/// are known (guarded where a write or a re-read relies on it); a computed tensor may carry its
/// operands' layout.
bool rootContiguous(const TensorVar &root) {
  if (!root.isInput || !isStaticShape(root.type().shape())) return false;
  std::vector<int64_t> sizes;
  for (const DimExpr &d : root.type().shape())
    sizes.push_back(d.value());
  std::vector<int64_t> expect = contiguousStrides(sizes);
  for (size_t i = 0; i < sizes.size(); ++i)
    if (sizes[i] != 1 && root.inputStrides[i] != expect[i]) return false;
  return true;
}

/// What eager's reshape-like op (`name`: reshape, flatten, unflatten, contiguous) makes of a
/// tensor of `from`'s static sizes and `strides` as `to`: nullopt where it copies, else
/// whether the view it returns is contiguous.
std::optional<bool> reshapeViews(std::string_view name, const Type &from, const Type &to,
                                 const std::vector<int64_t> &strides) {
  std::optional<std::vector<int64_t>> sizes = staticSizesOf(from), shape = staticSizesOf(to);
  if (!sizes || !shape || strides.size() != sizes->size()) return std::nullopt;
  if (name == "contiguous") {
    if (!stridesAreContiguous(*sizes, strides)) return std::nullopt;
    return true;
  }
  std::optional<std::vector<int64_t>> viewed = reshapeViewStrides(*sizes, strides, *shape);
  if (!viewed) return std::nullopt;
  return stridesAreContiguous(*shape, *viewed);
}

/// Records how view `r` (result `index` of `op`) is made from `src`: its steps from the base,
/// whether they reproduce it (a reshape PyTorch may copy does not) and its contiguity.
/// `srcStrides` gives eager's strides of the op's operand where the layout rules know them
/// (asked only for a reshape-like op of a view of a computed tensor). Returns true where eager
/// copies instead (r is then no view).
bool recordViewStep(TensorVar &r, TensorVar &src, const Op &op, size_t index,
                    const std::vector<VarPtr> &operands,
                    const std::function<std::optional<std::vector<int64_t>>()> &srcStrides) {
  static const std::set<std::string, std::less<>> alwaysView = {
      "slice",     "select",  "narrow",           "diagonal", "alias",   "view",  "squeeze",
      "unsqueeze", "permute", "transpose",        "t",        "movedim", "split", "chunk",
      "unbind",    "expand",  "split_with_sizes", "expand_as"};
  static const std::set<std::string, std::less<>> mayCopy = {"reshape", "flatten", "unflatten",
                                                             "contiguous"};
  static const std::set<std::string, std::less<>> keepsContiguous = {
      "alias", "view", "reshape", "flatten", "unflatten", "squeeze", "unsqueeze", "contiguous"};
  const bool fromBase = src.base == nullptr;
  r.viewOverlaps = src.viewOverlaps; // of a base: an input with a stride-0 dim
  if (!fromBase) {
    r.viewSteps = src.viewSteps;
    r.viewOpaque = src.viewOpaque;
    r.viewAssumesContiguousBase = src.viewAssumesContiguousBase;
    r.viewReplays = src.viewReplays;
  }
  std::string name(op.name());
  r.viewSteps.push_back(ViewStep{name, op.attrs(), {operands.begin() + 1, operands.end()}, index});
  // Contiguity is followed only through ops that keep it, from an input's known strides (read,
  // so guarded, only where a reshape-like op needs them).
  bool contiguous = false;
  if (r.viewOpaque.empty()) {
    if (mayCopy.count(name)) {
      contiguous = fromBase ? rootContiguous(src) : src.viewContiguous;
      // A view of a computed tensor (no input: its strides are not read from a caller's
      // tensor) whose strides the layout rules know: eager views or copies as they say (BEiT's
      // `(a - b).permute(1, 2, 0).contiguous()` then written in place is a copy).
      const TensorVar &root = fromBase ? src : *src.base;
      if (!contiguous && !root.isInput && op.numResults() == 1)
        if (std::optional<std::vector<int64_t>> strides = srcStrides()) {
          std::optional<bool> views =
              reshapeViews(name, op.operand(0)->type(), op.result(0)->type(), *strides);
          if (!views) return true;
          contiguous = *views;
          r.viewContiguous = contiguous && keepsContiguous.count(name) != 0;
          return false;
        }
      if (!contiguous) {
        r.viewOpaque = name + " of a tensor whose strides are unknown at capture";
        r.viewReplays = true;
      }
      if (contiguous && fromBase) r.viewAssumesContiguousBase = true;
    } else if (alwaysView.count(name)) {
      contiguous = !fromBase && src.viewContiguous;
    } else {
      r.viewOpaque = "a view made by " + name;
    }
  } else if (!mayCopy.count(name) && !alwaysView.count(name)) {
    r.viewReplays = false;
  }
  if (name == "expand" || name == "expand_as") r.viewOverlaps = true;
  r.viewContiguous = contiguous && keepsContiguous.count(name) != 0;
  return false;
}

} // namespace

std::optional<std::vector<int64_t>> Analyzer::computedStrides(const Value *v) const {
  return computedStrides_.of(*graph_, v, inputDenseOrders_);
}

VarPtr Analyzer::wrapIr(Value *v, bool requiresGrad) {
  const Type &t = v->type();
  if (t.isTensor()) {
    auto tv = std::make_shared<TensorVar>(v);
    tv->requiresGrad = requiresGrad && isFloating(t.dtype());
    return tv;
  }
  fail("an op result of type " + t.str() + " used as a Python value");
}

void Analyzer::checkSymbolicBroadcast(const std::vector<VarPtr> &operands) {
  std::vector<const Shape *> shapes;
  size_t rank = 0;
  for (const VarPtr &v : operands)
    if (auto *tv = as<TensorVar>(v)) {
      shapes.push_back(&tv->type().shape());
      rank = std::max(rank, shapes.back()->size());
    }
  for (size_t i = 0; i < rank; ++i) {
    const DimExpr *first = nullptr; // the first size other than 1 at this dim (from the right)
    for (const Shape *s : shapes) {
      if (i >= s->size()) continue;
      const DimExpr &d = (*s)[s->size() - 1 - i];
      if (d.isStatic() && d.value() == 1) continue;
      if (!first) {
        first = &d;
        continue;
      }
      if (d == *first || (d.isStatic() && first->isStatic())) continue; // inference checks
      // Two different sizes of which one at least is symbolic: the IR assumes them equal.
      // Where one is 1 at this call eager broadcasts it: specialize it (s0-1 with s0 = 2).
      // Where they differ otherwise eager raises: specialize, so capture raises the same.
      int64_t ha = hintOf(*first), hb = hintOf(d);
      if (ha == 1 || hb == 1 || ha != hb) specialize(hb == 1 || first->isStatic() ? d : *first);
      assumeEqual(*first, d, "broadcast of symbolic sizes");
    }
  }
}

std::vector<VarPtr> Analyzer::emit(std::string_view opName, const std::vector<VarPtr> &operands,
                                   AttrMap attrs, bool view) {
  if (operands.size() >= 2)
    if (const OpDef *def = OpRegistry::instance().lookup(opName); def && def->has(kElementwise))
      checkSymbolicBroadcast(operands);
  // A pure op or a view in a torch.no_grad() region of a frame entered with grad enabled (a
  // training step) reads its operands that require grad through an alias autodiff stops at, as
  // detach() (autodiff's stopsGradient; canonicalize never looks through an alias); such a view
  // stays one of its base for writes (TensorVar::noGradView). PyTorch fallbacks there do the
  // same (fallbackCall), but for those that write (`name_`): cutsGradient.
  const OpDef *def = OpRegistry::instance().lookup(opName);
  const bool viewOp = view || (def && def->has(kView));
  const bool stopOperands = gradEnabledAtEntry_ && !gradEnabled_ && def && !def->has(kInPlace) &&
                            !def->has(kSideEffect) && (viewOp || def->isPure()) &&
                            anyRequiresGrad(operands);
  std::vector<Value *> vals;
  vals.reserve(operands.size());
  for (const VarPtr &v : operands) {
    Value *x = irValue(v);
    if (auto *tv = as<TensorVar>(v); stopOperands && tv && tv->requiresGrad)
      x = builder_.create("alias", {x}, {{"autodiff.stop", Attr(true)}})->result(0);
    vals.push_back(x);
  }
  Op *op;
  try {
    op = builder_.create(opName, std::move(vals), std::move(attrs));
  } catch (const TypeInferenceError &e) {
    fail(std::string(opName) + ": " + e.what());
  }
  view = view || op->def().has(kView);
  bool rg = gradEnabled_ && anyRequiresGrad(operands);
  recordedForAutograd_ = recordedForAutograd_ || rg;
  if (rg) noteReadWithGrad(operands);
  if (rg) noteSavedReads(*op, operands);
  cutsGradient_ = cutsGradient_ || (!gradEnabled_ && !stopOperands && anyRequiresGrad(operands));
  // A result made from its operands' shapes alone (x.new_zeros(3), zeros_like) does not require
  // grad, as in eager (fuzz seed 10090: a fill of it was then recorded as a tracked fill); nor
  // do histc's counts (autodiff's stopsGradient).
  rg = rg && !op->def().has(kShapeOnly) && op->name() != "histc";
  std::vector<VarPtr> out;
  for (size_t i = 0; i < op->numResults(); ++i) {
    VarPtr r = wrapIr(op->result(i), rg);
    if (view && !operands.empty()) {
      if (auto *src = as<TensorVar>(operands[0])) {
        auto *rt = as<TensorVar>(r);
        rt->base = src->base ? src->base : std::static_pointer_cast<TensorVar>(operands[0]);
        rt->baseVersion = rt->base->version;
        rt->noGradView = src->noGradView || stopOperands;
        const Value *from = op->operand(0);
        if (recordViewStep(*rt, *src, *op, i, operands, [&] { return computedStrides(from); })) {
          auto copy = std::make_shared<TensorVar>(rt->value); // eager copies: no view
          copy->requiresGrad = rt->requiresGrad;
          r = std::move(copy);
        }
      }
    }
    out.push_back(std::move(r));
  }
  return out;
}

void Analyzer::noteReadWithGrad(const std::vector<VarPtr> &operands) {
  for (const VarPtr &v : operands)
    if (auto *t = as<TensorVar>(v); t && (t->requiresGrad || t->noGradView)) {
      t->readWithGrad = true;
      if (t->base) t->base->readWithGrad = true;
    }
}

VarPtr Analyzer::markTrackedFill(VarPtr fill, const VarPtr &t) {
  auto *tv = as<TensorVar>(t);
  if (gradEnabled_ && tv && tv->requiresGrad)
    if (Op *def = as<TensorVar>(fill)->value->definingOp())
      def->setAttr("autodiff.fill", Attr(true));
  return fill;
}

VarPtr Analyzer::wholeWrite(const VarPtr &t, const VarPtr &v) {
  auto *tv = as<TensorVar>(t);
  // where(true, v, t) survives canonicalize (v - 0 would not); functionalize's copy_ is the same.
  if (gradEnabled_ && tv->requiresGrad) // fuzz seed 12789
    return emit1("where", {emit1("ones_like", {t}, {{"dtype", Attr(DType::Bool)}}), v, t});
  // clone(expand_as(v, t)) marked as a whole write: eager writes t in place, so the result keeps
  // t's layout, not v's (fuzzer seed 33525: `v2.copy_(a)` of a permuted a stays v2's layout,
  // and a reshape of v2 then views it). The layout rules and the meta walk read the mark
  // (writtenInPlace); canonicalize folds the expand_as and the clone away.
  return emit1("clone", {emit1("expand_as", {v, t})}, {{kWholeWriteAttr, Attr(true)}});
}

VarPtr Analyzer::castTo(const VarPtr &t, DType dtype) {
  auto *tv = as<TensorVar>(t);
  if (!tv || tv->type().dtype() == dtype) return t;
  return emit1("cast", {t}, {{"dtype", Attr(dtype)}});
}

// ---------------------------------------------------------------------------------------------
// Sizes

VarPtr Analyzer::sizeOf(const VarPtr &t, int64_t dim) {
  auto *tv = as<TensorVar>(t);
  int64_t rank = tv->type().rank();
  if (dim < -rank || dim >= rank || rank == 0)
    fail("dimension " + std::to_string(dim) + " out of range for a " + std::to_string(rank) +
         "-d tensor");
  if (dim < 0) dim += rank;
  const DimExpr &d = tv->type().shape()[static_cast<size_t>(dim)];
  if (d.isStatic()) return integer(d.value());
  Value *v = builder_.op("size", {tv->value}, {{"dim", Attr(dim)}});
  return std::make_shared<SymIntVar>(d, hintOf(d), v);
}

VarPtr Analyzer::shapeTuple(const VarPtr &t) {
  auto *tv = as<TensorVar>(t);
  std::vector<VarPtr> items;
  for (int64_t i = 0; i < tv->type().rank(); ++i)
    items.push_back(sizeOf(t, i));
  static PyObject *sizeType =
      check(PyObject_GetAttrString(torchModule(), "Size"), "torch.Size").release();
  return std::make_shared<TupleVar>(std::move(items), PyRef::borrow(sizeType));
}

// ---------------------------------------------------------------------------------------------
// Attributes and methods

void Analyzer::setRequiresGrad(TensorVar &t, const VarPtr &flag, bool method) {
  PyRef f = asPython(flag);
  if (!f || !PyBool_Check(f.get()))
    fail("requires_grad set to a value that is not a constant bool");
  // `requires_grad_(True)` on a tensor that requires grad changes nothing, leaf or not
  // (transformers' enable_input_require_grads hook on the embeddings' output, with gradient
  // checkpointing).
  if (t.requiresGrad && method && f.get() == Py_True) return;
  // A tensor without gradient is a leaf: False changes nothing. One that requires grad is the
  // caller's leaf or a non-leaf (eager raises): Python decides.
  if (t.requiresGrad) fail("requires_grad set on a tensor that requires grad");
  if (f.get() == Py_False) return;
  if (t.isInput) fail("requires_grad = True on a tensor the caller passed (it changes it)");
  if (!gradEnabled_) fail("requires_grad = True under torch.no_grad()");
  if (!isFloating(t.type().dtype())) fail("requires_grad = True on a tensor that is not floating");
  // Eager makes the tensor a leaf that requires grad: what it reaches requires grad, and its
  // own gradient is seen only through it (the driver checks that the outputs it reaches are
  // also reached by an input that requires grad, so their requires_grad is eager's).
  t.requiresGrad = true;
  gradLeaves_.push_back(t.value);
}

VarPtr Analyzer::tensorAttr(const VarPtr &t, const std::string &name) {
  auto *tv = as<TensorVar>(t);
  const Type &ty = tv->type();
  if (name == "shape") return shapeTuple(t);
  if (name == "dtype") return constant(torchDtype(ty.dtype()));
  if (name == "device") return std::make_shared<ObjectVar>(torchDevice(ty.device()));
  if (name == "ndim") return integer(ty.rank());
  if (name == "requires_grad") return boolean(tv->requiresGrad);
  if (name == "is_cuda") return boolean(ty.device().kind == "cuda");
  if (name == "is_cpu") return boolean(ty.device().kind == "cpu");
  if (name == "is_meta") return boolean(ty.device().kind == "meta");
  if (name == "is_sparse" || name == "is_quantized" || name == "is_nested" || name == "is_mkldnn")
    return boolean(false);
  if (name == "layout") return constantSteal(PyObject_GetAttrString(torchModule(), "strided"));
  if (name == "itemsize") return integer(dtypeSize(ty.dtype()));
  if (name == "T") {
    std::vector<int64_t> perm;
    for (int64_t i = ty.rank() - 1; i >= 0; --i)
      perm.push_back(i);
    return emit1("permute", {t}, {{"dims", Attr(perm)}});
  }
  if (name == "mT" || name == "mH") {
    if (ty.rank() < 2) fail("tensor.mT of a tensor with fewer than 2 dims");
    return emit1("transpose", {t}, {{"dim0", Attr(int64_t{-2})}, {"dim1", Attr(int64_t{-1})}});
  }
  if (name == "H") return tensorAttr(t, "T");
  if (name == "data") {
    VarPtr r = emit1("alias", {t});
    as<TensorVar>(r)->requiresGrad = false;
    return r;
  }
  if (name == "grad" || name == "grad_fn" || name == "is_leaf" || name == "_version")
    fail("tensor." + name + " (autograd state)");
  if (PyObject_HasAttrString(torchTensorType(), name.c_str()))
    return std::make_shared<BoundVar>(t, nullptr, name);
  fail("tensor attribute '" + name + "'");
}

VarPtr Analyzer::tensorMethod(const VarPtr &t, const std::string &name, const Args &args) {
  auto *tv = as<TensorVar>(t);
  const Type &ty = tv->type();
  bool found = false;
  VarPtr r = callTensorMethodRow(name, t, args, &found);
  if (r) return r; // (found without a result: a row's calls it leaves to PyTorch, below)
  auto dimArg = [&]() -> std::optional<int64_t> {
    const VarPtr *d = args.pos.empty() ? args.find("dim") : &args.pos[0];
    if (!d) return std::nullopt;
    std::optional<int64_t> i = asInt(*d);
    if (!i) fail("tensor." + name + "() with a non-int dim");
    return i;
  };
  if (name == "size") {
    if (std::optional<int64_t> d = dimArg()) return sizeOf(t, *d);
    return shapeTuple(t);
  }
  if (name == "dim" || name == "ndimension") return integer(ty.rank());
  if (name == "numel" || name == "nelement") {
    DimExpr n = numelOf(ty.shape());
    if (n.isStatic()) return integer(n.value());
    return std::make_shared<SymIntVar>(n, hintOf(n), builder_.op("numel", {tv->value}));
  }
  if (name == "element_size") return integer(dtypeSize(ty.dtype()));
  if (name == "is_floating_point") return boolean(isFloating(ty.dtype()));
  if (name == "is_complex") return boolean(false);
  if (name == "is_signed") return boolean(ty.dtype() != DType::U8 && ty.dtype() != DType::Bool);
  if (name == "get_device") return integer(ty.device().kind == "cpu" ? -1 : ty.device().index);
  if (name == "stride" || name == "is_contiguous") {
    // Only inputs have strides known at capture time; results' strides depend on the backend.
    if (!tv->isInput) fail("tensor." + name + "() of a computed tensor");
    tv->stridesRead = true;
    if (name == "is_contiguous") {
      if (!ty.shape().empty() && !isStaticShape(ty.shape()))
        fail("is_contiguous() with dynamic shapes");
      std::vector<int64_t> sizes;
      for (const DimExpr &d : ty.shape())
        sizes.push_back(d.value());
      std::vector<int64_t> expect = contiguousStrides(sizes);
      bool contiguous = true;
      for (size_t i = 0; i < sizes.size(); ++i)
        if (sizes[i] != 1 && tv->inputStrides[i] != expect[i]) contiguous = false;
      return boolean(contiguous);
    }
    if (std::optional<int64_t> d = dimArg()) {
      int64_t rank = ty.rank(), i = *d < 0 ? *d + rank : *d;
      if (i < 0 || i >= rank) fail("stride(): dim out of range");
      return integer(tv->inputStrides[static_cast<size_t>(i)]);
    }
    std::vector<VarPtr> items;
    for (int64_t s : tv->inputStrides)
      items.push_back(integer(s));
    return std::make_shared<TupleVar>(std::move(items));
  }
  if (name == "item" || name == "tolist" || name == "numpy" || name == "__bool__" ||
      name == "__int__" || name == "__float__" || name == "__index__")
    fail("tensor." + name + "() reads tensor data into Python");
  if (name == "requires_grad_") { // requires_grad_(requires_grad=True) returns the tensor
    auto kw = std::find_if(args.kw.begin(), args.kw.end(),
                           [](const auto &k) { return k.first == "requires_grad"; });
    setRequiresGrad(*as<TensorVar>(t),
                    !args.pos.empty()     ? args.pos[0]
                    : kw != args.kw.end() ? kw->second
                                          : boolean(true),
                    /*method=*/true);
    return t;
  }
  if (name == "backward") fail(std::string(BreakPoint::kAtBackward) + " (autograd)");
  if (name == "register_hook" || name == "retain_grad") fail("tensor." + name + "() (autograd)");
  if (name == "data_ptr" || name == "untyped_storage" || name == "storage")
    fail("tensor." + name + "()");
  if (name == "cpu") {
    if (ty.device().kind == "cpu") return t;
    fail("tensor.cpu() of a " + ty.device().str() + " tensor");
  }
  // In-place methods: the functional form, then an in-place write of the result.
  if (name.size() > 1 && name.back() == '_' && name.compare(0, 2, "__") != 0) {
    std::string base = name.substr(0, name.size() - 1);
    checkViewWriteOperands(t, args.pos);
    for (const auto &kv : args.kw)
      checkViewWriteOperands(t, {kv.second});
    VarPtr result;
    if (base == "zero") {
      result = markTrackedFill(emit1("zeros_like", {t}), t);
    } else if (base == "fill") {
      if (args.pos.size() != 1) fail("fill_() takes one value");
      if (args.pos[0]->kind == VarKind::Tensor)
        result = emit1("expand", {castTo(args.pos[0], ty.dtype())},
                       {{"shape", Attr(std::vector<int64_t>{})}});
      PyRef v = asPython(args.pos[0]);
      if (!v) fail("fill_() with a value known only at run time");
      AttrMap a;
      if (PyBool_Check(v.get()))
        a["fill_value"] = Attr(v.get() == Py_True);
      else if (PyLong_Check(v.get()))
        a["fill_value"] = Attr(static_cast<int64_t>(PyLong_AsLongLong(v.get())));
      else
        a["fill_value"] = Attr(PyFloat_AsDouble(v.get()));
      result = markTrackedFill(emit1("full_like", {t}, std::move(a)), t);
    } else if (base == "copy") {
      if (args.pos.empty()) fail("copy_() without a source");
      result = args.pos[0];
      if (result->kind != VarKind::Tensor) fail("copy_() from a " + typeName(result));
      if (!isStaticShape(ty.shape())) fail("copy_() with dynamic shapes");
      result = wholeWrite(t, castTo(result, ty.dtype()));
    } else {
      result = tensorMethod(t, base, args);
    }
    assignInPlace(t, result);
    return t;
  }
  // Anything else: PyTorch runs the method at run time.
  PyRef method = PyRef::steal(PyObject_GetAttrString(torchTensorType(), name.c_str()));
  if (!method) {
    PyErr_Clear();
    fail("tensor has no method '" + name + "'");
  }
  Args a2;
  a2.pos.push_back(t);
  a2.pos.insert(a2.pos.end(), args.pos.begin(), args.pos.end());
  a2.kw = args.kw;
  return fallbackCall(method.get(), "Tensor." + name, a2);
}

// ---------------------------------------------------------------------------------------------
// Operators

VarPtr Analyzer::tensorBinary(int nb, const VarPtr &a, const VarPtr &b, bool reflected) {
  const bool inplace = nb >= NB_INPLACE_ADD;
  const int base = inplace ? nb - NB_INPLACE_ADD : nb;
  const char *opName = nullptr;
  int kind = binaryIrOp(base, &opName);
  for (const VarPtr &v : {a, b}) {
    if (v->kind == VarKind::Tensor || v->kind == VarKind::SymInt || v->kind == VarKind::SymFloat)
      continue;
    auto *o = as<ObjectVar>(v);
    bool number = o && (PyLong_Check(o->obj.get()) || PyFloat_Check(o->obj.get()));
    if (!number)
      fail(std::string("operator ") + binaryOpName(nb) + " between a tensor and a " + typeName(v));
  }
  if (inplace) checkViewWriteOperands(a, {b});
  VarPtr r;
  if (kind == 1) {
    if (base == NB_MATRIX_MULTIPLY && (a->kind != VarKind::Tensor || b->kind != VarKind::Tensor))
      fail("@ with a non-tensor operand");
    if (base == NB_MATRIX_MULTIPLY && !inplace) {
      Args cast = autocastArgs("matmul", Args{{a, b}, {}});
      r = emit1(opName, {cast.pos[0], cast.pos[1]});
    } else if (base == NB_TRUE_DIVIDE && reflected) {
      // `number / x` is Tensor.__rtruediv__: x.reciprocal() * number (rounds twice, as eager).
      r = emit1("mul", {emit1("reciprocal", {b}), a});
    } else {
      r = emit1(opName, {a, b});
    }
  } else if (kind == 0) {
    PyRef fn = check(PyObject_GetAttrString(torchModule(), opName), opName);
    Args args;
    args.pos = {a, b};
    r = fallbackCall(fn.get(), std::string("torch.") + opName, args);
  } else {
    fail(std::string("operator ") + binaryOpName(nb) + " on tensors");
  }
  if (inplace && a->kind == VarKind::Tensor) {
    auto *ta = as<TensorVar>(a);
    DType want = ta->type().dtype(), got = as<TensorVar>(r)->type().dtype();
    if (want != got && dtypeCategory(got) > dtypeCategory(want))
      fail(std::string("in-place ") + binaryOpName(nb) + ": result type " +
           std::string(dtypeName(got)) + " can't be cast to the tensor's " +
           std::string(dtypeName(want)));
    assignInPlace(a, castTo(r, want));
    return a;
  }
  return r;
}

VarPtr Analyzer::tensorCompare(int cmp, const VarPtr &a, const VarPtr &b) {
  static const char *const ops[] = {"lt", "le", "eq", "ne", "gt", "ge"};
  if (cmp < 0 || cmp > 5) fail("internal: comparison");
  for (const VarPtr &v : {a, b}) {
    auto *o = as<ObjectVar>(v);
    if (o && o->obj.get() == Py_None && (cmp == 2 || cmp == 3)) return boolean(cmp == 3);
    if (v->kind == VarKind::Tensor || v->kind == VarKind::SymInt || v->kind == VarKind::SymFloat)
      continue;
    bool number = o && (PyLong_Check(o->obj.get()) || PyFloat_Check(o->obj.get()));
    if (!number) fail(std::string("comparison of a tensor with a ") + typeName(v));
  }
  return emit1(ops[cmp], {a, b});
}

// ---------------------------------------------------------------------------------------------
// Indexing

namespace {

struct IndexItem {
  enum Kind { Int, Slice, NewAxis, Ellipsis, Tensor } kind;
  int64_t index = 0;
  std::optional<DimExpr> symIndex; // Int: a symbolic index (x[:, start_pos]); `index` its hint
  VarPtr tensor;
  std::optional<DimExpr> start, stop; // a bound may be a symbolic size (x[:, 0:x.shape[1]])
  int64_t step = 1;
};

/// A slice bound's value where a static one is needed (specializes a symbolic one).
std::optional<int64_t> staticBound(const Analyzer &a, const std::optional<DimExpr> &b) {
  if (!b) return std::nullopt;
  if (!b->isStatic()) a.specialize(*b);
  return b->value();
}

} // namespace

static std::vector<IndexItem> parseIndex(Analyzer &a, const VarPtr &key, bool *hasAdvanced) {
  std::vector<VarPtr> keys;
  auto *tk = as<TupleVar>(key);
  if (tk && !tk->structType) {
    keys = tk->items;
  } else if (auto *o = as<ObjectVar>(key); o && PyTuple_CheckExact(o->obj.get())) {
    keys = a.sequenceItems(key, "index");
  } else {
    keys = {key};
  }
  std::vector<IndexItem> items;
  *hasAdvanced = false;
  for (const VarPtr &k : keys) {
    IndexItem it{};
    if (auto *o = as<ObjectVar>(k)) {
      PyObject *p = o->obj.get();
      if (p == Py_None) {
        it.kind = IndexItem::NewAxis;
      } else if (p == Py_Ellipsis) {
        it.kind = IndexItem::Ellipsis;
      } else if (PyBool_Check(p)) {
        a.fail("indexing a tensor with a bool");
      } else if (PyLong_Check(p)) {
        it.kind = IndexItem::Int;
        it.index = PyLong_AsLongLong(p);
      } else if (PySlice_Check(p)) {
        auto *s = reinterpret_cast<PySliceObject *>(p);
        auto bound = [&](PyObject *x) -> std::optional<int64_t> {
          if (x == Py_None) return std::nullopt;
          std::optional<int64_t> v = a.asInt(a.constant(x));
          if (!v) a.fail("slice bound of type " + std::string(Py_TYPE(x)->tp_name));
          return v;
        };
        it.kind = IndexItem::Slice;
        it.start = bound(s->start);
        it.stop = bound(s->stop);
        it.step = bound(s->step).value_or(1);
      } else if (PyTuple_Check(p) || PyList_Check(p)) {
        it.kind = IndexItem::Tensor;
        PyRef t =
            check(PyObject_CallFunction(PyObject_GetAttrString(torchModule(), "tensor"), "O", p),
                  "torch.tensor(index)");
        it.tensor = a.constantTensor(t.get());
        *hasAdvanced = true;
      } else {
        a.fail(std::string("indexing a tensor with a ") + Py_TYPE(p)->tp_name);
      }
    } else if (auto *s = as<SliceVar>(k)) {
      auto bound = [&](const VarPtr &x) -> std::optional<DimExpr> {
        auto *o = as<ObjectVar>(x);
        if (o && o->obj.get() == Py_None) return std::nullopt;
        // A symbolic size stays symbolic: the slice op takes it as an attribute evaluated at
        // run time (docs/ir.md, "Symbolic sizes"), instead of specializing the length.
        if (auto *sym = as<SymIntVar>(x); sym && !sym->expr.isStatic()) return sym->expr;
        std::optional<int64_t> v = a.asInt(x);
        if (!v) a.fail("slice bound of type " + a.typeName(x));
        return v;
      };
      it.kind = IndexItem::Slice;
      it.start = bound(s->start);
      it.stop = bound(s->stop);
      auto step = bound(s->step);
      if (step && !step->isStatic()) a.specialize(*step);
      it.step = step ? step->value() : 1;
    } else if (auto *sym = as<SymIntVar>(k)) {
      it.kind = IndexItem::Int;
      // A symbolic index at or after 0 stays symbolic (bounds guarded where it is used); one
      // below 0 at this call would wrap, which no dim expression says: specialized.
      if (!sym->expr.isStatic() && sym->hint >= 0) {
        it.symIndex = sym->expr;
        it.index = sym->hint;
      } else {
        it.index = *a.asInt(k);
      }
    } else if (auto *t = as<TensorVar>(k)) {
      DType d = t->type().dtype();
      if (d == DType::Bool || d == DType::U8)
        a.fail("boolean mask indexing (the result's shape depends on the data)");
      if (!isIntegral(d)) a.fail("indexing with a floating-point tensor");
      it.kind = IndexItem::Tensor;
      it.tensor = k;
      *hasAdvanced = true;
    } else if (k->kind == VarKind::List || k->kind == VarKind::Tuple) {
      PyRef p = a.asPython(k);
      if (!p) a.fail("indexing with a list of tensors");
      PyRef fn = check(PyObject_GetAttrString(torchModule(), "tensor"), "torch.tensor");
      PyRef t = check(PyObject_CallOneArg(fn.get(), p.get()), "torch.tensor(index)");
      it.kind = IndexItem::Tensor;
      it.tensor = a.constantTensor(t.get());
      *hasAdvanced = true;
    } else {
      a.fail("indexing a tensor with a " + a.typeName(k));
    }
    if (it.kind == IndexItem::Slice && it.step <= 0) a.fail("slice step must be positive");
    items.push_back(std::move(it));
  }
  int ellipses = 0;
  for (auto &i : items)
    ellipses += i.kind == IndexItem::Ellipsis;
  if (ellipses > 1) a.fail("an index can only have a single ellipsis");
  return items;
}

std::pair<DimExpr, DimExpr> Analyzer::sliceRange(const std::optional<DimExpr> &start,
                                                 const std::optional<DimExpr> &stop,
                                                 const DimExpr &size) {
  // On a symbolic dim, or with a symbolic bound, the IR takes the bounds as offsets within
  // [0, size] (docs/ir.md, "Symbolic sizes"): the capture assumes so on every call with
  // SizeAtMost guards, and a call where they do not hold recompiles. One that is outside at
  // this call keeps Python's clamping by specializing (the bound first, then the dim).
  // A negative bound counts from the end, as in Python (x[:, -n:]); a symbolic one stays
  // negative under a guard.
  auto wrap = [&](const DimExpr &b) {
    if (b.isStatic()) return b.value() < 0 ? size + b : b;
    if (hintOf(b) >= 0) return b;
    assumeAtMost(b, DimExpr(-1), "negative slice bound");
    return size + b;
  };
  const DimExpr s = start ? wrap(*start) : DimExpr(0);
  const DimExpr e = stop && !(stop->isStatic() && stop->value() == INT64_MAX) ? wrap(*stop) : size;
  if (start && stop && start->isStatic() && stop->isStatic() && start->value() >= 0 &&
      stop->value() >= 0 && stop->value() <= start->value())
    return {s, s}; // always empty
  if (!(0 <= hintOf(s) && hintOf(s) <= hintOf(e) && hintOf(e) <= hintOf(size))) {
    for (const auto *b : {&start, &stop})
      if (*b && !(*b)->isStatic()) specialize(**b);
    specialize(size);
  }
  assumeAtMost(DimExpr(0), s, "slice start");
  assumeAtMost(s, e, "slice bounds");
  assumeAtMost(e, size, "slice end");
  return {s, e};
}

AttrMap Analyzer::sliceAttrs(int64_t dim, const std::optional<DimExpr> &start,
                             const std::optional<DimExpr> &stop, int64_t step,
                             const DimExpr &size) {
  AttrMap a{{"dim", Attr(dim)}, {"step", Attr(step)}};
  const bool symbolicBound = (start && !start->isStatic()) || (stop && !stop->isStatic());
  // Static bounds: the IR clamps them on a static dim as Python does, and wraps negative ones
  // on a symbolic dim (where sliceRange guards them to lie within it).
  if (symbolicBound || !size.isStatic()) {
    auto [s, e] = sliceRange(start, stop, size);
    if (symbolicBound) {
      a["start"] = makeSizeAttr(s);
      if (stop) a["end"] = makeSizeAttr(e);
      return a;
    }
  }
  if (start) a["start"] = Attr(start->value());
  if (stop) a["end"] = Attr(stop->value());
  return a;
}

VarPtr Analyzer::tensorGetItem(const VarPtr &t, const VarPtr &key) {
  bool advanced = false;
  std::vector<IndexItem> items = parseIndex(*this, key, &advanced);
  int64_t rank = as<TensorVar>(t)->type().rank();
  int64_t consumed = 0;
  for (auto &i : items)
    consumed +=
        (i.kind == IndexItem::Int || i.kind == IndexItem::Slice || i.kind == IndexItem::Tensor);
  if (consumed > rank) fail("too many indices for a tensor of dimension " + std::to_string(rank));
  VarPtr r = t;
  int64_t dim = 0;
  std::vector<std::pair<int64_t, VarPtr>> adv; // (dim in r, index tensor)
  for (IndexItem &i : items) {
    switch (i.kind) {
    case IndexItem::NewAxis:
      r = emit1("unsqueeze", {r}, {{"dim", Attr(dim)}});
      ++dim;
      break;
    case IndexItem::Ellipsis: dim += rank - consumed; break;
    case IndexItem::Int: {
      const DimExpr &size = as<TensorVar>(r)->type().shape()[static_cast<size_t>(dim)];
      if (i.symIndex) { // x[:, n]: narrow at a symbolic offset, within the dim on every call
        if (advanced) specialize(*i.symIndex);
        const DimExpr at = symbolicIndexWithin(*i.symIndex, size);
        r = emit1("narrow", {r},
                  {{"dim", Attr(dim)}, {"start", makeSizeAttr(at)}, {"length", Attr(int64_t{1})}});
        r = emit1("squeeze", {r}, {{"dim", Attr(std::vector<int64_t>{dim})}});
        break;
      }
      if (size.isStatic() && (i.index >= size.value() || i.index < -size.value()))
        fail("index " + std::to_string(i.index) + " is out of bounds for dimension " +
             std::to_string(dim) + " with size " + std::to_string(size.value()));
      if (!size.isStatic()) {
        if (i.index < 0 && advanced) specialize(size);
        const DimExpr at = indexWithin(i.index, size);
        if (i.index < 0) { // from the end: a symbolic offset, as narrow's start
          r = emit1(
              "narrow", {r},
              {{"dim", Attr(dim)}, {"start", makeSizeAttr(at)}, {"length", Attr(int64_t{1})}});
          r = emit1("squeeze", {r}, {{"dim", Attr(std::vector<int64_t>{dim})}});
          break;
        }
      }
      if (advanced) { // mixed with tensors, ints are advanced indices too (numpy rules)
        PyRef idx = check(
            PyObject_CallMethod(torchModule(), "tensor", "L", static_cast<long long>(i.index)),
            "torch.tensor");
        adv.emplace_back(dim, constantTensor(idx.get()));
        ++dim;
      } else {
        r = emit1("select", {r}, {{"dim", Attr(dim)}, {"index", Attr(i.index)}});
      }
      break;
    }
    case IndexItem::Slice: {
      bool full = (!i.start || *i.start == DimExpr(0)) && !i.stop && i.step == 1;
      if (!full) {
        const DimExpr size = as<TensorVar>(r)->type().shape()[static_cast<size_t>(dim)];
        r = emit1("slice", {r}, sliceAttrs(dim, i.start, i.stop, i.step, size));
      }
      ++dim;
      break;
    }
    case IndexItem::Tensor:
      adv.emplace_back(dim, i.tensor);
      ++dim;
      break;
    }
  }
  if (!adv.empty()) {
    std::vector<VarPtr> operands{r};
    int64_t last = adv.back().first;
    size_t k = 0;
    for (int64_t d = 0; d <= last; ++d) {
      if (k < adv.size() && adv[k].first == d)
        operands.push_back(adv[k++].second);
      else
        operands.push_back(none());
    }
    r = emit1("index", operands);
  }
  if (r == t) r = emit1("alias", {t}); // x[...] / x[:] is a new view object
  return r;
}

void Analyzer::tensorSetItem(const VarPtr &t, const VarPtr &key, const VarPtr &value) {
  // `v[k] += y` stores back the view it just wrote in place (same memory: no check).
  if (auto *vt = as<TensorVar>(value); vt && vt->version == 0) checkViewWriteOperands(t, {value});
  auto *tv = as<TensorVar>(t);
  const Type &ty = tv->type();
  bool advanced = false;
  // A boolean mask with a scalar: masked_fill.
  if (auto *m = as<TensorVar>(key); m && m->type().dtype() == DType::Bool) {
    if (value->kind == VarKind::Tensor) {
      auto *vt = as<TensorVar>(value);
      if (vt->type().rank() != 0)
        fail("x[mask] = tensor (the number of written elements depends on the data)");
      assignInPlace(t, emit1("where", {key, castTo(value, ty.dtype()), t}));
      return;
    }
    PyRef v = asPython(value);
    if (!v || !(PyLong_Check(v.get()) || PyFloat_Check(v.get())))
      fail("x[mask] = " + typeName(value));
    AttrMap a;
    if (PyBool_Check(v.get()))
      a["value"] = Attr(v.get() == Py_True);
    else if (PyLong_Check(v.get()))
      a["value"] = Attr(static_cast<int64_t>(PyLong_AsLongLong(v.get())));
    else
      a["value"] = Attr(PyFloat_AsDouble(v.get()));
    assignInPlace(t, emit1("masked_fill", {t, key}, std::move(a)));
    return;
  }
  std::vector<IndexItem> items = parseIndex(*this, key, &advanced);
  int64_t rank = ty.rank(), consumed = 0;
  for (auto &i : items) {
    if (i.kind == IndexItem::NewAxis) fail("x[..., None, ...] = value");
    consumed += i.kind != IndexItem::Ellipsis;
  }
  if (consumed > rank) fail("too many indices for a tensor of dimension " + std::to_string(rank));
  // Expand the ellipsis and pad with full slices: one item per dim.
  std::vector<IndexItem> perDim;
  for (IndexItem &i : items) {
    if (i.kind == IndexItem::Ellipsis) {
      for (int64_t k = 0; k < rank - consumed; ++k)
        perDim.push_back(IndexItem{IndexItem::Slice});
    } else {
      perDim.push_back(i);
    }
  }
  while (static_cast<int64_t>(perDim.size()) < rank)
    perDim.push_back(IndexItem{IndexItem::Slice});
  auto isFull = [&](const IndexItem &i) {
    return i.kind == IndexItem::Slice && (!i.start || *i.start == DimExpr(0)) && !i.stop &&
           i.step == 1;
  };
  int64_t first = -1, last = -1;
  for (int64_t d = 0; d < rank; ++d)
    if (!isFull(perDim[static_cast<size_t>(d)])) {
      if (first < 0) first = d;
      last = d;
    }
  VarPtr v = value;
  if (v->kind != VarKind::Tensor) {
    PyRef p = asPython(v);
    if (!p || !(PyLong_Check(p.get()) || PyFloat_Check(p.get())))
      fail("tensor item assignment of a " + typeName(value));
    AttrMap a{{"shape", Attr(std::vector<int64_t>{})}, {"dtype", Attr(ty.dtype())}};
    if (PyBool_Check(p.get()))
      a["fill_value"] = Attr(p.get() == Py_True);
    else if (PyLong_Check(p.get()))
      a["fill_value"] = Attr(static_cast<int64_t>(PyLong_AsLongLong(p.get())));
    else
      a["fill_value"] = Attr(PyFloat_AsDouble(p.get()));
    if (first < 0) { // x[...] = 7 is x.fill_(7): full_like keeps x's layout, as eager's write
      // does (fuzzer seed 21701: `a[...] = 7; return a * a[..., :1]` of a permuted input came
      // back contiguous, the layout rules taking a for clone(expand(7)))
      a.erase("shape");
      a.erase("dtype");
      assignInPlace(t, markTrackedFill(emit1("full_like", {t}, std::move(a)), t));
      return;
    }
    v = emit1("full", {}, std::move(a));
  }
  v = castTo(v, ty.dtype());
  if (first < 0 && !isStaticShape(ty.shape())) { // x[:] = v of a symbolic shape
    // v broadcasts to x: its symbolic dims (at least 2, so not broadcast) equal x's.
    const Shape &vs = as<TensorVar>(v)->type().shape();
    if (vs.size() > ty.shape().size()) fail("x[:] = value of a higher rank");
    for (size_t k = 0; k < vs.size(); ++k) {
      const DimExpr &dv = vs[k], &dt = ty.shape()[ty.shape().size() - vs.size() + k];
      if (dv.isStatic() || dv == dt) continue;
      if (hintOf(dv) != hintOf(dt)) fail("x[:] = value: shape mismatch");
      assumeEqual(dv, dt, "assigned value's size");
    }
    assignInPlace(t, wholeWrite(t, v));
    return;
  }
  if (first < 0) { // x[...] = v / x[:] = v
    assignInPlace(t, wholeWrite(t, v));
    return;
  }
  // Index tensors for dims first..last: ints as 0-d tensors, tensors as given, slices as aranges
  // laid out on their own broadcast axes (outer product), so the indexed region is x[key].
  int64_t nslices = 0;
  bool anyTensor = false;
  for (int64_t d = first; d <= last; ++d) {
    nslices += perDim[static_cast<size_t>(d)].kind == IndexItem::Slice;
    anyTensor |= perDim[static_cast<size_t>(d)].kind == IndexItem::Tensor;
  }
  if (anyTensor && nslices > 0) fail("x[tensor index mixed with slices] = value");
  std::vector<VarPtr> operands{t, v};
  for (int64_t d = 0; d < first; ++d)
    operands.push_back(none());
  int64_t sliceAxis = 0;
  for (int64_t d = first; d <= last; ++d) {
    IndexItem &i = perDim[static_cast<size_t>(d)];
    const DimExpr &size = ty.shape()[static_cast<size_t>(d)];
    if (i.kind == IndexItem::Tensor) {
      operands.push_back(i.tensor);
      continue;
    }
    const bool symbolicSlice =
        i.kind == IndexItem::Slice &&
        (!size.isStatic() || (i.start && !i.start->isStatic()) || (i.stop && !i.stop->isStatic()));
    if (symbolicSlice) {
      // The slice's indices as arange(start, end, step) with symbolic bounds, within the dim
      // under the same guards as reading x[a:b].
      auto [s, e] = sliceRange(i.start, i.stop, size);
      VarPtr ar = emit1("arange", {},
                        {{"start", makeSizeAttr(s)},
                         {"end", makeSizeAttr(e)},
                         {"step", Attr(i.step)},
                         {"dtype", Attr(DType::I64)}});
      Shape shape(static_cast<size_t>(nslices), DimExpr(1));
      shape[static_cast<size_t>(sliceAxis++)] = as<TensorVar>(ar)->type().shape()[0];
      if (nslices > 1) ar = emit1("reshape", {ar}, {{"shape", makeSizeAttr(shape)}});
      operands.push_back(ar);
      continue;
    }
    if (!size.isStatic() || i.symIndex) { // a symbolic int index, or one into a symbolic dim:
                                          // as a 0-d arange element
      const DimExpr at =
          i.symIndex ? symbolicIndexWithin(*i.symIndex, size) : indexWithin(i.index, size);
      VarPtr ar = emit1("arange", {},
                        {{"start", makeSizeAttr(at)},
                         {"end", makeSizeAttr(at + DimExpr(1))},
                         {"dtype", Attr(DType::I64)}});
      operands.push_back(emit1("reshape", {ar}, {{"shape", Attr(std::vector<int64_t>{})}}));
      continue;
    }
    int64_t n = size.value();
    if (i.kind == IndexItem::Int) {
      if (i.index >= n || i.index < -n) fail("index " + std::to_string(i.index) + " out of bounds");
      AttrMap a{{"shape", Attr(std::vector<int64_t>{})},
                {"dtype", Attr(DType::I64)},
                {"fill_value", Attr(i.index < 0 ? i.index + n : i.index)}};
      operands.push_back(emit1("full", {}, std::move(a)));
      continue;
    }
    std::optional<int64_t> start0 = staticBound(*this, i.start), stop0 = staticBound(*this, i.stop);
    PyRef sl = check(PySlice_New(start0 ? PyLong_FromLongLong(*start0) : Py_NewRef(Py_None),
                                 stop0 ? PyLong_FromLongLong(*stop0) : Py_NewRef(Py_None),
                                 PyLong_FromLongLong(i.step)),
                     "slice");
    Py_ssize_t start, stop, step;
    if (PySlice_Unpack(sl.get(), &start, &stop, &step) < 0) throwPyError("slice");
    Py_ssize_t len = PySlice_AdjustIndices(n, &start, &stop, step);
    VarPtr ar = emit1("arange", {},
                      {{"start", Attr(static_cast<int64_t>(start))},
                       {"end", Attr(static_cast<int64_t>(start + len * step))},
                       {"step", Attr(static_cast<int64_t>(step))},
                       {"dtype", Attr(DType::I64)}});
    std::vector<int64_t> shape(static_cast<size_t>(nslices), 1);
    shape[static_cast<size_t>(sliceAxis++)] = len;
    if (nslices > 1) ar = emit1("reshape", {ar}, {{"shape", Attr(shape)}});
    operands.push_back(ar);
  }
  assignInPlace(t, emit1("index_put", operands));
}

// ---------------------------------------------------------------------------------------------
// In-place writes

void Analyzer::checkFunctionWrite(const Value *target) const {
  const Op *def = target->definingOp();
  if (customVjp && !(def && def->isInside(customVjp)))
    fail("in-place write inside a torch.autograd.Function to a tensor it did not make");
}

namespace {

/// Whether eager's backward of `op` (recorded by autograd) saves its tensor operand i
/// (derivatives.yaml). Products save an operand for the other's gradient; the listed math ops
/// save their inputs. Ops not named here are taken to save none (views, add, sum, cat, index
/// ops' data operands...): a write after one of those stays compiled.
bool savesOperand(const Op &op, size_t i, const std::vector<VarPtr> &operands) {
  static const std::set<std::string, std::less<>> inputs = {
      "sin",     "cos",       "tan",         "log",      "log2",  "log10",     "log1p",
      "pow",     "abs",       "sinh",        "cosh",     "asin",  "acos",      "atan",
      "erf",     "erfc",      "gelu",        "silu",     "mish",  "softplus",  "leaky_relu",
      "elu",     "hardswish", "hardsigmoid", "hardtanh", "relu6", "clamp",     "logit",
      "atan2",   "maximum",   "minimum",     "amax",     "amin",  "max",       "min",
      "var",     "std",       "prod",        "cumprod",  "norm",  "logsumexp", "addcmul",
      "addcdiv", "lerp",      "hypot"};
  // Input and weight (a batch norm's running statistics are not saved: it writes them).
  static const std::set<std::string, std::less<>> inputAndWeight = {
      "layer_norm", "rms_norm", "group_norm", "batch_norm", "batch_norm_with_update",
      "conv1d",     "conv2d",   "conv3d"};
  const std::string &name = op.name();
  auto otherRequiresGrad = [&](size_t j) {
    auto *t = j < operands.size() ? as<TensorVar>(operands[j]) : nullptr;
    return t && t->requiresGrad;
  };
  if (name == "mul" || name == "matmul" || name == "mm" || name == "bmm" || name == "dot")
    return i < 2 && otherRequiresGrad(1 - i);
  if (name == "div") return i == 1 || otherRequiresGrad(1);
  if (name == "linear") return i < 2 && otherRequiresGrad(1 - i);
  if (name == "addmm" || name == "baddbmm") return (i == 1 || i == 2) && otherRequiresGrad(3 - i);
  if (name == "custom_vjp") {
    const Attr *n = op.attrOrNull("name");
    return !(n && n->kind() == AttrKind::Str && n->asStr() == "xjit.no_grad_write");
  }
  if (inputAndWeight.count(name)) return i < 2;
  if (name == "scaled_dot_product_attention") return i < 3; // query, key, value
  return inputs.count(name) != 0;
}

} // namespace

void Analyzer::noteSavedReads(const Op &op, const std::vector<VarPtr> &operands) {
  for (size_t i = 0; i < operands.size(); ++i)
    if (auto *t = as<TensorVar>(operands[i]); t && savesOperand(op, i, operands)) {
      t->savedBy.emplace_back(&op, &op.def());
      if (t->base) t->base->savedBy.emplace_back(&op, &op.def());
    }
}

namespace {

/// Ops whose eager backward reads their result (derivatives.yaml's `result`): autograd
/// raises at backward when that result was written in place with grad enabled.
bool resultSaved(const Value *v) {
  static const std::set<std::string, std::less<>> ops = {
      "exp",   "exp2",       "expm1",     "tanh", "sigmoid", "relu", "sqrt",
      "rsqrt", "reciprocal", "softmax",   "tan",  "elu",     "amax", "amin",
      "max",   "min",        "logsumexp", "prod", "cumprod", "norm", "log_softmax"};
  return v->definingOp() && ops.count(v->definingOp()->name());
}

} // namespace

/// A write with grad enabled to such a result, or any write to a tensor an earlier op saved:
/// eager's backward raises; the step runs in Python, where it does. `data` is the new value:
/// the in-place op's own read (`h.mul_(w)`) is no earlier one (eager saves a copy for it).
void Analyzer::checkWriteKeepsSavedResult(TensorVar &t, const Value *data) const {
  if (gradEnabled_ && t.requiresGrad && resultSaved(t.value))
    fail("in-place write to the result of '" + t.value->definingOp()->name() +
         "', which its backward reads (eager's backward raises)");
  for (const auto &[op, def] : t.savedBy)
    if (op != data->definingOp())
      fail("in-place write to a tensor that '" + def->name +
           "' saved for its backward (eager's backward raises)");
  t.savedBy.clear(); // (what the write's own op read: a copy in eager)
}

void Analyzer::assignInPlace(const VarPtr &target, const VarPtr &newValue) {
  auto *t = as<TensorVar>(target);
  auto *n = as<TensorVar>(newValue);
  if (!t || !n) throw BreakError("internal: in-place write of a non-tensor", currentLoc(), true);
  if (t->base) return assignThroughView(target, newValue);
  checkFunctionWrite(t->value);
  checkWriteKeepsSavedResult(*t, n->value);
  if (t->viewOverlaps) fail("in-place write to an expanded input (its elements share memory)");
  if (t->isInput && t->requiresGrad && gradEnabled_)
    fail("in-place write to a leaf tensor that requires grad");
  if (t->isInput)
    if (const TensorVar *u = inputOverlap(*t, true))
      fail("in-place write to " + sourceKey(*t->source) + ", which shares memory with " +
           sourceKey(*u->source) + " (read or written by the graph)");
  if (n->type().shape() != t->type().shape())
    fail("in-place result of shape " + shapeStr(n->type().shape()) +
         " doesn't match the tensor's shape " + shapeStr(t->type().shape()));
  VarPtr nv = castTo(newValue, t->type().dtype());
  Value *data = as<TensorVar>(nv)->value;
  // (An input that requires grad is written here under no_grad only: refused above otherwise.)
  const bool noGradWrite = t->requiresGrad && !gradEnabled_ && gradEnabledAtEntry_;
  t->value = noGradWrite ? writtenWithoutGrad(*t, data) : data;
  t->leafData = noGradWrite ? data : nullptr;
  // An in-place op autograd records makes its target require grad (`out[:, t] = h` into zeros).
  if (gradEnabled_ && as<TensorVar>(nv)->requiresGrad) t->requiresGrad = true;
  t->version++;
  t->mutated = true;
}

namespace {

/// Ops whose eager backward never saves their result: a tensor they made may be written in
/// place under no_grad and still be differentiated (the others, e.g. tanh, sigmoid, exp,
/// relu, softmax, save it, and eager's backward refuses it changed).
bool resultUnsaved(const Op *def) {
  static const std::set<std::string, std::less<>> ops = {
      "add",       "sub",        "mul",    "div",     "neg",    "matmul",      "mm",
      "bmm",       "linear",     "addmm",  "baddbmm", "cat",    "stack",       "clone",
      "cast",      "to_copy",    "sum",    "mean",    "where",  "masked_fill", "index_put",
      "embedding", "layer_norm", "conv1d", "conv2d",  "conv3d", "custom_vjp"};
  return def && ops.count(def->name()) &&
         (def->name() != "custom_vjp" || def->attr("name").asStr() == "xjit.no_grad_write");
}

} // namespace

Value *Analyzer::writtenWithoutGrad(TensorVar &t, Value *data) {
  // Eager changes the tensor's data in place (its version counter too) without recording it:
  // what reads the tensor afterwards still sends its gradient where the tensor's own went (a
  // leaf's .grad: `w.clamp_(-1, 1)` before the forward, an EMA of weights; a computed tensor's
  // producer). An op that read it with grad before, or its producer, may have saved the old
  // data, which eager's backward then refuses: not compiled. Reads under no_grad go through
  // aliases autodiff stops at (emit's stopOperands).
  if (t.readWithGrad)
    fail("an in-place write under torch.no_grad() to a tensor that requires grad, after the "
         "step read it with grad (eager's backward may refuse the changed tensor)");
  if (!t.isInput && !resultUnsaved(t.value->definingOp()))
    fail("an in-place write under torch.no_grad() to a tensor that requires grad, made by '" +
         (t.value->definingOp() ? t.value->definingOp()->name() : std::string("?")) +
         "' (eager's backward may read its old value)");
  // custom_vjp(tensor, data): data forward; backward, the gradient to the tensor as it was
  // (data gets none).
  const Type &type = data->type();
  Op *op = builder_.createWithTypes("custom_vjp", {t.value, data}, {type},
                                    {{"name", Attr(std::string("xjit.no_grad_write"))}});
  Block *fwd = op->region(0);
  fwd->addArgument(type, "tensor");
  Value *forwardData = fwd->addArgument(type, "data");
  Builder(fwd).createWithTypes("yield", {forwardData}, {});
  Block *bwd = op->region(1);
  Value *grad = bwd->addArgument(type, "grad");
  Builder back(bwd);
  Value *none = back.createWithTypes("constant", {}, {Type::none()})->result(0);
  back.createWithTypes("yield", {grad, none}, {});
  return op->result(0);
}

void Analyzer::assignThroughView(const VarPtr &target, const VarPtr &newValue) {
  // The view's new value is written into its base (functionalized): index_put at the base's
  // flat positions of the view's elements (an arange of the base's shape taken through the
  // view's ops), so the base, and every other view of it when read next, see the write.
  auto *t = as<TensorVar>(target);
  auto *n = as<TensorVar>(newValue);
  touchView(target);
  if (t->noGradView && gradEnabled_)
    fail("in-place write with grad enabled to a view made under torch.no_grad() of a tensor "
         "that requires grad (eager raises)");
  if (!t->viewOpaque.empty()) fail("in-place write through a view (" + t->viewOpaque + ")");
  if (t->viewOverlaps) fail("in-place write to an expanded view (its elements share memory)");
  const std::shared_ptr<TensorVar> root = t->base;
  checkFunctionWrite(root->value);
  checkWriteKeepsSavedResult(*root, n->value);
  if (t->viewAssumesContiguousBase) root->stridesRead = true;
  if (root->isInput && root->requiresGrad && gradEnabled_)
    fail("in-place write to a view of a leaf tensor that requires grad");
  if (n->type().shape() != t->type().shape())
    fail("in-place result of shape " + shapeStr(n->type().shape()) +
         " doesn't match the tensor's shape " + shapeStr(t->type().shape()));
  VarPtr nv = castTo(newValue, t->type().dtype());
  const Shape rootShape = root->type().shape();
  auto flat = [&](const VarPtr &v) {
    return emit1("reshape", {v},
                 {{"shape", makeSizeAttr(Shape{numelOf(as<TensorVar>(v)->type().shape())})}});
  };
  VarPtr idx = emit1("arange", {},
                     {{"start", Attr(int64_t{0})},
                      {"end", makeSizeAttr(numelOf(rootShape))},
                      {"dtype", Attr(DType::I64)}});
  idx = replayView(*t, emit1("reshape", {idx}, {{"shape", makeSizeAttr(rootShape)}}));
  VarPtr written = emit1("index_put", {flat(root), flat(nv), flat(idx)});
  assignInPlace(root, emit1("reshape", {written}, {{"shape", makeSizeAttr(rootShape)}}));
  t->value = as<TensorVar>(nv)->value;
  if (gradEnabled_ && as<TensorVar>(nv)->requiresGrad) t->requiresGrad = true;
  t->version++;
  t->baseVersion = root->version;
}

// ---------------------------------------------------------------------------------------------
// PyTorch fallback

VarPtr Analyzer::fallbackCall(PyObject *fn, const std::string &name, const Args &args,
                              const std::vector<Type> *resultTypes) {
  std::vector<VarPtr> operands;
  std::vector<PyRef> metaArgs;
  bool anyTensor = false;
  std::function<ArgTemplate(const VarPtr &)> build = [&](const VarPtr &v) -> ArgTemplate {
    ArgTemplate t;
    if (auto *tv = as<TensorVar>(v)) {
      touchView(v);
      const Type &ty = tv->type();
      if (!isStaticShape(ty.shape()) && !resultTypes)
        fail("PyTorch fallback " + name + " on a tensor with dynamic shape");
      std::vector<int64_t> sizes;
      for (const DimExpr &d : ty.shape())
        sizes.push_back(d.isStatic() ? d.value() : hintOf(d));
      t.kind = ArgTemplate::Operand;
      t.operand = static_cast<int64_t>(operands.size());
      operands.push_back(v);
      metaArgs.push_back(metaTensor(ty.dtype(), sizes));
      anyTensor = true;
      return t;
    }
    if (auto *s = as<SymIntVar>(v)) {
      t.kind = ArgTemplate::Operand;
      t.operand = static_cast<int64_t>(operands.size());
      operands.push_back(v);
      metaArgs.push_back(check(PyLong_FromLongLong(s->hint), "int"));
      return t;
    }
    if (v->kind == VarKind::Tuple || v->kind == VarKind::List) {
      t.kind = v->kind == VarKind::Tuple ? ArgTemplate::Tuple : ArgTemplate::List;
      for (const VarPtr &i : sequenceItems(v, "argument"))
        t.items.push_back(build(i));
      return t;
    }
    PyRef p = asPython(v);
    if (!p || v->kind == VarKind::Module)
      fail("PyTorch fallback " + name + " with a " + typeName(v) + " argument");
    // The meta run below would consume it (`AdamW(model.parameters())`: the break code then
    // made the optimizer of an exhausted generator, "empty parameter list").
    if (PyIter_Check(p.get()))
      fail("PyTorch fallback " + name + " with an iterator argument (" + Py_TYPE(p.get())->tp_name +
           ")");
    t.kind = ArgTemplate::Constant;
    t.constant = p;
    return t;
  };
  std::vector<ArgTemplate> pos;
  std::vector<std::pair<std::string, ArgTemplate>> kw;
  for (const VarPtr &v : args.pos)
    pos.push_back(build(v));
  for (auto &[k, v] : args.kw) {
    if (k == "out") fail(name + "(out=...)");
    kw.emplace_back(k, build(v));
  }
  // Its output types come from a run on meta tensors, which autocast leaves alone, and at run
  // time it runs under the entry's autocast state, not a `with` block's.
  if (!resultTypes && (autocast_.enabled || entryAutocast_.enabled) &&
      std::any_of(operands.begin(), operands.end(), [](const VarPtr &v) {
        auto *t = as<TensorVar>(v);
        return t && isFloating(t->type().dtype());
      }))
    fail("PyTorch fallback " + name + " under torch.autocast");
  PyRef callable = makeFallbackCallable(fn, pos, kw);

  // Output metadata: run the call on meta tensors (random functions with only constant
  // arguments would draw from the generator: its state is restored).
  PyRef metaTuple = check(PyTuple_New(static_cast<Py_ssize_t>(metaArgs.size())), "tuple");
  for (size_t i = 0; i < metaArgs.size(); ++i)
    PyTuple_SET_ITEM(metaTuple.get(), static_cast<Py_ssize_t>(i), Py_NewRef(metaArgs[i].get()));
  PyObject *res;
  {
    KeepRngState keep(!anyTensor);
    res = PyObject_Call(callable.get(), metaTuple.get(), nullptr);
  }
  if (!res) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    std::string msg;
    if (value) {
      PyObject *s = PyObject_Str(value);
      if (s) msg = utf8(s);
      Py_XDECREF(s);
    }
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    PyErr_Clear();
    if (msg.size() > 200) msg = msg.substr(0, 200) + "...";
    fail("PyTorch fallback " + name + " cannot run on meta tensors: " + msg);
  }
  PyRef result = PyRef::steal(res);
  std::vector<PyObject *> outs;
  std::vector<Py_ssize_t> nones; // None items of a tuple result (beside tensors)
  bool seq = PyTuple_Check(result.get()) || PyList_Check(result.get());
  if (seq) {
    for (Py_ssize_t i = 0; i < PySequence_Size(result.get()); ++i) {
      PyObject *item = PySequence_Fast_GET_ITEM(result.get(), i);
      if (item == Py_None && PyTuple_Check(result.get()))
        nones.push_back(i);
      else
        outs.push_back(item);
    }
    if (!nones.empty() && outs.empty()) fail("PyTorch fallback " + name + " returns only None");
    if (!nones.empty()) callable = dropNones(callable.get(), nones);
  } else {
    outs.push_back(result.get());
  }
  Device device;
  for (const VarPtr &o : operands)
    if (auto *tv = as<TensorVar>(o)) {
      device = tv->type().device();
      break;
    }
  std::vector<Type> types;
  for (PyObject *o : outs) {
    std::string why;
    if (!isTensor(o))
      fail("PyTorch fallback " + name + " returns a " + Py_TYPE(o)->tp_name + ", not tensors");
    std::optional<TensorMeta> m = readTensorMeta(o, &why);
    if (!m) fail("PyTorch fallback " + name + " returns a " + why);
    Shape shape;
    for (int64_t s : m->sizes)
      shape.emplace_back(s);
    types.push_back(Type::tensor(m->dtype, shape, device));
  }
  if (resultTypes) {
    if (resultTypes->size() != types.size())
      fail("internal: PyTorch fallback " + name + " returns " + std::to_string(types.size()) +
           " tensors, not " + std::to_string(resultTypes->size()));
    for (size_t i = 0; i < types.size(); ++i)
      if ((*resultTypes)[i].dtype() != types[i].dtype() ||
          (*resultTypes)[i].rank() != types[i].rank())
        fail("internal: PyTorch fallback " + name + " returns " + types[i].str() + ", not " +
             (*resultTypes)[i].str());
    types = *resultTypes;
  }
  // Under torch.no_grad() in a training step, a call that writes nothing (no trailing `_`)
  // reads its operands that require grad through an autodiff.stop alias, as emit's pure ops
  // do: its result carries no gradient, as in eager (a fallback `as_strided` view of a weight).
  const size_t dot = name.rfind('.');
  const std::string callee = dot == std::string::npos ? name : name.substr(dot + 1);
  const bool writes = callee.size() > 1 && callee.back() == '_' && !callee.starts_with("__");
  const bool stopOperands =
      gradEnabledAtEntry_ && !gradEnabled_ && !writes && anyRequiresGrad(operands);
  std::vector<Value *> vals;
  for (const VarPtr &o : operands) {
    Value *x = irValue(o);
    if (auto *tv = as<TensorVar>(o); stopOperands && tv && tv->requiresGrad)
      x = builder_.create("alias", {x}, {{"autodiff.stop", Attr(true)}})->result(0);
    vals.push_back(x);
  }
  // A call reading its operand's storage past the view (as_strided) sees the storage of the
  // tensor the view was made from; where the graph holds the view as a value of its own (a write
  // through it, functionalized: `v = a.split(2)[-1]; v.mul_(v)`), it has no such storage to give
  // (fuzzer seed 134091: the call read the written rows alone): the call runs after a break.
  if (readsStorageCallee(callee))
    for (size_t k = 0; k < operands.size(); ++k)
      if (auto *tv = as<TensorVar>(operands[k]); tv && tv->base)
        if (!viewsInGraph(vals[k], irValue(tv->base)))
          fail("PyTorch fallback " + name +
               " reads the storage of a view that the compiled graph holds apart from the tensor "
               "it views (written through it)");
  // `callee` indexes Capture::fallbackCallables; the driver registers the callables.
  auto id = static_cast<int64_t>(fallbacks_.size());
  fallbacks_.push_back(callable);
  Op *op = builder_.createWithTypes("external_call", vals, types,
                                    {{"callee", Attr(id)}, {"name", Attr(name)}});
  bool rg = gradEnabled_ && anyRequiresGrad(operands);
  recordedForAutograd_ = recordedForAutograd_ || rg;
  if (rg) noteReadWithGrad(operands);
  cutsGradient_ = cutsGradient_ || (!gradEnabled_ && !stopOperands && anyRequiresGrad(operands));
  std::vector<VarPtr> rs;
  for (size_t i = 0; i < op->numResults(); ++i) {
    rs.push_back(wrapIr(op->result(i), rg));
    // A view PyTorch makes (as_strided, unfold...): the result aliases its operand, through
    // strides the analyzer does not follow; writes through it and reads after its base's writes
    // are graph breaks.
    PyRef viewBase = PyRef::steal(PyObject_GetAttrString(outs[i], "_base"));
    if (!viewBase) PyErr_Clear();
    for (size_t k = 0; viewBase && viewBase.get() != Py_None && k < metaArgs.size(); ++k) {
      auto *src = as<TensorVar>(operands[k]);
      if (!src || metaArgs[k].get() != viewBase.get()) continue;
      auto *rt = as<TensorVar>(rs.back());
      rt->base = src->base ? src->base : std::static_pointer_cast<TensorVar>(operands[k]);
      rt->baseVersion = rt->base->version;
      rt->viewOpaque = "a view made by PyTorch fallback " + name;
      rt->noGradView = src->noGradView || stopOperands;
      // Of its only operand, the base or a view that replays: the call replays too (on the
      // caller's tensor, after the graph; fuzzer seed 12424: a1.as_strided(...) of a written
      // input, written after a graph break, must write a1).
      if (operands.size() == 1 && (!src->base || src->viewOpaque.empty() || src->viewReplays)) {
        rt->viewSteps = src->base ? src->viewSteps : std::vector<ViewStep>{};
        rt->viewSteps.push_back(
            ViewStep{"external_call", {}, {std::make_shared<ObjectVar>(callable)}, i});
        rt->viewReplays = true;
      }
      break;
    }
  }
  if (!seq) return rs[0];
  for (Py_ssize_t i : nones)
    rs.insert(rs.begin() + i, none());
  if (PyList_Check(result.get())) return std::make_shared<ListVar>(std::move(rs));
  PyRef type = PyTuple_CheckExact(result.get())
                   ? PyRef()
                   : PyRef::borrow(reinterpret_cast<PyObject *>(Py_TYPE(result.get())));
  return std::make_shared<TupleVar>(std::move(rs), type);
}

} // namespace xjit::frontend
