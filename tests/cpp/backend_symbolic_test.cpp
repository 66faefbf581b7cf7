// Generated kernels under symbolic shapes: dims that are floor divisions of symbols (the output
// sizes of strided convs and pools, (s0+1)//2) are bound from the actual sizes, and broadcasts
// that shape inference decided on symbolic dims (s0 against s1, or against a static size: assumed
// equal) are checked at run time: a size-1 operand there fails with a KernelError naming the
// broadcast, never an out-of-bounds read or a wrong answer. Values are compared with the
// reference interpreter.
#include "xjit/backend/jit.h"
#include "xjit/backend/lower.h"
#include "xjit/ir/interpreter.h"
#include "xjit/ir/op_registry.h"
#include "xjit/ir/parser.h"

#include <gtest/gtest.h>

#include <random>

namespace xjit::backend {
namespace {

Tensor randomTensor(const std::vector<int64_t> &sizes, std::mt19937 &rng) {
  Tensor t = Tensor::empty(DType::F32, sizes);
  std::uniform_real_distribution<double> u(-2, 2);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.setDouble(i, u(rng));
  return t;
}

struct Compiled {
  std::unique_ptr<Graph> graph;
  LoweredKernel lk;
  std::shared_ptr<const CompiledKernel> ck;
};

Compiled compileText(const std::string &text) {
  Compiled c;
  c.graph = parseGraph(text);
  c.lk = lowerElementwiseBlock(*c.graph->body(), c.graph->name());
  c.ck = Jit::instance().compile(c.lk.kernel);
  return c;
}

/// "" when the kernel's outputs equal the interpreter's (same sizes, values within 1e-6).
std::string compareWithInterpreter(const Compiled &c, const std::vector<RtValue> &inputs) {
  std::vector<RtValue> want = interpret(*c.graph, inputs);
  std::vector<RtValue> got = runLowered(c.lk, *c.ck, inputs);
  if (got.size() != want.size()) return "output count differs";
  for (size_t o = 0; o < want.size(); ++o) {
    const Tensor &g = got[o].tensor(), &w = want[o].tensor();
    if (g.sizes() != w.sizes()) return "output " + std::to_string(o) + ": sizes differ";
    for (int64_t i = 0; i < w.numel(); ++i)
      if (std::abs(g.getDouble(i) - w.getDouble(i)) > 1e-6)
        return "output " + std::to_string(o) + " element " + std::to_string(i) + ": " +
               std::to_string(g.getDouble(i)) + " vs " + std::to_string(w.getDouble(i));
  }
  return "";
}

/// The KernelError message of running `c` on `inputs`, or "" when it runs.
std::string runError(const Compiled &c, const std::vector<RtValue> &inputs) {
  try {
    runLowered(c.lk, *c.ck, inputs);
  } catch (const KernelError &e) {
    return e.what();
  }
  return "";
}

TEST(BackendSymbolic, FloorDivisionDimsAreBoundFromTheInputs) {
  // What follows a stride-2 conv: the kernel sees (s1+1)//2, never s1 itself.
  Compiled c = compileText(
      R"(graph @after_conv(%x: f32[s0,3,(s1+1)//2], %b: f32[3,1]) -> (f32[s0,3,(s1+1)//2]) {
  %y = add(%x, %b) : f32[s0,3,(s1+1)//2]
  %z = relu(%y) : f32[s0,3,(s1+1)//2]
  return(%z)
})");
  std::mt19937 rng(1);
  for (int64_t w : {4, 7, 1}) {
    std::vector<RtValue> in{RtValue(randomTensor({2, 3, w}, rng)),
                            RtValue(randomTensor({3, 1}, rng))};
    EXPECT_EQ(compareWithInterpreter(c, in), "") << "width " << w;
  }
  // The same atom bound twice must agree.
  Compiled two =
      compileText(R"(graph @two(%x: f32[(s0+1)//2], %y: f32[(s0+1)//2]) -> (f32[(s0+1)//2]) {
  %z = mul(%x, %y) : f32[(s0+1)//2]
  return(%z)
})");
  std::vector<RtValue> ok{RtValue(randomTensor({5}, rng)), RtValue(randomTensor({5}, rng))};
  EXPECT_EQ(compareWithInterpreter(two, ok), "");
  std::vector<RtValue> bad{RtValue(randomTensor({5}, rng)), RtValue(randomTensor({4}, rng))};
  EXPECT_NE(runError(two, bad), "");
}

TEST(BackendSymbolic, BroadcastOfTwoSymbolsIsCheckedAtRunTime) {
  // Shape inference assumed s0 == s1 (neither is a static 1); the kernel reads both with one
  // loop variable.
  Compiled c = compileText(R"(graph @sym_bcast(%x: f32[s0,4], %y: f32[s1,4]) -> (f32[s0,4]) {
  %z = add(%x, %y) : f32[s0,4]
  return(%z)
})");
  ASSERT_EQ(c.lk.sameSize.size(), 1u);
  std::mt19937 rng(2);
  std::vector<RtValue> same{RtValue(randomTensor({3, 4}, rng)), RtValue(randomTensor({3, 4}, rng))};
  EXPECT_EQ(compareWithInterpreter(c, same), "");
  // y has 1 row: PyTorch would broadcast it; the kernel would read rows 1 and 2 past its end.
  std::vector<RtValue> yOne{RtValue(randomTensor({3, 4}, rng)), RtValue(randomTensor({1, 4}, rng))};
  std::string why = runError(c, yOne);
  EXPECT_NE(why.find("symbolic broadcast"), std::string::npos) << why;
  EXPECT_NE(why.find("s1 = 1"), std::string::npos) << why;
  // x has 1 row: the result would be sized 1 row instead of 3.
  std::vector<RtValue> xOne{RtValue(randomTensor({1, 4}, rng)), RtValue(randomTensor({3, 4}, rng))};
  EXPECT_NE(runError(c, xOne).find("symbolic broadcast"), std::string::npos);
}

TEST(BackendSymbolic, BroadcastOfASymbolAgainstAStaticSizeIsChecked) {
  Compiled c = compileText(R"(graph @static_bcast(%x: f32[5,2], %y: f32[s0,2]) -> (f32[5,2]) {
  %z = mul(%x, %y) : f32[5,2]
  return(%z)
})");
  std::mt19937 rng(3);
  std::vector<RtValue> ok{RtValue(randomTensor({5, 2}, rng)), RtValue(randomTensor({5, 2}, rng))};
  EXPECT_EQ(compareWithInterpreter(c, ok), "");
  std::vector<RtValue> bad{RtValue(randomTensor({5, 2}, rng)), RtValue(randomTensor({1, 2}, rng))};
  EXPECT_NE(runError(c, bad).find("symbolic broadcast"), std::string::npos);
}

TEST(BackendSymbolic, StaticOneBroadcastsNeedNoCheck) {
  // A static 1 is read at index 0 whatever the other size: nothing to check at run time.
  Compiled c = compileText(R"(graph @one_bcast(%x: f32[s0,s1], %y: f32[1,s1]) -> (f32[s0,s1]) {
  %z = sub(%x, %y) : f32[s0,s1]
  %e = expand(%y) {shape = [-1, -1]} : f32[1,s1]
  %w = mul(%z, %e) : f32[s0,s1]
  return(%w)
})");
  EXPECT_TRUE(c.lk.sameSize.empty());
  std::mt19937 rng(4);
  for (int64_t rows : {1, 6}) {
    std::vector<RtValue> in{RtValue(randomTensor({rows, 3}, rng)),
                            RtValue(randomTensor({1, 3}, rng))};
    EXPECT_EQ(compareWithInterpreter(c, in), "") << rows << " rows";
  }
}

} // namespace
} // namespace xjit::backend
