// The CUDA backend's attention over a key/value cache (backend.h attention_cached_forward,
// cuda_attention_cached.cu) against the CPU backend in every dtype: one new query (a generation
// step) and a prefill of several (T = S), grouped-query heads, key counts below and above the
// kernel's 128-key tile (several tiles, one partial), head dims from 1 to 160 (past one column per
// thread); plus the argument checks. A kernel suite: it runs under AddressSanitizer and
// ThreadSanitizer too (shared memory, barriers between the tiles).
#include <boost/test/unit_test.hpp>

#include <cmath>

#include "gpu_test_util.h"
#include "test_util.h"

namespace {

using namespace zt;
using namespace zt::gpu_test;

struct CachedCase {
  int64_t batch, queries, keys, heads, kv_heads, head_dim;
};

void check_case(const CachedCase& c, DType dtype) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  const std::vector<float> q = rounded(zt::test::random_floats(static_cast<size_t>(c.batch * c.queries * c.heads * c.head_dim), 1), dtype);
  const std::vector<float> k = rounded(zt::test::random_floats(static_cast<size_t>(c.batch * c.keys * c.kv_heads * c.head_dim), 2), dtype);
  const std::vector<float> v = rounded(zt::test::random_floats(static_cast<size_t>(c.batch * c.keys * c.kv_heads * c.head_dim), 3), dtype);
  std::vector<float> expected(q.size()), q_host = q, k_host = k, v_host = v;
  cpu().attention_cached_forward(Tensor(expected.data(), DType::F32, {c.batch, c.queries, c.heads, c.head_dim}),
                                 Tensor(q_host.data(), DType::F32, {c.batch, c.queries, c.heads, c.head_dim}),
                                 Tensor(k_host.data(), DType::F32, {c.batch, c.keys, c.kv_heads, c.head_dim}),
                                 Tensor(v_host.data(), DType::F32, {c.batch, c.keys, c.kv_heads, c.head_dim}), scale);
  DeviceTensor dq = upload(q, dtype, {c.batch, c.queries, c.heads, c.head_dim});
  DeviceTensor dk = upload(k, dtype, {c.batch, c.keys, c.kv_heads, c.head_dim});
  DeviceTensor dv = upload(v, dtype, {c.batch, c.keys, c.kv_heads, c.head_dim});
  DeviceTensor out = poisoned(dtype, {c.batch, c.queries, c.heads, c.head_dim});
  gpu().attention_cached_forward(out, dq, dk, dv, scale);
  check_near(download(out), expected, dtype, 1e-5,
             cat("attention_cached_forward B=", c.batch, " T=", c.queries, " S=", c.keys, " H=", c.heads, " Hkv=",
                 c.kv_heads, " D=", c.head_dim));
}

BOOST_AUTO_TEST_SUITE(cuda_attention_cached)

BOOST_AUTO_TEST_CASE(matches_the_cpu_backend) {
  const CachedCase cases[] = {
      {1, 1, 1, 4, 2, 16},     // the first generated token after a one-token prompt
      {1, 1, 300, 4, 2, 64},   // a step late in a sequence: 3 tiles, the last partial
      {2, 5, 5, 4, 4, 16},     // a prefill (T = S), two rows
      {1, 3, 130, 6, 2, 160},  // 3 new queries, 2 tiles, head dim past one column per thread
      {1, 2, 7, 2, 1, 1},      // head dim 1
  };
  for (DType dtype : float_dtypes())
    for (const CachedCase& c : cases) check_case(c, dtype);
}

BOOST_AUTO_TEST_CASE(bad_arguments_are_named) {
  DeviceTensor q = poisoned(DType::F32, {1, 3, 2, 8}), out = poisoned(DType::F32, {1, 3, 2, 8});
  DeviceTensor short_k = poisoned(DType::F32, {1, 2, 2, 8}), v = poisoned(DType::F32, {1, 2, 2, 8});
  zt::test::check_error_mentions([&] { gpu().attention_cached_forward(out, q, short_k, v, 1.0f); },
                                 {"attention_cached_forward", "T <= S"});
  DeviceTensor k16 = poisoned(DType::BF16, {1, 4, 2, 8}), v32 = poisoned(DType::F32, {1, 4, 2, 8});
  zt::test::check_error_mentions([&] { gpu().attention_cached_forward(out, q, k16, v32, 1.0f); },
                                 {"attention_cached_forward", "k"});
  DeviceTensor odd_heads = poisoned(DType::F32, {1, 4, 3, 8});
  DeviceTensor q4 = poisoned(DType::F32, {1, 1, 4, 8}), out4 = poisoned(DType::F32, {1, 1, 4, 8});
  zt::test::check_error_mentions([&] { gpu().attention_cached_forward(out4, q4, odd_heads, odd_heads, 1.0f); },
                                 {"attention_cached_forward", "multiple of key/value heads"});
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace
