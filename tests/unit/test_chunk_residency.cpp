// Discardable buffers: which chunks and extents hold memory after discards and commits
// (chunk_residency.h), when their memory is reused or given back (physical_pool.h), and the
// counting backend that the memory model runs the trainer's code on (counting_backend.h).
#include <boost/test/unit_test.hpp>

#include <functional>
#include <utility>
#include <vector>

#include "backend/buffer.h"
#include "backend/chunk_residency.h"
#include "backend/counting_backend.h"
#include "backend/gpu_memory_rules.h"
#include "backend/physical_pool.h"

namespace zt {
namespace {

BOOST_AUTO_TEST_SUITE(chunk_residency)

// Extents as (first chunk, chunks) pairs, for comparisons.
std::vector<std::pair<size_t, size_t>> pairs(const std::vector<Extent>& extents) {
  std::vector<std::pair<size_t, size_t>> out;
  for (Extent extent : extents) out.emplace_back(extent.first, extent.count);
  return out;
}
using Pairs = std::vector<std::pair<size_t, size_t>>;

void map_all(ChunkResidency& chunks, const std::vector<Extent>& extents) {
  for (Extent extent : extents) chunks.set_mapped(extent, true);
}

BOOST_AUTO_TEST_CASE(a_commit_maps_its_partial_end_chunks_alone_and_the_rest_as_one_extent) {
  ChunkResidency chunks(1000, 100, false);  // chunks 0-9, nothing mapped
  // [150, 720): chunk 1 holds its first byte (partial), chunk 7 its last (partial), 2-6 whole.
  BOOST_TEST(pairs(chunks.commit(150, 570)) == Pairs({{1, 1}, {2, 5}, {7, 1}}));
  // Aligned ranges are one extent; the buffer's end counts as a chunk end.
  ChunkResidency tail(950, 100, false);
  BOOST_TEST(pairs(tail.commit(200, 750)) == Pairs({{2, 8}}));
  // A range inside one chunk: one extent of one chunk.
  BOOST_TEST(pairs(tail.commit(10, 20)) == Pairs({{0, 1}}));
}

BOOST_AUTO_TEST_CASE(a_shared_chunk_is_freed_once_discards_cover_all_of_it) {
  ChunkResidency chunks(400, 100, false);  // chunks [0,100) [100,200) [200,300) [300,400)
  // Unit A = [0, 150), unit B = [150, 400): chunk 1 is shared.
  const std::vector<Extent> a = chunks.commit(0, 150);
  BOOST_TEST(pairs(a) == Pairs({{0, 1}, {1, 1}}));  // chunk 1 partial: alone
  map_all(chunks, a);
  const std::vector<Extent> b = chunks.commit(150, 250);
  BOOST_TEST(pairs(b) == Pairs({{2, 2}}));  // chunk 1 is mapped already
  map_all(chunks, b);
  BOOST_TEST(pairs(chunks.discard(0, 150)) == Pairs({{0, 1}}));  // chunk 1 still holds B's bytes
  chunks.set_mapped(Extent{0, 1}, false);
  BOOST_TEST(pairs(chunks.discard(150, 250)) == Pairs({{1, 1}, {2, 2}}));  // now all of chunk 1 is discarded
  chunks.set_mapped(Extent{1, 1}, false);
  chunks.set_mapped(Extent{2, 2}, false);
  // Gathering B again needs chunks 1-3, not chunk 0.
  BOOST_TEST(pairs(chunks.commit(150, 250)) == Pairs({{1, 1}, {2, 2}}));
}

BOOST_AUTO_TEST_CASE(an_extent_goes_back_only_when_all_of_it_is_discarded) {
  ChunkResidency chunks(300, 100);  // committed: one extent of 3 chunks
  BOOST_TEST(chunks.discard(0, 200).empty());
  BOOST_TEST(pairs(chunks.discard(200, 100)) == Pairs({{0, 3}}));
}

BOOST_AUTO_TEST_CASE(a_commit_before_the_extent_is_given_back_keeps_it) {
  ChunkResidency chunks(300, 100);
  BOOST_TEST(pairs(chunks.discard(0, 300)) == Pairs({{0, 3}}));
  BOOST_TEST(chunks.discarded(Extent{0, 3}));
  BOOST_TEST(chunks.commit(120, 10).empty());  // still mapped: nothing to map
  BOOST_TEST(!chunks.discarded(Extent{0, 3}));
}

// physical_pool.h: a commit reuses the memory of extents discarded before the previous commit
// that mapped memory, of the same size; the other reusable ones are given back.
// Applies physical_pool.h's decisions to one buffer, as the CUDA and counting backends do.
struct PooledBuffer {
  ChunkResidency chunks{2000, 100, false};  // 20 chunks, nothing mapped
  PhysicalPool pool;
  PhysicalPool::Plan commit(size_t offset, size_t bytes) {
    const std::vector<Extent> needed = chunks.commit(offset, bytes);
    pool.drop_live();
    if (needed.empty()) return {};
    PhysicalPool::Plan plan = pool.plan_commit(needed);
    for (const auto& source : plan.sources)
      if (source) chunks.set_mapped(source->extent, false);
    for (const auto& released : plan.released) chunks.set_mapped(released.extent, false);
    map_all(chunks, needed);
    return plan;
  }
  void discard(size_t offset, size_t bytes) { pool.discarded(&chunks, chunks.discard(offset, bytes)); }
};

bool reuses(const PhysicalPool::Plan& plan, size_t first) {
  return plan.sources.size() == 1 && plan.sources[0] && plan.sources[0]->extent.first == first;
}
bool creates(const PhysicalPool::Plan& plan) { return plan.sources.size() == 1 && !plan.sources[0]; }

// physical_pool.h: a commit reuses the memory of extents discarded before the previous commit
// that mapped memory, of the same size; one that must create memory gives the others back.
BOOST_AUTO_TEST_CASE(the_pool_reuses_extents_discarded_before_the_previous_mapping_commit) {
  PooledBuffer b;
  b.commit(0, 200);                              // unit 0: chunks 0-1
  b.commit(200, 200);                            // unit 1: chunks 2-3
  b.discard(0, 200);                             // unit 0 held
  PhysicalPool::Plan plan = b.commit(400, 200);  // unit 2: unit 0 was discarded after the previous mapping commit
  BOOST_TEST((creates(plan) && plan.released.empty()));
  BOOST_TEST(b.pool.holds(&b.chunks, Extent{0, 2}));
  b.discard(200, 200);                           // unit 1 held
  plan = b.commit(600, 200);                     // unit 3 reuses unit 0's memory; unit 1 stays held
  BOOST_TEST(reuses(plan, 0));
  BOOST_TEST(b.pool.holds(&b.chunks, Extent{2, 2}));
  b.discard(400, 200);
  plan = b.commit(800, 100);                     // one new chunk: unit 1's two chunks go back first
  BOOST_TEST(creates(plan));
  BOOST_TEST(pairs({plan.released.front().extent}) == Pairs({{2, 2}}));
  // A held extent committed again is in use: never reused while it is.
  BOOST_TEST(b.chunks.commit(400, 200).empty());
  b.pool.drop_live();
  BOOST_TEST(!b.pool.holds(&b.chunks, Extent{4, 2}));
  // New memory gives back reusable extents, oldest first, at least as much as it takes.
  b.discard(600, 300);   // unit 3 (2 chunks) and chunk 8 held
  b.commit(1000, 100);   // one new chunk: nothing reusable yet
  plan = b.commit(1100, 300);  // 3 new chunks: gives back 2 + 1
  BOOST_TEST((creates(plan) && pairs({plan.released[0].extent, plan.released[1].extent}) == Pairs({{6, 2}, {8, 1}})));
}

BOOST_AUTO_TEST_CASE(reusable_extents_a_commit_does_not_need_wait_for_a_later_one) {
  PooledBuffer b;
  b.commit(0, 200);
  b.commit(200, 300);  // 3 chunks
  b.discard(0, 200);
  b.discard(200, 300);
  b.commit(1000, 100);                           // new memory: nothing reusable yet
  PhysicalPool::Plan plan = b.commit(1200, 200);  // takes the 2 chunks; the 3 are not given back
  BOOST_TEST((reuses(plan, 0) && plan.released.empty()));
  plan = b.commit(1500, 300);                     // and taken now, with no new memory
  BOOST_TEST((reuses(plan, 2) && plan.released.empty()));
}

BOOST_AUTO_TEST_CASE(ranges_past_the_buffer_are_errors) {
  ChunkResidency chunks(300, 100);
  BOOST_CHECK_THROW(chunks.discard(250, 100), Error);
  BOOST_CHECK_THROW(chunks.commit(300, 1), Error);
}

BOOST_AUTO_TEST_CASE(the_counting_backend_counts_rounding_chunks_and_host_memory) {
  CountingOptions options;
  options.allocation_size = [](int64_t bytes) { return (bytes + 511) / 512 * 512; };
  options.discard_chunk_bytes = 1024;
  options.fixed_bytes = 4096;
  auto backend = make_counting_backend(options);
  BOOST_TEST(backend->counted().device == 4096);
  {
    Buffer small(*backend, 10);                                 // 512
    Buffer store(*backend, 4000, Buffer::Discardable{});        // 4 chunks: 4096
    BOOST_TEST(backend->counted().device == 4096 + 512 + 4096);
    BOOST_TEST(backend->counted().discardable == 4096);
    backend->discard(store.view(DType::U8, {4000}));            // one extent: held until a later commit
    backend->synchronize();                                     // it becomes reusable (physical_pool.h)
    BOOST_TEST(backend->counted().device == 4096 + 512 + 4096);
    Buffer other(*backend, 3000, Buffer::Discardable{false});   // nothing mapped
    Tensor first(other.data(), DType::U8, {100}, Device::CUDA);
    backend->commit(first);  // new memory: the reusable store extent (not of its size) goes back first
    BOOST_TEST(backend->counted().device == 4096 + 512 + 1024);
    backend->discard(first);  // held
    Tensor second(static_cast<char*>(other.data()) + 1024, DType::U8, {100}, Device::CUDA);
    backend->commit(second);  // `first` was discarded after the last mapping commit: it stays held
    BOOST_TEST(backend->counted().device == 4096 + 512 + 1024 + 1024);
    BOOST_TEST(backend->counted().device_peak == 4096 + 512 + 4096);
    std::unique_ptr<Backend> host = backend->make_pageable_host_backend();
    Buffer offloaded(*host, 1000);
    BOOST_TEST(backend->counted().host == 1000);
    BOOST_TEST(backend->counted().device == 4096 + 512 + 2048);  // host bytes are not device bytes
  }
  BOOST_TEST(backend->counted().device == 4096);
  BOOST_TEST(backend->counted().host == 0);
}

// Held extents become reusable where the CUDA backend waits for the device (cuda_memory.cu), and
// only there: a download, an upload past the pinned staging's limit, a queued copy to pageable
// memory (copy_async is then copy(), which downloads). A staged upload, a host-only copy and a queued copy from
// pinned host memory wait for nothing, so a commit after them finds the discarded extent still
// held and takes new memory (offload_param's gathers from the pinned partition: the memory
// model once counted a wait there and said one unit less than an H200 held).
BOOST_AUTO_TEST_CASE(the_counting_backend_frees_held_extents_only_where_the_cuda_backend_waits) {
  CountingOptions options;
  options.discard_chunk_bytes = 1024;
  auto backend = make_counting_backend(options);
  std::unique_ptr<Backend> pinned = backend->make_host_backend();
  std::unique_ptr<Backend> pageable = backend->make_pageable_host_backend();
  Buffer pinned_buffer(*pinned, 1024), pageable_buffer(*pageable, 1024), device_buffer(*backend, 1024);
  const Tensor from_pinned = pinned_buffer.view(DType::U8, {1024});
  const Tensor from_pageable = pageable_buffer.view(DType::U8, {1024});
  const Tensor on_device = device_buffer.view(DType::U8, {1024});
  const Tensor big_upload(pinned_buffer.data(), DType::U8, {kHostStagingMaxUploadBytes + 1}, Device::CPU);
  // One step of the pattern: unit A is discarded after the last mapping commit, `between` runs,
  // then unit B is committed. Returns the device bytes after B's commit: 2 units when A is still
  // held, 1 when B took A's memory.
  const auto device_after = [&](const std::function<void()>& between) {
    Buffer units(*backend, 2048, Buffer::Discardable{false});
    const Tensor a(units.data(), DType::U8, {1024}, Device::CUDA);
    const Tensor b(static_cast<char*>(units.data()) + 1024, DType::U8, {1024}, Device::CUDA);
    backend->commit(a);
    backend->discard(a);
    between();
    backend->commit(b);
    const int64_t device = backend->counted().device - 1024;  // less device_buffer
    backend->synchronize();
    return device;
  };
  BOOST_TEST(device_after([] {}) == 2048);
  BOOST_TEST(device_after([&] { backend->copy_async(on_device, from_pinned); }) == 2048);
  BOOST_TEST(device_after([&] { backend->copy(on_device, from_pageable); }) == 2048);  // staged
  BOOST_TEST(device_after([&] { backend->copy(from_pinned, from_pageable); }) == 2048);  // host only
  BOOST_TEST(device_after([&] { backend->copy_async(on_device, from_pageable); }) == 2048);  // copy(): staged
  BOOST_TEST(device_after([&] { backend->copy_async(from_pageable, on_device); }) == 1024);  // copy(): downloads
  BOOST_TEST(device_after([&] { backend->copy_async(from_pinned, on_device); }) == 2048);    // queued
  BOOST_TEST(device_after([&] { backend->copy(from_pinned, on_device); }) == 1024);  // a download
  BOOST_TEST(device_after([&] { backend->copy(on_device, big_upload); }) == 1024);
  BOOST_TEST(device_after([&] { backend->transfer_async(on_device, from_pageable); }) == 1024);
  BOOST_TEST(device_after([&] { backend->transfer_async(on_device, from_pinned); }) == 2048);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace
}  // namespace zt
