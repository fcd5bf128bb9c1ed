// The BPE model of a byte-level tokenizer: a vocabulary (token string -> id) and a ranked list
// of merges, turning one pre-tokenized word into ids the way HF tokenizers 0.19's BPE does:
//   - ignore_merges (Llama-3): a word that is a vocabulary entry is that one token;
//   - otherwise each character of the word is a symbol, and while some pair of neighbouring
//     symbols has a merge, the pair with the lowest rank is merged (the leftmost among equal
//     ranks); what is left are the tokens.
// The rank of a merge is its index in the merges list (when a pair is listed twice, the later
// entry counts, as in tokenizers).
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace zt {

// Hashing that lets an unordered_map<std::string, ...> be searched with a string_view.
struct StringViewHash {
  using is_transparent = void;
  size_t operator()(std::string_view text) const { return std::hash<std::string_view>{}(text); }
};
using TokenVocabulary = std::unordered_map<std::string, int32_t, StringViewHash, std::equal_to<>>;

struct BpeModelSpec {
  TokenVocabulary vocab;
  std::vector<std::pair<std::string, std::string>> merges;  // in rank order
  bool ignore_merges = false;
  std::optional<std::string> unk_token;  // byte-level tokenizers have none
  bool fuse_unk = false;
  std::string source;  // the file and key the spec came from, for errors ("tokenizer.json: model.merges")
};

// One merge written as "left right" (tokenizer.json's older form, merges.txt's lines): exactly
// one space between two non-empty tokens, else a zt::Error naming `where`.
std::pair<std::string, std::string> parse_merge_line(std::string_view line, const std::string& where);

class BpeModel {
 public:
  // Checks the spec: ids in [0, 2^26), every merge's two parts and their concatenation in
  // the vocabulary, the unk token in it. Errors name spec.source and the offending entry.
  explicit BpeModel(BpeModelSpec spec);

  // Appends the ids of one word (characters as in the vocabulary: byte-level mapped). A
  // character the vocabulary lacks becomes the unk token; without one it is a zt::Error (HF
  // drops the character silently).
  void tokenize(std::string_view word, std::vector<int32_t>& ids) const;

  // The string of `id`, or nullptr when the vocabulary has no such id.
  const std::string* token(int32_t id) const;
  std::optional<int32_t> id(std::string_view token) const;
  int32_t max_id() const { return max_id_; }  // -1 for an empty vocabulary

 private:
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }
  const Merge* merge_of(int32_t left, int32_t right) const;

  TokenVocabulary vocab_;
  std::vector<const std::string*> token_of_id_;  // [max_id + 1] (nullptr for unused ids)
  std::unordered_map<uint64_t, Merge> merges_;    // (left id, right id) -> rank and merged id
  bool ignore_merges_ = false;
  int32_t unk_id_ = -1;
  bool fuse_unk_ = false;
  int32_t max_id_ = -1;
  std::string source_;
};

}  // namespace zt
