// Content tags of a graph call (include/xjit/backend/content_tags.h): the process-wide tag
// counter and the calling thread's current tags.
#include "xjit/backend/content_tags.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <vector>

namespace xjit::backend {
namespace {
thread_local const ContentTags *tCurrent = nullptr;
std::atomic<uint64_t> gLastTag{0};
} // namespace

uint64_t newContentTag() { return gLastTag.fetch_add(1, std::memory_order_relaxed) + 1; }

ContentTagScope::ContentTagScope(const ContentTags *tags) : previous_(tCurrent) { tCurrent = tags; }

ContentTagScope::~ContentTagScope() { tCurrent = previous_; }

uint64_t currentContentTag(const void *data) { return tCurrent ? tCurrent->find(data) : 0; }

namespace {
std::mutex gRetiredMu;
std::vector<ContentTagRetiredFn> &retiredListeners() {
  static std::vector<ContentTagRetiredFn> fns;
  return fns;
}
} // namespace

void onContentTagRetired(ContentTagRetiredFn fn) {
  std::lock_guard lock(gRetiredMu);
  auto &fns = retiredListeners();
  if (std::find(fns.begin(), fns.end(), fn) == fns.end()) fns.push_back(fn);
}

void retireContentTag(uint64_t tag) {
  if (tag == 0) return;
  std::vector<ContentTagRetiredFn> fns;
  {
    std::lock_guard lock(gRetiredMu);
    fns = retiredListeners();
  }
  for (ContentTagRetiredFn fn : fns)
    fn(tag);
}

} // namespace xjit::backend
