// Structural ops: constants, terminators, structured control flow and tuples.
#include "ops/op_util.h"

#include <map>
#include <memory>
#include <mutex>

namespace xjit {
using namespace ops;

namespace {
Type constantType(const Op &op) {
  const Attr *v = op.attrOrNull("value");
  if (!v) return Type::none();
  switch (v->kind()) {
  case AttrKind::Int: return Type::intTy();
  case AttrKind::Float: return Type::floatTy();
  case AttrKind::Bool: return Type::boolTy();
  case AttrKind::Str: return Type::strTy();
  case AttrKind::Tensor: {
    const Tensor &t = v->asTensor();
    return Type::tensor(t.dtype(), Shape(t.sizes().begin(), t.sizes().end()));
  }
  default: inferFail("constant value must be an int, float, bool, string or dense tensor");
  }
}

RtValue constantValue(const Op &op) {
  const Attr *v = op.attrOrNull("value");
  if (!v) return RtValue();
  switch (v->kind()) {
  case AttrKind::Int: return RtValue(v->asInt());
  case AttrKind::Float: return RtValue(v->asFloat());
  case AttrKind::Bool: return RtValue(v->asBool());
  case AttrKind::Str: return RtValue(v->asStr());
  default: return RtValue(v->asTensor()); // shared: constants are never written in place
  }
}

std::string verifyIf(const Op &op) {
  const Type &c = op.operand(0)->type();
  if (c.kind() != TypeKind::Bool) return "condition must be a bool, got " + c.str();
  for (size_t r = 0; r < 2; ++r)
    if (op.region(r)->numArguments() != 0) return "if regions take no arguments";
  return "";
}

std::string verifyLoop(const Op &op) {
  if (op.operand(0)->type().kind() != TypeKind::Int)
    return "max_trip_count must be an int, got " + op.operand(0)->type().str();
  if (op.operand(1)->type().kind() != TypeKind::Bool)
    return "initial_condition must be a bool, got " + op.operand(1)->type().str();
  size_t carried = op.numOperands() - 2;
  if (op.numResults() != carried)
    return std::to_string(carried) + " carried values but " + std::to_string(op.numResults()) +
           " results";
  Block *body = op.region(0);
  if (body->numArguments() != carried + 1)
    return "body must take the iteration number and " + std::to_string(carried) +
           " carried values, takes " + std::to_string(body->numArguments()) + " arguments";
  if (body->argument(0)->type().kind() != TypeKind::Int) return "iteration argument must be an int";
  for (size_t i = 0; i < carried; ++i) {
    const Type &init = op.operand(2 + i)->type(), &arg = body->argument(1 + i)->type(),
               &res = op.result(i)->type();
    if (init != arg || init != res)
      return "carried value " + std::to_string(i) + " has initial type " + init.str() +
             ", block argument type " + arg.str() + " and result type " + res.str();
  }
  return "";
}

/// custom_vjp: region 0 (forward) takes the operands and yields the results, then the saved
/// values; region 1 (backward) takes the saved values, then one gradient per result, and yields
/// one gradient per operand (its type, or none).
std::string verifyCustomVjp(const Op &op) {
  const Block *fwd = op.region(0), *bwd = op.region(1);
  if (fwd->numArguments() != op.numOperands())
    return "forward region takes " + std::to_string(fwd->numArguments()) + " arguments for " +
           std::to_string(op.numOperands()) + " operands";
  for (size_t i = 0; i < op.numOperands(); ++i)
    if (fwd->argument(i)->type() != op.operand(i)->type())
      return "forward argument " + std::to_string(i) + " has type " +
             fwd->argument(i)->type().str() + ", operand " + op.operand(i)->type().str();
  const Op *fy = fwd->terminator(), *by = bwd->terminator();
  if (!fy || !by) return ""; // reported as a missing yield
  const size_t results = op.numResults();
  if (fy->numOperands() < results)
    return "forward region yields " + std::to_string(fy->numOperands()) + " values for " +
           std::to_string(results) + " results";
  for (size_t i = 0; i < results; ++i)
    if (fy->operand(i)->type() != op.result(i)->type())
      return "forward yield " + std::to_string(i) + " has type " + fy->operand(i)->type().str() +
             ", result " + op.result(i)->type().str();
  const size_t saved = fy->numOperands() - results;
  if (bwd->numArguments() != saved + results)
    return "backward region takes " + std::to_string(bwd->numArguments()) +
           " arguments, expected " + std::to_string(saved) + " saved values and " +
           std::to_string(results) + " gradients";
  for (size_t i = 0; i < saved + results; ++i) {
    const Type &want = i < saved ? fy->operand(results + i)->type() : op.result(i - saved)->type();
    if (bwd->argument(i)->type() != want)
      return "backward argument " + std::to_string(i) + " has type " +
             bwd->argument(i)->type().str() + ", expected " + want.str();
  }
  if (by->numOperands() != op.numOperands())
    return "backward region yields " + std::to_string(by->numOperands()) + " gradients for " +
           std::to_string(op.numOperands()) + " operands";
  for (size_t i = 0; i < op.numOperands(); ++i) {
    const Type &g = by->operand(i)->type();
    if (g.kind() != TypeKind::None && g != op.operand(i)->type())
      return "gradient " + std::to_string(i) + " has type " + g.str() + ", operand " +
             op.operand(i)->type().str();
  }
  for (int64_t r : attrInts(op, "non_differentiable"))
    if (r < 0 || r >= static_cast<int64_t>(results))
      return "non_differentiable index " + std::to_string(r) + " out of range";
  return "";
}
} // namespace

namespace {
std::mutex gExternalMutex;
std::map<int64_t, std::shared_ptr<ExternalFn>> gExternals;
int64_t gNextExternal = 1;
} // namespace

int64_t registerExternalFunction(ExternalFn fn) {
  std::lock_guard<std::mutex> lock(gExternalMutex);
  gExternals[gNextExternal] = std::make_shared<ExternalFn>(std::move(fn));
  return gNextExternal++;
}

void unregisterExternalFunction(int64_t id) {
  std::lock_guard<std::mutex> lock(gExternalMutex);
  gExternals.erase(id);
}

const ExternalFn *lookupExternalFunction(int64_t id) {
  std::lock_guard<std::mutex> lock(gExternalMutex);
  auto it = gExternals.find(id);
  return it == gExternals.end() ? nullptr : it->second.get();
}

void registerControlFlowOps(OpRegistry &r) {
  r.add({.name = "constant",
         .summary = "a value given by the `value` attribute (none when absent)",
         .attrs = {{.name = "value", .kind = AttrKind::Int, .optional = true, .anyKind = true}},
         .traits = kConstantLike,
         .infer = [](const Op &op) { return std::vector<Type>{constantType(op)}; },
         .kernel = [](const Op &op, std::span<const RtValue>) {
           return std::vector<RtValue>{constantValue(op)};
         }});
  r.add({.name = "return",
         .summary = "ends the graph body; its operands are the graph outputs",
         .operands = {{"values", true}},
         .traits = kTerminator | kSideEffect});
  r.add({.name = "yield",
         .summary = "ends an if/loop region; its operands flow to the parent op",
         .operands = {{"values", true}},
         .traits = kTerminator | kSideEffect});
  r.add({.name = "if",
         .summary = "runs region 0 if cond else region 1; results are the yielded values",
         .operands = {{"cond"}},
         .verify = verifyIf,
         .numRegions = 2});
  r.add({.name = "loop",
         .summary = "while iteration < max_trip_count and cond: carried = body(iteration, carried)",
         .operands = {{"max_trip_count"}, {"initial_condition"}, {"carried", true}},
         .verify = verifyLoop,
         .numRegions = 1});
  r.add({.name = "custom_vjp",
         .summary = "a torch.autograd.Function: results = forward region(operands); autodiff "
                    "uses the backward region as the rule, inline-custom-vjp the forward",
         .operands = {{"inputs", true}},
         .attrs = {{"name", AttrKind::Str, Attr("")},
                   {"non_differentiable", AttrKind::Ints, Attr(Attr::Ints{})}},
         .verify = verifyCustomVjp,
         .numRegions = 2});
  r.add({.name = "external_call",
         .summary = "calls host function `callee` (registered at run time; results as written); "
                    "layout_of >= 0: the result takes operand layout_of's strides",
         .operands = {{"args", true}},
         .attrs = {{"callee", AttrKind::Int},
                   {"name", AttrKind::Str, Attr("")},
                   {"layout_of", AttrKind::Int, Attr(int64_t(-1))}},
         .traits = kSideEffect, // an arbitrary host function: never removed or reordered
         .kernel = [](const Op &op, std::span<const RtValue> in) {
           const ExternalFn *fn = lookupExternalFunction(attrInt(op, "callee"));
           if (!fn)
             kernelFail("external function " + std::to_string(attrInt(op, "callee")) + " ('" +
                        attrStr(op, "name") + "') is not registered in this process");
           return (*fn)(in);
         }});
  r.add({.name = "tuple_construct",
         .summary = "a tuple of the operands",
         .operands = {{"elements", true}},
         .infer =
             [](const Op &op) {
               std::vector<Type> elems;
               for (Value *v : op.operands()) elems.push_back(v->type());
               return std::vector<Type>{Type::tuple(std::move(elems))};
             },
         .kernel = [](const Op &, std::span<const RtValue> in) {
           return std::vector<RtValue>{RtValue(RtList(in.begin(), in.end()))};
         }});
  r.add({.name = "tuple_get",
         .summary = "element `index` of a tuple",
         .operands = {{"tuple"}},
         .attrs = {{"index", AttrKind::Int}},
         .infer =
             [](const Op &op) {
               const Type &t = op.operand(0)->type();
               if (t.kind() != TypeKind::Tuple) inferFail("operand must be a tuple, got " + t.str());
               int64_t i = attrInt(op, "index"), n = static_cast<int64_t>(t.elements().size());
               if (i < -n || i >= n) inferFail("tuple index " + std::to_string(i) + " out of range");
               return std::vector<Type>{t.elements()[static_cast<size_t>(i < 0 ? i + n : i)]};
             },
         .kernel = [](const Op &op, std::span<const RtValue> in) {
           const RtList &l = in[0].list();
           int64_t i = attrInt(op, "index"), n = static_cast<int64_t>(l.size());
           return std::vector<RtValue>{l.at(static_cast<size_t>(i < 0 ? i + n : i))};
         }});
}

} // namespace xjit
