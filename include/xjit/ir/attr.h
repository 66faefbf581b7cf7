// Compile-time attributes of ops: integers, floats, booleans, strings, integer and float
// lists, dtypes, types and dense tensor constants. An op's attributes are a sorted name->value
// dictionary so printing is deterministic.
#pragma once

#include "xjit/ir/dtype.h"
#include "xjit/ir/tensor.h"
#include "xjit/ir/type.h"

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

namespace xjit {

enum class AttrKind : uint8_t { Int, Float, Bool, Str, Ints, Floats, DType, Type, Tensor };

class Attr {
public:
  using Ints = std::vector<int64_t>;
  using Floats = std::vector<double>;
  Attr() : v_(int64_t{0}) {}
  Attr(int64_t v) : v_(v) {}             // NOLINT(google-explicit-constructor)
  Attr(int v) : v_(int64_t{v}) {}        // NOLINT(google-explicit-constructor)
  Attr(double v) : v_(v) {}              // NOLINT(google-explicit-constructor)
  Attr(bool v) : v_(v) {}                // NOLINT(google-explicit-constructor)
  Attr(std::string v) : v_(std::move(v)) {} // NOLINT(google-explicit-constructor)
  Attr(const char *v) : v_(std::string(v)) {} // NOLINT(google-explicit-constructor)
  Attr(Ints v) : v_(std::move(v)) {}     // NOLINT(google-explicit-constructor)
  Attr(Floats v) : v_(std::move(v)) {}   // NOLINT(google-explicit-constructor)
  Attr(DType v) : v_(v) {}               // NOLINT(google-explicit-constructor)
  Attr(Type v) : v_(std::move(v)) {}     // NOLINT(google-explicit-constructor)
  Attr(Tensor v) : v_(std::move(v)) {}   // NOLINT(google-explicit-constructor)

  AttrKind kind() const { return static_cast<AttrKind>(v_.index()); }
  int64_t asInt() const { return std::get<int64_t>(v_); }
  double asFloat() const { return std::get<double>(v_); }
  /// Float attributes also accept ints (e.g. alpha = 1).
  double asNumber() const;
  bool asBool() const { return std::get<bool>(v_); }
  const std::string &asStr() const { return std::get<std::string>(v_); }
  const Ints &asInts() const { return std::get<Ints>(v_); }
  const Floats &asFloats() const { return std::get<Floats>(v_); }
  DType asDType() const { return std::get<DType>(v_); }
  const Type &asType() const { return std::get<Type>(v_); }
  const Tensor &asTensor() const { return std::get<Tensor>(v_); }

  bool operator==(const Attr &o) const;
  bool operator!=(const Attr &o) const { return !(*this == o); }
  /// Text form; floats always carry '.', 'e', "inf" or "nan" so they re-parse as floats, with
  /// enough digits to round-trip exactly. Tensors print as dense<[...]> in row-major order.
  std::string str() const;

private:
  std::variant<int64_t, double, bool, std::string, Ints, Floats, DType, Type, Tensor> v_;
};

using AttrMap = std::map<std::string, Attr, std::less<>>;

/// Shortest text for a double that parses back to the same bits.
std::string formatDouble(double v);

} // namespace xjit
