// Random valid graphs over the op registry, and the round-trip / interpreter checks on them.
#include "random_graph.h"

#include "xjit/ir/diagnostics.h"
#include "xjit/ir/interpreter.h"
#include "xjit/ir/op_registry.h"
#include "xjit/ir/parser.h"
#include "xjit/ir/printer.h"
#include "xjit/ir/verifier.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace xjit::testing {
namespace {

// Known values of string attributes (by attribute name); others keep their default.
const std::map<std::string, std::vector<std::string>> kStringChoices = {
    {"rounding_mode", {"", "trunc", "floor"}},
    {"approximate", {"none", "tanh"}},
    {"mode", {"constant", "reflect", "replicate", "circular"}},
    {"reduce", {"sum", "prod", "mean", "amax", "amin"}},
    {"padding_mode", {"same", "valid"}},
};

const DType kDTypes[] = {DType::F32, DType::F32, DType::F64, DType::F16, DType::BF16,
                         DType::I64, DType::I32, DType::U8,  DType::Bool};

class Generator {
public:
  Generator(uint64_t seed, const RandomGraphOptions &opts) : rng_(seed), opts_(opts) {
    for (const OpDef *d : OpRegistry::instance().all())
      if (!d->has(kTerminator) && d->name != "if" && d->name != "loop" && d->name != "custom_vjp")
        ops_.push_back(d);
  }

  RandomCase run() {
    auto g = std::make_unique<Graph>("fuzz");
    int nInputs = uniform(1, opts_.maxInputs);
    for (int i = 0; i < nInputs; ++i) g->addInput(randomInputType(), "in" + std::to_string(i));
    std::vector<Value *> scope;
    for (size_t i = 0; i < g->numInputs(); ++i) scope.push_back(g->input(i));
    fillBlock(g->body(), scope, 0);
    std::vector<Value *> outs;
    int nOut = uniform(1, 3);
    for (int i = 0; i < nOut; ++i) outs.push_back(pick(scope));
    g->body()->push_back(std::make_unique<Op>(&OpRegistry::instance().get("return"), outs,
                                              std::vector<Type>{}));
    RandomCase c;
    for (size_t i = 0; i < g->numInputs(); ++i) c.inputs.push_back(randomValue(g->input(i)->type()));
    c.graph = std::move(g);
    return c;
  }

private:
  int uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  bool chance(double p) { return std::bernoulli_distribution(p)(rng_); }
  template <class T> const T &pick(const std::vector<T> &v) {
    return v[static_cast<size_t>(uniform(0, static_cast<int>(v.size()) - 1))];
  }

  DimExpr randomDim() {
    if (chance(opts_.symbolicDimRate)) return DimExpr::symbol(chance(0.5) ? "s0" : "s1");
    static const int kSizes[] = {1, 1, 2, 3, 4, 5, 7, 0};
    return DimExpr(kSizes[uniform(0, chance(0.03) ? 7 : 6)]);
  }

  Type randomInputType() {
    int r = uniform(0, 9);
    if (r == 0) return Type::intTy();
    if (r == 1) return Type::floatTy();
    if (r == 2) return Type::boolTy();
    Shape shape;
    for (int i = 0, rank = uniform(0, 4); i < rank; ++i) shape.push_back(randomDim());
    return Type::tensor(kDTypes[uniform(0, 8)], shape);
  }

  RtValue randomValue(const Type &t) {
    switch (t.kind()) {
    case TypeKind::Int: return RtValue(int64_t{uniform(-3, 5)});
    case TypeKind::Float: return RtValue(std::uniform_real_distribution<double>(-3, 3)(rng_));
    case TypeKind::Bool: return RtValue(chance(0.5));
    case TypeKind::Tensor: {
      std::vector<int64_t> sizes;
      for (const auto &d : t.shape()) sizes.push_back(*d.evaluate(bindings_));
      Tensor x = Tensor::empty(t.dtype(), sizes);
      std::normal_distribution<double> normal(0, 2);
      for (int64_t i = 0; i < x.numel(); ++i) {
        if (isFloating(t.dtype())) x.setDouble(i, normal(rng_));
        else if (t.dtype() == DType::Bool) x.setInt(i, chance(0.5));
        else x.setInt(i, uniform(0, 4)); // small non-negative: valid as indices often
      }
      return RtValue(x);
    }
    default: return RtValue();
    }
  }

  Attr randomAttr(const AttrSpec &spec, const std::vector<Value *> &operands) {
    int64_t rank = 0;
    if (!operands.empty() && operands[0]->type().isTensor()) rank = operands[0]->type().rank();
    auto dimValue = [&] { return int64_t{rank ? uniform(static_cast<int>(-rank), static_cast<int>(rank) - 1) : 0}; };
    switch (spec.kind) {
    case AttrKind::Int:
      if (spec.name.find("dim") != std::string::npos) return dimValue();
      return int64_t{uniform(-1, 3)};
    case AttrKind::Float: {
      static const double kFloats[] = {0.5, 1.0, -2.0, 1e-5, 0.0, 3.0};
      return kFloats[uniform(0, 5)];
    }
    case AttrKind::Bool: return chance(0.5);
    case AttrKind::Str: {
      auto it = kStringChoices.find(spec.name);
      if (it != kStringChoices.end()) return pick(it->second);
      return spec.defaultValue ? *spec.defaultValue : Attr(std::string());
    }
    case AttrKind::Ints: {
      std::vector<int64_t> v;
      if (spec.name == "dims" || spec.name == "perm") { // a permutation or a subset of dims
        for (int64_t i = 0; i < rank; ++i) v.push_back(i);
        std::shuffle(v.begin(), v.end(), rng_);
        if (spec.name == "dims" && !v.empty()) v.resize(static_cast<size_t>(uniform(0, static_cast<int>(v.size()))));
        return v;
      }
      for (int i = 0, n = uniform(0, 3); i < n; ++i) v.push_back(uniform(-1, 3));
      return v;
    }
    case AttrKind::Floats: return std::vector<double>{1.0, 0.5};
    case AttrKind::DType: return kDTypes[uniform(0, 8)];
    default: return spec.defaultValue ? *spec.defaultValue : Attr();
    }
  }

  // Tries to append a random op; returns false if the choice was invalid (discarded).
  bool tryRandomOp(Block *b, std::vector<Value *> &scope) {
    const OpDef *def = pick(ops_);
    size_t minN = def->minOperands(), maxN = std::min<size_t>(def->maxOperands(), minN + 3);
    size_t n = static_cast<size_t>(uniform(static_cast<int>(minN), static_cast<int>(maxN)));
    std::vector<Value *> operands;
    for (size_t i = 0; i < n; ++i) operands.push_back(pick(scope));
    AttrMap attrs;
    for (const AttrSpec &spec : def->attrs) {
      bool required = !spec.defaultValue && !spec.optional;
      if (spec.anyKind) { // e.g. constant's value, fill values: a random scalar
        if (required || chance(0.8))
          attrs[spec.name] = chance(0.5) ? Attr(int64_t{uniform(-2, 4)}) : Attr(1.5);
        continue;
      }
      if (required || chance(0.4)) attrs[spec.name] = randomAttr(spec, operands);
    }
    auto op = std::make_unique<Op>(def, operands, std::vector<Type>{}, attrs,
                                   SourceLoc{"fuzz.py", ++line_, "f"});
    std::vector<Type> types;
    try {
      types = def->infer ? def->infer(*op) : std::vector<Type>{};
    } catch (const std::exception &) {
      return false; // invalid combination: discard
    }
    if (types.empty()) return false;
    for (const Type &t : types) {
      if (!t.isTensor()) continue;
      // Keep tensors small, so the interpreter stays fast.
      auto numel = numelOf(t.shape()).evaluate(bindings_);
      if (!numel || *numel > 4096 || t.rank() > 6) return false;
    }
    for (auto &t : types) op->addResult(std::move(t));
    Op *added = b->push_back(std::move(op));
    for (const auto &r : added->results()) scope.push_back(r.get());
    return true;
  }

  // A value of exactly type t from scope (the fallback is always present).
  Value *sameType(const std::vector<Value *> &scope, const Type &t, Value *fallback) {
    std::vector<Value *> cands;
    for (Value *v : scope)
      if (v->type() == t) cands.push_back(v);
    return cands.empty() ? fallback : pick(cands);
  }

  void addIf(Block *b, std::vector<Value *> &scope, int depth) {
    std::vector<Value *> conds;
    for (Value *v : scope)
      if (v->type().kind() == TypeKind::Bool) conds.push_back(v);
    if (conds.empty()) return;
    Value *outer = pick(scope);
    auto op = std::make_unique<Op>(&OpRegistry::instance().get("if"),
                                   std::vector<Value *>{pick(conds)},
                                   std::vector<Type>{outer->type()});
    for (size_t r = 0; r < 2; ++r) {
      std::vector<Value *> inner = scope;
      fillBlock(op->region(r), inner, depth + 1);
      op->region(r)->push_back(std::make_unique<Op>(
          &OpRegistry::instance().get("yield"),
          std::vector<Value *>{sameType(inner, outer->type(), outer)}, std::vector<Type>{}));
    }
    scope.push_back(b->push_back(std::move(op))->result(0));
  }

  void addLoop(Block *b, std::vector<Value *> &scope, int depth) {
    Value *init = pick(scope);
    auto &reg = OpRegistry::instance();
    auto trips = std::make_unique<Op>(&reg.get("constant"), std::vector<Value *>{},
                                      std::vector<Type>{Type::intTy()},
                                      AttrMap{{"value", Attr(int64_t{uniform(0, 3)})}});
    auto cond = std::make_unique<Op>(&reg.get("constant"), std::vector<Value *>{},
                                     std::vector<Type>{Type::boolTy()}, AttrMap{{"value", Attr(true)}});
    Value *tv = b->push_back(std::move(trips))->result();
    Value *cv = b->push_back(std::move(cond))->result();
    auto op = std::make_unique<Op>(&reg.get("loop"), std::vector<Value *>{tv, cv, init},
                                   std::vector<Type>{init->type()});
    Block *body = op->region(0);
    std::vector<Value *> inner = scope;
    inner.push_back(body->addArgument(Type::intTy(), ""));
    Value *carried = body->addArgument(init->type(), "");
    inner.push_back(carried);
    fillBlock(body, inner, depth + 1);
    std::vector<Value *> conds;
    for (Value *v : inner)
      if (v->type().kind() == TypeKind::Bool) conds.push_back(v);
    Value *next = conds.empty() ? cv : pick(conds);
    body->push_back(std::make_unique<Op>(
        &reg.get("yield"), std::vector<Value *>{next, sameType(inner, init->type(), carried)},
        std::vector<Type>{}));
    scope.push_back(b->push_back(std::move(op))->result(0));
  }

  void fillBlock(Block *b, std::vector<Value *> &scope, int depth) {
    int budget = uniform(1, std::max(1, opts_.maxOps >> depth));
    for (int i = 0; i < budget * 4 && budget > 0; ++i) {
      int r = uniform(0, 19);
      if (depth < opts_.maxNesting && r == 0) addIf(b, scope, depth), --budget;
      else if (depth < opts_.maxNesting && r == 1) addLoop(b, scope, depth), --budget;
      else if (tryRandomOp(b, scope)) --budget;
    }
  }

public:
  void bindSymbols() {
    bindings_["s0"] = uniform(1, 4);
    bindings_["s1"] = uniform(1, 6);
  }

private:
  std::mt19937_64 rng_;
  RandomGraphOptions opts_;
  std::vector<const OpDef *> ops_;
  SymbolBindings bindings_;
  int line_ = 0;
};

} // namespace

RandomCase randomGraph(uint64_t seed, const RandomGraphOptions &opts) {
  Generator gen(seed, opts);
  gen.bindSymbols();
  return gen.run();
}

CheckResult checkRandomGraph(uint64_t seed, const RandomGraphOptions &opts) {
  RandomCase c = randomGraph(seed, opts);
  std::string text = printGraph(*c.graph);
  CheckResult result;
  result.ops = c.graph->numOps();
  auto fail = [&](const std::string &what) {
    result.failure = "seed " + std::to_string(seed) + ": " + what + "\n" + text;
    return result;
  };
  if (auto errs = verifyGraph(*c.graph); !errs.empty()) return fail("verifier: " + errs[0]);
  try {
    auto again = parseGraph(text, "fuzz.xir");
    std::string text2 = printGraph(*again);
    if (text2 != text) return fail("print(parse(text)) differs:\n" + text2);
    if (auto errs = verifyGraph(*again); !errs.empty()) return fail("verifier after parse: " + errs[0]);
  } catch (const std::exception &e) {
    return fail(std::string("parse failed: ") + e.what());
  }
  try {
    interpret(*c.graph, c.inputs);
  } catch (const Error &e) {
    if (e.kind() == ErrorKind::Internal) return fail(std::string("interpreter: ") + e.what());
    result.inputsRejected = true; // a user error: e.g. an index out of range
  } catch (const std::exception &e) {
    return fail(std::string("interpreter threw a non-xjit exception: ") + e.what());
  }
  return result;
}

FuzzStats fuzz(uint64_t firstSeed, int64_t count, const RandomGraphOptions &opts,
               size_t keepMessages) {
  FuzzStats s;
  for (int64_t i = 0; i < count; ++i) {
    uint64_t seed = firstSeed + static_cast<uint64_t>(i);
    CheckResult r = checkRandomGraph(seed, opts);
    ++s.graphs;
    s.ops += static_cast<int64_t>(r.ops);
    s.rejectedInputs += r.inputsRejected;
    if (!r.failure.empty()) {
      ++s.failures;
      if (s.failureMessages.size() < keepMessages) s.failureMessages.push_back(r.failure);
    }
  }
  return s;
}

} // namespace xjit::testing
