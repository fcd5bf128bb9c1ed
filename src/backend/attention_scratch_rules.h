// The device memory the CUDA backend's attention takes for an op (cuDNN's workspace, our kernels'
// delta) as plain arithmetic, in every build, beside gpu_memory_rules.h: the memory model counts
// it through the counting backend (CountingOptions::attention_scratch) for a CUDA device, live or
// typical, and the CUDA backend reads the same ZT_CUDA_ATTENTION choice here
// (cuda_attention.cu). The emulated cuDNN's plans ask for cudnn_sdpa_plan_workspace_bytes
// (src/emu/emu_cudnn.cpp restates it: the emulator includes only emu/ headers). Also here: the
// bucketing of packed rows' ragged graphs (cudnn_ragged_batch, cudnn_ragged_time), which the
// backend builds its graphs with and the memory model counts with, one function for both.
#pragma once
#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace zt {

// The attention variant ZT_CUDA_ATTENTION asks for (auto when unset; an error naming the variable
// for anything else). The CUDA backend reads it at every call (cuda_attention.cu), the memory
// model when it counts the attention's scratch (cuda_attention_scratch below).
enum class CudaAttentionVariant { Auto, Cudnn, TensorCores, CudaCores };
CudaAttentionVariant requested_cuda_attention_variant();

// One cuDNN SDPA graph (cuda_attention_cudnn.cpp): q [batch, heads, time, head_dim], k and v
// with kv_heads; packed rows: `batch` is the bucketed sequence count and `time` the bucketed
// longest sequence (the graph's dims), the tokens at ragged offsets.
struct SdpaGraphShape {
  int64_t batch = 0, heads = 0, kv_heads = 0, time = 0, head_dim = 0;
  bool packed = false;
};

// The workspace cudnn-frontend lays out in front of the plan's for the composite SDPA graphs
// (include/cudnn_frontend/node/scaled_dot_product_flash_attention.h, frontend 1.x,
// get_fe_workspace_size_node): the forward none (no ALiBi); the backward its fp32 softmax sum
// (dO . O per row) [batch, heads, time] and, unless deterministic, the fp32 dQ accumulator
// [batch, heads, time, head_dim]. GQA's full-head dK/dV stay virtual (max_total_seq_len unset).
// Not here: cuDNN <= 9.15's padding-mask workaround (8 B per batch for unpadded graphs with
// time % 128 != 0; 9.16 on drop it).
int64_t cudnn_sdpa_frontend_workspace_bytes(const SdpaGraphShape& shape, bool backward, bool deterministic);

// What the memory model allows for the execution plan's own workspace (the engine's; cuDNN says
// it only on the device, graph.get_workspace_size()), and what the emulated cuDNN's plans ask
// for (src/emu/emu_cudnn.cpp, which must agree; README.md, "How much memory a rank holds"):
//   - the deterministic backward: the dP-workspace decomposition, whose engine keeps dS for the
//     separate dQ product in the I/O type, batch x heads x ceil64(time) x ceil128(time) x 2
//     bytes (the frontend's own estimate of it, required_dp_workspace_bytes_sm90 in the node
//     above; cudnn-frontend PR #398: "quadratic in sequence length"), plus
//   - kCudnnPlanWorkspaceAllowance for every plan: no NVIDIA document gives the forward's or
//     the atomic backward's engine workspace (XLA's cuDNN attention tests saw 16 B on an H100,
//     openxla/xla#20564). 2 MiB since an H200's cuDNN 9 took 2 MiB for the forward of opt-1.3b's
//     shape (B 8, 32 heads, T 512, D 64, fp16; ZT_ALLOCATION_LOG, 2026-11-28), where the model
//     allowed 1 MiB; one measurement, not a bound NVIDIA gives.
constexpr int64_t kCudnnPlanWorkspaceAllowance = int64_t{2} << 20;
int64_t cudnn_sdpa_plan_workspace_bytes(const SdpaGraphShape& shape, bool backward, bool deterministic);

// The buckets of packed rows' ragged graphs (cuda_attention_cudnn.cpp builds its graphs with
// these, so that a few graphs serve every batch; the memory model counts with them): a call of
// `rows` rows x `time` tokens holding `sequences` sequences (every run of tokens whose position
// restarts at 0: samples, and the padding after a row's last sample), the longest `longest`
// tokens, gets a graph of
//   B' = rows x the power of two >= ceil(sequences / rows)  sequences, and
//   S' = the power of two >= longest, at least 64, at most time  tokens.
int64_t cudnn_ragged_batch(int64_t sequences, int64_t rows);
int64_t cudnn_ragged_time(int64_t longest, int64_t time);

// What the rows of a run's packed micro-batches (train --packing, data/packing.h) can hold: the
// micro-batch's samples packed first-fit decreasing into rows as long as the data's longest
// sample, each row padded to the fullest's length, the padding a sequence of its own (its
// positions restart at 0). samples == 0: rows of one sample each, the padding continuing it
// (every run without --packing): B' = B, S' = T.
struct PackedRows {
  int64_t samples = 0;          // samples per micro-batch (train_micro_batch_size_per_gpu)
  int64_t samples_per_row = 0;  // the most one row holds: longest / shortest sample (<= samples)
  bool padded = false;          // samples differ in length: all rows but the fullest may end in padding
};
// The data's bound: micro_batch samples between shortest and longest tokens long (1: any data).
PackedRows packed_rows_bound(int64_t micro_batch, int64_t shortest_sample, int64_t longest_sample);
// The most sequences B' a ragged graph gets for a call of at most `rows` rows of such samples:
// the worst over r = 1 .. rows rows (fewer when samples_per_row forces more) of
// cudnn_ragged_batch(samples + r - 1 padding runs, r) (samples alone for one row: it is the
// fullest). Exact for a call whose rows are the worst r; e.g. 4 samples of varied length give
// B' = 8 (2 rows: 5 sequences -> 2 x 4; 4 rows: 7 -> 4 x 2), twice the rows the model counts.
int64_t worst_ragged_batch(const PackedRows& packed, int64_t rows);

// One attention call of the CUDA backend: q [batch, time, heads, head_dim], k and v with
// kv_heads; packed: positions given (packed rows, backend.h), which hold packed_rows' samples.
struct AttentionCallShape {
  DType dtype = DType::BF16;
  int64_t batch = 0, time = 0, heads = 0, kv_heads = 0, head_dim = 0;
  bool packed = false;
  PackedRows packed_rows;
};

// The device memory the CUDA backend's attention takes during one call, from its caching
// allocator (CudaBackendImpl::scratch), by the variant ZT_CUDA_ATTENTION and the dtype choose:
//   - cuDNN (auto or cudnn, bf16/fp16): packed rows' THD stats [B*T, H] fp32, then the graph's
//     workspace (frontend + plan, deterministic backward: the backend's first choice);
//     packed rows also keep the ragged index arrays (4 B' + 3 int32) from call to call;
//   - our kernels: the backward's delta [B, H, T] fp32.
// Packed rows' graph is the worst call.packed_rows can give: B' = worst_ragged_batch sequences
// of S' = T tokens (a sample as long as the row); one sample per row: B x T.
// Assumes cuDNN runs every bf16/fp16 case; where a GPU's cuDNN refuses one, our kernels' scratch
// (delta, the size of the softmax sum alone) is less than what is counted.
struct AttentionScratch {
  std::vector<int64_t> buffers;  // held for the op: allocated in this order, released in reverse
  int64_t index_bytes = 0;       // kept by the backend after the op (0: none)
};
AttentionScratch cuda_attention_scratch(const AttentionCallShape& call, bool backward);

}  // namespace zt
