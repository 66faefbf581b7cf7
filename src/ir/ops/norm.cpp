// Normalizations: batch_norm (+ batch_norm_with_update, the functional running-stat update),
// instance_norm, layer_norm, group_norm, rms_norm and local_response_norm. Statistics are
// computed in double over contiguous buffers (biased variance for normalizing, unbiased for
// running-stat updates, as PyTorch); results have the input's dtype.
#include "nn_util.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace xjit {
namespace {

using namespace ops;
using namespace ops::nn;

// ---- operand checks ----

/// A parameter (weight, bias, running stat) may have the input's dtype, or f32 for f16/bf16
/// inputs (PyTorch's CPU mixed-dtype rule).
void checkParamDType(const Op &op, const Type &x, const Type &p, std::string_view what) {
  bool mixedOk = p.dtype() == DType::F32 && (x.dtype() == DType::F16 || x.dtype() == DType::BF16);
  if (p.dtype() != x.dtype() && !mixedOk)
    inferFail(op.name() + ": " + std::string(what) + " must have the input's dtype " +
              std::string(dtypeName(x.dtype())) +
              (x.dtype() == DType::F16 || x.dtype() == DType::BF16 ? " or f32" : "") + ", got " +
              p.str());
}

/// Optional operand i, if present, must be a tensor of `shape` with an allowed dtype.
const Type *paramOperand(const Op &op, size_t i, const Type &x, const Shape &shape,
                         bool anyFloat = false) {
  const Type *p = optionalTensor(op, i);
  if (!p)
    return nullptr;
  const std::string &what = op.def().operands[i].name;
  if (anyFloat)
    requireFloating(op.name(), what, *p);
  else
    checkParamDType(op, x, *p, what);
  std::string msg = op.name() + ": " + what + " must have shape " + shapeStr(shape) + ", got " +
                    shapeStr(p->shape());
  if (p->shape().size() != shape.size())
    inferFail(msg);
  for (size_t d = 0; d < shape.size(); ++d)
    checkDimEq(p->shape()[d], shape[d], msg);
  return p;
}

const Type &normInput(const Op &op, int64_t minRank) {
  const Type &x = tensorOperand(op, 0);
  requireFloating(op.name(), "input", x);
  if (x.rank() < minRank)
    inferFail(op.name() + ": input must have at least " + std::to_string(minRank) + " dims, got " +
              x.str());
  return x;
}

/// Optional per-channel vector of a kernel, or empty.
std::vector<double> optionalValues(std::span<const RtValue> in, size_t i) {
  return present(in, i) ? load<double>(in[i].tensor()) : std::vector<double>{};
}

/// Kernels re-check parameter sizes: inference may have assumed a symbolic dim equal to them.
void checkParamSizes(const Op &op, std::span<const RtValue> in, std::initializer_list<size_t> idx,
                     int64_t n) {
  for (size_t i : idx)
    if (present(in, i) && in[i].tensor().numel() != n)
      kernelFail(op.name() + ": " + op.def().operands[i].name + " has " +
                 std::to_string(in[i].tensor().numel()) + " elements at run time, expected " +
                 std::to_string(n));
}

// ---- statistics over a [outer, C, inner] view of x ----

struct Stats {
  std::vector<double> mean, rstd; // per statistic group
};

/// y[o, c, i] = (x - mean[s]) * rstd[s] * w[c] + b[c] with s = stat(o, c).
template <class StatIndex>
std::vector<double> normalize(const std::vector<double> &x, int64_t outer, int64_t C, int64_t inner,
                              const Stats &st, const std::vector<double> &w,
                              const std::vector<double> &b, StatIndex stat) {
  std::vector<double> y(x.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t c = 0; c < C; ++c) {
      int64_t s = stat(o, c);
      double scale = st.rstd[s] * (w.empty() ? 1.0 : w[c]);
      double shift = (b.empty() ? 0.0 : b[c]) - st.mean[s] * scale;
      const double *xr = &x[(o * C + c) * inner];
      double *yr = &y[(o * C + c) * inner];
      for (int64_t i = 0; i < inner; ++i)
        yr[i] = xr[i] * scale + shift;
    }
  return y;
}

/// Mean and biased variance of each of `groups` contiguous runs of `len` values.
void runStats(const std::vector<double> &x, int64_t groups, int64_t len, std::vector<double> &mean,
              std::vector<double> &var) {
  mean.assign(static_cast<size_t>(groups), 0.0);
  var.assign(static_cast<size_t>(groups), 0.0);
  for (int64_t g = 0; g < groups; ++g) {
    const double *p = &x[g * len];
    double s = 0, ss = 0;
    for (int64_t i = 0; i < len; ++i)
      s += p[i];
    double m = len ? s / len : std::numeric_limits<double>::quiet_NaN();
    for (int64_t i = 0; i < len; ++i)
      ss += (p[i] - m) * (p[i] - m);
    mean[g] = m;
    var[g] = len ? ss / len : std::numeric_limits<double>::quiet_NaN();
  }
}

Stats toStats(std::vector<double> mean, const std::vector<double> &var, double eps) {
  Stats st{std::move(mean), {}};
  for (double v : var)
    st.rstd.push_back(1.0 / std::sqrt(v + eps));
  return st;
}

// ---- batch_norm / instance_norm ----

/// Operands: input, weight?, bias?, running_mean?, running_var?.
std::vector<Type> channelNormInfer(const Op &op, bool needRunning, size_t results) {
  const Type &x = normInput(op, 2);
  Shape c = {x.shape()[1]};
  for (size_t i = 1; i <= 2; ++i)
    paramOperand(op, i, x, c);
  const Type *rm = paramOperand(op, 3, x, c), *rv = paramOperand(op, 4, x, c);
  if (needRunning && (!rm || !rv))
    inferFail(op.name() + ": running_mean and running_var are required" +
              (op.name() == "batch_norm_with_update" ? std::string()
                                                     : " when not using batch statistics"));
  attrFloat(op, "eps");
  attrFloat(op, "momentum");
  std::vector<Type> r = {x};
  if (results == 3)
    r.insert(r.end(), {*rm, *rv});
  return r;
}

/// Per-channel batch statistics of x [N, C, inner]: gathered channel-major so runStats applies.
void channelStats(const std::vector<double> &x, int64_t N, int64_t C, int64_t inner,
                  std::vector<double> &mean, std::vector<double> &var) {
  std::vector<double> byChannel(x.size());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      std::copy_n(&x[(n * C + c) * inner], inner, &byChannel[(c * N + n) * inner]);
  runStats(byChannel, C, N * inner, mean, var);
}

/// batch_norm (results 1) and batch_norm_with_update (results 3).
std::vector<RtValue> batchNormKernel(const Op &op, std::span<const RtValue> in, bool update) {
  const Tensor &xt = in[0].tensor();
  int64_t N = xt.size(0), C = xt.size(1), inner = product(std::span(xt.sizes()).subspan(2));
  checkParamSizes(op, in, {1, 2, 3, 4}, C);
  std::vector<double> x = load<double>(xt), w = optionalValues(in, 1), b = optionalValues(in, 2),
                      rm = optionalValues(in, 3), rv = optionalValues(in, 4);
  bool training = update || attrBool(op, "training");
  double eps = attrFloat(op, "eps"), momentum = attrFloat(op, "momentum");
  std::vector<double> mean = rm, var = rv;
  if (training) {
    if (N * inner == 1)
      kernelFail(op.name() +
                 ": expected more than 1 value per channel when training, got "
                 "input of shape " +
                 dimsStr(xt.sizes()));
    channelStats(x, N, C, inner, mean, var);
  }
  std::vector<double> y = normalize(x, N, C, inner, toStats(mean, var, eps), w, b,
                                    [](int64_t, int64_t c) { return c; });
  std::vector<RtValue> r = {store<double>(y, xt.dtype(), xt.sizes())};
  if (update) {
    // An empty batch leaves the running statistics unchanged, as PyTorch does.
    int64_t n = N * inner;
    for (int64_t c = 0; c < C && n > 0; ++c) {
      rm[c] = (1 - momentum) * rm[c] + momentum * mean[c];
      rv[c] = (1 - momentum) * rv[c] + momentum * var[c] * n / (n - 1);
    }
    r.emplace_back(store<double>(rm, in[3].tensor().dtype(), {C}));
    r.emplace_back(store<double>(rv, in[4].tensor().dtype(), {C}));
  }
  return r;
}

std::vector<RtValue> instanceNormKernel(const Op &op, std::span<const RtValue> in) {
  const Tensor &xt = in[0].tensor();
  int64_t N = xt.size(0), C = xt.size(1), inner = product(std::span(xt.sizes()).subspan(2));
  checkParamSizes(op, in, {1, 2, 3, 4}, C);
  std::vector<double> x = load<double>(xt), w = optionalValues(in, 1), b = optionalValues(in, 2);
  double eps = attrFloat(op, "eps");
  Stats st;
  bool perInstance = attrBool(op, "use_input_stats");
  if (perInstance) {
    if (inner == 1)
      kernelFail(op.name() +
                 ": expected more than 1 spatial element when using input stats, "
                 "got input of shape " +
                 dimsStr(xt.sizes()));
    std::vector<double> mean, var;
    runStats(x, N * C, inner, mean, var);
    st = toStats(mean, var, eps);
  } else {
    st = toStats(optionalValues(in, 3), optionalValues(in, 4), eps);
  }
  std::vector<double> y = normalize(
      x, N, C, inner, st, w, b, [&](int64_t n, int64_t c) { return perInstance ? n * C + c : c; });
  return {store<double>(y, xt.dtype(), xt.sizes())};
}

// ---- layer_norm / rms_norm ----

/// normalized_shape must be the trailing dims of the input.
Shape normalizedShape(const Op &op, const Type &x) {
  const std::vector<int64_t> &ns = attrInts(op, "normalized_shape");
  std::string msg = op.name() + ": normalized_shape " + dimsStr(ns) +
                    " must match the trailing dims of the input " + x.str();
  if (static_cast<int64_t>(ns.size()) > x.rank())
    inferFail(msg);
  Shape s;
  for (size_t i = 0; i < ns.size(); ++i) {
    if (ns[i] < 0)
      inferFail(msg);
    checkDimEq(x.shape()[x.rank() - ns.size() + i], ns[i], msg);
    s.push_back(ns[i]);
  }
  return s;
}

std::vector<Type> lastDimsNormInfer(const Op &op, bool rms) {
  const Type &x = normInput(op, 0);
  Shape s = normalizedShape(op, x);
  paramOperand(op, 1, x, s, rms);
  if (!rms)
    paramOperand(op, 2, x, s);
  if (hasAttrValue(op, "eps"))
    attrFloat(op, "eps");
  return {x};
}

/// layer_norm: (x - mean) * rstd * w + b; rms_norm: x * rsqrt(mean(x^2) + eps) * w, over the
/// trailing normalized_shape dims.
std::vector<RtValue> lastDimsNormKernel(const Op &op, std::span<const RtValue> in, bool rms) {
  const Tensor &xt = in[0].tensor();
  const std::vector<int64_t> &ns = attrInts(op, "normalized_shape");
  if (ns.size() > xt.sizes().size() ||
      !std::equal(ns.begin(), ns.end(), xt.sizes().end() - static_cast<ptrdiff_t>(ns.size())))
    kernelFail(op.name() + ": normalized_shape " + dimsStr(ns) +
               " does not match the trailing dims of the input " + dimsStr(xt.sizes()));
  int64_t M = product(ns);
  checkParamSizes(op, in, {1, 2}, M);
  int64_t rows = M ? xt.numel() / M : 0;
  std::vector<double> x = load<double>(xt), w = optionalValues(in, 1),
                      b = rms ? std::vector<double>{} : optionalValues(in, 2);
  // rms_norm's eps=None is the machine epsilon of the compute type (f32 for f16/bf16).
  double eps = hasAttrValue(op, "eps")    ? attrFloat(op, "eps")
               : xt.dtype() == DType::F64 ? std::numeric_limits<double>::epsilon()
                                          : std::numeric_limits<float>::epsilon();
  std::vector<double> mean, var;
  runStats(x, rows, M, mean, var);
  if (rms)
    for (int64_t r = 0; r < rows; ++r) {
      var[r] += mean[r] * mean[r]; // mean of squares
      mean[r] = 0;
    }
  // Each row is one statistic group; the affine parameters index the position in the row.
  Stats st = toStats(mean, var, eps);
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < M; ++i) {
      double v = (x[r * M + i] - st.mean[r]) * st.rstd[r];
      y[r * M + i] = v * (w.empty() ? 1.0 : w[i]) + (b.empty() ? 0.0 : b[i]);
    }
  return {store<double>(y, xt.dtype(), xt.sizes())};
}

// ---- group_norm ----

std::vector<Type> groupNormInfer(const Op &op) {
  const Type &x = normInput(op, 2);
  int64_t g = attrInt(op, "num_groups");
  if (g < 1)
    inferFail("group_norm: num_groups must be positive, got " + std::to_string(g));
  if (auto c = x.shape()[1].staticValue(); c && *c % g != 0)
    inferFail("group_norm: channels (" + std::to_string(*c) +
              ") must be divisible by num_groups=" + std::to_string(g));
  Shape c = {x.shape()[1]};
  paramOperand(op, 1, x, c);
  paramOperand(op, 2, x, c);
  attrFloat(op, "eps");
  return {x};
}

std::vector<RtValue> groupNormKernel(const Op &op, std::span<const RtValue> in) {
  const Tensor &xt = in[0].tensor();
  int64_t N = xt.size(0), C = xt.size(1), inner = product(std::span(xt.sizes()).subspan(2));
  checkParamSizes(op, in, {1, 2}, C);
  int64_t G = attrInt(op, "num_groups");
  if (C % G != 0)
    kernelFail("group_norm: channels (" + std::to_string(C) +
               ") must be divisible by num_groups=" + std::to_string(G));
  std::vector<double> x = load<double>(xt), mean, var;
  // Each (n, group) is a contiguous run of C/G * inner values.
  runStats(x, N * G, C / G * inner, mean, var);
  std::vector<double> y =
      normalize(x, N, C, inner, toStats(mean, var, attrFloat(op, "eps")), optionalValues(in, 1),
                optionalValues(in, 2), [&](int64_t n, int64_t c) { return n * G + c / (C / G); });
  return {store<double>(y, xt.dtype(), xt.sizes())};
}

// ---- local_response_norm ----

/// x / (k + alpha/size * sum of x^2 over channels [c - size/2, c + (size-1)/2])^beta, the
/// zero-padded channel window of PyTorch's avg_pool formulation.
std::vector<RtValue> lrnKernel(const Op &op, std::span<const RtValue> in) {
  const Tensor &xt = in[0].tensor();
  int64_t N = xt.size(0), C = xt.size(1), inner = product(std::span(xt.sizes()).subspan(2));
  int64_t size = attrInt(op, "size");
  double alpha = attrFloat(op, "alpha"), beta = attrFloat(op, "beta"), k = attrFloat(op, "k");
  std::vector<double> x = load<double>(xt), y(x.size());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < inner; ++i) {
        double s = 0;
        for (int64_t c2 = std::max<int64_t>(0, c - size / 2);
             c2 <= std::min<int64_t>(C - 1, c + (size - 1) / 2); ++c2) {
          double v = x[(n * C + c2) * inner + i];
          s += v * v;
        }
        int64_t at = (n * C + c) * inner + i;
        y[at] = x[at] / std::pow(s / static_cast<double>(size) * alpha + k, beta);
      }
  return {store<double>(y, xt.dtype(), xt.sizes())};
}

// ---- rows ----

AttrSpec floatAttr(const char *name, double v) {
  return {.name = name, .kind = AttrKind::Float, .defaultValue = Attr(v)};
}

std::vector<OperandSpec> channelNormOperands(bool runningRequired) {
  return {{"input"},
          {.name = "weight", .optional = true},
          {.name = "bias", .optional = true},
          {.name = "running_mean", .optional = !runningRequired},
          {.name = "running_var", .optional = !runningRequired}};
}

} // namespace

void registerNormOps(OpRegistry &r) {
  r.add({.name = "batch_norm",
         .summary = "F.batch_norm over dim 1 of input [N, C, ...], operands (input, weight?, "
                    "bias?, running_mean?, running_var?). training=false normalizes with the "
                    "running stats (required); training=true with the batch mean and biased "
                    "variance and does NOT update running stats: use batch_norm_with_update for "
                    "that. Parameters have the input dtype (or f32 for f16/bf16 input).",
         .operands = channelNormOperands(false),
         .attrs = {{.name = "training", .kind = AttrKind::Bool, .defaultValue = Attr(false)},
                   floatAttr("momentum", 0.1),
                   floatAttr("eps", 1e-5)},
         .infer = [](const Op &op) { return channelNormInfer(op, !attrBool(op, "training"), 1); },
         .kernel = [](const Op &op,
                      std::span<const RtValue> in) { return batchNormKernel(op, in, false); }});
  r.add({.name = "batch_norm_with_update",
         .summary =
             "Training-mode batch_norm made functional: returns (out, new_running_mean, "
             "new_running_var) with new = (1-momentum)*old + momentum*batch_stat (unbiased "
             "variance), i.e. the values F.batch_norm(training=True) writes into the running "
             "buffers; the frontend stores them back. An empty batch leaves them unchanged.",
         .operands = channelNormOperands(true),
         .attrs = {floatAttr("momentum", 0.1), floatAttr("eps", 1e-5)},
         .infer = [](const Op &op) { return channelNormInfer(op, true, 3); },
         .kernel = [](const Op &op,
                      std::span<const RtValue> in) { return batchNormKernel(op, in, true); }});
  r.add({.name = "instance_norm",
         .summary = "F.instance_norm over input [N, C, ...]: use_input_stats=true normalizes each "
                    "(n, c) plane by its own mean / biased variance (running stats are not "
                    "updated); false uses running_mean/running_var per channel.",
         .operands = channelNormOperands(false),
         .attrs = {{.name = "use_input_stats", .kind = AttrKind::Bool, .defaultValue = Attr(true)},
                   floatAttr("momentum", 0.1),
                   floatAttr("eps", 1e-5)},
         .infer =
             [](const Op &op) { return channelNormInfer(op, !attrBool(op, "use_input_stats"), 1); },
         .kernel = instanceNormKernel});
  r.add({.name = "layer_norm",
         .summary = "F.layer_norm over the trailing normalized_shape dims; weight and bias have "
                    "shape normalized_shape.",
         .operands = {{"input"},
                      {.name = "weight", .optional = true},
                      {.name = "bias", .optional = true}},
         .attrs = {{.name = "normalized_shape", .kind = AttrKind::Ints}, floatAttr("eps", 1e-5)},
         .infer = [](const Op &op) { return lastDimsNormInfer(op, false); },
         .kernel = [](const Op &op,
                      std::span<const RtValue> in) { return lastDimsNormKernel(op, in, false); }});
  r.add({.name = "rms_norm",
         .summary = "F.rms_norm: x * rsqrt(mean(x^2 over normalized_shape) + eps) * weight. eps "
                    "absent = None: the machine epsilon of the compute type (f64: 2^-52, else "
                    "f32's 2^-23, as PyTorch computes f16/bf16 in f32). weight may be any floating "
                    "dtype; the result has the input's.",
         .operands = {{"input"}, {.name = "weight", .optional = true}},
         .attrs = {{.name = "normalized_shape", .kind = AttrKind::Ints},
                   {.name = "eps", .kind = AttrKind::Float, .optional = true}},
         .infer = [](const Op &op) { return lastDimsNormInfer(op, true); },
         .kernel = [](const Op &op,
                      std::span<const RtValue> in) { return lastDimsNormKernel(op, in, true); }});
  r.add({.name = "group_norm",
         .summary = "F.group_norm: input [N, C, ...] split into num_groups channel groups, each "
                    "normalized per sample; weight and bias are per channel [C].",
         .operands = {{"input"},
                      {.name = "weight", .optional = true},
                      {.name = "bias", .optional = true}},
         .attrs = {{.name = "num_groups", .kind = AttrKind::Int}, floatAttr("eps", 1e-5)},
         .infer = groupNormInfer,
         .kernel = groupNormKernel});
  r.add({.name = "local_response_norm",
         .summary =
             "F.local_response_norm over channels (dim 1) of input [N, C, ...] (>= 3 dims): "
             "x / (k + alpha * mean of x^2 over a zero-padded window of `size` channels)^beta.",
         .operands = {{"input"}},
         .attrs = {{.name = "size", .kind = AttrKind::Int},
                   floatAttr("alpha", 1e-4),
                   floatAttr("beta", 0.75),
                   floatAttr("k", 1.0)},
         .infer =
             [](const Op &op) {
               const Type &x = normInput(op, 3);
               if (attrInt(op, "size") < 1)
                 inferFail("local_response_norm: size must be positive, got " +
                           std::to_string(attrInt(op, "size")));
               attrFloat(op, "alpha");
               attrFloat(op, "beta");
               attrFloat(op, "k");
               return std::vector<Type>{x};
             },
         .kernel = lrnKernel});
}

} // namespace xjit
