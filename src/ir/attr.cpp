// Attribute values and their text form.
#include "xjit/ir/attr.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>

namespace xjit {

std::string formatDouble(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[40];
  for (int prec = 1; prec <= 17; ++prec) { // shortest text that round-trips
    std::snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  std::string s = buf;
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0"; // keep it a float literal
  return s;
}

double Attr::asNumber() const {
  if (kind() == AttrKind::Int) return static_cast<double>(asInt());
  if (kind() == AttrKind::Bool) return asBool() ? 1.0 : 0.0;
  return asFloat();
}

bool Attr::operator==(const Attr &o) const {
  if (kind() != o.kind()) return false;
  switch (kind()) {
  case AttrKind::Float: {
    double a = asFloat(), b = o.asFloat(); // bitwise-equal semantics for nan
    return a == b ? std::signbit(a) == std::signbit(b) : (std::isnan(a) && std::isnan(b));
  }
  case AttrKind::Tensor: return asTensor().equals(o.asTensor());
  case AttrKind::Int: return asInt() == o.asInt();
  case AttrKind::Bool: return asBool() == o.asBool();
  case AttrKind::Str: return asStr() == o.asStr();
  case AttrKind::Ints: return asInts() == o.asInts();
  case AttrKind::Floats: return asFloats() == o.asFloats();
  case AttrKind::DType: return asDType() == o.asDType();
  case AttrKind::Type: return asType() == o.asType();
  }
  return false;
}

namespace {
std::string quote(const std::string &s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
    case '"': out += "\\\""; break;
    case '\\': out += "\\\\"; break;
    case '\n': out += "\\n"; break;
    case '\t': out += "\\t"; break;
    default:
      if (c < 0x20 || c == 0x7f) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\x%02x", c);
        out += buf;
      } else {
        out += static_cast<char>(c);
      }
    }
  }
  return out + "\"";
}

std::string tensorText(const Tensor &t) {
  std::string out = "dense<" + std::string(dtypeName(t.dtype())) + "[";
  for (size_t i = 0; i < t.sizes().size(); ++i) out += (i ? "," : "") + std::to_string(t.sizes()[i]);
  out += "]: ";
  int64_t linear = 0;
  std::function<void(size_t)> emit = [&](size_t dim) {
    if (dim == t.sizes().size()) {
      if (isFloating(t.dtype())) out += formatDouble(t.getDouble(linear));
      else if (t.dtype() == DType::Bool) out += t.getInt(linear) ? "true" : "false";
      else out += std::to_string(t.getInt(linear));
      ++linear;
      return;
    }
    out += "[";
    for (int64_t i = 0; i < t.sizes()[dim]; ++i) {
      if (i) out += ", ";
      emit(dim + 1);
    }
    out += "]";
  };
  emit(0);
  return out + ">";
}
} // namespace

std::string Attr::str() const {
  switch (kind()) {
  case AttrKind::Int: return std::to_string(asInt());
  case AttrKind::Float: return formatDouble(asFloat());
  case AttrKind::Bool: return asBool() ? "true" : "false";
  case AttrKind::Str: return quote(asStr());
  case AttrKind::Ints: {
    std::string out = "[";
    for (size_t i = 0; i < asInts().size(); ++i) out += (i ? ", " : "") + std::to_string(asInts()[i]);
    return out + "]";
  }
  case AttrKind::Floats: {
    std::string out = "[";
    for (size_t i = 0; i < asFloats().size(); ++i) out += (i ? ", " : "") + formatDouble(asFloats()[i]);
    return out + "]";
  }
  case AttrKind::DType: return std::string(dtypeName(asDType()));
  case AttrKind::Type: return "type<" + asType().str() + ">";
  case AttrKind::Tensor: return tensorText(asTensor());
  }
  return "?";
}

} // namespace xjit
