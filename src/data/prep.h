// `zerotune prep`: JSONL/JSON rows (prompt + response columns) -> tokenized HDF5 shards in the
// format of data/token_shards.h, the DeepSpeed-Chat step-1 sample layout with the prompt
// masked out of the loss. (--pairs: preference pairs, data/prep_pairs.h; --format chat: chat
// `messages` rendered with the model's chat template, data/chat_data.h.)
//
// Sample layout (L <= max_seq_len):
//   tokens     [BOS] + encode(prompt) + encode_continuation(response) + [EOS], cut to max_seq_len
//              with --eot-token TEXT: [BOS] + encode(prompt) + encode_continuation(response + TEXT)
//   loss_mask  0 on BOS and the prompt, 1 on the response and EOS / TEXT (--loss-on all: 1
//              after the first token)
// [BOS] is the token the tokenizer puts before a text, when it has one (SentencePiece LLaMA:
// <s> = 1; OPT: </s> = 2, through its post-processor; Llama-3: <|begin_of_text|>; Qwen2: none).
// The prompt and the response are tokenized separately, so the prompt/response boundary is a
// token boundary even where the tokenizer would merge across it; the response is encoded
// without SentencePiece's dummy-prefix space (Tokenizer::encode_continuation), so a response
// that starts with a space (rm-static's chosen) gets exactly the ids HF's LlamaTokenizer gives
// it inside tokenizer(prompt + response). Byte-level BPE needs no such care (no dummy prefix),
// and its pre-tokenizer regexes cut before " word" anyway: the same ids as HF's
// tokenizer(prompt + response) for rm-static's rows.
//
// What DeepSpeed-Chat's step 1 builds (dschat/utils/data/data_utils.py, create_dataset_split,
// train_phase 1), and the zerotune spelling of each:
//   text = prompt + chosen + end_of_conversation_token   (raw_datasets.py: Dahoas/rm-static's
//   ids  = tokenizer(text, max_length, truncation=True)   get_prompt_and_chosen is prompt + chosen)
//   labels = ids where attention_mask is 1 (the prompt is trained on too: --loss-on all)
//   - end_of_conversation_token = tokenizer.eos_token, since PR #819 (Sep 2024, main.py passes
//     it): "</s>" for OPT and LLaMA, a special token that HF matches in the text, so ids end
//     with the EOS id. zerotune's default (no --eot-token) is exactly this, for both tokenizers.
//   - before that, the create_prompt_dataset default "<|endoftext|>", appended as plain text:
//     OPT's tokenizer has no such token, so BPE splits it into several tokens ("<", "|", ...),
//     and no EOS id follows. `--eot-token '<|endoftext|>'` reproduces it. (With DeepSpeed-Chat's
//     --add_eot_token, the string is first added to the tokenizer as an additional special
//     token, a new id past the vocabulary; zerotune does not add tokens: a tokenizer.json that
//     lists it among its added tokens gives that one id here too.)
//   OPT's tokenizer (tokenizer_config.json add_bos_token, or tokenizer.json's TemplateProcessing)
//   puts </s> (id 2) before the text: ids = [2] + prompt/response ids + [2] by default.
//   DeepSpeed-Chat pads every sample to max_seq_len with pad = eos; zerotune pads each micro-batch
//   to its longest sample only, and padding is never a target.
// SentencePiece tokenizers match no special-token strings in text, so for them an --eot-token
// that names a special token ("</s>") is encoded as plain text; leave the option out for EOS.
//
// The evaluation split (DeepSpeed-Chat's eval_dataset, on which step 1 reports perplexity),
// written as `<eval_split>-00000.h5 ...` next to the training split, built row by row the same way:
//   --eval-input FILE     the dataset's own evaluation rows (Dahoas/rm-static's "test" split,
//                         DeepSpeed-Chat's get_eval_data; local/jsonfile's eval.json)
//   --eval-fraction F     a dataset without one: F of the --input rows held out, chosen as
//                         DeepSpeed-Chat's "9,1" train_eval split chooses them (F = 0.1): the rows
//                         permuted by numpy.random.RandomState(--seed), the last F of the
//                         permutation (data/row_split.h); the training split gets the others
//   --data-split 2,4,4 --data-phase 1
//                         DeepSpeed-Chat's --data_split (main.py's default "2,4,4": 20% of the rows
//                         for step 1, 40% for step 2, 40% for step 3): each split keeps only its
//                         phase's portion of a seeded permutation of its rows (the training split
//                         of the training rows, the evaluation split of the evaluation rows)
// Row numbers count every row read (bad rows too), in file order across the files, as the rows
// of an HF dataset are numbered; each split's shards keep the chosen rows in file order.
// data/row_split.h draws DeepSpeed-Chat's permutations: the same --seed picks the same rows.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "data/token_shards.h"
#include "data/tokenizer.h"

namespace zt {

struct PrepOptions {
  std::vector<std::string> inputs;  // JSONL or JSON-array files, read in this order
  std::string tokenizer;            // model directory or tokenizer file (data/tokenizer.h, load_tokenizer)
  std::string out_dir;
  std::string split = "train";
  int64_t max_seq_len = 512;
  bool loss_on_all = false;  // --loss-on all (default: response)
  std::string eot_token;     // --eot-token: text appended to every response; empty: the EOS id
  int64_t shard_samples = 10000;
  std::string prompt_column = "prompt";
  std::string response_column = "chosen";
  bool chat = false;          // --format chat: rows of chat `messages` (data/chat_data.h)
  std::string chat_template;  // --chat-template FILE (with chat): instead of the model's chat_template
  bool pairs = false;                         // --pairs: preference pairs (data/prep_pairs.h)
  std::string rejected_column = "rejected";   // --rejected-column (with --pairs)
  bool skip_bad_rows = false;  // count bad rows as skipped instead of stopping
  bool force = false;          // replace existing shards of this split
  bool progress = false;       // a progress line on stderr about once a second
  // The evaluation split (see above): from eval_inputs, or eval_fraction of the inputs' rows.
  std::vector<std::string> eval_inputs;  // --eval-input
  double eval_fraction = 0.0;            // --eval-fraction, in [0, 1)
  std::string eval_split = "eval";       // --eval-split: the evaluation shards' prefix
  uint32_t seed = 1234;                  // --seed of the permutations (DeepSpeed-Chat's default)
  // --data-split 2,4,4 --data-phase 1: only this phase's portion of each split's rows (see above).
  std::vector<double> data_split;        // empty: every row
  int data_phase = 1;                    // 1-based, as DeepSpeed-Chat's train_phase
  bool writes_eval() const { return !eval_inputs.empty() || eval_fraction > 0.0; }
};

// What was written for one split.
struct SplitSummary {
  std::string split;
  int64_t rows_read = 0;
  int64_t samples_written = 0;
  int64_t truncated = 0;                   // samples cut to max_seq_len
  std::map<std::string, int64_t> skipped;  // reason -> rows skipped for it
  int64_t tokens = 0;                      // all tokens written
  int64_t target_tokens = 0;               // tokens with loss_mask 1
  int64_t length_p50 = 0, length_p90 = 0, length_p99 = 0, length_max = 0;  // sample lengths
  std::vector<std::string> shard_paths;    // the shards written, in order
};

// The training split's figures, and the evaluation split's when one was written.
struct PrepSummary : SplitSummary {
  std::optional<SplitSummary> eval;
  int64_t other_phase_rows = 0;  // rows left out by --data-split (other phases' portions)
};

// One sample from a prompt and a response; `truncated` says whether it was cut. `eot_token`:
// empty for [EOS] at the end, else the text appended to the response (see the layout above).
TokenSample build_prep_sample(const Tokenizer& tokenizer, std::string_view prompt, std::string_view response,
                              int64_t max_seq_len, bool loss_on_all, bool& truncated, std::string_view eot_token = {});

// Runs the whole preprocessing. On any error nothing is left under the output name (a new
// output directory is removed again; an existing one keeps exactly what it held).
PrepSummary run_prep(const PrepOptions& options);

// The end-of-run summary, several lines.
std::string format_prep_summary(const PrepSummary& summary, const PrepOptions& options);

}  // namespace zt
