// Unicode normalization of text before it is tokenized, for vocabularies whose format
// asks for it (a Hugging Face tokenizer.json with an NFC normalizer). On ICU
// (Debian's libicu-dev). GGUF vocabularies never set one: llama.cpp's GGUF path does not
// normalize, and Folio follows the format being loaded (docs/architecture.md).
// Free functions; thread-safe (ICU's normalizer instances are immutable singletons).
#ifndef FOLIO_COMMON_TOKENIZER_NORMALIZER_H_
#define FOLIO_COMMON_TOKENIZER_NORMALIZER_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace folio {

// The normalizer names Vocab::normalizer may hold: "" (none) and "NFC".
inline constexpr std::string_view kNfcNormalizer = "NFC";
absl::Status CheckNormalizerName(std::string_view name);

// Writes the NFC form of `text` (valid UTF-8) to `out`; returns false, leaving `out`
// untouched, when `text` is already in NFC (the common case, checked without copying).
bool NormalizeNfc(std::string_view text, std::string* out);

}  // namespace folio

#endif  // FOLIO_COMMON_TOKENIZER_NORMALIZER_H_
