// Regex -> GBNF by recursive descent: each regex construct is written as the GBNF
// expression that matches the same strings (classes as \U-escaped code-point ranges).
#include "common/structured/regex.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/structured/grammar.h"
#include "common/structured/utf8_ranges.h"

namespace folio::structured {
namespace {

class RegexCompiler {
 public:
  RegexCompiler(std::string_view pattern, bool json_string) : p_(pattern), json_(json_string) {}

  absl::StatusOr<std::string> Run() {
    if (p_.size() > static_cast<size_t>(kMaxGrammarBytes)) {
      return absl::InvalidArgumentError("regex: pattern too long");
    }
    if (Peek() == '^') ++pos_;
    absl::StatusOr<std::string> expr = Alternation(/*depth=*/0);
    if (!expr.ok()) return expr.status();
    if (pos_ < p_.size()) {
      return Error(p_[pos_] == ')' ? "unbalanced \")\"" : "unexpected character");
    }
    return expr;
  }

 private:
  absl::Status Error(std::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrFormat("regex: %s at offset %d of \"%s\"", std::string(what), pos_, std::string(p_)));
  }
  char Peek(size_t ahead = 0) const {
    return pos_ + ahead < p_.size() ? p_[pos_ + ahead] : '\0';
  }
  bool AtEnd() const { return pos_ >= p_.size(); }

  absl::StatusOr<std::string> Alternation(int depth) {
    if (depth > 200) return Error("nesting too deep");
    std::vector<std::string> alts;
    while (true) {
      absl::StatusOr<std::string> seq = Sequence(depth);
      if (!seq.ok()) return seq.status();
      alts.push_back(*std::move(seq));
      if (Peek() != '|') break;
      ++pos_;
    }
    if (alts.size() == 1) return alts[0];
    std::string out = "(";
    for (size_t i = 0; i < alts.size(); ++i) absl::StrAppend(&out, i ? " | " : "", alts[i]);
    return absl::StrCat(out, ")");
  }

  absl::StatusOr<std::string> Sequence(int depth) {
    std::vector<std::string> items;
    while (!AtEnd() && Peek() != '|' && Peek() != ')') {
      if (Peek() == '$' && pos_ + 1 == p_.size()) {
        ++pos_;
        break;
      }
      absl::StatusOr<std::string> atom = Atom(depth);
      if (!atom.ok()) return atom.status();
      absl::StatusOr<std::string> q = Quantified(*std::move(atom));
      if (!q.ok()) return q.status();
      items.push_back(*std::move(q));
    }
    if (items.empty()) return std::string("\"\"");
    std::string out = "(";
    for (size_t i = 0; i < items.size(); ++i) absl::StrAppend(&out, i ? " " : "", items[i]);
    return absl::StrCat(out, ")");
  }

  absl::StatusOr<int64_t> Number() {
    int64_t v = -1;
    while (Peek() >= '0' && Peek() <= '9') {
      v = (v < 0 ? 0 : v) * 10 + (Peek() - '0');
      if (v > kMaxRepetition) v = kMaxRepetition + 1;
      ++pos_;
    }
    return v;
  }

  absl::StatusOr<std::string> Quantified(std::string atom) {
    char c = Peek();
    std::string op;
    if (c == '*' || c == '+' || c == '?') {
      op = std::string(1, c);
      ++pos_;
    } else if (c == '{') {
      size_t save = pos_;
      ++pos_;
      int64_t m = *Number();
      int64_t n = m;
      bool comma = false;
      if (Peek() == ',') {
        comma = true;
        ++pos_;
        n = *Number();
      }
      if (m < 0 || Peek() != '}') {
        pos_ = save;  // not a quantifier: a literal "{", as Python reads it
        return atom;
      }
      ++pos_;
      if (m > kMaxRepetition || n > kMaxRepetition) {
        return Error(absl::StrFormat("repetition bound above %d", kMaxRepetition));
      }
      if (comma && n >= 0 && n < m) return Error("repetition {m,n} with n < m");
      op = comma ? (n < 0 ? absl::StrCat("{", m, ",}") : absl::StrCat("{", m, ",", n, "}"))
                 : absl::StrCat("{", m, "}");
    } else {
      return atom;
    }
    if (Peek() == '?') {
      ++pos_;  // lazy: the same set of strings
    } else if (Peek() == '+') {
      return Error("possessive quantifier not supported");
    }
    if (Peek() == '*' || Peek() == '+' || Peek() == '?' ||
        (Peek() == '{' && Peek(1) >= '0' && Peek(1) <= '9')) {
      return Error("multiple repeat");
    }
    return absl::StrCat(atom, op);
  }

  // A literal code point as GBNF; inside a JSON string, as its escaped JSON form.
  std::string Literal(uint32_t cp) const {
    if (json_) {
      if (cp == '"') return GbnfLiteral("\\\"");
      if (cp == '\\') return GbnfLiteral("\\\\");
      if (cp < 0x20) {
        switch (cp) {
          case '\n': return GbnfLiteral("\\n");
          case '\r': return GbnfLiteral("\\r");
          case '\t': return GbnfLiteral("\\t");
          case '\b': return GbnfLiteral("\\b");
          case '\f': return GbnfLiteral("\\f");
          default: return GbnfLiteral(absl::StrFormat("\\u%04x", cp));
        }
      }
    }
    return GbnfLiteral(EncodeUtf8(cp));
  }

  std::string ClassExpr(CodePointRanges ranges) const {
    ranges = NormalizeRanges(std::move(ranges));
    std::vector<std::string> alts;
    if (json_) {
      // Characters a JSON string must escape leave the class and come back escaped.
      CodePointRanges plain;
      for (auto [lo, hi] : ranges) {
        for (uint32_t c = lo; c <= hi && c < 0x20; ++c) alts.push_back(Literal(c));
        for (uint32_t c : {uint32_t{'"'}, uint32_t{'\\'}}) {
          if (lo <= c && c <= hi) alts.push_back(Literal(c));
        }
        plain.emplace_back(std::max<uint32_t>(lo, 0x20), hi);
      }
      CodePointRanges specials{{'"', '"'}, {'\\', '\\'}};
      ranges = NormalizeRanges(std::move(plain));
      CodePointRanges keep;
      for (auto [lo, hi] : ranges) {
        uint32_t start = lo;
        for (auto [s, e] : specials) {
          if (s >= start && s <= hi) {
            if (s > start) keep.emplace_back(start, s - 1);
            start = e + 1;
          }
        }
        if (start <= hi) keep.emplace_back(start, hi);
      }
      ranges = std::move(keep);
    }
    if (!ranges.empty()) {
      std::string cls = "[";
      for (auto [lo, hi] : ranges) {
        absl::StrAppendFormat(&cls, "\\U%08X", lo);
        if (hi != lo) absl::StrAppendFormat(&cls, "-\\U%08X", hi);
      }
      alts.insert(alts.begin(), absl::StrCat(cls, "]"));
    }
    if (alts.empty()) return "";
    if (alts.size() == 1) return alts[0];
    std::string out = "(";
    for (size_t i = 0; i < alts.size(); ++i) absl::StrAppend(&out, i ? " | " : "", alts[i]);
    return absl::StrCat(out, ")");
  }

  // \d \w \s and their negations as ranges; false if `c` is not a class escape.
  static bool ClassEscape(char c, CodePointRanges* out) {
    CodePointRanges r;
    switch (c) {
      case 'd': case 'D': r = {{'0', '9'}}; break;
      case 'w': case 'W': r = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}; break;
      case 's': case 'S': r = {{'\t', '\r'}, {' ', ' '}}; break;
      default: return false;
    }
    r = NormalizeRanges(std::move(r));
    if (c >= 'A' && c <= 'Z') r = ComplementRanges(r);
    out->insert(out->end(), r.begin(), r.end());
    return true;
  }

  absl::StatusOr<uint32_t> Hex(int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      char h = Peek();
      int d = (h >= '0' && h <= '9') ? h - '0'
              : (h >= 'a' && h <= 'f') ? h - 'a' + 10
              : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                       : -1;
      if (d < 0) return Error("malformed hex escape");
      v = v * 16 + d;
      ++pos_;
    }
    if (v >= 0xD800 && v <= 0xDFFF) return Error("escape names a surrogate");
    return v;
  }

  // After a backslash: one escaped code point (not a class escape).
  absl::StatusOr<uint32_t> EscapedChar() {
    char e = Peek();
    ++pos_;
    switch (e) {
      case 'n': return uint32_t{'\n'};
      case 'r': return uint32_t{'\r'};
      case 't': return uint32_t{'\t'};
      case 'f': return uint32_t{'\f'};
      case 'v': return uint32_t{'\v'};
      case '0': return uint32_t{0};
      case 'x': return Hex(2);
      case 'u': return Hex(4);
      default: break;
    }
    if (e == '\0') return Error("trailing backslash");
    if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '1' && e <= '9')) {
      --pos_;
      return Error(absl::StrCat("unsupported escape \"\\", std::string(1, e), "\""));
    }
    return static_cast<uint32_t>(static_cast<unsigned char>(e));
  }

  absl::StatusOr<uint32_t> Utf8Char() {
    unsigned char c = static_cast<unsigned char>(Peek());
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || pos_ + len > p_.size()) return Error("invalid UTF-8");
    uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    for (int i = 1; i < len; ++i) {
      unsigned char d = static_cast<unsigned char>(p_[pos_ + i]);
      if ((d & 0xC0) != 0x80) return Error("invalid UTF-8");
      cp = (cp << 6) | (d & 0x3F);
    }
    static constexpr uint32_t kMinForLen[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMinForLen[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      return Error("invalid UTF-8");
    }
    pos_ += len;
    return cp;
  }

  absl::StatusOr<std::string> Class() {
    ++pos_;  // '['
    bool negated = false;
    if (Peek() == '^') negated = true, ++pos_;
    CodePointRanges ranges;
    bool first = true;
    while (true) {
      if (AtEnd()) return Error("unterminated character class");
      if (Peek() == ']' && !first) {
        ++pos_;
        break;
      }
      first = false;
      uint32_t lo;
      if (Peek() == '\\') {
        ++pos_;
        if (ClassEscape(Peek(), &ranges)) {
          ++pos_;
          continue;
        }
        if (Peek() == 'b') {
          ++pos_;
          lo = '\b';
        } else {
          absl::StatusOr<uint32_t> c = EscapedChar();
          if (!c.ok()) return c.status();
          lo = *c;
        }
      } else {
        absl::StatusOr<uint32_t> c = Utf8Char();
        if (!c.ok()) return c.status();
        lo = *c;
      }
      uint32_t hi = lo;
      if (Peek() == '-' && Peek(1) != ']' && Peek(1) != '\0') {
        ++pos_;
        absl::StatusOr<uint32_t> h;
        if (Peek() == '\\') {
          ++pos_;
          h = EscapedChar();
        } else {
          h = Utf8Char();
        }
        if (!h.ok()) return h.status();
        hi = *h;
        if (hi < lo) return Error("character range out of order");
      }
      ranges.emplace_back(lo, hi);
    }
    ranges = NormalizeRanges(std::move(ranges));
    if (negated) ranges = ComplementRanges(ranges);
    std::string expr = ClassExpr(ranges);
    if (expr.empty()) return Error("character class matches nothing");
    return expr;
  }

  absl::StatusOr<std::string> Atom(int depth) {
    char c = Peek();
    switch (c) {
      case '(': {
        ++pos_;
        if (Peek() == '?') {
          if (Peek(1) != ':') return Error("lookaround and named groups are not supported");
          pos_ += 2;
        }
        absl::StatusOr<std::string> inner = Alternation(depth + 1);
        if (!inner.ok()) return inner.status();
        if (Peek() != ')') return Error("unbalanced \"(\"");
        ++pos_;
        return absl::StrCat("(", *inner, ")");
      }
      case '[':
        return Class();
      case '.':
        ++pos_;
        return ClassExpr(ComplementRanges({{'\n', '\n'}}));
      case '^':
        return Error("\"^\" is supported only at the start");
      case '$':
        return Error("\"$\" is supported only at the end");
      case '*': case '+': case '?':
        return Error("nothing to repeat");
      case '\\': {
        ++pos_;
        CodePointRanges r;
        if (ClassEscape(Peek(), &r)) {
          ++pos_;
          return ClassExpr(r);
        }
        if (Peek() == 'b' || Peek() == 'B') return Error("word boundaries are not supported");
        absl::StatusOr<uint32_t> e = EscapedChar();
        if (!e.ok()) return e.status();
        return Literal(*e);
      }
      default: {
        absl::StatusOr<uint32_t> cp = Utf8Char();
        if (!cp.ok()) return cp.status();
        return Literal(*cp);
      }
    }
  }

  std::string_view p_;
  bool json_;
  size_t pos_ = 0;
};

}  // namespace

absl::StatusOr<std::string> RegexToExpression(std::string_view pattern, RegexContext context) {
  return RegexCompiler(pattern, context == RegexContext::kJsonStringContent).Run();
}

absl::StatusOr<std::string> RegexToRules(std::string_view pattern, std::string_view rule_name) {
  absl::StatusOr<std::string> expr = RegexToExpression(pattern, RegexContext::kRaw);
  if (!expr.ok()) return expr.status();
  return absl::StrCat(std::string(rule_name), " ::= ", *expr, "\n");
}

absl::StatusOr<std::string> RegexToGrammar(std::string_view pattern) {
  return RegexToRules(pattern, "root");
}

}  // namespace folio::structured
