// May-alias partition of values and the partitions that are written in place.
#include "mutation_info.h"

#include "xjit/ir/op_registry.h"

namespace xjit::passes {

bool aliasesOperand(const Op &op) {
  return (op.def().has(kView) || op.def().has(kInPlace)) && op.numOperands() > 0;
}

namespace {
bool escapesGraph(const Value *v, const Op *except, int depth) {
  if (depth > 16) return true; // a long chain of views: assume it escapes
  for (const Use &u : v->uses()) {
    const Op &user = *u.user;
    if (&user == except) continue;
    if (user.name() == "return" || user.name() == "yield") return true;
    bool forwards = (u.index == 0 && aliasesOperand(user)) || user.name() == "tuple_construct";
    if (forwards)
      for (size_t r = 0; r < user.numResults(); ++r)
        if (escapesGraph(user.result(r), except, depth + 1)) return true;
  }
  return false;
}
} // namespace

bool escapesGraph(const Value *v, const Op *except) { return escapesGraph(v, except, 0); }

const Value *viewRootOf(const Value *v) {
  while (const Op *def = v->definingOp()) {
    if (!aliasesOperand(*def)) break;
    v = def->operand(0);
  }
  return v;
}

MutationInfo::MutationInfo(const Graph &g) {
  // Most inference graphs write nothing: then no value is ever written and there is nothing
  // to partition.
  bool writers = false;
  g.walk([&](Op *op) {
    const OpDef &d = op->def();
    writers |= d.has(kInPlace) || (d.has(kSideEffect) && !d.has(kTerminator));
  });
  if (!writers) return;
  // The caller may pass the same tensor (or views of one storage) as several inputs.
  const Value *firstTensor = nullptr;
  for (size_t i = 0; i < g.numInputs(); ++i) {
    const Value *in = g.input(i);
    node(in);
    if (!in->type().isTensor()) continue;
    if (firstTensor)
      unite(firstTensor, in);
    else
      firstTensor = in;
  }
  visitBlock(g.body());
}

int MutationInfo::node(const Value *v) {
  auto [it, inserted] = node_.try_emplace(v, static_cast<int>(parent_.size()));
  if (inserted) {
    parent_.push_back(it->second);
    written_.push_back(0);
  }
  return it->second;
}

int MutationInfo::find(int n) const {
  while (parent_[n] != n)
    n = parent_[n] = parent_[parent_[n]]; // path halving
  return n;
}

void MutationInfo::unite(const Value *a, const Value *b) {
  int ra = find(node(a)), rb = find(node(b));
  if (ra == rb) return;
  parent_[rb] = ra;
  written_[ra] = written_[ra] || written_[rb];
}

void MutationInfo::markWritten(const Value *v) {
  written_[find(node(v))] = 1;
  anyWrites_ = true;
}

void MutationInfo::visitBlock(const Block *b) {
  for (const auto &arg : b->arguments())
    node(arg.get());
  for (Op *op : *b) {
    for (const auto &r : op->results())
      node(r.get());
    for (size_t i = 0; i < op->numRegions(); ++i)
      visitBlock(op->region(i));
    const OpDef &def = op->def();
    const std::string &name = op->name();
    if (aliasesOperand(*op)) {
      for (const auto &r : op->results())
        unite(op->operand(0), r.get());
      if (def.has(kInPlace)) markWritten(op->operand(0));
    } else if (forEachControlFlowAlias(*op, [&](Value *a, Value *b) { unite(a, b); })) {
      // if/loop results share storage with what their regions yield.
    } else if (name == "tuple_construct" || name == "tuple_get") {
      // Tuples hold their elements by reference.
      for (Value *v : op->operands())
        for (const auto &r : op->results())
          unite(v, r.get());
    } else if (def.has(kSideEffect) && !def.has(kTerminator)) {
      // An opaque host function may write any tensor it is given and return aliases of it.
      for (Value *v : op->operands()) {
        for (const auto &r : op->results())
          unite(v, r.get());
        TypeKind k = v->type().kind();
        if (k != TypeKind::Int && k != TypeKind::Float && k != TypeKind::Bool) markWritten(v);
      }
    }
  }
}

const Value *MutationInfo::known(const Value *v) const {
  while (!node_.count(v)) {
    const Op *def = v->definingOp();
    if (!def || !aliasesOperand(*def)) return nullptr; // a fresh value: never written
    v = def->operand(0);
  }
  return v;
}

void MutationInfo::noteReplaced(const Value *old, const Value *replacement) {
  if (!anyWrites_ || old == replacement) return;
  // Bring the replacement's view chain into the analysis, then merge it with old.
  const Value *v = replacement;
  while (!node_.count(v)) {
    const Op *def = v->definingOp();
    if (!def || !aliasesOperand(*def)) {
      node(v);
      break;
    }
    unite(v, def->operand(0));
    v = def->operand(0);
  }
  unite(old, replacement);
}

void MutationInfo::forgetValues(const Op *op) {
  for (const auto &r : op->results())
    node_.erase(r.get());
  for (size_t i = 0; i < op->numRegions(); ++i) {
    for (const auto &a : op->region(i)->arguments())
      node_.erase(a.get());
    for (const Op *inner : *op->region(i))
      forgetValues(inner);
  }
}

bool MutationInfo::mayBeWritten(const Value *v) const {
  if (!anyWrites_) return false;
  const Value *k = known(v);
  return k && written_[find(node_.at(k))];
}

} // namespace xjit::passes
