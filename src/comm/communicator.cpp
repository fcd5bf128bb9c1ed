// Names and traffic counters shared by every Communicator implementation.
#include "comm/communicator.h"

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

void Communicator::count(Collective kind, double bytes_sent) {
  stats_.calls[static_cast<size_t>(kind)] += 1;
  stats_.bytes_sent[static_cast<size_t>(kind)] += bytes_sent;
}

}  // namespace zt
