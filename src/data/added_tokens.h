// Added tokens (HF tokenizers' AddedVocabulary): strings such as "</s>" or "<|im_start|>" that
// are found in the raw text before anything else and become their one id, whatever the BPE
// model would make of them. A tokenizer.json lists them under "added_tokens"; the HF
// special-token entries of tokenizer_config.json / special_tokens_map.json add more.
//
// Matching as tokenizers 0.19 does it: the leftmost match, the longest one there, then the search
// goes on after it. A `single_word` token counts only when no word character touches it on
// either side (Rust regex's \w, matched here by PCRE2); `lstrip` / `rstrip` take the whitespace
// before / after it into the token. Tokens with `normalized` true are looked for in the
// normalized text (after the normalizer), the others in the raw text (two matchers).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace zt {

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool special = false;      // a special token (BOS, EOS, ...); matched in text like any added token
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;   // matched in the normalized text
};

// A piece of a text: plain text still to be tokenized, or an added token found there.
struct TextPiece {
  std::string text;       // the piece's text (for a token: the matched text, stripped spaces included)
  int32_t token_id = -1;  // >= 0: this piece is that added token
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  explicit AddedTokenMatcher(std::vector<AddedToken> tokens);  // tokens with empty content are ignored

  // Appends the pieces of `text` to `pieces`: added tokens and the plain text between them
  // (no empty plain pieces).
  void split(std::string_view text, std::vector<TextPiece>& pieces) const;

  bool empty() const { return tokens_.empty(); }

 private:
  // The longest token that matches at `at` (index into tokens_), or -1.
  int longest_at(std::string_view text, size_t at) const;
  // Whether the token matched at [begin, end) stands as a whole word (single_word's rule).
  static bool is_single_word(std::string_view text, size_t begin, size_t end);

  std::vector<AddedToken> tokens_;
  std::vector<std::vector<int>> by_first_byte_ = std::vector<std::vector<int>>(256);  // longest first
};

}  // namespace zt
