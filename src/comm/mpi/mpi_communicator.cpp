// Communicator over MPI: MPI_Iallreduce / MPI_Ireduce_scatter_block / MPI_Iallgather /
// MPI_Ibcast / MPI_Ibarrier, each completed by a deadline-bounded MPI_Test loop.
// Sums of bf16/fp16 buffers (16-bit gradients, data_types.grad_accum_dtype) use a user-defined
// MPI_Op over their bits: each pair is widened to fp32, added and rounded once (RNE), so a
// partial sum travels in 16 bits and MPI's algorithm rounds once per combination (a ring on W
// ranks: W - 1 roundings per element), as NCCL's ncclBfloat16 / ncclFloat16 sum does per hop.
#include "comm/mpi/mpi_communicator.h"

#include <climits>
#include <exception>
#include <thread>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace zt {

namespace {

using Clock = std::chrono::steady_clock;

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return cat("MPI error ", code);
  return std::string(text, static_cast<size_t>(length));
}

class MpiCommunicator;

// The MPI_User_function of a 16-bit float sum: inout[i] = round(float(in[i]) + float(inout[i])).
// fp32 holds every sum of two bf16 or two fp16 values closely enough that rounding it to 16 bits
// gives the correctly rounded 16-bit sum (24 >= 2 x 11 + 2 significand bits), so this is the same
// as a native half-precision add.
template <float (*widen)(uint16_t), uint16_t (*narrow)(float)>
void sum_16bit(void* in, void* inout, int* count, MPI_Datatype*) {
  const uint16_t* a = static_cast<const uint16_t*>(in);  // [count]
  uint16_t* b = static_cast<uint16_t*>(inout);           // [count]
  for (int i = 0; i < *count; ++i) b[i] = narrow(widen(a[i]) + widen(b[i]));
}
uint16_t narrow_bf16(float value) { return float_to_bf16(value); }

// MPI requests in flight (one per collective; a send and a receive for send_recv_async); wait()
// polls them until all completed or the timeout passes.
class MpiPending final : public PendingCollective {
 public:
  MpiPending(std::vector<MPI_Request> requests, Collective kind, int rank, std::chrono::duration<double> timeout,
             std::string context, double* wait_seconds, bool* failed)
      : requests_(std::move(requests)), statuses_(requests_.size()), kind_(kind), rank_(rank), timeout_(timeout),
        context_(std::move(context)), wait_seconds_(wait_seconds), failed_(failed) {}
  // After completion, the byte count each request (a receive; -1: not checked) must have received.
  void expect_received(std::vector<int> bytes) { expected_bytes_ = std::move(bytes); }
  // A request still pending when its owner goes away is waited for, unless the owner goes away
  // because of an error (unwinding) or a collective of this rank already failed: then the job
  // is about to end (the top-level handler calls MPI_Abort), and waiting would only add a fresh
  // --comm-timeout per request in flight before the job can end.
  ~MpiPending() override {
    if (!done() && std::uncaught_exceptions() == 0 && !*failed_) {
      try {
        wait();
      } catch (...) {  // the error that made us unwind is the one to report
      }
    }
  }

  bool done() const override {
    for (MPI_Request request : requests_)
      if (request != MPI_REQUEST_NULL) return false;
    return true;
  }

  void wait() override {
    if (done()) return;
    if (*failed_) {  // a peer is gone or hung: this one cannot complete either
      forget();
      fail("collective ", collective_name(kind_), " on rank ", rank_, context_suffix(),
           " not waited for: an earlier collective of this rank failed or timed out");
    }
    const Clock::time_point started = Clock::now();
    const Clock::time_point deadline = started + std::chrono::duration_cast<Clock::duration>(timeout_);
    // Spin briefly (small collectives finish in microseconds), then back off so that
    // oversubscribed ranks leave the cores to the ranks still computing.
    auto pause = std::chrono::microseconds(20);
    for (int polls = 0;; ++polls) {
      int complete = 0;
      const int code = MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &complete, statuses_.data());
      if (code != MPI_SUCCESS) {
        forget();
        *failed_ = true;
        fail("MPI ", collective_name(kind_), " failed on rank ", rank_, context_suffix(), ": ", mpi_error_text(code));
      }
      if (complete) {
        *wait_seconds_ += std::chrono::duration<double>(Clock::now() - started).count();
        for (size_t k = 0; k < expected_bytes_.size(); ++k) check_received(statuses_[k], expected_bytes_[k]);
        return;
      }
      if (Clock::now() > deadline) {
        // The request cannot be cancelled (collectives are not cancellable): leave it to
        // MPI_Abort, which the top-level handler calls.
        forget();
        *failed_ = true;
        fail("collective ", collective_name(kind_), " did not complete within ", timeout_.count(),
             " s on rank ", rank_, context_suffix(),
             " (another rank failed, hangs or is far behind; see --comm-timeout)");
      }
      if (polls > 200) {
        std::this_thread::sleep_for(pause);
        pause = std::min(pause * 2, std::chrono::microseconds(1000));
      }
    }
  }

 private:
  std::string context_suffix() const { return context_.empty() ? "" : cat(" (", context_, ")"); }
  void forget() {
    for (MPI_Request& request : requests_) request = MPI_REQUEST_NULL;
  }
  void check_received(const MPI_Status& status, int expected) const {
    if (expected < 0) return;
    int received = 0;
    MPI_Get_count(&status, MPI_BYTE, &received);
    ZT_CHECK(received == expected, "send_recv: rank ", rank_, " received ", received, " bytes from rank ",
             status.MPI_SOURCE, ", expected ", expected, context_suffix(), " (the sender's tensor has another size)");
  }
  std::vector<MPI_Request> requests_;
  std::vector<MPI_Status> statuses_;  // [requests]: filled by MPI_Testall
  std::vector<int> expected_bytes_;  // [requests]: what each receive must get (-1: a send)
  Collective kind_;
  int rank_;
  std::chrono::duration<double> timeout_;
  std::string context_;
  double* wait_seconds_;  // the communicator's counter for this kind (it outlives its requests)
  bool* failed_;          // the communicator's: one of its collectives failed or timed out
};

class MpiCommunicator final : public Communicator {
 public:
  // `owned`: MPI_Comm_free it at the end (a split's communicator; the world's is MPI's).
  explicit MpiCommunicator(MPI_Comm comm, bool owned = false) : comm_(comm), owned_(owned) {
    check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
    // Local rank: the rank within the processes that share this node's memory (DESIGN.md).
    MPI_Comm node_comm = MPI_COMM_NULL;
    check(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node_comm), "MPI_Comm_split_type");
    check(MPI_Comm_rank(node_comm, &local_rank_), "MPI_Comm_rank(node)");
    check(MPI_Comm_size(node_comm, &local_size_), "MPI_Comm_size(node)");
    check(MPI_Comm_free(&node_comm), "MPI_Comm_free");
    int leader = local_rank_ == 0 ? 1 : 0;
    check(MPI_Allreduce(&leader, &nodes_, 1, MPI_INT, MPI_SUM, comm_), "MPI_Allreduce(node count)");
    check(MPI_Op_create(&sum_16bit<bf16_to_float, narrow_bf16>, 1, &sum_bf16_), "MPI_Op_create(bf16 sum)");
    check(MPI_Op_create(&sum_16bit<fp16_to_float, float_to_fp16>, 1, &sum_fp16_), "MPI_Op_create(fp16 sum)");
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    if (MPI_Finalized(&finalized) != MPI_SUCCESS || finalized) return;  // MPI freed them
    for (MPI_Op* op : {&sum_bf16_, &sum_fp16_})
      if (*op != MPI_OP_NULL) MPI_Op_free(op);  // nothing to do about a failure while shutting down
    if (owned_) MPI_Comm_free(&comm_);
  }
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }
  int nodes() const override { return nodes_; }
  std::string name() const override { return "mpi"; }

  // fp32, bf16 or fp16 (16-bit gradients): see sum_op.
  Pending all_reduce_sum_async(Tensor data) override {
    const int n = count_of(data, "all_reduce", Accept::Floats);
    count(Collective::AllReduce, 2.0 * ring_share() * static_cast<double>(data.bytes()));
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Iallreduce(MPI_IN_PLACE, data.data, n, mpi_type_of(data.dtype), sum_op(data.dtype), comm_, &request),
          "MPI_Iallreduce");
    return pending(request, Collective::AllReduce);
  }

  Pending reduce_scatter_sum_async(Tensor out, Tensor in) override {
    const int n = count_of(out, "reduce_scatter", Accept::Floats);
    count_of(in, "reduce_scatter", Accept::Floats);
    ZT_CHECK(in.dtype == out.dtype, "reduce_scatter: in is ", in.describe(), " but out is ", out.describe());
    ZT_CHECK(in.numel() == out.numel() * size_, "reduce_scatter: input has ", in.numel(), " elements, expected ",
             size_, " x ", out.numel());
    count(Collective::ReduceScatter, ring_share() * static_cast<double>(in.bytes()));
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Ireduce_scatter_block(in.data, out.data, n, mpi_type_of(in.dtype), sum_op(in.dtype), comm_, &request),
          "MPI_Ireduce_scatter_block");
    return pending(request, Collective::ReduceScatter);
  }

  // Any float dtype (ZeRO gathers compute-dtype parameters) or bytes: the values travel as they are.
  Pending all_gather_async(Tensor out, Tensor in) override {
    const int n = count_of(in, "all_gather", Accept::FloatsAndBytes);
    count_of(out, "all_gather", Accept::FloatsAndBytes);
    ZT_CHECK(in.dtype == out.dtype, "all_gather: in is ", in.describe(), " but out is ", out.describe());
    const MPI_Datatype type = mpi_type_of(in.dtype);
    ZT_CHECK(out.numel() == in.numel() * size_, "all_gather: output has ", out.numel(), " elements, expected ", size_,
             " x ", in.numel());
    count(Collective::AllGather, ring_share() * static_cast<double>(out.bytes()));
    // In place when `in` is already this rank's slice of `out` (MPI forbids aliasing otherwise).
    const bool in_place = static_cast<char*>(in.data) == static_cast<char*>(out.data) + rank_ * in.bytes();
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Iallgather(in_place ? MPI_IN_PLACE : in.data, n, type, out.data, n, type, comm_, &request),
          "MPI_Iallgather");
    return pending(request, Collective::AllGather);
  }

  Pending all_to_all_async(Tensor out, Tensor in) override {
    const int total = count_of(in, "all_to_all", Accept::FloatsAndBytes);
    count_of(out, "all_to_all", Accept::FloatsAndBytes);
    ZT_CHECK(in.dtype == out.dtype && in.numel() == out.numel(), "all_to_all: in is ", in.describe(), " but out is ",
             out.describe());
    ZT_CHECK(total % size_ == 0, "all_to_all: ", total, " elements do not split into ", size_, " equal slices");
    ZT_CHECK(in.data != out.data, "all_to_all: in and out must be distinct buffers");
    count(Collective::AllToAll, ring_share() * static_cast<double>(in.bytes()));
    const MPI_Datatype type = mpi_type_of(in.dtype);
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Ialltoall(in.data, total / size_, type, out.data, total / size_, type, comm_, &request), "MPI_Ialltoall");
    return pending(request, Collective::AllToAll);
  }

  void broadcast(Tensor data, int root) override {
    ZT_CHECK(data.device == Device::CPU, "broadcast: the MPI communicator needs host buffers, got ", data.describe());
    ZT_CHECK(data.bytes() <= static_cast<size_t>(INT_MAX), "broadcast of ", data.bytes(), " bytes exceeds MPI's int count");
    count(Collective::Broadcast, rank_ == root ? static_cast<double>(data.bytes()) : 0.0);
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Ibcast(data.data, static_cast<int>(data.bytes()), MPI_BYTE, root, comm_, &request), "MPI_Ibcast");
    pending(request, Collective::Broadcast)->wait();
  }

  void barrier() override {
    count(Collective::Barrier, 0.0);
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Ibarrier(comm_, &request), "MPI_Ibarrier");
    pending(request, Collective::Barrier)->wait();
  }

  void all_reduce_scalars(std::span<double> values) override {
    count(Collective::Scalars, 2.0 * ring_share() * static_cast<double>(values.size_bytes()));
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Iallreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()), MPI_DOUBLE, MPI_SUM, comm_,
                         &request),
          "MPI_Iallreduce(scalars)");
    pending(request, Collective::Scalars)->wait();
  }

  double all_reduce_max(double value) override {
    count(Collective::Scalars, 2.0 * ring_share() * sizeof(double));
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Iallreduce(MPI_IN_PLACE, &value, 1, MPI_DOUBLE, MPI_MAX, comm_, &request), "MPI_Iallreduce(max)");
    pending(request, Collective::Scalars)->wait();
    return value;
  }

  // Bytes, tag 0: MPI's non-overtaking rule matches the messages between two ranks in order.
  Pending exchange_async(std::span<const Transfer> transfers) override {
    check_point_to_point(transfers);
    count(Collective::PointToPoint, bytes_sent(transfers));
    std::vector<MPI_Request> requests;
    std::vector<int> receive_bytes;  // per request: the bytes a receive must get (-1: a send)
    for (const Transfer& transfer : transfers) {
      const int bytes = byte_count(transfer.tensor, transfer.send ? "send" : "recv");
      requests.push_back(MPI_REQUEST_NULL);
      receive_bytes.push_back(transfer.send ? -1 : bytes);
      if (transfer.send)
        check(MPI_Isend(transfer.tensor.data, bytes, MPI_BYTE, transfer.peer, 0, comm_, &requests.back()), "MPI_Isend");
      else
        check(MPI_Irecv(transfer.tensor.data, bytes, MPI_BYTE, transfer.peer, 0, comm_, &requests.back()), "MPI_Irecv");
    }
    auto waiting = std::make_unique<MpiPending>(std::move(requests), Collective::PointToPoint, rank_, timeout_, context_,
                                                &stats_.wait_seconds[static_cast<size_t>(Collective::PointToPoint)],
                                                &failed_);
    waiting->expect_received(std::move(receive_bytes));
    return waiting;
  }

  std::unique_ptr<Communicator> split(int color, int key) override {
    ZT_CHECK(color >= 0, "split: color ", color, " on rank ", rank_, " (must be >= 0)");
    MPI_Comm part = MPI_COMM_NULL;
    check(MPI_Comm_split(comm_, color, key, &part), "MPI_Comm_split");
    auto made = std::make_unique<MpiCommunicator>(part, true);
    made->set_timeout(timeout_);
    made->set_context(context_);
    return made;
  }

  std::vector<std::string> all_gather_strings(const std::string& mine) override {
    ZT_CHECK(mine.size() <= static_cast<size_t>(INT_MAX), "all_gather_strings: a string of ", mine.size(), " bytes");
    int length = static_cast<int>(mine.size());
    std::vector<int> lengths(static_cast<size_t>(size_));
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Iallgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, comm_, &request), "MPI_Iallgather(lengths)");
    pending(request, Collective::Scalars)->wait();
    std::vector<int> offsets(static_cast<size_t>(size_), 0);
    for (size_t r = 1; r < offsets.size(); ++r) offsets[r] = offsets[r - 1] + lengths[r - 1];
    std::string all(static_cast<size_t>(offsets.back() + lengths.back()), '\0');
    count(Collective::Scalars, static_cast<double>(mine.size()) * (size_ - 1));
    check(MPI_Iallgatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR, comm_,
                          &request),
          "MPI_Iallgatherv(strings)");
    pending(request, Collective::Scalars)->wait();
    std::vector<std::string> strings;
    for (size_t r = 0; r < lengths.size(); ++r)
      strings.push_back(all.substr(static_cast<size_t>(offsets[r]), static_cast<size_t>(lengths[r])));
    return strings;
  }

 private:
  void check(int code, const char* call) const {
    if (code != MPI_SUCCESS) fail(call, " failed on rank ", rank_, ": ", mpi_error_text(code));
  }
  // Element count of a host tensor of an accepted dtype as MPI's int.
  enum class Accept { Floats, FloatsAndBytes };  // fp32, bf16, fp16 (and uint8)
  int count_of(const Tensor& tensor, const char* op, Accept accept) const {
    ZT_CHECK(tensor.device == Device::CPU, op, ": the MPI communicator needs host buffers, got ", tensor.describe());
    const bool bytes = accept == Accept::FloatsAndBytes && tensor.dtype == DType::U8;
    ZT_CHECK(bytes || tensor.dtype == DType::F32 || tensor.dtype == DType::BF16 || tensor.dtype == DType::F16, op,
             ": expected fp32, bf16, fp16", accept == Accept::FloatsAndBytes ? " or uint8" : "", ", got ",
             tensor.describe());
    ZT_CHECK(tensor.numel() <= INT_MAX, op, ": ", tensor.numel(), " elements exceed MPI's int count (split the bucket)");
    return static_cast<int>(tensor.numel());
  }
  static MPI_Datatype mpi_type_of(DType dtype) {
    if (dtype == DType::F32) return MPI_FLOAT;
    return dtype == DType::U8 ? MPI_UINT8_T : MPI_UINT16_T;  // 16-bit floats travel as their bits
  }
  // MPI_SUM for fp32; the 16-bit floats' own op (sum_16bit) for their bits.
  MPI_Op sum_op(DType dtype) const {
    if (dtype == DType::BF16) return sum_bf16_;
    return dtype == DType::F16 ? sum_fp16_ : MPI_SUM;
  }
  int byte_count(const Tensor& tensor, const char* side) const {
    ZT_CHECK(tensor.device == Device::CPU, side, ": the MPI communicator needs host buffers, got ", tensor.describe());
    ZT_CHECK(tensor.bytes() <= static_cast<size_t>(INT_MAX), side, " of ", tensor.bytes(), " bytes exceeds MPI's int count");
    return static_cast<int>(tensor.bytes());
  }
  double ring_share() const { return static_cast<double>(size_ - 1) / static_cast<double>(size_); }
  Pending pending(MPI_Request request, Collective kind) {
    return std::make_unique<MpiPending>(std::vector<MPI_Request>{request}, kind, rank_, timeout_, context_,
                                        &stats_.wait_seconds[static_cast<size_t>(kind)], &failed_);
  }

  MPI_Comm comm_;
  bool owned_ = false;
  MPI_Op sum_bf16_ = MPI_OP_NULL, sum_fp16_ = MPI_OP_NULL;  // sum_16bit's
  bool failed_ = false;  // a collective failed or timed out: the job is ending, later waits fail at once
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1, nodes_ = 1;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm) { return std::make_unique<MpiCommunicator>(comm); }

}  // namespace zt
