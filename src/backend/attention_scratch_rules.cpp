// The CUDA backend's attention scratch rules (see attention_scratch_rules.h).
#include "backend/attention_scratch_rules.h"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <string_view>

#include "core/error.h"

namespace zt {

CudaAttentionVariant requested_cuda_attention_variant() {
  const char* value = std::getenv("ZT_CUDA_ATTENTION");
  const std::string_view choice = value ? value : "";
  if (choice.empty() || choice == "auto") return CudaAttentionVariant::Auto;
  if (choice == "cudnn") return CudaAttentionVariant::Cudnn;
  if (choice == "tensor-cores") return CudaAttentionVariant::TensorCores;
  if (choice == "cuda-cores") return CudaAttentionVariant::CudaCores;
  fail("ZT_CUDA_ATTENTION must be auto, cudnn, tensor-cores or cuda-cores, got '", choice, "'");
}

namespace {

int64_t round_up(int64_t value, int64_t multiple) { return (value + multiple - 1) / multiple * multiple; }

int64_t power_of_two_at_least(int64_t value) {
  return static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(std::max<int64_t>(value, 1))));
}

// The graph of the call: packed rows' ragged (THD) graph bucketed as cuda_attention_cudnn.cpp
// buckets it, for the worst sequences call.packed_rows allows.
SdpaGraphShape graph_shape(const AttentionCallShape& call) {
  SdpaGraphShape shape{call.batch, call.heads, call.kv_heads, call.time, call.head_dim, call.packed};
  if (call.packed && call.packed_rows.samples > 0) {
    shape.batch = worst_ragged_batch(call.packed_rows, call.batch);
    shape.time = cudnn_ragged_time(call.time, call.time);  // a sample may fill its row
  }
  return shape;
}

}  // namespace

int64_t cudnn_ragged_batch(int64_t sequences, int64_t rows) {
  return rows * power_of_two_at_least((sequences + rows - 1) / rows);
}

int64_t cudnn_ragged_time(int64_t longest, int64_t time) {
  return std::min(time, std::max<int64_t>(64, power_of_two_at_least(longest)));
}

PackedRows packed_rows_bound(int64_t micro_batch, int64_t shortest_sample, int64_t longest_sample) {
  ZT_CHECK(micro_batch > 0 && shortest_sample > 0 && shortest_sample <= longest_sample,
           "packed rows: micro-batch ", micro_batch, " of samples of ", shortest_sample, " to ", longest_sample,
           " tokens");
  return {micro_batch, std::min(micro_batch, longest_sample / shortest_sample), shortest_sample < longest_sample};
}

int64_t worst_ragged_batch(const PackedRows& packed, int64_t rows) {
  if (packed.samples == 0) return rows;
  const int64_t per_row = std::max<int64_t>(packed.samples_per_row, 1);
  const int64_t fewest_rows = (packed.samples + per_row - 1) / per_row;
  int64_t worst = 0;
  for (int64_t r = std::min(fewest_rows, rows); r <= std::min(rows, packed.samples); ++r) {
    const int64_t padding_runs = packed.padded ? r - 1 : 0;  // every row but the fullest
    worst = std::max(worst, cudnn_ragged_batch(packed.samples + padding_runs, r));
  }
  return worst;
}

int64_t cudnn_sdpa_frontend_workspace_bytes(const SdpaGraphShape& shape, bool backward, bool deterministic) {
  if (!backward) return 0;
  const int64_t rows = shape.batch * shape.heads * shape.time;         // [B, H, S]
  const int64_t softmax_sum = rows * int64_t{sizeof(float)};          // fp32 [B, H, S, 1]
  // fp32 [B, H, S, D], where the frontend lets the engine accumulate dQ atomically
  const int64_t dq_accumulator = deterministic ? 0 : rows * shape.head_dim * int64_t{sizeof(float)};
  return softmax_sum + dq_accumulator;
}

int64_t cudnn_sdpa_plan_workspace_bytes(const SdpaGraphShape& shape, bool backward, bool deterministic) {
  int64_t bytes = kCudnnPlanWorkspaceAllowance;
  if (backward && deterministic) {  // dS [B, H, ceil64(S), ceil128(S)] in bf16/fp16
    bytes += shape.batch * shape.heads * round_up(shape.time, 64) * round_up(shape.time, 128) * 2;
  }
  return bytes;
}

AttentionScratch cuda_attention_scratch(const AttentionCallShape& call, bool backward) {
  AttentionScratch scratch;
  if (call.batch == 0 || call.time == 0 || call.heads == 0) return scratch;  // the backend returns at once
  const int64_t lse_bytes = call.batch * call.heads * call.time * int64_t{sizeof(float)};  // fp32 [B, H, T]
  const CudaAttentionVariant variant = requested_cuda_attention_variant();
  const bool cudnn = (variant == CudaAttentionVariant::Auto || variant == CudaAttentionVariant::Cudnn) &&
                     (call.dtype == DType::BF16 || call.dtype == DType::F16);
  if (!cudnn) {
    if (backward) scratch.buffers.push_back(lse_bytes);  // delta [B, H, T]
    return scratch;
  }
  const SdpaGraphShape shape = graph_shape(call);
  if (call.packed) {
    scratch.index_bytes = (4 * shape.batch + 3) * int64_t{sizeof(int32_t)};
    scratch.buffers.push_back(lse_bytes);  // the THD stats [B*T, H]
  }
  const bool deterministic = true;  // cuda_attention_cudnn.cpp builds the deterministic backward first
  scratch.buffers.push_back(cudnn_sdpa_frontend_workspace_bytes(shape, backward, deterministic) +
                            cudnn_sdpa_plan_workspace_bytes(shape, backward, deterministic));
  return scratch;
}

}  // namespace zt
