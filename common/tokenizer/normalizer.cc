#include "common/tokenizer/normalizer.h"

#include <unicode/normalizer2.h>
#include <unicode/unistr.h>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace folio {

absl::Status CheckNormalizerName(std::string_view name) {
  if (name.empty() || name == kNfcNormalizer) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("vocab normalizer '", std::string(name), "' is unknown (supported: none, NFC)"));
}

bool NormalizeNfc(std::string_view text, std::string* out) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(status);
  CHECK(U_SUCCESS(status)) << "ICU has no NFC data: " << u_errorName(status);
  // ASCII is always in NFC: skip ICU's UTF-16 round trip for it.
  bool ascii = true;
  for (char c : text) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
  if (ascii) return false;
  const icu::UnicodeString s = icu::UnicodeString::fromUTF8(
      icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
  if (nfc->isNormalized(s, status) && U_SUCCESS(status)) return false;
  status = U_ZERO_ERROR;
  const icu::UnicodeString normalized = nfc->normalize(s, status);
  CHECK(U_SUCCESS(status)) << "ICU NFC failed: " << u_errorName(status);
  out->clear();
  normalized.toUTF8String(*out);
  return true;
}

}  // namespace folio
