// nn.MultiheadAttention's two entry points, torch._native_multi_head_attention (eval mode's fast
// path) and F.multi_head_attention_forward (everything else, training included), decomposed
// into IR ops: the input projections, heads split, scaled_dot_product_attention (or, where the
// weights are returned, softmax(q k^T / sqrt(d) + mask) @ v as F.multi_head_attention_forward
// computes them), heads merged, the output projection. Variants not supported here (bias_k/v,
// add_zero_attn, dropout while training, static_k/v, causal, unbatched, the fast path's masks)
// stay PyTorch fallback nodes.
#include "torch_ops.h"

#include "analyzer.h"
#include "xjit/ir/sym_attr.h"

#include <cmath>

namespace xjit::frontend {

namespace {

/// One attention call in batch-first form.
struct MhaCall {
  VarPtr query, key, value;      // [B, L, E], [B, S, kdim], [B, S, vdim]
  VarPtr wq, wk, wv, bq, bk, bv; // projections (biases may be None)
  VarPtr packedW, packedB;       // self-attention: in_proj weight/bias for one linear
  VarPtr outW, outB;             // out_proj
  VarPtr mask;                   // additive float mask broadcasting to [B, H, L, S]
  int64_t heads = 1;
  bool needWeights = false, average = true;
};

VarPtr linear(Analyzer &a, const VarPtr &x, const VarPtr &w, const VarPtr &b) {
  if (isNoneVar(b)) return a.emit1("linear", {x, w});
  return a.emit1("linear", {x, w, b});
}

VarPtr transpose(Analyzer &a, const VarPtr &x, int64_t d0, int64_t d1) {
  return a.emit1("transpose", {x}, {{"dim0", Attr(d0)}, {"dim1", Attr(d1)}});
}

std::vector<VarPtr> chunk3(Analyzer &a, const VarPtr &x, int64_t dim) {
  return a.emit("chunk", {x}, {{"chunks", Attr(int64_t(3))}, {"dim", Attr(dim)}});
}

/// [B, L, E] -> [B, H, L, E / H].
VarPtr splitHeads(Analyzer &a, const VarPtr &x, int64_t heads) {
  Shape s = as<TensorVar>(x)->type().shape();
  const int64_t e = s[2].value();
  Shape split{s[0], s[1], DimExpr(heads), DimExpr(e / heads)};
  return transpose(a, a.emit1("reshape", {x}, {{"shape", makeSizeAttr(split)}}), 1, 2);
}

/// The outputs (attn_output [B, L, E], weights or None) of a call.
std::pair<VarPtr, VarPtr> emitAttention(Analyzer &a, const MhaCall &c) {
  VarPtr q, k, v;
  if (c.packedW) {
    std::vector<VarPtr> qkv = chunk3(a, linear(a, c.query, c.packedW, c.packedB), -1);
    q = qkv[0], k = qkv[1], v = qkv[2];
  } else {
    q = linear(a, c.query, c.wq, c.bq);
    k = linear(a, c.key, c.wk, c.bk);
    v = linear(a, c.value, c.wv, c.bv);
  }
  q = splitHeads(a, q, c.heads), k = splitHeads(a, k, c.heads), v = splitHeads(a, v, c.heads);
  VarPtr o, weights = a.none();
  // scaled_dot_product_attention where its decomposition applies (f32: decompose-attention,
  // which autodiff runs first); else the explicit form, whose ops all have derivative rules.
  const bool f32 = as<TensorVar>(q)->type().dtype() == DType::F32;
  if (!c.needWeights && f32) {
    std::vector<VarPtr> ops{q, k, v};
    if (c.mask) ops.push_back(c.mask);
    o = a.emit1("scaled_dot_product_attention", ops);
  } else {
    const Shape &qs = as<TensorVar>(q)->type().shape();
    const double scale = 1.0 / std::sqrt(static_cast<double>(qs[3].value()));
    VarPtr scores =
        a.emit1("matmul", {a.emit1("mul", {q, a.constantSteal(PyFloat_FromDouble(scale))}),
                           transpose(a, k, -2, -1)});
    if (c.mask) scores = a.emit1("add", {scores, c.mask});
    VarPtr w = a.emit1("softmax", {scores}, {{"dim", Attr(int64_t(-1))}});
    o = a.emit1("matmul", {w, v});
    if (c.needWeights)
      weights = c.average ? a.emit1("mean", {w}, {{"dims", Attr(std::vector<int64_t>{1})}}) : w;
  }
  // [B, H, L, D] -> [B, L, E]
  Shape qs = as<TensorVar>(c.query)->type().shape();
  Shape merged{qs[0], qs[1], as<TensorVar>(c.outW)->type().shape()[1]};
  o = a.emit1("reshape", {transpose(a, o, 1, 2)}, {{"shape", makeSizeAttr(merged)}});
  return {linear(a, o, c.outW, c.outB), weights};
}

bool isTensor3(const VarPtr &v) {
  auto *t = as<TensorVar>(v);
  return t && t->type().rank() == 3;
}

/// Checks shared by both entry points: static embedding dims that the heads divide, and
/// floating tensors of one dtype.
bool validShapes(Analyzer &a, const MhaCall &c, std::optional<int64_t> embed) {
  if (!embed || c.heads < 1 || *embed % c.heads != 0) return false;
  const Type &q = as<TensorVar>(c.query)->type();
  if (!q.shape()[2].isStatic() || q.shape()[2].value() != *embed) return false;
  if (q.dtype() != DType::F32 && q.dtype() != DType::F64) return false;
  for (const VarPtr &t : {c.key, c.value, c.outW}) {
    auto *tv = as<TensorVar>(t);
    if (!tv || tv->type().dtype() != q.dtype()) return false;
  }
  (void)a;
  return true;
}

} // namespace

VarPtr lowerNativeMha(Analyzer &a, BoundArgs &b, const TorchRow &) {
  MhaCall c;
  c.query = b.at("query"), c.key = b.at("key"), c.value = b.at("value");
  if (!isTensor3(c.query) || !isTensor3(c.key) || !isTensor3(c.value)) return nullptr;
  // The fast path's masks are boolean in effect (ATen's masked_softmax treats any nonzero as
  // masked out) and it gives fully masked rows zeros: PyTorch's op.
  if (!isNoneVar(b.at("mask"))) return nullptr;
  std::optional<int64_t> heads = a.asInt(b.at("num_head")), need = a.asInt(b.at("need_weights")),
                         average = a.asInt(b.at("average_attn_weights"));
  if (!heads || !need || !average) return nullptr;
  c.heads = *heads, c.needWeights = *need != 0, c.average = *average != 0;
  if (!as<TensorVar>(b.at("qkv_weight")) || !as<TensorVar>(b.at("proj_weight"))) return nullptr;
  c.outW = b.at("proj_weight"), c.outB = b.at("proj_bias");
  if (c.query.get() == c.key.get() && c.key.get() == c.value.get()) {
    c.packedW = b.at("qkv_weight"), c.packedB = b.at("qkv_bias");
  } else {
    std::vector<VarPtr> w = chunk3(a, b.at("qkv_weight"), 0), bias = chunk3(a, b.at("qkv_bias"), 0);
    c.wq = w[0], c.wk = w[1], c.wv = w[2], c.bq = bias[0], c.bk = bias[1], c.bv = bias[2];
  }
  if (!validShapes(a, c, a.asInt(b.at("embed_dim")))) return nullptr;
  auto [out, weights] = emitAttention(a, c);
  return std::make_shared<TupleVar>(std::vector<VarPtr>{out, weights});
}

VarPtr lowerMhaForward(Analyzer &a, BoundArgs &b, const TorchRow &) {
  MhaCall c;
  // Sequence-first [L, B, E] inputs (batch_first modules transpose before the call).
  if (!isTensor3(b.at("query")) || !isTensor3(b.at("key")) || !isTensor3(b.at("value")))
    return nullptr;
  for (const char *n : {"bias_k", "bias_v", "static_k", "static_v"})
    if (!isNoneVar(b.at(n))) return nullptr;
  std::optional<int64_t> heads = a.asInt(b.at("num_heads")), need = a.asInt(b.at("need_weights")),
                         average = a.asInt(b.at("average_attn_weights")),
                         zeroAttn = a.asInt(b.at("add_zero_attn")),
                         training = a.asInt(b.at("training")), causal = a.asInt(b.at("is_causal")),
                         separate = a.asInt(b.at("use_separate_proj_weight"));
  std::optional<double> dropout = a.asNumber(b.at("dropout_p"));
  if (!heads || !need || !average || !zeroAttn || !training || !causal || !separate || !dropout)
    return nullptr;
  if (*zeroAttn || *causal || (*training && *dropout > 0.0)) return nullptr;
  c.heads = *heads, c.needWeights = *need != 0, c.average = *average != 0;
  const bool same =
      b.at("query").get() == b.at("key").get() && b.at("key").get() == b.at("value").get();
  c.query = transpose(a, b.at("query"), 0, 1);
  c.key = same ? c.query : transpose(a, b.at("key"), 0, 1);
  c.value = same ? c.query : transpose(a, b.at("value"), 0, 1);
  c.outW = b.at("out_proj_weight"), c.outB = b.at("out_proj_bias");
  std::vector<VarPtr> bias{a.none(), a.none(), a.none()};
  if (as<TensorVar>(b.at("in_proj_bias")))
    bias = chunk3(a, b.at("in_proj_bias"), 0);
  else if (!isNoneVar(b.at("in_proj_bias")))
    return nullptr;
  c.bq = bias[0], c.bk = bias[1], c.bv = bias[2];
  if (*separate) {
    c.wq = b.at("q_proj_weight"), c.wk = b.at("k_proj_weight"), c.wv = b.at("v_proj_weight");
    for (const VarPtr &w : {c.wq, c.wk, c.wv})
      if (!as<TensorVar>(w)) return nullptr;
  } else if (!as<TensorVar>(b.at("in_proj_weight"))) {
    return nullptr;
  } else if (same) {
    c.packedW = b.at("in_proj_weight"), c.packedB = b.at("in_proj_bias");
  } else {
    std::vector<VarPtr> w = chunk3(a, b.at("in_proj_weight"), 0);
    c.wq = w[0], c.wk = w[1], c.wv = w[2];
  }
  if (!validShapes(a, c, a.asInt(b.at("embed_dim_to_check")))) return nullptr;

  // Masks: float masks add (a bool mask would need _canonical_mask's conversion; nn.MHA's
  // forward has done it before the call). attn_mask [L, S] or [B * H, L, S]; key_padding_mask
  // [B, S] masks keys per batch row.
  const Type &qt = as<TensorVar>(c.query)->type();
  auto floatMask = [&](const VarPtr &m) {
    auto *t = as<TensorVar>(m);
    return t && t->type().dtype() == qt.dtype();
  };
  const Shape &ks = as<TensorVar>(c.key)->type().shape();
  if (!isNoneVar(b.at("attn_mask"))) {
    if (!floatMask(b.at("attn_mask"))) return nullptr;
    const Type &mt = as<TensorVar>(b.at("attn_mask"))->type();
    if (mt.rank() == 2) {
      c.mask = b.at("attn_mask");
    } else if (mt.rank() == 3) {
      // [1, L, S] broadcasts over batch and heads; else [B * H, L, S] is split.
      const bool shared = mt.shape()[0] == DimExpr(1);
      Shape s{shared ? DimExpr(1) : qt.shape()[0], DimExpr(shared ? 1 : c.heads), qt.shape()[1],
              ks[1]};
      c.mask = a.emit1("reshape", {b.at("attn_mask")}, {{"shape", makeSizeAttr(s)}});
    } else {
      return nullptr;
    }
  }
  if (!isNoneVar(b.at("key_padding_mask"))) {
    if (!floatMask(b.at("key_padding_mask")) ||
        as<TensorVar>(b.at("key_padding_mask"))->type().rank() != 2)
      return nullptr;
    Shape s{qt.shape()[0], DimExpr(1), DimExpr(1), ks[1]};
    VarPtr kp = a.emit1("reshape", {b.at("key_padding_mask")}, {{"shape", makeSizeAttr(s)}});
    c.mask = c.mask ? a.emit1("add", {c.mask, kp}) : kp;
  }

  auto [out, weights] = emitAttention(a, c);
  return std::make_shared<TupleVar>(std::vector<VarPtr>{transpose(a, out, 0, 1), weights});
}

} // namespace xjit::frontend
