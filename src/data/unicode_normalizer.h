// Unicode normalization forms (NFC, NFD, NFKC, NFKD) of UTF-8 text through ICU: the
// `normalizer` of an HF tokenizer.json (Qwen2 ships NFC), applied before pre-tokenization.
#pragma once
#include <string>
#include <string_view>

namespace zt {

enum class NormalForm { kNFC, kNFD, kNFKC, kNFKD };

class UnicodeNormalizer {
 public:
  explicit UnicodeNormalizer(NormalForm form);
  // `text` in the normal form. Text that is not valid UTF-8 is a zt::Error.
  std::string normalize(std::string_view text) const;
  NormalForm form() const { return form_; }

 private:
  NormalForm form_;
  const void* instance_;  // the icu::Normalizer2 singleton (owned by ICU); keeps ICU out of this header
};

}  // namespace zt
