// Python operators over abstract values: arithmetic, comparisons, identity and membership,
// subscripts and f-string formatting. Tensors go to analyzer_tensor.cpp; symbolic sizes are
// computed both as dim expressions and as IR scalars; known Python values are folded by calling
// the real operator.
#include "analyzer.h"
#include "events.h"

#include <cmath>

namespace xjit::frontend {

using namespace bc;

namespace {

using PyBinary = PyObject *(*)(PyObject *, PyObject *);

PyBinary pyBinary(int nb) {
  static const PyBinary ops[NB_NUM_OPS] = {PyNumber_Add,
                                           PyNumber_And,
                                           PyNumber_FloorDivide,
                                           PyNumber_Lshift,
                                           PyNumber_MatrixMultiply,
                                           PyNumber_Multiply,
                                           PyNumber_Remainder,
                                           PyNumber_Or,
                                           nullptr,
                                           PyNumber_Rshift,
                                           PyNumber_Subtract,
                                           PyNumber_TrueDivide,
                                           PyNumber_Xor,
                                           PyNumber_InPlaceAdd,
                                           PyNumber_InPlaceAnd,
                                           PyNumber_InPlaceFloorDivide,
                                           PyNumber_InPlaceLshift,
                                           PyNumber_InPlaceMatrixMultiply,
                                           PyNumber_InPlaceMultiply,
                                           PyNumber_InPlaceRemainder,
                                           PyNumber_InPlaceOr,
                                           nullptr,
                                           PyNumber_InPlaceRshift,
                                           PyNumber_InPlaceSubtract,
                                           PyNumber_InPlaceTrueDivide,
                                           PyNumber_InPlaceXor};
  return nb >= 0 && nb < NB_NUM_OPS ? ops[nb] : nullptr;
}

/// isinstance(o, torch.nn.ModuleList).
bool isModuleList(PyObject *o) {
  static PyObject *cls = [] {
    PyObject *nn = PyObject_GetAttrString(torchModule(), "nn");
    PyObject *c = nn ? PyObject_GetAttrString(nn, "ModuleList") : nullptr;
    Py_XDECREF(nn);
    PyErr_Clear();
    return c; // kept for the life of the process
  }();
  int r = cls ? PyObject_IsInstance(o, cls) : 0;
  if (r < 0) PyErr_Clear();
  return r == 1;
}

bool foldable(PyObject *o) {
  return o == Py_None || PyBool_Check(o) || PyLong_Check(o) || PyFloat_Check(o) ||
         PyComplex_Check(o) || PyUnicode_Check(o) || PyBytes_Check(o) || PyTuple_Check(o) ||
         PyList_Check(o) || PyFrozenSet_Check(o) || PySlice_Check(o) || PyType_Check(o) ||
         dtypeFromTorch(o) || o == Py_Ellipsis;
}

int64_t normIndex(Analyzer &a, int64_t i, size_t n, const char *what) {
  int64_t sn = static_cast<int64_t>(n);
  if (i < 0) i += sn;
  if (i < 0 || i >= sn) a.fail(std::string(what) + " index out of range");
  return i;
}

// Slice bounds on a Python sequence of length n (PySlice_AdjustIndices semantics).
std::vector<size_t> sliceIndices(Analyzer &a, const SliceVar &s, size_t n) {
  auto get = [&](const VarPtr &v) -> PyRef {
    PyRef o = a.asPython(v);
    if (!o) a.fail("slice bound known only at run time");
    return o;
  };
  PyRef sl = check(PySlice_New(get(s.start).get(), get(s.stop).get(), get(s.step).get()), "slice");
  Py_ssize_t start, stop, step;
  if (PySlice_Unpack(sl.get(), &start, &stop, &step) < 0) throwPyError("slice");
  Py_ssize_t len = PySlice_AdjustIndices(static_cast<Py_ssize_t>(n), &start, &stop, step);
  std::vector<size_t> out;
  for (Py_ssize_t i = 0, j = start; i < len; ++i, j += step)
    out.push_back(static_cast<size_t>(j));
  return out;
}

} // namespace

// ---------------------------------------------------------------------------------------------
// Arithmetic

/// True if v is a symbolic size or a tuple/list holding one (at any depth).
static bool holdsSymbolicSize(const VarPtr &v) {
  if (auto *s = as<SymIntVar>(v)) return !s->expr.isStatic();
  const std::vector<VarPtr> *items = nullptr;
  if (auto *t = as<TupleVar>(v)) items = &t->items;
  if (auto *l = as<ListVar>(v)) items = &l->items();
  if (items)
    for (const VarPtr &i : *items)
      if (holdsSymbolicSize(i)) return true;
  return false;
}

VarPtr Analyzer::floatBinary(int base, const VarPtr &a, const VarPtr &b) {
  // The value at this call, as Python computes it; an int operand must be exactly an int.
  auto hint = [&](const VarPtr &v) -> std::optional<double> {
    if (auto *s = as<SymFloatVar>(v)) return s->hint;
    auto *o = as<ObjectVar>(v);
    if (o && PyFloat_CheckExact(o->obj.get())) return PyFloat_AS_DOUBLE(o->obj.get());
    if (o && PyLong_CheckExact(o->obj.get())) {
      double d = PyLong_AsDouble(o->obj.get());
      if (d == -1.0 && PyErr_Occurred())
        PyErr_Clear();
      else
        return d;
    }
    return std::nullopt;
  };
  const VarPtr &sym = a->kind == VarKind::SymFloat ? a : b;
  std::optional<double> x = hint(a), y = hint(b);
  static const std::pair<int, const char *> irOps[] = {
      {NB_ADD, "add"}, {NB_SUBTRACT, "sub"}, {NB_MULTIPLY, "mul"}, {NB_TRUE_DIVIDE, "div"}};
  const char *irOp = nullptr;
  for (auto &[k, v] : irOps)
    if (k == base) irOp = v;
  // Float arithmetic in the IR is IEEE double arithmetic, as Python's. A division by a float
  // input is not (Python raises on 0.0, the graph would not): it is guarded by value.
  if (!x || !y || !irOp || (base == NB_TRUE_DIVIDE && (b->kind == VarKind::SymFloat || *y == 0)))
    specializeFloat(sym);
  const double r = base == NB_ADD        ? *x + *y
                   : base == NB_SUBTRACT ? *x - *y
                   : base == NB_MULTIPLY ? *x * *y
                                         : *x / *y;
  std::vector<std::string> inputs;
  for (const VarPtr &v : {a, b})
    if (auto *s = as<SymFloatVar>(v))
      inputs.insert(inputs.end(), s->inputs.begin(), s->inputs.end());
  Value *v = builder_.op(irOp, {irValue(a), irValue(b)});
  return std::make_shared<SymFloatVar>(r, v, std::move(inputs));
}

VarPtr Analyzer::binaryOp(int nb, const VarPtr &a, const VarPtr &b) {
  if (a->kind == VarKind::Tensor || b->kind == VarKind::Tensor)
    return tensorBinary(nb, a, b, a->kind != VarKind::Tensor);
  const int base = nb >= NB_INPLACE_ADD ? nb - NB_INPLACE_ADD : nb;
  const bool inplace = nb >= NB_INPLACE_ADD;
  if (a->kind == VarKind::SymFloat || b->kind == VarKind::SymFloat) return floatBinary(base, a, b);

  // Symbolic sizes: shape arithmetic stays symbolic where the dim algebra can express it.
  if (a->kind == VarKind::SymInt || b->kind == VarKind::SymInt) {
    auto dimOf = [&](const VarPtr &v) -> std::optional<DimExpr> {
      if (auto *s = as<SymIntVar>(v)) return s->expr;
      if (auto *o = as<ObjectVar>(v);
          o && PyLong_Check(o->obj.get()) && !PyBool_Check(o->obj.get()))
        return DimExpr(PyLong_AsLongLong(o->obj.get()));
      return std::nullopt;
    };
    std::optional<DimExpr> x = dimOf(a), y = dimOf(b);
    static const std::pair<int, const char *> irOps[] = {{NB_ADD, "add"},
                                                         {NB_SUBTRACT, "sub"},
                                                         {NB_MULTIPLY, "mul"},
                                                         {NB_FLOOR_DIVIDE, "floor_divide"},
                                                         {NB_REMAINDER, "remainder"}};
    const char *irOp = nullptr;
    for (auto &[k, v] : irOps)
      if (k == base) irOp = v;
    if (x && y && irOp) {
      if ((base == NB_FLOOR_DIVIDE || base == NB_REMAINDER) && y->isStatic() && y->value() == 0)
        fail("integer division by zero");
      DimExpr r = base == NB_ADD            ? *x + *y
                  : base == NB_SUBTRACT     ? *x - *y
                  : base == NB_MULTIPLY     ? *x * *y
                  : base == NB_FLOOR_DIVIDE ? x->floorDiv(*y)
                                            : x->mod(*y);
      if (r.isStatic()) return integer(r.value());
      Value *v = builder_.op(irOp, {irValue(a), irValue(b)});
      return std::make_shared<SymIntVar>(r, hintOf(r), v);
    }
    // Anything else (true division, float operands...) specializes the symbolic operand.
    if (auto *s = as<SymIntVar>(a)) specialize(s->expr);
    if (auto *s = as<SymIntVar>(b)) specialize(s->expr);
  }

  // Python containers.
  if (auto *l = as<ListVar>(a)) {
    if (base == NB_ADD && b->kind == VarKind::List) {
      const auto &bi = as<ListVar>(b)->items();
      if (inplace) {
        if (l->source) fail("+= on a list the caller can see");
        l->items().insert(l->items().end(), bi.begin(), bi.end());
        return a;
      }
      std::vector<VarPtr> items = l->items();
      items.insert(items.end(), bi.begin(), bi.end());
      return std::make_shared<ListVar>(std::move(items));
    }
    if (base == NB_ADD && inplace) {
      if (l->source) fail("+= on a list the caller can see");
      for (VarPtr &v : iterate(b))
        l->append(v);
      return a;
    }
    if (base == NB_MULTIPLY) {
      std::optional<int64_t> n = asInt(b);
      if (!n) fail("list * non-int");
      std::vector<VarPtr> items;
      for (int64_t i = 0; i < *n; ++i)
        items.insert(items.end(), l->items().begin(), l->items().end());
      if (inplace) {
        if (l->source) fail("*= on a list the caller can see");
        l->items() = std::move(items);
        return a;
      }
      return std::make_shared<ListVar>(std::move(items));
    }
  }
  if (a->kind == VarKind::Tuple || b->kind == VarKind::Tuple) {
    // Tuples holding symbolic sizes (a torch.Size) concatenate item by item: asPython would
    // specialize the sizes (GPT-2's `(-1,) + input_shape[1:] + (hidden,)`).
    bool symbolic = holdsSymbolicSize(a) || holdsSymbolicSize(b);
    PyRef pa = symbolic ? PyRef() : asPython(a), pb = symbolic ? PyRef() : asPython(b);
    if (!(pa && pb)) {
      if (base == NB_ADD) {
        std::vector<VarPtr> items = sequenceItems(a, "tuple +");
        for (VarPtr &v : sequenceItems(b, "tuple +"))
          items.push_back(v);
        PyRef st = as<TupleVar>(a) ? as<TupleVar>(a)->structType : PyRef();
        // torch.Size + tuple stays a torch.Size.
        return std::make_shared<TupleVar>(std::move(items), st);
      }
      if (base == NB_MULTIPLY) {
        const VarPtr &seq = a->kind == VarKind::Tuple ? a : b;
        std::optional<int64_t> n = asInt(a->kind == VarKind::Tuple ? b : a);
        if (!n) fail("tuple * non-int");
        std::vector<VarPtr> items, base1 = sequenceItems(seq, "tuple *");
        for (int64_t i = 0; i < *n; ++i)
          items.insert(items.end(), base1.begin(), base1.end());
        return std::make_shared<TupleVar>(std::move(items));
      }
    }
  }

  // Known Python values.
  PyRef pa = asPython(a), pb = asPython(b);
  auto known = [&](PyObject *o) { return foldable(o) || isFrameSet(o); };
  if (pa && pb && known(pa.get()) && known(pb.get())) {
    PyObject *r;
    if (base == NB_POWER)
      r = inplace ? PyNumber_InPlacePower(pa.get(), pb.get(), Py_None)
                  : PyNumber_Power(pa.get(), pb.get(), Py_None);
    else
      r = pyBinary(nb)(pa.get(), pb.get());
    if (!r) fail(std::string("'") + binaryOpName(nb) + "' raises " + takePyErrorType());
    if (PySet_CheckExact(r)) return frameSet(PyRef::steal(r)); // s | t, or s itself for s |= t
    return constantSteal(r);
  }
  fail(std::string("operator ") + binaryOpName(nb) + " on " + typeName(a) + " and " + typeName(b));
}

// `a == b` of two dataclass instances: the __eq__ that @dataclass generates compares the fields
// with compare=True as tuples (identity first, then ==) when both have the same class; with
// eq=False it is identity. A hand-written __eq__ is not run: the comparison is a graph break.
bool Analyzer::dataclassEquals(const VarPtr &a, const VarPtr &b) {
  auto *da = as<DataclassVar>(a), *db = as<DataclassVar>(b);
  if (isSame(a, b)) return true;
  PyObject *cls = da->cls.get();
  PyRef params = PyRef::steal(PyObject_GetAttrString(cls, "__dataclass_params__"));
  PyRef eqFlag = params ? PyRef::steal(PyObject_GetAttrString(params.get(), "eq")) : PyRef();
  if (!eqFlag) {
    PyErr_Clear();
    fail("== of a dataclass-like object");
  }
  if (eqFlag.get() != Py_True) return false; // eq=False: identity, and they differ
  if (da->mapping || db->mapping) fail("== of mapping dataclasses");
  PyRef eqName = check(PyUnicode_FromString("__eq__"), "str");
  PyObject *eq = _PyType_Lookup(reinterpret_cast<PyTypeObject *>(cls), eqName.get());
  auto *code = eq && PyFunction_Check(eq)
                   ? reinterpret_cast<PyCodeObject *>(PyFunction_GET_CODE(eq))
                   : nullptr;
  // @dataclass makes its methods with exec: their file is "<string>".
  if (!code || !PyUnicode_Check(code->co_filename) ||
      PyUnicode_CompareWithASCIIString(code->co_filename, "<string>") != 0)
    fail("== of a dataclass with a hand-written __eq__");
  if (db->cls.get() != cls) return false; // NotImplemented both ways: identity
  PyRef dcModule = check(PyImport_ImportModule("dataclasses"), "import dataclasses");
  PyRef fields = check(PyObject_CallMethod(dcModule.get(), "fields", "O", cls), "fields()");
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(fields.get()); ++i) {
    PyObject *f = PyTuple_GET_ITEM(fields.get(), i);
    PyRef compare = check(PyObject_GetAttrString(f, "compare"), "field.compare");
    if (compare.get() != Py_True) continue;
    PyRef name = check(PyObject_GetAttrString(f, "name"), "field.name");
    const char *n = PyUnicode_AsUTF8(name.get());
    VarPtr *x = da->find(n), *y = db->find(n);
    if (!x || !y) fail(std::string("== of dataclasses: field ") + n + " unknown");
    if (!isSame(*x, *y) && !truthy(compareOp(2, *x, *y))) return false;
  }
  return true;
}

/// A plain shape symbol (one input dim's size), or a product of them, compared with an int
/// below 2: decided without specializing, since a symbolic size is at least 2 (sizes 0 and 1 stay
/// static at capture, and the tensor guards check it on every call). `seq == 1` in Hugging Face's
/// mask code is False. cmp: 0 <, 1 <=, 2 ==, 3 !=, 4 >, 5 >=.
static std::optional<bool> compareWithSmallInt(int cmp, const VarPtr &a, const VarPtr &b) {
  // A product of symbols with a positive coefficient (s0, s0*s1*32: numel() of a tensor with
  // symbolic dims) is at least 2: its canonical text has no sum, difference or division.
  auto plainSymbol = [](const VarPtr &v) {
    auto *s = as<SymIntVar>(v);
    if (!s || s->expr.isStatic()) return false;
    return s->expr.str().find_first_of("+-/%()") == std::string::npos;
  };
  auto smallInt = [](const VarPtr &v) -> std::optional<int64_t> {
    auto *o = as<ObjectVar>(v);
    if (!o || !PyLong_Check(o->obj.get()) || PyBool_Check(o->obj.get())) return std::nullopt;
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(o->obj.get(), &overflow);
    if (overflow || x >= 2) return std::nullopt;
    return x;
  };
  std::optional<int64_t> c;
  if (plainSymbol(a)) {
    c = smallInt(b);
  } else if (plainSymbol(b)) {
    c = smallInt(a);
    if (c) cmp = cmp == 0 ? 4 : cmp == 1 ? 5 : cmp == 4 ? 0 : cmp == 5 ? 1 : cmp; // c op s
  }
  if (!c) return std::nullopt;
  switch (cmp) { // symbol (>= 2 > c) op c
  case 0:
  case 1:
  case 2: return false;
  case 3:
  case 4:
  case 5: return true;
  default: return std::nullopt;
  }
}

std::optional<bool> Analyzer::guardedComparison(int cmp, const VarPtr &a, const VarPtr &b) {
  auto dimOf = [](const VarPtr &v) -> std::optional<DimExpr> {
    if (auto *s = as<SymIntVar>(v)) return s->expr;
    if (auto *o = as<ObjectVar>(v); o && PyLong_CheckExact(o->obj.get())) {
      int overflow = 0;
      long long x = PyLong_AsLongLongAndOverflow(o->obj.get(), &overflow);
      if (overflow) {
        PyErr_Clear();
        return std::nullopt;
      }
      return DimExpr(x);
    }
    return std::nullopt;
  };
  std::optional<DimExpr> x = dimOf(a), y = dimOf(b);
  if (!x || !y || cmp < 0 || cmp > 5) return std::nullopt;
  const int64_t hx = hintOf(*x), hy = hintOf(*y);
  const bool r = cmp == 0   ? hx < hy
                 : cmp == 1 ? hx <= hy
                 : cmp == 2 ? hx == hy
                 : cmp == 3 ? hx != hy
                 : cmp == 4 ? hx > hy
                            : hx >= hy;
  const std::string what = "Python comparison";
  const DimExpr one(1);
  switch (cmp) {
  case 0: r ? assumeAtMost(*x + one, *y, what) : assumeAtMost(*y, *x, what); break; // x < y
  case 1: r ? assumeAtMost(*x, *y, what) : assumeAtMost(*y + one, *x, what); break; // x <= y
  case 4: r ? assumeAtMost(*y + one, *x, what) : assumeAtMost(*x, *y, what); break; // x > y
  case 5: r ? assumeAtMost(*y, *x, what) : assumeAtMost(*x + one, *y, what); break; // x >= y
  default:
    // x == y that holds, or x != y that does not: two inequalities. The other outcomes (not
    // equal) are no single relation: the symbol is specialized.
    if (r != (cmp == 2)) return std::nullopt;
    assumeEqual(*x, *y, what);
  }
  return r;
}

std::optional<bool> Analyzer::guardedFloatComparison(int cmp, const VarPtr &a, const VarPtr &b) {
  const bool swapped = a->kind != VarKind::SymFloat;
  auto *s = as<SymFloatVar>(swapped ? b : a);
  auto *o = as<ObjectVar>(swapped ? a : b);
  if (cmp < 0 || cmp > 5 || !s || !s->input || std::isnan(s->hint) || !o ||
      !(PyFloat_CheckExact(o->obj.get()) || PyLong_CheckExact(o->obj.get())))
    return std::nullopt;
  static const int mirrored[] = {Py_GT, Py_GE, Py_EQ, Py_NE, Py_LT, Py_LE}; // b op a
  static const int negated[] = {Py_GE, Py_GT, Py_NE, Py_EQ, Py_LE, Py_LT};  // not (a op b)
  static const char *const names[] = {"<", "<=", "==", "!=", ">", ">="};
  const int op = swapped ? mirrored[cmp] : cmp; // s op number
  PyRef hint = check(PyFloat_FromDouble(s->hint), "float");
  const int r = PyObject_RichCompareBool(hint.get(), o->obj.get(), op);
  if (r < 0) {
    PyErr_Clear();
    return std::nullopt;
  }
  // What held at this call (not NaN: the negation of `s > c` is then `s <= c`).
  Guard g;
  g.kind = Guard::FloatCompare;
  g.source = *s->input;
  g.object = o->obj;
  g.length = r ? op : negated[op];
  g.description = sourceKey(*s->input) + " " + names[g.length] + " " + describe(swapped ? a : b) +
                  " (at " + shortLoc(currentLoc()) + ")";
  addGuard(std::move(g));
  return r != 0;
}

VarPtr Analyzer::compareOp(int cmp, const VarPtr &a, const VarPtr &b) {
  if (a->kind == VarKind::Tensor || b->kind == VarKind::Tensor) return tensorCompare(cmp, a, b);
  // Python control flow on a float input: the branch taken is guarded (FloatCompare) where a
  // float input meets a number, else the float is guarded by value.
  if (a->kind == VarKind::SymFloat || b->kind == VarKind::SymFloat) {
    if (std::optional<bool> r = guardedFloatComparison(cmp, a, b)) return boolean(*r);
    specializeFloat(a->kind == VarKind::SymFloat ? a : b);
  }
  if (a->kind == VarKind::SymInt || b->kind == VarKind::SymInt) {
    auto *sa = as<SymIntVar>(a);
    auto *sb = as<SymIntVar>(b);
    if (sa && sb && (cmp == 2 || cmp == 3) && sa->expr == sb->expr) return boolean(cmp == 2);
    if (sa && sb) { // sizes whose difference is static compare without a guard: kv_len > q_len
      DimExpr diff = sa->expr - sb->expr;
      if (diff.isStatic()) {
        int64_t d = diff.value();
        const bool results[] = {d < 0, d <= 0, d == 0, d != 0, d > 0, d >= 0};
        if (cmp >= 0 && cmp < 6) return boolean(results[cmp]);
      }
    }
    if (std::optional<bool> known = compareWithSmallInt(cmp, a, b)) return boolean(*known);
    if (std::optional<bool> guarded = guardedComparison(cmp, a, b)) return boolean(*guarded);
    if (sa && !sa->expr.isStatic()) specialize(sa->expr);
    if (sb && !sb->expr.isStatic()) specialize(sb->expr);
  }
  // Sequences of abstract values compare item by item (e.g. x.shape == y.shape; a torch.Size
  // equals a tuple of the same ints, a list never equals a tuple).
  auto tupleLike = [](const VarPtr &v) {
    auto *o = as<ObjectVar>(v);
    return v->kind == VarKind::Tuple || (o && PyTuple_Check(o->obj.get()));
  };
  auto listLike = [](const VarPtr &v) {
    auto *o = as<ObjectVar>(v);
    return v->kind == VarKind::List || (o && PyList_Check(o->obj.get()));
  };
  bool seqA = a->kind == VarKind::Tuple || a->kind == VarKind::List;
  bool seqB = b->kind == VarKind::Tuple || b->kind == VarKind::List;
  if ((seqA || seqB) && (cmp == 2 || cmp == 3)) {
    PyRef pa = asPython(a), pb = asPython(b);
    if (!(pa && pb)) {
      bool equal = false;
      if ((tupleLike(a) && tupleLike(b)) || (listLike(a) && listLike(b))) {
        std::vector<VarPtr> x = sequenceItems(a, "=="), y = sequenceItems(b, "==");
        equal = x.size() == y.size();
        for (size_t i = 0; equal && i < x.size(); ++i)
          equal = truthy(compareOp(2, x[i], y[i]));
      }
      return boolean(cmp == 2 ? equal : !equal);
    }
  }
  // Instances made in the frame: a Python __eq__/__ne__ is inlined, object's compares identity.
  if ((cmp == 2 || cmp == 3) && (a->kind == VarKind::Instance || b->kind == VarKind::Instance)) {
    const VarPtr &inst = a->kind == VarKind::Instance ? a : b;
    const VarPtr &other = a->kind == VarKind::Instance ? b : a;
    const char *dunder = cmp == 2 ? "__eq__" : "__ne__";
    if (VarPtr r = callDunder(inst, dunder, {other})) {
      auto *o = as<ObjectVar>(r);
      if (!(o && o->obj.get() == Py_NotImplemented)) return r;
    }
    PyObject *cls = as<InstanceVar>(inst)->cls.get();
    PyRef n = check(PyUnicode_FromString(dunder), "str");
    if (_PyType_Lookup(reinterpret_cast<PyTypeObject *>(cls), n.get()) !=
        PyDict_GetItemString(PyBaseObject_Type.tp_dict, dunder))
      fail(std::string("comparison ") + dunder + " of a " + typeName(inst));
    bool same = isSame(a, b);
    return boolean(cmp == 2 ? same : !same);
  }
  if ((cmp == 2 || cmp == 3) && a->kind == VarKind::Dataclass && b->kind == VarKind::Dataclass) {
    bool equal = dataclassEquals(a, b);
    return boolean(cmp == 2 ? equal : !equal);
  }
  if ((cmp == 2 || cmp == 3) && (a->kind != VarKind::Object || b->kind != VarKind::Object)) {
    PyRef pa = asPython(a), pb = asPython(b);
    if (!(pa && pb)) {
      // Objects without value semantics compare by identity.
      bool same = isSame(a, b);
      return boolean(cmp == 2 ? same : !same);
    }
  }
  PyRef pa = asPython(a), pb = asPython(b);
  if (!pa || !pb)
    fail(std::string("comparison ") + compareOpName(cmp) + " of " + typeName(a) + " and " +
         typeName(b));
  static const int pyOps[] = {Py_LT, Py_LE, Py_EQ, Py_NE, Py_GT, Py_GE};
  if (cmp < 0 || cmp > 5) fail("internal: bad comparison");
  PyObject *r = PyObject_RichCompare(pa.get(), pb.get(), pyOps[cmp]);
  if (!r) {
    PyErr_Clear();
    fail(std::string("comparison ") + compareOpName(cmp) + " of " + typeName(a) + " and " +
         typeName(b) + " raises");
  }
  if (!PyBool_Check(r) && !foldable(r)) {
    Py_DECREF(r);
    fail("comparison with a non-bool result");
  }
  return constantSteal(r);
}

VarPtr Analyzer::unaryOp(int opcode, const VarPtr &a) {
  if (opcode == UNARY_NOT) return boolean(!truthy(a));
  if (a->kind == VarKind::Tensor) {
    switch (opcode) {
    case UNARY_NEGATIVE: return emit1("neg", {a});
    case UNARY_POSITIVE: return a;
    case UNARY_INVERT: return emit1("bitwise_not", {a});
    default: break;
    }
  }
  if (auto *s = as<SymIntVar>(a)) {
    if (opcode == UNARY_NEGATIVE) {
      DimExpr r = -s->expr;
      // 0 - s: the IR's neg takes tensors only (integer arithmetic on sizes is add/sub/...).
      Value *v = builder_.op("sub", {irValue(integer(0)), irValue(a)});
      return std::make_shared<SymIntVar>(r, -s->hint, v);
    }
    if (opcode == UNARY_POSITIVE) return a;
    specialize(s->expr);
  }
  if (auto *s = as<SymFloatVar>(a)) {
    // -s is s * -1.0 exactly (IEEE negation, -0.0 included); the IR's neg takes tensors only.
    if (opcode == UNARY_NEGATIVE)
      return std::make_shared<SymFloatVar>(
          -s->hint, builder_.op("mul", {s->value, builder_.constantFloat(-1.0)}), s->inputs);
    if (opcode == UNARY_POSITIVE) return a;
    specializeFloat(a);
  }
  PyRef p = asPython(a);
  if (!p || !foldable(p.get())) fail("unary operator on a " + typeName(a));
  PyObject *r = opcode == UNARY_NEGATIVE   ? PyNumber_Negative(p.get())
                : opcode == UNARY_POSITIVE ? PyNumber_Positive(p.get())
                : opcode == UNARY_INVERT   ? PyNumber_Invert(p.get())
                                           : PyNumber_Absolute(p.get());
  if (!r) {
    PyErr_Clear();
    fail("unary operator raises on " + describe(a));
  }
  return constantSteal(r);
}

bool Analyzer::isSame(const VarPtr &a, const VarPtr &b) {
  if (a == b) return true;
  auto objOf = [](const VarPtr &v) -> PyObject * {
    if (auto *o = as<ObjectVar>(v)) return o->obj.get();
    if (auto *m = as<ModuleVar>(v)) return m->obj.get();
    return nullptr;
  };
  PyObject *x = objOf(a), *y = objOf(b);
  if (x && y) {
    refuseIfShared(a, "`is`");
    refuseIfShared(b, "`is`");
    return x == y;
  }
  if (auto *t = as<TupleVar>(a);
      t && t->items.empty() && y && PyTuple_Check(y) && PyTuple_GET_SIZE(y) == 0)
    return true; // the empty tuple is a singleton
  return false;
}

bool Analyzer::contains(const VarPtr &container, const VarPtr &item) {
  switch (container->kind) {
  case VarKind::Instance: {
    if (VarPtr r = callDunder(container, "__contains__", {item})) return truthy(r);
    bool found = false;
    for (const VarPtr &v : sequenceItems(container, "in"))
      found = found || isSame(v, item) || truthy(compareOp(2, v, item));
    return found;
  }
  case VarKind::Dataclass: {
    PyRef k = asPython(item);
    if (!as<DataclassVar>(container)->mapping || !k || !PyUnicode_Check(k.get()))
      fail("'in' on a " + typeName(container));
    for (auto &[name, v] : dataclassItems(container))
      if (name == PyUnicode_AsUTF8(k.get())) return true;
    return false;
  }
  case VarKind::Dict: {
    PyRef k = asPython(item);
    if (!k) fail("dict lookup with a key known only at run time");
    for (auto &[key, v] : as<DictVar>(container)->items) {
      int r = PyObject_RichCompareBool(key.get(), k.get(), Py_EQ);
      if (r < 0) PyErr_Clear();
      if (r == 1) return true;
    }
    return false;
  }
  case VarKind::Tuple:
  case VarKind::List: {
    for (const VarPtr &v : sequenceItems(container, "in")) {
      if (isSame(v, item)) return true;
      if (truthy(compareOp(2, v, item))) return true;
    }
    return false;
  }
  case VarKind::Module:
  case VarKind::Object: {
    if (container->kind == VarKind::Object)
      if (VarPtr r = callDunder(container, "__contains__", {item})) return truthy(r);
    refuseIfShared(container, "`in` (only its length is guarded)");
    PyObject *c = container->kind == VarKind::Module ? as<ModuleVar>(container)->obj.get()
                                                     : as<ObjectVar>(container)->obj.get();
    PyRef k = asPython(item);
    if (!k) fail("'in' with a value known only at run time");
    // A set's items are read only where known: made by the frame, guarded by value, or an
    // immutable frozenset constant.
    bool knownSet =
        PyAnySet_Check(c) && (setItemsKnown(c) || (PyFrozenSet_Check(c) && !container->source));
    bool pure = container->kind == VarKind::Module || (foldable(c) && !PyAnySet_Check(c)) ||
                PyDictKeys_Check(c) || knownSet || PyRange_Check(c);
    if (!pure) fail(std::string("'in' on a ") + Py_TYPE(c)->tp_name);
    int r = PySequence_Contains(c, k.get());
    if (r < 0) {
      PyErr_Clear();
      fail("'in' raises");
    }
    if (container->source && container->kind == VarKind::Module) {
      // `name in self.layers` (ModuleDict): the answer depends on the keys.
      guardLen(*container->source, PyObject_Size(c));
    }
    return r == 1;
  }
  default: fail(std::string("'in' on a ") + typeName(container));
  }
}

// ---------------------------------------------------------------------------------------------
// Subscripts

VarPtr Analyzer::getItem(const VarPtr &obj, const VarPtr &key) {
  if (obj->kind == VarKind::Tensor) return tensorGetItem(obj, key);
  if (obj->kind == VarKind::Dataclass) return dataclassGetItem(obj, key);
  if (obj->kind == VarKind::Instance) {
    if (VarPtr r = callDunder(obj, "__getitem__", {key})) return r;
    fail("subscript of a " + typeName(obj));
  }
  if (obj->kind == VarKind::Tuple || obj->kind == VarKind::List) {
    const std::vector<VarPtr> &items =
        obj->kind == VarKind::Tuple ? as<TupleVar>(obj)->items : as<ListVar>(obj)->items();
    if (auto *s = as<SliceVar>(key)) {
      std::vector<VarPtr> out;
      for (size_t i : sliceIndices(*this, *s, items.size()))
        out.push_back(items[i]);
      if (obj->kind == VarKind::List) return std::make_shared<ListVar>(std::move(out));
      return std::make_shared<TupleVar>(std::move(out), as<TupleVar>(obj)->structType);
    }
    std::optional<int64_t> i = asInt(key);
    if (!i) fail("sequence index of type " + typeName(key));
    return items[static_cast<size_t>(normIndex(*this, *i, items.size(), typeName(obj).c_str()))];
  }
  if (auto *d = as<DictVar>(obj)) {
    PyRef k = asPython(key);
    if (!k) fail("dict lookup with a key known only at run time");
    for (auto &[kk, v] : d->items) {
      int r = PyObject_RichCompareBool(kk.get(), k.get(), Py_EQ);
      if (r < 0) PyErr_Clear();
      if (r == 1) return v;
    }
    fail("KeyError: " + describe(key));
  }
  if (auto *m = as<ModuleVar>(obj)) {
    PyRef k = asPython(key);
    if (!k) fail("module subscript known only at run time");
    PyObject *item = PyObject_GetItem(m->obj.get(), k.get());
    if (!item) {
      PyErr_Clear();
      fail("module subscript raises");
    }
    PyRef hold = PyRef::steal(item);
    if (!m->source) fail("subscript of a module the frame cannot reach");
    if (PyLong_Check(k.get())) {
      Py_ssize_t n = PyObject_Size(m->obj.get());
      int64_t i = normIndex(*this, PyLong_AsLongLong(k.get()), static_cast<size_t>(n), "module");
      guardLen(*m->source, n);
      Source s = *m->source;
      s.push_back(SourceStep{SourceStep::Item, i, "", {}});
      return wrapSourced(item, s);
    }
    if (PyUnicode_Check(k.get())) {
      Source s = *m->source;
      s.push_back(SourceStep{SourceStep::DictKey, 0, "", k});
      return wrapSourced(item, s);
    }
    if (PySlice_Check(k.get()) && isModuleList(hold.get())) {
      // `self.layers[:n]` (HF decoders): a list of the selected layers, each reached through
      // its index in the original ModuleList, whose length is guarded.
      Py_ssize_t n = PyObject_Size(m->obj.get()), start = 0, stop = 0, step = 1;
      if (n < 0 || PySlice_Unpack(k.get(), &start, &stop, &step) < 0) {
        PyErr_Clear();
        fail("module subscript with a slice that raises");
      }
      Py_ssize_t count = PySlice_AdjustIndices(n, &start, &stop, step);
      guardLen(*m->source, n);
      std::vector<VarPtr> items;
      for (Py_ssize_t j = 0, i = start; j < count; ++j, i += step) {
        PyRef layer = PyRef::steal(PySequence_GetItem(m->obj.get(), i));
        if (!layer) {
          PyErr_Clear();
          fail("module subscript with a slice that raises");
        }
        Source s = *m->source;
        s.push_back(SourceStep{SourceStep::Item, static_cast<int64_t>(i), "", {}});
        items.push_back(wrapSourced(layer.get(), s));
      }
      return std::make_shared<ListVar>(std::move(items));
    }
    fail("module subscript with a " + std::string(Py_TYPE(k.get())->tp_name));
  }
  if (auto *o = as<ObjectVar>(obj)) {
    if (VarPtr r = callDunder(obj, "__getitem__", {key})) return r;
    PyRef k = asPython(key);
    if (!k) fail("subscript known only at run time of a " + typeName(obj));
    if (!foldable(o->obj.get()) && !PyRange_Check(o->obj.get()))
      fail(std::string("subscript of a ") + Py_TYPE(o->obj.get())->tp_name);
    PyObject *r = PyObject_GetItem(o->obj.get(), k.get());
    if (!r) {
      PyErr_Clear();
      fail("subscript raises on " + describe(obj));
    }
    return constantSteal(r);
  }
  fail("subscript of a " + typeName(obj));
}

void Analyzer::setItem(const VarPtr &obj, const VarPtr &key, const VarPtr &value) {
  if (obj->kind == VarKind::Tensor) return tensorSetItem(obj, key, value);
  if (auto *l = as<ListVar>(obj)) {
    std::optional<int64_t> i = asInt(key);
    if (!i) fail("list assignment with a " + typeName(key) + " index");
    int64_t idx = normIndex(*this, *i, l->items().size(), "list assignment");
    l->items()[static_cast<size_t>(idx)] = value;
    if (l->source)
      recordEffect(
          {SideEffect::SetItem, *l->source, "", check(PyLong_FromLongLong(idx), "int"), value});
    return;
  }
  if (auto *d = as<DictVar>(obj)) {
    PyRef k = asPython(key);
    if (!k || PyObject_Hash(k.get()) == -1) {
      PyErr_Clear();
      fail("dict key that is not a hashable constant");
    }
    bool replaced = false;
    for (auto &[kk, v] : d->items) {
      int r = PyObject_RichCompareBool(kk.get(), k.get(), Py_EQ);
      if (r < 0) PyErr_Clear();
      if (r == 1) {
        v = value;
        replaced = true;
        break;
      }
    }
    if (!replaced) d->items.emplace_back(k, value);
    if (d->source) recordEffect({SideEffect::SetItem, *d->source, "", k, value});
    return;
  }
  if (obj->kind == VarKind::Dataclass) return dataclassSetItem(obj, key, value);
  if ((obj->kind == VarKind::Object || obj->kind == VarKind::Instance) &&
      callDunder(obj, "__setitem__", {key, value}))
    return;
  fail("item assignment on a " + typeName(obj));
}

void Analyzer::delItem(const VarPtr &obj, const VarPtr &key) {
  if (obj->source) fail("del on a container the caller can see");
  if (auto *l = as<ListVar>(obj)) {
    std::optional<int64_t> i = asInt(key);
    if (!i) fail("del with a non-int index");
    l->items().erase(l->items().begin() + normIndex(*this, *i, l->items().size(), "list deletion"));
    return;
  }
  if (auto *d = as<DictVar>(obj)) {
    PyRef k = asPython(key);
    for (auto it = d->items.begin(); k && it != d->items.end(); ++it)
      if (PyObject_RichCompareBool(it->first.get(), k.get(), Py_EQ) == 1) {
        d->items.erase(it);
        return;
      }
    fail("KeyError in del");
  }
  fail("del on a " + typeName(obj));
}

VarPtr Analyzer::formatValue(const VarPtr &v, int conversion, const VarPtr &spec) {
  PyRef o = asPython(v);
  if (!o) fail("formatting a " + typeName(v) + " (its value is known only at run time)");
  PyRef conv = o;
  if (conversion == 1) conv = check(PyObject_Str(o.get()), "str()");
  if (conversion == 2) conv = check(PyObject_Repr(o.get()), "repr()");
  if (conversion == 3) conv = check(PyObject_ASCII(o.get()), "ascii()");
  PyRef s;
  if (spec) {
    s = asPython(spec);
    if (!s) fail("format spec known only at run time");
  }
  return constantSteal(PyObject_Format(conv.get(), s.get()));
}

} // namespace xjit::frontend
