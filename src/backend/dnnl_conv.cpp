// Convolutions through oneDNN with post-ops: forward conv1d/2d/3d (any groups, dilation,
// padding or padding_mode "same"/"valid") and conv_transpose1d/2d/3d (oneDNN's deconvolution;
// output_padding as extra right padding), channels-first or channels-last `layout`; and the
// weight's gradient conv1d/2d/3d_weight (oneDNN's convolution_backward_weights).
//
// Layouts: a channels-last op hands oneDNN its NHWC buffers directly (oneDNN's NHWC kernels are
// fast); a channels-first op uses oneDNN's 16-channel blocked layout (as PyTorch's ideep does)
// and reorders the input and result, falling back to `any` and then the plain layout when
// oneDNN rejects that or has only its reference implementation for it.
// Constant weights are reordered once into the primitive's preferred (blocked) layout, run-time
// weights once per content tag (a module parameter while unchanged) or else per call.
#include "dnnl_kernels.h"

#include "ops/nn_util.h"
#include "ops/op_util.h"
#include "xjit/backend/content_tags.h"
#include "xjit/ir/op_registry.h"

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <type_traits>

namespace xjit::backend::dnnl_kernels {
namespace {

/// Whether oneDNN 2.6's channels-last kernel for a grouped convolution (brdgmm_dw) would get
/// a per-channel binary post-op wrong: it does when the whole output is one pixel (batch 1,
/// 1x1) and the stride is above 1 (MobileViT's last stage at small images: 0.2-0.8 relative
/// error; tests/python/test_conv_single_pixel.py). Such a convolution runs in the blocked
/// layout (jit_dw), whose reorders cost nothing at this size. `dstDims` are oneDNN's.
bool channelsLastMisreadsBinary(const Dims &dstDims, int64_t groups,
                                const std::vector<PostOp> &post) {
  int64_t pixels = 1;
  for (size_t d = 0; d < dstDims.size(); ++d)
    if (d != 1) pixels *= dstDims[d];
  return pixels == 1 && groups > 1 &&
         std::any_of(post.begin(), post.end(), [](const PostOp &p) { return p.binary; });
}

struct ConvSpec {
  std::string name;
  size_t nd = 2;
  Dims stride, padding, dilation;
  int64_t groups = 1;
  std::string mode; // "", "same", "valid"
  bool channelsLast = false;
  bool transposed = false; // conv_transpose: weight [Cin, Cout/G, k...], oneDNN deconvolution
  Dims outputPadding;
  Source x, w, bias;
  std::vector<PostOp> post;
  DType dtype = DType::F32;
};

class ConvPlan : public Plan {
public:
  dnnl::primitive prim; // convolution_forward or deconvolution_forward
  std::string impl;
  const ConvSpec *spec = nullptr;
  memory::desc srcDesc, weightsDesc, biasDesc, dstDesc, dstUser;
  Densify toSrc, toWeights, fromDst;
  memory packedW; // constant weights, already in weightsDesc
  bool hasBias = false, dstScratch = false;
  // Winograd: the blocked copies of input and result live in this thread's scratch buffers
  // (fresh 6.4 MB buffers per call at ResNet-18 b8 stayed in glibc's heap: +38 MB steady RSS).
  bool activationsInScratch = false;
  std::unique_ptr<BoundPostOps> post;

  void run(std::span<const RtValue> in, const Tensor &out) const override {
    std::unordered_map<int, memory> args;
    std::vector<Tensor> keep;
    Tensor x = tensorOf(spec->x, in);
    if (toSrc && activationsInScratch) {
      args[DNNL_ARG_SRC] = toSrc.intoScratch(x, ScratchSlot::ConvSrc);
    } else {
      if (toSrc) x = toSrc(x, spec->dtype);
      keep.push_back(x);
      args[DNNL_ARG_SRC] = wrap(srcDesc, x);
    }
    if (packedW) {
      args[DNNL_ARG_WEIGHTS] = packedW;
    } else {
      // Run-time weights: a module's parameters, tagged by the frontend while unchanged, are
      // reordered once per tag (runtimeWeights); others per call into this thread's scratch
      // buffer (threadScratch), whose size is the largest weight's whatever the batch.
      // Activations stay fresh allocations (a batch-8 ResNet's are 26 MB: persistent buffers
      // for them cost more peak memory).
      Tensor w = tensorOf(spec->w, in);
      keep.push_back(w);
      args[DNNL_ARG_WEIGHTS] = runtimeWeights(w, weightsDesc, toWeights);
    }
    if (hasBias) {
      Tensor b = tensorOf(spec->bias, in);
      keep.push_back(b);
      args[DNNL_ARG_BIAS] = wrap(biasDesc, b);
    }
    post->bind(in, args, keep);
    Tensor dst = out;
    memory dstMem;
    if (dstScratch && activationsInScratch) {
      dstMem =
          memory(dstDesc, cpuEngine(), threadScratch(ScratchSlot::ConvDst, dstDesc.get_size()));
    } else {
      if (dstScratch)
        dst = allocateOutput(spec->dtype,
                             {static_cast<int64_t>(dstDesc.get_size()) / dtypeSize(spec->dtype)});
      dstMem = wrap(dstDesc, dst);
    }
    args[DNNL_ARG_DST] = dstMem;
    execute(prim, args);
    if (dstScratch) {
      std::unordered_map<int, memory> r = {{DNNL_ARG_FROM, dstMem},
                                           {DNNL_ARG_TO, wrap(dstUser, out)}};
      execute(fromDstPrim, r);
    }
  }
  std::string info() const override { return impl; }
  dnnl::reorder fromDstPrim;
};

/// A weight-bound convolution as im2col + matmul on the weights as they are (OIHW, read as the
/// transposed [Cin*kh*kw, Cout] matrix). A module's weights are graph inputs, so the blocked
/// convolution reorders them on every call; when the weights are much larger than the
/// activations (ResNet's last stage at batch 1: 9.4 MB of weights against 0.1 MB of pixels)
/// that reorder, read and written through memory, costs as much as the convolution itself,
/// while the matmul packs its weight blocks into cache as it goes. oneDNN 2.6 has no fast
/// convolution on plain OIHW weights (only its reference one), hence the im2col here.
class Im2colConvPlan : public Plan {
public:
  const ConvSpec *spec = nullptr;
  int64_t n = 0, h = 0, w = 0, c = 0, kh = 0, kw = 0, oh = 0, ow = 0;
  int64_t strideH = 0, strideW = 0, padTop = 0, padLeft = 0;
  bool channelsLast = false;
  dnnl::matmul prim;
  memory::desc colsDesc, weightsDesc, biasDesc, dstDesc;
  bool hasBias = false;
  std::string impl;

  void run(std::span<const RtValue> in, const Tensor &out) const override {
    Tensor x = tensorOf(spec->x, in), wt = tensorOf(spec->w, in);
    auto *cols = static_cast<float *>(threadScratch(ScratchSlot::ConvSrc, colsDesc.get_size()));
    im2col(reinterpret_cast<const float *>(x.data()), cols);
    memory colsMem(colsDesc, cpuEngine(), cols), weightsMem = wrap(weightsDesc, wt);
    std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, channelsLast ? colsMem : weightsMem},
                                            {DNNL_ARG_WEIGHTS, channelsLast ? weightsMem : colsMem},
                                            {DNNL_ARG_DST, wrap(dstDesc, out)}};
    Tensor b;
    if (hasBias) {
      b = tensorOf(spec->bias, in);
      args[DNNL_ARG_BIAS] = wrap(biasDesc, b);
    }
    execute(prim, args);
    countWeightsInPlace();
  }
  std::string info() const override { return impl + " (im2col, weights in place)"; }

private:
  /// `x` (NHWC or NCHW) -> one row per output pixel, columns in the weights' (c, kh, kw) order.
  void im2col(const float *x, float *cols) const {
    const int64_t window = kh * kw, row = c * window, pixels = n * oh * ow;
#pragma omp parallel for schedule(static) if (pixels * row >= (int64_t(1) << 16))
    for (int64_t p = 0; p < pixels; ++p) {
      int64_t b = p / (oh * ow), y = p / ow % oh, xo = p % ow;
      float *dst = cols + p * row;
      for (int64_t i = 0; i < kh; ++i)
        for (int64_t j = 0; j < kw; ++j) {
          int64_t iy = y * strideH - padTop + i, ix = xo * strideW - padLeft + j, k = i * kw + j;
          if (iy < 0 || iy >= h || ix < 0 || ix >= w) {
            for (int64_t ch = 0; ch < c; ++ch)
              dst[ch * window + k] = 0.f;
            continue;
          }
          if (channelsLast) {
            const float *src = x + ((b * h + iy) * w + ix) * c;
            for (int64_t ch = 0; ch < c; ++ch)
              dst[ch * window + k] = src[ch];
          } else {
            const float *src = x + (b * c * h + iy) * w + ix;
            for (int64_t ch = 0; ch < c; ++ch)
              dst[ch * window + k] = src[ch * h * w];
          }
        }
    }
  }
};

/// XJIT_CONV_IM2COL: "auto" (default) takes Im2colConvPlan for weight-bound convolutions,
/// "0" never, "1" whenever it applies (tests and benchmarks).
enum class Im2colMode { Auto, Never, Always };
Im2colMode im2colMode() {
  static const Im2colMode mode = [] {
    const char *v = std::getenv("XJIT_CONV_IM2COL");
    if (!v || !*v || std::string(v) == "auto") return Im2colMode::Auto;
    return std::string(v) == "0" ? Im2colMode::Never : Im2colMode::Always;
  }();
  return mode;
}

/// A Winograd convolution and the direct one for the same call. Winograd's transforms add and
/// subtract neighbouring pixels, so one NaN or Inf spoils a whole output tile (a 4x4 block
/// gets NaN where the direct convolution, and PyTorch, give finite values or Inf): calls whose
/// input or run-time weights hold a non-finite value run the direct convolution instead. The
/// scan reads the input once (a 64-channel 56x56 batch-8 activation: 6.4 MB, ~0.3 ms on one
/// thread against the ~8 ms Winograd saves there).
class WinogradConvPlan : public Plan {
public:
  std::unique_ptr<Plan> winograd, direct;
  const ConvSpec *spec = nullptr;
  bool scanWeights = false; // run-time weights (constant ones were checked at compile time)

  void run(std::span<const RtValue> in, const Tensor &out) const override {
    bool finite = !hasNonFinite(tensorOf(spec->x, in), false) &&
                  !(scanWeights && hasNonFinite(tensorOf(spec->w, in), false));
    (finite ? winograd : direct)->run(in, out);
  }
  std::string info() const override {
    return winograd->info() + " (" + direct->info() + " for inputs with NaN or Inf)";
  }
};

/// XJIT_CONV_WINOGRAD: "auto" (default) tries oneDNN's Winograd convolution for 3x3 stride-1
/// convolutions where it pays (kWinogradMinPixels), "0" never, "1" wherever it applies (tests).
enum class WinogradMode { Auto, Never, Always };
/// Read whenever a plan is made (once per kernel and shape), so that tests can switch it.
WinogradMode winogradMode() {
  const char *v = std::getenv("XJIT_CONV_WINOGRAD");
  if (!v || !*v || std::string(v) == "auto") return WinogradMode::Auto;
  return std::string(v) == "0" ? WinogradMode::Never : WinogradMode::Always;
}

/// Output pixels (batch x height x width) from which a Winograd convolution pays for
/// transforming run-time weights on every call, against a convolution 1.3-2.5x faster than
/// brgconv (docs/perf.md "Session 7", "Session 11"). With xjit's transform (winograd_weights.h;
/// one thread, cold weights: 0.03 ms for 64x64x3x3, 0.22 ms for 128x128x3x3 in F(4x4), 0.47 ms
/// for 256x256x3x3) from 100 pixels: at batch 1 ResNet-18's 56x56, 28x28 (1.0-1.2 against
/// 2.2 ms per conv with brgconv and its weight reorder) and
/// 14x14 stages (1.7 against 2.5 ms) gain, and so does 256 channels at 10x10 (1.2 against 1.6
/// ms); its 7x7 stage loses (512 channels: 4.1-4.6 ms against 2.9 with im2col). Where only
/// oneDNN's transform applies (5-8x slower than xjit's before session 11) from 16K pixels:
/// its 128x128 transform outweighed the saving on ResNet-18's 28x28 stage at batch 8. Weights
/// transformed once (constant, or tagged by the weight cache) take Winograd at any size.
constexpr int64_t kWinogradMinPixels = 100;
/// Input channels from which Winograd may pay: its blocked layout pads them to 16, so an RGB
/// stem computes 16 channels for 3 (a CNN's 3x3 stem on 8x3x32x32, one thread: 0.65 ms plus
/// 0.09 of reorders against brgconv's 0.17; docs/perf.md "Session 13"). Measured at 3 channels
/// only: from 8 as before.
constexpr int64_t kWinogradMinChannels = 8;
constexpr int64_t kWinogradMinPixelsSlowTransform = 16384;
/// Largest oneDNN scratchpad a Winograd convolution on run-time weights may ask for. The
/// per-thread scratchpad grows to the largest any primitive asks for and stays (brgconv asks
/// for none): at batch 8, ResNet-18's 56x56 stage needs 7.5 MB but its 28x28 and 14x14 stages
/// 22-24 MB, which took its steady peak RSS 43 MB higher (above eager's; 54 MB in session 11).
/// At batch 1 its 28x28 stage asks for 10 MB and is taken: 16.4-16.5 against 17.9-18.8 ms per
/// call at two threads, steady peak RSS 295.8 against 293.7 MB (eager 295.1-297.6; docs/perf.md
/// "Session 11"). The weight cache (opt-in, a copy of every weight already) is not held to it.
constexpr size_t kWinogradMaxScratchpad = size_t(12) << 20;

class ConvKernel : public LibraryKernel {
public:
  explicit ConvKernel(ConvSpec s) : s_(std::move(s)) {
    if (s_.w.constant && s_.w.constant->isTensor()) {
      packed_ = std::make_unique<PackedWeights>(s_.w.constant->tensor());
      constantWeightsFinite_ = !hasNonFinite(s_.w.constant->tensor(), false);
    }
  }

  std::string describe() const override {
    std::ostringstream os;
    os << "oneDNN convolution for " << s_.name << " (" << dtypeName(s_.dtype) << ", "
       << (s_.channelsLast ? "channels-last" : "channels-first") << ")"
       << (packed_ ? ", constant weights prepacked" : "") << ", " << s_.post.size() << " post-ops";
    return os.str();
  }

  std::unique_ptr<Plan> makePlan(std::span<const RtValue> in) const override {
    bool winograd = false;
    std::unique_ptr<Plan> plan = buildPlan(in, true, winograd);
    if (!winograd) return plan;
    auto both = std::make_unique<WinogradConvPlan>();
    both->dtype = plan->dtype;
    both->resultSizes = plan->resultSizes;
    both->spec = &s_;
    both->scanWeights = !packed_;
    both->winograd = std::move(plan);
    both->direct = buildPlan(in, false, winograd);
    return both;
  }

private:
  /// The plan for this call's shapes; with `allowWinograd`, a Winograd convolution where
  /// winogradPays (then `usedWinograd` is set).
  std::unique_ptr<Plan> buildPlan(std::span<const RtValue> in, bool allowWinograd,
                                  bool &usedWinograd) const {
    usedWinograd = false;
    Tensor X = tensorOf(s_.x, in), W = tensorOf(s_.w, in), B = tensorOf(s_.bias, in);
    size_t nd = s_.nd;
    if (X.numel() == 0) throw InternalKernelError("conv: empty input");
    bool unbatched = static_cast<size_t>(X.rank()) == nd + 1;
    DimMap map = spatialMap(nd, unbatched, s_.channelsLast);
    Dims xs = X.sizes(), xst = X.strides();
    map.apply(xs, xst); // [N, C, spatial...]
    int64_t g = s_.groups, cout = s_.transposed ? W.size(1) * g : W.size(0);
    if (xs[1] != (s_.transposed ? W.size(0) : W.size(1) * g))
      throw KernelError("conv: channels do not match the weight");
    memory::dims strides, dilates, padL, padR;
    Dims out = {xs[0], cout};
    for (size_t d = 0; d < nd; ++d) {
      int64_t k = W.size(static_cast<int64_t>(2 + d)), s = s_.stride[d], dil = s_.dilation[d];
      int64_t eff = dil * (k - 1) + 1, L = xs[2 + d];
      if (s_.transposed) { // (L-1)*s - 2p + eff + output_padding; the extra goes right
        int64_t p = s_.padding[d], o = (L - 1) * s - 2 * p + eff + s_.outputPadding[d];
        if (o < 1) throw KernelError("conv_transpose: empty output");
        strides.push_back(s);
        dilates.push_back(dil - 1);
        padL.push_back(p);
        padR.push_back(p - s_.outputPadding[d]);
        out.push_back(o);
        continue;
      }
      int64_t total = s_.mode == "same" ? eff - 1 : s_.mode == "valid" ? 0 : 2 * s_.padding[d];
      int64_t pl = s_.mode == "" ? s_.padding[d] : total / 2;
      if (L + total < eff) throw KernelError("conv: input smaller than the kernel");
      strides.push_back(s);
      dilates.push_back(dil - 1); // oneDNN counts the gaps
      padL.push_back(pl);
      padR.push_back(total - pl);
      out.push_back((L + total - eff) / s + 1);
    }
    // The IR result: [N, Cout, out...] in the op's layout and batched-ness, contiguous.
    Dims result = out;
    if (s_.channelsLast) {
      result.erase(result.begin() + 1);
      result.push_back(cout);
    }
    if (unbatched) result.erase(result.begin());
    Dims ds = result, dst = contiguousStrides(result);
    map.apply(ds, dst);

    memory::data_type dt = *dnnlType(s_.dtype);
    memory::desc srcUser = stridedDesc(xs, xst, dt), dstUser = stridedDesc(ds, dst, dt);
    // Weights as oneDNN wants them: [G, Cout/G, Cin/G, k...] with groups. A transposed
    // conv's [Cin, Cout/G, k...] weight is the same with the first two dims swapped (strides).
    Dims ws = W.sizes(), wst = W.strides();
    if (s_.transposed && g > 1) {
      int64_t cinG = ws[0] / g;
      Dims sz = {g, ws[1], cinG}, st = {cinG * wst[0], wst[1], wst[0]};
      sz.insert(sz.end(), ws.begin() + 2, ws.end());
      st.insert(st.end(), wst.begin() + 2, wst.end());
      ws = sz;
      wst = st;
    } else if (s_.transposed) {
      std::swap(ws[0], ws[1]);
      std::swap(wst[0], wst[1]);
    } else if (g > 1) {
      ws[0] /= g;
      ws.insert(ws.begin(), g);
      wst.insert(wst.begin(), wst[0] * ws[1]);
    }
    memory::desc wUser = stridedDesc(ws, wst, dt);
    auto anyOf = [&](const Dims &d) {
      return memory::desc(memory::dims(d.begin(), d.end()), dt, memory::format_tag::any);
    };
    bool hasBias = B.defined();
    memory::desc biasDesc;
    if (hasBias) {
      auto bdt = dnnlType(B.dtype());
      if (!bdt || B.rank() != 1) throw InternalKernelError("conv: unsupported bias");
      biasDesc = stridedDesc(B.sizes(), B.strides(), *bdt);
    }

    if (auto plan = im2colPlan(X, W, B, xs, out, strides, dilates, padL, result)) return plan;

    // Layout attempts, best first: channels-first activations in oneDNN's 16-channel blocked
    // layout (nChw16c: what PyTorch's ideep uses; the reorders from and to NCHW are cheap),
    // then whatever oneDNN prefers (`any`), then the op's own plain layout (which also
    // materializes binary post-op operands). A dense channels-last input starts at plain.
    enum Layout { Winograd, Blocked16, Any, Plain };
    std::vector<Layout> attempts = {Blocked16, Any, Plain};
    if (s_.channelsLast && isDense(X) && !channelsLastMisreadsBinary(ds, g, s_.post))
      attempts = {Plain};
    // Winograd (its own blocked layouts, reordered in and out) comes first where it pays.
    if (allowWinograd && winogradPays(X, W, xs, out, strides, dilates))
      attempts.insert(attempts.begin(), Winograd);
    auto blocked16 = [&](const Dims &d) {
      using T = memory::format_tag;
      T tag = nd == 1 ? T::nCw16c : nd == 2 ? T::nChw16c : T::nCdhw16c;
      return memory::desc(memory::dims(d.begin(), d.end()), dt, tag);
    };
    for (size_t ai = 0; ai < attempts.size(); ++ai) {
      int attempt = ai + 1 == attempts.size() ? 1 : 0; // 1: the last resort
      bool plain = attempts[ai] == Plain;
      auto plan = std::make_unique<ConvPlan>();
      plan->spec = &s_;
      plan->resultSizes = result;
      plan->dtype = s_.dtype;
      plan->dstUser = dstUser;
      // Few input channels (a first layer on RGB): read NCHW directly, as ideep does,
      // rather than padding the channels to 16.
      memory::desc plainSrc = isDense(X) ? srcUser : denseInLayout(xs, dt);
      bool winograd = attempts[ai] == Winograd;
      memory::desc srcWant = plain                             ? plainSrc
                             : attempts[ai] == Any || winograd ? anyOf(xs)
                             : xs[1] % 16 == 0                 ? blocked16(xs)
                                                               : plainSrc;
      memory::desc dstWant = plain                             ? dstUser
                             : attempts[ai] == Any || winograd ? anyOf(ds)
                                                               : blocked16(ds);
      dnnl::post_ops po;
      plan->post = std::make_unique<BoundPostOps>(s_.post, in, result, map, plain, po,
                                                  attempts[ai] == Blocked16 ? &dstWant : nullptr);
      dnnl::primitive_attr attr = userScratchpad();
      attr.set_post_ops(po);
      try {
        using P = dnnl::prop_kind;
        std::optional<dnnl::convolution_forward::primitive_desc> cpd;
        std::optional<dnnl::deconvolution_forward::primitive_desc> dpd;
        // Convolution and deconvolution descriptors take the same arguments.
        auto describe = [&]<class D>(std::type_identity<D>, dnnl::algorithm a) {
          return hasBias ? D(P::forward_inference, a, srcWant, anyOf(ws), biasDesc, dstWant,
                             strides, dilates, padL, padR)
                         : D(P::forward_inference, a, srcWant, anyOf(ws), dstWant, strides, dilates,
                             padL, padR);
        };
        if (s_.transposed)
          dpd.emplace(describe(std::type_identity<dnnl::deconvolution_forward::desc>{},
                               dnnl::algorithm::deconvolution_direct),
                      attr, cpuEngine());
        else
          cpd.emplace(describe(std::type_identity<dnnl::convolution_forward::desc>{},
                               winograd ? dnnl::algorithm::convolution_winograd
                                        : dnnl::algorithm::convolution_direct),
                      attr, cpuEngine());
        const dnnl::primitive_desc &pd = cpd ? static_cast<const dnnl::primitive_desc &>(*cpd)
                                             : static_cast<const dnnl::primitive_desc &>(*dpd);
        if (attempt == 0 && isReferenceImpl(pd)) continue;
        // Run-time weights, transformed per call: not through oneDNN's slow reorder unless the
        // call is large, and not with a large scratchpad.
        if (winograd && winogradMode() == WinogradMode::Auto && !packed_ &&
            currentContentTag(W.data()) == 0 &&
            ((xs[0] * out[2] * out[3] < kWinogradMinPixelsSlowTransform &&
              !planWinogradWeights(wUser, pd.weights_desc())) ||
             pd.scratchpad_desc().get_size() > kWinogradMaxScratchpad))
          continue;
        plan->impl = pd.impl_info_str();
        plan->prim = cpd ? dnnl::primitive(dnnl::convolution_forward(*cpd))
                         : dnnl::primitive(dnnl::deconvolution_forward(*dpd));
        plan->srcDesc = pd.src_desc();
        if (plan->srcDesc != srcUser) plan->toSrc = Densify(srcUser, plan->srcDesc);
        plan->weightsDesc = pd.weights_desc();
        if (packed_)
          plan->packedW = packed_->get(wUser, plan->weightsDesc);
        else if (plan->weightsDesc != wUser)
          plan->toWeights = Densify(wUser, plan->weightsDesc);
        plan->hasBias = hasBias;
        plan->biasDesc = biasDesc;
        plan->dstDesc = pd.dst_desc();
        if (plan->dstDesc != dstUser) {
          plan->dstScratch = true;
          plan->fromDstPrim = dnnl::reorder(dnnl::reorder::primitive_desc(
              cpuEngine(), plan->dstDesc, cpuEngine(), dstUser, userScratchpad()));
        }
      } catch (const dnnl::error &) {
        if (attempt == 1) throw;
        continue;
      }
      usedWinograd = winograd;
      plan->activationsInScratch = winograd;
      return plan;
    }
    throw InternalKernelError("conv: no oneDNN implementation");
  }

  /// Whether to try oneDNN's Winograd convolution first: a plain 2-D f32 3x3 convolution,
  /// stride 1, undilated, ungrouped, with eltwise post-ops only (a full-shape binary operand
  /// would need Winograd's own dst layout), and either weights transformed once (constant or
  /// tagged) or enough output pixels to repay the per-call weight transform. Winograd rounds
  /// differently from the direct convolution (about 1e-6 relative per layer, within the
  /// 1e-5 the suite checks: tests/python/test_conv_winograd.py).
  bool winogradPays(const Tensor &X, const Tensor &W, const Dims &xs, const Dims &out,
                    const memory::dims &strides, const memory::dims &dilates) const {
    WinogradMode mode = winogradMode();
    if (mode == WinogradMode::Never || s_.transposed || s_.groups != 1 || s_.nd != 2 ||
        s_.dtype != DType::F32 || X.dtype() != DType::F32 || W.dtype() != DType::F32 ||
        W.size(2) != 3 || W.size(3) != 3)
      return false;
    for (int64_t d : strides)
      if (d != 1) return false;
    for (int64_t d : dilates)
      if (d != 0) return false;
    for (const PostOp &p : s_.post)
      if (p.binary) return false;
    if (packed_ && !constantWeightsFinite_) return false;
    if (mode == WinogradMode::Always) return true;
    if (xs[1] < kWinogradMinChannels) return false;
    if (packed_ || currentContentTag(W.data()) != 0) return true;
    return xs[0] * out[2] * out[3] >= kWinogradMinPixels;
  }

  /// Im2colConvPlan when it applies and pays: a plain 2-D f32 convolution with
  /// dense OIHW run-time weights (constant ones are prepacked once, and tagged ones are
  /// cached by runtimeWeights: both are better served blocked), eltwise post-ops only, and
  /// weights at least 8x the bytes of input and output together.
  std::unique_ptr<Plan> im2colPlan(const Tensor &X, const Tensor &W, const Tensor &B,
                                   const Dims &xs, const Dims &out, const memory::dims &strides,
                                   const memory::dims &dilates, const memory::dims &padL,
                                   const Dims &result) const {
    Im2colMode mode = im2colMode();
    if (mode == Im2colMode::Never || s_.transposed || s_.groups != 1 || s_.nd != 2 || packed_ ||
        s_.dtype != DType::F32 || X.dtype() != DType::F32 || W.dtype() != DType::F32 ||
        !X.isContiguous() || !W.isContiguous() || currentContentTag(W.data()) != 0)
      return nullptr;
    for (int64_t d : dilates)
      if (d != 0) return nullptr;
    for (const PostOp &p : s_.post)
      if (p.binary) return nullptr;
    if (B.defined() && (B.dtype() != DType::F32 || B.rank() != 1 || !B.isContiguous()))
      return nullptr;
    int64_t pixels = xs[0] * out[2] * out[3], depth = xs[1] * W.size(2) * W.size(3);
    int64_t cout = W.size(0);
    if (mode == Im2colMode::Auto && W.numel() < 8 * (X.numel() + pixels * cout)) return nullptr;

    auto plan = std::make_unique<Im2colConvPlan>();
    plan->spec = &s_;
    plan->resultSizes = result;
    plan->dtype = s_.dtype;
    plan->n = xs[0];
    plan->c = xs[1];
    plan->h = xs[2];
    plan->w = xs[3];
    plan->kh = W.size(2);
    plan->kw = W.size(3);
    plan->oh = out[2];
    plan->ow = out[3];
    plan->strideH = strides[0];
    plan->strideW = strides[1];
    plan->padTop = padL[0];
    plan->padLeft = padL[1];
    plan->channelsLast = s_.channelsLast;
    // The columns [N, OH*OW, depth] and the weights [Cout, depth], multiplied as oneDNN's
    // fast (brgemm) matmul takes them, the weights broadcast over the batch:
    // channels-last, cols x weights^T -> [N, OH*OW, Cout]; channels-first, weights x cols^T ->
    // [N, Cout, OH*OW] (a transposed dst, or a per-row bias there, gets the reference matmul).
    using T = memory::format_tag;
    auto f32 = memory::data_type::f32;
    int64_t n = xs[0], perImage = out[2] * out[3];
    plan->hasBias = B.defined();
    if (s_.channelsLast) {
      plan->colsDesc = memory::desc({n, perImage, depth}, f32, T::abc);
      plan->weightsDesc = memory::desc({1, depth, cout}, f32, T::acb);
      plan->dstDesc = memory::desc({n, perImage, cout}, f32, T::abc);
      if (plan->hasBias) plan->biasDesc = memory::desc({1, 1, cout}, f32, T::abc);
    } else {
      if (plan->hasBias) return nullptr;
      plan->colsDesc = memory::desc({n, depth, perImage}, f32, T::acb);
      plan->weightsDesc = memory::desc({1, cout, depth}, f32, T::abc);
      plan->dstDesc = memory::desc({n, cout, perImage}, f32, T::abc);
    }
    const memory::desc &src = s_.channelsLast ? plan->colsDesc : plan->weightsDesc;
    const memory::desc &wei = s_.channelsLast ? plan->weightsDesc : plan->colsDesc;
    dnnl::post_ops po;
    for (const PostOp &p : s_.post)
      po.append_eltwise(1.f, p.alg, p.alpha, p.beta);
    dnnl::primitive_attr attr = userScratchpad();
    attr.set_post_ops(po);
    try {
      auto desc = plan->hasBias ? dnnl::matmul::desc(src, wei, plan->biasDesc, plan->dstDesc)
                                : dnnl::matmul::desc(src, wei, plan->dstDesc);
      dnnl::matmul::primitive_desc pd(desc, attr, cpuEngine());
      if (isReferenceImpl(pd)) return nullptr;
      plan->impl = pd.impl_info_str();
      plan->prim = dnnl::matmul(pd);
    } catch (const dnnl::error &) {
      return nullptr;
    }
    return plan;
  }

  /// Dense in the op's own dim order (NCHW, or NHWC for channels-last), as oneDNN dims.
  memory::desc denseInLayout(const Dims &logical, memory::data_type dt) const {
    Dims ir = logical;
    if (s_.channelsLast) {
      ir.erase(ir.begin() + 1);
      ir.push_back(logical[1]);
    }
    Dims st = contiguousStrides(ir);
    DimMap m = spatialMap(s_.nd, false, s_.channelsLast);
    m.apply(ir, st);
    return stridedDesc(ir, st, dt);
  }

  ConvSpec s_;
  std::unique_ptr<PackedWeights> packed_;
  bool constantWeightsFinite_ = true; // constant weights without NaN/Inf may take Winograd
};

// ---- the weight's gradient: conv{1,2,3}d_weight ----

struct ConvWeightSpec {
  std::string name;
  size_t nd = 2;
  Dims weightSize, stride, padding, dilation;
  int64_t groups = 1;
  std::string mode; // "", "same", "valid"
  Source x, gy;
  DType dtype = DType::F32;
};

class ConvWeightPlan : public Plan {
public:
  dnnl::convolution_backward_weights prim;
  std::string impl;
  const ConvWeightSpec *spec = nullptr;
  memory::desc srcDesc, diffDstDesc, diffWeightsDesc, diffWeightsUser;
  Densify toSrc, toDiffDst;
  std::optional<dnnl::reorder> toUser; // diff weights in oneDNN's layout -> the IR's OIHW

  void run(std::span<const RtValue> in, const Tensor &out) const override {
    Tensor x = tensorOf(spec->x, in), gy = tensorOf(spec->gy, in);
    if (toSrc) x = toSrc(x, spec->dtype);
    if (toDiffDst) gy = toDiffDst(gy, spec->dtype);
    Tensor dw =
        toUser ? allocateOutput(spec->dtype, {static_cast<int64_t>(diffWeightsDesc.get_size()) /
                                              dtypeSize(spec->dtype)})
               : out;
    std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, wrap(srcDesc, x)},
                                            {DNNL_ARG_DIFF_DST, wrap(diffDstDesc, gy)},
                                            {DNNL_ARG_DIFF_WEIGHTS, wrap(diffWeightsDesc, dw)}};
    execute(prim, args);
    if (toUser) {
      std::unordered_map<int, memory> r = {{DNNL_ARG_FROM, args[DNNL_ARG_DIFF_WEIGHTS]},
                                           {DNNL_ARG_TO, wrap(diffWeightsUser, out)}};
      execute(*toUser, r);
    }
  }
  std::string info() const override { return impl; }
};

/// oneDNN's convolution_backward_weights primitive: the input and the output's gradient as
/// they are (a channels-last view is read in place), else reordered to what oneDNN prefers.
class ConvWeightKernel : public LibraryKernel {
public:
  explicit ConvWeightKernel(ConvWeightSpec s) : s_(std::move(s)) {}

  std::string describe() const override {
    return "oneDNN convolution weight gradient for " + s_.name + " (" +
           std::string(dtypeName(s_.dtype)) + ")";
  }

  std::unique_ptr<Plan> makePlan(std::span<const RtValue> in) const override {
    Tensor X = tensorOf(s_.x, in), G = tensorOf(s_.gy, in);
    const size_t nd = s_.nd;
    if (X.numel() == 0 || G.numel() == 0) throw InternalKernelError("conv weight: empty input");
    if (static_cast<size_t>(X.rank()) != nd + 2 || static_cast<size_t>(G.rank()) != nd + 2)
      throw InternalKernelError("conv weight: unbatched input");
    const int64_t g = s_.groups;
    const Dims &ws = s_.weightSize;
    memory::dims strides, dilates, padL, padR;
    for (size_t d = 0; d < nd; ++d) {
      int64_t k = ws[2 + d], st = s_.stride[d], dil = s_.dilation[d], eff = dil * (k - 1) + 1;
      int64_t total = s_.mode == "same" ? eff - 1 : s_.mode == "valid" ? 0 : 2 * s_.padding[d];
      int64_t pl = s_.mode == "" ? s_.padding[d] : total / 2;
      if ((X.size(2 + d) + total - eff) / st + 1 != G.size(2 + d))
        throw InternalKernelError("conv weight: grad_output does not match the convolution");
      strides.push_back(st);
      dilates.push_back(dil - 1); // oneDNN counts the gaps
      padL.push_back(pl);
      padR.push_back(total - pl);
    }
    Dims wDims = ws;
    if (g > 1) {
      wDims[0] /= g;
      wDims.insert(wDims.begin(), g);
    }
    memory::data_type dt = *dnnlType(s_.dtype);
    memory::desc srcUser = stridedDesc(X.sizes(), X.strides(), dt),
                 dstUser = stridedDesc(G.sizes(), G.strides(), dt), wUser = denseDesc(wDims, dt);
    auto anyOf = [&](const Dims &d) {
      return memory::desc(memory::dims(d.begin(), d.end()), dt, memory::format_tag::any);
    };
    // Channels-last (dense NHWC order) descriptors of the operands' sizes.
    auto lastOf = [&](const Dims &d) {
      Dims order = {0};
      for (size_t i = 2; i < d.size(); ++i)
        order.push_back(static_cast<int64_t>(i));
      order.push_back(1);
      Dims st(d.size());
      int64_t step = 1;
      for (size_t i = order.size(); i-- > 0;) {
        st[static_cast<size_t>(order[i])] = step;
        step *= d[static_cast<size_t>(order[i])];
      }
      return stridedDesc(d, st, dt);
    };
    const memory::desc srcLast = lastOf(X.sizes()), dstLast = lastOf(G.sizes());
    // One operand channels-last and the other not (a stem's image against its channels-last
    // gradient): both channels-last is worth a try, the other operand reordered.
    const bool oneLast = (srcUser == srcLast) != (dstUser == dstLast);
    // Attempts: the operands as they are (a channels-last view: oneDNN's direct NHWC kernel,
    // faster than eager's), unless oneDNN has only its gemm-based or reference implementation
    // for that layout (channels-first: 2-3x slower than the direct kernel on its blocked
    // layout); then both channels-last when one is (the 8x3x32x32 stem's 1 MiB gradient read
    // in place instead of reordered, its 96 KiB input reordered); then the layouts oneDNN
    // prefers, the operands reordered in and the weights out; then anything.
    for (int attempt = 0; attempt < 4; ++attempt) {
      const bool bothLast = attempt == 1, preferred = attempt == 2, last = attempt == 3;
      if (bothLast && !oneLast) continue;
      memory::desc srcWant = preferred  ? anyOf(X.sizes())
                             : bothLast ? srcLast
                                        : srcUser,
                   dstWant = preferred  ? anyOf(G.sizes())
                             : bothLast ? dstLast
                                        : dstUser,
                   wWant = anyOf(wDims);
      try {
        using P = dnnl::prop_kind;
        using A = dnnl::algorithm;
        dnnl::convolution_forward::primitive_desc hint(
            dnnl::convolution_forward::desc(P::forward_training, A::convolution_direct, srcWant,
                                            wWant, dstWant, strides, dilates, padL, padR),
            userScratchpad(), cpuEngine());
        dnnl::convolution_backward_weights::primitive_desc pd(
            dnnl::convolution_backward_weights::desc(A::convolution_direct, srcWant, wWant, dstWant,
                                                     strides, dilates, padL, padR),
            userScratchpad(), cpuEngine(), hint);
        const std::string impl = pd.impl_info_str();
        if (!last &&
            (isReferenceImpl(pd) || (attempt < 2 && impl.find("gemm") != std::string::npos)))
          continue;
        auto plan = std::make_unique<ConvWeightPlan>();
        plan->spec = &s_;
        plan->dtype = s_.dtype;
        plan->resultSizes = ws;
        plan->impl = impl;
        plan->prim = dnnl::convolution_backward_weights(pd);
        plan->srcDesc = pd.src_desc();
        if (plan->srcDesc != srcUser) plan->toSrc = Densify(srcUser, plan->srcDesc);
        plan->diffDstDesc = pd.diff_dst_desc();
        if (plan->diffDstDesc != dstUser) plan->toDiffDst = Densify(dstUser, plan->diffDstDesc);
        plan->diffWeightsDesc = pd.diff_weights_desc();
        plan->diffWeightsUser = wUser;
        if (plan->diffWeightsDesc != wUser)
          plan->toUser = dnnl::reorder(dnnl::reorder::primitive_desc(
              cpuEngine(), plan->diffWeightsDesc, cpuEngine(), wUser, userScratchpad()));
        return plan;
      } catch (const dnnl::error &) {
        if (last) throw InternalKernelError("conv weight: no oneDNN implementation");
      }
    }
    throw InternalKernelError("conv weight: no oneDNN implementation");
  }

private:
  ConvWeightSpec s_;
};

} // namespace

std::string whyNotConv(const CallIR &call) {
  const Op &op = *call.anchor;
  if (call.operands.size() < 2) return op.name() + ": missing weight";
  return "";
}

std::string whyNotConvWeight(const CallIR &call) {
  const Op &op = *call.anchor;
  if (call.operands.size() != 2) return op.name() + ": expected input and grad_output";
  if (!call.postOps.empty()) return op.name() + ": no post-ops";
  return "";
}

std::unique_ptr<LibraryKernel> makeConvWeightKernel(const CallIR &call) {
  const Op &op = *call.anchor;
  ConvWeightSpec s;
  s.name = op.name();
  s.nd = static_cast<size_t>(op.name()[4] - '0');
  s.weightSize = ops::attrInts(op, "weight_size");
  s.stride = ops::nn::spatialInts(op, "stride", s.nd, 1);
  s.padding = ops::nn::spatialInts(op, "padding", s.nd, 0);
  s.dilation = ops::nn::spatialInts(op, "dilation", s.nd, 1);
  s.groups = ops::attrInt(op, "groups");
  s.mode = ops::attrStr(op, "padding_mode");
  s.x = call.operands[0];
  s.gy = call.operands[1];
  s.dtype = call.resultType.dtype();
  return std::make_unique<ConvWeightKernel>(std::move(s));
}

std::unique_ptr<LibraryKernel> makeConvKernel(const CallIR &call) {
  const Op &op = *call.anchor;
  ConvSpec s;
  s.name = op.name();
  s.nd = static_cast<size_t>(op.name()[op.name().size() - 2] - '0');
  s.transposed = op.name().rfind("conv_transpose", 0) == 0;
  s.stride = ops::nn::spatialInts(op, "stride", s.nd, 1);
  s.padding = ops::nn::spatialInts(op, "padding", s.nd, 0);
  s.dilation = ops::nn::spatialInts(op, "dilation", s.nd, 1);
  s.groups = ops::attrInt(op, "groups");
  if (s.transposed)
    s.outputPadding = ops::nn::spatialInts(op, "output_padding", s.nd, 0);
  else
    s.mode = ops::attrStr(op, "padding_mode");
  s.channelsLast = ops::attrStr(op, "layout") == "nhwc";
  s.x = call.operands[0];
  s.w = call.operands[1];
  if (call.operands.size() > 2) s.bias = call.operands[2];
  s.post = call.postOps;
  s.dtype = call.resultType.dtype();
  return std::make_unique<ConvKernel>(std::move(s));
}

} // namespace xjit::backend::dnnl_kernels
