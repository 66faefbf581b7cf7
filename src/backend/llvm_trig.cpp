// f32 sin and cos as functions of the kernel's module, with vector variants the loop vectorizer
// calls (instead of straight-line IR inlined at every use, as the other f32 math is).
//
// Why functions: the range reduction for large arguments (Payne-Hanek) is long, and inlined it ran
// for every lane of every vector although |x| >= 2^20 is rare; a fused chain of 50 sin/cos also
// gave LLVM 50 copies of it to optimize and select (the elementwise chain of bench/micro.py
// compiled 2.7x slower). Now a use is a call of `xjit_sinf` / `xjit_cosf` carrying the
// `vector-function-abi-variant` attribute that names `xjit_sinf_v<N>` for N = 2..32, so the
// vectorizer widens the loop and calls the N-lane variant; the bodies are written once per module
// after optimization (`defineMathFunctions`), only for the variants the vectorized code calls,
// with internal linkage. Each body reduces every lane by pi/2 with a two-double Cody-Waite step
// (exact below 2^20) and branches to the Payne-Hanek step only when some lane is >= 2^20.
//
// Accuracy (tests/cpp/backend_trig_pow_test.cpp, against double libm): the reduction is exact
// to far below an f32 ulp and the polynomials are ARM optimized-routines' minimax ones in f64:
// at most 0.56 ulp measured (sin 0.5599, cos 0.5588) over about 200K arguments including
// |x| up to 3.4e38, special values exact. (Taylor series to r^11 / r^12 were correctly rounded
// on every tested input but 20% slower: docs/decisions.md.)
#include "llvm_codegen.h"

#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/MDBuilder.h>
#include <llvm/IR/Module.h>

#include <initializer_list>
#include <limits>
#include <string>

namespace xjit::backend::math {

using llvm::IRBuilder;
using llvm::Value;

namespace {

/// Vector widths offered to the vectorizer (it picks its VF first, then looks for a variant).
constexpr unsigned kVectorWidths[] = {2, 4, 8, 16, 32};

std::string trigName(bool isSin, unsigned lanes) {
  std::string name = isSin ? "xjit_sinf" : "xjit_cosf";
  return lanes == 1 ? name : name + "_v" + std::to_string(lanes);
}

/// Constants and types for one lane count (1: scalars; n > 1: <n x T> vectors, splat constants).
struct Lanes {
  IRBuilder<> &b;
  unsigned n;
  llvm::Type *of(llvm::Type *t) const {
    return n == 1 ? t : static_cast<llvm::Type *>(llvm::FixedVectorType::get(t, n));
  }
  llvm::Type *f32Ty() const { return of(b.getFloatTy()); }
  llvm::Type *f64Ty() const { return of(b.getDoubleTy()); }
  llvm::Type *i32Ty() const { return of(b.getInt32Ty()); }
  llvm::Type *i64Ty() const { return of(b.getInt64Ty()); }
  Value *f32(float v) const { return llvm::ConstantFP::get(f32Ty(), v); }
  Value *f64(double v) const { return llvm::ConstantFP::get(f64Ty(), v); }
  Value *i32(int32_t v) const { return llvm::ConstantInt::get(i32Ty(), uint64_t(uint32_t(v))); }
  Value *i64(int64_t v) const { return llvm::ConstantInt::get(i64Ty(), uint64_t(v)); }
};

/// The bits of 4/pi as in ARM optimized-routines' __inv_pio4 (sincosf_data.c), for the large
/// argument reduction, as a big-endian byte string after three zero bytes: their table entry i
/// is bytes i .. i+3 here.
constexpr uint64_t kInvPio4Bytes[4] = {0x000000a2f9836e4eULL, 0x441529fc2757d1f5ULL,
                                       0x34ddc0db6295993cULL, 0x4390410000000000ULL};

/// Payne-Hanek reduction of a finite f32 |x| >= 2^20 (lanes below give garbage the caller drops):
/// |x| = n * pi/2 + r with 96 bits of 4/pi chosen by the exponent (optimized-routines'
/// reduce_large); returns r (f64) and n mod 4 (i32).
std::pair<Value *, Value *> reduceLarge(const Lanes &L, Value *ax) {
  IRBuilder<> &b = L.b;
  Value *xi = b.CreateBitCast(ax, L.i32Ty());
  Value *idx = b.CreateAnd(b.CreateLShr(xi, 26), 15);
  Value *shift = b.CreateAnd(b.CreateLShr(xi, 23), 7);
  Value *m = b.CreateShl(b.CreateOr(b.CreateAnd(xi, 0xffffff), 0x800000), shift);
  // table[idx], table[idx + 4], table[idx + 8] are bytes idx .. idx + 11 of the 4/pi string
  // (kInvPio4Bytes): two 64-bit windows shifted out of constants, instead of table loads (which
  // vectorize to gathers: sin 2.3x slower on AVX-512) or a tree of selects per word.
  Value *k1 = b.CreateICmpNE(b.CreateAnd(idx, 8), L.i32(0));
  auto q = [&](int k) {
    return b.CreateSelect(k1, L.i64(int64_t(kInvPio4Bytes[k + 1])),
                          L.i64(int64_t(kInvPio4Bytes[k])));
  };
  Value *s = b.CreateZExt(b.CreateShl(b.CreateAnd(idx, 7), 3), L.i64Ty());
  Value *rs = b.CreateSub(L.i64(63), s);
  auto window = [&](Value *hi, Value *lo) { // bits s .. s + 63 of hi:lo (no shift by 64)
    return b.CreateOr(b.CreateShl(hi, s), b.CreateLShr(b.CreateLShr(lo, 1), rs));
  };
  Value *q1 = q(1);
  Value *hi64 = window(q(0), q1);
  Value *next64 = window(q1, q(2));
  Value *word0 = b.CreateTrunc(b.CreateLShr(hi64, 32), L.i32Ty());
  Value *word4 = b.CreateTrunc(hi64, L.i32Ty());
  Value *word8 = b.CreateTrunc(b.CreateLShr(next64, 32), L.i32Ty());
  Value *m64 = b.CreateZExt(m, L.i64Ty());
  Value *res0 = b.CreateZExt(b.CreateMul(m, word0), L.i64Ty());
  Value *res1 = b.CreateMul(m64, b.CreateZExt(word4, L.i64Ty()));
  Value *res2 = b.CreateMul(m64, b.CreateZExt(word8, L.i64Ty()));
  res0 = b.CreateOr(b.CreateLShr(res2, 32), b.CreateShl(res0, 32));
  res0 = b.CreateAdd(res0, res1);
  // The product is |x| * 2/pi mod 4 in 64-bit fixed point with 62 fraction bits.
  Value *n = b.CreateLShr(b.CreateAdd(res0, L.i64(int64_t(1) << 61)), 62);
  res0 = b.CreateSub(res0, b.CreateShl(n, 62));
  Value *r = b.CreateFMul(b.CreateSIToFP(res0, L.f64Ty()),
                          L.f64(3.40612158008655459e-19)); // pi/2 * 2^-62
  return {r, b.CreateTrunc(n, L.i32Ty())};
}

/// Writes the body of `f`: sin (isSin) or cos of f32 lanes.
void defineTrig(llvm::Function *f, bool isSin, unsigned lanes) {
  llvm::LLVMContext &ctx = f->getContext();
  f->setLinkage(llvm::GlobalValue::InternalLinkage);
  auto *entry = llvm::BasicBlock::Create(ctx, "entry", f);
  auto *largeBB = llvm::BasicBlock::Create(ctx, "large", f);
  auto *doneBB = llvm::BasicBlock::Create(ctx, "done", f);
  IRBuilder<> b(entry);
  Lanes L{b, lanes};
  Value *x = f->getArg(0);

  // inf and NaN give NaN; they are replaced by 0 first so that no lane converts them to integers.
  Value *ax = b.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x);
  Value *finite = b.CreateFCmpOLT(ax, L.f32(std::numeric_limits<float>::infinity()));
  ax = b.CreateSelect(finite, ax, L.f32(0));
  Value *xd = b.CreateFPExt(ax, L.f64Ty());
  // Below 2^20: n = round(x * 2/pi), r = x - n * pi/2 with pi/2 in two doubles (exact products
  // by FMA; n < 2^20 keeps n * (pi/2 - P1 - P2) around 2^-88, far below any f32 r's ulp).
  Value *nd = b.CreateUnaryIntrinsic(llvm::Intrinsic::roundeven,
                                     b.CreateFMul(xd, L.f64(0.63661977236758134308)));
  Value *rSmall = madd(b, b.CreateFNeg(nd), L.f64(1.57079632679489655800e+00), xd);
  rSmall = madd(b, b.CreateFNeg(nd), L.f64(6.12323399573676603587e-17), rSmall);
  Value *nSmall = b.CreateFPToSI(nd, L.i32Ty()); // poison in lanes >= 2^31, replaced below
  Value *small = b.CreateFCmpOLT(ax, L.f32(1048576.f));
  Value *anyLarge = b.CreateNot(lanes == 1 ? small : b.CreateAndReduce(small));
  llvm::MDBuilder md(ctx);
  b.CreateCondBr(anyLarge, largeBB, doneBB, md.createBranchWeights(1, 1000));

  b.SetInsertPoint(largeBB);
  auto [rLarge, nLarge] = reduceLarge(L, ax);
  Value *rMixed = b.CreateSelect(small, rSmall, rLarge);
  Value *nMixed = b.CreateSelect(small, nSmall, nLarge);
  b.CreateBr(doneBB);

  b.SetInsertPoint(doneBB);
  llvm::PHINode *r = b.CreatePHI(L.f64Ty(), 2);
  r->addIncoming(rSmall, entry);
  r->addIncoming(rMixed, largeBB);
  llvm::PHINode *n = b.CreatePHI(L.i32Ty(), 2);
  n->addIncoming(nSmall, entry);
  n->addIncoming(nMixed, largeBB);
  Value *z = b.CreateFMul(r, r);
  // Minimax polynomials of ARM optimized-routines' sinf / cosf (sincosf_data.c, in double),
  // made for f32 results on |r| <= pi/4: sin r = r + r^3 (s1 + r^2 (s2 + r^2 s3)),
  // cos r = 1 + r^2 (c1 + r^2 (c2 + r^2 (c3 + r^2 c4))).
  Value *s = horner(b, z, {-0x1.994eb3774cf24p-13, 0x1.1107605230bc4p-7, -0x1.555545995a603p-3});
  s = madd(b, b.CreateFMul(s, z), r, r);
  Value *c = horner(b, z,
                    {0x1.99343027bf8c3p-16, -0x1.6c087e89a359dp-10, 0x1.55553e1068f19p-5,
                     -0x1.ffffffd0c621cp-2, 1.0});
  // sin(n pi/2 + r) = sin r, cos r, -sin r, -cos r for n = 0, 1, 2, 3 (mod 4); cos x = sin(x +
  // pi/2) shifts the quadrant by one.
  Value *q = isSin ? static_cast<Value *>(n) : b.CreateAdd(n, L.i32(1));
  Value *odd = b.CreateICmpNE(b.CreateAnd(q, 1), L.i32(0));
  Value *negate = b.CreateICmpNE(b.CreateAnd(q, 2), L.i32(0));
  Value *v = b.CreateSelect(odd, c, s);
  v = b.CreateFPTrunc(b.CreateSelect(negate, b.CreateFNeg(v), v), L.f32Ty());
  if (isSin) // sin is odd (and sin(-0) = -0)
    v = b.CreateSelect(b.CreateICmpSLT(b.CreateBitCast(x, L.i32Ty()), L.i32(0)), b.CreateFNeg(v),
                       v);
  b.CreateRet(b.CreateSelect(finite, v, L.f32(std::numeric_limits<float>::quiet_NaN())));
}

/// The declaration of sin or cos for `lanes` f32 lanes in `m` (declared on first use).
llvm::Function *declareTrig(llvm::Module &m, bool isSin, unsigned lanes) {
  std::string name = trigName(isSin, lanes);
  if (llvm::Function *f = m.getFunction(name)) return f;
  llvm::Type *t = llvm::Type::getFloatTy(m.getContext());
  if (lanes > 1) t = llvm::FixedVectorType::get(t, lanes);
  auto *f = llvm::Function::Create(llvm::FunctionType::get(t, {t}, false),
                                   llvm::GlobalValue::ExternalLinkage, name, m);
  // Pure: the vectorizer, LICM and CSE treat calls like arithmetic.
  f->setDoesNotAccessMemory();
  f->setDoesNotThrow();
  f->setWillReturn();
  f->addFnAttr(llvm::Attribute::NoSync);
  f->addFnAttr(llvm::Attribute::NoFree);
  return f;
}

Value *callTrig(IRBuilder<> &b, Value *x, bool isSin) {
  llvm::Module &m = *b.GetInsertBlock()->getModule();
  auto *vt = llvm::dyn_cast<llvm::FixedVectorType>(x->getType());
  if (vt) return b.CreateCall(declareTrig(m, isSin, vt->getNumElements()), {x});
  // The VFABI names of the variants: _ZGV_LLVM_N<lanes>v_<scalar>(<variant>): unmasked, one
  // vector argument. The variants must be declared for the vectorizer to use them.
  std::string scalar = trigName(isSin, 1), variants;
  for (unsigned w : kVectorWidths) {
    declareTrig(m, isSin, w);
    if (!variants.empty()) variants += ",";
    variants += "_ZGV_LLVM_N" + std::to_string(w) + "v_" + scalar + "(" + trigName(isSin, w) + ")";
  }
  llvm::CallInst *call = b.CreateCall(declareTrig(m, isSin, 1), {x});
  call->addFnAttr(llvm::Attribute::get(m.getContext(), "vector-function-abi-variant", variants));
  return call;
}

} // namespace

Value *sinF32(IRBuilder<> &b, Value *x) { return callTrig(b, x, true); }
Value *cosF32(IRBuilder<> &b, Value *x) { return callTrig(b, x, false); }

void defineMathFunctions(llvm::Module &m) {
  for (bool isSin : {true, false})
    for (unsigned lanes : {1u, 2u, 4u, 8u, 16u, 32u}) {
      llvm::Function *f = m.getFunction(trigName(isSin, lanes));
      if (!f || !f->isDeclaration()) continue;
      if (f->use_empty())
        f->eraseFromParent();
      else
        defineTrig(f, isSin, lanes);
    }
}

} // namespace xjit::backend::math
