// The pre-tokenizer of a byte-level BPE tokenizer: how a piece of text (the text between added
// tokens, normalized) is cut into words before BPE runs on each word. The forms HF tokenizers
// ships, as a chain of steps each applied to every piece the previous step made:
//   ByteLevel(add_prefix_space, use_regex)       GPT-2, OPT, RoBERTa: one ByteLevel step
//   Sequence[Split(Regex, Isolated), ...,         Llama-3, Qwen2: the model's regex cuts first,
//            ByteLevel(use_regex=false)]          then ByteLevel only maps bytes
// Split(Isolated) makes every regex match and every stretch between matches a piece of its own.
// ByteLevel prepends a space to each piece that does not start with one when add_prefix_space
// is set, cuts with GPT-2's regex when use_regex is set, and maps each piece's bytes to
// characters (data/byte_level.h): the words the BPE model's vocabulary is written in.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "data/pcre2_regex.h"

namespace zt {

// GPT-2's pre-tokenizer regex (tokenizers' ByteLevel with use_regex): contractions, letters
// with an optional leading space, numbers likewise, other symbols likewise, and whitespace
// runs (a run before a non-space leaves its last space to the next word).
extern const char* const kGpt2PreTokenizerRegex;

class ByteLevelPreTokenizer {
 public:
  // Appends a Split(Isolated) step; the ByteLevel step always runs after every Split.
  void add_split(Pcre2Regex regex);
  void set_byte_level(bool add_prefix_space, bool use_regex);

  // Appends the words of `text` (byte-level mapped) to `words`. no_prefix_space_on_first: the
  // first piece gets no prefix space (`text` begins a continuation, where HF's tokenization of
  // the whole text would not have started a new piece).
  void pre_tokenize(std::string_view text, bool no_prefix_space_on_first, std::vector<std::string>& words) const;

  bool add_prefix_space() const { return add_prefix_space_; }

 private:
  std::vector<Pcre2Regex> splits_;
  bool add_prefix_space_ = false;
  bool use_regex_ = true;
  Pcre2Regex gpt2_regex_{kGpt2PreTokenizerRegex, Pcre2Regex::Syntax::kRegex, "ByteLevel pre-tokenizer"};
};

}  // namespace zt
