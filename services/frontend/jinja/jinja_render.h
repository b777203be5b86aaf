// The evaluator behind Template::Render, shared by jinja_eval.cc (statements, expressions,
// macros) and jinja_builtins.cc (filters, tests, methods, global functions). Internal to
// the chat template code; not part of the API.
//
// A Renderer renders one template once; it is owned by one thread.
#ifndef FOLIO_SERVICES_FRONTEND_JINJA_JINJA_RENDER_H_
#define FOLIO_SERVICES_FRONTEND_JINJA_JINJA_RENDER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "services/frontend/jinja/jinja.h"
#include "services/frontend/jinja/jinja_ast.h"

namespace folio::frontend::jinja {

// Arguments of a call, a filter or a test, evaluated.
struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> named;

  // The argument called `name`, else the positional one at `pos`, else undefined.
  Value Get(std::string_view name, size_t pos) const;
  bool Has(std::string_view name, size_t pos) const;
};

// Python helpers (jinja_strings.cc).
std::vector<std::string> CodePoints(const std::string& s);  // each code point's bytes
bool Equal(const Value& a, const Value& b);                  // Python's ==
std::string HtmlEscape(const std::string& s);                // markupsafe's escape
bool IsPySpace(char c);                                      // str.isspace, ASCII
// str.strip/lstrip/rstrip; `chars` nullopt: whitespace.
std::string Strip(const std::string& s, const std::optional<std::string>& chars, bool left,
                  bool right);
std::string Capitalize(const std::string& s);
std::string Title(const std::string& s);
std::vector<std::string> SplitLines(const std::string& s);  // str.splitlines()
// str.split / str.rsplit; `sep` nullopt: runs of whitespace; maxsplit < 0: no limit.
std::vector<std::string> Split(const std::string& s, const std::optional<std::string>& sep,
                               int64_t maxsplit, bool from_right);
// str.replace; count < 0: every occurrence.
std::string Replace(const std::string& s, const std::string& from, const std::string& to,
                    int64_t count);

class Renderer {
 public:
  Renderer(const Value::Map& context, const RenderOptions& options);

  void Run(const std::vector<Node>& body);
  std::string& output() { return out_; }

  // jinja_builtins.cc
  Value Filter(const std::string& name, const Value& v, const Args& args, int line);
  bool Test(const std::string& name, const Value& v, const Args& args, int line);
  Value Method(const Value& obj, const std::string& name, const Args& args, int line);
  // A global function; nullopt when `name` is none.
  std::optional<Value> Function(const std::string& name, const Args& args, int line);

  // Attribute or item lookup as Jinja does it (a dict's key, a list's index).
  Value GetItem(const Value& obj, const Value& key, int line);
  // `a.b.0` attribute paths of map/selectattr/sort.
  Value GetPath(const Value& obj, const std::string& path, int line);
  // Checks a string or list just built against max_output_bytes.
  void CheckSize(size_t size, int line) const;
  // Counts one unit of work; throws past max_steps or the time limit.
  void Tick(int line);
  Value CallValue(const Value& callee, const Args& args, int line);

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  struct Scope {
    Value::Map vars;
    size_t parent = 0;    // where lookups continue; scope 0 (the top level) has none
    uint64_t serial = 0;  // tells a reused slot from the scope a macro remembers
  };

  void Emit(const std::string& s, int line);
  Value Lookup(const std::string& name) const;
  void Assign(const std::string& name, Value v);
  size_t PushScope(size_t parent);
  void PopScope(size_t saved_current);

  void Exec(const Node& n);
  void ExecFor(const Node& n);
  void ExecSet(const Node& n);
  // A value about to be stored: it must nest at most kMaxValueDepth deep and must not
  // hold `container` (a namespace set to hold itself would be a reference cycle: leaked,
  // and endless to print). Counts its nodes as steps.
  void CheckStored(const Value& v, const Value* container, int depth, int line);
  static constexpr int kMaxValueDepth = 200;
  void Bind(const std::vector<std::string>& targets, const Value& item, int line);
  std::string Capture(const std::vector<Node>& body);
  Value CallMacro(const Callable& c, const Args& args, const Value* caller, int line);

  Value Eval(const Expr& e);
  Args EvalArgs(const Expr& e, size_t first);
  Value EvalCall(const Expr& e, const Value* caller);
  Value Slice(const Expr& e);
  Value Binary(const Expr& e, const Value& l, const Value& r);
  std::optional<int64_t> OptInt(const ExprPtr& e);

  const RenderOptions options_;
  const absl::Time deadline_;
  std::vector<Scope> scopes_;  // [0]: the context and the top level's variables
  size_t current_ = 0;         // the innermost scope
  uint64_t next_serial_ = 1;
  int call_depth_ = 0;
  int64_t steps_ = 0;
  Flow flow_ = Flow::kNormal;
  std::string out_;
  std::string* sink_ = &out_;  // where output goes: out_, or a macro's or block's capture
};

}  // namespace folio::frontend::jinja

#endif  // FOLIO_SERVICES_FRONTEND_JINJA_JINJA_RENDER_H_
