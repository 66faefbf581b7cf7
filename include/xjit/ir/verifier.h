// Checks a graph's invariants: SSA dominance, operand/attribute contracts from the registry,
// declared result types equal to the inferred ones, region structure, yield/return arity and
// types. Every message names the op and its source location.
#pragma once

#include "xjit/ir/ir.h"

#include <string>
#include <vector>

namespace xjit {

/// One problem: the op it concerns (nullptr for the graph as a whole) and what is wrong.
struct VerifyDiagnostic {
  const Op *op;
  std::string message;
  /// "<op describe()>: <message>", or the bare message without an op.
  std::string str() const;
};

/// All problems found, in program order, with the op each concerns (for tools that map them
/// back to text positions).
std::vector<VerifyDiagnostic> verifyGraphDiagnostics(const Graph &g);
/// All problems found (empty if the graph is valid), as VerifyDiagnostic::str().
std::vector<std::string> verifyGraph(const Graph &g);
/// Throws VerifyError for the first problem.
void verifyOrThrow(const Graph &g);

} // namespace xjit
