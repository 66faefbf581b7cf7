// Helpers shared by the tests that run whole graphs twice (passes, runtime): deep copies of run
// inputs, so that each run gets its own tensors (in-place ops write their inputs).
#pragma once

#include "xjit/ir/value.h"

#include <vector>

namespace xjit::testutil {

inline RtValue deepCopy(const RtValue &v) {
  if (v.isTensor()) return RtValue(v.tensor().contiguousCopy());
  if (v.isList()) {
    RtList l;
    for (const RtValue &e : v.list())
      l.push_back(deepCopy(e));
    return RtValue(std::move(l));
  }
  return v;
}

inline std::vector<RtValue> deepCopy(const std::vector<RtValue> &vs) {
  std::vector<RtValue> out;
  for (const RtValue &v : vs)
    out.push_back(deepCopy(v));
  return out;
}

} // namespace xjit::testutil
