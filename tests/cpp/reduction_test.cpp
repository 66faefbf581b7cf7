// Reduction, index-reduction and scan ops: small graphs run by the interpreter and checked against
// sums, products and closed forms worked out by hand, plus PyTorch's dtype rules, empty-input
// behavior and error cases.
#include "op_test_util.h"

#include "xjit/ir/op_registry.h"

#include <cmath>

using namespace xjit;
using namespace xjit::optest;

namespace {

using Ints = std::vector<int64_t>;

/// [[0, 1, 2], [3, 4, 5]] in the given dtype.
Tensor grid(DType dt = DType::F32) { return make(dt, {2, 3}, {0, 1, 2, 3, 4, 5}); }

TEST(Reduction, SumProdMeanOverDims) {
  expectValues(run1("sum", {grid()}), DType::F32, {}, {15});
  expectValues(run1("sum", {grid()}, {{"dims", Ints{0}}}), DType::F32, {3}, {3, 5, 7});
  expectValues(run1("sum", {grid()}, {{"dims", Ints{1}}, {"keepdim", true}}), DType::F32, {2, 1},
               {3, 12});
  expectValues(run1("sum", {grid()}, {{"dims", Ints{-1, 0}}}), DType::F32, {}, {15});
  expectValues(run1("mean", {grid()}, {{"dims", Ints{1}}}), DType::F32, {2}, {1, 4});
  expectValues(run1("mean", {grid()}, {{"dims", Ints{0}}, {"keepdim", true}}), DType::F32, {1, 3},
               {1.5, 2.5, 3.5});
  Tensor plus1 = make(DType::F32, {2, 3}, {1, 2, 3, 4, 5, 6});
  expectValues(run1("prod", {plus1}, {{"dims", Ints{1}}}), DType::F32, {2}, {6, 120});
  expectValues(run1("prod", {plus1}), DType::F32, {}, {720});
  // A non-contiguous (transposed) input: [[0,3],[1,4],[2,5]].
  Tensor t = grid().view({3, 2}, {1, 3}, 0);
  expectValues(run1("sum", {t}, {{"dims", Ints{1}}}), DType::F32, {3}, {3, 5, 7});
  expectValues(run1("cumsum", {t}, {{"dim", int64_t{0}}}), DType::F32, {3, 2}, {0, 3, 1, 7, 3, 12});
  // 0-d input: dims 0 / -1 are the identity reduction.
  Tensor scalar = make(DType::F32, {}, {2.5});
  expectValues(run1("sum", {scalar}, {{"dims", Ints{0}}}), DType::F32, {}, {2.5});
  expectValues(run1("amax", {scalar}, {{"dims", Ints{-1}}, {"keepdim", true}}), DType::F32, {},
               {2.5});
}

TEST(Reduction, DTypeRules) {
  // Sums and products of bool/int accumulate in i64; `dtype` converts the input first.
  expectValues(run1("sum", {vec(DType::Bool, {1, 1, 0, 1})}), DType::I64, {}, {3});
  expectValues(run1("sum", {vec(DType::I8, {100, 100, 100})}), DType::I64, {}, {300});
  expectValues(run1("sum", {vec(DType::I8, {100, 100, 100})}, {{"dtype", DType::I8}}), DType::I8,
               {}, {44}); // 300 wraps
  expectValues(run1("prod", {vec(DType::Bool, {1, 0})}), DType::I64, {}, {0});
  expectValues(run1("sum", {vec(DType::F32, {0.5, 0.25})}, {{"dtype", DType::F64}}), DType::F64, {},
               {0.75});
  expectValues(run1("mean", {vec(DType::I32, {1, 2})}, {{"dtype", DType::F32}}), DType::F32, {},
               {1.5});
  expectValues(run1("amax", {vec(DType::I32, {-4, 9, 2})}), DType::I32, {}, {9});
  expectValues(run1("amin", {vec(DType::U8, {7, 3, 200})}), DType::U8, {}, {3});
  expectValues(run1("max", {vec(DType::Bool, {1, 0})}), DType::Bool, {}, {1});
  expectValues(run1("logsumexp", {vec(DType::I64, {1, 1})}), DType::F32, {}, {1 + std::log(2.0)});
  expectValues(run1("cumsum", {vec(DType::I8, {100, 100})}, {{"dim", int64_t{0}}}), DType::I64, {2},
               {100, 200});
  expectValues(
      run1("cumsum", {vec(DType::I8, {100, 100})}, {{"dim", int64_t{0}}, {"dtype", DType::I8}}),
      DType::I8, {2}, {100, -56});
  EXPECT_EQ(infer("sum", {ty(DType::BF16, {2, s0})}, {{"dims", Ints{0}}})[0],
            ty(DType::BF16, {s0}));
  EXPECT_EQ(infer("any", {ty(DType::U8, {4})})[0], ty(DType::U8, {}));
  EXPECT_EQ(infer("any", {ty(DType::I32, {4})})[0], ty(DType::Bool, {}));
  EXPECT_EQ(infer("count_nonzero", {ty(DType::F16, {4, 2})}, {{"dims", Ints{1}}})[0],
            ty(DType::I64, {4}));
  expectInferError("mean", {ty(DType::I32, {3})}, {}, "could not infer output dtype");
  expectInferError("var", {ty(DType::I64, {3})}, {}, "floating point");
  expectInferError("norm", {ty(DType::I64, {3})}, {}, "floating point");
  expectInferError("softmax", {ty(DType::I32, {3})}, {{"dim", int64_t{0}}}, "floating point");
  expectInferError("argmax", {ty(DType::Bool, {3})}, {}, "bool");
}

TEST(Reduction, DimErrors) {
  expectInferError("sum", {ty(DType::F32, {2, 3})}, {{"dims", Ints{0, -2}}}, "appears twice");
  expectInferError("sum", {ty(DType::F32, {2, 3})}, {{"dims", Ints{2}}}, "out of range");
  expectInferError("amax", {ty(DType::F32, {2, 3})}, {{"dims", Ints{-3}}}, "out of range");
  expectInferError("softmax", {ty(DType::F32, {2, 3})}, {{"dim", int64_t{2}}}, "out of range");
  expectInferError("max_dim", {ty(DType::F32, {})}, {{"dim", int64_t{1}}}, "out of range");
  expectInferError("cumsum", {ty(DType::F32, {2})}, {}, "dim");
}

TEST(Reduction, EmptyInputs) {
  Tensor empty = make(DType::F32, {0, 3}, {});
  expectValues(run1("sum", {empty}, {{"dims", Ints{0}}}), DType::F32, {3}, {0, 0, 0});
  expectValues(run1("prod", {empty}, {{"dims", Ints{0}}}), DType::F32, {3}, {1, 1, 1});
  expectValues(run1("mean", {empty}), DType::F32, {}, {kNaN});
  expectValues(run1("mean", {empty}, {{"dims", Ints{0}}}), DType::F32, {3}, {kNaN, kNaN, kNaN});
  expectValues(run1("var", {empty}, {{"dims", Ints{0}}}), DType::F32, {3}, {kNaN, kNaN, kNaN});
  expectValues(run1("logsumexp", {empty}, {{"dims", Ints{0}}}), DType::F32, {3},
               {-kInf, -kInf, -kInf});
  expectValues(run1("norm", {empty}), DType::F32, {}, {0});
  expectValues(run1("all", {empty}), DType::Bool, {}, {1});
  expectValues(run1("any", {empty}), DType::Bool, {}, {0});
  expectValues(run1("amax", {empty}, {{"dims", Ints{1}}}), DType::F32, {0}, {});
  expectValues(run1("argmax", {empty}, {{"dim", int64_t{1}}}), DType::I64, {0}, {});
  expectValues(run1("softmax", {empty}, {{"dim", int64_t{0}}}), DType::F32, {0, 3}, {});
  expectValues(run1("cumsum", {empty}, {{"dim", int64_t{0}}}), DType::F32, {0, 3}, {});
  // Statically empty reduced dims are inference errors; symbolic ones fail at run time.
  Type emptyType = ty(DType::F32, {0, 3});
  expectInferError("amax", {emptyType}, {{"dims", Ints{0}}}, "non-zero size");
  expectInferError("amax", {emptyType}, {}, "non-zero size");
  expectInferError("max", {emptyType}, {}, "non-zero size");
  expectInferError("max_dim", {emptyType}, {{"dim", int64_t{0}}}, "non-zero size");
  expectInferError("argmin", {emptyType}, {}, "non-zero size");
  expectInferError("norm", {emptyType}, {{"p", kInf}}, "non-zero size");
  Graph g;
  Builder b(g.body());
  Value *x = g.addInput(ty(DType::F32, {s0, 3}));
  b.createWithTypes("return", {b.op("amin", {x}, {{"dims", Ints{0}}})}, {});
  EXPECT_EQ(
      interpret(g, {RtValue(make(DType::F32, {2, 3}, {1, 2, 3, 4, 5, 0}))})[0].tensor().getDouble(
          2),
      0);
  try {
    interpret(g, {RtValue(empty)});
    ADD_FAILURE() << "expected a run-time error";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("non-zero size"), std::string::npos) << e.what();
  }
}

TEST(Reduction, ExtremaAndNaN) {
  Tensor x = vec(DType::F32, {1, kNaN, 3});
  expectValues(run1("amax", {x}), DType::F32, {}, {kNaN});
  expectValues(run1("min", {x}), DType::F32, {}, {kNaN});
  auto md = runTensors("max_dim", {x}, {{"dim", int64_t{0}}});
  expectValues(md[0], DType::F32, {}, {kNaN});
  expectValues(md[1], DType::I64, {}, {1});
  expectValues(run1("argmax", {vec(DType::F32, {1, kNaN, kNaN})}), DType::I64, {}, {1});
  expectValues(run1("argmin", {vec(DType::F32, {1, kNaN, kNaN})}), DType::I64, {}, {1});
  expectValues(run1("any", {vec(DType::F32, {0, kNaN})}), DType::Bool, {}, {1});
}

TEST(Reduction, IndexReductions) {
  Tensor x = make(DType::I64, {2, 3}, {3, 1, 3, 0, 0, 5});
  auto mx = runTensors("max_dim", {x}, {{"dim", int64_t{1}}});
  expectValues(mx[0], DType::I64, {2}, {3, 5});
  expectValues(mx[1], DType::I64, {2}, {0, 2}); // first occurrence
  auto mn = runTensors("min_dim", {x}, {{"dim", int64_t{-1}}, {"keepdim", true}});
  expectValues(mn[0], DType::I64, {2, 1}, {1, 0});
  expectValues(mn[1], DType::I64, {2, 1}, {1, 0});
  auto col = runTensors("max_dim", {x}, {{"dim", int64_t{0}}});
  expectValues(col[0], DType::I64, {3}, {3, 1, 5});
  expectValues(col[1], DType::I64, {3}, {0, 0, 1});
  expectValues(run1("argmax", {x}), DType::I64, {}, {5});
  expectValues(run1("argmin", {x}), DType::I64, {}, {3});
  expectValues(run1("argmax", {x}, {{"keepdim", true}}), DType::I64, {1, 1}, {5});
  expectValues(run1("argmin", {x}, {{"dim", int64_t{1}}}), DType::I64, {2}, {1, 0});
  expectValues(run1("argmax", {make(DType::F32, {}, {3})}), DType::I64, {}, {0});
  auto s = runTensors("max_dim", {make(DType::F32, {}, {3})}, {{"dim", int64_t{0}}});
  expectValues(s[0], DType::F32, {}, {3});
  expectValues(s[1], DType::I64, {}, {0});
  auto types = infer("min_dim", {ty(DType::BF16, {4, s0})}, {{"dim", int64_t{0}}});
  ASSERT_EQ(types.size(), 2u);
  EXPECT_EQ(types[0], ty(DType::BF16, {s0}));
  EXPECT_EQ(types[1], ty(DType::I64, {s0}));
}

TEST(Reduction, VarianceAndStd) {
  // [1, 2, 4]: mean 7/3, sum of squared deviations 42/9.
  Tensor x = vec(DType::F32, {1, 2, 4});
  const double m2 = 42.0 / 9;
  expectValues(run1("var", {x}), DType::F32, {}, {m2 / 2});
  expectValues(run1("var", {x}, {{"correction", int64_t{0}}}), DType::F32, {}, {m2 / 3});
  expectValues(run1("var", {x}, {{"correction", int64_t{3}}}), DType::F32, {}, {kInf});
  expectValues(run1("std", {x}), DType::F32, {}, {std::sqrt(m2 / 2)});
  expectValues(run1("std", {x}, {{"correction", 1.5}}), DType::F32, {}, {std::sqrt(m2 / 1.5)});
  auto vm = runTensors("var_mean", {x});
  expectValues(vm[0], DType::F32, {}, {m2 / 2});
  expectValues(vm[1], DType::F32, {}, {7.0 / 3});
  auto sm = runTensors("std_mean", {grid()}, {{"dims", Ints{1}}, {"keepdim", true}});
  expectValues(sm[0], DType::F32, {2, 1}, {1, 1});
  expectValues(sm[1], DType::F32, {2, 1}, {1, 4});
  expectValues(run1("var", {make(DType::F32, {}, {2})}), DType::F32, {}, {kNaN});
  expectValues(run1("var", {grid()}, {{"dims", Ints{0}}}), DType::F32, {3}, {4.5, 4.5, 4.5});
}

TEST(Reduction, Norms) {
  Tensor x = vec(DType::F32, {3, -4, 0});
  expectValues(run1("norm", {x}), DType::F32, {}, {5});
  expectValues(run1("norm", {x}, {{"p", 1.0}}), DType::F32, {}, {7});
  expectValues(run1("norm", {x}, {{"p", kInf}}), DType::F32, {}, {4});
  expectValues(run1("norm", {x}, {{"p", -kInf}}), DType::F32, {}, {0});
  expectValues(run1("norm", {x}, {{"p", 0.0}}), DType::F32, {}, {2});
  expectValues(run1("norm", {x}, {{"p", 3.0}}), DType::F32, {}, {std::cbrt(91.0)});
  expectValues(run1("norm", {vec(DType::F32, {3, -4})}, {{"p", -1.0}}), DType::F32, {},
               {1 / (1 / 3.0 + 1 / 4.0)});
  expectValues(run1("norm", {grid()}, {{"dims", Ints{1}}, {"keepdim", true}}), DType::F32, {2, 1},
               {std::sqrt(5.0), std::sqrt(50.0)});
  expectValues(run1("norm", {vec(DType::F16, {3, 4})}, {{"dtype", DType::F32}}), DType::F32, {},
               {5});
}

TEST(Reduction, SoftmaxAndLogSumExp) {
  Tensor x = vec(DType::F32, {1, 2, 3});
  double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  expectValues(run1("softmax", {x}, {{"dim", int64_t{0}}}), DType::F32, {3},
               {std::exp(1.0) / z, std::exp(2.0) / z, std::exp(3.0) / z});
  expectValues(run1("log_softmax", {x}, {{"dim", int64_t{-1}}}), DType::F32, {3},
               {1 - std::log(z), 2 - std::log(z), 3 - std::log(z)});
  expectValues(run1("logsumexp", {x}), DType::F32, {}, {std::log(z)});
  // Large inputs do not overflow: shifted by the max.
  expectValues(run1("softmax", {vec(DType::F32, {1000, 1000})}, {{"dim", int64_t{0}}}), DType::F32,
               {2}, {0.5, 0.5});
  expectValues(run1("logsumexp", {vec(DType::F32, {1000, 1000})}), DType::F32, {},
               {1000 + std::log(2.0)});
  expectValues(run1("softmax", {vec(DType::F32, {-kInf, -kInf})}, {{"dim", int64_t{0}}}),
               DType::F32, {2}, {kNaN, kNaN});
  expectValues(run1("logsumexp", {vec(DType::F32, {-kInf, -kInf})}), DType::F32, {}, {-kInf});
  expectValues(run1("logsumexp", {vec(DType::F32, {kInf, 1})}), DType::F32, {}, {kInf});
  // Over dim 0 of [[0,1,2],[3,4,5]]: each column is softmax([a, a+3]).
  double lo = 1 / (1 + std::exp(3.0)), hi = 1 - lo;
  expectValues(run1("softmax", {grid()}, {{"dim", int64_t{0}}}), DType::F32, {2, 3},
               {lo, lo, lo, hi, hi, hi});
  expectValues(run1("softmax", {make(DType::F32, {}, {7})}, {{"dim", int64_t{0}}}), DType::F32, {},
               {1});
  expectValues(
      run1("softmax", {vec(DType::F32, {0, 0})}, {{"dim", int64_t{0}}, {"dtype", DType::F64}}),
      DType::F64, {2}, {0.5, 0.5});
  expectValues(run1("logsumexp", {grid()}, {{"dims", Ints{1}}, {"keepdim", true}}), DType::F32,
               {2, 1},
               {std::log(1 + std::exp(1.0) + std::exp(2.0)),
                3 + std::log(1 + std::exp(1.0) + std::exp(2.0))});
}

TEST(Reduction, CumulativeOps) {
  Tensor x = vec(DType::F32, {1, 2, 3, 4});
  expectValues(run1("cumsum", {x}, {{"dim", int64_t{0}}}), DType::F32, {4}, {1, 3, 6, 10});
  expectValues(run1("cumprod", {x}, {{"dim", int64_t{0}}}), DType::F32, {4}, {1, 2, 6, 24});
  expectValues(run1("cumsum", {grid()}, {{"dim", int64_t{1}}}), DType::F32, {2, 3},
               {0, 1, 3, 3, 7, 12});
  expectValues(run1("cumprod", {grid(DType::I32)}, {{"dim", int64_t{0}}}), DType::I64, {2, 3},
               {0, 1, 2, 0, 4, 10});
  expectValues(run1("cumsum", {vec(DType::Bool, {1, 1, 0})}, {{"dim", int64_t{0}}}), DType::I64,
               {3}, {1, 2, 2});
  expectValues(run1("cumsum", {make(DType::F32, {}, {2})}, {{"dim", int64_t{0}}}), DType::F32, {},
               {2});
}

TEST(Reduction, AnyAllCountNonzero) {
  Tensor x = make(DType::I32, {2, 3}, {0, 1, 0, 2, 3, 4});
  expectValues(run1("any", {x}, {{"dims", Ints{1}}}), DType::Bool, {2}, {1, 1});
  expectValues(run1("all", {x}, {{"dims", Ints{1}}}), DType::Bool, {2}, {0, 1});
  expectValues(run1("all", {x}, {{"dims", Ints{0}}, {"keepdim", true}}), DType::Bool, {1, 3},
               {0, 1, 0});
  expectValues(run1("any", {vec(DType::U8, {0, 2})}), DType::U8, {}, {1});
  expectValues(run1("all", {vec(DType::U8, {1, 0})}), DType::U8, {}, {0});
  expectValues(run1("count_nonzero", {x}), DType::I64, {}, {4});
  expectValues(run1("count_nonzero", {x}, {{"dims", Ints{0}}}), DType::I64, {3}, {1, 2, 1});
}

TEST(Reduction, RegistryRows) {
  const OpRegistry &r = OpRegistry::instance();
  for (const char *name :
       {"sum",      "mean",    "prod",      "amax",   "amin", "max",          "min",
        "max_dim",  "min_dim", "argmax",    "argmin", "var",  "std",          "var_mean",
        "std_mean", "norm",    "logsumexp", "any",    "all",  "count_nonzero"})
    EXPECT_TRUE(r.get(name).has(kReduction)) << name;
  for (const char *name : {"softmax", "log_softmax", "cumsum", "cumprod"})
    EXPECT_NE(r.lookup(name), nullptr) << name;
}

} // namespace
