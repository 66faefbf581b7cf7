// Evaluating Sources (access paths such as L['self'].layers[2].weight) on a frame at call time.
// A SourceTable holds the sources of one compiled entry as a trie, so shared prefixes
// (L['self'].layers[2]) are evaluated once per call; SourceValues memoizes one call's values,
// including the DLPack view of each tensor (used by both the guards and the input fetch).
#pragma once

#include "dlpack_abi.h"
#include "py_util.h"

#include "xjit/frontend/capture.h"

#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace xjit::frontend {

class SourceTable {
public:
  /// Adds `s` (and its prefixes); returns the slot of the whole path.
  int add(const Source &s);
  size_t size() const { return nodes_.size(); }
  /// sourceStr of the path ending at `slot`.
  const std::string &str(int slot) const { return nodes_[static_cast<size_t>(slot)].text; }

private:
  friend class SourceValues;
  struct Node {
    int parent; // -1 for a root step (Local, Cell, Global)
    SourceStep::Kind kind;
    int64_t index;
    PyRef name; // interned str: local/global/attribute name
    PyRef key;  // DictKey key; Item: the index as an int object
    std::string text;
  };
  std::vector<Node> nodes_;
  // A step's signature: its parent node, kind, slot and text (stepStr). Locals and cells are
  // addressed by slot; two steps are the same when kind, slot/name and key agree.
  using Signature = std::tuple<int, int, int64_t, std::string>;
  std::map<Signature, int> bySignature_;
};

class SourceValues {
public:
  SourceValues(const SourceTable &table, const FrameView &frame);
  ~SourceValues();
  SourceValues(const SourceValues &) = delete;
  SourceValues &operator=(const SourceValues &) = delete;

  /// The object at `slot` (a reference owned by this), or nullptr when it cannot be
  /// evaluated (unbound local, missing attribute...; the Python error is cleared).
  PyObject *get(int slot);
  /// The DLPack view of the plain tensor at `slot` (valid during the call), or nullptr when it
  /// is not a torch.Tensor/nn.Parameter or cannot be exported (error cleared).
  const dlpack::DLTensor *tensor(int slot);
  const FrameView &frame() const { return frame_; }

private:
  struct Slot {
    PyObject *value = nullptr;
    uint8_t state = 0;  // 0: not evaluated, 1: ok, 2: failed
    uint8_t tstate = 0; // tensor view: 0 not taken, 1 ok, 2 failed
    dlpack::DLTensor dl;
  };
  PyObject *evaluate(const SourceTable::Node &n, PyObject *parent);
  const SourceTable &table_;
  const FrameView &frame_;
  std::vector<Slot> slots_;
};

/// The value of local-plus slot `index` of a frame at entry: free variables are read through
/// the function's closure (COPY_FREE_VARS has not run yet), cells through their contents.
/// Borrowed; nullptr if unbound.
PyObject *frameSlot(const FrameView &f, int64_t index, bool cell);

/// The closure cell object of free-variable slot `index` (the function's closure tuple);
/// borrowed; nullptr for a slot that is not a free variable.
PyObject *frameCell(const FrameView &f, int64_t index);

} // namespace xjit::frontend
