#include "runtime_util.h"

namespace xjit::backend {

namespace {
std::string mismatch(size_t d, const DimExpr &declared, int64_t actual) {
  return "dim " + std::to_string(d) + " is " + std::to_string(actual) + ", expected " +
         declared.str();
}
} // namespace

std::string bindShape(SymbolBindings &bindings, const Shape &declared,
                      const std::vector<int64_t> &actual) {
  if (declared.size() != actual.size())
    return "rank " + std::to_string(actual.size()) + ", expected " +
           std::to_string(declared.size());
  for (size_t d = 0; d < declared.size(); ++d) {
    const DimExpr &e = declared[d];
    if (auto v = e.staticValue()) {
      if (*v != actual[d]) return mismatch(d, e, actual[d]);
      continue;
    }
    std::vector<std::string> syms = e.symbols();
    if (syms.size() != 1 || e != DimExpr::symbol(syms[0]))
      continue; // compound: checked once every plain symbol is bound
    auto [it, inserted] = bindings.emplace(syms[0], actual[d]);
    if (!inserted && it->second != actual[d])
      return mismatch(d, e, actual[d]) + " = " + std::to_string(it->second);
  }
  return "";
}

std::string checkShape(const SymbolBindings &bindings, const Shape &declared,
                       const std::vector<int64_t> &actual) {
  for (size_t d = 0; d < declared.size() && d < actual.size(); ++d) {
    if (declared[d].isStatic()) continue;
    auto v = declared[d].evaluate(bindings);
    if (v && *v != actual[d])
      return mismatch(d, declared[d], actual[d]) + " = " + std::to_string(*v);
  }
  return "";
}

} // namespace xjit::backend
