// Reductions (sum, mean, prod, amax/amin, max/min, any/all, count_nonzero, var/std, norm,
// logsumexp), index reductions (max_dim/min_dim, argmax/argmin) and scans along one dim (softmax,
// log_softmax, cumsum, cumprod). Every kernel first groups the input elements that reduce together,
// then applies a plain function to each group: slow but obviously correct.
#include "ops/op_util.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace xjit {

using namespace ops;

namespace {

using Results = std::vector<RtValue>;
using In = std::span<const RtValue>;
using Ints = std::vector<int64_t>;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

std::string str(DType d) { return std::string(dtypeName(d)); }

// ---- attributes ----

AttrSpec dimsAttr() {
  return {.name = "dims", .kind = AttrKind::Ints, .defaultValue = Attr(Ints{})};
}
AttrSpec keepdimAttr() {
  return {.name = "keepdim", .kind = AttrKind::Bool, .defaultValue = Attr(false)};
}
AttrSpec dimAttr() { return {.name = "dim", .kind = AttrKind::Int}; }
AttrSpec dtypeAttr() { return {.name = "dtype", .kind = AttrKind::DType, .optional = true}; }

/// Normalized reduction dims, errors prefixed with the op name.
Ints reductionDims(const Op &op, const Ints &dims, int64_t rank) {
  try {
    return normDims(dims, rank);
  } catch (const TypeInferenceError &e) {
    inferFail(op.name() + ": " + e.what());
  }
}
int64_t oneDim(const Op &op, int64_t rank) {
  try {
    return normDim(attrInt(op, "dim"), rank);
  } catch (const TypeInferenceError &e) {
    inferFail(op.name() + ": " + e.what());
  }
}
/// `dims` of an op that has that attribute, else every dim.
Ints opDims(const Op &op, int64_t rank) {
  return reductionDims(op, op.def().attrSpec("dims") ? attrInts(op, "dims") : Ints{}, rank);
}
bool opKeepdim(const Op &op) { return op.def().attrSpec("keepdim") && attrBool(op, "keepdim"); }
std::optional<DType> optDType(const Op &op) {
  if (!hasAttrValue(op, "dtype")) return std::nullopt;
  return attrDType(op, "dtype");
}

void requireFloat(const Op &op, DType d, const char *what = "input") {
  if (!isFloating(d))
    inferFail(op.name() + ": expected a floating point " + what + ", got dtype " + str(d));
}

// ---- kernels: grouping ----

const Tensor &input(const Op &op, In in) {
  if (in.empty() || !in[0].isTensor()) kernelFail(op.name() + ": expected a tensor operand");
  return in[0].tensor();
}

Tensor convert(const Tensor &t, DType d) { return t.dtype() == d ? t : t.to(d); }

/// The input elements reduced into each output element. A row-major linear index is linear in
/// the multi-index, so group k's members are bases[k] + offsets[j]: bases enumerate the kept
/// coordinates (in output order), offsets the reduced ones in row-major order (with one reduced
/// dim, position j is the index along it).
struct Groups {
  Ints outSizes; // with keepdim applied
  Ints bases, offsets;
  size_t size() const { return bases.size(); }
  Ints members(size_t k) const {
    Ints m(offsets);
    for (int64_t &o : m)
      o += bases[k];
    return m;
  }
};

Groups groupBy(const Ints &sizes, const Ints &dims, bool keepdim) {
  Ints rowStrides = contiguousStrides(sizes), kept = sizes, reducedSizes, reducedStrides;
  for (int64_t d : dims) {
    kept[d] = 1;
    reducedSizes.push_back(sizes[d]);
    reducedStrides.push_back(rowStrides[d]);
  }
  auto dot = [](const Ints &idx, const Ints &strides) {
    int64_t v = 0;
    for (size_t i = 0; i < idx.size(); ++i)
      v += idx[i] * strides[i];
    return v;
  };
  Groups g;
  forEachIndex(kept, [&](const Ints &idx, int64_t) { g.bases.push_back(dot(idx, rowStrides)); });
  forEachIndex(reducedSizes,
               [&](const Ints &idx, int64_t) { g.offsets.push_back(dot(idx, reducedStrides)); });
  for (size_t d = 0; d < sizes.size(); ++d) {
    bool reduced = std::find(dims.begin(), dims.end(), static_cast<int64_t>(d)) != dims.end();
    if (!reduced)
      g.outSizes.push_back(sizes[d]);
    else if (keepdim)
      g.outSizes.push_back(1);
  }
  return g;
}

std::string emptyDimMessage(const Op &op, int64_t d) {
  return op.name() + ": expected reduction dim " + std::to_string(d) + " to have non-zero size";
}

/// Ops without an identity (max, argmax, inf-norm) cannot reduce over a zero-size dim: an inference
/// error when the dim is statically 0, else a kernel error.
void requireNonEmptyType(const Op &op, const Shape &s, const Ints &dims) {
  for (int64_t d : dims)
    if (auto v = s[static_cast<size_t>(d)].staticValue(); v && *v == 0)
      inferFail(emptyDimMessage(op, d));
}
void requireNonEmpty(const Op &op, const Tensor &t, const Ints &dims) {
  for (int64_t d : dims)
    if (t.size(d) == 0) kernelFail(emptyDimMessage(op, d));
}

std::vector<double> valuesOf(const Tensor &t, const Ints &members) {
  std::vector<double> v;
  v.reserve(members.size());
  for (int64_t m : members)
    v.push_back(t.getDouble(m));
  return v;
}
std::vector<int64_t> intsOf(const Tensor &t, const Ints &members) {
  std::vector<int64_t> v;
  v.reserve(members.size());
  for (int64_t m : members)
    v.push_back(t.getInt(m));
  return v;
}

// ---- value reductions: one function per group ----

using FloatReduce = std::function<double(std::span<const double>)>;
using IntReduce = std::function<int64_t(std::span<const int64_t>)>;
struct Reducer {
  FloatReduce f;
  IntReduce i; // null: integers are not accepted by this op
};

struct ReduceDef {
  std::string name, summary;
  std::vector<AttrSpec> attrs;
  /// Result dtype from the input dtype (throws TypeInferenceError for unsupported dtypes).
  std::function<DType(const Op &, DType)> result;
  /// dtype the input is converted to before reducing; null: the result dtype.
  std::function<DType(DType in, DType out)> compute;
  std::function<Reducer(const Op &)> make;
  /// Whether an empty group is an error (no identity); may depend on attributes.
  std::function<bool(const Op &)> needsNonEmpty = nullptr;
};

void addReduction(OpRegistry &r, ReduceDef def) {
  auto d = std::make_shared<const ReduceDef>(std::move(def));
  r.add(OpDef{
      .name = d->name,
      .summary = d->summary,
      .operands = {{"self"}},
      .attrs = d->attrs,
      .traits = kReduction,
      .infer =
          [d](const Op &op) {
            const Type &t = tensorOperand(op, 0);
            DType out = d->result(op, t.dtype());
            Ints dims = opDims(op, t.rank());
            if (d->needsNonEmpty && d->needsNonEmpty(op)) requireNonEmptyType(op, t.shape(), dims);
            return std::vector<Type>{
                Type::tensor(out, reducedShape(t.shape(), dims, opKeepdim(op)), t.device())};
          },
      .kernel =
          [d](const Op &op, In in) {
            const Tensor &x = input(op, in);
            DType out = resultDType(op);
            DType compute = d->compute ? d->compute(x.dtype(), out) : out;
            Ints dims = opDims(op, x.rank());
            if (d->needsNonEmpty && d->needsNonEmpty(op)) requireNonEmpty(op, x, dims);
            Tensor src = convert(x, compute);
            Groups g = groupBy(src.sizes(), dims, opKeepdim(op));
            Tensor res = Tensor::empty(out, g.outSizes);
            Reducer red = d->make(op);
            for (size_t k = 0; k < g.size(); ++k) {
              auto i = static_cast<int64_t>(k);
              if (isFloating(compute) || !red.i)
                res.setDouble(i, red.f(valuesOf(src, g.members(k))));
              else
                res.setInt(i, red.i(intsOf(src, g.members(k))));
            }
            return Results{RtValue(res)};
          },
  });
}

// Result-dtype rules.
DType sumLike(const Op &op, DType in) {
  if (auto d = optDType(op)) return *d;
  return isFloating(in) ? in : DType::I64; // bool and integers accumulate in i64 (torch)
}
DType sameDType(const Op &, DType in) { return in; }
DType floatOnly(const Op &op, DType in) {
  requireFloat(op, in);
  return in;
}

int64_t wrapMul(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}
int64_t wrapAdd(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}

double sumOf(std::span<const double> v) {
  double s = 0;
  for (double x : v)
    s += x;
  return s;
}
double meanOf(std::span<const double> v) { return sumOf(v) / static_cast<double>(v.size()); }

/// Extremum with NaN propagation: the first NaN wins. Returns (value, position).
template <class T> std::pair<T, int64_t> extremum(std::span<const T> v, bool isMax) {
  T best = v[0];
  int64_t pos = 0;
  for (size_t k = 1; k < v.size(); ++k) {
    if constexpr (std::is_floating_point_v<T>)
      if (std::isnan(best)) break;
    T x = v[k];
    bool better = isMax ? x > best : x < best;
    if constexpr (std::is_floating_point_v<T>) better = better || std::isnan(x);
    if (better) best = x, pos = static_cast<int64_t>(k);
  }
  return {best, pos};
}

Reducer extremumReducer(bool isMax) {
  return {[isMax](std::span<const double> v) { return extremum(v, isMax).first; },
          [isMax](std::span<const int64_t> v) { return extremum(v, isMax).first; }};
}

/// var with Bessel-style correction: sum((x - mean)^2) / max(0, N - correction).
double varianceOf(std::span<const double> v, double correction) {
  double mean = meanOf(v), m2 = 0;
  for (double x : v)
    m2 += (x - mean) * (x - mean);
  return m2 / std::max(0.0, static_cast<double>(v.size()) - correction);
}

double normOf(std::span<const double> v, double p) {
  if (std::isinf(p)) {
    double best = p > 0 ? 0 : kInf;
    for (double x : v) {
      double a = std::fabs(x);
      if (std::isnan(a)) return a;
      best = p > 0 ? std::max(best, a) : std::min(best, a);
    }
    return best;
  }
  double s = 0;
  for (double x : v) {
    double a = std::fabs(x);
    if (p == 0)
      s += a != 0 ? 1.0 : 0.0;
    else if (p == 1)
      s += a;
    else if (p == 2)
      s += a * a;
    else
      s += std::pow(a, p);
  }
  if (p == 0 || p == 1) return s;
  return p == 2 ? std::sqrt(s) : std::pow(s, 1.0 / p);
}

/// log(sum(exp(x))) shifted by the max; an infinite max is not subtracted (torch).
double logSumExpOf(std::span<const double> v) {
  double m = -kInf;
  for (double x : v)
    m = std::max(m, x);
  if (std::isinf(m)) m = 0;
  double s = 0;
  for (double x : v)
    s += std::exp(x - m);
  for (double x : v)
    if (std::isnan(x)) return x;
  return std::log(s) + m;
}

void addValueReductions(OpRegistry &r) {
  const std::vector<AttrSpec> withDType = {dimsAttr(), keepdimAttr(), dtypeAttr()};
  const std::vector<AttrSpec> plain = {dimsAttr(), keepdimAttr()};

  addReduction(r, {.name = "sum",
                   .summary = "sum over dims (all when empty); bool/int give i64",
                   .attrs = withDType,
                   .result = sumLike,
                   .make = [](const Op &) {
                     return Reducer{sumOf, [](std::span<const int64_t> v) {
                                      int64_t s = 0;
                                      for (int64_t x : v)
                                        s = wrapAdd(s, x);
                                      return s;
                                    }};
                   }});
  addReduction(r, {.name = "prod",
                   .summary = "product over dims (all when empty); bool/int give i64",
                   .attrs = withDType,
                   .result = sumLike,
                   .make = [](const Op &) {
                     return Reducer{[](std::span<const double> v) {
                                      double p = 1;
                                      for (double x : v)
                                        p *= x;
                                      return p;
                                    },
                                    [](std::span<const int64_t> v) {
                                      int64_t p = 1;
                                      for (int64_t x : v)
                                        p = wrapMul(p, x);
                                      return p;
                                    }};
                   }});
  addReduction(r, {.name = "mean",
                   .summary = "mean over dims (all when empty); floating dtypes only, NaN "
                              "when empty",
                   .attrs = withDType,
                   .result =
                       [](const Op &op, DType in) {
                         DType d = optDType(op).value_or(in);
                         if (!isFloating(d))
                           inferFail("mean: could not infer output dtype; input dtype must be a "
                                     "floating point dtype, got " +
                                     str(d) + " (pass a floating `dtype` to average integers)");
                         return d;
                       },
                   .make = [](const Op &) { return Reducer{meanOf, nullptr}; }});
  for (bool isMax : {true, false}) {
    std::string what = isMax ? "maximum" : "minimum";
    addReduction(r, {.name = isMax ? "amax" : "amin",
                     .summary = what + " over dims (all when empty); NaN propagates",
                     .attrs = plain,
                     .result = sameDType,
                     .make = [isMax](const Op &) { return extremumReducer(isMax); },
                     .needsNonEmpty = [](const Op &) { return true; }});
    addReduction(r, {.name = isMax ? "max" : "min",
                     .summary = what + " of all elements (a 0-d tensor); NaN propagates",
                     .attrs = {},
                     .result = sameDType,
                     .make = [isMax](const Op &) { return extremumReducer(isMax); },
                     .needsNonEmpty = [](const Op &) { return true; }});
  }
  for (bool isAny : {true, false}) {
    addReduction(
        r,
        {.name = isAny ? "any" : "all",
         .summary = isAny ? "some element is non-zero (bool result; u8 input gives u8)"
                          : "every element is non-zero (bool result; u8 input gives u8)",
         .attrs = plain,
         .result = [](const Op &, DType in) { return in == DType::U8 ? DType::U8 : DType::Bool; },
         .compute = [](DType in, DType) { return in; },
         .make =
             [isAny](const Op &) {
               auto test = [isAny](auto v) {
                 for (auto x : v)
                   if ((x != 0) == isAny) return isAny;
                 return !isAny;
               };
               return Reducer{[test](std::span<const double> v) { return double(test(v)); },
                              [test](std::span<const int64_t> v) { return int64_t(test(v)); }};
             }});
  }
  addReduction(r, {.name = "count_nonzero",
                   .summary = "number of non-zero elements over dims (all when empty), i64",
                   .attrs = {dimsAttr()},
                   .result = [](const Op &, DType) { return DType::I64; },
                   .compute = [](DType in, DType) { return in; },
                   .make =
                       [](const Op &) {
                         auto count = [](auto v) {
                           int64_t n = 0;
                           for (auto x : v)
                             n += x != 0;
                           return n;
                         };
                         return Reducer{
                             [count](std::span<const double> v) { return double(count(v)); },
                             count};
                       }});
  for (bool isStd : {false, true}) {
    addReduction(r, {.name = isStd ? "std" : "var",
                     .summary = std::string(isStd ? "standard deviation" : "variance") +
                                " over dims (all when empty) with `correction` (1: unbiased)",
                     .attrs = {dimsAttr(),
                               keepdimAttr(),
                               {.name = "correction",
                                .kind = AttrKind::Float,
                                .defaultValue = Attr(int64_t{1})}},
                     .result = floatOnly,
                     .make = [isStd](const Op &op) {
                       double c = attrFloat(op, "correction");
                       return Reducer{[c, isStd](std::span<const double> v) {
                                        double var = varianceOf(v, c);
                                        return isStd ? std::sqrt(var) : var;
                                      },
                                      nullptr};
                     }});
  }
  addReduction(r, {.name = "norm",
                   .summary = "vector p-norm over dims (all when empty): p = 2 by default, "
                              "also inf, -inf, 0 (count of non-zeros), 1 and any float",
                   .attrs = {{.name = "p", .kind = AttrKind::Float, .defaultValue = Attr(2.0)},
                             dimsAttr(),
                             keepdimAttr(),
                             dtypeAttr()},
                   .result =
                       [](const Op &op, DType in) {
                         requireFloat(op, in);
                         DType d = optDType(op).value_or(in);
                         requireFloat(op, d, "dtype");
                         return d;
                       },
                   .make =
                       [](const Op &op) {
                         double p = attrFloat(op, "p");
                         return Reducer{[p](std::span<const double> v) { return normOf(v, p); },
                                        nullptr};
                       },
                   .needsNonEmpty = [](const Op &op) { return std::isinf(attrFloat(op, "p")); }});
  addReduction(r, {.name = "logsumexp",
                   .summary = "log(sum(exp(x))) over dims (all when empty), computed stably; "
                              "integers give f32",
                   .attrs = plain,
                   .result = [](const Op &, DType in) { return floatResultDType(in); },
                   .make = [](const Op &) { return Reducer{logSumExpOf, nullptr}; }});
}

// ---- var_mean / std_mean: two results ----

void addMoments(OpRegistry &r) {
  for (bool isStd : {false, true}) {
    r.add(OpDef{
        .name = isStd ? "std_mean" : "var_mean",
        .summary = std::string("(") + (isStd ? "std" : "var") +
                   ", mean) over dims (all when empty) with `correction`",
        .operands = {{"self"}},
        .attrs = {dimsAttr(),
                  keepdimAttr(),
                  {.name = "correction",
                   .kind = AttrKind::Float,
                   .defaultValue = Attr(int64_t{1})}},
        .traits = kReduction,
        .infer =
            [](const Op &op) {
              const Type &t = tensorOperand(op, 0);
              requireFloat(op, t.dtype());
              Type out = Type::tensor(t.dtype(),
                                      reducedShape(t.shape(), opDims(op, t.rank()), opKeepdim(op)),
                                      t.device());
              return std::vector<Type>{out, out};
            },
        .kernel =
            [isStd](const Op &op, In in) {
              const Tensor &x = input(op, in);
              double c = attrFloat(op, "correction");
              Groups g = groupBy(x.sizes(), opDims(op, x.rank()), opKeepdim(op));
              Tensor var = Tensor::empty(x.dtype(), g.outSizes);
              Tensor mean = Tensor::empty(x.dtype(), g.outSizes);
              for (size_t k = 0; k < g.size(); ++k) {
                auto v = valuesOf(x, g.members(k));
                double s = varianceOf(v, c);
                var.setDouble(static_cast<int64_t>(k), isStd ? std::sqrt(s) : s);
                mean.setDouble(static_cast<int64_t>(k), meanOf(v));
              }
              return Results{RtValue(var), RtValue(mean)};
            },
    });
  }
}

// ---- index reductions ----

void addIndexReductions(OpRegistry &r) {
  for (bool isMax : {true, false}) {
    // max_dim / min_dim: (values, indices) along `dim`, first occurrence like torch on CPU.
    r.add(OpDef{
        .name = isMax ? "max_dim" : "min_dim",
        .summary = std::string("(values, i64 indices) of the ") + (isMax ? "maximum" : "minimum") +
                   " along `dim`; the first occurrence wins, NaN propagates",
        .operands = {{"self"}},
        .attrs = {dimAttr(), keepdimAttr()},
        .traits = kReduction,
        .infer =
            [](const Op &op) {
              const Type &t = tensorOperand(op, 0);
              int64_t d = oneDim(op, t.rank());
              Ints dims = t.rank() == 0 ? Ints{} : Ints{d};
              requireNonEmptyType(op, t.shape(), dims);
              Shape s = reducedShape(t.shape(), dims, attrBool(op, "keepdim"));
              return std::vector<Type>{Type::tensor(t.dtype(), s, t.device()),
                                       Type::tensor(DType::I64, s, t.device())};
            },
        .kernel =
            [isMax](const Op &op, In in) {
              const Tensor &x = input(op, in);
              Ints dims = x.rank() == 0 ? Ints{} : Ints{normDim(attrInt(op, "dim"), x.rank())};
              requireNonEmpty(op, x, dims);
              Groups g = groupBy(x.sizes(), dims, attrBool(op, "keepdim"));
              Tensor values = Tensor::empty(x.dtype(), g.outSizes);
              Tensor indices = Tensor::empty(DType::I64, g.outSizes);
              for (size_t k = 0; k < g.size(); ++k) {
                auto i = static_cast<int64_t>(k);
                if (isFloating(x.dtype())) {
                  auto [v, pos] = extremum<double>(valuesOf(x, g.members(k)), isMax);
                  values.setDouble(i, v);
                  indices.setInt(i, pos);
                } else {
                  auto [v, pos] = extremum<int64_t>(intsOf(x, g.members(k)), isMax);
                  values.setInt(i, v);
                  indices.setInt(i, pos);
                }
              }
              return Results{RtValue(values), RtValue(indices)};
            },
    });
    // argmax / argmin: indices only; without `dim` over the flattened tensor.
    r.add(OpDef{
        .name = isMax ? "argmax" : "argmin",
        .summary = std::string("i64 index of the ") + (isMax ? "maximum" : "minimum") +
                   " along `dim` (flattened when absent); first occurrence, "
                   "NaN propagates",
        .operands = {{"self"}},
        .attrs = {{.name = "dim", .kind = AttrKind::Int, .optional = true}, keepdimAttr()},
        .traits = kReduction,
        .infer =
            [](const Op &op) {
              const Type &t = tensorOperand(op, 0);
              if (t.dtype() == DType::Bool) inferFail(op.name() + ": does not support bool input");
              // Without `dim` every dim is reduced (keepdim keeps them all as size 1).
              Ints dims;
              if (hasAttrValue(op, "dim")) {
                int64_t d = oneDim(op, t.rank());
                if (t.rank() > 0) dims = {d};
              } else {
                for (int64_t d = 0; d < t.rank(); ++d)
                  dims.push_back(d);
              }
              requireNonEmptyType(op, t.shape(), dims);
              Shape s = reducedShape(t.shape(), dims, attrBool(op, "keepdim"));
              return std::vector<Type>{Type::tensor(DType::I64, s, t.device())};
            },
        .kernel =
            [isMax](const Op &op, In in) {
              const Tensor &x = input(op, in);
              bool hasDim = hasAttrValue(op, "dim");
              Ints dims;
              if (hasDim && x.rank() > 0) dims = {normDim(attrInt(op, "dim"), x.rank())};
              if (!hasDim)
                for (int64_t d = 0; d < x.rank(); ++d)
                  dims.push_back(d);
              requireNonEmpty(op, x, dims);
              bool keepdim = attrBool(op, "keepdim");
              Groups g = groupBy(x.sizes(), dims, keepdim);
              Tensor out = Tensor::empty(DType::I64, g.outSizes);
              for (size_t k = 0; k < g.size(); ++k) {
                int64_t pos = isFloating(x.dtype())
                                  ? extremum<double>(valuesOf(x, g.members(k)), isMax).second
                                  : extremum<int64_t>(intsOf(x, g.members(k)), isMax).second;
                out.setInt(static_cast<int64_t>(k), pos);
              }
              return Results{RtValue(out)};
            },
    });
  }
}

// ---- scans along one dim: the result has the input's shape ----

/// Fills out[members] from in[members] along one dim for each group.
using Scan = std::function<void(const Tensor &in, const Tensor &out, const Ints &members)>;

/// `reversible`: a `reverse` attribute runs the scan from the end of the dim (cumsum's gradient
/// is the reverse cumsum of the result's; torch has no such op, the autodiff pass emits it).
void addScan(OpRegistry &r, std::string name, std::string summary,
             std::function<DType(const Op &, DType)> result, Scan scan, bool reversible = false) {
  std::vector<AttrSpec> attrs = {dimAttr(), dtypeAttr()};
  if (reversible) attrs.push_back({"reverse", AttrKind::Bool, Attr(false)});
  r.add(OpDef{
      .name = std::move(name),
      .summary = std::move(summary),
      .operands = {{"self"}},
      .attrs = std::move(attrs),
      .traits = kNoTraits,
      .infer =
          [result](const Op &op) {
            const Type &t = tensorOperand(op, 0);
            oneDim(op, t.rank());
            return std::vector<Type>{t.withDType(result(op, t.dtype()))};
          },
      .kernel =
          [scan](const Op &op, In in) {
            const Tensor &x = input(op, in);
            DType out = resultDType(op);
            Tensor src = convert(x, out); // torch converts to `dtype` first
            Ints dims = x.rank() == 0 ? Ints{} : Ints{normDim(attrInt(op, "dim"), x.rank())};
            Groups g = groupBy(src.sizes(), dims, true);
            Tensor res = Tensor::empty(out, src.sizes());
            const Attr *rev = op.attrOrNull("reverse");
            for (size_t k = 0; k < g.size(); ++k) {
              Ints m = g.members(k);
              if (rev && rev->asBool()) std::reverse(m.begin(), m.end());
              scan(src, res, m);
            }
            return Results{RtValue(res)};
          },
  });
}

DType softmaxDType(const Op &op, DType in) {
  DType d = optDType(op).value_or(in);
  requireFloat(op, d, optDType(op) ? "dtype" : "input");
  return d;
}

void softmaxScan(const Tensor &in, const Tensor &out, const Ints &m, bool log) {
  double mx = -kInf;
  for (int64_t i : m)
    mx = std::max(mx, in.getDouble(i));
  for (int64_t i : m)
    if (std::isnan(in.getDouble(i))) mx = kNaN;
  double s = 0;
  for (int64_t i : m)
    s += std::exp(in.getDouble(i) - mx);
  for (int64_t i : m) {
    double shifted = in.getDouble(i) - mx;
    out.setDouble(i, log ? shifted - std::log(s) : std::exp(shifted) / s);
  }
}

void cumulativeScan(const Tensor &in, const Tensor &out, const Ints &m, bool product) {
  if (isFloating(in.dtype())) {
    double acc = product ? 1 : 0;
    for (int64_t i : m) {
      acc = product ? acc * in.getDouble(i) : acc + in.getDouble(i);
      out.setDouble(i, acc);
    }
  } else {
    int64_t acc = product ? 1 : 0;
    for (int64_t i : m) {
      acc = product ? wrapMul(acc, in.getInt(i)) : wrapAdd(acc, in.getInt(i));
      out.setInt(i, acc);
    }
  }
}

void addScans(OpRegistry &r) {
  addScan(r, "softmax", "exp(x - max) / sum(exp(x - max)) along `dim`; floating dtypes",
          softmaxDType,
          [](const Tensor &i, const Tensor &o, const Ints &m) { softmaxScan(i, o, m, false); });
  addScan(r, "log_softmax", "x - max - log(sum(exp(x - max))) along `dim`; floating dtypes",
          softmaxDType,
          [](const Tensor &i, const Tensor &o, const Ints &m) { softmaxScan(i, o, m, true); });
  addScan(
      r, "cumsum",
      "running sum along `dim` (from its end with `reverse`); bool/int give i64 unless `dtype`",
      sumLike,
      [](const Tensor &i, const Tensor &o, const Ints &m) { cumulativeScan(i, o, m, false); },
      true);
  addScan(r, "cumprod", "running product along `dim`; bool/int give i64 unless `dtype`", sumLike,
          [](const Tensor &i, const Tensor &o, const Ints &m) { cumulativeScan(i, o, m, true); });
}

} // namespace

void registerReductionOps(OpRegistry &r) {
  addValueReductions(r);
  addMoments(r);
  addIndexReductions(r);
  addScans(r);
}

} // namespace xjit
