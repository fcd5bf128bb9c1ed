// Discardable buffers: which chunks hold memory after discards and commits (chunk_residency.h),
// and the counting backend that the memory model runs the trainer's code on (counting_backend.h).
#include <boost/test/unit_test.hpp>

#include <vector>

#include "backend/buffer.h"
#include "backend/chunk_residency.h"
#include "backend/counting_backend.h"

namespace zt {
namespace {

BOOST_AUTO_TEST_SUITE(chunk_residency)

BOOST_AUTO_TEST_CASE(a_chunk_is_freed_once_discards_cover_all_of_it) {
  ChunkResidency chunks(400, 100);  // chunks [0,100) [100,200) [200,300) [300,400)
  // Unit A = [0, 150), unit B = [150, 400): chunk 1 is shared.
  BOOST_TEST(chunks.discard(0, 150) == std::vector<size_t>({0}));  // chunk 1 still holds B's bytes
  for (size_t chunk : {size_t{0}}) chunks.set_resident(chunk, false);
  BOOST_TEST(chunks.discard(150, 250) == std::vector<size_t>({1, 2, 3}));  // now all of chunk 1 is discarded
  for (size_t chunk : {1, 2, 3}) chunks.set_resident(chunk, false);
  // Gathering B again needs chunks 1-3, not chunk 0.
  BOOST_TEST(chunks.commit(150, 250) == std::vector<size_t>({1, 2, 3}));
  for (size_t chunk : {1, 2, 3}) chunks.set_resident(chunk, true);
  // Chunk 1 is in use by B: discarding A again frees nothing new.
  BOOST_TEST(chunks.discard(0, 150).empty());
  BOOST_TEST(!chunks.discarded(1));
}

BOOST_AUTO_TEST_CASE(a_commit_before_the_chunk_is_given_back_keeps_it) {
  ChunkResidency chunks(300, 100);
  BOOST_TEST(chunks.discard(0, 300) == std::vector<size_t>({0, 1, 2}));
  BOOST_TEST(chunks.discarded(1));
  BOOST_TEST(chunks.commit(120, 10).empty());  // still resident: nothing to map
  BOOST_TEST(!chunks.discarded(1));
  BOOST_TEST(chunks.discarded(0));
  BOOST_TEST(chunks.discarded(2));
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
    backend->discard(store.view(DType::U8, {2048}));            // chunks 0, 1: given back at the next need
    BOOST_TEST(backend->counted().device == 4096 + 512 + 4096);
    backend->synchronize();
    BOOST_TEST(backend->counted().device == 4096 + 512 + 2048);
    Tensor first(store.data(), DType::U8, {100}, Device::CUDA);
    backend->commit(first);                                     // chunk 0 again
    BOOST_TEST(backend->counted().device == 4096 + 512 + 3072);
    BOOST_TEST(backend->counted().device_peak == 4096 + 512 + 4096);
    std::unique_ptr<Backend> host = backend->make_pageable_host_backend();
    Buffer offloaded(*host, 1000);
    BOOST_TEST(backend->counted().host == 1000);
    BOOST_TEST(backend->counted().device == 4096 + 512 + 3072);  // host bytes are not device bytes
  }
  BOOST_TEST(backend->counted().device == 4096);
  BOOST_TEST(backend->counted().host == 0);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace
}  // namespace zt
