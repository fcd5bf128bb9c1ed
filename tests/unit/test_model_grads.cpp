// Whole-model checks of the explicit backward: a tiny LLaMA (GQA, 2 layers, padded batch)
// against central finite differences of its loss, for full fine-tuning and for LoRA (incl. the
// frozen base getting no gradient), and activation checkpointing giving identical gradients;
// OPT (pre-LN and the opt-350m shape) with its residual dropout on, whose masks depend only on
// (seed, step, token), so the finite differences see the same ones; DPO's per-row losses, row
// weights and adapters-off forward.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/rng.h"
#include "model/causal_lm.h"
#include "model/lora.h"
#include "model/param_store.h"

using namespace zt;

namespace {

ModelConfig tiny_llama() {
  nlohmann::json json = {{"model_type", "llama"},        {"vocab_size", 32},         {"hidden_size", 16},
                         {"intermediate_size", 24},      {"num_hidden_layers", 2},   {"num_attention_heads", 4},
                         {"num_key_value_heads", 2},     {"rms_norm_eps", 1e-5},     {"rope_theta", 10000.0},
                         {"max_position_embeddings", 64}};
  return parse_model_config(json, "tiny-llama");
}

// OPT with residual dropout 0.1 in training, tied head; `post_ln`: the opt-350m shape (post-LN,
// project_in/out to 8-wide embeddings, LayerNorms without affine parameters, no biases).
ModelConfig tiny_opt(bool post_ln) {
  nlohmann::json json = {{"model_type", "opt"},       {"vocab_size", 32},         {"hidden_size", 16},
                         {"ffn_dim", 24},              {"num_hidden_layers", 2},   {"num_attention_heads", 4},
                         {"max_position_embeddings", 16}, {"dropout", 0.1}};
  if (post_ln) {
    json["do_layer_norm_before"] = false;
    json["word_embed_proj_dim"] = 8;
    json["layer_norm_elementwise_affine"] = false;
    json["enable_bias"] = false;
  }
  return parse_model_config(json, post_ln ? "tiny-opt-350m" : "tiny-opt");
}

// A padded batch of two samples (lengths 6 and 4, T = 6) with some masked targets.
struct TestBatch {
  std::vector<int32_t> input_ids{3, 7, 1, 30, 12, 5, 9, 2, 17, 4, 0, 0};
  std::vector<int32_t> targets{7, 1, 30, 12, 5, 0, 2, 17, 4, 0, 0, 0};
  std::vector<uint8_t> mask{0, 1, 1, 1, 1, 0, 1, 1, 1, 0, 0, 0};
  std::vector<int64_t> row_ids{0, 1, 2, 3, 4, 5, 100, 101, 102, 103, 104, 105};
  BatchTensors tensors() {
    BatchTensors batch;
    batch.batch = 2;
    batch.seq = 6;
    batch.input_ids = Tensor(input_ids.data(), DType::I32, {12});
    batch.targets = Tensor(targets.data(), DType::I32, {12});
    batch.loss_mask = Tensor(mask.data(), DType::U8, {12});
    batch.row_ids = Tensor(row_ids.data(), DType::I64, {12});
    return batch;
  }
  int64_t target_count() const {
    int64_t count = 0;
    for (uint8_t m : mask) count += m;
    return count;
  }
};

// Fills every parameter: norms near 1, everything else small normals (LoRA B nonzero too, so
// LoRA A gets a gradient).
void randomise(ParamStore& store, uint64_t seed) {
  uint32_t stream = 0;
  for (const ParamEntry& entry : store.entries()) {
    float* values = store.param(entry.spec.name).f32();
    RngKey key{seed, rng_stream(RngPurpose::Test, stream++), 0};
    for (int64_t i = 0; i < entry.spec.numel(); ++i) {
      float noise = rng_normal(key, static_cast<uint64_t>(i));
      values[i] = entry.spec.role == ParamRole::NormWeight ? 1.0f + 0.1f * noise : 0.2f * noise;
    }
  }
}

struct Setup {
  ModelConfig config;
  std::unique_ptr<Backend> backend = make_cpu_backend();
  std::vector<ParamSpec> specs;
  std::vector<bool> trainable;
  std::unique_ptr<ParamStore> store;
  std::unique_ptr<CausalLM> model;

  Setup(const LoraConfig& lora, bool checkpointing, float dropout = 0.0f, ModelConfig model_config = tiny_llama(),
        int64_t head_chunk_rows = 0)
      : config(std::move(model_config)) {
    specs = model_param_specs(config);
    trainable.assign(specs.size(), !lora.enabled());
    if (lora.enabled())
      for (ParamSpec& spec : lora_param_specs(specs, lora)) {
        specs.push_back(spec);
        trainable.push_back(true);
      }
    store = std::make_unique<ParamStore>(*backend, specs, trainable);
    randomise(*store, 7);
    ModelOptions options;
    options.activation_checkpointing = checkpointing;
    options.head_chunk_rows = head_chunk_rows;
    if (lora.enabled()) {
      options.lora_scaling = lora_scaling(lora);
      options.lora_dropout = dropout;
    }
    model = make_causal_lm(config, *store, *backend, options);
  }

  // Mean loss over the batch's targets; with_grad also runs backward (grads zeroed first).
  double mean_loss(TestBatch& data, bool with_grad) {
    BatchTensors batch = data.tensors();
    DropoutContext dropout{11, 3, batch.row_ids};
    model->forward(batch, dropout);
    const double count = static_cast<double>(data.target_count());
    if (!with_grad) return model->loss(batch) / count;
    store->zero_grads();
    return model->backward(batch, static_cast<float>(1.0 / count), dropout) / count;
  }
};

// Compares analytic gradients with central differences on a few elements of every trainable
// parameter. fp32 forward passes with h = 1e-2: the loss (~3.5) carries ~1e-6 absolute
// rounding noise, so the difference quotient is good to ~1e-4; the O(h^2) truncation term is
// of the same order for these smooth functions. Hence atol 3e-4 plus 3% relative.
// `step`: OPT's ReLU has kinks that h = 1e-2 crosses for a few elements (its difference quotient
// then misses by ~5%); 3e-3 stays on one side, at ~3e-4 of noise.
void check_gradients(Setup& setup, TestBatch& data, float step = 1e-2f) {
  setup.mean_loss(data, true);
  const float h = step;
  int checked = 0;
  for (const ParamEntry& entry : setup.store->entries()) {
    Tensor grad = setup.store->grad(entry.spec.name);
    if (grad.empty()) continue;
    std::vector<float> analytic(grad.f32(), grad.f32() + grad.numel());
    float* values = setup.store->param(entry.spec.name).f32();
    const int64_t numel = entry.spec.numel();
    for (int64_t probe = 0; probe < 4; ++probe) {
      const int64_t i = (probe * 7919 + 13) % numel;
      const float saved = values[i];
      values[i] = saved + h;
      const double plus = setup.mean_loss(data, false);
      values[i] = saved - h;
      const double minus = setup.mean_loss(data, false);
      values[i] = saved;
      const double numeric = (plus - minus) / (2.0 * h);
      const double error = std::fabs(numeric - analytic[static_cast<size_t>(i)]);
      BOOST_TEST_CONTEXT(entry.spec.name << "[" << i << "] analytic " << analytic[static_cast<size_t>(i)]
                                         << " numeric " << numeric) {
        BOOST_TEST(error <= 3e-4 + 0.03 * std::fabs(numeric));
      }
      ++checked;
    }
  }
  BOOST_TEST(checked > 0);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(model_grads)

BOOST_AUTO_TEST_CASE(full_finetune_matches_finite_differences) {
  Setup setup(LoraConfig{}, false);
  TestBatch data;
  check_gradients(setup, data);
}

BOOST_AUTO_TEST_CASE(lora_matches_finite_differences_and_freezes_base) {
  LoraConfig lora;
  lora.r = 2;
  lora.alpha = 4.0;
  lora.targets = {"all-linear"};
  Setup setup(lora, false);
  TestBatch data;
  check_gradients(setup, data);
  int adapters = 0;
  for (const ParamEntry& entry : setup.store->entries()) {
    const bool is_adapter = entry.spec.name.find(".lora_") != std::string::npos;
    BOOST_TEST(setup.store->trainable(entry.spec.name) == is_adapter, entry.spec.name);
    adapters += is_adapter;
  }
  BOOST_TEST(adapters == 2 * 2 * 7);  // A and B for 7 linears in 2 layers
}

BOOST_AUTO_TEST_CASE(rslora_and_dropout_match_finite_differences) {
  LoraConfig lora;
  lora.r = 4;
  lora.alpha = 8.0;
  lora.rslora = true;
  lora.targets = {"q_proj", "v_proj", "down_proj"};
  Setup setup(lora, false, 0.25f);  // the mask depends only on (seed, step, row id): FD sees the same one
  TestBatch data;
  check_gradients(setup, data);
}

BOOST_AUTO_TEST_CASE(opt_with_residual_dropout_matches_finite_differences) {
  for (bool post_ln : {false, true}) {
    BOOST_TEST_CONTEXT(tiny_opt(post_ln).path) {
      Setup setup(LoraConfig{}, false, 0.0f, tiny_opt(post_ln));
      TestBatch data;
      check_gradients(setup, data, 3e-3f);
      // Dropout acts in training and not in evaluation.
      BatchTensors batch = data.tensors();
      DropoutContext off{11, 3, batch.row_ids, false};
      setup.model->forward(batch, off);
      const double evaluated = setup.model->loss(batch);
      BOOST_TEST(std::fabs(evaluated / static_cast<double>(data.target_count()) - setup.mean_loss(data, false)) > 1e-6);
    }
  }
}

BOOST_AUTO_TEST_CASE(activation_checkpointing_gives_identical_gradients) {
  LoraConfig lora;
  lora.r = 2;
  lora.alpha = 4.0;
  lora.targets = {"all-linear"};
  for (bool use_lora : {false, true}) {
    Setup plain(use_lora ? lora : LoraConfig{}, false, use_lora ? 0.1f : 0.0f);
    Setup recomputed(use_lora ? lora : LoraConfig{}, true, use_lora ? 0.1f : 0.0f);
    TestBatch data;
    const double loss_plain = plain.mean_loss(data, true);
    const double loss_recomputed = recomputed.mean_loss(data, true);
    BOOST_TEST(loss_plain == loss_recomputed);
    for (const ParamEntry& entry : plain.store->entries()) {
      Tensor a = plain.store->grad(entry.spec.name), b = recomputed.store->grad(entry.spec.name);
      if (a.empty()) continue;
      for (int64_t i = 0; i < a.numel(); ++i)
        BOOST_REQUIRE_MESSAGE(a.f32()[i] == b.f32()[i], entry.spec.name << "[" << i << "]");
    }
  }
}

// DPO's model operations (train/dpo_objective.cpp): per-row loss sums, a backward with per-row
// weights on the token losses, and a forward with the adapters disabled (= the base model). Head
// chunks of 4 rows straddle the batch rows (T = 6), so a row's losses come from two chunks.
BOOST_AUTO_TEST_CASE(row_losses_row_weights_and_disabled_adapters) {
  LoraConfig lora;
  lora.r = 2;
  lora.alpha = 4.0;
  lora.targets = {"q_proj", "v_proj"};
  Setup setup(lora, false, 0.0f, tiny_llama(), 4);
  TestBatch data;
  BatchTensors batch = data.tensors();
  DropoutContext dropout{11, 3, batch.row_ids};
  setup.model->forward(batch, dropout);
  const std::vector<double> rows = setup.model->row_losses(batch);
  BOOST_REQUIRE(rows.size() == 2u);
  BOOST_TEST(rows[0] + rows[1] == setup.model->loss(batch), boost::test_tools::tolerance(1e-12));
  // The gradient of w0 * L0 + w1 * L1 is w0 * grad(L0) + w1 * grad(L1), each from its own backward.
  const auto gradients = [&](std::vector<float> weights) {
    setup.store->zero_grads();
    setup.model->forward(batch, dropout);
    if (!weights.empty()) setup.model->weight_rows_once(std::move(weights));
    setup.model->backward(batch, 0.5f, dropout);
    std::vector<float> all;
    for (const ParamEntry& entry : setup.store->entries()) {
      Tensor grad = setup.store->grad(entry.spec.name);
      if (!grad.empty()) all.insert(all.end(), grad.f32(), grad.f32() + grad.numel());
    }
    return all;
  };
  const std::vector<float> first = gradients({1.0f, 0.0f}), second = gradients({0.0f, 1.0f});
  const std::vector<float> weighted = gradients({2.0f, -0.5f}), unweighted = gradients({});
  BOOST_REQUIRE(weighted.size() == first.size());
  float largest = 0.0f;
  for (size_t i = 0; i < weighted.size(); ++i) {
    largest = std::max(largest, std::fabs(first[i]));
    BOOST_TEST(weighted[i] == 2.0f * first[i] - 0.5f * second[i], boost::test_tools::tolerance(1e-4f));
    BOOST_TEST(unweighted[i] == first[i] + second[i], boost::test_tools::tolerance(1e-4f));
  }
  BOOST_TEST(largest > 1e-3f);  // the rows' gradients are not all zero
  BOOST_TEST(gradients({}) == unweighted);  // the weights served one backward only
  // Adapters off: exactly the base model (the same base weights: randomise draws them first).
  Setup base(LoraConfig{}, false, 0.0f, tiny_llama(), 4);
  base.model->forward(batch, dropout);
  const std::vector<double> base_rows = base.model->row_losses(batch);
  DropoutContext no_adapters = dropout;
  no_adapters.adapters = false;
  setup.model->forward(batch, no_adapters);
  BOOST_TEST(setup.model->row_losses(batch) == base_rows);
  BOOST_TEST(std::fabs(rows[0] - base_rows[0]) > 1e-4);  // with the adapters on, another model
}

// DPO's frozen reference under full fine-tuning (train/frozen_reference.h) runs a forward-only
// model: the same per-row losses as the trained model over the same weights, with two residual
// buffers (head chunks straddling rows as above); its backward is an error. DPO queues the
// reference's row losses, runs the policy's forward, then reads both: a queued result reads what
// row_losses gives, two can be in flight, and one read after two more were queued (its host slot
// written again) is an error naming why.
BOOST_AUTO_TEST_CASE(forward_only_model_gives_the_same_row_losses) {
  Setup setup(LoraConfig{}, false, 0.0f, tiny_llama(), 4);
  ModelOptions options;
  options.head_chunk_rows = 4;
  options.forward_only = true;
  std::unique_ptr<CausalLM> forward_only = make_causal_lm(setup.config, *setup.store, *setup.backend, options);
  TestBatch data;
  BatchTensors batch = data.tensors();
  DropoutContext dropout{11, 3, batch.row_ids};
  dropout.training = false;
  setup.model->forward(batch, dropout);
  const std::vector<double> rows = setup.model->row_losses(batch);
  forward_only->forward(batch, dropout);
  BOOST_TEST(forward_only->row_losses(batch) == rows);
  BOOST_TEST(rows[0] > 0.0);
  BOOST_CHECK_EXCEPTION(forward_only->backward(batch, 1.0f, dropout), Error, [](const Error& error) {
    return std::string(error.what()).find("forward-only") != std::string::npos;
  });

  CausalLM::QueuedRowLosses first = forward_only->queue_row_losses(batch);
  CausalLM::QueuedRowLosses second = forward_only->queue_row_losses(batch);
  BOOST_TEST(second.read() == rows);
  BOOST_TEST(first.read() == rows);
  CausalLM::QueuedRowLosses stale = forward_only->queue_row_losses(batch);
  (void)forward_only->queue_row_losses(batch);
  (void)forward_only->queue_row_losses(batch);  // stale's slot again
  BOOST_CHECK_EXCEPTION(stale.read(), Error, [](const Error& error) {
    return std::string(error.what()).find("read after two more were queued") != std::string::npos;
  });
}

BOOST_AUTO_TEST_CASE(lora_target_that_matches_nothing_is_an_error) {
  LoraConfig lora;
  lora.r = 2;
  lora.targets = {"foo_proj"};
  std::vector<ParamSpec> specs = model_param_specs(tiny_llama());
  BOOST_CHECK_EXCEPTION(lora_param_specs(specs, lora), Error, [](const Error& error) {
    return std::string(error.what()).find("foo_proj") != std::string::npos;
  });
}

BOOST_AUTO_TEST_SUITE_END()
