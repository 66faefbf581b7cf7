// The LLVM engine: kernel IR -> LLVM IR -> optimized IR -> object file, and linking objects in
// this process with ORC's JITLink (llvm_engine.h). libxjit_llvm.so in the Python build.
//
// Target: the host CPU by name and feature list (sys::getHostCPUName / getHostCPUFeatures), so
// the vectorizer's cost model and the code use AVX2 / AVX-512 where the machine has them. The
// optimizer runs here, on the module, with a TargetMachine for the same host; LLJIT only links.
// Each kernel gets its own LLVMContext (compiles may run in parallel).
//
// Linked code outlives the engine: a memory manager of ours places each link's code in mmap'd
// pages that it hands over to the kernels (CodePages), and each link's JITDylib is removed as
// soon as its symbols are resolved, so the LLJIT holds nothing between links and can be
// destroyed (stop) and the library unloaded while kernels run.
#include "llvm_engine.h"
#include "llvm_codegen.h"
#include "xjit/ir/diagnostics.h"

#include <llvm/ExecutionEngine/JITLink/EHFrameSupport.h>
#include <llvm/ExecutionEngine/JITLink/JITLinkMemoryManager.h>
#include <llvm/ExecutionEngine/Orc/Core.h>
#include <llvm/ExecutionEngine/Orc/ExecutorProcessControl.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/ObjectLinkingLayer.h>
#include <llvm/ExecutionEngine/Orc/Shared/AllocationActions.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/CommandLine.h>
#include <llvm/Support/ManagedStatic.h>
#include <llvm/Support/Memory.h>
#include <llvm/Support/Process.h>
#include <llvm/Support/StringSaver.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/TargetParser/Host.h>
#include <llvm/TargetParser/SubtargetFeature.h>
#include <llvm/Transforms/Utils/Cloning.h>

#include <atomic>
#include <sys/mman.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <unordered_map>

extern "C" void __register_frame(void *); // libgcc's unwinder

namespace xjit::backend {
namespace {

[[noreturn]] void llvmFail(const std::string &what, llvm::Error err) {
  throw Error(ErrorKind::Internal, what + ": " + llvm::toString(std::move(err)));
}

template <class T> T check(llvm::Expected<T> v, const std::string &what) {
  if (!v) llvmFail(what, v.takeError());
  return std::move(*v);
}

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

/// Where each link's code goes: the CodePages of the link that owns a JITDylib.
class CodeSinks {
public:
  void open(const llvm::orc::JITDylib *jd, CodePages *code) {
    std::lock_guard<std::mutex> lock(mutex_);
    sinks_[jd] = code;
  }
  void close(const llvm::orc::JITDylib *jd) {
    std::lock_guard<std::mutex> lock(mutex_);
    sinks_.erase(jd);
  }
  /// Calls f(CodePages &) under the lock for jd's link (nothing if none).
  template <class F> void with(const llvm::jitlink::JITLinkDylib *jd, F f) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = sinks_.find(jd);
    if (it != sinks_.end()) f(*it->second);
  }

private:
  std::mutex mutex_;
  std::unordered_map<const llvm::jitlink::JITLinkDylib *, CodePages *> sinks_;
};

/// JITLink's memory, like LLVM's InProcessMemoryManager except that a finalized allocation's
/// pages belong to the link's CodePages: deallocate() lets go of them without unmapping.
class HandOverMemoryManager : public llvm::jitlink::JITLinkMemoryManager {
public:
  explicit HandOverMemoryManager(CodeSinks &sinks)
      : sinks_(sinks), pageSize_(llvm::sys::Process::getPageSizeEstimate()) {}

  void allocate(const llvm::jitlink::JITLinkDylib *jd, llvm::jitlink::LinkGraph &g,
                OnAllocatedFunction onAllocated) override {
    llvm::jitlink::BasicLayout layout(g);
    auto sizes = layout.getContiguousPageBasedLayoutSizes(pageSize_);
    if (!sizes) return onAllocated(sizes.takeError());
    std::error_code ec;
    auto rw = llvm::sys::Memory::ProtectionFlags(llvm::sys::Memory::MF_READ |
                                                 llvm::sys::Memory::MF_WRITE);
    llvm::sys::MemoryBlock slab =
        llvm::sys::Memory::allocateMappedMemory(sizes->total(), nullptr, rw, ec);
    if (ec) return onAllocated(llvm::errorCodeToError(ec));
    std::memset(slab.base(), 0, slab.allocatedSize());
    char *standard = static_cast<char *>(slab.base());
    char *finalize = standard + sizes->StandardSegs;
    for (auto &[group, seg] : layout.segments()) {
      char *&next =
          group.getMemLifetime() == llvm::orc::MemLifetime::Standard ? standard : finalize;
      seg.WorkingMem = next;
      seg.Addr = llvm::orc::ExecutorAddr::fromPtr(next);
      next += llvm::alignTo(seg.ContentSize + seg.ZeroFillSize, pageSize_);
    }
    if (llvm::Error err = layout.apply()) {
      llvm::sys::Memory::releaseMappedMemory(slab);
      return onAllocated(std::move(err));
    }
    onAllocated(std::make_unique<InFlight>(*this, jd, g, std::move(layout), slab,
                                           size_t(sizes->StandardSegs)));
  }

  void deallocate(std::vector<FinalizedAlloc> allocs, OnDeallocatedFunction done) override {
    for (FinalizedAlloc &a : allocs)
      a.release(); // the pages are the kernels' (CodePages)
    done(llvm::Error::success());
  }

private:
  class InFlight : public InFlightAlloc {
  public:
    InFlight(HandOverMemoryManager &mm, const llvm::jitlink::JITLinkDylib *jd,
             llvm::jitlink::LinkGraph &g, llvm::jitlink::BasicLayout layout,
             llvm::sys::MemoryBlock slab, size_t standardBytes)
        : mm_(mm), jd_(jd), g_(g), layout_(std::move(layout)), slab_(slab),
          standardBytes_(standardBytes) {}

    void finalize(OnFinalizedFunction onFinalized) override {
      for (auto &[group, seg] : layout_.segments()) {
        auto prot = llvm::orc::toSysMemoryProtectionFlags(group.getMemProt());
        llvm::sys::MemoryBlock block(
            seg.WorkingMem, llvm::alignTo(seg.ContentSize + seg.ZeroFillSize, mm_.pageSize_));
        if (std::error_code ec = llvm::sys::Memory::protectMappedMemory(block, prot))
          return onFinalized(llvm::errorCodeToError(ec));
        if (prot & llvm::sys::Memory::MF_EXEC)
          llvm::sys::Memory::InvalidateInstructionCache(block.base(), block.allocatedSize());
      }
      // Finalize actions would need deallocation actions that run code of this library, which
      // may be unloaded by then: nothing here adds any (eh-frames: EHFrameSink below).
      if (!g_.allocActions().empty())
        return onFinalized(llvm::make_error<llvm::StringError>(
            "xjit's JIT memory manager takes no allocation actions",
            llvm::inconvertibleErrorCode()));
      char *base = static_cast<char *>(slab_.base());
      if (slab_.allocatedSize() > standardBytes_) // the finalize segments
        munmap(base + standardBytes_, slab_.allocatedSize() - standardBytes_);
      bool owned = false;
      mm_.sinks_.with(jd_, [&](CodePages &code) {
        code.regions.emplace_back(base, standardBytes_);
        owned = true;
      });
      if (!owned) {
        munmap(base, standardBytes_);
        return onFinalized(llvm::make_error<llvm::StringError>("JIT code linked outside of a link",
                                                               llvm::inconvertibleErrorCode()));
      }
      onFinalized(FinalizedAlloc(llvm::orc::ExecutorAddr::fromPtr(base)));
    }

    void abandon(OnAbandonedFunction onAbandoned) override {
      onAbandoned(llvm::errorCodeToError(llvm::sys::Memory::releaseMappedMemory(slab_)));
    }

  private:
    HandOverMemoryManager &mm_;
    const llvm::jitlink::JITLinkDylib *jd_;
    llvm::jitlink::LinkGraph &g_;
    llvm::jitlink::BasicLayout layout_;
    llvm::sys::MemoryBlock slab_;
    size_t standardBytes_;
  };

  CodeSinks &sinks_;
  uint64_t pageSize_;
};

/// Registers each link's eh-frame section with the unwinder (as LLJIT's default plugin does,
/// but deregistered by CodePages, which outlives this library).
class EHFrameSink : public llvm::orc::ObjectLinkingLayer::Plugin {
public:
  explicit EHFrameSink(CodeSinks &sinks) : sinks_(sinks) {}
  void modifyPassConfig(llvm::orc::MaterializationResponsibility &mr, llvm::jitlink::LinkGraph &g,
                        llvm::jitlink::PassConfiguration &config) override {
    const llvm::orc::JITDylib *jd = &mr.getTargetJITDylib();
    config.PostFixupPasses.push_back(llvm::jitlink::createEHFrameRecorderPass(
        g.getTargetTriple(), [this, jd](llvm::orc::ExecutorAddr addr, size_t size) {
          if (!addr || !size) return;
          sinks_.with(jd, [&](CodePages &code) {
            __register_frame(addr.toPtr<void *>());
            code.frames.push_back(addr.toPtr<void *>());
          });
        }));
  }
  llvm::Error notifyFailed(llvm::orc::MaterializationResponsibility &) override {
    return llvm::Error::success();
  }
  llvm::Error notifyRemovingResources(llvm::orc::JITDylib &, llvm::orc::ResourceKey) override {
    return llvm::Error::success();
  }
  void notifyTransferringResources(llvm::orc::JITDylib &, llvm::orc::ResourceKey,
                                   llvm::orc::ResourceKey) override {}

private:
  CodeSinks &sinks_;
};

/// What a loaded engine keeps between uses (created by start, destroyed by stop).
struct State {
  CodeSinks sinks;
  std::unique_ptr<llvm::orc::LLJIT> jit;
  std::optional<llvm::orc::JITTargetMachineBuilder> jtmb;
  std::atomic<uint64_t> counter{0};
  std::string vectorWidth; // every kernel function's "prefer-vector-width" (empty: LLVM's own)
  /// Target machines not in use: not thread-safe but reusable. With its subtarget (instruction,
  /// register and lowering tables) a machine is most of the heap LLVM keeps between compiles.
  std::mutex machinesMutex;
  std::vector<std::unique_ptr<llvm::TargetMachine>> machines;
  std::atomic<uint64_t> *machinesMade = nullptr;

  std::unique_ptr<llvm::TargetMachine> takeMachine() {
    {
      std::lock_guard<std::mutex> lock(machinesMutex);
      if (!machines.empty()) {
        auto tm = std::move(machines.back());
        machines.pop_back();
        return tm;
      }
    }
    ++*machinesMade;
    return check(jtmb->createTargetMachine(), "JIT: creating a target machine");
  }
  void giveBack(std::unique_ptr<llvm::TargetMachine> tm) {
    std::lock_guard<std::mutex> lock(machinesMutex);
    machines.push_back(std::move(tm));
  }
};
State *gState = nullptr;     // between start and stop
bool gOptionsParsed = false; // LLVM's options are process-wide (per load of this library)

void parseOptions(const std::string &llvmArgs) {
  if (gOptionsParsed) return;
  gOptionsParsed = true;
  // FastISel selects instructions for what it handles (the scalar parts: loop control, address
  // arithmetic, the general strided nest) and hands the rest (vector code) to SelectionDAG:
  // about 10% less compile time per kernel, with the same vector loops (docs/perf.md). Only a
  // command-line option selects it at -O3 (TargetPassConfig::addCoreISelPasses).
  // XJIT_LLVM_ARGS: LLVM's own command-line options, for experiments ("-debug-pass=...");
  // "-fast-isel=false" turns FastISel off.
  llvm::SmallVector<const char *, 8> argv{"xjit"};
  llvm::BumpPtrAllocator alloc;
  llvm::StringSaver saver(alloc);
  if (!llvmArgs.empty()) llvm::cl::TokenizeGNUCommandLine(llvmArgs, saver, argv);
  if (llvmArgs.find("fast-isel") == std::string::npos) argv.push_back("-fast-isel");
  llvm::cl::ParseCommandLineOptions(int(argv.size()), argv.data(), "", &llvm::errs());
}

/// 512-bit vectors where the host has AVX-512 (F, BW, DQ, VL: what PyTorch's AVX512 kernels
/// ask for), against LLVM's 256 for these CPUs (its prefer-256-bit tuning, kept for older
/// parts' clock drop under 512-bit work): exp-heavy kernels ran 0.66x eager's at 256 bits and
/// 0.96x at 512, softmax 0.84x -> 1.1x (docs/perf.md "Session 31"). XJIT_VECTOR_WIDTH=256 or
/// 512 overrides it (A/B runs).
std::string preferredVectorWidth(const std::string &features) {
  if (const char *w = std::getenv("XJIT_VECTOR_WIDTH"); w && *w) return w;
  for (const char *f : {"+avx512f", "+avx512bw", "+avx512dq", "+avx512vl"})
    if (features.find(std::string(f) + ",") == std::string::npos && !features.ends_with(f))
      return "";
  return "512";
}

void start(const std::string &llvmArgs, std::string &cpu, std::string &features,
           std::atomic<uint64_t> &machinesMade) {
  if (gState) return;
  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
  parseOptions(llvmArgs);
  auto state = std::make_unique<State>();
  auto jtmb = check(llvm::orc::JITTargetMachineBuilder::detectHost(), "JIT: detecting the host");
  cpu = llvm::sys::getHostCPUName().str();
  llvm::SubtargetFeatures subtargetFeatures;
  for (const auto &f : llvm::sys::getHostCPUFeatures())
    subtargetFeatures.AddFeature(f.first(), f.second);
  features = subtargetFeatures.getString();
  state->vectorWidth = preferredVectorWidth(features);
  // The width changes the code: part of what a cache entry was built for (compileCacheKey).
  if (!state->vectorWidth.empty()) features += ";prefer-vector-width=" + state->vectorWidth;
  jtmb.setCPU(cpu);
  jtmb.getFeatures() = subtargetFeatures;
  jtmb.setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
  state->jtmb = jtmb;
  state->machinesMade = &machinesMade;
  // Objects are made by buildObject (a target machine per compiling thread, and the object is
  // what the compile cache stores); LLJIT only links, in the calling thread (ORC's default
  // dispatcher hands work to a pool thread), into our memory.
  auto epc = check(llvm::orc::SelfExecutorProcessControl::Create(
                       nullptr, std::make_unique<llvm::orc::InPlaceTaskDispatcher>(),
                       std::make_unique<HandOverMemoryManager>(state->sinks)),
                   "JIT: creating the process control");
  CodeSinks &sinks = state->sinks;
  state->jit = check(llvm::orc::LLJITBuilder()
                         .setExecutorProcessControl(std::move(epc))
                         .setJITTargetMachineBuilder(std::move(jtmb))
                         .setObjectLinkingLayerCreator(
                             [&sinks](llvm::orc::ExecutionSession &es, const llvm::Triple &)
                                 -> llvm::Expected<std::unique_ptr<llvm::orc::ObjectLayer>> {
                               auto layer = std::make_unique<llvm::orc::ObjectLinkingLayer>(es);
                               layer->addPlugin(std::make_unique<EHFrameSink>(sinks));
                               return std::unique_ptr<llvm::orc::ObjectLayer>(std::move(layer));
                             })
                         .create(),
                     "JIT: creating LLJIT");
  // libm and libc resolve from the process (LLJIT links process symbols by default); our own
  // helpers (in libxjit_native, so that kernels outlive this library) are defined by address.
  llvm::orc::LLJIT &jit = *state->jit;
  llvm::orc::MangleAndInterner mangle(jit.getExecutionSession(), jit.getDataLayout());
  llvm::orc::SymbolMap helpers;
  auto flags = llvm::JITSymbolFlags::Exported | llvm::JITSymbolFlags::Callable;
  helpers[mangle(kIntPowSymbol)] = {llvm::orc::ExecutorAddr::fromPtr(&xjit_rt_ipow_i64), flags};
  helpers[mangle(kParallelForSymbol)] = {llvm::orc::ExecutorAddr::fromPtr(&xjit_rt_parallel_for),
                                         flags};
  if (llvm::Error err = jit.getMainJITDylib().define(llvm::orc::absoluteSymbols(helpers)))
    llvmFail("JIT: defining runtime helpers", std::move(err));
  gState = state.release();
}

void stop(bool unloading) {
  delete gState;
  gState = nullptr;
  // LLVM's lazily made globals (the option registry, pass and statistic registries...) live on
  // the heap: without this, each load and unload would leave them behind (~140 KB each time).
  // After it LLVM is unusable until the library is loaded again.
  if (unloading) llvm::llvm_shutdown();
}

std::string buildObject(const Kernel &k, const std::string &symbol, Pipeline pipeline,
                        bool keepText, CompileTimes &times, std::string &llvmIR,
                        std::string &assembly) {
  auto t0 = Clock::now();
  auto ctx = std::make_unique<llvm::LLVMContext>();
  std::unique_ptr<llvm::Module> mod = emitKernelModule(k, symbol, *ctx);
  if (!gState->vectorWidth.empty())
    for (llvm::Function &f : *mod)
      if (!f.isDeclaration()) f.addFnAttr("prefer-vector-width", gState->vectorWidth);
  times.emit = msSince(t0);

  auto t1 = Clock::now();
  std::unique_ptr<llvm::TargetMachine> tm = gState->takeMachine();
  struct GiveBack {
    std::unique_ptr<llvm::TargetMachine> &tm;
    ~GiveBack() { gState->giveBack(std::move(tm)); }
  } giveBack{tm};
  mod->setDataLayout(tm->createDataLayout());
  mod->setTargetTriple(tm->getTargetTriple().str());
  optimize(*mod, *tm, pipeline);
  // After vectorization: only the variants the vectorized loops call get a body.
  math::defineMathFunctions(*mod);
  times.optimize = msSince(t1);
  if (keepText) {
    llvm::raw_string_ostream os(llvmIR);
    mod->print(os, nullptr);
    auto text = emitCode(*llvm::CloneModule(*mod), *tm, llvm::CodeGenFileType::AssemblyFile);
    assembly.assign(text.begin(), text.end());
  }
  auto t2 = Clock::now();
  llvm::SmallVector<char, 0> object = emitCode(*mod, *tm, llvm::CodeGenFileType::ObjectFile);
  times.codegen = msSince(t2);
  return std::string(object.data(), object.size());
}

/// Links the objects into a new JITDylib with one lookup, then removes the JITDylib (the code
/// stays, in `code`'s pages).
llvm::Error linkObjects(std::span<const ObjectToLink> objects, CodePages &code,
                        std::vector<KernelEntry> &entries) {
  llvm::orc::LLJIT &jit = *gState->jit;
  llvm::orc::ExecutionSession &es = jit.getExecutionSession();
  auto jd = jit.createJITDylib("xjit_g" + std::to_string(gState->counter++));
  if (!jd) return jd.takeError();
  gState->sinks.open(&*jd, &code);
  struct Remove {
    llvm::orc::ExecutionSession &es;
    llvm::orc::JITDylib &jd;
    CodeSinks &sinks;
    ~Remove() {
      if (llvm::Error err = es.removeJITDylib(jd)) llvm::consumeError(std::move(err));
      sinks.close(&jd);
    }
  } remove{es, *jd, gState->sinks};
  jd->addToLinkOrder(jit.getMainJITDylib()); // the runtime helpers
  llvm::orc::MangleAndInterner mangle(es, jit.getDataLayout());
  llvm::orc::SymbolLookupSet names;
  std::vector<llvm::orc::SymbolStringPtr> interned;
  for (const ObjectToLink &o : objects) {
    llvm::StringRef object(o.object.data(), o.object.size());
    llvm::StringRef symbol(o.symbol.data(), o.symbol.size());
    if (llvm::Error err =
            jit.addObjectFile(*jd, llvm::MemoryBuffer::getMemBufferCopy(object, symbol)))
      return err;
    interned.push_back(mangle(symbol));
    names.add(interned.back());
  }
  auto found = es.lookup(llvm::orc::makeJITDylibSearchOrder(&*jd), std::move(names));
  if (!found) return found.takeError();
  entries.clear();
  for (const llvm::orc::SymbolStringPtr &name : interned) {
    auto it = found->find(name);
    if (it == found->end())
      return llvm::make_error<llvm::StringError>("symbol not found after linking",
                                                 llvm::inconvertibleErrorCode());
    entries.push_back(it->second.getAddress().toPtr<KernelEntry>());
  }
  return llvm::Error::success();
}

std::string link(std::span<const ObjectToLink> objects, CodePages &code,
                 std::vector<KernelEntry> &entries) {
  if (llvm::Error err = linkObjects(objects, code, entries)) {
    std::string message = llvm::toString(std::move(err));
    return message.empty() ? "link failed" : message;
  }
  return "";
}

constexpr LlvmEngine kEngine{start, buildObject, link, stop};

} // namespace
} // namespace xjit::backend

extern "C" const xjit::backend::LlvmEngine *xjit_llvm_engine() { return &xjit::backend::kEngine; }
