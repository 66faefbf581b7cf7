// The subset of the DLPack C ABI (https://github.com/dmlc/dlpack, v1.x) the frontend uses to
// exchange tensors with PyTorch without linking libtorch: the legacy capsule structs and the
// C exchange API that torch publishes as torch._C._dlpack_exchange_api() (no Python call per
// tensor). Layouts are fixed by the DLPack ABI; field names follow dlpack.h.
#pragma once

#include <cstdint>

namespace xjit::frontend::dlpack {

struct Version {
  uint32_t major;
  uint32_t minor;
};

enum DeviceType : int32_t { kDLCPU = 1, kDLCUDA = 2 };

struct Device {
  int32_t device_type;
  int32_t device_id;
};

enum DataTypeCode : uint8_t {
  kDLInt = 0,
  kDLUInt = 1,
  kDLFloat = 2,
  kDLOpaqueHandle = 3,
  kDLBfloat = 4,
  kDLComplex = 5,
  kDLBool = 6,
};

struct DataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};

struct DLTensor {
  void *data;
  Device device;
  int32_t ndim;
  DataType dtype;
  int64_t *shape;
  int64_t *strides; // in elements; NULL means compact row-major
  uint64_t byte_offset;
};

/// The pre-1.0 managed tensor, carried in a capsule named "dltensor".
struct ManagedTensor {
  DLTensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(ManagedTensor *self);
};

struct ManagedTensorVersioned {
  Version version;
  void *manager_ctx;
  void (*deleter)(ManagedTensorVersioned *self);
  uint64_t flags;
  DLTensor dl_tensor;
};

inline constexpr uint32_t kMajorVersion = 1;

using ManagedTensorAllocator = int (*)(DLTensor *prototype, ManagedTensorVersioned **out,
                                       void *error_ctx,
                                       void (*SetError)(void *, const char *, const char *));
using ManagedTensorFromPyObjectNoSync = int (*)(void *py_object, ManagedTensorVersioned **out);
using ManagedTensorToPyObjectNoSync = int (*)(ManagedTensorVersioned *tensor, void **out_py_object);
using DLTensorFromPyObjectNoSync = int (*)(void *py_object, DLTensor *out);
using CurrentWorkStream = int (*)(int32_t device_type, int32_t device_id, void **out_stream);

struct ExchangeAPIHeader {
  Version version;
  ExchangeAPIHeader *prev_api;
};

/// Capsule "dlpack_exchange_api". Functions return 0 on success, -1 with a Python error set.
struct ExchangeAPI {
  ExchangeAPIHeader header;
  ManagedTensorAllocator managed_tensor_allocator;
  ManagedTensorFromPyObjectNoSync managed_tensor_from_py_object_no_sync;
  ManagedTensorToPyObjectNoSync managed_tensor_to_py_object_no_sync;
  DLTensorFromPyObjectNoSync dltensor_from_py_object_no_sync; // may be NULL
  CurrentWorkStream current_work_stream;
};

} // namespace xjit::frontend::dlpack
