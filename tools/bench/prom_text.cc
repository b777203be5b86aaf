#include "tools/bench/prom_text.h"

#include <cmath>
#include <limits>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace folio::bench {
namespace {

bool IsNameStart(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
}
bool IsNameChar(char c) { return IsNameStart(c) || (c >= '0' && c <= '9'); }

// The sample value: a float, or NaN / +Inf / -Inf as Prometheus writes them.
bool ParseValue(absl::string_view s, double* out) {
  if (s == "NaN" || s == "nan") {
    *out = std::numeric_limits<double>::quiet_NaN();
    return true;
  }
  if (s == "+Inf" || s == "Inf" || s == "+inf" || s == "inf") {
    *out = std::numeric_limits<double>::infinity();
    return true;
  }
  if (s == "-Inf" || s == "-inf") {
    *out = -std::numeric_limits<double>::infinity();
    return true;
  }
  return absl::SimpleAtod(s, out) && std::isfinite(*out);
}

class LineParser {
 public:
  explicit LineParser(absl::string_view line) : s_(line) {}

  absl::Status Parse(PromSample* out) {
    if (!ReadName(&out->name)) return Fail("expected a metric name");
    const size_t after_name = i_;
    SkipSpaces();
    if (Peek() != '{') i_ = after_name;
    if (Peek() == '{') {
      ++i_;
      while (true) {
        SkipSpaces();
        if (Peek() == '}') {
          ++i_;
          break;
        }
        std::string key, value;
        if (!ReadName(&key)) return Fail("expected a label name");
        SkipSpaces();
        if (Peek() != '=') return Fail("expected '=' after label " + key);
        ++i_;
        SkipSpaces();
        if (!ReadQuoted(&value)) return Fail("expected a quoted value for label " + key);
        out->labels.emplace_back(std::move(key), std::move(value));
        SkipSpaces();
        if (Peek() == ',') {
          ++i_;
        } else if (Peek() != '}') {
          return Fail("expected ',' or '}' in the labels");
        }
      }
    }
    if (Peek() != ' ' && Peek() != '\t') return Fail("expected a space before the value");
    std::vector<absl::string_view> rest =
        absl::StrSplit(s_.substr(i_), absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (rest.empty()) return Fail("missing value");
    if (rest.size() > 2) return Fail("unexpected text after the value and timestamp");
    if (!ParseValue(rest[0], &out->value)) {
      return Fail(absl::StrCat("bad value '", rest[0], "'"));
    }
    int64_t timestamp;
    if (rest.size() == 2 && !absl::SimpleAtoi(rest[1], &timestamp)) {
      return Fail(absl::StrCat("bad timestamp '", rest[1], "'"));
    }
    return absl::OkStatus();
  }

 private:
  char Peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  void SkipSpaces() {
    while (Peek() == ' ' || Peek() == '\t') ++i_;
  }
  bool ReadName(std::string* out) {
    if (!IsNameStart(Peek())) return false;
    const size_t start = i_;
    while (IsNameChar(Peek())) ++i_;
    *out = std::string(s_.substr(start, i_ - start));
    return true;
  }
  bool ReadQuoted(std::string* out) {
    if (Peek() != '"') return false;
    ++i_;
    while (i_ < s_.size()) {
      const char c = s_[i_++];
      if (c == '"') return true;
      if (c != '\\') {
        out->push_back(c);
        continue;
      }
      if (i_ >= s_.size()) return false;
      const char e = s_[i_++];
      if (e == 'n') {
        out->push_back('\n');
      } else if (e == '\\' || e == '"') {
        out->push_back(e);
      } else {
        return false;
      }
    }
    return false;  // unterminated
  }
  absl::Status Fail(const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat(what, " at column ", i_ + 1));
  }

  absl::string_view s_;
  size_t i_ = 0;
};

}  // namespace

absl::StatusOr<std::vector<PromSample>> ParsePromText(absl::string_view text) {
  std::vector<PromSample> samples;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    size_t first = line.find_first_not_of(" \t");
    if (first == absl::string_view::npos) continue;  // blank
    line.remove_prefix(first);
    if (line[0] == '#') continue;  // HELP, TYPE or a comment
    PromSample sample;
    if (absl::Status s = LineParser(line).Parse(&sample); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("metrics line ", line_number, " ('", line, "'): ", s.message()));
    }
    samples.push_back(std::move(sample));
  }
  return samples;
}

std::map<std::string, double> SumByName(const std::vector<PromSample>& samples,
                                        const std::vector<std::string>& names) {
  const std::set<absl::string_view> wanted(names.begin(), names.end());
  std::map<std::string, double> sums;
  for (const PromSample& s : samples) {
    if (wanted.count(s.name) > 0) sums[s.name] += s.value;
  }
  return sums;
}

}  // namespace folio::bench
