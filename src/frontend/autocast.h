// torch.autocast on the CPU as the analyzer models it: the state a frame is captured under (part
// of its compiled entry's key) and the cast policy of each autocast-listed PyTorch function.
#pragma once

#include "xjit/ir/dtype.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace xjit::frontend {

/// CPU autocast: torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"),
/// torch.is_autocast_cache_enabled().
struct AutocastState {
  bool enabled = false;
  DType dtype = DType::BF16;
  bool cache = true;
  bool operator==(const AutocastState &) const = default;
  /// What a compiled entry is keyed on: 0 while disabled (the dtype matters only to a
  /// `torch.autocast("cpu")` without a dtype inside the frame, which needs the default bf16).
  uint32_t key() const;
};

/// The calling thread's autocast state, or nullopt (with `why`) when autocast is on for another
/// device than the CPU, or its dtype is neither bf16 nor f16. Four C calls.
std::optional<AutocastState> ambientAutocast(std::string *why = nullptr);

/// Whether eager runs f32 matmuls in bf16 now: PyTorch's mkldnn matmul precision is "bf16"
/// (torch.set_float32_matmul_precision("medium"), torch.backends.mkldnn.matmul.fp32_precision,
/// or the mkldnn or generic "all" setting it inherits) with torch.backends.mkldnn enabled. A
/// capture under it marks its products (the bf16-products pass) and runs only under it. Up to
/// four C calls; false on a torch without these settings.
bool ambientMatmulBf16();

/// How eager autocast treats the floating (not f64) tensor arguments of an op
/// (aten/src/ATen/autocast_mode.cpp, the AutocastCPU kernels).
enum class AutocastPolicy : uint8_t {
  None,    // not listed: the op runs on its inputs' dtypes (type promotion)
  Lower,   // lower_precision_fp: cast to the autocast dtype (matmuls, convolutions, sdpa)
  F32,     // fp32: cast to float32 (losses, cdist, prod, linear algebra)
  Promote, // promote: cast to the widest of them (cat, stack, index_copy)
  Refuse,  // listed only for some arguments (F.pad's reflect/replicate modes): not modeled
};
/// The policy of a torch function, tensor method or torch.nn.functional function, by its name
/// (the last component: "linear", "mse_loss", "cat").
AutocastPolicy autocastPolicy(std::string_view name);

} // namespace xjit::frontend
