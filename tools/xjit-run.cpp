// xjit-run: runs an IR graph with the reference interpreter on .npy inputs and
// writes .npy outputs.
//
//   xjit-run graph.xir in0.npy int:3 ... [-o OUTDIR | --out a.npy,b.npy]
//
// Inputs are .npy files or scalars written `int:3`, `float:2.5`, `bool:true`,
// `none`. Outputs go to OUTDIR/out0.npy, OUTDIR/out1.npy ... with -o, to the
// listed files with --out, and are printed otherwise. Scalar outputs are
// written as 0-d arrays (int: i64, float: f64, bool). Exit status: 0 on
// success, 1 for user errors (bad arguments, malformed IR or .npy, invalid
// graph, a failing op), 2 for internal errors.
#include "npy.h"

#include "xjit/ir/diagnostics.h"
#include "xjit/ir/interpreter.h"
#include "xjit/ir/parser.h"
#include "xjit/ir/verifier.h"

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace {

using namespace xjit;

constexpr const char *kUsage =
    "usage: xjit-run GRAPH.xir [INPUT ...] [-o OUTDIR | --out FILE[,FILE...]]\n"
    "  INPUT: a .npy file, int:N, float:X, bool:true|false or none\n"
    "  -o OUTDIR        write outputs to OUTDIR/out0.npy, OUTDIR/out1.npy, "
    "...\n"
    "  --out F0,F1,...  write output i to Fi\n"
    "  (without -o/--out the outputs are printed)\n"
    "bf16 arrays are stored as the 2-byte void dtype '|V2' holding the raw bits (numpy has no\n"
    "bfloat16); scalar outputs are written as 0-d arrays (int: i64, float: f64, bool).\n";

[[noreturn]] void usageError(const std::string &msg) {
  throw Error(ErrorKind::User, msg + "\n" + kUsage);
}

struct Options {
  std::string graphPath;
  std::vector<std::string> inputs;
  std::optional<std::string> outDir;
  std::vector<std::string> outFiles;
};

std::vector<std::string> splitCommas(const std::string &s) {
  std::vector<std::string> parts;
  std::stringstream ss(s);
  for (std::string p; std::getline(ss, p, ',');) {
    if (p.empty())
      usageError("--out: empty file name in '" + s + "'");
    parts.push_back(p);
  }
  return parts;
}

std::optional<Options> parseArgs(int argc, char **argv) {
  Options o;
  bool outGiven = false;
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc)
        usageError(a + " needs a value");
      return argv[++i];
    };
    if (a == "-h" || a == "--help")
      return std::nullopt;
    if (a == "-o" || a == "--outdir" || a == "--out") {
      if (outGiven)
        usageError("give one of -o and --out, once");
      outGiven = true;
      if (a == "--out")
        o.outFiles = splitCommas(value());
      else
        o.outDir = value();
    } else if (a.starts_with("--out=")) {
      if (outGiven)
        usageError("give one of -o and --out, once");
      outGiven = true;
      o.outFiles = splitCommas(a.substr(6));
    } else if (a.size() > 1 && a[0] == '-') {
      usageError("unknown option '" + a + "'");
    } else {
      positional.push_back(a);
    }
  }
  if (positional.empty())
    usageError("missing the graph file");
  o.graphPath = positional[0];
  o.inputs.assign(positional.begin() + 1, positional.end());
  return o;
}

std::string readFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw Error(ErrorKind::User, path + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// An input argument: a typed scalar literal or a .npy path.
RtValue parseInput(const std::string &arg, size_t index) {
  auto bad = [&](const std::string &why) -> RtValue {
    throw Error(ErrorKind::User, "input " + std::to_string(index) + " '" + arg + "': " + why);
  };
  if (arg == "none")
    return RtValue();
  if (arg.starts_with("int:")) {
    std::string_view s = std::string_view(arg).substr(4);
    int64_t v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size() || s.empty())
      return bad("not a 64-bit integer");
    return RtValue(v);
  }
  if (arg.starts_with("float:")) {
    std::string s = arg.substr(6);
    char *end = nullptr;
    double v = std::strtod(s.c_str(), &end);
    if (s.empty() || end != s.c_str() + s.size())
      return bad("not a number");
    return RtValue(v);
  }
  if (arg.starts_with("bool:")) {
    std::string s = arg.substr(5);
    if (s == "true" || s == "1" || s == "True")
      return RtValue(true);
    if (s == "false" || s == "0" || s == "False")
      return RtValue(false);
    return bad("expected bool:true or bool:false");
  }
  return RtValue(npy::read(arg));
}

/// Checks a tensor input's dtype and rank against the declared type, naming the
/// file (the interpreter checks the dims, symbols included).
void checkInput(const Graph &g, size_t i, const RtValue &v, const std::string &arg) {
  const Type &t = g.input(i)->type();
  if (!v.isTensor() || !t.isTensor())
    return;
  const Tensor &x = v.tensor();
  if (x.dtype() != t.dtype() || x.rank() != t.rank()) {
    std::string shape;
    for (int64_t d : x.sizes())
      shape += (shape.empty() ? "" : ",") + std::to_string(d);
    throw Error(ErrorKind::User, "input " + std::to_string(i) + " (" + arg +
                                     "): " + std::string(dtypeName(x.dtype())) + "[" + shape +
                                     "] does not match the declared type " + t.str());
  }
}

/// A scalar output as a 0-d tensor for .npy.
Tensor outputTensor(const RtValue &v, size_t i) {
  if (v.isTensor())
    return v.tensor();
  Tensor t;
  if (v.isBool()) {
    t = Tensor::empty(DType::Bool, {});
    t.setInt(0, v.toBool());
  } else if (v.isInt()) {
    t = Tensor::empty(DType::I64, {});
    t.setInt(0, v.toInt());
  } else if (v.isFloat()) {
    t = Tensor::empty(DType::F64, {});
    t.setDouble(0, v.toDouble());
  } else {
    throw Error(ErrorKind::User, "output " + std::to_string(i) + " is a " + v.kindName() +
                                     "; .npy files hold tensors and scalars only");
  }
  return t;
}

std::string formatElement(const Tensor &t, int64_t i) {
  if (t.dtype() == DType::Bool)
    return t.getInt(i) ? "true" : "false";
  if (!isFloating(t.dtype()))
    return std::to_string(t.getInt(i));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", t.getDouble(i));
  return buf;
}

/// Nested-bracket text of a tensor's values, row-major.
void formatValues(std::ostream &os, const Tensor &t, size_t dim, int64_t &next) {
  if (dim == t.sizes().size()) {
    os << formatElement(t, next++);
    return;
  }
  os << '[';
  for (int64_t j = 0; j < t.sizes()[dim]; ++j) {
    if (j)
      os << ", ";
    formatValues(os, t, dim + 1, next);
  }
  os << ']';
}

void printOutput(std::ostream &os, const Type &type, const RtValue &v, size_t i) {
  os << "out" << i << ": " << type.str() << " = ";
  if (v.isTensor()) {
    int64_t next = 0;
    formatValues(os, v.tensor(), 0, next);
  } else if (v.isNone()) {
    os << "none";
  } else if (v.isBool()) {
    os << (v.toBool() ? "true" : "false");
  } else if (v.isInt()) {
    os << v.toInt();
  } else if (v.isFloat()) {
    os << formatElement(outputTensor(v, i), 0);
  } else if (v.isStr()) {
    os << '"' << v.str() << '"';
  } else {
    os << '<' << v.kindName() << '>';
  }
  os << '\n';
}

int run(const Options &o) {
  std::unique_ptr<Graph> g = parseGraph(readFile(o.graphPath), o.graphPath);
  std::vector<std::string> problems = verifyGraph(*g);
  if (!problems.empty()) {
    for (const std::string &p : problems)
      std::cerr << o.graphPath << ": error: " << p << '\n';
    return 1;
  }
  if (o.inputs.size() != g->numInputs())
    throw Error(ErrorKind::User, "graph @" + g->name() + " takes " +
                                     std::to_string(g->numInputs()) + " inputs, got " +
                                     std::to_string(o.inputs.size()));
  std::vector<RtValue> inputs;
  for (size_t i = 0; i < o.inputs.size(); ++i) {
    inputs.push_back(parseInput(o.inputs[i], i));
    checkInput(*g, i, inputs.back(), o.inputs[i]);
  }
  std::vector<RtValue> outputs = interpret(*g, std::move(inputs));

  if (!o.outDir && o.outFiles.empty()) {
    std::vector<Type> types = g->outputTypes();
    for (size_t i = 0; i < outputs.size(); ++i)
      printOutput(std::cout, types[i], outputs[i], i);
    return 0;
  }
  std::vector<std::string> paths = o.outFiles;
  if (o.outDir) {
    std::error_code ec;
    std::filesystem::create_directories(*o.outDir, ec);
    if (ec)
      throw Error(ErrorKind::User, *o.outDir + ": cannot create directory: " + ec.message());
    for (size_t i = 0; i < outputs.size(); ++i)
      paths.push_back(
          (std::filesystem::path(*o.outDir) / ("out" + std::to_string(i) + ".npy")).string());
  }
  if (paths.size() != outputs.size())
    throw Error(ErrorKind::User, "--out names " + std::to_string(paths.size()) +
                                     " files but the graph has " + std::to_string(outputs.size()) +
                                     " outputs");
  for (size_t i = 0; i < outputs.size(); ++i)
    npy::write(paths[i], outputTensor(outputs[i], i));
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  try {
    std::optional<Options> o = parseArgs(argc, argv);
    if (!o) {
      std::cout << kUsage;
      return 0;
    }
    return run(*o);
  } catch (const ParseError &e) {
    std::cerr << e.what() << '\n'; // already "file:line:col: error: message"
    return 1;
  } catch (const Error &e) {
    std::cerr << "xjit-run: " << (e.kind() == ErrorKind::Internal ? "internal error: " : "error: ")
              << e.what() << '\n';
    if (!e.hint().empty())
      std::cerr << "  hint: " << e.hint() << '\n';
    return e.kind() == ErrorKind::Internal ? 2 : 1;
  } catch (const std::exception &e) {
    std::cerr << "xjit-run: internal error: " << e.what() << '\n';
    return 2;
  }
}
