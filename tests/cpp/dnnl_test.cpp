// The oneDNN library kernels of the CPU target (src/backend/dnnl_*.cpp), compared with the
// reference interpreter: matmul, mm, bmm, linear, addmm, baddbmm, conv1d/2d (stride, padding,
// padding_mode, dilation, groups, channels-last, unbatched), poolings, and the epilogue groups
// the fuse pass forms on matmul/linear/conv (bias, activations, residual and scalar post-ops),
// for odd sizes, batch dims with broadcasting, strided / transposed inputs, constant (prepacked)
// and run-time weights, symbolic dims (one plan per run shape), several threads at once, and
// shapes oneDNN rejects (the executable runs the reference kernel instead).
//
// Tolerances: the reference accumulates in f64 and rounds once; oneDNN accumulates in f32 (in a
// different order) and applies post-ops to the f32 accumulator. f32: |got - ref| <= 1e-5 |ref| +
// 1e-5 max|ref| (the second term covers results that cancel to near zero: their absolute error
// is set by the size of the products, not of the result). bf16: the same with 1e-2 (one bf16
// ulp is 2^-8 ~ 4e-3 relative; the reference rounds once to bf16 after each post-op, oneDNN once
// at the end, so results may differ by one or two bf16 ulps).
#include "xjit/backend/library_warm_up.h"
#include "xjit/backend/target.h"
#include "xjit/ir/builder.h"
#include "xjit/ir/interpreter.h"
#include "xjit/ir/op_registry.h"
#include "xjit/ir/parser.h"
#include "xjit/passes/pass.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <set>
#include <thread>

namespace xjit::backend {
namespace {

Tensor randomTensor(DType d, const std::vector<int64_t> &sizes, std::mt19937 &rng) {
  Tensor t = Tensor::empty(d, sizes);
  std::uniform_real_distribution<double> u(-1, 1);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.setDouble(i, u(rng));
  return t;
}

/// The same values through a non-contiguous view: 0: every dim reversed in memory, 1: inner
/// stride 2 at an odd offset.
Tensor relayout(const Tensor &t, int kind) {
  std::vector<int64_t> sizes = t.sizes();
  Tensor view;
  if (kind == 0) {
    std::vector<int64_t> rev(sizes.rbegin(), sizes.rend());
    std::vector<int64_t> cs = contiguousStrides(rev);
    view = Tensor::empty(t.dtype(), rev).view(sizes, {cs.rbegin(), cs.rend()}, 0);
  } else {
    std::vector<int64_t> big = sizes;
    big.back() = big.back() * 2 + 1;
    std::vector<int64_t> st = contiguousStrides(big);
    st.back() = 2;
    view = Tensor::empty(t.dtype(), big).view(sizes, st, 1);
  }
  view.copyFrom(t);
  return view;
}

std::string compare(const Tensor &got, const Tensor &ref) {
  if (got.dtype() != ref.dtype()) return "dtypes differ";
  if (got.sizes() != ref.sizes()) return "sizes differ";
  double rtol = ref.dtype() == DType::BF16 ? 1e-2 : 1e-5, scale = 0;
  for (int64_t i = 0; i < ref.numel(); ++i)
    if (std::isfinite(ref.getDouble(i))) scale = std::max(scale, std::fabs(ref.getDouble(i)));
  for (int64_t i = 0; i < ref.numel(); ++i) {
    double g = got.getDouble(i), r = ref.getDouble(i);
    if (std::isnan(r) || std::isinf(r)) {
      if (std::isnan(r) ? !std::isnan(g) : g != r)
        return "element " + std::to_string(i) + ": got " + std::to_string(g) + ", expected " +
               std::to_string(r);
      continue;
    }
    if (!(std::fabs(g - r) <= rtol * (std::fabs(r) + scale)))
      return "element " + std::to_string(i) + ": got " + std::to_string(g) + ", expected " +
             std::to_string(r);
  }
  return "";
}

struct RunStats {
  int compiled = 0;
  std::vector<std::string> dumps;
};

/// Runs g's top-level ops in order: library calls (ops and epilogue fusions) compiled by the
/// CPU target, everything else by its reference kernel. Every library call must be supported.
std::vector<RtValue> runCompiled(Target &target, const Graph &g, std::vector<RtValue> inputs,
                                 RunStats *stats = nullptr) {
  std::map<const Value *, RtValue> env;
  for (size_t i = 0; i < g.numInputs(); ++i)
    env[g.input(i)] = inputs[i];
  for (const Op *op : *g.body()) {
    std::vector<RtValue> in;
    for (const Value *v : op->operands())
      in.push_back(env.at(v));
    if (op->name() == "return") return in;
    std::vector<RtValue> out;
    bool library = op->name() == "fusion" || op->name().find("matmul") != std::string::npos ||
                   op->name() == "mm" || op->name() == "bmm" || op->name() == "linear" ||
                   op->name() == "addmm" || op->name() == "baddbmm" ||
                   op->name().rfind("conv", 0) == 0 || op->name().find("pool") != std::string::npos;
    if (library) {
      std::string why = target.whyNotSupported(*op);
      EXPECT_EQ(why, "") << op->describe();
      auto exe = target.compile(*op);
      out = exe->run(in);
      if (stats) {
        ++stats->compiled;
        for (auto &[name, text] : exe->dumpFiles())
          stats->dumps.push_back(text);
      }
    } else {
      out = op->def().kernel(*op, in);
    }
    for (size_t i = 0; i < out.size(); ++i)
      env[op->result(i)] = out[i];
  }
  ADD_FAILURE() << "no return";
  return {};
}

class Dnnl : public ::testing::Test {
protected:
  std::unique_ptr<Target> target = makeCpuTarget();
  std::mt19937 rng{1234};
  bool allowFallback = false;
  bool allowSlow = false; // oneDNN's reference implementation accepted (rare layouts)

  /// Compares the compiled run of g with the interpreter; returns how many calls compiled.
  int check(const Graph &g, const std::vector<RtValue> &inputs, const std::string &what) {
    std::vector<RtValue> ref = interpret(g, inputs);
    RunStats stats;
    std::vector<RtValue> got = runCompiled(*target, g, inputs, &stats);
    EXPECT_EQ(got.size(), ref.size()) << what;
    for (size_t i = 0; i < got.size() && i < ref.size(); ++i)
      EXPECT_EQ(compare(got[i].tensor(), ref[i].tensor()), "") << what << "\n" << stats.dumps[0];
    // Unless told otherwise, oneDNN itself must have run (not the reference fallback), and
    // not its slow reference implementation ("ref:any") either.
    for (const std::string &d : stats.dumps) {
      if (!allowFallback)
        EXPECT_EQ(d.find("reference kernel"), std::string::npos) << what << "\n" << d;
      if (!allowSlow) EXPECT_EQ(d.find("ref:"), std::string::npos) << what << "\n" << d;
    }
    return stats.compiled;
  }
};

/// A graph of one op applied to inputs of the given types (attributes as given), with the
/// inputs listed in `constants` replaced by constant ops holding the given tensors.
struct OneOp {
  std::unique_ptr<Graph> g = std::make_unique<Graph>("one");
  std::vector<RtValue> inputs;
};

OneOp oneOp(const std::string &name, const std::vector<Tensor> &args, AttrMap attrs,
            const std::set<size_t> &constants = {}, const std::vector<std::string> &post = {}) {
  OneOp r;
  Builder b(r.g->body());
  std::vector<Value *> operands;
  for (size_t i = 0; i < args.size(); ++i) {
    if (constants.count(i)) {
      operands.push_back(b.constantTensor(args[i]));
    } else {
      Shape s(args[i].sizes().begin(), args[i].sizes().end());
      operands.push_back(r.g->addInput(Type::tensor(args[i].dtype(), s)));
      r.inputs.push_back(args[i]);
    }
  }
  Value *y = b.op(name, operands, std::move(attrs));
  for (const std::string &p : post)
    y = b.op(p, {y});
  b.createWithTypes("return", {y}, {});
  return r;
}

bool runFuse(Graph &g) {
  passes::PassContext ctx(
      {{"max-group-size", "64"}, {"min-group-size", "2"}, {"duplicate-cheap", "true"}});
  return passes::lookupPass("fuse")->run(g, ctx);
}

// ---- matmul family ----

TEST_F(Dnnl, MatmulShapes) {
  // lhs, rhs shapes: plain, odd sizes, folded batch, batched, broadcast batch, vectors.
  std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> shapes = {
      {{5, 7}, {7, 3}},          {{1, 1}, {1, 1}},
      {{2, 3, 5, 7}, {7, 4}},    {{3, 5, 7}, {3, 7, 4}},
      {{2, 1, 5, 7}, {3, 7, 4}}, {{7}, {2, 7, 3}},
      {{2, 5, 7}, {7}},          {{7}, {7}},
      {{5, 7}, {2, 7, 3}},       {{33, 65}, {65, 17}}};
  for (DType dt : {DType::F32, DType::BF16})
    for (auto &[a, bsz] : shapes) {
      Tensor A = randomTensor(dt, a, rng), B = randomTensor(dt, bsz, rng);
      OneOp o = oneOp("matmul", {A, B}, {});
      EXPECT_EQ(check(*o.g, o.inputs, "matmul " + o.g->body()->front()->describe()), 1);
    }
}

TEST_F(Dnnl, MatmulStridedInputs) {
  for (int kind : {0, 1}) {
    Tensor A = randomTensor(DType::F32, {2, 5, 9}, rng), B = randomTensor(DType::F32, {9, 6}, rng);
    OneOp o = oneOp("matmul", {A, B}, {});
    check(*o.g, {relayout(A, kind), relayout(B, kind)}, "strided kind " + std::to_string(kind));
    OneOp m = oneOp("bmm", {A, randomTensor(DType::F32, {2, 9, 4}, rng)}, {});
    check(*m.g, {relayout(m.inputs[0].tensor(), kind), relayout(m.inputs[1].tensor(), kind)},
          "bmm strided");
  }
}

TEST_F(Dnnl, LinearMmBmmAddmm) {
  for (DType dt : {DType::F32, DType::BF16}) {
    Tensor x = randomTensor(dt, {3, 5, 19}, rng), w = randomTensor(dt, {11, 19}, rng),
           bias = randomTensor(dt, {11}, rng);
    for (bool constant : {false, true}) {
      std::set<size_t> c = constant ? std::set<size_t>{1, 2} : std::set<size_t>{};
      OneOp l = oneOp("linear", {x, w, bias}, {}, c);
      check(*l.g, l.inputs, "linear bias constant=" + std::to_string(constant));
      OneOp l2 = oneOp("linear", {randomTensor(dt, {4, 19}, rng), w}, {}, c);
      check(*l2.g, l2.inputs, "linear without bias");
    }
    OneOp lv = oneOp("linear", {x, randomTensor(dt, {19}, rng)}, {});
    check(*lv.g, lv.inputs, "linear with a 1-D weight");
    OneOp mm = oneOp("mm", {randomTensor(dt, {6, 13}, rng), randomTensor(dt, {13, 5}, rng)}, {});
    check(*mm.g, mm.inputs, "mm");
    OneOp bmm =
        oneOp("bmm", {randomTensor(dt, {3, 6, 13}, rng), randomTensor(dt, {3, 13, 5}, rng)}, {});
    check(*bmm.g, bmm.inputs, "bmm");
    for (double alpha : {1.0, 0.5})
      for (double beta : {1.0, 0.0}) {
        OneOp am = oneOp("addmm",
                         {randomTensor(dt, {5}, rng), randomTensor(dt, {6, 13}, rng),
                          randomTensor(dt, {13, 5}, rng)},
                         {{"alpha", Attr(alpha)}, {"beta", Attr(beta)}});
        check(*am.g, am.inputs, "addmm");
        OneOp bb = oneOp("baddbmm",
                         {randomTensor(dt, {2, 6, 1}, rng), randomTensor(dt, {2, 6, 13}, rng),
                          randomTensor(dt, {2, 13, 5}, rng)},
                         {{"alpha", Attr(alpha)}, {"beta", Attr(beta)}});
        check(*bb.g, bb.inputs, "baddbmm");
      }
  }
}

// ---- epilogues formed by the fuse pass ----

/// linear(x, W, b) followed by `post` (unary op names, or "add:res" / "mul:scalar" ...).
TEST_F(Dnnl, LinearEpilogues) {
  std::vector<std::vector<std::string>> chains = {{"relu"},
                                                  {"gelu"},
                                                  {"gelu_tanh"},
                                                  {"tanh"},
                                                  {"sigmoid"},
                                                  {"silu"},
                                                  {"add_residual"},
                                                  {"relu", "add_residual"},
                                                  {"mul_scalar", "add_row"},
                                                  {"hardtanh"},
                                                  {"leaky_relu"},
                                                  {"sub_residual", "abs"},
                                                  {"maximum_residual"},
                                                  {"elu", "square"}};
  for (DType dt : {DType::F32, DType::BF16})
    for (bool constW : {true, false})
      for (const auto &chain : chains) {
        auto g = std::make_unique<Graph>("epi");
        Builder b(g->body());
        std::vector<RtValue> inputs;
        auto input = [&](std::vector<int64_t> sizes) {
          Tensor t = randomTensor(dt, sizes, rng);
          inputs.push_back(t);
          return g->addInput(Type::tensor(dt, Shape(sizes.begin(), sizes.end())));
        };
        Value *x = input({2, 7, 21});
        Value *w = constW ? b.constantTensor(randomTensor(dt, {13, 21}, rng)) : input({13, 21});
        Value *bias = b.constantTensor(randomTensor(dt, {13}, rng));
        Value *y = b.op("linear", {x, w, bias});
        std::string name;
        for (const std::string &p : chain) {
          name += p + " ";
          if (p == "gelu_tanh")
            y = b.op("gelu", {y}, {{"approximate", Attr("tanh")}});
          else if (p == "hardtanh")
            y = b.op("hardtanh", {y}, {{"min_val", Attr(-0.5)}, {"max_val", Attr(0.25)}});
          else if (p == "leaky_relu")
            y = b.op("leaky_relu", {y}, {{"negative_slope", Attr(0.2)}});
          else if (p == "add_residual")
            y = b.op("add", {y, input({2, 7, 13})});
          else if (p == "sub_residual")
            y = b.op("sub", {y, input({2, 7, 13})});
          else if (p == "maximum_residual")
            y = b.op("maximum", {input({2, 7, 13}), y});
          else if (p == "mul_scalar")
            y = b.op("mul", {y, b.constantFloat(0.125)});
          else if (p == "add_row")
            y = b.op("add", {y, input({7, 1})});
          else
            y = b.op(p, {y});
        }
        b.createWithTypes("return", {y}, {});
        ASSERT_TRUE(runFuse(*g));
        const Op *fusion = nullptr;
        for (const Op *op : *g->body())
          if (op->name() == "fusion") fusion = op;
        ASSERT_TRUE(fusion) << name;
        EXPECT_EQ(fusion->attr("kind").asStr(), "epilogue");
        EXPECT_EQ(check(*g, inputs, name + dtypeName(dt).data()), 1) << name;
      }
}

TEST_F(Dnnl, AttentionScoresEpilogue) {
  // scores = q @ k^T * 0.125 + mask, k^T a transposed (strided) view.
  const char *text = R"(
graph @scores(%q: f32[2,4,9,16], %k: f32[2,4,9,16], %mask: f32[2,1,1,9]) -> (f32[2,4,9,9]) {
  %kt = transpose(%k) {dim0 = -2, dim1 = -1} : f32[2,4,16,9]
  %s = matmul(%q, %kt) : f32[2,4,9,9]
  %c = constant() {value = 0.125} : float
  %m = mul(%s, %c) : f32[2,4,9,9]
  %o = add(%m, %mask) : f32[2,4,9,9]
  return(%o)
})";
  auto g = parseGraph(text);
  ASSERT_TRUE(runFuse(*g));
  std::vector<RtValue> in = {randomTensor(DType::F32, {2, 4, 9, 16}, rng),
                             randomTensor(DType::F32, {2, 4, 9, 16}, rng),
                             randomTensor(DType::F32, {2, 1, 1, 9}, rng)};
  EXPECT_EQ(check(*g, in, "attention scores"), 1);
}

/// q-by-k of attention on q and k split from one [S, 3D] projection (rows 3D apart: oneDNN plans
/// it on gemm) and a causal probabilities-by-v product (blocks on gemm), while gemm's kernels
/// are being made (the plans' standby, dense copies on brgemm, or the causal product whole)
/// and after (gemm itself): both against the interpreter.
TEST_F(Dnnl, GemmProductsDoNotWaitForGemmKernels) {
  const char *text = R"(
graph @attn(%q: f32[2,128,64], %k: f32[2,128,64], %p: f32[2,128,128], %v: f32[2,128,64]) -> (f32[2,128,128], f32[2,128,64]) {
  %kt = transpose(%k) {dim0 = -2, dim1 = -1} : f32[2,64,128]
  %s = matmul(%q, %kt) : f32[2,128,128]
  %o = matmul(%p, %v) {causal = "lhs_lower"} : f32[2,128,64]
  return(%s, %o)
})";
  auto g = parseGraph(text);
  Tensor qkv = randomTensor(DType::F32, {2, 128, 192}, rng);
  auto split = [&](int64_t i) { return qkv.view({2, 128, 64}, {128 * 192, 192, 1}, 64 * i); };
  Tensor p = randomTensor(DType::F32, {2, 128, 128}, rng);
  for (int64_t m = 0; m < 2; ++m) // lower-triangular probabilities
    for (int64_t i = 0; i < 128; ++i)
      for (int64_t j = i + 1; j < 128; ++j)
        p.setDouble((m * 128 + i) * 128 + j, 0);
  std::vector<RtValue> in = {split(0), split(1), p, split(2)};
  std::vector<RtValue> ref = interpret(*g, in);
  // The plans are made at the first run, while the kernels are pending; the second run finds
  // them made.
  setGemmKernelsPendingForTesting(true);
  std::vector<const Op *> products;
  for (const Op *op : *g->body())
    if (op->name() == "matmul") products.push_back(op);
  ASSERT_EQ(products.size(), 2u);
  std::vector<std::shared_ptr<const Executable>> exes;
  for (const Op *op : products)
    exes.push_back(target->compile(*op));
  Tensor kt = in[1].tensor().view({2, 64, 128}, {128 * 192, 1, 192}, 64);
  std::vector<std::vector<RtValue>> operands = {{in[0], kt}, {in[2], in[3]}};
  for (bool pending : {true, false}) {
    setGemmKernelsPendingForTesting(pending);
    for (size_t i = 0; i < 2; ++i) {
      std::vector<RtValue> got = exes[i]->run(operands[i]);
      EXPECT_EQ(compare(got[0].tensor(), ref[i].tensor()), "")
          << "pending " << pending << " #" << i;
    }
  }
  std::string dumps;
  for (const auto &exe : exes)
    for (auto &[name, text] : exe->dumpFiles())
      dumps += text;
  EXPECT_NE(dumps.find("gemm:jit (brg"), std::string::npos) << dumps; // q-by-k's standby
  EXPECT_NE(dumps.find("causal blocks"), std::string::npos) << dumps;
  setGemmKernelsPendingForTesting(std::nullopt);
}

// ---- convolution ----

TEST_F(Dnnl, ConvShapesAndAttributes) {
  struct Conv {
    std::string op;
    std::vector<int64_t> x, w;
    AttrMap attrs;
  };
  std::vector<Conv> cases = {
      {"conv2d", {2, 3, 9, 11}, {8, 3, 3, 3}, {}},
      {"conv2d",
       {1, 4, 10, 7},
       {6, 4, 3, 2},
       {{"stride", Attr(std::vector<int64_t>{2, 1})},
        {"padding", Attr(std::vector<int64_t>{1, 1})}}},
      {"conv2d",
       {2, 6, 12, 12},
       {6, 2, 3, 3},
       {{"groups", Attr(int64_t{3})}, {"dilation", Attr(std::vector<int64_t>{2})}}},
      {"conv2d",
       {2, 8, 8, 8},
       {8, 1, 3, 3},
       {{"groups", Attr(int64_t{8})}, {"padding", Attr(std::vector<int64_t>{1})}}},
      {"conv2d", {1, 3, 8, 9}, {5, 3, 4, 4}, {{"padding_mode", Attr("same")}}},
      {"conv2d",
       {1, 3, 8, 9},
       {5, 3, 3, 3},
       {{"padding_mode", Attr("valid")}, {"stride", Attr(std::vector<int64_t>{2})}}},
      {"conv2d", {3, 9, 7}, {4, 3, 1, 1}, {}}, // unbatched
      {"conv1d", {2, 5, 17}, {7, 5, 3}, {{"padding", Attr(std::vector<int64_t>{1})}}},
      {"conv1d",
       {2, 4, 16},
       {4, 2, 5},
       {{"stride", Attr(std::vector<int64_t>{3})}, {"groups", Attr(int64_t{2})}}},
      {"conv1d", {4, 15}, {6, 4, 2}, {{"dilation", Attr(std::vector<int64_t>{3})}}}, // unbatched
      {"conv_transpose2d",
       {2, 4, 5, 6},
       {4, 3, 3, 3},
       {{"stride", Attr(std::vector<int64_t>{2})},
        {"padding", Attr(std::vector<int64_t>{1})},
        {"output_padding", Attr(std::vector<int64_t>{1})}}},
      {"conv_transpose2d",
       {1, 6, 4, 4},
       {6, 2, 2, 3},
       {{"groups", Attr(int64_t{3})}, {"dilation", Attr(std::vector<int64_t>{2})}}},
      {"conv_transpose1d",
       {2, 4, 9},
       {4, 5, 4},
       {{"stride", Attr(std::vector<int64_t>{3})}, {"padding", Attr(std::vector<int64_t>{2})}}},
  };
  for (DType dt : {DType::F32, DType::BF16})
    for (const Conv &c : cases)
      for (bool constW : {true, false}) {
        bool tr = c.op.rfind("conv_transpose", 0) == 0;
        int64_t groups = c.attrs.count("groups") ? c.attrs.at("groups").asInt() : 1;
        Tensor x = randomTensor(dt, c.x, rng), w = randomTensor(dt, c.w, rng),
               bias = randomTensor(dt, {tr ? c.w[1] * groups : c.w[0]}, rng);
        std::set<size_t> consts = constW ? std::set<size_t>{1, 2} : std::set<size_t>{};
        OneOp o = oneOp(c.op, {x, w, bias}, c.attrs, consts);
        std::string what = o.g->body()->back()->prev()->describe() + " " + dtypeName(dt).data();
        check(*o.g, o.inputs, what);
        OneOp nb = oneOp(c.op, {x, w}, c.attrs, constW ? std::set<size_t>{1} : std::set<size_t>{});
        check(*nb.g, nb.inputs, what + " without bias");
      }
}

TEST_F(Dnnl, ConvChannelsLastAndStrided) {
  // NHWC activations ([N,H,W,C] with layout = "nhwc"), contiguous and strided.
  for (const char *op : {"conv1d", "conv2d"}) {
    bool two = std::string(op) == "conv2d";
    std::vector<int64_t> xs =
        two ? std::vector<int64_t>{2, 7, 9, 5} : std::vector<int64_t>{2, 9, 5};
    std::vector<int64_t> ws =
        two ? std::vector<int64_t>{6, 5, 3, 3} : std::vector<int64_t>{6, 5, 3};
    Tensor x = randomTensor(DType::F32, xs, rng);
    OneOp o = oneOp(op, {x, randomTensor(DType::F32, ws, rng), randomTensor(DType::F32, {6}, rng)},
                    {{"layout", Attr("nhwc")}, {"padding", Attr(std::vector<int64_t>{1})}}, {1, 2},
                    {"relu"});
    ASSERT_TRUE(runFuse(*o.g));
    check(*o.g, o.inputs, std::string(op) + " nhwc + relu");
    check(*o.g, {relayout(x, 1)}, std::string(op) + " nhwc strided input");
    // channels-first op on a strided (transposed) input
    Tensor xc = randomTensor(
        DType::F32, two ? std::vector<int64_t>{2, 5, 7, 9} : std::vector<int64_t>{2, 5, 9}, rng);
    OneOp g = oneOp(op, {xc, randomTensor(DType::F32, ws, rng)}, {}, {1});
    check(*g.g, {relayout(xc, 0)}, std::string(op) + " transposed input");
  }
}

TEST_F(Dnnl, ConvEpilogues) {
  // conv + bias + relu, conv + residual add (+ relu), conv + silu, conv * scale + shift
  // (a frozen batch norm), in both layouts.
  for (const char *layout : {"nchw", "nhwc"})
    for (int variant = 0; variant < 4; ++variant) {
      bool nhwc = std::string(layout) == "nhwc";
      std::vector<int64_t> xs =
          nhwc ? std::vector<int64_t>{2, 10, 9, 8} : std::vector<int64_t>{2, 8, 10, 9};
      std::vector<int64_t> ys =
          nhwc ? std::vector<int64_t>{2, 10, 9, 16} : std::vector<int64_t>{2, 16, 10, 9};
      std::vector<int64_t> cs = nhwc ? std::vector<int64_t>{16} : std::vector<int64_t>{16, 1, 1};
      auto g = std::make_unique<Graph>("conv_epi");
      Builder b(g->body());
      std::vector<RtValue> inputs;
      Tensor x = randomTensor(DType::F32, xs, rng);
      inputs.push_back(x);
      Value *xv = g->addInput(Type::tensor(DType::F32, Shape(xs.begin(), xs.end())));
      Value *w = b.constantTensor(randomTensor(DType::F32, {16, 8, 3, 3}, rng));
      Value *bias = b.constantTensor(randomTensor(DType::F32, {16}, rng));
      Value *y =
          b.op("conv2d", {xv, w, bias},
               {{"padding", Attr(std::vector<int64_t>{1})}, {"layout", Attr(std::string(layout))}});
      if (variant == 0) y = b.op("relu", {y});
      if (variant == 1) {
        Tensor r = randomTensor(DType::F32, ys, rng);
        inputs.push_back(r);
        y = b.op("add", {y, g->addInput(Type::tensor(DType::F32, Shape(ys.begin(), ys.end())))});
        y = b.op("relu", {y});
      }
      if (variant == 2) y = b.op("silu", {y});
      if (variant == 3) {
        y = b.op("mul", {y, b.constantTensor(randomTensor(DType::F32, cs, rng))});
        y = b.op("add", {y, b.constantTensor(randomTensor(DType::F32, cs, rng))});
      }
      b.createWithTypes("return", {y}, {});
      ASSERT_TRUE(runFuse(*g));
      // Variant 3's per-channel scale is no convolution post-op (fuse_rules::convTakesPostOp):
      // the conv, then one native kernel for the scale and shift.
      EXPECT_EQ(check(*g, inputs, std::string(layout) + " variant " + std::to_string(variant)),
                variant == 3 ? 2 : 1);
    }
}

TEST_F(Dnnl, ConvTransposeEpilogue) {
  for (const char *layout : {"nchw", "nhwc"}) {
    bool nhwc = std::string(layout) == "nhwc";
    std::vector<int64_t> xs =
        nhwc ? std::vector<int64_t>{2, 5, 6, 8} : std::vector<int64_t>{2, 8, 5, 6};
    OneOp o =
        oneOp("conv_transpose2d",
              {randomTensor(DType::F32, xs, rng), randomTensor(DType::F32, {8, 4, 3, 3}, rng),
               randomTensor(DType::F32, {4}, rng)},
              {{"stride", Attr(std::vector<int64_t>{2})}, {"layout", Attr(std::string(layout))}},
              {1, 2}, {"silu"});
    ASSERT_TRUE(runFuse(*o.g));
    EXPECT_EQ(check(*o.g, o.inputs, std::string("conv_transpose2d + silu ") + layout), 1);
  }
}

// ---- pooling ----

TEST_F(Dnnl, Pooling) {
  struct Pool {
    std::string op;
    std::vector<int64_t> x;
    AttrMap attrs;
  };
  std::vector<Pool> cases = {
      {"max_pool2d",
       {2, 3, 9, 11},
       {{"kernel_size", Attr(std::vector<int64_t>{3})}, {"stride", Attr(std::vector<int64_t>{2})}}},
      {"max_pool2d",
       {2, 3, 9, 11},
       {{"kernel_size", Attr(std::vector<int64_t>{3})},
        {"stride", Attr(std::vector<int64_t>{2})},
        {"padding", Attr(std::vector<int64_t>{1})},
        {"ceil_mode", Attr(true)}}},
      {"max_pool2d",
       {1, 2, 10, 10},
       {{"kernel_size", Attr(std::vector<int64_t>{2})},
        {"dilation", Attr(std::vector<int64_t>{2})}}},
      {"max_pool1d", {3, 13}, {{"kernel_size", Attr(std::vector<int64_t>{2})}}},
      {"avg_pool2d",
       {2, 3, 9, 11},
       {{"kernel_size", Attr(std::vector<int64_t>{3})},
        {"stride", Attr(std::vector<int64_t>{2})},
        {"padding", Attr(std::vector<int64_t>{1})}}},
      {"avg_pool2d",
       {2, 3, 9, 11},
       {{"kernel_size", Attr(std::vector<int64_t>{3})},
        {"padding", Attr(std::vector<int64_t>{1})},
        {"count_include_pad", Attr(false)}}},
      {"avg_pool2d",
       {2, 3, 9, 10},
       {{"kernel_size", Attr(std::vector<int64_t>{2})},
        {"ceil_mode", Attr(true)},
        {"count_include_pad", Attr(false)}}},
      {"avg_pool1d",
       {2, 4, 15},
       {{"kernel_size", Attr(std::vector<int64_t>{4})}, {"stride", Attr(std::vector<int64_t>{3})}}},
      {"adaptive_avg_pool2d", {2, 8, 6, 6}, {{"output_size", Attr(std::vector<int64_t>{1, 1})}}},
      {"adaptive_avg_pool2d", {2, 8, 6, 9}, {{"output_size", Attr(std::vector<int64_t>{2, 3})}}},
      {"adaptive_max_pool2d", {2, 8, 6, 6}, {{"output_size", Attr(std::vector<int64_t>{3})}}},
      {"max_pool2d",
       {2, 7, 9, 3},
       {{"kernel_size", Attr(std::vector<int64_t>{3})},
        {"stride", Attr(std::vector<int64_t>{2})},
        {"layout", Attr("nhwc")}}},
      {"avg_pool2d",
       {2, 7, 9, 3},
       {{"kernel_size", Attr(std::vector<int64_t>{2})}, {"layout", Attr("nhwc")}}},
  };
  for (DType dt : {DType::F32, DType::BF16})
    for (const Pool &p : cases) {
      Tensor x = randomTensor(dt, p.x, rng);
      OneOp o = oneOp(p.op, {x}, p.attrs);
      allowSlow = p.attrs.count("dilation") > 0; // oneDNN 2.6 has only ref:any for dilated pools
      std::string what = o.g->body()->front()->describe() + " " + dtypeName(dt).data();
      check(*o.g, o.inputs, what);
      check(*o.g, {relayout(x, 1)}, what + " strided");
    }
}

// ---- what the library path refuses, and shapes oneDNN rejects at run time ----

TEST_F(Dnnl, UnsupportedSaysWhy) {
  Tensor a = randomTensor(DType::F64, {3, 4}, rng), b = randomTensor(DType::F64, {4, 2}, rng);
  OneOp f64 = oneOp("mm", {a, b}, {});
  EXPECT_NE(target->whyNotSupported(*f64.g->body()->front()), "");
  OneOp div = oneOp(
      "avg_pool2d", {randomTensor(DType::F32, {1, 2, 4, 4}, rng)},
      {{"kernel_size", Attr(std::vector<int64_t>{2})}, {"divisor_override", Attr(int64_t{3})}});
  EXPECT_NE(target->whyNotSupported(*div.g->body()->front()), "");
  OneOp idx = oneOp("max_pool2d_with_indices", {randomTensor(DType::F32, {1, 2, 4, 4}, rng)},
                    {{"kernel_size", Attr(std::vector<int64_t>{2})}});
  EXPECT_NE(target->whyNotSupported(*idx.g->body()->front()), "");
  OneOp addmm = oneOp("addmm",
                      {randomTensor(DType::F32, {2}, rng), randomTensor(DType::F32, {3, 4}, rng),
                       randomTensor(DType::F32, {4, 2}, rng)},
                      {{"beta", Attr(0.5)}});
  EXPECT_NE(target->whyNotSupported(*addmm.g->body()->front()), "");
}

TEST_F(Dnnl, RejectedShapesRunTheReferenceKernel) {
  // Adaptive pooling with uneven windows (7 -> 3) has no oneDNN form: the executable runs the
  // reference kernel for that shape and says so in its dump.
  OneOp o = oneOp("adaptive_avg_pool1d", {randomTensor(DType::F32, {2, 3, 7}, rng)},
                  {{"output_size", Attr(std::vector<int64_t>{3})}});
  auto exe = target->compile(*o.g->body()->front());
  allowFallback = true;
  check(*o.g, o.inputs, "uneven adaptive pool");
  exe->run(o.inputs);
  EXPECT_NE(exe->dumpFiles()[0].second.find("reference kernel"), std::string::npos);
}

TEST_F(Dnnl, RunIntoWritesTheGivenBuffer) {
  OneOp o = oneOp("linear",
                  {randomTensor(DType::F32, {6, 10}, rng), randomTensor(DType::F32, {4, 10}, rng),
                   randomTensor(DType::F32, {4}, rng)},
                  {}, {1, 2});
  const Op *lin = o.g->body()->back()->prev();
  auto exe = target->compile(*lin);
  ASSERT_TRUE(exe->canRunInto());
  std::vector<RtValue> in = {o.inputs[0], lin->operand(1)->definingOp()->attr("value").asTensor(),
                             lin->operand(2)->definingOp()->attr("value").asTensor()};
  Tensor out = Tensor::empty(DType::F32, {6, 4});
  exe->runInto(in, std::vector<Tensor>{out});
  EXPECT_EQ(compare(out, interpret(*o.g, o.inputs)[0].tensor()), "");
  Tensor wrong = Tensor::empty(DType::F32, {4, 6});
  EXPECT_THROW(exe->runInto(in, std::vector<Tensor>{wrong}), KernelError);
}

TEST_F(Dnnl, NonFiniteInputsKeepPyTorchSemantics) {
  // oneDNN's relu / clip post-ops and max pooling drop NaN; PyTorch propagates it. Such calls
  // run the reference kernel (Inf too where it can make a NaN in the accumulator).
  for (const char *act : {"relu", "relu6", "hardtanh", "gelu"})
    for (double special : {std::nan(""), double(INFINITY)}) {
      Tensor x = randomTensor(DType::F32, {4, 16}, rng);
      x.setDouble(17, special);
      OneOp o = oneOp("linear", {x, randomTensor(DType::F32, {8, 16}, rng)}, {}, {1}, {act});
      ASSERT_TRUE(runFuse(*o.g));
      check(*o.g, o.inputs, std::string(act) + " on a non-finite input");
    }
  Tensor x = randomTensor(DType::F32, {1, 16, 4, 4}, rng);
  x.setDouble(5, std::nan(""));
  x.setDouble(40, INFINITY);
  OneOp p = oneOp("max_pool2d", {x}, {{"kernel_size", Attr(std::vector<int64_t>{2})}});
  check(*p.g, p.inputs, "max pool with NaN");

  // The NaN scan reads dense tensors of any dim order as flat memory (large ones on several
  // threads) and strided ones element by element: a NaN anywhere, in any layout, is seen.
  auto pool = [&](const Tensor &in, const std::string &what) {
    OneOp q = oneOp("max_pool2d", {in}, {{"kernel_size", Attr(std::vector<int64_t>{2})}});
    check(*q.g, q.inputs, what);
  };
  for (DType dt : {DType::F32, DType::BF16})
    for (int64_t hw : {int64_t(4), int64_t(256)}) { // 256: 1M elements, the parallel scan
      int64_t n = 16 * hw * hw;
      for (int64_t at : {int64_t(0), n / 3, n - 1}) {
        std::string tag = std::string(dtypeName(dt)) + " " + std::to_string(hw) + "x" +
                          std::to_string(hw) + " NaN at " + std::to_string(at);
        Tensor nhwc = randomTensor(dt, {1, hw, hw, 16}, rng); // channels-last memory
        nhwc.setDouble(at, std::nan(""));
        pool(nhwc.view({1, 16, hw, hw}, {n, 1, hw * 16, 16}, 0), "channels-last " + tag);
        Tensor wide = randomTensor(dt, {1, 16, hw, 2 * hw}, rng); // every other column
        wide.setDouble(2 * at, std::nan(""));
        pool(wide.view({1, 16, hw, hw}, {2 * n, hw * hw * 2, hw * 2, 2}, 0), "strided " + tag);
      }
    }
}

TEST_F(Dnnl, RandomConvPoolAndMatmulConfigs) {
  // Random attribute combinations (invalid ones are skipped by type inference): whatever
  // oneDNN is given must match the interpreter, and it must run oneDNN, not the fallback.
  allowSlow = true; // some odd combinations only have oneDNN's reference implementation
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  int ran = 0;
  for (int iter = 0; iter < 80; ++iter) {
    int nd = pick(1, 2), groups = pick(1, 3), k = pick(1, 4);
    bool nhwc = pick(0, 1), unbatched = pick(0, 4) == 0;
    int64_t cin = groups * pick(1, 3), cout = groups * pick(1, 3);
    std::vector<int64_t> x = {pick(1, 3), cin};
    for (int d = 0; d < nd; ++d)
      x.push_back(pick(1, 12));
    if (nhwc) std::rotate(x.begin() + 1, x.begin() + 2, x.end());
    if (unbatched) x.erase(x.begin());
    std::vector<int64_t> w = {cout, cin / groups};
    for (int d = 0; d < nd; ++d)
      w.push_back(k);
    AttrMap attrs = {{"stride", Attr(std::vector<int64_t>{pick(1, 3)})},
                     {"dilation", Attr(std::vector<int64_t>{pick(1, 2)})},
                     {"groups", Attr(int64_t{groups})},
                     {"layout", Attr(std::string(nhwc ? "nhwc" : "nchw"))}};
    int mode = pick(0, 3);
    if (mode == 0)
      attrs["padding_mode"] = Attr(std::string("same"));
    else if (mode == 1)
      attrs["padding_mode"] = Attr(std::string("valid"));
    else
      attrs["padding"] = Attr(std::vector<int64_t>{pick(0, 2)});
    if (mode == 0) attrs["stride"] = Attr(std::vector<int64_t>{1});
    std::string op = nd == 1 ? "conv1d" : "conv2d";
    OneOp o;
    try {
      o = oneOp(op,
                {randomTensor(DType::F32, x, rng), randomTensor(DType::F32, w, rng),
                 randomTensor(DType::F32, {cout}, rng)},
                attrs, pick(0, 1) ? std::set<size_t>{1} : std::set<size_t>{});
    } catch (const std::exception &) {
      continue; // not a valid convolution
    }
    check(*o.g, o.inputs, o.g->body()->back()->prev()->describe());
    ++ran;
    // A pooling over the same input.
    AttrMap pa = {{"kernel_size", Attr(std::vector<int64_t>{pick(1, 3)})},
                  {"stride", Attr(std::vector<int64_t>{pick(1, 3)})},
                  {"ceil_mode", Attr(pick(0, 1) == 1)},
                  {"layout", Attr(std::string(nhwc ? "nhwc" : "nchw"))}};
    pa["padding"] = Attr(std::vector<int64_t>{pick(0, pa["kernel_size"].asInts()[0] / 2)});
    std::string pool = std::string(pick(0, 1) ? "max_pool" : "avg_pool") + (nd == 1 ? "1d" : "2d");
    OneOp p;
    try {
      p = oneOp(pool, {randomTensor(DType::F32, x, rng)}, pa);
    } catch (const std::exception &) {
      continue;
    }
    allowFallback = true; // ceil-mode averages past the padding run the reference kernel
    check(*p.g, p.inputs, p.g->body()->front()->describe());
    allowFallback = false;
  }
  EXPECT_GT(ran, 25);
  for (int iter = 0; iter < 40; ++iter) {
    auto dims = [&](int rank) {
      std::vector<int64_t> d;
      for (int i = 0; i < rank; ++i)
        d.push_back(pick(1, 9));
      return d;
    };
    int ra = pick(1, 4), rb = pick(1, 4);
    std::vector<int64_t> a = dims(ra), b = dims(rb);
    if (rb >= 2)
      b[static_cast<size_t>(rb - 2)] = a.back();
    else
      b[0] = a.back();
    for (int i = 0; i + 2 < std::min(ra, rb); ++i) // broadcastable batch dims
      if (pick(0, 1))
        b[static_cast<size_t>(rb - 3 - i)] = 1;
      else
        a[static_cast<size_t>(ra - 3 - i)] = b[static_cast<size_t>(rb - 3 - i)];
    OneOp o;
    try {
      o = oneOp("matmul", {randomTensor(DType::F32, a, rng), randomTensor(DType::F32, b, rng)}, {});
    } catch (const std::exception &) {
      continue;
    }
    int kind = pick(0, 2);
    std::vector<RtValue> in = o.inputs;
    if (kind < 2)
      for (RtValue &v : in)
        v = relayout(v.tensor(), kind);
    check(*o.g, in, o.g->body()->back()->prev()->describe());
  }
}

// ---- symbolic dims, plan cache, threads ----

TEST_F(Dnnl, SymbolicBatchOnePlanPerShapeAndThreads) {
  const char *text = R"(
graph @f(%x: f32[s0,24], %w: f32[16,24], %b: f32[16]) -> (f32[s0,16]) {
  %y = linear(%x, %w, %b) : f32[s0,16]
  %r = gelu(%y) : f32[s0,16]
  return(%r)
})";
  auto g = parseGraph(text);
  passes::bindParameters(
      *g, {{1, randomTensor(DType::F32, {16, 24}, rng)}, {2, randomTensor(DType::F32, {16}, rng)}});
  ASSERT_TRUE(runFuse(*g));
  const Op *fusion = nullptr;
  for (const Op *op : *g->body())
    if (op->name() == "fusion") fusion = op;
  ASSERT_TRUE(fusion);
  auto exe = target->compile(*fusion);
  std::vector<int64_t> batches = {1, 5, 64, 5, 1};
  std::vector<std::vector<RtValue>> inputs;
  for (int64_t n : batches)
    inputs.push_back({randomTensor(DType::F32, {n, 24}, rng)});
  // Several threads run the one executable at once, on different shapes.
  std::vector<std::string> errors(8);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 5; ++rep) {
        const auto &in = inputs[static_cast<size_t>((t + rep) % 5)];
        std::vector<RtValue> fusionIn = {in[0]};
        for (size_t i = 1; i < fusion->numOperands(); ++i) { // the constants, as the runtime would
          const Op *c = fusion->operand(i)->definingOp();
          fusionIn.push_back(c->attr("value").kind() == AttrKind::Tensor
                                 ? RtValue(c->attr("value").asTensor())
                                 : RtValue(c->attr("value").asNumber()));
        }
        Tensor got = exe->run(fusionIn)[0].tensor();
        Tensor ref = interpret(*g, in)[0].tensor();
        if (std::string e = compare(got, ref); !e.empty()) errors[static_cast<size_t>(t)] = e;
      }
    });
  for (auto &th : threads)
    th.join();
  for (const std::string &e : errors)
    EXPECT_EQ(e, "");
  // One plan per distinct run shape: batches 1, 5 and 64.
  std::string dump = exe->dumpFiles()[0].second;
  size_t plans = 0;
  for (size_t p = dump.find("shape key"); p != std::string::npos; p = dump.find("shape key", p + 1))
    ++plans;
  EXPECT_EQ(plans, 3u) << dump;
}

} // namespace
} // namespace xjit::backend
