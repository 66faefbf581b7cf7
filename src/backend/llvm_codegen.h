// Private interfaces of the LLVM code generator: Kernel -> llvm::Module, and the f32 math
// routines it inlines (plain arithmetic and bit operations, so the loop vectorizer widens them;
// a libm call would stay scalar).
#pragma once

#include "xjit/backend/kernel_ir.h"

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include <initializer_list>
#include <memory>
#include <string>

namespace xjit::backend {

/// Emits kernel `k` as an external function `symbol` with the KernelEntry ABI (kernel_ir.h) into
/// a new module. The kernel must verify.
std::unique_ptr<llvm::Module> emitKernelModule(const Kernel &k, const std::string &symbol,
                                               llvm::LLVMContext &ctx);

/// Names of the C helpers compiled code calls (resolved by the JIT to these addresses).
inline constexpr const char *kIntPowSymbol = "xjit_rt_ipow_i64";
extern "C" int64_t xjit_rt_ipow_i64(int64_t base, int64_t exp);

/// A parallel loop's body over iterations [begin, end): the KernelEntry arguments, then the range.
using ParallelTask = int32_t (*)(void *const *data, const int64_t *sizes, const int64_t *strides,
                                 const uint64_t *scalars, int64_t begin, int64_t end);
/// Runs task over [0, n) split into contiguous ranges on the kernel thread pool (parallel.cpp),
/// or on the calling thread when n * work is below the threshold. Returns 0 or the first
/// nonzero code of a range (in range order).
inline constexpr const char *kParallelForSymbol = "xjit_rt_parallel_for";
extern "C" int32_t xjit_rt_parallel_for(ParallelTask task, void *const *data, const int64_t *sizes,
                                        const int64_t *strides, const uint64_t *scalars, int64_t n,
                                        int64_t work);

namespace math {
/// a * b + c, fused where the target has FMA (scalars or vectors).
llvm::Value *madd(llvm::IRBuilder<> &b, llvm::Value *x, llvm::Value *y, llvm::Value *z);
/// Horner evaluation in x's type (f32 or f64, scalar or vector): ((c0 * x + c1) * x + c2) ...
llvm::Value *horner(llvm::IRBuilder<> &b, llvm::Value *x, std::initializer_list<double> coeffs);
// f32 routines (few ulp; bounds measured in tests/cpp/backend_test.cpp). NaN in, NaN out;
// overflow and underflow round like the correctly rounded result.
llvm::Value *expF32(llvm::IRBuilder<> &b, llvm::Value *x);
llvm::Value *logF32(llvm::IRBuilder<> &b, llvm::Value *x);
llvm::Value *log1pF32(llvm::IRBuilder<> &b, llvm::Value *x);
llvm::Value *expm1F32(llvm::IRBuilder<> &b, llvm::Value *x);
llvm::Value *tanhF32(llvm::IRBuilder<> &b, llvm::Value *x);
llvm::Value *erfF32(llvm::IRBuilder<> &b, llvm::Value *x);
/// 1 / (1 + exp(-x)), computed from exp(-|x|) so that it does not overflow for x << 0.
llvm::Value *sigmoidF32(llvm::IRBuilder<> &b, llvm::Value *x);
/// sin and cos (any finite f32, no libm fallback; llvm_trig.cpp) are calls of functions of the
/// module with vector variants for the loop vectorizer; `defineMathFunctions` writes their bodies
/// once the module is optimized. pow (C99 special cases) and atan2 (C's signed zeros and
/// infinities) are inlined. All four compute in f64 and round once.
llvm::Value *sinF32(llvm::IRBuilder<> &b, llvm::Value *x);
llvm::Value *cosF32(llvm::IRBuilder<> &b, llvm::Value *x);
/// Defines the math functions that the (optimized) module calls and removes unused declarations.
void defineMathFunctions(llvm::Module &m);
llvm::Value *powF32(llvm::IRBuilder<> &b, llvm::Value *x, llvm::Value *y);
llvm::Value *atan2F32(llvm::IRBuilder<> &b, llvm::Value *y, llvm::Value *x);
} // namespace math

} // namespace xjit::backend
