// Kernel IR: constructors, the text printer and the verifier.
#include "xjit/backend/kernel_ir.h"

#include "xjit/ir/attr.h"
#include "xjit/ir/diagnostics.h"

#include <algorithm>
#include <functional>
#include <set>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

namespace xjit::backend {

// ---- names ----

namespace {
constexpr std::string_view kUnaryNames[] = {
    "neg",        "abs",   "not",     "floor", "ceil", "trunc",  "round_even", "sqrt",  "rsqrt",
    "reciprocal", "exp",   "exp2",    "expm1", "log",  "log2",   "log10",      "log1p", "sin",
    "cos",        "tan",   "asin",    "acos",  "atan", "sinh",   "cosh",       "tanh",  "asinh",
    "acosh",      "atanh", "sigmoid", "erf",   "erfc", "lgamma", "isnan",      "isinf", "signbit"};
constexpr std::string_view kBinaryNames[] = {"add",      "sub", "mul", "div",   "rem",
                                             "max",      "min", "pow", "atan2", "hypot",
                                             "copysign", "and", "or",  "xor"};
constexpr std::string_view kCmpNames[] = {"eq", "ne", "lt", "le", "gt", "ge"};
static_assert(std::size(kUnaryNames) == size_t(UnaryOp::SignBit) + 1);
static_assert(std::size(kBinaryNames) == size_t(BinaryOp::Xor) + 1);
} // namespace

std::string_view unaryOpName(UnaryOp op) { return kUnaryNames[size_t(op)]; }
std::string_view binaryOpName(BinaryOp op) { return kBinaryNames[size_t(op)]; }
std::string_view cmpOpName(CmpOp op) { return kCmpNames[size_t(op)]; }

bool isFloatOnly(UnaryOp op) {
  switch (op) {
  case UnaryOp::Neg:
  case UnaryOp::Abs:
  case UnaryOp::Not: return false;
  default: return true;
  }
}

bool isFloatOnly(BinaryOp op) {
  return op == BinaryOp::Atan2 || op == BinaryOp::Hypot || op == BinaryOp::CopySign;
}

static bool isPredicate(UnaryOp op) {
  return op == UnaryOp::IsNan || op == UnaryOp::IsInf || op == UnaryOp::SignBit;
}

// ---- constructors ----

namespace {
Expr make(ExprNode n) { return std::make_shared<const ExprNode>(std::move(n)); }
} // namespace

Expr constInt(DType dtype, int64_t v) {
  return make({.kind = ExprKind::Const, .dtype = dtype, .ival = v, .fval = double(v)});
}
Expr constFloat(DType dtype, double v) {
  return make({.kind = ExprKind::Const, .dtype = dtype, .fval = v});
}
Expr constBool(bool v) { return constInt(DType::Bool, v ? 1 : 0); }
Expr constIdx(int64_t v) { return constInt(DType::I64, v); }
Expr var(int64_t id) { return make({.kind = ExprKind::Var, .dtype = DType::I64, .index = id}); }
Expr param(int64_t i, DType dtype) {
  return make({.kind = ExprKind::Param, .dtype = dtype, .index = i});
}
Expr sizeOf(int64_t b, int64_t d) {
  return make({.kind = ExprKind::Size, .dtype = DType::I64, .index = b, .dim = d});
}
Expr strideOf(int64_t b, int64_t d) {
  return make({.kind = ExprKind::Stride, .dtype = DType::I64, .index = b, .dim = d});
}
Expr load(int64_t b, DType dtype, Expr offset) {
  return make({.kind = ExprKind::Load, .dtype = dtype, .index = b, .args = {std::move(offset)}});
}
Expr acc(int64_t id, DType dtype) {
  return make({.kind = ExprKind::Acc, .dtype = dtype, .index = id});
}
Expr accAt(int64_t id, DType dtype, Expr lane) {
  return make({.kind = ExprKind::Acc, .dtype = dtype, .index = id, .args = {std::move(lane)}});
}
Expr unary(UnaryOp op, Expr a) {
  DType d = isPredicate(op) ? DType::Bool : a->dtype;
  return make({.kind = ExprKind::Unary, .dtype = d, .op = uint8_t(op), .args = {std::move(a)}});
}
Expr binary(BinaryOp op, Expr a, Expr b) {
  DType d = a->dtype;
  return make({.kind = ExprKind::Binary,
               .dtype = d,
               .op = uint8_t(op),
               .args = {std::move(a), std::move(b)}});
}
Expr compare(CmpOp op, Expr a, Expr b) {
  return make({.kind = ExprKind::Compare,
               .dtype = DType::Bool,
               .op = uint8_t(op),
               .args = {std::move(a), std::move(b)}});
}
Expr select(Expr c, Expr a, Expr b) {
  DType d = a->dtype;
  return make(
      {.kind = ExprKind::Select, .dtype = d, .args = {std::move(c), std::move(a), std::move(b)}});
}
Expr cast(DType dtype, Expr a) {
  if (a->dtype == dtype) return a;
  return make({.kind = ExprKind::Cast, .dtype = dtype, .args = {std::move(a)}});
}

bool isConst(const Expr &e, int64_t v) {
  return e->kind == ExprKind::Const && !isFloating(e->dtype) && e->ival == v;
}

Expr addIdx(Expr a, Expr b) {
  if (isConst(a, 0)) return b;
  if (isConst(b, 0)) return a;
  if (a->kind == ExprKind::Const && b->kind == ExprKind::Const) return constIdx(a->ival + b->ival);
  return binary(BinaryOp::Add, std::move(a), std::move(b));
}

Expr mulIdx(Expr a, Expr b) {
  if (isConst(a, 0) || isConst(b, 0)) return constIdx(0);
  if (isConst(a, 1)) return b;
  if (isConst(b, 1)) return a;
  if (a->kind == ExprKind::Const && b->kind == ExprKind::Const) return constIdx(a->ival * b->ival);
  return binary(BinaryOp::Mul, std::move(a), std::move(b));
}

Expr andAll(const std::vector<Expr> &conds) {
  Expr r;
  for (const Expr &c : conds)
    r = r ? binary(BinaryOp::And, r, c) : c;
  return r ? r : constBool(true);
}

Stmt forLoop(int64_t v, Expr extent, StmtList body, bool vectorize) {
  return Stmt{.kind = StmtKind::For,
              .index = v,
              .vectorize = vectorize,
              .a = std::move(extent),
              .body = std::move(body)};
}
Stmt parallelFor(int64_t v, Expr extent, Expr work, StmtList body, bool vectorize) {
  Stmt s = forLoop(v, std::move(extent), std::move(body), vectorize);
  s.parallel = true;
  s.b = std::move(work);
  return s;
}
Stmt ifThen(Expr cond, StmtList then, StmtList orelse) {
  return Stmt{.kind = StmtKind::If,
              .a = std::move(cond),
              .body = std::move(then),
              .orelse = std::move(orelse)};
}
Stmt store(int64_t b, Expr offset, Expr value) {
  return Stmt{.kind = StmtKind::Store, .index = b, .a = std::move(offset), .b = std::move(value)};
}
Stmt initAccAt(int64_t a, Expr lane, Expr init) {
  return Stmt{.kind = StmtKind::InitAcc, .index = a, .a = std::move(init), .b = std::move(lane)};
}
Stmt reduceAt(int64_t a, Expr lane, BinaryOp combine, Expr value) {
  return Stmt{.kind = StmtKind::Reduce,
              .index = a,
              .combine = combine,
              .a = std::move(value),
              .b = std::move(lane)};
}
Stmt initAcc(int64_t a, Expr init) {
  return Stmt{.kind = StmtKind::InitAcc, .index = a, .a = std::move(init)};
}
Stmt reduce(int64_t a, BinaryOp combine, Expr value) {
  return Stmt{.kind = StmtKind::Reduce, .index = a, .combine = combine, .a = std::move(value)};
}
Stmt assertTrue(Expr cond, int64_t message) {
  return Stmt{.kind = StmtKind::Assert, .index = message, .a = std::move(cond)};
}

int64_t Kernel::addAcc(std::string n, DType dtype, int64_t lanes) {
  // Statements name their accumulator in the printed kernel, which is also the compile cache's
  // key: two of one name (a reduction lowered inside another's loop takes the same "r<k>")
  // would print kernels that read different accumulators alike.
  auto taken = [&](const std::string &name) {
    return std::any_of(accs.begin(), accs.end(), [&](const AccDecl &a) { return a.name == name; });
  };
  if (taken(n)) {
    size_t i = accs.size();
    while (taken(n + "_" + std::to_string(i)))
      ++i;
    n += "_" + std::to_string(i);
  }
  accs.push_back({std::move(n), dtype, lanes});
  return static_cast<int64_t>(accs.size()) - 1;
}

int64_t Kernel::dimOffset(int64_t buffer) const {
  int64_t off = 0;
  for (int64_t b = 0; b < buffer; ++b)
    off += buffers[size_t(b)].rank();
  return off;
}

int64_t Kernel::totalDims() const { return dimOffset(static_cast<int64_t>(buffers.size())); }

// ---- printer ----

namespace {

class Printer {
public:
  explicit Printer(const Kernel &k) : k_(k) {}

  std::string kernel() {
    os_ << "kernel " << k_.name << "(";
    for (size_t b = 0; b < k_.buffers.size(); ++b) {
      const BufferParam &p = k_.buffers[b];
      os_ << (b ? ", " : "") << (p.output ? "out " : "in ") << p.name << ": " << dtypeName(p.dtype)
          << shapeStr(p.sizes);
      if (p.aliasOf >= 0 && size_t(p.aliasOf) < k_.buffers.size())
        os_ << " in place of " << k_.buffers[size_t(p.aliasOf)].name;
    }
    if (!k_.scalars.empty()) {
      os_ << "; ";
      for (size_t i = 0; i < k_.scalars.size(); ++i)
        os_ << (i ? ", " : "") << k_.scalars[i].name << ": " << dtypeName(k_.scalars[i].dtype);
    }
    os_ << ") {\n";
    for (size_t a = 0; a < k_.accs.size(); ++a)
      os_ << "  acc " << k_.accs[a].name << ": " << dtypeName(k_.accs[a].dtype)
          << (k_.accs[a].lanes ? "[" + std::to_string(k_.accs[a].lanes) + "]" : "") << "\n";
    for (size_t e = 0; e < k_.errors.size(); ++e)
      os_ << "  error " << e + 1 << ": \"" << k_.errors[e] << "\"\n";
    stmts(k_.body, 1);
    os_ << "}\n";
    return os_.str();
  }

  /// An expression on its own (shared nodes printed inline).
  std::string expr(const Expr &e) { return str(e, 0); }

private:
  void indent(int depth) { os_ << std::string(size_t(depth) * 2, ' '); }

  void stmts(const StmtList &list, int depth) {
    for (const Stmt &s : list)
      stmt(s, depth);
  }

  void stmt(const Stmt &s, int depth) {
    temps_.clear();
    std::unordered_map<const ExprNode *, int> refs;
    for (const Expr *e : {&s.a, &s.b})
      if (*e) countRefs(*e, refs);
    // Shared non-trivial subexpressions are printed once, as temporaries, before the statement.
    std::vector<const ExprNode *> order;
    std::unordered_set<const ExprNode *> seen;
    std::function<void(const Expr &)> post = [&](const Expr &e) {
      if (!seen.insert(e.get()).second) return;
      for (const Expr &a : e->args)
        post(a);
      if (refs[e.get()] > 1 && !e->args.empty()) order.push_back(e.get());
    };
    for (const Expr *e : {&s.a, &s.b})
      if (*e) post(*e);
    for (const ExprNode *n : order) {
      std::string text = node(*n);
      indent(depth);
      std::string name = "%t" + std::to_string(nextTemp_++);
      os_ << name << " = " << text << "\n";
      temps_[n] = name;
    }
    indent(depth);
    switch (s.kind) {
    case StmtKind::For:
      os_ << (s.parallel ? "parallel for i" : "for i") << s.index << " in 0.." << str(s.a, 0)
          << (s.vectorize ? "" : " novec");
      if (s.parallel) os_ << " work " << str(s.b, 0);
      for (size_t p = 0; p < s.partials.size(); ++p)
        os_ << (p ? ", " : " partials ") << accName(s.partials[p].first) << " "
            << binaryOpName(s.partials[p].second);
      os_ << " {\n";
      stmts(s.body, depth + 1);
      indent(depth);
      os_ << "}\n";
      break;
    case StmtKind::If:
      os_ << "if " << str(s.a, 0) << " {\n";
      stmts(s.body, depth + 1);
      indent(depth);
      if (!s.orelse.empty()) {
        os_ << "} else {\n";
        stmts(s.orelse, depth + 1);
        indent(depth);
      }
      os_ << "}\n";
      break;
    case StmtKind::Store:
      os_ << bufName(s.index) << "[" << str(s.a, 0) << "] = " << str(s.b, 0) << "\n";
      break;
    case StmtKind::InitAcc: {
      std::string lhs = accName(s.index) + (s.b ? "[" + str(s.b, 0) + "]" : "");
      os_ << lhs << " = " << str(s.a, 0) << "\n";
      break;
    }
    case StmtKind::Reduce: {
      std::string lhs = accName(s.index) + (s.b ? "[" + str(s.b, 0) + "]" : "");
      os_ << lhs << " = " << binaryOpName(s.combine) << "(" << lhs << ", " << str(s.a, 0) << ")\n";
      break;
    }
    case StmtKind::Assert:
      if (s.index == kStrideCheck)
        os_ << "assert " << str(s.a, 0) << ", else the general version\n";
      else
        os_ << "assert " << str(s.a, 0) << ", error " << s.index + 1 << "\n";
      break;
    }
  }

  static void countRefs(const Expr &e, std::unordered_map<const ExprNode *, int> &refs) {
    if (refs[e.get()]++ > 0) return;
    for (const Expr &a : e->args)
      countRefs(a, refs);
  }

  std::string bufName(int64_t b) const {
    return b >= 0 && size_t(b) < k_.buffers.size() ? k_.buffers[size_t(b)].name
                                                   : "<buffer " + std::to_string(b) + ">";
  }
  std::string accName(int64_t a) const {
    return a >= 0 && size_t(a) < k_.accs.size() ? k_.accs[size_t(a)].name
                                                : "<acc " + std::to_string(a) + ">";
  }

  // Precedence for the infix index arithmetic: + and - are 1, * is 2, atoms 3.
  static int prec(const ExprNode &n) {
    if (n.kind != ExprKind::Binary || n.dtype != DType::I64) return 3;
    auto op = BinaryOp(n.op);
    return op == BinaryOp::Mul ? 2 : (op == BinaryOp::Add || op == BinaryOp::Sub) ? 1 : 3;
  }

  std::string str(const Expr &e, int parentPrec) {
    auto it = temps_.find(e.get());
    if (it != temps_.end()) return it->second;
    std::string s = node(*e);
    return prec(*e) < parentPrec ? "(" + s + ")" : s;
  }

  std::string node(const ExprNode &n) {
    auto arg = [&](size_t i, int p = 0) { return str(n.args[i], p); };
    switch (n.kind) {
    case ExprKind::Const:
      if (n.dtype == DType::Bool) return n.ival ? "true" : "false";
      if (n.dtype == DType::I64) return std::to_string(n.ival);
      return (isFloating(n.dtype) ? formatDouble(n.fval) : std::to_string(n.ival)) + ":" +
             std::string(dtypeName(n.dtype));
    case ExprKind::Var: return "i" + std::to_string(n.index);
    case ExprKind::Param:
      return n.index >= 0 && size_t(n.index) < k_.scalars.size() ? k_.scalars[size_t(n.index)].name
                                                                 : "<param>";
    case ExprKind::Size: return "size(" + bufName(n.index) + "," + std::to_string(n.dim) + ")";
    case ExprKind::Stride: return "stride(" + bufName(n.index) + "," + std::to_string(n.dim) + ")";
    case ExprKind::Load: return bufName(n.index) + "[" + arg(0) + "]";
    case ExprKind::Acc: return accName(n.index) + (n.args.empty() ? "" : "[" + arg(0) + "]");
    case ExprKind::Unary: return std::string(unaryOpName(UnaryOp(n.op))) + "(" + arg(0) + ")";
    case ExprKind::Binary: {
      int p = prec(n);
      if (p == 1) return arg(0, 1) + (BinaryOp(n.op) == BinaryOp::Add ? " + " : " - ") + arg(1, 2);
      if (p == 2) return arg(0, 2) + "*" + arg(1, 3);
      return std::string(binaryOpName(BinaryOp(n.op))) + "(" + arg(0) + ", " + arg(1) + ")";
    }
    case ExprKind::Compare:
      return std::string(cmpOpName(CmpOp(n.op))) + "(" + arg(0) + ", " + arg(1) + ")";
    case ExprKind::Select: return "select(" + arg(0) + ", " + arg(1) + ", " + arg(2) + ")";
    case ExprKind::Cast: return "cast<" + std::string(dtypeName(n.dtype)) + ">(" + arg(0) + ")";
    }
    return "<?>";
  }

  const Kernel &k_;
  std::ostringstream os_;
  std::unordered_map<const ExprNode *, std::string> temps_;
  int nextTemp_ = 0;
};

} // namespace

std::string printKernel(const Kernel &k) {
  std::string text = Printer(k).kernel();
  if (k.general) text += "general version:\n" + printKernel(*k.general);
  return text;
}
std::string printExpr(const Expr &e, const Kernel &k) { return Printer(k).expr(e); }

// ---- verifier ----

namespace {

bool is16BitFloat(DType d) { return d == DType::F16 || d == DType::BF16; }

class Verifier {
public:
  explicit Verifier(const Kernel &k) : k_(k) {}

  std::vector<std::string> run() {
    std::set<int64_t> shared;
    for (const BufferParam &b : k_.buffers) {
      if (b.name.empty()) fail("a buffer has no name");
      if (b.aliasOf < 0) continue;
      if (!b.output || !validBuffer(b.aliasOf) || k_.buffers[size_t(b.aliasOf)].output ||
          k_.buffers[size_t(b.aliasOf)].dtype != b.dtype ||
          !(k_.buffers[size_t(b.aliasOf)].sizes == b.sizes) || !shared.insert(b.aliasOf).second)
        fail("buffer " + b.name +
             " shares memory with a buffer that is not an input of its dtype and sizes, or one "
             "another output shares");
    }
    stmts(k_.body);
    return std::move(errors_);
  }

private:
  void fail(std::string m) { errors_.push_back(std::move(m)); }

  void stmts(const StmtList &list) {
    for (const Stmt &s : list)
      stmt(s);
  }

  void stmt(const Stmt &s) {
    checked_.clear();
    switch (s.kind) {
    case StmtKind::For:
      if (s.index < 0 || s.index >= k_.numVars)
        return fail("for: loop variable i" + std::to_string(s.index) + " is not declared");
      if (!defined_.insert(s.index).second)
        return fail("for: loop variable i" + std::to_string(s.index) + " is defined twice");
      expect(s.a, DType::I64, "for extent");
      if (s.parallel) {
        expect(s.b, DType::I64, "parallel for work");
        if (!inScope_.empty()) fail("parallel for: i" + std::to_string(s.index) + " is nested");
        // Each thread has its own accumulators: those initialized outside are not visible,
        // except the partial ones, whose copies start from their combine op's identity.
        std::set<int64_t> outside = std::move(initialized_);
        initialized_.clear();
        for (const auto &[acc, combine] : s.partials) {
          if (!validAcc(acc)) {
            fail("parallel for: partial accumulator " + std::to_string(acc) + " does not exist");
            continue;
          }
          const AccDecl &a = k_.accs[size_t(acc)];
          if (a.lanes) fail("parallel for: partial accumulator " + a.name + " is an array");
          if (!outside.count(acc))
            fail("parallel for: partial accumulator " + a.name + " is not initialized before it");
          if (combine != BinaryOp::Add && combine != BinaryOp::Mul && combine != BinaryOp::Max &&
              combine != BinaryOp::Min)
            fail("parallel for: " + std::string(binaryOpName(combine)) +
                 " is not a partial combine op");
          initialized_.insert(acc);
        }
        inScope_.insert(s.index);
        stmts(s.body);
        inScope_.erase(s.index);
        initialized_ = std::move(outside);
        return;
      }
      inScope_.insert(s.index);
      stmts(s.body);
      inScope_.erase(s.index);
      return;
    case StmtKind::If:
      expect(s.a, DType::Bool, "if condition");
      stmts(s.body);
      stmts(s.orelse);
      return;
    case StmtKind::Store: {
      if (!validBuffer(s.index))
        return fail("store: buffer " + std::to_string(s.index) + " does not exist");
      const BufferParam &b = k_.buffers[size_t(s.index)];
      if (!b.output) fail("store: buffer " + b.name + " is an input (read-only)");
      expect(s.a, DType::I64, "store offset");
      expect(s.b, b.dtype, "value stored to " + b.name);
      return;
    }
    case StmtKind::InitAcc:
      if (!validAcc(s.index))
        return fail("acc init: accumulator " + std::to_string(s.index) + " does not exist");
      expect(s.a, k_.accs[size_t(s.index)].dtype, "accumulator init");
      checkLane(k_.accs[size_t(s.index)], s.b);
      initialized_.insert(s.index);
      return;
    case StmtKind::Reduce: {
      if (!validAcc(s.index))
        return fail("reduce: accumulator " + std::to_string(s.index) + " does not exist");
      const AccDecl &a = k_.accs[size_t(s.index)];
      if (!initialized_.count(s.index))
        fail("reduce: accumulator " + a.name + " is used before it is initialized");
      switch (s.combine) {
      case BinaryOp::Add:
      case BinaryOp::Mul:
      case BinaryOp::Max:
      case BinaryOp::Min:
      case BinaryOp::And:
      case BinaryOp::Or:
      case BinaryOp::Xor: break;
      default: fail("reduce: " + std::string(binaryOpName(s.combine)) + " is not a combine op");
      }
      expect(s.a, a.dtype, "value reduced into " + a.name);
      checkLane(a, s.b);
      checkBinaryDType(s.combine, a.dtype);
      return;
    }
    case StmtKind::Assert:
      if (s.index == kStrideCheck) {
        if (!k_.general) fail("assert: a stride check in a kernel without a general version");
      } else if (s.index < 0 || size_t(s.index) >= k_.errors.size())
        fail("assert: error message " + std::to_string(s.index) + " does not exist");
      expect(s.a, DType::Bool, "assert condition");
      return;
    }
  }

  bool validBuffer(int64_t b) const { return b >= 0 && size_t(b) < k_.buffers.size(); }
  bool validAcc(int64_t a) const { return a >= 0 && size_t(a) < k_.accs.size(); }
  /// An array accumulator is used at a lane (i64), a scalar one without.
  void checkLane(const AccDecl &a, const Expr &lane) {
    if ((a.lanes > 0) != bool(lane))
      return fail("accumulator " + a.name + (a.lanes ? " needs a lane" : " has no lanes"));
    if (lane) expect(lane, DType::I64, "accumulator lane");
  }

  void expect(const Expr &e, DType d, const std::string &what) {
    if (!e) return fail(what + ": missing expression");
    expr(e);
    if (e->dtype != d)
      fail(what + ": expected " + std::string(dtypeName(d)) + ", got " +
           std::string(dtypeName(e->dtype)) + " in " + printExpr(e, k_));
  }

  void checkBinaryDType(BinaryOp op, DType d) {
    std::string name(binaryOpName(op));
    if (is16BitFloat(d))
      fail(name + ": " + std::string(dtypeName(d)) + " is a storage type; compute in f32");
    bool isBool = d == DType::Bool;
    switch (op) {
    case BinaryOp::And:
    case BinaryOp::Or:
    case BinaryOp::Xor:
      if (isFloating(d))
        fail(name + ": needs bool or integer operands, got " + std::string(dtypeName(d)));
      break;
    case BinaryOp::Max:
    case BinaryOp::Min: break;
    default:
      if (isBool) fail(name + ": bool operands are not supported");
      if (isFloatOnly(op) && !isFloating(d))
        fail(name + ": needs floating operands, got " + std::string(dtypeName(d)));
    }
  }

  void expr(const Expr &e) {
    if (!checked_.insert(e.get()).second) return;
    for (const Expr &a : e->args) {
      if (!a) return fail("an expression has a null operand");
      expr(a);
    }
    const ExprNode &n = *e;
    auto argDType = [&](size_t i) { return n.args[i]->dtype; };
    auto arity = [&](size_t want) {
      if (n.args.size() != want)
        fail("expression has " + std::to_string(n.args.size()) + " operands, expected " +
             std::to_string(want));
      return n.args.size() == want;
    };
    switch (n.kind) {
    case ExprKind::Const: return;
    case ExprKind::Var:
      if (!inScope_.count(n.index))
        fail("loop variable i" + std::to_string(n.index) + " is used outside its loop");
      return;
    case ExprKind::Param:
      if (n.index < 0 || size_t(n.index) >= k_.scalars.size())
        return fail("scalar parameter " + std::to_string(n.index) + " does not exist");
      if (k_.scalars[size_t(n.index)].dtype != n.dtype)
        fail("scalar parameter " + k_.scalars[size_t(n.index)].name + " has the wrong dtype");
      return;
    case ExprKind::Size:
    case ExprKind::Stride:
      if (!validBuffer(n.index) || n.dim < 0 || n.dim >= k_.buffers[size_t(n.index)].rank())
        fail("size/stride of a dim that does not exist: " + printExpr(e, k_));
      return;
    case ExprKind::Load:
      if (!arity(1)) return;
      if (!validBuffer(n.index))
        return fail("load from buffer " + std::to_string(n.index) + " that does not exist");
      if (k_.buffers[size_t(n.index)].dtype != n.dtype)
        fail("load from " + k_.buffers[size_t(n.index)].name + " has the wrong dtype");
      if (argDType(0) != DType::I64) fail("load offset must be i64: " + printExpr(e, k_));
      return;
    case ExprKind::Acc:
      if (!validAcc(n.index))
        return fail("accumulator " + std::to_string(n.index) + " does not exist");
      if (!initialized_.count(n.index))
        fail("accumulator " + k_.accs[size_t(n.index)].name + " is read before it is set");
      if (k_.accs[size_t(n.index)].dtype != n.dtype)
        fail("accumulator " + k_.accs[size_t(n.index)].name + " read with the wrong dtype");
      if ((k_.accs[size_t(n.index)].lanes > 0) != (n.args.size() == 1))
        fail("accumulator " + k_.accs[size_t(n.index)].name + " read without its lane");
      else if (!n.args.empty() && argDType(0) != DType::I64)
        fail("accumulator lane must be i64: " + printExpr(e, k_));
      return;
    case ExprKind::Unary: {
      if (!arity(1)) return;
      auto op = UnaryOp(n.op);
      DType in = argDType(0);
      std::string name(unaryOpName(op));
      if (is16BitFloat(in))
        fail(name + ": " + std::string(dtypeName(in)) + " is a storage type; compute in f32");
      if (isFloatOnly(op) && !isFloating(in))
        fail(name + ": needs a floating operand, got " + std::string(dtypeName(in)));
      if ((op == UnaryOp::Neg || op == UnaryOp::Abs) && in == DType::Bool)
        fail(name + ": bool operands are not supported");
      if (op == UnaryOp::Not && isFloating(in)) fail("not: needs a bool or integer operand");
      if (n.dtype != (isPredicate(op) ? DType::Bool : in)) fail(name + ": wrong result dtype");
      return;
    }
    case ExprKind::Binary:
      if (!arity(2)) return;
      if (argDType(0) != argDType(1) || n.dtype != argDType(0))
        return fail(std::string(binaryOpName(BinaryOp(n.op))) +
                    ": operand dtypes differ: " + printExpr(e, k_));
      checkBinaryDType(BinaryOp(n.op), n.dtype);
      return;
    case ExprKind::Compare:
      if (!arity(2)) return;
      if (argDType(0) != argDType(1))
        fail(std::string(cmpOpName(CmpOp(n.op))) + ": operand dtypes differ: " + printExpr(e, k_));
      if (is16BitFloat(argDType(0)))
        fail("compare: 16-bit floats are a storage type; compute in f32");
      if (n.dtype != DType::Bool) fail("compare: result must be bool");
      return;
    case ExprKind::Select:
      if (!arity(3)) return;
      if (argDType(0) != DType::Bool) fail("select: condition must be bool: " + printExpr(e, k_));
      if (argDType(1) != n.dtype || argDType(2) != n.dtype)
        fail("select: operand dtypes differ: " + printExpr(e, k_));
      return;
    case ExprKind::Cast: arity(1); return;
    }
  }

  const Kernel &k_;
  std::vector<std::string> errors_;
  std::set<int64_t> inScope_, defined_, initialized_;
  std::unordered_set<const ExprNode *> checked_;
};

} // namespace

std::vector<std::string> verifyKernel(const Kernel &k) {
  std::vector<std::string> errors = Verifier(k).run();
  if (!k.general) return errors;
  // The general version runs on the same arguments.
  const Kernel &g = *k.general;
  bool sameParams = g.buffers.size() == k.buffers.size() && g.scalars.size() == k.scalars.size();
  for (size_t b = 0; sameParams && b < k.buffers.size(); ++b)
    sameParams =
        g.buffers[b].dtype == k.buffers[b].dtype && g.buffers[b].sizes == k.buffers[b].sizes &&
        g.buffers[b].output == k.buffers[b].output && g.buffers[b].aliasOf == k.buffers[b].aliasOf;
  for (size_t i = 0; sameParams && i < k.scalars.size(); ++i)
    sameParams = g.scalars[i].dtype == k.scalars[i].dtype;
  if (!sameParams) errors.push_back("the general version has other parameters");
  if (g.general) errors.push_back("the general version has a general version itself");
  for (std::string &e : verifyKernel(g))
    errors.push_back("general version: " + std::move(e));
  return errors;
}

void verifyKernelOrThrow(const Kernel &k) {
  auto errors = verifyKernel(k);
  if (!errors.empty())
    throw Error(ErrorKind::Internal, "kernel " + k.name + " is invalid: " + errors.front(),
                printKernel(k));
}

} // namespace xjit::backend
