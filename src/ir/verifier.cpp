// Graph verifier: SSA dominance, the registry's operand/attribute/region
// contracts, result types against inference, terminators, and the yields of
// `if` and `loop` against their parent.
#include "xjit/ir/verifier.h"

#include "xjit/ir/diagnostics.h"
#include "xjit/ir/op_registry.h"
#include "xjit/ir/sym_attr.h"

#include <set>
#include <unordered_set>

namespace xjit {
namespace {

const char *kindName(AttrKind k) {
  switch (k) {
  case AttrKind::Int: return "an int";
  case AttrKind::Float: return "a float";
  case AttrKind::Bool: return "a bool";
  case AttrKind::Str: return "a string";
  case AttrKind::Ints: return "an int list";
  case AttrKind::Floats: return "a float list";
  case AttrKind::DType: return "a dtype";
  case AttrKind::Type: return "a type";
  case AttrKind::Tensor: return "a dense tensor";
  }
  return "?";
}

bool kindAccepts(AttrKind slot, AttrKind value) {
  return slot == value || (slot == AttrKind::Float && value == AttrKind::Int);
}

std::string plural(size_t n, const char *word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

std::string operandName(const Op &op, size_t i) {
  const Value *v = op.operand(i);
  std::string s = "operand #" + std::to_string(i);
  return v && !v->name().empty() ? s + " (%" + v->name() + ")" : s;
}

/// True if a tensor type (or one inside a tuple/list) has a negative static dimension.
bool hasNegativeDim(const Type &t) {
  switch (t.kind()) {
  case TypeKind::Tensor:
    for (const DimExpr &d : t.shape())
      if (d.isStatic() && d.value() < 0) return true;
    return false;
  case TypeKind::Tuple:
    for (const Type &e : t.elements())
      if (hasNegativeDim(e)) return true;
    return false;
  case TypeKind::List: return hasNegativeDim(t.elementType());
  default: return false;
  }
}

/// The block a value is defined in.
const Block *definingBlock(const Value *v) {
  return v->isBlockArgument() ? v->ownerBlock() : v->definingOp()->parentBlock();
}

class Verifier {
public:
  explicit Verifier(const Graph &g) : g_(g) {}

  std::vector<VerifyDiagnostic> run() {
    block(*g_.body(), nullptr, 0);
    return std::move(diags_);
  }

private:
  void report(const Op *op, std::string msg) { diags_.push_back({op, std::move(msg)}); }

  void block(const Block &b, const Op *parent, size_t regionIndex) {
    for (const auto &a : b.arguments()) {
      visible_.insert(a.get());
      if (int d = a->unitDimHint(); d >= 0 && (!a->type().isTensor() || d >= a->type().rank())) {
        std::string what = "argument #" + std::to_string(a->index()) + " unit_dim " +
                           std::to_string(d) + " is not a dim of " + a->type().str();
        report(parent, parent ? "region #" + std::to_string(regionIndex) + " " + what
                              : "graph @" + g_.name() + ": " + what);
      }
      if (!hasNegativeDim(a->type())) continue;
      std::string what = "argument #" + std::to_string(a->index()) + " type " + a->type().str() +
                         " has a negative dimension";
      if (parent)
        report(parent, "region #" + std::to_string(regionIndex) + " " + what);
      else
        report(nullptr, "graph @" + g_.name() + ": " + what);
    }
    terminators(b, parent, regionIndex);
    for (const Op *op : b) {
      this->op(*op);
      for (size_t r = 0; r < op->numRegions(); ++r) block(*op->region(r), op, r);
      for (const auto &res : op->results()) visible_.insert(res.get());
    }
    // Leaving the block: its values are not visible to what follows its parent
    // op.
    for (const auto &a : b.arguments()) visible_.erase(a.get());
    for (const Op *op : b)
      for (const auto &res : op->results()) visible_.erase(res.get());
  }

  /// The graph body ends in `return`, a region in `yield`, and nothing else is
  /// a terminator.
  void terminators(const Block &b, const Op *parent, size_t regionIndex) {
    const char *want = parent ? "yield" : "return";
    for (const Op *op : b)
      if (op != b.back() && op->def().has(kTerminator))
        report(op, "'" + op->name() + "' must be the last op in its block");
    const Op *last = b.back();
    if (last && last->name() == want) return;
    std::string found = last ? "found '" + last->name() + "'" : "it is empty";
    if (parent)
      report(parent, "region #" + std::to_string(regionIndex) + " must end in 'yield', " + found);
    else if (last)
      report(last, "the graph body must end in 'return', " + found);
    else
      report(nullptr, "graph @" + g_.name() + ": the graph body must end in 'return', " + found);
  }

  void op(const Op &op) {
    const OpDef &def = op.def();
    bool wellFormed = operands(op);
    for (size_t i = 0; i < op.numResults(); ++i)
      if (hasNegativeDim(op.result(i)->type())) {
        report(&op, "result #" + std::to_string(i) + " type " + op.result(i)->type().str() +
                        " has a negative dimension");
        wellFormed = false;
      }
    wellFormed = attributes(op) && wellFormed;
    if (op.numRegions() != static_cast<size_t>(def.numRegions)) {
      report(&op, "expects " + plural(def.numRegions, "region") + ", has " +
                      std::to_string(op.numRegions()));
      wellFormed = false;
    }
    // Hooks below read operands, attributes and regions by index: only run them
    // on ops whose shape matches the contract, so they cannot trip over it.
    if (!wellFormed) return;
    if (op.name() == "if") ifYields(op);
    if (op.name() == "loop") loopYield(op);
    if (def.verify) {
      try {
        if (std::string msg = def.verify(op); !msg.empty()) report(&op, msg);
      } catch (const std::exception &e) {
        report(&op, e.what());
      }
    }
    if (def.infer) inferred(op);
  }

  bool operands(const Op &op) {
    const OpDef &def = op.def();
    size_t n = op.numOperands(), lo = def.minOperands(), hi = def.maxOperands();
    bool ok = true;
    if (n < lo || n > hi) {
      std::string want = lo == hi         ? std::to_string(lo)
                         : hi == SIZE_MAX ? "at least " + std::to_string(lo)
                                          : std::to_string(lo) + " to " + std::to_string(hi);
      report(&op,
             "expects " + want + " operand" + (hi == 1 ? "" : "s") + ", got " + std::to_string(n));
      ok = false;
    }
    for (size_t i = 0; i < n; ++i) {
      const Value *v = op.operand(i);
      if (!v) {
        report(&op, "operand #" + std::to_string(i) + " is null");
        ok = false;
      } else if (!visible_.count(v)) {
        report(&op, operandName(op, i) + " " + whyNotVisible(v, op));
      }
    }
    return ok;
  }

  /// Why a value does not dominate its use at `user`.
  std::string whyNotVisible(const Value *v, const Op &user) const {
    const Block *def = definingBlock(v);
    if (!def) return "is not defined in any block";
    // Is the defining block the user's block or one enclosing it? Then the use
    // comes first.
    for (const Block *b = user.parentBlock(); b;) {
      if (b == def) return "is used before its definition";
      const Op *p = b->parentOp();
      b = p ? p->parentBlock() : nullptr;
    }
    const Block *root = def;
    while (root->parentOp() && root->parentOp()->parentBlock())
      root = root->parentOp()->parentBlock();
    if (root != g_.body()) return "is not defined in this graph";
    if (v->definingOp() && v->definingOp()->isInside(&user))
      return "is defined inside this op's own region";
    return "is defined in a region that does not enclose this use";
  }

  bool attributes(const Op &op) {
    const OpDef &def = op.def();
    bool ok = true;
    for (const auto &[name, value] : op.attrs()) {
      const AttrSpec *spec = def.attrSpec(name);
      // "ns.name" attributes are annotations that passes attach for later stages (plan-memory's
      // mem.offset): not part of any op's contract, so not checked here.
      if (!spec && name.find('.') != std::string::npos) continue;
      if (!spec) {
        report(&op, "unknown attribute '" + name + "'");
        ok = false;
      } else if (value.kind() == AttrKind::Str &&
                 symbolicSizeSlot(op.name(), name) != SizeSlotForm::None) {
        ok = symbolicSize(op, name, value) && ok;
      } else if (!spec->anyKind && !kindAccepts(spec->kind, value.kind())) {
        report(&op,
               "attribute '" + name + "' must be " + kindName(spec->kind) + ", got " + value.str());
        ok = false;
      }
    }
    for (const AttrSpec &spec : def.attrs)
      if (!spec.defaultValue && !spec.optional && !op.hasAttr(spec.name)) {
        report(&op, "missing required attribute '" + spec.name + "'");
        ok = false;
      }
    return ok;
  }

  /// A symbolic size (docs/ir.md, "Symbolic sizes"): well-formed dims whose symbols the graph
  /// inputs bind (a dim of an input's type that is exactly that symbol), so that every run can
  /// evaluate it.
  bool symbolicSize(const Op &op, const std::string &name, const Attr &value) {
    SizeSlotForm form = symbolicSizeSlot(op.name(), name);
    auto dims = symbolicDims(value, form);
    if (!dims) {
      report(&op, "attribute '" + name + "' must be " +
                      (form == SizeSlotForm::Dim ? "an integer or a dimension expression"
                                                 : "a list of integers or dimension expressions") +
                      ", got " + value.str());
      return false;
    }
    if (boundSymbols_.empty()) {
      SymbolBindings any;
      for (size_t i = 0; i < g_.numInputs(); ++i)
        if (g_.input(i)->type().isTensor()) {
          const Shape &shape = g_.input(i)->type().shape();
          bindShapeSymbols(shape, std::vector<int64_t>(shape.size(), 0), any);
        }
      for (auto &[sym, v] : any)
        boundSymbols_.insert(sym);
      boundSymbols_.insert(""); // computed
    }
    for (const DimExpr &d : *dims)
      for (const std::string &sym : d.symbols())
        if (!boundSymbols_.count(sym)) {
          report(&op, "attribute '" + name + "' = " + d.str() + " uses symbol '" + sym +
                          "', which no graph input's shape binds");
          return false;
        }
    return true;
  }

  /// The yield ending `b`, or nullptr (the terminator check reports its
  /// absence).
  static const Op *yieldOf(const Block &b) {
    const Op *last = b.back();
    return last && last->name() == "yield" ? last : nullptr;
  }

  /// Each region of an `if` yields values of the if's result types.
  void ifYields(const Op &op) {
    for (size_t r = 0; r < op.numRegions(); ++r) {
      const Op *y = yieldOf(*op.region(r));
      if (!y) continue;
      if (y->numOperands() != op.numResults()) {
        report(&op, "region #" + std::to_string(r) + " yields " +
                        plural(y->numOperands(), "value") + " but 'if' has " +
                        plural(op.numResults(), "result"));
        continue;
      }
      for (size_t i = 0; i < y->numOperands(); ++i)
        if (y->operand(i) && y->operand(i)->type() != op.result(i)->type())
          report(&op, "region #" + std::to_string(r) + " yields " + y->operand(i)->type().str() +
                          " for result #" + std::to_string(i) + " of type " +
                          op.result(i)->type().str());
    }
  }

  /// A loop body yields (continue: bool, carried values of the loop's result
  /// types...).
  void loopYield(const Op &op) {
    const Op *y = yieldOf(*op.region(0));
    if (!y) return;
    if (y->numOperands() != op.numResults() + 1) {
      report(&op, "body must yield a bool condition and " +
                      plural(op.numResults(), "carried value") + ", yields " +
                      plural(y->numOperands(), "value"));
      return;
    }
    if (y->operand(0) && y->operand(0)->type() != Type::boolTy())
      report(&op, "body must yield a bool condition first, got " + y->operand(0)->type().str());
    for (size_t i = 0; i < op.numResults(); ++i) {
      const Value *v = y->operand(i + 1);
      if (v && v->type() != op.result(i)->type())
        report(&op, "body yields " + v->type().str() + " for carried value #" + std::to_string(i) +
                        " of type " + op.result(i)->type().str());
    }
  }

  /// Declared result types equal what the op's InferFn computes.
  void inferred(const Op &op) {
    std::vector<Type> types;
    try {
      types = op.def().infer(op);
    } catch (const TypeInferenceError &e) {
      report(&op, e.what());
      return;
    } catch (const std::exception &e) {
      report(&op, std::string("type inference failed: ") + e.what());
      return;
    }
    if (types.size() != op.numResults()) {
      report(&op, "has " + plural(op.numResults(), "result") + " but '" + op.name() +
                      "' produces " + std::to_string(types.size()));
      return;
    }
    for (size_t i = 0; i < types.size(); ++i) {
      if (op.result(i)->type() == types[i]) continue;
      std::string which = types.size() == 1 ? "result" : "result #" + std::to_string(i);
      report(&op, which + " type " + op.result(i)->type().str() + " does not match inferred " +
                      types[i].str());
    }
  }

  const Graph &g_;
  std::set<std::string> boundSymbols_; // plain symbols of the inputs' dims, once computed
  std::unordered_set<const Value *> visible_;
  std::vector<VerifyDiagnostic> diags_;
};

} // namespace

std::string VerifyDiagnostic::str() const { return op ? op->describe() + ": " + message : message; }

std::vector<VerifyDiagnostic> verifyGraphDiagnostics(const Graph &g) { return Verifier(g).run(); }

std::vector<std::string> verifyGraph(const Graph &g) {
  std::vector<std::string> out;
  for (const auto &d : verifyGraphDiagnostics(g)) out.push_back(d.str());
  return out;
}

void verifyOrThrow(const Graph &g) {
  auto diags = verifyGraphDiagnostics(g);
  if (!diags.empty()) throw VerifyError(diags[0].op, diags[0].message);
}

} // namespace xjit
