// Element types of tensors and PyTorch's type-promotion rules over them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace xjit {

enum class DType : uint8_t { Bool, U8, I8, I16, I32, I64, F16, BF16, F32, F64 };

inline constexpr int kNumDTypes = 10;

/// Coarse kind used by promotion: bool < integer < floating.
enum class DTypeCategory : uint8_t { Bool = 0, Integer = 1, Floating = 2 };

std::string_view dtypeName(DType t);               // "f32", "i64", "bool", ...
std::optional<DType> parseDType(std::string_view); // inverse of dtypeName
int64_t dtypeSize(DType t);                        // bytes per element
DTypeCategory dtypeCategory(DType t);
inline bool isFloating(DType t) { return dtypeCategory(t) == DTypeCategory::Floating; }
inline bool isIntegral(DType t) { return dtypeCategory(t) == DTypeCategory::Integer; }

/// torch.promote_types(a, b).
DType promoteTypes(DType a, DType b);

/// The dtype PyTorch gives a Python scalar of this category (int -> i64, float -> f32 default
/// dtype, bool -> bool).
DType defaultDTypeFor(DTypeCategory c);

} // namespace xjit
