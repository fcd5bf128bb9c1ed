// `zerotune prep`: JSONL/JSON rows (prompt + response columns) -> tokenized HDF5 shards in the
// format of data/token_shards.h, the DeepSpeed-Chat step-1 sample layout with the prompt
// masked out of the loss.
//
// Sample layout (L <= max_seq_len):
//   tokens     [BOS] + encode(prompt) + encode_continuation(response) + [EOS], cut to max_seq_len
//   loss_mask  0 on BOS and the prompt, 1 on the response and EOS (--loss-on all: 1 after BOS)
// The prompt and the response are tokenized separately, so the prompt/response boundary is a
// token boundary even where SentencePiece would merge across it; the response is encoded
// without SentencePiece's dummy-prefix space (Tokenizer::encode_continuation), so a response
// that starts with a space (rm-static's chosen) gets exactly the ids HF's LlamaTokenizer gives
// it inside tokenizer(prompt + response).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "data/token_shards.h"
#include "data/tokenizer.h"

namespace zt {

struct PrepOptions {
  std::vector<std::string> inputs;  // JSONL or JSON-array files, read in this order
  std::string tokenizer;            // model directory with tokenizer.model, or a .model file
  std::string out_dir;
  std::string split = "train";
  int64_t max_seq_len = 512;
  bool loss_on_all = false;  // --loss-on all (default: response)
  int64_t shard_samples = 10000;
  std::string prompt_column = "prompt";
  std::string response_column = "chosen";
  bool skip_bad_rows = false;  // count bad rows as skipped instead of stopping
  bool force = false;          // replace existing shards of this split
  bool progress = false;       // a progress line on stderr about once a second
};

struct PrepSummary {
  int64_t rows_read = 0;
  int64_t samples_written = 0;
  int64_t truncated = 0;                   // samples cut to max_seq_len
  std::map<std::string, int64_t> skipped;  // reason -> rows skipped for it
  int64_t tokens = 0;                      // all tokens written
  int64_t target_tokens = 0;               // tokens with loss_mask 1
  int64_t length_p50 = 0, length_p90 = 0, length_p99 = 0, length_max = 0;  // sample lengths
  std::vector<std::string> shard_paths;    // the shards written, in order
};

// One sample from a prompt and a response; `truncated` says whether it was cut.
TokenSample build_prep_sample(const Tokenizer& tokenizer, std::string_view prompt, std::string_view response,
                              int64_t max_seq_len, bool loss_on_all, bool& truncated);

// Runs the whole preprocessing. On any error nothing is left under the output name (a new
// output directory is removed again; an existing one keeps exactly what it held).
PrepSummary run_prep(const PrepOptions& options);

// The end-of-run summary, several lines.
std::string format_prep_summary(const PrepSummary& summary, const PrepOptions& options);

}  // namespace zt
