// Constant folding: evaluates pure ops whose operands are all constants with the registry's
// reference kernels, and folds size/numel/dim queries that the static types answer.
#include "passes.h"

#include "constant_value.h"
#include "mutation_info.h"
#include "xjit/ir/builder.h"
#include "xjit/ir/op_registry.h"

#include <algorithm>
#include <unordered_map>

namespace xjit::passes {
namespace {

class ConstantFolder {
public:
  ConstantFolder(const Graph &g, PassContext &ctx)
      : mutation_(g), ctx_(ctx), maxElements_(ctx.intOption("max-elements")) {}

  void run(Block *b) {
    for (Op *op = b->front(); op;) {
      Op *next = op->next();
      for (size_t r = 0; r < op->numRegions(); ++r)
        run(op->region(r));
      if (auto answer = shapeQuery(*op)) {
        replaceWithConstants(op, {RtValue(*answer)});
        ctx_.count("shape-queries-folded");
      } else if (auto values = evaluate(*op)) {
        replaceWithConstants(op, *values);
        ctx_.count("ops-folded");
      }
      op = next;
    }
  }

  bool changed() const { return changed_; }

private:
  /// size(x, d), numel(x) and dim(x) when x's static type gives the answer.
  static std::optional<int64_t> shapeQuery(const Op &op) {
    const std::string &name = op.name();
    if ((name != "size" && name != "numel" && name != "dim") || op.numOperands() != 1)
      return std::nullopt;
    const Type &t = op.operand(0)->type();
    if (!t.isTensor() || op.result(0)->type().kind() != TypeKind::Int) return std::nullopt;
    if (name == "dim") return t.rank();
    if (name == "numel") return numelOf(t.shape()).staticValue();
    const Attr *dim = op.attrOrNull("dim");
    if (!dim || dim->kind() != AttrKind::Int) return std::nullopt;
    int64_t d = dim->asInt(), rank = t.rank();
    if (d < -rank || d >= rank) return std::nullopt; // the verifier reports it
    return t.shape()[static_cast<size_t>(d < 0 ? d + rank : d)].staticValue();
  }

  /// A result type a `constant` op can have, with the tensor size within the cap.
  bool representable(const Type &t) const {
    switch (t.kind()) {
    case TypeKind::Int:
    case TypeKind::Float:
    case TypeKind::Bool:
    case TypeKind::Str:
    case TypeKind::None: return true;
    case TypeKind::Tensor: {
      if (t.device() != Device{} || !isStaticShape(t.shape())) return false;
      return numelOf(t.shape()).value() <= maxElements_;
    }
    default: return false;
    }
  }

  std::optional<std::vector<RtValue>> evaluate(const Op &op) const {
    const OpDef &def = op.def();
    if (!def.isPure() || !def.kernel || op.numRegions() > 0 || isConstantSource(&op))
      return std::nullopt;
    if (op.numOperands() == 0) return std::nullopt; // constant-like ops already are constants
    for (const auto &r : op.results())
      if (!representable(r->type()) || mutation_.mayBeWritten(r.get())) return std::nullopt;
    // A returned view of a base that is returned too (or viewed by another output) stays a
    // view: a new constant would cut it off, and a write by the caller or after a graph break
    // would miss the base (fuzzer seed 10156).
    if (aliasesOperand(op) && escapesGraph(viewRootOf(op.operand(0)), &op))
      for (const auto &r : op.results())
        if (escapesGraph(r.get())) return std::nullopt;
    // So does a view that two outputs share (returned and viewed by another output): folded,
    // both would view a contiguous constant where eager's views have the view's strides, and
    // restoring those strides would copy them apart (fuzzer seed 19124: `v = eye(n).t();
    // return v.squeeze(), v`).
    if (aliasesOperand(op))
      for (const auto &r : op.results()) {
        int paths = 0;
        for (const Use &u : r->uses())
          if (u.user->name() == "return" ||
              (u.index == 0 && aliasesOperand(*u.user) &&
               std::any_of(u.user->results().begin(), u.user->results().end(),
                           [](const auto &ur) { return escapesGraph(ur.get()); })))
            ++paths;
        if (paths >= 2) return std::nullopt;
      }
    std::vector<RtValue> inputs;
    for (Value *v : op.operands()) {
      if (!isConstantSource(v->definingOp()) || mutation_.mayBeWritten(v)) return std::nullopt;
      const auto &c = cachedConstant(v);
      if (!c) return std::nullopt;
      inputs.push_back(*c);
    }
    std::vector<RtValue> out;
    try {
      out = def.kernel(op, inputs);
    } catch (const std::exception &) {
      return std::nullopt; // e.g. an index out of range: the run time reports it
    }
    if (out.size() != op.numResults()) return std::nullopt;
    for (size_t i = 0; i < out.size(); ++i)
      if (!matches(op.result(i)->type(), out[i])) return std::nullopt;
    return out;
  }

  /// constantValue, evaluated once per value (a zeros() feeding many ops runs once).
  const std::optional<RtValue> &cachedConstant(const Value *v) const {
    auto it = constants_.find(v);
    if (it == constants_.end()) it = constants_.emplace(v, constantValue(v, maxElements_)).first;
    return it->second;
  }

  static bool matches(const Type &t, const RtValue &v) {
    switch (t.kind()) {
    case TypeKind::Int: return v.isInt();
    case TypeKind::Float: return v.isFloat();
    case TypeKind::Bool: return v.isBool();
    case TypeKind::Str: return v.isStr();
    case TypeKind::None: return v.isNone();
    case TypeKind::Tensor: {
      if (!v.isTensor() || v.tensor().dtype() != t.dtype()) return false;
      const auto &sizes = v.tensor().sizes();
      if (sizes.size() != t.shape().size()) return false;
      for (size_t d = 0; d < sizes.size(); ++d)
        if (t.shape()[d].value() != sizes[d]) return false;
      return true;
    }
    default: return false;
    }
  }

  static AttrMap valueAttr(const RtValue &v) {
    if (v.isInt()) return {{"value", Attr(v.toInt())}};
    if (v.isFloat()) return {{"value", Attr(v.toDouble())}};
    if (v.isBool()) return {{"value", Attr(v.toBool())}};
    if (v.isStr()) return {{"value", Attr(v.str())}};
    // A fresh contiguous copy: kernels may return views of their (constant) inputs.
    if (v.isTensor()) return {{"value", Attr(v.tensor().contiguousCopy())}};
    return {};
  }

  void replaceWithConstants(Op *op, const std::vector<RtValue> &values) {
    Builder b(op->parentBlock(), op);
    b.setLoc(op->loc());
    for (size_t i = 0; i < values.size(); ++i) {
      Value *old = op->result(i);
      Value *c = b.createWithTypes("constant", {}, {old->type()}, valueAttr(values[i]))->result();
      c->setName(old->name());
      old->replaceAllUsesWith(c);
      constants_.erase(old); // its address may be reused by a later value
    }
    mutation_.forgetOp(op);
    op->parentBlock()->erase(op);
    changed_ = true;
  }

  MutationInfo mutation_;
  PassContext &ctx_;
  int64_t maxElements_;
  mutable std::unordered_map<const Value *, std::optional<RtValue>> constants_;
  bool changed_ = false;
};

} // namespace

bool runConstantFold(Graph &g, PassContext &ctx) {
  ConstantFolder folder(g, ctx);
  folder.run(g.body());
  return folder.changed();
}

} // namespace xjit::passes
