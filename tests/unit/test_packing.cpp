// Tests of --packing (data/packing.h, backend.h "positions within packed rows"):
// - first-fit decreasing and the packed micro-batch layout (positions restart per sample,
//   targets, loss mask and row ids as unpacked, padding a segment of its own);
// - the CPU backend's attention and RoPE on packed rows equal the same ops run on each sample
//   alone (forward and backward, samples crossing the 64-query blocks), and positions that
//   break the rule are refused;
// - every model family (llama, mistral, qwen2, opt pre-LN with residual dropout, the opt-350m
//   shape, llama with activation checkpointing): the loss and every gradient of a packed
//   micro-batch equal those of the same samples unpacked.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/rng.h"
#include "data/batch.h"
#include "data/packing.h"
#include "data/token_shards.h"
#include "model/architecture.h"
#include "model/causal_lm.h"
#include "model/param_store.h"
#include "test_helpers.h"
#include "test_util.h"
#include "train/batch_views.h"

using namespace zt;
using zt::test::check_close;
using zt::test::random_floats;
using zt::test::view;

namespace {

// Samples of these lengths (BOS 1, then ids 3.. cycling below vocab 32; loss mask on all but
// the first two tokens, so masked prompt tokens occur too).
const std::vector<int64_t> kLengths = {14, 9, 5, 12, 3, 7};

TokenDataset write_dataset(const zt::test::TempDir& dir) {
  ShardAttributes attrs;
  attrs.vocab_size = 32;
  attrs.bos_id = 1;
  attrs.eos_id = 2;
  attrs.pad_id = 0;
  attrs.tokenizer_sha256 = std::string(64, '0');
  attrs.max_seq_len = 16;
  std::vector<TokenSample> samples;
  int32_t next = 3;
  for (int64_t length : kLengths) {
    TokenSample sample;
    for (int64_t t = 0; t < length; ++t) {
      sample.tokens.push_back(t == 0 ? 1 : next);
      sample.loss_mask.push_back(t >= 2 ? 1 : 0);
      next = next == 31 ? 3 : next + 1;
    }
    samples.push_back(sample);
  }
  write_token_shard((dir.path / "train-00000.h5").string(), samples, attrs);
  return TokenDataset::open(dir.path.string());
}

// The rows of a packed layout as lists of lengths.
std::vector<std::vector<int64_t>> row_lengths(const std::vector<std::vector<size_t>>& rows,
                                              const std::vector<int64_t>& lengths) {
  std::vector<std::vector<int64_t>> out;
  for (const auto& row : rows) {
    out.emplace_back();
    for (size_t i : row) out.back().push_back(lengths[i]);
  }
  return out;
}

// Positions [B*T] of rows packed with samples of `rows` lengths, padding counting from 0.
std::vector<int32_t> packed_positions(int64_t time, const std::vector<std::vector<int64_t>>& rows) {
  std::vector<int32_t> positions;
  for (const auto& row : rows) {
    int64_t used = 0;
    for (int64_t length : row) {
      for (int64_t t = 0; t < length; ++t) positions.push_back(static_cast<int32_t>(t));
      used += length;
    }
    for (int64_t t = 0; used + t < time; ++t) positions.push_back(static_cast<int32_t>(t));
  }
  return positions;
}

// Rows [first, first + count) of token row b of x[B, T, W] (W = heads * D), as a vector.
std::vector<float> slice(const std::vector<float>& x, int64_t time, int64_t width, int64_t b, int64_t first,
                         int64_t count) {
  const auto begin = x.begin() + (b * time + first) * width;
  return std::vector<float>(begin, begin + count * width);
}

// ---- model families ------------------------------------------------------------------------

ModelConfig family_config(const std::string& name) {
  nlohmann::json common = {{"vocab_size", 32}, {"hidden_size", 16}, {"num_hidden_layers", 2},
                           {"num_attention_heads", 4}, {"max_position_embeddings", 32}};
  nlohmann::json json = common;
  if (name == "llama" || name == "llama_checkpointing") {
    json.update({{"model_type", "llama"}, {"intermediate_size", 24}, {"num_key_value_heads", 2}, {"rms_norm_eps", 1e-5}});
  } else if (name == "mistral") {
    json.update({{"model_type", "mistral"}, {"intermediate_size", 24}, {"num_key_value_heads", 2}, {"sliding_window", 64}});
  } else if (name == "qwen2") {
    json.update({{"model_type", "qwen2"}, {"intermediate_size", 24}, {"num_key_value_heads", 1},
                 {"tie_word_embeddings", true}});
  } else if (name == "opt") {
    json.update({{"model_type", "opt"}, {"ffn_dim", 24}, {"dropout", 0.1}});
  } else {  // opt_350m: post-LN, project_in/out, no affine LayerNorms, no biases
    json.update({{"model_type", "opt"}, {"ffn_dim", 24}, {"dropout", 0.1}, {"do_layer_norm_before", false},
                 {"word_embed_proj_dim", 8}, {"layer_norm_elementwise_affine", false}, {"enable_bias", false}});
  }
  return parse_model_config(json, "tiny-" + name);
}

// Norm weights near 1, everything else small normals.
void randomise(ParamStore& store, uint64_t seed) {
  uint32_t stream = 0;
  for (const ParamEntry& entry : store.entries()) {
    float* values = store.param(entry.spec.name).f32();
    RngKey key{seed, rng_stream(RngPurpose::Test, stream++), 0};
    for (int64_t i = 0; i < entry.spec.numel(); ++i) {
      const float noise = rng_normal(key, static_cast<uint64_t>(i));
      values[i] = entry.spec.role == ParamRole::NormWeight ? 1.0f + 0.1f * noise : 0.3f * noise;
    }
  }
}

struct StepResult {
  double loss_sum = 0.0;
  std::map<std::string, std::vector<float>> grads;
};

// One forward + backward of `micro` from zeroed gradients (grad scale 1 / its targets).
StepResult run_step(CausalLM& model, ParamStore& store, Backend& backend, MicroBatch& micro) {
  DeviceBatchStorage storage;
  BatchTensors batch = batch_views(micro, backend, storage);
  DropoutContext dropout{11, 3, batch.row_ids};
  store.zero_grads();
  model.forward(batch, dropout);
  StepResult result;
  result.loss_sum = model.backward(batch, 1.0f / static_cast<float>(micro.target_tokens), dropout);
  for (const ParamEntry& entry : store.entries()) {
    Tensor grad = store.grad(entry.spec.name);
    if (grad.empty()) continue;
    result.grads[entry.spec.name].assign(grad.f32(), grad.f32() + grad.numel());
  }
  return result;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(packing)

BOOST_AUTO_TEST_CASE(first_fit_decreasing_places_longest_first) {
  // 14 opens row 0 (2 left), 12 row 1 (4 left), 9 row 2 (7 left), 7 fills row 2, 5 opens row 3,
  // 3 goes to row 1 (the first with room).
  const auto rows = pack_first_fit_decreasing(kLengths, 16);
  BOOST_TEST(rows.size() == 4u);
  const std::vector<std::vector<int64_t>> expected = {{14}, {12, 3}, {9, 7}, {5}};
  BOOST_TEST((row_lengths(rows, kLengths) == expected));
  BOOST_TEST((rows[1] == std::vector<size_t>{3, 4}));
  // Ties keep list order; everything in one row when it fits.
  const std::vector<int64_t> ties = {2, 3, 2, 3};
  BOOST_TEST((pack_first_fit_decreasing(ties, 10) == std::vector<std::vector<size_t>>{{1, 3, 0, 2}}));
  zt::test::check_error_mentions([&] { pack_first_fit_decreasing(kLengths, 10); },
                                 {"sample 0 has 14 tokens", "row of 10"});
}

BOOST_AUTO_TEST_CASE(packed_micro_batch_layout) {
  zt::test::TempDir dir;
  const TokenDataset dataset = write_dataset(dir);
  const std::vector<int64_t> indices = {0, 1, 2, 3, 4, 5};
  const MicroBatch unpacked = make_micro_batch(dataset, indices, 0);
  const MicroBatch packed = make_packed_micro_batch(dataset, indices, 0, 16);
  BOOST_TEST(packed.batch == 4);
  BOOST_TEST(packed.seq == 16);  // row 2 (9 + 7) is full
  BOOST_TEST(packed.target_tokens == unpacked.target_tokens);
  BOOST_TEST(packed.real_tokens == unpacked.real_tokens);
  BOOST_TEST((packed.sample_indices == std::vector<int64_t>{0, 3, 4, 1, 5, 2}));
  BOOST_TEST((packed.positions == packed_positions(16, {{14}, {12, 3}, {9, 7}, {5}})));
  // Every sample's tokens, targets, mask and row ids are the unpacked row's.
  std::map<int64_t, size_t> packed_offset = {{0, 0}, {3, 16}, {4, 28}, {1, 32}, {5, 41}, {2, 48}};
  for (size_t s = 0; s < indices.size(); ++s) {
    const size_t length = static_cast<size_t>(kLengths[s]);
    const size_t from = s * static_cast<size_t>(unpacked.seq), to = packed_offset[static_cast<int64_t>(s)];
    for (size_t t = 0; t < length; ++t) {
      BOOST_TEST(packed.input_ids[to + t] == unpacked.input_ids[from + t]);
      BOOST_TEST(packed.targets[to + t] == unpacked.targets[from + t]);
      BOOST_TEST(packed.loss_mask[to + t] == unpacked.loss_mask[from + t]);
      BOOST_TEST(packed.row_ids[to + t] == unpacked.row_ids[from + t]);
    }
    BOOST_TEST(packed.loss_mask[to + length - 1] == 0, "no target past a sample's end");
  }
  // Padding (row 0 after 14 tokens, row 1 after 15, row 3 after 5): pad ids, no targets.
  for (size_t e : {size_t{14}, size_t{15}, size_t{31}, size_t{53}, size_t{63}}) {
    BOOST_TEST(packed.input_ids[e] == 0);
    BOOST_TEST(packed.loss_mask[e] == 0);
  }
}

// The FLOP count (MFU, the profiler) takes the attention pairs each packed sample computes, not
// the whole row's causal square.
BOOST_AUTO_TEST_CASE(attention_pairs_of_packed_rows_are_their_samples) {
  zt::test::TempDir dir;
  const TokenDataset dataset = write_dataset(dir);
  const std::vector<int64_t> indices = {0, 1, 2, 3, 4, 5};
  const MicroBatch unpacked = make_micro_batch(dataset, indices, 0);  // 6 rows of 14
  BOOST_TEST(causal_attention_pairs(unpacked) == 6 * 14.0 * 14.0 / 2.0);
  // Rows {14 + 2 padding}, {12, 3 + 1 padding}, {9, 7}, {5 + 11 padding}: padding counts as a
  // sample of its own (the kernels attend over it too).
  const MicroBatch packed = make_packed_micro_batch(dataset, indices, 0, 16);
  const double halves = (14 * 14 + 2 * 2) + (12 * 12 + 3 * 3 + 1) + (9 * 9 + 7 * 7) + (5 * 5 + 11 * 11);
  BOOST_TEST(causal_attention_pairs(packed) == halves / 2.0);
  auto backend = make_cpu_backend();
  DeviceBatchStorage storage;
  MicroBatch copy = packed;
  BOOST_TEST(batch_views(copy, *backend, storage).attention_pairs == halves / 2.0);
}

BOOST_AUTO_TEST_CASE(attention_on_packed_rows_equals_each_sample_alone) {
  auto backend = make_cpu_backend();
  const int64_t batch = 2, time = 130, heads = 4, kv_heads = 2, head_dim = 8;
  const std::vector<std::vector<int64_t>> rows = {{70, 35, 25}, {33, 64, 20}};  // row 1: 13 padding
  std::vector<int32_t> positions = packed_positions(time, rows);
  const int64_t qw = heads * head_dim, kw = kv_heads * head_dim;
  std::vector<float> q = random_floats(static_cast<size_t>(batch * time * qw), 1u, -2.0f, 2.0f);
  std::vector<float> k = random_floats(static_cast<size_t>(batch * time * kw), 2u, -2.0f, 2.0f);
  std::vector<float> v = random_floats(static_cast<size_t>(batch * time * kw), 3u);
  std::vector<float> dout = random_floats(q.size(), 4u);
  std::vector<float> out(q.size()), lse(static_cast<size_t>(batch * heads * time));
  std::vector<float> dq(q.size()), dk(k.size()), dv(v.size());
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  backend->attention_forward(view(out, {batch, time, heads, head_dim}), view(lse, {batch, heads, time}),
                             view(q, {batch, time, heads, head_dim}), view(k, {batch, time, kv_heads, head_dim}),
                             view(v, {batch, time, kv_heads, head_dim}), view(positions, {batch * time}), scale);
  backend->attention_backward(view(dq, {batch, time, heads, head_dim}), view(dk, {batch, time, kv_heads, head_dim}),
                              view(dv, {batch, time, kv_heads, head_dim}), view(dout, {batch, time, heads, head_dim}),
                              view(q, {batch, time, heads, head_dim}), view(k, {batch, time, kv_heads, head_dim}),
                              view(v, {batch, time, kv_heads, head_dim}), view(out, {batch, time, heads, head_dim}),
                              view(lse, {batch, heads, time}), view(positions, {batch * time}), scale);
  for (int64_t b = 0; b < batch; ++b) {
    int64_t first = 0;
    for (int64_t length : rows[static_cast<size_t>(b)]) {
      const std::string what = "row " + std::to_string(b) + " sample at " + std::to_string(first);
      std::vector<float> sq = slice(q, time, qw, b, first, length), sk = slice(k, time, kw, b, first, length);
      std::vector<float> sv = slice(v, time, kw, b, first, length), sdout = slice(dout, time, qw, b, first, length);
      std::vector<float> sout(sq.size()), slse(static_cast<size_t>(heads * length));
      std::vector<float> sdq(sq.size()), sdk(sk.size()), sdv(sv.size());
      backend->attention_forward(view(sout, {1, length, heads, head_dim}), view(slse, {1, heads, length}),
                                 view(sq, {1, length, heads, head_dim}), view(sk, {1, length, kv_heads, head_dim}),
                                 view(sv, {1, length, kv_heads, head_dim}), Tensor(), scale);
      backend->attention_backward(view(sdq, {1, length, heads, head_dim}), view(sdk, {1, length, kv_heads, head_dim}),
                                  view(sdv, {1, length, kv_heads, head_dim}), view(sdout, {1, length, heads, head_dim}),
                                  view(sq, {1, length, heads, head_dim}), view(sk, {1, length, kv_heads, head_dim}),
                                  view(sv, {1, length, kv_heads, head_dim}), view(sout, {1, length, heads, head_dim}),
                                  view(slse, {1, heads, length}), Tensor(), scale);
      check_close(slice(out, time, qw, b, first, length), sout, 1e-5, 1e-6, what + " out");
      std::vector<float> packed_lse;
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t t = 0; t < length; ++t)
          packed_lse.push_back(lse[static_cast<size_t>((b * heads + h) * time + first + t)]);
      check_close(packed_lse, slse, 1e-6, 1e-6, what + " lse");
      check_close(slice(dq, time, qw, b, first, length), sdq, 1e-5, 1e-6, what + " dq");
      check_close(slice(dk, time, kw, b, first, length), sdk, 1e-5, 1e-6, what + " dk");
      check_close(slice(dv, time, kw, b, first, length), sdv, 1e-5, 1e-6, what + " dv");
      first += length;
    }
  }
}

BOOST_AUTO_TEST_CASE(rope_on_packed_rows_equals_each_sample_alone) {
  auto backend = make_cpu_backend();
  const int64_t batch = 1, time = 12, heads = 2, head_dim = 8, width = heads * head_dim;
  std::vector<float> inv_freq = {1.0f, 0.3f, 0.1f, 0.01f};
  std::vector<int32_t> positions = packed_positions(time, {{5, 7}});
  const std::vector<float> x = random_floats(static_cast<size_t>(time * width), 5u);
  std::vector<float> packed = x;
  backend->rope_forward(view(packed, {batch, time, heads, head_dim}), view(inv_freq, {4}), view(positions, {time}));
  std::vector<float> first = slice(x, time, width, 0, 0, 5), second = slice(x, time, width, 0, 5, 7);
  backend->rope_forward(view(first, {1, 5, heads, head_dim}), view(inv_freq, {4}), Tensor());
  backend->rope_forward(view(second, {1, 7, heads, head_dim}), view(inv_freq, {4}), Tensor());
  BOOST_TEST(slice(packed, time, width, 0, 0, 5) == first, boost::test_tools::per_element());
  BOOST_TEST(slice(packed, time, width, 0, 5, 7) == second, boost::test_tools::per_element());
  backend->rope_backward(view(packed, {batch, time, heads, head_dim}), view(inv_freq, {4}), view(positions, {time}));
  check_close(packed, x, 1e-6, 1e-6, "rope_backward undoes packed rope_forward");
}

BOOST_AUTO_TEST_CASE(positions_that_break_the_rule_are_refused) {
  auto backend = make_cpu_backend();
  std::vector<float> x(2 * 3 * 1 * 4), inv_freq = {1.0f, 0.5f}, lse(2 * 3);
  // rope reads each position alone (absolute positions: a KV-cached generation step starts past 0,
  // backend.h), so only a negative one is refused there; the packed-rows rule is attention's.
  std::vector<int32_t> negative = {0, 1, 2, 0, -1, 2};
  zt::test::check_error_mentions(
      [&] { backend->rope_forward(view(x, {2, 3, 1, 4}), view(inv_freq, {2}), view(negative, {6})); },
      {"rope_forward", "positions must be >= 0", "-1"});
  std::vector<int32_t> skips = {0, 2, 3, 0, 1, 2};
  zt::test::check_error_mentions(
      [&] {
        backend->attention_forward(view(x, {2, 3, 1, 4}), view(lse, {2, 1, 3}), view(x, {2, 3, 1, 4}), view(x, {2, 3, 1, 4}),
                                   view(x, {2, 3, 1, 4}), view(skips, {6}), 0.5f);
      },
      {"attention_forward", "positions[0, 1] = 2", "must be 0"});
  std::vector<int32_t> late_start = {0, 1, 2, 1, 2, 3};
  zt::test::check_error_mentions(
      [&] {
        backend->attention_forward(view(x, {2, 3, 1, 4}), view(lse, {2, 1, 3}), view(x, {2, 3, 1, 4}), view(x, {2, 3, 1, 4}),
                                   view(x, {2, 3, 1, 4}), view(late_start, {6}), 0.5f);
      },
      {"attention_forward", "positions[1, 0] = 1", "a row starts a sample"});
  std::vector<int32_t> short_positions = {0, 1, 2};
  zt::test::check_error_mentions(
      [&] { backend->rope_forward(view(x, {2, 3, 1, 4}), view(inv_freq, {2}), view(short_positions, {3})); },
      {"rope_forward", "positions", "B*T"});
}

BOOST_AUTO_TEST_CASE(every_family_packed_equals_unpacked) {
  zt::test::TempDir dir;
  const TokenDataset dataset = write_dataset(dir);
  const std::vector<int64_t> indices = {0, 1, 2, 3, 4, 5};
  for (const std::string name : {"llama", "llama_checkpointing", "mistral", "qwen2", "opt", "opt_350m"}) {
    const ModelConfig config = family_config(name);
    auto backend = make_cpu_backend();
    const std::vector<ParamSpec> specs = model_param_specs(config);
    ParamStore store(*backend, specs, std::vector<bool>(specs.size(), true));
    randomise(store, 7);
    ModelOptions options;
    options.activation_checkpointing = name == "llama_checkpointing";
    std::unique_ptr<CausalLM> model = make_causal_lm(config, store, *backend, options);
    MicroBatch unpacked = make_micro_batch(dataset, indices, 0);
    MicroBatch packed = make_packed_micro_batch(dataset, indices, 0, 16);
    BOOST_REQUIRE(packed.batch < unpacked.batch);
    const StepResult expected = run_step(*model, store, *backend, unpacked);
    const StepResult actual = run_step(*model, store, *backend, packed);
    BOOST_TEST(std::isfinite(expected.loss_sum));
    BOOST_TEST(std::fabs(actual.loss_sum - expected.loss_sum) <= 1e-5 * std::fabs(expected.loss_sum),
               name << ": packed loss sum " << actual.loss_sum << " vs unpacked " << expected.loss_sum);
    BOOST_REQUIRE(actual.grads.size() == expected.grads.size());
    // Bounds relative to each tensor's largest gradient, with a floor of 1e-6 of the model's
    // largest (OPT's k_proj.bias gradient is exactly 0 in exact arithmetic: both are rounding noise).
    double model_largest = 0.0;
    for (const auto& [param, grad] : expected.grads)
      for (float g : grad) model_largest = std::max(model_largest, static_cast<double>(std::fabs(g)));
    BOOST_TEST(model_largest > 0.0, name << ": gradients to compare");
    for (const auto& [param, grad] : expected.grads) {
      double largest = 0.0;
      for (float g : grad) largest = std::max(largest, static_cast<double>(std::fabs(g)));
      check_close(actual.grads.at(param), grad, 1e-4, 1e-5 * largest + 1e-6 * model_largest, name + " grad " + param);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
