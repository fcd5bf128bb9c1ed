// The Communicator interface: the collectives ZeRO needs (all-reduce, reduce-scatter,
// all-gather, broadcast, barrier) on backend buffers, plus small host-side reductions for
// scalars (loss sums, token counts, norms). MPI implements it now (mpi/); NCCL implements the
// same interface for device buffers (nccl/, the GPU-communication issue). The ZeRO engine
// sees only this interface.
//
// Every collective has a blocking form and an asynchronous form (start now, wait later) so
// that stage-3 prefetches and gradient reductions can overlap with compute. A collective that
// does not complete within the timeout throws a zt::Error naming the collective, the rank and
// the seconds waited; the top-level handler then aborts every rank.
#pragma once
#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace zt {

class Backend;

enum class Collective : int {
  AllReduce = 0, ReduceScatter, AllGather, Broadcast, Barrier, Scalars, AllToAll,
  PointToPoint,  // send_recv_async: a pipeline stage's activations and their gradients
};
constexpr int kCollectiveKinds = 8;
const char* collective_name(Collective kind);

// Per-rank traffic counters. bytes_sent counts what each rank sends in the bandwidth-optimal
// (ring) algorithm, the figure ZeRO's analysis uses: all-reduce 2 (W-1)/W x bytes,
// reduce-scatter and all-gather (W-1)/W x the full (W-slice) bytes, broadcast the bytes once,
// all-to-all the (W-1)/W of its input that goes to the other ranks, point-to-point the bytes sent.
// So a stage-0 step sends 2x the gradient bytes, stage 1/2 2x, stage 3 3x, times (W-1)/W.
struct CommStats {
  std::array<int64_t, kCollectiveKinds> calls{};
  std::array<double, kCollectiveKinds> bytes_sent{};
  std::array<double, kCollectiveKinds> wait_seconds{};  // time spent waiting for completion
  double total_bytes_sent() const;
  double total_wait_seconds() const;
};

// An asynchronous collective in flight. wait() completes it (throws on timeout); a handle that
// is destroyed while still pending waits in its destructor (never leaves MPI with a dangling
// request), swallowing errors only there.
class PendingCollective {
 public:
  virtual ~PendingCollective() = default;
  virtual void wait() = 0;
  virtual bool done() const = 0;
};
using Pending = std::unique_ptr<PendingCollective>;

// A collective that completed when it was issued (synchronous paths, one-rank shortcuts).
Pending completed_collective();

// One message of a point-to-point exchange (Communicator::exchange_async): `tensor` sent to
// (send) or received from (!send) rank `peer`.
struct Transfer {
  Tensor tensor;
  int peer = -1;
  bool send = false;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int local_rank() const = 0;  // rank among the processes of this node
  virtual int local_size() const = 0;
  virtual int nodes() const = 0;       // number of distinct nodes in the job
  virtual std::string name() const = 0;
  // Whether it keeps a run's timeout, error context and traffic counters itself (MPI, NCCL), or
  // leaves them to the host communicator it sends through (host staging): RunDevice::control.
  virtual bool keeps_control() const { return true; }

  // data [n] summed over ranks, in place. fp32, bf16 or fp16 (16-bit gradients): a 16-bit sum
  // adds each pair in fp32 and rounds once, the partial sums travelling in 16 bits (MPI: a
  // user-defined op; NCCL: its native ncclBfloat16 / ncclFloat16 sum, rounded per ring hop).
  virtual Pending all_reduce_sum_async(Tensor data) = 0;
  // in [W*n] -> out [n]: out = sum over ranks of in's slice [rank*n, (rank+1)*n). fp32, bf16 or
  // fp16 as all_reduce (in and out the same dtype).
  virtual Pending reduce_scatter_sum_async(Tensor out, Tensor in) = 0;
  // in [n] -> out [W*n]: slice r of out = rank r's in. `in` may be out's own slice (in place).
  // fp32, bf16 or fp16 (in and out the same): ZeRO gathers parameters in the compute dtype;
  // uint8: 1-bit optimizers gather packed signs.
  virtual Pending all_gather_async(Tensor out, Tensor in) = 0;
  // ZeRO-3 offload_param's gather: out [W*n] (`device`'s memory) <- slice r of rank r, this rank's
  // slice read from `host_slice` [n] (host memory, out's dtype), which is uploaded into out's own
  // slice first and gathered in place. The upload starts after the compute `device` was given so
  // far (out's pages may have served it), on its transfer queue; the default orders the compute
  // and so the collective after the upload, while a device communicator (NCCL) orders only its
  // collective after it: the compute issued later runs beside both (the gather's wait orders the
  // compute after them). `host_slice` is read until the returned collective has completed.
  virtual Pending all_gather_from_host_async(Backend& device, Tensor out, Tensor host_slice);
  // in [W*n] -> out [W*n]: slice s of out = rank s's slice `rank()` of its in (MPI_Alltoall).
  // fp32 or uint8 (in and out the same, distinct buffers): 1-bit optimizers send each rank the
  // packed signs of its chunk.
  virtual Pending all_to_all_async(Tensor out, Tensor in) = 0;
  virtual void broadcast(Tensor data, int root) = 0;
  virtual void barrier() = 0;
  // values summed over ranks in place (host doubles: loss sums, token counts, squared norms).
  virtual void all_reduce_scalars(std::span<double> values) = 0;
  // The maximum over ranks (e.g. "did any rank overflow").
  virtual double all_reduce_max(double value) = 0;
  // Every rank's string, in rank order (checkpoint file checksums for rank 0's manifest).
  virtual std::vector<std::string> all_gather_strings(const std::string& mine) = 0;

  // Point-to-point (pipeline parallelism, docs/pipeline.md): every transfer of `transfers` (each a
  // tensor sent to or received from another rank) started together and completed together. On
  // NCCL they are one group, so that ranks that send to each other in one exchange (1F1B's steady
  // state, the interleaved schedule's batched exchanges) cannot deadlock; on MPI Isends and
  // Irecvs. Messages from one rank to another match in the order they were issued (no tags; within
  // one exchange, in list order), and the receiver's tensor must have the sender's size and dtype
  // (any dtype). Not to this rank itself; at least one transfer.
  virtual Pending exchange_async(std::span<const Transfer> transfers) = 0;
  // Whether the transfers of separate exchanges complete independently of each other (MPI: each
  // its own request), so that a receive posted ahead waits only for its own send; false where
  // exchanges run one after the other (NCCL: one stream), where receives posted ahead of the
  // rank's sends can deadlock (docs/pipeline.md). The pipeline posts its messages ahead where true.
  virtual bool exchanges_independent() const { return true; }
  // `send` to rank `send_to` and/or `recv` from rank `recv_from` (an empty tensor and -1 for the
  // side not used) as one exchange.
  Pending send_recv_async(Tensor send, int send_to, Tensor recv, int recv_from);
  // The bytes an exchange sends (its traffic).
  static double bytes_sent(std::span<const Transfer> transfers);
  Pending send_async(Tensor data, int peer) { return send_recv_async(data, peer, Tensor(), -1); }
  Pending recv_async(Tensor data, int peer) { return send_recv_async(Tensor(), -1, data, peer); }

  // A communicator over the ranks of this one that pass the same `color` (>= 0), ranked by
  // `key` then by their rank here (MPI_Comm_split): a pipeline stage's data-parallel group, a
  // node's ranks. Collective: every rank of this communicator calls it. The result keeps this
  // one's timeout and context, counts its own traffic, and must not outlive this one.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;
  // split() where the caller knows that every group has `group_size` ranks and that `key` is this
  // rank's place in its group (node_groups.h): the null communicator, which cannot learn the other
  // ranks' colors, makes its group from that; the others split.
  virtual std::unique_ptr<Communicator> split_uniform(int color, int key, int group_size) {
    (void)group_size;
    return split(color, key);
  }

  void all_reduce_sum(Tensor data) { all_reduce_sum_async(data)->wait(); }
  void reduce_scatter_sum(Tensor out, Tensor in) { reduce_scatter_sum_async(out, in)->wait(); }
  void all_gather(Tensor out, Tensor in) { all_gather_async(out, in)->wait(); }
  void all_to_all(Tensor out, Tensor in) { all_to_all_async(out, in)->wait(); }
  double all_reduce_sum(double value) {
    all_reduce_scalars(std::span<double>(&value, 1));
    return value;
  }

  const CommStats& stats() const { return stats_; }
  // The counters of this communicator's traffic wherever they are kept: its own, or (host staging,
  // keeps_control false) those of the host communicator it sends through.
  virtual const CommStats& traffic() const { return stats_; }
  void reset_stats() { stats_ = CommStats(); }
  // How long a collective may take before the job is aborted (DESIGN.md: no hang forever).
  void set_timeout(std::chrono::duration<double> timeout) { timeout_ = timeout; }
  std::chrono::duration<double> timeout() const { return timeout_; }
  // A label for error messages, e.g. "step 12": the trainer sets it as it goes.
  void set_context(std::string context) { context_ = std::move(context); }
  const std::string& context() const { return context_; }

 protected:
  void count(Collective kind, double bytes_sent);
  // The checks every exchange_async makes before it starts: at least one transfer, each with a
  // tensor and another rank of this communicator as its peer.
  void check_point_to_point(std::span<const Transfer> transfers) const;
  // all_gather_from_host_async's checks (a host slice, out W of them): out's own slice, which the
  // upload fills and the in-place gather sends.
  Tensor own_gather_slice(Tensor out, Tensor host_slice) const;
  CommStats stats_;
  std::chrono::duration<double> timeout_ = std::chrono::minutes(30);  // torch.distributed's default
  std::string context_;
};

}  // namespace zt
