// Immutable IR types.
#include "xjit/ir/type.h"

#include <stdexcept>

namespace xjit {

std::string Device::str() const {
  return index < 0 ? kind : kind + ":" + std::to_string(index);
}

struct Type::Storage {
  TypeKind kind;
  DType dtype = DType::F32;
  Shape shape;
  Device device;
  std::vector<Type> elems; // tuple elements, or the one list element type
};

Type::Type() : Type(none()) {}

Type Type::tensor(DType dtype, Shape shape, Device device) {
  auto s = std::make_shared<Storage>();
  s->kind = TypeKind::Tensor;
  s->dtype = dtype;
  s->shape = std::move(shape);
  s->device = std::move(device);
  return Type(std::move(s));
}

#define XJIT_SIMPLE_TYPE(fn, K)                                                                    \
  Type Type::fn() {                                                                                \
    static const auto s = std::make_shared<const Storage>(Storage{TypeKind::K});                  \
    return Type(s);                                                                                \
  }
XJIT_SIMPLE_TYPE(intTy, Int)
XJIT_SIMPLE_TYPE(floatTy, Float)
XJIT_SIMPLE_TYPE(boolTy, Bool)
XJIT_SIMPLE_TYPE(none, None)
XJIT_SIMPLE_TYPE(strTy, Str)
XJIT_SIMPLE_TYPE(object, Object)
#undef XJIT_SIMPLE_TYPE

Type Type::tuple(std::vector<Type> elems) {
  auto s = std::make_shared<Storage>();
  s->kind = TypeKind::Tuple;
  s->elems = std::move(elems);
  return Type(std::move(s));
}

Type Type::list(Type elem) {
  auto s = std::make_shared<Storage>();
  s->kind = TypeKind::List;
  s->elems = {std::move(elem)};
  return Type(std::move(s));
}

TypeKind Type::kind() const { return s_->kind; }

bool Type::isScalar() const {
  auto k = kind();
  return k == TypeKind::Int || k == TypeKind::Float || k == TypeKind::Bool;
}

static void requireTensor(const Type &t, const char *what) {
  if (!t.isTensor()) throw std::logic_error(std::string(what) + " of non-tensor type " + t.str());
}

DType Type::dtype() const {
  requireTensor(*this, "dtype");
  return s_->dtype;
}
const Shape &Type::shape() const {
  requireTensor(*this, "shape");
  return s_->shape;
}
const Device &Type::device() const {
  requireTensor(*this, "device");
  return s_->device;
}
Type Type::withShape(Shape s) const { return tensor(dtype(), std::move(s), device()); }
Type Type::withDType(DType d) const { return tensor(d, shape(), device()); }

const std::vector<Type> &Type::elements() const {
  if (kind() != TypeKind::Tuple) throw std::logic_error("elements of non-tuple type " + str());
  return s_->elems;
}
const Type &Type::elementType() const {
  if (kind() != TypeKind::List) throw std::logic_error("element type of non-list type " + str());
  return s_->elems[0];
}

DTypeCategory Type::category() const {
  switch (kind()) {
  case TypeKind::Tensor: return dtypeCategory(dtype());
  case TypeKind::Int: return DTypeCategory::Integer;
  case TypeKind::Float: return DTypeCategory::Floating;
  case TypeKind::Bool: return DTypeCategory::Bool;
  default: throw std::logic_error("type " + str() + " has no numeric category");
  }
}

bool Type::operator==(const Type &o) const {
  if (s_ == o.s_) return true;
  if (kind() != o.kind()) return false;
  switch (kind()) {
  case TypeKind::Tensor:
    return s_->dtype == o.s_->dtype && s_->shape == o.s_->shape && s_->device == o.s_->device;
  case TypeKind::Tuple:
  case TypeKind::List: return s_->elems == o.s_->elems;
  default: return true;
  }
}

std::string Type::str() const {
  switch (kind()) {
  case TypeKind::Tensor: {
    std::string out = std::string(dtypeName(dtype())) + shapeStr(shape());
    if (device() != Device{}) out += "@" + device().str();
    return out;
  }
  case TypeKind::Int: return "int";
  case TypeKind::Float: return "float";
  case TypeKind::Bool: return "bool";
  case TypeKind::None: return "none";
  case TypeKind::Str: return "str";
  case TypeKind::Object: return "object";
  case TypeKind::Tuple: {
    std::string out = "tuple<";
    for (size_t i = 0; i < s_->elems.size(); ++i) out += (i ? ", " : "") + s_->elems[i].str();
    return out + ">";
  }
  case TypeKind::List: return "list<" + s_->elems[0].str() + ">";
  }
  return "?";
}

} // namespace xjit
