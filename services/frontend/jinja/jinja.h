// A Jinja2 interpreter for chat templates: what the published chat templates of today's
// models are written in (llama.cpp's models/templates/ is the test set), with the settings
// Hugging Face's apply_chat_template uses: trim_blocks and lstrip_blocks on, the
// loopcontrols extension, {% generation %} rendered as its body, and the globals
// raise_exception(message) and strftime_now(format). jinja_reference_test.cc renders every
// one of those templates against Python's Jinja2 and demands the same bytes.
//
// Supported (docs/http-api.md lists it for users):
//   text, {{ expr }}, {# comments #}, whitespace control with '-' and '+' on any tag;
//   {% if/elif/else %}, {% for a[, b] in xs [if cond] %} with {% else %}, {% break %},
//   {% continue %} and loop.index/index0/revindex/revindex0/first/last/length/previtem/
//   nextitem/cycle(); {% set x = e %}, {% set a, b = e %}, {% set ns.attr = e %},
//   {% set x %}...{% endset %}; {% macro name(a, b=default) %} (with varargs/kwargs and
//   caller), {% call(args) name(...) %}...{% endcall %}, {% filter f(args) %},
//   {% generation %}; literals, variables, x.attr, x[i], x[a:b:c], calls; operators or and
//   not, == != < <= > >=, in / not in, is / is not (tests), + - * / // % ** ~, `a if c else
//   b`; the filters, tests, string/dict methods and functions real templates use (the list
//   is in jinja_builtins.cc).
// Not supported (a parse or render error that names the construct): include, import,
// extends/block, with, autoescape, raw, and every method that would modify a value
// (list.append, dict.pop...: Hugging Face's ImmutableSandboxedEnvironment refuses them too).
//
// Values follow Python/Jinja semantics: undefined prints as nothing and is false; `and`
// and `or` return an operand; lists and dicts are shared by reference (so namespace
// attributes set in a loop are seen after it). Rendering is a sandbox: a template reaches
// only the values it is given, and RenderOptions bounds its output, its work (steps),
// its macro recursion and its time.
//
// Template is immutable after Parse and thread-safe; Render may run concurrently.
#ifndef FOLIO_SERVICES_FRONTEND_JINJA_JINJA_H_
#define FOLIO_SERVICES_FRONTEND_JINJA_JINJA_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "nlohmann/json_fwd.hpp"

namespace folio::frontend::jinja {

struct Node;      // the parsed template (jinja_ast.h)
struct Callable;  // a macro, or a call block's caller (jinja_ast.h)

class Value {
 public:
  using List = std::vector<Value>;
  // Insertion-ordered, as Python dicts are. Keys are strings; an integer key (a template's
  // {0: 'a'}) is stored encoded (jinja_ast.h: EncodeKey/DecodeKey).
  using Map = std::vector<std::pair<std::string, Value>>;
  struct Undefined {};
  struct None {};

  Value() : v_(Undefined{}) {}
  static Value MakeNone() { return Value(None{}); }
  // A string marked safe (Jinja's Markup, from |safe or |escape): `+` with a plain string
  // HTML-escapes the plain one, as Python's markupsafe does.
  static Value Markup(std::string s) {
    Value v(std::move(s));
    v.flags_ = kMarkup;
    return v;
  }
  // A list that Jinja would hold as a one-pass generator (what map, select, selectattr,
  // reverse... return): always true, no length, no index, not JSON; |list makes it a list.
  static Value Generator(List l) {
    Value v(std::move(l));
    v.flags_ = kGenerator;
    return v;
  }
  // A Python tuple: a list that prints as (a, b) (literals, dict items, varargs).
  static Value Tuple(List l) {
    Value v(std::move(l));
    v.flags_ = kTuple;
    return v;
  }
  Value(bool b) : v_(b) {}  // NOLINT: implicit on purpose, like the others
  Value(int64_t i) : v_(i) {}
  Value(int i) : v_(static_cast<int64_t>(i)) {}
  Value(double d) : v_(d) {}
  Value(std::string s) : v_(std::move(s)) {}
  Value(const char* s) : v_(std::string(s)) {}
  Value(List l) : v_(std::make_shared<List>(std::move(l))) {}
  Value(Map m) : v_(std::make_shared<Map>(std::move(m))) {}
  explicit Value(std::shared_ptr<const Callable> c) : v_(std::move(c)) {}

  // JSON as Python's json.loads gives it (objects keep their key order when the json type
  // does: pass ordered_json for a client's request).
  static Value FromJson(const nlohmann::ordered_json& j);
  static Value FromJson(const nlohmann::json& j);

  bool is_undefined() const { return std::holds_alternative<Undefined>(v_); }
  bool is_none() const { return std::holds_alternative<None>(v_); }
  bool is_bool() const { return std::holds_alternative<bool>(v_); }
  bool is_int() const { return std::holds_alternative<int64_t>(v_); }
  bool is_double() const { return std::holds_alternative<double>(v_); }
  bool is_number() const { return is_int() || is_double(); }
  bool is_string() const { return std::holds_alternative<std::string>(v_); }
  bool is_list() const { return std::holds_alternative<std::shared_ptr<List>>(v_); }
  bool is_map() const { return std::holds_alternative<std::shared_ptr<Map>>(v_); }
  bool is_callable() const { return std::holds_alternative<std::shared_ptr<const Callable>>(v_); }
  bool is_markup() const { return flags_ == kMarkup; }
  bool is_generator() const { return flags_ == kGenerator; }
  bool is_tuple() const { return flags_ == kTuple; }

  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const { return std::get<int64_t>(v_); }
  double as_double() const { return is_int() ? static_cast<double>(as_int()) : std::get<double>(v_); }
  const std::string& as_string() const { return std::get<std::string>(v_); }
  List& list() const { return *std::get<std::shared_ptr<List>>(v_); }
  Map& map() const { return *std::get<std::shared_ptr<Map>>(v_); }
  const Callable& callable() const { return *std::get<std::shared_ptr<const Callable>>(v_); }
  // Whether two values are the same object (lists and dicts by identity, others by value).
  bool SameObject(const Value& other) const;

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
  // JSON text as Python's json.dumps(value, ensure_ascii=False, indent=..., separators=...,
  // sort_keys=...) writes it (Hugging Face's tojson). `indent` < 0: on one line. Empty
  // separators: Python's defaults (", " and ": "; "," and ": " when indenting).
  // InvalidArgument-worthy values (undefined, a macro) make `*error` name the type.
  struct JsonOptions {
    int indent = -1;
    std::string item_separator;
    std::string key_separator;
    bool sort_keys = false;
    bool ensure_ascii = false;
  };
  std::string ToJson(const JsonOptions& options, std::string* error) const;
  std::string ToJson(int indent) const;
  std::string TypeName() const;

 private:
  explicit Value(None n) : v_(n) {}
  enum Flags : uint8_t { kPlain, kMarkup, kGenerator, kTuple };
  uint8_t flags_ = kPlain;
  std::variant<Undefined, None, bool, int64_t, double, std::string, std::shared_ptr<List>,
               std::shared_ptr<Map>, std::shared_ptr<const Callable>>
      v_;
};


// Bounds on one Render: a template that passes one gets InvalidArgument naming the limit.
struct RenderOptions {
  size_t max_output_bytes = 1 << 20;  // the output, and any one string or list built
  int64_t max_steps = 1 << 22;        // statements run + loop iterations + calls
  int max_call_depth = 100;           // nested macro calls
  absl::Duration time_limit = absl::Seconds(2);
  // What strftime_now() formats (as UTC); InfinitePast: absl::Now() at the call.
  absl::Time now = absl::InfinitePast();
};

class Template {
 public:
  // Parses `source`. InvalidArgument naming the line and what was wrong (a syntax error,
  // an unsupported tag, an unclosed block).
  static absl::StatusOr<Template> Parse(std::string_view source);

  // Renders with `context` (a map of global variables). InvalidArgument for errors the
  // template raises (raise_exception) or makes (a type error, an undefined attribute
  // access, a limit of `options` passed), with the message and line.
  absl::StatusOr<std::string> Render(const Value::Map& context,
                                     const RenderOptions& options = {}) const;

 private:
  explicit Template(std::shared_ptr<const Node> root) : root_(std::move(root)) {}
  std::shared_ptr<const Node> root_;
};

}  // namespace folio::frontend::jinja

#endif  // FOLIO_SERVICES_FRONTEND_JINJA_JINJA_H_
