// A checkpoint's batch sizes from its manifest (checkpoint_batch.h).
#include "ckpt/checkpoint_batch.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace zt {

namespace {

using json = nlohmann::json;

// manifest[key] as a positive integer; `required` false: 0 when absent.
int64_t positive_entry(const json& object, const char* key, bool required, const std::string& where) {
  if (!object.is_object() || !object.contains(key)) {
    ZT_CHECK(!required, where, ": has no \"", key, "\" (not a zerotune checkpoint manifest?)");
    return 0;
  }
  const json& value = object.at(key);
  ZT_CHECK(value.is_number_integer() && value.get<int64_t>() >= 1, where, ": \"", key, "\" is ", value.dump(),
           ", not a positive integer (the manifest is damaged)");
  return value.get<int64_t>();
}

}  // namespace

CheckpointBatch read_checkpoint_batch(const std::string& checkpoint_dir) {
  const std::string path = (std::filesystem::path(checkpoint_dir) / "manifest.json").string();
  std::ifstream in(path, std::ios::binary);
  ZT_CHECK(in, path, ": cannot open (not a complete checkpoint)");
  std::ostringstream text;
  text << in.rdbuf();
  json manifest;
  try {
    manifest = json::parse(text.str());
  } catch (const json::exception& error) {
    fail(path, ": not valid JSON (", error.what(), ")");
  }
  ZT_CHECK(manifest.is_object(), path, ": not a JSON object");
  CheckpointBatch batch;
  batch.train_batch_size = positive_entry(manifest.value("run", json()), "train_batch_size", true, path + " run");
  batch.world_size = static_cast<int>(positive_entry(manifest, "world_size", true, path));
  const json config = manifest.value("config", json());
  batch.micro_batch_size = positive_entry(config, "train_micro_batch_size_per_gpu", false, path + " config");
  batch.gradient_accumulation_steps = positive_entry(config, "gradient_accumulation_steps", false, path + " config");
  return batch;
}

}  // namespace zt
