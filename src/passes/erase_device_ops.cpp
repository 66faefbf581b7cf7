// Device and distributed code erasure: removes device transfers that do not move anything on
// the target, normalizes copies, and removes collectives over a group of one process.
//
// - Devices are normalized first: with target cuda:0, `cuda` (the default cuda device) is
//   cuda:0 in every type and `device` attribute; any `cpu:N` is `cpu` (one host memory).
// - to_device(x){device=d} with x already on d is x itself (that is what Tensor.to returns);
//   a transfer of a transfer reads the original value (x.cuda().cpu() is x).
// - to_copy (always a copy) on the same device is a cast, or a clone without a dtype change;
//   to another device without a dtype change it is a transfer (which copies too).
// - all_reduce, all_gather, reduce_scatter and broadcast with group_size 1 compute a copy of
//   their operand: they become the operand (or a clone where the copy may be written in place);
//   barrier with group_size 1 is removed; wait_tensor on anything but a remaining collective is
//   its operand.
#include "mutation_info.h"
#include "passes.h"
#include "semantic_util.h"

#include "xjit/ir/builder.h"
#include "xjit/ir/diagnostics.h"
#include "xjit/ir/op_registry.h"

#include <cctype>
#include <unordered_set>

namespace xjit::passes {
namespace {

Device parseTarget(const std::string &text) {
  Device d;
  size_t colon = text.find(':');
  d.kind = text.substr(0, colon);
  bool ok = !d.kind.empty() && std::isalpha(static_cast<unsigned char>(d.kind[0]));
  if (colon != std::string::npos) {
    std::string idx = text.substr(colon + 1);
    ok &=
        !idx.empty() && idx.size() < 9 && idx.find_first_not_of("0123456789") == std::string::npos;
    if (ok) d.index = std::stoi(idx);
  }
  if (!ok)
    throw Error(ErrorKind::User, "erase-device-ops: invalid target device '" + text +
                                     "' (expected e.g. cpu, cuda or cuda:0)");
  return d;
}

bool isCollective(const std::string &n) {
  return n == "all_reduce" || n == "all_gather" || n == "reduce_scatter" || n == "broadcast";
}

class EraseDeviceOps {
public:
  EraseDeviceOps(Graph &g, PassContext &ctx)
      : g_(g), ctx_(ctx), target_(parseTarget(ctx.option("target"))) {}

  bool run() {
    normalizeDevices();
    // Collectives first, as clones: being side-effecting, they would otherwise count as writers
    // of their operands for the mutation analysis below.
    std::vector<Op *> ops;
    g_.walk([&](Op *op) { ops.push_back(op); });
    for (Op *op : ops) {
      const std::string &n = op->name();
      if (isCollective(n) && op->attrOrNull("group_size")->asInt() == 1) {
        Builder b(op->parentBlock(), op);
        b.setLoc(op->loc());
        Value *c = b.op("clone", {op->operand(0)});
        c->setName(op->result()->name());
        clones_.insert(c->definingOp());
        replaceOp(op, {c});
        note("collectives-removed");
      } else if (n == "barrier" && op->attrOrNull("group_size")->asInt() == 1) {
        op->parentBlock()->erase(op);
        note("collectives-removed");
      }
    }
    ops.clear();
    g_.walk([&](Op *op) { ops.push_back(op); });
    for (Op *op : ops) { // a wait for a collective that is gone returns its operand
      if (op->name() != "wait_tensor") continue;
      const Op *src = op->operand(0)->definingOp();
      if (src && isCollective(src->name())) continue;
      replaceOp(op, {op->operand(0)});
      note("collectives-removed");
    }
    MutationInfo mi(g_);
    ops.clear();
    g_.walk([&](Op *op) { ops.push_back(op); });
    for (Op *op : ops) {
      if (op->name() == "to_device")
        eraseTransfer(op, mi);
      else if (op->name() == "to_copy")
        normalizeCopy(op);
      else if (clones_.count(op) && !mi.mayBeWritten(op->operand(0)) &&
               !mi.mayBeWritten(op->result()))
        replaceOp(op, {op->operand(0)}); // the collective's copy is never told apart
    }
    return changed_;
  }

private:
  void note(const char *stat) {
    ctx_.count(stat);
    changed_ = true;
  }

  Device canonical(Device d) const {
    if (d.kind == "cpu")
      d.index = -1;
    else if (d.kind == target_.kind && d.index < 0 && target_.index >= 0)
      d.index = target_.index;
    return d;
  }

  Type canonical(const Type &t) const {
    switch (t.kind()) {
    case TypeKind::Tensor: return Type::tensor(t.dtype(), t.shape(), canonical(t.device()));
    case TypeKind::Tuple: {
      std::vector<Type> elems;
      for (const Type &e : t.elements())
        elems.push_back(canonical(e));
      return Type::tuple(std::move(elems));
    }
    case TypeKind::List: return Type::list(canonical(t.elementType()));
    default: return t;
    }
  }

  void retype(Value *v) {
    Type t = canonical(v->type());
    if (t == v->type()) return;
    v->setType(std::move(t));
    note("devices-normalized");
  }

  void normalizeDevices() {
    auto visitBlock = [&](auto &self, Block *b) -> void {
      for (const auto &a : b->arguments())
        retype(a.get());
      for (Op *op : *b) {
        for (const auto &r : op->results())
          retype(r.get());
        if (const Attr *d = op->attrOrNull("device");
            d && d->kind() == AttrKind::Str &&
            (op->name() == "to_device" || op->name() == "to_copy")) {
          Device parsed;
          try {
            parsed = parseTarget(d->asStr());
          } catch (const Error &) {
            continue; // not a device the verifier accepts either: leave it to the verifier
          }
          std::string text = canonical(parsed).str();
          if (text != d->asStr()) {
            op->setAttr("device", Attr(text));
            note("devices-normalized");
          }
        }
        for (size_t r = 0; r < op->numRegions(); ++r)
          self(self, op->region(r));
      }
    };
    visitBlock(visitBlock, g_.body());
  }

  /// The value a chain of transfers started from: to_device(to_device(x)) reads x.
  static Value *transferSource(Value *v) {
    while (Op *d = v->definingOp())
      if (d->name() == "to_device")
        v = d->operand(0);
      else
        break;
    return v;
  }

  void eraseTransfer(Op *op, const MutationInfo &mi) {
    Value *src = transferSource(op->operand(0));
    // A round trip through another device copies: forward the original only if neither it nor
    // the copy is written in place.
    if (src != op->operand(0) && (mi.mayBeWritten(src) || mi.mayBeWritten(op->result()))) return;
    if (src->type().isTensor() && src->type() == op->result()->type()) {
      replaceOp(op, {src});
      note("transfers-removed");
    } else if (src != op->operand(0)) {
      Op *hop = op->operand(0)->definingOp();
      op->setOperand(0, src);
      eraseIfDead(hop);
      note("transfers-removed");
    }
  }

  void normalizeCopy(Op *op) {
    Value *x = op->operand(0);
    const Type &from = x->type(), &to = op->result()->type();
    if (!from.isTensor()) return;
    Builder b(op->parentBlock(), op);
    b.setLoc(op->loc());
    Value *r;
    if (from.device() == to.device())
      r = from.dtype() == to.dtype() ? b.op("clone", {x})
                                     : b.op("cast", {x}, {{"dtype", to.dtype()}});
    else if (from.dtype() == to.dtype())
      r = b.op("to_device", {x}, {{"device", Attr(to.device().str())}});
    else
      return;
    r->setName(op->result()->name());
    replaceOp(op, {r});
    note("copies-normalized");
  }

  Graph &g_;
  PassContext &ctx_;
  Device target_;
  std::unordered_set<const Op *> clones_; // what collectives became
  bool changed_ = false;
};

} // namespace

bool runEraseDeviceOps(Graph &g, PassContext &ctx) { return EraseDeviceOps(g, ctx).run(); }

} // namespace xjit::passes
