// The CPU Target: regions that lower to loop kernels (elementwise and reduction) are compiled
// with the ORC JIT, library calls go to oneDNN; memory is host memory.
#include "dnnl_library.h"
#include "max_pool_backward.h"
#include "resample.h"
#include "scatter.h"
#include "shared_executables.h"

#include "ops/movement_util.h" // catSizes, catInto
#include "xjit/backend/compile_cache.h"
#include "xjit/backend/host_buffers.h"
#include "xjit/backend/jit.h"
#include "xjit/backend/lower.h"
#include "xjit/backend/target.h"
#include "xjit/ir/diagnostics.h"

#include <algorithm>
#include <cstdlib>
#include <new>

namespace xjit::backend {
namespace {

// Buffers: hostBuffer (host_buffers.cpp), uninitialized host memory, 64-byte aligned.
// Zero-filling (Storage(nbytes)) would be a pass over memory the kernels overwrite anyway:
// GPT-2's 25.7 MB logits, on every call. (Asking for transparent huge pages here cut a warm first
// call's page faults 2.5x but not its time, and made GPT-2's steady calls fault again:
// docs/perf.md, "Session 5: warm start".)

class CpuExecutable : public Executable {
public:
  CpuExecutable(LoweredKernel lk, std::shared_ptr<const CompiledKernel> ck)
      : lk_(std::move(lk)), ck_(std::move(ck)), batch_(LinkBatch::current()) {}

  /// Whether an op compiled now may share this executable: its code is linked, or will be by
  /// the batch this thread is compiling (the same graph); not another thread's pending batch.
  bool shareableNow() const { return ck_->linked() || (batch_ && batch_ == LinkBatch::current()); }

  std::vector<RtValue> run(std::span<const RtValue> inputs) const override {
    return runLowered(lk_, *ck_, inputs);
  }

  bool canRunInto() const override { return true; }
  void runInto(std::span<const RtValue> inputs, std::span<const Tensor> outputs) const override {
    runLoweredInto(lk_, *ck_, inputs, outputs);
  }

  std::vector<std::pair<std::string, std::string>> dumpFiles() const override {
    const std::string &n = lk_.kernel.name;
    return {{n + ".loops", printKernel(lk_.kernel)},
            {n + ".ll", ck_->llvmIR()},
            {n + ".s", ck_->assembly()}};
  }

private:
  LoweredKernel lk_;
  std::shared_ptr<const CompiledKernel> ck_;
  const LinkBatch *batch_; // the batch that links ck_, if any (compared, never dereferenced)
};

/// A lone cat or stack: each operand copied into its slice of the result by Tensor's strided copy
/// (runs of contiguous elements, tiled transpositions; large parts split over the kernel
/// threads), into the runtime's planned buffer. A loop
/// kernel per operand was slower where an operand is a transposed view (the GPT step's key
/// gradient: 1.5 ms against this 0.3 ms, docs/decisions.md).
class CatExecutable : public Executable {
public:
  explicit CatExecutable(const Op &op)
      : stack_(op.name() == "stack"), dim_(ops::attrInt(op, "dim")),
        dtype_(op.result(0)->type().dtype()) {}

  std::vector<RtValue> run(std::span<const RtValue> inputs) const override {
    int64_t dim = 0;
    std::vector<Tensor> parts = tensors(inputs);
    Tensor out = hostTensor(dtype_, sizesOf(parts, &dim));
    copyInto(parts, dim, out);
    return {RtValue(out)};
  }

  bool canRunInto() const override { return true; }
  void runInto(std::span<const RtValue> inputs, std::span<const Tensor> outputs) const override {
    int64_t dim = 0;
    std::vector<Tensor> parts = tensors(inputs);
    std::vector<int64_t> sizes = sizesOf(parts, &dim);
    if (outputs.size() != 1 || outputs[0].sizes() != sizes || outputs[0].dtype() != dtype_)
      throw InternalKernelError(name() + ": the output buffer does not fit the result");
    copyInto(parts, dim, outputs[0]);
  }

  std::vector<std::pair<std::string, std::string>> dumpFiles() const override {
    return {{name() + ".copy",
             name() + " along dim " + std::to_string(dim_) + ": Tensor::copyFrom per operand\n"}};
  }

private:
  std::string name() const { return stack_ ? "stack" : "cat"; }
  static std::vector<Tensor> tensors(std::span<const RtValue> inputs) {
    std::vector<Tensor> parts;
    for (const RtValue &v : inputs)
      parts.push_back(v.tensor());
    return parts;
  }
  /// The result's sizes (cat drops its skipped operands from parts); sets the copies' dim.
  std::vector<int64_t> sizesOf(std::vector<Tensor> &parts, int64_t *dim) const {
    return stack_ ? ops::mv::stackSizes(parts, dim_, dim) : ops::mv::catSizes(parts, dim_, dim);
  }
  void copyInto(std::span<const Tensor> parts, int64_t dim, const Tensor &out) const {
    if (stack_)
      ops::mv::stackInto(parts, dim, out, parallelCopy);
    else
      ops::mv::catInto(parts, dim, out, parallelCopy);
  }

  bool stack_;
  int64_t dim_;
  DType dtype_;
};

/// Everything a CpuExecutable does with its inputs: the loop IR (`printed`, and its general
/// version) and how region inputs and outputs map to the kernel's parameters. Empty: never
/// shared.
std::string sharingKey(const LoweredKernel &lk, const std::string &printed,
                       const TargetOptions &opts) {
  if (opts.keepText) return "";
  std::string key = opts.optimize ? "O;" : "0;";
  key += printed;
  if (lk.kernel.general) key += "\ngeneral:\n" + printKernel(*lk.kernel.general);
  auto ints = [&key](const char *name, const std::vector<int64_t> &v) {
    key += name;
    for (int64_t i : v)
      key += std::to_string(i) + ",";
  };
  for (const Type &t : lk.inputTypes)
    key += ";in " + t.str();
  for (const Type &t : lk.outputTypes)
    key += ";out " + t.str();
  ints(";buffers ", lk.inputBuffer);
  ints(";scalars ", lk.inputScalar);
  ints(";outputs ", lk.outputBuffer);
  for (const auto &[a, b] : lk.sameSize)
    key += ";same " + a.str() + "=" + b.str();
  return key;
}

SharedExecutables &sharedKernelExecutables() {
  static SharedExecutables shared;
  return shared;
}

/// A graph's LLVM kernels linked together (one JITDylib, one lookup: LinkBatch in jit.h).
class CpuCompileBatch : public CompileBatch {
public:
  void finish() override { links_.finish(); }

private:
  LinkBatch links_;
};

/// Whether a fusion of this lowering is compiled already (by either optimization level).
bool compiledBefore(const Op &fusion, const LowerOptions &lower) {
  std::string key = fusionLoweringKey(fusion, lower);
  return !key.empty() &&
         (sharedKernelExecutables().find("O;" + key) || sharedKernelExecutables().find("0;" + key));
}

// Release builds verify a kernel only when LLVM compiles it (a hit skips it, lower.h).
#ifdef NDEBUG
constexpr LowerOptions kLowerOptions{.verify = false};
#else
constexpr LowerOptions kLowerOptions{};
#endif

class CpuTarget : public Target {
public:
  std::string name() const override { return "cpu"; }

  std::string fingerprint() const override {
    Jit &jit = Jit::instance();
    // compilerIdentity(): the backend's source hash and the LLVM version (compile_cache.h).
    return "cpu;" + jit.cpuName() + ";" + jit.cpuFeatures() + ";" + compilerIdentity();
  }

  std::string whyNotSupported(const Op &op) const override {
    // Matmul / conv / pooling and the epilogue groups anchored on them: oneDNN.
    if (dnnl_kernels::isLibraryCall(op)) return dnnlLibrary().whyNotSupported(op);
    if (op.name() == "fusion") {
      if (op.numRegions() != 1) return "fusion: expected a region";
      if (compiledBefore(op, kLowerOptions)) return ""; // lowered before: no probe
      return whyNotLowerable(*op.region(0));
    }
    if (op.name() == "cat" || op.name() == "stack")
      return op.numOperands() > 0 && op.result(0)->type().isTensor()
                 ? ""
                 : op.name() + ": no operands, or the result is not a tensor";
    if (op.name() == "cumsum") return whyNotScan(op);
    if (isMaxPoolBackward(op)) return whyNotMaxPoolBackward(op);
    if (isLinearResample(op)) return whyNotLinearResample(op);
    if (isScatter(op)) return whyNotScatter(op);
    return whyNotElementwise(op);
  }

  std::shared_ptr<const Executable> compile(const Op &op, const TargetOptions &opts) override {
    const bool fusion = op.name() == "fusion" && !dnnl_kernels::isLibraryCall(op);
    // A fusion's lowering does whyNotSupported's checks itself (and throws what they report).
    if (std::string why = fusion ? "" : whyNotSupported(op); !why.empty())
      throw Error(ErrorKind::Internal, "cpu target cannot compile " + op.describe() + ": " + why);
    if (dnnl_kernels::isLibraryCall(op)) return dnnlLibrary().compile(op, opts);
    if (op.name() == "cat" || op.name() == "stack") return std::make_shared<CatExecutable>(op);
    if (isMaxPoolBackward(op)) return makeMaxPoolBackwardExecutable(op);
    if (isLinearResample(op)) return makeLinearResampleExecutable(op);
    if (isScatter(op)) return makeScatterExecutable(op);
    const LowerOptions &lower = kLowerOptions;
    // An identical fusion compiled before (another layer of the model): its executable, without
    // lowering and printing this one.
    std::string loweringKey = fusion && !opts.keepText ? fusionLoweringKey(op, lower) : "";
    if (!loweringKey.empty()) {
      loweringKey.insert(0, opts.optimize ? "O;" : "0;");
      if (auto found = sharedKernelExecutables().find(loweringKey);
          found && static_cast<const CpuExecutable &>(*found).shareableNow()) {
        noteKernelShared();
        return found;
      }
    }
    LoweredKernel lk = fusion                  ? lowerFusion(op, lower)
                       : op.name() == "cumsum" ? lowerScan(op, lower)
                                               : lowerElementwiseOp(op, lower);
    // Identical ops (an unrolled loop's body at every step) share one executable: Jit::compile
    // would share their code, but each would still hold its own loop IR twice (~20 KB).
    const std::string printed = printKernel(lk.kernel); // also Jit::compile's cache key
    std::string key = sharingKey(lk, printed, opts);
    if (!key.empty())
      if (auto found = sharedKernelExecutables().find(key);
          found && static_cast<const CpuExecutable &>(*found).shareableNow()) {
        noteKernelShared();
        if (!loweringKey.empty()) sharedKernelExecutables().insert(loweringKey, found);
        return found;
      }
    auto ck = Jit::instance().compile(
        lk.kernel,
        {.pipeline = opts.optimize ? Pipeline::Kernel : Pipeline::None, .keepText = opts.keepText},
        &printed);
    auto exe = std::make_shared<CpuExecutable>(std::move(lk), std::move(ck));
    if (!key.empty()) sharedKernelExecutables().insert(key, exe);
    if (!loweringKey.empty()) sharedKernelExecutables().insert(loweringKey, exe);
    return exe;
  }

  std::unique_ptr<CompileBatch> beginCompileBatch() override {
    return std::make_unique<CpuCompileBatch>();
  }

  /// Buffers the runtime hands to runInto (results and its arena): runInto writes every
  /// element, so they are not zero-filled (Tensor::empty is), see hostBuffer.
  Tensor allocate(DType dtype, const std::vector<int64_t> &sizes) override {
    return hostTensor(dtype, sizes);
  }
  void copyToHost(const Tensor &device, const Tensor &host) override { host.copyFrom(device); }
  void copyFromHost(const Tensor &host, const Tensor &device) override { device.copyFrom(host); }
  bool lendMemory(Storage &s) override { return lendHostBufferPages(s); }
  void reclaimMemory(Storage &s) override { reclaimHostBufferPages(s); }
};

} // namespace

std::unique_ptr<Target> makeCpuTarget() { return std::make_unique<CpuTarget>(); }

} // namespace xjit::backend
