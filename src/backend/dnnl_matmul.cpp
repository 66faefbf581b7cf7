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
#include "xjit/backend/library_warm_up.h"
#include "xjit/ir/op_registry.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <sstream>
#include <string_view>

namespace xjit::backend::dnnl_kernels {
namespace {

using dnnl::algorithm;

/// A product on an unpacked rhs with one lhs row (a decode step's projection) or with both
/// operands row-major: oneDNN's brgemm matmul, its first choice, copies the whole rhs into its
/// blocked layout at every call (the copy costs more than one row's product, and up to the
/// product itself at 128 rows on an Intel Xeon); its gemm implementation reads the rhs through
/// its strides. Moves `pd` to the gemm implementation when it has one.
void preferGemm(dnnl::matmul::primitive_desc &pd) {
  dnnl::matmul::primitive_desc probe = pd;
  do {
    if (std::string_view(probe.impl_info_str()).starts_with("gemm:")) {
      pd = probe;
      return;
    }
  } while (probe.next_impl());
}

/// Whether row-major f32 products on unpacked weights take gemm too (XJIT_GEMM_ROW_MAJOR=0: no,
/// for A/B runs). Read once.
bool gemmForRowMajor() {
  static const bool on = [] {
    const char *v = std::getenv("XJIT_GEMM_ROW_MAJOR");
    return !v || std::string_view(v) != "0";
  }();
  return on;
}

/// matmul's `causal` attribute (the causal-products pass): which operand is triangular.
enum class Causal { None, LhsLower, LhsUpper, RhsLower };

struct MatmulSpec {
  std::string name;
  Causal causal = Causal::None;
  Source lhs, rhs;
  bool transposeRhs = false;    // linear: weight [N,K] read as [K,N]
  Source bias;                  // linear: native bias when 1-D [N], else a binary add
  std::vector<PostOp> prologue; // addmm/baddbmm: alpha scaling, then + self
  std::vector<PostOp> post;     // the epilogue's post-ops
  DType dtype = DType::F32;
  bool fpmathBf16 = false; // `fpmath = "bf16"` (bf16-products): operands may round to bf16
};

/// Whether oneDNN has a bf16 matmul better than its reference implementation on this CPU
/// (AMX, AVX512-BF16 or its AVX-512 emulation). Probed once.
bool bf16ProductsNative() {
  static const bool native = [] {
    try {
      memory::desc a({32, 32}, memory::data_type::bf16, memory::format_tag::ab);
      memory::desc b({32, 32}, memory::data_type::bf16, memory::format_tag::any);
      memory::desc c({32, 32}, memory::data_type::f32, memory::format_tag::ab);
      return !isReferenceImpl(
          dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), userScratchpad(), cpuEngine()));
    } catch (const dnnl::error &) {
      return false;
    }
  }();
  return native;
}

/// Rows per rhs below which converting an rhs to bf16 at every call costs more than bf16 saves
/// (an Intel Xeon with AMX, eight 2048x2048 linears: bf16 with the conversion / f32 took 1.86x
/// at 8 rows, 1.19x at 32, 0.92x at 64, 0.66x at 128, 0.49x at 256).
constexpr int64_t kBf16RowsPerCallConversion = 64;

/// Whether an `fpmath = "bf16"` product of `macs` multiply-adds runs on bf16 operands (rounded
/// from f32, to nearest even) with f32 accumulation and result, as eager's oneDNN fpmath mode
/// bf16 does (oneDNN 2.6 ignores that mode on x64, so the operands are converted here): above
/// 16^3 multiply-adds (eager's rule, ATen's mkldnn checksize), where the CPU has native bf16
/// products, and where the rhs is converted once (`rhsOnce`: constant, or tagged) or serves at
/// least kBf16RowsPerCallConversion rows (`rhsElems`: its elements). Otherwise exact f32, never
/// less precise than eager's.
bool bf16Math(const MatmulSpec &s, int64_t macs, int64_t rhsElems, bool rhsOnce) {
  return s.fpmathBf16 && s.dtype == DType::F32 && macs > 16 * 16 * 16 && bf16ProductsNative() &&
         (rhsOnce || macs >= kBf16RowsPerCallConversion * rhsElems);
}

/// The dense descriptor of `dims` in `dt` whose last two dims are laid out as in `strides` (a
/// transposed matrix stays transposed: converting it then is a plain elementwise pass).
memory::desc denseLike(const Dims &dims, const Dims &strides, memory::data_type dt) {
  const size_t r = dims.size();
  if (r < 2 || strides[r - 2] != 1 || strides[r - 1] == 1) return denseDesc(dims, dt);
  Dims st(r);
  st[r - 2] = 1;
  st[r - 1] = dims[r - 2];
  int64_t step = dims[r - 2] * dims[r - 1];
  for (size_t i = r - 2; i-- > 0;) {
    st[i] = step;
    step *= dims[i];
  }
  return stridedDesc(dims, st, dt);
}

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

/// The operands and result of one call as oneDNN sees them: vectors as [1,K]/[K,1], the batch
/// broadcast and padded to one rank (or, when a 2-D rhs meets a batched lhs, folded into the
/// lhs rows: `fold`).
struct MatmulGeometry {
  Dims as, ast, bs, bst; // lhs and rhs sizes/strides
  int64_t k = 0, m = 0;  // inner dim, rhs columns
  bool aVec = false, bVec = false, fold = false;
  bool aMerges = true;   // fold: the lhs's leading dims merge into rows through its strides
  Dims aSizes, aStrides; // fold: the merged lhs
  Dims result;           // the IR result's sizes
  DimMap resMap;         // result -> oneDNN dst dims
  Dims dstSizes, dstStrides;
};

MatmulGeometry matmulGeometry(const Tensor &A, Tensor B, bool transposeRhs) {
  if (A.numel() == 0 || B.numel() == 0) throw InternalKernelError("matmul: empty operand");
  if (transposeRhs && B.rank() == 2)
    B = B.view({B.size(1), B.size(0)}, {B.strides()[1], B.strides()[0]}, B.offset());
  MatmulGeometry g;
  Dims &as = g.as, &ast = g.ast, &bs = g.bs, &bst = g.bst;
  as = A.sizes(), ast = A.strides(), bs = B.sizes(), bst = B.strides();
  g.aVec = as.size() == 1, g.bVec = bs.size() == 1;
  if (g.aVec) {
    as.insert(as.begin(), 1);
    ast.insert(ast.begin(), 0);
  }
  if (g.bVec) {
    bs.push_back(1);
    bst.push_back(0);
  }
  size_t ra = as.size(), rb = bs.size();
  int64_t n = as[ra - 2];
  g.k = as[ra - 1], g.m = bs[rb - 1];
  if (bs[rb - 2] != g.k) throw KernelError("matmul: inner dims differ");
  Dims batch = broadcastBatch(Dims(as.begin(), as.end() - 2), Dims(bs.begin(), bs.end() - 2));
  size_t batchRank = batch.size();
  g.result = batch;
  if (!g.aVec) g.result.push_back(n);
  if (!g.bVec) g.result.push_back(g.m);

  g.fold = rb == 2 && ra > 2;
  if (g.aVec) g.resMap.insertUnit.push_back(static_cast<int>(batchRank));
  if (g.bVec) g.resMap.insertUnit.push_back(static_cast<int>(batchRank + 1));
  if (g.fold) g.resMap.mergeLeading = static_cast<int>(batchRank + 1);
  if (!g.fold) { // the same rank for src, weights and dst: pad the batch with unit dims
    while (as.size() < batchRank + 2) {
      as.insert(as.begin(), 1);
      ast.insert(ast.begin(), 0);
    }
    while (bs.size() < batchRank + 2) {
      bs.insert(bs.begin(), 1);
      bst.insert(bst.begin(), 0);
    }
  }
  g.dstSizes = g.result, g.dstStrides = contiguousStrides(g.result);
  g.resMap.apply(g.dstSizes, g.dstStrides);
  g.aSizes = as, g.aStrides = ast;
  if (g.fold)
    g.aMerges = DimMap{.mergeLeading = static_cast<int>(ra - 1)}.apply(g.aSizes, g.aStrides);
  return g;
}

/// `md` (plain strides) with its last two dims' sizes and all strides but the unit ones left to
/// execution time (DNNL_RUNTIME_DIM_VAL): oneDNN's gemm-based matmul takes run-time sizes and
/// strides where it knows which dims are contiguous (with every stride at run time it only has
/// its reference implementation). The batch dims stay fixed.
memory::desc withRuntimeDims(const memory::desc &md) {
  memory::dims dims = md.dims(), strides(dims.size());
  const dnnl_memory_desc_t &c = md.data;
  for (size_t i = 0; i < dims.size(); ++i) {
    strides[i] = c.format_desc.blocking.strides[i] == 1 ? 1 : DNNL_RUNTIME_DIM_VAL;
    if (i + 2 >= dims.size()) dims[i] = DNNL_RUNTIME_DIM_VAL;
  }
  return memory::desc(dims, md.data_type(), strides);
}

class MatmulPlan : public Plan {
public:
  dnnl::matmul prim;
  std::string impl;
  memory::desc aDesc, bDesc, biasDesc, dstDesc;
  DType operandDtype = DType::F32; // of the dense copies: bf16 for bf16 products (bf16Math)
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
    if (densifyA) a = densifyA(a, operandDtype);
    keep.push_back(a);
    args[DNNL_ARG_SRC] = wrap(aDesc, a);
    if (packed) {
      args[DNNL_ARG_WEIGHTS] = packedB;
    } else if (densifyB && operandDtype == DType::BF16) {
      // A weight converted per call: into the thread's scratch, no fresh pages for it each call
      // (f32 copies stay fresh tensors, freed after the call: the scratch would keep the
      // largest one resident), described as the primitive has it (oneDNN may normalize the
      // strides of size-1 dims).
      memory copy = densifyB.intoScratch(tensorOf(spec->rhs, in), ScratchSlot::Weights);
      args[DNNL_ARG_WEIGHTS] = memory(bDesc, cpuEngine(), copy.get_data_handle());
    } else {
      Tensor b = tensorOf(spec->rhs, in);
      if (densifyB) b = densifyB(b, operandDtype);
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

/// Whether every binary post-op of `s` takes a scalar here (a Python number or a one-element
/// tensor, whose descriptor does not depend on the result's shape).
bool scalarBinaryOperands(const MatmulSpec &s, std::span<const RtValue> in) {
  for (const std::vector<PostOp> *ops : {&s.prologue, &s.post})
    for (const PostOp &op : *ops) {
      if (!op.binary) continue;
      const RtValue &v = op.other.get(in);
      if (v.isTensor() && v.tensor().numel() != 1) return false;
    }
  return true;
}

/// A product on oneDNN's gemm implementation, planned while the gemm warm-up's thread makes
/// that implementation's kernels (xjit/backend/library_warm_up.h): until they are made, calls
/// run `standby`, the product on dense copies of the operands (brgemm, whose small kernels are
/// made with its primitive), instead of waiting up to ~29 ms for them. The two sum in different
/// orders: those first calls may differ from later ones in the last bits.
class GemmStandbyPlan : public Plan {
public:
  /// XJIT_GEMM_STANDBY=0: gemm products wait for the kernels as before (A/B runs).
  static bool enabled() {
    static const bool on = [] {
      const char *v = std::getenv("XJIT_GEMM_STANDBY");
      return !(v && std::string_view(v) == "0");
    }();
    return on;
  }
  std::unique_ptr<Plan> gemm, standby;

  void run(std::span<const RtValue> in, const Tensor &out) const override {
    (gemmKernelsPending() ? standby : gemm)->run(in, out);
  }
  std::string info() const override {
    return gemm->info() + " (" + standby->info() +
           " on dense copies until gemm's kernels are made)";
  }
};

/// One primitive for every shape of a matmul whose sizes change from call to call (attention
/// over a KV cache that grows by a token per decoding step): the rows, columns and inner dim
/// and the non-unit strides are oneDNN run-time values, bound per call. A primitive per shape
/// costs 0.1-0.5 ms to create, more than the product of a decoding step, and the plans of past
/// shapes would pile up.
class GenericMatmulPlan : public Plan {
public:
  dnnl::matmul prim;
  std::string impl;
  memory::data_type dt;
  bool fold = false;
  memory::desc aAny, bAny, dstAny;    // the run-time descriptors the primitive was made for
  std::unique_ptr<BoundPostOps> post; // eltwise ones, and binary ones with a scalar
  const MatmulSpec *spec;

  struct Call {
    MatmulGeometry g;
    memory::desc a, b, dst;
  };
  /// The call's operands, or nothing when they do not fit this primitive (other ranks, batch
  /// sizes or contiguous dims, a vector operand, a lhs whose rows do not merge).
  std::optional<Call> fits(std::span<const RtValue> in) const {
    Tensor A = tensorOf(spec->lhs, in), B = tensorOf(spec->rhs, in);
    if (!A.defined() || !B.defined() || A.numel() == 0 || B.numel() == 0) return std::nullopt;
    Call c{matmulGeometry(A, B, spec->transposeRhs), {}, {}, {}};
    const MatmulGeometry &g = c.g;
    if (g.aVec || g.bVec || g.fold != fold || (fold && !g.aMerges) ||
        !scalarBinaryOperands(*spec, in))
      return std::nullopt;
    c.a = fold ? stridedDesc(g.aSizes, g.aStrides, dt) : stridedDesc(g.as, g.ast, dt);
    c.b = stridedDesc(g.bs, g.bst, dt);
    c.dst = stridedDesc(g.dstSizes, g.dstStrides, dt);
    if (withRuntimeDims(c.a) != aAny || withRuntimeDims(c.b) != bAny ||
        withRuntimeDims(c.dst) != dstAny)
      return std::nullopt;
    return c;
  }
  bool takes(std::span<const RtValue> in) const override { return fits(in).has_value(); }
  Dims resultSizesFor(std::span<const RtValue> in) const override {
    std::optional<Call> c = fits(in);
    if (!c)
      throw InternalKernelError("matmul: the shape-generic primitive does not take this call");
    return c->g.result;
  }
  void run(std::span<const RtValue> in, const Tensor &out) const override {
    std::optional<Call> c = fits(in);
    if (!c)
      throw InternalKernelError("matmul: the shape-generic primitive does not take this call");
    std::unordered_map<int, memory> args;
    std::vector<Tensor> keep;
    args[DNNL_ARG_SRC] = wrap(c->a, tensorOf(spec->lhs, in));
    args[DNNL_ARG_WEIGHTS] = wrap(c->b, tensorOf(spec->rhs, in));
    post->bind(in, args, keep);
    args[DNNL_ARG_DST] = wrap(c->dst, out);
    execute(prim, args);
  }
  std::string info() const override { return impl + " (run-time sizes)"; }
};

/// Rows [r0, r1) and columns [c0, c1) of every matrix of t (rank >= 2), as a view.
Tensor matrixBlock(const Tensor &t, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  Dims sizes = t.sizes();
  const Dims &st = t.strides();
  const size_t r = sizes.size();
  sizes[r - 2] = r1 - r0, sizes[r - 1] = c1 - c0;
  return t.view(sizes, st, t.offset() + r0 * st[r - 2] + c0 * st[r - 1]);
}

/// Rows per block of a causal product (XJIT_CAUSAL_BLOCK, default 32; read once): smaller
/// blocks skip more of the zero triangle in more, smaller library calls.
int64_t causalBlockRows() {
  static const int64_t rows = [] {
    const char *v = std::getenv("XJIT_CAUSAL_BLOCK");
    int64_t n = v && *v ? std::atoll(v) : 32;
    return n > 0 ? n : 32;
  }();
  return rows;
}

/// A causal product as blocks of result rows (of columns for rhs_lower) that each skip the part
/// of the inner dim where the triangular operand is zero: one oneDNN plan per block, on views
/// of the operands and the result. A block whose inner range is empty is written as zeros.
/// The skipped terms are 0 * x, which eager computes: an infinite or NaN x there makes NaN of
/// the whole result column (row). Calls whose other operand holds one in the part of the inner
/// dim that some block skips run the whole product instead (the scan reads that part only:
/// three quarters of v at GPT's 128 rows with blocks of 32).
class CausalMatmulPlan : public Plan {
public:
  struct Block {
    int64_t r0, r1, k0, k1, c0, c1; // result rows, inner range, result columns
    std::unique_ptr<Plan> plan;
  };
  std::vector<Block> blocks;
  std::vector<Block> zeros; // result regions (rows, columns) written as zeros
  std::unique_ptr<Plan> whole;
  const MatmulSpec *spec;
  int64_t skippedBelow = 0, skippedFrom = 0, inner = 0; // some block skips [0, b) and [f, inner)

  /// Whether the operand that is not triangular holds a NaN or an infinity where a block skips,
  /// or the triangular one has a NaN line (docs/ir.md: its zeros may be NaN on lines that are
  /// NaN throughout, a softmax row; their first element is kept by every block, and for
  /// lhs_lower the kept part already makes that output row NaN).
  bool skipsNonFinite(std::span<const RtValue> in) const {
    const bool lhsTriangular = spec->causal != Causal::RhsLower;
    const Tensor &x = in[(lhsTriangular ? spec->rhs : spec->lhs).input].tensor();
    const size_t r = x.rank();
    auto scan = [&](int64_t k0, int64_t k1) {
      return k0 < k1 && hasNonFinite(lhsTriangular ? matrixBlock(x, k0, k1, 0, x.size(r - 1))
                                                   : matrixBlock(x, 0, x.size(r - 2), k0, k1),
                                     false);
    };
    if (scan(0, skippedBelow) || scan(skippedFrom, inner)) return true;
    const Tensor &t = in[(lhsTriangular ? spec->lhs : spec->rhs).input].tensor();
    if (spec->causal == Causal::LhsUpper) // columns: the first row
      return hasNonFinite(matrixBlock(t, 0, 1, 0, t.size(r - 1)), true);
    if (spec->causal == Causal::RhsLower) // rows: the first column
      return hasNonFinite(matrixBlock(t, 0, t.size(r - 2), 0, 1), true);
    return false;
  }

  std::vector<RtValue> blockInputs(std::span<const RtValue> in, const Block &b) const {
    std::vector<RtValue> sub(in.begin(), in.end());
    sub[spec->lhs.input] = matrixBlock(in[spec->lhs.input].tensor(), b.r0, b.r1, b.k0, b.k1);
    sub[spec->rhs.input] = matrixBlock(in[spec->rhs.input].tensor(), b.k0, b.k1, b.c0, b.c1);
    return sub;
  }

  void run(std::span<const RtValue> in, const Tensor &out) const override {
    // The blocks run on gemm; `whole` does not wait for its kernels (GemmStandbyPlan).
    if ((GemmStandbyPlan::enabled() && gemmKernelsPending()) || skipsNonFinite(in))
      return whole->run(in, out);
    for (const Block &b : blocks)
      b.plan->run(blockInputs(in, b), matrixBlock(out, b.r0, b.r1, b.c0, b.c1));
    const size_t r = out.rank();
    const int64_t rows = out.size(r - 2), cols = out.size(r - 1), elem = dtypeSize(out.dtype());
    const int64_t matrices = zeros.empty() ? 0 : out.numel() / (rows * cols);
    for (int64_t m = 0; m < matrices; ++m) // `out` is contiguous
      for (const Block &z : zeros)
        for (int64_t i = z.r0; i < z.r1; ++i)
          std::memset(out.data() + ((m * rows + i) * cols + z.c0) * elem, 0, (z.c1 - z.c0) * elem);
  }
  std::string info() const override {
    return (blocks.empty() ? "causal (zeros)"
                           : blocks.front().plan->info() + " x" + std::to_string(blocks.size()) +
                                 " causal blocks") +
           " (whole for NaN or Inf where blocks skip)";
  }
};

class MatmulKernel : public LibraryKernel {
public:
  explicit MatmulKernel(MatmulSpec s) : s_(std::move(s)) {
    if (s_.rhs.constant && s_.rhs.constant->isTensor())
      packed_ = std::make_unique<PackedWeights>(s_.rhs.constant->tensor());
  }

  std::string describe() const override {
    std::ostringstream os;
    os << "oneDNN matmul for " << s_.name << " (" << dtypeName(s_.dtype)
       << (s_.fpmathBf16 ? ", bf16 fpmath" : "") << ")"
       << (packed_ ? ", constant weights prepacked" : "") << ", "
       << s_.prologue.size() + s_.post.size() << " post-ops";
    return os.str();
  }

  std::unique_ptr<Plan> makePlan(std::span<const RtValue> in) const override {
    return s_.causal == Causal::None ? densePlan(in, nullptr) : causalPlan(in);
  }

  /// The plan of one product; `dstStrides`: the result's strides when it is a view of a
  /// larger result (a causal block), else contiguous.
  std::unique_ptr<Plan> densePlan(std::span<const RtValue> in, const Dims *dstStridesOf,
                                  bool denseOnly = false) const {
    Tensor A = tensorOf(s_.lhs, in), B = tensorOf(s_.rhs, in);
    if (!A.defined() || !B.defined()) throw InternalKernelError("matmul: missing operand");
    // A run-time rhs the caller tagged as unchanged between calls (a module's weight) is
    // worth packing into the primitive's preferred layout, once per tag, like a constant one.
    const bool packTagged = !packed_ && currentContentTag(B.data()) != 0;
    MatmulGeometry g = matmulGeometry(A, B, s_.transposeRhs);
    const Dims &as = g.as, &ast = g.ast, &bs = g.bs, &bst = g.bst, &result = g.result;
    const Dims &dstSizes = g.dstSizes, &dstStrides = g.dstStrides;
    const Dims &aSizes = g.aSizes, &aStrides = g.aStrides;
    const DimMap &resMap = g.resMap;
    const int64_t k = g.k, m = g.m;
    const bool fold = g.fold, aMerges = g.aMerges, bVec = g.bVec;
    const bool singleRow = product(as) == k && !bVec;
    // Both operands row-major (`x @ W` with W [K,N], GPT-2's Conv1D, a gradient dY @ W): brgemm
    // copies such an rhs into its blocked layout at every call, which cost up to 2x the product
    // on an Intel Xeon (addmm 128x768x3072: 3.8 ms against gemm's 1.8 and eager's 1.7).
    const bool rowMajorF32 = s_.dtype == DType::F32 && !bVec && ast.back() == 1 && bst.back() == 1;
    // bf16 operands (bf16Math): converted into dense copies (constant and tagged weights once),
    // so the strided attempt is skipped; gemm is f32-only (brgemm has the AMX kernels).
    const bool bf16 = bf16Math(s_, product(result) * k, product(bs), packed_ || packTagged);
    memory::data_type dt = *dnnlType(s_.dtype);
    const memory::data_type odt = bf16 ? memory::data_type::bf16 : dt; // the operands' type
    memory::desc aUser = stridedDesc(as, ast, dt), bUser = stridedDesc(bs, bst, dt);

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
    for (int attempt = denseOnly || bf16 ? 1 : 0; attempt < 2; ++attempt) {
      bool dense = attempt == 1;
      auto plan = std::make_unique<MatmulPlan>();
      plan->spec = &s_;
      plan->dtype = s_.dtype;
      plan->operandDtype = bf16 ? DType::BF16 : s_.dtype;
      plan->resultSizes = result;
      if (fold) {
        if (aMerges && !dense) {
          plan->aDesc = stridedDesc(aSizes, aStrides, dt);
        } else {
          plan->aDesc = denseDesc({product(as) / k, k}, odt);
          plan->densifyA = Densify(aUser, denseDesc(as, odt));
        }
      } else if (dense) {
        plan->aDesc = denseDesc(as, odt);
        plan->densifyA = Densify(aUser, plan->aDesc);
      } else {
        plan->aDesc = aUser;
      }
      memory::desc bWant;
      // The primitive's layout (`any`) for a constant rhs (packed once) and a tagged one (once
      // per tag). An untagged bf16 one is converted per call in its own layout: oneDNN's
      // reorder into the blocked layout took 2-4x as long as that.
      const bool packOnce = packed_ || (packTagged && (!dense || bf16));
      if (packOnce) {
        bWant = memory::desc(memory::dims(bs.begin(), bs.end()), odt, memory::format_tag::any);
      } else if (dense) {
        bWant = bf16 ? denseLike(bs, bst, odt) : denseDesc(bs, odt);
        plan->densifyB = Densify(bUser, bWant);
      } else {
        bWant = bUser;
      }
      plan->dstDesc = stridedDesc(dstSizes, dstStridesOf ? *dstStridesOf : dstStrides, dt);
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
        if ((singleRow || rowMajorF32) && !packed_ && !packTagged && !bf16 && gemmForRowMajor())
          preferGemm(pd);
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
          if (packOnce && plan->bDesc != bUser) plan->toB = Densify(bUser, plan->bDesc);
        }
      } catch (const dnnl::error &) {
        if (attempt == 1) throw;
        continue;
      }
      if (dense || !plan->impl.starts_with("gemm:")) return plan;
      // Started before the capture where a mark was found; else now, when the host allows.
      if (hostWaitsAtExit()) startGemmWarmUp(/*atPlan=*/true);
      // A causal block (a strided result) needs none: its product runs whole meanwhile.
      if (!GemmStandbyPlan::enabled() || !gemmKernelsPending() || dstStridesOf) return plan;
      return withStandby(std::move(plan), in);
    }
    throw InternalKernelError("matmul: no oneDNN implementation");
  }

  /// `gemm` with a plan on dense copies for the calls made before gemm's kernels are ready,
  /// when oneDNN has one off its gemm implementation.
  std::unique_ptr<Plan> withStandby(std::unique_ptr<Plan> gemm, std::span<const RtValue> in) const {
    std::unique_ptr<Plan> standby;
    try {
      standby = densePlan(in, nullptr, true);
    } catch (const dnnl::error &) {
    } catch (const KernelError &) {
    }
    if (!standby || standby->info().starts_with("gemm:")) return gemm;
    auto plan = std::make_unique<GemmStandbyPlan>();
    plan->dtype = gemm->dtype;
    plan->resultSizes = gemm->resultSizes;
    plan->gemm = std::move(gemm);
    plan->standby = std::move(standby);
    return plan;
  }

  std::unique_ptr<Plan> causalPlan(std::span<const RtValue> in) const {
    Tensor A = tensorOf(s_.lhs, in), B = tensorOf(s_.rhs, in);
    if (!A.defined() || !B.defined() || A.rank() < 2 || B.rank() != A.rank())
      throw InternalKernelError("matmul: a causal product needs operands of one rank >= 2");
    auto plan = std::make_unique<CausalMatmulPlan>();
    plan->spec = &s_;
    plan->dtype = s_.dtype;
    plan->resultSizes = matmulGeometry(A, B, false).result;
    const size_t r = A.rank();
    const int64_t rows = A.size(r - 2), inner = A.size(r - 1), cols = B.size(r - 1);
    Dims dstStrides = contiguousStrides(plan->resultSizes);
    // Blocks read the operands through views of their own inputs; a shared input, or a binary
    // post-op with a tensor (which would need its blocks too), leaves the product whole.
    bool blockable = s_.lhs.input >= 0 && s_.rhs.input >= 0 && s_.lhs.input != s_.rhs.input;
    for (const PostOp &p : s_.post) {
      const RtValue *v = p.binary ? &p.other.get(in) : nullptr;
      if (v && v->isTensor() && v->tensor().numel() != 1) blockable = false;
    }
    const int64_t step = causalBlockRows();
    const bool byColumns = s_.causal == Causal::RhsLower;
    const int64_t extent = byColumns ? cols : rows;
    if (!blockable || extent < 2 * step) return densePlan(in, nullptr);
    plan->whole = densePlan(in, nullptr);
    plan->inner = plan->skippedFrom = inner;
    for (int64_t lo = 0; lo < extent; lo += step) {
      const int64_t hi = std::min(lo + step, extent);
      CausalMatmulPlan::Block b{lo, hi, 0, inner, 0, cols, nullptr};
      switch (s_.causal) {
      case Causal::LhsLower: b.k1 = std::min(hi, inner); break;
      case Causal::LhsUpper: b.k0 = std::min(lo, inner); break;
      case Causal::RhsLower: b = {0, rows, std::min(lo, inner), inner, lo, hi, nullptr}; break;
      case Causal::None: break;
      }
      plan->skippedBelow = std::max(plan->skippedBelow, b.k0);
      plan->skippedFrom = std::min(plan->skippedFrom, b.k1);
      if (b.k0 == b.k1) { // the whole block reads zeros
        plan->zeros.push_back(std::move(b));
        continue;
      }
      std::vector<RtValue> sub = plan->blockInputs(in, b);
      b.plan = densePlan(sub, &dstStrides);
      plan->blocks.push_back(std::move(b));
    }
    // Zeros are the product's value there, not its epilogue's (exp(0 + 1.5) is not 0): with
    // post-ops, a product that has regions of zeros runs whole.
    if (!plan->zeros.empty() && !s_.post.empty()) return std::move(plan->whole);
    return plan;
  }

  std::unique_ptr<Plan> makeGenericPlan(std::span<const RtValue> in) const override {
    // Operands read through their strides as they come (a tagged rhs too: a slice of a module's
    // KV cache buffer is not worth packing per shape); no prepacked constant weights, bias or
    // binary post-op but with a scalar (other operands' descriptors depend on the shape).
    Tensor A = tensorOf(s_.lhs, in), B = tensorOf(s_.rhs, in);
    // bf16 products (bf16Math) convert their operands: plans per shape.
    if (!A.defined() || !B.defined() || packed_ || s_.bias.present() || s_.dtype != DType::F32 ||
        (s_.fpmathBf16 && bf16ProductsNative()) || s_.causal != Causal::None ||
        !scalarBinaryOperands(s_, in))
      return nullptr;
    MatmulGeometry g = matmulGeometry(A, B, s_.transposeRhs);
    if (g.aVec || g.bVec || (g.fold && !g.aMerges)) return nullptr;
    auto plan = std::make_unique<GenericMatmulPlan>();
    plan->spec = &s_;
    plan->dtype = s_.dtype;
    plan->dt = *dnnlType(s_.dtype);
    plan->fold = g.fold;
    // This call's descriptors with their varying parts left to run time.
    plan->aAny = withRuntimeDims(g.fold ? stridedDesc(g.aSizes, g.aStrides, plan->dt)
                                        : stridedDesc(g.as, g.ast, plan->dt));
    plan->bAny = withRuntimeDims(stridedDesc(g.bs, g.bst, plan->dt));
    plan->dstAny = withRuntimeDims(stridedDesc(g.dstSizes, g.dstStrides, plan->dt));
    std::vector<PostOp> ops = s_.prologue;
    ops.insert(ops.end(), s_.post.begin(), s_.post.end());
    dnnl::post_ops po;
    plan->post = std::make_unique<BoundPostOps>(ops, in, g.result, g.resMap, false, po);
    dnnl::primitive_attr attr = userScratchpad();
    attr.set_post_ops(po);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(plan->aAny, plan->bAny, plan->dstAny), attr,
                                    cpuEngine());
    if (isReferenceImpl(pd)) return nullptr;
    plan->impl = pd.impl_info_str();
    plan->prim = dnnl::matmul(pd);
    return plan;
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

std::string whyNotMatmul(const CallIR &call) {
  const Op &op = *call.anchor;
  if (op.attrOrNull("causal") && (call.operands[0].constant || call.operands[1].constant ||
                                  op.operand(0)->type().rank() != op.operand(1)->type().rank()))
    return "matmul: a causal product of constant operands or operands of different ranks";
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
  s.fpmathBf16 = op.attrOrNull("fpmath") != nullptr;
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
    if (const Attr *c = op.attrOrNull("causal")) {
      const std::string &m = c->asStr();
      s.causal = m == "lhs_lower"   ? Causal::LhsLower
                 : m == "lhs_upper" ? Causal::LhsUpper
                 : m == "rhs_lower" ? Causal::RhsLower
                                    : Causal::None; // the verifier rejects other values
    }
    if (s.name == "linear" && call.operands.size() > 2) s.bias = call.operands[2];
  }
  return std::make_unique<MatmulKernel>(std::move(s));
}

} // namespace xjit::backend::dnnl_kernels
