// hostBuffer's reuse of large released buffers (src/backend/host_buffers.cpp): a buffer of
// 1 MiB or more released is handed out again for the next request of the same size (no fresh
// pages), smaller ones and other sizes are not, and dropCachedHostBuffers empties the cache.
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

TEST(HostBuffers, LargeReleasedBufferIsReusedForTheSameSize) {
  if (const char *v = std::getenv("XJIT_HOST_BUFFER_CACHE"); v && std::string_view(v) == "0")
    GTEST_SKIP() << "XJIT_HOST_BUFFER_CACHE=0";
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
  {
    std::shared_ptr<Storage> other = hostBuffer(big + 4096); // another size: not this one
    EXPECT_NE(other->data(), first);
    std::shared_ptr<Storage> again = hostBuffer(big);
    EXPECT_EQ(again->data(), first);
    EXPECT_EQ(cachedHostBufferBytes(), 0);
    static_cast<char *>(again->data())[big - 1] = 1; // the whole buffer is usable
  }
  EXPECT_EQ(cachedHostBufferBytes(), 2 * big + 4096);
  dropCachedHostBuffers();
  EXPECT_EQ(cachedHostBufferBytes(), 0);
}

TEST(HostBuffers, SmallBuffersAreNotKept) {
  dropCachedHostBuffers();
  {
    std::shared_ptr<Storage> a = hostBuffer(4096);
  }
  EXPECT_EQ(cachedHostBufferBytes(), 0);
}

bool reuseOff() {
  const char *v = std::getenv("XJIT_HOST_BUFFER_CACHE");
  return v && std::string_view(v) == "0";
}

TEST(HostBuffers, BuffersMadeAheadAreTakenByTheirSize) {
  if (reuseOff()) GTEST_SKIP() << "XJIT_HOST_BUFFER_CACHE=0";
  dropCachedHostBuffers();
  const uint64_t made = hostBuffersMadeAhead(), used = hostBuffersAheadUsed();
  const int64_t a = (2 << 20) + 100, b = 5 << 20;  // a: rounded up to 64 bytes
  ASSERT_TRUE(makeHostBuffersAhead({a, b, 4096})); // 4096: too small to keep, skipped
  waitForHostBuffersAhead();
  EXPECT_EQ(hostBuffersMadeAhead(), made + 2);
  EXPECT_EQ(cachedHostBufferBytes(), (a + 63) / 64 * 64 + b);
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
    HostBufferRecording inner;
    std::shared_ptr<Storage> c = hostBuffer(1 << 20);
    EXPECT_EQ(inner.sizes(), (std::vector<int64_t>{1 << 20}));
  }
  EXPECT_EQ(outer.sizes(), (std::vector<int64_t>{3 << 20, 1 << 20}));
  dropCachedHostBuffers();
}

} // namespace
} // namespace xjit::backend
