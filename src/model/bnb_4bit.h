// bitsandbytes' 4-bit state dict layout (Linear4bit._save_to_state_dict, QuantState.as_dict
// (packed=True)), as transformers saves a load_in_4bit model with save_pretrained. For the weight
// "W" of each quantized linear layer:
//   W                                      uint8 [ceil(n / 2), 1]  packed 4-bit codes
//   W.absmax                               fp32 [blocks], uint8 [blocks] with double quantization
//   W.quant_map                            fp32 [16]   the 4-bit code table
//   W.nested_absmax                        fp32 [ceil(blocks / 256)]   (double quantization)
//   W.nested_quant_map                     fp32 [256]                  (double quantization)
//   W.quant_state.bitsandbytes__nf4|fp4    uint8: the JSON {"quant_type", "blocksize", "dtype",
//                                          "shape", and with double quantization "nested_blocksize",
//                                          "nested_dtype", "nested_offset"}
// These are exactly the pieces of zerotune's payload (core/quant4bit.h), so a checkpoint loads
// as it is, and a 4-bit base can be written back in it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/quant4bit.h"
#include "model/safetensors.h"

namespace zt {

// Whether the weights hold `name` in bitsandbytes' 4-bit layout (its quant_state key is there).
bool has_bnb_4bit(const ModelWeights& weights, const std::string& name);

// The payload (quant4_layout(numel of shape, config)) of a bitsandbytes 4-bit tensor, after
// checking that its quant_state agrees with `config` and `shape`; every mismatch names the key.
std::vector<uint8_t> read_bnb_4bit(const ModelWeights& weights, const std::string& name,
                                   const std::vector<int64_t>& shape, const QuantConfig& config);

// The state dict entries of a 4-bit tensor `name` (shape, payload) in bitsandbytes' layout;
// `dtype_name` is the original dtype the quant_state records ("bfloat16", ...). The entries point
// into `payload` and `json_bytes` (which must outlive them).
std::vector<SafetensorsEntry> bnb_4bit_entries(const std::string& name, const std::vector<int64_t>& shape,
                                               const QuantConfig& config, const uint8_t* payload,
                                               const std::string& dtype_name, std::string& json_bytes);

}  // namespace zt
