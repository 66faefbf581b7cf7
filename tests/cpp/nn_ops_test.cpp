// Neural-network ops (linalg, conv/pool, norms, embedding, dropout, attention): small graphs
// built with the Builder and run by the interpreter, checked against naive references written
// here from the PyTorch definitions (or against values printed by PyTorch), plus inference on
// symbolic shapes and error messages.
#include "op_test_util.h"

#include <cmath>
#include <functional>
#include <limits>
#include <tuple>

using namespace xjit;
using namespace xjit::optest;

namespace {

/// Deterministic pseudo-random values in [-1, 1) (an LCG: the same tensors on every platform).
Tensor rnd(Sizes sizes, uint64_t seed, DType dt = DType::F32) {
  Tensor t = Tensor::empty(dt, std::move(sizes));
  uint64_t s = seed * 2654435761u + 12345;
  for (int64_t i = 0; i < t.numel(); ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    t.setDouble(i, static_cast<double>(s >> 40) / static_cast<double>(1ull << 23) - 1.0);
  }
  return t;
}

/// A transposed (non-contiguous) view of a contiguous copy of t's transpose: same values.
Tensor nonContiguous2d(const Tensor &t) {
  Tensor tt = Tensor::empty(t.dtype(), {t.size(1), t.size(0)});
  for (int64_t i = 0; i < t.size(0); ++i)
    for (int64_t j = 0; j < t.size(1); ++j)
      tt.setDouble(j * t.size(0) + i, t.getDouble(i * t.size(1) + j));
  return tt.view({t.size(0), t.size(1)}, {1, t.size(0)}, 0);
}

/// Calls f(index) for every multi-index of sizes, row-major.
void forEach(const Sizes &sizes, const std::function<void(const Sizes &)> &f) {
  int64_t n = 1;
  for (int64_t s : sizes)
    n *= s;
  Sizes idx(sizes.size(), 0);
  for (int64_t lin = 0; lin < n; ++lin) {
    int64_t r = lin;
    for (size_t d = sizes.size(); d-- > 0;) {
      idx[d] = r % sizes[d];
      r /= sizes[d];
    }
    f(idx);
  }
}

int64_t lin(const Sizes &sizes, const Sizes &idx) {
  int64_t l = 0;
  for (size_t d = 0; d < sizes.size(); ++d)
    l = l * sizes[d] + idx[d];
  return l;
}

// ---- naive references ----

/// Batched matmul of contiguous [B..., n, k] x [B..., k, m] given as per-batch lambdas.
Values naiveMatmul(const Tensor &a, const Tensor &b, int64_t batches, int64_t n, int64_t k,
                   int64_t m, const std::function<int64_t(int64_t)> &aBatch,
                   const std::function<int64_t(int64_t)> &bBatch) {
  Values out;
  for (int64_t bi = 0; bi < batches; ++bi)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < m; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p)
          s += a.getDouble(aBatch(bi) * n * k + i * k + p) *
               b.getDouble(bBatch(bi) * k * m + p * m + j);
        out.push_back(s);
      }
  return out;
}

struct ConvArgs {
  Sizes stride, pad, dil;
  int64_t groups = 1;
};

/// Direct N-d convolution from the definition: out[n,oc,o] = sum x[n,ic,o*s-p+k*d] w[oc,icg,k].
Values naiveConv(const Tensor &x, const Tensor &w, const Tensor *bias, const ConvArgs &a,
                 Sizes &outSizes) {
  size_t nd = x.sizes().size() - 2;
  int64_t N = x.size(0), Cout = w.size(0), cinG = w.size(1), G = a.groups;
  outSizes = {N, Cout};
  Sizes ksz(w.sizes().begin() + 2, w.sizes().end());
  for (size_t d = 0; d < nd; ++d)
    outSizes.push_back((x.size(2 + d) + 2 * a.pad[d] - a.dil[d] * (ksz[d] - 1) - 1) / a.stride[d] +
                       1);
  Values out;
  forEach(outSizes, [&](const Sizes &o) {
    int64_t oc = o[1], g = oc / (Cout / G);
    double s = bias ? bias->getDouble(oc) : 0;
    for (int64_t icg = 0; icg < cinG; ++icg)
      forEach(ksz, [&](const Sizes &k) {
        Sizes xi = {o[0], g * cinG + icg};
        for (size_t d = 0; d < nd; ++d) {
          int64_t p = o[2 + d] * a.stride[d] - a.pad[d] + k[d] * a.dil[d];
          if (p < 0 || p >= x.size(2 + d)) return;
          xi.push_back(p);
        }
        Sizes wi = {oc, icg};
        wi.insert(wi.end(), k.begin(), k.end());
        s += x.getDouble(lin(x.sizes(), xi)) * w.getDouble(lin(w.sizes(), wi));
      });
    out.push_back(s);
  });
  return out;
}

// =============================== linear algebra ===============================

TEST(NnLinalg, MatmulRankCases) {
  Tensor v3 = rnd({3}, 1), v3b = rnd({3}, 2), m34 = rnd({3, 4}, 3), m23 = rnd({2, 3}, 4);
  // 1-D . 1-D: dot, 0-d result.
  Tensor d = run1("matmul", {v3, v3b});
  double want = 0;
  for (int i = 0; i < 3; ++i)
    want += v3.getDouble(i) * v3b.getDouble(i);
  expectNear(d, {}, {want});
  // 1-D . 2-D and 2-D . 1-D.
  expectNear(
      run1("matmul", {v3, m34}), {4},
      naiveMatmul(v3, m34, 1, 1, 3, 4, [](int64_t) { return 0; }, [](int64_t) { return 0; }));
  expectNear(
      run1("matmul", {m23, v3}), {2},
      naiveMatmul(m23, v3, 1, 2, 3, 1, [](int64_t) { return 0; }, [](int64_t) { return 0; }));
  // Batched with broadcasting: [2,1,2,3] x [3,3,4] -> [2,3,2,4].
  Tensor a = rnd({2, 1, 2, 3}, 5), b = rnd({3, 3, 4}, 6);
  expectNear(
      run1("matmul", {a, b}), {2, 3, 2, 4},
      naiveMatmul(
          a, b, 6, 2, 3, 4, [](int64_t i) { return i / 3; }, [](int64_t i) { return i % 3; }));
  // N-D . 1-D and 1-D . N-D.
  Tensor bat = rnd({2, 3, 3}, 7);
  expectNear(
      run1("matmul", {bat, v3}), {2, 3},
      naiveMatmul(bat, v3, 2, 3, 3, 1, [](int64_t i) { return i; }, [](int64_t) { return 0; }));
  expectNear(
      run1("matmul", {v3, bat}), {2, 3},
      naiveMatmul(v3, bat, 2, 1, 3, 3, [](int64_t) { return 0; }, [](int64_t i) { return i; }));
  // Empty contraction gives zeros; empty rows give an empty result.
  expectNear(run1("matmul", {rnd({2, 0}, 8), rnd({0, 3}, 9)}), {2, 3}, Values(6, 0.0));
  expectNear(run1("matmul", {rnd({0, 3}, 8), m34}), {0, 4}, {});
}

TEST(NnLinalg, NonContiguousAndLowPrecision) {
  Tensor a = rnd({5, 7}, 11), b = rnd({7, 3}, 12);
  Values want = naiveMatmul(a, b, 1, 5, 7, 3, [](int64_t) { return 0; }, [](int64_t) { return 0; });
  expectNear(run1("mm", {nonContiguous2d(a), nonContiguous2d(b)}), {5, 3}, want);
  Tensor r = run1("mm", {a.to(DType::BF16), b.to(DType::BF16)});
  EXPECT_EQ(r.dtype(), DType::BF16);
  expectNear(r, {5, 3},
             naiveMatmul(
                 a.to(DType::BF16), b.to(DType::BF16), 1, 5, 7, 3, [](int64_t) { return 0; },
                 [](int64_t) { return 0; }),
             1e-2);
  expectNear(run1("matmul", {a.to(DType::F64), b.to(DType::F64)}), {5, 3}, want, 1e-12);
}

TEST(NnLinalg, IntegerMatmulWraps) {
  Tensor a = make(DType::I8, {1, 2}, {100, 100}), b = make(DType::I8, {2, 1}, {100, 1});
  Tensor r = run1("matmul", {a, b});
  EXPECT_EQ(r.dtype(), DType::I8);
  EXPECT_EQ(r.getInt(0), static_cast<int8_t>(10100)); // wraps like torch
  Tensor big = make(DType::I64, {1, 1}, {0});
  big.setInt(0, int64_t{1} << 62);
  EXPECT_EQ(run1("mm", {big, make(DType::I64, {1, 1}, {4})}).getInt(0), 0); // 2^64 wraps to 0
}

TEST(NnLinalg, FixedRankForms) {
  Tensor a = rnd({2, 3, 4}, 21), b = rnd({2, 4, 5}, 22);
  expectNear(
      run1("bmm", {a, b}), {2, 3, 5},
      naiveMatmul(a, b, 2, 3, 4, 5, [](int64_t i) { return i; }, [](int64_t i) { return i; }));
  Tensor m = rnd({3, 4}, 23), v = rnd({4}, 24);
  expectNear(run1("mv", {m, v}), {3},
             naiveMatmul(m, v, 1, 3, 4, 1, [](int64_t) { return 0; }, [](int64_t) { return 0; }));
  expectNear(run1("dot", {v, v}), {},
             naiveMatmul(v, v, 1, 1, 4, 1, [](int64_t) { return 0; }, [](int64_t) { return 0; }));
  Tensor o = run1("outer", {make(DType::I64, {2}, {2, 3}), make(DType::F32, {3}, {1, 0.5, -1})});
  EXPECT_EQ(o.dtype(), DType::F32);
  expectNear(o, {2, 3}, {2, 1, -2, 3, 1.5, -3});
  Tensor ob = run1("outer", {make(DType::Bool, {2}, {1, 0}), make(DType::Bool, {2}, {1, 1})});
  EXPECT_EQ(ob.dtype(), DType::Bool);
  expectNear(ob, {2, 2}, {1, 1, 0, 0});
}

TEST(NnLinalg, LinearAddmmBaddbmm) {
  Tensor x = rnd({2, 3, 4}, 31), w = rnd({5, 4}, 32), bias = rnd({5}, 33);
  Values want;
  for (int64_t r = 0; r < 6; ++r)
    for (int64_t o = 0; o < 5; ++o) {
      double s = bias.getDouble(o);
      for (int64_t i = 0; i < 4; ++i)
        s += x.getDouble(r * 4 + i) * w.getDouble(o * 4 + i);
      want.push_back(s);
    }
  expectNear(run1("linear", {x, w, bias}), {2, 3, 5}, want);
  expectNear(run1("linear", {x, nonContiguous2d(w), bias}), {2, 3, 5}, want);
  // 1-D weight drops the feature dim.
  Tensor w1 = rnd({4}, 34);
  Values want1;
  for (int64_t r = 0; r < 6; ++r) {
    double s = 0;
    for (int64_t i = 0; i < 4; ++i)
      s += x.getDouble(r * 4 + i) * w1.getDouble(i);
    want1.push_back(s);
  }
  expectNear(run1("linear", {x, w1}), {2, 3}, want1);

  Tensor m1 = rnd({2, 3}, 35), m2 = rnd({3, 2}, 36), c = make(DType::F32, {2}, {1, -1});
  Values mm = naiveMatmul(m1, m2, 1, 2, 3, 2, [](int64_t) { return 0; }, [](int64_t) { return 0; });
  Values wantA;
  for (int i = 0; i < 4; ++i)
    wantA.push_back(0.5 * c.getDouble(i % 2) + 2 * mm[i]);
  expectNear(run1("addmm", {c, m1, m2}, {{"beta", 0.5}, {"alpha", 2.0}}), {2, 2}, wantA);
  // beta == 0 ignores the bias entirely, NaN included.
  Values twice;
  for (double v : mm)
    twice.push_back(2 * v);
  expectNear(run1("addmm", {make(DType::F32, {}, {kNaN}), m1, m2}, {{"beta", 0.0}, {"alpha", 2.0}}),
             {2, 2}, twice);

  Tensor b1 = rnd({2, 2, 3}, 37), b2 = rnd({2, 3, 2}, 38);
  Values bm =
      naiveMatmul(b1, b2, 2, 2, 3, 2, [](int64_t i) { return i; }, [](int64_t i) { return i; });
  for (double &v : bm)
    v += 1;
  expectNear(run1("baddbmm", {make(DType::F32, {1}, {1}), b1, b2}), {2, 2, 2}, bm);
  // Integer addmm: alpha truncates to an integer like torch (1.5 -> 1).
  Tensor ones = make(DType::I64, {2, 2}, {1, 1, 1, 1});
  expectNear(run1("addmm", {ones, ones, ones}, {{"alpha", 1.5}}), {2, 2}, {3, 3, 3, 3});
}

TEST(NnLinalg, SymbolicInference) {
  EXPECT_EQ(infer("matmul", {ty(DType::F32, {s0, 128}), ty(DType::F32, {128, 64})})[0].str(),
            "f32[s0,64]");
  EXPECT_EQ(infer("matmul", {ty(DType::F16, {s0, 1, 8, 16}), ty(DType::F16, {4, 16, 2})})[0].str(),
            "f16[s0,4,8,2]");
  EXPECT_EQ(infer("matmul", {ty(DType::F32, {16}), ty(DType::F32, {16})})[0].str(), "f32[]");
  EXPECT_EQ(infer("linear", {ty(DType::F32, {s0, 7, 768}), ty(DType::F32, {3072, 768}),
                             ty(DType::F32, {3072})})[0]
                .str(),
            "f32[s0,7,3072]");
  EXPECT_EQ(infer("bmm", {ty(DType::F32, {s0, 2, 3}), ty(DType::F32, {s0, 3, 5})})[0].str(),
            "f32[s0,2,5]");
  EXPECT_EQ(infer("baddbmm",
                  {ty(DType::F32, {5}), ty(DType::F32, {s0, 2, 3}), ty(DType::F32, {s0, 3, 5})})[0]
                .str(),
            "f32[s0,2,5]");
}

TEST(NnLinalg, Errors) {
  expectError<TypeInferenceError>(
      [] { infer("matmul", {ty(DType::F32, {2, 3}), ty(DType::F32, {4, 5})}); },
      "matmul: shapes [2,3] and [4,5] cannot be multiplied");
  expectError<TypeInferenceError>(
      [] { infer("matmul", {ty(DType::F32, {2, 3}), ty(DType::F64, {3, 5})}); },
      "must have the same dtype");
  expectError<TypeInferenceError>(
      [] { infer("mm", {ty(DType::F32, {2, 3, 4}), ty(DType::F32, {4, 5})}); },
      "mm: self must have 2 dims");
  expectError<TypeInferenceError>(
      [] { infer("bmm", {ty(DType::F32, {2, 3, 4}), ty(DType::F32, {1, 4, 5})}); },
      "bmm: batch dims");
  expectError<TypeInferenceError>(
      [] { infer("matmul", {ty(DType::F32, {}), ty(DType::F32, {3})}); }, "at least 1 dimension");
  expectError<TypeInferenceError>(
      [] {
        infer("linear",
              {ty(DType::F32, {2, 3}), ty(DType::F32, {4, 3}), ty(DType::F32, {3, 2, 4})});
      },
      "does not broadcast to the result shape");
  expectError<TypeInferenceError>(
      [] { infer("matmul", {ty(DType::Bool, {2, 2}), ty(DType::Bool, {2, 2})}); },
      "bool is not supported");
  // A symbolic contraction dim is assumed equal at inference and checked at run time.
  Graph g;
  Value *a = g.addInput(ty(DType::F32, {2, s0})), *b = g.addInput(ty(DType::F32, {3, 4}));
  Builder bl(g.body());
  bl.createWithTypes("return", {bl.op("matmul", {a, b})}, {});
  expectError<Error>([&] { interpret(g, {rnd({2, 5}, 1), rnd({3, 4}, 2)}); },
                     "cannot be multiplied");
}

// =============================== convolution ===============================

TEST(NnConv, Conv2dMatchesDefinition) {
  struct Case {
    Sizes x, w;
    ConvArgs a;
  };
  for (const Case &c : std::vector<Case>{
           {{1, 3, 7, 6}, {4, 3, 3, 2}, {{1, 1}, {0, 0}, {1, 1}, 1}},
           {{2, 4, 9, 8}, {6, 2, 3, 3}, {{2, 1}, {1, 2}, {1, 2}, 2}},    // groups, asym stride/pad
           {{1, 6, 7, 7}, {6, 1, 2, 3}, {{1, 3}, {1, 1}, {3, 1}, 6}},    // depthwise, dilation
           {{0, 2, 5, 5}, {3, 2, 2, 2}, {{1, 1}, {0, 0}, {1, 1}, 1}}}) { // empty batch
    Tensor x = rnd(c.x, 41), w = rnd(c.w, 42), b = rnd({c.w[0]}, 43);
    Sizes outSizes;
    Values want = naiveConv(x, w, &b, c.a, outSizes);
    AttrMap attrs = {{"stride", c.a.stride},
                     {"padding", c.a.pad},
                     {"dilation", c.a.dil},
                     {"groups", c.a.groups}};
    expectNear(run1("conv2d", {x, w, b}, attrs), outSizes, want);
  }
}

TEST(NnConv, Conv1dAnd3dAndUnbatched) {
  Tensor x = rnd({2, 3, 11}, 51), w = rnd({5, 3, 4}, 52);
  Sizes os;
  Values want = naiveConv(x, w, nullptr, {{2}, {1}, {2}, 1}, os);
  expectNear(
      run1("conv1d", {x, w}, {{"stride", Sizes{2}}, {"padding", Sizes{1}}, {"dilation", Sizes{2}}}),
      os, want);
  // Unbatched input [C, L]: same values without the batch dim.
  Tensor x1 = rnd({3, 11}, 53);
  Values want1 = naiveConv(x1.view({1, 3, 11}, {33, 11, 1}, 0), w, nullptr, {{1}, {0}, {1}, 1}, os);
  expectNear(run1("conv1d", {x1, w}), {5, 8}, want1);
  Tensor x3 = rnd({1, 2, 4, 5, 3}, 54), w3 = rnd({3, 2, 2, 3, 1}, 55), b3 = rnd({3}, 56);
  want = naiveConv(x3, w3, &b3, {{1, 2, 1}, {1, 0, 1}, {1, 1, 1}, 1}, os);
  expectNear(
      run1("conv3d", {x3, w3, b3}, {{"stride", Sizes{1, 2, 1}}, {"padding", Sizes{1, 0, 1}}}), os,
      want);
}

TEST(NnConv, SameAndValidPadding) {
  // Even kernel with dilation: total padding 3 -> 1 left, 2 right (torch pads the extra right).
  Tensor x = rnd({1, 2, 6}, 61), w = rnd({3, 2, 4}, 62);
  Tensor xp = Tensor::empty(DType::F32, {1, 2, 6 + 3});
  for (int64_t c = 0; c < 2; ++c)
    for (int64_t i = 0; i < 6; ++i)
      xp.setDouble(c * 9 + i + 1, x.getDouble(c * 6 + i));
  Sizes os;
  Values want = naiveConv(xp, w, nullptr, {{1}, {0}, {1}, 1}, os);
  expectNear(run1("conv1d", {x, w}, {{"padding_mode", "same"}}), {1, 3, 6}, want);
  want = naiveConv(x, w, nullptr, {{1}, {0}, {1}, 1}, os);
  expectNear(run1("conv1d", {x, w}, {{"padding_mode", "valid"}, {"padding", Sizes{5}}}), os, want);
}

TEST(NnConv, TransposedMatchesScatterDefinition) {
  // y[n, g*coutG+ocg, i*s - p + k*d] += x[n, ic, i] * w[ic, ocg, k]
  Tensor x = rnd({2, 4, 3, 2}, 71), w = rnd({4, 3, 2, 3}, 72), b = rnd({6}, 73);
  int64_t s[2] = {2, 1}, p[2] = {1, 0}, d[2] = {1, 2}, op[2] = {1, 0}, G = 2;
  Sizes os = {2, 6};
  for (int dd = 0; dd < 2; ++dd)
    os.push_back((x.size(2 + dd) - 1) * s[dd] - 2 * p[dd] + d[dd] * (w.size(2 + dd) - 1) + op[dd] +
                 1);
  Values want(static_cast<size_t>(os[0] * os[1] * os[2] * os[3]));
  forEach(os, [&](const Sizes &o) { want[lin(os, o)] = b.getDouble(o[1]); });
  forEach(x.sizes(), [&](const Sizes &i) {
    int64_t g = i[1] / (x.size(1) / G);
    for (int64_t ocg = 0; ocg < 3; ++ocg)
      forEach({w.size(2), w.size(3)}, [&](const Sizes &k) {
        int64_t oh = i[2] * s[0] - p[0] + k[0] * d[0], ow = i[3] * s[1] - p[1] + k[1] * d[1];
        if (oh < 0 || oh >= os[2] || ow < 0 || ow >= os[3]) return;
        want[lin(os, {i[0], g * 3 + ocg, oh, ow})] +=
            x.getDouble(lin(x.sizes(), i)) * w.getDouble(lin(w.sizes(), {i[1], ocg, k[0], k[1]}));
      });
  });
  expectNear(run1("conv_transpose2d", {x, w, b},
                  {{"stride", Sizes{2, 1}},
                   {"padding", Sizes{1, 0}},
                   {"dilation", Sizes{1, 2}},
                   {"output_padding", Sizes{1, 0}},
                   {"groups", G}}),
             os, want);
}

TEST(NnConv, IntegerAndInference) {
  Tensor x = make(DType::I64, {1, 1, 3}, {1, 2, 3}), w = make(DType::I64, {1, 1, 2}, {10, -1});
  Tensor r = run1("conv1d", {x, w});
  EXPECT_EQ(r.dtype(), DType::I64);
  expectNear(r, {1, 1, 2}, {8, 17});
  EXPECT_EQ(infer("conv2d", {ty(DType::F32, {s0, 3, 32, 32}), ty(DType::F32, {16, 3, 3, 3})},
                  {{"stride", Sizes{2}}, {"padding", Sizes{1}}})[0]
                .str(),
            "f32[s0,16,16,16]");
  EXPECT_EQ(infer("conv1d", {ty(DType::F32, {1, 4, s0}), ty(DType::F32, {8, 2, 3})},
                  {{"groups", int64_t{2}}})[0]
                .str(),
            "f32[1,8,s0-2]");
  EXPECT_EQ(infer("conv1d", {ty(DType::F32, {1, 4, s0}), ty(DType::F32, {8, 4, 4})},
                  {{"padding_mode", "same"}})[0]
                .str(),
            "f32[1,8,s0]");
  EXPECT_EQ(infer("conv_transpose2d", {ty(DType::F32, {1, 4, s0, 5}), ty(DType::F32, {4, 2, 3, 3})},
                  {{"stride", Sizes{2}}})[0]
                .str(),
            "f32[1,2,s0*2+1,11]");
}

TEST(NnConv, Errors) {
  auto conv = [](Sizes x, Sizes w, AttrMap attrs = {}) {
    std::vector<DimExpr> xd(x.begin(), x.end()), wd(w.begin(), w.end());
    infer("conv2d", {ty(DType::F32, xd), ty(DType::F32, wd)}, std::move(attrs));
  };
  expectError<TypeInferenceError>([&] { conv({1, 3, 5, 5}, {4, 3, 3}); },
                                  "conv2d: weight has 3 dims, expected 4");
  expectError<TypeInferenceError>([&] { conv({1, 3, 5, 5}, {4, 2, 3, 3}); },
                                  "expected 2 input channels");
  expectError<TypeInferenceError>(
      [&] { conv({1, 4, 5, 5}, {3, 2, 3, 3}, {{"groups", int64_t{2}}}); },
      "out channels (3) must be divisible by groups=2");
  expectError<TypeInferenceError>([&] { conv({1, 3, 2, 2}, {4, 3, 3, 3}); },
                                  "smaller than the effective kernel size 3");
  expectError<TypeInferenceError>([&] { conv({1, 3, 5, 5}, {4, 3, 3, 3}, {{"stride", Sizes{0}}}); },
                                  "stride must be >= 1");
  expectError<TypeInferenceError>(
      [&] { conv({1, 3, 5, 5}, {4, 3, 3, 3}, {{"stride", Sizes{1, 1, 1}}}); },
      "stride must have 1 or 2 values");
  expectError<TypeInferenceError>(
      [&] { conv({1, 3, 5, 5}, {4, 3, 3, 3}, {{"padding_mode", "same"}, {"stride", Sizes{2}}}); },
      "needs stride 1");
  expectError<TypeInferenceError>([&] { conv({3, 5}, {4, 3, 3, 3}); },
                                  "or unbatched (3 or 4 dims)");
  expectError<TypeInferenceError>(
      [] {
        infer("conv_transpose2d", {ty(DType::F32, {1, 2, 3, 3}), ty(DType::F32, {2, 3, 2, 2})},
              {{"output_padding", Sizes{1}}});
      },
      "output_padding must be smaller than stride or dilation");
}

// =============================== pooling ===============================

TEST(NnPool, MaxPoolWithIndicesAndNaN) {
  Tensor x = make(DType::F32, {1, 1, 3, 4}, {1, 5, 2, 0, 3, 4, 9, 8, -1, 7, 6, kNaN});
  auto r = runTensors("max_pool2d_with_indices", {x},
                      {{"kernel_size", Sizes{2}}, {"stride", Sizes{1, 2}}});
  expectNear(r[0], {1, 1, 2, 2}, {5, 9, 7, kNaN});
  EXPECT_EQ(r[1].dtype(), DType::I64);
  expectNear(r[1], {1, 1, 2, 2}, {1, 6, 9, 11});
  // Padding (never selected) and dilation, and the plain op returns one result.
  Tensor y = run1("max_pool1d", {make(DType::F32, {1, 5}, {-3, -1, -2, -5, -4})},
                  {{"kernel_size", Sizes{2}},
                   {"stride", Sizes{1}},
                   {"padding", Sizes{1}},
                   {"dilation", Sizes{2}}});
  expectNear(y, {1, 5}, {-1, -2, -1, -2, -5});
  // Integers (int64 extremes survive: no double rounding).
  Tensor xi = make(DType::I64, {1, 1, 2}, {0, 0});
  xi.setInt(1, std::numeric_limits<int64_t>::max() - 1);
  EXPECT_EQ(run1("max_pool1d", {xi}, {{"kernel_size", Sizes{2}}}).getInt(0),
            std::numeric_limits<int64_t>::max() - 1);
}

TEST(NnPool, CeilModeAndAvgDivisors) {
  // F.avg_pool2d(torch.ones(1,1,5,5), 3, stride=2, padding=1, ceil_mode=True)
  Tensor ones = make(DType::F32, {1, 1, 5, 5}, Values(25, 1.0));
  AttrMap a = {
      {"kernel_size", Sizes{3}}, {"stride", Sizes{2}}, {"padding", Sizes{1}}, {"ceil_mode", true}};
  double e = 4.0 / 9, f = 6.0 / 9;
  expectNear(run1("avg_pool2d", {ones}, a), {1, 1, 3, 3}, {e, f, e, f, 1, f, e, f, e});
  a["count_include_pad"] = false;
  expectNear(run1("avg_pool2d", {ones}, a), {1, 1, 3, 3}, Values(9, 1.0));
  // ceil_mode adds a partial last window; divisor_override replaces the divisor.
  Tensor x = make(DType::F32, {1, 1, 2, 3}, {1, 2, 4, -7, -3, 2});
  expectNear(run1("avg_pool2d", {x},
                  {{"kernel_size", Sizes{2}},
                   {"stride", Sizes{1}},
                   {"ceil_mode", true},
                   {"divisor_override", int64_t{3}}}),
             {1, 1, 1, 2}, {-7.0 / 3, 5.0 / 3});
  // Integer avg pool truncates toward zero, as torch: [1,2,4,-7,-3,2] k2 -> [1,-1,0].
  Tensor xi = make(DType::I64, {1, 1, 6}, {1, 2, 4, -7, -3, 2});
  Tensor ri = run1("avg_pool1d", {xi}, {{"kernel_size", Sizes{2}}});
  EXPECT_EQ(ri.dtype(), DType::I64);
  expectNear(ri, {1, 1, 3}, {1, -1, 0});
  // ceil_mode that would start a window in the padding drops it: L=5, k=2, s=2, p=1 -> 3.
  EXPECT_EQ(run1("max_pool1d", {rnd({1, 5}, 1)},
                 {{"kernel_size", Sizes{2}}, {"padding", Sizes{1}}, {"ceil_mode", true}})
                .size(1),
            3);
}

TEST(NnPool, Adaptive) {
  // L=5 -> 3 windows: [0,2), [1,4), [3,5).
  Tensor x = make(DType::F32, {1, 5}, {1, 2, 3, 4, 10});
  expectNear(run1("adaptive_avg_pool1d", {x}, {{"output_size", Sizes{3}}}), {1, 3}, {1.5, 3, 7});
  auto r = runTensors("adaptive_max_pool1d_with_indices", {x}, {{"output_size", Sizes{3}}});
  expectNear(r[0], {1, 3}, {2, 4, 10});
  expectNear(r[1], {1, 3}, {1, 3, 4});
  // 2-d with output_size -1 keeping a dim, batch and channels preserved.
  Tensor x2 = rnd({2, 3, 4, 6}, 81);
  Tensor y = run1("adaptive_avg_pool2d", {x2}, {{"output_size", Sizes{2, -1}}});
  ASSERT_EQ(y.sizes(), (Sizes{2, 3, 2, 6}));
  for (int64_t p = 0; p < 6; ++p)
    for (int64_t w = 0; w < 6; ++w)
      EXPECT_NEAR(y.getDouble((p * 2 + 1) * 6 + w),
                  (x2.getDouble((p * 4 + 2) * 6 + w) + x2.getDouble((p * 4 + 3) * 6 + w)) / 2,
                  1e-6);
  EXPECT_EQ(
      infer("adaptive_avg_pool2d", {ty(DType::F32, {s0, 3, 7, 7})}, {{"output_size", Sizes{1}}})[0]
          .str(),
      "f32[s0,3,1,1]");
}

TEST(NnPool, InferenceAndErrors) {
  EXPECT_EQ(
      infer("max_pool2d", {ty(DType::F32, {s0, 3, s0, 32})}, {{"kernel_size", Sizes{2}}})[0].str(),
      "f32[s0,3,(s0)//2,16]");
  EXPECT_EQ(infer("max_pool2d", {ty(DType::F32, {1, 3, s0, 8})},
                  {{"kernel_size", Sizes{3}}, {"stride", Sizes{2}}, {"padding", Sizes{1}}})[0]
                .str(),
            "f32[1,3,(s0+1)//2,4]");
  expectError<TypeInferenceError>(
      [] {
        infer("max_pool2d", {ty(DType::F32, {1, 1, s0, 8})},
              {{"kernel_size", Sizes{2}}, {"stride", Sizes{3}}, {"ceil_mode", true}});
      },
      "ceil_mode on a symbolic size");
  expectError<TypeInferenceError>(
      [] {
        infer("max_pool2d", {ty(DType::F32, {1, 1, 3, 3})},
              {{"kernel_size", Sizes{2}}, {"padding", Sizes{2}}});
      },
      "must be at most half the kernel size");
  expectError<TypeInferenceError>(
      [] { infer("avg_pool2d", {ty(DType::F32, {1, 1, 1, 1})}, {{"kernel_size", Sizes{2}}}); },
      "output size is too small");
  expectError<TypeInferenceError>(
      [] { infer("max_pool2d", {ty(DType::F32, {1, 0, 4, 4})}, {{"kernel_size", Sizes{2}}}); },
      "non-zero channel and spatial sizes");
  expectError<TypeInferenceError>(
      [] { infer("adaptive_avg_pool1d", {ty(DType::I64, {1, 4})}, {{"output_size", Sizes{2}}}); },
      "must be a floating-point tensor");
  expectError<TypeInferenceError>([] { infer("max_pool2d", {ty(DType::F32, {1, 1, 4, 4})}, {}); },
                                  "missing required attribute 'kernel_size'");
}

// =============================== normalization ===============================

/// Mean and biased variance of values picked by `pick(i)` for i < n.
std::pair<double, double> meanVar(int64_t n, const std::function<double(int64_t)> &pick) {
  double m = 0, v = 0;
  for (int64_t i = 0; i < n; ++i)
    m += pick(i);
  m /= n;
  for (int64_t i = 0; i < n; ++i)
    v += (pick(i) - m) * (pick(i) - m);
  return {m, v / n};
}

TEST(NnNorm, BatchNormEvalTrainAndUpdate) {
  Tensor x = rnd({4, 3, 5}, 91), w = rnd({3}, 92), b = rnd({3}, 93);
  Tensor rm = make(DType::F32, {3}, {0.1, -0.2, 0.3}), rv = make(DType::F32, {3}, {1.5, 0.5, 2});
  double eps = 1e-3;
  Values eval, train;
  std::vector<std::pair<double, double>> stats;
  for (int64_t c = 0; c < 3; ++c)
    stats.push_back(
        meanVar(20, [&](int64_t i) { return x.getDouble((i / 5 * 3 + c) * 5 + i % 5); }));
  forEach(x.sizes(), [&](const Sizes &i) {
    int64_t c = i[1];
    double v = x.getDouble(lin(x.sizes(), i));
    eval.push_back((v - rm.getDouble(c)) / std::sqrt(rv.getDouble(c) + eps) * w.getDouble(c) +
                   b.getDouble(c));
    train.push_back((v - stats[c].first) / std::sqrt(stats[c].second + eps) * w.getDouble(c) +
                    b.getDouble(c));
  });
  expectNear(run1("batch_norm", {x, w, b, rm, rv}, {{"eps", eps}}), {4, 3, 5}, eval);
  expectNear(
      run1("batch_norm", {x, w, b, RtValue(), RtValue()}, {{"eps", eps}, {"training", true}}),
      {4, 3, 5}, train);
  auto r =
      runTensors("batch_norm_with_update", {x, w, b, rm, rv}, {{"eps", eps}, {"momentum", 0.25}});
  ASSERT_EQ(r.size(), 3u);
  expectNear(r[0], {4, 3, 5}, train);
  Values nm, nv;
  for (int64_t c = 0; c < 3; ++c) {
    nm.push_back(0.75 * rm.getDouble(c) + 0.25 * stats[c].first);
    nv.push_back(0.75 * rv.getDouble(c) + 0.25 * stats[c].second * 20 / 19);
  }
  expectNear(r[1], {3}, nm);
  expectNear(r[2], {3}, nv);
  // No affine parameters, bf16 input with f32 running stats.
  Values plain;
  for (int64_t i = 0; i < 60; ++i) {
    int64_t c = i / 5 % 3;
    plain.push_back((x.to(DType::BF16).getDouble(i) - rm.getDouble(c)) /
                    std::sqrt(rv.getDouble(c) + 1e-5));
  }
  Tensor lo = run1("batch_norm", {x.to(DType::BF16), RtValue(), RtValue(), rm, rv});
  EXPECT_EQ(lo.dtype(), DType::BF16);
  expectNear(lo, {4, 3, 5}, plain, 1e-2);
}

TEST(NnNorm, BatchNormErrors) {
  expectError<TypeInferenceError>([] { infer("batch_norm", {ty(DType::F32, {2, 3})}); },
                                  "running_mean and running_var are required");
  expectError<TypeInferenceError>(
      [] {
        infer("batch_norm", {ty(DType::F32, {2, 3}), ty(DType::F32, {4}), Type::none(),
                             ty(DType::F32, {3}), ty(DType::F32, {3})});
      },
      "batch_norm: weight must have shape [3], got [4]");
  expectError<TypeInferenceError>(
      [] {
        infer("batch_norm", {ty(DType::F64, {2, 3}), Type::none(), Type::none(),
                             ty(DType::F32, {3}), ty(DType::F32, {3})});
      },
      "running_mean must have the input's dtype f64");
  expectError<TypeInferenceError>(
      [] { infer("batch_norm", {ty(DType::I64, {2, 3})}, {{"training", true}}); },
      "must be a floating-point tensor");
  expectError<Error>([] { run("batch_norm", {rnd({1, 3}, 1)}, {{"training", true}}); },
                     "expected more than 1 value per channel when training");
}

TEST(NnNorm, LayerGroupRmsInstance) {
  Tensor x = rnd({2, 3, 4}, 101), w = rnd({3, 4}, 102), b = rnd({3, 4}, 103);
  Values ln;
  for (int64_t r = 0; r < 2; ++r) {
    auto [m, v] = meanVar(12, [&](int64_t i) { return x.getDouble(r * 12 + i); });
    for (int64_t i = 0; i < 12; ++i)
      ln.push_back((x.getDouble(r * 12 + i) - m) / std::sqrt(v + 1e-5) * w.getDouble(i) +
                   b.getDouble(i));
  }
  expectNear(run1("layer_norm", {x, w, b}, {{"normalized_shape", Sizes{3, 4}}}), {2, 3, 4}, ln);

  // rms_norm with eps=None uses f32's epsilon.
  Tensor w4 = rnd({4}, 104);
  Values rms;
  for (int64_t r = 0; r < 6; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < 4; ++i)
      ss += x.getDouble(r * 4 + i) * x.getDouble(r * 4 + i);
    for (int64_t i = 0; i < 4; ++i)
      rms.push_back(x.getDouble(r * 4 + i) / std::sqrt(ss / 4 + 1.1920928955078125e-07) *
                    w4.getDouble(i));
  }
  expectNear(run1("rms_norm", {x, w4}, {{"normalized_shape", Sizes{4}}}), {2, 3, 4}, rms);

  // group_norm: 2 groups over 4 channels.
  Tensor xg = rnd({2, 4, 3}, 105), wg = rnd({4}, 106), bg = rnd({4}, 107);
  Values gn;
  forEach(xg.sizes(), [&](const Sizes &i) {
    int64_t g = i[1] / 2;
    auto [m, v] = meanVar(6, [&](int64_t j) { return xg.getDouble((i[0] * 4 + g * 2) * 3 + j); });
    gn.push_back((xg.getDouble(lin(xg.sizes(), i)) - m) / std::sqrt(v + 1e-5) * wg.getDouble(i[1]) +
                 bg.getDouble(i[1]));
  });
  expectNear(run1("group_norm", {xg, wg, bg}, {{"num_groups", int64_t{2}}}), {2, 4, 3}, gn);

  // instance_norm: each (n, c) plane by itself.
  Values in;
  forEach(xg.sizes(), [&](const Sizes &i) {
    auto [m, v] = meanVar(3, [&](int64_t j) { return xg.getDouble((i[0] * 4 + i[1]) * 3 + j); });
    in.push_back((xg.getDouble(lin(xg.sizes(), i)) - m) / std::sqrt(v + 1e-5));
  });
  expectNear(run1("instance_norm", {xg}), {2, 4, 3}, in);

  expectError<TypeInferenceError>(
      [] { infer("group_norm", {ty(DType::F32, {2, 4, 3})}, {{"num_groups", int64_t{3}}}); },
      "channels (4) must be divisible by num_groups=3");
  expectError<TypeInferenceError>(
      [] { infer("layer_norm", {ty(DType::F32, {2, 3})}, {{"normalized_shape", Sizes{2}}}); },
      "normalized_shape [2] must match the trailing dims");
  EXPECT_EQ(infer("layer_norm",
                  {ty(DType::F32, {s0, 7, 768}), ty(DType::F32, {768}), ty(DType::F32, {768})},
                  {{"normalized_shape", Sizes{768}}})[0]
                .str(),
            "f32[s0,7,768]");
}

TEST(NnNorm, LocalResponseNorm) {
  Tensor x = rnd({1, 5, 2}, 111);
  int64_t size = 3;
  Values want;
  for (int64_t c = 0; c < 5; ++c)
    for (int64_t i = 0; i < 2; ++i) {
      double s = 0;
      for (int64_t c2 = c - 1; c2 <= c + 1; ++c2)
        if (c2 >= 0 && c2 < 5) s += x.getDouble(c2 * 2 + i) * x.getDouble(c2 * 2 + i);
      want.push_back(x.getDouble(c * 2 + i) / std::pow(1.0 + 0.5 * s / size, 0.75));
    }
  expectNear(run1("local_response_norm", {x}, {{"size", size}, {"alpha", 0.5}}), {1, 5, 2}, want);
}

// =============================== layers ===============================

TEST(NnLayers, Embedding) {
  Tensor w = rnd({4, 3}, 121);
  Tensor idx = make(DType::I32, {2, 2}, {3, 0, 0, 2});
  Tensor r = run1("embedding", {w, idx});
  Values want;
  for (int64_t i : {3, 0, 0, 2})
    for (int64_t j = 0; j < 3; ++j)
      want.push_back(w.getDouble(i * 3 + j));
  expectNear(r, {2, 2, 3}, want, 0);
  expectError<Error>([&] { run("embedding", {w, make(DType::I64, {1}, {4})}); },
                     "embedding: index 4 is out of range for a weight of 4 rows");
  expectError<TypeInferenceError>([&] { infer("embedding", {typeOf(w), ty(DType::I16, {2})}); },
                                  "indices must be i64 or i32");
}

TEST(NnLayers, Dropout) {
  Tensor x = rnd({100, 100}, 131);
  expectNear(run1("dropout", {x}, {{"train", false}}), {100, 100}, values(x), 0);
  Tensor y = run1("dropout", {x}, {{"p", 0.25}, {"seed", int64_t{7}}});
  int64_t kept = 0;
  for (int64_t i = 0; i < y.numel(); ++i) {
    if (y.getDouble(i) == 0) continue;
    ++kept;
    EXPECT_NEAR(y.getDouble(i), x.getDouble(i) / 0.75, 1e-6);
  }
  EXPECT_NEAR(kept / 10000.0, 0.75, 0.02);
  EXPECT_TRUE(run1("dropout", {x}, {{"p", 0.25}, {"seed", int64_t{7}}}).equals(y)); // deterministic
  expectNear(run1("dropout", {x}, {{"p", 1.0}}), {100, 100}, Values(10000, 0.0), 0);
  expectError<TypeInferenceError>([&] { infer("dropout", {typeOf(x)}, {{"p", 1.5}}); },
                                  "p must be in [0, 1]");
}

/// softmax(q k^T * scale + bias) v for one [L,E] x [S,E] x [S,Ev] problem; bias -inf masks.
Values naiveAttention(const Values &q, const Values &k, const Values &v, int64_t L, int64_t S,
                      int64_t E, int64_t Ev, double scale,
                      const std::function<double(int64_t, int64_t)> &bias) {
  Values out;
  for (int64_t i = 0; i < L; ++i) {
    Values p(S);
    double mx = -kInf, sum = 0;
    for (int64_t j = 0; j < S; ++j) {
      double s = 0;
      for (int64_t e = 0; e < E; ++e)
        s += q[i * E + e] * k[j * E + e];
      p[j] = s * scale + bias(i, j);
      mx = std::max(mx, p[j]);
    }
    for (int64_t j = 0; j < S; ++j)
      sum += (p[j] = mx == -kInf ? 0 : std::exp(p[j] - mx));
    for (int64_t e = 0; e < Ev; ++e) {
      double o = 0;
      for (int64_t j = 0; j < S; ++j)
        o += sum == 0 ? 0 : p[j] / sum * v[j * Ev + e];
      out.push_back(o);
    }
  }
  return out;
}

TEST(NnLayers, ScaledDotProductAttention) {
  Tensor q = rnd({2, 3, 4}, 141), k = rnd({2, 5, 4}, 142), v = rnd({2, 5, 6}, 143);
  auto slice = [](const Tensor &t, int64_t b) {
    Values all = values(t), out;
    int64_t n = t.numel() / t.size(0);
    return Values(all.begin() + b * n, all.begin() + (b + 1) * n);
  };
  Values plain, causal;
  for (int64_t b = 0; b < 2; ++b) {
    Values o = naiveAttention(slice(q, b), slice(k, b), slice(v, b), 3, 5, 4, 6, 0.5,
                              [](int64_t, int64_t) { return 0.0; });
    plain.insert(plain.end(), o.begin(), o.end());
    o = naiveAttention(slice(q, b), slice(k, b), slice(v, b), 3, 5, 4, 6, 0.5,
                       [](int64_t i, int64_t j) { return j > i ? -kInf : 0.0; });
    causal.insert(causal.end(), o.begin(), o.end());
  }
  expectNear(run1("scaled_dot_product_attention", {q, k, v}), {2, 3, 6}, plain); // 1/sqrt(4)
  expectNear(run1("scaled_dot_product_attention", {q, k, v}, {{"is_causal", true}}), {2, 3, 6},
             causal);
  // Bool mask broadcast over the batch; row 0 fully masked gives zeros.
  Tensor mask = make(DType::Bool, {3, 5}, {0, 0, 0, 0, 0, 1, 0, 1, 0, 1, 1, 1, 1, 1, 0});
  Values masked;
  for (int64_t b = 0; b < 2; ++b) {
    Values o = naiveAttention(
        slice(q, b), slice(k, b), slice(v, b), 3, 5, 4, 6, 0.25,
        [&](int64_t i, int64_t j) { return mask.getDouble(i * 5 + j) ? 0.0 : -kInf; });
    masked.insert(masked.end(), o.begin(), o.end());
  }
  expectNear(run1("scaled_dot_product_attention", {q, k, v, mask}, {{"scale", 0.25}}), {2, 3, 6},
             masked);
  // Float mask is added.
  Tensor fm = rnd({1, 5}, 144);
  Values added;
  for (int64_t b = 0; b < 2; ++b) {
    Values o = naiveAttention(slice(q, b), slice(k, b), slice(v, b), 3, 5, 4, 6, 0.5,
                              [&](int64_t, int64_t j) { return fm.getDouble(j); });
    added.insert(added.end(), o.begin(), o.end());
  }
  expectNear(run1("scaled_dot_product_attention", {q, k, v, fm}), {2, 3, 6}, added);
}

TEST(NnLayers, AttentionGqaAndErrors) {
  // 4 query heads share 2 key/value heads: query head h reads kv head h / 2.
  Tensor q = rnd({1, 4, 2, 3}, 151), k = rnd({1, 2, 3, 3}, 152), v = rnd({1, 2, 3, 2}, 153);
  Tensor r = run1("scaled_dot_product_attention", {q, k, v}, {{"enable_gqa", true}});
  Values want;
  Values qa = values(q), ka = values(k), va = values(v);
  for (int64_t h = 0; h < 4; ++h) {
    int64_t kv = h / 2;
    Values o = naiveAttention(Values(qa.begin() + h * 6, qa.begin() + h * 6 + 6),
                              Values(ka.begin() + kv * 9, ka.begin() + kv * 9 + 9),
                              Values(va.begin() + kv * 6, va.begin() + kv * 6 + 6), 2, 3, 3, 2,
                              1 / std::sqrt(3.0), [](int64_t, int64_t) { return 0.0; });
    want.insert(want.end(), o.begin(), o.end());
  }
  expectNear(r, {1, 4, 2, 2}, want);
  expectError<TypeInferenceError>(
      [&] { infer("scaled_dot_product_attention", {typeOf(q), typeOf(k), typeOf(v)}); },
      "batch dims of query, key and value do not broadcast");
  expectError<TypeInferenceError>(
      [&] {
        infer("scaled_dot_product_attention", {typeOf(q), typeOf(q), typeOf(q)},
              {{"dropout_p", 0.1}});
      },
      "dropout_p must be 0");
  expectError<TypeInferenceError>(
      [&] {
        infer("scaled_dot_product_attention",
              {typeOf(q), typeOf(q), typeOf(q), ty(DType::F32, {2, 2})}, {{"is_causal", true}});
      },
      "attn_mask must not be given when is_causal");
  expectError<TypeInferenceError>(
      [&] {
        infer("scaled_dot_product_attention",
              {typeOf(q), typeOf(q), typeOf(q), ty(DType::F64, {2, 2})});
      },
      "attn_mask must be bool or the query's dtype");
  EXPECT_EQ(infer("scaled_dot_product_attention",
                  {ty(DType::F32, {s0, 12, 7, 64}), ty(DType::F32, {s0, 12, 9, 64}),
                   ty(DType::F32, {s0, 12, 9, 32})})[0]
                .str(),
            "f32[s0,12,7,32]");
}

TEST(NnLayers, PixelShuffle) {
  Tensor x = rnd({2, 8, 2, 3}, 161);
  Tensor y = run1("pixel_shuffle", {x}, {{"upscale_factor", int64_t{2}}});
  ASSERT_EQ(y.sizes(), (Sizes{2, 2, 4, 6}));
  // out[n, c, h*r+i, w*r+j] = in[n, c*r*r + i*r + j, h, w]
  forEach({2, 2, 2, 3, 2, 2}, [&](const Sizes &i) {
    auto [n, c, h, w, a, b] = std::tuple(i[0], i[1], i[2], i[3], i[4], i[5]);
    EXPECT_EQ(y.getDouble(lin({2, 2, 4, 6}, {n, c, h * 2 + a, w * 2 + b})),
              x.getDouble(lin({2, 8, 2, 3}, {n, c * 4 + a * 2 + b, h, w})));
  });
  EXPECT_TRUE(run1("pixel_unshuffle", {y}, {{"downscale_factor", int64_t{2}}}).equals(x));
  expectError<TypeInferenceError>(
      [] { infer("pixel_shuffle", {ty(DType::F32, {2, 3, 2})}, {{"upscale_factor", int64_t{2}}}); },
      "channels (2) must be divisible by 4");
}

} // namespace
