// Guards compiled for fast checking at every call of a cached entry: attribute names interned,
// expected dtypes/devices decoded once, tensors read through one DLPack view per source
// (dtype, device, sizes, strides) plus requires_grad, objects compared by identity where the
// guard allows, and symbolic dims bound consistently across all the guards of an entry.
#pragma once

#include "sources.h"

#include "xjit/frontend/capture.h"
#include "xjit/ir/dim.h"

#include <string>
#include <vector>

namespace xjit::frontend {

struct GuardFailure {
  int guard = -1;     // index into the guard list
  std::string detail; // the part that failed, e.g. "L['x'] size(0) == 4"
  std::string source; // the guarded source, e.g. "L['x']"
  bool size = false;  // a tensor size differed (automatic dynamic shapes react to this)
};

class GuardSet {
public:
  /// Compiles `guards`, adding their sources to `table`. Throws xjit::Error (internal) for a
  /// malformed guard (unknown dtype, device...).
  GuardSet(const std::vector<Guard> &guards, SourceTable &table);
  /// True if every guard holds; else false with the first failing guard in *why (if given).
  /// Never leaves a Python error set.
  bool check(SourceValues &values, GuardFailure *why) const;
  size_t size() const { return guards_.size(); }
  /// The dims of tensor guards whose static sizes differ from `values` (rank matching), as
  /// dynamicDimKey()s: what automatic dynamic shapes makes symbolic after a size miss.
  std::vector<std::string> sizeMismatches(SourceValues &values) const;
  /// The sources of Equals guards on a Python int or float whose value is now another number
  /// of its type: what automatic dynamic makes symbolic after a miss (a symbolic int, a float
  /// graph input; bools stay specialized).
  std::vector<std::string> numberMismatches(SourceValues &values) const;
  /// The sources of IdIs guards on an nn.Module that now hold another instance of the same
  /// class: what a recompile guards by type instead (AnalyzeOptions::sharedModules).
  std::vector<std::string> sharableModules(SourceValues &values) const;
  /// Human-readable form of each guard.
  std::vector<std::string> descriptions() const;

private:
  struct Compiled {
    Guard::Kind kind;
    int slot = -1; // -1: no source (GlobalStateIs)
    PyRef object;  // expected object / weak reference for IdIs when possible
    bool weak = false;
    int64_t length = 0;
    // TensorMatch
    int dtype = -1; // xjit::DType
    int32_t deviceType = 0, deviceId = 0;
    bool requiresGrad = false;
    std::vector<int64_t> sizes, strides;
    std::vector<int> symbols;   // per dim: -1 static, else the symbol's index (IntSymbol: one)
    std::vector<int8_t> layout; // the layout class (output_layout.h); empty: not checked
    // SizeAtMost: lhs <= rhs, evaluated after every tensor guard has bound its symbols
    DimExpr lhs, rhs;
    std::vector<int> others; // NoOverlap: the other tensors' slots
    std::string description;
  };
  bool checkOne(const Compiled &g, SourceValues &values, std::vector<int64_t> &bound,
                GuardFailure *why) const;
  bool checkTensor(const Compiled &g, SourceValues &values, std::vector<int64_t> &bound,
                   GuardFailure *why) const;
  bool checkIntSymbol(const Compiled &g, PyObject *v, std::vector<int64_t> &bound,
                      GuardFailure *why) const;
  /// `symbols`: what the tensor guards bound (an unbound symbol fails the guard).
  bool checkSizeAtMost(const Compiled &g, const SymbolBindings &symbols, GuardFailure *why) const;
  std::vector<Compiled> guards_;
  std::vector<std::string> sourceText_; // per guard
  std::vector<std::string> symbolNames_;
  bool hasSizeRelations_ = false;
};

} // namespace xjit::frontend
