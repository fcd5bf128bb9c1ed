// Normalization through ICU's Normalizer2 (data/unicode_normalizer.h): UTF-8 -> UTF-16 ->
// normalized -> UTF-8, skipped when ICU's quick check says the text is already in the form
// (most text is NFC already).
#include "data/unicode_normalizer.h"

#include <unicode/normalizer2.h>
#include <unicode/unistr.h>
#include <unicode/ustring.h>
#include <unicode/utypes.h>

#include "core/error.h"

namespace zt {
namespace {

const icu::Normalizer2* icu_instance(NormalForm form) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* instance = nullptr;
  switch (form) {
    case NormalForm::kNFC: instance = icu::Normalizer2::getNFCInstance(status); break;
    case NormalForm::kNFD: instance = icu::Normalizer2::getNFDInstance(status); break;
    case NormalForm::kNFKC: instance = icu::Normalizer2::getNFKCInstance(status); break;
    case NormalForm::kNFKD: instance = icu::Normalizer2::getNFKDInstance(status); break;
  }
  ZT_CHECK(U_SUCCESS(status) && instance != nullptr, "ICU has no Unicode normalizer (", u_errorName(status),
           "): is its data library (libicudata) installed?");
  return instance;
}

// Whether `text` is valid UTF-8 (ICU's converter would replace broken bytes silently).
bool valid_utf8(std::string_view text) {
  UErrorCode status = U_ZERO_ERROR;
  int32_t length = 0;
  u_strFromUTF8(nullptr, 0, &length, text.data(), static_cast<int32_t>(text.size()), &status);
  return status != U_INVALID_CHAR_FOUND && status != U_ILLEGAL_CHAR_FOUND;
}

}  // namespace

UnicodeNormalizer::UnicodeNormalizer(NormalForm form) : form_(form), instance_(icu_instance(form)) {}

std::string UnicodeNormalizer::normalize(std::string_view text) const {
  ZT_CHECK(text.size() < static_cast<size_t>(INT32_MAX), "a text of ", text.size(), " bytes is too long to normalize");
  ZT_CHECK(valid_utf8(text), "a text to tokenize is not valid UTF-8");
  const auto* normalizer = static_cast<const icu::Normalizer2*>(instance_);
  const icu::UnicodeString source = icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
  UErrorCode status = U_ZERO_ERROR;
  if (normalizer->isNormalized(source, status) && U_SUCCESS(status)) return std::string(text);
  status = U_ZERO_ERROR;
  const icu::UnicodeString normalized = normalizer->normalize(source, status);
  ZT_CHECK(U_SUCCESS(status), "ICU could not normalize a text: ", u_errorName(status));
  std::string result;
  normalized.toUTF8String(result);
  return result;
}

}  // namespace zt
