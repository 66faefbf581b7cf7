// Symbolic dimension expressions as canonical polynomials over atoms.
#include "xjit/ir/dim.h"

#include <algorithm>
#include <cctype>
#include <mutex>
#include <set>
#include <stdexcept>
#include <unordered_map>

namespace xjit {

// Atoms other than plain symbols (floor division, modulo) are interned by their canonical
// text so a monomial stays a list of strings and compares structurally.
struct DimAtoms {
  struct Compound {
    char op; // '/' floor division, '%' modulo
    DimExpr lhs, rhs;
  };
  static DimAtoms &get() {
    static DimAtoms atoms;
    return atoms;
  }
  std::string intern(char op, const DimExpr &lhs, const DimExpr &rhs) {
    std::string key = "(" + lhs.str() + (op == '/' ? ")//(" : ")%(") + rhs.str() + ")";
    if (auto r = rhs.staticValue()) // "(s0+1)//2" rather than "(s0+1)//(2)"
      key = "(" + lhs.str() + (op == '/' ? ")//" : ")%") + std::to_string(*r);
    std::lock_guard<std::mutex> lock(mu);
    compounds.try_emplace(key, Compound{op, lhs, rhs});
    return key;
  }
  const Compound *find(const std::string &key) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = compounds.find(key);
    return it == compounds.end() ? nullptr : &it->second;
  }
  std::mutex mu;
  std::unordered_map<std::string, Compound> compounds;
};

namespace {
int64_t floorDivInt(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}
int64_t floorModInt(int64_t a, int64_t b) { return a - floorDivInt(a, b) * b; }
} // namespace

DimExpr::DimExpr(int64_t value) {
  if (value != 0) terms_[{}] = value;
}

DimExpr DimExpr::symbol(std::string_view name) {
  DimExpr e;
  e.terms_[{std::string(name)}] = 1;
  return e;
}

bool DimExpr::isStatic() const {
  return terms_.empty() || (terms_.size() == 1 && terms_.begin()->first.empty());
}

std::optional<int64_t> DimExpr::staticValue() const {
  if (!isStatic()) return std::nullopt;
  return value();
}

int64_t DimExpr::value() const { return terms_.empty() ? 0 : terms_.begin()->second; }

DimExpr DimExpr::operator+(const DimExpr &o) const {
  DimExpr r = *this;
  for (const auto &[m, c] : o.terms_) {
    int64_t v = (r.terms_[m] += c);
    if (v == 0) r.terms_.erase(m);
  }
  return r;
}

DimExpr DimExpr::operator-() const {
  DimExpr r = *this;
  for (auto &[m, c] : r.terms_) c = -c;
  return r;
}

DimExpr DimExpr::operator-(const DimExpr &o) const { return *this + (-o); }

DimExpr DimExpr::operator*(const DimExpr &o) const {
  DimExpr r;
  for (const auto &[ma, ca] : terms_)
    for (const auto &[mb, cb] : o.terms_) {
      Monomial m = ma;
      m.insert(m.end(), mb.begin(), mb.end());
      std::sort(m.begin(), m.end());
      int64_t v = (r.terms_[m] += ca * cb);
      if (v == 0) r.terms_.erase(m);
    }
  return r;
}

DimExpr DimExpr::floorDiv(const DimExpr &o) const {
  if (auto d = o.staticValue()) {
    if (*d == 1) return *this;
    if (auto a = staticValue(); a && *d != 0) return DimExpr(floorDivInt(*a, *d));
    // Exact when every coefficient divides: (s0*4)//2 -> s0*2.
    bool exact = *d != 0;
    for (const auto &[m, c] : terms_) exact = exact && c % *d == 0;
    if (exact) {
      DimExpr r = *this;
      for (auto &[m, c] : r.terms_) c /= *d;
      return r;
    }
  } else if (*this == o) {
    return DimExpr(1);
  }
  DimExpr r;
  r.terms_[{DimAtoms::get().intern('/', *this, o)}] = 1;
  return r;
}

DimExpr DimExpr::mod(const DimExpr &o) const {
  if (auto d = o.staticValue()) {
    if (auto a = staticValue(); a && *d != 0) return DimExpr(floorModInt(*a, *d));
    bool divisible = *d != 0;
    for (const auto &[m, c] : terms_) divisible = divisible && c % *d == 0;
    if (divisible) return DimExpr(0);
  } else if (*this == o) {
    return DimExpr(0);
  }
  DimExpr r;
  r.terms_[{DimAtoms::get().intern('%', *this, o)}] = 1;
  return r;
}

std::string DimExpr::str() const {
  if (terms_.empty()) return "0";
  std::string out;
  // Non-constant terms first (map order puts the empty monomial first), then the constant.
  auto emit = [&](const Monomial &m, int64_t c) {
    bool first = out.empty();
    if (m.empty()) {
      if (!first && c >= 0) out += "+";
      out += std::to_string(c);
      return;
    }
    if (c < 0) out += "-";
    else if (!first) out += "+";
    for (size_t i = 0; i < m.size(); ++i) {
      // A floor-division/modulo atom binds like '*': parenthesize it inside a product, or
      // "(s0)//3*(s1)//3" would re-parse as "((s0)//3*s1)//3"; and after a minus, or
      // "-(s0)//2" would re-parse as "(-s0)//2".
      bool wrap = (m.size() > 1 || c < 0) && m[i][0] == '(';
      out += (i ? "*" : "") + (wrap ? "(" + m[i] + ")" : m[i]);
    }
    if (c != 1 && c != -1) out += "*" + std::to_string(c < 0 ? -c : c);
  };
  for (const auto &[m, c] : terms_)
    if (!m.empty()) emit(m, c);
  if (auto it = terms_.find({}); it != terms_.end()) emit(it->first, it->second);
  return out;
}

std::optional<int64_t> DimExpr::evaluate(const SymbolBindings &b) const {
  int64_t total = 0;
  for (const auto &[m, c] : terms_) {
    int64_t prod = c;
    for (const auto &atom : m) {
      if (auto it = b.find(atom); it != b.end()) {
        prod *= it->second;
        continue;
      }
      const auto *comp = DimAtoms::get().find(atom);
      if (!comp) return std::nullopt;
      auto l = comp->lhs.evaluate(b), r = comp->rhs.evaluate(b);
      if (!l || !r || *r == 0) return std::nullopt;
      prod *= comp->op == '/' ? floorDivInt(*l, *r) : floorModInt(*l, *r);
    }
    total += prod;
  }
  return total;
}

std::vector<std::string> DimExpr::symbols() const {
  std::set<std::string> out;
  for (const auto &[m, c] : terms_)
    for (const auto &atom : m) {
      if (const auto *comp = DimAtoms::get().find(atom)) {
        for (auto &s : comp->lhs.symbols()) out.insert(s);
        for (auto &s : comp->rhs.symbols()) out.insert(s);
      } else {
        out.insert(atom);
      }
    }
  return {out.begin(), out.end()};
}

namespace {
// Recursive-descent parser: expr := term (('+'|'-') term)*; term := unary (('*'|'//'|'%')
// unary)*; unary := '-' unary | atom; atom := integer | symbol | '(' expr ')'.
struct DimParser {
  std::string_view s;
  size_t pos = 0;
  std::string error;
  size_t errorPos = 0;

  void skip() {
    while (pos < s.size() && s[pos] == ' ') ++pos;
  }
  bool fail(const std::string &msg) {
    if (error.empty()) {
      error = msg;
      errorPos = pos;
    }
    return false;
  }
  bool expr(DimExpr &out) {
    if (!term(out)) return false;
    for (skip(); pos < s.size() && (s[pos] == '+' || s[pos] == '-'); skip()) {
      char op = s[pos++];
      DimExpr rhs;
      if (!term(rhs)) return false;
      out = op == '+' ? out + rhs : out - rhs;
    }
    return true;
  }
  bool term(DimExpr &out) {
    if (!unary(out)) return false;
    for (skip(); pos < s.size(); skip()) {
      if (s[pos] == '*') {
        ++pos;
        DimExpr rhs;
        if (!unary(rhs)) return false;
        out = out * rhs;
      } else if (s.substr(pos, 2) == "//" || s[pos] == '%') {
        bool div = s[pos] == '/';
        pos += div ? 2 : 1;
        size_t at = pos;
        DimExpr rhs;
        if (!unary(rhs)) return false;
        if (rhs.isStatic() && rhs.value() == 0) {
          pos = at;
          return fail("division by zero in dimension expression");
        }
        out = div ? out.floorDiv(rhs) : out.mod(rhs);
      } else {
        break;
      }
    }
    return true;
  }
  bool unary(DimExpr &out) {
    skip();
    if (pos < s.size() && s[pos] == '-') {
      ++pos;
      if (!unary(out)) return false;
      out = -out;
      return true;
    }
    return atom(out);
  }
  bool atom(DimExpr &out) {
    skip();
    if (pos >= s.size()) return fail("expected a dimension (integer or symbol)");
    char c = s[pos];
    if (std::isdigit(static_cast<unsigned char>(c))) {
      int64_t v = 0;
      size_t start = pos;
      while (pos < s.size() && std::isdigit(static_cast<unsigned char>(s[pos]))) {
        if (v > (INT64_MAX - 9) / 10) {
          pos = start;
          return fail("integer too large in dimension expression");
        }
        v = v * 10 + (s[pos++] - '0');
      }
      out = DimExpr(v);
      return true;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t start = pos;
      while (pos < s.size() && (std::isalnum(static_cast<unsigned char>(s[pos])) || s[pos] == '_'))
        ++pos;
      out = DimExpr::symbol(s.substr(start, pos - start));
      return true;
    }
    if (c == '(') {
      ++pos;
      if (!expr(out)) return false;
      skip();
      if (pos >= s.size() || s[pos] != ')') return fail("expected ')' in dimension expression");
      ++pos;
      return true;
    }
    return fail(std::string("unexpected '") + c + "' in dimension expression");
  }
};
} // namespace

std::optional<DimExpr> parseDimExpr(std::string_view text, std::string *error,
                                    size_t *errorOffset) {
  DimParser p;
  p.s = text;
  DimExpr out;
  bool ok = p.expr(out);
  p.skip();
  if (ok && p.pos != text.size()) ok = p.fail("unexpected trailing text in dimension expression");
  if (!ok) {
    if (error) *error = p.error;
    if (errorOffset) *errorOffset = p.errorPos;
    return std::nullopt;
  }
  return out;
}

std::string shapeStr(const Shape &s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + s[i].str();
  return out + "]";
}

bool isStaticShape(const Shape &s) {
  for (const auto &d : s)
    if (!d.isStatic()) return false;
  return true;
}

DimExpr numelOf(const Shape &s) {
  DimExpr n(1);
  for (const auto &d : s) n = n * d;
  return n;
}

} // namespace xjit
