// CPython 3.11 implementation of bytecode_rewrite.h: an assembler over the original code's
// decoded instructions (analyzer_bytecode.h) that inserts a prologue and break tails, relinks
// jumps (relative, with EXTENDED_ARG prefixes as needed), remaps local slots, and writes the
// 3.11 line table (long-form entries, so columns survive) and exception table.
#include "bytecode_rewrite.h"

#include "analyzer_bytecode.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000

namespace xjit::frontend::rewrite {

using namespace bc;

namespace {

[[noreturn]] void error(const std::string &what) {
  PyErr_Clear();
  throw std::runtime_error("bytecode rewrite: " + what);
}

PyRef own(PyObject *o, const char *what) {
  if (!o) error(std::string("CPython call failed: ") + what);
  return PyRef::steal(o);
}

// Resume codes carry how deep they are nested (a resume function of a resume function...) as
// their last constant, ("<xjit resume depth>", n): a graph break inside a loop resumes once per
// iteration, each resume function calling the next, so the nesting is bounded.
constexpr const char *kDepthMarker = "<xjit resume depth>";
constexpr int kMaxResumeDepth = 16;

int resumeDepth(PyCodeObject *co) {
  const Py_ssize_t n = PyTuple_GET_SIZE(co->co_consts);
  if (n == 0) return 0;
  PyObject *last = PyTuple_GET_ITEM(co->co_consts, n - 1);
  if (!PyTuple_CheckExact(last) || PyTuple_GET_SIZE(last) != 2) return 0;
  PyObject *tag = PyTuple_GET_ITEM(last, 0), *depth = PyTuple_GET_ITEM(last, 1);
  if (!PyUnicode_Check(tag) || PyUnicode_CompareWithASCIIString(tag, kDepthMarker) != 0 ||
      !PyLong_Check(depth))
    return 0;
  return static_cast<int>(PyLong_AsLong(depth));
}

/// The user's function a (possibly generated) code object belongs to: "f" for
/// "f.<resume at line 12>".
std::string baseQualname(PyCodeObject *co) {
  const char *q = PyUnicode_AsUTF8(co->co_qualname);
  std::string s = q ? q : "?";
  for (const char *suffix : {".<resume at line ", ".<graph break at line "})
    if (size_t at = s.find(suffix); at != std::string::npos) s.resize(at);
  return s;
}

/// Whether `co` may call zero-argument super(): it has arguments and a __class__ free variable
/// (the compiler adds one to a method that names `super` or `__class__`).
bool mayCallZeroArgumentSuper(PyCodeObject *co) {
  if (co->co_argcount == 0) return false;
  constexpr unsigned char kFree = 0x80; // CO_FAST_FREE
  const auto *kinds =
      reinterpret_cast<const unsigned char *>(PyBytes_AS_STRING(co->co_localspluskinds));
  for (int i = 0; i < co->co_nlocalsplus; ++i)
    if ((kinds[i] & kFree) && PyUnicode_CompareWithASCIIString(
                                  PyTuple_GET_ITEM(co->co_localsplusnames, i), "__class__") == 0)
      return true;
  return false;
}

struct Pos {
  int line = -1, endLine = -1, col = -1, endCol = -1; // -1: unknown (None)
};

/// The original code, decoded once.
struct Original {
  PyCodeObject *co;
  DecodedCode d;
  std::vector<Pos> pos;   // per code unit (co_positions)
  int nvars = 0;          // co_nlocals: plain locals and arguments (cell arguments too)
  std::vector<int> plain; // local slots that are neither cells nor free variables
  std::vector<int> cells; // cell variables (made by MAKE_CELL), arguments or not
  std::vector<int> frees; // free variables (COPY_FREE_VARS from the closure)
  // Zero-argument super() reads the running frame's first local slot (a cell's contents) and
  // its __class__ free variable: generated code for a code that may call it (a __class__ free
  // variable) takes the first argument's value as its own first argument.
  bool passesFirst = false;
  bool firstIsCell = false;

  explicit Original(PyCodeObject *c) : co(c), d(decode(c)) {
    nvars = c->co_nlocals;
    // Slot kinds (CO_FAST_LOCAL / CELL / FREE of Include/internal/pycore_code.h).
    constexpr unsigned char kCell = 0x40, kFree = 0x80;
    const auto *kinds =
        reinterpret_cast<const unsigned char *>(PyBytes_AS_STRING(c->co_localspluskinds));
    for (int i = 0; i < c->co_nlocalsplus; ++i)
      (kinds[i] & kFree ? frees : kinds[i] & kCell ? cells : plain).push_back(i);
    passesFirst = mayCallZeroArgumentSuper(c);
    firstIsCell = passesFirst && (kinds[0] & kCell);
    PyRef it = own(PyObject_CallMethod(reinterpret_cast<PyObject *>(c), "co_positions", nullptr),
                   "co_positions");
    PyRef iter = own(PyObject_GetIter(it.get()), "iter");
    while (PyObject *t = PyIter_Next(iter.get())) {
      PyRef item = PyRef::steal(t);
      Pos p;
      int *fields[] = {&p.line, &p.endLine, &p.col, &p.endCol};
      for (int i = 0; i < 4; ++i) {
        PyObject *v = PyTuple_GetItem(item.get(), i);
        *fields[i] = v && PyLong_Check(v) ? static_cast<int>(PyLong_AsLong(v)) : -1;
      }
      pos.push_back(p);
    }
    if (PyErr_Occurred()) error("reading co_positions");
  }
  int indexOf(int offset) const {
    size_t u = static_cast<size_t>(offset / 2);
    if (offset < 0 || u >= d.index.size() || d.index[u] < 0)
      error("no instruction at offset " + std::to_string(offset));
    return d.index[u];
  }
  Pos posAt(int offset) const {
    size_t u = static_cast<size_t>(offset / 2);
    return u < pos.size() ? pos[u] : Pos{};
  }
};

bool endsBlock(int op) {
  return op == RETURN_VALUE || op == RAISE_VARARGS || op == RERAISE || op == JUMP_FORWARD ||
         op == JUMP_BACKWARD || op == JUMP_BACKWARD_NO_INTERRUPT;
}

bool usesLocalSlot(int op) {
  switch (op) {
  case LOAD_FAST:
  case STORE_FAST:
  case DELETE_FAST:
  case LOAD_CLOSURE:
  case LOAD_DEREF:
  case STORE_DEREF:
  case DELETE_DEREF:
  case MAKE_CELL:
  case LOAD_CLASSDEREF: return true;
  default: return false;
  }
}

/// Whether `code` or a function nested in it rebinds the variable `name` held in a cell
/// (STORE_DEREF / DELETE_DEREF: `self = ...` in the frame, `nonlocal self` in a closure).
bool rebindsCell(PyCodeObject *code, PyObject *name) {
  for (const Instr &i : decode(code).instrs)
    if ((i.opcode == STORE_DEREF || i.opcode == DELETE_DEREF) &&
        PyUnicode_Compare(PyTuple_GET_ITEM(code->co_localsplusnames, i.arg), name) == 0)
      return true;
  for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(code->co_consts); ++k)
    if (PyObject *c = PyTuple_GET_ITEM(code->co_consts, k);
        PyCode_Check(c) && rebindsCell(reinterpret_cast<PyCodeObject *>(c), name))
      return true;
  return false;
}

/// Locals (plain slots) live on entry to each instruction: read on some path before written.
std::vector<std::vector<bool>> liveness(const Original &o) {
  const auto &ins = o.d.instrs;
  const size_t n = ins.size(), nv = static_cast<size_t>(o.co->co_nlocalsplus);
  std::vector<std::vector<bool>> in(n, std::vector<bool>(nv, false));
  bool changed = true;
  while (changed) {
    changed = false;
    for (size_t k = n; k-- > 0;) {
      const Instr &i = ins[k];
      std::vector<bool> live(nv, false);
      auto merge = [&](int offset) {
        const Instr *s = o.d.at(offset);
        if (!s) return;
        const auto &l = in[static_cast<size_t>(s - ins.data())];
        for (size_t v = 0; v < nv; ++v)
          if (l[v]) live[v] = true;
      };
      if (!endsBlock(i.opcode) && k + 1 < n) merge(ins[k + 1].offset);
      if (i.target >= 0) merge(i.target);
      if (const ExceptionEntry *e = o.d.handlerFor(i.offset)) merge(e->target);
      const size_t a = static_cast<size_t>(i.arg);
      if ((i.opcode == STORE_FAST || i.opcode == DELETE_FAST) && a < nv) live[a] = false;
      if ((i.opcode == LOAD_FAST || i.opcode == DELETE_FAST) && a < nv) live[a] = true;
      if (live != in[k]) {
        in[k] = std::move(live);
        changed = true;
      }
    }
  }
  return in;
}

/// The last instruction of the group starting at `offset` (KW_NAMES / PRECALL lead to CALL).
int groupEnd(const Original &o, int offset) {
  int k = o.indexOf(offset);
  while (o.d.instrs[size_t(k)].opcode == KW_NAMES || o.d.instrs[size_t(k)].opcode == PRECALL) {
    if (size_t(k + 1) >= o.d.instrs.size()) error("instruction group runs off the code");
    ++k;
  }
  return k;
}

/// Values a breaking instruction pushes (on its jump or fallthrough path); -1: not supported.
int pushedBy(const Instr &i, bool jump) {
  switch (i.opcode) {
  case CALL:
  case CALL_FUNCTION_EX:
  case BINARY_OP:
  case COMPARE_OP:
  case UNARY_POSITIVE:
  case UNARY_NEGATIVE:
  case UNARY_NOT:
  case UNARY_INVERT:
  case BINARY_SUBSCR:
  case LOAD_ATTR:
  case GET_ITER:
  case CONTAINS_OP:
  case IS_OP:
  case FORMAT_VALUE:
  case BUILD_STRING:
  case BUILD_TUPLE:
  case BUILD_LIST:
  case BUILD_SET:
  case BUILD_MAP:
  case BUILD_CONST_KEY_MAP:
  case BUILD_SLICE:
  case LIST_TO_TUPLE:
  case IMPORT_NAME:
  case IMPORT_FROM:
  case GET_LEN:
  case LOAD_CONST:
  case LOAD_FAST:
  case LOAD_DEREF: return 1;
  case LOAD_GLOBAL:
    return (i.arg & 1) ? 2 : 1; // NULL first (handled by the caller)
  // LOAD_METHOD pushes (method, self) or (NULL, bound method), known only at run time: the
  // break code runs it as LOAD_ATTR + PUSH_NULL + SWAP 2 (always NULL, bound method; CALL
  // treats both alike), so the resume function's stack is known.
  case LOAD_METHOD: return 2;
  case BEFORE_WITH: return 2;
  case UNPACK_SEQUENCE: return i.arg;
  case UNPACK_EX: return (i.arg & 0xFF) + (i.arg >> 8) + 1;
  case FOR_ITER: return jump ? 0 : 1;
  case POP_JUMP_FORWARD_IF_FALSE:
  case POP_JUMP_FORWARD_IF_TRUE:
  case POP_JUMP_FORWARD_IF_NONE:
  case POP_JUMP_FORWARD_IF_NOT_NONE:
  case POP_JUMP_BACKWARD_IF_FALSE:
  case POP_JUMP_BACKWARD_IF_TRUE:
  case POP_JUMP_BACKWARD_IF_NONE:
  case POP_JUMP_BACKWARD_IF_NOT_NONE:
  case JUMP_IF_FALSE_OR_POP:
  case JUMP_IF_TRUE_OR_POP:
  case STORE_SUBSCR:
  case DELETE_SUBSCR:
  case STORE_ATTR:
  case STORE_GLOBAL:
  case STORE_FAST:
  case POP_TOP:
  case LIST_APPEND:
  case LIST_EXTEND:
  case SET_ADD:
  case SET_UPDATE:
  case MAP_ADD:
  case DICT_UPDATE:
  case DICT_MERGE:
  case NOP: return 0;
  case RETURN_VALUE:
  case RAISE_VARARGS: return 0; // no successor
  default: return -1;
  }
}

/// A successor of the breaking group: where it continues and the stack there.
struct Successor {
  int offset;
  std::vector<Slot> stack;
  bool jump;
};

/// The value stack depth before the instruction at `offset`, from the bytecode alone (as the
/// compiler computes co_stacksize): the prologue must rebuild exactly that many slots, or the
/// exception table's depths would unwind the wrong values.
int stackDepthAt(const Original &o, int offset) {
  const auto &ins = o.d.instrs;
  std::vector<int> depth(ins.size(), -1);
  std::vector<size_t> work{0};
  depth[0] = 0;
  auto reach = [&](int targetOffset, int d) {
    const Instr *t = o.d.at(targetOffset);
    if (!t) error("a jump to a bad offset");
    const size_t k = static_cast<size_t>(t - ins.data());
    if (depth[k] < 0) {
      depth[k] = d;
      work.push_back(k);
    } else if (depth[k] != d) {
      error("inconsistent stack depths at offset " + std::to_string(targetOffset));
    }
  };
  while (!work.empty()) {
    const size_t k = work.back();
    work.pop_back();
    const Instr &i = ins[k];
    const int d = depth[k];
    const int arg = i.opcode >= HAVE_ARGUMENT ? i.arg : 0;
    if (const ExceptionEntry *e = o.d.handlerFor(i.offset))
      reach(e->target, e->depth + (e->lasti ? 2 : 1));
    if (i.target >= 0) reach(i.target, d + PyCompile_OpcodeStackEffectWithJump(i.opcode, arg, 1));
    if (!endsBlock(i.opcode) && k + 1 < ins.size())
      reach(ins[k + 1].offset, d + PyCompile_OpcodeStackEffectWithJump(i.opcode, arg, 0));
  }
  const int d = depth.at(size_t(o.indexOf(offset)));
  if (d < 0) error("offset " + std::to_string(offset) + " is unreachable");
  return d;
}

std::vector<Successor> successors(const Original &o, const State &s) {
  const int last = groupEnd(o, s.offset);
  const Instr &L = o.d.instrs[size_t(last)];
  std::vector<Successor> out;
  if (L.opcode == RETURN_VALUE || L.opcode == RAISE_VARARGS) return out;
  for (bool jump : {false, true}) {
    if (jump && L.target < 0) continue;
    if (!jump && (L.opcode == JUMP_FORWARD || L.opcode == JUMP_BACKWARD)) continue;
    int net = 0;
    for (int k = o.indexOf(s.offset); k <= last; ++k) {
      const Instr &i = o.d.instrs[size_t(k)];
      int e = PyCompile_OpcodeStackEffectWithJump(i.opcode, i.opcode >= HAVE_ARGUMENT ? i.arg : 0,
                                                  k == last && jump ? 1 : 0);
      if (e == PY_INVALID_STACK_EFFECT)
        error("no stack effect for " + std::string(opcodeName(i.opcode)));
      net += e;
    }
    const int pushed = pushedBy(L, jump);
    if (pushed < 0) error(std::string("cannot resume after ") + opcodeName(L.opcode));
    const int depth = static_cast<int>(s.stack.size());
    const int kept = depth + net - pushed;
    if (kept < 0 || kept > depth)
      error("inconsistent stack effect of " + std::string(opcodeName(L.opcode)));
    Successor su{jump ? L.target : L.next, {}, jump};
    su.stack.assign(s.stack.begin(), s.stack.begin() + kept);
    if (std::find(su.stack.begin(), su.stack.end(), Slot::Function) != su.stack.end())
      error("a function made in the frame outlives the breaking instruction");
    for (int k = 0; k < pushed; ++k)
      su.stack.push_back(((L.opcode == LOAD_GLOBAL && (L.arg & 1)) || L.opcode == LOAD_METHOD) &&
                                 k == 0
                             ? Slot::Null
                             : Slot::Value);
    out.push_back(std::move(su));
  }
  return out;
}

// ---- the assembler ---------------------------------------------------------------------------

struct Handler {
  int target = -1; // index into Assembler::out
  int depth = 0;
  bool lasti = false;
  bool operator==(const Handler &) const = default;
};

struct Out {
  int op = 0, arg = 0;
  int jumpTo = -1; // index into Assembler::out (jumps)
  Pos pos;
  Handler handler; // target -1: none
  int ext = 0;     // EXTENDED_ARG prefixes
  int unit = 0;    // code unit of the first prefix
};

int jumpCounterpart(int op) {
  switch (op) {
  case JUMP_FORWARD: return JUMP_BACKWARD;
  case JUMP_BACKWARD: return JUMP_FORWARD;
  case POP_JUMP_FORWARD_IF_FALSE: return POP_JUMP_BACKWARD_IF_FALSE;
  case POP_JUMP_BACKWARD_IF_FALSE: return POP_JUMP_FORWARD_IF_FALSE;
  case POP_JUMP_FORWARD_IF_TRUE: return POP_JUMP_BACKWARD_IF_TRUE;
  case POP_JUMP_BACKWARD_IF_TRUE: return POP_JUMP_FORWARD_IF_TRUE;
  case POP_JUMP_FORWARD_IF_NONE: return POP_JUMP_BACKWARD_IF_NONE;
  case POP_JUMP_BACKWARD_IF_NONE: return POP_JUMP_FORWARD_IF_NONE;
  case POP_JUMP_FORWARD_IF_NOT_NONE: return POP_JUMP_BACKWARD_IF_NOT_NONE;
  case POP_JUMP_BACKWARD_IF_NOT_NONE: return POP_JUMP_FORWARD_IF_NOT_NONE;
  default: return -1;
  }
}

void writeVarint(std::string &b, unsigned v) { // line table: little-endian 6-bit groups
  while (v >= 64) {
    b.push_back(static_cast<char>(64 | (v & 63)));
    v >>= 6;
  }
  b.push_back(static_cast<char>(v));
}

void writeSvarint(std::string &b, int v) {
  writeVarint(b, v < 0 ? (static_cast<unsigned>(-v) << 1) | 1u : static_cast<unsigned>(v) << 1);
}

void writeExceptionItem(std::string &b, int v, int msb) { // big-endian 6-bit groups
  for (int shift = 24; shift > 0; shift -= 6)
    if (v >= (1 << shift)) {
      b.push_back(static_cast<char>(((v >> shift) & 63) | 64 | msb));
      msb = 0;
    }
  b.push_back(static_cast<char>((v & 63) | msb));
}

class Writer {
public:
  Writer(const Original &o, const State &s, bool breakCode) : o_(o), s_(s), breakCode_(breakCode) {}

  PyRef build() {
    PyCodeObject *co = o_.co;
    // The analyzer's abstract stack must be the interpreter's, slot for slot.
    if (const int depth = stackDepthAt(o_, s_.offset); depth != static_cast<int>(s_.stack.size()))
      error("the analyzer's value stack at offset " + std::to_string(s_.offset) + " has " +
            std::to_string(s_.stack.size()) + " slots, the bytecode's " + std::to_string(depth));
    args_ = argumentLocalsOf(s_);
    if (breakCode_) cellArgs_ = cellArgumentsOf(o_, s_);
    planLocals();
    consts_ = own(PySequence_List(co->co_consts), "co_consts");
    // Prologue: cells, free variables, RESUME, the stack, the jump to where the frame continues.
    const Pos at = o_.posAt(s_.offset);
    if (cellsAsCellvars())
      for (int c : o_.cells)
        emit(MAKE_CELL, slotMap_.at(size_t(c)), at);
    if (nfreeNew_) emit(COPY_FREE_VARS, nfreeNew_, at);
    emit(RESUME, 0, at);
    for (size_t k = 0; k < s_.localFunctions.size(); ++k) {
      const LocalFunction &lf = s_.localFunctions[k];
      if (lf.sameAs >= 0)
        emit(LOAD_FAST, slotMap_.at(size_t(s_.localFunctions.at(size_t(lf.sameAs)).slot)), at);
      else
        makeFunction(lf.fn, localFunctionArgs_.at(k), at);
      emit(STORE_FAST, slotMap_.at(size_t(lf.slot)), at);
    }
    int argi = o_.passesFirst ? 1 : 0;
    size_t fn = 0;
    for (size_t k = 0; k < s_.stack.size(); ++k) {
      if (s_.stack[k] == Slot::Null) {
        emit(PUSH_NULL, 0, at);
        continue;
      }
      if (s_.stack[k] == Slot::Function) {
        makeFunction(s_.functions.at(fn), functionArgs_.at(fn), at);
        ++fn;
        continue;
      }
      emit(LOAD_FAST, argi++, at);
      if (s_.stack[k] == Slot::Iterator) emit(GET_ITER, 0, at);
    }
    const int entryJump = emit(JUMP_FORWARD, 0, at);
    // The original instructions.
    const auto &ins = o_.d.instrs;
    std::vector<int> newIndex(ins.size(), -1);
    std::vector<std::pair<int, int>> jumps;    // (out index, original target offset)
    std::vector<std::pair<int, int>> handlers; // (out index, original instruction index)
    const int last = breakCode_ ? groupEnd(o_, s_.offset) : -1;
    std::vector<Successor> succ = breakCode_ ? successors(o_, s_) : std::vector<Successor>{};
    int jumpTail = -1; // out index of L, whose jump goes to an appended tail
    for (size_t k = 0; k < ins.size(); ++k) {
      const Instr &i = ins[k];
      int arg = i.opcode >= HAVE_ARGUMENT ? i.arg : 0;
      if (usesLocalSlot(i.opcode)) arg = slotMap_.at(static_cast<size_t>(arg));
      const bool methodAsAttr = static_cast<int>(k) == last && i.opcode == LOAD_METHOD;
      const int idx = emit(methodAsAttr ? LOAD_ATTR : i.opcode, arg, o_.posAt(i.offset));
      if (methodAsAttr) { // see pushedBy: (NULL, bound method)
        emit(PUSH_NULL, 0, o_.posAt(i.offset));
        emit(SWAP, 2, o_.posAt(i.offset));
      }
      newIndex[k] = idx;
      if (i.target >= 0) jumps.emplace_back(idx, i.target);
      handlers.emplace_back(idx, static_cast<int>(k));
      if (static_cast<int>(k) == last) {
        for (const Successor &su : succ)
          if (!su.jump) tail(su, o_.posAt(i.offset)); // inline, right after L
        if (i.target >= 0) jumpTail = idx;
      }
    }
    out_[size_t(entryJump)].jumpTo = newIndex[size_t(o_.indexOf(s_.offset))];
    for (auto [idx, target] : jumps)
      out_[size_t(idx)].jumpTo = newIndex[size_t(o_.indexOf(target))];
    for (auto [idx, k] : handlers)
      if (const ExceptionEntry *e = o_.d.handlerFor(ins[size_t(k)].offset))
        out_[size_t(idx)].handler = {newIndex[size_t(o_.indexOf(e->target))], e->depth, e->lasti};
    for (const Successor &su : succ)
      if (su.jump) {
        const int start = static_cast<int>(out_.size());
        tail(su, o_.posAt(ins[size_t(last)].offset));
        out_[size_t(jumpTail)].jumpTo = start;
      }
    return assemble();
  }

  static std::vector<int> argumentLocalsOf(const Original &o, const State &s) {
    std::vector<std::vector<bool>> live = liveness(o);
    const auto &l = live.at(size_t(o.indexOf(s.offset)));
    std::vector<int> out;
    auto madeAgain = [&](int v) {
      for (const LocalFunction &f : s.localFunctions)
        if (f.slot == v) return true;
      return false;
    };
    for (int v : o.plain)
      if (l[size_t(v)] && size_t(v) < s.bound.size() && s.bound[size_t(v)] && !madeAgain(v) &&
          !(o.passesFirst && v == 0))
        out.push_back(v);
    return out;
  }

  /// The break code of a frame with cell variables takes the bound cells' contents as
  /// arguments (cell arguments, wrapped by MAKE_CELL): the frame never ran, so its cells are
  /// made afresh. Resume codes receive the cells themselves, as free variables.
  static std::vector<int> cellArgumentsOf(const Original &o, const State &s) {
    std::vector<int> out;
    for (int c : o.cells)
      if (size_t(c) < s.bound.size() && s.bound[size_t(c)] && !(o.passesFirst && c == 0))
        out.push_back(c);
    return out;
  }

private:
  std::vector<int> argumentLocalsOf(const State &s) const { return argumentLocalsOf(o_, s); }

  int emit(int op, int arg, Pos p) {
    Out x;
    x.op = op;
    x.arg = arg;
    x.pos = p;
    out_.push_back(x);
    return static_cast<int>(out_.size()) - 1;
  }

  int addConst(PyObject *c) {
    if (PyList_Append(consts_.get(), c) != 0) error("co_consts");
    return static_cast<int>(PyList_GET_SIZE(consts_.get())) - 1;
  }

  bool cellsAsCellvars() const { return breakCode_ && !o_.cells.empty(); }

  /// New local layout: arguments (the first argument where zero-argument super() may read it,
  /// stack values, live locals, then -- break code -- the bound cells' contents), the other
  /// plain locals, scratch slots for the break tails, then the other cells (break code) and the
  /// free variables. A resume code gets the frame's cells as free variables before its own:
  /// COPY_FREE_VARS fills the last slots from the closure.
  void planLocals() {
    PyCodeObject *co = o_.co;
    names_ = own(PyList_New(0), "list");
    auto nameOf = [&](int slot) { return PyTuple_GET_ITEM(co->co_localsplusnames, slot); };
    auto add = [&](PyObject *n) {
      if (PyList_Append(names_.get(), n) != 0) error("varnames");
    };
    slotMap_.assign(size_t(co->co_nlocalsplus), -1);
    if (o_.passesFirst) {
      if (s_.bound.empty() || !s_.bound[0])
        error("zero-argument super() would read an unbound first argument");
      if (o_.firstIsCell && !breakCode_) {
        // The cell is a free variable here: slot 0 holds a copy of its contents, which a write
        // to the cell after the break would leave stale.
        if (rebindsCell(co, nameOf(0)))
          error("zero-argument super() reads a first argument whose cell is reassigned");
        add(own(PyUnicode_FromString("___first"), "str").get());
      } else {
        slotMap_[0] = 0; // a plain local, or (break code) a cell argument made by MAKE_CELL
        add(nameOf(0));
      }
    }
    for (size_t k = 0; k < s_.stack.size(); ++k)
      if (s_.stack[k] != Slot::Null && s_.stack[k] != Slot::Function)
        add(own(PyUnicode_FromFormat("___stack%zu", k), "str").get());
    int next = static_cast<int>(PyList_GET_SIZE(names_.get()));
    for (int v : args_) {
      slotMap_[size_t(v)] = next++;
      add(nameOf(v));
    }
    for (int c : cellArgs_) {
      slotMap_[size_t(c)] = next++;
      add(nameOf(c));
    }
    // Defaults of the functions to make again (MadeFunction), in order.
    size_t nfunctions = 0;
    for (Slot slot : s_.stack)
      nfunctions += slot == Slot::Function;
    if (nfunctions != s_.functions.size()) error("function slots without descriptions");
    for (size_t k = 0; k < s_.functions.size(); ++k) {
      std::pair<int, int> a{-1, -1};
      if (s_.functions[k].defaults) {
        a.first = next++;
        add(own(PyUnicode_FromFormat("___defaults%zu", k), "str").get());
      }
      if (s_.functions[k].kwdefaults) {
        a.second = next++;
        add(own(PyUnicode_FromFormat("___kwdefaults%zu", k), "str").get());
      }
      functionArgs_.push_back(a);
    }
    // Defaults of the functions locals hold (LocalFunction), in order.
    for (size_t k = 0; k < s_.localFunctions.size(); ++k) {
      std::pair<int, int> a{-1, -1};
      if (s_.localFunctions[k].sameAs >= 0) {
        localFunctionArgs_.push_back(a);
        continue;
      }
      if (s_.localFunctions[k].fn.defaults) {
        a.first = next++;
        add(own(PyUnicode_FromFormat("___ldefaults%zu", k), "str").get());
      }
      if (s_.localFunctions[k].fn.kwdefaults) {
        a.second = next++;
        add(own(PyUnicode_FromFormat("___lkwdefaults%zu", k), "str").get());
      }
      localFunctionArgs_.push_back(a);
    }
    nargs_ = next;
    for (int v : o_.plain)
      if (slotMap_[size_t(v)] < 0) {
        slotMap_[size_t(v)] = next++;
        add(nameOf(v));
      }
    scratch_ = next;
    if (breakCode_) {
      size_t most = 0;
      for (const Successor &su : successors(o_, s_))
        most = std::max(most, su.stack.size());
      for (size_t k = 0; k < most; ++k)
        add(own(PyUnicode_FromFormat("___tmp%zu", k), "str").get());
      next += static_cast<int>(most);
    }
    nvars_ = next;
    cellNames_ = own(PyList_New(0), "list");
    freeNames_ = own(PyList_New(0), "list");
    if (cellsAsCellvars()) {
      for (int c : o_.cells) {
        if (PyList_Append(cellNames_.get(), nameOf(c)) != 0) error("cellvars");
        if (slotMap_[size_t(c)] < 0) slotMap_[size_t(c)] = next++; // not an argument
      }
    } else {
      for (int c : o_.cells) {
        if (PyList_Append(freeNames_.get(), nameOf(c)) != 0) error("freevars");
        slotMap_[size_t(c)] = next++;
      }
    }
    for (int f : o_.frees) {
      if (PyList_Append(freeNames_.get(), nameOf(f)) != 0) error("freevars");
      slotMap_[size_t(f)] = next++;
    }
    nfreeNew_ = static_cast<int>(PyList_GET_SIZE(freeNames_.get()));
  }

  /// MAKE_FUNCTION of a function the frame made, over the cells it closes over (this code's
  /// cells or free variables), with its defaults from arguments.
  void makeFunction(const MadeFunction &f, std::pair<int, int> args, Pos p) {
    int flags = 0;
    if (f.defaults) {
      emit(LOAD_FAST, args.first, p);
      flags |= 0x01;
    }
    if (f.kwdefaults) {
      emit(LOAD_FAST, args.second, p);
      flags |= 0x02;
    }
    if (!f.closure.empty()) {
      for (int c : f.closure) {
        const int slot = slotMap_.at(size_t(c));
        if (std::find(o_.cells.begin(), o_.cells.end(), c) == o_.cells.end() &&
            std::find(o_.frees.begin(), o_.frees.end(), c) == o_.frees.end())
          error("a closure over a slot that is no cell");
        emit(LOAD_CLOSURE, slot, p);
      }
      emit(BUILD_TUPLE, static_cast<int>(f.closure.size()), p);
      flags |= 0x08;
    }
    emit(LOAD_CONST, addConst(f.code.get()), p);
    emit(MAKE_FUNCTION, flags, p);
    tailStack_ = std::max(tailStack_, static_cast<int>(f.closure.size()) + 4);
  }

  /// After the breaking group: the stack goes to scratch slots, then
  /// `return resume_fn(*non-NULL stack values, *live locals)`.
  void tail(const Successor &su, Pos p) {
    // The functions the prologue made are live locals of the resume code: passed as arguments.
    State next{su.offset, su.stack, s_.bound, {}, {}};
    PyRef code = makeResumeCode(o_.co, next);
    const int d = static_cast<int>(su.stack.size());
    for (int k = d - 1; k >= 0; --k)
      emit(STORE_FAST, scratch_ + k, p);
    emit(PUSH_NULL, 0, p);
    // The resume code's free variables: the frame's cells, then its free variables.
    const int nclosure = static_cast<int>(o_.cells.size() + o_.frees.size());
    if (nclosure) {
      for (int c : o_.cells)
        emit(LOAD_CLOSURE, slotMap_.at(size_t(c)), p);
      for (int f : o_.frees)
        emit(LOAD_CLOSURE, slotMap_.at(size_t(f)), p);
      emit(BUILD_TUPLE, nclosure, p);
    }
    emit(LOAD_CONST, addConst(code.get()), p);
    emit(MAKE_FUNCTION, nclosure ? 8 : 0, p);
    int n = 0;
    if (o_.passesFirst) {
      emit(o_.firstIsCell ? LOAD_DEREF : LOAD_FAST, slotMap_.at(0), p);
      ++n;
    }
    for (int k = 0; k < d; ++k) {
      Slot slot = su.stack[size_t(k)];
      if (slot == Slot::Null) continue;
      ++n;
      if (slot == Slot::Iterator) { // the rest of the iterator, as a tuple (GET_ITER'd again)
        emit(PUSH_NULL, 0, p);
        emit(LOAD_CONST, addConst(reinterpret_cast<PyObject *>(&PyTuple_Type)), p);
        emit(LOAD_FAST, scratch_ + k, p);
        emit(PRECALL, 1, p);
        emit(CALL, 1, p);
      } else {
        emit(LOAD_FAST, scratch_ + k, p);
      }
    }
    for (int v : argumentLocalsOf(next)) {
      emit(LOAD_FAST, slotMap_.at(size_t(v)), p);
      ++n;
    }
    emit(PRECALL, n, p);
    emit(CALL, n, p);
    emit(RETURN_VALUE, 0, p);
    tailStack_ = std::max(tailStack_, n + nclosure + 6);
  }

  PyRef assemble() {
    // Sizes: EXTENDED_ARG prefixes grow until every argument fits.
    for (bool stable = false; !stable;) {
      stable = true;
      int unit = 0;
      for (Out &x : out_) {
        x.unit = unit;
        unit += x.ext + 1 + inlineCacheEntries(x.op);
      }
      for (Out &x : out_) {
        if (x.jumpTo >= 0) {
          const int after = x.unit + x.ext + 1 + inlineCacheEntries(x.op);
          const int target = out_[size_t(x.jumpTo)].unit;
          bool backward = isBackwardJump(x.op);
          if (backward != (target < after)) {
            int flipped = jumpCounterpart(x.op);
            if (flipped < 0) error(std::string("cannot reverse ") + opcodeName(x.op));
            x.op = flipped;
            backward = !backward;
            stable = false;
          }
          x.arg = backward ? after - target : target - after;
        }
        int ext = x.arg > 0xFFFFFF ? 3 : x.arg > 0xFFFF ? 2 : x.arg > 0xFF ? 1 : 0;
        if (ext > x.ext) {
          x.ext = ext;
          stable = false;
        }
      }
    }
    std::string bytes, lines, table;
    int prevLine = o_.co->co_firstlineno;
    for (const Out &x : out_) {
      for (int k = x.ext; k > 0; --k) {
        bytes.push_back(static_cast<char>(EXTENDED_ARG));
        bytes.push_back(static_cast<char>((x.arg >> (8 * k)) & 0xFF));
      }
      bytes.push_back(static_cast<char>(x.op));
      bytes.push_back(static_cast<char>(x.arg & 0xFF));
      for (int k = 0; k < inlineCacheEntries(x.op); ++k) {
        bytes.push_back(0);
        bytes.push_back(0);
      }
      for (int units = x.ext + 1 + inlineCacheEntries(x.op); units > 0;) {
        const int len = std::min(units, 8);
        units -= len;
        if (x.pos.line < 0) {
          lines.push_back(static_cast<char>(0x80 | (15 << 3) | (len - 1)));
          continue;
        }
        lines.push_back(static_cast<char>(0x80 | (14 << 3) | (len - 1)));
        writeSvarint(lines, x.pos.line - prevLine);
        writeVarint(lines, static_cast<unsigned>(std::max(
                               0, (x.pos.endLine < 0 ? x.pos.line : x.pos.endLine) - x.pos.line)));
        writeVarint(lines, static_cast<unsigned>(x.pos.col + 1));
        writeVarint(lines, static_cast<unsigned>(x.pos.endCol + 1));
        prevLine = x.pos.line;
      }
    }
    for (size_t k = 0; k < out_.size();) {
      const Handler h = out_[k].handler;
      size_t end = k + 1;
      while (end < out_.size() && out_[end].handler == h)
        ++end;
      if (h.target >= 0) {
        const int start = out_[k].unit;
        const int stop = end < out_.size() ? out_[end].unit
                                           : out_.back().unit + out_.back().ext + 1 +
                                                 inlineCacheEntries(out_.back().op);
        writeExceptionItem(table, start, 128);
        writeExceptionItem(table, stop - start, 0);
        writeExceptionItem(table, out_[size_t(h.target)].unit, 0);
        writeExceptionItem(table, h.depth * 2 + (h.lasti ? 1 : 0), 0);
      }
      k = end;
    }
    PyCodeObject *co = o_.co;
    PyRef code = own(PyBytes_FromStringAndSize(bytes.data(), Py_ssize_t(bytes.size())), "bytes");
    PyRef lt = own(PyBytes_FromStringAndSize(lines.data(), Py_ssize_t(lines.size())), "bytes");
    PyRef et = own(PyBytes_FromStringAndSize(table.data(), Py_ssize_t(table.size())), "bytes");
    PyRef consts = own(PyList_AsTuple(consts_.get()), "tuple");
    PyRef varnames = own(PyList_AsTuple(names_.get()), "tuple");
    PyRef freevars = own(PyList_AsTuple(freeNames_.get()), "tuple");
    PyRef cellvars = own(PyList_AsTuple(cellNames_.get()), "tuple");
    const int line = o_.posAt(s_.offset).line;
    if (!breakCode_) {
      PyRef marker = own(Py_BuildValue("(si)", kDepthMarker, resumeDepth(co) + 1), "marker");
      addConst(marker.get());
      consts = own(PyList_AsTuple(consts_.get()), "tuple");
    }
    PyRef qualname = own(PyUnicode_FromFormat("%s.<%s at line %d>", baseQualname(co).c_str(),
                                              breakCode_ ? "graph break" : "resume", line),
                         "qualname");
    const int flags = co->co_flags & ~(CO_VARARGS | CO_VARKEYWORDS);
    const int stack = co->co_stacksize + static_cast<int>(s_.stack.size()) + tailStack_ + 2;
    PyCodeObject *c = PyCode_NewWithPosOnlyArgs(
        nargs_, 0, 0, nvars_, stack, flags, code.get(), consts.get(), co->co_names, varnames.get(),
        freevars.get(), cellvars.get(), co->co_filename, co->co_name, qualname.get(),
        co->co_firstlineno, lt.get(), et.get());
    return own(reinterpret_cast<PyObject *>(c), "PyCode_NewWithPosOnlyArgs");
  }

  const Original &o_;
  const State &s_;
  bool breakCode_;
  std::vector<int> args_, cellArgs_;
  std::vector<std::pair<int, int>> functionArgs_; // per MadeFunction: defaults/kwdefaults slots
  std::vector<std::pair<int, int>> localFunctionArgs_; // per LocalFunction: the same
  std::vector<int> slotMap_;
  PyRef names_, consts_, cellNames_, freeNames_;
  int nargs_ = 0, nvars_ = 0, scratch_ = 0, tailStack_ = 0, nfreeNew_ = 0;
  std::vector<Out> out_;
};

} // namespace

int groupStart(PyCodeObject *code, int offset) {
  Original o(code);
  int k = o.indexOf(offset);
  if (o.d.instrs[size_t(k)].opcode != CALL) return o.d.instrs[size_t(k)].offset;
  while (k > 0 && (o.d.instrs[size_t(k - 1)].opcode == PRECALL ||
                   o.d.instrs[size_t(k - 1)].opcode == KW_NAMES))
    --k;
  return o.d.instrs[size_t(k)].offset;
}

bool canBreakAt(PyCodeObject *code, int offset, std::string *why) {
  try {
    if (code->co_flags & (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR)) {
      *why = "generator frame";
      return false;
    }
    if (resumeDepth(code) >= kMaxResumeDepth) {
      *why = "resume functions nested " + std::to_string(kMaxResumeDepth) +
             " deep (a graph break in every iteration of a loop); the rest runs in Python";
      return false;
    }
    Original o(code);
    const Instr &L = o.d.instrs[size_t(groupEnd(o, offset))];
    if (pushedBy(L, false) < 0) {
      *why = std::string("cannot resume after ") + opcodeName(L.opcode);
      return false;
    }
    return true;
  } catch (const std::exception &e) {
    *why = e.what();
    return false;
  }
}

bool passesFirstArgument(PyCodeObject *code) { return mayCallZeroArgumentSuper(code); }

std::vector<int> argumentLocals(PyCodeObject *code, const State &s) {
  Original o(code);
  return Writer::argumentLocalsOf(o, s);
}

bool isResumeCode(PyCodeObject *code) { return resumeDepth(code) > 0; }

std::string userQualname(PyCodeObject *code) { return baseQualname(code); }

bool isBreakCode(PyCodeObject *code) {
  const char *q = PyUnicode_AsUTF8(code->co_qualname);
  if (!q) PyErr_Clear();
  return q && std::strstr(q, ".<graph break at line ") != nullptr;
}

std::vector<int> cellArguments(PyCodeObject *code, const State &s) {
  Original o(code);
  return Writer::cellArgumentsOf(o, s);
}

PyRef makeResumeCode(PyCodeObject *code, const State &s) {
  Original o(code);
  return Writer(o, s, false).build();
}

PyRef makeBreakCode(PyCodeObject *code, const State &s) {
  Original o(code);
  return Writer(o, s, true).build();
}

std::string disassemble(PyObject *code) {
  PyObject *dis = PyImport_ImportModule("dis");
  PyObject *bc = dis ? PyObject_CallMethod(dis, "Bytecode", "O", code) : nullptr;
  PyObject *text = bc ? PyObject_CallMethod(bc, "dis", nullptr) : nullptr;
  const char *c = text && PyUnicode_Check(text) ? PyUnicode_AsUTF8(text) : nullptr;
  std::string out = c ? c : "<unavailable>";
  Py_XDECREF(text);
  Py_XDECREF(bc);
  Py_XDECREF(dis);
  PyErr_Clear();
  return out;
}

} // namespace xjit::frontend::rewrite

#else
// No bytecode writer for this CPython yet (3.12 / 3.13 add bytecode_312.cpp ...): graph breaks
// make the frame run in Python, as the hook's version layer decides whether frames are seen.
namespace xjit::frontend::rewrite {
namespace {
[[noreturn]] void unsupported() {
  throw std::runtime_error("no bytecode writer for this CPython version");
}
} // namespace
int groupStart(PyCodeObject *, int) { unsupported(); }
bool canBreakAt(PyCodeObject *, int, std::string *why) {
  *why = "no bytecode writer for this CPython version";
  return false;
}
bool passesFirstArgument(PyCodeObject *) { unsupported(); }
std::vector<int> argumentLocals(PyCodeObject *, const State &) { unsupported(); }
std::vector<int> cellArguments(PyCodeObject *, const State &) { unsupported(); }
PyRef makeResumeCode(PyCodeObject *, const State &) { unsupported(); }
PyRef makeBreakCode(PyCodeObject *, const State &) { unsupported(); }
bool isResumeCode(PyCodeObject *) { return false; }
bool isBreakCode(PyCodeObject *) { return false; }
std::string userQualname(PyCodeObject *code) {
  const char *q = PyUnicode_AsUTF8(code->co_qualname);
  if (!q) PyErr_Clear();
  return q ? q : "?";
}
std::string disassemble(PyObject *) { return "<unavailable>"; }
} // namespace xjit::frontend::rewrite
#endif
