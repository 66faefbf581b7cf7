#include "ops/elementwise_util.h"

#include <cfloat>
#include <cmath>
#include <string>

namespace xjit::ops::ew {

bool dtypeAllowed(uint8_t mask, DType d) {
  switch (dtypeCategory(d)) {
  case DTypeCategory::Bool:
    return (mask & kBoolOk) != 0;
  case DTypeCategory::Integer:
    return (mask & kIntOk) != 0;
  case DTypeCategory::Floating:
    return (mask & kFloatOk) != 0;
  }
  return false;
}

static std::string describeMask(uint8_t mask) {
  switch (mask) {
  case kFloatOk:
    return "a floating point dtype";
  case kNumeric:
    return "an integer or floating point dtype";
  case kIntegral:
    return "an integer or bool dtype";
  case kIntOk:
    return "an integer dtype";
  default:
    return "a supported dtype";
  }
}

void requireDType(const Op &op, uint8_t mask, DType d, std::string_view what) {
  if (dtypeAllowed(mask, d))
    return;
  inferFail(op.name() + ": " + std::string(what) + " dtype " + std::string(dtypeName(d)) +
            " is not supported (expected " + describeMask(mask) + ")");
}

const Type &tensorOrScalarOperand(const Op &op, size_t i) {
  if (i >= op.numOperands())
    inferFail(op.name() + ": missing operand " + std::to_string(i));
  const Type &t = op.operand(i)->type();
  if (!t.isTensor() && !t.isScalar())
    inferFail(op.name() + ": operand " + std::to_string(i) +
              " must be a tensor or a Python scalar, got " + t.str());
  return t;
}

Type broadcastResult(const Op &op, size_t first, size_t count, DType dtype) {
  Shape shape;
  const Device *device = nullptr;
  bool deviceFromZeroDim = false;
  for (size_t i = first; i < first + count; ++i) {
    const Type &t = tensorOrScalarOperand(op, i);
    if (!t.isTensor())
      continue;
    try {
      shape = broadcastShapes(shape, t.shape());
    } catch (const TypeInferenceError &e) {
      inferFail(op.name() + ": operand shapes do not broadcast: " + e.what());
    }
    // 0-d tensors may live on another device (a CPU scalar tensor with CUDA tensors).
    bool zeroDim = t.rank() == 0;
    if (!device || (deviceFromZeroDim && !zeroDim)) {
      device = &t.device();
      deviceFromZeroDim = zeroDim;
    } else if (!zeroDim && *device != t.device()) {
      inferFail(op.name() + ": operands are on different devices (" + device->str() + " and " +
                t.device().str() + ")");
    }
  }
  if (!device)
    inferFail(op.name() + ": expected at least one tensor operand");
  return Type::tensor(dtype, std::move(shape), *device);
}

Type scalarType(DTypeCategory c) {
  switch (c) {
  case DTypeCategory::Bool:
    return Type::boolTy();
  case DTypeCategory::Integer:
    return Type::intTy();
  case DTypeCategory::Floating:
    return Type::floatTy();
  }
  return Type::floatTy();
}

bool allScalars(const Op &op, size_t first, size_t count) {
  for (size_t i = first; i < first + count; ++i)
    if (!tensorOrScalarOperand(op, i).isScalar())
      return false;
  return true;
}

Tensor operandAs(std::span<const RtValue> in, size_t i, DType d) {
  if (i >= in.size())
    kernelFail("missing operand " + std::to_string(i));
  const RtValue &v = in[i];
  if (v.isTensor())
    return v.tensor().dtype() == d ? v.tensor() : v.tensor().to(d);
  Tensor t = Tensor::empty(d, {});
  if (v.isFloat()) {
    t.setDouble(0, v.toDouble());
  } else if (v.isInt() || v.isBool()) {
    if (isFloating(d))
      t.setDouble(0, static_cast<double>(v.toInt()));
    else
      t.setInt(0, v.toInt());
  } else {
    kernelFail(std::string("expected a tensor or a number, got ") + v.kindName());
  }
  return t;
}

Tensor mapAll(std::span<const Tensor> inputs, DType compute, DType out, const FloatFn &f,
              const IntFn &i) {
  if (out != DType::Bool)
    return mapElements(inputs, compute, out, f, i);
  // Bool results store truth values; NaN is true like in torch.
  FloatFn fb =
      f ? FloatFn([&](std::span<const double> v) { return f(v) != 0 ? 1.0 : 0.0; }) : FloatFn();
  IntFn ib = i ? IntFn([&](std::span<const int64_t> v) -> int64_t { return i(v) != 0; }) : IntFn();
  return mapElements(inputs, compute, out, fb, ib);
}

Tensor map1(const Tensor &x, DType compute, DType out, const Float1 &f, const Int1 &i) {
  Tensor in[] = {x.dtype() == compute ? x : x.to(compute)};
  FloatFn ff = [&](std::span<const double> v) { return f(v[0]); };
  IntFn ii = i ? IntFn([&](std::span<const int64_t> v) { return i(v[0]); }) : IntFn();
  return mapAll(in, compute, out, ff, ii);
}

Tensor map2(const Tensor &a, const Tensor &b, DType compute, DType out, const Float2 &f,
            const Int2 &i) {
  Tensor in[] = {a.dtype() == compute ? a : a.to(compute),
                 b.dtype() == compute ? b : b.to(compute)};
  FloatFn ff = [&](std::span<const double> v) { return f(v[0], v[1]); };
  IntFn ii = i ? IntFn([&](std::span<const int64_t> v) { return i(v[0], v[1]); }) : IntFn();
  return mapAll(in, compute, out, ff, ii);
}

double floatMax(DType d) {
  switch (d) {
  case DType::F16:
    return 65504.0;
  case DType::BF16:
    return 3.38953138925153547590470800371487866880e38;
  case DType::F32:
    return FLT_MAX;
  default:
    return DBL_MAX;
  }
}

bool scalarFits(DType d, double v) {
  if (isFloating(d))
    return !std::isfinite(v) || std::fabs(v) <= floatMax(d);
  double lo = 0, hi = 1;
  switch (d) {
  case DType::U8:
    lo = -255, hi = 255;
    break; // negative values wrap, as torch allows
  case DType::I8:
    lo = -128, hi = 127;
    break;
  case DType::I16:
    lo = -32768, hi = 32767;
    break;
  case DType::I32:
    lo = -2147483648.0, hi = 2147483647.0;
    break;
  case DType::I64:
    lo = -9223372036854775808.0, hi = 9223372036854775807.0;
    break;
  default:
    break;
  }
  return v >= lo && v <= hi;
}

} // namespace xjit::ops::ew
