#include "services/frontend/jinja/jinja.h"
#include "services/frontend/jinja/jinja_ast.h"
#include "services/frontend/jinja/jinja_lex.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <stdexcept>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"

namespace folio::frontend::jinja {

namespace {

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  std::shared_ptr<Node> ParseRoot() {
    auto root = std::make_shared<Node>();
    root->body = ParseBody({});  // returns only at the end: unknown tags throw
    return root;
  }

 private:
  const Token& Peek(size_t ahead = 0) const { return t_[std::min(i_ + ahead, t_.size() - 1)]; }
  Token Next() { return t_[i_ < t_.size() - 1 ? i_++ : i_]; }
  bool IsOp(std::string_view op, size_t ahead = 0) const {
    return Peek(ahead).kind == Tok::kOp && Peek(ahead).text == op;
  }
  bool IsName(std::string_view name, size_t ahead = 0) const {
    return Peek(ahead).kind == Tok::kName && Peek(ahead).text == name;
  }
  void ExpectOp(std::string_view op) {
    if (!IsOp(op)) throw Error(Peek().line, absl::StrCat("expected '", std::string(op), "'", Found()));
    ++i_;
  }
  void ExpectName(std::string_view name) {
    if (!IsName(name)) throw Error(Peek().line, absl::StrCat("expected '", std::string(name), "'", Found()));
    ++i_;
  }
  std::string Found() const {
    const Token& t = Peek();
    switch (t.kind) {
      case Tok::kEnd: return " before the end of the template";
      case Tok::kVarEnd: return ", found '}}'";
      case Tok::kBlockEnd: return ", found '%}'";
      default: return absl::StrCat(", found '", t.text, "'");
    }
  }
  std::string Identifier() {
    if (Peek().kind != Tok::kName) throw Error(Peek().line, absl::StrCat("expected a name", Found()));
    return Next().text;
  }
  void ExpectBlockEnd() {
    if (Peek().kind != Tok::kBlockEnd) throw Error(Peek().line, absl::StrCat("expected '%}'", Found()));
    ++i_;
  }

  // Consumes "{% name %}" (a block's end tag, which ParseBody stopped at).
  void ExpectEnd(std::string_view name) {
    Next();
    ExpectName(name);
    ExpectBlockEnd();
  }

  // Nesting of blocks and expressions is bounded, so a hostile template cannot overflow
  // the parser's (or the evaluator's) stack.
  static constexpr int kMaxDepth = 200;
  struct DepthGuard {
    DepthGuard(Parser* p, int line) : p_(p) {
      if (++p_->depth_ > kMaxDepth) throw Error(line, "the template nests too deeply");
    }
    ~DepthGuard() { --p_->depth_; }
    Parser* p_;
  };

  // Parses nodes until a {% tag %} whose name is in `until` (left unconsumed) or the end.
  std::vector<Node> ParseBody(const std::vector<std::string_view>& until) {
    std::vector<Node> body;
    for (;;) {
      const Token& t = Peek();
      if (t.kind == Tok::kEnd) {
        if (!until.empty()) throw Error(t.line, absl::StrCat("missing {% ", std::string(until.back()), " %}"));
        return body;
      }
      if (t.kind == Tok::kText) {
        Node n;
        n.kind = Node::kText;
        n.line = t.line;
        n.text = Next().text;
        body.push_back(std::move(n));
        continue;
      }
      if (t.kind == Tok::kVarBegin) {
        Next();
        Node n;
        n.kind = Node::kOutput;
        n.line = t.line;
        n.expr = ParseExpr();
        if (Peek().kind != Tok::kVarEnd) throw Error(Peek().line, absl::StrCat("expected '}}'", Found()));
        Next();
        body.push_back(std::move(n));
        continue;
      }
      if (t.kind != Tok::kBlockBegin) throw Error(t.line, "unexpected token");
      const Token& tag = Peek(1);
      if (tag.kind != Tok::kName) throw Error(tag.line, "expected a tag name after '{%'");
      if (std::find(until.begin(), until.end(), tag.text) != until.end()) return body;
      Next();
      Next();
      DepthGuard guard(this, tag.line);
      if (tag.text == "if") {
        body.push_back(ParseIf(tag.line));
      } else if (tag.text == "for") {
        body.push_back(ParseFor(tag.line));
      } else if (tag.text == "set") {
        body.push_back(ParseSet(tag.line));
      } else if (tag.text == "macro") {
        body.push_back(ParseMacro(tag.line));
      } else if (tag.text == "call") {
        body.push_back(ParseCallBlock(tag.line));
      } else if (tag.text == "filter") {
        body.push_back(ParseFilterBlock(tag.line));
      } else if (tag.text == "generation") {
        ExpectBlockEnd();
        Node n;
        n.kind = Node::kBlock;
        n.line = tag.line;
        n.body = ParseBody({"endgeneration"});
        ExpectEnd("endgeneration");
        body.push_back(std::move(n));
      } else if (tag.text == "break" || tag.text == "continue") {
        if (loop_depth_ == 0) {
          throw Error(tag.line, absl::StrCat("{% ", tag.text, " %} outside a for loop"));
        }
        ExpectBlockEnd();
        Node n;
        n.kind = tag.text == "break" ? Node::kBreak : Node::kContinue;
        n.line = tag.line;
        body.push_back(std::move(n));
      } else {
        throw Error(tag.line, absl::StrCat("unsupported or unexpected tag {% ", tag.text, " %}"));
      }
    }
  }

  Node ParseIf(int line) {
    Node n;
    n.kind = Node::kIf;
    n.line = line;
    ExprPtr cond = ParseExpr();
    ExpectBlockEnd();
    for (;;) {
      std::vector<Node> body = ParseBody({"elif", "else", "endif"});
      n.branches.emplace_back(std::move(cond), std::move(body));
      Next();  // {%
      const std::string tag = Next().text;
      if (tag == "endif") {
        ExpectBlockEnd();
        return n;
      }
      if (tag == "else") {
        ExpectBlockEnd();
        n.branches.emplace_back(nullptr, ParseBody({"endif"}));
        Next();
        Next();
        ExpectBlockEnd();
        return n;
      }
      cond = ParseExpr();  // elif
      ExpectBlockEnd();
    }
  }

  Node ParseFor(int line) {
    Node n;
    n.kind = Node::kFor;
    n.line = line;
    n.targets.push_back(Identifier());
    while (IsOp(",")) {
      Next();
      n.targets.push_back(Identifier());
    }
    ExpectName("in");
    n.expr = ParseOr();  // not ParseExpr: a trailing `if` filters the loop
    if (IsName("if")) {
      Next();
      n.filter = ParseOr();
    }
    ExpectBlockEnd();
    ++loop_depth_;
    n.body = ParseBody({"else", "endfor"});
    --loop_depth_;
    Next();
    if (Next().text == "else") {
      ExpectBlockEnd();
      n.else_body = ParseBody({"endfor"});
      Next();
      Next();
    }
    ExpectBlockEnd();
    return n;
  }

  Node ParseSet(int line) {
    Node n;
    n.kind = Node::kSet;
    n.line = line;
    n.targets.push_back(Identifier());
    if (IsOp(".")) {
      Next();
      n.targets.push_back(Identifier());
      n.set_attr = true;
    } else {
      while (IsOp(",")) {
        Next();
        n.targets.push_back(Identifier());
      }
    }
    if (Peek().kind == Tok::kBlockEnd && n.targets.size() == 1) {  // {% set x %}...{% endset %}
      Next();
      n.kind = Node::kSetBlock;
      n.body = ParseBody({"endset"});
      ExpectEnd("endset");
      return n;
    }
    ExpectOp("=");
    n.expr = ParseTupleOrExpr();
    ExpectBlockEnd();
    return n;
  }

  // `a, b` (a tuple without parentheses, as {% set %} allows) or one expression.
  ExprPtr ParseTupleOrExpr() {
    ExprPtr first = ParseExpr();
    if (!IsOp(",")) return first;
    ExprPtr list = Make(Expr::kList, first->line);
    list->name = "tuple";
    list->args.push_back(std::move(first));
    while (IsOp(",")) {
      Next();
      list->args.push_back(ParseExpr());
    }
    return Finish(std::move(list));
  }

  // (a, b=default, ...) of a macro or a call block.
  void ParseParams(Node* n) {
    if (!IsOp("(")) return;
    Next();
    while (!IsOp(")")) {
      std::string name = Identifier();
      ExprPtr def;
      if (IsOp("=")) {
        Next();
        def = ParseExpr();
      }
      n->params.emplace_back(std::move(name), std::move(def));
      if (!IsOp(",")) break;
      Next();
    }
    ExpectOp(")");
  }

  // The body of a macro or a caller: break/continue do not reach out of it, and the names
  // it reads say whether it takes varargs, kwargs and a caller.
  void ParseCallableBody(Node* n, std::string_view end) {
    const int saved_loop_depth = loop_depth_;
    loop_depth_ = 0;
    names_.emplace_back();
    n->body = ParseBody({end});
    const std::vector<std::string> names = std::move(names_.back());
    names_.pop_back();
    loop_depth_ = saved_loop_depth;
    for (const std::string& name : names) {
      n->uses_varargs |= name == "varargs";
      n->uses_kwargs |= name == "kwargs";
      n->uses_caller |= name == "caller";
      if (!names_.empty()) names_.back().push_back(name);
    }
    ExpectEnd(end);
  }

  Node ParseMacro(int line) {
    Node n;
    n.kind = Node::kMacro;
    n.line = line;
    n.text = Identifier();
    ParseParams(&n);
    ExpectBlockEnd();
    ParseCallableBody(&n, "endmacro");
    return n;
  }

  Node ParseCallBlock(int line) {
    Node n;
    n.kind = Node::kCallBlock;
    n.line = line;
    n.text = "caller";
    ParseParams(&n);
    n.expr = ParseExpr();
    if (n.expr->kind != Expr::kCall) throw Error(line, "{% call %} needs a macro call");
    ExpectBlockEnd();
    ParseCallableBody(&n, "endcall");
    return n;
  }

  Node ParseFilterBlock(int line) {
    Node n;
    n.kind = Node::kFilterBlock;
    n.line = line;
    ExprPtr e = Make(Expr::kName, line);
    e->name = kFilterSubject;
    for (bool first = true; first || IsOp("|"); first = false) {
      if (!first) Next();
      ExprPtr f = Make(Expr::kFilter, Peek().line);
      f->name = Identifier();
      f->args.push_back(std::move(e));
      if (IsOp("(")) ParseArgs(f.get());
      e = Finish(std::move(f));
    }
    n.expr = std::move(e);
    ExpectBlockEnd();
    n.body = ParseBody({"endfilter"});
    ExpectEnd("endfilter");
    return n;
  }

  ExprPtr Make(Expr::Kind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  ExprPtr ParseExpr() {
    DepthGuard guard(this, Peek().line);
    ExprPtr value = ParseOr();
    if (!IsName("if")) return value;
    const int line = Next().line;
    ExprPtr cond = ParseOr();
    ExprPtr otherwise;
    if (IsName("else")) {
      Next();
      otherwise = ParseExpr();
    }
    ExprPtr e = Make(Expr::kCond, line);
    e->args.push_back(std::move(value));
    e->args.push_back(std::move(cond));
    e->args.push_back(std::move(otherwise));
    return Finish(std::move(e));
  }

  // Sets e's depth from its operands; a tree deeper than kMaxDepth is an error (a long
  // chain like 1+1+1+... or x|f|f|f... parses without recursion but nests as deeply).
  ExprPtr Finish(ExprPtr e) {
    int depth = 0;
    for (const ExprPtr& a : e->args) {
      if (a) depth = std::max(depth, a->depth);
    }
    for (const auto& kv : e->kwargs) depth = std::max(depth, kv.second->depth);
    e->depth = depth + 1;
    if (e->depth > kMaxDepth) throw Error(e->line, "the template nests too deeply");
    return e;
  }

  ExprPtr Binary(Expr::Kind kind, std::string op, ExprPtr l, ExprPtr r, int line) {
    ExprPtr e = Make(kind, line);
    e->name = std::move(op);
    e->args.push_back(std::move(l));
    e->args.push_back(std::move(r));
    return Finish(std::move(e));
  }

  ExprPtr ParseOr() {
    ExprPtr l = ParseAnd();
    while (IsName("or")) {
      const int line = Next().line;
      l = Binary(Expr::kOr, "or", std::move(l), ParseAnd(), line);
    }
    return l;
  }
  ExprPtr ParseAnd() {
    ExprPtr l = ParseNot();
    while (IsName("and")) {
      const int line = Next().line;
      l = Binary(Expr::kAnd, "and", std::move(l), ParseNot(), line);
    }
    return l;
  }
  ExprPtr ParseNot() {
    if (IsName("not")) {
      const int line = Next().line;
      DepthGuard guard(this, line);
      ExprPtr e = Make(Expr::kNot, line);
      e->args.push_back(ParseNot());
      return Finish(std::move(e));
    }
    return ParseCompare();
  }
  ExprPtr ParseCompare() {
    ExprPtr l = ParseConcat();
    for (;;) {
      const int line = Peek().line;
      static constexpr std::string_view kCmp[] = {"==", "!=", "<", "<=", ">", ">="};
      if (Peek().kind == Tok::kOp &&
          std::find(std::begin(kCmp), std::end(kCmp), Peek().text) != std::end(kCmp)) {
        const std::string op = Next().text;
        l = Binary(Expr::kBinary, op, std::move(l), ParseConcat(), line);
      } else if (IsName("in")) {
        Next();
        l = Binary(Expr::kBinary, "in", std::move(l), ParseConcat(), line);
      } else if (IsName("not") && IsName("in", 1)) {
        Next();
        Next();
        l = Binary(Expr::kBinary, "in", std::move(l), ParseConcat(), line);
        l->negated = true;
      } else {
        return l;
      }
    }
  }
  ExprPtr ParseConcat() {
    ExprPtr l = ParseAdd();
    while (IsOp("~")) {
      const int line = Next().line;
      l = Binary(Expr::kBinary, "~", std::move(l), ParseAdd(), line);
    }
    return l;
  }
  ExprPtr ParseAdd() {
    ExprPtr l = ParseMul();
    while (IsOp("+") || IsOp("-")) {
      const Token op = Next();
      l = Binary(Expr::kBinary, op.text, std::move(l), ParseMul(), op.line);
    }
    return l;
  }
  ExprPtr ParseMul() {
    ExprPtr l = ParsePow();
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      const Token op = Next();
      l = Binary(Expr::kBinary, op.text, std::move(l), ParsePow(), op.line);
    }
    return l;
  }
  // As Jinja (not Python): ** takes unary operands, so -2 ** 2 is 4.
  ExprPtr ParsePow() {
    ExprPtr l = ParseUnary(true);
    while (IsOp("**")) {
      const int line = Next().line;
      l = Binary(Expr::kBinary, "**", std::move(l), ParseUnary(true), line);
    }
    return l;
  }
  // As Jinja: filters and tests apply to the unary expression (-x|abs is (-x)|abs, and
  // a + b|trim is a + (b|trim)).
  ExprPtr ParseUnary(bool with_filters) {
    ExprPtr e;
    if (IsOp("-") || IsOp("+")) {
      const Token op = Next();
      DepthGuard guard(this, op.line);
      e = Make(Expr::kUnary, op.line);
      e->name = op.text;
      e->args.push_back(ParseUnary(false));
      e = Finish(std::move(e));
    } else {
      e = ParsePostfix(ParsePrimary());
    }
    if (!with_filters) return e;
    for (;;) {
      if (IsOp("|")) {
        const int line = Next().line;
        ExprPtr f = Make(Expr::kFilter, line);
        f->name = Identifier();
        f->args.push_back(std::move(e));
        if (IsOp("(")) ParseArgs(f.get());
        e = Finish(std::move(f));
      } else if (IsName("is")) {
        const int line = Next().line;
        ExprPtr t = Make(Expr::kTest, line);
        if (IsName("not")) {
          Next();
          t->negated = true;
        }
        t->name = Identifier();
        t->args.push_back(std::move(e));
        if (IsOp("(")) {
          ParseArgs(t.get());
        } else if (StartsTestArgument()) {  // `x is divisibleby 3`, `x is sameas none`
          t->args.push_back(ParsePostfix(ParsePrimary()));
        }
        e = Finish(std::move(t));
      } else {
        return e;
      }
    }
  }
  // Jinja allows one argument without parentheses after a test name.
  bool StartsTestArgument() const {
    const Token& t = Peek();
    if (t.kind == Tok::kString || t.kind == Tok::kInt || t.kind == Tok::kFloat) return true;
    if (t.kind == Tok::kName) {
      static constexpr std::string_view kNotArgs[] = {"else", "or", "and", "is", "in", "not", "if"};
      return std::find(std::begin(kNotArgs), std::end(kNotArgs), t.text) == std::end(kNotArgs);
    }
    return t.kind == Tok::kOp && (t.text == "[" || t.text == "{");
  }

  // (a, b, k=v) appended to e->args / e->kwargs.
  void ParseArgs(Expr* e) {
    ExpectOp("(");
    while (!IsOp(")")) {
      if (Peek().kind == Tok::kName && IsOp("=", 1)) {
        std::string key = Next().text;
        Next();
        e->kwargs.emplace_back(std::move(key), ParseExpr());
      } else {
        e->args.push_back(ParseExpr());
      }
      if (!IsOp(",")) break;
      Next();
    }
    ExpectOp(")");
  }
  ExprPtr ParsePostfix(ExprPtr e) {
    for (;;) {
      const int line = Peek().line;
      if (IsOp(".")) {
        Next();
        ExprPtr a = Make(Expr::kAttr, line);
        a->name = Identifier();
        a->args.push_back(std::move(e));
        e = Finish(std::move(a));
      } else if (IsOp("[")) {
        Next();
        ExprPtr bounds[3];
        int parts = 0;
        bool is_slice = false;
        for (;;) {
          if (!IsOp(":") && !IsOp("]")) bounds[parts] = ParseExpr();
          if (IsOp(":") && parts < 2) {
            Next();
            ++parts;
            is_slice = true;
            continue;
          }
          break;
        }
        ExpectOp("]");
        ExprPtr s = Make(is_slice ? Expr::kSlice : Expr::kItem, line);
        s->args.push_back(std::move(e));
        if (!is_slice && !bounds[0]) throw Error(line, "empty subscript");
        for (int k = 0; k < (is_slice ? 3 : 1); ++k) s->args.push_back(std::move(bounds[k]));
        e = Finish(std::move(s));
      } else if (IsOp("(")) {
        ExprPtr c = Make(Expr::kCall, line);
        c->args.push_back(std::move(e));
        ParseArgs(c.get());
        e = Finish(std::move(c));
      } else {
        return e;
      }
    }
  }
  ExprPtr ParsePrimary() {
    const Token t = Next();
    switch (t.kind) {
      case Tok::kName: {
        ExprPtr e = Make(Expr::kLiteral, t.line);
        if (t.text == "true" || t.text == "True") {
          e->literal = Value(true);
        } else if (t.text == "false" || t.text == "False") {
          e->literal = Value(false);
        } else if (t.text == "none" || t.text == "None") {
          e->literal = Value::MakeNone();
        } else {
          e->kind = Expr::kName;
          e->name = t.text;
          if (!names_.empty()) names_.back().push_back(t.text);
        }
        return e;
      }
      case Tok::kString: {
        std::string s = t.text;
        while (Peek().kind == Tok::kString) s += Next().text;  // adjacent literals join
        ExprPtr e = Make(Expr::kLiteral, t.line);
        e->literal = Value(std::move(s));
        return e;
      }
      case Tok::kInt: {
        ExprPtr e = Make(Expr::kLiteral, t.line);
        int64_t v = 0;
        if (std::from_chars(t.text.data(), t.text.data() + t.text.size(), v).ec != std::errc()) {
          throw Error(t.line, absl::StrCat("integer literal out of range: ", t.text));
        }
        e->literal = Value(v);
        return e;
      }
      case Tok::kFloat: {
        ExprPtr e = Make(Expr::kLiteral, t.line);
        e->literal = Value(std::strtod(t.text.c_str(), nullptr));
        return e;
      }
      case Tok::kOp:
        if (t.text == "(" && IsOp(")")) {  // the empty tuple
          Next();
          ExprPtr list = Make(Expr::kList, t.line);
          list->name = "tuple";
          return list;
        }
        if (t.text == "(") {
          ExprPtr first = ParseExpr();
          if (IsOp(")")) {
            Next();
            return first;
          }
          ExprPtr list = Make(Expr::kList, t.line);
          list->name = "tuple";
          list->args.push_back(std::move(first));
          while (IsOp(",")) {
            Next();
            if (IsOp(")")) break;
            list->args.push_back(ParseExpr());
          }
          ExpectOp(")");
          return Finish(std::move(list));
        }
        if (t.text == "[") {
          ExprPtr list = Make(Expr::kList, t.line);
          while (!IsOp("]")) {
            list->args.push_back(ParseExpr());
            if (!IsOp(",")) break;
            Next();
          }
          ExpectOp("]");
          return Finish(std::move(list));
        }
        if (t.text == "{") {
          ExprPtr dict = Make(Expr::kDict, t.line);
          while (!IsOp("}")) {
            dict->args.push_back(ParseExpr());
            ExpectOp(":");
            dict->args.push_back(ParseExpr());
            if (!IsOp(",")) break;
            Next();
          }
          ExpectOp("}");
          return Finish(std::move(dict));
        }
        break;
      default:
        break;
    }
    --i_;
    throw Error(t.line, absl::StrCat("expected an expression", Found()));
  }

  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;       // open blocks and expressions (DepthGuard)
  int loop_depth_ = 0;  // enclosing for loops in the current macro (or the top level)
  std::vector<std::vector<std::string>> names_;  // names read, per macro being parsed
};

}  // namespace

absl::StatusOr<Template> Template::Parse(std::string_view source) {
  // As Jinja2 without keep_trailing_newline: one newline at the very end is dropped.
  if (absl::EndsWith(absl::string_view(source.data(), source.size()), "\r\n")) {
    source.remove_suffix(2);
  } else if (!source.empty() && source.back() == '\n') {
    source.remove_suffix(1);
  }
  try {
    std::shared_ptr<Node> root = Parser(Lex(source)).ParseRoot();
    return Template(std::move(root));
  } catch (const Error& e) {
    return absl::InvalidArgumentError(absl::StrCat("chat template: ", e.what()));
  }
}

// Render lives in jinja_eval.cc; Value's members in jinja_value.cc.

}  // namespace folio::frontend::jinja
