#include "output_layout.h"

#include "py_util.h"
#include "tensor_bridge.h"
#include "xjit/ir/builder.h"
#include "xjit/ir/op_registry.h"

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

namespace xjit::frontend {

namespace {

std::vector<int64_t> intsOf(PyObject *seq) {
  std::vector<int64_t> out;
  PyRef fast = checked(PySequence_Fast(seq, "a tuple of ints"));
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fast.get()); ++i) {
    const long long v = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fast.get(), i));
    if (v == -1 && PyErr_Occurred()) throw PyErrorSet();
    out.push_back(v);
  }
  return out;
}

PyRef intList(const std::vector<int64_t> &v) {
  PyRef l = checked(PyList_New(static_cast<Py_ssize_t>(v.size())));
  for (size_t i = 0; i < v.size(); ++i)
    PyList_SET_ITEM(l.get(), Py_ssize_t(i), checked(PyLong_FromLongLong(v[i])).release());
  return l;
}

/// The strides of a dense tensor of `sizes` whose dims are laid out in `order`.
std::vector<int64_t> denseStrides(const std::vector<int64_t> &sizes,
                                  const std::vector<int> &order) {
  std::vector<int64_t> strides(sizes.size());
  int64_t next = 1;
  for (size_t k = order.size(); k-- > 0;) {
    strides[size_t(order[k])] = next;
    next *= std::max<int64_t>(sizes[size_t(order[k])], 1);
  }
  return strides;
}

} // namespace

// Dims of equal stride (size-1 dims) are tried in both tie orders, as PyTorch places them
// either way, then with the one dim of the tie whose size is not 1 outermost (the others, of
// size 1, share its inner neighbour's stride: a permute of a tensor with size-1 dims).
std::vector<int> denseOrder(const std::vector<int64_t> &sizes,
                            const std::vector<int64_t> &strides) {
  for (int tieBreak : {0, 1, 2}) {
    std::vector<int> order(sizes.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
      if (strides[size_t(a)] != strides[size_t(b)]) return strides[size_t(a)] > strides[size_t(b)];
      if (tieBreak == 2 && (sizes[size_t(a)] == 1) != (sizes[size_t(b)] == 1))
        return sizes[size_t(b)] == 1;
      return tieBreak == 1 ? a > b : a < b;
    });
    if (denseStrides(sizes, order) == strides) return order;
  }
  return {};
}

std::vector<int> denseOrderOfSignificantDims(const std::vector<int64_t> &sizes,
                                             const std::vector<int64_t> &strides) {
  if (std::find(sizes.begin(), sizes.end(), 0) != sizes.end()) return {};
  std::vector<int> order(sizes.size());
  std::iota(order.begin(), order.end(), 0);
  // Outermost first by stride; a size-1 dim before a dim of equal stride (as denseOrder's
  // third tie order), so that it does not take a place inside the dense dims.
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    if (strides[size_t(a)] != strides[size_t(b)]) return strides[size_t(a)] > strides[size_t(b)];
    return sizes[size_t(a)] == 1 && sizes[size_t(b)] != 1;
  });
  const std::vector<int64_t> dense = denseStrides(sizes, order);
  for (size_t d = 0; d < sizes.size(); ++d)
    if (sizes[d] != 1 && dense[d] != strides[d]) return {};
  return order;
}

namespace {

/// The dim order of a permute-like op's result from its operand's (result dim i is operand dim
/// perm[i]); empty for an op that is not one or whose attributes are not plain ints.
std::vector<int> permutedOrder(const Op &op, const std::vector<int> &in) {
  const int rank = static_cast<int>(in.size());
  auto norm = [&](int64_t d) { return static_cast<int>(d < 0 ? d + rank : d); };
  std::vector<int> perm(static_cast<size_t>(rank));
  std::iota(perm.begin(), perm.end(), 0);
  const std::string &name = op.name();
  if (name == "permute") {
    const Attr *dims = op.attrOrNull("dims");
    if (!dims || dims->kind() != AttrKind::Ints || dims->asInts().size() != size_t(rank)) return {};
    for (int i = 0; i < rank; ++i)
      perm[size_t(i)] = norm(dims->asInts()[size_t(i)]);
  } else if (name == "transpose") {
    const Attr *a = op.attrOrNull("dim0"), *b = op.attrOrNull("dim1");
    if (!a || !b || a->kind() != AttrKind::Int || b->kind() != AttrKind::Int) return {};
    const int d0 = norm(a->asInt()), d1 = norm(b->asInt());
    // (A 0-d tensor's transpose(0, 0) is eager's no-op: no dim to swap; fuzzer seed 77986
    // indexed past the empty order.)
    if (d0 < 0 || d0 >= rank || d1 < 0 || d1 >= rank) return {};
    std::swap(perm[size_t(d0)], perm[size_t(d1)]);
  } else if (name == "t") {
    if (rank == 2) std::swap(perm[0], perm[1]);
  } else if (name == "movedim") {
    // Result dim destination[k] is operand dim source[k]; the others keep their order.
    const Attr *src = op.attrOrNull("source"), *dst = op.attrOrNull("destination");
    if (!src || !dst || src->kind() != AttrKind::Ints || dst->kind() != AttrKind::Ints ||
        src->asInts().size() != dst->asInts().size())
      return {};
    std::vector<int> at(static_cast<size_t>(rank), -1);
    std::vector<bool> moved(static_cast<size_t>(rank), false);
    for (size_t k = 0; k < src->asInts().size(); ++k) {
      const int from = norm(src->asInts()[k]), to = norm(dst->asInts()[k]);
      if (from < 0 || from >= rank || to < 0 || to >= rank || at[size_t(to)] != -1) return {};
      at[size_t(to)] = from;
      moved[size_t(from)] = true;
    }
    int next = 0;
    for (int &d : at)
      if (d == -1) {
        while (moved[size_t(next)])
          ++next;
        d = next++;
      }
    perm = at;
  } else {
    return {};
  }
  std::vector<int> inverse(static_cast<size_t>(rank));
  for (int i = 0; i < rank; ++i)
    inverse[size_t(perm[size_t(i)])] = i;
  std::vector<int> out;
  for (int d : in)
    out.push_back(inverse[size_t(d)]);
  return out;
}

/// The dim order of unsqueeze's or squeeze's result from its dense operand's `in`, of `shape`;
/// nullopt for another op or attributes that are not plain ints. ATen gives unsqueeze's new dim
/// d the stride size(d) * stride(d) (1 when appended): the place just outside dim d.
std::optional<std::vector<int>> squeezedOrder(const Op &op, const std::vector<int> &in,
                                              const Shape &shape) {
  const int rank = static_cast<int>(in.size());
  std::vector<int> out;
  if (op.name() == "unsqueeze") {
    const Attr *a = op.attrOrNull("dim");
    if (!a || a->kind() != AttrKind::Int) return std::nullopt;
    const int d = static_cast<int>(a->asInt() < 0 ? a->asInt() + rank + 1 : a->asInt());
    if (d < 0 || d > rank) return std::nullopt;
    for (int od : in) {
      if (od == d) out.push_back(d);
      out.push_back(od >= d ? od + 1 : od);
    }
    if (d == rank) out.push_back(d);
    return out;
  }
  if (op.name() != "squeeze") return std::nullopt;
  std::vector<bool> drop(size_t(rank), false);
  const Attr *a = op.attrOrNull("dim");
  auto isOne = [&](int d) { return shape[size_t(d)].isStatic() && shape[size_t(d)].value() == 1; };
  if (!a) {
    for (int d = 0; d < rank; ++d)
      drop[size_t(d)] = isOne(d);
  } else if (a->kind() == AttrKind::Ints) {
    for (int64_t v : a->asInts()) {
      const int d = static_cast<int>(v < 0 ? v + rank : v);
      if (d < 0 || d >= rank) return std::nullopt;
      drop[size_t(d)] = isOne(d);
    }
  } else {
    return std::nullopt;
  }
  for (int od : in) {
    if (drop[size_t(od)]) continue;
    int shift = 0;
    for (int k = 0; k < od; ++k)
      shift += drop[size_t(k)] ? 1 : 0;
    out.push_back(od - shift);
  }
  return out;
}

bool isIdentity(const std::vector<int> &order) {
  for (size_t k = 0; k < order.size(); ++k)
    if (order[k] != int(k)) return false;
  return true;
}

std::vector<int> identity(int64_t rank) {
  std::vector<int> order(static_cast<size_t>(std::max<int64_t>(rank, 0)));
  std::iota(order.begin(), order.end(), 0);
  return order;
}

/// Per dim, the rank of its stride among the value's dims (0 smallest; equal strides share a
/// rank; -1 for stride 0), or nullopt where unknown. TensorIterator orders dims by comparing
/// each operand's strides with one another, which these ranks settle without the strides.
using StrideRanks = std::optional<std::vector<int>>;

bool isStaticOne(const DimExpr &d) { return d.isStatic() && d.value() == 1; }
bool isStaticZero(const DimExpr &d) { return d.isStatic() && d.value() == 0; }

/// The stride ranks of a dense tensor of `shape` laid out in `order`: a dim's stride is the
/// product of the sizes inside it, so it ranks above the next inner dim unless that one has
/// size 1 (symbolic sizes are at least 2: 0 and 1 are specialized at capture).
StrideRanks denseStrideRanks(const Shape &shape, const std::vector<int> &order) {
  if (order.size() != shape.size()) return std::nullopt;
  for (const DimExpr &d : shape)
    if (isStaticZero(d)) return std::nullopt; // (empty tensors: strides of 0 follow)
  std::vector<int> ranks(shape.size(), 0);
  for (size_t k = order.size(); k-- > 1;) {
    const size_t inner = size_t(order[k]), outer = size_t(order[k - 1]);
    ranks[outer] = ranks[inner] + (isStaticOne(shape[inner]) ? 0 : 1);
  }
  return ranks;
}

/// Whether a dense tensor in `order` is_contiguous() in the dims order `format` lists (the
/// identity: contiguous; {0, 2, 3, 1}: channels-last), which ignores size-1 dims.
bool contiguousIgnoringOnes(const Shape &shape, const std::vector<int> &order,
                            const std::vector<int> &format) {
  std::vector<int> rest, expected;
  for (int d : order)
    if (!isStaticOne(shape[size_t(d)])) rest.push_back(d);
  for (int d : format)
    if (!isStaticOne(shape[size_t(d)])) expected.push_back(d);
  return rest == expected;
}

/// The static sizes of `shape`; nullopt where one is symbolic.
std::optional<std::vector<int64_t>> staticSizes(const Shape &shape) {
  std::vector<int64_t> sizes;
  for (const DimExpr &d : shape) {
    if (!d.isStatic()) return std::nullopt;
    sizes.push_back(d.value());
  }
  return sizes;
}

/// The channels-last dim order of a rank-`rank` tensor, outermost first: the batch dim, the
/// spatial dims, then the channel dim (dim 1).
std::vector<int> channelsLastOrder(int64_t rank) {
  std::vector<int> order = {0};
  for (int d = 2; d < rank; ++d)
    order.push_back(d);
  order.push_back(1);
  return order;
}

/// ATen's is_contiguous for the memory format whose dims, outermost first, are `format`: dims
/// of size 1 are ignored, the others must have the compact strides.
bool stridesContiguous(const std::vector<int64_t> &sizes, const std::vector<int64_t> &strides,
                       const std::vector<int> &format) {
  int64_t expected = 1;
  for (size_t k = format.size(); k-- > 0;) {
    const size_t d = size_t(format[k]);
    if (sizes[d] == 1) continue;
    if (strides[d] != expected) return false;
    expected *= sizes[d];
  }
  return true;
}

/// ATen's is_non_overlapping_and_dense: the dims of size 2 or more, by increasing stride,
/// have the compact strides.
bool stridesNonOverlappingAndDense(const std::vector<int64_t> &sizes,
                                   const std::vector<int64_t> &strides) {
  std::vector<size_t> dims;
  for (size_t d = 0; d < sizes.size(); ++d)
    if (sizes[d] >= 2) dims.push_back(d);
  std::stable_sort(dims.begin(), dims.end(),
                   [&](size_t a, size_t b) { return strides[a] < strides[b]; });
  int64_t expected = 1;
  for (size_t d : dims) {
    if (strides[d] != expected) return false;
    expected *= sizes[d];
  }
  return true;
}

/// The strides of a view of `sizes`/`strides` as `shape` (ATen's computeStride: dims merged
/// into one must be laid out one inside the other, size-1 dims aside); nullopt where no view
/// can have that shape (reshape then copies).
std::optional<std::vector<int64_t>> viewStrides(const std::vector<int64_t> &sizes,
                                                const std::vector<int64_t> &strides,
                                                const std::vector<int64_t> &shape) {
  // A 0-d tensor views as any one-element shape with unit strides, and a one-element tensor
  // as a 0-d one (ATen's computeStride; fuzzer seed 24532: `v.reshape(-1)` of a 0-d sum, then
  // written, was taken for a copy and the write missed v).
  if (sizes.empty()) return std::vector<int64_t>(shape.size(), 1);
  if (std::find(sizes.begin(), sizes.end(), 0) != sizes.end()) return std::nullopt; // (no elements)
  std::vector<int64_t> out(shape.size(), 0);
  int64_t viewDim = int64_t(shape.size()) - 1;
  int64_t chunkBaseStride = strides.back(), tensorNumel = 1, viewNumel = 1;
  for (int64_t d = int64_t(sizes.size()) - 1; d >= 0; --d) {
    tensorNumel *= sizes[size_t(d)];
    const bool chunkEnds = d == 0 || (sizes[size_t(d - 1)] != 1 &&
                                      strides[size_t(d - 1)] != tensorNumel * chunkBaseStride);
    if (!chunkEnds) continue;
    while (viewDim >= 0 && (viewNumel < tensorNumel || shape[size_t(viewDim)] == 1)) {
      out[size_t(viewDim)] = viewNumel * chunkBaseStride;
      viewNumel *= shape[size_t(viewDim)];
      --viewDim;
    }
    if (viewNumel != tensorNumel) return std::nullopt;
    if (d > 0) {
      chunkBaseStride = strides[size_t(d - 1)];
      tensorNumel = viewNumel = 1;
    }
  }
  if (viewDim != -1) return std::nullopt;
  return out;
}

/// Per dim, the rank of its stride among the distinct strides (0 smallest; -1 for stride 0).
std::vector<int> ranksOfStrides(const std::vector<int64_t> &strides) {
  std::vector<int64_t> distinct;
  for (int64_t s : strides)
    if (s != 0) distinct.push_back(s);
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  std::vector<int> ranks;
  for (int64_t s : strides)
    ranks.push_back(
        s == 0 ? -1
               : int(std::lower_bound(distinct.begin(), distinct.end(), s) - distinct.begin()));
  return ranks;
}

/// ATen's is_strides_like_channels_last(_3d) for a 4-d (5-d) tensor, which suggest_memory_format
/// asks: the strides do not decrease from the channel dim through the spatial dims to the
/// batch dim (the ambiguous cases resolved to contiguous, as ATen does).
bool stridesLikeChannelsLast(const std::vector<int64_t> &sizes,
                             const std::vector<int64_t> &strides) {
  std::vector<int> innerFirst;
  if (sizes.size() == 4) innerFirst = {1, 3, 2, 0};
  if (sizes.size() == 5) innerFirst = {1, 4, 3, 2, 0};
  if (innerFirst.empty() || strides[1] == 0) return false;
  int64_t min = 0;
  for (int d : innerFirst) {
    if (strides[size_t(d)] == 0 || strides[size_t(d)] < min) return false;
    if (d == 0 && min == strides[1]) return false;
    min = strides[size_t(d)] * (sizes[size_t(d)] > 1 ? sizes[size_t(d)] : 1);
  }
  return true;
}

/// How a pool or a linear resampling lays out its result: in the format its input suggests
/// (suggest_memory_format), the one `input.unsqueeze(-2)` suggests (1-d pools ATen runs as 2-d
/// ones), always contiguous, or None: not such an op.
enum class SpatialFormat { None, Suggested, Via2d, Contiguous };

SpatialFormat spatialFormatOf(std::string_view name) {
  static const std::map<std::string, SpatialFormat, std::less<>> formats = {
      {"max_pool2d", SpatialFormat::Suggested},
      {"max_pool2d_with_indices", SpatialFormat::Suggested},
      {"avg_pool2d", SpatialFormat::Suggested},
      {"adaptive_avg_pool2d", SpatialFormat::Suggested},
      {"adaptive_max_pool2d", SpatialFormat::Suggested},
      {"adaptive_max_pool2d_with_indices", SpatialFormat::Suggested},
      {"upsample_bilinear2d", SpatialFormat::Suggested},
      {"max_pool3d", SpatialFormat::Suggested},
      {"max_pool3d_with_indices", SpatialFormat::Suggested},
      {"upsample_trilinear3d", SpatialFormat::Suggested},
      {"avg_pool1d", SpatialFormat::Via2d},
      {"adaptive_avg_pool1d", SpatialFormat::Via2d},
      {"adaptive_max_pool1d", SpatialFormat::Via2d},
      {"adaptive_max_pool1d_with_indices", SpatialFormat::Via2d},
      {"max_pool1d", SpatialFormat::Contiguous},
      {"max_pool1d_with_indices", SpatialFormat::Contiguous},
      {"upsample_linear1d", SpatialFormat::Contiguous},
      {"avg_pool3d", SpatialFormat::Contiguous},
      {"adaptive_avg_pool3d", SpatialFormat::Contiguous},
      {"adaptive_max_pool3d", SpatialFormat::Contiguous},
      {"adaptive_max_pool3d_with_indices", SpatialFormat::Contiguous},
  };
  auto it = formats.find(name);
  return it == formats.end() ? SpatialFormat::None : it->second;
}

/// The dim order (outermost first) of the result TensorIterator allocates for an elementwise op
/// (ATen's TensorIteratorBase::build): with every operand a tensor of the result's shape, its
/// fast setup (all contiguous: contiguous; all channels-last: channels-last; all dense with
/// equal strides: theirs); otherwise reorder_dimensions, an insertion sort of the dims from
/// innermost that compares operand by operand the two dims' strides (a stride 0, from
/// broadcasting a size-1 or missing dim or from expand, makes that operand abstain; equal
/// strides put the larger dim outside), ties keeping their place; the result is dense in that
/// order. `ranks[i]`/`dense[i]`: per tensor operand, its stride ranks and whether it is known
/// to be non-overlapping and dense (a slice need not be); `exact[i]`: its strides where the
/// sizes are static (then the fast setup is decided as ATen does, from them). nullopt where
/// this cannot tell.
std::optional<std::vector<int>>
tensorIteratorOrder(const Shape &shape, const std::vector<const Type *> &types,
                    const std::vector<std::vector<int>> &ranks,
                    const std::vector<const std::vector<int> *> &denseOrders,
                    const std::vector<std::optional<std::vector<int64_t>>> &exact, bool fastSetup) {
  const size_t n = shape.size();
  for (const DimExpr &d : shape)
    if (isStaticZero(d)) return std::nullopt;
  // Each operand's stride ranks over the result's dims (-1: stride 0, it abstains there).
  std::vector<std::vector<int>> strides;
  for (size_t i = 0; i < types.size(); ++i) {
    const Shape &s = types[i]->shape();
    if (s.size() > n || ranks[i].size() != s.size()) return std::nullopt;
    std::vector<int> r(n, -1);
    const size_t offset = n - s.size();
    for (size_t k = 0; k < s.size(); ++k)
      if (!(isStaticOne(s[k]) && !isStaticOne(shape[offset + k]))) r[offset + k] = ranks[i][k];
    strides.push_back(std::move(r));
  }
  bool allExact = true;
  for (const auto &e : exact)
    allExact = allExact && e.has_value();
  if (fastSetup && allExact) {
    const std::vector<int64_t> sizes = *staticSizes(shape);
    const std::vector<int> contiguous = identity(int64_t(n)), channelsLast = {0, 2, 3, 1};
    bool isContiguous = true, isChannelsLast = n == 4, isDense = true, sameStrides = true;
    for (const auto &e : exact) {
      isContiguous = isContiguous && stridesContiguous(sizes, *e, contiguous);
      isChannelsLast = isChannelsLast && stridesContiguous(sizes, *e, channelsLast);
      isDense = isDense && stridesNonOverlappingAndDense(sizes, *e);
      sameStrides = sameStrides && *e == *exact[0];
    }
    if (isContiguous) return contiguous;
    if (isChannelsLast) return channelsLast;
    if (isDense && sameStrides) {
      // The result takes the operands' strides, which need not be dense in any order where a
      // size-1 dim's stride is arbitrary (the meta walk then records them exactly).
      std::vector<int> o = denseOrder(sizes, *exact[0]);
      if (o.empty()) return std::nullopt;
      return o;
    }
  } else if (fastSetup) {
    bool allDense = true;
    for (const std::vector<int> *o : denseOrders)
      allDense = allDense && o;
    if (allDense) {
      std::vector<int> contiguous = identity(int64_t(n));
      std::vector<int> channelsLast = {0, 2, 3, 1};
      bool isContiguous = true, isChannelsLast = n == 4, sameStrides = true;
      for (size_t i = 0; i < denseOrders.size(); ++i) {
        isContiguous = isContiguous && contiguousIgnoringOnes(shape, *denseOrders[i], contiguous);
        isChannelsLast =
            isChannelsLast && contiguousIgnoringOnes(shape, *denseOrders[i], channelsLast);
        sameStrides = sameStrides && ranks[i] == ranks[0];
      }
      if (isContiguous) return contiguous;
      if (isChannelsLast) return channelsLast;
      if (sameStrides && !denseOrders.empty()) return *denseOrders[0];
    } else {
      // The fast setup and the sort agree but on the strides of size-1 dims, which a strided
      // operand's unknown density leaves open.
      for (const DimExpr &d : shape)
        if (isStaticOne(d)) return std::nullopt;
    }
  }
  bool unknown = false;
  // Whether dim a's size is larger than dim b's (only asked for dims of equal stride).
  auto larger = [&](size_t a, size_t b) {
    const DimExpr &x = shape[a], &y = shape[b];
    if (x.isStatic() && y.isStatic()) return x.value() > y.value();
    if (x == y || (x.isStatic() && x.value() <= 1)) return false;
    if (y.isStatic() && y.value() <= 1) return true;
    unknown = true;
    return false;
  };
  // 1: dim a goes inside dim b; -1: outside; 0: no operand tells.
  auto shouldSwap = [&](size_t a, size_t b) {
    for (const std::vector<int> &r : strides) {
      if (r[a] < 0 || r[b] < 0) continue;
      if (r[a] < r[b]) return -1;
      if (r[a] > r[b]) return 1;
      if (larger(a, b)) return 1;
    }
    return 0;
  };
  std::vector<size_t> perm(n); // innermost first
  for (size_t k = 0; k < n; ++k)
    perm[k] = n - 1 - k;
  for (size_t i = 1; i < n; ++i) {
    size_t moving = i;
    for (size_t k = i; k-- > 0;) {
      const int c = shouldSwap(perm[k], perm[moving]);
      if (c > 0) {
        std::swap(perm[k], perm[moving]);
        moving = k;
      } else if (c < 0) {
        break;
      }
    }
  }
  if (unknown) return std::nullopt;
  return std::vector<int>(perm.rbegin(), perm.rend());
}

} // namespace

const Value *writtenInPlace(const Op &op) {
  if (op.name() == "clone" && op.hasAttr(kWholeWriteAttr)) {
    const Op *expand = op.operand(0)->definingOp();
    return expand && expand->name() == "expand_as" ? expand->operand(1) : nullptr;
  }
  if (op.name() != "reshape" || op.numOperands() != 1) return nullptr;
  const Op *put = op.operand(0)->definingOp();
  if (!put || put->name() != "index_put" || put->numOperands() != 3) return nullptr;
  const Op *flat = put->operand(0)->definingOp();
  if (!flat || flat->name() != "reshape") return nullptr;
  const Value *x = flat->operand(0);
  if (!(x->type().shape() == op.result(0)->type().shape())) return nullptr;
  const Value *positions = put->operand(2);
  for (int depth = 0; depth < 32; ++depth) {
    const Op *def = positions->definingOp();
    if (!def || def->numOperands() == 0) return def && def->name() == "arange" ? x : nullptr;
    if (!def->def().has(kView) && def->name() != "reshape" && def->name() != "flatten")
      return nullptr;
    positions = def->operand(0);
  }
  return nullptr;
}

namespace {

// Ops whose CPU kernels always allocate a fresh contiguous result, whatever their operands'
// layouts (the matmul family; ATen's out-of-place masked_fill, elementwise here, starts from
// self.clone(contiguous_format); histc; transformers' grouped product fills torch.zeros;
// layer_norm and (log_)softmax over any dims, session 25: the rules stopped at ConvNeXt's
// layer norm of a permuted tensor, and at wav2vec2's, Swin's, SegFormer's).
// A computed 0-d tensor (a full reduction, `x.max()`) has no strides to lay out, whatever its
// operands' layout (fuzzer seed 47891: the rules stopped at `max`, and the meta walk, whose
// kernels order a broadcast over size-1 dims otherwise than CPU ones, decided another output).
bool freshScalars(const Op &op) {
  if (op.def().has(kView) || op.def().has(kInPlace) || op.numRegions() > 0 ||
      op.name() == "external_call" || op.numResults() == 0)
    return false;
  for (const auto &r : op.results())
    if (!r->type().isTensor() || r->type().rank() != 0) return false;
  return true;
}

const std::set<std::string, std::less<>> freshContiguous = {
    "matmul",  "mm",         "bmm",         "linear",      "addmm",
    "baddbmm", "contiguous", "masked_fill", "grouped_mm",  "grouped_mm_weight",
    "histc",   "layer_norm", "softmax",     "log_softmax", "log_sigmoid"};
// (log_sigmoid: ATen's CPU log_sigmoid_forward allocates its result contiguous, whatever the
// input's layout; its meta kernel keeps the input's: fuzzer seeds 204000-216000.)
// ATen's reductions over dims (sum, mean, amax, var, argmax, max_dim, logsumexp, ...) make
// their result with at::empty, contiguous, whatever their operand's layout (permuted,
// channels-last, strided, expanded; keepdim's size-1 dims included): session 25.
bool freshResult(const Op &op) {
  return op.def().has(kConstantLike) || freshContiguous.count(op.name()) || freshScalars(op) ||
         (op.def().has(kReduction) && !op.def().has(kView) && !op.def().has(kInPlace));
}

// Views that keep a contiguous operand contiguous.
const std::set<std::string, std::less<>> contiguousViews = {
    "view", "reshape", "flatten", "unflatten", "unsqueeze", "squeeze", "alias"};

// Views with one result per piece along `dim` (unbind's results drop it).
const std::set<std::string, std::less<>> splitPieces = {"split", "split_with_sizes", "chunk",
                                                        "unbind"};

/// Whether ATen's contiguous() returns a tensor of these static sizes and strides itself (it is
/// contiguous but for its size-1 dims, or has no elements) rather than a copy.
bool contiguousReturnsItself(const std::vector<int64_t> &sizes,
                             const std::vector<int64_t> &strides) {
  return std::find(sizes.begin(), sizes.end(), 0) != sizes.end() ||
         stridesContiguous(sizes, strides, identity(int64_t(sizes.size())));
}

} // namespace

namespace {
std::optional<std::vector<int64_t>> stridesThroughViews(const std::vector<const Op *> &views,
                                                        std::vector<int64_t> strides,
                                                        SymbolBindings &symbols);
} // namespace

/// The layout rules' state over a graph's body, laid out op by op in body order
/// (staticOutputLayouts, ComputedStrides): per tensor value its dims' order, whether it is a
/// strided view (with its stride ranks and strides where known), or that it is unknown.
struct LayoutWalk {
  /// Lays out op's results; false where the rules cannot (its results are then unknown).
  bool layOut(const Op &op) {
    if (rules(op)) return true;
    for (const auto &r : op.results())
      unknown.insert(r.get());
    return false;
  }
  /// The layouts of the values a terminator returns; false where one is not dense.
  bool outputs(const Op &terminator, std::vector<OutputLayout> &out) const;
  bool known(const Value *v) const { return order.count(v) && !unknown.count(v); }

  // For the strides of some values (ComputedStrides), not the outputs: a write in place keeps
  // its tensor's layout even where the values written are unknown.
  bool targeted = false;

  StrideRanks ranksOf(const Value *v) const;
  std::optional<std::vector<int64_t>> exactStrides(const Value *v) const;
  // The storage offset (in elements) of a value of static sizes: 0 for a fresh result, its
  // operand's plus what the view skips for a view; nullopt where unknown (graph inputs).
  std::optional<int64_t> offsetOf(const Value *v) const;
  // The order TensorIterator gives an elementwise op's result (tensorIteratorOrder).
  std::optional<std::vector<int>> iteratorOrder(const Op &op) const;
  // The order of a copy in preserve_format (clone, and cast: ATen's _to_copy) of a strided
  // value: its own strides where it is non-overlapping and dense, else infer_dense_strides,
  // the sort TensorIterator does for one operand.
  std::optional<std::vector<int>> preserveFormatOrder(const Value *v) const;

  std::unordered_map<const Value *, std::vector<int>> order;
  // Values that are strided views (slice, select, narrow): their strides' order is known, their
  // strides not. Ops reading them follow the order (TensorIterator does); returning one needs
  // its exact strides (the meta walk).
  std::unordered_set<const Value *> strided;
  // Values whose layout depends on which kernel eager picks (attention: CPU flash attention
  // returns a transposed buffer, the math path a contiguous one). Ops that allocate a fresh
  // contiguous result make them known again; returning one needs the meta walk.
  std::unordered_set<const Value *> unknown;
  // The stride ranks of strided values where known (those of dense values follow from their
  // order and sizes).
  std::unordered_map<const Value *, std::vector<int>> stridedRanks;
  // The strides of strided values of static sizes (those of dense values follow from their
  // order).
  std::unordered_map<const Value *, std::vector<int64_t>> stridedStrides;
  // The storage offsets of views of static sizes, where known (offsetOf).
  std::unordered_map<const Value *, int64_t> offsets;

private:
  bool rules(const Op &op); // layOut: false where the meta walk decides
  void noteViewOffsets(const Op &op);
};

StrideRanks LayoutWalk::ranksOf(const Value *v) const {
  if (strided.count(v)) {
    auto it = stridedRanks.find(v);
    if (it == stridedRanks.end()) return std::nullopt;
    return it->second;
  }
  auto it = order.find(v);
  if (it == order.end()) return std::nullopt;
  return denseStrideRanks(v->type().shape(), it->second);
}

std::optional<std::vector<int64_t>> LayoutWalk::exactStrides(const Value *v) const {
  // (Only for static sizes: a view of symbolic sizes of a static tensor, say a narrow of a
  // symbolic length, has known strides but no sizes to check them on.)
  if (!staticSizes(v->type().shape())) return std::nullopt;
  if (strided.count(v)) {
    auto it = stridedStrides.find(v);
    if (it == stridedStrides.end()) return std::nullopt;
    return it->second;
  }
  auto sizes = staticSizes(v->type().shape());
  auto it = order.find(v);
  if (!sizes || it == order.end()) return std::nullopt;
  return denseStrides(*sizes, it->second);
}

std::optional<std::vector<int>> LayoutWalk::iteratorOrder(const Op &op) const {
  const Shape &shape = op.result(0)->type().shape();
  std::vector<const Type *> types;
  std::vector<std::vector<int>> ranks;
  std::vector<const std::vector<int> *> denseOrders;
  std::vector<std::optional<std::vector<int64_t>>> exact;
  // The fast setup needs every operand a tensor of the result's shape: a Python scalar is a
  // 0-d tensor operand to ATen's binary ops (pow's scalar exponent excepted: a unary op).
  bool fastSetup = true;
  for (size_t i = 0; i < op.numOperands(); ++i) {
    const Value *v = op.operand(i);
    const Type &t = v->type();
    if (!t.isTensor()) {
      if (t.kind() != TypeKind::None && !(op.name() == "pow" && i == 1)) fastSetup = false;
      continue;
    }
    StrideRanks r = ranksOf(v);
    if (!r) return std::nullopt;
    fastSetup = fastSetup && t.shape() == shape;
    types.push_back(&t);
    ranks.push_back(std::move(*r));
    denseOrders.push_back(strided.count(v) ? nullptr : &order.at(v));
    exact.push_back(exactStrides(v));
  }
  return tensorIteratorOrder(shape, types, ranks, denseOrders, exact, fastSetup && !types.empty());
}

std::optional<std::vector<int>> LayoutWalk::preserveFormatOrder(const Value *v) const {
  const Shape &shape = v->type().shape();
  StrideRanks ranks = ranksOf(v);
  if (!ranks) return std::nullopt;
  std::optional<std::vector<int64_t>> exact = exactStrides(v);
  std::optional<std::vector<int64_t>> known = staticSizes(shape);
  if (exact && known) { // (exact strides of symbolic sizes: no static sizes to check them on)
    const std::vector<int64_t> &sizes = *known;
    if (stridesNonOverlappingAndDense(sizes, *exact)) {
      std::vector<int> o = denseOrder(sizes, *exact);
      if (o.empty()) return std::nullopt;
      return o;
    }
  } else {
    // Dense or not, the sort agrees with the strides but on size-1 dims.
    for (const DimExpr &d : shape)
      if (isStaticOne(d)) return std::nullopt;
  }
  return tensorIteratorOrder(shape, {&v->type()}, {*ranks}, {nullptr}, {exact}, false);
}

std::optional<int64_t> LayoutWalk::offsetOf(const Value *v) const {
  if (auto it = offsets.find(v); it != offsets.end()) return it->second;
  const Op *d = v->definingOp();
  if (!d || d->numRegions() > 0 || d->name() == "external_call" || d->name() == "tuple_get")
    return std::nullopt;
  if (d->def().has(kInPlace)) return d->numOperands() ? offsetOf(d->operand(0)) : std::nullopt;
  if (d->def().has(kView) || d->def().has(kSideEffect)) return std::nullopt;
  return 0;
}

/// Records the storage offsets of a view's results (static sizes): its operand's, plus the
/// elements a slice, select or split piece skips; a reshape or contiguous() that copies
/// starts a fresh tensor.
void LayoutWalk::noteViewOffsets(const Op &op) {
  if (!op.def().has(kView) || op.numOperands() == 0) return;
  std::optional<int64_t> in = offsetOf(op.operand(0));
  std::optional<std::vector<int64_t>> sizes = staticSizes(op.operand(0)->type().shape());
  std::optional<std::vector<int64_t>> strides = exactStrides(op.operand(0));
  if (!in || !sizes || !strides || strides->size() != sizes->size()) return;
  const std::string &name = op.name();
  const int64_t rank = int64_t(sizes->size());
  const Attr *dimAttr = op.attrOrNull("dim");
  int64_t dim = dimAttr && dimAttr->kind() == AttrKind::Int ? dimAttr->asInt() : 0;
  if (dim < 0) dim += rank;
  auto intAttr = [&](const char *attr, int64_t fallback) -> std::optional<int64_t> {
    const Attr *a = op.attrOrNull(attr);
    if (!a) return fallback;
    if (a->kind() != AttrKind::Int) return std::nullopt;
    return a->asInt();
  };
  auto note = [&](size_t result, int64_t skipped) {
    if (staticSizes(op.result(result)->type().shape())) offsets[op.result(result)] = *in + skipped;
  };
  static const std::set<std::string, std::less<>> sameOffset = {
      "permute", "transpose", "t",         "movedim", "expand",   "expand_as",
      "alias",   "view",      "unsqueeze", "squeeze", "unflatten"};
  if (sameOffset.count(name)) {
    note(0, 0);
  } else if (name == "reshape" || name == "flatten" || name == "contiguous") {
    // (A copy is a fresh tensor: offsetOf's 0 for a result with no entry would be wrong for
    // the view, so the copy gets its 0 here too.)
    std::optional<std::vector<int64_t>> shape = staticSizes(op.result(0)->type().shape());
    if (!shape) return;
    const bool view = name == "contiguous" ? contiguousReturnsItself(*sizes, *strides)
                                           : viewStrides(*sizes, *strides, *shape).has_value();
    offsets[op.result(0)] = view ? *in : 0;
  } else if (dim < 0 || dim >= rank) {
    return;
  } else if (name == "slice" || name == "narrow") {
    std::optional<int64_t> start = intAttr("start", 0);
    if (!start) return;
    const int64_t n = (*sizes)[size_t(dim)];
    if (*start < 0) *start += n;
    *start = std::clamp<int64_t>(*start, 0, n);
    note(0, *start * (*strides)[size_t(dim)]);
  } else if (name == "select") {
    std::optional<int64_t> index = intAttr("index", 0);
    if (!index) return;
    if (*index < 0) *index += (*sizes)[size_t(dim)];
    note(0, *index * (*strides)[size_t(dim)]);
  } else if (splitPieces.count(name)) {
    int64_t start = 0;
    for (size_t i = 0; i < op.numResults(); ++i) {
      note(i, start * (*strides)[size_t(dim)]);
      if (name == "unbind") {
        ++start;
        continue;
      }
      std::optional<std::vector<int64_t>> piece = staticSizes(op.result(i)->type().shape());
      if (!piece || piece->size() != sizes->size()) return;
      start += (*piece)[size_t(dim)];
    }
  }
}

bool LayoutWalk::outputs(const Op &terminator, std::vector<OutputLayout> &out) const {
  out.clear();
  for (Value *v : terminator.operands()) {
    OutputLayout l;
    if (v->type().isTensor()) {
      if (unknown.count(v)) return false;
      l.kind = OutputLayout::Dense;
      l.order = order.at(v);
      if (strided.count(v)) {
        // A strided view (of static sizes): its exact strides and offset, as the meta walk
        // records them (`return h[:, -1]`, DINOv2's pooled `h[:, 0, :]`: the walk before
        // session 28).
        std::optional<std::vector<int64_t>> strides = exactStrides(v);
        std::optional<int64_t> offset = offsetOf(v);
        std::optional<std::vector<int64_t>> sizes = staticSizes(v->type().shape());
        if (!strides || !offset || !sizes) return false;
        l.order = denseOrder(*sizes, *strides);
        if (l.order.empty() || *offset != 0) {
          l.kind = OutputLayout::Exact;
          l.strides = std::move(*strides);
          l.offset = *offset;
        }
      }
    }
    out.push_back(std::move(l));
  }
  return true;
}

bool LayoutWalk::rules(const Op &laidOut) {
  const Op *op = &laidOut;
  // (An external_call also needs the walk for dropout's noise: the layout it draws in.)
  if (op->numRegions() > 0 || op->name() == "external_call") return false;
  bool allIdentity = true, anyStrided = false, anyUnknown = false;
  std::vector<const std::vector<int> *> operands;
  for (Value *v : op->operands()) {
    const Type &t = v->type();
    if (t.isTensor()) {
      if (unknown.count(v)) {
        anyUnknown = true;
        continue;
      }
      auto it = order.find(v);
      if (it == order.end()) return false;
      operands.push_back(&it->second);
      allIdentity = allIdentity && isIdentity(it->second);
      anyStrided = anyStrided || strided.count(v) > 0;
    } else if (!t.isScalar() && t.kind() != TypeKind::None) {
      return false; // a tuple or object may hold tensors of any layout
    }
  }
  const std::string &name = op->name();
  std::optional<std::vector<int>> result; // the order of every tensor result
  bool resultStrided = false;
  StrideRanks resultRanks;                           // a strided result's stride ranks, where known
  std::optional<std::vector<int64_t>> resultStrides; // and its strides (static sizes)
  StrideRanks iterated; // an elementwise result's order (iteratorOrder)
  const Attr *dimAttr = op->attrOrNull("dim");
  const int64_t rank0 = operands.empty() ? 0 : int64_t(operands[0]->size());
  const int64_t dim = dimAttr && dimAttr->kind() == AttrKind::Int
                          ? (dimAttr->asInt() < 0 ? dimAttr->asInt() + rank0 : dimAttr->asInt())
                          : -1;
  // A result of known strides (static sizes): dense in their order, or strided, its dims
  // ranked by them.
  auto takeStrides = [&](const std::vector<int64_t> &shape, std::vector<int64_t> strides) {
    if (std::vector<int> dense = denseOrder(shape, strides); !dense.empty()) {
      result = std::move(dense);
      return;
    }
    std::vector<int> byStride = identity(int64_t(shape.size()));
    std::stable_sort(byStride.begin(), byStride.end(),
                     [&](int a, int b) { return strides[size_t(a)] > strides[size_t(b)]; });
    result = std::move(byStride);
    resultStrided = true;
    resultRanks = ranksOfStrides(strides);
    resultStrides = std::move(strides);
  };
  // Strided views along `dim` (several results for the split family): the order of their
  // dims' strides is their operand's, less the dim a select-like view drops.
  static const std::set<std::string, std::less<>> sliceViews = {
      "slice", "narrow", "chunk", "split", "split_with_sizes", "select", "unbind"};
  // A write through a view, or of all of a tensor, keeps that tensor's layout, whatever the
  // values written (targeted: outputs keep the meta walk's exact strides of size-1 dims
  // where values are unknown).
  if (const Value *x = writtenInPlace(*op);
      x && order.count(x) && !strided.count(x) && !unknown.count(x) && (targeted || !anyUnknown)) {
    result = order.at(x);
  } else if (anyUnknown || name == "scaled_dot_product_attention") {
    if (freshResult(*op)) {
      result.emplace();
    } else {
      for (const auto &r : op->results())
        unknown.insert(r.get());
      return true; // (not a stop: the ops reading them may not need them)
    }
  } else if (name == "alias" && operands.size() == 1) {
    // A view of the whole (`h[:, 0:]`): the operand's layout, strided or not.
    result = *operands[0];
    resultStrided = strided.count(op->operand(0)) > 0;
    resultRanks = ranksOf(op->operand(0));
    resultStrides = exactStrides(op->operand(0));
  } else if (sliceViews.count(name) && operands.size() == 1 && dim >= 0 && dim < rank0) {
    const bool drops = name == "select" || name == "unbind";
    std::vector<int> r;
    for (int d : *operands[0])
      if (!drops || d != dim) r.push_back(d - (drops && d > dim ? 1 : 0));
    result = std::move(r);
    resultStrided = true;
    // A step other than 1 multiplies the dim's stride: its rank is then unknown.
    const Attr *step = op->attrOrNull("step");
    StrideRanks ranks = ranksOf(op->operand(0));
    const bool unitStep = !step || (step->kind() == AttrKind::Int && step->asInt() == 1);
    if (ranks && unitStep) {
      if (drops) ranks->erase(ranks->begin() + dim);
      resultRanks = std::move(ranks);
    }
    auto strides = exactStrides(op->operand(0));
    if (strides && (unitStep || step->kind() == AttrKind::Int)) {
      if (!unitStep) (*strides)[size_t(dim)] *= step->asInt();
      if (drops) strides->erase(strides->begin() + dim);
      resultStrides = std::move(strides);
    }
    // A step slice of static sizes: its exact strides rank its dims (GPT-J's rotary
    // embedding multiplies `x[..., ::2]`: the rules stopped there).
    if (!resultRanks && resultStrides) resultRanks = ranksOfStrides(*resultStrides);
  } else if ((name == "expand" || name == "expand_as") && !operands.empty() &&
             op->result(0)->type().rank() >= rank0) {
    // A broadcast view: the operand's order with the new leading dims outermost, stride 0
    // where a dim is expanded (TensorIterator orders by the other operands' strides there).
    const int n = int(op->result(0)->type().rank() - rank0);
    std::vector<int> r(static_cast<size_t>(n));
    std::iota(r.begin(), r.end(), 0);
    for (int d : *operands[0])
      r.push_back(d + n);
    result = std::move(r);
    resultStrided = true;
    if (StrideRanks ranks = ranksOf(op->operand(0))) {
      const Shape &from = op->operand(0)->type().shape(), &to = op->result(0)->type().shape();
      std::vector<int> expanded(size_t(n), -1);
      for (size_t k = 0; k < from.size(); ++k)
        expanded.push_back(isStaticOne(from[k]) && !isStaticOne(to[size_t(n) + k]) ? -1
                                                                                   : (*ranks)[k]);
      resultRanks = std::move(expanded);
    }
    if (auto strides = exactStrides(op->operand(0))) {
      const Shape &from = op->operand(0)->type().shape(), &to = op->result(0)->type().shape();
      std::vector<int64_t> expanded(size_t(n), 0);
      for (size_t k = 0; k < from.size(); ++k)
        expanded.push_back(isStaticOne(from[k]) && !isStaticOne(to[size_t(n) + k]) ? 0
                                                                                   : (*strides)[k]);
      resultStrides = std::move(expanded);
    }
  } else if (anyStrided && operands.size() == 1 &&
             (name == "permute" || name == "transpose" || name == "t")) {
    std::vector<int> r = permutedOrder(*op, *operands[0]);
    if (r.size() != operands[0]->size()) return false;
    result = std::move(r);
    resultStrided = true;
    // Operand dim k becomes result dim where[k]: the stride ranks and exact strides follow.
    const std::vector<int> where = permutedOrder(*op, identity(rank0));
    auto permute = [&where](const auto &perDim) {
      std::decay_t<decltype(perDim)> permuted(perDim.size());
      for (size_t k = 0; k < where.size(); ++k)
        permuted[size_t(where[k])] = perDim[k];
      return permuted;
    };
    if (StrideRanks ranks = ranksOf(op->operand(0))) resultRanks = permute(*ranks);
    if (auto strides = exactStrides(op->operand(0))) resultStrides = permute(*strides);
  } else if (!(allIdentity && !anyStrided) && operands.size() == 1 &&
             (name == "view" || name == "reshape" || name == "flatten" || name == "unflatten") &&
             exactStrides(op->operand(0)) && staticSizes(op->result(0)->type().shape())) {
    // A reshape-like view of a non-contiguous tensor of static sizes: the view's strides where
    // one can have its shape, else (reshape) a contiguous copy.
    const std::vector<int64_t> sizes = *staticSizes(op->operand(0)->type().shape());
    const std::vector<int64_t> shape = *staticSizes(op->result(0)->type().shape());
    std::optional<std::vector<int64_t>> strides =
        viewStrides(sizes, *exactStrides(op->operand(0)), shape);
    if (!strides) {
      if (name == "view" || name == "unflatten") return false; // (eager raises)
      result.emplace();
    } else {
      takeStrides(shape, std::move(*strides));
    }
  } else if (anyStrided && !allIdentity && operands.size() == 1 &&
             (name == "unsqueeze" || name == "squeeze") && exactStrides(op->operand(0)) &&
             staticSizes(op->result(0)->type().shape())) {
    // Likewise an unsqueeze or squeeze of a permuted strided tensor (Phi-3's repeat_kv of a
    // transposed slice of its fused qkv projection: the meta walk before session 27).
    SymbolBindings noSymbols;
    std::optional<std::vector<int64_t>> strides =
        stridesThroughViews({op}, *exactStrides(op->operand(0)), noSymbols);
    const std::vector<int64_t> shape = *staticSizes(op->result(0)->type().shape());
    if (!strides || strides->size() != shape.size()) return false;
    takeStrides(shape, std::move(*strides));
  } else if (anyStrided && allIdentity && operands.size() == 1 && contiguousViews.count(name)) {
    // Splitting or merging dims of decreasing strides keeps them decreasing (a reshape that
    // cannot view copies into a contiguous tensor: the same order).
    result.emplace();
    resultStrided = true;
    // Where the operand's strides are known (static sizes) so are the view's: an op reading it
    // beside other operands then compares them as TensorIterator does (GPT-J's rotary
    // embedding multiplies `cos[:, :, None, :]`, a split piece's view, by a slice of the keys:
    // the meta walk before session 27).
    SymbolBindings noSymbols;
    if (std::optional<std::vector<int64_t>> in = exactStrides(op->operand(0));
        in && staticSizes(op->result(0)->type().shape()))
      if (std::optional<std::vector<int64_t>> out = stridesThroughViews({op}, *in, noSymbols);
          out && out->size() == size_t(op->result(0)->type().rank())) {
        resultRanks = ranksOfStrides(*out);
        resultStrides = std::move(out);
      }
  } else if (anyStrided && operands.size() == 1 && op->numResults() == 1 &&
             (name == "clone" || name == "cast")) {
    // (A strided value's strides can be a layout no dim order gives.) A non-overlapping and
    // dense one whose size-1 dims' strides no dim order gives (BART's `ids[:, :-1].clone()` of
    // a batch of one: the meta walk before session 27) is copied into its own strides
    // (empty_strided): a strided result of those strides.
    result = preserveFormatOrder(op->operand(0));
    if (!result) {
      std::optional<std::vector<int64_t>> exact = exactStrides(op->operand(0));
      std::optional<std::vector<int64_t>> sizes = staticSizes(op->operand(0)->type().shape());
      if (!exact || !sizes || !stridesNonOverlappingAndDense(*sizes, *exact)) return false;
      takeStrides(*sizes, std::move(*exact)); // (strided: preserveFormatOrder found no order)
    }
  } else if (anyStrided && name == "contiguous" && op->numOperands() == 1) {
    // contiguous() of a strided value of known strides: the value itself where ATen calls it
    // contiguous (size-1 dims aside: `x[:, :n]` of a batch of one), else a contiguous copy
    // (MPNet's relative position bias, an expand of a permuted table: the meta walk before
    // session 27).
    std::optional<std::vector<int64_t>> exact = exactStrides(op->operand(0));
    std::optional<std::vector<int64_t>> sizes = staticSizes(op->operand(0)->type().shape());
    if (!exact || !sizes) return false;
    if (!contiguousReturnsItself(*sizes, *exact)) {
      result.emplace();
    } else {
      result = *operands[0];
      resultStrided = true;
      resultRanks = ranksOfStrides(*exact);
      resultStrides = std::move(exact);
    }
  } else if (anyStrided && (op->def().has(kView) || op->def().has(kInPlace) || name == "clone")) {
    return false;
  } else if ((name.starts_with("conv") && !name.ends_with("_weight")) || name == "group_norm") {
    // CPU convolutions of 4-d tensors give a channels-last result where the input or the
    // weight suggests channels-last (oneDNN's mkldnn_conv_use_channels_last), group_norm
    // where its input does; otherwise, and for 3-d ones (whatever the input's layout), a
    // contiguous one. Checked against torch 2.13 (test_layout_rules_convolutions.py);
    // session 25: wav2vec2's and HuBERT's conv1d of a transposed tensor, ConvNeXt's conv2d
    // of a permuted one went to the meta walk. Left to the walk: a 3-d convolution whose
    // weight is not contiguous (eager then gives a transposed result) and 5-d operands
    // suggesting channels-last-3d (eager's CPU conv3d stays contiguous; the walk's rule
    // says otherwise).
    const int64_t rank = op->result(0)->type().rank();
    const bool norm = name == "group_norm";
    bool channelsLast = false;
    for (size_t i = 0; i < std::min<size_t>(norm ? 1 : 2, op->numOperands()); ++i) {
      const Value *v = op->operand(i);
      if (!v->type().isTensor() || (norm && rank == 3) || (rank == 3 && i == 0)) continue;
      if (!strided.count(v) && order.count(v) && isIdentity(order.at(v)))
        continue; // contiguous (any sizes): suggests the default format
      std::optional<std::vector<int64_t>> strides = exactStrides(v);
      if (!strides || v->type().rank() != rank || (rank != 3 && rank != 4 && rank != 5))
        return false;
      const std::vector<int64_t> sizes = *staticSizes(v->type().shape());
      if (rank == 3) {
        if (!stridesAreContiguous(sizes, *strides)) return false;
        continue;
      }
      if (stridesLikeChannelsLast(sizes, *strides)) { // suggest_memory_format()
        if (rank == 5) return false;
        channelsLast = true;
      }
    }
    if (channelsLast)
      result = std::vector<int>{0, 2, 3, 1};
    else
      result.emplace();
  } else if (const SpatialFormat f = spatialFormatOf(name);
             f != SpatialFormat::None && !operands.empty() && op->operand(0)->type().isTensor()) {
    // Pools and linear resampling (CPU, torch 2.13; test_layout_rules_pools.py): the result in
    // the memory format the input suggests, or contiguous, or for the 1-d pools ATen runs as
    // 2-d ones on `x.unsqueeze(-2)` the format that suggests (a transposed [N, L, C] input
    // gives a transposed result). (Session 27: SegFormer's and MobileViT's upsampling, Swin's
    // adaptive_avg_pool1d of a transposed tensor went to the meta walk.)
    const Value *v = op->operand(0);
    const int64_t rank = v->type().rank();
    bool channelsLast = false;
    if (f != SpatialFormat::Contiguous &&
        !(!strided.count(v) && order.count(v) && isIdentity(order.at(v)))) {
      std::optional<std::vector<int64_t>> strides = exactStrides(v);
      std::optional<std::vector<int64_t>> sizes = staticSizes(v->type().shape());
      if (!strides || !sizes || strides->size() != sizes->size() || rank < 3 || rank > 5)
        return false;
      if (f == SpatialFormat::Via2d) { // unsqueeze(-2): a size-1 dim of stride size * stride
        if (rank != 3) return false;
        strides->insert(strides->begin() + 2, (*sizes)[2] * (*strides)[2]);
        sizes->insert(sizes->begin() + 2, 1);
      }
      channelsLast = stridesLikeChannelsLast(*sizes, *strides);
    }
    if (channelsLast)
      result = channelsLastOrder(rank); // (rank 3: the squeezed 2-d pool's, C innermost)
    else
      result.emplace();
  } else if (name == "cat" && !operands.empty()) {
    // The output memory format of ATen's cat: channels-last only when every input suggests
    // it (4-d/5-d inputs in that exact order), else contiguous.
    const int64_t rank = op->result(0)->type().rank();
    const std::vector<int> channelsLast =
        rank == 4 || rank == 5 ? channelsLastOrder(rank) : std::vector<int>{};
    bool allChannelsLast = !channelsLast.empty();
    for (size_t i = 0; i < op->numOperands() && allChannelsLast; ++i) {
      const Value *v = op->operand(i);
      if (!v->type().isTensor()) continue;
      // suggest_memory_format from the strides where the sizes are static (slices too).
      if (auto strides = exactStrides(v)) {
        allChannelsLast = stridesLikeChannelsLast(*staticSizes(v->type().shape()), *strides);
        continue;
      }
      const std::vector<int> &o = order.at(v);
      if (isIdentity(o)) {
        allChannelsLast = false;
        break;
      }
      if (o != channelsLast || strided.count(v)) return false;
    }
    if (allChannelsLast)
      result = channelsLast;
    else
      result.emplace();
  } else if (name == "stack" && !operands.empty() && dimAttr && dimAttr->kind() == AttrKind::Int) {
    // ATen's stack at a dim before the last is cat(inputs, dim).view(the stacked sizes), at
    // the end a cat of the inputs unsqueezed there (a size-1 dim of stride 1): cat's rule
    // (channels-last where every input suggests it) on those. (Cohere's rotate_half stacks step
    // slices of a transposed tensor: the meta walk before session 27.)
    const int64_t rank = op->result(0)->type().rank(), inRank = rank - 1;
    const int64_t at = dimAttr->asInt() < 0 ? dimAttr->asInt() + rank : dimAttr->asInt();
    if (at < 0 || at > inRank) return false;
    const int64_t catRank = at < inRank ? inRank : rank;
    bool allChannelsLast = catRank == 4 || catRank == 5;
    for (size_t i = 0; i < op->numOperands() && allChannelsLast; ++i) {
      const Value *v = op->operand(i);
      if (!v->type().isTensor()) continue;
      std::optional<std::vector<int64_t>> strides = exactStrides(v);
      if (!strides) {
        if (strided.count(v) || !isIdentity(order.at(v))) return false;
        allChannelsLast = false; // contiguous, as its unsqueeze at the end
        break;
      }
      std::vector<int64_t> sizes = *staticSizes(v->type().shape());
      if (at == inRank) strides->push_back(1), sizes.push_back(1);
      allChannelsLast = stridesLikeChannelsLast(sizes, *strides);
    }
    const std::vector<int> channelsLast = channelsLastOrder(catRank);
    if (!allChannelsLast) {
      result.emplace(); // a contiguous cat, and its view
    } else if (at == inRank) {
      result = channelsLast;
    } else { // the channels-last cat viewed with the stacked dim split off
      std::optional<std::vector<int64_t>> stacked = staticSizes(op->result(0)->type().shape());
      if (!stacked) return false;
      std::vector<int64_t> catSizes = *stacked;
      catSizes[size_t(at)] *= catSizes[size_t(at) + 1];
      catSizes.erase(catSizes.begin() + at + 1);
      std::optional<std::vector<int64_t>> strides =
          viewStrides(catSizes, denseStrides(catSizes, channelsLast), *stacked);
      std::vector<int> dense = strides ? denseOrder(*stacked, *strides) : std::vector<int>{};
      if (dense.empty()) return false;
      result = std::move(dense);
    }
  } else if (freshResult(*op)) {
    result.emplace(); // identity, per result rank below
  } else if (op->def().has(kInPlace) && !operands.empty()) {
    result = *operands[0];
  } else if (!operands.empty() && (name == "permute" || name == "transpose" || name == "t")) {
    std::vector<int> r = permutedOrder(*op, *operands[0]);
    if (r.size() != operands[0]->size()) return false;
    result = std::move(r);
  } else if (!anyStrided && operands.size() == 1 && (name == "unsqueeze" || name == "squeeze")) {
    std::optional<std::vector<int>> r =
        squeezedOrder(*op, *operands[0], op->operand(0)->type().shape());
    if (!r) return false;
    result = std::move(r);
  } else if (name == "clone" && !operands.empty()) {
    result = *operands[0]; // preserve_format: a dense operand's order
  } else if (op->def().has(kElementwise) && name != "cast" && op->numResults() == 1 &&
             op->result(0)->type().isTensor() && (iterated = iteratorOrder(*op))) {
    result = std::move(iterated); // broadcasting, mixed orders, strided operands
  } else if (op->def().has(kElementwise) && name != "cast" && anyStrided) {
    return false; // (the strides of a strided operand's size-1 dims, say: the meta walk)
  } else if (!allIdentity && op->def().has(kElementwise) && !anyStrided && op->numResults() == 1 &&
             op->result(0)->type().isTensor()) {
    // Operands of the result's shape, all dense in one order (so with the same strides; 0-d
    // ones aside): the result gets their strides, size-1 dims included (where the meta
    // kernels differ). Except that when every operand is a tensor of the result's shape and
    // is_contiguous() (which ignores size-1 dims), TensorIterator's fast setup makes a
    // contiguous result. Broadcasting and mixed orders: the meta walk.
    const Type &rt = op->result(0)->type();
    bool fastContiguous = name != "cast"; // (a cast is empty_like(preserve_format) + copy)
    for (Value *v : op->operands()) {
      const Type &t = v->type();
      fastContiguous = fastContiguous && t.isTensor() && t.shape() == rt.shape();
      if (!t.isTensor() || t.rank() == 0) continue;
      if (!(t.shape() == rt.shape())) return false;
      if (result && *result != order.at(v)) return false;
      result = order.at(v);
    }
    if (!result) return false;
    // is_contiguous() ignoring size-1 dims: the other dims in increasing order.
    int last = -1;
    for (int d : *result) {
      const DimExpr &n = rt.shape()[size_t(d)];
      if (n.isStatic() && n.value() == 1) continue;
      fastContiguous = fastContiguous && d > last;
      last = d;
    }
    if (fastContiguous) result.emplace();
  } else if (allIdentity && (!op->def().has(kView) || contiguousViews.count(name))) {
    result.emplace(); // contiguous operands, a kernel that allocates its result
  } else {
    return false; // the meta walk decides
  }
  for (size_t i = 0; i < op->numResults(); ++i) {
    const Type &t = op->result(i)->type();
    if (!t.isTensor()) continue;
    std::vector<int> r = result->empty() ? identity(t.rank()) : *result;
    if (r.size() != size_t(t.rank())) return false;
    order[op->result(i)] = std::move(r);
    if (resultStrided) strided.insert(op->result(i));
    if (resultStrided && resultRanks && resultRanks->size() == size_t(t.rank()))
      stridedRanks[op->result(i)] = *resultRanks;
    if (resultStrided && resultStrides && resultStrides->size() == size_t(t.rank()))
      stridedStrides[op->result(i)] = *resultStrides;
  }
  noteViewOffsets(*op);
  return true;
}

bool stridesAreContiguous(const std::vector<int64_t> &sizes, const std::vector<int64_t> &strides) {
  return sizes.size() == strides.size() &&
         stridesContiguous(sizes, strides, identity(int64_t(sizes.size())));
}

std::optional<std::vector<int64_t>> staticSizesOf(const Type &t) { return staticSizes(t.shape()); }

std::optional<std::vector<int64_t>> reshapeViewStrides(const std::vector<int64_t> &sizes,
                                                       const std::vector<int64_t> &strides,
                                                       const std::vector<int64_t> &shape) {
  return viewStrides(sizes, strides, shape);
}

bool staticOutputLayouts(const Graph &g, const std::vector<std::vector<int>> &inputOrders,
                         std::vector<OutputLayout> &out, const Op **stoppedAt) {
  const Op *current = nullptr;
  auto stop = [&] {
    if (stoppedAt) *stoppedAt = current;
    return false;
  };
  LayoutWalk walk;
  const Block &body = *g.body();
  for (size_t i = 0; i < body.numArguments(); ++i) {
    if (!body.argument(i)->type().isTensor()) continue;
    if (i >= inputOrders.size() || inputOrders[i].size() != size_t(body.argument(i)->type().rank()))
      return stop();
    walk.order[body.argument(i)] = inputOrders[i];
  }
  for (Op *op : body) {
    current = op;
    if (op->def().has(kTerminator)) return walk.outputs(*op, out) || stop();
    if (!walk.layOut(*op)) return stop();
  }
  return stop();
}

struct ComputedStrides::State {
  const Graph *graph = nullptr;
  LayoutWalk walk;
  size_t arguments = 0;     // the body's arguments laid out
  const Op *last = nullptr; // the last op laid out, in body order
  std::unordered_set<const Op *> laidOut;
};

ComputedStrides::ComputedStrides() = default;
ComputedStrides::~ComputedStrides() = default;

std::optional<std::vector<int64_t>>
ComputedStrides::of(const Graph &g, const Value *v,
                    const std::vector<std::vector<int>> &inputOrders) {
  if (!v->type().isTensor()) return std::nullopt;
  const Block &body = *g.body();
  // Start again where the body changed otherwise than by ops appended after the last one laid
  // out (that op removed, arguments gone): never the case in a capture, but cheap to tell.
  if (!state_ || state_->graph != &g || state_->arguments > body.numArguments() ||
      (state_->last && state_->last->parentBlock() != &body)) {
    state_ = std::make_unique<State>();
    state_->graph = &g;
    state_->walk.targeted = true;
  }
  State &s = *state_;
  for (; s.arguments < body.numArguments(); ++s.arguments) {
    const Value *arg = body.argument(s.arguments);
    // (An argument without a dense order is unknown: an op reading it is not laid out.)
    if (arg->type().isTensor() && s.arguments < inputOrders.size() &&
        inputOrders[s.arguments].size() == size_t(arg->type().rank()))
      s.walk.order[arg] = inputOrders[s.arguments];
  }
  const Op *def = v->definingOp();
  if (!def) return s.walk.exactStrides(v); // an argument (of the body: others have no order)
  if (def->parentBlock() != &body) return std::nullopt; // in a region: the rules do not go there
  if (!s.laidOut.count(def)) {
    for (const Op *op = s.last ? s.last->next() : body.front(); op; op = op->next()) {
      if (!op->def().has(kTerminator)) s.walk.layOut(*op);
      s.laidOut.insert(op);
      s.last = op;
      if (op == def) break;
    }
    if (!s.laidOut.count(def)) { // def is not after the last op laid out: start again
      state_ = nullptr;
      return of(g, v, inputOrders);
    }
  }
  if (!s.walk.known(v)) return std::nullopt;
  return s.walk.exactStrides(v);
}

std::optional<std::vector<int64_t>>
staticStridesOf(const Graph &g, const Value *v, const std::vector<std::vector<int>> &inputOrders) {
  return ComputedStrides().of(g, v, inputOrders);
}

namespace {

/// Whether nothing writes v or a view of it (then a view of a permuted copy can stand for it).
bool onlyRead(const Value *v, int depth = 0) {
  if (depth > 16) return false;
  for (const Use &u : v->uses()) {
    const OpDef &def = u.user->def();
    if (def.has(kTerminator)) continue;
    // (`as_strided` views its operand: a read, as a view op is; as_strided_ restrides it.)
    const bool viewingCall = readsStorage(*u.user) && !u.user->attr("name").asStr().ends_with('_');
    if (!viewingCall && (def.has(kInPlace) || !def.isPure() || u.user->numRegions() > 0))
      return false;
    if (viewingCall) {
      for (const auto &r : u.user->results())
        if (!onlyRead(r.get(), depth + 1)) return false;
      continue;
    }
    if (def.has(kView))
      for (const auto &r : u.user->results())
        if (!onlyRead(r.get(), depth + 1)) return false;
  }
  return true;
}

/// The sizes of `shape` with each symbol given a representative value (bound in `b` on first
/// sight): distinct primes, so that a dense order that gives views of a tensor eager's dense
/// strides at these sizes gives them at any sizes of 2 or more, which symbolic sizes are (0
/// and 1 are specialized at capture). nullopt for a symbolic dim under 2 at these values. (From
/// 11: a split's last piece, `s0-4`, is 2 or more at them; fuzzer seed 70236.)
std::optional<std::vector<int64_t>> representativeSizes(const Shape &shape, SymbolBindings &b) {
  // Distinct primes times 12: no two products of different dims coincide (2 and 3 divide no
  // prime), and a size divided by 2, 3, 4, 6 or 12 (`unflatten(-1, (2, -1))`: `(s2)//2`) is
  // exact, as the guards make it at run time (fuzzer seed 189722: with s2 = 17, `(s2)//2 * 2`
  // was not s2, no view followed, and two outputs viewing one tensor ran in Python). At most
  // 636^6 ~ 6.6e16 for the rank-6 strides.
  static constexpr int64_t kPrimes[] = {11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53};
  static constexpr int64_t kScale = 12;
  std::vector<int64_t> sizes;
  for (const DimExpr &d : shape) {
    for (const std::string &name : d.symbols())
      if (!b.count(name)) {
        if (b.size() >= std::size(kPrimes)) return std::nullopt;
        b.emplace(name, kPrimes[b.size()] * kScale);
      }
    std::optional<int64_t> v = d.evaluate(b);
    if (!v || *v < (d.isStatic() ? 0 : 2)) return std::nullopt;
    sizes.push_back(*v);
  }
  return sizes;
}

/// The strides `views` (view ops, the one reading `strides`' tensor first) give their last
/// result, as ATen strides each of them (a reshape that cannot view copies: contiguous), at
/// the sizes `symbols` gives (representativeSizes); nullopt for a view this does not follow.
std::optional<std::vector<int64_t>> stridesThroughViews(const std::vector<const Op *> &views,
                                                        std::vector<int64_t> strides,
                                                        SymbolBindings &symbols) {
  for (const Op *op : views) {
    const Shape &in = op->operand(0)->type().shape();
    const int64_t rank = int64_t(in.size());
    std::optional<std::vector<int64_t>> sizes = representativeSizes(in, symbols);
    if (!sizes || strides.size() != sizes->size()) return std::nullopt;
    const std::string &name = op->name();
    const Attr *dimAttr = op->attrOrNull("dim");
    const int64_t dim = dimAttr && dimAttr->kind() == AttrKind::Int
                            ? (dimAttr->asInt() < 0 ? dimAttr->asInt() + rank : dimAttr->asInt())
                            : -1;
    if ((name == "slice" || name == "narrow" || name == "select") && dim >= 0 && dim < rank) {
      const Attr *step = op->attrOrNull("step");
      if (step && step->kind() != AttrKind::Int) return std::nullopt;
      if (step) strides[size_t(dim)] *= step->asInt();
      if (name == "select") strides.erase(strides.begin() + dim);
    } else if (std::vector<int> where = permutedOrder(*op, identity(rank)); !where.empty()) {
      std::vector<int64_t> permuted(strides.size());
      for (size_t k = 0; k < where.size(); ++k)
        permuted[size_t(where[k])] = strides[k];
      strides = std::move(permuted);
    } else if (name == "unsqueeze" && dimAttr && dimAttr->kind() == AttrKind::Int) {
      const int64_t d = dimAttr->asInt() < 0 ? dimAttr->asInt() + rank + 1 : dimAttr->asInt();
      if (d < 0 || d > rank) return std::nullopt;
      strides.insert(strides.begin() + d, d == rank ? 1 : (*sizes)[size_t(d)] * strides[size_t(d)]);
    } else if (splitPieces.count(name)) {
      // (each piece keeps the operand's strides; unbind's drops the dim. `chunk` under
      // dynamic=True is a split_with_sizes: fuzzer seed 35041)
      const int64_t d = dimAttr ? dim : 0;
      if (d < 0 || d >= rank) return std::nullopt;
      if (name == "unbind") strides.erase(strides.begin() + d);
    } else if (name == "alias") {
      // (a view of the whole: the same strides)
    } else if (name == "expand" || name == "expand_as") {
      // (new leading dims and expanded size-1 dims get stride 0, the others keep theirs)
      std::optional<std::vector<int64_t>> shape =
          representativeSizes(op->result(0)->type().shape(), symbols);
      if (!shape || shape->size() < sizes->size()) return std::nullopt;
      const size_t lead = shape->size() - sizes->size();
      std::vector<int64_t> expanded(shape->size(), 0);
      for (size_t d = 0; d < sizes->size(); ++d)
        if ((*sizes)[d] != 1 || (*shape)[lead + d] == 1) expanded[lead + d] = strides[d];
      strides = std::move(expanded);
    } else if (name == "squeeze" || name == "view" || name == "reshape" || name == "flatten" ||
               name == "unflatten") {
      // (squeeze drops size-1 dims: the view with the result's shape keeps the other strides)
      std::optional<std::vector<int64_t>> shape =
          representativeSizes(op->result(0)->type().shape(), symbols);
      if (!shape) return std::nullopt;
      std::optional<std::vector<int64_t>> viewed = viewStrides(*sizes, strides, *shape);
      if (viewed) {
        strides = std::move(*viewed);
      } else if (name == "reshape" || name == "flatten") {
        strides = denseStrides(*shape, identity(int64_t(shape->size()))); // a contiguous copy
      } else {
        return std::nullopt; // (eager raises)
      }
    } else {
      return std::nullopt;
    }
  }
  return strides;
}

/// What computeViewedBasesInLayouts lays out: a tensor and the layout eager gives it.
struct LayoutTarget {
  Value *value;               // a graph output, or the operand of a call that reads storage
  const OutputLayout *layout; // eager's
  const std::vector<int> *storageOrder = nullptr; // eager's order of the tensor viewed
};

/// Whether `v` is a graph input or views one, or a PyTorch fallback's result: a tensor PyTorch
/// lays out, as eager does.
bool laidOutByPyTorch(const Value *v) {
  while (const Op *def = v->definingOp()) {
    if (def->name() == "external_call") return true;
    if (!def->def().has(kView) || def->numOperands() == 0 || !def->operand(0)->type().isTensor())
      return false;
    v = def->operand(0);
  }
  return v->ownerBlock() && !v->ownerBlock()->parentOp();
}

/// Outputs with exact layouts (strided views of one computed tensor: `v3 = (a <= -1)[1:];
/// return v3[:, 1:], v3` of a transposed a, fuzzer seed 14231) get eager's strides only when
/// the tensor they view is computed in eager's dim order, which eager does not record (it is
/// no output). Each dim order of that base is tried: one that gives every laid-out output
/// viewing it eager's strides (on dims of size > 1) is the one computed, as for a dense output
/// (permute(contiguous(permute(base, order)), inverse)); the views then read it. A wrong guess
/// costs nothing but the copy after the run (restoreLayouts checks each output's strides).
/// Targets with a `storageOrder` (the operands of calls that read storage) need their base in
/// that order whatever their views' strides; `unmet` gets the indices of those left otherwise
/// (a base the graph does not compute as a fresh tensor, no order that fits). Returns the number
/// of bases rewritten.
int computeViewedBasesInLayouts(Graph &g, const std::vector<LayoutTarget> &targets,
                                std::vector<size_t> *unmet = nullptr) {
  static const std::set<std::string, std::less<>> followed = {
      "slice",   "narrow", "select",  "permute", "transpose", "t",      "movedim",   "unsqueeze",
      "squeeze", "view",   "reshape", "flatten", "unflatten", "expand", "expand_as", "alias"};
  struct Viewer {
    size_t target;
    std::vector<const Op *> views; // from the base up
  };
  std::map<Value *, std::vector<Viewer>> byBase;
  std::vector<Value *> bases; // (in target order, for a deterministic rewrite)
  for (size_t i = 0; i < targets.size(); ++i) {
    const OutputLayout &layout = *targets[i].layout;
    if (layout.kind == OutputLayout::Any && layout.baseOrder.empty() && !targets[i].storageOrder)
      continue;
    Viewer viewer{i, {}};
    Value *base = targets[i].value;
    while (Op *def = base->definingOp()) {
      const bool piece = splitPieces.count(def->name()) > 0;
      // (expand_as's second operand gives only the shape; fuzzer seed 219894)
      const size_t viewed = def->name() == "expand_as" ? 2 : 1;
      if (!(followed.count(def->name()) || piece) || def->numOperands() != viewed ||
          (def->numResults() != 1 && !piece) || !def->operand(0)->type().isTensor())
        break;
      viewer.views.insert(viewer.views.begin(), def);
      base = def->operand(0);
    }
    // A tensor written through a view (`v[:, :1][0] = 5`) is captured flat, as
    // reshape(index_put(reshape(v))): the outer reshape's result stands for it (fuzzer seed
    // 28087: `return v[:, 0], v` of a transposed v so written ran in Python).
    if (base->type().rank() < 2 && !viewer.views.empty() &&
        viewer.views.front()->name() == "reshape" &&
        viewer.views.front()->result(0)->type().rank() >= 2) {
      base = viewer.views.front()->result(0);
      viewer.views.erase(viewer.views.begin());
    }
    if (!byBase.count(base)) bases.push_back(base);
    byBase[base].push_back(std::move(viewer));
  }
  int rewritten = 0;
  for (Value *base : bases) {
    const std::vector<Viewer> &viewers = byBase.at(base);
    const std::vector<int> *storageOrder = nullptr;
    for (const Viewer &v : viewers)
      if (targets[v.target].storageOrder) storageOrder = targets[v.target].storageOrder;
    auto leftOtherwise = [&] {
      if (!unmet || laidOutByPyTorch(base)) return;
      for (const Viewer &v : viewers)
        if (targets[v.target].storageOrder) unmet->push_back(v.target);
    };
    const Op *producer = base->definingOp();
    // Symbolic sizes take representative values (fuzzer seed 15674 under dynamic=True).
    SymbolBindings symbols;
    std::optional<std::vector<int64_t>> sizes = representativeSizes(base->type().shape(), symbols);
    // (A lone dense output that is a permute, a squeeze or the base itself is left to the
    // rewrite of each output below; a slice of a permuted base can also be dense: seed 15674's
    // select. Two outputs on one base are laid out here: copied apart, each into its own
    // layout, they would no longer share memory: seed 62807's `v.squeeze(), v.transpose(0, 1)`.)
    static const std::set<std::string, std::less<>> perOutput = {"permute", "transpose", "t",
                                                                 "unsqueeze", "squeeze"};
    const bool needed = storageOrder || viewers.size() > 1 ||
                        std::any_of(viewers.begin(), viewers.end(), [&](const Viewer &v) {
                          return targets[v.target].layout->kind != OutputLayout::Dense ||
                                 std::any_of(v.views.begin(), v.views.end(), [](const Op *op) {
                                   return !perOutput.count(op->name());
                                 });
                        });
    // (A flat write's reshape, above, is the one view that stands for a base: copied there.)
    const bool flatWrite =
        producer && producer->name() == "reshape" && producer->operand(0)->type().rank() < 2;
    // A fresh result of a kernel: contiguous, which a permuted copy can stand for.
    const bool fresh = producer && !producer->parentOp() && producer->def().isPure() &&
                       producer->def().kernel && (!producer->def().has(kView) || flatWrite) &&
                       !producer->def().has(kInPlace) && producer->numRegions() == 0 &&
                       producer->name() != "tuple_get";
    // (A fresh tensor of rank 0 or 1 has one layout; an empty one holds nothing to read.)
    const bool oneLayout =
        sizes && (sizes->size() < 2 || std::find(sizes->begin(), sizes->end(), 0) != sizes->end());
    if (!needed || !sizes || oneLayout || sizes->size() > 6 || !fresh || !onlyRead(base)) {
      if (!(fresh && oneLayout)) leftOtherwise();
      continue;
    }
    // Whether computing the base in `order` gives every viewer eager's strides. (Those of a
    // strided view with symbolic sizes are the ones its views give the base in eager's order,
    // OutputLayout::baseOrder, at the representative sizes.)
    auto fits = [&](const std::vector<int> &order) {
      // A call reading the storage past its view needs all of the base in eager's order (its
      // dims of size > 1: where size-1 dims go changes no stride).
      if (storageOrder && (storageOrder->size() != sizes->size() ||
                           !restridesOnly(OutputLayout{OutputLayout::Dense, *storageOrder}, *sizes,
                                          denseStrides(*sizes, order))))
        return false;
      for (const Viewer &v : viewers) {
        const Value *y = targets[v.target].value;
        std::optional<std::vector<int64_t>> ySizes =
            representativeSizes(y->type().shape(), symbols);
        std::optional<std::vector<int64_t>> strides =
            stridesThroughViews(v.views, denseStrides(*sizes, order), symbols);
        if (!ySizes || !strides) return false;
        const OutputLayout *eagers = targets[v.target].layout;
        OutputLayout viewed;
        if (const std::vector<int> &baseOrder = eagers->baseOrder; !baseOrder.empty()) {
          std::optional<std::vector<int64_t>> want =
              baseOrder.size() == sizes->size()
                  ? stridesThroughViews(v.views, denseStrides(*sizes, baseOrder), symbols)
                  : std::nullopt;
          if (!want) return false;
          viewed.kind = OutputLayout::Exact;
          viewed.strides = std::move(*want);
          eagers = &viewed;
        }
        if (!restridesOnly(*eagers, *ySizes, *strides)) return false;
      }
      return true;
    };
    std::vector<int> order = identity(int64_t(sizes->size()));
    if (fits(order)) continue; // the graph's own (contiguous) order already fits
    bool found = false;
    while (!found && std::next_permutation(order.begin(), order.end()))
      found = fits(order);
    if (!found) {
      leftOtherwise();
      continue;
    }
    std::vector<int64_t> dims(order.begin(), order.end()), inverse(order.size());
    for (size_t k = 0; k < dims.size(); ++k)
      inverse[size_t(dims[k])] = int64_t(k);
    Builder b(g.body(), producer->next());
    b.setLoc(producer->loc());
    Op *first = b.create("permute", {base}, {{"dims", Attr(dims)}});
    Value *back =
        b.op("permute", {b.op("contiguous", {first->result(0)})}, {{"dims", Attr(inverse)}});
    base->replaceAllUsesWith(back);
    first->setOperand(0, base);
    ++rewritten;
  }
  return rewritten;
}

} // namespace

int computeOutputsInLayouts(Graph &g, const std::vector<OutputLayout> &layouts,
                            const std::vector<size_t> &which) {
  // XJIT_OUTPUT_LAYOUT_COPY=1: the copy after the run instead, as before (A/B benchmarks).
  static const bool copyAfterRun = [] {
    const char *v = std::getenv("XJIT_OUTPUT_LAYOUT_COPY");
    return v && *v && std::string(v) != "0";
  }();
  Op *ret = g.body()->terminator();
  if (copyAfterRun || !ret || ret->numOperands() != layouts.size()) return 0;
  std::unordered_set<const Value *> done;
  std::vector<LayoutTarget> targets;
  for (size_t i : which)
    targets.push_back({ret->operand(i), &layouts.at(i)});
  int rewritten = computeViewedBasesInLayouts(g, targets);
  for (size_t i : which) {
    const OutputLayout &layout = layouts.at(i);
    Value *y = ret->operand(i);
    const Type &t = y->type();
    if (layout.kind != OutputLayout::Dense || !t.isTensor() || t.rank() < 2 ||
        layout.order.size() != size_t(t.rank()) || done.count(y))
      continue;
    // The order the graph gives y: follow permutes down to the fresh result they view (which
    // the runtime's kernels make contiguous), then permute its order back up.
    // Unsqueeze and squeeze are followed too: their result keeps the operand's order (fuzzer
    // seed 17836: `v3 = cos(a.t())[None, :, :, None]; return v3[None].expand(3, ...), v3`,
    // where the expand, a view of v3, gets eager's strides only if v3 is computed in them).
    auto viewOrder = [](const Op &def, const std::vector<int> &in) -> std::vector<int> {
      std::vector<int> r = permutedOrder(def, in);
      if (!r.empty() || in.empty()) return r;
      std::optional<std::vector<int>> s = squeezedOrder(def, in, def.operand(0)->type().shape());
      return s ? std::move(*s) : std::vector<int>{};
    };
    std::vector<const Op *> views;
    const Value *base = y;
    while (const Op *def = base->definingOp()) {
      if (def->numOperands() != 1 || !def->operand(0)->type().isTensor() ||
          def->operand(0)->type().rank() == 0 ||
          viewOrder(*def, identity(def->operand(0)->type().rank())).empty())
        break;
      views.push_back(def);
      base = def->operand(0);
    }
    std::vector<int> graphOrder = identity(base->type().rank());
    for (auto it = views.rbegin(); it != views.rend(); ++it)
      graphOrder = viewOrder(**it, graphOrder);
    const Op *producer = base->definingOp();
    if (!producer || producer->parentOp() || !producer->def().isPure() || !producer->def().kernel ||
        producer->def().has(kView) || producer->def().has(kInPlace) || producer->numRegions() > 0 ||
        producer->name() == "tuple_get" || !onlyRead(base))
      continue;
    // The graph already gives eager's layout where the orders agree on the dims of size > 1
    // (the strides of size-1 dims are restrided after the run, a view: restridesOnly).
    auto sizeAbove1 = [&](int d) {
      const DimExpr &n = t.shape()[size_t(d)];
      return !n.isStatic() || n.value() != 1;
    };
    std::vector<int> graphBig, eagerBig;
    std::copy_if(graphOrder.begin(), graphOrder.end(), std::back_inserter(graphBig), sizeAbove1);
    std::copy_if(layout.order.begin(), layout.order.end(), std::back_inserter(eagerBig),
                 sizeAbove1);
    if (graphOrder.size() == layout.order.size() && graphBig == eagerBig) continue;
    Op *def = y->definingOp();
    if (!def || def->parentOp()) continue;
    std::vector<int64_t> order(layout.order.begin(), layout.order.end());
    std::vector<int64_t> inverse(order.size());
    for (size_t k = 0; k < order.size(); ++k)
      inverse[size_t(order[k])] = int64_t(k);
    const bool permutes = !isIdentity(layout.order);
    Builder b(g.body(), def->next());
    b.setLoc(def->loc());
    Op *first = permutes ? b.create("permute", {y}, {{"dims", Attr(order)}}) : nullptr;
    Op *copy = b.create("contiguous", {first ? first->result(0) : y});
    Value *back =
        permutes ? b.op("permute", {copy->result(0)}, {{"dims", Attr(inverse)}}) : copy->result(0);
    y->replaceAllUsesWith(back);
    (first ? first : copy)->setOperand(0, y);
    done.insert(y);
    done.insert(back);
    ++rewritten;
  }
  return rewritten;
}

std::string computeStorageReadsInLayouts(Graph &g,
                                         const std::map<const Op *, StorageRead> &storageReads) {
  std::vector<LayoutTarget> targets;
  std::vector<const Op *> calls;
  g.walk([&](Op *op) {
    if (auto it = storageReads.find(op); it != storageReads.end()) {
      targets.push_back({op->operand(0), &it->second.operand, &it->second.storageOrder});
      calls.push_back(op);
    }
  });
  std::vector<size_t> unmet;
  computeViewedBasesInLayouts(g, targets, &unmet);
  if (unmet.empty()) return "";
  return calls.at(unmet.front())->describe() +
         " reads the storage of a tensor the compiled graph cannot lay out as eager does";
}

int layoutCallsInEagersOrder(Graph &g, const std::map<const Op *, std::vector<int>> &callOrders) {
  std::vector<Op *> calls;
  g.walk([&](Op *op) {
    if (callOrders.count(op)) calls.push_back(op);
  });
  int rewritten = 0;
  for (Op *call : calls) {
    const std::vector<int> &order = callOrders.at(call);
    const size_t k = size_t(call->attr("layout_of").asInt());
    Value *like = call->operand(k);
    const Shape &shape = like->type().shape();
    if (call->numResults() != 1 || !(call->result(0)->type().shape() == shape))
      throw std::runtime_error("internal: " + call->describe() +
                               " is laid out like an operand of another shape");
    if (order.size() != shape.size() ||
        contiguousIgnoringOnes(shape, order, identity(int64_t(shape.size()))))
      continue; // (size-1 dims do not change the memory order)
    Op *likeDef = like->definingOp();
    Value *x = likeDef && likeDef->name() == "empty_like" ? likeDef->operand(0) : like;
    const std::vector<int64_t> dims(order.begin(), order.end());
    std::vector<int64_t> inverse(dims.size());
    for (size_t d = 0; d < dims.size(); ++d)
      inverse[size_t(dims[d])] = int64_t(d);
    Builder before(call->parentBlock(), call);
    before.setLoc(call->loc());
    Value *permutedLike =
        before.op("empty_like", {before.op("permute", {x}, {{"dims", Attr(dims)}})});
    call->setOperand(k, permutedLike);
    Value *noise = call->result(0);
    noise->setType(noise->type().withShape(permutedLike->type().shape()));
    Builder after(call->parentBlock(), call->next());
    after.setLoc(call->loc());
    Op *back = after.create("permute", {noise}, {{"dims", Attr(inverse)}});
    noise->replaceAllUsesWith(back->result(0));
    back->setOperand(0, noise);
    if (likeDef && !like->hasUses()) likeDef->parentBlock()->erase(likeDef);
    ++rewritten;
  }
  return rewritten;
}

namespace {

/// Whether eager's strides for `v` cannot depend on symbolic sizes: v and the tensors it views
/// or writes in place, back to the ops computing them, have static sizes (a constant, a sum to
/// a static shape). Not a graph input (guarded by layout class only under dynamic=True), an
/// op in a region or a PyTorch fallback (which may view an operand).
bool staticallyStrided(const Value *v, int depth = 0) {
  if (depth > 64 || !staticSizes(v->type().shape())) return false;
  const Op *def = v->definingOp();
  if (!def || def->parentOp() || def->name() == "external_call") return false;
  if (!def->def().has(kView) && !def->def().has(kInPlace)) return true;
  return def->numOperands() > 0 && def->operand(0)->type().isTensor() &&
         staticallyStrided(def->operand(0), depth + 1);
}

/// The layout eager gives `v` (a tensor of a graph with symbolic sizes or not), from `info`,
/// eager.py's layout_of of v's meta tensor (not None).
OutputLayout layoutFromMeta(PyObject *info, const Value *v, bool symbolic) {
  OutputLayout l;
  std::vector<int64_t> sizes = intsOf(PyTuple_GET_ITEM(info, 0));
  std::vector<int64_t> strides = intsOf(PyTuple_GET_ITEM(info, 1));
  const long long offset = PyLong_AsLongLong(PyTuple_GET_ITEM(info, 2));
  if (offset == -1 && PyErr_Occurred()) throw PyErrorSet();
  l.order = denseOrder(sizes, strides);
  if (!l.order.empty() && offset == 0) {
    l.kind = OutputLayout::Dense;
  } else if (!symbolic || staticallyStrided(v)) {
    // (Exact where the sizes are static: in a graph with symbolic sizes, only where its
    // strides cannot depend on them, fuzzer seed 25903: `eye(2)[..., ::2]`, a constant.)
    l.kind = OutputLayout::Exact;
    l.strides = std::move(strides);
    l.offset = offset;
  } else if (!l.order.empty()) {
    // A dense view at an offset (a slice of a computed tensor) with symbolic sizes: its dim
    // order, which computeViewedBasesInLayouts can give it (fuzzer seed 24846).
    l.kind = OutputLayout::Dense;
    l.symbolicView = true;
  } else {
    // A strided view of a computed tensor with symbolic sizes: its strides are expressions
    // of the sizes this walk does not keep. Returned as the graph makes it, but with the
    // dense order of the tensor it views, which computeViewedBasesInLayouts gives that
    // tensor (fuzzer seeds 25121, 26095: `v1[::2]` of a permuted v1 came back contiguous).
    PyObject *viewed = PyTuple_GET_ITEM(info, 4);
    if (viewed != Py_None)
      l.baseOrder =
          denseOrder(intsOf(PyTuple_GET_ITEM(viewed, 0)), intsOf(PyTuple_GET_ITEM(viewed, 1)));
    if (PyErr_Occurred()) throw PyErrorSet();
  }
  return l;
}

/// Whether the layout of output `v` from the walk at the capture's sizes (`info`) may not hold
/// at others: a symbolic dim of it had size 1 there (`s0-1` at s0 = 2), where a dense order does
/// not place it (and meta kernels place size-1 dims otherwise than CPU ones).
bool unitAtCapture(const Value *v, PyObject *info) {
  if (!v->type().isTensor()) return false;
  const std::vector<int64_t> sizes = intsOf(PyTuple_GET_ITEM(info, 0));
  const Shape &shape = v->type().shape();
  for (size_t d = 0; d < sizes.size() && d < shape.size(); ++d)
    if (!shape[d].isStatic() && sizes[d] == 1) return true;
  return false;
}

/// Meta tensors of the graph inputs at representative sizes (representativeSizes: every
/// symbolic dim 2 or more), each dense in the order its real input has; empty where an input
/// is not a dense tensor (or the sizes cannot be made).
std::vector<PyRef> representativeInputs(const Graph &g, const std::vector<PyRef> &inputs,
                                        SymbolBindings &symbols) {
  static PyObject *strideName = internedStr("stride");
  static PyObject *sizeName = internedStr("size");
  std::vector<PyRef> out;
  for (size_t i = 0; i < inputs.size() && i < g.numInputs(); ++i) {
    const Type &t = g.input(i)->type();
    if (!t.isTensor() || !isPlainTensor(inputs[i].get())) return {};
    const std::vector<int64_t> sizes =
        intsOf(checked(PyObject_CallMethodNoArgs(inputs[i].get(), sizeName)).get());
    const std::vector<int64_t> strides =
        intsOf(checked(PyObject_CallMethodNoArgs(inputs[i].get(), strideName)).get());
    std::vector<int> order = denseOrder(sizes, strides);
    if (order.empty()) order = denseOrderOfSignificantDims(sizes, strides);
    std::optional<std::vector<int64_t>> rep = representativeSizes(t.shape(), symbols);
    if (order.empty() || !rep || rep->size() != sizes.size()) return {};
    out.push_back(checked(PyObject_CallFunctionObjArgs(
        eagerModule().metaStrided, intList(*rep).get(), intList(denseStrides(*rep, order)).get(),
        inputs[i].get(), nullptr)));
  }
  return out.size() == g.numInputs() ? out : std::vector<PyRef>{};
}

} // namespace

OutputLayouts deriveOutputLayouts(const Graph &g, const std::vector<PyRef> &inputs,
                                  const ExternalCallables &externals, bool symbolic) {
  OutputLayouts r;
  std::vector<bool> unknown;
  std::string eagerRaises;
  std::map<const Op *, PyRef> laidOut;
  std::vector<PyRef> outs = runMeta(g, inputs, externals, unknown, eagerRaises, &laidOut);
  if (!eagerRaises.empty()) {
    r.derived = false;
    r.reason = "eager raises at " + eagerRaises;
    return r;
  }
  // The layout eager gives each layout_of operand (dropout's empty_like(x)): the draws follow it.
  g.walk([&](Op *op) {
    const Attr *k = op->name() == "external_call" ? op->attrOrNull("layout_of") : nullptr;
    if (!k || k->asInt() < 0 || !r.derived) return;
    auto it = laidOut.find(op);
    PyRef info = it == laidOut.end()
                     ? PyRef()
                     : checked(PyObject_CallOneArg(eagerModule().layoutOf, it->second.get()));
    std::vector<int> order;
    if (info && info.get() != Py_None && PyLong_AsLongLong(PyTuple_GET_ITEM(info.get(), 2)) == 0)
      order = denseOrder(intsOf(PyTuple_GET_ITEM(info.get(), 0)),
                         intsOf(PyTuple_GET_ITEM(info.get(), 1)));
    if (PyErr_Occurred()) throw PyErrorSet();
    if (order.empty() && op->operand(size_t(k->asInt()))->type().rank() > 1) {
      r.derived = false;
      r.reason = "the layout eager gives the operand of " + op->describe() +
                 " (which it draws in) could not be derived";
      return;
    }
    r.callOrders[op] = std::move(order);
  });
  // Eager's layout of what each call reading storage (as_strided) reads: its operand, and the
  // dense order of the tensor whose storage that is.
  g.walk([&](Op *op) {
    if (!r.derived || !readsStorage(*op)) return;
    auto it = laidOut.find(op);
    PyRef info = it == laidOut.end()
                     ? PyRef()
                     : checked(PyObject_CallOneArg(eagerModule().layoutOf, it->second.get()));
    if (!info || info.get() == Py_None) {
      r.derived = false;
      r.reason = "the layout eager gives the operand of " + op->describe() +
                 " (whose storage it reads) could not be derived";
      return;
    }
    StorageRead read;
    read.operand = layoutFromMeta(info.get(), op->operand(0), symbolic);
    PyObject *viewed = PyTuple_GET_ITEM(info.get(), 4);
    read.storageOrder = viewed == Py_None ? denseOrder(intsOf(PyTuple_GET_ITEM(info.get(), 0)),
                                                       intsOf(PyTuple_GET_ITEM(info.get(), 1)))
                                          : denseOrder(intsOf(PyTuple_GET_ITEM(viewed, 0)),
                                                       intsOf(PyTuple_GET_ITEM(viewed, 1)));
    if (PyErr_Occurred()) throw PyErrorSet();
    r.storageReads[op] = std::move(read);
  });
  if (!r.derived) return r;
  std::vector<size_t> ambiguous; // outputs whose order the walk at the capture's sizes leaves open
  for (size_t i = 0; i < outs.size(); ++i) {
    OutputLayout l;
    if (unknown[i]) {
      if (g.body()->terminator()->operand(i)->type().isTensor()) {
        r.derived = false;
        r.reason = "the layout eager gives graph output " + std::to_string(i) +
                   " could not be derived (an op on its path has no meta kernel)";
      }
      r.outputs.push_back(l);
      continue;
    }
    PyRef info = checked(PyObject_CallOneArg(eagerModule().layoutOf, outs[i].get()));
    if (info.get() != Py_None) {
      l = layoutFromMeta(info.get(), g.body()->terminator()->operand(i), symbolic);
      if (symbolic && l.kind == OutputLayout::Dense &&
          unitAtCapture(g.body()->terminator()->operand(i), info.get()))
        ambiguous.push_back(i);
    }
    r.outputs.push_back(std::move(l));
  }
  // Where an output has a symbolic dim of size 1 at the capture's sizes, the outputs take their
  // layouts from a second walk at representative sizes, where every symbolic dim is 2 or more
  // (fuzzer seeds 208915, 222852, 227551: `v = a[1:]` of a transposed [s0, n] input at s0 = 2, then
  // an activation of it; the order found at size 1 was row-major where eager follows the
  // input's order at other sizes). A walk that fails keeps the capture's orders.
  if (!ambiguous.empty()) {
    try {
      SymbolBindings symbols;
      std::vector<PyRef> repInputs = representativeInputs(g, inputs, symbols);
      if (!repInputs.empty()) {
        std::vector<bool> repUnknown;
        std::string repRaises;
        std::vector<PyRef> repOuts =
            runMeta(g, repInputs, externals, repUnknown, repRaises, nullptr, &symbols);
        // Every output then takes that walk's layout: views of the ambiguous ones too (`v[0]`
        // of such a v: contiguous at size 1, strided at other sizes; fuzzer seed 222852).
        std::vector<OutputLayout> rep;
        for (size_t i = 0; repRaises.empty() && i < outs.size() && i < repOuts.size(); ++i) {
          if (repUnknown[i]) break;
          PyRef info = checked(PyObject_CallOneArg(eagerModule().layoutOf, repOuts[i].get()));
          OutputLayout l;
          if (info.get() != Py_None)
            l = layoutFromMeta(info.get(), g.body()->terminator()->operand(i), true);
          rep.push_back(std::move(l));
        }
        if (rep.size() == r.outputs.size()) r.outputs = std::move(rep);
      }
    } catch (const PyErrorSet &) {
      if (interruptPending()) throw;
      PyErr_Clear();
    } catch (const std::exception &) {
      PyErr_Clear();
    }
  }
  return r;
}

bool hasLayout(const OutputLayout &layout, const std::vector<int64_t> &sizes,
               const std::vector<int64_t> &strides) {
  switch (layout.kind) {
  case OutputLayout::Any: return true;
  case OutputLayout::Dense: {
    if (layout.order.size() != sizes.size()) return false;
    int64_t next = 1;
    for (size_t k = layout.order.size(); k-- > 0;) {
      const size_t d = size_t(layout.order[k]);
      if (strides[d] != next) return false;
      next *= std::max<int64_t>(sizes[d], 1);
    }
    return true;
  }
  case OutputLayout::Exact: return strides == layout.strides;
  }
  return true;
}

namespace {
std::vector<int64_t> stridesOf(const OutputLayout &layout, const std::vector<int64_t> &sizes) {
  return layout.kind == OutputLayout::Dense ? denseStrides(sizes, layout.order) : layout.strides;
}
} // namespace

bool restridesOnly(const OutputLayout &layout, const std::vector<int64_t> &sizes,
                   const std::vector<int64_t> &strides) {
  if (layout.kind == OutputLayout::Any) return true;
  const std::vector<int64_t> want = stridesOf(layout, sizes);
  if (want.size() != sizes.size() || strides.size() != sizes.size()) return false;
  if (std::find(sizes.begin(), sizes.end(), 0) != sizes.end()) return true;
  for (size_t d = 0; d < sizes.size(); ++d)
    if (sizes[d] != 1 && strides[d] != want[d]) return false;
  return true;
}

PyRef inLayout(const OutputLayout &layout, PyRef value) {
  if (layout.kind == OutputLayout::Any || !isPlainTensor(value.get())) return value;
  static PyObject *strideName = internedStr("stride");
  static PyObject *sizeName = internedStr("size");
  std::vector<int64_t> sizes =
      intsOf(checked(PyObject_CallMethodNoArgs(value.get(), sizeName)).get());
  std::vector<int64_t> strides =
      intsOf(checked(PyObject_CallMethodNoArgs(value.get(), strideName)).get());
  if (sizes.size() !=
      (layout.kind == OutputLayout::Dense ? layout.order.size() : layout.strides.size()))
    return value; // (cannot happen: the graph's output ranks are fixed)
  if (hasLayout(layout, sizes, strides)) return value;
  if (restridesOnly(layout, sizes, strides)) {
    static PyObject *asStridedName = internedStr("as_strided");
    static PyObject *offsetName = internedStr("storage_offset");
    PyRef offset = checked(PyObject_CallMethodNoArgs(value.get(), offsetName));
    return checked(PyObject_CallMethodObjArgs(value.get(), asStridedName, intList(sizes).get(),
                                              intList(stridesOf(layout, sizes)).get(), offset.get(),
                                              nullptr));
  }
  if (layout.kind == OutputLayout::Dense) {
    // value.permute(order).contiguous().permute(inverse): one copy, in PyTorch's kernels.
    static PyObject *permuteName = internedStr("permute");
    static PyObject *contiguousName = internedStr("contiguous");
    std::vector<int64_t> order(layout.order.begin(), layout.order.end());
    std::vector<int64_t> inverse(order.size());
    for (size_t k = 0; k < order.size(); ++k)
      inverse[size_t(order[k])] = int64_t(k);
    PyRef physical =
        checked(PyObject_CallMethodOneArg(value.get(), permuteName, intList(order).get()));
    PyRef copy = checked(PyObject_CallMethodNoArgs(physical.get(), contiguousName));
    PyRef r = checked(PyObject_CallMethodOneArg(copy.get(), permuteName, intList(inverse).get()));
    // contiguous() leaves the strides of size-1 dims as they were: then a copy of our own.
    if (hasLayout(layout, sizes,
                  intsOf(checked(PyObject_CallMethodNoArgs(r.get(), strideName)).get())))
      return r;
  }
  std::vector<int64_t> want = stridesOf(layout, sizes);
  PyRef offset = checked(PyLong_FromLongLong(layout.offset));
  return checked(PyObject_CallFunctionObjArgs(eagerModule().relayout, value.get(),
                                              intList(want).get(), offset.get(), nullptr));
}

std::vector<int8_t> layoutClass(const int64_t *sizes, const int64_t *strides, int ndim) {
  std::vector<int8_t> c(size_t(ndim) + 1, 0);
  std::vector<int64_t> compact(static_cast<size_t>(ndim));
  int64_t next = 1;
  for (int d = ndim; d-- > 0;) {
    compact[size_t(d)] = next;
    next *= sizes[d];
  }
  auto stride = [&](int d) { return strides ? strides[d] : compact[size_t(d)]; };
  std::vector<std::pair<int64_t, int>> dims; // (stride, dim) of the dims of size > 1
  for (int d = 0; d < ndim; ++d) {
    if (sizes[d] == 1)
      c[size_t(d)] = -1;
    else if (stride(d) == 0)
      c[size_t(d)] = -2;
    else
      dims.emplace_back(stride(d), d);
  }
  std::sort(dims.begin(), dims.end(), [](auto a, auto b) { return a.first > b.first; });
  int8_t rank = 0;
  bool dense = true;
  int64_t expect = 1;
  for (size_t k = dims.size(); k-- > 0;) {
    dense = dense && dims[k].first == expect;
    expect *= sizes[dims[k].second];
  }
  for (size_t k = 0; k < dims.size(); ++k) {
    if (k > 0 && dims[k].first != dims[k - 1].first) ++rank;
    c[size_t(dims[k].second)] = rank;
  }
  for (int d = 0; d < ndim; ++d)
    dense = dense && c[size_t(d)] != -2; // an expanded dim overlaps
  c[size_t(ndim)] = dense ? 1 : 0;
  return c;
}

} // namespace xjit::frontend

namespace xjit::frontend {

bool hasLayoutClass(const std::vector<int8_t> &layout, const int64_t *sizes, const int64_t *strides,
                    int ndim) {
  if (layout.size() != size_t(ndim) + 1) return false;
  // Fast path, without allocating: a row-major contiguous tensor (the common input), whose
  // class is its dims of size > 1 ranked in order, dense.
  bool compact = true;
  int64_t next = 1;
  for (int d = ndim; d-- > 0 && compact;) {
    if (sizes[d] != 1) compact = !strides || strides[d] == next;
    next *= sizes[d];
  }
  if (compact && next > 0) {
    int8_t rank = 0;
    for (int d = 0; d < ndim; ++d)
      if (layout[size_t(d)] != (sizes[d] == 1 ? -1 : rank++)) return false;
    return layout[size_t(ndim)] == 1;
  }
  return layoutClass(sizes, strides, ndim) == layout;
}

} // namespace xjit::frontend
