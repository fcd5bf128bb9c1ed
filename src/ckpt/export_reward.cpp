// Export of a reward model as an HF ...ForSequenceClassification (see export_reward.h).
#include "ckpt/export_reward.h"

#include <filesystem>
#include <fstream>
#include <string_view>

#include "core/error.h"
#include "model/safetensors.h"
#include "model/value_head.h"

namespace zt {

namespace fs = std::filesystem;
using json = nlohmann::json;

bool add_checkpoint_value_head(ParameterPlan& plan, const ModelConfig& config, const json& manifest) {
  for (const json& parameter : manifest.at("layout").at("parameters")) {
    if (parameter.at("name").get<std::string>() != kValueHeadWeight) continue;
    plan.specs.push_back(value_head_spec(config, "checkpoint"));
    plan.trainable.push_back(true);
    plan.quant.push_back(QuantConfig{});
    return true;
  }
  return false;
}

std::string sequence_classification_name(const std::string& name) {
  if (name == kValueHeadWeight) return kSequenceClassificationScore;
  return name == "lm_head.weight" ? "" : name;
}

std::string deepspeed_chat_reward_name(const std::string& name) {
  if (name == kValueHeadWeight) return name;
  if (name == "lm_head.weight") return "";
  constexpr std::string_view kDecoderPrefix = "model.";
  ZT_CHECK(name.starts_with(kDecoderPrefix), "export --format dschat: parameter '", name,
           "' is neither the value head, the LM head nor under 'model.': no name for it in DeepSpeed-Chat's layout");
  return "rwtranformer." + name.substr(kDecoderPrefix.size());
}

void write_sequence_classification_config(const std::string& out_dir) {
  const std::string path = (fs::path(out_dir) / "config.json").string();
  std::ifstream in(path);
  ZT_CHECK(in, path, ": cannot open");
  json config = json::parse(in);
  const json architectures = config.value("architectures", json::array());
  ZT_CHECK(architectures.is_array() && !architectures.empty() && architectures[0].is_string(), path,
           ": no 'architectures' entry to name the ...ForSequenceClassification class after");
  std::string causal = architectures[0].get<std::string>();
  const size_t at = causal.rfind("ForCausalLM");
  ZT_CHECK(at != std::string::npos, path, ": architectures[0] '", causal, "' is not a ...ForCausalLM class");
  config["architectures"] = json::array({causal.replace(at, std::string::npos, "ForSequenceClassification")});
  config["num_labels"] = 1;
  config["id2label"] = {{"0", "LABEL_0"}};
  config["label2id"] = {{"LABEL_0", 0}};
  write_file_atomic(path, config.dump(2) + "\n");
}

}  // namespace zt
