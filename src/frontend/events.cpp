#include "events.h"

#include "xjit/ir/printer.h"

#include <cctype>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace xjit::frontend {

Settings &settings() {
  static Settings s;
  return s;
}

std::string dumpPrefix(int id, const SourceLoc &loc) {
  const std::string &dir = settings().dumpDir;
  if (dir.empty() || id < 0) return "";
  char prefix[16];
  std::snprintf(prefix, sizeof prefix, "%03d", id);
  std::string fn = loc.function;
  for (char &c : fn)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') c = '_';
  return dir + "/" + prefix + "-" + fn;
}

void dumpGraph(const Graph &g, int id, const SourceLoc &loc, const std::string &stage) {
  const std::string prefix = dumpPrefix(id, loc);
  if (prefix.empty()) return;
  std::ofstream out(prefix + "." + stage + ".xir");
  out << "// " << shortLoc(loc) << " (" << loc.file << ")\n" << printGraph(g);
}

PyClasses &pyClasses() {
  static PyClasses c;
  return c;
}

EventLog &events() {
  static EventLog log;
  return log;
}

unsigned parseLogFlags(const std::string &text) {
  static const std::map<std::string, unsigned> kNames = {
      {"graph_breaks", kLogGraphBreaks},
      {"guards", kLogGuards},
      {"recompiles", kLogRecompiles},
      {"graphs", kLogGraphs},
      {"bytecode", kLogBytecode},
      {"dynamic", kLogDynamic},
      {"passes", kLogPasses},
  };
  unsigned flags = 0;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t b = item.find_first_not_of(" \t"), e = item.find_last_not_of(" \t");
    if (b == std::string::npos) continue;
    item = item.substr(b, e - b + 1);
    if (item == "all") {
      flags |= kLogGraphBreaks | kLogGuards | kLogRecompiles | kLogGraphs | kLogBytecode |
               kLogDynamic | kLogPasses;
      continue;
    }
    auto it = kNames.find(item);
    if (it == kNames.end())
      throw std::invalid_argument("XJIT_LOG: unknown category '" + item +
                                  "' (expected graph_breaks, guards, recompiles, graphs, "
                                  "bytecode, dynamic, passes or all)");
    flags |= it->second;
  }
  return flags;
}

std::string shortLoc(const SourceLoc &loc) {
  if (!loc.known()) return "<unknown>";
  std::string file = loc.file;
  if (size_t slash = file.find_last_of('/'); slash != std::string::npos)
    file = file.substr(slash + 1);
  std::string s = file + ":" + std::to_string(loc.line);
  if (!loc.function.empty()) s += " (" + loc.function + ")";
  return s;
}

void logLine(const std::string &line) {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  std::string text = "[xjit] " + line + "\n";
  PyObject *err = PySys_GetObject("stderr"); // borrowed
  if (!err || err == Py_None || PyFile_WriteString(text.c_str(), err) != 0) {
    PyErr_Clear();
    std::fputs(text.c_str(), stderr);
  }
  PyErr_Restore(type, value, tb);
}

bool warnUser(const std::string &message, const SourceLoc &where) {
  PyObject *category = pyClasses().warning ? pyClasses().warning : PyExc_RuntimeWarning;
  return PyErr_WarnExplicit(category, message.c_str(),
                            where.known() ? where.file.c_str() : "<unknown>", where.line, nullptr,
                            nullptr) == 0;
}

void raiseCompileError(const std::string &message) {
  PyErr_SetString(pyClasses().compileError ? pyClasses().compileError : PyExc_RuntimeError,
                  message.c_str());
}

} // namespace xjit::frontend
