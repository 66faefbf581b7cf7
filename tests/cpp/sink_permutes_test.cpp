// sink-permutes on random permuted chains: what the frontend builds for an output eager lays out
// permuted, permute(contiguous(permute(y, P)), P^-1), over elementwise chains (broadcast
// operands, values read twice), reductions and permuted inputs. The pass must keep the reference
// interpreter's results bit for bit, verify, be idempotent, and remove most of the copies.
#include "value_test_util.h"

#include "xjit/ir/interpreter.h"
#include "xjit/ir/parser.h"
#include "xjit/ir/printer.h"
#include "xjit/ir/verifier.h"
#include "xjit/passes/pass.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <random>
#include <sstream>

namespace xjit {
namespace {

std::string shapeText(const std::vector<int64_t> &s) {
  std::string t = "f32[";
  for (size_t i = 0; i < s.size(); ++i)
    t += (i ? "," : "") + std::to_string(s[i]);
  return t + "]";
}

std::string listText(const std::vector<int64_t> &v) {
  std::string t = "[";
  for (size_t i = 0; i < v.size(); ++i)
    t += (i ? ", " : "") + std::to_string(v[i]);
  return t + "]";
}

std::vector<int64_t> permuted(const std::vector<int64_t> &s, const std::vector<int64_t> &p) {
  std::vector<int64_t> r;
  for (int64_t d : p)
    r.push_back(s[size_t(d)]);
  return r;
}

std::vector<int64_t> inverse(const std::vector<int64_t> &p) {
  std::vector<int64_t> r(p.size());
  for (size_t i = 0; i < p.size(); ++i)
    r[size_t(p[i])] = int64_t(i);
  return r;
}

/// A random graph: a permuted input, an elementwise chain (maybe a reduction in it), and the
/// frontend's permute/contiguous/permute around the returned value.
std::string randomChain(std::mt19937_64 &rng) {
  auto pick = [&](int n) { return int(rng() % uint64_t(n)); };
  const int rank = 2 + pick(3);
  std::vector<int64_t> sizes;
  for (int i = 0; i < rank; ++i)
    sizes.push_back(1 + pick(4));
  std::vector<int64_t> q(static_cast<size_t>(rank));
  std::iota(q.begin(), q.end(), 0);
  std::shuffle(q.begin(), q.end(), rng);
  // %x holds the values in memory order q; %v is the logical tensor (a permuted input).
  std::ostringstream body;
  const std::vector<int64_t> memory = permuted(sizes, q);
  body << "  %v = permute(%x) {dims = " << listText(inverse(q)) << "} : " << shapeText(sizes)
       << "\n";
  std::string cur = "%v", extraOut;
  std::vector<int64_t> shape = sizes, extraShape;
  const int steps = 1 + pick(4);
  const std::vector<int64_t> bShape(sizes.end() - 1, sizes.end()); // a trailing broadcast
  for (int k = 0; k < steps; ++k) {
    const std::string name = "%c" + std::to_string(k);
    switch (pick(6)) {
    case 0: body << "  " << name << " = sin(" << cur << ")"; break;
    case 1: body << "  " << name << " = neg(" << cur << ")"; break;
    case 2:
      if (shape.back() == bShape[0]) {
        body << "  " << name << " = add(" << cur << ", %b)";
        break;
      }
      [[fallthrough]];
    case 3: body << "  " << name << " = mul(" << cur << ", %two)"; break;
    case 4: body << "  " << name << " = exp(" << cur << ")"; break;
    default:
      if (shape.size() == sizes.size() && shape.size() > 2) {
        const int64_t dim = pick(int(shape.size()));
        const bool keep = pick(2) == 1;
        std::vector<int64_t> out;
        for (size_t d = 0; d < shape.size(); ++d)
          if (int64_t(d) != dim || keep) out.push_back(int64_t(d) == dim ? 1 : shape[d]);
        body << "  " << name << " = sum(" << cur << ") {dims = [" << dim
             << "], keepdim = " << (keep ? "true" : "false") << "} : " << shapeText(out) << "\n";
        shape = out;
        cur = name;
        continue;
      }
      body << "  " << name << " = relu(" << cur << ")";
    }
    body << " : " << shapeText(shape) << "\n";
    if (pick(6) == 0) { // read twice: it must not be computed twice
      extraOut = name;
      extraShape = shape;
    }
    cur = name;
  }
  // The physical order the frontend would ask for (over the rank a reduction left).
  std::vector<int64_t> pp(shape.size());
  std::iota(pp.begin(), pp.end(), 0);
  std::shuffle(pp.begin(), pp.end(), rng);
  const std::vector<int64_t> physical = permuted(shape, pp);
  body << "  %p = permute(" << cur << ") {dims = " << listText(pp) << "} : " << shapeText(physical)
       << "\n";
  body << "  %k = contiguous(%p) : " << shapeText(physical) << "\n";
  body << "  %y = permute(%k) {dims = " << listText(inverse(pp)) << "} : " << shapeText(shape)
       << "\n";
  std::string results = shapeText(shape);
  if (!extraOut.empty()) {
    body << "  return(%y, " << extraOut << ")\n";
    results += ", " + shapeText(extraShape);
  } else {
    body << "  return(%y)\n";
  }
  std::ostringstream g;
  g << "graph @chain(%x: " << shapeText(memory) << ", %b: " << shapeText(bShape) << ") -> ("
    << results << ") {\n  %two = constant() {value = 2} : int\n"
    << body.str() << "}\n";
  return g.str();
}

std::vector<RtValue> randomInputs(const Graph &g, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0, 1);
  std::vector<RtValue> out;
  for (size_t i = 0; i < g.numInputs(); ++i) {
    std::vector<int64_t> sizes;
    for (const DimExpr &d : g.input(i)->type().shape())
      sizes.push_back(d.value());
    Tensor x = Tensor::empty(DType::F32, sizes);
    for (int64_t k = 0; k < x.numel(); ++k)
      x.setDouble(k, normal(rng));
    out.emplace_back(x);
  }
  return out;
}

bool runSink(Graph &g) {
  passes::PassManager pm({.verifyEach = true});
  pm.addPipeline("sink-permutes");
  bool changed = false;
  for (const auto &r : pm.run(g))
    changed |= r.changed;
  return changed;
}

TEST(SinkPermutes, RandomChainsKeepValuesAndDropCopies) {
  std::mt19937_64 rng(20261122);
  int changed = 0, total = 0;
  for (int i = 0; i < 300; ++i) {
    const std::string text = randomChain(rng);
    std::unique_ptr<Graph> g = parseGraph(text);
    ASSERT_TRUE(verifyGraph(*g).empty()) << text;
    std::vector<RtValue> inputs = randomInputs(*g, uint64_t(i));
    std::vector<RtValue> before = interpret(*g, testutil::deepCopy(inputs));
    const bool did = runSink(*g);
    const std::string after = printGraph(*g);
    std::vector<RtValue> now = interpret(*parseGraph(after), testutil::deepCopy(inputs));
    ASSERT_EQ(before.size(), now.size());
    for (size_t k = 0; k < before.size(); ++k)
      ASSERT_TRUE(before[k].tensor().equals(now[k].tensor())) << "output " << k << " changed:\n"
                                                              << text << "\n->\n"
                                                              << after;
    EXPECT_FALSE(runSink(*g)) << "not idempotent:\n" << after;
    EXPECT_EQ(printGraph(*g), after);
    ++total;
    changed += did;
    if (did) {
      EXPECT_EQ(after.find("contiguous"), std::string::npos) << text << "\n->\n" << after;
    }
  }
  // Most chains hold no value read twice: their copies must go.
  EXPECT_GT(changed, total * 2 / 3) << changed << " of " << total;
  std::printf("[ sink-permutes ] %d of %d chains changed\n", changed, total);
}

} // namespace
} // namespace xjit
