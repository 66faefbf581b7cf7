// Jit: compiles kernels through the LLVM engine (llvm_engine.h: LLVM IR, optimization, machine
// code and linking, in libxjit_llvm.so in the Python build), which it loads when a compile or
// link needs it; releaseEngine (after a compile burst, release_memory.cpp) unloads it again.
// Each link places its objects' code in pages of their own (CodePages), freed when the last
// CompiledKernel holding them goes away: one object per link without a batch (the same cached
// object can be linked twice), a compiled graph's kernels together inside a LinkBatch (one link,
// one lookup when the batch finishes; they share the code's lifetime). Their symbols carry a
// prefix of the cache key, so that different kernels of one name ("fusion_elementwise") do not
// collide in one link.
//
// Compile cache: the object file is what the persistent cache stores (compile_cache.h), keyed by
// the printed loop IR, the CPU name and features, the compiler's identity and the pipeline. On a
// hit, LLVM IR is never built: the object is linked directly.
#include "xjit/backend/jit.h"

#include "dnnl_library.h"
#include "llvm_engine.h"
#include "runtime_util.h"
#include "sum_cascade.h"
#include "xjit/backend/compile_cache.h"
#include "xjit/backend/content_tags.h"
#include "xjit/backend/host_buffers.h"
#include "xjit/backend/library_warm_up.h"
#include "xjit/backend/release_memory.h"
#include "xjit/ir/diagnostics.h"
#include "xjit/ir/op_registry.h"

#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

extern "C" void __deregister_frame(void *); // libgcc's unwinder

namespace xjit::backend {
namespace {

double threadCpuMs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) * 1e-6;
}

[[noreturn]] void linkFail(const std::string &what, const std::string &error) {
  throw Error(ErrorKind::Internal, what + ": " + error);
}

std::atomic<uint64_t> gLlvmCompilations{0}, gCacheLinks{0}, gGeneralVersions{0};
std::atomic<uint64_t> gBatchLinks{0}, gBatchedObjects{0}; // LinkBatch::finish
std::atomic<uint64_t> gKernelsShared{0};  // compiles answered by a live identical kernel
std::atomic<uint64_t> gTargetMachines{0}; // made by the engine (dropped by releases)
std::atomic<uint64_t> gEngineLoads{0}, gEngineUnloads{0}; // of the LLVM engine
std::atomic<uint64_t> gEngineLoadNs{0};                   // loading and starting it
std::atomic<uint64_t> gLlvmNs{0}, gCacheLinkNs{0};        // wall time, for jitTotals()

void addMs(std::atomic<uint64_t> &total, double ms) { total += uint64_t(ms * 1e6); }

const char *pipelineName(Pipeline p) {
  switch (p) {
  case Pipeline::Kernel: return kKernelPipeline;
  case Pipeline::LLVMDefault: return "O3";
  case Pipeline::None: return "always-inline";
  }
  return "?";
}

/// The LinkBatch collecting this thread's compiles (null: link each kernel at once).
thread_local LinkBatch *tCurrentBatch = nullptr;

/// Compiles with no batch on this thread (a kernel's general version, compiled while running).
struct NoBatch {
  LinkBatch *saved = tCurrentBatch;
  NoBatch() { tCurrentBatch = nullptr; }
  ~NoBatch() { tCurrentBatch = saved; }
};

} // namespace

std::atomic<uint64_t> gExecutablesShared{0};

void noteKernelShared() {
  ++gKernelsShared;
  ++gExecutablesShared;
}

/// A kernel compiled or loaded in a batch, waiting for LinkBatch::finish.
struct LinkBatch::Pending {
  std::shared_ptr<CompiledKernel> kernel;
  std::vector<std::shared_ptr<CompiledKernel>> sharers; // identical kernels of the same batch
  std::string object, symbol, key;
  bool fromCache = false;
};

struct Jit::Impl {
  std::string llvmArgs; // XJIT_LLVM_ARGS: changes code, so part of the cache key
  /// Linked kernels by compile-cache key, while any CompiledKernel holds them: an identical
  /// kernel (an LSTM's cell at every step, a transformer's layers) shares that code instead of
  /// linking the cached object again (4 pages of code and tables).
  std::mutex liveMutex;
  std::unordered_map<std::string, std::pair<std::weak_ptr<void>, KernelEntry>> live;

  /// The LLVM engine, loaded (or started) by the first compile or link that needs it and
  /// unloaded by releaseEngine when no compile or link is using it.
  std::mutex engineMutex;
  const LlvmEngine *engine = nullptr;
  void *engineHandle = nullptr;
  int engineUsers = 0;
  /// The host as the engine sees it: found by the first load, kept across unloads.
  std::atomic<bool> hostKnown{false};
  std::string cpu, features;

  /// A use of the engine: loaded and kept loaded while this lives.
  class EngineUse {
  public:
    explicit EngineUse(Impl &impl) : impl_(impl), engine_(impl.acquireEngine()) {}
    ~EngineUse() {
      std::lock_guard<std::mutex> lock(impl_.engineMutex);
      --impl_.engineUsers;
    }
    EngineUse(const EngineUse &) = delete;
    EngineUse &operator=(const EngineUse &) = delete;
    const LlvmEngine *operator->() const { return &engine_; }

  private:
    Impl &impl_;
    const LlvmEngine &engine_;
  };

  const LlvmEngine &acquireEngine() {
    std::lock_guard<std::mutex> lock(engineMutex);
    if (!engine) {
      auto t0 = Clock::now();
      void *handle = nullptr;
      const LlvmEngine *loaded = loadLlvmEngine(handle);
      std::string hostCpu, hostFeatures;
      try {
        loaded->start(llvmArgs, hostCpu, hostFeatures, gTargetMachines);
      } catch (...) {
        unloadLlvmEngine(handle);
        throw;
      }
      engine = loaded;
      engineHandle = handle;
      ++gEngineLoads;
      addMs(gEngineLoadNs, msSince(t0));
      if (!hostKnown) {
        cpu = std::move(hostCpu);
        features = std::move(hostFeatures);
        hostKnown = true;
      }
    }
    ++engineUsers;
    return *engine;
  }

  void knowHost() {
    if (!hostKnown) EngineUse use(*this);
  }

  bool releaseEngine() {
    std::lock_guard<std::mutex> lock(engineMutex);
    if (!engine || engineUsers > 0) return false;
    engine->stop(engineHandle != nullptr);
    unloadLlvmEngine(engineHandle);
    engine = nullptr;
    engineHandle = nullptr;
    return true;
  }

  void remember(const std::string &key, const std::shared_ptr<void> &code, KernelEntry entry) {
    std::lock_guard<std::mutex> lock(liveMutex);
    live[key] = {code, entry};
  }

  /// Links objects together into code of their own (the engine's link); returns the pages and
  /// each object's entry, or the linker's error.
  std::string link(const std::vector<ObjectToLink> &objects, std::shared_ptr<CodePages> &code,
                   std::vector<KernelEntry> &entries) {
    EngineUse engine(*this);
    code = std::make_shared<CodePages>();
    std::string error = engine->link(objects, *code, entries);
    if (!error.empty()) code.reset();
    return error;
  }

  /// LLVM IR, optimization and machine code for k (symbol `symbol`); fills ck's times (and
  /// text with keepText) and returns the object file.
  std::string buildObject(const Kernel &k, const std::string &symbol, const CompileOptions &opts,
                          CompiledKernel &ck) {
    ++gLlvmCompilations;
    EngineUse engine(*this);
    if (opts.keepText) ck.loopIR_ = printKernel(k);
    return engine->buildObject(k, symbol, opts.pipeline, opts.keepText, ck.times_, ck.llvmIR_,
                               ck.assembly_);
  }

  void linkBatch(std::vector<LinkBatch::Pending> &pending);
};

CodePages::~CodePages() {
  for (void *frame : frames)
    __deregister_frame(frame);
  for (auto [start, size] : regions)
    munmap(start, size);
}

Jit::Jit() : impl_(std::make_unique<Impl>()) {
  if (const char *args = std::getenv("XJIT_LLVM_ARGS")) impl_->llvmArgs = args;
}

Jit::~Jit() = default;

bool Jit::releaseEngine() {
  if (bool released = instance().impl_->releaseEngine()) {
    ++gEngineUnloads;
    return released;
  }
  return false;
}

void Jit::preloadEngine() { Impl::EngineUse use(*instance().impl_); }

bool Jit::engineLoaded() {
  Impl &impl = *instance().impl_;
  std::lock_guard<std::mutex> lock(impl.engineMutex);
  return impl.engine != nullptr;
}

Jit &Jit::instance() {
  // Never destroyed: compiled kernels held by other static objects may outlive any exit order.
  static Jit *jit = new Jit();
  return *jit;
}

const std::string &Jit::cpuName() const {
  impl_->knowHost();
  return impl_->cpu;
}
const std::string &Jit::cpuFeatures() const {
  impl_->knowHost();
  return impl_->features;
}

std::shared_ptr<const CompiledKernel> Jit::compile(const Kernel &k, const CompileOptions &opts,
                                                   const std::string *printed) {
  std::shared_ptr<CompiledKernel> ck(new CompiledKernel());
  ck->kernel_ = k;
  ck->options_ = opts;
  auto t0 = Clock::now();
  double cpu0 = threadCpuMs();
  // The symbol must be the same in every process for cached objects to link. Without the cache
  // each kernel has a JITDylib (a symbol namespace) of its own, so the name need not be unique.
  std::string symbol = "xjit_" + k.name;
  LinkBatch *batch = tCurrentBatch;

  // The cache is skipped when the caller wants the LLVM IR and assembly text (--dump). The key
  // is computed with the persistent cache off too: identical kernels in one process (an LSTM's
  // cell at every step) then compile once and share the code (kernels_shared).
  std::string key;
  const bool persistent = compileCacheEnabled();
  if (opts.useCache && !opts.keepText) {
    // No verification before a hit: the key is the printed kernel, and an entry is only written
    // after that very text was verified and compiled (by a compiler of the same identity).
    const char *pipelineOverride = std::getenv("XJIT_LLVM_PIPELINE");
    impl_->knowHost();
    key = compileCacheKey({printed ? *printed : printKernel(k), k.name, impl_->cpu, impl_->features,
                           compilerIdentity(), pipelineName(opts.pipeline),
                           pipelineOverride ? pipelineOverride : "", impl_->llvmArgs,
                           sumCascadeEnabled() ? "" : "XJIT_SUM_CASCADE=0"});
    // Distinct kernels of one name share a batch's JITDylib: the key makes their symbols differ.
    symbol += "_" + key.substr(0, 16);
    {
      std::lock_guard<std::mutex> lock(impl_->liveMutex);
      auto it = impl_->live.find(key);
      if (it != impl_->live.end()) {
        if (std::shared_ptr<void> code = it->second.first.lock()) {
          ck->code_ = std::move(code);
          ck->entry_ = it->second.second;
          ck->fromCache_ = true;
          ++gKernelsShared;
          return ck;
        }
        impl_->live.erase(it);
      }
    }
    if (batch) {
      // An identical kernel earlier in this batch: share its code once the batch is linked.
      for (LinkBatch::Pending &p : batch->pending_)
        if (p.key == key) {
          ck->fromCache_ = true;
          p.sharers.push_back(ck);
          ++gKernelsShared;
          return ck;
        }
    }
    if (std::optional<std::string> object =
            persistent ? compileCacheLoad(key) : std::optional<std::string>()) {
      if (batch) {
        ck->fromCache_ = true;
        batch->pending_.push_back({ck, {}, std::move(*object), symbol, key, true});
        // As without a batch, a hit's time includes keying and reading; finish adds the link.
        addMs(gCacheLinkNs, msSince(t0));
        return ck;
      }
      std::shared_ptr<CodePages> code;
      std::vector<KernelEntry> entries;
      std::string error = impl_->link({{*object, symbol}}, code, entries);
      if (error.empty()) {
        ck->code_ = std::move(code);
        ck->entry_ = entries[0];
        ck->fromCache_ = true;
        ck->times_.codegen = msSince(t0);
        ck->times_.cpu = threadCpuMs() - cpu0;
        ++gCacheLinks;
        addMs(gCacheLinkNs, ck->times_.codegen);
        impl_->remember(key, ck->code_, ck->entry_);
        return ck;
      }
      // A valid entry that does not link (should not happen): compile and overwrite it.
    }
  }

  std::string object = impl_->buildObject(k, symbol, opts, *ck);
  if (!key.empty() && persistent) compileCacheStore(key, object);
  if (batch && !key.empty()) {
    batch->pending_.push_back({ck, {}, std::move(object), symbol, key, false});
    ck->times_.cpu = threadCpuMs() - cpu0;
    addMs(gLlvmNs, msSince(t0));
    return ck;
  }
  auto t2 = Clock::now();
  std::shared_ptr<CodePages> code;
  std::vector<KernelEntry> entries;
  std::string error = impl_->link({{object, symbol}}, code, entries);
  if (!error.empty()) linkFail("JIT: linking kernel " + k.name, error);
  ck->code_ = std::move(code);
  ck->entry_ = entries[0];
  ck->times_.codegen += msSince(t2);
  if (!key.empty()) impl_->remember(key, ck->code_, ck->entry_);
  ck->times_.cpu = threadCpuMs() - cpu0;
  addMs(gLlvmNs, msSince(t0));
  return ck;
}

void Jit::Impl::linkBatch(std::vector<LinkBatch::Pending> &pending) {
  auto t0 = Clock::now();
  size_t hits = 0;
  for (const LinkBatch::Pending &p : pending)
    hits += p.fromCache;
  auto assign = [&](LinkBatch::Pending &p, const std::shared_ptr<void> &code, KernelEntry entry) {
    p.kernel->code_ = code;
    p.kernel->entry_ = entry;
    for (const std::shared_ptr<CompiledKernel> &s : p.sharers) {
      s->code_ = code;
      s->entry_ = entry;
    }
    remember(p.key, code, entry);
  };
  // Together: all but a kernel whose symbol an earlier one took (a 64-bit key prefix collision).
  std::vector<ObjectToLink> together;
  std::vector<size_t> indices, alone; // indices[j]: the pending entry of together[j]
  std::unordered_set<std::string> symbols;
  for (size_t i = 0; i < pending.size(); ++i) {
    if (symbols.insert(pending[i].symbol).second) {
      together.push_back({pending[i].object, pending[i].symbol});
      indices.push_back(i);
    } else {
      alone.push_back(i);
    }
  }
  std::shared_ptr<CodePages> code;
  std::vector<KernelEntry> entries;
  if (link(together, code, entries).empty()) {
    for (size_t j = 0; j < indices.size(); ++j)
      assign(pending[indices[j]], code, entries[j]);
    ++gBatchLinks;
    gBatchedObjects += together.size();
  } else {
    // Not expected; each object on its own then, where one that fails shows itself.
    alone.insert(alone.end(), indices.begin(), indices.end());
  }
  for (size_t i : alone) {
    LinkBatch::Pending &p = pending[i];
    std::string error = link({{p.object, p.symbol}}, code, entries);
    if (!error.empty() && !p.fromCache)
      linkFail("JIT: linking kernel " + p.kernel->kernel_.name, error);
    if (!error.empty()) {
      // A cached object that validates but does not link: compile it and overwrite the entry.
      std::string object = buildObject(p.kernel->kernel_, p.symbol, p.kernel->options_, *p.kernel);
      compileCacheStore(p.key, object);
      p.kernel->fromCache_ = false;
      error = link({{object, p.symbol}}, code, entries);
      if (!error.empty()) linkFail("JIT: linking kernel " + p.kernel->kernel_.name, error);
      --hits;
    }
    assign(p, code, entries[0]);
  }
  // The link's wall time, shared out between cache hits and fresh compiles by count.
  double ms = msSince(t0);
  gCacheLinks += hits;
  if (!pending.empty()) {
    addMs(gCacheLinkNs, ms * double(hits) / double(pending.size()));
    addMs(gLlvmNs, ms * double(pending.size() - hits) / double(pending.size()));
  }
}

/// XJIT_LINK_BATCH=0 links each kernel on its own, as before batches (A/B measurements).
static bool linkBatchesEnabled() {
  static const bool enabled = [] {
    const char *v = std::getenv("XJIT_LINK_BATCH");
    return !(v && std::strcmp(v, "0") == 0);
  }();
  return enabled;
}

LinkBatch::LinkBatch() : outer_(tCurrentBatch) {
  // A disabled batch acts as joined to nothing: compiles link at once, finish() has no work.
  joined_ = outer_ != nullptr || !linkBatchesEnabled();
  if (!joined_) tCurrentBatch = this;
}

LinkBatch::~LinkBatch() {
  if (!joined_ && tCurrentBatch == this) tCurrentBatch = nullptr;
  // Not finished (an exception): the kernels stay unlinked, and run() refuses them.
}

void LinkBatch::finish() {
  if (joined_) return; // the outer batch links them
  if (tCurrentBatch == this) tCurrentBatch = nullptr;
  std::vector<Pending> pending = std::move(pending_);
  pending_.clear();
  if (!pending.empty()) Jit::instance().impl_->linkBatch(pending);
}

LinkBatch *LinkBatch::current() { return tCurrentBatch; }

uint64_t libraryKernelsShared() {
  const DnnlLibrary *l = loadedDnnlLibrary();
  return l ? l->kernelsShared->load() : 0;
}
uint64_t libraryPlansMade() {
  const DnnlLibrary *l = loadedDnnlLibrary();
  return l ? l->plansMade->load() : 0;
}
uint64_t libraryGenericPlansMade() {
  const DnnlLibrary *l = loadedDnnlLibrary();
  return l ? l->genericPlansMade->load() : 0;
}
uint64_t libraryGemmPlansMade() {
  const DnnlLibrary *l = loadedDnnlLibrary();
  return l ? l->gemmPlansMade->load() : 0;
}
WeightPackCounters weightPackCounters() {
  const DnnlLibrary *l = loadedDnnlLibrary();
  return l ? l->weightPacks() : WeightPackCounters{};
}

JitTotals jitTotals() {
  return {gLlvmCompilations.load(),      gCacheLinks.load(),
          double(gLlvmNs.load()) * 1e-6, double(gCacheLinkNs.load()) * 1e-6,
          gGeneralVersions.load(),       gBatchLinks.load(),
          gBatchedObjects.load()};
}

std::vector<std::pair<std::string, double>> backendCounters() {
  JitTotals j = jitTotals();
  CompileCacheStats c = compileCacheStats();
  WeightPackCounters w = weightPackCounters();
  MemoryReleaseTotals m = memoryReleaseTotals();
  return {{"llvm_compilations", double(j.llvmCompilations)},
          {"llvm_ms", j.llvmMs},
          {"cache_links", double(j.cacheLinks)},
          {"cache_link_ms", j.cacheLinkMs},
          {"general_versions", double(j.generalVersions)},
          {"batch_links", double(j.batchLinks)},
          {"batched_objects", double(j.batchedObjects)},
          {"kernels_shared", double(gKernelsShared.load())},
          {"kernel_executables_shared", double(gExecutablesShared.load())},
          {"target_machines", double(gTargetMachines.load())},
          {"llvm_engine_loads", double(gEngineLoads.load())},
          {"llvm_engine_unloads", double(gEngineUnloads.load())},
          {"llvm_engine_load_ms", double(gEngineLoadNs.load()) * 1e-6},
          {"library_kernels_shared", double(libraryKernelsShared())},
          {"library_plans", double(libraryPlansMade())},
          {"library_generic_plans", double(libraryGenericPlansMade())},
          {"library_gemm_plans", double(libraryGemmPlansMade())},
          {"gemm_warm_ups", double(gemmWarmUpsStarted())},
          {"gemm_warm_ups_at_plans", double(gemmWarmUpsAtPlans())},
          {"gemm_kernels_pending", double(gemmKernelsPending())},
          {"llvm_engine_preloads", double(llvmEnginePreloadsStarted())},
          {"host_buffers_ahead", double(hostBuffersMadeAhead())},
          {"host_buffers_ahead_used", double(hostBuffersAheadUsed())},
          {"host_buffer_fresh_mb", double(hostBufferCounters().freshBytes) / (1 << 20)},
          {"host_buffer_reused_mb", double(hostBufferCounters().reusedBytes) / (1 << 20)},
          {"host_buffer_remaps", double(hostBufferCounters().remaps)},
          {"host_buffer_mappings", double(hostBufferCounters().mappings)},
          {"host_buffer_lends", double(hostBufferCounters().lends)},
          {"cache_hits", double(c.hits)},
          {"cache_misses", double(c.misses)},
          {"cache_writes", double(c.writes)},
          {"cache_invalid", double(c.invalid)},
          {"cache_evictions", double(c.evictions)},
          {"weight_packs", double(w.packs)},
          {"weight_pack_hits", double(w.packHits)},
          {"weight_reorders", double(w.perCallReorders)},
          {"weights_in_place", double(w.inPlace)},
          {"memory_releases", double(m.releases)},
          {"memory_released_mb", m.rssDropMb},
          {"memory_release_ms", m.ms}};
}

CompiledKernel::~CompiledKernel() = default;

void CompiledKernel::run(std::span<const Tensor> buffers, std::span<const RtValue> scalars) const {
  const Kernel &k = kernel_;
  // The caller bound every buffer and scalar, so a failure here is xjit's own, except a division
  // by zero or an assert on the values (below).
  auto fail = [&](const std::string &m) {
    throw InternalKernelError("kernel " + k.name + ": " + m);
  };
  if (!entry_) fail("is not linked (compiled in a LinkBatch that did not finish)");
  if (buffers.size() != k.buffers.size())
    fail("expected " + std::to_string(k.buffers.size()) + " buffers, got " +
         std::to_string(buffers.size()));
  if (scalars.size() != k.scalars.size())
    fail("expected " + std::to_string(k.scalars.size()) + " scalars, got " +
         std::to_string(scalars.size()));
  std::vector<void *> data(buffers.size());
  std::vector<int64_t> sizes, strides;
  SymbolBindings bindings;
  for (size_t b = 0; b < buffers.size(); ++b) {
    const Tensor &t = buffers[b];
    const BufferParam &p = k.buffers[b];
    if (!t.defined()) fail("buffer " + p.name + " is undefined");
    if (t.dtype() != p.dtype || t.rank() != p.rank())
      fail("buffer " + p.name + " must be " + std::string(dtypeName(p.dtype)) + shapeStr(p.sizes) +
           ", got a " + std::string(dtypeName(t.dtype())) + " tensor of rank " +
           std::to_string(t.rank()));
    std::string why = bindShape(bindings, p.sizes, t.sizes());
    if (!why.empty()) fail("buffer " + p.name + ": " + why);
    data[b] = t.data();
    sizes.insert(sizes.end(), t.sizes().begin(), t.sizes().end());
    strides.insert(strides.end(), t.strides().begin(), t.strides().end());
  }
  for (size_t b = 0; b < buffers.size(); ++b) {
    std::string why = checkShape(bindings, k.buffers[b].sizes, buffers[b].sizes());
    if (!why.empty()) fail("buffer " + k.buffers[b].name + ": " + why);
  }
  std::vector<uint64_t> slots(scalars.size());
  for (size_t i = 0; i < scalars.size(); ++i) {
    const RtValue &v = scalars[i];
    if (!v.isInt() && !v.isFloat() && !v.isBool())
      fail("scalar " + k.scalars[i].name + " must be a number, got " + v.kindName());
    if (isFloating(k.scalars[i].dtype)) {
      double d = v.toDouble();
      std::memcpy(&slots[i], &d, sizeof d);
    } else {
      slots[i] = static_cast<uint64_t>(v.toInt());
    }
  }
  int32_t rc = entry_(data.data(), sizes.data(), strides.data(), slots.data());
  if (rc == kRunGeneral) {
    // The stride check runs before any store: nothing is written yet.
    if (!k.general) fail("returned kRunGeneral but has no general version");
    std::call_once(generalOnce_, [&] {
      NoBatch linkNow; // a batch open on this thread must not hold back a kernel run now
      general_ = Jit::instance().compile(*k.general, options_);
      ++gGeneralVersions;
      noteCompile(); // a compile in the steady state: the run after it unloads LLVM again
    });
    general_->run(buffers, scalars);
    return;
  }
  if (rc == kErrorDivByZero) throw KernelError("kernel " + k.name + ": ZeroDivisionError");
  if (rc > 0 && size_t(rc) <= k.errors.size()) throw KernelError(k.errors[size_t(rc) - 1]);
  if (rc != 0) fail("failed with code " + std::to_string(rc));
}

bool CompiledKernel::generalCompiled() const { return general_ != nullptr; }

void dumpKernel(const CompiledKernel &k, const std::string &dir) {
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string &ext, const std::string &text) {
    std::ofstream f(std::filesystem::path(dir) / (k.kernel().name + ext));
    f << text;
    if (!f) throw Error(ErrorKind::User, "cannot write " + dir + "/" + k.kernel().name + ext);
  };
  write(".loops", k.loopIR().empty() ? printKernel(k.kernel()) : k.loopIR());
  write(".ll", k.llvmIR());
  write(".s", k.assembly());
}

} // namespace xjit::backend
