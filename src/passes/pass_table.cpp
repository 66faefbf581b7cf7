// The pass table: every pass with its name, one-line summary, options and statistics.
#include "passes.h"

namespace xjit::passes {

// Entry points (one file each in src/passes).
// -- cleanup passes --
bool runDce(Graph &g, PassContext &ctx);              // dce.cpp
bool runCse(Graph &g, PassContext &ctx);              // cse.cpp
bool runConstantFold(Graph &g, PassContext &ctx);     // constant_fold.cpp
bool runCanonicalize(Graph &g, PassContext &ctx);     // canonicalize.cpp
bool runShapePropagation(Graph &g, PassContext &ctx); // shape_propagation.cpp
bool runInlineCustomVjp(Graph &g, PassContext &ctx);  // inline_custom_vjp.cpp
std::vector<std::string> canonicalizeRuleNames();     // canonicalize.cpp: its statistics
// -- semantic passes (freezing, device erasure, functionalization, mixed precision) --
bool runFreeze(Graph &g, PassContext &ctx);         // freeze.cpp
bool runEraseDeviceOps(Graph &g, PassContext &ctx); // erase_device_ops.cpp
bool runFunctionalize(Graph &g, PassContext &ctx);  // functionalize.cpp
bool runMixedPrecision(Graph &g, PassContext &ctx); // mixed_precision.cpp
bool runBf16Products(Graph &g, PassContext &ctx);   // bf16_products.cpp
// -- code-generation preparation (attention decomposition, layout, fusion, memory planning) --
bool runDecomposeAttention(Graph &g, PassContext &ctx);  // decompose_attention.cpp
bool runCausalProducts(Graph &g, PassContext &ctx);      // causal_products.cpp
bool runDecomposeBatchNorm(Graph &g, PassContext &ctx);  // decompose_batch_norm.cpp
bool runDecomposeGroupNorm(Graph &g, PassContext &ctx);  // decompose_group_norm.cpp
bool runDecomposeMatvec(Graph &g, PassContext &ctx);     // decompose_matvec.cpp
bool runWidenHalfProducts(Graph &g, PassContext &ctx);   // widen_half_products.cpp
bool runMergeProductSums(Graph &g, PassContext &ctx);    // merge_product_sums.cpp
bool runBatchRowProducts(Graph &g, PassContext &ctx);    // batch_row_products.cpp
bool runLayout(Graph &g, PassContext &ctx);              // layout.cpp
bool runSinkPermutes(Graph &g, PassContext &ctx);        // sink_permutes.cpp
bool runFuse(Graph &g, PassContext &ctx);                // fuse.cpp
bool runCollapseReducedDims(Graph &g, PassContext &ctx); // collapse_reduced_dims.cpp
bool runReinplace(Graph &g, PassContext &ctx);           // reinplace.cpp
bool runPlanMemory(Graph &g, PassContext &ctx);          // plan_memory.cpp
// -- training --
bool runAutodiff(Graph &g, PassContext &ctx); // autodiff.cpp (the frontend calls differentiate())

const std::vector<PassInfo> &passTable() {
  static const std::vector<PassInfo> table = {
      // -- cleanup passes --
      {.name = "dce",
       .summary = "removes pure ops whose results are unused, dead if results and dead "
                  "loop-carried values",
       .statistics = {"ops-removed", "results-removed"},
       .run = runDce},
      {.name = "cse",
       .summary = "merges pure ops that compute the same value (into nested blocks, never "
                  "across writes)",
       .statistics = {"ops-merged"},
       .run = runCse},
      {.name = "constant-fold",
       .summary = "evaluates ops on constant operands with the reference kernels and folds "
                  "static shape queries",
       .options = {{"max-elements", "65536",
                    "largest tensor (elements) read or produced by a folded op"}},
       .statistics = {"ops-folded", "shape-queries-folded"},
       .run = runConstantFold},
      {.name = "canonicalize",
       .summary = "algebraic simplifications and canonical forms (rewrite rules in "
                  "canonicalize_rules.cpp)",
       .statistics = canonicalizeRuleNames(),
       .run = runCanonicalize},
      {.name = "inline-custom-vjp",
       .summary = "replaces each custom_vjp (a torch.autograd.Function) by its forward region "
                  "(graphs that are not differentiated)",
       .statistics = {"functions-inlined"},
       .run = runInlineCustomVjp},
      {.name = "shape-propagation",
       .summary = "re-infers result types, pinning shape symbols that broadcasting assumes "
                  "equal to a static dim or to another symbol",
       .options = {{"bind", "", "symbols to specialize, e.g. s0=8;s1=128 (';'-separated)"}},
       .statistics = {"types-refined", "symbols-pinned"},
       .run = runShapePropagation},
      // -- semantic passes --
      {.name = "freeze",
       .summary = "for inference: folds eval-mode batch_norm with constant parameters into the "
                  "preceding conv/linear (else into a mul+add) and removes dropout that does "
                  "nothing",
       .options = {{"eval-mode", "false",
                    "the graph runs in eval mode: dropout with train=true is removed too"}},
       .statistics = {"batch-norms-folded", "batch-norms-to-mul-add", "dropouts-removed"},
       .run = runFreeze},
      {.name = "erase-device-ops",
       .summary = "removes device transfers that are no-ops on the target, normalizes copies "
                  "and devices, removes collectives over a group of one process",
       .options = {{"target", "cpu", "the device the graph runs on (cpu, cuda, cuda:0 ...)"}},
       .statistics = {"transfers-removed", "copies-normalized", "devices-normalized",
                      "collectives-removed"},
       .run = runEraseDeviceOps},
      {.name = "functionalize",
       .summary = "rewrites in-place ops (through views too) as pure ops producing new values, "
                  "keeping one final write-back per mutated graph input",
       .statistics = {"ops-functionalized", "views-rederived", "input-writebacks",
                      "copies-before-writeback", "refused"},
       .run = runFunctionalize},
      {.name = "mixed-precision",
       .summary = "opt-in AMP: f32 matmul/linear/bmm/addmm/baddbmm/conv/attention in bf16 or "
                  "f16 (f32 accumulation), other ops kept in f32, fewest casts",
       .options = {{"dtype", "bf16", "the low-precision dtype: bf16 or f16"}},
       .statistics = {"ops-lowered", "casts-inserted"},
       .run = runMixedPrecision},
      {.name = "bf16-products",
       .summary = "marks f32 matmul/mm/bmm/linear/addmm/baddbmm/attention `fpmath = bf16` "
                  "(captured under PyTorch's mkldnn matmul precision bf16: operands rounded "
                  "to bf16, f32 accumulation, as eager's oneDNN)",
       .statistics = {"products-marked"},
       .run = runBf16Products},
      // -- code-generation preparation --
      {.name = "decompose-attention",
       .summary = "rewrites f32 scaled_dot_product_attention as matmul, scale, mask, softmax "
                  "and matmul (library matmuls and a fused softmax instead of the reference "
                  "kernel); bf16/f16 attention computed so in f32, rounded once",
       .statistics = {"attentions-decomposed"},
       .run = runDecomposeAttention},
      {.name = "widen-half-products",
       .summary = "runs f16 linear/matmul/mm/bmm/addmm/baddbmm/convolutions on f32 "
                  "operands cast from f16, the result cast back (library kernels where the "
                  "CPU has no f16 products; same values)",
       .statistics = {"products-widened"},
       .run = runWidenHalfProducts},
      {.name = "causal-products",
       .summary = "marks matmuls of causal attention with a triangular operand (matmul's "
                  "`causal`), so that the backend skips the blocks that multiply its zeros",
       .statistics = {"products-lhs_lower", "products-lhs_upper", "products-rhs_lower"},
       .run = runCausalProducts},
      {.name = "decompose-batch-norm",
       .summary = "rewrites eval-mode f32/f64 batch_norm with run-time parameters as x * scale + "
                  "shift over per-channel vectors (convolution post-ops instead of the "
                  "reference kernel); bf16/f16 inputs with f32 parameters in f32, rounded once",
       .statistics = {"batch-norms-decomposed"},
       .run = runDecomposeBatchNorm},
      {.name = "decompose-group-norm",
       .summary = "rewrites f32/f64 group_norm as a layer norm over [N, groups, rest] rows and a "
                  "per-channel affine map (native loop kernels instead of the reference kernel)",
       .statistics = {"group-norms-decomposed"},
       .run = runDecomposeGroupNorm},
      {.name = "decompose-matvec",
       .summary = "rewrites f32/f64 linear/matmul/mm/addmm of a single input row as a multiply "
                  "and a sum over the features (one fused loop kernel streaming the weight "
                  "instead of a library GEMM call); a batched matmul with a single column as a "
                  "multiply and a row sum",
       .options = {{"columns", "false",
                    "also rewrite a [K, N] rhs that is not a transpose (a reduction over its "
                    "outer dim)"}},
       .statistics = {"rows-decomposed", "columns-decomposed", "column-products"},
       .run = runDecomposeMatvec},
      {.name = "merge-product-sums",
       .summary = "rewrites a sum of f32/f64 mm products with small inner dims (a weight's "
                  "gradient over the steps of a recurrence) as one mm over the concatenated "
                  "inner dim",
       .statistics = {"sums-merged", "products-merged"},
       .run = runMergeProductSums},
      {.name = "batch-row-products",
       .summary = "rewrites single-row f32/f64 linears sharing a weight, none depending on "
                  "another (an unrolled recurrence's input projections), as one linear of the "
                  "stacked rows; the ops using them move after it",
       .statistics = {"batches", "rows-batched"},
       .run = runBatchRowProducts},
      {.name = "layout",
       .summary = "runs chains of convolutions/poolings and the elementwise ops between them "
                  "channels-last, converting only at a chain's edges",
       .options = {{"target-layout", "nhwc", "nhwc (channels-last) or nchw (channels-first)"},
                   {"min-convs", "2", "fewest convolutions/poolings in a chain worth converting"}},
       .statistics = {"chains", "ops-converted", "conversions", "operands-adapted",
                      "returned-copies"},
       .run = runLayout},
      {.name = "sink-permutes",
       .summary = "computes contiguous(permute(y)) in the permuted order: the permute moves into "
                  "the elementwise ops, reductions and convolutions computing y (folding with "
                  "permutes it meets) and the copy goes",
       .statistics = {"copies-removed", "ops-reordered"},
       .run = runSinkPermutes},
      {.name = "fuse",
       .summary = "groups elementwise chains, reductions with their elementwise producers and "
                  "consumers, and matmul/conv epilogues into fusion ops",
       .options = {{"max-group-size", "64", "most ops in one group"},
                   {"min-group-size", "2", "fewest computing ops (views not counted) in a group"},
                   {"duplicate-cheap", "true",
                    "clone cheap producers (views, one-op arithmetic) into every group that "
                    "reads them instead of reading them from memory"}},
       .statistics = {"groups-elementwise", "groups-reduction", "groups-epilogue", "ops-fused",
                      "ops-duplicated"},
       .run = runFuse},
      {.name = "collapse-reduced-dims",
       .summary = "merges a reduction's trailing run of reduced dims into one (mean over H, W of "
                  "[N, C, H, W] over H*W of [N, C, H*W]) so that its kernel's inner loop is long",
       .statistics = {"fusions-collapsed", "reductions-collapsed"},
       .run = runCollapseReducedDims},
      {.name = "reinplace",
       .summary = "computes outputs that the caller copies back into an input (return's "
                  "io.input_of) in that input's memory: index_put on it becomes index_put_, a "
                  "scatter through views a copy_ into them",
       .statistics = {"index-puts-in-place", "scatters-to-copies", "refused"},
       .run = runReinplace},
      {.name = "plan-memory",
       .summary = "assigns static-size intermediates arena offsets (liveness, best-fit reuse, "
                  "in-place elementwise updates) as mem.* annotations",
       .options = {{"in-place", "true",
                    "let an elementwise result reuse the buffer of an operand that dies there "
                    "(mem.inplace)"}},
       .statistics = {"peak-bytes", "naive-bytes", "values-planned", "in-place", "output-values",
                      "host-view-values", "dynamic-values"},
       .run = runPlanMemory},
      // -- training --
      {.name = "autodiff",
       .summary = "reverse-mode autodiff: the forward graph (outputs + saved values) and the "
                  "backward graph (grad outputs + saved -> input grads), one derivative rule per "
                  "op; with wrt empty it changes nothing",
       .options = {{"wrt", "", "inputs to differentiate: indices (0,2) or all; empty: none"},
                   {"part", "backward", "the graph it leaves: joint, forward or backward"}},
       .statistics = {"graphs-differentiated", "saved-values"},
       .run = runAutodiff},
  };
  return table;
}

} // namespace xjit::passes
