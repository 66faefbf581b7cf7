// The torch -> IR op table (see torch_ops.h): signature binding, the generic lowering, and the
// lowerings of calls whose meaning depends on their arguments.
#include "torch_ops.h"

#include "output_layout.h"

#include "analyzer.h"
#include "xjit/ir/op_registry.h"
#include "xjit/ir/sym_attr.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <numeric>
#include <sstream>
#include <unordered_map>

namespace xjit::frontend {

namespace {

std::vector<std::string> split(std::string_view s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

std::string trim(std::string s) {
  size_t a = s.find_first_not_of(" \t"), b = s.find_last_not_of(" \t");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

// ---- signatures ----

struct Param {
  std::string name;
  PyRef def; // default (nullptr: required)
  bool kwOnly = false;
  bool varargs = false;
};

PyObject *evalNamespace() {
  static PyObject *ns = [] {
    PyObject *d = PyDict_New();
    PyDict_SetItemString(d, "__builtins__", PyEval_GetBuiltins());
    PyDict_SetItemString(d, "torch", torchModule());
    return d;
  }();
  return ns;
}

std::vector<Param> parseSignature(const char *sig) {
  std::vector<Param> params;
  bool kwOnly = false;
  for (std::string part : split(sig, ',')) {
    part = trim(part);
    if (part.empty()) continue;
    if (part == "*") {
      kwOnly = true;
      continue;
    }
    Param p;
    p.kwOnly = kwOnly;
    if (part[0] == '*') {
      p.varargs = true;
      p.name = part.substr(1);
      kwOnly = true;
      params.push_back(std::move(p));
      continue;
    }
    size_t eq = part.find('=');
    p.name = trim(part.substr(0, eq));
    if (eq != std::string::npos) {
      std::string lit = trim(part.substr(eq + 1));
      PyObject *v = PyRun_String(lit.c_str(), Py_eval_input, evalNamespace(), evalNamespace());
      if (!v) throwPyError(std::string("op table default '") + lit + "' of " + sig);
      p.def = PyRef::steal(v);
    }
    params.push_back(std::move(p));
  }
  return params;
}

struct Mapping {
  std::vector<std::string> operands;
  std::vector<std::pair<std::string, std::string>> attrs; // python name -> IR attribute
};

Mapping parseMapping(const char *m) {
  Mapping out;
  std::vector<std::string> halves = split(m, '|');
  auto words = [](const std::string &s) {
    std::vector<std::string> w;
    std::istringstream is(s);
    std::string x;
    while (is >> x)
      w.push_back(x);
    return w;
  };
  out.operands = words(halves[0]);
  if (halves.size() > 1)
    for (const std::string &w : words(halves[1])) {
      size_t arrow = w.find("->");
      if (arrow == std::string::npos)
        out.attrs.emplace_back(w, w);
      else
        out.attrs.emplace_back(w.substr(0, arrow), w.substr(arrow + 2));
    }
  return out;
}

struct CompiledRow {
  std::vector<Param> params;
  Mapping mapping;
};

const CompiledRow &compiled(const TorchRow &row) {
  static std::unordered_map<const TorchRow *, CompiledRow> cache;
  auto it = cache.find(&row);
  if (it != cache.end()) return it->second;
  CompiledRow c{parseSignature(row.signature), parseMapping(row.mapping)};
  return cache.emplace(&row, std::move(c)).first->second;
}

// Binds like Python; returns false (with `why`) when the call does not fit the signature.
bool bind(Analyzer &a, const std::vector<Param> &params, const Args &args, BoundArgs &out,
          std::string &why) {
  size_t pi = 0;
  for (size_t i = 0; i < args.pos.size(); ++i) {
    while (pi < params.size() && params[pi].kwOnly && !params[pi].varargs)
      ++pi;
    if (pi >= params.size()) {
      why = "too many positional arguments";
      return false;
    }
    if (params[pi].varargs) {
      out.varargs.push_back(args.pos[i]);
      continue;
    }
    out.values[params[pi].name] = args.pos[i];
    ++pi;
  }
  for (auto &[key, v] : args.kw) {
    std::string k = key;
    bool known = false, sequence = false;
    for (const Param &p : params) {
      if (p.name == k && !p.varargs) known = true;
      // torch.zeros(size=(2, 3)): a `*size` parameter given by keyword, as one sequence.
      if (p.name == k && p.varargs && out.varargs.empty()) sequence = true;
    }
    if (sequence) {
      out.varargs.push_back(v);
      continue;
    }
    // PyTorch's argument parser takes NumPy's names too: torch.cat(ts, axis=1), keepdims.
    static const std::pair<const char *, const char *> numpyNames[] = {{"axis", "dim"},
                                                                       {"keepdims", "keepdim"}};
    for (const auto &[numpy, torchName] : numpyNames)
      if (!known && k == numpy)
        for (const Param &p : params)
          if (p.name == torchName && !p.varargs) {
            k = torchName;
            known = true;
          }
    if (!known) {
      why = "unexpected keyword argument '" + k + "'";
      return false;
    }
    if (out.values.count(k)) {
      why = "multiple values for argument '" + k + "'";
      return false;
    }
    out.values[k] = v;
  }
  for (const Param &p : params) {
    if (p.varargs || out.values.count(p.name)) continue;
    if (!p.def) {
      why = "missing argument '" + p.name + "'";
      return false;
    }
    out.values[p.name] = a.constant(p.def.get());
  }
  return true;
}

// ---- argument conversions ----

} // namespace

bool isNoneVar(const VarPtr &v) {
  auto *o = as<ObjectVar>(v);
  return !v || (o && o->obj.get() == Py_None);
}

namespace {

int64_t toInt(Analyzer &a, const VarPtr &v, const char *what) {
  std::optional<int64_t> i = a.asInt(v);
  if (!i) a.fail(std::string(what) + " must be an int known at capture time, got " + a.describe(v));
  return *i;
}

std::vector<int64_t> toInts(Analyzer &a, const VarPtr &v, const char *what) {
  if (v->kind == VarKind::Object || v->kind == VarKind::SymInt) {
    auto *o = as<ObjectVar>(v);
    if (!o || !(PyTuple_Check(o->obj.get()) || PyList_Check(o->obj.get())))
      return {toInt(a, v, what)};
  }
  std::vector<int64_t> out;
  for (const VarPtr &i : a.sequenceItems(v, what))
    out.push_back(toInt(a, i, what));
  return out;
}

/// A size argument: a symbolic size stays symbolic (the op takes it as an attribute evaluated at
/// run time, docs/ir.md "Symbolic sizes"), anything else must be an int known at capture time.
DimExpr toDim(Analyzer &a, const VarPtr &v, const char *what) {
  if (auto *s = as<SymIntVar>(v); s && !s->expr.isStatic()) return s->expr;
  return DimExpr(toInt(a, v, what));
}

/// A list of sizes (one int, or a tuple/list of them) as a size attribute: Ints when static.
Attr toSizesAttr(Analyzer &a, const VarPtr &v, const char *what) {
  if (v->kind == VarKind::SymInt) return makeSizeAttr(Shape{toDim(a, v, what)});
  if (v->kind == VarKind::Object) {
    auto *o = as<ObjectVar>(v);
    if (!(PyTuple_Check(o->obj.get()) || PyList_Check(o->obj.get())))
      return makeSizeAttr(Shape{toDim(a, v, what)});
  }
  Shape out;
  for (const VarPtr &i : a.sequenceItems(v, what))
    out.push_back(toDim(a, i, what));
  return makeSizeAttr(out);
}

std::optional<DType> toDType(Analyzer &a, const VarPtr &v) {
  if (isNoneVar(v)) return std::nullopt;
  auto *o = as<ObjectVar>(v);
  if (o) {
    if (std::optional<DType> d = dtypeFromTorch(o->obj.get())) return d;
    if (o->obj.get() == reinterpret_cast<PyObject *>(&PyFloat_Type)) return DType::F64;
    if (o->obj.get() == reinterpret_cast<PyObject *>(&PyLong_Type)) return DType::I64;
    if (o->obj.get() == reinterpret_cast<PyObject *>(&PyBool_Type)) return DType::Bool;
  }
  a.fail("unsupported dtype " + a.describe(v));
}

DType defaultFloat() {
  PyRef d =
      check(PyObject_CallMethod(torchModule(), "get_default_dtype", nullptr), "default dtype");
  return dtypeFromTorch(d.get()).value_or(DType::F32);
}

Attr scalarAttr(Analyzer &a, const VarPtr &v, const char *what) {
  auto *o = as<ObjectVar>(v);
  if (o) {
    PyObject *p = o->obj.get();
    if (PyBool_Check(p)) return Attr(p == Py_True);
    if (PyLong_Check(p)) return Attr(static_cast<int64_t>(PyLong_AsLongLong(p)));
    if (PyFloat_Check(p)) return Attr(PyFloat_AS_DOUBLE(p));
  }
  if (v->kind == VarKind::SymInt) return Attr(toInt(a, v, what));
  if (v->kind == VarKind::SymFloat) a.specializeFloat(v); // an attribute: guarded by value
  a.fail(std::string(what) + " must be a number known at capture time, got " + a.describe(v));
}

Attr toAttr(Analyzer &a, const VarPtr &v, const AttrSpec *spec, const std::string &name) {
  if (v->kind == VarKind::Tensor)
    a.fail("a tensor argument '" + name + "' where the op needs a value known at capture time");
  if (!spec || spec->anyKind) return scalarAttr(a, v, name.c_str());
  switch (spec->kind) {
  case AttrKind::Int: return Attr(toInt(a, v, name.c_str()));
  case AttrKind::Float: return scalarAttr(a, v, name.c_str());
  case AttrKind::Bool: return Attr(a.truthy(v));
  case AttrKind::Str: {
    PyRef p = a.asPython(v);
    if (!p || !PyUnicode_Check(p.get())) a.fail(name + " must be a string");
    return Attr(utf8(p.get()));
  }
  case AttrKind::Ints: return Attr(toInts(a, v, name.c_str()));
  case AttrKind::Floats: {
    std::vector<double> out;
    for (const VarPtr &i : a.sequenceItems(v, name.c_str())) {
      std::optional<double> d = a.asNumber(i);
      if (!d) a.fail(name + " must be numbers");
      out.push_back(*d);
    }
    return Attr(out);
  }
  case AttrKind::DType: return Attr(*toDType(a, v));
  default: a.fail("attribute " + name + " of an unsupported kind");
  }
}

VarPtr wrapResults(Analyzer &a, std::vector<VarPtr> rs, const TorchRow &row) {
  if (rs.size() == 1 && !*row.resultType) return rs[0];
  PyRef type;
  if (*row.resultType) {
    std::string t = row.resultType;
    size_t dot = t.rfind('.');
    PyRef mod = check(PyImport_ImportModule(t.substr(0, dot).c_str()), "import");
    type = check(PyObject_GetAttrString(mod.get(), t.substr(dot + 1).c_str()), "result type");
  }
  return std::make_shared<TupleVar>(std::move(rs), type);
}

// F.relu(x, inplace=True) and friends write their input.
VarPtr finishInplace(Analyzer &a, BoundArgs &b, const VarPtr &input, const VarPtr &result) {
  auto it = b.values.find("inplace");
  if (it != b.values.end() && !isNoneVar(it->second) && a.truthy(it->second)) {
    a.assignInPlace(input, result);
    return input;
  }
  return result;
}

VarPtr genericLower(Analyzer &a, BoundArgs &b, const TorchRow &row) {
  const Mapping &m = compiled(row).mapping;
  const OpDef &def = OpRegistry::instance().get(row.op);
  std::vector<VarPtr> operands;
  for (const std::string &n : m.operands)
    operands.push_back(isNoneVar(b.at(n)) ? a.none() : b.at(n));
  while (!operands.empty() && isNoneVar(operands.back()) && operands.size() > def.minOperands())
    operands.pop_back();
  AttrMap attrs;
  for (auto &[py, ir] : m.attrs) {
    const VarPtr &v = b.at(py);
    if (isNoneVar(v)) continue;
    attrs[ir] = toAttr(a, v, def.attrSpec(ir), py);
  }
  std::vector<VarPtr> rs = a.emit(row.op, operands, std::move(attrs));
  VarPtr r = wrapResults(a, std::move(rs), row);
  if (!m.operands.empty()) return finishInplace(a, b, b.at(m.operands[0]), r);
  return r;
}

// ---- custom lowerings ----

#define LOWER(name) VarPtr name(Analyzer &a, BoundArgs &b, const TorchRow &row)

const TensorVar &tensorOf(Analyzer &a, const VarPtr &v, const char *what) {
  auto *t = as<TensorVar>(v);
  if (!t) a.fail(std::string(what) + " must be a tensor, got " + a.describe(v));
  return *t;
}

// A shape given as varargs or one sequence: view(2, 3) / view((2, 3)) / view(x.shape).
std::vector<VarPtr> shapeArgs(Analyzer &a, BoundArgs &b, const char *param) {
  std::vector<VarPtr> items = b.varargs;
  if (items.empty()) {
    auto it = b.values.find(param);
    if (it != b.values.end() && !isNoneVar(it->second)) items = {it->second};
  }
  if (items.size() == 1 && items[0]->kind != VarKind::SymInt) {
    auto *o = as<ObjectVar>(items[0]);
    if (!o || !PyLong_Check(o->obj.get())) return a.sequenceItems(items[0], param);
  }
  return items;
}

// ---- view / reshape with symbolic sizes ----
// The IR's view/reshape take static sizes (one -1 allowed). A target with more symbolic sizes is
// expressed as flatten / unflatten / unsqueeze / squeeze steps when it regroups consecutive
// input dims (merging or splitting them), which keeps every size symbolic.

struct DimGroup {
  int64_t i0, i1, j0, j1; // input dims [i0, i1) become target dims [j0, j1)
};

// Matches target dims T against input dims I from the left, one group at a time, until T is
// used up; returns the number of input dims consumed, or -1.
int64_t matchGroups(const Shape &I, const Shape &T, std::vector<DimGroup> &groups) {
  int64_t i = 0, j = 0, ni = static_cast<int64_t>(I.size()), nj = static_cast<int64_t>(T.size());
  auto one = [](const DimExpr &d) { return d.isStatic() && d.value() == 1; };
  while (j < nj) {
    if (i < ni && I[i] == T[j]) {
      groups.push_back({i, i + 1, j, j + 1});
      ++i, ++j;
      continue;
    }
    if (one(T[j])) { // a new size-1 dim
      groups.push_back({i, i, j, j + 1});
      ++j;
      continue;
    }
    if (i < ni && one(I[i])) { // a size-1 input dim that goes away
      groups.push_back({i, i + 1, j, j});
      ++i;
      continue;
    }
    if (i >= ni) return -1;
    bool found = false;
    DimExpr p = I[i];
    for (int64_t k = i + 1; k < ni && !found; ++k) {
      p = p * I[k];
      if (p == T[j]) {
        groups.push_back({i, k + 1, j, j + 1});
        i = k + 1, ++j;
        found = true;
      }
    }
    if (found) continue;
    p = T[j];
    for (int64_t k = j + 1; k < nj && !found; ++k) {
      p = p * T[k];
      if (p == I[i]) {
        groups.push_back({i, i + 1, j, k + 1});
        ++i, j = k + 1;
        found = true;
      }
    }
    if (!found) return -1;
  }
  return i;
}

VarPtr regroup(Analyzer &a, VarPtr x, const Shape &in, const Shape &target, int64_t minusOne) {
  std::vector<DimGroup> groups;
  if (minusOne < 0) {
    if (matchGroups(in, target, groups) != static_cast<int64_t>(in.size())) return nullptr;
  } else {
    // Left of the -1 from the input's start, right of it from the input's end; the -1 is the
    // product of the input dims in between.
    Shape left(target.begin(), target.begin() + minusOne);
    Shape right(target.begin() + minusOne + 1, target.end());
    int64_t usedLeft = matchGroups(in, left, groups);
    if (usedLeft < 0) return nullptr;
    Shape inRev(in.rbegin(), in.rend() - usedLeft), rightRev(right.rbegin(), right.rend());
    std::vector<DimGroup> rg;
    int64_t usedRight = matchGroups(inRev, rightRev, rg);
    int64_t n = static_cast<int64_t>(in.size()), m = static_cast<int64_t>(target.size());
    if (usedRight < 0) {
      // The -1 and the sizes right of it split static input dims, e.g. view(b, s, -1, 8) of
      // [b, s, 32] (attention heads): one group, the static rest regrouped as (-1, 8).
      auto isStatic = [](const DimExpr &d) { return d.isStatic(); };
      if (!std::all_of(in.begin() + usedLeft, in.end(), isStatic) ||
          !std::all_of(right.begin(), right.end(), isStatic))
        return nullptr;
      int64_t have = 1, want = 1;
      for (auto it = in.begin() + usedLeft; it != in.end(); ++it)
        have *= it->value();
      for (const DimExpr &d : right)
        want *= d.value();
      if (want <= 0 || have % want != 0) return nullptr;
      groups.push_back({usedLeft, n, minusOne, m});
    } else {
      int64_t mid0 = usedLeft, mid1 = n - usedRight;
      if (mid1 < mid0) return nullptr;
      groups.push_back({mid0, mid1, minusOne, minusOne + 1});
    }
    for (auto it = rg.rbegin(); it != rg.rend(); ++it)
      groups.push_back({n - it->i1, n - it->i0, m - it->j1, m - it->j0});
  }
  // Right to left, so the positions of groups further left stay valid.
  for (auto it = groups.rbegin(); it != groups.rend(); ++it) {
    const DimGroup &g = *it;
    int64_t ni = g.i1 - g.i0, nj = g.j1 - g.j0;
    if (ni == 1 && nj == 1) continue;
    if (ni == 0 && nj == 1) {
      x = a.emit1("unsqueeze", {x}, {{"dim", Attr(g.i0)}});
    } else if (ni == 1 && nj == 0) {
      x = a.emit1("squeeze", {x}, {{"dim", Attr(std::vector<int64_t>{g.i0})}});
    } else if (nj == 1) {
      x = a.emit1("flatten", {x}, {{"start_dim", Attr(g.i0)}, {"end_dim", Attr(g.i1 - 1)}});
    } else if (ni == 1 || (ni > 1 && nj > 1 &&
                           std::all_of(target.begin() + g.j0, target.begin() + g.j1,
                                       [](const DimExpr &d) { return d.isStatic(); }))) {
      // Several input dims into several static ones (or -1): flatten them, then split.
      if (ni > 1)
        x = a.emit1("flatten", {x}, {{"start_dim", Attr(g.i0)}, {"end_dim", Attr(g.i1 - 1)}});
      std::vector<int64_t> sizes;
      int unknown = 0;
      for (int64_t j = g.j0; j < g.j1; ++j) {
        if (target[static_cast<size_t>(j)].isStatic()) {
          sizes.push_back(target[static_cast<size_t>(j)].value());
        } else {
          sizes.push_back(-1);
          ++unknown;
        }
      }
      if (unknown > 1) return nullptr;
      x = a.emit1("unflatten", {x}, {{"dim", Attr(g.i0)}, {"sizes", Attr(sizes)}});
    } else {
      return nullptr;
    }
  }
  if (as<TensorVar>(x)->type().rank() != static_cast<int64_t>(target.size())) return nullptr;
  return x;
}

/// Specializes the first symbolic expression of `es`; does nothing when all are static (the
/// op's own inference then reports what eager would).
void specializeFirst(Analyzer &a, std::initializer_list<DimExpr> es) {
  for (const DimExpr &e : es)
    if (!e.isStatic()) a.specialize(e);
}

/// `parts` (one may be -1) as the exact sizes a dim of `total` elements splits into: the -1
/// resolved as a quotient, guarded to divide exactly; without one, the product guarded equal.
Shape exactParts(Analyzer &a, Shape parts, const DimExpr &total, const char *op) {
  int64_t minusOne = -1;
  DimExpr known(1);
  for (size_t i = 0; i < parts.size(); ++i) {
    if (parts[i] == DimExpr(-1)) {
      if (minusOne >= 0) a.fail(std::string(op) + ": only one dimension can be inferred");
      minusOne = static_cast<int64_t>(i);
    } else {
      known = known * parts[i];
    }
  }
  int64_t hk = a.hintOf(known), ht = a.hintOf(total);
  auto invalid = [&] { // as eager: the frame runs in Python, where PyTorch raises
    specializeFirst(a, {known, total});
    a.fail(std::string(op) + ": sizes " + shapeStr(parts) + " are invalid for " +
           std::to_string(ht) + " elements");
  };
  if (minusOne < 0) {
    if (hk != ht) invalid();
    a.assumeEqual(known, total, std::string(op) + " sizes");
    return parts;
  }
  if (hk <= 0 || ht % hk != 0) invalid();
  DimExpr quotient = total.floorDiv(known);
  if (quotient * known != total)
    a.assumeAtMost(total.mod(known), DimExpr(0), std::string(op) + " -1 divides exactly");
  parts[static_cast<size_t>(minusOne)] = quotient;
  return parts;
}

VarPtr reshapeTo(Analyzer &a, const VarPtr &self, const std::vector<VarPtr> &items,
                 const char *op) {
  const Shape in = tensorOf(a, self, "input").type().shape();
  Shape target;
  std::vector<int64_t> ints;
  int64_t minusOne = -1;
  std::vector<const SymIntVar *> symbolic;
  for (size_t i = 0; i < items.size(); ++i) {
    if (auto *s = as<SymIntVar>(items[i]); s && !s->expr.isStatic()) {
      symbolic.push_back(s);
      target.push_back(s->expr);
      ints.push_back(-1);
      continue;
    }
    int64_t n = toInt(a, items[i], "shape");
    if (n == -1) {
      if (minusOne >= 0) a.fail(std::string(op) + ": only one dimension can be inferred");
      minusOne = static_cast<int64_t>(i);
    }
    target.emplace_back(n);
    ints.push_back(n);
  }
  if (symbolic.empty() && minusOne >= 0 && !isStaticShape(in)) {
    // A static target with a -1 of a symbolic input: the IR divides the element count by the
    // other sizes; the capture assumes that divides exactly (PyTorch's check).
    DimExpr known(1);
    for (int64_t n : ints)
      if (n != -1) known = known * DimExpr(n);
    exactParts(a, {known, DimExpr(-1)}, numelOf(in), op);
  }
  if (symbolic.empty() || (symbolic.size() == 1 && minusOne < 0))
    return a.emit1(op, {self}, {{"shape", Attr(ints)}});
  // A reshape to the same shape (no regrouping step) is still a new view object in eager, not
  // the tensor itself: `y = x.view(x.shape[0], -1)` returned x under dynamic=True, so a later
  // y.t_() would have changed x (and y's size-1 strides were x's, not eager's view's).
  if (VarPtr r = regroup(a, self, in, target, minusOne))
    return r == self ? a.emit1("alias", {self}) : r;
  // A target with symbolic sizes as an attribute evaluated at run time; a -1 is resolved here
  // when the dims the target shares with the input leave a static quotient.
  if (minusOne >= 0) {
    std::vector<DimExpr> rest(in.begin(), in.end());
    DimExpr known(1);
    for (size_t i = 0; i < target.size(); ++i) {
      if (static_cast<int64_t>(i) == minusOne) continue;
      if (auto it = std::find(rest.begin(), rest.end(), target[i]); it != rest.end())
        rest.erase(it);
      else
        known = known * target[i];
    }
    DimExpr numel(1);
    for (const DimExpr &d : rest)
      numel = numel * d;
    // Written out: the quotient, guarded to divide exactly where the expressions leave a rest.
    target[static_cast<size_t>(minusOne)] = exactParts(a, {known, DimExpr(-1)}, numel, op)[1];
  }
  return a.emit1(op, {self}, {{"shape", makeSizeAttr(target)}});
}

LOWER(lowerView) {
  const VarPtr &self = b.at("input");
  if (b.varargs.size() == 1 && as<ObjectVar>(b.varargs[0]) &&
      dtypeFromTorch(as<ObjectVar>(b.varargs[0])->obj.get()))
    a.fail("view(dtype) reinterprets bits");
  return reshapeTo(a, self, shapeArgs(a, b, "shape"), row.op);
}

LOWER(lowerViewAs) {
  const TensorVar &other = tensorOf(a, b.at("other"), "other");
  std::vector<VarPtr> sizes;
  for (int64_t i = 0; i < other.type().rank(); ++i)
    sizes.push_back(a.sizeOf(b.at("other"), i));
  return reshapeTo(a, b.at("input"), sizes, row.op);
}

LOWER(
    lowerIntsVarargs) { // permute(*dims), repeat(*sizes), tile(*dims), flip(*dims), expand(*sizes)
  std::vector<int64_t> v;
  for (const VarPtr &i : shapeArgs(a, b, "dims"))
    v.push_back(toInt(a, i, row.mapping));
  return a.emit1(row.op, {b.at("input")}, {{row.mapping, Attr(v)}});
}

LOWER(lowerExpandAs) {
  // `other` gives only its shape: as an attribute where it is static, so neither requires_grad
  // nor autodiff sees other as an operand (fuzz seed 963: x.expand_as(y) of a y requiring grad
  // required grad and gave y's input a zero gradient; eager: neither).
  const TensorVar &other = tensorOf(a, b.at("other"), "other");
  if (!isStaticShape(other.type().shape())) {
    // A symbolic size broadcast from 1 at this call (`x[1:].expand_as(x)` with x of 2 rows)
    // specializes, as for elementwise operands: the IR would take the two sizes as equal.
    a.checkSymbolicBroadcast({b.at("input"), b.at("other")});
    return a.emit1(row.op, {b.at("input"), b.at("other")});
  }
  return a.emit1("expand", {b.at("input")}, {{"shape", makeSizeAttr(other.type().shape())}});
}

LOWER(lowerExpand) {
  const TensorVar &t = tensorOf(a, b.at("input"), "input");
  std::vector<VarPtr> items = shapeArgs(a, b, "size");
  Shape v;
  int64_t lead = static_cast<int64_t>(items.size()) - t.type().rank();
  for (size_t i = 0; i < items.size(); ++i) {
    if (auto *s = as<SymIntVar>(items[i]); s && !s->expr.isStatic()) {
      int64_t d = static_cast<int64_t>(i) - lead;
      const DimExpr *from = d >= 0 ? &t.type().shape()[static_cast<size_t>(d)] : nullptr;
      if (from && *from == s->expr) {
        v.push_back(-1); // keeps the (same) symbolic size
        continue;
      }
      // A new leading dim or a size-1 dim expanded to a symbolic size: the size is an
      // attribute evaluated at run time (buffered_token_type_ids.expand(batch, seq)).
      if (!from || *from == DimExpr(1)) {
        v.push_back(s->expr);
        continue;
      }
      a.specialize(s->expr);
    }
    int64_t n = toInt(a, items[i], "size");
    // A symbolic dim (never 1) expanded to a fixed size must equal it: specialized, so another
    // size gets eager's error from Python instead of from the graph.
    int64_t d = static_cast<int64_t>(i) - lead;
    if (n != -1 && d >= 0 && !t.type().shape()[static_cast<size_t>(d)].isStatic())
      a.specialize(t.type().shape()[static_cast<size_t>(d)]);
    v.push_back(n);
  }
  return a.emit1("expand", {b.at("input")}, {{"shape", makeSizeAttr(v)}});
}

LOWER(lowerSqueeze) {
  // The IR never squeezes a symbolic dim (symbols are sizes of at least 2), but a size derived
  // from one (s0 // 2 of unflatten(-1, (2, -1))) can be 1: where it is 1 at this call the size
  // is specialized, else guarded to stay above 1 (fuzzer seed 10940). So is one that is 0 at
  // this call (`narrow(0, 0, s0 // 2)[1:]` at batch 3, fuzzer seed 139131), which a guard
  // for "above 1" cannot hold.
  const Shape &shape = tensorOf(a, b.at("input"), "input").type().shape();
  const auto rank = static_cast<int64_t>(shape.size());
  std::vector<int64_t> dims;
  if (isNoneVar(b.at("dim"))) {
    for (int64_t d = 0; d < rank; ++d)
      dims.push_back(d);
  } else {
    dims = toInts(a, b.at("dim"), "dim");
  }
  for (int64_t d : dims) {
    if (d < 0) d += rank;
    if (d < 0 || d >= rank || shape[size_t(d)].isStatic()) continue;
    if (a.hintOf(shape[size_t(d)]) <= 1) a.specialize(shape[size_t(d)]);
    a.assumeAtMost(DimExpr(2), shape[size_t(d)], "a dim squeeze() keeps is not 1");
  }
  if (isNoneVar(b.at("dim"))) return a.emit1("squeeze", {b.at("input")});
  return a.emit1("squeeze", {b.at("input")}, {{"dim", Attr(dims)}});
}

LOWER(lowerReduce) { // sum/mean/amax/amin/all/any/logsumexp/count_nonzero: dim None|int|tuple
  const OpDef &def = OpRegistry::instance().get(row.op);
  AttrMap attrs;
  auto dimIt = b.values.find("dim");
  if (dimIt != b.values.end() && !isNoneVar(dimIt->second))
    attrs["dims"] = Attr(toInts(a, dimIt->second, "dim"));
  if (def.attrSpec("keepdim")) {
    auto k = b.values.find("keepdim");
    if (k != b.values.end()) attrs["keepdim"] = Attr(a.truthy(k->second));
  }
  if (def.attrSpec("dtype")) {
    auto d = b.values.find("dtype");
    if (d != b.values.end() && !isNoneVar(d->second)) attrs["dtype"] = Attr(*toDType(a, d->second));
  }
  return a.emit1(row.op, {b.at("input")}, std::move(attrs));
}

LOWER(lowerProd) {
  AttrMap attrs{{"keepdim", Attr(a.truthy(b.at("keepdim")))}};
  if (!isNoneVar(b.at("dim")))
    attrs["dims"] = Attr(std::vector<int64_t>{toInt(a, b.at("dim"), "dim")});
  if (auto d = toDType(a, b.at("dtype"))) attrs["dtype"] = Attr(*d);
  return a.emit1("prod", {b.at("input")}, std::move(attrs));
}

// torch.histc of a float tensor (a mixture-of-experts router counts tokens per expert with it).
// An integer input (eager raises on CPU) or a range given as a tensor stays a PyTorch fallback.
LOWER(lowerHistc) {
  auto *x = as<TensorVar>(b.at("input"));
  if (!x || (x->type().dtype() != DType::F32 && x->type().dtype() != DType::F64)) return nullptr;
  AttrMap attrs;
  for (const char *name : {"bins", "min", "max"}) {
    const VarPtr &v = b.at(name);
    if (v->kind == VarKind::Tensor || !a.asNumber(v)) return nullptr;
    attrs[name] = *name == 'b' ? Attr(toInt(a, v, name)) : scalarAttr(a, v, name);
  }
  return a.emit1("histc", {b.at("input")}, std::move(attrs));
}

// transformers' grouped_mm_fallback(input [T,K], weight [E,K,N], offs [E]): one product per
// expert over its rows. Other operand forms stay a PyTorch fallback node.
LOWER(lowerGroupedMm) {
  auto *x = as<TensorVar>(b.at("input")), *w = as<TensorVar>(b.at("weight"));
  auto *offs = as<TensorVar>(b.at("offs"));
  if (!x || !w || !offs) return nullptr;
  const Type &xt = x->type(), &wt = w->type(), &ot = offs->type();
  if (xt.rank() != 2 || wt.rank() != 3 || ot.rank() != 1 || !isFloating(xt.dtype()) ||
      xt.dtype() != wt.dtype() || (ot.dtype() != DType::I32 && ot.dtype() != DType::I64))
    return nullptr;
  return a.emit1(row.op, {b.at("input"), b.at("weight"), b.at("offs")});
}

LOWER(
    lowerStdVar) { // std/var/std_mean/var_mean(input, dim=None, unbiased=None, keepdim, correction)
  AttrMap attrs{{"keepdim", Attr(a.truthy(b.at("keepdim")))}};
  VarPtr dim = b.at("dim");
  // std(x, True) passes `unbiased` positionally.
  if (auto *o = as<ObjectVar>(dim); o && PyBool_Check(o->obj.get())) {
    attrs["correction"] = Attr(int64_t{o->obj.get() == Py_True ? 1 : 0});
    dim = a.none();
  }
  if (!isNoneVar(dim)) attrs["dims"] = Attr(toInts(a, dim, "dim"));
  if (!isNoneVar(b.at("unbiased")))
    attrs["correction"] = Attr(int64_t{a.truthy(b.at("unbiased")) ? 1 : 0});
  if (!isNoneVar(b.at("correction")))
    attrs["correction"] = scalarAttr(a, b.at("correction"), "correction");
  std::vector<VarPtr> rs = a.emit(row.op, {b.at("input")}, std::move(attrs));
  return rs.size() == 1 ? rs[0] : std::make_shared<TupleVar>(std::move(rs));
}

LOWER(lowerArgMax) {
  AttrMap attrs{{"keepdim", Attr(a.truthy(b.at("keepdim")))}};
  if (!isNoneVar(b.at("dim"))) attrs["dim"] = Attr(toInt(a, b.at("dim"), "dim"));
  return a.emit1(row.op, {b.at("input")}, std::move(attrs));
}

LOWER(lowerMaxMin) { // max(x) | max(x, dim, keepdim=False) | max(x, other)
  std::string op = row.op;
  const VarPtr &dim = b.at("dim");
  if (isNoneVar(dim)) return a.emit1(op, {b.at("input")});
  if (dim->kind == VarKind::Tensor)
    return a.emit1(op == "max" ? "maximum" : "minimum", {b.at("input"), dim});
  std::vector<VarPtr> rs =
      a.emit(op + "_dim", {b.at("input")},
             {{"dim", Attr(toInt(a, dim, "dim"))}, {"keepdim", Attr(a.truthy(b.at("keepdim")))}});
  PyRef mod = check(PyImport_ImportModule("torch.return_types"), "torch.return_types");
  PyRef type = check(PyObject_GetAttrString(mod.get(), op.c_str()), "return type");
  return std::make_shared<TupleVar>(std::move(rs), type);
}

LOWER(lowerNorm) { // torch.norm / Tensor.norm(p='fro', dim=None, keepdim=False, dtype=None)
  AttrMap attrs{{"keepdim", Attr(a.truthy(b.at("keepdim")))}};
  const VarPtr &p = b.at("p");
  if (!isNoneVar(p)) {
    PyRef po = a.asPython(p);
    if (po && PyUnicode_Check(po.get())) {
      if (utf8(po.get()) != "fro") a.fail("norm with p='" + utf8(po.get()) + "'");
      attrs["p"] = Attr(2.0);
    } else {
      attrs["p"] = scalarAttr(a, p, "p");
    }
  }
  if (!isNoneVar(b.at("dim"))) attrs["dims"] = Attr(toInts(a, b.at("dim"), "dim"));
  if (auto d = toDType(a, b.at("dtype"))) attrs["dtype"] = Attr(*d);
  return a.emit1("norm", {b.at("input")}, std::move(attrs));
}

LOWER(lowerVectorNorm) { // torch.linalg.vector_norm(x, ord=2, dim=None, keepdim=False, dtype=None)
  AttrMap attrs{{"keepdim", Attr(a.truthy(b.at("keepdim")))},
                {"p", scalarAttr(a, b.at("ord"), "ord")}};
  if (!isNoneVar(b.at("dim"))) attrs["dims"] = Attr(toInts(a, b.at("dim"), "dim"));
  if (auto d = toDType(a, b.at("dtype"))) attrs["dtype"] = Attr(*d);
  return a.emit1("norm", {b.at("x")}, std::move(attrs));
}

LOWER(lowerNormalize) { // F.normalize: input / max(norm(input, p, dim, keepdim), eps)
  if (!isNoneVar(b.at("out"))) a.fail("F.normalize with out=");
  const VarPtr &x = b.at("input");
  AttrMap attrs{{"keepdim", Attr(true)},
                {"p", scalarAttr(a, b.at("p"), "p")},
                {"dims", Attr(std::vector<int64_t>{toInt(a, b.at("dim"), "dim")})}};
  VarPtr norm = a.emit1("norm", {x}, std::move(attrs));
  VarPtr denom = a.emit1("clamp", {norm}, {{"min", scalarAttr(a, b.at("eps"), "eps")}});
  return a.emit1("div", {x, denom});
}

// torch._weight_norm(v, g, dim), what nn.utils.weight_norm and parametrizations.weight_norm
// compute: v * (g / ||v||), the 2-norm over every dim but `dim` (over all of v when dim is -1).
LOWER(lowerWeightNorm) {
  const VarPtr &v = b.at("v"), &g = b.at("g");
  const Type &t = tensorOf(a, v, "v").type();
  int64_t dim = toInt(a, b.at("dim"), "dim");
  if (t.rank() == 0 || dim < -1 || dim >= t.rank())
    a.fail("torch._weight_norm with dim " + std::to_string(dim));
  std::vector<int64_t> dims;
  for (int64_t i = 0; i < t.rank(); ++i)
    if (dim == -1 || i != dim) dims.push_back(i);
  // sqrt(sum(v * v)) rather than the `norm` op: the native backend fuses this reduction (a
  // [256,64,16] weight: 0.14 ms) where `norm` runs its reference kernel (2.2 ms, every call).
  VarPtr sumSq =
      a.emit1("sum", {a.emit1("mul", {v, v})}, {{"dims", Attr(dims)}, {"keepdim", Attr(true)}});
  VarPtr norm = a.emit1("sqrt", {sumSq});
  return a.emit1("mul", {v, a.emit1("div", {g, norm})});
}

LOWER(lowerSoftmax) { // dim=None: the legacy choice (0 for 0-/1-/3-d inputs, else 1)
  const TensorVar &t = tensorOf(a, b.at("input"), "input");
  int64_t dim;
  if (isNoneVar(b.at("dim"))) {
    int64_t r = t.type().rank();
    dim = (r == 0 || r == 1 || r == 3) ? 0 : 1;
  } else {
    dim = toInt(a, b.at("dim"), "dim");
  }
  AttrMap attrs{{"dim", Attr(dim)}};
  if (auto d = toDType(a, b.at("dtype"))) attrs["dtype"] = Attr(*d);
  return a.emit1(row.op, {b.at("input")}, std::move(attrs));
}

LOWER(lowerCatStack) {
  std::vector<VarPtr> ts = a.sequenceItems(b.at("tensors"), "tensors");
  if (ts.empty()) a.fail(std::string(row.op) + "() of an empty list");
  for (const VarPtr &t : ts)
    tensorOf(a, t, "cat/stack item");
  if (std::string_view(row.op) == "cat" && ts.size() > 1) {
    // PyTorch's legacy rule: 1-d empty tensors (torch.tensor([]), the start of a growing KV
    // cache) are skipped whatever the others' rank. Same dtype only: they still take part in
    // type promotion.
    auto emptyVector = [&](const VarPtr &t) {
      const Type &ty = tensorOf(a, t, "cat item").type();
      return ty.rank() == 1 && ty.shape()[0].isStatic() && ty.shape()[0].value() == 0;
    };
    // One that requires grad stays where the others are 1-d too: eager's result requires grad
    // then (fuzzer seed 38177: `cat([diff(x[:1]), v])`, x requiring grad, did not).
    bool allVectors = true;
    for (const VarPtr &t : ts)
      allVectors = allVectors && tensorOf(a, t, "cat item").type().rank() == 1;
    std::vector<VarPtr> kept;
    for (const VarPtr &t : ts) {
      const bool tracked = tensorOf(a, t, "cat item").requiresGrad;
      if (!emptyVector(t) || (tracked && allVectors))
        kept.push_back(t);
      else if (tracked)
        a.fail("cat() of an empty 1-d tensor that requires grad and others of higher rank");
    }
    if (!kept.empty() && kept.size() < ts.size()) {
      const DType dtype = tensorOf(a, kept[0], "cat item").type().dtype();
      for (const VarPtr &t : ts)
        if (tensorOf(a, t, "cat item").type().dtype() != dtype)
          a.fail("cat() of an empty 1-d tensor of another dtype");
      ts = std::move(kept);
    }
  }
  return a.emit1(row.op, ts, {{"dim", Attr(toInt(a, b.at("dim"), "dim"))}});
}

// ---- sizes derived from symbolic dims (docs/frontend.md, "Dynamic shapes") ----
// The ops below take sizes as symbolic attributes where a size comes from a symbolic dim. What
// PyTorch checks (a narrow within its dim, split sizes that sum to it) becomes an assumption the
// capture guards (Analyzer::assumeAtMost); where it fails at capture, the sizes are specialized,
// so the op fails or clamps at capture as it does in eager.

int64_t dimArg(Analyzer &a, const VarPtr &v, int64_t rank) {
  int64_t d = toInt(a, v, "dim");
  int64_t r = std::max<int64_t>(rank, 1);
  if (d < -r || d >= r)
    a.fail("dim " + std::to_string(d) + " out of range for rank " + std::to_string(rank));
  return d < 0 ? d + r : d;
}

/// Pieces of a symbolic split into parts of `step` (split's split_size, chunk's rounded-up
/// quotient): as many as at this call, the last one the rest, guarded to stay that many
/// (the last piece is between 1 and `step`). Emitted as split_with_sizes.
VarPtr splitInto(Analyzer &a, const VarPtr &self, int64_t dim, const DimExpr &size,
                 const DimExpr &step, const char *what) {
  int64_t hs = a.hintOf(size), hk = a.hintOf(step);
  if (hk <= 0 || hs <= 0) specializeFirst(a, {step, size});
  const int64_t n = (hs + hk - 1) / hk;
  Shape pieces(static_cast<size_t>(n - 1), step);
  pieces.push_back(size - DimExpr(n - 1) * step);
  a.assumeAtMost(DimExpr(n - 1) * step + DimExpr(1), size, std::string(what) + " piece count");
  a.assumeAtMost(size, DimExpr(n) * step, std::string(what) + " piece count");
  std::vector<VarPtr> rs = a.emit("split_with_sizes", {self},
                                  {{"split_sizes", makeSizeAttr(pieces)}, {"dim", Attr(dim)}});
  return std::make_shared<TupleVar>(std::move(rs));
}

LOWER(lowerSplit) {
  const VarPtr &self = b.at("input");
  const Type &t = tensorOf(a, self, "input").type();
  const VarPtr &s = b.at("split_size_or_sections");
  if (t.rank() == 0) a.fail("split of a 0-d tensor");
  int64_t dim = dimArg(a, b.at("dim"), t.rank());
  const DimExpr size = t.shape()[static_cast<size_t>(dim)];
  std::vector<VarPtr> rs;
  if ((s->kind == VarKind::Object && PyLong_Check(as<ObjectVar>(s)->obj.get())) ||
      s->kind == VarKind::SymInt) {
    DimExpr step = toDim(a, s, "split_size");
    if (size.isStatic() && step.isStatic())
      rs = a.emit("split", {self}, {{"split_size", Attr(step.value())}, {"dim", Attr(dim)}});
    else
      return splitInto(a, self, dim, size, step, "split");
  } else {
    Shape sizes;
    for (const VarPtr &i : a.sequenceItems(s, "split sizes"))
      sizes.push_back(toDim(a, i, "split sizes"));
    if (size.isStatic() && isStaticShape(sizes)) {
      rs = a.emit("split_with_sizes", {self},
                  {{"split_sizes", makeSizeAttr(sizes)}, {"dim", Attr(dim)}});
    } else {
      DimExpr sum(0);
      bool nonNegative = true;
      for (const DimExpr &p : sizes) {
        sum = sum + p;
        nonNegative = nonNegative && a.hintOf(p) >= 0;
      }
      if (!nonNegative || a.hintOf(sum) != a.hintOf(size)) {
        for (const DimExpr &p : sizes)
          specializeFirst(a, {p});
        specializeFirst(a, {size});
      }
      for (const DimExpr &p : sizes)
        a.assumeAtMost(DimExpr(0), p, "split size");
      a.assumeEqual(sum, size, "split sizes sum to the dim");
      rs = a.emit("split_with_sizes", {self},
                  {{"split_sizes", makeSizeAttr(sizes)}, {"dim", Attr(dim)}});
    }
  }
  return std::make_shared<TupleVar>(std::move(rs));
}

LOWER(lowerMultiResult) { // chunk / unbind: a tuple of views
  const Type &t = tensorOf(a, b.at("input"), "input").type();
  if (t.rank() > 0) {
    int64_t dim = dimArg(a, b.at("dim"), t.rank());
    const DimExpr size = t.shape()[static_cast<size_t>(dim)];
    if (!size.isStatic()) {
      // unbind's result count is the size itself; chunk's pieces are rounded-up quotients.
      if (std::string_view(row.op) == "unbind") a.specialize(size);
      int64_t chunks = toInt(a, b.at("chunks"), "chunks");
      if (chunks <= 0) a.fail("chunk: number of chunks must be positive");
      return splitInto(a, b.at("input"), dim, size,
                       (size + DimExpr(chunks - 1)).floorDiv(DimExpr(chunks)), "chunk");
    }
  }
  VarPtr r = genericLower(a, b, row);
  if (r->kind == VarKind::Tuple) return r;
  return std::make_shared<TupleVar>(std::vector<VarPtr>{r});
}

/// torch.meshgrid: each 0-/1-d tensor reshaped to its own dim of the grid and expanded over the
/// others (eager's expanded views). indexing "xy" swaps the first two dims' roles.
LOWER(lowerMeshgrid) {
  std::vector<VarPtr> ts = b.varargs;
  if (ts.size() == 1 && !as<TensorVar>(ts[0])) ts = a.sequenceItems(ts[0], "meshgrid tensors");
  bool xy = false;
  if (!isNoneVar(b.at("indexing"))) {
    PyRef mode = a.asPython(b.at("indexing"));
    if (!mode || !PyUnicode_Check(mode.get())) return nullptr;
    const std::string m = utf8(mode.get());
    if (m != "ij" && m != "xy") return nullptr; // PyTorch raises
    xy = m == "xy";
  }
  if (ts.empty()) return nullptr;
  Shape grid;
  for (const VarPtr &t : ts) {
    const Type &ty = tensorOf(a, t, "meshgrid tensor").type();
    if (ty.rank() > 1 || ty.dtype() != tensorOf(a, ts[0], "meshgrid tensor").type().dtype())
      return nullptr; // PyTorch raises
    grid.push_back(ty.rank() == 0 ? DimExpr(int64_t(1)) : ty.shape()[0]);
  }
  std::vector<size_t> place(ts.size());
  std::iota(place.begin(), place.end(), size_t(0));
  if (xy && ts.size() >= 2) {
    std::swap(place[0], place[1]);
    std::swap(grid[0], grid[1]);
  }
  std::vector<VarPtr> out;
  for (size_t i = 0; i < ts.size(); ++i) {
    Shape column(ts.size(), DimExpr(int64_t(1)));
    column[place[i]] = grid[place[i]];
    VarPtr r = a.emit1("reshape", {ts[i]}, {{"shape", makeSizeAttr(column)}});
    out.push_back(a.emit1("expand", {r}, {{"shape", makeSizeAttr(grid)}}));
  }
  return std::make_shared<TupleVar>(std::move(out));
}

LOWER(lowerNarrow) {
  const VarPtr &self = b.at("input");
  const Type &t = tensorOf(a, self, "input").type();
  if (t.rank() == 0) return genericLower(a, b, row);
  int64_t dim = dimArg(a, b.at("dim"), t.rank());
  const DimExpr size = t.shape()[static_cast<size_t>(dim)];
  const DimExpr start = toDim(a, b.at("start"), "start"),
                length = toDim(a, b.at("length"), "length");
  if (size.isStatic() && start.isStatic() && length.isStatic()) return genericLower(a, b, row);
  // A negative start counts from the end (symbolic sizes: an offset, so wrapped here).
  const DimExpr from = start.isStatic() && start.value() < 0 ? size + start : start;
  if (!(a.hintOf(from) >= 0 && a.hintOf(length) >= 0 &&
        a.hintOf(from) + a.hintOf(length) <= a.hintOf(size)))
    specializeFirst(a, {start, length, size});
  a.assumeAtMost(DimExpr(0), from, "narrow start");
  a.assumeAtMost(DimExpr(0), length, "narrow length");
  a.assumeAtMost(from + length, size, "narrow within the dim");
  // The IR wraps a static negative start itself; a symbolic narrow takes the wrapped offset.
  const DimExpr &startAttr = start.isStatic() && length.isStatic() ? start : from;
  return a.emit1(
      "narrow", {self},
      {{"dim", Attr(dim)}, {"start", makeSizeAttr(startAttr)}, {"length", makeSizeAttr(length)}});
}

LOWER(lowerRepeat) {
  Shape reps;
  for (const VarPtr &i : shapeArgs(a, b, "dims"))
    reps.push_back(toDim(a, i, "repeats"));
  for (const DimExpr &r : reps) {
    if (a.hintOf(r) < 0) specializeFirst(a, {r});
    a.assumeAtMost(DimExpr(0), r, "repeat count");
  }
  return a.emit1("repeat", {b.at("input")}, {{"repeats", makeSizeAttr(reps)}});
}

// x.repeat_interleave(r, dim) with an int r: every slice along dim r times in a row, which is
// a new dim after dim expanded to r and merged back into dim (GPT-J's rotary embedding). Tensor
// repeats (data-dependent sizes) and no dim (flattens first) run through PyTorch.
LOWER(lowerRepeatInterleave) {
  const VarPtr &self = b.at("input");
  const Type &t = tensorOf(a, self, "input").type();
  std::optional<int64_t> reps;
  if (b.at("repeats")->kind != VarKind::Tensor) reps = a.asInt(b.at("repeats"));
  if (!reps || *reps < 0 || isNoneVar(b.at("dim")) || t.rank() == 0 ||
      !isNoneVar(b.at("output_size"))) {
    PyRef fn = check(PyObject_GetAttrString(torchModule(), "repeat_interleave"),
                     "torch.repeat_interleave");
    Args args;
    args.pos = {self, b.at("repeats")};
    if (!isNoneVar(b.at("dim"))) args.kw.emplace_back("dim", b.at("dim"));
    if (!isNoneVar(b.at("output_size"))) args.kw.emplace_back("output_size", b.at("output_size"));
    return a.fallbackCall(fn.get(), "torch.repeat_interleave", args);
  }
  int64_t dim = dimArg(a, b.at("dim"), t.rank());
  Shape expanded = t.shape(), merged = t.shape();
  expanded.insert(expanded.begin() + dim + 1, DimExpr(*reps));
  merged[static_cast<size_t>(dim)] = merged[static_cast<size_t>(dim)] * DimExpr(*reps);
  VarPtr x = a.emit1("unsqueeze", {self}, {{"dim", Attr(dim + 1)}});
  x = a.emit1("expand", {x}, {{"shape", makeSizeAttr(expanded)}});
  return a.emit1("reshape", {x}, {{"shape", makeSizeAttr(merged)}});
}

LOWER(lowerUnflatten) {
  const VarPtr &self = b.at("input");
  const Type &t = tensorOf(a, self, "input").type();
  if (t.rank() == 0) return genericLower(a, b, row);
  int64_t dim = dimArg(a, b.at("dim"), t.rank());
  const DimExpr size = t.shape()[static_cast<size_t>(dim)];
  Shape parts;
  for (const VarPtr &i : a.sequenceItems(b.at("sizes"), "sizes"))
    parts.push_back(toDim(a, i, "sizes"));
  if (parts.empty() || (size.isStatic() && isStaticShape(parts))) return genericLower(a, b, row);
  parts = exactParts(a, std::move(parts), size, "unflatten");
  return a.emit1("unflatten", {self}, {{"dim", Attr(dim)}, {"sizes", makeSizeAttr(parts)}});
}

/// `v.detach()`: an alias a training step's autodiff stops at (stopsGradient; canonicalize keeps
/// such an alias).
VarPtr detachedAlias(Analyzer &a, const VarPtr &v) {
  VarPtr r = a.emit1("alias", {v});
  if (as<TensorVar>(r)->requiresGrad)
    a.irValue(r)->definingOp()->setAttr("autodiff.stop", Attr(true));
  as<TensorVar>(r)->requiresGrad = false;
  return r;
}

/// clamp(x, lo, hi) with tensor bounds (`lo` or `hi` null or None: none), `y` its value
/// (min(max(x, lo), hi)), where a gradient is recorded: y again, through `where`s whose branches
/// send the gradient where eager's clamp backward does (clamp_backward_min_max): to x where lo <= x
/// <= hi, to lo where x < lo < hi, to hi where x > hi or hi < lo. As maximum/minimum, ties would
/// split it in half between x and the bound (fuzzer seed 54286: a bound equal to x). Elements none
/// of them takes (NaN, lo == hi above x) keep the value without a gradient, as in eager.
VarPtr clampWithEagersGradient(Analyzer &a, const VarPtr &x, const VarPtr &lo, const VarPtr &hi,
                               const VarPtr &y) {
  const bool hasLo = lo && !isNoneVar(lo), hasHi = hi && !isNoneVar(hi);
  auto both = [&](VarPtr p, VarPtr q) { return a.emit1("logical_and", {p, q}); };
  VarPtr value = detachedAlias(a, y);
  VarPtr r = value;
  if (hasHi) {
    VarPtr above = a.emit1("gt", {x, hi});
    if (hasLo) above = a.emit1("logical_or", {above, a.emit1("lt", {hi, lo})});
    // (Where x > hi or hi < lo, the value is hi or, for a NaN x or lo, NaN: hi + NaN keeps
    // the NaN and hi's gradient.)
    VarPtr highValue =
        a.emit1("where", {a.emit1("eq", {value, hi}), hi, a.emit1("add", {hi, value})});
    r = a.emit1("where", {above, highValue, r});
  }
  if (hasLo) {
    VarPtr below = a.emit1("lt", {x, lo});
    if (hasHi) below = both(below, a.emit1("lt", {lo, hi}));
    r = a.emit1("where", {below, lo, r});
  }
  VarPtr inside = hasLo ? a.emit1("ge", {x, lo}) : nullptr;
  if (hasHi) inside = inside ? both(inside, a.emit1("le", {x, hi})) : a.emit1("le", {x, hi});
  return a.emit1("where", {inside, x, r});
}

/// clamp / clamp_min / clamp_max: `lo` or `hi` null where the call has no such bound.
VarPtr clampBetween(Analyzer &a, BoundArgs &b, const VarPtr &lo, const VarPtr &hi) {
  const bool hasLo = lo && !isNoneVar(lo), hasHi = hi && !isNoneVar(hi);
  VarPtr x = b.at("input");
  const bool tensorLo = hasLo && lo->kind == VarKind::Tensor;
  const bool tensorHi = hasHi && hi->kind == VarKind::Tensor;
  if (tensorLo || tensorHi) {
    // clamp's overloads take two tensor bounds or two numbers: eager raises a TypeError for a
    // number beside a tensor, which the call run by Python then raises.
    if ((hasLo && !tensorLo) || (hasHi && !tensorHi))
      a.fail("clamp() with a number and a tensor bound (eager takes two of a kind)");
    if (hasLo) x = a.emit1("maximum", {x, lo});
    if (hasHi) x = a.emit1("minimum", {x, hi});
    std::vector<VarPtr> operands{b.at("input")};
    for (const VarPtr &bound : {lo, hi})
      if (bound && !isNoneVar(bound)) operands.push_back(bound);
    if (a.gradEnabled() && a.anyRequiresGrad(operands))
      x = clampWithEagersGradient(a, b.at("input"), lo, hi, x);
    return finishInplace(a, b, b.at("input"), x);
  }
  if (!hasLo && !hasHi) a.fail("clamp() needs min or max");
  AttrMap attrs;
  if (hasLo) attrs["min"] = scalarAttr(a, lo, "min");
  if (hasHi) attrs["max"] = scalarAttr(a, hi, "max");
  return a.emit1("clamp", {x}, std::move(attrs));
}

LOWER(lowerClamp) { return clampBetween(a, b, b.at("min"), b.at("max")); }
LOWER(lowerClampMin) { return clampBetween(a, b, b.at("min"), nullptr); }
LOWER(lowerClampMax) { return clampBetween(a, b, nullptr, b.at("max")); }

LOWER(lowerWhere) {
  if (isNoneVar(b.at("input")) && isNoneVar(b.at("other")))
    a.fail("torch.where(condition) (the result's shape depends on the data)");
  return a.emit1("where", {b.at("condition"), b.at("input"), b.at("other")});
}

// Creation: zeros(*size, dtype=None, device=None, requires_grad=False, ...).
/// A `memory_format=` argument other than `keeps` (what the capture reproduces: "preserve_format"
/// for clone, *_like and casts, "contiguous_format" for contiguous and factories) is a graph
/// break: the captured op would give its result another layout than eager (docs/frontend.md,
/// Output layouts).
void checkMemoryFormat(Analyzer &a, BoundArgs &b, const std::string &keeps) {
  auto f = b.values.find("memory_format");
  if (f == b.values.end() || isNoneVar(f->second)) return;
  PyRef v = a.asPython(f->second);
  PyRef s = v ? PyRef::steal(PyObject_Str(v.get())) : PyRef();
  if (!s) PyErr_Clear();
  const std::string text = s ? utf8(s.get()) : "";
  if (text != "torch." + keeps) a.fail("memory_format=" + (text.empty() ? std::string("?") : text));
}

void checkCreationKw(Analyzer &a, BoundArgs &b) {
  auto dev = b.values.find("device");
  if (dev != b.values.end() && !isNoneVar(dev->second)) {
    PyRef d = a.asPython(dev->second);
    PyRef s = d ? PyRef::steal(PyObject_Str(d.get())) : PyRef();
    if (!s || utf8(s.get()) != "cpu")
      a.fail("tensor creation on device " + a.describe(dev->second));
  }
  auto rg = b.values.find("requires_grad");
  if (rg != b.values.end() && a.truthy(rg->second))
    a.fail("tensor creation with requires_grad=True");
}

Attr creationShape(Analyzer &a, BoundArgs &b) {
  Shape shape;
  for (const VarPtr &v : shapeArgs(a, b, "size"))
    shape.push_back(toDim(a, v, "size"));
  return makeSizeAttr(shape);
}

LOWER(lowerCreate) { // zeros / ones / empty
  checkCreationKw(a, b);
  checkMemoryFormat(a, b, "contiguous_format");
  AttrMap attrs{{"shape", creationShape(a, b)}};
  attrs["dtype"] = Attr(toDType(a, b.at("dtype")).value_or(defaultFloat()));
  return a.emit1(row.op, {}, std::move(attrs));
}

DType fillDType(Analyzer &a, const VarPtr &v) {
  auto *o = as<ObjectVar>(v);
  if (o && PyBool_Check(o->obj.get())) return DType::Bool;
  if ((o && PyLong_Check(o->obj.get())) || v->kind == VarKind::SymInt) return DType::I64;
  return defaultFloat();
}

LOWER(lowerFull) {
  checkCreationKw(a, b);
  const VarPtr &fill = b.at("fill_value");
  AttrMap attrs{{"shape", toSizesAttr(a, b.at("size"), "size")},
                {"fill_value", scalarAttr(a, fill, "fill_value")}};
  attrs["dtype"] = Attr(toDType(a, b.at("dtype")).value_or(fillDType(a, fill)));
  return a.emit1("full", {}, std::move(attrs));
}

LOWER(lowerLike) { // zeros_like / ones_like / empty_like / full_like
  checkCreationKw(a, b);
  checkMemoryFormat(a, b, "preserve_format");
  AttrMap attrs;
  if (auto d = toDType(a, b.at("dtype"))) attrs["dtype"] = Attr(*d);
  auto f = b.values.find("fill_value");
  if (f != b.values.end()) attrs["fill_value"] = scalarAttr(a, f->second, "fill_value");
  return a.emit1(row.op, {b.at("input")}, std::move(attrs));
}

LOWER(lowerNew) { // new_zeros / new_ones / new_empty / new_full (size, ...)
  checkCreationKw(a, b);
  // x.new_zeros(x.shape) with symbolic sizes: the *_like op keeps them symbolic.
  std::vector<VarPtr> sizes = shapeArgs(a, b, "size");
  const TensorVar &self = tensorOf(a, b.at("input"), "input");
  bool symbolic = false, sameShape = static_cast<int64_t>(sizes.size()) == self.type().rank();
  for (size_t i = 0; i < sizes.size(); ++i) {
    auto *s = as<SymIntVar>(sizes[i]);
    symbolic |= s && !s->expr.isStatic();
    std::optional<int64_t> st = s ? std::nullopt : a.asInt(sizes[i]);
    const DimExpr &d = i < self.type().shape().size() ? self.type().shape()[i] : DimExpr(-1);
    sameShape = sameShape && ((s && s->expr == d) || (st && d.isStatic() && d.value() == *st));
  }
  if (symbolic && sameShape) {
    std::string op = row.op;
    std::string like = op == "new_full"   ? "full_like"
                       : op == "new_ones" ? "ones_like"
                                          : "zeros_like";
    AttrMap attrs;
    if (auto d = toDType(a, b.at("dtype"))) attrs["dtype"] = Attr(*d);
    auto f = b.values.find("fill_value");
    if (f != b.values.end()) attrs["fill_value"] = scalarAttr(a, f->second, "fill_value");
    // new_* is contiguous where *_like keeps a permuted input's layout (fuzzer seed 20221:
    // `v.new_zeros(v.shape)` of a movedim'd v was permuted under dynamic=True); the contiguous
    // of a fresh result costs nothing once canonicalize drops it.
    return a.emit1("contiguous", {a.emit1(like, {b.at("input")}, std::move(attrs))});
  }
  AttrMap attrs{{"shape", creationShape(a, b)}};
  if (auto d = toDType(a, b.at("dtype"))) attrs["dtype"] = Attr(*d);
  auto f = b.values.find("fill_value");
  if (f != b.values.end()) attrs["fill_value"] = scalarAttr(a, f->second, "fill_value");
  return a.emit1(row.op, {b.at("input")}, std::move(attrs));
}

LOWER(lowerArange) { // arange(end) | arange(start, end, step=1)
  checkCreationKw(a, b);
  std::vector<VarPtr> p;
  for (const char *n : {"start", "end", "step"})
    if (!isNoneVar(b.at(n))) p.push_back(b.at(n));
  bool allInt = true;
  for (const VarPtr &v : p)
    allInt &= fillDType(a, v) == DType::I64;
  // Integer bounds that are symbolic sizes (arange(x.shape[1]), arange(past, past + seq)) stay
  // symbolic; the step and float bounds are values known at capture time.
  auto bound = [&](const VarPtr &v, const char *what) {
    auto *s = as<SymIntVar>(v);
    if (allInt && s && !s->expr.isStatic()) return makeSizeAttr(s->expr);
    return scalarAttr(a, v, what);
  };
  AttrMap attrs;
  if (p.size() == 1) {
    attrs["end"] = bound(p[0], "end");
  } else if (p.size() >= 2) {
    attrs["start"] = bound(p[0], "start");
    attrs["end"] = bound(p[1], "end");
    if (p.size() == 3) attrs["step"] = scalarAttr(a, p[2], "step");
  } else {
    a.fail("arange() needs an end");
  }
  attrs["dtype"] = Attr(toDType(a, b.at("dtype")).value_or(allInt ? DType::I64 : defaultFloat()));
  return a.emit1("arange", {}, std::move(attrs));
}

LOWER(lowerLinspace) {
  checkCreationKw(a, b);
  AttrMap attrs{{"start", scalarAttr(a, b.at("start"), "start")},
                {"end", scalarAttr(a, b.at("end"), "end")},
                {"steps", Attr(toInt(a, b.at("steps"), "steps"))}};
  attrs["dtype"] = Attr(toDType(a, b.at("dtype")).value_or(defaultFloat()));
  return a.emit1("linspace", {}, std::move(attrs));
}

LOWER(lowerEye) {
  checkCreationKw(a, b);
  AttrMap attrs{{"n", Attr(toInt(a, b.at("n"), "n"))}};
  if (!isNoneVar(b.at("m"))) attrs["m"] = Attr(toInt(a, b.at("m"), "m"));
  attrs["dtype"] = Attr(toDType(a, b.at("dtype")).value_or(defaultFloat()));
  return a.emit1("eye", {}, std::move(attrs));
}

LOWER(lowerTensorCtor) { // torch.tensor / as_tensor of constants: a constant of the graph
  checkCreationKw(a, b);
  const VarPtr &data = b.at("data");
  if (data->kind == VarKind::Tensor) {
    if (auto d = toDType(a, b.at("dtype"))) return a.castTo(data, *d);
    return std::string(row.op) == "as_tensor" ? data : a.emit1("clone", {data});
  }
  PyRef p = a.asPython(data);
  if (!p) a.fail("torch.tensor() of values known only at run time");
  PyRef dtype = a.asPython(b.at("dtype"));
  PyRef fn = check(PyObject_GetAttrString(torchModule(), "tensor"), "torch.tensor");
  PyRef kw = check(Py_BuildValue("{sO}", "dtype", dtype ? dtype.get() : Py_None), "kw");
  PyRef args = check(PyTuple_Pack(1, p.get()), "args");
  PyObject *t = PyObject_Call(fn.get(), args.get(), kw.get());
  if (!t) {
    PyErr_Clear();
    a.fail("torch.tensor() raises on " + a.describe(data));
  }
  PyRef hold = PyRef::steal(t);
  return a.constantTensor(t);
}

LOWER(lowerCast) { // x.float() / x.long() ...: the row's op field names the dtype
  checkMemoryFormat(a, b, "preserve_format");
  return a.castTo(b.at("input"), *parseDType(row.op));
}

LOWER(lowerTo) { // to(dtype) | to(device, dtype=None) | to(other) | to(dtype=..., device=...)
  checkMemoryFormat(a, b, "preserve_format");
  VarPtr x = b.at("input");
  std::optional<DType> dtype;
  auto consider = [&](const VarPtr &v) {
    if (isNoneVar(v)) return;
    if (auto *t = as<TensorVar>(v)) {
      dtype = t->type().dtype();
      return;
    }
    auto *o = as<ObjectVar>(v);
    if (o && (dtypeFromTorch(o->obj.get()) || PyType_Check(o->obj.get()))) {
      dtype = toDType(a, v);
      return;
    }
    PyRef p = a.asPython(v);
    PyRef s = p ? PyRef::steal(PyObject_Str(p.get())) : PyRef();
    std::string dev = s ? utf8(s.get()) : "";
    if (dev != tensorOf(a, x, "input").type().device().str() && dev != "cpu")
      a.fail("moving a tensor to " + dev);
  };
  for (const VarPtr &v : b.varargs)
    consider(v);
  consider(b.at("dtype"));
  consider(b.at("device"));
  if (a.truthy(b.at("copy"))) return a.emit1("clone", {dtype ? a.castTo(x, *dtype) : x});
  return dtype ? a.castTo(x, *dtype) : x;
}

LOWER(lowerTypeAs) {
  return a.castTo(b.at("input"), tensorOf(a, b.at("other"), "other").type().dtype());
}

LOWER(lowerType) {
  if (isNoneVar(b.at("dtype"))) a.fail("tensor.type() returns a string describing the tensor");
  return a.castTo(b.at("input"), *toDType(a, b.at("dtype")));
}

LOWER(lowerDetach) { return detachedAlias(a, b.at("input")); }

LOWER(lowerIdentityOp) { // contiguous / clone in their default memory_format
  checkMemoryFormat(a, b, row.op == std::string("clone") ? "preserve_format" : "contiguous_format");
  // contiguous() of a view known to be contiguous is that view itself in eager (a write through
  // the result writes the base).
  if (row.op == std::string("contiguous"))
    if (auto *tv = as<TensorVar>(b.at("input"));
        tv && tv->base && tv->viewContiguous && tv->viewOpaque.empty()) {
      if (tv->viewAssumesContiguousBase) tv->base->stridesRead = true;
      return b.at("input");
    }
  // And of a tensor the graph computed (or a view of one) whose strides the layout rules know
  // to be contiguous: y.t() of a [1, n] y (the graph's `contiguous` would make other strides).
  if (row.op == std::string("contiguous"))
    if (auto *tv = as<TensorVar>(b.at("input"));
        tv && !tv->isInput && !(tv->base && tv->base->isInput) && tv->viewOpaque.empty())
      if (std::optional<std::vector<int64_t>> strides = a.computedStrides(a.irValue(b.at("input"))))
        if (std::optional<std::vector<int64_t>> sizes = staticSizesOf(tv->type());
            sizes && stridesAreContiguous(*sizes, *strides))
          return b.at("input");
  // So is contiguous() of an input whose strides are contiguous (size-1 dims ignored, as
  // PyTorch does: a [1, 4] input with strides (1, 1)), guarded on its strides; fuzzer seed
  // 14204: a write through x.contiguous()[:, 0] after a graph break must reach x.
  if (row.op == std::string("contiguous"))
    if (auto *tv = as<TensorVar>(b.at("input"));
        tv && tv->isInput && !tv->base && isStaticShape(tv->type().shape()) &&
        tv->inputStrides.size() == tv->type().shape().size()) {
      std::vector<int64_t> sizes;
      for (const DimExpr &d : tv->type().shape())
        sizes.push_back(d.value());
      std::vector<int64_t> expect = contiguousStrides(sizes);
      bool contiguous = true;
      for (size_t i = 0; i < sizes.size(); ++i)
        contiguous = contiguous && (sizes[i] == 1 || tv->inputStrides[i] == expect[i]);
      if (contiguous) {
        tv->stridesRead = true;
        return b.at("input");
      }
    }
  return a.emit1(row.op, {b.at("input")});
}

/// A PyTorch fallback node calling xjit._dropout.<fn>(args): the noise of a dropout, drawn by
/// PyTorch from its global generator as eager draws it. Its operands are empty_like()s (shapes
/// and dtypes only), so no gradient reaches the call. `type` is the noise's (symbolic sizes
/// too: the noise follows its operands' shapes at every call).
VarPtr dropoutNoise(Analyzer &a, const char *fn, const Args &args, Type type) {
  PyRef noiseFn =
      check(PyObject_GetAttrString(
                check(PyImport_ImportModule("xjit._dropout"), "xjit._dropout").get(), fn),
            "xjit._dropout");
  const std::vector<Type> types{std::move(type)};
  return a.fallbackCall(noiseFn.get(), "F.dropout's noise", args, &types);
}

LOWER(lowerDropout) { // F.dropout(input, p, training, inplace): identity unless training
  if (!a.truthy(b.at("training"))) return b.at("input");
  std::optional<double> p = a.asNumber(b.at("p"));
  if (p && *p == 0.0) return b.at("input");
  if (a.truthy(b.at("inplace"))) a.fail("in-place dropout in training mode");
  // dropout1d/2d/3d on a batched input ([N, C, spatial...]): one draw per channel
  // (_VF.feature_dropout); an unbatched input takes PyTorch's own path below.
  const std::string_view op = row.op;
  const Type &inType = tensorOf(a, b.at("input"), "input").type();
  const int64_t rank = inType.rank();
  const bool feature =
      op.size() == 9 && op.starts_with("dropout") && op.back() == 'd' && rank == (op[7] - '0') + 2;
  if ((op == "dropout" || feature) && p && *p > 0.0 && *p < 1.0) {
    // PyTorch draws the noise (xjit._dropout.noise: eager's bernoulli_/div_ on the same
    // generator), the product is compiled. Its operand, empty_like(input), gives the call the
    // input's shape and dtype and no gradient path, so a training step differentiates the
    // product (g * noise) and saves the noise for the backward.
    Args args;
    args.pos = {a.emit1("empty_like", {b.at("input")}), b.at("p"),
                a.constant(feature ? Py_True : Py_False)};
    Shape shape = inType.shape(); // feature: [N, C, 1, ...]
    for (size_t d = 2; feature && d < shape.size(); ++d)
      shape[d] = DimExpr(1);
    VarPtr noise = dropoutNoise(a, "noise", args, inType.withShape(shape));
    // Eager's bernoulli_ fills empty_like(input) in memory order: the driver gives the call a
    // like in eager's order of the input's dims (layoutNoiseInEagersOrder). Channel noise is
    // made contiguous by eager whatever the input's layout.
    if (!feature) a.irValue(noise)->definingOp()->setAttr("layout_of", Attr(int64_t(0)));
    return a.emit1("mul", {b.at("input"), noise});
  }
  // PyTorch draws the mask at run time (same random stream as eager).
  PyRef fn = check(PyObject_GetAttrString(
                       check(PyImport_ImportModule("torch.nn.functional"), "F").get(), row.op),
                   "F.dropout");
  Args args;
  args.pos = {b.at("input"), b.at("p"), b.at("training")};
  return a.fallbackCall(fn.get(), std::string("F.") + row.op, args);
}

/// F.<name>(input, target, **kwargs) called as a PyTorch fallback node: the forms of a loss a
/// lowering does not cover.
VarPtr callFunctional(Analyzer &a, BoundArgs &b, const char *name,
                      std::initializer_list<const char *> keywords) {
  PyRef fn = check(
      PyObject_GetAttrString(check(PyImport_ImportModule("torch.nn.functional"), "F").get(), name),
      name);
  Args args;
  args.pos = {b.at("input"), b.at("target")};
  for (const char *k : keywords)
    args.kw.emplace_back(k, b.at(k));
  return a.fallbackCall(fn.get(), std::string("F.") + name, args);
}

/// The `reduction` argument of a loss ("mean", "sum", "none"), or "" if it is not a string.
std::string lossReduction(Analyzer &a, BoundArgs &b) {
  PyRef r = a.asPython(b.at("reduction"));
  return r && PyUnicode_Check(r.get()) ? utf8(r.get()) : "";
}

/// Reduces an elementwise loss as asked: "none" keeps it, "sum" / "mean" over every element.
VarPtr reduceLoss(Analyzer &a, const VarPtr &loss, const std::string &reduction) {
  if (reduction == "none") return loss;
  return a.emit1(reduction == "sum" ? "sum" : "mean", {loss},
                 {{"dims", Attr(std::vector<int64_t>{})}});
}

/// F.binary_cross_entropy_with_logits as ATen computes it: (1 - t) * x - log_sigmoid(x), the
/// log-sigmoid scaled by (pos_weight - 1) * t + 1 first, the loss by weight after (transformers'
/// multi-label heads). Other forms (shapes that differ, the deprecated size_average/reduce)
/// stay PyTorch calls.
LOWER(lowerBceWithLogits) {
  const Type &it = tensorOf(a, b.at("input"), "input").type();
  auto *tv = as<TensorVar>(b.at("target"));
  const std::string reduction = lossReduction(a, b);
  auto floatTensorOrNone = [&](const char *name) {
    auto *w = as<TensorVar>(b.at(name));
    return b.isNone(name) || (w && w->type().dtype() == it.dtype());
  };
  if (!tv || !isFloating(it.dtype()) || tv->type().dtype() != it.dtype() ||
      tv->type().shape() != it.shape() || !b.isNone("size_average") || !b.isNone("reduce") ||
      !floatTensorOrNone("weight") || !floatTensorOrNone("pos_weight") ||
      !(reduction == "mean" || reduction == "sum" || reduction == "none"))
    return callFunctional(a, b, "binary_cross_entropy_with_logits",
                          {"weight", "size_average", "reduce", "reduction", "pos_weight"});
  const VarPtr &x = b.at("input"), &t = b.at("target");
  VarPtr one = a.constantSteal(PyFloat_FromDouble(1.0));
  VarPtr logSig = a.emit1("log_sigmoid", {x});
  if (!b.isNone("pos_weight")) {
    VarPtr logWeight =
        a.emit1("add", {a.emit1("mul", {a.emit1("sub", {b.at("pos_weight"), one}), t}), one});
    logSig = a.emit1("mul", {logSig, logWeight});
  }
  VarPtr loss = a.emit1("sub", {a.emit1("mul", {a.emit1("sub", {one, t}), x}), logSig});
  if (!b.isNone("weight")) loss = a.emit1("mul", {loss, b.at("weight")});
  return reduceLoss(a, loss, reduction);
}

// F.mse_loss of two floating tensors of one dtype: mean/sum/none of (input - target)^2 over
// their broadcast shape in the graph, so that a step computing it inside the compiled frame
// trains compiled. Different shapes broadcast as PyTorch broadcasts them, with its UserWarning,
// given once when the frame is captured (eager's default warning filter also shows it once per
// place); where warnings are errors PyTorch is called and raises. An element weight and the
// deprecated size_average / reduce still call PyTorch.
LOWER(lowerMseLoss) {
  const Type &it = tensorOf(a, b.at("input"), "input").type();
  auto *tv = as<TensorVar>(b.at("target"));
  std::string reduction = lossReduction(a, b);
  bool lowered = tv && isFloating(it.dtype()) && tv->type().dtype() == it.dtype() &&
                 b.isNone("weight") && b.isNone("size_average") && b.isNone("reduce") &&
                 (reduction == "mean" || reduction == "sum" || reduction == "none");
  if (lowered && tv->type().shape() != it.shape()) {
    auto torchSize = [](const Shape &shape) { // as PyTorch prints it: torch.Size([4, 3])
      std::string text = "torch.Size([";
      for (size_t i = 0; i < shape.size(); ++i)
        text += (i ? ", " : "") + std::to_string(shape[i].value());
      return text + "])";
    };
    lowered = isStaticShape(tv->type().shape()) && isStaticShape(it.shape());
    const std::string msg =
        !lowered ? ""
                 : "Using a target size (" + torchSize(tv->type().shape()) +
                       ") that is different to the input size (" + torchSize(it.shape()) +
                       "). This will likely lead to incorrect results due to broadcasting. "
                       "Please ensure they have the same size.";
    if (lowered && PyErr_WarnEx(PyExc_UserWarning, msg.c_str(), 1) != 0) {
      PyErr_Clear();
      lowered = false;
    }
  }
  if (!lowered)
    return callFunctional(a, b, "mse_loss", {"size_average", "reduce", "reduction", "weight"});
  VarPtr d = a.emit1("sub", {b.at("input"), b.at("target")});
  return reduceLoss(a, a.emit1("mul", {d, d}), reduction);
}

// F.cross_entropy as PyTorch computes it (aten cross_entropy_loss), in the graph so that a step
// computing its loss inside the compiled frame trains compiled (autodiff rules for log_softmax,
// gather, where and the reductions):
// - class-index targets: nll = -log_softmax(input)[target] along the class dim (1, or 0 for one
//   unbatched row), times weight[target] with class weights, 0 where target == ignore_index;
//   sum, none, or the mean: divided by the number of targets not ignored (NaN when all are), or
//   with weights by the sum of their weights. label_smoothing e mixes in the smooth loss
//   -sum_c(log_softmax * weight) (0 where ignored), reduced the same way:
//   (1 - e) * nll + e / C * smooth.
// - probability targets (the input's shape and dtype): -sum(log_softmax * target' * weight)
//   with target' = target * (1 - e) + e / C; the mean divides by numel / C.
// Class weights that require grad, dynamic class counts and the deprecated size_average /
// reduce still call PyTorch.
LOWER(lowerCrossEntropy) {
  const VarPtr &input = b.at("input"), &target = b.at("target"), &weight = b.at("weight");
  const Type &it = tensorOf(a, input, "input").type();
  auto *tv = as<TensorVar>(target);
  auto *wv = as<TensorVar>(weight);
  std::string reduction = lossReduction(a, b);
  std::optional<double> smoothing = a.asNumber(b.at("label_smoothing"));
  std::optional<int64_t> ignore = a.asInt(b.at("ignore_index"));
  const int64_t classDim = it.rank() == 1 ? 0 : 1;
  std::optional<int64_t> classes;
  if (it.rank() >= 1) classes = it.shape()[size_t(classDim)].staticValue();
  const bool weighted = !b.isNone("weight");
  const bool common =
      tv && isFloating(it.dtype()) && it.rank() >= 1 && classes && *classes > 0 &&
      (!weighted || (wv && wv->type().dtype() == it.dtype() && wv->type().rank() == 1)) &&
      b.isNone("size_average") && b.isNone("reduce") && smoothing && *smoothing >= 0.0 &&
      *smoothing <= 1.0 && (reduction == "mean" || reduction == "sum" || reduction == "none");
  const bool indices =
      common && tv->type().dtype() == DType::I64 && tv->type().rank() + 1 == it.rank() && ignore;
  const bool probabilities = common && tv->type() == it && isStaticShape(it.shape());
  if (!indices && !probabilities)
    return callFunctional(
        a, b, "cross_entropy",
        {"weight", "size_average", "ignore_index", "reduce", "reduction", "label_smoothing"});
  const double e = *smoothing, c = static_cast<double>(*classes);
  auto constant = [&a](PyObject *o) { return a.constantSteal(o); };
  auto number = [&](double v) { return constant(PyFloat_FromDouble(v)); };
  auto sumAll = [&](const VarPtr &v) {
    return a.emit1("sum", {v}, {{"dims", Attr(std::vector<int64_t>{})}});
  };
  auto sumClasses = [&](const VarPtr &v) {
    return a.emit1("sum", {v}, {{"dims", Attr(std::vector<int64_t>{classDim})}});
  };
  VarPtr logp = a.emit1("log_softmax", {input}, {{"dim", Attr(classDim)}});
  VarPtr classWeight; // weight viewed along the class dim: [C] or [1, C, 1...]
  if (weighted) {
    std::vector<int64_t> view(size_t(it.rank()), 1);
    view[size_t(classDim)] = *classes;
    classWeight = a.emit1("reshape", {weight}, {{"shape", Attr(view)}});
  }
  if (probabilities) {
    VarPtr t = target;
    if (e > 0.0) t = a.emit1("add", {a.emit1("mul", {t, number(1.0 - e)}), number(e / c)});
    VarPtr prod = a.emit1("mul", {logp, t});
    if (weighted) prod = a.emit1("mul", {prod, classWeight});
    if (reduction == "none") return a.emit1("neg", {sumClasses(prod)});
    VarPtr total = a.emit1("neg", {sumAll(prod)});
    if (reduction == "sum") return total;
    int64_t n = 1;
    for (const DimExpr &d : it.shape())
      n *= d.value();
    return a.emit1("div", {total, constant(PyLong_FromLongLong(n / *classes))});
  }
  VarPtr keep = a.emit1("ne", {target, constant(PyLong_FromLongLong(*ignore))});
  VarPtr safe = a.emit1("where", {keep, target, constant(PyLong_FromLong(0))});
  VarPtr index = a.emit1("unsqueeze", {safe}, {{"dim", Attr(classDim)}});
  VarPtr picked = a.emit1("squeeze", {a.emit1("gather", {logp, index}, {{"dim", Attr(classDim)}})},
                          {{"dim", Attr(std::vector<int64_t>{classDim})}});
  VarPtr zero = number(0.0);
  VarPtr targetWeight; // weight[target], 0 where ignored
  VarPtr nll = a.emit1("neg", {picked});
  if (weighted) {
    targetWeight = a.emit1("where", {keep, a.emit1("index", {weight, safe}), zero});
    nll = a.emit1("mul", {nll, targetWeight});
  }
  nll = a.emit1("where", {keep, nll, zero});
  // The mean's divisor: the targets not ignored, or the sum of their weights.
  auto divisor = [&]() { return weighted ? sumAll(targetWeight) : sumAll(keep); };
  auto reduced = [&](const VarPtr &loss) {
    if (reduction != "mean") return reduceLoss(a, loss, reduction);
    return a.emit1("div", {sumAll(loss), divisor()});
  };
  if (e == 0.0) return reduced(nll);
  VarPtr smooth =
      a.emit1("neg", {sumClasses(weighted ? a.emit1("mul", {logp, classWeight}) : logp)});
  smooth = a.emit1("where", {keep, smooth, zero});
  return a.emit1("add", {a.emit1("mul", {reduced(nll), number(1.0 - e)}),
                         a.emit1("mul", {reduced(smooth), number(e / c)})});
}

LOWER(lowerConv) {
  const VarPtr &pad = b.at("padding");
  AttrMap attrs{{"stride", Attr(toInts(a, b.at("stride"), "stride"))},
                {"dilation", Attr(toInts(a, b.at("dilation"), "dilation"))},
                {"groups", Attr(toInt(a, b.at("groups"), "groups"))}};
  PyRef p = a.asPython(pad);
  if (p && PyUnicode_Check(p.get()))
    attrs["padding_mode"] = Attr(utf8(p.get()));
  else
    attrs["padding"] = Attr(toInts(a, pad, "padding"));
  std::vector<VarPtr> ops{b.at("input"), b.at("weight")};
  if (!isNoneVar(b.at("bias"))) ops.push_back(b.at("bias"));
  return a.emit1(row.op, ops, std::move(attrs));
}

LOWER(lowerConvTranspose) {
  AttrMap attrs{{"stride", Attr(toInts(a, b.at("stride"), "stride"))},
                {"padding", Attr(toInts(a, b.at("padding"), "padding"))},
                {"output_padding", Attr(toInts(a, b.at("output_padding"), "output_padding"))},
                {"dilation", Attr(toInts(a, b.at("dilation"), "dilation"))},
                {"groups", Attr(toInt(a, b.at("groups"), "groups"))}};
  std::vector<VarPtr> ops{b.at("input"), b.at("weight")};
  if (!isNoneVar(b.at("bias"))) ops.push_back(b.at("bias"));
  return a.emit1(row.op, ops, std::move(attrs));
}

LOWER(lowerPool) { // max_poolNd / avg_poolNd
  std::string op = row.op;
  bool isMax = op.rfind("max", 0) == 0;
  AttrMap attrs{{"kernel_size", Attr(toInts(a, b.at("kernel_size"), "kernel_size"))},
                {"padding", Attr(toInts(a, b.at("padding"), "padding"))},
                {"ceil_mode", Attr(a.truthy(b.at("ceil_mode")))}};
  if (!isNoneVar(b.at("stride"))) {
    std::vector<int64_t> s = toInts(a, b.at("stride"), "stride");
    if (!s.empty()) attrs["stride"] = Attr(s);
  }
  if (isMax) {
    attrs["dilation"] = Attr(toInts(a, b.at("dilation"), "dilation"));
    if (a.truthy(b.at("return_indices"))) {
      std::vector<VarPtr> rs = a.emit(op + "_with_indices", {b.at("input")}, std::move(attrs));
      return std::make_shared<TupleVar>(std::move(rs));
    }
  } else {
    attrs["count_include_pad"] = Attr(a.truthy(b.at("count_include_pad")));
    auto d = b.values.find("divisor_override");
    if (d != b.values.end() && !isNoneVar(d->second))
      attrs["divisor_override"] = Attr(toInt(a, d->second, "divisor_override"));
  }
  return a.emit1(op, {b.at("input")}, std::move(attrs));
}

LOWER(lowerAdaptivePool) {
  const TensorVar &t = tensorOf(a, b.at("input"), "input");
  std::string op = row.op;
  int nd = op[op.size() - 2] - '0'; // adaptive_avg_pool2d -> 2
  const VarPtr &os = b.at("output_size");
  std::vector<VarPtr> items;
  if (os->kind == VarKind::Tuple || os->kind == VarKind::List ||
      (as<ObjectVar>(os) && PyTuple_Check(as<ObjectVar>(os)->obj.get())))
    items = a.sequenceItems(os, "output_size");
  else
    items.assign(static_cast<size_t>(nd), os);
  std::vector<int64_t> sizes;
  for (size_t i = 0; i < items.size(); ++i) {
    if (isNoneVar(items[i])) { // None keeps the input's size
      int64_t dim = t.type().rank() - static_cast<int64_t>(items.size()) + static_cast<int64_t>(i);
      sizes.push_back(toInt(a, a.sizeOf(b.at("input"), dim), "output_size"));
    } else {
      sizes.push_back(toInt(a, items[i], "output_size"));
    }
  }
  auto ri = b.values.find("return_indices");
  if (ri != b.values.end() && a.truthy(ri->second)) {
    std::vector<VarPtr> rs =
        a.emit(op + "_with_indices", {b.at("input")}, {{"output_size", Attr(sizes)}});
    return std::make_shared<TupleVar>(std::move(rs));
  }
  // A global average pool is a mean over H and W, as ATen computes it (adaptive_avg_pool2d's
  // special case): one reduction kernel, fused with the activation before it, where the pool
  // ran as a oneDNN call (ResNet's [8, 512, 7, 7]: 29 -> 15 us).
  if (nd == 2 && sizes == std::vector<int64_t>{1, 1} && t.type().rank() >= 3)
    return a.emit1("mean", {b.at("input")},
                   {{"dims", Attr(std::vector<int64_t>{-2, -1})}, {"keepdim", Attr(true)}});
  return a.emit1(op, {b.at("input")}, {{"output_size", Attr(sizes)}});
}

LOWER(lowerBatchNorm) {
  VarPtr x = b.at("input"), rm = b.at("running_mean"), rv = b.at("running_var");
  VarPtr w = isNoneVar(b.at("weight")) ? a.none() : b.at("weight");
  VarPtr bias = isNoneVar(b.at("bias")) ? a.none() : b.at("bias");
  bool training = a.truthy(b.at("training"));
  AttrMap attrs{{"eps", scalarAttr(a, b.at("eps"), "eps")}};
  if (training && !isNoneVar(rm) && !isNoneVar(rv)) {
    // Running statistics are updated in place: functional update + write-back.
    std::optional<double> mom = a.asNumber(b.at("momentum"));
    attrs["momentum"] = Attr(mom.value_or(0.0));
    std::vector<VarPtr> rs =
        a.emit("batch_norm_with_update", {x, w, bias, rm, rv}, std::move(attrs));
    a.assignInPlace(rm, rs[1]);
    a.assignInPlace(rv, rs[2]);
    return rs[0];
  }
  attrs["training"] = Attr(training);
  std::vector<VarPtr> ops{x, w, bias, isNoneVar(rm) ? a.none() : rm, isNoneVar(rv) ? a.none() : rv};
  while (ops.size() > 1 && isNoneVar(ops.back()))
    ops.pop_back();
  return a.emit1("batch_norm", ops, std::move(attrs));
}

LOWER(lowerNormShape) { // layer_norm / rms_norm: normalized_shape int or sequence
  const OpDef &def = OpRegistry::instance().get(row.op);
  AttrMap attrs{
      {"normalized_shape", Attr(toInts(a, b.at("normalized_shape"), "normalized_shape"))}};
  if (!isNoneVar(b.at("eps"))) attrs["eps"] = scalarAttr(a, b.at("eps"), "eps");
  std::vector<VarPtr> ops{b.at("input"), isNoneVar(b.at("weight")) ? a.none() : b.at("weight")};
  if (def.maxOperands() > 2) ops.push_back(isNoneVar(b.at("bias")) ? a.none() : b.at("bias"));
  while (ops.size() > 1 && isNoneVar(ops.back()))
    ops.pop_back();
  return a.emit1(row.op, ops, std::move(attrs));
}

LOWER(lowerEmbedding) {
  if (!isNoneVar(b.at("max_norm")))
    a.fail("F.embedding with max_norm (renormalizes the weight in place)");
  AttrMap attrs;
  if (!isNoneVar(b.at("padding_idx"))) {
    int64_t p = toInt(a, b.at("padding_idx"), "padding_idx");
    if (p < 0) p += tensorOf(a, b.at("weight"), "weight").type().shape()[0].value();
    attrs["padding_idx"] = Attr(p);
  }
  return a.emit1("embedding", {b.at("weight"), b.at("input")}, std::move(attrs));
}

LOWER(lowerIsFloatingPoint) { // a property of the dtype, known at capture
  return a.boolean(isFloating(tensorOf(a, b.at("input"), "input").type().dtype()));
}

LOWER(lowerPad) {
  AttrMap attrs{{"pad", Attr(toInts(a, b.at("pad"), "pad"))}};
  PyRef mode = a.asPython(b.at("mode"));
  if (mode) attrs["mode"] = Attr(utf8(mode.get()));
  if (!isNoneVar(b.at("value"))) attrs["value"] = scalarAttr(a, b.at("value"), "value");
  return a.emit1("pad", {b.at("input")}, std::move(attrs));
}

/// The type of attention's softmax weights [.., L, S]: query's and key's batch dims broadcast
/// (key's heads as query's under enable_gqa). Symbolic dims broadcast only when equal or
/// against a static 1 (else a graph break).
Type attentionWeightsType(Analyzer &a, BoundArgs &b, bool gqa) {
  const Type &q = tensorOf(a, b.at("query"), "query").type();
  const Shape &qs = q.shape(), &ks = tensorOf(a, b.at("key"), "key").type().shape();
  if (qs.size() < 2 || ks.size() < 2) a.fail("scaled_dot_product_attention of a tensor below 2-D");
  Shape qb(qs.begin(), qs.end() - 2), kb(ks.begin(), ks.end() - 2);
  if (gqa && !qb.empty() && !kb.empty()) kb.back() = qb.back();
  if (qb.size() < kb.size()) std::swap(qb, kb);
  Shape out = qb;
  for (size_t i = 0; i < kb.size(); ++i) {
    DimExpr &o = out[out.size() - kb.size() + i];
    const DimExpr &k = kb[i];
    if (o == k || k == DimExpr(1)) continue;
    if (o == DimExpr(1))
      o = k;
    else
      a.fail("scaled_dot_product_attention with dropout: batch dims " + shapeStr(qb) + " and " +
             shapeStr(kb) + " that do not broadcast");
  }
  out.push_back(qs[qs.size() - 2]);
  out.push_back(ks[ks.size() - 2]);
  return q.withShape(out);
}

LOWER(lowerSdpa) {
  std::optional<double> p = a.asNumber(b.at("dropout_p"));
  if (!p || *p < 0.0 || *p >= 1.0)
    a.fail("scaled_dot_product_attention with a dropout_p that is not a number in [0, 1)");
  const bool gqa = a.truthy(b.at("enable_gqa"));
  AttrMap attrs{{"is_causal", Attr(a.truthy(b.at("is_causal")))}, {"enable_gqa", Attr(gqa)}};
  if (!isNoneVar(b.at("scale"))) attrs["scale"] = scalarAttr(a, b.at("scale"), "scale");
  std::vector<VarPtr> ops{b.at("query"), b.at("key"), b.at("value")};
  const bool masked = !isNoneVar(b.at("attn_mask"));
  if (masked || *p > 0.0) ops.push_back(masked ? b.at("attn_mask") : a.none());
  if (*p > 0.0) {
    // Eager's CPU attention with dropout is the math path: softmax weights, then at::dropout of
    // them (one bernoulli_ draw of the weights' shape), then the product with value. The op
    // takes that noise as an operand (the weights' multiplier), drawn as eager draws it.
    Args args;
    args.pos = {a.emit1("empty_like", {b.at("query")}), a.emit1("empty_like", {b.at("key")}),
                b.at("dropout_p"), a.constant(gqa ? Py_True : Py_False)};
    ops.push_back(dropoutNoise(a, "attention_noise", args, attentionWeightsType(a, b, gqa)));
  }
  return a.emit1("scaled_dot_product_attention", ops, std::move(attrs));
}

LOWER(lowerMaskedFill) {
  const VarPtr &v = b.at("value");
  if (v->kind == VarKind::Tensor) return a.emit1("masked_fill", {b.at("input"), b.at("mask"), v});
  return a.emit1("masked_fill", {b.at("input"), b.at("mask")},
                 {{"value", scalarAttr(a, v, "value")}});
}

LOWER(lowerScatter) { // scatter(input, dim, index, src | value, reduce=None)
  AttrMap attrs{{"dim", Attr(toInt(a, b.at("dim"), "dim"))}};
  if (!isNoneVar(b.at("reduce"))) {
    PyRef r = a.asPython(b.at("reduce"));
    attrs["reduce"] = Attr(utf8(r.get()));
  }
  const VarPtr &src = b.at("src");
  if (src->kind == VarKind::Tensor)
    return a.emit1("scatter", {b.at("input"), b.at("index"), src}, std::move(attrs));
  attrs["value"] = scalarAttr(a, isNoneVar(src) ? b.at("value") : src, "value");
  return a.emit1("scatter", {b.at("input"), b.at("index")}, std::move(attrs));
}

// x with `values` written (accumulate: added) at a 0-d or 1-D `index` along dim: index_put with
// `none` for the dims before it, index_copy / index_add / scatter_add's form. Those ops reject
// negative indices where index_put wraps them: such indices become out of range, so the kernel
// raises as eager does (then the frame reruns in Python, where eager raises its own error).
VarPtr putAlongDim(Analyzer &a, const VarPtr &x, const VarPtr &values, int64_t dim,
                   const VarPtr &index, bool accumulate) {
  std::vector<VarPtr> operands{x, values};
  for (int64_t d = 0; d < dim; ++d)
    operands.push_back(a.none());
  VarPtr negative = a.emit1("lt", {index, a.integer(0)});
  VarPtr huge = a.emit1("full", {},
                        {{"shape", Attr(std::vector<int64_t>{})},
                         {"dtype", Attr(DType::I64)},
                         {"fill_value", Attr(int64_t(1) << 62)}});
  VarPtr checked = a.emit1("where", {negative, huge, index});
  if (as<TensorVar>(index)->type().rank() == 0)
    checked = a.emit1("reshape", {checked}, {{"shape", Attr(std::vector<int64_t>{1})}});
  operands.push_back(checked);
  return a.emit1("index_put", operands, {{"accumulate", Attr(accumulate)}});
}

// scatter_add(input, dim, index, src) whose index is one 1-D index broadcast over every other
// dim (`idx.unsqueeze(1).expand_as(src)`, message passing's pattern) and covering input's other
// dims whole is `index_add`: an index_put accumulate with the 1-D index at dim, whose kernel
// adds whole rows (the general scatter_add kernel visits elements one by one, 3x eager).
LOWER(lowerScatterAdd) {
  VarPtr x = b.at("input"), index = b.at("index"), src = b.at("src");
  const int64_t dim = toInt(a, b.at("dim"), "dim");
  auto *xt = as<TensorVar>(x), *it = as<TensorVar>(index), *st = as<TensorVar>(src);
  auto rowIndex = [&]() -> Value * {
    if (!xt || !it || !st || it->type().shape() != st->type().shape()) return nullptr;
    const int64_t rank = xt->type().rank();
    if (rank < 2 || dim < -rank || dim >= rank || it->type().rank() != rank) return nullptr;
    const auto d = size_t(dim < 0 ? dim + rank : dim);
    const Op *expand = it->value->definingOp();
    if (!expand || expand->name() != "expand") return nullptr;
    const Value *column = expand->operand(0);
    const Op *shaped = column->definingOp();
    if (!shaped ||
        (shaped->name() != "unsqueeze" && shaped->name() != "reshape" && shaped->name() != "view"))
      return nullptr;
    Value *flat = shaped->operand(0);
    const Shape &is = it->type().shape(), &xs = xt->type().shape(), &cs = column->type().shape();
    if (flat->type().rank() != 1 || flat->type().dtype() != DType::I64 || cs.size() != is.size() ||
        cs[d] != is[d] || flat->type().shape()[0] != is[d])
      return nullptr;
    for (size_t j = 0; j < is.size(); ++j)
      if (j != d && (cs[j] != DimExpr(1) || is[j] != xs[j])) return nullptr;
    return flat;
  };
  if (Value *flat = rowIndex()) {
    const int64_t rank = xt->type().rank();
    return putAlongDim(a, x, src, dim < 0 ? dim + rank : dim, std::make_shared<TensorVar>(flat),
                       true);
  }
  return a.emit1("scatter_add", {x, index, src}, {{"dim", Attr(dim)}});
}

LOWER(lowerLerp) {
  const VarPtr &w = b.at("weight");
  if (w->kind == VarKind::Tensor) return a.emit1("lerp", {b.at("input"), b.at("end"), w});
  return a.emit1("lerp", {b.at("input"), b.at("end")}, {{"weight", scalarAttr(a, w, "weight")}});
}

LOWER(lowerRsub) {
  return a.emit1("sub", {b.at("other"), b.at("input")},
                 {{"alpha", scalarAttr(a, b.at("alpha"), "alpha")}});
}

LOWER(lowerDiv) {
  AttrMap attrs;
  if (!isNoneVar(b.at("rounding_mode"))) {
    PyRef m = a.asPython(b.at("rounding_mode"));
    attrs["rounding_mode"] = Attr(utf8(m.get()));
  }
  return finishInplace(a, b, b.at("input"),
                       a.emit1("div", {b.at("input"), b.at("other")}, std::move(attrs)));
}

LOWER(lowerMovedim) {
  return a.emit1("movedim", {b.at("input")},
                 {{"source", Attr(toInts(a, b.at("source"), "source"))},
                  {"destination", Attr(toInts(a, b.at("destination"), "destination"))}});
}

LOWER(lowerRoll) {
  AttrMap attrs{{"shifts", Attr(toInts(a, b.at("shifts"), "shifts"))}};
  if (!isNoneVar(b.at("dims"))) attrs["dims"] = Attr(toInts(a, b.at("dims"), "dims"));
  return a.emit1("roll", {b.at("input")}, std::move(attrs));
}

LOWER(lowerFlip) {
  std::vector<VarPtr> items = shapeArgs(a, b, "dims");
  std::vector<int64_t> dims;
  for (const VarPtr &v : items)
    dims.push_back(toInt(a, v, "dims"));
  return a.emit1("flip", {b.at("input")}, {{"dims", Attr(dims)}});
}

// index_copy(input, dim, index, source): source's slices written at `index` along dim, as
// index_put with the index at dim (an in-place index_copy_ on an input, a KV cache update, then
// runs in the input's memory: the runtime's reinplace). Eager's argument checks come first.
LOWER(lowerIndexCopy) {
  VarPtr x = b.at("input"), index = b.at("index"), source = b.at("source");
  const Type &ty = tensorOf(a, x, "input").value->type();
  const Type &it = tensorOf(a, index, "index").value->type();
  const Type &st = tensorOf(a, source, "source").value->type();
  int64_t dim = toInt(a, b.at("dim"), "dim");
  if (ty.rank() == 0 || dim < -ty.rank() || dim >= ty.rank())
    a.fail("index_copy() with dim " + std::to_string(dim) + " of a " + ty.str());
  if (dim < 0) dim += ty.rank();
  if (it.dtype() != DType::I64 || it.rank() > 1 || st.dtype() != ty.dtype())
    a.fail("index_copy() with index " + it.str() + " and source " + st.str() + " into " + ty.str() +
           " (eager raises)");
  Shape expected = ty.shape();
  expected[size_t(dim)] = it.rank() == 1 ? it.shape()[0] : DimExpr(1);
  if (st.shape() != expected)
    a.fail("index_copy() of a source " + st.str() + " that does not match the indexed slices");
  return putAlongDim(a, x, source, dim, index, false);
}

// index_put(input, indices, values, accumulate=False): one int64 index tensor per leading dim
// (Python's binding takes no None), or one boolean mask of input's shape with a 0-d value (a
// `where`, as `x[mask] = v`). Other calls (masks with data-dependent counts, other dtypes,
// where eager raises) stay PyTorch fallback nodes (nullptr), as before session 23.
LOWER(lowerIndexPut) {
  VarPtr x = b.at("input"), values = b.at("values");
  auto *xt = as<TensorVar>(x), *vt = as<TensorVar>(values);
  if (!xt || !vt || vt->type().dtype() != xt->type().dtype()) return nullptr;
  const Type &ty = xt->type();
  if (b.at("indices")->kind != VarKind::Tuple && b.at("indices")->kind != VarKind::List)
    return nullptr;
  std::vector<VarPtr> indices = a.sequenceItems(b.at("indices"), "index_put() indices");
  if (indices.empty() || int64_t(indices.size()) > ty.rank()) return nullptr;
  for (const VarPtr &i : indices)
    if (auto *it = as<TensorVar>(i);
        !it || (it->type().dtype() != DType::I64 &&
                (it->type().dtype() != DType::Bool || indices.size() > 1)))
      return nullptr;
  if (!isNoneVar(b.at("accumulate"))) {
    PyRef p = a.asPython(b.at("accumulate"));
    if (!p || !PyBool_Check(p.get())) return nullptr;
  }
  const bool accumulate = a.truthy(b.at("accumulate"));
  if (as<TensorVar>(indices[0])->type().dtype() == DType::Bool) {
    if (as<TensorVar>(indices[0])->type().shape() != ty.shape() || vt->type().rank() != 0)
      return nullptr; // the number of written elements depends on the data
    VarPtr written = accumulate ? a.emit1("add", {x, values}) : values;
    return a.emit1("where", {indices[0], written, x});
  }
  std::vector<VarPtr> operands{x, values};
  operands.insert(operands.end(), indices.begin(), indices.end());
  return a.emit1("index_put", operands, {{"accumulate", Attr(accumulate)}});
}

// index_add(input, dim, index, source, alpha=1): index_put accumulate with the index at dim
// (index_copy's form), source scaled by alpha first as eager's kernel does (self + alpha * src).
// Other calls stay PyTorch fallback nodes (nullptr).
LOWER(lowerIndexAdd) {
  VarPtr x = b.at("input"), index = b.at("index"), source = b.at("source");
  auto *xt = as<TensorVar>(x), *it = as<TensorVar>(index), *st = as<TensorVar>(source);
  std::optional<int64_t> dim = a.asInt(b.at("dim"));
  std::optional<double> alpha = a.asNumber(b.at("alpha"));
  if (!xt || !it || !st || !dim || !alpha) return nullptr;
  const Type &ty = xt->type();
  const int64_t rank = ty.rank();
  if (rank == 0 || *dim < -rank || *dim >= rank || it->type().dtype() != DType::I64 ||
      it->type().rank() > 1 || st->type().dtype() != ty.dtype())
    return nullptr;
  const int64_t d = *dim < 0 ? *dim + rank : *dim;
  Shape expected = ty.shape();
  expected[size_t(d)] = it->type().rank() == 1 ? it->type().shape()[0] : DimExpr(1);
  if (st->type().shape() != expected) return nullptr; // (eager raises, or broadcasts a 0-d)
  if (*alpha != 1) source = a.emit1("mul", {source, b.at("alpha")});
  return putAlongDim(a, x, source, d, index, true);
}

LOWER(lowerTakeAlongDim) {
  AttrMap attrs;
  if (!isNoneVar(b.at("dim"))) attrs["dim"] = Attr(toInt(a, b.at("dim"), "dim"));
  return a.emit1("take_along_dim", {b.at("input"), b.at("indices")}, std::move(attrs));
}

LOWER(lowerDiff) { // diff(input, n=1, dim=-1, prepend=None, append=None): slices and sub
  int64_t n = toInt(a, b.at("n"), "n"), dim = toInt(a, b.at("dim"), "dim");
  if (n < 0) a.fail("torch.diff() with a negative order");
  VarPtr x = b.at("input");
  std::vector<VarPtr> parts;
  if (!isNoneVar(b.at("prepend"))) parts.push_back(b.at("prepend"));
  parts.push_back(x);
  if (!isNoneVar(b.at("append"))) parts.push_back(b.at("append"));
  for (const VarPtr &p : parts)
    tensorOf(a, p, "torch.diff operand");
  if (parts.size() > 1) x = a.emit1("cat", parts, {{"dim", Attr(dim)}});
  const bool isBool = tensorOf(a, x, "input").value->type().dtype() == DType::Bool;
  for (int64_t k = 0; k < n; ++k) {
    VarPtr hi = a.emit1("slice", {x}, {{"dim", Attr(dim)}, {"start", Attr(int64_t(1))}});
    VarPtr lo = a.emit1("slice", {x}, {{"dim", Attr(dim)}, {"end", Attr(int64_t(-1))}});
    x = a.emit1(isBool ? "logical_xor" : "sub", {hi, lo});
  }
  return x;
}

#undef LOWER

// ---- the table ----

// torch.lstm and its kin: the overload nn.RNNBase calls on a padded (not packed) input.
constexpr const char *kRecurrentSignature =
    "input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first";

const std::vector<TorchRow> &table() {
  static const std::vector<TorchRow> rows = {
      // Unary elementwise (torch.X, Tensor.X).
      {"torch.abs torch.absolute Tensor.abs Tensor.absolute", "input", "abs", "input"},
      {"torch.acos torch.arccos Tensor.acos Tensor.arccos", "input", "acos", "input"},
      {"torch.acosh torch.arccosh Tensor.acosh Tensor.arccosh", "input", "acosh", "input"},
      {"torch.asin torch.arcsin Tensor.asin Tensor.arcsin", "input", "asin", "input"},
      {"torch.asinh torch.arcsinh Tensor.asinh Tensor.arcsinh", "input", "asinh", "input"},
      {"torch.atan torch.arctan Tensor.atan Tensor.arctan", "input", "atan", "input"},
      {"torch.atanh torch.arctanh Tensor.atanh Tensor.arctanh", "input", "atanh", "input"},
      {"torch.ceil Tensor.ceil", "input", "ceil", "input"},
      {"torch.cos Tensor.cos", "input", "cos", "input"},
      {"torch.cosh Tensor.cosh", "input", "cosh", "input"},
      {"torch.erf torch.special.erf Tensor.erf", "input", "erf", "input"},
      {"torch.erfc torch.special.erfc Tensor.erfc", "input", "erfc", "input"},
      {"torch.exp Tensor.exp", "input", "exp", "input"},
      {"torch.exp2 torch.special.exp2 Tensor.exp2", "input", "exp2", "input"},
      {"torch.expm1 torch.special.expm1 Tensor.expm1", "input", "expm1", "input"},
      {"torch.floor Tensor.floor", "input", "floor", "input"},
      {"torch.frac Tensor.frac", "input", "frac", "input"},
      {"torch.lgamma Tensor.lgamma", "input", "lgamma", "input"},
      {"torch.log Tensor.log", "input", "log", "input"},
      {"torch.log10 Tensor.log10", "input", "log10", "input"},
      {"torch.log1p torch.special.log1p Tensor.log1p", "input", "log1p", "input"},
      {"torch.log2 Tensor.log2", "input", "log2", "input"},
      {"torch.neg torch.negative Tensor.neg Tensor.negative", "input", "neg", "input"},
      {"torch.reciprocal Tensor.reciprocal", "input", "reciprocal", "input"},
      {"torch.rsqrt Tensor.rsqrt", "input", "rsqrt", "input"},
      {"torch.sigmoid torch.special.expit Tensor.sigmoid F.sigmoid", "input", "sigmoid", "input"},
      {"torch.sign torch.sgn Tensor.sign Tensor.sgn", "input", "sign", "input"},
      {"torch.signbit Tensor.signbit", "input", "signbit", "input"},
      {"torch.sin Tensor.sin", "input", "sin", "input"},
      {"torch.sinh Tensor.sinh", "input", "sinh", "input"},
      {"torch.sqrt Tensor.sqrt", "input", "sqrt", "input"},
      {"torch.square Tensor.square", "input", "square", "input"},
      {"torch.tan Tensor.tan", "input", "tan", "input"},
      {"torch.tanh Tensor.tanh F.tanh", "input", "tanh", "input"},
      {"torch.trunc torch.fix Tensor.trunc Tensor.fix", "input", "trunc", "input"},
      {"torch.isfinite Tensor.isfinite", "input", "isfinite", "input"},
      {"torch.isinf Tensor.isinf", "input", "isinf", "input"},
      {"torch.isnan Tensor.isnan", "input", "isnan", "input"},
      {"torch.isneginf Tensor.isneginf", "input", "isneginf", "input"},
      {"torch.isposinf Tensor.isposinf", "input", "isposinf", "input"},
      {"torch.logical_not Tensor.logical_not", "input", "logical_not", "input"},
      {"torch.bitwise_not Tensor.bitwise_not", "input", "bitwise_not", "input"},
      {"torch.round Tensor.round", "input, *, decimals=0", "round", "input | decimals"},
      {"torch.nan_to_num Tensor.nan_to_num", "input, nan=0.0, posinf=None, neginf=None",
       "nan_to_num", "input | nan posinf neginf"},
      {"torch.logit torch.special.logit Tensor.logit", "input, eps=None", "logit", "input | eps"},
      // Activations (torch.nn.functional and torch.*).
      {"torch.relu Tensor.relu F.relu", "input, inplace=False", "relu", "input"},
      {"F.relu6", "input, inplace=False", "relu6", "input"},
      {"F.gelu", "input, approximate='none'", "gelu", "input | approximate"},
      {"F.normalize", "input, p=2.0, dim=1, eps=1e-12, out=None", "norm", "", lowerNormalize},
      {"F.silu", "input, inplace=False", "silu", "input"},
      {"F.mish", "input, inplace=False", "mish", "input"},
      {"F.hardsigmoid", "input, inplace=False", "hardsigmoid", "input"},
      {"F.hardswish", "input, inplace=False", "hardswish", "input"},
      {"torch.selu F.selu", "input, inplace=False", "selu", "input"},
      {"F.logsigmoid", "input", "log_sigmoid", "input"},
      {"F.elu", "input, alpha=1.0, inplace=False", "elu", "input | alpha"},
      {"torch.celu F.celu", "input, alpha=1.0, inplace=False", "celu", "input | alpha"},
      {"F.leaky_relu", "input, negative_slope=0.01, inplace=False", "leaky_relu",
       "input | negative_slope"},
      {"F.hardtanh", "input, min_val=-1.0, max_val=1.0, inplace=False", "hardtanh",
       "input | min_val max_val"},
      {"F.softplus", "input, beta=1, threshold=20", "softplus", "input | beta threshold"},
      {"torch.softmax Tensor.softmax F.softmax", "input, dim=None, _stacklevel=3, dtype=None",
       "softmax", "", lowerSoftmax},
      {"torch.log_softmax Tensor.log_softmax F.log_softmax",
       "input, dim=None, _stacklevel=3, dtype=None", "log_softmax", "", lowerSoftmax},
      // What nn.LSTM / nn.GRU / nn.RNN call (_VF.lstm is torch.lstm); the PackedSequence
      // overloads bind the same nine parameters and stay fallback nodes (torch_rnn.cpp).
      {"torch.lstm", kRecurrentSignature, "lstm", "", lowerRecurrent},
      {"torch.gru", kRecurrentSignature, "gru", "", lowerRecurrent},
      {"torch.rnn_tanh", kRecurrentSignature, "rnn_tanh", "", lowerRecurrent},
      {"torch.rnn_relu", kRecurrentSignature, "rnn_relu", "", lowerRecurrent},
      {"F.dropout", "input, p=0.5, training=True, inplace=False", "dropout", "", lowerDropout},
      {"F.dropout1d", "input, p=0.5, training=True, inplace=False", "dropout1d", "", lowerDropout},
      {"F.dropout2d", "input, p=0.5, training=True, inplace=False", "dropout2d", "", lowerDropout},
      {"F.dropout3d", "input, p=0.5, training=True, inplace=False", "dropout3d", "", lowerDropout},
      {"F.alpha_dropout", "input, p=0.5, training=False, inplace=False", "alpha_dropout", "",
       lowerDropout},
      // Binary elementwise.
      {"torch.add Tensor.add", "input, other, *, alpha=1", "add", "input other | alpha"},
      {"torch.sub torch.subtract Tensor.sub Tensor.subtract", "input, other, *, alpha=1", "sub",
       "input other | alpha"},
      {"torch.rsub", "input, other, *, alpha=1", "sub", "", lowerRsub},
      {"torch.mul torch.multiply Tensor.mul Tensor.multiply", "input, other", "mul", "input other"},
      {"torch.div torch.divide torch.true_divide Tensor.div Tensor.divide Tensor.true_divide",
       "input, other, *, rounding_mode=None", "div", "", lowerDiv},
      {"torch.floor_divide Tensor.floor_divide", "input, other", "floor_divide", "input other"},
      {"torch.remainder Tensor.remainder", "input, other", "remainder", "input other"},
      {"torch.fmod Tensor.fmod", "input, other", "fmod", "input other"},
      {"torch.pow Tensor.pow", "input, exponent", "pow", "input exponent"},
      {"torch.float_power Tensor.float_power", "input, exponent", "pow", "input exponent"},
      {"torch.atan2 torch.arctan2 Tensor.atan2 Tensor.arctan2", "input, other", "atan2",
       "input other"},
      {"torch.maximum Tensor.maximum", "input, other", "maximum", "input other"},
      {"torch.minimum Tensor.minimum", "input, other", "minimum", "input other"},
      {"torch.fmax Tensor.fmax", "input, other", "fmax", "input other"},
      {"torch.fmin Tensor.fmin", "input, other", "fmin", "input other"},
      {"torch.eq Tensor.eq", "input, other", "eq", "input other"},
      {"torch.ne torch.not_equal Tensor.ne Tensor.not_equal", "input, other", "ne", "input other"},
      {"torch.lt torch.less Tensor.lt Tensor.less", "input, other", "lt", "input other"},
      {"torch.le torch.less_equal Tensor.le Tensor.less_equal", "input, other", "le",
       "input other"},
      {"torch.gt torch.greater Tensor.gt Tensor.greater", "input, other", "gt", "input other"},
      {"torch.ge torch.greater_equal Tensor.ge Tensor.greater_equal", "input, other", "ge",
       "input other"},
      {"torch.logical_and Tensor.logical_and", "input, other", "logical_and", "input other"},
      {"torch.logical_or Tensor.logical_or", "input, other", "logical_or", "input other"},
      {"torch.logical_xor Tensor.logical_xor", "input, other", "logical_xor", "input other"},
      {"torch.bitwise_and Tensor.bitwise_and", "input, other", "bitwise_and", "input other"},
      {"torch.bitwise_or Tensor.bitwise_or", "input, other", "bitwise_or", "input other"},
      {"torch.bitwise_xor Tensor.bitwise_xor", "input, other", "bitwise_xor", "input other"},
      {"torch.hypot Tensor.hypot", "input, other", "hypot", "input other"},
      {"torch.copysign Tensor.copysign", "input, other", "copysign", "input other"},
      {"torch.xlogy torch.special.xlogy Tensor.xlogy", "input, other", "xlogy", "input other"},
      {"torch.where Tensor.where", "condition, input=None, other=None", "where", "", lowerWhere},
      {"torch.clamp torch.clip Tensor.clamp Tensor.clip", "input, min=None, max=None", "clamp", "",
       lowerClamp},
      {"torch.clamp_min Tensor.clamp_min", "input, min", "clamp", "", lowerClampMin},
      {"torch.clamp_max Tensor.clamp_max", "input, max", "clamp", "", lowerClampMax},
      {"torch.lerp Tensor.lerp", "input, end, weight", "lerp", "", lowerLerp},
      {"torch.addcmul Tensor.addcmul", "input, tensor1, tensor2, *, value=1", "addcmul",
       "input tensor1 tensor2 | value"},
      {"torch.addcdiv Tensor.addcdiv", "input, tensor1, tensor2, *, value=1", "addcdiv",
       "input tensor1 tensor2 | value"},
      // Linear algebra.
      {"torch.matmul Tensor.matmul", "input, other", "matmul", "input other"},
      {"torch.mm Tensor.mm", "input, mat2", "mm", "input mat2"},
      {"torch.bmm Tensor.bmm", "input, mat2", "bmm", "input mat2"},
      {"torch.mv Tensor.mv", "input, vec", "mv", "input vec"},
      {"torch.dot torch.inner Tensor.dot", "input, other", "dot", "input other"},
      {"torch.outer torch.ger Tensor.outer Tensor.ger", "input, vec2", "outer", "input vec2"},
      {"torch.addmm Tensor.addmm", "input, mat1, mat2, *, beta=1, alpha=1", "addmm",
       "input mat1 mat2 | beta alpha"},
      {"torch.baddbmm Tensor.baddbmm", "input, batch1, batch2, *, beta=1, alpha=1", "baddbmm",
       "input batch1 batch2 | beta alpha"},
      {"F.linear", "input, weight, bias=None", "linear", "input weight bias"},
      {"F.cross_entropy",
       "input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, "
       "reduction='mean', label_smoothing=0.0",
       "cross_entropy", "", lowerCrossEntropy},
      {"F.mse_loss", "input, target, size_average=None, reduce=None, reduction='mean', weight=None",
       "mse_loss", "", lowerMseLoss},
      {"F.binary_cross_entropy_with_logits",
       "input, target, weight=None, size_average=None, reduce=None, reduction='mean', "
       "pos_weight=None",
       "binary_cross_entropy_with_logits", "", lowerBceWithLogits},
      // Reductions.
      {"torch.sum Tensor.sum", "input, dim=None, keepdim=False, *, dtype=None", "sum", "",
       lowerReduce},
      {"torch.mean Tensor.mean", "input, dim=None, keepdim=False, *, dtype=None", "mean", "",
       lowerReduce},
      {"torch.amax Tensor.amax", "input, dim=(), keepdim=False", "amax", "", lowerReduce},
      {"torch.amin Tensor.amin", "input, dim=(), keepdim=False", "amin", "", lowerReduce},
      {"torch.all Tensor.all", "input, dim=None, keepdim=False", "all", "", lowerReduce},
      {"torch.any Tensor.any", "input, dim=None, keepdim=False", "any", "", lowerReduce},
      {"torch.logsumexp Tensor.logsumexp", "input, dim, keepdim=False", "logsumexp", "",
       lowerReduce},
      {"torch.count_nonzero Tensor.count_nonzero", "input, dim=None", "count_nonzero", "",
       lowerReduce},
      {"torch.prod Tensor.prod", "input, dim=None, keepdim=False, *, dtype=None", "prod", "",
       lowerProd},
      {"torch.std Tensor.std", "input, dim=None, unbiased=None, keepdim=False, *, correction=None",
       "std", "", lowerStdVar},
      {"torch.var Tensor.var", "input, dim=None, unbiased=None, keepdim=False, *, correction=None",
       "var", "", lowerStdVar},
      {"torch.std_mean", "input, dim=None, unbiased=None, keepdim=False, *, correction=None",
       "std_mean", "", lowerStdVar},
      {"torch.var_mean", "input, dim=None, unbiased=None, keepdim=False, *, correction=None",
       "var_mean", "", lowerStdVar},
      {"torch.argmax Tensor.argmax", "input, dim=None, keepdim=False", "argmax", "", lowerArgMax},
      {"torch.argmin Tensor.argmin", "input, dim=None, keepdim=False", "argmin", "", lowerArgMax},
      {"torch.max Tensor.max", "input, dim=None, keepdim=False", "max", "", lowerMaxMin},
      {"torch.min Tensor.min", "input, dim=None, keepdim=False", "min", "", lowerMaxMin},
      {"torch.norm Tensor.norm", "input, p='fro', dim=None, keepdim=False, dtype=None", "norm", "",
       lowerNorm},
      {"torch.linalg.vector_norm", "x, ord=2, dim=None, keepdim=False, *, dtype=None", "norm", "",
       lowerVectorNorm},
      {"torch.cumsum Tensor.cumsum", "input, dim, *, dtype=None", "cumsum", "input | dim dtype"},
      {"torch.histc Tensor.histc", "input, bins=100, min=0, max=0", "histc", "", lowerHistc},
      {"torch.cumprod Tensor.cumprod", "input, dim, *, dtype=None", "cumprod", "input | dim dtype"},
      // Shapes and views.
      {"Tensor.view", "input, *shape", "view", "", lowerView},
      {"torch.reshape Tensor.reshape", "input, *shape", "reshape", "", lowerView},
      {"Tensor.view_as", "input, other", "view", "", lowerViewAs},
      {"Tensor.reshape_as", "input, other", "reshape", "", lowerViewAs},
      {"torch.permute Tensor.permute", "input, *dims", "permute", "dims", lowerIntsVarargs},
      {"Tensor.repeat", "input, *dims", "repeat", "", lowerRepeat},
      {"torch.tile Tensor.tile", "input, *dims", "tile", "dims", lowerIntsVarargs},
      {"torch._weight_norm", "v, g, dim=0", "norm", "", lowerWeightNorm},
      {"torch.repeat_interleave Tensor.repeat_interleave",
       "input, repeats, dim=None, *, output_size=None", "reshape", "", lowerRepeatInterleave},
      {"torch.flip Tensor.flip", "input, *dims", "flip", "", lowerFlip},
      {"Tensor.expand", "input, *size", "expand", "", lowerExpand},
      {"Tensor.expand_as", "input, other", "expand_as", "", lowerExpandAs},
      {"torch.transpose torch.swapaxes torch.swapdims Tensor.transpose Tensor.swapaxes "
       "Tensor.swapdims",
       "input, dim0, dim1", "transpose", "input | dim0 dim1"},
      {"torch.t Tensor.t", "input", "t", "input"},
      {"torch.flatten Tensor.flatten", "input, start_dim=0, end_dim=-1", "flatten",
       "input | start_dim end_dim"},
      {"torch.unflatten Tensor.unflatten", "input, dim, sizes", "unflatten", "input | dim sizes",
       lowerUnflatten},
      {"torch.squeeze Tensor.squeeze", "input, dim=None", "squeeze", "", lowerSqueeze},
      {"torch.unsqueeze Tensor.unsqueeze", "input, dim", "unsqueeze", "input | dim"},
      {"torch.movedim torch.moveaxis Tensor.movedim Tensor.moveaxis", "input, source, destination",
       "movedim", "", lowerMovedim},
      {"torch.roll Tensor.roll", "input, shifts, dims=None", "roll", "", lowerRoll},
      {"torch.narrow Tensor.narrow", "input, dim, start, length", "narrow",
       "input | dim start length", lowerNarrow},
      {"torch.select Tensor.select", "input, dim, index", "select", "input | dim index"},
      {"torch.diagonal Tensor.diagonal", "input, offset=0, dim1=0, dim2=1", "diagonal",
       "input | offset dim1 dim2"},
      {"torch.tril Tensor.tril", "input, diagonal=0", "tril", "input | diagonal"},
      {"torch.triu Tensor.triu", "input, diagonal=0", "triu", "input | diagonal"},
      {"torch.chunk Tensor.chunk", "input, chunks, dim=0", "chunk", "input | chunks dim",
       lowerMultiResult},
      {"torch.unbind Tensor.unbind", "input, dim=0", "unbind", "input | dim", lowerMultiResult},
      {"torch.split Tensor.split", "input, split_size_or_sections, dim=0", "split", "", lowerSplit},
      {"torch.cat torch.concat torch.concatenate", "tensors, dim=0", "cat", "", lowerCatStack},
      {"torch.einsum", "equation, *operands", "matmul", "", lowerEinsum},
      {"torch.meshgrid", "*tensors, indexing=None", "expand", "", lowerMeshgrid},
      {"torch.diff Tensor.diff", "input, n=1, dim=-1, prepend=None, append=None", "sub", "",
       lowerDiff},
      {"torch.stack", "tensors, dim=0", "stack", "", lowerCatStack},
      {"Tensor.contiguous", "input, memory_format=None", "contiguous", "", lowerIdentityOp},
      {"torch.clone Tensor.clone", "input, *, memory_format=None", "clone", "", lowerIdentityOp},
      {"torch.detach Tensor.detach", "input", "alias", "", lowerDetach},
      {"torch.gather Tensor.gather", "input, dim, index, *, sparse_grad=False", "gather",
       "input index | dim"},
      {"torch.index_select Tensor.index_select", "input, dim, index", "index_select",
       "input index | dim"},
      {"torch.index_copy Tensor.index_copy", "input, dim, index, source", "index_put", "",
       lowerIndexCopy},
      {"torch.index_put Tensor.index_put", "input, indices, values, accumulate=False", "index_put",
       "", lowerIndexPut},
      {"torch.index_add Tensor.index_add", "input, dim, index, source, *, alpha=1", "index_put", "",
       lowerIndexAdd},
      {"torch.take_along_dim Tensor.take_along_dim", "input, indices, dim=None", "take_along_dim",
       "", lowerTakeAlongDim},
      {"torch.masked_fill Tensor.masked_fill", "input, mask, value", "masked_fill", "",
       lowerMaskedFill},
      {"torch.scatter Tensor.scatter", "input, dim, index, src=None, *, value=None, reduce=None",
       "scatter", "", lowerScatter},
      {"torch.scatter_add Tensor.scatter_add", "input, dim, index, src", "scatter_add", "",
       lowerScatterAdd},
      {"torch.scatter_reduce Tensor.scatter_reduce",
       "input, dim, index, src, reduce, *, include_self=True", "scatter_reduce",
       "input index src | dim reduce include_self"},
      {"torch.sort Tensor.sort", "input, dim=-1, descending=False, *, stable=False", "sort",
       "input | dim descending stable", nullptr, "torch.return_types.sort"},
      {"torch.argsort Tensor.argsort", "input, dim=-1, descending=False, *, stable=False",
       "argsort", "input | dim descending stable"},
      {"torch.topk Tensor.topk", "input, k, dim=-1, largest=True, sorted=True", "topk",
       "input | k dim largest sorted", nullptr, "torch.return_types.topk"},
      {"torch.is_floating_point", "input", "", "", lowerIsFloatingPoint},
      {"F.pad", "input, pad, mode='constant', value=None", "pad", "", lowerPad},
      {"F.interpolate",
       "input, size=None, scale_factor=None, mode='nearest', align_corners=None, "
       "recompute_scale_factor=None, antialias=False",
       "interpolate", "", lowerInterpolate},
      {"torch.pixel_shuffle F.pixel_shuffle", "input, upscale_factor", "pixel_shuffle",
       "input | upscale_factor"},
      {"torch.pixel_unshuffle F.pixel_unshuffle", "input, downscale_factor", "pixel_unshuffle",
       "input | downscale_factor"},
      // dtype conversions.
      {"Tensor.to",
       "input, *args, dtype=None, device=None, non_blocking=False, copy=False, "
       "memory_format=None",
       "cast", "", lowerTo},
      {"Tensor.float", "input, memory_format=None", "f32", "", lowerCast},
      {"Tensor.double", "input, memory_format=None", "f64", "", lowerCast},
      {"Tensor.half", "input, memory_format=None", "f16", "", lowerCast},
      {"Tensor.bfloat16", "input, memory_format=None", "bf16", "", lowerCast},
      {"Tensor.int", "input, memory_format=None", "i32", "", lowerCast},
      {"Tensor.long", "input, memory_format=None", "i64", "", lowerCast},
      {"Tensor.short", "input, memory_format=None", "i16", "", lowerCast},
      {"Tensor.char", "input, memory_format=None", "i8", "", lowerCast},
      {"Tensor.byte", "input, memory_format=None", "u8", "", lowerCast},
      {"Tensor.bool", "input, memory_format=None", "bool", "", lowerCast},
      {"Tensor.type_as", "input, other", "cast", "", lowerTypeAs},
      {"Tensor.type", "input, dtype=None, non_blocking=False", "cast", "", lowerType},
      // Creation.
      {"torch.zeros",
       "*size, out=None, dtype=None, layout=None, device=None, pin_memory=False, "
       "requires_grad=False",
       "zeros", "", lowerCreate},
      {"torch.ones",
       "*size, out=None, dtype=None, layout=None, device=None, pin_memory=False, "
       "requires_grad=False",
       "ones", "", lowerCreate},
      {"torch.empty",
       "*size, out=None, dtype=None, layout=None, device=None, pin_memory=False, "
       "requires_grad=False, memory_format=None",
       "zeros", "", lowerCreate},
      {"torch.full",
       "size, fill_value, *, out=None, dtype=None, layout=None, device=None, "
       "pin_memory=False, requires_grad=False",
       "full", "", lowerFull},
      {"torch.zeros_like",
       "input, *, dtype=None, layout=None, device=None, "
       "requires_grad=False, memory_format=None",
       "zeros_like", "", lowerLike},
      {"torch.ones_like",
       "input, *, dtype=None, layout=None, device=None, requires_grad=False, "
       "memory_format=None",
       "ones_like", "", lowerLike},
      {"torch.empty_like",
       "input, *, dtype=None, layout=None, device=None, "
       "requires_grad=False, memory_format=None",
       "zeros_like", "", lowerLike},
      {"torch.full_like",
       "input, fill_value, *, dtype=None, layout=None, device=None, "
       "requires_grad=False, memory_format=None",
       "full_like", "", lowerLike},
      {"Tensor.new_zeros",
       "input, *size, dtype=None, device=None, requires_grad=False, "
       "layout=None, pin_memory=False",
       "new_zeros", "", lowerNew},
      {"Tensor.new_ones",
       "input, *size, dtype=None, device=None, requires_grad=False, "
       "layout=None, pin_memory=False",
       "new_ones", "", lowerNew},
      {"Tensor.new_empty",
       "input, *size, dtype=None, device=None, requires_grad=False, "
       "layout=None, pin_memory=False",
       "new_zeros", "", lowerNew},
      {"Tensor.new_full",
       "input, size, fill_value, *, dtype=None, device=None, "
       "requires_grad=False, layout=None, pin_memory=False",
       "new_full", "", lowerNew},
      {"torch.arange",
       "start=None, end=None, step=None, *, out=None, dtype=None, layout=None, "
       "device=None, requires_grad=False",
       "arange", "", lowerArange},
      {"torch.linspace",
       "start, end, steps, *, out=None, dtype=None, layout=None, device=None, "
       "requires_grad=False",
       "linspace", "", lowerLinspace},
      {"torch.eye",
       "n, m=None, *, out=None, dtype=None, layout=None, device=None, "
       "requires_grad=False",
       "eye", "", lowerEye},
      {"torch.tensor", "data, *, dtype=None, device=None, requires_grad=False, pin_memory=False",
       "tensor", "", lowerTensorCtor},
      {"torch.as_tensor", "data, dtype=None, device=None", "as_tensor", "", lowerTensorCtor},
      // Neural network functions.
      {"torch.conv1d F.conv1d",
       "input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1", "conv1d", "",
       lowerConv},
      {"torch.conv2d F.conv2d",
       "input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1", "conv2d", "",
       lowerConv},
      {"torch.conv3d F.conv3d",
       "input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1", "conv3d", "",
       lowerConv},
      {"F.conv_transpose1d torch.conv_transpose1d",
       "input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1",
       "conv_transpose1d", "", lowerConvTranspose},
      {"F.conv_transpose2d torch.conv_transpose2d",
       "input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1",
       "conv_transpose2d", "", lowerConvTranspose},
      {"F.conv_transpose3d torch.conv_transpose3d",
       "input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1",
       "conv_transpose3d", "", lowerConvTranspose},
      {"F.max_pool1d",
       "input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, "
       "return_indices=False",
       "max_pool1d", "", lowerPool},
      {"F.max_pool2d",
       "input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, "
       "return_indices=False",
       "max_pool2d", "", lowerPool},
      {"F.max_pool3d",
       "input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, "
       "return_indices=False",
       "max_pool3d", "", lowerPool},
      {"F.avg_pool1d",
       "input, kernel_size, stride=None, padding=0, ceil_mode=False, "
       "count_include_pad=True",
       "avg_pool1d", "", lowerPool},
      {"F.avg_pool2d",
       "input, kernel_size, stride=None, padding=0, ceil_mode=False, "
       "count_include_pad=True, divisor_override=None",
       "avg_pool2d", "", lowerPool},
      {"F.avg_pool3d",
       "input, kernel_size, stride=None, padding=0, ceil_mode=False, "
       "count_include_pad=True, divisor_override=None",
       "avg_pool3d", "", lowerPool},
      {"F.adaptive_avg_pool1d", "input, output_size", "adaptive_avg_pool1d", "", lowerAdaptivePool},
      {"F.adaptive_avg_pool2d", "input, output_size", "adaptive_avg_pool2d", "", lowerAdaptivePool},
      {"F.adaptive_avg_pool3d", "input, output_size", "adaptive_avg_pool3d", "", lowerAdaptivePool},
      {"F.adaptive_max_pool1d", "input, output_size, return_indices=False", "adaptive_max_pool1d",
       "", lowerAdaptivePool},
      {"F.adaptive_max_pool2d", "input, output_size, return_indices=False", "adaptive_max_pool2d",
       "", lowerAdaptivePool},
      {"F.adaptive_max_pool3d", "input, output_size, return_indices=False", "adaptive_max_pool3d",
       "", lowerAdaptivePool},
      {"F.batch_norm",
       "input, running_mean, running_var, weight=None, bias=None, training=False, "
       "momentum=0.1, eps=1e-05",
       "batch_norm", "", lowerBatchNorm},
      {"F.layer_norm", "input, normalized_shape, weight=None, bias=None, eps=1e-05", "layer_norm",
       "", lowerNormShape},
      {"F.rms_norm", "input, normalized_shape, weight=None, eps=None", "rms_norm", "",
       lowerNormShape},
      {"F.group_norm", "input, num_groups, weight=None, bias=None, eps=1e-05", "group_norm",
       "input weight bias | num_groups eps"},
      {"F.instance_norm",
       "input, running_mean=None, running_var=None, weight=None, bias=None, "
       "use_input_stats=True, momentum=0.1, eps=1e-05",
       "instance_norm",
       "input weight bias running_mean running_var | use_input_stats momentum eps"},
      {"F.local_response_norm", "input, size, alpha=0.0001, beta=0.75, k=1.0",
       "local_response_norm", "input | size alpha beta k"},
      {"F.embedding",
       "input, weight, padding_idx=None, max_norm=None, norm_type=2.0, "
       "scale_grad_by_freq=False, sparse=False",
       "embedding", "", lowerEmbedding},
      {"torch._native_multi_head_attention",
       "query, key, value, embed_dim, num_head, qkv_weight, qkv_bias, proj_weight, proj_bias, "
       "mask=None, need_weights=True, average_attn_weights=True, mask_type=None",
       "native_multi_head_attention", "", lowerNativeMha},
      {"F.multi_head_attention_forward",
       "query, key, value, embed_dim_to_check, num_heads, in_proj_weight, in_proj_bias, bias_k, "
       "bias_v, add_zero_attn, dropout_p, out_proj_weight, out_proj_bias, training=True, "
       "key_padding_mask=None, need_weights=True, attn_mask=None, use_separate_proj_weight=False, "
       "q_proj_weight=None, k_proj_weight=None, v_proj_weight=None, static_k=None, static_v=None, "
       "average_attn_weights=True, is_causal=False",
       "multi_head_attention_forward", "", lowerMhaForward},
      {"F.scaled_dot_product_attention",
       "query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, "
       "enable_gqa=False",
       "scaled_dot_product_attention", "", lowerSdpa},
  };
  return rows;
}

struct Index {
  std::unordered_map<PyObject *, std::vector<const TorchRow *>> byCallable;
  std::unordered_map<std::string, std::vector<const TorchRow *>> byMethod;
  std::vector<PyRef> keep;
};

const Index &index() {
  static Index *idx = [] {
    auto *ix = new Index();
    PyRef F = check(PyImport_ImportModule("torch.nn.functional"), "import torch.nn.functional");
    for (const TorchRow &row : table()) {
      std::istringstream is(row.targets);
      std::string target;
      while (is >> target) {
        if (target.rfind("Tensor.", 0) == 0) {
          ix->byMethod[target.substr(7)].push_back(&row);
          // torch.Tensor.add(x, y) called through the class.
          PyObject *m = PyObject_GetAttrString(torchTensorType(), target.substr(7).c_str());
          if (m) {
            ix->byCallable[m].push_back(&row);
            ix->keep.push_back(PyRef::steal(m));
          } else {
            PyErr_Clear();
          }
          continue;
        }
        PyObject *base = torchModule();
        std::string rest;
        if (target.rfind("F.", 0) == 0) {
          base = F.get();
          rest = target.substr(2);
        } else if (target.rfind("torch.", 0) == 0) {
          rest = target.substr(6);
        } else {
          throw std::logic_error("op table target without a torch./F./Tensor. prefix: " + target);
        }
        // Walk dotted names (torch.special.erf).
        PyRef cur = PyRef::borrow(base);
        bool ok = true;
        for (const std::string &part : split(rest, '.')) {
          PyObject *n = PyObject_GetAttrString(cur.get(), part.c_str());
          if (!n) {
            PyErr_Clear();
            ok = false;
            break;
          }
          cur = PyRef::steal(n);
        }
        if (!ok) continue; // not in this torch version
        ix->byCallable[cur.get()].push_back(&row);
        ix->keep.push_back(cur);
      }
    }
    return ix;
  }();
  return *idx;
}

} // namespace

const VarPtr &BoundArgs::at(std::string_view name) const {
  static const VarPtr null;
  auto it = values.find(name);
  return it == values.end() ? null : it->second;
}

bool BoundArgs::isNone(std::string_view name) const { return isNoneVar(at(name)); }

const std::vector<const TorchRow *> *rowsForCallable(PyObject *fn) {
  const Index &ix = index();
  auto it = ix.byCallable.find(fn);
  return it == ix.byCallable.end() ? nullptr : &it->second;
}

const std::vector<const TorchRow *> *rowsForTensorMethod(const std::string &name) {
  const Index &ix = index();
  auto it = ix.byMethod.find(name);
  return it == ix.byMethod.end() ? nullptr : &it->second;
}

VarPtr lowerTorchRow(Analyzer &a, const TorchRow &row, const Args &args, bool *matched) {
  const CompiledRow &c = compiled(row);
  BoundArgs b;
  std::string why;
  if (!bind(a, c.params, args, b, why)) {
    *matched = false;
    return nullptr;
  }
  *matched = true;
  // A missing BoundArgs entry reads as None: give every parameter a value.
  for (const Param &p : c.params)
    if (!p.varargs && !b.values.count(p.name)) b.values[p.name] = a.none();
  if (row.custom) return row.custom(a, b, row);
  return genericLower(a, b, row);
}

// ---------------------------------------------------------------------------------------------
// Analyzer entry points

namespace {

VarPtr lowerRows(Analyzer &a, const std::vector<const TorchRow *> &rows, const Args &args,
                 const std::string &what) {
  for (const TorchRow *row : rows) {
    bool matched = false;
    VarPtr r = lowerTorchRow(a, *row, args, &matched);
    if (matched) return r;
  }
  a.fail(what + "(): arguments do not match its signature (" + rows[0]->signature + ")");
}

PyObject *functional(const char *name) {
  static PyObject *F = check(PyImport_ImportModule("torch.nn.functional"), "F").release();
  PyObject *f = PyObject_GetAttrString(F, name);
  if (!f) throwPyError(std::string("F.") + name);
  return f;
}

// nn.Module types: lowerings that read the module's attributes and call the functional rows.
using ModuleLower = VarPtr (*)(Analyzer &, const VarPtr &module, const Args &args);

VarPtr callF(Analyzer &a, const char *name, std::vector<VarPtr> pos) {
  PyRef f = PyRef::steal(functional(name));
  Args args;
  args.pos = std::move(pos);
  return a.callObject(f.get(), std::nullopt, args);
}

VarPtr onlyInput(Analyzer &a, const Args &args, const char *what) {
  if (args.pos.size() != 1 || !args.kw.empty()) a.fail(std::string(what) + " takes one input");
  return args.pos[0];
}

#define MODULE_LOWER(fname, ...)                                                                   \
  VarPtr fname(Analyzer &a, const VarPtr &m, const Args &args) {                                   \
    auto attr = [&](const char *n) { return a.getAttr(m, n); };                                    \
    (void)attr;                                                                                    \
    __VA_ARGS__                                                                                    \
  }

MODULE_LOWER(modLinear, {
  return callF(a, "linear", {onlyInput(a, args, "Linear"), attr("weight"), attr("bias")});
})
MODULE_LOWER(modConv, {
  PyRef mode = a.asPython(attr("padding_mode"));
  if (!mode || utf8(mode.get()) != "zeros") return nullptr; // inline forward (padding first)
  std::string t = Py_TYPE(as<ModuleVar>(m)->obj.get())->tp_name;
  const char *fn = t == "Conv1d" ? "conv1d" : t == "Conv2d" ? "conv2d" : "conv3d";
  return callF(a, fn,
               {onlyInput(a, args, "Conv"), attr("weight"), attr("bias"), attr("stride"),
                attr("padding"), attr("dilation"), attr("groups")});
})
MODULE_LOWER(modIdentity, { return args.pos.size() == 1 ? args.pos[0] : nullptr; })
MODULE_LOWER(modDropout, {
  std::string t = Py_TYPE(as<ModuleVar>(m)->obj.get())->tp_name; // Dropout, Dropout2d...
  std::string fn = "dropout" + t.substr(7);
  return callF(a, fn.c_str(), {onlyInput(a, args, "Dropout"), attr("p"), attr("training")});
})
MODULE_LOWER(modFlatten, {
  return a.callMethod(onlyInput(a, args, "Flatten"), "flatten",
                      Args{{attr("start_dim"), attr("end_dim")}, {}});
})
MODULE_LOWER(modLayerNorm, {
  return callF(a, "layer_norm",
               {onlyInput(a, args, "LayerNorm"), attr("normalized_shape"), attr("weight"),
                attr("bias"), attr("eps")});
})
MODULE_LOWER(modGroupNorm, {
  return callF(a, "group_norm",
               {onlyInput(a, args, "GroupNorm"), attr("num_groups"), attr("weight"), attr("bias"),
                attr("eps")});
})
MODULE_LOWER(modEmbedding, {
  return callF(
      a, "embedding",
      {onlyInput(a, args, "Embedding"), attr("weight"), attr("padding_idx"), attr("max_norm")});
})
MODULE_LOWER(modSoftmax, {
  std::string t = Py_TYPE(as<ModuleVar>(m)->obj.get())->tp_name;
  return callF(a, t == "Softmax" ? "softmax" : "log_softmax",
               {onlyInput(a, args, "Softmax"), attr("dim")});
})
MODULE_LOWER(modMaxPool, {
  std::string t = Py_TYPE(as<ModuleVar>(m)->obj.get())->tp_name;
  std::string fn = "max_pool" + t.substr(t.size() - 2, 1) + "d";
  return callF(a, fn.c_str(),
               {onlyInput(a, args, "MaxPool"), attr("kernel_size"), attr("stride"), attr("padding"),
                attr("dilation"), attr("ceil_mode"), attr("return_indices")});
})
MODULE_LOWER(modAvgPool, {
  std::string t = Py_TYPE(as<ModuleVar>(m)->obj.get())->tp_name;
  std::string fn = "avg_pool" + t.substr(t.size() - 2, 1) + "d";
  std::vector<VarPtr> pos{onlyInput(a, args, "AvgPool"),
                          attr("kernel_size"),
                          attr("stride"),
                          attr("padding"),
                          attr("ceil_mode"),
                          attr("count_include_pad")};
  if (fn != "avg_pool1d") pos.push_back(attr("divisor_override"));
  return callF(a, fn.c_str(), pos);
})
MODULE_LOWER(modAdaptiveAvgPool, {
  std::string t = Py_TYPE(as<ModuleVar>(m)->obj.get())->tp_name;
  std::string fn = "adaptive_avg_pool" + t.substr(t.size() - 2, 1) + "d";
  return callF(a, fn.c_str(), {onlyInput(a, args, "AdaptiveAvgPool"), attr("output_size")});
})
// Activations without state, and the ones with attributes.
MODULE_LOWER(modActivation, {
  std::string t = Py_TYPE(as<ModuleVar>(m)->obj.get())->tp_name;
  VarPtr x = onlyInput(a, args, t.c_str());
  if (t == "ReLU") return callF(a, "relu", {x, attr("inplace")});
  if (t == "ReLU6") return callF(a, "relu6", {x, attr("inplace")});
  if (t == "SiLU") return callF(a, "silu", {x, attr("inplace")});
  if (t == "Mish") return callF(a, "mish", {x, attr("inplace")});
  if (t == "Hardswish") return callF(a, "hardswish", {x, attr("inplace")});
  if (t == "Hardsigmoid") return callF(a, "hardsigmoid", {x, attr("inplace")});
  if (t == "SELU") return callF(a, "selu", {x, attr("inplace")});
  if (t == "GELU") return callF(a, "gelu", {x, attr("approximate")});
  if (t == "Tanh") return a.emit1("tanh", {x});
  if (t == "Sigmoid") return a.emit1("sigmoid", {x});
  if (t == "LogSigmoid") return a.emit1("log_sigmoid", {x});
  if (t == "ELU") return callF(a, "elu", {x, attr("alpha"), attr("inplace")});
  if (t == "CELU") return callF(a, "celu", {x, attr("alpha"), attr("inplace")});
  if (t == "LeakyReLU") return callF(a, "leaky_relu", {x, attr("negative_slope"), attr("inplace")});
  if (t == "Hardtanh")
    return callF(a, "hardtanh", {x, attr("min_val"), attr("max_val"), attr("inplace")});
  if (t == "Softplus") return callF(a, "softplus", {x, attr("beta"), attr("threshold")});
  return nullptr;
})

// nn.LSTMCell on a batch with a given (h, c): the gate arithmetic of PyTorch's lstm_cell, so
// that an LSTM written as a Python loop is one graph of IR ops rather than fallback calls.
// Unbatched inputs or a missing state inline forward (which calls _VF.lstm_cell: a fallback).
MODULE_LOWER(modLSTMCell, {
  if (args.pos.size() != 2 || !args.kw.empty()) return nullptr;
  auto *x = as<TensorVar>(args.pos[0]);
  if (!x || x->value->type().rank() != 2 || isNoneVar(args.pos[1])) return nullptr;
  std::vector<VarPtr> hc = a.sequenceItems(args.pos[1], "LSTMCell state");
  if (hc.size() != 2) return nullptr;
  VarPtr gates =
      a.emit1("add", {callF(a, "linear", {args.pos[0], attr("weight_ih"), attr("bias_ih")}),
                      callF(a, "linear", {hc[0], attr("weight_hh"), attr("bias_hh")})});
  std::vector<VarPtr> g =
      a.emit("chunk", {gates}, {{"chunks", Attr(int64_t(4))}, {"dim", Attr(int64_t(1))}});
  VarPtr in = a.emit1("sigmoid", {g[0]}), forget = a.emit1("sigmoid", {g[1]});
  VarPtr cell = a.emit1("tanh", {g[2]}), out = a.emit1("sigmoid", {g[3]});
  VarPtr c = a.emit1("add", {a.emit1("mul", {forget, hc[1]}), a.emit1("mul", {in, cell})});
  VarPtr h = a.emit1("mul", {out, a.emit1("tanh", {c})});
  return std::make_shared<TupleVar>(std::vector<VarPtr>{h, c});
})

// nn.GRUCell and nn.RNNCell on a batch with a given h: the arithmetic of PyTorch's gru_cell
// (h' = (h - n) * z + n, its order of operations) and rnn_tanh_cell / rnn_relu_cell, as for
// LSTMCell (otherwise each step is a fallback call to _VF).
VarPtr givenBatchedState(Analyzer &a, const Args &args) {
  if (args.pos.size() != 2 || !args.kw.empty() || isNoneVar(args.pos[1])) return nullptr;
  auto *x = as<TensorVar>(args.pos[0]);
  auto *h = as<TensorVar>(args.pos[1]);
  if (!x || !h || x->value->type().rank() != 2 || h->value->type().rank() != 2) return nullptr;
  return args.pos[1];
}
MODULE_LOWER(modGRUCell, {
  VarPtr h = givenBatchedState(a, args);
  if (!h) return nullptr;
  auto chunks = [&](VarPtr v) {
    return a.emit("chunk", {v}, {{"chunks", Attr(int64_t(3))}, {"dim", Attr(int64_t(1))}});
  };
  std::vector<VarPtr> gi =
      chunks(callF(a, "linear", {args.pos[0], attr("weight_ih"), attr("bias_ih")}));
  std::vector<VarPtr> gh = chunks(callF(a, "linear", {h, attr("weight_hh"), attr("bias_hh")}));
  VarPtr reset = a.emit1("sigmoid", {a.emit1("add", {gh[0], gi[0]})});
  VarPtr update = a.emit1("sigmoid", {a.emit1("add", {gh[1], gi[1]})});
  VarPtr fresh = a.emit1("tanh", {a.emit1("add", {gi[2], a.emit1("mul", {gh[2], reset})})});
  return a.emit1("add", {a.emit1("mul", {a.emit1("sub", {h, fresh}), update}), fresh});
})
MODULE_LOWER(modRNNCell, {
  VarPtr h = givenBatchedState(a, args);
  if (!h) return nullptr;
  PyRef mode = a.asPython(attr("nonlinearity"));
  if (!mode) return nullptr;
  const std::string nonlinearity = utf8(mode.get());
  if (nonlinearity != "tanh" && nonlinearity != "relu") return nullptr; // forward raises
  VarPtr pre =
      a.emit1("add", {callF(a, "linear", {args.pos[0], attr("weight_ih"), attr("bias_ih")}),
                      callF(a, "linear", {h, attr("weight_hh"), attr("bias_hh")})});
  return a.emit1(nonlinearity.c_str(), {pre});
})

#undef MODULE_LOWER

const std::unordered_map<PyObject *, ModuleLower> &moduleTable() {
  static auto *t = [] {
    auto *m = new std::unordered_map<PyObject *, ModuleLower>();
    PyRef nn = check(PyImport_ImportModule("torch.nn"), "import torch.nn");
    const std::pair<const char *, ModuleLower> rows[] = {
        {"Linear", modLinear},
        {"Conv1d", modConv},
        {"Conv2d", modConv},
        {"Conv3d", modConv},
        {"Identity", modIdentity},
        {"Dropout", modDropout},
        {"Dropout1d", modDropout},
        {"Dropout2d", modDropout},
        {"Dropout3d", modDropout},
        {"Flatten", modFlatten},
        {"LayerNorm", modLayerNorm},
        {"GroupNorm", modGroupNorm},
        {"Embedding", modEmbedding},
        {"Softmax", modSoftmax},
        {"LogSoftmax", modSoftmax},
        {"MaxPool1d", modMaxPool},
        {"MaxPool2d", modMaxPool},
        {"MaxPool3d", modMaxPool},
        {"AvgPool1d", modAvgPool},
        {"AvgPool2d", modAvgPool},
        {"AvgPool3d", modAvgPool},
        {"AdaptiveAvgPool1d", modAdaptiveAvgPool},
        {"AdaptiveAvgPool2d", modAdaptiveAvgPool},
        {"AdaptiveAvgPool3d", modAdaptiveAvgPool},
        {"ReLU", modActivation},
        {"ReLU6", modActivation},
        {"SiLU", modActivation},
        {"Mish", modActivation},
        {"Hardswish", modActivation},
        {"Hardsigmoid", modActivation},
        {"SELU", modActivation},
        {"GELU", modActivation},
        {"Tanh", modActivation},
        {"Sigmoid", modActivation},
        {"LogSigmoid", modActivation},
        {"ELU", modActivation},
        {"CELU", modActivation},
        {"LeakyReLU", modActivation},
        {"Hardtanh", modActivation},
        {"Softplus", modActivation},
        {"LSTMCell", modLSTMCell},
        {"GRUCell", modGRUCell},
        {"RNNCell", modRNNCell},
    };
    for (auto &[name, fn] : rows) {
      PyObject *cls = PyObject_GetAttrString(nn.get(), name);
      if (!cls) {
        PyErr_Clear();
        continue;
      }
      (*m)[cls] = fn; // the reference is kept: module classes live as long as torch
    }
    return m;
  }();
  return *t;
}

} // namespace

namespace {

/// The name ("ns::op") of a torch.library operator called as `torch.ops.ns.op` or through its
/// `.default` overload; "" for other callables.
std::string libraryOperatorName(PyObject *fn) {
  const std::string type = Py_TYPE(fn)->tp_name;
  const char *attr = type == "OpOverloadPacket" ? "_qualified_op_name"
                     : type == "OpOverload"     ? "_name"
                                                : nullptr;
  if (!attr) return "";
  if (type == "OpOverload") {
    PyRef overload = PyRef::steal(PyObject_GetAttrString(fn, "_overloadname"));
    if (!overload || !PyUnicode_Check(overload.get()) || utf8(overload.get()) != "default") {
      PyErr_Clear();
      return "";
    }
  }
  PyRef name = PyRef::steal(PyObject_GetAttrString(fn, attr));
  if (!name || !PyUnicode_Check(name.get())) {
    PyErr_Clear();
    return "";
  }
  return utf8(name.get());
}

/// torch.library operators of other libraries that have an IR op: transformers' grouped product
/// of mixture-of-experts layers. nullptr: not one of them, or its arguments do not fit (a
/// PyTorch fallback node).
VarPtr lowerLibraryOperator(Analyzer &a, PyObject *fn, const Args &args) {
  static const TorchRow groupedMm{"", "input, weight, offs", "grouped_mm", "", lowerGroupedMm};
  if (libraryOperatorName(fn) != "transformers::grouped_mm_fallback") return nullptr;
  bool matched = false;
  return lowerTorchRow(a, groupedMm, args, &matched);
}

} // namespace

VarPtr Analyzer::callTorchFunction(PyObject *fn, const Args &args) {
  const std::vector<const TorchRow *> *rows = rowsForCallable(fn);
  if (!rows) {
    if (VarPtr r = lowerLibraryOperator(*this, fn, args)) return r;
    // A few torch functions answer questions about the tracing state or grad mode.
    static PyObject *noGrad =
        check(PyObject_GetAttrString(torchModule(), "no_grad"), "no_grad").release();
    static PyObject *enableGrad =
        check(PyObject_GetAttrString(torchModule(), "enable_grad"), "enable_grad").release();
    static PyObject *inferenceMode =
        check(PyObject_GetAttrString(torchModule(), "inference_mode"), "inference_mode").release();
    static PyObject *setGrad =
        check(PyObject_GetAttrString(torchModule(), "set_grad_enabled"), "set_grad_enabled")
            .release();
    static PyObject *isGrad =
        check(PyObject_GetAttrString(torchModule(), "is_grad_enabled"), "is_grad_enabled")
            .release();
    if (fn == noGrad) return std::make_shared<GradModeVar>(false);
    if (fn == enableGrad) return std::make_shared<GradModeVar>(true);
    if (fn == inferenceMode) {
      if (!args.pos.empty() && !truthy(args.pos[0]))
        return std::make_shared<GradModeVar>(gradEnabled());
      return std::make_shared<GradModeVar>(false);
    }
    if (fn == setGrad) {
      // set_grad_enabled(b) takes effect when called; its __exit__ restores the previous mode.
      if (args.pos.size() != 1) fail("torch.set_grad_enabled() takes one argument");
      bool prev = gradEnabled();
      setGradEnabled(truthy(args.pos[0]));
      auto g = std::make_shared<GradModeVar>(gradEnabled());
      (void)prev;
      return g;
    }
    if (fn == isGrad) return boolean(gradEnabled());
    std::string qn;
    if (PyObject *q = PyObject_GetAttrString(fn, "__qualname__")) {
      qn = utf8(q);
      Py_DECREF(q);
    } else {
      PyErr_Clear();
    }
    std::string mod;
    if (PyObject *m = PyObject_GetAttrString(fn, "__module__")) {
      mod = utf8(m);
      Py_DECREF(m);
    } else {
      PyErr_Clear();
    }
    if (mod.rfind("torch", 0) == 0) {
      if (VarPtr r = autocastCall(fn, qn, args)) return r;
      // Library code asks whether a compiler traces it: xjit does (and compiled code must take
      // the compile-friendly paths), but it is neither TorchScript nor FX tracing nor export.
      static const char *const trueFns[] = {"is_compiling", "is_dynamo_compiling"};
      // Frames run compiled only with no dispatch mode pushed (eval_frame.cpp
      // dispatchModeActive).
      static const char *const falseFns[] = {"is_scripting",
                                             "is_tracing",
                                             "is_exporting",
                                             "has_torch_function",
                                             "has_torch_function_unary",
                                             "has_torch_function_variadic",
                                             "is_torch_function_mode_enabled"};
      for (const char *f : trueFns)
        if (qn == f || qn == std::string("_") + f) return boolean(true);
      for (const char *f : falseFns)
        if (qn == f || qn == std::string("_") + f) return boolean(false);
      if (qn == "_get_tracing_state") return none();
      if (qn == "_len_torch_dispatch_stack") return integer(0);
    }
    return nullptr;
  }
  std::string what = "torch function";
  if (!autocast_.enabled) return lowerRows(*this, *rows, args, what);
  std::string name;
  if (PyObject *n = PyObject_GetAttrString(fn, "__name__")) {
    name = PyUnicode_Check(n) ? utf8(n) : "";
    Py_DECREF(n);
  } else {
    PyErr_Clear();
  }
  return lowerRows(*this, *rows, autocastArgs(name, args), what);
}

VarPtr Analyzer::callTensorMethodRow(const std::string &name, const VarPtr &self, const Args &args,
                                     bool *found) {
  const std::vector<const TorchRow *> *rows = rowsForTensorMethod(name);
  *found = rows != nullptr;
  if (!rows) return nullptr;
  Args a2;
  a2.pos.reserve(args.pos.size() + 1);
  a2.pos.push_back(self);
  a2.pos.insert(a2.pos.end(), args.pos.begin(), args.pos.end());
  a2.kw = args.kw;
  return lowerRows(*this, *rows, autocastArgs(name, a2), "Tensor." + name);
}

VarPtr Analyzer::callModuleRow(const VarPtr &module, const Args &args, bool *found) {
  auto *m = as<ModuleVar>(module);
  const auto &t = moduleTable();
  auto it = t.find(reinterpret_cast<PyObject *>(Py_TYPE(m->obj.get())));
  *found = false;
  if (it == t.end()) return nullptr;
  VarPtr r = it->second(*this, module, args);
  *found = r != nullptr;
  return r;
}

} // namespace xjit::frontend
