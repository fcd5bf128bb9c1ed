// GPU tests of the CUDA backend's memory ops: dtype conversions by copy() and round_to()
// (bit-exact against the host's float_to_bf16/float_to_fp16, across host and device), fill() of every dtype, the
// caching allocator (no cudaMalloc in steady state, bytes in use and peak), argument errors
// (host memory given to a device op), and the pinned host backend (make_host_backend():
// page-locked allocations released again, exact round trips, copies complete when copy()
// returns even while the stream is busy, discard() keeping host and device views coherent),
// and queued copies with events: copy_async() to and from pinned memory still pending when it
// returns and exact after record_event()'s wait(), device <-> device, pageable host memory
// (falls back to a complete copy), dtype and size errors, events beyond the pool's cache, and
// deferred kernel errors reported once by wait().
#include <boost/test/unit_test.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>

#include "backend/cuda/cuda_host_staging.h"
#include "core/rng.h"
#include "gpu_test_util.h"
#include "test_util.h"

namespace {

using namespace zt;
using namespace zt::gpu_test;

// Values that exercise rounding: ties, subnormals of fp16, overflow, inf, NaN, signed zero.
std::vector<float> awkward_values() {
  std::vector<float> values = random_floats(1000, 11, -3.0f, 3.0f);
  const float specials[] = {0.0f, -0.0f, 1.0f + std::ldexp(1.0f, -8), 1.0f + 3 * std::ldexp(1.0f, -8),
                            6.0e-8f, -3.0e-6f, 65504.0f, 65520.0f, 1.0e6f, 3.0e38f, kInf, -kInf,
                            kNaN, 1.0e-40f};
  values.insert(values.end(), std::begin(specials), std::end(specials));
  return values;
}

// What cudaPointerGetAttributes says `pointer` is (the test fails if the call does).
cudaMemoryType memory_type(const void* pointer) {
  cudaPointerAttributes attributes{};
  const cudaError_t status = cudaPointerGetAttributes(&attributes, pointer);
  BOOST_REQUIRE_MESSAGE(status == cudaSuccess, "cudaPointerGetAttributes: " << cudaGetErrorString(status));
  return attributes.type;
}

// Busy work for the GPU's stream: four 4096^3 fp32 GEMMs (about 0.5 TFLOP, milliseconds on any
// GPU). A copy queued behind them that copy() did not wait for would still be pending when the
// test overwrites or reads the host side, so the checks below would see the wrong values. On the
// emulated device queued work runs only when the host waits for it, so any GEMM keeps the copy
// pending: a small one (its GEMMs take seconds per 4096^3 there).
#if ZT_EMULATED_DEVICE
constexpr int64_t kLoadSize = 256;
#else
constexpr int64_t kLoadSize = 4096;
#endif
struct StreamLoad {
  DeviceTensor a = device_tensor(DType::F32, {kLoadSize, kLoadSize});
  DeviceTensor b = device_tensor(DType::F32, {kLoadSize, kLoadSize});
  DeviceTensor c = device_tensor(DType::F32, {kLoadSize, kLoadSize});
  StreamLoad() {
    gpu().fill(a, 0.5f);
    gpu().fill(b, 0.25f);
    gpu().synchronize();
  }
  void queue() {
    for (int repeat = 0; repeat < 4; ++repeat) gpu().matmul(c, a, false, b, false, 1.0f, 0.0f);
  }
};

// 16 MiB of fp32 in pinned host memory, and GEMMs to keep the stream busy while a test copies it.
struct PinnedUnderLoad {
  std::unique_ptr<Backend> host = gpu().make_host_backend();
  StreamLoad load;
  const int64_t n = int64_t{4} << 20;  // 16 MiB of fp32
  Buffer pinned{*host, static_cast<size_t>(n) * sizeof(float)};
  float* host_values = static_cast<float*>(pinned.data());
  const Tensor host_view = pinned.view(DType::F32, {n});
};

BOOST_AUTO_TEST_SUITE(cuda_memory)

BOOST_AUTO_TEST_CASE(copy_converts_like_the_host_in_every_direction) {
  const std::vector<float> values = awkward_values();
  const int64_t n = static_cast<int64_t>(values.size());
  for (DType first : float_dtypes()) {
    for (DType second : float_dtypes()) {
      // host fp32 -> device `first` -> device `second` -> host fp32
      DeviceTensor a = upload(values, first, {n});
      DeviceTensor b = poisoned(second, {n});
      gpu().copy(b, a);
      const std::vector<float> expected = rounded(rounded(values, first), second);
      check_identical(download(b), expected,
                      cat("copy ", dtype_name(first), " -> ", dtype_name(second)));
    }
  }
}

BOOST_AUTO_TEST_CASE(copy_between_host_half_and_device_float) {
  const std::vector<float> values = awkward_values();
  const int64_t n = static_cast<int64_t>(values.size());
  std::vector<uint16_t> host_bf16(values.size());
  for (size_t i = 0; i < values.size(); ++i) host_bf16[i] = float_to_bf16(values[i]);
  // host bf16 -> device fp32: exact widening.
  DeviceTensor wide = poisoned(DType::F32, {n});
  gpu().copy(wide, Tensor(host_bf16.data(), DType::BF16, {n}));
  check_identical(download(wide), rounded(values, DType::BF16), "host bf16 -> device fp32");
  // device fp32 -> host fp16: the kernel's rounding against float_to_fp16's, bit for bit.
  DeviceTensor source = upload(values, DType::F32, {n});
  std::vector<uint16_t> host_fp16(values.size(), 0xFFFF);
  gpu().copy(Tensor(host_fp16.data(), DType::F16, {n}), source);
  for (size_t i = 0; i < values.size(); ++i) {
    if (std::isnan(values[i])) {
      BOOST_TEST(std::isnan(fp16_to_float(host_fp16[i])));
    } else {
      BOOST_TEST(host_fp16[i] == float_to_fp16(values[i]), "fp16 bits of " << values[i]);
    }
  }
}

BOOST_AUTO_TEST_CASE(round_to_in_place_like_the_host) {
  const std::vector<float> values = awkward_values();
  const int64_t n = static_cast<int64_t>(values.size());
  for (DType dtype : float_dtypes()) {
    DeviceTensor x = upload(values, DType::F32, {n});
    gpu().round_to(x, dtype);
    check_identical(download(x), rounded(values, dtype), cat("round_to ", dtype_name(dtype)));
  }
}

BOOST_AUTO_TEST_CASE(copy_of_integers_and_sizes_checked) {
  std::vector<int64_t> ids = {5, -1, 1LL << 40, 0};
  DeviceTensor device_ids = upload_integers(ids, {4});
  std::vector<int64_t> back(4, 0);
  gpu().copy(view(back, {4}), device_ids);
  BOOST_TEST(back == ids);
  DeviceTensor small = device_tensor(DType::F32, {3});
  zt::test::check_error([&] { gpu().copy(small, device_ids); }, "same number of elements");
  DeviceTensor four = device_tensor(DType::I32, {4});
  zt::test::check_error([&] { gpu().copy(four, device_ids); }, "cannot convert");
}

BOOST_AUTO_TEST_CASE(fill_writes_every_dtype) {
  const int64_t n = 1001;  // not a multiple of the 8-element vectors
  for (DType dtype : float_dtypes()) {
    DeviceTensor t = device_tensor(dtype, {n});
    gpu().fill(t, 0.1f);
    check_identical(download(t), std::vector<float>(n, round_to(dtype, 0.1f)),
                    cat("fill ", dtype_name(dtype)));
  }
  DeviceTensor ints = device_tensor(DType::I32, {n});
  gpu().fill(ints, -7.0f);
  std::vector<int32_t> int_values(n);
  gpu().copy(view(int_values, {n}), ints);
  BOOST_TEST(int_values == std::vector<int32_t>(n, -7));
  DeviceTensor bytes = device_tensor(DType::U8, {n});
  gpu().fill(bytes, 1.0f);
  std::vector<uint8_t> byte_values(n);
  gpu().copy(view(byte_values, {n}), bytes);
  BOOST_TEST(byte_values == std::vector<uint8_t>(n, 1));
  DeviceTensor doubles = device_tensor(DType::F64, {n});  // scalar accumulators' dtype
  gpu().fill(doubles, 0.1f);
  std::vector<double> double_values(n);
  gpu().copy(Tensor(double_values.data(), DType::F64, {n}), doubles);
  BOOST_TEST(double_values == std::vector<double>(n, static_cast<double>(0.1f)));
  zt::test::check_error([&] { gpu().fill(ints, 0.5f); }, "not representable");
}

BOOST_AUTO_TEST_CASE(allocator_reuses_blocks_in_steady_state) {
  // A backend with the cache on whatever ZT_CUDA_CACHING_ALLOCATOR says (the sanitizer runs
  // turn it off for the others).
  CudaBackendOptions caching;
  caching.caching_allocator = true;
  std::unique_ptr<CudaBackend> own = make_cuda_backend(0, caching);
  CudaBackend& backend = *own;
  backend.synchronize();
  const size_t baseline = backend.memory_in_use();
  // One "step": the same sequence of allocations, released in a different order.
  auto step = [&] {
    std::vector<Buffer> buffers;
    const size_t sizes[] = {1000, 4 << 20, 123457, 64, 3 << 20, 4 << 20};
    for (size_t bytes : sizes) buffers.emplace_back(backend, bytes);
    size_t requested = 0;
    for (size_t bytes : sizes) requested += bytes;
    BOOST_TEST(backend.memory_in_use() >= baseline + requested);
    buffers.erase(buffers.begin() + 1);
    buffers.emplace_back(backend, 4 << 20);
  };
  step();
  const size_t allocations = backend.device_allocations();
  const size_t peak = backend.memory_peak();
  for (int repeat = 0; repeat < 5; ++repeat) step();
  BOOST_TEST(backend.device_allocations() == allocations, "steady-state steps called cudaMalloc");
  BOOST_TEST(backend.memory_in_use() == baseline);
  BOOST_TEST(backend.memory_peak() == peak);
  BOOST_TEST(backend.memory_reserved() >= peak);
  backend.reset_peak();
  BOOST_TEST(backend.memory_peak() == baseline);
  // Ops' scratch buffers come from the cache too: a second identical op allocates nothing.
  DeviceTensor x = upload(random_floats(1 << 16, 3), DType::F32, {1 << 16});
  gpu().synchronize();  // uploaded on gpu()'s stream, read on this backend's
  const double first = backend.sum_squares(x);
  const size_t after_first = backend.device_allocations();
  BOOST_TEST(backend.sum_squares(x) == first);  // deterministic
  BOOST_TEST(backend.device_allocations() == after_first);
}

BOOST_AUTO_TEST_CASE(release_of_a_foreign_pointer_is_an_error) {
  int local = 0;
  zt::test::check_error([&] { gpu().release(&local); }, "not a live block");
}

BOOST_AUTO_TEST_CASE(host_memory_given_to_a_device_op_is_an_error) {
  std::vector<float> host(16, 1.0f);
  zt::test::check_error_mentions([&] { gpu().scale(view(host, {16}), 2.0f); },
                                 {"scale", "dst", "device memory"});
  DeviceTensor x = upload(host, DType::F32, {16});
  DeviceTensor ids = upload_integers(std::vector<int32_t>(16, 0), {16});
  zt::test::check_error_mentions([&] { gpu().accumulate(x, ids, 1.0f); },
                                 {"accumulate", "src", "fp32, bf16 or fp16"});
}

BOOST_AUTO_TEST_CASE(host_backend_allocates_pinned_memory_and_releases_it) {
  std::unique_ptr<Backend> host = gpu().make_host_backend();
  BOOST_TEST((host->device() == Device::CPU));
  for (size_t bytes : {size_t{1}, size_t{1000}, size_t{3} << 20}) {
    void* pointer = host->allocate(bytes);
    BOOST_REQUIRE(pointer != nullptr);
    BOOST_TEST(reinterpret_cast<uintptr_t>(pointer) % 64 == 0, bytes << " bytes: not 64-byte aligned");
    BOOST_TEST(memory_type(pointer) == cudaMemoryTypeHost, bytes << " bytes: not page-locked memory");
    std::memset(pointer, 0x5A, bytes);  // the host can write all of it
    host->release(pointer);
    // Released back to the driver: no longer registered with CUDA.
    BOOST_TEST(memory_type(pointer) == cudaMemoryTypeUnregistered, bytes << " bytes: still pinned after release");
  }
  // Buffers release through the backend too (no error, nothing left over).
  { Buffer buffer(*host, 4096); }
  // The host backend computes like the CPU backend on its pinned memory.
  Buffer x(*host, 4 * sizeof(float));
  Tensor values = x.view(DType::F32, {4});
  host->fill(values, 2.0f);
  host->scale(values, 1.5f);
  BOOST_TEST(host->sum_squares(values) == 36.0);
}

BOOST_AUTO_TEST_CASE(round_trips_between_device_and_pinned_host_are_exact) {
  std::unique_ptr<Backend> host = gpu().make_host_backend();
  const std::vector<float> values = awkward_values();
  const int64_t n = static_cast<int64_t>(values.size());
  Buffer source(*host, values.size() * sizeof(float));
  Tensor pinned_values = source.view(DType::F32, {n});
  std::memcpy(pinned_values.data, values.data(), values.size() * sizeof(float));
  for (DType device_dtype : float_dtypes()) {
    for (DType host_dtype : float_dtypes()) {
      // pinned fp32 -> device `device_dtype` -> pinned `host_dtype` -> fp32 on the CPU
      DeviceTensor device = poisoned(device_dtype, {n});
      gpu().copy(device, pinned_values);
      Buffer back(*host, values.size() * sizeof(float));
      Tensor pinned_back = back.view(host_dtype, {n});
      host->fill(pinned_back, kNaN);
      gpu().copy(pinned_back, device);
      std::vector<float> result(values.size());
      host->copy(view(result, {n}), pinned_back);
      check_identical(result, rounded(rounded(values, device_dtype), host_dtype),
                      cat("pinned fp32 -> device ", dtype_name(device_dtype), " -> pinned ",
                          dtype_name(host_dtype)));
    }
  }
}

BOOST_FIXTURE_TEST_CASE(pinned_copies_are_complete_when_copy_returns, PinnedUnderLoad) {
  // Integers in [-125, 125]: exact in bf16 and fp16, so every dtype round-trips them.
  auto pattern = [](int64_t i) { return static_cast<float>(i % 251) - 125.0f; };
  for (DType device_dtype : float_dtypes()) {
    // Upload behind busy work, then overwrite the host buffer at once: the device must hold
    // the values from before the overwrite.
    for (int64_t i = 0; i < n; ++i) host_values[i] = pattern(i);
    DeviceTensor device = poisoned(device_dtype, {n});
    load.queue();
    gpu().copy(device, host_view);
    std::fill(host_values, host_values + n, -1.0f);
    const std::vector<float> uploaded = download(device);
    size_t wrong = 0;
    for (int64_t i = 0; i < n; ++i) wrong += uploaded[static_cast<size_t>(i)] != pattern(i);
    BOOST_TEST(wrong == 0u, "pinned fp32 -> device " << dtype_name(device_dtype) << ": " << wrong
                                << " elements changed by the host's overwrite after copy()");
    // Download behind busy work, then read the host buffer at once: it must hold the data.
    load.queue();
    gpu().copy(host_view, device);
    wrong = 0;
    for (int64_t i = 0; i < n; ++i) wrong += host_values[i] != pattern(i);
    BOOST_TEST(wrong == 0u, "device " << dtype_name(device_dtype) << " -> pinned fp32: " << wrong
                                << " elements not there when copy() returned");
  }
}

BOOST_AUTO_TEST_CASE(discard_keeps_pinned_memory_coherent_with_the_device) {
  // discard() may drop the pages' contents, but pinned pages must stay the ones the GPU's DMA
  // uses: values written after a discard are the values an upload sees.
  std::unique_ptr<Backend> host = gpu().make_host_backend();
  const int64_t n = int64_t{1} << 20;  // 4 MiB: whole pages inside
  Buffer pinned(*host, static_cast<size_t>(n) * sizeof(float));
  const Tensor host_view = pinned.view(DType::F32, {n});
  host->fill(host_view, 1.0f);
  host->discard(host_view);
  host->fill(host_view, 3.0f);
  DeviceTensor device = poisoned(DType::F32, {n});
  gpu().copy(device, host_view);
  check_identical(download(device), std::vector<float>(static_cast<size_t>(n), 3.0f),
                  "upload of pinned memory written after discard()");
  gpu().fill(device, 5.0f);
  gpu().copy(host_view, device);
  std::vector<float> result(static_cast<size_t>(n));
  host->copy(view(result, {n}), host_view);
  check_identical(result, std::vector<float>(static_cast<size_t>(n), 5.0f),
                  "download into pinned memory after discard()");
}

BOOST_FIXTURE_TEST_CASE(copy_async_with_pinned_memory_is_queued_and_exact_after_an_event_wait, PinnedUnderLoad) {
  auto pattern = [](int64_t i) { return static_cast<float>(i % 1009) * 0.25f - 100.0f; };
  for (int64_t i = 0; i < n; ++i) host_values[i] = pattern(i);
  DeviceTensor device = poisoned(DType::F32, {n});

  // Upload behind busy work; after the event's wait the host buffer is free to overwrite.
  load.queue();
  gpu().copy_async(device, host_view);
  std::unique_ptr<BackendEvent> uploaded = gpu().record_event();
  uploaded->wait();
  std::fill(host_values, host_values + n, -1.0f);
  const std::vector<float> on_device = download(device);
  size_t wrong = 0;
  for (int64_t i = 0; i < n; ++i) wrong += on_device[static_cast<size_t>(i)] != pattern(i);
  BOOST_TEST(wrong == 0u, "pinned -> device: " << wrong << " elements differ after the event's wait");

  // Download behind busy work, in two halves (the second through a pointer inside the pinned
  // allocation, as the ZeRO engine's slices are): copy_async returns at once (milliseconds of
  // GEMMs are queued ahead of it, so a copy that synchronised, e.g. one that took the pinned
  // memory for pageable, would have written the host side already), and the data is there
  // after the event's wait.
  BOOST_TEST(memory_type(host_values + n / 2) == cudaMemoryTypeHost);
  load.queue();
  gpu().copy_async(host_view.rows(0, n / 2), device.tensor.rows(0, n / 2));
  gpu().copy_async(host_view.rows(n / 2, n - n / 2), device.tensor.rows(n / 2, n - n / 2));
  BOOST_TEST(host_values[0] == -1.0f, "copy_async to pinned memory waited for the stream");
  BOOST_TEST(host_values[n - 1] == -1.0f, "copy_async to pinned memory (inside the allocation) "
                                          "waited for the stream");
  std::unique_ptr<BackendEvent> downloaded = gpu().record_event();
  downloaded->wait();
  wrong = 0;
  for (int64_t i = 0; i < n; ++i) wrong += host_values[i] != pattern(i);
  BOOST_TEST(wrong == 0u, "device -> pinned: " << wrong << " elements missing after the event's wait");
}

BOOST_AUTO_TEST_CASE(copy_async_between_device_buffers_and_its_argument_checks) {
  const std::vector<float> values = awkward_values();
  const int64_t n = static_cast<int64_t>(values.size());
  for (DType dtype : float_dtypes()) {
    DeviceTensor source = upload(values, dtype, {n});
    DeviceTensor target = poisoned(dtype, {n});
    gpu().copy_async(target, source);
    gpu().record_event()->wait();
    check_identical(download(target), rounded(values, dtype),
                    cat("copy_async device -> device ", dtype_name(dtype)));
  }
  DeviceTensor f32 = device_tensor(DType::F32, {4});
  DeviceTensor bf16 = device_tensor(DType::BF16, {4});
  zt::test::check_error_mentions([&] { gpu().copy_async(bf16, f32); },
                                 {"copy_async", "bf16[4]", "fp32[4]", "same dtype"});
  std::vector<float> host(4, 1.0f);
  zt::test::check_error_mentions([&] { gpu().copy_async(view(host, {4}), bf16); },
                                 {"copy_async", "fp32[4]", "bf16[4]", "same dtype"});
  DeviceTensor three = device_tensor(DType::F32, {3});
  zt::test::check_error_mentions([&] { gpu().copy_async(three, f32); },
                                 {"copy_async", "same number of elements"});
  gpu().copy_async(Tensor(nullptr, DType::F32, {0}, Device::CUDA),
                   Tensor(nullptr, DType::F32, {0}));  // nothing to copy: no error
}

BOOST_AUTO_TEST_CASE(copy_async_with_pageable_host_memory_gives_the_data) {
  StreamLoad load;
  const int64_t n = int64_t{1} << 20;
  std::vector<float> pageable(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) pageable[static_cast<size_t>(i)] = static_cast<float>(i % 777) - 300.0f;
  const std::vector<float> expected = pageable;
  BOOST_REQUIRE(memory_type(pageable.data()) == cudaMemoryTypeUnregistered);
  DeviceTensor device = poisoned(DType::F32, {n});
  // Upload behind busy work, wait, then overwrite the source: the device keeps the old values.
  load.queue();
  gpu().copy_async(device, view(pageable, {n}));
  gpu().record_event()->wait();
  std::fill(pageable.begin(), pageable.end(), -1.0f);
  check_identical(download(device), expected, "copy_async pageable -> device");
  // Download behind busy work: the fallback is copy(), so the data is there on return already.
  load.queue();
  gpu().copy_async(view(pageable, {n}), device);
  check_identical(pageable, expected, "copy_async device -> pageable, on return");
  gpu().record_event()->wait();
  check_identical(pageable, expected, "copy_async device -> pageable, after the event's wait");
  // Host <-> host: a plain copy.
  std::vector<float> other(static_cast<size_t>(n), 0.0f);
  gpu().copy_async(view(other, {n}), view(pageable, {n}));
  check_identical(other, expected, "copy_async host -> host");
}

BOOST_AUTO_TEST_CASE(events_beyond_the_pool_cache_are_created_and_reused) {
  // More events alive at once than the pool keeps (16), each after a fill, waited newest
  // first; destroyed together (16 go back to the pool, the rest are destroyed), then a second
  // round takes the pooled ones again and creates the others.
  DeviceTensor x = device_tensor(DType::F32, {1000});
  for (int round = 0; round < 2; ++round) {
    std::vector<std::unique_ptr<BackendEvent>> events;
    for (int i = 0; i < 40; ++i) {
      gpu().fill(x, static_cast<float>(round * 100 + i));
      events.push_back(gpu().record_event());
    }
    for (auto event = events.rbegin(); event != events.rend(); ++event) (*event)->wait();
    check_identical(download(x), std::vector<float>(1000, static_cast<float>(round * 100 + 39)),
                    cat("fills before 40 events, round ", round));
  }
  gpu().record_event()->wait();  // nothing queued: returns at once
}

BOOST_AUTO_TEST_CASE(event_wait_reports_deferred_kernel_errors_once) {
  std::vector<int64_t> row_ids = {0, 1, -5, 3};
  DeviceTensor ids = upload_integers(row_ids, {4});
  DeviceTensor x = upload(random_floats(4 * 8, 13), DType::F32, {4, 8});
  gpu().dropout(x, x, 0.5f, RngKey{}, ids);
  std::unique_ptr<BackendEvent> first = gpu().record_event();
  std::unique_ptr<BackendEvent> second = gpu().record_event();
  zt::test::check_error_mentions([&] { first->wait(); }, {"dropout", "negative"});
  second->wait();  // the same error, recorded before it was cleared: not reported again
  first->wait();
  gpu().synchronize();
}

// Uploads of at most HostStaging::kMaxUploadBytes go through pinned staging: copy() returns
// without waiting for the stream, and the host may overwrite its (pageable) memory at once. Eight
// 5 MiB uploads in a row behind busy work, more than one staging block each, and no wait between
// them: every device buffer holds its own round's values.
BOOST_AUTO_TEST_CASE(staged_uploads_hold_the_values_of_their_time) {
  StreamLoad load;
  const int64_t n = (int64_t{5} << 20) / 4;  // 5 MiB of fp32
  auto pattern = [](int round, int64_t i) { return static_cast<float>((i * 7 + round * 13) % 1000); };
  std::vector<float> host(static_cast<size_t>(n));
  std::vector<DeviceTensor> devices;
  load.queue();
  for (int round = 0; round < 8; ++round) {
    for (int64_t i = 0; i < n; ++i) host[static_cast<size_t>(i)] = pattern(round, i);
    devices.push_back(poisoned(DType::F32, {n}));
    gpu().copy(devices.back(), view(host, {n}));
    std::fill(host.begin(), host.end(), -1.0f);  // at once: the staging holds the values
  }
  for (int round = 0; round < 8; ++round) {
    const std::vector<float> got = download(devices[static_cast<size_t>(round)]);
    size_t wrong = 0;
    for (int64_t i = 0; i < n; ++i) wrong += got[static_cast<size_t>(i)] != pattern(round, i);
    BOOST_TEST(wrong == 0u, "upload " << round << ": " << wrong << " elements differ");
  }
}

// The staging's pinned memory stays bounded when the host runs ahead of the GPU: six 64 MiB
// uploads queued without a wait (384 MiB) make it wait for its oldest block rather than hold more
// than kMaxTotalBytes; the data still arrives. An upload above kMaxUploadBytes is an error.
BOOST_AUTO_TEST_CASE(host_staging_stays_bounded_when_the_host_runs_ahead) {
  using zt::cuda::HostStaging;
  cudaStream_t stream = nullptr;
  BOOST_REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  const size_t bytes = HostStaging::kMaxUploadBytes;
  DeviceTensor device = device_tensor(DType::U8, {static_cast<int64_t>(bytes)});
  std::vector<uint8_t> host(bytes);
  {
    HostStaging staging(stream);
    for (int round = 0; round < 6; ++round) {
      std::fill(host.begin(), host.end(), static_cast<uint8_t>(round + 1));
      staging.upload(device.tensor.data, host.data(), bytes);
      BOOST_TEST(staging.pinned_bytes() <= HostStaging::kMaxTotalBytes, "round " << round << ": "
                                                                                    << staging.pinned_bytes());
    }
    zt::test::check_error([&] { staging.upload(device.tensor.data, host.data(), bytes + 1); }, "larger than its limit");
    BOOST_REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  }
  std::vector<uint8_t> back(bytes);
  BOOST_REQUIRE(cudaMemcpy(back.data(), device.tensor.data, bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
  BOOST_TEST(static_cast<int>(back.front()) == 6);
  BOOST_TEST(static_cast<int>(back.back()) == 6);
  BOOST_REQUIRE(cudaStreamDestroy(stream) == cudaSuccess);
}

// Discardable buffers (cuda_vmm.h): four units of 2.5 chunks in a buffer with nothing mapped.
// Unit u is [2.5u, 2.5u + 2.5) chunks: units 0 and 1 share chunk 2, units 2 and 3 chunk 7.
struct DiscardableUnits {
  size_t chunk = gpu().discard_granularity();
  Buffer buffer{gpu(), 10 * chunk, Buffer::Discardable{false}};
  Tensor unit(int u) const {
    return Tensor(static_cast<char*>(buffer.data()) + u * 5 * chunk / 2, DType::F32,
                  {static_cast<int64_t>(5 * chunk / 2 / sizeof(float))}, Device::CUDA);
  }
  // Commits unit u, writes `value` into it and reads it back.
  void use(int u, float value) const {
    gpu().commit(unit(u));
    gpu().fill(unit(u), value);
    std::vector<float> back(static_cast<size_t>(unit(u).numel()));
    gpu().copy(view(back, {unit(u).numel()}), unit(u));
    BOOST_TEST((back == std::vector<float>(back.size(), value)), "unit " << u << " reads back what was written");
  }
  size_t mapped() const { return gpu().discardable_bytes(); }
};

BOOST_AUTO_TEST_CASE(discardable_buffers_map_extents_and_reuse_discarded_memory) {
  if (!gpu().discard_granularity()) return;  // no virtual memory management: plain buffers
  const size_t before = gpu().discardable_bytes();
  {
    DiscardableUnits units;
    const size_t g = units.chunk;
    units.use(0, 1.0f);  // chunks 0-1 as one extent, chunk 2 (shared with unit 1) alone
    units.use(1, 2.0f);  // chunks 3-4
    BOOST_TEST(units.mapped() == before + 5 * g);
    gpu().discard(units.unit(0));  // chunks 0-1 held: the device may still use them
    units.use(2, 3.0f);            // chunks 5-6 and 7: new memory (unit 0 was discarded after the last commit)
    BOOST_TEST(units.mapped() == before + 8 * g);
    gpu().discard(units.unit(1));  // chunk 2 (all of it discarded now) and chunks 3-4 held
    units.use(3, 4.0f);            // chunks 8-9 reuse unit 0's allocation of 2 chunks: no new memory
    BOOST_TEST(units.mapped() == before + 8 * g);
    units.use(1, 5.0f);  // unit 1 was held: committed again, it is in use as it is
    BOOST_TEST(units.mapped() == before + 8 * g);
  }
  BOOST_TEST(gpu().discardable_bytes() == before);
}

#if ZT_EMULATED_DEVICE
// ZT_EMU_VMM_FAIL (docs/emulated-device.md) fails a driver call: the error names the call and
// its bytes, and nothing stays mapped or allocated (the buffer's release, which frees its
// address range, would fail on a mapping left behind; the emulator's device memory would show
// an allocation).
void fail_driver_call(const std::string& call_and_nth, size_t bytes, const std::function<void()>& action) {
  setenv("ZT_EMU_VMM_FAIL", call_and_nth.c_str(), 1);
  const std::string call = call_and_nth.substr(0, call_and_nth.find(':'));
  zt::test::check_error_mentions(action, {"cuda: " + call + " of " + std::to_string(bytes) + " bytes", "ZT_EMU_VMM_FAIL"});
  unsetenv("ZT_EMU_VMM_FAIL");
}

BOOST_AUTO_TEST_CASE(a_failed_driver_call_names_itself_and_leaks_nothing) {
  const size_t before = gpu().discardable_bytes(), used = gpu().device_memory_used();
  // A new extent: its allocation fails, or its mapping, or its access after the mapping. Unit
  // 0's first extent (2 chunks) is mapped, its second (chunk 2) fails and leaves nothing.
  for (const char* call : {"cuMemCreate:2", "cuMemMap:2", "cuMemSetAccess:2"}) {
    DiscardableUnits units;
    fail_driver_call(call, units.chunk, [&] { gpu().commit(units.unit(0)); });
    BOOST_TEST(units.mapped() == before + 2 * units.chunk, call);
    BOOST_TEST(gpu().device_memory_used() == used + 2 * units.chunk, call);
    units.use(0, 1.0f);  // the commit again maps what is missing
  }
  // A reused allocation: unit 3's commit takes unit 0's (see the test above); mapping it there
  // fails (the allocation is released), or unmapping it from unit 0 fails (it stays there).
  for (const char* call : {"cuMemMap:1", "cuMemUnmap:1"}) {
    DiscardableUnits units;
    const size_t g = units.chunk;
    units.use(0, 1.0f);
    units.use(1, 2.0f);
    gpu().discard(units.unit(0));
    units.use(2, 3.0f);
    gpu().discard(units.unit(1));
    fail_driver_call(call, 2 * g, [&] { gpu().commit(units.unit(3)); });
    const size_t expected = std::string(call) == "cuMemMap:1" ? 6 * g : 8 * g;
    BOOST_TEST(units.mapped() == before + expected, call);
    BOOST_TEST(gpu().device_memory_used() == used + expected, call);
    units.use(3, 4.0f);
    units.use(2, 3.0f);
  }
  BOOST_TEST(gpu().discardable_bytes() == before);
  BOOST_TEST(gpu().device_memory_used() == used);
}
#endif

BOOST_AUTO_TEST_SUITE_END()

}  // namespace
