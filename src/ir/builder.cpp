// Op construction with inferred result types.
#include "xjit/ir/builder.h"

namespace xjit {

Op *Builder::create(std::string_view name, std::vector<Value *> operands, AttrMap attrs) {
  const OpDef &def = OpRegistry::instance().get(name);
  if (!def.infer) throw std::logic_error("op '" + def.name + "' needs explicit result types");
  // Infer on a detached op so the InferFn sees operands and attributes (with defaults).
  auto op = std::make_unique<Op>(&def, std::move(operands), std::vector<Type>{}, std::move(attrs),
                                 loc_);
  for (auto &t : def.infer(*op)) op->addResult(std::move(t));
  return block_->insert(std::move(op), before_);
}

Op *Builder::createWithTypes(std::string_view name, std::vector<Value *> operands,
                             std::vector<Type> resultTypes, AttrMap attrs) {
  const OpDef &def = OpRegistry::instance().get(name);
  return block_->insert(
      std::make_unique<Op>(&def, std::move(operands), std::move(resultTypes), std::move(attrs), loc_),
      before_);
}

Value *Builder::constantInt(int64_t v) {
  return createWithTypes("constant", {}, {Type::intTy()}, {{"value", Attr(v)}})->result();
}
Value *Builder::constantFloat(double v) {
  return createWithTypes("constant", {}, {Type::floatTy()}, {{"value", Attr(v)}})->result();
}
Value *Builder::constantBool(bool v) {
  return createWithTypes("constant", {}, {Type::boolTy()}, {{"value", Attr(v)}})->result();
}
Value *Builder::constantTensor(const Tensor &t) {
  Shape shape(t.sizes().begin(), t.sizes().end());
  return createWithTypes("constant", {}, {Type::tensor(t.dtype(), shape)}, {{"value", Attr(t)}})
      ->result();
}

} // namespace xjit
