// Tests of the chunked LM head + cross-entropy (ModelOptions::head_chunk_rows, issue 18): the
// head and the loss run over chunks of rows so that the [N, V] logits never exist whole. For an
// untied LLaMA, a tied Qwen2 and the opt-350m shape (project_out before the head, tied), chunks
// of 3 rows (the last one shorter) and the automatic size give the loss sum, every gradient,
// the evaluation loss and the kept logits (--dump-step0) of one chunk over all rows (the
// unchunked computation), within float summation order; and the chunk buffer is what the
// backend allocates, not [N, V].
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "backend/counting_backend.h"
#include "core/rng.h"
#include "model/causal_lm.h"
#include "model/param_spec.h"
#include "model/param_store.h"
#include "test_helpers.h"

using namespace zt;
using zt::test::check_close;

namespace {

ModelConfig family_config(const std::string& name) {
  nlohmann::json json = {{"vocab_size", 64}, {"hidden_size", 16}, {"num_hidden_layers", 2},
                         {"num_attention_heads", 4}, {"max_position_embeddings", 32}};
  if (name == "llama") {
    json.update({{"model_type", "llama"}, {"intermediate_size", 24}, {"num_key_value_heads", 2}});
  } else if (name == "qwen2") {
    json.update({{"model_type", "qwen2"}, {"intermediate_size", 24}, {"num_key_value_heads", 1},
                 {"tie_word_embeddings", true}});
  } else {  // opt_350m: project_out to 8-wide embeddings before the (tied) head
    json.update({{"model_type", "opt"}, {"ffn_dim", 24}, {"dropout", 0.1}, {"do_layer_norm_before", false},
                 {"word_embed_proj_dim", 8}, {"enable_bias", false}});
  }
  return parse_model_config(json, "tiny-" + name);
}

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

// Two rows of 7 tokens, the second padded after 5, some targets masked (N = 14 rows).
struct TestBatch {
  std::vector<int32_t> input_ids{3, 7, 1, 30, 12, 5, 60, 9, 2, 17, 4, 44, 0, 0};
  std::vector<int32_t> targets{7, 1, 30, 12, 5, 60, 0, 2, 17, 4, 44, 0, 0, 0};
  std::vector<uint8_t> mask{0, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 0, 0, 0};
  std::vector<int64_t> row_ids{0, 1, 2, 3, 4, 5, 6, 100, 101, 102, 103, 104, 105, 106};
  BatchTensors tensors() {
    BatchTensors batch;
    batch.batch = 2;
    batch.seq = 7;
    batch.input_ids = Tensor(input_ids.data(), DType::I32, {14});
    batch.targets = Tensor(targets.data(), DType::I32, {14});
    batch.loss_mask = Tensor(mask.data(), DType::U8, {14});
    batch.row_ids = Tensor(row_ids.data(), DType::I64, {14});
    return batch;
  }
};

struct Outcome {
  double loss_sum = 0.0, evaluated = 0.0;
  std::vector<float> logits;
  std::map<std::string, std::vector<float>> grads;
};

Outcome run(const ModelConfig& config, ParamStore& store, Backend& backend, int64_t chunk_rows) {
  ModelOptions options;
  options.head_chunk_rows = chunk_rows;
  std::unique_ptr<CausalLM> model = make_causal_lm(config, store, backend, options);
  TestBatch data;
  BatchTensors batch = data.tensors();
  DropoutContext dropout{11, 3, batch.row_ids};
  Outcome outcome;
  model->keep_logits(true);
  Tensor logits = model->forward(batch, dropout);
  BOOST_REQUIRE(!logits.empty());
  outcome.logits.assign(logits.f32(), logits.f32() + logits.numel());
  outcome.evaluated = model->loss(batch);
  store.zero_grads();
  outcome.loss_sum = model->backward(batch, 1.0f / 9.0f, dropout);
  for (const ParamEntry& entry : store.entries()) {
    Tensor grad = store.grad(entry.spec.name);
    if (!grad.empty()) outcome.grads[entry.spec.name].assign(grad.f32(), grad.f32() + grad.numel());
  }
  model->keep_logits(false);
  BOOST_TEST(model->forward(batch, dropout).empty(), "no whole logits unless asked for");
  return outcome;
}

// The device bytes a forward + backward of `batch` allocates beyond the parameters, counted by
// the counting backend (no math runs).
int64_t counted_step_peak(const ModelConfig& config, const ModelOptions& options, const BatchTensors& batch) {
  std::unique_ptr<CountingBackend> counting = make_counting_backend(CountingOptions{});
  const std::vector<ParamSpec> specs = model_param_specs(config);
  ParamStore store(*counting, specs, std::vector<bool>(specs.size(), true));
  std::unique_ptr<CausalLM> model = make_causal_lm(config, store, *counting, options);
  DropoutContext dropout{11, 3, batch.row_ids};
  counting->reset_peaks();
  const int64_t before = counting->counted().device;
  model->forward(batch, dropout);
  model->backward(batch, 1.0f, dropout);
  return counting->counted().device_peak - before;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(head_chunks)

BOOST_AUTO_TEST_CASE(chunked_head_equals_one_chunk) {
  for (const std::string name : {"llama", "qwen2", "opt_350m"}) {
    const ModelConfig config = family_config(name);
    auto backend = make_cpu_backend();
    const std::vector<ParamSpec> specs = model_param_specs(config);
    ParamStore store(*backend, specs, std::vector<bool>(specs.size(), true));
    randomise(store, 5);
    const Outcome whole = run(config, store, *backend, 1000);
    BOOST_TEST(std::isfinite(whole.loss_sum));
    BOOST_TEST(std::fabs(whole.evaluated - whole.loss_sum) <= 1e-6 * whole.loss_sum, name << ": loss() = backward's sum");
    for (int64_t chunk_rows : {int64_t{3}, int64_t{0}}) {
      const std::string what = name + " chunks of " + (chunk_rows ? std::to_string(chunk_rows) : std::string("auto"));
      const Outcome chunked = run(config, store, *backend, chunk_rows);
      BOOST_TEST(std::fabs(chunked.loss_sum - whole.loss_sum) <= 1e-6 * whole.loss_sum, what << ": loss sum");
      BOOST_TEST(std::fabs(chunked.evaluated - whole.evaluated) <= 1e-6 * whole.evaluated, what << ": evaluation loss");
      check_close(chunked.logits, whole.logits, 1e-6, 1e-6, what + " kept logits");
      for (const auto& [param, grad] : whole.grads) {
        double largest = 0.0;
        for (float g : grad) largest = std::max(largest, static_cast<double>(std::fabs(g)));
        check_close(chunked.grads.at(param), grad, 1e-5, 1e-6 * largest + 1e-9, what + " grad " + param);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(only_a_chunk_of_logits_is_allocated) {
  // The largest allocation of a step with a wide vocabulary is a chunk's [rows, V], not [N, V].
  nlohmann::json json = {{"model_type", "llama"}, {"vocab_size", 4096}, {"hidden_size", 16}, {"intermediate_size", 24},
                         {"num_hidden_layers", 1}, {"num_attention_heads", 4}, {"max_position_embeddings", 32}};
  const ModelConfig config = parse_model_config(json, "wide-vocab");
  for (int64_t chunk_rows : {int64_t{1000}, int64_t{2}}) {
    ModelOptions options;
    options.head_chunk_rows = chunk_rows;
    TestBatch data;
    const int64_t step_peak = counted_step_peak(config, options, data.tensors());
    const int64_t rows = std::min<int64_t>(chunk_rows, 14), logits_bytes = rows * 4096 * 4;
    BOOST_TEST_MESSAGE("chunk rows " << rows << ": step peak " << step_peak << " bytes");
    BOOST_TEST(step_peak >= logits_bytes);
    BOOST_TEST(step_peak < logits_bytes + 14 * 4096 * 4 / 2, "no other [N, V] buffer (step peak " << step_peak << ")");
  }
}

BOOST_AUTO_TEST_CASE(automatic_chunks_are_at_least_256_rows_deep) {
  // Liger's rule alone, ceil(N / ceil(V / E)), gives this wide-vocabulary, narrow model 2-row
  // chunks of its 512 rows; each would add a 2-deep GEMM into the head's whole [V, E] weight
  // gradient. The automatic chunk is kMinHeadChunkRows (256) rows: two chunks, not one and not 256.
  nlohmann::json json = {{"model_type", "llama"}, {"vocab_size", 4096}, {"hidden_size", 16}, {"intermediate_size", 24},
                         {"num_hidden_layers", 1}, {"num_attention_heads", 4}, {"max_position_embeddings", 512}};
  const ModelConfig config = parse_model_config(json, "wide-vocab");
  const int64_t n = 512;
  std::vector<int32_t> ids(n), targets(n);
  std::vector<uint8_t> mask(n, 1);
  std::vector<int64_t> row_ids(n);
  for (int64_t i = 0; i < n; ++i) {
    ids[static_cast<size_t>(i)] = static_cast<int32_t>(i % 4096);
    targets[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7 + 1) % 4096);
    row_ids[static_cast<size_t>(i)] = i;
  }
  BatchTensors batch;
  batch.batch = 1;
  batch.seq = n;
  batch.input_ids = Tensor(ids.data(), DType::I32, {n});
  batch.targets = Tensor(targets.data(), DType::I32, {n});
  batch.loss_mask = Tensor(mask.data(), DType::U8, {n});
  batch.row_ids = Tensor(row_ids.data(), DType::I64, {n});
  const int64_t step_peak = counted_step_peak(config, ModelOptions{}, batch);
  const int64_t chunk_bytes = kMinHeadChunkRows * 4096 * 4, whole_bytes = n * 4096 * 4;
  BOOST_TEST_MESSAGE("automatic chunk: step peak " << step_peak << " bytes");
  BOOST_TEST(step_peak >= chunk_bytes, "a chunk of 256 rows' logits (step peak " << step_peak << ")");
  BOOST_TEST(step_peak < whole_bytes, "not the whole [N, V] logits (step peak " << step_peak << ")");
}

BOOST_AUTO_TEST_SUITE_END()
