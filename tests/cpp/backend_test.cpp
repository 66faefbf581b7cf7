// CPU backend: kernel IR (printer, verifier, reductions), the inlined f32 math (measured ulp
// bounds), and elementwise lowering + LLVM compilation compared with the reference interpreter:
// every op of the lowering table for every dtype it accepts, hand-written fused chains
// (broadcasting, 0-d, strided / transposed inputs, odd sizes, symbolic dims, views, several
// outputs) and a random fused-graph fuzzer.
//
// Tolerances: integer and bool results are exact. f32 / f64 results agree within
// |got - ref| <= 1e-5 |ref| + 1e-6: the reference computes in f64 and rounds once, compiled f32
// code computes in f32 with inlined exp / log / tanh / erf / sigmoid (<= 1, 1, 2, 6, 3 ulp; see
// BackendMath) and libm (through f64) for the other math functions. f16 / bf16 results agree
// within one unit of their precision (1e-2 relative). The fuzzer chains up to 8 ops, so
// differences of a few ulp can be amplified by cancellation: 1e-4 relative + 1e-5 absolute.
#include "xjit/backend/jit.h"
#include "xjit/backend/kernel_ir.h"
#include "xjit/backend/lower.h"
#include "xjit/ir/builder.h"
#include "xjit/ir/interpreter.h"
#include "xjit/ir/op_registry.h"
#include "xjit/ir/printer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <thread>

namespace xjit::backend {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---- inputs ----

struct Range {
  double lo = -3, hi = 3;
  bool nonZero = false; // integer divisors
  bool specials = true; // NaN, +-inf, -0, subnormal, huge in the first floats
};

Tensor randomTensor(DType d, const std::vector<int64_t> &sizes, std::mt19937 &rng, Range r = {}) {
  Tensor t = Tensor::empty(d, sizes);
  int64_t n = t.numel();
  static const double kSpecials[] = {kNaN, kInf, -kInf, -0.0, 0.0, 1e-40, 1e30, -1e30};
  for (int64_t i = 0; i < n; ++i) {
    if (isFloating(d)) {
      if (r.specials && i < int64_t(std::size(kSpecials)) && n > 16)
        t.setDouble(i, kSpecials[i]);
      else
        t.setDouble(i, std::uniform_real_distribution<double>(r.lo, r.hi)(rng));
    } else if (d == DType::Bool) {
      t.setInt(i, int64_t(rng() & 1));
    } else {
      int64_t lo = d == DType::U8 ? 0 : -20, hi = 20;
      int64_t v = std::uniform_int_distribution<int64_t>(lo, hi)(rng);
      if (r.nonZero && v == 0) v = 3;
      t.setInt(i, v);
    }
  }
  return t;
}

/// The same values in a non-contiguous layout: 0: every dim reversed in memory (transposed),
/// 1: inner stride 2 at an odd offset.
Tensor relayout(const Tensor &t, int kind) {
  std::vector<int64_t> sizes = t.sizes();
  if (sizes.empty()) return t;
  Tensor view;
  if (kind == 0) {
    std::vector<int64_t> rev(sizes.rbegin(), sizes.rend());
    Tensor base = Tensor::empty(t.dtype(), rev);
    std::vector<int64_t> cs = contiguousStrides(rev);
    view = base.view(sizes, std::vector<int64_t>(cs.rbegin(), cs.rend()), 0);
  } else {
    std::vector<int64_t> big = sizes;
    big.back() = big.back() * 2 + 1;
    Tensor base = Tensor::empty(t.dtype(), big);
    std::vector<int64_t> st = contiguousStrides(big);
    st.back() = 2;
    view = base.view(sizes, st, 1);
  }
  view.copyFrom(t);
  return view;
}

// ---- comparison ----

struct Tolerance {
  double rtol = 1e-5, atol = 1e-6;
};

Tolerance toleranceFor(DType d, Tolerance f32) {
  if (d == DType::F16 || d == DType::BF16) return {1e-2, 1e-3};
  return f32;
}

/// "" or the first mismatching element.
std::string compareTensors(const Tensor &got, const Tensor &ref, Tolerance tol) {
  if (got.dtype() != ref.dtype())
    return "dtype " + std::string(dtypeName(got.dtype())) + " vs " +
           std::string(dtypeName(ref.dtype()));
  if (got.sizes() != ref.sizes()) return "sizes differ";
  tol = toleranceFor(ref.dtype(), tol);
  for (int64_t i = 0; i < ref.numel(); ++i) {
    bool ok;
    std::string gs, rs;
    if (isFloating(ref.dtype())) {
      double g = got.getDouble(i), r = ref.getDouble(i);
      if (std::isnan(r) || std::isinf(r))
        ok = std::isnan(r) ? std::isnan(g) : g == r;
      else
        ok = std::fabs(g - r) <= tol.atol + tol.rtol * std::fabs(r);
      gs = formatDouble(g);
      rs = formatDouble(r);
    } else {
      ok = got.getInt(i) == ref.getInt(i);
      gs = std::to_string(got.getInt(i));
      rs = std::to_string(ref.getInt(i));
    }
    if (!ok) return "element " + std::to_string(i) + ": compiled " + gs + ", reference " + rs;
  }
  return "";
}

/// A graph body lowered and compiled once, run on several input sets.
struct CompiledGraph {
  LoweredKernel lk;
  std::shared_ptr<const CompiledKernel> ck;
};

CompiledGraph compileGraph(const Graph &g) {
  LoweredKernel lk = lowerElementwiseBlock(*g.body(), g.name());
  auto ck = Jit::instance().compile(lk.kernel);
  return {std::move(lk), std::move(ck)};
}

/// Runs the compiled graph on `inputs` and compares with the interpreter. Returns "" or a
/// description of the difference.
std::string checkCompiled(const Graph &g, const CompiledGraph &c,
                          const std::vector<RtValue> &inputs, Tolerance tol = {}) {
  std::vector<RtValue> ref;
  std::string refError;
  try {
    ref = interpret(g, inputs);
  } catch (const std::exception &e) {
    refError = e.what();
  }
  std::vector<RtValue> got;
  try {
    got = runLowered(c.lk, *c.ck, inputs);
  } catch (const KernelError &e) {
    if (refError.empty()) return std::string("compiled kernel failed: ") + e.what();
    return ""; // both fail (e.g. integer division by zero)
  }
  if (!refError.empty())
    return "the reference failed (" + refError + ") but the compiled kernel did not";
  for (size_t o = 0; o < ref.size(); ++o) {
    std::string diff = compareTensors(got[o].tensor(), ref[o].tensor(), tol);
    if (!diff.empty()) return "output " + std::to_string(o) + ": " + diff;
  }
  return "";
}

std::string checkGraph(const Graph &g, const std::vector<RtValue> &inputs, Tolerance tol = {}) {
  return checkCompiled(g, compileGraph(g), inputs, tol);
}

std::string describe(const Graph &g, const std::string &diff) {
  return diff + "\n" + printGraph(g, {.printLocations = false});
}

Type tensorType(DType d, std::vector<int64_t> dims) {
  return Type::tensor(d, Shape(dims.begin(), dims.end()));
}

// ---- kernel IR ----

/// out[i] = sum_j x[i, j] (an inner-axis reduction written by hand).
Kernel rowSumKernel() {
  Kernel k;
  k.name = "row_sum";
  Shape xs{DimExpr::symbol("m"), DimExpr::symbol("n")};
  k.buffers = {{"x", DType::F32, xs, false}, {"out", DType::F32, {DimExpr::symbol("m")}, true}};
  int64_t i = k.newVar(), j = k.newVar();
  int64_t a = k.addAcc("acc", DType::F32);
  Expr xij =
      load(0, DType::F32, addIdx(mulIdx(var(i), strideOf(0, 0)), mulIdx(var(j), strideOf(0, 1))));
  k.body = {forLoop(i, sizeOf(0, 0),
                    {initAcc(a, constFloat(DType::F32, 0)),
                     forLoop(j, sizeOf(0, 1), {reduce(a, BinaryOp::Add, xij)}),
                     store(1, mulIdx(var(i), strideOf(1, 0)), acc(a, DType::F32))})};
  return k;
}

TEST(BackendKernelIR, PrintsLoops) {
  std::string text = printKernel(rowSumKernel());
  EXPECT_NE(text.find("kernel row_sum(in x: f32[m,n], out out: f32[m])"), std::string::npos)
      << text;
  EXPECT_NE(text.find("for i0 in 0..size(x,0) {"), std::string::npos) << text;
  EXPECT_NE(text.find("acc = add(acc, x[i0*stride(x,0) + i1*stride(x,1)])"), std::string::npos)
      << text;
  EXPECT_NE(text.find("out[i0*stride(out,0)] = acc"), std::string::npos) << text;
}

TEST(BackendKernelIR, AccumulatorsPrintUnderDistinctNames) {
  // The printed kernel is the compile cache's key: two accumulators asked for under one name
  // (a reduction lowered inside another's loop) must not print alike.
  Kernel k = rowSumKernel();
  int64_t a = k.addAcc("acc", DType::F32), b = k.addAcc("acc", DType::F32);
  EXPECT_NE(k.accs[size_t(a)].name, "acc");
  EXPECT_NE(k.accs[size_t(a)].name, k.accs[size_t(b)].name);
  std::string text = printKernel(k);
  EXPECT_NE(text.find("acc " + k.accs[size_t(a)].name + ": f32"), std::string::npos) << text;
}

TEST(BackendKernelIR, VerifierRejectsBadKernels) {
  EXPECT_TRUE(verifyKernel(rowSumKernel()).empty());
  auto expectError = [](Kernel k, const std::string &needle) {
    auto errors = verifyKernel(k);
    ASSERT_FALSE(errors.empty()) << needle;
    EXPECT_NE(errors.front().find(needle), std::string::npos) << errors.front();
  };
  Kernel k = rowSumKernel();
  k.body.push_back(store(0, constIdx(0), constFloat(DType::F32, 1)));
  expectError(k, "is an input");
  k = rowSumKernel();
  k.body.push_back(store(1, var(0), constFloat(DType::F32, 1)));
  expectError(k, "used outside its loop");
  k = rowSumKernel();
  k.body.push_back(store(1, constIdx(0), constFloat(DType::F64, 1)));
  expectError(k, "expected f32, got f64");
  k = rowSumKernel();
  k.body.insert(k.body.begin(), store(1, constIdx(0), acc(0, DType::F32)));
  expectError(k, "read before it is set");
  k = rowSumKernel();
  k.body.push_back(store(1, constIdx(0), unary(UnaryOp::Exp, constInt(DType::I32, 1))));
  expectError(k, "needs a floating operand");
  k = rowSumKernel();
  Expr bf = constFloat(DType::BF16, 1);
  k.body.push_back(store(1, constIdx(0), cast(DType::F32, binary(BinaryOp::Add, bf, bf))));
  expectError(k, "storage type");
  EXPECT_THROW(Jit::instance().compile(k), Error);
}

TEST(BackendKernelIR, HandWrittenReductionRuns) {
  auto ck = Jit::instance().compile(rowSumKernel());
  std::mt19937 rng(1);
  Tensor x = relayout(randomTensor(DType::F32, {5, 37}, rng, {.specials = false}), 0);
  Tensor out = Tensor::empty(DType::F32, {5});
  std::vector<Tensor> bufs{x, out};
  ck->run(bufs);
  for (int64_t i = 0; i < 5; ++i) {
    double s = 0;
    for (int64_t j = 0; j < 37; ++j)
      s += x.getDouble(i * 37 + j);
    EXPECT_NEAR(out.getDouble(i), s, 1e-4) << i;
  }
  // Sizes are checked against the parameters: symbol m is bound by x and must match out.
  std::vector<Tensor> bad{x, Tensor::empty(DType::F32, {4})};
  EXPECT_THROW(ck->run(bad), KernelError);
  std::vector<Tensor> wrongDType{x.to(DType::F64), out};
  EXPECT_THROW(ck->run(wrongDType), KernelError);
}

TEST(BackendKernelIR, AssertStopsTheKernel) {
  Kernel k;
  k.name = "checked";
  k.buffers = {{"out", DType::I64, {DimExpr(1)}, true}};
  k.scalars = {{"n", DType::I64}};
  k.errors = {"n must be positive"};
  k.body = {assertTrue(compare(CmpOp::Gt, param(0, DType::I64), constIdx(0)), 0),
            store(0, constIdx(0), param(0, DType::I64))};
  auto ck = Jit::instance().compile(k);
  Tensor out = Tensor::empty(DType::I64, {1});
  std::vector<Tensor> bufs{out};
  std::vector<RtValue> ok{RtValue(int64_t{7})}, bad{RtValue(int64_t{-1})};
  ck->run(bufs, ok);
  EXPECT_EQ(out.getInt(0), 7);
  try {
    ck->run(bufs, bad);
    FAIL() << "expected the assert to fail";
  } catch (const KernelError &e) {
    EXPECT_STREQ(e.what(), "n must be positive");
  }
}

// ---- f32 math accuracy ----

double ulpError(float got, double ref) {
  float r = float(ref);
  if (std::isnan(r)) return std::isnan(got) ? 0 : kInf;
  if (got == r) return 0;
  if (std::isinf(r) || std::isinf(got)) return kInf;
  float ar = std::fabs(r);
  double ulp = double(std::nextafter(ar, std::numeric_limits<float>::infinity())) - double(ar);
  if (std::fabs(r) < 1.17549435e-38) ulp = 1.401298464324817e-45;
  return std::fabs(double(got) - ref) / ulp;
}

TEST(BackendMath, InlinedF32FunctionsAreWithinAFewUlp) {
  struct Fn {
    const char *op;
    double (*ref)(double);
    double lo, hi, maxUlp;
  };
  const Fn fns[] = {
      {"exp", [](double x) { return std::exp(x); }, -104, 89, 1.5},
      {"log", [](double x) { return std::log(x); }, 1e-38, 1e6, 1.5},
      {"tanh", [](double x) { return std::tanh(x); }, -10, 10, 2},
      {"erf", [](double x) { return std::erf(x); }, -5, 5, 6},
      {"sigmoid", [](double x) { return 1 / (1 + std::exp(-x)); }, -80, 30, 3},
      {"log1p", [](double x) { return std::log1p(x); }, -0.9999, 30, 3},
      {"expm1", [](double x) { return std::expm1(x); }, -30, 88, 3},
  };
  const int64_t n = 1 << 18;
  for (const Fn &f : fns) {
    Graph g(f.op);
    Value *x = g.addInput(tensorType(DType::F32, {n}), "x");
    Builder b(g.body());
    b.createWithTypes("return", {b.op(f.op, {x})}, {});
    LoweredKernel lk = lowerElementwiseBlock(*g.body(), f.op);
    auto ck = Jit::instance().compile(lk.kernel);
    Tensor in = Tensor::empty(DType::F32, {n});
    for (int64_t i = 0; i < n; ++i) // log-spaced for log, linear otherwise
      in.setDouble(i, std::string(f.op) == "log"
                          ? f.lo * std::pow(f.hi / f.lo, double(i) / double(n - 1))
                          : f.lo + (f.hi - f.lo) * double(i) / double(n - 1));
    std::vector<RtValue> inputs{RtValue(in)};
    Tensor out = runLowered(lk, *ck, inputs)[0].tensor();
    double worst = 0, at = 0;
    for (int64_t i = 0; i < n; ++i) {
      double e = ulpError(float(out.getDouble(i)), f.ref(in.getDouble(i)));
      if (e > worst) worst = e, at = in.getDouble(i);
    }
    EXPECT_LE(worst, f.maxUlp) << f.op << " at " << at;
    RecordProperty(std::string(f.op) + "_max_ulp", std::to_string(worst));
    // Special values: the same NaN / infinity / signed zero behaviour as the reference.
    Tensor sp = Tensor::empty(DType::F32, {6});
    const double specials[] = {kNaN, kInf, -kInf, -0.0, 0.0, 1e-42};
    for (int i = 0; i < 6; ++i)
      sp.setDouble(i, specials[i]);
    Graph g6(f.op);
    Value *x6 = g6.addInput(tensorType(DType::F32, {6}), "x");
    Builder b6(g6.body());
    b6.createWithTypes("return", {b6.op(f.op, {x6})}, {});
    std::vector<RtValue> in6{RtValue(sp)};
    EXPECT_EQ(checkGraph(g6, in6, {0, 0}), "") << f.op;
  }
}

// ---- one op at a time ----

struct OpCase {
  std::string label;
  AttrMap attrs;
};

/// Attribute variants worth compiling separately.
std::vector<OpCase> variantsOf(const std::string &op) {
  std::vector<OpCase> v{{"default", {}}};
  auto add = [&](std::string label, AttrMap a) { v.push_back({std::move(label), std::move(a)}); };
  if (op == "gelu") add("tanh", {{"approximate", Attr("tanh")}});
  if (op == "div") {
    add("trunc", {{"rounding_mode", Attr("trunc")}});
    add("floor", {{"rounding_mode", Attr("floor")}});
  }
  if (op == "add" || op == "sub") add("alpha", {{"alpha", Attr(int64_t{3})}});
  if (op == "round")
    add("decimals", {{"decimals", Attr(int64_t{2})}}), add("neg_decimals", {{"decimals", -1}});
  if (op == "softplus") add("beta", {{"beta", Attr(2.0)}, {"threshold", Attr(3.0)}});
  if (op == "hardtanh") add("bounds", {{"min_val", Attr(-2.0)}, {"max_val", Attr(1000.0)}});
  if (op == "leaky_relu") add("slope", {{"negative_slope", Attr(0.2)}});
  if (op == "elu" || op == "celu") add("alpha", {{"alpha", Attr(0.5)}});
  if (op == "logit") add("eps", {{"eps", Attr(0.25)}});
  if (op == "nan_to_num")
    add("explicit", {{"nan", Attr(1.5)}, {"posinf", Attr(7.0)}, {"neginf", Attr(-7.0)}});
  if (op == "clamp") {
    v[0].attrs = {{"min", Attr(-1.5)}, {"max", Attr(2.0)}};
    add("int_min", {{"min", Attr(int64_t{-1})}});
    add("max_only", {{"max", Attr(int64_t{5})}});
  }
  if (op == "cast") {
    v.clear();
    for (DType d : {DType::Bool, DType::U8, DType::I8, DType::I32, DType::I64, DType::F16,
                    DType::BF16, DType::F32, DType::F64})
      add(std::string(dtypeName(d)), {{"dtype", Attr(d)}});
  }
  if (op == "lerp") v[0].attrs = {{"weight", Attr(0.75)}}, add("weight_operand", {});
  if (op == "masked_fill") {
    v[0].attrs = {{"value", Attr(int64_t{3})}};
    add("float_value", {{"value", Attr(-1.5)}});
    add("value_operand", {});
  }
  if (op == "addcmul" || op == "addcdiv") add("value", {{"value", Attr(int64_t{2})}});
  return v;
}

const DType kAllDTypes[] = {DType::Bool, DType::U8,  DType::I8,   DType::I16, DType::I32,
                            DType::I64,  DType::F16, DType::BF16, DType::F32, DType::F64};

bool isDivision(const std::string &op) {
  return op == "div" || op == "floor_divide" || op == "remainder" || op == "fmod";
}

class BackendEveryOp : public ::testing::TestWithParam<std::string> {};

/// Builds op(x, ...) for dtype d: x [7,127]; second operands broadcast ([127]); a third [7,1].
/// Returns nullptr when the op rejects the dtype (type inference fails).
std::unique_ptr<Graph> oneOpGraph(const std::string &op, const OpCase &c, DType d,
                                  std::vector<RtValue> &inputs, std::mt19937 &rng, int layout) {
  auto g = std::make_unique<Graph>(op);
  const OpDef &def = OpRegistry::instance().get(op);
  Builder b(g->body());
  std::vector<Value *> operands;
  auto input = [&](DType dt, std::vector<int64_t> sizes, Range r = {}) {
    Value *v = g->addInput(tensorType(dt, sizes));
    Tensor t = randomTensor(dt, sizes, rng, r);
    inputs.emplace_back(layout >= 0 ? relayout(t, layout) : t);
    return v;
  };
  size_t arity = def.minOperands();
  if (op == "where") {
    operands = {input(DType::Bool, {7, 127}), input(d, {7, 127}), input(d, {127})};
  } else if (op == "masked_fill") { // a broadcast bool mask; the value an attribute or 0-d
    operands = {input(d, {7, 127}), input(DType::Bool, {127})};
    if (c.label == "value_operand") operands.push_back(input(d, {}));
  } else if (op == "lerp") {
    operands = {input(d, {7, 127}), input(d, {127})};
    if (c.label == "weight_operand") operands.push_back(input(d, {7, 1}));
  } else {
    operands.push_back(input(d, {7, 127}));
    if (arity >= 2) {
      bool divisor = isDivision(op) || op == "pow";
      Range r{.lo = op == "pow" ? -2 : -3, .hi = 3, .nonZero = divisor, .specials = !divisor};
      operands.push_back(input(d, {127}, r));
    }
    if (arity >= 3) operands.push_back(input(d, {7, 1}, {.nonZero = true}));
  }
  try {
    b.createWithTypes("return", {b.op(op, operands, c.attrs)}, {});
  } catch (const TypeInferenceError &) {
    return nullptr;
  }
  return g;
}

TEST_P(BackendEveryOp, MatchesTheInterpreterForEveryDType) {
  const std::string op = GetParam();
  std::mt19937 rng(std::hash<std::string>()(op) & 0xffff);
  int compiled = 0;
  for (const OpCase &c : variantsOf(op)) {
    for (DType d : kAllDTypes) {
      std::vector<RtValue> inputs;
      auto g = oneOpGraph(op, c, d, inputs, rng, -1);
      if (!g) continue;
      SCOPED_TRACE(op + " " + c.label + " " + std::string(dtypeName(d)));
      CompiledGraph cg = compileGraph(*g);
      EXPECT_EQ(checkCompiled(*g, cg, inputs), "") << printGraph(*g);
      ++compiled;
      // The same kernel on transposed and strided inputs (the general strided loops).
      for (int layout : {0, 1}) {
        std::vector<RtValue> strided;
        std::mt19937 again(7);
        oneOpGraph(op, c, d, strided, again, layout);
        EXPECT_EQ(checkCompiled(*g, cg, strided), "") << "layout " << layout;
      }
    }
  }
  EXPECT_GT(compiled, 0) << op << ": no dtype lowered";
}

INSTANTIATE_TEST_SUITE_P(Table, BackendEveryOp, ::testing::ValuesIn(elementwiseOpNames()),
                         [](const auto &info) { return info.param; });

TEST(BackendOpTable, CoversTheElementwiseRegistry) {
  // Every registry op with the Elementwise trait has a lowering rule.
  auto names = elementwiseOpNames();
  for (const OpDef *def : OpRegistry::instance().all())
    if (def->has(kElementwise))
      EXPECT_TRUE(std::find(names.begin(), names.end(), def->name) != names.end()) << def->name;
  RecordProperty("ops", std::to_string(names.size()));
}

// ---- scalar operands, errors ----

TEST(BackendLowering, PythonScalarOperands) {
  std::mt19937 rng(3);
  for (DType d : {DType::F32, DType::I32, DType::BF16}) {
    Graph g("scalars");
    Value *x = g.addInput(tensorType(d, {5, 9}), "x");
    Value *s = g.addInput(Type::floatTy(), "s");
    Value *n = g.addInput(Type::intTy(), "n");
    Builder b(g.body());
    Value *t = b.op("mul", {x, s});                                  // float scalar: f32 result
    Value *u = b.op("add", {b.op("mul", {x, n}), b.constantInt(3)}); // int scalar keeps d
    Value *v = b.op("sub", {t, b.constantFloat(0.1)});
    b.createWithTypes("return", {v, u, b.op("gt", {x, b.constantBool(true)})}, {});
    std::vector<RtValue> in{RtValue(randomTensor(d, {5, 9}, rng)), RtValue(1.25),
                            RtValue(int64_t{-4})};
    EXPECT_EQ(checkGraph(g, in), "") << dtypeName(d);
  }
}

TEST(BackendLowering, IntegerDivisionByZeroFails) {
  Graph g("divzero");
  Value *x = g.addInput(tensorType(DType::I32, {4}), "x");
  Value *y = g.addInput(tensorType(DType::I32, {4}), "y");
  Builder b(g.body());
  b.createWithTypes("return", {b.op("floor_divide", {x, y})}, {});
  LoweredKernel lk = lowerElementwiseBlock(*g.body(), "divzero");
  auto ck = Jit::instance().compile(lk.kernel);
  Tensor tx = Tensor::empty(DType::I32, {4}), ty = Tensor::empty(DType::I32, {4});
  for (int i = 0; i < 4; ++i)
    tx.setInt(i, 10 + i), ty.setInt(i, i == 2 ? 0 : -1);
  std::vector<RtValue> in{RtValue(tx), RtValue(ty)};
  EXPECT_THROW(runLowered(lk, *ck, in), KernelError);
  EXPECT_THROW(interpret(g, in), Error);
  ty.setInt(2, -1); // INT_MIN // -1 wraps instead of trapping
  tx.setInt(0, std::numeric_limits<int32_t>::min());
  EXPECT_EQ(checkGraph(g, in), "");
}

TEST(BackendLowering, IntegerPowerOfNegativeScalarFails) {
  Graph g("ipow");
  Value *x = g.addInput(tensorType(DType::I64, {3}), "x");
  Value *e = g.addInput(Type::intTy(), "e");
  Builder b(g.body());
  b.createWithTypes("return", {b.op("pow", {x, e})}, {});
  std::mt19937 rng(5);
  std::vector<RtValue> ok{RtValue(randomTensor(DType::I64, {3}, rng)), RtValue(int64_t{3})};
  EXPECT_EQ(checkGraph(g, ok), "");
  std::vector<RtValue> bad{ok[0], RtValue(int64_t{-2})};
  LoweredKernel lk = lowerElementwiseBlock(*g.body(), "ipow");
  auto ck = Jit::instance().compile(lk.kernel);
  try {
    runLowered(lk, *ck, bad);
    FAIL() << "expected an error";
  } catch (const KernelError &err) {
    EXPECT_NE(std::string(err.what()).find("negative integer powers"), std::string::npos);
  }
}

TEST(BackendLowering, RejectsWhatItCannotLower) {
  Graph g("matmul");
  Value *x = g.addInput(tensorType(DType::F32, {2, 2}), "x");
  Builder b(g.body());
  b.createWithTypes("return", {b.op("matmul", {x, x})}, {});
  EXPECT_NE(whyNotLowerable(*g.body()).find("no elementwise lowering rule"), std::string::npos);
  EXPECT_THROW(lowerElementwiseBlock(*g.body(), "m"), Error);
}

// ---- fused chains ----

struct Chain {
  const char *name;
  std::vector<Type> inputs;
  std::function<std::vector<Value *>(Builder &, const std::vector<Value *> &)> body;
};

Graph buildChain(const Chain &c) {
  Graph g(c.name);
  std::vector<Value *> in;
  for (const Type &t : c.inputs)
    in.push_back(g.addInput(t));
  Builder b(g.body());
  b.createWithTypes("return", c.body(b, in), {});
  return g;
}

/// Random inputs for the chain's types (symbols bound to `symbolSize`).
std::vector<RtValue> chainInputs(const Chain &c, std::mt19937 &rng, int64_t symbolSize,
                                 int layout = -1) {
  std::vector<RtValue> in;
  for (const Type &t : c.inputs) {
    if (!t.isTensor()) {
      in.emplace_back(t.kind() == TypeKind::Float ? RtValue(0.375) : RtValue(int64_t{3}));
      continue;
    }
    std::vector<int64_t> sizes;
    for (const DimExpr &d : t.shape())
      sizes.push_back(d.isStatic() ? d.value() : symbolSize);
    Tensor x = randomTensor(t.dtype(), sizes, rng, {.nonZero = true});
    in.emplace_back(layout >= 0 && (&t - c.inputs.data()) % 2 == 0 ? relayout(x, layout) : x);
  }
  return in;
}

std::vector<Chain> chains() {
  using V = const std::vector<Value *> &;
  using B = Builder &;
  auto t = tensorType;
  Shape sym{DimExpr::symbol("s0"), DimExpr(127)};
  std::vector<Chain> out;
  for (DType d : {DType::F32, DType::F64}) {
    out.push_back({"bias_gelu", {t(d, {7, 127}), t(d, {127}), t(d, {})}, [](B b, V v) {
                     Value *y = b.op("add", {b.op("mul", {v[0], v[1]}), v[2]});
                     return std::vector<Value *>{b.op("gelu", {y})};
                   }});
  }
  out.push_back({"where_exp_sym",
                 {Type::tensor(DType::F32, sym), t(DType::F32, {1, 127}), Type::floatTy()},
                 [](B b, V v) {
                   Value *e = b.op("sub", {b.op("exp", {v[0]}), b.constantFloat(1.0)});
                   Value *w = b.op("where", {b.op("gt", {v[0], v[1]}), e,
                                             b.op("mul", {v[0], b.constantFloat(0.5)})});
                   return std::vector<Value *>{b.op("add", {w, v[2]})};
                 }});
  for (DType d : {DType::I32, DType::I64, DType::U8}) {
    out.push_back({"int_chain", {t(d, {7, 1}), t(d, {1, 127}), t(d, {127})}, [](B b, V v) {
                     Value *y = b.op("add", {b.op("mul", {v[0], b.constantInt(3)}), v[1]});
                     Value *q = b.op("floor_divide", {y, v[2]});
                     Value *r = b.op("remainder", {q, b.constantInt(7)});
                     return std::vector<Value *>{r, b.op("bitwise_xor", {r, v[0]})};
                   }});
  }
  out.push_back({"bool_mask",
                 {t(DType::F32, {7, 127}), t(DType::Bool, {127}), t(DType::Bool, {7, 1})},
                 [](B b, V v) {
                   Value *m = b.op("logical_and", {b.op("gt", {v[0], b.constantFloat(0.0)}),
                                                   b.op("bitwise_xor", {v[1], v[2]})});
                   Value *f = b.op("cast", {m}, {{"dtype", Attr(DType::F32)}});
                   return std::vector<Value *>{b.op("mul", {f, v[0]}), m};
                 }});
  out.push_back({"transposed_views",
                 {t(DType::F32, {127, 7}), t(DType::F32, {7}), t(DType::F32, {3, 7, 5})},
                 [](B b, V v) {
                   Value *xt = b.op("t", {v[0]});                                        // [7,127]
                   Value *bias = b.op("unsqueeze", {v[1]}, {{"dim", Attr(int64_t{1})}}); // [7,1]
                   Value *y = b.op("relu", {b.op("add", {xt, bias})});
                   Value *p = b.op("permute", {v[2]}, {{"dims", Attr::Ints{2, 0, 1}}}); // [5,3,7]
                   Value *s = b.op("slice", {p},
                                   {{"dim", Attr(int64_t{1})},
                                    {"start", Attr(int64_t{1})},
                                    {"step", Attr(int64_t{2})}});             // [5,1,7]
                   Value *q = b.op("squeeze", {s}, {{"dim", Attr::Ints{1}}}); // [5,7]
                   Value *e =
                       b.op("expand", {b.op("sigmoid", {v[1]})}, {{"shape", Attr::Ints{5, 7}}});
                   return std::vector<Value *>{y, b.op("mul", {q, e})};
                 }});
  out.push_back(
      {"multi_shape_outputs", {t(DType::F32, {7, 127}), t(DType::F32, {127})}, [](B b, V v) {
         Value *a1 = b.op("tanh", {b.op("add", {v[1], b.constantFloat(1.0)})});
         Value *y = b.op("mul", {v[0], a1});
         return std::vector<Value *>{y, a1, v[1], y};
       }});
  out.push_back(
      {"zero_dim", {t(DType::F32, {}), t(DType::F64, {}), t(DType::I64, {})}, [](B b, V v) {
         Value *y = b.op("add", {b.op("mul", {v[0], v[1]}), v[2]});
         return std::vector<Value *>{b.op("sqrt", {b.op("abs", {y})}), b.op("neg", {v[2]})};
       }});
  out.push_back({"empty", {t(DType::F32, {0, 5}), t(DType::F32, {5})}, [](B b, V v) {
                   return std::vector<Value *>{b.op("add", {v[0], v[1]})};
                 }});
  for (DType d : {DType::BF16, DType::F16}) {
    out.push_back({"half_chain", {t(d, {7, 127}), t(d, {127}), t(DType::F32, {})}, [](B b, V v) {
                     Value *y = b.op("sigmoid", {b.op("mul", {v[0], v[1]})});
                     Value *z = b.op("div", {y, b.constantFloat(3.0)});
                     return std::vector<Value *>{z, b.op("add", {z, v[2]})};
                   }});
  }
  out.push_back({"mixed_promotion",
                 {t(DType::I32, {7, 127}), t(DType::F32, {127}), t(DType::I64, {7, 1})},
                 [](B b, V v) {
                   Value *y = b.op("add", {v[0], v[2]}); // i64
                   Value *z = b.op("mul", {y, v[1]});    // f32
                   return std::vector<Value *>{b.op("clamp", {z}, {{"min", Attr(-5.0)}}),
                                               b.op("maximum", {y, b.constantInt(2)})};
                 }});
  return out;
}

TEST(BackendFusedChains, MatchTheInterpreter) {
  std::mt19937 rng(11);
  int checked = 0;
  for (const Chain &c : chains()) {
    Graph g = buildChain(c);
    CompiledGraph cg = compileGraph(g);
    for (int64_t symbolSize : {1, 7, 33}) {
      for (int layout : {-1, 0, 1}) {
        SCOPED_TRACE(std::string(c.name) + " s0=" + std::to_string(symbolSize) + " layout " +
                     std::to_string(layout));
        std::vector<RtValue> in = chainInputs(c, rng, symbolSize, layout);
        EXPECT_EQ(checkCompiled(g, cg, in), "") << printGraph(g);
        ++checked;
      }
    }
  }
  RecordProperty("cases", std::to_string(checked));
}

TEST(BackendFusedChains, ContiguousKernelsAreVectorized) {
  Chain c = chains()[0]; // bias_gelu f32
  Graph g = buildChain(c);
  LoweredKernel lk = lowerElementwiseBlock(*g.body(), "bias_gelu");
  auto ck = Jit::instance().compile(lk.kernel, {.keepText = true});
  // A flat-or-unit-stride version guarded by stride checks, then the general nest.
  EXPECT_NE(ck->loopIR().find("eq(stride(in0,1), 1)"), std::string::npos) << ck->loopIR();
  EXPECT_NE(ck->llvmIR().find(" x float>"), std::string::npos) << "no vector code";
  EXPECT_EQ(ck->llvmIR().find("@erf"), std::string::npos) << "erf should be inlined";
  EXPECT_FALSE(ck->assembly().empty());
  auto dir = std::filesystem::temp_directory_path() / "xjit_backend_dump_test";
  dumpKernel(*ck, dir.string());
  for (const char *ext : {".loops", ".ll", ".s"})
    EXPECT_TRUE(std::filesystem::exists(dir / (lk.kernel.name + ext))) << ext;
  std::filesystem::remove_all(dir);
}

TEST(BackendJit, CompilesFromSeveralThreads) {
  std::vector<Chain> cs = chains();
  std::vector<std::string> errors(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < errors.size(); ++t)
    threads.emplace_back([&, t] {
      try {
        std::mt19937 rng{static_cast<unsigned>(t)};
        for (size_t i = t; i < cs.size(); i += errors.size()) {
          Graph g = buildChain(cs[i]);
          std::string diff = checkGraph(g, chainInputs(cs[i], rng, 5));
          if (!diff.empty()) errors[t] += cs[i].name + (": " + diff) + "\n";
        }
      } catch (const std::exception &e) {
        errors[t] = e.what();
      }
    });
  for (auto &th : threads)
    th.join();
  for (const std::string &e : errors)
    EXPECT_EQ(e, "");
}

// ---- random fused graphs ----

/// A random chain of 3-8 elementwise ops over 1-4 broadcastable inputs of mixed dtypes.
struct RandomFused {
  std::unique_ptr<Graph> graph;
  std::vector<RtValue> inputs;
};

RandomFused randomFusedGraph(uint64_t seed) {
  std::mt19937 rng{static_cast<unsigned>(seed)};
  auto pick = [&](size_t n) { return size_t(rng() % n); };
  static const char *kUnary[] = {
      "exp",         "log",  "tanh",      "sigmoid", "erf",   "sqrt",   "abs",        "neg",
      "relu",        "gelu", "silu",      "sin",     "floor", "square", "reciprocal", "isnan",
      "logical_not", "sign", "hardswish", "log1p",   "expm1", "rsqrt",  "frac",       "trunc"};
  static const char *kBinary[] = {
      "add",        "sub",         "mul",          "div",  "maximum",   "minimum",
      "pow",        "lt",          "ge",           "eq",   "remainder", "atan2",
      "logical_or", "bitwise_and", "floor_divide", "fmax", "copysign",  "hypot"};
  static const DType kDTypes[] = {DType::F32, DType::F32, DType::F32,  DType::F64,
                                  DType::I32, DType::I64, DType::Bool, DType::BF16};
  RandomFused r;
  r.graph = std::make_unique<Graph>("fuzz" + std::to_string(seed));
  int64_t rank = int64_t(pick(4));
  std::vector<int64_t> out;
  static const int64_t kSizes[] = {1, 2, 3, 7, 17};
  for (int64_t d = 0; d < rank; ++d)
    out.push_back(kSizes[pick(5)]);
  std::vector<Value *> pool;
  size_t nInputs = 1 + pick(4);
  int layout = int(pick(3)) - 1;
  for (size_t i = 0; i < nInputs; ++i) {
    // A suffix of the output shape, some dims broadcast.
    size_t keep = i == 0 ? out.size() : pick(out.size() + 1);
    std::vector<int64_t> s(out.end() - long(keep), out.end());
    for (auto &d : s)
      if (i > 0 && pick(3) == 0) d = 1;
    DType d = kDTypes[pick(std::size(kDTypes))];
    pool.push_back(r.graph->addInput(tensorType(d, s)));
    Tensor t = randomTensor(d, s, rng, {.lo = -2, .hi = 2, .specials = false});
    r.inputs.emplace_back(layout >= 0 ? relayout(t, layout) : t);
  }
  Builder b(r.graph->body());
  int ops = 3 + int(pick(6));
  for (int tries = 0; tries < 60 && ops > 0; ++tries) {
    bool unary = pick(2) == 0;
    Value *x = pool[pick(pool.size())];
    std::vector<Value *> operands{x};
    std::string name = unary ? kUnary[pick(std::size(kUnary))] : kBinary[pick(std::size(kBinary))];
    if (!unary)
      operands.push_back(pick(5) == 0 ? b.constantFloat(0.5 + double(pick(4)))
                                      : pool[pick(pool.size())]);
    try {
      Op *op = b.create(name, operands);
      pool.push_back(op->result());
      --ops;
    } catch (const TypeInferenceError &) {
    }
  }
  std::vector<Value *> outputs{pool.back()};
  if (pool.size() > nInputs + 1 && pick(2) == 0)
    outputs.push_back(pool[nInputs + pick(pool.size() - nInputs - 1)]);
  // Outputs must be tensors; a scalar constant cannot be one.
  std::erase_if(outputs, [](Value *v) { return !v->type().isTensor(); });
  if (outputs.empty()) outputs.push_back(pool.front());
  b.createWithTypes("return", outputs, {});
  return r;
}

TEST(BackendFuzz, RandomFusedGraphsMatchTheInterpreter) {
  const int kGraphs = 300;
  int failures = 0;
  int64_t ops = 0;
  for (int seed = 1; seed <= kGraphs; ++seed) {
    RandomFused r = randomFusedGraph(uint64_t(seed));
    ops += int64_t(r.graph->numOps());
    std::string diff;
    try {
      diff = checkGraph(*r.graph, r.inputs, {1e-4, 1e-5});
    } catch (const std::exception &e) {
      diff = std::string("exception: ") + e.what();
    }
    if (!diff.empty() && ++failures <= 5)
      ADD_FAILURE() << "seed " << seed << ": " << describe(*r.graph, diff);
  }
  EXPECT_EQ(failures, 0);
  RecordProperty("graphs", std::to_string(kGraphs));
  RecordProperty("ops", std::to_string(ops));
}

} // namespace
} // namespace xjit::backend
