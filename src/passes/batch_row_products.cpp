// Single-row products sharing a weight, none depending on another, as one product over the
// stacked rows:
//   linear(x_1, W, b), ..., linear(x_n, W, b)  ->  Y = linear(cat(x_1..x_n), W, b); Y[i:i+1]
// A recurrence unrolled over T steps (a Python loop over nn.LSTMCell, nn.LSTM at batch 1) reads
// each weight once per step; its input projections do not depend on the recurrence (the first
// layer's x_t, or the layer below's h_t), so all T of them can run as one library GEMM that
// reads the weight once, and each step streams only its recurrent weight (W_hh). The ops that
// use a batched row move after the batch (a stable reorder of the block: the recurrence of the
// layer above runs after the layer below's last step), which needs a block of pure ops.
//
// Only `linear` with a static f32/f64 [1, K] input and [N, K] weight, the same weight and bias
// values (graph inputs or computed), at the top level of a graph with no side effects and no
// nested blocks. Results agree within f32 rounding (the GEMM's summation order against the
// per-row loops of decompose-matvec), not bit for bit.
#include "passes.h"
#include "semantic_util.h"

#include "xjit/ir/builder.h"

#include <map>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace xjit::passes {
namespace {

/// Whether op is a linear of one static f32/f64 row: x [1, K], W [N, K], bias absent or [N].
bool isRowLinear(const Op *op) {
  if (op->name() != "linear" || op->numOperands() < 2 || op->numOperands() > 3) return false;
  const Type &x = op->operand(0)->type(), &w = op->operand(1)->type();
  if (!x.isTensor() || !w.isTensor() || x.rank() != 2 || w.rank() != 2) return false;
  if (x.dtype() != w.dtype() || (x.dtype() != DType::F32 && x.dtype() != DType::F64)) return false;
  auto xs = staticSizes(op->operand(0)), ws = staticSizes(op->operand(1));
  if (!xs || !ws || (*xs)[0] != 1 || (*xs)[1] != (*ws)[1]) return false;
  if (op->numOperands() == 3) {
    const Type &b = op->operand(2)->type();
    if (!b.isTensor() || b.rank() != 1 || b.dtype() != x.dtype() || !staticSizes(op->operand(2)))
      return false;
  }
  return staticSizes(op->result(0)).has_value();
}

/// A block the pass may reorder: pure ops only (the terminator aside), none with regions.
bool reorderable(const Block &block) {
  for (Op *op : block)
    if ((!op->def().isPure() && op != block.terminator()) || op->numRegions() != 0) return false;
  return true;
}

/// Each op's position in its block.
struct BlockOrder {
  std::unordered_map<const Op *, size_t> pos;
  explicit BlockOrder(const Block &block) {
    size_t i = 0;
    for (Op *op : block)
      pos[op] = i++;
  }
};

/// Whether v depends on a result of an op in `batch` (ops at positions >= `from` only: nothing
/// earlier can).
bool dependsOn(const Value *v, const std::unordered_set<const Op *> &batch, size_t from,
               const BlockOrder &order) {
  std::vector<const Op *> work;
  std::unordered_set<const Op *> seen;
  if (const Op *d = v->definingOp()) work.push_back(d);
  while (!work.empty()) {
    const Op *op = work.back();
    work.pop_back();
    if (batch.count(op)) return true;
    if (order.pos.at(op) < from || !seen.insert(op).second) continue;
    for (const Value *o : op->operands())
      if (const Op *d = o->definingOp()) work.push_back(d);
  }
  return false;
}

/// The first batch of two or more independent row linears sharing weight and bias, in block
/// order (members added greedily; one that depends on the batch so far ends it).
std::vector<Op *> findBatch(const Block &block, const BlockOrder &order) {
  std::map<std::pair<const Value *, const Value *>, std::vector<Op *>> groups;
  std::vector<std::pair<const Value *, const Value *>> keys; // first-seen order
  for (Op *op : block) {
    if (!isRowLinear(op)) continue;
    std::pair<const Value *, const Value *> key{op->operand(1),
                                                op->numOperands() == 3 ? op->operand(2) : nullptr};
    auto [it, fresh] = groups.try_emplace(key);
    if (fresh) keys.push_back(key);
    it->second.push_back(op);
  }
  for (const auto &key : keys) {
    std::vector<Op *> batch;
    std::unordered_set<const Op *> members;
    for (Op *op : groups[key]) {
      if (!batch.empty() &&
          dependsOn(op->operand(0), members, order.pos.at(batch.front()), order)) {
        if (batch.size() >= 2) return batch;
        batch.clear();
        members.clear();
      }
      batch.push_back(op);
      members.insert(op);
    }
    if (batch.size() >= 2) return batch;
  }
  return {};
}

void rewriteBatch(Block &block, const std::vector<Op *> &batch, const BlockOrder &order,
                  PassContext &ctx) {
  // The new ops go after the last definition of a batched row.
  Op *last = nullptr;
  for (Op *m : batch) {
    Op *d = m->operand(0)->definingOp();
    if (d && (!last || order.pos.at(d) > order.pos.at(last))) last = d;
  }
  const size_t lastPos = last ? order.pos.at(last) : 0;
  // Ops before that point using a batched result, transitively, move after the new ops.
  std::unordered_set<const Op *> moving, members(batch.begin(), batch.end());
  std::vector<const Value *> work; // (rows all graph inputs: the new ops go first, none move)
  for (Op *m : batch)
    if (last) work.push_back(m->result(0));
  while (!work.empty()) {
    const Value *v = work.back();
    work.pop_back();
    for (const Use &u : v->uses()) {
      const Op *user = u.user;
      if (members.count(user) || order.pos.at(user) > lastPos) continue;
      if (moving.insert(user).second)
        for (const auto &r : user->results())
          work.push_back(r.get());
    }
  }
  std::vector<std::unique_ptr<Op>> moved;
  for (Op *op = block.front(); op;) {
    Op *next = op->next();
    if (moving.count(op)) moved.push_back(block.remove(op));
    op = next;
  }
  Op *before = last ? last->next() : block.front();
  Builder b(&block, before);
  b.setLoc(batch.front()->loc());
  std::vector<Value *> rows;
  for (Op *m : batch)
    rows.push_back(m->operand(0));
  std::vector<Value *> operands = {b.op("cat", rows, {{"dim", int64_t(0)}}), batch[0]->operand(1)};
  if (batch[0]->numOperands() == 3) operands.push_back(batch[0]->operand(2));
  Value *stacked = b.op("linear", operands, joinedProductAttrs({batch.begin(), batch.end()}));
  std::vector<Value *> slices;
  for (size_t i = 0; i < batch.size(); ++i)
    slices.push_back(b.op("slice", {stacked},
                          {{"dim", int64_t(0)}, {"start", int64_t(i)}, {"end", int64_t(i + 1)}}));
  for (auto &op : moved)
    block.insert(std::move(op), before);
  for (size_t i = 0; i < batch.size(); ++i) // replaces and erases the batched op
    if (!replaceIfSameType(batch[i], slices[i]))
      throw std::logic_error("batch-row-products: a batched row's type differs");
  ctx.count("batches");
  ctx.count("rows-batched", static_cast<int64_t>(batch.size()));
}

} // namespace

bool runBatchRowProducts(Graph &g, PassContext &ctx) {
  Block &block = *g.body();
  if (!reorderable(block)) return false;
  bool changed = false;
  while (true) {
    BlockOrder order(block);
    std::vector<Op *> batch = findBatch(block, order);
    if (batch.empty()) return changed;
    rewriteBatch(block, batch, order, ctx);
    changed = true;
  }
}

} // namespace xjit::passes
