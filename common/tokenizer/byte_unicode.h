// The GPT-2 byte-to-unicode mapping that byte-level BPE vocabularies are written in.
//
// Every byte value 0..255 maps to one printable code point: the bytes that are already
// printable Latin-1 ('!'..'~', U+00A1..U+00AC, U+00AE..U+00FF) map to themselves, the
// other 68 (controls, space, U+00AD ...) to U+0100, U+0101, ... in byte order. So a
// space is "Ġ" (U+0120) and a newline "Ċ" (U+010A). A vocabulary piece is the mapped
// form of the raw bytes it stands for.
//
// Stateless free functions over constant tables; thread-safe.
#ifndef FOLIO_COMMON_TOKENIZER_BYTE_UNICODE_H_
#define FOLIO_COMMON_TOKENIZER_BYTE_UNICODE_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace folio::byte_unicode {

// The UTF-8 form (2 bytes at most) of the code point byte `b` maps to.
std::string_view ByteToUtf8(uint8_t b);

// Appends the mapped form of every byte of `bytes` to `out`.
void Encode(std::string_view bytes, std::string* out);

// Appends the raw bytes that `mapped` stands for to `out`. Returns false, leaving `out`
// with the bytes decoded so far, when `mapped` holds a character outside the mapping's
// 256 code points or is not valid UTF-8.
bool Decode(std::string_view mapped, std::string* out);

}  // namespace folio::byte_unicode

#endif  // FOLIO_COMMON_TOKENIZER_BYTE_UNICODE_H_
