#include "output_layout.h"

#include "py_util.h"
#include "tensor_bridge.h"
#include "xjit/ir/builder.h"
#include "xjit/ir/op_registry.h"

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <optional>
#include <set>
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
// either way.
std::vector<int> denseOrder(const std::vector<int64_t> &sizes,
                            const std::vector<int64_t> &strides) {
  for (bool lowerFirst : {true, false}) {
    std::vector<int> order(sizes.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
      if (strides[size_t(a)] != strides[size_t(b)]) return strides[size_t(a)] > strides[size_t(b)];
      return lowerFirst ? a < b : a > b;
    });
    if (denseStrides(sizes, order) == strides) return order;
  }
  return {};
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
    std::swap(perm[size_t(norm(a->asInt()))], perm[size_t(norm(b->asInt()))]);
  } else if (name == "t") {
    if (rank == 2) std::swap(perm[0], perm[1]);
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

} // namespace

bool staticOutputLayouts(const Graph &g, const std::vector<std::vector<int>> &inputOrders,
                         std::vector<OutputLayout> &out, const Op **stoppedAt) {
  const Op *current = nullptr;
  auto stop = [&] {
    if (stoppedAt) *stoppedAt = current;
    return false;
  };
  // Ops whose CPU kernels always allocate a fresh contiguous result, whatever their operands'
  // layouts (the matmul family; ATen's out-of-place masked_fill, elementwise here, starts from
  // self.clone(contiguous_format)).
  static const std::set<std::string, std::less<>> freshContiguous = {
      "matmul", "mm", "bmm", "linear", "addmm", "baddbmm", "contiguous", "masked_fill"};
  // Views that keep a contiguous operand contiguous.
  static const std::set<std::string, std::less<>> contiguousViews = {
      "view", "reshape", "flatten", "unflatten", "unsqueeze", "squeeze", "alias"};
  std::unordered_map<const Value *, std::vector<int>> order;
  // Values that are strided views (slice, select, narrow): their strides' order is known, their
  // strides not. Ops reading them follow the order (TensorIterator does); returning one needs
  // its exact strides (the meta walk).
  std::unordered_set<const Value *> strided;
  // Values whose layout depends on which kernel eager picks (attention: CPU flash attention
  // returns a transposed buffer, the math path a contiguous one). Ops that allocate a fresh
  // contiguous result make them known again; returning one needs the meta walk.
  std::unordered_set<const Value *> unknown;
  const Block &body = *g.body();
  for (size_t i = 0; i < body.numArguments(); ++i) {
    if (!body.argument(i)->type().isTensor()) continue;
    if (i >= inputOrders.size() || inputOrders[i].size() != size_t(body.argument(i)->type().rank()))
      return stop();
    order[body.argument(i)] = inputOrders[i];
  }
  for (Op *op : body) {
    current = op;
    if (op->def().has(kTerminator)) {
      out.clear();
      for (Value *v : op->operands()) {
        OutputLayout l;
        if (v->type().isTensor()) {
          if (strided.count(v) || unknown.count(v)) return stop();
          l.kind = OutputLayout::Dense;
          l.order = order.at(v);
        }
        out.push_back(std::move(l));
      }
      return true;
    }
    if (op->numRegions() > 0 || op->name() == "external_call") return stop();
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
        if (it == order.end()) return stop();
        operands.push_back(&it->second);
        allIdentity = allIdentity && isIdentity(it->second);
        anyStrided = anyStrided || strided.count(v) > 0;
      } else if (!t.isScalar() && t.kind() != TypeKind::None) {
        return stop(); // a tuple or object may hold tensors of any layout
      }
    }
    const std::string &name = op->name();
    std::optional<std::vector<int>> result; // the order of every tensor result
    bool resultStrided = false;
    const Attr *dimAttr = op->attrOrNull("dim");
    const int64_t rank0 = operands.empty() ? 0 : int64_t(operands[0]->size());
    const int64_t dim = dimAttr && dimAttr->kind() == AttrKind::Int
                            ? (dimAttr->asInt() < 0 ? dimAttr->asInt() + rank0 : dimAttr->asInt())
                            : -1;
    // Strided views along `dim` (several results for the split family): the order of their
    // dims' strides is their operand's, less the dim a select-like view drops.
    static const std::set<std::string, std::less<>> sliceViews = {
        "slice", "narrow", "chunk", "split", "split_with_sizes", "select", "unbind"};
    if (anyUnknown || name == "scaled_dot_product_attention") {
      if (op->def().has(kConstantLike) || freshContiguous.count(name)) {
        result.emplace();
      } else {
        for (const auto &r : op->results())
          unknown.insert(r.get());
        continue;
      }
    } else if (sliceViews.count(name) && operands.size() == 1 && dim >= 0 && dim < rank0) {
      const bool drops = name == "select" || name == "unbind";
      std::vector<int> r;
      for (int d : *operands[0])
        if (!drops || d != dim) r.push_back(d - (drops && d > dim ? 1 : 0));
      result = std::move(r);
      resultStrided = true;
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
    } else if (anyStrided && operands.size() == 1 &&
               (name == "permute" || name == "transpose" || name == "t")) {
      std::vector<int> r = permutedOrder(*op, *operands[0]);
      if (r.size() != operands[0]->size()) return stop();
      result = std::move(r);
      resultStrided = true;
    } else if (anyStrided && allIdentity && operands.size() == 1 && contiguousViews.count(name)) {
      // Splitting or merging dims of decreasing strides keeps them decreasing (a reshape that
      // cannot view copies into a contiguous tensor: the same order).
      result.emplace();
      resultStrided = true;
    } else if (anyStrided && (op->def().has(kView) || op->def().has(kInPlace) || name == "clone")) {
      return stop();
    } else if (name == "cat" && !operands.empty()) {
      // The output memory format of ATen's cat: channels-last only when every input suggests
      // it (4-d/5-d inputs in that exact order), else contiguous.
      const int64_t rank = op->result(0)->type().rank();
      std::vector<int> channelsLast;
      if (rank == 4) channelsLast = {0, 2, 3, 1};
      if (rank == 5) channelsLast = {0, 2, 3, 4, 1};
      bool allChannelsLast = !channelsLast.empty();
      for (const std::vector<int> *o : operands) {
        if (channelsLast.empty() || isIdentity(*o)) {
          allChannelsLast = false;
          break;
        }
        if (*o != channelsLast || anyStrided) return stop();
      }
      if (allChannelsLast)
        result = channelsLast;
      else
        result.emplace();
    } else if (op->def().has(kConstantLike) || freshContiguous.count(name)) {
      result.emplace(); // identity, per result rank below
    } else if (op->def().has(kInPlace) && !operands.empty()) {
      result = *operands[0];
    } else if (!operands.empty() && (name == "permute" || name == "transpose" || name == "t")) {
      std::vector<int> r = permutedOrder(*op, *operands[0]);
      if (r.size() != operands[0]->size()) return stop();
      result = std::move(r);
    } else if (name == "clone" && !operands.empty()) {
      result = *operands[0]; // preserve_format: a dense operand's order
    } else if (!allIdentity && op->def().has(kElementwise) && !anyStrided &&
               op->numResults() == 1 && op->result(0)->type().isTensor()) {
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
        if (!(t.shape() == rt.shape())) return stop();
        if (result && *result != order.at(v)) return stop();
        result = order.at(v);
      }
      if (!result) return stop();
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
      return stop(); // the meta walk decides
    }
    for (size_t i = 0; i < op->numResults(); ++i) {
      const Type &t = op->result(i)->type();
      if (!t.isTensor()) continue;
      std::vector<int> r = result->empty() ? identity(t.rank()) : *result;
      if (r.size() != size_t(t.rank())) return stop();
      order[op->result(i)] = std::move(r);
      if (resultStrided) strided.insert(op->result(i));
    }
  }
  return stop();
}

namespace {

/// Whether nothing writes v or a view of it (then a view of a permuted copy can stand for it).
bool onlyRead(const Value *v, int depth = 0) {
  if (depth > 16) return false;
  for (const Use &u : v->uses()) {
    const OpDef &def = u.user->def();
    if (def.has(kTerminator)) continue;
    if (def.has(kInPlace) || !def.isPure() || u.user->numRegions() > 0) return false;
    if (def.has(kView))
      for (const auto &r : u.user->results())
        if (!onlyRead(r.get(), depth + 1)) return false;
  }
  return true;
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
  int rewritten = 0;
  for (size_t i : which) {
    const OutputLayout &layout = layouts.at(i);
    Value *y = ret->operand(i);
    const Type &t = y->type();
    if (layout.kind != OutputLayout::Dense || !t.isTensor() || t.rank() < 2 ||
        layout.order.size() != size_t(t.rank()) || done.count(y))
      continue;
    // The order the graph gives y: follow permutes down to the fresh result they view (which
    // the runtime's kernels make contiguous), then permute its order back up.
    std::vector<const Op *> views;
    const Value *base = y;
    while (const Op *def = base->definingOp()) {
      if (def->numOperands() != 1 || !def->operand(0)->type().isTensor() ||
          permutedOrder(*def, identity(def->operand(0)->type().rank())).empty())
        break;
      views.push_back(def);
      base = def->operand(0);
    }
    std::vector<int> graphOrder = identity(base->type().rank());
    for (auto it = views.rbegin(); it != views.rend(); ++it)
      graphOrder = permutedOrder(**it, graphOrder);
    const Op *producer = base->definingOp();
    if (!producer || producer->parentOp() || !producer->def().isPure() || !producer->def().kernel ||
        producer->def().has(kView) || producer->def().has(kInPlace) || producer->numRegions() > 0 ||
        producer->name() == "tuple_get" || !onlyRead(base))
      continue;
    if (graphOrder == layout.order) continue; // the graph already gives eager's layout
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

OutputLayouts deriveOutputLayouts(const Graph &g, const std::vector<PyRef> &inputs,
                                  const ExternalCallables &externals, bool symbolic) {
  OutputLayouts r;
  std::vector<bool> unknown;
  std::string eagerRaises;
  std::vector<PyRef> outs = runMeta(g, inputs, externals, unknown, eagerRaises);
  if (!eagerRaises.empty()) {
    r.derived = false;
    r.reason = "eager raises at " + eagerRaises;
    return r;
  }
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
    if (info.get() == Py_None) {
      r.outputs.push_back(l);
      continue;
    }
    std::vector<int64_t> sizes = intsOf(PyTuple_GET_ITEM(info.get(), 0));
    std::vector<int64_t> strides = intsOf(PyTuple_GET_ITEM(info.get(), 1));
    const long long offset = PyLong_AsLongLong(PyTuple_GET_ITEM(info.get(), 2));
    if (offset == -1 && PyErr_Occurred()) throw PyErrorSet();
    l.order = denseOrder(sizes, strides);
    if (!l.order.empty() && offset == 0) {
      l.kind = OutputLayout::Dense;
    } else if (!symbolic) {
      l.kind = OutputLayout::Exact;
      l.strides = std::move(strides);
      l.offset = offset;
    } else {
      // A strided view of a computed tensor with symbolic sizes: its strides are expressions
      // of the sizes this walk does not keep. Returned as the graph makes it.
      l.order.clear();
    }
    r.outputs.push_back(std::move(l));
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
  std::vector<int64_t> want =
      layout.kind == OutputLayout::Dense ? denseStrides(sizes, layout.order) : layout.strides;
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
