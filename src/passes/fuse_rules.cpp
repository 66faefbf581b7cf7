// The fuse pass's op tables: fusible classes, epilogue post-ops and cheap producers.
#include "fuse_rules.h"

#include "xjit/ir/op_registry.h"
#include "xjit/ir/sym_attr.h"

#include <algorithm>
#include <string_view>
#include <unordered_set>

namespace xjit::passes::fuse_rules {
namespace {

using Names = std::unordered_set<std::string_view>;

/// Library calls that apply post-ops to their result (oneDNN matmul / convolution).
const Names kAnchors = {"matmul",
                        "mm",
                        "bmm",
                        "linear",
                        "addmm",
                        "baddbmm",
                        "conv1d",
                        "conv2d",
                        "conv3d",
                        "conv_transpose1d",
                        "conv_transpose2d",
                        "conv_transpose3d"};

/// Views that only re-index their operand: inside a loop kernel they cost nothing.
const Names kBroadcasts = {"expand", "expand_as", "unsqueeze", "squeeze"};

/// Row-wise ops: they reduce the rows given by an attribute and return a full-shaped result.
const Names kRowOps = {"softmax", "log_softmax", "layer_norm", "rms_norm"};

/// Activations with an eltwise post-op in oneDNN (relu with alpha = leaky_relu, clip = clamp /
/// hardtanh / relu6, linear = neg, soft_relu = softplus, swish = silu, gelu_erf / gelu_tanh).
const Names kUnaryPostOps = {"relu",  "leaky_relu", "elu",         "tanh",     "sigmoid", "exp",
                             "log",   "sqrt",       "abs",         "square",   "gelu",    "silu",
                             "mish",  "hardswish",  "hardsigmoid", "hardtanh", "relu6",   "clamp",
                             "round", "softplus",   "neg"};

/// Binary post-ops (oneDNN binary_*): dst op other, `other` broadcast to the result.
const Names kBinaryPostOps = {"add", "sub", "mul", "div", "maximum", "minimum"};
const Names kCommutativePostOps = {"add", "mul", "maximum", "minimum"};

/// One arithmetic instruction per element.
const Names kCheapOps = {"neg", "abs",  "relu",    "add",     "sub",         "mul",
                         "div", "cast", "maximum", "minimum", "eq",          "ne",
                         "lt",  "le",   "gt",      "ge",      "logical_not", "bitwise_not"};

bool singleTensorResult(const Op &op) {
  return op.numResults() == 1 && op.result(0)->type().isTensor();
}

/// Tensors of a single element broadcast like scalars.
bool isSingleElement(const Type &t) {
  if (!t.isTensor()) return true;
  for (const DimExpr &d : t.shape())
    if (d != DimExpr(1)) return false;
  return true;
}

std::vector<int64_t> normalized(std::vector<int64_t> dims, int64_t rank) {
  if (dims.empty()) // an empty list reduces every dim
    for (int64_t d = 0; d < rank; ++d)
      dims.push_back(d);
  for (int64_t &d : dims)
    if (d < 0) d += std::max<int64_t>(rank, 1);
  std::sort(dims.begin(), dims.end());
  dims.erase(std::unique(dims.begin(), dims.end()), dims.end());
  if (rank == 0) dims.clear(); // a 0-d tensor reduces over nothing
  return dims;
}

bool alphaIsOne(const Op &op) {
  const Attr *a = op.attrOrNull("alpha");
  return !a || a->asNumber() == 1.0;
}

} // namespace

bool isLibraryProduct(std::string_view name) { return kAnchors.count(name) > 0; }

FuseClass classify(const Op &op) {
  const OpDef &def = op.def();
  if (!def.isPure() || op.numRegions() > 0 || !singleTensorResult(op)) return FuseClass::None;
  // Sizes over shape symbols are evaluated per call by the runtime, outside generated kernels.
  if (hasSymbolicSizes(op)) return FuseClass::None;
  if (def.has(kElementwise)) return FuseClass::Elementwise;
  if (kBroadcasts.count(def.name)) return FuseClass::Broadcast;
  if (kAnchors.count(def.name)) return FuseClass::Anchor;
  if (!op.numOperands() || !op.operand(0)->type().isTensor()) return FuseClass::None;
  if (def.has(kReduction) && def.attrSpec("dims") && def.attrSpec("keepdim"))
    return FuseClass::Reduction;
  if (kRowOps.count(def.name)) return FuseClass::Row;
  return FuseClass::None;
}

std::optional<ReduceAxes> reduceAxes(const Op &op) {
  FuseClass c = classify(op);
  if (c != FuseClass::Reduction && c != FuseClass::Row) return std::nullopt;
  const Type &in = op.operand(0)->type();
  int64_t rank = in.rank();
  std::vector<int64_t> dims;
  if (c == FuseClass::Reduction) {
    dims = op.attrOrNull("dims")->asInts();
    if (dims.empty()) return ReduceAxes{in.shape(), normalized({}, rank)};
  } else if (const Attr *d = op.attrOrNull("dim")) {
    dims = {d->asInt()};
  } else if (const Attr *ns = op.attrOrNull("normalized_shape")) {
    int64_t k = static_cast<int64_t>(ns->asInts().size());
    if (k > rank) return std::nullopt;
    for (int64_t i = rank - k; i < rank; ++i)
      dims.push_back(i);
  } else {
    return std::nullopt;
  }
  for (int64_t d : dims)
    if (d < -std::max<int64_t>(rank, 1) || d >= std::max<int64_t>(rank, 1)) return std::nullopt;
  return ReduceAxes{in.shape(), normalized(dims, rank)};
}

bool isPostOp(const Op &op, const Value *chain) {
  std::string_view name = op.name();
  if (kUnaryPostOps.count(name)) return op.numOperands() == 1 && op.operand(0) == chain;
  if (!kBinaryPostOps.count(name) || op.numOperands() != 2 || !alphaIsOne(op)) return false;
  bool left = op.operand(0) == chain, right = op.operand(1) == chain;
  if (left == right) return false; // the chain must be exactly one operand
  return left || kCommutativePostOps.count(name);
}

bool convTakesPostOp(const Op &anchor, const Op &op, const Value *chain) {
  if (op.numOperands() < 2) return true;
  const Value *other = op.operand(0) == chain ? op.operand(1) : op.operand(0);
  if (isSingleElement(other->type())) return true;
  // oneDNN 2.6 has only its reference deconvolution with a tensor binary post-op: 14x slower
  // than the deconvolution and a native elementwise kernel (a training step's conv gradients).
  if (anchor.name().starts_with("conv_transpose")) return false;
  return op.name() != "mul" || other->type() == chain->type();
}

bool causalTakesPostOp(const Op &op, const Value *chain) {
  if (op.numOperands() < 2) return true;
  const Value *other = op.operand(0) == chain ? op.operand(1) : op.operand(0);
  return isSingleElement(other->type());
}

namespace {
/// The oneDNN eltwise algorithm (with parameters) a unary post-op maps to, as the backend's
/// eltwiseFor does; empty for one without parameters.
std::string_view parametrizedEltwise(const Op &op) {
  std::string_view n = op.name();
  if (n == "relu" || n == "leaky_relu") return "relu";
  if (n == "clamp" || n == "hardtanh" || n == "relu6") return "clip";
  if (n == "elu") return "elu";
  if (n == "neg") return "linear";
  if (n == "silu") return "swish";
  return {};
}
} // namespace

bool eltwiseParamsClash(const Op &earlier, const Op &later) {
  if (earlier.numOperands() != 1 || later.numOperands() != 1) return false;
  std::string_view a = parametrizedEltwise(earlier), b = parametrizedEltwise(later);
  if (a.empty() || a != b) return false;
  return earlier.name() != later.name() || !(earlier.attrs() == later.attrs());
}

bool isCheap(const Op &op) {
  FuseClass c = classify(op);
  if (c == FuseClass::Broadcast) return true;
  if (c != FuseClass::Elementwise || !kCheapOps.count(op.name())) return false;
  int tensors = 0;
  for (const Value *v : op.operands())
    tensors += !isSingleElement(v->type());
  return tensors <= 1;
}

} // namespace xjit::passes::fuse_rules
