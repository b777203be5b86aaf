#include "common/tokenizer/byte_unicode.h"

#include <array>

namespace folio::byte_unicode {
namespace {

bool IsSelfMapped(int b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct Tables {
  // [256] byte -> UTF-8 of its code point, stored inline (at most 2 bytes).
  std::array<std::array<char, 2>, 256> utf8;
  std::array<uint8_t, 256> utf8_len;
  // [324] code point -> byte, -1 where no byte maps there. Code points stop at U+0143.
  std::array<int16_t, 0x144> from_code_point;
};

Tables MakeTables() {
  Tables t{};
  t.from_code_point.fill(-1);
  int next_extra = 0x100;
  for (int b = 0; b < 256; ++b) {
    const int cp = IsSelfMapped(b) ? b : next_extra++;
    t.from_code_point[cp] = static_cast<int16_t>(b);
    if (cp < 0x80) {
      t.utf8[b] = {static_cast<char>(cp), 0};
      t.utf8_len[b] = 1;
    } else {
      t.utf8[b] = {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
      t.utf8_len[b] = 2;
    }
  }
  return t;
}

const Tables& GetTables() {
  static const Tables* const tables = new Tables(MakeTables());
  return *tables;
}

}  // namespace

std::string_view ByteToUtf8(uint8_t b) {
  const Tables& t = GetTables();
  return std::string_view(t.utf8[b].data(), t.utf8_len[b]);
}

void Encode(std::string_view bytes, std::string* out) {
  const Tables& t = GetTables();
  out->reserve(out->size() + 2 * bytes.size());
  for (char c : bytes) {
    const auto b = static_cast<uint8_t>(c);
    out->append(t.utf8[b].data(), t.utf8_len[b]);
  }
}

bool Decode(std::string_view mapped, std::string* out) {
  const Tables& t = GetTables();
  for (size_t i = 0; i < mapped.size();) {
    const auto lead = static_cast<uint8_t>(mapped[i]);
    int cp;
    if (lead < 0x80) {
      cp = lead;
      i += 1;
    } else if (lead >= 0xC2 && lead <= 0xDF && i + 1 < mapped.size() &&
               (static_cast<uint8_t>(mapped[i + 1]) & 0xC0) == 0x80) {
      cp = ((lead & 0x1F) << 6) | (static_cast<uint8_t>(mapped[i + 1]) & 0x3F);
      i += 2;
    } else {
      return false;  // 3- and 4-byte characters are all outside the mapping
    }
    if (cp >= static_cast<int>(t.from_code_point.size()) || t.from_code_point[cp] < 0) {
      return false;
    }
    out->push_back(static_cast<char>(t.from_code_point[cp]));
  }
  return true;
}

}  // namespace folio::byte_unicode
