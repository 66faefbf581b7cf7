// The op registry: every family's rows, registered once.
#include "xjit/ir/op_registry.h"

#include <stdexcept>

namespace xjit {

const Attr *OpDef::attrDefault(std::string_view n) const {
  const AttrSpec *s = attrSpec(n);
  return s && s->defaultValue ? &*s->defaultValue : nullptr;
}

const AttrSpec *OpDef::attrSpec(std::string_view n) const {
  for (const auto &a : attrs)
    if (a.name == n) return &a;
  return nullptr;
}

size_t OpDef::minOperands() const {
  size_t n = 0;
  for (const auto &o : operands)
    if (!o.optional && !o.variadic) ++n;
  return n;
}

size_t OpDef::maxOperands() const {
  if (!operands.empty() && operands.back().variadic) return SIZE_MAX;
  return operands.size();
}

const OpRegistry &OpRegistry::instance() {
  static const OpRegistry registry = [] {
    OpRegistry r;
    registerControlFlowOps(r);
    registerElementwiseOps(r);
    registerReductionOps(r);
    registerLinalgOps(r);
    registerConvPoolOps(r);
    registerNormOps(r);
    registerMovementOps(r);
    registerIndexingOps(r);
    registerCreationOps(r);
    registerDeviceOps(r);
    registerFusionOps(r);
    return r;
  }();
  return registry;
}

const OpDef *OpRegistry::lookup(std::string_view name) const {
  auto it = ops_.find(name);
  return it == ops_.end() ? nullptr : it->second.get();
}

const OpDef &OpRegistry::get(std::string_view name) const {
  if (const OpDef *d = lookup(name)) return *d;
  throw std::out_of_range("unknown op '" + std::string(name) + "'");
}

std::vector<const OpDef *> OpRegistry::all() const {
  std::vector<const OpDef *> out;
  for (const auto &[n, d] : ops_) out.push_back(d.get());
  return out;
}

void OpRegistry::add(OpDef def) {
  std::string name = def.name;
  auto [it, inserted] = ops_.emplace(name, std::make_unique<OpDef>(std::move(def)));
  if (!inserted) throw std::logic_error("op '" + name + "' registered twice");
}

} // namespace xjit
