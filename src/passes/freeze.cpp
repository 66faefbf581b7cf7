// Freezing for inference: folds eval-mode batch norm into the preceding conv/linear (or into a
// per-channel mul+add) and removes dropout that does nothing. Parameters reach it as constants
// (bindParameters below, or `constant` ops written by the frontend/importer).
#include "mutation_info.h"
#include "passes.h"
#include "semantic_util.h"

#include "xjit/ir/builder.h"
#include "xjit/ir/diagnostics.h"
#include "xjit/ir/op_registry.h"

#include <cmath>

namespace xjit::passes {

void bindParameters(Graph &g, const std::map<size_t, Tensor> &values) {
  for (const auto &[index, t] : values) {
    if (index >= g.numInputs())
      throw Error(ErrorKind::User,
                  "bindParameters: graph '" + g.name() + "' has no input " + std::to_string(index));
    Shape shape(t.sizes().begin(), t.sizes().end());
    Type want = Type::tensor(t.dtype(), shape);
    if (g.input(index)->type() != want)
      throw Error(ErrorKind::User, "bindParameters: input " + std::to_string(index) + " of '" +
                                       g.name() + "' has type " + g.input(index)->type().str() +
                                       ", the value is " + want.str());
  }
  Builder b(g.body(), g.body()->front());
  for (const auto &[index, t] : values) {
    Value *in = g.input(index);
    Value *c = b.constantTensor(t);
    c->setName(in->name());
    in->replaceAllUsesWith(c);
  }
  for (auto it = values.rbegin(); it != values.rend(); ++it)
    g.body()->eraseArgument(it->first);
}

namespace {

bool isConv(const std::string &name) {
  return name == "conv1d" || name == "conv2d" || name == "conv3d";
}

/// The per-channel affine map y = x * scale + shift that an eval-mode batch_norm applies,
/// computed in double from constant operands; nullopt when an operand is not constant.
struct ChannelAffine {
  std::vector<double> scale, shift;
};

std::optional<ChannelAffine> batchNormAffine(const Op &bn) {
  const Tensor *mean = presentOperand(bn, 3) ? constantTensor(bn.operand(3)) : nullptr;
  const Tensor *var = presentOperand(bn, 4) ? constantTensor(bn.operand(4)) : nullptr;
  if (!mean || !var) return std::nullopt;
  const Tensor *w = nullptr, *b = nullptr;
  if (presentOperand(bn, 1) && !(w = constantTensor(bn.operand(1)))) return std::nullopt;
  if (presentOperand(bn, 2) && !(b = constantTensor(bn.operand(2)))) return std::nullopt;
  double eps = bn.attrOrNull("eps")->asNumber();
  ChannelAffine a;
  for (int64_t c = 0; c < mean->numel(); ++c) {
    // The reference kernel: (x - mean) * (1 / sqrt(var + eps)) * w + b.
    double s = 1.0 / std::sqrt(var->getDouble(c) + eps) * (w ? w->getDouble(c) : 1.0);
    a.scale.push_back(s);
    a.shift.push_back((b ? b->getDouble(c) : 0.0) - mean->getDouble(c) * s);
  }
  return a;
}

class Freeze {
public:
  Freeze(Graph &g, PassContext &ctx) : mi_(g), ctx_(ctx), evalMode_(ctx.boolOption("eval-mode")) {}

  bool run(Graph &g) {
    std::vector<Op *> ops;
    g.walk([&](Op *op) { ops.push_back(op); });
    bool changed = false;
    for (Op *op : ops) {
      if (op->name() == "dropout")
        changed |= removeDropout(op);
      else if (op->name() == "batch_norm")
        changed |= foldBatchNorm(op);
    }
    return changed;
  }

private:
  bool removeDropout(Op *op) {
    double p = op->attrOrNull("p")->asNumber();
    bool train = op->attrOrNull("train")->asBool();
    if (train && p != 0 && !evalMode_) return false;
    // The result is a fresh tensor: forwarding the input is only right if neither is written.
    if (mi_.mayBeWritten(op->result()) || mi_.mayBeWritten(op->operand(0))) return false;
    replaceOp(op, {op->operand(0)});
    ctx_.count("dropouts-removed");
    return true;
  }

  bool foldBatchNorm(Op *bn) {
    if (bn->attrOrNull("training")->asBool()) return false;
    for (Value *v : bn->operands())
      if (mi_.mayBeWritten(v)) return false; // "constant" operands that are written
    auto affine = batchNormAffine(*bn);
    if (!affine) return false;
    if (foldIntoProducer(bn, *affine)) {
      ctx_.count("batch-norms-folded");
      return true;
    }
    toMulAdd(bn, *affine);
    ctx_.count("batch-norms-to-mul-add");
    return true;
  }

  /// conv (batched, so dim 1 is the output channel) or 2-d linear whose only user is bn, with
  /// constant weight and bias: scale the weight's output channels, fold the shift into the
  /// bias.
  bool foldIntoProducer(Op *bn, const ChannelAffine &a) {
    Op *p = bn->operand(0)->definingOp();
    if (!p || (!isConv(p->name()) && p->name() != "linear")) return false;
    Value *out = p->result();
    if (out->uses().size() != 1 || mi_.mayBeWritten(out)) return false;
    const Tensor *w = constantTensor(p->operand(1));
    const Tensor *bias = nullptr;
    if (!w || !isFloating(w->dtype()) ||
        (presentOperand(*p, 2) && !(bias = constantTensor(p->operand(2)))))
      return false;
    if (w->rank() != out->type().rank() || (p->name() == "linear" && w->rank() != 2)) return false;
    int64_t channels = w->size(0);
    if (channels != static_cast<int64_t>(a.scale.size())) return false;

    Tensor w2 = Tensor::empty(w->dtype(), w->sizes());
    int64_t per = channels ? w->numel() / channels : 0;
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t i = 0; i < per; ++i)
        w2.setDouble(c * per + i, w->getDouble(c * per + i) * a.scale[c]);
    Tensor b2 = Tensor::empty(w->dtype(), {channels});
    for (int64_t c = 0; c < channels; ++c)
      b2.setDouble(c, (bias ? bias->getDouble(c) : 0.0) * a.scale[c] + a.shift[c]);

    Builder b(p->parentBlock(), p);
    b.setLoc(p->loc());
    Value *wc = b.constantTensor(w2), *bc = b.constantTensor(b2);
    wc->setName(p->operand(1)->name());
    bc->setName(presentOperand(*p, 2) ? p->operand(2)->name() : p->operand(1)->name() + ".bias");
    Op *folded =
        b.createWithTypes(p->name(), {p->operand(0), wc, bc}, {bn->result()->type()}, p->attrs());
    folded->result()->setName(bn->result()->name());
    replaceOp(bn, {folded->result()}); // the old conv/linear and constants go with it
    return true;
  }

  /// x * scale + shift with scale/shift shaped [C, 1, ...] to broadcast over dim 1. f16/bf16
  /// inputs compute in f32 (as batch_norm's f32 parameters do) and cast back.
  void toMulAdd(Op *bn, const ChannelAffine &a) {
    Value *x = bn->operand(0);
    DType dt = x->type().dtype();
    DType ct = dt == DType::F64 ? DType::F64 : DType::F32;
    std::vector<int64_t> sizes(static_cast<size_t>(x->type().rank() - 1), 1);
    sizes[0] = static_cast<int64_t>(a.scale.size());
    Tensor scale = Tensor::empty(ct, sizes), shift = Tensor::empty(ct, sizes);
    for (size_t c = 0; c < a.scale.size(); ++c) {
      scale.setDouble(static_cast<int64_t>(c), a.scale[c]);
      shift.setDouble(static_cast<int64_t>(c), a.shift[c]);
    }
    Builder b(bn->parentBlock(), bn);
    b.setLoc(bn->loc());
    Value *y = b.op("add", {b.op("mul", {x, b.constantTensor(scale)}), b.constantTensor(shift)});
    if (ct != dt) y = b.op("cast", {y}, {{"dtype", dt}});
    y->setName(bn->result()->name());
    replaceOp(bn, {y});
  }

  MutationInfo mi_;
  PassContext &ctx_;
  bool evalMode_;
};

} // namespace

bool runFreeze(Graph &g, PassContext &ctx) { return Freeze(g, ctx).run(g); }

} // namespace xjit::passes
