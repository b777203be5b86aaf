// The GBNF parser: text -> rules at the code-point level, lowered as it goes to byte
// sets (UTF-8), then checked (undefined rules, left recursion, limits).
#include "common/structured/grammar.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/structured/utf8_ranges.h"

namespace folio::structured {

using Sequence = std::vector<GrammarElement>;
using Alternatives = std::vector<Sequence>;

class GrammarParser {
 public:
  explicit GrammarParser(std::string_view text) : text_(text) {}

  absl::StatusOr<Grammar> Run();

 private:
  // Errors carry the line and column of `at`.
  absl::Status Error(size_t at, std::string_view what) const;
  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek(size_t ahead = 0) const {
    return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0';
  }
  // Skips spaces, tabs, newlines and comments.
  void SkipSpace();
  static bool IsNameChar(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '_';
  }
  std::string_view ParseName();
  // Whether a `name ::=` starts at the current position (the next rule).
  bool AtRuleStart() const;

  absl::Status ParseRule();
  absl::StatusOr<Alternatives> ParseAlternatives(int32_t parent, bool nested);
  absl::StatusOr<Sequence> ParseSequence(int32_t parent, bool nested);
  // One primary (literal, class, rule, group) as elements to append.
  absl::StatusOr<Sequence> ParsePrimary(int32_t parent);
  absl::StatusOr<uint32_t> ParseChar(bool in_class);
  absl::StatusOr<Sequence> ParseClass(int32_t parent);
  absl::Status ApplyRepetition(int32_t parent, int32_t min, int32_t max, Sequence* item);

  int32_t RuleId(std::string_view name, size_t at);
  int32_t NewRule(int32_t parent, Alternatives alts);
  GrammarElement RuleRef(int32_t rule) const {
    GrammarElement e;
    e.kind = GrammarElement::Kind::kRule;
    e.rule = rule;
    return e;
  }
  // Code-point ranges -> one element (ASCII only) or a rule of UTF-8 sequences.
  Sequence LowerRanges(int32_t parent, const std::vector<std::pair<uint32_t, uint32_t>>& ranges);
  absl::Status Check();

  std::string_view text_;
  size_t pos_ = 0;
  Grammar g_;
  std::vector<bool> defined_;
  std::vector<size_t> first_use_;
  std::vector<int32_t> generated_count_;
  absl::flat_hash_map<std::string, int32_t> ids_;
  int64_t elements_ = 0;
};

absl::Status GrammarParser::Error(size_t at, std::string_view what) const {
  int line = 1, col = 1;
  for (size_t i = 0; i < at && i < text_.size(); ++i) {
    if (text_[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return absl::InvalidArgumentError(
      absl::StrFormat("grammar: line %d column %d: %s", line, col, std::string(what)));
}

void GrammarParser::SkipSpace() {
  while (!AtEnd()) {
    char c = Peek();
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      ++pos_;
    } else if (c == '#') {
      while (!AtEnd() && Peek() != '\n') ++pos_;
    } else {
      break;
    }
  }
}

std::string_view GrammarParser::ParseName() {
  size_t start = pos_;
  while (!AtEnd() && IsNameChar(Peek())) ++pos_;
  return text_.substr(start, pos_ - start);
}

bool GrammarParser::AtRuleStart() const {
  size_t p = pos_;
  while (p < text_.size() && IsNameChar(text_[p])) ++p;
  if (p == pos_) return false;
  while (p < text_.size() && (text_[p] == ' ' || text_[p] == '\t')) ++p;
  return text_.substr(p, 3) == "::=";
}

int32_t GrammarParser::RuleId(std::string_view name, size_t at) {
  auto [it, inserted] = ids_.try_emplace(std::string(name), static_cast<int32_t>(g_.rules_.size()));
  if (inserted) {
    g_.rules_.push_back(GrammarRule{std::string(name), {}});
    defined_.push_back(false);
    first_use_.push_back(at);
    generated_count_.push_back(0);
  }
  return it->second;
}

int32_t GrammarParser::NewRule(int32_t parent, Alternatives alts) {
  int32_t n = ++generated_count_[parent];
  int32_t id = static_cast<int32_t>(g_.rules_.size());
  // Generated names cannot collide with user names: they contain a '#'.
  std::string name = absl::StrCat(g_.rules_[parent].name, "#", n);
  g_.rules_.push_back(GrammarRule{name, std::move(alts)});
  defined_.push_back(true);
  first_use_.push_back(pos_);
  generated_count_.push_back(0);
  ids_[name] = id;
  return id;
}

absl::StatusOr<Grammar> GrammarParser::Run() {
  if (text_.size() > static_cast<size_t>(kMaxGrammarBytes)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "grammar: %d bytes, more than the limit of %d", text_.size(), kMaxGrammarBytes));
  }
  SkipSpace();
  if (AtEnd()) return absl::InvalidArgumentError("grammar: empty (no rules)");
  while (!AtEnd()) {
    if (absl::Status s = ParseRule(); !s.ok()) return s;
    SkipSpace();
  }
  if (absl::Status s = Check(); !s.ok()) return s;
  return std::move(g_);
}

absl::Status GrammarParser::ParseRule() {
  size_t at = pos_;
  std::string_view name = ParseName();
  if (name.empty()) return Error(at, "expected a rule name");
  while (Peek() == ' ' || Peek() == '\t') ++pos_;
  if (text_.substr(pos_, 3) != "::=") {
    return Error(pos_, absl::StrCat("expected \"::=\" after rule name \"", std::string(name), "\""));
  }
  pos_ += 3;
  int32_t id = RuleId(name, at);
  if (defined_[id]) return Error(at, absl::StrCat("rule \"", std::string(name), "\" is defined twice"));
  defined_[id] = true;
  absl::StatusOr<Alternatives> alts = ParseAlternatives(id, /*nested=*/false);
  if (!alts.ok()) return alts.status();
  g_.rules_[id].alternatives = *std::move(alts);
  return absl::OkStatus();
}

absl::StatusOr<Alternatives> GrammarParser::ParseAlternatives(int32_t parent, bool nested) {
  Alternatives alts;
  while (true) {
    absl::StatusOr<Sequence> seq = ParseSequence(parent, nested);
    if (!seq.ok()) return seq.status();
    alts.push_back(*std::move(seq));
    SkipSpace();
    if (Peek() != '|') break;
    ++pos_;
  }
  return alts;
}

absl::StatusOr<Sequence> GrammarParser::ParseSequence(int32_t parent, bool nested) {
  Sequence seq;
  while (true) {
    SkipSpace();
    if (AtEnd()) break;
    char c = Peek();
    if (c == '|') break;
    if (c == ')') {
      if (!nested) return Error(pos_, "unbalanced \")\"");
      break;
    }
    if (!nested && AtRuleStart()) break;
    absl::StatusOr<Sequence> item = ParsePrimary(parent);
    if (!item.ok()) return item.status();
    // Postfix operator.
    int32_t min = 1, max = 1;
    size_t op_at = pos_;
    c = Peek();
    if (c == '*') {
      min = 0, max = -1, ++pos_;
    } else if (c == '+') {
      min = 1, max = -1, ++pos_;
    } else if (c == '?') {
      min = 0, max = 1, ++pos_;
    } else if (c == '{') {
      ++pos_;
      auto number = [&]() -> int64_t {
        int64_t v = -1;
        while (Peek() >= '0' && Peek() <= '9') {
          v = (v < 0 ? 0 : v) * 10 + (Peek() - '0');
          if (v > kMaxRepetition) v = kMaxRepetition + 1;
          ++pos_;
        }
        return v;
      };
      while (Peek() == ' ') ++pos_;
      int64_t m = number();
      int64_t n = m;
      while (Peek() == ' ') ++pos_;
      if (Peek() == ',') {
        ++pos_;
        while (Peek() == ' ') ++pos_;
        n = number();  // -1: unbounded
        while (Peek() == ' ') ++pos_;
      }
      if (m < 0 || Peek() != '}') return Error(op_at, "malformed repetition {m,n}");
      ++pos_;
      if (m > kMaxRepetition || n > kMaxRepetition) {
        return Error(op_at, absl::StrFormat("repetition bound above the limit of %d",
                                            kMaxRepetition));
      }
      if (n >= 0 && n < m) return Error(op_at, "repetition {m,n} with n < m");
      min = static_cast<int32_t>(m), max = static_cast<int32_t>(n);
    }
    if (min != 1 || max != 1) {
      if (absl::Status s = ApplyRepetition(parent, min, max, &*item); !s.ok()) return s;
    }
    elements_ += item->size();
    if (elements_ > kMaxGrammarElements) {
      return Error(pos_, absl::StrFormat("grammar has more than %d elements",
                                         kMaxGrammarElements));
    }
    seq.insert(seq.end(), item->begin(), item->end());
  }
  return seq;
}

absl::Status GrammarParser::ApplyRepetition(int32_t parent, int32_t min, int32_t max,
                                            Sequence* item) {
  // One element to repeat: the item itself, or a rule wrapping it.
  GrammarElement unit = item->size() == 1 ? (*item)[0] : RuleRef(NewRule(parent, {*item}));
  Sequence out;
  int64_t copies = min + (max > min ? 0 : 0);
  elements_ += copies + (max < 0 ? 2 : 2 * static_cast<int64_t>(max - min));
  if (elements_ > kMaxGrammarElements) {
    return Error(pos_, absl::StrFormat("grammar has more than %d elements", kMaxGrammarElements));
  }
  out.assign(static_cast<size_t>(min), unit);
  if (max < 0) {
    // star ::= unit star | ""
    int32_t star = NewRule(parent, {});
    g_.rules_[star].alternatives = {{unit, RuleRef(star)}, {}};
    out.push_back(RuleRef(star));
  } else if (max > min) {
    // opt_k ::= unit opt_{k-1} | ""   (nested, so the match stays unambiguous)
    int32_t inner = -1;
    for (int32_t k = 0; k < max - min; ++k) {
      Sequence body{unit};
      if (inner >= 0) body.push_back(RuleRef(inner));
      inner = NewRule(parent, {body, {}});
    }
    out.push_back(RuleRef(inner));
  }
  *item = std::move(out);
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> GrammarParser::ParseChar(bool in_class) {
  size_t at = pos_;
  if (AtEnd()) return Error(at, in_class ? "unterminated character class" : "unterminated literal");
  unsigned char c = static_cast<unsigned char>(Peek());
  if (c == '\\') {
    ++pos_;
    char e = Peek();
    ++pos_;
    auto hex = [&](int digits) -> absl::StatusOr<uint32_t> {
      uint32_t v = 0;
      for (int i = 0; i < digits; ++i) {
        char h = Peek();
        int d = (h >= '0' && h <= '9') ? h - '0'
                : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                         : -1;
        if (d < 0) return Error(at, "malformed hex escape");
        v = v * 16 + d;
        ++pos_;
      }
      if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) {
        return Error(at, "escape names no Unicode scalar value");
      }
      return v;
    };
    switch (e) {
      case 'n': return uint32_t{'\n'};
      case 'r': return uint32_t{'\r'};
      case 't': return uint32_t{'\t'};
      case 'x': return hex(2);
      case 'u': return hex(4);
      case 'U': return hex(8);
      case '\\': case '"': case '\'': case '[': case ']': case '-': case '^': case '/':
        return static_cast<uint32_t>(e);
      default:
        return Error(at, absl::StrCat("unknown escape \"\\", std::string(1, e), "\""));
    }
  }
  // A UTF-8 character.
  uint32_t cp = 0;
  int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (len == 0 || pos_ + len > text_.size()) return Error(at, "invalid UTF-8");
  cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
  for (int i = 1; i < len; ++i) {
    unsigned char d = static_cast<unsigned char>(text_[pos_ + i]);
    if ((d & 0xC0) != 0x80) return Error(at, "invalid UTF-8");
    cp = (cp << 6) | (d & 0x3F);
  }
  static constexpr uint32_t kMinForLen[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMinForLen[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
    return Error(at, "invalid UTF-8");
  }
  pos_ += len;
  return cp;
}

Sequence GrammarParser::LowerRanges(int32_t parent,
                                    const std::vector<std::pair<uint32_t, uint32_t>>& ranges) {
  std::vector<Utf8Sequence> seqs = Utf8Sequences(NormalizeRanges(ranges));
  GrammarElement single;  // every 1-byte sequence merges into one byte set
  Alternatives alts;
  for (const Utf8Sequence& s : seqs) {
    if (s.size() == 1) {
      for (int b = s[0].first; b <= s[0].second; ++b) single.bytes.set(b);
      continue;
    }
    Sequence seq;
    for (auto [lo, hi] : s) {
      GrammarElement e;
      for (int b = lo; b <= hi; ++b) e.bytes.set(b);
      seq.push_back(e);
    }
    alts.push_back(std::move(seq));
  }
  if (alts.empty()) return {single};
  if (single.bytes.any()) alts.insert(alts.begin(), Sequence{single});
  return {RuleRef(NewRule(parent, std::move(alts)))};
}

absl::StatusOr<Sequence> GrammarParser::ParseClass(int32_t parent) {
  size_t at = pos_;
  ++pos_;  // '['
  bool negated = false;
  if (Peek() == '^') negated = true, ++pos_;
  std::vector<std::pair<uint32_t, uint32_t>> ranges;
  while (true) {
    if (AtEnd()) return Error(at, "unterminated character class");
    if (Peek() == ']') {
      ++pos_;
      break;
    }
    absl::StatusOr<uint32_t> lo = ParseChar(/*in_class=*/true);
    if (!lo.ok()) return lo.status();
    uint32_t hi = *lo;
    if (Peek() == '-' && Peek(1) != ']' && Peek(1) != '\0') {
      ++pos_;
      absl::StatusOr<uint32_t> h = ParseChar(/*in_class=*/true);
      if (!h.ok()) return h.status();
      hi = *h;
      if (hi < *lo) return Error(at, "character range out of order");
    }
    ranges.emplace_back(*lo, hi);
  }
  ranges = NormalizeRanges(std::move(ranges));
  if (negated) ranges = ComplementRanges(ranges);
  if (ranges.empty()) return Error(at, "character class matches nothing");
  return LowerRanges(parent, ranges);
}

absl::StatusOr<Sequence> GrammarParser::ParsePrimary(int32_t parent) {
  size_t at = pos_;
  char c = Peek();
  if (c == '"') {
    ++pos_;
    Sequence seq;
    while (true) {
      if (AtEnd()) return Error(at, "unterminated literal");
      if (Peek() == '"') {
        ++pos_;
        break;
      }
      absl::StatusOr<uint32_t> cp = ParseChar(/*in_class=*/false);
      if (!cp.ok()) return cp.status();
      std::string bytes = EncodeUtf8(*cp);
      for (char b : bytes) {
        GrammarElement e;
        e.bytes.set(static_cast<unsigned char>(b));
        seq.push_back(e);
      }
    }
    return seq;
  }
  if (c == '[') return ParseClass(parent);
  if (c == '.') {
    ++pos_;
    return LowerRanges(parent, {{0, 0x10FFFF}});
  }
  if (c == '(') {
    ++pos_;
    absl::StatusOr<Alternatives> alts = ParseAlternatives(parent, /*nested=*/true);
    if (!alts.ok()) return alts.status();
    SkipSpace();
    if (Peek() != ')') return Error(at, "unbalanced \"(\"");
    ++pos_;
    if (alts->size() == 1) return std::move((*alts)[0]);
    return Sequence{RuleRef(NewRule(parent, *std::move(alts)))};
  }
  if (IsNameChar(c)) {
    std::string_view name = ParseName();
    return Sequence{RuleRef(RuleId(name, at))};
  }
  return Error(at, absl::StrCat("unexpected character \"", std::string(1, c), "\""));
}

absl::Status GrammarParser::Check() {
  const int32_t n = static_cast<int32_t>(g_.rules_.size());
  for (int32_t r = 0; r < n; ++r) {
    if (!defined_[r]) {
      return Error(first_use_[r], absl::StrCat("undefined rule \"", g_.rules_[r].name, "\""));
    }
  }
  auto it = ids_.find("root");
  if (it == ids_.end()) return absl::InvalidArgumentError("grammar: no \"root\" rule");
  g_.root_ = it->second;
  // Nullable rules, to a fixed point.
  std::vector<bool> nullable(n, false);
  for (bool changed = true; changed;) {
    changed = false;
    for (int32_t r = 0; r < n; ++r) {
      if (nullable[r]) continue;
      for (const Sequence& alt : g_.rules_[r].alternatives) {
        bool all = true;
        for (const GrammarElement& e : alt) {
          if (e.kind == GrammarElement::Kind::kBytes || !nullable[e.rule]) {
            all = false;
            break;
          }
        }
        if (all) {
          nullable[r] = changed = true;
          break;
        }
      }
    }
  }
  // Left-corner graph: r -> s when s can start r without a byte consumed before it.
  std::vector<std::vector<int32_t>> left(n);
  for (int32_t r = 0; r < n; ++r) {
    for (const Sequence& alt : g_.rules_[r].alternatives) {
      for (const GrammarElement& e : alt) {
        if (e.kind == GrammarElement::Kind::kBytes) break;
        left[r].push_back(e.rule);
        if (!nullable[e.rule]) break;
      }
    }
  }
  // Iterative DFS for a cycle (0 new, 1 on the stack, 2 done).
  std::vector<int8_t> color(n, 0);
  for (int32_t start = 0; start < n; ++start) {
    if (color[start]) continue;
    std::vector<std::pair<int32_t, size_t>> stack{{start, 0}};
    color[start] = 1;
    while (!stack.empty()) {
      auto& [r, i] = stack.back();
      if (i < left[r].size()) {
        int32_t s = left[r][i++];
        if (color[s] == 1) {
          std::string name = g_.rules_[s].name;
          std::string base = name.substr(0, name.find('#'));
          return absl::InvalidArgumentError(absl::StrCat(
              "grammar: rule \"", base,
              "\" is left-recursive (it can reach itself without matching a byte; a "
              "repetition of something that can be empty does this too)"));
        }
        if (color[s] == 0) {
          color[s] = 1;
          stack.push_back({s, 0});
        }
      } else {
        color[r] = 2;
        stack.pop_back();
      }
    }
  }
  int64_t total = 0;
  for (const GrammarRule& rule : g_.rules_) {
    for (const Sequence& alt : rule.alternatives) total += alt.size() + 1;
  }
  if (total > kMaxGrammarElements) {
    return absl::InvalidArgumentError(
        absl::StrFormat("grammar has more than %d elements", kMaxGrammarElements));
  }
  g_.num_elements_ = static_cast<int32_t>(total);
  return absl::OkStatus();
}

absl::StatusOr<Grammar> Grammar::Parse(std::string_view text) {
  return GrammarParser(text).Run();
}

std::string Grammar::DebugString() const {
  std::string out;
  for (const GrammarRule& rule : rules_) {
    absl::StrAppend(&out, rule.name, " ::=");
    for (size_t a = 0; a < rule.alternatives.size(); ++a) {
      if (a > 0) absl::StrAppend(&out, " |");
      for (const GrammarElement& e : rule.alternatives[a]) {
        if (e.kind == GrammarElement::Kind::kRule) {
          absl::StrAppend(&out, " ", rules_[e.rule].name);
          continue;
        }
        absl::StrAppend(&out, " [");
        for (int b = 0; b < 256; ++b) {
          if (!e.bytes.test(b)) continue;
          int end = b;
          while (end + 1 < 256 && e.bytes.test(end + 1)) ++end;
          if (end == b) {
            absl::StrAppendFormat(&out, "\\x%02X", b);
          } else {
            absl::StrAppendFormat(&out, "\\x%02X-\\x%02X", b, end);
          }
          b = end;
        }
        absl::StrAppend(&out, "]");
      }
    }
    absl::StrAppend(&out, "\n");
  }
  return out;
}

std::string GbnfLiteral(std::string_view text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20 || c == 0x7F) {
          absl::StrAppendFormat(&out, "\\x%02X", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += "\"";
  return out;
}

absl::StatusOr<std::string> RenameRule(std::string_view grammar, std::string_view from,
                                       std::string_view to) {
  auto is_name_char = [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  };
  if (to.empty() || !std::all_of(to.begin(), to.end(), is_name_char)) {
    return absl::InvalidArgumentError(absl::StrCat("'", std::string(to), "' is not a rule name"));
  }
  // One pass over the text's lexical items: literals and classes (with their escapes) and
  // comments are copied as they are; a name equal to `from` becomes `to`.
  std::string out;
  out.reserve(grammar.size() + 64);
  size_t i = 0;
  while (i < grammar.size()) {
    const char c = grammar[i];
    if (c == '"' || c == '[') {
      const char close = c == '"' ? '"' : ']';
      size_t j = i + 1;
      while (j < grammar.size() && grammar[j] != close) j += grammar[j] == '\\' ? 2 : 1;
      j = std::min(j + 1, grammar.size());
      out.append(grammar.substr(i, j - i));
      i = j;
    } else if (c == '#') {
      size_t j = grammar.find('\n', i);
      if (j == std::string_view::npos) j = grammar.size();
      out.append(grammar.substr(i, j - i));
      i = j;
    } else if (is_name_char(c)) {
      size_t j = i;
      while (j < grammar.size() && is_name_char(grammar[j])) ++j;
      const std::string_view name = grammar.substr(i, j - i);
      if (name == to) {
        return absl::InvalidArgumentError(
            absl::StrCat("the grammar already has a rule named '", std::string(to), "'"));
      }
      if (name == from) {
        out.append(to);
      } else {
        out.append(name);
      }
      i = j;
    } else {
      out.push_back(c);
      ++i;
    }
  }
  return out;
}

}  // namespace folio::structured
