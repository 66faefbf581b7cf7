// The one op registry: each op is a row with its name, operand and attribute contract, result
// type inference, traits and reference kernel. Rows are declared as data in src/ir/ops/*.cpp.
#pragma once

#include "xjit/ir/attr.h"
#include "xjit/ir/ir.h"
#include "xjit/ir/value.h"

#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace xjit {

enum OpTrait : uint32_t {
  kNoTraits = 0,
  kElementwise = 1u << 0,  // result[i] depends only on operands[i] (after broadcasting)
  kReduction = 1u << 1,    // reduces over `dim` axes
  kView = 1u << 2,         // result aliases operand 0's storage
  kInPlace = 1u << 3,      // writes operand 0 and returns it
  kSideEffect = 1u << 4,   // observable effect beyond its results: never removed or reordered
  kCommutative = 1u << 5,  // first two operands may be swapped
  kTerminator = 1u << 6,   // ends a block (return, yield)
  kConstantLike = 1u << 7, // result is fully given by attributes
  kShapeOnly = 1u << 8,    // reads only its operands' shapes and dtypes (zeros_like, size)
};

/// An operand slot. A variadic slot takes zero or more values (only the last slot may be
/// variadic); an optional slot may be left off at the end of the operand list.
struct OperandSpec {
  std::string name;
  bool variadic = false;
  bool optional = false;
};

/// An attribute slot. Required unless it has a default or is marked optional (an optional
/// attribute may be absent: Op::attrOrNull returns nullptr, e.g. clamp's min/max). `anyKind`
/// accepts every attribute kind (constant's value); otherwise the verifier checks `kind`
/// (an Int value is also accepted where the kind is Float).
struct AttrSpec {
  std::string name;
  AttrKind kind;
  std::optional<Attr> defaultValue = std::nullopt;
  bool optional = false;
  bool anyKind = false;
};

/// Computes result types from operand types and attributes; throws TypeInferenceError on
/// invalid input (the verifier reports it with the op and its location).
using InferFn = std::function<std::vector<Type>(const Op &)>;
/// Reference kernel: plain, obviously-correct code for every dtype and any strides.
using KernelFn = std::function<std::vector<RtValue>(const Op &, std::span<const RtValue>)>;
/// Extra structural checks (regions, yields); returns an error message or "".
using VerifyFn = std::function<std::string(const Op &)>;

struct OpDef {
  std::string name;
  std::string summary;
  std::vector<OperandSpec> operands;
  std::vector<AttrSpec> attrs;
  uint32_t traits = kNoTraits;
  InferFn infer;   // null: result types are as written (if, loop, constant, fallback)
  KernelFn kernel; // null: executed by the interpreter itself (if, loop, return, yield)
  VerifyFn verify; // optional
  int numRegions = 0;
  // Reserved for later layers: autodiff rule and per-target lowering hook up by op name.

  bool has(OpTrait t) const { return (traits & t) != 0; }
  bool isPure() const { return !(traits & (kSideEffect | kInPlace | kTerminator)); }
  /// Default of an attribute, or nullptr.
  const Attr *attrDefault(std::string_view name) const;
  const AttrSpec *attrSpec(std::string_view name) const;
  size_t minOperands() const;
  /// SIZE_MAX when variadic.
  size_t maxOperands() const;
};

class OpRegistry {
public:
  /// The process-wide registry with every op registered.
  static const OpRegistry &instance();
  const OpDef *lookup(std::string_view name) const;
  /// Same as lookup but throws std::out_of_range naming the op.
  const OpDef &get(std::string_view name) const;
  /// All ops, sorted by name.
  std::vector<const OpDef *> all() const;

  void add(OpDef def); // throws on duplicates

private:
  std::map<std::string, std::unique_ptr<OpDef>, std::less<>> ops_;
};

/// Thrown by InferFn and kernels for invalid operands/attributes (a user-facing message,
/// without location; callers add the op and its source location).
class TypeInferenceError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// Raised when an op cannot run these values (bad runtime shapes, index out of range, ...): the
/// program's error, reported as a user error (ErrorKind::User).
class KernelError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// A kernel that cannot run for a reason of xjit's own, not the values': a limit (no library
/// implementation for this call, out of memory, a layout a library call does not take) or a
/// mismatch between the runtime and the kernel. Reported as an internal error (the frontend
/// then warns once and runs the frame in Python). A KernelError, so that code falling back to
/// another kernel on any KernelError (a oneDNN plan that cannot be made) still does.
class InternalKernelError : public KernelError {
public:
  using KernelError::KernelError;
};

/// Host callbacks for `external_call` ops (e.g. a PyTorch function the IR has no op for, called
/// by the frontend's glue). The IR only knows them by id; whoever builds such graphs registers
/// the callback before running them.
using ExternalFn = std::function<std::vector<RtValue>(std::span<const RtValue>)>;
int64_t registerExternalFunction(ExternalFn fn); // returns the id for the `callee` attribute
void unregisterExternalFunction(int64_t id);
const ExternalFn *lookupExternalFunction(int64_t id);

// Registration entry points, one per op family (src/ir/ops/*.cpp).
void registerControlFlowOps(OpRegistry &r);
void registerElementwiseOps(OpRegistry &r);
void registerReductionOps(OpRegistry &r);
void registerLinalgOps(OpRegistry &r);
void registerConvPoolOps(OpRegistry &r);
void registerNormOps(OpRegistry &r);
void registerMovementOps(OpRegistry &r);
void registerIndexingOps(OpRegistry &r);
void registerCreationOps(OpRegistry &r);
void registerDeviceOps(OpRegistry &r);
void registerFusionOps(OpRegistry &r);

} // namespace xjit
