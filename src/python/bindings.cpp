// The nanobind module xjit._xjit: IR text parsing and printing, graph building, verification, op
// registry queries and the reference interpreter on numpy arrays / torch tensors (zero-copy through
// DLPack). python/xjit/ir.py is the typed public surface over it.
#include "convert.h"
#include "runtime_bindings.h"

#include "xjit/ir/builder.h"
#include "xjit/ir/diagnostics.h"
#include "xjit/ir/interpreter.h"
#include "xjit/ir/op_registry.h"
#include "xjit/ir/parser.h"
#include "xjit/ir/printer.h"
#include "xjit/ir/verifier.h"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <array>
#include <optional>

#ifndef XJIT_VERSION
#define XJIT_VERSION "unknown"
#endif

namespace nb = nanobind;
using namespace nb::literals;

namespace xjit::py {
namespace {

// ---- exceptions ----

/// The Python exception classes (module lifetime; created at import).
struct ExceptionTypes {
  PyObject *base = nullptr, *parse = nullptr, *verify = nullptr, *inference = nullptr,
           *kernel = nullptr;
};
ExceptionTypes gExc;

PyObject *newException(nb::module_ &m, const char *name, std::initializer_list<PyObject *> bases) {
  nb::tuple baseTuple = nb::steal<nb::tuple>(PyTuple_New(static_cast<Py_ssize_t>(bases.size())));
  Py_ssize_t i = 0;
  for (PyObject *b : bases)
    PyTuple_SET_ITEM(baseTuple.ptr(), i++, Py_NewRef(b));
  // Qualified as xjit.ir.<name>: that is where users import and see them.
  std::string qualified = std::string("xjit.ir.") + name;
  PyObject *t = PyErr_NewException(qualified.c_str(), baseTuple.ptr(), nullptr);
  if (!t) throw nb::python_error();
  m.attr(name) = nb::handle(t);
  return t; // our reference lives as long as the module
}

void raise(PyObject *type, const std::string &message,
           std::initializer_list<std::pair<const char *, nb::object>> attrs = {}) {
  nb::object msg = nb::str(message.c_str(), message.size());
  nb::object exc = nb::steal(PyObject_CallOneArg(type, msg.ptr()));
  if (!exc.is_valid()) return; // PyErr already set
  for (const auto &[k, v] : attrs)
    nb::setattr(exc, k, v);
  PyErr_SetObject(type, exc.ptr());
}

void translateException(const std::exception_ptr &p, void *) {
  try {
    std::rethrow_exception(p);
  } catch (const ParseError &e) {
    raise(gExc.parse, e.what(),
          {{"line", nb::int_(e.line())},
           {"col", nb::int_(e.col())},
           {"message", nb::str(e.message().c_str())}});
  } catch (const VerifyError &e) {
    raise(gExc.verify, e.what());
  } catch (const Error &e) {
    raise(gExc.base, e.what(), {{"internal", nb::bool_(e.kind() == ErrorKind::Internal)}});
  } catch (const TypeInferenceError &e) {
    raise(gExc.inference, e.what());
  } catch (const InternalKernelError &e) {
    raise(gExc.base, e.what(), {{"internal", nb::bool_(true)}});
  } catch (const KernelError &e) {
    raise(gExc.kernel, e.what());
  }
}

// ---- registry queries ----

const OpDef &lookupOp(const std::string &name) {
  const OpDef *def = OpRegistry::instance().lookup(name);
  if (!def) throw Error(ErrorKind::User, "unknown op '" + name + "'");
  return *def;
}

nb::list opNames() {
  nb::list out;
  for (const OpDef *d : OpRegistry::instance().all())
    out.append(nb::str(d->name.c_str()));
  return out;
}

const char *attrKindName(AttrKind k) {
  static constexpr std::array<const char *, 9> kNames{"int",    "float", "bool", "str",   "ints",
                                                      "floats", "dtype", "type", "tensor"};
  return kNames.at(static_cast<size_t>(k));
}

nb::dict opInfo(const std::string &name) {
  static constexpr std::array<std::pair<OpTrait, const char *>, 9> kTraits{{
      {kElementwise, "elementwise"},
      {kReduction, "reduction"},
      {kView, "view"},
      {kInPlace, "inplace"},
      {kSideEffect, "side_effect"},
      {kCommutative, "commutative"},
      {kTerminator, "terminator"},
      {kConstantLike, "constant_like"},
      {kShapeOnly, "shape_only"},
  }};
  const OpDef &def = lookupOp(name);
  nb::list operands, attrs, traits;
  for (const OperandSpec &o : def.operands) {
    nb::dict d;
    d["name"] = o.name;
    d["variadic"] = o.variadic;
    d["optional"] = o.optional;
    operands.append(d);
  }
  for (const AttrSpec &a : def.attrs) {
    nb::dict d;
    d["name"] = a.name;
    d["kind"] = a.anyKind ? "any" : attrKindName(a.kind);
    d["default"] = a.defaultValue ? attrToPython(*a.defaultValue) : nb::none();
    d["required"] = !a.defaultValue && !a.optional;
    attrs.append(d);
  }
  for (const auto &[bit, label] : kTraits)
    if (def.has(bit)) traits.append(nb::str(label));
  nb::dict info;
  info["name"] = def.name;
  info["summary"] = def.summary;
  info["operands"] = operands;
  info["attrs"] = attrs;
  info["traits"] = traits;
  info["num_regions"] = def.numRegions;
  info["has_kernel"] = static_cast<bool>(def.kernel);
  return info;
}

// ---- running ----

/// Inference messages do not name the op (callers add it), though some rows' messages do.
std::string withOpName(const std::string &op, const std::string &msg) {
  return msg.starts_with(op + ":") ? msg : op + ": " + msg;
}

nb::list toPythonList(const std::vector<RtValue> &values, Framework fw) {
  nb::list out;
  for (const RtValue &v : values)
    out.append(fromRtValue(v, fw));
  return out;
}

/// Interprets with the GIL released. Inputs are moved in; borrowed Python memory stays alive
/// through the Storage objects (their release re-acquires the GIL).
std::vector<RtValue> interpretNoGil(const Graph &g, std::vector<RtValue> inputs) {
  nb::gil_scoped_release nogil;
  return interpret(g, std::move(inputs));
}

nb::list runGraph(const Graph &g, const nb::sequence &inputs, const std::string &framework) {
  Framework fw = parseFramework(framework);
  std::vector<RtValue> ins = graphInputs(g, inputs);
  return toPythonList(interpretNoGil(g, std::move(ins)), fw);
}

/// Builds a graph of one op whose inputs are the operands (None operands become `none` constants),
/// infers its result types, verifies and interprets it.
nb::list runOp(const std::string &name, const nb::sequence &operands, nb::handle attrs,
               const std::string &framework) {
  Framework fw = parseFramework(framework);
  const OpDef &def = lookupOp(name);
  Graph g(name);
  Builder b(g.body());
  std::vector<Value *> vals;
  std::vector<RtValue> ins;
  for (nb::handle h : operands) {
    if (h.is_none()) {
      vals.push_back(b.createWithTypes("constant", {}, {Type::none()})->result());
      continue;
    }
    RtValue v = toRtValue(h);
    vals.push_back(g.addInput(typeOf(v), "x" + std::to_string(ins.size())));
    ins.push_back(std::move(v));
  }
  AttrMap attrMap = toAttrMap(&def, attrs);
  if (!def.infer)
    throw Error(ErrorKind::User, "op '" + name + "' has no type inference; build it in a graph");
  Op *op;
  try {
    op = b.create(name, vals, std::move(attrMap));
  } catch (const TypeInferenceError &e) {
    throw TypeInferenceError(withOpName(name, e.what()));
  }
  std::vector<Value *> results;
  for (const auto &r : op->results())
    results.push_back(r.get());
  b.createWithTypes("return", results, {});
  verifyOrThrow(g);
  try {
    return toPythonList(interpretNoGil(g, std::move(ins)), fw);
  } catch (const Error &e) {
    // The graph's inputs are typed from the operands themselves, so a user error at run time can
    // only come from the kernel.
    if (e.kind() == ErrorKind::User) throw KernelError(e.what());
    throw;
  }
}

// ---- graph building ----

std::vector<std::string> typeStrings(const std::vector<Type> &types) {
  std::vector<std::string> out;
  for (const Type &t : types)
    out.push_back(t.str());
  return out;
}

/// Values must come from the graph being built: a Value object keeps only its own graph alive, so
/// a use from another graph could dangle.
void checkOwnValues(const Graph &g, const std::vector<Value *> &values) {
  for (size_t i = 0; i < values.size(); ++i) {
    Value *v = values[i];
    Block *b = v->isBlockArgument() ? v->ownerBlock() : v->definingOp()->parentBlock();
    while (b && b->parentOp())
      b = b->parentOp()->parentBlock();
    if (b != g.body())
      throw Error(ErrorKind::User, "operand " + std::to_string(i) + " (%" + v->name() +
                                       ") belongs to another graph than @" + g.name());
  }
}

std::vector<Value *> addOp(Graph &g, const std::string &name, const std::vector<Value *> &operands,
                           nb::handle attrs,
                           std::optional<std::tuple<std::string, int, std::string>> loc) {
  const OpDef &def = lookupOp(name);
  checkOwnValues(g, operands);
  Block *body = g.body();
  // Insert before the return when the outputs are already set.
  Op *term = body->terminator();
  Builder b(body, term);
  if (loc) b.setLoc(SourceLoc{std::get<0>(*loc), std::get<1>(*loc), std::get<2>(*loc)});
  Op *op;
  try {
    op = b.create(name, operands, toAttrMap(&def, attrs));
  } catch (const TypeInferenceError &e) {
    throw TypeInferenceError(withOpName(name, e.what()));
  }
  std::vector<Value *> out;
  for (const auto &r : op->results())
    out.push_back(r.get());
  return out;
}

void setOutputs(Graph &g, const std::vector<Value *> &values) {
  checkOwnValues(g, values);
  Block *body = g.body();
  if (Op *term = body->terminator()) body->erase(term);
  Builder(body).createWithTypes("return", values, {});
}

} // namespace
} // namespace xjit::py

NB_MODULE(_xjit, m) {
  using namespace xjit;
  using namespace xjit::py;
  m.doc() = "xjit core: graph IR, verifier, op registry and reference interpreter";
  m.attr("__version__") = XJIT_VERSION;

  gExc.base = newException(m, "XjitError", {PyExc_Exception});
  gExc.parse = newException(m, "ParseError", {gExc.base});
  gExc.verify = newException(m, "VerifyError", {gExc.base});
  gExc.inference = newException(m, "InferenceError", {gExc.base, PyExc_TypeError});
  gExc.kernel = newException(m, "KernelError", {gExc.base, PyExc_RuntimeError});
  nb::register_exception_translator(translateException);

  nb::class_<Value>(m, "Value", "An SSA value of a graph (owned by the graph).")
      .def_prop_ro("type", [](const Value &v) { return v.type().str(); })
      .def_prop_rw("name", &Value::name, &Value::setName)
      .def("__repr__",
           [](const Value &v) { return "<xjit Value %" + v.name() + ": " + v.type().str() + ">"; });

  nb::class_<Graph>(m, "Graph", "A graph: SSA ops in a body block with inputs and outputs.")
      .def(nb::init<std::string>(), "name"_a = "main")
      .def_prop_rw("name", &Graph::name, &Graph::setName)
      .def("__str__", [](const Graph &g) { return printGraph(g); })
      .def(
          "print",
          [](const Graph &g, bool locations) {
            return printGraph(g, PrintOptions{.printLocations = locations});
          },
          "locations"_a = true)
      .def("verify", &verifyGraph, "All problems found (empty if the graph is valid).")
      .def("verify_or_raise", &verifyOrThrow, "Raises VerifyError for the first problem.")
      .def_prop_ro("inputs",
                   [](const Graph &g) {
                     std::vector<std::string> out;
                     for (size_t i = 0; i < g.numInputs(); ++i)
                       out.push_back(g.input(i)->type().str());
                     return out;
                   })
      .def_prop_ro("outputs", [](const Graph &g) { return typeStrings(g.outputTypes()); })
      .def_prop_ro("num_ops", &Graph::numOps)
      .def("clone", &Graph::clone)
      .def(
          "add_input",
          [](Graph &g, const std::string &type, const std::string &name) {
            return g.addInput(parseType(type), name);
          },
          "type"_a, "name"_a = "", nb::rv_policy::reference_internal)
      .def("add_op", &addOp, "op"_a, "operands"_a, "attrs"_a = nb::none(), "loc"_a = nb::none(),
           nb::rv_policy::reference_internal)
      .def("set_outputs", &setOutputs, "values"_a);

  m.def(
      "parse",
      [](const std::string &text, const std::string &filename) {
        return parseGraph(text, filename);
      },
      "text"_a, "filename"_a = "<input>");
  m.def(
      "parse_module",
      [](const std::string &text, const std::string &filename) {
        return parseModule(text, filename);
      },
      "text"_a, "filename"_a = "<input>");
  m.def("run", &runGraph, "graph"_a, "inputs"_a, "framework"_a = "numpy");
  m.def("run_op", &runOp, "op"_a, "operands"_a, "attrs"_a = nb::none(), "framework"_a = "numpy");
  m.def("ops", &opNames);
  m.def("op_info", &opInfo, "name"_a);
  bindRuntime(m);
}
