// The ORC LLJIT wrapper: kernel IR -> LLVM IR -> optimized IR -> machine code in this process.
//
// Target: the host CPU by name and feature list (sys::getHostCPUName / getHostCPUFeatures), so
// the vectorizer's cost model and the code use AVX2 / AVX-512 where the machine has them. The
// optimizer runs here, on the module, with a TargetMachine for the same host; LLJIT then only
// generates code. Each kernel gets its own LLVMContext (compiles may run in parallel) and its
// own JITDylib (dropping the last CompiledKernel removes it and frees its code; one symbol
// namespace per kernel lets the same cached object be linked twice), except inside a LinkBatch
// (a compiled graph's kernels): those are linked together into one JITDylib with one lookup when
// the batch finishes, and share its lifetime. Their symbols carry a prefix of the cache key, so
// that different kernels of one name ("fusion_elementwise") do not collide in that JITDylib.
//
// Compile cache: the object file is what the persistent cache stores (compile_cache.h), keyed by
// the printed loop IR, the CPU name and features, the compiler's identity and the pipeline. On a
// hit, LLVM IR is never built: the object is linked directly.
#include "xjit/backend/jit.h"

#include "llvm_codegen.h"
#include "runtime_util.h"
#include "xjit/backend/compile_cache.h"
#include "xjit/backend/content_tags.h"
#include "xjit/backend/release_memory.h"
#include "xjit/ir/diagnostics.h"
#include "xjit/ir/op_registry.h"

#include <llvm/ExecutionEngine/Orc/Core.h>
#include <llvm/ExecutionEngine/Orc/ExecutorProcessControl.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/ThreadSafeModule.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/CommandLine.h>
#include <llvm/Support/StringSaver.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/TargetParser/Host.h>
#include <llvm/TargetParser/SubtargetFeature.h>
#include <llvm/Transforms/Utils/Cloning.h>

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

namespace xjit::backend {
namespace {

using Clock = std::chrono::steady_clock;
double msSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

double threadCpuMs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) * 1e-6;
}

[[noreturn]] void llvmFail(const std::string &what, llvm::Error err) {
  throw Error(ErrorKind::Internal, what + ": " + llvm::toString(std::move(err)));
}

template <class T> T check(llvm::Expected<T> v, const std::string &what) {
  if (!v) llvmFail(what, v.takeError());
  return std::move(*v);
}

/// Pipeline::Kernel. The inputs are clean loops from the kernel IR; what they need is SSA form
/// for accumulators, loop-invariant hoisting (stride and parameter loads, broadcast operands),
/// rotation into do-while form, and vectorization.
constexpr const char *kKernelPipeline =
    "always-inline,function(sroa,early-cse,instcombine<no-verify-fixpoint>,simplifycfg,"
    "loop-mssa(licm,loop-rotate),loop(indvars),loop-vectorize,instcombine<no-verify-fixpoint>,"
    "simplifycfg,loop-mssa(licm),early-cse)";

void optimize(llvm::Module &m, llvm::TargetMachine &tm, Pipeline pipeline) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PipelineTuningOptions pto;
  pto.LoopVectorization = true;
  pto.SLPVectorization = true;
  llvm::PassBuilder pb(&tm, pto);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  llvm::ModulePassManager mpm;
  // XJIT_LLVM_PIPELINE: a textual pass pipeline instead (experiments; see `opt -passes`).
  const char *override = std::getenv("XJIT_LLVM_PIPELINE");
  if (pipeline == Pipeline::LLVMDefault && !override) {
    mpm = pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3);
  } else {
    const char *text = override                       ? override
                       : pipeline == Pipeline::Kernel ? kKernelPipeline
                                                      : "always-inline";
    if (llvm::Error err = pb.parsePassPipeline(mpm, text))
      llvmFail("JIT: pass pipeline", std::move(err));
  }
  mpm.run(m, mam);
}

/// Machine code for the module as an object file or assembly text (the module is consumed).
llvm::SmallVector<char, 0> emitCode(llvm::Module &m, llvm::TargetMachine &tm,
                                    llvm::CodeGenFileType type) {
  llvm::SmallVector<char, 0> buf;
  llvm::raw_svector_ostream os(buf);
  llvm::legacy::PassManager pm;
  if (tm.addPassesToEmitFile(pm, os, nullptr, type))
    throw Error(ErrorKind::Internal, "JIT: the target cannot emit machine code");
  pm.run(m);
  return buf;
}

/// Frees a kernel's code when the last CompiledKernel referring to it goes away.
struct CodeHandle {
  llvm::orc::ExecutionSession *session = nullptr;
  llvm::orc::JITDylib *dylib = nullptr;
  ~CodeHandle() {
    if (!dylib) return;
    if (llvm::Error err = session->removeJITDylib(*dylib))
      llvm::consumeError(std::move(err)); // nothing sensible to do in a destructor
  }
};

std::atomic<uint64_t> gLlvmCompilations{0}, gCacheLinks{0}, gGeneralVersions{0};
std::atomic<uint64_t> gBatchLinks{0}, gBatchedObjects{0}; // LinkBatch::finish
std::atomic<uint64_t> gKernelsShared{0};  // compiles answered by a live identical kernel
std::atomic<uint64_t> gTargetMachines{0}; // made by compiling threads (dropped by releases)
std::atomic<uint64_t> gLlvmNs{0}, gCacheLinkNs{0}; // wall time, for jitTotals()

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

/// This thread's target machine: not thread-safe but reusable, so one per compiling thread.
/// With its subtarget (instruction, register and lowering tables) it is most of the heap LLVM
/// keeps between compiles, so releaseCompilerMemory drops it (Jit::dropThreadCaches).
thread_local std::unique_ptr<llvm::TargetMachine> tTargetMachine;

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
  std::unique_ptr<llvm::orc::LLJIT> jit;
  std::optional<llvm::orc::JITTargetMachineBuilder> jtmb;
  std::string cpu, features;
  std::string llvmArgs; // XJIT_LLVM_ARGS: changes code, so part of the cache key
  std::atomic<uint64_t> counter{0};
  /// Linked kernels by compile-cache key, while any CompiledKernel holds them: an identical
  /// kernel (an LSTM's cell at every step, a transformer's layers) shares that code instead of
  /// linking the cached object again (its own JITDylib, 4 pages of code and tables, ORC state).
  std::mutex liveMutex;
  std::unordered_map<std::string, std::pair<std::weak_ptr<void>, KernelEntry>> live;

  void remember(const std::string &key, const std::shared_ptr<void> &code, KernelEntry entry) {
    std::lock_guard<std::mutex> lock(liveMutex);
    live[key] = {code, entry};
  }

  /// Links an object file into a new JITDylib; returns the handle and the entry, or an error
  /// (the dylib is removed again).
  llvm::Expected<std::pair<std::shared_ptr<CodeHandle>, KernelEntry>>
  link(llvm::StringRef object, const std::string &symbol) {
    llvm::orc::ExecutionSession &es = jit->getExecutionSession();
    auto jd = jit->createJITDylib("xjit_k" + std::to_string(counter++));
    if (!jd) return jd.takeError();
    jd->addToLinkOrder(jit->getMainJITDylib()); // the runtime helpers
    auto handle = std::make_shared<CodeHandle>();
    handle->session = &es;
    handle->dylib = &*jd;
    if (llvm::Error err =
            jit->addObjectFile(*jd, llvm::MemoryBuffer::getMemBufferCopy(object, symbol)))
      return err;
    auto addr = jit->lookup(*jd, symbol);
    if (!addr) return addr.takeError();
    return std::make_pair(std::move(handle), addr->toPtr<KernelEntry>());
  }

  /// Links all of `objects` into one new JITDylib with one lookup; returns the handle and each
  /// object's entry, or an error (the dylib is removed again). Symbols must be distinct.
  llvm::Expected<std::pair<std::shared_ptr<CodeHandle>, std::vector<KernelEntry>>>
  linkTogether(const std::vector<const LinkBatch::Pending *> &objects) {
    llvm::orc::ExecutionSession &es = jit->getExecutionSession();
    auto jd = jit->createJITDylib("xjit_g" + std::to_string(counter++));
    if (!jd) return jd.takeError();
    jd->addToLinkOrder(jit->getMainJITDylib()); // the runtime helpers
    auto handle = std::make_shared<CodeHandle>();
    handle->session = &es;
    handle->dylib = &*jd;
    llvm::orc::MangleAndInterner mangle(es, jit->getDataLayout());
    llvm::orc::SymbolLookupSet names;
    std::vector<llvm::orc::SymbolStringPtr> interned;
    for (const LinkBatch::Pending *p : objects) {
      if (llvm::Error err =
              jit->addObjectFile(*jd, llvm::MemoryBuffer::getMemBufferCopy(p->object, p->symbol)))
        return err;
      interned.push_back(mangle(p->symbol));
      names.add(interned.back());
    }
    auto found = es.lookup(llvm::orc::makeJITDylibSearchOrder(&*jd), std::move(names));
    if (!found) return found.takeError();
    std::vector<KernelEntry> entries;
    for (const llvm::orc::SymbolStringPtr &name : interned) {
      auto it = found->find(name);
      if (it == found->end())
        return llvm::make_error<llvm::StringError>("symbol not found after linking",
                                                   llvm::inconvertibleErrorCode());
      entries.push_back(it->second.getAddress().toPtr<KernelEntry>());
    }
    return std::make_pair(std::move(handle), std::move(entries));
  }

  /// LLVM IR, optimization and machine code for k (symbol `symbol`); fills ck's times (and
  /// text with keepText) and returns the object file.
  llvm::SmallVector<char, 0> buildObject(const Kernel &k, const std::string &symbol,
                                         const CompileOptions &opts, CompiledKernel &ck);

  void linkBatch(std::vector<LinkBatch::Pending> &pending);
};

Jit::Jit() : impl_(std::make_unique<Impl>()) {
  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
  // FastISel selects instructions for what it handles (the scalar parts: loop control, address
  // arithmetic, the general strided nest) and hands the rest (vector code) to SelectionDAG:
  // about 10% less compile time per kernel, with the same vector loops (docs/perf.md). Only a
  // command-line option selects it at -O3 (TargetPassConfig::addCoreISelPasses).
  // XJIT_LLVM_ARGS: LLVM's own command-line options, for experiments ("-debug-pass=...");
  // "-fast-isel=false" turns FastISel off.
  llvm::SmallVector<const char *, 8> argv{"xjit"};
  llvm::BumpPtrAllocator alloc;
  llvm::StringSaver saver(alloc);
  const char *args = std::getenv("XJIT_LLVM_ARGS");
  if (args) {
    impl_->llvmArgs = args;
    llvm::cl::TokenizeGNUCommandLine(args, saver, argv);
  }
  // LLVM's options are process-wide: another Jit in this process may have set it already, and a
  // second occurrence would be an error.
  auto &registered = llvm::cl::getRegisteredOptions();
  auto fastIsel = registered.find("fast-isel");
  bool fastIselSet = fastIsel != registered.end() && fastIsel->second->getNumOccurrences() > 0;
  if (!fastIselSet && (!args || !std::strstr(args, "fast-isel"))) argv.push_back("-fast-isel");
  if (argv.size() > 1)
    llvm::cl::ParseCommandLineOptions(int(argv.size()), argv.data(), "", &llvm::errs());
  auto jtmb = check(llvm::orc::JITTargetMachineBuilder::detectHost(), "JIT: detecting the host");
  impl_->cpu = llvm::sys::getHostCPUName().str();
  llvm::SubtargetFeatures features;
  for (const auto &f : llvm::sys::getHostCPUFeatures())
    features.AddFeature(f.first(), f.second);
  impl_->features = features.getString();
  jtmb.setCPU(impl_->cpu);
  jtmb.getFeatures() = features;
  jtmb.setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
  impl_->jtmb = jtmb;
  // compile() produces object code itself (with a TargetMachine per thread, so that several
  // threads compile at once, and the object is what a compile cache stores); LLJIT only links.
  // Linking runs in the calling thread (ORC's default dispatcher hands work to a pool thread).
  auto epc = check(llvm::orc::SelfExecutorProcessControl::Create(
                       nullptr, std::make_unique<llvm::orc::InPlaceTaskDispatcher>()),
                   "JIT: creating the process control");
  impl_->jit = check(llvm::orc::LLJITBuilder()
                         .setExecutorProcessControl(std::move(epc))
                         .setJITTargetMachineBuilder(std::move(jtmb))
                         .create(),
                     "JIT: creating LLJIT");
  // libm and libc resolve from the process (LLJIT links process symbols by default); our own
  // helpers are not exported from executables, so they are defined by address.
  llvm::orc::MangleAndInterner mangle(impl_->jit->getExecutionSession(),
                                      impl_->jit->getDataLayout());
  llvm::orc::SymbolMap helpers;
  helpers[mangle(kIntPowSymbol)] = {llvm::orc::ExecutorAddr::fromPtr(&xjit_rt_ipow_i64),
                                    llvm::JITSymbolFlags::Exported |
                                        llvm::JITSymbolFlags::Callable};
  helpers[mangle(kParallelForSymbol)] = {llvm::orc::ExecutorAddr::fromPtr(&xjit_rt_parallel_for),
                                         llvm::JITSymbolFlags::Exported |
                                             llvm::JITSymbolFlags::Callable};
  if (llvm::Error err =
          impl_->jit->getMainJITDylib().define(llvm::orc::absoluteSymbols(std::move(helpers))))
    llvmFail("JIT: defining runtime helpers", std::move(err));
}

Jit::~Jit() = default;

void Jit::dropThreadCaches() { tTargetMachine.reset(); }

Jit &Jit::instance() {
  // Never destroyed: compiled kernels held by other static objects may outlive any exit order.
  static Jit *jit = new Jit();
  return *jit;
}

const std::string &Jit::cpuName() const { return impl_->cpu; }
const std::string &Jit::cpuFeatures() const { return impl_->features; }

llvm::SmallVector<char, 0> Jit::Impl::buildObject(const Kernel &k, const std::string &symbol,
                                                  const CompileOptions &opts, CompiledKernel &ck) {
  auto t0 = Clock::now();
  ++gLlvmCompilations;
  auto ctx = std::make_unique<llvm::LLVMContext>();
  std::unique_ptr<llvm::Module> mod = emitKernelModule(k, symbol, *ctx);
  ck.times_.emit = msSince(t0);

  auto t1 = Clock::now();
  std::unique_ptr<llvm::TargetMachine> &tm = tTargetMachine;
  if (!tm) {
    tm = check(jtmb->createTargetMachine(), "JIT: creating a target machine");
    ++gTargetMachines;
  }
  mod->setDataLayout(tm->createDataLayout());
  mod->setTargetTriple(tm->getTargetTriple().str());
  optimize(*mod, *tm, opts.pipeline);
  // After vectorization: only the variants the vectorized loops call get a body.
  math::defineMathFunctions(*mod);
  ck.times_.optimize = msSince(t1);
  if (opts.keepText) {
    ck.loopIR_ = printKernel(k);
    llvm::raw_string_ostream os(ck.llvmIR_);
    mod->print(os, nullptr);
    auto text = emitCode(*llvm::CloneModule(*mod), *tm, llvm::CodeGenFileType::AssemblyFile);
    ck.assembly_.assign(text.begin(), text.end());
  }
  auto t2 = Clock::now();
  llvm::SmallVector<char, 0> object = emitCode(*mod, *tm, llvm::CodeGenFileType::ObjectFile);
  ck.times_.codegen = msSince(t2);
  return object;
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
    key = compileCacheKey({printed ? *printed : printKernel(k), k.name, impl_->cpu, impl_->features,
                           compilerIdentity(), pipelineName(opts.pipeline),
                           pipelineOverride ? pipelineOverride : "", impl_->llvmArgs});
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
      auto linked = impl_->link(*object, symbol);
      if (linked) {
        ck->code_ = std::move(linked->first);
        ck->entry_ = linked->second;
        ck->fromCache_ = true;
        ck->times_.codegen = msSince(t0);
        ck->times_.cpu = threadCpuMs() - cpu0;
        ++gCacheLinks;
        addMs(gCacheLinkNs, ck->times_.codegen);
        impl_->remember(key, ck->code_, ck->entry_);
        return ck;
      }
      // A valid entry that does not link (should not happen): compile and overwrite it.
      llvm::consumeError(linked.takeError());
    }
  }

  llvm::SmallVector<char, 0> object = impl_->buildObject(k, symbol, opts, *ck);
  std::string_view objectView(object.data(), object.size());
  if (!key.empty() && persistent) compileCacheStore(key, objectView);
  if (batch && !key.empty()) {
    batch->pending_.push_back({ck, {}, std::string(objectView), symbol, key, false});
    ck->times_.cpu = threadCpuMs() - cpu0;
    addMs(gLlvmNs, msSince(t0));
    return ck;
  }
  auto t2 = Clock::now();
  auto linked = impl_->link(llvm::StringRef(object.data(), object.size()), symbol);
  if (!linked) llvmFail("JIT: linking kernel " + k.name, linked.takeError());
  ck->code_ = std::move(linked->first);
  ck->entry_ = linked->second;
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
  std::vector<const LinkBatch::Pending *> together;
  std::vector<size_t> indices, alone; // indices[j]: the pending entry of together[j]
  std::unordered_set<std::string> symbols;
  for (size_t i = 0; i < pending.size(); ++i) {
    if (symbols.insert(pending[i].symbol).second) {
      together.push_back(&pending[i]);
      indices.push_back(i);
    } else {
      alone.push_back(i);
    }
  }
  auto linked = linkTogether(together);
  if (linked) {
    for (size_t j = 0; j < indices.size(); ++j)
      assign(pending[indices[j]], linked->first, linked->second[j]);
    ++gBatchLinks;
    gBatchedObjects += together.size();
  } else {
    // Not expected; each object on its own then, where one that fails shows itself.
    llvm::consumeError(linked.takeError());
    alone.insert(alone.end(), indices.begin(), indices.end());
  }
  for (size_t i : alone) {
    LinkBatch::Pending &p = pending[i];
    auto one = link(p.object, p.symbol);
    if (!one && !p.fromCache)
      llvmFail("JIT: linking kernel " + p.kernel->kernel_.name, one.takeError());
    if (!one) {
      // A cached object that validates but does not link: compile it and overwrite the entry.
      llvm::consumeError(one.takeError());
      llvm::SmallVector<char, 0> object =
          buildObject(p.kernel->kernel_, p.symbol, p.kernel->options_, *p.kernel);
      compileCacheStore(p.key, std::string_view(object.data(), object.size()));
      p.kernel->fromCache_ = false;
      one = link(llvm::StringRef(object.data(), object.size()), p.symbol);
      if (!one) llvmFail("JIT: linking kernel " + p.kernel->kernel_.name, one.takeError());
      --hits;
    }
    assign(p, one->first, one->second);
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
          {"library_kernels_shared", double(libraryKernelsShared())},
          {"library_plans", double(libraryPlansMade())},
          {"library_generic_plans", double(libraryGenericPlansMade())},
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
  auto fail = [&](const std::string &m) { throw KernelError("kernel " + k.name + ": " + m); };
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
    });
    general_->run(buffers, scalars);
    return;
  }
  if (rc == kErrorDivByZero) fail("ZeroDivisionError");
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
