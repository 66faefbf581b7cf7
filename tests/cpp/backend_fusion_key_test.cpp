// fusionLoweringKey (lower.h): fusions that differ only in value names and their memory plan
// get one key and lower to one kernel, so the CPU target shares one executable between them
// without lowering the second; fusions whose lowering reads something different outside the
// region (a transposed input's unit dim, a folded constant's value) get different keys, and
// each computes its own values.
#include "xjit/backend/kernel_ir.h"
#include "xjit/backend/lower.h"
#include "xjit/backend/target.h"
#include "xjit/ir/interpreter.h"
#include "xjit/ir/parser.h"

#include <gtest/gtest.h>

#include <random>

namespace xjit::backend {
namespace {

constexpr const char *kGraph =
    R"(graph @g(%x: f32[8,16], %z: f32[8,16], %y: f32[16,8]) -> (f32[8,16], f32[8,16], f32[8,16], f32[8,16]) {
  %two = constant() {value = 2.0} : float
  %three = constant() {value = 3.0} : float
  %yt = transpose(%y) {dim0 = 0, dim1 = 1} : f32[8,16]
  %p = fusion(%x, %two) {kind = "elementwise", mem.offset = [0]} : f32[8,16] {
  ^(%0: f32[8,16], %1: float):
    %2 = mul(%0, %1) : f32[8,16]
    %3 = exp(%2) : f32[8,16]
    yield(%3)
  }
  %q = fusion(%z, %two) {kind = "elementwise", mem.offset = [512]} : f32[8,16] {
  ^(%4: f32[8,16], %5: float):
    %6 = mul(%4, %5) : f32[8,16]
    %7 = exp(%6) : f32[8,16]
    yield(%7)
  }
  %r = fusion(%yt, %two) {kind = "elementwise", mem.offset = [1024]} : f32[8,16] {
  ^(%8: f32[8,16], %9: float):
    %10 = mul(%8, %9) : f32[8,16]
    %11 = exp(%10) : f32[8,16]
    yield(%11)
  }
  %s = fusion(%x, %three) {kind = "elementwise", mem.offset = [1536]} : f32[8,16] {
  ^(%12: f32[8,16], %13: float):
    %14 = mul(%12, %13) : f32[8,16]
    %15 = exp(%14) : f32[8,16]
    yield(%15)
  }
  return(%p, %q, %r, %s)
})";

/// The fusions of the graph; `unnamed`: their regions' values lose the text's names, as the
/// fuse pass makes them (a named region input names the kernel's parameter).
std::vector<const Op *> fusions(const Graph &g, bool unnamed = true) {
  std::vector<const Op *> out;
  for (Op *op : *g.body()) {
    if (op->name() != "fusion") continue;
    out.push_back(op);
    if (!unnamed) continue;
    for (const auto &a : op->region(0)->arguments())
      a->setName("");
    for (Op *inner : *op->region(0))
      for (const auto &r : inner->results())
        r->setName("");
  }
  return out;
}

TEST(FusionLoweringKey, NamedInputsNameTheKernelsParameters) {
  auto g = parseGraph(kGraph);
  std::vector<const Op *> f = fusions(*g, /*unnamed=*/false);
  ASSERT_EQ(f.size(), 4u);
  EXPECT_NE(fusionLoweringKey(*f[0]), fusionLoweringKey(*f[1]));
  EXPECT_NE(printKernel(lowerFusion(*f[0]).kernel), printKernel(lowerFusion(*f[1]).kernel));
}

TEST(FusionLoweringKey, OuterNamesAndTheMemoryPlanDoNotMatter) {
  auto g = parseGraph(kGraph);
  std::vector<const Op *> f = fusions(*g);
  ASSERT_EQ(f.size(), 4u);
  std::string p = fusionLoweringKey(*f[0]), q = fusionLoweringKey(*f[1]);
  ASSERT_FALSE(p.empty());
  EXPECT_EQ(p, q);
  // The promise the key makes: the same kernel.
  EXPECT_EQ(printKernel(lowerFusion(*f[0]).kernel), printKernel(lowerFusion(*f[1]).kernel));
  // Options are part of it.
  EXPECT_NE(p, fusionLoweringKey(*f[0], {.fastPaths = false}));
}

TEST(FusionLoweringKey, WhatTheLoweringReadsOutsideTheRegionMatters) {
  auto g = parseGraph(kGraph);
  std::vector<const Op *> f = fusions(*g);
  ASSERT_EQ(f.size(), 4u);
  std::string p = fusionLoweringKey(*f[0]);
  EXPECT_NE(p, fusionLoweringKey(*f[2])); // a transposed view: another unit dim
  EXPECT_NE(p, fusionLoweringKey(*f[3])); // a folded constant of another value
  EXPECT_NE(printKernel(lowerFusion(*f[0]).kernel), printKernel(lowerFusion(*f[3]).kernel));
}

TEST(FusionLoweringKey, TheTargetSharesEqualFusionsAndComputesEachRight) {
  auto g = parseGraph(kGraph);
  std::vector<const Op *> f = fusions(*g);
  auto target = makeCpuTarget();
  std::vector<std::shared_ptr<const Executable>> exes;
  for (const Op *op : f) {
    ASSERT_EQ(target->whyNotSupported(*op), "");
    exes.push_back(target->compile(*op));
  }
  EXPECT_EQ(exes[0], exes[1]);
  EXPECT_NE(exes[0], exes[2]);
  EXPECT_NE(exes[0], exes[3]);
  std::mt19937 rng(5);
  Tensor x = Tensor::empty(DType::F32, {8, 16});
  for (int64_t i = 0; i < x.numel(); ++i)
    x.setDouble(i, std::uniform_real_distribution<double>(-1, 1)(rng));
  for (size_t k = 0; k < f.size(); ++k) {
    const Attr &c = f[k]->operand(1)->definingOp()->attr("value");
    std::vector<RtValue> in = {RtValue(x), RtValue(c.asFloat())};
    Tensor want = interpretBlock(*f[k]->region(0), in)[0].tensor();
    Tensor got = exes[k]->run(in)[0].tensor();
    for (int64_t i = 0; i < want.numel(); ++i)
      EXPECT_NEAR(got.getDouble(i), want.getDouble(i), 1e-5 * std::abs(want.getDouble(i)))
          << "fusion " << k << " element " << i;
  }
}

// A graph input the frontend saw transposed (`{unit_dim = 0}`): the kernel's fast version is laid
// out for that dim (its stride check asks for it), and the key tells it from the same fusion of
// a row-major input; both compute the reference's values on a transposed tensor.
TEST(FusionLoweringKey, AnInputsUnitDimHintLaysTheKernelOutForIt) {
  constexpr const char *kText =
      R"(graph @g(%x: f32[16,8] {unit_dim = 0}, %y: f32[16,8]) -> (f32[8], f32[8]) {
  %a = fusion(%x) {kind = "reduction"} : f32[8] {
  ^(%0: f32[16,8]):
    %1 = exp(%0) : f32[16,8]
    %2 = sum(%1) {dims = [0], keepdim = false} : f32[8]
    yield(%2)
  }
  %b = fusion(%y) {kind = "reduction"} : f32[8] {
  ^(%3: f32[16,8]):
    %4 = exp(%3) : f32[16,8]
    %5 = sum(%4) {dims = [0], keepdim = false} : f32[8]
    yield(%5)
  }
  return(%a, %b)
})";
  auto g = parseGraph(kText);
  std::vector<const Op *> f = fusions(*g);
  ASSERT_EQ(f.size(), 2u);
  EXPECT_NE(fusionLoweringKey(*f[0]), fusionLoweringKey(*f[1]));
  std::string hinted = printKernel(lowerFusion(*f[0]).kernel);
  EXPECT_NE(hinted.find("eq(stride(in0,0), 1)"), std::string::npos) << hinted;
  EXPECT_EQ(printKernel(lowerFusion(*f[1]).kernel).find("eq(stride(in0,0), 1)"), std::string::npos);
  std::mt19937 rng(7);
  Tensor base = Tensor::empty(DType::F32, {8, 16});
  for (int64_t i = 0; i < base.numel(); ++i)
    base.setDouble(i, std::uniform_real_distribution<double>(-1, 1)(rng));
  Tensor xt = base.view({16, 8}, {1, 16}, 0); // base transposed: unit stride in dim 0
  auto target = makeCpuTarget();
  for (const Op *op : f) {
    std::vector<RtValue> in = {RtValue(xt)};
    Tensor want = interpretBlock(*op->region(0), in)[0].tensor();
    Tensor got = target->compile(*op)->run(in)[0].tensor();
    for (int64_t i = 0; i < want.numel(); ++i)
      EXPECT_NEAR(got.getDouble(i), want.getDouble(i), 1e-5 * std::abs(want.getDouble(i)));
  }
}

} // namespace
} // namespace xjit::backend
