// Writes graphs as IR text (format: docs/ir.md). parse(print(g)) reproduces g, and printing
// that again gives the same text.
#pragma once

#include "xjit/ir/ir.h"

#include <ostream>
#include <string>

namespace xjit {

struct PrintOptions {
  bool printLocations = true;
};

std::string printGraph(const Graph &g, const PrintOptions &opts = {});
void printGraph(std::ostream &os, const Graph &g, const PrintOptions &opts = {});
/// One op (with its regions), for diagnostics and dumps; value names are local guesses.
std::string printOp(const Op &op);

} // namespace xjit
