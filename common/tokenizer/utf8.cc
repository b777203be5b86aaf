#include "common/tokenizer/utf8.h"

#include <algorithm>
#include <cstdint>

namespace folio::utf8 {
namespace {

// Length of the sequence a lead byte starts, or 0 when it cannot lead one
// (continuation bytes, C0/C1 overlong leads, F5..FF).
size_t SequenceLength(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

// Whether `b` may follow `lead` at position `pos` (1-based after the lead). Only the
// second byte has lead-dependent limits; they exclude overlongs, surrogates and
// code points above U+10FFFF.
bool IsValidContinuation(uint8_t lead, size_t pos, uint8_t b) {
  uint8_t lo = 0x80;
  uint8_t hi = 0xBF;
  if (pos == 1) {
    if (lead == 0xE0) lo = 0xA0;
    if (lead == 0xED) hi = 0x9F;
    if (lead == 0xF0) lo = 0x90;
    if (lead == 0xF4) hi = 0x8F;
  }
  return b >= lo && b <= hi;
}

}  // namespace

Prefix ClassifyPrefix(std::string_view bytes) {
  const auto lead = static_cast<uint8_t>(bytes[0]);
  const size_t need = SequenceLength(lead);
  if (need == 0) return {Prefix::Kind::kInvalid, 1};
  const size_t have = std::min(need, bytes.size());
  for (size_t i = 1; i < have; ++i) {
    if (!IsValidContinuation(lead, i, static_cast<uint8_t>(bytes[i]))) {
      return {Prefix::Kind::kInvalid, 1};
    }
  }
  if (have < need) return {Prefix::Kind::kIncomplete, have};
  return {Prefix::Kind::kComplete, need};
}

size_t FindInvalid(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    const Prefix p = ClassifyPrefix(text.substr(pos));
    if (p.kind != Prefix::Kind::kComplete) return pos;
    pos += p.length;
  }
  return std::string_view::npos;
}

void AppendWithReplacement(std::string_view bytes, std::string* out) {
  size_t pos = 0;
  while (pos < bytes.size()) {
    const Prefix p = ClassifyPrefix(bytes.substr(pos));
    if (p.kind == Prefix::Kind::kComplete) {
      out->append(bytes.substr(pos, p.length));
      pos += p.length;
    } else {
      // Consume a single byte, so that a valid character starting inside a broken
      // sequence is still recovered.
      out->append(kReplacementChar);
      pos += 1;
    }
  }
}

}  // namespace folio::utf8
