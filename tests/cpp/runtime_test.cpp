// The runtime (compileGraph / CompiledGraph::run) against the reference interpreter: random
// graphs of the whole op registry (If and Loop included), hand-written graphs with control flow,
// views, in-place ops, outputs that are inputs, external calls and the memory plan's arena,
// several threads running one compiled graph, and error messages.
#include "random_graph.h"
#include "value_test_util.h"
#include "xjit/ir/diagnostics.h"
#include "xjit/ir/interpreter.h"
#include "xjit/ir/op_registry.h"
#include "xjit/ir/parser.h"
#include "xjit/ir/printer.h"
#include "xjit/runtime/runtime.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <thread>

namespace xjit::runtime {
namespace {

// ---- helpers ----

/// Each run gets its own inputs (in-place ops write them).
using testutil::deepCopy;

struct Tolerance {
  double rtol = 0, atol = 0; // exact unless given (generated code may round differently)
};

bool nearlyEqual(double a, double b, Tolerance tol) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  if (a == b) return true;
  return std::abs(a - b) <= tol.atol + tol.rtol * std::abs(b);
}

/// "" when equal (within tol for floating values), else where they differ.
std::string diff(const RtValue &got, const RtValue &want, Tolerance tol, const std::string &at) {
  if (got.isTensor() != want.isTensor() || got.isList() != want.isList())
    return at + ": got a " + got.kindName() + ", want a " + want.kindName();
  if (want.isTensor()) {
    const Tensor &g = got.tensor(), &w = want.tensor();
    if (g.dtype() != w.dtype() || g.sizes() != w.sizes()) return at + ": dtype or sizes differ";
    bool fp = isFloating(w.dtype());
    for (int64_t i = 0; i < w.numel(); ++i) {
      bool same =
          fp ? nearlyEqual(g.getDouble(i), w.getDouble(i), tol) : g.getInt(i) == w.getInt(i);
      if (!same)
        return at + ": element " + std::to_string(i) + " is " + std::to_string(g.getDouble(i)) +
               ", want " + std::to_string(w.getDouble(i));
    }
    return "";
  }
  if (want.isList()) {
    if (got.list().size() != want.list().size()) return at + ": list lengths differ";
    for (size_t i = 0; i < want.list().size(); ++i)
      if (auto d = diff(got.list()[i], want.list()[i], tol, at + "[" + std::to_string(i) + "]");
          !d.empty())
        return d;
    return "";
  }
  if (want.isFloat() || want.isInt() || want.isBool())
    return nearlyEqual(got.toDouble(), want.toDouble(), tol) ? "" : at + ": scalars differ";
  return "";
}

/// Runs g in the interpreter and compiled (each on its own copy of the inputs) and compares
/// the outputs and the inputs afterwards (in-place ops). "" when they agree; "skip" when the
/// interpreter rejects the inputs (a user error) and the compiled graph does too.
std::string compareWithInterpreter(const Graph &g, const CompiledGraph &cg,
                                   const std::vector<RtValue> &inputs, Tolerance tol) {
  std::vector<RtValue> refIn = deepCopy(inputs), cIn = deepCopy(inputs);
  std::vector<RtValue> want, got;
  std::string refError;
  try {
    want = interpret(g, refIn);
  } catch (const Error &e) {
    if (e.kind() == ErrorKind::Internal) return std::string("interpreter: ") + e.what();
    refError = e.what();
  }
  try {
    got = cg.run(cIn);
  } catch (const Error &e) {
    if (!refError.empty() && e.kind() == ErrorKind::User) return "skip";
    return std::string("compiled graph failed: ") + e.what() +
           (refError.empty() ? "" : " (the interpreter failed too: " + refError + ")");
  }
  // Random inputs that break a symbolic broadcast assumption fail only where the op runs: the
  // compiled graph drops an op whose result is unused, the interpreter runs every op.
  if (refError.find("violate the graph's shape assumptions") != std::string::npos) return "skip";
  if (!refError.empty()) return "the interpreter failed, the compiled graph did not: " + refError;
  if (got.size() != want.size()) return "output counts differ";
  for (size_t i = 0; i < want.size(); ++i)
    if (auto d = diff(got[i], want[i], tol, "output " + std::to_string(i)); !d.empty()) return d;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (auto d = diff(cIn[i], refIn[i], tol, "input " + std::to_string(i) + " after the run");
        !d.empty())
      return d;
  return "";
}

std::unique_ptr<Graph> parse(const std::string &text) { return parseGraph(text, "test.xir"); }

Tensor randomTensor(DType dt, std::vector<int64_t> sizes, std::mt19937 &rng) {
  Tensor t = Tensor::empty(dt, std::move(sizes));
  std::uniform_real_distribution<double> u(-2, 2);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.setDouble(i, u(rng));
  return t;
}

// ---- random graphs of the whole registry ----

/// Seeds of the generator, compiled with the target and with reference kernels only (which
/// must be bit-identical: the layout, fuse, reinplace and plan-memory passes do not reorder
/// arithmetic; the default pipeline's rewrites that do, decompose-batch-norm for one, are left
/// out of that run and checked with the target's tolerance). With the target,
/// shapes are static: random inputs for symbolic shapes may break assumptions the graph was
/// built under (two symbols broadcasting), which the interpreter's kernels detect and
/// generated kernels do not check (the frontend's guards rule such inputs out).
TEST(RuntimeFuzz, RandomGraphsMatchTheInterpreter) {
  // Native compilation dominates the time (an LLVM compile per kernel on a cold cache).
  const int kGraphs = 60, kReferenceGraphs = 150;
  int compared = 0, failures = 0, targetOps = 0, plannedResults = 0, controlFlow = 0;
  for (bool useTarget : {true, false}) {
    testing::RandomGraphOptions gen;
    if (useTarget) gen.symbolicDimRate = 0;
    for (int seed = 1; seed <= (useTarget ? kGraphs : kReferenceGraphs); ++seed) {
      testing::RandomCase c = testing::randomGraph(uint64_t(seed), gen);
      std::string d;
      try {
        CompileOptions opts{.useTarget = useTarget};
        if (!useTarget)
          opts.pipeline = "layout,sink-permutes,fuse,reinplace,plan-memory{in-place=false}";
        CompiledGraph cg = compileGraph(*c.graph, cpuTarget(), opts);
        targetOps += cg.stats().targetOps;
        plannedResults += cg.stats().plannedResults;
        controlFlow += cg.stats().controlFlowOps;
        d = compareWithInterpreter(*c.graph, cg, c.inputs,
                                   useTarget ? Tolerance{1e-4, 1e-5} : Tolerance{});
      } catch (const std::exception &e) {
        d = std::string("compileGraph failed: ") + e.what();
      }
      if (d == "skip") continue;
      ++compared;
      if (!d.empty() && ++failures <= 5)
        ADD_FAILURE() << "seed " << seed << (useTarget ? "" : " (reference kernels)") << ": " << d
                      << "\n"
                      << printGraph(*c.graph, {.printLocations = false});
    }
  }
  EXPECT_EQ(failures, 0);
  EXPECT_GT(compared, kGraphs); // most random inputs are accepted
  // The generated graphs do exercise native kernels, the arena and control flow.
  EXPECT_GT(targetOps, kGraphs / 2);
  EXPECT_GT(plannedResults, kGraphs / 10);
  EXPECT_GT(controlFlow, kGraphs / 4);
  RecordProperty("target_ops", targetOps);
  RecordProperty("planned_results", plannedResults);
}

// ---- hand-written graphs ----

TEST(Runtime, ElementwiseChainRunsAsOneTargetKernel) {
  auto g = parse(R"(
graph @f(%x: f32[4,8], %y: f32[4,8]) -> (f32[4,8]) {
  %a = add(%x, %y) : f32[4,8]
  %b = tanh(%a) : f32[4,8]
  %c = mul(%b, %x) : f32[4,8]
  return(%c)
})");
  CompiledGraph cg = compileGraph(*g, cpuTarget());
  EXPECT_EQ(cg.stats().targetOps, 1);
  EXPECT_EQ(cg.stats().referenceOps, 0);
  std::mt19937 rng(1);
  EXPECT_EQ(compareWithInterpreter(
                *g, cg,
                {randomTensor(DType::F32, {4, 8}, rng), randomTensor(DType::F32, {4, 8}, rng)},
                {1e-5, 1e-6}),
            "");
}

TEST(Runtime, IfAndLoopRunNatively) {
  auto g = parse(R"(
graph @f(%n: int, %c: bool, %x: f32[3]) -> (f32[3], f32[3], int) {
  %t = constant() {value = true} : bool
  %l:2 = loop(%n, %t, %x, %n) : f32[3], int {
  ^(%i: int, %acc: f32[3], %k: int):
    %e = exp(%acc) : f32[3]
    %h = constant() {value = 0.5} : float
    %s = mul(%e, %h) : f32[3]
    %one = constant() {value = 1} : int
    %m = sub(%k, %one) : int
    %go = gt(%m, %one) : bool
    yield(%go, %s, %m)
  }
  %r = if(%c) : f32[3] {
    %u = neg(%l#0) : f32[3]
    %v = add(%u, %x) : f32[3]
    yield(%v)
  } {
    yield(%x)
  }
  return(%l#0, %r, %l#1)
})");
  CompiledGraph cg = compileGraph(*g, cpuTarget());
  EXPECT_EQ(cg.stats().controlFlowOps, 2);
  std::mt19937 rng(2);
  for (int64_t n : {0, 1, 3, 7})
    for (bool c : {true, false}) {
      SCOPED_TRACE("n=" + std::to_string(n) + " c=" + std::to_string(c));
      EXPECT_EQ(compareWithInterpreter(*g, cg,
                                       {RtValue(n), RtValue(c), randomTensor(DType::F32, {3}, rng)},
                                       {1e-5, 1e-6}),
                "");
    }
}

TEST(Runtime, LoopYieldsThatSwapCarriedValues) {
  auto g = parse(R"(
graph @f(%n: int, %a: f32[2], %b: f32[2]) -> (f32[2], f32[2]) {
  %t = constant() {value = true} : bool
  %l:2 = loop(%n, %t, %a, %b) : f32[2], f32[2] {
  ^(%i: int, %x: f32[2], %y: f32[2]):
    yield(%t, %y, %x)
  }
  return(%l#0, %l#1)
})");
  CompiledGraph cg = compileGraph(*g, cpuTarget());
  std::mt19937 rng(3);
  for (int64_t n : {0, 1, 2, 5})
    EXPECT_EQ(compareWithInterpreter(*g, cg,
                                     {RtValue(n), randomTensor(DType::F32, {2}, rng),
                                      randomTensor(DType::F32, {2}, rng)},
                                     {}),
              "");
}

TEST(Runtime, ViewsInPlaceOpsAndOutputsThatAreInputs) {
  auto g = parse(R"(
graph @f(%x: f32[4,6], %y: f32[6,4]) -> (f32[4,6], f32[6,4], f32[4,3], f32[4,6], f32[4,6]) {
  %a = exp(%x) : f32[4,6]
  %b = transpose(%a) {dim0 = 1, dim1 = 0} : f32[6,4]
  %c = add(%b, %y) : f32[6,4]
  %s = slice(%a) {dim = 1, start = 0, end = 6, step = 2} : f32[4,3]
  %z = copy_(%a, %x) : f32[4,6]
  %two = constant() {value = 2.0} : float
  %w = mul(%z, %two) : f32[4,6]
  return(%x, %c, %s, %w, %x)
})");
  CompiledGraph cg = compileGraph(*g, cpuTarget());
  std::mt19937 rng(4);
  std::vector<RtValue> in{randomTensor(DType::F32, {4, 6}, rng),
                          randomTensor(DType::F32, {6, 4}, rng)};
  EXPECT_EQ(compareWithInterpreter(*g, cg, in, {1e-5, 1e-6}), "");
  // An output that is an input is the caller's tensor itself (zero-copy both ways).
  std::vector<RtValue> outs = cg.run(in);
  EXPECT_EQ(outs[0].tensor().storage(), in[0].tensor().storage());
  EXPECT_EQ(outs[4].tensor().storage(), in[0].tensor().storage());
}

TEST(Runtime, InPlaceWriteToAnInputIsVisibleToTheCaller) {
  auto g = parse(R"(
graph @f(%x: f32[5], %v: f32[5]) -> (f32[5]) {
  %e = exp(%v) : f32[5]
  %y = copy_(%x, %e) : f32[5]
  %one = constant() {value = 1.0} : float
  %z = add(%y, %one) : f32[5]
  return(%z)
})");
  CompiledGraph cg = compileGraph(*g, cpuTarget());
  std::mt19937 rng(5);
  std::vector<RtValue> in{randomTensor(DType::F32, {5}, rng), randomTensor(DType::F32, {5}, rng)};
  EXPECT_EQ(compareWithInterpreter(*g, cg, in, {1e-6, 1e-7}), "");
  cg.run(in);
  for (int64_t i = 0; i < 5; ++i)
    EXPECT_NEAR(in[0].tensor().getDouble(i), std::exp(in[1].tensor().getDouble(i)), 1e-5);
}

/// A graph whose intermediates go through the arena: single elementwise ops (compiled alone)
/// feeding reference-kernel ops, so planned values are read after later ops have run.
const char *kArenaGraph = R"(
graph @f(%x: f32[16,32], %w: f32[32,8]) -> (f32[16,8], f32[16,32]) {
  %a = exp(%x) : f32[16,32]
  %c = cumsum(%a) {dim = 1} : f32[16,32]
  %b = sigmoid(%c) : f32[16,32]
  %d = cumsum(%b) {dim = 0} : f32[16,32]
  %e = tanh(%d) : f32[16,32]
  %m = matmul(%e, %w) : f32[16,8]
  %f = neg(%a) : f32[16,32]
  %g = cumsum(%f) {dim = 1} : f32[16,32]
  return(%m, %g)
})";

TEST(Runtime, ArenaIsUsedAndOutputsNeverAliasIt) {
  auto g = parse(kArenaGraph);
  CompiledGraph cg = compileGraph(*g, cpuTarget());
  EXPECT_GT(cg.stats().arenaBytes, 0) << printGraph(cg.graph());
  EXPECT_GT(cg.stats().plannedResults, 0) << printGraph(cg.graph());
  std::mt19937 rng(6);
  std::vector<RtValue> first{randomTensor(DType::F32, {16, 32}, rng),
                             randomTensor(DType::F32, {32, 8}, rng)};
  std::vector<RtValue> firstOut = cg.run(deepCopy(first));
  std::vector<RtValue> firstWant = interpret(*g, deepCopy(first));
  // Later calls reuse the arena; the first call's outputs must not change.
  for (int i = 0; i < 3; ++i) {
    std::vector<RtValue> other{randomTensor(DType::F32, {16, 32}, rng),
                               randomTensor(DType::F32, {32, 8}, rng)};
    EXPECT_EQ(compareWithInterpreter(*g, cg, other, {1e-4, 1e-5}), "");
  }
  for (size_t i = 0; i < firstOut.size(); ++i)
    EXPECT_EQ(diff(firstOut[i], firstWant[i], {1e-4, 1e-5}, "output " + std::to_string(i)), "");
}

TEST(Runtime, AnOutputPlannedIntoTheArenaIsCopiedOut) {
  // A plan that (wrongly) puts a graph output in the arena: the output must still not share
  // the arena, or the next call would overwrite what the caller holds.
  auto g = parse(R"(
graph @f(%x: f32[4]) -> (f32[4]) {
  %a = exp(%x) {mem.offset = [0]} : f32[4]
  return(%a) {mem.arena = 64}
})");
  CompiledGraph cg = compileGraph(*g, cpuTarget(), {.pipeline = ""});
  ASSERT_EQ(cg.stats().plannedResults, 1);
  std::mt19937 rng(8);
  Tensor x1 = randomTensor(DType::F32, {4}, rng), x2 = randomTensor(DType::F32, {4}, rng);
  std::vector<RtValue> first = cg.run({x1});
  cg.run({x2});
  for (int64_t i = 0; i < 4; ++i)
    EXPECT_NEAR(first[0].tensor().getDouble(i), std::exp(x1.getDouble(i)), 1e-5);
}

TEST(Runtime, SeveralThreadsRunOneCompiledGraph) {
  auto g = parse(kArenaGraph);
  CompiledGraph cg = compileGraph(*g, cpuTarget());
  const int kThreads = 4, kRuns = 40;
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      std::mt19937 rng(100 + unsigned(t));
      try {
        for (int r = 0; r < kRuns && errors[size_t(t)].empty(); ++r) {
          std::vector<RtValue> in{randomTensor(DType::F32, {16, 32}, rng),
                                  randomTensor(DType::F32, {32, 8}, rng)};
          std::vector<RtValue> want = interpret(*g, deepCopy(in));
          std::vector<RtValue> got = cg.run(in);
          for (size_t i = 0; i < want.size(); ++i)
            errors[size_t(t)] += diff(got[i], want[i], {1e-4, 1e-5}, "output");
        }
      } catch (const std::exception &e) {
        errors[size_t(t)] = e.what();
      }
    });
  for (auto &th : threads)
    th.join();
  for (const std::string &e : errors)
    EXPECT_EQ(e, "");
}

TEST(Runtime, ExternalCallsRunThroughTheRegistry) {
  int64_t id = registerExternalFunction([](std::span<const RtValue> in) {
    Tensor x = in[0].tensor().contiguousCopy();
    for (int64_t i = 0; i < x.numel(); ++i)
      x.setDouble(i, x.getDouble(i) * 3 + 1);
    return std::vector<RtValue>{RtValue(x)};
  });
  auto g = parse(R"(
graph @f(%x: f32[6]) -> (f32[6]) {
  %a = exp(%x) : f32[6]
  %b = external_call(%a) {callee = )" +
                 std::to_string(id) + R"(, name = "torch.special.thing"} : f32[6]
  %c = add(%b, %x) : f32[6]
  return(%c)
})");
  CompiledGraph cg = compileGraph(*g, cpuTarget());
  EXPECT_EQ(cg.stats().externalOps, 1);
  std::mt19937 rng(7);
  EXPECT_EQ(compareWithInterpreter(*g, cg, {randomTensor(DType::F32, {6}, rng)}, {1e-5, 1e-6}), "");
  unregisterExternalFunction(id);
  // Compiling needs the function registered (resolved once, at compile time).
  try {
    compileGraph(*g, cpuTarget());
    ADD_FAILURE() << "compiled with an unregistered external function";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("external_call"), std::string::npos) << e.what();
  }
}

TEST(Runtime, ErrorsNameTheOpAndItsSourceLocation) {
  auto g = parse(R"(
graph @f(%x: i64[4], %y: i64[4]) -> (i64[4]) {
  %q = floor_divide(%x, %y) : i64[4] loc("model.py":17 "forward")
  %r = cumsum(%q) {dim = 0} : i64[4]
  return(%r)
})");
  CompiledGraph cg = compileGraph(*g, cpuTarget());
  Tensor x = Tensor::empty(DType::I64, {4}), y = Tensor::empty(DType::I64, {4});
  for (int64_t i = 0; i < 4; ++i) {
    x.setInt(i, i + 1);
    y.setInt(i, i == 2 ? 0 : 1);
  }
  try {
    cg.run({x, y});
    ADD_FAILURE() << "integer division by zero did not fail";
  } catch (const Error &e) {
    std::string msg = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::User);
    EXPECT_NE(msg.find("floor_divide"), std::string::npos) << msg;
    EXPECT_NE(msg.find("model.py:17"), std::string::npos) << msg;
  }
  // Inputs that do not fit the declared types are a user error naming the input.
  try {
    cg.run({Tensor::empty(DType::I64, {5}), y});
    ADD_FAILURE() << "a wrong input shape was accepted";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("input 0"), std::string::npos) << e.what();
  }
}

TEST(Runtime, InputsMustAgreeOnShapeSymbols) {
  auto g = parse(R"(
graph @f(%x: f32[s0], %y: f32[s0], %z: f32[s0*2]) -> (f32[s0], f32[s0]) {
  %a = exp(%x) : f32[s0]
  %b = cumsum(%y) {dim = 0} : f32[s0]
  return(%a, %b)
})");
  CompiledGraph cg = compileGraph(*g, cpuTarget());
  auto f32 = [](int64_t n) { return Tensor::empty(DType::F32, {n}); };
  EXPECT_EQ(cg.run({f32(3), f32(3), f32(6)}).size(), 2u);
  for (auto [in, where] : {std::pair{std::vector<RtValue>{f32(3), f32(4), f32(6)}, "input 1"},
                           std::pair{std::vector<RtValue>{f32(3), f32(3), f32(7)}, "input 2"}}) {
    try {
      cg.run(in);
      ADD_FAILURE() << "inputs that disagree on s0 were accepted";
    } catch (const Error &e) {
      EXPECT_EQ(e.kind(), ErrorKind::User);
      EXPECT_NE(std::string(e.what()).find(where), std::string::npos) << e.what();
    }
  }
}

TEST(Runtime, DumpFilesHoldEachKernelsCode) {
  auto g = parse(R"(
graph @f(%x: f32[8]) -> (f32[8]) {
  %a = exp(%x) : f32[8]
  %b = mul(%a, %x) : f32[8]
  return(%b)
})");
  CompiledGraph cg = compileGraph(*g, cpuTarget(), {.target = {.keepText = true}});
  auto files = cg.dumpFiles();
  ASSERT_FALSE(files.empty());
  bool llvm = false;
  for (auto &[name, text] : files)
    llvm |= name.ends_with(".ll") && text.find("define") != std::string::npos;
  EXPECT_TRUE(llvm);
}

} // namespace
} // namespace xjit::runtime
