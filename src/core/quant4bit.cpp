// bitsandbytes' 4-bit blockwise format (quant4bit.h).
#include "core/quant4bit.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <type_traits>

#include "core/error.h"

namespace zt {

namespace {

constexpr size_t kPieceAlignment = 16;
size_t align_piece(size_t offset) { return (offset + kPieceAlignment - 1) / kPieceAlignment * kPieceAlignment; }

// get_4bit_type("nf4"): QLoRA's NormalFloat4 (create_normal_map(offset=0.9677083, use_extra_value=True)).
constexpr std::array<float, 16> kNf4 = {
    -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f, -0.28444138169288635f,
    -0.18477343022823334f, -0.09105003625154495f, 0.0f, 0.07958029955625534f, 0.16093020141124725f,
    0.24611230194568634f, 0.33791524171829224f, 0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f,
    1.0f};

// get_4bit_type("fp4"): sign, 2 exponent bits, 1 mantissa bit in bnb's bias, in index order,
// divided by the largest magnitude (12) as bnb does (in fp32).
std::array<float, 16> make_fp4() {
  const float raw[16] = {0.0f, 0.0625f, 8.0f, 12.0f, 4.0f, 6.0f, 2.0f, 3.0f,
                         -0.0f, -0.0625f, -8.0f, -12.0f, -4.0f, -6.0f, -2.0f, -3.0f};
  std::array<float, 16> code{};
  for (int i = 0; i < 16; ++i) code[static_cast<size_t>(i)] = raw[i] / 12.0f;
  return code;
}

// create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8) as bnb builds it with torch
// (float32 linspace over [0.1, 1], midpoints, times 10^(e-6) for e = 0..6, both signs, 0 and 1,
// sorted). Tabulated: torch's vectorised linspace rounds a few entries differently from a scalar
// evaluation of the same formula, and checkpoints carry the table bnb computed.
constexpr std::array<float, 256> kDynamic = {
    -0x1.fc6666p-1f, -0x1.f53332p-1f, -0x1.eep-1f, -0x1.e6ccccp-1f,
    -0x1.df9998p-1f, -0x1.d86666p-1f, -0x1.d13334p-1f, -0x1.cap-1f,
    -0x1.c2ccccp-1f, -0x1.bb9998p-1f, -0x1.b46666p-1f, -0x1.ad3332p-1f,
    -0x1.a6p-1f, -0x1.9eccccp-1f, -0x1.979998p-1f, -0x1.906666p-1f,
    -0x1.893334p-1f, -0x1.82p-1f, -0x1.7acccep-1f, -0x1.73999ap-1f,
    -0x1.6c6668p-1f, -0x1.653334p-1f, -0x1.5ep-1f, -0x1.56cccep-1f,
    -0x1.4f999ap-1f, -0x1.486666p-1f, -0x1.413334p-1f, -0x1.3ap-1f,
    -0x1.32ccccp-1f, -0x1.2b999ap-1f, -0x1.246668p-1f, -0x1.1d3334p-1f,
    -0x1.16p-1f, -0x1.0eccccp-1f, -0x1.07999ap-1f, -0x1.006666p-1f,
    -0x1.f26668p-2f, -0x1.e4p-2f, -0x1.d59998p-2f, -0x1.c73334p-2f,
    -0x1.b8ccccp-2f, -0x1.aa6664p-2f, -0x1.9cp-2f, -0x1.8d9998p-2f,
    -0x1.7f3334p-2f, -0x1.70ccccp-2f, -0x1.626664p-2f, -0x1.54p-2f,
    -0x1.459998p-2f, -0x1.373334p-2f, -0x1.28ccccp-2f, -0x1.1a6668p-2f,
    -0x1.0cp-2f, -0x1.fb3334p-3f, -0x1.de6668p-3f, -0x1.c1999ap-3f,
    -0x1.a4ccccp-3f, -0x1.88p-3f, -0x1.6b3332p-3f, -0x1.4e6666p-3f,
    -0x1.31999ap-3f, -0x1.14ccccp-3f, -0x1.fp-4f, -0x1.b66668p-4f,
    -0x1.93d70ap-4f, -0x1.8851eap-4f, -0x1.7ccccep-4f, -0x1.7147aep-4f,
    -0x1.65c29p-4f, -0x1.5a3d7p-4f, -0x1.4eb85p-4f, -0x1.433334p-4f,
    -0x1.37ae14p-4f, -0x1.2c28f6p-4f, -0x1.20a3d6p-4f, -0x1.151ebap-4f,
    -0x1.09999ap-4f, -0x1.fc28f4p-5f, -0x1.e51ebap-5f, -0x1.ce147ap-5f,
    -0x1.b70a3ep-5f, -0x1.ap-5f, -0x1.88f5c2p-5f, -0x1.71eb86p-5f,
    -0x1.5ae146p-5f, -0x1.43d70ap-5f, -0x1.2ccccep-5f, -0x1.15c28ep-5f,
    -0x1.fd70a4p-6f, -0x1.cf5c26p-6f, -0x1.a147aep-6f, -0x1.733334p-6f,
    -0x1.451eb8p-6f, -0x1.170a3ep-6f, -0x1.d1eb86p-7f, -0x1.75c29p-7f,
    -0x1.3e76c8p-7f, -0x1.2c083p-7f, -0x1.19999ap-7f, -0x1.072b02p-7f,
    -0x1.e978d4p-8f, -0x1.c49ba6p-8f, -0x1.9fbe76p-8f, -0x1.7ae148p-8f,
    -0x1.56041ap-8f, -0x1.3126e8p-8f, -0x1.0c49bap-8f, -0x1.ced914p-9f,
    -0x1.851eb8p-9f, -0x1.3b645ap-9f, -0x1.e353f8p-10f, -0x1.4fdf3ap-10f,
    -0x1.eecbfep-11f, -0x1.b3d07cp-11f, -0x1.78d5p-11f, -0x1.3dd982p-11f,
    -0x1.02de02p-11f, -0x1.8fc506p-12f, -0x1.19ce0ap-12f, -0x1.47ae16p-13f,
    -0x1.743e96p-14f, -0x1.15df66p-14f, -0x1.6f0068p-15f, -0x1.64840cp-16f,
    -0x1.040bfep-17f, -0x1.b43528p-19f, -0x1.27476ep-21f, 0x0p+0f,
    0x1.27476ep-21f, 0x1.b43528p-19f, 0x1.040bfep-17f, 0x1.64840cp-16f,
    0x1.6f0068p-15f, 0x1.15df66p-14f, 0x1.743e96p-14f, 0x1.47ae16p-13f,
    0x1.19ce0ap-12f, 0x1.8fc506p-12f, 0x1.02de02p-11f, 0x1.3dd982p-11f,
    0x1.78d5p-11f, 0x1.b3d07cp-11f, 0x1.eecbfep-11f, 0x1.4fdf3ap-10f,
    0x1.e353f8p-10f, 0x1.3b645ap-9f, 0x1.851eb8p-9f, 0x1.ced914p-9f,
    0x1.0c49bap-8f, 0x1.3126e8p-8f, 0x1.56041ap-8f, 0x1.7ae148p-8f,
    0x1.9fbe76p-8f, 0x1.c49ba6p-8f, 0x1.e978d4p-8f, 0x1.072b02p-7f,
    0x1.19999ap-7f, 0x1.2c083p-7f, 0x1.3e76c8p-7f, 0x1.75c29p-7f,
    0x1.d1eb86p-7f, 0x1.170a3ep-6f, 0x1.451eb8p-6f, 0x1.733334p-6f,
    0x1.a147aep-6f, 0x1.cf5c26p-6f, 0x1.fd70a4p-6f, 0x1.15c28ep-5f,
    0x1.2ccccep-5f, 0x1.43d70ap-5f, 0x1.5ae146p-5f, 0x1.71eb86p-5f,
    0x1.88f5c2p-5f, 0x1.ap-5f, 0x1.b70a3ep-5f, 0x1.ce147ap-5f,
    0x1.e51ebap-5f, 0x1.fc28f4p-5f, 0x1.09999ap-4f, 0x1.151ebap-4f,
    0x1.20a3d6p-4f, 0x1.2c28f6p-4f, 0x1.37ae14p-4f, 0x1.433334p-4f,
    0x1.4eb85p-4f, 0x1.5a3d7p-4f, 0x1.65c29p-4f, 0x1.7147aep-4f,
    0x1.7ccccep-4f, 0x1.8851eap-4f, 0x1.93d70ap-4f, 0x1.b66668p-4f,
    0x1.fp-4f, 0x1.14ccccp-3f, 0x1.31999ap-3f, 0x1.4e6666p-3f,
    0x1.6b3332p-3f, 0x1.88p-3f, 0x1.a4ccccp-3f, 0x1.c1999ap-3f,
    0x1.de6668p-3f, 0x1.fb3334p-3f, 0x1.0cp-2f, 0x1.1a6668p-2f,
    0x1.28ccccp-2f, 0x1.373334p-2f, 0x1.459998p-2f, 0x1.54p-2f,
    0x1.626664p-2f, 0x1.70ccccp-2f, 0x1.7f3334p-2f, 0x1.8d9998p-2f,
    0x1.9cp-2f, 0x1.aa6664p-2f, 0x1.b8ccccp-2f, 0x1.c73334p-2f,
    0x1.d59998p-2f, 0x1.e4p-2f, 0x1.f26668p-2f, 0x1.006666p-1f,
    0x1.07999ap-1f, 0x1.0eccccp-1f, 0x1.16p-1f, 0x1.1d3334p-1f,
    0x1.246668p-1f, 0x1.2b999ap-1f, 0x1.32ccccp-1f, 0x1.3ap-1f,
    0x1.413334p-1f, 0x1.486666p-1f, 0x1.4f999ap-1f, 0x1.56cccep-1f,
    0x1.5ep-1f, 0x1.653334p-1f, 0x1.6c6668p-1f, 0x1.73999ap-1f,
    0x1.7acccep-1f, 0x1.82p-1f, 0x1.893334p-1f, 0x1.906666p-1f,
    0x1.979998p-1f, 0x1.9eccccp-1f, 0x1.a6p-1f, 0x1.ad3332p-1f,
    0x1.b46666p-1f, 0x1.bb9998p-1f, 0x1.c2ccccp-1f, 0x1.cap-1f,
    0x1.d13334p-1f, 0x1.d86666p-1f, 0x1.df9998p-1f, 0x1.e6ccccp-1f,
    0x1.eep-1f, 0x1.f53332p-1f, 0x1.fc6666p-1f, 0x1p+0f,
};

// A code table in ascending order, with the index (in table order) of each sorted entry: FP4's
// table is not sorted (ties, +0 and -0, keep table order as a stable sort does).
struct SortedCode {
  std::vector<float> values;
  std::vector<uint8_t> index;
};
SortedCode sorted_code(const std::array<float, 16>& code) {
  SortedCode sorted;
  std::vector<int> order(16);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return code[static_cast<size_t>(a)] < code[static_cast<size_t>(b)]; });
  for (int i : order) {
    sorted.values.push_back(code[static_cast<size_t>(i)]);
    sorted.index.push_back(static_cast<uint8_t>(i));
  }
  return sorted;
}

// torch.Tensor.mean of a contiguous fp32 vector as ATen computes it on one thread with AVX2
// (bitsandbytes' offset = absmax.mean()): the sum (SumKernel.cpp cascade_sum: row_sum over 8-wide
// vectors with 4 interleaved accumulators, each a 4-level cascade of partial sums; the elements
// past the last whole vector summed first, then the 8 lanes in order), divided by n in fp32.
// Above 32768 elements torch splits the sum over its threads (its bits then depend on their
// number); this is its one-thread result.
constexpr int kLanes = 8;  // Vectorized<float>::size() under AVX2
using Lanes = std::array<float, kLanes>;

int64_t ceil_log2(int64_t value) {
  int64_t bits = 0;
  while ((int64_t{1} << bits) < value) ++bits;
  return bits;
}

// multi_row_sum<acc, 4>: rows of 4 elements (element = `load(index)`), 4-level cascade.
template <class Acc, class Load>
std::array<Acc, 4> multi_row_sum(int64_t rows, Load load) {
  constexpr int64_t kLevels = 4;
  const int64_t level_power = std::max<int64_t>(4, ceil_log2(rows) / kLevels);
  const int64_t level_step = int64_t{1} << level_power;
  const int64_t level_mask = level_step - 1;
  Acc acc[kLevels][4] = {};
  auto add = [](Acc& to, const Acc& from) {
    if constexpr (std::is_same_v<Acc, float>) to += from;
    else for (int l = 0; l < kLanes; ++l) to[static_cast<size_t>(l)] += from[static_cast<size_t>(l)];
  };
  int64_t i = 0;
  while (i + level_step <= rows) {
    for (int64_t j = 0; j < level_step; ++j, ++i)
      for (int64_t k = 0; k < 4; ++k) add(acc[0][k], load(4 * i + k));
    for (int64_t j = 1; j < kLevels; ++j) {
      for (int64_t k = 0; k < 4; ++k) {
        add(acc[j][k], acc[j - 1][k]);
        acc[j - 1][k] = Acc{};
      }
      if ((i & (level_mask << (j * level_power))) != 0) break;
    }
  }
  for (; i < rows; ++i)
    for (int64_t k = 0; k < 4; ++k) add(acc[0][k], load(4 * i + k));
  for (int64_t j = 1; j < kLevels; ++j)
    for (int64_t k = 0; k < 4; ++k) add(acc[0][k], acc[j][k]);
  return {acc[0][0], acc[0][1], acc[0][2], acc[0][3]};
}

// row_sum: `count` elements as rows of 4, the rest added to the first accumulator, then the four.
template <class Acc, class Load>
Acc row_sum(int64_t count, Load load) {
  std::array<Acc, 4> partial = multi_row_sum<Acc>(count / 4, load);
  auto add = [](Acc& to, const Acc& from) {
    if constexpr (std::is_same_v<Acc, float>) to += from;
    else for (int l = 0; l < kLanes; ++l) to[static_cast<size_t>(l)] += from[static_cast<size_t>(l)];
  };
  for (int64_t i = count / 4 * 4; i < count; ++i) add(partial[0], load(i));
  for (int k = 1; k < 4; ++k) add(partial[0], partial[static_cast<size_t>(k)]);
  return partial[0];
}

float torch_mean(const float* x, int64_t n) {
  float sum = 0.0f;
  if (n < kLanes) {  // scalar_inner_sum
    sum = row_sum<float>(n, [&](int64_t i) { return x[i]; });
  } else {           // vectorized_inner_sum
    const int64_t vectors = n / kLanes;
    const Lanes lanes = row_sum<Lanes>(vectors, [&](int64_t v) {
      Lanes values;
      std::memcpy(values.data(), x + v * kLanes, sizeof(values));
      return values;
    });
    for (int64_t i = vectors * kLanes; i < n; ++i) sum += x[i];
    for (float lane : lanes) sum += lane;
  }
  return sum / static_cast<float>(n);
}

}  // namespace

const char* quant4_type_name(Quant4Type type) {
  switch (type) {
    case Quant4Type::None: return "none";
    case Quant4Type::NF4: return "nf4";
    case Quant4Type::FP4: return "fp4";
  }
  return "unknown";
}

Quant4Type parse_quant4_type(const std::string& name, const std::string& where) {
  if (name == "nf4") return Quant4Type::NF4;
  if (name == "fp4") return Quant4Type::FP4;
  if (name == "none") return Quant4Type::None;
  // An empty value (--quantize "", a script's unset variable) is refused, not read as "none".
  fail(where, ": 4-bit quantization type '", name, "'", name.empty() ? " (empty)" : "", " is not supported (nf4 or fp4)");
}

std::string describe(const QuantConfig& config) {
  if (!config.enabled()) return "none";
  return cat(quant4_type_name(config.type), " (blocks of ", config.blocksize,
             config.double_quant ? ", double quantization)" : ")");
}

const std::array<float, 16>& quant4_code(Quant4Type type) {
  static const std::array<float, 16> fp4 = make_fp4();
  ZT_CHECK(type != Quant4Type::None, "quant4_code: no code table for 'none'");
  return type == Quant4Type::NF4 ? kNf4 : fp4;
}

const std::array<float, 256>& dynamic_code_8bit() { return kDynamic; }

Quant4Layout quant4_layout(int64_t numel, const QuantConfig& config) {
  ZT_CHECK(config.enabled(), "quant4_layout: quantization is off");
  ZT_CHECK(config.blocksize > 0 && config.blocksize % 2 == 0, "4-bit blocksize must be even and positive, not ", config.blocksize);
  Quant4Layout layout;
  layout.numel = numel;
  layout.blocks = (numel + config.blocksize - 1) / config.blocksize;
  layout.nested = config.double_quant;
  size_t offset = 0;
  layout.packed = offset;
  offset = align_piece(offset + layout.packed_bytes());
  layout.absmax = offset;
  offset = align_piece(offset + static_cast<size_t>(layout.blocks) * (layout.nested ? 1 : sizeof(float)));
  layout.code = offset;
  offset = align_piece(offset + 16 * sizeof(float));
  if (layout.nested) {
    layout.nested_blocks = (layout.blocks + kNestedBlocksize - 1) / kNestedBlocksize;
    layout.nested_absmax = offset;
    offset = align_piece(offset + static_cast<size_t>(layout.nested_blocks) * sizeof(float));
    layout.nested_code = offset;
    offset = align_piece(offset + 256 * sizeof(float));
    layout.nested_offset = offset;
    offset = align_piece(offset + sizeof(float));
  }
  layout.bytes = offset;
  return layout;
}

void quantize_blockwise(const float* x, int64_t n, int64_t blocksize, const float* sorted_code, int code_size,
                        uint8_t* indices, float* absmax) {
  // Midpoints in fp32 as torch computes (code[:-1] + code[1:]) / 2; an index is the number of
  // midpoints below the value (torch.bucketize, right=False).
  std::vector<float> bounds(static_cast<size_t>(code_size - 1));
  for (int i = 0; i + 1 < code_size; ++i) bounds[static_cast<size_t>(i)] = (sorted_code[i] + sorted_code[i + 1]) / 2.0f;
  auto bucket = [&](float v) {
    return static_cast<uint8_t>(std::lower_bound(bounds.begin(), bounds.end(), v) - bounds.begin());
  };
  const int64_t full_blocks = n / blocksize;
  for (int64_t b = 0; b < full_blocks; ++b) {
    const float* block = x + b * blocksize;
    float peak = 0.0f;
    for (int64_t i = 0; i < blocksize; ++i) peak = std::max(peak, std::fabs(block[i]));
    absmax[b] = peak;  // as found; the reciprocal uses it clamped to 1e-38 (an all-zero block)
    const float inverse = 1.0f / std::max(peak, 1e-38f);
    for (int64_t i = 0; i < blocksize; ++i) indices[b * blocksize + i] = bucket(std::clamp(block[i] * inverse, -1.0f, 1.0f));
  }
  const int64_t rest = n - full_blocks * blocksize;
  if (rest) {  // bnb's short last block: its absmax is stored clamped and the values divided by it
    const float* block = x + full_blocks * blocksize;
    float peak = 0.0f;
    for (int64_t i = 0; i < rest; ++i) peak = std::max(peak, std::fabs(block[i]));
    peak = std::max(peak, 1e-38f);
    absmax[full_blocks] = peak;
    for (int64_t i = 0; i < rest; ++i) indices[full_blocks * blocksize + i] = bucket(std::clamp(block[i] / peak, -1.0f, 1.0f));
  }
}

void quantize_4bit(const float* x, int64_t n, const QuantConfig& config, uint8_t* payload) {
  const Quant4Layout layout = quant4_layout(n, config);
  std::memset(payload, 0, layout.bytes);
  const std::array<float, 16>& code = quant4_code(config.type);
  const SortedCode sorted = sorted_code(code);
  std::vector<uint8_t> indices(static_cast<size_t>(n + 1));
  std::vector<float> absmax(static_cast<size_t>(layout.blocks));
  quantize_blockwise(x, n, config.blocksize, sorted.values.data(), 16, indices.data(), absmax.data());
  // An odd count pads the scaled values with a 0 (torch.nn.functional.pad before bucketize).
  if (n % 2) indices[static_cast<size_t>(n)] = static_cast<uint8_t>(
      std::lower_bound(sorted.values.begin(), sorted.values.end(), 0.0f) - sorted.values.begin());
  uint8_t* packed = payload + layout.packed;
  for (int64_t i = 0; i < (n + 1) / 2; ++i) {
    const uint8_t high = sorted.index[indices[static_cast<size_t>(2 * i)]];
    const uint8_t low = sorted.index[indices[static_cast<size_t>(2 * i + 1)]];
    packed[i] = static_cast<uint8_t>((high << 4) | low);
  }
  std::memcpy(payload + layout.code, code.data(), sizeof(code));
  if (!layout.nested) {
    std::memcpy(payload + layout.absmax, absmax.data(), absmax.size() * sizeof(float));
    return;
  }
  const float offset = torch_mean(absmax.data(), layout.blocks);
  std::vector<float> centred(absmax.size());
  for (size_t b = 0; b < absmax.size(); ++b) centred[b] = absmax[b] - offset;
  std::vector<float> nested_absmax(static_cast<size_t>(layout.nested_blocks));
  quantize_blockwise(centred.data(), layout.blocks, kNestedBlocksize, kDynamic.data(), 256, payload + layout.absmax,
                     nested_absmax.data());
  std::memcpy(payload + layout.nested_absmax, nested_absmax.data(), nested_absmax.size() * sizeof(float));
  std::memcpy(payload + layout.nested_code, kDynamic.data(), sizeof(kDynamic));
  std::memcpy(payload + layout.nested_offset, &offset, sizeof(float));
}

void dequantize_4bit_range(const uint8_t* packed, const float* absmax, const float* code, int64_t blocksize,
                           int64_t begin, int64_t count, float* out) {
  for (int64_t k = 0; k < count; ++k) {
    const int64_t i = begin + k;
    const uint8_t byte = packed[i / 2];
    const int index = (i % 2) ? (byte & 0x0F) : (byte >> 4);
    out[k] = code[index] * absmax[i / blocksize];
  }
}

void dequantize_absmax(const uint8_t* qabsmax, const float* nested_absmax, const float* nested_code, float offset,
                       int64_t blocks, float* absmax) {
  for (int64_t b = 0; b < blocks; ++b) {
    const float scaled = nested_code[qabsmax[b]] * nested_absmax[b / kNestedBlocksize];  // rounded: no FMA
    absmax[b] = scaled + offset;                                                           // (-ffp-contract=off)
  }
}

std::vector<float> dequantize_payload(const uint8_t* payload, int64_t n, const QuantConfig& config) {
  const Quant4Layout layout = quant4_layout(n, config);
  std::vector<float> absmax(static_cast<size_t>(layout.blocks));
  auto floats = [&](size_t offset) { return reinterpret_cast<const float*>(payload + offset); };
  if (layout.nested) {
    float offset = 0.0f;
    std::memcpy(&offset, payload + layout.nested_offset, sizeof(float));
    dequantize_absmax(payload + layout.absmax, floats(layout.nested_absmax), floats(layout.nested_code), offset,
                      layout.blocks, absmax.data());
  } else {
    std::memcpy(absmax.data(), payload + layout.absmax, absmax.size() * sizeof(float));
  }
  std::vector<float> out(static_cast<size_t>(n));
  dequantize_4bit_range(payload + layout.packed, absmax.data(), floats(layout.code), config.blocksize, 0, n, out.data());
  return out;
}

}  // namespace zt
