// compileGraph and CompiledGraph::run: graph -> flat per-block instruction lists over value
// slots, executed with a pooled frame and arena per concurrent call.
#include "xjit/runtime/runtime.h"

#include "ops/movement_util.h"
#include "profile.h"

#include "xjit/backend/jit.h"
#include "xjit/ir/diagnostics.h"
#include "xjit/ir/op_registry.h"
#include "xjit/ir/sym_attr.h"
#include "xjit/passes/pass.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>
#include <set>
#include <unordered_map>
#include <unordered_set>

namespace xjit::runtime {
namespace {

enum class InstrKind : uint8_t {
  Constant,    // slots[result] = a value computed at compile time
  Exec,        // a target Executable that allocates its results
  ExecInto,    // a target Executable writing into planned / preallocated buffers
  CopyInto,    // a lone reshape/flatten/contiguous: a view, or a copy into its arena slice
  Kernel,      // the op's reference kernel
  SizedKernel, // the reference kernel of an op with symbolic sizes, evaluated per call
  External,    // external_call through the pre-resolved host function
  If,          // runs block0 or block1, copies the yield into the results
  Loop,        // runs block0 while the trip count and condition allow
  InlineBlock, // a fusion the target did not take: its body, op by op
};

struct Instr {
  InstrKind kind;
  const Op *op;
  uint32_t operands = 0, numOperands = 0; // range of Program::slotRefs
  uint32_t results = 0, numResults = 0;   // range of Program::slotRefs
  uint32_t outputs = 0; // ExecInto: range of Program::outputs (numResults); CopyInto: its slice
  int32_t block0 = -1, block1 = -1; // If / Loop / InlineBlock
  int32_t constant = -1;            // Constant: index into Program::constants
  ProfileRow *profileRow = nullptr; // XJIT_PROFILE: the row its time goes to
  const backend::Executable *exe = nullptr;
  const KernelFn *kernel = nullptr;
  const ExternalFn *external = nullptr;
};

struct BlockProgram {
  std::vector<Instr> instrs;
  std::vector<uint32_t> args;   // slots of the block arguments
  std::vector<uint32_t> yields; // slots of the terminator's operands
};

/// Where an ExecInto result is written: an arena slice (index into Frame::arenaTensors) or a
/// fresh buffer of a static shape.
struct OutputBuffer {
  int32_t arenaTensor = -1;
  DType dtype = DType::F32;
  std::vector<int64_t> sizes;
  /// The operand whose memory the result is computed in (a fusion's `inplace_operand`, set by
  /// reinplace for writes to graph inputs), when that operand fits; else -1.
  int32_t inPlaceOperand = -1;
};

/// A planned arena slice, materialized per frame as a Tensor on the frame's arena storage.
struct ArenaSlice {
  DType dtype;
  std::vector<int64_t> sizes;
  int64_t byteOffset;
};

/// What one concurrent call owns: value slots, scratch and the arena with its slices.
struct Frame {
  std::vector<RtValue> slots;
  /// Operand values per instruction, indexed like Program::slotRefs: operands that are arena
  /// slices are filled in once per frame; the others per call (and dropped after the call).
  std::vector<RtValue> args;
  std::vector<Tensor> outs;
  std::shared_ptr<Storage> arena;
  bool arenaLent = false; // its pages lent between calls (Target::lendMemory)
  std::vector<Tensor> arenaTensors;
  /// The shape symbols bound by this call's inputs, for ops with symbolic sizes.
  SymbolBindings symbols;
};

struct InputCheck {
  bool tensor = false;
  DType dtype = DType::F32;
  std::vector<int64_t> sizes;   // -1: symbolic
  std::vector<int32_t> symbols; // per dim: the plain shape symbol it is (index), or -1
};

/// Ops whose result may share its operand's storage. Alone, they stay with their reference
/// kernels: a kernel would return a copy, and a later in-place write to the operand would then
/// not show through the "view" (inside a fusion the target sees the whole group).
bool mayReturnAView(const Op &op) {
  static const std::set<std::string, std::less<>> kMayAlias = {"reshape", "flatten", "contiguous"};
  return op.def().has(kView) || kMayAlias.count(op.name()) != 0;
}

/// Reshape-like ops whose copy (when their operand's strides allow no view) CopyInto writes
/// into a planned slice.
bool isCopyInto(const Op &op) {
  return op.name() == "reshape" || op.name() == "flatten" || op.name() == "contiguous";
}

/// Whether the reference kernel of such an op copies x (to `sizes`) instead of viewing it.
bool copiesInto(const Op &op, const Tensor &x, const std::vector<int64_t> &sizes) {
  if (op.name() == "contiguous") return !x.isContiguous();
  return !ops::mv::viewStrides(x.sizes(), x.strides(), sizes).has_value();
}

} // namespace

struct CompiledGraph::Impl {
  std::unique_ptr<Graph> graph;
  backend::Target *target = nullptr;
  CompileOptions opts;
  CompileStats stats;

  std::vector<BlockProgram> blocks; // blocks[0] is the graph body
  std::vector<uint32_t> slotRefs;
  std::vector<uint8_t> moveOperand; // per operand entry of slotRefs: its last read, moved
  /// Slots of results planned in the arena -> their slice. A frame keeps the slice's tensor in
  /// the slot from call to call (SSA: only the defining instruction writes a slot), so a call
  /// neither builds nor frees tensor objects for planned values.
  std::unordered_map<uint32_t, int32_t> arenaSlots;
  std::vector<uint8_t> keepSlot;   // per slot: holds an arena tensor, not cleared after a call
  std::vector<uint8_t> fixedArg;   // per slotRefs entry: an operand read from an arena slot
  std::vector<uint8_t> moveOutput; // per graph output: its slot's last read (moved out)
  std::vector<OutputBuffer> outputs;
  std::vector<RtValue> constants;
  std::vector<std::shared_ptr<const backend::Executable>> executables;
  std::vector<std::pair<const Op *, const backend::Executable *>> executableOps;
  std::vector<ArenaSlice> slices;
  std::vector<InputCheck> inputChecks;
  std::vector<std::string> inputSymbols; // plain shape symbols of the inputs' dims
  bool compoundInputDims = false;        // an input dim like s0*2 (checked after binding)
  bool symbolicSizes = false;            // some op has sizes over shape symbols (SizedKernel)
  size_t numSlots = 0;
  int64_t plannedBytes = 0; // the arena plan-memory planned (mem.arena)
  int64_t arenaBytes = 0;   // plus the exclusive slices of in-place results

  mutable std::mutex poolMutex;
  mutable std::vector<std::unique_ptr<Frame>> pool;

  // ---- compiling ----

  std::unordered_map<const Value *, uint32_t> slotOf;

  uint32_t newSlot(const Value *v) {
    uint32_t s = static_cast<uint32_t>(numSlots++);
    slotOf[v] = s;
    return s;
  }

  uint32_t slot(const Op &op, const Value *v) const {
    auto it = slotOf.find(v);
    if (it == slotOf.end())
      throw Error(ErrorKind::Internal, op.describe() + ": operand is used before it is defined");
    return it->second;
  }

  int compileBlock(const Block &b) {
    int index = static_cast<int>(blocks.size());
    blocks.emplace_back();
    std::vector<uint32_t> args;
    for (const auto &a : b.arguments())
      args.push_back(newSlot(a.get()));
    std::vector<Instr> instrs;
    for (Op *op : b) {
      if (op->def().has(kTerminator)) {
        std::vector<uint32_t> yields;
        for (Value *v : op->operands())
          yields.push_back(slot(*op, v));
        blocks[size_t(index)].yields = std::move(yields);
        break;
      }
      instrs.push_back(compileOp(*op));
    }
    blocks[size_t(index)].instrs = std::move(instrs);
    blocks[size_t(index)].args = std::move(args);
    markLastUses(blocks[size_t(index)]);
    return index;
  }

  /// Every slot a block reads, nested blocks included.
  void collectReads(const BlockProgram &b, std::unordered_set<uint32_t> &reads) const {
    for (const Instr &in : b.instrs) {
      for (uint32_t i = 0; i < in.numOperands; ++i)
        reads.insert(slotRefs[in.operands + i]);
      for (int32_t sub : {in.block0, in.block1})
        if (sub >= 0) collectReads(blocks[size_t(sub)], reads);
    }
    reads.insert(b.yields.begin(), b.yields.end());
  }

  /// An operand that is the last read of a value defined in this block is moved out of its
  /// slot instead of copied (a tensor copy allocates its sizes and strides; the move also frees
  /// the value as early as possible). Reads from nested blocks and the terminator never move:
  /// a loop body runs again, and yielded values are read after the block.
  void markLastUses(const BlockProgram &b) {
    constexpr uint32_t kNoMove = UINT32_MAX;
    std::unordered_set<uint32_t> defined(b.args.begin(), b.args.end());
    std::unordered_map<uint32_t, uint32_t> lastRead; // slot -> index into slotRefs, or kNoMove
    for (const Instr &in : b.instrs) {
      for (uint32_t i = 0; i < in.numOperands; ++i)
        lastRead[slotRefs[in.operands + i]] = in.operands + i;
      std::unordered_set<uint32_t> nested;
      for (int32_t sub : {in.block0, in.block1})
        if (sub >= 0) collectReads(blocks[size_t(sub)], nested);
      for (uint32_t s : nested)
        lastRead[s] = kNoMove;
      for (uint32_t r = 0; r < in.numResults; ++r)
        defined.insert(slotRefs[in.results + r]);
    }
    for (uint32_t s : b.yields)
      lastRead[s] = kNoMove;
    if (moveOperand.size() < slotRefs.size()) moveOperand.resize(slotRefs.size(), 0);
    for (auto [slot, ref] : lastRead)
      if (ref != kNoMove && defined.count(slot) && !arenaSlots.count(slot)) moveOperand[ref] = 1;
  }

  Instr compileOp(const Op &op) {
    Instr in{.kind = InstrKind::Kernel, .op = &op};
    in.operands = static_cast<uint32_t>(slotRefs.size());
    in.numOperands = static_cast<uint32_t>(op.numOperands());
    for (Value *v : op.operands())
      slotRefs.push_back(slot(op, v));
    // Regions first: their values get slots before the op's results (not that order matters).
    const std::string &name = op.name();
    if (name == "if") {
      in.kind = InstrKind::If;
      in.block0 = compileBlock(*op.region(0));
      in.block1 = compileBlock(*op.region(1));
      ++stats.controlFlowOps;
    } else if (name == "loop") {
      in.kind = InstrKind::Loop;
      in.block0 = compileBlock(*op.region(0));
      ++stats.controlFlowOps;
    } else if (name == "constant") {
      in.kind = InstrKind::Constant;
      in.constant = static_cast<int32_t>(constants.size());
      constants.push_back(op.def().kernel(op, {}).at(0));
      ++stats.constants;
    } else if (name == "external_call") {
      int64_t id = op.attr("callee").asInt();
      in.kind = InstrKind::External;
      in.external = lookupExternalFunction(id);
      if (!in.external)
        throw Error(ErrorKind::Internal, op.describe() + ": external function " +
                                             std::to_string(id) + " is not registered");
      ++stats.externalOps;
    } else if (hasSymbolicSizes(op) && op.def().kernel) {
      // Sizes over shape symbols (a slice end, an arange bound): the reference kernel on the
      // op with its sizes evaluated from the call's inputs.
      in.kind = InstrKind::SizedKernel;
      in.kernel = &op.def().kernel;
      symbolicSizes = true;
      ++stats.referenceOps;
    } else if (planCopySlice(op, in)) {
      in.kind = InstrKind::CopyInto;
      in.kernel = &op.def().kernel;
      ++stats.referenceOps;
    } else if (auto exe = compileWithTarget(op)) {
      in.exe = exe.get();
      in.kind = InstrKind::Exec;
      executableOps.emplace_back(&op, exe.get());
      executables.push_back(std::move(exe));
      if (in.exe->canRunInto() && planOutputs(op, in)) in.kind = InstrKind::ExecInto;
      ++stats.targetOps;
    } else if (name == "fusion" && op.numRegions() == 1) {
      in.kind = InstrKind::InlineBlock;
      in.block0 = compileBlock(*op.region(0));
      ++stats.inlinedFusions;
    } else if (op.def().kernel) {
      in.kernel = &op.def().kernel;
      ++stats.referenceOps;
    } else {
      throw Error(ErrorKind::Internal, op.describe() + ": op has no kernel");
    }
    if (profileLevel() > 0) {
      const char *how = in.kind == InstrKind::Exec || in.kind == InstrKind::ExecInto ? "native"
                        : in.kind == InstrKind::Kernel || in.kind == InstrKind::SizedKernel ||
                                in.kind == InstrKind::CopyInto
                            ? "reference"
                        : in.kind == InstrKind::External ? "external"
                                                         : nullptr;
      if (how) in.profileRow = profileRow(op, how);
    }
    in.results = static_cast<uint32_t>(slotRefs.size());
    in.numResults = static_cast<uint32_t>(op.numResults());
    for (const auto &r : op.results())
      slotRefs.push_back(newSlot(r.get()));
    if (in.kind == InstrKind::ExecInto)
      for (uint32_t r = 0; r < in.numResults; ++r)
        if (int32_t t = outputs[in.outputs + r].arenaTensor; t >= 0)
          arenaSlots.emplace(slotRefs[in.results + r], t);
    return in;
  }

  std::shared_ptr<const backend::Executable> compileWithTarget(const Op &op) {
    if (!opts.useTarget || op.def().has(kConstantLike) || mayReturnAView(op)) return nullptr;
    std::string why = target->whyNotSupported(op);
    if (!why.empty()) {
      // Only worth reporting for what a target is expected to take.
      if (op.name() == "fusion") stats.notCompiled.push_back(op.describe() + ": " + why);
      return nullptr;
    }
    try {
      return target->compile(op, opts.target);
    } catch (const std::exception &e) {
      // The op still runs, with its reference kernel: slower, never wrong.
      stats.notCompiled.push_back(op.describe() + ": " + e.what());
      return nullptr;
    }
  }

  /// The operand a result is computed in, when it is a contiguous tensor of the result's dtype
  /// and sizes; else null (the result gets its own buffer and the kernel copies the operand
  /// into it first, launch.cpp).
  static const Tensor *inPlaceOperand(const OutputBuffer &b, std::span<const RtValue> args) {
    if (b.inPlaceOperand < 0 || size_t(b.inPlaceOperand) >= args.size()) return nullptr;
    const RtValue &v = args[size_t(b.inPlaceOperand)];
    if (!v.isTensor()) return nullptr;
    const Tensor &t = v.tensor();
    return t.dtype() == b.dtype && t.sizes() == b.sizes && t.isContiguous() ? &t : nullptr;
  }

  /// Output buffers for an ExecInto instruction: every result must be a tensor of static
  /// shape. Results planned by plan-memory go to their arena slice, except results the plan
  /// updates in place (generated kernels assume their buffers do not alias), which get fresh
  /// buffers like graph outputs.
  bool planOutputs(const Op &op, Instr &in) {
    std::vector<OutputBuffer> bufs;
    const Attr *offsets = op.hasAttr("mem.offset") ? &op.attr("mem.offset") : nullptr;
    const Attr *inplace = op.hasAttr("mem.inplace") ? &op.attr("mem.inplace") : nullptr;
    const Attr *inPlaceOperand = op.attrOrNull("inplace_operand");
    for (size_t r = 0; r < op.numResults(); ++r) {
      const Type &t = op.result(r)->type();
      if (!t.isTensor() || !isStaticShape(t.shape())) return false;
      OutputBuffer b;
      b.dtype = t.dtype();
      for (const DimExpr &d : t.shape())
        b.sizes.push_back(d.value());
      int64_t offset = offsets && r < offsets->asInts().size() ? offsets->asInts()[r] : -1;
      bool reused = inplace && r < inplace->asInts().size() && inplace->asInts()[r] >= 0;
      if (inPlaceOperand && inPlaceOperand->kind() == AttrKind::Ints && offset < 0 &&
          r < inPlaceOperand->asInts().size())
        b.inPlaceOperand = static_cast<int32_t>(inPlaceOperand->asInts()[r]);
      if (offset >= 0) {
        int64_t bytes = dtypeSize(b.dtype);
        for (int64_t s : b.sizes)
          bytes *= s;
        if (offset + bytes > plannedBytes || offset % dtypeSize(b.dtype) != 0)
          throw Error(ErrorKind::Internal, op.describe() + ": mem.offset " +
                                               std::to_string(offset) +
                                               " lies outside the planned arena");
        if (reused) {
          // An exclusive slice past the planned part of the arena: still no allocation per
          // call, and the result does not alias the operand it would have overwritten.
          offset = arenaBytes;
          arenaBytes += (bytes + 63) / 64 * 64;
          ++stats.inPlaceSeparated;
        }
        b.arenaTensor = static_cast<int32_t>(slices.size());
        slices.push_back({b.dtype, b.sizes, offset});
        ++stats.plannedResults;
      }
      bufs.push_back(std::move(b));
    }
    in.outputs = static_cast<uint32_t>(outputs.size());
    for (auto &b : bufs)
      outputs.push_back(std::move(b));
    return true;
  }

  /// A lone reshape/flatten/contiguous whose copy plan-memory gave an arena slice (the operand
  /// is a strided view): its reference kernel would allocate, zero-fill and free a fresh
  /// buffer per call (ViT's attention output, 12 per call, 1.5% of the calling thread at two
  /// threads); CopyInto writes the copy into the slice. Not in arenaSlots: the slot holds
  /// a view when the operand's strides allow one.
  bool planCopySlice(const Op &op, Instr &in) {
    if (!isCopyInto(op) || op.numResults() != 1 || !op.hasAttr("mem.offset")) return false;
    const Type &t = op.result(0)->type();
    const std::vector<int64_t> &offsets = op.attr("mem.offset").asInts();
    if (!t.isTensor() || !isStaticShape(t.shape()) || offsets.empty() || offsets[0] < 0)
      return false;
    std::vector<int64_t> sizes;
    int64_t bytes = dtypeSize(t.dtype());
    for (const DimExpr &d : t.shape()) {
      sizes.push_back(d.value());
      bytes *= d.value();
    }
    if (offsets[0] + bytes > plannedBytes || offsets[0] % dtypeSize(t.dtype()) != 0)
      throw Error(ErrorKind::Internal, op.describe() + ": mem.offset " +
                                           std::to_string(offsets[0]) +
                                           " lies outside the planned arena");
    in.outputs = static_cast<uint32_t>(outputs.size());
    outputs.push_back({static_cast<int32_t>(slices.size()), t.dtype(), sizes});
    slices.push_back({t.dtype(), std::move(sizes), offsets[0]});
    ++stats.plannedResults;
    ++stats.plannedCopies;
    return true;
  }

  template <class F> void forEachInstr(F &&f) const {
    for (const BlockProgram &b : blocks)
      for (const Instr &in : b.instrs)
        f(in);
  }

  // ---- running ----

  std::unique_ptr<Frame> acquire() const {
    std::unique_ptr<Frame> f;
    {
      std::lock_guard<std::mutex> lock(poolMutex);
      if (!pool.empty()) {
        f = std::move(pool.back());
        pool.pop_back();
      }
    }
    if (f) {
      if (f->arenaLent) {
        target->reclaimMemory(*f->arena);
        f->arenaLent = false;
      }
      return f;
    }
    f = std::make_unique<Frame>();
    f->slots.resize(numSlots);
    if (!slices.empty()) {
      // From the target, like every runInto buffer (on the CPU: not zero-filled).
      f->arena = target ? target->allocate(DType::U8, {std::max<int64_t>(arenaBytes, 1)}).storage()
                        : std::make_shared<Storage>(std::max<int64_t>(arenaBytes, 1));
      for (const ArenaSlice &s : slices)
        f->arenaTensors.emplace_back(f->arena, s.dtype, s.sizes, contiguousStrides(s.sizes),
                                     s.byteOffset / dtypeSize(s.dtype));
      for (auto [slot, t] : arenaSlots)
        f->slots[slot] = RtValue(f->arenaTensors[size_t(t)]);
    }
    f->args.resize(slotRefs.size());
    for (size_t k = 0; k < slotRefs.size(); ++k)
      if (fixedArg[k]) f->args[k] = f->slots[slotRefs[k]];
    return f;
  }

  void release(std::unique_ptr<Frame> f) const {
    // Drop every reference the call made (inputs, intermediates); the arena stays.
    for (size_t i = 0; i < f->slots.size(); ++i)
      if (!keepSlot[i]) f->slots[i] = RtValue();
    for (size_t k = 0; k < f->args.size(); ++k)
      if (!fixedArg[k]) f->args[k] = RtValue();
    f->outs.clear();
    // Between calls the arena's pages serve other buffers (the backward's arena the forward's
    // saved values, one graph's arena another's): memory held across graphs is the largest
    // arena, not their sum.
    // Not where Python code ran in the call (external_call): it could keep a tensor it was
    // handed, which must never point into memory another buffer then holds.
    if (target && f->arena && stats.externalOps == 0) f->arenaLent = target->lendMemory(*f->arena);
    std::lock_guard<std::mutex> lock(poolMutex);
    pool.push_back(std::move(f));
  }

  /// The instruction's operand values, contiguous for the kernel call.
  std::span<const RtValue> gather(const Instr &in, Frame &f) const {
    for (uint32_t k = in.operands; k < in.operands + in.numOperands; ++k) {
      if (fixedArg[k]) continue;
      RtValue &v = f.slots[slotRefs[k]];
      if (moveOperand[k])
        f.args[k] = std::move(v);
      else
        f.args[k] = v;
    }
    return {f.args.data() + in.operands, in.numOperands};
  }

  /// Drops the call's references to the operands (a moved value is freed here).
  void dropArgs(const Instr &in, Frame &f) const {
    for (uint32_t k = in.operands; k < in.operands + in.numOperands; ++k)
      if (!fixedArg[k]) f.args[k] = RtValue();
  }

  void store(const Instr &in, Frame &f, std::vector<RtValue> &&values) const {
    if (values.size() != in.numResults)
      throw Error(ErrorKind::Internal, "kernel returned " + std::to_string(values.size()) +
                                           " values for " + std::to_string(in.numResults) +
                                           " results");
    for (uint32_t i = 0; i < in.numResults; ++i)
      f.slots[slotRefs[in.results + i]] = std::move(values[i]);
  }

  void runBlock(const BlockProgram &b, Frame &f) const {
    const Instr *cur = nullptr;
    try {
      for (const Instr &in : b.instrs) {
        cur = &in;
        if (!in.profileRow) {
          execute(in, f);
          continue;
        }
        auto start = std::chrono::steady_clock::now();
        execute(in, f);
        profileAdd(in.profileRow, std::chrono::duration_cast<std::chrono::nanoseconds>(
                                      std::chrono::steady_clock::now() - start)
                                      .count());
      }
    } catch (const Error &) {
      throw; // already names its op (an op of a nested block, or a wrapped kernel error)
    } catch (const InternalKernelError &e) {
      throw Error(ErrorKind::Internal, cur->op->describe() + ": internal error: " + e.what());
    } catch (const KernelError &e) {
      // A native kernel's messages name the op they come from (a fusion has several): a lone
      // op's would name it twice.
      std::string where = cur->op->describe() + ": ", what = e.what();
      throw Error(ErrorKind::User, what.starts_with(where) ? what : where + what);
    } catch (const TypeInferenceError &e) {
      throw Error(ErrorKind::User, cur->op->describe() + ": " + e.what());
    } catch (const std::exception &e) {
      throw Error(ErrorKind::Internal, cur->op->describe() + ": internal error: " + e.what());
    }
  }

  void execute(const Instr &in, Frame &f) const {
    switch (in.kind) {
    case InstrKind::Constant:
      f.slots[slotRefs[in.results]] = constants[size_t(in.constant)];
      return;
    case InstrKind::Kernel:
      store(in, f, (*in.kernel)(*in.op, gather(in, f)));
      dropArgs(in, f);
      return;
    case InstrKind::SizedKernel: {
      ResolvedOp resolved(*in.op, f.symbols);
      std::vector<RtValue> out = (*in.kernel)(resolved.op(), gather(in, f));
      resolved.checkResults(out);
      store(in, f, std::move(out));
      dropArgs(in, f);
      return;
    }
    case InstrKind::External:
      store(in, f, (*in.external)(gather(in, f)));
      dropArgs(in, f);
      return;
    case InstrKind::Exec:
      store(in, f, in.exe->run(gather(in, f)));
      dropArgs(in, f);
      return;
    case InstrKind::ExecInto: {
      std::span<const RtValue> args = gather(in, f);
      // A planned result's slot already holds its arena slice.
      if (in.numResults == 1 && outputs[in.outputs].arenaTensor >= 0) {
        in.exe->runInto(args, std::span<const Tensor>(&f.slots[slotRefs[in.results]].tensor(), 1));
        dropArgs(in, f);
        return;
      }
      f.outs.resize(in.numResults);
      for (uint32_t r = 0; r < in.numResults; ++r) {
        const OutputBuffer &b = outputs[in.outputs + r];
        if (b.arenaTensor >= 0)
          f.outs[r] = f.slots[slotRefs[in.results + r]].tensor();
        else if (const Tensor *operand = inPlaceOperand(b, args))
          f.outs[r] = *operand; // the result is the operand's memory (reinplace)
        else
          f.outs[r] = target->allocate(b.dtype, b.sizes);
      }
      in.exe->runInto(args, f.outs);
      dropArgs(in, f);
      for (uint32_t r = 0; r < in.numResults; ++r)
        if (outputs[in.outputs + r].arenaTensor < 0)
          f.slots[slotRefs[in.results + r]] = std::move(f.outs[r]);
      return;
    }
    case InstrKind::CopyInto: {
      std::span<const RtValue> args = gather(in, f);
      const Tensor &x = args[0].tensor();
      const Tensor &slice = f.arenaTensors[size_t(outputs[in.outputs].arenaTensor)];
      if (copiesInto(*in.op, x, slice.sizes())) {
        backend::parallelCopy(slice, x); // in x's row-major element order, as the reference
        f.slots[slotRefs[in.results]] = RtValue(slice);
      } else {
        store(in, f, (*in.kernel)(*in.op, args)); // the reference kernel's view
      }
      dropArgs(in, f);
      return;
    }
    case InstrKind::If: {
      const BlockProgram &b =
          blocks[size_t(f.slots[slotRefs[in.operands]].toBool() ? in.block0 : in.block1)];
      runBlock(b, f);
      for (uint32_t r = 0; r < in.numResults; ++r)
        f.slots[slotRefs[in.results + r]] = f.slots[b.yields.at(r)];
      return;
    }
    case InstrKind::Loop: runLoop(in, f); return;
    case InstrKind::InlineBlock: {
      const BlockProgram &b = blocks[size_t(in.block0)];
      std::span<const RtValue> args = gather(in, f);
      for (uint32_t i = 0; i < in.numOperands; ++i)
        f.slots[b.args.at(i)] = args[i];
      dropArgs(in, f);
      runBlock(b, f);
      for (uint32_t r = 0; r < in.numResults; ++r)
        f.slots[slotRefs[in.results + r]] = f.slots[b.yields.at(r)];
      return;
    }
    }
  }

  void runLoop(const Instr &in, Frame &f) const {
    const BlockProgram &body = blocks[size_t(in.block0)];
    int64_t maxTrips = f.slots[slotRefs[in.operands]].toInt();
    bool cond = f.slots[slotRefs[in.operands + 1]].toBool();
    size_t numCarried = in.numOperands - 2;
    if (body.args.size() != numCarried + 1 || body.yields.size() != numCarried + 1)
      throw Error(ErrorKind::Internal, "loop body does not match its carried values");
    for (size_t i = 0; i < numCarried; ++i)
      f.slots[body.args[i + 1]] = f.slots[slotRefs[in.operands + 2 + i]];
    std::vector<RtValue> next(numCarried);
    for (int64_t it = 0; it < maxTrips && cond; ++it) {
      f.slots[body.args[0]] = RtValue(it);
      runBlock(body, f);
      cond = f.slots[body.yields[0]].toBool();
      // Through a copy: a yield may name another iteration argument (yield(%b, %a)).
      for (size_t i = 0; i < numCarried; ++i)
        next[i] = f.slots[body.yields[i + 1]];
      for (size_t i = 0; i < numCarried; ++i)
        f.slots[body.args[i + 1]] = std::move(next[i]);
    }
    for (size_t i = 0; i < numCarried; ++i)
      f.slots[slotRefs[in.results + i]] = f.slots[body.args[i + 1]];
  }

  void checkInputs(const std::vector<RtValue> &inputs) const {
    if (inputs.size() != inputChecks.size())
      throw Error(ErrorKind::User, "graph @" + graph->name() + " takes " +
                                       std::to_string(inputChecks.size()) + " inputs, got " +
                                       std::to_string(inputs.size()));
    if (!opts.checkInputs) return;
    // Shape symbols must mean one size across all inputs, as the interpreter checks.
    int64_t local[16];
    std::vector<int64_t> heap;
    std::span<int64_t> symbolValues(local, inputSymbols.size());
    if (inputSymbols.size() > std::size(local)) {
      heap.resize(inputSymbols.size());
      symbolValues = heap;
    }
    std::fill(symbolValues.begin(), symbolValues.end(), -1);
    for (size_t i = 0; i < inputs.size(); ++i) {
      const InputCheck &c = inputChecks[i];
      if (!c.tensor) continue;
      std::string why;
      if (!inputs[i].isTensor()) {
        why = std::string("expected a tensor, got ") + inputs[i].kindName();
      } else {
        const Tensor &t = inputs[i].tensor();
        bool fits = t.dtype() == c.dtype && t.sizes().size() == c.sizes.size();
        for (size_t d = 0; fits && d < c.sizes.size(); ++d)
          fits = c.sizes[d] < 0 || c.sizes[d] == t.sizes()[d];
        if (!fits) why = "does not have the declared dtype and shape";
      }
      if (why.empty()) why = bindSymbols(c, inputs[i].tensor(), symbolValues);
      if (!why.empty())
        throw Error(ErrorKind::User, "input " + std::to_string(i) + " (%" +
                                         graph->input(i)->name() + ": " +
                                         graph->input(i)->type().str() + ") of graph @" +
                                         graph->name() + ": " + why);
    }
    if (compoundInputDims) checkCompoundDims(inputs, symbolValues);
  }

  /// Binds the plain symbols of one input's dims, or says which one disagrees.
  std::string bindSymbols(const InputCheck &c, const Tensor &t,
                          std::span<int64_t> symbolValues) const {
    for (size_t d = 0; d < c.symbols.size(); ++d) {
      if (c.symbols[d] < 0) continue;
      int64_t &bound = symbolValues[size_t(c.symbols[d])];
      if (bound < 0)
        bound = t.sizes()[d];
      else if (bound != t.sizes()[d])
        return "dim " + std::to_string(d) + " is " + std::to_string(t.sizes()[d]) + ", but " +
               inputSymbols[size_t(c.symbols[d])] + " = " + std::to_string(bound) +
               " from an earlier input";
    }
    return "";
  }

  /// After binding: input dims that are expressions of symbols (s0*2).
  void checkCompoundDims(const std::vector<RtValue> &inputs,
                         std::span<const int64_t> symbolValues) const {
    SymbolBindings bindings;
    for (size_t k = 0; k < inputSymbols.size(); ++k)
      if (symbolValues[k] >= 0) bindings[inputSymbols[k]] = symbolValues[k];
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Type &t = graph->input(i)->type();
      if (!t.isTensor()) continue;
      for (size_t d = 0; d < t.shape().size(); ++d) {
        auto v = t.shape()[d].evaluate(bindings);
        if (v && *v != inputs[i].tensor().sizes()[d])
          throw Error(ErrorKind::User,
                      "input " + std::to_string(i) + " (%" + graph->input(i)->name() + ": " +
                          t.str() + ") of graph @" + graph->name() + ": dim " + std::to_string(d) +
                          " is " + std::to_string(inputs[i].tensor().sizes()[d]) + ", expected " +
                          t.shape()[d].str() + " = " + std::to_string(*v));
      }
    }
  }

  /// Outputs never share the arena (plan-memory keeps graph outputs and their bases out of it);
  /// this guards the guarantee the caller relies on when it hands outputs out without a copy.
  void detachFromArena(RtValue &v, const Frame &f) const {
    if (!f.arena || !inArena(v, f)) return;
    if (v.isTensor()) {
      v = RtValue(v.tensor().contiguousCopy());
      return;
    }
    RtList copy = v.list();
    for (RtValue &e : copy)
      detachFromArena(e, f);
    v = RtValue(std::move(copy));
  }

  /// Constants live as long as the compiled graph: an output that is one (or a view of one) is
  /// handed out as a copy, else a write by the caller would change what later calls return.
  /// Outputs that view one constant (a folded tensor returned with a view of it) get views of
  /// one copy of it, sharing memory as eager's do (fuzzer seed 10156).
  void detachFromConstants(std::vector<RtValue> &results) const {
    if (constants.empty()) return;
    auto constantStorage = [&](const Tensor &t) -> const Storage * {
      for (const RtValue &c : constants)
        if (c.isTensor() && c.tensor().storage() == t.storage()) return t.storage().get();
      return nullptr;
    };
    std::vector<std::pair<const Storage *, std::shared_ptr<Storage>>> shared; // original, copy
    auto countUses = [&](auto &self, const RtValue &v) -> void {
      if (v.isList()) {
        for (const RtValue &e : v.list())
          self(self, e);
        return;
      }
      if (!v.isTensor()) return;
      const Storage *s = constantStorage(v.tensor());
      if (!s) return;
      auto it =
          std::find_if(shared.begin(), shared.end(), [&](const auto &p) { return p.first == s; });
      if (it == shared.end())
        shared.emplace_back(s, nullptr); // seen once
      else if (!it->second)
        it->second = std::make_shared<Storage>(s->nbytes()); // seen twice: one copy for all
    };
    // A value the caller copies into an input is not seen as a tensor: it gets its own copy
    // (else it would share memory with a returned view of it, which the frontend rebuilds on
    // the input anyway, and stop that view's layout from being restored; fuzzer seed 89).
    auto writesInput = [&](size_t i) {
      return i < opts.outputWritesInput.size() && opts.outputWritesInput[i] >= 0;
    };
    for (size_t i = 0; i < results.size(); ++i)
      if (!writesInput(i)) countUses(countUses, results[i]);
    for (auto &[original, copy] : shared)
      if (copy) std::memcpy(copy->data(), original->data(), size_t(original->nbytes()));
    auto detach = [&](auto &self, RtValue &v) -> void {
      if (v.isList()) {
        RtList list = v.list();
        for (RtValue &e : list)
          self(self, e);
        v = RtValue(std::move(list));
        return;
      }
      if (!v.isTensor()) return;
      const Tensor &t = v.tensor();
      const Storage *s = constantStorage(t);
      if (!s) return;
      for (const auto &[original, copy] : shared)
        if (original == s) {
          v = copy ? RtValue(Tensor(copy, t.dtype(), t.sizes(), t.strides(), t.offset()))
                   : RtValue(t.contiguousCopy());
          return;
        }
    };
    for (size_t i = 0; i < results.size(); ++i) {
      if (writesInput(i)) {
        detachAlone(results[i]);
        continue;
      }
      detach(detach, results[i]);
    }
  }

  /// detachFromConstants for one output on its own: a contiguous copy of a constant's memory.
  void detachAlone(RtValue &v) const {
    if (v.isList()) {
      RtList list = v.list();
      for (RtValue &e : list)
        detachAlone(e);
      v = RtValue(std::move(list));
      return;
    }
    if (!v.isTensor()) return;
    for (const RtValue &c : constants)
      if (c.isTensor() && c.tensor().storage() == v.tensor().storage()) {
        v = RtValue(v.tensor().contiguousCopy());
        return;
      }
  }

  static bool inArena(const RtValue &v, const Frame &f) {
    if (v.isTensor()) return v.tensor().storage() == f.arena;
    if (v.isList())
      for (const RtValue &e : v.list())
        if (inArena(e, f)) return true;
    return false;
  }
};

CompiledGraph::CompiledGraph(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CompiledGraph::CompiledGraph(CompiledGraph &&) noexcept = default;
CompiledGraph &CompiledGraph::operator=(CompiledGraph &&) noexcept = default;
CompiledGraph::~CompiledGraph() = default;

const Graph &CompiledGraph::graph() const { return *impl_->graph; }
const CompileStats &CompiledGraph::stats() const { return impl_->stats; }

std::vector<std::pair<std::string, std::string>> CompiledGraph::dumpFiles() const {
  std::vector<std::pair<std::string, std::string>> files;
  for (size_t i = 0; i < impl_->executableOps.size(); ++i) {
    char prefix[16];
    std::snprintf(prefix, sizeof prefix, "k%03zu-", i);
    for (auto &[name, text] : impl_->executableOps[i].second->dumpFiles())
      files.emplace_back(prefix + name, text);
  }
  return files;
}

std::vector<RtValue> CompiledGraph::run(std::vector<RtValue> inputs) const {
  const Impl &im = *impl_;
  im.checkInputs(inputs);
  std::unique_ptr<Frame> f = im.acquire();
  std::vector<RtValue> results;
  try {
    const BlockProgram &body = im.blocks[0];
    if (im.symbolicSizes) {
      f->symbols.clear();
      for (size_t i = 0; i < inputs.size(); ++i)
        if (inputs[i].isTensor() && im.graph->input(i)->type().isTensor() &&
            im.graph->input(i)->type().rank() == inputs[i].tensor().rank())
          bindShapeSymbols(im.graph->input(i)->type().shape(), inputs[i].tensor().sizes(),
                           f->symbols);
    }
    for (size_t i = 0; i < inputs.size(); ++i)
      f->slots[body.args[i]] = std::move(inputs[i]);
    im.runBlock(body, *f);
    results.reserve(body.yields.size());
    for (size_t i = 0; i < body.yields.size(); ++i) {
      RtValue &v = f->slots[body.yields[i]];
      if (im.moveOutput[i])
        results.push_back(std::move(v));
      else
        results.push_back(v);
      im.detachFromArena(results.back(), *f);
    }
    im.detachFromConstants(results);
  } catch (...) {
    im.release(std::move(f));
    throw;
  }
  im.release(std::move(f));
  return results;
}

const std::string &defaultPipeline() {
  static const std::string pipeline = [] {
    const char *env = std::getenv("XJIT_PIPELINE");
    return std::string(env && *env ? env : kDefaultPipeline);
  }();
  return pipeline;
}

/// CPU time of the calling thread: the log's figure that a loaded machine does not inflate.
static double threadCpuMs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) * 1e-6;
}

CompiledGraph compileGraph(const Graph &g, backend::Target &target, const CompileOptions &opts) {
  auto im = std::make_unique<CompiledGraph::Impl>();
  im->graph = g.clone();
  im->target = &target;
  im->opts = opts;
  Op *returnOp = im->graph->body()->terminator();
  if (returnOp && std::any_of(opts.outputWritesInput.begin(), opts.outputWritesInput.end(),
                              [](int j) { return j >= 0; })) {
    if (opts.outputWritesInput.size() != returnOp->numOperands())
      throw Error(ErrorKind::Internal, "compileGraph: outputWritesInput has " +
                                           std::to_string(opts.outputWritesInput.size()) +
                                           " entries for " +
                                           std::to_string(returnOp->numOperands()) + " outputs");
    returnOp->setAttr("io.input_of", Attr(Attr::Ints(opts.outputWritesInput.begin(),
                                                     opts.outputWritesInput.end())));
  }
  if (!opts.pipeline.empty()) {
    // fuse assumes values are not written after they are defined: a group reading a value
    // that an in-place op (copy_, index_put_) later overwrites would see the old contents. Such
    // graphs (the frontend functionalizes most of them away) run unfused.
    bool writesInPlace = false;
    im->graph->walk([&](Op *op) { writesInPlace |= op->def().has(kInPlace); });
    passes::PassManagerOptions pmOpts;
    pmOpts.log = opts.logPasses;
    passes::PassManager pm(pmOpts);
    for (passes::PassStep &step : passes::parsePipeline(opts.pipeline)) {
      if (writesInPlace && step.pass->name == "fuse") {
        im->stats.fuseSkipped = true;
        continue;
      }
      pm.add(std::move(step));
    }
    pm.run(*im->graph);
    bool writesAfter = false;
    im->graph->walk(
        [&](Op *op) { writesAfter |= op->def().has(kInPlace) || op->hasAttr("inplace_operand"); });
    im->stats.writesInputsInPlace = writesAfter && !writesInPlace;
  }
  const Graph &cg = *im->graph;
  if (Op *ret = cg.body()->terminator(); ret && ret->hasAttr("mem.arena"))
    im->arenaBytes = im->plannedBytes = (ret->attr("mem.arena").asInt() + 63) / 64 * 64;
  for (size_t i = 0; i < cg.numInputs(); ++i) {
    const Type &t = cg.input(i)->type();
    InputCheck c;
    c.tensor = t.isTensor();
    if (c.tensor) {
      c.dtype = t.dtype();
      for (const DimExpr &d : t.shape()) {
        c.sizes.push_back(d.isStatic() ? d.value() : -1);
        std::vector<std::string> syms = d.isStatic() ? std::vector<std::string>{} : d.symbols();
        int32_t index = -1;
        if (syms.size() == 1 && d == DimExpr::symbol(syms[0])) {
          auto it = std::find(im->inputSymbols.begin(), im->inputSymbols.end(), syms[0]);
          index = static_cast<int32_t>(it - im->inputSymbols.begin());
          if (it == im->inputSymbols.end()) im->inputSymbols.push_back(syms[0]);
        } else if (!d.isStatic()) {
          im->compoundInputDims = true;
        }
        c.symbols.push_back(index);
      }
    }
    im->inputChecks.push_back(std::move(c));
  }
  {
    // The target may finish its executables together (the CPU links a graph's kernels in one
    // go); none runs before finish().
    auto start = std::chrono::steady_clock::now();
    const double cpuStart = threadCpuMs();
    backend::JitTotals before = backend::jitTotals();
    std::unique_ptr<backend::CompileBatch> batch = target.beginCompileBatch();
    im->compileBlock(*cg.body());
    batch->finish();
    if (opts.logPasses) {
      backend::JitTotals after = backend::jitTotals();
      std::fprintf(
          stderr,
          "[xjit passes] %-20s %8.3f ms  cpu %.3f ms  kernels compiled %llu (%.1f ms), from "
          "the cache %llu (%.1f ms)\n",
          "codegen",
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count(),
          threadCpuMs() - cpuStart,
          static_cast<unsigned long long>(after.llvmCompilations - before.llvmCompilations),
          after.llvmMs - before.llvmMs,
          static_cast<unsigned long long>(after.cacheLinks - before.cacheLinks),
          after.cacheLinkMs - before.cacheLinkMs);
    }
  }
  im->slotOf.clear();
  im->keepSlot.assign(im->numSlots, 0);
  for (auto [slot, t] : im->arenaSlots)
    im->keepSlot[slot] = 1;
  // Operand entries (result entries of slotRefs are never read as arguments).
  im->fixedArg.assign(im->slotRefs.size(), 0);
  im->moveOperand.resize(im->slotRefs.size(), 0);
  im->forEachInstr([&](const Instr &in) {
    for (uint32_t k = in.operands; k < in.operands + in.numOperands; ++k)
      im->fixedArg[k] = im->keepSlot[im->slotRefs[k]];
  });
  const std::vector<uint32_t> &yields = im->blocks[0].yields;
  for (size_t i = 0; i < yields.size(); ++i)
    im->moveOutput.push_back(!im->keepSlot[yields[i]] &&
                             std::find(yields.begin() + long(i) + 1, yields.end(), yields[i]) ==
                                 yields.end());
  // Without a planned result the arena is never read: do not allocate it per frame.
  if (im->slices.empty()) im->arenaBytes = 0;
  im->stats.arenaBytes = im->arenaBytes;
  return CompiledGraph(std::move(im));
}

} // namespace xjit::runtime
