// Vectorizable f32 math: exp, log, log1p, expm1, tanh, erf, sigmoid, pow and atan2 as straight-line
// LLVM IR (polynomials, selects, bit operations and shifts of constants, no branches and no calls),
// so a vectorized loop evaluates them on whole vectors. The coefficients are Cephes' (exp, log,
// tanh) and the rational approximation of Eigen / XLA (erf). pow and atan2 work in f64 internally
// (Taylor series whose truncation error is far below an f32 ulp, rounded once at the end), which
// halves the vector width but needs no hand-tuned minimax coefficients. Measured against the
// double results (backend_test, backend_trig_pow_test): exp <= 1 ulp, log <= 1 ulp, tanh <= 2 ulp,
// erf <= 6 ulp, pow 0 ulp (equal to the double result rounded to f32 on every tested input: dense
// sweeps, random bit patterns, specials), atan2 <= 0.5002 ulp. sin and cos are functions of the
// module with vector variants instead (llvm_trig.cpp).
#include "llvm_codegen.h"

#include <llvm/IR/Intrinsics.h>

#include <cmath>
#include <initializer_list>
#include <limits>

namespace xjit::backend::math {

using llvm::IRBuilder;
using llvm::Value;

Value *madd(IRBuilder<> &b, Value *x, Value *y, Value *z) {
  return b.CreateIntrinsic(llvm::Intrinsic::fmuladd, {x->getType()}, {x, y, z});
}

// The f32 routines' coefficients are f32 literals: converting them to double and back is exact.
Value *horner(IRBuilder<> &b, Value *x, std::initializer_list<double> coeffs) {
  auto c = [&](double v) { return llvm::ConstantFP::get(x->getType(), v); };
  auto it = coeffs.begin();
  Value *p = c(*it++);
  for (; it != coeffs.end(); ++it)
    p = madd(b, p, x, c(*it));
  return p;
}

namespace {

Value *f32(IRBuilder<> &b, float v) { return llvm::ConstantFP::get(b.getFloatTy(), v); }
Value *i32(IRBuilder<> &b, int32_t v) { return b.getInt32(static_cast<uint32_t>(v)); }

/// 2^n for an i32 n in the normal exponent range.
Value *pow2(IRBuilder<> &b, Value *n) {
  return b.CreateBitCast(b.CreateShl(b.CreateAdd(n, i32(b, 127)), 23), b.getFloatTy());
}

Value *f64(IRBuilder<> &b, double v) { return llvm::ConstantFP::get(b.getDoubleTy(), v); }
Value *i64(IRBuilder<> &b, int64_t v) { return b.getInt64(static_cast<uint64_t>(v)); }

Value *fabsV(IRBuilder<> &b, Value *x) { return b.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x); }

Value *quietNaN(IRBuilder<> &b) { return f32(b, std::numeric_limits<float>::quiet_NaN()); }

/// log(a) in f64 for a finite f64 a > 0: a = m * 2^e with m in [sqrt(1/2), sqrt(2)),
/// log m = 2 atanh(s), s = (m - 1) / (m + 1), |s| <= 0.172, series to s^15 (error < 1e-12).
Value *logPositiveF64(IRBuilder<> &b, Value *a) {
  llvm::Type *i64Ty = b.getInt64Ty(), *dTy = b.getDoubleTy();
  Value *bits = b.CreateBitCast(a, i64Ty);
  Value *e = b.CreateSub(b.CreateLShr(bits, 52), i64(b, 1023)); // a > 0: no sign bit
  Value *m = b.CreateBitCast(
      b.CreateOr(b.CreateAnd(bits, i64(b, 0x000fffffffffffffLL)), i64(b, 0x3ff0000000000000LL)),
      dTy);
  Value *big = b.CreateFCmpOGT(m, f64(b, 1.41421356237309504880));
  m = b.CreateSelect(big, b.CreateFMul(m, f64(b, 0.5)), m);
  e = b.CreateSelect(big, b.CreateAdd(e, i64(b, 1)), e);
  Value *s = b.CreateFDiv(b.CreateFSub(m, f64(b, 1)), b.CreateFAdd(m, f64(b, 1)));
  Value *z = b.CreateFMul(s, s);
  Value *p = horner(b, z, {1.0 / 15, 1.0 / 13, 1.0 / 11, 1.0 / 9, 1.0 / 7, 1.0 / 5, 1.0 / 3, 1.0});
  Value *logm = b.CreateFMul(b.CreateFMul(s, f64(b, 2)), p);
  return madd(b, b.CreateSIToFP(e, dTy), f64(b, 0.69314718055994530942), logm);
}

/// exp(t) in f64 for t in [-200, 200] (NaN must be removed by the caller).
Value *expBoundedF64(IRBuilder<> &b, Value *t) {
  Value *n = b.CreateUnaryIntrinsic(llvm::Intrinsic::roundeven,
                                    b.CreateFMul(t, f64(b, 1.44269504088896340736)));
  Value *r = madd(b, b.CreateFNeg(n), f64(b, 6.93147180369123816490e-01), t); // ln 2, 2 parts
  r = madd(b, b.CreateFNeg(n), f64(b, 1.90821492927058770002e-10), r);
  // |r| <= 0.347: Taylor to r^11 (truncation below 1e-13).
  Value *p = horner(b, r,
                    {1.0 / 39916800, 1.0 / 3628800, 1.0 / 362880, 1.0 / 40320, 1.0 / 5040,
                     1.0 / 720, 1.0 / 120, 1.0 / 24, 1.0 / 6, 0.5, 1.0, 1.0});
  Value *ni = b.CreateFPToSI(n, b.getInt64Ty());
  Value *scale = b.CreateBitCast(b.CreateShl(b.CreateAdd(ni, i64(b, 1023)), 52), b.getDoubleTy());
  return b.CreateFMul(p, scale);
}

} // namespace

Value *powF32(IRBuilder<> &b, Value *x, Value *y) {
  // |x|^y = exp(y log|x|) in f64, then the sign and C99 / IEEE special cases by selects.
  float inf = std::numeric_limits<float>::infinity();
  llvm::Type *dTy = b.getDoubleTy();
  Value *ax = fabsV(b, x), *ay = fabsV(b, y);
  Value *axd = b.CreateFPExt(ax, dTy);
  Value *normal = b.CreateAnd(b.CreateFCmpOGT(ax, f32(b, 0)), b.CreateFCmpOLT(ax, f32(b, inf)));
  Value *logx = logPositiveF64(b, b.CreateSelect(normal, axd, f64(b, 1)));
  logx = b.CreateSelect(
      normal, logx,
      b.CreateSelect(b.CreateFCmpOEQ(ax, f32(b, 0)), f64(b, -INFINITY), f64(b, INFINITY)));
  Value *t = b.CreateFMul(b.CreateFPExt(y, dTy), logx); // NaN for NaNs, 0 * inf (fixed below)
  t = b.CreateSelect(b.CreateFCmpUNO(t, t), f64(b, 0), t);
  t = b.CreateSelect(b.CreateFCmpOLT(t, f64(b, -200)), f64(b, -200), t);
  t = b.CreateSelect(b.CreateFCmpOGT(t, f64(b, 200)), f64(b, 200), t);
  Value *mag = b.CreateFPTrunc(expBoundedF64(b, t), b.getFloatTy());
  // y an integer (infinities count as even integers); odd only below 2^24 (larger f32 are even).
  Value *yInt = b.CreateFCmpOEQ(b.CreateUnaryIntrinsic(llvm::Intrinsic::trunc, y), y);
  Value *ySmall = b.CreateFCmpOLT(ay, f32(b, 16777216.f));
  Value *yi = b.CreateFPToSI(b.CreateSelect(ySmall, y, f32(b, 0)), b.getInt32Ty());
  Value *yOdd =
      b.CreateAnd(b.CreateAnd(yInt, ySmall), b.CreateICmpNE(b.CreateAnd(yi, i32(b, 1)), i32(b, 0)));
  Value *xNeg = b.CreateICmpSLT(b.CreateBitCast(x, b.getInt32Ty()), i32(b, 0)); // includes -0
  Value *r = b.CreateSelect(b.CreateAnd(xNeg, yOdd), b.CreateFNeg(mag), mag);
  // Finite x < 0 with a finite non-integer y: NaN.
  Value *yFinite = b.CreateFCmpOLT(ay, f32(b, inf));
  Value *badNeg = b.CreateAnd(b.CreateAnd(b.CreateFCmpOLT(x, f32(b, 0)), normal),
                              b.CreateAnd(yFinite, b.CreateNot(yInt)));
  r = b.CreateSelect(badNeg, quietNaN(b), r);
  r = b.CreateSelect(b.CreateFCmpUNO(x, y), quietNaN(b), r);
  // 1 whatever the other operand: y == 0, x == 1, and x == -1 with y = +-inf.
  Value *one = b.CreateOr(b.CreateFCmpOEQ(y, f32(b, 0)), b.CreateFCmpOEQ(x, f32(b, 1)));
  one = b.CreateOr(one,
                   b.CreateAnd(b.CreateFCmpOEQ(x, f32(b, -1)), b.CreateFCmpOEQ(ay, f32(b, inf))));
  return b.CreateSelect(one, f32(b, 1), r);
}

Value *atan2F32(IRBuilder<> &b, Value *y, Value *x) {
  // t = min(|x|, |y|) / max(|x|, |y|) in [0, 1] (0/0 -> 0, inf/inf -> 1, as C's atan2 wants);
  // atan t = pi/4 + atan((t - 1) / (t + 1)) above tan(pi/8), then the octant and quadrant fixes
  // and the sign of y. All in f64, Taylor series to u^23 on |u| <= tan(pi/8) (error < 1e-10).
  llvm::Type *dTy = b.getDoubleTy();
  Value *ax = fabsV(b, x), *ay = fabsV(b, y);
  Value *yBigger = b.CreateFCmpOGT(ay, ax);
  Value *num = b.CreateFPExt(b.CreateSelect(yBigger, ax, ay), dTy);
  Value *den = b.CreateFPExt(b.CreateSelect(yBigger, ay, ax), dTy);
  Value *t = b.CreateFDiv(num, den);
  t = b.CreateSelect(b.CreateFCmpOEQ(den, f64(b, 0)), f64(b, 0), t);
  t = b.CreateSelect(b.CreateFCmpOEQ(num, f64(b, INFINITY)), f64(b, 1), t);
  t = b.CreateSelect(b.CreateFCmpUNO(t, t), f64(b, 0), t);
  Value *hi = b.CreateFCmpOGT(t, f64(b, 0.41421356237309504880));
  Value *u =
      b.CreateSelect(hi, b.CreateFDiv(b.CreateFSub(t, f64(b, 1)), b.CreateFAdd(t, f64(b, 1))), t);
  Value *z = b.CreateFMul(u, u);
  Value *p = horner(b, z,
                    {-1.0 / 23, 1.0 / 21, -1.0 / 19, 1.0 / 17, -1.0 / 15, 1.0 / 13, -1.0 / 11,
                     1.0 / 9, -1.0 / 7, 1.0 / 5, -1.0 / 3});
  Value *a = madd(b, b.CreateFMul(p, z), u, u);
  a = b.CreateSelect(hi, b.CreateFAdd(a, f64(b, 0.78539816339744830962)), a);
  a = b.CreateSelect(yBigger, b.CreateFSub(f64(b, 1.57079632679489661923), a), a);
  Value *xNeg = b.CreateICmpSLT(b.CreateBitCast(x, b.getInt32Ty()), i32(b, 0)); // includes -0
  a = b.CreateSelect(xNeg, b.CreateFSub(f64(b, 3.14159265358979323846), a), a);
  Value *r =
      b.CreateBinaryIntrinsic(llvm::Intrinsic::copysign, b.CreateFPTrunc(a, b.getFloatTy()), y);
  return b.CreateSelect(b.CreateFCmpUNO(x, y), quietNaN(b), r);
}

namespace {

/// Which ends of exp's range a caller's argument can reach (its clamps are skipped otherwise).
enum class ExpRange { Any, NonPositive, NonNegative };

Value *expF32In(IRBuilder<> &b, Value *x, ExpRange range) {
  // exp(x) = 2^n * exp(r), n = round(x / ln 2), |r| <= ln2 / 2. x is kept to where the result
  // is neither certainly infinite nor certainly zero, and 2^n is applied as two factors so that
  // results in the subnormal range round once, like the exact result. NaN passes the clamps (a
  // select keeps x when the compare is false); its n converts to poison, and the last select
  // returns x in its place.
  // Below -104 the result rounds to 0 (exp(-104) < 2^-150). Those lanes compute on 0 instead
  // and select 0 at the end: computed, their last multiply underflowed through the subnormals,
  // a microcode assist per element on Intel cores (a causal mask's -inf scores made a softmax
  // 4x slower: 192 against 48 us for [12,128,128]).
  Value *zero = nullptr;
  Value *xc = x;
  if (range != ExpRange::NonNegative) {
    zero = b.CreateFCmpOLT(x, f32(b, -104.f));
    xc = b.CreateSelect(zero, f32(b, 0.f), xc);
  }
  if (range != ExpRange::NonPositive)
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
  if (zero) res = b.CreateSelect(zero, f32(b, 0.f), res);
  return b.CreateSelect(b.CreateFCmpUNO(x, x), x, res);
}

} // namespace

Value *expF32(IRBuilder<> &b, Value *x) { return expF32In(b, x, ExpRange::Any); }

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

Value *log1pF32(IRBuilder<> &b, Value *x) {
  // Goldberg's log1p: u = 1 + x rounds, and log(u) * x / (u - 1) corrects for the rounding (a
  // few ulp with an accurate log). u == 1 (tiny x, -0 kept) gives x; x = +inf gives +inf.
  Value *u = b.CreateFAdd(f32(b, 1.f), x);
  Value *d = b.CreateFSub(u, f32(b, 1.f));
  Value *r = b.CreateFMul(logF32(b, u), b.CreateFDiv(x, d));
  r = b.CreateSelect(b.CreateFCmpOEQ(d, f32(b, 0)), x, r);
  float inf = std::numeric_limits<float>::infinity();
  return b.CreateSelect(b.CreateFCmpOEQ(x, f32(b, inf)), x, r);
}

Value *expm1F32(IRBuilder<> &b, Value *x) {
  // Kahan's expm1: u = exp(x) rounds, and (u - 1) * x / log(u) corrects for it. u == 1 (tiny x,
  // -0 kept) gives x, u - 1 == -1 (x below about -17) gives -1, u = +inf gives +inf.
  Value *u = expF32(b, x);
  Value *um1 = b.CreateFSub(u, f32(b, 1.f));
  Value *r = b.CreateFMul(um1, b.CreateFDiv(x, logF32(b, u))); // x / log(u) ~ 1: no overflow
  r = b.CreateSelect(b.CreateFCmpOEQ(um1, f32(b, -1.f)), um1, r);
  r = b.CreateSelect(b.CreateFCmpOEQ(u, f32(b, 1.f)), x, r);
  float inf = std::numeric_limits<float>::infinity();
  return b.CreateSelect(b.CreateFCmpOEQ(u, f32(b, inf)), u, r);
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
  Value *e = expF32In(b, b.CreateFMul(ax, f32(b, 2.f)), ExpRange::NonNegative);
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
  // 1 / (1 + e) for x >= 0, e / (1 + e) for x < 0 (e = exp(-|x|) tiny instead of 1 / (1 + inf)):
  // one division with the numerator selected, not two divisions and a select of their results
  // (same roundings). NaN takes 1 / NaN.
  Value *e = expF32In(b, b.CreateFNeg(b.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x)),
                      ExpRange::NonPositive);
  Value *num = b.CreateSelect(b.CreateFCmpOLT(x, f32(b, 0)), e, f32(b, 1.f));
  return b.CreateFDiv(num, b.CreateFAdd(f32(b, 1.f), e));
}

} // namespace xjit::backend::math
