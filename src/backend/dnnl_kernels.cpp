// The oneDNN executable: reads a library call (one op, or an `epilogue` fusion anchored on
// one) from the IR, caches one plan per run-time shape, and runs the reference kernel for the
// shapes oneDNN rejects.
#include "dnnl_kernels.h"
#include "shared_executables.h"

#include "xjit/backend/content_tags.h"
#include "xjit/backend/jit.h"
#include "xjit/ir/builder.h"
#include "xjit/ir/interpreter.h"
#include "xjit/ir/op_registry.h"
#include "xjit/ir/printer.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <sstream>
#include <string_view>
#include <unordered_map>

namespace xjit::backend::dnnl_kernels {

/// oneDNN primitives made per shape, and shape-generic ones (backendCounters); those of them
/// on oneDNN's gemm implementation.
extern std::atomic<uint64_t> gPlansMade, gGenericPlansMade, gGemmPlansMade;
namespace {

/// Counts a plan that runs on oneDNN's gemm implementation (its info starts with its name,
/// "gemm:jit", also for causal blocks).
void noteGemmPlan(const Plan *plan) {
  if (plan && plan->info().starts_with("gemm:"))
    gGemmPlansMade.fetch_add(1, std::memory_order_relaxed);
}

/// Where value `outer` (an operand of the compiled op) comes from: input `index`, and its
/// value when a `constant` op defines it.
Source sourceOf(const Value *outer, int index) {
  Source s;
  s.input = index;
  const Op *d = outer->definingOp();
  if (!d || d->name() != "constant") return s;
  const Attr *a = d->attrOrNull("value");
  if (!a) return s;
  switch (a->kind()) {
  case AttrKind::Tensor: s.constant = RtValue(a->asTensor()); break;
  case AttrKind::Float: s.constant = RtValue(a->asFloat()); break;
  case AttrKind::Int: s.constant = RtValue(a->asInt()); break;
  case AttrKind::Bool: s.constant = RtValue(a->asBool()); break;
  default: break;
  }
  return s;
}

/// Reads `op` into `call`; returns why not when it is not a call this path can express.
std::string readCall(const Op &op, CallIR &call) {
  if (op.name() != "fusion") {
    if (!isLibraryOpName(op.name())) return op.name() + " is not a library op";
    if (op.numResults() != 1 || !op.result(0)->type().isTensor())
      return op.name() + ": expected one tensor result";
    call.anchor = &op;
    for (size_t i = 0; i < op.numOperands(); ++i)
      call.operands.push_back(op.operand(i)->type().kind() == TypeKind::None
                                  ? Source{}
                                  : sourceOf(op.operand(i), static_cast<int>(i)));
    call.resultType = op.result(0)->type();
    return "";
  }
  const Attr *kind = op.attrOrNull("kind");
  if (!kind || kind->kind() != AttrKind::Str || kind->asStr() != "epilogue")
    return "fusion: not an epilogue group";
  if (op.numRegions() != 1 || op.region(0)->empty()) return "fusion: expected one region";
  const Block &body = *op.region(0);
  auto argIndex = [&](const Value *v) -> int {
    if (!v->isBlockArgument() || v->ownerBlock() != &body) return -1;
    return static_cast<int>(v->index());
  };
  const Op *anchor = body.front();
  if (!isMatmulOp(anchor->name()) && !isConvOp(anchor->name()))
    return "epilogue anchored on " + anchor->name() + ", which is not a library op";
  call.anchor = anchor;
  for (const Value *v : anchor->operands()) {
    if (v->type().kind() == TypeKind::None) {
      call.operands.push_back({});
      continue;
    }
    int i = argIndex(v);
    if (i < 0) return "epilogue: the anchor's operands must be group inputs";
    call.operands.push_back(sourceOf(op.operand(static_cast<size_t>(i)), i));
  }
  const Value *cur = anchor->result(0);
  const Type &anchorType = cur->type();
  for (const Op *p = anchor->next(); p; p = p->next()) {
    if (p->name() == "yield") {
      if (p->numOperands() != 1 || p->operand(0) != cur)
        return "epilogue: must yield exactly the last post-op's result";
      call.resultType = cur->type();
      return "";
    }
    if (p->numResults() != 1 || p->result(0)->type() != anchorType)
      return "epilogue: post-op " + p->name() + " changes the result type";
    PostOp po;
    if (p->numOperands() == 1 && p->operand(0) == cur) {
      if (!eltwiseFor(*p, po)) return "epilogue: no oneDNN eltwise post-op for " + p->name();
    } else if (p->numOperands() == 2 && binaryFor(p->name(), po.alg)) {
      po.binary = true;
      if (const Attr *alpha = p->attrOrNull("alpha"); alpha && alpha->asNumber() != 1.0)
        return "epilogue: " + p->name() + " with alpha != 1";
      bool left = p->operand(0) == cur, right = p->operand(1) == cur;
      bool commutative = p->name() == "add" || p->name() == "mul" || p->name() == "maximum" ||
                         p->name() == "minimum";
      if (left == right || (right && !commutative))
        return "epilogue: " + p->name() + " must read the chain exactly once, as its left operand";
      const Value *other = p->operand(left ? 1 : 0);
      int i = argIndex(other);
      if (i < 0) return "epilogue: the binary post-op's other operand must be a group input";
      if (other->type().isTensor() && !isFloating(other->type().dtype()) &&
          other->type().dtype() != DType::Bool && !isIntegral(other->type().dtype()))
        return "epilogue: unsupported operand dtype";
      po.other = sourceOf(op.operand(static_cast<size_t>(i)), i);
    } else {
      return "epilogue: " + p->name() + " is not a oneDNN post-op";
    }
    call.postOps.push_back(po);
    cur = p->result(0);
  }
  return "epilogue: missing yield";
}

/// A graph computing exactly `op` on its operands (the body of a fusion replayed), run by the
/// reference interpreter for the shapes oneDNN rejects.
std::unique_ptr<Graph> referenceGraph(const Op &op) {
  auto g = std::make_unique<Graph>("library_reference");
  Builder b(g->body());
  std::map<const Value *, Value *> mapped;
  auto replay = [&](const Op &o) {
    std::vector<Value *> operands;
    for (const Value *v : o.operands())
      operands.push_back(mapped.at(v));
    std::vector<Type> types;
    for (const auto &r : o.results())
      types.push_back(r->type());
    Op *n = b.createWithTypes(o.name(), operands, types, o.attrs());
    for (size_t i = 0; i < o.numResults(); ++i)
      mapped[o.result(i)] = n->result(i);
    return n;
  };
  if (op.name() == "fusion") {
    const Block &body = *op.region(0);
    for (size_t i = 0; i < body.numArguments(); ++i)
      mapped[body.argument(i)] = g->addInput(body.argument(i)->type());
    for (const Op *o : body) {
      if (o->name() == "yield") {
        std::vector<Value *> outs;
        for (const Value *v : o->operands())
          outs.push_back(mapped.at(v));
        b.createWithTypes("return", outs, {});
      } else {
        replay(*o);
      }
    }
  } else {
    for (const Value *v : op.operands())
      mapped[v] = g->addInput(v->type());
    Op *n = replay(op);
    std::vector<Value *> outs;
    for (size_t i = 0; i < n->numResults(); ++i)
      outs.push_back(n->result(i));
    b.createWithTypes("return", outs, {});
  }
  return g;
}

/// The cache key of a run: every tensor input's sizes and strides, and whether the caller tagged
/// it (content_tags.h): plans depend on all three (a tagged weight is reordered once into the
/// blocked layout, an untagged one may be read in place), and one executable serves identical
/// calls of graphs compiled with and without the weight cache.
Dims shapeKey(std::span<const RtValue> in) {
  Dims key;
  for (const RtValue &v : in) {
    if (!v.isTensor()) {
      key.push_back(-1);
      continue;
    }
    const Tensor &t = v.tensor();
    key.push_back(currentContentTag(t.data()) != 0 ? -2 - t.rank() : t.rank());
    key.insert(key.end(), t.sizes().begin(), t.sizes().end());
    key.insert(key.end(), t.strides().begin(), t.strides().end());
  }
  return key;
}

/// Inputs whose non-finite values oneDNN would mishandle: relu and clip post-ops and max
/// pooling drop NaN (x > 0 ? x : 0 gives 0 for NaN; PyTorch propagates it), and an Inf in an
/// operand of a matmul/conv can make a NaN in the accumulator that a relu then drops. Such
/// calls run the reference kernel instead; checking costs one read of the run-time operands.
struct NaNGuard {
  bool active = false;
  bool nanOnly = false;       // max pooling: only NaN matters, Inf is handled
  bool constantBad = false;   // a constant operand holds such values: always the reference
  std::vector<size_t> inputs; // the run-time (non-constant) tensor inputs to check
  bool trips(std::span<const RtValue> in) const {
    if (!active) return false;
    if (constantBad) return true;
    for (size_t i : inputs)
      if (in[i].isTensor() && hasNonFinite(in[i].tensor(), nanOnly)) return true;
    return false;
  }
};

/// A trailing relu / clip taken out of the post-op chain and applied to the f32 result after
/// the primitive, as `v < lo ? lo : (v > hi ? hi : v)`: comparisons with NaN are false, so NaN
/// propagates as in PyTorch. One pass over the result replaces the NaNGuard's read of every
/// operand (the weights of a linear layer are most of the bytes a batch-1 call touches).
struct TailClamp {
  bool active = false;
  float lo = 0, hi = std::numeric_limits<float>::infinity();
  void apply(const Tensor &out) const {
    if (!active) return;
    float *p = reinterpret_cast<float *>(out.data());
    const float l = lo, h = hi;
    const int64_t n = out.numel();
    // Vectorized (compare + blend): as a scalar loop the branches on a relu's signs mispredict
    // half the time, 8 ms for a 1.6M-element conv result, as long as the conv itself. Not
    // threaded: OpenMP's pool does not survive fork (docs/backend.md).
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      float v = p[i];
      p[i] = v < l ? l : (v > h ? h : v);
    }
  }
};

/// Takes a trailing NaN-dropping eltwise post-op (relu, clip) off `postOps` when the result is
/// a contiguous f32 tensor and no earlier post-op drops NaN.
TailClamp takeTailClamp(std::vector<PostOp> &postOps, DType resultDType) {
  TailClamp t;
  if (postOps.empty() || resultDType != DType::F32) return t;
  const PostOp &last = postOps.back();
  if (last.binary || !dropsNaN(last)) return t;
  for (size_t i = 0; i + 1 < postOps.size(); ++i)
    if (dropsNaN(postOps[i])) return t;
  using A = dnnl::algorithm;
  if (last.alg == A::eltwise_relu) {
    t.lo = 0;
  } else { // eltwise_clip / clip_v2: alpha is the lower bound, beta the upper
    t.lo = last.alpha;
    t.hi = last.beta;
  }
  t.active = true;
  postOps.pop_back();
  return t;
}

class DnnlExecutable : public Executable {
public:
  DnnlExecutable(std::string name, std::unique_ptr<LibraryKernel> kernel,
                 std::unique_ptr<Graph> reference, NaNGuard guard, TailClamp tail)
      : name_(std::move(name)), kernel_(std::move(kernel)), reference_(std::move(reference)),
        guard_(std::move(guard)), tail_(tail) {}

  std::vector<RtValue> run(std::span<const RtValue> inputs) const override {
    const Entry &entry = entryFor(inputs);
    if (entry.plan && !guard_.trips(inputs)) {
      Tensor out = allocateOutput(entry.plan->dtype, entry.plan->resultSizesFor(inputs));
      if (tryRun(*entry.plan, inputs, out)) {
        tail_.apply(out);
        return {out};
      }
    }
    return reference(inputs);
  }

  bool canRunInto() const override { return true; }
  void runInto(std::span<const RtValue> inputs, std::span<const Tensor> outputs) const override {
    const Entry &entry = entryFor(inputs);
    if (outputs.size() != 1) throw InternalKernelError(name_ + ": expected one output buffer");
    const Tensor &out = outputs[0];
    if (entry.plan && !guard_.trips(inputs)) {
      if (out.sizes() != entry.plan->resultSizesFor(inputs) || out.dtype() != entry.plan->dtype ||
          !out.isContiguous())
        throw InternalKernelError(name_ + ": the output buffer does not fit the result");
      if (tryRun(*entry.plan, inputs, out)) {
        tail_.apply(out);
        return;
      }
    }
    std::vector<RtValue> r = reference(inputs);
    if (r[0].tensor().sizes() != out.sizes())
      throw InternalKernelError(name_ + ": the output buffer does not fit the result");
    out.copyFrom(r[0].tensor());
  }

  std::vector<std::pair<std::string, std::string>> dumpFiles() const override {
    std::ostringstream os;
    os << kernel_->describe() << "\n";
    std::shared_lock lock(mu_);
    for (const auto &[key, e] : plans_) {
      os << "shape key [";
      for (size_t i = 0; i < key.size(); ++i)
        os << (i ? "," : "") << key[i];
      os << "]: " << (e.plan ? "oneDNN " + e.plan->info() : "reference kernel (" + e.why + ")")
         << "\n";
    }
    return {{name_ + ".onednn", os.str()}};
  }

private:
  struct Entry;
  const Entry &entryFor(std::span<const RtValue> inputs) const {
    if (inputs.size() != reference_->numInputs())
      throw InternalKernelError(name_ + ": expected " + std::to_string(reference_->numInputs()) +
                                " inputs, got " + std::to_string(inputs.size()));
    Dims key = shapeKey(inputs);
    if (const Entry *entry = find(key)) return *entry;
    if (const Entry *generic = genericFor(inputs)) return *generic;
    return *insert(std::move(key), build(inputs));
  }
  /// From the third shape on, the kernel's shape-generic plan when it has one (made once) and it
  /// takes these inputs: shapes that change every call would otherwise each pay a new
  /// primitive, and keep it. The first two shapes get their own plans (oneDNN's best kernel
  /// for a fixed shape), so a prefill followed by fixed-shape decoding steps never uses it.
  const Entry *genericFor(std::span<const RtValue> inputs) const {
    {
      std::shared_lock lock(mu_);
      if (plans_.size() < 2) return nullptr;
      if (genericTried_) return generic_.plan && generic_.plan->takes(inputs) ? &generic_ : nullptr;
    }
    Entry e;
    try {
      e.plan = kernel_->makeGenericPlan(inputs);
    } catch (const dnnl::error &) {
    } catch (const KernelError &) {
    }
    if (e.plan) gGenericPlansMade.fetch_add(1, std::memory_order_relaxed);
    noteGemmPlan(e.plan.get());
    std::unique_lock lock(mu_);
    if (!genericTried_) {
      genericTried_ = true;
      generic_ = std::move(e);
    }
    return generic_.plan && generic_.plan->takes(inputs) ? &generic_ : nullptr;
  }
  /// False when oneDNN refused to execute what it agreed to create (seen with unusual
  /// strides): the caller then runs the reference kernel.
  static bool tryRun(const Plan &plan, std::span<const RtValue> inputs, const Tensor &out) {
    try {
      plan.run(inputs, out);
      return true;
    } catch (const dnnl::error &) {
      return false;
    }
  }
  std::vector<RtValue> reference(std::span<const RtValue> inputs) const {
    return interpret(*reference_, std::vector<RtValue>(inputs.begin(), inputs.end()));
  }

  struct Entry {
    std::shared_ptr<const Plan> plan; // null: oneDNN rejected the shape, run the reference
    std::string why;
  };

  Entry build(std::span<const RtValue> inputs) const {
    try {
      Entry e{kernel_->makePlan(inputs), ""};
      gPlansMade.fetch_add(1, std::memory_order_relaxed);
      noteGemmPlan(e.plan.get());
      return e;
    } catch (const dnnl::error &e) {
      return {nullptr, e.what()};
    } catch (const KernelError &e) {
      return {nullptr, e.what()};
    }
  }
  const Entry *find(const Dims &key) const {
    std::shared_lock lock(mu_);
    auto it = plans_.find(key);
    return it == plans_.end() ? nullptr : &it->second;
  }
  const Entry *insert(Dims key, Entry e) const {
    std::unique_lock lock(mu_);
    // Another thread may have built the same plan meanwhile: keep the first (map nodes are
    // stable, so returned pointers stay valid).
    return &plans_.emplace(std::move(key), std::move(e)).first->second;
  }

  std::string name_;
  std::unique_ptr<LibraryKernel> kernel_;
  std::unique_ptr<Graph> reference_;
  NaNGuard guard_;
  TailClamp tail_;
  mutable std::shared_mutex mu_;
  mutable std::map<Dims, Entry> plans_;
  mutable bool genericTried_ = false; // genericFor asked the kernel (under mu_)
  mutable Entry generic_;             // its answer: a plan for many shapes, or none
};

/// XJIT_REFERENCE_PRODUCTS=1 (or `matmul`, `grouped`): a precision experiment (docs/backend.md
/// "Accuracy"): those products run their reference kernels, which accumulate in f64 and round
/// once, instead of oneDNN's f32 chains. Read at each compile, so a test can switch it.
bool referenceProducts(const std::string &anchor) {
  const char *v = std::getenv("XJIT_REFERENCE_PRODUCTS");
  if (!v || !*v || std::strcmp(v, "0") == 0) return false;
  std::string_view which = v;
  bool all = which == "1" || which == "all";
  return (isMatmulOp(anchor) && (all || which == "matmul")) ||
         (isGroupedOp(anchor) && (all || which == "grouped"));
}

} // namespace

std::string whyNotSupported(const Op &op) {
  CallIR call;
  if (std::string why = readCall(op, call); !why.empty()) return why;
  const std::string &n = call.anchor->name();
  if (referenceProducts(n)) return n + ": XJIT_REFERENCE_PRODUCTS asks for the reference kernel";
  if (isGroupedOp(n)) return whyNotGrouped(call); // offs is an integer operand
  if (!dnnlType(call.resultType.dtype()))
    return n + ": oneDNN path serves f32 and bf16, not " +
           std::string(dtypeName(call.resultType.dtype()));
  for (const Value *v : call.anchor->operands())
    if (v->type().isTensor() && v->type().dtype() != call.resultType.dtype())
      return n + ": operands of mixed dtypes";
  if (isMatmulOp(n)) return whyNotMatmul(call);
  if (isConvOp(n)) return whyNotConv(call);
  if (isConvWeightOp(n)) return whyNotConvWeight(call);
  if (!call.postOps.empty()) return n + ": no post-ops on poolings";
  return whyNotPool(call);
}

namespace {

/// The key under which identical library calls of the process share one executable (its kernel,
/// plans and reference graph): the reference graph's text, canonical since its operands are
/// numbered inputs, and what each operand is at compile time. An LSTM unrolled over 64 steps
/// has 256 identical matmul instructions, each with its own plans before (~15 KB each, 4 MB).
/// Empty, so never shared, when a tensor constant takes part (frozen weights: their bytes
/// would have to be in the key).
std::string sharingKey(const Op &op, const Graph &reference) {
  for (const Op *o : *reference.body())
    if (const Attr *v = o->attrOrNull("value");
        o->name() == "constant" && v && v->kind() == AttrKind::Tensor)
      return "";
  std::string key = printGraph(reference);
  for (size_t i = 0; i < op.numOperands(); ++i) {
    const Op *d = op.operand(i)->definingOp();
    const Attr *v = d && d->name() == "constant" ? d->attrOrNull("value") : nullptr;
    if (v && v->kind() == AttrKind::Tensor) return "";
    key += v ? ";const " + v->str() : ";input";
  }
  return key;
}

SharedExecutables &sharedExecutables() {
  static SharedExecutables shared;
  return shared;
}

std::atomic<uint64_t> gExecutablesShared{0};

} // namespace

std::atomic<uint64_t> gPlansMade{0}, gGenericPlansMade{0}, gGemmPlansMade{0};

/// oneDNN's gemm implementation makes all of its kernels (Xbyak code for every transpose and
/// beta case, ~29 ms of CPU) at its first call in a process: a 2x2 product makes them. One
/// OpenMP thread: a caller on a thread of its own starts no second team.
void makeGemmKernels() {
  omp_set_num_threads(1);
  float a[4] = {}, b[4] = {}, c[4] = {};
  dnnl_sgemm('N', 'N', 2, 2, 2, 1.f, a, 2, b, 2, 0.f, c, 2);
}

std::shared_ptr<const Executable> compile(const Op &op, const TargetOptions &) {
  if (std::string why = whyNotSupported(op); !why.empty())
    throw Error(ErrorKind::Internal, "oneDNN cannot compile " + op.describe() + ": " + why);
  std::unique_ptr<Graph> reference = referenceGraph(op);
  std::string key = sharingKey(op, *reference);
  if (!key.empty())
    if (auto shared = sharedExecutables().find(key)) {
      gExecutablesShared.fetch_add(1, std::memory_order_relaxed);
      return shared;
    }
  CallIR call;
  readCall(op, call);
  const std::string &n = call.anchor->name();
  TailClamp tail = isPoolOp(n) ? TailClamp{} : takeTailClamp(call.postOps, call.resultType.dtype());
  std::unique_ptr<LibraryKernel> k = isMatmulOp(n)       ? makeMatmulKernel(call)
                                     : isConvOp(n)       ? makeConvKernel(call)
                                     : isConvWeightOp(n) ? makeConvWeightKernel(call)
                                     : isGroupedOp(n)    ? makeGroupedKernel(call)
                                                         : makePoolKernel(call);
  NaNGuard guard;
  guard.nanOnly = isPoolOp(n);
  guard.active = n.find("max_pool") != std::string::npos;
  for (const PostOp &p : call.postOps)
    guard.active = guard.active || dropsNaN(p);
  for (size_t i = 0; i < op.numOperands(); ++i) {
    Source s = sourceOf(op.operand(i), static_cast<int>(i));
    if (!s.constant)
      guard.inputs.push_back(i);
    else if (s.constant->isTensor() && hasNonFinite(s.constant->tensor(), guard.nanOnly))
      guard.constantBad = true;
  }
  auto exe = std::make_shared<DnnlExecutable>(n, std::move(k), std::move(reference),
                                              std::move(guard), tail);
  if (!key.empty()) sharedExecutables().insert(key, exe);
  return exe;
}

} // namespace xjit::backend::dnnl_kernels

extern "C" const xjit::backend::DnnlLibrary *xjit_dnnl_library() {
  using namespace xjit::backend::dnnl_kernels;
  static const xjit::backend::DnnlLibrary library{
      &whyNotSupported,   &compile,          &gExecutablesShared, &gPlansMade,
      &gGenericPlansMade, &weightPackTotals, &gGemmPlansMade,     &makeGemmKernels};
  return &library;
}
