// The `fusion` op: a fusion group formed by the fuse pass (src/passes/fuse.cpp). Its one region
// is isolated from above: block arguments are the group's inputs (the op's operands), the body
// holds the fused ops, and `yield` gives the group's outputs (the op's results). The reference
// kernel runs the body with the interpreter, so fused graphs compute exactly what the unfused
// ones did. The backend compiles `elementwise` and `reduction` groups to one loop kernel each
// and runs `epilogue` groups as a library call (the anchor, the body's first op) with the rest
// of the body as post-ops.
#include "ops/op_util.h"
#include "xjit/ir/interpreter.h"

#include <algorithm>
#include <unordered_set>

namespace xjit {
namespace {

constexpr const char *kKinds[] = {"elementwise", "reduction", "epilogue"};

/// The first op of the body that is not a constant (a body may define its own constants).
const Op *firstComputeOp(const Block &body) {
  for (const Op *op : body)
    if (!op->def().has(kConstantLike)) return op;
  return nullptr;
}

std::string verifyFusion(const Op &op) {
  const Block &body = *op.region(0);
  if (body.numArguments() != op.numOperands())
    return "body takes " + std::to_string(body.numArguments()) + " arguments for " +
           std::to_string(op.numOperands()) + " operands";
  for (size_t i = 0; i < op.numOperands(); ++i)
    if (body.argument(i)->type() != op.operand(i)->type())
      return "body argument #" + std::to_string(i) + " has type " + body.argument(i)->type().str() +
             " but operand #" + std::to_string(i) + " is " + op.operand(i)->type().str();
  // The body may use only its own values: the backend compiles it without the enclosing graph.
  std::unordered_set<const Value *> inside;
  for (const auto &a : body.arguments())
    inside.insert(a.get());
  for (const Op *inner : body) {
    for (size_t i = 0; i < inner->numOperands(); ++i)
      if (!inside.count(inner->operand(i)))
        return "body op '" + inner->name() + "' uses a value defined outside the fusion";
    if (inner->numRegions() > 0) return "body op '" + inner->name() + "' has regions";
    if (!inner->def().has(kTerminator) && !inner->def().isPure())
      return "body op '" + inner->name() + "' has side effects";
    for (const auto &r : inner->results())
      inside.insert(r.get());
  }
  if (const Op *y = body.terminator(); y && y->name() == "yield") {
    if (y->numOperands() != op.numResults())
      return "body yields " + std::to_string(y->numOperands()) + " values for " +
             std::to_string(op.numResults()) + " results";
    for (size_t i = 0; i < y->numOperands(); ++i)
      if (y->operand(i)->type() != op.result(i)->type())
        return "body yields " + y->operand(i)->type().str() + " for result #" + std::to_string(i) +
               " of type " + op.result(i)->type().str();
  }
  const std::string &kind = ops::attrStr(op, "kind");
  if (std::find(std::begin(kKinds), std::end(kKinds), kind) == std::end(kKinds))
    return "kind must be \"elementwise\", \"reduction\" or \"epilogue\", got \"" + kind + "\"";
  const Attr *anchor = op.attrOrNull("anchor");
  if ((kind == "epilogue") != (anchor != nullptr))
    return kind == "epilogue" ? "an epilogue fusion needs an `anchor` attribute"
                              : "only epilogue fusions have an `anchor`";
  if (const Attr *inPlace = op.attrOrNull("inplace_operand")) {
    if (kind != "elementwise") return "only elementwise fusions have `inplace_operand`";
    if (inPlace->asInts().size() != op.numResults())
      return "inplace_operand has " + std::to_string(inPlace->asInts().size()) + " entries for " +
             std::to_string(op.numResults()) + " results";
    for (size_t r = 0; r < op.numResults(); ++r) {
      const int64_t j = inPlace->asInts()[r];
      if (j < -1 || j >= int64_t(op.numOperands()) ||
          (j >= 0 && op.operand(size_t(j))->type() != op.result(r)->type()))
        return "inplace_operand of result #" + std::to_string(r) +
               " is not -1 or an operand of the result's type";
    }
  }
  if (anchor) {
    const Op *first = firstComputeOp(body);
    if (!first || first->name() != anchor->asStr())
      return "anchor '" + anchor->asStr() + "' must be the body's first op, found '" +
             (first ? first->name() : std::string("nothing")) + "'";
  }
  return "";
}

} // namespace

void registerFusionOps(OpRegistry &r) {
  r.add({.name = "fusion",
         .summary = "a fusion group: its isolated region takes the operands as block arguments "
                    "and yields the results; kind \"elementwise\", \"reduction\" or \"epilogue\" "
                    "(whose body starts with the `anchor` op, the rest are its post-ops)",
         .operands = {{"inputs", true}},
         .attrs = {{.name = "kind", .kind = AttrKind::Str},
                   {.name = "anchor", .kind = AttrKind::Str, .optional = true},
                   // Per result, the operand whose memory it is computed in, or -1 (set by the
                   // reinplace pass for element-wise groups; the reference kernel ignores it).
                   {.name = "inplace_operand", .kind = AttrKind::Ints, .optional = true}},
         .kernel =
             [](const Op &op, std::span<const RtValue> in) {
               return interpretBlock(*op.region(0), std::vector<RtValue>(in.begin(), in.end()));
             },
         .verify = verifyFusion,
         .numRegions = 1});
}

} // namespace xjit
