// A multi-rank check of the emulated NCCL (src/emu/emu_nccl.cpp), its own MPI program: run it
// with `mpirun -np 2 emu_nccl_ranks` and `mpirun -np 4 --oversubscribe emu_nccl_ranks`. It
// checks all-reduce (every op), reduce-scatter, all-gather, broadcast and reduce against values
// computed here, in fp32, bf16, fp16, int32 and the other integer and float types, in place and
// out of place; that 16-bit sums are rounded once, after summing in float in rank order; that
// nothing is written before the stream is synchronised; two communicators whose streams are
// drained in different orders on different ranks, and one communicator's operations queued on
// two streams drained in different orders (neither may deadlock or mix data); a non-blocking
// init and finalize; a collective that waits for a rank that never joins, ended by
// ncclCommAbort from a watchdog thread while the main thread is blocked in the drain (the
// watchdog's ncclCommGetAsyncError must not block). Every rank prints each mismatch and the
// program exits non-zero when any rank found one.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace {

int world_rank = 0;
int world_size = 1;
int failures = 0;

void expect(bool condition, const std::string& message) {
  if (condition) return;
  ++failures;
  std::fprintf(stderr, "emu_nccl_ranks: rank %d of %d: %s\n", world_rank, world_size, message.c_str());
}

void expect_result(ncclResult_t result, ncclResult_t expected, const std::string& call) {
  expect(result == expected, call + " returned " + ncclGetErrorString(result) + " (" + ncclGetLastError(nullptr) +
                                 "), expected " + ncclGetErrorString(expected));
}

void check_cuda(cudaError_t result, const char* call) {
  if (result == cudaSuccess) return;
  std::fprintf(stderr, "emu_nccl_ranks: rank %d: %s failed: %s\n", world_rank, call, cudaGetErrorString(result));
  MPI_Abort(MPI_COMM_WORLD, 2);
}

// ---- element types -----------------------------------------------------------------------------

struct Type {
  ncclDataType_t nccl;
  const char* name;
  size_t size;
  bool is_float;
  bool is_unsigned;
};

const Type kF32{ncclFloat32, "fp32", 4, true, false};
const Type kBF16{ncclBfloat16, "bf16", 2, true, false};
const Type kF16{ncclFloat16, "fp16", 2, true, false};
const Type kI32{ncclInt32, "int32", 4, false, false};
const Type kOthers[] = {{ncclInt8, "int8", 1, false, false},     {ncclUint8, "uint8", 1, false, true},
                        {ncclUint32, "uint32", 4, false, true},  {ncclInt64, "int64", 8, false, false},
                        {ncclUint64, "uint64", 8, false, true},  {ncclFloat64, "fp64", 8, true, false}};

// `value` stored as `type` (16-bit floats rounded to nearest even).
void encode(const Type& type, double value, std::byte* to) {
  auto put = [&](auto typed) { std::memcpy(to, &typed, sizeof(typed)); };
  switch (type.nccl) {
    case ncclInt8: return put(static_cast<int8_t>(value));
    case ncclUint8: return put(static_cast<uint8_t>(value));
    case ncclInt32: return put(static_cast<int32_t>(value));
    case ncclUint32: return put(static_cast<uint32_t>(value));
    case ncclInt64: return put(static_cast<int64_t>(value));
    case ncclUint64: return put(static_cast<uint64_t>(value));
    case ncclFloat16: return put(__float2half_rn(static_cast<float>(value)));
    case ncclBfloat16: return put(__float2bfloat16_rn(static_cast<float>(value)));
    case ncclFloat64: return put(value);
    default: return put(static_cast<float>(value));
  }
}

double decode(const Type& type, const std::byte* from) {
  auto get = [&](auto typed) {
    std::memcpy(&typed, from, sizeof(typed));
    return typed;
  };
  switch (type.nccl) {
    case ncclInt8: return get(int8_t{});
    case ncclUint8: return get(uint8_t{});
    case ncclInt32: return get(int32_t{});
    case ncclUint32: return get(uint32_t{});
    case ncclInt64: return static_cast<double>(get(int64_t{}));
    case ncclUint64: return static_cast<double>(get(uint64_t{}));
    case ncclFloat16: return __half2float(get(__half{}));
    case ncclBfloat16: return __bfloat162float(get(__nv_bfloat16{}));
    case ncclFloat64: return get(double{});
    default: return get(float{});
  }
}

std::vector<std::byte> encode_all(const Type& type, const std::vector<double>& values) {
  std::vector<std::byte> bytes(values.size() * type.size);
  for (size_t i = 0; i < values.size(); ++i) encode(type, values[i], bytes.data() + i * type.size);
  return bytes;
}

// ---- device buffers ----------------------------------------------------------------------------

struct DeviceBuffer {
  explicit DeviceBuffer(size_t size) : bytes(size) { check_cuda(cudaMalloc(&data, size), "cudaMalloc"); }
  ~DeviceBuffer() { cudaFree(data); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  std::byte* at(size_t offset) const { return static_cast<std::byte*>(data) + offset; }
  void* data = nullptr;
  size_t bytes;
};

void upload(const DeviceBuffer& to, size_t offset, const std::vector<std::byte>& bytes) {
  check_cuda(cudaMemcpy(to.at(offset), bytes.data(), bytes.size(), cudaMemcpyHostToDevice), "cudaMemcpy H2D");
}

std::vector<std::byte> download(const DeviceBuffer& from, size_t offset, size_t bytes) {
  std::vector<std::byte> host(bytes);
  check_cuda(cudaMemcpy(host.data(), from.at(offset), bytes, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
  return host;
}

// The buffer's bytes as the host sees them now, without waiting for the device: the emulated
// device's memory is host memory (on a GPU this would be a plain host read of device memory).
std::vector<std::byte> peek(const DeviceBuffer& buffer) {
  std::vector<std::byte> host(buffer.bytes);
  std::memcpy(host.data(), buffer.data, buffer.bytes);
  return host;
}

// Compares `got` (count elements of `type`) with `expected`, exactly or within a relative
// tolerance; reports the first few mismatches.
void expect_values(const Type& type, const std::vector<std::byte>& got, const std::vector<double>& expected,
                   const std::string& what, double tolerance = 0.0) {
  int reported = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    const double value = decode(type, got.data() + i * type.size);
    const double want = decode(type, encode_all(type, {expected[i]}).data());  // as stored in `type`
    const bool equal = tolerance == 0.0 ? value == want : std::fabs(value - want) <= tolerance * (1 + std::fabs(want));
    if (!equal && reported++ < 3)
      expect(false, what + " (" + type.name + "): element " + std::to_string(i) + " is " + std::to_string(value) +
                        ", expected " + std::to_string(want));
  }
}

// ---- values ------------------------------------------------------------------------------------

// What rank r contributes at element i: small integers, exact in every type (sums of 4 ranks
// stay below 64, products below 16).
double contribution(const Type& type, ncclRedOp_t op, int rank, size_t i) {
  if (op == ncclProd) return static_cast<double>((i + static_cast<size_t>(rank)) % 3) - (type.is_unsigned ? 0 : 1);
  const double value = static_cast<double>((i * 7 + static_cast<size_t>(rank) * 3) % 11);
  return type.is_unsigned ? value : value - 5;
}

std::vector<double> contributions(const Type& type, ncclRedOp_t op, int rank, size_t count, size_t first = 0) {
  std::vector<double> values(count);
  for (size_t i = 0; i < count; ++i) values[i] = contribution(type, op, rank, first + i);
  return values;
}

double reduced(const Type& type, ncclRedOp_t op, int ranks, size_t i) {
  double result = contribution(type, op, 0, i);
  for (int r = 1; r < ranks; ++r) {
    const double value = contribution(type, op, r, i);
    switch (op) {
      case ncclProd: result *= value; break;
      case ncclMax: result = std::max(result, value); break;
      case ncclMin: result = std::min(result, value); break;
      default: result += value; break;
    }
  }
  if (op == ncclAvg) result = type.is_float ? result / ranks : std::trunc(result / ranks);
  return result;
}

const char* op_name(ncclRedOp_t op) {
  switch (op) {
    case ncclSum: return "sum";
    case ncclProd: return "prod";
    case ncclMax: return "max";
    case ncclMin: return "min";
    default: return "avg";
  }
}

// ---- communicators -----------------------------------------------------------------------------

ncclUniqueId shared_id() {
  ncclUniqueId id{};
  if (world_rank == 0) expect_result(ncclGetUniqueId(&id), ncclSuccess, "ncclGetUniqueId");
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  return id;
}

// Polls a non-blocking communicator until its pending call settled.
ncclResult_t settle(ncclComm_t comm, ncclResult_t result) {
  while (result == ncclInProgress) {
    const ncclResult_t query = ncclCommGetAsyncError(comm, &result);
    if (query != ncclSuccess) return query;
  }
  return result;
}

ncclComm_t make_blocking_comm() {
  ncclComm_t comm = nullptr;
  expect_result(ncclCommInitRank(&comm, world_size, shared_id(), world_rank), ncclSuccess, "ncclCommInitRank");
  return comm;
}

ncclComm_t make_nonblocking_comm(const char* name) {
  ncclComm_t comm = nullptr;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  config.commName = name;
  const ncclResult_t started = ncclCommInitRankConfig(&comm, world_size, shared_id(), world_rank, &config);
  expect(started == ncclInProgress || started == ncclSuccess, "non-blocking ncclCommInitRankConfig returned " +
                                                                  std::string(ncclGetErrorString(started)));
  expect_result(settle(comm, started), ncclSuccess, "ncclCommInitRankConfig (settled)");
  return comm;
}

cudaStream_t new_stream() {
  cudaStream_t stream = nullptr;
  check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  return stream;
}

void sync(cudaStream_t stream) { check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize"); }

// ---- the checks --------------------------------------------------------------------------------

constexpr size_t kCount = 1001;  // odd: no block of a power-of-two size

void check_all_reduce(ncclComm_t comm, cudaStream_t stream, const Type& type, ncclRedOp_t op, bool in_place) {
  const std::string what = std::string("all_reduce ") + op_name(op) + (in_place ? " in place" : "");
  const size_t bytes = kCount * type.size;
  DeviceBuffer send(bytes), recv(bytes);
  upload(send, 0, encode_all(type, contributions(type, op, world_rank, kCount)));
  DeviceBuffer& out = in_place ? send : recv;
  const std::vector<std::byte> before = peek(out);
  expect_result(ncclAllReduce(send.data, out.data, kCount, type.nccl, op, comm, stream), ncclSuccess, what);
  expect(peek(out) == before, what + " (" + type.name + "): the output changed before the stream was synchronised");
  sync(stream);
  std::vector<double> expected(kCount);
  for (size_t i = 0; i < kCount; ++i) expected[i] = reduced(type, op, world_size, i);
  const bool exact = op != ncclAvg || (world_size & (world_size - 1)) == 0;
  expect_values(type, download(out, 0, bytes), expected, what, exact ? 0.0 : 1e-2);
}

// 16-bit sums that are not exact: the result must be the float sum in rank order, rounded once.
void check_rounding(ncclComm_t comm, cudaStream_t stream, const Type& type) {
  const size_t bytes = kCount * type.size;
  DeviceBuffer data(bytes);
  auto value = [](int rank, size_t i) { return 1.0 + (rank + 1) / 3.0 + static_cast<double>(i) * 0.013; };
  std::vector<double> mine(kCount);
  for (size_t i = 0; i < kCount; ++i) mine[i] = value(world_rank, i);
  upload(data, 0, encode_all(type, mine));
  expect_result(ncclAllReduce(data.data, data.data, kCount, type.nccl, ncclSum, comm, stream), ncclSuccess,
                "all_reduce rounding");
  sync(stream);
  std::vector<double> expected(kCount);
  for (size_t i = 0; i < kCount; ++i) {
    float sum = 0.0f;  // each rank's value as stored in `type`, summed in float in rank order
    for (int r = 0; r < world_size; ++r)
      sum += static_cast<float>(decode(type, encode_all(type, {value(r, i)}).data()));
    expected[i] = sum;  // expect_values rounds it to `type` once
  }
  expect_values(type, download(data, 0, bytes), expected, "all_reduce sum rounded once");
}

void check_reduce_scatter(ncclComm_t comm, cudaStream_t stream, const Type& type, ncclRedOp_t op, bool in_place) {
  const std::string what = std::string("reduce_scatter ") + op_name(op) + (in_place ? " in place" : "");
  const size_t block = kCount * type.size;
  const size_t total = kCount * static_cast<size_t>(world_size);
  DeviceBuffer send(block * static_cast<size_t>(world_size)), recv(block);
  upload(send, 0, encode_all(type, contributions(type, op, world_rank, total)));
  void* out = in_place ? send.at(block * static_cast<size_t>(world_rank)) : recv.data;
  expect_result(ncclReduceScatter(send.data, out, kCount, type.nccl, op, comm, stream), ncclSuccess, what);
  sync(stream);
  std::vector<double> expected(kCount);
  for (size_t i = 0; i < kCount; ++i) expected[i] = reduced(type, op, world_size, kCount * world_rank + i);
  expect_values(type, download(in_place ? send : recv, in_place ? block * world_rank : 0, block), expected, what);
}

void check_all_gather(ncclComm_t comm, cudaStream_t stream, const Type& type, bool in_place) {
  const std::string what = std::string("all_gather") + (in_place ? " in place" : "");
  const size_t block = kCount * type.size;
  DeviceBuffer send(block), recv(block * static_cast<size_t>(world_size));
  const std::vector<std::byte> mine = encode_all(type, contributions(type, ncclSum, world_rank, kCount));
  if (in_place) upload(recv, block * world_rank, mine);
  else upload(send, 0, mine);
  const void* input = in_place ? static_cast<const void*>(recv.at(block * world_rank)) : send.data;
  expect_result(ncclAllGather(input, recv.data, kCount, type.nccl, comm, stream), ncclSuccess, what);
  sync(stream);
  std::vector<double> expected;
  for (int r = 0; r < world_size; ++r)
    for (double value : contributions(type, ncclSum, r, kCount)) expected.push_back(value);
  expect_values(type, download(recv, 0, recv.bytes), expected, what);
}

void check_broadcast(ncclComm_t comm, cudaStream_t stream, const Type& type, int root, bool in_place) {
  const std::string what = "broadcast from " + std::to_string(root) + (in_place ? " in place" : "");
  const size_t bytes = kCount * type.size;
  DeviceBuffer send(bytes), recv(bytes);
  upload(send, 0, encode_all(type, contributions(type, ncclSum, world_rank, kCount)));
  DeviceBuffer& out = in_place ? send : recv;
  expect_result(ncclBroadcast(send.data, out.data, kCount, type.nccl, root, comm, stream), ncclSuccess, what);
  sync(stream);
  expect_values(type, download(out, 0, bytes), contributions(type, ncclSum, root, kCount), what);
}

void check_reduce(ncclComm_t comm, cudaStream_t stream, const Type& type, int root) {
  const std::string what = "reduce to " + std::to_string(root);
  const size_t bytes = kCount * type.size;
  DeviceBuffer send(bytes), recv(bytes);
  upload(send, 0, encode_all(type, contributions(type, ncclMax, world_rank, kCount)));
  const std::vector<std::byte> before = peek(recv);
  expect_result(ncclReduce(send.data, recv.data, kCount, type.nccl, ncclMax, root, comm, stream), ncclSuccess, what);
  sync(stream);
  if (world_rank != root) {
    expect(peek(recv) == before, what + ": a rank other than the root got output");
    return;
  }
  std::vector<double> expected(kCount);
  for (size_t i = 0; i < kCount; ++i) expected[i] = reduced(type, ncclMax, world_size, i);
  expect_values(type, download(recv, 0, bytes), expected, what);
}

// An all-reduce on `first` and an all-gather on `second`, each on its own stream; even ranks
// synchronise first's stream first, odd ranks second's: the drain must make progress on the
// other stream while it waits.
void check_drain_orders(ncclComm_t first, cudaStream_t first_stream, ncclComm_t second, cudaStream_t second_stream,
                        const std::string& what, bool in_group = false) {
  const Type& type = kF32;
  const size_t bytes = kCount * type.size;
  DeviceBuffer reduce(bytes), gather_in(bytes), gather_out(bytes * static_cast<size_t>(world_size));
  upload(reduce, 0, encode_all(type, contributions(type, ncclSum, world_rank, kCount)));
  upload(gather_in, 0, encode_all(type, contributions(type, ncclProd, world_rank, kCount)));  // unlike the sums'
  if (in_group) expect_result(ncclGroupStart(), ncclSuccess, what + ": ncclGroupStart");
  expect_result(ncclAllReduce(reduce.data, reduce.data, kCount, type.nccl, ncclSum, first, first_stream),
                ncclSuccess, what + ": ncclAllReduce");
  expect_result(ncclAllGather(gather_in.data, gather_out.data, kCount, type.nccl, second, second_stream),
                ncclSuccess, what + ": ncclAllGather");
  if (in_group) expect_result(ncclGroupEnd(), ncclSuccess, what + ": ncclGroupEnd");  // queued only now
  if (world_rank % 2 == 0) {
    sync(first_stream);
    sync(second_stream);
  } else {
    sync(second_stream);
    sync(first_stream);
  }
  std::vector<double> sums(kCount), gathered;
  for (size_t i = 0; i < kCount; ++i) sums[i] = reduced(type, ncclSum, world_size, i);
  for (int r = 0; r < world_size; ++r)
    for (double value : contributions(type, ncclProd, r, kCount)) gathered.push_back(value);
  expect_values(type, download(reduce, 0, bytes), sums, what + ": all_reduce");
  expect_values(type, download(gather_out, 0, gather_out.bytes), gathered, what + ": all_gather");
}

// A collective that waits for ranks that never call it (only rank 0 does, on a communicator of
// its own), ended by ncclCommAbort from a watchdog thread while the main thread is blocked in
// cudaStreamSynchronize. The other ranks call it afterwards, so that rank 0's abandoned MPI
// request completes before MPI_Finalize.
void check_abort_from_a_watchdog(cudaStream_t stream) {
  ncclComm_t comm = make_blocking_comm();
  const size_t bytes = kCount * sizeof(float);
  DeviceBuffer data(bytes);
  upload(data, 0, encode_all(kF32, contributions(kF32, ncclSum, world_rank, kCount)));
  if (world_rank == 0) {
    expect_result(ncclAllReduce(data.data, data.data, kCount, ncclFloat32, ncclSum, comm, stream), ncclSuccess,
                  "ncclAllReduce before the abort");
    std::atomic<bool> queried{false};
    std::thread watchdog([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      ncclResult_t state = ncclInternalError;
      expect_result(ncclCommGetAsyncError(comm, &state), ncclSuccess, "ncclCommGetAsyncError from the watchdog");
      expect(state == ncclSuccess, "the watchdog saw async state " + std::string(ncclGetErrorString(state)));
      queried = true;
      expect_result(ncclCommAbort(comm), ncclSuccess, "ncclCommAbort from the watchdog");
    });
    const auto started = std::chrono::steady_clock::now();
    sync(stream);  // returns once the watchdog aborted the communicator
    watchdog.join();
    expect(queried, "the watchdog's ncclCommGetAsyncError did not return while the main thread waited");
    expect(std::chrono::steady_clock::now() - started >= std::chrono::milliseconds(250),
           "the collective waiting for other ranks completed before the abort");
    const std::vector<std::byte> after = download(data, 0, bytes);
    expect(after == std::vector<std::byte>(bytes, std::byte{0xFF}),
           "the aborted all-reduce's output is not poisoned with 0xFF bytes");
    ncclResult_t state = ncclSuccess;
    expect_result(ncclCommGetAsyncError(comm, &state), ncclInvalidUsage, "ncclCommGetAsyncError after the abort");
    expect(state == ncclSystemError, "the aborted communicator's async error is not ncclSystemError");
    expect_result(ncclCommDestroy(comm), ncclInvalidUsage, "ncclCommDestroy after ncclCommAbort");
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank != 0) {
    expect_result(ncclAllReduce(data.data, data.data, kCount, ncclFloat32, ncclSum, comm, stream), ncclSuccess,
                  "ncclAllReduce joining the aborted one");
    sync(stream);
    std::vector<double> expected(kCount);
    for (size_t i = 0; i < kCount; ++i) expected[i] = reduced(kF32, ncclSum, world_size, i);
    expect_values(kF32, download(data, 0, bytes), expected, "all_reduce whose rank 0 aborted after sending");
    expect_result(ncclCommDestroy(comm), ncclSuccess, "ncclCommDestroy");
  }
}

void check_before_mpi_init() {
  ncclUniqueId id{};
  expect_result(ncclGetUniqueId(&id), ncclSuccess, "ncclGetUniqueId before MPI_Init");
  ncclComm_t comm = nullptr;
  expect_result(ncclCommInitRank(&comm, 1, id, 0), ncclInvalidUsage, "ncclCommInitRank before MPI_Init");
  expect(std::string(ncclGetLastError(nullptr)).find("MPI") != std::string::npos,
         std::string("the last error does not say that the emulated NCCL needs MPI: ") + ncclGetLastError(nullptr));
}

void finalize_and_destroy(ncclComm_t comm, const char* what) {
  expect_result(settle(comm, ncclCommFinalize(comm)), ncclSuccess, std::string("ncclCommFinalize of ") + what);
  expect_result(ncclCommDestroy(comm), ncclSuccess, std::string("ncclCommDestroy of ") + what);
}

void run_checks() {
  ncclComm_t main_comm = make_blocking_comm();
  ncclComm_t gather_comm = make_nonblocking_comm("all-gather");
  int count = 0, rank = -1;
  expect_result(ncclCommCount(main_comm, &count), ncclSuccess, "ncclCommCount");
  expect_result(ncclCommUserRank(gather_comm, &rank), ncclSuccess, "ncclCommUserRank");
  expect(count == world_size && rank == world_rank, "ncclCommCount / ncclCommUserRank disagree with MPI");
  cudaStream_t stream = new_stream(), other_stream = new_stream();

  for (const Type* type : {&kF32, &kBF16, &kF16, &kI32}) {
    for (ncclRedOp_t op : {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg})
      for (bool in_place : {false, true}) check_all_reduce(main_comm, stream, *type, op, in_place);
    for (bool in_place : {false, true}) {
      check_reduce_scatter(main_comm, stream, *type, ncclSum, in_place);
      check_all_gather(gather_comm, other_stream, *type, in_place);
      check_broadcast(main_comm, stream, *type, world_size - 1, in_place);
    }
    check_reduce_scatter(main_comm, stream, *type, ncclMin, false);
    check_reduce(main_comm, stream, *type, 0);
  }
  for (const Type& type : kOthers) {
    check_all_reduce(main_comm, stream, type, ncclSum, false);
    check_all_reduce(main_comm, stream, type, ncclMax, true);
    check_all_gather(gather_comm, stream, type, false);
  }
  check_rounding(main_comm, stream, kBF16);
  check_rounding(main_comm, stream, kF16);

  check_drain_orders(main_comm, stream, gather_comm, other_stream, "two communicators");
  check_drain_orders(main_comm, stream, main_comm, other_stream, "one communicator on two streams");
  // A group: queued at its end, then drained in either order.
  check_drain_orders(main_comm, stream, gather_comm, other_stream, "two communicators in a group", true);

  if (world_size > 1) check_abort_from_a_watchdog(stream);

  finalize_and_destroy(main_comm, "the blocking communicator");
  finalize_and_destroy(gather_comm, "the non-blocking communicator");
  check_cuda(cudaStreamDestroy(stream), "cudaStreamDestroy");
  check_cuda(cudaStreamDestroy(other_stream), "cudaStreamDestroy");
}

}  // namespace

int main(int argc, char** argv) {
  check_before_mpi_init();
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  run_checks();
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (world_rank == 0)
    std::printf("emu_nccl_ranks: %d ranks, %s\n", world_size,
                total == 0 ? "all checks passed" : (std::to_string(total) + " checks failed").c_str());
  MPI_Finalize();
  return total == 0 ? 0 : 1;
}
