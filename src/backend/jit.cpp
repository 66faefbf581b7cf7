// The ORC LLJIT wrapper: kernel IR -> LLVM IR -> optimized IR -> machine code in this process.
//
// Target: the host CPU by name and feature list (sys::getHostCPUName / getHostCPUFeatures), so
// the vectorizer's cost model and the code use AVX2 / AVX-512 where the machine has them. The
// optimizer runs here, on the module, with a TargetMachine for the same host; LLJIT then only
// generates code. Each kernel gets its own LLVMContext (compiles may run in parallel) and its
// own ResourceTracker (dropping the last CompiledKernel frees its code).
#include "xjit/backend/jit.h"

#include "llvm_codegen.h"
#include "runtime_util.h"
#include "xjit/ir/diagnostics.h"
#include "xjit/ir/op_registry.h"

#include <llvm/ExecutionEngine/Orc/Core.h>
#include <llvm/ExecutionEngine/Orc/ExecutorProcessControl.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/ThreadSafeModule.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/TargetParser/Host.h>
#include <llvm/TargetParser/SubtargetFeature.h>
#include <llvm/Transforms/Utils/Cloning.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>

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

void optimize(llvm::Module &m, llvm::TargetMachine &tm, int level) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PipelineTuningOptions pto;
  pto.LoopVectorization = level >= 2;
  pto.SLPVectorization = level >= 2;
  llvm::PassBuilder pb(&tm, pto);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  static const llvm::OptimizationLevel levels[] = {
      llvm::OptimizationLevel::O0, llvm::OptimizationLevel::O1, llvm::OptimizationLevel::O2,
      llvm::OptimizationLevel::O3};
  llvm::OptimizationLevel ol = levels[std::clamp(level, 0, 3)];
  llvm::ModulePassManager mpm =
      level == 0 ? pb.buildO0DefaultPipeline(ol) : pb.buildPerModuleDefaultPipeline(ol);
  mpm.run(m, mam);
}

std::string assemblyOf(const llvm::Module &m, llvm::TargetMachine &tm) {
  std::unique_ptr<llvm::Module> clone = llvm::CloneModule(m);
  llvm::SmallString<0> buf;
  llvm::raw_svector_ostream os(buf);
  llvm::legacy::PassManager pm;
  if (tm.addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::AssemblyFile))
    return "; this target cannot print assembly\n";
  pm.run(*clone);
  return std::string(buf.str());
}

/// Frees a kernel's code when the last CompiledKernel referring to it goes away.
struct CodeHandle {
  llvm::orc::ResourceTrackerSP tracker;
  ~CodeHandle() {
    if (llvm::Error err = tracker->remove())
      llvm::consumeError(std::move(err)); // nothing sensible to do in a destructor
  }
};

} // namespace

struct Jit::Impl {
  std::unique_ptr<llvm::orc::LLJIT> jit;
  std::optional<llvm::orc::JITTargetMachineBuilder> jtmb;
  std::string cpu, features;
  std::atomic<uint64_t> counter{0};
};

Jit::Jit() : impl_(std::make_unique<Impl>()) {
  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
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
  // Code generation runs in the thread that calls compile() (ORC's default dispatcher would
  // hand it to a pool thread and block), with a TargetMachine per compile so that compile()
  // may run on several threads at once.
  auto epc = check(llvm::orc::SelfExecutorProcessControl::Create(
                       nullptr, std::make_unique<llvm::orc::InPlaceTaskDispatcher>()),
                   "JIT: creating the process control");
  impl_->jit = check(llvm::orc::LLJITBuilder()
                         .setExecutorProcessControl(std::move(epc))
                         .setJITTargetMachineBuilder(std::move(jtmb))
                         .setSupportConcurrentCompilation(true)
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
  if (llvm::Error err =
          impl_->jit->getMainJITDylib().define(llvm::orc::absoluteSymbols(std::move(helpers))))
    llvmFail("JIT: defining runtime helpers", std::move(err));
}

Jit::~Jit() = default;

Jit &Jit::instance() {
  // Never destroyed: compiled kernels held by other static objects may outlive any exit order.
  static Jit *jit = new Jit();
  return *jit;
}

const std::string &Jit::cpuName() const { return impl_->cpu; }
const std::string &Jit::cpuFeatures() const { return impl_->features; }

std::shared_ptr<const CompiledKernel> Jit::compile(const Kernel &k, const CompileOptions &opts) {
  std::shared_ptr<CompiledKernel> ck(new CompiledKernel());
  ck->kernel_ = k;
  auto t0 = Clock::now();
  double cpu0 = threadCpuMs();
  auto ctx = std::make_unique<llvm::LLVMContext>();
  std::string symbol = "xjit" + std::to_string(impl_->counter++) + "_" + k.name;
  std::unique_ptr<llvm::Module> mod = emitKernelModule(k, symbol, *ctx);
  ck->times_.emit = msSince(t0);

  auto t1 = Clock::now();
  std::unique_ptr<llvm::TargetMachine> tm =
      check(impl_->jtmb->createTargetMachine(), "JIT: creating a target machine");
  mod->setDataLayout(impl_->jit->getDataLayout());
  mod->setTargetTriple(impl_->jtmb->getTargetTriple().str());
  optimize(*mod, *tm, opts.optLevel);
  ck->times_.optimize = msSince(t1);
  if (opts.keepText) {
    ck->loopIR_ = printKernel(k);
    llvm::raw_string_ostream os(ck->llvmIR_);
    mod->print(os, nullptr);
    ck->assembly_ = assemblyOf(*mod, *tm);
  }

  auto t2 = Clock::now();
  llvm::orc::JITDylib &jd = impl_->jit->getMainJITDylib();
  auto handle = std::make_shared<CodeHandle>();
  handle->tracker = jd.createResourceTracker();
  if (llvm::Error err = impl_->jit->addIRModule(
          handle->tracker, llvm::orc::ThreadSafeModule(std::move(mod), std::move(ctx))))
    llvmFail("JIT: adding kernel " + k.name, std::move(err));
  auto addr = check(impl_->jit->lookup(symbol), "JIT: compiling kernel " + k.name);
  ck->entry_ = addr.toPtr<KernelEntry>();
  ck->code_ = std::move(handle);
  ck->times_.codegen = msSince(t2);
  ck->times_.cpu = threadCpuMs() - cpu0;
  return ck;
}

CompiledKernel::~CompiledKernel() = default;

void CompiledKernel::run(std::span<const Tensor> buffers, std::span<const RtValue> scalars) const {
  const Kernel &k = kernel_;
  auto fail = [&](const std::string &m) { throw KernelError("kernel " + k.name + ": " + m); };
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
  if (rc == kErrorDivByZero) fail("ZeroDivisionError");
  if (rc > 0 && size_t(rc) <= k.errors.size()) throw KernelError(k.errors[size_t(rc) - 1]);
  if (rc != 0) fail("failed with code " + std::to_string(rc));
}

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
