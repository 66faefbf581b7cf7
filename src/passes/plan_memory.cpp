// Memory planning: gives every intermediate tensor of static size an offset in one arena
// (reused across values whose lifetimes do not overlap, best fit, largest first), lets
// elementwise ops write into an operand that dies there, and annotates the IR for the
// backend's runtime, which allocates the arena once per call.
//
// Annotations (attributes with a '.' are not checked by the verifier and survive printing):
//   mem.offset = [o, ...]   on an op with a planned result: per result, its arena byte offset
//                           (64-byte aligned), or -1 for a result that is not in the arena
//   mem.inplace = [i, ...]  per result, the operand whose buffer it reuses (-1: none); the
//                           buffers are then identical, so the kernel must not assume noalias
//   mem.arena = N           on the graph's `return`: the arena size in bytes
// Results not in the arena: graph outputs (their own buffers, handed to the caller without a
// copy, and so are their bases when an output is a view), bases of views a host call is given
// (PyTorch sees the view on its base's whole storage, as eager's: an `as_strided` offset counts
// from the base's start, not the arena's), views (they share their base's
// buffer, which stays alive while the view does), tensors of symbolic size and values carried
// around loops (allocated at run time), constants and non-tensors. A reshape/flatten/contiguous
// of a strided view of a planned value (a permute, a slice...) gets its own slot for the
// contiguous result, and still keeps its operand alive: the runtime's reference kernel may
// return a view instead (see alias()). Otherwise (a caller's tensor, or storage that is
// written in place, where a copy could miss a write a view sees) it is left to the run time: a
// view when the strides allow, else a copy, as the reference kernels do.
//
// Lifetimes run in execution order (ops numbered in pre-order, a region's ops inside its op's
// span) from the definition to the last use of the value or of anything aliasing it (views,
// if results, tuples); a use inside a loop that the value was defined outside of keeps the
// value alive to the loop's end. Fusion bodies are opaque (the backend keeps their temporaries
// in registers or its own scratch).
#include "mutation_info.h"
#include "passes.h"

#include "xjit/ir/op_registry.h"

#include <algorithm>
#include <optional>
#include <unordered_map>
#include <unordered_set>

namespace xjit::passes {
namespace {

constexpr int64_t kAlign = 64;

int64_t alignUp(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

/// Reshape-like views that copy when the strides do not allow a view.
bool mayCopy(const Op &op) {
  return op.name() == "reshape" || op.name() == "flatten" || op.name() == "contiguous";
}

/// Views that keep a contiguous operand contiguous.
bool keepsContiguous(const Op &op) {
  static const std::unordered_set<std::string_view> kOps = {
      "reshape", "flatten", "contiguous", "view", "unflatten", "alias", "unsqueeze", "squeeze"};
  return kOps.count(op.name()) != 0;
}

struct Buffer {
  int64_t size = 0; // aligned bytes
  int start = 0, end = 0;
  int64_t offset = -1;
};

class Planner {
public:
  Planner(Graph &g, PassContext &ctx) : g_(g), ctx_(ctx) {}

  bool run() {
    number(g_.body());
    // First every view may alias (reshape-like ones too): which storage is written in place?
    alias(g_.body(), /*decideCopies=*/false);
    for (const Value *w : writes_)
      written_.insert(find(w));
    mayAlias_ = std::move(parent_);
    parent_.clear();
    strides_.clear();
    alias(g_.body(), /*decideCopies=*/true);
    classify();
    lifetimes();
    // Off for the runtime: its kernels never write a result over an operand (generated ones
    // mark buffers noalias), so a shared buffer would only have to be split again, at the cost
    // of an arena slice that no other value could reuse.
    if (ctx_.boolOption("in-place")) inPlace();
    assignOffsets();
    return annotate();
  }

private:
  // ---- execution order ----

  void number(Block *b) {
    for (Op *op : *b) {
      order_.push_back(op);
      start_[op] = end_[op] = next_++;
      if (op->name() == "fusion" || !op->numRegions()) continue; // a fusion is one step
      for (size_t r = 0; r < op->numRegions(); ++r)
        number(op->region(r));
      end_[op] = next_++;
    }
  }

  // ---- may-alias classes (union-find over values) ----

  const Value *find(const Value *v) {
    auto [it, fresh] = parent_.try_emplace(v, v);
    if (fresh || it->second == v) return v;
    const Value *root = find(it->second);
    parent_[v] = root;
    return root;
  }

  void unite(const Value *a, const Value *b) {
    const Value *ra = find(a), *rb = find(b);
    if (ra != rb) parent_[rb] = ra;
  }

  /// What is known statically about a value's strides: new buffers are contiguous; views of
  /// them that permute, slice or broadcast are (almost always) not; values from the caller,
  /// control flow or host calls may be either.
  enum class Strides : uint8_t { Contiguous, Strided, Unknown };

  Strides strides(const Value *v) {
    auto it = strides_.find(v);
    if (it != strides_.end()) return it->second;
    Strides s = Strides::Unknown;
    if (const Op *d = v->definingOp()) {
      if (copies_.count(v))
        s = Strides::Contiguous;
      else if (d->def().has(kInPlace))
        s = strides(d->operand(0));
      else if (!d->def().has(kView))
        s = fresh(*d) && !notFresh_.count(v) ? Strides::Contiguous : Strides::Unknown;
      else if (Strides in = strides(d->operand(0)); in != Strides::Contiguous)
        s = in;
      else
        s = keepsContiguous(*d) ? Strides::Contiguous : Strides::Strided;
    }
    return strides_[v] = s;
  }

  /// Ops whose results are new buffers (not views, in-place writes or plumbing).
  static bool fresh(const Op &op) {
    const OpDef &def = op.def();
    if (def.has(kView) || def.has(kInPlace) || def.has(kSideEffect) || def.has(kConstantLike))
      return false;
    return op.name() != "if" && op.name() != "loop" && op.name() != "tuple_construct" &&
           op.name() != "tuple_get";
  }

  /// A fusion result that is (a view of) a block argument aliases the matching operand.
  static const Value *fusionAliasedOperand(const Op &fusion, size_t result) {
    const Block &body = *fusion.region(0);
    const Op *y = body.terminator();
    if (!y || result >= y->numOperands()) return nullptr;
    const Value *v = y->operand(result);
    while (const Op *d = v->definingOp()) {
      if (!(d->def().has(kView) || d->def().has(kInPlace)) || !d->numOperands()) return nullptr;
      v = d->operand(0);
    }
    return v->ownerBlock() == &body ? fusion.operand(v->index()) : nullptr;
  }

  /// Whether v's storage, or storage it may share, is written by an in-place op or a host call.
  bool mayBeWritten(const Value *v) const {
    auto it = mayAlias_.find(v);
    while (it != mayAlias_.end() && it->second != it->first)
      it = mayAlias_.find(it->second);
    return it != mayAlias_.end() && written_.count(it->first);
  }

  /// Builds the may-alias classes; with decideCopies, a reshape-like view of a strided value
  /// that is never written becomes a copy in its own slot instead of an alias.
  void alias(Block *b, bool decideCopies) {
    for (Op *op : *b) {
      for (const auto &r : op->results())
        find(r.get());
      const std::string &name = op->name();
      if (name == "fusion") {
        for (size_t i = 0; i < op->numResults(); ++i)
          if (const Value *a = fusionAliasedOperand(*op, i)) {
            unite(a, op->result(i));
            notFresh_.insert(op->result(i));
          }
        continue;
      }
      for (size_t r = 0; r < op->numRegions(); ++r)
        alias(op->region(r), decideCopies);
      if (!decideCopies && op->def().has(kInPlace) && op->numOperands())
        writes_.push_back(op->operand(0));
      else if (!decideCopies && op->def().has(kSideEffect) && !op->def().has(kTerminator))
        writes_.insert(writes_.end(), op->operands().begin(), op->operands().end());
      bool copy = decideCopies && mayCopy(*op) && strides(op->operand(0)) == Strides::Strided &&
                  !mayBeWritten(op->operand(0));
      if (copy) copies_.insert(op->result(0)); // materialized in its own slot
      // The runtime runs a lone reshape/flatten/contiguous on its reference kernel, which
      // returns a view when the strides allow one ("Strided" is a guess: a reshape of an
      // expanded [1,1,4,S,D] key to [1,4,S,D] is a view), so the operand's storage must stay
      // alive as long as the result does even when a slot is planned for a copy (Gemma's
      // multi-query attention read a value buffer that a later matmul had overwritten).
      if ((copy || op->def().has(kView) || op->def().has(kInPlace)) && op->numOperands()) {
        for (const auto &r : op->results())
          unite(op->operand(0), r.get());
      } else if (forEachControlFlowAlias(*op, [&](Value *a, Value *b) { unite(a, b); })) {
        if (name == "loop")
          for (size_t i = 0; i < op->numResults(); ++i)
            carried_.insert(op->result(i));
      } else if (!fresh(*op) && !op->def().has(kConstantLike)) {
        // Tuples and host calls may hand out any tensor they are given.
        for (Value *v : op->operands())
          for (const auto &r : op->results())
            unite(v, r.get());
      }
    }
  }

  // ---- which values get arena slots ----

  struct ClassInfo {
    bool output = false, carried = false, hostView = false;
    int end = -1; // last use of any member
  };

  static std::optional<int64_t> staticBytes(const Type &t) {
    if (!t.isTensor() || !isStaticShape(t.shape())) return std::nullopt;
    return numelOf(t.shape()).value() * dtypeSize(t.dtype());
  }

  void classify() {
    if (Op *ret = g_.body()->terminator())
      for (Value *v : ret->operands())
        classes_[find(v)].output = true;
    for (const Value *c : carried_)
      classes_[find(c)].carried = true;
    for (Op *op : order_)
      if (op->name() == "external_call")
        for (const Value *v : op->operands())
          if (const Op *d = v->definingOp(); d && d->def().has(kView))
            classes_[find(v)].hostView = true;
    for (Op *op : order_)
      for (const auto &r : op->results()) {
        const Value *v = r.get();
        if (!v->type().isTensor()) continue;
        bool produces = (fresh(*op) && !notFresh_.count(v)) || copies_.count(v);
        if (!produces) continue;
        const ClassInfo &ci = classes_[find(v)];
        auto bytes = staticBytes(v->type());
        if (ci.output)
          ctx_.count("output-values");
        else if (ci.hostView)
          ctx_.count("host-view-values");
        else if (ci.carried || !bytes)
          ctx_.count("dynamic-values");
        else
          planned_.push_back(v);
      }
  }

  // ---- lifetimes ----

  /// Where a use keeps v alive: the user (its whole span if it has regions), or the end of the
  /// outermost loop around the use that v is defined outside of.
  int usePosition(const Value *v, Op *user) const {
    int at = end_.at(user);
    const Block *defBlock = v->isBlockArgument() ? v->ownerBlock() : v->definingOp()->parentBlock();
    for (Op *a = user->parentOp(); a; a = a->parentOp()) {
      bool enclosesDef = false;
      for (const Block *b = defBlock; b; b = b->parentOp() ? b->parentOp()->parentBlock() : nullptr)
        if (b->parentOp() == a) enclosesDef = true;
      if (a->name() == "loop" && !enclosesDef) at = std::max(at, end_.at(a));
    }
    return at;
  }

  void lifetimes() {
    auto visit = [&](const Value *v, int defPos) {
      ClassInfo &ci = classes_[find(v)];
      ci.end = std::max(ci.end, defPos);
      for (const Use &u : v->uses())
        ci.end = std::max(ci.end, usePosition(v, u.user));
    };
    for (Op *op : order_)
      for (const auto &r : op->results())
        visit(r.get(), start_.at(op));
    std::vector<const Block *> blocks = {g_.body()};
    for (Op *op : order_)
      if (op->name() != "fusion")
        for (size_t r = 0; r < op->numRegions(); ++r)
          blocks.push_back(op->region(r));
    for (const Block *b : blocks)
      for (const auto &a : b->arguments())
        visit(a.get(), b->parentOp() ? start_.at(b->parentOp()) : -1);
    for (const Value *v : planned_) {
      Buffer buf;
      buf.size = alignUp(*staticBytes(v->type()));
      buf.start = start_.at(v->definingOp());
      buf.end = classes_[find(v)].end;
      bufferOf_[v] = buffers_.size();
      buffers_.push_back(buf);
    }
  }

  // ---- in-place updates ----

  /// Whether op may write its result into operand slot i: an elementwise computation reading
  /// that operand at the result's own index (same shape, no view in between), and for an
  /// epilogue only in its post-ops (the library call reads its inputs while writing).
  static bool readsInPlace(const Op &op, size_t i) {
    if (op.name() != "fusion") return op.def().has(kElementwise);
    const std::string &kind = op.attr("kind").asStr();
    if (kind != "elementwise" && kind != "epilogue") return false;
    const Block &body = *op.region(0);
    const Op *anchor = nullptr;
    if (kind == "epilogue")
      for (const Op *o : body)
        if (!o->def().has(kConstantLike)) {
          anchor = o;
          break;
        }
    for (const Use &u : body.argument(i)->uses())
      if (u.user == anchor || !u.user->def().has(kElementwise) ||
          u.user->result(0)->type().shape() != body.argument(i)->type().shape())
        return false;
    return true;
  }

  void inPlace() {
    for (Op *op : order_) {
      std::vector<bool> taken(op->numOperands(), false);
      for (size_t r = 0; r < op->numResults(); ++r) {
        const Value *res = op->result(r);
        auto rb = bufferOf_.find(res);
        if (rb == bufferOf_.end() || copies_.count(res)) continue;
        for (size_t i = 0; i < op->numOperands(); ++i) {
          const Value *u = op->operand(i);
          auto ub = bufferOf_.find(u);
          if (taken[i] || ub == bufferOf_.end() || !u->type().isTensor() ||
              u->type().shape() != res->type().shape() ||
              dtypeSize(u->type().dtype()) != dtypeSize(res->type().dtype()))
            continue;
          Buffer &ubuf = buffers_[ub->second];
          // The operand's storage dies here and no other operand reads it (through a view).
          if (ubuf.end != start_.at(op) || classes_[find(u)].end != start_.at(op)) continue;
          bool otherAlias = false;
          for (size_t j = 0; j < op->numOperands(); ++j)
            otherAlias |= op->operand(j) != u && find(op->operand(j)) == find(u);
          if (otherAlias || !readsInPlace(*op, i)) continue;
          ubuf.end = std::max(ubuf.end, buffers_[rb->second].end);
          buffers_[rb->second].size = -1; // merged away
          rb->second = ub->second;
          inplace_[res] = static_cast<int64_t>(i);
          taken[i] = true;
          ctx_.count("in-place");
          break;
        }
      }
    }
  }

  // ---- offsets: largest first, each into the tightest gap among overlapping buffers ----

  void assignOffsets() {
    std::vector<size_t> idx;
    for (size_t i = 0; i < buffers_.size(); ++i)
      if (buffers_[i].size >= 0) idx.push_back(i);
    std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
      return buffers_[a].size != buffers_[b].size ? buffers_[a].size > buffers_[b].size
                                                  : buffers_[a].start < buffers_[b].start;
    });
    // Placed buffers indexed by stretches of the timeline, so each placement only looks at
    // buffers that live near it (lifetimes are mostly short).
    constexpr int kStretch = 64;
    std::vector<std::vector<size_t>> byTime(static_cast<size_t>(next_ / kStretch + 1));
    std::vector<size_t> seen(buffers_.size(), SIZE_MAX);
    for (size_t i : idx) {
      Buffer &b = buffers_[i];
      std::vector<std::pair<int64_t, int64_t>> busy; // [offset, offset + size)
      for (int t = std::max(b.start, 0) / kStretch; t <= b.end / kStretch; ++t)
        for (size_t j : byTime[static_cast<size_t>(t)]) {
          const Buffer &o = buffers_[j];
          if (seen[j] == i) continue;
          seen[j] = i;
          if (o.start <= b.end && b.start <= o.end && o.size > 0)
            busy.emplace_back(o.offset, o.offset + o.size);
        }
      std::sort(busy.begin(), busy.end());
      int64_t best = -1, bestGap = INT64_MAX, at = 0;
      for (auto [lo, hi] : busy) {
        if (lo - at >= b.size && lo - at < bestGap) {
          best = at;
          bestGap = lo - at;
        }
        at = std::max(at, hi);
      }
      b.offset = best >= 0 ? best : at;
      arena_ = std::max(arena_, b.offset + b.size);
      for (int t = std::max(b.start, 0) / kStretch; t <= b.end / kStretch; ++t)
        byTime[static_cast<size_t>(t)].push_back(i);
    }
  }

  // ---- annotations ----

  bool annotate() {
    bool changed = false;
    auto set = [&](Op *op, const char *name, std::optional<Attr> value) {
      const Attr *old = op->hasAttr(name) ? &op->attr(name) : nullptr;
      if (value ? (old && *old == *value) : !old) return;
      if (value)
        op->setAttr(name, *value);
      else
        op->removeAttr(name);
      changed = true;
    };
    int64_t naive = 0;
    for (const Value *v : planned_)
      naive += alignUp(*staticBytes(v->type()));
    for (Op *op : order_) {
      Attr::Ints offsets, inplace;
      bool anyPlanned = false, anyInplace = false;
      for (const auto &r : op->results()) {
        auto b = bufferOf_.find(r.get());
        offsets.push_back(b == bufferOf_.end() ? -1 : buffers_[b->second].offset);
        anyPlanned |= b != bufferOf_.end();
        auto ip = inplace_.find(r.get());
        inplace.push_back(ip == inplace_.end() ? -1 : ip->second);
        anyInplace |= ip != inplace_.end();
      }
      set(op, "mem.offset", anyPlanned ? std::optional<Attr>(Attr(offsets)) : std::nullopt);
      set(op, "mem.inplace", anyInplace ? std::optional<Attr>(Attr(inplace)) : std::nullopt);
    }
    if (Op *ret = g_.body()->terminator()) set(ret, "mem.arena", Attr(arena_));
    ctx_.count("values-planned", static_cast<int64_t>(planned_.size()));
    ctx_.count("peak-bytes", arena_);
    ctx_.count("naive-bytes", naive);
    return changed;
  }

  Graph &g_;
  PassContext &ctx_;
  std::unordered_map<const Value *, const Value *> mayAlias_; // every view an alias
  std::vector<const Value *> writes_;                         // written in place
  std::unordered_set<const Value *> written_;                 // their may-alias roots
  int next_ = 0;
  std::vector<Op *> order_; // every op in execution order (fusion bodies excluded)
  std::unordered_map<const Op *, int> start_, end_;
  std::unordered_map<const Value *, const Value *> parent_;
  std::unordered_map<const Value *, Strides> strides_;
  std::unordered_set<const Value *> copies_, carried_, notFresh_;
  std::unordered_map<const Value *, ClassInfo> classes_; // by class root
  std::vector<const Value *> planned_;
  std::vector<Buffer> buffers_;
  std::unordered_map<const Value *, size_t> bufferOf_;
  std::unordered_map<const Value *, int64_t> inplace_;
  int64_t arena_ = 0;
};

} // namespace

bool runPlanMemory(Graph &g, PassContext &ctx) { return Planner(g, ctx).run(); }

} // namespace xjit::passes
