// ZeRO++'s block quantization on the CUDA backend against the CPU backend, bit for bit: int8 and
// int4, every storage dtype, sizes that leave a short last block (and half an int4 byte), blocks
// larger than a thread block (2048: qwZ's) and smaller, an all-zero block and a non-finite value;
// and the dequantization written and accumulated into every dtype.
#include <boost/test/unit_test.hpp>

#include "core/block_quant.h"
#include "gpu_test_util.h"

namespace {

using namespace zt;
using namespace zt::gpu_test;

std::vector<float> bytes_as_floats(const std::vector<uint8_t>& bytes) { return {bytes.begin(), bytes.end()}; }

BOOST_AUTO_TEST_SUITE(cuda_block_quant)

BOOST_AUTO_TEST_CASE(quantize_and_dequantize_match_the_cpu_bit_for_bit) {
  const float inf = std::numeric_limits<float>::infinity();
  for (const DType dtype : {DType::F32, DType::BF16, DType::F16})
    for (const int bits : {8, 4})
      for (const int64_t block : {int64_t{2048}, int64_t{64}}) {
        const int64_t n = 2 * block + 37;
        const std::string what = cat(dtype_name(dtype), " int", bits, " block ", block);
        std::vector<float> values = rounded(test::random_floats(static_cast<size_t>(n), 11, -2.0f, 2.0f), dtype);
        for (int64_t i = block; i < 2 * block; ++i) values[static_cast<size_t>(i)] = 0.0f;  // an all-zero block
        values[static_cast<size_t>(n - 3)] = -inf;                                         // the short last block
        const int64_t bytes = block_quant_bytes(n, bits), blocks = block_quant_blocks(n, block);
        // CPU reference
        std::vector<float> cpu_in = values, cpu_scales(static_cast<size_t>(blocks));
        std::vector<uint8_t> cpu_codes(static_cast<size_t>(bytes));
        std::vector<float> cpu_in_rounded = cpu_in;
        Buffer cpu_typed(cpu(), static_cast<size_t>(n) * dtype_size(dtype));
        Tensor cpu_x = cpu_typed.view(dtype, {n});
        cpu().copy(cpu_x, view(cpu_in_rounded, {n}));
        Tensor cpu_q(cpu_codes.data(), DType::U8, {bytes});
        cpu().quantize_blocks(cpu_q, view(cpu_scales, {blocks}), cpu_x, bits, block);
        // GPU
        DeviceTensor x = upload(values, dtype, {n});
        DeviceTensor q = upload_integers(std::vector<uint8_t>(static_cast<size_t>(bytes), 0xAB), {bytes});
        DeviceTensor scales = poisoned(DType::F32, {blocks});
        gpu().quantize_blocks(q, scales, x, bits, block);
        std::vector<uint8_t> gpu_codes(static_cast<size_t>(bytes));
        gpu().copy(Tensor(gpu_codes.data(), DType::U8, {bytes}), q);
        check_identical(bytes_as_floats(gpu_codes), bytes_as_floats(cpu_codes), what + " codes");
        check_identical(download(scales), cpu_scales, what + " scales");
        // Dequantize: written, and added to a value.
        for (const bool accumulate : {false, true}) {
          std::vector<float> start = rounded(test::random_floats(static_cast<size_t>(n), 5), dtype);
          Buffer cpu_out_buffer(cpu(), static_cast<size_t>(n) * dtype_size(dtype));
          Tensor cpu_out = cpu_out_buffer.view(dtype, {n});
          cpu().copy(cpu_out, view(start, {n}));
          cpu().dequantize_blocks(cpu_out, cpu_q, view(cpu_scales, {blocks}), bits, block, accumulate);
          std::vector<float> expected(static_cast<size_t>(n));
          cpu().copy(view(expected, {n}), cpu_out);
          DeviceTensor out = upload(start, dtype, {n});
          gpu().dequantize_blocks(out, q, scales, bits, block, accumulate);
          check_identical(download(out), expected, what + (accumulate ? " accumulated" : " dequantized"));
        }
      }
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace
