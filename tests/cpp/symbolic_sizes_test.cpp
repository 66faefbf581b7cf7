// Size attributes over shape symbols (docs/ir.md, "Symbolic sizes"): one graph runs for every
// binding of its symbols, in the reference interpreter and in the compiled runtime, and gives
// the values computed here by hand for each size; a size outside the range the graph's types
// assume is an error, never a mistyped result.
#include "xjit/ir/diagnostics.h"
#include "xjit/ir/interpreter.h"
#include "xjit/ir/parser.h"
#include "xjit/ir/sym_attr.h"
#include "xjit/ir/verifier.h"
#include "xjit/runtime/runtime.h"

#include <gtest/gtest.h>

namespace xjit {
namespace {

// BERT's embeddings (position_ids[:, 0:seq], buffered token types expanded to [batch, seq]),
// a KV-cache arange(past, past + seq), a factory and a reshape of a symbolic-shaped input.
constexpr const char *kGraph = R"(
graph @f(%ids: i64[s0,s1], %pos: i64[1,512], %past: f32[s0,s2], %x: f32[s0,s1,8]) -> (i64[s0,s1], i64[s1], f32[s0,2], f32[s0,s1,2,4], i64[s1,s2]) {
  %p = slice(%pos) {dim = 1, start = 0, end = s1} : i64[1,s1]
  %t = expand(%p) {shape = [s0, s1]} : i64[s0,s1]
  %sum = add(%t, %ids) : i64[s0,s1]
  %r = arange() {start = s2, end = s2+s1} : i64[s1]
  %z = full() {shape = [s0, 2], fill_value = 2.5} : f32[s0,2]
  %v = reshape(%x) {shape = [s0, s1, 2, -1]} : f32[s0,s1,2,4]
  %n = new_zeros(%ids) {shape = [s1, s2]} : i64[s1,s2]
  return(%sum, %r, %z, %v, %n)
})";

struct Inputs {
  int64_t batch, seq, past;
  std::vector<RtValue> values() const {
    Tensor ids = Tensor::empty(DType::I64, {batch, seq});
    for (int64_t i = 0; i < ids.numel(); ++i)
      ids.setInt(i, 1000 * (i / seq));
    Tensor pos = Tensor::empty(DType::I64, {1, 512});
    for (int64_t i = 0; i < 512; ++i)
      pos.setInt(i, i);
    Tensor x = Tensor::empty(DType::F32, {batch, seq, 8});
    for (int64_t i = 0; i < x.numel(); ++i)
      x.setDouble(i, 0.5 * double(i));
    return {ids, pos, Tensor::empty(DType::F32, {batch, past}), x};
  }
};

/// "" when the outputs are what the graph computes for these sizes.
std::string checkOutputs(const Inputs &in, const std::vector<RtValue> &out) {
  if (out.size() != 5) return "expected 5 outputs";
  const Tensor &sum = out[0].tensor(), &r = out[1].tensor(), &z = out[2].tensor(),
               &v = out[3].tensor(), &n = out[4].tensor();
  auto sizes = [](const Tensor &t) { return t.sizes(); };
  using S = std::vector<int64_t>;
  if (sizes(sum) != S{in.batch, in.seq}) return "sum has the wrong shape";
  if (sizes(r) != S{in.seq}) return "arange has the wrong shape";
  if (sizes(z) != S{in.batch, 2}) return "full has the wrong shape";
  if (sizes(v) != S{in.batch, in.seq, 2, 4}) return "reshape has the wrong shape";
  if (sizes(n) != S{in.seq, in.past}) return "new_zeros has the wrong shape";
  Tensor sc = sum.contiguousCopy(), vc = v.contiguousCopy();
  for (int64_t b = 0; b < in.batch; ++b)
    for (int64_t j = 0; j < in.seq; ++j)
      if (sc.getInt(b * in.seq + j) != 1000 * b + j)
        return "sum[" + std::to_string(b) + "," + std::to_string(j) + "] is wrong";
  for (int64_t j = 0; j < in.seq; ++j)
    if (r.getInt(j) != in.past + j) return "arange[" + std::to_string(j) + "] is wrong";
  for (int64_t i = 0; i < z.numel(); ++i)
    if (z.getDouble(i) != 2.5) return "full is not 2.5";
  for (int64_t i = 0; i < vc.numel(); ++i)
    if (vc.getDouble(i) != 0.5 * double(i)) return "reshape moved elements";
  for (int64_t i = 0; i < n.numel(); ++i)
    if (n.getInt(i) != 0) return "new_zeros is not 0";
  return "";
}

const Inputs kSizes[] = {{2, 12, 3}, {1, 9, 0}, {3, 17, 5}, {2, 5, 1}};

TEST(SymbolicSizes, InterpreterEvaluatesThemPerCall) {
  auto g = parseGraph(kGraph, "test.xir");
  verifyOrThrow(*g);
  for (const Inputs &in : kSizes) {
    SCOPED_TRACE("seq " + std::to_string(in.seq));
    EXPECT_EQ(checkOutputs(in, interpret(*g, in.values())), "");
    EXPECT_EQ(checkOutputs(in, interpret(*g, in.values(), {.checkTypes = false})), "");
  }
}

TEST(SymbolicSizes, CompiledGraphEvaluatesThemPerCall) {
  auto g = parseGraph(kGraph, "test.xir");
  runtime::CompiledGraph cg = runtime::compileGraph(*g, runtime::cpuTarget());
  for (const Inputs &in : kSizes) {
    SCOPED_TRACE("seq " + std::to_string(in.seq));
    EXPECT_EQ(checkOutputs(in, cg.run(in.values())), "");
  }
}

// seq 600 > 512: PyTorch would clamp the slice to 512 columns, which the type [1,s1] does not
// allow; both executors refuse instead of returning a mistyped tensor.
TEST(SymbolicSizes, OutOfRangeSizeIsAnError) {
  auto g = parseGraph(kGraph, "test.xir");
  Inputs in{1, 600, 0};
  EXPECT_THROW(interpret(*g, in.values(), {.checkTypes = false}), Error);
  runtime::CompiledGraph cg = runtime::compileGraph(*g, runtime::cpuTarget());
  try {
    cg.run(in.values());
    FAIL() << "expected an error";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("out of the range the graph assumes"), std::string::npos)
        << e.what();
  }
}

TEST(SymbolicSizes, AttributesRoundTripThroughTheHelpers) {
  DimExpr s0 = DimExpr::symbol("s0");
  EXPECT_EQ(makeSizeAttr(DimExpr(4)).kind(), AttrKind::Int);
  EXPECT_EQ(makeSizeAttr(Shape{2, 3}).kind(), AttrKind::Ints);
  Attr a = makeSizeAttr(Shape{DimExpr(1), s0 * DimExpr(2)});
  ASSERT_EQ(a.kind(), AttrKind::Str);
  auto dims = symbolicDims(a, SizeSlotForm::Dims);
  ASSERT_TRUE(dims);
  EXPECT_EQ(*dims, (Shape{DimExpr(1), s0 * DimExpr(2)}));
  EXPECT_FALSE(symbolicDims(Attr("mean"), SizeSlotForm::None));
  EXPECT_EQ(symbolicSizeSlot("slice", "end"), SizeSlotForm::Dim);
  EXPECT_EQ(symbolicSizeSlot("slice", "dim"), SizeSlotForm::None);
}

} // namespace
} // namespace xjit
