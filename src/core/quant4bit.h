// bitsandbytes' 4-bit blockwise format (QLoRA's frozen base): what Linear4bit stores, bit for bit.
//
//   A tensor of n values is cut into blocks of `blocksize` (64) consecutive values (row-major
//   flat order; the last block may be short). Block b keeps absmax[b] = max |x| (fp32) and each
//   value as the 4-bit index of the code-table entry nearest to x / absmax[b] (clamped to
//   [-1, 1]; ties go to the lower entry, as torch.bucketize on the midpoints does). Two indices a
//   byte: element 2i in the high nibble, 2i+1 in the low one (an odd n pads with the code of 0).
//   Code tables: NF4 (QLoRA's NormalFloat, the quantiles of N(0,1)) or FP4 (e2m1, bnb's bias).
//   Dequantized: code[q] * absmax[b], in fp32, then rounded to the compute dtype.
//
//   Double quantization (bnb_4bit_use_double_quant, "compress_statistics"): the absmax values
//   are stored as 8 bits themselves: offset = mean(absmax), then absmax - offset in blocks of 256
//   with bnb's signed 8-bit dynamic code table, an fp32 second-level absmax per 256 block.
//   Dequantized: absmax[b] = dynamic[qabsmax[b]] * nested_absmax[b / 256] + offset (two fp32 roundings).
//
// This is the algorithm of bitsandbytes' reference path (bitsandbytes/backends/default/ops.py:
// quantize_4bit, quantize_blockwise; functional.quantize_4bit), which its CPU backend runs. The
// offset is torch's fp32 mean in torch's own summation order (one thread, AVX2 vectors: what
// absmax.mean() gives up to 32768 blocks, i.e. tensors of up to 2M values; above, torch's bits
// depend on its thread count).
//
// A quantized tensor's payload: the pieces a bnb checkpoint stores for "<name>.weight", laid out
// one after another in one byte range (each piece 16-byte aligned), so that ZeRO can partition,
// gather and offload it as plain bytes (Quant4Layout).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace zt {

enum class Quant4Type : uint8_t { None, NF4, FP4 };

// How the frozen base weights are stored (train --quantize, or the model's quantization_config).
struct QuantConfig {
  Quant4Type type = Quant4Type::None;
  bool double_quant = false;  // bnb_4bit_use_double_quant
  int64_t blocksize = 64;     // bnb's default for 4-bit
  bool enabled() const { return type != Quant4Type::None; }
  bool operator==(const QuantConfig&) const = default;
};

const char* quant4_type_name(Quant4Type type);  // "none", "nf4", "fp4"
Quant4Type parse_quant4_type(const std::string& name, const std::string& where);  // nf4|fp4 (none for "none")
std::string describe(const QuantConfig& config);  // "nf4 (double quantization, blocks of 64)"

constexpr int64_t kNestedBlocksize = 256;  // bnb's blocksize for the absmax of double quantization

// bnb's code tables: get_4bit_type("nf4"|"fp4") (16 entries, in index order) and
// create_dynamic_map(signed=True) (256 entries, sorted).
const std::array<float, 16>& quant4_code(Quant4Type type);
const std::array<float, 256>& dynamic_code_8bit();

// Byte offsets of the pieces of one quantized tensor's payload (see above).
struct Quant4Layout {
  int64_t numel = 0, blocks = 0, nested_blocks = 0;
  size_t packed = 0;         // uint8 [ceil(n / 2)]
  size_t absmax = 0;         // fp32 [blocks], or uint8 [blocks] with double quantization
  size_t code = 0;           // fp32 [16]
  size_t nested_absmax = 0;  // fp32 [ceil(blocks / 256)]   (double quantization)
  size_t nested_code = 0;    // fp32 [256]                  (double quantization)
  size_t nested_offset = 0;  // fp32 [1]                    (double quantization)
  size_t bytes = 0;          // the whole payload
  bool nested = false;
  size_t packed_bytes() const { return static_cast<size_t>((numel + 1) / 2); }
};
Quant4Layout quant4_layout(int64_t numel, const QuantConfig& config);

// Quantizes x[n] into `payload` (layout.bytes, zero padding between pieces).
void quantize_4bit(const float* x, int64_t n, const QuantConfig& config, uint8_t* payload);

// The blockwise quantization both levels use: indices into `sorted_code` (ascending, `code_size`
// entries) of the entries nearest to each value / its block's absmax; absmax[ceil(n/blocksize)].
void quantize_blockwise(const float* x, int64_t n, int64_t blocksize, const float* sorted_code, int code_size,
                        uint8_t* indices, float* absmax);

// Dequantizes values [begin, begin + count) of the payload's tensor into out[count] (fp32):
// the reference both backends' dequantize_4bit agree with. `absmax` holds the tensor's block
// scales in fp32 (dequantize_absmax for double quantization, else the payload's).
void dequantize_4bit_range(const uint8_t* packed, const float* absmax, const float* code, int64_t blocksize,
                           int64_t begin, int64_t count, float* out);
// absmax[b] = nested_code[qabsmax[b]] * nested_absmax[b / 256] + offset, b in [0, blocks).
void dequantize_absmax(const uint8_t* qabsmax, const float* nested_absmax, const float* nested_code, float offset,
                       int64_t blocks, float* absmax);
// The whole tensor of a payload, fp32 [n].
std::vector<float> dequantize_payload(const uint8_t* payload, int64_t n, const QuantConfig& config);

}  // namespace zt
