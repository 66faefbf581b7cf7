// The end of an analysis: the frame's return value as an output plan over the graph's outputs,
// the side effects to replay (in-place writes to tensors the caller can see, attribute / global
// / list / dict mutations), and the final guard list.
#include "analyzer.h"
#include "bytecode_rewrite.h"

#include "xjit/ir/op_registry.h"

namespace xjit::frontend {

PyObject *pythonHelper(const char *source, const char *name) {
  PyRef globals = check(PyDict_New(), "dict");
  PyDict_SetItemString(globals.get(), "__builtins__", PyEval_GetBuiltins());
  PyRef code =
      check(Py_CompileString(source, "<xjit-output>", Py_file_input), "compiling a Python helper");
  check(PyEval_EvalCode(code.get(), globals.get(), globals.get()), name);
  PyObject *f = PyDict_GetItemString(globals.get(), name);
  Py_XINCREF(f);
  return check(f, name).release();
}

PyRef namesTuple(const std::vector<std::pair<std::string, VarPtr>> &pairs) {
  PyRef names = check(PyTuple_New(static_cast<Py_ssize_t>(pairs.size())), "tuple");
  for (size_t i = 0; i < pairs.size(); ++i)
    PyTuple_SET_ITEM(names.get(), static_cast<Py_ssize_t>(i),
                     check(PyUnicode_FromString(pairs[i].first.c_str()), "str").release());
  return names;
}

namespace {

// OutputNode::NamedTuple calls `object(*fields)`: namedtuple types take their fields that way;
// torch.Size and structseqs (torch.return_types.*) take one sequence, through an adapter.
PyRef fieldsConstructor(PyObject *type) {
  if (PyObject_HasAttrString(type, "_fields")) return PyRef::borrow(type);
  static PyObject *make = pythonHelper("def _xjit_from_fields(T):\n"
                                       "    def build(*fields):\n"
                                       "        return T(fields)\n"
                                       "    build.__qualname__ = T.__qualname__\n"
                                       "    return build\n",
                                       "_xjit_from_fields");
  return check(PyObject_CallOneArg(make, type), "output adapter");
}

// A dataclass instance is rebuilt by calling its class with the final field values (fields
// without an __init__ parameter are set afterwards).
PyRef dataclassConstructor(PyObject *cls,
                           const std::vector<std::pair<std::string, VarPtr>> &fields) {
  static PyObject *make =
      pythonHelper("import dataclasses\n"
                   "def _xjit_dataclass(T, names):\n"
                   "    init = {f.name for f in dataclasses.fields(T) if f.init}\n"
                   "    def build(*values):\n"
                   "        kw = dict(zip(names, values))\n"
                   "        obj = T(**{k: v for k, v in kw.items() if k in init})\n"
                   "        for k, v in kw.items():\n"
                   "            if k not in init:\n"
                   "                object.__setattr__(obj, k, v)\n"
                   "        return obj\n"
                   "    build.__qualname__ = T.__qualname__\n"
                   "    return build\n",
                   "_xjit_dataclass");
  return check(PyObject_CallFunctionObjArgs(make, cls, namesTuple(fields).get(), nullptr),
               "dataclass adapter");
}

// A function made in the frame, rebuilt after the graph as MAKE_FUNCTION would have made it.
PyObject *functionConstructor() {
  static PyObject *make =
      pythonHelper("import types\n"
                   "def _xjit_function(code, globals, qualname, defaults, kwdefaults, closure):\n"
                   "    f = types.FunctionType(code, globals, code.co_name, defaults, closure)\n"
                   "    f.__kwdefaults__ = kwdefaults\n"
                   "    f.__qualname__ = qualname\n"
                   "    return f\n",
                   "_xjit_function");
  return make;
}

PyObject *partialConstructor() {
  static PyObject *make = pythonHelper("import functools\n"
                                       "def _xjit_partial(args, keywords):\n"
                                       "    return functools.partial(*args, **keywords)\n",
                                       "_xjit_partial");
  return make;
}

/// _xjit_input_view(base, like, steps): the view of input `base` that the captured code made
/// (`steps`: (IR op, attributes, result index) from the input, see ViewStep), so that a write
/// through it after the graph reaches the input, as in eager. `like` is the graph's value of
/// the view: returned instead when a step has no row here, the replay does not match it, or a
/// reshape-like step copied (TensorVar::viewReplays: reshape decides on the run's strides, as
/// eager's did, and its copy then holds like's values). Where like itself views the input (the
/// graph wrote the input in place, and viewed that where eager copied: fuzzer seed 88504,
/// `a[1:][...] = 7; return a.contiguous()[0]` of a strided a), the replay's copy is returned
/// with like's values, so that a write to it misses the input as eager's does.
/// Replays of one call share their steps (the function's `memo`, keyed by the input and the
/// steps so far, cleared after each call: clearInputViewReplays): outputs eager made as views
/// of one copy stay views of one copy (fuzzer seed 166685: `v1 = a.contiguous()` of a written
/// transposed a and `v1.transpose(0, 1)` returned together). An object already returned
/// (`given`) is not returned again for a second output of the same steps: eager's are two.
PyObject *inputViewConstructor() {
  static PyObject *make = pythonHelper(
      "def _dim(x, d):\n"
      "    return d % x.dim() if x.dim() else d\n"
      "def _slice(x, a):\n"
      "    d = _dim(x, a.get('dim', 0))\n"
      "    end = a.get('end', None)\n"
      "    end = None if end is not None and end >= 2**62 else end\n"
      "    key = (slice(None),) * d + (slice(a.get('start', 0), end, a.get('step', 1)),)\n"
      "    return x[key]\n"
      "_STEPS = {\n"
      "    'squeeze': lambda x, a, r: x.squeeze(tuple(a['dim'])) if 'dim' in a else x.squeeze(),\n"
      "    'unsqueeze': lambda x, a, r: x.unsqueeze(a['dim']),\n"
      "    'slice': lambda x, a, r: _slice(x, a),\n"
      "    'select': lambda x, a, r: x.select(a['dim'], a['index']),\n"
      "    'narrow': lambda x, a, r: x.narrow(a['dim'], a['start'], a['length']),\n"
      "    'transpose': lambda x, a, r: x.transpose(a['dim0'], a['dim1']),\n"
      "    'permute': lambda x, a, r: x.permute(a['dims']),\n"
      "    't': lambda x, a, r: x.t(),\n"
      "    'movedim': lambda x, a, r: x.movedim(a['source'], a['destination']),\n"
      "    'reshape': lambda x, a, r: x.reshape(a['shape']),\n"
      "    'view': lambda x, a, r: x.view(a['shape']),\n"
      "    'flatten': lambda x, a, r: x.flatten(a.get('start_dim', 0), a.get('end_dim', -1)),\n"
      "    'unflatten': lambda x, a, r: x.unflatten(a['dim'], a['sizes']),\n"
      "    'expand': lambda x, a, r: x.expand(a['shape']),\n"
      "    'alias': lambda x, a, r: x.view(x.shape),\n"
      "    'contiguous': lambda x, a, r: x.contiguous(),\n"
      "    'diagonal': lambda x, a, r: x.diagonal(a.get('offset', 0), a.get('dim1', 0),\n"
      "                                           a.get('dim2', 1)),\n"
      "    'split': lambda x, a, r: x.split(a['split_size'], a.get('dim', 0))[r],\n"
      "    'chunk': lambda x, a, r: x.chunk(a['chunks'], a.get('dim', 0))[r],\n"
      "    'unbind': lambda x, a, r: x.unbind(a.get('dim', 0))[r],\n"
      "    'call': lambda x, a, r: _result(a['fn'](x), r),\n"
      "}\n"
      "def _result(y, r):\n"
      "    return y[r] if isinstance(y, (tuple, list)) else y\n"
      "def _xjit_input_view(base, like, steps):\n"
      "    memo, given = _xjit_input_view.memo, _xjit_input_view.given\n"
      "    x, key, last = base, (id(base),), len(steps) - 1\n"
      "    try:\n"
      "        for i, (name, attrs, result) in enumerate(steps):\n"
      "            if attrs.get('shape', 0) is None:  # symbolic: the last step, like's shape\n"
      "                attrs = dict(attrs, shape=list(like.shape))\n"
      "            key += ((name, repr(attrs), result),)\n"
      "            y = memo.get(key)\n"
      "            if y is None or (i == last and id(y) in given):\n"
      "                y = _STEPS[name](x, attrs, result)\n"
      "                memo.setdefault(key, y)\n"
      "            x = y\n"
      "        r = _finish(base, like, x)\n"
      "    except Exception:\n"
      "        return like\n"
      "    given.add(id(r))\n"
      "    return r\n"
      "def _finish(base, like, x):\n"
      "    if x.shape != like.shape or x.dtype != like.dtype:\n"
      "        return like\n"
      "    if x.untyped_storage().data_ptr() == base.untyped_storage().data_ptr():\n"
      "        return x\n"
      "    # A reshape-like step copied, as eager's did: like is that copy, unless it views the\n"
      "    # input (a graph that wrote the input in place); then eager's copy x, with like's "
      "values.\n"
      "    if like.untyped_storage().data_ptr() != base.untyped_storage().data_ptr():\n"
      "        return like\n"
      "    try:\n"
      "        return x.copy_(like)\n"
      "    except RuntimeError:\n"
      "        return like.clone()\n"
      "_xjit_input_view.memo, _xjit_input_view.given = {}, set()\n",
      "_xjit_input_view");
  return make;
}

/// The view steps of `t` as a Python list for _xjit_input_view; null when a step takes tensor
/// operands or a symbolic size (the replay would need values only the graph has), except the
/// shape of a last reshape/view/expand: None, the graph's value has it.
PyRef viewStepsToPython(const TensorVar &t) {
  PyRef steps = check(PyList_New(0), "list");
  for (const ViewStep &s : t.viewSteps) {
    bool last = &s == &t.viewSteps.back();
    bool shapeOp = s.op == "reshape" || s.op == "view" || s.op == "expand";
    if (s.op == "external_call" && s.extra.size() == 1) { // a PyTorch fallback, called again
      auto *callable = as<ObjectVar>(s.extra[0]);
      if (!callable) return PyRef();
      PyRef attrs = check(PyDict_New(), "dict");
      PyDict_SetItemString(attrs.get(), "fn", callable->obj.get());
      PyList_Append(steps.get(), check(Py_BuildValue("(sOn)", "call", attrs.get(),
                                                     static_cast<Py_ssize_t>(s.result)),
                                       "tuple")
                                     .get());
      continue;
    }
    if (!s.extra.empty()) return PyRef();
    PyRef attrs = check(PyDict_New(), "dict");
    for (const auto &[name, a] : s.attrs) {
      PyRef value;
      if (a.kind() == AttrKind::Int) {
        value = check(PyLong_FromLongLong(a.asInt()), "int");
      } else if (a.kind() == AttrKind::Bool) {
        value = PyRef::borrow(a.asBool() ? Py_True : Py_False);
      } else if (a.kind() == AttrKind::Ints) {
        value = check(PyList_New(0), "list");
        for (int64_t i : a.asInts())
          PyList_Append(value.get(), check(PyLong_FromLongLong(i), "int").get());
      } else if (a.kind() == AttrKind::Str && last && shapeOp && name == "shape") {
        value = PyRef::borrow(Py_None);
      } else {
        return PyRef(); // a symbolic size (a string) or another kind: no replay
      }
      PyDict_SetItemString(attrs.get(), name.c_str(), value.get());
    }
    PyRef item =
        check(Py_BuildValue("(sOn)", s.op.c_str(), attrs.get(), static_cast<Py_ssize_t>(s.result)),
              "tuple");
    PyList_Append(steps.get(), item.get());
  }
  return steps;
}

bool hasStaticSizeOne(const Type &t) {
  if (!t.isTensor()) return false;
  for (const DimExpr &d : t.shape())
    if (d.isStatic() && d.value() == 1) return true;
  return false;
}

/// True if the graph computes `v` as a chain of view ops of `base` (the runtime then returns
/// it as a view of base's buffer, no rebuild needed).
bool viewsInGraph(const Value *v, const Value *base) {
  while (v != base) {
    const Op *def = v->definingOp();
    if (!def || !def->def().has(kView) || def->numOperands() == 0) return false;
    v = def->operand(0);
  }
  return true;
}

PyObject *cellConstructor() {
  static PyObject *make = pythonHelper("import types\n"
                                       "def _xjit_cell(*contents):\n"
                                       "    return types.CellType(*contents)\n",
                                       "_xjit_cell");
  return make;
}

} // namespace

void clearInputViewReplays() {
  static PyObject *memo = PyObject_GetAttrString(inputViewConstructor(), "memo");
  static PyObject *given = PyObject_GetAttrString(inputViewConstructor(), "given");
  if (memo && PyDict_GET_SIZE(memo)) PyDict_Clear(memo);
  if (given && PySet_GET_SIZE(given)) PySet_Clear(given);
}

PyObject *gradModeExitType() {
  static PyObject *type = [] {
    PyRef globals = check(PyDict_New(), "dict");
    PyDict_SetItemString(globals.get(), "__builtins__", PyEval_GetBuiltins());
    PyRef code = check(Py_CompileString("import torch\n"
                                        "class GradModeExit:\n"
                                        "    '''__exit__ of a `with torch.no_grad()` (or\n"
                                        "    enable_grad) block a graph break interrupted.'''\n"
                                        "    def __init__(self, restore):\n"
                                        "        self.restore = restore\n"
                                        "    def __call__(self, *exc_info):\n"
                                        "        torch._C._set_grad_enabled(self.restore)\n",
                                        "<xjit-resume>", Py_file_input),
                       "compiling GradModeExit");
    check(PyEval_EvalCode(code.get(), globals.get(), globals.get()), "GradModeExit");
    PyObject *t = PyDict_GetItemString(globals.get(), "GradModeExit");
    Py_INCREF(t);
    return t;
  }();
  return type;
}

OutputNode Analyzer::outputOf(const VarPtr &v, std::vector<Value *> &outputs,
                              std::map<Value *, int64_t> &outputIndex) {
  // `root`: eager's tensor whose storage the value is (Capture::outputStorages). One value that
  // stands for two tensors of eager's (a copy eager makes and the graph does not) is two outputs.
  auto graphOutput = [&](Value *val, const Var *root = nullptr) {
    OutputNode n;
    n.kind = OutputNode::GraphOutput;
    auto it = outputIndex.find(val);
    if (it == outputIndex.end()) {
      it = outputIndex.emplace(val, static_cast<int64_t>(outputs.size())).first;
      outputs.push_back(val);
      outputRoots_.resize(outputs.size(), nullptr);
      outputRoots_.back() = root;
    }
    n.index = it->second;
    const Var *&known = outputRoots_.at(size_t(n.index));
    if (!known) known = root;
    if (root && known != root) {
      for (n.index = 0; size_t(n.index) < outputs.size(); ++n.index)
        if (outputs[size_t(n.index)] == val && outputRoots_[size_t(n.index)] == root) return n;
      outputs.push_back(val);
      outputRoots_.push_back(root);
    }
    return n;
  };
  auto fromSource = [&](const Source &s) {
    OutputNode n;
    n.kind = OutputNode::FromSource;
    n.source = s;
    return n;
  };
  // An object made in the frame: built once per call however often it is reached (returned
  // and stored, `return acc, acc`, two closures over one cell), as in Python.
  auto shared = [&](const std::function<void(OutputNode &)> &define) {
    auto [it, first] = sharedOutputs_.emplace(
        v.get(), SharedOutput{static_cast<int64_t>(sharedOutputs_.size()), nullptr});
    OutputNode ref;
    ref.kind = OutputNode::Shared;
    ref.index = it->second.index;
    if (!first) {
      if (!it->second.definition) fail("a " + typeName(v) + " made in the frame refers to itself");
      ref.definition = it->second.definition;
      return ref;
    }
    auto n = std::make_shared<OutputNode>();
    define(*n);
    sharedOutputs_[v.get()].definition = n;
    ref.definition = n;
    return ref;
  };
  auto children = [&](OutputNode::Kind kind, const std::vector<VarPtr> &items) {
    OutputNode n;
    n.kind = kind;
    for (const VarPtr &i : items)
      n.children.push_back(outputOf(i, outputs, outputIndex));
    return n;
  };
  switch (v->kind) {
  case VarKind::Tensor: {
    auto *t = as<TensorVar>(v);
    touchView(v);
    // An input keeps its identity (in-place writes reach it through TensorCopy effects first).
    if (t->isInput && t->source) return fromSource(*t->source);
    // A view of an input the graph wrote: the graph's value is a view of the written copy, not
    // of the caller's input, so rebuild it on the input (a later write through it, by the
    // caller or the code after a graph break, must reach the input as in eager).
    // (A reshape PyTorch may copy, viewReplays, is replayed too: eager's view of a written
    // input under dynamic=True, fuzzer seed 12957: `a[...] = 7; v = a.reshape(-1)`.)
    const bool replayable = t->viewOpaque.empty() || t->viewReplays;
    // Likewise a view of an input with a dim of size 1: eager's stride there comes from the
    // input's strides, which the graph does not see (DLPack gives size-1 dims stride 1), and
    // PyTorch's overlap checks compare it (fuzzer seed 63631: `a.add_(a.reshape(-1))` of a
    // one-element `x[::2]` after a graph break raised "partial overlap"). Replayed when it can be.
    const bool inputView =
        t->base && t->base->isInput && t->base->source && replayable && !t->viewSteps.empty();
    if (inputView && (t->base->mutated || hasStaticSizeOne(t->type()))) {
      PyRef steps = viewStepsToPython(*t);
      // Without a replay the graph's value would be a view of the written copy: a write
      // through it after the call would miss the input (fuzzer seed 12708: narrow(0, 0,
      // s0 // 2) of an input, zeroed, then index_put_ after a graph break). Not compiled.
      if (!steps && t->base->mutated)
        fail("a view of written input " + sourceKey(*t->base->source) +
             " outlives the graph, and its view steps have symbolic sizes or tensor operands");
      if (steps)
        return shared([&](OutputNode &n) {
          n.kind = OutputNode::NamedTuple;
          n.object = PyRef::borrow(inputViewConstructor());
          n.children.push_back(fromSource(*t->base->source));
          n.children.push_back(graphOutput(t->value, t->base.get()));
          OutputNode c;
          c.kind = OutputNode::Constant;
          c.object = steps;
          n.children.push_back(std::move(c));
        });
    }
    // Likewise a view of a tensor made in the frame and written through a view: the graph
    // computes the view's value and the base's new value apart, so the view is rebuilt on
    // the base's output (v1 = a[:, [0, 0]]; v2 = v1.squeeze(); v2.add_(1); return v2, v1:
    // a write by the caller to v2 must reach v1, fuzzer seed 12008). Where the steps cannot be
    // replayed (symbolic sizes, tensor operands) the frame is not compiled: the graph's value
    // would not share memory with the base, and a write through it after a graph break would
    // miss the base (fuzzer seed 24078: `v5 = v4.chunk(2, 0)[0]; v5[idx] = 2`, dynamic=True).
    if (t->base && !t->base->isInput && t->base->mutated && replayable && !t->viewSteps.empty() &&
        !viewsInGraph(t->value, t->base->value)) {
      PyRef steps = viewStepsToPython(*t);
      if (!steps)
        fail("a view of a tensor written in the frame outlives the graph, and its view steps "
             "have symbolic sizes or tensor operands");
      Value *base = t->base->value;
      return shared([&](OutputNode &n) {
        n.kind = OutputNode::NamedTuple;
        n.object = PyRef::borrow(inputViewConstructor());
        n.children.push_back(graphOutput(base, t->base.get()));
        n.children.push_back(graphOutput(t->value, t->base.get()));
        OutputNode c;
        c.kind = OutputNode::Constant;
        c.object = steps;
        n.children.push_back(std::move(c));
      });
    }
    return graphOutput(t->value, t->base ? t->base.get() : v.get());
  }
  case VarKind::SymInt: return graphOutput(as<SymIntVar>(v)->value);
  case VarKind::SymFloat: return graphOutput(as<SymFloatVar>(v)->value);
  case VarKind::Object: {
    auto *o = as<ObjectVar>(v);
    PyObject *p = o->obj.get();
    if (auto it = madePartials_.find(v.get()); it != madePartials_.end())
      return shared([&](OutputNode &n) { // functools.partial(*args, **keywords), once per call
        n.kind = OutputNode::NamedTuple;
        n.object = PyRef::borrow(partialConstructor());
        for (PyObject *part : {it->second.args.get(), it->second.keywords.get()}) {
          OutputNode c;
          c.kind = OutputNode::Constant;
          c.object = PyRef::borrow(part);
          n.children.push_back(std::move(c));
        }
      });
    if (isFrameSet(p))
      return shared([&](OutputNode &n) { // set((items...)), once per call: a new set each time
        n.kind = OutputNode::NamedTuple;
        n.object = PyRef::borrow(reinterpret_cast<PyObject *>(&PySet_Type));
        OutputNode items;
        items.kind = OutputNode::Constant;
        items.object = check(PySequence_Tuple(p), "tuple(set)");
        n.children.push_back(std::move(items));
      });
    bool immutable = p == Py_None || PyBool_Check(p) || PyLong_CheckExact(p) ||
                     PyFloat_CheckExact(p) || PyUnicode_CheckExact(p) || PyBytes_CheckExact(p) ||
                     PyTuple_CheckExact(p) || PyComplex_CheckExact(p) || PyType_Check(p) ||
                     dtypeFromTorch(p) || p == Py_Ellipsis;
    if (o->source && !immutable) return fromSource(*o->source);
    OutputNode n;
    n.kind = OutputNode::Constant;
    n.object = o->obj;
    return n;
  }
  case VarKind::Module: {
    if (!v->source) fail("returning a module the caller cannot reach");
    return fromSource(*v->source);
  }
  case VarKind::Tuple: {
    auto *t = as<TupleVar>(v);
    if (!t->structType) return children(OutputNode::Tuple, t->items);
    OutputNode n = children(OutputNode::NamedTuple, t->items);
    n.object = fieldsConstructor(t->structType.get());
    return n;
  }
  case VarKind::List: {
    if (v->source) return fromSource(*v->source); // the caller's list, mutated by side effects
    return children(OutputNode::List, as<ListVar>(v)->items());
  }
  case VarKind::Dict: {
    if (v->source) return fromSource(*v->source);
    auto *d = as<DictVar>(v);
    OutputNode n;
    n.kind = OutputNode::Dict;
    for (auto &[k, val] : d->items) {
      n.keys.push_back(k);
      n.children.push_back(outputOf(val, outputs, outputIndex));
    }
    return n;
  }
  case VarKind::Slice: {
    PyRef p = asPython(v);
    if (!p) fail("returning a slice of values known only at run time");
    OutputNode n;
    n.kind = OutputNode::Constant;
    n.object = p;
    return n;
  }
  case VarKind::Dataclass: {
    auto *d = as<DataclassVar>(v);
    OutputNode n;
    n.kind = OutputNode::NamedTuple;
    n.object = dataclassConstructor(d->cls.get(), d->fields);
    for (auto &[k, val] : d->fields)
      n.children.push_back(outputOf(val, outputs, outputIndex));
    return n;
  }
  case VarKind::Instance:
    return shared([&](OutputNode &n) {
      auto *inst = as<InstanceVar>(v);
      n.kind = OutputNode::NamedTuple; // build(*attribute values)
      n.object = instanceConstructor(*inst);
      for (auto &[k, val] : inst->attrs)
        n.children.push_back(outputOf(val, outputs, outputIndex));
    });
  case VarKind::Function:
  case VarKind::Cell:
    // A function (and the cells it closes over) made in the frame and returned or stored: made
    // after the graph as MAKE_FUNCTION would, each cell once however many functions share it.
    // Not at a graph break: the break code makes the frame's cells and functions itself.
    if (v->source || !returning_) break;
    if (auto *cell = as<CellVar>(v))
      return shared([&](OutputNode &n) {
        n.kind = OutputNode::NamedTuple; // types.CellType(*contents)
        n.object = PyRef::borrow(cellConstructor());
        if (cell->contents) n.children.push_back(outputOf(cell->contents, outputs, outputIndex));
      });
    return shared([&](OutputNode &n) {
      auto *fn = as<FunctionVar>(v);
      n.kind = OutputNode::NamedTuple; // _xjit_function(code, globals, qualname, ...)
      n.object = PyRef::borrow(functionConstructor());
      auto constant = [](PyObject *o) {
        OutputNode c;
        c.kind = OutputNode::Constant;
        c.object = PyRef::borrow(o);
        return c;
      };
      n.children.push_back(constant(fn->code.get()));
      n.children.push_back(constant(fn->globals.get()));
      OutputNode qualname;
      qualname.kind = OutputNode::Constant;
      qualname.object = check(PyUnicode_FromString(fn->qualname.c_str()), "str");
      n.children.push_back(std::move(qualname));
      n.children.push_back(fn->defaults ? outputOf(fn->defaults, outputs, outputIndex)
                                        : constant(Py_None));
      n.children.push_back(fn->kwdefaults ? outputOf(fn->kwdefaults, outputs, outputIndex)
                                          : constant(Py_None));
      if (fn->closure.empty()) {
        n.children.push_back(constant(Py_None));
      } else {
        OutputNode cells;
        cells.kind = OutputNode::Tuple;
        for (const VarPtr &c : fn->closure)
          cells.children.push_back(outputOf(c, outputs, outputIndex));
        n.children.push_back(std::move(cells));
      }
    });
  default: break;
  }
  switch (v->kind) {
  case VarKind::Cell:
  case VarKind::Iterator:
  case VarKind::Function:
  case VarKind::Bound:
  case VarKind::Partial:
  case VarKind::GradMode:
  case VarKind::GradExit:
  case VarKind::AutocastMode:
  case VarKind::AutocastExit:
  case VarKind::Super:
    if (v->source) return fromSource(*v->source);
    fail("the frame returns a " + typeName(v) + " made inside it");
  case VarKind::Null: break;
  default: break;
  }
  throw BreakError("internal: returning NULL", currentLoc(), true);
}

Capture Analyzer::finish(const VarPtr &result) {
  returning_ = true;
  return finishWith(
      [&](std::vector<Value *> &outputs, std::map<Value *, int64_t> &outputIndex) {
        return outputOf(result, outputs, outputIndex);
      },
      /*sameGradMode=*/true);
}

Capture Analyzer::finishAtBreak(Frame &f) {
  returning_ = false;
  PyCodeObject *co = f.co();
  rewrite::State state;
  state.offset = f.pc;
  // Functions the frame made that are on the stack (a comprehension about to be called): the
  // break code makes them again over its cells, with their defaults as arguments.
  std::vector<const FunctionVar *> made;
  auto describe = [&](const FunctionVar *fn) {
    rewrite::MadeFunction m;
    m.code = fn->code;
    for (const VarPtr &c : fn->closure) {
      int slot = -1;
      for (int i = 0; i < co->co_nlocalsplus; ++i)
        if (f.locals[static_cast<size_t>(i)].get() == c.get()) slot = i;
      if (slot < 0) fail("a function made in the frame closes over cells of another frame");
      m.closure.push_back(slot);
    }
    m.defaults = fn->defaults != nullptr;
    m.kwdefaults = fn->kwdefaults != nullptr;
    return m;
  };
  for (size_t k = 0; k < f.stack.size(); ++k) {
    const VarPtr &v = f.stack[k];
    auto *fn = as<FunctionVar>(v);
    if (fn && !v->source) {
      rewrite::MadeFunction m = describe(fn);
      m.stackSlot = k;
      state.functions.push_back(std::move(m));
      made.push_back(fn);
    }
    state.stack.push_back(v->kind == VarKind::Null       ? rewrite::Slot::Null
                          : v->kind == VarKind::Iterator ? rewrite::Slot::Iterator
                          : fn && !v->source             ? rewrite::Slot::Function
                                                         : rewrite::Slot::Value);
  }
  for (int i = 0; i < co->co_nlocalsplus; ++i) {
    const VarPtr &v = f.locals[static_cast<size_t>(i)];
    auto *cell = as<CellVar>(v);
    state.bound.push_back(cell ? cell->contents != nullptr : v != nullptr);
  }
  // Functions the frame made that live locals hold (a closure defined before the break, called
  // after it): made again by the break code, once per function however many locals hold it,
  // with their defaults as arguments; the resume code receives them as arguments.
  std::vector<const FunctionVar *> localMade;
  for (int slot : rewrite::argumentLocals(co, state)) {
    const VarPtr &v = f.locals[static_cast<size_t>(slot)];
    if (auto *fn = as<FunctionVar>(v); fn && !v->source) {
      rewrite::LocalFunction lf;
      lf.slot = slot;
      for (size_t k = 0; k < state.localFunctions.size() && lf.sameAs < 0; ++k)
        if (f.locals[static_cast<size_t>(state.localFunctions[k].slot)].get() == v.get())
          lf.sameAs = static_cast<int>(k);
      if (lf.sameAs < 0) {
        lf.fn = describe(fn);
        localMade.push_back(fn);
      }
      state.localFunctions.push_back(std::move(lf));
    }
  }
  const std::vector<int> live = rewrite::argumentLocals(co, state);
  const std::vector<int> cells = rewrite::cellArguments(co, state);
  // The first argument, which zero-argument super() reads (rewrite::passesFirstArgument).
  VarPtr first;
  if (rewrite::passesFirstArgument(co) && !f.locals.empty()) {
    first = f.locals[0];
    if (auto *cell = as<CellVar>(first)) first = cell->contents;
    if (!first) fail("zero-argument super() would read an unbound first argument");
  }
  // Lists, dicts and dataclass instances made in the frame are rebuilt once per occurrence:
  // one reachable twice (two locals, a local and a side effect's value, nested in a tuple...)
  // would come back as two objects, and a mutation through one would miss the other.
  // Instances are Shared outputs (one object however often reached): visited once.
  std::map<const Var *, int> seen;
  std::function<void(const VarPtr &)> visit = [&](const VarPtr &v) {
    if (!v) return;
    if (v->kind == VarKind::Instance && ++seen[v.get()] > 1) return;
    const bool mutableContainer = (v->kind == VarKind::List || v->kind == VarKind::Dict ||
                                   v->kind == VarKind::Dataclass || v->kind == VarKind::Instance) &&
                                  !v->source;
    if (mutableContainer && v->kind != VarKind::Instance && ++seen[v.get()] > 1)
      fail("a " + typeName(v) + " made in the frame is reachable twice at the graph break");
    if (auto *t = as<TupleVar>(v))
      for (const VarPtr &i : t->items)
        visit(i);
    if (mutableContainer) {
      if (auto *l = as<ListVar>(v))
        for (const VarPtr &i : l->items())
          visit(i);
      if (auto *d = as<DictVar>(v))
        for (auto &kv : d->items)
          visit(kv.second);
      if (auto *d = as<DataclassVar>(v))
        for (auto &kv : d->fields)
          visit(kv.second);
      if (auto *inst = as<InstanceVar>(v))
        for (auto &kv : inst->attrs)
          visit(kv.second);
    }
    if (auto *it = as<IteratorVar>(v))
      for (size_t i = it->pos; i < it->items.size(); ++i)
        visit(it->items[i]);
    if (auto *b = as<BoundVar>(v)) visit(b->self);
    if (auto *fn = as<FunctionVar>(v)) {
      visit(fn->defaults);
      visit(fn->kwdefaults);
    }
  };
  visit(first);
  for (const VarPtr &v : f.stack)
    visit(v);
  for (int slot : live)
    visit(f.locals[static_cast<size_t>(slot)]);
  for (int slot : cells)
    if (auto *cell = as<CellVar>(f.locals[static_cast<size_t>(slot)])) visit(cell->contents);
  for (const PendingEffect &e : effects_)
    visit(e.value);
  for (const FunctionVar *fn : localMade) {
    visit(fn->defaults);
    visit(fn->kwdefaults);
  }
  auto arguments = [&](std::vector<Value *> &outputs, std::map<Value *, int64_t> &outputIndex) {
    OutputNode args;
    args.kind = OutputNode::Tuple;
    if (first) args.children.push_back(outputOf(first, outputs, outputIndex));
    for (const VarPtr &v : f.stack) {
      if (v->kind == VarKind::Null || (v->kind == VarKind::Function && !v->source)) continue;
      if (auto *it = as<IteratorVar>(v)) { // the rest of a loop: a tuple (GET_ITER on resume)
        std::vector<VarPtr> rest(it->items.begin() + static_cast<long>(it->pos), it->items.end());
        args.children.push_back(
            outputOf(std::make_shared<TupleVar>(std::move(rest)), outputs, outputIndex));
      } else if (v->kind == VarKind::AutocastExit) {
        // The resume code would run the rest of the block without its autocast state.
        fail("graph break inside a `with torch.autocast(...)` block");
      } else if (auto *g = as<GradExitVar>(v)) { // inside `with torch.no_grad()`
        OutputNode n;
        n.kind = OutputNode::NamedTuple;
        n.object = PyRef::borrow(gradModeExitType());
        OutputNode restore;
        restore.kind = OutputNode::Constant;
        restore.object = PyRef::borrow(g->restore ? Py_True : Py_False);
        n.children.push_back(std::move(restore));
        args.children.push_back(std::move(n));
      } else if (auto *b = as<BoundVar>(v); b && !v->source && b->self) {
        OutputNode n;
        n.kind = OutputNode::NamedTuple; // a call of `object` with the children as arguments
        if (as<ObjectVar>(b->func)) {
          // The function the analyzer resolved, bound again: types.MethodType(fn, self). Not
          // getattr(self, name): for super().__init__ that would find the subclass's own
          // __init__ (the frame itself: endless recursion).
          n.object = PyRef::borrow(reinterpret_cast<PyObject *>(&PyMethod_Type));
          n.children.push_back(outputOf(b->func, outputs, outputIndex));
          n.children.push_back(outputOf(b->self, outputs, outputIndex));
        } else {
          // A builtin method loaded for the breaking call (x.sum().item): getattr(self, name).
          n.object = PyRef::borrow(PyDict_GetItemString(PyEval_GetBuiltins(), "getattr"));
          n.children.push_back(outputOf(b->self, outputs, outputIndex));
          OutputNode name;
          name.kind = OutputNode::Constant;
          name.object = check(PyUnicode_FromString(b->name.c_str()), "str");
          n.children.push_back(std::move(name));
        }
        args.children.push_back(std::move(n));
      } else {
        args.children.push_back(outputOf(v, outputs, outputIndex));
      }
    }
    for (int slot : live)
      args.children.push_back(outputOf(f.locals[static_cast<size_t>(slot)], outputs, outputIndex));
    for (int slot : cells) {
      auto *cell = as<CellVar>(f.locals[static_cast<size_t>(slot)]);
      if (!cell) fail("internal: cell slot without a cell at a graph break");
      args.children.push_back(outputOf(cell->contents, outputs, outputIndex));
    }
    for (const FunctionVar *fn : made) {
      if (fn->defaults) args.children.push_back(outputOf(fn->defaults, outputs, outputIndex));
      if (fn->kwdefaults) args.children.push_back(outputOf(fn->kwdefaults, outputs, outputIndex));
    }
    for (const FunctionVar *fn : localMade) {
      if (fn->defaults) args.children.push_back(outputOf(fn->defaults, outputs, outputIndex));
      if (fn->kwdefaults) args.children.push_back(outputOf(fn->kwdefaults, outputs, outputIndex));
    }
    return args;
  };
  Capture c = finishWith(arguments, /*sameGradMode=*/false);
  BreakPoint bp;
  bp.offset = f.pc;
  bp.breakCode = rewrite::makeBreakCode(co, state);
  bp.gradEnabled = gradEnabled_;
  c.breakPoint = std::move(bp);
  return c;
}

Capture Analyzer::finishWith(
    const std::function<OutputNode(std::vector<Value *> &, std::map<Value *, int64_t> &)> &result,
    bool sameGradMode) {
  PyRef enabled = check(PyObject_CallMethod(torchModule(), "is_grad_enabled", nullptr),
                        "torch.is_grad_enabled()");
  bool initialGrad = enabled.get() == Py_True;
  Capture c;
  // The graph runs without autograd either way; the driver sets the mode the frame leaves.
  if (sameGradMode && gradEnabled_ != initialGrad) c.gradModeAtExit = gradEnabled_ ? 1 : 0;
  c.autogradFree = !recordedForAutograd_;
  c.autocastKey = entryAutocast_.key();
  c.matmulBf16 = ambientMatmulBf16();
  c.cutsGradient = cutsGradient_;
  c.gradLeaves = gradLeaves_;
  std::vector<Value *> outputs;
  std::map<Value *, int64_t> outputIndex;
  sharedOutputs_.clear();
  outputRoots_.clear();

  // In-place writes to tensors the caller can see come first: attribute assignments replayed
  // after them must not redirect where they land.
  for (const auto &t : inputTensors_) {
    if (!t->mutated) continue;
    SideEffect e;
    e.kind = SideEffect::TensorCopy;
    e.target = *t->source;
    OutputNode n;
    n.kind = OutputNode::GraphOutput;
    Value *data = t->leafData ? t->leafData : t->value; // a leaf gets its data, not its gradient
    auto it = outputIndex.find(data);
    if (it == outputIndex.end()) {
      it = outputIndex.emplace(data, static_cast<int64_t>(outputs.size())).first;
      outputs.push_back(data);
      outputRoots_.push_back(t.get());
    }
    n.index = it->second;
    e.value = std::move(n);
    c.sideEffects.push_back(std::move(e));
  }
  for (const PendingEffect &p : effects_) {
    SideEffect e;
    e.kind = p.kind;
    e.target = p.target;
    e.name = p.name;
    e.key = p.key;
    e.value = outputOf(p.value, outputs, outputIndex);
    c.sideEffects.push_back(std::move(e));
  }
  c.result = result(outputs, outputIndex);

  builder_.setInsertionPoint(graph_->body());
  builder_.setLoc(currentLoc());
  builder_.createWithTypes("return", outputs, {});
  outputRoots_.resize(outputs.size(), nullptr);
  std::map<const Var *, int> storageNumbers;
  for (const Var *root : outputRoots_)
    c.outputStorages.push_back(
        root ? storageNumbers.emplace(root, int(storageNumbers.size())).first->second : -1);

  for (const auto &t : inputTensors_) {
    if (t->intCarrier) c.intInputs.push_back(c.inputs.size());
    if (t->floatCarrier) c.floatInputs.push_back(c.inputs.size());
    c.inputs.push_back(*t->source);
  }
  // A tensor the graph writes must not share memory with another input the graph reads or
  // writes (it would read that one stale): checked at capture (a graph break), guarded here
  // for later calls, in one guard over all of them (an optimizer step writes hundreds).
  {
    std::vector<Source> written, read;
    for (const auto &t : inputTensors_)
      if (t->mutated)
        written.push_back(*t->source);
      else if (t->usedInGraph && !t->intCarrier && !t->floatCarrier)
        read.push_back(*t->source);
    if (!written.empty() && written.size() + read.size() >= 2) {
      Guard g;
      g.kind = Guard::NoOverlap;
      g.source = written.front();
      g.length = static_cast<int64_t>(written.size());
      g.others.assign(written.begin() + 1, written.end());
      g.others.insert(g.others.end(), read.begin(), read.end());
      g.description = written.size() == 1
                          ? sourceKey(g.source) + " shares no memory with the other " +
                                std::to_string(read.size()) + " tensor input(s)"
                          : "the " + std::to_string(written.size()) +
                                " tensor inputs written in place share no memory with each "
                                "other or with the other " +
                                std::to_string(read.size()) + " tensor input(s)";
      guards_.push_back(std::move(g));
    }
  }
  for (Guard &g : guards_) {
    if (g.kind != Guard::TensorMatch) continue;
    for (const auto &t : inputTensors_)
      if (t->stridesRead && sourceKey(*t->source) == sourceKey(g.source))
        g.strides = t->inputStrides;
  }
  Guard grad;
  grad.kind = Guard::GlobalStateIs;
  grad.length = initialGrad ? 1 : 0;
  grad.description = std::string("torch.is_grad_enabled() == ") + (initialGrad ? "True" : "False");
  guards_.push_back(std::move(grad));
  c.guards = std::move(guards_);
  c.fallbackCallables = std::move(fallbacks_);
  c.graph = std::move(graph_);
  return c;
}

} // namespace xjit::frontend
