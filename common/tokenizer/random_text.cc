#include "common/tokenizer/random_text.h"

#include <cstdint>

namespace folio::testing {

std::string RandomUnicode(std::mt19937& rng, int max_chars) {
  std::uniform_int_distribution<int> len(0, max_chars);
  std::uniform_int_distribution<int> kind(0, 9);
  std::string s;
  for (int n = len(rng); n > 0; --n) {
    uint32_t cp;
    switch (kind(rng)) {
      case 0: cp = " \t\n\r'0123456789"[rng() % 15]; break;
      case 1: case 2: cp = 0x20 + rng() % 0x5F; break;
      case 3: cp = 0x80 + rng() % 0x780; break;
      case 4: case 5: cp = 0x800 + rng() % 0xF800; break;
      default: cp = 0x10000 + rng() % 0x100000; break;
    }
    if (cp >= 0xD800 && cp <= 0xDFFF) cp = 'x';
    if (cp < 0x80) {
      s.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      s.push_back(static_cast<char>(0xE0 | (cp >> 12)));
      s.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      s.push_back(static_cast<char>(0xF0 | (cp >> 18)));
      s.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      s.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }
  return s;
}

}  // namespace folio::testing
