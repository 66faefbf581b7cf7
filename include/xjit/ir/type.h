// Types of IR values: tensors (dtype, shape, device), Python scalars, None, strings, tuples,
// lists and an opaque Python object. Types are immutable values, cheap to copy.
#pragma once

#include "xjit/ir/dim.h"
#include "xjit/ir/dtype.h"

#include <memory>
#include <string>
#include <vector>

namespace xjit {

struct Device {
  std::string kind = "cpu"; // "cpu", "cuda", ...
  int index = -1;           // -1: the default device of that kind
  bool operator==(const Device &o) const { return kind == o.kind && index == o.index; }
  bool operator!=(const Device &o) const { return !(*this == o); }
  std::string str() const; // "cpu", "cuda:0"
};

enum class TypeKind : uint8_t { Tensor, Int, Float, Bool, None, Str, Tuple, List, Object };

class Type {
public:
  Type(); // None
  static Type tensor(DType dtype, Shape shape, Device device = {});
  static Type intTy();
  static Type floatTy();
  static Type boolTy();
  static Type none();
  static Type strTy();
  static Type object();
  static Type tuple(std::vector<Type> elems);
  static Type list(Type elem);

  TypeKind kind() const;
  bool isTensor() const { return kind() == TypeKind::Tensor; }
  /// int, float or bool: a Python number that takes part in type promotion as a scalar.
  bool isScalar() const;

  // Tensor accessors (only for tensors).
  DType dtype() const;
  const Shape &shape() const;
  int64_t rank() const { return static_cast<int64_t>(shape().size()); }
  const Device &device() const;
  Type withShape(Shape s) const;
  Type withDType(DType d) const;

  // Tuple elements / list element.
  const std::vector<Type> &elements() const;
  const Type &elementType() const;

  /// The scalar category this type promotes as (tensors: their dtype's category).
  DTypeCategory category() const;

  bool operator==(const Type &o) const;
  bool operator!=(const Type &o) const { return !(*this == o); }
  /// Text form: "f32[2,s0]", "f16[]@cuda:0", "int", "tuple<int,f32[3]>", "list<int>".
  std::string str() const;

private:
  struct Storage;
  explicit Type(std::shared_ptr<const Storage> s) : s_(std::move(s)) {}
  std::shared_ptr<const Storage> s_;
};

} // namespace xjit
