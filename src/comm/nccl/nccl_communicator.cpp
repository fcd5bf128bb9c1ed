// NCCL collectives on device buffers: two NCCL communicators, each with its own stream (one for
// all-reduce, reduce-scatter and broadcast, one for all-gathers only, so that a stage-3
// parameter prefetch is never queued behind a gradient reduction), and the watchdog that aborts
// both when a collective does not finish in time (see nccl_communicator.h).
// bf16/fp16 sums (16-bit gradients) are NCCL's own: its reduction kernels add two 16-bit values
// at a time (__hadd2 / a widening fp32 add, rounded to 16 bits), and the ring carries the partial
// sums in 16 bits, so an element is rounded once per hop (W - 1 times on W ranks), as the MPI
// communicator's user-defined op does.
#include "comm/nccl/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <initializer_list>
#include <map>
#include <thread>
#include <type_traits>
#include <vector>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"
#include "core/error.h"

namespace zt {

namespace {

using Clock = std::chrono::steady_clock;

// NCCL's name for `result` plus its last error message (which names the peer or transport).
std::string nccl_error_text(ncclResult_t result) {
  std::string text = ncclGetErrorString(result);
  const char* last = ncclGetLastError(nullptr);
  if (last != nullptr && *last != '\0') text += cat(" (", last, ")");
  return text;
}

}  // namespace

// Calls without a communicator (ncclGetUniqueId, ncclCommGetAsyncError, ncclGetVersion): a failure throws a
// zt::Error naming the call and the rank.
#define ZT_NCCL_CHECK(call)                                                                    \
  do {                                                                                         \
    const ncclResult_t zt_nccl_result = (call);                                                \
    if (zt_nccl_result != ncclSuccess)                                                         \
      ::zt::fail("nccl: ", #call, " failed on rank ", ::zt::process_rank(), ": ",              \
                 nccl_error_text(zt_nccl_result));                                             \
  } while (0)

namespace {

// Calls `finished()` until it returns true, spinning briefly (small collectives finish in
// microseconds) and then backing off so that a waiting rank leaves its core to the others,
// as the MPI communicator does. False when `timeout` passed first.
template <class Finished>
bool poll_until(Finished finished, std::chrono::duration<double> timeout) {
  const Clock::time_point deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(timeout);
  auto pause = std::chrono::microseconds(20);
  for (int polls = 0;; ++polls) {
    if (finished()) return true;
    if (Clock::now() > deadline) return false;
    if (polls > 200) {
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(1000));
    }
  }
}

// One NCCL communicator and the stream its collectives run on (in issue order, which is the
// same on every rank: NCCL requires that per communicator).
struct Channel {
  const char* name;  // the communicator's name in NCCL's logs
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
};

// Two communicators on one GPU can deadlock: each collective's kernel waits for its peers, and
// if rank 0's GPU starts the all-gather's kernel first while rank 1's starts the reduction's
// and neither has room for the other, both wait forever. With NCCL_LAUNCH_ORDER_IMPLICIT=1
// (NCCL 2.26 and later) NCCL launches the kernels of all communicators of a device in host
// program order, which is the same on every rank here (one thread per rank issues every
// collective, in the same order); with CUDA 12.3 or newer it orders only the launches, so the
// kernels still overlap. A value the user set is kept. NCCL reads the variable when it first
// launches a collective, after this.
// Older NCCL ignores the variable: there every collective goes through the one communicator
// (serialised: a stage-3 prefetch then waits behind the reductions issued before it), which
// cannot deadlock. Returns whether the two communicators are safe.
constexpr int kLaunchOrderImplicitVersion = 22600;  // NCCL 2.26.0
bool order_launches_of_both_communicators() {
  int version = 0;
  ZT_NCCL_CHECK(ncclGetVersion(&version));
  if (version < kLaunchOrderImplicitVersion) {
    if (process_rank() <= 0)
      std::fprintf(stderr, "zerotune: NCCL %d.%d.%d is older than 2.26 (NCCL_LAUNCH_ORDER_IMPLICIT): all collectives "
                           "use one NCCL communicator, so stage-3 prefetches wait behind gradient reductions\n",
                   version / 10000, version / 100 % 100, version % 100);
    return false;
  }
  ZT_CHECK(setenv("NCCL_LAUNCH_ORDER_IMPLICIT", "1", 0) == 0,
           "make_nccl_communicator: setenv(NCCL_LAUNCH_ORDER_IMPLICIT) failed on rank ", process_rank());
  return true;
}

class NcclCommunicator;

// One collective queued on its channel's stream; `finished` is recorded after it.
class NcclPending final : public PendingCollective {
 public:
  NcclPending(NcclCommunicator& owner, Collective kind, cudaEvent_t finished)
      : owner_(owner), kind_(kind), finished_(finished) {}
  ~NcclPending() override;
  void wait() override;
  bool done() const override { return done_ || cudaEventQuery(finished_) == cudaSuccess; }

 private:
  NcclCommunicator& owner_;
  Collective kind_;
  cudaEvent_t finished_;  // owned until the destructor gives it back to the owner's pool
  bool done_ = false;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(Communicator& bootstrap, Backend& device) : bootstrap_(bootstrap), device_(device) {
    cuda::CudaBackendImpl& cuda_device = cuda::impl_of(device);  // throws, naming the backend, for another one
    compute_stream_ = cuda_device.stream();
    device_index_ = cuda_device.device_index();
    timeout_ = bootstrap_.timeout();
    context_ = bootstrap_.context();
    try {
      ZT_CUDA_CHECK(cudaSetDevice(device_index_));
      check_one_rank_per_gpu();
      two_channels_ = order_launches_of_both_communicators();
      std::array<ncclUniqueId, 2> ids{};  // main_'s and gather_'s, sent in one broadcast
      if (rank() == 0)
        for (ncclUniqueId& id : ids) ZT_NCCL_CHECK(ncclGetUniqueId(&id));
      bootstrap_.broadcast(Tensor(ids.data(), DType::U8, {static_cast<int64_t>(sizeof(ids))}), 0);
      ZT_CUDA_CHECK(cudaEventCreateWithFlags(&compute_ready_, cudaEventDisableTiming));
      init_channel(main_, ids[0]);
      if (two_channels_) init_channel(gather_, ids[1]);
    } catch (...) {
      release();
      throw;
    }
  }
  // Unwinding after an error (OOM, bad input, a kernel fault, a failed peer), the communicators
  // are aborted, not finalized: ncclCommFinalize waits until every peer has flushed its
  // operations, which a failed or hung peer never does, so the job would end only after
  // --comm-timeout. std::uncaught_exceptions tells the two exits apart where the objects die.
  ~NcclCommunicator() override {
    if (std::uncaught_exceptions() > 0) abort_communicators("unwinding after an error on this rank");
    release();
  }
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return bootstrap_.rank(); }
  int size() const override { return bootstrap_.size(); }
  int local_rank() const override { return bootstrap_.local_rank(); }
  int local_size() const override { return bootstrap_.local_size(); }
  int nodes() const override { return bootstrap_.nodes(); }
  std::string name() const override { return "nccl"; }

  Pending all_reduce_sum_async(Tensor data) override {
    if (on_host("all_reduce", {data})) return delegate([&] { return bootstrap_.all_reduce_sum_async(data); });
    const ncclDataType_t type = float_type("all_reduce", "data", data);
    count(Collective::AllReduce, 2.0 * ring_share() * static_cast<double>(data.bytes()));
    return issue(Collective::AllReduce, "ncclAllReduce", [&](ncclComm_t comm, cudaStream_t stream) {
      return ncclAllReduce(data.data, data.data, static_cast<size_t>(data.numel()), type, ncclSum, comm, stream);
    });
  }

  Pending reduce_scatter_sum_async(Tensor out, Tensor in) override {
    if (on_host("reduce_scatter", {out, in}))
      return delegate([&] { return bootstrap_.reduce_scatter_sum_async(out, in); });
    // fp32, or 16-bit gradients (data_types.grad_accum_dtype) summed natively, as all_reduce.
    const ncclDataType_t type = float_type("reduce_scatter", "in", in);
    float_type("reduce_scatter", "out", out);
    cuda::expect_same_dtype("reduce_scatter", "out", out, "in", in);
    ZT_CHECK(in.numel() == out.numel() * size(), "reduce_scatter: input has ", in.numel(), " elements, expected ",
             size(), " x ", out.numel());
    count(Collective::ReduceScatter, ring_share() * static_cast<double>(in.bytes()));
    return issue(Collective::ReduceScatter, "ncclReduceScatter", [&](ncclComm_t comm, cudaStream_t stream) {
      return ncclReduceScatter(in.data, out.data, static_cast<size_t>(out.numel()), type, ncclSum, comm, stream);
    });
  }

  // On gather_, so that it does not wait for reductions issued before it. In place when `in` is
  // this rank's slice of `out`: NCCL allows exactly that aliasing.
  Pending all_gather_async(Tensor out, Tensor in) override {
    if (on_host("all_gather", {out, in})) return delegate([&] { return bootstrap_.all_gather_async(out, in); });
    const ncclDataType_t type = gather_type("all_gather", "in", in);
    gather_type("all_gather", "out", out);
    cuda::expect_same_dtype("all_gather", "out", out, "in", in);
    ZT_CHECK(out.numel() == in.numel() * size(), "all_gather: output has ", out.numel(), " elements, expected ",
             size(), " x ", in.numel());
    count(Collective::AllGather, ring_share() * static_cast<double>(out.bytes()));
    return issue(Collective::AllGather, "ncclAllGather", [&](ncclComm_t comm, cudaStream_t stream) {
      return ncclAllGather(in.data, out.data, static_cast<size_t>(in.numel()), type, comm, stream);
    });
  }

  // The upload on the backend's transfer queue (after the compute issued so far, as a collective
  // is), and the collective after the upload alone: the compute stream does not wait for either
  // until the gather is waited for.
  Pending all_gather_from_host_async(Backend& device, Tensor out, Tensor host_slice) override {
    Tensor own = own_gather_slice(out, host_slice);
    const ncclDataType_t type = gather_type("all_gather_from_host", "out", out);
    ZT_CHECK(&device == &device_, "all_gather_from_host: the upload must go to this communicator's device (rank ",
             rank(), ")");
    const std::unique_ptr<BackendEvent> uploaded = device.transfer_async(own, host_slice);
    count(Collective::AllGather, ring_share() * static_cast<double>(out.bytes()));
    const auto enqueue = [&](ncclComm_t comm, cudaStream_t stream) {
      return ncclAllGather(own.data, out.data, static_cast<size_t>(own.numel()), type, comm, stream);
    };
    return issue(Collective::AllGather, "ncclAllGather", enqueue, cuda::CudaBackendImpl::cuda_event_of(uploaded.get()));
  }

  // Each peer's slice goes by ncclSend/ncclRecv, grouped so that NCCL runs them together (one
  // send and one receive per peer; this rank's own slice is sent to itself as well).
  Pending all_to_all_async(Tensor out, Tensor in) override {
    if (on_host("all_to_all", {out, in})) return delegate([&] { return bootstrap_.all_to_all_async(out, in); });
    gather_type("all_to_all", "in", in);
    cuda::expect_same_dtype("all_to_all", "out", out, "in", in);
    ZT_CHECK(in.numel() == out.numel() && in.numel() % size() == 0, "all_to_all: in ", in.describe(), " and out ",
             out.describe(), " must be the same size, a multiple of ", size());
    ZT_CHECK(in.data != out.data, "all_to_all: in and out must be distinct buffers");
    count(Collective::AllToAll, ring_share() * static_cast<double>(in.bytes()));
    const size_t slice = in.bytes() / static_cast<size_t>(size());
    return issue(Collective::AllToAll, "ncclSend/ncclRecv", [&](ncclComm_t comm, cudaStream_t stream) {
      ncclResult_t result = ncclGroupStart();
      for (int peer = 0; peer < size() && (result == ncclSuccess || result == ncclInProgress); ++peer) {
        result = ncclSend(static_cast<const char*>(in.data) + slice * peer, slice, ncclUint8, peer, comm, stream);
        if (result == ncclSuccess || result == ncclInProgress)
          result = ncclRecv(static_cast<char*>(out.data) + slice * peer, slice, ncclUint8, peer, comm, stream);
      }
      const ncclResult_t ended = ncclGroupEnd();
      return result == ncclSuccess || result == ncclInProgress ? ended : result;
    });
  }

  // Any dtype: the bytes are broadcast as they are.
  void broadcast(Tensor data, int root) override {
    if (on_host("broadcast", {data})) return delegate([&] { bootstrap_.broadcast(data, root); });
    cuda::expect_device("broadcast", "data", data);
    ZT_CHECK(root >= 0 && root < size(), "broadcast: root ", root, " is not a rank of ", size());
    count(Collective::Broadcast, rank() == root ? static_cast<double>(data.bytes()) : 0.0);
    issue(Collective::Broadcast, "ncclBroadcast", [&](ncclComm_t comm, cudaStream_t stream) {
      return ncclBroadcast(data.data, data.data, data.bytes(), ncclUint8, root, comm, stream);
    })->wait();
  }

  // Exchanges of device tensors run on main_ one after the other (host tensors go through MPI).
  bool exchanges_independent() const override { return false; }

  // One NCCL group (ranks that send to each other in it cannot deadlock), on main_ after the
  // compute stream's queued work. NCCL does not check sizes: the peers' tensors must agree (the
  // MPI path checks that).
  Pending exchange_async(std::span<const Transfer> transfers) override {
    bool on_host = true;
    for (const Transfer& transfer : transfers) on_host = on_host && transfer.tensor.device == Device::CPU;
    if (on_host && !transfers.empty()) return delegate([&] { return bootstrap_.exchange_async(transfers); });
    check_point_to_point(transfers);
    for (const Transfer& transfer : transfers)
      cuda::expect_device("send_recv", transfer.send ? "send" : "recv", transfer.tensor);
    count(Collective::PointToPoint, bytes_sent(transfers));
    auto going = [](ncclResult_t result) { return result == ncclSuccess || result == ncclInProgress; };
    return issue(Collective::PointToPoint, "ncclSend/ncclRecv", [&](ncclComm_t comm, cudaStream_t stream) {
      ncclResult_t result = ncclGroupStart();
      for (const Transfer& transfer : transfers) {
        if (!going(result)) break;
        const Tensor& tensor = transfer.tensor;
        result = transfer.send ? ncclSend(tensor.data, tensor.bytes(), ncclUint8, transfer.peer, comm, stream)
                               : ncclRecv(tensor.data, tensor.bytes(), ncclUint8, transfer.peer, comm, stream);
      }
      const ncclResult_t ended = ncclGroupEnd();
      return going(result) ? ended : result;
    });
  }

  // NCCL communicators over the split bootstrap (a new unique id per group), which this one owns.
  std::unique_ptr<Communicator> split(int color, int key) override {
    std::unique_ptr<Communicator> part = delegate([&] { return bootstrap_.split(color, key); });
    auto made = std::make_unique<NcclCommunicator>(*part, device_);
    made->owned_bootstrap_ = std::move(part);
    return made;
  }

  void barrier() override { delegate([&] { bootstrap_.barrier(); }); }
  void all_reduce_scalars(std::span<double> values) override {
    delegate([&] { bootstrap_.all_reduce_scalars(values); });
  }
  double all_reduce_max(double value) override { return delegate([&] { return bootstrap_.all_reduce_max(value); }); }
  std::vector<std::string> all_gather_strings(const std::string& mine) override {
    return delegate([&] { return bootstrap_.all_gather_strings(mine); });
  }

  // ---- for NcclPending ----------------------------------------------------------------------

  // Makes the compute stream wait for `finished`, then polls it (and the asynchronous error of
  // the collective's communicator) until it completes; aborts both communicators and throws on
  // timeout or NCCL failure.
  void wait_for(Collective kind, cudaEvent_t finished) {
    ensure_usable(kind);
    const Channel& channel = channel_for(kind);
    ZT_CUDA_CHECK(cudaStreamWaitEvent(compute_stream_, finished, 0));
    const Clock::time_point started = Clock::now();
    cudaError_t event_status = cudaSuccess;
    ncclResult_t nccl_status = ncclSuccess;
    const bool completed = poll_until(
        [&] {
          event_status = cudaEventQuery(finished);
          if (event_status != cudaErrorNotReady) return true;
          ZT_NCCL_CHECK(ncclCommGetAsyncError(channel.comm, &nccl_status));
          return nccl_status != ncclSuccess && nccl_status != ncclInProgress;
        },
        timeout_);
    stats_.wait_seconds[static_cast<size_t>(kind)] += std::chrono::duration<double>(Clock::now() - started).count();
    if (!completed) {
      abort_communicators(cat(collective_name(kind), " timed out"));
      fail("collective ", collective_name(kind), " did not complete within ", timeout_.count(), " s on rank ", rank(),
           context_suffix(), " (NCCL communicators aborted; another rank failed, hangs or is far behind; see "
           "--comm-timeout)");
    }
    if (nccl_status != ncclSuccess && nccl_status != ncclInProgress) {
      abort_communicators(cat(collective_name(kind), " failed"));
      fail("NCCL ", collective_name(kind), " failed on rank ", rank(), context_suffix(), ": ",
           nccl_error_text(nccl_status));
    }
    if (event_status != cudaSuccess) cuda::fail_cuda_call("cudaEventQuery(finished)", event_status, __FILE__, __LINE__);
  }

  void give_back(cudaEvent_t event) { spare_events_.push_back(event); }
  // A collective still pending when its owner dies is not waited for when the owner dies of an
  // error, or after the communicators were aborted: it cannot complete, and each wait would add a
  // --comm-timeout before the job ends. Aborting makes the peers' collectives fail promptly.
  bool skip_wait_on_destruction() {
    if (std::uncaught_exceptions() > 0) abort_communicators("unwinding after an error on this rank");
    return aborted_;
  }

 private:
  // True when every tensor is host memory (the call goes to the bootstrap), false when every
  // one is device memory; host and device mixed is an error.
  static bool on_host(const char* op, std::initializer_list<Tensor> tensors) {
    const Device first = tensors.begin()->device;
    for (const Tensor& tensor : tensors)
      ZT_CHECK(tensor.device == first, op, ": host and device tensors mixed in one call (", tensor.describe(),
               " vs ", tensors.begin()->describe(), ")");
    return first == Device::CPU;
  }

  static ncclDataType_t float_type(const char* op, const char* arg, const Tensor& tensor) {
    cuda::expect_device_float(op, arg, tensor);
    switch (tensor.dtype) {
      case DType::BF16: return ncclBfloat16;
      case DType::F16: return ncclFloat16;
      default: return ncclFloat32;
    }
  }

  // What all-gather and all-to-all move: floats, or bytes (1-bit optimizers' packed signs).
  static ncclDataType_t gather_type(const char* op, const char* arg, const Tensor& tensor) {
    if (tensor.dtype != DType::U8) return float_type(op, arg, tensor);
    cuda::expect_device(op, arg, tensor, DType::U8);
    return ncclUint8;
  }

  // All-gathers run on gather_, everything else on main_.
  Channel& channel_for(Collective kind) { return kind == Collective::AllGather && two_channels_ ? gather_ : main_; }
  std::array<Channel*, 2> channels() { return {&main_, &gather_}; }

  double ring_share() const { return static_cast<double>(size() - 1) / static_cast<double>(size()); }
  std::string context_suffix() const { return context_.empty() ? "" : cat(" (", context_, ")"); }

  void ensure_usable(Collective kind) const {
    ZT_CHECK(!aborted_, "NCCL ", collective_name(kind), " on rank ", rank(), context_suffix(),
             ": the NCCL communicators were aborted earlier (", abort_reason_, ")");
  }

  // A host call on the bootstrap with this communicator's timeout and context; its traffic
  // counters are added to ours.
  template <class Call>
  auto delegate(Call call) -> decltype(call()) {
    bootstrap_.set_timeout(timeout_);
    bootstrap_.set_context(context_);
    const CommStats before = bootstrap_.stats();
    if constexpr (std::is_void_v<decltype(call())>) {
      call();
      add_traffic(before);
    } else {
      auto result = call();
      add_traffic(before);
      return result;
    }
  }
  void add_traffic(const CommStats& before) {
    const CommStats& after = bootstrap_.stats();
    for (size_t kind = 0; kind < static_cast<size_t>(kCollectiveKinds); ++kind) {
      stats_.calls[kind] += after.calls[kind] - before.calls[kind];
      stats_.bytes_sent[kind] += after.bytes_sent[kind] - before.bytes_sent[kind];
      stats_.wait_seconds[kind] += after.wait_seconds[kind] - before.wait_seconds[kind];
    }
  }

  // Queues `enqueue(comm, stream)` (an NCCL collective) on the channel of `kind` after the
  // compute stream's queued work, and records its completion event. The stream waits for the
  // compute stream only, not for the other channel: a collective that reads what another
  // produced is issued after that one's wait(), which made the compute stream wait for it.
  // `after` (an upload's event, or null): the channel waits for it as well.
  template <class Enqueue>
  Pending issue(Collective kind, const char* call, Enqueue enqueue, cudaEvent_t after = nullptr) {
    ensure_usable(kind);
    const Channel& channel = channel_for(kind);
    ZT_CUDA_CHECK(cudaEventRecord(compute_ready_, compute_stream_));
    ZT_CUDA_CHECK(cudaStreamWaitEvent(channel.stream, compute_ready_, 0));
    if (after) ZT_CUDA_CHECK(cudaStreamWaitEvent(channel.stream, after, 0));
    settle(channel, enqueue(channel.comm, channel.stream), call);
    cudaEvent_t finished = take_event();
    const cudaError_t status = cudaEventRecord(finished, channel.stream);
    if (status != cudaSuccess) {
      give_back(finished);
      cuda::fail_cuda_call("cudaEventRecord(finished, channel.stream)", status, __FILE__, __LINE__);
    }
    return std::make_unique<NcclPending>(*this, kind, finished);
  }

  // Makes the channel's stream and its communicator. Non-blocking: initialisation and
  // collectives return at once (ncclInProgress), so every wait, including this one for a rank
  // that never joins, is bounded by the timeout.
  void init_channel(Channel& channel, const ncclUniqueId& id) {
    ZT_CUDA_CHECK(cudaStreamCreateWithFlags(&channel.stream, cudaStreamNonBlocking));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    config.commName = channel.name;
    settle(channel, ncclCommInitRankConfig(&channel.comm, size(), id, rank(), &config), "ncclCommInitRankConfig");
  }

  // Completes a call on the channel's non-blocking communicator: ncclInProgress is polled
  // (bounded by the timeout) until NCCL has queued the work; any failure aborts both
  // communicators.
  void settle(const Channel& channel, ncclResult_t result, const char* call) {
    if (result == ncclInProgress) {
      const bool settled = poll_until(
          [&] {
            ZT_NCCL_CHECK(ncclCommGetAsyncError(channel.comm, &result));
            return result != ncclInProgress;
          },
          timeout_);
      if (!settled) {
        abort_communicators(cat(call, " timed out"));
        fail("nccl: ", call, " did not return within ", timeout_.count(), " s on rank ", rank(), context_suffix(),
             " (NCCL communicators aborted; another rank failed, never joined or is far behind; see --comm-timeout)");
      }
    }
    if (result != ncclSuccess) {
      abort_communicators(cat(call, " failed"));
      fail("nccl: ", call, " failed on rank ", rank(), context_suffix(), ": ", nccl_error_text(result));
    }
  }

  cudaEvent_t take_event() {
    if (spare_events_.empty()) {
      cudaEvent_t event = nullptr;
      ZT_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
      return event;
    }
    cudaEvent_t event = spare_events_.back();
    spare_events_.pop_back();
    return event;
  }

  // NCCL refuses two ranks on one GPU: find that before NCCL does, with a message that says
  // what to do. The PCI bus id identifies the GPU whatever CUDA_VISIBLE_DEVICES each rank has.
  void check_one_rank_per_gpu() {
    char host[256] = {};
    ZT_CHECK(gethostname(host, sizeof(host) - 1) == 0, "make_nccl_communicator: gethostname failed on rank ", rank());
    char bus_id[64] = {};
    ZT_CUDA_CHECK(cudaDeviceGetPCIBusId(bus_id, static_cast<int>(sizeof(bus_id)), device_index_));
    const std::vector<std::string> gpus = bootstrap_.all_gather_strings(cat(host, " GPU ", bus_id));
    std::map<std::string, int> first_rank_of;
    for (int r = 0; r < static_cast<int>(gpus.size()); ++r) {
      const auto [first, inserted] = first_rank_of.emplace(gpus[static_cast<size_t>(r)], r);
      ZT_CHECK(inserted, "make_nccl_communicator: ranks ", first->second, " and ", r, " both use ", first->first,
               ", and NCCL refuses two ranks on one GPU: start at most as many ranks per node as it has GPUs, "
               "or use the host-staged MPI communicator for this layout");
    }
  }

  // A failure or hang on either communicator ends both: the job is about to be aborted
  // (MPI_Abort), and the other one's collectives would wait for peers that are gone.
  void abort_communicators(std::string reason) {
    if (aborted_) return;
    aborted_ = true;
    abort_reason_ = std::move(reason);
    abort_channels();
  }
  void abort_channels() noexcept {
    for (Channel* channel : channels()) {
      if (channel->comm != nullptr) ncclCommAbort(channel->comm);  // its own failure changes nothing: we are failing
      channel->comm = nullptr;
    }
  }

  // Frees NCCL and CUDA resources without throwing (destructor and failed construction).
  void release() noexcept {
    for (Channel* channel : channels())
      if (channel->comm != nullptr && !finalize(*channel)) abort_channels();  // a hang on either ends both
    for (Channel* channel : channels()) {
      if (channel->stream != nullptr) cudaStreamDestroy(channel->stream);  // freed once its queued work is done
      channel->stream = nullptr;
    }
    for (cudaEvent_t event : spare_events_) cudaEventDestroy(event);
    spare_events_.clear();
    if (compute_ready_ != nullptr) cudaEventDestroy(compute_ready_);
    compute_ready_ = nullptr;
    cudaGetLastError();  // a failure above (a lost device) must not be reported as the next kernel's
  }

  // Flushes this rank's outstanding operations on the channel's communicator (bounded by the
  // timeout) and destroys it. False, the communicator left alive, when it could not finalize.
  bool finalize(Channel& channel) noexcept {
    ncclResult_t result = ncclCommFinalize(channel.comm);
    if (result == ncclInProgress)
      poll_until(
          [&] { return ncclCommGetAsyncError(channel.comm, &result) != ncclSuccess || result != ncclInProgress; },
          timeout_);
    if (result != ncclSuccess) return false;
    ncclCommDestroy(channel.comm);
    channel.comm = nullptr;
    return true;
  }

  std::unique_ptr<Communicator> owned_bootstrap_;  // a split's bootstrap (bootstrap_ refers to it)
  Communicator& bootstrap_;
  Backend& device_;
  int device_index_ = 0;
  cudaStream_t compute_stream_ = nullptr;   // the CUDA backend's stream (not ours)
  Channel main_{"zerotune"};                // all-reduce, reduce-scatter, broadcast
  Channel gather_{"zerotune all-gather"};   // all-gathers (stage-3 prefetches, stage 1/2 parameter gathers)
  cudaEvent_t compute_ready_ = nullptr;     // re-recorded per collective: compute work queued so far
  std::vector<cudaEvent_t> spare_events_;   // completion events of finished collectives, for reuse
  bool aborted_ = false;
  std::string abort_reason_;
  bool two_channels_ = true;  // all-gathers on gather_ (NCCL >= 2.26), else everything on main_
};

NcclPending::~NcclPending() {
  if (!done_ && !owner_.skip_wait_on_destruction()) {
    try {
      wait();
    } catch (...) {  // the error that made us unwind is the one to report
    }
  }
  owner_.give_back(finished_);
}

void NcclPending::wait() {
  if (done_) return;
  done_ = true;  // a failed wait is not retried (the communicator is aborted by then)
  owner_.wait_for(kind_, finished_);
}

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap, Backend& device) {
  return std::make_unique<NcclCommunicator>(bootstrap, device);
}

}  // namespace zt
