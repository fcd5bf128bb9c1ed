// Tokenized data on disk: the HDF5 token-shard format of DESIGN.md ("Tokenized dataset"), its
// writer (one shard file) and its reader (TokenDataset: a directory of shards seen as one
// global list of samples, read one sample at a time with hyperslab reads).
//
// One shard holds N samples:
//   tokens     int32 [T]    all samples' token ids, concatenated
//   loss_mask  uint8 [T]    1 where the token is a training target (loss_mask[0] of a sample is 0)
//   offsets    int64 [N+1]  sample i is tokens[offsets[i]:offsets[i+1]]; offsets[0] = 0,
//                           strictly increasing (every sample has at least one token), offsets[N] = T
//   attributes format="zerotune-tokens", version=1, vocab_size, bos_id, eos_id, pad_id,
//              tokenizer_sha256, max_seq_len, split, source
//
// A pair shard (`zerotune prep --pairs`, preference data for `train --objective reward`) is the
// same format at version=2 with attribute record="pair" (a version-1 reader refuses it instead
// of training on concatenated responses). Record i = tokens[offsets[i]:offsets[i+1]] is
//   [prompt (P) | chosen response (Rc) | rejected response (Rr)]   (the prompt stored once)
//   prompt_lengths  int64 [N]  P of each record (BOS included)
//   chosen_lengths  int64 [N]  Rc of each record; Rr = record length - P - Rc
//   loss_mask       0 on the prompt, 1 on the response tokens the reward is read from (the
//                   response's own tokens), 0 on an end-of-text EOS id after them
// Each side's sequence (prompt + that response) is at most max_seq_len tokens and both responses
// hold at least one token with loss_mask 1. Sample shards stay version 1, byte for byte.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "core/hdf5_util.h"

namespace zt {

inline constexpr const char* kTokenShardFormat = "zerotune-tokens";
inline constexpr int64_t kTokenShardVersion = 1;
inline constexpr int64_t kPairShardVersion = 2;  // record="pair" (see above)

// The attributes every shard carries. bos_id/eos_id may be -1 for a tokenizer without that
// token; pad_id must be a real id (it is fed to the model on padded positions, masked out).
struct ShardAttributes {
  int64_t vocab_size = 0;
  int64_t bos_id = -1;
  int64_t eos_id = -1;
  int64_t pad_id = 0;
  std::string tokenizer_sha256;
  int64_t max_seq_len = 0;  // no sample is longer than this
  std::string split = "train";
  std::string source;  // where the samples came from (input file name), informational
};

// One sample: its token ids and, per token, whether it is a training target.
struct TokenSample {
  std::vector<int32_t> tokens;     // [L]
  std::vector<uint8_t> loss_mask;  // [L], values 0 or 1
};

// One preference pair: the shared prompt once, then each response (loss_mask: see the top).
struct TokenPair {
  std::vector<int32_t> prompt;  // [P] BOS + prompt ids
  TokenSample chosen;           // [Rc] the chosen response's ids (+ EOS), its loss_mask
  TokenSample rejected;         // [Rr] the rejected response's
  // One side as a model row: prompt + response ([P + R]), loss_mask 0 on the prompt.
  TokenSample chosen_sequence() const;
  TokenSample rejected_sequence() const;
};

// Writes one shard holding `samples` (chunked, deflate-compressed) to `path`. The file is
// written as path + ".tmp" and renamed, so a reader never sees a half-written shard. The same
// input gives the same bytes (HDF5 object timestamps are turned off). Checks every sample
// against `attrs` (ids in [0, vocab_size), length in [1, max_seq_len], mask values 0/1).
void write_token_shard(const std::string& path, std::span<const TokenSample> samples,
                       const ShardAttributes& attrs);

// Writes one pair shard (version 2, record="pair") holding `pairs`, as write_token_shard does;
// checks that each side fits max_seq_len and has a scored response token.
void write_pair_shard(const std::string& path, std::span<const TokenPair> pairs, const ShardAttributes& attrs);

// The name of a shard's split from its file name: "train-00003.h5" -> "train". A name that does
// not end in "-<digits>.h5" is its own split ("extra.h5" -> "extra").
std::string shard_split_from_file_name(const std::string& file_name);

// Every HDF5 call of token_shards.cpp holds hdf5_mutex() (core/hdf5_util.h): HDF5 builds are not
// all thread-safe, and the batch prefetcher reads on its own thread.

// One shard of a TokenDataset: where it is and what it holds (from its offsets, no token read).
struct ShardInfo {
  std::string path;
  int64_t first_sample = 0;  // global index of its first sample
  int64_t num_samples = 0;   // N
  int64_t num_tokens = 0;    // T
};

// A directory of shards (or a single shard file) as one list of samples. The global sample
// index runs over all shards in file-name order. Shard files stay open for the dataset's
// lifetime; only each shard's offsets are held in memory. The const functions may be called
// from several threads at once (reads are serialized by hdf5_mutex()).
class TokenDataset {
 public:
  // Opens every `<split>-*.h5` in `path` (or `path` itself when it is a file) and validates
  // each shard and that the shards agree. With an empty `split` the directory must hold one
  // split only. Every problem is a zt::Error naming the file.
  static TokenDataset open(const std::string& path, const std::string& split = "");

  TokenDataset(TokenDataset&&) noexcept;
  TokenDataset& operator=(TokenDataset&&) noexcept;
  ~TokenDataset();

  // Whether the shards hold preference pairs (prep --pairs; all shards alike, or open() fails).
  // Then a "sample" is a pair: num_samples() counts pairs (the sampler shards whole pairs),
  // sample_length() is its longer side's sequence, and read_sample() refuses (read_pair()).
  bool holds_pairs() const;
  int64_t num_samples() const;
  int64_t sample_length(int64_t index) const;  // tokens in sample `index` (from the offsets, no read)
  int64_t longest_sample() const;
  TokenSample read_sample(int64_t index) const;
  TokenPair read_pair(int64_t index) const;  // pair shards only
  std::vector<uint8_t> read_loss_mask(int64_t index) const;  // [L] (no token read)
  // The training targets of the whole dataset: the sum over samples of loss_mask[1:] (what the
  // loss averages over). Streams each shard's loss_mask in blocks; reads no tokens.
  int64_t total_target_tokens() const;

  // The attributes the shards share (those of the first shard; max_seq_len is the largest).
  const ShardAttributes& attributes() const;
  const std::vector<std::string>& shard_paths() const;
  std::vector<ShardInfo> shard_infos() const;  // [shards] in file-name order

 private:
  struct Impl;
  TokenSample read_record(int64_t index) const;  // record `index` as stored (a sample or a pair)
  explicit TokenDataset(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace zt
