// The NCCL subset the project calls (unique id, init, finalize, destroy, abort, the asynchronous
// error query, all-reduce, reduce-scatter, all-gather, broadcast, reduce, groups), emulated over
// MPI between the ranks' processes. The functions are those nccl.h declares (the nccl* names;
// the pnccl* profiling aliases are not defined: the project never calls them).
//
// How it works and what it assumes:
// - MPI must be initialised by the program (MPI_Init / MPI_Init_thread) before a communicator
//   is made, else the call fails with ncclInvalidUsage.
// - ncclGetUniqueId fills an id with a marker and random bytes; the program sends it to the
//   other ranks as for real NCCL. ncclCommInitRank(Config) joins the ranks that pass the same
//   id with MPI_Comm_split(MPI_COMM_WORLD, colour from the id, key = rank). That is collective
//   over MPI_COMM_WORLD: EVERY world rank must make each communicator, all in the same order
//   (real NCCL only needs the ranks of the id). The project makes its communicators that way.
//   A rank that never joins (the communicator has fewer processes than nranks) leaves a
//   non-blocking init in progress forever, as real NCCL would wait for it; a blocking init
//   fails with ncclInvalidArgument rather than hang.
// - The split communicator carries only this NCCL communicator's traffic (MPI gives every
//   communicator its own matching context), so it never mixes with the project's MPI messages.
// - A collective is checked when it is called (bad arguments return ncclInvalidArgument with
//   ncclGetLastError naming the argument; buffers must be device memory or pinned host memory,
//   as a kernel could read them) and QUEUED on its stream: it runs when the host waits for that
//   stream, like every other piece of device work here. Work::run starts a non-blocking MPI
//   collective on snapshots of the inputs, Work::done tests it and, once complete, reduces
//   locally in rank order 0..n-1 and writes the outputs: every rank gets identical bits.
//   16-bit types are summed in float and rounded once per element; real NCCL rounds after each
//   ring step, so only tolerances, not bits, carry over to a GPU.
// - The MPI collectives of one communicator start in issue order even when their streams are
//   drained in another order (MPI, like NCCL, needs one order per communicator on every rank);
//   different communicators progress independently, so ranks that drain two communicators'
//   streams in different orders do not deadlock.
// - The MPI calls run on the host thread that drains the stream. The project initialises MPI
//   with MPI_Init (MPI_THREAD_SINGLE, in practice): that must be MPI's main thread, which is
//   checked. ncclCommGetAsyncError and ncclCommAbort take no lock and call no MPI function, so a
//   watchdog thread may call them while another thread waits in a drain.
// - ncclGroupStart / ncclGroupEnd: the operations between them are queued on their streams at
//   the outermost ncclGroupEnd, collectives in call order, then each communicator's sends and
//   receives as one operation (NCCL launches a group only at its end: a stream waited for
//   inside the group has not got the group's work yet).
// - ncclCommAbort marks the communicator aborted: its queued operations then complete at once
//   without a CUDA error (a GPU's aborted NCCL kernels return; the stream goes on), their
//   outputs filled with 0xFF bytes (NaN) so that a result read after an abort shows. The MPI
//   requests in flight cannot be cancelled: they and their buffers are kept until the process
//   ends (the job is about to be aborted anyway).
// - Handles are never freed: after ncclCommDestroy or ncclCommAbort a handle stays a tombstone,
//   so that a later use is reported as ncclInvalidUsage instead of a use-after-free.
#include <mpi.h>
#include <nccl.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "emu/emu_internal.h"

namespace zt_emu_nccl {

// Where a communicator is in its life.
enum class Life : int {
  Joining,    // non-blocking init waiting for ranks that never came
  Ready,
  Finalized,
  Destroyed,  // tombstone
  Aborted,    // tombstone
};

// The state behind a handle, shared with its queued operations (which may outlive the handle's
// use: an aborted operation is dropped from its queue later).
struct Communicator {
  std::string name;   // config->commName, for messages
  int rank = 0;
  int size = 0;
  int device = 0;
  bool blocking = true;
  MPI_Comm mpi = MPI_COMM_NULL;
  std::string joining_message;  // why a non-blocking init is still in progress (fixed once made)

  std::atomic<int> async_error{ncclSuccess};  // what ncclCommGetAsyncError reports
  std::atomic<bool> aborted{false};
  std::atomic<int> outstanding{0};            // operations queued and not yet complete

  // Under the device lock: issue order and start order of the MPI collectives.
  uint64_t issued = 0;
  uint64_t started = 0;
  bool broken = false;  // an operation faulted before starting: later ones cannot start

  std::string describe() const {
    return "communicator '" + name + "' (rank " + std::to_string(rank) + " of " + std::to_string(size) + ")";
  }
};

}  // namespace zt_emu_nccl

// The opaque handle nccl.h declares. Never freed (see the first comment).
struct ncclComm {
  static constexpr uint32_t kMagic = 0x7a74636du;
  uint32_t magic = kMagic;
  std::atomic<int> life{static_cast<int>(zt_emu_nccl::Life::Ready)};
  std::shared_ptr<zt_emu_nccl::Communicator> state;
};

namespace zt_emu_nccl {
namespace {

// ---- errors ----------------------------------------------------------------------------------

// The text of ncclGetLastError: per host thread, because the project reads it on the thread
// whose call just failed, and another thread (a watchdog) may fail a call at the same time.
thread_local std::string last_error;

ncclResult_t fail(ncclResult_t code, std::string message) {
  last_error = std::move(message);
  if (zt_emu::env_int("ZT_EMU_VERBOSE", 0) != 0) std::fprintf(stderr, "zt_emu nccl: %s\n", last_error.c_str());
  return code;
}

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<size_t>(length));
}

// ---- MPI -------------------------------------------------------------------------------------

// Empty when MPI can be used now, else why not.
std::string mpi_unusable() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized)
    return "the emulated NCCL runs over MPI between the ranks' processes: MPI must be initialised "
           "(MPI_Init) before an NCCL communicator is made";
  if (finalized) return "the emulated NCCL runs over MPI, and MPI has been finalized";
  return "";
}

// The emulated collectives call MPI on the thread that drains their stream; with less than
// MPI_THREAD_SERIALIZED that must be MPI's main thread.
void check_mpi_thread(const std::string& what) {
  int provided = MPI_THREAD_SINGLE, is_main = 0;
  MPI_Query_thread(&provided);
  MPI_Is_thread_main(&is_main);
  if (provided < MPI_THREAD_SERIALIZED && !is_main)
    zt_emu::device_fault("nccl: " + what + " ran on a host thread other than MPI's main thread, and MPI was "
                         "initialised without MPI_THREAD_SERIALIZED: the emulated collectives call MPI on the "
                         "thread that synchronises their stream");
}

void check_mpi(int code, const std::string& call, const std::string& what) {
  if (code != MPI_SUCCESS) zt_emu::device_fault("nccl: " + call + " failed in " + what + ": " + mpi_error_text(code));
}

// MPI counts are int: a byte count beyond INT_MAX goes as blocks of a contiguous type (the
// largest power of two up to 1 MiB that divides it).
struct ByteCount {
  MPI_Datatype type = MPI_BYTE;
  int count = 0;
  bool owned = false;  // `type` was created here and is freed once the request started
};

size_t byte_unit(size_t bytes) {
  if (bytes <= static_cast<size_t>(INT_MAX)) return 1;
  size_t unit = 1;
  while (unit < (size_t{1} << 20) && bytes % (unit * 2) == 0) unit *= 2;
  return unit;
}

bool countable(size_t bytes) { return bytes / byte_unit(bytes) <= static_cast<size_t>(INT_MAX); }

ByteCount byte_count(size_t bytes, const std::string& what) {
  ByteCount result;
  const size_t unit = byte_unit(bytes);
  result.count = static_cast<int>(bytes / unit);
  if (unit > 1) {
    check_mpi(MPI_Type_contiguous(static_cast<int>(unit), MPI_BYTE, &result.type), "MPI_Type_contiguous", what);
    check_mpi(MPI_Type_commit(&result.type), "MPI_Type_commit", what);
    result.owned = true;
  }
  return result;
}

void release(ByteCount& count) {
  if (count.owned) MPI_Type_free(&count.type);  // pending operations using it complete normally
}

// ---- the unique id ---------------------------------------------------------------------------

// An id made by ncclGetUniqueId: a marker (to recognise an id that was never filled in, e.g.
// not broadcast) and random bytes; the rest is zero.
constexpr char kIdMarker[] = "zerotune-emu-nccl-id";
constexpr size_t kIdRandomBytes = 16;
static_assert(sizeof(kIdMarker) + kIdRandomBytes <= NCCL_UNIQUE_ID_BYTES);

bool made_by_get_unique_id(const ncclUniqueId& id) {
  return std::memcmp(id.internal, kIdMarker, sizeof(kIdMarker)) == 0;
}

// The MPI_Comm_split colour of an id: a hash of its random bytes, non-negative as MPI needs.
int colour_of(const ncclUniqueId& id) {
  uint64_t hash = 1469598103934665603ull;  // FNV-1a
  for (size_t i = 0; i < kIdRandomBytes; ++i) {
    hash ^= static_cast<unsigned char>(id.internal[sizeof(kIdMarker) + i]);
    hash *= 1099511628211ull;
  }
  return static_cast<int>((hash ^ (hash >> 32)) & 0x3fffffffu);
}

// ---- handles ---------------------------------------------------------------------------------

Life life_of(const ncclComm* comm) { return static_cast<Life>(comm->life.load()); }

// The state of a handle the call may use, or nullptr with the error in `error`.
// `allowed` lists the lives (besides Ready) in which `call` accepts the handle.
Communicator* usable(ncclComm_t comm, const char* call, ncclResult_t* error, std::initializer_list<Life> allowed = {}) {
  if (comm == nullptr) {
    *error = fail(ncclInvalidArgument, std::string(call) + ": comm is NULL");
    return nullptr;
  }
  if (comm->magic != ncclComm::kMagic) {
    *error = fail(ncclInvalidArgument, std::string(call) + ": comm is not a communicator made by ncclCommInitRank");
    return nullptr;
  }
  const Life life = life_of(comm);
  if (life == Life::Ready || std::find(allowed.begin(), allowed.end(), life) != allowed.end()) return comm->state.get();
  const std::string who = comm->state->describe();
  switch (life) {
    case Life::Joining:
      *error = fail(ncclInvalidUsage, std::string(call) + ": " + who + " is still being initialised (" +
                                          comm->state->joining_message + ")");
      break;
    case Life::Finalized:
      *error = fail(ncclInvalidUsage, std::string(call) + ": " + who + " was finalized (ncclCommFinalize)");
      break;
    case Life::Destroyed:
      *error = fail(ncclInvalidUsage, std::string(call) + ": " + who + " was destroyed (ncclCommDestroy): "
                                          "the handle must not be used afterwards");
      break;
    default:
      *error = fail(ncclInvalidUsage, std::string(call) + ": " + who + " was aborted (ncclCommAbort, which "
                                          "also frees it): the handle must not be used afterwards");
      break;
  }
  return nullptr;
}

// ---- initialisation --------------------------------------------------------------------------

// Empty when the arguments of an init are valid, else the message.
std::string init_argument_problem(const char* call, ncclComm_t* comm, int nranks, const ncclUniqueId& id, int rank,
                                  const ncclConfig_t* config) {
  const std::string prefix = std::string(call) + ": ";
  if (comm == nullptr) return prefix + "comm (the ncclComm_t* to fill) is NULL";
  if (nranks < 1) return prefix + "nranks " + std::to_string(nranks) + " is not positive";
  if (rank < 0 || rank >= nranks)
    return prefix + "rank " + std::to_string(rank) + " is not in [0, nranks = " + std::to_string(nranks) + ")";
  if (!made_by_get_unique_id(id))
    return prefix + "commId was not made by ncclGetUniqueId (was it sent from the rank that made it?)";
  if (config != nullptr && config->magic != 0xcafebeef)
    return prefix + "config was not initialised with NCCL_CONFIG_INITIALIZER";
  if (config != nullptr && config->blocking != NCCL_CONFIG_UNDEF_INT && config->blocking != 0 &&
      config->blocking != 1)
    return prefix + "config->blocking is " + std::to_string(config->blocking) + ", not 0 or 1";
  return "";
}

// "1, 3" of the ranks in [0, nranks) that nobody in `claimed` has.
std::string missing_ranks(const std::vector<int>& claimed, int nranks) {
  std::string missing;
  for (int rank = 0; rank < nranks; ++rank)
    if (std::find(claimed.begin(), claimed.end(), rank) == claimed.end())
      missing += (missing.empty() ? "" : ", ") + std::to_string(rank);
  return missing;
}

ncclComm_t new_handle(std::shared_ptr<Communicator> state, Life life) {
  auto* handle = new ncclComm;
  handle->state = std::move(state);
  handle->life.store(static_cast<int>(life));
  return handle;
}

// Both init calls. Every world rank must get here (MPI_Comm_split), even one whose arguments
// are bad: it takes part with MPI_UNDEFINED, so that the others do not wait for it.
ncclResult_t init(const char* call, ncclComm_t* comm, int nranks, const ncclUniqueId& id, int rank,
                  const ncclConfig_t* config) {
  if (comm != nullptr) *comm = nullptr;
  if (const std::string problem = mpi_unusable(); !problem.empty())
    return fail(ncclInvalidUsage, std::string(call) + ": " + problem);
  const std::string problem = init_argument_problem(call, comm, nranks, id, rank, config);
  MPI_Comm split = MPI_COMM_NULL;
  const int code = MPI_Comm_split(MPI_COMM_WORLD, problem.empty() ? colour_of(id) : MPI_UNDEFINED, rank, &split);
  if (!problem.empty()) return fail(ncclInvalidArgument, problem);
  if (code != MPI_SUCCESS)
    return fail(ncclSystemError, std::string(call) + ": MPI_Comm_split failed: " + mpi_error_text(code));
  MPI_Comm_set_errhandler(split, MPI_ERRORS_RETURN);

  // What every process of this id claims: (nranks, rank). All members see the same table, so
  // they all reach the same verdict.
  int members = 0;
  MPI_Comm_size(split, &members);
  const int mine[2] = {nranks, rank};
  std::vector<int> table(2 * static_cast<size_t>(members));
  if (const int gathered = MPI_Allgather(mine, 2, MPI_INT, table.data(), 2, MPI_INT, split);
      gathered != MPI_SUCCESS) {
    MPI_Comm_free(&split);
    return fail(ncclSystemError, std::string(call) + ": MPI_Allgather failed: " + mpi_error_text(gathered));
  }
  std::vector<int> claimed;
  for (int member = 0; member < members; ++member) {
    const int their_nranks = table[2 * static_cast<size_t>(member)];
    const int their_rank = table[2 * static_cast<size_t>(member) + 1];
    std::string disagreement;
    if (their_nranks != nranks)
      disagreement = "processes passed nranks " + std::to_string(nranks) + " and " + std::to_string(their_nranks);
    else if (std::find(claimed.begin(), claimed.end(), their_rank) != claimed.end())
      disagreement = "two processes passed rank " + std::to_string(their_rank);
    if (!disagreement.empty()) {
      MPI_Comm_free(&split);
      return fail(ncclInvalidArgument, std::string(call) + ": the ranks of one commId disagree: " + disagreement);
    }
    claimed.push_back(their_rank);
  }

  auto state = std::make_shared<Communicator>();
  state->name = config != nullptr && config->commName != nullptr ? config->commName : "nccl";
  state->rank = rank;
  state->size = nranks;
  state->blocking = config == nullptr || config->blocking != 0;
  if (cudaGetDevice(&state->device) != cudaSuccess) state->device = 0;
  state->mpi = split;

  if (members < nranks) {
    const std::string missing = missing_ranks(claimed, nranks);
    const bool several = missing.find(',') != std::string::npos;
    const std::string why = (several ? "ranks " : "rank ") + missing + " of " + std::to_string(nranks) +
                            " never joined: only " + std::to_string(members) +
                            (members == 1 ? " process" : " processes") + " used this commId, and the emulated NCCL "
                            "joins the ranks with MPI_Comm_split over MPI_COMM_WORLD, so no process can join later";
    if (state->blocking) {
      MPI_Comm_free(&split);
      return fail(ncclInvalidArgument, std::string(call) + ": " + why + " (real NCCL would wait forever)");
    }
    // As real NCCL: in progress until the program gives up and aborts it.
    state->joining_message = why;
    state->async_error.store(ncclInProgress);
    *comm = new_handle(std::move(state), Life::Joining);
    return ncclInProgress;
  }
  const bool blocking = state->blocking;
  *comm = new_handle(std::move(state), Life::Ready);
  return blocking ? ncclSuccess : ncclInProgress;  // non-blocking: complete at once, as GetAsyncError says
}

// ---- arithmetic ------------------------------------------------------------------------------

size_t element_size(ncclDataType_t type) {
  switch (type) {
    case ncclInt8:
    case ncclUint8: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64: return 8;
    default: return 0;  // fp8 and anything else: not emulated
  }
}

const char* type_name(ncclDataType_t type) {
  switch (type) {
    case ncclInt8: return "ncclInt8";
    case ncclUint8: return "ncclUint8";
    case ncclInt32: return "ncclInt32";
    case ncclUint32: return "ncclUint32";
    case ncclInt64: return "ncclInt64";
    case ncclUint64: return "ncclUint64";
    case ncclFloat16: return "ncclFloat16";
    case ncclFloat32: return "ncclFloat32";
    case ncclFloat64: return "ncclFloat64";
    case ncclBfloat16: return "ncclBfloat16";
    default: return "an unsupported data type";
  }
}

const char* op_name(ncclRedOp_t op) {
  switch (op) {
    case ncclSum: return "ncclSum";
    case ncclProd: return "ncclProd";
    case ncclMax: return "ncclMax";
    case ncclMin: return "ncclMin";
    case ncclAvg: return "ncclAvg";
    default: return "an unsupported reduction";
  }
}

// How an element is loaded into the type it is reduced in, and stored back.
template <class T>
struct Arithmetic {
  using Accumulator = T;
  static T load(const std::byte* from) {
    T value;
    std::memcpy(&value, from, sizeof(T));
    return value;
  }
  static void store(std::byte* to, T value) { std::memcpy(to, &value, sizeof(T)); }
};

// 16-bit floats are reduced in float and rounded once (to nearest even) when stored.
template <>
struct Arithmetic<__half> {
  using Accumulator = float;
  static float load(const std::byte* from) {
    __half value;
    std::memcpy(&value, from, sizeof(value));
    return __half2float(value);
  }
  static void store(std::byte* to, float value) {
    const __half rounded = __float2half_rn(value);
    std::memcpy(to, &rounded, sizeof(rounded));
  }
};

template <>
struct Arithmetic<__nv_bfloat16> {
  using Accumulator = float;
  static float load(const std::byte* from) {
    __nv_bfloat16 value;
    std::memcpy(&value, from, sizeof(value));
    return __bfloat162float(value);
  }
  static void store(std::byte* to, float value) {
    const __nv_bfloat16 rounded = __float2bfloat16_rn(value);
    std::memcpy(to, &rounded, sizeof(rounded));
  }
};

// a op b. Integer sums and products wrap (computed unsigned), as on the GPU; ncclAvg sums
// here and divides in average().
template <class A>
A combine(A a, A b, ncclRedOp_t op) {
  if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    switch (op) {
      case ncclProd: return static_cast<A>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
      case ncclMax: return std::max(a, b);
      case ncclMin: return std::min(a, b);
      default: return static_cast<A>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
    }
  } else {
    switch (op) {
      case ncclProd: return a * b;
      case ncclMax: return b > a ? b : a;
      case ncclMin: return b < a ? b : a;
      default: return a + b;
    }
  }
}

template <class A>
A average(A sum, int ranks) {
  return static_cast<A>(sum / static_cast<A>(ranks));
}

// out[i] = blocks[0][i] op blocks[1][i] op ... in rank order, for `count` elements of T;
// block r starts at blocks + r * block_bytes.
template <class T>
void reduce_typed(const std::byte* blocks, size_t block_bytes, int ranks, size_t count, ncclRedOp_t op,
                  std::byte* out) {
  using Math = Arithmetic<T>;
  for (size_t i = 0; i < count; ++i) {
    const size_t offset = i * sizeof(T);
    typename Math::Accumulator value = Math::load(blocks + offset);
    for (int r = 1; r < ranks; ++r) value = combine(value, Math::load(blocks + r * block_bytes + offset), op);
    if (op == ncclAvg) value = average(value, ranks);
    Math::store(out + offset, value);
  }
}

void reduce(ncclDataType_t type, const std::byte* blocks, size_t block_bytes, int ranks, size_t count,
            ncclRedOp_t op, std::byte* out) {
  switch (type) {
    case ncclInt8: return reduce_typed<int8_t>(blocks, block_bytes, ranks, count, op, out);
    case ncclUint8: return reduce_typed<uint8_t>(blocks, block_bytes, ranks, count, op, out);
    case ncclInt32: return reduce_typed<int32_t>(blocks, block_bytes, ranks, count, op, out);
    case ncclUint32: return reduce_typed<uint32_t>(blocks, block_bytes, ranks, count, op, out);
    case ncclInt64: return reduce_typed<int64_t>(blocks, block_bytes, ranks, count, op, out);
    case ncclUint64: return reduce_typed<uint64_t>(blocks, block_bytes, ranks, count, op, out);
    case ncclFloat16: return reduce_typed<__half>(blocks, block_bytes, ranks, count, op, out);
    case ncclFloat32: return reduce_typed<float>(blocks, block_bytes, ranks, count, op, out);
    case ncclFloat64: return reduce_typed<double>(blocks, block_bytes, ranks, count, op, out);
    case ncclBfloat16: return reduce_typed<__nv_bfloat16>(blocks, block_bytes, ranks, count, op, out);
    default: zt_emu::device_fault("nccl: reduction of an unsupported data type");
  }
}

// ---- collectives -----------------------------------------------------------------------------

enum class Kind { AllReduce, ReduceScatter, AllGather, Broadcast, Reduce, SendRecv };

// One ncclSend or ncclRecv of a group: the group's point-to-point calls on one communicator run as
// one operation (MPI_Isend / MPI_Irecv all posted together), as NCCL fuses them.
struct PeerTransfer {
  bool send = false;
  int peer = 0;
  std::byte* buffer = nullptr;  // sendbuff (read) or recvbuff (written)
  size_t bytes = 0;
  std::vector<std::byte> staging;  // what MPI sends from or receives into
  MPI_Request request = MPI_REQUEST_NULL;
};

// One collective from its call to its completion.
struct Operation {
  Kind kind = Kind::AllReduce;
  const char* call = "";
  const std::byte* send = nullptr;
  std::byte* recv = nullptr;
  size_t block_bytes = 0;  // one rank's share: the all-reduce's buffer, the all-gather's input ...
  size_t count = 0;        // elements in a block
  ncclDataType_t type = ncclFloat32;
  ncclRedOp_t op = ncclSum;
  int root = 0;
  std::shared_ptr<Communicator> comm;
  uint64_t sequence = 0;   // issue order on the communicator
  std::string what;        // for messages

  bool started = false;
  bool finished = false;
  std::vector<std::byte> outgoing, incoming;  // what MPI sends from and receives into
  MPI_Request request = MPI_REQUEST_NULL;
  std::vector<PeerTransfer> transfers;  // Kind::SendRecv
};

// The bytes each rank reads and writes (0 where the rank does not use the buffer).
size_t send_bytes(const Operation& op) {
  switch (op.kind) {
    case Kind::SendRecv: return 0;  // per transfer
    case Kind::ReduceScatter: return op.block_bytes * static_cast<size_t>(op.comm->size);
    case Kind::Broadcast: return op.comm->rank == op.root ? op.block_bytes : 0;
    default: return op.block_bytes;
  }
}
size_t recv_bytes(const Operation& op) {
  switch (op.kind) {
    case Kind::SendRecv: return 0;  // per transfer
    case Kind::AllGather: return op.block_bytes * static_cast<size_t>(op.comm->size);
    case Kind::Reduce: return op.comm->rank == op.root ? op.block_bytes : 0;
    default: return op.block_bytes;
  }
}

// NCCL's in-place forms: one buffer, except that an all-gather's input is this rank's slice of
// its output, and a reduce-scatter's output this rank's slice of its input.
bool is_in_place(const Operation& op) {
  if (op.send == nullptr || op.recv == nullptr) return false;
  const size_t rank_offset = op.block_bytes * static_cast<size_t>(op.comm->rank);
  switch (op.kind) {
    case Kind::AllGather: return op.send == op.recv + rank_offset;
    case Kind::ReduceScatter: return op.recv == op.send + rank_offset;
    default: return op.send == op.recv;
  }
}

bool overlap(const std::byte* a, size_t a_bytes, const std::byte* b, size_t b_bytes) {
  return a != nullptr && b != nullptr && a_bytes > 0 && b_bytes > 0 && a < b + b_bytes && b < a + a_bytes;
}

// Operations whose MPI requests were in flight when their communicator was aborted: MPI may
// still write into their buffers, and a collective's request cannot be cancelled or freed.
std::vector<std::shared_ptr<Operation>>& abandoned() {
  static auto* operations = new std::vector<std::shared_ptr<Operation>>;
  return *operations;
}

// Starts the operation's MPI collective on snapshots of its input, if every earlier operation
// of its communicator has started (MPI needs the same order on every rank). Device lock held.
void try_start(Operation& op) {
  Communicator& comm = *op.comm;
  if (op.started || op.sequence != comm.started) return;
  if (const std::string problem = mpi_unusable(); !problem.empty()) zt_emu::device_fault("nccl: " + op.what + ": " + problem);
  check_mpi_thread(op.what);
  if (send_bytes(op) > 0) zt_emu::check_kernel_operand(op.send, send_bytes(op), "sendbuff of " + op.what);
  if (recv_bytes(op) > 0) zt_emu::check_kernel_operand(op.recv, recv_bytes(op), "recvbuff of " + op.what);

  const size_t ranks = static_cast<size_t>(comm.size);
  ByteCount block = byte_count(op.block_bytes, op.what);
  int code = MPI_SUCCESS;
  switch (op.kind) {
    case Kind::AllReduce:
    case Kind::AllGather:
      op.outgoing.assign(op.send, op.send + op.block_bytes);
      op.incoming.resize(op.block_bytes * ranks);
      code = MPI_Iallgather(op.outgoing.data(), block.count, block.type, op.incoming.data(), block.count, block.type,
                            comm.mpi, &op.request);
      break;
    case Kind::ReduceScatter:  // rank r receives block r of every rank
      op.outgoing.assign(op.send, op.send + op.block_bytes * ranks);
      op.incoming.resize(op.block_bytes * ranks);
      code = MPI_Ialltoall(op.outgoing.data(), block.count, block.type, op.incoming.data(), block.count, block.type,
                           comm.mpi, &op.request);
      break;
    case Kind::Broadcast:
      if (comm.rank == op.root) op.incoming.assign(op.send, op.send + op.block_bytes);
      else op.incoming.resize(op.block_bytes);
      code = MPI_Ibcast(op.incoming.data(), block.count, block.type, op.root, comm.mpi, &op.request);
      break;
    case Kind::Reduce:
      op.outgoing.assign(op.send, op.send + op.block_bytes);
      if (comm.rank == op.root) op.incoming.resize(op.block_bytes * ranks);
      code = MPI_Igather(op.outgoing.data(), block.count, block.type, op.incoming.data(), block.count, block.type,
                         op.root, comm.mpi, &op.request);
      break;
    case Kind::SendRecv:  // receives first, so that a send to this rank itself finds its match
      for (int pass = 0; pass < 2 && code == MPI_SUCCESS; ++pass)
        for (PeerTransfer& transfer : op.transfers) {
          if (transfer.send != (pass == 1) || code != MPI_SUCCESS) continue;
          zt_emu::check_kernel_operand(transfer.buffer, transfer.bytes,
                                       (transfer.send ? "sendbuff of " : "recvbuff of ") + op.what);
          ByteCount count = byte_count(transfer.bytes, op.what);
          if (transfer.send) {
            transfer.staging.assign(transfer.buffer, transfer.buffer + transfer.bytes);
            code = MPI_Isend(transfer.staging.data(), count.count, count.type, transfer.peer, 0, comm.mpi, &transfer.request);
          } else {
            transfer.staging.resize(transfer.bytes);
            code = MPI_Irecv(transfer.staging.data(), count.count, count.type, transfer.peer, 0, comm.mpi, &transfer.request);
          }
          release(count);
        }
      break;
  }
  release(block);
  check_mpi(code, "starting the MPI collective", op.what);
  op.started = true;
  ++comm.started;
}

// Writes the result of a completed MPI collective into recvbuff. Device lock held.
void complete(Operation& op) {
  const size_t bytes = recv_bytes(op);
  if (bytes == 0) return;
  zt_emu::check_kernel_operand(op.recv, bytes, "recvbuff of " + op.what);  // not freed meanwhile
  const int ranks = op.comm->size;
  switch (op.kind) {
    case Kind::AllReduce:
    case Kind::ReduceScatter:
    case Kind::Reduce: reduce(op.type, op.incoming.data(), op.block_bytes, ranks, op.count, op.op, op.recv); break;
    case Kind::AllGather:
    case Kind::Broadcast: std::memcpy(op.recv, op.incoming.data(), bytes); break;
    case Kind::SendRecv: break;
  }
}

// A SendRecv's received bytes into their recvbuffs. Device lock held.
void complete_transfers(Operation& op) {
  for (PeerTransfer& transfer : op.transfers) {
    if (transfer.send) continue;
    zt_emu::check_kernel_operand(transfer.buffer, transfer.bytes, "recvbuff of " + op.what);
    std::memcpy(transfer.buffer, transfer.staging.data(), transfer.bytes);
  }
}

bool transfers_in_flight(const Operation& op) {
  for (const PeerTransfer& transfer : op.transfers)
    if (transfer.request != MPI_REQUEST_NULL) return true;
  return false;
}

// An operation of an aborted (or broken) communicator ends now: its output is poisoned, and an
// MPI request in flight is kept with its buffers (see abandoned()).
void drop(const std::shared_ptr<Operation>& op) {
  const size_t bytes = recv_bytes(*op);
  const void* base = nullptr;
  size_t allocation = 0;
  if (bytes > 0 && zt_emu::find_allocation(op->recv, &base, &allocation) &&
      op->recv + bytes <= static_cast<const std::byte*>(base) + allocation)
    std::memset(op->recv, 0xFF, bytes);
  if (op->started && (op->request != MPI_REQUEST_NULL || transfers_in_flight(*op))) abandoned().push_back(op);
}

void finish(Operation& op) {
  op.finished = true;
  op.comm->outstanding.fetch_sub(1);
}

// Work::run: starts the operation (or, on an aborted communicator, ends it).
void run(const std::shared_ptr<Operation>& op) {
  Communicator& comm = *op->comm;
  if (comm.aborted.load() || comm.broken) {
    drop(op);
    finish(*op);
    return;
  }
  try {
    try_start(*op);
  } catch (const zt_emu::DeviceFault&) {
    // This rank's later operations on the communicator can never start: they end at once. The
    // other ranks wait for this one until their own timeouts, as with a crashed GPU kernel.
    comm.broken = true;
    comm.async_error.store(ncclUnhandledCudaError);
    finish(*op);
    throw;
  }
}

// Work::done: true once the operation completed (or its communicator was aborted).
bool done(const std::shared_ptr<Operation>& op) {
  if (op->finished) return true;
  Communicator& comm = *op->comm;
  if (comm.aborted.load() || comm.broken) {
    drop(op);
    finish(*op);
    return true;
  }
  if (!op->started) {
    run(op);  // its turn may have come since run()
    if (!op->started) return op->finished;
  }
  int complete_flag = 0;
  if (op->kind == Kind::SendRecv) {
    std::vector<MPI_Request> requests;
    for (const PeerTransfer& transfer : op->transfers) requests.push_back(transfer.request);
    check_mpi(MPI_Testall(static_cast<int>(requests.size()), requests.data(), &complete_flag, MPI_STATUSES_IGNORE),
              "MPI_Testall", op->what);
    for (size_t k = 0; k < requests.size(); ++k) op->transfers[k].request = requests[k];
  } else {
    check_mpi(MPI_Test(&op->request, &complete_flag, MPI_STATUS_IGNORE), "MPI_Test", op->what);
  }
  if (!complete_flag) return false;
  finish(*op);
  complete(*op);
  if (op->kind == Kind::SendRecv) {
    complete_transfers(*op);
    op->transfers.clear();
  }
  op->outgoing = {};
  op->incoming = {};
  return true;
}

// Empty when `bytes` at `pointer` lie in one live device (or pinned host) allocation, which the
// NCCL kernels could read and write, else why not. Checked here rather than with
// zt_emu::check_device_accessible, whose fault belongs to queued work, not to a call's result.
std::string buffer_problem(const std::byte* pointer, size_t bytes, const char* name) {
  const zt_emu::Memory memory = zt_emu::classify(pointer);
  if (memory != zt_emu::Memory::Device && memory != zt_emu::Memory::Pinned)
    return std::string(name) + " points to " + zt_emu::memory_name(memory) + " (NCCL needs device memory)";
  const void* base = nullptr;
  size_t allocation = 0;
  if (!zt_emu::find_allocation(pointer, &base, &allocation))
    return std::string(name) + " is not inside a live allocation";
  const size_t offset = static_cast<size_t>(pointer - static_cast<const std::byte*>(base));
  if (offset + bytes > allocation)
    return std::string(name) + ": " + std::to_string(bytes) + " bytes at offset " + std::to_string(offset) +
           " run past the end of its allocation of " + std::to_string(allocation) + " bytes";
  return "";
}

// Checks a collective's arguments; empty when it may be queued, else the message.
std::string collective_problem(const Operation& op) {
  const std::string prefix = std::string(op.call) + ": ";
  if (op.kind == Kind::Broadcast || op.kind == Kind::Reduce)
    if (op.root < 0 || op.root >= op.comm->size)
      return prefix + "root " + std::to_string(op.root) + " is not a rank of " + op.comm->describe();
  const size_t send = send_bytes(op), recv = recv_bytes(op);
  if (!countable(op.block_bytes))
    return prefix + "count " + std::to_string(op.count) + " of " + type_name(op.type) + " is more than the emulated "
           "NCCL can send in one MPI call";
  if (!is_in_place(op) && overlap(op.send, send, op.recv, recv))
    return prefix + "sendbuff and recvbuff overlap without being NCCL's in-place form (" +
           (op.kind == Kind::AllGather      ? "sendbuff == recvbuff + rank * sendcount"
            : op.kind == Kind::ReduceScatter ? "recvbuff == sendbuff + rank * recvcount"
                                             : "sendbuff == recvbuff") +
           ")";
  if (send > 0)
    if (std::string problem = buffer_problem(op.send, send, "sendbuff"); !problem.empty()) return prefix + problem;
  if (recv > 0)
    if (std::string problem = buffer_problem(op.recv, recv, "recvbuff"); !problem.empty()) return prefix + problem;
  return "";
}

thread_local int group_depth = 0;

// The collectives called inside the open group, in call order: queued on their streams at the
// outermost ncclGroupEnd, as NCCL launches a group's operations only then (a program that reads
// a result before ending its group finds it unchanged, on a GPU as here).
struct HeldCollective {
  cudaStream_t stream = nullptr;
  zt_emu::Work work;
  std::string call;
};
thread_local std::vector<HeldCollective> held_collectives;

ncclResult_t enqueue_collective(cudaStream_t stream, zt_emu::Work work, const std::string& call) {
  try {
    zt_emu::enqueue(stream, std::move(work));
  } catch (const zt_emu::DeviceFault& fault) {  // an unknown or destroyed stream
    return fail(ncclUnhandledCudaError, call + ": " + fault.message);
  }
  return ncclSuccess;
}

// At the outermost ncclGroupEnd: the held collectives, in call order.
ncclResult_t issue_held_collectives() {
  std::vector<HeldCollective> held = std::move(held_collectives);
  held_collectives.clear();
  std::lock_guard<std::recursive_mutex> lock(zt_emu::device_lock());
  for (HeldCollective& collective : held)
    if (const ncclResult_t error = enqueue_collective(collective.stream, std::move(collective.work),
                                                      "ncclGroupEnd (" + collective.call + ")");
        error != ncclSuccess)
      return error;
  return ncclSuccess;
}

// Checks a collective and queues it on `stream` (inside a group: at the group's end).
ncclResult_t issue(Operation description, ncclComm_t handle, cudaStream_t stream, bool reduces) {
  std::lock_guard<std::recursive_mutex> lock(zt_emu::device_lock());
  ncclResult_t error = ncclSuccess;
  Communicator* comm = usable(handle, description.call, &error);
  if (comm == nullptr) return error;
  const std::string prefix = std::string(description.call) + ": ";
  const size_t size = element_size(description.type);
  if (size == 0)
    return fail(ncclInvalidArgument, prefix + "datatype " + std::to_string(static_cast<int>(description.type)) +
                                         " is not one the emulated NCCL supports (ncclInt8 ... ncclBfloat16, "
                                         "no fp8)");
  if (reduces && (static_cast<int>(description.op) < 0 || description.op >= ncclNumOps))
    return fail(ncclInvalidArgument, prefix + "op " + std::to_string(static_cast<int>(description.op)) +
                                         " is not ncclSum, ncclProd, ncclMax, ncclMin or ncclAvg");
  if (description.count > SIZE_MAX / size / static_cast<size_t>(comm->size))
    return fail(ncclInvalidArgument, prefix + "count " + std::to_string(description.count) + " is too large");
  auto op = std::make_shared<Operation>(std::move(description));
  op->comm = handle->state;
  op->block_bytes = op->count * size;
  if (const std::string problem = collective_problem(*op); !problem.empty())
    return fail(ncclInvalidArgument, problem);
  if (op->count == 0) return ncclSuccess;  // nothing to move: nothing queued, as NCCL does

  op->what = std::string(op->call) + " of " + std::to_string(op->count) + " x " + type_name(op->type) +
             (reduces ? std::string(" (") + op_name(op->op) + ")" : std::string()) + " on " + comm->describe();
  op->sequence = comm->issued;
  zt_emu::Work work{op->what, [op] { run(op); }, [op] { return done(op); }};
  if (group_depth > 0) {
    held_collectives.push_back(HeldCollective{stream, std::move(work), op->call});
  } else if (const ncclResult_t queued = enqueue_collective(stream, std::move(work), op->call); queued != ncclSuccess) {
    return queued;
  }
  ++comm->issued;
  comm->outstanding.fetch_add(1);
  return ncclSuccess;
}

// The point-to-point calls of the open group (or of one call outside a group), per communicator
// handle and stream, in call order.
struct PendingTransfers {
  ncclComm_t handle = nullptr;
  cudaStream_t stream = nullptr;
  std::vector<PeerTransfer> transfers;
};
thread_local std::vector<PendingTransfers> pending_transfers;

ncclResult_t issue_pending_transfers() {
  std::vector<PendingTransfers> groups = std::move(pending_transfers);
  pending_transfers.clear();
  std::lock_guard<std::recursive_mutex> lock(zt_emu::device_lock());
  for (PendingTransfers& group : groups) {
    ncclResult_t error = ncclSuccess;
    Communicator* comm = usable(group.handle, "ncclGroupEnd", &error);
    if (comm == nullptr) return error;
    auto op = std::make_shared<Operation>();
    op->kind = Kind::SendRecv;
    op->call = "ncclSend/ncclRecv";
    op->comm = group.handle->state;
    op->type = ncclUint8;
    op->transfers = std::move(group.transfers);
    size_t bytes = 0;
    for (const PeerTransfer& transfer : op->transfers) bytes += transfer.bytes;
    op->count = bytes;
    op->what = "ncclSend/ncclRecv group of " + std::to_string(op->transfers.size()) + " transfers (" +
               std::to_string(bytes) + " bytes) on " + comm->describe();
    op->sequence = comm->issued;
    zt_emu::Work work{op->what, [op] { run(op); }, [op] { return done(op); }};
    try {
      zt_emu::enqueue(group.stream, std::move(work));
    } catch (const zt_emu::DeviceFault& fault) {
      return fail(ncclUnhandledCudaError, "ncclGroupEnd: " + fault.message);
    }
    ++comm->issued;
    comm->outstanding.fetch_add(1);
  }
  return ncclSuccess;
}

ncclResult_t add_transfer(const char* call, bool send, void* buffer, size_t count, ncclDataType_t type, int peer,
                          ncclComm_t handle, cudaStream_t stream) {
  std::lock_guard<std::recursive_mutex> lock(zt_emu::device_lock());
  ncclResult_t error = ncclSuccess;
  Communicator* comm = usable(handle, call, &error);
  if (comm == nullptr) return error;
  const std::string prefix = std::string(call) + ": ";
  const size_t size = element_size(type);
  if (size == 0) return fail(ncclInvalidArgument, prefix + "datatype " + std::to_string(static_cast<int>(type)) + " is not supported");
  if (peer < 0 || peer >= comm->size)
    return fail(ncclInvalidArgument, prefix + "peer " + std::to_string(peer) + " is not a rank of " + comm->describe());
  if (count == 0) return ncclSuccess;
  if (count > SIZE_MAX / size || !countable(count * size))
    return fail(ncclInvalidArgument, prefix + "count " + std::to_string(count) + " is too large");
  if (std::string problem = buffer_problem(static_cast<std::byte*>(buffer), count * size, send ? "sendbuff" : "recvbuff");
      !problem.empty())
    return fail(ncclInvalidArgument, prefix + problem);
  PendingTransfers* group = nullptr;
  for (PendingTransfers& open : pending_transfers)
    if (open.handle == handle && open.stream == stream) group = &open;
  if (group == nullptr) group = &pending_transfers.emplace_back(PendingTransfers{handle, stream, {}});
  PeerTransfer transfer;
  transfer.send = send;
  transfer.peer = peer;
  transfer.buffer = static_cast<std::byte*>(buffer);
  transfer.bytes = count * size;
  group->transfers.push_back(std::move(transfer));
  return group_depth == 0 ? issue_pending_transfers() : ncclSuccess;
}

Operation describe(Kind kind, const char* call, const void* send, void* recv, size_t count, ncclDataType_t type,
                   ncclRedOp_t op, int root) {
  Operation description;
  description.kind = kind;
  description.call = call;
  description.send = static_cast<const std::byte*>(send);
  description.recv = static_cast<std::byte*>(recv);
  description.count = count;
  description.type = type;
  description.op = op;
  description.root = root;
  return description;
}

// Runs queued device work until the communicator has no operation outstanding (finalize and
// destroy wait for them, as NCCL does). Device lock held.
ncclResult_t flush(Communicator& comm, const char* call) {
  if (comm.outstanding.load() == 0) return ncclSuccess;
  zt_emu::drain_all();
  if (comm.outstanding.load() != 0)
    return fail(ncclUnhandledCudaError, std::string(call) + ": " + comm.describe() + " has operations that could "
                                            "not complete (the device has faulted: " +
                                            cudaGetErrorString(zt_emu::sticky_error()) + ")");
  return ncclSuccess;
}


}  // namespace
}  // namespace zt_emu_nccl

using namespace zt_emu_nccl;

// ---- the API ---------------------------------------------------------------------------------

ncclResult_t ncclGetVersion(int* version) {
  if (version == nullptr) return fail(ncclInvalidArgument, "ncclGetVersion: version is NULL");
  // ZT_EMU_NCCL_VERSION (a version code, e.g. 22505 for 2.25.5) lets tests play an older runtime.
  *version = static_cast<int>(zt_emu::env_int("ZT_EMU_NCCL_VERSION", NCCL_VERSION_CODE));
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled CUDA error";
    case ncclSystemError: return "system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t) { return last_error.c_str(); }

ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
  if (uniqueId == nullptr) return fail(ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
  std::memset(uniqueId->internal, 0, sizeof(uniqueId->internal));
  std::memcpy(uniqueId->internal, kIdMarker, sizeof(kIdMarker));
  std::random_device entropy;
  for (size_t i = 0; i < kIdRandomBytes; ++i)
    uniqueId->internal[sizeof(kIdMarker) + i] = static_cast<char>(entropy() & 0xFFu);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  return init("ncclCommInitRank", comm, nranks, commId, rank, nullptr);
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t* config) {
  return init("ncclCommInitRankConfig", comm, nranks, commId, rank, config);
}

// No lock, no MPI: a watchdog thread calls it while another thread may be blocked in a drain.
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  if (asyncError == nullptr) return fail(ncclInvalidArgument, "ncclCommGetAsyncError: asyncError is NULL");
  ncclResult_t error = ncclSuccess;
  if (usable(comm, "ncclCommGetAsyncError", &error, {Life::Joining, Life::Finalized}) == nullptr) {
    // A tombstone still says what happened, for a caller that reads only *asyncError.
    *asyncError = comm != nullptr && comm->magic == ncclComm::kMagic && life_of(comm) == Life::Aborted
                      ? ncclSystemError
                      : ncclInvalidUsage;
    return error;
  }
  *asyncError = static_cast<ncclResult_t>(comm->state->async_error.load());
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  ncclResult_t error = ncclSuccess;
  const Communicator* state = usable(comm, "ncclCommCount", &error, {Life::Finalized});
  if (state == nullptr) return error;
  if (count == nullptr) return fail(ncclInvalidArgument, "ncclCommCount: count is NULL");
  *count = state->size;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  ncclResult_t error = ncclSuccess;
  const Communicator* state = usable(comm, "ncclCommUserRank", &error, {Life::Finalized});
  if (state == nullptr) return error;
  if (rank == nullptr) return fail(ncclInvalidArgument, "ncclCommUserRank: rank is NULL");
  *rank = state->rank;
  return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  ncclResult_t error = ncclSuccess;
  const Communicator* state = usable(comm, "ncclCommCuDevice", &error, {Life::Finalized});
  if (state == nullptr) return error;
  if (device == nullptr) return fail(ncclInvalidArgument, "ncclCommCuDevice: device is NULL");
  *device = state->device;
  return ncclSuccess;
}

// Waits for the communicator's queued operations (running the device's queued work), then
// accepts no more. Non-blocking communicators answer ncclInProgress, complete at once.
ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  std::lock_guard<std::recursive_mutex> lock(zt_emu::device_lock());
  ncclResult_t error = ncclSuccess;
  Communicator* state = usable(comm, "ncclCommFinalize", &error);
  if (state == nullptr) return error;
  if (const ncclResult_t flushed = flush(*state, "ncclCommFinalize"); flushed != ncclSuccess) return flushed;
  comm->life.store(static_cast<int>(Life::Finalized));
  return state->blocking ? ncclSuccess : ncclInProgress;
}

// Finalizes first when the program did not; frees the MPI communicator. NULL is accepted.
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  std::lock_guard<std::recursive_mutex> lock(zt_emu::device_lock());
  ncclResult_t error = ncclSuccess;
  Communicator* state = usable(comm, "ncclCommDestroy", &error, {Life::Finalized, Life::Joining});
  if (state == nullptr) return error;
  const Life life = life_of(comm);
  if (life == Life::Ready)
    if (const ncclResult_t flushed = flush(*state, "ncclCommDestroy"); flushed != ncclSuccess) return flushed;
  // A communicator still joining keeps its MPI communicator: its members are not all here.
  if (life != Life::Joining && state->mpi != MPI_COMM_NULL && mpi_unusable().empty()) MPI_Comm_free(&state->mpi);
  comm->life.store(static_cast<int>(Life::Destroyed));
  return ncclSuccess;
}

// No lock, no MPI (see ncclCommGetAsyncError): marks the communicator aborted; its queued
// operations end when the drain next looks at them. NULL is accepted.
ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  ncclResult_t error = ncclSuccess;
  Communicator* state = usable(comm, "ncclCommAbort", &error, {Life::Joining, Life::Finalized});
  if (state == nullptr) return error;
  state->aborted.store(true);
  state->async_error.store(ncclSystemError);
  comm->life.store(static_cast<int>(Life::Aborted));
  return ncclSuccess;
}

ncclResult_t ncclGroupStart() {
  ++group_depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (group_depth == 0) return fail(ncclInvalidUsage, "ncclGroupEnd: no ncclGroupStart to end");
  --group_depth;
  if (group_depth > 0) return ncclSuccess;
  if (const ncclResult_t error = issue_held_collectives(); error != ncclSuccess) return error;
  return issue_pending_transfers();
}

ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return add_transfer("ncclSend", true, const_cast<void*>(sendbuff), count, datatype, peer, comm, stream);
}

ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return add_transfer("ncclRecv", false, recvbuff, count, datatype, peer, comm, stream);
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return issue(describe(Kind::AllReduce, "ncclAllReduce", sendbuff, recvbuff, count, datatype, op, 0), comm,
               stream, true);
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return issue(describe(Kind::ReduceScatter, "ncclReduceScatter", sendbuff, recvbuff, recvcount, datatype, op, 0),
               comm, stream, true);
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  return issue(describe(Kind::AllGather, "ncclAllGather", sendbuff, recvbuff, sendcount, datatype, ncclSum, 0), comm,
               stream, false);
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  return issue(describe(Kind::Broadcast, "ncclBroadcast", sendbuff, recvbuff, count, datatype, ncclSum, root), comm,
               stream, false);
}

ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                        int root, ncclComm_t comm, cudaStream_t stream) {
  return issue(describe(Kind::Reduce, "ncclReduce", sendbuff, recvbuff, count, datatype, op, root), comm, stream,
               true);
}
