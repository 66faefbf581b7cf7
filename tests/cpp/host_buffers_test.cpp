// hostBuffer's reuse of large released buffers (src/backend/host_buffers.cpp): a buffer of
// 1 MiB or more released is handed out again for the next request of the same size (no fresh
// pages), smaller ones and other sizes are not, and dropCachedHostBuffers empties the cache.
#include "xjit/backend/host_buffers.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string_view>

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

} // namespace
} // namespace xjit::backend
