// Automatic mixed precision (opt-in): matmul-like ops and convolutions on f32 run in bf16 (or
// f16) with f32 accumulation; everything else keeps its precision, with the fewest casts.
//
// - Compute ops (autocast's lower-precision list): matmul, mm, bmm, addmm, baddbmm, linear,
//   conv1d/2d/3d, conv_transpose1d/2d/3d and scaled_dot_product_attention, when every floating
//   operand is f32. Their f32 operands are cast to the low dtype and the result is low. The
//   reference kernels accumulate in double and round once to the result dtype, which models
//   (and bounds) a bf16 GEMM with f32 accumulation: the error is the rounding of the inputs and
//   of the result to bf16.
// - Sensitive ops stay in f32: softmax, log_softmax, the norms, reductions such as sum/mean,
//   exp/log and losses, like every op that is neither a compute op nor a pure data movement.
// - Casts: one cast to the low dtype per f32 value that feeds compute ops (placed after its
//   definition, shared by all of them); one cast back to f32 per low result that has f32
//   users. A low result that flows into another compute op, directly or through data movement
//   (views, reshape, permute, clone, ...), which is exact in any dtype, is not cast back and
//   forth: the movement ops run on the low value.
// Values that may be written in place are left alone.
#include "mutation_info.h"
#include "passes.h"
#include "semantic_util.h"

#include "xjit/ir/builder.h"
#include "xjit/ir/diagnostics.h"
#include "xjit/ir/op_registry.h"

#include <set>
#include <unordered_map>
#include <unordered_set>

namespace xjit::passes {
namespace {

bool isComputeOp(const std::string &n) {
  static const std::set<std::string, std::less<>> kOps = {"matmul",
                                                          "mm",
                                                          "bmm",
                                                          "addmm",
                                                          "baddbmm",
                                                          "linear",
                                                          "conv1d",
                                                          "conv2d",
                                                          "conv3d",
                                                          "conv_transpose1d",
                                                          "conv_transpose2d",
                                                          "conv_transpose3d",
                                                          "scaled_dot_product_attention"};
  return kOps.count(n) > 0;
}

/// Pure data movement on one tensor: exact in any dtype.
bool isMovement(const Op &op) {
  static const std::set<std::string, std::less<>> kOps = {"clone", "flip", "roll", "repeat",
                                                          "tile"};
  return op.def().isPure() && op.numRegions() == 0 && op.numOperands() > 0 &&
         (op.def().has(kView) || kOps.count(op.name()));
}

class MixedPrecision {
public:
  MixedPrecision(Graph &g, PassContext &ctx) : g_(g), ctx_(ctx), mi_(g) {
    const std::string &d = ctx.option("dtype");
    if (d == "bf16")
      low_ = DType::BF16;
    else if (d == "f16")
      low_ = DType::F16;
    else
      throw Error(ErrorKind::User, "mixed-precision: dtype must be bf16 or f16, got '" + d + "'");
  }

  bool run() {
    std::vector<Op *> ops;
    g_.walk([&](Op *op) { ops.push_back(op); });
    // Movement ops run on low values only on the way to a compute op (else the cast back
    // would merely move, or multiply for split-like ops).
    for (auto it = ops.rbegin(); it != ops.rend(); ++it) {
      Op *op = *it;
      bool feeds = isComputeOp(op->name()) && eligibleCompute(*op);
      if (!feeds && isMovement(*op))
        for (const auto &r : op->results())
          feeds |= feedsCompute_.count(r.get()) > 0;
      if (!feeds) continue;
      if (isMovement(*op))
        feedsCompute_.insert(op->operand(0));
      else
        for (Value *v : op->operands())
          feedsCompute_.insert(v);
    }
    std::vector<Op *> replaced;
    for (Op *op : ops) {
      if (isComputeOp(op->name()) && eligibleCompute(*op))
        lowerCompute(op);
      else if (isMovement(*op) && eligibleMovement(*op))
        lowerMovement(op);
      else
        continue;
      replaced.push_back(op);
    }
    if (replaced.empty()) return false;
    // Other users of a lowered value read it in f32: one cast back per value.
    std::unordered_set<const Op *> gone(replaced.begin(), replaced.end());
    for (Op *op : replaced)
      for (const auto &r : op->results()) {
        std::vector<Use> uses;
        for (const Use &u : r->uses())
          if (!gone.count(u.user)) uses.push_back(u);
        if (uses.empty()) continue;
        Value *lowV = low_of_.at(r.get());
        Value *back = after(lowV).op("cast", {lowV}, {{"dtype", r->type().dtype()}});
        for (const Use &u : uses)
          u.user->setOperand(u.index, back);
        ctx_.count("casts-inserted");
      }
    for (auto it = replaced.rbegin(); it != replaced.rend(); ++it)
      (*it)->parentBlock()->erase(*it);
    return true;
  }

private:
  /// Inserts right after v's definition; casts of block arguments go in the order made.
  Builder after(Value *v) {
    if (v->isBlockArgument()) {
      Block *b = v->ownerBlock();
      auto it = argCastEnd_.find(b);
      return Builder(b, it == argCastEnd_.end() ? b->front() : it->second->next());
    }
    Op *d = v->definingOp();
    Builder b(d->parentBlock(), d->next());
    b.setLoc(d->loc());
    return b;
  }

  bool eligibleCompute(const Op &op) const {
    bool anyF32 = false;
    for (Value *v : op.operands()) {
      if (!v->type().isTensor() || !isFloating(v->type().dtype())) continue;
      if (v->type().dtype() != DType::F32 && v->type().dtype() != low_) return false;
      anyF32 |= v->type().dtype() == DType::F32;
    }
    for (Value *v : op.operands())
      if (mi_.mayBeWritten(v)) return false; // a cast at its definition would read it early
    return anyF32 && op.result()->type().isTensor() && op.result()->type().dtype() == DType::F32 &&
           !mi_.mayBeWritten(op.result());
  }

  bool eligibleMovement(const Op &op) const {
    if (!low_of_.count(op.operand(0))) return false;
    bool feeds = false;
    for (const auto &r : op.results())
      feeds |= feedsCompute_.count(r.get()) > 0;
    if (!feeds) return false;
    for (size_t i = 1; i < op.numOperands(); ++i)
      if (op.operand(i)->type().isTensor() && !op.def().has(kView)) return false;
    for (const auto &r : op.results())
      if (mi_.mayBeWritten(r.get())) return false;
    return true;
  }

  /// v in the low dtype: its lowered twin, or a cast shared by every compute op reading it.
  Value *lowOf(Value *v) {
    if (auto it = low_of_.find(v); it != low_of_.end()) return it->second;
    if (auto it = casts_.find(v); it != casts_.end()) return it->second;
    Value *c = after(v).op("cast", {v}, {{"dtype", low_}});
    if (v->isBlockArgument()) argCastEnd_[v->ownerBlock()] = c->definingOp();
    ctx_.count("casts-inserted");
    return casts_[v] = c;
  }

  void lowerCompute(Op *op) {
    std::vector<Value *> operands;
    for (Value *v : op->operands())
      operands.push_back(v->type().isTensor() && v->type().dtype() == DType::F32 ? lowOf(v) : v);
    Builder b(op->parentBlock(), op);
    b.setLoc(op->loc());
    Op *n = b.create(op->name(), operands, op->attrs());
    n->result()->setName(op->result()->name());
    low_of_[op->result()] = n->result();
    ctx_.count("ops-lowered");
  }

  void lowerMovement(Op *op) {
    std::vector<Value *> operands = op->operands();
    operands[0] = low_of_.at(op->operand(0));
    Builder b(op->parentBlock(), op);
    b.setLoc(op->loc());
    Op *n = b.create(op->name(), operands, op->attrs());
    for (size_t i = 0; i < op->numResults(); ++i) {
      n->result(i)->setName(op->result(i)->name());
      low_of_[op->result(i)] = n->result(i);
    }
  }

  Graph &g_;
  PassContext &ctx_;
  MutationInfo mi_;
  DType low_ = DType::BF16;
  std::unordered_map<const Value *, Value *> low_of_;  // lowered value -> its low twin
  std::unordered_map<const Value *, Value *> casts_;   // f32 value -> its cast to low
  std::unordered_set<const Value *> feedsCompute_;     // read by compute ops, maybe via movement
  std::unordered_map<const Block *, Op *> argCastEnd_; // last cast of a block argument
};

} // namespace

bool runMixedPrecision(Graph &g, PassContext &ctx) { return MixedPrecision(g, ctx).run(); }

} // namespace xjit::passes
