// cumsum -> kernel IR: a running sum along one dim (from its end with `reverse`, the autodiff
// pass's gradient of cumsum). The input is seen as [outer, n, inner] (n: the scanned dim):
//   inner == 1: each row is a sequential loop on one accumulator, rows in parallel;
//   inner  > 1: blocks of up to kLanes inner elements scan together on an array accumulator,
//               the inner loop unit-stride and vectorized, the scanned dim outside it.
// Accumulation as eager's CPU kernel (at::acc_type): f32 sums in f64 and rounds each result,
// f16 / bf16 in f32, integers in i64 (wrapping), so results equal eager's. The kernel compiled
// up front assumes a dense input (a stride check); the general one indexes every dim by its
// stride (Kernel::general, compiled when a call needs it).
#include "xjit/backend/lower.h"

#include "ops/op_util.h"
#include "xjit/ir/diagnostics.h"

namespace xjit::backend {
namespace {

/// Inner elements that scan together (f64 lanes: 2 KB of accumulators, in L1).
constexpr int64_t kLanes = 256;

DType accumulatorDType(DType out) {
  switch (out) {
  case DType::F16:
  case DType::BF16: return DType::F32;
  case DType::F32:
  case DType::F64: return DType::F64;
  default: return DType::I64;
  }
}

Expr extentOf(const Shape &s, int64_t buffer, size_t d) {
  return s[d].isStatic() ? constIdx(s[d].value()) : sizeOf(buffer, int64_t(d));
}

Expr productOf(const Shape &s, int64_t buffer, size_t from, size_t to) {
  Expr p = constIdx(1);
  for (size_t d = from; d < to; ++d)
    p = mulIdx(p, extentOf(s, buffer, d));
  return p;
}

class ScanLowering {
public:
  ScanLowering(const Op &op, bool general) : general_(general) {
    const Type &in = op.operand(0)->type(), &out = op.result(0)->type();
    shape_ = in.shape();
    dim_ = size_t(ops::normDim(ops::attrInt(op, "dim"), in.rank()));
    const Attr *r = op.attrOrNull("reverse");
    reverse_ = r && r->asBool();
    outDType_ = out.dtype();
    accDType_ = accumulatorDType(outDType_);
    k_.name = "cumsum";
    k_.buffers.push_back({"x", in.dtype(), in.shape(), false});
    k_.buffers.push_back({"out0", out.dtype(), out.shape(), true});
  }

  Kernel run() {
    StmtList body = general_ ? generalNest() : contiguousNest();
    if (!general_) {
      // The contiguous version runs when x is dense (the output always is): else the general.
      std::vector<Expr> dense;
      Expr stride = constIdx(1);
      for (size_t d = shape_.size(); d-- > 0;) {
        if (!(shape_[d].isStatic() && shape_[d].value() == 1))
          dense.push_back(compare(CmpOp::Eq, strideOf(0, int64_t(d)), stride));
        stride = mulIdx(stride, extentOf(shape_, 0, d));
      }
      if (!dense.empty()) body.insert(body.begin(), assertTrue(andAll(dense), kStrideCheck));
    }
    k_.body = std::move(body);
    return std::move(k_);
  }

private:
  /// The scanned position of step s: s, or n - 1 - s in reverse.
  Expr position(const Expr &step, const Expr &n) const {
    return reverse_ ? binary(BinaryOp::Sub, binary(BinaryOp::Sub, n, constIdx(1)), step) : step;
  }

  Expr value(const Expr &offset) const {
    return cast(accDType_, cast(outDType_, load(0, k_.buffers[0].dtype, offset)));
  }

  StmtList contiguousNest() {
    Expr outer = productOf(shape_, 0, 0, dim_), n = extentOf(shape_, 0, dim_);
    Expr inner = productOf(shape_, 0, dim_ + 1, shape_.size());
    int64_t o = k_.newVar(), s = k_.newVar();
    Expr row = mulIdx(var(o), n); // the first element of row o, in units of inner
    if (isConst(inner, 1)) {
      int64_t running = k_.addAcc("running", accDType_);
      Expr at = addIdx(row, position(var(s), n));
      StmtList step = {reduce(running, BinaryOp::Add, value(at)),
                       store(1, at, cast(outDType_, acc(running, accDType_)))};
      StmtList body = {initAcc(running, zero()), forLoop(s, n, std::move(step), false)};
      return {parallelFor(o, outer, n, std::move(body), false)};
    }
    // Blocks of kLanes inner elements: [o, s, block * kLanes + j].
    std::optional<int64_t> staticInner = std::nullopt;
    if (inner->kind == ExprKind::Const) staticInner = inner->ival;
    const int64_t lanes = staticInner ? std::min(*staticInner, kLanes) : kLanes;
    int64_t running = k_.addAcc("running", accDType_, lanes);
    int64_t blk = k_.newVar(), j = k_.newVar(), j2 = k_.newVar();
    Expr base = mulIdx(var(blk), constIdx(lanes));
    Expr width = binary(BinaryOp::Min, constIdx(lanes), binary(BinaryOp::Sub, inner, base));
    Expr blocks = binary(BinaryOp::Div, addIdx(inner, constIdx(lanes - 1)), constIdx(lanes));
    Expr at = addIdx(mulIdx(addIdx(row, position(var(s), n)), inner), addIdx(base, var(j2)));
    StmtList lane = {reduceAt(running, var(j2), BinaryOp::Add, value(at)),
                     store(1, at, cast(outDType_, accAt(running, accDType_, var(j2))))};
    StmtList block = {forLoop(j, width, {initAccAt(running, var(j), zero())}),
                      forLoop(s, n, {forLoop(j2, width, std::move(lane))}, false)};
    StmtList body = {forLoop(blk, blocks, std::move(block), false)};
    return {parallelFor(o, outer, mulIdx(n, inner), std::move(body), false)};
  }

  /// Any strides: a loop per dim but the scanned one, which runs innermost and sequentially.
  StmtList generalNest() {
    std::vector<Expr> idx(shape_.size());
    std::vector<int64_t> vars(shape_.size());
    for (size_t d = 0; d < shape_.size(); ++d) {
      vars[d] = k_.newVar();
      idx[d] = var(vars[d]);
    }
    Expr n = extentOf(shape_, 0, dim_);
    idx[dim_] = position(var(vars[dim_]), n);
    auto offsetIn = [&](int64_t b) {
      Expr off = constIdx(0);
      for (size_t d = 0; d < shape_.size(); ++d)
        off = addIdx(off, mulIdx(idx[d], strideOf(b, int64_t(d))));
      return off;
    };
    int64_t running = k_.addAcc("running", accDType_);
    StmtList step = {reduce(running, BinaryOp::Add, value(offsetIn(0))),
                     store(1, offsetIn(1), cast(outDType_, acc(running, accDType_)))};
    StmtList body = {initAcc(running, zero()), forLoop(vars[dim_], n, std::move(step), false)};
    for (size_t d = shape_.size(); d-- > 0;)
      if (d != dim_) body = {forLoop(vars[d], extentOf(shape_, 0, d), std::move(body), false)};
    return body;
  }

  Expr zero() const {
    return isFloating(accDType_) ? constFloat(accDType_, 0.0) : constInt(accDType_, 0);
  }

  bool general_;
  Shape shape_;
  size_t dim_ = 0;
  bool reverse_ = false;
  DType outDType_ = DType::F32, accDType_ = DType::F64;
  Kernel k_;
};

} // namespace

std::string whyNotScan(const Op &op) {
  if (op.name() != "cumsum") return op.name() + ": not a scan";
  if (op.numOperands() != 1 || op.numResults() != 1 || !op.operand(0)->type().isTensor() ||
      !op.result(0)->type().isTensor())
    return "cumsum: expected a tensor operand and result";
  if (op.operand(0)->type().rank() == 0) return "cumsum: a 0-d tensor (a copy)";
  if (op.operand(0)->type().shape() != op.result(0)->type().shape())
    return "cumsum: the result's shape differs from the input's";
  return "";
}

LoweredKernel lowerScan(const Op &op, const LowerOptions &opts) {
  if (std::string why = whyNotScan(op); !why.empty())
    throw Error(ErrorKind::Internal, "cannot lower to a scan kernel: " + why);
  LoweredKernel lk;
  lk.kernel = ScanLowering(op, /*general=*/!opts.fastPaths).run();
  if (opts.fastPaths)
    lk.kernel.general = std::make_shared<const Kernel>(ScanLowering(op, true).run());
  lk.inputTypes = {op.operand(0)->type()};
  lk.outputTypes = {op.result(0)->type()};
  lk.inputBuffer = {0};
  lk.inputScalar = {-1};
  lk.outputBuffer = {1};
  if (opts.verify) {
    verifyKernelOrThrow(lk.kernel);
    if (lk.kernel.general) verifyKernelOrThrow(*lk.kernel.general);
  }
  return lk;
}

} // namespace xjit::backend
