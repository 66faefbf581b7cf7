#include "output_layout.h"

#include "py_util.h"
#include "tensor_bridge.h"

#include <algorithm>
#include <numeric>

namespace xjit::frontend {

namespace {

/// xjit._eager's layout helpers (imported once; kept for the life of the process).
struct LayoutModule {
  PyObject *layoutOf = nullptr;
  PyObject *relayout = nullptr;
};

const LayoutModule &layoutModule() {
  static LayoutModule m = [] {
    LayoutModule r;
    PyRef mod = checked(PyImport_ImportModule("xjit._eager"));
    r.layoutOf = checked(PyObject_GetAttrString(mod.get(), "layout_of")).release();
    r.relayout = checked(PyObject_GetAttrString(mod.get(), "relayout")).release();
    return r;
  }();
  return m;
}

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

/// The dim order whose dense strides are exactly `strides`; empty when there is none. Dims of
/// equal stride (size-1 dims) are tried in both tie orders, as PyTorch places them either way.
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

} // namespace

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
    PyRef info = checked(PyObject_CallOneArg(layoutModule().layoutOf, outs[i].get()));
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
    return checked(PyObject_CallMethodOneArg(copy.get(), permuteName, intList(inverse).get()));
  }
  std::vector<int64_t> want = layout.strides;
  PyRef offset = checked(PyLong_FromLongLong(layout.offset));
  return checked(PyObject_CallFunctionObjArgs(layoutModule().relayout, value.get(),
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
