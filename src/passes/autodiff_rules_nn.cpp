// Derivative rules of the autodiff pass for the layers of convolutional nets: conv{1,2,3}d,
// max_pool / avg_pool / adaptive_avg_pool{1,2,3}d, batch_norm (training mode with batch
// statistics, eval mode with running statistics, and batch_norm_with_update, whose new running
// statistics carry no gradient), group_norm and their activations (hardtanh, relu6, leaky_relu,
// elu, hardswish, hardsigmoid). Each gradient is written with forward ops, except a
// convolution's weight gradient (conv{1,2,3}d_weight), so it compiles like any other graph
// (oneDNN convolutions, fused elementwise kernels):
//   conv:      dx = conv_transpose(g, w), dw = conv_weight(x, g) (oneDNN's backward-weights
//              primitive), db = sum(g)
//   avg_pool:  dx = g / divisor spread over each window: a broadcast when the windows tile the
//              input, else a depthwise conv_transpose with a window of ones (ceil_mode: each
//              window's own divisor, a constant, and the transposed convolution cropped)
//   max_pool:  the first maximum of a window gets the whole gradient (eager's tie-break): a
//              compare-and-select when the windows tile the input, else max_pool_backward
//              (f32, f64; other dtypes: scatter_add of g at max_pool_with_indices' indices)
//   upsample_linear1d / bilinear2d / trilinear3d: dx = upsample_*_backward(g), the adjoint of
//              the forward's weighted neighbours, one pass
//   batch_norm, group_norm: PyTorch's backward formulas; group_norm recomputes its statistics
//              from x, training-mode batch_norm saves the forward's (computeInForward).
// Only channels-first (layout "nchw") batched inputs with static shapes are covered: autodiff
// runs before the layout pass, so captured graphs are channels-first.
#include "autodiff_rules.h"
#include "semantic_util.h"

#include "xjit/ir/op_registry.h"
#include "xjit/passes/autodiff.h"

#include <algorithm>
#include <numeric>

namespace xjit::passes::autodiff_rules {
namespace {

using Ints = std::vector<int64_t>;

/// The spatial rank of conv2d, max_pool3d, adaptive_avg_pool1d...: the digit before "d".
size_t spatialRank(const Op &op) {
  const std::string &n = op.name();
  const size_t d = n.rfind('d');
  return static_cast<size_t>(n[d - 1] - '0');
}

/// A per-spatial-dim attribute (1 value or nd values; absent or empty: dflt for each dim).
Ints spatialAttr(const Op &op, const char *name, size_t nd, const Ints &dflt) {
  const Attr *a = op.attrOrNull(name);
  Ints v = a && a->kind() == AttrKind::Ints ? a->asInts() : Ints{};
  if (a && a->kind() == AttrKind::Int) v = {a->asInt()};
  if (v.empty()) return dflt;
  if (v.size() == 1) return Ints(nd, v[0]);
  if (v.size() != nd) unsupported(op, std::string("attribute ") + name + " of the wrong size");
  return v;
}

bool boolAttr(const Op &op, const char *name, bool dflt) {
  const Attr *a = op.attrOrNull(name);
  return a && a->kind() == AttrKind::Bool ? a->asBool() : dflt;
}

/// Rejects what the rules below do not cover: channels-last layouts and unbatched inputs.
void requireBatchedChannelsFirst(const RuleArgs &a, size_t nd) {
  if (const Attr *l = a.op.attrOrNull("layout");
      l && l->kind() == AttrKind::Str && l->asStr() != "nchw")
    unsupported(a.op, "a channels-last layout");
  if (a.x(0)->type().rank() != static_cast<int64_t>(nd) + 2)
    unsupported(a.op, "an unbatched input");
}

std::string convName(const char *stem, size_t nd) { return stem + std::to_string(nd) + "d"; }

/// The gradient of a strided window op's input: g scattered back over the windows with the
/// (grouped) weight w, a transposed convolution; output_padding restores the input sizes the
/// floor division of the forward's output size dropped.
Value *transposedConv(RuleArgs &a, Value *g, Value *w, const Ints &inShape, const Ints &kernel,
                      const Ints &stride, const Ints &padding, const Ints &dilation,
                      int64_t groups) {
  const size_t nd = kernel.size();
  const Ints outShape = staticShape(a.op, g);
  Ints outputPadding(nd);
  for (size_t d = 0; d < nd; ++d) {
    outputPadding[d] = inShape[d + 2] + 2 * padding[d] - dilation[d] * (kernel[d] - 1) - 1 -
                       (outShape[d + 2] - 1) * stride[d];
    if (outputPadding[d] < 0 || outputPadding[d] >= std::max(stride[d], dilation[d]))
      unsupported(a.op, "input sizes a transposed convolution cannot restore");
  }
  return a.b.op(convName("conv_transpose", nd), {g, w},
                {{"stride", stride},
                 {"padding", padding},
                 {"output_padding", outputPadding},
                 {"dilation", dilation},
                 {"groups", groups}});
}

// ---- convolution ----

std::vector<Value *> convRule(RuleArgs &a) {
  const size_t nd = spatialRank(a.op);
  requireBatchedChannelsFirst(a, nd);
  Value *x = a.x(0), *w = a.x(1);
  const Ints xs = staticShape(a.op, x), ws = staticShape(a.op, w);
  const Ints kernel(ws.begin() + 2, ws.end());
  const Ints stride = spatialAttr(a.op, "stride", nd, Ints(nd, 1));
  const Ints dilation = spatialAttr(a.op, "dilation", nd, Ints(nd, 1));
  Ints padding = spatialAttr(a.op, "padding", nd, Ints(nd, 0));
  const Attr *gr = a.op.attrOrNull("groups");
  const int64_t groups = gr ? gr->asInt() : 1;
  const Attr *pm = a.op.attrOrNull("padding_mode");
  const std::string mode = pm && pm->kind() == AttrKind::Str ? pm->asStr() : "";
  if (mode == "valid") padding.assign(nd, 0);
  if (mode == "same")
    for (size_t d = 0; d < nd; ++d) {
      const int64_t total = dilation[d] * (kernel[d] - 1);
      if (total % 2 != 0) unsupported(a.op, "padding 'same' with an odd total padding");
      padding[d] = total / 2;
    }
  std::vector<Value *> r(a.op.numOperands(), nullptr);
  if (a.need[0]) r[0] = transposedConv(a, a.g, w, xs, kernel, stride, padding, dilation, groups);
  if (a.need[1])
    r[1] = a.b.op(convName("conv", nd) + "_weight", {x, a.g},
                  {{"weight_size", ws},
                   {"stride", stride},
                   {"padding", padding},
                   {"dilation", dilation},
                   {"groups", groups}});
  if (a.op.numOperands() > 2 && a.x(2)->type().isTensor() && a.need[2]) {
    Ints dims = {0};
    for (size_t d = 0; d < nd; ++d)
      dims.push_back(static_cast<int64_t>(d + 2));
    r[2] = a.b.op("sum", {a.g}, {{"dims", dims}, {"keepdim", false}});
  }
  return r;
}

// ---- pooling ----

/// dx of an average over windows kernel/stride/padding: g / divisor, spread over each window.
Value *averageGradient(RuleArgs &a, Value *g, const Ints &kernel, const Ints &stride,
                       const Ints &padding, bool countIncludePad, const Attr *divisorOverride) {
  const size_t nd = kernel.size();
  const Ints xs = staticShape(a.op, a.x(0)), gs = staticShape(a.op, g);
  const int64_t window =
      std::accumulate(kernel.begin(), kernel.end(), int64_t(1), std::multiplies<>());
  const bool padded = std::any_of(padding.begin(), padding.end(), [](int64_t p) { return p > 0; });
  if (divisorOverride) {
    g = a.mul(g, a.f(1.0 / static_cast<double>(divisorOverride->asInt())));
  } else if (countIncludePad || !padded) {
    g = a.mul(g, a.f(1.0 / static_cast<double>(window)));
  } else {
    // Each window divides by its in-bounds element count: window * the padding-counting
    // average of ones over [1, 1, spatial...].
    Ints onesShape = {1, 1};
    onesShape.insert(onesShape.end(), xs.begin() + 2, xs.end());
    Value *ones = a.b.op("ones", {}, {{"shape", onesShape}, {"dtype", g->type().dtype()}});
    Value *share = a.b.op(convName("avg_pool", nd), {ones},
                          {{"kernel_size", kernel},
                           {"stride", stride},
                           {"padding", padding},
                           {"count_include_pad", true}});
    g = a.bin("div", g, a.mul(share, a.f(static_cast<double>(window))));
  }
  bool tiles = true; // windows that tile the input exactly: a broadcast instead of a convolution
  for (size_t d = 0; d < nd; ++d)
    tiles &= kernel[d] == stride[d] && padding[d] == 0 && gs[d + 2] * kernel[d] == xs[d + 2];
  if (tiles) {
    Ints spread = {gs[0], gs[1]}, expanded = {gs[0], gs[1]};
    for (size_t d = 0; d < nd; ++d) {
      spread.insert(spread.end(), {gs[d + 2], 1});
      expanded.insert(expanded.end(), {gs[d + 2], kernel[d]});
    }
    Value *e = a.un("expand", a.un("reshape", g, {{"shape", spread}}), {{"shape", expanded}});
    return a.un("reshape", e, {{"shape", xs}});
  }
  const int64_t channels = xs[1];
  Ints onesShape = {channels, 1};
  onesShape.insert(onesShape.end(), kernel.begin(), kernel.end());
  Value *ones = a.b.op("ones", {}, {{"shape", onesShape}, {"dtype", g->type().dtype()}});
  return transposedConv(a, g, ones, xs, kernel, stride, padding, Ints(nd, 1), channels);
}

/// dx of avg_pool in ceil_mode, whose last windows may overhang the padded input: g divided by
/// each window's own divisor (a constant [1, 1, O...]: its padded size clipped at the end of
/// the right padding, or its in-bounds count; PyTorch's avg_pool backward), spread over the
/// windows by a depthwise conv_transpose without padding, and the input's part of that cut out.
Value *overhangingAverageGradient(RuleArgs &a, const Ints &kernel, const Ints &stride,
                                  const Ints &padding, bool countIncludePad,
                                  const Attr *divisorOverride) {
  const size_t nd = kernel.size();
  const Ints xs = staticShape(a.op, a.x(0)), gs = staticShape(a.op, a.g);
  Value *g = a.g;
  if (divisorOverride) {
    g = a.mul(g, a.f(1.0 / static_cast<double>(divisorOverride->asInt())));
  } else {
    Ints divShape = {1, 1};
    divShape.insert(divShape.end(), gs.begin() + 2, gs.end());
    std::vector<Ints> perDim(nd); // each window's divisor along one spatial dim
    for (size_t d = 0; d < nd; ++d)
      for (int64_t o = 0; o < gs[d + 2]; ++o) {
        const int64_t n = xs[d + 2], start = o * stride[d] - padding[d];
        const int64_t end = std::min(start + kernel[d], n + padding[d]);
        const int64_t size =
            countIncludePad ? end - start : std::min(end, n) - std::max<int64_t>(start, 0);
        perDim[d].push_back(std::max<int64_t>(size, 1)); // (an empty window has no input)
      }
    Tensor divisor = Tensor::empty(g->type().dtype(), divShape);
    for (int64_t i = 0; i < divisor.numel(); ++i) {
      int64_t rest = i, product = 1;
      for (size_t d = nd; d-- > 0;) {
        product *= perDim[d][size_t(rest % gs[d + 2])];
        rest /= gs[d + 2];
      }
      divisor.setDouble(i, static_cast<double>(product));
    }
    g = a.bin("div", g, a.b.constantTensor(divisor));
  }
  // One window over the whole input per dim (a global pool: EfficientNet's pooler): g / divisor
  // broadcast over it.
  bool global = true;
  for (size_t d = 0; d < nd; ++d)
    global &= gs[d + 2] == 1 && padding[d] == 0 && kernel[d] >= xs[d + 2];
  if (global) return a.un("expand", g, {{"shape", xs}});
  // conv_transpose without padding covers [-padding, (O-1)·stride + kernel - padding) of the
  // input; output_padding extends it to the input's end where the windows stop short. What a
  // window covers past the input's end is cut away, so a kernel longer than input + padding
  // spreads as one of that length (EfficientNet's AvgPool2d(1280, ceil_mode=True) over 7x7:
  // a 7x7 window of ones, not 1280x1280).
  Ints full = xs, outputPadding(nd), spread(nd);
  for (size_t d = 0; d < nd; ++d) {
    spread[d] = std::min(kernel[d], xs[d + 2] + padding[d]);
    const int64_t covered = (gs[d + 2] - 1) * stride[d] + spread[d];
    outputPadding[d] = std::max<int64_t>(0, xs[d + 2] + padding[d] - covered);
    if (outputPadding[d] >= stride[d]) unsupported(a.op, "windows that skip the input's end");
    full[d + 2] = covered + outputPadding[d];
  }
  const int64_t channels = xs[1];
  Ints onesShape = {channels, 1};
  onesShape.insert(onesShape.end(), spread.begin(), spread.end());
  Value *ones = a.b.op("ones", {}, {{"shape", onesShape}, {"dtype", g->type().dtype()}});
  Value *dx = a.b.op(convName("conv_transpose", nd), {g, ones},
                     {{"stride", stride},
                      {"padding", Ints(nd, 0)},
                      {"output_padding", outputPadding},
                      {"dilation", Ints(nd, 1)},
                      {"groups", channels}});
  for (size_t d = 0; d < nd; ++d)
    if (padding[d] > 0 || full[d + 2] != xs[d + 2])
      dx = a.un("slice", dx,
                {{"dim", static_cast<int64_t>(d + 2)},
                 {"start", padding[d]},
                 {"end", padding[d] + xs[d + 2]}});
  return dx;
}

std::vector<Value *> avgPoolRule(RuleArgs &a) {
  const size_t nd = spatialRank(a.op);
  requireBatchedChannelsFirst(a, nd);
  const Ints kernel = spatialAttr(a.op, "kernel_size", nd, {});
  if (kernel.size() != nd) unsupported(a.op, "no kernel_size");
  const Attr *div = a.op.attrOrNull("divisor_override");
  if (div && div->kind() != AttrKind::Int) div = nullptr;
  const Ints stride = spatialAttr(a.op, "stride", nd, kernel);
  const Ints padding = spatialAttr(a.op, "padding", nd, Ints(nd, 0));
  const bool countIncludePad = boolAttr(a.op, "count_include_pad", true);
  if (boolAttr(a.op, "ceil_mode", false))
    return {overhangingAverageGradient(a, kernel, stride, padding, countIncludePad, div)};
  return {averageGradient(a, a.g, kernel, stride, padding, countIncludePad, div)};
}

std::vector<Value *> adaptiveAvgPoolRule(RuleArgs &a) {
  const size_t nd = spatialRank(a.op);
  requireBatchedChannelsFirst(a, nd);
  const Ints xs = staticShape(a.op, a.x(0)), os = staticShape(a.op, a.out());
  Ints kernel(nd);
  for (size_t d = 0; d < nd; ++d) {
    if (os[d + 2] == 0 || xs[d + 2] % os[d + 2] != 0)
      unsupported(a.op, "windows of different sizes (input not divisible by the output)");
    kernel[d] = xs[d + 2] / os[d + 2];
  }
  return {averageGradient(a, a.g, kernel, kernel, Ints(nd, 0), true, nullptr)};
}

/// Max pooling whose windows tile the input (kernel == stride, no padding or dilation, sizes
/// divisible: MaxPool2d(2)): each output's window position of its first maximum, found by
/// comparing the strided views x[.., a::k, b::k] with the result in window order (the first
/// match wins, as eager's scan does), and the gradient placed there by one broadcast
/// compare-and-select over [N, O1, k1, O2, k2, ..., C], a native elementwise kernel instead of
/// the reference kernels of max_pool_with_indices and scatter_add. nullptr when the windows do
/// not tile the input. (A window holding NaN gives its gradient to the last position, eager to
/// its last NaN.) Computed channels-last, through permuted views of x, the result and g: a conv
/// net's activations are channels-last buffers by then (the layout pass, and the backward's
/// saved values, docs/frontend.md), so the kernels read and write in memory order and the
/// batch norm's gradient that usually follows sees one layout; dx is a channels-first view.
Value *tiledMaxPoolGradient(RuleArgs &a, size_t nd) {
  const Ints xs = staticShape(a.op, a.x(0)), os = staticShape(a.op, a.out());
  const Ints kernel = spatialAttr(a.op, "kernel_size", nd, {});
  if (kernel.size() != nd || spatialAttr(a.op, "stride", nd, kernel) != kernel ||
      spatialAttr(a.op, "padding", nd, Ints(nd, 0)) != Ints(nd, 0) ||
      spatialAttr(a.op, "dilation", nd, Ints(nd, 1)) != Ints(nd, 1))
    return nullptr;
  int64_t window = 1;
  for (size_t d = 0; d < nd; ++d) {
    if (os[d + 2] * kernel[d] != xs[d + 2]) return nullptr;
    window *= kernel[d];
  }
  if (window > 16) return nullptr; // one compare per window position
  // [N, C, S1, ...] <-> [N, S1, ..., C].
  Ints toLast = {0}, toFirst = {0, static_cast<int64_t>(nd) + 1};
  for (size_t d = 0; d < nd; ++d) {
    toLast.push_back(static_cast<int64_t>(d) + 2);
    toFirst.push_back(static_cast<int64_t>(d) + 1);
  }
  toLast.push_back(1);
  auto channelsLast = [&](Value *v) { return a.un("permute", v, {{"dims", toLast}}); };
  Value *x = channelsLast(a.x(0)), *out = channelsLast(a.out());
  // first = the window position (row-major over the kernel dims) of the first maximum.
  Value *first = a.b.constantInt(window - 1);
  for (int64_t j = window - 2; j >= 0; --j) {
    Value *view = x;
    int64_t rest = j;
    for (size_t d = nd; d-- > 0;) {
      const int64_t offset = rest % kernel[d];
      rest /= kernel[d];
      view = a.un("slice", view,
                  {{"dim", static_cast<int64_t>(d + 1)},
                   {"start", offset},
                   {"end", xs[d + 2]},
                   {"step", kernel[d]}});
    }
    first = a.b.op("where", {a.bin("eq", view, out), a.b.constantInt(j), first});
  }
  // [N, O1, 1, O2, 1, ..., C] against the positions [1, 1, k1, 1, k2, ..., 1].
  Ints spread = {xs[0]}, positions = {1}, tiled = {xs[0]}, xLast = {xs[0]};
  for (size_t d = 0; d < nd; ++d) {
    spread.insert(spread.end(), {os[d + 2], 1});
    positions.insert(positions.end(), {1, kernel[d]});
    tiled.insert(tiled.end(), {os[d + 2], kernel[d]});
    xLast.push_back(xs[d + 2]);
  }
  spread.push_back(xs[1]);
  positions.push_back(1);
  tiled.push_back(xs[1]);
  xLast.push_back(xs[1]);
  Value *position =
      a.un("reshape", a.b.op("arange", {}, {{"end", window}}), {{"shape", positions}});
  // One byte per position (window <= 16) instead of the i64 the where chain computes in: the
  // first-maximum map is written by one kernel and read by the next.
  first = a.un("cast", first, {{"dtype", DType::U8}});
  Value *hit = a.bin("eq", a.un("reshape", first, {{"shape", spread}}), position);
  Value *g = a.un("reshape", channelsLast(a.g), {{"shape", spread}});
  Value *dx = a.b.op("where", {hit, g, a.f(0.0)});
  if (staticShape(a.op, dx) != tiled) unsupported(a.op, "an unexpected tiled gradient shape");
  return a.un("permute", a.un("reshape", dx, {{"shape", xLast}}), {{"dims", toFirst}});
}

std::vector<Value *> maxPoolRule(RuleArgs &a) {
  const size_t nd = spatialRank(a.op);
  requireBatchedChannelsFirst(a, nd);
  if (Value *dx = tiledMaxPoolGradient(a, nd)) return {dx};
  AttrMap attrs = a.op.attrs();
  attrs.erase("layout"); // channels-first here (requireBatchedChannelsFirst)
  const DType dt = a.x(0)->type().dtype();
  if (dt == DType::F32 || dt == DType::F64) {
    // Other windows (overlapping, padded, dilated, ceil_mode): max_pool_backward finds each
    // window's argmax again from x and adds g there, one pass with no saved indices.
    Op *grad = a.b.create(a.op.name() + "_backward", {a.g, a.x(0)}, attrs);
    return {grad->result(0)};
  }
  // Other dtypes: the forward's argmax again (the windows' first maximum, as eager's backward
  // uses), then each gradient element added at the input element it came from.
  Op *pool = a.b.create(a.op.name() + "_with_indices", {a.x(0)}, attrs);
  const Ints xs = staticShape(a.op, a.x(0));
  const Ints flat = {xs[0], xs[1], -1};
  Value *idx = a.un("reshape", pool->result(1), {{"shape", flat}});
  Value *g = a.un("reshape", a.g, {{"shape", flat}});
  Value *zeros = a.un("reshape", a.un("zeros_like", a.x(0)), {{"shape", flat}});
  Value *dx = a.b.op("scatter_add", {zeros, idx, g}, {{"dim", int64_t(2)}});
  return {a.un("reshape", dx, {{"shape", xs}})};
}

// ---- linear resampling ----

std::vector<Value *> linearResampleRule(RuleArgs &a) {
  const Shape &xs = a.x(0)->type().shape();
  Ints spatial;
  for (size_t d = 2; d < xs.size(); ++d) {
    if (!xs[d].isStatic()) unsupported(a.op, "a symbolic spatial size");
    spatial.push_back(xs[d].value());
  }
  AttrMap attrs = a.op.attrs();
  attrs.erase("output_size");
  attrs["input_size"] = spatial;
  return {a.b.create(a.op.name() + "_backward", {a.g}, attrs)->result(0)};
}

// ---- batch_norm ----

/// batch_norm (training: batch statistics; eval: running statistics) and
/// batch_norm_with_update (batch statistics); operands input, weight?, bias?, running_mean?,
/// running_var?, each per channel (dim 1).
std::vector<Value *> batchNormRule(RuleArgs &a) {
  Value *x = a.x(0);
  const int64_t rank = x->type().rank();
  if (rank < 2) unsupported(a.op, "an input without a channel dim");
  auto operand = [&](size_t i) -> Value * {
    return a.op.numOperands() > i && a.x(i)->type().isTensor() ? a.x(i) : nullptr;
  };
  Value *w = operand(1), *bias = operand(2), *rm = operand(3), *rv = operand(4);
  const bool training =
      a.op.name() == "batch_norm_with_update" || boolAttr(a.op, "training", false);
  const double eps = floatAttr(a.op, "eps", 1e-5);
  Ints reduced = {0}, perChannelShape(static_cast<size_t>(rank), 1);
  for (int64_t d = 2; d < rank; ++d)
    reduced.push_back(d);
  perChannelShape[1] = -1;
  // [C] -> [1, C, 1...], broadcasting against x.
  auto channelwise = [&](Value *v) { return a.un("reshape", v, {{"shape", perChannelShape}}); };
  auto meanOver = [&](Value *v) {
    return a.b.op("mean", {v}, {{"dims", reduced}, {"keepdim", true}});
  };
  Value *centered, *rstd;
  if (training) {
    // The forward's own statistics (decompose-batch-norm builds the same ops, which CSE
    // merges): saved from the forward, as eager saves its mean and 1/std.
    const BatchStatistics stats = batchStatistics(a.b, x);
    Value *mean = stats.mean;
    centered = a.bin("sub", x, mean);
    rstd = a.un("rsqrt", a.bin("add", stats.var, a.f(eps)));
    if (a.computeInForward) {
      a.computeInForward->push_back(mean);
      a.computeInForward->push_back(rstd);
      // The backward's own x - mean: the one above is the forward's (an operand of rstd),
      // which x̂ would otherwise save whole.
      centered = a.bin("sub", x, mean);
    }
  } else {
    if (!rm || !rv) unsupported(a.op, "eval mode without running statistics");
    centered = a.bin("sub", x, channelwise(rm));
    rstd = channelwise(a.un("rsqrt", a.bin("add", rv, a.f(eps))));
  }
  Value *xhat = a.mul(centered, rstd);
  std::vector<Value *> r(a.op.numOperands(), nullptr);
  // Σ g and Σ g·x̂ per channel serve the weight and bias gradients and, divided by the count,
  // dx: two reductions over the activation instead of four (mean(g·w) = w·mean(g)).
  Value *sumG = nullptr, *sumGX = nullptr;
  const std::optional<std::vector<int64_t>> xs = staticSizes(x);
  const bool shareSums = training && xs && (*xs)[1] > 0;
  if ((w && a.need[1]) || (a.need[0] && shareSums))
    sumGX = perChannel(a.b, "sum", a.mul(a.g, xhat));
  if ((bias && a.need[2]) || (a.need[0] && shareSums)) sumG = perChannel(a.b, "sum", a.g);
  const Ints channels = {-1};
  if (w && a.need[1]) r[1] = a.un("reshape", sumGX, {{"shape", channels}});
  if (bias && a.need[2]) r[2] = a.un("reshape", sumG, {{"shape", channels}});
  if (a.need[0]) {
    Value *scale = w ? a.mul(rstd, channelwise(w)) : rstd;
    if (shareSums) {
      // The statistics depend on x too: dx = w·rstd·(g - mean(g) - x̂·mean(g·x̂)).
      int64_t count = 1;
      for (size_t d = 0; d < xs->size(); ++d)
        if (d != 1) count *= (*xs)[d];
      Value *inv = a.f(1.0 / static_cast<double>(count));
      Value *inner =
          a.bin("sub", a.bin("sub", a.g, a.mul(sumG, inv)), a.mul(xhat, a.mul(sumGX, inv)));
      r[0] = a.mul(inner, scale);
    } else if (training) {
      Value *inner =
          a.bin("sub", a.bin("sub", a.g, meanOver(a.g)), a.mul(xhat, meanOver(a.mul(a.g, xhat))));
      r[0] = a.mul(inner, scale);
    } else {
      r[0] = a.mul(a.g, scale);
    }
  }
  if ((rm && a.need.size() > 3 && a.need[3]) || (rv && a.need.size() > 4 && a.need[4]))
    unsupported(a.op, "running statistics that require grad");
  return r;
}

/// group_norm: layer_norm's formula within each (sample, group) of C / num_groups channels and
/// the spatial dims; weight and bias per channel.
std::vector<Value *> groupNormRule(RuleArgs &a) {
  Value *x = a.x(0);
  const Ints xs = staticShape(a.op, x);
  if (xs.size() < 2) unsupported(a.op, "an input without a channel dim");
  const int64_t groups = a.op.attr("num_groups").asInt(), channels = xs[1];
  if (groups <= 0 || channels % groups != 0) unsupported(a.op, "channels not divisible by groups");
  const double eps = floatAttr(a.op, "eps", 1e-5);
  auto operand = [&](size_t i) -> Value * {
    return a.op.numOperands() > i && a.x(i)->type().isTensor() ? a.x(i) : nullptr;
  };
  Value *w = operand(1), *bias = operand(2);
  const Ints grouped = {xs[0], groups, -1};
  Ints perChannel(xs.size(), 1), reduced = {0};
  perChannel[1] = channels;
  for (size_t d = 2; d < xs.size(); ++d)
    reduced.push_back(static_cast<int64_t>(d));
  auto meanOver = [&](Value *v) {
    return a.b.op("mean", {v}, {{"dims", Ints{2}}, {"keepdim", true}});
  };
  auto sumPerChannel = [&](Value *v) {
    return a.b.op("sum", {v}, {{"dims", reduced}, {"keepdim", false}});
  };
  Value *xg = a.un("reshape", x, {{"shape", grouped}});
  Value *centered = a.bin("sub", xg, meanOver(xg));
  Value *rstd = a.un("rsqrt", a.bin("add", meanOver(a.mul(centered, centered)), a.f(eps)));
  Value *xhat = a.mul(centered, rstd); // [N, G, C/G * spatial]
  std::vector<Value *> r(a.op.numOperands(), nullptr);
  if (w && a.need[1]) r[1] = sumPerChannel(a.mul(a.g, a.un("reshape", xhat, {{"shape", xs}})));
  if (bias && a.need[2]) r[2] = sumPerChannel(a.g);
  if (a.need[0]) {
    Value *gh = w ? a.mul(a.g, a.un("reshape", w, {{"shape", perChannel}})) : a.g;
    Value *ghg = a.un("reshape", gh, {{"shape", grouped}});
    Value *inner =
        a.bin("sub", a.bin("sub", ghg, meanOver(ghg)), a.mul(xhat, meanOver(a.mul(ghg, xhat))));
    r[0] = a.un("reshape", a.mul(inner, rstd), {{"shape", xs}});
  }
  return r;
}

// ---- activations of conv nets (MobileNet's relu6 / hardswish, leaky_relu, elu) ----
// PyTorch's backward formulas (hardtanh_backward, leaky_relu_backward, elu_backward,
// hardswish_backward, hardsigmoid_backward), from the input x: a `where` per piece.

Value *piecewise(RuleArgs &a, Value *cond, Value *then, Value *otherwise) {
  return a.b.op("where", {cond, then, otherwise});
}

std::vector<Value *> clampedRule(RuleArgs &a, double lo, double hi) {
  // (x <= lo || x >= hi) ? 0 : g
  Value *inside = a.bin("logical_and", a.bin("gt", a.x(0), a.f(lo)), a.bin("lt", a.x(0), a.f(hi)));
  return {piecewise(a, inside, a.g, a.f(0.0))};
}

std::vector<Value *> hardtanhRule(RuleArgs &a) {
  return clampedRule(a, floatAttr(a.op, "min_val", -1.0), floatAttr(a.op, "max_val", 1.0));
}

std::vector<Value *> relu6Rule(RuleArgs &a) { return clampedRule(a, 0.0, 6.0); }

std::vector<Value *> leakyReluRule(RuleArgs &a) {
  const double slope = floatAttr(a.op, "negative_slope", 0.01);
  return {piecewise(a, a.bin("gt", a.x(0), a.f(0.0)), a.g, a.mul(a.g, a.f(slope)))};
}

std::vector<Value *> eluRule(RuleArgs &a) {
  const double alpha = floatAttr(a.op, "alpha", 1.0);
  Value *negative = a.mul(a.g, a.mul(a.un("exp", a.x(0)), a.f(alpha)));
  return {piecewise(a, a.bin("le", a.x(0), a.f(0.0)), negative, a.g)};
}

std::vector<Value *> hardswishRule(RuleArgs &a) {
  // x <= -3: 0; x < 3: g * (x / 3 + 0.5); else g.
  Value *x = a.x(0);
  Value *middle = a.mul(a.g, a.bin("add", a.bin("div", x, a.f(3.0)), a.f(0.5)));
  return {piecewise(a, a.bin("le", x, a.f(-3.0)), a.f(0.0),
                    piecewise(a, a.bin("lt", x, a.f(3.0)), middle, a.g))};
}

std::vector<Value *> hardsigmoidRule(RuleArgs &a) {
  // -3 < x < 3: g * (1/6 rounded to f32: PyTorch's constant, in f64 too); else 0.
  Value *inside =
      a.bin("logical_and", a.bin("gt", a.x(0), a.f(-3.0)), a.bin("lt", a.x(0), a.f(3.0)));
  const double sixth = static_cast<double>(1.0F / 6.0F);
  return {piecewise(a, inside, a.mul(a.g, a.f(sixth)), a.f(0.0))};
}

} // namespace

void addNnRules(std::map<std::string, Rule> &t) {
  t["hardtanh"] = hardtanhRule;
  t["relu6"] = relu6Rule;
  t["leaky_relu"] = leakyReluRule;
  t["elu"] = eluRule;
  t["hardswish"] = hardswishRule;
  t["hardsigmoid"] = hardsigmoidRule;
  for (size_t nd = 1; nd <= 3; ++nd) {
    const std::string d = std::to_string(nd) + "d";
    t["conv" + d] = convRule;
    t["avg_pool" + d] = avgPoolRule;
    t["adaptive_avg_pool" + d] = adaptiveAvgPoolRule;
    t["max_pool" + d] = maxPoolRule;
  }
  t["upsample_linear1d"] = t["upsample_bilinear2d"] = t["upsample_trilinear3d"] =
      linearResampleRule;
  t["batch_norm"] = t["batch_norm_with_update"] = batchNormRule;
  t["group_norm"] = groupNormRule;
}

bool nnMultiResultRule(std::string_view name) { return name == "batch_norm_with_update"; }

bool resultCarriesGradient(const Op &op, size_t result) {
  if (op.name() == "custom_vjp") { // ctx.mark_non_differentiable
    const Attr *nd = op.attrOrNull("non_differentiable");
    if (!nd) return true;
    const std::vector<int64_t> &r = nd->asInts();
    return std::find(r.begin(), r.end(), static_cast<int64_t>(result)) == r.end();
  }
  return !(op.name() == "batch_norm_with_update" && result > 0);
}

} // namespace xjit::passes::autodiff_rules
