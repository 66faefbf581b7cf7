// Convolutions through oneDNN with post-ops: forward conv1d/2d/3d (any groups, dilation,
// padding or padding_mode "same"/"valid") and conv_transpose1d/2d/3d (oneDNN's deconvolution;
// output_padding as extra right padding), channels-first or channels-last `layout`.
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
#include "xjit/ir/op_registry.h"

#include <sstream>
#include <type_traits>

namespace xjit::backend::dnnl_kernels {
namespace {

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
  std::unique_ptr<BoundPostOps> post;

  void run(std::span<const RtValue> in, const Tensor &out) const override {
    std::unordered_map<int, memory> args;
    std::vector<Tensor> keep;
    Tensor x = tensorOf(spec->x, in);
    if (toSrc) x = toSrc(x, spec->dtype);
    keep.push_back(x);
    args[DNNL_ARG_SRC] = wrap(srcDesc, x);
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
    if (dstScratch)
      dst = allocateOutput(spec->dtype,
                           {static_cast<int64_t>(dstDesc.get_size()) / dtypeSize(spec->dtype)});
    args[DNNL_ARG_DST] = wrap(dstDesc, dst);
    execute(prim, args);
    if (dstScratch) {
      std::unordered_map<int, memory> r = {{DNNL_ARG_FROM, wrap(dstDesc, dst)},
                                           {DNNL_ARG_TO, wrap(dstUser, out)}};
      execute(fromDstPrim, r);
    }
  }
  std::string info() const override { return impl; }
  dnnl::reorder fromDstPrim;
};

class ConvKernel : public LibraryKernel {
public:
  explicit ConvKernel(ConvSpec s) : s_(std::move(s)) {
    if (s_.w.constant && s_.w.constant->isTensor())
      packed_ = std::make_unique<PackedWeights>(s_.w.constant->tensor());
  }

  std::string describe() const override {
    std::ostringstream os;
    os << "oneDNN convolution for " << s_.name << " (" << dtypeName(s_.dtype) << ", "
       << (s_.channelsLast ? "channels-last" : "channels-first") << ")"
       << (packed_ ? ", constant weights prepacked" : "") << ", " << s_.post.size() << " post-ops";
    return os.str();
  }

  std::unique_ptr<Plan> makePlan(std::span<const RtValue> in) const override {
    Tensor X = tensorOf(s_.x, in), W = tensorOf(s_.w, in), B = tensorOf(s_.bias, in);
    size_t nd = s_.nd;
    if (X.numel() == 0) throw KernelError("conv: empty input");
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
      if (!bdt || B.rank() != 1) throw KernelError("conv: unsupported bias");
      biasDesc = stridedDesc(B.sizes(), B.strides(), *bdt);
    }

    // Layout attempts, best first: channels-first activations in oneDNN's 16-channel blocked
    // layout (nChw16c: what PyTorch's ideep uses; the reorders from and to NCHW are cheap),
    // then whatever oneDNN prefers (`any`), then the op's own plain layout (which also
    // materializes binary post-op operands). A dense channels-last input starts at plain.
    enum Layout { Blocked16, Any, Plain };
    std::vector<Layout> attempts = {Blocked16, Any, Plain};
    if (s_.channelsLast && isDense(X)) attempts = {Plain};
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
      memory::desc srcWant = plain                 ? plainSrc
                             : attempts[ai] == Any ? anyOf(xs)
                             : xs[1] % 16 == 0     ? blocked16(xs)
                                                   : plainSrc;
      memory::desc dstWant = plain ? dstUser : attempts[ai] == Any ? anyOf(ds) : blocked16(ds);
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
                               dnnl::algorithm::convolution_direct),
                      attr, cpuEngine());
        const dnnl::primitive_desc &pd = cpd ? static_cast<const dnnl::primitive_desc &>(*cpd)
                                             : static_cast<const dnnl::primitive_desc &>(*dpd);
        if (attempt == 0 && isReferenceImpl(pd)) continue;
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
      return plan;
    }
    throw KernelError("conv: no oneDNN implementation");
  }

private:
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
};

} // namespace

bool isConvOp(const std::string &n) {
  return n == "conv1d" || n == "conv2d" || n == "conv3d" || n == "conv_transpose1d" ||
         n == "conv_transpose2d" || n == "conv_transpose3d";
}

std::string whyNotConv(const CallIR &call) {
  const Op &op = *call.anchor;
  if (call.operands.size() < 2) return op.name() + ": missing weight";
  return "";
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
