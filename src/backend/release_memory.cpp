// releaseCompilerMemory and the frontend's policy for it (include/xjit/backend/release_memory.h).
#include "xjit/backend/release_memory.h"

#include "xjit/backend/host_buffers.h"
#include "xjit/backend/jit.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <link.h>
#include <malloc.h>
#include <mutex>
#include <sys/mman.h>
#include <unistd.h>

namespace xjit::backend {
namespace {

/// Objects whose code the compiler runs besides the one holding this file: the LLVM engine when
/// releaseEngine could not unload it (a compile running on another thread), libLLVM when the
/// engine links it (XJIT_STATIC_LLVM=OFF), Debian's oneDNN and xjit's path to it, and the Python
/// extension modules (capture is most of `_frontend`'s code; a steady call runs only its guards and
/// driver).
constexpr const char *kCompilerLibraries[] = {"libLLVM",    "libxjit_llvm.so", "libxjit_dnnl.so",
                                              "libdnnl.so", "xjit/_frontend.", "xjit/_xjit."};

bool hasTextRelocations(const dl_phdr_info &info) {
  for (int i = 0; i < info.dlpi_phnum; ++i) {
    const ElfW(Phdr) &ph = info.dlpi_phdr[i];
    if (ph.p_type != PT_DYNAMIC) continue;
    for (auto *d = reinterpret_cast<const ElfW(Dyn) *>(info.dlpi_addr + ph.p_vaddr);
         d->d_tag != DT_NULL; ++d)
      if (d->d_tag == DT_TEXTREL || (d->d_tag == DT_FLAGS && (d->d_un.d_val & DF_TEXTREL)))
        return true;
  }
  return false;
}

bool isCompilerObject(const dl_phdr_info &info) {
  const auto self = reinterpret_cast<ElfW(Addr)>(&releaseCompilerMemory);
  for (int i = 0; i < info.dlpi_phnum; ++i) {
    const ElfW(Phdr) &ph = info.dlpi_phdr[i];
    ElfW(Addr) start = info.dlpi_addr + ph.p_vaddr;
    if (ph.p_type == PT_LOAD && self >= start && self < start + ph.p_memsz) return true;
  }
  const char *name = info.dlpi_name ? info.dlpi_name : "";
  for (const char *lib : kCompilerLibraries)
    if (std::strstr(name, lib)) return true;
  return false;
}

int dropCode(dl_phdr_info *info, size_t, void *total) {
  if (!isCompilerObject(*info) || hasTextRelocations(*info)) return 0;
  const auto page = uintptr_t(sysconf(_SC_PAGESIZE));
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr) &ph = info->dlpi_phdr[i];
    // Only segments never written: code and read-only tables (.rodata, .eh_frame, symbols). A
    // writable segment (.data, and RELRO, made read-only only after relocation) holds private
    // dirty pages that MADV_DONTNEED would throw away.
    if (ph.p_type != PT_LOAD || (ph.p_flags & PF_W)) continue;
    // Whole pages inside the segment (its first and last page may be shared with a neighbour).
    uintptr_t start = (info->dlpi_addr + ph.p_vaddr + page - 1) & ~(page - 1);
    uintptr_t end = (info->dlpi_addr + ph.p_vaddr + ph.p_filesz) & ~(page - 1);
    if (end <= start) continue;
    if (madvise(reinterpret_cast<void *>(start), end - start, MADV_DONTNEED) == 0)
      *static_cast<size_t *>(total) += end - start;
  }
  return 0;
}

int64_t residentBytes() {
  long size = 0, resident = 0;
  if (FILE *f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &size, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return int64_t(resident) * sysconf(_SC_PAGESIZE);
}

bool releaseEnabled() {
  static const bool enabled = [] {
    const char *v = std::getenv("XJIT_RELEASE_MEMORY");
    return !v || std::strcmp(v, "0") != 0;
  }();
  return enabled;
}

std::mutex gTotalsMutex;
MemoryReleaseTotals gTotals;
thread_local bool tJustCompiled = false;
/// At most one release per interval after first runs; one skipped is done by a later run.
constexpr std::chrono::steady_clock::duration kMinReleaseInterval = std::chrono::seconds(1);
std::atomic<int64_t> gLastRelease{std::numeric_limits<int64_t>::min() / 2};
std::atomic<bool> gPending{false};

} // namespace

MemoryRelease releaseCompilerMemory() {
  auto t0 = std::chrono::steady_clock::now();
  MemoryRelease r;
  int64_t before = residentBytes();
  Jit::releaseEngine();    // before the trim, so that LLVM's heap is given back too
  dropCachedHostBuffers(); // results of the graphs compiled before (host_buffers.cpp)
  malloc_trim(0);
  dl_iterate_phdr(dropCode, &r.codeBytes);
  r.rssDropBytes = before - residentBytes();
  r.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::lock_guard<std::mutex> lock(gTotalsMutex);
  gTotals.releases++;
  gTotals.rssDropMb += double(r.rssDropBytes) / (1 << 20);
  gTotals.ms += r.ms;
  return r;
}

void noteCompile() { tJustCompiled = true; }

void afterRun() {
  bool first = tJustCompiled;
  if (!first && !gPending.load(std::memory_order_relaxed)) return; // the steady state
  tJustCompiled = false;
  if (!releaseEnabled()) return;
  int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
  // A program compiling graph after graph (graph breaks, recompiles) would otherwise release
  // after each one, and each next compile would map the same code again.
  if (first && now - gLastRelease.load() < kMinReleaseInterval.count()) {
    gPending = true;
    return;
  }
  // One thread releases; another one finding a release pending goes on.
  if (first || gPending.exchange(false)) {
    gPending = false;
    gLastRelease = now;
    releaseCompilerMemory();
  }
}

MemoryReleaseTotals memoryReleaseTotals() {
  std::lock_guard<std::mutex> lock(gTotalsMutex);
  return gTotals;
}

} // namespace xjit::backend
