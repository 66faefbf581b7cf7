// The general version of a kernel on demand (LowerOptions::lazyGeneral, Kernel::general): the
// kernel compiled up front holds only the contiguous / unit-stride loops behind a stride check;
// the general strided nest is a second kernel that CompiledKernel::run compiles the first time a
// call's strides fail the check. Results are compared with the reference interpreter, on
// contiguous inputs (fast version, nothing more compiled) and on transposed and strided ones
// (general version, compiled once).
#include "xjit/backend/compile_cache.h"
#include "xjit/backend/jit.h"
#include "xjit/backend/kernel_ir.h"
#include "xjit/backend/lower.h"
#include "xjit/ir/builder.h"
#include "xjit/ir/interpreter.h"
#include "xjit/ir/op_registry.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <unistd.h>

namespace xjit::backend {
namespace {

Tensor randomTensor(const std::vector<int64_t> &sizes, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(-3, 3);
  Tensor t = Tensor::empty(DType::F32, sizes);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.setDouble(i, dist(rng));
  return t;
}

/// The same values with the dims reversed in memory (a transposed layout).
Tensor transposed(const Tensor &t) {
  std::vector<int64_t> sizes = t.sizes(), rev(sizes.rbegin(), sizes.rend());
  Tensor base = Tensor::empty(t.dtype(), rev);
  std::vector<int64_t> cs = contiguousStrides(rev);
  Tensor view = base.view(sizes, std::vector<int64_t>(cs.rbegin(), cs.rend()), 0);
  view.copyFrom(t);
  return view;
}

/// The same values with inner stride 2 at an odd offset.
Tensor everyOther(const Tensor &t) {
  std::vector<int64_t> big = t.sizes();
  big.back() = big.back() * 2 + 1;
  Tensor base = Tensor::empty(t.dtype(), big);
  std::vector<int64_t> st = contiguousStrides(big);
  st.back() = 2;
  Tensor view = base.view(t.sizes(), st, 1);
  view.copyFrom(t);
  return view;
}

/// "" when the compiled kernel's outputs match the interpreter's within f32 tolerance.
std::string compare(const Graph &g, const LoweredKernel &lk, const CompiledKernel &ck,
                    const std::vector<RtValue> &inputs) {
  std::vector<RtValue> ref = interpret(g, inputs);
  std::vector<RtValue> got = runLowered(lk, ck, inputs);
  if (got.size() != ref.size()) return "output count differs";
  for (size_t o = 0; o < ref.size(); ++o) {
    const Tensor &a = got[o].tensor(), &r = ref[o].tensor();
    if (a.sizes() != r.sizes()) return "output " + std::to_string(o) + ": sizes differ";
    for (int64_t i = 0; i < r.numel(); ++i) {
      double x = a.getDouble(i), y = r.getDouble(i);
      if (!(std::fabs(x - y) <= 1e-5 * std::fabs(y) + 1e-5))
        return "output " + std::to_string(o) + " element " + std::to_string(i) + ": " +
               std::to_string(x) + " vs " + std::to_string(y);
    }
  }
  return "";
}

/// gelu(x * w + c) over [s0, 24] with w broadcast over rows: an inner-unit fast version.
std::unique_ptr<Graph> biasGelu() {
  auto g = std::make_unique<Graph>("bias_gelu");
  Value *x = g->addInput(Type::tensor(DType::F32, {DimExpr::symbol("s0"), DimExpr(24)}), "x");
  Value *w = g->addInput(Type::tensor(DType::F32, {DimExpr(24)}), "w");
  Builder b(g->body());
  Value *y = b.op("gelu", {b.op("add", {b.op("mul", {x, w}), b.constantFloat(0.5)})});
  b.createWithTypes("return", {y}, {});
  return g;
}

/// Two outputs of different shapes (two loop nests, each with its own fast version).
std::unique_ptr<Graph> twoNests() {
  auto g = std::make_unique<Graph>("two_nests");
  Value *x = g->addInput(Type::tensor(DType::F32, {DimExpr(6), DimExpr(9)}), "x");
  Value *w = g->addInput(Type::tensor(DType::F32, {DimExpr(9)}), "w");
  Builder b(g->body());
  Value *y = b.op("tanh", {b.op("sub", {x, w})});
  Value *z = b.op("exp", {b.op("neg", {w})});
  b.createWithTypes("return", {y, z}, {});
  return g;
}

/// softmax over rows of 40 (a reduction kernel).
std::unique_ptr<Graph> rowSoftmax() {
  auto g = std::make_unique<Graph>("row_softmax");
  Value *x = g->addInput(Type::tensor(DType::F32, {DimExpr::symbol("s0"), DimExpr(40)}), "x");
  Builder b(g->body());
  b.createWithTypes("return", {b.op("softmax", {x}, {{"dim", Attr(int64_t{1})}})}, {});
  return g;
}

/// Compiles g's lowering, checks that contiguous inputs run the fast version alone and that
/// strided inputs compile the general version once and match the interpreter.
void checkOnDemand(const Graph &g, const std::vector<std::vector<int64_t>> &inputSizes) {
  LoweredKernel lk = lowerElementwiseBlock(*g.body(), g.name());
  ASSERT_NE(lk.kernel.general, nullptr) << printKernel(lk.kernel);
  EXPECT_NE(printKernel(lk.kernel).find("else the general version"), std::string::npos);
  EXPECT_EQ(lk.kernel.general->general, nullptr);
  auto ck = Jit::instance().compile(lk.kernel, {.useCache = false});

  std::vector<Tensor> dense;
  for (size_t i = 0; i < inputSizes.size(); ++i)
    dense.push_back(randomTensor(inputSizes[i], uint32_t(11 + i)));
  auto inputs = [&](auto relayout) {
    std::vector<RtValue> v;
    for (const Tensor &t : dense)
      v.emplace_back(relayout(t));
    return v;
  };
  uint64_t before = jitTotals().llvmCompilations;
  uint64_t generalBefore = jitTotals().generalVersions;
  EXPECT_EQ(compare(g, lk, *ck, inputs([](const Tensor &t) { return t; })), "");
  EXPECT_FALSE(ck->generalCompiled());
  EXPECT_EQ(jitTotals().llvmCompilations, before);

  EXPECT_EQ(compare(g, lk, *ck, inputs(transposed)), "") << "transposed inputs";
  EXPECT_TRUE(ck->generalCompiled());
  EXPECT_EQ(jitTotals().llvmCompilations, before + 1);
  EXPECT_EQ(jitTotals().generalVersions, generalBefore + 1);
  EXPECT_EQ(compare(g, lk, *ck, inputs(everyOther)), "") << "inner stride 2";
  // Contiguous again: the fast version still runs, and nothing more is compiled.
  EXPECT_EQ(compare(g, lk, *ck, inputs([](const Tensor &t) { return t; })), "");
  EXPECT_EQ(jitTotals().llvmCompilations, before + 1);
  EXPECT_EQ(jitTotals().generalVersions, generalBefore + 1);
}

TEST(BackendLazyGeneral, FusedChainCompilesTheGeneralVersionOnDemand) {
  checkOnDemand(*biasGelu(), {{37, 24}, {24}});
}

TEST(BackendLazyGeneral, TwoLoopNestsShareOneStrideCheck) {
  auto g = twoNests();
  LoweredKernel lk = lowerElementwiseBlock(*g->body(), g->name());
  std::string text = printKernel(lk.kernel);
  std::string fast = text.substr(0, text.find("general version:"));
  size_t first = fast.find("else the general version");
  ASSERT_NE(first, std::string::npos) << text;
  EXPECT_EQ(fast.find("else the general version", first + 1), std::string::npos) << text;
  checkOnDemand(*g, {{6, 9}, {9}});
}

TEST(BackendLazyGeneral, ReductionCompilesTheGeneralVersionOnDemand) {
  checkOnDemand(*rowSoftmax(), {{5, 40}});
}

TEST(BackendLazyGeneral, OneKernelWithEveryVersionWhenAskedTo) {
  auto g = biasGelu();
  LoweredKernel lk = lowerElementwiseBlock(*g->body(), g->name(), {.lazyGeneral = false});
  EXPECT_EQ(lk.kernel.general, nullptr);
  std::string text = printKernel(lk.kernel);
  EXPECT_EQ(text.find("general version"), std::string::npos) << text;
  EXPECT_NE(text.find("} else {"), std::string::npos) << text;
  auto ck = Jit::instance().compile(lk.kernel, {.useCache = false});
  std::vector<RtValue> in{RtValue(transposed(randomTensor({7, 24}, 3))),
                          RtValue(randomTensor({24}, 4))};
  EXPECT_EQ(compare(*g, lk, *ck, in), "");
  EXPECT_FALSE(ck->generalCompiled());
}

TEST(BackendLazyGeneral, NoGeneralVersionWithoutStrideChecks) {
  // A 0-d kernel has no strides to check: one version only.
  auto g = std::make_unique<Graph>("scalar_kernel");
  Value *x = g->addInput(Type::tensor(DType::F32, {}), "x");
  Builder b(g->body());
  b.createWithTypes("return", {b.op("exp", {x})}, {});
  LoweredKernel lk = lowerElementwiseBlock(*g->body(), g->name());
  EXPECT_EQ(lk.kernel.general, nullptr) << printKernel(lk.kernel);
}

TEST(BackendLazyGeneral, VerifierRejectsAStrideCheckWithoutAGeneralVersion) {
  auto g = biasGelu();
  LoweredKernel lk = lowerElementwiseBlock(*g->body(), g->name());
  EXPECT_TRUE(verifyKernel(lk.kernel).empty());
  Kernel k = lk.kernel;
  k.general = nullptr;
  auto errors = verifyKernel(k);
  ASSERT_FALSE(errors.empty());
  EXPECT_NE(errors.front().find("without a general version"), std::string::npos) << errors.front();
  // A general version with other parameters is rejected too.
  Kernel other = *lk.kernel.general;
  other.buffers.pop_back();
  k.general = std::make_shared<const Kernel>(other);
  errors = verifyKernel(k);
  ASSERT_FALSE(errors.empty());
  EXPECT_NE(errors.front().find("other parameters"), std::string::npos) << errors.front();
}

TEST(BackendLazyGeneral, GeneralVersionComesFromTheCompileCacheToo) {
  std::string dir =
      (std::filesystem::temp_directory_path() / ("xjit-lazy-general-" + std::to_string(getpid())))
          .string();
  const char *old = std::getenv("XJIT_CACHE_DIR");
  std::string saved = old ? old : "";
  setenv("XJIT_CACHE_DIR", dir.c_str(), 1);
  bool wasEnabled = compileCacheEnabled();
  setCompileCacheEnabled(true);
  auto g = biasGelu();
  LoweredKernel lk = lowerElementwiseBlock(*g->body(), g->name());
  std::vector<RtValue> strided{RtValue(transposed(randomTensor({9, 24}, 5))),
                               RtValue(randomTensor({24}, 6))};
  for (int process = 0; process < 2; ++process) {
    // The second round finds both versions in the cache: the fast one and, keyed by its own
    // loop IR, the general one.
    JitTotals before = jitTotals();
    auto ck = Jit::instance().compile(lk.kernel);
    EXPECT_EQ(ck->fromCache(), process == 1);
    EXPECT_EQ(compare(*g, lk, *ck, strided), "");
    JitTotals after = jitTotals();
    EXPECT_EQ(after.llvmCompilations - before.llvmCompilations, process == 0 ? 2u : 0u);
    EXPECT_EQ(after.cacheLinks - before.cacheLinks, process == 0 ? 0u : 2u);
  }
  setCompileCacheEnabled(wasEnabled);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (old)
    setenv("XJIT_CACHE_DIR", saved.c_str(), 1);
  else
    unsetenv("XJIT_CACHE_DIR");
}

} // namespace
} // namespace xjit::backend
