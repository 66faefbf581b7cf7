// The reference interpreter: walks blocks op by op, running registry kernels.
#include "xjit/ir/interpreter.h"

#include "xjit/ir/diagnostics.h"
#include "xjit/ir/op_registry.h"
#include "xjit/ir/sym_attr.h"

#include <unordered_map>

namespace xjit {
namespace {

class Interpreter {
public:
  explicit Interpreter(const InterpreterOptions &opts) : opts_(opts) {}

  std::vector<RtValue> run(const Graph &g, std::vector<RtValue> inputs) {
    Block *body = g.body();
    if (inputs.size() != body->numArguments())
      throw Error(ErrorKind::User, "graph @" + g.name() + " takes " +
                                       std::to_string(body->numArguments()) + " inputs, got " +
                                       std::to_string(inputs.size()));
    for (size_t i = 0; i < inputs.size(); ++i) {
      Value *arg = body->argument(i);
      if (opts_.checkTypes) {
        std::string why = mismatch(arg->type(), inputs[i]);
        if (!why.empty())
          throw Error(ErrorKind::User, "input " + std::to_string(i) + " (%" + arg->name() +
                                           ") of graph @" + g.name() + ": " + why);
      }
      bindSymbols(arg->type(), inputs[i]);
      env_[arg] = std::move(inputs[i]);
    }
    return runBlock(body);
  }

  std::vector<RtValue> runIsolated(const Block &b, std::vector<RtValue> args) {
    if (args.size() != b.numArguments())
      throw Error(ErrorKind::Internal, "block takes " + std::to_string(b.numArguments()) +
                                           " arguments, got " + std::to_string(args.size()));
    for (size_t i = 0; i < args.size(); ++i) {
      if (opts_.checkTypes) {
        std::string why = mismatch(b.argument(i)->type(), args[i]);
        if (!why.empty())
          throw Error(ErrorKind::User, "block argument " + std::to_string(i) + ": " + why);
      }
      bindSymbols(b.argument(i)->type(), args[i]);
      env_[b.argument(i)] = std::move(args[i]);
    }
    return runBlock(&b);
  }

private:
  // Runs a block; returns the terminator's operand values.
  std::vector<RtValue> runBlock(const Block *b) {
    for (Op *op : *b) {
      if (op->def().has(kTerminator)) return operandValues(op);
      try {
        runOp(op);
      } catch (const Error &) {
        throw;
      } catch (const InternalKernelError &e) {
        throw Error(ErrorKind::Internal, op->describe() + ": internal error: " + e.what());
      } catch (const KernelError &e) {
        throw Error(ErrorKind::User, op->describe() + ": " + e.what());
      } catch (const TypeInferenceError &e) {
        throw Error(ErrorKind::User, op->describe() + ": " + e.what());
      } catch (const std::exception &e) {
        throw Error(ErrorKind::Internal, op->describe() + ": internal error: " + e.what());
      }
    }
    throw Error(ErrorKind::User, "block without a terminator");
  }

  std::vector<RtValue> operandValues(Op *op) {
    std::vector<RtValue> vals;
    vals.reserve(op->numOperands());
    for (Value *v : op->operands()) {
      auto it = env_.find(v);
      if (it == env_.end())
        throw Error(ErrorKind::User, op->describe() + ": operand is used before it is defined");
      vals.push_back(it->second);
    }
    return vals;
  }

  void runOp(Op *op) {
    std::vector<RtValue> in = operandValues(op);
    std::vector<RtValue> out;
    if (op->name() == "if") {
      out = runBlock(op->region(in[0].toBool() ? 0 : 1));
    } else if (op->name() == "loop") {
      out = runLoop(op, in);
    } else if (op->name() == "custom_vjp") { // the forward region; saved values dropped
      Block *fwd = op->region(0);
      for (size_t i = 0; i < in.size(); ++i)
        env_[fwd->argument(i)] = in[i];
      out = runBlock(fwd);
      out.resize(op->numResults());
    } else if (op->def().kernel && hasSymbolicSizes(*op)) {
      // Sizes over shape symbols: the kernel runs on a copy with them evaluated.
      ResolvedOp resolved(*op, symbols_);
      out = op->def().kernel(resolved.op(), in);
      resolved.checkResults(out);
    } else if (op->def().kernel) {
      out = op->def().kernel(*op, in);
    } else {
      throw Error(ErrorKind::Internal, op->describe() + ": op has no reference kernel");
    }
    if (out.size() != op->numResults())
      throw Error(ErrorKind::Internal, op->describe() + ": kernel returned " +
                                           std::to_string(out.size()) + " values for " +
                                           std::to_string(op->numResults()) + " results");
    for (size_t i = 0; i < out.size(); ++i) {
      if (opts_.checkTypes) {
        symbolicMismatch_ = false;
        std::string why = mismatch(op->result(i)->type(), out[i]);
        // A symbolic dim that does not hold means the inputs broke an assumption the graph
        // was built under (e.g. two symbols assumed equal); a static one is an xjit bug.
        if (!why.empty())
          throw Error(
              symbolicMismatch_ ? ErrorKind::User : ErrorKind::Internal,
              op->describe() + ": result " + std::to_string(i) + " " + why +
                  (symbolicMismatch_ ? " (the inputs violate the graph's shape assumptions)" : ""));
      }
      env_[op->result(i)] = std::move(out[i]);
    }
  }

  std::vector<RtValue> runLoop(Op *op, const std::vector<RtValue> &in) {
    int64_t maxTrips = in[0].toInt();
    bool cond = in[1].toBool();
    std::vector<RtValue> carried(in.begin() + 2, in.end());
    Block *body = op->region(0);
    for (int64_t it = 0; it < maxTrips && cond; ++it) {
      env_[body->argument(0)] = RtValue(it);
      for (size_t i = 0; i < carried.size(); ++i)
        env_[body->argument(i + 1)] = carried[i];
      std::vector<RtValue> next = runBlock(body);
      cond = next.at(0).toBool();
      carried.assign(next.begin() + 1, next.end());
    }
    return carried;
  }

  // Binds the plain shape symbols of an input (also when types are not checked: symbolic sizes
  // in attributes are evaluated from them). A disagreement is reported by mismatch().
  void bindSymbols(const Type &t, const RtValue &v) {
    if (t.isTensor() && v.isTensor() && v.tensor().rank() == t.rank())
      bindShapeSymbols(t.shape(), v.tensor().sizes(), symbols_);
  }

  // Why a run-time value does not fit a static type ("" if it does). Binds shape symbols.
  std::string mismatch(const Type &t, const RtValue &v) {
    switch (t.kind()) {
    case TypeKind::Tensor: {
      if (!v.isTensor()) return std::string("expected a tensor, got ") + v.kindName();
      const Tensor &x = v.tensor();
      if (x.dtype() != t.dtype())
        return "has dtype " + std::string(dtypeName(x.dtype())) + ", type says " + t.str();
      if (x.rank() != t.rank())
        return "has rank " + std::to_string(x.rank()) + ", type says " + t.str();
      for (int64_t d = 0; d < x.rank(); ++d) {
        const DimExpr &e = t.shape()[static_cast<size_t>(d)];
        int64_t actual = x.sizes()[static_cast<size_t>(d)];
        auto expected = e.evaluate(symbols_);
        if (!expected) {
          auto syms = e.symbols();
          if (syms.size() == 1 && e == DimExpr::symbol(syms[0])) symbols_[syms[0]] = actual;
          continue; // compound expression over unbound symbols: nothing to check yet
        }
        if (*expected != actual) {
          symbolicMismatch_ = !e.isStatic();
          return "has size " + std::to_string(actual) + " at dim " + std::to_string(d) +
                 ", type says " + t.str() + " (" + e.str() + " = " + std::to_string(*expected) +
                 ")";
        }
      }
      return "";
    }
    case TypeKind::Int: return v.isInt() ? "" : std::string("expected an int, got ") + v.kindName();
    case TypeKind::Float:
      return v.isFloat() ? "" : std::string("expected a float, got ") + v.kindName();
    case TypeKind::Bool:
      return v.isBool() ? "" : std::string("expected a bool, got ") + v.kindName();
    case TypeKind::None: return v.isNone() ? "" : std::string("expected none, got ") + v.kindName();
    case TypeKind::Str: return v.isStr() ? "" : std::string("expected a str, got ") + v.kindName();
    case TypeKind::Tuple: {
      if (!v.isList()) return std::string("expected a tuple, got ") + v.kindName();
      if (v.list().size() != t.elements().size()) return "tuple has the wrong length";
      for (size_t i = 0; i < v.list().size(); ++i)
        if (auto why = mismatch(t.elements()[i], v.list()[i]); !why.empty())
          return "element " + std::to_string(i) + ": " + why;
      return "";
    }
    case TypeKind::List: {
      if (!v.isList()) return std::string("expected a list, got ") + v.kindName();
      for (const auto &e : v.list())
        if (auto why = mismatch(t.elementType(), e); !why.empty()) return "list element: " + why;
      return "";
    }
    case TypeKind::Object: return "";
    }
    return "";
  }

  const InterpreterOptions &opts_;
  std::unordered_map<const Value *, RtValue> env_;
  SymbolBindings symbols_;
  bool symbolicMismatch_ = false; // set by mismatch(): the failing dim was symbolic
};

} // namespace

std::vector<RtValue> interpret(const Graph &g, std::vector<RtValue> inputs,
                               const InterpreterOptions &opts) {
  return Interpreter(opts).run(g, std::move(inputs));
}

std::vector<RtValue> interpretBlock(const Block &b, std::vector<RtValue> args,
                                    const InterpreterOptions &opts) {
  return Interpreter(opts).runIsolated(b, std::move(args));
}

} // namespace xjit
