// Matmul-family ops through oneDNN's matmul primitive: matmul (torch.matmul's rank rules and
// batch broadcasting), mm, bmm, linear (weight transposed by strides, never copied), addmm and
// baddbmm (alpha as an eltwise_linear post-op, `self` with beta 1 as a binary add).
//
// A 2-D (or 1-D) right operand against a batched left operand folds the batch into the rows
// ([B,S,K]·[K,N] is one [B*S,K]·[K,N] product) when the left operand's strides allow, as BLAS
// callers do. Constant right operands (frozen weights) are reordered once into the layout the
// primitive prefers (`any`), and so are tagged run-time ones (a module's weights while
// unchanged: xjit/backend/content_tags.h) once per tag; other operands are read through their
// strides.
#include "dnnl_kernels.h"

#include "ops/op_util.h"
#include "xjit/backend/content_tags.h"
#include "xjit/ir/op_registry.h"

#include <algorithm>
#include <sstream>

namespace xjit::backend::dnnl_kernels {
namespace {

using dnnl::algorithm;

struct MatmulSpec {
  std::string name;
  Source lhs, rhs;
  bool transposeRhs = false;    // linear: weight [N,K] read as [K,N]
  Source bias;                  // linear: native bias when 1-D [N], else a binary add
  std::vector<PostOp> prologue; // addmm/baddbmm: alpha scaling, then + self
  std::vector<PostOp> post;     // the epilogue's post-ops
  DType dtype = DType::F32;
};

Dims broadcastBatch(const Dims &a, const Dims &b) {
  size_t r = std::max(a.size(), b.size());
  Dims out(r, 1);
  for (size_t i = 0; i < r; ++i) {
    int64_t x = i + a.size() >= r ? a[i + a.size() - r] : 1;
    int64_t y = i + b.size() >= r ? b[i + b.size() - r] : 1;
    if (x != y && x != 1 && y != 1) throw KernelError("matmul: batch dims do not broadcast");
    out[i] = x == 1 ? y : x;
  }
  return out;
}

class MatmulPlan : public Plan {
public:
  dnnl::matmul prim;
  std::string impl;
  memory::desc aDesc, bDesc, biasDesc, dstDesc;
  Densify densifyA, densifyB;
  Densify toB; // a tagged run-time rhs into the layout the primitive chose (`any`)
  const PackedWeights *packed = nullptr; // constant rhs
  memory packedB;
  bool nativeBias = false;
  std::unique_ptr<BoundPostOps> post;
  const MatmulSpec *spec;

  void run(std::span<const RtValue> in, const Tensor &out) const override {
    std::unordered_map<int, memory> args;
    std::vector<Tensor> keep;
    Tensor a = tensorOf(spec->lhs, in);
    if (densifyA) a = densifyA(a, dtype);
    keep.push_back(a);
    args[DNNL_ARG_SRC] = wrap(aDesc, a);
    if (packed) {
      args[DNNL_ARG_WEIGHTS] = packedB;
    } else {
      Tensor b = tensorOf(spec->rhs, in);
      if (densifyB) b = densifyB(b, dtype);
      keep.push_back(b);
      args[DNNL_ARG_WEIGHTS] = runtimeWeights(b, bDesc, toB);
    }
    if (nativeBias) {
      Tensor bias = tensorOf(spec->bias, in);
      keep.push_back(bias);
      args[DNNL_ARG_BIAS] = wrap(biasDesc, bias);
    }
    post->bind(in, args, keep);
    args[DNNL_ARG_DST] = wrap(dstDesc, out);
    execute(prim, args);
  }
  std::string info() const override { return impl; }
};

class MatmulKernel : public LibraryKernel {
public:
  explicit MatmulKernel(MatmulSpec s) : s_(std::move(s)) {
    if (s_.rhs.constant && s_.rhs.constant->isTensor())
      packed_ = std::make_unique<PackedWeights>(s_.rhs.constant->tensor());
  }

  std::string describe() const override {
    std::ostringstream os;
    os << "oneDNN matmul for " << s_.name << " (" << dtypeName(s_.dtype) << ")"
       << (packed_ ? ", constant weights prepacked" : "") << ", "
       << s_.prologue.size() + s_.post.size() << " post-ops";
    return os.str();
  }

  std::unique_ptr<Plan> makePlan(std::span<const RtValue> in) const override {
    Tensor A = tensorOf(s_.lhs, in), B = tensorOf(s_.rhs, in);
    if (!A.defined() || !B.defined()) throw KernelError("matmul: missing operand");
    // A run-time rhs the caller tagged as unchanged between calls (a module's weight) is
    // worth packing into the primitive's preferred layout, once per tag, like a constant one.
    const bool packTagged = !packed_ && currentContentTag(B.data()) != 0;
    if (A.numel() == 0 || B.numel() == 0) throw KernelError("matmul: empty operand");
    if (s_.transposeRhs && B.rank() == 2)
      B = B.view({B.size(1), B.size(0)}, {B.strides()[1], B.strides()[0]}, B.offset());
    Dims as = A.sizes(), ast = A.strides(), bs = B.sizes(), bst = B.strides();
    bool aVec = as.size() == 1, bVec = bs.size() == 1;
    if (aVec) {
      as.insert(as.begin(), 1);
      ast.insert(ast.begin(), 0);
    }
    if (bVec) {
      bs.push_back(1);
      bst.push_back(0);
    }
    size_t ra = as.size(), rb = bs.size();
    int64_t n = as[ra - 2], k = as[ra - 1], m = bs[rb - 1];
    if (bs[rb - 2] != k) throw KernelError("matmul: inner dims differ");
    Dims batch = broadcastBatch(Dims(as.begin(), as.end() - 2), Dims(bs.begin(), bs.end() - 2));
    size_t batchRank = batch.size();
    Dims result = batch;
    if (!aVec) result.push_back(n);
    if (!bVec) result.push_back(m);

    bool fold = rb == 2 && ra > 2;
    DimMap resMap;
    if (aVec) resMap.insertUnit.push_back(static_cast<int>(batchRank));
    if (bVec) resMap.insertUnit.push_back(static_cast<int>(batchRank + 1));
    if (fold) resMap.mergeLeading = static_cast<int>(batchRank + 1);
    if (!fold) { // the same rank for src, weights and dst: pad the batch with unit dims
      while (as.size() < batchRank + 2) {
        as.insert(as.begin(), 1);
        ast.insert(ast.begin(), 0);
      }
      while (bs.size() < batchRank + 2) {
        bs.insert(bs.begin(), 1);
        bst.insert(bst.begin(), 0);
      }
    }
    Dims dstSizes = result, dstStrides = contiguousStrides(result);
    resMap.apply(dstSizes, dstStrides);

    memory::data_type dt = *dnnlType(s_.dtype);
    memory::desc aUser = stridedDesc(as, ast, dt), bUser = stridedDesc(bs, bst, dt);
    Dims aSizes = as, aStrides = ast;
    bool aMerges = true;
    if (fold) aMerges = DimMap{.mergeLeading = static_cast<int>(ra - 1)}.apply(aSizes, aStrides);

    // A native bias: linear's 1-D [N] bias; other biases are a binary add post-op.
    Tensor bias = tensorOf(s_.bias, in);
    bool nativeBias =
        bias.defined() && bias.rank() == 1 && bias.size(0) == m && !bVec && dnnlType(bias.dtype());
    std::vector<PostOp> ops;
    if (bias.defined() && !nativeBias) {
      PostOp add;
      add.binary = true;
      add.alg = algorithm::binary_add;
      add.other = s_.bias;
      ops.push_back(add);
    }
    ops.insert(ops.end(), s_.prologue.begin(), s_.prologue.end());
    ops.insert(ops.end(), s_.post.begin(), s_.post.end());

    // Attempt 0 reads operands through their strides; attempt 1 (when oneDNN rejects that or
    // only has its reference implementation for it) makes every operand dense first.
    for (int attempt = 0; attempt < 2; ++attempt) {
      bool dense = attempt == 1;
      auto plan = std::make_unique<MatmulPlan>();
      plan->spec = &s_;
      plan->dtype = s_.dtype;
      plan->resultSizes = result;
      if (fold) {
        if (aMerges && !dense) {
          plan->aDesc = stridedDesc(aSizes, aStrides, dt);
        } else {
          plan->aDesc = denseDesc({product(as) / k, k}, dt);
          plan->densifyA = Densify(aUser, denseDesc(as, dt));
        }
      } else if (dense) {
        plan->aDesc = denseDesc(as, dt);
        plan->densifyA = Densify(aUser, plan->aDesc);
      } else {
        plan->aDesc = aUser;
      }
      memory::desc bWant;
      if (packed_ || (packTagged && !dense)) {
        bWant = memory::desc(memory::dims(bs.begin(), bs.end()), dt, memory::format_tag::any);
      } else if (dense) {
        bWant = denseDesc(bs, dt);
        plan->densifyB = Densify(bUser, bWant);
      } else {
        bWant = bUser;
      }
      plan->dstDesc = stridedDesc(dstSizes, dstStrides, dt);
      dnnl::post_ops po;
      plan->post = std::make_unique<BoundPostOps>(ops, in, result, resMap, dense, po);
      dnnl::primitive_attr attr = userScratchpad();
      attr.set_post_ops(po);
      try {
        std::optional<dnnl::matmul::desc> d;
        if (nativeBias) {
          Dims bd(dstSizes.size(), 1), bstr(dstSizes.size(), 1);
          bd.back() = m;
          bstr.back() = bias.strides()[0];
          plan->biasDesc = stridedDesc(bd, bstr, *dnnlType(bias.dtype()));
          plan->nativeBias = true;
          d.emplace(plan->aDesc, bWant, plan->biasDesc, plan->dstDesc);
        } else {
          d.emplace(plan->aDesc, bWant, plan->dstDesc);
        }
        dnnl::matmul::primitive_desc pd(*d, attr, cpuEngine());
        if (attempt == 0 && isReferenceImpl(pd)) continue;
        plan->impl = pd.impl_info_str();
        plan->prim = dnnl::matmul(pd);
        // The primitive's own descriptors (oneDNN may normalize the strides of size-1 dims).
        plan->aDesc = pd.src_desc();
        plan->dstDesc = pd.dst_desc();
        if (nativeBias) plan->biasDesc = pd.query_md(dnnl::query::exec_arg_md, DNNL_ARG_BIAS);
        if (packed_) {
          plan->packed = packed_.get();
          plan->packedB = packed_->get(bUser, pd.weights_desc());
        } else {
          plan->bDesc = pd.weights_desc();
          if (packTagged && !dense && plan->bDesc != bUser) plan->toB = Densify(bUser, plan->bDesc);
        }
      } catch (const dnnl::error &) {
        if (attempt == 1) throw;
        continue;
      }
      return plan;
    }
    throw KernelError("matmul: no oneDNN implementation");
  }

private:
  static int64_t product(const Dims &d) {
    int64_t p = 1;
    for (int64_t x : d)
      p *= x;
    return p;
  }
  MatmulSpec s_;
  std::unique_ptr<PackedWeights> packed_;
};

} // namespace

bool isMatmulOp(const std::string &n) {
  return n == "matmul" || n == "mm" || n == "bmm" || n == "linear" || n == "addmm" ||
         n == "baddbmm";
}

std::string whyNotMatmul(const CallIR &call) {
  const Op &op = *call.anchor;
  if (op.name() == "addmm" || op.name() == "baddbmm") {
    double beta = ops::attrFloat(op, "beta");
    if (beta != 0 && beta != 1) return op.name() + ": beta other than 0 or 1";
  }
  return "";
}

std::unique_ptr<LibraryKernel> makeMatmulKernel(const CallIR &call) {
  const Op &op = *call.anchor;
  MatmulSpec s;
  s.name = op.name();
  s.dtype = call.resultType.dtype();
  s.post = call.postOps;
  if (s.name == "addmm" || s.name == "baddbmm") {
    s.lhs = call.operands[1];
    s.rhs = call.operands[2];
    double alpha = ops::attrFloat(op, "alpha"), beta = ops::attrFloat(op, "beta");
    if (alpha != 1) {
      PostOp scale;
      scale.alg = algorithm::eltwise_linear;
      scale.alpha = static_cast<float>(alpha);
      s.prologue.push_back(scale);
    }
    if (beta == 1) {
      PostOp add;
      add.binary = true;
      add.alg = algorithm::binary_add;
      add.other = call.operands[0];
      s.prologue.push_back(add);
    }
  } else {
    s.lhs = call.operands[0];
    s.rhs = call.operands[1];
    s.transposeRhs = s.name == "linear";
    if (s.name == "linear" && call.operands.size() > 2) s.bias = call.operands[2];
  }
  return std::make_unique<MatmulKernel>(std::move(s));
}

} // namespace xjit::backend::dnnl_kernels
