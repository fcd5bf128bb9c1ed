// SignExchange (see sign_exchange.h).
#include "zero/sign_exchange.h"

#include <cmath>
#include <vector>

#include "core/error.h"

namespace zt {

namespace {
size_t f32_bytes(int64_t numel) { return static_cast<size_t>(numel) * sizeof(float); }
}  // namespace

SignExchange::SignExchange(Backend& backend, Communicator& comm, int64_t chunk_numel)
    : backend_(backend), comm_(comm), world_(comm.size()), rank_(comm.rank()), chunk_(chunk_numel) {
  ZT_CHECK(chunk_numel > 0, "sign exchange: a chunk of ", chunk_numel, " elements");
  const int64_t total = world_ * chunk_;
  vector_ = Buffer(backend, f32_bytes(total));
  worker_error_ = Buffer(backend, f32_bytes(total));
  server_error_ = Buffer(backend, f32_bytes(chunk_));
  backend.fill(worker_error(), 0.0f);
  backend.fill(server_error(), 0.0f);
  const size_t all_bits = static_cast<size_t>(world_ * chunk_bytes());
  worker_bits_ = Buffer(backend, all_bits);
  received_bits_ = Buffer(backend, all_bits);
  average_bits_ = Buffer(backend, all_bits);
  server_ = Buffer(backend, f32_bytes(chunk_));
  scales_ = Buffer(backend, f32_bytes(2 * world_));
}

int64_t SignExchange::bytes() const {
  int64_t total = 0;
  for (const Buffer* buffer : {&vector_, &worker_error_, &server_error_, &worker_bits_, &received_bits_, &server_,
                               &average_bits_, &scales_})
    total += static_cast<int64_t>(buffer->bytes());
  return total;
}

Tensor SignExchange::vector() { return floats(vector_, world_ * chunk_); }
Tensor SignExchange::worker_error() { return floats(worker_error_, world_ * chunk_); }
Tensor SignExchange::server_error() { return floats(server_error_, chunk_); }

float SignExchange::scale_of(Tensor x) {
  return static_cast<float>(std::sqrt(backend_.sum_squares(x) / static_cast<double>(x.numel())));
}

void SignExchange::exchange() {
  const int64_t packed = chunk_bytes();
  OptimizerKernels& kernels = backend_.optimizer_kernels();
  Tensor x = vector();
  Tensor scales = floats(scales_, 2 * world_);  // [worker scales W | server scales W]
  // Worker: error feedback, one scale for the whole vector, signs chunk by chunk (each chunk's
  // bits start on a byte, so that it travels on its own).
  backend_.accumulate(x, worker_error(), 1.0f);
  const float worker_scale = scale_of(x);
  for (int c = 0; c < world_; ++c)
    kernels.pack_signs(bytes(worker_bits_, world_ * packed).rows(c * packed, packed),
                       worker_error().rows(c * chunk_, chunk_), x.rows(c * chunk_, chunk_), worker_scale);
  // Phase 1: this rank's chunk from every worker, and the worker scales.
  Pending signs = comm_.all_to_all_async(bytes(received_bits_, world_ * packed), bytes(worker_bits_, world_ * packed));
  backend_.copy(scales.rows(rank_, 1), Tensor(const_cast<float*>(&worker_scale), DType::F32, {1}));
  comm_.all_gather(scales.rows(0, world_), scales.rows(rank_, 1));
  signs->wait();
  std::vector<float> host_scales(static_cast<size_t>(2 * world_));
  backend_.copy(Tensor(host_scales.data(), DType::F32, {2 * world_}), scales);
  // Server: the average of the workers' decompressed chunks, error feedback, recompressed.
  Tensor y = floats(server_, chunk_);
  backend_.copy(y, server_error());
  for (int w = 0; w < world_; ++w)
    kernels.add_signs(y, bytes(received_bits_, world_ * packed).rows(w * packed, packed),
                      host_scales[static_cast<size_t>(w)] / static_cast<float>(world_));
  const float server_scale = scale_of(y);
  Tensor average = bytes(average_bits_, world_ * packed);
  kernels.pack_signs(average.rows(rank_ * packed, packed), server_error(), y, server_scale);
  // Phase 2: every chunk's server signs and scale.
  Pending gathered = comm_.all_gather_async(average, average.rows(rank_ * packed, packed));
  backend_.copy(scales.rows(world_ + rank_, 1), Tensor(const_cast<float*>(&server_scale), DType::F32, {1}));
  comm_.all_gather(scales.rows(world_, world_), scales.rows(world_ + rank_, 1));
  gathered->wait();
  server_scales_.assign(static_cast<size_t>(world_), 0.0f);
  backend_.copy(Tensor(server_scales_.data(), DType::F32, {world_}), scales.rows(world_, world_));
  has_average_ = true;
}

void SignExchange::restore_average(Tensor average) {
  const int64_t packed = chunk_bytes();
  OptimizerKernels& kernels = backend_.optimizer_kernels();
  server_scales_.assign(static_cast<size_t>(world_), 0.0f);
  for (int c = 0; c < world_; ++c) {
    Tensor chunk = average.rows(c * chunk_, chunk_);
    float first = 0.0f;
    backend_.copy(Tensor(&first, DType::F32, {1}), chunk.rows(0, 1));
    server_scales_[static_cast<size_t>(c)] = std::fabs(first);
    // The signs; the error output is scratch (server_ holds nothing between exchanges).
    kernels.pack_signs(bytes(average_bits_, world_ * packed).rows(c * packed, packed), floats(server_, chunk_), chunk,
                       std::fabs(first));
  }
  has_average_ = true;
}

void SignExchange::add_average(Tensor out, float alpha) {
  ZT_CHECK(has_average_, "sign exchange: no average to add (exchange() first)");
  const int64_t packed = chunk_bytes();
  OptimizerKernels& kernels = backend_.optimizer_kernels();
  for (int c = 0; c < world_; ++c)
    kernels.add_signs(out.rows(c * chunk_, chunk_), bytes(average_bits_, world_ * packed).rows(c * packed, packed),
                      alpha * server_scales_[static_cast<size_t>(c)]);
}

void SignExchange::add_own_chunk(Tensor out, float alpha) {
  ZT_CHECK(has_average_, "sign exchange: no average to add (exchange() first)");
  const int64_t packed = chunk_bytes();
  backend_.optimizer_kernels().add_signs(out, bytes(average_bits_, world_ * packed).rows(rank_ * packed, packed),
                                         alpha * server_scales_[static_cast<size_t>(rank_)]);
}

}  // namespace zt
