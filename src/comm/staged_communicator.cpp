// Device collectives through host staging buffers (see staged_communicator.h).
#include "comm/staged_communicator.h"

#include <cstddef>
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

  // Device tensors through staging buffers of their own (several exchanges may be in flight):
  // the sent bytes copied to the host now, the received ones copied to the device by wait().
  Pending send_recv_async(Tensor send, int send_to, Tensor recv, int recv_from) override {
    const bool on_host = (send.empty() || send.device == Device::CPU) && (recv.empty() || recv.device == Device::CPU);
    if (on_host) return host_.send_recv_async(send, send_to, recv, recv_from);
    auto staged = std::make_unique<StagedExchange>(device_, recv);
    Tensor host_send, host_recv;
    if (!send.empty()) host_send = stage_in(send, staged->send_bytes);
    if (!recv.empty()) host_recv = host_view(staged->recv_bytes, recv.numel(), recv.dtype);
    staged->inner = host_.send_recv_async(host_send, send_to, host_recv, recv_from);
    staged->host_recv = host_recv;
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

  // An exchange in flight: its staging buffers, the host exchange, the device tensor to fill.
  struct StagedExchange final : PendingCollective {
    StagedExchange(Backend& device_, Tensor recv_) : device(device_), recv(recv_) {}
    void wait() override {
      if (finished) return;
      finished = true;
      inner->wait();
      if (!recv.empty()) device.copy(recv.reshaped({recv.numel()}), host_recv);
    }
    bool done() const override { return finished; }
    Backend& device;
    Tensor recv, host_recv;
    std::vector<std::byte> send_bytes, recv_bytes;
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
