// ChunkResidency: which fixed-size chunks of a discardable buffer hold memory, and in which
// extents (runs of chunks mapped by one physical allocation), given the byte ranges discarded
// and committed so far (Backend::discard / commit). An extent is the unit of mapping: a commit
// maps the chunks it needs as a few extents, and an extent is given back only when the discarded
// ranges cover all of it. A commit's extents are: the chunk holding its first byte alone when
// the range starts inside it, the chunk holding its last byte alone when the range ends inside
// it (a neighbouring range may use either after this one is discarded), and one extent per run
// of the other chunks it needs. So two neighbouring ZeRO units discarded one after the other
// free the chunk they share, and each unit's own chunks go back together.
// Pure bookkeeping, shared by the CUDA backend's virtual memory (cuda/cuda_vmm.h) and the
// counting backend that predicts it (counting_backend.h), so both count the same chunks.
#pragma once
#include <cstddef>
#include <map>
#include <vector>

namespace zt {

struct Extent {
  size_t first = 0, count = 0;  // chunks [first, first + count)
};

class ChunkResidency {
 public:
  // `bytes` of the buffer in chunks of `chunk_bytes` (the last chunk may hold fewer of its
  // bytes). All of it resident as one extent, or (resident false) none, all of it discarded.
  ChunkResidency(size_t bytes, size_t chunk_bytes, bool resident = true);
  size_t chunks() const { return resident_.size(); }
  size_t chunk_bytes() const { return chunk_bytes_; }
  bool resident(size_t chunk) const { return resident_[chunk]; }
  // Marks [offset, offset + bytes) discarded; returns the mapped extents that the discarded
  // ranges now cover wholly (the caller gives them back, now or once queued work is done; an
  // extent still waiting for that is returned again).
  std::vector<Extent> discard(size_t offset, size_t bytes);
  // Marks [offset, offset + bytes) in use again; returns the extents to map for its chunks that
  // hold no memory (see above). Extents returned by discard() but still mapped are kept.
  std::vector<Extent> commit(size_t offset, size_t bytes);
  // The caller mapped `extent` / gave it back.
  void set_mapped(Extent extent, bool mapped);
  // Whether the discarded ranges cover all of `extent` (it may be given back).
  bool discarded(Extent extent) const;
  // The mapped extents, first chunk -> chunks.
  const std::map<size_t, size_t>& extents() const { return extents_; }

 private:
  size_t chunk_end(size_t chunk) const;  // in bytes, the buffer's end for the last chunk

  size_t bytes_, chunk_bytes_;
  std::vector<bool> resident_;
  std::map<size_t, size_t> extents_;    // mapped: first chunk -> chunks
  std::map<size_t, size_t> discarded_;  // begin -> end, merged
};

}  // namespace zt
