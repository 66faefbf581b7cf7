// Executables shared by identical ops across the process's compiled graphs: an LSTM unrolled
// over 64 steps has 256 identical matmuls (or matrix-vector reductions); each held its own
// plans or loop IR (5-20 KB) before. Keyed by a caller-made text that determines everything an
// executable does with its inputs; an entry dies with the last graph holding its executable.
#pragma once

#include "xjit/backend/target.h"

#include <algorithm>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

namespace xjit::backend {

class SharedExecutables {
public:
  std::shared_ptr<const Executable> find(const std::string &key) {
    std::lock_guard lock(mu_);
    auto it = byKey_.find(key);
    return it == byKey_.end() ? nullptr : it->second.lock();
  }
  void insert(const std::string &key, const std::shared_ptr<const Executable> &exe) {
    std::lock_guard lock(mu_);
    if (byKey_.size() >= 2 * liveAfterPrune_) { // drop dead entries now and then
      std::erase_if(byKey_, [](const auto &e) { return e.second.expired(); });
      liveAfterPrune_ = std::max<size_t>(byKey_.size(), 64);
    }
    byKey_[key] = exe;
  }

private:
  std::mutex mu_;
  std::unordered_map<std::string, std::weak_ptr<const Executable>> byKey_;
  size_t liveAfterPrune_ = 64;
};

} // namespace xjit::backend
