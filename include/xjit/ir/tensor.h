// Host tensors: a shared byte buffer viewed through dtype, sizes, strides (in elements) and an
// element offset, like a strided PyTorch tensor. Used for constant attributes and by the
// reference interpreter. External memory (DLPack) is wrapped without copying.
#pragma once

#include "xjit/ir/dtype.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace xjit {

/// Where Storage(nbytes) takes buffers of 1 MiB or more from: returns 64-byte aligned memory
/// (not zero-filled) and sets `release`, or returns null for the default (aligned_alloc). Set
/// once by the CPU backend (host_buffers.cpp: the kept pages of released buffers), so that the
/// reference kernels' large results reuse memory as the target's buffers do.
using LargeStorageAllocator = void *(*)(int64_t nbytes, std::function<void()> *release);
void setLargeStorageAllocator(LargeStorageAllocator allocator);

/// Owns (or borrows, with a deleter) the bytes behind one or more tensors.
class Storage {
public:
  explicit Storage(int64_t nbytes); // zero-filled, 64-byte aligned
  Storage(void *data, int64_t nbytes, std::function<void()> release);
  ~Storage();
  Storage(const Storage &) = delete;
  Storage &operator=(const Storage &) = delete;
  void *data() const { return data_; }
  int64_t nbytes() const { return nbytes_; }

private:
  void *data_ = nullptr;
  int64_t nbytes_ = 0;
  std::function<void()> release_;
};

class Tensor {
public:
  Tensor() = default;
  /// A new contiguous, zero-filled tensor.
  static Tensor empty(DType dtype, std::vector<int64_t> sizes);
  /// A view on existing storage.
  Tensor(std::shared_ptr<Storage> storage, DType dtype, std::vector<int64_t> sizes,
         std::vector<int64_t> strides, int64_t offset = 0);

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  const std::vector<int64_t> &sizes() const { return sizes_; }
  const std::vector<int64_t> &strides() const { return strides_; }
  int64_t offset() const { return offset_; }
  int64_t rank() const { return static_cast<int64_t>(sizes_.size()); }
  int64_t size(int64_t dim) const { return sizes_.at(static_cast<size_t>(dim)); }
  int64_t numel() const;
  bool isContiguous() const;
  const std::shared_ptr<Storage> &storage() const { return storage_; }
  /// Address of element 0 (storage start + offset).
  char *data() const;

  /// Element access by linear row-major index over sizes (handles strides). Floating dtypes
  /// read as double; integer and bool dtypes as int64. Stores round to the dtype (f16/bf16
  /// round to nearest even; integers wrap like a C cast of int64).
  double getDouble(int64_t linearIndex) const;
  int64_t getInt(int64_t linearIndex) const;
  void setDouble(int64_t linearIndex, double v) const;
  void setInt(int64_t linearIndex, int64_t v) const;
  /// Element offset (in elements, from storage start) of a linear row-major index.
  int64_t elementOffset(int64_t linearIndex) const;

  /// A contiguous copy (always a new storage).
  Tensor contiguousCopy() const;
  /// Copy converted to another dtype (float->int truncates toward zero, like torch).
  Tensor to(DType dtype) const;
  /// A view with new sizes/strides/offset on the same storage.
  Tensor view(std::vector<int64_t> sizes, std::vector<int64_t> strides, int64_t offset) const;
  /// Copies src into this tensor elementwise (same numel; dtype converted).
  void copyFrom(const Tensor &src) const;

  /// Exact equality of dtype, sizes and element values (NaN equal to NaN).
  bool equals(const Tensor &o) const;

private:
  std::shared_ptr<Storage> storage_;
  DType dtype_ = DType::F32;
  std::vector<int64_t> sizes_, strides_;
  int64_t offset_ = 0;
};

std::vector<int64_t> contiguousStrides(const std::vector<int64_t> &sizes);

/// Raw element access at an element offset from `base` (a storage start), with the same
/// conversions as Tensor::getDouble / getInt / setDouble / setInt. For hot element loops.
double loadDouble(DType dtype, const void *base, int64_t elementOffset);
int64_t loadInt(DType dtype, const void *base, int64_t elementOffset);
void storeDouble(DType dtype, void *base, int64_t elementOffset, double v);
void storeInt(DType dtype, void *base, int64_t elementOffset, int64_t v);

// f16 / bf16 conversions with round-to-nearest-even.
uint16_t floatToHalf(float f);
float halfToFloat(uint16_t h);
uint16_t floatToBFloat16(float f);
float bfloat16ToFloat(uint16_t b);

} // namespace xjit
