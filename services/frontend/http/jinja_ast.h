// The parsed form of a jinja::Template, shared by the parser (jinja.cc) and the evaluator
// (jinja_eval.cc). Internal to the chat template code; not part of the API.
#ifndef FOLIO_SERVICES_FRONTEND_HTTP_JINJA_AST_H_
#define FOLIO_SERVICES_FRONTEND_HTTP_JINJA_AST_H_

#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "services/frontend/http/jinja.h"

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
  enum Kind { kRoot, kText, kOutput, kIf, kFor, kSet };
  Kind kind = kRoot;
  int line = 0;
  std::string text;                  // kText
  ExprPtr expr;                      // kOutput, kSet (the value), kFor (the iterable)
  std::vector<std::string> targets;  // kFor: loop variables; kSet: {name} or {ns, attr}
  ExprPtr filter;                    // kFor: the `if` condition, may be null
  std::vector<std::pair<ExprPtr, std::vector<Node>>> branches;  // kIf; null cond: else
  std::vector<Node> body;            // kRoot, kFor
  std::vector<Node> else_body;       // kFor
};

}  // namespace folio::frontend::jinja

#endif  // FOLIO_SERVICES_FRONTEND_HTTP_JINJA_AST_H_
