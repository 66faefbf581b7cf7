// Group boundaries of the grouped matrix products (grouped_mm, grouped_mm_weight), shared by
// their reference kernels (grouped.cpp) and the CPU target's library kernel.
#pragma once

#include "xjit/ir/tensor.h"

#include <cstdint>
#include <string_view>
#include <vector>

namespace xjit::ops::nn {

/// The end row of each group from `offs` ([E] cumulative row counts, any integer dtype): group
/// e covers rows [ends[e-1], ends[e]) (ends[-1] = 0), rows from ends[E-1] on belong to none.
/// Throws KernelError naming `op` unless the ends are non-decreasing within [0, rows].
std::vector<int64_t> groupEnds(std::string_view op, const Tensor &offs, int64_t rows);

} // namespace xjit::ops::nn
