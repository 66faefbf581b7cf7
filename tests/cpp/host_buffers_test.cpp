// hostBuffer's reuse of large released buffers (src/backend/host_buffers.cpp): the pages of a
// buffer of 1 MiB or more, once released, serve the next requests of any size (whole, split,
// or moved into a larger buffer), smaller buffers are not kept, and dropCachedHostBuffers
// empties the cache.
// Buffers made ahead (a warm start's first-call buffers) are found there by hostBuffer, and a
// recording lists the large buffers handed out.
#include "xjit/backend/host_buffers.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string_view>
#include <vector>

namespace xjit::backend {
namespace {

bool reuseOff() {
  const char *v = std::getenv("XJIT_HOST_BUFFER_CACHE");
  return v && std::string_view(v) == "0";
}

TEST(HostBuffers, LargeReleasedBufferIsReusedForTheSameSize) {
  if (reuseOff()) GTEST_SKIP() << "XJIT_HOST_BUFFER_CACHE=0";
  dropCachedHostBuffers();
  const int64_t big = 3 << 20;
  void *first = nullptr;
  {
    std::shared_ptr<Storage> a = hostBuffer(big);
    first = a->data();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(first) % 64, 0u);
    EXPECT_EQ(cachedHostBufferBytes(), 0);
  }
  EXPECT_EQ(cachedHostBufferBytes(), big);
  const HostBufferCounters before = hostBufferCounters();
  {
    std::shared_ptr<Storage> again = hostBuffer(big);
    EXPECT_EQ(again->data(), first);
    EXPECT_EQ(cachedHostBufferBytes(), 0);
    static_cast<char *>(again->data())[big - 1] = 1; // the whole buffer is usable
  }
  EXPECT_EQ(hostBufferCounters().freshBytes, before.freshBytes);
  EXPECT_EQ(hostBufferCounters().reusedBytes, before.reusedBytes + big);
  dropCachedHostBuffers();
  EXPECT_EQ(cachedHostBufferBytes(), 0);
}

/// Fills the buffer with bytes that depend on the position and `seed`.
void fill(Storage &s, int seed) {
  auto *p = static_cast<unsigned char *>(s.data());
  for (int64_t i = 0; i < s.nbytes(); i += 4096)
    p[i] = static_cast<unsigned char>((i / 4096 + seed) % 251 + 1);
}

TEST(HostBuffers, ReleasedPagesServeOtherSizes) {
  if (reuseOff()) GTEST_SKIP() << "XJIT_HOST_BUFFER_CACHE=0";
  dropCachedHostBuffers();
  const int64_t mb = 1 << 20;
  void *first = nullptr;
  {
    std::shared_ptr<Storage> a = hostBuffer(3 * mb);
    first = a->data();
  }
  HostBufferCounters before = hostBufferCounters();
  {
    // A smaller request takes the front of the kept 3 MiB (no system call); the rest stays.
    std::shared_ptr<Storage> b = hostBuffer(2 * mb);
    EXPECT_EQ(b->data(), first);
    EXPECT_EQ(cachedHostBufferBytes(), mb);
    EXPECT_EQ(hostBufferCounters().freshBytes, before.freshBytes);
    fill(*b, 7);
  }
  // Released again, the two pieces are one block of 3 MiB: a larger request moves its pages
  // (their contents show it: new pages would read zero) and takes only the rest fresh.
  EXPECT_EQ(cachedHostBufferBytes(), 3 * mb);
  before = hostBufferCounters();
  {
    std::shared_ptr<Storage> c = hostBuffer(5 * mb);
    EXPECT_EQ(cachedHostBufferBytes(), 0);
    EXPECT_EQ(hostBufferCounters().freshBytes, before.freshBytes + 2 * mb);
    EXPECT_EQ(hostBufferCounters().reusedBytes, before.reusedBytes + 3 * mb);
    EXPECT_GE(hostBufferCounters().remaps, before.remaps + 1);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(c->data()) % 64, 0u);
    const auto *p = static_cast<const unsigned char *>(c->data());
    for (int64_t i = 0; i < 2 * mb; i += 4096)
      ASSERT_EQ(p[i], (i / 4096 + 7) % 251 + 1) << "byte " << i;
    for (int64_t i = 3 * mb; i < 5 * mb; i += 4096)
      ASSERT_EQ(p[i], 0) << "byte " << i;
    fill(*c, 3); // the whole buffer is writable
  }
  EXPECT_EQ(cachedHostBufferBytes(), 5 * mb);
  dropCachedHostBuffers();
}

TEST(HostBuffers, AlternatingSizesTakeNoNewPagesOnceWarm) {
  // A training step's pattern: the forward's saved values, then gradients of other sizes, the
  // same every step. New pages only while the live buffers outgrow what was released.
  if (reuseOff()) GTEST_SKIP() << "XJIT_HOST_BUFFER_CACHE=0";
  dropCachedHostBuffers();
  const int64_t mb = 1 << 20;
  const std::vector<int64_t> forward = {3 * mb, 5 * mb + 100, 7 * mb}, backward = {4 * mb, 11 * mb};
  const int64_t mappingsBefore = hostBufferCounters().mappings;
  uint64_t freshAfterFirst = 0;
  int64_t mappingsAfterSecond = 0;
  for (int step = 0; step < 6; ++step) {
    std::vector<std::shared_ptr<Storage>> live;
    for (int64_t n : forward)
      live.push_back(hostBuffer(n));
    for (auto &b : live)
      fill(*b, step);
    live.clear();
    for (int64_t n : backward)
      live.push_back(hostBuffer(n));
    for (auto &b : live)
      fill(*b, step);
    live.clear();
    if (step == 0) freshAfterFirst = hostBufferCounters().freshBytes;
    EXPECT_EQ(hostBufferCounters().freshBytes, freshAfterFirst) << "step " << step;
    EXPECT_LE(cachedHostBufferBytes(), 16 * mb); // never more than the live peak
    // Splits add mappings while the pattern settles, not every step.
    if (step == 1) mappingsAfterSecond = hostBufferCounters().mappings;
    if (step > 1) EXPECT_EQ(hostBufferCounters().mappings, mappingsAfterSecond) << "step " << step;
  }
  dropCachedHostBuffers();
  EXPECT_EQ(hostBufferCounters().mappings, mappingsBefore); // all unmapped
}

TEST(HostBuffers, ArenaLendsItsPagesBetweenCalls) {
  if (reuseOff()) GTEST_SKIP() << "XJIT_HOST_BUFFER_CACHE=0";
  if (const char *v = std::getenv("XJIT_LEND_ARENAS"); v && std::string_view(v) == "0")
    GTEST_SKIP() << "XJIT_LEND_ARENAS=0";
  dropCachedHostBuffers();
  const int64_t mb = 1 << 20;
  const HostBufferCounters start = hostBufferCounters();
  std::shared_ptr<Storage> small = hostBuffer(2 * mb);
  EXPECT_FALSE(lendHostBufferPages(*small)); // under 4 MiB: kept as it is
  std::shared_ptr<Storage> arena = hostBuffer(6 * mb);
  void *at = arena->data();
  fill(*arena, 5);
  ASSERT_TRUE(lendHostBufferPages(*arena));
  EXPECT_FALSE(lendHostBufferPages(*arena)); // already lent
  EXPECT_EQ(hostBufferCounters().lends, start.lends + 1);
  EXPECT_EQ(cachedHostBufferBytes(), 6 * mb);
  // Its range is reserved, not readable: a stray access faults rather than reading zeros.
  EXPECT_DEATH(static_cast<void>(static_cast<volatile char *>(at)[4096]), "");
  HostBufferCounters before = hostBufferCounters();
  {
    // Another buffer takes the lent pages: their contents show it.
    std::shared_ptr<Storage> other = hostBuffer(4 * mb);
    EXPECT_EQ(hostBufferCounters().freshBytes, before.freshBytes);
    const auto *p = static_cast<const unsigned char *>(other->data());
    for (int64_t i = 0; i < 4 * mb; i += 4096)
      ASSERT_EQ(p[i], (i / 4096 + 5) % 251 + 1) << "byte " << i;
  }
  before = hostBufferCounters();
  reclaimHostBufferPages(*arena);
  EXPECT_EQ(arena->data(), at); // the same address, backed again by the kept pages
  EXPECT_EQ(cachedHostBufferBytes(), 0);
  EXPECT_EQ(hostBufferCounters().freshBytes, before.freshBytes);
  EXPECT_EQ(hostBufferCounters().reusedBytes, before.reusedBytes + 6 * mb);
  fill(*arena, 9);                // the whole range is writable
  reclaimHostBufferPages(*arena); // not lent: nothing to do
  // Lent again, then the cache dropped (the release after a first run): a block for the lent
  // arena stays, the other kept pages go; the arena takes its pages back, nothing fresh.
  {
    std::shared_ptr<Storage> spare = hostBuffer(3 * mb);
  }
  ASSERT_TRUE(lendHostBufferPages(*arena));
  EXPECT_EQ(cachedHostBufferBytes(), 9 * mb);
  dropCachedHostBuffers();
  // 6 MiB, or 9 where the spare's pages and the lent ones lie side by side (one block).
  EXPECT_GE(cachedHostBufferBytes(), 6 * mb);
  EXPECT_LE(cachedHostBufferBytes(), 9 * mb);
  before = hostBufferCounters();
  reclaimHostBufferPages(*arena);
  EXPECT_EQ(hostBufferCounters().freshBytes, before.freshBytes);
  fill(*arena, 11);
  // Released while lent: only its reservation goes.
  ASSERT_TRUE(lendHostBufferPages(*arena));
  arena.reset();
  small.reset();
  dropCachedHostBuffers();
  EXPECT_EQ(hostBufferCounters().mappings, start.mappings);
}

TEST(HostBuffers, LargeZeroFilledStoragesUseTheKeptPages) {
  // Storage(nbytes), the reference kernels' results: kept pages, zero-filled.
  if (reuseOff()) GTEST_SKIP() << "XJIT_HOST_BUFFER_CACHE=0";
  dropCachedHostBuffers();
  const int64_t mb = 1 << 20;
  {
    std::shared_ptr<Storage> a = hostBuffer(3 * mb);
    fill(*a, 3);
  }
  const HostBufferCounters before = hostBufferCounters();
  {
    Storage zeros(2 * mb + 100);
    EXPECT_EQ(hostBufferCounters().freshBytes, before.freshBytes);
    EXPECT_GT(hostBufferCounters().reusedBytes, before.reusedBytes);
    const auto *p = static_cast<const unsigned char *>(zeros.data());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
    for (int64_t i = 0; i < zeros.nbytes(); i += 512)
      ASSERT_EQ(p[i], 0) << "byte " << i;
    ASSERT_EQ(p[zeros.nbytes() - 1], 0);
  }
  EXPECT_EQ(cachedHostBufferBytes(), 3 * mb);
  dropCachedHostBuffers();
}

TEST(HostBuffers, SmallBuffersAreNotKept) {
  dropCachedHostBuffers();
  {
    std::shared_ptr<Storage> a = hostBuffer(4096);
  }
  EXPECT_EQ(cachedHostBufferBytes(), 0);
}

TEST(HostBuffers, BuffersMadeAheadAreTakenByTheirSize) {
  if (reuseOff()) GTEST_SKIP() << "XJIT_HOST_BUFFER_CACHE=0";
  dropCachedHostBuffers();
  const uint64_t made = hostBuffersMadeAhead(), used = hostBuffersAheadUsed();
  const int64_t a = (2 << 20) + 100, b = 5 << 20;  // a: rounded up to a page
  ASSERT_TRUE(makeHostBuffersAhead({a, b, 4096})); // 4096: too small to keep, skipped
  waitForHostBuffersAhead();
  EXPECT_EQ(hostBuffersMadeAhead(), made + 2);
  EXPECT_EQ(cachedHostBufferBytes(), (a + 4095) / 4096 * 4096 + b);
  {
    std::shared_ptr<Storage> x = hostBuffer(a);
    EXPECT_EQ(hostBuffersAheadUsed(), used + 1);
    static_cast<char *>(x->data())[a - 1] = 1;
    EXPECT_EQ(cachedHostBufferBytes(), b);
  }
  // Released again: reused as any buffer, no longer counted as made ahead.
  {
    std::shared_ptr<Storage> again = hostBuffer(a);
  }
  EXPECT_EQ(hostBuffersAheadUsed(), used + 1);
  dropCachedHostBuffers(); // b, never taken, is freed
  EXPECT_EQ(cachedHostBufferBytes(), 0);
  {
    std::shared_ptr<Storage> y = hostBuffer(b);
  }
  EXPECT_EQ(hostBuffersAheadUsed(), used + 1);
  // A released buffer and one made ahead of the same size: the released one is taken first.
  ASSERT_TRUE(makeHostBuffersAhead({b}));
  waitForHostBuffersAhead();
  {
    std::shared_ptr<Storage> released = hostBuffer(b);
    EXPECT_EQ(hostBuffersAheadUsed(), used + 1);
    std::shared_ptr<Storage> fromAhead = hostBuffer(b);
    EXPECT_EQ(hostBuffersAheadUsed(), used + 2);
  }
  dropCachedHostBuffers();
  EXPECT_FALSE(makeHostBuffersAhead({}));
}

TEST(HostBuffers, RequestWaitsForItsBufferBeingMadeAhead) {
  if (reuseOff()) GTEST_SKIP() << "XJIT_HOST_BUFFER_CACHE=0";
  dropCachedHostBuffers();
  const uint64_t used = hostBuffersAheadUsed();
  const int64_t big = 48 << 20; // ~10-25 ms of faults on the thread: requested before it is done
  const HostBufferCounters before = hostBufferCounters();
  ASSERT_TRUE(makeHostBuffersAhead({big}));
  {
    std::shared_ptr<Storage> x = hostBuffer(big); // no wait for the thread here
    EXPECT_EQ(hostBuffersAheadUsed(), used + 1);
    EXPECT_EQ(hostBufferCounters().freshBytes, before.freshBytes);
    static_cast<char *>(x->data())[big - 1] = 1;
  }
  waitForHostBuffersAhead();
  {
    std::shared_ptr<Storage> other = hostBuffer(3 << 20); // no buffer of its size is made
    EXPECT_EQ(hostBuffersAheadUsed(), used + 1);
  }
  dropCachedHostBuffers();
}

TEST(HostBuffers, RecordingListsLargeBuffersAndNests) {
  dropCachedHostBuffers();
  HostBufferRecording outer;
  {
    std::shared_ptr<Storage> big = hostBuffer(3 << 20);
    std::shared_ptr<Storage> small = hostBuffer(4096);
  }
  if (!reuseOff()) { // reused from the release above: not one more buffer to make ahead
    std::shared_ptr<Storage> again = hostBuffer(3 << 20);
  }
  {
    // Larger than the 3 MiB released: partly new pages, so listed.
    HostBufferRecording inner;
    std::shared_ptr<Storage> c = hostBuffer(4 << 20);
    EXPECT_EQ(inner.sizes(), (std::vector<int64_t>{4 << 20}));
  }
  EXPECT_EQ(outer.sizes(), (std::vector<int64_t>{3 << 20, 4 << 20}));
  dropCachedHostBuffers();
}

} // namespace
} // namespace xjit::backend
