// Tensor dimensions that are static integers or symbolic expressions (s0, s0*4, s1+s2-1,
// s0//2). An expression is kept canonical as a polynomial with integer coefficients over atoms;
// an atom is a symbol or an irreducible floor division / modulo, so structurally equal dims
// compare equal and print identically.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace xjit {

class DimExpr;

/// Values bound to symbols, e.g. {"s0": 8}.
using SymbolBindings = std::map<std::string, int64_t, std::less<>>;

class DimExpr {
public:
  DimExpr(int64_t value = 0); // NOLINT(google-explicit-constructor): dims read like integers.
  static DimExpr symbol(std::string_view name);

  bool isStatic() const;
  std::optional<int64_t> staticValue() const;
  /// Static value; only call when isStatic().
  int64_t value() const;

  DimExpr operator+(const DimExpr &o) const;
  DimExpr operator-(const DimExpr &o) const;
  DimExpr operator*(const DimExpr &o) const;
  DimExpr operator-() const;
  /// Python floor division and modulo (divisor must be non-zero when static).
  DimExpr floorDiv(const DimExpr &o) const;
  DimExpr mod(const DimExpr &o) const;

  bool operator==(const DimExpr &o) const { return terms_ == o.terms_; }
  bool operator!=(const DimExpr &o) const { return !(*this == o); }
  bool operator<(const DimExpr &o) const { return terms_ < o.terms_; }

  /// Canonical text: "4", "s0", "s0*4", "s0*s1+2", "(s0+1)//2".
  std::string str() const;
  /// Value under the bindings; nullopt if a symbol is unbound or a division is by zero.
  std::optional<int64_t> evaluate(const SymbolBindings &b) const;
  /// Names of all symbols that occur.
  std::vector<std::string> symbols() const;

  /// One term: sorted atom keys (with repetition for powers) -> coefficient.
  using Monomial = std::vector<std::string>;

private:
  friend struct DimAtoms;
  std::map<Monomial, int64_t> terms_; // constant term under the empty monomial; no zeros kept
};

/// Parses the canonical text (and any expression over integers, symbols, + - * // % and
/// parentheses). On failure returns nullopt and sets *error and *errorOffset.
std::optional<DimExpr> parseDimExpr(std::string_view text, std::string *error = nullptr,
                                    size_t *errorOffset = nullptr);

using Shape = std::vector<DimExpr>;
std::string shapeStr(const Shape &s); // "[2,s0,3]"
bool isStaticShape(const Shape &s);
/// Product of the dims (symbolic if any dim is).
DimExpr numelOf(const Shape &s);

} // namespace xjit
