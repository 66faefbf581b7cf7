// The reference interpreter: runs any graph, If and Loop included, on host tensors with the
// registry's reference kernels. It defines what a graph computes; passes and backends are
// checked against it.
#pragma once

#include "xjit/ir/ir.h"
#include "xjit/ir/diagnostics.h"
#include "xjit/ir/value.h"

#include <functional>
#include <vector>

namespace xjit {

struct InterpreterOptions {
  /// Check that run-time shapes/dtypes of every result match the declared types, binding
  /// shape symbols consistently. Costs little; on by default.
  bool checkTypes = true;
};

/// Runs g on inputs; returns the graph outputs. Errors (wrong inputs, a kernel failure) throw
/// xjit::Error naming the op and its source location.
std::vector<RtValue> interpret(const Graph &g, std::vector<RtValue> inputs,
                               const InterpreterOptions &opts = {});

/// Runs one block whose ops use only its arguments and values defined inside it (the body of a
/// `fusion` op): binds `args` to the block arguments and returns the terminator's operands.
std::vector<RtValue> interpretBlock(const Block &b, std::vector<RtValue> args,
                                    const InterpreterOptions &opts = {});

} // namespace xjit
