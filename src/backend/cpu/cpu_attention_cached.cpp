// The CPU backend's attention over a key/value cache (backend.h attention_cached_forward): the
// T newest queries of a row against its S cached keys, causal with the offset S - T. One work
// item per (row, query head, query): scores over the visible keys, a softmax in fp32, the
// weighted sum of the values. Generation runs T = 1 (or the prompt once), so plain loops over
// the D-wide rows are all it needs; bf16/fp16 are widened and rounded back once (Fp32Staging).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/arg_checks.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_vector_math.h"

namespace zt::cpu {

namespace {

// out[D] = softmax(scale * q . k_j for j < visible) weighted sum of v_j; k, v rows kv_stride apart.
void attend_one_query(float* out, const float* q, const float* k, const float* v, int64_t visible, int64_t head_dim,
                      int64_t kv_stride, float scale, std::vector<float>& scores) {
  float row_max = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < visible; ++j) {
    const float* key = k + j * kv_stride;  // key[D]
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int64_t d = 0; d < head_dim; ++d) dot += q[d] * key[d];
    scores[static_cast<size_t>(j)] = dot * scale;
    row_max = std::max(row_max, scores[static_cast<size_t>(j)]);
  }
  float sum = 0.0f;
  for (int64_t j = 0; j < visible; ++j) {
    scores[static_cast<size_t>(j)] = vector_exp(scores[static_cast<size_t>(j)] - row_max);
    sum += scores[static_cast<size_t>(j)];
  }
  std::fill(out, out + head_dim, 0.0f);
  for (int64_t j = 0; j < visible; ++j) {
    const float weight = scores[static_cast<size_t>(j)] / sum;
    const float* value = v + j * kv_stride;  // value[D]
#pragma omp simd
    for (int64_t d = 0; d < head_dim; ++d) out[d] += weight * value[d];
  }
}

}  // namespace

void CpuBackend::attention_cached_forward(Tensor out, Tensor q, Tensor k, Tensor v, float scale_factor) {
  const char* op = "attention_cached_forward";
  expect_host_float(op, "q", q);
  expect_same_dtype(op, "k", k, "q", q);
  expect_same_dtype(op, "v", v, "q", q);
  expect_same_dtype(op, "out", out, "q", q);
  const CachedAttentionDims dims = cached_attention_dims(op, out, q, k, v);
  Fp32Staging stage(op);
  const float* q_data = stage.read("q", q).f32();
  const float* k_data = stage.read("k", k).f32();
  const float* v_data = stage.read("v", v).f32();
  float* out_data = stage.write("out", out).f32();
  const int64_t heads = dims.heads, d = dims.head_dim, group = dims.heads / std::max<int64_t>(dims.kv_heads, 1);
  const int64_t q_stride = heads * d, kv_stride = dims.kv_heads * d, offset = dims.keys - dims.queries;
  const int64_t items = dims.batch * dims.queries * heads;
#pragma omp parallel if (items * dims.keys * d > 32768)
  {
    std::vector<float> scores(static_cast<size_t>(dims.keys));  // scores[S] of one query
#pragma omp for schedule(static)
    for (int64_t item = 0; item < items; ++item) {
      const int64_t b = item / (dims.queries * heads), t = item / heads % dims.queries, head = item % heads;
      const int64_t row = b * dims.queries + t;  // (b, t) in q and out
      const int64_t kv_first = b * dims.keys * kv_stride + (head / group) * d;  // (b, key 0, kv head, 0)
      attend_one_query(out_data + row * q_stride + head * d, q_data + row * q_stride + head * d, k_data + kv_first,
                       v_data + kv_first, offset + t + 1, d, kv_stride, scale_factor, scores);
    }
  }
  stage.write_back();
}

}  // namespace zt::cpu
