// XJIT_PROFILE: per-instruction-kind run time of compiled graphs (see profile.h).
#include "profile.h"

#include "xjit/ir/op_registry.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace xjit::runtime {
struct ProfileRow {
  std::string label;
  std::atomic<int64_t> calls{0};
  std::atomic<int64_t> ns{0};
  explicit ProfileRow(std::string l) : label(std::move(l)) {}
};

namespace {

using Row = ProfileRow;

struct Registry {
  std::mutex mutex;
  std::deque<Row> rows; // a deque: rows never move, so instructions hold their addresses
  std::unordered_map<std::string, Row *> index;
};

Registry &registry() {
  static Registry *r = new Registry(); // never destroyed: read by the exit handler
  return *r;
}

void printAtExit() {
  std::string report = profileReport();
  if (!report.empty()) std::fputs(report.c_str(), stderr);
}

} // namespace

namespace {
std::atomic<int> &levelFlag() {
  static std::atomic<int> level = [] {
    const char *v = std::getenv("XJIT_PROFILE");
    if (!v || !*v || std::string_view(v) == "0") return 0;
    std::atexit(printAtExit);
    return std::string_view(v) == "op" ? 2 : 1;
  }();
  return level;
}
} // namespace

int profileLevel() { return levelFlag().load(std::memory_order_relaxed); }

void setProfileLevel(int level) { levelFlag().store(level, std::memory_order_relaxed); }

std::string profileLabel(const Op &op) {
  if (op.name() != "fusion" || op.numRegions() != 1) return op.name();
  std::string kind = op.hasAttr("kind") ? op.attr("kind").asStr() : "";
  std::string body;
  int shown = 0, computing = 0;
  for (Op *inner : *op.region(0)) {
    if (inner->def().has(kTerminator) || inner->def().has(kView)) continue;
    ++computing;
    if (shown < 4) {
      body += (shown ? "+" : "") + inner->name();
      ++shown;
    }
  }
  if (computing > shown) body += "+" + std::to_string(computing - shown) + " more";
  return "fusion " + kind + "(" + body + ")";
}

ProfileRow *profileRow(const Op &op, const char *how) {
  std::string label = std::string(how) + " " + profileLabel(op);
  if (profileLevel() >= 2) {
    label += "  " + op.describe();
    if (op.numResults() > 0) label += " -> " + op.result(0)->type().str();
  }
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto [it, fresh] = r.index.emplace(label, nullptr);
  if (fresh) it->second = &r.rows.emplace_back(label);
  return it->second;
}

void profileAdd(ProfileRow *row, int64_t ns) {
  row->calls.fetch_add(1, std::memory_order_relaxed);
  row->ns.fetch_add(ns, std::memory_order_relaxed);
}

std::string profileReport() {
  Registry &reg = registry();
  std::lock_guard<std::mutex> lock(reg.mutex);
  std::vector<const Row *> rows;
  int64_t total = 0;
  for (const Row &r : reg.rows)
    if (r.calls.load() > 0) {
      rows.push_back(&r);
      total += r.ns.load();
    }
  if (rows.empty()) return "";
  std::stable_sort(rows.begin(), rows.end(),
                   [](const Row *a, const Row *b) { return a->ns.load() > b->ns.load(); });
  std::string out = "xjit profile (XJIT_PROFILE): time in compiled-graph instructions\n";
  char line[128];
  std::snprintf(line, sizeof line, "%10s %6s %10s %10s  %s\n", "total ms", "%", "calls", "us/call",
                "instruction");
  out += line;
  for (const Row *r : rows) {
    double ms = double(r->ns.load()) / 1e6;
    int64_t calls = r->calls.load();
    std::snprintf(line, sizeof line, "%10.2f %6.1f %10lld %10.1f  ", ms,
                  total ? 100.0 * double(r->ns.load()) / double(total) : 0.0,
                  static_cast<long long>(calls), calls ? ms * 1e3 / double(calls) : 0.0);
    out += line + r->label + "\n";
  }
  std::snprintf(line, sizeof line, "%10.2f %6.1f  total\n", double(total) / 1e6, 100.0);
  out += line;
  return out;
}

void profileReset() {
  Registry &reg = registry();
  std::lock_guard<std::mutex> lock(reg.mutex);
  for (Row &r : reg.rows) {
    r.calls = 0;
    r.ns = 0;
  }
}

} // namespace xjit::runtime
