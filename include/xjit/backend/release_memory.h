// Giving back what a compile leaves resident once the program has moved on to running: glibc
// malloc's freed heap and the compiler's code pages (LLVM's, linked into libxjit_native.so or
// libLLVM, and oneDNN's). Code pages are clean file pages: unmapping them lowers the process's
// resident set, the page cache keeps them, and a later compile maps them again with minor faults
// (docs/perf.md, "Session 5: memory"; docs/decisions.md).
#pragma once

#include <cstddef>
#include <cstdint>

namespace xjit::backend {

struct MemoryRelease {
  size_t codeBytes = 0;     // bytes of executable mappings dropped (resident or not)
  int64_t rssDropBytes = 0; // the process's RSS before minus after (/proc/self/statm)
  double ms = 0;            // time the release took
};

/// malloc_trim(0), then MADV_DONTNEED on every non-writable PT_LOAD segment (code, read-only
/// tables) of the
/// objects that hold the compiler: the one holding this function (libxjit_native.so, or a test
/// executable), libLLVM and libdnnl where they are separate libraries. Objects with text
/// relocations are skipped (their text may hold private dirty pages). Safe while other threads
/// run that code: a dropped page is mapped again from the page cache at its next use.
MemoryRelease releaseCompilerMemory();

/// The frontend's policy: noteCompile() after each graph compile on this thread, afterRun()
/// after each run of a compiled graph. The run that follows a compile (the first call, so its
/// oneDNN primitives are built too) releases, at most once a second: a first run within a
/// second of the last release leaves the release pending, and the next run of any graph does
/// it (so a burst of compiles pays for one release and one re-mapping, not one per graph).
/// XJIT_RELEASE_MEMORY=0 turns it off (read once).
void noteCompile();
void afterRun();

/// Totals for backendCounters(): releases done, RSS they gave back (MB), their time (ms).
struct MemoryReleaseTotals {
  uint64_t releases = 0;
  double rssDropMb = 0, ms = 0;
};
MemoryReleaseTotals memoryReleaseTotals();

} // namespace xjit::backend
