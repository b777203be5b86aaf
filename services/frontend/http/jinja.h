// A small Jinja2 interpreter for chat templates: the subset that published chat templates
// (Llama-2 chat, ChatML, Llama-3 and their relatives) are written in, with the settings
// Hugging Face's apply_chat_template uses (trim_blocks and lstrip_blocks on).
//
// Supported (docs/http-api.md lists it for users):
//   text, {{ expr }}, {# comments #}, whitespace control with '-' on any tag;
//   {% if %}/{% elif %}/{% else %}/{% endif %}, {% for x in xs [if cond] %} (also
//   `for k, v in ...`) with {% else %} and loop.index/index0/revindex/revindex0/first/
//   last/length, {% set name = expr %} and {% set ns.attr = expr %};
//   literals (strings with \n \t \\ \' \" escapes, integers, floats, true/false/none in
//   either case, lists, dicts), variables, x.attr, x[i], x[a:b:c], calls;
//   operators: or and not, == != < <= > >=, in / not in, is / is not (defined, undefined,
//   none, string, number, integer, boolean, mapping, sequence, iterable, even, odd, true,
//   false), + - * / // % ~, unary - and +, `a if cond else b`, filters with `|`:
//   trim, upper, lower, capitalize, title, length/count, string, int, float, first, last,
//   join, default/d, tojson, items, list, reverse, replace, safe;
//   string methods strip/lstrip/rstrip/upper/lower/title/capitalize/startswith/endswith/
//   split/replace, dict methods get/items/keys/values;
//   functions raise_exception(message), namespace(k=v, ...), range(n).
// Not supported (a parse or render error that names it): macros, call blocks, includes,
// extends/blocks, raw, filter blocks, with, break/continue.
//
// Values follow Python/Jinja semantics: undefined prints as nothing and is false; `and`
// and `or` return an operand; lists and dicts are shared by reference (so namespace
// attributes set in a loop are seen after it). Rendering is deterministic and bounded: a
// template cannot loop forever (it can only iterate over finite values), and output past
// `max_output_bytes` is an error.
//
// Template is immutable after Parse and thread-safe; Render may run concurrently.
#ifndef FOLIO_SERVICES_FRONTEND_HTTP_JINJA_H_
#define FOLIO_SERVICES_FRONTEND_HTTP_JINJA_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"

namespace folio::frontend::jinja {

class Value {
 public:
  using List = std::vector<Value>;
  // Insertion-ordered, as Python dicts are.
  using Map = std::vector<std::pair<std::string, Value>>;
  struct Undefined {};
  struct None {};

  Value() : v_(Undefined{}) {}
  static Value MakeNone() { return Value(None{}); }
  Value(bool b) : v_(b) {}  // NOLINT: implicit on purpose, like the others
  Value(int64_t i) : v_(i) {}
  Value(int i) : v_(static_cast<int64_t>(i)) {}
  Value(double d) : v_(d) {}
  Value(std::string s) : v_(std::move(s)) {}
  Value(const char* s) : v_(std::string(s)) {}
  Value(List l) : v_(std::make_shared<List>(std::move(l))) {}
  Value(Map m) : v_(std::make_shared<Map>(std::move(m))) {}

  bool is_undefined() const { return std::holds_alternative<Undefined>(v_); }
  bool is_none() const { return std::holds_alternative<None>(v_); }
  bool is_bool() const { return std::holds_alternative<bool>(v_); }
  bool is_int() const { return std::holds_alternative<int64_t>(v_); }
  bool is_double() const { return std::holds_alternative<double>(v_); }
  bool is_number() const { return is_int() || is_double(); }
  bool is_string() const { return std::holds_alternative<std::string>(v_); }
  bool is_list() const { return std::holds_alternative<std::shared_ptr<List>>(v_); }
  bool is_map() const { return std::holds_alternative<std::shared_ptr<Map>>(v_); }

  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const { return std::get<int64_t>(v_); }
  double as_double() const { return is_int() ? static_cast<double>(as_int()) : std::get<double>(v_); }
  const std::string& as_string() const { return std::get<std::string>(v_); }
  List& list() const { return *std::get<std::shared_ptr<List>>(v_); }
  Map& map() const { return *std::get<std::shared_ptr<Map>>(v_); }

  // A map's entry, or nullptr.
  const Value* Find(std::string_view key) const;
  // Sets a map's entry (replacing an existing one).
  void Set(const std::string& key, Value value) const;

  // Python truthiness.
  bool Truthy() const;
  // What {{ value }} prints: strings as they are, numbers and lists as Python prints them.
  std::string ToString() const;
  // Python repr (strings quoted), used inside lists and dicts.
  std::string Repr() const;
  // JSON text (the tojson filter); `indent` < 0: compact.
  std::string ToJson(int indent) const;
  std::string TypeName() const;

 private:
  explicit Value(None n) : v_(n) {}
  std::variant<Undefined, None, bool, int64_t, double, std::string, std::shared_ptr<List>,
               std::shared_ptr<Map>>
      v_;
};

struct Node;  // the parsed template (jinja.cc)

class Template {
 public:
  // Parses `source`. InvalidArgument naming the line and what was wrong (a syntax error,
  // an unsupported tag, an unclosed block).
  static absl::StatusOr<Template> Parse(std::string_view source);

  // Renders with `context` (a map of global variables). InvalidArgument for errors the
  // template raises (raise_exception) or makes (a type error, an undefined attribute
  // access, output longer than max_output_bytes), with the message and line.
  absl::StatusOr<std::string> Render(const Value::Map& context,
                                     size_t max_output_bytes = 1 << 20) const;

 private:
  explicit Template(std::shared_ptr<const Node> root) : root_(std::move(root)) {}
  std::shared_ptr<const Node> root_;
};

}  // namespace folio::frontend::jinja

#endif  // FOLIO_SERVICES_FRONTEND_HTTP_JINJA_H_
