#include "eager.h"

#include "events.h"
#include "output_layout.h"
#include "py_util.h"
#include "tensor_bridge.h"

#include "xjit/ir/builder.h"
#include "xjit/ir/interpreter.h"
#include "xjit/ir/op_registry.h"
#include "xjit/ir/sym_attr.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <unordered_set>

namespace xjit::frontend {

const EagerModule &eagerModule() {
  static EagerModule m = [] {
    EagerModule r;
    PyRef mod = checked(PyImport_ImportModule("xjit._eager"));
    auto get = [&](const char *name) {
      return checked(PyObject_GetAttrString(mod.get(), name)).release();
    };
    r.runOp = get("run_op");
    r.compareOp = get("compare_op");
    r.runOpMeta = get("run_op_meta");
    r.toMeta = get("to_meta");
    r.emptyMeta = get("empty_meta");
    r.layoutOf = get("layout_of");
    r.relayout = get("relayout");
    r.metaStrided = get("meta_strided");
    return r;
  }();
  return m;
}

namespace {

PyRef attrToPython(const Attr &a) {
  switch (a.kind()) {
  case AttrKind::Int: return checked(PyLong_FromLongLong(a.asInt()));
  case AttrKind::Float: return checked(PyFloat_FromDouble(a.asFloat()));
  case AttrKind::Bool: return PyRef::borrow(a.asBool() ? Py_True : Py_False);
  case AttrKind::Str: return checked(PyUnicode_FromString(a.asStr().c_str()));
  case AttrKind::Ints: {
    PyRef l = checked(PyList_New(static_cast<Py_ssize_t>(a.asInts().size())));
    for (size_t i = 0; i < a.asInts().size(); ++i)
      PyList_SET_ITEM(l.get(), Py_ssize_t(i),
                      checked(PyLong_FromLongLong(a.asInts()[i])).release());
    return l;
  }
  case AttrKind::Floats: {
    PyRef l = checked(PyList_New(static_cast<Py_ssize_t>(a.asFloats().size())));
    for (size_t i = 0; i < a.asFloats().size(); ++i)
      PyList_SET_ITEM(l.get(), Py_ssize_t(i),
                      checked(PyFloat_FromDouble(a.asFloats()[i])).release());
    return l;
  }
  case AttrKind::DType:
    return checked(PyUnicode_FromString(std::string(dtypeName(a.asDType())).c_str()));
  case AttrKind::Type: return checked(PyUnicode_FromString(a.asType().str().c_str()));
  case AttrKind::Tensor: return checked(PyUnicode_FromString(a.str().c_str()));
  }
  return PyRef::borrow(Py_None);
}

/// Runs one op (without regions) in the reference interpreter on the given operands: a graph
/// holding only that op, its inputs typed as the op's operands.
std::vector<PyRef> interpretOp(const Op &op, const std::vector<PyRef> &operands) {
  Graph g("op");
  std::vector<Value *> ins;
  std::vector<RtValue> values;
  for (size_t i = 0; i < op.numOperands(); ++i) {
    const Type &t = op.operand(i)->type();
    ins.push_back(g.addInput(t));
    values.push_back(toRtValue(operands[i].get(), &t));
  }
  std::vector<Type> types;
  for (const auto &r : op.results())
    types.push_back(r->type());
  Builder b(g.body());
  Op *copy = b.createWithTypes(op.name(), ins, types, op.attrs());
  copy->setLoc(op.loc());
  std::vector<Value *> outs;
  for (const auto &r : copy->results())
    outs.push_back(r.get());
  b.createWithTypes("return", outs, {});
  std::vector<RtValue> results = interpret(g, std::move(values));
  std::vector<PyRef> out;
  for (const RtValue &v : results)
    out.push_back(fromRtValue(v));
  return out;
}

PyRef listOf(const std::vector<PyRef> &items) {
  PyRef l = checked(PyList_New(static_cast<Py_ssize_t>(items.size())));
  for (size_t i = 0; i < items.size(); ++i)
    PyList_SET_ITEM(l.get(), Py_ssize_t(i), PyRef(items[i]).release());
  return l;
}

/// A Python result of an op with `n` results -> its values.
std::vector<PyRef> splitResults(PyRef r, size_t n, const Op &op) {
  // unbind/chunk/split into one piece: PyTorch gives a 1-tuple, the graph one tensor (an LSTM's
  // initial state of one layer and direction).
  if (n == 1 && op.result(0)->type().isTensor() && PyTuple_Check(r.get()) &&
      PyTuple_GET_SIZE(r.get()) == 1)
    return {PyRef::borrow(PyTuple_GET_ITEM(r.get(), 0))};
  if (n == 1) return {std::move(r)};
  PyRef seq = checked(PySequence_Fast(r.get(), "an op with several results"));
  if (static_cast<size_t>(PySequence_Fast_GET_SIZE(seq.get())) != n)
    throw std::runtime_error("eager: " + op.describe() + " gave " +
                             std::to_string(PySequence_Fast_GET_SIZE(seq.get())) +
                             " results, the graph expects " + std::to_string(n));
  std::vector<PyRef> out;
  for (size_t i = 0; i < n; ++i)
    out.push_back(PyRef::borrow(PySequence_Fast_GET_ITEM(seq.get(), Py_ssize_t(i))));
  return out;
}


/// "'gelu' at model.py:12 (forward)": the op and the user's line it came from.
std::string where(const Op &op) {
  return "'" + op.name() + "' at " + (op.loc().known() ? shortLoc(op.loc()) : "<unknown>");
}

struct Walker {
  const ExternalCallables &externals;
  bool check = false;
  bool meta = false;                         // runMeta: meta tensors, layouts only
  std::unordered_set<const Value *> unknown; // meta: values whose layout is not known
  std::string eagerRaises; // meta: the first op eager raises at (a view of the wrong strides)
  std::map<const Op *, PyRef> *laidOut = nullptr; // meta: runMeta's `laidOut`
  std::string firstDifference; // check: set at the first op that differs, then the walk stops
  std::unordered_map<const Value *, PyRef> values;
  // Shape symbols bound by the graph inputs, for ops with symbolic sizes (computed on first use).
  const Block *body = nullptr;
  std::vector<PyRef> inputs;
  std::optional<SymbolBindings> symbols;

  const SymbolBindings &boundSymbols() {
    if (!symbols) {
      symbols.emplace();
      for (size_t i = 0; body && i < body->numArguments() && i < inputs.size(); ++i) {
        const Type &t = body->argument(i)->type();
        if (!t.isTensor() || !isPlainTensor(inputs[i].get())) continue;
        RtValue v = toRtValue(inputs[i].get(), &t);
        if (v.isTensor() && v.tensor().rank() == t.rank())
          bindShapeSymbols(t.shape(), v.tensor().sizes(), *symbols);
      }
    }
    return *symbols;
  }

  PyRef get(const Value *v) const {
    auto it = values.find(v);
    if (it == values.end()) throw std::runtime_error("eager: a value used before it is defined");
    return it->second;
  }

  /// Runs a block's ops with `args` bound to its arguments; returns the terminator's operands
  /// (empty when the check stopped the walk).
  std::vector<PyRef> runBlock(const Block &b, const std::vector<PyRef> &args) {
    if (!b.parentOp() && !body) {
      body = &b;
      inputs = args;
    }
    for (size_t i = 0; i < b.numArguments() && i < args.size(); ++i)
      values[b.argument(i)] = args[i];
    std::vector<std::vector<const Value *>> dropAfter = lastUses(b);
    size_t index = 0;
    for (Op *op : b) {
      if (op->def().has(kTerminator)) {
        std::vector<PyRef> out;
        for (Value *v : op->operands())
          out.push_back(get(v));
        return out;
      }
      runOp(*op);
      if (!firstDifference.empty()) return {};
      for (const Value *v : dropAfter[index++])
        values.erase(v);
    }
    throw std::runtime_error("eager: a block without a terminator");
  }

  /// For each op of `b`, the values of `b` (its arguments and results) whose last use is that
  /// op or one nested in it: dropped after it runs, so that intermediates are freed as in eager
  /// rather than held to the end of the graph.
  static std::vector<std::vector<const Value *>> lastUses(const Block &b) {
    std::unordered_map<const Op *, size_t> position;
    for (Op *op : b)
      position.emplace(op, position.size());
    std::vector<std::vector<const Value *>> drop(position.size());
    // The meta walk gives a write of x (through a view or whole: writtenInPlace) x's tensor: x
    // lives until that op, though the op reads it only through the write's ops.
    std::unordered_map<const Value *, size_t> writtenAt;
    for (Op *op : b)
      if (const Value *x = writtenInPlace(*op)) writtenAt[x] = position.at(op);
    auto plan = [&](const Value *v) {
      size_t last = 0;
      if (auto it = writtenAt.find(v); it != writtenAt.end()) last = it->second;
      for (const Use &u : v->uses()) {
        const Op *user = u.user;
        while (user && user->parentBlock() != &b)
          user = user->parentOp();
        if (!user) return; // used outside this block: kept
        last = std::max(last, position.at(user));
      }
      if (v->hasUses()) drop[last].push_back(v);
    };
    for (size_t i = 0; i < b.numArguments(); ++i)
      plan(b.argument(i));
    for (Op *op : b)
      for (size_t i = 0; i < op->numResults(); ++i)
        plan(op->result(i));
    return drop;
  }

  void bind(const Op &op, const std::vector<PyRef> &results) {
    for (size_t i = 0; i < op.numResults(); ++i)
      values[op.result(i)] = results.at(i);
  }

  void runOp(const Op &op) {
    if (meta) {
      runOpMeta(op);
      return;
    }
    runOpWith(op, eagerModule().runOp);
  }

  /// meta: the op on meta tensors; where it cannot run, its results are contiguous meta
  /// tensors of its result types when that is what eager makes, else unknown.
  void runOpMeta(const Op &op) {
    if (const Value *x = writtenInPlace(op); x && !unknown.count(x)) {
      bind(op, {get(x)}); // a write of x: eager writes x in place
      return;
    }
    bool operandsKnown = true;
    for (Value *v : op.operands())
      operandsKnown = operandsKnown && !unknown.count(v);
    if (operandsKnown) {
      if (laidOut && op.name() == "external_call") {
        if (const Attr *k = op.attrOrNull("layout_of"); k && k->asInt() >= 0)
          if (size_t(k->asInt()) < op.numOperands())
            (*laidOut)[&op] = get(op.operand(size_t(k->asInt())));
        if (readsStorage(op) && op.numOperands() > 0 && op.operand(0)->type().isTensor())
          (*laidOut)[&op] = get(op.operand(0));
      }
      try {
        runOpWith(op, eagerModule().runOpMeta);
        return;
      } catch (const PyErrorSet &) {
        if (interruptPending()) throw;
        std::string message = takePyErrorMessage();
        if (op.name() == "view" && eagerRaises.empty()) eagerRaises = where(op) + ": " + message;
      } catch (const std::exception &) {
        PyErr_Clear();
      }
    }
    if (op.def().has(kInPlace) && !unknown.count(op.operand(0)) && op.numResults() == 1) {
      bind(op, {get(op.operand(0))}); // writes operand 0 and returns it: its layout
      return;
    }
    // (A PyTorch fallback may return a view, as_strided or unfold: no assumption for it.)
    if (!op.def().has(kView) && op.numRegions() == 0 && op.name() != "external_call" &&
        contiguousOperands(op)) {
      std::vector<PyRef> results;
      for (const auto &r : op.results()) {
        PyRef m = emptyMetaOf(r->type());
        if (!m) break;
        results.push_back(std::move(m));
      }
      if (results.size() == op.numResults()) {
        bind(op, results);
        return;
      }
    }
    for (const auto &r : op.results()) {
      unknown.insert(r.get());
      values[r.get()] = PyRef::borrow(Py_None);
    }
  }

  /// Every tensor operand is known and contiguous (other operands are known).
  bool contiguousOperands(const Op &op) {
    static PyObject *isContiguousName = internedStr("is_contiguous");
    for (Value *v : op.operands()) {
      if (unknown.count(v)) return false;
      if (!v->type().isTensor()) continue;
      PyRef r = checked(PyObject_CallMethodNoArgs(get(v).get(), isContiguousName));
      if (r.get() != Py_True) return false;
    }
    return true;
  }

  /// A contiguous meta tensor of type `t` (its sizes evaluated from the inputs' symbols);
  /// null for a non-tensor or a size the inputs do not determine.
  PyRef emptyMetaOf(const Type &t) {
    if (!t.isTensor()) return {};
    PyRef sizes = checked(PyList_New(0));
    for (const DimExpr &d : t.shape()) {
      std::optional<int64_t> n = d.evaluate(boundSymbols());
      if (!n) return {};
      if (PyList_Append(sizes.get(), checked(PyLong_FromLongLong(*n)).get()) != 0)
        throw PyErrorSet();
    }
    PyRef dt = checked(PyUnicode_FromString(std::string(dtypeName(t.dtype())).c_str()));
    return checked(
        PyObject_CallFunctionObjArgs(eagerModule().emptyMeta, sizes.get(), dt.get(), nullptr));
  }

  void runOpWith(const Op &op, PyObject *runOpFn) {
    std::vector<PyRef> operands;
    for (Value *v : op.operands())
      operands.push_back(get(v));
    const std::string &name = op.name();
    if (name == "if") {
      const int truth = PyObject_IsTrue(operands[0].get());
      if (truth < 0) throw PyErrorSet();
      std::vector<PyRef> r = runBlock(*op.region(truth ? 0 : 1), {});
      if (firstDifference.empty()) bind(op, r);
      return;
    }
    if (name == "fusion") {
      std::vector<PyRef> r = runBlock(*op.region(0), operands);
      if (firstDifference.empty()) bind(op, r);
      return;
    }
    if (name == "custom_vjp") { // a Function's forward (its saved values dropped)
      std::vector<PyRef> r = runBlock(*op.region(0), operands);
      if (!firstDifference.empty()) return;
      r.resize(op.numResults());
      bind(op, r);
      return;
    }
    if (op.numRegions() > 0)
      throw std::runtime_error("eager: " + op.describe() +
                               " (an op with regions) is not supported");
    if (name == "external_call") {
      auto it = externals.find(op.attr("callee").asInt());
      if (it == externals.end())
        throw std::runtime_error("eager: " + op.describe() + " has no PyTorch callable");
      PyRef args = checked(PyList_AsTuple(listOf(operands).get()));
      std::vector<PyRef> r = splitResults(
          checked(PyObject_Call(it->second.get(), args.get(), nullptr)), op.numResults(), op);
      // Fallbacks whose CPU kernels allocate a fresh contiguous result where their meta
      // decompositions follow the operand's layout (one_hot: zeros, then scatter; fuzzer
      // seeds 25764, 25842, a permuted operand).
      static const std::set<std::string, std::less<>> contiguousOnCpu = {"torch._C._nn.one_hot"};
      const Attr *callee = op.attrOrNull("name");
      if (meta && callee && callee->kind() == AttrKind::Str &&
          contiguousOnCpu.count(callee->asStr())) {
        static PyObject *contiguousName = internedStr("contiguous");
        for (PyRef &v : r)
          if (isPlainTensor(v.get()))
            v = checked(PyObject_CallMethodNoArgs(v.get(), contiguousName));
      }
      bind(op, r);
      return;
    }
    // Sizes over shape symbols (docs/ir.md): the op runs with them evaluated from the inputs.
    std::unique_ptr<ResolvedOp> resolved;
    if (hasSymbolicSizes(op)) resolved = std::make_unique<ResolvedOp>(op, boundSymbols());
    const Op &run = resolved ? resolved->op() : op;
    if (op.def().has(kConstantLike)) {
      std::vector<PyRef> r = interpretOp(run, operands);
      if (meta)
        for (PyRef &v : r)
          v = checked(PyObject_CallOneArg(eagerModule().toMeta, v.get()));
      bind(op, r);
      return;
    }
    PyRef attrs = checked(PyDict_New());
    for (const auto &[k, v] : run.attrs())
      if (PyDict_SetItemString(attrs.get(), std::string(k).c_str(), attrToPython(v).get()) != 0)
        throw PyErrorSet();
    std::vector<PyRef> types;
    for (const auto &r : op.results())
      types.push_back(checked(PyUnicode_FromString(r->type().str().c_str())));
    // An in-place op writes its operands: the interpreter's run (check) gets copies taken
    // before PyTorch's.
    std::vector<PyRef> refOperands = operands;
    if (check && op.def().has(kInPlace)) {
      static PyObject *cloneName = internedStr("clone");
      for (PyRef &o : refOperands)
        if (isPlainTensor(o.get())) o = checked(PyObject_CallMethodNoArgs(o.get(), cloneName));
    }
    PyRef nameObj = checked(PyUnicode_FromString(name.c_str()));
    PyRef r = checked(PyObject_CallFunctionObjArgs(runOpFn, nameObj.get(), listOf(operands).get(),
                                                   attrs.get(), listOf(types).get(), nullptr));
    if (r.get() == Py_NotImplemented) { // no PyTorch row: the reference interpreter
      bind(op, interpretOp(run, operands));
      return;
    }
    std::vector<PyRef> results = splitResults(r, op.numResults(), op);
    if (check && name != "tuple_construct" && name != "tuple_get")
      compare(run, refOperands, results);
    bind(op, results);
  }

  void compare(const Op &op, const std::vector<PyRef> &operands,
               const std::vector<PyRef> &torchResults) {
    std::vector<PyRef> ref;
    try {
      ref = interpretOp(op, operands);
    } catch (const PyErrorSet &) {
      firstDifference = where(op) + ": the reference interpreter failed: " + takePyErrorMessage();
      return;
    } catch (const std::exception &ex) {
      firstDifference = where(op) + ": the reference interpreter failed: " + ex.what();
      return;
    }
    PyRef msg = checked(PyObject_CallFunctionObjArgs(
        eagerModule().compareOp, listOf(torchResults).get(), listOf(ref).get(), nullptr));
    if (PyUnicode_Check(msg.get())) {
      const char *c = PyUnicode_AsUTF8(msg.get());
      firstDifference = where(op) + ": " + (c ? c : "results differ");
    }
  }
};

} // namespace

std::vector<PyRef> runEager(const Graph &g, const std::vector<PyRef> &inputs,
                            const ExternalCallables &externals) {
  Walker w{externals};
  return w.runBlock(*g.body(), inputs);
}

bool readsStorage(const Op &op) {
  if (op.name() != "external_call") return false;
  const Attr *name = op.attrOrNull("name");
  if (!name || name->kind() != AttrKind::Str) return false;
  const std::string &full = name->asStr();
  const size_t dot = full.rfind('.');
  return readsStorageCallee(dot == std::string::npos ? full : full.substr(dot + 1));
}

bool readsStorageCallee(std::string_view callee) {
  return callee == "as_strided" || callee == "as_strided_" || callee == "as_strided_copy" ||
         callee == "as_strided_scatter";
}

std::vector<PyRef> runMeta(const Graph &g, const std::vector<PyRef> &inputs,
                           const ExternalCallables &externals, std::vector<bool> &unknown,
                           std::string &eagerRaises, std::map<const Op *, PyRef> *laidOut,
                           const SymbolBindings *symbols) {
  Walker w{externals};
  w.meta = true;
  w.laidOut = laidOut;
  w.body = g.body(); // shape symbols bind from the real inputs, or are given
  w.inputs = inputs;
  if (symbols) w.symbols = *symbols;
  std::vector<PyRef> metaInputs;
  for (const PyRef &in : inputs)
    metaInputs.push_back(checked(PyObject_CallOneArg(eagerModule().toMeta, in.get())));
  std::vector<PyRef> out = w.runBlock(*g.body(), metaInputs);
  unknown.assign(out.size(), false);
  const Op *ret = g.body()->terminator();
  for (size_t i = 0; ret && i < out.size() && i < ret->numOperands(); ++i)
    unknown[i] = w.unknown.count(ret->operand(i)) > 0;
  eagerRaises = w.eagerRaises;
  return out;
}

std::string firstDifferingOp(const Graph &g, const std::vector<PyRef> &inputs,
                             const ExternalCallables &externals) {
  Walker w{externals};
  w.check = true;
  try {
    w.runBlock(*g.body(), inputs);
  } catch (const PyErrorSet &) {
    return "the op-by-op comparison failed: " + takePyErrorMessage();
  } catch (const std::exception &ex) {
    PyErr_Clear();
    return std::string("the op-by-op comparison failed: ") + ex.what();
  }
  return w.firstDifference.empty() ? "" : "first differing op: " + w.firstDifference;
}

} // namespace xjit::frontend
