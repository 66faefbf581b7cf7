// compileGraph with CompileOptions::outputWritesInput (the frontend's write-backs to inputs): the
// reinplace pass computes such outputs in the input's memory, with the interpreter's values, and
// leaves graphs alone where the input's old contents are still read.
#include "value_test_util.h"
#include "xjit/ir/interpreter.h"
#include "xjit/ir/parser.h"
#include "xjit/runtime/runtime.h"

#include <gtest/gtest.h>

#include <cmath>

namespace xjit::runtime {
namespace {

Tensor iota(std::vector<int64_t> sizes, double scale) {
  Tensor t = Tensor::empty(DType::F32, std::move(sizes));
  for (int64_t i = 0; i < t.numel(); ++i)
    t.setDouble(i, scale * double(i % 97) - 3.0);
  return t;
}

struct Compiled {
  std::vector<RtValue> inputs, outputs, reference;
  bool inPlace = false;
};

// Runs g compiled with outputWritesInput on fresh inputs, and the interpreter on copies of them.
Compiled run(const std::string &text, std::vector<int> writes, std::vector<RtValue> inputs) {
  std::unique_ptr<Graph> g = parseGraph(text, "test.xir");
  CompileOptions opts;
  opts.outputWritesInput = std::move(writes);
  CompiledGraph cg = compileGraph(*g, cpuTarget(), opts);
  Compiled r;
  r.reference = interpret(*g, testutil::deepCopy(inputs));
  r.inputs = inputs;
  r.outputs = cg.run(std::move(inputs));
  r.inPlace = cg.stats().writesInputsInPlace;
  return r;
}

void expectEqual(const Tensor &got, const Tensor &want) {
  ASSERT_EQ(got.sizes(), want.sizes());
  for (int64_t i = 0; i < want.numel(); ++i)
    ASSERT_EQ(got.getDouble(i), want.getDouble(i)) << "element " << i;
}

// Arithmetic: the reference computes in f64 and rounds once, kernels round each f32 op.
void expectClose(const Tensor &got, const Tensor &want) {
  ASSERT_EQ(got.sizes(), want.sizes());
  for (int64_t i = 0; i < want.numel(); ++i)
    ASSERT_NEAR(got.getDouble(i), want.getDouble(i), 1e-5 * std::abs(want.getDouble(i)) + 1e-6)
        << "element " << i;
}

const char *kRowWrite = R"(
graph @f(%cache: f32[2,6,4], %k: f32[2,4]) -> (f32[2,6,4], f32[2,4]) {
  %pos = full() {dtype = i64, fill_value = 3, shape = []} : i64[]
  %none = constant() : none
  %new = index_put(%cache, %k, %none, %pos) : f32[2,6,4]
  %row = select(%new) {dim = 1, index = 3} : f32[2,4]
  %y = exp(%row) : f32[2,4]
  return(%new, %y)
})";

TEST(Reinplace, WrittenBackOutputIsTheInputsMemory) {
  Compiled r =
      run(kRowWrite, {0, -1}, {RtValue(iota({2, 6, 4}, 0.5)), RtValue(iota({2, 4}, -1.0))});
  EXPECT_TRUE(r.inPlace);
  const Tensor &out = r.outputs[0].tensor(), &cache = r.inputs[0].tensor();
  EXPECT_EQ(out.data(), cache.data());
  expectEqual(out, r.reference[0].tensor());
  expectEqual(r.outputs[1].tensor(), r.reference[1].tensor());
}

TEST(Reinplace, WithoutWriteBackTheInputIsLeftAlone) {
  Tensor before = iota({2, 6, 4}, 0.5);
  Compiled r = run(kRowWrite, {}, {RtValue(before.contiguousCopy()), RtValue(iota({2, 4}, -1.0))});
  EXPECT_FALSE(r.inPlace);
  EXPECT_NE(r.outputs[0].tensor().data(), r.inputs[0].tensor().data());
  expectEqual(r.inputs[0].tensor(), before);
  expectEqual(r.outputs[0].tensor(), r.reference[0].tensor());
}

TEST(Reinplace, ScatterThroughAViewIsACopyIntoTheInputsView) {
  const char *text = R"(
graph @f(%cache: f32[1,4,16,8], %k: f32[1,4,1,8]) -> (f32[1,4,16,8]) {
  %ar = arange() {dtype = i64, end = 512, start = 0} : i64[512]
  %pos4 = reshape(%ar) {shape = [1, 4, 16, 8]} : i64[1,4,16,8]
  %sl = slice(%pos4) {dim = 2, end = 6, start = 5, step = 1} : i64[1,4,1,8]
  %flat = reshape(%cache) {shape = [512]} : f32[512]
  %kf = reshape(%k) {shape = [32]} : f32[32]
  %pf = reshape(%sl) {shape = [32]} : i64[32]
  %w = index_put(%flat, %kf, %pf) : f32[512]
  %out = reshape(%w) {shape = [1, 4, 16, 8]} : f32[1,4,16,8]
  return(%out)
})";
  Compiled r =
      run(text, {0}, {RtValue(iota({1, 4, 16, 8}, 0.25)), RtValue(iota({1, 4, 1, 8}, 2.0))});
  EXPECT_TRUE(r.inPlace);
  EXPECT_EQ(r.outputs[0].tensor().data(), r.inputs[0].tensor().data());
  expectEqual(r.inputs[0].tensor(), r.reference[0].tensor());
}

TEST(Reinplace, OldContentsReadAfterTheWriteKeepTheCopy) {
  const char *text = R"(
graph @f(%x: f32[8], %v: f32[2], %i: i64[2]) -> (f32[8], f32[]) {
  %new = index_put(%x, %v, %i) : f32[8]
  %s = sum(%x) {keepdim = false} : f32[]
  return(%new, %s)
})";
  Tensor idx = Tensor::empty(DType::I64, {2});
  idx.setInt(0, 1), idx.setInt(1, 6);
  Tensor before = iota({8}, 1.0);
  Compiled r =
      run(text, {0, -1}, {RtValue(before.contiguousCopy()), RtValue(iota({2}, 7.0)), RtValue(idx)});
  EXPECT_FALSE(r.inPlace);
  expectEqual(r.inputs[0].tensor(), before);
  expectEqual(r.outputs[0].tensor(), r.reference[0].tensor());
  expectEqual(r.outputs[1].tensor(), r.reference[1].tensor());
}

// An optimizer's update: element-wise ops whose results are written back to the inputs they
// read (a parameter and its momentum buffer). Fused into one kernel that computes both in the
// inputs' own memory, with the interpreter's values.
const char *kMomentumStep = R"(
graph @f(%p: f32[64,33], %g: f32[64,33], %buf: f32[64,33]) -> (f32[64,33], f32[64,33]) {
  %m = constant() {value = 0.9} : float
  %b1 = mul(%buf, %m) : f32[64,33]
  %b2 = add(%b1, %g) : f32[64,33]
  %p1 = add(%p, %b2) {alpha = -0.01} : f32[64,33]
  return(%p1, %b2)
})";

TEST(Reinplace, ElementwiseUpdateIsComputedInTheInputsMemory) {
  Compiled r = run(kMomentumStep, {0, 2},
                   {RtValue(iota({64, 33}, 0.5)), RtValue(iota({64, 33}, -0.25)),
                    RtValue(iota({64, 33}, 0.125))});
  EXPECT_TRUE(r.inPlace);
  EXPECT_EQ(r.outputs[0].tensor().data(), r.inputs[0].tensor().data());
  EXPECT_EQ(r.outputs[1].tensor().data(), r.inputs[2].tensor().data());
  expectClose(r.outputs[0].tensor(), r.reference[0].tensor());
  expectClose(r.outputs[1].tensor(), r.reference[1].tensor());
}

TEST(Reinplace, ElementwiseUpdateOfAStridedInputGetsItsOwnBuffer) {
  // The runtime hands a kernel only a contiguous operand to compute in; a transposed one is
  // copied into the result first and left as it was (the caller copies the result back).
  Tensor p = iota({33, 64}, 0.5).view({64, 33}, {1, 64}, 0);
  Tensor before = p.contiguousCopy();
  Compiled r = run(kMomentumStep, {0, 2},
                   {RtValue(p), RtValue(iota({64, 33}, -0.25)), RtValue(iota({64, 33}, 0.125))});
  EXPECT_NE(r.outputs[0].tensor().data(), r.inputs[0].tensor().data());
  expectEqual(r.inputs[0].tensor(), before);
  expectClose(r.outputs[0].tensor(), r.reference[0].tensor());
  expectClose(r.outputs[1].tensor(), r.reference[1].tensor());
}

TEST(Reinplace, MismatchedWriteListIsAnInternalError) {
  std::unique_ptr<Graph> g = parseGraph(kRowWrite, "test.xir");
  CompileOptions opts;
  opts.outputWritesInput = {0};
  EXPECT_THROW(compileGraph(*g, cpuTarget(), opts), Error);
}

} // namespace
} // namespace xjit::runtime
