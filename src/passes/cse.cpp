// Common subexpression elimination: merges pure ops with equal names, operands, attributes
// and result types, reusing a dominating op of an enclosing block inside nested blocks; not
// two fresh results (or reshapes, which may copy) that both leave the graph (eager returns two
// tensors).
#include "passes.h"

#include "mutation_info.h"
#include "xjit/ir/op_registry.h"

#include <cstring>
#include <functional>
#include <unordered_map>

namespace xjit::passes {
namespace {

size_t mix(size_t h, size_t v) { return h ^ (v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2)); }

size_t hashDouble(double d) {
  uint64_t bits;
  std::memcpy(&bits, &d, sizeof bits);
  return std::hash<uint64_t>()(bits);
}

size_t hashAttr(const Attr &a) {
  size_t h = static_cast<size_t>(a.kind());
  switch (a.kind()) {
  case AttrKind::Int: return mix(h, std::hash<int64_t>()(a.asInt()));
  case AttrKind::Float: return mix(h, hashDouble(a.asFloat()));
  case AttrKind::Bool: return mix(h, a.asBool());
  case AttrKind::Str: return mix(h, std::hash<std::string>()(a.asStr()));
  case AttrKind::Ints:
    for (int64_t v : a.asInts())
      h = mix(h, std::hash<int64_t>()(v));
    return h;
  case AttrKind::Floats:
    for (double v : a.asFloats())
      h = mix(h, hashDouble(v));
    return h;
  case AttrKind::DType: return mix(h, static_cast<size_t>(a.asDType()));
  case AttrKind::Type: return mix(h, std::hash<std::string>()(a.asType().str()));
  case AttrKind::Tensor: {
    // dtype, sizes and a few leading elements: cheap, and equality settles the rest.
    const Tensor &t = a.asTensor();
    h = mix(h, static_cast<size_t>(t.dtype()));
    for (int64_t s : t.sizes())
      h = mix(h, std::hash<int64_t>()(s));
    for (int64_t i = 0, n = std::min<int64_t>(t.numel(), 8); i < n; ++i)
      h = mix(h, isFloating(t.dtype()) ? hashDouble(t.getDouble(i))
                                       : std::hash<int64_t>()(t.getInt(i)));
    return h;
  }
  }
  return h;
}

/// Swapping the first two operands of a commutative op gives a bit-identical result, except
/// for f16/bf16 results where a one-element `other` is read in f32 (mul): not swapped there.
bool swappable(const Op &op) {
  if (!op.def().has(kCommutative) || op.numOperands() < 2) return false;
  const Type &t = op.result(0)->type();
  return !(t.isTensor() && (t.dtype() == DType::F16 || t.dtype() == DType::BF16));
}

struct OpKey {
  const Op *op;
};

struct KeyHash {
  size_t operator()(const OpKey &k) const {
    const Op &op = *k.op;
    size_t h = std::hash<const void *>()(&op.def());
    size_t start = 0;
    if (swappable(op)) { // order-independent combination of the first two operands
      h = mix(h,
              std::hash<const void *>()(op.operand(0)) ^ std::hash<const void *>()(op.operand(1)));
      start = 2;
    }
    for (size_t i = start; i < op.numOperands(); ++i)
      h = mix(h, std::hash<const void *>()(op.operand(i)));
    for (const auto &[name, value] : op.attrs())
      h = mix(mix(h, std::hash<std::string>()(name)), hashAttr(value));
    return mix(h, op.numResults());
  }
};

struct KeyEq {
  bool operator()(const OpKey &ka, const OpKey &kb) const {
    const Op &a = *ka.op, &b = *kb.op;
    if (&a.def() != &b.def() || a.numOperands() != b.numOperands() ||
        a.numResults() != b.numResults())
      return false;
    bool same = a.operands() == b.operands();
    if (!same && swappable(a)) {
      same = a.operand(0) == b.operand(1) && a.operand(1) == b.operand(0);
      for (size_t i = 2; same && i < a.numOperands(); ++i)
        same = a.operand(i) == b.operand(i);
    }
    if (!same || a.attrs() != b.attrs()) return false;
    for (size_t i = 0; i < a.numResults(); ++i)
      if (a.result(i)->type() != b.result(i)->type()) return false;
    return true;
  }
};

class Cse {
public:
  Cse(const Graph &g, PassContext &ctx) : mutation_(g), ctx_(ctx) {}

  bool run(Block *b) {
    size_t mark = scope_.size();
    for (Op *op = b->front(); op;) {
      Op *next = op->next();
      for (size_t r = 0; r < op->numRegions(); ++r)
        run(op->region(r));
      if (eligible(*op)) {
        auto [it, inserted] = table_.try_emplace(OpKey{op}, op);
        if (inserted) {
          scope_.push_back(op);
        } else if (!bothEscape(*it->second, *op)) {
          const Op *keep = it->second;
          for (size_t i = 0; i < op->numResults(); ++i)
            op->result(i)->replaceAllUsesWith(keep->result(i));
          mutation_.forgetOp(op);
          b->erase(op);
          ctx_.count("ops-merged");
          changed_ = true;
        }
      }
      op = next;
    }
    // Leaving the block: its ops no longer dominate what follows.
    while (scope_.size() > mark) {
      table_.erase(OpKey{scope_.back()});
      scope_.pop_back();
    }
    return changed_;
  }

private:
  bool eligible(const Op &op) const {
    const OpDef &def = op.def();
    if (!def.isPure() || op.numRegions() > 0 || op.numResults() == 0) return false;
    if (!def.kernel) return false; // only ops whose meaning is a function of their inputs
    // Values in memory that is written in place may differ between two equal-looking reads,
    // and a merged result that is later written would be written for both users.
    for (Value *v : op.operands())
      if (mutation_.mayBeWritten(v)) return false;
    for (const auto &r : op.results())
      if (mutation_.mayBeWritten(r.get())) return false;
    return true;
  }

  /// Two fresh results that both leave the graph are two tensors in eager: merged, a write by
  /// the caller (or after a graph break) to one would change the other (`zeros(2), zeros(2)`).
  /// So are two reshapes (flatten, contiguous) of an operand whose strides allow no view: each
  /// copies (fuzzer seed 17620: `v2 = a.reshape(-1); v4 = a.reshape(-1); v2[0].zero_()` of a
  /// transposed `a` zeroed v4 too).
  static bool bothEscape(const Op &keep, const Op &op) {
    const bool mayCopy =
        op.name() == "reshape" || op.name() == "flatten" || op.name() == "contiguous";
    if (aliasesOperand(op) && !mayCopy) return false; // views of one storage: writes are shared
    for (size_t i = 0; i < op.numResults(); ++i)
      if (escapesGraph(op.result(i)) && escapesGraph(keep.result(i))) return true;
    return false;
  }

  MutationInfo mutation_;
  PassContext &ctx_;
  std::unordered_map<OpKey, const Op *, KeyHash, KeyEq> table_;
  std::vector<const Op *> scope_;
  bool changed_ = false;
};

} // namespace

bool runCse(Graph &g, PassContext &ctx) { return Cse(g, ctx).run(g.body()); }

} // namespace xjit::passes
