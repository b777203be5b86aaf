// Grammar: the text format every structured-output constraint is written in (JSON schemas
// and regexes are compiled to it), and its parsed, byte-level form.
//
// The format is GBNF (llama.cpp's grammar format), this subset of it:
//
//   grammar     ::= rule+                     one rule per `name ::= ...`; a rule may span
//                                             lines (the next `name ::=` starts a new one)
//   rule        ::= name "::=" alternatives
//   alternatives::= sequence ("|" sequence)*  an empty sequence matches the empty string
//   sequence    ::= item*
//   item        ::= primary ("*" | "+" | "?" | "{" m "}" | "{" m ",}" | "{" m "," n "}")?
//   primary     ::= "\"" chars "\""           a literal string (UTF-8)
//                 | "[" "^"? ranges "]"       a character class over code points: `[a-z_]`,
//                                             `[^"\\]` (any code point but those)
//                 | "."                       any code point
//                 | name                      a rule, defined anywhere in the text
//                 | "(" alternatives ")"
//   name        ::= [a-zA-Z0-9_-]+
//   comment     ::= "#" to the end of the line
//
// Escapes in literals and classes: \n \r \t \\ \" \' \[ \] \- \^ \/ \xHH \uHHHH
// \UHHHHHHHH. The start rule is `root`. Every rule that is referenced must be defined and
// every defined rule is kept (unreferenced ones are harmless). Left recursion (a rule that
// can reach itself without consuming a byte, `a ::= a "x"`) is refused: the matcher is a
// top-down pushdown automaton. Write `a ::= "x"+` or `a ::= "x" a?` instead.
// Repetition bounds are at most kMaxRepetition; `x{0,3}` is expanded as nested optionals
// (x (x x?)?)? so that matching stays unambiguous.
//
// Matching is over bytes: characters and classes are lowered to their UTF-8 encodings
// (a class with non-ASCII code points becomes a small alternation of byte-range
// sequences), so a grammar only ever accepts valid UTF-8, and a token's bytes can be fed
// one at a time whatever the vocabulary kind (SentencePiece or byte-level BPE).
//
// Plain values; a Grammar is immutable after Parse and thread-compatible.
#ifndef FOLIO_COMMON_STRUCTURED_GRAMMAR_H_
#define FOLIO_COMMON_STRUCTURED_GRAMMAR_H_

#include <bitset>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace folio::structured {

// Limits a grammar must stay within (InvalidArgument naming the limit otherwise): they
// bound the compile time and the memory one request can make the server spend.
inline constexpr int32_t kMaxGrammarBytes = 1 << 20;   // grammar text
inline constexpr int32_t kMaxRepetition = 10000;       // m and n of {m,n}
inline constexpr int32_t kMaxGrammarElements = 1 << 20;  // after lowering to bytes

// One element of a sequence: a set of bytes to match one byte from, or a rule.
struct GrammarElement {
  enum class Kind : uint8_t { kBytes, kRule };
  Kind kind = Kind::kBytes;
  std::bitset<256> bytes;  // kBytes: the bytes this element accepts (never empty)
  int32_t rule = -1;       // kRule: index into Grammar::rules()
};

// A rule: a choice of sequences. Rules the parser generates for groups, repetitions and
// UTF-8 classes are named "<parent>#<n>" (a name no user rule can have).
struct GrammarRule {
  std::string name;
  std::vector<std::vector<GrammarElement>> alternatives;
};

class Grammar {
 public:
  // Parses `text` (the format above). InvalidArgument with "line L column C: ..." for a
  // syntax error, naming the rule for an undefined or left-recursive rule, naming the
  // limit for an oversized grammar; a grammar without `root` is refused too.
  static absl::StatusOr<Grammar> Parse(std::string_view text);

  const std::vector<GrammarRule>& rules() const { return rules_; }
  int32_t root() const { return root_; }
  // Total elements over all rules (what the matcher's position table holds).
  int32_t num_elements() const { return num_elements_; }

  // The byte-level rules as text (byte sets as [\xHH-\xHH]), for tests and debugging.
  std::string DebugString() const;

 private:
  friend class GrammarParser;
  std::vector<GrammarRule> rules_;
  int32_t root_ = -1;
  int32_t num_elements_ = 0;
};

// Escapes `text` as a GBNF literal, quotes included: for callers that build grammar text
// around literal strings (tool names, tags).
std::string GbnfLiteral(std::string_view text);

// `grammar` with every use and the definition of rule `from` named `to` instead (names in
// literals, classes and comments are left alone), for callers that embed one grammar in
// another (the answer after a reasoning block: its `root` becomes a rule of the wrapper).
// InvalidArgument if `to` is not a name or `grammar` already uses it.
absl::StatusOr<std::string> RenameRule(std::string_view grammar, std::string_view from,
                                       std::string_view to);

}  // namespace folio::structured

#endif  // FOLIO_COMMON_STRUCTURED_GRAMMAR_H_
