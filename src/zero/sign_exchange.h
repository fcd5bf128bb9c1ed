// The compressed strategy of gradient reduction: 1-bit Adam's averaging of a vector over the
// ranks as signs with error feedback (DeepSpeed's compressed_allreduce, two phases):
//   worker (every rank r, its vector x_r [W*C] laid out rank-major: chunk c = rank c's partition)
//     x = x_r + worker_error;  s_r = ||x|| / sqrt(W*C);  bits_r = x >= 0;  worker_error = x - s_r sign(x)
//   phase 1: all-to-all of the packed signs (rank c receives every worker's chunk c) and an
//     all-gather of the worker scales
//   server (rank c, its chunk [C]):
//     y = sum_w s_w sign_w(chunk c) / W + server_error;  t_c = ||y|| / sqrt(C);
//     bits_c = y >= 0;  server_error = y - t_c sign(y)
//   phase 2: all-gather of the server signs and scales: the average is chunk c = t_c sign_c,
//     the same on every rank.
// A rank sends W*C/8 bytes (phase 1) plus C/8 (phase 2) instead of an fp32 all-reduce's
// 8 (W-1)/W W*C: about 1/32 of it. The error buffers are this rank's own: worker_error [W*C]
// over the whole vector (a worker compresses all of it), server_error [C] over its chunk.
#pragma once
#include <cstdint>
#include <vector>

#include "backend/buffer.h"
#include "comm/communicator.h"

namespace zt {

class SignExchange {
 public:
  // `backend` holds the buffers and does the packing (the device with NCCL, the host with MPI);
  // `comm` moves them. chunk_numel C: one rank's chunk.
  SignExchange(Backend& backend, Communicator& comm, int64_t chunk_numel);

  int64_t chunk_numel() const { return chunk_; }
  Backend& backend() { return backend_; }
  Communicator& communicator() { return comm_; }
  // This rank's vector x_r [W*C] (fp32, rank-major): fill it, then call exchange(). Its values are
  // used up (it holds the worker's error-fed vector afterwards).
  Tensor vector();
  // Averages vector() over the ranks as above.
  void exchange();
  // Whether the average of the last exchange is held (as signs and scales) since the last forget().
  bool has_average() const { return has_average_; }
  void forget_average() { has_average_ = false; }
  // Takes `average` [W*C] (rank-major, chunk c all +-t_c: what a 1-bit update left as its
  // momentum) as the last exchange's average again, after a resume: the next exchange then adds
  // exactly what it would have added without the interruption.
  void restore_average(Tensor average);
  // out [W*C] (rank-major) += alpha * the last average; out [C] += alpha * this rank's chunk of it.
  void add_average(Tensor out, float alpha);
  void add_own_chunk(Tensor out, float alpha);

  // Bytes of its buffers (error feedback, the vector, signs, scales).
  int64_t bytes() const;

  // The error feedback (checkpoints save and restore them; they start at zero).
  Tensor worker_error();  // fp32 [W*C]
  Tensor server_error();  // fp32 [C]

 private:
  int64_t chunk_bytes() const { return (chunk_ + 7) / 8; }  // one chunk's packed signs
  Tensor bytes(Buffer& buffer, int64_t count) const { return buffer.view(DType::U8, {count}); }
  Tensor floats(Buffer& buffer, int64_t count) const { return buffer.view(DType::F32, {count}); }
  float scale_of(Tensor x);  // ||x|| / sqrt(numel)

  Backend& backend_;
  Communicator& comm_;
  int world_, rank_;
  int64_t chunk_;
  Buffer vector_;          // fp32 [W*C]
  Buffer worker_error_;    // fp32 [W*C]
  Buffer server_error_;    // fp32 [C]
  Buffer worker_bits_;     // uint8 [W * chunk_bytes]: this worker's signs, chunk by chunk
  Buffer received_bits_;   // uint8 [W * chunk_bytes]: every worker's signs of this rank's chunk
  Buffer server_;          // fp32 [C]: y
  Buffer average_bits_;    // uint8 [W * chunk_bytes]: every chunk's server signs (the average)
  Buffer scales_;          // fp32 [2 W]: the worker scales, then the server scales
  std::vector<float> server_scales_;  // [W] host copy: chunk c of the average is server_scales_[c] sign
  bool has_average_ = false;
};

}  // namespace zt
