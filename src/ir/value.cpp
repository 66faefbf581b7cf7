// Interpreter run-time values.
#include "xjit/ir/value.h"

#include <stdexcept>

namespace xjit {

int64_t RtValue::toInt() const {
  if (isInt()) return std::get<int64_t>(v_);
  if (isBool()) return std::get<bool>(v_) ? 1 : 0;
  throw std::runtime_error(std::string("expected an int, got ") + kindName());
}

double RtValue::toDouble() const {
  if (isFloat()) return std::get<double>(v_);
  if (isInt() || isBool()) return static_cast<double>(toInt());
  throw std::runtime_error(std::string("expected a number, got ") + kindName());
}

bool RtValue::toBool() const {
  if (isBool()) return std::get<bool>(v_);
  if (isInt()) return std::get<int64_t>(v_) != 0;
  if (isFloat()) return std::get<double>(v_) != 0.0;
  throw std::runtime_error(std::string("expected a bool, got ") + kindName());
}

const char *RtValue::kindName() const {
  static const char *names[] = {"none", "tensor", "int", "float", "bool", "str", "list", "object"};
  return names[v_.index()];
}

} // namespace xjit
