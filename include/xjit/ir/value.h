// Run-time values of the reference interpreter: tensors, Python scalars, None, strings,
// tuples/lists and opaque Python objects.
#pragma once

#include "xjit/ir/tensor.h"

#include <memory>
#include <string>
#include <variant>
#include <vector>

namespace xjit {

class RtValue;
using RtList = std::vector<RtValue>;

/// An opaque host object (e.g. a PyObject* with its reference held by the deleter).
struct OpaqueObject {
  std::shared_ptr<void> handle;
};

class RtValue {
public:
  RtValue() = default; // None
  RtValue(Tensor t) : v_(std::move(t)) {}       // NOLINT(google-explicit-constructor)
  RtValue(int64_t i) : v_(i) {}                  // NOLINT(google-explicit-constructor)
  RtValue(double d) : v_(d) {}                   // NOLINT(google-explicit-constructor)
  RtValue(bool b) : v_(b) {}                     // NOLINT(google-explicit-constructor)
  RtValue(std::string s) : v_(std::move(s)) {}   // NOLINT(google-explicit-constructor)
  RtValue(RtList l) : v_(std::make_shared<RtList>(std::move(l))) {} // NOLINT
  RtValue(OpaqueObject o) : v_(std::move(o)) {}  // NOLINT(google-explicit-constructor)

  bool isNone() const { return v_.index() == 0; }
  bool isTensor() const { return std::holds_alternative<Tensor>(v_); }
  bool isInt() const { return std::holds_alternative<int64_t>(v_); }
  bool isFloat() const { return std::holds_alternative<double>(v_); }
  bool isBool() const { return std::holds_alternative<bool>(v_); }
  bool isStr() const { return std::holds_alternative<std::string>(v_); }
  bool isList() const { return std::holds_alternative<std::shared_ptr<RtList>>(v_); }
  bool isObject() const { return std::holds_alternative<OpaqueObject>(v_); }

  const Tensor &tensor() const { return std::get<Tensor>(v_); }
  int64_t toInt() const;     // int or bool
  double toDouble() const;   // float, int or bool
  bool toBool() const;       // bool, int or float (non-zero)
  const std::string &str() const { return std::get<std::string>(v_); }
  const RtList &list() const { return *std::get<std::shared_ptr<RtList>>(v_); }
  const OpaqueObject &object() const { return std::get<OpaqueObject>(v_); }
  /// Human-readable kind for error messages ("tensor", "int", ...).
  const char *kindName() const;

private:
  std::variant<std::monostate, Tensor, int64_t, double, bool, std::string,
               std::shared_ptr<RtList>, OpaqueObject>
      v_;
};

} // namespace xjit
