// PlanCache: the plans a step kind has made, by the shape of the step, so that each shape is
// planned once. A plan holds a placement per block of its step (a few KiB); past kMaxPlans
// shapes the cache starts over.
#pragma once

#include <cstddef>
#include <map>

#include "core/workspace_arena.h"

namespace voxd::scheduler {

template <typename Key, typename Plan = ArenaLayout>
class PlanCache {
 public:
  static constexpr size_t kMaxPlans = 4096;

  // The plan of `key`, made by `make()` when there is none yet. The reference holds until the
  // next call that makes a plan.
  template <typename Make>
  const Plan& get(const Key& key, Make&& make) {
    auto at = plans_.find(key);
    if (at != plans_.end()) return at->second;
    if (plans_.size() >= kMaxPlans) plans_.clear();
    return plans_.emplace(key, make()).first->second;
  }

 private:
  std::map<Key, Plan> plans_;
};

}  // namespace voxd::scheduler
