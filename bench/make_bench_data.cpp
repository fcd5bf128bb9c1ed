// Benchmark data: SAMPLES samples of exactly SEQ random token ids in one token shard
// (OUT_DIR/train-00000.h5, the format of data/token_shards.h), so every micro-batch of a
// benchmark run is full: B x SEQ real tokens, no padding, every position after the first a
// training target. Ids are uniform in [3, VOCAB) (0-2 are pad/bos/eos), from zerotune's
// counter-based RNG, so the same arguments give the same shard.
//   make_bench_data OUT_DIR --seq 2048 --samples 8 --vocab 32000 [--seed 1]
#include "bench_util.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "data/token_shards.h"

using namespace zt;

int main(int argc, char** argv) {
  try {
    ZT_CHECK(argc >= 2 && argv[1][0] != '-',
             "usage: make_bench_data OUT_DIR --seq 2048 --samples 8 --vocab 32000 [--seed 1]");
    const std::string out_dir = argv[1];
    const int64_t seq = bench::flag(argc, argv, "--seq", 0), count = bench::flag(argc, argv, "--samples", 0);
    const int64_t vocab = bench::flag(argc, argv, "--vocab", 0), seed = bench::flag(argc, argv, "--seed", 1);
    ZT_CHECK(seq >= 2 && count >= 1 && vocab > 3,
             "need --seq >= 2, --samples >= 1 and --vocab > 3 (got ", seq, ", ", count, ", ", vocab, ")");

    std::vector<TokenSample> samples(static_cast<size_t>(count));
    for (int64_t s = 0; s < count; ++s) {
      TokenSample& sample = samples[static_cast<size_t>(s)];
      sample.tokens.resize(static_cast<size_t>(seq));        // [SEQ]
      sample.loss_mask.assign(static_cast<size_t>(seq), 1);  // [SEQ]; position 0 is never a target
      sample.loss_mask[0] = 0;
      const RngKey key{static_cast<uint64_t>(seed), rng_stream(RngPurpose::Test, static_cast<uint32_t>(s)), 0};
      for (int64_t t = 0; t < seq; ++t) {
        const float u = rng_uniform(key, static_cast<uint64_t>(t));  // [0, 1)
        sample.tokens[static_cast<size_t>(t)] =
            static_cast<int32_t>(std::min<int64_t>(vocab - 1, 3 + static_cast<int64_t>(u * static_cast<float>(vocab - 3))));
      }
    }
    ShardAttributes attrs;
    attrs.vocab_size = vocab;
    attrs.bos_id = 1;
    attrs.eos_id = 2;
    attrs.pad_id = 0;
    attrs.max_seq_len = seq;
    attrs.source = cat("bench/make_bench_data --seq ", seq, " --samples ", count, " --seed ", seed);
    std::filesystem::create_directories(out_dir);
    const std::string path = (std::filesystem::path(out_dir) / "train-00000.h5").string();
    write_token_shard(path, samples, attrs);
    std::printf("make_bench_data: %lld samples of %lld tokens (vocab %lld) in %s\n", static_cast<long long>(count),
                static_cast<long long>(seq), static_cast<long long>(vocab), path.c_str());
    return 0;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "make_bench_data: %s\n", error.what());
    return 1;
  }
}
