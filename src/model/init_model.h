// `zerotune init`: a randomly initialised model written in HF layout (config.json +
// model.safetensors, sharded above 5 GB), initialised the way transformers initialises a new
// LlamaForCausalLM (_init_weights), with zerotune's counter-based RNG.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/config.h"
#include "model/param_spec.h"
#include "model/safetensors.h"

namespace zt {

struct InitModelOptions {
  std::string config_path;   // a config.json, or a directory holding one
  std::string out_dir;       // created if needed
  uint64_t seed = 42;
  DType dtype = DType::F32;  // what the safetensors hold: fp32, bf16 or fp16
  bool force = false;        // write into a non-empty out_dir
  int64_t max_shard_bytes = kHfMaxShardBytes;
};

struct InitModelResult {
  ModelConfig config;
  int64_t parameter_count = 0;
  std::vector<std::string> files;  // written into out_dir: config.json and the weight files
};

// The initial values of parameter number param_index of the model (its index in
// model_param_specs(config)), as transformers' _init_weights sets them: Linear and Embedding
// weights ~ N(0, initializer_range^2), the embedding row of pad_token_id zero (nn.Embedding's
// padding_idx), norm weights 1, biases 0. Element e of a normal-initialised parameter is
// initializer_range * rng_normal({seed, rng_stream(InitWeights, param_index), 0}, e), so a
// value does not depend on anything but (seed, parameter, element).
// values: [spec.numel()] fp32, row-major.
void init_parameter_values(const ModelConfig& config, const ParamSpec& spec, uint32_t param_index, uint64_t seed,
                           float* values);

// Loads and validates the config, initialises every parameter and writes out_dir/config.json
// (the original file's bytes, unchanged) and the weights. Refuses a non-empty out_dir unless
// force is set.
InitModelResult init_model(const InitModelOptions& options);

}  // namespace zt
