// The fuse pass's groups through the CPU Target: graphs spelled the way a tracer captures them
// (decomposed softmax, layer norm, rms norm, variance, a gelu chain, reductions over other
// axes) are fused, and every `fusion` op must be accepted by the CPU target (whyNotSupported
// "") and compute what the interpreter computes for its region. This is the contract between
// src/passes/fuse.cpp (the group shapes, docs/passes.md) and the backend's lowering.
// Tolerances as in backend_reduction_test.cpp (f32: 2e-5 relative to the row's magnitude).
#include "xjit/backend/target.h"
#include "xjit/ir/interpreter.h"
#include "xjit/ir/parser.h"
#include "xjit/ir/printer.h"
#include "xjit/passes/pass.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace xjit::backend {
namespace {

Tensor randomTensor(DType d, const std::vector<int64_t> &sizes, std::mt19937 &rng) {
  Tensor t = Tensor::empty(d, sizes);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.setDouble(i, std::uniform_real_distribution<double>(-3, 3)(rng));
  return t;
}

/// Fuses `text` and checks every fusion op; returns "" or the first problem. `groups` counts the
/// fusion ops of each kind seen.
std::string fuseAndCheck(const std::string &text, std::map<std::string, int> &groups) {
  auto g = parseGraph(text);
  passes::PassManager pm;
  pm.addPipeline("fuse");
  pm.run(*g);
  auto target = makeCpuTarget();
  std::mt19937 rng(11);
  for (Op *op : *g->body()) {
    if (op->name() != "fusion") continue;
    const Attr *kind = op->attrOrNull("kind");
    std::string k = kind ? kind->asStr() : "?";
    ++groups[k];
    if (k == "epilogue") continue; // library calls (oneDNN)
    std::string why = target->whyNotSupported(*op);
    if (!why.empty()) return "not supported: " + why + "\n" + printGraph(*g);
    std::vector<RtValue> in;
    double rowSize = 1;
    for (size_t i = 0; i < op->numOperands(); ++i) {
      const Type &t = op->operand(i)->type();
      if (!t.isTensor()) { // the graph's scalar constants (exponents, epsilons)
        const Op *def = op->operand(i)->definingOp();
        const Attr *v = def && def->name() == "constant" ? def->attrOrNull("value") : nullptr;
        if (!v) return "a scalar fusion input that is not a constant";
        in.emplace_back(v->kind() == AttrKind::Float ? RtValue(v->asFloat()) : RtValue(v->asInt()));
        continue;
      }
      std::vector<int64_t> sizes;
      for (const DimExpr &d : t.shape())
        sizes.push_back(d.isStatic() ? d.value() : 13);
      Tensor x = randomTensor(t.dtype(), sizes, rng);
      rowSize = std::max(rowSize, std::sqrt(double(x.numel())));
      in.emplace_back(x);
    }
    std::vector<RtValue> ref = interpretBlock(*op->region(0), in);
    std::vector<RtValue> got = target->compile(*op)->run(in);
    for (size_t o = 0; o < ref.size(); ++o) {
      const Tensor &r = ref[o].tensor(), &c = got[o].tensor();
      for (int64_t i = 0; i < r.numel(); ++i) {
        double x = c.getDouble(i), y = r.getDouble(i);
        if (!(x == y || (std::isnan(x) && std::isnan(y)) ||
              std::abs(x - y) <= 2e-5 * (std::abs(y) + rowSize)))
          return op->describe() + " output " + std::to_string(o) + " element " + std::to_string(i) +
                 ": compiled " + std::to_string(x) + ", reference " + std::to_string(y) + "\n" +
                 printGraph(*g);
      }
    }
  }
  return "";
}

TEST(BackendFusedGroups, TracerSpelledGraphsCompileAndMatch) {
  const char *graphs[] = {
      R"(graph @softmax(%x: f32[s0,37]) -> (f32[s0,37]) {
  %m = amax(%x) {dims = [-1], keepdim = true} : f32[s0,1]
  %s = sub(%x, %m) : f32[s0,37]
  %e = exp(%s) : f32[s0,37]
  %z = sum(%e) {dims = [-1], keepdim = true} : f32[s0,1]
  %y = div(%e, %z) : f32[s0,37]
  return(%y)
})",
      R"(graph @layer_norm(%x: f32[2,8,32], %r: f32[2,8,32], %w: f32[32], %b: f32[32]) -> (f32[2,8,32]) {
  %h = add(%x, %r) : f32[2,8,32]
  %mu = mean(%h) {dims = [-1], keepdim = true} : f32[2,8,1]
  %d = sub(%h, %mu) : f32[2,8,32]
  %sq = mul(%d, %d) : f32[2,8,32]
  %v = mean(%sq) {dims = [-1], keepdim = true} : f32[2,8,1]
  %eps = constant() {value = 1e-12} : float
  %ve = add(%v, %eps) : f32[2,8,1]
  %rs = rsqrt(%ve) : f32[2,8,1]
  %n = mul(%d, %rs) : f32[2,8,32]
  %nw = mul(%n, %w) : f32[2,8,32]
  %y = add(%nw, %b) : f32[2,8,32]
  return(%y)
})",
      R"(graph @rms(%x: f32[6,64], %w: f32[64]) -> (f32[6,64]) {
  %two = constant() {value = 2.0} : float
  %p = pow(%x, %two) : f32[6,64]
  %ms = mean(%p) {dims = [-1], keepdim = true} : f32[6,1]
  %eps = constant() {value = 1e-6} : float
  %a = add(%ms, %eps) : f32[6,1]
  %r = rsqrt(%a) : f32[6,1]
  %y = mul(%x, %r) : f32[6,64]
  %z = mul(%y, %w) : f32[6,64]
  return(%z)
})",
      R"(graph @composite(%x: f32[4,50], %w: f32[50], %b: f32[50]) -> (f32[4,50], f32[4,50]) {
  %n = layer_norm(%x, %w, %b) {normalized_shape = [50]} : f32[4,50]
  %g = gelu(%n) : f32[4,50]
  %s = log_softmax(%x) {dim = -1} : f32[4,50]
  %t = tanh(%s) : f32[4,50]
  return(%g, %t)
})",
      R"(graph @other_axis(%x: f32[4,16]) -> (f32[1,16]) {
  %m = amax(%x) {dims = [1], keepdim = true} : f32[4,1]
  %s = sub(%x, %m) : f32[4,16]
  %z = sum(%s) {dims = [0], keepdim = true} : f32[1,16]
  %e = exp(%z) : f32[1,16]
  return(%e)
})",
      R"(graph @stats(%x: f32[5,3,40]) -> (f32[5,3], f32[5,3,40]) {
  %v = var(%x) {dims = [2], correction = 0} : f32[5,3]
  %sd = std(%x) {dims = [2], keepdim = true} : f32[5,3,1]
  %c = sub(%x, %sd) : f32[5,3,40]
  %r = relu(%c) : f32[5,3,40]
  return(%v, %r)
})",
      R"(graph @gelu_tanh(%x: f32[7,33]) -> (f32[7,33]) {
  %c = constant() {value = 0.044715} : float
  %h = constant() {value = 0.5} : float
  %k = constant() {value = 0.7978845608} : float
  %x3 = mul(%x, %x) : f32[7,33]
  %x4 = mul(%x3, %x) : f32[7,33]
  %a = mul(%x4, %c) : f32[7,33]
  %b = add(%x, %a) : f32[7,33]
  %u = mul(%b, %k) : f32[7,33]
  %t = tanh(%u) : f32[7,33]
  %one = constant() {value = 1.0} : float
  %t1 = add(%t, %one) : f32[7,33]
  %hx = mul(%x, %h) : f32[7,33]
  %y = mul(%hx, %t1) : f32[7,33]
  return(%y)
})",
  };
  std::map<std::string, int> groups;
  for (const char *text : graphs) {
    SCOPED_TRACE(text);
    EXPECT_EQ(fuseAndCheck(text, groups), "");
  }
  // The graphs above do form reduction and elementwise groups (the test checks something).
  EXPECT_GE(groups["reduction"], 6);
  EXPECT_GE(groups["elementwise"], 1);
}

} // namespace
} // namespace xjit::backend
