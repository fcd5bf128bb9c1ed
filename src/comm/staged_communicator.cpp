// Device collectives through host staging buffers (see staged_communicator.h).
#include "comm/staged_communicator.h"

#include <cstddef>
#include <utility>
#include <vector>

namespace zt {

namespace {

class StagedCommunicator final : public Communicator {
 public:
  StagedCommunicator(Communicator& host, Backend& device) : host_(host), device_(device) {}
  // A split: the host communicator is the split one, owned here.
  StagedCommunicator(std::unique_ptr<Communicator> owned_host, Backend& device)
      : owned_host_(std::move(owned_host)), host_(*owned_host_), device_(device) {}

  int rank() const override { return host_.rank(); }
  int size() const override { return host_.size(); }
  int local_rank() const override { return host_.local_rank(); }
  int local_size() const override { return host_.local_size(); }
  int nodes() const override { return host_.nodes(); }
  std::string name() const override { return host_.name() + "+host-staging"; }
  bool keeps_control() const override { return false; }
  const CommStats& traffic() const override { return host_.traffic(); }

  Pending all_reduce_sum_async(Tensor data) override {
    if (data.device == Device::CPU) return host_.all_reduce_sum_async(data);
    Tensor staged = stage_in(data, in_);
    host_.all_reduce_sum(staged);
    device_.copy(data, staged);
    return done();
  }

  Pending reduce_scatter_sum_async(Tensor out, Tensor in) override {
    return staged(out, in, &Communicator::reduce_scatter_sum_async);
  }
  Pending all_gather_async(Tensor out, Tensor in) override { return staged(out, in, &Communicator::all_gather_async); }
  Pending all_to_all_async(Tensor out, Tensor in) override { return staged(out, in, &Communicator::all_to_all_async); }

  void broadcast(Tensor data, int root) override {
    if (data.device == Device::CPU) return host_.broadcast(data, root);
    Tensor staged = stage_in(data, in_);
    host_.broadcast(staged, root);
    device_.copy(data, staged);
  }

  void barrier() override { host_.barrier(); }
  void all_reduce_scalars(std::span<double> values) override { host_.all_reduce_scalars(values); }
  double all_reduce_max(double value) override { return host_.all_reduce_max(value); }
  std::vector<std::string> all_gather_strings(const std::string& mine) override { return host_.all_gather_strings(mine); }

  bool exchanges_independent() const override { return host_.exchanges_independent(); }

  // Device tensors through staging buffers of their own (several exchanges may be in flight):
  // the sent bytes copied to the host now, the received ones copied to the device by wait().
  Pending exchange_async(std::span<const Transfer> transfers) override {
    auto staged = std::make_unique<StagedExchange>(device_);
    staged->staging.resize(transfers.size());
    std::vector<Transfer> on_host(transfers.begin(), transfers.end());
    for (size_t k = 0; k < transfers.size(); ++k) {
      const Tensor& tensor = transfers[k].tensor;
      if (tensor.empty() || tensor.device == Device::CPU) continue;
      if (transfers[k].send) {
        on_host[k].tensor = stage_in(tensor, staged->staging[k]);
      } else {
        on_host[k].tensor = host_view(staged->staging[k], tensor.numel(), tensor.dtype);
        staged->received.push_back({tensor, on_host[k].tensor});
      }
    }
    staged->inner = host_.exchange_async(on_host);
    return staged;
  }

  std::unique_ptr<Communicator> split(int color, int key) override {
    return std::make_unique<StagedCommunicator>(host_.split(color, key), device_);
  }

 private:
  // Host view of `numel` elements of `dtype` in `storage` (grown as needed). The host
  // communicator checks the dtypes each collective accepts.
  static Tensor host_view(std::vector<std::byte>& storage, int64_t numel, DType dtype) {
    const size_t bytes = static_cast<size_t>(numel) * dtype_size(dtype);
    if (storage.size() < bytes) storage.resize(bytes);
    return Tensor(storage.data(), dtype, {numel});
  }
  Tensor stage_in(Tensor device_tensor, std::vector<std::byte>& storage) {
    Tensor staged = host_view(storage, device_tensor.numel(), device_tensor.dtype);
    device_.copy(staged, device_tensor.reshaped({device_tensor.numel()}));
    return staged;
  }
  static Pending done() { return completed_collective(); }  // the staged path is synchronous
  // An out <- in collective: on the host communicator directly for host tensors, else through
  // the staging buffers (in copied up, the collective completed, out copied back).
  Pending staged(Tensor out, Tensor in, Pending (Communicator::*collective)(Tensor, Tensor)) {
    if (out.device == Device::CPU && in.device == Device::CPU) return (host_.*collective)(out, in);
    Tensor staged_in = stage_in(in, in_);
    Tensor staged_out = host_view(out_, out.numel(), out.dtype);
    (host_.*collective)(staged_out, staged_in)->wait();
    device_.copy(out, staged_out);
    return done();
  }

  // An exchange in flight: its staging buffers, the host exchange, the device tensors to fill.
  struct StagedExchange final : PendingCollective {
    explicit StagedExchange(Backend& device_) : device(device_) {}
    void wait() override {
      if (finished) return;
      finished = true;
      inner->wait();
      for (const auto& [on_device, on_host] : received) device.copy(on_device.reshaped({on_device.numel()}), on_host);
    }
    bool done() const override { return finished; }
    Backend& device;
    std::vector<std::pair<Tensor, Tensor>> received;  // (device tensor, its host staging view)
    std::vector<std::vector<std::byte>> staging;      // [transfers]
    Pending inner;
    bool finished = false;
  };

  std::unique_ptr<Communicator> owned_host_;  // a split's host communicator; null otherwise
  Communicator& host_;
  Backend& device_;
  std::vector<std::byte> in_, out_;  // host staging
};

}  // namespace

std::unique_ptr<Communicator> make_staged_communicator(Communicator& host, Backend& device) {
  return std::make_unique<StagedCommunicator>(host, device);
}

}  // namespace zt
