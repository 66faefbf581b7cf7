// Functionalization: in-place ops become pure ops producing new values, reads after a write
// see the new value (views included), and writes to graph inputs are kept as one final
// write-back per input, so results and input mutations match eager execution exactly.
//
// Model. Every tensor value belongs to the storage of a *base*: a fresh op result, a constant
// or a graph input. A view (slice, select, permute, view, ...) is a member of its operand's
// base, reached through a chain of view ops; an in-place op's result is its first operand.
// The pass walks the graph in program order keeping the current *version* of every written
// base (an SSA value):
// - A write to a member T (`copy_(T, src)`, `fill_(T)`, `index_put_(T, ...)`, any `op_` with an
//   out-of-place `op` in the registry) computes T's new contents nv with pure ops. If T is the
//   base, nv is the base's new version; otherwise the new version is the old one with nv
//   scattered into the positions T covers: a reshape when T's chain keeps element order,
//   else index_put over the base's flattened positions, found by replaying T's chain on an
//   arange of them (so every view op's inverse comes for free).
// - A read of a member defined before the latest write re-derives it from the current version
//   by replaying its view op (recursively up the chain), once per version.
// - At the end, each written graph input gets `copy_(input, final version)` before `return`,
//   and returned views of it are re-derived from that copy_'s result (the input itself), so a
//   returned input aliases the caller's tensor as in eager.
//
// The pass refuses (changes nothing, stat "refused") when it cannot prove the rewrite exact:
// a written storage reached through reshape/flatten/unflatten/contiguous of a tensor not known
// to be contiguous (these copy or alias depending on strides), a write through expand
// (overlapping elements), a written base that is an if/loop result, loop-carried value, tuple
// element or side-effecting op's result, a write inside a region to a storage defined outside
// it, a written storage flowing into a yield of another block, loop, tuple_construct or a
// side-effecting op, a
// write through a non-order-preserving view of a base with a symbolic shape, or an in-place op
// without an out-of-place form. Distinct graph inputs are assumed not to share storage (the
// frontend guards this).
#include "passes.h"
#include "semantic_util.h"

#include "xjit/ir/builder.h"
#include "xjit/ir/op_registry.h"

#include <algorithm>
#include <set>
#include <unordered_map>
#include <unordered_set>

namespace xjit::passes {
namespace {

enum class ViewKind {
  Fresh,         // a new tensor
  Exact,         // always a view of operand 0
  OrderExact,    // always a view, elements in operand 0's row-major order (view, squeeze...)
  OrderIfContig, // a view in operand order when operand 0 is contiguous, else maybe a copy
};

ViewKind viewKind(const Op &op) {
  static const std::set<std::string, std::less<>> kOrder = {"view", "squeeze", "unsqueeze", "alias",
                                                            "wait_tensor"};
  static const std::set<std::string, std::less<>> kOrderIfContig = {"reshape", "flatten",
                                                                    "unflatten", "contiguous"};
  static const std::set<std::string, std::less<>> kExact = {
      "permute", "transpose", "t",        "movedim", "expand", "expand_as",        "slice",
      "select",  "narrow",    "diagonal", "split",   "chunk",  "split_with_sizes", "unbind"};
  const std::string &n = op.name();
  if (!op.def().has(kView) || op.numOperands() == 0) return ViewKind::Fresh;
  if (n == "to_device") // a transfer to another device copies
    return op.operand(0)->type() == op.result()->type() ? ViewKind::OrderExact : ViewKind::Fresh;
  if (kOrder.count(n)) return ViewKind::OrderExact;
  if (kOrderIfContig.count(n)) return ViewKind::OrderIfContig;
  if (kExact.count(n)) return ViewKind::Exact;
  return ViewKind::OrderIfContig; // an unknown view op: treated as "may alias", never written
}

enum class BaseKind { Fresh, Input, Opaque };

/// Where a value's storage comes from.
struct Member {
  Value *base = nullptr;
  Value *parent = nullptr;     // operand 0 of the defining view / in-place op; null for a base
  bool ambiguous = false;      // reached through a view that may be a copy
  bool overlapping = false;    // reached through expand: several elements share one location
  bool orderPreserving = true; // the chain keeps the base's element order
};

Block *definingBlock(const Value *v) {
  return v->isBlockArgument() ? v->ownerBlock() : v->definingOp()->parentBlock();
}

/// The out-of-place op for `name_`, or nullptr.
const OpDef *outOfPlaceDef(const Op &w) {
  const std::string &n = w.name();
  if (n.size() < 2 || n.back() != '_') return nullptr;
  const OpDef *d = OpRegistry::instance().lookup(std::string_view(n).substr(0, n.size() - 1));
  return d && d->isPure() && d->infer ? d : nullptr;
}

bool hasFunctionalForm(const Op &w) {
  if (w.name() == "copy_" || w.name() == "fill_") return true;
  const OpDef *d = outOfPlaceDef(w);
  if (!d) return false;
  // Its result type must be the written tensor's.
  Op probe(d, w.operands(), {}, w.attrs());
  try {
    std::vector<Type> types = d->infer(probe);
    return types.size() == 1 && types[0] == w.result()->type();
  } catch (const std::exception &) {
    return false;
  }
}

class Analysis {
public:
  explicit Analysis(const Graph &g) : body_(g.body()) {
    findWriteBacks(g);
    visitBlock(g.body(), true);
    // A trailing copy_ into an input is a write-back to keep only if nothing else writes it.
    std::unordered_map<const Value *, int> writesPerBase;
    for (Op *w : writes_)
      if (isMember(w->operand(0))) ++writesPerBase[member(w->operand(0)).base];
    std::erase_if(writes_,
                  [&](Op *w) { return writeBacks_.count(w) && writesPerBase[w->operand(0)] == 1; });
  }

  /// Checks every in-place op (writes()); false (refused()) if one cannot be rewritten.
  bool analyse() {
    for (Op *w : writes_) {
      if (!isMember(w->operand(0))) return refuse();
      const Member &m = member(w->operand(0));
      Value *base = m.base;
      bool staticBase = isStaticShape(base->type().shape());
      if (m.ambiguous || m.overlapping || kind_[base] == BaseKind::Opaque ||
          definingBlock(base) != w->parentBlock() || !hasFunctionalForm(*w) ||
          (!m.orderPreserving && !staticBase) ||
          (m.orderPreserving && w->operand(0) != base && !staticBase &&
           w->operand(0)->type().shape() != base->type().shape()))
        return refuse();
      written_.insert(base);
    }
    for (const auto &[v, m] : info_) {
      if (!written_.count(m.base)) continue;
      if (m.ambiguous) return refuse();
      for (const Use &u : v->uses())
        if (!allowedUser(*u.user, m.base)) return refuse();
    }
    return true;
  }

  bool refused() const { return refused_; }
  const std::vector<Op *> &writes() const { return writes_; }
  const Member &member(const Value *v) const { return info_.at(v); }
  bool isMember(const Value *v) const { return info_.count(v) > 0; }
  bool isWritten(const Value *base) const { return written_.count(base) > 0; }
  BaseKind kind(const Value *base) const { return kind_.at(base); }
  const std::unordered_set<const Value *> &writtenBases() const { return written_; }

private:
  bool refuse() {
    refused_ = true;
    return false;
  }

  /// The write-backs this pass leaves at the end of the graph: `copy_(input, v)` ops followed
  /// only by other such ops, views of their results, and `return`.
  void findWriteBacks(const Graph &g) {
    std::unordered_set<const Value *> inputs, viewsOfWriteBacks;
    for (size_t i = 0; i < g.numInputs(); ++i)
      inputs.insert(g.input(i));
    auto isWriteBack = [&](const Op *op) {
      return op->name() == "copy_" && inputs.count(op->operand(0)) > 0;
    };
    // The longest run of write-backs and pure views just before `return`...
    Op *first = g.body()->terminator();
    while (first && first->prev() &&
           (isWriteBack(first->prev()) ||
            (first->prev()->def().has(kView) && first->prev()->def().isPure() &&
             first->prev()->numOperands() > 0)))
      first = first->prev();
    // ...in which each view reads a write-back result (else only what follows it counts).
    for (Op *op = first; op && !op->def().has(kTerminator); op = op->next()) {
      if (isWriteBack(op)) {
        writeBacks_.insert(op);
        viewsOfWriteBacks.insert(op->result());
      } else if (viewsOfWriteBacks.count(op->operand(0))) {
        for (const auto &r : op->results())
          viewsOfWriteBacks.insert(r.get());
      } else {
        writeBacks_.clear();
        viewsOfWriteBacks.clear();
      }
    }
  }

  /// Users a member of a written storage may have: readers, writers, the graph's return, and
  /// the yield of the block the storage lives in (it runs after every write there).
  bool allowedUser(const Op &u, const Value *base) const {
    if (u.name() == "return") return u.parentBlock() == body_;
    if (u.name() == "yield") return u.parentBlock() == definingBlock(base);
    if (u.def().has(kInPlace)) return true;
    return u.def().isPure() && u.numRegions() == 0 && u.name() != "tuple_construct";
  }

  void addBase(Value *v, BaseKind k, bool contiguous) {
    if (!v->type().isTensor()) return;
    info_[v] = Member{.base = v};
    kind_[v] = k;
    if (contiguous) contiguous_.insert(v);
  }

  void visitBlock(Block *b, bool top) {
    for (const auto &a : b->arguments())
      addBase(a.get(), top ? BaseKind::Input : BaseKind::Opaque, false);
    for (Op *op : *b) {
      for (size_t r = 0; r < op->numRegions(); ++r)
        visitBlock(op->region(r), false);
      if (op->def().has(kInPlace) && op->numOperands() > 0 && isMember(op->operand(0))) {
        Member m = info_.at(op->operand(0));
        m.parent = op->operand(0);
        for (const auto &r : op->results())
          info_[r.get()] = m;
        writes_.push_back(op);
        continue;
      }
      ViewKind vk = viewKind(*op);
      if (vk != ViewKind::Fresh && isMember(op->operand(0))) {
        Value *src = op->operand(0);
        Member m = info_.at(src);
        m.parent = src;
        bool contig = contiguous_.count(src) > 0;
        if (vk == ViewKind::OrderIfContig && !contig) m.ambiguous = true;
        if (vk == ViewKind::Exact) m.orderPreserving = false;
        if (op->name() == "expand" || op->name() == "expand_as") m.overlapping = true;
        for (const auto &r : op->results()) {
          info_[r.get()] = m;
          if (vk != ViewKind::Exact && contig) contiguous_.insert(r.get());
        }
        continue;
      }
      // A fresh tensor, unless the op is opaque about what it returns.
      bool opaque = !op->def().isPure() || op->numRegions() > 0 || op->name() == "tuple_get" ||
                    vk != ViewKind::Fresh;
      // Constants share their attribute's storage, which may have any strides.
      bool contiguous = !opaque && op->name() != "constant";
      for (const auto &r : op->results())
        addBase(r.get(), opaque ? BaseKind::Opaque : BaseKind::Fresh, contiguous);
    }
  }

  Block *body_;
  std::unordered_map<const Value *, Member> info_;
  std::unordered_map<const Value *, BaseKind> kind_;
  std::unordered_set<const Value *> contiguous_, written_;
  std::vector<Op *> writes_;
  std::unordered_set<const Op *> writeBacks_;
  bool refused_ = false;
};

class Rewriter {
public:
  Rewriter(Graph &g, const Analysis &a, PassContext &ctx) : g_(g), a_(a), ctx_(ctx) {
    for (const Value *b : a.writtenBases())
      version_[b] = const_cast<Value *>(b);
  }

  void run() {
    std::vector<Op *> ops;
    g_.walk([&](Op *op) { ops.push_back(op); });
    Op *ret = g_.body()->terminator();
    std::unordered_set<const Op *> writes(a_.writes().begin(), a_.writes().end());
    for (Op *op : ops) {
      if (op == ret) continue;
      if (writes.count(op)) {
        functionalize(op);
        continue;
      }
      for (size_t i = 0; i < op->numOperands(); ++i)
        if (Value *c = current(op->operand(i), op); c != op->operand(i)) op->setOperand(i, c);
      for (const auto &r : op->results())
        if (tracked(r.get())) defVersion_[r.get()] = version_.at(a_.member(r.get()).base);
    }
    if (ret) writeBack(ret);
    for (auto it = a_.writes().rbegin(); it != a_.writes().rend(); ++it)
      replaceOp(*it, {nullptr});
  }

private:
  bool tracked(const Value *v) const { return a_.isMember(v) && a_.isWritten(a_.member(v).base); }

  /// v's value at `at` (an op reading it), re-derived from the current version if stale.
  Value *current(Value *v, Op *at) {
    if (!tracked(v)) return v;
    const Member &m = a_.member(v);
    Value *cur = version_.at(m.base);
    if (v == m.base) return cur;
    if (auto it = defVersion_.find(v); it != defVersion_.end() && it->second == cur) return v;
    if (auto it = derived_.find(v); it != derived_.end() && it->second.first == cur)
      return it->second.second;
    Value *p = current(m.parent, at);
    Op *d = v->definingOp();
    Value *x = p;
    if (!d->def().has(kInPlace)) { // an in-place op's result is its (re-derived) operand
      std::vector<Value *> operands = d->operands();
      operands[0] = p;
      std::vector<Type> types;
      for (const auto &r : d->results())
        types.push_back(r->type());
      Builder b = builderBefore(at, definingBlock(m.base));
      b.setLoc(d->loc());
      x = b.createWithTypes(d->name(), operands, types, d->attrs())->result(v->index());
      ctx_.count("views-rederived");
    }
    derived_[v] = {cur, x};
    return x;
  }

  /// Inserts before `at` or before its ancestor in block `bb` (where the version lives).
  static Builder builderBefore(Op *at, Block *bb) {
    while (at->parentBlock() != bb)
      at = at->parentOp();
    return Builder(bb, at);
  }

  void functionalize(Op *w) {
    Value *t = w->operand(0);
    const Member &m = a_.member(t);
    std::vector<Value *> args;
    for (Value *v : w->operands())
      args.push_back(current(v, w));
    Builder b(w->parentBlock(), w);
    b.setLoc(w->loc());
    Value *nv = outOfPlace(b, *w, args);
    Value *newVersion = t == m.base ? nv : scatterBack(b, version_.at(m.base), t, nv);
    version_[m.base] = newVersion;
    derived_[t] = {newVersion, nv};
    derived_[w->result()] = {newVersion, nv};
    ctx_.count("ops-functionalized");
  }

  /// The contents of the written tensor after w, computed without writing.
  static Value *outOfPlace(Builder &b, const Op &w, const std::vector<Value *> &args) {
    Value *self = args[0];
    const Type &ty = self->type();
    if (w.name() == "copy_" || (w.name() == "fill_" && args.size() > 1)) {
      Value *v = args[1];
      if (w.name() == "fill_") // value: a number or a 0-d tensor, stored as fill_ stores it
        v = b.op("where", {b.op("ones_like", {self}, {{"dtype", DType::Bool}}), v, self});
      if (v->type().dtype() != ty.dtype()) v = b.op("cast", {v}, {{"dtype", ty.dtype()}});
      if (v->type().device() != ty.device())
        v = b.op("to_device", {v}, {{"device", Attr(ty.device().str())}});
      if (v->type().shape() != ty.shape()) v = b.op("expand_as", {v, self});
      return v;
    }
    if (w.name() == "fill_")
      return b.op("full_like", {self}, {{"fill_value", *w.attrOrNull("value")}});
    return b.create(outOfPlaceDef(w)->name, args, w.attrs())->result();
  }

  /// The base version `bv` with `nv` written where member t lies.
  Value *scatterBack(Builder &b, Value *bv, Value *t, Value *nv) {
    const Member &m = a_.member(t);
    const Shape &shape = bv->type().shape();
    if (m.orderPreserving && nv->type().shape() == shape) return nv; // alias, contiguous...
    std::vector<int64_t> sizes;
    for (const DimExpr &d : shape)
      sizes.push_back(d.value());
    Attr sizesAttr(sizes), flat(std::vector<int64_t>{-1});
    if (m.orderPreserving) return b.op("reshape", {nv}, {{"shape", sizesAttr}});
    // The chain from the base to t, base first (in-place results are their operand).
    std::vector<std::pair<Op *, unsigned>> chain;
    for (Value *v = t; v != m.base; v = a_.member(v).parent)
      if (!v->definingOp()->def().has(kInPlace)) chain.emplace_back(v->definingOp(), v->index());
    std::reverse(chain.begin(), chain.end());
    int64_t numel = 1;
    for (int64_t s : sizes)
      numel *= s;
    // reshape, skipped where it would not change the shape.
    auto reshape = [&](Value *v, const Shape &to, const Attr &attr) {
      return v->type().shape() == to ? v : b.op("reshape", {v}, {{"shape", attr}});
    };
    Value *pos = reshape(b.op("arange", {}, {{"end", numel}}), shape, sizesAttr);
    for (auto [op, index] : chain) {
      std::vector<Value *> operands = op->operands();
      operands[0] = pos;
      pos = b.create(op->name(), operands, op->attrs())->result(index);
    }
    auto flatten = [&](Value *v) {
      return v->type().rank() == 1 ? v : b.op("reshape", {v}, {{"shape", flat}});
    };
    Value *updated = b.op("index_put", {flatten(bv), flatten(nv), flatten(pos)});
    return reshape(updated, shape, sizesAttr);
  }

  /// Aliasing root of a value of the rewritten graph (through views and in-place ops).
  static Value *aliasRoot(Value *v) {
    while (Op *d = v->definingOp())
      if ((d->def().has(kView) || d->def().has(kInPlace)) && d->numOperands() > 0)
        v = d->operand(0);
      else
        break;
    return v;
  }

  void writeBack(Op *ret) {
    std::vector<Value *> inputs;
    for (size_t i = 0; i < g_.numInputs(); ++i) {
      Value *in = g_.input(i);
      if (a_.isMember(in) && a_.isWritten(in) && version_.at(in) != in) inputs.push_back(in);
    }
    std::unordered_set<Value *> written(inputs.begin(), inputs.end());
    Builder b(g_.body(), ret);
    b.setLoc(ret->loc());
    // Values read after a write-back must not alias a written-back input (they hold what it
    // contained before): copy them first.
    auto settled = [&](Value *v) {
      if (!v->type().isTensor() || !written.count(aliasRoot(v))) return v;
      ctx_.count("copies-before-writeback");
      return b.op("clone", {v});
    };
    std::vector<Value *> sources;
    for (Value *in : inputs) {
      Value *src = version_.at(in);
      sources.push_back(inputs.size() > 1 ? settled(src) : src); // copy_ reads src first
    }
    std::vector<Value *> outs;
    for (Value *v : ret->operands())
      outs.push_back(tracked(v) && written.count(a_.member(v).base) ? v : settled(current(v, ret)));
    for (size_t i = 0; i < inputs.size(); ++i) {
      version_[inputs[i]] = b.op("copy_", {inputs[i], sources[i]});
      ctx_.count("input-writebacks");
    }
    for (size_t i = 0; i < outs.size(); ++i)
      if (Value *c = current(outs[i], ret); c != ret->operand(i)) ret->setOperand(i, c);
  }

  Graph &g_;
  const Analysis &a_;
  PassContext &ctx_;
  std::unordered_map<const Value *, Value *> version_;    // base -> current contents
  std::unordered_map<const Value *, Value *> defVersion_; // member -> version it was made from
  std::unordered_map<const Value *, std::pair<Value *, Value *>>
      derived_; // member -> (version, value)
};

} // namespace

bool runFunctionalize(Graph &g, PassContext &ctx) {
  Analysis a(g);
  if (a.writes().empty()) return false;
  if (!a.analyse()) {
    ctx.count("refused");
    return false;
  }
  Rewriter(g, a, ctx).run();
  return true;
}

} // namespace xjit::passes
