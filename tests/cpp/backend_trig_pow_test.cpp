// Accuracy of the f32 sin, cos (src/backend/llvm_trig.cpp), pow and atan2 (llvm_math.cpp) against
// the double results of the C library: max ulp over dense sweeps, random bit patterns (the whole
// finite range, so the large-argument reduction of sin / cos is covered), the neighbourhood of
// the reduction switch at 2^20, floats nearest to multiples of pi/2, and C's special values
// (signed zeros, infinities, NaN, subnormals) exactly.
#include "xjit/backend/jit.h"
#include "xjit/backend/kernel_ir.h"
#include "xjit/backend/lower.h"
#include "xjit/ir/builder.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace xjit::backend {
namespace {

constexpr float kInfF = std::numeric_limits<float>::infinity();
constexpr float kNaNF = std::numeric_limits<float>::quiet_NaN();

/// |got - ref| in units of the f32 ulp at float(ref) (subnormal ulp below the normal range).
double ulpError(float got, double ref) {
  float r = float(ref);
  if (std::isnan(r)) return std::isnan(got) ? 0 : INFINITY;
  if (got == r) return 0;
  if (std::isinf(r) || std::isinf(got) || std::isnan(got)) return INFINITY;
  float ar = std::fabs(r);
  double ulp = double(std::nextafter(ar, kInfF)) - double(ar);
  if (std::fabs(r) < 1.17549435e-38) ulp = 1.401298464324817e-45;
  return std::fabs(double(got) - ref) / ulp;
}

Type tensorType(DType d, std::vector<int64_t> dims) {
  return Type::tensor(d, Shape(dims.begin(), dims.end()));
}

/// Runs `op` elementwise on f32 inputs through the LLVM backend.
std::vector<float> runOp(const std::string &op, const std::vector<std::vector<float>> &args) {
  const int64_t n = int64_t(args[0].size());
  Graph g(op);
  std::vector<Value *> ins;
  for (size_t i = 0; i < args.size(); ++i)
    ins.push_back(g.addInput(tensorType(DType::F32, {n}), "x" + std::to_string(i)));
  Builder b(g.body());
  b.createWithTypes("return", {b.op(op, ins)}, {});
  LoweredKernel lk = lowerElementwiseBlock(*g.body(), op);
  auto ck = Jit::instance().compile(lk.kernel);
  std::vector<RtValue> inputs;
  for (const auto &a : args) {
    Tensor t = Tensor::empty(DType::F32, {n});
    std::memcpy(t.data(), a.data(), a.size() * sizeof(float));
    inputs.emplace_back(t);
  }
  Tensor out = runLowered(lk, *ck, inputs)[0].tensor();
  std::vector<float> r(size_t(n), 0.f);
  for (int64_t i = 0; i < n; ++i)
    r[size_t(i)] = float(out.getDouble(i));
  return r;
}

float randomFiniteFloat(std::mt19937 &rng) {
  for (;;) {
    uint32_t bits = rng();
    float f;
    std::memcpy(&f, &bits, sizeof f);
    if (std::isfinite(f)) return f;
  }
}

struct Worst {
  double ulp = 0;
  std::string at;
};

void checkUnary(const std::string &op, double (*ref)(double), const std::vector<float> &xs,
                double maxUlp) {
  std::vector<float> got = runOp(op, {xs});
  Worst w;
  for (size_t i = 0; i < xs.size(); ++i) {
    double e = ulpError(got[i], ref(double(xs[i])));
    if (e > w.ulp) w = {e, std::to_string(xs[i])};
  }
  EXPECT_LE(w.ulp, maxUlp) << op << " at x = " << w.at;
  ::testing::Test::RecordProperty(op + "_max_ulp", std::to_string(w.ulp));
}

void checkBinary(const std::string &op, double (*ref)(double, double), const std::vector<float> &xs,
                 const std::vector<float> &ys, double maxUlp) {
  std::vector<float> got = runOp(op, {xs, ys});
  Worst w;
  for (size_t i = 0; i < xs.size(); ++i) {
    double e = ulpError(got[i], ref(double(xs[i]), double(ys[i])));
    if (e > w.ulp) w = {e, std::to_string(xs[i]) + ", " + std::to_string(ys[i])};
  }
  EXPECT_LE(w.ulp, maxUlp) << op << " at " << w.at;
  ::testing::Test::RecordProperty(op + "_max_ulp", std::to_string(w.ulp));
}

/// Special values must match C exactly: NaN-ness, infinities and the sign of zeros.
void expectSpecialsMatch(const std::string &what, float got, double ref) {
  float r = float(ref);
  if (std::isnan(r)) {
    EXPECT_TRUE(std::isnan(got)) << what << " = " << got << ", want NaN";
  } else if (r == 0 || std::isinf(r)) {
    EXPECT_TRUE(got == r && std::signbit(got) == std::signbit(r))
        << what << " = " << got << ", want " << r;
  } else {
    EXPECT_LE(ulpError(got, ref), 1.0) << what << " = " << got << ", want " << r;
  }
}

const std::vector<float> kSpecials = {
    kNaNF,  kInfF,   -kInfF,   0.f,        -0.f,        1.f,       -1.f,   0.5f,    -0.5f,
    2.f,    -2.f,    2.5f,     -2.5f,      3.f,         -3.f,      1e-40f, -1e-40f, 1e30f,
    -1e30f, 3.4e38f, -3.4e38f, 16777216.f, -16777215.f, 1048576.f, 0.75f};

double sinRef(double x) { return std::sin(x); }
double cosRef(double x) { return std::cos(x); }
double powRef(double x, double y) { return std::pow(x, y); }
double atan2Ref(double y, double x) { return std::atan2(y, x); }

/// Binary op `op` on every pair of special values, each matched exactly against `ref`.
void checkSpecialPairs(const std::string &op, double (*ref)(double, double)) {
  std::vector<float> as, bs;
  for (float a : kSpecials)
    for (float b : kSpecials)
      as.push_back(a), bs.push_back(b);
  std::vector<float> got = runOp(op, {as, bs});
  for (size_t i = 0; i < as.size(); ++i)
    expectSpecialsMatch(op + "(" + std::to_string(as[i]) + ", " + std::to_string(bs[i]) + ")",
                        got[i], ref(as[i], bs[i]));
}

TEST(BackendTrigPow, SinCosWithinOneUlp) {
  std::mt19937 rng(7);
  std::vector<float> xs;
  for (int i = 0; i < (1 << 17); ++i) // dense around the origin
    xs.push_back(-10.f + 20.f * float(i) / float(1 << 17));
  for (int i = 0; i < (1 << 15); ++i) // every magnitude, both reduction paths
    xs.push_back(randomFiniteFloat(rng));
  for (int i = -2000; i <= 2000; ++i) { // the switch between the two reductions at 2^20
    xs.push_back(1048576.f + float(i) * 0.0625f);
    xs.push_back(-1048576.f - float(i) * 0.0625f);
  }
  for (int k = 1; k < 20000; k += 7) // floats nearest to multiples of pi/2 (r tiny)
    for (float f : {float(k * M_PI_2), float(k * 1021 * M_PI_2), float(k * 104729.0 * M_PI_2)})
      for (float g : {f, std::nextafter(f, 0.f), std::nextafter(f, kInfF)})
        xs.push_back(g);
  for (float s : {1e-45f, 1e-38f, 1e-20f, 1e-5f}) // tiny: sin x = x, cos x = 1
    xs.push_back(s);
  checkUnary("sin", sinRef, xs, 0.6); // measured 0.5599 (ARM's minimax polynomials)
  checkUnary("cos", cosRef, xs, 0.6); // measured 0.5588
  std::vector<float> gs = runOp("sin", {kSpecials}), gc = runOp("cos", {kSpecials});
  for (size_t i = 0; i < kSpecials.size(); ++i) {
    expectSpecialsMatch("sin(" + std::to_string(kSpecials[i]) + ")", gs[i], sinRef(kSpecials[i]));
    expectSpecialsMatch("cos(" + std::to_string(kSpecials[i]) + ")", gc[i], cosRef(kSpecials[i]));
  }
}

TEST(BackendTrigPow, PowWithinOneUlp) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> expo(-40.f, 40.f), base(-3.f, 3.f);
  std::vector<float> xs, ys;
  for (int i = 0; i < (1 << 16); ++i) { // x in (0, 1e4] log-spaced, y across overflow / underflow
    xs.push_back(float(std::pow(10.0, -8.0 + 12.0 * double(i) / double(1 << 16))));
    ys.push_back(expo(rng));
  }
  for (int i = 0; i < (1 << 14); ++i) { // negative bases with integer exponents: signs
    xs.push_back(base(rng));
    ys.push_back(std::round(expo(rng)));
  }
  for (int i = 0; i < (1 << 14); ++i) { // fractional powers of moderate numbers
    xs.push_back(std::fabs(base(rng)) * 100.f);
    ys.push_back(float(i % 64) / 8.f - 4.f);
  }
  for (int i = 0; i < (1 << 14); ++i) { // random bits: every magnitude, mostly 0 / inf / NaN
    xs.push_back(randomFiniteFloat(rng));
    ys.push_back(randomFiniteFloat(rng));
  }
  checkBinary("pow", powRef, xs, ys, 1.0);
  checkSpecialPairs("pow", powRef);
}

TEST(BackendTrigPow, Atan2WithinOneUlp) {
  std::mt19937 rng(13);
  std::uniform_real_distribution<float> unit(-4.f, 4.f);
  std::vector<float> ys, xs;
  for (int i = 0; i < (1 << 17); ++i) {
    ys.push_back(unit(rng));
    xs.push_back(unit(rng));
  }
  for (int i = 0; i < (1 << 15); ++i) { // every magnitude, ratios out to subnormal results
    ys.push_back(randomFiniteFloat(rng));
    xs.push_back(randomFiniteFloat(rng));
  }
  for (int i = 0; i < 4096; ++i) { // around the octant switches t = tan(pi/8) and t = 1
    float t = 0.35f + 0.7f * float(i) / 4096.f;
    for (float sgn : {1.f, -1.f})
      ys.push_back(sgn * t), xs.push_back(1.f), ys.push_back(1.f), xs.push_back(sgn * t);
  }
  checkBinary("atan2", atan2Ref, ys, xs, 1.0);
  checkSpecialPairs("atan2", atan2Ref);
}

} // namespace
} // namespace xjit::backend
