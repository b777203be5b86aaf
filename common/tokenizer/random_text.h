// Test-only: random valid UTF-8 for the tokenizer property tests. Code points are drawn
// from every plane (no surrogates), mixed with spaces, tabs, newlines, digits and
// apostrophes so that every pre-tokenizer branch is taken.
#ifndef FOLIO_COMMON_TOKENIZER_RANDOM_TEXT_H_
#define FOLIO_COMMON_TOKENIZER_RANDOM_TEXT_H_

#include <random>
#include <string>

namespace folio::testing {

// Up to `max_chars` characters.
std::string RandomUnicode(std::mt19937& rng, int max_chars);

}  // namespace folio::testing

#endif  // FOLIO_COMMON_TOKENIZER_RANDOM_TEXT_H_
