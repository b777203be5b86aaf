// jinja::Value: truthiness and the ways a value is printed.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/ascii.h"

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "services/frontend/jinja/jinja.h"
#include "services/frontend/jinja/jinja_ast.h"

namespace folio::frontend::jinja {
namespace {

// Python's repr of a float: the shortest digits that read back the same, written fixed
// when the exponent is in [-4, 16) (with ".0" when it would look like an integer), else as
// d.ddde+XX.
std::string FloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  const std::string sci(buf, end);  // -d.ddde+XX
  const size_t e = sci.find('e');
  const int exp = std::atoi(sci.c_str() + e + 1);
  std::string digits;
  for (size_t i = 0; i < e; ++i) {
    if (absl::ascii_isdigit(sci[i])) digits += sci[i];
  }
  const std::string sign = d < 0 ? "-" : "";
  if (exp >= -4 && exp < 16) {
    std::string out;
    if (exp < 0) {
      out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    } else if (static_cast<int>(digits.size()) <= exp + 1) {
      out = digits + std::string(static_cast<size_t>(exp + 1 - static_cast<int>(digits.size())), '0') + ".0";
    } else {
      out = digits.substr(0, static_cast<size_t>(exp + 1)) + "." + digits.substr(static_cast<size_t>(exp + 1));
    }
    return sign + out;
  }
  std::string mantissa = digits.substr(0, 1);
  if (digits.size() > 1) mantissa += "." + digits.substr(1);
  char exp_buf[16];
  std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
  return sign + mantissa + exp_buf;
}

// Decodes one UTF-8 code point at s[i] (advancing i); invalid bytes decode as themselves.
uint32_t DecodeUtf8(const std::string& s, size_t* i) {
  const unsigned char c = static_cast<unsigned char>(s[*i]);
  int n = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : -1;
  if (n <= 0 || *i + static_cast<size_t>(n) >= s.size()) {
    ++*i;
    return c;
  }
  uint32_t cp = n == 0 ? c : c & (0x3F >> n);
  for (int k = 1; k <= n; ++k) {
    const unsigned char cc = static_cast<unsigned char>(s[*i + k]);
    if ((cc & 0xC0) != 0x80) {
      ++*i;
      return c;
    }
    cp = (cp << 6) | (cc & 0x3F);
  }
  *i += n + 1;
  return cp;
}

// Python's json.dumps of a string.
std::string JsonString(const std::string& s, bool ensure_ascii) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"': out += "\\\""; ++i; continue;
      case '\\': out += "\\\\"; ++i; continue;
      case '\n': out += "\\n"; ++i; continue;
      case '\r': out += "\\r"; ++i; continue;
      case '\t': out += "\\t"; ++i; continue;
      case '\b': out += "\\b"; ++i; continue;
      case '\f': out += "\\f"; ++i; continue;
      default: break;
    }
    char buf[16];
    if (c < 0x20 || (c == 0x7f && ensure_ascii)) {
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
      ++i;
      continue;
    }
    if (c < 0x80 || !ensure_ascii) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    const uint32_t cp = DecodeUtf8(s, &i);
    if (cp >= 0x10000) {
      const uint32_t v = cp - 0x10000;
      std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
    } else {
      std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
    }
    out += buf;
  }
  return out + "\"";
}

void AppendJson(const Value& v, const Value::JsonOptions& o, int depth, std::string* out,
                std::string* error) {
  if (depth > 500) {
    *error = "the value nests too deeply";
    return;
  }
  const bool pretty = o.indent >= 0;
  const std::string newline =
      pretty ? "\n" + std::string(static_cast<size_t>(o.indent) * (depth + 1), ' ') : "";
  const std::string close_newline =
      pretty ? "\n" + std::string(static_cast<size_t>(o.indent) * depth, ' ') : "";
  const std::string item_sep = !o.item_separator.empty() || !o.key_separator.empty()
                                   ? o.item_separator : (pretty ? "," : ", ");
  const std::string key_sep = !o.item_separator.empty() || !o.key_separator.empty()
                                  ? o.key_separator : ": ";
  if (v.is_undefined() || v.is_callable() || v.is_generator()) {
    *error = absl::StrCat("Object of type ",
                          v.is_undefined() ? "Undefined" : (v.is_callable() ? "Macro" : "generator"),
                          " is not JSON serializable");
  } else if (v.is_none()) {
    *out += "null";
  } else if (v.is_bool()) {
    *out += v.as_bool() ? "true" : "false";
  } else if (v.is_int()) {
    absl::StrAppend(out, v.as_int());
  } else if (v.is_double()) {
    const double d = v.as_double();
    *out += std::isfinite(d) ? FloatRepr(d) : (std::isnan(d) ? "NaN" : (d > 0 ? "Infinity" : "-Infinity"));
  } else if (v.is_string()) {
    *out += JsonString(v.as_string(), o.ensure_ascii);
  } else if (v.is_list()) {
    if (v.list().empty()) {
      *out += "[]";
      return;
    }
    *out += "[";
    for (size_t i = 0; i < v.list().size() && error->empty(); ++i) {
      if (i > 0) *out += item_sep;
      *out += newline;
      AppendJson(v.list()[i], o, depth + 1, out, error);
    }
    *out += close_newline + "]";
  } else {
    if (v.map().empty()) {
      *out += "{}";
      return;
    }
    std::vector<std::pair<std::string, const Value*>> entries;  // JSON keys are strings
    for (const auto& kv : v.map()) entries.emplace_back(DecodeKey(kv.first).ToString(), &kv.second);
    if (o.sort_keys) {
      std::stable_sort(entries.begin(), entries.end(),
                       [](const auto& a, const auto& b) { return a.first < b.first; });
    }
    *out += "{";
    for (size_t i = 0; i < entries.size() && error->empty(); ++i) {
      if (i > 0) *out += item_sep;
      *out += newline + JsonString(entries[i].first, o.ensure_ascii) + key_sep;
      AppendJson(*entries[i].second, o, depth + 1, out, error);
    }
    *out += close_newline + "}";
  }
}

template <typename Json>
Value FromJsonImpl(const Json& j, int depth) {
  if (depth > 500) return Value::MakeNone();  // deeper than any request parser allows
  switch (j.type()) {
    case nlohmann::json::value_t::null: return Value::MakeNone();
    case nlohmann::json::value_t::boolean: return Value(j.template get<bool>());
    case nlohmann::json::value_t::number_integer: return Value(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      const uint64_t u = j.template get<uint64_t>();
      return u > static_cast<uint64_t>(INT64_MAX) ? Value(static_cast<double>(u))
                                                   : Value(static_cast<int64_t>(u));
    }
    case nlohmann::json::value_t::number_float: return Value(j.template get<double>());
    case nlohmann::json::value_t::string: return Value(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      Value::List list;
      for (const auto& e : j) list.push_back(FromJsonImpl(e, depth + 1));
      return Value(std::move(list));
    }
    case nlohmann::json::value_t::object: {
      Value::Map map;
      for (auto it = j.begin(); it != j.end(); ++it) {
        map.emplace_back(it.key(), FromJsonImpl(it.value(), depth + 1));
      }
      return Value(std::move(map));
    }
    default: return Value::MakeNone();  // binary, discarded
  }
}

// Python's repr of a str: single quotes unless it holds ' and no ".
std::string StringRepr(const std::string& s) {
  const char quote = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, quote);
  for (char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (ch == quote || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\r') {
      out += "\\r";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + quote;
}

}  // namespace

std::string EncodeKey(const Value& key, int line) {
  if (key.is_string()) return key.as_string();
  if (key.is_int()) return absl::StrCat("\x01i", key.as_int());
  if (key.is_bool()) return absl::StrCat("\x01i", key.as_bool() ? 1 : 0);  // True == 1
  throw Error(line, absl::StrCat("a ", key.TypeName(), " cannot be a dict key"));
}

Value DecodeKey(const std::string& key) {
  if (key.size() > 2 && key[0] == '\x01' && key[1] == 'i') {
    int64_t i = 0;
    auto [end, ec] = std::from_chars(key.data() + 2, key.data() + key.size(), i);
    if (ec == std::errc() && end == key.data() + key.size()) return Value(i);
  }
  return Value(key);
}

const Callable* BuiltinFunction(std::string_view name) {
  static const auto* builtins = [] {
    auto* m = new std::vector<Callable>;
    for (const char* n : {"raise_exception", "strftime_now", "namespace", "range", "dict"}) {
      Callable c;
      c.builtin = n;
      m->push_back(c);
    }
    return m;
  }();
  for (const Callable& c : *builtins) {
    if (c.builtin == name) return &c;
  }
  return nullptr;
}

const Value* Value::Find(std::string_view key) const {
  if (!is_map()) return nullptr;
  for (const auto& [k, v] : map()) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Value::Set(const std::string& key, Value value) const {
  for (auto& [k, v] : map()) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  map().emplace_back(key, std::move(value));
}

bool Value::Truthy() const {
  if (is_undefined() || is_none()) return false;
  if (is_bool()) return as_bool();
  if (is_int()) return as_int() != 0;
  if (is_double()) return as_double() != 0.0;
  if (is_string()) return !as_string().empty();
  if (is_generator() || is_callable()) return true;
  if (is_list()) return !list().empty();
  return !map().empty();
}

std::string Value::ToString() const {
  if (is_undefined()) return "";
  if (is_generator()) return "<generator object>";
  if (is_string()) return as_string();
  return Repr();
}

std::string Value::Repr() const {
  if (is_undefined()) return "";
  if (is_none()) return "None";
  if (is_bool()) return as_bool() ? "True" : "False";
  if (is_int()) return absl::StrCat(as_int());
  if (is_double()) return FloatRepr(as_double());
  if (is_string()) return StringRepr(as_string());
  if (is_callable()) return "<Macro>";
  std::string out;
  if (is_list()) {
    out = is_tuple() ? "(" : "[";
    for (size_t i = 0; i < list().size(); ++i) {
      if (i > 0) out += ", ";
      out += list()[i].Repr();
    }
    if (is_tuple()) return out + (list().size() == 1 ? ",)" : ")");
    return out + "]";
  }
  out = "{";
  bool first = true;
  for (const auto& [k, v] : map()) {
    if (!first) out += ", ";
    first = false;
    out += DecodeKey(k).Repr() + ": " + v.Repr();
  }
  return out + "}";
}

std::string Value::ToJson(const JsonOptions& options, std::string* error) const {
  std::string out;
  error->clear();
  AppendJson(*this, options, 0, &out, error);
  return out;
}

std::string Value::ToJson(int indent) const {
  JsonOptions o;
  o.indent = indent;
  std::string error;
  std::string out = ToJson(o, &error);
  return error.empty() ? out : "null";
}

Value Value::FromJson(const nlohmann::ordered_json& j) { return FromJsonImpl(j, 0); }
Value Value::FromJson(const nlohmann::json& j) { return FromJsonImpl(j, 0); }

bool Value::SameObject(const Value& other) const {
  if (v_.index() != other.v_.index()) return false;
  if (is_list()) return std::get<std::shared_ptr<List>>(v_) == std::get<std::shared_ptr<List>>(other.v_);
  if (is_map()) return std::get<std::shared_ptr<Map>>(v_) == std::get<std::shared_ptr<Map>>(other.v_);
  if (is_callable()) {
    return std::get<std::shared_ptr<const Callable>>(v_) ==
           std::get<std::shared_ptr<const Callable>>(other.v_);
  }
  if (is_undefined() || is_none()) return true;
  if (is_bool()) return as_bool() == other.as_bool();
  if (is_int()) return as_int() == other.as_int();
  if (is_double()) return as_double() == other.as_double();
  return as_string() == other.as_string();
}

std::string Value::TypeName() const {
  if (is_undefined()) return "undefined";
  if (is_none()) return "none";
  if (is_bool()) return "boolean";
  if (is_int()) return "integer";
  if (is_double()) return "float";
  if (is_string()) return "string";
  if (is_list()) return "list";
  if (is_callable()) return "macro";
  return "dict";
}

}  // namespace folio::frontend::jinja
