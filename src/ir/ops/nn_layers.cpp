// Layer ops that are neither convolutions nor normalizations: embedding, dropout,
// scaled_dot_product_attention and pixel_shuffle / pixel_unshuffle.
#include "nn_util.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

namespace xjit::ops::nn {
namespace {

// ---- embedding ----

std::vector<Type> embeddingInfer(const Op &op) {
  const Type &w = tensorOperand(op, 0), &idx = tensorOperand(op, 1);
  if (w.rank() != 2)
    inferFail("embedding: weight must be 2-D, got " + w.str());
  if (idx.dtype() != DType::I64 && idx.dtype() != DType::I32)
    inferFail("embedding: indices must be i64 or i32, got " + idx.str());
  Shape out = idx.shape();
  out.push_back(w.shape()[1]);
  return {w.withShape(out)};
}

std::vector<RtValue> embeddingKernel(const Op &op, std::span<const RtValue> in) {
  // Rows are copied straight out of the weight: a model's table is often the largest tensor
  // it has (BERT-base: 94 MB), and a contiguous copy of it per call cost that much memory and
  // time. Only a weight whose rows are not contiguous is copied first.
  const Tensor &weight = in[0].tensor();
  bool rowsContiguous = weight.size(1) <= 1 || weight.strides()[1] == 1;
  Tensor w = rowsContiguous ? weight : weight.contiguousCopy();
  const Tensor &idx = in[1].tensor();
  int64_t rows = w.size(0), dim = w.size(1);
  std::vector<int64_t> sizes = idx.sizes();
  sizes.push_back(dim);
  Tensor out = Tensor::empty(w.dtype(), sizes);
  size_t rowBytes = static_cast<size_t>(dim * dtypeSize(w.dtype()));
  int64_t rowStride = w.strides()[0] * dtypeSize(w.dtype()); // bytes; any sign, 0 if broadcast
  for (int64_t i = 0, n = idx.numel(); i < n; ++i) {
    int64_t r = idx.getInt(i);
    if (r < 0 || r >= rows)
      kernelFail("embedding: index " + std::to_string(r) + " is out of range for a weight of " +
                 std::to_string(rows) + " rows");
    if (rowBytes)
      std::memcpy(out.data() + static_cast<size_t>(i) * rowBytes, w.data() + r * rowStride,
                  rowBytes);
  }
  return {out};
}

// ---- dropout ----

/// A uniform double in [0,1) from (seed, i): splitmix64, so the mask is reproducible.
double uniformAt(uint64_t seed, uint64_t i) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + i + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

std::vector<Type> dropoutInfer(const Op &op) {
  const Type &x = tensorOperand(op, 0);
  double p = attrFloat(op, "p");
  if (!(p >= 0 && p <= 1))
    inferFail("dropout: p must be in [0, 1], got " + formatDouble(p));
  if (attrBool(op, "train") && p > 0)
    requireFloating("dropout", "input in training mode", x);
  attrInt(op, "seed");
  return {x};
}

std::vector<RtValue> dropoutKernel(const Op &op, std::span<const RtValue> in) {
  const Tensor &x = in[0].tensor();
  double p = attrFloat(op, "p");
  if (!attrBool(op, "train") || p == 0)
    return {x.contiguousCopy()};
  auto seed = static_cast<uint64_t>(attrInt(op, "seed"));
  std::vector<double> v = load<double>(x);
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = p == 1 || uniformAt(seed, i) < p ? 0.0 : v[i] / (1 - p);
  return {store<double>(v, x.dtype(), x.sizes())};
}

// ---- scaled_dot_product_attention ----

struct SdpaShapes {
  Shape batch; // broadcast batch dims of the result
  DimExpr l, s, e, ev;
  std::optional<int64_t> gqaGroups; // k/v heads repeat this many times (enable_gqa)
};

/// Fails unless `operand` (attn_mask or dropout_noise) broadcasts to the scores [.., L, S].
void checkBroadcastsToScores(const SdpaShapes &r, const Shape &operand, const char *what) {
  Shape scores = r.batch;
  scores.push_back(r.l);
  scores.push_back(r.s);
  std::string msg = std::string("scaled_dot_product_attention: ") + what + " of shape " +
                    shapeStr(operand) + " does not broadcast to " + shapeStr(scores);
  if (operand.size() > scores.size()) inferFail(msg);
  for (size_t i = 0; i < operand.size(); ++i)
    if (operand[i] != DimExpr(1))
      checkDimEq(operand[i], scores[scores.size() - operand.size() + i], msg);
}

SdpaShapes sdpaShapes(const Shape &q, const Shape &k, const Shape &v, const Shape *mask,
                      const Shape *noise, bool gqa) {
  const std::string op = "scaled_dot_product_attention";
  if (q.size() < 2 || k.size() < 2 || v.size() < 2)
    inferFail(op + ": query, key and value need at least 2 dims, got " + shapeStr(q) + ", " +
              shapeStr(k) + " and " + shapeStr(v));
  SdpaShapes r{.l = q[q.size() - 2], .s = k[k.size() - 2], .e = q.back(), .ev = v.back()};
  checkDimEq(q.back(), k.back(),
             op + ": query " + shapeStr(q) + " and key " + shapeStr(k) +
                 " differ in embedding size");
  checkDimEq(k[k.size() - 2], v[v.size() - 2],
             op + ": key " + shapeStr(k) + " and value " + shapeStr(v) +
                 " differ in sequence length");
  Shape qb(q.begin(), q.end() - 2), kb(k.begin(), k.end() - 2), vb(v.begin(), v.end() - 2);
  if (gqa && !qb.empty() && !kb.empty() && !vb.empty() && kb.back() != qb.back()) {
    // Grouped-query attention: each k/v head serves hq / hk query heads (repeat_interleave).
    auto hq = qb.back().staticValue(), hk = kb.back().staticValue(), hv = vb.back().staticValue();
    if (!hq || !hk || !hv)
      inferFail(op + ": enable_gqa needs static head counts, got " + shapeStr(q) + " and " +
                shapeStr(k));
    if (*hk != *hv || *hk == 0 || *hq % *hk != 0)
      inferFail(op + ": with enable_gqa the query heads (" + std::to_string(*hq) +
                ") must be a multiple of the key/value heads (" + std::to_string(*hk) + ", " +
                std::to_string(*hv) + ")");
    r.gqaGroups = *hq / *hk;
    kb.back() = vb.back() = qb.back();
  }
  try {
    r.batch = broadcastShapes(broadcastShapes(qb, kb), vb);
  } catch (const TypeInferenceError &e) {
    inferFail(op + ": batch dims of query, key and value do not broadcast: " + e.what());
  }
  if (mask) checkBroadcastsToScores(r, *mask, "attn_mask");
  if (noise) checkBroadcastsToScores(r, *noise, "dropout_noise");
  return r;
}

std::vector<Type> sdpaInfer(const Op &op) {
  const std::string name = "scaled_dot_product_attention";
  const Type &q = tensorOperand(op, 0), &k = tensorOperand(op, 1), &v = tensorOperand(op, 2);
  requireFloating(name, "query", q);
  requireSameDType(name, "query", q, "key", k);
  requireSameDType(name, "query", q, "value", v);
  const Type *mask = optionalTensor(op, 3);
  if (mask && mask->dtype() != DType::Bool && mask->dtype() != q.dtype())
    inferFail(name + ": attn_mask must be bool or the query's dtype, got " + mask->str());
  if (mask && attrBool(op, "is_causal"))
    inferFail(name + ": attn_mask must not be given when is_causal is true");
  if (attrFloat(op, "dropout_p") != 0)
    inferFail(name + ": dropout_p must be 0 (pass the weights' noise as dropout_noise)");
  if (const Attr *m = op.attrOrNull("fpmath");
      m && (m->asStr() != "bf16" || q.dtype() != DType::F32))
    inferFail(name + ": fpmath must be bf16 on f32 attention, got '" + m->asStr() + "' on " +
              q.str());
  const Type *noise = optionalTensor(op, 4);
  if (noise && noise->dtype() != q.dtype())
    inferFail(name + ": dropout_noise must have the query's dtype, got " + noise->str());
  if (hasAttrValue(op, "scale"))
    attrFloat(op, "scale");
  SdpaShapes s = sdpaShapes(q.shape(), k.shape(), v.shape(), mask ? &mask->shape() : nullptr,
                            noise ? &noise->shape() : nullptr, attrBool(op, "enable_gqa"));
  Shape out = s.batch;
  out.push_back(s.l);
  out.push_back(s.ev);
  return {q.withShape(out)};
}

/// Repeats each head (dim -3) `groups` times in place, like repeat_interleave, as a view.
Tensor repeatHeads(const Tensor &t, int64_t groups) {
  std::vector<int64_t> sizes = t.sizes(), strides = t.strides();
  size_t h = sizes.size() - 3;
  sizes.insert(sizes.begin() + static_cast<ptrdiff_t>(h) + 1, groups);
  strides.insert(strides.begin() + static_cast<ptrdiff_t>(h) + 1, 0);
  Tensor c = t.view(sizes, strides, t.offset()).contiguousCopy();
  sizes.erase(sizes.begin() + static_cast<ptrdiff_t>(h) + 1);
  sizes[h] *= groups;
  return c.view(sizes, contiguousStrides(sizes), 0);
}

std::vector<double> loadExpanded(const Tensor &t, std::vector<int64_t> batch, int64_t rows,
                                 int64_t cols) {
  batch.push_back(rows);
  batch.push_back(cols);
  return load<double>(expandTo(t, batch));
}

std::vector<RtValue> sdpaKernel(const Op &op, std::span<const RtValue> in) {
  Tensor q = in[0].tensor(), k = in[1].tensor(), v = in[2].tensor();
  std::optional<Tensor> mask, noise;
  if (present(in, 3))
    mask = in[3].tensor();
  if (present(in, 4)) noise = in[4].tensor();
  Shape maskShape = mask ? shapeOf(mask->sizes()) : Shape{};
  Shape noiseShape = noise ? shapeOf(noise->sizes()) : Shape{};
  SdpaShapes s = atRuntime([&] {
    return sdpaShapes(shapeOf(q.sizes()), shapeOf(k.sizes()), shapeOf(v.sizes()),
                      mask ? &maskShape : nullptr, noise ? &noiseShape : nullptr,
                      attrBool(op, "enable_gqa"));
  });
  if (s.gqaGroups) {
    k = repeatHeads(k, *s.gqaGroups);
    v = repeatHeads(v, *s.gqaGroups);
  }
  std::vector<int64_t> batch = sizesOf(s.batch);
  int64_t L = s.l.value(), S = s.s.value(), E = s.e.value(), Ev = s.ev.value();
  int64_t nb = product(batch);
  std::vector<double> Q = loadExpanded(q, batch, L, E), K = loadExpanded(k, batch, S, E),
                      V = loadExpanded(v, batch, S, Ev), M, N;
  bool boolMask = mask && mask->dtype() == DType::Bool;
  if (mask)
    M = loadExpanded(*mask, batch, L, S);
  if (noise) N = loadExpanded(*noise, batch, L, S);
  bool causal = attrBool(op, "is_causal");
  double scale =
      hasAttrValue(op, "scale") ? attrFloat(op, "scale") : 1.0 / std::sqrt(static_cast<double>(E));
  const double ninf = -std::numeric_limits<double>::infinity();

  std::vector<double> out(static_cast<size_t>(nb * L * Ev), 0.0), scores(static_cast<size_t>(S)),
      kt(static_cast<size_t>(E * S));
  for (int64_t b = 0; b < nb; ++b) {
    const double *qb = &Q[b * L * E], *kb = &K[b * S * E], *vb = &V[b * S * Ev];
    for (int64_t j = 0; j < S; ++j) // K^T so the score loop is unit-stride
      for (int64_t e = 0; e < E; ++e)
        kt[e * S + j] = kb[j * E + e];
    for (int64_t i = 0; i < L; ++i) {
      std::fill(scores.begin(), scores.end(), 0.0);
      gemm(qb + i * E, kt.data(), scores.data(), 1, E, S);
      double mx = ninf;
      for (int64_t j = 0; j < S; ++j) {
        double &sc = scores[j];
        sc *= scale;
        if (causal && j > i)
          sc = ninf;
        if (mask) {
          double mv = M[(b * L + i) * S + j];
          sc = boolMask ? (mv != 0 ? sc : ninf) : sc + mv;
        }
        if (std::isnan(sc) || sc > mx) // std::max would drop a NaN score; torch propagates it
          mx = sc;
      }
      // A row with every position masked out gives zeros (torch's safe softmax), not NaN.
      if (mx == ninf)
        continue;
      double sum = 0;
      for (double &sc : scores)
        sum += (sc = std::exp(sc - mx));
      for (int64_t j = 0; j < S; ++j)
        scores[j] = scores[j] / sum * (noise ? N[(b * L + i) * S + j] : 1.0);
      gemm(scores.data(), vb, &out[(b * L + i) * Ev], 1, S, Ev);
    }
  }
  std::vector<int64_t> sizes = batch;
  sizes.push_back(L);
  sizes.push_back(Ev);
  return {store<double>(out, q.dtype(), sizes)};
}

// ---- pixel_shuffle / pixel_unshuffle ----

Shape pixelShape(const Op &op, const Shape &in, bool shuffle) {
  const std::string name = op.name();
  const char *attr = shuffle ? "upscale_factor" : "downscale_factor";
  int64_t r = attrInt(op, attr);
  if (r < 1)
    inferFail(name + ": " + attr + " must be positive, got " + std::to_string(r));
  if (in.size() < 3)
    inferFail(name + ": input must have at least 3 dims, got " + shapeStr(in));
  Shape out = in;
  size_t c = in.size() - 3, h = c + 1, w = c + 2;
  if (shuffle) {
    if (auto cv = in[c].staticValue(); cv && *cv % (r * r) != 0)
      inferFail(name + ": channels (" + std::to_string(*cv) + ") must be divisible by " +
                std::to_string(r * r));
    out[c] = in[c].floorDiv(r * r);
    out[h] = in[h] * r;
    out[w] = in[w] * r;
  } else {
    for (size_t d : {h, w})
      if (auto dv = in[d].staticValue(); dv && *dv % r != 0)
        inferFail(name + ": height and width must be divisible by " + std::to_string(r) + ", got " +
                  shapeStr(in));
    out[c] = in[c] * (r * r);
    out[h] = in[h].floorDiv(r);
    out[w] = in[w].floorDiv(r);
  }
  return out;
}

/// Both ops are a permutation of a 6-d view: [.., C, r, r, H, W] <-> [.., C, H, r, W, r].
std::vector<RtValue> pixelKernel(const Op &op, std::span<const RtValue> in, bool shuffle) {
  const Tensor &x = in[0].tensor();
  std::vector<int64_t> outSizes =
      sizesOf(atRuntime([&] { return pixelShape(op, shapeOf(x.sizes()), shuffle); }));
  int64_t r = attrInt(op, shuffle ? "upscale_factor" : "downscale_factor");
  size_t c = x.sizes().size() - 3;
  std::vector<int64_t> sizes(x.sizes().begin(), x.sizes().begin() + static_cast<ptrdiff_t>(c));
  std::vector<int64_t> strides(x.strides().begin(),
                               x.strides().begin() + static_cast<ptrdiff_t>(c));
  int64_t sc = x.strides()[c], sh = x.strides()[c + 1], sw = x.strides()[c + 2];
  int64_t C = outSizes[c], H = shuffle ? x.size(c + 1) : outSizes[c + 1],
          W = shuffle ? x.size(c + 2) : outSizes[c + 2];
  if (shuffle) { // out[c, h*r+i, w*r+j] = in[c*r*r + i*r + j, h, w]
    sizes.insert(sizes.end(), {C, H, r, W, r});
    strides.insert(strides.end(), {sc * r * r, sh, sc * r, sw, sc});
  } else { // out[c*r*r + i*r + j, h, w] = in[c, h*r+i, w*r+j]
    sizes.insert(sizes.end(), {C / (r * r), r, r, H, W});
    strides.insert(strides.end(), {sc, sh, sw, sh * r, sw * r});
  }
  Tensor out = x.view(sizes, strides, x.offset()).contiguousCopy();
  return {out.view(outSizes, contiguousStrides(outSizes), 0)};
}

} // namespace

void registerLayerOps(OpRegistry &r) {
  r.add({
      .name = "embedding",
      .summary = "Rows of weight [num,dim] picked by integer indices (i64/i32): result shape is "
                 "indices.shape + [dim]. padding_idx only matters for gradients and is ignored; "
                 "an out-of-range index is a run-time error.",
      .operands = {{"weight"}, {"indices"}},
      .attrs = {{.name = "padding_idx", .kind = AttrKind::Int, .defaultValue = Attr(-1)}},
      .infer = embeddingInfer,
      .kernel = embeddingKernel,
  });
  r.add({
      .name = "dropout",
      .summary = "F.dropout. train=false (or p=0): a copy of input. train=true: each element is "
                 "zeroed with probability p and the rest scaled by 1/(1-p); the interpreter "
                 "draws the mask deterministically from attr seed (splitmix64 of seed and the "
                 "element index), so differential tests check eval mode and mask statistics, "
                 "not PyTorch's RNG stream.",
      .operands = {{"input"}},
      .attrs = {{.name = "p", .kind = AttrKind::Float, .defaultValue = Attr(0.5)},
                {.name = "train", .kind = AttrKind::Bool, .defaultValue = Attr(true)},
                {.name = "seed", .kind = AttrKind::Int, .defaultValue = Attr(0)}},
      .infer = dropoutInfer,
      .kernel = dropoutKernel,
  });
  r.add({
      .name = "scaled_dot_product_attention",
      .summary = "F.scaled_dot_product_attention: softmax(q·k^T*scale + mask)·v over q [..,L,E], "
                 "k [..,S,E], v [..,S,Ev] (batch dims broadcast) -> [..,L,Ev]. attn_mask: bool "
                 "(true = attend) or the query dtype (added), broadcast to [..,L,S]; is_causal "
                 "masks j > i (top-left aligned). scale: absent -> 1/sqrt(E). dropout_p must be "
                 "0: dropout_noise (the query's dtype, broadcast to [..,L,S]) multiplies the "
                 "softmax weights instead, as eager's at::dropout of them does with its noise. "
                 "enable_gqa: k/v heads (dim -3) repeat-interleave to the query heads. A fully "
                 "masked row gives zeros. fpmath = bf16 (f32 only): its products may round "
                 "their operands to bf16, accumulating in f32 (matmul's fpmath).",
      .operands = {{"query"},
                   {"key"},
                   {"value"},
                   {.name = "attn_mask", .optional = true},
                   {.name = "dropout_noise", .optional = true}},
      .attrs = {{.name = "is_causal", .kind = AttrKind::Bool, .defaultValue = Attr(false)},
                {.name = "dropout_p", .kind = AttrKind::Float, .defaultValue = Attr(0.0)},
                {.name = "scale", .kind = AttrKind::Float, .optional = true},
                {.name = "enable_gqa", .kind = AttrKind::Bool, .defaultValue = Attr(false)},
                {.name = "fpmath", .kind = AttrKind::Str, .optional = true}},
      .infer = sdpaInfer,
      .kernel = sdpaKernel,
  });
  for (bool shuffle : {true, false}) {
    const char *attr = shuffle ? "upscale_factor" : "downscale_factor";
    r.add({
        .name = shuffle ? "pixel_shuffle" : "pixel_unshuffle",
        .summary = shuffle ? "[.., C*r*r, H, W] -> [.., C, H*r, W*r] with r = upscale_factor."
                           : "[.., C, H*r, W*r] -> [.., C*r*r, H, W] with r = downscale_factor.",
        .operands = {{"input"}},
        .attrs = {{.name = attr, .kind = AttrKind::Int}},
        .infer =
            [shuffle](const Op &op) {
              const Type &x = tensorOperand(op, 0);
              return std::vector<Type>{x.withShape(pixelShape(op, x.shape(), shuffle))};
            },
        .kernel = [shuffle](const Op &op,
                            std::span<const RtValue> in) { return pixelKernel(op, in, shuffle); },
    });
  }
}

} // namespace xjit::ops::nn
