// The parsed form of a jinja::Template, shared by the parser (jinja.cc) and the evaluator
// (jinja_eval.cc). Internal to the chat template code; not part of the API.
#ifndef FOLIO_SERVICES_FRONTEND_JINJA_JINJA_AST_H_
#define FOLIO_SERVICES_FRONTEND_JINJA_JINJA_AST_H_

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "services/frontend/jinja/jinja.h"

namespace folio::frontend::jinja {

// Parse and render errors travel as this exception inside the jinja*.cc files only;
// Template::Parse and Template::Render turn it into a Status, so none crosses the API.
struct Error : std::runtime_error {
  Error(int line, const std::string& message)
      : std::runtime_error(absl::StrCat("line ", line, ": ", message)) {}
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum Kind { kLiteral, kName, kList, kDict, kAttr, kItem, kSlice, kCall, kFilter, kTest,
              kUnary, kBinary, kAnd, kOr, kNot, kCond };
  Kind kind = kLiteral;
  int line = 0;
  int depth = 1;             // of the tree below (bounded, so evaluating and freeing it cannot overflow the stack)
  Value literal;             // kLiteral
  std::string name;          // variable, attribute, filter, test or operator
  bool negated = false;      // `is not`, `not in`
  // Operands. kAttr/kItem/kCall/kFilter/kTest: args[0] is the subject. kSlice: subject,
  // start, stop, step (null when left out). kCond: value, condition, else (may be null).
  // kDict: key, value, key, value...
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;  // kCall, kFilter: k=v arguments
};

struct Node {
  enum Kind { kRoot, kText, kOutput, kIf, kFor, kSet, kSetBlock, kMacro, kCallBlock,
              kFilterBlock, kBreak, kContinue, kBlock };
  Kind kind = kRoot;
  int line = 0;
  std::string text;                  // kText; kMacro: the macro's name
  // kOutput, kSet (the value), kFor (the iterable), kCallBlock (the call), kFilterBlock
  // (filters applied to the name kFilterSubject).
  ExprPtr expr;
  // kFor: loop variables; kSet: {name}, {ns, attr} (set_attr) or names to unpack into;
  // kSetBlock: {name}.
  std::vector<std::string> targets;
  bool set_attr = false;             // kSet: targets are {namespace, attribute}
  ExprPtr filter;                    // kFor: the `if` condition, may be null
  std::vector<std::pair<ExprPtr, std::vector<Node>>> branches;  // kIf; null cond: else
  // kRoot, kFor, kSetBlock, kMacro, kCallBlock (the caller's body), kFilterBlock, kBlock.
  std::vector<Node> body;
  std::vector<Node> else_body;       // kFor
  // kMacro, kCallBlock: the parameters and their defaults (null: none).
  std::vector<std::pair<std::string, ExprPtr>> params;
  bool uses_varargs = false, uses_kwargs = false, uses_caller = false;  // kMacro
};

// Dict keys: a string is its own key; an integer is stored as "\x01i" + digits (so a
// string key that itself starts with "\x01i" and digits reads back as that integer).
// EncodeKey throws Error for other types.
std::string EncodeKey(const Value& key, int line);
Value DecodeKey(const std::string& key);
// Builtin global functions as values (so `strftime_now is defined` holds), or nullptr.
const Callable* BuiltinFunction(std::string_view name);

// The variable a {% filter %} block's rendered body is bound to while its filters run.
inline constexpr char kFilterSubject[] = "\x01filter";

// A macro (or a call block's caller) as a value. `node` lives in the Template, which
// outlives every Render; `scope`/`scope_serial` name the scope its body's free names are
// looked up in (when that scope is gone, the template's top level).
struct Callable {
  const Node* node = nullptr;  // null: the builtin function `builtin`
  std::string builtin;
  size_t scope = 0;
  uint64_t scope_serial = 0;
};

}  // namespace folio::frontend::jinja

#endif  // FOLIO_SERVICES_FRONTEND_JINJA_JINJA_AST_H_
