// bitsandbytes' 4-bit state dict layout (bnb_4bit.h).
#include "model/bnb_4bit.h"

#include <cstdio>
#include <cstring>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace zt {

namespace {

std::string state_key(const std::string& name, Quant4Type type) {
  return name + ".quant_state.bitsandbytes__" + quant4_type_name(type);
}

// The stored key of `key` (with or without the "model." prefix), or an error naming it.
std::string require(const ModelWeights& weights, const std::string& key, const std::string& why) {
  const std::string stored = weights.stored_name(key);
  ZT_CHECK(!stored.empty(), weights.source(), ": tensor '", key, "' is missing (", why, ")");
  return stored;
}

// Copies a stored tensor's bytes into the payload after checking its dtype and element count.
void copy_piece(const ModelWeights& weights, const std::string& key, const char* dtype, int64_t numel, uint8_t* dst,
                const std::string& why) {
  const std::string stored = require(weights, key, why);
  const SafetensorsTensorInfo& info = weights.info(stored);
  int64_t count = 1;
  for (int64_t extent : info.shape) count *= extent;
  ZT_CHECK(info.dtype == dtype && count == numel, weights.source(), ": tensor '", stored, "' is ", info.dtype, " ",
           shape_string(info.shape), " but a 4-bit ", why, " needs ", dtype, " with ", numel, " elements");
  std::memcpy(dst, weights.file_of(stored).raw_data(stored), info.bytes);
}

}  // namespace

bool has_bnb_4bit(const ModelWeights& weights, const std::string& name) {
  for (Quant4Type type : {Quant4Type::NF4, Quant4Type::FP4})
    if (!weights.stored_name(state_key(name, type)).empty()) return true;
  return false;
}

std::vector<uint8_t> read_bnb_4bit(const ModelWeights& weights, const std::string& name,
                                   const std::vector<int64_t>& shape, const QuantConfig& config) {
  const std::string key = state_key(name, config.type);
  const std::string stored_state = weights.stored_name(key);
  ZT_CHECK(!stored_state.empty(), weights.source(), ": '", name, "' is 4-bit but has no ", key,
           " (the model's quantization_config says ", describe(config), ")");
  const SafetensorsTensorInfo& state_info = weights.info(stored_state);
  const char* state_bytes = reinterpret_cast<const char*>(weights.file_of(stored_state).raw_data(stored_state));
  nlohmann::json state;
  try {
    state = nlohmann::json::parse(std::string(state_bytes, state_info.bytes));
  } catch (const nlohmann::json::exception& error) {
    fail(weights.source(), ": tensor '", stored_state, "' is not bitsandbytes' quant_state JSON: ", error.what());
  }
  auto field = [&](const char* field_name) -> const nlohmann::json& {
    ZT_CHECK(state.contains(field_name), weights.source(), ": ", stored_state, " has no \"", field_name, "\"");
    return state.at(field_name);
  };
  ZT_CHECK(field("quant_type") == quant4_type_name(config.type), weights.source(), ": ", stored_state,
           " says quant_type ", field("quant_type").dump(), " but the quantization_config says ", quant4_type_name(config.type));
  ZT_CHECK(field("blocksize") == config.blocksize, weights.source(), ": ", stored_state, " has blocksize ",
           field("blocksize").dump(), "; zerotune reads bitsandbytes' 4-bit blocksize ", config.blocksize);
  ZT_CHECK(field("shape") == nlohmann::json(shape), weights.source(), ": ", stored_state, " has shape ",
           field("shape").dump(), " but the model config needs ", shape_string(shape));
  const bool nested = state.contains("nested_offset");
  ZT_CHECK(nested == config.double_quant, weights.source(), ": ", stored_state,
           nested ? " is double-quantized" : " is not double-quantized", " but the quantization_config says ",
           describe(config));
  int64_t numel = 1;
  for (int64_t extent : shape) numel *= extent;
  const Quant4Layout layout = quant4_layout(numel, config);
  std::vector<uint8_t> payload(layout.bytes, 0);
  copy_piece(weights, name, "U8", static_cast<int64_t>(layout.packed_bytes()), payload.data() + layout.packed,
             "weight's packed codes");
  copy_piece(weights, name + ".absmax", nested ? "U8" : "F32", layout.blocks, payload.data() + layout.absmax,
             "weight's block scales");
  copy_piece(weights, name + ".quant_map", "F32", 16, payload.data() + layout.code, "weight's code table");
  if (nested) {
    ZT_CHECK(field("nested_blocksize") == kNestedBlocksize, weights.source(), ": ", stored_state,
             " has nested_blocksize ", field("nested_blocksize").dump(), " (bitsandbytes uses ", kNestedBlocksize, ")");
    copy_piece(weights, name + ".nested_absmax", "F32", layout.nested_blocks, payload.data() + layout.nested_absmax,
               "weight's second-level scales");
    copy_piece(weights, name + ".nested_quant_map", "F32", 256, payload.data() + layout.nested_code,
               "weight's 8-bit code table");
    const float offset = static_cast<float>(field("nested_offset").get<double>());
    std::memcpy(payload.data() + layout.nested_offset, &offset, sizeof(float));
  }
  return payload;
}

std::vector<SafetensorsEntry> bnb_4bit_entries(const std::string& name, const std::vector<int64_t>& shape,
                                               const QuantConfig& config, const uint8_t* payload,
                                               const std::string& dtype_name, std::string& json_bytes) {
  int64_t numel = 1;
  for (int64_t extent : shape) numel *= extent;
  const Quant4Layout layout = quant4_layout(numel, config);
  nlohmann::ordered_json state = {{"quant_type", quant4_type_name(config.type)},
                          {"blocksize", config.blocksize},
                          {"dtype", dtype_name},
                          {"shape", shape}};
  if (layout.nested) {
    float offset = 0.0f;
    std::memcpy(&offset, payload + layout.nested_offset, sizeof(float));
    state["nested_blocksize"] = kNestedBlocksize;
    state["nested_dtype"] = "float32";
    state["nested_offset"] = static_cast<double>(offset);  // exact: Python's offset.item()
  }
  json_bytes = state.dump();
  std::vector<SafetensorsEntry> entries;
  entries.push_back({name, {static_cast<int64_t>(layout.packed_bytes()), 1}, payload + layout.packed, DType::U8, DType::U8});
  entries.push_back({name + ".absmax", {layout.blocks}, payload + layout.absmax, layout.nested ? DType::U8 : DType::F32,
                     layout.nested ? DType::U8 : DType::F32});
  entries.push_back({name + ".quant_map", {16}, payload + layout.code, DType::F32, DType::F32});
  if (layout.nested) {
    entries.push_back({name + ".nested_absmax", {layout.nested_blocks}, payload + layout.nested_absmax, DType::F32, DType::F32});
    entries.push_back({name + ".nested_quant_map", {256}, payload + layout.nested_code, DType::F32, DType::F32});
  }
  entries.push_back({name + ".quant_state.bitsandbytes__" + std::string(quant4_type_name(config.type)),
                     {static_cast<int64_t>(json_bytes.size())}, json_bytes.data(), DType::U8, DType::U8});
  return entries;
}

}  // namespace zt
