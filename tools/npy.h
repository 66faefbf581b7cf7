// A minimal, strict reader and writer of NumPy .npy files (format
// versions 1.0, 2.0 and 3.0) for the tensors of the IR.
//
// dtypes: f64 '<f8', f32 '<f4', f16 '<f2', i64 '<i8', i32 '<i4', i16 '<i2', i8
// '|i1', u8 '|u1', bool '|b1'. bf16 is not a numpy dtype; it is stored as the
// 2-byte void dtype '|V2' holding the raw little-endian bfloat16 bits, and any
// 2-byte void array reads as bf16. numpy loads such a file as dtype V2; recover
// the values with
// `(a.view('<u2').astype('<u4') << 16).view('<f4')`, or
// `a.view(ml_dtypes.bfloat16)`. Reading accepts '<', '|', '=' (native,
// little-endian on supported hosts) and big-endian '>' (byte-swapped on load);
// C and Fortran order (Fortran data is loaded as a column-major strided tensor,
// without a copy). Writing always produces little-endian, C-order, version 1.0
// (2.0 when the header does not fit), with the header padded to a multiple of
// 64 bytes like numpy.
#pragma once

#include "xjit/ir/tensor.h"

#include <string>
#include <string_view>

namespace xjit::npy {

/// Parses the bytes of a .npy file. Throws xjit::Error (ErrorKind::User) whose
/// message starts with `name` for malformed or unsupported content.
Tensor parse(std::string_view bytes, const std::string &name);
/// The bytes of a .npy file holding t (any strides).
std::string serialize(const Tensor &t);

/// File versions of parse / serialize; errors name the path.
Tensor read(const std::string &path);
void write(const std::string &path, const Tensor &t);

} // namespace xjit::npy
