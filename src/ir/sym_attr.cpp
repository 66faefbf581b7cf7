// Symbolic size attributes: which slots accept them, their string storage, and evaluation under
// the symbols the graph inputs bind (include/xjit/ir/sym_attr.h).
#include "xjit/ir/sym_attr.h"

#include "xjit/ir/op_registry.h"

#include <map>
#include <set>
#include <utility>

namespace xjit {
namespace {

using Slot = std::pair<std::string_view, std::string_view>;

const std::map<Slot, SizeSlotForm> &slots() {
  static const std::map<Slot, SizeSlotForm> table = [] {
    std::map<Slot, SizeSlotForm> t;
    for (std::string_view a : {"start", "end"}) {
      t[{"slice", a}] = SizeSlotForm::Dim;
      t[{"arange", a}] = SizeSlotForm::Dim;
    }
    for (std::string_view op : {"expand", "reshape", "view", "full", "zeros", "ones", "empty",
                                "new_full", "new_zeros", "new_ones", "new_empty"})
      t[{op, "shape"}] = SizeSlotForm::Dims;
    t[{"narrow", "start"}] = SizeSlotForm::Dim;
    t[{"narrow", "length"}] = SizeSlotForm::Dim;
    t[{"repeat", "repeats"}] = SizeSlotForm::Dims;
    t[{"unflatten", "sizes"}] = SizeSlotForm::Dims;
    t[{"split_with_sizes", "split_sizes"}] = SizeSlotForm::Dims;
    return t;
  }();
  return table;
}

std::optional<Shape> parseDimList(std::string_view text) {
  if (text.size() < 2 || text.front() != '[' || text.back() != ']') return std::nullopt;
  text = text.substr(1, text.size() - 2);
  Shape out;
  if (text.find_first_not_of(" \t") == std::string_view::npos) return out;
  for (;;) {
    size_t comma = text.find(',');
    auto d = parseDimExpr(text.substr(0, comma));
    if (!d) return std::nullopt;
    out.push_back(*d);
    if (comma == std::string_view::npos) return out;
    text = text.substr(comma + 1);
  }
}

[[noreturn]] void unbound(const Op &op, const std::string &attr, const std::string &text) {
  throw KernelError("symbolic size '" + attr + " = " + text + "' of '" + op.name() +
                    "' names a symbol the graph inputs do not bind");
}

} // namespace

SizeSlotForm symbolicSizeSlot(std::string_view op, std::string_view attr) {
  auto it = slots().find({op, attr});
  return it == slots().end() ? SizeSlotForm::None : it->second;
}

Attr makeSizeAttr(const DimExpr &d) {
  if (d.isStatic()) return Attr(d.value());
  return Attr(d.str());
}

Attr makeSizeAttr(const Shape &dims) {
  if (isStaticShape(dims)) {
    Attr::Ints v;
    for (const DimExpr &d : dims)
      v.push_back(d.value());
    return Attr(std::move(v));
  }
  return Attr(shapeStr(dims));
}

std::optional<Shape> symbolicDims(const Attr &a, SizeSlotForm form) {
  if (a.kind() != AttrKind::Str || form == SizeSlotForm::None) return std::nullopt;
  if (form == SizeSlotForm::Dims) return parseDimList(a.asStr());
  auto d = parseDimExpr(a.asStr());
  if (!d) return std::nullopt;
  return Shape{*d};
}

bool isSymbolicSize(const Op &op, std::string_view name) {
  const Attr *a = op.attrOrNull(name);
  return a && a->kind() == AttrKind::Str && symbolicSizeSlot(op.name(), name) != SizeSlotForm::None;
}

bool hasSymbolicSizes(const Op &op) {
  for (const auto &[name, value] : op.attrs())
    if (value.kind() == AttrKind::Str && symbolicSizeSlot(op.name(), name) != SizeSlotForm::None)
      return true;
  return false;
}

std::optional<DimExpr> sizeAttrDim(const Op &op, std::string_view name) {
  const Attr *a = op.attrOrNull(name);
  if (!a) return std::nullopt;
  if (a->kind() == AttrKind::Int) return DimExpr(a->asInt());
  if (auto dims = symbolicDims(*a, symbolicSizeSlot(op.name(), name)); dims && dims->size() == 1)
    return dims->front();
  return std::nullopt;
}

std::optional<Shape> sizeAttrDims(const Op &op, std::string_view name) {
  const Attr *a = op.attrOrNull(name);
  if (!a) return std::nullopt;
  if (a->kind() == AttrKind::Ints) {
    Shape s;
    for (int64_t v : a->asInts())
      s.push_back(DimExpr(v));
    return s;
  }
  return symbolicDims(*a, symbolicSizeSlot(op.name(), name));
}

std::vector<std::string> symbolicSizeSymbols(const Op &op) {
  std::set<std::string> names;
  for (const auto &[name, value] : op.attrs())
    if (auto dims = symbolicDims(value, symbolicSizeSlot(op.name(), name)))
      for (const DimExpr &d : *dims)
        for (std::string &s : d.symbols())
          names.insert(std::move(s));
  return {names.begin(), names.end()};
}

ResolvedOp::ResolvedOp(const Op &op, const SymbolBindings &bindings)
    : original_(op), bindings_(bindings) {
  AttrMap attrs = op.attrs();
  for (auto &[name, value] : attrs) {
    SizeSlotForm form = symbolicSizeSlot(op.name(), name);
    auto dims = symbolicDims(value, form);
    if (!dims) continue;
    Attr::Ints values;
    for (const DimExpr &d : *dims) {
      auto v = d.evaluate(bindings);
      if (!v) unbound(op, name, value.asStr());
      values.push_back(*v);
    }
    value = form == SizeSlotForm::Dim ? Attr(values.at(0)) : Attr(std::move(values));
  }
  std::vector<Value *> operands;
  for (Value *v : op.operands())
    operands.push_back(placeholders_.addArgument(v->type()));
  std::vector<Type> resultTypes;
  for (const auto &r : op.results())
    resultTypes.push_back(r->type());
  op_ = std::make_unique<Op>(&op.def(), std::move(operands), std::move(resultTypes),
                             std::move(attrs), op.loc());
}

ResolvedOp::~ResolvedOp() = default;

void ResolvedOp::checkResults(const std::vector<RtValue> &results) const {
  for (size_t i = 0; i < results.size() && i < original_.numResults(); ++i) {
    const Type &t = original_.result(i)->type();
    if (!t.isTensor() || !results[i].isTensor()) continue;
    const std::vector<int64_t> &sizes = results[i].tensor().sizes();
    if (sizes.size() != t.shape().size()) continue; // the interpreter's type check reports it
    for (size_t d = 0; d < sizes.size(); ++d) {
      auto expected = t.shape()[d].evaluate(bindings_);
      if (expected && *expected != sizes[d])
        throw KernelError("result has size " + std::to_string(sizes[d]) + " at dim " +
                          std::to_string(d) + " where its type " + t.str() + " says " +
                          t.shape()[d].str() + " = " + std::to_string(*expected) +
                          ": a symbolic size is out of the range the graph assumes");
    }
  }
}

bool bindShapeSymbols(const Shape &t, const std::vector<int64_t> &sizes, SymbolBindings &b) {
  for (size_t d = 0; d < t.size() && d < sizes.size(); ++d) {
    auto syms = t[d].symbols();
    if (syms.size() != 1 || t[d] != DimExpr::symbol(syms[0])) continue;
    auto [it, inserted] = b.emplace(syms[0], sizes[d]);
    if (!inserted && it->second != sizes[d]) return false;
  }
  return true;
}

} // namespace xjit
