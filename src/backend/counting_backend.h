// The counting backend: a Backend that computes nothing and allocates no memory, but counts the
// bytes a run would hold, allocation by allocation, as the real backend would (its allocator's
// rounding, its discardable buffers' chunks). The memory model runs the real set-up and one real
// training step (ParamStore, ZeroEngine, the model) on it (train/memory_model.h), so zerotune's
// prediction of a rank's memory is the code that allocates it, not a second formula.
//
// Pointers it hands out are distinct addresses that are never dereferenced; copies, fills and
// every op are no-ops; reductions return 0 and "no inf/NaN".
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "backend/attention_scratch_rules.h"

namespace zt {

struct CountingOptions {
  Device device = Device::CUDA;  // what the counted backend is: its host backend counts host bytes
  // The bytes an allocation of `bytes` really takes (the caching allocator's size classes);
  // empty: exactly `bytes`.
  std::function<int64_t(int64_t bytes)> allocation_size;
  // Discardable buffers are mapped in chunks of this size (the CUDA backend's virtual memory
  // granularity); 0: they are plain allocations whose discard gives nothing back.
  int64_t discard_chunk_bytes = 0;
  int64_t fixed_bytes = 0;  // held from the start (the real backend's workspace, status words)
  // The scratch the counted backend's attention_forward/backward take (the CUDA backend's:
  // cuda_attention_scratch); null: none. Counted under kTermAttentionWorkspace, and listed as
  // scratch by ZT_ALLOCATION_LOG.
  AttentionScratch (*attention_scratch)(const AttentionCallShape& call, bool backward) = nullptr;
  // What the rows of packed calls (positions given) hold, handed to attention_scratch with each
  // call (the positions' values are never read here); default: one sample per row.
  PackedRows packed_rows;
};

// Bytes held now and at most, on the counted device and in the host memory its host backend
// (make_host_backend: ZeRO-Offload's buffers) allocates.
struct CountedBytes {
  int64_t device = 0, device_peak = 0;
  int64_t host = 0, host_peak = 0;
  int64_t discardable = 0, discardable_peak = 0;  // of `device`: the discardable buffers' chunks
  // The same bytes by term (what the memory model calls them: parameters, activations, ...):
  // held now, and held when the device (host) peak was last reached. Each map sums to its total.
  std::map<std::string, int64_t> device_terms, device_terms_at_peak;
  std::map<std::string, int64_t> host_terms, host_terms_at_peak;
};

// Terms every counting backend uses by itself.
inline constexpr const char* kTermAllocatorSlack = "allocator slack";  // size class - bytes asked for
inline constexpr const char* kTermBackendFixed = "backend workspace";  // CountingOptions::fixed_bytes
inline constexpr const char* kTermAttentionWorkspace = "attention workspace";  // CountingOptions::attention_scratch

class CountingBackend : public Backend {
 public:
  virtual const CountedBytes& counted() const = 0;
  virtual void reset_peaks() = 0;  // peaks := what is held now
  // The term the allocations from now on are counted under ("other" until set).
  virtual void set_term(const std::string& term) = 0;
  // Counts the live allocation that holds `address` under `term` from now on; chunks of a
  // discardable one that are committed later count under `later_term` (empty: `term`), e.g. a
  // ZeRO-3 parameter buffer: its partition, then the units gathered into it. False when no live
  // allocation holds the address.
  virtual bool move_to_term(const void* address, const std::string& term, const std::string& later_term = "") = 0;
};

std::unique_ptr<CountingBackend> make_counting_backend(CountingOptions options);

}  // namespace zt
