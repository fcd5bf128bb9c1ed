// Chunk bookkeeping of discardable buffers (see chunk_residency.h).
#include "backend/chunk_residency.h"

#include <algorithm>

#include "core/error.h"

namespace zt {

ChunkResidency::ChunkResidency(size_t bytes, size_t chunk_bytes, bool resident)
    : chunk_bytes_(chunk_bytes), resident_((bytes + chunk_bytes - 1) / chunk_bytes, resident) {
  ZT_CHECK(chunk_bytes > 0, "ChunkResidency: chunk size 0");
  if (!resident && !resident_.empty()) discarded_[0] = resident_.size() * chunk_bytes;
}

bool ChunkResidency::discarded(size_t chunk) const {
  const size_t begin = chunk * chunk_bytes_, end = begin + chunk_bytes_;
  auto after = discarded_.upper_bound(begin);
  if (after == discarded_.begin()) return false;
  const auto& interval = *std::prev(after);
  return interval.first <= begin && interval.second >= end;
}

std::vector<size_t> ChunkResidency::discard(size_t offset, size_t bytes) {
  std::vector<size_t> freed;
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
  for (size_t chunk = (begin + chunk_bytes_ - 1) / chunk_bytes_; (chunk + 1) * chunk_bytes_ <= end; ++chunk)
    if (resident_[chunk]) freed.push_back(chunk);
  return freed;
}

std::vector<size_t> ChunkResidency::commit(size_t offset, size_t bytes) {
  std::vector<size_t> needed;
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
  for (size_t chunk = begin / chunk_bytes_; chunk <= (end - 1) / chunk_bytes_; ++chunk)
    if (!resident_[chunk]) needed.push_back(chunk);
  return needed;
}

}  // namespace zt
