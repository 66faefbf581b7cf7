// Reduction kernels compared with the reference interpreter: sum / mean / prod / amax / amin /
// max / min / var / std over inner, outer, several and all axes (keepdim, negative dims, odd
// sizes, symbolic and strided inputs), softmax / log_softmax / layer_norm / rms_norm, and the
// groups the fuse pass forms (decomposed softmax, residual add + layer_norm + gelu, several
// outputs of the reduced and full shapes), alone and through the CPU Target's fusion path.
//
// Tolerances: integer and bool results are exact. The reference reduces in f64 and rounds once;
// compiled f32 kernels accumulate in f32 (the vectorizer reassociates sums), so f32 results agree
// within 2e-5 relative to the row's magnitude (|got - ref| <= 2e-5 (|ref| + n)), f64 within
// 1e-12 on the same scale, f16 / bf16 within 1e-2 relative plus 2e-2 (one or two units of their
// precision at these magnitudes).
#include "xjit/backend/jit.h"
#include "xjit/backend/lower.h"
#include "xjit/backend/target.h"
#include "xjit/ir/diagnostics.h"
#include "xjit/ir/interpreter.h"
#include "xjit/ir/op_registry.h"
#include "xjit/ir/parser.h"
#include "xjit/ir/printer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

namespace xjit::backend {
namespace {

Tensor randomTensor(DType d, const std::vector<int64_t> &sizes, std::mt19937 &rng) {
  Tensor t = Tensor::empty(d, sizes);
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (isFloating(d))
      t.setDouble(i, std::uniform_real_distribution<double>(-3, 3)(rng));
    else if (d == DType::Bool)
      t.setInt(i, int64_t(rng() & 1));
    else
      t.setInt(i, std::uniform_int_distribution<int64_t>(d == DType::U8 ? 0 : -9, 9)(rng));
  }
  return t;
}

/// Inputs for a graph: random tensors of its input types with symbolic dims set to `symbolSize`.
std::vector<RtValue> randomInputs(const Graph &g, std::mt19937 &rng, int64_t symbolSize = 11) {
  std::vector<RtValue> in;
  for (size_t i = 0; i < g.numInputs(); ++i) {
    const Type &t = g.input(i)->type();
    std::vector<int64_t> sizes;
    for (const DimExpr &d : t.shape())
      sizes.push_back(d.isStatic() ? d.value() : symbolSize);
    in.emplace_back(randomTensor(t.dtype(), sizes, rng));
  }
  return in;
}

std::string compare(const Tensor &got, const Tensor &ref, double rowSize) {
  if (got.sizes() != ref.sizes() || got.dtype() != ref.dtype()) return "shape or dtype differs";
  for (int64_t i = 0; i < ref.numel(); ++i) {
    bool ok;
    if (isFloating(ref.dtype())) {
      double a = got.getDouble(i), r = ref.getDouble(i);
      double tol = ref.dtype() == DType::F64   ? 1e-12 * (std::abs(r) + rowSize)
                   : ref.dtype() == DType::F32 ? 2e-5 * (std::abs(r) + rowSize)
                                               : 1e-2 * std::abs(r) + 2e-2;
      ok = (std::isnan(a) && std::isnan(r)) || a == r || std::abs(a - r) <= tol;
      if (!ok)
        return "element " + std::to_string(i) + ": compiled " + std::to_string(a) + ", reference " +
               std::to_string(r);
    } else {
      ok = got.getInt(i) == ref.getInt(i);
      if (!ok)
        return "element " + std::to_string(i) + ": compiled " + std::to_string(got.getInt(i)) +
               ", reference " + std::to_string(ref.getInt(i));
    }
  }
  return "";
}

/// Lowers the graph body, compiles it and compares with the interpreter on `inputs`. With
/// `expectError`, both must fail; otherwise the reference must succeed.
std::string check(const Graph &g, const std::vector<RtValue> &inputs, bool fastPaths = true,
                  bool expectError = false) {
  std::string why = whyNotLowerable(*g.body());
  if (!why.empty()) return "not lowerable: " + why;
  LoweredKernel lk = lowerElementwiseBlock(*g.body(), g.name(), {.fastPaths = fastPaths});
  auto ck = Jit::instance().compile(lk.kernel);
  std::vector<RtValue> ref;
  std::string refError;
  try {
    ref = interpret(g, inputs);
  } catch (const std::exception &e) {
    refError = e.what();
  }
  std::vector<RtValue> got;
  try {
    got = runLowered(lk, *ck, inputs);
  } catch (const KernelError &e) {
    if (!expectError) return std::string("compiled kernel failed: ") + e.what() + "; " + refError;
    return refError.empty() ? std::string("compiled kernel failed: ") + e.what() : "";
  }
  if (!refError.empty()) return "the reference failed (" + refError + "), the kernel did not";
  if (expectError) return "expected an error";
  double rowSize = 1;
  for (const RtValue &v : inputs)
    if (v.isTensor()) rowSize = std::max(rowSize, double(v.tensor().numel()));
  rowSize = std::sqrt(rowSize);
  for (size_t o = 0; o < ref.size(); ++o) {
    std::string diff = compare(got[o].tensor(), ref[o].tensor(), rowSize);
    if (!diff.empty()) return "output " + std::to_string(o) + ": " + diff;
  }
  return "";
}

std::string checkText(const std::string &text, uint32_t seed = 1, int64_t symbolSize = 11) {
  auto g = parseGraph(text);
  std::mt19937 rng(seed);
  std::string diff = check(*g, randomInputs(*g, rng, symbolSize));
  return diff.empty() ? "" : diff + "\n" + text;
}

/// One reduction op over x: `graph @r(%x: <in>) -> (<out>) { %y = <op>(%x) {attrs} : <out> }`.
std::string oneOp(const std::string &op, const std::string &in, const std::string &attrs,
                  const std::string &out) {
  return "graph @" + op + "(%x: " + in + ") -> (" + out + ") {\n  %y = " + op + "(%x) " + attrs +
         " : " + out + "\n  return(%y)\n}\n";
}

struct OneOpCase {
  const char *op, *in, *attrs, *out;
};

TEST(BackendReduction, SingleOpsAgreeWithInterpreter) {
  const OneOpCase cases[] = {
      // inner axis, odd sizes, keepdim, negative dims
      {"sum", "f32[7,13]", "{dims = [1]}", "f32[7]"},
      {"sum", "f32[7,13]", "{dims = [-1], keepdim = true}", "f32[7,1]"},
      {"sum", "f32[1031]", "{dims = [0]}", "f32[]"},
      // outer axis, middle axis, several axes, all axes
      {"sum", "f32[13,7]", "{dims = [0]}", "f32[7]"},
      {"sum", "f32[3,5,9]", "{dims = [1], keepdim = true}", "f32[3,1,9]"},
      {"sum", "f32[3,5,9]", "{dims = [0, 2]}", "f32[5]"},
      {"sum", "f32[3,5,9]", "{dims = [-1, -3], keepdim = true}", "f32[1,5,1]"},
      {"sum", "f32[3,5,9]", "{dims = []}", "f32[]"},
      {"sum", "f32[]", "{dims = []}", "f32[]"},
      {"sum", "f64[7,13]", "{dims = [1]}", "f64[7]"},
      {"sum", "bf16[6,33]", "{dims = [1]}", "bf16[6]"},
      {"sum", "f16[6,33]", "{dims = [0]}", "f16[33]"},
      {"sum", "i32[6,33]", "{dims = [1]}", "i64[6]"},
      {"sum", "bool[6,33]", "{dims = [1]}", "i64[6]"},
      {"sum", "u8[6,33]", "{dims = [0]}", "i64[33]"},
      {"sum", "f32[6,33]", "{dims = [1], dtype = f64}", "f64[6]"},
      {"sum", "i32[6,33]", "{dims = [1], dtype = f32}", "f32[6]"},
      // outer axes with the inner dim kept: one partial block of lanes, several blocks of
      // 1024 lanes with a partial last one
      {"sum", "f32[5,130]", "{dims = [0]}", "f32[130]"},
      {"sum", "f32[3,2100]", "{dims = [0]}", "f32[2100]"},
      {"softmax", "f32[3,1500]", "{dim = 0}", "f32[3,1500]"},
      {"var", "f32[4,7,70]", "{dims = [0, 1]}", "f32[70]"},
      {"amax", "i32[9,65]", "{dims = [0], keepdim = true}", "i32[1,65]"},
      {"softmax", "f32[6,150]", "{dim = 0}", "f32[6,150]"},
      {"layer_norm", "f32[64]", "{normalized_shape = [64]}", "f32[64]"},
      {"mean", "f32[7,13]", "{dims = [1]}", "f32[7]"},
      {"mean", "f32[7,13]", "{dims = [0], keepdim = true}", "f32[1,13]"},
      {"mean", "bf16[5,17]", "{dims = [-1]}", "bf16[5]"},
      {"mean", "f64[3,5,9]", "{dims = [1, 2]}", "f64[3]"},
      {"prod", "f32[7,5]", "{dims = [1]}", "f32[7]"},
      {"prod", "i64[7,5]", "{dims = [0]}", "i64[5]"},
      {"amax", "f32[7,13]", "{dims = [1]}", "f32[7]"},
      {"amax", "f32[13,7]", "{dims = [0], keepdim = true}", "f32[1,7]"},
      {"amin", "f32[3,5,9]", "{dims = [0, 2]}", "f32[5]"},
      {"amax", "i32[7,13]", "{dims = [-1]}", "i32[7]"},
      {"amin", "i8[7,13]", "{dims = [1]}", "i8[7]"},
      {"amin", "u8[7,13]", "{dims = [1]}", "u8[7]"},
      {"amax", "bool[7,13]", "{dims = [1]}", "bool[7]"},
      {"amax", "bf16[7,13]", "{dims = [1]}", "bf16[7]"},
      {"amax", "f16[7,13]", "{dims = [0]}", "f16[13]"},
      {"max", "f32[7,13]", "", "f32[]"},
      {"min", "i64[7,13]", "", "i64[]"},
      {"var", "f32[7,13]", "{dims = [1]}", "f32[7]"},
      {"var", "f32[7,13]", "{dims = [0], keepdim = true, correction = 0}", "f32[1,13]"},
      {"std", "f64[3,5,9]", "{dims = [1, 2], correction = 2.5}", "f64[3]"},
      {"std", "f32[4,1]", "{dims = [1]}", "f32[4]"}, // N - correction = 0: inf / nan
      {"std", "bf16[4,19]", "{dims = [1]}", "bf16[4]"},
      {"softmax", "f32[7,13]", "{dim = 1}", "f32[7,13]"},
      {"softmax", "f32[7,13]", "{dim = 0}", "f32[7,13]"},
      {"softmax", "f32[3,5,9]", "{dim = -2}", "f32[3,5,9]"},
      {"softmax", "f64[7,13]", "{dim = -1}", "f64[7,13]"},
      {"softmax", "bf16[7,13]", "{dim = -1}", "bf16[7,13]"},
      {"softmax", "f16[7,13]", "{dim = 1, dtype = f32}", "f32[7,13]"},
      {"log_softmax", "f32[7,13]", "{dim = 1}", "f32[7,13]"},
      {"log_softmax", "f32[5,9]", "{dim = 0}", "f32[5,9]"},
      {"softmax", "f32[]", "{dim = 0}", "f32[]"},
      {"layer_norm", "f32[3,5,9]", "{normalized_shape = [9]}", "f32[3,5,9]"},
      {"layer_norm", "f32[3,5,9]", "{normalized_shape = [5, 9], eps = 0.01}", "f32[3,5,9]"},
      {"layer_norm", "bf16[4,24]", "{normalized_shape = [24]}", "bf16[4,24]"},
      {"rms_norm", "f32[3,5,9]", "{normalized_shape = [9]}", "f32[3,5,9]"},
      {"rms_norm", "f64[3,17]", "{normalized_shape = [17], eps = 0.001}", "f64[3,17]"},
  };
  for (const OneOpCase &c : cases) {
    std::string text = oneOp(c.op, c.in, c.attrs, c.out);
    SCOPED_TRACE(text);
    std::mt19937 rng(5);
    auto g = parseGraph(text);
    std::vector<RtValue> in = randomInputs(*g, rng);
    EXPECT_EQ(check(*g, in), "");
    EXPECT_EQ(check(*g, in, /*fastPaths=*/false), "");
    // The same op compiled alone (the CPU Target's path for a single op).
    ASSERT_EQ(whyNotElementwise(*g->body()->front()), "");
  }
}

/// A random reduction group as text: x (and a broadcast row w) over a random full shape,
/// elementwise producers, one to three reductions over the same random dims, consumers reading
/// the reduced values broadcast back, an optional softmax, and outputs of the full and reduced
/// shapes. In f64, and each consumer is tanh(value - reduced): chains of reductions of
/// differences cancel catastrophically, so that f32 kernels (which accumulate in f32) and the
/// reference (f64) could differ by far more than rounding; bounded consumers and f64 keep the
/// comparison about the loops, not about cancellation.
std::string randomReductionGroup(std::mt19937 &rng) {
  auto pick = [&](size_t n) { return size_t(rng() % n); };
  int64_t rank = 1 + int64_t(pick(3));
  std::vector<int64_t> sizes;
  for (int64_t d = 0; d < rank; ++d)
    sizes.push_back(std::vector<int64_t>{1, 3, 7, 16, 33, 70}[pick(6)]);
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < rank; ++d)
    if (rng() & 1) dims.push_back(rng() & 1 ? d : d - rank); // negative dims too
  if (dims.empty()) dims.push_back(int64_t(pick(size_t(rank))));
  std::vector<bool> reduced(size_t(rank), false);
  for (int64_t d : dims)
    reduced[size_t(d < 0 ? d + rank : d)] = true;
  auto shapeText = [&](bool keep, bool full) {
    std::string t = "f64[";
    bool first = true;
    for (int64_t d = 0; d < rank; ++d) {
      if (!full && reduced[size_t(d)] && !keep) continue;
      t += (first ? "" : ",") + std::to_string(!full && reduced[size_t(d)] ? 1 : sizes[size_t(d)]);
      first = false;
    }
    return t + "]";
  };
  std::string full = shapeText(true, true), keep = shapeText(true, false);
  std::string dimsText = "[";
  for (size_t i = 0; i < dims.size(); ++i)
    dimsText += (i ? ", " : "") + std::to_string(dims[i]);
  dimsText += "]";
  std::string w = "f64[" + std::to_string(sizes.back()) + "]";
  std::string text = "graph @fuzz(%x: " + full + ", %w: " + w + ") -> (";
  std::string body;
  // Producer chain on the full shape.
  const char *unaries[] = {"exp", "tanh", "abs", "neg", "sigmoid"};
  std::string cur = "%x";
  int n = 0;
  auto tmp = [&]() { return "%t" + std::to_string(n++); };
  if (rng() & 1) {
    std::string t = tmp();
    body += "  " + t + " = mul(" + cur + ", %w) : " + full + "\n";
    cur = t;
  }
  if (rng() & 1) {
    std::string t = tmp();
    body += "  " + t + " = " + unaries[pick(5)] + "(" + cur + ") : " + full + "\n";
    cur = t;
  }
  // Reductions (keepdim, so consumers broadcast them back) and consumers.
  const char *reds[] = {"sum", "mean", "amax", "amin", "var", "std"};
  std::vector<std::string> outs = {cur}, outTypes = {full};
  std::string last;
  int nred = 1 + int(pick(3));
  for (int r = 0; r < nred; ++r) {
    std::string red = reds[pick(6)], t = tmp();
    body += "  " + t + " = " + red + "(" + cur + ") {dims = " + dimsText +
            ", keepdim = true} : " + keep + "\n";
    std::string c = tmp(), b = tmp();
    body += "  " + c + " = sub(" + cur + ", " + t + ") : " + full + "\n";
    body += "  " + b + " = tanh(" + c + ") : " + full + "\n";
    cur = b;
    last = t;
  }
  outs.push_back(cur);
  outTypes.push_back(full);
  outs.push_back(last);
  outTypes.push_back(keep);
  if (rng() & 1) { // a softmax over the last reduced dim of the final full value
    std::string t = tmp();
    int64_t d = dims.back();
    if (dims.size() == 1) {
      body +=
          "  " + t + " = softmax(" + cur + ") {dim = " + std::to_string(d) + "} : " + full + "\n";
      outs.push_back(t);
      outTypes.push_back(full);
    }
  }
  outs.erase(outs.begin()); // the producer value is not always read outside
  outTypes.erase(outTypes.begin());
  for (size_t i = 0; i < outTypes.size(); ++i)
    text += (i ? ", " : "") + outTypes[i];
  text += ") {\n" + body + "  return(";
  for (size_t i = 0; i < outs.size(); ++i)
    text += (i ? ", " : "") + outs[i];
  return text + ")\n}\n";
}

TEST(BackendReduction, RandomGroupsMatchTheInterpreter) {
  std::mt19937 rng(2024); // seeds 7 and 2024 x 400 graphs pass; 40 keep the test fast
  int checked = 0;
  for (int i = 0; i < 40; ++i) {
    std::string text = randomReductionGroup(rng);
    SCOPED_TRACE(text);
    std::unique_ptr<Graph> g;
    try {
      g = parseGraph(text);
    } catch (const Error &e) {
      ADD_FAILURE() << "generator made an invalid graph: " << e.what();
      continue;
    }
    std::mt19937 irng{uint32_t(i)};
    EXPECT_EQ(check(*g, randomInputs(*g, irng)), "");
    ++checked;
  }
  EXPECT_EQ(checked, 40);
}

TEST(BackendReduction, NormsWithAffineParameters) {
  EXPECT_EQ(checkText(R"(graph @ln(%x: f32[6,33], %w: f32[33], %b: f32[33]) -> (f32[6,33]) {
  %y = layer_norm(%x, %w, %b) {normalized_shape = [33]} : f32[6,33]
  return(%y)
})"),
            "");
  EXPECT_EQ(checkText(R"(graph @ln2(%x: f32[2,3,4,5], %w: f32[4,5]) -> (f32[2,3,4,5]) {
  %y = layer_norm(%x, %w) {normalized_shape = [4, 5]} : f32[2,3,4,5]
  return(%y)
})"),
            "");
  EXPECT_EQ(checkText(R"(graph @rms(%x: bf16[6,33], %w: f32[33]) -> (bf16[6,33]) {
  %y = rms_norm(%x, %w) {normalized_shape = [33]} : bf16[6,33]
  return(%y)
})"),
            "");
}

TEST(BackendReduction, FusedGroupsAgreeWithInterpreter) {
  // Decomposed softmax (the fuse pass's reduction group), yielding the max as well.
  EXPECT_EQ(checkText(R"(graph @softmax(%x: f32[9,37]) -> (f32[9,37], f32[9,1]) {
  %m = amax(%x) {dims = [-1], keepdim = true} : f32[9,1]
  %s = sub(%x, %m) : f32[9,37]
  %e = exp(%s) : f32[9,37]
  %z = sum(%e) {dims = [-1], keepdim = true} : f32[9,1]
  %y = div(%e, %z) : f32[9,37]
  return(%y, %m)
})"),
            "");
  // Residual add, layer_norm, gelu.
  EXPECT_EQ(
      checkText(
          R"(graph @add_norm(%x: f32[2,8,32], %r: f32[2,8,32], %w: f32[32], %b: f32[32]) -> (f32[2,8,32]) {
  %h = add(%x, %r) : f32[2,8,32]
  %n = layer_norm(%h, %w, %b) {normalized_shape = [32]} : f32[2,8,32]
  %g = gelu(%n) : f32[2,8,32]
  return(%g)
})"),
      "");
  // Decomposed layer norm with keepdim statistics and a reduced-shaped output without keepdim.
  EXPECT_EQ(checkText(R"(graph @ln(%x: f32[5,21]) -> (f32[5,21], f32[5]) {
  %mu = mean(%x) {dims = [1], keepdim = true} : f32[5,1]
  %d = sub(%x, %mu) : f32[5,21]
  %sq = mul(%d, %d) : f32[5,21]
  %v = mean(%sq) {dims = [1], keepdim = true} : f32[5,1]
  %c = constant() {value = 1e-5} : float
  %ve = add(%v, %c) : f32[5,1]
  %rs = rsqrt(%ve) : f32[5,1]
  %y = mul(%d, %rs) : f32[5,21]
  %vs = squeeze(%v) {dim = [1]} : f32[5]
  return(%y, %vs)
})"),
            "");
  // A reduction without keepdim broadcast back through unsqueeze + expand, as tracers spell it.
  EXPECT_EQ(checkText(R"(graph @unsq(%x: f32[6,20]) -> (f32[6,20]) {
  %m = mean(%x) {dims = [1]} : f32[6]
  %u = unsqueeze(%m) {dim = 1} : f32[6,1]
  %e = expand(%u) {shape = [6, 20]} : f32[6,20]
  %y = sub(%x, %e) : f32[6,20]
  return(%y)
})"),
            "");
  // A reduction of a transposed view (the full shape is the view's).
  EXPECT_EQ(checkText(R"(graph @tsum(%x: f32[9,5]) -> (f32[5], f32[5,9]) {
  %t = transpose(%x) {dim0 = 0, dim1 = 1} : f32[5,9]
  %s = sum(%t) {dims = [1], keepdim = true} : f32[5,1]
  %d = div(%t, %s) : f32[5,9]
  %q = squeeze(%s) {dim = [1]} : f32[5]
  return(%q, %d)
})"),
            "");
  // An outer-axis reduction followed by elementwise ops on the reduced value, and a symbolic
  // row count.
  EXPECT_EQ(checkText(R"(graph @cols(%x: f32[s0,16]) -> (f32[1,16]) {
  %z = sum(%x) {dims = [0], keepdim = true} : f32[1,16]
  %e = exp(%z) : f32[1,16]
  return(%e)
})"),
            "");
  // Symbolic row length and a reduction over it (the inner loop's extent is read at run time).
  EXPECT_EQ(checkText(R"(graph @symrow(%x: f32[3,s0]) -> (f32[3,s0]) {
  %y = log_softmax(%x) {dim = 1} : f32[3,s0]
  return(%y)
})",
                      2, 1),
            "");
  EXPECT_EQ(checkText(R"(graph @symrow2(%x: f32[3,s0]) -> (f32[3]) {
  %y = var(%x) {dims = [1]} : f32[3]
  return(%y)
})",
                      3, 29),
            "");
}

TEST(BackendReduction, StridedInputsAndNaN) {
  auto g = parseGraph(R"(graph @sm(%x: f32[6,10]) -> (f32[6,10], f32[6]) {
  %y = softmax(%x) {dim = 1} : f32[6,10]
  %m = amax(%x) {dims = [1]} : f32[6]
  return(%y, %m)
})");
  std::mt19937 rng(9);
  // A transposed view (inner stride 6) takes the general version.
  Tensor base = randomTensor(DType::F32, {10, 6}, rng);
  Tensor xt = base.view({6, 10}, {1, 6}, 0);
  EXPECT_EQ(check(*g, {RtValue(xt)}), "");
  // NaN in a row makes the whole softmax row and its max NaN; other rows are unaffected.
  Tensor x = randomTensor(DType::F32, {6, 10}, rng);
  x.setDouble(13, std::numeric_limits<double>::quiet_NaN());
  x.setDouble(25, -std::numeric_limits<double>::infinity());
  EXPECT_EQ(check(*g, {RtValue(x)}), "");
}

/// The largest |got - ref| / |ref| over the elements of f32 results.
double maxRelativeError(const Tensor &got, const Tensor &ref) {
  double worst = 0;
  for (int64_t i = 0; i < ref.numel(); ++i)
    worst =
        std::max(worst, std::abs(got.getDouble(i) - ref.getDouble(i)) / std::abs(ref.getDouble(i)));
  return worst;
}

// Long f32 sums of values with a nonzero mean (uniform on [2, 4)) against the reference's f64:
// the code generator cascades them (sum_cascade.h), so each result is within a few f32 ulps;
// summed in order by a few vector partials (XJIT_SUM_CASCADE=0) the error grows with the length
// (these fail then: 0.5e-6 to 3e-5). var / std sum their squares in f64.
TEST(BackendReduction, LongSumsStayWithinAFewUlps) {
  const OneOpCase cases[] = {
      {"sum", "f32[3,1000003]", "{dims = [1]}", "f32[3]"},          // blocks, levels, a tail
      {"mean", "f32[2,3,250,250]", "{dims = [0, 2, 3]}", "f32[3]"}, // batch-norm statistics
      {"sum", "f32[50000,40]", "{dims = [0]}", "f32[40]"},          // lanes
      {"sum", "f32[1200,1000]", "{dims = [0, 1]}", "f32[]"},        // parallel chunks
      {"var", "f32[2,1000000]", "{dims = [1], correction = 1}", "f32[2]"},
  };
  std::mt19937 rng(5);
  for (const OneOpCase &c : cases) {
    auto g = parseGraph(oneOp(c.op, c.in, c.attrs, c.out));
    LoweredKernel lk = lowerElementwiseBlock(*g->body(), g->name(), {});
    auto ck = Jit::instance().compile(lk.kernel);
    const Type &t = g->input(0)->type();
    std::vector<int64_t> sizes;
    for (const DimExpr &d : t.shape())
      sizes.push_back(d.value());
    Tensor x = Tensor::empty(DType::F32, sizes);
    for (int64_t i = 0; i < x.numel(); ++i)
      x.setDouble(i, std::uniform_real_distribution<double>(2, 4)(rng));
    std::vector<RtValue> inputs = {RtValue(x)};
    std::vector<RtValue> got = runLowered(lk, *ck, inputs);
    std::vector<RtValue> ref = interpret(*g, inputs);
    EXPECT_LE(maxRelativeError(got[0].tensor(), ref[0].tensor()), 3e-7) << c.op << " " << c.in;
  }
  // var's squared deviations are summed in an f64 accumulator.
  auto g = parseGraph(oneOp("var", "f32[4,100]", "{dims = [1], correction = 1}", "f32[4]"));
  LoweredKernel lk = lowerElementwiseBlock(*g->body(), g->name(), {});
  EXPECT_NE(printKernel(lk.kernel).find("_m2: f64"), std::string::npos) << printKernel(lk.kernel);
}

TEST(BackendReduction, EmptyRowsFailLikeTheReference) {
  auto g = parseGraph(R"(graph @e(%x: f32[3,s0]) -> (f32[3], f32[3]) {
  %m = amax(%x) {dims = [1]} : f32[3]
  %s = sum(%x) {dims = [1]} : f32[3]
  return(%m, %s)
})");
  std::mt19937 rng(1);
  EXPECT_EQ(check(*g, randomInputs(*g, rng, 0), true, /*expectError=*/true), ""); // amax fails
  auto g2 = parseGraph(R"(graph @e2(%x: f32[3,s0]) -> (f32[3]) {
  %s = mean(%x) {dims = [1]} : f32[3]
  return(%s)
})");
  EXPECT_EQ(check(*g2, randomInputs(*g2, rng, 0)), ""); // NaN, like the reference
}

TEST(BackendReduction, UnsupportedStructuresAreRefused) {
  // Reductions over different dims cannot share one loop nest.
  auto g = parseGraph(R"(graph @two(%x: f32[4,16]) -> (f32[4,1], f32[1,16]) {
  %a = sum(%x) {dims = [1], keepdim = true} : f32[4,1]
  %b = sum(%x) {dims = [0], keepdim = true} : f32[1,16]
  return(%a, %b)
})");
  EXPECT_NE(whyNotLowerable(*g->body()).find("other dims"), std::string::npos)
      << whyNotLowerable(*g->body());
  // A reduced value read at other rows (transposed) is refused, not miscompiled.
  auto g2 = parseGraph(R"(graph @t(%x: f32[4,4]) -> (f32[4,4]) {
  %a = sum(%x) {dims = [1], keepdim = true} : f32[4,1]
  %b = expand(%a) {shape = [4, 4]} : f32[4,4]
  %c = transpose(%b) {dim0 = 0, dim1 = 1} : f32[4,4]
  %d = add(%x, %c) : f32[4,4]
  return(%d)
})");
  EXPECT_NE(whyNotLowerable(*g2->body()).find("another row"), std::string::npos)
      << whyNotLowerable(*g2->body());
}

TEST(BackendReduction, CpuTargetCompilesReductionFusions) {
  auto g = parseGraph(R"(graph @f(%x: f32[4,16]) -> (f32[4,16]) {
  %y = fusion(%x) {kind = "reduction"} : f32[4,16] {
  ^(%0: f32[4,16]):
    %m = amax(%0) {dims = [-1], keepdim = true} : f32[4,1]
    %s = sub(%0, %m) : f32[4,16]
    %e = exp(%s) : f32[4,16]
    %z = sum(%e) {dims = [-1], keepdim = true} : f32[4,1]
    %1 = div(%e, %z) : f32[4,16]
    yield(%1)
  }
  return(%y)
})");
  auto target = makeCpuTarget();
  const Op &fusion = *g->body()->front();
  ASSERT_EQ(target->whyNotSupported(fusion), "");
  auto exe = target->compile(fusion);
  std::mt19937 rng(4);
  std::vector<RtValue> in = randomInputs(*g, rng);
  Tensor got = exe->run(in).at(0).tensor();
  Tensor ref = interpret(*g, in).at(0).tensor();
  EXPECT_EQ(compare(got, ref, 4), "");
}

} // namespace
} // namespace xjit::backend
