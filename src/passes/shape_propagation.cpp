// Shape propagation: pins the shape symbols that broadcasting assumes equal to a static dim or
// to another symbol (and those the `bind` option specializes), then re-infers with the registry
// every type downstream of a refined one, through if results and loop-carried values.
#include "passes.h"

#include "xjit/ir/diagnostics.h"
#include "xjit/ir/op_registry.h"
#include "xjit/ir/sym_attr.h"

#include <cctype>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

namespace xjit::passes {
namespace {

using Pins = std::map<std::string, DimExpr, std::less<>>;

/// The bare symbol a dim is, or "".
std::string bareSymbol(const DimExpr &d) {
  if (d.isStatic()) return "";
  auto syms = d.symbols();
  return syms.size() == 1 && d == DimExpr::symbol(syms[0]) ? syms[0] : "";
}

Pins parseBindings(const std::string &text) {
  Pins pins;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find_first_of(";,", start);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(start, end - start);
    start = end + 1;
    if (item.empty()) continue;
    size_t eq = item.find('=');
    std::string name = item.substr(0, eq);
    if (eq == std::string::npos || name.empty() || !(std::isalpha(name[0]) || name[0] == '_'))
      throw Error(ErrorKind::User,
                  "shape-propagation: bind expects symbol=value, got '" + item + "'");
    auto value = parseDimExpr(item.substr(eq + 1));
    if (!value || (value->isStatic() && value->value() < 0))
      throw Error(ErrorKind::User, "shape-propagation: invalid value in '" + item + "'");
    pins[name] = *value;
  }
  return pins;
}

/// Rewrites dims with pinned symbols replaced (through the canonical text, so the result is
/// canonical again).
class Substitution {
public:
  explicit Substitution(const Pins &pins) : pins_(pins) {}

  DimExpr dim(const DimExpr &d) {
    if (d.isStatic()) return d;
    std::string text = d.str();
    auto it = cache_.find(text);
    if (it != cache_.end()) return it->second;
    std::string out;
    for (size_t i = 0; i < text.size();) {
      if (std::isalpha(static_cast<unsigned char>(text[i])) || text[i] == '_') {
        size_t j = i;
        while (j < text.size() &&
               (std::isalnum(static_cast<unsigned char>(text[j])) || text[j] == '_'))
          ++j;
        std::string name = text.substr(i, j - i);
        auto p = pins_.find(name);
        out += p == pins_.end() ? name : "(" + p->second.str() + ")";
        i = j;
      } else {
        out += text[i++];
      }
    }
    std::string error;
    auto parsed = parseDimExpr(out, &error);
    if (!parsed) throw std::runtime_error("cannot substitute in " + text + ": " + error);
    return cache_.emplace(text, *parsed).first->second;
  }

  Type type(const Type &t) {
    switch (t.kind()) {
    case TypeKind::Tensor: {
      Shape s;
      for (const DimExpr &d : t.shape())
        s.push_back(dim(d));
      return t.withShape(std::move(s));
    }
    case TypeKind::Tuple: {
      std::vector<Type> elems;
      for (const Type &e : t.elements())
        elems.push_back(type(e));
      return Type::tuple(std::move(elems));
    }
    case TypeKind::List: return Type::list(type(t.elementType()));
    default: return t;
    }
  }

private:
  const Pins &pins_;
  std::unordered_map<std::string, DimExpr> cache_;
};

/// Symbols that broadcasting in elementwise ops assumes equal to a static non-1 dim, or to
/// another symbol (ops::broadcastShapes keeps the static / first one): symbols broadcast
/// together form a class; a class with one static size is pinned to it, one without is merged
/// into its first symbol, and one with two sizes is left alone (no value for it can run).
Pins broadcastPins(const Graph &g) {
  std::map<std::string, std::string> parent;
  std::map<std::string, std::set<int64_t>> sizes;
  auto find = [&](std::string s) {
    parent.try_emplace(s, s);
    while (parent[s] != s)
      s = parent[s] = parent[parent[s]];
    return s;
  };
  // Representatives are the shortest, then smallest names: s0 before s1 before s10.
  auto before = [](const std::string &a, const std::string &b) {
    return a.size() != b.size() ? a.size() < b.size() : a < b;
  };
  auto unite = [&](const std::string &a, const std::string &b) {
    std::string ra = find(a), rb = find(b);
    if (ra == rb) return;
    if (before(rb, ra)) std::swap(ra, rb);
    parent[rb] = ra;
  };
  g.walk([&](Op *op) {
    if (!op->def().has(kElementwise)) return;
    std::vector<const Shape *> shapes;
    size_t rank = 0;
    for (Value *v : op->operands())
      if (v->type().isTensor()) {
        shapes.push_back(&v->type().shape());
        rank = std::max(rank, v->type().shape().size());
      }
    if (shapes.size() < 2) return;
    bool same = true; // the usual case: equal shapes assume nothing
    for (const Shape *sh : shapes)
      same &= *sh == *shapes[0];
    if (same) return;
    for (size_t k = 1; k <= rank; ++k) { // k-th dim from the right
      std::set<int64_t> fixed;
      std::vector<std::string> syms;
      bool compound = false;
      for (const Shape *s : shapes) {
        if (s->size() < k) continue;
        const DimExpr &d = (*s)[s->size() - k];
        if (auto v = d.staticValue()) {
          if (*v != 1) fixed.insert(*v);
        } else if (std::string b = bareSymbol(d); !b.empty()) {
          syms.push_back(b);
        } else {
          compound = true; // an expression such as s0*2: not solved here
        }
      }
      if (compound || syms.empty() || (syms.size() == 1 && fixed.empty())) continue;
      for (const std::string &s : syms) {
        unite(syms[0], s);
        sizes[s].insert(fixed.begin(), fixed.end());
      }
    }
  });
  std::map<std::string, std::set<int64_t>> classSizes;
  for (const auto &[s, vs] : sizes)
    classSizes[find(s)].insert(vs.begin(), vs.end());
  Pins pins;
  for (const auto &[s, p] : parent) {
    std::string root = find(s);
    const auto &vs = classSizes[root];
    if (vs.size() == 1)
      pins.emplace(s, DimExpr(*vs.begin()));
    else if (vs.empty() && root != s)
      pins.emplace(s, DimExpr::symbol(root));
  }
  return pins;
}

class Propagator {
public:
  explicit Propagator(PassContext &ctx) : ctx_(ctx) {}

  /// Sets a value's type, remembering the old one for rollback.
  void setType(Value *v, Type t) {
    if (v->type() == t) return;
    if (!changedValues_.count(v)) {
      changedValues_.insert(v);
      undo_.emplace_back(v, v->type());
    }
    v->setType(std::move(t));
  }

  void substitute(Graph &g, const Pins &pins) {
    Substitution sub(pins);
    auto block = [&](auto &self, Block *b) -> void {
      for (const auto &a : b->arguments())
        setType(a.get(), sub.type(a->type()));
      for (Op *op : *b) {
        for (const auto &r : op->results())
          setType(r.get(), sub.type(r->type()));
        // Symbolic sizes in attributes (docs/ir.md) name the same symbols as the types.
        std::vector<std::pair<std::string, Attr>> updates;
        for (const auto &[name, value] : op->attrs()) {
          SizeSlotForm form = symbolicSizeSlot(op->name(), name);
          auto dims = symbolicDims(value, form);
          if (!dims) continue;
          for (DimExpr &d : *dims)
            d = sub.dim(d);
          Attr next = form == SizeSlotForm::Dim ? makeSizeAttr(dims->front()) : makeSizeAttr(*dims);
          if (next != value) updates.emplace_back(name, std::move(next));
        }
        for (auto &[name, next] : updates) {
          attrUndo_.emplace_back(op, name, op->attr(name));
          op->setAttr(name, std::move(next));
        }
        for (size_t i = 0; i < op->numRegions(); ++i)
          self(self, op->region(i));
      }
    };
    block(block, g.body());
  }

  /// Re-infers the block's ops in order. Throws on an inconsistency.
  void infer(Block *b) {
    for (Op *op : *b) {
      const std::string &name = op->name();
      if (name == "loop") {
        Block *body = op->region(0);
        for (size_t i = 0; i + 2 < op->numOperands() && i + 1 < body->numArguments(); ++i)
          setType(body->argument(i + 1), op->operand(i + 2)->type());
        infer(body);
        Op *y = body->terminator();
        for (size_t i = 0; i < op->numResults(); ++i) {
          const Type &carried = op->operand(i + 2)->type();
          if (y && i + 1 < y->numOperands() && y->operand(i + 1)->type() != carried)
            throw std::runtime_error(op->describe() + ": carried value " + std::to_string(i) +
                                     " changes type in the body");
          setType(op->result(i), carried);
        }
      } else if (name == "if") {
        infer(op->region(0));
        infer(op->region(1));
        Op *a = op->region(0)->terminator(), *b2 = op->region(1)->terminator();
        for (size_t i = 0; a && b2 && i < op->numResults(); ++i)
          if (i < a->numOperands() && i < b2->numOperands() &&
              a->operand(i)->type() == b2->operand(i)->type())
            setType(op->result(i), a->operand(i)->type());
      } else {
        for (size_t i = 0; i < op->numRegions(); ++i)
          infer(op->region(i));
        // Inference is a function of operand types: in a verified graph only ops that read
        // (or produce) a refined type can infer something new.
        if (!op->def().infer || !touched(op)) continue;
        std::vector<Type> types = op->def().infer(*op);
        if (types.size() != op->numResults())
          throw std::runtime_error(op->describe() + ": inference gives a different arity");
        for (size_t i = 0; i < types.size(); ++i)
          setType(op->result(i), std::move(types[i]));
      }
    }
  }

  bool touched(const Op *op) const {
    if (changedValues_.empty()) return false;
    for (const Value *v : op->operands())
      if (changedValues_.count(v)) return true;
    for (const auto &r : op->results())
      if (changedValues_.count(r.get())) return true;
    return false;
  }

  void rollback() {
    for (auto it = undo_.rbegin(); it != undo_.rend(); ++it)
      it->first->setType(it->second);
    for (auto it = attrUndo_.rbegin(); it != attrUndo_.rend(); ++it)
      std::get<0>(*it)->setAttr(std::get<1>(*it), std::get<2>(*it));
    attrUndo_.clear();
    undo_.clear();
    changedValues_.clear();
  }

  void commit() {
    if (!changedValues_.empty())
      ctx_.count("types-refined", static_cast<int64_t>(changedValues_.size()));
    undo_.clear();
    attrUndo_.clear();
    changedValues_.clear();
  }

  bool any() const { return !undo_.empty() || !attrUndo_.empty(); }

private:
  PassContext &ctx_;
  std::vector<std::pair<Value *, Type>> undo_;
  std::vector<std::tuple<Op *, std::string, Attr>> attrUndo_; // symbolic sizes substituted
  std::unordered_set<const Value *> changedValues_;
};

} // namespace

bool runShapePropagation(Graph &g, PassContext &ctx) {
  Pins pins = parseBindings(ctx.option("bind"));
  bool changed = false;
  // Each round pins what the current types assume; refined types can expose more.
  for (int round = 0; round < 16; ++round) {
    if (round > 0 || pins.empty()) pins = broadcastPins(g);
    Propagator p(ctx);
    try {
      if (!pins.empty()) p.substitute(g, pins);
      p.infer(g.body());
    } catch (const std::exception &) {
      // Inference rejects the refined graph (the pins contradict an op): keep the types.
      p.rollback();
      break;
    }
    bool any = p.any();
    if (any) ctx.count("symbols-pinned", static_cast<int64_t>(pins.size()));
    p.commit();
    changed |= any;
    if (!any) break;
  }
  return changed;
}

} // namespace xjit::passes
