// Elementwise / broadcast regions -> kernel IR (see xjit/backend/lower.h for the scheme).
#include "xjit/backend/lower.h"

#include "lower_internal.h"
#include "ops/movement_util.h" // resolveSlice
#include "ops/op_util.h"
#include "xjit/ir/diagnostics.h"

#include <algorithm>
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

/// One shared index 0, so that equal index vectors are pointer-equal (the memo's key).
const Expr &zeroIdx() {
  static const Expr zero = constIdx(0);
  return zero;
}

/// Ops that only remap indices.
const std::set<std::string, std::less<>> kViewOps = {
    "expand", "expand_as", "unsqueeze", "squeeze",    "permute", "transpose", "t",
    "slice",  "select",    "narrow",    "contiguous", "clone",   "alias"};

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

class Lowering {
public:
  Lowering(std::vector<Value *> inputs, std::vector<const Op *> ops, std::vector<Value *> outputs,
           const std::string &name, const LowerOptions &opts)
      : inputs_(std::move(inputs)), outputs_(std::move(outputs)), opts_(opts) {
    lk_.kernel.name = sanitize(name);
    for (const Op *op : ops)
      ops_.insert(op);
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
    for (const auto &[shape, outs] : groups)
      for (Stmt &s : emitGroup(shape, outs))
        body.push_back(std::move(s));
    // Checks on scalar operands run before any loop.
    StmtList all = std::move(asserts_);
    for (Stmt &s : body)
      all.push_back(std::move(s));
    lk_.kernel.body = std::move(all);
    verifyKernelOrThrow(lk_.kernel);
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
    }
  }

  StmtList emitGroup(const Shape &shape, const std::vector<size_t> &outs) {
    StmtList general = emitVariant(Mode::General, shape, outs);
    if (!opts_.fastPaths || shape.empty()) return general;
    for (Mode m : {Mode::Flat, Mode::InnerUnit}) {
      if (m == Mode::InnerUnit && isStaticOne(shape.back())) break;
      try {
        StmtList fast = emitVariant(m, shape, outs);
        if (conds_.empty())
          return fast; // nothing to check (e.g. every buffer has a static 1 inner dim)
        return {ifThen(andAll(conds_), std::move(fast), std::move(general))};
      } catch (const NotApplicable &) {
      }
    }
    return general;
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
    StmtList body;
    for (size_t o : outs) {
      int64_t b = lk_.outputBuffer[o];
      Expr value = cast(k.buffers[size_t(b)].dtype, valueAt(outputs_[o], iter_));
      body.push_back(store(b, offsetOf(b, iter_), std::move(value)));
    }
    if (mode == Mode::Flat) {
      Expr numel = constIdx(1);
      for (const Expr &e : extents_)
        numel = mulIdx(numel, e);
      return {forLoop(flatVar_->index, numel, std::move(body))};
    }
    for (size_t d = rank; d-- > 0;)
      body = {forLoop(ids[d], extents_[d], std::move(body), mode != Mode::General)};
    return body;
  }

  /// Element offset of `idx` in buffer b under the current mode.
  Expr offsetOf(int64_t b, const std::vector<Expr> &idx) {
    size_t rank = idx.size();
    if (mode_ == Mode::Flat) {
      if (std::all_of(idx.begin(), idx.end(), [](const Expr &e) { return isConst(e, 0); }))
        return constIdx(0);
      bool identity = rank == shape_.size();
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
      Expr stride = strideOf(b, int64_t(d));
      if (mode_ == Mode::InnerUnit && d + 1 == rank && idx[d] == iter_.back()) {
        stride = constIdx(1);
        if (condBuffers_.insert(b).second)
          conds_.push_back(compare(CmpOp::Eq, strideOf(b, int64_t(d)), constIdx(1)));
      }
      off = addIdx(off, mulIdx(idx[d], stride));
    }
    return off;
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
    const Shape &resultShape = v->type().shape();
    if (kViewOps.count(op->name())) return valueAt(op->operand(0), viewIndex(*op, idx));
    std::vector<Expr> operands;
    for (size_t i = 0; i < op->numOperands(); ++i) {
      Value *a = op->operand(i);
      const Type &t = a->type();
      if (t.kind() == TypeKind::None)
        operands.push_back(nullptr);
      else if (t.isTensor())
        operands.push_back(valueAt(a, broadcastIndex(idx, t.shape(), resultShape)));
      else
        operands.push_back(valueAt(a, {}));
    }
    return ew::lower(*op, operands, [this, op](Expr ok, std::string message) {
      if (!assertKeys_.insert({op, message}).second) return;
      Kernel &k = lk_.kernel;
      k.errors.push_back(op->describe() + ": " + message);
      asserts_.push_back(assertTrue(std::move(ok), int64_t(k.errors.size()) - 1));
    });
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
    // expand, expand_as, contiguous, clone, alias.
    return broadcastIndex(idx, in, out);
  }

  std::vector<Value *> inputs_, outputs_;
  std::unordered_set<const Op *> ops_;
  LowerOptions opts_;
  LoweredKernel lk_;
  std::unordered_map<const Value *, size_t> inputIndex_;
  std::set<std::string> usedNames_;
  std::set<std::pair<const Op *, std::string>> assertKeys_;
  StmtList asserts_;

  // The version being built.
  Mode mode_ = Mode::General;
  Shape shape_;
  std::vector<Expr> iter_, extents_, conds_;
  Expr flatVar_;
  std::set<int64_t> condBuffers_;
  std::map<MemoKey, Expr> memo_;
};

} // namespace

std::string whyNotElementwise(const Op &op) {
  if (op.name() == "constant") return whyNotConstant(op);
  if (kViewOps.count(op.name())) return whyNotView(op);
  std::string why;
  return ew::supports(op, &why) ? "" : why;
}

std::string whyNotLowerable(const Block &body) {
  for (Op *op : body) {
    if (op == body.terminator()) continue;
    if (op->numRegions() > 0) return op->name() + ": has regions";
    std::string why = whyNotElementwise(*op);
    if (!why.empty()) return op->describe() + ": " + why;
  }
  return body.terminator() ? "" : "the block has no terminator";
}

LoweredKernel lowerElementwiseBlock(const Block &body, const std::string &name,
                                    const LowerOptions &opts) {
  if (std::string why = whyNotLowerable(body); !why.empty()) unsupported(why);
  std::vector<Value *> inputs;
  for (const auto &a : body.arguments())
    inputs.push_back(a.get());
  std::vector<const Op *> ops;
  for (Op *op : body)
    if (op != body.terminator()) ops.push_back(op);
  return Lowering(std::move(inputs), std::move(ops), body.terminator()->operands(), name, opts)
      .run();
}

LoweredKernel lowerFusion(const Op &fusion, const LowerOptions &opts) {
  if (fusion.numRegions() != 1) unsupported(fusion.describe() + ": expected one region");
  std::string name = "fusion";
  if (const Attr *kind = fusion.attrOrNull("kind"); kind && kind->kind() == AttrKind::Str)
    name += "_" + kind->asStr();
  return lowerElementwiseBlock(*fusion.region(0), name, opts);
}

LoweredKernel lowerElementwiseOp(const Op &op, const LowerOptions &opts) {
  if (std::string why = whyNotElementwise(op); !why.empty())
    unsupported(op.describe() + ": " + why);
  std::vector<Value *> outputs;
  for (const auto &r : op.results())
    outputs.push_back(r.get());
  return Lowering(op.operands(), {&op}, std::move(outputs), op.name(), opts).run();
}

std::vector<std::string> elementwiseOpNames() { return ew::names(); }

} // namespace xjit::backend
