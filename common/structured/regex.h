// Regex -> grammar: compiles a regular expression into GBNF rules (grammar.h) that accept
// exactly the strings the expression matches as a whole (the pattern is anchored at both
// ends, as a structured-output regex is in vLLM and Outlines).
//
// The subset: literals (UTF-8), `.` (any code point but \n), classes `[a-z]`, `[^...]`
// with ranges and the escapes below, groups `( )` and `(?: )` (no capture semantics),
// alternation `|`, quantifiers `* + ? {m} {m,} {m,n}` (a trailing lazy `?` is accepted
// and means the same: the set of strings is what counts), escapes \d \D \w \W \s \S
// \n \r \t \f \v \xHH \uHHHH and escaped punctuation, `^` at the start and `$` at the end
// (ignored: the match is anchored anyway). Refused (InvalidArgument naming it and its
// offset): backreferences, lookaround, `^`/`$` elsewhere, \b, named groups, possessive
// quantifiers, unbalanced parentheses or brackets, bounds above kMaxRepetition. A
// repetition of a group that can match the empty string (`(|a)*`, `(a?)+`) compiles, but the
// grammar it gives is refused as left-recursive by Grammar::Parse (ToGrammar's error).
//
// Free functions; thread-safe.
#ifndef FOLIO_COMMON_STRUCTURED_REGEX_H_
#define FOLIO_COMMON_STRUCTURED_REGEX_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace folio::structured {

// What the matched text is: the string itself, or the content of a JSON string literal
// whose decoded value must match (json_schema.h's "pattern": `"`, `\` and control
// characters then appear in their escaped forms).
enum class RegexContext { kRaw, kJsonStringContent };

// One GBNF expression (no rule) for `pattern` in `context`.
absl::StatusOr<std::string> RegexToExpression(std::string_view pattern, RegexContext context);

// GBNF rules defining `rule_name` (and helpers `<rule_name>-...`) for `pattern`.
absl::StatusOr<std::string> RegexToRules(std::string_view pattern, std::string_view rule_name);

// A whole grammar: RegexToRules(pattern, "root").
absl::StatusOr<std::string> RegexToGrammar(std::string_view pattern);

}  // namespace folio::structured

#endif  // FOLIO_COMMON_STRUCTURED_REGEX_H_
