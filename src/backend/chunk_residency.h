// ChunkResidency: which fixed-size chunks of a discardable buffer must hold memory, given the
// byte ranges discarded and committed so far (Backend::discard / commit). A chunk may be given
// back once the discarded ranges cover all of it (so two neighbouring ZeRO units discarded one
// after the other free the chunk they share); committing any byte of a chunk needs the chunk.
// Pure bookkeeping, shared by the CUDA backend's virtual memory (cuda/cuda_vmm.h) and the
// counting backend that predicts it (counting_backend.h), so both count the same chunks.
#pragma once
#include <cstddef>
#include <map>
#include <vector>

namespace zt {

class ChunkResidency {
 public:
  // All chunks resident, or (resident false) none, the whole range discarded.
  ChunkResidency(size_t bytes, size_t chunk_bytes, bool resident = true);
  size_t chunks() const { return resident_.size(); }
  size_t chunk_bytes() const { return chunk_bytes_; }
  bool resident(size_t chunk) const { return resident_[chunk]; }
  // Marks [offset, offset + bytes) discarded; returns the resident chunks now wholly covered
  // by discarded ranges (the caller gives them back, now or once queued work is done).
  std::vector<size_t> discard(size_t offset, size_t bytes);
  // Marks [offset, offset + bytes) in use again; returns its chunks that hold no memory (the
  // caller maps them). Chunks returned by discard() but still resident are kept.
  std::vector<size_t> commit(size_t offset, size_t bytes);
  // The caller gave chunk `chunk` back / mapped it.
  void set_resident(size_t chunk, bool resident) { resident_[chunk] = resident; }
  // Whether a resident chunk is covered by discarded ranges (may be given back).
  bool discarded(size_t chunk) const;

 private:
  size_t chunk_bytes_;
  std::vector<bool> resident_;
  std::map<size_t, size_t> discarded_;  // begin -> end, merged
};

}  // namespace zt
