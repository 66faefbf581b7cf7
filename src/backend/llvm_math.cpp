// Vectorizable f32 math: exp, log, tanh, erf and sigmoid as straight-line LLVM IR (polynomials,
// selects and bit operations, no branches and no calls), so a vectorized loop evaluates them on
// whole vectors. The coefficients are Cephes' (exp, log, tanh) and the rational approximation of
// Eigen / XLA (erf). Measured against the correctly rounded double results (backend_test):
// exp <= 1 ulp, log <= 1 ulp, tanh <= 2 ulp, erf <= 6 ulp.
#include "llvm_codegen.h"

#include <llvm/IR/Intrinsics.h>

#include <initializer_list>
#include <limits>

namespace xjit::backend::math {

using llvm::IRBuilder;
using llvm::Value;

namespace {

Value *f32(IRBuilder<> &b, float v) { return llvm::ConstantFP::get(b.getFloatTy(), v); }
Value *i32(IRBuilder<> &b, int32_t v) { return b.getInt32(static_cast<uint32_t>(v)); }

/// a * b + c, fused where the target has FMA.
Value *madd(IRBuilder<> &b, Value *x, Value *y, Value *z) {
  return b.CreateIntrinsic(llvm::Intrinsic::fmuladd, {x->getType()}, {x, y, z});
}

/// Horner evaluation: ((c0 * x + c1) * x + c2) ...
Value *horner(IRBuilder<> &b, Value *x, std::initializer_list<float> coeffs) {
  auto it = coeffs.begin();
  Value *p = f32(b, *it++);
  for (; it != coeffs.end(); ++it)
    p = madd(b, p, x, f32(b, *it));
  return p;
}

/// 2^n for an i32 n in the normal exponent range.
Value *pow2(IRBuilder<> &b, Value *n) {
  return b.CreateBitCast(b.CreateShl(b.CreateAdd(n, i32(b, 127)), 23), b.getFloatTy());
}

} // namespace

Value *expF32(IRBuilder<> &b, Value *x) {
  // exp(x) = 2^n * exp(r), n = round(x / ln 2), |r| <= ln2 / 2. x is clamped to where the result
  // is neither certainly infinite nor certainly zero, and 2^n is applied as two factors so that
  // results in the subnormal range round once, like the exact result.
  Value *isNan = b.CreateFCmpUNO(x, x);
  Value *xc = b.CreateSelect(isNan, f32(b, 0), x);
  xc = b.CreateSelect(b.CreateFCmpOLT(xc, f32(b, -104.f)), f32(b, -104.f), xc);
  xc = b.CreateSelect(b.CreateFCmpOGT(xc, f32(b, 89.f)), f32(b, 89.f), xc);
  Value *n = b.CreateUnaryIntrinsic(llvm::Intrinsic::roundeven,
                                    b.CreateFMul(xc, f32(b, 1.44269504088896341f)));
  Value *r = madd(b, n, f32(b, -0.693359375f), xc); // ln 2 in two parts (Cody-Waite)
  r = madd(b, n, f32(b, 2.12194440e-4f), r);
  Value *p = horner(b, r,
                    {1.9875691500E-4f, 1.3981999507E-3f, 8.3334519073E-3f, 4.1665795894E-2f,
                     1.6666665459E-1f, 5.0000001201E-1f});
  Value *y = b.CreateFAdd(madd(b, p, b.CreateFMul(r, r), r), f32(b, 1.f));
  Value *ni = b.CreateFPToSI(n, b.getInt32Ty());
  Value *n1 = b.CreateAShr(ni, 1);
  Value *n2 = b.CreateSub(ni, n1);
  Value *res = b.CreateFMul(b.CreateFMul(y, pow2(b, n1)), pow2(b, n2));
  return b.CreateSelect(isNan, x, res);
}

Value *logF32(IRBuilder<> &b, Value *x) {
  // x = m * 2^e with m in [sqrt(0.5), sqrt(2)); log(x) = log1p(m - 1) + e * ln 2. Subnormal x is
  // scaled by 2^23 first; 0, negatives, inf and NaN are selected at the end.
  llvm::Type *i32Ty = b.getInt32Ty();
  Value *sub = b.CreateFCmpOLT(x, f32(b, 1.17549435e-38f));
  Value *xs = b.CreateSelect(sub, b.CreateFMul(x, f32(b, 8388608.f)), x);
  Value *bits = b.CreateBitCast(xs, i32Ty);
  Value *e = b.CreateSub(b.CreateAnd(b.CreateLShr(bits, 23), i32(b, 0xff)), i32(b, 126));
  e = b.CreateSelect(sub, b.CreateSub(e, i32(b, 23)), e);
  Value *m = b.CreateBitCast(b.CreateOr(b.CreateAnd(bits, i32(b, 0x007fffff)), i32(b, 0x3f000000)),
                             b.getFloatTy());
  Value *low = b.CreateFCmpOLT(m, f32(b, 0.707106781186547524f));
  e = b.CreateSelect(low, b.CreateSub(e, i32(b, 1)), e);
  m = b.CreateSelect(low, b.CreateFSub(b.CreateFAdd(m, m), f32(b, 1.f)),
                     b.CreateFSub(m, f32(b, 1.f)));
  Value *z = b.CreateFMul(m, m);
  Value *y = horner(b, m,
                    {7.0376836292E-2f, -1.1514610310E-1f, 1.1676998740E-1f, -1.2420140846E-1f,
                     1.4249322787E-1f, -1.6668057665E-1f, 2.0000714765E-1f, -2.4999993993E-1f,
                     3.3333331174E-1f});
  y = b.CreateFMul(b.CreateFMul(y, m), z);
  Value *fe = b.CreateSIToFP(e, b.getFloatTy());
  y = madd(b, fe, f32(b, -2.12194440e-4f), y);
  y = madd(b, z, f32(b, -0.5f), y);
  Value *r = madd(b, fe, f32(b, 0.693359375f), b.CreateFAdd(m, y));
  float inf = std::numeric_limits<float>::infinity();
  r = b.CreateSelect(b.CreateFCmpOEQ(x, f32(b, inf)), x, r);
  r = b.CreateSelect(b.CreateFCmpOEQ(x, f32(b, 0)), f32(b, -inf), r);
  // x < 0 or NaN: NaN.
  return b.CreateSelect(b.CreateFCmpOGE(x, f32(b, 0)), r,
                        f32(b, std::numeric_limits<float>::quiet_NaN()));
}

Value *tanhF32(IRBuilder<> &b, Value *x) {
  // |x| < 0.625: x + x^3 P(x^2); otherwise 1 - 2 / (exp(2|x|) + 1) (exp overflow gives 1). The
  // sign is copied from x at the end so that tanh(-0) = -0.
  Value *ax = b.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x);
  Value *z = b.CreateFMul(x, x);
  Value *p = horner(b, z,
                    {-5.70498872745E-3f, 2.06390887954E-2f, -5.37397155531E-2f, 1.33314422036E-1f,
                     -3.33332819422E-1f});
  Value *small = madd(b, b.CreateFMul(p, z), x, x);
  Value *e = expF32(b, b.CreateFMul(ax, f32(b, 2.f)));
  Value *large = b.CreateFSub(f32(b, 1.f), b.CreateFDiv(f32(b, 2.f), b.CreateFAdd(e, f32(b, 1.f))));
  Value *r = b.CreateSelect(b.CreateFCmpOLT(ax, f32(b, 0.625f)), small, large);
  return b.CreateBinaryIntrinsic(llvm::Intrinsic::copysign, r, x);
}

Value *erfF32(IRBuilder<> &b, Value *x) {
  // erf(x) ~ x P(x^2) / Q(x^2) on [-4, 4] (erf rounds to +-1 in f32 beyond). The clamp is two
  // selects so that NaN passes through.
  Value *xc = b.CreateSelect(b.CreateFCmpOLT(x, f32(b, -4.f)), f32(b, -4.f), x);
  xc = b.CreateSelect(b.CreateFCmpOGT(xc, f32(b, 4.f)), f32(b, 4.f), xc);
  Value *x2 = b.CreateFMul(xc, xc);
  Value *p = horner(b, x2,
                    {-2.72614225801306e-10f, 2.77068142495902e-08f, -2.10102402082508e-06f,
                     -5.69250639462346e-05f, -7.34990630326855e-04f, -2.95459980854025e-03f,
                     -1.60960333262415e-02f});
  Value *q = horner(b, x2,
                    {-1.45660718464996e-05f, -2.13374055278905e-04f, -1.68282697438203e-03f,
                     -7.37332916720468e-03f, -1.42647390514189e-02f});
  Value *r = b.CreateFDiv(b.CreateFMul(xc, p), q);
  // Tiny |x|: x * P(0) would be subnormal and lose bits; erf(x) = 2x / sqrt(pi) there.
  Value *tiny = b.CreateFCmpOLT(b.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x), f32(b, 1e-10f));
  return b.CreateSelect(tiny, b.CreateFMul(x, f32(b, 1.12837916709551257f)), r);
}

Value *sigmoidF32(IRBuilder<> &b, Value *x) {
  Value *e = expF32(b, b.CreateFNeg(b.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x)));
  Value *denom = b.CreateFAdd(f32(b, 1.f), e);
  Value *pos = b.CreateFDiv(f32(b, 1.f), denom);
  Value *neg = b.CreateFDiv(e, denom);
  // x < 0: e / (1 + e) with e = exp(x) tiny instead of 1 / (1 + inf); NaN takes `pos` (NaN).
  return b.CreateSelect(b.CreateFCmpOLT(x, f32(b, 0)), neg, pos);
}

} // namespace xjit::backend::math
