// Which reductions and row ops a reduction kernel computes, and over which dims (the formulas
// are in lower_fusion.cpp, where the loops are built).
#include "lower_internal.h"

#include "ops/op_util.h"
#include "xjit/ir/op_registry.h"

#include <algorithm>
#include <map>

namespace xjit::backend::red {
namespace {

const std::map<std::string, Kind, std::less<>> kKinds = {{"sum", Kind::Sum},
                                                         {"prod", Kind::Prod},
                                                         {"mean", Kind::Mean},
                                                         {"amax", Kind::Max},
                                                         {"max", Kind::Max},
                                                         {"amin", Kind::Min},
                                                         {"min", Kind::Min},
                                                         {"var", Kind::Var},
                                                         {"std", Kind::Std},
                                                         {"softmax", Kind::Softmax},
                                                         {"log_softmax", Kind::LogSoftmax},
                                                         {"layer_norm", Kind::LayerNorm},
                                                         {"rms_norm", Kind::RmsNorm},
                                                         {"norm", Kind::Norm},
                                                         {"argmax", Kind::ArgMax},
                                                         {"argmin", Kind::ArgMin}};

std::vector<int64_t> allDims(int64_t rank) {
  std::vector<int64_t> d;
  for (int64_t i = 0; i < rank; ++i)
    d.push_back(i);
  return d;
}

} // namespace

bool isReductionLike(const Op &op) { return kKinds.count(op.name()) > 0; }

std::optional<Info> classify(const Op &op, std::string *why) {
  auto no = [&](std::string w) -> std::optional<Info> {
    if (why) *why = op.name() + ": " + std::move(w);
    return std::nullopt;
  };
  auto it = kKinds.find(op.name());
  if (it == kKinds.end()) return no("not a reduction");
  if (op.numResults() != 1 || !op.result(0)->type().isTensor() || op.numOperands() < 1 ||
      !op.operand(0)->type().isTensor())
    return no("expected a tensor operand and result");
  const Type &x = op.operand(0)->type();
  int64_t rank = x.rank();
  Info info{it->second, {}, false, false};
  DType in = x.dtype(), out = op.result(0)->type().dtype();
  switch (info.kind) {
  case Kind::Sum:
  case Kind::Prod:
  case Kind::Mean:
  case Kind::Max:
  case Kind::Min:
  case Kind::Var:
  case Kind::Std:
  case Kind::Norm: {
    const Attr *dims = op.attrOrNull("dims");
    info.dims = dims ? ops::normDims(dims->asInts(), rank) : std::vector<int64_t>{};
    if (info.dims.empty()) info.dims = allDims(rank); // an empty list reduces every dim
    info.keepdim = op.def().attrSpec("keepdim") && ops::attrBool(op, "keepdim");
    if (out == DType::Bool && (info.kind == Kind::Sum || info.kind == Kind::Prod))
      return no("a bool result");
    if ((info.kind == Kind::Var || info.kind == Kind::Std || info.kind == Kind::Mean ||
         info.kind == Kind::Norm) &&
        !isFloating(out))
      return no("needs a floating result");
    break;
  }
  case Kind::ArgMax:
  case Kind::ArgMin: {
    // One dim, or every dim (the flattened index) without `dim`.
    const Attr *dim = op.attrOrNull("dim");
    if (dim && dim->kind() == AttrKind::Int)
      info.dims = rank > 0 ? std::vector<int64_t>{ops::normDim(dim->asInt(), rank)}
                           : std::vector<int64_t>{};
    else
      info.dims = allDims(rank);
    info.keepdim = ops::attrBool(op, "keepdim");
    if (in == DType::Bool) return no("a bool operand");
    if (rank == 0) return no("a 0-d operand");
    break;
  }
  case Kind::Softmax:
  case Kind::LogSoftmax:
    info.rowOp = true;
    if (rank > 0) info.dims = {ops::normDim(ops::attrInt(op, "dim"), rank)};
    if (!isFloating(out)) return no("needs a floating result");
    break;
  case Kind::LayerNorm:
  case Kind::RmsNorm: {
    info.rowOp = true;
    auto k = int64_t(ops::attrInts(op, "normalized_shape").size());
    if (k > rank) return no("normalized_shape longer than the input");
    for (int64_t d = rank - k; d < rank; ++d)
      info.dims.push_back(d);
    if (!isFloating(in)) return no("needs a floating input");
    for (size_t i = 1; i < op.numOperands(); ++i) {
      const Type &t = op.operand(i)->type();
      if (t.kind() != TypeKind::None && (!t.isTensor() || !isFloating(t.dtype())))
        return no("weight and bias must be floating tensors");
    }
    break;
  }
  }
  std::sort(info.dims.begin(), info.dims.end());
  info.dims.erase(std::unique(info.dims.begin(), info.dims.end()), info.dims.end());
  if (rank == 0) info.dims.clear(); // a 0-d tensor reduces over nothing
  return info;
}

} // namespace xjit::backend::red
