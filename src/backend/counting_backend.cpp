// The counting backend (see counting_backend.h).
#include "backend/counting_backend.h"

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "backend/allocation_log.h"
#include "backend/chunk_residency.h"
#include "backend/counting_optimizer_kernels.h"
#include "backend/gpu_memory_rules.h"
#include "backend/physical_pool.h"
#include "core/error.h"

namespace zt {

namespace {

struct Allocation {
  size_t bytes = 0;  // requested
  int64_t size = 0;  // counted (plain allocations)
  std::unique_ptr<ChunkResidency> residency;  // discardable ones: counted by resident chunk
  Device device = Device::CUDA;  // which side of the ledger counts it
  std::string term;              // what it is counted as
  std::string later_term;        // discardable: what chunks committed from now on count as (empty: term)
  std::vector<std::string> chunk_terms;  // discardable: the term each resident chunk counts under
  uint64_t born = 0;             // Ledger::allocations when it was made
  bool pinned = false;           // host memory of a pinned host backend (make_host_backend)
};

// What the device backend and its host backend count into: bytes by side and by term, and
// every live allocation of both (one address space, so an address names one allocation).
struct Ledger {
  CountedBytes bytes;
  std::map<uintptr_t, Allocation> live;
  uintptr_t next_address = uintptr_t{1} << 44;  // fake, 64-byte aligned, never dereferenced
  std::string term = "other";                   // of new allocations (CountingBackend::set_term)
  uint64_t allocations = 0;                     // made so far
  uint64_t device_peak_allocations = 0, host_peak_allocations = 0;  // made when each peak was reached

  void add(Device device, const std::string& term_of, int64_t delta, bool discardable = false) {
    const bool host = device == Device::CPU;
    int64_t& now = host ? bytes.host : bytes.device;
    int64_t& peak = host ? bytes.host_peak : bytes.device_peak;
    std::map<std::string, int64_t>& terms = host ? bytes.host_terms : bytes.device_terms;
    now += delta;
    terms[term_of] += delta;
    if (now > peak || (delta > 0 && now == peak)) {  // a new peak: what it is made of
      peak = now;
      (host ? bytes.host_terms_at_peak : bytes.device_terms_at_peak) = terms;
      (host ? host_peak_allocations : device_peak_allocations) = allocations;
    }
    if (discardable && !host) {
      bytes.discardable += delta;
      bytes.discardable_peak = std::max(bytes.discardable_peak, bytes.discardable);
    }
  }
};

class Counting final : public CountingBackend {
 public:
  Counting(CountingOptions options, std::shared_ptr<Ledger> ledger, bool pinned = false)
      : options_(std::move(options)), ledger_(ledger), pinned_(pinned) {
    ledger_->add(options_.device, kTermBackendFixed, options_.fixed_bytes);
  }

  const CountedBytes& counted() const override { return ledger_->bytes; }
  void reset_peaks() override {
    ledger_->bytes.device_peak = ledger_->bytes.device;
    ledger_->bytes.host_peak = ledger_->bytes.host;
    ledger_->bytes.discardable_peak = ledger_->bytes.discardable;
    ledger_->bytes.device_terms_at_peak = ledger_->bytes.device_terms;
    ledger_->bytes.host_terms_at_peak = ledger_->bytes.host_terms;
    ledger_->device_peak_allocations = ledger_->host_peak_allocations = ledger_->allocations;
  }

  void set_term(const std::string& term) override { ledger_->term = term; }

  bool move_to_term(const void* address, const std::string& term, const std::string& later_term) override {
    auto after = ledger_->live.upper_bound(reinterpret_cast<uintptr_t>(address));
    if (after == ledger_->live.begin()) return false;
    auto found = std::prev(after);
    Allocation& allocation = found->second;
    if (reinterpret_cast<uintptr_t>(address) >= found->first + std::max<size_t>(allocation.bytes, 1)) return false;
    std::map<std::string, int64_t>& terms =
        allocation.device == Device::CPU ? ledger_->bytes.host_terms : ledger_->bytes.device_terms;
    if (allocation.residency) {
      for (size_t chunk = 0; chunk < allocation.residency->chunks(); ++chunk) {
        if (!allocation.residency->resident(chunk)) continue;
        terms[allocation.chunk_terms[chunk]] -= options_.discard_chunk_bytes;
        terms[term] += options_.discard_chunk_bytes;
        allocation.chunk_terms[chunk] = term;
      }
    } else {
      terms[allocation.term] -= held_requested(allocation);
      terms[term] += held_requested(allocation);
      // A plain allocation live now and made before the peak was held at the peak: it is this
      // term there too (the logits are named once the forward that made them returns).
      const bool host = allocation.device == Device::CPU;
      if (allocation.born <= (host ? ledger_->host_peak_allocations : ledger_->device_peak_allocations)) {
        std::map<std::string, int64_t>& at_peak = host ? ledger_->bytes.host_terms_at_peak : ledger_->bytes.device_terms_at_peak;
        if (at_peak.count(allocation.term)) {
          at_peak[allocation.term] -= held_requested(allocation);
          at_peak[term] += held_requested(allocation);
        }
      }
    }
    allocation.term = term;
    allocation.later_term = later_term.empty() ? term : later_term;
    return true;
  }

  Device device() const override { return options_.device; }
  std::string name() const override { return "counting"; }

  void* allocate(size_t bytes) override {
    const int64_t size = options_.allocation_size ? options_.allocation_size(static_cast<int64_t>(bytes))
                                                  : static_cast<int64_t>(bytes);
    return take(bytes, size, nullptr);
  }

  void* allocate_discardable(size_t bytes, bool committed) override {
    if (options_.discard_chunk_bytes <= 0) return allocate(bytes);
    const size_t chunk = static_cast<size_t>(options_.discard_chunk_bytes);
    auto residency = std::make_unique<ChunkResidency>(std::max<size_t>(bytes, 1), chunk, committed);
    const int64_t size = committed ? static_cast<int64_t>(residency->chunks() * chunk) : 0;
    return take(bytes, size, std::move(residency));
  }

  void release(void* pointer) override {
    log_release("counting", pointer);
    auto found = ledger_->live.find(reinterpret_cast<uintptr_t>(pointer));
    ZT_CHECK(found != ledger_->live.end(), "counting backend: release of ", pointer, ", which it did not hand out");
    const Allocation& allocation = found->second;
    if (allocation.residency) {
      for (size_t chunk = 0; chunk < allocation.residency->chunks(); ++chunk)
        if (allocation.residency->resident(chunk))
          ledger_->add(options_.device, allocation.chunk_terms[chunk], -options_.discard_chunk_bytes, true);
    } else {
      ledger_->add(options_.device, allocation.term, -held_requested(allocation));
      ledger_->add(options_.device, kTermAllocatorSlack, -(held(allocation) - held_requested(allocation)));
    }
    if (allocation.residency) {
      pool_.forget(allocation.residency.get());
      owners_.erase(allocation.residency.get());
    }
    ledger_->live.erase(found);
  }

  // Discarded extents stay counted until a later commit reuses or gives back their memory, by
  // the CUDA backend's rule (physical_pool.h), so both count the same bytes at every moment.
  void discard(Tensor range) override {
    Allocation* allocation = discardable(range);
    if (!allocation) return;
    pool_.discarded(allocation->residency.get(), allocation->residency->discard(offset(range), range.bytes()));
  }

  void commit(Tensor range) override {
    Allocation* allocation = discardable(range);
    if (!allocation) return;
    const std::vector<Extent> needed = allocation->residency->commit(offset(range), range.bytes());
    pool_.drop_live();
    if (needed.empty()) return;
    const PhysicalPool::Plan plan = pool_.plan_commit(needed);
    for (const std::optional<PhysicalPool::Held>& source : plan.sources)
      if (source) give_back(*source);
    for (const PhysicalPool::Held& released : plan.released) give_back(released);
    for (Extent extent : needed) {
      allocation->residency->set_mapped(extent, true);
      for (size_t chunk = extent.first; chunk < extent.first + extent.count; ++chunk) {
        allocation->chunk_terms[chunk] = allocation->later_term;
        ledger_->add(options_.device, allocation->later_term, options_.discard_chunk_bytes, true);
      }
    }
  }

  std::unique_ptr<Backend> make_host_backend() override { return host_backend(true); }
  std::unique_ptr<Backend> make_pageable_host_backend() override { return host_backend(false); }

  // Where the CUDA backend waits for the device (cuda_memory.cu, cuda_backend.cpp), the held
  // extents become reusable here too: synchronize(), the ops that return a value, a copy that
  // downloads, an upload larger than the pinned staging takes, and a queued copy (copy_async,
  // transfer_async) that is one of those because a side is pageable or both are host memory. A
  // staged upload and a queued copy to or from pinned host memory wait for nothing: counting a
  // wait there made held extents reusable that the GPU still held (offload_param's gathers,
  // queued from the pinned partition: one unit more on an H200 than the model said, 2026-11-28).
  void synchronize() override { pool_.synchronized(); }
  void copy(Tensor dst, Tensor src) override {
    if (copy_waits(dst, src)) pool_.synchronized();
  }
  void copy_async(Tensor dst, Tensor src) override {
    if (queued_copy_is_copy(dst, src)) copy(dst, src);
  }
  std::unique_ptr<BackendEvent> transfer_async(Tensor dst, Tensor src) override {
    if (queued_copy_is_copy(dst, src)) pool_.synchronized();  // the CUDA backend synchronises, then copies
    return Backend::record_event();
  }

  // Computing nothing.
  void fill(Tensor, float) override {}
  void round_to(Tensor, DType) override {}  // in place, as the CUDA backend's
  void accumulate(Tensor, Tensor, float) override {}
  void scale(Tensor, float) override {}
  void clamp(Tensor, float, float) override {}
  double sum_squares(Tensor) override {
    pool_.synchronized();
    return 0.0;
  }
  bool has_inf_or_nan(Tensor) override {
    pool_.synchronized();
    return false;
  }
  void matmul(Tensor, Tensor, bool, Tensor, bool, float, float) override {}
  void add_bias(Tensor, Tensor) override {}
  void bias_backward(Tensor, Tensor) override {}
  void embedding_forward(Tensor, Tensor, Tensor) override {}
  void embedding_backward(Tensor, Tensor, Tensor) override {}
  void rmsnorm_forward(Tensor, Tensor, Tensor, Tensor, float) override {}
  void rmsnorm_backward(Tensor, GradStore, Tensor, Tensor, Tensor, Tensor, Tensor) override {}
  void layernorm_forward(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, float) override {}
  void layernorm_backward(Tensor, GradStore, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor) override {}
  void rope_forward(Tensor, Tensor, Tensor) override {}
  void rope_backward(Tensor, Tensor, Tensor) override {}
  void swiglu_forward(Tensor, Tensor, Tensor) override {}
  void swiglu_backward(Tensor, Tensor, Tensor, Tensor, Tensor) override {}
  void relu_forward(Tensor, Tensor) override {}
  void relu_backward(Tensor, Tensor, Tensor) override {}
  void attention_forward(Tensor, Tensor, Tensor q, Tensor k, Tensor, Tensor positions, float) override {
    hold_attention_scratch(q, k, positions, /*backward=*/false);
  }
  void attention_backward(Tensor, Tensor, Tensor, Tensor, Tensor q, Tensor k, Tensor, Tensor, Tensor,
                          Tensor positions, float) override {
    hold_attention_scratch(q, k, positions, /*backward=*/true);
  }
  void attention_cached_forward(Tensor, Tensor, Tensor, Tensor, float) override {}
  double cross_entropy(Tensor, Tensor, Tensor, float) override { return 0.0; }
  void cross_entropy_accumulate(Tensor, Tensor, Tensor, float, Tensor) override {}
  void dropout(Tensor, Tensor, float, RngKey, Tensor) override {}
  void dequantize_4bit(Tensor, const Quant4View&) override {}
  void quantize_blocks(Tensor, Tensor, Tensor, int, int64_t) override {}
  void dequantize_blocks(Tensor, Tensor, Tensor, int, int64_t, bool) override {}
  OptimizerKernels& optimizer_kernels() override { return optimizer_kernels_; }

 private:
  // The attention's scratch as the counted backend takes it (CountingOptions::attention_scratch):
  // q [B, T, H, D], k [B, T, Hkv, D]; positions given: packed rows. Its buffers are held for the
  // op and given back; the index arrays stay, replaced only by larger ones (as the CUDA backend's).
  void hold_attention_scratch(const Tensor& q, const Tensor& k, const Tensor& positions, bool backward) {
    if (!options_.attention_scratch || q.ndim != 4 || k.ndim != 4) return;
    const AttentionCallShape call{q.dtype,    q.shape[0], q.shape[1], q.shape[2],
                                  k.shape[2], q.shape[3], !positions.empty(), options_.packed_rows};
    const AttentionScratch scratch = options_.attention_scratch(call, backward);
    const std::string term = ledger_->term;
    ledger_->term = kTermAttentionWorkspace;
    if (scratch.index_bytes > attention_index_bytes_) {
      void* grown = take_scratch(scratch.index_bytes);
      if (attention_index_) release(attention_index_);
      attention_index_ = grown;
      attention_index_bytes_ = scratch.index_bytes;
    }
    std::vector<void*> held;
    for (int64_t bytes : scratch.buffers)
      if (bytes > 0) held.push_back(take_scratch(bytes));  // as Buffer: nothing for 0 bytes
    for (auto buffer = held.rbegin(); buffer != held.rend(); ++buffer) release(*buffer);
    ledger_->term = term;
  }
  void* take_scratch(int64_t bytes) {
    const int64_t size = options_.allocation_size ? options_.allocation_size(bytes) : bytes;
    return take(static_cast<size_t>(bytes), size, nullptr, /*scratch=*/true);
  }

  void* take(size_t bytes, int64_t size, std::unique_ptr<ChunkResidency> residency, bool scratch = false) {
    const uintptr_t address = ledger_->next_address;
    const uintptr_t span = std::max<uintptr_t>(bytes, 1);
    const uintptr_t align = residency ? residency->chunk_bytes() : 64;
    ledger_->next_address = (address + span + 2 * align - 1) / align * align;  // a gap: distinct ranges
    Allocation& allocation = ledger_->live[address];
    allocation.born = ++ledger_->allocations;
    allocation.bytes = bytes;
    allocation.size = size;
    allocation.device = options_.device;
    allocation.pinned = pinned_ && options_.device == Device::CPU;
    allocation.term = ledger_->term;
    allocation.later_term = ledger_->term;
    const bool discardable = residency != nullptr;
    if (discardable) {
      allocation.chunk_terms.assign(residency->chunks(), ledger_->term);
      owners_[residency.get()] = &allocation;
    }
    allocation.residency = std::move(residency);
    // The bytes asked for under the allocation's term, the size class's rounding as slack
    // (slack first: a peak reached by this allocation shows both).
    ledger_->add(options_.device, kTermAllocatorSlack, held(allocation) - held_requested(allocation));
    ledger_->add(options_.device, allocation.term, held_requested(allocation), discardable);
    log_allocation("counting", bytes, reinterpret_cast<void*>(address), scratch);
    return reinterpret_cast<void*>(address);
  }

  // Of held(): what its term counts. A plain allocation's bytes asked for (the rest is its size
  // class's slack); a discardable one's resident chunks (their granularity is the buffer's).
  int64_t held_requested(const Allocation& allocation) const {
    if (allocation.residency) return held(allocation);
    return std::min<int64_t>(allocation.size, static_cast<int64_t>(allocation.bytes));
  }

  int64_t held(const Allocation& allocation) const {
    if (!allocation.residency) return allocation.size;
    int64_t chunks = 0;
    for (size_t i = 0; i < allocation.residency->chunks(); ++i) chunks += allocation.residency->resident(i);
    return chunks * options_.discard_chunk_bytes;
  }

  std::unique_ptr<Backend> host_backend(bool pinned) {
    CountingOptions host;
    host.device = Device::CPU;
    return std::make_unique<Counting>(host, ledger_, pinned);
  }

  // The CUDA backend's copy() waits for the device to download (into host memory, or a host ->
  // host conversion, which goes through the device) and for an upload past the staging's limit.
  static bool copy_waits(const Tensor& dst, const Tensor& src) {
    if (dst.device == Device::CPU) return src.device != Device::CPU || dst.dtype != src.dtype;
    return src.device == Device::CPU && static_cast<int64_t>(src.bytes()) > kHostStagingMaxUploadBytes;
  }
  // Its copy_async() and transfer_async() are copy() for host-only copies and pageable memory.
  bool queued_copy_is_copy(const Tensor& dst, const Tensor& src) const {
    return (dst.device == Device::CPU && src.device == Device::CPU) || pageable(dst) || pageable(src);
  }
  // Host memory no pinned host backend of this ledger allocated (a host vector, a pageable buffer).
  bool pageable(const Tensor& tensor) const {
    if (tensor.device != Device::CPU) return false;
    const auto after = ledger_->live.upper_bound(reinterpret_cast<uintptr_t>(tensor.data));
    if (after == ledger_->live.begin()) return true;
    const auto found = std::prev(after);
    const bool inside = reinterpret_cast<uintptr_t>(tensor.data) < found->first + std::max<size_t>(found->second.bytes, 1);
    return !(inside && found->second.pinned);
  }

  Allocation* discardable(const Tensor& range) {
    if (!range.numel() || options_.discard_chunk_bytes <= 0) return nullptr;
    auto after = ledger_->live.upper_bound(reinterpret_cast<uintptr_t>(range.data));
    if (after == ledger_->live.begin()) return nullptr;
    auto found = std::prev(after);
    if (!found->second.residency || reinterpret_cast<uintptr_t>(range.data) >= found->first + found->second.bytes)
      return nullptr;
    base_ = found->first;
    return &found->second;
  }
  size_t offset(const Tensor& range) const { return reinterpret_cast<uintptr_t>(range.data) - base_; }

  // A held extent's physical memory goes back (or to the extent that reuses it).
  void give_back(const PhysicalPool::Held& held) {
    const Allocation& allocation = *owners_.at(held.residency);
    held.residency->set_mapped(held.extent, false);
    for (size_t chunk = held.extent.first; chunk < held.extent.first + held.extent.count; ++chunk)
      ledger_->add(options_.device, allocation.chunk_terms[chunk], -options_.discard_chunk_bytes, true);
  }

  CountingOptions options_;
  std::shared_ptr<Ledger> ledger_;
  bool pinned_ = false;  // a host backend whose allocations are pinned (make_host_backend)
  PhysicalPool pool_;  // of this device's discardable buffers
  CountingOptimizerKernels optimizer_kernels_{pool_};  // declared after pool_, which it uses
  std::map<const ChunkResidency*, const Allocation*> owners_;
  uintptr_t base_ = 0;  // of the allocation discardable() found last
  void* attention_index_ = nullptr;  // the attention's kept index arrays (hold_attention_scratch)
  int64_t attention_index_bytes_ = 0;
};

}  // namespace

std::unique_ptr<CountingBackend> make_counting_backend(CountingOptions options) {
  return std::make_unique<Counting>(std::move(options), std::make_shared<Ledger>());
}

}  // namespace zt
