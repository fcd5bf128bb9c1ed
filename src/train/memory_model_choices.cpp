// ZeRO choices and the printing of a prediction's terms (memory_model_choices.h).
#include "train/memory_model_choices.h"

#include "core/error.h"
#include "train/memory_model.h"

namespace zt {

std::vector<ZeroChoice> zero_offload_choices(bool fused_optimizer) {
  if (fused_optimizer) return {{0, false, false}, {1, false, false}, {2, false, false}, {3, false, false}, {3, false, true}};
  return {{0, false, false}, {1, false, false}, {1, true, false}, {2, false, false},
          {2, true, false},  {3, false, false}, {3, true, false}, {3, true, true}};
}

TrainConfig with_choice(TrainConfig config, const ZeroChoice& choice) {
  config.zero.stage = choice.stage;
  config.zero.offload_optimizer_device = choice.offload_optimizer ? "cpu" : "none";
  config.zero.offload_param_device = choice.offload_params ? "cpu" : "none";
  config.activation_checkpointing = choice.activation_checkpointing;
  if (choice.pipeline_stages > 0) config.pipeline.stages = choice.pipeline_stages;
  // ZeRO++ (--deepspeed's zero_quantized_weights, zero_hpz_partition_size, zero_quantized_gradients)
  // and partial offload (offload_optimizer.ratio) are stage 3's: the rows of the other stages run without them.
  if (choice.stage < 3) {
    config.zero.zero_quantized_weights = config.zero.zero_quantized_gradients = false;
    config.zero.zero_hpz_partition_size = 1;
    config.zero.offload_optimizer_ratio = 1.0;  // (so is offload_optimizer.ratio's partial offload)
  } else if (choice.zeropp_ranks_per_node > 0) {
    config.zero.zero_quantized_weights = config.zero.zero_quantized_gradients = true;
    config.zero.zero_hpz_partition_size = config.zero.ranks_per_node = choice.zeropp_ranks_per_node;
  }
  return config;
}

std::string choice_text(const ZeroChoice& choice) {
  std::string text = cat("zero_optimization.stage ", choice.stage);
  if (choice.offload_optimizer) text += " + offload_optimizer cpu";
  if (choice.offload_params) text += " + offload_param cpu";
  if (choice.activation_checkpointing) text += " + --activation-checkpointing";
  if (choice.zeropp_ranks_per_node > 0) text += cat(" + ZeRO++ (hpZ over ", choice.zeropp_ranks_per_node, " ranks)");
  if (choice.pipeline_stages > 1) text += cat(" + --pipeline-stages ", choice.pipeline_stages);
  return text;
}

std::string choice_experiment_name(const ZeroChoice& choice, int64_t accumulation, int64_t micro_batch) {
  return cat("z", choice.stage, "_oo", choice.offload_optimizer ? "cpu" : "none", "_op",
             choice.offload_params ? "cpu" : "none", "_ac", choice.activation_checkpointing ? "T" : "F", "_gas",
             accumulation, "_tmbspg", micro_batch, choice.zeropp_ranks_per_node > 0 ? "_zpp" : "",
             choice.pipeline_stages > 1 ? cat("_pp", choice.pipeline_stages) : std::string());
}

nlohmann::ordered_json terms_json(const std::map<std::string, int64_t>& terms) {
  nlohmann::ordered_json json = nlohmann::ordered_json::object();
  for (const std::string& term : memory_terms())
    if (auto found = terms.find(term); found != terms.end()) json[term] = found->second;
  for (const auto& [term, bytes] : terms)
    if (!json.contains(term)) json[term] = bytes;
  return json;
}

}  // namespace zt
