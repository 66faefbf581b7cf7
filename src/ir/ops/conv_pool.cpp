// Convolutions and poolings over 1, 2 and 3 spatial dims: conv{1,2,3}d, conv_transpose{1,2,3}d,
// conv{1,2,3}d_weight (conv's weight gradient), max_pool{1,2,3}d (+ _with_indices),
// avg_pool{1,2,3}d, adaptive_avg_pool{1,2,3}d and adaptive_max_pool{1,2,3}d (+ _with_indices),
// max_pool{1,2,3}d_backward. Inputs are [N, C, spatial...] or unbatched [C, spatial...]. The
// shape rules below serve both inference (symbolic dims) and the kernels (run-time sizes); the
// kernels are in nn_window.cpp, max_pool's gradient in max_pool_backward.cpp.
#include "nn_window.h"

#include <numeric>

namespace xjit {

namespace ops::nn {

std::vector<size_t> channelPerm(size_t rank, size_t nd, bool toLast) {
  std::vector<size_t> p(rank);
  for (size_t i = 0; i < rank; ++i)
    p[i] = i;
  if (rank != nd + 1 && rank != nd + 2) return p;
  size_t c = rank - nd - 1;
  if (toLast) {
    p.erase(p.begin() + static_cast<ptrdiff_t>(c));
    p.push_back(c);
  } else {
    p.pop_back();
    p.insert(p.begin() + static_cast<ptrdiff_t>(c), rank - 1);
  }
  return p;
}

Tensor channelView(const Tensor &t, size_t nd, bool toLast) {
  std::vector<size_t> p = channelPerm(t.sizes().size(), nd, toLast);
  return t.view(permuted(t.sizes(), p), permuted(t.strides(), p), t.offset());
}

} // namespace ops::nn

namespace {

using namespace ops;
using namespace ops::nn;

std::string spatialName(const std::string &op, size_t nd) {
  return op + ": input must be [N, C" +
         std::string(nd == 1   ? ", L"
                     : nd == 2 ? ", H, W"
                               : ", D, H, W") +
         "] or unbatched";
}

/// Checks the input rank (nd+1 unbatched or nd+2) and returns it as batched.
Shape batchedInput(const std::string &op, size_t nd, const Shape &in) {
  if (in.size() != nd + 1 && in.size() != nd + 2)
    inferFail(spatialName(op, nd) + " (" + std::to_string(nd + 1) + " or " +
              std::to_string(nd + 2) + " dims), got shape " + shapeStr(in));
  Shape x = in;
  if (in.size() == nd + 1) x.insert(x.begin(), DimExpr(1));
  return x;
}

/// Result shape in the input's batched-ness: `out` is [N, C, spatial...].
Shape unbatchLike(const Shape &in, size_t nd, Shape out) {
  if (in.size() == nd + 1) out.erase(out.begin());
  return out;
}

std::string dimName(size_t d) { return "spatial dim " + std::to_string(d); }

// ---- layout ----
// `layout = "nhwc"` stores the channel dim last ([N, spatial..., C], or [spatial..., C]
// unbatched) for every spatial rank (NLC, NHWC, NDHWC); "nchw" (the default) is PyTorch's
// channels-first order. The shape rules and kernels below work channels-first: a channels-last
// op permutes its input's shape (or a strided view of it) to channels-first and its result back.
// Weights keep PyTorch's [Cout, Cin/groups, k...] order in both layouts.

bool channelsLast(const Op &op) {
  const std::string &l = attrStr(op, "layout");
  if (l != "nchw" && l != "nhwc")
    inferFail(op.name() + ": layout must be \"nchw\" or \"nhwc\", got \"" + l + "\"");
  return l == "nhwc";
}

Shape channelsFirstShape(const Shape &s, size_t nd) {
  return permuted(s, channelPerm(s.size(), nd, false));
}
Shape channelsLastShape(const Shape &s, size_t nd) {
  return permuted(s, channelPerm(s.size(), nd, true));
}

/// The kernel's channels-first result in the op's layout (a fresh contiguous tensor).
Tensor inLayout(Tensor channelsFirst, size_t nd, bool last) {
  return last ? channelView(channelsFirst, nd, true).contiguousCopy() : channelsFirst;
}

// ---- convolution ----

struct ConvConfig {
  std::vector<int64_t> stride, padding, dilation, outputPadding;
  int64_t groups = 1;
  std::string mode; // "", "same", "valid"
};

ConvConfig convConfig(const Op &op, size_t nd, bool transposed) {
  ConvConfig c{.stride = spatialInts(op, "stride", nd, 1),
               .padding = spatialInts(op, "padding", nd, 0),
               .dilation = spatialInts(op, "dilation", nd, 1),
               .outputPadding = transposed ? spatialInts(op, "output_padding", nd, 0)
                                           : std::vector<int64_t>(nd, 0),
               .groups = attrInt(op, "groups")};
  if (c.groups < 1)
    inferFail(op.name() + ": groups must be positive, got " + std::to_string(c.groups));
  if (!transposed) {
    c.mode = attrStr(op, "padding_mode");
    if (c.mode != "" && c.mode != "same" && c.mode != "valid")
      inferFail(op.name() + ": padding_mode must be \"\", \"same\" or \"valid\", got \"" + c.mode +
                "\"");
    if (c.mode == "same")
      for (int64_t s : c.stride)
        if (s != 1)
          inferFail(op.name() + ": padding_mode \"same\" needs stride 1, got " + dimsStr(c.stride));
  }
  return c;
}

struct ConvGeom {
  Shape out;                   // in the input's batched-ness
  std::vector<int64_t> kernel; // spatial kernel sizes
  std::vector<int64_t> padLeft;
};

ConvGeom convGeom(const std::string &op, size_t nd, bool transposed, const ConvConfig &c,
                  const Shape &input, const Shape &w, const Shape *bias) {
  Shape x = batchedInput(op, nd, input);
  if (w.size() != nd + 2)
    inferFail(op + ": weight has " + std::to_string(w.size()) + " dims, expected " +
              std::to_string(nd + 2) + " (shape " + shapeStr(w) + ")");
  int64_t g = c.groups;
  DimExpr cout;
  std::string chanMsg = op + ": input of shape " + shapeStr(input) +
                        " does not match weight of shape " + shapeStr(w) +
                        " with groups=" + std::to_string(g);
  if (!transposed) { // weight [Cout, Cin/groups, k...]
    checkDimEq(x[1], w[1] * g, chanMsg + " (expected " + (w[1] * g).str() + " input channels)");
    if (auto co = w[0].staticValue(); co && *co % g != 0)
      inferFail(op + ": out channels (" + std::to_string(*co) +
                ") must be divisible by groups=" + std::to_string(g));
    cout = w[0];
  } else { // weight [Cin, Cout/groups, k...]
    checkDimEq(x[1], w[0], chanMsg + " (expected " + w[0].str() + " input channels)");
    if (auto ci = w[0].staticValue(); ci && *ci % g != 0)
      inferFail(op + ": in channels (" + std::to_string(*ci) +
                ") must be divisible by groups=" + std::to_string(g));
    cout = w[1] * g;
  }
  if (bias) {
    std::string msg = op + ": bias must be [" + cout.str() + "], got shape " + shapeStr(*bias);
    if (bias->size() != 1) inferFail(msg);
    checkDimEq((*bias)[0], cout, msg);
  }

  ConvGeom r;
  r.out = {x[0], cout};
  for (size_t d = 0; d < nd; ++d) {
    auto kv = w[2 + d].staticValue();
    if (!kv) inferFail(op + ": kernel size must be static, got weight shape " + shapeStr(w));
    int64_t k = *kv, s = c.stride[d], dil = c.dilation[d], eff = dil * (k - 1) + 1;
    const DimExpr &L = x[2 + d];
    r.kernel.push_back(k);
    if (transposed) {
      int64_t p = c.padding[d], op_ = c.outputPadding[d];
      if (op_ >= s && op_ >= dil)
        inferFail(op + ": output_padding must be smaller than stride or dilation, got " +
                  dimsStr(c.outputPadding));
      DimExpr o = (L - 1) * s - 2 * p + (eff - 1) + op_ + 1;
      checkDimAtLeast(o, 0, op + ": output size " + o.str() + " of " + dimName(d) + " is negative");
      r.padLeft.push_back(p);
      r.out.push_back(o);
    } else {
      int64_t total = c.mode == "same" ? eff - 1 : c.mode == "valid" ? 0 : 2 * c.padding[d];
      int64_t pl = total / 2; // "same" with an odd total pads one more on the right, as torch
      DimExpr padded = L + total;
      if (auto pv = padded.staticValue(); pv && *pv < eff)
        inferFail(op + ": padded input size " + std::to_string(*pv) + " of " + dimName(d) +
                  " is smaller than the effective kernel size " + std::to_string(eff));
      r.padLeft.push_back(pl);
      r.out.push_back((padded - eff + s).floorDiv(s));
    }
  }
  r.out = unbatchLike(input, nd, r.out);
  return r;
}

std::vector<Type> convInfer(const Op &op, size_t nd, bool transposed) {
  const Type &x = tensorOperand(op, 0), &w = tensorOperand(op, 1);
  requireNotBool(op.name(), "input", x);
  requireSameDType(op.name(), "input", x, "weight", w);
  const Type *b = optionalTensor(op, 2);
  if (b) requireSameDType(op.name(), "input", x, "bias", *b);
  ConvConfig c = convConfig(op, nd, transposed);
  bool last = channelsLast(op);
  Shape in = last ? channelsFirstShape(x.shape(), nd) : x.shape();
  Shape out = convGeom(op.name(), nd, transposed, c, in, w.shape(), b ? &b->shape() : nullptr).out;
  return {x.withShape(last ? channelsLastShape(out, nd) : out)};
}

std::vector<RtValue> convKernel(const Op &op, std::span<const RtValue> in, size_t nd,
                                bool transposed) {
  bool last = channelsLast(op);
  const Tensor x = last ? channelView(in[0].tensor(), nd, false) : in[0].tensor();
  const Tensor &w = in[1].tensor();
  std::optional<Tensor> bias;
  if (present(in, 2)) bias = in[2].tensor();
  ConvConfig c = convConfig(op, nd, transposed);
  Shape biasShape = bias ? shapeOf(bias->sizes()) : Shape{};
  ConvGeom geom = atRuntime([&] {
    return convGeom(op.name(), nd, transposed, c, shapeOf(x.sizes()), shapeOf(w.sizes()),
                    bias ? &biasShape : nullptr);
  });
  std::vector<int64_t> outSizes = sizesOf(geom.out);
  std::vector<int64_t> xs = sizesOf(batchedInput(op.name(), nd, shapeOf(x.sizes())));
  std::vector<int64_t> os = sizesOf(batchedInput(op.name(), nd, geom.out));
  ConvWindow win = ConvWindow::lift({xs.begin() + 2, xs.end()}, {os.begin() + 2, os.end()},
                                    geom.kernel, c.stride, geom.padLeft, c.dilation);
  DType dt = resultDType(op);
  return {inLayout(withAcc(dt,
                           [&](auto zero) {
                             using T = decltype(zero);
                             std::vector<T> X = load<T>(x), W = load<T>(w),
                                            B = bias ? load<T>(*bias) : std::vector<T>{};
                             std::vector<T> y =
                                 transposed
                                     ? convTransposed(X, W, B, xs[0], xs[1], os[1], c.groups, win)
                                     : convForward(X, W, B, xs[0], xs[1], os[1], c.groups, win);
                             return store<T>(y, dt, outSizes);
                           }),
                   nd, last)};
}

// ---- convolution weight gradient ----
// conv{1,2,3}d_weight(input, grad_output): torch.nn.grad.conv{1,2,3}d_weight, the gradient of
// conv's weight (of shape weight_size) for conv's input and its output's gradient.

std::vector<int64_t> weightSize(const Op &op, size_t nd) {
  std::vector<int64_t> w = attrInts(op, "weight_size");
  if (w.size() != nd + 2)
    inferFail(op.name() + ": weight_size must have " + std::to_string(nd + 2) + " values, got " +
              dimsStr(w));
  for (int64_t v : w)
    if (v < 1) inferFail(op.name() + ": weight_size must be positive, got " + dimsStr(w));
  return w;
}

/// The forward convolution's geometry, with grad_output checked against its output shape.
ConvGeom convWeightGeom(const std::string &op, size_t nd, const ConvConfig &c, const Shape &x,
                        const Shape &gy, const std::vector<int64_t> &ws) {
  if (x.size() != nd + 2)
    inferFail(op + ": input must be batched [N, C, spatial...], got shape " + shapeStr(x));
  ConvGeom geom = convGeom(op, nd, false, c, x, shapeOf(ws), nullptr);
  std::string msg = op + ": grad_output of shape " + shapeStr(gy) +
                    " is not the convolution's output shape " + shapeStr(geom.out);
  if (gy.size() != geom.out.size()) inferFail(msg);
  for (size_t d = 0; d < gy.size(); ++d)
    checkDimEq(gy[d], geom.out[d], msg);
  return geom;
}

std::vector<Type> convWeightInfer(const Op &op, size_t nd) {
  const Type &x = tensorOperand(op, 0), &gy = tensorOperand(op, 1);
  requireNotBool(op.name(), "input", x);
  requireSameDType(op.name(), "input", x, "grad_output", gy);
  std::vector<int64_t> ws = weightSize(op, nd);
  convWeightGeom(op.name(), nd, convConfig(op, nd, false), x.shape(), gy.shape(), ws);
  return {x.withShape(shapeOf(ws))};
}

std::vector<RtValue> convWeightKernel(const Op &op, std::span<const RtValue> in, size_t nd) {
  const Tensor &x = in[0].tensor(), &gy = in[1].tensor();
  ConvConfig c = convConfig(op, nd, false);
  std::vector<int64_t> ws = weightSize(op, nd);
  ConvGeom geom = atRuntime([&] {
    return convWeightGeom(op.name(), nd, c, shapeOf(x.sizes()), shapeOf(gy.sizes()), ws);
  });
  const std::vector<int64_t> &xs = x.sizes(), &os = gy.sizes();
  ConvWindow win = ConvWindow::lift({xs.begin() + 2, xs.end()}, {os.begin() + 2, os.end()},
                                    geom.kernel, c.stride, geom.padLeft, c.dilation);
  DType dt = resultDType(op);
  return {withAcc(dt, [&](auto zero) {
    using T = decltype(zero);
    std::vector<T> dw = convWeightGrad(load<T>(x), load<T>(gy), xs[0], xs[1], os[1], c.groups, win);
    return store<T>(dw, dt, ws);
  })};
}

// ---- pooling ----

enum class PoolKind { Max, Avg, AdaptiveMax, AdaptiveAvg };

bool isAdaptive(PoolKind k) { return k == PoolKind::AdaptiveMax || k == PoolKind::AdaptiveAvg; }
bool isMax(PoolKind k) { return k == PoolKind::Max || k == PoolKind::AdaptiveMax; }

PoolConfig poolConfig(const Op &op, size_t nd, PoolKind kind) {
  PoolConfig c;
  if (isAdaptive(kind)) {
    c.outputSize = spatialInts(op, "output_size", nd, -1);
    return c;
  }
  c.kernel = spatialInts(op, "kernel_size", nd, 1);
  c.stride = attrInts(op, "stride").empty() ? c.kernel : spatialInts(op, "stride", nd, 1);
  c.padding = spatialInts(op, "padding", nd, 0);
  c.dilation =
      kind == PoolKind::Max ? spatialInts(op, "dilation", nd, 1) : std::vector<int64_t>(nd, 1);
  c.ceil = attrBool(op, "ceil_mode");
  for (size_t d = 0; d < nd; ++d)
    if (c.padding[d] > c.kernel[d] / 2)
      inferFail(op.name() + ": padding " + dimsStr(c.padding) +
                " must be at most half the kernel size " + dimsStr(c.kernel));
  if (kind == PoolKind::Avg && hasAttrValue(op, "divisor_override") &&
      attrInt(op, "divisor_override") <= 0)
    inferFail(op.name() + ": divisor_override must be positive, got " +
              std::to_string(attrInt(op, "divisor_override")));
  return c;
}

/// PyTorch's pooling output size: floor or ceil of (L + 2p - dil*(k-1) - 1) / s + 1, where
/// ceil_mode drops a last window that would start in the right padding.
DimExpr poolOutDim(const std::string &op, const DimExpr &L, int64_t k, int64_t s, int64_t p,
                   int64_t dil, bool ceil) {
  int64_t eff = dil * (k - 1) + 1;
  DimExpr num = L + 2 * p - eff;
  if (auto lv = L.staticValue()) {
    int64_t n = *lv + 2 * p - eff;
    int64_t o = (ceil ? ceilDiv(n, s) : floorDiv(n, s)) + 1;
    if (ceil && (o - 1) * s >= *lv + p) --o;
    if (o < 1)
      inferFail(op + ": output size is too small (input " + std::to_string(*lv) + ", kernel " +
                std::to_string(k) + ", stride " + std::to_string(s) + ", padding " +
                std::to_string(p) + ", dilation " + std::to_string(dil) + ")");
    return o;
  }
  // floor(num/s) + 1 written as (num+s)//s, which keeps the canonical text short (s0//2).
  if (!ceil) return (num + s).floorDiv(s);
  // With a symbolic size the last-window rule is decidable only when it can never fire:
  // a window starting at (out-1)*s < L + 2p - eff + s never reaches L + p if s + p <= eff.
  if (s + p > eff)
    inferFail(op + ": ceil_mode on a symbolic size needs stride + padding <= " +
              "dilation*(kernel-1)+1, got stride " + std::to_string(s) + ", padding " +
              std::to_string(p) + ", kernel " + std::to_string(k));
  return (num + (2 * s - 1)).floorDiv(s);
}

Shape poolShape(const std::string &op, size_t nd, PoolKind kind, const PoolConfig &c,
                const Shape &input) {
  Shape x = batchedInput(op, nd, input);
  for (size_t d = 1; d < x.size(); ++d) // every dim but the batch
    checkDimAtLeast(x[d], 1,
                    op + ": input of shape " + shapeStr(input) +
                        " must have non-zero channel and spatial sizes");
  Shape out = {x[0], x[1]};
  for (size_t d = 0; d < nd; ++d) {
    const DimExpr &L = x[2 + d];
    if (isAdaptive(kind))
      out.push_back(c.outputSize[d] < 0 ? L : DimExpr(c.outputSize[d]));
    else
      out.push_back(
          poolOutDim(op, L, c.kernel[d], c.stride[d], c.padding[d], c.dilation[d], c.ceil));
  }
  return unbatchLike(input, nd, out);
}

std::vector<Type> poolInfer(const Op &op, size_t nd, PoolKind kind, bool withIndices) {
  const Type &x = tensorOperand(op, 0);
  if (kind == PoolKind::AdaptiveAvg)
    requireFloating(op.name(), "input", x);
  else
    requireNotBool(op.name(), "input", x);
  if (kind == PoolKind::Avg) attrBool(op, "count_include_pad");
  bool last = channelsLast(op);
  Shape out = poolShape(op.name(), nd, kind, poolConfig(op, nd, kind),
                        last ? channelsFirstShape(x.shape(), nd) : x.shape());
  if (last) out = channelsLastShape(out, nd);
  std::vector<Type> r = {x.withShape(out)};
  if (withIndices) r.push_back(x.withShape(out).withDType(DType::I64));
  return r;
}

std::vector<RtValue> poolKernel(const Op &op, std::span<const RtValue> in, size_t nd, PoolKind kind,
                                bool withIndices) {
  bool last = channelsLast(op);
  const Tensor x = last ? channelView(in[0].tensor(), nd, false) : in[0].tensor();
  PoolConfig c = poolConfig(op, nd, kind);
  std::vector<int64_t> outSizes =
      sizesOf(atRuntime([&] { return poolShape(op.name(), nd, kind, c, shapeOf(x.sizes())); }));
  size_t lead = x.sizes().size() - nd;
  int64_t planes = product(std::span(x.sizes()).first(lead));
  std::vector<Taps> taps;
  for (size_t d = 0; d < nd; ++d) {
    int64_t L = x.size(lead + d), o = outSizes[lead + d];
    taps.push_back(isAdaptive(kind)
                       ? adaptiveTaps(L, o)
                       : windowTaps(L, o, c.kernel[d], c.stride[d], c.padding[d], c.dilation[d]));
  }
  std::array<Taps, 3> t = liftTaps(std::move(taps));
  bool includePad = kind == PoolKind::Avg && attrBool(op, "count_include_pad");
  int64_t divisor = kind == PoolKind::Avg && hasAttrValue(op, "divisor_override")
                        ? attrInt(op, "divisor_override")
                        : 0;
  std::vector<int64_t> indices;
  auto run = [&](auto zero) {
    using T = decltype(zero);
    std::vector<T> X = load<T>(x);
    std::vector<T> y = isMax(kind) ? maxPool(X, planes, t, withIndices ? &indices : nullptr)
                                   : avgPool(X, planes, t, includePad, divisor);
    return store<T>(y, x.dtype(), outSizes);
  };
  std::vector<RtValue> r = {
      inLayout(isFloating(x.dtype()) ? run(double{}) : run(int64_t{}), nd, last)};
  if (withIndices)
    r.emplace_back(inLayout(store<int64_t>(indices, DType::I64, outSizes), nd, last));
  return r;
}

// ---- max pooling's gradient ----
// max_pool{1,2,3}d_backward(grad_output, input): the gradient of max_pool's input, each window's
// gradient added at its argmax (found again from the input: no indices are saved).

/// The input's shape, with grad_output checked against max_pool's output shape for it.
Shape maxPoolBackwardShape(const std::string &op, size_t nd, const PoolConfig &c, const Shape &x,
                           const Shape &gy) {
  if (x.size() != nd + 2)
    inferFail(op + ": input must be batched [N, C, spatial...], got shape " + shapeStr(x));
  Shape out = poolShape(op, nd, PoolKind::Max, c, x);
  std::string msg = op + ": grad_output of shape " + shapeStr(gy) +
                    " is not max_pool's output shape " + shapeStr(out);
  if (gy.size() != out.size()) inferFail(msg);
  for (size_t d = 0; d < gy.size(); ++d)
    checkDimEq(gy[d], out[d], msg);
  return x;
}

std::vector<Type> maxPoolBackwardInfer(const Op &op, size_t nd) {
  const Type &gy = tensorOperand(op, 0), &x = tensorOperand(op, 1);
  if (x.dtype() != DType::F32 && x.dtype() != DType::F64)
    inferFail(op.name() + ": input must be f32 or f64");
  requireSameDType(op.name(), "grad_output", gy, "input", x);
  maxPoolBackwardShape(op.name(), nd, poolConfig(op, nd, PoolKind::Max), x.shape(), gy.shape());
  return {x};
}

std::vector<RtValue> maxPoolBackwardKernel(const Op &op, std::span<const RtValue> in) {
  // The reference kernel: the units one after the other.
  return {maxPoolBackwardDx(
      maxPoolGradAttrs(op), in[0].tensor(), in[1].tensor(), Tensor::empty, 1,
      [](int64_t units, const std::function<void(int64_t, int64_t)> &fn) { fn(0, units); })};
}

// ---- rows ----

std::vector<AttrSpec> ints(std::initializer_list<std::pair<const char *, Attr::Ints>> specs) {
  std::vector<AttrSpec> out;
  for (auto &[n, v] : specs)
    out.push_back({.name = n, .kind = AttrKind::Ints, .defaultValue = Attr(v)});
  return out;
}

const char *kLayoutDoc = " layout \"nhwc\" takes and returns channels-last tensors.";

AttrSpec layoutAttr() {
  return {.name = "layout", .kind = AttrKind::Str, .defaultValue = Attr("nchw")};
}

void addConvRows(OpRegistry &r, size_t nd) {
  std::string d = std::to_string(nd) + "d";
  std::vector<OperandSpec> operands = {{"input"}, {"weight"}, {.name = "bias", .optional = true}};
  std::vector<AttrSpec> fwd = ints({{"stride", {1}}, {"padding", {0}}, {"dilation", {1}}});
  fwd.push_back({.name = "groups", .kind = AttrKind::Int, .defaultValue = Attr(1)});
  fwd.push_back({.name = "padding_mode", .kind = AttrKind::Str, .defaultValue = Attr("")});
  fwd.push_back(layoutAttr());
  r.add(
      {.name = "conv" + d,
       .summary = "F.conv" + d +
                  ": input [N,Cin,...] or unbatched, weight [Cout,Cin/groups,k...], "
                  "bias [Cout]; stride/padding/dilation take 1 or " +
                  std::to_string(nd) +
                  " values. padding_mode is F.conv's string padding: \"\" (use padding), \"same\" "
                  "(stride 1; odd total padding goes right) or \"valid\" (no padding). One "
                  "non-bool dtype; integers wrap." +
                  kLayoutDoc,
       .operands = operands,
       .attrs = fwd,
       .infer = [nd](const Op &op) { return convInfer(op, nd, false); },
       .kernel = [nd](const Op &op,
                      std::span<const RtValue> in) { return convKernel(op, in, nd, false); }});
  std::vector<AttrSpec> tr =
      ints({{"stride", {1}}, {"padding", {0}}, {"output_padding", {0}}, {"dilation", {1}}});
  tr.push_back({.name = "groups", .kind = AttrKind::Int, .defaultValue = Attr(1)});
  tr.push_back(layoutAttr());
  r.add({.name = "conv_transpose" + d,
         .summary = "F.conv_transpose" + d +
                    ": weight [Cin,Cout/groups,k...]; output size "
                    "(L-1)*stride - 2*padding + dilation*(k-1) + output_padding + 1, "
                    "output_padding < stride or dilation." +
                    kLayoutDoc,
         .operands = operands,
         .attrs = tr,
         .infer = [nd](const Op &op) { return convInfer(op, nd, true); },
         .kernel = [nd](const Op &op,
                        std::span<const RtValue> in) { return convKernel(op, in, nd, true); }});
}

void addConvWeightRow(OpRegistry &r, size_t nd) {
  std::string d = std::to_string(nd) + "d";
  std::vector<AttrSpec> attrs = {{.name = "weight_size", .kind = AttrKind::Ints}};
  for (AttrSpec &a : ints({{"stride", {1}}, {"padding", {0}}, {"dilation", {1}}}))
    attrs.push_back(a);
  attrs.push_back({.name = "groups", .kind = AttrKind::Int, .defaultValue = Attr(1)});
  attrs.push_back({.name = "padding_mode", .kind = AttrKind::Str, .defaultValue = Attr("")});
  r.add({.name = "conv" + d + "_weight",
         .summary = "torch.nn.grad.conv" + d + "_weight: the gradient of conv" + d +
                    "'s weight [Cout, Cin/groups, k...] (weight_size) for its input [N, Cin, "
                    "...] and the gradient of its output [N, Cout, ...]; stride, padding, "
                    "dilation, groups and padding_mode as conv" +
                    d + "'s (channels-first, batched). One non-bool dtype; integers wrap.",
         .operands = {{"input"}, {"grad_output"}},
         .attrs = attrs,
         .infer = [nd](const Op &op) { return convWeightInfer(op, nd); },
         .kernel = [nd](const Op &op,
                        std::span<const RtValue> in) { return convWeightKernel(op, in, nd); }});
}

void addPoolRow(OpRegistry &r, size_t nd, PoolKind kind, bool withIndices, std::string name,
                std::string summary) {
  std::vector<AttrSpec> attrs;
  if (isAdaptive(kind)) {
    attrs = {{.name = "output_size", .kind = AttrKind::Ints}};
  } else {
    attrs = {{.name = "kernel_size", .kind = AttrKind::Ints}};
    for (AttrSpec &a : ints({{"stride", {}}, {"padding", {0}}}))
      attrs.push_back(a);
    if (kind == PoolKind::Max) attrs.push_back(ints({{"dilation", {1}}})[0]);
    attrs.push_back({.name = "ceil_mode", .kind = AttrKind::Bool, .defaultValue = Attr(false)});
    if (kind == PoolKind::Avg) {
      attrs.push_back(
          {.name = "count_include_pad", .kind = AttrKind::Bool, .defaultValue = Attr(true)});
      attrs.push_back({.name = "divisor_override", .kind = AttrKind::Int, .optional = true});
    }
  }
  attrs.push_back(layoutAttr());
  r.add({.name = name,
         .summary = summary + kLayoutDoc,
         .operands = {{"input"}},
         .attrs = attrs,
         .infer = [=](const Op &op) { return poolInfer(op, nd, kind, withIndices); },
         .kernel =
             [=](const Op &op, std::span<const RtValue> in) {
               return poolKernel(op, in, nd, kind, withIndices);
             }});
}

void addPoolRows(OpRegistry &r, size_t nd) {
  std::string d = std::to_string(nd) + "d";
  const std::string window = " kernel_size/stride/padding take 1 or " + std::to_string(nd) +
                             " values; stride [] means kernel_size; padding <= kernel/2.";
  const std::string idx = " Indices (i64) index the flattened spatial dims of each plane.";
  for (bool wi : {false, true}) {
    std::string sfx = wi ? "_with_indices" : "";
    addPoolRow(r, nd, PoolKind::Max, wi, "max_pool" + d + sfx,
               "F.max_pool" + d + (wi ? " with return_indices (result, indices)." : ".") + window +
                   " ceil_mode drops a last window starting in the right padding. NaN "
                   "propagates. Any non-bool dtype." +
                   (wi ? idx : ""));
    addPoolRow(r, nd, PoolKind::AdaptiveMax, wi, "adaptive_max_pool" + d + sfx,
               "F.adaptive_max_pool" + d + (wi ? " with return_indices (result, indices)" : "") +
                   ": windows [floor(i*L/out), ceil((i+1)*L/out)); output_size -1 keeps the input "
                   "size. Any non-bool dtype." +
                   (wi ? idx : ""));
  }
  addPoolRow(r, nd, PoolKind::Avg, false, "avg_pool" + d,
             "F.avg_pool" + d + "." + window +
                 " Divisor: divisor_override if given, else the window size (count_include_pad) "
                 "or its in-bounds part. Integer dtypes divide truncating toward zero.");
  addPoolRow(r, nd, PoolKind::AdaptiveAvg, false, "adaptive_avg_pool" + d,
             "F.adaptive_avg_pool" + d +
                 ": mean over windows [floor(i*L/out), ceil((i+1)*L/out)); "
                 "output_size -1 keeps the input size. Floating dtypes.");
}

void addMaxPoolBackwardRow(OpRegistry &r, size_t nd) {
  std::string d = std::to_string(nd) + "d";
  std::vector<AttrSpec> attrs = {{.name = "kernel_size", .kind = AttrKind::Ints}};
  for (AttrSpec &a : ints({{"stride", {}}, {"padding", {0}}, {"dilation", {1}}}))
    attrs.push_back(a);
  attrs.push_back({.name = "ceil_mode", .kind = AttrKind::Bool, .defaultValue = Attr(false)});
  r.add({.name = "max_pool" + d + "_backward",
         .summary = "The gradient of max_pool" + d +
                    "'s input [N, C, ...] (f32 or f64, channels-first) for its output's "
                    "gradient grad_output: each window's gradient added at the window's first "
                    "maximum (a later NaN moves it), as PyTorch's backward; window attributes "
                    "as max_pool" +
                    d + "'s.",
         .operands = {{"grad_output"}, {"input"}},
         .attrs = attrs,
         .infer = [nd](const Op &op) { return maxPoolBackwardInfer(op, nd); },
         .kernel = maxPoolBackwardKernel});
}

} // namespace

namespace ops::nn {

/// Strides of a [N, C, spatial...] tensor, lifted to three spatial dims.
static PlaneStrides planeStrides(const Tensor &t, size_t nd) {
  PlaneStrides s{.batch = t.strides()[0], .channel = t.strides()[1]};
  for (size_t d = 0; d < nd; ++d)
    s.spatial[3 - nd + d] = t.strides()[2 + d];
  return s;
}

MaxPoolGradAttrs maxPoolGradAttrs(const Op &op) {
  const size_t nd = static_cast<size_t>(op.name()[8] - '0'); // max_pool{1,2,3}d_backward
  return {.op = op.name(), .nd = nd, .window = poolConfig(op, nd, PoolKind::Max)};
}

Tensor maxPoolBackwardDx(const MaxPoolGradAttrs &a, const Tensor &gy, const Tensor &x,
                         const std::function<Tensor(DType, std::vector<int64_t>)> &allocate,
                         int64_t parts, const UnitRunner &run) {
  const size_t nd = a.nd;
  const PoolConfig &c = a.window;
  atRuntime(
      [&] { return maxPoolBackwardShape(a.op, nd, c, shapeOf(x.sizes()), shapeOf(gy.sizes())); });
  const std::vector<int64_t> &xs = x.sizes(), &os = gy.sizes();
  std::vector<Taps> taps;
  for (size_t d = 0; d < nd; ++d)
    taps.push_back(
        windowTaps(xs[2 + d], os[2 + d], c.kernel[d], c.stride[d], c.padding[d], c.dilation[d]));
  // dx in x's memory order: a channels-last x (a conv net's activations) gets a channels-last
  // dx, so both are read and written channels innermost.
  const bool last = x.strides()[1] == 1 && xs[1] > 1;
  Tensor dx = allocate(x.dtype(), last ? permuted(xs, channelPerm(xs.size(), nd, true)) : xs);
  if (last) dx = channelView(dx, nd, false);
  MaxPoolGradPlan plan{.taps = liftTaps(std::move(taps)),
                       .xs = planeStrides(x, nd),
                       .gs = planeStrides(gy, nd),
                       .dxs = planeStrides(dx, nd),
                       .batch = xs[0],
                       .channels = xs[1]};
  plan.channelBlock = channelBlockFor(plan.batch, plan.channels, parts);
  if (plan.batch == 0 || plan.channels == 0) return dx;
  run(plan.units(), [&](int64_t begin, int64_t end) {
    if (x.dtype() == DType::F32)
      maxPoolBackward(reinterpret_cast<const float *>(x.data()),
                      reinterpret_cast<const float *>(gy.data()),
                      reinterpret_cast<float *>(dx.data()), plan, begin, end);
    else
      maxPoolBackward(reinterpret_cast<const double *>(x.data()),
                      reinterpret_cast<const double *>(gy.data()),
                      reinterpret_cast<double *>(dx.data()), plan, begin, end);
  });
  return dx;
}

} // namespace ops::nn

void registerConvPoolOps(OpRegistry &r) {
  for (size_t nd = 1; nd <= 3; ++nd) {
    addConvRows(r, nd);
    addConvWeightRow(r, nd);
    addPoolRows(r, nd);
    addMaxPoolBackwardRow(r, nd);
  }
  registerResampleOps(r);
}

} // namespace xjit
