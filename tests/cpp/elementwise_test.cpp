// Elementwise ops: small graphs built with the Builder and run by the interpreter, checked against
// values worked out by hand or in closed form (and PyTorch's documented behavior for dtype
// promotion, integer wrap-around, NaN propagation and error cases).
#include "op_test_util.h"

#include "xjit/ir/op_registry.h"

#include <cfloat>
#include <cmath>
#include <numbers>

using namespace xjit;
using namespace xjit::optest;

namespace {

const double kE = std::numbers::e;

// ---- unary ----

struct UnaryPoint {
  const char *op;
  double x, want;
};

TEST(ElementwiseUnary, ClosedFormValues) {
  const double pi = std::numbers::pi;
  const UnaryPoint points[] = {
      {"exp", 1, kE},
      {"exp2", 3, 8},
      {"expm1", 0, 0},
      {"log", kE * kE, 2},
      {"log2", 8, 3},
      {"log10", 1000, 3},
      {"log1p", kE - 1, 1},
      {"sqrt", 6.25, 2.5},
      {"rsqrt", 4, 0.5},
      {"reciprocal", -8, -0.125},
      {"sin", pi / 6, 0.5},
      {"cos", pi / 3, 0.5},
      {"tan", pi / 4, 1},
      {"asin", 0.5, pi / 6},
      {"acos", 0.5, pi / 3},
      {"atan", 1, pi / 4},
      {"sinh", 1, (kE - 1 / kE) / 2},
      {"cosh", 1, (kE + 1 / kE) / 2},
      {"tanh", 1, (kE * kE - 1) / (kE * kE + 1)},
      {"asinh", (kE - 1 / kE) / 2, 1},
      {"acosh", (kE + 1 / kE) / 2, 1},
      {"atanh", 0.5, 0.5 * std::log(3.0)},
      {"sigmoid", 0, 0.5},
      {"sigmoid", std::log(3.0), 0.75},
      {"erf", 0, 0},
      {"erfc", 0, 1},
      {"lgamma", 5, std::log(24.0)},
      {"neg", 2.5, -2.5},
      {"abs", -2.5, 2.5},
      {"floor", -1.5, -2},
      {"ceil", -1.5, -1},
      {"trunc", -1.7, -1},
      {"frac", -1.75, -0.75},
      {"square", -3, 9},
      {"relu", -3, 0},
      {"relu", 2, 2},
      {"relu6", 7, 6},
      {"sign", -0.5, -1},
      {"sign", 0, 0},
      {"silu", std::log(3.0), std::log(3.0) * 0.75},
      {"mish", 1, std::tanh(std::log(1 + kE))},
      {"hardswish", 1, 4.0 / 6},
      {"hardswish", -4, 0},
      {"hardswish", 4, 4},
      {"hardsigmoid", 0, 0.5},
      {"hardsigmoid", 3.5, 1},
      {"log_sigmoid", 0, -std::log(2.0)},
      {"selu", 1, 1.0507009873554805},
      {"selu", -1, 1.0507009873554805 * 1.6732632423543772 * (1 / kE - 1)},
  };
  for (const auto &p : points) {
    Tensor out = run1(p.op, {f32({p.x})});
    expectVec(out, DType::F32, {p.want}, 1e-6);
    Tensor d = run1(p.op, {vec(DType::F64, {p.x})});
    expectVec(d, DType::F64, {p.want}, 1e-12);
  }
}

TEST(ElementwiseUnary, Activations) {
  // Phi(1) = 0.5 * (1 + erf(1/sqrt 2)) = 0.841344746068543.
  expectVec(run1("gelu", {f32({1, 0})}), DType::F32, {0.841344746068543, 0});
  expectVec(run1("gelu", {f32({1})}, {{"approximate", "tanh"}}), DType::F32,
            {0.5 * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * 1.044715))});
  expectVec(run1("softplus", {f32({1, 30})}), DType::F32, {std::log(1 + kE), 30});
  expectVec(run1("softplus", {f32({1, 6})}, {{"beta", 2.0}, {"threshold", 10.0}}), DType::F32,
            {std::log(1 + kE * kE) / 2, 6});
  expectVec(run1("elu", {f32({-1, 2})}), DType::F32, {1 / kE - 1, 2});
  expectVec(run1("elu", {f32({-1})}, {{"alpha", 2.0}}), DType::F32, {2 * (1 / kE - 1)});
  expectVec(run1("celu", {f32({-2, 3})}, {{"alpha", 2.0}}), DType::F32, {2 * (1 / kE - 1), 3});
  expectVec(run1("leaky_relu", {f32({-2, 3})}), DType::F32, {-0.02, 3});
  expectVec(run1("leaky_relu", {f32({-2})}, {{"negative_slope", 0.5}}), DType::F32, {-1});
  expectVec(run1("hardtanh", {f32({-3, 0.5, 3})}), DType::F32, {-1, 0.5, 1});
  expectVec(run1("hardtanh", {f32({-3, 0.5, 3})}, {{"min_val", 0.0}, {"max_val", 2.0}}), DType::F32,
            {0, 0.5, 2});
  expectVec(run1("hardtanh", {vec(DType::I32, {-5, 3})}, {{"min_val", -2.0}, {"max_val", 2.0}}),
            DType::I32, {-2, 2});
  expectVec(run1("relu6", {vec(DType::U8, {250, 3})}), DType::U8, {6, 3});
  expectVec(run1("logit", {f32({0.25, 0.5})}), DType::F32, {std::log(1.0 / 3), 0});
  expectVec(run1("logit", {f32({0, 1})}, {{"eps", 0.1}}), DType::F32,
            {std::log(0.1 / 0.9), std::log(0.9 / 0.1)}, 1e-6);
}

TEST(ElementwiseUnary, NaNAndInfinities) {
  Tensor x = f32({kNaN, kInf, -kInf});
  expectVec(run1("relu", {x}), DType::F32, {kNaN, kInf, 0});
  expectVec(run1("relu6", {x}), DType::F32, {kNaN, 6, 0});
  expectVec(run1("hardtanh", {x}), DType::F32, {kNaN, 1, -1});
  expectVec(run1("leaky_relu", {x}), DType::F32, {kNaN, kInf, -kInf});
  expectVec(run1("sigmoid", {x}), DType::F32, {kNaN, 1, 0});
  expectVec(run1("sign", {x}), DType::F32, {0, 1, -1}); // torch gives 0 for NaN
  expectVec(run1("isnan", {x}), DType::Bool, {1, 0, 0});
  expectVec(run1("isinf", {x}), DType::Bool, {0, 1, 1});
  expectVec(run1("isposinf", {x}), DType::Bool, {0, 1, 0});
  expectVec(run1("isneginf", {x}), DType::Bool, {0, 0, 1});
  expectVec(run1("isfinite", {x}), DType::Bool, {0, 0, 0});
  expectVec(run1("signbit", {f32({-0.0, 0.0, -2})}), DType::Bool, {1, 0, 1});
  expectVec(run1("logical_not", {f32({0, 2, kNaN})}), DType::Bool, {1, 0, 0});
  expectVec(run1("nan_to_num", {f32({kNaN, kInf, -kInf, 1})}), DType::F32,
            {0, FLT_MAX, -FLT_MAX, 1});
  expectVec(run1("nan_to_num", {vec(DType::F16, {kNaN, kInf, -kInf})}), DType::F16,
            {0, 65504, -65504});
  expectVec(run1("nan_to_num", {f32({kNaN, kInf, -kInf})},
                 {{"nan", 1.0}, {"posinf", 2.0}, {"neginf", -3.0}}),
            DType::F32, {1, 2, -3});
}

TEST(ElementwiseUnary, Rounding) {
  expectVec(run1("round", {f32({0.5, 1.5, 2.5, -0.5, -1.5, 2.6})}), DType::F32,
            {0, 2, 2, -0.0, -2, 3});
  // In f32, 1.35 is 1.35000002; scaled by 10 it rounds up. 1.25 * 10 is an exact tie.
  expectVec(run1("round", {f32({1.25, 1.35})}, {{"decimals", int64_t{1}}}), DType::F32, {1.2, 1.4});
  expectVec(run1("round", {f32({125, 135, 144})}, {{"decimals", int64_t{-1}}}), DType::F32,
            {120, 140, 140});
  expectVec(run1("round", {vec(DType::I32, {7, -3})}), DType::I32, {7, -3});
  expectVec(run1("floor", {vec(DType::I64, {7, -3})}), DType::I64, {7, -3});
  expectInferError("round", {ty(DType::I32, {3})}, {{"decimals", int64_t{1}}},
                   "decimals is only supported for floating point");
}

TEST(ElementwiseUnary, IntegerSemantics) {
  expectVec(run1("neg", {vec(DType::U8, {1, 0})}), DType::U8, {255, 0}); // wraps
  expectVec(run1("abs", {vec(DType::I8, {-128, -5})}), DType::I8, {-128, 5});
  expectVec(run1("sign", {vec(DType::Bool, {1, 0})}), DType::Bool, {1, 0});
  expectVec(run1("sign", {vec(DType::I32, {-7, 0, 9})}), DType::I32, {-1, 0, 1});
  expectVec(run1("square", {vec(DType::Bool, {1, 0})}), DType::I64, {1, 0});
  expectVec(run1("square", {vec(DType::I8, {12})}), DType::I8, {-112}); // 144 wraps
  expectVec(run1("bitwise_not", {vec(DType::I32, {5, -1})}), DType::I32, {-6, 0});
  expectVec(run1("bitwise_not", {vec(DType::Bool, {1, 0})}), DType::Bool, {0, 1});
  expectVec(run1("bitwise_not", {vec(DType::U8, {0})}), DType::U8, {255});
  expectVec(run1("relu", {vec(DType::I64, {-4, 4})}), DType::I64, {0, 4});
  // Float math on integers computes in f32.
  expectVec(run1("exp", {vec(DType::I32, {0, 1})}), DType::F32, {1, kE});
  expectVec(run1("sqrt", {vec(DType::Bool, {1, 0})}), DType::F32, {1, 0});
  expectVec(run1("isnan", {vec(DType::I32, {1})}), DType::Bool, {0});
  expectVec(run1("isfinite", {vec(DType::I32, {1})}), DType::Bool, {1});
}

TEST(ElementwiseUnary, DTypeRules) {
  EXPECT_EQ(infer("exp", {ty(DType::I64, {2})})[0], ty(DType::F32, {2}));
  EXPECT_EQ(infer("exp", {ty(DType::BF16, {2})})[0], ty(DType::BF16, {2}));
  EXPECT_EQ(infer("abs", {ty(DType::I16, {s0})})[0], ty(DType::I16, {s0}));
  EXPECT_EQ(infer("isnan", {ty(DType::F16, {})})[0], ty(DType::Bool, {}));
  expectInferError("neg", {ty(DType::Bool, {2})}, {}, "dtype bool is not supported");
  expectInferError("gelu", {ty(DType::I32, {2})}, {}, "floating point");
  expectInferError("bitwise_not", {ty(DType::F32, {2})}, {}, "integer or bool");
  expectInferError("hardtanh", {ty(DType::U8, {2})}, {}, "unsigned type with negative limits");
  expectInferError("hardtanh", {ty(DType::F32, {2})}, {{"min_val", 2.0}, {"max_val", 1.0}},
                   "min_val cannot be greater than max_val");
  expectInferError("celu", {ty(DType::F32, {2})}, {{"alpha", 0.0}}, "alpha cannot be 0");
  expectInferError("gelu", {ty(DType::F32, {2})}, {{"approximate", "fast"}}, "approximate");
  expectInferError("exp", {Type::floatTy()}, {}, "must be a tensor");
}

TEST(ElementwiseUnary, ShapesAndStrides) {
  // 0-d, empty and a non-contiguous (transposed) input.
  expectValues(run1("neg", {scalarTensor(DType::F32, 2)}), DType::F32, {}, {-2});
  expectValues(run1("exp", {make(DType::F32, {0, 3}, {})}), DType::F32, {0, 3}, {});
  Tensor base = make(DType::F32, {2, 3}, {0, 1, 2, 3, 4, 5});
  Tensor t = base.view({3, 2}, {1, 3}, 0); // the transpose: [[0,3],[1,4],[2,5]]
  expectValues(run1("square", {t}), DType::F32, {3, 2}, {0, 9, 1, 16, 4, 25});
  expectValues(run1("bitwise_not", {make(DType::I16, {7}, {0, 1, 2, 3, 4, 5, 6})}), DType::I16, {7},
               {-1, -2, -3, -4, -5, -6, -7});
}

// ---- binary ----

TEST(ElementwiseBinary, BroadcastAddSubWithAlpha) {
  Tensor a = make(DType::F32, {4, 1}, {0, 1, 2, 3});
  Tensor b = make(DType::F32, {1, 5}, {0, 10, 20, 30, 40});
  Tensor sum = run1("add", {a, b}, {{"alpha", int64_t{2}}});
  Values want;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 5; ++j)
      want.push_back(i + 2 * 10.0 * j);
  expectValues(sum, DType::F32, {4, 5}, want);
  Tensor diff = run1("sub", {a, b}, {{"alpha", 0.5}});
  want.clear();
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 5; ++j)
      want.push_back(i - 0.5 * 10.0 * j);
  expectValues(diff, DType::F32, {4, 5}, want);
  // Scalar operands on either side.
  expectVec(run1("add", {f32({1, 2}), RtValue(2.5)}), DType::F32, {3.5, 4.5});
  expectVec(run1("sub", {RtValue(int64_t{10}), vec(DType::I32, {1, 2})}), DType::I32, {9, 8});
  expectValues(run1("add", {make(DType::F32, {0, 3}, {}), f32({1, 2, 3})}), DType::F32, {0, 3}, {});
  expectValues(run1("mul", {scalarTensor(DType::F32, 3), scalarTensor(DType::F32, 4)}), DType::F32,
               {}, {12});
}

TEST(ElementwiseBinary, PromotionAndWrapAround) {
  EXPECT_EQ(infer("add", {ty(DType::I32, {3}), Type::floatTy()})[0], ty(DType::F32, {3}));
  EXPECT_EQ(infer("add", {ty(DType::I32, {3}), ty(DType::I64, {})})[0], ty(DType::I32, {3}));
  EXPECT_EQ(infer("add", {ty(DType::I32, {3}), ty(DType::F64, {})})[0], ty(DType::F64, {3}));
  EXPECT_EQ(infer("add", {ty(DType::F16, {3}), ty(DType::F32, {})})[0], ty(DType::F16, {3}));
  EXPECT_EQ(infer("add", {ty(DType::Bool, {3}), Type::intTy()})[0], ty(DType::I64, {3}));
  EXPECT_EQ(infer("add", {ty(DType::U8, {3}), ty(DType::I8, {3})})[0], ty(DType::I16, {3}));
  EXPECT_EQ(infer("div", {ty(DType::I32, {3}), ty(DType::I32, {3})})[0], ty(DType::F32, {3}));
  EXPECT_EQ(
      infer("div", {ty(DType::I32, {3}), ty(DType::I32, {3})}, {{"rounding_mode", "floor"}})[0],
      ty(DType::I32, {3}));
  EXPECT_EQ(infer("atan2", {ty(DType::I64, {3}), ty(DType::I64, {3})})[0], ty(DType::F32, {3}));
  EXPECT_EQ(infer("lt", {ty(DType::F32, {2, 1}), ty(DType::I64, {3})})[0], ty(DType::Bool, {2, 3}));
  EXPECT_EQ(infer("mul", {ty(DType::F32, {s0, 1}), ty(DType::F32, {1, 5})})[0],
            ty(DType::F32, {s0, 5}));
  expectVec(run1("add", {vec(DType::U8, {1, 255}), RtValue(int64_t{-1})}), DType::U8, {0, 254});
  expectVec(run1("add", {vec(DType::I8, {1}), RtValue(int64_t{300})}), DType::I8, {45});
  expectVec(run1("add", {vec(DType::Bool, {1, 0, 0}), vec(DType::Bool, {1, 1, 0})}), DType::Bool,
            {1, 1, 0});
  expectVec(run1("mul", {vec(DType::Bool, {1, 0}), RtValue(2.5)}), DType::F32, {2.5, 0});
  // i64 values are converted to f32 before comparing with a float (16777217 rounds to 2^24).
  expectVec(run1("eq", {vec(DType::I64, {16777217}), RtValue(16777216.0)}), DType::Bool, {1});
}

TEST(ElementwiseBinary, TwoScalarsFollowPython) {
  auto one = [](std::string_view op, RtValue a, RtValue b, AttrMap attrs = {}) {
    return run(op, {a, b}, std::move(attrs)).at(0);
  };
  RtValue r = one("add", int64_t{2}, int64_t{3});
  ASSERT_TRUE(r.isInt());
  EXPECT_EQ(r.toInt(), 5);
  r = one("add", true, true); // Python: True + True == 2
  ASSERT_TRUE(r.isInt());
  EXPECT_EQ(r.toInt(), 2);
  r = one("div", int64_t{7}, int64_t{2});
  ASSERT_TRUE(r.isFloat());
  EXPECT_EQ(r.toDouble(), 3.5);
  EXPECT_EQ(one("floor_divide", int64_t{-7}, int64_t{2}).toInt(), -4);
  EXPECT_EQ(one("remainder", int64_t{-7}, int64_t{2}).toInt(), 1);
  EXPECT_EQ(one("remainder", 7.5, -2.0).toDouble(), -0.5);
  EXPECT_EQ(one("fmod", -7.5, 2.0).toDouble(), -1.5);
  EXPECT_EQ(one("pow", int64_t{2}, int64_t{10}).toInt(), 1024);
  EXPECT_EQ(one("mul", int64_t{6}, 0.5).toDouble(), 3.0);
  r = one("eq", int64_t{2}, 2.0);
  ASSERT_TRUE(r.isBool());
  EXPECT_TRUE(r.toBool());
  r = one("bitwise_and", true, false);
  ASSERT_TRUE(r.isBool());
  EXPECT_FALSE(r.toBool());
  EXPECT_EQ(one("bitwise_xor", int64_t{6}, int64_t{3}).toInt(), 5);
  r = one("maximum", int64_t{1}, 2.5);
  ASSERT_TRUE(r.isFloat());
  EXPECT_EQ(r.toDouble(), 2.5);
  EXPECT_EQ(one("sub", int64_t{1}, int64_t{5}, {{"alpha", int64_t{2}}}).toInt(), -9);
  EXPECT_EQ(infer("add", {Type::intTy(), Type::floatTy()})[0], Type::floatTy());
  EXPECT_EQ(infer("lt", {Type::intTy(), Type::intTy()})[0], Type::boolTy());
  EXPECT_THROW(one("div", int64_t{1}, int64_t{0}), Error);
  EXPECT_THROW(one("remainder", 1.0, 0.0), Error);
  EXPECT_THROW(one("pow", int64_t{2}, int64_t{-1}), Error);
  expectInferError("bitwise_or", {Type::floatTy(), Type::intTy()}, {}, "integer or bool");
}

TEST(ElementwiseBinary, DivisionFamily) {
  Tensor a = vec(DType::I32, {-7, 7, -8, 5}), b = vec(DType::I32, {2, -2, 3, 5});
  expectVec(run1("div", {a, b}), DType::F32, {-3.5, -3.5, -8.0 / 3, 1});
  expectVec(run1("div", {a, b}, {{"rounding_mode", "trunc"}}), DType::I32, {-3, -3, -2, 1});
  expectVec(run1("div", {a, b}, {{"rounding_mode", "floor"}}), DType::I32, {-4, -4, -3, 1});
  expectVec(run1("floor_divide", {a, b}), DType::I32, {-4, -4, -3, 1});
  expectVec(run1("remainder", {a, b}), DType::I32, {1, -1, 1, 0});
  expectVec(run1("fmod", {a, b}), DType::I32, {-1, 1, -2, 0});
  Tensor fa = f32({-7, 7, -0.5, 5}), fb = f32({2, -2, 2, 0});
  expectVec(run1("floor_divide", {fa, fb}), DType::F32, {-4, -4, -1, kInf});
  expectVec(run1("div", {fa, fb}, {{"rounding_mode", "trunc"}}), DType::F32, {-3, -3, -0.0, kInf});
  expectVec(run1("remainder", {fa, fb}), DType::F32, {1, -1, 1.5, kNaN});
  expectVec(run1("fmod", {fa, fb}), DType::F32, {-1, 1, -0.5, kNaN});
  expectVec(run1("floor_divide", {f32({-5, 0}), RtValue(0.0)}), DType::F32, {-kInf, kNaN});
  // i8: -128 // -1 wraps to -128 like torch, instead of trapping.
  expectVec(run1("floor_divide", {vec(DType::I8, {-128}), RtValue(int64_t{-1})}), DType::I8,
            {-128});
  expectVec(run1("remainder", {vec(DType::I64, {INT64_MIN}), RtValue(int64_t{-1})}), DType::I64,
            {0});
  EXPECT_THROW(run1("floor_divide", {a, vec(DType::I32, {1, 0, 1, 1})}), Error);
  EXPECT_THROW(run1("remainder", {a, RtValue(int64_t{0})}), Error);
  EXPECT_THROW(run1("fmod", {a, vec(DType::I32, {0, 1, 1, 1})}), Error);
  expectInferError("floor_divide", {ty(DType::Bool, {2}), ty(DType::Bool, {2})}, {}, "bool");
  expectInferError("div", {ty(DType::F32, {2}), ty(DType::F32, {2})}, {{"rounding_mode", "up"}},
                   "rounding_mode");
}

TEST(ElementwiseBinary, Powers) {
  expectVec(run1("pow", {vec(DType::I8, {2, 3}), vec(DType::I8, {7, 5})}), DType::I8, {-128, -13});
  expectVec(run1("pow", {vec(DType::I64, {2, -1, 1, -1}), vec(DType::I64, {-1, -1, -5, -2})}),
            DType::I64, {0, -1, 1, 1});
  expectVec(run1("pow", {RtValue(int64_t{2}), vec(DType::I32, {3, 0})}), DType::I32, {8, 1});
  expectVec(run1("pow", {f32({4, -8}), RtValue(0.5)}), DType::F32, {2, kNaN});
  expectVec(run1("pow", {vec(DType::I32, {4}), RtValue(0.5)}), DType::F32, {2});
  expectVec(run1("pow", {vec(DType::Bool, {1, 0}), RtValue(int64_t{2})}), DType::I64, {1, 0});
  EXPECT_THROW(run1("pow", {vec(DType::I32, {2}), RtValue(int64_t{-1})}), Error);
  expectInferError("pow", {ty(DType::Bool, {2}), ty(DType::Bool, {2})}, {}, "bool");
}

TEST(ElementwiseBinary, ReducedFloatScalarOperands) {
  // f16(2.7) = 2.69921875. torch's mul/div/floor_divide read a scalar `other` in f32 for f16/bf16
  // tensors; other ops (eq, sub...) round it to f16 first.
  Tensor x = vec(DType::F16, {2.7});
  expectVec(run1("mul", {x, RtValue(2.7)}), DType::F16, {7.2890625}); // f16(2.69921875 * 2.7)
  expectVec(run1("floor_divide", {x, RtValue(2.7)}), DType::F16, {0});
  expectVec(run1("div", {x, scalarTensor(DType::F32, 2.7)}, {{"rounding_mode", "trunc"}}),
            DType::F16, {0});
  expectVec(run1("eq", {x, RtValue(2.7)}), DType::Bool, {1});
  expectVec(run1("sub", {x, RtValue(2.7)}), DType::F16, {0});
  // A bool exponent is special-cased: x ** True is x, x ** False is 1.
  expectVec(run1("pow", {vec(DType::Bool, {1, 0}), RtValue(true)}), DType::Bool, {1, 0});
  expectVec(run1("pow", {vec(DType::Bool, {1, 0}), RtValue(false)}), DType::Bool, {1, 1});
}

TEST(ElementwiseBinary, ComparisonsMinMaxLogicalBitwise) {
  Tensor a = f32({1, kNaN, 3, -1}), b = f32({2, 1, 3, kNaN});
  expectVec(run1("lt", {a, b}), DType::Bool, {1, 0, 0, 0});
  expectVec(run1("le", {a, b}), DType::Bool, {1, 0, 1, 0});
  expectVec(run1("gt", {a, b}), DType::Bool, {0, 0, 0, 0});
  expectVec(run1("ge", {a, b}), DType::Bool, {0, 0, 1, 0});
  expectVec(run1("eq", {a, b}), DType::Bool, {0, 0, 1, 0});
  expectVec(run1("ne", {a, b}), DType::Bool, {1, 1, 0, 1});
  expectVec(run1("maximum", {a, b}), DType::F32, {2, kNaN, 3, kNaN});
  expectVec(run1("minimum", {a, b}), DType::F32, {1, kNaN, 3, kNaN});
  expectVec(run1("fmax", {a, b}), DType::F32, {2, 1, 3, -1});
  expectVec(run1("fmin", {a, b}), DType::F32, {1, 1, 3, -1});
  expectVec(run1("maximum", {vec(DType::I32, {1}), scalarTensor(DType::F32, 2.5)}), DType::F32,
            {2.5});
  expectVec(run1("logical_and", {f32({0, 2, kNaN}), vec(DType::I32, {5, 0, 1})}), DType::Bool,
            {0, 0, 1});
  expectVec(run1("logical_or", {f32({0, 0}), vec(DType::I32, {0, 1})}), DType::Bool, {0, 1});
  expectVec(run1("logical_xor", {vec(DType::Bool, {1, 1}), RtValue(int64_t{1})}), DType::Bool,
            {0, 0});
  expectVec(run1("bitwise_and", {vec(DType::I32, {12, -1}), vec(DType::I32, {10, 7})}), DType::I32,
            {8, 7});
  expectVec(run1("bitwise_or", {vec(DType::U8, {12}), vec(DType::U8, {3})}), DType::U8, {15});
  expectVec(run1("bitwise_xor", {vec(DType::Bool, {1, 0}), RtValue(int64_t{1})}), DType::I64,
            {0, 1});
  expectVec(run1("bitwise_and", {vec(DType::I32, {5}), RtValue(true)}), DType::I32, {1});
  expectInferError("bitwise_and", {ty(DType::F32, {2}), ty(DType::F32, {2})}, {}, "f32");
  expectInferError("bitwise_and", {ty(DType::I32, {2}), Type::floatTy()}, {}, "f32");
}

TEST(ElementwiseBinary, FloatMath) {
  expectVec(run1("atan2", {vec(DType::I32, {1, -1}), vec(DType::I32, {1, -1})}), DType::F32,
            {std::numbers::pi / 4, -3 * std::numbers::pi / 4});
  expectVec(run1("hypot", {f32({3, 5}), f32({4, 12})}), DType::F32, {5, 13});
  expectVec(run1("copysign", {f32({1, 2, 3}), f32({-0.0, -5, kNaN})}), DType::F32, {-1, -2, 3});
  expectVec(run1("copysign", {vec(DType::I32, {1}), vec(DType::I32, {-1})}), DType::F32, {-1});
  expectVec(run1("xlogy", {f32({0, 0, 2}), f32({0, kNaN, kE})}), DType::F32, {0, kNaN, 2});
  expectInferError("hypot", {ty(DType::I32, {2}), ty(DType::I32, {2})}, {}, "floating point");
}

TEST(ElementwiseBinary, Errors) {
  expectInferError("sub", {ty(DType::Bool, {2}), ty(DType::Bool, {2})}, {}, "bool tensor");
  expectInferError("sub", {ty(DType::F32, {2}), Type::boolTy()}, {}, "bool tensor");
  expectInferError("add", {ty(DType::I32, {2}), ty(DType::I32, {2})}, {{"alpha", 0.5}},
                   "alpha must not be a floating point number");
  expectInferError("add", {ty(DType::F32, {2, 3}), ty(DType::F32, {4})}, {}, "broadcast");
  expectInferError("add", {ty(DType::F32, {2}), Type::strTy()}, {}, "tensor or a Python scalar");
  expectInferError("maximum", {Type::intTy(), Type::strTy()}, {}, "tensor or a Python scalar");
}

TEST(ElementwiseBinary, NonContiguousOperands) {
  Tensor base = make(DType::F32, {2, 3}, {0, 1, 2, 3, 4, 5});
  Tensor t = base.view({3, 2}, {1, 3}, 0); // [[0,3],[1,4],[2,5]]
  Tensor c = make(DType::F32, {3, 2}, {1, 1, 2, 2, 3, 3});
  expectValues(run1("mul", {t, c}), DType::F32, {3, 2}, {0, 3, 2, 8, 6, 15});
  Tensor odd = make(DType::I32, {7}, {0, 1, 2, 3, 4, 5, 6});
  Tensor stepped =
      make(DType::I32, {14}, {0, 9, 1, 9, 2, 9, 3, 9, 4, 9, 5, 9, 6, 9}).view({7}, {2}, 0);
  expectVec(run1("eq", {odd, stepped}), DType::Bool, {1, 1, 1, 1, 1, 1, 1});
}

// ---- clamp, where, cast, lerp, addcmul, addcdiv ----

TEST(ElementwiseMisc, Clamp) {
  expectVec(run1("clamp", {f32({-2, 0.5, 3, kNaN})}, {{"min", -1.0}, {"max", 1.0}}), DType::F32,
            {-1, 0.5, 1, kNaN});
  expectVec(run1("clamp", {f32({-2, 3})}, {{"min", 0.0}}), DType::F32, {0, 3});
  expectVec(run1("clamp", {f32({-2, 3})}, {{"max", 0.0}}), DType::F32, {-2, 0});
  expectVec(run1("clamp", {f32({-2, 3})}, {{"min", 2.0}, {"max", 1.0}}), DType::F32, {1, 1});
  expectVec(run1("clamp", {f32({1, 2})}, {{"min", kNaN}, {"max", 0.5}}), DType::F32, {kNaN, kNaN});
  expectVec(
      run1("clamp", {vec(DType::I32, {5, -3, 7})}, {{"min", int64_t{0}}, {"max", int64_t{4}}}),
      DType::I32, {4, 0, 4});
  expectVec(run1("clamp", {vec(DType::I32, {5, -3})}, {{"min", 0.5}}), DType::F32, {5, 0.5});
  expectVec(run1("clamp", {vec(DType::Bool, {1, 0})}, {{"min", int64_t{0}}}), DType::I64, {1, 0});
  expectVec(run1("clamp", {vec(DType::U8, {1, 2})}, {{"min", int64_t{-1}}, {"max", int64_t{1}}}),
            DType::U8, {1, 1});
  expectInferError("clamp", {ty(DType::F32, {2})}, {}, "at least one of 'min' or 'max'");
  expectInferError("clamp", {ty(DType::I8, {2})}, {{"min", int64_t{300}}}, "overflow");
  expectInferError("clamp", {ty(DType::F16, {2})}, {{"max", 70000.0}}, "overflow");
  expectInferError("clamp", {ty(DType::Bool, {2})}, {{"min", false}}, "bool");
}

TEST(ElementwiseMisc, Where) {
  Tensor cond = make(DType::Bool, {4, 1}, {1, 0, 1, 0});
  Tensor a = make(DType::F32, {1, 5}, {0, 1, 2, 3, 4});
  Tensor out = run1("where", {cond, a, RtValue(-1.0)});
  Values want;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 5; ++j)
      want.push_back(i % 2 == 0 ? j : -1);
  expectValues(out, DType::F32, {4, 5}, want);
  expectVec(run1("where", {vec(DType::Bool, {1, 0}), RtValue(int64_t{1}), RtValue(2.5)}),
            DType::F32, {1, 2.5});
  expectVec(run1("where", {vec(DType::Bool, {1, 0}), RtValue(int64_t{1}), RtValue(int64_t{2})}),
            DType::I64, {1, 2});
  expectVec(
      run1("where", {vec(DType::Bool, {1, 0}), vec(DType::I8, {1, 2}), vec(DType::U8, {3, 4})}),
      DType::I16, {1, 4});
  expectVec(run1("where", {vec(DType::U8, {1, 0}), f32({1, 2}), f32({3, 4})}), DType::F32, {1, 4});
  expectInferError("where", {ty(DType::I32, {2}), ty(DType::F32, {2}), ty(DType::F32, {2})}, {},
                   "condition");
}

TEST(ElementwiseMisc, Cast) {
  Tensor x = f32({2.7, -2.7, 300, 0});
  expectVec(run1("cast", {x}, {{"dtype", DType::U8}}), DType::U8, {2, 254, 44, 0});
  expectVec(run1("cast", {x}, {{"dtype", DType::I32}}), DType::I32, {2, -2, 300, 0});
  expectVec(run1("cast", {x}, {{"dtype", DType::Bool}}), DType::Bool, {1, 1, 1, 0});
  expectVec(run1("cast", {vec(DType::I64, {-1, 256})}, {{"dtype", DType::U8}}), DType::U8,
            {255, 0});
  expectVec(run1("cast", {vec(DType::I64, {2049})}, {{"dtype", DType::F16}}), DType::F16, {2048});
  EXPECT_EQ(infer("cast", {ty(DType::F32, {3})}, {{"dtype", DType::BF16}})[0],
            ty(DType::BF16, {3}));
}

TEST(ElementwiseMisc, Lerp) {
  Tensor s = f32({1, 2}), e = f32({3, 10});
  expectVec(run1("lerp", {s, e}, {{"weight", 0.25}}), DType::F32, {1.5, 4});
  expectVec(run1("lerp", {s, e, RtValue(2.0)}), DType::F32, {5, 18});
  expectVec(run1("lerp", {s, e, f32({0.5, 0.75})}), DType::F32, {2, 8});
  Tensor col = make(DType::F32, {2, 1}, {0, 1});
  expectValues(run1("lerp", {s, e, col}), DType::F32, {2, 2}, {1, 2, 3, 10});
  expectInferError("lerp", {ty(DType::F32, {2}), ty(DType::F16, {2})}, {{"weight", 0.5}},
                   "expected dtype f32 for `end`");
  expectInferError("lerp", {ty(DType::I32, {2}), ty(DType::I32, {2})}, {{"weight", 0.5}},
                   "floating point");
  expectInferError("lerp", {ty(DType::F32, {2}), ty(DType::F32, {2})}, {}, "weight");
}

TEST(ElementwiseMisc, AddcmulAddcdiv) {
  Tensor a = f32({1, 2}), b = f32({3, 4}), c = f32({2, 8});
  expectVec(run1("addcmul", {a, b, c}), DType::F32, {7, 34});
  expectVec(run1("addcmul", {a, b, c}, {{"value", 0.5}}), DType::F32, {4, 18});
  expectVec(run1("addcdiv", {a, b, c}, {{"value", 2.0}}), DType::F32, {4, 3});
  expectVec(run1("addcdiv", {a, b, f32({0, 1})}), DType::F32, {kInf, 6});
  Tensor i = vec(DType::I32, {5, -3});
  // Integer results truncate value: 2.5 -> 2, -2.7 -> -2.
  expectVec(run1("addcmul", {i, i, i}, {{"value", 2.5}}), DType::I32, {55, 15});
  expectVec(run1("addcmul", {i, i, i}, {{"value", -2.7}}), DType::I32, {-45, -21});
  expectVec(run1("addcdiv", {i, f32({1, 1}), vec(DType::I32, {2, 4})}), DType::F32, {5.5, -2.75});
  expectInferError("addcdiv", {ty(DType::I32, {2}), ty(DType::I32, {2}), ty(DType::I32, {2})}, {},
                   "integer division");
  expectInferError("addcmul", {ty(DType::Bool, {2}), ty(DType::Bool, {2}), ty(DType::Bool, {2})},
                   {}, "bool");
}

TEST(ElementwiseRegistry, RowsAndTraits) {
  const OpRegistry &r = OpRegistry::instance();
  size_t count = 0;
  for (const OpDef *d : r.all())
    if (d->has(kElementwise)) ++count;
  EXPECT_GE(count, 90u);
  EXPECT_TRUE(r.get("mul").has(kCommutative));
  EXPECT_FALSE(r.get("sub").has(kCommutative));
  EXPECT_TRUE(r.get("exp").isPure());
}

} // namespace
