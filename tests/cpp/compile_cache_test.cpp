// The persistent compile cache: a hit after a miss gives the same results without LLVM;
// truncated, corrupted, foreign and garbage entries are misses that get rewritten; the key
// depends on every part (kernel, CPU features, compiler identity, options); several processes
// compiling the same kernel into one directory at once all get correct results.
//
// Every test here uses its own fresh directory through XJIT_CACHE_DIR. Other tests of this
// binary run with the cache on too; so that they do not write into the user's ~/.cache, this
// file points XJIT_CACHE_DIR at a directory under the temp dir when it is unset.
#include "xjit/backend/compile_cache.h"
#include "xjit/backend/jit.h"
#include "xjit/backend/lower.h"
#include "xjit/backend/target.h"
#include "xjit/ir/interpreter.h"
#include "xjit/ir/parser.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <random>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

namespace xjit::backend {
namespace {

namespace fs = std::filesystem;

const bool kTestCacheDirSet = [] {
  if (!std::getenv("XJIT_CACHE_DIR"))
    setenv("XJIT_CACHE_DIR", (fs::temp_directory_path() / "xjit-test-cache").c_str(), 1);
  return true;
}();

/// A fresh cache directory for one test, removed afterwards; restores XJIT_CACHE_DIR.
class ScopedCacheDir {
public:
  explicit ScopedCacheDir(const std::string &tag) {
    const char *old = std::getenv("XJIT_CACHE_DIR");
    old_ = old ? old : "";
    dir_ = fs::temp_directory_path() / ("xjit-cache-" + tag + "-" + std::to_string(getpid()) + "-" +
                                        std::to_string(std::random_device{}()));
    fs::remove_all(dir_);
    setenv("XJIT_CACHE_DIR", dir_.c_str(), 1);
  }
  ~ScopedCacheDir() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
    setenv("XJIT_CACHE_DIR", old_.c_str(), 1);
  }
  const fs::path &dir() const { return dir_; }
  size_t entries() const {
    size_t n = 0;
    if (fs::exists(dir_))
      for (const auto &e : fs::directory_iterator(dir_))
        n += e.path().extension() == ".o";
    return n;
  }

private:
  fs::path dir_;
  std::string old_;
};

/// A fused chain with math the JIT inlines, a broadcast and an integer-free result; `scale`
/// varies the kernel text so tests can make distinct kernels.
std::unique_ptr<Graph> testGraph(double scale = 0.5) {
  return parseGraph("graph @cache_probe(%x: f32[37,19], %y: f32[19]) -> (f32[37,19]) {\n"
                    "  %c = constant() {value = " +
                    std::to_string(scale) +
                    "} : float\n"
                    "  %a = mul(%x, %c) : f32[37,19]\n"
                    "  %b = add(%a, %y) : f32[37,19]\n"
                    "  %t = tanh(%b) : f32[37,19]\n"
                    "  %e = exp(%t) : f32[37,19]\n"
                    "  return(%e)\n"
                    "}\n");
}

std::vector<RtValue> testInputs() {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-3, 3);
  Tensor x = Tensor::empty(DType::F32, {37, 19}), y = Tensor::empty(DType::F32, {19});
  for (int64_t i = 0; i < x.numel(); ++i)
    x.setDouble(i, u(rng));
  for (int64_t i = 0; i < y.numel(); ++i)
    y.setDouble(i, u(rng));
  return {RtValue(x), RtValue(y)};
}

struct Compiled {
  LoweredKernel lk;
  std::shared_ptr<const CompiledKernel> ck;
};

Compiled compileGraph(const Graph &g) {
  LoweredKernel lk = lowerElementwiseBlock(*g.body(), g.name());
  auto ck = Jit::instance().compile(lk.kernel);
  return {std::move(lk), std::move(ck)};
}

Tensor runCompiled(const Compiled &c, const std::vector<RtValue> &inputs) {
  return runLowered(c.lk, *c.ck, inputs).at(0).tensor();
}

/// "" when the compiled result is within the backend tests' f32 tolerance of the interpreter.
std::string checkAgainstInterpreter(const Graph &g, const Tensor &got,
                                    const std::vector<RtValue> &inputs) {
  Tensor ref = interpret(g, inputs).at(0).tensor();
  if (got.numel() != ref.numel()) return "sizes differ";
  for (int64_t i = 0; i < ref.numel(); ++i) {
    double a = got.getDouble(i), r = ref.getDouble(i);
    if (!(std::abs(a - r) <= 1e-5 * std::abs(r) + 1e-6))
      return "element " + std::to_string(i) + ": compiled " + std::to_string(a) + ", reference " +
             std::to_string(r);
  }
  return "";
}

bool bitwiseEqual(const Tensor &a, const Tensor &b) {
  return a.numel() == b.numel() &&
         std::memcmp(a.data(), b.data(), size_t(a.numel()) * dtypeSize(a.dtype())) == 0;
}

std::string readFile(const fs::path &p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void writeFile(const fs::path &p, const std::string &bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), std::streamsize(bytes.size()));
}

fs::path onlyEntry(const ScopedCacheDir &d) {
  for (const auto &e : fs::directory_iterator(d.dir()))
    if (e.path().extension() == ".o") return e.path();
  return {};
}

TEST(CompileCache, KeyDependsOnEveryPart) {
  std::string base = compileCacheKey({"kernel", "znver4", "+avx2", "xjit 1", "Kernel"});
  EXPECT_EQ(base.size(), 64u);
  EXPECT_EQ(base, compileCacheKey({"kernel", "znver4", "+avx2", "xjit 1", "Kernel"}));
  EXPECT_NE(base, compileCacheKey({"kernel2", "znver4", "+avx2", "xjit 1", "Kernel"}));
  EXPECT_NE(base, compileCacheKey({"kernel", "skylake", "+avx2", "xjit 1", "Kernel"}));
  EXPECT_NE(base, compileCacheKey({"kernel", "znver4", "+avx2,+avx512f", "xjit 1", "Kernel"}));
  EXPECT_NE(base, compileCacheKey({"kernel", "znver4", "+avx2", "xjit 2", "Kernel"}));
  EXPECT_NE(base, compileCacheKey({"kernel", "znver4", "+avx2", "xjit 1", "None"}));
  // Parts are length-prefixed: moving a boundary changes the key.
  EXPECT_NE(compileCacheKey({"ab", "c"}), compileCacheKey({"a", "bc"}));
  // The compiler's identity names the source hash (64 hex digits) and the LLVM version.
  EXPECT_NE(compilerIdentity().find("llvm 19"), std::string::npos) << compilerIdentity();
  EXPECT_GE(compilerIdentity().size(), 64u);
  // The CPU target's fingerprint (for caches of whole compiled graphs) names it too.
  EXPECT_NE(makeCpuTarget()->fingerprint().find(compilerIdentity()), std::string::npos);
}

TEST(CompileCache, HitAfterMissGivesIdenticalResults) {
  ScopedCacheDir cache("hit");
  auto g = testGraph();
  auto inputs = testInputs();
  CompileCacheStats s0 = compileCacheStats();
  Compiled cold = compileGraph(*g);
  EXPECT_FALSE(cold.ck->fromCache());
  EXPECT_EQ(cache.entries(), 1u);
  EXPECT_EQ(compileCacheStats().writes, s0.writes + 1);
  Compiled warm = compileGraph(*g);
  EXPECT_TRUE(warm.ck->fromCache());
  EXPECT_EQ(warm.ck->times().optimize, 0.0); // LLVM did not run
  Tensor a = runCompiled(cold, inputs), b = runCompiled(warm, inputs);
  EXPECT_TRUE(bitwiseEqual(a, b));
  EXPECT_EQ(checkAgainstInterpreter(*g, b, inputs), "");
  // Both stay usable while the other is dropped (each has its own code).
  cold = {};
  EXPECT_TRUE(bitwiseEqual(runCompiled(warm, inputs), a));
  // A different kernel is a different entry.
  Compiled other = compileGraph(*testGraph(0.25));
  EXPECT_FALSE(other.ck->fromCache());
  EXPECT_EQ(cache.entries(), 2u);
  EXPECT_EQ(checkAgainstInterpreter(*testGraph(0.25), runCompiled(other, inputs), inputs), "");
}

TEST(CompileCache, DamagedEntriesAreMissesAndGetRewritten) {
  ScopedCacheDir cache("damaged");
  auto g = testGraph();
  auto inputs = testInputs();
  Tensor expected = runCompiled(compileGraph(*g), inputs);
  fs::path entry = onlyEntry(cache);
  ASSERT_FALSE(entry.empty());
  const std::string good = readFile(entry);
  ASSERT_GT(good.size(), 200u);
  std::string otherKey = compileCacheKey({"not this kernel"});
  struct Damage {
    const char *name;
    std::string bytes;
  };
  std::string flippedPayload = good;
  flippedPayload[good.size() - 40] ^= 0x5a;
  std::string flippedHeader = good;
  flippedHeader[9] ^= 1; // format version
  std::string foreignKey = good;
  foreignKey.replace(32, otherKey.size(), otherKey); // a whole entry of another key
  std::string garbage(good.size(), '\0');
  std::mt19937 rng(3);
  for (char &c : garbage)
    c = char(rng());
  std::vector<Damage> damages = {{"empty", ""},
                                 {"header only", good.substr(0, 20)},
                                 {"truncated", good.substr(0, good.size() / 2)},
                                 {"one byte short", good.substr(0, good.size() - 1)},
                                 {"trailing bytes", good + "xx"},
                                 {"flipped payload byte", flippedPayload},
                                 {"flipped version", flippedHeader},
                                 {"another key", foreignKey},
                                 {"garbage", garbage}};
  for (const Damage &d : damages) {
    SCOPED_TRACE(d.name);
    writeFile(entry, d.bytes);
    CompileCacheStats before = compileCacheStats();
    Compiled c = compileGraph(*g);
    EXPECT_FALSE(c.ck->fromCache());
    EXPECT_EQ(compileCacheStats().invalid, before.invalid + 1);
    EXPECT_TRUE(bitwiseEqual(runCompiled(c, inputs), expected));
    // Rewritten: whole again, and the next compile hits.
    EXPECT_EQ(readFile(entry), good);
    Compiled again = compileGraph(*g);
    EXPECT_TRUE(again.ck->fromCache());
    EXPECT_TRUE(bitwiseEqual(runCompiled(again, inputs), expected));
  }
  // A directory where the entry should be: a miss, and the compile still succeeds.
  fs::remove(entry);
  fs::create_directory(entry);
  Compiled c = compileGraph(*g);
  EXPECT_FALSE(c.ck->fromCache());
  EXPECT_TRUE(bitwiseEqual(runCompiled(c, inputs), expected));
}

TEST(CompileCache, DisabledByVariableAndSwitch) {
  ScopedCacheDir cache("disabled");
  auto g = testGraph();
  setenv("XJIT_NO_CACHE", "1", 1);
  EXPECT_FALSE(compileCacheEnabled());
  EXPECT_FALSE(compileGraph(*g).ck->fromCache());
  EXPECT_EQ(cache.entries(), 0u);
  setenv("XJIT_NO_CACHE", "0", 1);
  EXPECT_TRUE(compileCacheEnabled());
  unsetenv("XJIT_NO_CACHE");
  setCompileCacheEnabled(false);
  EXPECT_FALSE(compileGraph(*g).ck->fromCache());
  EXPECT_EQ(cache.entries(), 0u);
  setCompileCacheEnabled(true);
  EXPECT_FALSE(compileGraph(*g).ck->fromCache());
  EXPECT_EQ(cache.entries(), 1u);
  // keepText needs LLVM's output: it bypasses the cache.
  LoweredKernel lk = lowerElementwiseBlock(*g->body(), g->name());
  auto ck = Jit::instance().compile(lk.kernel, {.keepText = true});
  EXPECT_FALSE(ck->fromCache());
  EXPECT_FALSE(ck->assembly().empty());
  // An unwritable location disables nothing but the cache.
  setenv("XJIT_CACHE_DIR", "/proc/xjit-cannot-be-here", 1);
  EXPECT_FALSE(compileGraph(*testGraph(0.125)).ck->fromCache());
}

TEST(CompileCache, MarksAreBitsNotEntries) {
  ScopedCacheDir cache("marks");
  const std::string key = compileCacheKey({"a mark"});
  EXPECT_FALSE(compileCacheMarked(key));
  compileCacheMark(key); // makes the directory
  EXPECT_TRUE(compileCacheMarked(key));
  compileCacheMark(key); // again: still one empty file
  EXPECT_TRUE(compileCacheMarked(key));
  EXPECT_FALSE(compileCacheMarked(compileCacheKey({"another mark"})));
  EXPECT_EQ(fs::file_size(cache.dir() / (key + ".mark")), 0u);
  // Not an entry: no load finds it, no stats count it, the size bound leaves it.
  CompileCacheStats before = compileCacheStats();
  EXPECT_FALSE(compileCacheLoad(key).has_value());
  EXPECT_EQ(cache.entries(), 0u);
  compileCacheTrim();
  EXPECT_TRUE(compileCacheMarked(key));
  EXPECT_EQ(compileCacheStats().writes, before.writes);
  // Disabled cache: nothing read, nothing written.
  setenv("XJIT_NO_CACHE", "1", 1);
  EXPECT_FALSE(compileCacheMarked(key));
  const std::string other = compileCacheKey({"written while disabled"});
  compileCacheMark(other);
  unsetenv("XJIT_NO_CACHE");
  EXPECT_FALSE(compileCacheMarked(other));
  // An unwritable location: no mark, no failure.
  setenv("XJIT_CACHE_DIR", "/proc/xjit-cannot-be-here", 1);
  compileCacheMark(key);
  EXPECT_FALSE(compileCacheMarked(key));
}

/// Sets XJIT_CACHE_MAX_MB for one scope.
class ScopedMaxMB {
public:
  explicit ScopedMaxMB(const std::string &mb) {
    const char *old = std::getenv("XJIT_CACHE_MAX_MB");
    had_ = old != nullptr;
    old_ = old ? old : "";
    setenv("XJIT_CACHE_MAX_MB", mb.c_str(), 1);
  }
  ~ScopedMaxMB() {
    if (had_)
      setenv("XJIT_CACHE_MAX_MB", old_.c_str(), 1);
    else
      unsetenv("XJIT_CACHE_MAX_MB");
  }

private:
  bool had_;
  std::string old_;
};

std::string syntheticKey(int i) { return compileCacheKey({"synthetic entry", std::to_string(i)}); }

/// Gives key's entry an mtime `age` seconds in the past (its recency for the size bound).
void setAge(const std::string &key, int age) {
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  timespec times[2] = {now, now};
  times[1].tv_sec -= age;
  ASSERT_EQ(utimensat(AT_FDCWD, compileCachePath(key).c_str(), times, 0), 0);
}

uint64_t entryBytes(const ScopedCacheDir &d) {
  uint64_t n = 0;
  for (const auto &e : fs::directory_iterator(d.dir()))
    if (e.path().extension() == ".o") n += e.file_size();
  return n;
}

TEST(CompileCache, MaxMBParsing) {
  ScopedMaxMB bound("1.5");
  EXPECT_EQ(compileCacheMaxBytes(), uint64_t(1.5 * 1024 * 1024));
  setenv("XJIT_CACHE_MAX_MB", "0", 1);
  EXPECT_EQ(compileCacheMaxBytes(), 0u); // unbounded
  setenv("XJIT_CACHE_MAX_MB", "lots", 1);
  EXPECT_EQ(compileCacheMaxBytes(), uint64_t(512) * 1024 * 1024); // the default
  setenv("XJIT_CACHE_MAX_MB", "-3", 1);
  EXPECT_EQ(compileCacheMaxBytes(), uint64_t(512) * 1024 * 1024);
}

TEST(CompileCache, SizeBoundEvictsLeastRecentlyUsed) {
  ScopedCacheDir cache("bound");
  // Ten entries of ~10 KB under a 64 KB bound (trims go down to 80% of it: 52 KB).
  ScopedMaxMB bound("0.0625");
  const std::string payload(10000, 'p');
  const uint64_t entrySize = 32 + 64 + payload.size();
  CompileCacheStats s0 = compileCacheStats();
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(compileCacheStore(syntheticKey(i), payload));
    setAge(syntheticKey(i), 100 - i); // entry 0 is the oldest
  }
  EXPECT_EQ(compileCacheStats().evictions, s0.evictions); // 6 x 10 KB fit
  // A hit makes entry 0 the most recently used: entries 1, 2, ... go first.
  ASSERT_TRUE(compileCacheLoad(syntheticKey(0)).has_value());
  ASSERT_TRUE(compileCacheStore(syntheticKey(6), payload)); // 70 KB > 64 KB: trim to 52 KB
  EXPECT_EQ(compileCacheStats().evictions, s0.evictions + 2);
  EXPECT_FALSE(fs::exists(compileCachePath(syntheticKey(1))));
  EXPECT_FALSE(fs::exists(compileCachePath(syntheticKey(2))));
  for (int i : {0, 3, 4, 5, 6})
    EXPECT_EQ(compileCacheLoad(syntheticKey(i)), payload) << "entry " << i;
  EXPECT_EQ(entryBytes(cache), 5 * entrySize);
  // (Those hits touched every entry within one tick of the file system's clock: make the
  // order explicit again, 6 the newest.)
  for (int i : {0, 3, 4, 5, 6})
    setAge(syntheticKey(i), i == 0 ? 60 : 16 - 2 * i);
  EXPECT_LE(entryBytes(cache), compileCacheMaxBytes());
  // An evicted entry is a plain miss.
  CompileCacheStats s1 = compileCacheStats();
  EXPECT_FALSE(compileCacheLoad(syntheticKey(1)).has_value());
  EXPECT_EQ(compileCacheStats().invalid, s1.invalid);
  // A lower bound applies at the next trim; files that are not entries are left alone, except
  // temporary files a dead writer left behind long ago.
  writeFile(cache.dir() / "README", "not an entry");
  writeFile(cache.dir() / (syntheticKey(9) + ".tmp.fresh1"), "a writer at work");
  writeFile(cache.dir() / (syntheticKey(9) + ".tmp.stale1"), "a writer that died");
  timespec old[2] = {{0, 0}, {0, 0}};
  ASSERT_EQ(utimensat(AT_FDCWD, (cache.dir() / (syntheticKey(9) + ".tmp.stale1")).c_str(), old, 0),
            0);
  setenv("XJIT_CACHE_MAX_MB", "0.02", 1);
  EXPECT_LE(compileCacheTrim(), compileCacheMaxBytes());
  EXPECT_EQ(cache.entries(), 2u);
  EXPECT_TRUE(fs::exists(compileCachePath(syntheticKey(5)))); // the two newest stay
  EXPECT_TRUE(fs::exists(compileCachePath(syntheticKey(6))));
  EXPECT_TRUE(fs::exists(cache.dir() / "README"));
  EXPECT_TRUE(fs::exists(cache.dir() / (syntheticKey(9) + ".tmp.fresh1")));
  EXPECT_FALSE(fs::exists(cache.dir() / (syntheticKey(9) + ".tmp.stale1")));
  // Unbounded: nothing is deleted.
  setenv("XJIT_CACHE_MAX_MB", "0", 1);
  for (int i = 10; i < 20; ++i)
    ASSERT_TRUE(compileCacheStore(syntheticKey(i), payload));
  EXPECT_EQ(cache.entries(), 12u);
}

uint64_t ledger(const ScopedCacheDir &d) {
  std::ifstream in(d.dir() / "size");
  uint64_t n = 0;
  in >> n;
  return in ? n : ~uint64_t(0);
}

TEST(CompileCache, SizeLedgerTracksStoresWithoutScanning) {
  ScopedCacheDir cache("ledger");
  ScopedMaxMB bound("0.0625"); // 64 KB
  const std::string payload(10000, 'p');
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(compileCacheStore(syntheticKey(i), payload));
  EXPECT_EQ(ledger(cache), entryBytes(cache));
  // The ledger is what a store trusts: a figure over the bound makes the next store trim, and
  // the trim's scan corrects it (nothing is deleted: the real entries fit).
  writeFile(cache.dir() / "size", "999999999\n");
  CompileCacheStats s0 = compileCacheStats();
  ASSERT_TRUE(compileCacheStore(syntheticKey(3), payload));
  EXPECT_EQ(compileCacheStats().evictions, s0.evictions);
  EXPECT_EQ(ledger(cache), entryBytes(cache));
  // Missing or damaged: rebuilt by a scan, which counts the entry just stored.
  fs::remove(cache.dir() / "size");
  ASSERT_TRUE(compileCacheStore(syntheticKey(4), payload));
  EXPECT_EQ(ledger(cache), entryBytes(cache));
  writeFile(cache.dir() / "size", "12x4\n");
  ASSERT_TRUE(compileCacheStore(syntheticKey(5), payload));
  EXPECT_EQ(ledger(cache), entryBytes(cache));
  EXPECT_EQ(cache.entries(), 6u);
  // A trim on demand leaves the ledger right too.
  setenv("XJIT_CACHE_MAX_MB", "0.02", 1);
  uint64_t left = compileCacheTrim();
  EXPECT_EQ(ledger(cache), left);
  EXPECT_EQ(left, entryBytes(cache));
}

/// Run only as a child of SeveralProcessesBoundedAtOnce: stores and reads back entries of its
/// own and of the other children under a bound that keeps only some of them.
TEST(CompileCacheChild, StoreAndReadBounded) {
  if (!std::getenv("XJIT_CACHE_CHILD")) GTEST_SKIP() << "helper of SeveralProcessesBoundedAtOnce";
  int child = std::atoi(std::getenv("XJIT_CACHE_CHILD"));
  for (int round = 0; round < 40; ++round) {
    int mine = child * 1000 + round;
    std::string payload(3000 + size_t(mine % 7) * 500, char('a' + mine % 26));
    ASSERT_TRUE(compileCacheStore(syntheticKey(mine), payload));
    for (int other = 0; other < 4; ++other) {
      int key = other * 1000 + round;
      std::optional<std::string> got = compileCacheLoad(syntheticKey(key));
      // Either evicted (or not yet written) or whole and right.
      if (got) ASSERT_EQ(*got, std::string(3000 + size_t(key % 7) * 500, char('a' + key % 26)));
    }
  }
  // Compiled kernels through the bounded cache stay correct.
  auto inputs = testInputs();
  for (double scale : {0.5, 0.25}) {
    auto g = testGraph(scale);
    ASSERT_EQ(checkAgainstInterpreter(*g, runCompiled(compileGraph(*g), inputs), inputs), "");
  }
}

void runChildren(const std::string &filter, int count) {
  std::string self = fs::read_symlink("/proc/self/exe").string();
  std::vector<pid_t> children;
  for (int i = 0; i < count; ++i) {
    setenv("XJIT_CACHE_CHILD", std::to_string(i).c_str(), 1);
    std::vector<std::string> args = {self, "--gtest_filter=" + filter};
    std::vector<char *> argv;
    for (std::string &a : args)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = 0;
    posix_spawn_file_actions_t quiet; // the children's gtest banners would clutter the log
    posix_spawn_file_actions_init(&quiet);
    posix_spawn_file_actions_addopen(&quiet, 1, "/dev/null", O_WRONLY, 0);
    int rc = posix_spawn(&pid, self.c_str(), &quiet, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&quiet);
    ASSERT_EQ(rc, 0);
    children.push_back(pid);
  }
  unsetenv("XJIT_CACHE_CHILD");
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child failed: " << status;
  }
}

TEST(CompileCache, SeveralProcessesBoundedAtOnce) {
  ScopedCacheDir cache("bounded-procs");
  ScopedMaxMB bound("0.1"); // ~100 KB: about 20 of the children's 160 entries
  runChildren("CompileCacheChild.StoreAndReadBounded", 4);
  // Every entry left is whole, nothing temporary is left, and a trim brings it under the bound.
  for (const auto &e : fs::directory_iterator(cache.dir())) {
    std::string name = e.path().filename().string();
    EXPECT_TRUE(name == "lock" || name == "size" || e.path().extension() == ".o") << name;
  }
  EXPECT_LE(compileCacheTrim(), compileCacheMaxBytes());
  EXPECT_GT(cache.entries(), 0u);
}

/// Run only as a child of SeveralProcessesAtOnce (XJIT_CACHE_CHILD set): compiles the test
/// kernel a few times into the shared directory and checks every result.
TEST(CompileCacheChild, CompileAndCheck) {
  if (!std::getenv("XJIT_CACHE_CHILD")) GTEST_SKIP() << "helper of SeveralProcessesAtOnce";
  auto inputs = testInputs();
  for (int round = 0; round < 3; ++round) {
    for (double scale : {0.5, 0.25, 0.75}) {
      auto g = testGraph(scale);
      Compiled c = compileGraph(*g);
      ASSERT_EQ(checkAgainstInterpreter(*g, runCompiled(c, inputs), inputs), "");
    }
  }
}

TEST(CompileCache, SeveralProcessesAtOnce) {
  ScopedCacheDir cache("procs");
  runChildren("CompileCacheChild.CompileAndCheck", 4);
  // Three whole entries (and the lock and size ledger), no temporary files left behind, the
  // ledger right after four processes stored at once, and this process hits the entries.
  auto files = size_t(std::distance(fs::directory_iterator(cache.dir()), fs::directory_iterator()));
  EXPECT_EQ(cache.entries(), 3u);
  EXPECT_EQ(files, 5u);
  EXPECT_GE(ledger(cache), entryBytes(cache)); // an entry stored twice is counted twice
  auto g = testGraph(0.75);
  Compiled c = compileGraph(*g);
  EXPECT_TRUE(c.ck->fromCache());
  auto inputs = testInputs();
  EXPECT_EQ(checkAgainstInterpreter(*g, runCompiled(c, inputs), inputs), "");
}

} // namespace
} // namespace xjit::backend
