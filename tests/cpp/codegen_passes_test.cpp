// The code-generation preparation passes (layout, fuse, plan-memory): results of the reference
// interpreter are bit-identical before and after layout and fuse (neither reorders arithmetic)
// on hand-built graphs, a transformer block and random graphs; memory plans are validated by
// an independent checker (no two live values overlap in the arena unless one is an in-place
// update of the other) and by running graphs with every planned value stored in a real arena.
// Also the figures for docs/passes.md (a BERT-base-sized transformer block).
#include "random_graph.h"

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
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <set>
#include <unordered_map>

namespace xjit {
namespace {

// ---- helpers ----

std::map<std::string, int64_t> runPipeline(Graph &g, const std::string &pipeline,
                                           bool *changed = nullptr) {
  passes::PassManager pm({.verifyEach = true});
  pm.addPipeline(pipeline);
  std::map<std::string, int64_t> stats;
  bool any = false;
  for (const auto &r : pm.run(g)) {
    any |= r.changed;
    for (const auto &[k, v] : r.stats)
      stats[r.name + ":" + k] += v;
  }
  if (changed) *changed = any;
  return stats;
}

RtValue deepCopy(const RtValue &v) {
  return v.isTensor() ? RtValue(v.tensor().contiguousCopy()) : v;
}

std::vector<RtValue> deepCopy(const std::vector<RtValue> &vs) {
  std::vector<RtValue> out;
  for (const RtValue &v : vs)
    out.push_back(deepCopy(v));
  return out;
}

/// Random inputs for a graph with static input shapes: normal floats, small integers.
std::vector<RtValue> randomInputs(const Graph &g, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0, 1);
  std::vector<RtValue> out;
  for (size_t i = 0; i < g.numInputs(); ++i) {
    const Type &t = g.input(i)->type();
    std::vector<int64_t> sizes;
    for (const DimExpr &d : t.shape())
      sizes.push_back(d.value());
    Tensor x = Tensor::empty(t.dtype(), sizes);
    for (int64_t k = 0; k < x.numel(); ++k) {
      if (isFloating(t.dtype()))
        x.setDouble(k, normal(rng));
      else
        x.setInt(k, static_cast<int64_t>(rng() % 5));
    }
    out.emplace_back(x);
  }
  return out;
}

/// "" when a and b hold the same values bit for bit (NaN equal to NaN).
std::string sameValues(const std::vector<RtValue> &a, const std::vector<RtValue> &b) {
  if (a.size() != b.size()) return "different number of outputs";
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].isTensor() != b[i].isTensor()) return "output " + std::to_string(i) + ": kinds";
    if (a[i].isTensor() && !a[i].tensor().equals(b[i].tensor()))
      return "output " + std::to_string(i) + " differs";
    if (!a[i].isTensor() && a[i].isList() == b[i].isList() && !a[i].isList() && !a[i].isNone() &&
        !a[i].isStr()) {
      const double x = a[i].toDouble(), y = b[i].toDouble();
      if (x != y && !(std::isnan(x) && std::isnan(y))) // NaN equal to NaN, as for tensors
        return "scalar output " + std::to_string(i) + " differs";
    }
  }
  return "";
}

size_t countOps(const Graph &g, const std::string &name) {
  size_t n = 0;
  g.walk([&](Op *op) { n += op->name() == name; });
  return n;
}

/// Top-level ops only (fusion bodies and regions not counted): what runs as separate steps.
size_t topLevelOps(const Graph &g) { return g.body()->size() - 1; }

/// Top-level ops that compute something (constants and `return` not counted).
size_t computeOps(const Graph &g) {
  size_t n = 0;
  for (const Op *op : *g.body())
    n += !op->def().has(kConstantLike) && !op->def().has(kTerminator);
  return n;
}

std::map<std::string, int> fusionKinds(const Graph &g) {
  std::map<std::string, int> kinds;
  g.walk([&](Op *op) {
    if (op->name() == "fusion") ++kinds[op->attr("kind").asStr()];
  });
  return kinds;
}

// ---- the memory-plan checker (independent of plan_memory.cpp) ----

/// Validates the mem.* annotations of a planned graph; returns the problems found.
class PlanChecker {
public:
  explicit PlanChecker(const Graph &g) : g_(g) {}

  std::vector<std::string> run() {
    Op *ret = g_.body()->terminator();
    if (!ret->hasAttr("mem.arena")) return {"no mem.arena on return"};
    arena_ = ret->attr("mem.arena").asInt();
    number(g_.body());
    for (Value *v : ret->operands())
      markOutput(v);
    std::vector<Slot> slots;
    for (Op *op : order_) {
      if (!op->hasAttr("mem.offset")) continue;
      const auto &offsets = op->attr("mem.offset").asInts();
      if (offsets.size() != op->numResults()) problem(op, "mem.offset has the wrong length");
      for (size_t i = 0; i < offsets.size() && i < op->numResults(); ++i) {
        if (offsets[i] < 0) continue;
        Value *v = op->result(i);
        const Type &t = v->type();
        if (!t.isTensor() || !isStaticShape(t.shape())) {
          problem(op, "a planned value without a static tensor type");
          continue;
        }
        int64_t bytes = numelOf(t.shape()).value() * dtypeSize(t.dtype());
        if (offsets[i] % 64) problem(op, "offset not 64-byte aligned");
        if (offsets[i] + bytes > arena_) problem(op, "slot beyond the arena");
        if (outputs_.count(v)) problem(op, "a graph output (or its base) lives in the arena");
        if (op->def().has(kView) && op->name() != "reshape" && op->name() != "flatten" &&
            op->name() != "contiguous")
          problem(op, "a view has its own slot");
        slots.push_back({v, offsets[i], bytes, start_.at(op), lastUse(v)});
      }
    }
    for (size_t a = 0; a < slots.size(); ++a)
      for (size_t b = a + 1; b < slots.size(); ++b) {
        const Slot &x = slots[a], &y = slots[b];
        bool bytes = x.offset < y.offset + y.bytes && y.offset < x.offset + x.bytes &&
                     x.bytes > 0 && y.bytes > 0;
        bool time = x.start <= y.end && y.start <= x.end;
        if (bytes && time && !inPlace(x, y) && !inPlace(y, x))
          problems_.push_back("%" + x.v->name() + " and %" + y.v->name() +
                              " overlap in the arena while both are live");
      }
    planned_ = slots.size();
    return problems_;
  }

  size_t planned() const { return planned_; }

private:
  struct Slot {
    Value *v;
    int64_t offset, bytes;
    int start, end;
  };

  void problem(const Op *op, const std::string &what) {
    problems_.push_back(op->describe() + ": " + what);
  }

  void number(Block *b) {
    for (Op *op : *b) {
      order_.push_back(op);
      start_[op] = end_[op] = next_++;
      if (op->name() == "fusion") continue;
      for (size_t r = 0; r < op->numRegions(); ++r)
        number(op->region(r));
      if (op->numRegions()) end_[op] = next_++;
    }
  }

  /// Values whose storage the value may share: views and in-place results of it, if/loop
  /// results it may flow to, tuples holding it.
  std::vector<Value *> aliases(Value *v) {
    std::vector<Value *> out;
    for (const Use &u : v->uses()) {
      Op *user = u.user;
      const OpDef &d = user->def();
      if ((d.has(kView) || d.has(kInPlace)) && u.index == 0)
        for (const auto &r : user->results())
          out.push_back(r.get());
      if (user->name() == "yield" && user->parentBlock()->parentOp()) {
        Op *parent = user->parentBlock()->parentOp();
        size_t i = parent->name() == "loop" ? u.index - 1 : u.index;
        if (parent->name() != "fusion" && (parent->name() != "loop" || u.index > 0) &&
            i < parent->numResults())
          out.push_back(parent->result(i));
      }
      if (user->name() == "tuple_construct" || user->name() == "tuple_get" ||
          user->name() == "external_call")
        for (const auto &r : user->results())
          out.push_back(r.get());
    }
    return out;
  }

  void markOutput(Value *v) {
    if (!outputs_.insert(v).second) return;
    if (Op *d = v->definingOp(); d && (d->def().has(kView) || d->def().has(kInPlace)) &&
                                 d->numOperands() && !d->hasAttr("mem.offset"))
      markOutput(d->operand(0));
  }

  int usePos(const Value *v, Op *user) {
    int at = end_.at(user);
    for (Op *a = user->parentOp(); a; a = a->parentOp())
      if (a->name() == "loop" && !(v->definingOp() && v->definingOp()->isInside(a)))
        at = std::max(at, end_.at(a));
    return at;
  }

  int lastUse(Value *v) {
    int end = start_.at(v->definingOp());
    std::vector<Value *> work = {v};
    std::set<Value *> seen = {v};
    while (!work.empty()) {
      Value *x = work.back();
      work.pop_back();
      for (const Use &u : x->uses())
        end = std::max(end, usePos(x, u.user));
      for (Value *a : aliases(x))
        if (!a->definingOp() || !a->definingOp()->hasAttr("mem.offset") ||
            a->definingOp()->attr("mem.offset").asInts()[a->index()] < 0)
          if (seen.insert(a).second) work.push_back(a);
    }
    return end;
  }

  /// y is written into x's buffer by the op that last reads x.
  bool inPlace(const Slot &x, const Slot &y) {
    Op *op = y.v->definingOp();
    if (!op->hasAttr("mem.inplace")) return false;
    int64_t i = op->attr("mem.inplace").asInts()[y.v->index()];
    return i >= 0 && op->operand(static_cast<size_t>(i)) == x.v && x.end == y.start &&
           x.offset == y.offset;
  }

  const Graph &g_;
  int64_t arena_ = 0;
  int next_ = 0;
  size_t planned_ = 0;
  std::vector<Op *> order_;
  std::unordered_map<const Op *, int> start_, end_;
  std::set<const Value *> outputs_;
  std::vector<std::string> problems_;
};

bool hasRegionsBesidesFusion(const Graph &g) {
  bool any = false;
  g.walk([&](Op *op) { any |= op->numRegions() > 0 && op->name() != "fusion"; });
  return any;
}

/// Runs a straight-line planned graph storing every planned value in its arena slot (a view
/// on one shared storage), so a plan that lets two live values overlap corrupts a result.
std::vector<RtValue> runInArena(const Graph &g, const std::vector<RtValue> &inputs) {
  int64_t arenaBytes = g.body()->terminator()->attr("mem.arena").asInt();
  auto arena = std::make_shared<Storage>(std::max<int64_t>(arenaBytes, 1));
  std::unordered_map<const Value *, RtValue> env;
  for (size_t i = 0; i < inputs.size(); ++i)
    env[g.input(i)] = inputs[i];
  for (Op *op : *g.body()) {
    std::vector<RtValue> in;
    for (Value *v : op->operands())
      in.push_back(env.at(v));
    if (op->name() == "return") return in;
    std::vector<RtValue> out = op->def().kernel(*op, in);
    for (size_t i = 0; i < out.size(); ++i) {
      int64_t off = op->hasAttr("mem.offset") ? op->attr("mem.offset").asInts()[i] : -1;
      if (off >= 0) {
        const Tensor &t = out[i].tensor();
        Tensor slot(arena, t.dtype(), t.sizes(), contiguousStrides(t.sizes()),
                    off / dtypeSize(t.dtype()));
        slot.copyFrom(t);
        out[i] = RtValue(slot);
      }
      env[op->result(i)] = out[i];
    }
  }
  return {};
}

// ---- graphs ----

/// A transformer encoder (BERT) of `layers` layers: self-attention with an additive mask,
/// residuals, layer norms and a gelu feed-forward. `decomposed` spells softmax, layer_norm and gelu
/// (tanh form) in primitive ops, as a tracer without those composite ops captures them.
std::unique_ptr<Graph> transformerBlock(int64_t seq, int64_t hidden, int64_t heads, int64_t ffn,
                                        bool decomposed, int layers = 1) {
  auto g = std::make_unique<Graph>("bert_layer");
  auto f32 = [](std::vector<int64_t> s) {
    return Type::tensor(DType::F32, Shape(s.begin(), s.end()));
  };
  int64_t hd = hidden / heads;
  Value *x = g->addInput(f32({1, seq, hidden}), "x");
  Value *mask = g->addInput(f32({1, 1, 1, seq}), "mask");
  auto param = [&](const std::string &n, std::vector<int64_t> s) { return g->addInput(f32(s), n); };
  Value *wq = param("wq", {hidden, hidden}), *bq = param("bq", {hidden});
  Value *wk = param("wk", {hidden, hidden}), *bk = param("bk", {hidden});
  Value *wv = param("wv", {hidden, hidden}), *bv = param("bv", {hidden});
  Value *wo = param("wo", {hidden, hidden}), *bo = param("bo", {hidden});
  Value *g1 = param("ln1_w", {hidden}), *be1 = param("ln1_b", {hidden});
  Value *w1 = param("w1", {ffn, hidden}), *b1 = param("b1", {ffn});
  Value *w2 = param("w2", {hidden, ffn}), *b2 = param("b2", {hidden});
  Value *g2 = param("ln2_w", {hidden}), *be2 = param("ln2_b", {hidden});
  Builder b(g->body());
  using Ints = std::vector<int64_t>;
  auto scalar = [&](double v) { return b.constantFloat(v); };
  auto heads4 = [&](Value *t, Ints perm) {
    return b.op("permute", {b.op("reshape", {t}, {{"shape", Attr(Ints{1, seq, heads, hd})}})},
                {{"dims", Attr(perm)}});
  };
  auto softmax = [&](Value *s) -> Value * {
    if (!decomposed) return b.op("softmax", {s}, {{"dim", -1}});
    Value *m = b.op("amax", {s}, {{"dims", Attr(Ints{-1})}, {"keepdim", true}});
    Value *e = b.op("exp", {b.op("sub", {s, m})});
    return b.op("div", {e, b.op("sum", {e}, {{"dims", Attr(Ints{-1})}, {"keepdim", true}})});
  };
  auto layerNorm = [&](Value *h, Value *w, Value *beta) -> Value * {
    if (!decomposed)
      return b.op("layer_norm", {h, w, beta},
                  {{"normalized_shape", Attr(Ints{hidden})}, {"eps", 1e-12}});
    Ints last = {-1};
    Value *mu = b.op("mean", {h}, {{"dims", Attr(last)}, {"keepdim", true}});
    Value *c = b.op("sub", {h, mu});
    Value *var = b.op("mean", {b.op("mul", {c, c})}, {{"dims", Attr(last)}, {"keepdim", true}});
    Value *r = b.op("rsqrt", {b.op("add", {var, scalar(1e-12)})});
    return b.op("add", {b.op("mul", {b.op("mul", {c, r}), w}), beta});
  };
  auto gelu = [&](Value *t) -> Value * {
    if (!decomposed) return b.op("gelu", {t});
    Value *cube = b.op("mul", {b.op("mul", {t, t}), t});
    Value *inner = b.op("mul", {b.op("add", {t, b.op("mul", {cube, scalar(0.044715)})}),
                                scalar(0.7978845608028654)});
    Value *half = b.op("mul", {t, scalar(0.5)});
    return b.op("mul", {half, b.op("add", {b.op("tanh", {inner}), scalar(1.0)})});
  };
  Value *out = x;
  for (int layer = 0; layer < layers; ++layer) { // layers share their parameters
    Value *in = out;
    Value *q = heads4(b.op("linear", {in, wq, bq}), {0, 2, 1, 3});
    Value *k = heads4(b.op("linear", {in, wk, bk}), {0, 2, 3, 1});
    Value *v = heads4(b.op("linear", {in, wv, bv}), {0, 2, 1, 3});
    Value *scores = b.op(
        "add",
        {b.op("div", {b.op("matmul", {q, k}), scalar(std::sqrt(static_cast<double>(hd)))}), mask});
    Value *ctx = b.op("matmul", {softmax(scores), v});
    ctx = b.op("reshape", {b.op("permute", {ctx}, {{"dims", Attr(Ints{0, 2, 1, 3})}})},
               {{"shape", Attr(Ints{1, seq, hidden})}});
    Value *h1 = layerNorm(b.op("add", {b.op("linear", {ctx, wo, bo}), in}), g1, be1);
    Value *f = gelu(b.op("linear", {h1, w1, b1}));
    out = layerNorm(b.op("add", {b.op("linear", {f, w2, b2}), h1}), g2, be2);
  }
  b.createWithTypes("return", {out}, {});
  return g;
}

/// A small residual conv net: conv-relu-conv-add-relu-pool-conv, then a flatten and a linear.
std::unique_ptr<Graph> convNet() {
  return parseGraph(R"(
graph @convnet(%x: f32[2,3,12,12], %w1: f32[8,3,3,3], %b1: f32[8], %w2: f32[8,8,3,3],
               %b2: f32[8], %w3: f32[4,8,1,1], %s: f32[8,1,1], %fc: f32[5,144]) -> (f32[2,5]) {
  %c1 = conv2d(%x, %w1, %b1) {padding = [1]} : f32[2,8,12,12]
  %r1 = relu(%c1) : f32[2,8,12,12]
  %c2 = conv2d(%r1, %w2, %b2) {padding = [1]} : f32[2,8,12,12]
  %sc = mul(%c2, %s) : f32[2,8,12,12]
  %a = add(%sc, %r1) : f32[2,8,12,12]
  %r2 = relu(%a) : f32[2,8,12,12]
  %p = max_pool2d(%r2) {kernel_size = [2]} : f32[2,8,6,6]
  %c3 = conv2d(%p, %w3) : f32[2,4,6,6]
  %f = flatten(%c3) {start_dim = 1} : f32[2,144]
  %y = linear(%f, %fc) : f32[2,5]
  return(%y)
}
)");
}

// ---- fuse ----

void expectExactAfter(const std::string &pipeline, std::unique_ptr<Graph> g, uint64_t seed,
                      std::map<std::string, int64_t> *stats = nullptr) {
  std::vector<RtValue> inputs = randomInputs(*g, seed);
  std::vector<RtValue> before = interpret(*g, deepCopy(inputs));
  auto s = runPipeline(*g, pipeline);
  if (stats) *stats = s;
  std::string text = printGraph(*g);
  EXPECT_EQ(sameValues(before, interpret(*parseGraph(text), deepCopy(inputs))), "")
      << pipeline << " changed the results:\n"
      << text;
}

TEST(CodegenFuse, SoftmaxIsOneReductionGroup) {
  auto g = parseGraph(R"(
graph @softmax(%x: f32[4,16]) -> (f32[4,16]) {
  %m = amax(%x) {dims = [-1], keepdim = true} : f32[4,1]
  %s = sub(%x, %m) : f32[4,16]
  %e = exp(%s) : f32[4,16]
  %z = sum(%e) {dims = [1], keepdim = true} : f32[4,1]
  %y = div(%e, %z) : f32[4,16]
  return(%y)
}
)");
  std::map<std::string, int64_t> stats;
  expectExactAfter("fuse", parseGraph(printGraph(*g)), 1, &stats);
  runPipeline(*g, "fuse");
  EXPECT_EQ(topLevelOps(*g), 1u) << printGraph(*g);
  EXPECT_EQ(fusionKinds(*g)["reduction"], 1);
}

TEST(CodegenFuse, ReductionOverOtherAxesStaysOut) {
  auto g = parseGraph(R"(
graph @two(%x: f32[4,16]) -> (f32[1,16]) {
  %m = amax(%x) {dims = [-1], keepdim = true} : f32[4,1]
  %s = sub(%x, %m) : f32[4,16]
  %z = sum(%s) {dims = [0], keepdim = true} : f32[1,16]
  return(%z)
}
)");
  runPipeline(*g, "fuse");
  EXPECT_EQ(fusionKinds(*g)["reduction"], 1);
  EXPECT_EQ(countOps(*g, "sum"), 1u);
  EXPECT_EQ(g->body()->front()->name(), "fusion") << printGraph(*g);
}

TEST(CodegenFuse, TransformerBlockIsExact) {
  for (bool decomposed : {false, true})
    for (const char *pipeline :
         {"fuse", "fuse{duplicate-cheap=false max-group-size=4}", "fuse,plan-memory"})
      expectExactAfter(pipeline, transformerBlock(8, 32, 4, 64, decomposed), 7);
}

TEST(CodegenFuse, SideEffectsBoundGroups) {
  // An in-place write between two elementwise ops: fusing them would move the first read past
  // the write.
  auto g = parseGraph(R"(
graph @barrier(%x: f32[8], %v: f32[8]) -> (f32[8]) {
  %a = exp(%x) : f32[8]
  %w = copy_(%x, %v) : f32[8]
  %b = add(%a, %w) : f32[8]
  %c = neg(%b) : f32[8]
  return(%c)
}
)");
  std::vector<RtValue> inputs = randomInputs(*g, 3);
  std::vector<RtValue> before = interpret(*g, deepCopy(inputs));
  runPipeline(*g, "fuse");
  EXPECT_EQ(countOps(*g, "exp"), 1u);
  EXPECT_EQ(g->body()->front()->name(), "exp") << printGraph(*g);
  EXPECT_EQ(sameValues(before, interpret(*g, deepCopy(inputs))), "");
}

TEST(CodegenFuse, NoCycleBetweenGroups) {
  // a->b and c->d are chains; b also reads c and d also reads a. Grouping {a,b} and {c,d}
  // would make each group wait for the other.
  auto g = parseGraph(R"(
graph @cross(%x: f32[8], %y: f32[8]) -> (f32[8], f32[8]) {
  %a = exp(%x) : f32[8]
  %c = sin(%y) : f32[8]
  %s:2 = sort(%a) : f32[8], i64[8]
  %t:2 = sort(%c) : f32[8], i64[8]
  %b = add(%a, %t#0) : f32[8]
  %d = add(%c, %s#0) : f32[8]
  return(%b, %d)
}
)");
  expectExactAfter("fuse", parseGraph(printGraph(*g)), 5);
  runPipeline(*g, "fuse");
  EXPECT_TRUE(verifyGraph(*g).empty());
}

// ---- layout ----

TEST(CodegenLayout, ConvChainRunsChannelsLastWithTwoConversions) {
  auto g = convNet();
  std::map<std::string, int64_t> stats;
  expectExactAfter("layout", convNet(), 11, &stats);
  EXPECT_EQ(stats["layout:chains"], 1);
  EXPECT_EQ(stats["layout:conversions"], 2); // x in, c3 out
  runPipeline(*g, "layout");
  g->walk([&](Op *op) {
    if (op->name() == "conv2d" || op->name() == "max_pool2d") {
      EXPECT_TRUE(op->hasAttr("layout")) << op->describe();
    }
  });
  EXPECT_EQ(countOps(*g, "permute"), 3u); // entry, exit and the [8,1,1] scale operand
}

TEST(CodegenLayout, EveryConvAndPoolKernelMatchesChannelsFirst) {
  // Each layout-aware op on a channels-last input equals the channels-first op, permuted.
  using Ints = std::vector<int64_t>;
  struct Case {
    std::string op;
    Ints input, weight; // weight empty: a pooling
    AttrMap attrs;
  };
  const Case cases[] = {
      {"conv1d", {2, 4, 9}, {6, 4, 3}, {{"padding", Attr(Ints{1})}, {"stride", Attr(Ints{2})}}},
      {"conv2d", {2, 4, 7, 6}, {6, 2, 3, 3}, {{"padding", Attr(Ints{1})}, {"groups", 2}}},
      {"conv2d", {4, 7, 6}, {6, 4, 3, 3}, {{"padding_mode", "same"}}}, // unbatched
      {"conv3d", {1, 4, 5, 4, 3}, {6, 4, 2, 2, 2}, {}},
      {"conv_transpose2d",
       {2, 4, 5, 4},
       {4, 3, 3, 3},
       {{"stride", Attr(Ints{2})}, {"output_padding", Attr(Ints{1})}}},
      {"max_pool2d",
       {2, 4, 7, 6},
       {},
       {{"kernel_size", Attr(Ints{3})},
        {"stride", Attr(Ints{2})},
        {"padding", Attr(Ints{1})},
        {"ceil_mode", true}}},
      {"max_pool2d_with_indices", {2, 3, 6, 6}, {}, {{"kernel_size", Attr(Ints{2})}}},
      {"avg_pool1d", {2, 4, 9}, {}, {{"kernel_size", Attr(Ints{2})}}},
      {"adaptive_avg_pool2d", {2, 4, 7, 6}, {}, {{"output_size", Attr(Ints{3, 2})}}},
      {"adaptive_max_pool3d", {1, 4, 5, 4, 3}, {}, {{"output_size", Attr(Ints{2})}}},
  };
  for (const Case &c : cases) {
    auto tensor = [](const Ints &s) { return Type::tensor(DType::F32, Shape(s.begin(), s.end())); };
    int64_t rank = static_cast<int64_t>(c.input.size());
    int64_t nd = c.op.find("1d") != std::string::npos   ? 1
                 : c.op.find("2d") != std::string::npos ? 2
                                                        : 3;
    int64_t ch = rank - nd - 1;
    Ints toLast, toFirst;
    for (int64_t i = 0; i < rank; ++i)
      if (i != ch) toLast.push_back(i);
    toLast.push_back(ch);
    for (int64_t i = 0; i < rank; ++i)
      toFirst.push_back(i < ch ? i : i == ch ? rank - 1 : i - 1);
    auto build = [&](bool last) {
      auto g = std::make_unique<Graph>("g");
      Value *x = g->addInput(tensor(c.input), "x");
      std::vector<Value *> operands = {x};
      if (!c.weight.empty()) operands.push_back(g->addInput(tensor(c.weight), "w"));
      Builder b(g->body());
      AttrMap attrs = c.attrs;
      if (last) {
        operands[0] = b.op("contiguous", {b.op("permute", {x}, {{"dims", Attr(toLast)}})});
        attrs["layout"] = Attr("nhwc");
      }
      Op *op = b.create(c.op, operands, attrs);
      std::vector<Value *> outs;
      for (const auto &r : op->results())
        outs.push_back(last ? b.op("permute", {r.get()}, {{"dims", Attr(toFirst)}}) : r.get());
      b.createWithTypes("return", outs, {});
      EXPECT_TRUE(verifyGraph(*g).empty()) << printGraph(*g);
      return g;
    };
    auto first = build(false), last = build(true);
    std::vector<RtValue> inputs = randomInputs(*first, 17);
    EXPECT_EQ(sameValues(interpret(*first, deepCopy(inputs)), interpret(*last, deepCopy(inputs))),
              "")
        << c.op;
  }
}

TEST(CodegenLayout, SingleConvNeedsMinConvsOne) {
  auto g = parseGraph(R"(
graph @one(%x: f32[1,3,8,8], %w: f32[4,3,3,3]) -> (f32[1,4,6,6]) {
  %c = conv2d(%x, %w) : f32[1,4,6,6]
  %r = relu(%c) : f32[1,4,6,6]
  return(%r)
}
)");
  bool changed = true;
  runPipeline(*g, "layout", &changed);
  EXPECT_FALSE(changed);
  std::map<std::string, int64_t> stats;
  expectExactAfter("layout{min-convs=1}", parseGraph(printGraph(*g)), 2, &stats);
  EXPECT_EQ(stats["layout:conversions"], 2);
}

TEST(CodegenLayout, BackToChannelsFirstIsExact) {
  std::map<std::string, int64_t> stats;
  expectExactAfter("layout,layout{target-layout=nchw},canonicalize,dce", convNet(), 4, &stats);
  EXPECT_EQ(stats["layout:chains"], 2); // one each way
  auto g = convNet();
  runPipeline(*g, "layout,layout{target-layout=nchw}");
  g->walk([](Op *op) { EXPECT_FALSE(op->hasAttr("layout")) << op->describe(); });
}

TEST(CodegenLayout, ThenFuseThenPlanIsExact) {
  std::map<std::string, int64_t> stats;
  expectExactAfter("layout,fuse,plan-memory", convNet(), 9, &stats);
  // conv + relu; the per-channel scale after the second conv is no conv post-op (a native
  // elementwise kernel with the residual add and relu).
  EXPECT_GE(stats["fuse:groups-epilogue"], 1);
  EXPECT_GE(stats["fuse:groups-elementwise"], 1);
  auto g = convNet();
  runPipeline(*g, "layout,fuse,plan-memory");
  EXPECT_EQ(PlanChecker(*g).run(), std::vector<std::string>{});
  std::vector<RtValue> inputs = randomInputs(*g, 9);
  EXPECT_EQ(sameValues(interpret(*g, deepCopy(inputs)), runInArena(*g, deepCopy(inputs))), "");
}

// ---- plan-memory ----

std::unique_ptr<Graph> planned(const std::string &text,
                               const std::string &pipeline = "plan-memory") {
  auto g = parseGraph(text);
  runPipeline(*g, pipeline);
  return g;
}

int64_t offsetOf(const Graph &g, const std::string &name) {
  int64_t off = -2;
  g.walk([&](Op *op) {
    for (size_t i = 0; i < op->numResults(); ++i)
      if (op->result(i)->name() == name)
        off = op->hasAttr("mem.offset") ? op->attr("mem.offset").asInts()[i] : -1;
  });
  return off;
}

TEST(CodegenPlan, ChainReusesAndUpdatesInPlace) {
  auto g = planned(R"(
graph @chain(%x: f32[16,16]) -> (f32[16,16]) {
  %a = exp(%x) : f32[16,16]
  %b = neg(%a) : f32[16,16]
  %c = mm(%b, %b) : f32[16,16]
  %d = tanh(%c) : f32[16,16]
  %e = mm(%d, %x) : f32[16,16]
  return(%e)
}
)");
  EXPECT_EQ(PlanChecker(*g).run(), std::vector<std::string>{});
  EXPECT_EQ(offsetOf(*g, "e"), -1);                // an output: its own buffer
  EXPECT_EQ(offsetOf(*g, "a"), offsetOf(*g, "b")); // neg writes into a, which dies there
  EXPECT_NE(offsetOf(*g, "b"), offsetOf(*g, "c")); // mm reads b while writing c
  EXPECT_EQ(offsetOf(*g, "c"), offsetOf(*g, "d"));
  EXPECT_EQ(g->body()->terminator()->attr("mem.arena").asInt(), 2 * 1024);
}

TEST(CodegenPlan, ViewsKeepTheirBaseAlive) {
  auto g = planned(R"(
graph @views(%x: f32[8,8]) -> (f32[8,8]) {
  %a = exp(%x) : f32[8,8]
  %t = transpose(%a) {dim0 = 0, dim1 = 1} : f32[8,8]
  %b = sin(%x) : f32[8,8]
  %c = mm(%t, %b) : f32[8,8]
  %d = add(%c, %t) : f32[8,8]
  return(%d)
}
)");
  EXPECT_EQ(PlanChecker(*g).run(), std::vector<std::string>{});
  EXPECT_EQ(offsetOf(*g, "t"), -1);
  EXPECT_NE(offsetOf(*g, "a"), offsetOf(*g, "b"));
  EXPECT_NE(offsetOf(*g, "a"), offsetOf(*g, "c")); // a is read through %t by add
}

TEST(CodegenPlan, OutputsAndTheirBasesAreNotInTheArena) {
  auto g = planned(R"(
graph @out(%x: f32[4,4]) -> (f32[16], f32[4,4]) {
  %a = exp(%x) : f32[4,4]
  %v = reshape(%a) {shape = [16]} : f32[16]
  %b = cos(%x) : f32[4,4]
  %c = sin(%b) : f32[4,4]
  return(%v, %c)
}
)");
  EXPECT_EQ(PlanChecker(*g).run(), std::vector<std::string>{});
  EXPECT_EQ(offsetOf(*g, "a"), -1);
  EXPECT_EQ(offsetOf(*g, "c"), -1);
  EXPECT_EQ(offsetOf(*g, "b"), 0);
}

TEST(CodegenPlan, LoopsAndSymbolicSizes) {
  auto g = planned(R"(
graph @loop(%n: int, %x: f32[8], %y: f32[s0]) -> (f32[8], f32[s0]) {
  %t = constant() {value = true} : bool
  %a = exp(%x) : f32[8]
  %l = loop(%n, %t, %x) : f32[8] {
  ^(%i: int, %acc: f32[8]):
    %m = mul(%acc, %a) : f32[8]
    %s = sin(%m) : f32[8]
    yield(%t, %s)
  }
  %w = exp(%y) : f32[s0]
  %z = neg(%w) : f32[s0]
  return(%l, %z)
}
)");
  EXPECT_EQ(PlanChecker(*g).run(), std::vector<std::string>{});
  EXPECT_GE(offsetOf(*g, "a"), 0);  // used in the loop: alive to its end
  EXPECT_GE(offsetOf(*g, "m"), 0);  // lives within one iteration
  EXPECT_EQ(offsetOf(*g, "s"), -1); // carried to the next iteration: allocated at run time
  EXPECT_EQ(offsetOf(*g, "w"), -1); // symbolic size
  EXPECT_NE(offsetOf(*g, "a"), offsetOf(*g, "m"));
}

/// Fuzz: random graphs fused and planned; the checker validates every plan, straight-line
/// graphs also run with their values in a real arena, and fuse alone is bit-exact.
TEST(CodegenFuzz, FusedPlansAreValidAndExact) {
  int graphs = 0, compared = 0, arenaRuns = 0, planned = 0, fusions = 0;
  testing::RandomGraphOptions opts;
  opts.maxOps = 32;
  for (uint64_t seed = 9100000; seed < 9100000 + 400; ++seed) {
    testing::RandomCase c = testing::randomGraph(seed, opts);
    std::string text0 = printGraph(*c.graph);
    std::vector<RtValue> before;
    bool ran = true;
    try {
      before = interpret(*c.graph, deepCopy(c.inputs));
    } catch (const Error &) {
      ran = false;
    }
    ++graphs;
    auto g = parseGraph(text0);
    runPipeline(*g, "fuse");
    std::string fused = printGraph(*g);
    fusions += static_cast<int>(countOps(*g, "fusion"));
    if (ran) {
      std::string d = sameValues(before, interpret(*g, deepCopy(c.inputs)));
      EXPECT_EQ(d, "") << "seed " << seed << "\n" << text0 << "--- fused:\n" << fused;
      ++compared;
    }
    runPipeline(*g, "plan-memory");
    PlanChecker check(*g);
    auto problems = check.run();
    planned += static_cast<int>(check.planned());
    EXPECT_EQ(problems, std::vector<std::string>{}) << "seed " << seed << "\n" << printGraph(*g);
    if (ran && !hasRegionsBesidesFusion(*g)) {
      EXPECT_EQ(sameValues(before, runInArena(*g, deepCopy(c.inputs))), "")
          << "seed " << seed << "\n"
          << printGraph(*g);
      ++arenaRuns;
    }
  }
  EXPECT_GT(fusions, graphs / 2);
  EXPECT_GT(arenaRuns, graphs / 4);
  std::printf("[ codegen fuzz ] %d graphs, %d fusion ops, %d compared, %d run in an arena, %d "
              "values planned\n",
              graphs, fusions, compared, arenaRuns, planned);
}

/// A random network of 1-, 2- or 3-d convolutions, poolings and elementwise ops (with skip
/// connections, broadcast operands and reads outside the chains), for the layout pass.
std::unique_ptr<Graph> randomConvNet(uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto pick = [&](int lo, int hi) { return static_cast<int64_t>(lo + rng() % (hi - lo + 1)); };
  using Ints = std::vector<int64_t>;
  int64_t nd = pick(1, 3), batch = pick(0, 2); // batch 0: unbatched input
  auto g = std::make_unique<Graph>("convnet");
  Ints in;
  if (batch) in.push_back(batch);
  in.push_back(pick(1, 4));
  for (int64_t d = 0; d < nd; ++d)
    in.push_back(nd == 3 ? pick(3, 5) : pick(4, 8));
  auto tensor = [](const Ints &s) { return Type::tensor(DType::F32, Shape(s.begin(), s.end())); };
  std::vector<Value *> acts = {g->addInput(tensor(in), "x")};
  std::vector<Value *> others; // values read by non-layout ops
  Builder b(g->body());
  std::string d = std::to_string(nd) + "d";
  size_t ch = static_cast<size_t>(batch ? 1 : 0);
  int weights = 0;
  for (int step = 0, n = static_cast<int>(pick(3, 10)); step < n; ++step) {
    Value *a = acts[rng() % acts.size()];
    Ints shape;
    for (const DimExpr &e : a->type().shape())
      shape.push_back(e.value());
    int64_t c = shape[ch];
    try {
      switch (pick(0, 7)) {
      case 0:
      case 1: { // convolution
        int64_t cout = pick(1, 4), k = pick(1, 3);
        Ints w = {cout, c};
        for (int64_t i = 0; i < nd; ++i)
          w.push_back(k);
        std::vector<Value *> ops = {a, g->addInput(tensor(w), "w" + std::to_string(weights++))};
        if (pick(0, 1)) ops.push_back(g->addInput(tensor({cout}), "b" + std::to_string(weights++)));
        acts.push_back(
            b.op(pick(0, 4) ? "conv" + d : "conv_transpose" + d, ops,
                 {{"padding", Attr(Ints{pick(0, k / 2)})}, {"stride", Attr(Ints{pick(1, 2)})}}));
        break;
      }
      case 2: { // pooling
        static const char *kinds[] = {"max_pool", "avg_pool", "adaptive_avg_pool",
                                      "adaptive_max_pool"};
        std::string kind = kinds[rng() % 4];
        AttrMap attrs = kind.rfind("adaptive", 0) == 0
                            ? AttrMap{{"output_size", Attr(Ints{pick(1, 3)})}}
                            : AttrMap{{"kernel_size", Attr(Ints{pick(1, 2)})}};
        acts.push_back(b.op(kind + d, {a}, attrs));
        break;
      }
      case 3: { // unary
        static const char *unary[] = {"relu", "tanh", "neg", "sigmoid"};
        acts.push_back(b.op(unary[rng() % 4], {a}));
        break;
      }
      case 4: { // binary with a value of the same shape, or a broadcast channel operand
        std::vector<Value *> same;
        for (Value *v : acts)
          if (v->type() == a->type()) same.push_back(v);
        Value *other = same[rng() % same.size()];
        if (pick(0, 1)) {
          Ints bshape(shape.size() - ch, 1);
          bshape[0] = c;
          other = g->addInput(tensor(bshape), "s" + std::to_string(weights++));
        }
        acts.push_back(b.op(pick(0, 1) ? "add" : "mul", {a, other}));
        break;
      }
      case 5: // a scalar operand
        acts.push_back(b.op("mul", {a, b.constantFloat(0.5)}));
        break;
      case 6: // read outside any chain
        others.push_back(b.op("sum", {a}, {{"dims", Attr(Ints{-1})}}));
        break;
      default: // a skip connection needs no op: later steps pick any earlier activation
        break;
      }
    } catch (const std::exception &) {
      // the random configuration does not fit the shape (kernel too large...): skip the op
    }
  }
  std::vector<Value *> outs = {acts.back()};
  if (acts.size() > 2 && pick(0, 1)) outs.push_back(acts[acts.size() / 2]);
  outs.insert(outs.end(), others.begin(), others.end());
  b.createWithTypes("return", outs, {});
  return g;
}

TEST(CodegenFuzz, LayoutOnRandomConvNetsIsExact) {
  const char *pipelines[] = {"layout{min-convs=1}", "layout",
                             "layout{min-convs=1},layout{target-layout=nchw min-convs=1}",
                             "layout{min-convs=1},fuse,plan-memory"};
  int graphs = 0, changed = 0;
  for (uint64_t seed = 500; seed < 500 + 150; ++seed) {
    auto g0 = randomConvNet(seed);
    ASSERT_TRUE(verifyGraph(*g0).empty()) << printGraph(*g0);
    std::string text = printGraph(*g0);
    if (std::getenv("XJIT_CODEGEN_DUMP")) std::printf("%s\n", text.c_str());
    std::vector<RtValue> inputs = randomInputs(*g0, seed);
    std::vector<RtValue> before = interpret(*g0, deepCopy(inputs));
    ++graphs;
    for (const char *pipeline : pipelines) {
      auto g = parseGraph(text);
      bool any = false;
      runPipeline(*g, pipeline, &any);
      changed += any && std::string(pipeline) == "layout{min-convs=1}";
      std::string after = printGraph(*g);
      EXPECT_EQ(sameValues(before, interpret(*g, deepCopy(inputs))), "")
          << pipeline << ", seed " << seed << "\n"
          << text << "--- after:\n"
          << after;
      if (std::string(pipeline).find(',') == std::string::npos) { // idempotent
        bool again = true;
        runPipeline(*g, pipeline, &again);
        EXPECT_FALSE(again) << pipeline << ", seed " << seed;
        EXPECT_EQ(printGraph(*g), after) << pipeline << ", seed " << seed;
      }
      if (g->body()->terminator()->hasAttr("mem.arena")) {
        EXPECT_EQ(PlanChecker(*g).run(), std::vector<std::string>{}) << "seed " << seed;
        EXPECT_EQ(sameValues(before, runInArena(*g, deepCopy(inputs))), "") << "seed " << seed;
      }
    }
  }
  EXPECT_GT(changed, graphs / 2);
  std::printf("[ conv nets ] %d graphs, %d changed by layout{min-convs=1}\n", graphs, changed);
}

// ---- figures for docs/passes.md ----

TEST(CodegenFigures, BertBaseLayer) {
  for (bool decomposed : {false, true}) {
    auto g = transformerBlock(128, 768, 12, 3072, decomposed);
    size_t opsBefore = topLevelOps(*g), computeBefore = computeOps(*g);
    auto stats = runPipeline(*g, "fuse,plan-memory");
    EXPECT_EQ(PlanChecker(*g).run(), std::vector<std::string>{});
    auto kinds = fusionKinds(*g);
    int64_t peak = stats["plan-memory:peak-bytes"], naive = stats["plan-memory:naive-bytes"];
    std::printf("[ bert-base layer%s ] ops %zu -> %zu (without constants %zu -> %zu); fusion "
                "groups: %d elementwise, %d reduction, %d epilogue; %lld ops fused, %lld "
                "duplicated; planned peak %.2f MiB vs naive %.2f MiB (%.2fx), %lld in-place, %lld "
                "values planned\n",
                decomposed ? " (decomposed softmax/layer_norm/gelu)" : "", opsBefore,
                topLevelOps(*g), computeBefore, computeOps(*g), kinds["elementwise"],
                kinds["reduction"], kinds["epilogue"],
                static_cast<long long>(stats["fuse:ops-fused"]),
                static_cast<long long>(stats["fuse:ops-duplicated"]), peak / 1048576.0,
                naive / 1048576.0, static_cast<double>(naive) / static_cast<double>(peak),
                static_cast<long long>(stats["plan-memory:in-place"]),
                static_cast<long long>(stats["plan-memory:values-planned"]));
    EXPECT_LT(topLevelOps(*g), opsBefore);
    EXPECT_LT(peak, naive);
    if (std::getenv("XJIT_CODEGEN_DUMP")) std::printf("%s\n", printGraph(*g).c_str());
  }
}

TEST(CodegenFigures, TenThousandOpGraphTimes) {
  // 170 decomposed layers: about 10,000 ops. Catches super-linear behaviour in the passes.
  auto g =
      transformerBlock(16, 64, 4, 128, /*decomposed=*/true,
                       std::getenv("XJIT_LAYERS") ? std::atoi(std::getenv("XJIT_LAYERS")) : 170);
  size_t ops = g->numOps();
  passes::PassManager pm({.verifyEach = false});
  pm.addPipeline("layout,fuse,plan-memory");
  std::string times;
  double total = 0;
  for (const auto &r : pm.run(*g)) {
    times += " " + r.name + " " + std::to_string(r.milliseconds) + " ms;";
    total += r.milliseconds;
  }
  std::printf("[ %zu ops ]%s\n", ops, times.c_str());
  EXPECT_GE(ops, 10000u);
  EXPECT_LT(total, 2000.0);
  EXPECT_TRUE(verifyGraph(*g).empty());
}

} // namespace
} // namespace xjit
