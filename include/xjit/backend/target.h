// The device interface: what a backend implements so that compiled graphs run on its device.
// The CPU is one implementation (makeCpuTarget); docs/new-device.md walks through adding one.
//
// Division of labour: the device-independent passes (src/passes) decide *what* is computed
// together (fusion groups, memory plan); a Target decides *how*: which regions it compiles,
// what code they become, where their memory lives. The runtime (src/runtime, docs/runtime.md)
// asks the Target of each value's device for executables and memory and never looks inside
// them.
//
// Status: compile() and allocation are implemented for the CPU; library kernels (oneDNN),
// streams and the compile cache are the next steps and are marked below.
#pragma once

#include "xjit/ir/ir.h"
#include "xjit/ir/value.h"

#include <memory>
#include <span>
#include <string>
#include <vector>

namespace xjit::backend {

/// Code for one region (a `fusion` op or a single op) on one target. Thread-safe: one
/// executable may run on several threads at once.
class Executable {
public:
  virtual ~Executable() = default;
  /// Runs on the region's inputs (tensors in the target's memory, Python scalars) and returns
  /// its outputs (allocated by the target). Throws KernelError on a run-time failure.
  virtual std::vector<RtValue> run(std::span<const RtValue> inputs) const = 0;
  /// Whether runInto is implemented (the runtime then hands it buffers from its memory plan).
  virtual bool canRunInto() const { return false; }
  /// Runs writing the results into `outputs`: contiguous tensors of the results' dtypes and
  /// run-time sizes, allocated by the caller (slices of the runtime's arena, or fresh buffers
  /// for graph outputs); they never alias an input. Throws KernelError when an output does not
  /// have the size the inputs give.
  virtual void runInto(std::span<const RtValue> inputs, std::span<const Tensor> outputs) const;
  /// Human-readable code for --dump: kernel IR, and whatever lower levels the target has.
  virtual std::vector<std::pair<std::string, std::string>> dumpFiles() const = 0;
};

/// One graph's compiles on one thread (Target::beginCompileBatch): a target may hold back
/// per-executable work, such as linking, and do it for all of them at once in finish().
class CompileBatch {
public:
  virtual ~CompileBatch() = default;
  /// Completes the executables compiled since the batch began; before it they must not run.
  /// Throws xjit::Error like compile().
  virtual void finish() {}
};

struct TargetOptions {
  bool optimize = true;  // off: the least work that gives correct code (debugging)
  bool keepText = false; // keep what dumpFiles() returns
};

class Target {
public:
  virtual ~Target() = default;

  /// The device kind it serves, as in Device::kind ("cpu", "cuda").
  virtual std::string name() const = 0;
  /// Everything about the target that changes generated code (CPU name and features, LLVM
  /// version, compute capability...): part of the persistent compile cache key.
  virtual std::string fingerprint() const = 0;

  // ---- lowering ----
  /// "" when compile(op) succeeds for this op (a `fusion` op or a single op), else why not; the
  /// runtime then uses a library kernel or the reference kernel on the host.
  virtual std::string whyNotSupported(const Op &op) const = 0;
  virtual std::shared_ptr<const Executable> compile(const Op &op,
                                                    const TargetOptions &opts = {}) = 0;
  /// Starts a batch of compile() calls on this thread (the regions of one graph); the caller
  /// calls finish() before running any of them. Default: nothing is held back.
  virtual std::unique_ptr<CompileBatch> beginCompileBatch() {
    return std::make_unique<CompileBatch>();
  }

  // ---- memory ----
  /// A tensor in the target's memory (its Storage wraps device memory with a release
  /// callback). The CPU returns a host tensor.
  virtual Tensor allocate(DType dtype, const std::vector<int64_t> &sizes) = 0;
  /// Copies between host and device tensors of the same dtype and sizes (a plain copy on CPU).
  virtual void copyToHost(const Tensor &device, const Tensor &host) = 0;
  virtual void copyFromHost(const Tensor &host, const Tensor &device) = 0;
  /// Memory `allocate`d once and used only during calls (a frame's arena): lendMemory lets
  /// other allocations use it until reclaimMemory makes it usable again, contents not kept.
  /// Returns whether it was lent (default: never).
  virtual bool lendMemory(Storage &) { return false; }
  virtual void reclaimMemory(Storage &) {}
  /// Waits for queued work (devices with asynchronous queues; no-op on the CPU).
  virtual void synchronize() {}

  // Next (not yet in the interface): a layout query for the layout pass (which activation
  // layouts a target's library kernels prefer), and streams. Library kernels need nothing
  // more: on the CPU they are Executables like the LLVM kernels (docs/backend.md).
};

/// The host CPU: elementwise and reduction regions lowered to the kernel IR and compiled by
/// LLVM ORC; matmul / conv / pooling and the epilogue groups anchored on them through oneDNN.
std::unique_ptr<Target> makeCpuTarget();

} // namespace xjit::backend
