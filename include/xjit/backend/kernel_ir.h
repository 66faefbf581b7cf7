// The loop-level kernel IR: what fused graph regions are lowered to before LLVM IR.
//
// Semantics
// - A Kernel is a function over buffer parameters (strided n-d arrays of one dtype; sizes are
//   static or symbolic, strides are always run-time values, in elements) and scalar parameters.
//   Its body is a list of statements run in order; it either completes or stops with an error.
// - Statements: `for` loops over an index variable from 0 to an extent (an i64 expression;
//   a `parallel for` outside any loop may run its iterations on several threads), `if` on a
//   bool expression, `store` of a value at an element offset of an output buffer, `acc = init`
//   and `acc = combine(acc, value)` on accumulators (reductions; an array accumulator is used
//   at a lane index), and `assert` (stop with one of the kernel's error messages when false).
// - Expressions are trees (DAGs when shared) with a dtype: constants, loop variables, scalar
//   parameters, a buffer's run-time size and stride along a dim (i64), loads at an element
//   offset, accumulator reads, unary and binary math, compare (-> bool), select and cast.
//   Evaluation is eager and side-effect free, except that integer division or remainder by zero
//   stops the kernel with "ZeroDivisionError" (the reference kernels raise it too).
// - Arithmetic follows the IR's reference kernels: integers wrap (INT_MIN / -1 wraps too), u8
//   is unsigned, floats are IEEE without reassociation (except a reduction's combine), casts
//   convert like Tensor::to (float -> int saturates through i64 with NaN -> 0, then wraps;
//   -> bool is `!= 0`; int64 -> f32 rounds through f64; f64 -> f16/bf16 rounds through f32).
//   f16 and bf16 are storage types only: load, store, cast, select, constants and parameters;
//   lowering computes them in f32 (PyTorch's op-math type) and rounds at op boundaries.
// - Buffers never overlap when one of them is written (the code generator may assume it),
//   except an output that shares an input's memory (BufferParam::aliasOf): the kernel then
//   computes in place. Such a kernel stores only element-wise values: the value stored at an
//   element of the output depends on the shared input at that same element only, and a run of
//   consecutive stores computes all its values before storing any (the code generator orders
//   it so), so every load of the old contents precedes the store that overwrites them.
#pragma once

#include "xjit/ir/dim.h"
#include "xjit/ir/dtype.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace xjit::backend {

enum class ExprKind : uint8_t {
  Const,   // ival (integers, bool) or fval (floats)
  Var,     // loop variable `index`
  Param,   // scalar parameter `index`
  Size,    // run-time size of buffer `index` along dim `dim`
  Stride,  // run-time stride of buffer `index` along dim `dim`
  Load,    // buffer `index` at element offset args[0]
  Acc,     // accumulator `index` (an array accumulator: at lane args[0])
  Unary,   // op: UnaryOp; args[0]
  Binary,  // op: BinaryOp; args[0], args[1]
  Compare, // op: CmpOp; args[0], args[1] (same dtype); result bool
  Select,  // args[0] (bool) ? args[1] : args[2]
  Cast,    // args[0] converted to dtype
};

enum class UnaryOp : uint8_t {
  Neg,
  Abs,
  Not, // Not: logical on bool, bitwise on integers
  Floor,
  Ceil,
  Trunc,
  RoundEven,
  Sqrt,
  Rsqrt,
  Reciprocal,
  Exp,
  Exp2,
  Expm1,
  Log,
  Log2,
  Log10,
  Log1p,
  Sin,
  Cos,
  Tan,
  Asin,
  Acos,
  Atan,
  Sinh,
  Cosh,
  Tanh,
  Asinh,
  Acosh,
  Atanh,
  Sigmoid,
  Erf,
  Erfc,
  Lgamma,
  IsNan,
  IsInf,
  SignBit, // floating -> bool
};

enum class BinaryOp : uint8_t {
  Add,
  Sub,
  Mul,
  Div, // floats: IEEE division; integers: truncating (by zero: error)
  Rem, // floats: fmod; integers: C remainder, sign of the dividend (by zero: error)
  Max,
  Min, // NaN-propagating: NaN if either is NaN, else a > b ? a : b (a < b ? a : b)
  Pow,
  Atan2,
  Hypot,
  CopySign, // floats (Pow also integers: wrapping, negative exponent -> 0
            // except for bases 1 and -1)
  And,
  Or,
  Xor, // bool and integers
};

enum class CmpOp : uint8_t { Eq, Ne, Lt, Le, Gt, Ge }; // floats: ordered, except Ne (true on NaN)

std::string_view unaryOpName(UnaryOp op);
std::string_view binaryOpName(BinaryOp op);
std::string_view cmpOpName(CmpOp op);
/// Whether a unary op is float-only (math functions, predicates).
bool isFloatOnly(UnaryOp op);
bool isFloatOnly(BinaryOp op);

struct ExprNode;
using Expr = std::shared_ptr<const ExprNode>;

struct ExprNode {
  ExprKind kind;
  DType dtype;
  uint8_t op = 0;    // UnaryOp / BinaryOp / CmpOp by kind
  int64_t index = 0; // var, param, buffer or accumulator index
  int64_t dim = 0;   // Size / Stride
  int64_t ival = 0;  // integer / bool constants
  double fval = 0;   // float constants
  std::vector<Expr> args;
};

// ---- expression constructors (no checking; the verifier checks) ----
Expr constInt(DType dtype, int64_t v);
Expr constFloat(DType dtype, double v);
Expr constBool(bool v);
Expr constIdx(int64_t v); // an i64 constant
Expr var(int64_t id);
Expr param(int64_t index, DType dtype);
Expr sizeOf(int64_t buffer, int64_t dim);
Expr strideOf(int64_t buffer, int64_t dim);
Expr load(int64_t buffer, DType dtype, Expr offset);
Expr acc(int64_t id, DType dtype);
/// Lane `lane` (i64) of an array accumulator.
Expr accAt(int64_t id, DType dtype, Expr lane);
Expr unary(UnaryOp op, Expr a);
Expr binary(BinaryOp op, Expr a, Expr b);
Expr compare(CmpOp op, Expr a, Expr b);
Expr select(Expr cond, Expr a, Expr b);
/// A cast; returns `a` itself when it already has the dtype.
Expr cast(DType dtype, Expr a);
/// i64 helpers that fold constants (0 + x, 1 * x, 0 * x) so offsets stay readable.
Expr addIdx(Expr a, Expr b);
Expr mulIdx(Expr a, Expr b);
Expr andAll(const std::vector<Expr> &conds); // true when empty
bool isConst(const Expr &e, int64_t v);

struct Stmt;
using StmtList = std::vector<Stmt>;

enum class StmtKind : uint8_t { For, If, Store, InitAcc, Reduce, Assert };

struct Stmt {
  StmtKind kind;
  int64_t index = 0; // For: loop variable; Store: buffer; InitAcc/Reduce: accumulator;
                     // Assert: error message (or kStrideCheck)
  BinaryOp combine = BinaryOp::Add; // Reduce
  bool vectorize = true;            // For: a hint to the code generator
  /// For: iterations may run on several threads (each thread a contiguous range). Only for
  /// loops outside any other loop; the body must not touch accumulators initialized outside it.
  bool parallel = false;
  /// Parallel For: accumulators (with their combine op) the loop reduces across all its
  /// iterations, for reductions that have no row loop to run in parallel (every dim reduced).
  /// The iterations are cut into min(extent, kReductionChunks) contiguous chunks, a number that
  /// does not depend on the threads; each chunk reduces into its own copies of these
  /// accumulators, starting from the combine op's identity, and after the loop the copies are
  /// combined pairwise in a fixed order, then into the accumulators: the same result on any
  /// number of threads.
  std::vector<std::pair<int64_t, BinaryOp>> partials;
  Expr a, b;             // For: extent and (parallel) the work of one iteration in elements;
                         // If/Assert: cond; Store: offset, value; InitAcc: init; Reduce: value
  StmtList body, orelse; // For/If bodies
};

Stmt forLoop(int64_t var, Expr extent, StmtList body, bool vectorize = true);
/// A loop whose iterations may run in parallel; `work` (i64) estimates the elements one
/// iteration touches (the runtime stays on one thread below a total work threshold).
Stmt parallelFor(int64_t var, Expr extent, Expr work, StmtList body, bool vectorize = true);
/// Chunks of a parallel reduction loop (Stmt::partials).
constexpr int64_t kReductionChunks = 64;
Stmt ifThen(Expr cond, StmtList then, StmtList orelse = {});
Stmt store(int64_t buffer, Expr offset, Expr value);
Stmt initAcc(int64_t acc, Expr init);
Stmt reduce(int64_t acc, BinaryOp combine, Expr value);
/// The same on lane `lane` of an array accumulator (Stmt::b holds the lane).
Stmt initAccAt(int64_t acc, Expr lane, Expr init);
Stmt reduceAt(int64_t acc, Expr lane, BinaryOp combine, Expr value);
Stmt assertTrue(Expr cond, int64_t message);

struct BufferParam {
  std::string name;
  DType dtype;
  Shape sizes; // static dims are compiled in; symbolic ones are read at run time
  bool output = false;
  /// An output: the input buffer whose memory it is (same dtype, sizes and strides), or -1.
  /// The kernel reads that input and writes this output through one pointer; a caller that
  /// hands over separate memory gets the input copied into the output first (launch.cpp).
  int64_t aliasOf = -1;
  int64_t rank() const { return static_cast<int64_t>(sizes.size()); }
};

struct ScalarParam {
  std::string name;
  DType dtype;
};

struct AccDecl {
  std::string name;
  DType dtype;
  /// 0: a scalar; else an array of this many lanes (reductions over an outer dim keep one
  /// accumulator per inner element, so the inner loop is unit-stride and vectorizes).
  int64_t lanes = 0;
};

/// Run-time ABI of a compiled kernel (C calling convention):
///   int32_t fn(void *const *data, const int64_t *sizes, const int64_t *strides,
///              const uint64_t *scalars);
/// data[b] is buffer b's element 0; sizes and strides hold every buffer's dims in order
/// (buffer 0's dims first); scalars[i] is parameter i as double bits (floating params) or as
/// int64 (integer and bool params). Returns 0, kErrorDivByZero, or 1 + the index of the failed
/// assert's message in Kernel::errors.
/// kRunGeneral: the buffers' strides fail the kernel's stride check (an Assert with message
/// kStrideCheck, before any store); the caller runs Kernel::general instead.
using KernelEntry = int32_t (*)(void *const *, const int64_t *, const int64_t *, const uint64_t *);
inline constexpr int32_t kErrorDivByZero = -1;
inline constexpr int32_t kRunGeneral = -2;
/// The message index of an Assert that is a stride check (returns kRunGeneral when false).
inline constexpr int64_t kStrideCheck = -1;

struct Kernel {
  std::string name;
  std::vector<BufferParam> buffers;
  std::vector<ScalarParam> scalars;
  std::vector<AccDecl> accs;
  std::vector<std::string> errors; // Assert messages
  int64_t numVars = 0;             // loop variables are 0 .. numVars-1
  StmtList body;
  /// The version for any strides, when this kernel only covers some (its body begins with a
  /// stride check, an Assert with message kStrideCheck): the contiguous / unit-stride loops
  /// vectorize and are what runs nearly always, so the strided nest is compiled only when a
  /// call needs it (CompiledKernel::run). Same parameters as this kernel.
  std::shared_ptr<const Kernel> general;

  int64_t newVar() { return numVars++; }
  int64_t addAcc(std::string name, DType dtype, int64_t lanes = 0);
  /// Offset of buffer b's dims in the sizes/strides arrays of the ABI.
  int64_t dimOffset(int64_t buffer) const;
  int64_t totalDims() const;
};

/// Text form of the loops, for --dump and tests.
std::string printKernel(const Kernel &k);
std::string printExpr(const Expr &e, const Kernel &k);
/// Problems found (empty when valid): dtype rules, indices in range, variables used inside
/// their loops only, stores to outputs only, accumulators initialized before use.
std::vector<std::string> verifyKernel(const Kernel &k);
/// Throws xjit::Error (internal) naming the kernel and the first problem.
void verifyKernelOrThrow(const Kernel &k);

} // namespace xjit::backend
