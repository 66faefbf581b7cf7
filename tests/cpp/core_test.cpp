// Core IR: dims, types, tensors, attributes, graph construction, interpreter basics.
#include "xjit/ir/builder.h"
#include "xjit/ir/interpreter.h"
#include "xjit/ir/ir.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace xjit;

TEST(DimExpr, CanonicalFormAndArithmetic) {
  DimExpr s0 = DimExpr::symbol("s0"), s1 = DimExpr::symbol("s1");
  EXPECT_EQ((s0 * 4).str(), "s0*4");
  EXPECT_EQ((s0 + 1 - 1), s0);
  EXPECT_EQ((s0 * 2 + s0 * 2).str(), "s0*4");
  EXPECT_EQ((s0 * s1 + 2).str(), "s0*s1+2");
  EXPECT_EQ((s0 - 1).str(), "s0-1");
  EXPECT_EQ((s0 * 4).floorDiv(2), s0 * 2);
  EXPECT_EQ(s0.floorDiv(s0), DimExpr(1));
  EXPECT_EQ(DimExpr(7).floorDiv(-2).value(), -4); // Python floor division
  EXPECT_EQ(DimExpr(-7).mod(3).value(), 2);
  EXPECT_EQ((s0 + 1).floorDiv(2).str(), "(s0+1)//2");
  EXPECT_TRUE(DimExpr(3).isStatic());
  EXPECT_FALSE(s0.isStatic());
}

TEST(DimExpr, EvaluateAndParseRoundTrip) {
  for (const char *text : {"s0", "s0*4", "s0*s1+2", "s0-1", "(s0+1)//2", "(s0)%3*s1+7", "-s0*2+1",
                           "(s0)//3*(s1)//3", "s1*(s0//2)"}) {
    std::string err;
    auto e = parseDimExpr(text, &err);
    ASSERT_TRUE(e) << text << ": " << err;
    auto again = parseDimExpr(e->str(), &err);
    ASSERT_TRUE(again) << e->str() << ": " << err;
    EXPECT_EQ(*again, *e) << text;
    EXPECT_EQ(again->str(), e->str());
  }
  auto e = parseDimExpr("(s0+1)//2*s1");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->evaluate({{"s0", 7}, {"s1", 3}}), 12);
  EXPECT_EQ(e->evaluate({{"s0", 7}}), std::nullopt);
  std::string err;
  size_t at = 0;
  EXPECT_FALSE(parseDimExpr("s0*", &err, &at));
  EXPECT_EQ(at, 3u);
  EXPECT_FALSE(parseDimExpr("4//0", &err, &at));
}

TEST(Type, TextAndEquality) {
  Type t = Type::tensor(DType::F32, {DimExpr(2), DimExpr::symbol("s0")});
  EXPECT_EQ(t.str(), "f32[2,s0]");
  EXPECT_EQ(Type::tensor(DType::BF16, {}).str(), "bf16[]");
  EXPECT_EQ(Type::tensor(DType::F16, {DimExpr(3)}, Device{"cuda", 0}).str(), "f16[3]@cuda:0");
  EXPECT_EQ(Type::tuple({Type::intTy(), t}).str(), "tuple<int, f32[2,s0]>");
  EXPECT_EQ(Type::list(Type::floatTy()).str(), "list<float>");
  EXPECT_EQ(t, Type::tensor(DType::F32, {DimExpr(2), DimExpr::symbol("s0")}));
  EXPECT_NE(t, t.withDType(DType::F16));
  EXPECT_EQ(Type(), Type::none());
}

TEST(DType, PromotionMatchesTorch) {
  EXPECT_EQ(promoteTypes(DType::U8, DType::I8), DType::I16);
  EXPECT_EQ(promoteTypes(DType::F16, DType::BF16), DType::F32);
  EXPECT_EQ(promoteTypes(DType::Bool, DType::I32), DType::I32);
  EXPECT_EQ(promoteTypes(DType::I64, DType::F16), DType::F16);
  EXPECT_EQ(promoteTypes(DType::F64, DType::F32), DType::F64);
}

TEST(Tensor, HalfAndBFloatRounding) {
  EXPECT_EQ(floatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(halfToFloat(0x3c00), 1.0f);
  EXPECT_EQ(floatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(floatToHalf(65520.0f), 0x7c00); // ties to even -> inf
  EXPECT_EQ(halfToFloat(floatToHalf(5.960464477539063e-08f)),
            5.960464477539063e-08f); // min subnormal
  EXPECT_EQ(floatToBFloat16(1.0f), 0x3f80);
  EXPECT_TRUE(std::isnan(bfloat16ToFloat(floatToBFloat16(NAN))));
  for (uint32_t h = 0; h < 0x7c00; ++h) // every finite f16 round-trips through f32
    ASSERT_EQ(floatToHalf(halfToFloat(static_cast<uint16_t>(h))), h) << h;
}

TEST(Tensor, StridedAccessAndCopy) {
  Tensor t = Tensor::empty(DType::F32, {2, 3});
  for (int i = 0; i < 6; ++i)
    t.setDouble(i, i);
  Tensor tt = t.view({3, 2}, {1, 3}, 0); // transpose
  EXPECT_FALSE(tt.isContiguous());
  EXPECT_EQ(tt.getDouble(1), 3.0);
  Tensor c = tt.contiguousCopy();
  EXPECT_TRUE(c.isContiguous());
  EXPECT_EQ(c.getDouble(1), 3.0);
  Tensor i = t.to(DType::I32);
  EXPECT_EQ(i.getInt(5), 5);
  Tensor f = Tensor::empty(DType::F32, {1});
  f.setDouble(0, -2.7);
  EXPECT_EQ(f.to(DType::I64).getInt(0), -2); // truncation toward zero
}

TEST(Tensor, LayoutCopiesKeepEveryElement) {
  // NCHW -> NHWC of a 3-channel image (the copy loops over W innermost, not the 3 channels),
  // the reverse, and a permutation with a long inner dim; each element read back by index.
  Tensor nchw = Tensor::empty(DType::F32, {2, 3, 5, 17});
  for (int64_t i = 0; i < nchw.numel(); ++i)
    nchw.setDouble(i, double(i));
  Tensor asNhwc = nchw.view({2, 5, 17, 3}, {255, 17, 1, 85}, 0); // permute(0, 2, 3, 1)
  Tensor nhwc = asNhwc.contiguousCopy();
  Tensor back = Tensor::empty(DType::F32, {2, 3, 5, 17});
  back.copyFrom(nhwc.view({2, 3, 5, 17}, {255, 1, 51, 3}, 0)); // permute(0, 3, 1, 2)
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t h = 0; h < 5; ++h)
        for (int64_t w = 0; w < 17; ++w) {
          int64_t at = ((n * 3 + c) * 5 + h) * 17 + w;
          ASSERT_EQ(nhwc.getDouble(((n * 5 + h) * 17 + w) * 3 + c), double(at));
          ASSERT_EQ(back.getDouble(at), double(at));
        }
  Tensor t = nchw.view({17, 5, 3, 2}, {1, 17, 85, 255}, 0); // reversed dims
  Tensor tc = t.contiguousCopy();
  for (int64_t i = 0; i < tc.numel(); ++i)
    ASSERT_EQ(tc.getDouble(i), t.getDouble(i));
}

TEST(Tensor, TransposedCopiesKeepEveryElement) {
  // Transpositions (the source's unit-stride dim is not the last) copy in 32x32 tiles: sizes
  // that are not multiples of the tile, an outer dim, and element sizes of 1, 2, 4 and 8 bytes;
  // each element checked against the view's own strided read.
  for (DType d : {DType::U8, DType::BF16, DType::I32, DType::F64}) {
    Tensor m = Tensor::empty(d, {45, 70});
    for (int64_t i = 0; i < m.numel(); ++i)
      m.setDouble(i, double(i % 97));
    Tensor mt = m.view({70, 45}, {1, 70}, 0).contiguousCopy(); // t()
    ASSERT_TRUE(mt.isContiguous());
    for (int64_t r = 0; r < 70; ++r)
      for (int64_t c = 0; c < 45; ++c)
        ASSERT_EQ(mt.getDouble(r * 45 + c), m.getDouble(c * 70 + r)) << dtypeName(d);
    Tensor x = Tensor::empty(d, {3, 37, 50});
    for (int64_t i = 0; i < x.numel(); ++i)
      x.setDouble(i, double(i % 89));
    for (const auto &[sizes, strides] :
         {std::pair<std::vector<int64_t>, std::vector<int64_t>>{{3, 50, 37}, {1850, 1, 50}},
          {{50, 3, 37}, {1, 1850, 50}},
          {{37, 50, 3}, {50, 1, 1850}}}) {
      Tensor v = x.view(sizes, strides, 0);
      Tensor c = v.contiguousCopy();
      for (int64_t i = 0; i < c.numel(); ++i)
        ASSERT_EQ(c.getDouble(i), v.getDouble(i)) << dtypeName(d);
    }
  }
}

TEST(Attr, FloatTextRoundTrips) {
  for (double v : {0.1, 1.0, 1e-5, -2.5, 3.0e300, 1.0 / 3.0})
    EXPECT_EQ(std::strtod(formatDouble(v).c_str(), nullptr), v);
  EXPECT_EQ(formatDouble(1.0), "1.0");
  EXPECT_EQ(Attr(int64_t{1}).str(), "1");
  EXPECT_EQ(Attr(std::vector<int64_t>{1, -2}).str(), "[1, -2]");
  EXPECT_EQ(Attr(std::string("a\"b")).str(), "\"a\\\"b\"");
  Tensor t = Tensor::empty(DType::I32, {2, 2});
  for (int i = 0; i < 4; ++i)
    t.setInt(i, i);
  EXPECT_EQ(Attr(t).str(), "dense<i32[2,2]: [[0, 1], [2, 3]]>");
}

TEST(Graph, BuildUseListsAndClone) {
  Graph g("f");
  Value *x = g.addInput(Type::tensor(DType::F32, {DimExpr(2)}), "x");
  Builder b(g.body());
  Value *c = b.constantInt(3);
  Op *ret = b.createWithTypes("return", {x, c}, {});
  EXPECT_EQ(x->uses().size(), 1u);
  EXPECT_EQ(g.outputs().size(), 2u);
  auto copy = g.clone();
  EXPECT_EQ(copy->numOps(), 2u);
  EXPECT_EQ(copy->input(0)->name(), "x");
  ret->setOperand(0, c);
  EXPECT_FALSE(x->hasUses());
  EXPECT_EQ(c->uses().size(), 2u);
}

TEST(Interpreter, ControlFlow) {
  // loop(n, true, acc=0) { acc = acc + i } ; if (flag) acc else -1
  Graph g("f");
  Value *n = g.addInput(Type::intTy(), "n");
  Builder b(g.body());
  Value *t = b.constantBool(true);
  Value *zero = b.constantInt(0);
  Op *loop = b.createWithTypes("loop", {n, t, zero}, {Type::intTy()});
  Block *body = loop->region(0);
  Value *i = body->addArgument(Type::intTy(), "i");
  Value *acc = body->addArgument(Type::intTy(), "acc");
  Builder lb(body);
  Value *cont = lb.constantBool(true);
  Value *next = lb.op("tuple_get", {lb.op("tuple_construct", {i, acc})}, {{"index", int64_t{0}}});
  lb.createWithTypes("yield", {cont, next}, {});
  b.createWithTypes("return", {loop->result(0)}, {});
  auto out = interpret(g, {RtValue(int64_t{5})});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].toInt(), 4); // last iteration index
  EXPECT_THROW(interpret(g, {RtValue(1.5)}), Error);
}
