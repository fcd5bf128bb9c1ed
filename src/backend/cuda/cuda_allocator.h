// CachingAllocator: device memory for the CUDA backend. Released blocks are kept and handed out
// again, so a training step that repeats the previous step's allocations calls cudaMalloc only
// on the first step (cudaMalloc and cudaFree synchronise the device and cost milliseconds).
// Counts the bytes in use, their peak and the cudaMalloc calls, for metrics and for tests.
//
// All work of a backend runs on its one stream, so a block released while kernels that use it
// are still queued can be handed to the next allocation at once: that allocation's kernels are
// queued behind them. Not thread-safe: one backend per thread.
//
// Without caching (ZT_CUDA_CACHING_ALLOCATOR=0 by default, or CudaBackendOptions) every block is a cudaMalloc of exactly the
// requested bytes and goes back with cudaFree at release, so that AddressSanitizer on the
// emulated device and compute-sanitizer on a GPU see each buffer's true end and every use
// after release (a cached block would hide both). Slow: cudaFree synchronises the device.
#pragma once
#include <cstddef>
#include <map>
#include <unordered_map>

namespace zt::cuda {

class CachingAllocator {
 public:
  // caching false: every block is its own cudaMalloc of the exact bytes, freed at release.
  CachingAllocator(int device, bool caching) : device_(device), caching_(caching) {}
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // At least `bytes` of device memory, 256-byte aligned (cudaMalloc's alignment).
  void* allocate(size_t bytes);
  // Gives a block from allocate() back to the cache; nullptr is ignored.
  void release(void* pointer);
  // Returns every cached (unused) block to the driver.
  void empty_cache();

  size_t bytes_in_use() const { return bytes_in_use_; }   // blocks handed out now (rounded sizes)
  size_t peak_bytes_in_use() const { return peak_bytes_; }
  void reset_peak() { peak_bytes_ = bytes_in_use_; }
  size_t bytes_reserved() const { return bytes_reserved_; }  // in use + cached
  size_t device_allocations() const { return device_allocations_; }  // cudaMalloc calls so far

  // The size class of a request: multiples of 512 bytes below 1 MiB, of 2 MiB above, so that
  // blocks of slightly different sizes (sequence lengths vary per batch) are interchangeable.
  static size_t rounded_size(size_t bytes);

  // The default: false when the environment has ZT_CUDA_CACHING_ALLOCATOR=0.
  static bool caching_by_default();

 private:
  void* device_malloc(size_t bytes);

  int device_ = 0;
  bool caching_ = true;
  std::multimap<size_t, void*> free_blocks_;        // size -> block, cached for reuse
  std::unordered_map<void*, size_t> live_blocks_;   // block -> size, handed out
  size_t bytes_in_use_ = 0;
  size_t peak_bytes_ = 0;
  size_t bytes_reserved_ = 0;
  size_t device_allocations_ = 0;
};

}  // namespace zt::cuda
