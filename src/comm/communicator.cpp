// Names and traffic counters shared by every Communicator implementation.
#include "comm/communicator.h"

#include "backend/backend.h"
#include "core/error.h"

namespace zt {

const char* collective_name(Collective kind) {
  switch (kind) {
    case Collective::AllReduce: return "all_reduce";
    case Collective::ReduceScatter: return "reduce_scatter";
    case Collective::AllGather: return "all_gather";
    case Collective::Broadcast: return "broadcast";
    case Collective::Barrier: return "barrier";
    case Collective::Scalars: return "scalar_all_reduce";
    case Collective::AllToAll: return "all_to_all";
    case Collective::PointToPoint: return "point_to_point";
  }
  return "unknown";
}

namespace {
class CompletedCollective final : public PendingCollective {
 public:
  void wait() override {}
  bool done() const override { return true; }
};
}  // namespace

Pending completed_collective() { return std::make_unique<CompletedCollective>(); }

Tensor Communicator::own_gather_slice(Tensor out, Tensor host_slice) const {
  ZT_CHECK(host_slice.device == Device::CPU, "all_gather_from_host: the slice ", host_slice.describe(),
           " is not host memory (rank ", rank(), ")");
  ZT_CHECK(out.dtype == host_slice.dtype && out.numel() == host_slice.numel() * size(),
           "all_gather_from_host: out ", out.describe(), " is not ", size(), " slices like ",
           host_slice.describe(), " (rank ", rank(), ")");
  const int64_t n = host_slice.numel();
  return out.reshaped({out.numel()}).rows(rank() * n, n);
}

Pending Communicator::all_gather_from_host_async(Backend& device, Tensor out, Tensor host_slice) {
  Tensor own = own_gather_slice(out, host_slice);
  device.wait_for(*device.transfer_async(own, host_slice));
  return all_gather_async(out, own);
}

double CommStats::total_bytes_sent() const {
  double total = 0.0;
  for (double bytes : bytes_sent) total += bytes;
  return total;
}

double CommStats::total_wait_seconds() const {
  double total = 0.0;
  for (double seconds : wait_seconds) total += seconds;
  return total;
}

Pending Communicator::send_recv_async(Tensor send, int send_to, Tensor recv, int recv_from) {
  std::vector<Transfer> transfers;
  if (!send.empty()) transfers.push_back({send, send_to, true});
  if (!recv.empty()) transfers.push_back({recv, recv_from, false});
  return exchange_async(transfers);
}

void Communicator::check_point_to_point(std::span<const Transfer> transfers) const {
  ZT_CHECK(!transfers.empty(), "send_recv: neither a tensor to send nor one to receive into");
  for (const Transfer& transfer : transfers) {
    const char* side = transfer.send ? "send to" : "receive from";
    ZT_CHECK(!transfer.tensor.empty(), "send_recv: rank ", rank(), " has no tensor to ", side, " rank ", transfer.peer);
    ZT_CHECK(transfer.peer >= 0 && transfer.peer < size() && transfer.peer != rank(), "send_recv: rank ", rank(),
             " cannot ", side, " rank ", transfer.peer, " (the peer must be another of the ", size(), " ranks)",
             context_.empty() ? "" : cat(" (", context_, ")"));
  }
}

double Communicator::bytes_sent(std::span<const Transfer> transfers) {
  double bytes = 0.0;
  for (const Transfer& transfer : transfers)
    if (transfer.send) bytes += static_cast<double>(transfer.tensor.bytes());
  return bytes;
}

void Communicator::count(Collective kind, double bytes_sent) {
  stats_.calls[static_cast<size_t>(kind)] += 1;
  stats_.bytes_sent[static_cast<size_t>(kind)] += bytes_sent;
}

}  // namespace zt
