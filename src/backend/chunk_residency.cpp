// Chunk and extent bookkeeping of discardable buffers (see chunk_residency.h).
#include "backend/chunk_residency.h"

#include <algorithm>

#include "core/error.h"

namespace zt {

ChunkResidency::ChunkResidency(size_t bytes, size_t chunk_bytes, bool resident)
    : bytes_(bytes), chunk_bytes_(chunk_bytes) {
  ZT_CHECK(chunk_bytes > 0, "ChunkResidency: chunk size 0");
  resident_.assign((bytes + chunk_bytes - 1) / chunk_bytes, resident);
  if (resident_.empty()) return;
  if (resident) extents_[0] = resident_.size();
  else discarded_[0] = resident_.size() * chunk_bytes;
}

size_t ChunkResidency::chunk_end(size_t chunk) const { return std::min((chunk + 1) * chunk_bytes_, bytes_); }

bool ChunkResidency::discarded(Extent extent) const {
  const size_t begin = extent.first * chunk_bytes_, end = chunk_end(extent.first + extent.count - 1);
  auto after = discarded_.upper_bound(begin);
  if (after == discarded_.begin()) return false;
  const auto& interval = *std::prev(after);
  return interval.first <= begin && interval.second >= end;
}

void ChunkResidency::set_mapped(Extent extent, bool mapped) {
  for (size_t chunk = extent.first; chunk < extent.first + extent.count; ++chunk) resident_[chunk] = mapped;
  if (mapped) extents_[extent.first] = extent.count;
  else extents_.erase(extent.first);
}

std::vector<Extent> ChunkResidency::discard(size_t offset, size_t bytes) {
  std::vector<Extent> freed;
  if (!bytes) return freed;
  size_t begin = offset, end = offset + bytes;
  ZT_CHECK(end <= resident_.size() * chunk_bytes_, "discard: ", bytes, " bytes at offset ", offset,
           " run past the buffer of ", resident_.size() * chunk_bytes_, " bytes");
  auto next = discarded_.upper_bound(begin);
  if (next != discarded_.begin() && std::prev(next)->second >= begin) --next;
  while (next != discarded_.end() && next->first <= end) {
    begin = std::min(begin, next->first);
    end = std::max(end, next->second);
    next = discarded_.erase(next);
  }
  discarded_[begin] = end;
  // Only extents inside the merged interval [begin, end) can have become wholly discarded.
  auto extent = extents_.upper_bound(begin / chunk_bytes_);
  if (extent != extents_.begin()) --extent;
  for (; extent != extents_.end() && extent->first * chunk_bytes_ < end; ++extent)
    if (discarded(Extent{extent->first, extent->second})) freed.push_back(Extent{extent->first, extent->second});
  return freed;
}

std::vector<Extent> ChunkResidency::commit(size_t offset, size_t bytes) {
  std::vector<Extent> needed;
  if (!bytes) return needed;
  const size_t begin = offset, end = offset + bytes;
  ZT_CHECK(end <= resident_.size() * chunk_bytes_, "commit: ", bytes, " bytes at offset ", offset,
           " run past the buffer of ", resident_.size() * chunk_bytes_, " bytes");
  auto it = discarded_.upper_bound(begin);
  if (it != discarded_.begin()) --it;
  while (it != discarded_.end() && it->first < end) {
    const size_t from = it->first, to = it->second;
    if (to <= begin) {
      ++it;
      continue;
    }
    it = discarded_.erase(it);
    if (from < begin) discarded_[from] = begin;
    if (to > end) discarded_[end] = to;
  }
  // Runs of chunks without memory; a chunk the range holds only part of is an extent alone.
  const size_t first = begin / chunk_bytes_, last = (end - 1) / chunk_bytes_;
  bool joinable = false;  // the chunk before extends needed.back()
  for (size_t chunk = first; chunk <= last; ++chunk) {
    const bool alone = (chunk == first && begin > chunk * chunk_bytes_) || (chunk == last && end < chunk_end(chunk));
    if (resident_[chunk]) {
      joinable = false;
      continue;
    }
    if (joinable && !alone) ++needed.back().count;
    else needed.push_back(Extent{chunk, 1});
    joinable = !alone;
  }
  return needed;
}

}  // namespace zt
