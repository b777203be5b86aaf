// JSON Schema -> grammar: compiles a schema (the subset below) into GBNF rules (grammar.h)
// that accept exactly the JSON texts the schema validates, written in a bounded
// whitespace style (below).
//
// The subset (anything else is refused, InvalidArgument naming the keyword and its path,
// e.g. `unsupported JSON Schema keyword "patternProperties" at /properties/a`):
//   type            "object" "array" "string" "integer" "number" "boolean" "null", or a
//                   list of them
//   object          properties, required, additionalProperties (false, true or a schema;
//                   default true in json_object / non-strict, as JSON Schema says).
//                   Properties are emitted in the order the schema lists them; optional
//                   ones may be left out, required ones may not.
//   array           items (a schema), minItems, maxItems, prefixItems
//   string          enum, const, minLength, maxLength, pattern (regex.h's subset,
//                   anchored: the whole string content must match), format "date",
//                   "date-time", "time", "uuid", "email" is not supported
//   integer/number  minimum, maximum, exclusiveMinimum, exclusiveMaximum (integers: any
//                   bounds; numbers: bounds only as 0, i.e. sign constraints)
//   any             enum, const (any JSON value), anyOf, oneOf (compiled as anyOf: the
//                   grammar does not enforce "exactly one"), allOf with one member, $ref
//                   to "#", "#/$defs/..." or "#/definitions/...", $defs, definitions
//   ignored         annotations: title, description, $schema, $id, $comment, examples,
//                   default, deprecated, readOnly, writeOnly, "strict"
//
// Whitespace policy: between JSON tokens the grammar allows either nothing, one space, or
// one newline followed by at most kMaxIndent spaces (so pretty-printed output with
// indentation up to 10 levels of 2 spaces parses), never tabs or runs of newlines, and no
// whitespace before the first or after the last byte of the value. A small model cannot
// loop forever on whitespace: every whitespace run is at most kMaxIndent + 1 bytes.
// JsonSchemaOptions::whitespace = kNone allows no whitespace at all.
//
// Free functions; thread-safe.
#ifndef FOLIO_COMMON_STRUCTURED_JSON_SCHEMA_H_
#define FOLIO_COMMON_STRUCTURED_JSON_SCHEMA_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace folio::structured {

inline constexpr int32_t kMaxIndent = 20;

struct JsonSchemaOptions {
  enum class Whitespace { kBounded, kNone };
  Whitespace whitespace = Whitespace::kBounded;
};

// Compiles `schema_json` (a JSON Schema document as text) into GBNF rules that define
// `rule_name` (a valid GBNF name) and helper rules all named `<rule_name>-...`, so the
// result can be embedded in a larger grammar next to other schemas' rules:
//
//   std::string g = "root ::= \"<tool_call>\" " + call + "\"</tool_call>\"\n" +
//                   *JsonSchemaToRules(schema, "call", {});
//
// No `root` rule is defined (unless rule_name is "root"). InvalidArgument for text that
// is not JSON, a schema outside the subset (naming the keyword), an unsatisfiable one
// (minItems > maxItems, an empty enum, a $ref that does not resolve).
absl::StatusOr<std::string> JsonSchemaToRules(std::string_view schema_json,
                                              std::string_view rule_name,
                                              const JsonSchemaOptions& options);

// A whole grammar: JsonSchemaToRules(schema_json, "root", options).
absl::StatusOr<std::string> JsonSchemaToGrammar(std::string_view schema_json,
                                                const JsonSchemaOptions& options);

// OpenAI's {"type": "json_object"}: any JSON object (the bounded whitespace above,
// nesting unbounded), as a whole grammar.
std::string JsonObjectGrammar();

}  // namespace folio::structured

#endif  // FOLIO_COMMON_STRUCTURED_JSON_SCHEMA_H_
