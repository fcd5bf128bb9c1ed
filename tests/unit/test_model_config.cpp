// Tests of config.json parsing (model/config.h): transformers' LlamaConfig defaults, GQA,
// head_dim, rope scaling, and that every bad input gets an error naming the file and the key.
#include <boost/test/unit_test.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/config.h"
#include "model/llama.h"
#include <cmath>
#include "test_util.h"

namespace {

namespace fs = std::filesystem;

// A fresh directory under the system temp dir, removed with everything in it at the end.
using zt::test::TempDir;

std::string write_config(const TempDir& dir, const std::string& text, const std::string& name = "config.json") {
  const std::string file = (dir.path / name).string();
  std::ofstream(file) << text;
  return file;
}

// The message of the zt::Error that loading `text` throws; fails the test if none is thrown.
std::string load_error(const std::string& text, std::string& file) {
  TempDir dir;
  file = write_config(dir, text);
  try {
    zt::load_model_config(file);
  } catch (const zt::Error& error) {
    return error.what();
  }
  BOOST_ERROR("no error for config " << text);
  return "";
}

// Loading `text` fails with a message that names the file and contains every one of `parts`.
void check_config_error(const std::string& text, const std::vector<std::string>& parts) {
  std::string file;
  const std::string message = load_error(text, file);
  BOOST_TEST_CONTEXT("config " << text << "\nmessage: " << message) {
    BOOST_TEST(message.find(file) != std::string::npos);
    for (const std::string& part : parts) BOOST_TEST(message.find(part) != std::string::npos, "missing: " << part);
  }
}

const char* kTinyLlama = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "transformers_version": "4.40.2",
  "torch_dtype": "float32", "use_cache": true, "_name_or_path": "tiny", "some_future_key": {"x": 1},
  "vocab_size": 128, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
  "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256,
  "rms_norm_eps": 1e-5, "rope_theta": 500000, "rope_scaling": null, "pretraining_tp": 1,
  "attention_dropout": 0.0, "attention_bias": false, "hidden_act": "silu", "tie_word_embeddings": false,
  "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "initializer_range": 0.01})";

}  // namespace

BOOST_AUTO_TEST_SUITE(model_config)

BOOST_AUTO_TEST_CASE(llama_defaults_are_transformers_defaults) {
  zt::ModelConfig c = zt::parse_model_config({{"model_type", "llama"}}, "defaults.json");
  BOOST_TEST(c.path == "defaults.json");
  BOOST_TEST(c.model_type == "llama");
  BOOST_TEST(c.vocab_size == 32000);
  BOOST_TEST(c.hidden_size == 4096);
  BOOST_TEST(c.intermediate_size == 11008);
  BOOST_TEST(c.num_hidden_layers == 32);
  BOOST_TEST(c.num_attention_heads == 32);
  BOOST_TEST(c.num_key_value_heads == 32);
  BOOST_TEST(c.head_dim == 128);
  BOOST_TEST(c.max_position_embeddings == 2048);
  BOOST_TEST(c.norm_eps == 1e-6);
  BOOST_TEST(c.rope_theta == 10000.0);
  BOOST_TEST(c.rope_scaling.type == "default");
  BOOST_TEST(c.hidden_act == "silu");
  BOOST_TEST(!c.tie_word_embeddings);
  BOOST_TEST(!c.qkv_bias);
  BOOST_TEST(!c.o_bias);
  BOOST_TEST(!c.mlp_bias);
  BOOST_TEST(c.bos_token_id.value() == 1);
  BOOST_TEST(c.eos_token_id.value() == 2);
  BOOST_TEST(!c.pad_token_id.has_value());
  BOOST_TEST(c.initializer_range == 0.02);
}

BOOST_AUTO_TEST_CASE(tiny_gqa_config_with_extra_keys_loads_from_file_and_directory) {
  TempDir dir;
  const std::string file = write_config(dir, kTinyLlama);
  for (const std::string& path : {file, dir.path.string()}) {
    zt::ModelConfig c = zt::load_model_config(path);
    BOOST_TEST(c.path == file);
    BOOST_TEST(c.vocab_size == 128);
    BOOST_TEST(c.hidden_size == 64);
    BOOST_TEST(c.intermediate_size == 96);
    BOOST_TEST(c.num_hidden_layers == 2);
    BOOST_TEST(c.num_attention_heads == 4);
    BOOST_TEST(c.num_key_value_heads == 2);
    BOOST_TEST(c.head_dim == 16);
    BOOST_TEST(c.max_position_embeddings == 256);
    BOOST_TEST(c.norm_eps == 1e-5);
    BOOST_TEST(c.rope_theta == 500000.0);
    BOOST_TEST(c.pad_token_id.value() == 0);
    BOOST_TEST(c.initializer_range == 0.01);
    BOOST_TEST(c.raw == nlohmann::json::parse(kTinyLlama));
  }
}

BOOST_AUTO_TEST_CASE(head_dim_key_overrides_hidden_over_heads) {
  zt::ModelConfig c = zt::parse_model_config(
      {{"model_type", "llama"}, {"hidden_size", 60}, {"num_attention_heads", 8}, {"head_dim", 16}}, "x.json");
  BOOST_TEST(c.head_dim == 16);
  zt::ModelConfig null_head_dim = zt::parse_model_config(
      {{"model_type", "llama"}, {"hidden_size", 64}, {"num_attention_heads", 8}, {"head_dim", nullptr}}, "x.json");
  BOOST_TEST(null_head_dim.head_dim == 8);
}

BOOST_AUTO_TEST_CASE(rope_scaling_linear_and_default) {
  auto factor = [](const nlohmann::json& scaling) {
    return zt::parse_model_config({{"model_type", "llama"}, {"rope_scaling", scaling}}, "x.json").rope_scaling.factor;
  };
  BOOST_TEST(factor({{"type", "linear"}, {"factor", 2.0}}) == 2.0);
  BOOST_TEST(factor({{"rope_type", "linear"}, {"factor", 4}}) == 4.0);
  BOOST_TEST(factor({{"rope_type", "default"}}) == 1.0);
  BOOST_TEST(factor(nullptr) == 1.0);
}

BOOST_AUTO_TEST_CASE(rope_scaling_llama3_frequencies) {
  // Llama 3.1's rope_scaling; the frequencies against transformers' _compute_llama3_parameters
  // worked by hand for D = 128, theta 500000: wavelengths above 8192 / 1 are divided by 8, below
  // 8192 / 4 kept, in between interpolated.
  zt::ModelConfig c = zt::parse_model_config(
      {{"model_type", "llama"}, {"hidden_size", 4096}, {"num_attention_heads", 32}, {"rope_theta", 500000.0},
       {"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                         {"original_max_position_embeddings", 8192}}}},
      "x.json");
  BOOST_TEST(c.rope_scaling.type == "llama3");
  const std::vector<float> scaled = zt::rope_inv_freq(c);
  c.rope_scaling = zt::RopeScaling{};
  const std::vector<float> plain = zt::rope_inv_freq(c);
  BOOST_REQUIRE(scaled.size() == 64u);
  int kept = 0, divided = 0, smoothed = 0;
  for (size_t i = 0; i < plain.size(); ++i) {
    const double wavelen = 2.0 * M_PI / plain[i];
    if (wavelen < 2048.0) {
      BOOST_TEST(scaled[i] == plain[i]);
      ++kept;
    } else if (wavelen > 8192.0) {
      BOOST_TEST(scaled[i] == plain[i] / 8.0f);
      ++divided;
    } else {
      const double smooth = (8192.0 / wavelen - 1.0) / 3.0;
      const double expected = (1.0 - smooth) * plain[i] / 8.0 + smooth * plain[i];
      BOOST_TEST(std::abs(scaled[i] - expected) <= 1e-6 * expected);
      ++smoothed;
    }
  }
  BOOST_TEST(kept > 0);
  BOOST_TEST(divided > 0);
  BOOST_TEST(smoothed > 0);
}

BOOST_AUTO_TEST_CASE(family_defaults_and_keys) {
  // MistralConfig: GQA with 8 kv heads, a 4096-token window unless null.
  zt::ModelConfig mistral = zt::parse_model_config({{"model_type", "mistral"}}, "x.json");
  BOOST_TEST(mistral.num_key_value_heads == 8);
  BOOST_TEST(mistral.intermediate_size == 14336);
  BOOST_TEST(mistral.sliding_window == 4096);
  BOOST_TEST(!mistral.qkv_bias);
  BOOST_TEST(zt::parse_model_config({{"model_type", "mistral"}, {"sliding_window", nullptr}}, "x.json").sliding_window == 0);
  // Qwen2Config: q/k/v biases only, a window only with use_sliding_window.
  zt::ModelConfig qwen2 = zt::parse_model_config({{"model_type", "qwen2"}, {"tie_word_embeddings", true}}, "x.json");
  BOOST_TEST(qwen2.qkv_bias);
  BOOST_TEST(!qwen2.o_bias);
  BOOST_TEST(!qwen2.mlp_bias);
  BOOST_TEST(qwen2.sliding_window == 0);
  BOOST_TEST(qwen2.tie_word_embeddings);
  BOOST_TEST(qwen2.vocab_size == 151936);
  BOOST_TEST(zt::parse_model_config({{"model_type", "qwen2"}, {"use_sliding_window", true}, {"sliding_window", 64}}, "x.json")
                 .sliding_window == 64);
  // OPTConfig: learned positions (offset 2), LayerNorm 1e-5, ReLU, biases, tied head, dropout 0.1.
  zt::ModelConfig opt = zt::parse_model_config({{"model_type", "opt"}}, "x.json");
  BOOST_TEST(opt.hidden_size == 768);
  BOOST_TEST(opt.intermediate_size == 3072);
  BOOST_TEST(opt.num_key_value_heads == 12);
  BOOST_TEST((opt.positions == zt::PositionKind::Learned));
  BOOST_TEST(opt.position_offset == 2);
  BOOST_TEST((opt.norm == zt::NormKind::LayerNorm));
  BOOST_TEST(opt.norm_eps == 1e-5);
  BOOST_TEST(opt.hidden_act == "relu");
  BOOST_TEST(opt.tie_word_embeddings);
  BOOST_TEST(opt.qkv_bias);
  BOOST_TEST(opt.mlp_bias);
  BOOST_TEST(opt.pre_norm);
  BOOST_TEST(opt.final_norm);
  BOOST_TEST(!opt.projects_embeddings());
  BOOST_TEST(opt.residual_dropout == 0.1);
  BOOST_TEST(opt.pad_token_id.value() == 1);
  BOOST_TEST(opt.bos_token_id.value() == 2);
  // opt-350m: post-LN (no final LayerNorm), 512-wide embeddings projected in and out.
  zt::ModelConfig opt350 = zt::parse_model_config(
      {{"model_type", "opt"}, {"hidden_size", 1024}, {"num_attention_heads", 16}, {"word_embed_proj_dim", 512},
       {"do_layer_norm_before", false}, {"enable_bias", false}, {"layer_norm_elementwise_affine", false}},
      "x.json");
  BOOST_TEST(!opt350.pre_norm);
  BOOST_TEST(!opt350.final_norm);
  BOOST_TEST(opt350.projects_embeddings());
  BOOST_TEST(opt350.embed_dim() == 512);
  BOOST_TEST(!opt350.qkv_bias);
  BOOST_TEST(!opt350.norm_affine);
}

BOOST_AUTO_TEST_CASE(sequence_length_limits) {
  zt::ModelConfig mistral = zt::parse_model_config({{"model_type", "mistral"}, {"sliding_window", 64}}, "m.json");
  zt::check_sequence_length(mistral, 64, "data");
  zt::test::check_error_mentions([&] { zt::check_sequence_length(mistral, 65, "data/dir"); },
                    {"data/dir", "65", "m.json", "sliding_window = 64", "--max-seq-len 64"});
  zt::ModelConfig opt = zt::parse_model_config({{"model_type", "opt"}, {"max_position_embeddings", 32}}, "o.json");
  zt::check_sequence_length(opt, 32, "data");
  zt::test::check_error_mentions([&] { zt::check_sequence_length(opt, 33, "data/dir"); }, {"33", "max_position_embeddings = 32"});
}

BOOST_AUTO_TEST_CASE(accepted_variants) {
  auto parse = [](const nlohmann::json& extra) {
    nlohmann::json j = {{"model_type", "llama"}};
    j.update(extra);
    return zt::parse_model_config(j, "x.json");
  };
  BOOST_TEST(parse({{"hidden_act", "swish"}}).hidden_act == "silu");  // transformers: the same SiLU
  BOOST_TEST(parse({{"pretraining_tp", 2}}).hidden_size == 4096);      // same math, sliced
  BOOST_TEST(parse({{"num_key_value_heads", nullptr}}).num_key_value_heads == 32);
  BOOST_TEST(parse({{"tie_word_embeddings", true}}).tie_word_embeddings);
  BOOST_TEST(parse({{"mlp_bias", true}, {"attention_bias", true}}).mlp_bias);
  BOOST_TEST(parse({{"attention_bias", true}}).o_bias);
  zt::ModelConfig llama3 = parse({{"eos_token_id", {128001, 128009}}, {"pad_token_id", nullptr}});
  BOOST_TEST(llama3.eos_token_id.value() == 128001);
  BOOST_TEST(llama3.eos_token_ids == (std::vector<int64_t>{128001, 128009}));
  BOOST_TEST(!llama3.pad_token_id.has_value());
}

BOOST_AUTO_TEST_CASE(bad_values_name_file_key_and_value) {
  // {extra keys on top of a valid config, the parts the message must contain}
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {R"({"vocab_size": 10})", {"model_type", "missing", "llama"}},
      {R"({"model_type": "gpt2"})", {"model_type", "gpt2", "supported: llama, mistral, qwen2, opt"}},
      {R"({"model_type": 7})", {"model_type", "7"}},
      {R"({"model_type": "llama", "hidden_act": "gelu"})", {"hidden_act", "gelu"}},
      {R"({"model_type": "llama", "rope_scaling": {"type": "dynamic", "factor": 2.0}})", {"rope_scaling", "dynamic"}},
      {R"({"model_type": "llama", "rope_scaling": {"rope_type": "yarn", "factor": 4.0}})", {"rope_scaling", "yarn"}},
      {R"({"model_type": "llama", "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0}})",
       {"rope_scaling", "llama3", "high_freq_factor"}},
      {R"({"model_type": "llama", "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0,
           "high_freq_factor": 1.0, "original_max_position_embeddings": 8192}})", {"rope_scaling", "high_freq_factor > low_freq_factor"}},
      {R"({"model_type": "mistral", "hidden_act": "gelu"})", {"hidden_act", "gelu", "mistral"}},
      {R"({"model_type": "mistral", "sliding_window": 0})", {"sliding_window", "positive"}},
      {R"({"model_type": "qwen2", "attention_dropout": 0.1})", {"attention_dropout"}},
      {R"({"model_type": "opt", "activation_function": "gelu"})", {"activation_function", "gelu", "relu"}},
      {R"({"model_type": "opt", "attention_dropout": 0.1})", {"attention_dropout", "0.1"}},
      {R"({"model_type": "opt", "activation_dropout": 0.1})", {"activation_dropout"}},
      {R"({"model_type": "opt", "layerdrop": 0.2})", {"layerdrop"}},
      {R"({"model_type": "opt", "dropout": 1.0})", {"dropout", "[0, 1)"}},
      {R"({"model_type": "opt", "hidden_size": 100, "num_attention_heads": 12})", {"num_attention_heads", "hidden_size = 100"}},
      {R"({"model_type": "opt", "enable_bias": "yes"})", {"enable_bias"}},
      {R"({"model_type": "opt", "word_embed_proj_dim": 0})", {"word_embed_proj_dim"}},
      {R"({"model_type": "llama", "rope_scaling": {"type": "linear", "factor": 0}})", {"rope_scaling", "factor"}},
      {R"({"model_type": "llama", "rope_scaling": {"type": "linear"}})", {"rope_scaling", "factor"}},
      {R"({"model_type": "llama", "rope_scaling": {"factor": 2.0}})", {"rope_scaling", "type"}},
      {R"({"model_type": "llama", "rope_scaling": "linear"})", {"rope_scaling", "linear"}},
      {R"({"model_type": "llama", "attention_dropout": 0.1})", {"attention_dropout", "0.1"}},
      {R"({"model_type": "llama", "pretraining_tp": 0})", {"pretraining_tp", "0"}},
      {R"({"model_type": "llama", "hidden_size": 60, "num_attention_heads": 8})",
       {"num_attention_heads", "8", "hidden_size = 60"}},
      {R"({"model_type": "llama", "num_attention_heads": 8, "num_key_value_heads": 3})", {"num_key_value_heads", "3"}},
      {R"({"model_type": "llama", "hidden_size": 0})", {"hidden_size", "0", "positive"}},
      {R"({"model_type": "llama", "vocab_size": -5})", {"vocab_size", "-5"}},
      {R"({"model_type": "llama", "num_hidden_layers": 0})", {"num_hidden_layers", "0"}},
      {R"({"model_type": "llama", "intermediate_size": 0})", {"intermediate_size"}},
      {R"({"model_type": "llama", "num_key_value_heads": 0})", {"num_key_value_heads"}},
      {R"({"model_type": "llama", "head_dim": 0})", {"head_dim"}},
      {R"({"model_type": "llama", "max_position_embeddings": 0})", {"max_position_embeddings"}},
      {R"({"model_type": "llama", "hidden_size": "big"})", {"hidden_size", "\"big\"", "integer"}},
      {R"({"model_type": "llama", "hidden_size": 4096.0})", {"hidden_size", "4096.0", "integer"}},
      {R"({"model_type": "llama", "hidden_size": true})", {"hidden_size", "true"}},
      {R"({"model_type": "llama", "tie_word_embeddings": "yes"})", {"tie_word_embeddings", "yes"}},
      {R"({"model_type": "llama", "attention_bias": 1})", {"attention_bias"}},
      {R"({"model_type": "llama", "rms_norm_eps": "small"})", {"rms_norm_eps", "small"}},
      {R"({"model_type": "llama", "rms_norm_eps": 0})", {"rms_norm_eps", "positive"}},
      {R"({"model_type": "llama", "rope_theta": -1})", {"rope_theta"}},
      {R"({"model_type": "llama", "hidden_act": 3})", {"hidden_act"}},
      {R"({"model_type": "llama", "eos_token_id": "eos"})", {"eos_token_id", "eos"}},
      {R"({"model_type": "llama", "bos_token_id": [1.5]})", {"bos_token_id"}},
      {R"({"model_type": "llama", "initializer_range": -0.1})", {"initializer_range"}},
      {R"({"model_type": "llama", "quantization_config": {"quant_method": "gptq"}})", {"quantization_config", "gptq"}},
  };
  for (const auto& [text, parts] : cases) check_config_error(text, parts);
}

BOOST_AUTO_TEST_CASE(unreadable_and_malformed_files) {
  check_config_error(R"({"model_type": "llama", "hidden_size": })", {"invalid JSON"});
  check_config_error(R"(["llama"])", {"object"});

  TempDir dir;
  const std::string missing = (dir.path / "nope.json").string();
  try {
    zt::load_model_config(missing);
    BOOST_ERROR("no error for a missing file");
  } catch (const zt::Error& error) {
    BOOST_TEST(std::string(error.what()).find(missing) != std::string::npos);
  }
  try {
    zt::load_model_config(dir.path.string());  // a directory without config.json
    BOOST_ERROR("no error for a directory without config.json");
  } catch (const zt::Error& error) {
    BOOST_TEST(std::string(error.what()).find("config.json") != std::string::npos);
    BOOST_TEST(std::string(error.what()).find(dir.path.string()) != std::string::npos);
  }
}

BOOST_AUTO_TEST_SUITE_END()
