// Template::Render: a tree-walking evaluator over the nodes Parse built (jinja_ast.h).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "services/frontend/http/jinja.h"
#include "services/frontend/http/jinja_ast.h"

namespace folio::frontend::jinja {
namespace {

// The code points of UTF-8 `s`, each as its bytes (Python indexes strings by code point).
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

bool IsPyWhitespace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string Strip(const std::string& s, const std::optional<std::string>& chars, bool left, bool right) {
  auto strip_char = [&](char c) { return chars ? chars->find(c) != std::string::npos : IsPyWhitespace(c); };
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
      start = true;
    }
  }
  return out;
}

// Python's floor modulo and floor division on integers.
int64_t FloorMod(int64_t a, int64_t b) {
  int64_t r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
int64_t FloorDiv(int64_t a, int64_t b) { return (a - FloorMod(a, b)) / b; }

bool Equal(const Value& a, const Value& b) {
  const bool a_num = a.is_number() || a.is_bool();
  const bool b_num = b.is_number() || b.is_bool();
  if (a_num && b_num) {
    const double x = a.is_bool() ? (a.as_bool() ? 1 : 0) : a.as_double();
    const double y = b.is_bool() ? (b.as_bool() ? 1 : 0) : b.as_double();
    return x == y;
  }
  if (a.TypeName() != b.TypeName()) return false;
  if (a.is_undefined() || a.is_none()) return true;
  if (a.is_string()) return a.as_string() == b.as_string();
  if (a.is_list()) {
    if (a.list().size() != b.list().size()) return false;
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

// Python's rules for a[start:stop:step] over `size` items: the indices taken, in order.
std::vector<int64_t> SliceIndices(int64_t size, const std::optional<int64_t>& start_in,
                                  const std::optional<int64_t>& stop_in, int64_t step, int line) {
  if (step == 0) throw Error(line, "slice step cannot be zero");
  auto clamp = [&](int64_t i, int64_t lo, int64_t hi) {
    if (i < 0) i += size;
    return std::clamp(i, lo, hi);
  };
  std::vector<int64_t> out;
  if (step > 0) {
    const int64_t start = start_in ? clamp(*start_in, 0, size) : 0;
    const int64_t stop = stop_in ? clamp(*stop_in, 0, size) : size;
    for (int64_t i = start; i < stop; i += step) out.push_back(i);
  } else {
    const int64_t start = start_in ? clamp(*start_in, -1, size - 1) : size - 1;
    const int64_t stop = stop_in ? clamp(*stop_in, -1, size - 1) : -1;
    for (int64_t i = start; i > stop; i += step) out.push_back(i);
  }
  return out;
}

class Renderer {
 public:
  Renderer(const Value::Map& context, size_t max_output_bytes)
      : max_output_bytes_(max_output_bytes) {
    scopes_.push_back(context);
  }

  void Run(const std::vector<Node>& body) {
    for (const Node& n : body) Exec(n);
  }
  std::string& output() { return out_; }

 private:
  void Emit(const std::string& s, int line) {
    out_ += s;
    if (out_.size() > max_output_bytes_) {
      throw Error(line, absl::StrCat("the output is longer than ", max_output_bytes_, " bytes"));
    }
  }

  Value Lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      for (const auto& [k, v] : *it) {
        if (k == name) return v;
      }
    }
    return Value();
  }
  void Assign(const std::string& name, Value v) {
    for (auto& [k, old] : scopes_.back()) {
      if (k == name) {
        old = std::move(v);
        return;
      }
    }
    scopes_.back().emplace_back(name, std::move(v));
  }

  void Exec(const Node& n) {
    switch (n.kind) {
      case Node::kRoot:
        Run(n.body);
        return;
      case Node::kText:
        Emit(n.text, n.line);
        return;
      case Node::kOutput:
        Emit(Eval(*n.expr).ToString(), n.line);
        return;
      case Node::kIf:
        for (const auto& [cond, body] : n.branches) {
          if (cond == nullptr || Eval(*cond).Truthy()) {
            Run(body);
            return;
          }
        }
        return;
      case Node::kSet: {
        Value v = Eval(*n.expr);
        if (n.targets.size() == 1) {
          Assign(n.targets[0], std::move(v));
        } else {
          const Value ns = Lookup(n.targets[0]);
          if (!ns.is_map()) {
            throw Error(n.line, absl::StrCat("cannot set an attribute of '", n.targets[0],
                                             "', a ", ns.TypeName()));
          }
          ns.Set(n.targets[1], std::move(v));
        }
        return;
      }
      case Node::kFor:
        ExecFor(n);
        return;
    }
  }

  void Bind(const Node& n, const Value& item) {
    if (n.targets.size() == 1) {
      Assign(n.targets[0], item);
      return;
    }
    if (!item.is_list() || item.list().size() != n.targets.size()) {
      throw Error(n.line, absl::StrCat("cannot unpack a ", item.TypeName(), " into ",
                                       n.targets.size(), " loop variables"));
    }
    for (size_t i = 0; i < n.targets.size(); ++i) Assign(n.targets[i], item.list()[i]);
  }

  void ExecFor(const Node& n) {
    const Value iterable = Eval(*n.expr);
    std::vector<Value> items;
    if (iterable.is_list()) {
      items = iterable.list();
    } else if (iterable.is_map()) {
      for (const auto& kv : iterable.map()) items.emplace_back(kv.first);
    } else if (iterable.is_string()) {
      for (std::string& c : CodePoints(iterable.as_string())) items.emplace_back(std::move(c));
    } else if (!iterable.is_undefined()) {
      throw Error(n.line, absl::StrCat("cannot iterate over a ", iterable.TypeName()));
    }
    scopes_.emplace_back();
    if (n.filter != nullptr) {
      std::vector<Value> kept;
      for (Value& item : items) {
        Bind(n, item);
        if (Eval(*n.filter).Truthy()) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    const int64_t size = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < size; ++i) {
      Bind(n, items[i]);
      Value::Map loop = {{"index", Value(i + 1)},
                         {"index0", Value(i)},
                         {"revindex", Value(size - i)},
                         {"revindex0", Value(size - i - 1)},
                         {"first", Value(i == 0)},
                         {"last", Value(i == size - 1)},
                         {"length", Value(size)},
                         {"previtem", i > 0 ? items[i - 1] : Value()},
                         {"nextitem", i + 1 < size ? items[i + 1] : Value()}};
      Assign("loop", Value(std::move(loop)));
      Run(n.body);
    }
    scopes_.pop_back();
    if (items.empty()) Run(n.else_body);
  }

  Value Eval(const Expr& e) {
    switch (e.kind) {
      case Expr::kLiteral:
        return e.literal;
      case Expr::kName:
        return Lookup(e.name);
      case Expr::kList: {
        Value::List list;
        for (const ExprPtr& a : e.args) list.push_back(Eval(*a));
        return Value(std::move(list));
      }
      case Expr::kDict: {
        Value dict{Value::Map{}};
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          const Value key = Eval(*e.args[i]);
          if (!key.is_string()) throw Error(e.line, "dict keys must be strings");
          dict.Set(key.as_string(), Eval(*e.args[i + 1]));
        }
        return dict;
      }
      case Expr::kAttr:
        return GetItem(Eval(*e.args[0]), Value(e.name), e.line);
      case Expr::kItem:
        return GetItem(Eval(*e.args[0]), Eval(*e.args[1]), e.line);
      case Expr::kSlice:
        return Slice(e);
      case Expr::kCall:
        return Call(e);
      case Expr::kFilter:
        return Filter(e);
      case Expr::kTest: {
        const bool result = Test(e);
        return Value(e.negated ? !result : result);
      }
      case Expr::kUnary: {
        const Value v = Eval(*e.args[0]);
        if (!v.is_number()) throw Error(e.line, absl::StrCat("bad operand for unary ", e.name, ": ", v.TypeName()));
        if (e.name == "+") return v;
        return v.is_int() ? Value(-v.as_int()) : Value(-v.as_double());
      }
      case Expr::kBinary:
        return Binary(e, Eval(*e.args[0]), Eval(*e.args[1]));
      case Expr::kAnd: {
        Value l = Eval(*e.args[0]);
        return l.Truthy() ? Eval(*e.args[1]) : l;
      }
      case Expr::kOr: {
        Value l = Eval(*e.args[0]);
        return l.Truthy() ? l : Eval(*e.args[1]);
      }
      case Expr::kNot:
        return Value(!Eval(*e.args[0]).Truthy());
      case Expr::kCond:
        if (Eval(*e.args[1]).Truthy()) return Eval(*e.args[0]);
        return e.args[2] ? Eval(*e.args[2]) : Value();
    }
    throw Error(e.line, "unknown expression");
  }

  Value GetItem(const Value& obj, const Value& key, int line) {
    if (obj.is_map()) {
      if (!key.is_string()) return Value();
      const Value* v = obj.Find(key.as_string());
      return v ? *v : Value();
    }
    if ((obj.is_list() || obj.is_string()) && key.is_int()) {
      if (obj.is_list()) {
        int64_t i = key.as_int();
        const int64_t size = static_cast<int64_t>(obj.list().size());
        if (i < 0) i += size;
        return i >= 0 && i < size ? obj.list()[i] : Value();
      }
      const std::vector<std::string> cps = CodePoints(obj.as_string());
      int64_t i = key.as_int();
      const int64_t size = static_cast<int64_t>(cps.size());
      if (i < 0) i += size;
      return i >= 0 && i < size ? Value(cps[i]) : Value();
    }
    if (obj.is_undefined()) {
      throw Error(line, absl::StrCat("cannot read '", key.ToString(), "' of an undefined value"));
    }
    return Value();  // as Jinja: a missing attribute is undefined
  }

  std::optional<int64_t> OptInt(const ExprPtr& e) {
    if (e == nullptr) return std::nullopt;
    const Value v = Eval(*e);
    if (v.is_none()) return std::nullopt;
    if (!v.is_int()) throw Error(e->line, "slice bounds must be integers");
    return v.as_int();
  }

  Value Slice(const Expr& e) {
    const Value obj = Eval(*e.args[0]);
    const std::optional<int64_t> start = OptInt(e.args[1]), stop = OptInt(e.args[2]);
    const int64_t step = OptInt(e.args[3]).value_or(1);
    if (obj.is_list()) {
      Value::List out;
      for (int64_t i : SliceIndices(static_cast<int64_t>(obj.list().size()), start, stop, step, e.line)) {
        out.push_back(obj.list()[i]);
      }
      return Value(std::move(out));
    }
    if (obj.is_string()) {
      const std::vector<std::string> cps = CodePoints(obj.as_string());
      std::string out;
      for (int64_t i : SliceIndices(static_cast<int64_t>(cps.size()), start, stop, step, e.line)) {
        out += cps[i];
      }
      return Value(std::move(out));
    }
    throw Error(e.line, absl::StrCat("cannot slice a ", obj.TypeName()));
  }

  Value Binary(const Expr& e, const Value& l, const Value& r) {
    const std::string& op = e.name;
    if (op == "==") return Value(Equal(l, r));
    if (op == "!=") return Value(!Equal(l, r));
    if (op == "~") return Value(l.ToString() + r.ToString());
    if (op == "in") {
      bool found = false;
      if (r.is_string() && l.is_string()) {
        found = absl::StrContains(r.as_string(), l.as_string());
      } else if (r.is_list()) {
        found = std::any_of(r.list().begin(), r.list().end(), [&](const Value& v) { return Equal(l, v); });
      } else if (r.is_map()) {
        found = l.is_string() && r.Find(l.as_string()) != nullptr;
      } else {
        throw Error(e.line, absl::StrCat("'in' needs a string, list or dict on the right, not a ", r.TypeName()));
      }
      return Value(e.negated ? !found : found);
    }
    auto fail = [&]() -> Value {
      throw Error(e.line, absl::StrCat("unsupported operand types for ", op, ": ", l.TypeName(),
                                       " and ", r.TypeName()));
    };
    if (op == "<" || op == "<=" || op == ">" || op == ">=") {
      int cmp = 0;
      if (l.is_number() && r.is_number()) {
        cmp = l.as_double() < r.as_double() ? -1 : (l.as_double() > r.as_double() ? 1 : 0);
      } else if (l.is_string() && r.is_string()) {
        cmp = l.as_string().compare(r.as_string());
      } else {
        return fail();
      }
      if (op == "<") return Value(cmp < 0);
      if (op == "<=") return Value(cmp <= 0);
      if (op == ">") return Value(cmp > 0);
      return Value(cmp >= 0);
    }
    if (op == "+") {
      if (l.is_string() && r.is_string()) return Value(l.as_string() + r.as_string());
      if (l.is_list() && r.is_list()) {
        Value::List out = l.list();
        out.insert(out.end(), r.list().begin(), r.list().end());
        return Value(std::move(out));
      }
    }
    if (op == "*" && (l.is_string() || l.is_list()) && r.is_int()) {
      if (l.is_string()) {
        std::string out;
        for (int64_t i = 0; i < r.as_int(); ++i) out += l.as_string();
        if (out.size() > max_output_bytes_) throw Error(e.line, "string repetition too long");
        return Value(std::move(out));
      }
    }
    if (!l.is_number() || !r.is_number()) return fail();
    const bool ints = l.is_int() && r.is_int();
    if (op == "+") return ints ? Value(l.as_int() + r.as_int()) : Value(l.as_double() + r.as_double());
    if (op == "-") return ints ? Value(l.as_int() - r.as_int()) : Value(l.as_double() - r.as_double());
    if (op == "*") return ints ? Value(l.as_int() * r.as_int()) : Value(l.as_double() * r.as_double());
    if (r.as_double() == 0) throw Error(e.line, "division by zero");
    if (op == "/") return Value(l.as_double() / r.as_double());
    if (op == "//") return ints ? Value(FloorDiv(l.as_int(), r.as_int())) : Value(std::floor(l.as_double() / r.as_double()));
    if (op == "%") return ints ? Value(FloorMod(l.as_int(), r.as_int())) : Value(l.as_double() - r.as_double() * std::floor(l.as_double() / r.as_double()));
    return fail();
  }

  std::vector<Value> Args(const Expr& e, size_t first) {
    std::vector<Value> out;
    for (size_t i = first; i < e.args.size(); ++i) out.push_back(Eval(*e.args[i]));
    return out;
  }
  Value Kwarg(const Expr& e, std::string_view name, const std::vector<Value>& args, size_t pos) {
    for (const auto& [k, v] : e.kwargs) {
      if (k == name) return Eval(*v);
    }
    return pos < args.size() ? args[pos] : Value();
  }
  std::string StringArg(const Expr& e, const Value& v, std::string_view what) {
    if (!v.is_string()) throw Error(e.line, absl::StrCat(std::string(what), " needs a string, not a ", v.TypeName()));
    return v.as_string();
  }

  Value Call(const Expr& e) {
    const Expr& callee = *e.args[0];
    const std::vector<Value> args = Args(e, 1);
    if (callee.kind == Expr::kName) {
      if (callee.name == "raise_exception") {
        throw Error(e.line, args.empty() ? "raise_exception" : args[0].ToString());
      }
      if (callee.name == "namespace") {
        Value ns{Value::Map{}};
        for (const auto& [k, v] : e.kwargs) ns.Set(k, Eval(*v));
        return ns;
      }
      if (callee.name == "range") {
        if (args.empty() || !args[0].is_int()) throw Error(e.line, "range() needs an integer");
        const int64_t n = std::min<int64_t>(args[0].as_int(), 1 << 20);
        Value::List out;
        for (int64_t i = 0; i < n; ++i) out.emplace_back(i);
        return Value(std::move(out));
      }
      throw Error(e.line, absl::StrCat("unknown function '", callee.name, "'"));
    }
    if (callee.kind != Expr::kAttr) throw Error(e.line, "only functions and methods can be called");
    const Value obj = Eval(*callee.args[0]);
    const std::string& m = callee.name;
    if (obj.is_string()) {
      const std::string& s = obj.as_string();
      auto chars = [&]() -> std::optional<std::string> {
        if (args.empty() || args[0].is_none()) return std::nullopt;
        return StringArg(e, args[0], m);
      };
      if (m == "strip") return Value(Strip(s, chars(), true, true));
      if (m == "lstrip") return Value(Strip(s, chars(), true, false));
      if (m == "rstrip") return Value(Strip(s, chars(), false, true));
      if (m == "upper") return Value(absl::AsciiStrToUpper(s));
      if (m == "lower") return Value(absl::AsciiStrToLower(s));
      if (m == "title") return Value(Title(s));
      if (m == "capitalize") return Value(Capitalize(s));
      if (m == "startswith" && !args.empty()) return Value(absl::StartsWith(s, StringArg(e, args[0], m)));
      if (m == "endswith" && !args.empty()) return Value(absl::EndsWith(s, StringArg(e, args[0], m)));
      if (m == "replace" && args.size() >= 2) {
        const std::string from = StringArg(e, args[0], m);
        if (from.empty()) throw Error(e.line, "replace() of an empty string is not supported");
        return Value(absl::StrReplaceAll(s, {{from, StringArg(e, args[1], m)}}));
      }
      if (m == "split") {
        Value::List out;
        if (args.empty() || args[0].is_none()) {
          for (absl::string_view p : absl::StrSplit(s, absl::ByAnyChar(" \t\n\r\f\v"), absl::SkipEmpty())) {
            out.emplace_back(std::string(p));
          }
        } else {
          const std::string sep = StringArg(e, args[0], m);
          if (sep.empty()) throw Error(e.line, "split() with an empty separator");
          for (absl::string_view p : absl::StrSplit(s, sep)) out.emplace_back(std::string(p));
        }
        return Value(std::move(out));
      }
    } else if (obj.is_map()) {
      if (m == "get") {
        if (args.empty() || !args[0].is_string()) throw Error(e.line, "get() needs a string key");
        const Value* v = obj.Find(args[0].as_string());
        return v ? *v : (args.size() > 1 ? args[1] : Value::MakeNone());
      }
      if (m == "items" || m == "keys" || m == "values") {
        Value::List out;
        for (const auto& [k, v] : obj.map()) {
          if (m == "items") out.emplace_back(Value::List{Value(k), v});
          if (m == "keys") out.emplace_back(k);
          if (m == "values") out.push_back(v);
        }
        return Value(std::move(out));
      }
    }
    throw Error(e.line, absl::StrCat("a ", obj.TypeName(), " has no method '", m, "'"));
  }

  Value Filter(const Expr& e) {
    const Value v = Eval(*e.args[0]);
    const std::vector<Value> args = Args(e, 1);
    const std::string& f = e.name;
    if (f == "safe") return v;
    if (f == "string") return Value(v.ToString());
    if (f == "default" || f == "d") {
      const bool boolean = Kwarg(e, "boolean", args, 1).Truthy();
      const bool use_default = boolean ? !v.Truthy() : v.is_undefined();
      return use_default ? (args.empty() ? Value(std::string()) : args[0]) : v;
    }
    if (f == "tojson") {
      const Value indent = Kwarg(e, "indent", args, 0);
      return Value(v.ToJson(indent.is_int() ? static_cast<int>(indent.as_int()) : -1));
    }
    if (f == "length" || f == "count") {
      if (v.is_string()) return Value(static_cast<int64_t>(CodePoints(v.as_string()).size()));
      if (v.is_list()) return Value(static_cast<int64_t>(v.list().size()));
      if (v.is_map()) return Value(static_cast<int64_t>(v.map().size()));
      if (v.is_undefined()) return Value(0);
    }
    if (f == "int") {
      if (v.is_int()) return v;
      if (v.is_double()) return Value(static_cast<int64_t>(v.as_double()));
      if (v.is_bool()) return Value(v.as_bool() ? 1 : 0);
      if (v.is_string()) return Value(static_cast<int64_t>(std::strtoll(v.as_string().c_str(), nullptr, 10)));
      return Value(0);
    }
    if (f == "float") {
      if (v.is_number()) return Value(v.as_double());
      if (v.is_string()) return Value(std::strtod(v.as_string().c_str(), nullptr));
      return Value(0.0);
    }
    if (f == "items" && v.is_map()) {
      Value::List out;
      for (const auto& [k, val] : v.map()) out.emplace_back(Value::List{Value(k), val});
      return Value(std::move(out));
    }
    if (f == "list") {
      if (v.is_list()) return Value(Value::List(v.list()));
      Value::List out;
      if (v.is_string()) {
        for (std::string& c : CodePoints(v.as_string())) out.emplace_back(std::move(c));
      } else if (v.is_map()) {
        for (const auto& kv : v.map()) out.emplace_back(kv.first);
      }
      return Value(std::move(out));
    }
    if ((f == "first" || f == "last") && (v.is_list() || v.is_string())) {
      const int64_t index = f == "first" ? 0 : -1;
      return GetItem(v, Value(index), e.line);
    }
    if (f == "reverse") {
      if (v.is_list()) {
        Value::List out(v.list().rbegin(), v.list().rend());
        return Value(std::move(out));
      }
      if (v.is_string()) {
        std::vector<std::string> cps = CodePoints(v.as_string());
        std::reverse(cps.begin(), cps.end());
        return Value(absl::StrJoin(cps, ""));
      }
    }
    if (f == "join" && v.is_list()) {
      const Value sep = Kwarg(e, "d", args, 0);
      std::vector<std::string> parts;
      for (const Value& item : v.list()) parts.push_back(item.ToString());
      return Value(absl::StrJoin(parts, sep.is_string() ? sep.as_string() : ""));
    }
    if (v.is_string() || v.is_undefined()) {
      const std::string s = v.ToString();
      if (f == "trim") {
        std::optional<std::string> chars;
        if (!args.empty() && args[0].is_string()) chars = args[0].as_string();
        return Value(Strip(s, chars, true, true));
      }
      if (f == "upper") return Value(absl::AsciiStrToUpper(s));
      if (f == "lower") return Value(absl::AsciiStrToLower(s));
      if (f == "capitalize") return Value(Capitalize(s));
      if (f == "title") return Value(Title(s));
      if (f == "replace" && args.size() >= 2 && args[0].is_string() && !args[0].as_string().empty()) {
        return Value(absl::StrReplaceAll(s, {{args[0].as_string(), args[1].ToString()}}));
      }
    }
    throw Error(e.line, absl::StrCat("unknown filter '", f, "' for a ", v.TypeName()));
  }

  bool Test(const Expr& e) {
    const std::string& t = e.name;
    if (t == "defined") return !Eval(*e.args[0]).is_undefined();
    if (t == "undefined") return Eval(*e.args[0]).is_undefined();
    const Value v = Eval(*e.args[0]);
    if (t == "none") return v.is_none();
    if (t == "string") return v.is_string();
    if (t == "number") return v.is_number();
    if (t == "integer") return v.is_int();
    if (t == "float") return v.is_double();
    if (t == "boolean") return v.is_bool();
    if (t == "true") return v.is_bool() && v.as_bool();
    if (t == "false") return v.is_bool() && !v.as_bool();
    if (t == "mapping") return v.is_map();
    if (t == "sequence" || t == "iterable") return v.is_list() || v.is_string() || v.is_map();
    if (t == "even" || t == "odd") {
      if (!v.is_int()) throw Error(e.line, absl::StrCat("'", t, "' needs an integer"));
      return (FloorMod(v.as_int(), 2) == 0) == (t == "even");
    }
    throw Error(e.line, absl::StrCat("unknown test '", t, "'"));
  }

  const size_t max_output_bytes_;
  std::vector<Value::Map> scopes_;  // [0] the context; one more per for loop
  std::string out_;
};

}  // namespace

absl::StatusOr<std::string> Template::Render(const Value::Map& context,
                                             size_t max_output_bytes) const {
  try {
    Renderer r(context, max_output_bytes);
    r.Run(root_->body);
    return std::move(r.output());
  } catch (const Error& e) {
    return absl::InvalidArgumentError(absl::StrCat("chat template: ", e.what()));
  }
}

}  // namespace folio::frontend::jinja
