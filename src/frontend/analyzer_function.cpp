// torch.autograd.Function.apply: where apply records no backward, the Function's forward is
// inlined; where it does (grad enabled and an input that requires grad), its forward and its
// backward are captured as the two regions of a custom_vjp op, whose backward region is the
// autodiff pass's rule for it (docs/frontend.md "Autograd", docs/ir.md).
#include "analyzer.h"

namespace xjit::frontend {
namespace {

// The ctx a Function's forward and backward receive. Its methods record what they are given
// as attributes the capture reads back (xjit_saved, ...); anything else asked of it (mark_dirty,
// saved_tensors in a forward) is an AttributeError at capture: a graph break.
PyObject *functionCtxType() {
  static PyObject *type = [] {
    PyRef globals = check(PyDict_New(), "dict");
    PyDict_SetItemString(globals.get(), "__builtins__", PyEval_GetBuiltins());
    // Not a library module's name: its instances are modeled (analyzer_instance.cpp), not run.
    PyRef name = check(PyUnicode_FromString("xjit_function_ctx"), "str");
    PyDict_SetItemString(globals.get(), "__name__", name.get());
    PyRef code = check(Py_CompileString("class FunctionCtx:\n"
                                        "    def __init__(self, needs_input_grad):\n"
                                        "        self.needs_input_grad = needs_input_grad\n"
                                        "    def save_for_backward(self, *tensors):\n"
                                        "        self.xjit_saved = tensors\n"
                                        "    def save_for_forward(self, *tensors):\n"
                                        "        pass\n"
                                        "    def mark_non_differentiable(self, *args):\n"
                                        "        self.xjit_non_differentiable = args\n"
                                        "    def set_materialize_grads(self, value):\n"
                                        "        self.xjit_materialize_grads = value\n",
                                        "<xjit-function-ctx>", Py_file_input),
                       "compile FunctionCtx");
    check(PyEval_EvalCode(code.get(), globals.get(), globals.get()), "FunctionCtx");
    PyObject *t = PyDict_GetItemString(globals.get(), "FunctionCtx"); // borrowed
    Py_INCREF(t);
    return t;
  }();
  return type;
}

// torch.autograd.Function.apply's function and _SingleLevelFunction.setup_context (a Function
// that overrides setup_context has a forward without ctx).
struct FunctionApi {
  PyObject *apply = nullptr, *baseSetupContext = nullptr;
};
const FunctionApi &functionApi() {
  static FunctionApi api = [] {
    FunctionApi f;
    PyRef mod = PyRef::steal(PyImport_ImportModule("torch.autograd.function"));
    PyRef function = mod ? PyRef::steal(PyObject_GetAttrString(mod.get(), "Function")) : PyRef();
    PyRef single =
        mod ? PyRef::steal(PyObject_GetAttrString(mod.get(), "_SingleLevelFunction")) : PyRef();
    PyRef apply =
        function ? PyRef::steal(PyObject_GetAttrString(function.get(), "apply")) : PyRef();
    PyRef setup =
        single ? PyRef::steal(PyObject_GetAttrString(single.get(), "setup_context")) : PyRef();
    if (!apply || !setup || !PyMethod_Check(apply.get())) {
      PyErr_Clear();
      return f;
    }
    f.apply = Py_NewRef(PyMethod_GET_FUNCTION(apply.get()));
    f.baseSetupContext = setup.release();
    return f;
  }();
  return api;
}

/// A ctx instance (modeled, not made) whose needs_input_grad is `needs`.
std::shared_ptr<InstanceVar> newCtx(Analyzer &a, const std::vector<bool> &needs) {
  PyRef t = check(PyTuple_New(static_cast<Py_ssize_t>(needs.size())), "tuple");
  for (size_t i = 0; i < needs.size(); ++i)
    PyTuple_SET_ITEM(t.get(), static_cast<Py_ssize_t>(i), Py_NewRef(needs[i] ? Py_True : Py_False));
  auto ctx = std::make_shared<InstanceVar>(PyRef::borrow(functionCtxType()));
  ctx->attrs.emplace_back("needs_input_grad", a.constant(t.get()));
  return ctx;
}

bool isNone(const VarPtr &v) {
  auto *o = as<ObjectVar>(v);
  return o && o->obj.get() == Py_None;
}

/// `f` of each item of tuple `v` (a tuple of the same type), or of `v` when it is no tuple.
template <class F> VarPtr eachItem(const VarPtr &v, F &&f) {
  auto *tuple = as<TupleVar>(v);
  if (!tuple) return f(v);
  std::vector<VarPtr> items;
  for (const VarPtr &item : tuple->items)
    items.push_back(f(item));
  return std::make_shared<TupleVar>(std::move(items), tuple->structType);
}

/// Whether `v` is defined in `block` or in a block nested in it.
bool definedIn(const Value *v, const Block *block) {
  const Block *b = v->isBlockArgument() ? v->ownerBlock() : v->definingOp()->parentBlock();
  while (b && b != block) {
    const Op *p = b->parentOp();
    b = p ? p->parentBlock() : nullptr;
  }
  return b == block;
}

/// Whether `v` is computed in `block` (or a block nested in it): not one of its arguments.
bool madeIn(const Value *v, const Block *block) {
  return definedIn(v, block) && !(v->isBlockArgument() && v->ownerBlock() == block);
}

/// The parts of a Function the capture calls: forward (and setup_context when the Function
/// overrides it) and backward, each reached through the Function's class.
struct FunctionParts {
  PyObject *cls = nullptr;
  VarPtr forward, backward, setupContext; // setupContext: null when forward takes ctx
};

/// Captures one apply as a custom_vjp: the forward into region 0 (its tensor arguments the
/// region's arguments), then the backward into region 1 (saved tensors and tensors left on ctx
/// its first arguments, then one gradient per output). Both run with grad disabled, as in
/// PyTorch. Throws BreakError where either cannot be captured.
class CustomVjpCapture {
public:
  CustomVjpCapture(Analyzer &a, const FunctionParts &fn, const Args &args)
      : a_(a), fn_(fn), args_(args) {}

  VarPtr run() {
    std::vector<Value *> operands;
    for (const VarPtr &arg : args_.pos)
      if (auto *t = as<TensorVar>(arg)) operands.push_back(t->value);
    op_ = a_.builder().createWithTypes("custom_vjp", operands, {}, {{"name", qualnameOf(fn_.cls)}});
    a_.customVjp = op_;
    forward();
    backward();
    a_.customVjp = nullptr;
    check();
    // The results, as apply returns them: requiring grad unless marked non-differentiable.
    std::vector<VarPtr> results;
    for (size_t i = 0; i < outputs_.size(); ++i) {
      Value *r = op_->addResult(outputs_[i]->type());
      const bool differentiable = std::find(nonDifferentiable_.begin(), nonDifferentiable_.end(),
                                            int64_t(i)) == nonDifferentiable_.end();
      results.push_back(a_.wrapIr(r, differentiable));
    }
    if (!nonDifferentiable_.empty()) op_->setAttr("non_differentiable", Attr(nonDifferentiable_));
    a_.noteRecordedForAutograd();
    if (!tupleResult_) return results.at(0);
    return std::make_shared<TupleVar>(std::move(results));
  }

  /// Undoes a capture that failed: the op leaves the graph (kept alive, without operands).
  void abandon() {
    a_.customVjp = nullptr;
    if (!op_) return;
    Graph::walkBlock(op_->region(0), dropOperands);
    Graph::walkBlock(op_->region(1), dropOperands);
    op_->setOperands({});
    a_.abandonedOps.push_back(op_->parentBlock()->remove(op_));
    op_ = nullptr;
  }

private:
  static void dropOperands(Op *op) { op->setOperands({}); }

  void forward() {
    Block *fwd = op_->region(0);
    Args call;
    std::vector<bool> needs;
    for (const VarPtr &arg : args_.pos) {
      auto *t = as<TensorVar>(arg);
      needs.push_back(t && t->requiresGrad);
      if (!t) {
        call.pos.push_back(arg);
        continue;
      }
      VarPtr inner = a_.wrapIr(fwd->addArgument(t->type(), t->value->name()), t->requiresGrad);
      call.pos.push_back(inner);
    }
    ctx_ = newCtx(a_, needs);
    a_.builder().setInsertionPoint(fwd);
    VarPtr out;
    if (fn_.setupContext) {
      out = a_.call(fn_.forward, call);
      Args setup;
      setup.pos = {ctx_, std::make_shared<TupleVar>(call.pos), out};
      a_.call(fn_.setupContext, setup);
    } else {
      call.pos.insert(call.pos.begin(), ctx_);
      out = a_.call(fn_.forward, call);
    }
    auto *tuple = as<TupleVar>(out);
    tupleResult_ = tuple && !tuple->structType;
    std::vector<VarPtr> outs = tupleResult_ ? tuple->items : std::vector<VarPtr>{out};
    if (outs.empty()) a_.fail("a torch.autograd.Function whose forward returns no tensor");
    for (const VarPtr &o : outs) {
      auto *t = as<TensorVar>(o);
      if (!t) a_.fail("a torch.autograd.Function whose forward returns a " + a_.typeName(o));
      Value *v = t->value;
      if (v->isBlockArgument() && v->ownerBlock() == fwd) // an input: apply returns a view
        v = a_.builder().op("alias", {v});
      else if (t->base && !madeIn(t->base->value, fwd))
        a_.fail("a torch.autograd.Function whose forward returns a view of a tensor it did not "
                "make");
      outputs_.push_back(v);
    }
    if (const VarPtr *nd = ctx_->find("xjit_non_differentiable"))
      for (const VarPtr &item : a_.sequenceItems(*nd, "mark_non_differentiable"))
        for (size_t i = 0; i < outs.size(); ++i)
          if (auto *t = as<TensorVar>(item); t && t->value == as<TensorVar>(outs[i])->value)
            nonDifferentiable_.push_back(static_cast<int64_t>(i));
    // Gradients are always materialized (zeros for outputs without one); a backward that
    // expects None there is only told apart with several outputs.
    if (const VarPtr *m = ctx_->find("xjit_materialize_grads");
        m && !a_.truthy(*m) && outs.size() > 1)
      a_.fail("set_materialize_grads(False) in a torch.autograd.Function with several outputs");
  }

  void backward() {
    Block *bwd = op_->region(1);
    // Saved tensors and other ctx attributes first (region arguments in the order met).
    auto bctx = newCtx(a_, {});
    bctx->attrs.clear();
    for (const auto &[k, v] : ctx_->attrs)
      if (k.rfind("xjit_", 0) != 0) bctx->attrs.emplace_back(k, remap(v));
    std::vector<VarPtr> saved;
    if (const VarPtr *s = ctx_->find("xjit_saved"))
      for (const VarPtr &item : a_.sequenceItems(*s, "save_for_backward")) {
        if (!isNone(item) && !as<TensorVar>(item))
          a_.fail("save_for_backward() of a " + a_.typeName(item));
        saved.push_back(remap(item));
      }
    bctx->attrs.emplace_back("saved_tensors", std::make_shared<TupleVar>(std::move(saved)));
    Args call;
    call.pos.push_back(bctx);
    for (Value *o : outputs_)
      call.pos.push_back(a_.wrapIr(bwd->addArgument(o->type(), "grad"), false));
    a_.builder().setInsertionPoint(bwd);
    VarPtr out = a_.call(fn_.backward, call);
    auto *tuple = as<TupleVar>(out);
    std::vector<VarPtr> grads = tuple ? tuple->items : std::vector<VarPtr>{out};
    if (grads.size() != args_.pos.size())
      a_.fail("a torch.autograd.Function backward returning " + std::to_string(grads.size()) +
              " gradients for " + std::to_string(args_.pos.size()) + " inputs");
    std::vector<Value *> yields;
    for (size_t i = 0; i < grads.size(); ++i) {
      auto *in = as<TensorVar>(args_.pos[i]);
      if (isNone(grads[i])) {
        if (in)
          yields.push_back(a_.builder().createWithTypes("constant", {}, {Type::none()})->result(0));
        continue;
      }
      auto *g = as<TensorVar>(grads[i]);
      if (!in || !g || g->type() != in->type())
        a_.fail("a torch.autograd.Function backward whose gradient " + std::to_string(i) +
                " is not a tensor of its input's type");
      yields.push_back(g->value);
    }
    a_.builder().createWithTypes("yield", yields, {});
    std::vector<Value *> fwdYields = outputs_;
    fwdYields.insert(fwdYields.end(), savedValues_.begin(), savedValues_.end());
    a_.builder().setInsertionPoint(op_->region(0));
    a_.builder().createWithTypes("yield", fwdYields, {});
  }

  /// A value of the forward's ctx as the backward sees it: tensors the forward made become
  /// arguments of the backward region (saved values); others are shared.
  VarPtr remap(const VarPtr &v) {
    if (auto *t = as<TensorVar>(v)) {
      if (!definedIn(t->value, op_->region(0))) return v; // made before the Function
      if (auto it = remapped_.find(t->value); it != remapped_.end()) return it->second;
      savedValues_.push_back(t->value);
      VarPtr arg = a_.wrapIr(op_->region(1)->addArgument(t->type(), "saved"), false);
      remapped_[t->value] = arg;
      return arg;
    }
    if (as<TupleVar>(v)) return eachItem(v, [&](const VarPtr &item) { return remap(item); });
    if (auto *list = as<ListVar>(v)) {
      std::vector<VarPtr> items;
      for (const VarPtr &item : list->items())
        items.push_back(remap(item));
      return std::make_shared<ListVar>(std::move(items));
    }
    return v; // Python values; anything else reaching the forward's values fails check()
  }

  /// The regions compute without effects and the backward reads none of the forward's values.
  void check() {
    auto inspect = [&](Op *op) {
      if (op->name() == "external_call")
        a_.fail("a torch.autograd.Function that calls into PyTorch (" + op->attr("name").asStr() +
                ")");
      if (op->def().has(kInPlace) || (op->def().has(kSideEffect) && !op->def().has(kTerminator)))
        a_.fail("a torch.autograd.Function with an in-place op or a side effect ('" + op->name() +
                "')");
    };
    Graph::walkBlock(op_->region(0), inspect);
    const Block *fwd = op_->region(0);
    auto backwardOp = [&](Op *op) {
      inspect(op);
      for (Value *v : op->operands())
        if (definedIn(v, fwd))
          a_.fail("a torch.autograd.Function backward that reads a forward value not saved "
                  "as a tensor");
    };
    Graph::walkBlock(op_->region(1), backwardOp);
  }

  Analyzer &a_;
  const FunctionParts &fn_;
  const Args &args_;
  Op *op_ = nullptr;
  std::shared_ptr<InstanceVar> ctx_;
  std::vector<Value *> outputs_, savedValues_;
  std::map<const Value *, VarPtr> remapped_;
  std::vector<int64_t> nonDifferentiable_;
  bool tupleResult_ = false;
};

/// Runs `capture` with grad disabled (a Function's forward and backward run so), the builder
/// and the analyzer's gradient flags put back after. A custom_vjp capture that fails is undone
/// and nullptr returned (`why` says why), so apply is called as a PyTorch function, unless
/// state outside the regions changed meanwhile (side effects recorded): then the break stands.
VarPtr captureCustomVjp(Analyzer &a, const FunctionParts &fn, const Args &args, std::string &why) {
  Builder &b = a.builder();
  const SourceLoc loc = b.loc();
  const bool cut = a.gradientCut();
  const size_t effects = a.effects_.size();
  auto attrOverlay = a.attrOverlay;
  auto globalOverlay = a.globalOverlay;
  CustomVjpCapture capture(a, fn, args);
  auto restore = [&] {
    a.setGradEnabled(true);
    a.setGradientCut(cut); // reads under the Function's no_grad are not cuts: autodiff uses
                           // its backward for the whole region
    b.setInsertionPoint(a.graph().body());
    b.setLoc(loc);
  };
  a.setGradEnabled(false);
  try {
    VarPtr r = capture.run();
    if (a.effects_.size() != effects) a.fail("a torch.autograd.Function with side effects");
    restore();
    return r;
  } catch (const BreakError &e) {
    why = e.reason;
    capture.abandon();
    restore();
    if (a.effects_.size() != effects) throw;
    a.attrOverlay = std::move(attrOverlay);
    a.globalOverlay = std::move(globalOverlay);
    return nullptr;
  }
}

} // namespace

VarPtr functionApply(Analyzer &a, PyObject *fn, const std::optional<Source> &fnSource,
                     const Args &args) {
  const FunctionApi &api = functionApi();
  if (!api.apply || !PyMethod_Check(fn) || PyMethod_GET_FUNCTION(fn) != api.apply) return nullptr;
  PyObject *cls = PyMethod_GET_SELF(fn);
  if (!PyType_Check(cls)) return nullptr;
  PyRef forward = PyRef::steal(PyObject_GetAttrString(cls, "forward"));
  PyRef setup = PyRef::steal(PyObject_GetAttrString(cls, "setup_context"));
  PyRef backward = PyRef::steal(PyObject_GetAttrString(cls, "backward"));
  if (!forward || !setup || !backward || !PyFunction_Check(forward.get())) {
    PyErr_Clear();
    return nullptr;
  }
  const bool takesCtx =
      setup.get() == api.baseSetupContext ||
      (PyMethod_Check(setup.get()) && PyMethod_GET_FUNCTION(setup.get()) == api.baseSetupContext);
  auto member = [&](PyObject *o, const char *name) {
    return fnSource ? a.wrapSourced(o, plus(plus(*fnSource, attrStep("__self__")), attrStep(name)))
                    : a.constant(o);
  };
  FunctionParts parts{cls, member(forward.get(), "forward"), nullptr, nullptr};
  // With grad enabled and an input that requires grad, apply records the Function's backward.
  if (a.gradEnabled() && a.anyRequiresGrad(args.pos)) {
    a.noteReadWithGrad(args.pos);
    if (!args.kw.empty() || !PyFunction_Check(backward.get())) return nullptr;
    parts.backward = member(backward.get(), "backward");
    if (!takesCtx) parts.setupContext = member(setup.get(), "setup_context");
    std::string why;
    if (VarPtr r = captureCustomVjp(a, parts, args, why)) return r;
    // Not captured: apply runs as a PyTorch call, named with the reason (autodiff's note).
    return a.fallbackCall(fn, qualnameOf(cls) + ".apply, not captured: " + why, args);
  }
  // Otherwise apply records nothing: the forward inlined (under no_grad, as apply runs it).
  Args call;
  if (takesCtx) call.pos.push_back(newCtx(a, std::vector<bool>(args.pos.size(), false)));
  call.pos.insert(call.pos.end(), args.pos.begin(), args.pos.end());
  call.kw = args.kw;
  const bool grad = a.gradEnabled();
  a.setGradEnabled(false);
  VarPtr result;
  try {
    result = a.call(parts.forward, call);
  } catch (...) {
    a.setGradEnabled(grad);
    throw;
  }
  a.setGradEnabled(grad);
  auto viewIfInput = [&](const VarPtr &r) -> VarPtr {
    auto *t = as<TensorVar>(r);
    if (!t) return r;
    for (const VarPtr &arg : args.pos)
      if (auto *in = as<TensorVar>(arg); in && in->value == t->value) return a.emit1("alias", {r});
    return r;
  };
  return eachItem(result, viewIfInput);
}

} // namespace xjit::frontend
