// An MPI program that checks the communicators' point-to-point exchange and split
// (comm/communicator.h send_recv_async, exchange_async, split), the pipeline's and ZeRO++'s primitives, on every
// rank against values computed here:
//   - a ring: each rank sends its fp32 values to the next rank and receives the previous one's
//     in one send_recv_async; bf16 and byte tensors the same way;
//   - order: rank 0 sends two messages to rank 1, which receives them in the order sent;
//   - batched: one exchange_async of two sends and two receives with both neighbours (on the
//     groups of two: both to the same peer, in list order);
//   - posted ahead (the pipeline's MPI form): ranks 0 and 1 each post a receive from the other,
//     then a send to it, as two exchanges, and wait for the send first: separate exchanges complete
//     independently (Communicator::exchanges_independent: MPI and host staging; on NCCL, whose
//     exchanges run one after the other on one stream, that order would deadlock: it says false);
//   - split: groups of two consecutive ranks, ranked in reverse by the key: sizes, ranks, an
//     all-reduce and an exchange inside each group; the parent's counters do not see the group's;
//   - node groups (comm/node_groups.h): two "nodes" of 2 ranks by a ranks-per-node setting, and
//     this machine's own layout (one node, from MPI_Comm_split_type's shared-memory group): group
//     sizes and ranks, and an all-reduce over the node-local group then the cross-node one equal
//     to the world's;
//   - ZeRO++'s quantized collectives (zero/quantized_collectives.h) over those node groups: the int8
//     all-gather (this rank's slice exact, the others' within half a step of their block's scale)
//     and the two-hop int4 reduce-scatter (within the bound of its quantizations of the exact sum),
//     the bytes each sends (codes + scales) as docs/zero-plus-plus.md says;
//   - ZeRO-3 offload_param's gather: this rank's slice from host memory into its place in a device
//     buffer, gathered in place (all_gather_from_host_async), and its refusals;
//   - refusals: a send to this rank itself or to a rank that does not exist, neither side given;
//   - (host MPI only) a receive of more bytes than the sender sent names both sizes, and a
//     receive from a rank that never sends ends after the timeout naming point_to_point.
//   mpiexec -np W zt_comm_ranks cpu           the MPI communicator on host memory
//   mpiexec -np W zt_comm_ranks cuda          (emulated device build) NCCL, then host staging
// Every rank prints each mismatch; the exit status is non-zero when any rank found one.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/buffer.h"
#include "backend/make_backend.h"
#include "comm/mpi/mpi_communicator.h"
#include "comm/node_groups.h"
#include "comm/staged_communicator.h"
#include "core/block_quant.h"
#include "core/dtype.h"
#include "core/error.h"
#include "zero/quantized_collectives.h"
#if ZT_WITH_NCCL
#include "comm/nccl/nccl_communicator.h"
#endif

namespace {

int failures = 0;
int world_rank = 0;

void expect(bool condition, const std::string& message) {
  if (condition) return;
  ++failures;
  std::fprintf(stderr, "zt_comm_ranks: rank %d: %s\n", world_rank, message.c_str());
}

// `action` must throw a zt::Error that mentions `part`.
void expect_error(const std::function<void()>& action, const std::string& part, const std::string& what) {
  try {
    action();
  } catch (const zt::Error& error) {
    expect(std::string(error.what()).find(part) != std::string::npos,
           what + ": the error does not mention '" + part + "': " + error.what());
    return;
  }
  expect(false, what + ": no error (expected one mentioning '" + part + "')");
}

// A tensor of the backend's device holding `values` (fp32), and its contents back.
struct DeviceFloats {
  zt::Buffer buffer;
  zt::Tensor tensor;
  DeviceFloats(zt::Backend& backend, const std::vector<float>& values)
      : buffer(backend, values.size() * sizeof(float)),
        tensor(buffer.view(zt::DType::F32, {static_cast<int64_t>(values.size())})) {
    backend.copy(tensor, zt::Tensor(const_cast<float*>(values.data()), zt::DType::F32, {tensor.numel()}));
  }
  std::vector<float> read(zt::Backend& backend) const {
    std::vector<float> values(static_cast<size_t>(tensor.numel()));
    backend.copy(zt::Tensor(values.data(), zt::DType::F32, {tensor.numel()}), tensor);
    return values;
  }
};

std::vector<float> values_of(int rank, int n, float offset = 0.0f) {
  std::vector<float> values(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) values[static_cast<size_t>(i)] = 100.0f * static_cast<float>(rank) + static_cast<float>(i) + offset;
  return values;
}

void check_ring(zt::Communicator& comm, zt::Backend& backend, const std::string& label) {
  const int size = comm.size(), rank = comm.rank();
  const int next = (rank + 1) % size, previous = (rank + size - 1) % size;
  DeviceFloats mine(backend, values_of(rank, 37)), theirs(backend, std::vector<float>(37, -1.0f));
  comm.send_recv_async(mine.tensor, next, theirs.tensor, previous)->wait();
  expect(theirs.read(backend) == values_of(previous, 37), label + ": the ring's fp32 values from rank " +
                                                              std::to_string(previous));
  // Other dtypes travel as their bytes: 20 bf16 values (the first 40 bytes) of a fresh buffer.
  DeviceFloats fresh(backend, std::vector<float>(37, -1.0f));
  zt::Tensor half_mine = mine.buffer.view(zt::DType::BF16, {20}), half_theirs = fresh.buffer.view(zt::DType::BF16, {20});
  comm.send_recv_async(half_mine, next, half_theirs, previous)->wait();
  std::vector<float> expected = values_of(previous, 37);
  std::fill(expected.begin() + 10, expected.end(), -1.0f);
  expect(fresh.read(backend) == expected, label + ": the ring's bf16 bytes, and nothing after them");
}

void check_order(zt::Communicator& comm, zt::Backend& backend, const std::string& label) {
  if (comm.rank() > 1) return;
  DeviceFloats first(backend, values_of(comm.rank(), 8, 0.5f)), second(backend, values_of(comm.rank(), 8, 0.25f));
  if (comm.rank() == 0) {
    zt::Pending a = comm.send_async(first.tensor, 1), b = comm.send_async(second.tensor, 1);
    a->wait();
    b->wait();
  } else {
    DeviceFloats got_a(backend, std::vector<float>(8, 0.0f)), got_b(backend, std::vector<float>(8, 0.0f));
    zt::Pending a = comm.recv_async(got_a.tensor, 0), b = comm.recv_async(got_b.tensor, 0);
    b->wait();
    a->wait();
    expect(got_a.read(backend) == values_of(0, 8, 0.5f) && got_b.read(backend) == values_of(0, 8, 0.25f),
           label + ": two messages from rank 0 arrive in the order sent");
  }
}

// The interleaved pipeline's batched exchange (one NCCL group): each rank sends 12 values to the
// next rank and 7 to the previous one and receives both neighbours' in the same call. On 2 ranks
// both messages go to the same peer, matched in list order (the 12 first, then the 7).
void check_batched(zt::Communicator& comm, zt::Backend& backend, const std::string& label) {
  const int size = comm.size(), rank = comm.rank();
  const int next = (rank + 1) % size, previous = (rank + size - 1) % size;
  DeviceFloats forward(backend, values_of(rank, 12)), backward(backend, values_of(rank, 7, 0.5f));
  DeviceFloats from_previous(backend, std::vector<float>(12, -1.0f)), from_next(backend, std::vector<float>(7, -1.0f));
  const std::vector<zt::Transfer> transfers = {{forward.tensor, next, true}, {backward.tensor, previous, true},
                                               {from_previous.tensor, previous, false}, {from_next.tensor, next, false}};
  comm.exchange_async(transfers)->wait();
  expect(from_previous.read(backend) == values_of(previous, 12) && from_next.read(backend) == values_of(next, 7, 0.5f),
         label + ": one exchange of two sends and two receives with both neighbours");
}

// The pipeline's posted-ahead messages (pipe/pipe_schedule.h): each rank's receive is posted
// before its send, in an exchange of its own, and the send is waited for first.
void check_posted_ahead(zt::Communicator& comm, zt::Backend& backend, const std::string& label) {
  expect(comm.exchanges_independent() == (label != "nccl"),
         label + ": exchanges_independent is " + (comm.exchanges_independent() ? "true" : "false"));
  if (!comm.exchanges_independent() || comm.rank() > 1) return;
  const int peer = 1 - comm.rank();
  DeviceFloats mine(backend, values_of(comm.rank(), 9, 0.75f)), theirs(backend, std::vector<float>(9, -1.0f));
  zt::Pending receive = comm.recv_async(theirs.tensor, peer);
  zt::Pending send = comm.send_async(mine.tensor, peer);
  send->wait();
  receive->wait();
  expect(theirs.read(backend) == values_of(peer, 9, 0.75f),
         label + ": a receive posted ahead of the rank's send, completed after it");
}

void check_split(zt::Communicator& comm, zt::Backend& backend, const std::string& label) {
  const double parent_bytes = comm.stats().total_bytes_sent();
  std::unique_ptr<zt::Communicator> group = comm.split(comm.rank() / 2, -comm.rank());
  const int members = std::min(2, comm.size() - comm.rank() / 2 * 2);
  expect(group->size() == members, label + ": group size " + std::to_string(group->size()));
  expect(group->rank() == (members == 2 ? 1 - comm.rank() % 2 : 0), label + ": the key orders the group in reverse");
  DeviceFloats sum(backend, std::vector<float>(5, static_cast<float>(comm.rank() + 1)));
  group->all_reduce_sum(sum.tensor);
  const int low = comm.rank() / 2 * 2;
  const float expected = members == 2 ? static_cast<float>(2 * low + 3) : static_cast<float>(low + 1);
  expect(sum.read(backend) == std::vector<float>(5, expected), label + ": the group's all-reduce");
  if (members == 2) check_ring(*group, backend, label + " (group)");
  if (members == 2) check_batched(*group, backend, label + " (group)");
  expect(comm.stats().total_bytes_sent() == parent_bytes, label + ": the group counts its own traffic");
}

void check_node_groups(zt::Communicator& comm, zt::Backend& backend, const std::string& label) {
  const int size = comm.size(), rank = comm.rank();
  if (size % 2 == 0) {
    zt::NodeGroups two = zt::split_by_node(comm, 2);
    expect(two.nodes == size / 2 && two.intra->size() == 2 && two.intra->rank() == rank % 2 &&
               two.inter->size() == size / 2 && two.inter->rank() == rank / 2,
           label + ": 2 ranks per node: the node-local and cross-node groups");
    DeviceFloats sum(backend, std::vector<float>(3, static_cast<float>(rank + 1)));
    two.intra->all_reduce_sum(sum.tensor);
    two.inter->all_reduce_sum(sum.tensor);
    expect(sum.read(backend) == std::vector<float>(3, static_cast<float>(size * (size + 1) / 2)),
           label + ": node-local then cross-node all-reduce = the world's");
  } else {
    expect_error([&] { zt::split_by_node(comm, 2); }, "2 ranks per node do not divide the", label + ": odd world");
  }
  // The machine's own layout: the ranks that share memory (MPI_Comm_split_type), here all of them.
  zt::NodeGroups machine = zt::split_by_node(comm, 0);
  expect(machine.nodes == 1 && machine.nodes == comm.nodes() && machine.intra->size() == comm.local_size() &&
             machine.intra->size() == size && machine.intra->rank() == comm.local_rank() && machine.inter->size() == 1,
         label + ": this machine is one node, its shared-memory group");
  DeviceFloats node_sum(backend, std::vector<float>(3, static_cast<float>(rank + 1)));
  machine.intra->all_reduce_sum(node_sum.tensor);
  expect(node_sum.read(backend) == std::vector<float>(3, static_cast<float>(size * (size + 1) / 2)),
         label + ": the shared-memory group's all-reduce");
}

// Values in (-1, 1) that differ by rank and element, the same on every rank for a given rank.
std::vector<float> wave(int rank, int64_t n) {
  std::vector<float> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[static_cast<size_t>(i)] = std::sin(0.37f * static_cast<float>(i) + 1.3f * static_cast<float>(rank));
  return values;
}

void check_quantized_collectives(zt::Communicator& comm, zt::Backend& backend, const std::string& label) {
  const int size = comm.size(), rank = comm.rank();
  if (size != 4) return;  // two nodes of 2: the bound below
  zt::NodeGroups nodes = zt::split_by_node(comm, 2);
  // qwZ: slices of 3000 values (a full block of 2048 and a short one).
  const int64_t n = 3000;
  DeviceFloats slice(backend, wave(rank, n)), gathered(backend, std::vector<float>(static_cast<size_t>(n * size), 0.0f));
  const double gather_bytes = comm.traffic().total_bytes_sent();
  zt::quantized_all_gather_async(backend, comm, gathered.tensor, slice.tensor)->wait();
  const std::vector<float> got = gathered.read(backend);
  bool own_exact = true, within = true;
  for (int r = 0; r < size; ++r) {
    const std::vector<float> truth = wave(r, n);
    for (int64_t i = 0; i < n; ++i) {
      const float value = got[static_cast<size_t>(r * n + i)], want = truth[static_cast<size_t>(i)];
      if (r == rank) own_exact = own_exact && value == want;
      else within = within && std::fabs(value - want) <= 0.5f / 127.0f * 1.0001f;  // |values| < 1: scale < 1/127
    }
  }
  expect(own_exact, label + ": qwZ keeps this rank's slice exact");
  expect(within, label + ": qwZ's other slices within half an int8 step");
  // Bytes: wherever the communicator's traffic is counted (host staging: by the host communicator).
  expect(comm.traffic().total_bytes_sent() - gather_bytes ==
             static_cast<double>((size - 1) * zt::quantized_wire_bytes(n, 8, zt::kQuantizedWeightBlock)),
         label + ": qwZ sends (W-1) x (codes + scales) of its slice");
  // qgZ: every rank's [W x S] rank-major input; this rank gets the sum of every rank's slice `rank`.
  const int64_t S = 1000;
  DeviceFloats input(backend, wave(rank, S * size)), reduced(backend, std::vector<float>(static_cast<size_t>(S), 0.0f));
  const double intra_bytes = nodes.intra->traffic().total_bytes_sent(), inter_bytes = nodes.inter->traffic().total_bytes_sent();
  zt::hierarchical_quantized_reduce_scatter(backend, nodes, reduced.tensor, input.tensor)->wait();
  const std::vector<float> sum = reduced.read(backend);
  // Hop 1: the node partner's slice within half a step of 1/7 (|values| < 1), on this node and on
  // the other; hop 2: the other node's partial (|.| < 2 + that) within half a step of its absmax / 7.
  const float bound = 2.0f * 0.5f / 7.0f + 0.5f * (2.0f + 0.5f / 7.0f) / 7.0f + 1e-5f;
  float worst = 0.0f;
  for (int64_t i = 0; i < S; ++i) {
    double exact = 0.0;
    for (int r = 0; r < size; ++r) exact += wave(r, S * size)[static_cast<size_t>(rank * S + i)];
    worst = std::max(worst, std::fabs(sum[static_cast<size_t>(i)] - static_cast<float>(exact)));
  }
  expect(worst <= bound, label + ": qgZ's sum within " + std::to_string(bound) + " of the exact one (worst " +
                             std::to_string(worst) + ")");
  expect(worst > 0.0f, label + ": qgZ's sum is not exact (the gradients travelled as int4)");
  const int64_t wire = zt::quantized_wire_bytes(S, 4, zt::kQuantizedGradientBlock);
  expect(nodes.intra->traffic().total_bytes_sent() - intra_bytes == static_cast<double>(1 * nodes.nodes * wire) &&
             nodes.inter->traffic().total_bytes_sent() - inter_bytes == static_cast<double>((nodes.nodes - 1) * wire),
         label + ": qgZ sends (R-1) N slices within the node and N-1 across, each int4 + scales");
}

// ZeRO-3 offload_param's gather (Communicator::all_gather_from_host_async): this rank's slice from
// host memory (pinned where the backend has it) uploaded into its place in out, then gathered in
// place, counted as an all-gather; a slice in device memory, or one out does not hold W of, refused.
// (NCCL without its collective's wait for the upload reads the slice before it lands: every other
// rank's values wrong.)
void check_gather_from_host(zt::Communicator& comm, zt::Backend& backend, const std::string& label) {
  const int size = comm.size(), rank = comm.rank();
  const int n = 37;
  std::unique_ptr<zt::Backend> host = backend.make_host_backend();
  zt::Buffer slice_memory(*host, n * sizeof(float));
  const zt::Tensor slice = slice_memory.view(zt::DType::F32, {n});
  const std::vector<float> mine = values_of(rank, n, 0.75f);
  std::copy(mine.begin(), mine.end(), slice.f32());
  DeviceFloats gathered(backend, std::vector<float>(static_cast<size_t>(n * size), -1.0f));
  const double before = comm.traffic().total_bytes_sent();
  comm.all_gather_from_host_async(backend, gathered.tensor, slice)->wait();
  std::vector<float> expected;
  for (int r = 0; r < size; ++r) {
    const std::vector<float> theirs = values_of(r, n, 0.75f);
    expected.insert(expected.end(), theirs.begin(), theirs.end());
  }
  expect(gathered.read(backend) == expected, label + ": every rank's slice, uploaded from host memory and gathered");
  expect(comm.traffic().total_bytes_sent() - before ==
             static_cast<double>(size - 1) / static_cast<double>(size) * static_cast<double>(gathered.tensor.bytes()),
         label + ": the gather from host memory sends (W-1)/W of out, as an all-gather");
  if (backend.device() != zt::Device::CPU) {
    DeviceFloats on_device(backend, mine);
    expect_error([&] { comm.all_gather_from_host_async(backend, gathered.tensor, on_device.tensor); },
                 "is not host memory", label + ": a gather from host memory given a device slice");
  }
  if (label == "nccl")  // its upload goes on its own device's transfer queue
    expect_error([&] { comm.all_gather_from_host_async(*host, gathered.tensor, slice); }, "this communicator's device",
                 label + ": a gather from host memory told to upload through another backend");
  expect_error([&] { comm.all_gather_from_host_async(backend, gathered.tensor, slice.rows(0, n - 1)); },
               "slices like", label + ": a gather from host memory whose out is not W slices");
}

void check_refusals(zt::Communicator& comm, zt::Backend& backend, const std::string& label) {
  DeviceFloats data(backend, values_of(0, 4));
  expect_error([&] { comm.send_async(data.tensor, comm.rank()); }, "cannot send to rank", label + ": send to itself");
  expect_error([&] { comm.recv_async(data.tensor, comm.size()); }, "cannot receive from rank", label + ": no such rank");
  expect_error([&] { comm.send_recv_async(zt::Tensor(), -1, zt::Tensor(), -1); }, "neither a tensor",
               label + ": nothing to do");
}

// Host MPI only: sizes that differ, and a sender that never sends.
void check_failures(zt::Communicator& world, zt::Backend& backend) {
  std::unique_ptr<zt::Communicator> pair = world.split(world.rank() < 2 ? 0 : 1, world.rank());  // collective
  if (world.rank() > 1) {
    world.barrier();  // the one below
    return;
  }
  DeviceFloats small(backend, values_of(0, 2)), large(backend, std::vector<float>(4, 0.0f));
  if (pair->rank() == 0) pair->send_async(small.tensor, 1)->wait();
  else
    expect_error([&] { pair->recv_async(large.tensor, 0)->wait(); }, "received 8 bytes from rank 0, expected 16",
                 "mpi: a receive larger than the send");
  pair->set_timeout(std::chrono::duration<double>(1.0));
  // A timed-out receive stays posted (MPI cannot cancel it; a real run aborts here): its memory
  // must live until the process ends, when the late message below may still land in it.
  static std::vector<float> abandoned(4);
  const zt::Tensor abandoned_tensor(abandoned.data(), zt::DType::F32, {4});
  if (pair->rank() == 1)
    expect_error([&] { pair->recv_async(abandoned_tensor, 0)->wait(); }, "point_to_point did not complete within 1 s",
                 "mpi: a receive from a rank that never sends");
  world.barrier();  // not pair's: rank 1's pair communicator has failed (its waits fail at once)
  if (pair->rank() == 0) pair->send_async(abandoned_tensor, 1)->wait();  // the abandoned receive's message
}

void check_all(zt::Communicator& comm, zt::Backend& backend, const std::string& label) {
  check_ring(comm, backend, label);
  check_order(comm, backend, label);
  check_batched(comm, backend, label);
  check_posted_ahead(comm, backend, label);
  check_split(comm, backend, label);
  check_node_groups(comm, backend, label);
  check_quantized_collectives(comm, backend, label);
  check_gather_from_host(comm, backend, label);
  check_refusals(comm, backend, label);
  comm.barrier();
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int code = 0;
  try {
    ZT_CHECK(argc == 2 && (std::string(argv[1]) == "cpu" || std::string(argv[1]) == "cuda"),
             "usage: zt_comm_ranks cpu|cuda");
    std::unique_ptr<zt::Communicator> world = zt::make_mpi_communicator(MPI_COMM_WORLD);
    world_rank = world->rank();
    ZT_CHECK(world->size() >= 2, "zt_comm_ranks needs at least 2 ranks");
    if (std::string(argv[1]) == "cpu") {
      std::unique_ptr<zt::Backend> backend = zt::make_backend("cpu", world->local_rank());
      check_all(*world, *backend, "mpi");
      check_failures(*world, *backend);
    } else {
      std::unique_ptr<zt::Backend> backend = zt::make_backend("cuda", world->local_rank());
#if ZT_WITH_NCCL
      std::unique_ptr<zt::Communicator> nccl = zt::make_nccl_communicator(*world, *backend);
      check_all(*nccl, *backend, "nccl");
#endif
      std::unique_ptr<zt::Communicator> staged = zt::make_staged_communicator(*world, *backend);
      check_all(*staged, *backend, "staged");
    }
    world->barrier();
    int total = 0;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (world_rank == 0) std::printf("zt_comm_ranks %s: %d ranks, %d failures\n", argv[1], world->size(), total);
    code = total == 0 ? 0 : 1;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "zt_comm_ranks: rank %d: %s\n", world_rank, error.what());
    code = 1;
  }
  MPI_Finalize();
  return code;
}
