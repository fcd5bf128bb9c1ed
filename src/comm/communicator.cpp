// Names and traffic counters shared by every Communicator implementation.
#include "comm/communicator.h"

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

void Communicator::check_point_to_point(const Tensor& send, int send_to, const Tensor& recv, int recv_from) const {
  ZT_CHECK(!send.empty() || !recv.empty(), "send_recv: neither a tensor to send nor one to receive into");
  auto check_peer = [&](const Tensor& tensor, int peer, const char* side) {
    if (tensor.empty()) return;
    ZT_CHECK(peer >= 0 && peer < size() && peer != rank(), "send_recv: rank ", rank(), " cannot ", side, " rank ", peer,
             " (the peer must be another of the ", size(), " ranks)", context_.empty() ? "" : cat(" (", context_, ")"));
  };
  check_peer(send, send_to, "send to");
  check_peer(recv, recv_from, "receive from");
}

void Communicator::count(Collective kind, double bytes_sent) {
  stats_.calls[static_cast<size_t>(kind)] += 1;
  stats_.bytes_sent[static_cast<size_t>(kind)] += bytes_sent;
}

}  // namespace zt
