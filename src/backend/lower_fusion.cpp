// Regions -> kernel IR: elementwise / broadcast regions (see xjit/backend/lower.h for the
// scheme) and reduction regions (reductions and row ops over one full shape and reduced dims,
// with their elementwise producers and consumers; see "reduction kernels" below and
// docs/backend.md). whyNotElementwise accepts the reductions reduction_rules.cpp knows, and
// whyNotLowerable checks a reduction region's structure by lowering it.
#include "xjit/backend/lower.h"

#include "lower_internal.h"
#include "ops/movement_util.h" // resolveSlice
#include "ops/op_util.h"
#include "sum_cascade.h"
#include "xjit/ir/diagnostics.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>

namespace xjit::backend {
namespace {

[[noreturn]] void unsupported(const std::string &what) {
  throw Error(ErrorKind::Internal, "cannot lower to an elementwise kernel: " + what);
}

bool isStaticOne(const DimExpr &d) { return d.isStatic() && d.value() == 1; }

/// Which of a nest's loops (extents outermost first) runs in parallel: the first of the first
/// `limit` whose extent is not a static 1, else the outermost.
size_t parallelDim(const std::vector<Expr> &extents, size_t limit) {
  for (size_t d = 0; d < std::min(limit, extents.size()); ++d)
    if (!isConst(extents[d], 1)) return d;
  return 0;
}

/// One shared index 0, so that equal index vectors are pointer-equal (the memo's key).
const Expr &zeroIdx() {
  static const Expr zero = constIdx(0);
  return zero;
}

/// Ops that only remap indices (repeat and tile read index i of a tiled dim at i mod its size,
/// flip reads n - 1 - i).
const std::set<std::string, std::less<>> kViewOps = {
    "expand", "expand_as", "unsqueeze",  "squeeze", "permute", "transpose", "t",    "slice",
    "select", "narrow",    "contiguous", "clone",   "alias",   "repeat",    "tile", "flip"};

/// Operand 0's dim `d` must be static for index arithmetic that depends on its size.
std::string needStaticDim(const Op &op, const char *attr) {
  const Type &t = op.operand(0)->type();
  if (!t.isTensor() || t.rank() == 0) return op.name() + ": needs a tensor operand with dims";
  int64_t d = ops::normDim(ops::attrInt(op, attr), t.rank());
  if (!t.shape()[size_t(d)].isStatic())
    return op.name() + ": dim " + std::to_string(d) + " is symbolic";
  return "";
}

std::string whyNotView(const Op &op) {
  if (op.numOperands() < 1 || !op.operand(0)->type().isTensor())
    return op.name() + ": operand is not a tensor";
  const std::string &n = op.name();
  if (n == "slice" || n == "select" || n == "narrow") return needStaticDim(op, "dim");
  if (n == "flip") {
    const Shape &in = op.operand(0)->type().shape();
    for (int64_t d : ops::attrInts(op, "dims"))
      if (in.empty() || !in[size_t(ops::normDim(d, int64_t(in.size())))].isStatic())
        return "flip: a flipped dim is symbolic";
  }
  if (n == "repeat" || n == "tile") {
    const Shape &in = op.operand(0)->type().shape(), &out = op.result(0)->type().shape();
    for (size_t j = 0, lead = out.size() - in.size(); j < in.size(); ++j)
      if (!in[j].isStatic() && in[j] != out[lead + j])
        return n + ": tiles dim " + std::to_string(j) + ", whose size is symbolic";
  }
  return "";
}

/// gather reads self at an index loaded from `index` (checked per element): static dims, index
/// no larger than self except along dim (what the reference kernel checks at run time).
std::string whyNotGather(const Op &op) {
  const Type &self = op.operand(0)->type(), &index = op.operand(1)->type();
  if (!self.isTensor() || !index.isTensor() || self.rank() == 0 || self.rank() != index.rank())
    return "gather: needs tensors of one rank >= 1";
  int64_t dim = ops::normDim(ops::attrInt(op, "dim"), self.rank());
  for (int64_t d = 0; d < self.rank(); ++d) {
    const DimExpr &a = self.shape()[size_t(d)], &b = index.shape()[size_t(d)];
    if (!a.isStatic() || !b.isStatic()) return "gather: symbolic sizes";
    if (d != dim && b.value() > a.value()) return "gather: index larger than self";
  }
  return "";
}

/// index with one integer index tensor on dim 0 (`x[idx]`, MoE token gathers) reads self at
/// the loaded index (negative ones wrap, checked per element): static sizes. Other forms
/// (several indices, a leading `None`) stay the reference kernel.
std::string whyNotIndex(const Op &op) {
  if (op.numOperands() != 2) return "index: only one index tensor (x[idx])";
  const Type &self = op.operand(0)->type(), &index = op.operand(1)->type();
  if (!self.isTensor() || self.rank() == 0 || !index.isTensor())
    return "index: needs a tensor of rank >= 1 and an index tensor";
  if (index.dtype() != DType::I64 && index.dtype() != DType::I32) return "index: integer index";
  for (const Shape *s : {&self.shape(), &index.shape()})
    for (const DimExpr &d : *s)
      if (!d.isStatic()) return "index: symbolic sizes";
  return "";
}

/// pad reads a padded dim through its mode's index map (reflect, replicate, circular): static,
/// non-empty padded dims.
std::string whyNotPad(const Op &op) {
  const Type &t = op.operand(0)->type();
  if (!t.isTensor()) return "pad: operand is not a tensor";
  // A constant pad's reference kernel (a fill, then one strided copy) took 45 us on a
  // [1,48,64,64] pad where this loop's clamped loads took 122 us; the other modes' took 6.3 ms.
  if (ops::mv::padMode(op) == ops::mv::PadMode::Constant)
    return "pad: constant mode runs as a fill and a copy";
  auto amounts = ops::mv::padAmounts(op, t.rank());
  for (size_t d = 0; d < amounts.size(); ++d) {
    if (amounts[d] == std::pair<int64_t, int64_t>{0, 0}) continue;
    std::optional<int64_t> n = t.shape()[d].staticValue();
    if (!n || *n == 0) return "pad: a padded dim is symbolic or empty";
  }
  return "";
}

std::string whyNotConstant(const Op &op) {
  const Attr *v = op.attrOrNull("value");
  if (!v) return "constant: none is not a number";
  switch (v->kind()) {
  case AttrKind::Int:
  case AttrKind::Float:
  case AttrKind::Bool: return "";
  case AttrKind::Tensor: {
    const Tensor &t = v->asTensor();
    for (int64_t i = 1; i < t.numel(); ++i)
      if (isFloating(t.dtype()) ? t.getDouble(i) != t.getDouble(0) : t.getInt(i) != t.getInt(0))
        return "constant: a non-uniform tensor constant (pass it as an input)";
    return t.numel() == 0 ? "constant: an empty tensor constant" : "";
  }
  default: return "constant: " + v->str() + " is not a number";
  }
}

Expr constantExpr(const Op &op) {
  const Attr &v = *op.attrOrNull("value");
  switch (v.kind()) {
  case AttrKind::Int: return constInt(DType::I64, v.asInt());
  case AttrKind::Float: return constFloat(DType::F64, v.asFloat());
  case AttrKind::Bool: return constBool(v.asBool());
  default: {
    const Tensor &t = v.asTensor(); // uniform (whyNotConstant)
    return isFloating(t.dtype()) ? constFloat(t.dtype(), t.getDouble(0))
                                 : constInt(t.dtype(), t.getInt(0));
  }
  }
}

/// Operand index for a result index under broadcasting: leading result dims are dropped and
/// dims the operand broadcasts (static 1 against anything else) read index 0.
std::vector<Expr> broadcastIndex(const std::vector<Expr> &idx, const Shape &operand,
                                 const Shape &result) {
  size_t lead = result.size() - operand.size();
  std::vector<Expr> out;
  for (size_t j = 0; j < operand.size(); ++j)
    out.push_back(isStaticOne(operand[j]) && !isStaticOne(result[lead + j]) ? zeroIdx()
                                                                            : idx[lead + j]);
  return out;
}

/// result dim j is operand dim perm[j].
std::vector<int64_t> viewPermutation(const Op &op, int64_t rank) {
  std::vector<int64_t> perm(static_cast<size_t>(rank));
  for (int64_t i = 0; i < rank; ++i)
    perm[size_t(i)] = i;
  const std::string &n = op.name();
  if (n == "permute") {
    const auto &dims = ops::attrInts(op, "dims");
    for (int64_t i = 0; i < rank; ++i)
      perm[size_t(i)] = ops::normDim(dims[size_t(i)], rank);
  } else if (n == "transpose" && rank > 0) {
    std::swap(perm[size_t(ops::normDim(ops::attrInt(op, "dim0"), rank))],
              perm[size_t(ops::normDim(ops::attrInt(op, "dim1"), rank))]);
  } else if (n == "t" && rank == 2) {
    std::swap(perm[0], perm[1]);
  }
  return perm;
}

/// The dim of tensor v expected to have unit stride: the last, unless v is a graph input the
/// frontend saw laid out otherwise (its unit_dim hint: a transposed or channels_last input) or
/// a permutation (permute, transpose, t) of such a value, where it is the dim the source's unit
/// dim went to (a guess the kernel's stride check confirms at run time; a kernel reading a
/// transposed view then gets a fast version laid out for it instead of the general one). -1 for
/// rank 0.
int64_t expectedUnitDim(const Value *v) {
  const Type &t = v->type();
  if (!t.isTensor()) return -1;
  int64_t rank = t.rank();
  if (v->isBlockArgument() && v->unitDimHint() >= 0 && v->unitDimHint() < rank)
    return v->unitDimHint();
  const Op *op = v->definingOp();
  if (rank < 2 || !op || op->numOperands() < 1) return rank - 1;
  const std::string &n = op->name();
  const Type &src = op->operand(0)->type();
  if ((n != "permute" && n != "transpose" && n != "t") || !src.isTensor() || src.rank() != rank)
    return rank - 1;
  int64_t unit = expectedUnitDim(op->operand(0));
  std::vector<int64_t> perm = viewPermutation(*op, rank);
  for (int64_t j = 0; j < rank; ++j)
    if (perm[size_t(j)] == unit) return j;
  return rank - 1;
}

enum class Mode { General, InnerUnit, Flat };

/// Thrown while building a fast version that does not apply.
struct NotApplicable {};

std::string sanitize(const std::string &s) {
  std::string out;
  for (char c : s)
    out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  if (out.empty() || std::isdigit(static_cast<unsigned char>(out[0]))) out = "k_" + out;
  return out;
}

/// The constant op an outer input is folded from (a number constant), or null.
const Op *foldedConstant(const Value *outer) {
  const Op *c = outer->definingOp();
  return c && c->name() == "constant" && !outer->type().isTensor() && whyNotConstant(*c).empty()
             ? c
             : nullptr;
}

/// Whether a chunk/split cuts its operand along a dim after one of size > 1: its pieces are
/// strided rows.
bool splitsRows(const Op &op) {
  const Type &t = op.operand(0)->type();
  const Attr *d = op.attrOrNull("dim");
  int64_t dim = d ? d->asInt() : 0;
  if (dim < 0) dim += t.rank();
  for (int64_t i = 0; i < dim && i < t.rank(); ++i)
    if (!isStaticOne(t.shape()[size_t(i)])) return true;
  return false;
}

/// Whether an outer input is a slice view (a tiled max-pool gradient reads x[.., a::2, b::2];
/// the gates of an LSTM step, chunks of [B, 4H] rows): not dense.
bool isSliceView(const Value *outer) {
  const Op *op = outer->definingOp();
  if (!op) return false;
  if (op->name() == "slice") return true;
  return (op->name() == "chunk" || op->name() == "split" || op->name() == "split_with_sizes") &&
         splitsRows(*op);
}

class Lowering {
public:
  /// `outerInputs`: the values the inputs are bound to outside the region (a fusion's
  /// operands), or empty; number constants among them are folded into the kernel.
  Lowering(std::vector<Value *> inputs, std::vector<const Op *> ops, std::vector<Value *> outputs,
           const std::string &name, const LowerOptions &opts,
           std::span<Value *const> outerInputs = {})
      : inputs_(std::move(inputs)), outputs_(std::move(outputs)), opts_(opts), name_(name),
        outerInputs_(outerInputs) {
    // What is read from outside the region (folded constants here, expectedUnitDim and
    // isSliceView below) is also in fusionLoweringKey.
    for (size_t i = 0; outerInputs.size() == inputs_.size() && i < inputs_.size(); ++i)
      if (const Op *c = foldedConstant(outerInputs[i])) constantInputs_[i] = c;
    lk_.kernel.name = sanitize(name);
    for (const Op *op : ops)
      ops_.insert(op);
    opsInOrder_ = std::move(ops);
  }

  LoweredKernel run() {
    declareParams();
    // Outputs of one shape share a loop nest.
    std::vector<std::pair<Shape, std::vector<size_t>>> groups;
    for (size_t k = 0; k < outputs_.size(); ++k) {
      const Shape &s = outputs_[k]->type().shape();
      auto it =
          std::find_if(groups.begin(), groups.end(), [&](const auto &g) { return g.first == s; });
      if (it == groups.end())
        groups.push_back({s, {k}});
      else
        it->second.push_back(k);
    }
    StmtList body;
    collectReductions();
    if (!reductions_.empty()) {
      body = emitReductionKernel();
    } else {
      for (const auto &[shape, outs] : groups)
        for (Stmt &s : emitGroup(shape, outs))
          body.push_back(std::move(s));
    }
    // Checks on scalar operands run before any loop, and so does the stride check, so that a
    // kernel that returns kRunGeneral has stored nothing.
    StmtList all = std::move(asserts_);
    if (!strideChecks_.empty()) {
      all.push_back(assertTrue(andAll(strideChecks_), kStrideCheck));
      LowerOptions generalOpts = opts_;
      generalOpts.fastPaths = false;
      lk_.kernel.general = std::make_shared<const Kernel>(
          Lowering(inputs_, opsInOrder_, outputs_, name_, generalOpts, outerInputs_).run().kernel);
    }
    for (Stmt &s : body)
      all.push_back(std::move(s));
    lk_.kernel.body = std::move(all);
    if (opts_.verify) verifyKernelOrThrow(lk_.kernel);
    return std::move(lk_);
  }

private:
  std::string paramName(Value *v, const std::string &fallback) {
    std::string n = v->name();
    bool ok = !n.empty() && std::all_of(n.begin(), n.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
    });
    if (!ok || !usedNames_.insert(n).second) n = fallback;
    usedNames_.insert(n);
    return n;
  }

  void declareParams() {
    Kernel &k = lk_.kernel;
    for (size_t i = 0; i < inputs_.size(); ++i) {
      Value *v = inputs_[i];
      const Type &t = v->type();
      lk_.inputTypes.push_back(t);
      lk_.inputBuffer.push_back(-1);
      lk_.inputScalar.push_back(-1);
      if (!inputIndex_.emplace(v, i).second)
        continue; // the same value twice (add(x, x)): the first binding serves both
      std::string name = paramName(v, "in" + std::to_string(i));
      if (t.isTensor()) {
        lk_.inputBuffer[i] = int64_t(k.buffers.size());
        k.buffers.push_back({name, t.dtype(), t.shape(), false});
        unitDim_.push_back(outerInputs_.size() == inputs_.size() ? expectedUnitDim(outerInputs_[i])
                                                                 : t.rank() - 1);
      } else if (t.isScalar()) {
        lk_.inputScalar[i] = int64_t(k.scalars.size());
        DType d = t.kind() == TypeKind::Float ? DType::F64
                  : t.kind() == TypeKind::Int ? DType::I64
                                              : DType::Bool;
        k.scalars.push_back({name, d});
      } else if (t.kind() != TypeKind::None) {
        unsupported("input " + std::to_string(i) + " has type " + t.str());
      }
    }
    for (size_t o = 0; o < outputs_.size(); ++o) {
      const Type &t = outputs_[o]->type();
      if (!t.isTensor())
        unsupported("output " + std::to_string(o) + " has type " + t.str() +
                    " (only tensor outputs)");
      lk_.outputTypes.push_back(t);
      lk_.outputBuffer.push_back(int64_t(k.buffers.size()));
      k.buffers.push_back({"out" + std::to_string(o), t.dtype(), t.shape(), true});
      unitDim_.push_back(t.rank() - 1); // the runtime's buffers are contiguous
    }
  }

  StmtList emitGroup(const Shape &shape, const std::vector<size_t> &outs) {
    if (!opts_.fastPaths || shape.empty()) return emitVariant(Mode::General, shape, outs);
    StmtList general;
    if (!opts_.lazyGeneral) general = emitVariant(Mode::General, shape, outs);
    for (Mode m : {Mode::Flat, Mode::InnerUnit}) {
      if (m == Mode::Flat && readsSlice()) continue;
      if (m == Mode::InnerUnit && isStaticOne(shape.back())) break;
      try {
        StmtList fast = emitVariant(m, shape, outs);
        if (conds_.empty())
          return fast; // nothing to check (e.g. every buffer has a static 1 inner dim)
        return versioned(std::move(fast), std::move(general));
      } catch (const NotApplicable &) {
      }
    }
    return opts_.lazyGeneral ? emitVariant(Mode::General, shape, outs) : std::move(general);
  }

  /// Whether an input is a slice view: the flat version's check would always fail and the call
  /// run the general version; the inner-unit version only needs the last dim's unit stride.
  bool readsSlice() const {
    return std::any_of(outerInputs_.begin(), outerInputs_.end(), isSliceView);
  }

  /// The fast version under the checks in conds_: with lazyGeneral the checks go to the kernel's
  /// stride check (emitted by run() before any loop) and the general version into its own
  /// kernel; else an if/else over both versions.
  StmtList versioned(StmtList fast, StmtList general) {
    if (!opts_.lazyGeneral) return {ifThen(andAll(conds_), std::move(fast), std::move(general))};
    strideChecks_.insert(strideChecks_.end(), conds_.begin(), conds_.end());
    return fast;
  }

  StmtList emitVariant(Mode mode, const Shape &shape, const std::vector<size_t> &outs) {
    Kernel &k = lk_.kernel;
    mode_ = mode;
    shape_ = shape;
    memo_.clear();
    conds_.clear();
    condBuffers_.clear();
    size_t rank = shape.size();
    int64_t firstOut = lk_.outputBuffer[outs.front()];
    extents_.clear();
    for (size_t d = 0; d < rank; ++d)
      extents_.push_back(shape[d].isStatic() ? constIdx(shape[d].value())
                                             : sizeOf(firstOut, int64_t(d)));
    // Flat mode indexes with placeholders that must never reach the kernel (negative ids).
    std::vector<int64_t> ids;
    iter_.clear();
    for (size_t d = 0; d < rank; ++d) {
      int64_t id = mode == Mode::Flat ? -1 - int64_t(d) : k.newVar();
      ids.push_back(id);
      iter_.push_back(var(id));
    }
    if (mode == Mode::Flat) flatVar_ = var(k.newVar());
    // A transposed input: dims tileDim and last run in tiles (see emitTiledLoops); their indices
    // are block * kTile + offset.
    int64_t tileDim = mode == Mode::InnerUnit ? transposedInputDim(shape) : -1;
    int64_t blockIds[2] = {-1, -1};
    if (tileDim >= 0)
      for (int t = 0; t < 2; ++t) {
        size_t d = t == 0 ? size_t(tileDim) : rank - 1;
        blockIds[t] = k.newVar();
        iter_[d] = addIdx(mulIdx(var(blockIds[t]), constIdx(kTile)), var(ids[d]));
      }
    StmtList body;
    elementChecks_.clear();
    for (size_t o : outs) {
      int64_t b = lk_.outputBuffer[o];
      Expr value = cast(k.buffers[size_t(b)].dtype, valueAt(outputs_[o], iter_));
      for (Stmt &check : elementChecks_) // gather's index checks, before the first use
        body.push_back(std::move(check));
      elementChecks_.clear();
      body.push_back(store(b, offsetOf(b, iter_), std::move(value)));
    }
    if (mode == Mode::Flat) {
      Expr numel = constIdx(1);
      for (const Expr &e : extents_)
        numel = mulIdx(numel, e);
      return {parallelFor(flatVar_->index, numel, constIdx(1), std::move(body))};
    }
    if (rank == 0) return body;
    if (tileDim >= 0) return emitTiledLoops(std::move(body), ids, size_t(tileDim), blockIds);
    // One loop runs in parallel, outermost; one of its iterations covers the other dims. It is
    // the first dim whose extent is not a static 1 (a leading batch of one left nothing to split),
    // never the innermost one, which stays innermost for the vectorizer. Unit loops go inside it:
    // their place in the nest changes nothing.
    size_t par = parallelDim(extents_, rank - 1);
    for (size_t d = rank; d-- > 0;)
      if (d != par) body = {forLoop(ids[d], extents_[d], std::move(body), mode != Mode::General)};
    Expr work = constIdx(1);
    for (size_t d = 0; d < rank; ++d)
      if (d != par) work = mulIdx(work, extents_[d]);
    return {parallelFor(ids[par], extents_[par], work, std::move(body), mode != Mode::General)};
  }

  // ---- tiles ----
  //
  // An input read through a transposed view (its unit-stride dim u is not the last) and an output
  // written in memory order cannot both be read in memory order by one loop nest: a row of the
  // output reads a column of the input, one cache line per element, and a 512x512 f32 column
  // does not stay in L1 until the next row reads its neighbours. Dims u and last are cut into
  // kTile x kTile tiles (kTile f32 columns of the input are kTile x 128 bytes: L1-resident while
  // the tile's rows read them), with the last dim innermost and vectorized (unit-stride stores,
  // strided loads).
  static constexpr int64_t kTile = 32;

  /// The dim u != last of the first input buffer of the iteration's rank whose expected unit
  /// stride is along u (a transposed view), or -1.
  int64_t transposedInputDim(const Shape &shape) const {
    size_t rank = shape.size();
    if (rank < 2 || isStaticOne(shape.back())) return -1;
    const Kernel &k = lk_.kernel;
    for (int64_t b : lk_.inputBuffer) {
      if (b < 0 || k.buffers[size_t(b)].sizes.size() != rank) continue;
      int64_t u = unitDim_[size_t(b)];
      if (u >= 0 && u + 1 < int64_t(rank) && !isStaticOne(shape[size_t(u)])) return u;
    }
    return -1;
  }

  /// The loop nest of a tiled InnerUnit version around `body`: the other dims outermost, then
  /// the blocks of dim u and of the last dim, then the tile's rows (dim u) and its columns (the
  /// last dim, innermost). The parallel loop is the first other dim whose extent is not a static
  /// 1, else the blocks of u.
  StmtList emitTiledLoops(StmtList body, const std::vector<int64_t> &ids, size_t u,
                          const int64_t blockIds[2]) {
    size_t rank = extents_.size(), last = rank - 1;
    auto blocks = [&](size_t d) {
      const DimExpr &n = shape_[d];
      return n.isStatic() ? constIdx((n.value() + kTile - 1) / kTile)
                          : binary(BinaryOp::Div, addIdx(extents_[d], constIdx(kTile - 1)),
                                   constIdx(kTile)); // n >= 0
    };
    auto tileExtent = [&](size_t d, int64_t block) {
      return binary(BinaryOp::Min, constIdx(kTile),
                    binary(BinaryOp::Sub, extents_[d], mulIdx(var(block), constIdx(kTile))));
    };
    body = {forLoop(ids[last], tileExtent(last, blockIds[1]), std::move(body), true)};
    body = {forLoop(ids[u], tileExtent(u, blockIds[0]), std::move(body), true)};
    body = {forLoop(blockIds[1], blocks(last), std::move(body), true)};
    // The outer loops: the other dims in order, then the blocks of u.
    std::vector<int64_t> loopIds;
    std::vector<Expr> loopExtents;
    for (size_t d = 0; d < rank; ++d)
      if (d != u && d != last) {
        loopIds.push_back(ids[d]);
        loopExtents.push_back(extents_[d]);
      }
    loopIds.push_back(blockIds[0]);
    loopExtents.push_back(blocks(u));
    size_t par = loopIds.size() - 1; // the blocks of u, unless an other dim is not a static 1
    for (size_t j = 0; j + 1 < loopExtents.size(); ++j)
      if (!isConst(loopExtents[j], 1)) {
        par = j;
        break;
      }
    for (size_t j = loopIds.size(); j-- > 0;)
      if (j != par) body = {forLoop(loopIds[j], loopExtents[j], std::move(body), true)};
    // Work per parallel iteration: the elements of the other loops (a block of u: kTile rows).
    bool blocksOfU = par + 1 == loopIds.size();
    Expr work = constIdx(1);
    for (size_t d = 0; d < rank; ++d)
      if (loopIds[par] != ids[d])
        work = mulIdx(work, d == u && blocksOfU ? constIdx(kTile) : extents_[d]);
    return {parallelFor(loopIds[par], loopExtents[par], work, std::move(body), true)};
  }

  /// Element offset of `idx` in buffer b under the current mode.
  Expr offsetOf(int64_t b, const std::vector<Expr> &idx) {
    size_t rank = idx.size();
    if (mode_ == Mode::Flat) {
      if (std::all_of(idx.begin(), idx.end(), [](const Expr &e) { return isConst(e, 0); }))
        return constIdx(0);
      bool identity = rank == shape_.size() && unitDim_[size_t(b)] == int64_t(rank) - 1;
      for (size_t d = 0; identity && d < rank; ++d)
        identity = idx[d] == iter_[d];
      if (!identity) throw NotApplicable();
      if (condBuffers_.insert(b).second) {
        // Contiguous over the iteration shape; strides of size-1 dims do not matter.
        Expr expected = constIdx(1);
        for (size_t d = rank; d-- > 0;) {
          if (isStaticOne(shape_[d])) continue;
          conds_.push_back(compare(CmpOp::Eq, strideOf(b, int64_t(d)), expected));
          expected = mulIdx(expected, extents_[d]);
        }
      }
      return flatVar_;
    }
    Expr off = constIdx(0);
    for (size_t d = 0; d < rank; ++d) {
      if (isConst(idx[d], 0)) continue; // a broadcast read, or a size-1 dim
      Expr stride = strideOf(b, int64_t(d));
      if (mode_ == Mode::InnerUnit && int64_t(d) == unitDim_[size_t(b)] && isInnerVar(idx[d])) {
        stride = constIdx(1);
        if (condBuffers_.insert(b).second)
          conds_.push_back(compare(CmpOp::Eq, strideOf(b, int64_t(d)), constIdx(1)));
      }
      off = addIdx(off, mulIdx(idx[d], stride));
    }
    return off;
  }

  bool isInnerVar(const Expr &e) const {
    if (reductions_.empty()) return e == iter_.back();
    return std::find(innerVars_.begin(), innerVars_.end(), e) != innerVars_.end();
  }

  using MemoKey = std::pair<const Value *, std::vector<const ExprNode *>>;

  Expr valueAt(Value *v, const std::vector<Expr> &idx) {
    MemoKey key{v, {}};
    for (const Expr &e : idx)
      key.second.push_back(e.get());
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;
    Expr e = compute(v, idx);
    memo_[key] = e;
    return e;
  }

  Expr compute(Value *v, const std::vector<Expr> &idx) {
    if (auto it = inputIndex_.find(v); it != inputIndex_.end()) {
      size_t i = it->second;
      // A number constant of the graph (x ** 3.0, a scale) is folded: the rules can specialize
      // on it (pow by 2 or 3 as products) and LLVM constant-folds it; the parameter stays in
      // the ABI.
      if (auto c = constantInputs_.find(i); c != constantInputs_.end())
        return constantExpr(*c->second);
      if (lk_.inputScalar[i] >= 0)
        return param(lk_.inputScalar[i], lk_.kernel.scalars[size_t(lk_.inputScalar[i])].dtype);
      int64_t b = lk_.inputBuffer[i];
      return load(b, lk_.kernel.buffers[size_t(b)].dtype, offsetOf(b, idx));
    }
    const Op *op = v->definingOp();
    if (!op || !ops_.count(op))
      unsupported("value " + (v->name().empty() ? std::string("%?") : "%" + v->name()) +
                  " is defined outside the region and is not one of its inputs");
    if (op->name() == "constant") return constantExpr(*op);
    if (auto it = reductionInfo_.find(op); it != reductionInfo_.end())
      return reductionValue(*op, it->second, idx);
    const Shape &resultShape = v->type().shape();
    if (kViewOps.count(op->name())) return valueAt(op->operand(0), viewIndex(*op, idx));
    if (op->name() == "gather") return gatherAt(*op, idx);
    if (op->name() == "index") return indexAt(*op, idx);
    if (op->name() == "pad") return padAt(*op, idx);
    std::vector<Expr> operands;
    for (size_t i = 0; i < op->numOperands(); ++i) {
      Value *a = op->operand(i);
      const Type &t = a->type();
      if (t.kind() == TypeKind::None)
        operands.push_back(nullptr);
      else if (t.isTensor())
        operands.push_back(valueAt(a, broadcastRead(idx, t.shape(), resultShape)));
      else
        operands.push_back(valueAt(a, {}));
    }
    return ew::lower(*op, operands, [this, op](Expr ok, std::string message) {
      if (!assertKeys_.insert({op, message}).second) return;
      asserts_.push_back(assertTrue(std::move(ok), errorId(*op, message)));
    });
  }

  // ---- reduction kernels ----
  //
  // A region with reductions or row ops (all over the same full shape F and reduced dims R) is
  // one loop nest over the kept dims K of F. Inside it, each reduction is a loop over R into an
  // accumulator, emitted on first use and in dependency order (softmax: the max, then the sum of
  // exp(x - max)); then the reduced-shaped outputs are stored, and one loop over R computes the
  // full-shaped outputs, reading the accumulators. Reduced values are only read at the current
  // row (checked), which is the fuse pass's "rows of the reduced axes" rule.
  //
  // Accumulation: float reductions accumulate in f32 (f64 for f64), integer sums and products
  // in i64, min / max in the operand's dtype; the vectorizer may reassociate float sums.
  // var / std / layer_norm are two-pass (the mean, then the sum of squared deviations): as
  // accurate as Welford and, unlike Welford's division per element, vectorized. softmax is
  // two passes plus the output pass (max, then sum of exp(x - max)) rather than the online
  // max-sum recurrence, which LLVM's vectorizer does not recognize as a reduction; a row is
  // read three times, from cache for rows that fit in it.

  void collectReductions() {
    for (const Op *op : opsInOrder_) {
      if (!red::isReductionLike(*op)) continue;
      std::string why;
      auto info = red::classify(*op, &why);
      if (!info) unsupported(why);
      const Shape &full = op->operand(0)->type().shape();
      if (reductions_.empty()) {
        fullShape_ = full;
        reducedDims_ = info->dims;
      } else if (full != fullShape_ || info->dims != reducedDims_) {
        unsupported(op->describe() + ": reduces another shape or other dims than " +
                    reductions_.front()->describe());
      }
      reductions_.push_back(op);
      reductionInfo_.emplace(op, *info);
    }
    if (!reductions_.empty()) innerDim_ = chooseInnerDim();
  }

  /// The full dim the innermost loop runs along: the one with unit stride in the first
  /// reduction's operand, traced through elementwise ops and permutations to an input buffer
  /// (a reduction of x.permute(0, 2, 1) over dim 0 keeps dim 1 innermost: lanes along memory),
  /// else the last.
  size_t chooseInnerDim() {
    size_t rank = fullShape_.size();
    if (rank == 0) return 0;
    std::function<int64_t(const Value *, int)> unitOf = [&](const Value *v, int depth) -> int64_t {
      if (depth > 32 || !v->type().isTensor()) return -1;
      if (auto it = inputIndex_.find(v); it != inputIndex_.end()) {
        int64_t b = lk_.inputBuffer[it->second];
        return b >= 0 ? unitDim_[size_t(b)] : -1;
      }
      const Op *op = v->definingOp();
      if (!op || !ops_.count(op) || red::isReductionLike(*op)) return -1;
      const std::string &n = op->name();
      int64_t rank = v->type().rank();
      if (n == "permute" || n == "transpose" || n == "t") {
        int64_t u = unitOf(op->operand(0), depth + 1);
        std::vector<int64_t> perm = viewPermutation(*op, rank);
        for (int64_t j = 0; u >= 0 && j < rank; ++j)
          if (perm[size_t(j)] == u) return j;
        return -1;
      }
      if (kViewOps.count(n)) return -1;
      for (const Value *a : op->operands()) // an elementwise op: its full-shaped operands
        if (a->type().isTensor() && a->type().shape() == v->type().shape())
          if (int64_t u = unitOf(a, depth + 1); u >= 0) return u;
      return -1;
    };
    int64_t u = unitOf(reductions_.front()->operand(0), 0);
    if (u < 0 || u >= int64_t(rank) || isStaticOne(fullShape_[size_t(u)])) return rank - 1;
    return size_t(u);
  }

  bool isReduced(size_t d) const {
    return std::find(reducedDims_.begin(), reducedDims_.end(), int64_t(d)) != reducedDims_.end();
  }

  /// The run-time extent of full dim d: static, or the size of a buffer dim with the same
  /// expression (bound consistently by the launcher).
  Expr fullExtent(size_t d) {
    const DimExpr &e = fullShape_[d];
    if (e.isStatic()) return constIdx(e.value());
    const Kernel &k = lk_.kernel;
    for (size_t b = 0; b < k.buffers.size(); ++b)
      for (size_t j = 0; j < k.buffers[b].sizes.size(); ++j)
        if (k.buffers[b].sizes[j] == e) return sizeOf(int64_t(b), int64_t(j));
    unsupported("the symbolic dim " + e.str() + " is not the size of any input or output");
  }

  /// The shape of a reduction's result without / with keepdim.
  Shape reducedShapeOf(bool keepdim) const {
    Shape s;
    for (size_t d = 0; d < fullShape_.size(); ++d) {
      if (!isReduced(d))
        s.push_back(fullShape_[d]);
      else if (keepdim)
        s.push_back(DimExpr(1));
    }
    return s;
  }

  /// The index of the current row in a reduced-shaped value (keepdim: 0 at reduced dims).
  std::vector<Expr> rowIndex(bool keepdim) const {
    std::vector<Expr> idx;
    for (size_t d = 0; d < fullShape_.size(); ++d) {
      if (!isReduced(d))
        idx.push_back(outer_[d]);
      else if (keepdim)
        idx.push_back(zeroIdx());
    }
    return idx;
  }

  /// Whether `idx` (an index into a value of `shape`) addresses the current row: its kept
  /// positions are the outer loop variables (or 0 along a static size-1 dim; in lane mode the
  /// last dim is the current lane's index).
  bool atCurrentRow(const std::vector<Expr> &idx, bool full, bool keepdim) const {
    size_t j = 0;
    for (size_t d = 0; d < fullShape_.size(); ++d) {
      if (isReduced(d)) {
        if (full || keepdim) ++j;
        continue;
      }
      if (j >= idx.size()) return false;
      const Expr &e = idx[j++];
      const Expr &want = lanes_ && d == innerDim_ ? laneIndex_ : outer_[d];
      if (e != want && !(isStaticOne(fullShape_[d]) && isConst(e, 0))) return false;
    }
    return j == idx.size();
  }

  // ---- lane mode ----
  //
  // When the innermost dim is kept (a reduction over outer dims, e.g. sum(x, dims=[0]) of a
  // row-major matrix), looping over the reduced dims inside each kept index would read with a
  // large stride. Instead the innermost kept dim is cut into blocks of kLanes, the "row" is a
  // block, and every accumulator is an array of kLanes: each reduction loop runs over the
  // reduced dims with the block's lanes innermost (unit stride, vectorized). Row statistics are
  // built with a placeholder lane and instantiated at the lane of the loop that reads them.
  static constexpr int64_t kLanes = 1024;
  int64_t laneBlock_ = kLanes; // lanes per block: kLanes, or fewer (laneBlockFor)

  /// The lanes per block for a lane dim of `size`: kLanes, but where that makes one block and no
  /// other kept dim can run in parallel (a column sum of [1024, 768], a bias gradient: one
  /// thread, 2x eager's time), blocks of an eighth of the dim, rounded up to a multiple of 64
  /// lanes (the vectorized lane loop's step: 96 left a scalar remainder of 32), so that the
  /// blocks run in parallel.
  int64_t laneBlockFor(const DimExpr &size) const {
    if (!size.isStatic() || size.value() < 128) return kLanes;
    for (size_t d = 0; d < fullShape_.size(); ++d)
      if (d != innerDim_ && !isReduced(d) && !isStaticOne(fullShape_[d])) return kLanes;
    const int64_t eighth = (size.value() + 7) / 8;
    return std::min(kLanes, (eighth + 63) / 64 * 64);
  }

  /// A fresh lane variable for a loop over the current block's lanes; sets the current lane.
  Expr newLane() {
    laneVar_ = var(lk_.kernel.newVar());
    laneIndex_ = addIdx(laneBase_, laneVar_);
    innerVars_.push_back(laneIndex_);
    return laneVar_;
  }

  /// `e` with the placeholder lane replaced by the current lane (identity outside lane mode).
  Expr atLane(const Expr &e) {
    if (!lanes_ || !e) return e;
    std::unordered_map<const ExprNode *, Expr> done;
    std::function<Expr(const Expr &)> sub = [&](const Expr &x) -> Expr {
      if (x == lanePlaceholder_) return laneVar_;
      if (x->args.empty()) return x;
      if (auto it = done.find(x.get()); it != done.end()) return it->second;
      bool changed = false;
      std::vector<Expr> args;
      for (const Expr &a : x->args) {
        args.push_back(sub(a));
        changed = changed || args.back() != a;
      }
      Expr r = x;
      if (changed) {
        auto n = std::make_shared<ExprNode>(*x);
        n->args = std::move(args);
        r = n;
      }
      return done[x.get()] = r;
    };
    return sub(e);
  }

  /// A loop over the current block's lanes around `body` (made after newLane()).
  Stmt laneLoop(const Expr &lane, StmtList body) {
    return forLoop(lane->index, laneCount_, std::move(body), mode_ != Mode::General);
  }

  StmtList emitReductionKernel() {
    Shape keep = reducedShapeOf(true), drop = reducedShapeOf(false);
    std::vector<size_t> full, reduced;
    for (size_t o = 0; o < outputs_.size(); ++o) {
      const Shape &s = outputs_[o]->type().shape();
      if (s == fullShape_)
        full.push_back(o);
      else if (s == keep || s == drop)
        reduced.push_back(o);
      else
        unsupported("output " + std::to_string(o) + " of shape " + shapeStr(s) +
                    " is neither the reduction's full shape " + shapeStr(fullShape_) +
                    " nor its reduced shape");
    }
    // An empty reduced dim: reductions without an identity fail like the reference.
    for (const Op *op : reductions_) {
      red::Kind kind = reductionInfo_.at(op).kind;
      bool infNorm = kind == red::Kind::Norm && std::isinf(ops::attrFloat(*op, "p"));
      bool arg = kind == red::Kind::ArgMax || kind == red::Kind::ArgMin;
      if (kind != red::Kind::Max && kind != red::Kind::Min && !infNorm && !arg) continue;
      for (int64_t d : reducedDims_) {
        if (fullShape_[size_t(d)].isStatic()) continue; // nonzero, or inference failed
        Kernel &k = lk_.kernel;
        k.errors.push_back(op->name() + ": expected reduction dim " + std::to_string(d) +
                           " to have non-zero size");
        asserts_.push_back(assertTrue(compare(CmpOp::Gt, fullExtent(size_t(d)), constIdx(0)),
                                      int64_t(k.errors.size()) - 1));
      }
    }
    if (!opts_.fastPaths || fullShape_.empty() || isStaticOne(fullShape_[innerDim_]))
      return emitReductionVariant(Mode::General, full, reduced);
    StmtList general;
    if (!opts_.lazyGeneral) general = emitReductionVariant(Mode::General, full, reduced);
    StmtList fast = emitReductionVariant(Mode::InnerUnit, full, reduced);
    if (conds_.empty()) return fast;
    return versioned(std::move(fast), std::move(general));
  }

  StmtList emitReductionVariant(Mode mode, const std::vector<size_t> &full,
                                const std::vector<size_t> &reduced) {
    Kernel &k = lk_.kernel;
    mode_ = mode;
    memo_.clear();
    conds_.clear();
    condBuffers_.clear();
    innerVars_.clear();
    reductionValues_.clear();
    softmaxScratch_.clear();
    laneNormStats_.clear();
    pre_.clear();
    size_t rank = fullShape_.size();
    fullExtents_.clear();
    for (size_t d = 0; d < rank; ++d)
      fullExtents_.push_back(fullExtent(d));
    outer_.assign(rank, nullptr);
    // Lane mode: the innermost dim is kept and something is reduced (see newLane).
    lanes_ = rank > 0 && !reducedDims_.empty() && !isReduced(innerDim_) &&
             !isStaticOne(fullShape_[innerDim_]);
    std::vector<int64_t> outerIds;
    std::vector<Expr> loopExtents(rank);
    for (size_t d = 0; d < rank; ++d) {
      if (isReduced(d)) continue;
      outerIds.push_back(k.newVar());
      outer_[d] = var(outerIds.back());
      loopExtents[d] = fullExtents_[d];
      if (d == innerDim_ && !lanes_) innerVars_.push_back(outer_[d]);
    }
    if (lanes_) {
      // The last outer loop runs over blocks: lanes [block * lb, min(+lb, extent)).
      // A static count of blocks, so that a single block leaves the parallel loop to another dim.
      Expr block = outer_[innerDim_], n = fullExtents_[innerDim_];
      const DimExpr &size = fullShape_[innerDim_];
      laneBlock_ = laneBlockFor(size);
      const int64_t lb = laneBlock_;
      loopExtents[innerDim_] = size.isStatic() ? constIdx((size.value() + lb - 1) / lb)
                                               : binary(BinaryOp::Div, addIdx(n, constIdx(lb - 1)),
                                                        constIdx(lb)); // n >= 0
      laneBase_ = mulIdx(block, constIdx(lb));
      laneCount_ = binary(BinaryOp::Min, constIdx(lb), binary(BinaryOp::Sub, n, laneBase_));
      // Static blocks of equal size: a static lane count, so that the lane loops have a known
      // trip count (BN statistics of [8,56,56,64] channels-last: 456 -> 235 us, one thread).
      if (size.isStatic() && size.value() <= lb) laneCount_ = constIdx(size.value());
      if (size.isStatic() && size.value() % lb == 0) laneCount_ = constIdx(lb);
      lanePlaceholder_ = var(-1000); // never reaches the kernel (atLane replaces it)
      outer_[innerDim_] = nullptr;
    }
    StmtList stores;
    for (size_t o : reduced) {
      int64_t b = lk_.outputBuffer[o];
      bool keepdim = outputs_[o]->type().shape() == reducedShapeOf(true) &&
                     outputs_[o]->type().rank() == int64_t(rank);
      Expr lane;
      if (lanes_) {
        lane = newLane();
        outer_[innerDim_] = laneIndex_;
      }
      std::vector<Expr> idx = rowIndex(keepdim);
      Expr value = cast(k.buffers[size_t(b)].dtype, valueAt(outputs_[o], idx));
      Stmt st = store(b, offsetOf(b, idx), std::move(value));
      if (lanes_) {
        outer_[innerDim_] = nullptr;
        st = laneLoop(lane, {std::move(st)});
      }
      stores.push_back(std::move(st));
    }
    if (!full.empty()) {
      StmtList inner;
      std::vector<Expr> idx = rowLoopIndex();
      for (size_t o : full) {
        int64_t b = lk_.outputBuffer[o];
        Expr value = cast(k.buffers[size_t(b)].dtype, valueAt(outputs_[o], idx));
        inner.push_back(store(b, offsetOf(b, idx), std::move(value)));
      }
      for (Stmt &s : wrapRowLoops(idx, std::move(inner), lanes_ ? laneVar_ : nullptr))
        stores.push_back(std::move(s));
    }
    StmtList body = std::move(pre_);
    for (Stmt &s : stores)
      body.push_back(std::move(s));
    pre_.clear();
    // One row loop runs in parallel, outermost (rows are independent): the first whose extent is
    // not a static 1, so that a leading batch of one ([1,6,197,197] attention scores, [1,197,384]
    // layer_norm rows) still splits; the unit loops go inside it. With every dim reduced there is
    // no row loop and the kernel is single-threaded.
    std::vector<size_t> rowDims;
    std::vector<Expr> rowExtents;
    for (size_t d = 0; d < rank; ++d)
      if (!isReduced(d)) {
        rowDims.push_back(d);
        rowExtents.push_back(loopExtents[d]);
      }
    if (rowDims.empty()) return body;
    size_t par = parallelDim(rowExtents, rowDims.size());
    bool vec = mode != Mode::General;
    for (size_t j = rowDims.size(); j-- > 0;)
      if (j != par) body = {forLoop(outerIds[j], rowExtents[j], std::move(body), vec)};
    size_t d = rowDims[par];
    Expr work = lanes_ && d == innerDim_ ? constIdx(laneBlock_) : constIdx(1);
    for (size_t e = 0; e < rank; ++e)
      if (e != d) work = mulIdx(work, fullExtents_[e]);
    return {parallelFor(outerIds[par], rowExtents[par], work, std::move(body), vec)};
  }

  bool reducesEveryDim() const {
    for (size_t d = 0; d < fullShape_.size(); ++d)
      if (!isReduced(d)) return false;
    return !fullShape_.empty();
  }

  /// Whether `e` reads an accumulator (a DAG: each shared node is visited once).
  static bool readsAccumulator(const Expr &root) {
    std::unordered_set<const ExprNode *> seen;
    std::vector<const ExprNode *> todo = {root.get()};
    while (!todo.empty()) {
      const ExprNode *e = todo.back();
      todo.pop_back();
      if (!e || !seen.insert(e).second) continue;
      if (e->kind == ExprKind::Acc) return true;
      for (const Expr &a : e->args)
        todo.push_back(a.get());
    }
    return false;
  }
  static bool readsAccumulator(const StmtList &list) {
    for (const Stmt &st : list)
      if (readsAccumulator(st.a) || readsAccumulator(st.b) || readsAccumulator(st.body) ||
          readsAccumulator(st.orelse))
        return true;
    return false;
  }

  /// A full index for a new loop nest over the reduced dims of the current row (fresh loop
  /// variables at the reduced positions).
  /// In lane mode, also a fresh lane variable (the current lane) at the last position.
  std::vector<Expr> rowLoopIndex() {
    std::vector<Expr> idx = outer_;
    for (size_t d = 0; d < idx.size(); ++d)
      if (isReduced(d)) idx[d] = var(lk_.kernel.newVar());
    if (lanes_) {
      newLane();
      idx[innerDim_] = laneIndex_;
    }
    if (!idx.empty() && isReduced(innerDim_)) innerVars_.push_back(idx[innerDim_]);
    return idx;
  }

  /// Loops over the reduced dims of `idx` (made by rowLoopIndex) around `body`; in lane mode
  /// the lane loop is innermost, else the loop along innerDim_ when it is reduced.
  StmtList wrapRowLoops(const std::vector<Expr> &idx, StmtList body, const Expr &lane = nullptr) {
    if (lane) body = {laneLoop(lane, std::move(body))};
    bool vec = mode_ != Mode::General;
    if (!idx.empty() && isReduced(innerDim_))
      body = {forLoop(idx[innerDim_]->index, fullExtents_[innerDim_], std::move(body), vec)};
    for (size_t d = idx.size(); d-- > 0;)
      if (isReduced(d) && d != innerDim_)
        body = {forLoop(idx[d]->index, fullExtents_[d], std::move(body), vec)};
    return body;
  }

  /// The full dim of the outermost loop wrapRowLoops makes when every dim is reduced.
  size_t outermostReducedDim() const { return innerDim_ == 0 && fullShape_.size() > 1 ? 1 : 0; }

  /// Appends `acc = init; for row: acc = combine(acc, value(idx))` to the current row's
  /// statements; returns the accumulator's value after the loop.
  /// In lane mode the accumulator is an array; the result reads it at the placeholder lane.
  Expr reduceRow(const std::string &name, DType accType, Expr init, BinaryOp combine,
                 const std::function<Expr(const std::vector<Expr> &)> &value,
                 int64_t alsoStoreIn = -1) {
    Expr savedVar = laneVar_, savedIndex = laneIndex_;
    std::vector<Expr> idx = rowLoopIndex();
    Expr lane = laneVar_;
    Expr v = cast(accType, value(idx)); // may append the reductions it reads first
    laneVar_ = lane;                    // (they set their own lanes)
    laneIndex_ = idx.empty() ? nullptr : idx[innerDim_];
    StmtList body;
    if (alsoStoreIn >= 0) {
      // Reduce what was stored (LLVM forwards the store), so the value is computed once.
      Expr off = offsetOf(alsoStoreIn, idx);
      body.push_back(store(alsoStoreIn, off, v));
      v = load(alsoStoreIn, v->dtype, off);
    }
    if (!lanes_) {
      int64_t a = lk_.kernel.addAcc(name, accType);
      bool chunked = reducesEveryDim() && !readsAccumulator(v) && !readsAccumulator(body);
      body.push_back(reduce(a, combine, std::move(v)));
      StmtList loops = wrapRowLoops(idx, std::move(body));
      // With every dim reduced there is no row loop to run in parallel: the outermost reduced
      // loop runs in parallel chunks with partial results instead (Stmt::partials). Not when
      // the value reads another accumulator (a later pass of var or softmax reads the first
      // pass's result, which a task does not see).
      if (chunked && loops.size() == 1 && loops[0].kind == StmtKind::For) {
        Expr work = constIdx(1);
        for (size_t d = 0; d < fullExtents_.size(); ++d)
          if (d != outermostReducedDim()) work = mulIdx(work, fullExtents_[d]);
        Stmt &loop = loops[0];
        loop =
            parallelFor(loop.index, loop.a, std::move(work), std::move(loop.body), loop.vectorize);
        loop.partials = {{a, combine}};
      }
      pre_.push_back(initAcc(a, std::move(init)));
      for (Stmt &s : loops)
        pre_.push_back(std::move(s));
      return acc(a, accType);
    }
    int64_t a = lk_.kernel.addAcc(name, accType, kLanes);
    body.push_back(reduceAt(a, lane, combine, std::move(v)));
    StmtList loops = wrapRowLoops(idx, std::move(body), lane);
    Expr initLane = newLane();
    pre_.push_back(laneLoop(initLane, {initAccAt(a, initLane, std::move(init))}));
    for (Stmt &s : loops)
      pre_.push_back(std::move(s));
    laneVar_ = savedVar;
    laneIndex_ = savedIndex;
    return accAt(a, accType, lanePlaceholder_);
  }

  /// Whether every row has an element: the reduced dims have static sizes above 0.
  bool rowsNonEmpty() const {
    for (int64_t r : reducedDims_)
      if (!fullShape_[size_t(r)].isStatic() || fullShape_[size_t(r)].value() <= 0) return false;
    return true;
  }

  /// `idx` (a full index of the current row) at the row's first element: 0 along reduced dims.
  std::vector<Expr> rowStart(std::vector<Expr> idx) const {
    for (size_t d = 0; d < idx.size(); ++d)
      if (isReduced(d)) idx[d] = zeroIdx();
    return idx;
  }

  /// An accumulator set to `make()`, a value of the current row, in the row's statements before
  /// the passes that follow (one per lane in lane mode: `make` runs with that lane current);
  /// its value.
  Expr rowAcc(const std::string &name, DType d, const std::function<Expr()> &make) {
    if (!lanes_) {
      Expr v = make(); // (may emit the reductions it reads first)
      int64_t a = lk_.kernel.addAcc(name, d);
      pre_.push_back(initAcc(a, std::move(v)));
      return acc(a, d);
    }
    Expr savedVar = laneVar_, savedIndex = laneIndex_;
    Expr lane = newLane();
    Expr v = make(); // (reductions it emits set and restore their own lanes)
    laneVar_ = lane;
    v = atLane(v);
    int64_t a = lk_.kernel.addAcc(name, d, kLanes);
    pre_.push_back(laneLoop(lane, {initAccAt(a, lane, std::move(v))}));
    laneVar_ = savedVar;
    laneIndex_ = savedIndex;
    return accAt(a, d, lanePlaceholder_);
  }

  /// `value` at the current row's first element, in an accumulator (rowAcc).
  Expr rowFirstAcc(const std::string &name, DType d,
                   const std::function<Expr(const std::vector<Expr> &)> &value) {
    return rowAcc(name, d, [&] {
      std::vector<Expr> idx = rowStart(outer_);
      if (lanes_) idx[innerDim_] = laneIndex_;
      return cast(d, value(idx));
    });
  }

  /// `e`, a statistic of the current row, kept per lane before the output pass in lane mode
  /// (rowAcc): there the output pass would compute it again for every element (LLVM cannot
  /// hoist a per-lane value out of the loop over the reduced dims; a layer norm over a dim
  /// without unit stride, ConvNeXt's over channels, took a sqrt and two divisions per element:
  /// 3.5x eager's time). Outside lane mode `e` itself, which LLVM hoists.
  Expr perRow(const std::string &name, DType d, const Expr &e) {
    return lanes_ ? rowAcc(name, d, [&] { return e; }) : e;
  }

  /// The number of elements of a row, in dtype d.
  Expr rowCount(DType d) {
    Expr n = constIdx(1);
    for (int64_t r : reducedDims_)
      n = mulIdx(n, fullExtents_[size_t(r)]);
    return cast(d, n);
  }

  static DType opMath(DType d) {
    if (d == DType::F16 || d == DType::BF16) return DType::F32;
    return d;
  }

  /// Per-row statistics of one op, computed once per variant.
  struct RowStats {
    Expr a, b; // sum / mean / max, and the second statistic (sum of exp, rstd) where there is one
    int64_t storedIn = -1; // softmax: the output buffer holding exp(x - max) after the sum pass
  };

  /// The output buffer a softmax may keep exp(x - max) in between its sum pass and the output
  /// pass (which then scales in place instead of computing exp again), or -1. Either the result
  /// is one output of the kernel and no op of the kernel reads it (uses outside the kernel do not
  /// matter: a softmax compiled alone, as attention's is, has its consumer in the graph), or ops
  /// of the kernel read it and the kernel has one full-shaped output (attention's safe softmax,
  /// masked_fill(softmax(s), eq(amax(s), -inf), 0)): the output pass computes that output's
  /// value, reading the buffer, before it stores it. The buffer holds the compute dtype, and
  /// serves one softmax.
  int64_t softmaxScratchOutput(const Op &op) {
    Value *r = op.result(0);
    DType d = r->type().dtype();
    if (d != DType::F32 && d != DType::F64) return -1;
    bool readInKernel = false;
    for (const Use &u : r->uses())
      readInKernel |= ops_.count(u.user) > 0;
    int64_t buffer = -1;
    if (!readInKernel) {
      if (std::count(outputs_.begin(), outputs_.end(), r) != 1) return -1;
      for (size_t o = 0; o < outputs_.size(); ++o)
        if (outputs_[o] == r) buffer = lk_.outputBuffer[o];
    } else {
      for (size_t o = 0; o < outputs_.size(); ++o) {
        if (outputs_[o]->type().shape() != fullShape_) continue;
        if (buffer >= 0 || outputs_[o]->type().dtype() != d) return -1;
        buffer = lk_.outputBuffer[o];
      }
    }
    if (buffer < 0 || lk_.kernel.buffers[size_t(buffer)].dtype != d ||
        !softmaxScratch_.insert(buffer).second)
      return -1;
    return buffer;
  }

  /// The identity of a max (mx) or min reduction in dtype a: -inf / +inf, or the dtype's
  /// least / greatest value.
  static Expr extremumIdentity(DType a, bool mx) {
    if (isFloating(a)) return constFloat(a, mx ? -INFINITY : INFINITY);
    if (a == DType::Bool) return constBool(!mx);
    if (a == DType::U8) return constInt(a, mx ? 0 : 255);
    int bits = int(dtypeSize(a)) * 8;
    int64_t lo = bits == 64 ? INT64_MIN : -(int64_t(1) << (bits - 1));
    int64_t hi = bits == 64 ? INT64_MAX : (int64_t(1) << (bits - 1)) - 1;
    return constInt(a, mx ? lo : hi);
  }

  /// A softmax or log_softmax of this kernel over x whose max pass reduces in dtype a, if any.
  const Op *softmaxOver(const Value *x, DType a) const {
    for (const Op *op : reductions_) {
      red::Kind kind = reductionInfo_.at(op).kind;
      if ((kind == red::Kind::Softmax || kind == red::Kind::LogSoftmax) && op->operand(0) == x &&
          op->result(0)->type().dtype() == x->type().dtype() &&
          opMath(op->result(0)->type().dtype()) == a)
        return op;
    }
    return nullptr;
  }

  RowStats rowStats(const Op &op, const red::Info &info) {
    if (auto it = reductionValues_.find(&op); it != reductionValues_.end()) return it->second;
    Value *x = op.operand(0);
    DType out = op.result(0)->type().dtype(), in = x->type().dtype();
    DType c = opMath(isFloating(out) ? out : in);
    auto xAt = [&](const std::vector<Expr> &idx) { return valueAt(x, idx); };
    // The reference converts the input to the result dtype first (sum's `dtype`, softmax's).
    auto xAs = [&](DType d) {
      return [&, d](const std::vector<Expr> &idx) { return cast(d, cast(out, xAt(idx))); };
    };
    std::string name = "r" + std::to_string(reductionValues_.size());
    RowStats st;
    switch (info.kind) {
    case red::Kind::Sum:
    case red::Kind::Prod:
    case red::Kind::Mean: {
      DType a = isFloating(out) ? c : DType::I64;
      bool prod = info.kind == red::Kind::Prod;
      Expr init = isFloating(a) ? constFloat(a, prod ? 1 : 0) : constInt(a, prod ? 1 : 0);
      st.a = reduceRow(name, a, init, prod ? BinaryOp::Mul : BinaryOp::Add, xAs(a));
      if (info.kind == red::Kind::Mean) st.a = binary(BinaryOp::Div, st.a, rowCount(a));
      break;
    }
    case red::Kind::Max:
    case red::Kind::Min: {
      bool mx = info.kind == red::Kind::Max;
      DType a = isFloating(in) ? opMath(in) : in;
      Expr init = extremumIdentity(a, mx);
      // The max of a softmax's operand is the softmax's own first pass (attention's safe
      // softmax tests amax(s) == -inf): the same reduction, computed once.
      if (const Op *sm = softmaxOver(x, a); mx && sm) {
        st.a = rowStats(*sm, reductionInfo_.at(sm)).a;
        break;
      }
      st.a = reduceRow(name, a, init, mx ? BinaryOp::Max : BinaryOp::Min,
                       [&](const std::vector<Expr> &idx) { return cast(a, xAt(idx)); });
      break;
    }
    case red::Kind::Var:
    case red::Kind::Std:
    case red::Kind::LayerNorm:
    case red::Kind::RmsNorm: {
      DType a = opMath(in);
      auto xa = [&](const std::vector<Expr> &idx) { return cast(a, xAt(idx)); };
      if (info.kind == red::Kind::RmsNorm) {
        Expr ss = reduceRow(name + "_ss", a, constFloat(a, 0), BinaryOp::Add,
                            [&](const std::vector<Expr> &idx) {
                              Expr v = xa(idx);
                              return binary(BinaryOp::Mul, v, v);
                            });
        st.b = binary(BinaryOp::Div, ss, rowCount(a)); // mean of squares
        break;
      }
      // The mean as x0 + mean(x - x0), x0 the row's first element: a row of equal values has
      // its exact mean and zero deviations, as eager's Welford gives (sum / n can be an ulp
      // off, which layer norm's 1 / sqrt(eps) then amplified to ~1e-4: fuzzer seeds 81159,
      // 93462). Only where the row cannot be empty (its first element exists). The sum reads
      // x0 itself (a reduction of every dim sums in parallel chunks, which see no accumulator);
      // the later passes read it from an accumulator set before them: the output pass may
      // overwrite what x0 is read from (a softmax's exp kept in the output buffer, fuzzer seed
      // 114504).
      const bool shifts = rowsNonEmpty();
      Expr shift = shifts ? rowFirstAcc(name + "_x0", a, xa) : nullptr;
      auto shifted = [&](const std::vector<Expr> &idx) {
        return shifts ? binary(BinaryOp::Sub, xa(idx), xa(rowStart(idx))) : xa(idx);
      };
      Expr sum = reduceRow(name + "_sum", a, constFloat(a, 0), BinaryOp::Add, shifted);
      Expr mean = binary(BinaryOp::Div, sum, rowCount(a));
      if (shifts) mean = binary(BinaryOp::Add, shift, mean);
      // var / std sum the squared deviations of f32 in f64, as eager's CPU kernel accumulates
      // (in f32, even cascaded, their error was 2-5x eager's on randn + 3); layer_norm's are
      // f32 like eager's.
      bool wide = (info.kind == red::Kind::Var || info.kind == red::Kind::Std) && a == DType::F32 &&
                  sumCascadeEnabled();
      DType m2Type = wide ? DType::F64 : a;
      Expr m2 = reduceRow(name + "_m2", m2Type, constFloat(m2Type, 0), BinaryOp::Add,
                          [&](const std::vector<Expr> &idx) {
                            Expr dev = binary(BinaryOp::Sub, cast(m2Type, xa(idx)),
                                              cast(m2Type, atLane(mean)));
                            return binary(BinaryOp::Mul, dev, dev);
                          });
      st.a = mean;
      st.b = m2;
      break;
    }
    case red::Kind::ArgMax:
    case red::Kind::ArgMin: {
      // Two vectorized passes instead of a (value, index) pair the vectorizer cannot carry: the
      // extremum (NaN if any, as maximum / minimum propagate it), then the least position
      // holding it, or holding a NaN when it is NaN: PyTorch's first occurrence.
      bool mx = info.kind == red::Kind::ArgMax;
      DType a = isFloating(in) ? opMath(in) : in;
      Expr init = extremumIdentity(a, mx);
      auto xa = [&](const std::vector<Expr> &idx) { return cast(a, xAt(idx)); };
      // The extremum is an amax / amin of the same operand when the kernel has one (max(dim)
      // split into amax and argmax).
      Expr m;
      for (const Op *o : reductions_)
        if (o->operand(0) == x &&
            reductionInfo_.at(o).kind == (mx ? red::Kind::Max : red::Kind::Min))
          m = rowStats(*o, reductionInfo_.at(o)).a;
      if (!m) m = reduceRow(name + "_ext", a, init, mx ? BinaryOp::Max : BinaryOp::Min, xa);
      Expr count = constIdx(1);
      for (int64_t d : info.dims)
        count = mulIdx(count, fullExtents_[size_t(d)]);
      st.a = reduceRow(name + "_pos", DType::I64, cast(DType::I64, count), BinaryOp::Min,
                       [&](const std::vector<Expr> &idx) {
                         // The position in the reduced dims, row-major (the flattened index).
                         Expr pos = constIdx(0);
                         for (int64_t d : info.dims)
                           pos = addIdx(mulIdx(pos, fullExtents_[size_t(d)]), idx[size_t(d)]);
                         Expr v = xa(idx), ml = atLane(m);
                         Expr hit = compare(CmpOp::Eq, v, ml);
                         if (isFloating(a))
                           hit = binary(BinaryOp::Or, hit,
                                        binary(BinaryOp::And, unary(UnaryOp::IsNan, ml),
                                               unary(UnaryOp::IsNan, v)));
                         return select(hit, cast(DType::I64, pos), cast(DType::I64, count));
                       });
      break;
    }
    case red::Kind::Norm: {
      // As the reference: max / min of |x| for p = +-inf; else sum(|x|^p)^(1/p), counting the
      // non-zeros for p = 0. Sums accumulate in the compute dtype, as eager's (whose f32 2-norm
      // of 1e20s is inf, where the f64 reference gives the finite value).
      double p = ops::attrFloat(op, "p");
      if (std::isinf(p)) {
        auto ax = [&](const std::vector<Expr> &idx) { return unary(UnaryOp::Abs, xAs(c)(idx)); };
        st.a = reduceRow(name, c, constFloat(c, p > 0 ? 0.0 : INFINITY),
                         p > 0 ? BinaryOp::Max : BinaryOp::Min, ax);
        break;
      }
      DType a = c;
      Expr s =
          reduceRow(name, a, constFloat(a, 0), BinaryOp::Add, [&](const std::vector<Expr> &idx) {
            Expr v = unary(UnaryOp::Abs, xAs(a)(idx));
            if (p == 0)
              return select(compare(CmpOp::Ne, v, constFloat(a, 0)), constFloat(a, 1),
                            constFloat(a, 0));
            if (p == 1) return v;
            if (p == 2) return binary(BinaryOp::Mul, v, v);
            return binary(BinaryOp::Pow, v, constFloat(a, p));
          });
      st.a = p == 0 || p == 1 ? s
             : p == 2         ? unary(UnaryOp::Sqrt, s)
                              : binary(BinaryOp::Pow, s, constFloat(a, 1.0 / p));
      break;
    }
    case red::Kind::Softmax:
    case red::Kind::LogSoftmax: {
      auto xc = xAs(c);
      Expr mx = reduceRow(name + "_max", c, constFloat(c, -INFINITY), BinaryOp::Max, xc);
      if (info.kind == red::Kind::Softmax) st.storedIn = softmaxScratchOutput(op);
      Expr sum = reduceRow(
          name + "_sum", c, constFloat(c, 0), BinaryOp::Add,
          [&](const std::vector<Expr> &idx) {
            return unary(UnaryOp::Exp, binary(BinaryOp::Sub, xc(idx), atLane(mx)));
          },
          st.storedIn);
      st.a = mx;
      st.b = sum;
      break;
    }
    }
    reductionValues_[&op] = st;
    return st;
  }

  /// The value of a reduction or row op's result at `idx`.
  Expr reductionValue(const Op &op, const red::Info &info, const std::vector<Expr> &idx) {
    DType out = op.result(0)->type().dtype();
    if (!atCurrentRow(idx, info.rowOp, info.keepdim))
      unsupported(op.describe() + ": its result is read at another row than the one computed");
    RowStats st = rowStats(op, info);
    st.a = atLane(st.a);
    st.b = atLane(st.b);
    if (!info.rowOp) {
      Expr v = st.a;
      if (info.kind == red::Kind::Var || info.kind == red::Kind::Std) {
        DType a = st.b->dtype;
        // sum((x - mean)^2) / max(0, N - correction), as the reference.
        Expr denom = binary(
            BinaryOp::Max,
            binary(BinaryOp::Sub, rowCount(a), constFloat(a, ops::attrFloat(op, "correction"))),
            constFloat(a, 0));
        v = binary(BinaryOp::Div, st.b, denom);
        if (info.kind == red::Kind::Std) v = unary(UnaryOp::Sqrt, v);
      }
      return cast(out, v);
    }
    Value *x = op.operand(0);
    DType c = opMath(out);
    Expr xv = cast(c, cast(out, valueAt(x, idx)));
    switch (info.kind) {
    case red::Kind::Softmax: {
      // exp(x - max) * (1 / sum): the reciprocal once per row; within an ulp of the division.
      Expr inv = binary(BinaryOp::Div, constFloat(c, 1.0), st.b);
      Expr e = st.storedIn >= 0 ? load(st.storedIn, c, offsetOf(st.storedIn, idx))
                                : unary(UnaryOp::Exp, binary(BinaryOp::Sub, xv, st.a));
      return cast(out, binary(BinaryOp::Mul, e, inv));
    }
    case red::Kind::LogSoftmax:
      return cast(
          out, binary(BinaryOp::Sub, binary(BinaryOp::Sub, xv, st.a), unary(UnaryOp::Log, st.b)));
    default: break;
    }
    // layer_norm / rms_norm: (x - mean) * rstd * w + b, parameters indexed by the row position.
    bool rms = info.kind == red::Kind::RmsNorm;
    double eps = ops::hasAttrValue(op, "eps") ? ops::attrFloat(op, "eps")
                 : c == DType::F64            ? std::numeric_limits<double>::epsilon()
                                              : double(std::numeric_limits<float>::epsilon());
    auto [mean, rstd] = laneNormStats_[&op];
    if (!rstd) {
      const RowStats &row = rowStats(op, info); // (at the placeholder lane, as perRow takes them)
      Expr var = rms ? row.b : binary(BinaryOp::Div, row.b, rowCount(c));
      rstd = perRow("rstd", c,
                    binary(BinaryOp::Div, constFloat(c, 1.0),
                           unary(UnaryOp::Sqrt, binary(BinaryOp::Add, var, constFloat(c, eps)))));
      mean = rms ? nullptr : perRow("mean", c, row.a);
      laneNormStats_[&op] = {mean, rstd};
    }
    rstd = atLane(rstd);
    if (mean) mean = atLane(mean);
    Expr v = binary(BinaryOp::Mul, rms ? xv : binary(BinaryOp::Sub, xv, mean), rstd);
    size_t k = reducedDims_.size();
    std::vector<Expr> paramIdx(idx.end() - ptrdiff_t(k), idx.end());
    for (size_t i = 1; i < op.numOperands() && i <= (rms ? 1u : 2u); ++i) {
      Value *p = op.operand(i);
      if (p->type().kind() == TypeKind::None) continue;
      // The weight / bias span the normalized (trailing) dims of the row.
      const Shape &ps = p->type().shape();
      for (size_t j = 0; j < ps.size() && j < k; ++j)
        requireSameSize(ps[ps.size() - 1 - j], fullShape_[fullShape_.size() - 1 - j]);
      Expr pv = cast(c, valueAt(p, paramIdx));
      v = binary(i == 1 ? BinaryOp::Mul : BinaryOp::Add, v, pv);
    }
    return cast(out, v);
  }

  /// The index of op's error `message` in the kernel's messages (added once).
  int64_t errorId(const Op &op, const std::string &message) {
    std::vector<std::string> &errors = lk_.kernel.errors;
    std::string text = op.describe() + ": " + message;
    auto known = std::find(errors.begin(), errors.end(), text);
    if (known == errors.end()) known = errors.insert(errors.end(), std::move(text));
    return int64_t(known - errors.begin());
  }

  /// gather: self at idx with idx[dim] = index[idx], which is checked against self's size there
  /// (an out-of-bounds index stops the kernel with the op's error, as the reference kernel does).
  Expr gatherAt(const Op &op, const std::vector<Expr> &idx) {
    if (!reductions_.empty()) unsupported(op.describe() + ": gather in a reduction kernel");
    const Shape &self = op.operand(0)->type().shape();
    int64_t dim = ops::normDim(ops::attrInt(op, "dim"), int64_t(self.size()));
    Expr at = cast(DType::I64, valueAt(op.operand(1), idx));
    Expr size = constIdx(self[size_t(dim)].value());
    Expr ok =
        binary(BinaryOp::And, compare(CmpOp::Ge, at, constIdx(0)), compare(CmpOp::Lt, at, size));
    elementChecks_.push_back(
        assertTrue(ok, errorId(op, "index out of bounds for dimension " + std::to_string(dim) +
                                       " with size " + std::to_string(self[size_t(dim)].value()))));
    std::vector<Expr> at_idx = idx;
    at_idx[size_t(dim)] = at;
    return valueAt(op.operand(0), at_idx);
  }

  /// index (whyNotIndex): the result's leading dims walk the index tensor, the rest self's
  /// trailing dims; self is read at the loaded index, wrapped if negative.
  Expr indexAt(const Op &op, const std::vector<Expr> &idx) {
    if (!reductions_.empty()) unsupported(op.describe() + ": index in a reduction kernel");
    const size_t k = size_t(op.operand(1)->type().rank());
    const int64_t n = op.operand(0)->type().shape()[0].value();
    Expr at = cast(DType::I64, valueAt(op.operand(1), {idx.begin(), idx.begin() + k}));
    Expr ok = binary(BinaryOp::And, compare(CmpOp::Ge, at, constIdx(-n)),
                     compare(CmpOp::Lt, at, constIdx(n)));
    elementChecks_.push_back(assertTrue(
        ok, errorId(op, "index out of bounds for dimension 0 with size " + std::to_string(n))));
    std::vector<Expr> src = {
        select(compare(CmpOp::Lt, at, constIdx(0)), addIdx(at, constIdx(n)), at)};
    src.insert(src.end(), idx.begin() + k, idx.end());
    return valueAt(op.operand(0), src);
  }

  /// pad: the input at each padded dim's source index under reflect, replicate or circular
  /// (whyNotPad leaves constant pads to the reference kernel).
  Expr padAt(const Op &op, const std::vector<Expr> &idx) {
    Value *x = op.operand(0);
    const Shape &in = x->type().shape();
    const ops::mv::PadMode mode = ops::mv::padMode(op);
    const auto amounts = ops::mv::padAmounts(op, int64_t(in.size()));
    std::vector<Expr> src = idx;
    for (size_t d = 0; d < in.size(); ++d) {
      auto [before, after] = amounts[d];
      if (before == 0 && after == 0) continue;
      const int64_t n = in[d].value();
      Expr j = addIdx(idx[d], constIdx(-before)), last = constIdx(n - 1);
      switch (mode) {
      case ops::mv::PadMode::Replicate:
        src[d] = binary(BinaryOp::Max, binary(BinaryOp::Min, j, last), constIdx(0));
        break;
      case ops::mv::PadMode::Reflect: // pads < n: one reflection
        src[d] = select(compare(CmpOp::Lt, j, constIdx(0)), binary(BinaryOp::Sub, constIdx(0), j),
                        select(compare(CmpOp::Gt, j, last),
                               binary(BinaryOp::Sub, constIdx(2 * (n - 1)), j), j));
        break;
      case ops::mv::PadMode::Circular: // pads <= n
        src[d] = binary(BinaryOp::Rem, addIdx(binary(BinaryOp::Rem, j, constIdx(n)), constIdx(n)),
                        constIdx(n));
        break;
      case ops::mv::PadMode::Constant: unsupported(op.describe() + ": a constant pad");
      }
    }
    return valueAt(x, src);
  }

  /// The operand index a view reads for result index `idx`.
  std::vector<Expr> viewIndex(const Op &op, const std::vector<Expr> &idx) {
    const Shape &in = op.operand(0)->type().shape();
    const Shape &out = op.result(0)->type().shape();
    const std::string &n = op.name();
    auto rank = int64_t(in.size());
    if (n == "unsqueeze") {
      std::vector<Expr> r = idx;
      r.erase(r.begin() + ops::normDim(ops::attrInt(op, "dim"), rank + 1));
      return r;
    }
    if (n == "squeeze") {
      const Attr *dims = op.attrOrNull("dim");
      std::vector<bool> mask(in.size(), false);
      for (int64_t d = 0; d < rank; ++d)
        mask[size_t(d)] = !dims && isStaticOne(in[size_t(d)]);
      if (dims)
        for (int64_t d : dims->asInts())
          if (rank > 0 && isStaticOne(in[size_t(ops::normDim(d, rank))]))
            mask[size_t(ops::normDim(d, rank))] = true;
      std::vector<Expr> r;
      size_t j = 0;
      for (size_t d = 0; d < in.size(); ++d)
        r.push_back(mask[d] ? zeroIdx() : idx[j++]);
      return r;
    }
    if (n == "permute" || n == "transpose" || n == "t") {
      auto perm = viewPermutation(op, rank);
      std::vector<Expr> r(in.size());
      for (size_t j = 0; j < perm.size(); ++j)
        r[size_t(perm[j])] = idx[j];
      return r;
    }
    if (n == "slice" || n == "narrow" || n == "select") {
      int64_t dim = ops::normDim(ops::attrInt(op, "dim"), rank);
      int64_t size = in[size_t(dim)].value();
      std::vector<Expr> r = idx;
      if (n == "select") {
        int64_t index = ops::attrInt(op, "index");
        r.insert(r.begin() + dim, constIdx(index < 0 ? index + size : index));
        return r;
      }
      int64_t start = 0, step = 1;
      if (n == "slice") {
        step = ops::attrInt(op, "step");
        start =
            ops::mv::resolveSlice(size, ops::attrInt(op, "start"), ops::attrInt(op, "end"), step)
                .first;
      } else {
        start = ops::attrInt(op, "start");
        start = start < 0 ? start + size : start;
      }
      r[size_t(dim)] = addIdx(constIdx(start), mulIdx(idx[size_t(dim)], constIdx(step)));
      return r;
    }
    if (n == "flip") {
      std::vector<Expr> r = idx;
      for (int64_t d : ops::attrInts(op, "dims")) {
        size_t k = size_t(ops::normDim(d, rank));
        r[k] = binary(BinaryOp::Sub, constIdx(in[k].value() - 1), idx[k]);
      }
      return r;
    }
    if (n == "repeat" || n == "tile") { // new dims lead; a tiled dim wraps around
      std::vector<Expr> r;
      for (size_t j = 0, lead = out.size() - in.size(); j < in.size(); ++j) {
        const Expr &i = idx[lead + j];
        r.push_back(in[j] == out[lead + j] ? i
                    : isStaticOne(in[j])   ? zeroIdx()
                                           : binary(BinaryOp::Rem, i, constIdx(in[j].value())));
      }
      return r;
    }
    // expand, expand_as, contiguous, clone, alias.
    return broadcastRead(idx, in, out);
  }

  /// broadcastIndex, recording the dims it reads as equal without the types proving it.
  std::vector<Expr> broadcastRead(const std::vector<Expr> &idx, const Shape &operand,
                                  const Shape &result) {
    size_t lead = result.size() - operand.size();
    for (size_t j = 0; j < operand.size(); ++j)
      requireSameSize(operand[j], result[lead + j]);
    return broadcastIndex(idx, operand, result);
  }

  /// `a` (an operand's dim) is read with the loop variable of `b`: unless a is a static 1 (read
  /// at index 0) or the same expression, the sizes must agree at run time (LoweredKernel::
  /// sameSize).
  void requireSameSize(const DimExpr &a, const DimExpr &b) {
    if (a == b || isStaticOne(a)) return;
    if (sameSizeSeen_.insert({a, b}).second) lk_.sameSize.emplace_back(a, b);
  }

  std::vector<Value *> inputs_, outputs_;
  std::unordered_set<const Op *> ops_;
  LowerOptions opts_;
  std::string name_;
  std::span<Value *const> outerInputs_; // the caller's, alive during run()
  LoweredKernel lk_;
  std::unordered_map<const Value *, size_t> inputIndex_;
  std::unordered_map<size_t, const Op *> constantInputs_; // input index -> outer `constant` op
  std::set<std::string> usedNames_;
  std::set<std::pair<const Op *, std::string>> assertKeys_;
  std::set<std::pair<DimExpr, DimExpr>> sameSizeSeen_;
  StmtList asserts_;
  StmtList elementChecks_; // per-element checks of the values being built (gather's indices)
  std::vector<Expr> strideChecks_; // conditions of the fast versions (LowerOptions::lazyGeneral)
  std::vector<int64_t> unitDim_;   // per buffer: the dim expected to have unit stride

  // The version being built.
  Mode mode_ = Mode::General;
  Shape shape_;
  std::vector<Expr> iter_, extents_, conds_;
  Expr flatVar_;
  std::set<int64_t> condBuffers_;
  std::map<MemoKey, Expr> memo_;

  // Reduction kernels: the ops in region order, their common full shape and reduced dims, the
  // outer (row) variables, the inner variables with unit stride in InnerUnit mode, and the
  // statements of the current row before its outputs.
  std::vector<const Op *> opsInOrder_, reductions_;
  std::unordered_map<const Op *, red::Info> reductionInfo_;
  std::unordered_map<const Op *, RowStats> reductionValues_;
  Shape fullShape_;
  std::set<int64_t> softmaxScratch_; // output buffers holding a softmax's exp (one each)
  std::map<const Op *, std::pair<Expr, Expr>> laneNormStats_; // a norm's (mean, rstd) per row
  std::vector<int64_t> reducedDims_;
  size_t innerDim_ = 0; // the full dim along which the innermost loop runs (chooseInnerDim)
  std::vector<Expr> outer_, fullExtents_, innerVars_;
  StmtList pre_;
  // Lane mode (see newLane): the block's first index and lane count, the current lane's
  // variable and full index, and the placeholder lane of row statistics.
  bool lanes_ = false;
  Expr laneBase_, laneCount_, laneVar_, laneIndex_, lanePlaceholder_;
};

} // namespace

// whyNotElementwise also accepts the reductions and row ops a loop kernel computes (alone, or in
// a region whose reductions share one full shape and reduced dims; whyNotLowerable checks that).
std::string whyNotElementwise(const Op &op) {
  if (op.name() == "constant") return whyNotConstant(op);
  if (red::isReductionLike(op)) {
    std::string why;
    return red::classify(op, &why) ? "" : why;
  }
  if (kViewOps.count(op.name())) return whyNotView(op);
  if (op.name() == "gather") return whyNotGather(op);
  if (op.name() == "index") return whyNotIndex(op);
  if (op.name() == "pad") return whyNotPad(op);
  std::string why;
  return ew::supports(op, &why) ? "" : why;
}

namespace {
LoweredKernel lowerBlockUnchecked(const Block &body, const std::string &name,
                                  const LowerOptions &opts, std::span<Value *const> outer = {}) {
  std::vector<Value *> inputs;
  for (const auto &a : body.arguments())
    inputs.push_back(a.get());
  std::vector<const Op *> ops;
  for (Op *op : body)
    if (op != body.terminator()) ops.push_back(op);
  return Lowering(std::move(inputs), std::move(ops), body.terminator()->operands(), name, opts,
                  outer)
      .run();
}
} // namespace

namespace {
/// whyNotLowerable's checks of each op; sets `reductions` when the block has a reduction.
std::string whyNotLowerableOps(const Block &body, bool &reductions) {
  reductions = false;
  for (Op *op : body) {
    if (op == body.terminator()) continue;
    if (op->numRegions() > 0) return op->name() + ": has regions";
    std::string why = whyNotElementwise(*op);
    if (!why.empty()) return op->describe() + ": " + why;
    reductions = reductions || red::isReductionLike(*op);
  }
  return body.terminator() ? "" : "the block has no terminator";
}
} // namespace

std::string whyNotLowerable(const Block &body) {
  bool reductions = false;
  if (std::string why = whyNotLowerableOps(body, reductions); !why.empty()) return why;
  if (!reductions) return "";
  // The structure of a reduction region (one full shape and reduced dims, outputs of the full
  // or the reduced shape, reduced values read at their own row) is checked by lowering it.
  try {
    lowerBlockUnchecked(body, "probe", {.fastPaths = false});
  } catch (const Error &e) {
    return e.what();
  }
  return "";
}

LoweredKernel lowerElementwiseBlock(const Block &body, const std::string &name,
                                    const LowerOptions &opts) {
  if (std::string why = whyNotLowerable(body); !why.empty()) unsupported(why);
  return lowerBlockUnchecked(body, name, opts);
}

LoweredKernel lowerFusion(const Op &fusion, const LowerOptions &opts) {
  if (fusion.numRegions() != 1) unsupported(fusion.describe() + ": expected one region");
  std::string name = "fusion";
  if (const Attr *kind = fusion.attrOrNull("kind"); kind && kind->kind() == AttrKind::Str)
    name += "_" + kind->asStr();
  const Block &body = *fusion.region(0);
  // The structure of a reduction region is checked by lowering it (whyNotLowerable's probe):
  // here by the lowering itself, which throws what the probe would have reported.
  bool reductions = false;
  if (std::string why = whyNotLowerableOps(body, reductions); !why.empty()) unsupported(why);
  LoweredKernel lk = lowerBlockUnchecked(body, name, opts, fusion.operands());
  // Results the reinplace pass computes in an operand's memory (`inplace_operand`, per result
  // the operand or -1): the output buffer shares that input's (BufferParam::aliasOf).
  const Attr *inPlace = fusion.attrOrNull("inplace_operand");
  if (!inPlace || inPlace->kind() != AttrKind::Ints) return lk;
  auto share = [&](Kernel &k) {
    for (size_t r = 0; r < inPlace->asInts().size() && r < lk.outputBuffer.size(); ++r) {
      const int64_t operand = inPlace->asInts()[r];
      if (operand < 0 || size_t(operand) >= lk.inputBuffer.size()) continue;
      const int64_t in = lk.inputBuffer[size_t(operand)];
      BufferParam &out = k.buffers[size_t(lk.outputBuffer[r])];
      if (in >= 0 && k.buffers[size_t(in)].dtype == out.dtype &&
          k.buffers[size_t(in)].sizes == out.sizes)
        out.aliasOf = in;
    }
  };
  share(lk.kernel);
  if (lk.kernel.general) {
    auto general = std::make_shared<Kernel>(*lk.kernel.general);
    share(*general);
    lk.kernel.general = std::move(general);
  }
  return lk;
}

std::string fusionLoweringKey(const Op &fusion, const LowerOptions &opts) {
  if (fusion.numRegions() != 1) return "";
  const Block &body = *fusion.region(0);
  if (!body.terminator() || body.arguments().size() != fusion.numOperands()) return "";
  std::string key = "fusion;";
  key += opts.fastPaths ? 'f' : '-';
  key += opts.lazyGeneral ? 'l' : '-';
  key += opts.verify ? 'v' : '-';
  // The fusion's own attrs but its memory plan's (the runtime's, not the kernel's).
  for (const auto &[name, attr] : fusion.attrs())
    if (!name.starts_with("mem.")) key += ";" + name + "=" + attr.str();
  std::unordered_map<const Value *, size_t> number;
  auto value = [&](const Value *v) {
    auto it = number.find(v);
    key += it == number.end() ? std::string("?") : std::to_string(it->second);
  };
  auto define = [&](const Value *v) {
    number.emplace(v, number.size());
    key += " " + v->name() + ":" + v->type().str();
  };
  // Region inputs with what the lowering reads from the values bound to them outside.
  for (size_t i = 0; i < body.arguments().size(); ++i) {
    const Value *outer = fusion.operand(i);
    define(body.arguments()[i].get());
    key += "@" + std::to_string(expectedUnitDim(outer)) + (isSliceView(outer) ? "s" : "");
    if (const Op *c = foldedConstant(outer)) {
      key += "=const";
      for (const auto &[name, attr] : c->attrs())
        key += ";" + name + "=" + attr.str();
    }
  }
  for (const Op *op : body) {
    key += "\n" + op->name() + "(";
    for (const Value *v : op->operands()) {
      value(v);
      key += ",";
    }
    key += ")";
    if (op->numRegions() > 0) return ""; // not lowerable anyway
    for (const auto &[name, attr] : op->attrs())
      key += ";" + name + "=" + attr.str();
    for (const auto &r : op->results())
      define(r.get());
  }
  return key;
}

LoweredKernel lowerElementwiseOp(const Op &op, const LowerOptions &opts) {
  if (std::string why = whyNotElementwise(op); !why.empty())
    unsupported(op.describe() + ": " + why);
  std::vector<Value *> outputs;
  for (const auto &r : op.results())
    outputs.push_back(r.get());
  return Lowering(op.operands(), {&op}, std::move(outputs), op.name(), opts, op.operands()).run();
}

std::vector<std::string> elementwiseOpNames() { return ew::names(); }

} // namespace xjit::backend
