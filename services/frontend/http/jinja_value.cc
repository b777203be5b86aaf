// jinja::Value: truthiness and the ways a value is printed.
#include <charconv>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "services/frontend/http/jinja.h"

namespace folio::frontend::jinja {
namespace {

// Python's repr of a float: the shortest text that reads back the same, with ".0" when
// it would otherwise look like an integer.
std::string FloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), d);
  std::string s(buf, end);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

std::string JsonString(const std::string& s) {
  // nlohmann escapes as JSON requires and keeps UTF-8 as it is (Python's
  // ensure_ascii=False, as Hugging Face's tojson uses). Invalid UTF-8 becomes U+FFFD.
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void AppendJson(const Value& v, int indent, int depth, std::string* out) {
  const std::string newline =
      indent >= 0 ? "\n" + std::string(static_cast<size_t>(indent) * (depth + 1), ' ') : "";
  const std::string close_newline =
      indent >= 0 ? "\n" + std::string(static_cast<size_t>(indent) * depth, ' ') : "";
  // Python's json.dumps separators: ", " compact, "," when indenting.
  const char* item_sep = indent >= 0 ? "," : ", ";
  if (v.is_undefined() || v.is_none()) {
    *out += "null";
  } else if (v.is_bool()) {
    *out += v.as_bool() ? "true" : "false";
  } else if (v.is_int()) {
    absl::StrAppend(out, v.as_int());
  } else if (v.is_double()) {
    const double d = v.as_double();
    *out += std::isfinite(d) ? FloatRepr(d) : (std::isnan(d) ? "NaN" : (d > 0 ? "Infinity" : "-Infinity"));
  } else if (v.is_string()) {
    *out += JsonString(v.as_string());
  } else if (v.is_list()) {
    if (v.list().empty()) {
      *out += "[]";
      return;
    }
    *out += "[";
    for (size_t i = 0; i < v.list().size(); ++i) {
      if (i > 0) *out += item_sep;
      *out += newline;
      AppendJson(v.list()[i], indent, depth + 1, out);
    }
    *out += close_newline + "]";
  } else {
    if (v.map().empty()) {
      *out += "{}";
      return;
    }
    *out += "{";
    bool first = true;
    for (const auto& [key, value] : v.map()) {
      if (!first) *out += item_sep;
      first = false;
      *out += newline + JsonString(key) + ": ";
      AppendJson(value, indent, depth + 1, out);
    }
    *out += close_newline + "}";
  }
}

}  // namespace

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
  if (is_list()) return !list().empty();
  return !map().empty();
}

std::string Value::ToString() const {
  if (is_undefined()) return "";
  if (is_string()) return as_string();
  return Repr();
}

std::string Value::Repr() const {
  if (is_undefined()) return "";
  if (is_none()) return "None";
  if (is_bool()) return as_bool() ? "True" : "False";
  if (is_int()) return absl::StrCat(as_int());
  if (is_double()) return FloatRepr(as_double());
  if (is_string()) {
    std::string out = "'";
    for (char c : as_string()) {
      if (c == '\'' || c == '\\') out += '\\';
      if (c == '\n') {
        out += "\\n";
        continue;
      }
      out += c;
    }
    return out + "'";
  }
  std::string out;
  if (is_list()) {
    out = "[";
    for (size_t i = 0; i < list().size(); ++i) {
      if (i > 0) out += ", ";
      out += list()[i].Repr();
    }
    return out + "]";
  }
  out = "{";
  bool first = true;
  for (const auto& [k, v] : map()) {
    if (!first) out += ", ";
    first = false;
    out += Value(k).Repr() + ": " + v.Repr();
  }
  return out + "}";
}

std::string Value::ToJson(int indent) const {
  std::string out;
  AppendJson(*this, indent, 0, &out);
  return out;
}

std::string Value::TypeName() const {
  if (is_undefined()) return "undefined";
  if (is_none()) return "none";
  if (is_bool()) return "boolean";
  if (is_int()) return "integer";
  if (is_double()) return "float";
  if (is_string()) return "string";
  if (is_list()) return "list";
  return "dict";
}

}  // namespace folio::frontend::jinja
