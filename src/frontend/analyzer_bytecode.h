// Decoding of CPython bytecode for the analyzer: instructions with their arguments (EXTENDED_ARG
// folded in), inline cache entries skipped, source lines and the exception table. The opcode
// numbers and cache counts are those of CPython 3.11 (Include/opcode.h and
// Include/internal/pycore_opcode.h); they are the version-specific part of the analyzer.
#pragma once

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <cstdint>
#include <string>
#include <vector>

namespace xjit::frontend::bc {

// CPython 3.11 opcodes (Lib/opcode.py). Specialized forms never appear: co_code is read through
// the `co_code` attribute, which returns the de-optimized bytecode.
enum Opcode : uint8_t {
  CACHE = 0,
  POP_TOP = 1,
  PUSH_NULL = 2,
  NOP = 9,
  UNARY_POSITIVE = 10,
  UNARY_NEGATIVE = 11,
  UNARY_NOT = 12,
  UNARY_INVERT = 15,
  BINARY_SUBSCR = 25,
  GET_LEN = 30,
  MATCH_MAPPING = 31,
  MATCH_SEQUENCE = 32,
  MATCH_KEYS = 33,
  PUSH_EXC_INFO = 35,
  CHECK_EXC_MATCH = 36,
  CHECK_EG_MATCH = 37,
  WITH_EXCEPT_START = 49,
  GET_AITER = 50,
  GET_ANEXT = 51,
  BEFORE_ASYNC_WITH = 52,
  BEFORE_WITH = 53,
  END_ASYNC_FOR = 54,
  STORE_SUBSCR = 60,
  DELETE_SUBSCR = 61,
  GET_ITER = 68,
  GET_YIELD_FROM_ITER = 69,
  PRINT_EXPR = 70,
  LOAD_BUILD_CLASS = 71,
  LOAD_ASSERTION_ERROR = 74,
  RETURN_GENERATOR = 75,
  LIST_TO_TUPLE = 82,
  RETURN_VALUE = 83,
  IMPORT_STAR = 84,
  SETUP_ANNOTATIONS = 85,
  YIELD_VALUE = 86,
  ASYNC_GEN_WRAP = 87,
  PREP_RERAISE_STAR = 88,
  POP_EXCEPT = 89,
  HAVE_ARGUMENT = 90,
  STORE_NAME = 90,
  DELETE_NAME = 91,
  UNPACK_SEQUENCE = 92,
  FOR_ITER = 93,
  UNPACK_EX = 94,
  STORE_ATTR = 95,
  DELETE_ATTR = 96,
  STORE_GLOBAL = 97,
  DELETE_GLOBAL = 98,
  SWAP = 99,
  LOAD_CONST = 100,
  LOAD_NAME = 101,
  BUILD_TUPLE = 102,
  BUILD_LIST = 103,
  BUILD_SET = 104,
  BUILD_MAP = 105,
  LOAD_ATTR = 106,
  COMPARE_OP = 107,
  IMPORT_NAME = 108,
  IMPORT_FROM = 109,
  JUMP_FORWARD = 110,
  JUMP_IF_FALSE_OR_POP = 111,
  JUMP_IF_TRUE_OR_POP = 112,
  POP_JUMP_FORWARD_IF_FALSE = 114,
  POP_JUMP_FORWARD_IF_TRUE = 115,
  LOAD_GLOBAL = 116,
  IS_OP = 117,
  CONTAINS_OP = 118,
  RERAISE = 119,
  COPY = 120,
  BINARY_OP = 122,
  SEND = 123,
  LOAD_FAST = 124,
  STORE_FAST = 125,
  DELETE_FAST = 126,
  POP_JUMP_FORWARD_IF_NOT_NONE = 128,
  POP_JUMP_FORWARD_IF_NONE = 129,
  RAISE_VARARGS = 130,
  GET_AWAITABLE = 131,
  MAKE_FUNCTION = 132,
  BUILD_SLICE = 133,
  JUMP_BACKWARD_NO_INTERRUPT = 134,
  MAKE_CELL = 135,
  LOAD_CLOSURE = 136,
  LOAD_DEREF = 137,
  STORE_DEREF = 138,
  DELETE_DEREF = 139,
  JUMP_BACKWARD = 140,
  CALL_FUNCTION_EX = 142,
  EXTENDED_ARG = 144,
  LIST_APPEND = 145,
  SET_ADD = 146,
  MAP_ADD = 147,
  LOAD_CLASSDEREF = 148,
  COPY_FREE_VARS = 149,
  RESUME = 151,
  MATCH_CLASS = 152,
  FORMAT_VALUE = 155,
  BUILD_CONST_KEY_MAP = 156,
  BUILD_STRING = 157,
  LOAD_METHOD = 160,
  LIST_EXTEND = 162,
  SET_UPDATE = 163,
  DICT_MERGE = 164,
  DICT_UPDATE = 165,
  PRECALL = 166,
  CALL = 171,
  KW_NAMES = 172,
  POP_JUMP_BACKWARD_IF_NOT_NONE = 173,
  POP_JUMP_BACKWARD_IF_NONE = 174,
  POP_JUMP_BACKWARD_IF_FALSE = 175,
  POP_JUMP_BACKWARD_IF_TRUE = 176,
};

// BINARY_OP arguments (NB_* in Include/opcode.h); in-place forms are NB_INPLACE_ADD + k.
enum BinaryOpArg : int {
  NB_ADD = 0,
  NB_AND = 1,
  NB_FLOOR_DIVIDE = 2,
  NB_LSHIFT = 3,
  NB_MATRIX_MULTIPLY = 4,
  NB_MULTIPLY = 5,
  NB_REMAINDER = 6,
  NB_OR = 7,
  NB_POWER = 8,
  NB_RSHIFT = 9,
  NB_SUBTRACT = 10,
  NB_TRUE_DIVIDE = 11,
  NB_XOR = 12,
  NB_INPLACE_ADD = 13,
  NB_NUM_OPS = 26,
};

// Code object flags (Include/cpython/code.h).
inline constexpr int kCoVarargs = 0x0004, kCoVarkeywords = 0x0008, kCoGenerator = 0x0020,
                     kCoCoroutine = 0x0080, kCoIterableCoroutine = 0x0100,
                     kCoAsyncGenerator = 0x0200;

/// Name of an opcode ("LOAD_FAST"), or "<opcode N>".
const char *opcodeName(int opcode);
/// Number of inline cache code units that follow the instruction.
int inlineCacheEntries(int opcode);
/// True for the relative jumps' direction: forward jumps add the argument to the next
/// instruction's offset, backward jumps subtract it.
bool isBackwardJump(int opcode);
bool hasJumpTarget(int opcode);

struct Instr {
  int offset = 0; // byte offset of the opcode (after any EXTENDED_ARG prefixes)
  int opcode = 0;
  int arg = 0;     // with EXTENDED_ARG folded in
  int next = 0;    // byte offset of the next instruction (inline caches skipped)
  int line = -1;   // source line, -1 if none
  int target = -1; // jump target byte offset (jumps and FOR_ITER), else -1
};

/// One entry of the exception table: instructions in [start, end) jump to `target` on error.
struct ExceptionEntry {
  int start, end, target, depth;
  bool lasti;
};

/// A decoded code object. Instructions are indexed by offset / 2 through `index`.
struct DecodedCode {
  std::vector<Instr> instrs;
  std::vector<int> index; // code unit -> instruction number, -1 inside caches / prefixes
  std::vector<ExceptionEntry> exceptions;
  const Instr *at(int offset) const;
  /// The innermost exception table entry covering `offset`, or nullptr.
  const ExceptionEntry *handlerFor(int offset) const;
};

/// Decodes `code` (throws std::runtime_error on a Python error while reading it).
DecodedCode decode(PyCodeObject *code);

/// CPython's compare operator names for COMPARE_OP's argument ("<", "<=", "==", "!=", ">", ">=").
const char *compareOpName(int arg);
/// Python spelling of a BINARY_OP argument ("+", "+=", "@", ...).
const char *binaryOpName(int arg);

} // namespace xjit::frontend::bc
