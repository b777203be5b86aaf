// The lexer of jinja::Template (jinja_lex.cc), used by the parser (jinja.cc). Internal to
// the chat template code; not part of the API.
#ifndef FOLIO_SERVICES_FRONTEND_JINJA_JINJA_LEX_H_
#define FOLIO_SERVICES_FRONTEND_JINJA_JINJA_LEX_H_

#include <string>
#include <string_view>
#include <vector>

namespace folio::frontend::jinja {

// The source becomes text tokens and the tokens inside {{ }} and {% %}, with Jinja2's
// whitespace rules as Hugging Face sets them (trim_blocks, lstrip_blocks, '-' and '+').
enum class Tok { kText, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt,
                 kFloat, kOp, kEnd };

struct Token {
  Tok kind;
  std::string text;  // text, name, string value, operator, or number spelling
  int line;
};

// Throws Error (jinja_ast.h) for an unclosed tag, comment or string, or a character no
// token starts with.
std::vector<Token> Lex(std::string_view source);

}  // namespace folio::frontend::jinja

#endif  // FOLIO_SERVICES_FRONTEND_JINJA_JINJA_LEX_H_
