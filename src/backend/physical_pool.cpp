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

bool PhysicalPool::holds(const ChunkResidency* residency, Extent extent) const {
  return std::any_of(held_.begin(), held_.end(), [&](const Held& held) { return same(held, residency, extent); });
}

void PhysicalPool::discarded(ChunkResidency* residency, const std::vector<Extent>& extents) {
  for (Extent extent : extents)
    if (!holds(residency, extent)) held_.push_back(Held{residency, extent, mapping_commits_});
}

PhysicalPool::Plan PhysicalPool::plan_commit(const std::vector<Extent>& needed) {
  drop_live();
  // Reusable: discarded before the previous mapping commit; the rest stays held.
  std::vector<Held> reusable, kept;
  for (const Held& held : held_) (held.epoch < mapping_commits_ ? reusable : kept).push_back(held);
  Plan plan;
  for (Extent extent : needed) {
    auto match = std::find_if(reusable.begin(), reusable.end(),
                              [&](const Held& held) { return held.extent.count == extent.count; });
    if (match == reusable.end()) {
      plan.sources.emplace_back();
      continue;
    }
    plan.sources.emplace_back(*match);
    reusable.erase(match);
  }
  plan.released = std::move(reusable);
  held_ = std::move(kept);
  ++mapping_commits_;
  return plan;
}

}  // namespace zt
