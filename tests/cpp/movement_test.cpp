// Data-movement, indexing, sorting and creation ops: graphs built with the Builder, verified,
// run by the interpreter, and checked against values worked out by hand (or by a plain loop in
// the test); view ops are checked to share their input's storage, and invalid input to fail with
// a clear message.
#include "op_test_util.h"

#include "xjit/ir/diagnostics.h"
#include "xjit/ir/op_registry.h"

#include <climits>
#include <cmath>

using namespace xjit;
using namespace xjit::optest;

namespace {

/// 0, 1, 2, ... in the given shape.
Tensor iota(DType dt, Sizes sizes) {
  Tensor t = Tensor::empty(dt, std::move(sizes));
  for (int64_t i = 0; i < t.numel(); ++i)
    t.setInt(i, i);
  return t;
}
/// A non-contiguous tensor with the values of iota(dt, {rows, cols}) (a transposed view).
Tensor transposedIota(DType dt, int64_t rows, int64_t cols) {
  Tensor base = Tensor::empty(dt, {cols, rows});
  Tensor t = base.view({rows, cols}, {1, rows}, 0);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.setInt(i, i);
  return t;
}

/// The message of the TypeInferenceError that inference throws ("" if none).
std::string inferError(std::string_view name, std::vector<Type> types, AttrMap attrs = {}) {
  try {
    infer(name, std::move(types), std::move(attrs));
  } catch (const TypeInferenceError &e) {
    return e.what();
  }
  return "";
}
/// The message of the error running the op throws ("" if none).
std::string runError(std::string_view name, std::vector<RtValue> args, AttrMap attrs = {}) {
  try {
    run(name, std::move(args), std::move(attrs));
  } catch (const Error &e) {
    return e.what();
  }
  return "";
}

bool sharesStorage(const Tensor &a, const Tensor &b) { return a.storage() == b.storage(); }

#define EXPECT_HAS(haystack, needle)                                                               \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << haystack

// ---------------------------------------------------------------------------------------------
// Views and shapes

TEST(MovementReshape, ViewWhenPossibleCopyOtherwise) {
  Tensor x = iota(DType::F32, {2, 6});
  Tensor y = run1("reshape", {x}, {{"shape", Attr::Ints{3, -1}}});
  EXPECT_EQ(y.sizes(), (Sizes{3, 4}));
  EXPECT_TRUE(sharesStorage(x, y));
  EXPECT_EQ(values(y), values(x));
  // A transposed input cannot be flattened without a copy; values follow row-major order.
  Tensor t = transposedIota(DType::I32, 3, 4);
  Tensor z = run1("reshape", {t}, {{"shape", Attr::Ints{12}}});
  EXPECT_FALSE(sharesStorage(t, z));
  EXPECT_EQ(values(z), values(iota(DType::I32, {12})));
  // Splitting a dim of a transposed tensor is still a view.
  Tensor w = run1("reshape", {t}, {{"shape", Attr::Ints{3, 2, 2}}});
  EXPECT_TRUE(sharesStorage(t, w));
  EXPECT_EQ(values(w), values(iota(DType::I32, {12})));
  // 0-d and empty.
  EXPECT_EQ(run1("reshape", {make(DType::F16, {}, {2.5})}, {{"shape", Attr::Ints{1, 1}}}).sizes(),
            (Sizes{1, 1}));
  EXPECT_EQ(run1("reshape", {iota(DType::F32, {0, 3})}, {{"shape", Attr::Ints{3, 0, 5}}}).sizes(),
            (Sizes{3, 0, 5}));
}

TEST(MovementReshape, SymbolicInference) {
  EXPECT_EQ(infer("reshape", {ty(DType::F32, {s0, 128})}, {{"shape", Attr::Ints{-1, 64}}})[0].str(),
            "f32[s0*2,64]");
  EXPECT_EQ(infer("view", {ty(DType::F32, {s0, 4, 8})}, {{"shape", Attr::Ints{-1}}})[0].str(),
            "f32[s0*32]");
  EXPECT_EQ(infer("flatten", {ty(DType::F32, {2, s0, 3})}, {{"start_dim", 1}})[0].str(),
            "f32[2,s0*3]");
  EXPECT_EQ(
      infer("unflatten", {ty(DType::F32, {s0 * 4})}, {{"dim", 0}, {"sizes", Attr::Ints{-1, 2}}})[0]
          .str(),
      "f32[s0*2,2]");
}

TEST(MovementReshape, Errors) {
  EXPECT_HAS(inferError("reshape", {ty(DType::F32, {2, 3})}, {{"shape", Attr::Ints{4, 2}}}),
             "is invalid for input of size 6");
  EXPECT_HAS(inferError("reshape", {ty(DType::F32, {2, 3})}, {{"shape", Attr::Ints{-1, -1}}}),
             "only one dimension can be inferred");
  EXPECT_HAS(inferError("reshape", {ty(DType::F32, {0, 3})}, {{"shape", Attr::Ints{-1, 0}}}),
             "invalid");
  EXPECT_HAS(runError("view", {transposedIota(DType::F32, 3, 4)}, {{"shape", Attr::Ints{12}}}),
             "use reshape instead");
}

TEST(MovementView, SharesStorageAndWritesShow) {
  Tensor x = iota(DType::I64, {4, 3});
  Tensor y = run1("view", {x}, {{"shape", Attr::Ints{2, 2, 3}}});
  ASSERT_TRUE(sharesStorage(x, y));
  y.setInt(5, 100);
  EXPECT_EQ(x.getInt(5), 100);
}

TEST(MovementPermute, TransposeTMovedim) {
  Tensor x = iota(DType::F32, {2, 3, 4});
  Tensor p = run1("permute", {x}, {{"dims", Attr::Ints{2, 0, -2}}});
  EXPECT_EQ(p.sizes(), (Sizes{4, 2, 3}));
  EXPECT_TRUE(sharesStorage(x, p));
  // p[k][i][j] == x[i][j][k] == 12i + 4j + k
  EXPECT_EQ(p.getDouble(1 * 6 + 1 * 3 + 2), 12 + 8 + 1);
  Tensor t = run1("transpose", {x}, {{"dim0", 0}, {"dim1", -1}});
  EXPECT_EQ(t.sizes(), (Sizes{4, 3, 2}));
  EXPECT_EQ(t.getDouble(3 * 6 + 2 * 2 + 1), 12 + 8 + 3);
  Tensor m = run1("t", {iota(DType::BF16, {2, 3})});
  EXPECT_EQ(values(m), (Values{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(run1("t", {iota(DType::I8, {3})}).sizes(), (Sizes{3}));
  EXPECT_EQ(run1("t", {make(DType::F32, {}, {1})}).sizes(), (Sizes{}));
  Tensor mv = run1("movedim", {x}, {{"source", Attr::Ints{0}}, {"destination", Attr::Ints{-1}}});
  EXPECT_EQ(mv.sizes(), (Sizes{3, 4, 2}));
  EXPECT_EQ(mv.getDouble(1 * 8 + 2 * 2 + 1), 12 + 4 + 2);
  EXPECT_EQ(infer("transpose", {ty(DType::F32, {s0, 3, s1})}, {{"dim0", 0}, {"dim1", 2}})[0].str(),
            "f32[s1,3,s0]");
  EXPECT_HAS(inferError("permute", {ty(DType::F32, {2, 3})}, {{"dims", Attr::Ints{0, 0}}}),
             "repeats");
  EXPECT_HAS(inferError("permute", {ty(DType::F32, {2, 3})}, {{"dims", Attr::Ints{0}}}), "rank");
  EXPECT_HAS(inferError("t", {ty(DType::F32, {2, 3, 4})}), "<= 2 dimensions");
  EXPECT_HAS(inferError("transpose", {ty(DType::F32, {2, 3})}, {{"dim0", 0}, {"dim1", 2}}),
             "out of range");
}

TEST(MovementExpand, StrideZeroViews) {
  Tensor x = make(DType::F32, {3, 1}, {1, 2, 3});
  Tensor y = run1("expand", {x}, {{"shape", Attr::Ints{2, -1, 4}}});
  EXPECT_EQ(y.sizes(), (Sizes{2, 3, 4}));
  EXPECT_EQ(y.strides()[0], 0);
  EXPECT_EQ(y.strides()[2], 0);
  EXPECT_TRUE(sharesStorage(x, y));
  EXPECT_EQ(y.getDouble(12 + 2 * 4 + 3), 3);
  Tensor z = run1("expand_as", {x, iota(DType::I32, {3, 5})});
  EXPECT_EQ(z.sizes(), (Sizes{3, 5}));
  EXPECT_EQ(infer("expand", {ty(DType::F32, {1, s0})}, {{"shape", Attr::Ints{4, -1}}})[0].str(),
            "f32[4,s0]");
  EXPECT_EQ(infer("expand_as", {ty(DType::F32, {1, 3}), ty(DType::F32, {s0, 3})})[0].str(),
            "f32[s0,3]");
  EXPECT_HAS(inferError("expand", {ty(DType::F32, {3})}, {{"shape", Attr::Ints{-1, 3}}}),
             "isn't allowed in a leading, non-existing dimension");
  EXPECT_HAS(inferError("expand", {ty(DType::F32, {3})}, {{"shape", Attr::Ints{4}}}),
             "must match the existing size");
  EXPECT_HAS(inferError("expand", {ty(DType::F32, {2, 3})}, {{"shape", Attr::Ints{3}}}),
             "greater or equal");
}

TEST(MovementSqueeze, AllListedAndUnsqueeze) {
  Tensor x = iota(DType::F32, {1, 3, 1});
  EXPECT_EQ(run1("squeeze", {x}).sizes(), (Sizes{3}));
  EXPECT_EQ(run1("squeeze", {x}, {{"dim", Attr::Ints{-1}}}).sizes(), (Sizes{1, 3}));
  // Listing a non-1 dim is not an error; an empty list squeezes nothing (as torch).
  EXPECT_EQ(run1("squeeze", {x}, {{"dim", Attr::Ints{1}}}).sizes(), (Sizes{1, 3, 1}));
  EXPECT_EQ(run1("squeeze", {x}, {{"dim", Attr::Ints{}}}).sizes(), (Sizes{1, 3, 1}));
  EXPECT_TRUE(sharesStorage(x, run1("squeeze", {x})));
  EXPECT_EQ(run1("squeeze", {make(DType::I64, {}, {4})}).sizes(), (Sizes{}));
  EXPECT_EQ(infer("squeeze", {ty(DType::F32, {1, s0, 1})})[0].str(), "f32[s0]");
  Tensor u = run1("unsqueeze", {x}, {{"dim", -1}});
  EXPECT_EQ(u.sizes(), (Sizes{1, 3, 1, 1}));
  EXPECT_EQ(run1("unsqueeze", {make(DType::F32, {}, {1})}, {{"dim", 0}}).sizes(), (Sizes{1}));
  EXPECT_HAS(inferError("unsqueeze", {ty(DType::F32, {2})}, {{"dim", 3}}), "out of range");
}

TEST(MovementFlatten, RangesAndZeroD) {
  Tensor x = iota(DType::I16, {2, 3, 4});
  EXPECT_EQ(run1("flatten", {x}).sizes(), (Sizes{24}));
  EXPECT_EQ(run1("flatten", {x}, {{"start_dim", 1}}).sizes(), (Sizes{2, 12}));
  EXPECT_EQ(run1("flatten", {x}, {{"start_dim", 0}, {"end_dim", 1}}).sizes(), (Sizes{6, 4}));
  EXPECT_EQ(run1("flatten", {make(DType::F32, {}, {3})}).sizes(), (Sizes{1}));
  Tensor u = run1("unflatten", {x}, {{"dim", -1}, {"sizes", Attr::Ints{2, -1}}});
  EXPECT_EQ(u.sizes(), (Sizes{2, 3, 2, 2}));
  EXPECT_TRUE(sharesStorage(x, u));
  EXPECT_HAS(inferError("flatten", {ty(DType::F32, {2, 3})}, {{"start_dim", 1}, {"end_dim", 0}}),
             "start_dim cannot come after end_dim");
}

TEST(MovementSlice, PythonClampingAndSteps) {
  Tensor x = iota(DType::F32, {3, 10});
  auto slice = [&](int64_t start, int64_t end, int64_t step) {
    return run1("slice", {x}, {{"dim", -1}, {"start", start}, {"end", end}, {"step", step}});
  };
  Tensor a = slice(2, INT64_MAX, 3);
  EXPECT_EQ(a.sizes(), (Sizes{3, 3}));
  EXPECT_EQ(values(a), (Values{2, 5, 8, 12, 15, 18, 22, 25, 28}));
  EXPECT_TRUE(sharesStorage(x, a));
  EXPECT_EQ(slice(-3, -1, 1).sizes(), (Sizes{3, 2}));
  EXPECT_EQ(slice(-3, -1, 1).getDouble(0), 7);
  EXPECT_EQ(slice(-100, 100, 4).sizes(), (Sizes{3, 3}));
  EXPECT_EQ(slice(7, 2, 1).sizes(), (Sizes{3, 0}));
  EXPECT_EQ(slice(20, 30, 1).sizes(), (Sizes{3, 0}));
  // Default attributes: the whole dim.
  EXPECT_EQ(run1("slice", {x}).sizes(), (Sizes{3, 10}));
  EXPECT_EQ(infer("slice", {ty(DType::F32, {s0, 4})}, {{"start", 1}})[0].str(), "f32[s0-1,4]");
  EXPECT_EQ(infer("slice", {ty(DType::F32, {s0})}, {{"start", -2}})[0].str(), "f32[2]");
  EXPECT_EQ(infer("slice", {ty(DType::F32, {s0})}, {{"end", -1}, {"step", 2}})[0],
            ty(DType::F32, {(s0 - 1 + 1).floorDiv(2)})); // ceil((s0 - 1) / 2)
  EXPECT_HAS(inferError("slice", {ty(DType::F32, {4})}, {{"step", 0}}), "step must be positive");
  EXPECT_HAS(inferError("slice", {ty(DType::F32, {})}), "0-d");
}

TEST(MovementSelect, NarrowIndexing) {
  Tensor x = iota(DType::I32, {3, 4});
  Tensor s = run1("select", {x}, {{"dim", 1}, {"index", -1}});
  EXPECT_EQ(values(s), (Values{3, 7, 11}));
  EXPECT_TRUE(sharesStorage(x, s));
  EXPECT_EQ(run1("select", {iota(DType::F32, {3})}, {{"dim", 0}, {"index", 2}}).sizes(), (Sizes{}));
  Tensor n = run1("narrow", {x}, {{"dim", 0}, {"start", -2}, {"length", 2}});
  EXPECT_EQ(values(n), (Values{4, 5, 6, 7, 8, 9, 10, 11}));
  EXPECT_HAS(inferError("select", {ty(DType::F32, {3, 4})}, {{"dim", 0}, {"index", 3}}),
             "out of range");
  EXPECT_HAS(
      inferError("narrow", {ty(DType::F32, {3, 4})}, {{"dim", 1}, {"start", 2}, {"length", 3}}),
      "exceeds dimension size");
  EXPECT_EQ(infer("select", {ty(DType::F32, {s0, 4})}, {{"dim", 0}, {"index", -1}})[0].str(),
            "f32[4]");
}

TEST(MovementSplit, SplitChunkUnbind) {
  Tensor x = iota(DType::F32, {7, 2});
  auto parts = run("split", {x}, {{"split_size", 3}});
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[2].tensor().sizes(), (Sizes{1, 2}));
  EXPECT_EQ(values(parts[1].tensor()), (Values{6, 7, 8, 9, 10, 11}));
  EXPECT_TRUE(sharesStorage(x, parts[2].tensor()));
  auto sizes = run("split_with_sizes", {x}, {{"split_sizes", Attr::Ints{1, 0, 6}}});
  ASSERT_EQ(sizes.size(), 3u);
  EXPECT_EQ(sizes[1].tensor().sizes(), (Sizes{0, 2}));
  EXPECT_EQ(values(sizes[0].tensor()), (Values{0, 1}));
  auto chunks = run("chunk", {iota(DType::I64, {5})}, {{"chunks", 4}});
  ASSERT_EQ(chunks.size(), 3u); // ceil(5/4) = 2 per chunk
  EXPECT_EQ(values(chunks[2].tensor()), (Values{4}));
  EXPECT_EQ(run("chunk", {iota(DType::I64, {0})}, {{"chunks", 4}}).size(), 4u);
  EXPECT_EQ(run("split", {iota(DType::I64, {0, 2})}, {{"split_size", 3}}).size(), 1u);
  auto rows = run("unbind", {x}, {{"dim", -1}});
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(values(rows[1].tensor()), (Values{1, 3, 5, 7, 9, 11, 13}));
  EXPECT_HAS(
      inferError("split_with_sizes", {ty(DType::F32, {7})}, {{"split_sizes", Attr::Ints{3, 3}}}),
      "do not sum");
  EXPECT_HAS(inferError("split", {ty(DType::F32, {s0})}, {{"split_size", 2}}), "must be static");
  EXPECT_EQ(infer("split", {ty(DType::F32, {s0, 4})}, {{"split_size", 2}, {"dim", 1}})[1].str(),
            "f32[s0,2]");
}

TEST(MovementDiagonal, OffsetsAndDims) {
  Tensor x = iota(DType::F32, {3, 4});
  EXPECT_EQ(values(run1("diagonal", {x})), (Values{0, 5, 10}));
  EXPECT_EQ(values(run1("diagonal", {x}, {{"offset", 1}})), (Values{1, 6, 11}));
  EXPECT_EQ(values(run1("diagonal", {x}, {{"offset", -1}})), (Values{4, 9}));
  EXPECT_EQ(run1("diagonal", {x}, {{"offset", 5}}).sizes(), (Sizes{0}));
  Tensor y = iota(DType::F32, {2, 3, 4});
  Tensor d = run1("diagonal", {y}, {{"offset", 1}, {"dim1", -1}, {"dim2", 0}});
  EXPECT_EQ(d.sizes(), (Sizes{3, 1}));
  // d[j][0] = y[1][j][0] (dim2 index = offset)
  EXPECT_EQ(values(d), (Values{12, 16, 20}));
  EXPECT_TRUE(sharesStorage(y, d));
  EXPECT_EQ(infer("diagonal", {ty(DType::F32, {s0, s0})})[0].str(), "f32[s0]");
  EXPECT_HAS(inferError("diagonal", {ty(DType::F32, {3})}), "at least 2 dims");
}

TEST(MovementContiguous, CloneAlias) {
  Tensor x = iota(DType::F32, {2, 3});
  EXPECT_TRUE(sharesStorage(x, run1("contiguous", {x})));
  Tensor t = transposedIota(DType::F32, 2, 3);
  Tensor c = run1("contiguous", {t});
  EXPECT_FALSE(sharesStorage(t, c));
  EXPECT_TRUE(c.isContiguous());
  EXPECT_EQ(values(c), values(x));
  Tensor cl = run1("clone", {x});
  EXPECT_FALSE(sharesStorage(x, cl));
  EXPECT_EQ(values(cl), values(x));
  EXPECT_TRUE(sharesStorage(x, run1("alias", {x})));
}

TEST(MovementViewTraits, RowsDeclareAliasing) {
  const auto &r = OpRegistry::instance();
  for (const char *name : {"reshape", "view", "permute", "transpose", "expand", "squeeze",
                           "unsqueeze", "slice", "select", "narrow", "split", "chunk", "unbind",
                           "diagonal", "alias", "t", "movedim", "flatten", "unflatten"})
    EXPECT_TRUE(r.get(name).has(kView)) << name;
  for (const char *name : {"clone", "cat", "pad", "gather", "index", "index_put", "sort"})
    EXPECT_FALSE(r.get(name).has(kView)) << name;
  for (const char *name : {"index_put_", "copy_", "fill_"})
    EXPECT_TRUE(r.get(name).has(kInPlace));
}

// ---------------------------------------------------------------------------------------------
// Copying data movement

TEST(MovementCat, PromotionLegacyEmptyAndSymbolic) {
  Tensor a = iota(DType::I32, {2, 2});
  Tensor b = make(DType::F32, {1, 2}, {0.5, 1.5});
  Tensor c = run1("cat", {a, b});
  EXPECT_EQ(c.dtype(), DType::F32);
  EXPECT_EQ(values(c), (Values{0, 1, 2, 3, 0.5, 1.5}));
  Tensor d =
      run1("cat", {a, iota(DType::I32, {0}), transposedIota(DType::I32, 2, 3)}, {{"dim", -1}});
  EXPECT_EQ(d.sizes(), (Sizes{2, 5}));
  EXPECT_EQ(values(d), (Values{0, 1, 0, 1, 2, 2, 3, 3, 4, 5}));
  EXPECT_EQ(run1("cat", {iota(DType::F32, {0}), iota(DType::F32, {0})}).sizes(), (Sizes{0}));
  EXPECT_EQ(
      infer("cat", {ty(DType::F32, {s0, 4}), ty(DType::F32, {3, 4}), ty(DType::F32, {s1, 4})})[0]
          .str(),
      "f32[s0+s1+3,4]");
  EXPECT_EQ(infer("cat", {ty(DType::F32, {2, s0}), ty(DType::F32, {2, 3})}, {{"dim", 0}})[0].str(),
            "f32[4,3]");
  EXPECT_HAS(inferError("cat", {ty(DType::F32, {2, 3}), ty(DType::F32, {2, 4})}),
             "sizes of tensors must match");
  EXPECT_HAS(inferError("cat", {ty(DType::F32, {}), ty(DType::F32, {2})}), "zero-dimensional");
  EXPECT_HAS(inferError("cat", {ty(DType::F32, {2, 3}), ty(DType::F32, {3})}),
             "same number of dimensions");
}

TEST(MovementStack, NewDim) {
  Tensor a = iota(DType::F32, {2}), b = make(DType::BF16, {2}, {5, 6});
  Tensor s = run1("stack", {a, b}, {{"dim", -1}});
  EXPECT_EQ(s.sizes(), (Sizes{2, 2}));
  EXPECT_EQ(s.dtype(), DType::F32);
  EXPECT_EQ(values(s), (Values{0, 5, 1, 6}));
  EXPECT_EQ(run1("stack", {make(DType::I64, {}, {1}), make(DType::I64, {}, {2})}).sizes(),
            (Sizes{2}));
  EXPECT_HAS(inferError("stack", {ty(DType::F32, {2}), ty(DType::F32, {3})}), "equal size");
}

TEST(MovementPad, AllModes) {
  Tensor x = iota(DType::F32, {1, 4}); // [0 1 2 3]
  auto pad = [&](const char *mode, Attr::Ints p, double value = 0) {
    return values(run1("pad", {x}, {{"pad", p}, {"mode", mode}, {"value", value}}));
  };
  EXPECT_EQ(pad("constant", {1, 2}, 9), (Values{9, 0, 1, 2, 3, 9, 9}));
  EXPECT_EQ(pad("constant", {-1, 1}, 9), (Values{1, 2, 3, 9}));
  EXPECT_EQ(pad("reflect", {2, 3}), (Values{2, 1, 0, 1, 2, 3, 2, 1, 0}));
  EXPECT_EQ(pad("replicate", {2, 1}), (Values{0, 0, 0, 1, 2, 3, 3}));
  EXPECT_EQ(pad("circular", {1, 2}), (Values{3, 0, 1, 2, 3, 0, 1}));
  Tensor two =
      run1("pad", {iota(DType::I64, {2, 2})}, {{"pad", Attr::Ints{0, 0, 1, 0}}, {"value", 7}});
  EXPECT_EQ(values(two), (Values{7, 7, 0, 1, 2, 3}));
  EXPECT_EQ(infer("pad", {ty(DType::F32, {s0, 3})}, {{"pad", Attr::Ints{1, 1, 2, 0}}})[0].str(),
            "f32[s0+2,5]");
  EXPECT_HAS(
      inferError("pad", {ty(DType::F32, {2, 3})}, {{"pad", Attr::Ints{3, 0}}, {"mode", "reflect"}}),
      "less than the corresponding input dimension");
  EXPECT_HAS(inferError("pad", {ty(DType::F32, {3})}, {{"pad", Attr::Ints{1}}}), "divisible by 2");
  EXPECT_HAS(inferError("pad", {ty(DType::F32, {3})}, {{"pad", Attr::Ints{0, 0, 1, 1}}}),
             "too large");
  EXPECT_HAS(
      inferError("pad", {ty(DType::F32, {3})}, {{"pad", Attr::Ints{1, 1}}, {"mode", "wrap"}}),
      "unknown mode");
}

TEST(MovementRepeat, RepeatTile) {
  Tensor x = make(DType::I8, {2}, {1, 2});
  Tensor r = run1("repeat", {x}, {{"repeats", Attr::Ints{2, 3}}});
  EXPECT_EQ(r.sizes(), (Sizes{2, 6}));
  EXPECT_EQ(values(r), (Values{1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2}));
  Tensor t = run1("tile", {iota(DType::F32, {2, 2})}, {{"dims", Attr::Ints{2}}});
  EXPECT_EQ(values(t), (Values{0, 1, 0, 1, 2, 3, 2, 3}));
  EXPECT_EQ(run1("repeat", {x}, {{"repeats", Attr::Ints{0}}}).sizes(), (Sizes{0}));
  EXPECT_EQ(infer("repeat", {ty(DType::F32, {s0})}, {{"repeats", Attr::Ints{2, 3}}})[0].str(),
            "f32[2,s0*3]");
  EXPECT_HAS(inferError("repeat", {ty(DType::F32, {2, 2})}, {{"repeats", Attr::Ints{2}}}),
             "can not be smaller");
}

TEST(MovementFlipRoll, Values) {
  Tensor x = iota(DType::F32, {2, 3});
  EXPECT_EQ(values(run1("flip", {x}, {{"dims", Attr::Ints{-1}}})), (Values{2, 1, 0, 5, 4, 3}));
  EXPECT_EQ(values(run1("flip", {x}, {{"dims", Attr::Ints{0, 1}}})), (Values{5, 4, 3, 2, 1, 0}));
  EXPECT_HAS(inferError("flip", {ty(DType::F32, {2})}, {{"dims", Attr::Ints{0, -1}}}),
             "duplicates");
  EXPECT_EQ(values(run1("roll", {x}, {{"shifts", Attr::Ints{1}}})), (Values{5, 0, 1, 2, 3, 4}));
  EXPECT_EQ(values(run1("roll", {x}, {{"shifts", Attr::Ints{-1}}, {"dims", Attr::Ints{1}}})),
            (Values{1, 2, 0, 4, 5, 3}));
  EXPECT_EQ(values(run1("roll", {x}, {{"shifts", Attr::Ints{1, 4}}, {"dims", Attr::Ints{0, 1}}})),
            (Values{5, 3, 4, 2, 0, 1}));
  EXPECT_HAS(inferError("roll", {ty(DType::F32, {2})}, {{"shifts", Attr::Ints{1, 1}}}),
             "one element");
}

TEST(MovementTriangle, TriuTril) {
  Tensor x = make(DType::F32, {3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  EXPECT_EQ(values(run1("triu", {x})), (Values{1, 2, 3, 0, 5, 6, 0, 0, 9}));
  EXPECT_EQ(values(run1("triu", {x}, {{"diagonal", 1}})), (Values{0, 2, 3, 0, 0, 6, 0, 0, 0}));
  EXPECT_EQ(values(run1("tril", {x}, {{"diagonal", -1}})), (Values{0, 0, 0, 4, 0, 0, 7, 8, 0}));
  Tensor b = run1("tril", {make(DType::Bool, {2, 1, 2}, {1, 1, 1, 1})});
  EXPECT_EQ(values(b), (Values{1, 0, 1, 0}));
  EXPECT_HAS(inferError("triu", {ty(DType::F32, {3})}), "at least 2 dimensions");
}

TEST(MovementMaskedFill, BroadcastAndValueForms) {
  Tensor x = iota(DType::F32, {3});
  Tensor mask = make(DType::Bool, {2, 1}, {1, 0});
  Tensor y = run1("masked_fill", {x, mask}, {{"value", -1.5}});
  EXPECT_EQ(y.sizes(), (Sizes{2, 3}));
  EXPECT_EQ(values(y), (Values{-1.5, -1.5, -1.5, 0, 1, 2}));
  // The value as a scalar operand and as a 0-d tensor; float values truncate into ints.
  Tensor xi = iota(DType::I32, {3});
  Tensor m = make(DType::Bool, {3}, {0, 1, 1});
  EXPECT_EQ(values(run1("masked_fill", {xi, m, RtValue(2.7)})), (Values{0, 2, 2}));
  EXPECT_EQ(values(run1("masked_fill", {xi, m, make(DType::F32, {}, {-4})})), (Values{0, -4, -4}));
  EXPECT_HAS(
      inferError("masked_fill", {ty(DType::F32, {3}), ty(DType::F32, {3})}, {{"value", 1.0}}),
      "bool mask");
  EXPECT_HAS(inferError("masked_fill", {ty(DType::F32, {3}), ty(DType::Bool, {3})}),
             "needs a value");
}

// ---------------------------------------------------------------------------------------------
// Indexing

TEST(IndexingIndexSelect, Values) {
  Tensor x = iota(DType::F32, {3, 4});
  Tensor y = run1("index_select", {x, i64({3, 0, 3})}, {{"dim", 1}});
  EXPECT_EQ(values(y), (Values{3, 0, 3, 7, 4, 7, 11, 8, 11}));
  Tensor z = run1("index_select", {transposedIota(DType::I64, 3, 4), make(DType::I32, {}, {2})},
                  {{"dim", 0}});
  EXPECT_EQ(values(z), (Values{8, 9, 10, 11}));
  EXPECT_HAS(runError("index_select", {x, i64({-1})}, {{"dim", 1}}), "out of bounds");
  EXPECT_HAS(inferError("index_select", {ty(DType::F32, {3}), ty(DType::F32, {1})}, {{"dim", 0}}),
             "int32 or int64");
  EXPECT_EQ(
      infer("index_select", {ty(DType::F32, {s0, 4}), ty(DType::I64, {s1})}, {{"dim", 0}})[0].str(),
      "f32[s1,4]");
}

TEST(IndexingGather, TakeAlongDim) {
  Tensor x = make(DType::F32, {2, 2}, {1, 2, 3, 4});
  Tensor g = run1("gather", {x, make(DType::I64, {2, 2}, {0, 0, 1, 0})}, {{"dim", 1}});
  EXPECT_EQ(values(g), (Values{1, 1, 4, 3}));
  Tensor g0 = run1("gather", {x, make(DType::I64, {1, 2}, {1, 0})}, {{"dim", 0}});
  EXPECT_EQ(values(g0), (Values{3, 2}));
  EXPECT_HAS(runError("gather", {x, make(DType::I64, {1, 1}, {2})}, {{"dim", 0}}), "out of bounds");
  EXPECT_HAS(inferError("gather", {ty(DType::F32, {2, 2}), ty(DType::I64, {3})}, {{"dim", 0}}),
             "same number of dimensions");
  EXPECT_HAS(inferError("gather", {ty(DType::F32, {2, 2}), ty(DType::I64, {3, 1})}, {{"dim", 1}}),
             "exceeds size of input");
  Tensor t = run1("take_along_dim", {x, make(DType::I64, {2, 1}, {1, -2})}, {{"dim", 1}});
  EXPECT_EQ(values(t), (Values{2, 3}));
  Tensor b = run1("take_along_dim", {x, make(DType::I64, {1, 2}, {1, 0})},
                  {{"dim", 0}}); // broadcast dim 1
  EXPECT_EQ(values(b), (Values{3, 2}));
  Tensor f = run1("take_along_dim", {x, i64({3, 0, -1})});
  EXPECT_EQ(values(f), (Values{4, 1, 4}));
}

TEST(IndexingScatter, Forms) {
  Tensor self = make(DType::F32, {2, 3}, {1, 1, 1, 1, 1, 1});
  Tensor index = make(DType::I64, {1, 3}, {1, 0, 1});
  Tensor src = make(DType::F32, {2, 3}, {5, 6, 7, 8, 9, 10});
  EXPECT_EQ(values(run1("scatter", {self, index, src}, {{"dim", 0}})), (Values{1, 6, 1, 5, 1, 7}));
  EXPECT_EQ(values(run1("scatter", {self, index, RtValue(2.5)}, {{"dim", 0}})),
            (Values{1, 2.5, 1, 2.5, 1, 2.5}));
  EXPECT_EQ(values(run1("scatter", {self, index}, {{"dim", 0}, {"value", -1}})),
            (Values{1, -1, 1, -1, 1, -1}));
  EXPECT_EQ(values(run1("scatter", {self, index, src}, {{"dim", 0}, {"reduce", "multiply"}})),
            (Values{1, 6, 1, 5, 1, 7}));
  // Duplicates accumulate in scatter_add.
  Tensor acc =
      run1("scatter_add", {iota(DType::I64, {3}), i64({0, 2, 0, 0}), i64({10, 20, 30, 40})},
           {{"dim", 0}});
  EXPECT_EQ(values(acc), (Values{80, 1, 22}));
  // The input is not modified.
  EXPECT_EQ(values(self), (Values{1, 1, 1, 1, 1, 1}));
  EXPECT_HAS(runError("scatter", {self, make(DType::I64, {1, 1}, {2}), src}, {{"dim", 0}}),
             "out of bounds");
  EXPECT_HAS(inferError("scatter", {ty(DType::F32, {2}), ty(DType::I64, {2}), ty(DType::F16, {2})},
                        {{"dim", 0}}),
             "dtype");
  EXPECT_HAS(inferError("scatter", {ty(DType::F32, {2}), ty(DType::I64, {2}), ty(DType::F32, {2})},
                        {{"dim", 0}, {"reduce", "sum"}}),
             "add or multiply");
}

TEST(IndexingScatter, Reduce) {
  Tensor self = make(DType::F32, {4}, {0, 1, 2, 3});
  Tensor index = i64({0, 0, 1});
  Tensor src = make(DType::F32, {3}, {3, 4, 6});
  auto reduce = [&](const char *how, bool includeSelf, const Tensor &s, const Tensor &v) {
    return values(run1("scatter_reduce", {s, index, v},
                       {{"dim", 0}, {"reduce", how}, {"include_self", includeSelf}}));
  };
  EXPECT_EQ(reduce("sum", true, self, src), (Values{7, 7, 2, 3}));
  EXPECT_EQ(reduce("prod", false, self, src), (Values{12, 6, 2, 3}));
  EXPECT_EQ(reduce("mean", true, self, src), (Values{double(float(7.0 / 3)), 3.5, 2, 3}));
  EXPECT_EQ(reduce("mean", false, self, src), (Values{3.5, 6, 2, 3}));
  EXPECT_EQ(reduce("amax", true, self, src), (Values{4, 6, 2, 3}));
  EXPECT_EQ(reduce("amin", false, self, src), (Values{3, 6, 2, 3}));
  // Integer mean floors, like torch.
  EXPECT_EQ(reduce("mean", true, iota(DType::I64, {4}), i64({3, 4, 6})), (Values{2, 3, 2, 3}));
  Values withNaN = reduce("amax", true, self, make(DType::F32, {3}, {kNaN, 4, 6}));
  EXPECT_TRUE(std::isnan(withNaN[0]));
}

TEST(IndexingMaskedScatter, ConsumesSourceInOrder) {
  Tensor x = make(DType::I32, {2, 2}, {0, 0, 0, 0});
  Tensor mask = make(DType::Bool, {2}, {1, 0});
  Tensor y = run1("masked_scatter", {x, mask, make(DType::I32, {3}, {5, 6, 7})});
  EXPECT_EQ(values(y), (Values{5, 0, 6, 0}));
  EXPECT_HAS(runError("masked_scatter", {x, mask, make(DType::I32, {1}, {5})}), "source");
}

TEST(IndexingAdvancedIndex, AdjacentAndSeparatedIndices) {
  Tensor x = iota(DType::F32, {2, 3, 4});
  RtValue none;
  // x[:, [0, 2], [1, 3]] -> [2, 2]; adjacent indices stay in place.
  Tensor a = run1("index", {x, none, i64({0, 2}), i64({1, 3})});
  EXPECT_EQ(a.sizes(), (Sizes{2, 2}));
  EXPECT_EQ(values(a), (Values{1, 11, 13, 23}));
  // x[[0, 1], :, [1, 3]] -> broadcast dims first: [2, 3].
  Tensor b = run1("index", {x, i64({0, 1}), none, i64({1, -1})});
  EXPECT_EQ(b.sizes(), (Sizes{2, 3}));
  EXPECT_EQ(values(b), (Values{1, 5, 9, 15, 19, 23}));
  // x[:, [[0], [2]]] -> [2, 2, 1, 4] with broadcasting of a 2-d index.
  Tensor c = run1("index", {x, none, make(DType::I64, {2, 1}, {0, 2})});
  EXPECT_EQ(c.sizes(), (Sizes{2, 2, 1, 4}));
  EXPECT_EQ(c.getDouble(4 * 1 + 2), 10);
  // Index dims broadcast against each other: x[[[0],[1]], [0, 1, 2]] -> [2, 3, 4].
  Tensor d = run1("index", {x, make(DType::I64, {2, 1}, {0, 1}), i64({0, 1, 2})});
  EXPECT_EQ(d.sizes(), (Sizes{2, 3, 4}));
  EXPECT_EQ(values(d), values(x));
  EXPECT_EQ(
      infer("index", {ty(DType::F32, {s0, 5}), Type::none(), ty(DType::I64, {s1, 2})})[0].str(),
      "f32[s0,s1,2]");
  EXPECT_HAS(runError("index", {x, i64({2})}), "out of bounds");
  EXPECT_HAS(inferError("index", {ty(DType::F32, {3}), ty(DType::Bool, {3})}), "mask");
  EXPECT_HAS(inferError("index", {ty(DType::F32, {3}), ty(DType::I64, {1}), ty(DType::I64, {1})}),
             "too many indices");
}

TEST(IndexingAdvancedIndex, IndexPut) {
  Tensor x = iota(DType::F32, {3, 2});
  RtValue none;
  Tensor y = run1("index_put", {x, make(DType::F32, {}, {-1}), i64({0, -1})});
  EXPECT_EQ(values(y), (Values{-1, -1, 2, 3, -1, -1}));
  EXPECT_EQ(values(x), (Values{0, 1, 2, 3, 4, 5})); // value semantics
  // Accumulate sums duplicates; values broadcast over the indexed result [2, 2].
  Tensor z =
      run1("index_put", {x, make(DType::F32, {2}, {10, 20}), i64({1, 1})}, {{"accumulate", true}});
  EXPECT_EQ(values(z), (Values{0, 1, 22, 43, 4, 5}));
  // x[:, [1]] = [[7], [8], [9]]
  Tensor w = run1("index_put", {x, make(DType::F32, {3, 1}, {7, 8, 9}), none, i64({1})});
  EXPECT_EQ(values(w), (Values{0, 7, 2, 8, 4, 9}));
  // In place: operand 0 is written and returned.
  Tensor v = iota(DType::I64, {4});
  Tensor r = run1("index_put_", {v, i64({9}), i64({3, 0})});
  EXPECT_TRUE(sharesStorage(v, r));
  EXPECT_EQ(values(v), (Values{9, 1, 2, 9}));
  EXPECT_HAS(
      inferError("index_put", {ty(DType::F32, {3}), ty(DType::I64, {}), ty(DType::I64, {1})}),
      "dtypes match");
  EXPECT_HAS(
      inferError("index_put", {ty(DType::F32, {3, 2}), ty(DType::F32, {3}), ty(DType::I64, {2})}),
      "shape mismatch");
}

TEST(IndexingInPlace, CopyAndFill) {
  Tensor dst = iota(DType::F32, {2, 3});
  Tensor r = run1("copy_", {dst, make(DType::I64, {3}, {7, 8, 9})});
  EXPECT_TRUE(sharesStorage(dst, r));
  EXPECT_EQ(values(dst), (Values{7, 8, 9, 7, 8, 9}));
  // Writing into a strided view of a tensor.
  Tensor base = iota(DType::I32, {2, 3});
  Tensor col = base.view({2}, {3}, 1);
  run1("copy_", {col, make(DType::F64, {1}, {-2.9})});
  EXPECT_EQ(values(base), (Values{0, -2, 2, 3, -2, 5}));
  EXPECT_HAS(inferError("copy_", {ty(DType::F32, {3}), ty(DType::F32, {2, 3})}),
             "cannot be broadcast");
  Tensor f = iota(DType::BF16, {3});
  run1("fill_", {f, RtValue(int64_t{4})});
  EXPECT_EQ(values(f), (Values{4, 4, 4}));
  run1("fill_", {f}, {{"value", 0.5}});
  EXPECT_EQ(values(f), (Values{0.5, 0.5, 0.5}));
  EXPECT_HAS(inferError("fill_", {ty(DType::F32, {3}), ty(DType::F32, {3})}), "0-dimensional");
}

// ---------------------------------------------------------------------------------------------
// Sorting

TEST(SortingSort, StableWithNaNLargest) {
  Tensor x = make(DType::F32, {6}, {1, 2, 2, 1, kNaN, 3});
  auto r = run("sort", {x});
  Values v = values(r[0].tensor());
  EXPECT_EQ(Values(v.begin(), v.end() - 1), (Values{1, 1, 2, 2, 3}));
  EXPECT_TRUE(std::isnan(v.back()));
  EXPECT_EQ(values(r[1].tensor()), (Values{0, 3, 1, 2, 5, 4}));
  EXPECT_EQ(r[1].tensor().dtype(), DType::I64);
  auto d = run("sort", {x}, {{"descending", true}});
  EXPECT_EQ(values(d[1].tensor()), (Values{4, 5, 1, 2, 0, 3}));
  Tensor m = transposedIota(DType::I32, 2, 3); // [[0 1 2] [3 4 5]]
  EXPECT_EQ(values(run1("argsort", {m}, {{"dim", 0}, {"descending", true}})),
            (Values{1, 1, 1, 0, 0, 0}));
  auto z = run("sort", {make(DType::F16, {}, {3})});
  EXPECT_EQ(z[1].tensor().sizes(), (Sizes{}));
}

TEST(SortingSort, Topk) {
  Tensor x = make(DType::F32, {6}, {1, 2, 2, 1, kNaN, 3});
  auto r = run("topk", {x}, {{"k", 3}});
  Values v = values(r[0].tensor());
  EXPECT_TRUE(std::isnan(v[0]));
  EXPECT_EQ(Values(v.begin() + 1, v.end()), (Values{3, 2}));
  EXPECT_EQ(values(r[1].tensor()), (Values{4, 5, 1}));
  // k < n takes a partial sort: ties still come in position order (the stable sort's prefix).
  auto lo = run("topk", {x}, {{"k", 4}, {"largest", false}});
  EXPECT_EQ(values(lo[1].tensor()), (Values{0, 3, 1, 2}));
  auto s = run("topk", {iota(DType::I64, {2, 4})}, {{"k", 2}, {"largest", false}});
  EXPECT_EQ(values(s[0].tensor()), (Values{0, 1, 4, 5}));
  EXPECT_EQ(values(s[1].tensor()), (Values{0, 1, 0, 1}));
  EXPECT_EQ(run("topk", {iota(DType::F32, {3})}, {{"k", 0}})[0].tensor().sizes(), (Sizes{0}));
  EXPECT_HAS(inferError("topk", {ty(DType::F32, {3})}, {{"k", 4}}), "out of range");
  EXPECT_EQ(infer("topk", {ty(DType::F32, {s0, 8})}, {{"k", 2}})[1].str(), "i64[s0,2]");
}

// ---------------------------------------------------------------------------------------------
// Creation and size queries

TEST(Creation, Arange) {
  Tensor a = run1("arange", {}, {{"end", 5}});
  EXPECT_EQ(a.dtype(), DType::I64);
  EXPECT_EQ(values(a), (Values{0, 1, 2, 3, 4}));
  Tensor b = run1("arange", {}, {{"start", 0}, {"end", 1}, {"step", 0.25}});
  EXPECT_EQ(b.dtype(), DType::F32);
  EXPECT_EQ(values(b), (Values{0, 0.25, 0.5, 0.75}));
  EXPECT_EQ(values(run1("arange", {}, {{"start", 10}, {"end", 0}, {"step", -3}})),
            (Values{10, 7, 4, 1}));
  Tensor h = run1("arange", {}, {{"end", 3}, {"dtype", DType::F16}});
  EXPECT_EQ(h.dtype(), DType::F16);
  EXPECT_EQ(run1("arange", {}, {{"start", 0.5}, {"end", 5}, {"dtype", DType::I32}}).sizes(),
            (Sizes{5}));
  EXPECT_HAS(inferError("arange", {}, {{"end", 5}, {"step", 0}}), "nonzero");
  EXPECT_HAS(inferError("arange", {}, {{"end", 5}, {"step", -1}}), "inconsistent");
}

TEST(Creation, FullZerosOnesLike) {
  Tensor f = run1("full", {}, {{"shape", Attr::Ints{2}}, {"fill_value", 3}});
  EXPECT_EQ(f.dtype(), DType::I64);
  EXPECT_EQ(values(f), (Values{3, 3}));
  EXPECT_EQ(run1("full", {}, {{"shape", Attr::Ints{}}, {"fill_value", true}}).dtype(), DType::Bool);
  Tensor g =
      run1("full", {}, {{"shape", Attr::Ints{2}}, {"fill_value", 2.5}, {"dtype", DType::I32}});
  EXPECT_EQ(values(g), (Values{2, 2}));
  EXPECT_EQ(run1("zeros", {}, {{"shape", Attr::Ints{0, 3}}}).dtype(), DType::F32);
  EXPECT_EQ(values(run1("ones", {}, {{"shape", Attr::Ints{2}}, {"dtype", DType::BF16}})),
            (Values{1, 1}));
  Tensor x = transposedIota(DType::F16, 2, 3);
  Tensor z = run1("zeros_like", {x}, {{"dtype", DType::I32}});
  EXPECT_EQ(z.dtype(), DType::I32);
  EXPECT_EQ(z.sizes(), (Sizes{2, 3}));
  EXPECT_EQ(values(run1("full_like", {x}, {{"fill_value", -2}})), Values(6, -2));
  EXPECT_EQ(values(run1("ones_like", {x})), Values(6, 1));
  Tensor n = run1("new_full", {x}, {{"shape", Attr::Ints{1, 2}}, {"fill_value", 7}});
  EXPECT_EQ(n.dtype(), DType::F16);
  EXPECT_EQ(values(n), (Values{7, 7}));
  EXPECT_EQ(infer("ones_like", {ty(DType::F32, {s0, 2})})[0].str(), "f32[s0,2]");
  EXPECT_HAS(inferError("zeros", {}, {{"shape", Attr::Ints{-1}}}), "negative dimension");
}

TEST(Creation, EyeLinspace) {
  EXPECT_EQ(values(run1("eye", {}, {{"n", 2}})), (Values{1, 0, 0, 1}));
  Tensor e = run1("eye", {}, {{"n", 3}, {"m", 2}, {"dtype", DType::I64}});
  EXPECT_EQ(e.sizes(), (Sizes{3, 2}));
  EXPECT_EQ(values(e), (Values{1, 0, 0, 1, 0, 0}));
  EXPECT_EQ(values(run1("linspace", {}, {{"start", 0}, {"end", 1}, {"steps", 5}})),
            (Values{0, 0.25, 0.5, 0.75, 1}));
  // Integer linspace truncates start + i*step (first half) and end - (n-1-i)*step (second).
  EXPECT_EQ(values(run1("linspace", {},
                        {{"start", 0}, {"end", 10}, {"steps", 7}, {"dtype", DType::I64}})),
            (Values{0, 1, 3, 5, 6, 8, 10}));
  EXPECT_EQ(values(run1("linspace", {}, {{"start", 2}, {"end", 3}, {"steps", 1}})), (Values{2}));
  EXPECT_EQ(run1("linspace", {}, {{"start", 2}, {"end", 3}, {"steps", 0}}).sizes(), (Sizes{0}));
}

TEST(Creation, SizeQueries) {
  Tensor x = iota(DType::F32, {2, 5});
  EXPECT_EQ(run("size", {x}, {{"dim", -1}})[0].toInt(), 5);
  EXPECT_EQ(run("numel", {x})[0].toInt(), 10);
  EXPECT_EQ(run("dim", {x})[0].toInt(), 2);
  EXPECT_EQ(infer("size", {ty(DType::F32, {s0})}, {{"dim", 0}})[0], Type::intTy());
  EXPECT_HAS(inferError("size", {ty(DType::F32, {})}, {{"dim", 0}}), "no dimensions");
}

// A slice of a symbolic dim assumes its bounds in range; a run-time size that breaks that fails
// like a shape guard (a user error), never with a result of the wrong size.
TEST(MovementSymbolic, SliceBoundsAreGuardedAtRunTime) {
  Graph g;
  Builder b(g.body());
  Value *x = g.addInput(ty(DType::F32, {s0, 2}), "x");
  Value *y = b.op("slice", {x}, {{"end", 3}});
  EXPECT_EQ(y->type().str(), "f32[3,2]");
  b.createWithTypes("return", {y}, {});
  EXPECT_EQ(interpret(g, {iota(DType::F32, {5, 2})})[0].tensor().sizes(), (Sizes{3, 2}));
  try {
    interpret(g, {iota(DType::F32, {1, 2})});
    ADD_FAILURE() << "expected an error";
  } catch (const Error &e) {
    EXPECT_EQ(e.kind(), ErrorKind::User);
    EXPECT_HAS(e.what(), "assumes bounds 0:3 lie within dimension 0");
  }
  EXPECT_HAS(
      inferError("split_with_sizes", {ty(DType::F32, {s0})}, {{"split_sizes", Attr::Ints{-1, 2}}}),
      "non-negative");
}

// Symbolic shapes flow end to end: a graph over f32[s0,128] runs for a concrete s0.
TEST(MovementSymbolic, GraphRunsWithBoundSymbols) {
  Graph g;
  Builder b(g.body());
  Value *x = g.addInput(ty(DType::F32, {s0, 128}), "x");
  Value *r = b.op("reshape", {x}, {{"shape", Attr::Ints{-1, 64}}});
  Value *t = b.op("transpose", {r}, {{"dim0", 0}, {"dim1", 1}});
  Value *c = b.op("cat", {t, t}, {{"dim", 1}});
  EXPECT_EQ(c->type().str(), "f32[64,s0*4]");
  b.createWithTypes("return", {c}, {});
  ASSERT_TRUE(verifyGraph(g).empty());
  auto out = interpret(g, {iota(DType::F32, {3, 128})});
  EXPECT_EQ(out[0].tensor().sizes(), (Sizes{64, 12}));
  EXPECT_EQ(out[0].tensor().getDouble(12 + 1), 65); // c[1][1] = t[1][1] = r[1][1] = 64 + 1
}

} // namespace
