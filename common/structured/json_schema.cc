// JSON Schema -> GBNF: one expression per schema node, a rule per node that is
// repeated or referenced, shared helper rules (whitespace, strings, numbers, any value)
// named `<prefix>-...`.
#include "common/structured/json_schema.h"

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/structured/grammar.h"
#include "common/structured/number_ranges.h"
#include "common/structured/regex.h"
#include "nlohmann/json.hpp"

namespace folio::structured {
namespace {

using Json = nlohmann::ordered_json;

constexpr int kMaxSchemaDepth = 64;
constexpr double kMaxBound = 9e15;

const absl::flat_hash_set<std::string>& Annotations() {
  static const auto* kSet = new absl::flat_hash_set<std::string>{
      "title", "description", "$schema", "$id", "$comment", "examples", "default",
      "deprecated", "readOnly", "writeOnly", "$defs", "definitions"};
  return *kSet;
}

const absl::flat_hash_set<std::string>& Supported() {
  static const auto* kSet = new absl::flat_hash_set<std::string>{
      "type", "properties", "required", "additionalProperties", "items", "minItems",
      "maxItems", "enum", "const", "minLength", "maxLength", "pattern", "format",
      "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "anyOf", "oneOf",
      "allOf", "$ref"};
  return *kSet;
}

class SchemaCompiler {
 public:
  SchemaCompiler(const Json& root, std::string_view prefix, const JsonSchemaOptions& options)
      : root_(root), prefix_(std::string(prefix)), options_(options) {}

  absl::StatusOr<std::string> Run() {
    refs_["#"] = prefix_;
    absl::StatusOr<std::string> expr = Expr(root_, "", 0);
    if (!expr.ok()) return expr.status();
    std::string out = absl::StrCat(prefix_, " ::= ", *expr, "\n", rules_);
    AppendHelpers(&out);
    // A $ref cycle with nothing matched between its steps ({"anyOf":[{"$ref":"#"}]}, or
    // two $defs naming each other) compiles to a left-recursive rule, which no grammar
    // accepts. Whether some cycle does is a property of the whole rule graph (a rule first
    // reached behind a byte may later be reached at the head), so the grammar parser's own
    // check decides, and its refusal is the schema's.
    absl::StatusOr<Grammar> parsed =
        Grammar::Parse(prefix_ == "root" ? out : absl::StrCat("root ::= ", prefix_, "\n", out));
    if (!parsed.ok()) {
      return Error("", absl::StrCat("the schema refers to itself through $ref without matching "
                                    "anything in between (", parsed.status().message(), ")"));
    }
    return out;
  }

 private:
  absl::Status Error(const std::string& path, const std::string& what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("json_schema: ", what, " at ", path.empty() ? "/" : path));
  }
  std::string H(const std::string& name) const { return absl::StrCat(prefix_, "-", name); }
  std::string NewRule(const std::string& expr) {
    std::string name = absl::StrCat(prefix_, "-n", ++num_rules_);
    absl::StrAppend(&rules_, name, " ::= ", expr, "\n");
    return name;
  }
  static std::string Alt(const std::vector<std::string>& alts) {
    if (alts.size() == 1) return alts[0];
    return absl::StrCat("(", absl::StrJoin(alts, " | "), ")");
  }
  absl::StatusOr<std::string> JsonLiteral(const Json& value, const std::string& path) const {
    try {
      return GbnfLiteral(value.dump());
    } catch (const Json::exception&) {
      return Error(path, "a value that is not valid UTF-8");
    }
  }

  void AppendHelpers(std::string* out) const {
    const std::string ws = options_.whitespace == JsonSchemaOptions::Whitespace::kNone
                               ? "\"\""
                               : absl::StrCat("(\" \" | \"\\n\" \" \"{0,", kMaxIndent, "})?");
    absl::StrAppend(
        out, H("ws"), " ::= ", ws, "\n",                                           //
        H("char"), " ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})\n",
        H("string"), " ::= \"\\\"\" ", H("char"), "* \"\\\"\"\n",                //
        H("integer"), " ::= ", IntegerRangeExpr(std::nullopt, std::nullopt), "\n",  //
        H("number"), " ::= ", H("integer"), " (\".\" [0-9]{1,", kMaxFractionDigits,
        "})? ([eE] [-+]? [0-9]{1,3})?\n",                                          //
        H("boolean"), " ::= \"true\" | \"false\"\n",                               //
        H("null"), " ::= \"null\"\n",                                              //
        H("value"), " ::= ", H("object"), " | ", H("array"), " | ", H("string"), " | ",
        H("number"), " | ", H("boolean"), " | ", H("null"), "\n",                  //
        H("member"), " ::= ", H("string"), " ", H("ws"), " \":\" ", H("ws"), " ", H("value"),
        "\n",                                                                      //
        H("object"), " ::= \"{\" ", H("ws"), " (", H("member"), " (", H("ws"), " \",\" ",
        H("ws"), " ", H("member"), ")* ", H("ws"), ")? \"}\"\n",                   //
        H("array"), " ::= \"[\" ", H("ws"), " (", H("value"), " (", H("ws"), " \",\" ",
        H("ws"), " ", H("value"), ")* ", H("ws"), ")? \"]\"\n");
  }

  absl::StatusOr<std::string> RefRule(const std::string& ref, const std::string& path, int depth) {
    if (auto it = refs_.find(ref); it != refs_.end()) return it->second;
    if (ref.rfind("#/", 0) != 0) {
      return Error(path, absl::StrCat("unsupported $ref \"", ref,
                                      "\" (only local references \"#/...\")"));
    }
    // Resolve the JSON pointer in the root document.
    const Json* node = &root_;
    for (std::string_view rest = std::string_view(ref).substr(2); !rest.empty();) {
      size_t slash = rest.find('/');
      std::string token(rest.substr(0, slash));
      rest = slash == std::string_view::npos ? "" : rest.substr(slash + 1);
      std::string key;
      for (size_t i = 0; i < token.size(); ++i) {
        if (token[i] == '~' && i + 1 < token.size() && (token[i + 1] == '0' || token[i + 1] == '1')) {
          key += token[i + 1] == '0' ? '~' : '/';
          ++i;
        } else {
          key += token[i];
        }
      }
      if (node->is_object() && node->contains(key)) {
        node = &(*node)[key];
      } else if (node->is_array() && !key.empty() &&
                 key.find_first_not_of("0123456789") == std::string::npos && key.size() < 9 &&
                 std::stoul(key) < node->size()) {
        node = &(*node)[std::stoul(key)];
      } else {
        return Error(path, absl::StrCat("$ref \"", ref, "\" does not resolve"));
      }
    }
    std::string name = absl::StrCat(prefix_, "-n", ++num_rules_);
    refs_[ref] = name;
    absl::StatusOr<std::string> expr = Expr(*node, ref.substr(1), depth + 1);
    if (!expr.ok()) return expr.status();
    absl::StrAppend(&rules_, name, " ::= ", *expr, "\n");
    return name;
  }

  absl::StatusOr<std::string> Expr(const Json& schema, const std::string& path, int depth) {
    if (depth > kMaxSchemaDepth) return Error(path, "schema nested too deeply");
    if (schema.is_boolean()) {
      if (schema.get<bool>()) return H("value");
      return Error(path, "schema false matches nothing");
    }
    if (!schema.is_object()) return Error(path, "a schema must be an object or a boolean");
    bool constraining = false;
    for (const auto& [key, value] : schema.items()) {
      if (Supported().contains(key)) {
        constraining = true;
      } else if (!Annotations().contains(key)) {
        return Error(path, absl::StrCat("unsupported JSON Schema keyword \"", key, "\""));
      }
    }
    if (!constraining) return H("value");
    if (schema.contains("$ref")) {
      if (!schema["$ref"].is_string()) return Error(path, "$ref must be a string");
      for (const auto& [key, value] : schema.items()) {
        if (key != "$ref" && Supported().contains(key)) {
          return Error(path, absl::StrCat("\"", key, "\" beside \"$ref\" is not supported"));
        }
      }
      return RefRule(schema["$ref"].get<std::string>(), path, depth);
    }
    if (schema.contains("const")) return JsonLiteral(schema["const"], path + "/const");
    if (schema.contains("enum")) {
      const Json& e = schema["enum"];
      if (!e.is_array() || e.empty()) return Error(path + "/enum", "enum must be a non-empty array");
      std::vector<std::string> alts;
      for (const Json& v : e) {
        absl::StatusOr<std::string> lit = JsonLiteral(v, path + "/enum");
        if (!lit.ok()) return lit.status();
        alts.push_back(*lit);
      }
      return Alt(alts);
    }
    for (const char* key : {"anyOf", "oneOf", "allOf"}) {
      if (!schema.contains(key)) continue;
      const Json& list = schema[key];
      const std::string p = absl::StrCat(path, "/", key);
      if (!list.is_array() || list.empty()) return Error(p, "must be a non-empty array");
      for (const auto& [k, v] : schema.items()) {
        if (k != key && Supported().contains(k)) {
          return Error(path, absl::StrCat("\"", k, "\" beside \"", key, "\" is not supported"));
        }
      }
      if (std::string_view(key) == "allOf" && list.size() != 1) {
        return Error(p, "allOf with more than one schema is not supported");
      }
      std::vector<std::string> alts;
      for (size_t i = 0; i < list.size(); ++i) {
        absl::StatusOr<std::string> e = Expr(list[i], absl::StrCat(p, "/", i), depth + 1);
        if (!e.ok()) return e.status();
        alts.push_back(*e);
      }
      return Alt(alts);
    }
    std::vector<std::string> types;
    if (schema.contains("type")) {
      const Json& t = schema["type"];
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else if (t.is_array() && !t.empty()) {
        for (const Json& x : t) {
          if (!x.is_string()) return Error(path + "/type", "type must be a string or strings");
          types.push_back(x.get<std::string>());
        }
      } else {
        return Error(path + "/type", "type must be a string or a non-empty array");
      }
    } else {
      auto has = [&](std::initializer_list<const char*> keys) {
        for (const char* k : keys) {
          if (schema.contains(k)) return true;
        }
        return false;
      };
      if (has({"properties", "required", "additionalProperties"})) types.push_back("object");
      if (has({"items", "minItems", "maxItems"})) types.push_back("array");
      if (has({"minLength", "maxLength", "pattern", "format"})) types.push_back("string");
      if (has({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})) {
        types.push_back("number");
      }
      if (types.empty()) return H("value");
    }
    std::vector<std::string> alts;
    for (const std::string& t : types) {
      absl::StatusOr<std::string> e = Typed(schema, t, path, depth);
      if (!e.ok()) return e.status();
      alts.push_back(*e);
    }
    return Alt(alts);
  }

  absl::StatusOr<std::optional<int64_t>> Count(const Json& schema, const char* key,
                                               const std::string& path) const {
    if (!schema.contains(key)) return std::optional<int64_t>();
    const Json& v = schema[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0) {
      return Error(path + "/" + key, absl::StrCat(key, " must be a non-negative integer"));
    }
    if (v.get<int64_t>() > kMaxRepetition) {
      return Error(path + "/" + key, absl::StrCat(key, " above the limit of ", kMaxRepetition));
    }
    return std::optional<int64_t>(v.get<int64_t>());
  }

  absl::StatusOr<std::string> Typed(const Json& schema, const std::string& t,
                                    const std::string& path, int depth) {
    if (t == "null") return H("null");
    if (t == "boolean") return H("boolean");
    if (t == "integer" || t == "number") return Numeric(schema, t == "integer", path);
    if (t == "string") return String(schema, path);
    if (t == "array") return Array(schema, path, depth);
    if (t == "object") return Object(schema, path, depth);
    return Error(path + "/type", absl::StrCat("unknown type \"", t, "\""));
  }

  absl::StatusOr<std::string> Numeric(const Json& schema, bool integer, const std::string& path) {
    std::optional<int64_t> lo, hi;
    for (const char* key : {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"}) {
      if (!schema.contains(key)) continue;
      const Json& v = schema[key];
      if (!v.is_number()) return Error(path + "/" + key, absl::StrCat(key, " must be a number"));
      double d = v.get<double>();
      if (!(std::fabs(d) <= kMaxBound)) {
        return Error(path + "/" + key, absl::StrCat(key, " beyond +-9e15 is not supported"));
      }
      std::string_view k = key;
      // Integer bounds of the values allowed: for numbers a subset when a bound is not
      // an integer (the grammar's bounds are integers).
      if (k == "minimum") {
        int64_t b = static_cast<int64_t>(std::ceil(d));
        lo = lo ? std::max(*lo, b) : b;
      } else if (k == "exclusiveMinimum") {
        int64_t b = static_cast<int64_t>(std::floor(d)) + 1;
        lo = lo ? std::max(*lo, b) : b;
      } else if (k == "maximum") {
        int64_t b = static_cast<int64_t>(std::floor(d));
        hi = hi ? std::min(*hi, b) : b;
      } else {
        int64_t b = static_cast<int64_t>(std::ceil(d)) - 1;
        hi = hi ? std::min(*hi, b) : b;
      }
    }
    if (lo && hi && *lo > *hi) return Error(path, "the bounds leave no value");
    if (!lo && !hi) return integer ? H("integer") : H("number");
    return integer ? IntegerRangeExpr(lo, hi) : NumberRangeExpr(lo, hi);
  }

  absl::StatusOr<std::string> String(const Json& schema, const std::string& path) {
    absl::StatusOr<std::optional<int64_t>> min = Count(schema, "minLength", path);
    if (!min.ok()) return min.status();
    absl::StatusOr<std::optional<int64_t>> max = Count(schema, "maxLength", path);
    if (!max.ok()) return max.status();
    const bool lengths = min->has_value() || max->has_value();
    if (schema.contains("format")) {
      if (lengths || schema.contains("pattern")) {
        return Error(path, "format together with pattern, minLength or maxLength is not supported");
      }
      if (!schema["format"].is_string()) return Error(path + "/format", "format must be a string");
      const std::string f = schema["format"].get<std::string>();
      // Days by month (February to 28: a subset, never an invalid date).
      const std::string date =
          "[0-9]{4} \"-\" ((\"0\" [13578] | \"1\" [02]) \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" [01])"
          " | (\"0\" [469] | \"11\") \"-\" (\"0\" [1-9] | [12] [0-9] | \"30\")"
          " | \"02\" \"-\" (\"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8]))";
      const std::string time =
          "([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,6})?"
          " (\"Z\" | [+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])";
      const std::string hex = "[0-9a-f]";
      std::string body;
      if (f == "date") {
        body = date;
      } else if (f == "time") {
        body = time;
      } else if (f == "date-time") {
        body = absl::StrCat(date, " \"T\" ", time);
      } else if (f == "uuid") {
        body = absl::StrCat(hex, "{8} \"-\" ", hex, "{4} \"-\" [1-8] ", hex, "{3} \"-\" [89ab] ",
                            hex, "{3} \"-\" ", hex, "{12}");
      } else {
        return Error(path + "/format", absl::StrCat("unsupported format \"", f,
                                                    "\" (supported: date, time, date-time, uuid)"));
      }
      return absl::StrCat("\"\\\"\" ", body, " \"\\\"\"");
    }
    if (schema.contains("pattern")) {
      if (lengths) return Error(path, "pattern together with minLength or maxLength is not supported");
      if (!schema["pattern"].is_string()) return Error(path + "/pattern", "pattern must be a string");
      std::string pattern = schema["pattern"].get<std::string>();
      // JSON Schema patterns are unanchored: without ^ (or $) any text may come before
      // (or after) the match.
      std::string_view core = pattern;
      const bool start = !core.empty() && core.front() == '^';
      if (start) core.remove_prefix(1);
      size_t backslashes = 0;
      for (size_t i = core.empty() ? 0 : core.size() - 1; i > 0 && core[i - 1] == '\\'; --i) {
        ++backslashes;
      }
      const bool end = !core.empty() && core.back() == '$' && backslashes % 2 == 0;
      if (end) core.remove_suffix(1);
      const std::string wrapped =
          absl::StrCat(start ? "" : "[\\s\\S]*", "(?:", std::string(core), ")", end ? "" : "[\\s\\S]*");
      absl::StatusOr<std::string> expr =
          RegexToExpression(wrapped, RegexContext::kJsonStringContent);
      if (!expr.ok()) {
        return Error(path + "/pattern", absl::StrCat("pattern: ", expr.status().message()));
      }
      return absl::StrCat("\"\\\"\" ", *expr, " \"\\\"\"");
    }
    if (lengths) {
      int64_t lo = min->value_or(0);
      if (max->has_value() && **max < lo) return Error(path, "minLength > maxLength");
      std::string rep = max->has_value() ? absl::StrCat("{", lo, ",", **max, "}")
                                         : absl::StrCat("{", lo, ",}");
      return absl::StrCat("\"\\\"\" ", H("char"), rep, " \"\\\"\"");
    }
    return H("string");
  }

  absl::StatusOr<std::string> Array(const Json& schema, const std::string& path, int depth) {
    absl::StatusOr<std::optional<int64_t>> min = Count(schema, "minItems", path);
    if (!min.ok()) return min.status();
    absl::StatusOr<std::optional<int64_t>> max = Count(schema, "maxItems", path);
    if (!max.ok()) return max.status();
    const int64_t lo = min->value_or(0);
    if (max->has_value() && **max < lo) return Error(path, "minItems > maxItems");
    std::string item = H("value");
    if (schema.contains("items")) {
      absl::StatusOr<std::string> e = Expr(schema["items"], path + "/items", depth + 1);
      if (!e.ok()) return e.status();
      item = NewRule(*e);
    }
    const std::string ws = H("ws");
    if (max->has_value() && **max == 0) return absl::StrCat("\"[\" ", ws, " \"]\"");
    std::string rep = max->has_value()
                          ? absl::StrCat("{", std::max<int64_t>(lo - 1, 0), ",", **max - 1, "}")
                          : absl::StrCat("{", std::max<int64_t>(lo - 1, 0), ",}");
    std::string items =
        absl::StrCat(item, " (", ws, " \",\" ", ws, " ", item, ")", rep, " ", ws);
    if (lo == 0) return absl::StrCat("\"[\" ", ws, " (", items, ")? \"]\"");
    return absl::StrCat("\"[\" ", ws, " ", items, " \"]\"");
  }

  absl::StatusOr<std::string> Object(const Json& schema, const std::string& path, int depth) {
    const std::string ws = H("ws");
    std::optional<std::string> extra;  // the value rule of additional properties
    bool extra_given = schema.contains("additionalProperties");
    if (extra_given) {
      const Json& a = schema["additionalProperties"];
      if (a.is_boolean() && !a.get<bool>()) {
        extra_given = true;
      } else {
        absl::StatusOr<std::string> e = Expr(a, path + "/additionalProperties", depth + 1);
        if (!e.ok()) return e.status();
        extra = NewRule(*e);
      }
    }
    const Json empty = Json::object();
    const Json& props = schema.contains("properties") ? schema["properties"] : empty;
    if (!props.is_object()) return Error(path + "/properties", "properties must be an object");
    absl::flat_hash_set<std::string> required;
    if (schema.contains("required")) {
      const Json& r = schema["required"];
      if (!r.is_array()) return Error(path + "/required", "required must be an array");
      for (const Json& name : r) {
        if (!name.is_string()) return Error(path + "/required", "required must list strings");
        if (!props.contains(name.get<std::string>())) {
          return Error(path + "/required",
                       absl::StrCat("required property \"", name.get<std::string>(),
                                    "\" is not in properties (not supported)"));
        }
        required.insert(name.get<std::string>());
      }
    }
    if (props.empty() && !extra_given) return H("object");  // any object
    std::string extra_member;
    if (extra) {
      extra_member = NewRule(absl::StrCat(H("string"), " ", ws, " \":\" ", ws, " ", *extra));
    }
    // Properties in schema order; optional ones may be left out. With k properties,
    // first_i: members from i on, none written yet; next_i: members from i on, each after
    // a comma. Built from the end.
    std::vector<std::string> members, names;
    for (const auto& [name, sub] : props.items()) {
      absl::StatusOr<std::string> e = Expr(sub, absl::StrCat(path, "/properties/", name), depth + 1);
      if (!e.ok()) return e.status();
      absl::StatusOr<std::string> key = JsonLiteral(Json(name), path + "/properties");
      if (!key.ok()) return key.status();
      members.push_back(NewRule(absl::StrCat(*key, " ", ws, " \":\" ", ws, " ", *e)));
      names.push_back(name);
    }
    const std::string sep = absl::StrCat(ws, " \",\" ", ws);
    std::string first_tail = extra ? absl::StrCat("(", extra_member, " (", sep, " ", extra_member,
                                                  ")*)?")
                                   : "\"\"";
    std::string next_tail =
        extra ? absl::StrCat("(", sep, " ", extra_member, ")*") : "\"\"";
    std::string first = NewRule(first_tail), next = NewRule(next_tail);
    for (size_t i = members.size(); i-- > 0;) {
      const bool req = required.contains(names[i]);
      std::string next_i = req ? absl::StrCat(sep, " ", members[i], " ", next)
                               : absl::StrCat(sep, " ", members[i], " ", next, " | ", next);
      std::string first_i = req ? absl::StrCat(members[i], " ", next)
                                : absl::StrCat(members[i], " ", next, " | ", first);
      next = NewRule(next_i);
      first = NewRule(first_i);
    }
    return absl::StrCat("\"{\" ", ws, " ", first, " ", ws, " \"}\"");
  }

  const Json& root_;
  const std::string prefix_;
  const JsonSchemaOptions options_;
  std::string rules_;
  int num_rules_ = 0;
  absl::flat_hash_map<std::string, std::string> refs_;
};

bool ValidRuleName(std::string_view name) {
  if (name.empty()) return false;
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
          c == '-' || c == '_')) {
      return false;
    }
  }
  return true;
}

}  // namespace

absl::StatusOr<std::string> JsonSchemaToRules(std::string_view schema_json,
                                              std::string_view rule_name,
                                              const JsonSchemaOptions& options) {
  if (!ValidRuleName(rule_name)) {
    return absl::InvalidArgumentError(absl::StrCat("invalid rule name \"", std::string(rule_name), "\""));
  }
  if (schema_json.size() > static_cast<size_t>(kMaxGrammarBytes)) {
    return absl::InvalidArgumentError("json_schema: schema too large");
  }
  Json schema;
  try {
    schema = Json::parse(schema_json.begin(), schema_json.end());
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("json_schema: not valid JSON: ", e.what()));
  }
  return SchemaCompiler(schema, rule_name, options).Run();
}

absl::StatusOr<std::string> JsonSchemaToGrammar(std::string_view schema_json,
                                                const JsonSchemaOptions& options) {
  return JsonSchemaToRules(schema_json, "root", options);
}

std::string JsonObjectGrammar() {
  return *JsonSchemaToGrammar(R"({"type": "object"})", JsonSchemaOptions{});
}

}  // namespace folio::structured
