// Code-point ranges and their UTF-8 byte-range sequences: how grammar.h lowers a character
// class to bytes. Free functions; thread-safe.
#ifndef FOLIO_COMMON_STRUCTURED_UTF8_RANGES_H_
#define FOLIO_COMMON_STRUCTURED_UTF8_RANGES_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace folio::structured {

using CodePointRanges = std::vector<std::pair<uint32_t, uint32_t>>;  // inclusive
// One UTF-8 encoding shape: byte i of the character lies in [seq[i].first, seq[i].second].
using Utf8Sequence = std::vector<std::pair<uint8_t, uint8_t>>;

// Sorted, merged, with the surrogates U+D800..U+DFFF and anything above U+10FFFF removed.
CodePointRanges NormalizeRanges(CodePointRanges ranges);
// Every scalar value not in `ranges` (which must be normalized).
CodePointRanges ComplementRanges(const CodePointRanges& ranges);
// Byte-range sequences whose union encodes exactly the scalar values in `ranges`
// (normalized), as the Rust regex crate's utf8-ranges does.
std::vector<Utf8Sequence> Utf8Sequences(const CodePointRanges& ranges);
// The UTF-8 encoding of scalar value `cp`.
std::string EncodeUtf8(uint32_t cp);

}  // namespace folio::structured

#endif  // FOLIO_COMMON_STRUCTURED_UTF8_RANGES_H_
