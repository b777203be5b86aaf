// jinja::Template's lexer (jinja_lex.h).
#include "services/frontend/jinja/jinja_lex.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "services/frontend/jinja/jinja_ast.h"

namespace folio::frontend::jinja {
namespace {

// ---------------------------------------------------------------------------------------
// Lexer: the source becomes text tokens and the tokens inside {{ }} and {% %}.

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

class Lexer {
 public:
  explicit Lexer(std::string_view src) : src_(src) {}

  std::vector<Token> Run() {
    bool strip_next_text = false;
    while (pos_ < src_.size()) {
      size_t open = src_.find('{', pos_);
      while (open != std::string_view::npos && open + 1 < src_.size() &&
             src_[open + 1] != '{' && src_[open + 1] != '%' && src_[open + 1] != '#') {
        open = src_.find('{', open + 1);
      }
      if (open == std::string_view::npos || open + 1 >= src_.size()) open = src_.size();
      std::string text(src_.substr(pos_, open - pos_));
      if (strip_next_text) {
        text.erase(0, std::find_if_not(text.begin(), text.end(), IsSpace) - text.begin());
      }
      strip_next_text = false;
      if (open == src_.size()) {
        EmitText(std::move(text));
        break;
      }
      const char kind = src_[open + 1];
      size_t p = open + 2;
      const bool strip_before = p < src_.size() && src_[p] == '-';
      const bool keep_indent = p < src_.size() && src_[p] == '+';
      if (strip_before || keep_indent) ++p;
      if (strip_before) {
        while (!text.empty() && IsSpace(text.back())) text.pop_back();
      } else if (kind != '{' && !keep_indent) {
        // lstrip_blocks: spaces and tabs from the start of the line to a block tag go.
        size_t i = text.size();
        while (i > 0 && (text[i - 1] == ' ' || text[i - 1] == '\t')) --i;
        const bool at_line_start = i > 0 ? text[i - 1] == '\n' : (pos_ == 0 || src_[pos_ - 1] == '\n');
        if (at_line_start) text.resize(i);
      }
      EmitText(std::move(text));
      CountLines(pos_, open);
      pos_ = p;
      bool strip_after = false;
      if (kind == '#') {
        const size_t close = src_.find("#}", pos_);
        if (close == std::string_view::npos) throw Error(line_, "unclosed comment");
        strip_after = close > pos_ && src_[close - 1] == '-';
        CountLines(pos_, close);
        pos_ = close + 2;
        if (!strip_after) TrimBlockNewline();
      } else {
        const bool is_var = kind == '{';
        out_.push_back({is_var ? Tok::kVarBegin : Tok::kBlockBegin, "", line_});
        strip_after = LexTag(is_var ? '}' : '%');
        out_.push_back({is_var ? Tok::kVarEnd : Tok::kBlockEnd, "", line_});
        if (!is_var && !strip_after) TrimBlockNewline();
      }
      strip_next_text = strip_after;
    }
    out_.push_back({Tok::kEnd, "", line_});
    return std::move(out_);
  }

 private:
  // Jinja2 writes every newline in template text as "\n" (newline_sequence).
  void EmitText(std::string text) {
    if (text.find('\r') != std::string::npos) {
      text = absl::StrReplaceAll(text, {{"\r\n", "\n"}});
      std::replace(text.begin(), text.end(), '\r', '\n');
    }
    if (!text.empty()) out_.push_back({Tok::kText, std::move(text), line_});
  }
  void CountLines(size_t from, size_t to) {
    line_ += static_cast<int>(std::count(src_.begin() + from, src_.begin() + to, '\n'));
  }
  // trim_blocks: the first newline after a block tag goes.
  void TrimBlockNewline() {
    if (pos_ < src_.size() && src_[pos_] == '\n') {
      ++pos_;
      ++line_;
    } else if (pos_ + 1 < src_.size() && src_[pos_] == '\r' && src_[pos_ + 1] == '\n') {
      pos_ += 2;
      ++line_;
    }
  }

  // Lexes up to and past the closing "<close>}" (or "-<close>}"). Returns whether it had
  // the '-'.
  bool LexTag(char close) {
    for (;;) {
      while (pos_ < src_.size() && IsSpace(src_[pos_])) {
        if (src_[pos_] == '\n') ++line_;
        ++pos_;
      }
      if (pos_ >= src_.size()) throw Error(line_, "unclosed tag");
      const std::string_view rest = src_.substr(pos_);
      if (rest.size() >= 3 && rest[0] == '-' && rest[1] == close && rest[2] == '}') {
        pos_ += 3;
        return true;
      }
      if (rest.size() >= 2 && rest[0] == close && rest[1] == '}') {
        pos_ += 2;
        return false;
      }
      const char c = rest[0];
      if (absl::ascii_isalpha(c) || c == '_') {
        size_t n = 1;
        while (n < rest.size() && (absl::ascii_isalnum(rest[n]) || rest[n] == '_')) ++n;
        out_.push_back({Tok::kName, std::string(rest.substr(0, n)), line_});
        pos_ += n;
      } else if (absl::ascii_isdigit(c)) {
        size_t n = 0;
        bool is_float = false;
        while (n < rest.size() && (absl::ascii_isdigit(rest[n]) || rest[n] == '_')) ++n;
        if (n + 1 < rest.size() && rest[n] == '.' && absl::ascii_isdigit(rest[n + 1])) {
          is_float = true;
          ++n;
          while (n < rest.size() && (absl::ascii_isdigit(rest[n]) || rest[n] == '_')) ++n;
        }
        if (n < rest.size() && (rest[n] == 'e' || rest[n] == 'E')) {  // 1e16, 2.5e-3
          size_t m = n + 1;
          if (m < rest.size() && (rest[m] == '+' || rest[m] == '-')) ++m;
          if (m < rest.size() && absl::ascii_isdigit(rest[m])) {
            while (m < rest.size() && absl::ascii_isdigit(rest[m])) ++m;
            n = m;
            is_float = true;
          }
        }
        std::string spelling(rest.substr(0, n));
        spelling.erase(std::remove(spelling.begin(), spelling.end(), '_'), spelling.end());
        out_.push_back({is_float ? Tok::kFloat : Tok::kInt, spelling, line_});
        pos_ += n;
      } else if (c == '\'' || c == '"') {
        out_.push_back({Tok::kString, LexString(c), line_});
      } else {
        static constexpr std::string_view kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+",
                                                    "-",  "*",  "/",  "%",  "~",  "<",  ">",
                                                    "(",  ")",  "[",  "]",  "{",  "}",  ",",
                                                    ".",  ":",  "|",  "="};
        bool found = false;
        for (std::string_view op : kOps) {
          if (rest.substr(0, op.size()) == op) {
            out_.push_back({Tok::kOp, std::string(op), line_});
            pos_ += op.size();
            found = true;
            break;
          }
        }
        if (!found) throw Error(line_, absl::StrCat("unexpected character '", std::string(1, c), "'"));
      }
    }
  }

  std::string LexString(char quote) {
    std::string out;
    ++pos_;
    while (pos_ < src_.size() && src_[pos_] != quote) {
      char c = src_[pos_++];
      if (c == '\n') ++line_;
      if (c == '\\' && pos_ < src_.size()) {
        const char e = src_[pos_++];
        switch (e) {
          case 'n': out += '\n'; break;
          case 't': out += '\t'; break;
          case 'r': out += '\r'; break;
          case '\\': out += '\\'; break;
          case '\'': out += '\''; break;
          case '"': out += '"'; break;
          default: out += '\\'; out += e; break;
        }
        continue;
      }
      out += c;
    }
    if (pos_ >= src_.size()) throw Error(line_, "unclosed string literal");
    ++pos_;
    return out;
  }

  std::string_view src_;
  size_t pos_ = 0;
  int line_ = 1;
  std::vector<Token> out_;
};

}  // namespace

std::vector<Token> Lex(std::string_view source) { return Lexer(source).Run(); }

}  // namespace folio::frontend::jinja
