// The emulated device's runtime (src/emu/emu_runtime.cpp, emu_memory.cpp): device memory
// (capacity, poisoning, red zones, classification, pointer attributes), deferred streams and
// events (a host read before the synchronisation sees old data, a reused staging buffer sends
// new data, event queries, cross-stream and legacy-stream ordering, collectives' `done`
// polling), copies as CUDA documents them for pageable and pinned memory, errors (last error,
// out of memory, the sticky fault) and the device properties. Work is queued directly with
// zt_emu::enqueue, so these tests need no kernel. Cases that make the device's state
// unrecoverable (a sticky fault, an abort) run in a forked child process.
#include <sys/wait.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <cuda.h>

#include "emu/emu_internal.h"
#include "emu/emu_runtime_memory.h"

namespace {

using zt_emu::Memory;

// ---- helpers -----------------------------------------------------------------------------------

struct ChildResult {
  int exit_code = -1;  // -1 when killed by a signal
  int signal = 0;
  std::string error_output;
};

// Runs `body` in a forked child (its return value is the exit code), with its stderr captured.
ChildResult run_in_child(const std::function<int()>& body) {
  int pipe_fds[2];
  BOOST_REQUIRE(pipe(pipe_fds) == 0);
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  BOOST_REQUIRE(pid >= 0);
  if (pid == 0) {
    close(pipe_fds[0]);
    dup2(pipe_fds[1], STDERR_FILENO);
    // Boost.Test's handlers would turn an abort into a failed test case and go on running the
    // rest of the suite in the child.
    for (int signal_number : {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL}) std::signal(signal_number, SIG_DFL);
    int code = 100;
    try {
      code = body();
    } catch (...) {
      code = 101;
    }
    std::fflush(stderr);
    _exit(code);
  }
  close(pipe_fds[1]);
  ChildResult result;
  char buffer[4096];
  for (ssize_t got; (got = read(pipe_fds[0], buffer, sizeof(buffer))) > 0;)
    result.error_output.append(buffer, static_cast<size_t>(got));
  close(pipe_fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  return result;
}

void queue(cudaStream_t stream, std::function<void()> body, std::string what = "test work") {
  zt_emu::enqueue(stream, zt_emu::Work{std::move(what), std::move(body), {}});
}

struct Stream {
  explicit Stream(unsigned flags = cudaStreamNonBlocking) {
    BOOST_REQUIRE(cudaStreamCreateWithFlags(&handle, flags) == cudaSuccess);
  }
  ~Stream() { cudaStreamDestroy(handle); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t handle = nullptr;
};

struct Event {
  explicit Event(unsigned flags = cudaEventDisableTiming) {
    BOOST_REQUIRE(cudaEventCreateWithFlags(&handle, flags) == cudaSuccess);
  }
  ~Event() { cudaEventDestroy(handle); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t handle = nullptr;
};

struct DeviceBuffer {
  explicit DeviceBuffer(size_t size) : bytes(size) { BOOST_REQUIRE(cudaMalloc(&data, size) == cudaSuccess); }
  ~DeviceBuffer() { cudaFree(data); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  unsigned char* bytes_at() const { return static_cast<unsigned char*>(data); }
  void* data = nullptr;
  size_t bytes;
};

struct PinnedBuffer {
  explicit PinnedBuffer(size_t size) : bytes(size) { BOOST_REQUIRE(cudaMallocHost(&data, size) == cudaSuccess); }
  ~PinnedBuffer() { cudaFreeHost(data); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  unsigned char* bytes_at() const { return static_cast<unsigned char*>(data); }
  void* data = nullptr;
  size_t bytes;
};

bool all_bytes(const void* data, size_t bytes, unsigned char value) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i)
    if (p[i] != value) return false;
  return true;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The message of check_device_accessible's fault, empty when it passes.
std::string access_fault(const void* pointer, size_t bytes, bool kernel_operand = false) {
  try {
    if (kernel_operand) {
      zt_emu::check_kernel_operand(pointer, bytes, "operand X");
    } else {
      zt_emu::check_device_accessible(pointer, bytes, "operand X");
    }
  } catch (const zt_emu::DeviceFault& fault) {
    return fault.message;
  }
  return "";
}

}  // namespace

BOOST_AUTO_TEST_SUITE(emu_runtime)

// ---- environment -----------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(env_bytes_parses_sizes_and_aborts_on_nonsense) {
  const char* name = "ZT_EMU_TEST_BYTES";
  unsetenv(name);
  BOOST_TEST(zt_emu::env_bytes(name, 17) == 17u);
  const std::pair<const char*, size_t> cases[] = {{"4GiB", size_t{4} << 30},      {"512MiB", size_t{512} << 20},
                                                  {"1.5GiB", size_t{3} << 29},    {"65536", 65536},
                                                  {"64KiB", 65536},               {"2gib", size_t{2} << 30}};
  for (const auto& [text, bytes] : cases) {
    setenv(name, text, 1);
    BOOST_TEST(zt_emu::env_bytes(name, 0) == bytes, text);
  }
  setenv(name, "4GB", 1);
  const ChildResult result = run_in_child([&] { return static_cast<int>(zt_emu::env_bytes(name, 0) & 1); });
  BOOST_TEST(result.signal == SIGABRT);
  BOOST_TEST(contains(result.error_output, "ZT_EMU_TEST_BYTES='4GB' is not a size"), result.error_output);
  unsetenv(name);

  setenv("ZT_EMU_TEST_INT", "12", 1);
  BOOST_TEST(zt_emu::env_int("ZT_EMU_TEST_INT", 3) == 12);
  setenv("ZT_EMU_TEST_INT", "12x", 1);
  BOOST_TEST(run_in_child([] { return zt_emu::env_int("ZT_EMU_TEST_INT", 3); }).signal == SIGABRT);
  unsetenv("ZT_EMU_TEST_INT");
}

// ---- device memory ---------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(allocations_are_aligned_poisoned_and_counted_in_256_byte_units) {
  size_t free_before = 0, total = 0;
  BOOST_REQUIRE(cudaMemGetInfo(&free_before, &total) == cudaSuccess);
  BOOST_TEST(total == zt_emu::device_capacity());
  void* one = nullptr;
  BOOST_REQUIRE(cudaMalloc(&one, 1) == cudaSuccess);
  size_t free_after = 0;
  BOOST_REQUIRE(cudaMemGetInfo(&free_after, &total) == cudaSuccess);
  BOOST_TEST(free_before - free_after == 256u);
  BOOST_TEST(reinterpret_cast<uintptr_t>(one) % 256 == 0u);

  void* buffer = nullptr;
  BOOST_REQUIRE(cudaMalloc(&buffer, 1000) == cudaSuccess);
  BOOST_TEST(reinterpret_cast<uintptr_t>(buffer) % 256 == 0u);
  BOOST_TEST(all_bytes(buffer, 1000, 0xFF));  // NaN in fp32, bf16, fp16: reads before writes show
  float value = 0;
  std::memcpy(&value, buffer, sizeof(value));
  BOOST_TEST(std::isnan(value));
  // Red zones separate allocations: nothing is handed out right before or after a buffer.
  const auto* bytes = static_cast<const unsigned char*>(buffer);
  BOOST_TEST((zt_emu::classify(bytes + 1000) == Memory::Device));  // one past the end
  BOOST_TEST((zt_emu::classify(bytes + 1024 + 1) == Memory::FreedDevice));
  BOOST_TEST((zt_emu::classify(bytes - 1) == Memory::FreedDevice));
  const auto* other = static_cast<const unsigned char*>(one);
  const auto distance = other > bytes ? other - bytes : bytes - other;
  BOOST_TEST(static_cast<size_t>(distance) >= 256u + 2 * zt_emu::kRedZoneBytes);

  BOOST_REQUIRE(cudaFree(buffer) == cudaSuccess);
  BOOST_TEST((zt_emu::classify(buffer) == Memory::FreedDevice));
#ifndef __SANITIZE_ADDRESS__  // there, the read itself is reported (the freed range is poisoned)
  BOOST_TEST(all_bytes(buffer, 1000, 0xFE));  // a use after free reads garbage (NaN too)
#endif
  BOOST_REQUIRE(cudaFree(one) == cudaSuccess);
  BOOST_REQUIRE(cudaMemGetInfo(&free_after, &total) == cudaSuccess);
  BOOST_TEST(free_after == free_before);

  void* nothing = &value;
  BOOST_TEST(cudaMalloc(&nothing, 0) == cudaSuccess);
  BOOST_TEST(nothing == nullptr);
  BOOST_TEST(cudaFree(nullptr) == cudaSuccess);
}

BOOST_AUTO_TEST_CASE(an_allocation_past_the_capacity_fails_and_is_the_last_error_once) {
  size_t free_bytes = 0, total = 0;
  BOOST_REQUIRE(cudaMemGetInfo(&free_bytes, &total) == cudaSuccess);
  void* pointer = nullptr;
  BOOST_TEST(cudaMalloc(&pointer, free_bytes + 1) == cudaErrorMemoryAllocation);
  BOOST_TEST(pointer == nullptr);
  BOOST_TEST(cudaPeekAtLastError() == cudaErrorMemoryAllocation);
  const cudaError_t last = cudaGetLastError();
  BOOST_TEST(last == cudaErrorMemoryAllocation);
  BOOST_TEST(cudaGetLastError() == cudaSuccess);  // not sticky: reported once
  // The message stays available for the code after it was cleared (callers clear, then format).
  BOOST_TEST(contains(cudaGetErrorString(last), "out of memory"), cudaGetErrorString(last));
  BOOST_TEST(std::string(cudaGetErrorName(last)) == "cudaErrorMemoryAllocation");
  // The device still works.
  DeviceBuffer buffer(64);
  BOOST_TEST((zt_emu::classify(buffer.data) == Memory::Device));
}

BOOST_AUTO_TEST_CASE(freeing_what_is_not_an_allocation_base_is_an_error) {
  DeviceBuffer buffer(512);
  BOOST_TEST(cudaFree(buffer.bytes_at() + 256) == cudaErrorInvalidValue);
  BOOST_TEST(cudaGetLastError() == cudaErrorInvalidValue);
  BOOST_TEST(contains(cudaGetErrorString(cudaErrorInvalidValue), "not the base of a live cudaMalloc allocation"));
  int host = 0;
  BOOST_TEST(cudaFree(&host) == cudaErrorInvalidValue);
  BOOST_TEST(cudaFreeHost(&host) == cudaErrorInvalidValue);
  BOOST_TEST(cudaFreeHost(buffer.data) == cudaErrorInvalidValue);
  BOOST_TEST(cudaGetLastError() == cudaErrorInvalidValue);
  BOOST_TEST(cudaFreeHost(nullptr) == cudaSuccess);
}

BOOST_AUTO_TEST_CASE(pointers_are_classified_and_have_attributes) {
  DeviceBuffer device(100);
  PinnedBuffer pinned(100);
  std::vector<float> pageable(25);
  void* freed = nullptr;
  BOOST_REQUIRE(cudaMalloc(&freed, 64) == cudaSuccess);
  BOOST_REQUIRE(cudaFree(freed) == cudaSuccess);

  BOOST_TEST((zt_emu::classify(nullptr) == Memory::Null));
  BOOST_TEST((zt_emu::classify(device.data) == Memory::Device));
  BOOST_TEST((zt_emu::classify(pinned.bytes_at() + 50) == Memory::Pinned));
  BOOST_TEST((zt_emu::classify(pinned.bytes_at() + 100) == Memory::Pinned));  // one past the end
  BOOST_TEST((zt_emu::classify(pageable.data()) == Memory::Pageable));
  BOOST_TEST((zt_emu::classify(freed) == Memory::FreedDevice));

  const void* base = nullptr;
  size_t bytes = 0;
  BOOST_TEST(zt_emu::find_allocation(device.bytes_at() + 10, &base, &bytes));
  BOOST_TEST(base == device.data);
  BOOST_TEST(bytes == 100u);
  BOOST_TEST(zt_emu::find_allocation(pinned.bytes_at() + 99, &base, &bytes));
  BOOST_TEST(base == pinned.data);
  BOOST_TEST(!zt_emu::find_allocation(pageable.data(), &base, &bytes));
  BOOST_TEST(!zt_emu::find_allocation(freed, &base, &bytes));

  cudaPointerAttributes attributes{};
  for (const void* unregistered : {static_cast<const void*>(pageable.data()), static_cast<const void*>(freed)}) {
    BOOST_REQUIRE(cudaPointerGetAttributes(&attributes, unregistered) == cudaSuccess);  // CUDA >= 11
    BOOST_TEST(attributes.type == cudaMemoryTypeUnregistered);
    BOOST_TEST(attributes.devicePointer == nullptr);
  }
  int devices = 0;
  BOOST_REQUIRE(cudaGetDeviceCount(&devices) == cudaSuccess);
  BOOST_REQUIRE(cudaSetDevice(devices - 1) == cudaSuccess);
  DeviceBuffer on_last(16);
  BOOST_REQUIRE(cudaSetDevice(0) == cudaSuccess);
  BOOST_REQUIRE(cudaPointerGetAttributes(&attributes, on_last.data) == cudaSuccess);
  BOOST_TEST(attributes.type == cudaMemoryTypeDevice);
  BOOST_TEST(attributes.device == devices - 1);  // the device it was allocated on
  BOOST_TEST(attributes.devicePointer == on_last.data);
  BOOST_TEST(attributes.hostPointer == nullptr);
  BOOST_REQUIRE(cudaPointerGetAttributes(&attributes, pinned.data) == cudaSuccess);
  BOOST_TEST(attributes.type == cudaMemoryTypeHost);
  BOOST_TEST(attributes.devicePointer == pinned.data);
  BOOST_TEST(attributes.hostPointer == pinned.data);
}

BOOST_AUTO_TEST_CASE(device_access_checks_name_the_operand_and_the_memory) {
  DeviceBuffer device(100);
  PinnedBuffer pinned(64);
  std::vector<float> pageable(4);
  BOOST_TEST(access_fault(device.data, 100).empty());
  BOOST_TEST(access_fault(device.bytes_at() + 100, 0).empty());
  BOOST_TEST(access_fault(pinned.data, 64).empty());
  const std::string past_end = access_fault(device.bytes_at() + 4, 100);
  BOOST_TEST(contains(past_end, "operand X"), past_end);
  BOOST_TEST(contains(past_end, "run past the end of its device memory allocation of 100 bytes"), past_end);
  const std::string host = access_fault(pageable.data(), 16);
  BOOST_TEST(contains(host, "operand X (" + zt_emu::pointer_text(pageable.data()) +
                                ") points to pageable host memory: a GPU cannot dereference it; allocate it with "
                                "cudaMalloc or cudaHostAlloc"),
             host);
  void* freed = nullptr;
  BOOST_REQUIRE(cudaMalloc(&freed, 64) == cudaSuccess);
  BOOST_REQUIRE(cudaFree(freed) == cudaSuccess);
  BOOST_TEST(contains(access_fault(freed, 4), "freed device memory"));
  BOOST_TEST(contains(access_fault(nullptr, 4), "operand X is a null pointer"));
}

// ---- copies and deferred execution ------------------------------------------------------------

// A kernel (cuBLASLt, cuDNN, NCCL) operand in pinned host memory: copies take it, a kernel only
// when it was allocated with cudaHostAllocMapped (a host buffer passed where a device one was
// meant would run across the bus on a GPU).
BOOST_AUTO_TEST_CASE(kernel_operands_take_pinned_memory_only_when_mapped) {
  DeviceBuffer device(64);
  PinnedBuffer pinned(64);
  void* mapped = nullptr;
  BOOST_REQUIRE(cudaHostAlloc(&mapped, 64, cudaHostAllocMapped) == cudaSuccess);
  BOOST_TEST(access_fault(device.data, 64, true).empty());
  BOOST_TEST(access_fault(mapped, 64, true).empty());
  BOOST_TEST(access_fault(static_cast<std::byte*>(mapped) + 32, 32, true).empty());
  const std::string unmapped = access_fault(pinned.bytes_at() + 8, 8, true);
  BOOST_TEST(contains(unmapped, "operand X (" + zt_emu::pointer_text(pinned.bytes_at() + 8) +
                                    ") points to pinned host memory that was not allocated with cudaHostAllocMapped"),
             unmapped);
  BOOST_TEST(access_fault(pinned.data, 64).empty());  // a copy's operand
  BOOST_REQUIRE(cudaFreeHost(mapped) == cudaSuccess);
  // A new allocation at the freed address is not mapped unless asked for.
  void* again = nullptr;
  BOOST_REQUIRE(cudaMallocHost(&again, 64) == cudaSuccess);
  BOOST_TEST(!access_fault(again, 64, true).empty());
  BOOST_REQUIRE(cudaFreeHost(again) == cudaSuccess);
}

BOOST_AUTO_TEST_CASE(a_host_read_of_a_pinned_destination_before_the_sync_sees_the_old_bytes) {
  Stream stream;
  DeviceBuffer device(256);
  PinnedBuffer pinned(256);
  std::memset(pinned.data, 0x11, 256);
  BOOST_REQUIRE(cudaMemsetAsync(device.data, 0x22, 256, stream.handle) == cudaSuccess);
  BOOST_TEST(all_bytes(device.data, 256, 0xFF));  // the memset is queued, not run
  BOOST_REQUIRE(cudaMemcpyAsync(pinned.data, device.data, 256, cudaMemcpyDeviceToHost, stream.handle) == cudaSuccess);
  BOOST_TEST(all_bytes(pinned.data, 256, 0x11));  // stale, as on a GPU that has not got there yet
  BOOST_REQUIRE(cudaStreamSynchronize(stream.handle) == cudaSuccess);
  BOOST_TEST(all_bytes(pinned.data, 256, 0x22));
}

BOOST_AUTO_TEST_CASE(a_pinned_staging_buffer_reused_before_the_sync_sends_the_new_bytes) {
  Stream stream;
  DeviceBuffer device(128);
  PinnedBuffer pinned(128);
  std::memset(pinned.data, 1, 128);
  BOOST_REQUIRE(cudaMemcpyAsync(device.data, pinned.data, 128, cudaMemcpyHostToDevice, stream.handle) == cudaSuccess);
  std::memset(pinned.data, 2, 128);  // the bug: the DMA has not read the buffer yet
  BOOST_REQUIRE(cudaStreamSynchronize(stream.handle) == cudaSuccess);
  BOOST_TEST(all_bytes(device.data, 128, 2));
}

BOOST_AUTO_TEST_CASE(copies_from_pageable_memory_are_staged_at_the_call) {
  Stream stream;
  DeviceBuffer device(128);
  std::vector<unsigned char> pageable(128, 1);
  BOOST_REQUIRE(cudaMemcpyAsync(device.data, pageable.data(), 128, cudaMemcpyHostToDevice, stream.handle) ==
                cudaSuccess);
  std::fill(pageable.begin(), pageable.end(), 2);  // fine: the source was staged
  BOOST_TEST(all_bytes(device.data, 128, 0xFF));   // the device write is still queued
  BOOST_REQUIRE(cudaStreamSynchronize(stream.handle) == cudaSuccess);
  BOOST_TEST(all_bytes(device.data, 128, 1));
}

BOOST_AUTO_TEST_CASE(copies_to_pageable_memory_are_synchronous) {
  Stream stream;
  DeviceBuffer device(64);
  BOOST_REQUIRE(cudaMemsetAsync(device.data, 7, 64, stream.handle) == cudaSuccess);
  std::vector<unsigned char> pageable(64, 0);
  BOOST_REQUIRE(cudaMemcpyAsync(pageable.data(), device.data, 64, cudaMemcpyDefault, stream.handle) == cudaSuccess);
  BOOST_TEST(all_bytes(pageable.data(), 64, 7));
  BOOST_TEST(cudaStreamQuery(stream.handle) == cudaSuccess);
}

BOOST_AUTO_TEST_CASE(copies_between_device_buffers_and_host_to_host) {
  Stream stream;
  DeviceBuffer a(64), b(64);
  BOOST_REQUIRE(cudaMemsetAsync(a.data, 5, 64, stream.handle) == cudaSuccess);
  BOOST_REQUIRE(cudaMemcpyAsync(b.data, a.data, 64, cudaMemcpyDeviceToDevice, stream.handle) == cudaSuccess);
  BOOST_TEST(all_bytes(b.data, 64, 0xFF));
  BOOST_REQUIRE(cudaStreamSynchronize(stream.handle) == cudaSuccess);
  BOOST_TEST(all_bytes(b.data, 64, 5));
  std::vector<unsigned char> from(16, 9), to(16, 0);
  BOOST_REQUIRE(cudaMemcpyAsync(to.data(), from.data(), 16, cudaMemcpyHostToHost, stream.handle) == cudaSuccess);
  BOOST_TEST(all_bytes(to.data(), 16, 9));
  BOOST_TEST(cudaMemcpy(to.data(), b.data, 0, cudaMemcpyHostToHost) == cudaSuccess);  // nothing to copy
}

BOOST_AUTO_TEST_CASE(a_copy_kind_that_contradicts_the_pointers_is_an_invalid_value) {
  int not_a_kind = 9;  // not a constant: the conversion is what is tested
  DeviceBuffer device(64);
  std::vector<unsigned char> pageable(64);
  BOOST_TEST(cudaMemcpy(device.data, pageable.data(), 64, cudaMemcpyDeviceToHost) == cudaErrorInvalidValue);
  BOOST_TEST(contains(cudaGetErrorString(cudaErrorInvalidValue),
                      "cudaMemcpyDeviceToHost names the source as device memory, but it points to pageable host "
                      "memory"),
             cudaGetErrorString(cudaErrorInvalidValue));
  BOOST_TEST(cudaGetLastError() == cudaErrorInvalidValue);
  BOOST_TEST(cudaMemcpy(pageable.data(), device.data, 64, cudaMemcpyHostToHost) == cudaErrorInvalidValue);
  BOOST_TEST(cudaMemcpy(device.data, pageable.data(), 65, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
  BOOST_TEST(contains(cudaGetErrorString(cudaErrorInvalidValue), "run past the end"));
  BOOST_TEST(cudaMemsetAsync(pageable.data(), 0, 64, nullptr) == cudaErrorInvalidValue);
  BOOST_TEST(contains(cudaGetErrorString(cudaErrorInvalidValue), "pageable host memory"));
  BOOST_TEST(cudaMemcpy(device.data, pageable.data(), 64, static_cast<cudaMemcpyKind>(not_a_kind)) ==
             cudaErrorInvalidMemcpyDirection);
  BOOST_TEST(cudaMemcpy(device.data, pageable.data(), 64, cudaMemcpyDefault) == cudaSuccess);
  BOOST_TEST(cudaGetLastError() == cudaErrorInvalidMemcpyDirection);
  BOOST_TEST(cudaGetLastError() == cudaSuccess);
}

BOOST_AUTO_TEST_CASE(cuda_memcpy_does_not_wait_for_non_blocking_streams) {
  Stream non_blocking;
  DeviceBuffer device(32);
  BOOST_REQUIRE(cudaMemset(device.data, 1, 32) == cudaSuccess);
  BOOST_REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  BOOST_REQUIRE(cudaMemsetAsync(device.data, 2, 32, non_blocking.handle) == cudaSuccess);
  std::vector<unsigned char> host(32);
  BOOST_REQUIRE(cudaMemcpy(host.data(), device.data, 32, cudaMemcpyDeviceToHost) == cudaSuccess);
  BOOST_TEST(all_bytes(host.data(), 32, 1));  // the non-blocking stream's memset has not run
  BOOST_REQUIRE(cudaStreamSynchronize(non_blocking.handle) == cudaSuccess);
  BOOST_REQUIRE(cudaMemcpy(host.data(), device.data, 32, cudaMemcpyDeviceToHost) == cudaSuccess);
  BOOST_TEST(all_bytes(host.data(), 32, 2));
}

BOOST_AUTO_TEST_CASE(cuda_memset_is_asynchronous_for_device_memory_and_synchronous_for_pinned) {
  DeviceBuffer device(32);
  PinnedBuffer pinned(32);
  BOOST_REQUIRE(cudaMemset(device.data, 3, 32) == cudaSuccess);
  BOOST_TEST(all_bytes(device.data, 32, 0xFF));  // queued on the legacy stream
  BOOST_REQUIRE(cudaMemset(pinned.data, 4, 32) == cudaSuccess);
  BOOST_TEST(all_bytes(pinned.data, 32, 4));
  BOOST_TEST(all_bytes(device.data, 32, 3));  // ran before it, in legacy-stream order
}

BOOST_AUTO_TEST_CASE(cuda_free_synchronises_the_device) {
  Stream stream;
  DeviceBuffer kept(32);
  void* released = nullptr;
  BOOST_REQUIRE(cudaMalloc(&released, 32) == cudaSuccess);
  BOOST_REQUIRE(cudaMemsetAsync(kept.data, 6, 32, stream.handle) == cudaSuccess);
  BOOST_REQUIRE(cudaMemsetAsync(released, 6, 32, stream.handle) == cudaSuccess);
  BOOST_REQUIRE(cudaFree(released) == cudaSuccess);  // the memset into it ran first: no fault
  BOOST_TEST(all_bytes(kept.data, 32, 6));
  BOOST_TEST(cudaGetLastError() == cudaSuccess);
}

// ---- streams and events ------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(an_event_query_answers_not_ready_once_then_success) {
  Stream stream;
  Event event;
  BOOST_TEST(cudaEventQuery(event.handle) == cudaSuccess);  // never recorded: nothing to wait for
  int ran = 0;
  queue(stream.handle, [&] { ++ran; });
  BOOST_REQUIRE(cudaEventRecord(event.handle, stream.handle) == cudaSuccess);
  queue(stream.handle, [&] { ran += 10; });
  BOOST_TEST(ran == 0);
  BOOST_TEST(cudaEventQuery(event.handle) == cudaErrorNotReady);
  BOOST_TEST(ran == 1);  // the query ran the stream up to the event, not beyond
  BOOST_TEST(cudaEventQuery(event.handle) == cudaSuccess);
  BOOST_TEST(cudaGetLastError() == cudaSuccess);  // not ready is not an error
  BOOST_TEST(cudaStreamQuery(stream.handle) == cudaErrorNotReady);
  BOOST_TEST(ran == 11);
  BOOST_TEST(cudaStreamQuery(stream.handle) == cudaSuccess);
  BOOST_REQUIRE(cudaEventSynchronize(event.handle) == cudaSuccess);
}

BOOST_AUTO_TEST_CASE(event_synchronize_runs_up_to_the_event_only) {
  Stream stream;
  Event event;
  std::vector<int> order;
  queue(stream.handle, [&] { order.push_back(1); });
  BOOST_REQUIRE(cudaEventRecord(event.handle, stream.handle) == cudaSuccess);
  queue(stream.handle, [&] { order.push_back(2); });
  BOOST_REQUIRE(cudaEventSynchronize(event.handle) == cudaSuccess);
  BOOST_TEST(order == std::vector<int>({1}));
  BOOST_REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  BOOST_TEST(order == std::vector<int>({1, 2}));
}

BOOST_AUTO_TEST_CASE(stream_wait_event_orders_two_streams) {
  Stream producer, consumer;
  Event event;
  std::vector<std::string> order;
  queue(producer.handle, [&] { order.push_back("produce"); });
  BOOST_REQUIRE(cudaEventRecord(event.handle, producer.handle) == cudaSuccess);
  queue(producer.handle, [&] { order.push_back("after the event"); });
  BOOST_REQUIRE(cudaStreamWaitEvent(consumer.handle, event.handle, 0) == cudaSuccess);
  queue(consumer.handle, [&] { order.push_back("consume"); });
  // A later record of the event does not move the wait.
  BOOST_REQUIRE(cudaEventRecord(event.handle, producer.handle) == cudaSuccess);
  BOOST_REQUIRE(cudaStreamSynchronize(consumer.handle) == cudaSuccess);
  BOOST_TEST(order == std::vector<std::string>({"produce", "consume"}));
  BOOST_REQUIRE(cudaStreamSynchronize(producer.handle) == cudaSuccess);
  BOOST_TEST(order.size() == 3u);
}

BOOST_AUTO_TEST_CASE(the_legacy_stream_is_ordered_with_blocking_streams_only) {
  Stream blocking(cudaStreamDefault), non_blocking(cudaStreamNonBlocking);
  std::vector<std::string> order;
  queue(blocking.handle, [&] { order.push_back("blocking 1"); });
  queue(non_blocking.handle, [&] { order.push_back("non-blocking"); });
  queue(nullptr, [&] { order.push_back("legacy"); });
  BOOST_REQUIRE(cudaStreamSynchronize(nullptr) == cudaSuccess);
  BOOST_TEST(order == std::vector<std::string>({"blocking 1", "legacy"}));
  // And work on a blocking stream waits for the legacy stream's earlier work.
  queue(cudaStreamLegacy, [&] { order.push_back("legacy 2"); });
  queue(blocking.handle, [&] { order.push_back("blocking 2"); });
  BOOST_REQUIRE(cudaStreamSynchronize(blocking.handle) == cudaSuccess);
  BOOST_TEST(order == std::vector<std::string>({"blocking 1", "legacy", "legacy 2", "blocking 2"}));
  BOOST_REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  BOOST_TEST(order.back() == "non-blocking");
}

BOOST_AUTO_TEST_CASE(waiting_for_a_collective_runs_other_streams) {
  Stream collective_stream, other;
  bool partner_arrived = false;
  int polls = 0;
  // A collective that completes only once work on another stream has run (another rank's
  // progress, in a real run): a drain that waited without running other streams would hang.
  zt_emu::enqueue(collective_stream.handle, zt_emu::Work{"collective", [] {}, [&] {
                                                            ++polls;
                                                            return partner_arrived;
                                                          }});
  queue(other.handle, [&] { partner_arrived = true; });
  BOOST_REQUIRE(cudaStreamSynchronize(collective_stream.handle) == cudaSuccess);
  BOOST_TEST(partner_arrived);
  BOOST_TEST(polls >= 2);
  BOOST_TEST(cudaStreamQuery(other.handle) == cudaSuccess);
}

BOOST_AUTO_TEST_CASE(queries_do_not_wait_for_a_collective) {
  Stream stream;
  Event event;
  int polls = 0;
  zt_emu::enqueue(stream.handle, zt_emu::Work{"collective", [] {}, [&] { return ++polls >= 3; }});
  BOOST_REQUIRE(cudaEventRecord(event.handle, stream.handle) == cudaSuccess);
  int not_ready = 0;
  while (cudaEventQuery(event.handle) == cudaErrorNotReady) ++not_ready;
  BOOST_TEST(not_ready >= 2);  // each query polled once and returned
  BOOST_TEST(polls == 3);
}

BOOST_AUTO_TEST_CASE(queries_answer_not_ready_while_another_thread_holds_the_device) {
  Stream stream;
  Event event;
  BOOST_REQUIRE(cudaEventRecord(event.handle, stream.handle) == cudaSuccess);
  std::atomic<int> phase{0};
  std::thread holder([&] {
    std::lock_guard<std::recursive_mutex> lock(zt_emu::device_lock());
    phase = 1;
    while (phase.load() != 2) std::this_thread::yield();
  });
  while (phase.load() != 1) std::this_thread::yield();
  BOOST_TEST(cudaEventQuery(event.handle) == cudaErrorNotReady);
  BOOST_TEST(cudaStreamQuery(stream.handle) == cudaErrorNotReady);
  phase = 2;
  holder.join();
  BOOST_REQUIRE(cudaEventSynchronize(event.handle) == cudaSuccess);
}

BOOST_AUTO_TEST_CASE(a_destroyed_stream_still_runs_its_work_and_its_handle_is_invalid) {
  cudaStream_t stream = nullptr;
  BOOST_REQUIRE(cudaStreamCreate(&stream) == cudaSuccess);
  bool ran = false;
  queue(stream, [&] { ran = true; });
  BOOST_REQUIRE(cudaStreamDestroy(stream) == cudaSuccess);
  BOOST_TEST(!ran);
  BOOST_REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  BOOST_TEST(ran);
  BOOST_TEST(cudaStreamSynchronize(stream) == cudaErrorInvalidResourceHandle);
  BOOST_TEST(cudaStreamDestroy(stream) == cudaErrorInvalidResourceHandle);
  BOOST_TEST(cudaStreamDestroy(nullptr) == cudaErrorInvalidResourceHandle);
  BOOST_CHECK_THROW(queue(stream, [] {}), zt_emu::DeviceFault);
  BOOST_TEST(cudaGetLastError() == cudaErrorInvalidResourceHandle);
}

BOOST_AUTO_TEST_CASE(elapsed_time_between_timed_events) {
  Stream stream;
  Event start(cudaEventDefault), end(cudaEventDefault), untimed(cudaEventDisableTiming);
  BOOST_REQUIRE(cudaEventRecord(start.handle, stream.handle) == cudaSuccess);
  queue(stream.handle, [] { std::this_thread::sleep_for(std::chrono::milliseconds(2)); });
  BOOST_REQUIRE(cudaEventRecord(end.handle, stream.handle) == cudaSuccess);
  BOOST_REQUIRE(cudaEventRecord(untimed.handle, stream.handle) == cudaSuccess);
  float ms = -1;
  BOOST_TEST(cudaEventElapsedTime(&ms, start.handle, end.handle) == cudaErrorNotReady);
  BOOST_REQUIRE(cudaStreamSynchronize(stream.handle) == cudaSuccess);
  BOOST_REQUIRE(cudaEventElapsedTime(&ms, start.handle, end.handle) == cudaSuccess);
  BOOST_TEST(ms >= 1.5f);
  BOOST_TEST(cudaEventElapsedTime(&ms, start.handle, untimed.handle) == cudaErrorInvalidResourceHandle);
  BOOST_TEST(cudaGetLastError() == cudaErrorInvalidResourceHandle);
}

// ---- faults and errors ---------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(a_fault_in_queued_work_becomes_sticky_with_its_message) {
  const ChildResult result = run_in_child([] {
    cudaStream_t stream = nullptr;
    if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) return 2;
    bool later_work_ran = false;
    queue(stream, [] { zt_emu::device_fault("planted fault: lane 3 read freed memory"); });
    queue(stream, [&] { later_work_ran = true; });
    if (cudaStreamSynchronize(stream) != cudaErrorLaunchFailure) return 3;
    if (later_work_ran) return 4;  // the stream's remaining work is discarded
    if (std::string(cudaGetErrorString(cudaErrorLaunchFailure)) != "planted fault: lane 3 read freed memory") return 5;
    void* pointer = nullptr;
    if (cudaMalloc(&pointer, 16) != cudaErrorLaunchFailure) return 6;  // every later call
    if (cudaGetLastError() != cudaErrorLaunchFailure) return 7;
    if (cudaGetLastError() != cudaErrorLaunchFailure) return 8;  // never cleared
    if (cudaEventQuery(nullptr) != cudaErrorLaunchFailure) return 9;
    // A second fault is not printed again.
    queue(nullptr, [] { zt_emu::device_fault("second fault"); });
    if (cudaDeviceSynchronize() != cudaErrorLaunchFailure) return 10;
    if (std::string(cudaGetErrorName(zt_emu::sticky_error())) != "cudaErrorLaunchFailure") return 11;
    return 0;
  });
  BOOST_TEST(result.exit_code == 0, "child exit " << result.exit_code << ", stderr: " << result.error_output);
  const std::string printed = "zerotune emulated device: planted fault: lane 3 read freed memory\n";
  BOOST_TEST(result.error_output == printed, result.error_output);
}

BOOST_AUTO_TEST_CASE(a_copy_whose_operand_was_freed_before_it_ran_faults) {
  const ChildResult result = run_in_child([] {
    cudaStream_t stream = nullptr;
    if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) return 2;
    void* device = nullptr;
    if (cudaMalloc(&device, 64) != cudaSuccess) return 3;
    // Freed behind the runtime's back (release without the drain cudaFree does).
    if (cudaMemsetAsync(device, 0, 64, stream) != cudaSuccess) return 4;
    if (!zt_emu::release_device(device)) return 5;
    if (cudaStreamSynchronize(stream) != cudaErrorLaunchFailure) return 6;
    return 0;
  });
  BOOST_TEST(result.exit_code == 0, "child exit " << result.exit_code << ", stderr: " << result.error_output);
  BOOST_TEST(contains(result.error_output, "the destination of cudaMemsetAsync of 64 bytes"), result.error_output);
  BOOST_TEST(contains(result.error_output, "points to freed device memory"), result.error_output);
}

BOOST_AUTO_TEST_CASE(last_errors_and_error_strings) {
  BOOST_TEST(cudaGetLastError() == cudaSuccess);
  BOOST_TEST(std::string(cudaGetErrorName(cudaErrorInvalidDevice)) == "cudaErrorInvalidDevice");
  BOOST_TEST(std::string(cudaGetErrorString(cudaErrorNotReady)) == "device not ready");
  zt_emu::set_last_error(cudaErrorInvalidConfiguration, "block of 2048 threads");
  BOOST_TEST(std::string(cudaGetErrorString(cudaErrorInvalidConfiguration)) == "block of 2048 threads");
  BOOST_TEST(cudaPeekAtLastError() == cudaErrorInvalidConfiguration);
  BOOST_TEST(cudaGetLastError() == cudaErrorInvalidConfiguration);
  BOOST_TEST(cudaGetLastError() == cudaSuccess);
  BOOST_TEST(zt_emu::sticky_error() == cudaSuccess);
  // Another code's string is the standard one.
  BOOST_TEST(std::string(cudaGetErrorString(cudaErrorLaunchFailure)) == "unspecified launch failure");
}

// ---- devices and kernel attributes ----------------------------------------------------------------

BOOST_AUTO_TEST_CASE(devices_and_their_properties) {
  int count = 0;
  BOOST_REQUIRE(cudaGetDeviceCount(&count) == cudaSuccess);
  BOOST_TEST(count == zt_emu::env_int("ZT_EMU_DEVICES", 8));
  int device = -1;
  BOOST_REQUIRE(cudaGetDevice(&device) == cudaSuccess);
  BOOST_TEST(device == 0);
  BOOST_TEST(cudaSetDevice(count) == cudaErrorInvalidDevice);
  BOOST_TEST(cudaGetLastError() == cudaErrorInvalidDevice);
  BOOST_REQUIRE(cudaSetDevice(count - 1) == cudaSuccess);
  std::thread([] {
    int other = -1;
    cudaGetDevice(&other);
    BOOST_TEST(other == 0);  // the current device is per host thread
  }).join();
  BOOST_REQUIRE(cudaSetDevice(0) == cudaSuccess);

  cudaDeviceProp properties{};
  BOOST_REQUIRE(cudaGetDeviceProperties(&properties, count - 1) == cudaSuccess);
  BOOST_TEST(std::string(properties.name) == "zerotune emulated device (sm_90)");
  BOOST_TEST(properties.major == 9);
  BOOST_TEST(properties.minor == 0);
  BOOST_TEST(properties.totalGlobalMem == zt_emu::device_capacity());
  BOOST_TEST(properties.sharedMemPerBlock == 48u * 1024);
  BOOST_TEST(properties.sharedMemPerBlockOptin == 227u * 1024);
  BOOST_TEST(properties.warpSize == 32);
  BOOST_TEST(properties.maxThreadsPerBlock == 1024);
  BOOST_TEST(properties.maxThreadsDim[2] == 64);
  BOOST_TEST(properties.maxGridSize[0] == 2147483647);
  BOOST_TEST(properties.multiProcessorCount == 132);
  BOOST_TEST(properties.pciBusID == count);
  BOOST_TEST(properties.unifiedAddressing == 1);
  BOOST_TEST(cudaGetDeviceProperties(&properties, -1) == cudaErrorInvalidDevice);

  char bus_id[16];
  BOOST_REQUIRE(cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), 0) == cudaSuccess);
  BOOST_TEST(std::string(bus_id) == "0000:01:00.0");
  BOOST_REQUIRE(cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), 9 < count ? 9 : count - 1) == cudaSuccess);
  BOOST_TEST(std::string(bus_id).size() == 12u);
  BOOST_TEST(cudaDeviceGetPCIBusId(bus_id, 12, 0) == cudaErrorInvalidValue);  // no room for the null
  BOOST_TEST(cudaGetLastError() == cudaErrorInvalidValue);
}

void some_kernel() {}

BOOST_AUTO_TEST_CASE(func_set_attribute_stores_the_dynamic_shared_memory_limit) {
  const void* kernel = reinterpret_cast<const void*>(&some_kernel);
  BOOST_TEST(zt_emu::max_dynamic_shared_bytes(kernel) == 48 * 1024);
  BOOST_REQUIRE(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 * 1024) == cudaSuccess);
  BOOST_TEST(zt_emu::max_dynamic_shared_bytes(kernel) == 100 * 1024);
  BOOST_TEST(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024 + 1) ==
             cudaErrorInvalidValue);
  BOOST_TEST(contains(cudaGetErrorString(cudaErrorInvalidValue), "227 KiB"));
  BOOST_TEST(cudaGetLastError() == cudaErrorInvalidValue);
  BOOST_TEST(zt_emu::max_dynamic_shared_bytes(kernel) == 100 * 1024);
  BOOST_REQUIRE(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024) == cudaSuccess);
  BOOST_TEST(zt_emu::max_dynamic_shared_bytes(kernel) == 227 * 1024);
}

// The virtual memory management subset (emu_vmm.cpp) that the backend's discardable buffers use.
BOOST_AUTO_TEST_CASE(virtual_memory_maps_counts_and_faults_on_unmapped_chunks) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  size_t granularity = 0;
  BOOST_REQUIRE(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) == CUDA_SUCCESS);
  BOOST_REQUIRE(granularity % 4096 == 0);
  const size_t used_before = zt_emu::device_used();
  CUdeviceptr base = 0;
  BOOST_REQUIRE(cuMemAddressReserve(&base, 2 * granularity, granularity, 0, 0) == CUDA_SUCCESS);
  BOOST_TEST(zt_emu::device_used() == used_before);  // address space costs nothing
  char* chunk0 = reinterpret_cast<char*>(base);
  char* chunk1 = chunk0 + granularity;
  BOOST_TEST((zt_emu::classify(chunk0) == Memory::FreedDevice));  // reserved, nothing mapped
  CUmemGenericAllocationHandle handle = 0;
  BOOST_REQUIRE(cuMemCreate(&handle, granularity, &prop, 0) == CUDA_SUCCESS);
  BOOST_TEST(zt_emu::device_used() == used_before + granularity);
  BOOST_REQUIRE(cuMemMap(base, granularity, 0, handle, 0) == CUDA_SUCCESS);
  BOOST_TEST((zt_emu::classify(chunk0) == Memory::FreedDevice));  // mapped without access yet
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  BOOST_REQUIRE(cuMemSetAccess(base, granularity, &access, 1) == CUDA_SUCCESS);
  BOOST_TEST((zt_emu::classify(chunk0) == Memory::Device));
  BOOST_TEST((zt_emu::classify(chunk1) == Memory::FreedDevice));
  BOOST_TEST(static_cast<unsigned char>(chunk0[7]) == 0xFFu);  // new physical memory reads NaN bytes
  // A copy that runs from the mapped chunk into the unmapped one is the call's error, naming it.
  std::vector<char> host(granularity + 16, 1);
  BOOST_TEST(cudaMemcpy(chunk0, host.data(), granularity, cudaMemcpyHostToDevice) == cudaSuccess);
  BOOST_TEST(chunk0[granularity - 1] == 1);
  BOOST_TEST(cudaMemcpy(chunk0, host.data(), granularity + 16, cudaMemcpyHostToDevice) != cudaSuccess);
  BOOST_TEST(std::string(cudaGetErrorString(cudaGetLastError())).find("run past") != std::string::npos);
  size_t free = 0, total = 0;
  BOOST_REQUIRE(cudaMemGetInfo(&free, &total) == cudaSuccess);
  BOOST_TEST(total - free == used_before + granularity);
  // Release before unmap: the memory lives until the last mapping goes.
  BOOST_REQUIRE(cuMemRelease(handle) == CUDA_SUCCESS);
  BOOST_TEST(zt_emu::device_used() == used_before + granularity);
  BOOST_REQUIRE(cuMemUnmap(base, granularity) == CUDA_SUCCESS);
  BOOST_TEST(zt_emu::device_used() == used_before);
  BOOST_TEST((zt_emu::classify(chunk0) == Memory::FreedDevice));
  BOOST_TEST(cuMemCreate(&handle, granularity + 1, &prop, 0) == CUDA_ERROR_INVALID_VALUE);  // not whole chunks
  BOOST_REQUIRE(cuMemAddressFree(base, 2 * granularity) == CUDA_SUCCESS);
  // Past the capacity: out of memory, like cudaMalloc.
  BOOST_TEST(cuMemCreate(&handle, (zt_emu::device_capacity() / granularity + 1) * granularity, &prop, 0) ==
             CUDA_ERROR_OUT_OF_MEMORY);
  void* entry = nullptr;
  cudaDriverEntryPointQueryResult status{};
  BOOST_REQUIRE(cudaGetDriverEntryPointByVersion("cuMemMap", &entry, 12000, cudaEnableDefault, &status) == cudaSuccess);
  BOOST_TEST((status == cudaDriverEntryPointSuccess && entry == reinterpret_cast<void*>(&cuMemMap)));
  BOOST_REQUIRE(cudaGetDriverEntryPointByVersion("cuNoSuch", &entry, 12000, cudaEnableDefault, &status) == cudaSuccess);
  BOOST_TEST((status == cudaDriverEntryPointSymbolNotFound && entry == nullptr));
}

BOOST_AUTO_TEST_SUITE_END()
