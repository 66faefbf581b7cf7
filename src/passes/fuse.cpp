// Op fusion: partitions each block into fusion groups (matmul/conv epilogues, reductions with
// their elementwise producers and consumers, chains of elementwise and broadcast ops) and wraps
// each group in a `fusion` op whose isolated body holds the group's ops.
//
// Groups are formed greedily in block order, in three phases: epilogues (an anchor and its
// single-use chain of post-ops), then reductions (grown through elementwise producers and
// consumers while the loop structure stays "rows of the reduced axes"), then elementwise
// groups (ops of one result shape). Broadcast views join the group that consumes them. A group
// is legal when contracting it keeps the graph of groups acyclic and it does not span an op
// with side effects; a value used outside its group becomes a group output (no recomputation),
// except that cheap producers may be cloned into each consuming group (`duplicate-cheap`).
// The fused block is then re-sorted stably so every fusion op follows its inputs.
#include "fuse_rules.h"
#include "mutation_info.h"
#include "passes.h"

#include "xjit/ir/diagnostics.h"
#include "xjit/ir/op_registry.h"

#include <algorithm>
#include <queue>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

namespace xjit::passes {
namespace {

using namespace fuse_rules;

enum class Kind : uint8_t { Elementwise, Reduction, Epilogue };

const char *kindName(Kind k) {
  switch (k) {
  case Kind::Elementwise: return "elementwise";
  case Kind::Reduction: return "reduction";
  case Kind::Epilogue: return "epilogue";
  }
  return "?";
}

struct FuseOptions {
  int64_t maxSize, minSize;
  bool duplicateCheap;
  const MutationInfo *mutation; // values written in place: never cloned (duplicateCheap)
};

struct Group {
  Kind kind;
  std::vector<int> members; // positions in the block
  std::vector<int> copies;  // cheap producers cloned into the group (originals stay outside)
  int lo = 0, hi = 0;       // first and last member position
  int root = 0;             // the op whose location the fusion op takes
  bool alive = true;
  Shape shape;     // elementwise: the result shape of every non-view member
  ReduceAxes axes; // reduction: full shape and reduced axes
  size_t size() const { return members.size() + copies.size(); }
};

/// Shape classes inside a reduction group: the full shape, reduced with keepdim, reduced.
enum class RowClass : uint8_t { Full, Kept, Dropped, Other };

Shape reduced(const ReduceAxes &a, bool keep) {
  Shape out;
  for (size_t d = 0; d < a.full.size(); ++d) {
    bool r = std::binary_search(a.dims.begin(), a.dims.end(), static_cast<int64_t>(d));
    if (!r)
      out.push_back(a.full[d]);
    else if (keep)
      out.push_back(DimExpr(1));
  }
  return out;
}

class BlockFuser {
public:
  BlockFuser(Block *b, const FuseOptions &o, PassContext &ctx) : block_(b), opts_(o), ctx_(ctx) {}

  bool run() {
    index();
    formEpilogues();
    formReductions();
    formElementwise();
    attachBroadcasts();
    dissolveSmall();
    if (opts_.duplicateCheap) duplicateCheap();
    bool any = false;
    for (const Group &g : groups_)
      any |= g.alive;
    if (!any) return false;
    materialize();
    return true;
  }

private:
  // ---- analysis ----

  /// The op of this block that contains `op` (op itself when it is in the block).
  Op *topLevel(Op *op) const {
    while (op->parentBlock() != block_)
      op = op->parentOp();
    return op;
  }

  static bool impure(const Op *op) {
    if (!op->def().isPure() && !op->def().has(kTerminator)) return true;
    for (size_t r = 0; r < op->numRegions(); ++r)
      for (const Op *inner : *op->region(r))
        if (impure(inner)) return true;
    return false;
  }

  void index() {
    for (Op *op : *block_) {
      pos_[op] = static_cast<int>(ops_.size());
      ops_.push_back(op);
    }
    size_t n = ops_.size();
    succ_.assign(n, {});
    pred_.assign(n, {});
    cls_.resize(n);
    impureBefore_.assign(n + 1, 0);
    std::vector<size_t> seenFrom(n, SIZE_MAX); // dedupes users: op j already a user of op i
    for (size_t i = 0; i < n; ++i) {
      Op *op = ops_[i];
      cls_[i] = classify(*op);
      impureBefore_[i + 1] = impureBefore_[i] + (op->def().has(kTerminator) || impure(op));
      for (const auto &r : op->results())
        for (const Use &u : r->uses()) {
          int j = pos_.at(topLevel(u.user));
          if (seenFrom[j] == i) continue;
          seenFrom[j] = i;
          succ_[i].push_back(j);
          pred_[j].push_back(static_cast<int>(i));
        }
    }
    groupOf_.assign(n, -1);
    inCand_.assign(n, 0);
    visited_.assign(n, 0);
  }

  // ---- legality ----

  /// Whether `cand` (sorted positions) may become one group: within the size limit, spanning
  /// no op with side effects (its members move to its last position), and contracting it keeps
  /// the graph of groups acyclic: no path leaves the candidate and comes back. The search
  /// treats existing groups as single nodes. Edges lead to later positions, so a path comes
  /// back only through a group whose members span backwards; past `bound`, where every group
  /// that starts at or before it also ends, none does and the search is pruned. (Pruning past
  /// the candidate's last position instead missed a path through an ungrouped op into a group
  /// that started earlier: the UNet block's group-norm backward, "fusion groups form a cycle".)
  bool legal(const std::vector<int> &cand) {
    if (cand.size() > static_cast<size_t>(opts_.maxSize)) return false;
    int lo = cand.front(), hi = cand.back();
    if (impureBefore_[hi] - impureBefore_[lo + 1] != 0) return false;
    int bound = hi;
    for (bool grew = true; grew;) {
      grew = false;
      for (const Group &g : groups_)
        if (g.alive && g.lo <= bound && g.hi > bound) {
          bound = g.hi;
          grew = true;
        }
    }
    ++gen_;
    for (int c : cand)
      inCand_[c] = gen_;
    std::vector<int> stack;
    auto visit = [&](int x) -> bool { // true: a cycle
      if (inCand_[x] == gen_) return true;
      if (visited_[x] == gen_) return false;
      if (x > bound) return false;
      int g = groupOf_[x];
      visited_[x] = gen_;
      stack.push_back(x);
      if (g >= 0)
        for (int m : groups_[g].members)
          if (visited_[m] != gen_) {
            if (inCand_[m] == gen_) return true;
            visited_[m] = gen_;
            stack.push_back(m);
          }
      return false;
    };
    for (int c : cand)
      for (int s : succ_[c])
        if (inCand_[s] != gen_ && visit(s)) return false;
    while (!stack.empty()) {
      int x = stack.back();
      stack.pop_back();
      for (int s : succ_[x])
        if (visit(s)) return false;
    }
    return true;
  }

  std::vector<int> withOp(const Group &g, int op) const {
    std::vector<int> c = g.members;
    c.insert(std::upper_bound(c.begin(), c.end(), op), op);
    return c;
  }

  int newGroup(Kind k, int op) {
    Group g;
    g.kind = k;
    g.members = {op};
    g.lo = g.hi = g.root = op;
    groups_.push_back(std::move(g));
    groupOf_[op] = static_cast<int>(groups_.size()) - 1;
    return groupOf_[op];
  }

  void addMember(int g, int op) {
    Group &gr = groups_[g];
    gr.members.insert(std::upper_bound(gr.members.begin(), gr.members.end(), op), op);
    gr.lo = gr.members.front();
    gr.hi = gr.members.back();
    groupOf_[op] = g;
  }

  void dissolve(int g) {
    for (int m : groups_[g].members)
      groupOf_[m] = -1;
    groups_[g].alive = false;
    groups_[g].members.clear();
  }

  const Type &resultType(int i) const { return ops_[i]->result(0)->type(); }

  // ---- phase 1: epilogues ----

  void formEpilogues() {
    for (size_t i = 0; i < ops_.size(); ++i) {
      if (cls_[i] != FuseClass::Anchor || groupOf_[i] >= 0) continue;
      const Type &anchorType = resultType(static_cast<int>(i));
      std::vector<int> chain = {static_cast<int>(i)};
      Value *cur = ops_[i]->result(0);
      while (static_cast<int64_t>(chain.size()) < opts_.maxSize && cur->uses().size() == 1) {
        Op *u = cur->uses()[0].user;
        if (u->parentBlock() != block_) break;
        int j = pos_.at(u);
        if (groupOf_[j] >= 0 || cls_[j] != FuseClass::Elementwise || !isPostOp(*u, cur) ||
            u->result(0)->type() != anchorType)
          break;
        if (ops_[i]->name().starts_with("conv") && !convTakesPostOp(*ops_[i], *u, cur)) break;
        if (ops_[i]->attrOrNull("causal") && !causalTakesPostOp(*u, cur)) break;
        if (std::any_of(chain.begin() + 1, chain.end(),
                        [&](int k) { return eltwiseParamsClash(*ops_[k], *u); }))
          break;
        if (impureBefore_[j] - impureBefore_[chain.front() + 1] != 0) break;
        chain.push_back(j);
        cur = u->result(0);
      }
      if (chain.size() < 2 || static_cast<int64_t>(chain.size()) < opts_.minSize) continue;
      int g = newGroup(Kind::Epilogue, chain[0]);
      for (size_t k = 1; k < chain.size(); ++k)
        addMember(g, chain[k]);
    }
  }

  // ---- phase 2: reductions ----

  RowClass rowClass(const Group &g, const Type &t) const {
    if (!t.isTensor()) return RowClass::Other;
    if (t.shape() == g.axes.full) return RowClass::Full;
    if (t.shape() == reduced(g.axes, true)) return RowClass::Kept;
    if (t.shape() == reduced(g.axes, false)) return RowClass::Dropped;
    return RowClass::Other;
  }

  /// Whether an in-group value of type `in` may feed member `user` of the group without
  /// leaving the row-by-row loop structure: reductions and row ops read full rows; full-shaped
  /// elementwise ops read full values or reduced values kept as size-1 dims (broadcast along
  /// the row); reduced-shaped ones read values of their own shape. 0-d values broadcast freely.
  bool feedsRow(const Group &g, const Type &in, int user) const {
    RowClass ic = rowClass(g, in);
    if (ic == RowClass::Other) return false;
    if (cls_[user] != FuseClass::Elementwise) return ic == RowClass::Full;
    RowClass uc = rowClass(g, resultType(user));
    if (in.rank() == 0) return uc != RowClass::Other;
    if (uc == RowClass::Full) return ic == RowClass::Full || ic == RowClass::Kept;
    return ic == uc;
  }

  bool fitsReduction(const Group &g, int x) const {
    FuseClass c = cls_[x];
    if (c == FuseClass::Reduction || c == FuseClass::Row) {
      auto a = reduceAxes(*ops_[x]);
      if (!a || a->full != g.axes.full || a->dims != g.axes.dims) return false;
    } else if (c != FuseClass::Elementwise || rowClass(g, resultType(x)) == RowClass::Other) {
      return false;
    }
    // Every new edge between x and the members must keep the loop structure.
    for (Value *v : ops_[x]->operands())
      if (Op *d = v->definingOp();
          d && d->parentBlock() == block_ && groupOf_[pos_.at(d)] == groupOf_[g.root])
        if (!feedsRow(g, v->type(), x)) return false;
    for (int s : succ_[x])
      if (groupOf_[s] == groupOf_[g.root] && !feedsRow(g, resultType(x), s)) return false;
    return true;
  }

  bool tryAddToReduction(int g, int x) {
    if (groupOf_[x] >= 0) return false;
    if (cls_[x] != FuseClass::Elementwise && cls_[x] != FuseClass::Reduction &&
        cls_[x] != FuseClass::Row)
      return false;
    if (!fitsReduction(groups_[g], x) || !legal(withOp(groups_[g], x))) return false;
    addMember(g, x);
    return true;
  }

  void formReductions() {
    for (size_t i = 0; i < ops_.size(); ++i) {
      int r = static_cast<int>(i);
      if ((cls_[r] != FuseClass::Reduction && cls_[r] != FuseClass::Row) || groupOf_[r] >= 0)
        continue;
      auto axes = reduceAxes(*ops_[r]);
      if (!axes) continue;
      int g = newGroup(Kind::Reduction, r);
      groups_[g].axes = *axes;
      std::vector<int> work = {r};
      while (!work.empty()) {
        int m = work.back();
        work.pop_back();
        for (int p : std::vector<int>(pred_[m]))
          if (tryAddToReduction(g, p)) work.push_back(p);
        for (int s : std::vector<int>(succ_[m]))
          if (tryAddToReduction(g, s)) work.push_back(s);
      }
    }
  }

  // ---- phase 3: elementwise groups ----

  void formElementwise() {
    for (size_t i = 0; i < ops_.size(); ++i) {
      int u = static_cast<int>(i);
      if (cls_[u] != FuseClass::Elementwise || groupOf_[u] >= 0) continue;
      const Shape &shape = resultType(u).shape();
      std::vector<int> cands;
      for (int p : pred_[u]) {
        int g = groupOf_[p];
        if (g >= 0 && groups_[g].kind == Kind::Elementwise && groups_[g].shape == shape &&
            std::find(cands.begin(), cands.end(), g) == cands.end())
          cands.push_back(g);
      }
      if (cands.size() > 1) { // join all producer groups at once if that is legal
        std::vector<int> all = {u};
        for (int g : cands)
          all.insert(all.end(), groups_[g].members.begin(), groups_[g].members.end());
        std::sort(all.begin(), all.end());
        if (legal(all)) {
          for (size_t k = 1; k < cands.size(); ++k) {
            for (int m : groups_[cands[k]].members)
              addMember(cands[0], m);
            groups_[cands[k]].alive = false;
            groups_[cands[k]].members.clear();
          }
          addMember(cands[0], u);
          continue;
        }
      }
      bool joined = false;
      for (int g : cands)
        if (legal(withOp(groups_[g], u))) {
          addMember(g, u);
          joined = true;
          break;
        }
      if (!joined) groups_[newGroup(Kind::Elementwise, u)].shape = shape;
    }
    for (Group &g : groups_)
      if (g.alive && g.kind == Kind::Elementwise) g.root = g.hi;
  }

  // ---- phase 4: broadcast views join the one group that reads them ----

  void attachBroadcasts() {
    for (int i = static_cast<int>(ops_.size()) - 1; i >= 0; --i) {
      if (cls_[i] != FuseClass::Broadcast || groupOf_[i] >= 0 || succ_[i].empty()) continue;
      int g = groupOf_[succ_[i][0]];
      if (g < 0 || groups_[g].kind == Kind::Epilogue) continue;
      bool all = true;
      for (int s : succ_[i])
        all &= groupOf_[s] == g;
      if (all && readsOutside(groups_[g], i) && legal(withOp(groups_[g], i))) addMember(g, i);
    }
  }

  /// Whether op i may re-index or recompute inside group g: in a reduction group only values
  /// from outside the group (an in-group value re-indexed could be read across rows).
  bool readsOutside(const Group &g, int i) const {
    if (g.kind != Kind::Reduction) return true;
    for (int p : pred_[i])
      if (groupOf_[p] >= 0 && &groups_[groupOf_[p]] == &g) return false;
    return true;
  }

  /// Members that compute something (views only re-index).
  size_t computeSize(const Group &g) const {
    size_t n = 0;
    for (int m : g.members)
      n += cls_[m] != FuseClass::Broadcast;
    return n;
  }

  void dissolveSmall() {
    for (size_t g = 0; g < groups_.size(); ++g)
      if (groups_[g].alive && (computeSize(groups_[g]) < 2 ||
                               static_cast<int64_t>(computeSize(groups_[g])) < opts_.minSize))
        dissolve(static_cast<int>(g));
  }

  // ---- phase 5: cheap producers outside groups are cloned into the groups that read them ----

  bool copyFits(const Group &g, int p) const {
    if (!readsOutside(g, p)) return false;
    // A clone recomputes the value where the group runs: after an in-place write of it (a
    // fill_ between the producer and the group), it would read the value from before the write.
    for (const auto &r : ops_[p]->results())
      if (opts_.mutation->mayBeWritten(r.get())) return false;
    if (cls_[p] == FuseClass::Broadcast) return true;
    if (g.kind == Kind::Elementwise) return resultType(p).shape() == g.shape;
    return rowClass(g, resultType(p)) != RowClass::Other;
  }

  void duplicateCheap() {
    // Groups that hold a clone of an op read its operands: producers of those are consumed by
    // the group too (so chains of cheap ops are cloned as a whole).
    std::unordered_map<int, std::vector<int>> readers;
    for (int p = static_cast<int>(ops_.size()) - 1; p >= 0; --p) {
      if (groupOf_[p] >= 0 || !isCheap(*ops_[p])) continue;
      std::vector<int> consumers = readers[p];
      for (int s : succ_[p])
        if (int g = groupOf_[s]; g >= 0 && groups_[g].alive) consumers.push_back(g);
      std::sort(consumers.begin(), consumers.end());
      consumers.erase(std::unique(consumers.begin(), consumers.end()), consumers.end());
      for (int g : consumers) {
        Group &gr = groups_[g];
        if (gr.kind == Kind::Epilogue || gr.size() >= static_cast<size_t>(opts_.maxSize) ||
            !copyFits(gr, p))
          continue;
        gr.copies.push_back(p);
        copiedInto_[p].push_back(g);
        for (int q : pred_[p])
          readers[q].push_back(g);
      }
    }
  }

  // ---- phase 6: build fusion ops ----

  /// Whether a use of a member result of group `g` by the block op `user` needs the value
  /// outside the group: a member of `g` reads it inside; so does a clone in `g` of a cheap op
  /// whose original disappears. Any other reader needs it as an output.
  bool usedOutside(int g, int user) const {
    if (groupOf_[user] == g) return false;
    auto it = copiedInto_.find(user);
    if (it == copiedInto_.end() || survives(user)) return true;
    for (int h : it->second)
      if (h != g) return true;
    return false;
  }

  /// Whether the original of a cloned op keeps readers outside the groups that clone it.
  bool survives(int p) const {
    const auto &into = copiedInto_.at(p);
    for (int s : succ_[p]) {
      int h = groupOf_[s];
      if (h < 0 || std::find(into.begin(), into.end(), h) == into.end()) return true;
    }
    for (const auto &r : ops_[p]->results())
      for (const Use &u : r->uses())
        if (u.user->parentBlock() != block_) return true;
    return false;
  }

  Op *build(int gi) {
    Group &g = groups_[gi];
    std::vector<int> body = g.members;
    body.insert(body.end(), g.copies.begin(), g.copies.end());
    std::sort(body.begin(), body.end());
    const OpDef &def = OpRegistry::instance().get("fusion");
    const Op &root = *ops_[g.root];
    AttrMap attrs = {{"kind", Attr(kindName(g.kind))}};
    if (g.kind == Kind::Epilogue) attrs["anchor"] = Attr(root.name());
    auto fusion = std::make_unique<Op>(&def, std::vector<Value *>{}, std::vector<Type>{},
                                       std::move(attrs), root.loc());
    Block *region = fusion->region(0); // the constructor creates the OpDef's regions
    std::unordered_map<const Value *, Value *> map;
    std::vector<Value *> inputs;
    for (int i : body) {
      Op *src = ops_[i];
      std::vector<Value *> operands;
      for (Value *v : src->operands()) {
        auto it = map.find(v);
        if (it == map.end()) { // a group input, constants included: the body is isolated
          inputs.push_back(v);
          it = map.emplace(v, region->addArgument(v->type())).first;
        }
        operands.push_back(it->second);
      }
      std::vector<Type> types;
      for (const auto &r : src->results())
        types.push_back(r->type());
      Op *clone = region->push_back(std::make_unique<Op>(
          &src->def(), std::move(operands), std::move(types), src->attrs(), src->loc()));
      for (size_t r = 0; r < src->numResults(); ++r) {
        clone->result(r)->setName(src->result(r)->name());
        map[src->result(r)] = clone->result(r);
      }
    }
    std::vector<Value *> yields;
    for (int m : g.members)
      for (const auto &r : ops_[m]->results()) {
        bool outside = false;
        for (const Use &u : r->uses()) {
          Op *top = topLevel(u.user);
          auto at = pos_.find(top); // not found: a fusion op built before this one reads it
          outside |= top != u.user || at == pos_.end() || usedOutside(gi, at->second);
        }
        if (!outside) continue;
        yields.push_back(map.at(r.get()));
        yields.back()->setName(""); // the fusion result takes the name in the graph
        Value *res = fusion->addResult(r->type());
        res->setName(r->name());
        replacements_.emplace_back(r.get(), res);
      }
    region->push_back(std::make_unique<Op>(&OpRegistry::instance().get("yield"), yields,
                                           std::vector<Type>{}, AttrMap{}, root.loc()));
    fusion->setOperands(std::move(inputs));
    ctx_.count(std::string("groups-") + kindName(g.kind));
    ctx_.count("ops-fused", static_cast<int64_t>(g.members.size()));
    ctx_.count("ops-duplicated", static_cast<int64_t>(g.copies.size()));
    return block_->insert(std::move(fusion), ops_[g.hi]->next());
  }

  void materialize() {
    std::unordered_map<const Op *, int> priority;
    for (size_t i = 0; i < ops_.size(); ++i)
      priority[ops_[i]] = static_cast<int>(i);
    for (size_t g = 0; g < groups_.size(); ++g)
      if (groups_[g].alive) priority[build(static_cast<int>(g))] = groups_[g].hi;
    for (auto &[from, to] : replacements_)
      from->replaceAllUsesWith(to);
    // Erase members, and originals of clones nothing reads any more, users first.
    for (int i = static_cast<int>(ops_.size()) - 1; i >= 0; --i) {
      bool member = groupOf_[i] >= 0 && groups_[groupOf_[i]].alive;
      if (!member && !copiedInto_.count(i)) continue;
      bool used = false;
      for (const auto &r : ops_[i]->results())
        used |= r->hasUses();
      if (used && member) throw std::logic_error("fuse: a fused op is still used");
      if (!used) block_->erase(ops_[i]);
    }
    sortBlock(priority);
  }

  /// Reorders the block so each op follows the ops whose values it uses (in nested regions
  /// too), keeping the original order wherever it is already valid: a fusion op sits at its
  /// group's last position, and ops that read its results move after it. Ops with effects
  /// keep their relative order.
  void sortBlock(const std::unordered_map<const Op *, int> &priority) {
    std::vector<Op *> ops;
    for (Op *op : *block_)
      ops.push_back(op);
    std::unordered_map<const Op *, size_t> at;
    for (size_t i = 0; i < ops.size(); ++i)
      at[ops[i]] = i;
    std::vector<std::vector<size_t>> users(ops.size());
    std::vector<int> waiting(ops.size(), 0);
    auto edge = [&](size_t from, size_t to) {
      users[from].push_back(to);
      ++waiting[to];
    };
    size_t lastEffect = SIZE_MAX;
    for (size_t i = 0; i < ops.size(); ++i) {
      std::vector<size_t> deps;
      auto addDeps = [&](const Op *op) {
        for (const Value *v : op->operands()) {
          Op *d = v->definingOp();
          Op *top = d;
          while (top && top->parentBlock() != block_)
            top = top->parentOp();
          if (!top || top == ops[i]) continue; // defined outside the block or inside op i
          deps.push_back(at.at(top));
        }
      };
      addDeps(ops[i]);
      for (size_t r = 0; r < ops[i]->numRegions(); ++r) {
        auto f = [&](Op *inner) { addDeps(inner); };
        Graph::walkBlock(ops[i]->region(r), f);
      }
      if (impure(ops[i]) || ops[i]->def().has(kTerminator)) {
        if (lastEffect != SIZE_MAX) deps.push_back(lastEffect);
        lastEffect = i;
      }
      std::sort(deps.begin(), deps.end());
      deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
      for (size_t d : deps)
        edge(d, i);
    }
    using Item = std::pair<int, size_t>; // (priority, index): smallest original position first
    std::priority_queue<Item, std::vector<Item>, std::greater<>> ready;
    for (size_t i = 0; i < ops.size(); ++i)
      if (waiting[i] == 0) ready.push({priority.at(ops[i]), i});
    std::vector<Op *> order;
    while (!ready.empty()) {
      size_t i = ready.top().second;
      ready.pop();
      order.push_back(ops[i]);
      for (size_t u : users[i])
        if (--waiting[u] == 0) ready.push({priority.at(ops[u]), u});
    }
    if (order.size() != ops.size()) throw std::logic_error("fuse: fusion groups form a cycle");
    std::vector<std::unique_ptr<Op>> owned;
    for (Op *op : order)
      owned.push_back(block_->remove(op));
    for (auto &op : owned)
      block_->push_back(std::move(op));
  }

  Block *block_;
  const FuseOptions &opts_;
  PassContext &ctx_;
  std::vector<Op *> ops_;
  std::unordered_map<const Op *, int> pos_;
  std::vector<std::vector<int>> succ_, pred_;
  std::vector<FuseClass> cls_;
  std::vector<int> impureBefore_; // number of ops with effects before each position
  std::vector<int> groupOf_;
  std::vector<Group> groups_;
  std::unordered_map<int, std::vector<int>> copiedInto_; // cloned op -> groups with a clone
  std::vector<std::pair<Value *, Value *>> replacements_;
  std::vector<int> inCand_, visited_;
  int gen_ = 0;
};

/// Fuses a block, then the blocks of its if/loop ops (fusion bodies are never fused again).
bool fuseBlock(Block *b, const FuseOptions &opts, PassContext &ctx) {
  bool changed = BlockFuser(b, opts, ctx).run();
  for (Op *op : *b)
    if (op->name() != "fusion")
      for (size_t r = 0; r < op->numRegions(); ++r)
        changed |= fuseBlock(op->region(r), opts, ctx);
  return changed;
}

} // namespace

bool runFuse(Graph &g, PassContext &ctx) {
  FuseOptions opts{.maxSize = ctx.intOption("max-group-size"),
                   .minSize = ctx.intOption("min-group-size"),
                   .duplicateCheap = ctx.boolOption("duplicate-cheap"),
                   .mutation = nullptr};
  if (opts.maxSize < 2) throw Error(ErrorKind::User, "fuse: max-group-size must be at least 2");
  const MutationInfo mutation(g);
  opts.mutation = &mutation;
  return fuseBlock(g.body(), opts, ctx);
}

} // namespace xjit::passes
