// Recursive-descent parser for the IR text format (grammar: docs/ir.md).
//
// Values may be used before the line that defines them (the verifier, not the
// parser, reports uses that are not dominated by their definition): such a use
// gets a placeholder value that is replaced by the real one when its definition
// is parsed. Names are unique within a graph.
#include "xjit/ir/parser.h"

#include "lexer.h"
#include "xjit/ir/op_registry.h"
#include "xjit/ir/sym_attr.h"

#include <cmath>
#include <limits>
#include <map>
#include <unordered_map>

namespace xjit {
namespace {

using text::Lexer;
using text::Tok;
using text::Token;

// Bounds recursion (nested types, regions, dense literals) so hostile input
// cannot overflow the stack.
constexpr int kMaxNesting = 256;

std::string typeListStr(const std::vector<Type> &ts) {
  std::string s = "(";
  for (size_t i = 0; i < ts.size(); ++i)
    s += (i ? ", " : "") + ts[i].str();
  return s + ")";
}

class Parser {
public:
  Parser(std::string_view src, std::string_view filename, TextPositions *positions)
      : lex_(src, std::string(filename)), positions_(positions) {}

  std::vector<std::unique_ptr<Graph>> parseModule() {
    std::vector<std::unique_ptr<Graph>> graphs;
    while (lex_.peek().kind != Tok::Eof)
      graphs.push_back(parseGraph());
    return graphs;
  }

  std::unique_ptr<Graph> parseSingleGraph() {
    auto g = parseGraph();
    if (lex_.peek().kind != Tok::Eof) expected("end of input after the graph", lex_.peek());
    return g;
  }

  Type parseTypeOnly() {
    Type t = parseType();
    if (lex_.peek().kind != Tok::Eof) expected("end of input after the type", lex_.peek());
    return t;
  }

private:
  // ---- errors and token helpers ----
  [[noreturn]] void errorAt(const Token &t, const std::string &msg) const {
    lex_.error(t.offset, msg);
  }
  [[noreturn]] void expected(const std::string &what, const Token &found) const {
    errorAt(found, "expected " + what + ", found " + Lexer::describe(found));
  }
  Token expect(char punct, const std::string &context) {
    if (!lex_.peek().is(punct)) expected(std::string("'") + punct + "' " + context, lex_.peek());
    return lex_.next();
  }
  bool consumeIf(char punct) {
    if (!lex_.peek().is(punct)) return false;
    lex_.next();
    return true;
  }
  std::string lineOf(size_t offset) const {
    return "line " + std::to_string(lex_.lineCol(offset).first);
  }

  struct Nest {
    explicit Nest(Parser &p) : p(p) {
      if (++p.depth_ > kMaxNesting) p.lex_.error(p.lex_.peek().offset, "nesting too deep");
    }
    ~Nest() { --p.depth_; }
    Parser &p;
  };

  // ---- graphs, blocks, ops ----
  std::unique_ptr<Graph> parseGraph() {
    Token kw = lex_.next();
    if (!kw.isIdent("graph")) expected("'graph'", kw);
    expect('@', "before the graph name");
    Token name = lex_.next();
    if (name.kind != Tok::Ident && name.kind != Tok::String) expected("a graph name", name);
    auto g = std::make_unique<Graph>(name.kind == Tok::String ? name.str : std::string(name.text));
    if (positions_) positions_->graphs[g.get()] = position(kw.offset);
    defs_.clear();
    pending_.clear();

    expect('(', "before the graph arguments");
    parseArguments(g->body());
    Token arrow = lex_.next();
    if (arrow.kind != Tok::Arrow) expected("'->' after the graph arguments", arrow);
    expect('(', "before the graph result types");
    std::vector<Type> outputs;
    if (!consumeIf(')')) {
      do
        outputs.push_back(parseType());
      while (consumeIf(','));
      expect(')', "after the graph result types");
    }
    parseBlockBody(g->body());
    resolveUndefined();

    Op *ret = g->body()->back();
    if (ret && ret->name() == "return") {
      std::vector<Type> returned;
      for (Value *v : ret->operands())
        returned.push_back(v->type());
      if (returned != outputs)
        errorAt(arrow, "graph @" + g->name() + " declares result types " + typeListStr(outputs) +
                           " but its return has " + typeListStr(returned));
    }
    return g;
  }

  /// `(%a: T, ...)` after the '(' has been consumed; adds the arguments to
  /// `block`.
  void parseArguments(Block *block) {
    if (consumeIf(')')) return;
    for (;;) {
      Token name = lex_.next();
      if (name.kind != Tok::ValueRef || name.resultIndex >= 0)
        expected("an argument name such as '%x'", name);
      expect(':', "after the argument name");
      Type t = parseType();
      Value *arg = block->addArgument(t, name.str);
      if (consumeIf('{')) { // `{unit_dim = d}`: the layout hint (Value::unitDimHint)
        Token key = lex_.next();
        if (!key.isIdent("unit_dim")) expected("'unit_dim' in an argument's attributes", key);
        expect('=', "after 'unit_dim'");
        Token d = lex_.next();
        if (d.kind != Tok::Int) expected("a dim number after 'unit_dim ='", d);
        if (!t.isTensor() || d.intValue < 0 || d.intValue >= t.rank())
          errorAt(d, "unit_dim " + std::to_string(d.intValue) + " is not a dim of " + t.str());
        arg->setUnitDimHint(int(d.intValue));
        expect('}', "after the argument's attributes");
      }
      define(name, {arg}, false);
      if (consumeIf(',')) continue;
      if (consumeIf(')')) return;
      expected("',' or ')' after an argument", lex_.peek());
    }
  }

  /// `{ op* }`: the graph body, or a region after its optional `^(args):`
  /// header.
  void parseBlockBody(Block *block) {
    Token open = expect('{', "to start a block");
    parseOps(block, open);
  }

  void parseOps(Block *block, const Token &open) {
    Nest nest(*this);
    while (!lex_.peek().is('}')) {
      if (lex_.peek().kind == Tok::Eof)
        expected("'}' to close the block opened at " + lineOf(open.offset), lex_.peek());
      parseOp(block);
    }
    lex_.next();
  }

  void parseRegion(Block *block) {
    Token open = expect('{', "to start a region");
    if (consumeIf('^')) {
      expect('(', "after '^'");
      parseArguments(block);
      expect(':', "after the block arguments");
    }
    parseOps(block, open);
  }

  void parseOp(Block *block) {
    Token first = lex_.peek();
    Token result;
    size_t numResults = 0;
    bool group = false;
    if (first.kind == Tok::ValueRef) {
      result = lex_.next();
      if (result.resultIndex >= 0)
        errorAt(result,
                "a result name takes no '#N'; write '%" + result.str + ":N' to define N results");
      numResults = 1;
      if (consumeIf(':')) {
        Token n = lex_.next();
        if (n.kind != Tok::Int) expected("a result count after ':'", n);
        if (n.intValue < 1 || n.intValue > 4096) errorAt(n, "result count must be in 1..4096");
        numResults = static_cast<size_t>(n.intValue);
        group = true;
      }
      expect('=', "after the result name");
    }

    Token opName = lex_.next();
    if (opName.kind != Tok::Ident) expected("an op name", opName);
    const OpDef *def = OpRegistry::instance().lookup(opName.text);
    if (!def) errorAt(opName, "unknown op '" + std::string(opName.text) + "'");

    expect('(', "after the op name");
    std::vector<Value *> operands;
    if (!consumeIf(')')) {
      for (;;) {
        Token u = lex_.next();
        if (u.kind != Tok::ValueRef) expected("an operand such as '%x'", u);
        operands.push_back(use(u));
        if (consumeIf(',')) continue;
        if (consumeIf(')')) break;
        expected("')' after operands", lex_.peek());
      }
    }

    AttrMap attrs;
    if (lex_.peek().is('{') && (lex_.peek(1).is('}') || ((lex_.peek(1).kind == Tok::Ident ||
                                                          lex_.peek(1).kind == Tok::String) &&
                                                         lex_.peek(2).is('='))))
      attrs = parseAttrDict(*def);

    std::vector<Type> types;
    if (lex_.peek().is(':')) {
      Token colon = lex_.next();
      if (numResults == 0)
        errorAt(colon, "'" + def->name + "' has no result names, so it takes no result types");
      do
        types.push_back(parseType());
      while (consumeIf(','));
      if (types.size() != numResults)
        errorAt(colon, "expected " + std::to_string(numResults) + " result type" +
                           (numResults == 1 ? "" : "s") + " for '%" + result.str + "', found " +
                           std::to_string(types.size()));
    } else if (numResults > 0) {
      expected("':' and the result types of '%" + result.str + "'", lex_.peek());
    }

    SourceLoc loc;
    if (lex_.peek().isIdent("loc")) loc = parseLoc();

    Op *op = block->push_back(std::make_unique<Op>(def, std::move(operands), std::move(types),
                                                   std::move(attrs), std::move(loc)));
    if (positions_) positions_->ops[op] = position(first.offset);
    // The op was created with its OpDef's number of regions; the text must fill
    // each one.
    size_t numRegions = 0;
    for (; lex_.peek().is('{'); ++numRegions) {
      if (numRegions == op->numRegions())
        errorAt(lex_.peek(), "'" + def->name + "' takes " + std::to_string(op->numRegions()) +
                                 " region" + (op->numRegions() == 1 ? "" : "s") + ", found more");
      parseRegion(op->region(numRegions));
    }
    if (numRegions < op->numRegions())
      expected("'{' to start region " + std::to_string(numRegions) + " of '" + def->name + "'",
               lex_.peek());

    if (numResults > 0) {
      std::vector<Value *> values;
      for (const auto &r : op->results()) {
        r->setName(result.str);
        values.push_back(r.get());
      }
      define(result, std::move(values), group);
    }
  }

  SourceLoc parseLoc() {
    lex_.next(); // loc
    expect('(', "after 'loc'");
    SourceLoc loc;
    Token file = lex_.next();
    if (file.kind != Tok::String) expected("a file name string in loc(...)", file);
    loc.file = file.str;
    expect(':', "after the file name in loc(...)");
    Token line = lex_.next();
    if (line.kind != Tok::Int) expected("a line number in loc(...)", line);
    if (line.intValue < 0 || line.intValue > std::numeric_limits<int>::max())
      errorAt(line, "line number out of range");
    loc.line = static_cast<int>(line.intValue);
    Token fn = lex_.next();
    if (fn.kind != Tok::String) expected("a function name string in loc(...)", fn);
    loc.function = fn.str;
    expect(')', "to close loc(...)");
    return loc;
  }

  // ---- values ----
  struct Def {
    std::vector<Value *> values;
    bool group; // defined as %name:N, used as %name#i
    size_t offset;
  };
  struct Pending {
    Value *placeholder;
    Token firstUse;
  };

  /// The value a reference names; checks '#i' against the definition's arity.
  Value *pick(const Def &d, const Token &u) const {
    if (d.group) {
      if (u.resultIndex < 0)
        errorAt(u, "'%" + u.str + "' has " + std::to_string(d.values.size()) +
                       " results; refer to one as '%" + u.str + "#0'");
      if (static_cast<size_t>(u.resultIndex) >= d.values.size())
        errorAt(u, "result index #" + std::to_string(u.resultIndex) + " out of range: '%" + u.str +
                       "' has " + std::to_string(d.values.size()) + " results");
      return d.values[u.resultIndex];
    }
    if (u.resultIndex >= 0)
      errorAt(u, "'%" + u.str + "' is a single value; '#" + std::to_string(u.resultIndex) +
                     "' only applies to results defined as '%name:N'");
    return d.values[0];
  }

  Value *use(const Token &u) {
    if (auto it = defs_.find(u.str); it != defs_.end()) return pick(it->second, u);
    auto &forName = pending_[u.str];
    auto it = forName.find(u.resultIndex);
    if (it == forName.end())
      it = forName.emplace(u.resultIndex, Pending{forward_.addArgument(Type()), u}).first;
    return it->second.placeholder;
  }

  void define(const Token &name, std::vector<Value *> values, bool group) {
    if (auto it = defs_.find(name.str); it != defs_.end())
      errorAt(name, "redefinition of '%" + name.str + "' (first defined at " +
                        lineOf(it->second.offset) + ")");
    const Def &d =
        defs_.emplace(name.str, Def{std::move(values), group, name.offset}).first->second;
    if (auto it = pending_.find(name.str); it != pending_.end()) {
      for (auto &[index, p] : it->second)
        p.placeholder->replaceAllUsesWith(pick(d, p.firstUse));
      pending_.erase(it);
    }
  }

  void resolveUndefined() {
    // Report the earliest undefined use.
    const Token *first = nullptr;
    for (auto &[name, uses] : pending_)
      for (auto &[index, p] : uses)
        if (!first || p.firstUse.offset < first->offset) first = &p.firstUse;
    if (first) errorAt(*first, "use of undefined value '" + std::string(first->text) + "'");
  }

  // ---- attributes ----
  AttrMap parseAttrDict(const OpDef &def) {
    lex_.next(); // {
    AttrMap attrs;
    if (consumeIf('}')) return attrs;
    for (;;) {
      Token key = lex_.next();
      if (key.kind != Tok::Ident && key.kind != Tok::String) expected("an attribute name", key);
      std::string k = key.kind == Tok::String ? key.str : std::string(key.text);
      if (attrs.count(k)) errorAt(key, "duplicate attribute '" + k + "'");
      expect('=', "after the attribute name");
      SizeSlotForm form = symbolicSizeSlot(def.name, k);
      std::optional<Attr> sym;
      if (form != SizeSlotForm::None) sym = parseSymbolicSize(form);
      attrs.emplace(k, sym ? std::move(*sym) : parseAttrValue(def.attrSpec(k)));
      if (consumeIf(',')) continue;
      if (consumeIf('}')) return attrs;
      expected("',' or '}' after an attribute", lex_.peek());
    }
  }

  /// A size attribute written with shape symbols (docs/ir.md, "Symbolic sizes"): `s0+1` in a
  /// one-dim slot, `[1, s0]` in a list slot, scanned raw as dimension expressions. nullopt
  /// (nothing consumed) when the value has no symbol, so numbers read as usual.
  std::optional<Attr> parseSymbolicSize(SizeSlotForm form) {
    Token t = lex_.peek();
    if (t.kind == Tok::Float || t.kind == Tok::String || t.isIdent("inf") || t.isIdent("nan"))
      return std::nullopt;
    if (t.is('-') && (lex_.peek(1).isIdent("inf") || lex_.peek(1).isIdent("nan")))
      return std::nullopt;
    bool list = form == SizeSlotForm::Dims;
    if (list != t.is('[')) return std::nullopt;
    std::string_view src = lex_.src();
    size_t p = t.offset + (list ? 1 : 0);
    while (p < src.size() && (isDimChar(src[p]) || (list && src[p] == ',')))
      ++p;
    if (list && (p >= src.size() || src[p] != ']')) return std::nullopt;
    std::string_view text = src.substr(t.offset, p + (list ? 1 : 0) - t.offset);
    bool hasSymbol = false;
    for (char c : text)
      hasSymbol = hasSymbol || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (!hasSymbol) return std::nullopt;
    checkDimNesting(text, t.offset);
    Shape dims;
    std::string_view body = list ? text.substr(1, text.size() - 2) : text;
    size_t at = t.offset + (list ? 1 : 0);
    for (;;) {
      size_t comma = list ? body.find(',') : std::string_view::npos;
      std::string_view one = body.substr(0, comma);
      std::string err;
      size_t errOffset = 0;
      auto d = parseDimExpr(one, &err, &errOffset);
      if (!d)
        lex_.error(at + std::min(errOffset, one.size()),
                   "bad dimension '" + std::string(one) + "': " + err);
      dims.push_back(*d);
      if (comma == std::string_view::npos) break;
      body = body.substr(comma + 1);
      at += comma + 1;
    }
    lex_.setRawPos(t.offset + text.size());
    return list ? makeSizeAttr(dims) : makeSizeAttr(dims.front());
  }

  /// A number: Int or Float token, inf, nan, -inf, -nan. nullopt if the next
  /// token is not one.
  std::optional<Attr> parseNumber() {
    Token t = lex_.peek(); // copies: peeking further may move the lookahead buffer
    if (t.kind == Tok::Int) return Attr(lex_.next().intValue);
    if (t.kind == Tok::Float) return Attr(lex_.next().floatValue);
    bool neg = t.is('-');
    Token w = lex_.peek(neg ? 1 : 0);
    if (!w.isIdent("inf") && !w.isIdent("nan")) {
      if (neg) expected("'inf' or 'nan' after '-'", w);
      return std::nullopt;
    }
    double v = w.isIdent("inf") ? std::numeric_limits<double>::infinity()
                                : std::numeric_limits<double>::quiet_NaN();
    if (neg) lex_.next();
    lex_.next();
    return Attr(neg ? -v : v);
  }

  Attr parseAttrValue(const AttrSpec *spec) {
    if (auto n = parseNumber()) return *n;
    Token t = lex_.peek();
    if (t.kind == Tok::String) return Attr(lex_.next().str);
    if (t.is('[')) return parseNumberList(spec);
    if (t.kind == Tok::Ident) {
      if (t.text == "true" || t.text == "false") {
        lex_.next();
        return Attr(t.text == "true");
      }
      if (t.text == "dense") return Attr(parseDense());
      if (t.text == "type") {
        lex_.next();
        expect('<', "after 'type'");
        Type ty = parseType();
        expect('>', "to close type<...>");
        return Attr(ty);
      }
      if (auto dt = parseDType(t.text)) {
        lex_.next();
        return Attr(*dt);
      }
    }
    expected("an attribute value", t);
  }

  /// `[n, n, ...]`: Ints if every element is an integer, else Floats. `[]` is
  /// Ints unless the op declares the attribute as Floats.
  Attr parseNumberList(const AttrSpec *spec) {
    lex_.next(); // [
    std::vector<Attr> elems;
    if (!consumeIf(']')) {
      for (;;) {
        auto n = parseNumber();
        if (!n) expected("a number in the list", lex_.peek());
        elems.push_back(*n);
        if (consumeIf(',')) continue;
        if (consumeIf(']')) break;
        expected("',' or ']' in the list", lex_.peek());
      }
    }
    bool allInts = true;
    for (const Attr &a : elems)
      allInts = allInts && a.kind() == AttrKind::Int;
    if (elems.empty() && spec && spec->kind == AttrKind::Floats) allInts = false;
    if (allInts) {
      Attr::Ints v;
      for (const Attr &a : elems)
        v.push_back(a.asInt());
      return Attr(std::move(v));
    }
    Attr::Floats v;
    for (const Attr &a : elems)
      v.push_back(a.asNumber());
    return Attr(std::move(v));
  }

  /// `dense<f32[2,2]: [[1.0, 2.0], [3.0, 4.0]]>`; a 0-d tensor is
  /// `dense<f32[]: 1.5>`.
  Tensor parseDense() {
    lex_.next(); // dense
    expect('<', "after 'dense'");
    Token typeTok = lex_.peek();
    Type ty = parseType();
    if (!ty.isTensor()) errorAt(typeTok, "dense<...> needs a tensor type, found " + ty.str());
    if (ty.device() != Device{}) errorAt(typeTok, "dense<...> tensors live on the cpu");
    std::vector<int64_t> sizes;
    int64_t nonZeroProduct = 1;
    bool empty = false;
    for (const DimExpr &d : ty.shape()) {
      if (!d.isStatic()) errorAt(typeTok, "dense<...> needs a static shape, found " + ty.str());
      int64_t s = d.value();
      sizes.push_back(s);
      empty = empty || s == 0;
      if (s != 0 && nonZeroProduct > (int64_t{1} << 40) / s)
        errorAt(typeTok, "dense<...> of type " + ty.str() + " is too large");
      nonZeroProduct *= s == 0 ? 1 : s;
    }
    // Each element takes at least one character, so this bounds the allocation
    // by the text.
    if (!empty && nonZeroProduct > static_cast<int64_t>(lex_.src().size()))
      errorAt(typeTok, "dense<...> of type " + ty.str() + " has more elements than the text");
    expect(':', "after the dense tensor type");
    Tensor t = Tensor::empty(ty.dtype(), sizes);
    int64_t next = 0;
    parseDenseLevel(t, 0, next);
    expect('>', "to close dense<...>");
    return t;
  }

  void parseDenseLevel(const Tensor &t, size_t dim, int64_t &next) {
    if (dim == t.sizes().size()) {
      parseDenseElement(t, next++);
      return;
    }
    Nest nest(*this);
    Token open = expect('[', "to start dimension " + std::to_string(dim) + " of the dense tensor");
    int64_t count = 0;
    if (!consumeIf(']')) {
      for (;;) {
        if (count == t.sizes()[dim])
          errorAt(lex_.peek(), "dense tensor has more than " + std::to_string(count) +
                                   " elements in dimension " + std::to_string(dim));
        parseDenseLevel(t, dim + 1, next);
        ++count;
        if (consumeIf(',')) continue;
        if (consumeIf(']')) break;
        expected("',' or ']' in the dense tensor", lex_.peek());
      }
    }
    if (count != t.sizes()[dim])
      errorAt(open, "dense tensor has " + std::to_string(count) + " elements in dimension " +
                        std::to_string(dim) + ", expected " + std::to_string(t.sizes()[dim]));
  }

  void parseDenseElement(const Tensor &t, int64_t index) {
    Token tok = lex_.peek();
    DType dt = t.dtype();
    if (dt == DType::Bool) {
      if (!tok.isIdent("true") && !tok.isIdent("false")) expected("'true' or 'false'", tok);
      lex_.next();
      t.setInt(index, tok.isIdent("true"));
      return;
    }
    auto n = parseNumber();
    if (!n) expected(std::string("a ") + std::string(dtypeName(dt)) + " element", tok);
    if (isFloating(dt)) {
      t.setDouble(index, n->asNumber());
      return;
    }
    if (n->kind() != AttrKind::Int)
      expected("an integer element for " + std::string(dtypeName(dt)), tok);
    int64_t v = n->asInt();
    // Reject values the dtype cannot hold instead of wrapping them silently.
    int bits = static_cast<int>(dtypeSize(dt)) * 8;
    bool ok = dt == DType::U8 ? (v >= 0 && v <= 255)
              : bits == 64    ? true
                           : (v >= -(int64_t{1} << (bits - 1)) && v < (int64_t{1} << (bits - 1)));
    if (!ok)
      errorAt(tok,
              "value " + std::to_string(v) + " out of range for " + std::string(dtypeName(dt)));
    t.setInt(index, v);
  }

  // ---- types ----
  Type parseType() {
    Nest nest(*this);
    Token t = lex_.next();
    if (t.kind != Tok::Ident) expected("a type", t);
    if (auto dt = parseDType(t.text); dt && (lex_.peek().is('[') || t.text != "bool"))
      return parseTensorType(*dt);
    if (t.text == "int") return Type::intTy();
    if (t.text == "float") return Type::floatTy();
    if (t.text == "bool") return Type::boolTy();
    if (t.text == "none") return Type::none();
    if (t.text == "str") return Type::strTy();
    if (t.text == "object") return Type::object();
    if (t.text == "tuple") {
      expect('<', "after 'tuple'");
      std::vector<Type> elems;
      if (!consumeIf('>')) {
        do
          elems.push_back(parseType());
        while (consumeIf(','));
        expect('>', "to close tuple<...>");
      }
      return Type::tuple(std::move(elems));
    }
    if (t.text == "list") {
      expect('<', "after 'list'");
      Type elem = parseType();
      expect('>', "to close list<...>");
      return Type::list(std::move(elem));
    }
    if (lex_.peek().is('[')) {
      std::string names;
      for (int i = kNumDTypes - 1; i >= 0; --i)
        names += std::string(dtypeName(static_cast<DType>(i))) + (i ? ", " : "");
      errorAt(t, "unknown dtype '" + std::string(t.text) + "' (expected one of " + names + ")");
    }
    errorAt(t, "unknown type '" + std::string(t.text) + "'");
  }

  static bool isDimChar(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           std::string_view("_+-*/%() \t").find(c) != std::string_view::npos;
  }

  /// parseDimExpr recurses once per open parenthesis and per unary minus: bound both.
  void checkDimNesting(std::string_view text, size_t start) const {
    int depth = 0, minuses = 0;
    for (size_t i = 0; i < text.size(); ++i) {
      char c = text[i];
      depth += c == '(' ? 1 : c == ')' ? -1 : 0;
      minuses = c == '-' ? minuses + 1 : (c == ' ' || c == '\t') ? minuses : 0;
      if (depth > kMaxNesting || minuses > kMaxNesting)
        lex_.error(start + i, "dimension expression nested too deeply");
    }
  }

  /// `[d, ...][@device]` after the dtype. Dims are scanned raw: they are
  /// DimExpr text, not tokens.
  Type parseTensorType(DType dtype) {
    expect('[', "after the dtype");
    std::string_view src = lex_.src();
    lex_.skipBlanks();
    size_t p = lex_.rawPos();
    Shape shape;
    if (p < src.size() && src[p] == ']') {
      ++p;
    } else {
      for (;;) {
        size_t start = p;
        while (p < src.size() && isDimChar(src[p]))
          ++p;
        size_t end = p;
        while (end > start && (src[end - 1] == ' ' || src[end - 1] == '\t'))
          --end;
        std::string_view text = src.substr(start, end - start);
        if (text.empty()) {
          lex_.setRawPos(start);
          expected("a dimension", lex_.peek());
        }
        checkDimNesting(text, start);
        std::string err;
        size_t errOffset = 0;
        auto dim = parseDimExpr(text, &err, &errOffset);
        if (!dim)
          lex_.error(start + std::min(errOffset, text.size()),
                     "bad dimension '" + std::string(text) + "': " + err);
        shape.push_back(*dim);
        if (p < src.size() && src[p] == ',') {
          ++p;
          while (p < src.size() && (src[p] == ' ' || src[p] == '\t'))
            ++p;
          continue;
        }
        if (p < src.size() && src[p] == ']') {
          ++p;
          break;
        }
        lex_.setRawPos(p);
        if (p >= src.size()) expected("',' or ']' after a dimension", lex_.peek());
        std::string c = src[p] >= 0x20 && src[p] < 0x7f ? std::string(1, src[p]) : "?";
        lex_.error(p, "expected ',' or ']' after a dimension, found '" + c + "'");
      }
    }
    lex_.setRawPos(p);
    Device device;
    if (consumeIf('@')) {
      Token kind = lex_.next();
      if (kind.kind != Tok::Ident) expected("a device name after '@'", kind);
      device.kind = std::string(kind.text);
      if (lex_.peek().is(':') && lex_.peek(1).kind == Tok::Int) {
        lex_.next();
        Token index = lex_.next();
        if (index.intValue < 0 || index.intValue > std::numeric_limits<int>::max())
          errorAt(index, "device index out of range");
        device.index = static_cast<int>(index.intValue);
      }
    }
    return Type::tensor(dtype, std::move(shape), std::move(device));
  }

  TextPosition position(size_t offset) const {
    auto [line, col] = lex_.lineCol(offset);
    return {line, col};
  }

  // Placeholders for values used before their definition. Declared first so it
  // outlives every op that may still point at a placeholder while the graph
  // under construction unwinds.
  Block forward_;
  Lexer lex_;
  TextPositions *positions_;
  int depth_ = 0;
  std::unordered_map<std::string, Def> defs_;
  // name -> result index (-1 for a plain %name) -> placeholder.
  std::map<std::string, std::map<int, Pending>> pending_;
};

} // namespace

std::unique_ptr<Graph> parseGraph(std::string_view text, std::string_view filename) {
  return Parser(text, filename, nullptr).parseSingleGraph();
}

std::vector<std::unique_ptr<Graph>> parseModule(std::string_view text, std::string_view filename) {
  return Parser(text, filename, nullptr).parseModule();
}

std::vector<std::unique_ptr<Graph>> parseModule(std::string_view text, std::string_view filename,
                                                TextPositions *positions) {
  return Parser(text, filename, positions).parseModule();
}

Type parseType(std::string_view text) { return Parser(text, "<type>", nullptr).parseTypeOnly(); }

} // namespace xjit
