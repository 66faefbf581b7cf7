// Element types and torch.promote_types.
#include "xjit/ir/dtype.h"

#include <array>

namespace xjit {
namespace {
struct DTypeInfo {
  std::string_view name;
  int64_t size;
  DTypeCategory category;
};
constexpr std::array<DTypeInfo, kNumDTypes> kInfo = {{
    {"bool", 1, DTypeCategory::Bool},
    {"u8", 1, DTypeCategory::Integer},
    {"i8", 1, DTypeCategory::Integer},
    {"i16", 2, DTypeCategory::Integer},
    {"i32", 4, DTypeCategory::Integer},
    {"i64", 8, DTypeCategory::Integer},
    {"f16", 2, DTypeCategory::Floating},
    {"bf16", 2, DTypeCategory::Floating},
    {"f32", 4, DTypeCategory::Floating},
    {"f64", 8, DTypeCategory::Floating},
}};
const DTypeInfo &info(DType t) { return kInfo[static_cast<size_t>(t)]; }
} // namespace

std::string_view dtypeName(DType t) { return info(t).name; }
int64_t dtypeSize(DType t) { return info(t).size; }
DTypeCategory dtypeCategory(DType t) { return info(t).category; }

std::optional<DType> parseDType(std::string_view s) {
  for (int i = 0; i < kNumDTypes; ++i)
    if (kInfo[i].name == s) return static_cast<DType>(i);
  return std::nullopt;
}

DType promoteTypes(DType a, DType b) {
  if (a == b) return a;
  auto ca = dtypeCategory(a), cb = dtypeCategory(b);
  if (ca != cb) return ca > cb ? a : b;
  if (ca == DTypeCategory::Floating) {
    // f16 and bf16 promote to f32; otherwise the wider type.
    if ((a == DType::F16 && b == DType::BF16) || (a == DType::BF16 && b == DType::F16))
      return DType::F32;
    return dtypeSize(a) >= dtypeSize(b) ? a : b;
  }
  // Integers: u8 with a signed type needs a signed type holding both (u8+i8 -> i16).
  bool ua = a == DType::U8, ub = b == DType::U8;
  if (ua || ub) {
    DType other = ua ? b : a;
    return other == DType::I8 ? DType::I16 : other;
  }
  return dtypeSize(a) >= dtypeSize(b) ? a : b;
}

DType defaultDTypeFor(DTypeCategory c) {
  switch (c) {
  case DTypeCategory::Bool: return DType::Bool;
  case DTypeCategory::Integer: return DType::I64;
  case DTypeCategory::Floating: return DType::F32;
  }
  return DType::F32;
}

} // namespace xjit
