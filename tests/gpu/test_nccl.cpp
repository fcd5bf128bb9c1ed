// GPU tests of the NCCL communicator with one rank: all-reduce and all-gather in fp32, bf16 and
// fp16, reduce-scatter, broadcast on device buffers against the values expected; the ordering
// against the compute stream both ways (a collective sees the compute work queued before it,
// and compute work queued after wait() sees its result); all-gathers (on their own NCCL
// communicator and stream) beside reductions: issued while one is in flight, interleaved with
// reduce-scatters and waited for out of order, and reading a reduce-scatter's output after
// its wait(); a communicator made, used on both of its NCCL communicators and destroyed; host
// tensors, scalars and strings delegated to the bootstrap with this communicator's context;
// argument errors; the refusal of two ranks on one GPU; NCCL initialisation bounded by the
// timeout (a rank that never joins). Not tested (needs two ranks, one of them hanging): the
// timeout of a collective's wait() and the abort of both communicators that follows. Not
// observable with one rank: that an all-gather actually overlaps a reduction (one rank's
// collectives are local copies, so neither waits for a peer).
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "gpu_test_util.h"
#include "test_util.h"

#if ZT_WITH_NCCL
#include "comm/nccl/nccl_communicator.h"
#endif

namespace {

using namespace zt;
using namespace zt::gpu_test;
using zt::test::check_error;
using zt::test::check_error_mentions;

#if ZT_WITH_NCCL

// What the other "ranks" of a FakeBootstrap report as their GPU.
enum class OtherRank { None, SameGpu, OtherHost };

// A host communicator inside this one process: rank 0 of 1 (host collectives are what MPI does
// with one rank), or rank 0 of 2 whose second rank exists only in all_gather_strings (to test
// the checks before NCCL starts, and an NCCL init that waits for a rank that never comes).
// Every call is counted, so the tests see what was delegated.
class FakeBootstrap final : public Communicator {
 public:
  explicit FakeBootstrap(OtherRank other = OtherRank::None) : other_(other) {}
  int rank() const override { return 0; }
  int size() const override { return other_ == OtherRank::None ? 1 : 2; }
  int local_rank() const override { return 0; }
  int local_size() const override { return size(); }
  int nodes() const override { return 1; }
  std::string name() const override { return "fake"; }

  Pending all_reduce_sum_async(Tensor) override { return completed(Collective::AllReduce); }
  Pending reduce_scatter_sum_async(Tensor out, Tensor in) override {
    std::memmove(out.data, in.data, out.bytes());
    return completed(Collective::ReduceScatter);
  }
  Pending all_gather_async(Tensor out, Tensor in) override {
    std::memmove(out.data, in.data, in.bytes());
    return completed(Collective::AllGather);
  }
  Pending all_to_all_async(Tensor out, Tensor in) override {
    std::memmove(out.data, in.data, in.bytes());
    return completed(Collective::AllToAll);
  }
  void broadcast(Tensor, int) override { count(Collective::Broadcast, 0.0); }
  void barrier() override { count(Collective::Barrier, 0.0); }
  void all_reduce_scalars(std::span<double>) override { count(Collective::Scalars, 0.0); }
  double all_reduce_max(double value) override {
    count(Collective::Scalars, 0.0);
    return value;
  }
  std::vector<std::string> all_gather_strings(const std::string& mine) override {
    count(Collective::Scalars, 0.0);
    if (other_ == OtherRank::SameGpu) return {mine, mine};
    if (other_ == OtherRank::OtherHost) return {mine, "elsewhere GPU 0000:00:00.0"};
    return {mine};
  }
  Pending exchange_async(std::span<const zt::Transfer>) override { return completed(Collective::PointToPoint); }
  std::unique_ptr<Communicator> split(int, int) override { return std::make_unique<FakeBootstrap>(other_); }

 private:
  class Completed final : public PendingCollective {
   public:
    void wait() override {}
    bool done() const override { return true; }
  };
  Pending completed(Collective kind) {
    count(kind, 0.0);
    return std::make_unique<Completed>();
  }
  OtherRank other_;
};

// One bootstrap and one NCCL communicator on the test GPU for the whole suite (NCCL setup
// takes a while). Never destroyed, like gpu(): the CUDA runtime may be gone at exit.
struct OneRank {
  FakeBootstrap bootstrap;
  std::unique_ptr<Communicator> nccl;
};
OneRank& one_rank() {
  static OneRank* instance = nullptr;
  if (!instance) {
    auto made = std::make_unique<OneRank>();
    made->nccl = make_nccl_communicator(made->bootstrap, gpu());
    instance = made.release();
  }
  return *instance;
}
Communicator& comm() { return *one_rank().nccl; }

size_t calls(const Communicator& comm, Collective kind) {
  return static_cast<size_t>(comm.stats().calls[static_cast<size_t>(kind)]);
}

std::vector<float> times(std::vector<float> values, float factor) {
  for (float& value : values) value *= factor;
  return values;
}

// Big enough (4M elements) that a collective racing the compute stream would show.
constexpr int64_t kBig = int64_t{1} << 22;

BOOST_AUTO_TEST_SUITE(nccl)

BOOST_AUTO_TEST_CASE(is_named_nccl_with_the_bootstraps_ranks) {
  BOOST_TEST(comm().name() == "nccl");
  BOOST_TEST(comm().rank() == 0);
  BOOST_TEST(comm().size() == 1);
}

// One rank: the sum is the rank's own values, in place; dtype and count reach NCCL intact.
BOOST_AUTO_TEST_CASE(all_reduce_of_one_rank_keeps_the_values_in_every_float_dtype) {
  const std::vector<float> values = random_floats(1000, 7, -2.0f, 2.0f);
  for (DType dtype : float_dtypes()) {
    DeviceTensor data = upload(values, dtype, {10, 100});
    gpu().scale(data, 2.0f);  // queued on the compute stream: the collective must come after it
    const size_t before = calls(comm(), Collective::AllReduce);
    Pending pending = comm().all_reduce_sum_async(data);
    pending->wait();
    BOOST_TEST(pending->done());
    check_identical(download(data), times(rounded(values, dtype), 2.0f), cat("all_reduce ", dtype_name(dtype)));
    BOOST_TEST(calls(comm(), Collective::AllReduce) == before + 1);
  }
  // The ring model with one rank sends nothing.
  BOOST_TEST(comm().stats().bytes_sent[static_cast<size_t>(Collective::AllReduce)] == 0.0);
}

// The input is written by the compute stream just before (the communication stream must wait
// for it), the output was NaN-poisoned just before (same), and compute work queued after
// wait() reads the gathered values (the compute stream must wait for the collective).
BOOST_AUTO_TEST_CASE(all_gather_is_ordered_with_the_compute_stream_both_ways) {
  for (DType dtype : float_dtypes()) {
    DeviceTensor in = device_tensor(dtype, {kBig});
    DeviceTensor out = device_tensor(dtype, {kBig});
    gpu().fill(in, 3.0f);
    gpu().fill(out, kNaN);
    Pending pending = comm().all_gather_async(out, in);
    pending->wait();
    gpu().scale(out, 2.0f);
    const std::vector<float> gathered = download(out);
    check_identical(gathered, std::vector<float>(gathered.size(), 6.0f), cat("all_gather ", dtype_name(dtype)));
  }
}

BOOST_AUTO_TEST_CASE(all_gather_in_place_keeps_this_ranks_slice) {
  const std::vector<float> values = random_floats(512, 3);
  DeviceTensor out = upload(values, DType::BF16, {512});
  comm().all_gather(out, out.tensor);  // one rank: in is the whole of out
  check_identical(download(out), rounded(values, DType::BF16), "all_gather in place");
}

BOOST_AUTO_TEST_CASE(reduce_scatter_of_one_rank_copies_in_to_out) {
  const std::vector<float> values = random_floats(size_t{1} << 20, 5);
  const int64_t n = static_cast<int64_t>(values.size());
  DeviceTensor in = upload(values, DType::F32, {n});
  gpu().scale(in, -1.0f);
  DeviceTensor out = poisoned(DType::F32, {n});
  comm().reduce_scatter_sum(out, in);
  check_identical(download(out), times(values, -1.0f), "reduce_scatter");
  comm().reduce_scatter_sum(in, in);  // in place: out is this rank's slice of in
  check_identical(download(in), times(values, -1.0f), "reduce_scatter in place");
}

// The all-gather runs on a communicator and stream of its own: issued after a large all-reduce
// and waited for before it, it completes with its own data, and the all-reduce with its own.
BOOST_AUTO_TEST_CASE(an_all_gather_issued_while_a_large_all_reduce_is_in_flight_completes_with_its_data) {
  const std::vector<float> reduced_values = random_floats(static_cast<size_t>(4 * kBig), 21);
  DeviceTensor reduced = upload(reduced_values, DType::F32, {4 * kBig});  // 64 MiB
  gpu().scale(reduced, 2.0f);
  const std::vector<float> gathered_values = random_floats(4096, 22);
  DeviceTensor in = upload(gathered_values, DType::BF16, {4096});
  DeviceTensor out = poisoned(DType::BF16, {4096});
  const size_t gathers_before = calls(comm(), Collective::AllGather);
  const size_t reduces_before = calls(comm(), Collective::AllReduce);
  Pending reduce = comm().all_reduce_sum_async(reduced);
  Pending gather = comm().all_gather_async(out, in);
  gather->wait();  // before the all-reduce's wait: nothing ties the two together
  BOOST_TEST(gather->done());
  gpu().scale(out, -1.0f);  // queued after wait(): sees the gathered values
  check_identical(download(out), times(rounded(gathered_values, DType::BF16), -1.0f), "all_gather beside an all_reduce");
  reduce->wait();
  BOOST_TEST(reduce->done());
  check_identical(download(reduced), times(reduced_values, 2.0f), "all_reduce beside an all_gather");
  BOOST_TEST(calls(comm(), Collective::AllGather) == gathers_before + 1);
  BOOST_TEST(calls(comm(), Collective::AllReduce) == reduces_before + 1);
}

// Reduce-scatters (gradients) and all-gathers (parameters) issued alternately, each input
// written by the compute stream just before it, waited for in the reverse order.
BOOST_AUTO_TEST_CASE(interleaved_all_gathers_and_reduce_scatters_give_their_results) {
  constexpr int kRounds = 4;
  constexpr int64_t n = int64_t{1} << 20;
  std::vector<std::vector<float>> gradient_values, param_values;  // [kRounds][n] each
  std::vector<DeviceTensor> gradients, partitions, params, gathered;  // [n] each
  std::vector<Pending> pending;  // reduce-scatter, all-gather, reduce-scatter, ...
  const size_t scatters_before = calls(comm(), Collective::ReduceScatter);
  const size_t gathers_before = calls(comm(), Collective::AllGather);
  for (int round = 0; round < kRounds; ++round) {
    const uint32_t seed = 100 + static_cast<uint32_t>(round);
    gradient_values.push_back(random_floats(static_cast<size_t>(n), seed));
    param_values.push_back(random_floats(static_cast<size_t>(n), seed + 50));
    gradients.push_back(upload(gradient_values.back(), DType::F32, {n}));
    gpu().scale(gradients.back(), static_cast<float>(round + 1));
    partitions.push_back(poisoned(DType::F32, {n}));
    params.push_back(upload(param_values.back(), DType::BF16, {n}));
    gpu().scale(params.back(), -1.0f);
    gathered.push_back(poisoned(DType::BF16, {n}));
    pending.push_back(comm().reduce_scatter_sum_async(partitions.back(), gradients.back()));
    pending.push_back(comm().all_gather_async(gathered.back(), params.back()));
  }
  for (auto it = pending.rbegin(); it != pending.rend(); ++it) (*it)->wait();
  for (size_t round = 0; round < static_cast<size_t>(kRounds); ++round) {
    check_identical(download(partitions[round]), times(gradient_values[round], static_cast<float>(round + 1)),
                    cat("reduce_scatter of round ", round));
    check_identical(download(gathered[round]), times(rounded(param_values[round], DType::BF16), -1.0f),
                    cat("all_gather of round ", round));
  }
  BOOST_TEST(calls(comm(), Collective::ReduceScatter) == scatters_before + kRounds);
  BOOST_TEST(calls(comm(), Collective::AllGather) == gathers_before + kRounds);
}

// A ZeRO step in small: reduce-scatter the gradients, update the partition on the compute
// stream, all-gather it. The two collectives run on different streams; the all-gather, issued
// after the reduce-scatter's wait() and the update, must read the updated values (the compute
// stream waited for the reduce-scatter, the all-gather's stream waits for the compute
// stream), never the NaNs the partition held before.
BOOST_AUTO_TEST_CASE(an_all_gather_of_a_reduce_scatters_output_reads_it_after_its_wait) {
  const std::vector<float> values = random_floats(static_cast<size_t>(kBig), 9);
  DeviceTensor gradients = upload(values, DType::F32, {kBig});
  DeviceTensor partition = poisoned(DType::F32, {kBig});
  DeviceTensor gathered = poisoned(DType::F32, {kBig});
  comm().reduce_scatter_sum_async(partition, gradients)->wait();
  gpu().scale(partition, 0.5f);
  comm().all_gather_async(gathered, partition)->wait();
  check_identical(download(gathered), times(values, 0.5f), "all_gather of a reduce_scatter's output");
}

// A communicator of its own: made, used on both of its NCCL communicators (an all-reduce and an
// all-gather in flight together, on separate buffers), destroyed after its Pendings; the
// suite's communicator and the compute stream work afterwards.
BOOST_AUTO_TEST_CASE(a_communicator_is_destroyed_after_using_both_of_its_nccl_communicators) {
  FakeBootstrap bootstrap;
  const std::vector<float> values = random_floats(1024, 31);
  {
    std::unique_ptr<Communicator> own = make_nccl_communicator(bootstrap, gpu());
    DeviceTensor reduced = upload(values, DType::F32, {1024});
    DeviceTensor in = upload(values, DType::F16, {1024});
    DeviceTensor out = poisoned(DType::F16, {1024});
    {
      Pending reduce = own->all_reduce_sum_async(reduced);
      Pending gather = own->all_gather_async(out, in);
      reduce->wait();
      gather->wait();
    }  // the Pendings go before the communicator, as the interface requires
    check_identical(download(reduced), values, "all_reduce of a short-lived communicator");
    check_identical(download(out), rounded(values, DType::F16), "all_gather of a short-lived communicator");
    BOOST_TEST(own->stats().calls[static_cast<size_t>(Collective::AllGather)] == 1);
  }
  DeviceTensor out = poisoned(DType::F32, {1024});
  comm().all_gather(out, upload(values, DType::F32, {1024}));
  check_identical(download(out), values, "all_gather after another communicator was destroyed");
}

BOOST_AUTO_TEST_CASE(broadcast_from_rank_0_moves_bytes_of_any_dtype) {
  std::vector<int32_t> ids = {5, -1, 1 << 30, 7};
  DeviceTensor data = upload_integers(ids, {4});
  const size_t before = calls(comm(), Collective::Broadcast);
  comm().broadcast(data, 0);
  std::vector<int32_t> back(4, 0);
  gpu().copy(view(back, {4}), data);
  BOOST_TEST(back == ids, boost::test_tools::per_element());
  BOOST_TEST(calls(comm(), Collective::Broadcast) == before + 1);
  // Only the NCCL ids (both communicators' in one broadcast) went through the bootstrap.
  BOOST_TEST(one_rank().bootstrap.stats().calls[static_cast<size_t>(Collective::Broadcast)] == 1);
}

BOOST_AUTO_TEST_CASE(host_tensors_scalars_and_strings_go_to_the_bootstrap_with_our_context) {
  FakeBootstrap& bootstrap = one_rank().bootstrap;
  std::vector<float> host = {1.0f, 2.0f};
  const size_t bootstrap_before = calls(bootstrap, Collective::AllReduce);
  const size_t nccl_before = calls(comm(), Collective::AllReduce);
  comm().all_reduce_sum(view(host, {2}));
  BOOST_TEST(calls(bootstrap, Collective::AllReduce) == bootstrap_before + 1);
  BOOST_TEST(calls(comm(), Collective::AllReduce) == nccl_before + 1);  // counted here as well

  comm().set_context("step 7");
  comm().set_timeout(std::chrono::seconds(42));
  comm().barrier();
  BOOST_TEST(bootstrap.context() == "step 7");
  BOOST_TEST(bootstrap.timeout().count() == 42.0);
  BOOST_TEST(comm().all_reduce_max(2.5) == 2.5);
  BOOST_TEST(comm().all_gather_strings("mine") == std::vector<std::string>{"mine"});
  comm().set_context("");
  comm().set_timeout(std::chrono::minutes(30));
}

BOOST_AUTO_TEST_CASE(bad_arguments_name_the_collective) {
  DeviceTensor device = upload(std::vector<float>(8, 1.0f), DType::F32, {8});
  std::vector<float> host(8, 1.0f);
  check_error_mentions([&] { comm().all_gather(view(host, {8}), device); }, {"all_gather", "mixed"});
  DeviceTensor big = device_tensor(DType::F32, {16});
  check_error_mentions([&] { comm().all_gather(big, device); }, {"all_gather", "16 elements, expected 1 x 8"});
  DeviceTensor half = device_tensor(DType::BF16, {8});
  // 16-bit gradients (data_types.grad_accum_dtype) reduce-scatter in their own dtype; in and out
  // must agree, and integers are refused.
  check_error_mentions([&] { comm().reduce_scatter_sum(half, device); }, {"reduce_scatter", "must have the dtype"});
  check_error_mentions([&] { comm().all_gather(half, device); }, {"all_gather", "dtype"});
  DeviceTensor ints = upload_integers(std::vector<int32_t>(8, 1), {8});
  check_error_mentions([&] { comm().reduce_scatter_sum(ints, ints); }, {"reduce_scatter", "fp32, bf16 or fp16"});
  check_error_mentions([&] { comm().all_reduce_sum(ints); }, {"all_reduce", "fp32, bf16 or fp16"});
  check_error([&] { comm().broadcast(device, 1); }, "root 1 is not a rank of 1");
}

BOOST_AUTO_TEST_CASE(two_ranks_on_one_gpu_are_refused_before_nccl_starts) {
  FakeBootstrap bootstrap(OtherRank::SameGpu);
  check_error_mentions([&] { make_nccl_communicator(bootstrap, gpu()); },
                       {"ranks 0 and 1 both use", "refuses two ranks on one GPU", "host-staged"});
  BOOST_TEST(bootstrap.stats().calls[static_cast<size_t>(Collective::Broadcast)] == 0);  // no id sent
}

// Rank 0 of 2 whose rank 1 never joins: the non-blocking init is aborted after the timeout.
BOOST_AUTO_TEST_CASE(nccl_init_waiting_for_a_missing_rank_ends_after_the_timeout) {
  FakeBootstrap bootstrap(OtherRank::OtherHost);
  bootstrap.set_timeout(std::chrono::seconds(3));
  bootstrap.set_context("startup");
  const auto started = std::chrono::steady_clock::now();
  check_error_mentions([&] { make_nccl_communicator(bootstrap, gpu()); },
                       {"ncclCommInitRankConfig did not return within 3 s on rank 0", "(startup)", "aborted"});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  BOOST_TEST(seconds >= 3.0);
  BOOST_TEST(seconds < 60.0);
}

BOOST_AUTO_TEST_SUITE_END()

#else  // no NCCL in this build

BOOST_AUTO_TEST_SUITE(nccl)

BOOST_AUTO_TEST_CASE(nccl_is_part_of_this_build) {
  BOOST_ERROR("this CUDA build found no NCCL (nccl.h / libnccl): the NCCL communicator is not built; "
              "install NCCL or point CMake at it (NCCL_INCLUDE_DIR, NCCL_LIBRARY)");
}

BOOST_AUTO_TEST_SUITE_END()

#endif

}  // namespace
