// The counting backend (see counting_backend.h).
#include "backend/counting_backend.h"

#include <algorithm>
#include <map>

#include "backend/chunk_residency.h"
#include "core/error.h"

namespace zt {

namespace {

// What the device backend and its host backend count into.
struct Ledger {
  CountedBytes bytes;
  uintptr_t next_address = uintptr_t{1} << 44;  // fake, 64-byte aligned, never dereferenced
  void add(Device device, int64_t delta, bool discardable = false) {
    int64_t& now = device == Device::CPU ? bytes.host : bytes.device;
    int64_t& peak = device == Device::CPU ? bytes.host_peak : bytes.device_peak;
    now += delta;
    peak = std::max(peak, now);
    if (discardable && device != Device::CPU) {
      bytes.discardable += delta;
      bytes.discardable_peak = std::max(bytes.discardable_peak, bytes.discardable);
    }
  }
};

class Counting final : public CountingBackend {
 public:
  Counting(CountingOptions options, std::shared_ptr<Ledger> ledger) : options_(std::move(options)), ledger_(ledger) {
    ledger_->add(options_.device, options_.fixed_bytes);
  }

  const CountedBytes& counted() const override { return ledger_->bytes; }
  void reset_peaks() override {
    ledger_->bytes.device_peak = ledger_->bytes.device;
    ledger_->bytes.host_peak = ledger_->bytes.host;
    ledger_->bytes.discardable_peak = ledger_->bytes.discardable;
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
    auto found = live_.find(reinterpret_cast<uintptr_t>(pointer));
    ZT_CHECK(found != live_.end(), "counting backend: release of ", pointer, ", which it did not hand out");
    ledger_->add(options_.device, -held(found->second), found->second.residency != nullptr);
    std::erase_if(pending_, [&](const PendingChunk& pending) { return pending.allocation == &found->second; });
    live_.erase(found);
  }

  // Discarded chunks stay counted until memory is needed again (a commit that maps chunks, or
  // a synchronisation), as the CUDA backend unmaps them only once the work queued before the
  // discard is done.
  void discard(Tensor range) override {
    Allocation* allocation = discardable(range);
    if (!allocation) return;
    const std::vector<size_t> freed = allocation->residency->discard(offset(range), range.bytes());
    for (size_t chunk : freed) pending_.push_back({allocation, chunk});
  }

  void commit(Tensor range) override {
    Allocation* allocation = discardable(range);
    if (!allocation) return;
    const std::vector<size_t> needed = allocation->residency->commit(offset(range), range.bytes());
    if (needed.empty()) return;
    give_back_pending();
    for (size_t chunk : needed) {
      allocation->residency->set_resident(chunk, true);
      ledger_->add(options_.device, options_.discard_chunk_bytes, true);
    }
  }

  void synchronize() override { give_back_pending(); }

  std::unique_ptr<Backend> make_host_backend() override {
    CountingOptions host;
    host.device = Device::CPU;
    return std::make_unique<Counting>(host, ledger_);
  }
  std::unique_ptr<Backend> make_pageable_host_backend() override { return make_host_backend(); }

  // Computing nothing.
  void copy(Tensor, Tensor) override {}
  void fill(Tensor, float) override {}
  void round_to(Tensor, DType) override {}  // in place, as the CUDA backend's
  void accumulate(Tensor, Tensor, float) override {}
  void scale(Tensor, float) override {}
  void clamp(Tensor, float, float) override {}
  double sum_squares(Tensor) override {
    give_back_pending();  // a synchronising op on a device
    return 0.0;
  }
  bool has_inf_or_nan(Tensor) override {
    give_back_pending();
    return false;
  }
  void matmul(Tensor, Tensor, bool, Tensor, bool, float, float) override {}
  void add_bias(Tensor, Tensor) override {}
  void bias_backward(Tensor, Tensor) override {}
  void embedding_forward(Tensor, Tensor, Tensor) override {}
  void embedding_backward(Tensor, Tensor, Tensor) override {}
  void rmsnorm_forward(Tensor, Tensor, Tensor, Tensor, float) override {}
  void rmsnorm_backward(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor) override {}
  void layernorm_forward(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, float) override {}
  void layernorm_backward(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor) override {}
  void rope_forward(Tensor, Tensor) override {}
  void rope_backward(Tensor, Tensor) override {}
  void swiglu_forward(Tensor, Tensor, Tensor) override {}
  void swiglu_backward(Tensor, Tensor, Tensor, Tensor, Tensor) override {}
  void relu_forward(Tensor, Tensor) override {}
  void relu_backward(Tensor, Tensor, Tensor) override {}
  void attention_forward(Tensor, Tensor, Tensor, Tensor, Tensor, float) override {}
  void attention_backward(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, float) override {}
  double cross_entropy(Tensor, Tensor, Tensor, float) override { return 0.0; }
  void cross_entropy_accumulate(Tensor, Tensor, Tensor, float, Tensor) override {}
  void dropout(Tensor, Tensor, float, RngKey, Tensor) override {}
  void adamw(Tensor, Tensor, Tensor, Tensor, const AdamWParams&) override {}
  void sgd(Tensor, Tensor, Tensor, const SgdParams&) override {}
  void lamb_direction(Tensor, Tensor, Tensor, Tensor, Tensor, const LambParams&) override {}
  void pack_signs(Tensor, Tensor, Tensor, float) override {}
  void add_signs(Tensor, Tensor, float) override {}
  void adalomo_square_sums(Tensor, Tensor, Tensor, int64_t, float) override {}
  double adalomo_moments(Tensor, Tensor, Tensor, Tensor, float) override {
    give_back_pending();  // it returns a value: a synchronising op on a device
    return 0.0;
  }
  void adalomo_direction(Tensor, Tensor, Tensor, Tensor, int64_t, float) override {}
  void dequantize_4bit(Tensor, const Quant4View&) override {}

 private:
  struct Allocation {
    size_t bytes = 0;  // requested
    int64_t size = 0;  // counted (plain allocations)
    std::unique_ptr<ChunkResidency> residency;  // discardable ones: counted by resident chunk
  };
  struct PendingChunk {
    Allocation* allocation;
    size_t chunk;
  };

  void* take(size_t bytes, int64_t size, std::unique_ptr<ChunkResidency> residency) {
    const uintptr_t address = ledger_->next_address;
    const uintptr_t span = std::max<uintptr_t>(bytes, 1);
    const uintptr_t align = residency ? residency->chunk_bytes() : 64;
    ledger_->next_address = (address + span + 2 * align - 1) / align * align;  // a gap: distinct ranges
    Allocation& allocation = live_[address];
    allocation.bytes = bytes;
    allocation.size = size;
    const bool discardable = residency != nullptr;
    allocation.residency = std::move(residency);
    ledger_->add(options_.device, size, discardable);
    return reinterpret_cast<void*>(address);
  }

  int64_t held(const Allocation& allocation) const {
    if (!allocation.residency) return allocation.size;
    int64_t chunks = 0;
    for (size_t i = 0; i < allocation.residency->chunks(); ++i) chunks += allocation.residency->resident(i);
    return chunks * options_.discard_chunk_bytes;
  }

  Allocation* discardable(const Tensor& range) {
    if (!range.numel() || options_.discard_chunk_bytes <= 0) return nullptr;
    auto after = live_.upper_bound(reinterpret_cast<uintptr_t>(range.data));
    if (after == live_.begin()) return nullptr;
    auto found = std::prev(after);
    if (!found->second.residency || reinterpret_cast<uintptr_t>(range.data) >= found->first + found->second.bytes)
      return nullptr;
    base_ = found->first;
    return &found->second;
  }
  size_t offset(const Tensor& range) const { return reinterpret_cast<uintptr_t>(range.data) - base_; }

  void give_back_pending() {
    for (const PendingChunk& pending : pending_) {
      ChunkResidency& residency = *pending.allocation->residency;
      if (!residency.resident(pending.chunk) || !residency.discarded(pending.chunk)) continue;  // committed again
      residency.set_resident(pending.chunk, false);
      ledger_->add(options_.device, -options_.discard_chunk_bytes, true);
    }
    pending_.clear();
  }

  CountingOptions options_;
  std::shared_ptr<Ledger> ledger_;
  std::map<uintptr_t, Allocation> live_;
  std::vector<PendingChunk> pending_;
  uintptr_t base_ = 0;  // of the allocation discardable() found last
};

}  // namespace

std::unique_ptr<CountingBackend> make_counting_backend(CountingOptions options) {
  return std::make_unique<Counting>(std::move(options), std::make_shared<Ledger>());
}

}  // namespace zt
