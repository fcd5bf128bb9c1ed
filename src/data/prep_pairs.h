// `zerotune prep --pairs`: rows with a prompt, a chosen and a rejected response (rm-static's
// schema) -> pair shards (data/token_shards.h, record="pair") for `train --objective reward`.
//
// What DeepSpeed-Chat's step 2 builds (dschat/utils/data/data_utils.py, create_dataset_split,
// train_phase 2): chosen = prompt + chosen + end_of_conversation_token and rejected = prompt +
// rejected + end_of_conversation_token, each tokenized on its own with truncation=True and
// padding="max_length" to max_seq_len. zerotune builds each side exactly as a step-1 sample
// (data/prep.h, build_prep_sample: [BOS] + prompt + response + [EOS] or + --eot-token text, cut
// to --max-seq-len, keeping the beginning), and stores the shared prompt once. Padding happens
// per micro-batch, not to max_seq_len (data/pair_batch.h).
//
// The scored tokens (loss_mask 1) of a response are its own tokens, and the --eot-token text's
// when given, but not an EOS id appended after them: DeepSpeed-Chat's OPT recipe pads with
// pad = eos, so its RewardModel finds the sequence's end at that EOS (the first pad after the
// BOS, num_padding_at_beginning=1) and reads the reward at the token before it.
// A row where either side has no scored token left (the prompt fills --max-seq-len) is skipped
// and counted ("no response token within --max-seq-len"); DeepSpeed-Chat would keep it as a
// pair whose loss is log 2 and whose gradient is 0.
#pragma once
#include <string_view>

#include "data/token_shards.h"
#include "data/tokenizer.h"

namespace zt {

// One pair, both sides cut as above. `truncated` says whether either side was cut; `kept` is
// false when a side has no scored token left (the pair must then be skipped).
TokenPair build_prep_pair(const Tokenizer& tokenizer, std::string_view prompt, std::string_view chosen,
                          std::string_view rejected, int64_t max_seq_len, std::string_view eot_token, bool& truncated,
                          bool& kept);

}  // namespace zt
