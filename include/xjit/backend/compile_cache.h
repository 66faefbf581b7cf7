// The persistent compile cache: machine code of compiled kernels on disk, so that a second
// process compiling the same kernel for the same CPU with the same compiler skips LLVM.
//
// An entry is one file `<dir>/<key>.o` holding a header (magic, format version, the key, the
// payload's length and xxh3 checksum) and the object file LLVM produced. Entries are written to
// a temporary file in the same directory and renamed into place, so readers see a whole entry
// or none, and several processes may write the same key at once (the last rename wins; all
// write the same bytes). An entry that does not validate (truncated, corrupted, another format,
// another key) is a miss and is rewritten by the compile that follows; errors reading or
// writing the directory disable nothing but that one access (a cache never fails a compile).
//
// Size: bounded by XJIT_CACHE_MAX_MB (default 512; 0 means unbounded). A store that takes the
// directory past the bound deletes the least recently used entries (by mtime, which hits
// refresh) down to 80% of it, under an flock on `<dir>/lock` so one process trims at a time;
// readers and writers take no lock (see compile_cache.cpp for why deleting is safe).
//
// Location: $XJIT_CACHE_DIR, else $XDG_CACHE_HOME/xjit, else ~/.cache/xjit. Disabled when
// XJIT_NO_CACHE is set to anything but "" or "0" (read at every access, so `python -m xjit
// --no-cache` and tests may set it at run time), or by setCompileCacheEnabled(false).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace xjit::backend {

/// What identifies the compiler itself: the backend's source hash (computed by CMake from the
/// sources of src/backend and include/xjit/backend at build time) and the LLVM version.
const std::string &compilerIdentity();

/// The cache key: a hex SHA-256 over the parts, each length-prefixed so that no two different
/// part lists give the same byte stream. Callers pass the kernel's printed loop IR, the target
/// fingerprint (CPU name and features), compilerIdentity() and the compile options.
std::string compileCacheKey(std::initializer_list<std::string_view> parts);

/// Process-wide switch (on by default); the XJIT_NO_CACHE variable also disables the cache.
void setCompileCacheEnabled(bool enabled);
bool compileCacheEnabled();
/// The directory in use (the variables are read at each call).
std::string compileCacheDir();

struct CompileCacheStats {
  uint64_t hits = 0, misses = 0, writes = 0;
  uint64_t invalid = 0;   // entries found but rejected (truncated, corrupted, foreign)
  uint64_t evictions = 0; // entries this process deleted to keep the size bound
};
/// Counters of this process (for tests and --explain).
CompileCacheStats compileCacheStats();

/// The payload stored under `key`, or nullopt on a miss (absent, invalid, or cache disabled).
std::optional<std::string> compileCacheLoad(const std::string &key);
/// Stores `payload` under `key` atomically; returns false (and leaves the cache as it was) when
/// the cache is disabled or the directory is not writable.
bool compileCacheStore(const std::string &key, std::string_view payload);
/// The size bound in bytes: XJIT_CACHE_MAX_MB (a decimal number of MiB; read at every call),
/// default 512 MiB; 0 when unbounded.
uint64_t compileCacheMaxBytes();
/// Trims the current directory to the bound now (least recently used first); returns the
/// bytes of entries left. Stores do this by themselves when the directory outgrows the bound.
uint64_t compileCacheTrim();
/// Marks: empty files `<dir>/<key>.mark` that carry one bit across processes, for hints that
/// cost nothing when lost or wrong (library_warm_up.h); not entries (never trimmed, no stats).
/// Both are no-ops (false) when the cache is disabled.
bool compileCacheMarked(const std::string &key);
void compileCacheMark(const std::string &key);
/// Notes: small files `<dir>/<key>.note` holding a text, hints as marks are (a frame's first
/// call's buffer sizes, host_buffers.h), written whole (a reader sees an old or a new one).
/// nullopt when absent or the cache is disabled; writing is a no-op then.
std::optional<std::string> compileCacheNote(const std::string &key);
void compileCacheWriteNote(const std::string &key, std::string_view text);
/// The path of key's entry in the current directory (tests corrupt it on purpose).
std::string compileCachePath(const std::string &key);

} // namespace xjit::backend
