// Generic checks of every pass in the pass table over random graphs: the IR verifies after the
// pass, a second run changes nothing and prints identically (idempotence), and the reference
// interpreter computes the same outputs before and after. Plus pass-manager behaviour
// (pipelines, options, errors) and targeted cases the fuzzer rarely produces.
#include "random_graph.h"

#include "value_test_util.h"
#include "xjit/ir/builder.h"
#include "xjit/ir/diagnostics.h"
#include "xjit/ir/interpreter.h"
#include "xjit/ir/op_registry.h"
#include "xjit/ir/parser.h"
#include "xjit/ir/printer.h"
#include "xjit/ir/verifier.h"
#include "xjit/passes/pass.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <numeric>
#include <random>

namespace xjit {
namespace {

using passes::PassContext;
using passes::PassInfo;

/// How exactly a pass must preserve results. Every cleanup pass is exact except canonicalize:
/// pow(x, 2) -> x*x may differ in the last bit of f64 (glibc pow is within 0.52 ulp, x*x is
/// correctly rounded), pow(x, 0.5) -> sqrt(x) differs at -inf (+inf vs NaN), and
/// -0.0 + 0 -> -0.0 keeps the sign of zero (equal under ==, so not a difference here).
struct Tolerance {
  double rtol = 0, atol = 0;
  bool infBecomesNaN = false; // pow(-inf, 0.5) = +inf, sqrt(-inf) = NaN
};

Tolerance toleranceFor(const std::string &pass) {
  if (pass == "canonicalize" || pass == "inference") return {1e-5, 1e-6, true};
  // Passes of the other families that change arithmetic on purpose (see docs/passes.md):
  // freeze folds batch norm into weights (reassociation), mixed-precision computes in bf16/f16.
  if (pass == "freeze") return {1e-4, 1e-5};
  if (pass == "mixed-precision") return {5e-2, 5e-2};
  return {};
}

using testutil::deepCopy;

bool close(double a, double b, const Tolerance &tol) {
  if (a == b || (std::isnan(a) && std::isnan(b))) return true;
  if (tol.infBecomesNaN && std::isinf(a) && std::isnan(b)) return true;
  return std::fabs(a - b) <= tol.atol + tol.rtol * std::fabs(a);
}

/// "" if equal, else what differs.
std::string compare(const RtValue &a, const RtValue &b, const Tolerance &tol) {
  if (a.isTensor() != b.isTensor() || a.isList() != b.isList()) return "different kinds";
  if (a.isTensor()) {
    const Tensor &x = a.tensor(), &y = b.tensor();
    if (x.dtype() != y.dtype() || x.sizes() != y.sizes()) return "different dtype or sizes";
    for (int64_t i = 0; i < x.numel(); ++i) {
      bool ok = isFloating(x.dtype()) ? close(x.getDouble(i), y.getDouble(i), tol)
                                      : x.getInt(i) == y.getInt(i);
      if (!ok)
        return "element " + std::to_string(i) + ": " + std::to_string(x.getDouble(i)) + " vs " +
               std::to_string(y.getDouble(i));
    }
    return "";
  }
  if (a.isList()) {
    if (a.list().size() != b.list().size()) return "different lengths";
    for (size_t i = 0; i < a.list().size(); ++i)
      if (auto d = compare(a.list()[i], b.list()[i], tol); !d.empty()) return d;
    return "";
  }
  if (a.isFloat() || b.isFloat())
    return a.isFloat() && b.isFloat() && close(a.toDouble(), b.toDouble(), tol) ? ""
                                                                                : "floats differ";
  if (a.isInt() || a.isBool())
    return a.kindName() == std::string(b.kindName()) && a.toInt() == b.toInt() ? ""
                                                                               : "scalars differ";
  if (a.isStr()) return b.isStr() && a.str() == b.str() ? "" : "strings differ";
  return a.isNone() == b.isNone() ? "" : "none vs value";
}

// ---- redundancy injection ----
// Random graphs rarely contain x*1 or a transpose pair, so the fuzz cases also get random
// redundant expressions spliced in: after a value v, an expression w of v's type (often equal
// to v, sometimes not: it only has to be valid) replaces v for v's later users. The injected
// graph is then the reference the pass must preserve.

class Injector {
public:
  explicit Injector(uint64_t seed) : rng_(seed) {}

  void run(Graph &g) {
    std::vector<Op *> ops;
    g.walk([&](Op *op) {
      if (!op->def().has(kTerminator) && op->numResults() > 0) ops.push_back(op);
    });
    for (Op *op : ops) {
      if (!chance(0.5)) continue;
      Value *v =
          op->result(static_cast<size_t>(uniform(0, static_cast<int>(op->numResults()) - 1)));
      std::vector<Use> uses = v->uses(); // later users, before the pattern adds its own
      Builder b(op->parentBlock(), op->next());
      b.setLoc(op->loc());
      Value *w = nullptr;
      try {
        w = pattern(b, op, v);
      } catch (const std::exception &) {
        w = nullptr; // the pattern does not fit v's type; its ops stay as dead code
      }
      if (!w || w == v || w->type() != v->type()) continue;
      for (const Use &u : uses)
        u.user->setOperand(u.index, w);
    }
  }

private:
  int uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  bool chance(double p) { return std::bernoulli_distribution(p)(rng_); }

  static Op *regionOp(Builder &b, Value *cond, const std::vector<Type> &types) {
    return b.createWithTypes("if", {cond}, types);
  }

  /// The op's result, or nullptr if inference rejects it (nothing is inserted then).
  static Value *tryOp(Builder &b, std::string_view name, std::vector<Value *> operands) {
    try {
      return b.op(name, std::move(operands));
    } catch (const std::exception &) {
      return nullptr;
    }
  }

  Value *pattern(Builder &b, Op *op, Value *v) {
    const Type &t = v->type();
    bool tensor = t.isTensor();
    int64_t rank = tensor ? t.rank() : 0;
    switch (uniform(0, 23)) {
    case 0: return b.op("mul", {v, b.constantInt(1)});
    case 1: return b.op("mul", {b.constantFloat(1.0), v});
    case 2: return b.op("add", {v, b.constantInt(0)});
    case 3: return b.op("sub", {v, tensor ? b.op("zeros_like", {v}) : b.constantInt(0)});
    case 4: return b.op("neg", {b.op("neg", {v})});
    case 5:
      if (rank < 2) return nullptr;
      return b.op("transpose", {b.op("transpose", {v}, {{"dim0", 0}, {"dim1", -1}})},
                  {{"dim0", -1}, {"dim1", 0}});
    case 6: {
      std::vector<int64_t> dims(static_cast<size_t>(rank));
      std::iota(dims.begin(), dims.end(), 0);
      return b.op("permute", {v}, {{"dims", Attr(dims)}});
    }
    case 7: {
      if (!tensor || !isStaticShape(t.shape())) return nullptr;
      std::vector<int64_t> shape;
      for (const DimExpr &d : t.shape())
        shape.push_back(d.value());
      return b.op("reshape", {b.op("reshape", {v}, {{"shape", Attr(std::vector<int64_t>{-1})}})},
                  {{"shape", Attr(shape)}});
    }
    case 8:
      return b.op("squeeze", {b.op("unsqueeze", {v}, {{"dim", 0}})},
                  {{"dim", Attr(std::vector<int64_t>{0})}});
    case 9: {
      if (!tensor) return nullptr;
      DType wide = isFloating(t.dtype()) ? DType::F64 : DType::I64;
      if (t.dtype() == DType::Bool) wide = chance(0.5) ? DType::U8 : DType::F16;
      return b.op("cast", {b.op("cast", {v}, {{"dtype", wide}})}, {{"dtype", t.dtype()}});
    }
    case 10: return b.op("clone", {v});
    case 11: return b.op("contiguous", {v});
    case 12: return b.op("alias", {v});
    case 13: {
      if (!op->def().isPure() || op->numRegions() > 0) return nullptr;
      std::vector<Type> types;
      for (const auto &r : op->results())
        types.push_back(r->type());
      Op *copy = b.createWithTypes(op->name(), op->operands(), types, op->attrs());
      return copy->result(v->index());
    }
    case 14: {
      Op *iff = regionOp(b, b.constantBool(chance(0.5)), {t});
      Builder then(iff->region(0)), other(iff->region(1));
      then.createWithTypes("yield", {v}, {});
      Value *alt = chance(0.5) ? tryOp(other, "abs", {v}) : v;
      if (!alt || alt->type() != t) alt = v;
      other.createWithTypes("yield", {alt}, {});
      return iff->result(0);
    }
    case 15: {
      Value *trips = b.constantInt(uniform(0, 2));
      Op *loop = b.createWithTypes("loop", {trips, b.constantBool(true), v}, {t});
      Block *body = loop->region(0);
      body->addArgument(Type::intTy());
      Value *carried = body->addArgument(t);
      Builder in(body);
      Value *next = chance(0.5) ? tryOp(in, "neg", {carried}) : carried;
      if (!next || next->type() != t) next = carried;
      in.createWithTypes("yield", {in.constantBool(chance(0.8)), next}, {});
      return loop->result(0);
    }
    case 16: return b.op("pow", {v, b.constantInt(uniform(1, 2))});
    case 17: return b.op("pow", {v, b.constantFloat(chance(0.5) ? 0.5 : 1.0)});
    case 18: return b.op("add", {v, b.op("sub", {v, v})});
    case 19: return b.op("div", {v, b.constantFloat(chance(0.5) ? 4.0 : 1.0)});
    case 20: return b.op("add", {v, b.op("mul", {b.constantInt(2), b.constantInt(3)})});
    case 21: {
      if (!tensor) return nullptr;
      return b.op("expand", {v},
                  {{"shape", Attr(std::vector<int64_t>(static_cast<size_t>(rank), -1))}});
    }
    case 22:
      if (rank < 1) return nullptr;
      return b.op("slice", {v}, {{"dim", 0}, {"start", 0}, {"end", INT64_MAX}, {"step", 1}});
    default:
      if (!tensor) return nullptr;
      return b.op("mul", {v, b.op("size", {v}, {{"dim", 0}})});
    }
  }

  std::mt19937_64 rng_;
};

struct FuzzTally {
  int graphs = 0, changed = 0, compared = 0, rejected = 0;
  std::map<std::string, int64_t> stats; // summed pass statistics
};

/// Runs one pipeline (a pass name or several) over a random graph; returns a failure message.
std::string checkOne(const std::string &pipeline, uint64_t seed, bool inject, FuzzTally &tally) {
  testing::RandomCase c = testing::randomGraph(seed);
  if (inject) Injector(seed).run(*c.graph);
  if (auto errs = verifyGraph(*c.graph); !errs.empty())
    return "seed " + std::to_string(seed) + ": injected graph does not verify: " + errs[0] + "\n" +
           printGraph(*c.graph);
  std::string text0 = printGraph(*c.graph);
  auto fail = [&](const std::string &what, const std::string &after = "") {
    return "seed " + std::to_string(seed) + ", " + pipeline + ": " + what + "\n--- input:\n" +
           text0 + (after.empty() ? "" : "--- after:\n" + after);
  };
  ++tally.graphs;

  std::vector<RtValue> before;
  bool ran = true;
  try {
    before = interpret(*parseGraph(text0), deepCopy(c.inputs));
  } catch (const Error &) {
    ran = false; // the random inputs break an op's precondition (an index out of range...)
  }

  auto g = parseGraph(text0);
  passes::PassManager pm;
  pm.addPipeline(pipeline);
  bool changed = false;
  try {
    for (const auto &r : pm.run(*g)) {
      changed |= r.changed;
      for (const auto &[k, v] : r.stats)
        tally.stats[k] += v;
    }
  } catch (const std::exception &e) {
    return fail(std::string("pass threw: ") + e.what());
  }
  std::string text1 = printGraph(*g);
  if (auto errs = verifyGraph(*g); !errs.empty()) return fail("verifier: " + errs[0], text1);
  tally.changed += changed;

  // Each pass is idempotent; a pipeline of several need not be (a later pass can expose
  // work for an earlier one).
  if (passes::lookupPass(pipeline)) {
    bool again = false;
    for (const auto &r : pm.run(*g))
      again |= r.changed;
    std::string text2 = printGraph(*g);
    if (text2 != text1) return fail("not idempotent; second run gives:\n" + text2, text1);
    if (again) return fail("a second run reports a change but prints the same", text1);
  }

  if (!ran) {
    ++tally.rejected;
    return "";
  }
  std::vector<RtValue> after;
  try {
    after = interpret(*parseGraph(text1), deepCopy(c.inputs));
  } catch (const Error &e) {
    // Shape propagation pins symbols that broadcasting assumes equal to a size; inputs that
    // broke the assumption (but happened to broadcast as 1) are rejected now, by design.
    bool pinned =
        pipeline.find("shape-propagation") != std::string::npos || pipeline == "inference";
    if (pinned && e.kind() == ErrorKind::User) {
      ++tally.rejected;
      return "";
    }
    return fail(std::string("interpreter fails after the pass: ") + e.what(), text1);
  }
  if (after.size() != before.size()) return fail("different number of outputs", text1);
  Tolerance tol = toleranceFor(pipeline);
  for (size_t i = 0; i < after.size(); ++i)
    if (auto d = compare(before[i], after[i], tol); !d.empty())
      return fail("output " + std::to_string(i) + " differs: " + d, text1);
  ++tally.compared;
  return "";
}

void fuzzPipeline(const std::string &pipeline, uint64_t firstSeed, int count, bool inject) {
  // XJIT_PASS_FUZZ_COUNT=N runs N graphs per case instead (a longer, manual fuzzing run).
  if (const char *n = std::getenv("XJIT_PASS_FUZZ_COUNT")) count = std::atoi(n);
  FuzzTally tally;
  int failures = 0;
  for (int i = 0; i < count; ++i) {
    std::string failure = checkOne(pipeline, firstSeed + static_cast<uint64_t>(i), inject, tally);
    if (!failure.empty() && ++failures <= 3) ADD_FAILURE() << failure;
  }
  EXPECT_EQ(failures, 0) << pipeline;
  std::string stats;
  for (const auto &[k, v] : tally.stats)
    stats += " " + k + "=" + std::to_string(v);
  // The check means something only if the pass does change graphs and results are compared.
  EXPECT_GT(tally.compared, count / 3) << pipeline;
  std::printf("[ %s%s ] %d graphs, %d changed, %d compared, %d with rejected inputs;%s\n",
              pipeline.c_str(), inject ? " +redundancies" : "", tally.graphs, tally.changed,
              tally.compared, tally.rejected, stats.c_str());
}

class EveryPass : public ::testing::TestWithParam<std::string> {};

TEST_P(EveryPass, FuzzVerifiesIsIdempotentAndPreservesResults) {
  fuzzPipeline(GetParam(), 7000000, 300, /*inject=*/false);
}

TEST_P(EveryPass, FuzzWithInjectedRedundancies) {
  fuzzPipeline(GetParam(), 8000000, 300, /*inject=*/true);
}

std::vector<std::string> allPassNames() {
  std::vector<std::string> names;
  for (const PassInfo &p : passes::passTable())
    names.push_back(p.name);
  names.push_back("inference");
  return names;
}

INSTANTIATE_TEST_SUITE_P(Passes, EveryPass, ::testing::ValuesIn(allPassNames()),
                         [](const auto &info) {
                           std::string n = info.param;
                           for (char &ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

} // namespace
} // namespace xjit
