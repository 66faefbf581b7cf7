// Helpers shared by the op tests (elementwise, reduction, nn, movement): tensor and type
// constructors, one-op graphs run through type inference or the interpreter, and value checks.
// Header-only so that tests/cpp/CMakeLists.txt can keep globbing *_test.cpp.
#pragma once

#include "xjit/ir/builder.h"
#include "xjit/ir/interpreter.h"
#include "xjit/ir/ir.h"
#include "xjit/ir/verifier.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace xjit::optest {

using Sizes = std::vector<int64_t>;
using Values = std::vector<double>;
inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
inline constexpr double kInf = std::numeric_limits<double>::infinity();
/// Shape symbols for inference on dynamic shapes.
inline const DimExpr s0 = DimExpr::symbol("s0"), s1 = DimExpr::symbol("s1");

// ---- tensors and types ----

/// A tensor of `sizes` holding `v` in row-major order (each value converted like a cast to dt).
inline Tensor make(DType dt, Sizes sizes, const Values &v) {
  Tensor t = Tensor::empty(dt, std::move(sizes));
  EXPECT_EQ(t.numel(), static_cast<int64_t>(v.size()));
  for (int64_t i = 0; i < t.numel(); ++i)
    t.setDouble(i, v[static_cast<size_t>(i)]);
  return t;
}
/// 1-d tensors.
inline Tensor vec(DType dt, const Values &v) {
  return make(dt, {static_cast<int64_t>(v.size())}, v);
}
inline Tensor f32(const Values &v) { return vec(DType::F32, v); }
inline Tensor i64(const Values &v) { return vec(DType::I64, v); }
/// A 0-d tensor.
inline Tensor scalarTensor(DType dt, double v) { return make(dt, {}, {v}); }

/// The elements of t in row-major order.
inline Values values(const Tensor &t) {
  Values v;
  for (int64_t i = 0; i < t.numel(); ++i)
    v.push_back(t.getDouble(i));
  return v;
}

/// A tensor type (dims may be symbolic).
inline Type ty(DType dt, Shape s = {}) { return Type::tensor(dt, std::move(s)); }

/// The IR type of a run-time value; a tensor gets its concrete sizes.
inline Type typeOf(const RtValue &v) {
  if (v.isNone()) return Type::none();
  if (v.isInt()) return Type::intTy();
  if (v.isFloat()) return Type::floatTy();
  if (v.isBool()) return Type::boolTy();
  const Tensor &t = v.tensor();
  return Type::tensor(t.dtype(), Shape(t.sizes().begin(), t.sizes().end()));
}

// ---- one-op graphs ----

/// Adds op `name` to g over one operand per type: a graph input, or `constant() : none` for a
/// None type (the way a frontend passes an omitted optional argument). Types are inferred.
inline Op *addOneOp(Graph &g, std::string_view name, const std::vector<Type> &types,
                    AttrMap attrs) {
  Builder b(g.body());
  std::vector<Value *> operands;
  for (const Type &t : types)
    operands.push_back(t.kind() == TypeKind::None
                           ? b.createWithTypes("constant", {}, {Type::none()})->result()
                           : g.addInput(t));
  return b.create(name, operands, std::move(attrs));
}

/// Result types inferred for op `name` over operands of the given types.
inline std::vector<Type> infer(std::string_view name, const std::vector<Type> &types,
                               AttrMap attrs = {}) {
  Graph g;
  Op *op = addOneOp(g, name, types, std::move(attrs));
  std::vector<Type> out;
  for (const auto &r : op->results())
    out.push_back(r->type());
  return out;
}

/// Runs op `name` on tensors and Python scalars (None: an omitted operand) in a verified
/// one-op graph through the interpreter, returning all of its results.
inline std::vector<RtValue> run(std::string_view name, const std::vector<RtValue> &args,
                                AttrMap attrs = {}) {
  Graph g;
  std::vector<Type> types;
  std::vector<RtValue> inputs;
  for (const RtValue &a : args) {
    types.push_back(typeOf(a));
    if (!a.isNone()) inputs.push_back(a);
  }
  Op *op = addOneOp(g, name, types, std::move(attrs));
  std::vector<Value *> outs;
  for (const auto &r : op->results())
    outs.push_back(r.get());
  Builder(g.body()).createWithTypes("return", outs, {});
  auto problems = verifyGraph(g);
  EXPECT_TRUE(problems.empty()) << name << ": " << (problems.empty() ? "" : problems[0]);
  return interpret(g, inputs);
}
/// run() for ops whose results are all tensors.
inline std::vector<Tensor> runTensors(std::string_view name, const std::vector<RtValue> &args,
                                      AttrMap attrs = {}) {
  std::vector<Tensor> out;
  for (const RtValue &v : run(name, args, std::move(attrs)))
    out.push_back(v.tensor());
  return out;
}
/// The first result of run(), a tensor.
inline Tensor run1(std::string_view name, const std::vector<RtValue> &args, AttrMap attrs = {}) {
  auto res = run(name, args, std::move(attrs));
  EXPECT_TRUE(res.at(0).isTensor());
  return res.at(0).tensor();
}

// ---- expectations ----

/// Expects `f` to throw an exception of type E whose message contains `part`.
template <class E = std::exception, class F> void expectError(F &&f, const std::string &part) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing: " << part;
  } catch (const E &e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

/// Expects type inference of op `name` to fail with a message containing `needle`.
inline void expectInferError(std::string_view name, const std::vector<Type> &types, AttrMap attrs,
                             const std::string &needle) {
  try {
    infer(name, types, std::move(attrs));
    ADD_FAILURE() << name << ": expected a type inference error containing '" << needle << "'";
  } catch (const TypeInferenceError &e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

/// Expects `got` to have `sizes` and each element within rtol * (1 + |want|) of `want`; a NaN or
/// infinite `want` must be matched exactly. The default tolerance suits results compared with a
/// naive reference that accumulates in another order.
inline void expectNear(const Tensor &got, const Sizes &sizes, const Values &want,
                       double rtol = 1e-5) {
  ASSERT_EQ(got.sizes(), sizes);
  ASSERT_EQ(got.numel(), static_cast<int64_t>(want.size()));
  for (int64_t i = 0; i < got.numel(); ++i) {
    double g = got.getDouble(i), w = want[static_cast<size_t>(i)];
    if (std::isnan(w))
      EXPECT_TRUE(std::isnan(g)) << "at " << i << ": " << g;
    else if (std::isinf(w))
      EXPECT_EQ(g, w) << "at " << i;
    else
      EXPECT_NEAR(g, w, rtol * (1 + std::abs(w))) << "at " << i;
  }
}
/// expectNear plus the dtype, with a tolerance for values worked out in closed form.
inline void expectValues(const Tensor &got, DType dt, const Sizes &sizes, const Values &want,
                         double rtol = 1e-6) {
  EXPECT_EQ(got.dtype(), dt);
  expectNear(got, sizes, want, rtol);
}
/// expectValues for a 1-d result.
inline void expectVec(const Tensor &got, DType dt, const Values &want, double rtol = 1e-6) {
  expectValues(got, dt, {static_cast<int64_t>(want.size())}, want, rtol);
}

} // namespace xjit::optest
