// Writing new code objects for graph breaks in the middle of a frame (docs/frontend.md, "Graph
// breaks"). The interface is version-neutral; bytecode_311.cpp implements it for CPython 3.11
// (3.12/3.13 add their own file beside it).
//
// A frame captured up to a break at instruction P leaves a Python state behind: the value
// stack (bottom first) and the bound locals. Two kinds of code objects continue it:
//
//  - a *resume code* for offset Q: a copy of the original code with a prologue that restores
//    the stack from its arguments and jumps to Q. Its arguments are the non-NULL stack values
//    (bottom first), then the locals live at Q (original slot order). It is an ordinary code
//    object the frame hook sees, so capturing continues there (and may break again).
//  - the *break code* for P: takes the arguments the resume code for P would (stack values,
//    live locals), then the contents of the frame's bound cells (argumentLocals, cellArguments)
//    and the defaults of the functions it makes again (MadeFunction); runs the instruction
//    group at P (e.g. KW_NAMES/PRECALL/CALL) in Python, and for each successor of the group
//    calls a fresh resume function for it with the state after the group. The hook never
//    compiles it.
//
// Zero-argument super() reads the running frame's first local slot: both codes of a frame that
// may call it (passesFirstArgument) take the frame's first argument (its value; a cell's
// contents) as their own first argument, before the stack values, whether live or not.
//
// A frame's cell variables: its break code makes them afresh (the frame never ran: no closure
// made before the break can be alive, or the state could not have been rebuilt) from arguments;
// resume codes receive the cells in their closure, as free variables.
//
// Both keep the original instructions (jump targets, exception table entries and handlers'
// stack depths stay valid because the prologue rebuilds the same stack), the line table and
// column positions of the original (tracebacks point at the user's lines) and its names,
// constants and free variables.
#pragma once

#include "xjit/frontend/capture.h"

#include <string>
#include <vector>

namespace xjit::frontend::rewrite {

/// What a stack slot holds when the capture stops.
enum class Slot : uint8_t {
  Value,    // an ordinary object, passed as an argument
  Null,     // CPython's NULL (PUSH_NULL / LOAD_GLOBAL before a call): pushed again, no argument
  Iterator, // an iterator: passed as a tuple of its remaining items, GET_ITER in the prologue
  Function, // a function the frame made (a comprehension about to be called): made again in the
            // prologue (State::functions); the breaking instruction must consume it
};

/// A function made inside the frame that sits on the stack at the break (e.g. the comprehension
/// function a CALL is about to run): MAKE_FUNCTION again, over the frame's own cells.
struct MadeFunction {
  size_t stackSlot = 0;
  PyRef code;
  std::vector<int> closure; // original localsplus slots of the cells in its closure, in order
  bool defaults = false;    // takes a defaults tuple argument (after the cells' contents)
  bool kwdefaults = false;  // takes a keyword-defaults dict argument (after that)
};

/// A function the frame made that a local variable holds at the break (a closure defined
/// before the break and called after it): made again in the prologue of the break code
/// (MAKE_FUNCTION over its cells, defaults as arguments) and passed on to the resume code like
/// any live local, so the code after the break sees one object, as in Python (the resume
/// function's analysis guards it by its code, not its identity: Analyzer::run).
struct LocalFunction {
  int slot = -1;   // original localsplus slot
  int sameAs = -1; // index of an earlier LocalFunction holding the same function (`g = f`):
                   // this slot gets that object, not a function of its own
  MadeFunction fn;
};

/// The frame state at a resume point.
struct State {
  int offset = 0;          // instruction (byte offset in the original code) to continue at
  std::vector<Slot> stack; // bottom first
  /// Per original localsplus slot: a local bound at the break (of those, the ones live at
  /// `offset` become arguments), or a cell variable whose cell is not empty.
  std::vector<bool> bound;
  std::vector<MadeFunction> functions;       // for the Function slots, in stack order
  std::vector<LocalFunction> localFunctions; // their slots are not arguments
};

/// The first instruction of the group that `offset` belongs to: a CALL's PRECALL and KW_NAMES
/// run with it (the analysis stops before them). Throws std::runtime_error.
int groupStart(PyCodeObject *code, int offset);

/// Whether the frame can be resumed at `offset` (not a generator, an instruction group the
/// writer knows, resume functions not nested too deep). On false, `why` says why.
bool canBreakAt(PyCodeObject *code, int offset, std::string *why);

/// Whether the break and resume codes of `code` take its first argument's value as their first
/// argument (it may call zero-argument super(): a __class__ free variable). argumentLocals and
/// cellArguments then leave slot 0 out.
bool passesFirstArgument(PyCodeObject *code);

/// Local slots that are arguments of the resume code for `s` (live at s.offset and bound, not
/// holding one of s.localFunctions), in order; after them (and, for the break code, the cells'
/// contents and the defaults of s.functions) come the defaults of s.localFunctions. Throws
/// std::runtime_error.
std::vector<int> argumentLocals(PyCodeObject *code, const State &s);

/// Cell variables (original localsplus indices) whose contents the break code for `s` takes as
/// arguments after argumentLocals (a frame with cells: they are made afresh). Throws
/// std::runtime_error.
std::vector<int> cellArguments(PyCodeObject *code, const State &s);

/// A resume code object (see above). Throws std::runtime_error (Python error cleared).
PyRef makeResumeCode(PyCodeObject *code, const State &s);

/// The break code for the instruction group starting at s.offset. Throws std::runtime_error.
PyRef makeBreakCode(PyCodeObject *code, const State &s);

/// Whether `code` is a resume code made by makeResumeCode / a break code made by makeBreakCode.
bool isResumeCode(PyCodeObject *code);
bool isBreakCode(PyCodeObject *code);
/// The qualified name of the user's function a code object belongs to ("f" for
/// "f.<resume at line 12>").
std::string userQualname(PyCodeObject *code);

/// A readable listing of a generated code object (XJIT_LOG=bytecode, --dump), via `dis`.
std::string disassemble(PyObject *code);

} // namespace xjit::frontend::rewrite
