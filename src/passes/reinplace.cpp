// Reinplacing: a graph output that the caller copies back into a graph input (`return`'s
// io.input_of) is computed in that input's own memory, so writing a few elements of a large
// input (a KV cache's new row) costs those elements, not two copies of the whole input; and an
// index_put into a fresh buffer nothing else reads (an embedding's gradient) writes it in place.
//
// The frontend functionalizes writes: `cache[:, :, pos] = k` becomes a fresh
//   %new = index_put(%cache, %k, ...)     returned, then copied into the caller's `cache`
// (docs/frontend.md), which copies the whole input twice per call. Here, walking back from such
// an output through the ops that share its storage (views, reshapes), each `index_put` whose
// operand 0 is the input (or a view of it) becomes `index_put_`, written into the input, when
// nothing reads the input's old contents afterwards. A scatter at flat positions taken from an
// arange through view ops (how the frontend writes through a view: `cache[:, :, p:q].copy_(k)`)
// becomes a `copy_` into the same views of the input, and the arange is left dead.
//
// Runs after fuse (whose grouping may reorder ops): the order it checks is the order the ops run
// in. Assumes, as functionalize does, that distinct graph inputs do not share memory (the
// frontend guards it for inputs the graph writes).
#include "passes.h"
#include "semantic_util.h"

#include "mutation_info.h"
#include "xjit/ir/builder.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

namespace xjit::passes {
namespace {

// Ops that always return a view of operand 0 (never a copy): replayed on the input to reach the
// elements a flat-position scatter writes. reshape/flatten/contiguous may copy, so they are not.
bool alwaysViews(const Op &op) {
  static const std::unordered_set<std::string> names = {
      "slice",    "select",  "narrow",    "permute", "transpose", "movedim",
      "diagonal", "squeeze", "unsqueeze", "view",    "alias"};
  return op.numResults() == 1 && op.numOperands() >= 1 && names.count(op.name()) > 0;
}

bool isArangeFromZero(const Op *op) {
  if (!op || op->name() != "arange") return false;
  const Attr *start = op->attrOrNull("start"), *step = op->attrOrNull("step");
  return start && step && start->kind() == AttrKind::Int && start->asInt() == 0 &&
         step->kind() == AttrKind::Int && step->asInt() == 1;
}

bool isFlatten(const Op *op) {
  return op && (op->name() == "reshape" || op->name() == "flatten" || op->name() == "view") &&
         op->result(0)->type().rank() == 1;
}

class Reinplace {
public:
  Reinplace(Graph &g, PassContext &ctx) : g_(g), ctx_(ctx) { renumber(); }

  bool run() {
    bool changed = false;
    Op *ret = g_.body()->terminator();
    const Attr::Ints inputOf =
        ret && ret->hasAttr("io.input_of") ? ret->attr("io.input_of").asInts() : Attr::Ints{};
    for (size_t k = 0; k < inputOf.size() && k < ret->numOperands(); ++k) {
      if (inputOf[k] < 0 || size_t(inputOf[k]) >= g_.numInputs()) continue;
      Value *input = g_.input(size_t(inputOf[k]));
      if (reinplaceOutput(ret->operand(k), input))
        changed = true;
      else
        changed |= reinplaceElementwise(ret->operand(k), input);
    }
    return reinplaceFreshTargets() || changed;
  }

private:
  // Each graph-level op's place in the run order (redone after each rewrite: erased ops leave).
  void renumber() {
    position_.clear();
    int i = 0;
    for (Op *op : *g_.body())
      position_[op] = i++;
  }

  // The index_puts between `input` and `output` (first to last), or nothing when the output
  // does not derive from the input through index_puts and ops sharing storage.
  std::vector<Op *> writesOnPath(Value *output, Value *input) {
    std::vector<Op *> writes;
    Value *v = output;
    while (v != input) {
      Op *def = v->definingOp();
      if (!def || def->parentBlock() != g_.body() || def->numOperands() == 0) return {};
      if (def->name() == "index_put")
        writes.push_back(def);
      else if (!aliasesOperand(*def) || def->def().has(kInPlace))
        return {};
      v = def->operand(0);
    }
    return {writes.rbegin(), writes.rend()};
  }

  bool reinplaceOutput(Value *output, Value *input) {
    std::vector<Op *> writes = writesOnPath(output, input);
    writes.resize(writesInPlace(writes, input));
    bool changed = false;
    Value *version = input; // what holds the input's current contents
    for (Op *write : writes) {
      std::unordered_set<const Value *> old = aliasesOf(version, write);
      if (!oldContentsDeadAfter(old, write)) {
        ctx_.count("refused");
        return changed;
      }
      Value *next = rewriteAsCopy(write, old);
      if (!next) next = rewriteInPlace(write);
      renumber();
      version = next;
      changed = true;
    }
    return changed;
  }

  // How many of `writes` (the index_puts from `input` to an output copied back into it) can be
  // done in the input's memory. Each one's old contents must be dead after it; and where a
  // later write stays a copy, the contents the last in-place write leaves stay in the input's
  // memory until the copy-back after the run, so no value sharing them may be returned (fuzzer
  // seed 36825: `v = a[[0, 1]]` between two writes to `a`, canonicalized to the first write's
  // result, was returned as the input's memory and read the second write's values).
  size_t writesInPlace(const std::vector<Op *> &writes, Value *input) {
    size_t usable = 0;
    for (Value *version = input; usable < writes.size(); ++usable) {
      if (!oldContentsDeadAfter(aliasesOf(version, writes[usable]), writes[usable])) break;
      version = writes[usable]->result(0);
    }
    auto returned = [](const std::unordered_set<const Value *> &values) {
      for (const Value *v : values)
        for (const Use &u : v->uses())
          if (u.user->def().has(kTerminator)) return true;
      return false;
    };
    while (usable > 0 && usable < writes.size() &&
           returned(aliasesOf(writes[usable - 1]->result(0), writes[usable]))) {
      ctx_.count("refused");
      --usable;
    }
    return usable;
  }

  // v and every value that may share its storage through view/reshape ops, stopping at `write`
  // (its result is the new contents).
  static std::unordered_set<const Value *> aliasesOf(Value *v, const Op *write) {
    std::unordered_set<const Value *> seen{v};
    std::vector<Value *> work{v};
    while (!work.empty()) {
      Value *a = work.back();
      work.pop_back();
      for (const Use &u : a->uses()) {
        if (u.user == write || u.index != 0 || !aliasesOperand(*u.user)) continue;
        for (const auto &r : u.user->results())
          if (seen.insert(r.get()).second) work.push_back(r.get());
      }
    }
    return seen;
  }

  // The graph-level op that runs `op` (op itself, or the if/loop it is nested in).
  Op *topLevel(Op *op) const {
    while (op->parentBlock() != g_.body())
      op = op->parentOp();
    return op;
  }

  // Nothing reads the old contents after `write`, and `write` reads them only as the tensor it
  // writes (its values and indices may not overlap it).
  bool oldContentsDeadAfter(const std::unordered_set<const Value *> &old, Op *write) {
    const int at = position_.at(write);
    for (const Value *a : old) {
      for (const Use &u : a->uses()) {
        Op *top = topLevel(u.user);
        if (top == write && u.user == write && u.index == 0) continue;
        if (top == write || position_.at(top) > at) return false;
        // A view or reshape of the old contents that is read later is caught as its own alias;
        // anything that may keep or write the storage out of sight (control flow, tuples,
        // external calls, in-place ops) is not followed: refuse.
        const std::string &name = u.user->name();
        if (name == "if" || name == "loop" || name == "tuple_construct") return false;
        if (!aliasesOperand(*u.user) && !u.user->def().isPure()) return false;
      }
    }
    return true;
  }

  // A fusion of element-wise ops whose result is written back to an input it reads (an
  // optimizer's update of a parameter and its state): computed in that input's memory, marked
  // `inplace_operand` (per result, the operand or -1) for the runtime and the kernel. Only when
  // the fusion reads the input directly (no view of it), every op in it is element-wise and
  // every result has the input's shape (one loop nest reads each element before writing it),
  // and nothing reads the input's old contents after it.
  bool reinplaceElementwise(Value *output, Value *input) {
    Op *f = output->definingOp();
    const Attr *kind = f ? f->attrOrNull("kind") : nullptr;
    if (!f || f->name() != "fusion" || f->parentBlock() != g_.body() || !kind ||
        kind->kind() != AttrKind::Str || kind->asStr() != "elementwise" ||
        !(output->type() == input->type()) || !isStaticShape(input->type().shape()))
      return false;
    int64_t operand = -1, result = -1;
    for (size_t j = 0; j < f->numOperands() && operand < 0; ++j)
      if (f->operand(j) == input) operand = int64_t(j);
    for (size_t r = 0; r < f->numResults(); ++r) {
      if (f->result(r) == output) result = int64_t(r);
      if (!(f->result(r)->type().shape() == input->type().shape())) return false;
    }
    if (operand < 0 || result < 0) return false;
    const Block &body = *f->region(0);
    for (Op *op : body)
      if (op != body.terminator() && !op->def().has(kElementwise) && !op->def().has(kConstantLike))
        return false;
    const int at = position_.at(f);
    for (const Value *a : aliasesOf(input, nullptr)) {
      for (const Use &u : a->uses()) {
        Op *top = topLevel(u.user);
        if (top == f) {
          if (a != input) return false; // a view of it read by the fusion
          continue;
        }
        if (position_.at(top) > at) return false;
        const std::string &name = u.user->name();
        if (name == "if" || name == "loop" || name == "tuple_construct") return false;
        if (!aliasesOperand(*u.user) && !u.user->def().isPure()) return false;
      }
    }
    Attr::Ints marks = f->hasAttr("inplace_operand") ? f->attr("inplace_operand").asInts()
                                                     : Attr::Ints(f->numResults(), -1);
    if (marks.size() != f->numResults() || marks[size_t(result)] >= 0 ||
        std::find(marks.begin(), marks.end(), operand) != marks.end())
      return false;
    marks[size_t(result)] = operand;
    f->setAttr("inplace_operand", Attr(marks));
    ctx_.count("fusions-in-place");
    return true;
  }

  // index_put(x, ...) where x is a fresh buffer that this index_put alone reads (an embedding's
  // gradient, index_put(zeros_like(w), g, idx, accumulate)): written into x in place instead of
  // into a copy of it (BERT's [30522, 256] table: a 31 MB copy per training step).
  bool reinplaceFreshTargets() {
    std::vector<Op *> writes;
    for (Op *op : *g_.body())
      if (op->name() == "index_put") writes.push_back(op);
    bool changed = false;
    for (Op *write : writes) {
      Value *x = write->operand(0);
      Op *def = x->definingOp();
      if (!def || def->parentBlock() != g_.body() || x->uses().size() != 1 ||
          def->numRegions() > 0 || !def->def().isPure() || aliasesOperand(*def) ||
          def->def().has(kConstantLike) || def->def().has(kInPlace))
        continue;
      rewriteInPlace(write);
      changed = true;
    }
    if (changed) renumber();
    return changed;
  }

  // index_put -> index_put_ on the same operands: the result is operand 0, written in place.
  Value *rewriteInPlace(Op *write) {
    Builder b(write->parentBlock(), write);
    b.setLoc(write->loc());
    Op *inPlace = b.create("index_put_", write->operands(), write->attrs());
    inPlace->result(0)->setName(write->result(0)->name());
    write->result(0)->replaceAllUsesWith(inPlace->result(0));
    write->parentBlock()->erase(write);
    ctx_.count("index-puts-in-place");
    return inPlace->result(0);
  }

  // index_put(flatten(B), flatten(v), flatten(chain(reshape(arange(N), shape(B))))) writes v
  // into chain(B): done as copy_(chain(B), v), the flat result re-read as flatten(B) after it.
  // Returns the new contents (flatten(B)), or nullptr when `write` is not of that form.
  Value *rewriteAsCopy(Op *write, const std::unordered_set<const Value *> &old) {
    if (write->numOperands() != 3 || write->attrOrNull("accumulate")->asBool()) return nullptr;
    Op *flatBase = write->operand(0)->definingOp();
    Op *flatValues = write->operand(1)->definingOp();
    Op *flatPositions = write->operand(2)->definingOp();
    if (!isFlatten(flatBase) || !isFlatten(flatPositions) || !old.count(flatBase->operand(0)))
      return nullptr;
    Value *base = flatBase->operand(0);
    // The view chain from the arange (reshaped to the base's shape) to the written positions.
    std::vector<Op *> chain;
    Value *p = flatPositions->operand(0);
    while (p->definingOp() && alwaysViews(*p->definingOp())) {
      chain.push_back(p->definingOp());
      p = p->definingOp()->operand(0);
    }
    Op *shaped = p->definingOp();
    if (!shaped || (shaped->name() != "reshape" && shaped->name() != "view") ||
        !isArangeFromZero(shaped->operand(0)->definingOp()) ||
        !(shaped->result(0)->type().shape() == base->type().shape()))
      return nullptr;
    const Type &target = flatPositions->operand(0)->type();
    Value *source = flatValues && isFlatten(flatValues) &&
                            flatValues->operand(0)->type().shape() == target.shape()
                        ? flatValues->operand(0)
                        : nullptr;
    Builder b(write->parentBlock(), write);
    b.setLoc(write->loc());
    if (!source) {
      std::vector<int64_t> shape;
      for (const DimExpr &d : target.shape()) {
        if (!d.isStatic()) return nullptr;
        shape.push_back(d.value());
      }
      source = b.op("reshape", {write->operand(1)}, {{"shape", Attr(shape)}});
    }
    Value *view = base;
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      std::vector<Value *> operands = (*it)->operands();
      operands[0] = view;
      view = b.create((*it)->name(), operands, (*it)->attrs())->result(0);
    }
    b.create("copy_", {view, source});
    // Operands of the chain's ops besides the viewed tensor (none today: their sizes are
    // attributes) are defined before the positions, so before `write`.
    Value *after = b.create(flatBase->name(), {base}, flatBase->attrs())->result(0);
    after->setName(write->result(0)->name());
    write->result(0)->replaceAllUsesWith(after);
    write->parentBlock()->erase(write);
    for (Op *dead : {flatPositions, flatValues, flatBase})
      if (dead) eraseIfDead(dead);
    ctx_.count("scatters-to-copies");
    return after;
  }

  Graph &g_;
  PassContext &ctx_;
  std::unordered_map<const Op *, int> position_;
};

} // namespace

bool runReinplace(Graph &g, PassContext &ctx) { return Reinplace(g, ctx).run(); }

} // namespace xjit::passes
