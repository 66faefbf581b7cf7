// Content tags: the caller of a compiled graph vouches, for the length of one call, that the
// tensor at an address holds the same bytes as at every other call that gave it the same tag.
// Library kernels cache data derived from such a tensor under its tag (a convolution's or a
// matmul's weights reordered into oneDNN's blocked layout) instead of recomputing it per call.
//
// The frontend tags module parameters from PyTorch's version counters
// (src/frontend/param_versions.cpp); untagged tensors are treated as new at every call, so a
// caller that issues no tags gets exactly the behaviour without caching. Tags are process-wide
// and never reused (newContentTag), so a cached copy can never be mistaken for another tensor's.
//
// The tags reach the kernels through the calling thread (ContentTagScope), not through the
// tensors: the runtime runs a graph's instructions on the thread that called it, and a kernel run
// elsewhere simply finds no tag (slower, never wrong).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace xjit::backend {

/// The tags of one call: data address (a tensor's element 0) -> tag.
class ContentTags {
public:
  void clear() { entries_.clear(); }
  bool empty() const { return entries_.empty(); }
  /// Two different tags for one address (two Parameters sharing a storage, each with its own
  /// version counter: a write through one does not change the other's) leave it untagged.
  void add(const void *data, uint64_t tag) {
    for (auto &[d, t] : entries_)
      if (d == data) {
        if (t != tag) t = 0;
        return;
      }
    entries_.emplace_back(data, tag);
  }
  /// The tag of the tensor whose element 0 is at `data`; 0 when untagged.
  uint64_t find(const void *data) const {
    for (const auto &[d, t] : entries_) // a model's few dozen parameters: a scan is cheapest
      if (d == data) return t;
    return 0;
  }

private:
  std::vector<std::pair<const void *, uint64_t>> entries_;
};

/// A tag never returned before in this process (never 0).
uint64_t newContentTag();

/// Makes `tags` the calling thread's tags until the scope ends (scopes nest; null: none).
class ContentTagScope {
public:
  explicit ContentTagScope(const ContentTags *tags);
  ~ContentTagScope();
  ContentTagScope(const ContentTagScope &) = delete;
  ContentTagScope &operator=(const ContentTagScope &) = delete;

private:
  const ContentTags *previous_;
};

/// The tag of the tensor data at `data` in the calling thread's current scope; 0 when none.
uint64_t currentContentTag(const void *data);

/// The issuer of `tag` will not give it again (the tensor changed or died): data cached under
/// it is dropped. Kernels cache derived data process-wide by tag, so one weight used by many
/// instructions (a loop unrolled over time steps) has one copy, which lives exactly as long as
/// its tag.
void retireContentTag(uint64_t tag);
/// Called with every retired tag (registered once by a cache of derived data).
using ContentTagRetiredFn = void (*)(uint64_t tag);
void onContentTagRetired(ContentTagRetiredFn fn);

/// Weights of library kernels (oneDNN conv / matmul) that needed a reorder into the
/// primitive's layout, counted per call (for backend_stats and tests).
struct WeightPackCounters {
  uint64_t packs = 0;           // tagged weights reordered into a cached copy (a new tag or layout)
  uint64_t packHits = 0;        // calls that reused a cached copy (the tag was unchanged)
  uint64_t perCallReorders = 0; // untagged weights reordered for that call only
  uint64_t inPlace = 0;         // weights read as they are by an im2col convolution (no reorder)
};
WeightPackCounters weightPackCounters();

} // namespace xjit::backend
