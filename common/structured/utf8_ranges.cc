#include "common/structured/utf8_ranges.h"

#include <algorithm>

namespace folio::structured {
namespace {

constexpr uint32_t kMaxScalar = 0x10FFFF;

void Split(uint32_t lo, uint32_t hi, std::vector<Utf8Sequence>* out) {
  if (lo > hi) return;
  // Split where the encoded length changes.
  for (uint32_t b : {0x7Fu, 0x7FFu, 0xFFFFu}) {
    if (lo <= b && hi > b) {
      Split(lo, b, out);
      Split(b + 1, hi, out);
      return;
    }
  }
  if (hi <= 0x7F) {
    out->push_back({{static_cast<uint8_t>(lo), static_cast<uint8_t>(hi)}});
    return;
  }
  // Split until every continuation byte position spans its whole range or one value.
  const int n = lo <= 0x7FF ? 2 : lo <= 0xFFFF ? 3 : 4;
  for (int i = 1; i < n; ++i) {
    uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        Split(lo, lo | m, out);
        Split((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        Split(lo, (hi & ~m) - 1, out);
        Split(hi & ~m, hi, out);
        return;
      }
    }
  }
  std::string a = EncodeUtf8(lo), b = EncodeUtf8(hi);
  Utf8Sequence seq;
  for (size_t i = 0; i < a.size(); ++i) {
    seq.emplace_back(static_cast<uint8_t>(a[i]), static_cast<uint8_t>(b[i]));
  }
  out->push_back(std::move(seq));
}

}  // namespace

CodePointRanges NormalizeRanges(CodePointRanges ranges) {
  CodePointRanges cut;
  for (auto [lo, hi] : ranges) {
    if (lo > hi || lo > kMaxScalar) continue;
    hi = std::min(hi, kMaxScalar);
    if (lo < 0xD800 && hi >= 0xD800) {
      cut.emplace_back(lo, std::min(hi, 0xD7FFu));
      if (hi > 0xDFFF) cut.emplace_back(0xE000, hi);
    } else if (lo >= 0xD800 && lo <= 0xDFFF) {
      if (hi > 0xDFFF) cut.emplace_back(0xE000, hi);
    } else {
      cut.emplace_back(lo, hi);
    }
  }
  std::sort(cut.begin(), cut.end());
  CodePointRanges out;
  for (auto r : cut) {
    if (!out.empty() && r.first <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, r.second);
    } else {
      out.push_back(r);
    }
  }
  return out;
}

CodePointRanges ComplementRanges(const CodePointRanges& ranges) {
  CodePointRanges out;
  uint32_t next = 0;
  for (auto [lo, hi] : ranges) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxScalar) out.emplace_back(next, kMaxScalar);
  return NormalizeRanges(std::move(out));
}

std::vector<Utf8Sequence> Utf8Sequences(const CodePointRanges& ranges) {
  std::vector<Utf8Sequence> out;
  for (auto [lo, hi] : ranges) Split(lo, hi, &out);
  return out;
}

std::string EncodeUtf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

}  // namespace folio::structured
