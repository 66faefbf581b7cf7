// Content tags for the parameters a compiled entry reads (xjit/backend/content_tags.h), so that
// library kernels reorder a module's weights once instead of at every call, and again exactly
// when PyTorch says they may have changed.
//
// A parameter keeps its tag while three things stay the same: the Parameter object, its data
// pointer and its version counter (`tensor._version`, which PyTorch bumps on every in-place
// change through the tensor or any view of it: optimizer steps, `load_state_dict`'s copy_,
// `weight.mul_(2)` under no_grad). Replacing `.data` keeps the version but changes the data
// pointer. The storage (`untyped_storage()`) is held while the tag is in use, and the Parameter
// through a weak reference whose callback drops the record when it dies, so neither address can
// be reused by another tensor under the same tag (the test of `.data`
// replacement failed with a pin through a DLPack export, which references the parameter's
// TensorImpl, whose storage `.data = ...` swaps in place).
//
// Not seen (documented in docs/backend.md): writes through an alias with its own version
// counter, i.e. `param.data.add_(...)`, `param.numpy()[...] = ...` or another DLPack view.
// Eager PyTorch sees those writes, so the tags are opt-in (a stale weight would be a wrong
// answer): `xjit.jit(..., weight_cache=True)`, `python -m xjit --weight-cache`, or
// XJIT_WEIGHT_CACHE=1 for every scope.
#pragma once

#include "py_util.h"

#include "xjit/backend/content_tags.h"

#include <cstdint>
#include <vector>

namespace xjit::frontend {

/// Whether XJIT_WEIGHT_CACHE=1 tags parameters in every scope, whatever its options say (read
/// once).
bool weightCacheForced();

/// One compiled entry's record of its parameter inputs. Used under the GIL.
class ParameterVersions {
public:
  ParameterVersions() = default;
  ParameterVersions(const ParameterVersions &) = delete;
  ParameterVersions &operator=(const ParameterVersions &) = delete;
  ~ParameterVersions();

  /// Adds to `tags` the tag of graph input `input`, the nn.Parameter `param` whose element 0
  /// is at `data`: the previous call's tag while the parameter is unchanged, else a new one.
  /// Adds nothing when the version cannot be read (the Python error is cleared).
  void tag(size_t input, PyObject *param, const void *data, backend::ContentTags &tags);

private:
  struct Seen {
    PyObject *param = nullptr; // a weak reference to the Parameter, whose callback forgets it
    const void *data = nullptr;
    int64_t version = -1;
    uint64_t tag = 0;
    PyObject *pin = nullptr; // the storage at `data` (param.untyped_storage()), kept alive
  };
  static void release(Seen &s);
  /// The weakref callback: a Parameter died, so its storage is no longer pinned (a dropped
  /// model's weights are freed) and whatever comes next at its address gets a new tag.
  static PyObject *forget(PyObject *self, PyObject *weakref);
  std::vector<Seen> seen_;      // by graph input
  PyObject *onDeath_ = nullptr; // the callback bound to this object (made on first use)
};

} // namespace xjit::frontend
