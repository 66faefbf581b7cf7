// A seeded generator of random, valid graphs over the whole op registry (If and Loop
// included), and the checks run on each: verifier, print/parse round trip, and the reference
// interpreter on random inputs (which may reject inputs, but must never crash or report an
// internal error).
#pragma once

#include "xjit/ir/ir.h"
#include "xjit/ir/value.h"

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace xjit::testing {

struct RandomGraphOptions {
  int maxOps = 24;         // ops per block, before discards
  int maxInputs = 4;
  int maxNesting = 2;      // If/Loop depth
  double symbolicDimRate = 0.2;
};

/// A graph and inputs that fit its input types (shape symbols bound consistently).
struct RandomCase {
  std::unique_ptr<Graph> graph;
  std::vector<RtValue> inputs;
};

RandomCase randomGraph(uint64_t seed, const RandomGraphOptions &opts = {});

struct CheckResult {
  std::string failure; // "" or what failed, with the seed and the graph text
  size_t ops = 0;
  bool inputsRejected = false; // the interpreter refused the random inputs (a user error)
};
/// Runs every check on one generated graph.
CheckResult checkRandomGraph(uint64_t seed, const RandomGraphOptions &opts = {});

/// Statistics over a fuzzing run.
struct FuzzStats {
  int64_t graphs = 0, ops = 0, rejectedInputs = 0, failures = 0;
  std::vector<std::string> failureMessages; // first few
};
FuzzStats fuzz(uint64_t firstSeed, int64_t count, const RandomGraphOptions &opts = {},
               size_t keepMessages = 5);

} // namespace xjit::testing
