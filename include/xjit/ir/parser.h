// Reads IR text (format: docs/ir.md) into graphs. Malformed text throws ParseError with
// line:col; it never crashes. The parser checks syntax, names and op existence; semantic
// checks are the verifier's.
#pragma once

#include "xjit/ir/diagnostics.h"
#include "xjit/ir/ir.h"

#include <memory>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace xjit {

/// One graph. `filename` is used in error messages.
std::unique_ptr<Graph> parseGraph(std::string_view text, std::string_view filename = "<input>");
/// Every graph in a module text (zero or more `graph` definitions).
std::vector<std::unique_ptr<Graph>> parseModule(std::string_view text,
                                                std::string_view filename = "<input>");
/// Where parsed graphs and ops start in the text (1-based line and column), so tools can map
/// verifier diagnostics back to the text (xjit-opt --verify-diagnostics).
struct TextPosition {
  int line = 0;
  int col = 0;
};
struct TextPositions {
  std::unordered_map<const Graph *, TextPosition> graphs;
  std::unordered_map<const Op *, TextPosition> ops;
};
/// parseModule that also records positions into *positions.
std::vector<std::unique_ptr<Graph>> parseModule(std::string_view text, std::string_view filename,
                                                TextPositions *positions);
/// A type in text form, e.g. "f32[2,s0]".
Type parseType(std::string_view text);

} // namespace xjit
