// Small strict UTF-8 helpers shared by the tokenizer and the incremental decoder.
// "Strict" follows Unicode Table 3-7: no overlong forms, no surrogates, nothing above
// U+10FFFF, which is also what SentencePiece accepts when it decodes byte pieces.
// Stateless free functions; thread-safe.
#ifndef FOLIO_COMMON_TOKENIZER_UTF8_H_
#define FOLIO_COMMON_TOKENIZER_UTF8_H_

#include <cstddef>
#include <string>
#include <string_view>

namespace folio::utf8 {

// U+FFFD REPLACEMENT CHARACTER, what an invalid byte decodes to.
inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";

// What the bytes at the start of a buffer are.
struct Prefix {
  enum class Kind {
    kComplete,    // `length` bytes form one valid character
    kIncomplete,  // all bytes so far are a valid start of a character; more are needed
    kInvalid,     // the first byte can never start a valid character here; `length` is 1
  };
  Kind kind;
  size_t length;
};

// Classifies the bytes at the start of `bytes`, which must not be empty.
Prefix ClassifyPrefix(std::string_view bytes);

// Returns the byte offset of the first byte of `text` that is not part of a valid
// character (a truncated character at the end counts), or std::string_view::npos
// when `text` is valid UTF-8.
size_t FindInvalid(std::string_view text);

// Appends `bytes` to `out`, replacing every byte that is not part of a complete
// valid character by U+FFFD (one replacement per byte, as SentencePiece does).
void AppendWithReplacement(std::string_view bytes, std::string* out);

}  // namespace folio::utf8

#endif  // FOLIO_COMMON_TOKENIZER_UTF8_H_
