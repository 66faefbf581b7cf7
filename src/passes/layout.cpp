// Layout transformation: runs chains of convolutions and poolings, with the elementwise ops
// between them, channels-last (or back to channels-first), converting only at a chain's edges.
//
// A chain is a connected set of layout-aware ops (conv, conv_transpose, pooling) and
// elementwise ops over the same rank, linked by activations (a conv's input, an elementwise
// operand of the result's shape). Each chain with at least `min-convs` layout-aware ops is
// rewritten: those ops get `layout = "nhwc"`, elementwise members compute on channels-last
// values, each activation entering the chain is converted once (permute + contiguous: a
// physical NHWC copy), each member value read outside gets one permute back (a strided view,
// no copy; a copy where two graph outputs view it), and smaller operands that broadcast into a
// member (a [C,1,1] bias) are re-indexed with views. Elementwise members are dropped from a chain
// while that removes conversions, so the chain never converts more values than needed. Conversions
// between consecutive layout-aware ops never appear: they are in the same chain. Values are
// unchanged (views and copies only), so the pass is exact.
#include "passes.h"

#include "xjit/ir/builder.h"
#include "xjit/ir/diagnostics.h"
#include "xjit/ir/op_registry.h"

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>

namespace xjit::passes {
namespace {

/// Spatial rank of a layout-aware op (conv2d, max_pool2d_with_indices ... -> 2), or 0.
int spatialRank(const Op &op) {
  static const char *kPrefixes[] = {
      "conv_transpose", "conv", "max_pool", "avg_pool", "adaptive_avg_pool", "adaptive_max_pool"};
  const std::string &n = op.name();
  for (const char *p : kPrefixes) {
    std::string_view prefix(p);
    if (n.size() < prefix.size() + 2 || n.compare(0, prefix.size(), prefix) != 0) continue;
    std::string_view rest(n.data() + prefix.size(), n.size() - prefix.size());
    if (rest.size() >= 2 && rest[1] == 'd' && rest[0] >= '1' && rest[0] <= '3' &&
        (rest.size() == 2 || rest.substr(2) == "_with_indices"))
      return rest[0] - '0';
  }
  return 0;
}

/// A chain's layout family: values of this rank with the channel dim at rank - nd - 1.
struct Key {
  int64_t rank = 0;
  int nd = 0;
  bool operator==(const Key &o) const { return rank == o.rank && nd == o.nd; }
};

/// new[i] = old[perm[i]]: moves the channel dim last (toLast) or back to rank - nd - 1.
std::vector<int64_t> channelPerm(const Key &k, bool toLast) {
  std::vector<int64_t> p;
  for (int64_t i = 0; i < k.rank; ++i)
    p.push_back(i);
  int64_t c = k.rank - k.nd - 1;
  if (toLast) {
    p.erase(p.begin() + c);
    p.push_back(c);
  } else {
    p.pop_back();
    p.insert(p.begin() + c, k.rank - 1);
  }
  return p;
}

bool isLast(const Op &op) {
  const Attr *l = op.attrOrNull("layout");
  return l && l->kind() == AttrKind::Str && l->asStr() == "nhwc";
}

class BlockLayout {
public:
  BlockLayout(Block *b, bool toLast, int64_t minConvs, PassContext &ctx)
      : block_(b), toLast_(toLast), minConvs_(minConvs), ctx_(ctx) {}

  bool run() {
    for (Op *op : *block_) {
      pos_[op] = static_cast<int>(ops_.size());
      ops_.push_back(op);
    }
    std::vector<int> chainOf(ops_.size(), -1);
    bool changed = false;
    for (size_t i = 0; i < ops_.size(); ++i) {
      auto key = anchorKey(*ops_[i]);
      if (!key || chainOf[i] >= 0) continue;
      std::set<int> chain = grow(static_cast<int>(i), *key, chainOf);
      for (int m : chain)
        chainOf[m] = static_cast<int>(i);
      prune(chain, *key);
      for (std::set<int> &part : components(chain, *key))
        if (anchors(part) >= minConvs_) {
          rewrite(part, *key);
          changed = true;
        }
    }
    if (toLast_) changed |= runViewChains(chainOf);
    return changed;
  }

private:
  /// Chains without a conv whose activations all come in as channels-first views of
  /// channels-last values (`permute(v, [0, 3, 1, 2])`: a backward graph's saved activations,
  /// a tiled max-pool gradient): computed channels-last on those values, they need no
  /// conversion at all, and their kernels read and write in memory order instead of striding
  /// across channels. Batched 2-d and 3-d ranks only (a rank-3 [0, 2, 1] is any transpose).
  bool runViewChains(std::vector<int> &chainOf) {
    bool changed = false;
    for (size_t i = 0; i < ops_.size(); ++i) {
      const Op &op = *ops_[i];
      if (chainOf[i] >= 0 || op.numResults() != 1 || !op.result(0)->type().isTensor()) continue;
      const int64_t rank = op.result(0)->type().rank();
      const Key key{rank, static_cast<int>(rank - 2)};
      if ((rank != 4 && rank != 5) || !isElementwise(static_cast<int>(i), key) ||
          !readsChannelsLast(static_cast<int>(i), key))
        continue;
      std::set<int> chain = grow(static_cast<int>(i), key, chainOf);
      for (int m : chain)
        chainOf[m] = static_cast<int>(i);
      dropConvertedEntries(chain, key);
      for (std::set<int> &part : components(chain, key))
        if (std::any_of(part.begin(), part.end(),
                        [&](int m) { return readsChannelsLast(m, key); })) {
          rewrite(part, key);
          changed = true;
        }
    }
    return changed;
  }

  /// `v` as a channels-first view of a channels-last value: that value, else nullptr.
  Value *channelsLastSource(const Value *v, const Key &k) const {
    const Op *d = v->definingOp();
    if (!d || d->name() != "permute" || d->operand(0)->type().rank() != k.rank) return nullptr;
    return d->attr("dims").asInts() == channelPerm(k, false) ? d->operand(0) : nullptr;
  }

  /// `v` as a channels-first view of a channels-last value that no chain made: a graph input
  /// (a backward's saved activation) or an op that is no chain member (the reshape ending a
  /// tiled max-pool gradient). Views of chain members are the exits of chains, whose readers
  /// the chain's own pruning left channels-first.
  Value *externalChannelsLast(const Value *v, const Key &k) const {
    Value *src = channelsLastSource(v, k);
    const Op *d = src ? src->definingOp() : nullptr;
    return !d || (!spatialRank(*d) && !d->def().has(kElementwise)) ? src : nullptr;
  }

  bool readsChannelsLast(int m, const Key &k) const {
    for (size_t s : activationSlots(m, k))
      if (externalChannelsLast(ops_[m]->operand(s), k)) return true;
    return false;
  }

  /// Drops the members that an activation would enter by a conversion (a copy), and then the
  /// members reading those, until every member reads channels-last values or other members.
  void dropConvertedEntries(std::set<int> &chain, const Key &k) const {
    std::vector<int> work(chain.begin(), chain.end());
    while (!work.empty()) {
      const int m = work.back();
      work.pop_back();
      if (!chain.count(m)) continue;
      const auto slots = activationSlots(m, k);
      if (std::all_of(slots.begin(), slots.end(), [&](size_t s) {
            const Value *v = ops_[m]->operand(s);
            return chain.count(producer(v)) || externalChannelsLast(v, k);
          }))
        continue;
      chain.erase(m);
      for (const Use &u : ops_[m]->result(0)->uses())
        if (int j = indexOf(u.user); u.user->parentBlock() == block_ && chain.count(j))
          work.push_back(j);
    }
  }

  // ---- classification ----

  /// The layout family of a conv/pool that is not yet in the target layout.
  std::optional<Key> anchorKey(const Op &op) const {
    int nd = spatialRank(op);
    if (!nd || isLast(op) == toLast_ || !op.operand(0)->type().isTensor()) return std::nullopt;
    int64_t rank = op.operand(0)->type().rank();
    if (rank != nd + 1 && rank != nd + 2) return std::nullopt;
    return Key{rank, nd};
  }

  bool isAnchor(int i, const Key &k) const {
    auto key = anchorKey(*ops_[i]);
    return key && *key == k;
  }

  bool isElementwise(int i, const Key &k) const {
    const Op &op = *ops_[i];
    return op.def().has(kElementwise) && op.def().isPure() && op.numResults() == 1 &&
           op.result(0)->type().isTensor() && op.result(0)->type().rank() == k.rank;
  }

  bool isMember(int i, const Key &k) const { return isAnchor(i, k) || isElementwise(i, k); }

  /// Operand slots of member `i` that carry activations in the chain's layout.
  std::vector<size_t> activationSlots(int i, const Key &k) const {
    const Op &op = *ops_[i];
    if (isAnchor(i, k)) return {0};
    std::vector<size_t> slots;
    for (size_t s = 0; s < op.numOperands(); ++s)
      if (op.operand(s)->type().isTensor() &&
          op.operand(s)->type().shape() == op.result(0)->type().shape())
        slots.push_back(s);
    return slots;
  }

  /// The block op containing `op`, or -1 when it is not under this block.
  int topIndex(Op *op) const {
    while (op && op->parentBlock() != block_)
      op = op->parentOp();
    return op ? indexOf(op) : -1;
  }

  /// Position of a block op; -1 for ops created by this run (conversions).
  int indexOf(const Op *op) const {
    auto it = pos_.find(op);
    return it == pos_.end() ? -1 : it->second;
  }

  int producer(const Value *v) const {
    Op *d = v->definingOp();
    if (!d || d->parentBlock() != block_) return -1;
    auto it = pos_.find(d);
    return it == pos_.end() ? -1 : it->second;
  }

  // ---- chains ----

  std::set<int> grow(int seed, const Key &k, const std::vector<int> &chainOf) const {
    std::set<int> chain = {seed};
    std::vector<int> work = {seed};
    auto consider = [&](int j) {
      if (j >= 0 && chainOf[j] < 0 && !chain.count(j) && isMember(j, k)) {
        chain.insert(j);
        work.push_back(j);
      }
    };
    while (!work.empty()) {
      int m = work.back();
      work.pop_back();
      for (size_t s : activationSlots(m, k))
        consider(producer(ops_[m]->operand(s)));
      for (const auto &r : ops_[m]->results())
        for (const Use &u : r->uses()) {
          int j = u.user->parentBlock() == block_ ? indexOf(u.user) : -1;
          if (j < 0 || !isMember(j, k)) continue;
          auto slots = activationSlots(j, k);
          if (std::find(slots.begin(), slots.end(), u.index) != slots.end()) consider(j);
        }
    }
    return chain;
  }

  /// Conversions a chain needs: activations entering it plus member values read outside it.
  size_t cost(const std::set<int> &chain, const Key &k) const {
    std::set<const Value *> entries;
    size_t exits = 0;
    for (int m : chain) {
      for (size_t s : activationSlots(m, k)) {
        const Value *v = ops_[m]->operand(s);
        if (!chain.count(producer(v))) entries.insert(v);
      }
      for (const auto &r : ops_[m]->results())
        exits += readOutside(r.get(), chain);
    }
    return entries.size() + exits;
  }

  bool readOutside(const Value *v, const std::set<int> &chain) const {
    for (const Use &u : v->uses())
      if (u.user->parentBlock() != block_ || !chain.count(indexOf(u.user))) return true;
    return false;
  }

  /// Drops elementwise members while that strictly lowers the number of conversions.
  void prune(std::set<int> &chain, const Key &k) const {
    for (bool again = true; again;) {
      again = false;
      size_t base = cost(chain, k);
      for (int m : std::vector<int>(chain.begin(), chain.end())) {
        if (isAnchor(m, k)) continue;
        chain.erase(m);
        size_t c = cost(chain, k);
        if (c < base) {
          base = c;
          again = true;
        } else {
          chain.insert(m);
        }
      }
    }
  }

  /// Connected parts of a chain (pruning may split it).
  std::vector<std::set<int>> components(const std::set<int> &chain, const Key &k) const {
    std::vector<std::set<int>> parts;
    std::set<int> seen;
    for (int s : chain) {
      if (seen.count(s)) continue;
      std::set<int> part = {s};
      std::vector<int> work = {s};
      seen.insert(s);
      while (!work.empty()) {
        int m = work.back();
        work.pop_back();
        auto link = [&](int j) {
          if (chain.count(j) && !seen.count(j)) {
            seen.insert(j);
            part.insert(j);
            work.push_back(j);
          }
        };
        for (size_t slot : activationSlots(m, k))
          link(producer(ops_[m]->operand(slot)));
        for (const auto &r : ops_[m]->results())
          for (const Use &u : r->uses())
            if (int j = indexOf(u.user); u.user->parentBlock() == block_ && chain.count(j)) {
              auto slots = activationSlots(j, k);
              if (std::find(slots.begin(), slots.end(), u.index) != slots.end()) link(j);
            }
      }
      parts.push_back(std::move(part));
    }
    return parts;
  }

  int64_t anchors(const std::set<int> &chain) const {
    int64_t n = 0;
    for (int m : chain)
      n += spatialRank(*ops_[m]) != 0;
    return n;
  }

  /// How many operands of the graph's return `use` reaches through views (0 if none).
  static int64_t returnedViews(const Use &use) {
    const Op *user = use.user;
    if (user->def().has(kTerminator)) return user->parentOp() == nullptr ? 1 : 0;
    if (!user->def().has(kView) || user->numResults() != 1 || use.index != 0) return 0;
    return returnedViews(user->result(0));
  }
  static int64_t returnedViews(const Value *v) {
    int64_t n = 0;
    for (const Use &u : v->uses())
      n += returnedViews(u);
    return n;
  }

  // ---- rewriting ----

  Value *create(Op *before, std::string_view name, Value *x, AttrMap attrs = {}) {
    Builder b(block_, before);
    b.setLoc(before->loc());
    return b.op(name, {x}, std::move(attrs));
  }

  /// An operand of a smaller shape that broadcasts into member results: padded to the chain's
  /// rank with leading size-1 dims and permuted like the chain (views).
  Value *adapt(Value *v, Op *before, const Key &k) {
    const Type &t = v->type();
    bool trivial = true;
    for (const DimExpr &d : t.shape())
      trivial &= d == DimExpr(1);
    if (trivial) return v; // all-ones shapes broadcast the same in any layout
    Value *x = v;
    for (int64_t r = t.rank(); r < k.rank; ++r)
      x = create(before, "unsqueeze", x, {{"dim", 0}});
    ctx_.count("operands-adapted");
    return create(before, "permute", x, {{"dims", Attr(channelPerm(k, toLast_))}});
  }

  void rewrite(const std::set<int> &chain, const Key &k) {
    std::map<const Value *, Value *> entries, adapted;
    for (int m : chain) {
      Op *op = ops_[m];
      auto slots = activationSlots(m, k);
      for (size_t s = 0; s < op->numOperands(); ++s) {
        Value *v = op->operand(s);
        if (chain.count(producer(v))) continue; // a member value: already converted
        if (std::find(slots.begin(), slots.end(), s) != slots.end()) {
          // An elementwise member reads a channels-last source as it is (no copy).
          if (Value *source = toLast_ && !spatialRank(*op) ? channelsLastSource(v, k) : nullptr) {
            op->setOperand(s, source);
            continue;
          }
          auto it = entries.find(v);
          if (it == entries.end()) {
            Value *p = create(op, "permute", v, {{"dims", Attr(channelPerm(k, toLast_))}});
            it = entries.emplace(v, create(op, "contiguous", p)).first;
            ctx_.count("conversions");
          }
          op->setOperand(s, it->second);
        } else if (!spatialRank(*op) && v->type().isTensor()) {
          auto it = adapted.find(v);
          if (it == adapted.end()) it = adapted.emplace(v, adapt(v, op, k)).first;
          op->setOperand(s, it->second);
        }
      }
      if (spatialRank(*op)) {
        if (toLast_)
          op->setAttr("layout", Attr("nhwc"));
        else
          op->removeAttr("layout");
      }
      std::vector<Type> types = op->def().infer(*op);
      for (size_t r = 0; r < types.size(); ++r)
        op->result(r)->setType(types[r]);
      ctx_.count("ops-converted");
    }
    // Values read outside the chain get one conversion back, right after their definition.
    for (int m : chain) {
      Op *op = ops_[m];
      for (const auto &r : op->results()) {
        std::vector<Use> outside;
        for (const Use &u : r->uses()) {
          int top = topIndex(u.user);
          if (u.user->parentBlock() != block_ || !chain.count(top)) outside.push_back(u);
        }
        if (outside.empty()) continue;
        Value *back =
            create(op->next(), "permute", r.get(), {{"dims", Attr(channelPerm(k, !toLast_))}});
        // Graph outputs that view one another must come back in the layout the graph gave
        // them before the pass (the frontend cannot re-stride one without cutting it off from
        // the other): those uses read a copy in channels-first order (fuzzer seed 198915:
        // `y = conv1d(...); return y.mT, y`). A single output keeps the view.
        Value *copy = nullptr;
        if (returnedViews(r.get()) >= 2) {
          copy = create(back->definingOp()->next(), "contiguous", back);
          ctx_.count("returned-copies");
        }
        for (const Use &u : outside)
          u.user->setOperand(u.index, copy && returnedViews(u) > 0 ? copy : back);
        ctx_.count("conversions");
      }
    }
    ctx_.count("chains");
  }

  Block *block_;
  bool toLast_;
  int64_t minConvs_;
  PassContext &ctx_;
  std::vector<Op *> ops_;
  std::unordered_map<const Op *, int> pos_;
};

bool layoutBlock(Block *b, bool toLast, int64_t minConvs, PassContext &ctx) {
  bool changed = BlockLayout(b, toLast, minConvs, ctx).run();
  for (Op *op : *b)
    if (op->name() != "fusion")
      for (size_t r = 0; r < op->numRegions(); ++r)
        changed |= layoutBlock(op->region(r), toLast, minConvs, ctx);
  return changed;
}

} // namespace

bool runLayout(Graph &g, PassContext &ctx) {
  const std::string &target = ctx.option("target-layout");
  if (target != "nhwc" && target != "nchw")
    throw Error(ErrorKind::User,
                "layout: target-layout must be nhwc or nchw, got '" + target + "'");
  int64_t minConvs = ctx.intOption("min-convs");
  return layoutBlock(g.body(), target == "nhwc", std::max<int64_t>(minConvs, 1), ctx);
}

} // namespace xjit::passes
