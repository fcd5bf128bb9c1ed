// Tests of `zerotune init` (model/init_model.h, cli/init_command.cpp): HF-style init values
// from the counter-based RNG, the HF model directory it writes, dtypes, sharding, and the
// command line (help, unknown option, refusing a non-empty directory).
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "core/rng.h"
#include "model/config.h"
#include "model/init_model.h"
#include "model/param_spec.h"
#include "model/safetensors.h"
#include "test_util.h"

namespace {

namespace fs = std::filesystem;

using zt::test::TempDir;

// A tiny GQA llama; the odd spacing checks that config.json is copied byte for byte.
const char* kTinyConfig = R"({"model_type": "llama",   "vocab_size": 128, "hidden_size": 64,
  "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
  "pad_token_id": 3, "initializer_range": 0.02, "architectures": ["LlamaForCausalLM"]}
)";

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string write_config(const TempDir& dir, const std::string& text) {
  const std::string path = dir.file("config.json");
  std::ofstream(path) << text;
  return path;
}

std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const zt::Error& error) {
    return error.what();
  }
  BOOST_ERROR("no error thrown");
  return "";
}

}  // namespace

BOOST_AUTO_TEST_SUITE(init_model)

BOOST_AUTO_TEST_CASE(values_follow_hf_init_and_the_counter_rng) {
  zt::ModelConfig config = zt::parse_model_config(nlohmann::json::parse(kTinyConfig), "tiny.json");
  const std::vector<zt::ParamSpec> specs = zt::model_param_specs(config);
  for (uint32_t i = 0; i < specs.size(); ++i) {
    const zt::ParamSpec& spec = specs[i];
    std::vector<float> values(static_cast<size_t>(spec.numel()));
    zt::init_parameter_values(config, spec, i, 7, values.data());
    BOOST_TEST_CONTEXT(spec.name) {
      if (spec.role == zt::ParamRole::NormWeight) {
        BOOST_TEST(values == std::vector<float>(values.size(), 1.0f));
        continue;
      }
      const zt::RngKey key{7, zt::rng_stream(zt::RngPurpose::InitWeights, i), 0};
      BOOST_TEST(values[5] == 0.02f * zt::rng_normal(key, 5));
      double sum = 0, sum_squares = 0;
      for (float v : values) {
        sum += v;
        sum_squares += double(v) * v;
      }
      const double n = double(values.size()), mean = sum / n, stddev = std::sqrt(sum_squares / n - mean * mean);
      // n >= 2048 draws: the sample mean is within 5 standard errors (0.02/sqrt(n) each), the
      // sample std within 12% of 0.02 (its standard error is about 0.02/sqrt(2n) < 1.6%).
      BOOST_TEST(std::abs(mean) < 5 * 0.02 / std::sqrt(n));
      BOOST_TEST(std::abs(stddev - 0.02) < 0.12 * 0.02);
      if (spec.module == "embed_tokens") {  // pad_token_id 3: nn.Embedding(padding_idx=3) zeroes row 3
        for (int64_t c = 0; c < 64; ++c) BOOST_TEST(values[static_cast<size_t>(3 * 64 + c)] == 0.0f);
        BOOST_TEST(values[2 * 64] != 0.0f);
      }
    }
  }
  // Another seed or another parameter index gives other numbers.
  std::vector<float> a(static_cast<size_t>(specs[2].numel())), b(a.size()), c(a.size());
  zt::init_parameter_values(config, specs[2], 2, 7, a.data());
  zt::init_parameter_values(config, specs[2], 2, 8, b.data());
  zt::init_parameter_values(config, specs[2], 3, 7, c.data());
  BOOST_TEST(a != b);
  BOOST_TEST(a != c);
}

BOOST_AUTO_TEST_CASE(writes_an_hf_model_directory) {
  TempDir dir;
  const std::string config_path = write_config(dir, kTinyConfig);
  zt::InitModelOptions options;
  options.config_path = config_path;
  options.out_dir = dir.file("model");
  options.seed = 11;
  zt::InitModelResult result = zt::init_model(options);
  BOOST_TEST(result.files == (std::vector<std::string>{"config.json", "model.safetensors"}));
  BOOST_TEST(read_bytes(dir.file("model/config.json")) == kTinyConfig);

  const std::vector<zt::ParamSpec> specs = zt::model_param_specs(result.config);
  // embed 128*64, per layer 2 norms 64 + q 64*64 + k,v 32*64 + o 64*64 + 3 mlp 96*64, norm, head
  const int64_t expected = 128 * 64 + 2 * (2 * 64 + 2 * 64 * 64 + 2 * 32 * 64 + 3 * 96 * 64) + 64 + 128 * 64;
  BOOST_TEST(result.parameter_count == expected);
  zt::ModelWeights weights(dir.file("model"));
  BOOST_TEST(weights.names().size() == specs.size());
  BOOST_TEST(zt::SafetensorsFile(dir.file("model/model.safetensors")).metadata().at("format") == "pt");
  for (uint32_t i = 0; i < specs.size(); ++i) {
    std::vector<float> stored(static_cast<size_t>(specs[i].numel())), fresh(stored.size());
    weights.read_f32(specs[i].name, stored.data(), specs[i].shape);
    zt::init_parameter_values(result.config, specs[i], i, 11, fresh.data());
    BOOST_TEST(stored == fresh, specs[i].name);
    BOOST_TEST(weights.info(specs[i].name).dtype == "F32");
  }

  // The same seed again reproduces the file exactly.
  options.out_dir = dir.file("again");
  zt::init_model(options);
  BOOST_TEST(read_bytes(dir.file("again/model.safetensors")) == read_bytes(dir.file("model/model.safetensors")));
}

BOOST_AUTO_TEST_CASE(bf16_and_sharded_output) {
  TempDir dir;
  zt::InitModelOptions options;
  options.config_path = write_config(dir, kTinyConfig);
  options.out_dir = dir.file("bf16");
  options.dtype = zt::DType::BF16;
  options.max_shard_bytes = 40000;  // the 16 KiB embedding and head force several shards
  zt::InitModelResult result = zt::init_model(options);
  BOOST_TEST(result.files.size() > 3u);
  BOOST_TEST(result.files.back() == "model.safetensors.index.json");
  BOOST_TEST(!fs::exists(dir.file("bf16/model.safetensors")));

  zt::ModelWeights weights(dir.file("bf16"));
  const std::vector<zt::ParamSpec> specs = zt::model_param_specs(result.config);
  for (uint32_t i = 0; i < specs.size(); ++i) {
    std::vector<float> stored(static_cast<size_t>(specs[i].numel())), fresh(stored.size());
    weights.read_f32(specs[i].name, stored.data(), specs[i].shape);
    zt::init_parameter_values(result.config, specs[i], i, options.seed, fresh.data());
    for (float& v : fresh) v = zt::round_to(zt::DType::BF16, v);
    BOOST_TEST(stored == fresh, specs[i].name);
    BOOST_TEST(weights.info(specs[i].name).dtype == "BF16");
  }
}

BOOST_AUTO_TEST_CASE(refuses_a_non_empty_directory_unless_forced) {
  TempDir dir;
  zt::InitModelOptions options;
  options.config_path = write_config(dir, kTinyConfig);
  options.out_dir = dir.path.string();  // holds config.json already
  const std::string message = error_of([&] { zt::init_model(options); });
  BOOST_TEST(message.find(dir.path.string()) != std::string::npos);
  BOOST_TEST(message.find("--force") != std::string::npos);
  BOOST_TEST(!fs::exists(dir.file("model.safetensors")));
  options.force = true;
  zt::init_model(options);
  BOOST_TEST(read_bytes(dir.file("config.json")) == kTinyConfig);
  BOOST_TEST(fs::exists(dir.file("model.safetensors")));
}

BOOST_AUTO_TEST_CASE(bad_config_is_refused_before_anything_is_written) {
  TempDir dir;
  zt::InitModelOptions options;
  options.config_path = write_config(dir, R"({"model_type": "llama", "hidden_act": "relu"})");
  options.out_dir = dir.file("out");
  const std::string message = error_of([&] { zt::init_model(options); });
  BOOST_TEST(message.find(options.config_path) != std::string::npos);
  BOOST_TEST(message.find("hidden_act") != std::string::npos);
  BOOST_TEST(!fs::exists(dir.file("out")));

  options.config_path = write_config(dir, R"({"model_type": "llama", "vocab_size": 16, "pad_token_id": 16})");
  const std::string pad_message = error_of([&] { zt::init_model(options); });
  BOOST_TEST(pad_message.find("pad_token_id") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(command_line) {
  TempDir dir;
  const std::string config_path = write_config(dir, kTinyConfig);
  BOOST_TEST(zt::command_init({"--help"}) == 0);
  BOOST_TEST(zt::command_init({"--config", config_path, "--out", dir.file("cli"), "--seed", "5", "--dtype", "fp16"}) == 0);
  zt::SafetensorsFile file(dir.file("cli/model.safetensors"));
  BOOST_TEST(file.info("model.embed_tokens.weight").dtype == "F16");

  std::string message = error_of([&] { zt::command_init({"--config", config_path, "--out", dir.file("x"), "--bogus"}); });
  BOOST_TEST(message.find("--bogus") != std::string::npos);
  message = error_of([&] { zt::command_init({"--out", dir.file("x")}); });
  BOOST_TEST(message.find("config") != std::string::npos);
  message = error_of([&] { zt::command_init({"--config", config_path, "--out", dir.file("x"), "--dtype", "int8"}); });
  BOOST_TEST(message.find("int8") != std::string::npos);
  message = error_of([&] { zt::command_init({"--config", config_path, "--out", dir.file("cli")}); });
  BOOST_TEST(message.find("--force") != std::string::npos);
  BOOST_TEST(zt::command_init({"--config", config_path, "--out", dir.file("cli"), "--force"}) == 0);
  BOOST_TEST(zt::SafetensorsFile(dir.file("cli/model.safetensors")).info("model.norm.weight").dtype == "F32");
  message = error_of([&] { zt::command_init({"--config", config_path, "--out", dir.file("y"), "--max-shard-size", "big"}); });
  BOOST_TEST(message.find("--max-shard-size") != std::string::npos);
  // 20KB: the 32 KiB fp32 embedding gets a shard of its own, and more shards follow.
  BOOST_TEST(zt::command_init({"--config", config_path, "--out", dir.file("sharded"), "--max-shard-size", "20KB"}) == 0);
  BOOST_TEST(fs::exists(dir.file("sharded/model.safetensors.index.json")));
  std::set<std::string> shards;
  const nlohmann::json index = nlohmann::json::parse(read_bytes(dir.file("sharded/model.safetensors.index.json")));
  for (const auto& [name, shard] : index["weight_map"].items()) shards.insert(shard.get<std::string>());
  BOOST_TEST(shards.size() > 2u);
  BOOST_TEST(zt::ModelWeights(dir.file("sharded")).names().size() == zt::model_param_specs(zt::load_model_config(config_path)).size());
}

BOOST_AUTO_TEST_SUITE_END()
