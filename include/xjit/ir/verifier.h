// Checks a graph's invariants: SSA dominance, operand/attribute contracts from the registry,
// declared result types equal to the inferred ones, region structure, yield/return arity and
// types. Every message names the op and its source location.
#pragma once

#include "xjit/ir/ir.h"

#include <string>
#include <vector>

namespace xjit {

/// All problems found (empty if the graph is valid).
std::vector<std::string> verifyGraph(const Graph &g);
/// Throws VerifyError for the first problem.
void verifyOrThrow(const Graph &g);

} // namespace xjit
