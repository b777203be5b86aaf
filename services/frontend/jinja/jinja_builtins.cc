// The filters, tests, methods and global functions of Renderer (jinja_render.h), with
// Jinja2's and Python's semantics:
//   filters: abs attr capitalize count d default dictsort e escape first float
//     forceescape indent int items join last length list lower map max min reject
//     rejectattr replace reverse round safe select selectattr sort string sum title tojson
//     trim unique upper wordcount (tojson as Hugging Face defines it: json.dumps with
//     ensure_ascii=False, indent, separators, sort_keys);
//   tests: boolean callable defined divisibleby eq equalto escaped even false filter float
//     ge gt in integer iterable le lower lt mapping ne none number odd sameas sequence
//     string true undefined upper == != < <= > >=;
//   string methods: capitalize count endswith find format isalnum isalpha isdigit islower
//     isspace isupper join lower lstrip removeprefix removesuffix replace rfind rsplit
//     rstrip split splitlines startswith strip title upper;
//   dict methods: get items keys values; list methods: count index; loop.cycle();
//   functions: dict namespace raise_exception range strftime_now.
// Methods that would modify a value (append, pop, update...) are refused, as Hugging
// Face's ImmutableSandboxedEnvironment refuses them.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "services/frontend/jinja/jinja.h"
#include "services/frontend/jinja/jinja_ast.h"
#include "services/frontend/jinja/jinja_render.h"

namespace folio::frontend::jinja {

namespace {

std::string Str(const Value& v, int line, std::string_view what) {
  if (!v.is_string()) {
    throw Error(line, absl::StrCat(std::string(what), " needs a string, not a ", v.TypeName()));
  }
  return v.as_string();
}

int64_t Int(const Value& v, int line, std::string_view what, int64_t otherwise) {
  if (v.is_undefined() || v.is_none()) return otherwise;
  if (v.is_int()) return v.as_int();
  if (v.is_bool()) return v.as_bool() ? 1 : 0;
  throw Error(line, absl::StrCat(std::string(what), " needs an integer, not a ", v.TypeName()));
}

// Python's ordering of two values (numbers with numbers, strings with strings); for sort,
// min, max and dictsort, strings compare lower-cased unless case_sensitive.
int Compare(const Value& a, const Value& b, bool case_sensitive, int line) {
  const bool a_num = a.is_number() || a.is_bool(), b_num = b.is_number() || b.is_bool();
  if (a_num && b_num) {
    const double x = a.is_bool() ? a.as_bool() : a.as_double();
    const double y = b.is_bool() ? b.as_bool() : b.as_double();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    if (case_sensitive) return a.as_string().compare(b.as_string());
    return absl::AsciiStrToLower(a.as_string()).compare(absl::AsciiStrToLower(b.as_string()));
  }
  throw Error(line, absl::StrCat("cannot order a ", a.TypeName(), " and a ", b.TypeName()));
}

std::vector<Value> Items(const Value& v, int line, std::string_view what) {
  std::vector<Value> out;
  if (v.is_list()) return v.list();
  if (v.is_map()) {
    for (const auto& kv : v.map()) out.push_back(DecodeKey(kv.first));
  } else if (v.is_string()) {
    for (std::string& c : CodePoints(v.as_string())) out.emplace_back(std::move(c));
  } else if (!v.is_undefined()) {
    throw Error(line, absl::StrCat(std::string(what), ": cannot iterate over a ", v.TypeName()));
  }
  return out;
}

Value PairList(const Value& m) {
  Value::List out;
  for (const auto& [k, val] : m.map()) out.push_back(Value::Tuple(Value::List{DecodeKey(k), val}));
  return Value(std::move(out));
}

std::string Indent(std::string s, const Value& width, bool first, bool blank) {
  const std::string indention =
      width.is_string() ? width.as_string()
                        : std::string(static_cast<size_t>(std::clamp<int64_t>(
                                          width.is_int() ? width.as_int() : 4, 0, 1 << 16)),
                                      ' ');
  s += "\n";
  std::vector<std::string> lines = SplitLines(s);
  std::string rv;
  if (blank) {
    rv = absl::StrJoin(lines, "\n" + indention);
  } else if (!lines.empty()) {
    rv = lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
      rv += "\n";
      if (!lines[i].empty()) rv += indention;
      rv += lines[i];
    }
  }
  return first ? indention + rv : rv;
}

// str.format with {} / {0} / {name} fields and {{ }} escapes (no format specs).
std::string Format(const std::string& f, const Args& args, int line) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    const char c = f[i];
    if (c == '}' ) {
      if (i + 1 < f.size() && f[i + 1] == '}') ++i;
      else throw Error(line, "format(): single '}' in the format string");
      out += '}';
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < f.size() && f[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    const size_t close = f.find('}', i);
    if (close == std::string::npos) throw Error(line, "format(): unclosed '{'");
    const std::string field = f.substr(i + 1, close - i - 1);
    if (field.find_first_of(":!.[") != std::string::npos) {
      throw Error(line, absl::StrCat("format(): the field {", field, "} is not supported"));
    }
    Value v;
    if (field.empty()) {
      if (auto_index >= args.positional.size()) throw Error(line, "format(): too few arguments");
      v = args.positional[auto_index++];
    } else if (std::all_of(field.begin(), field.end(), ::isdigit) && field.size() < 6) {
      const size_t n = std::strtoul(field.c_str(), nullptr, 10);
      if (n >= args.positional.size()) throw Error(line, "format(): too few arguments");
      v = args.positional[n];
    } else {
      if (!args.Has(field, SIZE_MAX)) throw Error(line, absl::StrCat("format(): no argument '", field, "'"));
      v = args.Get(field, SIZE_MAX);
    }
    out += v.ToString();
    i = close;
  }
  return out;
}

}  // namespace

Value Renderer::Filter(const std::string& f, const Value& v, const Args& args, int line) {
  auto result = [&](std::string s) {
    CheckSize(s.size(), line);
    return Value(std::move(s));
  };
  if (f == "safe") return v.is_string() ? Value::Markup(v.as_string()) : Value::Markup(v.ToString());
  if (f == "string") return result(v.ToString());
  if (f == "default" || f == "d") {
    const bool boolean = args.Get("boolean", 1).Truthy();
    const bool use_default = boolean ? !v.Truthy() : v.is_undefined();
    if (!use_default) return v;
    return args.Has("default_value", 0) ? args.Get("default_value", 0) : Value(std::string());
  }
  if (f == "tojson") {
    Value::JsonOptions o;
    o.ensure_ascii = args.Get("ensure_ascii", 0).Truthy();
    const Value indent = args.Get("indent", 1);
    if (!indent.is_undefined() && !indent.is_none()) {
      o.indent = static_cast<int>(std::clamp<int64_t>(Int(indent, line, "tojson(indent=)", 0), 0, 64));
    }
    const Value seps = args.Get("separators", 2);
    if (seps.is_list() && seps.list().size() == 2) {
      o.item_separator = Str(seps.list()[0], line, "tojson(separators=)");
      o.key_separator = Str(seps.list()[1], line, "tojson(separators=)");
    } else if (!seps.is_undefined() && !seps.is_none()) {
      throw Error(line, "tojson(separators=) needs two strings");
    }
    o.sort_keys = args.Get("sort_keys", 3).Truthy();
    std::string error;
    std::string json = v.ToJson(o, &error);
    if (!error.empty()) throw Error(line, absl::StrCat("tojson: ", error));
    return result(std::move(json));
  }
  if (f == "length" || f == "count") {
    if (v.is_string()) return Value(static_cast<int64_t>(CodePoints(v.as_string()).size()));
    if (v.is_generator()) throw Error(line, "object of type 'generator' has no len()");
    if (v.is_list()) return Value(static_cast<int64_t>(v.list().size()));
    if (v.is_map()) return Value(static_cast<int64_t>(v.map().size()));
    if (v.is_undefined()) return Value(0);
    throw Error(line, absl::StrCat("a ", v.TypeName(), " has no length"));
  }
  if (f == "int") {
    const Value def = args.Has("default", 0) ? args.Get("default", 0) : Value(0);
    if (v.is_int()) return v;
    if (v.is_bool()) return Value(v.as_bool() ? 1 : 0);
    if (v.is_double()) {
      if (!std::isfinite(v.as_double()) || std::fabs(v.as_double()) > 9e18) return def;
      return Value(static_cast<int64_t>(v.as_double()));
    }
    if (v.is_string()) {
      const std::string s = Strip(v.as_string(), std::nullopt, true, true);
      char* end = nullptr;
      errno = 0;
      const long long i = std::strtoll(s.c_str(), &end, 10);
      if (!s.empty() && *end == '\0' && errno == 0) return Value(static_cast<int64_t>(i));
      const double d = std::strtod(s.c_str(), &end);
      if (!s.empty() && *end == '\0' && std::isfinite(d) && std::fabs(d) < 9e18) {
        return Value(static_cast<int64_t>(d));
      }
    }
    return def;
  }
  if (f == "float") {
    const Value def = args.Has("default", 0) ? args.Get("default", 0) : Value(0.0);
    if (v.is_number()) return Value(v.as_double());
    if (v.is_bool()) return Value(v.as_bool() ? 1.0 : 0.0);
    if (v.is_string()) {
      const std::string s = Strip(v.as_string(), std::nullopt, true, true);
      char* end = nullptr;
      const double d = std::strtod(s.c_str(), &end);
      if (!s.empty() && *end == '\0') return Value(d);
    }
    return def;
  }
  if (f == "abs") {
    if (v.is_int() && v.as_int() != INT64_MIN) return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
    if (v.is_double()) return Value(std::fabs(v.as_double()));
    if (v.is_bool()) return Value(v.as_bool() ? 1 : 0);
    throw Error(line, absl::StrCat("abs needs a number, not a ", v.TypeName()));
  }
  if (f == "round") {
    if (!v.is_number() && !v.is_bool()) throw Error(line, "round needs a number");
    const int64_t precision = std::clamp<int64_t>(Int(args.Get("precision", 0), line, "round", 0), -20, 20);
    const double scale = std::pow(10.0, static_cast<double>(precision));
    const double d = v.is_bool() ? v.as_bool() : v.as_double();
    return Value(std::nearbyint(d * scale) / scale);
  }
  if (f == "items") {
    if (v.is_map()) return Value::Generator(PairList(v).list());
    if (v.is_undefined()) return Value::Generator({});
    throw Error(line, absl::StrCat("items needs a dict, not a ", v.TypeName()));
  }
  if (f == "dictsort") {
    if (!v.is_map()) throw Error(line, absl::StrCat("dictsort needs a dict, not a ", v.TypeName()));
    const bool case_sensitive = args.Get("case_sensitive", 0).Truthy();
    const Value by = args.Get("by", 1);
    const bool by_value = by.is_string() && by.as_string() == "value";
    const bool reverse = args.Get("reverse", 2).Truthy();
    Value::List pairs = PairList(v).list();
    std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& a, const Value& b) {
      const int c = Compare(a.list()[by_value ? 1 : 0], b.list()[by_value ? 1 : 0], case_sensitive, line);
      return reverse ? c > 0 : c < 0;
    });
    return Value(std::move(pairs));
  }
  if (f == "list") {
    Value::List out = Items(v, line, "list");
    return Value(std::move(out));
  }
  if (f == "first" || f == "last") {
    std::vector<Value> items = Items(v, line, f);
    if (items.empty()) return Value();
    return f == "first" ? items.front() : items.back();
  }
  if (f == "reverse") {
    if (v.is_string()) {
      std::vector<std::string> cps = CodePoints(v.as_string());
      std::reverse(cps.begin(), cps.end());
      return Value(absl::StrJoin(cps, ""));
    }
    if (v.is_generator()) throw Error(line, "a generator is not reversible");
    std::vector<Value> items = Items(v, line, f);
    std::reverse(items.begin(), items.end());
    return Value::Generator(std::move(items));
  }
  if (f == "join") {
    const Value sep = args.Get("d", 0);
    const Value attribute = args.Get("attribute", 1);
    std::string out;
    bool first = true;
    for (const Value& item : Items(v, line, f)) {
      if (!first) out += sep.is_undefined() ? "" : sep.ToString();
      first = false;
      out += (attribute.is_undefined() ? item : GetPath(item, attribute.ToString(), line)).ToString();
      CheckSize(out.size(), line);
    }
    return Value(std::move(out));
  }
  if (f == "map" || f == "select" || f == "reject" || f == "selectattr" || f == "rejectattr") {
    std::vector<Value> out;
    const bool is_map = f == "map";
    const bool by_attr = f == "selectattr" || f == "rejectattr" || (is_map && args.Has("attribute", SIZE_MAX));
    const bool keep_true = f == "select" || f == "selectattr";
    std::string attr;
    size_t next = 0;
    if (by_attr) {
      attr = is_map ? args.Get("attribute", SIZE_MAX).ToString() : Str(args.Get("", 0), line, f);
      next = is_map ? 0 : 1;
    }
    std::string name;  // the filter (map) or test (select...) applied
    if (!(is_map && by_attr) && next < args.positional.size()) name = Str(args.positional[next++], line, f);
    Args rest;
    rest.positional.assign(args.positional.begin() + std::min(next, args.positional.size()),
                           args.positional.end());
    for (const auto& kv : args.named) {
      if (kv.first != "attribute" && kv.first != "default") rest.named.push_back(kv);
    }
    // Jinja's map and select_or_reject skip a false value (none, an empty list) entirely.
    for (const Value& item : v.Truthy() ? Items(v, line, f) : std::vector<Value>{}) {
      Tick(line);
      Value subject = by_attr ? GetPath(item, attr, line) : item;
      if (is_map) {
        if (by_attr) {
          if (subject.is_undefined() && args.Has("default", SIZE_MAX)) subject = args.Get("default", SIZE_MAX);
          out.push_back(subject);
        } else {
          if (name.empty()) throw Error(line, "map needs a filter name or attribute=");
          out.push_back(Filter(name, subject, rest, line));
        }
        continue;
      }
      const bool pass = name.empty() ? subject.Truthy() : Test(name, subject, rest, line);
      if (pass == keep_true) out.push_back(item);
    }
    return Value::Generator(std::move(out));
  }
  if (f == "unique" || f == "sort" || f == "min" || f == "max" || f == "sum") {
    const bool case_sensitive = args.Get("case_sensitive", f == "sort" ? 1 : 0).Truthy();
    const Value attribute = args.Get("attribute", f == "sort" ? 2 : (f == "sum" ? 0 : 1));
    auto key = [&](const Value& item) {
      return attribute.is_undefined() || attribute.is_none() ? item : GetPath(item, attribute.ToString(), line);
    };
    std::vector<Value> items = Items(v, line, f);
    if (f == "sum") {
      Value acc = args.Has("start", 1) ? args.Get("start", 1) : Value(0);
      for (const Value& item : items) {
        const Value k = key(item);
        if (!(k.is_number() || k.is_bool()) || !(acc.is_number() || acc.is_bool())) {
          throw Error(line, absl::StrCat("sum cannot add a ", k.TypeName()));
        }
        if (acc.is_int() && k.is_int()) {
          int64_t r;
          if (__builtin_add_overflow(acc.as_int(), k.as_int(), &r)) throw Error(line, "integer overflow");
          acc = Value(r);
        } else {
          acc = Value((acc.is_bool() ? acc.as_bool() : acc.as_double()) + (k.is_bool() ? k.as_bool() : k.as_double()));
        }
      }
      return acc;
    }
    if (f == "unique") {
      std::vector<Value> out;
      for (const Value& item : items) {
        const Value k = key(item);
        const bool seen = std::any_of(out.begin(), out.end(), [&](const Value& o) {
          const Value ok = key(o);
          if (!case_sensitive && k.is_string() && ok.is_string()) {
            return absl::EqualsIgnoreCase(k.as_string(), ok.as_string());
          }
          return Equal(k, ok);
        });
        if (!seen) out.push_back(item);
      }
      return Value::Generator(std::move(out));
    }
    if (f == "sort") {
      const bool reverse = args.Get("reverse", 0).Truthy();
      std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
        const int c = Compare(key(a), key(b), case_sensitive, line);
        return reverse ? c > 0 : c < 0;
      });
      return Value(std::move(items));
    }
    if (items.empty()) return Value();
    Value best = items[0];
    for (const Value& item : items) {
      const int c = Compare(key(item), key(best), case_sensitive, line);
      if (f == "min" ? c < 0 : c > 0) best = item;
    }
    return best;
  }
  if (f == "attr") return GetItem(v, Value(Str(args.Get("name", 0), line, f)), line);
  if (f == "indent") {
    return result(Indent(v.ToString(), args.Get("width", 0), args.Get("first", 1).Truthy(),
                         args.Get("blank", 2).Truthy()));
  }
  if (f == "escape" || f == "e" || f == "forceescape") {
    if (v.is_markup() && f != "forceescape") return v;
    std::string escaped = HtmlEscape(v.ToString());
    CheckSize(escaped.size(), line);
    return Value::Markup(std::move(escaped));
  }
  if (f == "wordcount") return Value(static_cast<int64_t>(Split(v.ToString(), std::nullopt, -1, false).size()));
  const std::string s = v.ToString();
  if (f == "trim") {
    const Value chars = args.Get("chars", 0);
    return Value(Strip(s, chars.is_string() ? std::optional<std::string>(chars.as_string()) : std::nullopt, true, true));
  }
  if (f == "upper") return Value(absl::AsciiStrToUpper(s));
  if (f == "lower") return Value(absl::AsciiStrToLower(s));
  if (f == "capitalize") return Value(Capitalize(s));
  if (f == "title") return Value(Title(s));
  if (f == "replace") {
    const Value count = args.Get("count", 2);
    return result(Replace(s, Str(args.Get("old", 0), line, f), args.Get("new", 1).ToString(),
                          count.is_undefined() || count.is_none() ? -1 : Int(count, line, f, -1)));
  }
  throw Error(line, absl::StrCat("unknown filter '", f, "'"));
}

bool Renderer::Test(const std::string& t, const Value& v, const Args& args, int line) {
  const Value arg = args.Get("", 0);
  if (t == "defined") return !v.is_undefined();
  if (t == "undefined") return v.is_undefined();
  if (t == "none") return v.is_none();
  if (t == "string") return v.is_string();
  if (t == "number") return v.is_number() || v.is_bool();
  if (t == "integer") return v.is_int();
  if (t == "float") return v.is_double();
  if (t == "boolean") return v.is_bool();
  if (t == "true") return v.is_bool() && v.as_bool();
  if (t == "false") return v.is_bool() && !v.as_bool();
  if (t == "mapping") return v.is_map();
  if (t == "callable") return v.is_callable();
  if (t == "sequence") return v.is_list() || v.is_string() || v.is_map() || v.is_undefined();
  if (t == "iterable") return v.is_list() || v.is_string() || v.is_map() || v.is_undefined();
  if (t == "escaped") return false;
  if (t == "lower") return v.is_string() && absl::AsciiStrToLower(v.as_string()) == v.as_string();
  if (t == "upper") return v.is_string() && absl::AsciiStrToUpper(v.as_string()) == v.as_string();
  if (t == "sameas") return v.SameObject(arg);
  if (t == "filter" || t == "test") return false;
  if (t == "eq" || t == "equalto" || t == "==") return Equal(v, arg);
  if (t == "ne" || t == "!=") return !Equal(v, arg);
  if (t == "lt" || t == "<") return Compare(v, arg, true, line) < 0;
  if (t == "le" || t == "<=") return Compare(v, arg, true, line) <= 0;
  if (t == "gt" || t == ">") return Compare(v, arg, true, line) > 0;
  if (t == "ge" || t == ">=") return Compare(v, arg, true, line) >= 0;
  if (t == "in") {
    if (arg.is_string()) return v.is_string() && absl::StrContains(arg.as_string(), v.as_string());
    if (arg.is_map()) return (v.is_string() || v.is_int()) && arg.Find(EncodeKey(v, line)) != nullptr;
    const std::vector<Value> items = Items(arg, line, "in");
    return std::any_of(items.begin(), items.end(), [&](const Value& x) { return Equal(v, x); });
  }
  if (t == "even" || t == "odd" || t == "divisibleby") {
    if (!v.is_int()) throw Error(line, absl::StrCat("'", t, "' needs an integer"));
    const int64_t d = t == "divisibleby" ? Int(arg, line, t, 1) : 2;
    if (d == 0) throw Error(line, "division by zero");
    const bool divisible = d == -1 || v.as_int() % d == 0;
    return t == "odd" ? !divisible : divisible;
  }
  throw Error(line, absl::StrCat("unknown test '", t, "'"));
}

Value Renderer::Method(const Value& obj, const std::string& m, const Args& args, int line) {
  const Value a0 = args.Get("", 0);
  auto opt_str = [&](const Value& v) -> std::optional<std::string> {
    if (v.is_undefined() || v.is_none()) return std::nullopt;
    return Str(v, line, m);
  };
  if (obj.is_string()) {
    const std::string& s = obj.as_string();
    auto result = [&](std::string r) {
      CheckSize(r.size(), line);
      return Value(std::move(r));
    };
    if (m == "strip") return Value(Strip(s, opt_str(a0), true, true));
    if (m == "lstrip") return Value(Strip(s, opt_str(a0), true, false));
    if (m == "rstrip") return Value(Strip(s, opt_str(a0), false, true));
    if (m == "upper") return Value(absl::AsciiStrToUpper(s));
    if (m == "lower") return Value(absl::AsciiStrToLower(s));
    if (m == "title") return Value(Title(s));
    if (m == "capitalize") return Value(Capitalize(s));
    if (m == "startswith" || m == "endswith") {
      std::vector<Value> options = a0.is_list() ? a0.list() : std::vector<Value>{a0};
      for (const Value& o : options) {
        const std::string p = Str(o, line, m);
        if (m == "startswith" ? absl::StartsWith(s, p) : absl::EndsWith(s, p)) return Value(true);
      }
      return Value(false);
    }
    if (m == "removeprefix") {
      const std::string p = Str(a0, line, m);
      return Value(absl::StartsWith(s, p) ? s.substr(p.size()) : s);
    }
    if (m == "removesuffix") {
      const std::string p = Str(a0, line, m);
      return Value(absl::EndsWith(s, p) ? s.substr(0, s.size() - p.size()) : s);
    }
    if (m == "replace") {
      const Value count = args.Get("count", 2);
      return result(Replace(s, Str(a0, line, m), Str(args.Get("", 1), line, m),
                            count.is_undefined() ? -1 : Int(count, line, m, -1)));
    }
    if (m == "split" || m == "rsplit") {
      std::optional<std::string> sep = opt_str(args.Get("sep", 0));
      if (sep && sep->empty()) throw Error(line, absl::StrCat(m, "(): empty separator"));
      const Value maxsplit = args.Get("maxsplit", 1);
      Value::List out;
      for (std::string& p : Split(s, sep, maxsplit.is_undefined() ? -1 : Int(maxsplit, line, m, -1),
                                  m == "rsplit")) {
        out.emplace_back(std::move(p));
      }
      return Value(std::move(out));
    }
    if (m == "splitlines") {
      Value::List out;
      for (std::string& p : SplitLines(s)) out.emplace_back(std::move(p));
      return Value(std::move(out));
    }
    if (m == "find" || m == "rfind" || m == "count") {
      const std::string sub = Str(a0, line, m);
      if (m == "count") {
        if (sub.empty()) return Value(static_cast<int64_t>(CodePoints(s).size() + 1));
        int64_t n = 0;
        for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
        return Value(n);
      }
      const size_t at = m == "find" ? s.find(sub) : s.rfind(sub);
      if (at == std::string::npos) return Value(-1);
      return Value(static_cast<int64_t>(CodePoints(s.substr(0, at)).size()));
    }
    if (m == "format") return result(Format(s, args, line));
    if (m == "join") {
      std::string out;
      bool first = true;
      for (const Value& item : Items(a0, line, m)) {
        if (!first) out += s;
        first = false;
        out += Str(item, line, "join()");
        CheckSize(out.size(), line);
      }
      return Value(std::move(out));
    }
    auto all = [&](auto pred) {
      return Value(!s.empty() && std::all_of(s.begin(), s.end(), [&](char c) { return pred(c); }));
    };
    if (m == "isdigit") return all([](char c) { return absl::ascii_isdigit(c); });
    if (m == "isalpha") return all([](char c) { return absl::ascii_isalpha(c); });
    if (m == "isalnum") return all([](char c) { return absl::ascii_isalnum(c); });
    if (m == "isspace") return all([](char c) { return IsPySpace(c); });
    if (m == "islower") {
      return Value(std::any_of(s.begin(), s.end(), absl::ascii_islower) &&
                   !std::any_of(s.begin(), s.end(), absl::ascii_isupper));
    }
    if (m == "isupper") {
      return Value(std::any_of(s.begin(), s.end(), absl::ascii_isupper) &&
                   !std::any_of(s.begin(), s.end(), absl::ascii_islower));
    }
  } else if (obj.is_map()) {
    if (m == "cycle" && obj.Find("depth0") != nullptr && obj.Find("index0") != nullptr) {
      if (args.positional.empty()) throw Error(line, "loop.cycle() needs arguments");
      const int64_t i = obj.Find("index0")->as_int();
      return args.positional[static_cast<size_t>(i) % args.positional.size()];
    }
    if (m == "get") {
      if (!a0.is_string() && !a0.is_int()) return args.Has("", 1) ? args.Get("", 1) : Value::MakeNone();
      const Value* v = obj.Find(EncodeKey(a0, line));
      return v ? *v : (args.Has("default", 1) ? args.Get("default", 1) : Value::MakeNone());
    }
    if (m == "items") return PairList(obj);
    if (m == "keys" || m == "values") {
      Value::List out;
      for (const auto& [k, v] : obj.map()) out.push_back(m == "keys" ? DecodeKey(k) : v);
      return Value(std::move(out));
    }
    if (m == "pop" || m == "popitem" || m == "update" || m == "setdefault" || m == "clear") {
      throw Error(line, absl::StrCat("dict.", m, "() is not allowed: the template sandbox is immutable"));
    }
  } else if (obj.is_list()) {
    if (m == "index" || m == "count") {
      int64_t n = 0;
      for (size_t i = 0; i < obj.list().size(); ++i) {
        if (!Equal(obj.list()[i], a0)) continue;
        if (m == "index") return Value(static_cast<int64_t>(i));
        ++n;
      }
      if (m == "index") throw Error(line, "list.index(): the value is not in the list");
      return Value(n);
    }
    if (m == "append" || m == "extend" || m == "pop" || m == "insert" || m == "remove" ||
        m == "sort" || m == "reverse" || m == "clear") {
      throw Error(line, absl::StrCat("list.", m, "() is not allowed: the template sandbox is immutable"));
    }
  }
  throw Error(line, absl::StrCat("a ", obj.TypeName(), " has no method '", m, "'"));
}

std::optional<Value> Renderer::Function(const std::string& name, const Args& args, int line) {
  if (name == "raise_exception") {
    throw Error(line, args.positional.empty() ? "raise_exception" : args.positional[0].ToString());
  }
  if (name == "namespace" || name == "dict") {
    Value ns{Value::Map{}};
    for (const Value& a : args.positional) {
      if (!a.is_map()) throw Error(line, absl::StrCat(name, "() takes keyword arguments or a dict"));
      for (const auto& [k, v] : a.map()) ns.Set(k, v);
    }
    for (const auto& [k, v] : args.named) ns.Set(k, v);
    return ns;
  }
  if (name == "range") {
    const size_t n = args.positional.size();
    if (n < 1 || n > 3) throw Error(line, "range() takes 1 to 3 integers");
    const int64_t start = n == 1 ? 0 : Int(args.positional[0], line, "range()", 0);
    const int64_t stop = Int(args.positional[n == 1 ? 0 : 1], line, "range()", 0);
    const int64_t step = n == 3 ? Int(args.positional[2], line, "range()", 1) : 1;
    if (step == 0) throw Error(line, "range() step cannot be zero");
    Value::List out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
      out.emplace_back(i);
      CheckSize(out.size(), line);
      if (__builtin_add_overflow(i, step, &i)) break;
    }
    return Value(std::move(out));
  }
  if (name == "strftime_now") {
    const std::string format = Str(args.Get("", 0), line, "strftime_now()");
    const absl::Time now = options_.now == absl::InfinitePast() ? absl::Now() : options_.now;
    const time_t t = absl::ToTimeT(now);
    struct tm tm;
    gmtime_r(&t, &tm);
    char buf[512];
    const size_t n = format.size() < 128 ? std::strftime(buf, sizeof(buf), format.c_str(), &tm) : 0;
    if (n == 0 && !format.empty()) throw Error(line, "strftime_now(): the format is empty or too long");
    return Value(std::string(buf, n));
  }
  return std::nullopt;
}

}  // namespace folio::frontend::jinja
