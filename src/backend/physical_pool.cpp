// The reuse rule of discarded extents' physical memory (see physical_pool.h).
#include "backend/physical_pool.h"

#include <algorithm>

namespace zt {

namespace {

bool same(const PhysicalPool::Held& held, const ChunkResidency* residency, Extent extent) {
  return held.residency == residency && held.extent.first == extent.first;
}

}  // namespace

void PhysicalPool::drop_live() {
  std::erase_if(held_, [](const Held& held) { return !held.residency->discarded(held.extent); });
}

void PhysicalPool::forget(const ChunkResidency* residency) {
  std::erase_if(held_, [&](const Held& held) { return held.residency == residency; });
}

void PhysicalPool::synchronized() {
  for (Held& held : held_) held.epoch = 0;  // as if discarded before every mapping commit
}

bool PhysicalPool::holds(const ChunkResidency* residency, Extent extent) const {
  return std::any_of(held_.begin(), held_.end(), [&](const Held& held) { return same(held, residency, extent); });
}

void PhysicalPool::discarded(ChunkResidency* residency, const std::vector<Extent>& extents) {
  for (Extent extent : extents)
    if (!holds(residency, extent)) held_.push_back(Held{residency, extent, mapping_commits_});
}

PhysicalPool::Plan PhysicalPool::plan_commit(const std::vector<Extent>& needed) {
  drop_live();
  // Reusable: discarded before the previous mapping commit, taken oldest first by size.
  std::vector<bool> taken(held_.size(), false);
  Plan plan;
  size_t created = 0;  // chunks of new memory
  for (Extent extent : needed) {
    size_t i = 0;
    while (i < held_.size() &&
           (taken[i] || held_[i].epoch >= mapping_commits_ || held_[i].extent.count != extent.count))
      ++i;
    if (i == held_.size()) {
      created += extent.count;
      plan.sources.emplace_back();
      continue;
    }
    taken[i] = true;
    plan.sources.emplace_back(held_[i]);
  }
  // New memory: first give back reusable extents no commit took, oldest first, at least as
  // many chunks as are created (so the held bytes do not grow while some are left over).
  std::vector<Held> kept;
  size_t released = 0;
  for (size_t i = 0; i < held_.size(); ++i) {
    if (taken[i]) continue;
    if (released < created && held_[i].epoch < mapping_commits_) {
      released += held_[i].extent.count;
      plan.released.push_back(held_[i]);
    } else {
      kept.push_back(held_[i]);
    }
  }
  held_ = std::move(kept);
  ++mapping_commits_;
  return plan;
}

}  // namespace zt
