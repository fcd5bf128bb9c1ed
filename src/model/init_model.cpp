// `zerotune init`: HF-style random initialisation of every parameter of a model config, and
// the model directory written in HF layout (config.json + safetensors).
#include "model/init_model.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/rng.h"

namespace zt {

namespace fs = std::filesystem;

namespace {

// The token-embedding row transformers zeroes (nn.Embedding(padding_idx=pad_token_id), which
// also accepts a negative index counted from the end), or -1 when there is none.
int64_t padding_row(const ModelConfig& config) {
  if (!config.pad_token_id) return -1;
  const int64_t pad = *config.pad_token_id;
  ZT_CHECK(pad >= -config.vocab_size && pad < config.vocab_size, config.path, ": key 'pad_token_id' = ", pad,
           ": outside the vocabulary (vocab_size = ", config.vocab_size, "); nn.Embedding refuses it too");
  return pad < 0 ? pad + config.vocab_size : pad;
}

std::string read_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  ZT_CHECK(in, path, ": cannot open");
  std::ostringstream bytes;
  bytes << in.rdbuf();
  ZT_CHECK(!in.bad(), path, ": read error");
  return bytes.str();
}

// out_dir must be absent, empty, or overwritable with --force.
void prepare_out_dir(const InitModelOptions& options) {
  const fs::path out = options.out_dir;
  ZT_CHECK(!options.out_dir.empty(), "init: --out is empty");
  if (fs::exists(out)) {
    ZT_CHECK(fs::is_directory(out), options.out_dir, ": exists and is not a directory");
    ZT_CHECK(options.force || fs::is_empty(out), options.out_dir,
             ": the output directory is not empty (use --force to write the model into it anyway)");
  }
  std::error_code error;
  fs::create_directories(out, error);
  ZT_CHECK(!error, options.out_dir, ": cannot create the output directory: ", error.message());
}

}  // namespace

void init_parameter_values(const ModelConfig& config, const ParamSpec& spec, uint32_t param_index, uint64_t seed,
                           float* values) {
  const int64_t numel = spec.numel();
  switch (spec.role) {
    case ParamRole::NormWeight:
      std::fill(values, values + numel, 1.0f);
      return;
    case ParamRole::Bias:
      std::fill(values, values + numel, 0.0f);
      return;
    case ParamRole::Linear:
    case ParamRole::Embedding: {
      const RngKey key{seed, rng_stream(RngPurpose::InitWeights, param_index), 0};
      const auto stddev = static_cast<float>(config.initializer_range);
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < numel; ++i) values[i] = stddev * rng_normal(key, static_cast<uint64_t>(i));
      if (spec.module == "embed_tokens") {
        const int64_t row = padding_row(config);  // spec.shape = [vocab, hidden]
        if (row >= 0) std::fill(values + row * spec.shape[1], values + (row + 1) * spec.shape[1], 0.0f);
      }
      return;
    }
  }
  fail(config.path, ": parameter ", spec.name, " has a role init does not know");
}

InitModelResult init_model(const InitModelOptions& options) {
  InitModelResult result;
  result.config = load_model_config(options.config_path);
  ZT_CHECK(is_float(options.dtype), "init: --dtype must be fp32, bf16 or fp16, not ", dtype_name(options.dtype));
  prepare_out_dir(options);

  // A tied parameter is its target: HF saves it once, under the target's name.
  const std::vector<ParamSpec> specs = stored_param_specs(model_param_specs(result.config));
  std::vector<std::vector<std::byte>> stored(specs.size());  // [numel * dtype size] per parameter
  std::vector<SafetensorsEntry> entries;
  std::vector<float> values;  // [numel] fp32 of the parameter being initialised
  for (size_t i = 0; i < specs.size(); ++i) {
    const ParamSpec& spec = specs[i];
    const auto numel = static_cast<size_t>(spec.numel());
    values.resize(numel);
    init_parameter_values(result.config, spec, static_cast<uint32_t>(i), options.seed, values.data());
    stored[i].resize(numel * dtype_size(options.dtype));
    convert_float_array(values.data(), DType::F32, stored[i].data(), options.dtype, numel);
    entries.push_back({spec.name, spec.shape, stored[i].data(), options.dtype, options.dtype});
    result.parameter_count += spec.numel();
  }

  // config.json: the user's file byte for byte (transformers reads the same keys we validated).
  const fs::path config_out = fs::path(options.out_dir) / "config.json";
  std::error_code error;
  if (!fs::equivalent(result.config.path, config_out, error))
    write_file_atomic(config_out.string(), read_file_bytes(result.config.path));
  result.files.push_back("config.json");

  for (const std::string& file : write_sharded_safetensors(options.out_dir, entries, options.max_shard_bytes))
    result.files.push_back(file);
  return result;
}

}  // namespace zt
