// The semantic passes (freeze, erase-device-ops, functionalize, mixed-precision): the reference
// interpreter gives the same results before and after each pass (and, for functionalize, the
// same final contents of every graph input), on hand-written graphs and on random graphs with
// the patterns each pass rewrites injected; plus the device ops' kernels and bindParameters.
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
#include <random>
#include <set>

namespace xjit {
namespace {

// ---- running and comparing ----

using testutil::deepCopy;

/// "" if a and b are equal (within rtol/atol for floating tensors and floats), else why not.
std::string compare(const RtValue &a, const RtValue &b, double rtol = 0, double atol = 0) {
  if (a.isTensor() != b.isTensor() || a.isList() != b.isList()) return "different kinds";
  if (a.isTensor()) {
    const Tensor &x = a.tensor(), &y = b.tensor();
    if (x.dtype() != y.dtype() || x.sizes() != y.sizes()) return "different dtype or sizes";
    for (int64_t i = 0; i < x.numel(); ++i) {
      if (!isFloating(x.dtype())) {
        if (x.getInt(i) != y.getInt(i)) return "element " + std::to_string(i) + " differs";
        continue;
      }
      double p = x.getDouble(i), q = y.getDouble(i);
      if (p == q || (std::isnan(p) && std::isnan(q))) continue;
      if (!(std::fabs(p - q) <= atol + rtol * std::fabs(p)))
        return "element " + std::to_string(i) + ": " + std::to_string(p) + " vs " +
               std::to_string(q);
    }
    return "";
  }
  if (a.isList()) {
    if (a.list().size() != b.list().size()) return "different lengths";
    for (size_t i = 0; i < a.list().size(); ++i)
      if (auto d = compare(a.list()[i], b.list()[i], rtol, atol); !d.empty()) return d;
    return "";
  }
  if (a.isFloat() && b.isFloat()) {
    double p = a.toDouble(), q = b.toDouble();
    return p == q || (std::isnan(p) && std::isnan(q)) ||
                   std::fabs(p - q) <= atol + rtol * std::fabs(p)
               ? ""
               : "floats differ";
  }
  if (a.isInt() || a.isBool())
    return std::string(a.kindName()) == b.kindName() && a.toInt() == b.toInt() ? ""
                                                                               : "scalars differ";
  return a.isNone() == b.isNone() ? "" : "none vs value";
}

/// Runs `pipeline` with verification after each pass; returns whether it changed the graph.
bool runPasses(Graph &g, const std::string &pipeline) {
  passes::PassManager pm({.verifyEach = true});
  pm.addPipeline(pipeline);
  bool changed = false;
  for (const auto &r : pm.run(g))
    changed |= r.changed;
  return changed;
}

/// Statistic `stat` of the one pass in `pipeline` on g.
int64_t statOf(Graph &g, const std::string &pipeline, const std::string &stat) {
  passes::PassManager pm({.verifyEach = true});
  pm.addPipeline(pipeline);
  auto records = pm.run(g);
  auto it = records.at(0).stats.find(stat);
  return it == records.at(0).stats.end() ? 0 : it->second;
}

struct Tol {
  double rtol = 0, atol = 0;
};

/// The outcome of checking one graph against one pass.
enum class Outcome { Unchanged, Changed, InputsRejected };

/// Runs the pass on a copy of g (twice: idempotence), interprets both graphs on copies of
/// `inputs` and compares outputs and (for in-place semantics) the inputs after the run.
Outcome checkPass(const Graph &g, const std::vector<RtValue> &inputs, const std::string &pass,
                  Tol tol = {}, bool compareResults = true) {
  std::string before = printGraph(g);
  auto after = parseGraph(before);
  bool changed = runPasses(*after, pass);
  std::string text1 = printGraph(*after);
  EXPECT_TRUE(verifyGraph(*after).empty()) << text1;
  EXPECT_FALSE(runPasses(*after, pass)) << "second run changed:\n" << text1;
  EXPECT_EQ(printGraph(*after), text1) << "not idempotent";
  if (!compareResults) return changed ? Outcome::Changed : Outcome::Unchanged;

  std::vector<RtValue> in0 = deepCopy(inputs), in1 = deepCopy(inputs);
  std::vector<RtValue> out0, out1;
  try {
    out0 = interpret(*parseGraph(before), in0);
  } catch (const Error &e) {
    if (e.kind() != ErrorKind::User) ADD_FAILURE() << e.what() << "\n" << before;
    return Outcome::InputsRejected;
  }
  try {
    out1 = interpret(*after, in1);
  } catch (const std::exception &e) {
    ADD_FAILURE() << pass << ": interpreter fails after the pass: " << e.what() << "\n--- before:\n"
                  << before << "--- after:\n"
                  << text1;
    return Outcome::Changed;
  }
  EXPECT_EQ(out0.size(), out1.size());
  for (size_t i = 0; i < out0.size() && i < out1.size(); ++i) {
    std::string d = compare(out0[i], out1[i], tol.rtol, tol.atol);
    EXPECT_EQ(d, "") << pass << ": output " << i << "\n--- before:\n"
                     << before << "--- after:\n"
                     << text1;
    if (!d.empty()) break;
  }
  for (size_t i = 0; i < in0.size(); ++i) {
    std::string d = compare(in0[i], in1[i]);
    EXPECT_EQ(d, "") << pass << ": input " << i << " after the run\n--- before:\n"
                     << before << "--- after:\n"
                     << text1;
    if (!d.empty()) break;
  }
  return changed ? Outcome::Changed : Outcome::Unchanged;
}

Tensor randomTensor(DType dt, std::vector<int64_t> sizes, std::mt19937_64 &rng, double lo = -2,
                    double hi = 2) {
  Tensor t = Tensor::empty(dt, std::move(sizes));
  std::uniform_real_distribution<double> u(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (isFloating(dt))
      t.setDouble(i, u(rng));
    else
      t.setInt(i, static_cast<int64_t>(std::floor(u(rng))));
  }
  return t;
}

/// Random inputs for g's (static) input types.
std::vector<RtValue> randomInputs(const Graph &g, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<RtValue> in;
  for (size_t i = 0; i < g.numInputs(); ++i) {
    const Type &t = g.input(i)->type();
    if (t.kind() == TypeKind::Bool)
      in.emplace_back(true);
    else if (t.kind() == TypeKind::Float)
      in.emplace_back(1.5);
    else if (!t.isTensor())
      in.emplace_back(int64_t{2});
    if (!t.isTensor()) continue;
    std::vector<int64_t> sizes;
    for (const DimExpr &d : t.shape())
      sizes.push_back(d.value());
    in.emplace_back(randomTensor(t.dtype(), sizes, rng));
  }
  return in;
}

Outcome checkText(const std::string &text, const std::string &pass, Tol tol = {}) {
  auto g = parseGraph(text);
  EXPECT_TRUE(verifyGraph(*g).empty()) << text;
  return checkPass(*g, randomInputs(*g, 42), pass, tol);
}

size_t countOps(const Graph &g, const std::string &name) {
  size_t n = 0;
  g.walk([&](Op *op) { n += op->name() == name; });
  return n;
}

std::string denseOf(const Tensor &t) { return Attr(t).str(); }

// ---- freeze ----

const Tol kFoldTol{2e-5, 1e-5}; // folding reassociates the affine map: f32 rounding differs

/// conv2d [+bias] -> batch_norm with random constant parameters.
std::string convBnGraph(const std::string &conv, bool convBias, bool bnAffine, uint64_t seed) {
  std::mt19937_64 rng(seed);
  bool lin = conv == "linear";
  std::vector<int64_t> wsz = lin                ? std::vector<int64_t>{6, 5}
                             : conv == "conv1d" ? std::vector<int64_t>{6, 3, 3}
                             : conv == "conv2d" ? std::vector<int64_t>{6, 3, 3, 3}
                                                : std::vector<int64_t>{6, 3, 3, 3, 3};
  std::string xt = lin                ? "f32[4,5]"
                   : conv == "conv1d" ? "f32[2,3,8]"
                   : conv == "conv2d" ? "f32[2,3,6,6]"
                                      : "f32[2,3,4,4,4]";
  std::string yt = lin                ? "f32[4,6]"
                   : conv == "conv1d" ? "f32[2,6,8]"
                   : conv == "conv2d" ? "f32[2,6,6,6]"
                                      : "f32[2,6,4,4,4]";
  auto c = [&](const char *name, std::vector<int64_t> sz, double lo, double hi) {
    Tensor t = randomTensor(DType::F32, sz, rng, lo, hi);
    return std::string("  %") + name + " = constant() {value = " + denseOf(t) +
           "} : " + Type::tensor(DType::F32, Shape(sz.begin(), sz.end())).str() + "\n";
  };
  std::string s = "graph @g(%x: " + xt + ") -> (" + yt + ") {\n";
  s += c("w", wsz, -1, 1);
  if (convBias) s += c("b", {6}, -1, 1);
  s += c("mean", {6}, -0.5, 0.5) + c("var", {6}, 0.2, 2);
  if (bnAffine)
    s += c("gamma", {6}, 0.5, 1.5) + c("beta", {6}, -1, 1);
  else
    s += "  %none = constant() : none\n";
  std::string attrs = lin ? "" : " {padding = [1]}";
  s += "  %y = " + conv + "(%x, %w" + (convBias ? ", %b" : "") + ")" + attrs + " : " + yt + "\n";
  s += "  %z = batch_norm(%y, " + std::string(bnAffine ? "%gamma, %beta" : "%none, %none") +
       ", %mean, %var) {eps = 0.001} : " + yt + "\n  return(%z)\n}\n";
  return s;
}

TEST(Freeze, FoldsBatchNormIntoEveryConvAndLinear) {
  for (std::string conv : {"conv1d", "conv2d", "conv3d", "linear"})
    for (bool bias : {false, true})
      for (bool affine : {false, true}) {
        SCOPED_TRACE(conv + (bias ? " +bias" : "") + (affine ? " +affine" : ""));
        std::string text = convBnGraph(conv, bias, affine, 7);
        EXPECT_EQ(checkText(text, "freeze", kFoldTol), Outcome::Changed);
        auto g = parseGraph(text);
        EXPECT_EQ(statOf(*g, "freeze", "batch-norms-folded"), 1);
        EXPECT_EQ(countOps(*g, "batch_norm"), 0u);
        EXPECT_EQ(countOps(*g, conv), 1u);
        EXPECT_EQ(countOps(*g, "constant"), 2u) << printGraph(*g); // folded weight and bias
      }
}

TEST(Freeze, BatchNormWithoutConvBecomesMulAdd) {
  for (const char *dt : {"f32", "f64", "f16", "bf16"}) {
    SCOPED_TRACE(dt);
    std::string p = std::string(dt) == "f64" ? "f64" : "f32";
    std::string text = "graph @g(%x: " + std::string(dt) + "[2,3,4]) -> (" + dt +
                       "[2,3,4]) {\n"
                       "  %w = constant() {value = dense<" +
                       p + "[3]: [1.5, -0.5, 2.0]>} : " + p +
                       "[3]\n"
                       "  %b = constant() {value = dense<" +
                       p + "[3]: [0.25, 1.0, -3.0]>} : " + p +
                       "[3]\n"
                       "  %m = constant() {value = dense<" +
                       p + "[3]: [0.5, -1.0, 0.0]>} : " + p +
                       "[3]\n"
                       "  %v = constant() {value = dense<" +
                       p + "[3]: [4.0, 0.25, 1.0]>} : " + p +
                       "[3]\n"
                       "  %r = relu(%x) : " +
                       dt +
                       "[2,3,4]\n"
                       "  %y = batch_norm(%r, %w, %b, %m, %v) : " +
                       dt +
                       "[2,3,4]\n"
                       "  return(%y)\n}\n";
    bool low = std::string(dt) == "f16" || std::string(dt) == "bf16";
    EXPECT_EQ(checkText(text, "freeze", low ? Tol{1e-2, 1e-2} : kFoldTol), Outcome::Changed);
    auto g = parseGraph(text);
    EXPECT_EQ(statOf(*g, "freeze", "batch-norms-to-mul-add"), 1);
    EXPECT_EQ(countOps(*g, "mul"), 1u);
    EXPECT_EQ(countOps(*g, "add"), 1u);
    EXPECT_EQ(countOps(*g, "cast"), low ? 1u : 0u);
  }
}

TEST(Freeze, KeepsWhatItCannotFold) {
  // Parameters as inputs, training mode, a conv result used twice (folding would duplicate).
  const char *cases[] = {
      "graph @g(%x: f32[2,3,4], %m: f32[3], %v: f32[3]) -> (f32[2,3,4]) {\n"
      "  %n = constant() : none\n"
      "  %y = batch_norm(%x, %n, %n, %m, %v) : f32[2,3,4]\n  return(%y)\n}\n",
      "graph @g(%x: f32[2,3,4]) -> (f32[2,3,4]) {\n"
      "  %n = constant() : none\n"
      "  %m = constant() {value = dense<f32[3]: [0.0, 1.0, 2.0]>} : f32[3]\n"
      "  %y = batch_norm(%x, %n, %n, %m, %m) {training = true} : f32[2,3,4]\n  return(%y)\n}\n",
      "graph @g(%x: f32[2,3,4]) -> (f32[2,3,4]) {\n"
      "  %y = dropout(%x) {p = 0.5} : f32[2,3,4]\n  return(%y)\n}\n",
  };
  for (const char *text : cases)
    EXPECT_EQ(checkText(text, "freeze"), Outcome::Unchanged) << text;
  // A conv result used twice: folding would duplicate the conv, so the batch norm becomes a
  // mul+add instead.
  const char *twice =
      "graph @g(%x: f32[2,3,4]) -> (f32[2,3,4], f32[2,3,4]) {\n"
      "  %w = constant() {value = dense<f32[3,3,1]: [[[1.0], [0.5], [0.0]], [[2.0], [1.0], "
      "[-1.0]], [[3.0], [0.0], [0.25]]]>} : f32[3,3,1]\n"
      "  %m = constant() {value = dense<f32[3]: [0.0, 1.0, 2.0]>} : f32[3]\n"
      "  %n = constant() : none\n"
      "  %c = conv1d(%x, %w) : f32[2,3,4]\n"
      "  %y = batch_norm(%c, %n, %n, %m, %m) : f32[2,3,4]\n"
      "  return(%y, %c)\n}\n";
  EXPECT_EQ(checkText(twice, "freeze", kFoldTol), Outcome::Changed);
  auto g = parseGraph(twice);
  EXPECT_EQ(statOf(*g, "freeze", "batch-norms-to-mul-add"), 1);
}

TEST(Freeze, RemovesDropout) {
  const char *text = "graph @g(%x: f32[4,5]) -> (f32[4,5]) {\n"
                     "  %a = dropout(%x) {p = 0.3, train = false} : f32[4,5]\n"
                     "  %b = dropout(%a) {p = 0.0} : f32[4,5]\n"
                     "  %c = dropout(%b) {p = 0.5} : f32[4,5]\n"
                     "  return(%c)\n}\n";
  EXPECT_EQ(checkText(text, "freeze"), Outcome::Changed);
  auto g = parseGraph(text);
  EXPECT_EQ(statOf(*g, "freeze", "dropouts-removed"), 2); // train=true with p > 0 stays
  auto g2 = parseGraph(text);
  EXPECT_EQ(statOf(*g2, "freeze{eval-mode=true}", "dropouts-removed"), 3);
}

TEST(Freeze, BindParametersThenFold) {
  auto g = parseGraph("graph @g(%x: f32[1,2,3], %w: f32[2,2,1], %m: f32[2], %v: f32[2]) -> "
                      "(f32[1,2,3]) {\n"
                      "  %n = constant() : none\n"
                      "  %c = conv1d(%x, %w) : f32[1,2,3]\n"
                      "  %y = batch_norm(%c, %n, %n, %m, %v) : f32[1,2,3]\n"
                      "  return(%y)\n}\n");
  std::mt19937_64 rng(3);
  Tensor x = randomTensor(DType::F32, {1, 2, 3}, rng), w = randomTensor(DType::F32, {2, 2, 1}, rng),
         m = randomTensor(DType::F32, {2}, rng), v = randomTensor(DType::F32, {2}, rng, 0.5, 2);
  auto expected = interpret(*g, {x, w, m, v});
  passes::bindParameters(*g, {{1, w}, {2, m}, {3, v}});
  ASSERT_EQ(g->numInputs(), 1u);
  EXPECT_TRUE(verifyGraph(*g).empty()) << printGraph(*g);
  EXPECT_EQ(g->input(0)->name(), "x");
  EXPECT_TRUE(runPasses(*g, "freeze"));
  EXPECT_EQ(countOps(*g, "batch_norm"), 0u);
  EXPECT_EQ(compare(expected[0], interpret(*g, {x})[0], kFoldTol.rtol, kFoldTol.atol), "");

  auto bad = parseGraph("graph @g(%x: f32[2]) -> (f32[2]) {\n  return(%x)\n}\n");
  EXPECT_THROW(passes::bindParameters(*bad, {{0, Tensor::empty(DType::F32, {3})}}), Error);
  EXPECT_THROW(passes::bindParameters(*bad, {{1, Tensor::empty(DType::F32, {2})}}), Error);
}

// ---- device ops and erase-device-ops ----

TEST(DeviceOps, InferenceAndSingleProcessKernels) {
  auto g = parseGraph(
      "graph @g(%x: f32[4,2]) -> (f32[4,2]@cuda:1, f16[4,2], f32[4,2], f32[4,2], f32[2,2], "
      "f32[4,2]) {\n"
      "  %a = to_device(%x) {device = \"cuda:1\"} : f32[4,2]@cuda:1\n"
      "  %b = to_copy(%x) {dtype = f16} : f16[4,2]\n"
      "  %c = all_reduce(%x) {op = \"max\"} : f32[4,2]\n"
      "  %d = all_gather(%x) {gather_dim = 1} : f32[4,2]\n"
      "  %e = reduce_scatter(%x) {group_size = 1} : f32[4,2]\n"
      "  %f = broadcast(%x) : f32[4,2]\n"
      "  barrier()\n"
      "  %w = wait_tensor(%f) : f32[4,2]\n"
      "  %s = slice(%w) {dim = 0, start = 0, end = 2} : f32[2,2]\n"
      "  return(%a, %b, %c, %d, %s, %e)\n}\n");
  ASSERT_TRUE(verifyGraph(*g).empty()) << verifyGraph(*g)[0];
  std::mt19937_64 rng(1);
  Tensor x = randomTensor(DType::F32, {4, 2}, rng);
  auto out = interpret(*g, {x});
  EXPECT_EQ(compare(out[0], RtValue(x)), "");
  EXPECT_EQ(compare(out[1], RtValue(x.to(DType::F16))), "");
  for (size_t i : {2, 3, 5}) {
    EXPECT_EQ(compare(out[i], RtValue(x)), "");
    EXPECT_NE(out[i].tensor().storage(), x.storage()) << "collectives return fresh tensors";
  }

  const char *invalid[] = {
      "%a = to_device(%x) {device = \"cuda:x\"} : f32[4,2]",
      "%a = to_device(%x) {device = \"\"} : f32[4,2]",
      "%a = all_reduce(%x) {op = \"mean\"} : f32[4,2]",
      "%a = all_reduce(%x) {op = \"band\"} : f32[4,2]",
      "%a = all_gather(%x) {group_size = 0} : f32[4,2]",
      "%a = reduce_scatter(%x) {group_size = 3} : f32[4,2]",
      "%a = broadcast(%x) {src = 2, group_size = 2} : f32[4,2]",
  };
  for (const char *line : invalid) {
    auto bad = parseGraph("graph @g(%x: f32[4,2]) -> (f32[4,2]) {\n  " + std::string(line) +
                          "\n  return(%x)\n}\n");
    EXPECT_FALSE(verifyGraph(*bad).empty()) << line;
  }
  // A group of two: shapes follow, but the single-process interpreter refuses to run it.
  auto two = parseGraph("graph @g(%x: f32[4,2]) -> (f32[8,2], f32[2,2]) {\n"
                        "  %a = all_gather(%x) {group_size = 2} : f32[8,2]\n"
                        "  %b = reduce_scatter(%x) {group_size = 2} : f32[2,2]\n"
                        "  return(%a, %b)\n}\n");
  ASSERT_TRUE(verifyGraph(*two).empty()) << verifyGraph(*two)[0];
  try {
    interpret(*two, {x});
    ADD_FAILURE() << "expected an error";
  } catch (const Error &e) {
    EXPECT_EQ(e.kind(), ErrorKind::User);
    EXPECT_NE(std::string(e.what()).find("single-process"), std::string::npos) << e.what();
  }
}

TEST(EraseDeviceOps, RemovesNoOpTransfersAndCollectives) {
  const char *text =
      "graph @g(%x: f32[3,2]) -> (f32[3,2], f32[3,2], f32[3,2]@cuda:0, f16[3,2], f32[3,2]) {\n"
      "  %a = to_device(%x) {device = \"cpu\"} : f32[3,2]\n"
      "  %b = to_device(%a) {device = \"cuda\"} : f32[3,2]@cuda\n"
      "  %c = to_device(%b) {device = \"cpu\"} : f32[3,2]\n"
      "  %d = to_device(%x) {device = \"cuda:0\"} : f32[3,2]@cuda:0\n"
      "  %e = to_copy(%c) {dtype = f16} : f16[3,2]\n"
      "  %f = all_reduce(%c) : f32[3,2]\n"
      "  %w = wait_tensor(%f) : f32[3,2]\n"
      "  barrier()\n"
      "  %h = to_copy(%w) : f32[3,2]\n"
      "  return(%c, %w, %d, %e, %h)\n}\n";
  EXPECT_EQ(checkText(text, "erase-device-ops"), Outcome::Changed);
  auto g = parseGraph(text);
  ASSERT_TRUE(runPasses(*g, "erase-device-ops"));
  EXPECT_EQ(countOps(*g, "to_device"), 1u) << printGraph(*g); // the real transfer to cuda:0
  EXPECT_EQ(countOps(*g, "all_reduce") + countOps(*g, "wait_tensor") + countOps(*g, "barrier"), 0u);
  EXPECT_EQ(countOps(*g, "to_copy"), 0u);
  EXPECT_EQ(countOps(*g, "cast"), 1u);
  EXPECT_EQ(countOps(*g, "clone"), 1u);
  EXPECT_EQ(g->outputs()[0], g->input(0));
}

TEST(EraseDeviceOps, NormalizesTheTargetsDefaultDevice) {
  const char *text = "graph @g(%x: f32[2]@cuda) -> (f32[2]@cuda:0, f32[2]@cuda) {\n"
                     "  %a = to_device(%x) {device = \"cuda:0\"} : f32[2]@cuda:0\n"
                     "  %b = neg(%a) : f32[2]@cuda:0\n"
                     "  return(%b, %x)\n}\n";
  auto g = parseGraph(text);
  EXPECT_FALSE(runPasses(*g, "erase-device-ops")); // target cpu: cuda and cuda:0 may differ
  auto h = parseGraph(text);
  EXPECT_TRUE(runPasses(*h, "erase-device-ops{target=cuda:0}"));
  EXPECT_EQ(countOps(*h, "to_device"), 0u);
  EXPECT_EQ(h->input(0)->type().str(), "f32[2]@cuda:0");
  EXPECT_EQ(checkText(text, "erase-device-ops{target=cuda:0}"), Outcome::Changed);
  auto bad = parseGraph(text);
  EXPECT_THROW(runPasses(*bad, "erase-device-ops{target=cuda:x}"), Error);
}

TEST(EraseDeviceOps, KeepsCollectivesOfLargerGroupsAndCopiesThatAreWritten) {
  const char *text = "graph @g(%x: f32[4]) -> (f32[8], f32[4]) {\n"
                     "  %a = all_gather(%x) {group_size = 2} : f32[8]\n"
                     "  %w = wait_tensor(%a) : f32[8]\n"
                     "  %b = all_reduce(%x) : f32[4]\n"
                     "  %c = fill_(%b) {value = 1.0} : f32[4]\n"
                     "  return(%w, %x)\n}\n";
  auto g = parseGraph(text);
  ASSERT_TRUE(runPasses(*g, "erase-device-ops"));
  EXPECT_EQ(countOps(*g, "all_gather"), 1u);
  EXPECT_EQ(countOps(*g, "wait_tensor"), 1u);
  EXPECT_EQ(countOps(*g, "all_reduce"), 0u);
  EXPECT_EQ(countOps(*g, "clone"), 1u) << "the fill_ must not write %x";
}

// ---- functionalize ----

struct FunctionalizeCase {
  const char *name, *text;
  bool changes;
};

const FunctionalizeCase kFunctionalizeCases[] = {
    {"fill fresh", R"(graph @g(%x: f32[3,4]) -> (f32[3,4]) {
  %a = add(%x, %x) : f32[3,4]
  %b = fill_(%a) {value = 2.5} : f32[3,4]
  %c = mul(%a, %x) : f32[3,4]
  return(%c)
})",
     true},
    {"write input", R"(graph @g(%x: f32[3,4], %y: f32[3,4]) -> (f32[3,4], f32[3,4]) {
  %a = copy_(%x, %y) : f32[3,4]
  %b = neg(%x) : f32[3,4]
  return(%b, %x)
})",
     true},
    {"slice of input", R"(graph @g(%x: f32[4,3], %v: f32[3]) -> (f32[4,3]) {
  %s = select(%x) {dim = 0, index = 2} : f32[3]
  %c = copy_(%s, %v) : f32[3]
  %t = transpose(%x) {dim0 = 0, dim1 = 1} : f32[3,4]
  %f = fill_(%t) {value = -1} : f32[3,4]
  %r = mul(%x, %x) : f32[4,3]
  return(%r)
})",
     true},
    {"view chain", R"(graph @g(%x: f32[2,3,4], %v: f32[2]) -> (f32[2,3,4], f32[4,2], f32[6,4]) {
  %e = exp(%x) : f32[2,3,4]
  %p = permute(%e) {dims = [2, 0, 1]} : f32[4,2,3]
  %q = select(%p) {dim = 2, index = 1} : f32[4,2]
  %d = diagonal(%q) : f32[2]
  %c = copy_(%d, %v) : f32[2]
  %u = view(%e) {shape = [6, 4]} : f32[6,4]
  %f = fill_(%u) {value = 0.5} : f32[6,4]
  %k = narrow(%u) {dim = 0, start = 1, length = 2} : f32[2,4]
  %w = mul(%k, %k) : f32[2,4]
  %z = copy_(%k, %w) : f32[2,4]
  return(%e, %q, %u)
})",
     true},
    {"index_put and scalar fill",
     R"(graph @g(%x: f32[5], %i: i64[2], %v: f32[2], %n: int) -> (f32[5]) {
  %a = index_put_(%x, %v, %i) {accumulate = true} : f32[5]
  %s = slice(%x) {dim = 0, start = 3, end = 5} : f32[2]
  %f = fill_(%s, %n) : f32[2]
  return(%a)
})",
     true},
    {"writes inside an if", R"(graph @g(%x: f32[3], %c: bool) -> (f32[3], f32[3]) {
  %r = if(%c) : f32[3] {
    %a = exp(%x) : f32[3]
    %f = fill_(%a) {value = 1.0} : f32[3]
    yield(%x)
  } {
    yield(%x)
  }
  %y = copy_(%x, %r) : f32[3]
  %z = neg(%r) : f32[3]
  return(%z, %x)
})",
     false}, // %r aliases %x, then %x is written: refused
    {"write to an outer value in a region", R"(graph @g(%x: f32[3], %c: bool) -> (f32[3]) {
  %a = exp(%x) : f32[3]
  %r = if(%c) : f32[3] {
    %f = fill_(%a) {value = 1.0} : f32[3]
    yield(%a)
  } {
    yield(%a)
  }
  return(%r)
})",
     false},
    {"accumulating in a loop body", R"(graph @g(%x: f32[2,3]) -> (f32[2,3]) {
  %n = constant() {value = 3} : int
  %t = constant() {value = true} : bool
  %l = loop(%n, %t, %x) : f32[2,3] {
  ^(%i: int, %acc: f32[2,3]):
    %a = clone(%acc) : f32[2,3]
    %r = select(%a) {dim = 0, index = 1} : f32[3]
    %s = mul(%r, %r) : f32[3]
    %c = copy_(%r, %s) : f32[3]
    yield(%t, %a)
  }
  return(%l)
})",
     true},
    {"yield of an outer written value", R"(graph @g(%x: f32[3], %c: bool) -> (f32[3]) {
  %a = exp(%x) : f32[3]
  %f = fill_(%a) {value = 1.0} : f32[3]
  %r = if(%c) : f32[3] {
    yield(%a)
  } {
    yield(%x)
  }
  %g = fill_(%a) {value = 2.0} : f32[3]
  return(%r)
})",
     false}, // %r aliases %a, which is written after the if
    {"reshape of an input", R"(graph @g(%x: f32[2,3]) -> (f32[2,3]) {
  %v = reshape(%x) {shape = [6]} : f32[6]
  %f = fill_(%v) {value = 1.0} : f32[6]
  return(%x)
})",
     false}, // strides unknown: reshape may be a copy
    {"reshape of a fresh tensor", R"(graph @g(%x: f32[2,3]) -> (f32[2,3], f32[3,2]) {
  %a = neg(%x) : f32[2,3]
  %v = reshape(%a) {shape = [6]} : f32[6]
  %s = slice(%v) {dim = 0, start = 1, end = 4} : f32[3]
  %f = fill_(%s) {value = 7.0} : f32[3]
  %t = t(%a) : f32[3,2]
  return(%a, %t)
})",
     true},
    {"reads in a loop after a write", R"(graph @g(%x: f32[3]) -> (f32[3]) {
  %a = exp(%x) : f32[3]
  %s = slice(%a) {dim = 0, start = 0, end = 2} : f32[2]
  %f = fill_(%s) {value = 1.0} : f32[2]
  %n = constant() {value = 2} : int
  %t = constant() {value = true} : bool
  %l = loop(%n, %t, %x) : f32[3] {
  ^(%i: int, %acc: f32[3]):
    %m = mul(%acc, %a) : f32[3]
    yield(%t, %m)
  }
  return(%l)
})",
     true},
    {"write-back already there", R"(graph @g(%x: f32[3], %y: f32[3]) -> (f32[3]) {
  %a = mul(%y, %y) : f32[3]
  %c = copy_(%x, %a) : f32[3]
  return(%c)
})",
     false},
    {"swap inputs", R"(graph @g(%x: f32[3], %y: f32[3]) -> (f32[3], f32[3], f32[3]) {
  %t = clone(%x) : f32[3]
  %a = copy_(%x, %y) : f32[3]
  %b = copy_(%y, %t) : f32[3]
  %s = sub(%x, %y) : f32[3]
  return(%x, %y, %s)
})",
     true},
    {"final write-backs only", R"(graph @g(%x: f32[3], %y: f32[3]) -> (f32[3], f32[3]) {
  %t = clone(%x) : f32[3]
  %a = copy_(%x, %y) : f32[3]
  %b = copy_(%y, %t) : f32[3]
  return(%x, %y)
})",
     false},
    {"constant written", R"(graph @g(%x: f32[2]) -> (f32[2]) {
  %k = constant() {value = dense<f32[2]: [1.0, 2.0]>} : f32[2]
  %c = copy_(%k, %x) : f32[2]
  %s = add(%k, %x) : f32[2]
  return(%s)
})",
     true},
};

TEST(Functionalize, HandWrittenCases) {
  for (const auto &c : kFunctionalizeCases) {
    SCOPED_TRACE(c.name);
    Outcome o = checkText(c.text, "functionalize");
    EXPECT_EQ(o, c.changes ? Outcome::Changed : Outcome::Unchanged);
    if (!c.changes) continue;
    auto g = parseGraph(c.text);
    runPasses(*g, "functionalize");
    // What remains in place is one write-back per written input, just before return.
    std::set<Value *> writtenInputs;
    g->walk([&](Op *op) {
      if (!op->def().has(kInPlace)) return;
      EXPECT_EQ(op->name(), "copy_") << printGraph(*g);
      EXPECT_TRUE(op->operand(0)->isBlockArgument() && op->parentBlock() == g->body());
      EXPECT_TRUE(writtenInputs.insert(op->operand(0)).second);
    });
  }
}

TEST(Functionalize, ReturnedInputAliasesTheCallersTensor) {
  auto g = parseGraph(kFunctionalizeCases[1].text);
  ASSERT_TRUE(runPasses(*g, "functionalize"));
  std::mt19937_64 rng(5);
  Tensor x = randomTensor(DType::F32, {3, 4}, rng), y = randomTensor(DType::F32, {3, 4}, rng);
  auto out = interpret(*g, {x, y});
  EXPECT_EQ(out[1].tensor().storage(), x.storage());
  EXPECT_TRUE(x.equals(y));
}

// ---- mixed precision ----

TEST(MixedPrecision, LowersComputeOpsWithTheFewestCasts) {
  const char *text =
      R"(graph @g(%x: f32[4,8], %w1: f32[16,8], %w2: f32[8,16], %b: f32[8]) -> (f32[4,8]) {
  %h = linear(%x, %w1) : f32[4,16]
  %t = t(%w2) : f32[16,8]
  %r = matmul(%h, %t) : f32[4,8]
  %s = softmax(%r) {dim = 1} : f32[4,8]
  %y = addmm(%b, %h, %t) : f32[4,8]
  %a = add(%y, %s) : f32[4,8]
  %z = layer_norm(%a) {normalized_shape = [8]} : f32[4,8]
  return(%z)
})";
  auto g = parseGraph(text);
  ASSERT_TRUE(verifyGraph(*g).empty()) << verifyGraph(*g)[0];
  EXPECT_EQ(checkText(text, "mixed-precision", {0.1, 0.05}), Outcome::Changed);
  ASSERT_TRUE(runPasses(*g, "mixed-precision"));
  // x, w1, t(w2) (once for both users) and b to bf16; h stays bf16 between its two compute
  // users; the matmul result (for softmax) and the addmm result (for add) back to f32.
  EXPECT_EQ(countOps(*g, "cast"), 6u) << printGraph(*g);
  size_t low = 0;
  g->walk([&](Op *op) {
    if (op->name() == "softmax" || op->name() == "layer_norm" || op->name() == "add") {
      EXPECT_EQ(op->operand(0)->type().dtype(), DType::F32);
    }
    if (op->name() == "linear" || op->name() == "matmul" || op->name() == "addmm")
      low += op->result()->type().dtype() == DType::BF16;
  });
  EXPECT_EQ(low, 3u);
  auto h = parseGraph(text);
  ASSERT_TRUE(runPasses(*h, "mixed-precision{dtype=f16}"));
  EXPECT_EQ(countOps(*h, "cast"), 6u);
  auto bad = parseGraph(text);
  EXPECT_THROW(runPasses(*bad, "mixed-precision{dtype=f64}"), Error);
}

TEST(MixedPrecision, LeavesF64AndLowPrecisionAlone) {
  const char *text = R"(graph @g(%x: f64[2,2], %y: bf16[2,2]) -> (f64[2,2], bf16[2,2]) {
  %a = mm(%x, %x) : f64[2,2]
  %b = mm(%y, %y) : bf16[2,2]
  return(%a, %b)
})";
  EXPECT_EQ(checkText(text, "mixed-precision"), Outcome::Unchanged);
}

// ---- random graphs ----

/// Splices the patterns a pass rewrites into a random graph, after random tensor values.
class PatternInjector {
public:
  PatternInjector(uint64_t seed, std::string pass) : rng_(seed), pass_(std::move(pass)) {}

  void run(Graph &g) {
    std::vector<Value *> values;
    for (size_t i = 0; i < g.numInputs(); ++i)
      values.push_back(g.input(i));
    for (Op *op : *g.body())
      if (!op->def().has(kTerminator))
        for (const auto &r : op->results())
          values.push_back(r.get());
    for (Value *v : values) {
      if (!v->type().isTensor() || !isStaticShape(v->type().shape()) || !chance(0.4)) continue;
      Op *at = v->isBlockArgument() ? g.body()->front() : v->definingOp()->next();
      Builder b(g.body(), at);
      try {
        Value *w = inject(b, v);
        if (w && w != v && w->type() == v->type() && !v->isBlockArgument()) {
          // Later users read the injected expression (the writes of functionalize cases act by
          // themselves).
          std::vector<Use> uses = v->uses();
          for (const Use &u : uses)
            if (u.user != w->definingOp() && isAfter(u.user, w->definingOp()))
              u.user->setOperand(u.index, w);
        }
      } catch (const std::exception &) {
        // The pattern does not fit v; its ops stay as dead code.
      }
    }
  }

private:
  bool chance(double p) { return std::bernoulli_distribution(p)(rng_); }
  int uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

  static bool isAfter(const Op *user, const Op *def) {
    while (user->parentBlock() != def->parentBlock())
      user = user->parentOp();
    for (const Op *o = def->next(); o; o = o->next())
      if (o == user) return true;
    return false;
  }

  Value *constant(Builder &b, DType dt, std::vector<int64_t> sizes, double lo, double hi) {
    return b.constantTensor(randomTensor(dt, std::move(sizes), rng_, lo, hi));
  }

  Value *inject(Builder &b, Value *v) {
    const Type &t = v->type();
    DType dt = t.dtype();
    std::vector<int64_t> sizes;
    for (const DimExpr &d : t.shape())
      sizes.push_back(d.value());
    if (pass_ == "freeze") {
      if (!isFloating(dt) || t.rank() < 2 || t.rank() > 5) return nullptr;
      DType pd = dt == DType::F64 ? DType::F64 : DType::F32;
      int64_t c = sizes[1];
      Value *x = v;
      if (t.rank() >= 3 && t.rank() <= 5 && chance(0.5) && dt != DType::F16 && dt != DType::BF16) {
        std::vector<int64_t> w = {c, c};
        for (int64_t i = 2; i < t.rank(); ++i)
          w.push_back(1);
        std::string conv = "conv" + std::to_string(t.rank() - 2) + "d";
        x = b.op(conv, {v, constant(b, dt, w, -1, 1), constant(b, dt, {c}, -1, 1)});
      }
      Value *none = b.createWithTypes("constant", {}, {Type::none()})->result();
      Value *y = b.op("batch_norm", {x, chance(0.5) ? constant(b, pd, {c}, 0.5, 1.5) : none,
                                     chance(0.5) ? constant(b, pd, {c}, -1, 1) : none,
                                     constant(b, pd, {c}, -1, 1), constant(b, pd, {c}, 0.5, 2)});
      return b.op("dropout", {y}, {{"train", false}, {"p", 0.25}});
    }
    if (pass_ == "erase-device-ops") {
      switch (uniform(0, 3)) {
      case 0:
        return b.op("to_device", {b.op("to_device", {v}, {{"device", "cuda:0"}})},
                    {{"device", "cpu"}});
      case 1: return b.op("to_copy", {v}, {{"dtype", dt}});
      case 2:
        return b.op("wait_tensor",
                    {b.op("all_reduce", {v}, {{"op", isFloating(dt) ? "avg" : "max"}})});
      default: return b.op("broadcast", {b.op("to_device", {v}, {{"device", "cpu"}})});
      }
    }
    if (pass_ == "mixed-precision") { // compute ops (left dead) on f32 values
      if (dt != DType::F32 || t.rank() < 2) return nullptr;
      Value *p = b.op("transpose", {v}, {{"dim0", -1}, {"dim1", -2}});
      Value *m = b.op("matmul", {v, p});
      return b.op("softmax", {b.op("matmul", {m, v})}, {{"dim", -1}});
    }
    // functionalize: a write to v, a view of it, or a copy of it.
    Value *target = v;
    if (t.rank() >= 1 && sizes[0] > 1 && chance(0.5))
      target = b.op("slice", {v}, {{"dim", 0}, {"start", 1}, {"end", sizes[0]}});
    else if (t.rank() >= 2 && chance(0.3))
      target = b.op("transpose", {v}, {{"dim0", 0}, {"dim1", 1}});
    else if (t.rank() >= 1 && chance(0.3))
      target = b.op("select", {v}, {{"dim", -1}, {"index", 0}});
    switch (uniform(0, 2)) {
    case 0: b.op("fill_", {target}, {{"value", 3}}); break;
    case 1:
      b.op("copy_",
           {target,
            b.op("neg", {target->type().dtype() == DType::Bool ? target : b.op("abs", {target})})});
      break;
    default: b.op("copy_", {target, b.op("ones_like", {target})}); break;
    }
    return nullptr;
  }

  std::mt19937_64 rng_;
  std::string pass_;
};

struct Tally {
  int graphs = 0, changed = 0, compared = 0;
};

void fuzzPass(const std::string &pass, uint64_t firstSeed, int count, Tol tol, double minChanged) {
  Tally tally;
  for (int i = 0; i < count; ++i) {
    uint64_t seed = firstSeed + static_cast<uint64_t>(i);
    testing::RandomCase c = testing::randomGraph(seed);
    PatternInjector(seed, pass).run(*c.graph);
    if (!verifyGraph(*c.graph).empty()) continue; // an injection broke dominance: skip
    ++tally.graphs;
    SCOPED_TRACE("seed " + std::to_string(seed));
    bool compare = pass != "mixed-precision";
    Outcome o = checkPass(*c.graph, c.inputs, pass, tol, compare);
    tally.changed += o == Outcome::Changed;
    tally.compared += o != Outcome::InputsRejected;
    if (::testing::Test::HasFailure()) break;
  }
  std::printf("[ %s ] %d graphs, %d changed, %d compared\n", pass.c_str(), tally.graphs,
              tally.changed, tally.compared);
  // The check means something only if the pass does rewrite the graphs.
  EXPECT_GT(tally.changed, minChanged * tally.graphs) << pass;
}

TEST(SemanticFuzz, Freeze) { fuzzPass("freeze", 9100000, 500, {1e-4, 1e-4}, 0.2); }
TEST(SemanticFuzz, EraseDeviceOps) { fuzzPass("erase-device-ops", 9200000, 500, {}, 0.4); }
TEST(SemanticFuzz, Functionalize) { fuzzPass("functionalize", 9300000, 1000, {}, 0.25); }
TEST(SemanticFuzz, MixedPrecisionVerifiesAndIsIdempotent) {
  fuzzPass("mixed-precision", 9400000, 500, {}, 0.1);
}

} // namespace
} // namespace xjit
