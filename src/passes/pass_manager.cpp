// Pipelines of passes: parsing, running with timing, dumps, statistics and verification.
#include "xjit/passes/pass.h"

#include "xjit/ir/diagnostics.h"
#include "xjit/ir/printer.h"
#include "xjit/ir/verifier.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace xjit::passes {

const std::string &PassContext::option(const std::string &name) const {
  auto it = options_.find(name);
  if (it == options_.end()) throw std::logic_error("pass option '" + name + "' is not declared");
  return it->second;
}

int64_t PassContext::intOption(const std::string &name) const { return std::stoll(option(name)); }

bool PassContext::boolOption(const std::string &name) const {
  const std::string &v = option(name);
  return v == "true" || v == "1" || v == "on";
}

const PassInfo *lookupPass(const std::string &name) {
  for (const auto &p : passTable())
    if (p.name == name) return &p;
  return nullptr;
}

namespace {
std::string trim(const std::string &s) {
  size_t b = s.find_first_not_of(" \t\n"), e = s.find_last_not_of(" \t\n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

PassStep parseStep(const std::string &text) {
  std::string name = trim(text.substr(0, text.find('{')));
  const PassInfo *info = lookupPass(name);
  if (!info) {
    std::string known;
    for (const auto &p : passTable())
      known += (known.empty() ? "" : ", ") + p.name;
    throw Error(ErrorKind::User, "unknown pass '" + name + "'", "known passes: " + known);
  }
  PassStep step{info, {}};
  for (const auto &o : info->options)
    step.options[o.name] = o.defaultValue;
  if (size_t brace = text.find('{'); brace != std::string::npos) {
    if (text.back() != '}')
      throw Error(ErrorKind::User, "pass options of '" + name + "' must end with '}'");
    std::string body = text.substr(brace + 1, text.size() - brace - 2);
    size_t start = 0;
    while (start <= body.size()) {
      size_t end = body.find(' ', start);
      if (end == std::string::npos) end = body.size();
      std::string kv = trim(body.substr(start, end - start));
      start = end + 1;
      if (kv.empty()) continue;
      size_t eq = kv.find('=');
      std::string key = trim(kv.substr(0, eq)),
                  value = eq == std::string::npos ? "true" : trim(kv.substr(eq + 1));
      if (!step.options.count(key))
        throw Error(ErrorKind::User, "pass '" + name + "' has no option '" + key + "'");
      step.options[key] = value;
    }
  }
  return step;
}
} // namespace

const std::map<std::string, std::string> &namedPipelines() {
  static const std::map<std::string, std::string> pipelines = {
      // Cleanup: shapes first (pins feed folding), canonicalize again after folding and CSE
      // (a folded condition, x - x once CSE merged its operands), DCE last.
      {"cleanup", "shape-propagation,canonicalize,constant-fold,cse,canonicalize,dce"},
      // Graphs that are not differentiated run custom autograd Functions' forwards inline;
      // a training step's graph keeps them for autodiff (the frontend runs "cleanup" there).
      {"inference", "inline-custom-vjp,cleanup"},
  };
  return pipelines;
}

std::vector<PassStep> parsePipeline(const std::string &text) {
  if (auto it = namedPipelines().find(trim(text)); it != namedPipelines().end())
    return parsePipeline(it->second);
  std::vector<PassStep> steps;
  int depth = 0;
  std::string cur;
  for (char c : text + ",") {
    if (c == '{') ++depth;
    if (c == '}' && --depth < 0) break;
    if (c == ',' && depth == 0) {
      if (!trim(cur).empty()) {
        auto it = namedPipelines().find(trim(cur));
        if (it != namedPipelines().end())
          for (auto &s : parsePipeline(it->second))
            steps.push_back(std::move(s));
        else
          steps.push_back(parseStep(trim(cur)));
      }
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (depth != 0) throw Error(ErrorKind::User, "unbalanced braces in pass pipeline '" + text + "'");
  return steps;
}

void PassManager::addPipeline(const std::string &text) {
  for (auto &s : parsePipeline(text))
    add(std::move(s));
}

std::vector<PassRecord> PassManager::run(Graph &g) const {
  std::vector<PassRecord> records;
  if (!opts_.dumpDir.empty()) {
    std::filesystem::create_directories(opts_.dumpDir);
    std::ofstream(opts_.dumpDir + "/00-input.xir") << printGraph(g);
  }
  int index = 0;
  for (const auto &step : steps_) {
    ++index;
    PassContext ctx(step.options);
    PassRecord rec;
    rec.name = step.pass->name;
    rec.opsBefore = g.numOps();
    auto start = std::chrono::steady_clock::now();
    rec.changed = step.pass->run(g, ctx);
    rec.milliseconds =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    rec.opsAfter = g.numOps();
    rec.stats = ctx.stats();
    if (opts_.verifyEach) {
      auto errors = verifyGraph(g);
      if (!errors.empty())
        throw Error(ErrorKind::Internal,
                    "the IR is invalid after pass '" + rec.name + "': " + errors.front());
    }
    if (!opts_.dumpDir.empty()) {
      char file[64];
      std::snprintf(file, sizeof file, "/%02d-%s.xir", index, rec.name.c_str());
      std::ofstream(opts_.dumpDir + file) << printGraph(g);
    }
    if (opts_.log) {
      std::fprintf(stderr, "[xjit passes] %-20s %8.3f ms  ops %zu -> %zu%s", rec.name.c_str(),
                   rec.milliseconds, rec.opsBefore, rec.opsAfter, rec.changed ? "  changed" : "");
      for (const auto &[k, v] : rec.stats)
        std::fprintf(stderr, "  %s=%lld", k.c_str(), static_cast<long long>(v));
      std::fprintf(stderr, "\n");
    }
    records.push_back(std::move(rec));
  }
  return records;
}

} // namespace xjit::passes
