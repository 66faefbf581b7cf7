// The pass manager. Every pass is one file in src/passes with a one-line purpose and one row in
// the pass table (src/passes/pass_table.cpp): name, summary, options, statistics, entry point.
// A pass returns whether it changed the graph and must be idempotent: a second run on its own
// output changes nothing.
#pragma once

#include "xjit/ir/ir.h"
#include "xjit/ir/tensor.h"

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace xjit::passes {

/// What a pass run is given: its options (from the pipeline text, with the table's defaults
/// filled in) and counters it reports, e.g. stats["ops-removed"] += 1.
class PassContext {
public:
  explicit PassContext(std::map<std::string, std::string> options = {})
      : options_(std::move(options)) {}
  const std::string &option(const std::string &name) const; // throws if undeclared
  int64_t intOption(const std::string &name) const;
  bool boolOption(const std::string &name) const;
  std::map<std::string, int64_t> &stats() { return stats_; }
  void count(const std::string &stat, int64_t n = 1) { stats_[stat] += n; }

private:
  std::map<std::string, std::string> options_;
  std::map<std::string, int64_t> stats_;
};

struct PassOption {
  std::string name;
  std::string defaultValue;
  std::string help;
};

struct PassInfo {
  std::string name;    // "dce"
  std::string summary; // one line
  std::vector<PassOption> options;
  std::vector<std::string> statistics; // names of the counters it reports
  bool (*run)(Graph &, PassContext &);
};

/// The one pass table, in a stable order.
const std::vector<PassInfo> &passTable();
const PassInfo *lookupPass(const std::string &name);

/// One step of a pipeline: a pass with its options.
struct PassStep {
  const PassInfo *pass;
  std::map<std::string, std::string> options;
};

/// Parses "canonicalize,cse,dce" or "fuse{max-group-size=32},dce", or a named pipeline
/// ("inference"). Throws xjit::Error (user) for an unknown pass or option.
std::vector<PassStep> parsePipeline(const std::string &text);
/// The named default pipelines, e.g. "inference".
const std::map<std::string, std::string> &namedPipelines();

/// What one step did.
struct PassRecord {
  std::string name;
  bool changed = false;
  double milliseconds = 0;
  size_t opsBefore = 0, opsAfter = 0;
  std::map<std::string, int64_t> stats;
};

struct PassManagerOptions {
  bool verifyEach = false;   // run the verifier after every pass (tests, debug builds)
  std::string dumpDir;       // write the IR after each pass as NN-name.xir
  bool log = false;          // per-pass time and statistics to stderr (XJIT_LOG=passes)
};

class PassManager {
public:
  explicit PassManager(PassManagerOptions opts = {}) : opts_(std::move(opts)) {}
  void add(PassStep step) { steps_.push_back(std::move(step)); }
  void addPipeline(const std::string &text);
  /// Runs every step in order; a verifier failure after a pass throws xjit::Error (internal)
  /// naming the pass.
  std::vector<PassRecord> run(Graph &g) const;

private:
  PassManagerOptions opts_;
  std::vector<PassStep> steps_;
};

/// Parameters for freezing. A module's parameters and buffers reach the compiler as graph
/// inputs (or, from the frontend/importer for small models, already as `constant` ops). When
/// compiling for inference their values are known: bindParameters replaces the given inputs
/// (index -> value, indices of the graph as it is now) by `constant` ops holding the values
/// and removes those inputs, so that `freeze` (batch norm folding) and `constant-fold` see them.
/// Throws xjit::Error (user) for an index out of range or a value whose dtype or static shape
/// differs from the input's type. Implemented in src/passes/freeze.cpp.
void bindParameters(Graph &g, const std::map<size_t, Tensor> &values);

} // namespace xjit::passes
