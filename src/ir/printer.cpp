// Writes graphs as IR text (format: docs/ir.md).
//
// Value names: a value keeps its name hint when the hint is unique in the
// graph; every other value gets the next free number. All hints are collected
// before numbering so a number never collides with a kept hint. The parser
// stores printed names as hints, so printing parsed text reproduces it exactly.
#include "xjit/ir/printer.h"

#include "lexer.h"
#include "xjit/ir/op_registry.h"
#include "xjit/ir/sym_attr.h"

#include <sstream>
#include <unordered_map>
#include <unordered_set>

namespace xjit {
namespace {

/// An attribute as the text format writes it; a symbolic size is written bare, as its dims
/// (`s0+1`, `[1, s0]`), like an int or int list.
std::string attrText(const Op &op, const std::string &name, const Attr &v) {
  SizeSlotForm form = symbolicSizeSlot(op.name(), name);
  auto dims = symbolicDims(v, form);
  if (!dims) return v.str();
  if (form == SizeSlotForm::Dim) return dims->front().str();
  std::string s = "[";
  for (size_t i = 0; i < dims->size(); ++i)
    s += (i ? ", " : "") + (*dims)[i].str();
  return s + "]";
}

/// A hint reduced to the characters a value name may hold.
std::string sanitize(const std::string &hint) {
  std::string s = hint;
  for (char &c : s)
    if (!text::isValueName(std::string_view(&c, 1))) c = '_';
  return s;
}

/// Names of values. A "unit" is what carries one name: a block argument, a
/// single result, or all results of a multi-result op (printed %m:2, used as
/// %m#0, %m#1).
class Namer {
public:
  /// Names every value defined in `blocks` (and below).
  void assign(const std::vector<const Block *> &blocks) {
    for (const Block *b : blocks)
      collect(b);
    for (const auto &[hint, n] : hintCount_)
      taken_.insert(hint);
    for (const Block *b : blocks)
      number(b);
  }

  /// "%x", "%m#1"; values defined outside the named blocks get a local guess.
  std::string ref(const Value *v) {
    if (!v) return "%<null>";
    const Op *op = v->definingOp();
    if (op && op->numResults() > 1) return "%" + unitName(op) + "#" + std::to_string(v->index());
    return "%" + unitName(v);
  }
  /// The result part of an op line: "%x" or "%m:2".
  std::string results(const Op &op) {
    if (op.numResults() == 1) return "%" + unitName(op.result(0));
    return "%" + unitName(&op) + ":" + std::to_string(op.numResults());
  }

private:
  static const void *unitOf(const Value *v) {
    const Op *op = v->definingOp();
    return op && op->numResults() > 1 ? static_cast<const void *>(op) : v;
  }
  static std::string hintOf(const Value *v) { return sanitize(v->name()); }

  void collect(const Block *b) {
    for (const auto &a : b->arguments())
      count(a.get());
    for (const Op *op : *b) {
      if (op->numResults() > 0) count(op->result(0));
      for (size_t r = 0; r < op->numRegions(); ++r)
        collect(op->region(r));
    }
  }
  void count(const Value *v) {
    collected_.insert(unitOf(v));
    ++hintCount_[hintOf(v)];
  }

  void number(const Block *b) {
    for (const auto &a : b->arguments())
      unitName(a.get());
    for (const Op *op : *b) {
      if (op->numResults() > 0) unitName(op->result(0));
      for (size_t r = 0; r < op->numRegions(); ++r)
        number(op->region(r));
    }
  }

  std::string unitName(const Value *v) { return unitNameOf(unitOf(v), v); }
  std::string unitName(const Op *op) { return unitNameOf(op, op->result(0)); }

  std::string unitNameOf(const void *unit, const Value *first) {
    if (auto it = names_.find(unit); it != names_.end()) return it->second;
    std::string hint = hintOf(first), name;
    // A value from outside the named blocks (printOp's operands) keeps its hint
    // only if free.
    bool keep =
        !hint.empty() && (collected_.count(unit) ? hintCount_[hint] == 1 : !taken_.count(hint));
    if (keep) {
      name = hint;
    } else {
      do
        name = std::to_string(next_++);
      while (taken_.count(name));
    }
    taken_.insert(name);
    return names_.emplace(unit, name).first->second;
  }

  std::unordered_set<const void *> collected_;
  std::unordered_map<std::string, int> hintCount_;
  std::unordered_set<std::string> taken_;
  std::unordered_map<const void *, std::string> names_;
  int next_ = 0;
};

class Printer {
public:
  Printer(std::ostream &os, const PrintOptions &opts) : os_(os), opts_(opts) {}

  void graph(const Graph &g) {
    namer_.assign({g.body()});
    os_ << "graph @" << (text::isIdentifier(g.name()) ? g.name() : text::quoteString(g.name()));
    arguments(*g.body());
    os_ << " -> (";
    // Only a final `return` declares the results (the verifier insists on one).
    const Op *ret = g.body()->back();
    if (ret && ret->name() == "return")
      for (size_t i = 0; i < ret->numOperands(); ++i)
        os_ << (i ? ", " : "") << typeOf(ret->operand(i));
    os_ << ") {\n";
    ops(*g.body(), 2);
    os_ << "}\n";
  }

  void singleOp(const Op &op) {
    std::vector<const Block *> regions;
    for (size_t r = 0; r < op.numRegions(); ++r)
      regions.push_back(op.region(r));
    namer_.assign(regions);
    this->op(op, 0, false);
  }

private:
  static std::string typeOf(const Value *v) { return v ? v->type().str() : "none"; }

  void arguments(const Block &b) {
    os_ << "(";
    for (size_t i = 0; i < b.numArguments(); ++i) {
      const Value *a = b.argument(i);
      os_ << (i ? ", " : "") << namer_.ref(a) << ": " << a->type().str();
      if (a->unitDimHint() >= 0) os_ << " {unit_dim = " << a->unitDimHint() << "}";
    }
    os_ << ")";
  }

  void ops(const Block &b, int indent) {
    for (const Op *o : b)
      op(*o, indent, true);
  }

  bool printsLoc(const Op &op) const { return opts_.printLocations && !(op.loc() == SourceLoc{}); }

  void op(const Op &op, int indent, bool newline) {
    os_ << std::string(indent, ' ');
    if (op.numResults() > 0) os_ << namer_.results(op) << " = ";
    os_ << op.name() << "(";
    for (size_t i = 0; i < op.numOperands(); ++i)
      os_ << (i ? ", " : "") << namer_.ref(op.operand(i));
    os_ << ")";
    if (!op.attrs().empty()) {
      os_ << " {";
      bool first = true;
      for (const auto &[k, v] : op.attrs()) {
        os_ << (first ? "" : ", ") << (text::isIdentifier(k) ? k : text::quoteString(k)) << " = "
            << attrText(op, k, v);
        first = false;
      }
      os_ << "}";
    } else if (op.numResults() == 0 && !printsLoc(op) && op.numRegions() > 0 &&
               op.region(0)->empty() && op.region(0)->numArguments() == 0) {
      // An empty region right after ')' would read as an empty attribute
      // dictionary.
      os_ << " {}";
    }
    if (op.numResults() > 0) {
      os_ << " : ";
      for (size_t i = 0; i < op.numResults(); ++i)
        os_ << (i ? ", " : "") << op.result(i)->type().str();
    }
    if (printsLoc(op))
      os_ << " loc(" << text::quoteString(op.loc().file) << ":" << op.loc().line << " "
          << text::quoteString(op.loc().function) << ")";
    for (size_t r = 0; r < op.numRegions(); ++r) {
      const Block &b = *op.region(r);
      os_ << " {\n";
      if (b.numArguments() > 0) {
        os_ << std::string(indent, ' ') << "^";
        arguments(b);
        os_ << ":\n";
      }
      ops(b, indent + 2);
      os_ << std::string(indent, ' ') << "}";
    }
    if (newline) os_ << "\n";
  }

  std::ostream &os_;
  PrintOptions opts_;
  Namer namer_;
};

} // namespace

void printGraph(std::ostream &os, const Graph &g, const PrintOptions &opts) {
  Printer(os, opts).graph(g);
}

std::string printGraph(const Graph &g, const PrintOptions &opts) {
  std::ostringstream os;
  printGraph(os, g, opts);
  return os.str();
}

std::string printOp(const Op &op) {
  std::ostringstream os;
  Printer(os, PrintOptions{}).singleOp(op);
  return os.str();
}

} // namespace xjit
