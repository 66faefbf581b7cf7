// CPython 3.11 bytecode tables and decoding (see analyzer_bytecode.h).
#include "analyzer_bytecode.h"

#include <algorithm>
#include <array>
#include <stdexcept>

namespace xjit::frontend::bc {
namespace {

struct OpInfo {
  const char *name = nullptr;
  uint8_t caches = 0;
};

// Opcode names (Lib/opcode.py) and inline cache counts (_PyOpcode_Caches in
// Include/internal/pycore_opcode.h of 3.11).
constexpr std::array<OpInfo, 256> makeTable() {
  std::array<OpInfo, 256> t{};
#define XJIT_OP(name) t[name] = {#name, 0}
#define XJIT_OPC(name, n) t[name] = {#name, n}
  XJIT_OP(CACHE);
  XJIT_OP(POP_TOP);
  XJIT_OP(PUSH_NULL);
  XJIT_OP(NOP);
  XJIT_OP(UNARY_POSITIVE);
  XJIT_OP(UNARY_NEGATIVE);
  XJIT_OP(UNARY_NOT);
  XJIT_OP(UNARY_INVERT);
  XJIT_OPC(BINARY_SUBSCR, 4);
  XJIT_OP(GET_LEN);
  XJIT_OP(MATCH_MAPPING);
  XJIT_OP(MATCH_SEQUENCE);
  XJIT_OP(MATCH_KEYS);
  XJIT_OP(PUSH_EXC_INFO);
  XJIT_OP(CHECK_EXC_MATCH);
  XJIT_OP(CHECK_EG_MATCH);
  XJIT_OP(WITH_EXCEPT_START);
  XJIT_OP(GET_AITER);
  XJIT_OP(GET_ANEXT);
  XJIT_OP(BEFORE_ASYNC_WITH);
  XJIT_OP(BEFORE_WITH);
  XJIT_OP(END_ASYNC_FOR);
  XJIT_OPC(STORE_SUBSCR, 1);
  XJIT_OP(DELETE_SUBSCR);
  XJIT_OP(GET_ITER);
  XJIT_OP(GET_YIELD_FROM_ITER);
  XJIT_OP(PRINT_EXPR);
  XJIT_OP(LOAD_BUILD_CLASS);
  XJIT_OP(LOAD_ASSERTION_ERROR);
  XJIT_OP(RETURN_GENERATOR);
  XJIT_OP(LIST_TO_TUPLE);
  XJIT_OP(RETURN_VALUE);
  XJIT_OP(IMPORT_STAR);
  XJIT_OP(SETUP_ANNOTATIONS);
  XJIT_OP(YIELD_VALUE);
  XJIT_OP(ASYNC_GEN_WRAP);
  XJIT_OP(PREP_RERAISE_STAR);
  XJIT_OP(POP_EXCEPT);
  XJIT_OP(STORE_NAME);
  XJIT_OP(DELETE_NAME);
  XJIT_OPC(UNPACK_SEQUENCE, 1);
  XJIT_OP(FOR_ITER);
  XJIT_OP(UNPACK_EX);
  XJIT_OPC(STORE_ATTR, 4);
  XJIT_OP(DELETE_ATTR);
  XJIT_OP(STORE_GLOBAL);
  XJIT_OP(DELETE_GLOBAL);
  XJIT_OP(SWAP);
  XJIT_OP(LOAD_CONST);
  XJIT_OP(LOAD_NAME);
  XJIT_OP(BUILD_TUPLE);
  XJIT_OP(BUILD_LIST);
  XJIT_OP(BUILD_SET);
  XJIT_OP(BUILD_MAP);
  XJIT_OPC(LOAD_ATTR, 4);
  XJIT_OPC(COMPARE_OP, 2);
  XJIT_OP(IMPORT_NAME);
  XJIT_OP(IMPORT_FROM);
  XJIT_OP(JUMP_FORWARD);
  XJIT_OP(JUMP_IF_FALSE_OR_POP);
  XJIT_OP(JUMP_IF_TRUE_OR_POP);
  XJIT_OP(POP_JUMP_FORWARD_IF_FALSE);
  XJIT_OP(POP_JUMP_FORWARD_IF_TRUE);
  XJIT_OPC(LOAD_GLOBAL, 5);
  XJIT_OP(IS_OP);
  XJIT_OP(CONTAINS_OP);
  XJIT_OP(RERAISE);
  XJIT_OP(COPY);
  XJIT_OPC(BINARY_OP, 1);
  XJIT_OP(SEND);
  XJIT_OP(LOAD_FAST);
  XJIT_OP(STORE_FAST);
  XJIT_OP(DELETE_FAST);
  XJIT_OP(POP_JUMP_FORWARD_IF_NOT_NONE);
  XJIT_OP(POP_JUMP_FORWARD_IF_NONE);
  XJIT_OP(RAISE_VARARGS);
  XJIT_OP(GET_AWAITABLE);
  XJIT_OP(MAKE_FUNCTION);
  XJIT_OP(BUILD_SLICE);
  XJIT_OP(JUMP_BACKWARD_NO_INTERRUPT);
  XJIT_OP(MAKE_CELL);
  XJIT_OP(LOAD_CLOSURE);
  XJIT_OP(LOAD_DEREF);
  XJIT_OP(STORE_DEREF);
  XJIT_OP(DELETE_DEREF);
  XJIT_OP(JUMP_BACKWARD);
  XJIT_OP(CALL_FUNCTION_EX);
  XJIT_OP(EXTENDED_ARG);
  XJIT_OP(LIST_APPEND);
  XJIT_OP(SET_ADD);
  XJIT_OP(MAP_ADD);
  XJIT_OP(LOAD_CLASSDEREF);
  XJIT_OP(COPY_FREE_VARS);
  XJIT_OP(RESUME);
  XJIT_OP(MATCH_CLASS);
  XJIT_OP(FORMAT_VALUE);
  XJIT_OP(BUILD_CONST_KEY_MAP);
  XJIT_OP(BUILD_STRING);
  XJIT_OPC(LOAD_METHOD, 10);
  XJIT_OP(LIST_EXTEND);
  XJIT_OP(SET_UPDATE);
  XJIT_OP(DICT_MERGE);
  XJIT_OP(DICT_UPDATE);
  XJIT_OPC(PRECALL, 1);
  XJIT_OPC(CALL, 4);
  XJIT_OP(KW_NAMES);
  XJIT_OP(POP_JUMP_BACKWARD_IF_NOT_NONE);
  XJIT_OP(POP_JUMP_BACKWARD_IF_NONE);
  XJIT_OP(POP_JUMP_BACKWARD_IF_FALSE);
  XJIT_OP(POP_JUMP_BACKWARD_IF_TRUE);
  return t;
}

constexpr std::array<OpInfo, 256> kTable = makeTable();

// Exception table varints: 6 bits per byte, bit 6 = more bytes follow, bit 7 marks an entry start
// (Objects/exception_handling_notes.txt).
bool readVarint(const unsigned char *p, Py_ssize_t n, Py_ssize_t &i, int &out) {
  if (i >= n) return false;
  unsigned char b = p[i++];
  int v = b & 63;
  while (b & 64) {
    if (i >= n) return false;
    b = p[i++];
    v = (v << 6) | (b & 63);
  }
  out = v;
  return true;
}

struct PyObj {
  PyObject *o;
  explicit PyObj(PyObject *p) : o(p) {
    if (!p) throw std::runtime_error("reading a code object failed");
  }
  ~PyObj() { Py_DECREF(o); }
};

} // namespace

const char *opcodeName(int opcode) {
  if (opcode >= 0 && opcode < 256 && kTable[opcode].name) return kTable[opcode].name;
  return "<unknown opcode>";
}

int inlineCacheEntries(int opcode) {
  return opcode >= 0 && opcode < 256 ? kTable[opcode].caches : 0;
}

bool isBackwardJump(int op) {
  return op == JUMP_BACKWARD || op == JUMP_BACKWARD_NO_INTERRUPT ||
         op == POP_JUMP_BACKWARD_IF_FALSE || op == POP_JUMP_BACKWARD_IF_TRUE ||
         op == POP_JUMP_BACKWARD_IF_NONE || op == POP_JUMP_BACKWARD_IF_NOT_NONE;
}

bool hasJumpTarget(int op) {
  switch (op) {
  case JUMP_FORWARD:
  case JUMP_BACKWARD:
  case JUMP_BACKWARD_NO_INTERRUPT:
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
  case FOR_ITER:
  case SEND: return true;
  default: return false;
  }
}

const Instr *DecodedCode::at(int offset) const {
  size_t unit = static_cast<size_t>(offset / 2);
  if (offset < 0 || unit >= index.size() || index[unit] < 0) return nullptr;
  return &instrs[static_cast<size_t>(index[unit])];
}

const ExceptionEntry *DecodedCode::handlerFor(int offset) const {
  // Entries are ordered by start and nested regions are split by the compiler, so at most one
  // entry covers an offset.
  for (const ExceptionEntry &e : exceptions)
    if (offset >= e.start && offset < e.end) return &e;
  return nullptr;
}

DecodedCode decode(PyCodeObject *code) {
  DecodedCode d;
  PyObj bytes(PyObject_GetAttrString(reinterpret_cast<PyObject *>(code), "co_code"));
  if (!PyBytes_Check(bytes.o)) throw std::runtime_error("co_code is not bytes");
  const auto *p = reinterpret_cast<const unsigned char *>(PyBytes_AS_STRING(bytes.o));
  Py_ssize_t n = PyBytes_GET_SIZE(bytes.o);
  d.index.assign(static_cast<size_t>(n / 2), -1);
  // Each instruction's line from one walk of the line table (co_lines): PyCode_Addr2Line walks
  // it from the start on every call, quadratic in the code's length (4% of GPT-2's capture).
  std::vector<int> lineAt(static_cast<size_t>(n / 2), -1);
  if (PyObject *lines =
          PyObject_CallMethod(reinterpret_cast<PyObject *>(code), "co_lines", nullptr)) {
    while (PyObject *item = PyIter_Next(lines)) {
      long start = -1, end = -1;
      PyObject *line = nullptr;
      bool ok = PyArg_ParseTuple(item, "llO", &start, &end, &line);
      if (ok)
        for (long off = std::max(0L, start); off < end && off / 2 < n / 2; off += 2)
          lineAt[size_t(off / 2)] = line == Py_None ? -1 : int(PyLong_AsLong(line));
      Py_DECREF(item);
      if (!ok) break;
    }
    Py_DECREF(lines);
  }
  if (PyErr_Occurred()) PyErr_Clear(); // then Addr2Line, per instruction
  int ext = 0;
  std::vector<int> prefixes; // EXTENDED_ARG offsets: jumps may target them
  for (Py_ssize_t i = 0; i + 1 < n;) {
    int op = p[i], arg = p[i + 1] | ext;
    int offset = static_cast<int>(i);
    i += 2;
    if (op == EXTENDED_ARG) {
      ext = arg << 8;
      prefixes.push_back(offset);
      continue;
    }
    ext = 0;
    for (int pre : prefixes)
      d.index[static_cast<size_t>(pre / 2)] = static_cast<int>(d.instrs.size());
    prefixes.clear();
    Instr in;
    in.offset = offset;
    in.opcode = op;
    in.arg = arg;
    in.next = offset + 2 + 2 * inlineCacheEntries(op);
    in.line = lineAt[static_cast<size_t>(offset / 2)];
    if (in.line < 0) in.line = PyCode_Addr2Line(code, offset);
    if (hasJumpTarget(op)) in.target = isBackwardJump(op) ? in.next - 2 * arg : in.next + 2 * arg;
    d.index[static_cast<size_t>(offset / 2)] = static_cast<int>(d.instrs.size());
    d.instrs.push_back(in);
    i = in.next;
  }
  PyObj table(PyObject_GetAttrString(reinterpret_cast<PyObject *>(code), "co_exceptiontable"));
  if (PyBytes_Check(table.o)) {
    const auto *t = reinterpret_cast<const unsigned char *>(PyBytes_AS_STRING(table.o));
    Py_ssize_t tn = PyBytes_GET_SIZE(table.o), ti = 0;
    int start, length, target, dl;
    while (readVarint(t, tn, ti, start) && readVarint(t, tn, ti, length) &&
           readVarint(t, tn, ti, target) && readVarint(t, tn, ti, dl))
      d.exceptions.push_back({start * 2, (start + length) * 2, target * 2, dl >> 1, (dl & 1) != 0});
  }
  return d;
}

const char *compareOpName(int arg) {
  static const char *const names[] = {"<", "<=", "==", "!=", ">", ">="};
  return arg >= 0 && arg < 6 ? names[arg] : "?";
}

const char *binaryOpName(int arg) {
  static const char *const names[] = {
      "+",  "&",  "//",  "<<",  "@",  "*",  "%",  "|",  "**",  ">>",  "-",  "/",  "^",
      "+=", "&=", "//=", "<<=", "@=", "*=", "%=", "|=", "**=", ">>=", "-=", "/=", "^="};
  return arg >= 0 && arg < NB_NUM_OPS ? names[arg] : "?";
}

} // namespace xjit::frontend::bc
