// F.interpolate's nearest / nearest-exact / (bi,tri)linear / bicubic modes as IR ops over static
// spatial sizes. Nearest modes: per spatial dim the source indices are computed at capture exactly
// as ATen's CPU kernels compute them (aten/src/ATen/native/UpSample.h: nearest_idx), then applied
// as an integer-factor broadcast (expand + reshape) or a gather of a constant index; their
// gradients follow from those ops'. Linear modes: ATen's op itself (upsample_linear1d,
// upsample_bilinear2d, upsample_trilinear3d with output_size, align_corners and the scales
// ATen is given), a one-pass native kernel with a native gradient (src/ir/ops/resample.cpp).
// Bicubic (2-d, no antialias): per spatial dim a constant [out, in] matrix of ATen's taps and
// weights, applied by matmul (a gradient for free; DINOv2's and ViT's position embeddings).
#include "torch_ops.h"

#include "analyzer.h"
#include "xjit/ir/sym_attr.h"

#include <cmath>

namespace xjit::frontend {

namespace {

enum class Mode { Nearest, NearestExact, Linear, Cubic };

/// ATen's compute_scales_value: 1/scale_factor where the caller gave one, else in/out; in the
/// kernel's precision T (float for nearest).
template <typename T> T scaleValue(std::optional<double> scale, int64_t in, int64_t out) {
  return scale && *scale > 0. ? static_cast<T>(1.0 / *scale) : static_cast<T>(in) / out;
}

/// One spatial dim's nearest source index per output position.
std::vector<int64_t> nearestPlan(Mode mode, int64_t in, int64_t out, std::optional<double> scale) {
  std::vector<int64_t> p;
  const float s = scaleValue<float>(scale, in, out);
  for (int64_t d = 0; d < out; ++d) {
    int64_t src;
    if (mode == Mode::Nearest) {
      // nearest_idx: exact shortcuts for equal and doubled sizes, else floorf(d * scale).
      src = out == in       ? d
            : out == 2 * in ? d >> 1
                            : static_cast<int64_t>(std::floor(static_cast<float>(d) * s));
    } else {
      // nearest_neighbor_exact_compute_source_index: (d + 0.5) in double, floorf of its float.
      src = static_cast<int64_t>(std::floor(static_cast<float>((d + 0.5) * s)));
    }
    p.push_back(std::min(src, in - 1));
  }
  return p;
}

/// A 1-d constant tensor of the values, as torch.tensor(values, dtype=dtype) makes it.
template <typename V>
VarPtr constant1d(Analyzer &a, const std::vector<V> &values, const char *dtype) {
  PyRef list = check(PyList_New(static_cast<Py_ssize_t>(values.size())), "list");
  for (size_t i = 0; i < values.size(); ++i) {
    PyObject *x = std::is_integral_v<V> ? PyLong_FromLongLong(static_cast<long long>(values[i]))
                                        : PyFloat_FromDouble(static_cast<double>(values[i]));
    PyList_SET_ITEM(list.get(), static_cast<Py_ssize_t>(i), check(x, "item").release());
  }
  PyRef fn = check(PyObject_GetAttrString(torchModule(), "tensor"), "torch.tensor");
  PyRef dt = check(PyObject_GetAttrString(torchModule(), dtype), "dtype");
  PyRef args = check(PyTuple_Pack(1, list.get()), "args");
  PyRef kw = check(Py_BuildValue("{sO}", "dtype", dt.get()), "kw");
  PyRef t = check(PyObject_Call(fn.get(), args.get(), kw.get()), "torch.tensor");
  return a.constantTensor(t.get());
}

/// One spatial dim of a bicubic resampling as a dense [out, in] matrix (row o: output o's four
/// taps, indices clamped to the edge, so a row may add weights into one column): ATen's CPU
/// kernel's indices and weights (UpSampleKernel.cpp compute_indices_weights_cubic: the source
/// index of area_pixel_compute_source_index with cubic = true, guard_index_and_lambda and
/// get_cubic_upsample_coefficients with A = -0.75), computed in the kernel's opmath type T.
template <typename T>
std::vector<double> cubicMatrix(int64_t in, int64_t out, bool alignCorners,
                                std::optional<double> scale) {
  T s;
  if (alignCorners)
    s = out > 1 ? static_cast<T>(in - 1) / static_cast<T>(out - 1) : T(0);
  else
    s = scaleValue<T>(scale, in, out);
  const T A = T(-0.75);
  auto near = [&](T x) { return ((A + 2) * x - (A + 3)) * x * x + 1; };      // |x| <= 1
  auto far = [&](T x) { return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A; }; // 1 < |x| < 2
  std::vector<double> m(static_cast<size_t>(out * in), 0.0);
  for (int64_t o = 0; o < out; ++o) {
    const T real = alignCorners ? s * static_cast<T>(o) : s * (static_cast<T>(o) + T(0.5)) - T(0.5);
    const int64_t i = std::min(static_cast<int64_t>(std::floor(real)), in - 1);
    const T t = std::min(std::max(real - static_cast<T>(i), T(0)), T(1));
    const T w[4] = {far(t + 1), near(t), near(1 - t), far(2 - t)};
    for (int64_t k = 0; k < 4; ++k) {
      const int64_t col = std::max<int64_t>(std::min(i - 1 + k, in - 1), 0);
      m[static_cast<size_t>(o * in + col)] += static_cast<double>(w[k]);
    }
  }
  return m;
}

/// x resampled along `dim` by the [out, in] matrix `m`: a matmul (its gradient one too), with
/// the resampled dim moved last and back.
VarPtr resampleByMatrix(Analyzer &a, const VarPtr &x, int64_t dim, const std::vector<double> &m,
                        int64_t in, int64_t out, const char *dtype) {
  const int64_t rank = as<TensorVar>(x)->type().rank();
  // m^T [in, out]: x (dim last) @ m^T.
  std::vector<double> mt(m.size());
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i)
      mt[static_cast<size_t>(i * out + o)] = m[static_cast<size_t>(o * in + i)];
  VarPtr w = a.emit1("reshape", {constant1d(a, mt, dtype)},
                     {{"shape", Attr(std::vector<int64_t>{in, out})}});
  VarPtr moved = dim == rank - 1
                     ? x
                     : a.emit1("transpose", {x}, {{"dim0", Attr(dim)}, {"dim1", Attr(rank - 1)}});
  VarPtr r = a.emit1("matmul", {moved, w});
  return dim == rank - 1
             ? r
             : a.emit1("transpose", {r}, {{"dim0", Attr(dim)}, {"dim1", Attr(rank - 1)}});
}

/// Whether the indices keep every element in place.
bool isIdentity(const std::vector<int64_t> &idx, int64_t in) {
  const auto out = static_cast<int64_t>(idx.size());
  bool identity = out == in;
  for (int64_t d = 0; identity && d < out; ++d)
    identity = idx[static_cast<size_t>(d)] == d;
  return identity;
}

/// Whether the indices repeat each element k times in order (i -> i / k).
bool isRepeat(const std::vector<int64_t> &idx, int64_t in) {
  const auto out = static_cast<int64_t>(idx.size());
  if (out % in != 0) return false;
  const int64_t k = out / in;
  bool repeat = true;
  for (int64_t d = 0; repeat && d < out; ++d)
    repeat = idx[static_cast<size_t>(d)] == d / k;
  return repeat;
}

/// x's elements along `dim` at the indices: an integer-factor repeat (i -> i / k) as
/// unsqueeze + expand + reshape; otherwise a gather.
VarPtr gather(Analyzer &a, const VarPtr &x, int64_t dim, const std::vector<int64_t> &idx,
              int64_t in) {
  const auto out = static_cast<int64_t>(idx.size());
  if (isIdentity(idx, in)) return x;
  if (isRepeat(idx, in)) {
    Shape shape = as<TensorVar>(x)->type().shape();
    VarPtr u = a.emit1("unsqueeze", {x}, {{"dim", Attr(dim + 1)}});
    std::vector<int64_t> expand(shape.size() + 1, -1);
    expand[static_cast<size_t>(dim + 1)] = out / in;
    VarPtr e = a.emit1("expand", {u}, {{"shape", Attr(expand)}});
    shape[static_cast<size_t>(dim)] = DimExpr(out);
    return a.emit1("reshape", {e}, {{"shape", makeSizeAttr(shape)}});
  }
  // gather with the index broadcast to the output's shape: the backend's elementwise gather
  // kernel (index_select is a reference kernel: 6.2 against 2.4 ms on a [1,64,64,64] 2x
  // upsampling, one thread).
  Shape shape = as<TensorVar>(x)->type().shape();
  std::vector<int64_t> column(shape.size(), 1);
  column[static_cast<size_t>(dim)] = out;
  VarPtr index = a.emit1("reshape", {constant1d(a, idx, "int64")}, {{"shape", Attr(column)}});
  shape[static_cast<size_t>(dim)] = DimExpr(out);
  index = a.emit1("expand", {index}, {{"shape", makeSizeAttr(shape)}});
  return a.emit1("gather", {x, index}, {{"dim", Attr(dim)}});
}

/// Per-dim floats of an int-or-sequence argument (size / scale_factor), `n` of them.
std::optional<std::vector<double>> numbers(Analyzer &a, const VarPtr &v, size_t n) {
  std::vector<VarPtr> items;
  if (a.asNumber(v))
    items.assign(n, v);
  else if (v->kind == VarKind::Tuple || v->kind == VarKind::List || v->kind == VarKind::Object)
    items = a.sequenceItems(v, "interpolate size");
  if (items.size() != n) return std::nullopt;
  std::vector<double> out;
  for (const VarPtr &i : items) {
    std::optional<double> x = a.asNumber(i);
    if (!x) return std::nullopt;
    out.push_back(*x);
  }
  return out;
}

/// Whether `size` is an int or a sequence of ints (F.interpolate's check: floats raise).
bool intSizes(Analyzer &a, const VarPtr &v) {
  PyRef o = a.asPython(v);
  if (!o) return false;
  if (!PyTuple_Check(o.get()) && !PyList_Check(o.get())) return PyLong_Check(o.get());
  PyRef items = check(PySequence_Fast(o.get(), "size"), "size");
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(items.get()); ++i)
    if (!PyLong_Check(PySequence_Fast_GET_ITEM(items.get(), i))) return false;
  return true;
}

} // namespace

VarPtr lowerInterpolate(Analyzer &a, BoundArgs &b, const TorchRow &) {
  auto *x = as<TensorVar>(b.at("input"));
  if (!x || x->type().rank() < 3 || x->type().rank() > 5 || a.truthy(b.at("antialias")))
    return nullptr;
  const Type &ty = x->type();
  const int64_t rank = ty.rank(), spatial = rank - 2;
  PyRef modeObj = a.asPython(b.at("mode"));
  if (!modeObj || !PyUnicode_Check(modeObj.get())) return nullptr;
  const std::string modeName = utf8(modeObj.get());
  static const char *const linearModes[] = {"", "linear", "bilinear", "trilinear"};
  Mode mode;
  if (modeName == "nearest")
    mode = Mode::Nearest;
  else if (modeName == "nearest-exact")
    mode = Mode::NearestExact;
  else if (modeName == linearModes[spatial])
    mode = Mode::Linear;
  else if (modeName == "bicubic" && spatial == 2)
    mode = Mode::Cubic;
  else
    return nullptr; // area, a linear mode of another rank: PyTorch's op (or its error)
  // The upsample_*linear* ops take f32 and f64 (ATen computes f16/bf16 in float); the bicubic
  // matrices are made in the input's dtype.
  if ((mode == Mode::Linear || mode == Mode::Cubic) && ty.dtype() != DType::F32 &&
      ty.dtype() != DType::F64)
    return nullptr;
  bool alignCorners = false;
  if (!isNoneVar(b.at("align_corners"))) {
    if (mode != Mode::Linear && mode != Mode::Cubic) return nullptr; // PyTorch raises
    std::optional<int64_t> ac = a.asInt(b.at("align_corners"));
    if (!ac) return nullptr;
    alignCorners = *ac != 0;
  }
  std::vector<int64_t> in;
  for (int64_t d = 2; d < rank; ++d) {
    const DimExpr &s = ty.shape()[static_cast<size_t>(d)];
    if (!s.isStatic()) return nullptr;
    in.push_back(s.value());
  }
  // F.interpolate's argument handling: an output size, or scale factors (kept for the kernel
  // unless recompute_scale_factor).
  const bool sized = !isNoneVar(b.at("size")), scaled = !isNoneVar(b.at("scale_factor"));
  if (sized == scaled) return nullptr;
  if (sized && !intSizes(a, b.at("size"))) return nullptr; // F.interpolate raises TypeError
  std::optional<std::vector<double>> given =
      numbers(a, b.at(sized ? "size" : "scale_factor"), static_cast<size_t>(spatial));
  if (!given) return nullptr;
  const bool recompute = a.truthy(b.at("recompute_scale_factor"));
  if (sized && recompute) return nullptr;
  std::vector<int64_t> out;
  std::vector<std::optional<double>> scales;
  for (int64_t i = 0; i < spatial; ++i) {
    const double g = (*given)[static_cast<size_t>(i)];
    if (!std::isfinite(g) || g <= 0) return nullptr; // PyTorch's op raises
    out.push_back(sized ? static_cast<int64_t>(g)
                        : static_cast<int64_t>(std::floor(static_cast<double>(in[i]) * g)));
    scales.push_back(sized || recompute ? std::nullopt : std::optional<double>(g));
    if (out.back() < 1 || in[i] < 1) return nullptr;
  }

  if (mode == Mode::Linear) {
    // (Equal sizes too: ATen's result is a fresh tensor, which the op's identity taps copy.)
    std::vector<double> scaleAttr;
    for (const std::optional<double> &s : scales)
      scaleAttr.push_back(s.value_or(0.0));
    static const char *const ops[] = {"", "upsample_linear1d", "upsample_bilinear2d",
                                      "upsample_trilinear3d"};
    return a.emit1(ops[spatial], {b.at("input")},
                   {{"output_size", Attr(out)},
                    {"align_corners", Attr(alignCorners)},
                    {"scales", Attr(scaleAttr)}});
  }
  if (mode == Mode::Cubic) {
    // Separable: each spatial dim's taps as a constant matrix, H's then W's (ATen sums W's
    // taps first, then H's: the same terms, rounded otherwise, about 1e-7 relative).
    // (No copy shortcut for equal sizes: eager resamples by a given scale factor.)
    const bool f64 = ty.dtype() == DType::F64;
    VarPtr r = b.at("input");
    for (size_t s = 0; s < 2; ++s) {
      std::vector<double> m = f64 ? cubicMatrix<double>(in[s], out[s], alignCorners, scales[s])
                                  : cubicMatrix<float>(in[s], out[s], alignCorners, scales[s]);
      bool identity = in[s] == out[s];
      for (int64_t o = 0; identity && o < out[s]; ++o)
        for (int64_t i = 0; identity && i < in[s]; ++i)
          identity = m[static_cast<size_t>(o * in[s] + i)] == (o == i ? 1.0 : 0.0);
      if (identity) continue;
      r = resampleByMatrix(a, r, static_cast<int64_t>(s) + 2, m, in[s], out[s],
                           f64 ? "float64" : "float32");
    }
    // Identity taps: a copy (below).
    return r == b.at("input") ? a.emit1("clone", {r}) : r;
  }
  // A gather's gradient is a scatter_add, a reference kernel: where the input needs a
  // gradient, only identity and integer-repeat maps (expand + reshape, UNet's 2x nearest) are
  // lowered; the rest stays PyTorch's op.
  // ATen's result is a fresh tensor: a map that is the identity throughout is a `clone` (not
  // the input itself), and a repeat of a size-1 dim stays PyTorch's op (expand + reshape would
  // be a view of the input with stride 0: sweep of output strides, session 33, `interpolate`
  // of a [3, 4, 1] tensor came back with strides (4, 1, 0), a write to it reaching the input).
  // (A clone keeps a permuted input's order where ATen's copy is contiguous unless the input
  // is channels-last: strides only, for an identity resample of such an input.)
  std::vector<std::vector<int64_t>> plans;
  bool identity = true;
  for (size_t s = 0; s < static_cast<size_t>(spatial); ++s) {
    plans.push_back(nearestPlan(mode, in[s], out[s], scales[s]));
    const bool same = isIdentity(plans.back(), in[s]);
    identity = identity && same;
    if (!same && in[s] == 1) return nullptr;
    if (a.gradEnabled() && x->requiresGrad && !same && !isRepeat(plans.back(), in[s]))
      return nullptr;
  }
  if (identity) return a.emit1("clone", {b.at("input")});
  VarPtr r = b.at("input");
  for (int64_t i = 0; i < spatial; ++i)
    r = gather(a, r, i + 2, plans[static_cast<size_t>(i)], in[static_cast<size_t>(i)]);
  return r;
}

} // namespace xjit::frontend
