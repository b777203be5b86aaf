#include "common/structured/number_ranges.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace folio::structured {
namespace {

constexpr int64_t kMaxMagnitude = 9'999'999'999'999'999;  // kMaxIntegerDigits nines

std::string Digits(int n) {
  if (n <= 0) return "";
  if (n == 1) return "[0-9]";
  return absl::StrCat("[0-9]{", n, "}");
}

std::string Class(char lo, char hi) {
  if (lo == hi) return absl::StrCat("\"", std::string(1, lo), "\"");
  return absl::StrCat("[", std::string(1, lo), "-", std::string(1, hi), "]");
}

// Digit strings of one length between lo and hi (same length, lo <= hi).
std::string FixedRange(const std::string& lo, const std::string& hi) {
  const size_t n = lo.size();
  if (n == 0) return "\"\"";
  if (lo[0] == hi[0]) {
    std::string rest = FixedRange(lo.substr(1), hi.substr(1));
    return n == 1 ? Class(lo[0], lo[0]) : absl::StrCat(Class(lo[0], lo[0]), " ", rest);
  }
  const std::string lo_rest = lo.substr(1), hi_rest = hi.substr(1);
  const bool lo_min = lo_rest == std::string(n - 1, '0');
  const bool hi_max = hi_rest == std::string(n - 1, '9');
  std::vector<std::string> alts;
  char first = lo[0], last = hi[0];
  if (!lo_min) {
    alts.push_back(absl::StrCat(Class(lo[0], lo[0]), " (",
                                FixedRange(lo_rest, std::string(n - 1, '9')), ")"));
    ++first;
  }
  if (!hi_max) --last;
  if (first <= last) alts.push_back(absl::StrCat(Class(first, last), " ", Digits(n - 1)));
  if (!hi_max) {
    alts.push_back(absl::StrCat(Class(hi[0], hi[0]), " (",
                                FixedRange(std::string(n - 1, '0'), hi_rest), ")"));
  }
  return absl::StrCat("(", absl::StrJoin(alts, " | "), ")");
}

// Non-negative integers without leading zeros in [lo, hi], 0 <= lo <= hi <= kMaxMagnitude.
std::string Magnitude(int64_t lo, int64_t hi) {
  std::vector<std::string> alts;
  const int lo_len = static_cast<int>(std::to_string(lo).size());
  const int hi_len = static_cast<int>(std::to_string(hi).size());
  for (int len = lo_len; len <= hi_len; ++len) {
    int64_t len_min = len == 1 ? 0 : 1;
    for (int i = 1; i < len; ++i) len_min *= 10;
    int64_t len_max = 9;
    for (int i = 1; i < len; ++i) len_max = len_max * 10 + 9;
    int64_t a = std::max(lo, len_min), b = std::min(hi, len_max);
    if (a > b) continue;
    // Whole lengths collapse to one class run.
    if (a == len_min && b == len_max && len > 1) {
      alts.push_back(absl::StrCat("[1-9] ", Digits(len - 1)));
    } else {
      alts.push_back(FixedRange(std::to_string(a), std::to_string(b)));
    }
  }
  if (alts.size() == 1) return alts[0];
  return absl::StrCat("(", absl::StrJoin(alts, " | "), ")");
}

const char kFraction[] = "(\".\" [0-9]{1,16})?";
const char kZeroFraction[] = "(\".\" \"0\"{1,16})?";

}  // namespace

std::string IntegerRangeExpr(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  std::vector<std::string> alts;
  const int64_t nonneg_lo = std::max<int64_t>(lo.value_or(0), 0);
  const int64_t nonneg_hi = std::min<int64_t>(hi.value_or(kMaxMagnitude), kMaxMagnitude);
  if (nonneg_lo <= nonneg_hi) alts.push_back(Magnitude(nonneg_lo, nonneg_hi));
  // Negative values as "-" magnitude, magnitudes in [max(-hi, 1), -lo].
  const int64_t neg_lo = std::max<int64_t>(hi.has_value() ? -std::min<int64_t>(*hi, 0) : 1, 1);
  const int64_t neg_hi =
      lo.has_value() ? std::min<int64_t>(-std::min<int64_t>(*lo, 0), kMaxMagnitude) : kMaxMagnitude;
  if (neg_lo <= neg_hi) alts.push_back(absl::StrCat("\"-\" ", Magnitude(neg_lo, neg_hi)));
  if (alts.empty()) return "\"0\"";  // unreachable when lo <= hi
  if (alts.size() == 1) return alts[0];
  return absl::StrCat("(", absl::StrJoin(alts, " | "), ")");
}

std::string NumberRangeExpr(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  std::vector<std::string> alts;
  // Non-negative integer parts below hi take any fraction; hi itself only zeros.
  const int64_t a = std::max<int64_t>(lo.value_or(0), 0);
  const int64_t b = std::min<int64_t>(hi.value_or(kMaxMagnitude + 1), kMaxMagnitude + 1);
  if (a <= b - 1) alts.push_back(absl::StrCat(Magnitude(a, b - 1), " ", kFraction));
  if (hi.has_value() && *hi >= a && *hi <= kMaxMagnitude) {
    alts.push_back(absl::StrCat(Magnitude(*hi, *hi), " ", kZeroFraction));
  }
  // Negative: -(m + f) with m in [max(-hi, 1), -lo - 1] any fraction; m = -lo only zeros.
  const int64_t m_lo = std::max<int64_t>(hi.has_value() ? -*hi : 1, 1);
  const int64_t m_hi =
      lo.has_value() ? std::min<int64_t>(-*lo - 1, kMaxMagnitude) : kMaxMagnitude;
  if (m_lo <= m_hi) alts.push_back(absl::StrCat("\"-\" ", Magnitude(m_lo, m_hi), " ", kFraction));
  if (lo.has_value() && *lo <= -1 && -*lo >= m_lo && -*lo <= kMaxMagnitude) {
    alts.push_back(absl::StrCat("\"-\" ", Magnitude(-*lo, -*lo), " ", kZeroFraction));
  }
  if (alts.empty()) return "\"0\"";
  if (alts.size() == 1) return alts[0];
  return absl::StrCat("(", absl::StrJoin(alts, " | "), ")");
}

}  // namespace folio::structured
