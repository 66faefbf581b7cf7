// xjit-opt: reads IR text, verifies it, runs passes, prints IR.
//
//   xjit-opt [file|-] [--passes=PIPELINE] [--list-ops] [--list-passes] [--verify-diagnostics]
//            [--no-verify] [--no-locs] [-o out] [--dump-after-each] [--dump-dir=DIR] [--stats]
//
// PIPELINE is the pass manager's syntax (include/xjit/passes/pass.h): passes separated by
// commas, options in braces (`fuse{max-group-size=8}`), or a named pipeline (`inference`).
// The verifier runs on the input and after every pass (--verify-each, the default;
// --no-verify turns both off). --dump-after-each prints the IR after each pass to stderr;
// --dump-dir=DIR writes it to DIR/NN-pass.xir. --stats prints each pass's time, op counts and
// statistics to stderr, as XJIT_LOG=passes does per graph.
//
// Exit codes: 0 ok, 1 user error (bad IR or arguments: "file:line:col: error: ..."), 2
// internal error (a bug in xjit, e.g. a pass that leaves invalid IR).
//
// --verify-diagnostics checks that the diagnostics (parse errors and verifier messages) are
// exactly those announced by annotations in the input, as MLIR's mode of the same name does:
//   // expected-error {{text}}      a diagnostic on this line whose message contains text
//   // expected-error@+1 {{text}}   ... on the next line (@-N, @+N: relative lines)
#include "xjit/ir/diagnostics.h"
#include "xjit/ir/op_registry.h"
#include "xjit/ir/parser.h"
#include "xjit/ir/printer.h"
#include "xjit/ir/verifier.h"
#include "xjit/passes/pass.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace {

using namespace xjit;

struct Options {
  std::string input = "-";
  std::string output = "-";
  std::string pipeline;
  std::string dumpDir;
  bool listOps = false, listPasses = false, verifyDiagnostics = false;
  bool verify = true, dumpAfterEach = false, printLocations = true, stats = false;
};

/// Bad command line or input: reported as is, exit code 1.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

const char *kUsage =
    "usage: xjit-opt [file|-] [--passes=PIPELINE] [--list-ops] [--list-passes]\n"
    "                [--verify-diagnostics] [--verify-each | --no-verify] [--no-locs]\n"
    "                [-o out] [--dump-after-each] [--dump-dir=DIR] [--stats]\n"
    "PIPELINE: pass names separated by commas, options in braces (fuse{max-group-size=8}),\n"
    "or a named pipeline (inference); --list-passes shows them.\n";

Options parseArgs(int argc, char **argv) {
  Options o;
  bool haveInput = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--passes=", 0) == 0)
      o.pipeline = a.substr(9);
    else if (a == "--passes" && i + 1 < argc)
      o.pipeline = argv[++i];
    else if (a.rfind("--dump-dir=", 0) == 0)
      o.dumpDir = a.substr(11);
    else if (a == "--verify-each")
      o.verify = true;
    else if (a == "--stats")
      o.stats = true;
    else if (a == "--list-ops")
      o.listOps = true;
    else if (a == "--list-passes")
      o.listPasses = true;
    else if (a == "--verify-diagnostics")
      o.verifyDiagnostics = true;
    else if (a == "--no-verify")
      o.verify = false;
    else if (a == "--no-locs")
      o.printLocations = false;
    else if (a == "--dump-after-each")
      o.dumpAfterEach = true;
    else if (a == "-o" && i + 1 < argc)
      o.output = argv[++i];
    else if (a == "-h" || a == "--help") {
      std::cout << kUsage;
      std::exit(0);
    } else if (a != "-" && a.rfind('-', 0) == 0) {
      throw UsageError("unknown option '" + a + "'\n" + kUsage);
    } else if (haveInput) {
      throw UsageError("more than one input file given\n" + std::string(kUsage));
    } else {
      o.input = a;
      haveInput = true;
    }
  }
  return o;
}

std::string readInput(const std::string &path) {
  if (path == "-") return std::string(std::istreambuf_iterator<char>(std::cin), {});
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError("cannot open '" + path + "'");
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string displayName(const std::string &path) { return path == "-" ? "<stdin>" : path; }

/// A verifier diagnostic positioned at its op's text (or the graph header).
struct Located {
  int line, col;
  std::string message;
};

std::vector<Located> verifyModule(const std::vector<std::unique_ptr<Graph>> &graphs,
                                  const TextPositions &pos) {
  std::vector<Located> out;
  for (const auto &g : graphs)
    for (const auto &d : verifyGraphDiagnostics(*g)) {
      TextPosition p;
      if (auto it = d.op ? pos.ops.find(d.op) : pos.ops.end(); it != pos.ops.end())
        p = it->second;
      else if (auto gt = pos.graphs.find(g.get()); gt != pos.graphs.end())
        p = gt->second;
      out.push_back({p.line, p.col, d.str()});
    }
  return out;
}

struct Expectation {
  int line;
  std::string text;
  int annotationLine;
  bool matched = false;
};

std::vector<Expectation> readExpectations(const std::string &src) {
  static const std::regex re(R"(expected-error(@([+-]?[0-9]+))?\s*\{\{(.*?)\}\})");
  std::vector<Expectation> out;
  std::istringstream in(src);
  int lineNo = 0;
  for (std::string line; std::getline(in, line);) {
    ++lineNo;
    for (std::sregex_iterator it(line.begin(), line.end(), re), end; it != end; ++it) {
      int target = lineNo;
      if ((*it)[2].matched) {
        std::string off = (*it)[2].str();
        target = off[0] == '+' || off[0] == '-' ? lineNo + std::stoi(off) : std::stoi(off);
      }
      out.push_back({target, (*it)[3].str(), lineNo});
    }
  }
  return out;
}

/// --verify-diagnostics: every diagnostic must be expected on its line and
/// every expectation met.
int checkDiagnostics(const Options &o, const std::string &src) {
  std::string file = displayName(o.input);
  std::vector<Located> diags;
  try {
    TextPositions pos;
    auto graphs = parseModule(src, file, &pos);
    diags = verifyModule(graphs, pos);
  } catch (const ParseError &e) {
    diags.push_back({e.line(), e.col(), e.message()});
  }
  auto expectations = readExpectations(src);
  bool ok = true;
  for (const Located &d : diags) {
    bool found = false;
    for (Expectation &x : expectations)
      if (x.line == d.line && d.message.find(x.text) != std::string::npos) found = x.matched = true;
    if (!found) {
      std::cerr << file << ":" << d.line << ":" << d.col
                << ": error: unexpected error: " << d.message << "\n";
      ok = false;
    }
  }
  for (const Expectation &x : expectations)
    if (!x.matched) {
      std::cerr << file << ":" << x.annotationLine << ": error: expected error on line " << x.line
                << " was not produced: " << x.text << "\n";
      ok = false;
    }
  return ok ? 0 : 1;
}

/// One block per pass: name and summary, then its options and statistics.
void listPasses() {
  for (const passes::PassInfo &p : passes::passTable()) {
    std::cout << p.name << "\n  " << p.summary << "\n";
    for (const passes::PassOption &opt : p.options)
      std::cout << "  option " << opt.name << " (default '" << opt.defaultValue
                << "'): " << opt.help << "\n";
    if (!p.statistics.empty()) {
      std::cout << "  statistics:";
      for (const std::string &s : p.statistics)
        std::cout << " " << s;
      std::cout << "\n";
    }
  }
  for (const auto &[name, pipeline] : passes::namedPipelines())
    std::cout << "pipeline " << name << " = " << pipeline << "\n";
}

void printStats(const std::vector<passes::PassRecord> &records) {
  double total = 0;
  std::fprintf(stderr, "%-22s %10s %8s %8s  %s\n", "pass", "ms", "ops in", "ops out", "statistics");
  for (const passes::PassRecord &r : records) {
    total += r.milliseconds;
    std::string stats;
    for (const auto &[k, v] : r.stats)
      stats += (stats.empty() ? "" : " ") + k + "=" + std::to_string(v);
    std::fprintf(stderr, "%-22s %10.3f %8zu %8zu  %s\n", r.name.c_str(), r.milliseconds,
                 r.opsBefore, r.opsAfter, stats.c_str());
  }
  std::fprintf(stderr, "%-22s %10.3f\n", "total", total);
}

int run(const Options &o) {
  if (o.listOps) {
    for (const OpDef *d : OpRegistry::instance().all())
      std::cout << d->name << "\n";
    return 0;
  }
  if (o.listPasses) {
    listPasses();
    return 0;
  }
  std::vector<passes::PassStep> steps = passes::parsePipeline(o.pipeline);

  std::string src = readInput(o.input);
  if (o.verifyDiagnostics) return checkDiagnostics(o, src);

  std::string file = displayName(o.input);
  TextPositions pos;
  auto graphs = parseModule(src, file, &pos);
  auto verify = [&](const std::string &after) {
    if (!o.verify) return true;
    auto diags = verifyModule(graphs, pos);
    for (const Located &d : diags) {
      std::cerr << file << ":" << d.line << ":" << d.col << ": error: " << d.message;
      if (!after.empty()) std::cerr << " (after pass '" << after << "')";
      std::cerr << "\n";
    }
    return diags.empty();
  };
  if (!verify("")) return 1;

  PrintOptions popts;
  popts.printLocations = o.printLocations;
  auto printModule = [&](std::ostream &out) {
    for (size_t i = 0; i < graphs.size(); ++i) {
      if (i) out << "\n";
      printGraph(out, *graphs[i], popts);
    }
  };
  passes::PassManagerOptions pmOpts;
  const char *log = std::getenv("XJIT_LOG");
  pmOpts.log = log && std::string(log).find("passes") != std::string::npos;
  if (!o.dumpDir.empty()) {
    std::filesystem::create_directories(o.dumpDir);
    std::ofstream input(o.dumpDir + "/00-input.xir");
    printModule(input);
  }
  std::vector<passes::PassRecord> totals;
  for (size_t i = 0; i < steps.size(); ++i) {
    passes::PassManager pm(pmOpts);
    pm.add(steps[i]);
    passes::PassRecord total;
    total.name = steps[i].pass->name;
    for (auto &g : graphs)
      for (const passes::PassRecord &r : pm.run(*g)) {
        total.changed |= r.changed;
        total.milliseconds += r.milliseconds;
        total.opsBefore += r.opsBefore;
        total.opsAfter += r.opsAfter;
        for (const auto &[k, v] : r.stats)
          total.stats[k] += v;
      }
    totals.push_back(total);
    // The input verified, so a verifier error now is a bug in the pass.
    if (!verify(total.name)) return 2;
    if (o.dumpAfterEach) {
      std::cerr << "// ----- IR after " << total.name << " ----- //\n";
      printModule(std::cerr);
    }
    if (!o.dumpDir.empty()) {
      char file[96];
      std::snprintf(file, sizeof file, "/%02zu-%s.xir", i + 1, total.name.c_str());
      std::ofstream dump(o.dumpDir + file);
      printModule(dump);
    }
  }
  if (o.stats) printStats(totals);

  std::ofstream file_out;
  if (o.output != "-") {
    file_out.open(o.output, std::ios::binary);
    if (!file_out) throw UsageError("cannot write '" + o.output + "'");
  }
  std::ostream &out = o.output == "-" ? std::cout : file_out;
  printModule(out);
  out.flush();
  if (!out) throw UsageError("error writing '" + displayName(o.output) + "'");
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  try {
    return run(parseArgs(argc, argv));
  } catch (const UsageError &e) {
    std::cerr << "xjit-opt: error: " << e.what() << "\n";
    return 1;
  } catch (const xjit::Error &e) {
    // ParseError and VerifyError already carry "file:line:col: error:" or the
    // op's location.
    std::string msg = e.what();
    bool positioned = msg.find(": error: ") != std::string::npos;
    std::cerr << (positioned ? "" : "xjit-opt: error: ") << msg << "\n";
    if (!e.hint().empty()) std::cerr << "note: " << e.hint() << "\n";
    return e.kind() == xjit::ErrorKind::User ? 1 : 2;
  } catch (const std::exception &e) {
    std::cerr << "xjit-opt: internal error: " << e.what() << "\n";
    return 2;
  }
}
