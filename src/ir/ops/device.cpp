// Device transfers and distributed collectives. The reference interpreter runs every tensor on
// the host in one process, so a transfer is a copy (or self when the device does not change)
// and a collective has its single-process meaning: every rank's contribution is this one's.
// Collectives carry `group_size`, the number of processes in their group when the graph was
// captured; a group of one is an identity, larger groups cannot run in the interpreter.
#include "ops/op_util.h"

#include <charconv>

namespace xjit {

using namespace ops;

namespace {

using Results = std::vector<RtValue>;
using In = std::span<const RtValue>;

/// "cpu", "cuda", "cuda:1": a device kind (an identifier) and an optional index.
Device parseDevice(const std::string &text, const std::string &opName) {
  auto fail = [&]() -> Device {
    inferFail(opName + ": invalid device '" + text + "' (expected e.g. cpu, cuda or cuda:0)");
  };
  Device d;
  size_t colon = text.find(':');
  d.kind = text.substr(0, colon);
  if (d.kind.empty() || !(std::isalpha(static_cast<unsigned char>(d.kind[0])) || d.kind[0] == '_'))
    return fail();
  for (char c : d.kind)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return fail();
  if (colon != std::string::npos) {
    const char *b = text.data() + colon + 1, *e = text.data() + text.size();
    int index = -1;
    auto [p, ec] = std::from_chars(b, e, index);
    if (b == e || ec != std::errc() || p != e || index < 0) return fail();
    d.index = index;
  }
  return d;
}

const Tensor &tensorInput(const Op &op, In in, size_t i) {
  if (!in[i].isTensor())
    kernelFail(op.name() + ": operand " + std::to_string(i) + " must be a tensor, got " +
               in[i].kindName());
  return in[i].tensor();
}

Results one(Tensor t) { return {RtValue(std::move(t))}; }

// ---- transfers ----

std::vector<Type> inferToDevice(const Op &op) {
  const Type &t = tensorOperand(op, 0);
  return {Type::tensor(t.dtype(), t.shape(), parseDevice(attrStr(op, "device"), op.name()))};
}

std::vector<Type> inferToCopy(const Op &op) {
  const Type &t = tensorOperand(op, 0);
  DType dtype = op.attrOrNull("dtype") ? attrDType(op, "dtype") : t.dtype();
  Device device =
      op.attrOrNull("device") ? parseDevice(attrStr(op, "device"), op.name()) : t.device();
  return {Type::tensor(dtype, t.shape(), std::move(device))};
}

// ---- collectives ----

int64_t groupSize(const Op &op) {
  int64_t n = attrInt(op, "group_size");
  if (n < 1) inferFail(op.name() + ": group_size must be at least 1, got " + std::to_string(n));
  return n;
}

void requireSingleProcess(const Op &op) {
  if (int64_t n = attrInt(op, "group_size"); n != 1)
    kernelFail(op.name() + " over a group of " + std::to_string(n) +
               " processes cannot run in the single-process reference interpreter");
}

const char *const kReduceOps[] = {"sum", "avg", "product", "min", "max", "band", "bor", "bxor"};

std::vector<Type> inferReducing(const Op &op) {
  const Type &t = tensorOperand(op, 0);
  groupSize(op);
  const std::string &r = attrStr(op, "op");
  bool known = false;
  for (const char *k : kReduceOps)
    known |= r == k;
  if (!known)
    inferFail(op.name() + ": unknown reduce op '" + r +
              "' (expected sum, avg, product, min, max, band, bor or bxor)");
  if ((r == "band" || r == "bor" || r == "bxor") && isFloating(t.dtype()))
    inferFail(op.name() + ": bitwise reduce op '" + r + "' needs an integer or bool tensor, got " +
              t.str());
  if (r == "avg" && !isFloating(t.dtype()))
    inferFail(op.name() + ": avg needs a floating tensor, got " + t.str());
  return {t};
}

/// all_gather concatenates every rank's tensor along gather_dim; reduce_scatter reduces and
/// keeps this rank's 1/group_size slice of scatter_dim.
std::vector<Type> inferResized(const Op &op, const char *dimAttr, bool gather) {
  const Type &t = tensorOperand(op, 0);
  if (!gather) inferReducing(op);
  int64_t n = groupSize(op);
  if (t.rank() == 0) inferFail(op.name() + ": needs a tensor with at least one dim");
  int64_t d = normDim(attrInt(op, dimAttr), t.rank());
  Shape s = t.shape();
  if (gather) {
    s[d] = s[d] * DimExpr(n);
  } else {
    if (s[d].isStatic() && s[d].value() % n != 0)
      inferFail(op.name() + ": dim " + std::to_string(d) + " of size " + s[d].str() +
                " does not split into " + std::to_string(n) + " equal parts");
    s[d] = s[d].floorDiv(DimExpr(n));
  }
  return {t.withShape(std::move(s))};
}

/// A fresh copy: what every collective returns in a group of one.
Results copyKernel(const Op &op, In in) {
  requireSingleProcess(op);
  return one(tensorInput(op, in, 0).contiguousCopy());
}

AttrSpec groupSizeAttr() { return {"group_size", AttrKind::Int, Attr(int64_t{1})}; }

} // namespace

void registerDeviceOps(OpRegistry &r) {
  r.add({.name = "to_device",
         .summary = "Tensor.to(device): self when already on `device` (cpu, cuda, cuda:0 ...), "
                    "else a copy there (may alias self)",
         .operands = {{"self"}},
         .attrs = {{"device", AttrKind::Str}},
         .traits = kView,
         .infer = inferToDevice,
         .kernel = [](const Op &op, In in) -> Results {
           // One host memory in the interpreter: a transfer between devices is a copy.
           const Tensor &t = tensorInput(op, in, 0);
           if (op.operand(0)->type().device() == op.result(0)->type().device()) return one(t);
           return one(t.contiguousCopy());
         }});
  r.add({.name = "to_copy",
         .summary = "aten._to_copy: always a fresh copy, converted to `dtype` and/or moved to "
                    "`device` when given",
         .operands = {{"self"}},
         .attrs = {{.name = "dtype", .kind = AttrKind::DType, .optional = true},
                   {.name = "device", .kind = AttrKind::Str, .optional = true}},
         .infer = inferToCopy,
         .kernel = [](const Op &op, In in) -> Results {
           return one(tensorInput(op, in, 0).to(resultDType(op)));
         }});
  r.add({.name = "all_reduce",
         .summary = "functional all-reduce over the process group with `op` (sum, avg, product, "
                    "min, max, band, bor, bxor); a copy of self in a group of one",
         .operands = {{"self"}},
         .attrs = {{"op", AttrKind::Str, Attr("sum")}, groupSizeAttr()},
         .traits = kSideEffect, // every rank must issue its collectives in the same order
         .infer = inferReducing,
         .kernel = copyKernel});
  r.add({.name = "all_gather",
         .summary = "functional all-gather: every rank's self concatenated along gather_dim",
         .operands = {{"self"}},
         .attrs = {{"gather_dim", AttrKind::Int, Attr(int64_t{0})}, groupSizeAttr()},
         .traits = kSideEffect,
         .infer = [](const Op &op) { return inferResized(op, "gather_dim", true); },
         .kernel = copyKernel});
  r.add({.name = "reduce_scatter",
         .summary = "functional reduce-scatter: reduces with `op`, keeps this rank's slice of "
                    "scatter_dim",
         .operands = {{"self"}},
         .attrs = {{"op", AttrKind::Str, Attr("sum")},
                   {"scatter_dim", AttrKind::Int, Attr(int64_t{0})},
                   groupSizeAttr()},
         .traits = kSideEffect,
         .infer = [](const Op &op) { return inferResized(op, "scatter_dim", false); },
         .kernel = copyKernel});
  r.add({.name = "broadcast",
         .summary = "functional broadcast: rank `src`'s self on every rank",
         .operands = {{"self"}},
         .attrs = {{"src", AttrKind::Int, Attr(int64_t{0})}, groupSizeAttr()},
         .traits = kSideEffect,
         .infer = [](const Op &op) -> std::vector<Type> {
           const Type &t = tensorOperand(op, 0);
           int64_t n = groupSize(op), src = attrInt(op, "src");
           if (src < 0 || src >= n)
             inferFail("broadcast: src rank " + std::to_string(src) + " is not in a group of " +
                       std::to_string(n));
           return {t};
         },
         .kernel = copyKernel});
  r.add({.name = "wait_tensor",
         .summary = "waits for the asynchronous collective that produced self; returns self",
         .operands = {{"self"}},
         .traits = kSideEffect | kView, // returns self
         .infer = [](const Op &op) { return std::vector<Type>{tensorOperand(op, 0)}; },
         .kernel = [](const Op &op, In in) { return one(tensorInput(op, in, 0)); }});
  r.add({.name = "barrier",
         .summary = "waits until every process of the group reaches it (nothing in one process)",
         .attrs = {groupSizeAttr()},
         .traits = kSideEffect,
         .infer =
             [](const Op &op) {
               groupSize(op);
               return std::vector<Type>{};
             },
         .kernel = [](const Op &op, In) -> Results {
           requireSingleProcess(op);
           return {};
         }});
}

} // namespace xjit
