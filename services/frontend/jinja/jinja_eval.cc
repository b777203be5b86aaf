// Template::Render: a tree-walking evaluator over the nodes Parse built (jinja_ast.h):
// statements, expressions, scopes and macros. Filters, tests, methods and functions are
// in jinja_builtins.cc.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "services/frontend/jinja/jinja.h"
#include "services/frontend/jinja/jinja_ast.h"
#include "services/frontend/jinja/jinja_render.h"

namespace folio::frontend::jinja {
namespace {

// Python's floor modulo and floor division on integers.
int64_t FloorMod(int64_t a, int64_t b) {
  if (b == -1) return 0;  // INT64_MIN % -1 overflows in C++
  int64_t r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
int64_t FloorDiv(int64_t a, int64_t b, int line) {
  if (b == -1) {
    if (a == INT64_MIN) throw Error(line, "integer overflow");
    return -a;
  }
  return (a - FloorMod(a, b)) / b;
}

// Python's rules for a[start:stop:step] over `size` items: the indices taken, in order.
std::vector<int64_t> SliceIndices(int64_t size, const std::optional<int64_t>& start_in,
                                  const std::optional<int64_t>& stop_in, int64_t step, int line) {
  if (step == 0) throw Error(line, "slice step cannot be zero");
  auto clamp = [&](int64_t i, int64_t lo, int64_t hi) {
    if (i < 0) i = i < -size ? -1 - size : i + size;  // no overflow for huge negatives
    if (i < lo) i = lo;
    return std::min(i, hi);
  };
  std::vector<int64_t> out;
  if (step > 0) {
    const int64_t start = start_in ? clamp(*start_in, 0, size) : 0;
    const int64_t stop = stop_in ? clamp(*stop_in, 0, size) : size;
    for (int64_t i = start; i < stop; i = i > INT64_MAX - step ? stop : i + step) out.push_back(i);
  } else {
    const int64_t start = start_in ? clamp(*start_in, -1, size - 1) : size - 1;
    const int64_t stop = stop_in ? clamp(*stop_in, -1, size - 1) : -1;
    for (int64_t i = start; i > stop; i = i < INT64_MIN - step ? stop : i + step) out.push_back(i);
  }
  return out;
}

// Numbers for arithmetic: Python's bool is an int.
bool IsNum(const Value& v) { return v.is_number() || v.is_bool(); }
bool IsIntLike(const Value& v) { return v.is_int() || v.is_bool(); }
int64_t AsInt(const Value& v) { return v.is_bool() ? (v.as_bool() ? 1 : 0) : v.as_int(); }
double AsDouble(const Value& v) { return v.is_bool() ? (v.as_bool() ? 1 : 0) : v.as_double(); }

}  // namespace

Value Args::Get(std::string_view name, size_t pos) const {
  for (const auto& [k, v] : named) {
    if (k == name) return v;
  }
  return pos < positional.size() ? positional[pos] : Value();
}

bool Args::Has(std::string_view name, size_t pos) const {
  for (const auto& kv : named) {
    if (kv.first == name) return true;
  }
  return pos < positional.size();
}

Renderer::Renderer(const Value::Map& context, const RenderOptions& options)
    : options_(options), deadline_(absl::Now() + options.time_limit) {
  scopes_.push_back(Scope{context, 0, 0});
}

void Renderer::Tick(int line) {
  if (++steps_ > options_.max_steps) {
    throw Error(line, absl::StrCat("the template ran more than ", options_.max_steps,
                                   " steps (loops, calls and statements)"));
  }
  if ((steps_ & 1023) == 0 && absl::Now() > deadline_) {
    throw Error(line, absl::StrCat("the template ran longer than ",
                                   absl::FormatDuration(options_.time_limit)));
  }
}

void Renderer::CheckSize(size_t size, int line) const {
  if (size > options_.max_output_bytes) {
    throw Error(line, absl::StrCat("a value or the output is longer than ",
                                   options_.max_output_bytes, " bytes"));
  }
}

void Renderer::Emit(const std::string& s, int line) {
  *sink_ += s;
  CheckSize(sink_->size(), line);
}

Value Renderer::Lookup(const std::string& name) const {
  for (size_t i = current_;; i = scopes_[i].parent) {
    for (const auto& [k, v] : scopes_[i].vars) {
      if (k == name) return v;
    }
    if (i == 0) break;
  }
  // The builtins live for the process: an aliasing shared_ptr that owns nothing.
  if (const Callable* b = BuiltinFunction(name)) {
    return Value(std::shared_ptr<const Callable>(std::shared_ptr<const Callable>(), b));
  }
  return Value();
}

void Renderer::Assign(const std::string& name, Value v) {
  for (auto& [k, old] : scopes_[current_].vars) {
    if (k == name) {
      old = std::move(v);
      return;
    }
  }
  scopes_[current_].vars.emplace_back(name, std::move(v));
}

size_t Renderer::PushScope(size_t parent) {
  const size_t saved = current_;
  scopes_.push_back(Scope{{}, parent, next_serial_++});
  current_ = scopes_.size() - 1;
  return saved;
}

void Renderer::PopScope(size_t saved_current) {
  scopes_.pop_back();
  current_ = saved_current;
}

void Renderer::Run(const std::vector<Node>& body) {
  for (const Node& n : body) {
    Exec(n);
    if (flow_ != Flow::kNormal) return;
  }
}

std::string Renderer::Capture(const std::vector<Node>& body) {
  std::string captured;
  std::string* saved = sink_;
  sink_ = &captured;
  try {
    Run(body);
  } catch (...) {
    sink_ = saved;
    throw;
  }
  sink_ = saved;
  return captured;
}

void Renderer::Exec(const Node& n) {
  Tick(n.line);
  switch (n.kind) {
    case Node::kRoot:
    case Node::kBlock:
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
    case Node::kSet:
      ExecSet(n);
      return;
    case Node::kSetBlock:
      Assign(n.targets[0], Value(Capture(n.body)));
      return;
    case Node::kFor:
      ExecFor(n);
      return;
    case Node::kBreak:
      flow_ = Flow::kBreak;
      return;
    case Node::kContinue:
      flow_ = Flow::kContinue;
      return;
    case Node::kMacro: {
      auto c = std::make_shared<Callable>();
      c->node = &n;
      c->scope = current_;
      c->scope_serial = scopes_[current_].serial;
      Assign(n.text, Value(std::shared_ptr<const Callable>(std::move(c))));
      return;
    }
    case Node::kCallBlock: {
      auto c = std::make_shared<Callable>();
      c->node = &n;
      c->scope = current_;
      c->scope_serial = scopes_[current_].serial;
      const Value caller(std::shared_ptr<const Callable>(std::move(c)));
      Emit(EvalCall(*n.expr, &caller).ToString(), n.line);
      return;
    }
    case Node::kFilterBlock: {
      std::string body = Capture(n.body);
      const size_t saved = PushScope(current_);
      Assign(kFilterSubject, Value(std::move(body)));
      Value v;
      try {
        v = Eval(*n.expr);
      } catch (...) {
        PopScope(saved);
        throw;
      }
      PopScope(saved);
      Emit(v.ToString(), n.line);
      return;
    }
  }
}

void Renderer::Bind(const std::vector<std::string>& targets, const Value& item, int line) {
  if (targets.size() == 1) {
    Assign(targets[0], item);
    return;
  }
  std::vector<Value> parts;
  if (item.is_list()) {
    parts = item.list();
  } else if (item.is_string()) {
    for (std::string& c : CodePoints(item.as_string())) parts.emplace_back(std::move(c));
  } else if (item.is_map()) {
    for (const auto& kv : item.map()) parts.push_back(DecodeKey(kv.first));
  }
  if (parts.size() != targets.size()) {
    throw Error(line, absl::StrCat("cannot unpack a ", item.TypeName(), " into ", targets.size(),
                                   " names"));
  }
  for (size_t i = 0; i < targets.size(); ++i) Assign(targets[i], parts[i]);
}

void Renderer::CheckStored(const Value& v, const Value* container, int depth, int line) {
  if (!v.is_list() && !v.is_map()) return;
  Tick(line);
  if (depth > kMaxValueDepth) {
    throw Error(line, absl::StrCat("a value nests deeper than ", kMaxValueDepth, " levels"));
  }
  if (container != nullptr && v.SameObject(*container)) {
    throw Error(line, "a namespace cannot hold itself");
  }
  if (v.is_list()) {
    for (const Value& item : v.list()) CheckStored(item, container, depth + 1, line);
  } else {
    for (const auto& kv : v.map()) CheckStored(kv.second, container, depth + 1, line);
  }
}

void Renderer::ExecSet(const Node& n) {
  Value v = Eval(*n.expr);
  if (!n.set_attr) {
    CheckStored(v, nullptr, 0, n.line);
    Bind(n.targets, v, n.line);
    return;
  }
  const Value ns = Lookup(n.targets[0]);
  if (ns.is_map()) CheckStored(v, &ns, 0, n.line);
  if (!ns.is_map()) {
    throw Error(n.line, absl::StrCat("cannot set an attribute of '", n.targets[0], "', a ",
                                     ns.TypeName(), " (only a namespace() has settable attributes)"));
  }
  ns.Set(n.targets[1], std::move(v));
}

void Renderer::ExecFor(const Node& n) {
  const Value iterable = Eval(*n.expr);
  std::vector<Value> items;
  if (iterable.is_list()) {
    items = iterable.list();
  } else if (iterable.is_map()) {
    for (const auto& kv : iterable.map()) items.push_back(DecodeKey(kv.first));
  } else if (iterable.is_string()) {
    for (std::string& c : CodePoints(iterable.as_string())) items.emplace_back(std::move(c));
  } else if (!iterable.is_undefined()) {
    throw Error(n.line, absl::StrCat("cannot iterate over a ", iterable.TypeName()));
  }
  const size_t saved = PushScope(current_);
  try {
    if (n.filter != nullptr) {
      std::vector<Value> kept;
      for (Value& item : items) {
        Tick(n.line);
        Bind(n.targets, item, n.line);
        if (Eval(*n.filter).Truthy()) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    const int64_t size = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < size; ++i) {
      Tick(n.line);
      Bind(n.targets, items[i], n.line);
      Value::Map loop = {{"index", Value(i + 1)},
                         {"index0", Value(i)},
                         {"revindex", Value(size - i)},
                         {"revindex0", Value(size - i - 1)},
                         {"first", Value(i == 0)},
                         {"last", Value(i == size - 1)},
                         {"length", Value(size)},
                         {"depth", Value(1)},
                         {"depth0", Value(0)},
                         {"previtem", i > 0 ? items[i - 1] : Value()},
                         {"nextitem", i + 1 < size ? items[i + 1] : Value()}};
      Assign("loop", Value(std::move(loop)));
      Run(n.body);
      if (flow_ == Flow::kBreak) {
        flow_ = Flow::kNormal;
        break;
      }
      flow_ = Flow::kNormal;
    }
  } catch (...) {
    PopScope(saved);
    throw;
  }
  PopScope(saved);
  if (items.empty()) Run(n.else_body);
}

Value Renderer::CallMacro(const Callable& c, const Args& args, const Value* caller, int line) {
  if (c.node == nullptr) {
    if (caller != nullptr) throw Error(line, absl::StrCat("{% call %} needs a macro, not ", c.builtin));
    Tick(line);
    return *Function(c.builtin, args, line);
  }
  const Node& m = *c.node;
  const std::string name = m.kind == Node::kMacro ? m.text : "caller";
  if (call_depth_ >= options_.max_call_depth) {
    throw Error(line, absl::StrCat("macro calls nest deeper than ", options_.max_call_depth,
                                   " (calling '", name, "')"));
  }
  Tick(line);
  const size_t parent =
      c.scope < scopes_.size() && scopes_[c.scope].serial == c.scope_serial ? c.scope : 0;
  const size_t saved = PushScope(parent);
  const Flow saved_flow = flow_;
  ++call_depth_;
  std::string result;
  try {
    Value::List varargs;
    for (size_t i = 0; i < args.positional.size(); ++i) {
      if (i < m.params.size()) {
        Assign(m.params[i].first, args.positional[i]);
      } else {
        varargs.push_back(args.positional[i]);
      }
    }
    Value::Map kwargs;
    for (const auto& named : args.named) {
      const std::string& k = named.first;
      const Value& v = named.second;
      const bool is_param = std::any_of(m.params.begin(), m.params.end(),
                                        [&](const auto& p) { return p.first == k; });
      if (!is_param) {
        kwargs.emplace_back(k, v);
        continue;
      }
      for (size_t i = 0; i < m.params.size(); ++i) {
        if (m.params[i].first == k && i < args.positional.size()) {
          throw Error(line, absl::StrCat("macro '", name, "' got multiple values for '", k, "'"));
        }
      }
      Assign(k, v);
    }
    if (!varargs.empty() && !m.uses_varargs && m.kind == Node::kMacro) {
      throw Error(line, absl::StrCat("macro '", name, "' takes not more than ", m.params.size(),
                                     " argument(s)"));
    }
    if (!kwargs.empty() && !m.uses_kwargs && m.kind == Node::kMacro) {
      throw Error(line, absl::StrCat("macro '", name, "' takes no keyword argument '",
                                     kwargs.front().first, "'"));
    }
    // Defaults are evaluated in the macro's scope, after the arguments before them.
    for (size_t i = 0; i < m.params.size(); ++i) {
      const std::string& p = m.params[i].first;
      const bool given = i < args.positional.size() ||
                         std::any_of(args.named.begin(), args.named.end(),
                                     [&](const auto& kv) { return kv.first == p; });
      if (!given) Assign(p, m.params[i].second ? Eval(*m.params[i].second) : Value());
    }
    Assign("varargs", Value::Tuple(std::move(varargs)));
    Assign("kwargs", Value(std::move(kwargs)));
    if (caller != nullptr) {
      if (!m.uses_caller && m.kind == Node::kMacro) {
        throw Error(line, absl::StrCat("macro '", name, "' was called from {% call %} but never "
                                       "calls caller()"));
      }
      Assign("caller", *caller);
    }
    flow_ = Flow::kNormal;
    result = Capture(m.body);
  } catch (...) {
    --call_depth_;
    flow_ = saved_flow;
    PopScope(saved);
    throw;
  }
  --call_depth_;
  flow_ = saved_flow;
  PopScope(saved);
  return Value(std::move(result));
}

Value Renderer::CallValue(const Value& callee, const Args& args, int line) {
  if (!callee.is_callable()) {
    throw Error(line, absl::StrCat("a ", callee.TypeName(), " is not callable"));
  }
  return CallMacro(callee.callable(), args, nullptr, line);
}

Args Renderer::EvalArgs(const Expr& e, size_t first) {
  Args a;
  for (size_t i = first; i < e.args.size(); ++i) a.positional.push_back(Eval(*e.args[i]));
  for (const auto& [k, v] : e.kwargs) a.named.emplace_back(k, Eval(*v));
  return a;
}

Value Renderer::EvalCall(const Expr& e, const Value* caller) {
  const Expr& callee = *e.args[0];
  const Args args = EvalArgs(e, 1);
  if (callee.kind == Expr::kName) {
    const Value v = Lookup(callee.name);
    if (v.is_callable()) return CallMacro(v.callable(), args, caller, e.line);
    if (v.is_undefined()) {
      if (std::optional<Value> r = Function(callee.name, args, e.line)) return *std::move(r);
      throw Error(e.line, absl::StrCat("'", callee.name, "' is undefined (not a function)"));
    }
    throw Error(e.line, absl::StrCat("'", callee.name, "' is a ", v.TypeName(), ", not callable"));
  }
  if (callee.kind == Expr::kAttr) {
    const Value obj = Eval(*callee.args[0]);
    if (obj.is_map()) {
      const Value* member = obj.Find(callee.name);
      if (member != nullptr && member->is_callable()) {
        return CallMacro(member->callable(), args, caller, e.line);
      }
    }
    if (obj.is_undefined()) {
      throw Error(e.line, absl::StrCat("cannot call '", callee.name, "' of an undefined value"));
    }
    return Method(obj, callee.name, args, e.line);
  }
  const Value v = Eval(callee);
  if (!v.is_callable()) throw Error(e.line, absl::StrCat("a ", v.TypeName(), " is not callable"));
  return CallMacro(v.callable(), args, caller, e.line);
}

Value Renderer::Eval(const Expr& e) {
  switch (e.kind) {
    case Expr::kLiteral:
      return e.literal;
    case Expr::kName:
      return Lookup(e.name);
    case Expr::kList: {
      Value::List list;
      for (const ExprPtr& a : e.args) list.push_back(Eval(*a));
      return e.name == "tuple" ? Value::Tuple(std::move(list)) : Value(std::move(list));
    }
    case Expr::kDict: {
      Value dict{Value::Map{}};
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        const Value key = Eval(*e.args[i]);
        dict.Set(EncodeKey(key, e.line), Eval(*e.args[i + 1]));
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
      return EvalCall(e, nullptr);
    case Expr::kFilter: {
      const Value v = Eval(*e.args[0]);
      return Filter(e.name, v, EvalArgs(e, 1), e.line);
    }
    case Expr::kTest: {
      const Value v = Eval(*e.args[0]);
      const bool result = Test(e.name, v, EvalArgs(e, 1), e.line);
      return Value(e.negated ? !result : result);
    }
    case Expr::kUnary: {
      const Value v = Eval(*e.args[0]);
      if (!IsNum(v)) {
        throw Error(e.line, absl::StrCat("bad operand for unary ", e.name, ": ", v.TypeName()));
      }
      if (e.name == "+") return IsIntLike(v) ? Value(AsInt(v)) : v;
      if (IsIntLike(v)) {
        if (AsInt(v) == INT64_MIN) throw Error(e.line, "integer overflow");
        return Value(-AsInt(v));
      }
      return Value(-v.as_double());
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

Value Renderer::GetItem(const Value& obj, const Value& key, int line) {
  if (obj.is_map()) {
    if (!key.is_string() && !IsIntLike(key)) return Value();
    const Value* v = obj.Find(EncodeKey(key, line));
    return v ? *v : Value();
  }
  if ((obj.is_list() || obj.is_string()) && IsIntLike(key) && !obj.is_generator()) {
    int64_t i = AsInt(key);
    if (obj.is_list()) {
      const int64_t size = static_cast<int64_t>(obj.list().size());
      if (i < 0) i += size;
      return i >= 0 && i < size ? obj.list()[i] : Value();
    }
    const std::vector<std::string> cps = CodePoints(obj.as_string());
    const int64_t size = static_cast<int64_t>(cps.size());
    if (i < 0) i += size;
    return i >= 0 && i < size ? Value(cps[i]) : Value();
  }
  if (obj.is_undefined()) {
    throw Error(line, absl::StrCat("cannot read '", key.ToString(), "' of an undefined value"));
  }
  return Value();  // as Jinja: a missing attribute is undefined
}

Value Renderer::GetPath(const Value& obj, const std::string& path, int line) {
  Value v = obj;
  size_t start = 0;
  for (;;) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? dot : dot - start);
    int64_t index = 0;
    const bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit) &&
                         part.size() < 18;
    if (numeric) index = std::strtoll(part.c_str(), nullptr, 10);
    v = GetItem(v, numeric && !v.is_map() ? Value(index) : Value(part), line);
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

std::optional<int64_t> Renderer::OptInt(const ExprPtr& e) {
  if (e == nullptr) return std::nullopt;
  const Value v = Eval(*e);
  if (v.is_none()) return std::nullopt;
  if (!IsIntLike(v)) throw Error(e->line, "slice bounds must be integers");
  return AsInt(v);
}

Value Renderer::Slice(const Expr& e) {
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

Value Renderer::Binary(const Expr& e, const Value& l, const Value& r) {
  const std::string& op = e.name;
  if (op == "==") return Value(Equal(l, r));
  if (op == "!=") return Value(!Equal(l, r));
  if (op == "~") {
    std::string s = l.ToString() + r.ToString();
    CheckSize(s.size(), e.line);
    return Value(std::move(s));
  }
  if (op == "in") {
    bool found = false;
    if (r.is_string()) {
      if (!l.is_string()) {
        throw Error(e.line, absl::StrCat("'in <string>' needs a string on the left, not a ",
                                         l.TypeName()));
      }
      found = absl::StrContains(r.as_string(), l.as_string());
    } else if (r.is_list()) {
      found = std::any_of(r.list().begin(), r.list().end(), [&](const Value& v) { return Equal(l, v); });
    } else if (r.is_map()) {
      found = (l.is_string() || IsIntLike(l)) && r.Find(EncodeKey(l, e.line)) != nullptr;
    } else if (!r.is_undefined()) {
      throw Error(e.line, absl::StrCat("'in' needs a string, list or dict on the right, not a ",
                                       r.TypeName()));
    }
    return Value(e.negated ? !found : found);
  }
  auto fail = [&]() -> Value {
    throw Error(e.line, absl::StrCat("unsupported operand types for ", op, ": ", l.TypeName(),
                                     " and ", r.TypeName()));
  };
  if (op == "<" || op == "<=" || op == ">" || op == ">=") {
    int cmp = 0;
    if (IsNum(l) && IsNum(r)) {
      const double x = AsDouble(l), y = AsDouble(r);
      if (IsIntLike(l) && IsIntLike(r)) {
        cmp = AsInt(l) < AsInt(r) ? -1 : (AsInt(l) > AsInt(r) ? 1 : 0);
      } else {
        cmp = x < y ? -1 : (x > y ? 1 : 0);
      }
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
    if (l.is_string() && r.is_string()) {
      CheckSize(l.as_string().size() + r.as_string().size(), e.line);
      if (l.is_markup() || r.is_markup()) {  // markupsafe: the plain operand is escaped
        auto safe = [](const Value& v) { return v.is_markup() ? v.as_string() : HtmlEscape(v.as_string()); };
        std::string out = safe(l) + safe(r);
        CheckSize(out.size(), e.line);
        return Value::Markup(std::move(out));
      }
      return Value(l.as_string() + r.as_string());
    }
    if (l.is_list() && r.is_list() && !l.is_generator() && !r.is_generator()) {
      CheckSize(l.list().size() + r.list().size(), e.line);
      Value::List out = l.list();
      out.insert(out.end(), r.list().begin(), r.list().end());
      return Value(std::move(out));
    }
  }
  if (op == "*" && (l.is_string() || l.is_list()) && IsIntLike(r)) {
    const int64_t n = std::max<int64_t>(AsInt(r), 0);
    const size_t unit = l.is_string() ? l.as_string().size() : l.list().size();
    if (unit > 0 && static_cast<uint64_t>(n) > options_.max_output_bytes / unit) CheckSize(SIZE_MAX, e.line);
    if (l.is_string()) {
      std::string out;
      for (int64_t i = 0; i < n; ++i) out += l.as_string();
      return Value(std::move(out));
    }
    Value::List out;
    for (int64_t i = 0; i < n; ++i) out.insert(out.end(), l.list().begin(), l.list().end());
    return Value(std::move(out));
  }
  if (!IsNum(l) || !IsNum(r)) return fail();
  const bool ints = IsIntLike(l) && IsIntLike(r);
  int64_t result = 0;
  if (ints && (op == "+" || op == "-" || op == "*")) {
    const int64_t a = AsInt(l), b = AsInt(r);
    const bool overflow = op == "+" ? __builtin_add_overflow(a, b, &result)
                          : op == "-" ? __builtin_sub_overflow(a, b, &result)
                                      : __builtin_mul_overflow(a, b, &result);
    if (overflow) throw Error(e.line, "integer overflow");
    return Value(result);
  }
  const double x = AsDouble(l), y = AsDouble(r);
  if (op == "+") return Value(x + y);
  if (op == "-") return Value(x - y);
  if (op == "*") return Value(x * y);
  if (op == "**") {
    if (ints && AsInt(r) >= 0) {
      const int64_t base = AsInt(l), exp = AsInt(r);
      if (exp == 0) return Value(1);
      if (base == 0 || base == 1) return Value(base);
      if (base == -1) return Value(exp % 2 == 0 ? 1 : -1);
      int64_t acc = 1;  // |base| >= 2: overflows within 63 steps
      for (int64_t i = 0; i < exp; ++i) {
        if (__builtin_mul_overflow(acc, base, &acc)) throw Error(e.line, "integer overflow");
      }
      return Value(acc);
    }
    return Value(std::pow(x, y));
  }
  if (y == 0) throw Error(e.line, "division by zero");
  if (op == "/") return Value(x / y);
  if (op == "//") return ints ? Value(FloorDiv(AsInt(l), AsInt(r), e.line)) : Value(std::floor(x / y));
  if (op == "%") return ints ? Value(FloorMod(AsInt(l), AsInt(r))) : Value(x - y * std::floor(x / y));
  return fail();
}

absl::StatusOr<std::string> Template::Render(const Value::Map& context,
                                             const RenderOptions& options) const {
  try {
    Renderer r(context, options);
    r.Run(root_->body);
    return std::move(r.output());
  } catch (const Error& e) {
    return absl::InvalidArgumentError(absl::StrCat("chat template: ", e.what()));
  }
}

}  // namespace folio::frontend::jinja
