// The analyzer's entry point and its instruction loop: one symbolic CPython 3.11 frame at a time
// (the captured frame, and each inlined callee recursively).
//
// try/except/finally and with-blocks: only the normal path is followed. The analysis never
// skips an exception (whatever would raise in Python is a graph break), so exception handlers
// are never entered; an exception at run time (from data, e.g. an index out of range) makes the
// driver rerun the frame in Python, before any side effect was replayed.
#include "analyzer.h"
#include "bytecode_rewrite.h"

#include "xjit/ir/diagnostics.h"

#include <atomic>
#include <cstdio>

namespace xjit::frontend {

using namespace bc;

namespace {

std::string localName(PyCodeObject *co, int i) {
  if (i < 0 || i >= PyTuple_GET_SIZE(co->co_localsplusnames)) return "?";
  return utf8(PyTuple_GET_ITEM(co->co_localsplusnames, i));
}

std::string name(PyCodeObject *co, int i) {
  if (i < 0 || i >= PyTuple_GET_SIZE(co->co_names)) return "?";
  return utf8(PyTuple_GET_ITEM(co->co_names, i));
}

std::atomic<int> nextErrorSerial{0};

} // namespace

// ---------------------------------------------------------------------------------------------
// Analyzer setup

Analyzer::Analyzer(const FrameView &frame, const AnalyzeOptions &opts,
                   const std::set<std::string> &specialized)
    : view_(frame), opts_(opts), specialized_(specialized),
      graph_(std::make_unique<Graph>(utf8(frame.code->co_qualname))), builder_(graph_->body()) {
  PyRef enabled = check(PyObject_CallMethod(torchModule(), "is_grad_enabled", nullptr),
                        "torch.is_grad_enabled()");
  gradEnabled_ = gradEnabledAtEntry_ = enabled.get() == Py_True;
  std::optional<AutocastState> autocast = ambientAutocast(&autocastRefusal_);
  if (autocast) autocast_ = entryAutocast_ = *autocast;
}

Analyzer::~Analyzer() = default;

SourceLoc Analyzer::currentLoc() const {
  if (!frame_)
    return {utf8(view_.code->co_filename), view_.code->co_firstlineno,
            utf8(view_.code->co_qualname)};
  return {frame_->filename, frame_->line, frame_->qualname};
}

void Analyzer::fail(const std::string &reason) const { failWhile(reason, {}); }

void Analyzer::failWhile(const std::string &reason, std::vector<Guard> guards) const {
  // Where it happened, with the chain of inlined calls that led there (innermost first).
  std::string chain;
  int shown = 0;
  for (const Frame *f = frame_ ? frame_->parent : nullptr; f; f = f->parent) {
    if (shown++ == 6) {
      chain += " <- ...";
      break;
    }
    std::string file = f->filename.substr(f->filename.find_last_of('/') + 1);
    chain += (chain.empty() ? "" : " <- ") + file + ":" + std::to_string(f->line);
  }
  BreakError e(chain.empty() ? reason : reason + " [called from " + chain + "]", currentLoc());
  const Frame *root = frame_;
  while (root && root->parent)
    root = root->parent;
  if (root && root->depth == 0) {
    auto it = visits_.find(root->pc);
    e.rootPc = root->pc;
    e.rootVisit = it == visits_.end() ? 0 : it->second;
  }
  e.guards = std::move(guards);
  throw e;
}

std::shared_ptr<const DecodedCode> Analyzer::decodedFor(PyObject *code) {
  auto it = decoded_.find(code);
  if (it != decoded_.end()) return it->second;
  auto d = std::make_shared<const DecodedCode>(decode(reinterpret_cast<PyCodeObject *>(code)));
  keepAlive_.push_back(PyRef::borrow(code)); // the map is keyed by the pointer
  decoded_.emplace(code, d);
  return d;
}

bool Analyzer::madeBeforeTheBreak(PyObject *o) const {
  PyCodeObject *co = view_.code;
  if (!PyFunction_Check(o) || !rewrite::isResumeCode(co) || !view_.function) return false;
  if (PyFunction_GET_GLOBALS(o) != view_.globals) return false;
  // Its code is one of the frame's own nested functions...
  PyObject *code = PyFunction_GET_CODE(o);
  bool nested = false;
  for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(co->co_consts) && !nested; ++k)
    nested = PyTuple_GET_ITEM(co->co_consts, k) == code;
  if (!nested) return false;
  // ... and its cells are the frame's cells (the resume code's free variables).
  PyObject *closure = PyFunction_GET_CLOSURE(o);
  PyObject *own = PyFunction_GetClosure(view_.function);
  for (Py_ssize_t k = 0; closure && k < PyTuple_GET_SIZE(closure); ++k) {
    bool found = false;
    for (Py_ssize_t j = 0; own && j < PyTuple_GET_SIZE(own) && !found; ++j)
      found = PyTuple_GET_ITEM(own, j) == PyTuple_GET_ITEM(closure, k);
    if (!found) return false;
  }
  return true;
}

Capture Analyzer::run() {
  PyCodeObject *co = view_.code;
  if (co->co_flags & (kCoGenerator | kCoCoroutine | kCoAsyncGenerator | kCoIterableCoroutine))
    fail("generator or coroutine function");
  if (!autocastRefusal_.empty()) fail(autocastRefusal_);
  Frame f;
  f.code = PyRef::borrow(reinterpret_cast<PyObject *>(co));
  f.decoded = decodedFor(f.code.get());
  f.globals = PyRef::borrow(view_.globals);
  f.builtins = PyRef::borrow(view_.builtins);
  f.filename = utf8(co->co_filename);
  f.qualname = utf8(co->co_qualname);
  f.line = co->co_firstlineno;
  f.locals.resize(static_cast<size_t>(co->co_nlocalsplus));
  frame_ = &f;
  builder_.setLoc(currentLoc());
  // Arguments (and any other slot already set) are read from the frame's local slots.
  const int varkwSlot = (co->co_flags & kCoVarkeywords) ? co->co_argcount + co->co_kwonlyargcount +
                                                              ((co->co_flags & kCoVarargs) ? 1 : 0)
                                                        : -1;
  // Free-variable slots are filled from the closure by COPY_FREE_VARS below.
  std::vector<int> madeBefore; // resume code: arguments that are functions the frame made
  for (int i = 0; i < co->co_nlocalsplus - co->co_nfreevars && i < view_.nlocalsplus; ++i) {
    PyObject *o = view_.localsplus[i];
    if (!o) continue;
    if (madeBeforeTheBreak(o)) {
      madeBefore.push_back(i);
      continue;
    }
    Source src{SourceStep{SourceStep::Local, i, localName(co, i), {}}};
    VarPtr v = wrapSourced(o, src);
    // The **kwargs dict is made fresh for each call: writing to it is no side effect.
    if (i == varkwSlot) {
      auto *d = as<DictVar>(v);
      if (!d) fail("internal: **kwargs is not a dict");
      auto fresh = std::make_shared<DictVar>();
      fresh->items = d->items;
      v = fresh;
    }
    f.locals[static_cast<size_t>(i)] = v;
  }
  // Free variables: the function's closure cells (COPY_FREE_VARS moves them into the slots).
  int nfree = co->co_nfreevars;
  if (nfree > 0) {
    PyObject *closure = view_.function ? PyFunction_GetClosure(view_.function) : nullptr;
    if (!closure || !PyTuple_Check(closure) || PyTuple_GET_SIZE(closure) != nfree)
      fail("closure of the captured function is unavailable");
    for (int i = 0; i < nfree; ++i) {
      int slot = co->co_nlocalsplus - nfree + i;
      PyObject *cell = PyTuple_GET_ITEM(closure, i);
      PyObject *contents = PyCell_GET(cell);
      VarPtr c =
          contents
              ? wrapSourced(contents,
                            Source{SourceStep{SourceStep::Cell, slot, localName(co, slot), {}}})
              : nullptr;
      // The cell itself has a source too, so that a write to it (nonlocal n; n += 1, or a
      // variable the code after a graph break reads through the cell) is replayed on the
      // caller's cell instead of being lost.
      auto cellVar = std::make_shared<CellVar>(c);
      cellVar->source = Source{SourceStep{SourceStep::CellObject, slot, localName(co, slot), {}}};
      f.closure.push_back(std::move(cellVar));
    }
  }
  // Functions the frame made before a graph break, passed on by the break code (one object per
  // function, as in Python: `return f` after the break returns it): each a FunctionVar over
  // this frame's own cells, with its source, guarded by its code rather than its identity (a
  // new object every call). Locals holding the same object share one FunctionVar (`f is g`).
  std::map<PyObject *, VarPtr> madeVars;
  for (int i : madeBefore) {
    PyObject *o = view_.localsplus[i];
    VarPtr &v = madeVars[o];
    if (!v) {
      Source src{SourceStep{SourceStep::Local, i, localName(co, i), {}}};
      guardType(src, reinterpret_cast<PyObject *>(&PyFunction_Type));
      guardId(plus(src, attrStep("__code__")), PyFunction_GET_CODE(o));
      auto fn = std::make_shared<FunctionVar>();
      fn->code = PyRef::borrow(PyFunction_GET_CODE(o));
      fn->globals = PyRef::borrow(view_.globals);
      fn->qualname = utf8(reinterpret_cast<PyCodeObject *>(fn->code.get())->co_qualname);
      PyObject *defaults = PyFunction_GET_DEFAULTS(o);
      VarPtr d = wrapSourced(defaults ? defaults : Py_None, plus(src, attrStep("__defaults__")));
      if (defaults) fn->defaults = d;
      PyObject *kwdefaults = PyFunction_GET_KW_DEFAULTS(o);
      VarPtr kd =
          wrapSourced(kwdefaults ? kwdefaults : Py_None, plus(src, attrStep("__kwdefaults__")));
      if (kwdefaults) fn->kwdefaults = kd;
      PyObject *closure = PyFunction_GET_CLOSURE(o);
      PyObject *own = PyFunction_GetClosure(view_.function);
      for (Py_ssize_t k = 0; closure && k < PyTuple_GET_SIZE(closure); ++k)
        for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(own); ++j)
          if (PyTuple_GET_ITEM(own, j) == PyTuple_GET_ITEM(closure, k))
            fn->closure.push_back(f.closure.at(static_cast<size_t>(j)));
      fn->source = src;
      v = fn;
    }
    f.locals[static_cast<size_t>(i)] = v;
  }
  VarPtr result;
  try {
    result = runFrame(f);
  } catch (const StopCapture &) {
    Capture c = finishAtBreak(f);
    frame_ = nullptr;
    return c;
  }
  Capture c = finish(result); // still located at the frame's RETURN_VALUE
  frame_ = nullptr;
  return c;
}

// ---------------------------------------------------------------------------------------------
// Inlining

VarPtr Analyzer::inlineCall(PyObject *code, PyObject *globals,
                            const std::optional<Source> &globalsSource, bool trustedGlobals,
                            VarPtr defaults, VarPtr kwdefaults, std::vector<VarPtr> closure,
                            const Args &args, const std::string &qualname) {
  auto *co = reinterpret_cast<PyCodeObject *>(code);
  int depth = frame_ ? frame_->depth + 1 : 0;
  if (depth > opts_.inlineDepth)
    fail("call depth over the inlining limit (" + std::to_string(opts_.inlineDepth) + ") calling " +
         qualname);
  if (co->co_flags & (kCoCoroutine | kCoAsyncGenerator | kCoIterableCoroutine))
    fail("call to coroutine function " + qualname);
  Frame f;
  f.code = PyRef::borrow(code);
  f.decoded = decodedFor(code);
  f.globals = PyRef::borrow(globals);
  PyObject *builtins = PyDict_GetItemString(globals, "__builtins__");
  if (builtins && PyModule_Check(builtins)) builtins = PyModule_GetDict(builtins);
  f.builtins = PyRef::borrow(builtins && PyDict_Check(builtins) ? builtins : view_.builtins);
  f.globalsSource = globalsSource;
  f.trustedGlobals = trustedGlobals;
  f.filename = utf8(co->co_filename);
  f.qualname = utf8(co->co_qualname);
  f.line = co->co_firstlineno;
  f.depth = depth;
  f.parent = frame_;
  f.generator = (co->co_flags & kCoGenerator) != 0;
  f.closure = std::move(closure);
  f.locals.resize(static_cast<size_t>(co->co_nlocalsplus));
  if (static_cast<int>(f.closure.size()) != co->co_nfreevars)
    fail("closure size mismatch calling " + qualname);

  // Argument binding, as CPython's positional/keyword rules.
  const int argc = co->co_argcount, posonly = co->co_posonlyargcount,
            kwonly = co->co_kwonlyargcount;
  const bool hasVarargs = co->co_flags & kCoVarargs, hasVarkw = co->co_flags & kCoVarkeywords;
  const int varargsSlot = argc + kwonly, varkwSlot = argc + kwonly + (hasVarargs ? 1 : 0);
  auto fnName = [&] { return qualname + "()"; };
  size_t npos = args.pos.size();
  for (size_t i = 0; i < npos && static_cast<int>(i) < argc; ++i)
    f.locals[i] = args.pos[i];
  if (static_cast<int>(npos) > argc) {
    if (!hasVarargs)
      fail(fnName() + " takes " + std::to_string(argc) + " positional arguments but " +
           std::to_string(npos) + " were given");
  }
  if (hasVarargs) {
    std::vector<VarPtr> rest;
    for (size_t i = static_cast<size_t>(argc); i < npos; ++i)
      rest.push_back(args.pos[i]);
    f.locals[static_cast<size_t>(varargsSlot)] = std::make_shared<TupleVar>(std::move(rest));
  }
  std::shared_ptr<DictVar> varkw;
  if (hasVarkw) {
    varkw = std::make_shared<DictVar>();
    f.locals[static_cast<size_t>(varkwSlot)] = varkw;
  }
  for (const auto &[k, v] : args.kw) {
    int slot = -1;
    for (int j = posonly; j < argc + kwonly; ++j)
      if (localName(co, j) == k) slot = j;
    if (slot < 0) {
      if (!varkw) fail(fnName() + " got an unexpected keyword argument '" + k + "'");
      varkw->items.emplace_back(check(PyUnicode_FromString(k.c_str()), "str"), v);
      continue;
    }
    if (f.locals[static_cast<size_t>(slot)])
      fail(fnName() + " got multiple values for argument '" + k + "'");
    f.locals[static_cast<size_t>(slot)] = v;
  }
  std::vector<VarPtr> defs = defaults ? sequenceItems(defaults, "defaults") : std::vector<VarPtr>{};
  int firstDefault = argc - static_cast<int>(defs.size());
  for (int i = 0; i < argc; ++i) {
    if (f.locals[static_cast<size_t>(i)]) continue;
    if (i >= firstDefault) {
      f.locals[static_cast<size_t>(i)] = defs[static_cast<size_t>(i - firstDefault)];
      continue;
    }
    fail(fnName() + " missing required argument '" + localName(co, i) + "'");
  }
  for (int i = argc; i < argc + kwonly; ++i) {
    if (f.locals[static_cast<size_t>(i)]) continue;
    auto *kd = as<DictVar>(kwdefaults);
    std::string n = localName(co, i);
    bool found = false;
    if (kd)
      for (auto &[key, v] : kd->items)
        if (utf8(key.get()) == n) {
          f.locals[static_cast<size_t>(i)] = v;
          found = true;
        }
    if (!found) fail(fnName() + " missing required keyword-only argument '" + n + "'");
  }

  Frame *saved = frame_;
  frame_ = &f;
  builder_.setLoc(currentLoc());
  VarPtr result;
  try {
    result = runFrame(f);
  } catch (...) {
    frame_ = saved;
    throw;
  }
  frame_ = saved;
  builder_.setLoc(currentLoc());
  if (f.generator) return std::make_shared<IteratorVar>(std::move(f.yields));
  return result;
}

// ---------------------------------------------------------------------------------------------
// The instruction loop

VarPtr Analyzer::runFrame(Frame &f) {
  const DecodedCode &code = *f.decoded;
  PyCodeObject *co = f.co();
  auto &st = f.stack;
  auto pop = [&]() -> VarPtr {
    if (st.empty()) throw BreakError("internal: value stack underflow", currentLoc(), true);
    VarPtr v = std::move(st.back());
    st.pop_back();
    return v;
  };
  auto peek = [&](size_t i) -> VarPtr & { // 1 = top of stack
    if (i == 0 || i > st.size())
      throw BreakError("internal: value stack underflow", currentLoc(), true);
    return st[st.size() - i];
  };
  auto push = [&](VarPtr v) { st.push_back(std::move(v)); };
  auto constAt = [&](int i) -> PyObject * {
    if (i < 0 || i >= PyTuple_GET_SIZE(co->co_consts)) fail("bad constant index");
    return PyTuple_GET_ITEM(co->co_consts, i);
  };
  auto local = [&](int i) -> VarPtr & {
    if (i < 0 || i >= static_cast<int>(f.locals.size())) fail("bad local slot");
    return f.locals[static_cast<size_t>(i)];
  };
  auto cellAt = [&](int i) -> CellVar * {
    auto *c = as<CellVar>(local(i));
    if (!c) fail("internal: slot " + localName(co, i) + " holds no cell");
    return c;
  };

  const Instr *in = code.instrs.empty() ? nullptr : &code.instrs[0];
  while (in) {
    if (--budget_ < 0) fail("the unrolled code runs over 2,000,000 instructions");
    f.pc = in->offset;
    if (in->line > 0 && in->line != f.line) {
      f.line = in->line;
      builder_.setLoc(currentLoc());
    }
    if (f.depth == 0) {
      const int visit = ++visits_[in->offset];
      if (stopAt && stopAt->offset == in->offset && stopAt->visit == visit) throw StopCapture{};
    }
    int next = in->next;
    const int arg = in->arg;
    switch (in->opcode) {
    case NOP:
    case RESUME:
    case PRECALL:
    case CACHE: break;
    case POP_TOP: pop(); break;
    case PUSH_NULL: push(std::make_shared<NullVar>()); break;
    case COPY: push(peek(static_cast<size_t>(arg))); break;
    case SWAP: std::swap(peek(1), peek(static_cast<size_t>(arg))); break;

    // ---- locals, constants, globals, cells ----
    case LOAD_FAST: {
      VarPtr v = local(arg);
      if (!v) fail("local variable '" + localName(co, arg) + "' referenced before assignment");
      push(v);
      break;
    }
    case STORE_FAST: local(arg) = pop(); break;
    case DELETE_FAST:
      if (!local(arg)) fail("deleting unbound local '" + localName(co, arg) + "'");
      local(arg) = nullptr;
      break;
    case LOAD_CONST: push(constant(constAt(arg))); break;
    case LOAD_GLOBAL:
      if (arg & 1) push(std::make_shared<NullVar>());
      push(loadGlobal(f, name(co, arg >> 1)));
      break;
    case STORE_GLOBAL: {
      VarPtr v = pop();
      std::string n = name(co, arg);
      globalOverlay[{f.globals.get(), n}] = v;
      if (!f.globalsSource) {
        recordEffect({SideEffect::SetGlobal, {}, n, {}, v});
      } else {
        recordEffect({SideEffect::SetItem, *f.globalsSource, n,
                      check(PyUnicode_FromString(n.c_str()), "str"), v});
      }
      break;
    }
    case MAKE_CELL: {
      VarPtr &slot = local(arg);
      slot = std::make_shared<CellVar>(slot);
      break;
    }
    case COPY_FREE_VARS: {
      int n = arg, offset = co->co_nlocalsplus - n;
      if (static_cast<int>(f.closure.size()) != n) fail("internal: closure size mismatch");
      for (int i = 0; i < n; ++i)
        local(offset + i) = f.closure[static_cast<size_t>(i)];
      break;
    }
    case LOAD_CLOSURE:
      cellAt(arg);
      push(local(arg));
      break;
    case LOAD_DEREF: {
      CellVar *c = cellAt(arg);
      if (!c->contents)
        fail("free variable '" + localName(co, arg) + "' referenced before assignment");
      push(c->contents);
      break;
    }
    case STORE_DEREF: {
      CellVar *c = cellAt(arg);
      c->contents = pop();
      if (c->source) {
        if (c->source->back().kind == SourceStep::Cell)
          fail("assignment to a nonlocal variable of the captured function");
        recordEffect({SideEffect::SetAttr, *c->source, "cell_contents", {}, c->contents});
      }
      break;
    }

    // ---- attributes and calls ----
    case LOAD_ATTR: {
      VarPtr obj = pop();
      push(getAttr(obj, name(co, arg)));
      break;
    }
    case STORE_ATTR: {
      VarPtr obj = pop();
      VarPtr v = pop();
      setAttr(obj, name(co, arg), v);
      break;
    }
    case LOAD_METHOD: {
      VarPtr obj = pop();
      auto [first, second] = loadMethod(obj, name(co, arg));
      push(first);
      push(second);
      break;
    }
    case KW_NAMES: f.kwnames = PyRef::borrow(constAt(arg)); break;
    case CALL: {
      size_t argc = static_cast<size_t>(arg);
      if (st.size() < argc + 2)
        throw BreakError("internal: stack underflow in CALL", currentLoc(), true);
      size_t base = st.size() - argc - 2;
      VarPtr callable;
      std::vector<VarPtr> all;
      if (st[base]->kind == VarKind::Null) {
        callable = st[base + 1];
        all.assign(st.begin() + static_cast<long>(base + 2), st.end());
      } else {
        callable = st[base];
        all.assign(st.begin() + static_cast<long>(base + 1), st.end());
      }
      st.resize(base);
      Args a;
      size_t nkw = f.kwnames ? static_cast<size_t>(PyTuple_GET_SIZE(f.kwnames.get())) : 0;
      if (nkw > all.size()) fail("internal: bad KW_NAMES");
      a.pos.assign(all.begin(), all.end() - static_cast<long>(nkw));
      for (size_t i = 0; i < nkw; ++i)
        a.kw.emplace_back(utf8(PyTuple_GET_ITEM(f.kwnames.get(), static_cast<Py_ssize_t>(i))),
                          all[all.size() - nkw + i]);
      f.kwnames = PyRef();
      push(call(callable, a));
      break;
    }
    case CALL_FUNCTION_EX: {
      VarPtr kwargs = (arg & 1) ? pop() : nullptr;
      VarPtr callargs = pop();
      VarPtr fn = pop();
      VarPtr null = pop();
      if (null->kind != VarKind::Null) fail("internal: CALL_FUNCTION_EX without NULL");
      Args a;
      a.pos = sequenceItems(callargs, "*args");
      if (kwargs) {
        auto *d = as<DictVar>(kwargs);
        if (!d) fail("**kwargs of type " + typeName(kwargs));
        for (auto &[k, v] : d->items) {
          if (!PyUnicode_Check(k.get())) fail("keywords must be strings");
          a.kw.emplace_back(utf8(k.get()), v);
        }
      }
      push(call(fn, a));
      break;
    }
    case MAKE_FUNCTION: push(makeFunction(f, arg)); break;

    // ---- operators ----
    case BINARY_OP: {
      VarPtr b = pop();
      VarPtr a = pop();
      push(binaryOp(arg, a, b));
      break;
    }
    case COMPARE_OP: {
      VarPtr b = pop();
      VarPtr a = pop();
      push(compareOp(arg, a, b));
      break;
    }
    case IS_OP: {
      VarPtr b = pop();
      VarPtr a = pop();
      push(boolean(isSame(a, b) != (arg != 0)));
      break;
    }
    case CONTAINS_OP: {
      VarPtr container = pop();
      VarPtr item = pop();
      push(boolean(contains(container, item) != (arg != 0)));
      break;
    }
    case UNARY_POSITIVE:
    case UNARY_NEGATIVE:
    case UNARY_NOT:
    case UNARY_INVERT: push(unaryOp(in->opcode, pop())); break;
    case BINARY_SUBSCR: {
      VarPtr key = pop();
      VarPtr obj = pop();
      push(getItem(obj, key));
      break;
    }
    case STORE_SUBSCR: {
      VarPtr key = pop();
      VarPtr obj = pop();
      VarPtr v = pop();
      setItem(obj, key, v);
      break;
    }
    case DELETE_SUBSCR: {
      VarPtr key = pop();
      VarPtr obj = pop();
      delItem(obj, key);
      break;
    }

    // ---- building containers ----
    case BUILD_TUPLE:
    case BUILD_LIST: {
      size_t n = static_cast<size_t>(arg);
      if (st.size() < n) throw BreakError("internal: stack underflow", currentLoc(), true);
      std::vector<VarPtr> items(st.end() - static_cast<long>(n), st.end());
      st.resize(st.size() - n);
      if (in->opcode == BUILD_TUPLE)
        push(std::make_shared<TupleVar>(std::move(items)));
      else
        push(std::make_shared<ListVar>(std::move(items)));
      break;
    }
    case BUILD_SET: {
      size_t n = static_cast<size_t>(arg);
      if (st.size() < n) throw BreakError("internal: stack underflow", currentLoc(), true);
      std::vector<VarPtr> items(st.end() - static_cast<long>(n), st.end());
      st.resize(st.size() - n);
      push(makeFrameSet(items));
      break;
    }
    case SET_ADD: {
      VarPtr v = pop();
      addToFrameSet(peek(static_cast<size_t>(arg)), v);
      break;
    }
    case SET_UPDATE: {
      VarPtr seq = pop();
      VarPtr set = peek(static_cast<size_t>(arg));
      for (VarPtr &v : iterate(seq))
        addToFrameSet(set, v);
      break;
    }
    case LIST_TO_TUPLE: {
      VarPtr l = pop();
      push(std::make_shared<TupleVar>(sequenceItems(l, "list")));
      break;
    }
    case LIST_APPEND: {
      VarPtr v = pop();
      auto *l = as<ListVar>(peek(static_cast<size_t>(arg)));
      if (!l) fail("internal: LIST_APPEND on a non-list");
      l->append(v);
      break;
    }
    case LIST_EXTEND: {
      VarPtr seq = pop();
      auto *l = as<ListVar>(peek(static_cast<size_t>(arg)));
      if (!l) fail("internal: LIST_EXTEND on a non-list");
      for (VarPtr &v : iterate(seq))
        l->append(v);
      break;
    }
    case BUILD_MAP: {
      auto d = std::make_shared<DictVar>();
      size_t n = static_cast<size_t>(arg);
      if (st.size() < 2 * n) throw BreakError("internal: stack underflow", currentLoc(), true);
      std::vector<VarPtr> kv(st.end() - static_cast<long>(2 * n), st.end());
      st.resize(st.size() - 2 * n);
      VarPtr dv = d;
      for (size_t i = 0; i < n; ++i)
        setItem(dv, kv[2 * i], kv[2 * i + 1]);
      push(dv);
      break;
    }
    case BUILD_CONST_KEY_MAP: {
      VarPtr keys = pop();
      std::vector<VarPtr> ks = sequenceItems(keys, "keys");
      size_t n = static_cast<size_t>(arg);
      if (st.size() < n || ks.size() != n)
        throw BreakError("internal: BUILD_CONST_KEY_MAP", currentLoc(), true);
      std::vector<VarPtr> vs(st.end() - static_cast<long>(n), st.end());
      st.resize(st.size() - n);
      VarPtr dv = std::make_shared<DictVar>();
      for (size_t i = 0; i < n; ++i)
        setItem(dv, ks[i], vs[i]);
      push(dv);
      break;
    }
    case MAP_ADD: {
      VarPtr v = pop();
      VarPtr k = pop();
      setItem(peek(static_cast<size_t>(arg)), k, v);
      break;
    }
    case DICT_UPDATE:
    case DICT_MERGE: {
      VarPtr other = pop();
      VarPtr target = peek(static_cast<size_t>(arg));
      auto *o = as<DictVar>(other);
      if (!o) {
        // A known mapping object (e.g. a dict global): read it through the generic path.
        VarPtr items = callMethod(other, "items", {});
        for (VarPtr &kv : iterate(items)) {
          std::vector<VarPtr> p = sequenceItems(kv, "item");
          setItem(target, p.at(0), p.at(1));
        }
        break;
      }
      auto *t = as<DictVar>(target);
      for (auto &[k, v] : o->items) {
        if (in->opcode == DICT_MERGE && t)
          for (auto &[tk, tv] : t->items)
            if (PyObject_RichCompareBool(tk.get(), k.get(), Py_EQ) == 1)
              fail("got multiple values for keyword argument");
        setItem(target, constant(k.get()), v);
      }
      break;
    }
    case BUILD_SLICE: {
      VarPtr step = arg == 3 ? pop() : none();
      VarPtr stop = pop();
      VarPtr start = pop();
      push(std::make_shared<SliceVar>(start, stop, step));
      break;
    }
    case BUILD_STRING: {
      size_t n = static_cast<size_t>(arg);
      std::string s;
      std::vector<VarPtr> parts(st.end() - static_cast<long>(n), st.end());
      st.resize(st.size() - n);
      for (VarPtr &p : parts) {
        PyRef o = asPython(p);
        if (!o || !PyUnicode_Check(o.get())) fail("string built from a non-constant value");
        s += utf8(o.get());
      }
      push(constantSteal(PyUnicode_FromStringAndSize(s.data(), static_cast<Py_ssize_t>(s.size()))));
      break;
    }
    case FORMAT_VALUE: {
      VarPtr spec = (arg & 4) ? pop() : nullptr;
      VarPtr v = pop();
      push(formatValue(v, arg & 3, spec));
      break;
    }
    case UNPACK_SEQUENCE: {
      std::vector<VarPtr> items = sequenceItems(pop(), "unpacking");
      if (items.size() != static_cast<size_t>(arg))
        fail("unpacking " + std::to_string(items.size()) + " values into " + std::to_string(arg));
      for (auto it = items.rbegin(); it != items.rend(); ++it)
        push(*it);
      break;
    }
    case UNPACK_EX: {
      std::vector<VarPtr> items = sequenceItems(pop(), "unpacking");
      size_t before = static_cast<size_t>(arg & 0xFF), after = static_cast<size_t>(arg >> 8);
      if (items.size() < before + after) fail("not enough values to unpack");
      for (size_t i = 0; i < after; ++i)
        push(items[items.size() - 1 - i]);
      push(std::make_shared<ListVar>(std::vector<VarPtr>(items.begin() + static_cast<long>(before),
                                                         items.end() - static_cast<long>(after))));
      for (size_t i = before; i-- > 0;)
        push(items[i]);
      break;
    }
    case GET_LEN: push(integer(length(peek(1)))); break;

    // ---- control flow ----
    case JUMP_FORWARD:
    case JUMP_BACKWARD:
    case JUMP_BACKWARD_NO_INTERRUPT: next = in->target; break;
    case POP_JUMP_FORWARD_IF_FALSE:
    case POP_JUMP_BACKWARD_IF_FALSE:
      if (!truthy(pop())) next = in->target;
      break;
    case POP_JUMP_FORWARD_IF_TRUE:
    case POP_JUMP_BACKWARD_IF_TRUE:
      if (truthy(pop())) next = in->target;
      break;
    case POP_JUMP_FORWARD_IF_NONE:
    case POP_JUMP_BACKWARD_IF_NONE:
    case POP_JUMP_FORWARD_IF_NOT_NONE:
    case POP_JUMP_BACKWARD_IF_NOT_NONE: {
      VarPtr v = pop();
      auto *o = as<ObjectVar>(v);
      bool isNone = o && o->obj.get() == Py_None;
      bool wantNone =
          in->opcode == POP_JUMP_FORWARD_IF_NONE || in->opcode == POP_JUMP_BACKWARD_IF_NONE;
      if (isNone == wantNone) next = in->target;
      break;
    }
    case JUMP_IF_FALSE_OR_POP:
      if (!truthy(peek(1)))
        next = in->target;
      else
        pop();
      break;
    case JUMP_IF_TRUE_OR_POP:
      if (truthy(peek(1)))
        next = in->target;
      else
        pop();
      break;
    case GET_ITER: push(makeIterator(pop())); break;
    case FOR_ITER: {
      auto *it = as<IteratorVar>(peek(1));
      // A real iterator object (e.g. handed to a resume function): its items are unknown.
      if (!it) fail("iteration over a " + typeName(peek(1)) + " the analyzer cannot see into");
      if (it->pos < it->items.size()) {
        push(it->items[it->pos++]);
      } else {
        pop();
        next = in->target;
      }
      break;
    }
    case RETURN_VALUE: return pop();
    case RETURN_GENERATOR:
      if (!f.generator) fail("generator");
      push(none()); // the value sent by the first next(); POP_TOP discards it
      break;
    case YIELD_VALUE:
      f.yields.push_back(pop());
      if (f.yields.size() > 100000) fail("generator yields over 100,000 values");
      push(none());
      break;

    // ---- with / raise / import ----
    case BEFORE_WITH: {
      VarPtr mgr = pop();
      if (auto *m = as<AutocastModeVar>(mgr)) {
        push(std::make_shared<AutocastExitVar>(autocast_));
        autocast_ = m->state;
        push(none());
        break;
      }
      auto *g = as<GradModeVar>(mgr);
      if (!g)
        fail("with-statement on " + typeName(mgr) + " (only torch.no_grad/enable_grad/autocast)");
      push(std::make_shared<GradExitVar>(gradEnabled_));
      gradEnabled_ = g->enabled;
      push(none());
      break;
    }
    case LOAD_ASSERTION_ERROR: push(constant(PyExc_AssertionError)); break;
    case RAISE_VARARGS: {
      std::string what = "raise";
      if (arg >= 1) {
        VarPtr exc = peek(static_cast<size_t>(arg));
        if (auto *o = as<ObjectVar>(exc)) {
          PyObject *t = PyType_Check(o->obj.get())
                            ? o->obj.get()
                            : reinterpret_cast<PyObject *>(Py_TYPE(o->obj.get()));
          what += std::string(" ") + reinterpret_cast<PyTypeObject *>(t)->tp_name;
        }
      }
      fail(what + " (the frame raises an exception)");
    }
    case IMPORT_NAME: {
      VarPtr fromlist = pop();
      VarPtr level = pop();
      std::optional<int64_t> lv = asInt(level);
      PyRef fl = asPython(fromlist);
      std::string n = name(co, arg);
      if (!lv || *lv != 0 || !fl) fail("relative import of " + n);
      PyObject *modules = PyImport_GetModuleDict();
      if (!PyDict_GetItemString(modules, n.c_str()))
        fail("import of a module not yet loaded: " + n);
      PyRef nm = check(PyUnicode_FromString(n.c_str()), "str");
      push(constantSteal(
          PyImport_ImportModuleLevelObject(nm.get(), f.globals.get(), nullptr, fl.get(), 0)));
      break;
    }
    case IMPORT_FROM: push(getAttr(peek(1), name(co, arg))); break;
    default: fail(std::string("unsupported bytecode ") + opcodeName(in->opcode));
    }
    in = code.at(next);
    if (!in)
      throw BreakError("internal: jump to a bad offset " + std::to_string(next), currentLoc(),
                       true);
  }
  throw BreakError("internal: fell off the end of the bytecode", currentLoc(), true);
}

// ---------------------------------------------------------------------------------------------
// Entry point

AnalyzeResult analyzeFrame(const FrameView &frame, const AnalyzeOptions &opts) {
  auto start = std::chrono::steady_clock::now();
  AnalyzeResult result;
  std::set<std::string> specialized;
  auto internalBreak = [&](const std::string &what, const SourceLoc &where) {
    GraphBreak gb;
    char id[32];
    std::snprintf(id, sizeof id, "XJIT-A%04d", nextErrorSerial.fetch_add(1) % 10000);
    gb.reason = "internal error in the bytecode analyzer: " + what;
    gb.where = where;
    gb.internal = true;
    gb.errorId = id;
    result.graphBreak = std::move(gb);
  };
  SourceLoc entryLoc{frame.code ? PyUnicode_AsUTF8(frame.code->co_filename) : "",
                     frame.code ? frame.code->co_firstlineno : 0,
                     frame.code ? PyUnicode_AsUTF8(frame.code->co_qualname) : ""};
  PyObject *savedType, *savedValue, *savedTb;
  PyErr_Fetch(&savedType, &savedValue, &savedTb); // never disturb a pending Python error
  std::optional<AnalyzeStop> stop;      // set once a break in the middle of the frame is found
  std::optional<GraphBreak> firstBreak; // that break
  std::vector<Guard> breakGuards;       // the guards it holds under (BreakError::guards)
  AnalyzeOptions options = opts;        // without sharedModules after a SharingRefused
  for (int attempt = 0; attempt < 64; ++attempt) {
    try {
      Analyzer a(frame, options, specialized);
      a.stopAt = stop;
      Capture c = a.run();
      c.captureMilliseconds =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count();
      if (c.breakPoint) {
        c.breakPoint->reason = firstBreak->reason;
        c.breakPoint->where = firstBreak->where;
        for (Guard &g : breakGuards)
          c.guards.push_back(std::move(g));
        result.graphBreak = firstBreak;
      }
      result.capture = std::move(c);
      break;
    } catch (const SpecializeError &e) {
      specialized.insert(e.symbol);
      continue;
    } catch (const SharingRefused &e) {
      // From the start, with every module guarded by identity (the entry per instance).
      options.sharedModules.clear();
      stop.reset();
      firstBreak.reset();
      breakGuards.clear();
      specialized.clear();
      result = AnalyzeResult{};
      result.sharingRefused = e.reason;
      continue;
    } catch (const BreakError &e) {
      if (e.internal) {
        internalBreak(e.reason, e.where);
        break;
      }
      if (stop) { // the capture up to the break failed: the whole frame runs in Python
        result.graphBreak = firstBreak;
        result.graphBreak->reason += " (cannot resume after it: " + e.reason + ")";
        break;
      }
      result.graphBreak = GraphBreak{e.reason, e.where, false, ""};
      std::string why;
      if (!opts.resumeAfterBreaks || e.rootPc < 0 || e.rootVisit < 1) break;
      if (!rewrite::canBreakAt(frame.code, e.rootPc, &why)) {
        result.graphBreak->reason += " (cannot resume after it: " + why + ")";
        break;
      }
      try {
        stop = AnalyzeStop{rewrite::groupStart(frame.code, e.rootPc), e.rootVisit};
      } catch (const std::exception &ex) {
        result.graphBreak->reason += std::string(" (cannot resume after it: ") + ex.what() + ")";
        break;
      }
      firstBreak = result.graphBreak;
      breakGuards = e.guards;
      result.graphBreak.reset();
      continue;
    } catch (const std::exception &e) {
      if (stop) {
        result.graphBreak = firstBreak;
        result.graphBreak->reason += std::string(" (cannot resume after it: ") + e.what() + ")";
        break;
      }
      internalBreak(e.what(), entryLoc);
      break;
    } catch (...) {
      internalBreak("unknown exception", entryLoc);
      break;
    }
  }
  if (!result.capture && !result.graphBreak)
    internalBreak("too many shape specializations", entryLoc);
  PyErr_Clear();
  PyErr_Restore(savedType, savedValue, savedTb);
  return result;
}

} // namespace xjit::frontend
