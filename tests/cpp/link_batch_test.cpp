// LinkBatch: a compiled graph's kernels are linked together (one JITDylib, one lookup). Kernels
// of one name but different code must each run their own code, cold (compiled in the batch) and
// warm (loaded from the cache); nothing runs before finish(); a batch that never finishes leaves
// its kernels unrunnable, not crashing; a cached object that validates but does not link is
// compiled again inside the batch. With the persistent cache off, identical kernels still
// compile once per process. Linked code outlives the LLVM engine.
#include "xjit/backend/compile_cache.h"
#include "xjit/backend/jit.h"
#include "xjit/backend/lower.h"
#include "xjit/ir/interpreter.h"
#include "xjit/ir/op_registry.h"
#include "xjit/ir/parser.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <random>
#include <unistd.h>

namespace xjit::backend {
namespace {

namespace fs = std::filesystem;

/// A fresh cache directory for one test, removed afterwards; restores XJIT_CACHE_DIR.
class ScopedCacheDir {
public:
  ScopedCacheDir() {
    const char *old = std::getenv("XJIT_CACHE_DIR");
    hadOld_ = old != nullptr;
    old_ = old ? old : "";
    dir_ = fs::temp_directory_path() / ("xjit-link-batch-" + std::to_string(getpid()) + "-" +
                                        std::to_string(std::random_device{}()));
    setenv("XJIT_CACHE_DIR", dir_.c_str(), 1);
  }
  ~ScopedCacheDir() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
    if (hadOld_)
      setenv("XJIT_CACHE_DIR", old_.c_str(), 1);
    else
      unsetenv("XJIT_CACHE_DIR");
  }
  bool exists() const { return fs::exists(dir_); }
  std::vector<fs::path> entries() const {
    std::vector<fs::path> out;
    for (const auto &e : fs::directory_iterator(dir_))
      if (e.path().extension() == ".o") out.push_back(e.path());
    return out;
  }

private:
  fs::path dir_;
  std::string old_;
  bool hadOld_ = false;
};

/// Kernels of one name ("same_name") whose code differs with `op` and `scale`.
std::unique_ptr<Graph> namedGraph(const std::string &op, double scale) {
  return parseGraph("graph @same_name(%x: f32[23,17]) -> (f32[23,17]) {\n"
                    "  %c = constant() {value = " +
                    std::to_string(scale) +
                    "} : float\n"
                    "  %a = " +
                    op +
                    "(%x, %c) : f32[23,17]\n"
                    "  %t = tanh(%a) : f32[23,17]\n"
                    "  return(%t)\n"
                    "}\n");
}

std::vector<RtValue> inputs() {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-2, 2);
  Tensor x = Tensor::empty(DType::F32, {23, 17});
  for (int64_t i = 0; i < x.numel(); ++i)
    x.setDouble(i, u(rng));
  return {RtValue(x)};
}

struct Compiled {
  std::unique_ptr<Graph> graph;
  LoweredKernel lk;
  std::shared_ptr<const CompiledKernel> ck;
};

Compiled compile(std::unique_ptr<Graph> g) {
  LoweredKernel lk = lowerElementwiseBlock(*g->body(), g->name());
  auto ck = Jit::instance().compile(lk.kernel);
  return {std::move(g), std::move(lk), std::move(ck)};
}

/// "" when the compiled kernel computes what the interpreter does for its own graph.
std::string check(const Compiled &c) {
  auto in = inputs();
  Tensor got = runLowered(c.lk, *c.ck, in).at(0).tensor();
  Tensor ref = interpret(*c.graph, in).at(0).tensor();
  for (int64_t i = 0; i < ref.numel(); ++i) {
    double a = got.getDouble(i), r = ref.getDouble(i);
    if (!(std::abs(a - r) <= 1e-5 * std::abs(r) + 1e-6))
      return "element " + std::to_string(i) + ": " + std::to_string(a) + " vs " + std::to_string(r);
  }
  return "";
}

/// Three distinct kernels of one name, plus a copy of the first (shared within the batch).
std::vector<Compiled> compileFour() {
  std::vector<Compiled> out;
  out.push_back(compile(namedGraph("mul", 0.5)));
  out.push_back(compile(namedGraph("add", 0.5)));
  out.push_back(compile(namedGraph("mul", -1.5)));
  out.push_back(compile(namedGraph("mul", 0.5)));
  return out;
}

TEST(LinkBatch, SameNamedKernelsRunTheirOwnCodeColdAndWarm) {
  ScopedCacheDir cache;
  JitTotals t0 = jitTotals();
  {
    LinkBatch batch;
    std::vector<Compiled> cold = compileFour();
    for (const Compiled &c : cold) {
      EXPECT_FALSE(c.ck->linked());
      auto in = inputs();
      EXPECT_THROW(runLowered(c.lk, *c.ck, in), xjit::KernelError); // not before finish()
    }
    batch.finish();
    for (const Compiled &c : cold) {
      ASSERT_TRUE(c.ck->linked());
      EXPECT_EQ(check(c), "");
    }
    EXPECT_EQ(cold[0].ck->entry(), cold[3].ck->entry()); // identical: one copy
    EXPECT_NE(cold[0].ck->entry(), cold[1].ck->entry());
    EXPECT_NE(cold[0].ck->entry(), cold[2].ck->entry());
  }
  JitTotals t1 = jitTotals();
  EXPECT_EQ(t1.llvmCompilations, t0.llvmCompilations + 3);
  EXPECT_EQ(t1.batchLinks, t0.batchLinks + 1);
  EXPECT_EQ(t1.batchedObjects, t0.batchedObjects + 3);
  EXPECT_EQ(cache.entries().size(), 3u);
  // Warm: the kernels above are gone (none shares live code), so all three come from the cache.
  {
    LinkBatch batch;
    std::vector<Compiled> warm = compileFour();
    batch.finish();
    for (const Compiled &c : warm) {
      EXPECT_TRUE(c.ck->fromCache());
      EXPECT_EQ(check(c), "");
    }
    // The code lives as long as any kernel of the batch holds it.
    Compiled last = std::move(warm[2]);
    warm.clear();
    EXPECT_EQ(check(last), "");
  }
  JitTotals t2 = jitTotals();
  EXPECT_EQ(t2.llvmCompilations, t1.llvmCompilations);
  EXPECT_EQ(t2.cacheLinks, t1.cacheLinks + 3);
  EXPECT_EQ(t2.batchLinks, t1.batchLinks + 1);
}

TEST(LinkBatch, UnfinishedBatchLeavesKernelsUnrunnable) {
  ScopedCacheDir cache;
  Compiled unlinked;
  {
    LinkBatch batch;
    unlinked = compile(namedGraph("add", 2.0));
  } // destroyed without finish(), as when a graph's compile throws
  EXPECT_FALSE(unlinked.ck->linked());
  auto in = inputs();
  EXPECT_THROW(runLowered(unlinked.lk, *unlinked.ck, in), xjit::KernelError);
  // Outside a batch the same kernel links at once (the unlinked one was never shared).
  Compiled again = compile(namedGraph("add", 2.0));
  EXPECT_TRUE(again.ck->linked());
  EXPECT_EQ(check(again), "");
}

TEST(LinkBatch, CachedObjectThatDoesNotLinkIsCompiledAgain) {
  ScopedCacheDir cache;
  {
    compile(namedGraph("mul", 3.0));
  } // fills the cache, then drops the code
  std::vector<fs::path> files = cache.entries();
  ASSERT_EQ(files.size(), 1u);
  // Replace the object by garbage under a valid header (right key, length and checksum): the
  // entry loads, but JITLink rejects it.
  ASSERT_TRUE(compileCacheStore(files[0].stem().string(), std::string(512, '\x5a')));
  ASSERT_TRUE(compileCacheLoad(files[0].stem().string()).has_value()); // validates

  JitTotals t0 = jitTotals();
  LinkBatch batch;
  Compiled good = compile(namedGraph("add", 1.0)); // a fresh kernel in the same batch
  Compiled bad = compile(namedGraph("mul", 3.0));
  batch.finish();
  EXPECT_FALSE(bad.ck->fromCache());
  EXPECT_EQ(check(bad), "");
  EXPECT_EQ(check(good), "");
  EXPECT_EQ(jitTotals().llvmCompilations, t0.llvmCompilations + 2);
  // The entry was rewritten with a real object: the next load is a hit that links.
  bad = {};
  good = {};
  Compiled hit = compile(namedGraph("mul", 3.0));
  EXPECT_TRUE(hit.ck->fromCache());
  EXPECT_EQ(check(hit), "");
}

// Kernel code outlives the LLVM engine (releaseEngine: its linker and target machines go, and
// in the Python build the library is unloaded): kernels linked before run after it, batched or
// not, and the next compile starts the engine again.
TEST(LinkBatch, KernelsOutliveTheEngine) {
  ScopedCacheDir cache;
  Compiled alone = compile(namedGraph("mul", 1.25));
  std::vector<Compiled> batched;
  {
    LinkBatch batch;
    batched.push_back(compile(namedGraph("add", 1.25)));
    batched.push_back(compile(namedGraph("mul", -0.25)));
    batch.finish();
  }
  EXPECT_TRUE(Jit::releaseEngine());
  EXPECT_FALSE(Jit::releaseEngine()); // nothing loaded any more
  EXPECT_EQ(check(alone), "");
  for (const Compiled &c : batched)
    EXPECT_EQ(check(c), "");
  JitTotals t0 = jitTotals();
  Compiled fresh = compile(namedGraph("add", -2.5));
  EXPECT_EQ(jitTotals().llvmCompilations, t0.llvmCompilations + 1);
  EXPECT_EQ(check(fresh), "");
  EXPECT_TRUE(Jit::releaseEngine());
  batched.clear(); // frees the batch's code with the engine stopped
  Compiled cached = compile(namedGraph("add", 1.25)); // a cache hit: a link restarts it
  EXPECT_TRUE(cached.ck->fromCache());
  EXPECT_EQ(check(cached), "");
  EXPECT_EQ(check(alone), "");
}

/// XJIT_NO_CACHE=1 while alive (restored afterwards).
class ScopedNoCache {
public:
  ScopedNoCache() {
    const char *old = std::getenv("XJIT_NO_CACHE");
    hadOld_ = old != nullptr;
    old_ = old ? old : "";
    setenv("XJIT_NO_CACHE", "1", 1);
  }
  ~ScopedNoCache() {
    if (hadOld_)
      setenv("XJIT_NO_CACHE", old_.c_str(), 1);
    else
      unsetenv("XJIT_NO_CACHE");
  }

private:
  std::string old_;
  bool hadOld_ = false;
};

// With the persistent cache off, identical kernels (same printed loop IR and options) in one
// process still compile once; kernels of one name but different code still compile apart.
TEST(LinkBatch, IdenticalKernelsCompileOnceWithoutThePersistentCache) {
  ScopedCacheDir cache;
  ScopedNoCache off;
  ASSERT_FALSE(compileCacheEnabled());
  for (bool batched : {true, false}) {
    SCOPED_TRACE(batched ? "in a batch" : "no batch");
    JitTotals t0 = jitTotals();
    std::vector<Compiled> same;
    {
      std::optional<LinkBatch> batch;
      if (batched) batch.emplace();
      for (int i = 0; i < 6; ++i)
        same.push_back(compile(namedGraph("mul", 0.75)));
      if (batch) batch->finish();
    }
    EXPECT_EQ(jitTotals().llvmCompilations, t0.llvmCompilations + 1);
    for (const Compiled &c : same) {
      EXPECT_EQ(c.ck->entry(), same[0].ck->entry());
      EXPECT_EQ(check(c), "");
    }
    JitTotals t1 = jitTotals();
    {
      std::optional<LinkBatch> batch;
      if (batched) batch.emplace();
      std::vector<Compiled> four = compileFour(); // 3 distinct kernels of one name + a copy
      if (batch) batch->finish();
      EXPECT_EQ(jitTotals().llvmCompilations, t1.llvmCompilations + 3);
      for (const Compiled &c : four)
        EXPECT_EQ(check(c), "");
      EXPECT_EQ(four[0].ck->entry(), four[3].ck->entry());
      EXPECT_NE(four[0].ck->entry(), four[2].ck->entry());
    }
  }
  EXPECT_FALSE(cache.exists()); // nothing written: the cache directory was never created
}

} // namespace
} // namespace xjit::backend
