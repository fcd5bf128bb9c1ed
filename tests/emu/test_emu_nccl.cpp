// The emulated NCCL (src/emu/emu_nccl.cpp) on one-rank communicators: every collective copies
// its input in every data type, in place and out of place; collectives are queued, not run,
// until the stream is synchronised; bad arguments return ncclInvalidArgument with a last error
// that names the argument, and queue nothing; an id not made by ncclGetUniqueId; non-blocking
// init and finalize (ncclInProgress, then ncclSuccess from ncclCommGetAsyncError); an init for
// more ranks than the processes that use the id (in progress forever when non-blocking, an
// error when blocking); ncclCommAbort of a communicator with queued work (the work ends
// without a CUDA error, its output poisoned, the handle unusable); ncclCommDestroy waits for
// queued work; groups; the queries. Multi-rank behaviour (sums across ranks, rounding, drain
// orders, an abort from a watchdog thread) is checked by emu_nccl_ranks.cpp under mpirun.
//
// The emulated NCCL runs over MPI: a global fixture initialises MPI unless the test program
// already did (and finalizes it at the end if it did so itself).
#include <boost/test/unit_test.hpp>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct MpiForTheEmulatedNccl {
  MpiForTheEmulatedNccl() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      MPI_Init(nullptr, nullptr);
      owner = true;
    }
  }
  ~MpiForTheEmulatedNccl() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owner && !finalized) MPI_Finalize();
  }
  bool owner = false;
};
BOOST_TEST_GLOBAL_FIXTURE(MpiForTheEmulatedNccl);

std::string last_error() { return ncclGetLastError(nullptr); }

// The call's result is `expected` and ncclGetLastError mentions every one of `words`.
void check_failure(ncclResult_t result, ncclResult_t expected, std::initializer_list<const char*> words) {
  BOOST_TEST(result == expected, "returned " << ncclGetErrorString(result) << ", expected "
                                             << ncclGetErrorString(expected) << " (" << last_error() << ")");
  for (const char* word : words)
    BOOST_TEST(last_error().find(word) != std::string::npos, "last error '" << last_error() << "' lacks '" << word << "'");
}

// A communicator of this process alone: its own id, so any number of world ranks works.
// Every world rank must make it (MPI_Comm_split over MPI_COMM_WORLD), as every test does.
ncclComm_t one_rank_comm() {
  ncclUniqueId id{};
  BOOST_REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  ncclComm_t comm = nullptr;
  BOOST_REQUIRE(ncclCommInitRank(&comm, 1, id, 0) == ncclSuccess);
  BOOST_REQUIRE(comm != nullptr);
  return comm;
}

void destroy(ncclComm_t comm) { BOOST_TEST(ncclCommDestroy(comm) == ncclSuccess, last_error()); }

struct DeviceBuffer {
  explicit DeviceBuffer(size_t size) : bytes(size) { BOOST_REQUIRE(cudaMalloc(&data, size) == cudaSuccess); }
  ~DeviceBuffer() { cudaFree(data); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  std::byte* at(size_t offset) const { return static_cast<std::byte*>(data) + offset; }
  void* data = nullptr;
  size_t bytes;
};

void upload(const DeviceBuffer& to, const std::vector<std::byte>& bytes) {
  BOOST_REQUIRE(cudaMemcpy(to.data, bytes.data(), bytes.size(), cudaMemcpyHostToDevice) == cudaSuccess);
}

std::vector<std::byte> download(const DeviceBuffer& from) {
  std::vector<std::byte> host(from.bytes);
  BOOST_REQUIRE(cudaMemcpy(host.data(), from.data, from.bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
  return host;
}

// What the host sees in the buffer now, without waiting for the device (its memory is host
// memory on the emulated device).
std::vector<std::byte> peek(const DeviceBuffer& buffer) {
  std::vector<std::byte> host(buffer.bytes);
  std::memcpy(host.data(), buffer.data, buffer.bytes);
  return host;
}

struct Stream {
  Stream() { BOOST_REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess); }
  ~Stream() { cudaStreamDestroy(stream); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  void sync() const { BOOST_TEST(cudaStreamSynchronize(stream) == cudaSuccess); }
  cudaStream_t stream = nullptr;
};

struct TypeCase {
  ncclDataType_t type;
  size_t size;
  const char* name;
};
const TypeCase kTypes[] = {{ncclInt8, 1, "int8"},       {ncclUint8, 1, "uint8"},     {ncclInt32, 4, "int32"},
                           {ncclUint32, 4, "uint32"},   {ncclInt64, 8, "int64"},     {ncclUint64, 8, "uint64"},
                           {ncclFloat16, 2, "fp16"},    {ncclFloat32, 4, "fp32"},    {ncclFloat64, 8, "fp64"},
                           {ncclBfloat16, 2, "bf16"}};

// `count` finite values of `type` (no NaN, whose bits a float round trip may change).
std::vector<std::byte> values_of(const TypeCase& type, size_t count) {
  std::vector<std::byte> bytes(count * type.size);
  for (size_t i = 0; i < count; ++i) {
    const float value = static_cast<float>(i % 97) * 0.37f - 17.0f;
    std::byte* to = bytes.data() + i * type.size;
    auto put = [&](auto typed) { std::memcpy(to, &typed, sizeof(typed)); };
    switch (type.type) {
      case ncclFloat16: put(__float2half_rn(value)); break;
      case ncclBfloat16: put(__float2bfloat16_rn(value)); break;
      case ncclFloat32: put(value); break;
      case ncclFloat64: put(static_cast<double>(value)); break;
      default:  // integers: every byte pattern is a value
        for (size_t b = 0; b < type.size; ++b) to[b] = static_cast<std::byte>((i * 31 + b * 7) & 0xFF);
    }
  }
  return bytes;
}

constexpr size_t kCount = 777;

BOOST_AUTO_TEST_SUITE(emu_nccl)

BOOST_AUTO_TEST_CASE(version_and_error_strings) {
  int version = 0;
  BOOST_TEST(ncclGetVersion(&version) == ncclSuccess);
  BOOST_TEST(version == NCCL_VERSION_CODE);
  BOOST_TEST(std::string(ncclGetErrorString(ncclSuccess)) == "no error");
  BOOST_TEST(std::string(ncclGetErrorString(ncclInvalidArgument)) == "invalid argument");
  BOOST_TEST(std::string(ncclGetErrorString(ncclInProgress)).find("in progress") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(queries_report_rank_count_and_device) {
  ncclComm_t comm = one_rank_comm();
  int count = 0, rank = -1, device = -1, current = -2;
  BOOST_TEST(ncclCommCount(comm, &count) == ncclSuccess);
  BOOST_TEST(ncclCommUserRank(comm, &rank) == ncclSuccess);
  BOOST_TEST(ncclCommCuDevice(comm, &device) == ncclSuccess);
  BOOST_TEST(cudaGetDevice(&current) == cudaSuccess);
  BOOST_TEST(count == 1);
  BOOST_TEST(rank == 0);
  BOOST_TEST(device == current);
  ncclResult_t state = ncclInternalError;
  BOOST_TEST(ncclCommGetAsyncError(comm, &state) == ncclSuccess);
  BOOST_TEST(state == ncclSuccess);
  destroy(comm);
}

// One rank: every reduction of its own values is those values, bit for bit.
BOOST_AUTO_TEST_CASE(a_one_rank_all_reduce_copies_its_input_in_every_type_and_op) {
  ncclComm_t comm = one_rank_comm();
  Stream stream;
  for (const TypeCase& type : kTypes) {
    const std::vector<std::byte> values = values_of(type, kCount);
    for (ncclRedOp_t op : {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg}) {
      BOOST_TEST_CONTEXT(type.name << ", op " << static_cast<int>(op)) {
        DeviceBuffer send(values.size()), recv(values.size());
        upload(send, values);
        BOOST_TEST(ncclAllReduce(send.data, recv.data, kCount, type.type, op, comm, stream.stream) == ncclSuccess,
                   last_error());
        BOOST_TEST(ncclAllReduce(send.data, send.data, kCount, type.type, op, comm, stream.stream) == ncclSuccess,
                   last_error());  // in place
        stream.sync();
        BOOST_TEST((download(recv) == values));
        BOOST_TEST((download(send) == values));
      }
    }
  }
  destroy(comm);
}

BOOST_AUTO_TEST_CASE(one_rank_reduce_scatter_all_gather_broadcast_and_reduce_copy_in_and_out_of_place) {
  ncclComm_t comm = one_rank_comm();
  Stream stream;
  const TypeCase& type = kTypes[9];  // bf16
  const std::vector<std::byte> values = values_of(type, kCount);
  DeviceBuffer in(values.size()), out(values.size());
  upload(in, values);
  BOOST_TEST(ncclReduceScatter(in.data, out.data, kCount, type.type, ncclSum, comm, stream.stream) == ncclSuccess);
  stream.sync();
  BOOST_TEST((download(out) == values));
  for (int call = 0; call < 4; ++call) {  // each in place (one rank: this rank's slice is the whole)
    BOOST_TEST_CONTEXT("in-place call " << call) {
      ncclResult_t result = ncclSuccess;
      if (call == 0) result = ncclReduceScatter(in.data, in.data, kCount, type.type, ncclMax, comm, stream.stream);
      if (call == 1) result = ncclAllGather(in.data, in.data, kCount, type.type, comm, stream.stream);
      if (call == 2) result = ncclBroadcast(in.data, in.data, kCount, type.type, 0, comm, stream.stream);
      if (call == 3) result = ncclReduce(in.data, in.data, kCount, type.type, ncclMin, 0, comm, stream.stream);
      BOOST_TEST(result == ncclSuccess, last_error());
      stream.sync();
      BOOST_TEST((download(in) == values));
    }
  }
  DeviceBuffer gathered(values.size()), broadcast(values.size()), reduced(values.size());
  BOOST_TEST(ncclAllGather(in.data, gathered.data, kCount, type.type, comm, stream.stream) == ncclSuccess);
  BOOST_TEST(ncclBroadcast(in.data, broadcast.data, kCount, type.type, 0, comm, stream.stream) == ncclSuccess);
  BOOST_TEST(ncclReduce(in.data, reduced.data, kCount, type.type, ncclAvg, 0, comm, stream.stream) == ncclSuccess);
  stream.sync();
  BOOST_TEST((download(gathered) == values));
  BOOST_TEST((download(broadcast) == values));
  BOOST_TEST((download(reduced) == values));
  destroy(comm);
}

// A collective is device work: queued, it runs when the host waits for its stream.
BOOST_AUTO_TEST_CASE(collectives_write_nothing_before_the_stream_is_synchronised) {
  ncclComm_t comm = one_rank_comm();
  Stream stream;
  const std::vector<std::byte> values = values_of(kTypes[7], kCount);
  DeviceBuffer send(values.size()), recv(values.size()), gathered(values.size());
  upload(send, values);
  upload(recv, std::vector<std::byte>(values.size(), std::byte{0x11}));
  upload(gathered, std::vector<std::byte>(values.size(), std::byte{0x22}));
  const std::vector<std::byte> recv_before = peek(recv), gathered_before = peek(gathered);
  BOOST_TEST(ncclAllReduce(send.data, recv.data, kCount, ncclFloat32, ncclSum, comm, stream.stream) == ncclSuccess);
  BOOST_TEST(ncclAllGather(send.data, gathered.data, kCount, ncclFloat32, comm, stream.stream) == ncclSuccess);
  BOOST_TEST((peek(recv) == recv_before));
  BOOST_TEST((peek(gathered) == gathered_before));
  stream.sync();
  BOOST_TEST((download(recv) == values));
  BOOST_TEST((download(gathered) == values));
  destroy(comm);
}

// Each bad argument: ncclInvalidArgument, a last error naming it, and nothing queued (the
// stream synchronises without a device fault).
BOOST_AUTO_TEST_CASE(bad_arguments_return_invalid_argument_naming_the_argument) {
  ncclComm_t comm = one_rank_comm();
  Stream stream;
  DeviceBuffer buffer(64), small(16);
  std::vector<float> pageable(16, 1.0f);
  const cudaStream_t s = stream.stream;
  check_failure(ncclAllReduce(buffer.data, buffer.data, 16, ncclFloat32, ncclSum, nullptr, s), ncclInvalidArgument,
                {"ncclAllReduce", "comm is NULL"});
  check_failure(ncclAllReduce(buffer.data, buffer.data, 16, ncclFloat8e4m3, ncclSum, comm, s), ncclInvalidArgument,
                {"ncclAllReduce", "datatype"});
  check_failure(ncclAllReduce(buffer.data, buffer.data, 16, static_cast<ncclDataType_t>(15), ncclSum, comm, s),
                ncclInvalidArgument, {"datatype 15"});
  check_failure(ncclAllReduce(buffer.data, buffer.data, 16, ncclFloat32, static_cast<ncclRedOp_t>(7), comm, s),
                ncclInvalidArgument, {"op 7"});
  check_failure(ncclAllReduce(pageable.data(), buffer.data, 16, ncclFloat32, ncclSum, comm, s), ncclInvalidArgument,
                {"ncclAllReduce", "sendbuff"});
  check_failure(ncclAllReduce(buffer.data, pageable.data(), 16, ncclFloat32, ncclSum, comm, s), ncclInvalidArgument,
                {"recvbuff"});
  check_failure(ncclAllReduce(buffer.data, nullptr, 16, ncclFloat32, ncclSum, comm, s), ncclInvalidArgument,
                {"recvbuff"});
  check_failure(ncclAllReduce(buffer.data, small.data, 16, ncclFloat32, ncclSum, comm, s), ncclInvalidArgument,
                {"recvbuff"});  // 64 bytes do not fit in 16
  check_failure(ncclAllReduce(buffer.data, buffer.at(4), 8, ncclFloat32, ncclSum, comm, s), ncclInvalidArgument,
                {"overlap", "in-place"});
  check_failure(ncclAllGather(buffer.data, buffer.at(4), 8, ncclFloat32, comm, s), ncclInvalidArgument,
                {"ncclAllGather", "sendbuff == recvbuff + rank * sendcount"});
  check_failure(ncclBroadcast(buffer.data, buffer.data, 16, ncclFloat32, 1, comm, s), ncclInvalidArgument,
                {"ncclBroadcast", "root 1"});
  check_failure(ncclReduce(buffer.data, buffer.data, 16, ncclFloat32, ncclSum, -1, comm, s), ncclInvalidArgument,
                {"ncclReduce", "root -1"});
  // Nothing to move: accepted, nothing checked or queued.
  BOOST_TEST(ncclAllReduce(nullptr, nullptr, 0, ncclFloat32, ncclSum, comm, s) == ncclSuccess);
  stream.sync();
  destroy(comm);
}

BOOST_AUTO_TEST_CASE(bad_init_arguments_return_invalid_argument) {
  ncclComm_t comm = nullptr;
  ncclUniqueId id{};  // never filled by ncclGetUniqueId (a rank that missed the broadcast)
  check_failure(ncclCommInitRank(&comm, 1, id, 0), ncclInvalidArgument, {"ncclCommInitRank", "commId"});
  BOOST_TEST(comm == nullptr);
  BOOST_REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  check_failure(ncclCommInitRank(&comm, 1, id, 1), ncclInvalidArgument, {"rank 1"});
  check_failure(ncclCommInitRank(&comm, 0, id, 0), ncclInvalidArgument, {"nranks 0"});
  ncclConfig_t config{};  // not NCCL_CONFIG_INITIALIZER
  check_failure(ncclCommInitRankConfig(&comm, 1, id, 0, &config), ncclInvalidArgument, {"NCCL_CONFIG_INITIALIZER"});
  check_failure(ncclGetUniqueId(nullptr), ncclInvalidArgument, {"ncclGetUniqueId"});
}

BOOST_AUTO_TEST_CASE(a_non_blocking_init_and_finalize_answer_in_progress_then_success) {
  ncclUniqueId id{};
  BOOST_REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  config.commName = "test non-blocking";
  ncclComm_t comm = nullptr;
  BOOST_TEST(ncclCommInitRankConfig(&comm, 1, id, 0, &config) == ncclInProgress);
  BOOST_REQUIRE(comm != nullptr);
  ncclResult_t state = ncclInternalError;
  BOOST_TEST(ncclCommGetAsyncError(comm, &state) == ncclSuccess);
  BOOST_TEST(state == ncclSuccess);
  Stream stream;
  DeviceBuffer data(64);
  BOOST_TEST(ncclAllReduce(data.data, data.data, 16, ncclFloat32, ncclSum, comm, stream.stream) == ncclSuccess);
  BOOST_TEST(ncclCommFinalize(comm) == ncclInProgress);  // waits for the queued all-reduce
  BOOST_TEST(ncclCommGetAsyncError(comm, &state) == ncclSuccess);
  BOOST_TEST(state == ncclSuccess);
  check_failure(ncclAllReduce(data.data, data.data, 16, ncclFloat32, ncclSum, comm, stream.stream), ncclInvalidUsage,
                {"test non-blocking", "finalized"});
  destroy(comm);
}

// The processes that use an id are all the ranks there will ever be (MPI_Comm_split over
// MPI_COMM_WORLD). A non-blocking init stays in progress, as real NCCL waiting for a rank that
// never comes, until the program aborts it; a blocking one fails rather than hang.
BOOST_AUTO_TEST_CASE(an_init_for_more_ranks_than_the_processes_waits_until_aborted_or_fails) {
  ncclUniqueId id{};
  BOOST_REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);  // this process's alone: one member
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  BOOST_TEST(ncclCommInitRankConfig(&comm, 2, id, 0, &config) == ncclInProgress);
  BOOST_REQUIRE(comm != nullptr);
  for (int poll = 0; poll < 3; ++poll) {
    ncclResult_t state = ncclSuccess;
    BOOST_TEST(ncclCommGetAsyncError(comm, &state) == ncclSuccess);
    BOOST_TEST(state == ncclInProgress);
  }
  DeviceBuffer data(64);
  check_failure(ncclAllReduce(data.data, data.data, 16, ncclFloat32, ncclSum, comm, nullptr), ncclInvalidUsage,
                {"still being initialised", "rank 1 of 2 never joined"});
  BOOST_TEST(ncclCommAbort(comm) == ncclSuccess);

  ncclComm_t blocking = nullptr;
  BOOST_REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  check_failure(ncclCommInitRank(&blocking, 2, id, 1), ncclInvalidArgument, {"rank 0 of 2 never joined"});
  BOOST_TEST(blocking == nullptr);
}

// An aborted communicator's queued collectives end without a CUDA error (a GPU's aborted NCCL
// kernels return), their output poisoned; the handle may not be used afterwards.
BOOST_AUTO_TEST_CASE(abort_ends_queued_collectives_and_the_handle) {
  ncclComm_t comm = one_rank_comm();
  Stream stream;
  const std::vector<std::byte> values = values_of(kTypes[7], kCount);
  DeviceBuffer send(values.size()), recv(values.size());
  upload(send, values);
  BOOST_TEST(ncclAllReduce(send.data, recv.data, kCount, ncclFloat32, ncclSum, comm, stream.stream) == ncclSuccess);
  BOOST_TEST(ncclCommAbort(comm) == ncclSuccess);
  stream.sync();  // returns: the aborted all-reduce is done
  BOOST_TEST((download(recv) == std::vector<std::byte>(values.size(), std::byte{0xFF})));
  BOOST_TEST((download(send) == values));
  ncclResult_t state = ncclSuccess;
  check_failure(ncclCommGetAsyncError(comm, &state), ncclInvalidUsage, {"aborted"});
  BOOST_TEST(state == ncclSystemError);
  check_failure(ncclAllReduce(send.data, recv.data, kCount, ncclFloat32, ncclSum, comm, stream.stream),
                ncclInvalidUsage, {"aborted"});
  check_failure(ncclCommDestroy(comm), ncclInvalidUsage, {"ncclCommDestroy", "aborted"});
  BOOST_TEST(ncclCommAbort(nullptr) == ncclSuccess);
  BOOST_TEST(ncclCommDestroy(nullptr) == ncclSuccess);
  BOOST_TEST(cudaGetLastError() == cudaSuccess);  // no sticky device fault
}

BOOST_AUTO_TEST_CASE(destroy_waits_for_queued_collectives_and_ends_the_handle) {
  ncclComm_t comm = one_rank_comm();
  Stream stream;
  const std::vector<std::byte> values = values_of(kTypes[6], kCount);  // fp16
  DeviceBuffer send(values.size()), recv(values.size());
  upload(send, values);
  BOOST_TEST(ncclAllGather(send.data, recv.data, kCount, ncclFloat16, comm, stream.stream) == ncclSuccess);
  destroy(comm);  // without finalize or sync first
  BOOST_TEST((peek(recv) == values));
  int count = 0;
  check_failure(ncclCommCount(comm, &count), ncclInvalidUsage, {"destroyed"});
  check_failure(ncclCommDestroy(comm), ncclInvalidUsage, {"destroyed"});
}

// Operations between ncclGroupStart and ncclGroupEnd are queued at the outermost end, as NCCL
// launches a group: a program that reads a collective's result before ending its group (the
// mutant) finds it unchanged after synchronising the stream, as on a GPU.
BOOST_AUTO_TEST_CASE(groups_nest_and_an_unmatched_end_is_invalid_usage) {
  ncclComm_t comm = one_rank_comm();
  Stream stream;
  const std::vector<std::byte> values = values_of(kTypes[7], kCount);
  DeviceBuffer send(values.size()), recv(values.size());
  upload(send, values);
  upload(recv, std::vector<std::byte>(values.size(), std::byte{0x11}));
  const std::vector<std::byte> recv_before = peek(recv);
  BOOST_TEST(ncclGroupStart() == ncclSuccess);
  BOOST_TEST(ncclGroupStart() == ncclSuccess);
  BOOST_TEST(ncclAllReduce(send.data, recv.data, kCount, ncclFloat32, ncclMax, comm, stream.stream) == ncclSuccess);
  BOOST_TEST(ncclGroupEnd() == ncclSuccess);
  stream.sync();  // inside the outer group: nothing of it is queued yet
  BOOST_TEST((peek(recv) == recv_before));
  BOOST_TEST(ncclGroupEnd() == ncclSuccess);
  stream.sync();
  BOOST_TEST((download(recv) == values));
  check_failure(ncclGroupEnd(), ncclInvalidUsage, {"ncclGroupStart"});
  destroy(comm);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace
