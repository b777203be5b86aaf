// Python's string operations as Jinja templates see them (jinja_render.h): code points,
// whitespace, strip/split/splitlines/replace, capitalize/title, HTML escaping, equality.
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_replace.h"
#include "services/frontend/jinja/jinja.h"
#include "services/frontend/jinja/jinja_render.h"

namespace folio::frontend::jinja {

std::vector<std::string> CodePoints(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    size_t n = 1;
    while (i + n < s.size() && (static_cast<unsigned char>(s[i + n]) & 0xC0) == 0x80) ++n;
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

bool Equal(const Value& a, const Value& b) {
  const bool a_num = a.is_number() || a.is_bool();
  const bool b_num = b.is_number() || b.is_bool();
  if (a_num && b_num) {
    if ((a.is_int() || a.is_bool()) && (b.is_int() || b.is_bool())) {
      auto i = [](const Value& v) { return v.is_bool() ? (v.as_bool() ? 1 : 0) : v.as_int(); };
      return i(a) == i(b);
    }
    const double x = a.is_bool() ? (a.as_bool() ? 1 : 0) : a.as_double();
    const double y = b.is_bool() ? (b.as_bool() ? 1 : 0) : b.as_double();
    return x == y;
  }
  if (a.TypeName() != b.TypeName()) return false;
  if (a.is_undefined() || a.is_none()) return true;
  if (a.is_string()) return a.as_string() == b.as_string();
  if (a.is_callable()) return a.SameObject(b);
  if (a.is_list()) {
    if (a.is_tuple() != b.is_tuple() || a.list().size() != b.list().size()) return false;
    for (size_t i = 0; i < a.list().size(); ++i) {
      if (!Equal(a.list()[i], b.list()[i])) return false;
    }
    return true;
  }
  if (a.map().size() != b.map().size()) return false;
  for (const auto& [k, v] : a.map()) {
    const Value* other = b.Find(k);
    if (other == nullptr || !Equal(v, *other)) return false;
  }
  return true;
}

std::string HtmlEscape(const std::string& s) {
  return absl::StrReplaceAll(s, {{"&", "&amp;"}, {"<", "&lt;"}, {">", "&gt;"}, {"\"", "&#34;"},
                                 {"'", "&#39;"}});
}


bool IsPySpace(char c) {
  return c == ' ' || (c >= '\t' && c <= '\r') || (c >= '\x1c' && c <= '\x1f');
}

std::string Strip(const std::string& s, const std::optional<std::string>& chars, bool left,
                  bool right) {
  auto strip_char = [&](char c) { return chars ? chars->find(c) != std::string::npos : IsPySpace(c); };
  size_t b = 0, e = s.size();
  if (left) while (b < e && strip_char(s[b])) ++b;
  if (right) while (e > b && strip_char(s[e - 1])) --e;
  return s.substr(b, e - b);
}

std::string Capitalize(const std::string& s) {
  std::string out = absl::AsciiStrToLower(s);
  if (!out.empty()) out[0] = absl::ascii_toupper(out[0]);
  return out;
}

std::string Title(const std::string& s) {
  std::string out = s;
  bool start = true;
  for (char& c : out) {
    if (absl::ascii_isalpha(c)) {
      c = start ? absl::ascii_toupper(c) : absl::ascii_tolower(c);
      start = false;
    } else {
      start = !absl::ascii_isdigit(c) && c != '\'' && static_cast<unsigned char>(c) < 0x80;
    }
  }
  return out;
}

// Python's str.splitlines().
std::vector<std::string> SplitLines(const std::string& s) {
  std::vector<std::string> out;
  std::string line;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    size_t skip = 0;
    if (c == '\n' || c == '\v' || c == '\f' || (c >= '\x1c' && c <= '\x1e')) {
      skip = 1;
    } else if (c == '\r') {
      skip = i + 1 < s.size() && s[i + 1] == '\n' ? 2 : 1;
    } else if (s.compare(i, 2, "\xc2\x85") == 0) {
      skip = 2;
    } else if (s.compare(i, 3, "\xe2\x80\xa8") == 0 || s.compare(i, 3, "\xe2\x80\xa9") == 0) {
      skip = 3;
    }
    if (skip == 0) {
      line += c;
      continue;
    }
    out.push_back(std::move(line));
    line.clear();
    i += skip - 1;
  }
  if (!line.empty()) out.push_back(std::move(line));
  return out;
}

// Python's str.split / str.rsplit; `sep` nullopt: runs of whitespace.
std::vector<std::string> Split(const std::string& s, const std::optional<std::string>& sep,
                               int64_t maxsplit, bool from_right) {
  std::vector<std::string> out;
  if (!sep) {
    std::string rest = Strip(s, std::nullopt, !from_right, from_right);
    while (!rest.empty()) {
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
        out.push_back(rest);
        break;
      }
      if (!from_right) {
        size_t e = 0;
        while (e < rest.size() && !IsPySpace(rest[e])) ++e;
        out.push_back(rest.substr(0, e));
        rest = Strip(rest.substr(e), std::nullopt, true, false);
      } else {
        size_t b = rest.size();
        while (b > 0 && !IsPySpace(rest[b - 1])) --b;
        out.push_back(rest.substr(b));
        rest = Strip(rest.substr(0, b), std::nullopt, false, true);
      }
    }
    if (from_right) std::reverse(out.begin(), out.end());
    return out;
  }
  if (!from_right) {
    size_t start = 0;
    for (;;) {
      const size_t at = maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit
                            ? std::string::npos
                            : s.find(*sep, start);
      if (at == std::string::npos) {
        out.push_back(s.substr(start));
        return out;
      }
      out.push_back(s.substr(start, at - start));
      start = at + sep->size();
    }
  }
  size_t end = s.size();
  for (;;) {
    const size_t at = (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) ||
                              end < sep->size()
                          ? std::string::npos
                          : s.rfind(*sep, end - sep->size());
    if (at == std::string::npos) {
      out.push_back(s.substr(0, end));
      break;
    }
    out.push_back(s.substr(at + sep->size(), end - at - sep->size()));
    end = at;
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::string Replace(const std::string& s, const std::string& from, const std::string& to,
                    int64_t count) {
  std::string out;
  if (from.empty()) {  // Python puts `to` around every code point
    const std::vector<std::string> cps = CodePoints(s);
    int64_t n = 0;
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || n < count) {
        out += to;
        ++n;
      }
      if (i < cps.size()) out += cps[i];
    }
    return out;
  }
  size_t start = 0;
  for (int64_t n = 0; count < 0 || n < count; ++n) {
    const size_t at = s.find(from, start);
    if (at == std::string::npos) break;
    out.append(s, start, at - start);
    out += to;
    start = at + from.size();
  }
  out.append(s, start, std::string::npos);
  return out;
}

}  // namespace folio::frontend::jinja
