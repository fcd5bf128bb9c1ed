// The CPU backend's causal self-attention with grouped-query heads, forward and backward.
// Work is split into blocks of query rows: block [i0, i0 + rows) only needs keys
// [start of query i0's sample, i0 + rows), so the scores are computed for about half of the
// T x T square (of each sample's square in a packed row), and the scratch is rows x T per
// thread (never T x T). The products QK^T, PV, dO V^T, dS K, dS^T Q, P^T dO are
// single-threaded cblas_sgemm calls inside the OpenMP loop (the OpenMP build of OpenBLAS runs
// one thread per call inside a parallel region): with B*H independent heads there is enough
// parallel work and no nested threading. The backward recomputes the probabilities from the
// saved log-sum-exp instead of storing the B*H*T*T attention matrix. bf16/fp16 activations are
// widened for the fp32 kernels and the outputs rounded back once (Fp32Staging).
#include <cblas.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_vector_math.h"

namespace zt::cpu {

namespace {

constexpr int64_t kQueryBlock = 64;  // query rows per work item

// The shared sizes (backend/arg_checks.h) and the work split over them.
struct AttentionShapes : AttentionShape {
  int64_t group() const { return heads / kv_heads; }  // query heads per kv head
  int64_t blocks() const { return (time + kQueryBlock - 1) / kQueryBlock; }
};

// Checks q[B,T,H,D], k,v[B,T,Hkv,D], out (or dout) like q, all of one float dtype; lse[B,H,T] fp32.
AttentionShapes check_attention(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                                const Tensor& out, const char* out_arg, const Tensor& lse) {
  expect_host_float(op, "q", q);
  expect_same_dtype(op, "k", k, "q", q);
  expect_same_dtype(op, "v", v, "q", q);
  expect_same_dtype(op, out_arg, out, "q", q);
  f32_arg(op, "lse", lse);
  const AttentionShapes shapes{attention_shape(op, q, k, v, out, out_arg, lse)};
  const int64_t blas_limit = std::numeric_limits<int>::max();
  ZT_CHECK(shapes.time * shapes.heads * shapes.head_dim <= blas_limit, op, ": q ", q.describe(),
           " exceeds the BLAS int range");
  return shapes;
}

// The views one work item reads: the first row of each matrix and its row stride (leading
// dimension), for query head `head` of batch `b` and its kv head.
struct HeadViews {
  int64_t q_offset = 0;   // element offset of (b, t=0, head, 0) in q[B,T,H,D]
  int64_t kv_offset = 0;  // element offset of (b, t=0, kv head, 0) in k,v[B,T,Hkv,D]
  int q_stride = 0;       // H * D
  int kv_stride = 0;      // Hkv * D
};

HeadViews head_views(const AttentionShapes& shapes, int64_t b, int64_t head) {
  HeadViews views;
  views.q_offset = (b * shapes.time * shapes.heads + head) * shapes.head_dim;
  views.kv_offset = (b * shapes.time * shapes.kv_heads + head / shapes.group()) * shapes.head_dim;
  views.q_stride = static_cast<int>(shapes.heads * shapes.head_dim);
  views.kv_stride = static_cast<int>(shapes.kv_heads * shapes.head_dim);
  return views;
}

// The keys one block of query rows [first_query, first_query + rows) of row b can see:
// [begin, end), and the visible range of each query inside it. Query t sees [t - position, t];
// starts never decrease along a row (backend.h's positions rule), so query first_query's start
// is the block's first key.
struct KeyRange {
  const int32_t* positions = nullptr;  // positions[T] of row b, or null (positions = t)
  int64_t first_query = 0, begin = 0, end = 0;
  KeyRange(const int32_t* positions_data, int64_t b, int64_t time, int64_t first, int64_t rows)
      : positions(positions_data ? positions_data + b * time : nullptr), first_query(first),
        begin(start_of(first)), end(first + rows) {}
  int64_t start_of(int64_t query) const { return positions ? query - positions[query] : 0; }
  int64_t keys() const { return end - begin; }
  // Columns [first_visible, last_visible) of query row r in the block's scores[rows, keys()].
  int64_t first_visible(int64_t r) const { return start_of(first_query + r) - begin; }
  int64_t last_visible(int64_t r) const { return first_query + r + 1 - begin; }
};

// scores[rows, keys] = scale * Q[first_query : first_query + rows] K[range.begin : range.end]^T.
void block_scores(float* scores, const float* q, const float* k, const HeadViews& views,
                  const KeyRange& range, int64_t rows, int64_t head_dim, float scale) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows),
              static_cast<int>(range.keys()), static_cast<int>(head_dim), scale,
              q + views.q_offset + range.first_query * views.q_stride, views.q_stride,
              k + views.kv_offset + range.begin * views.kv_stride, views.kv_stride, 0.0f, scores,
              static_cast<int>(range.keys()));
}

}  // namespace

void CpuBackend::attention_forward(Tensor out, Tensor lse, Tensor q, Tensor k, Tensor v,
                                   Tensor positions, float scale_factor) {
  const char* op = "attention_forward";
  const AttentionShapes shapes = check_attention(op, q, k, v, out, "out", lse);
  const int32_t* positions_data = positions_arg(op, positions, shapes.batch, shapes.time);
  Fp32Staging stage(op);
  const float* q_data = stage.read("q", q).f32();
  const float* k_data = stage.read("k", k).f32();
  const float* v_data = stage.read("v", v).f32();
  float* out_data = stage.write("out", out).f32();
  float* lse_data = lse.f32();
  const int64_t time = shapes.time, heads = shapes.heads, blocks = shapes.blocks();
  const int64_t items = shapes.batch * heads * blocks;
#pragma omp parallel if (items > 1)
  {
    std::vector<float> scores(static_cast<size_t>(kQueryBlock * time));  // scores[rows, keys]
    // Dynamic: the last query blocks of a head see the most keys.
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < items; ++item) {
      const int64_t b = item / (heads * blocks);
      const int64_t head = item / blocks % heads;
      const int64_t block = blocks - 1 - item % blocks;  // heavy blocks first
      const int64_t first_query = block * kQueryBlock;
      const int64_t rows = std::min(kQueryBlock, time - first_query);
      const KeyRange range(positions_data, b, time, first_query, rows);  // causal, within samples
      const int64_t keys = range.keys();
      const HeadViews views = head_views(shapes, b, head);
      block_scores(scores.data(), q_data, k_data, views, range, rows, shapes.head_dim, scale_factor);
      float* lse_row = lse_data + (b * heads + head) * time + first_query;  // lse_row[rows]
      for (int64_t r = 0; r < rows; ++r) {
        float* s = scores.data() + r * keys;  // s[keys]: this query's scores
        const int64_t first = range.first_visible(r), last = range.last_visible(r);
        float row_max = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : row_max)
        for (int64_t j = first; j < last; ++j) row_max = std::max(row_max, s[j]);
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int64_t j = first; j < last; ++j) {
          s[j] = vector_exp(s[j] - row_max);
          sum += s[j];
        }
        const float inverse_sum = 1.0f / sum;
#pragma omp simd
        for (int64_t j = first; j < last; ++j) s[j] *= inverse_sum;
        for (int64_t j = 0; j < first; ++j) s[j] = 0.0f;     // masked: an earlier sample's keys
        for (int64_t j = last; j < keys; ++j) s[j] = 0.0f;   // masked (future) keys
        lse_row[r] = row_max + std::log(sum);
      }
      // out[first_query : +rows, head] = P[rows, keys] V[range.begin : range.end]
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(rows),
                  static_cast<int>(shapes.head_dim), static_cast<int>(keys), 1.0f, scores.data(),
                  static_cast<int>(keys), v_data + views.kv_offset + range.begin * views.kv_stride,
                  views.kv_stride, 0.0f, out_data + views.q_offset + first_query * views.q_stride,
                  views.q_stride);
    }
  }
  stage.write_back();
}

void CpuBackend::attention_backward(Tensor dq, Tensor dk, Tensor dv, Tensor dout, Tensor q,
                                    Tensor k, Tensor v, Tensor out, Tensor lse, Tensor positions,
                                    float scale_factor) {
  const char* op = "attention_backward";
  const AttentionShapes shapes = check_attention(op, q, k, v, out, "out", lse);
  const int32_t* positions_data = positions_arg(op, positions, shapes.batch, shapes.time);
  expect_same_dtype(op, "dout", dout, "q", q);
  expect_same_dtype(op, "dq", dq, "q", q);
  expect_same_dtype(op, "dk", dk, "q", q);
  expect_same_dtype(op, "dv", dv, "q", q);
  expect_same_shape(op, "dout", dout, "q", q);
  expect_same_shape(op, "dq", dq, "q", q);
  expect_same_shape(op, "dk", dk, "k", k);
  expect_same_shape(op, "dv", dv, "v", v);
  Fp32Staging stage(op);
  const float* q_data = stage.read("q", q).f32();
  const float* k_data = stage.read("k", k).f32();
  const float* v_data = stage.read("v", v).f32();
  const float* out_data = stage.read("out", out).f32();
  const float* dout_data = stage.read("dout", dout).f32();
  const float* lse_data = lse.f32();
  float* dq_data = stage.write("dq", dq).f32();
  float* dk_data = stage.write("dk", dk).f32();
  float* dv_data = stage.write("dv", dv).f32();
  const int64_t time = shapes.time, heads = shapes.heads, head_dim = shapes.head_dim;
  const int64_t kv_heads = shapes.kv_heads, group = shapes.group();
  // One work item per (b, kv head): it owns dk, dv of that kv head, so the query heads of its
  // group accumulate into them without races and in a fixed order.
  const int64_t items = shapes.batch * kv_heads;
#pragma omp parallel if (items > 1)
  {
    std::vector<float> probs(static_cast<size_t>(kQueryBlock * time));   // probs[rows, keys]
    std::vector<float> dprobs(static_cast<size_t>(kQueryBlock * time));  // dprobs[rows, keys]
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < items; ++item) {
      const int64_t b = item / kv_heads;
      const int64_t kv_head = item % kv_heads;
      const HeadViews kv_views = head_views(shapes, b, kv_head * group);
      float* dk_head = dk_data + kv_views.kv_offset;  // rows of stride Hkv*D
      float* dv_head = dv_data + kv_views.kv_offset;
      for (int64_t t = 0; t < time; ++t) {
        std::memset(dk_head + t * kv_views.kv_stride, 0, static_cast<size_t>(head_dim) * sizeof(float));
        std::memset(dv_head + t * kv_views.kv_stride, 0, static_cast<size_t>(head_dim) * sizeof(float));
      }
      for (int64_t head = kv_head * group; head < (kv_head + 1) * group; ++head) {
        const HeadViews views = head_views(shapes, b, head);
        const float* lse_head = lse_data + (b * heads + head) * time;  // lse_head[T]
        for (int64_t block = 0; block < shapes.blocks(); ++block) {
          const int64_t first_query = block * kQueryBlock;
          const int64_t rows = std::min(kQueryBlock, time - first_query);
          const KeyRange range(positions_data, b, time, first_query, rows);
          const int64_t keys = range.keys();
          const int ld = static_cast<int>(keys);
          const int64_t row_offset = views.q_offset + first_query * views.q_stride;
          const int64_t key_offset = range.begin * views.kv_stride;  // of keys[range.begin] in a head
          // P = exp(scale Q K^T - lse) on visible keys, 0 on masked keys.
          block_scores(probs.data(), q_data, k_data, views, range, rows, head_dim, scale_factor);
          // dP[rows, keys] = dO V^T
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows), ld,
                      static_cast<int>(head_dim), 1.0f, dout_data + row_offset, views.q_stride,
                      v_data + views.kv_offset + key_offset, views.kv_stride, 0.0f, dprobs.data(), ld);
          for (int64_t r = 0; r < rows; ++r) {
            const int64_t query = first_query + r;
            float* p = probs.data() + r * keys;    // p[keys]
            float* dp = dprobs.data() + r * keys;  // dp[keys], becomes dS
            const float* dout_row = dout_data + row_offset + r * views.q_stride;  // [D]
            const float* out_row = out_data + row_offset + r * views.q_stride;    // [D]
            // softmax backward: dS = P (dP - rowsum(dO * O)), rowsum(dO*O) = rowsum(P * dP).
            float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
            for (int64_t d = 0; d < head_dim; ++d) dot += dout_row[d] * out_row[d];
            const float row_lse = lse_head[query];
            const int64_t first = range.first_visible(r), last = range.last_visible(r);
#pragma omp simd
            for (int64_t j = first; j < last; ++j) {
              p[j] = vector_exp(p[j] - row_lse);
              dp[j] = p[j] * (dp[j] - dot);
            }
            for (int64_t j = 0; j < first; ++j) p[j] = dp[j] = 0.0f;
            for (int64_t j = last; j < keys; ++j) p[j] = dp[j] = 0.0f;
          }
          // dQ[rows] = scale dS K[range]
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(rows),
                      static_cast<int>(head_dim), ld, scale_factor, dprobs.data(), ld,
                      k_data + views.kv_offset + key_offset, views.kv_stride, 0.0f,
                      dq_data + row_offset, views.q_stride);
          // dK[range] += scale dS^T Q[rows]
          cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, ld, static_cast<int>(head_dim),
                      static_cast<int>(rows), scale_factor, dprobs.data(), ld,
                      q_data + row_offset, views.q_stride, 1.0f, dk_head + key_offset,
                      views.kv_stride);
          // dV[range] += P^T dO[rows]
          cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, ld, static_cast<int>(head_dim),
                      static_cast<int>(rows), 1.0f, probs.data(), ld, dout_data + row_offset,
                      views.q_stride, 1.0f, dv_head + key_offset, views.kv_stride);
        }
      }
    }
  }
  stage.write_back();
}

}  // namespace zt::cpu
