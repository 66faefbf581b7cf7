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
    // A dim that is one atom (s0, or (s0+1)//2 of a strided conv's output) is bound itself:
    // a kernel after a conv may see only (s0+1)//2, never s0, and must still size its outputs.
    // One atom with coefficient 1 prints as the atom's own key (the name evaluate() looks up).
    std::string atom = e.str();
    if (e != DimExpr::symbol(atom)) continue; // a sum or product: checked once atoms are bound
    auto [it, inserted] = bindings.emplace(std::move(atom), actual[d]);
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
