// A request's structured-output constraint as the public APIs give it, and its one
// compilation to grammar text (grammar.h), which is all the scheduler sees.
//
// HTTP `response_format` {"type": "json_object"} / {"type": "json_schema", "json_schema":
// {"name", "schema", "strict"}}, the `regex` and `grammar` extensions, and gRPC
// `SamplingOptions.structured` all become one StructuredOutput; the frontend validates it
// (ToGrammar's error is the 400 / INVALID_ARGUMENT) and sends the grammar text on.
//
// Plain values and a free function; thread-safe.
#ifndef FOLIO_COMMON_STRUCTURED_STRUCTURED_OUTPUT_H_
#define FOLIO_COMMON_STRUCTURED_STRUCTURED_OUTPUT_H_

#include <string>

#include "absl/status/statusor.h"

namespace folio::structured {

struct StructuredOutput {
  enum class Kind { kNone, kJsonObject, kJsonSchema, kRegex, kGrammar };
  Kind kind = Kind::kNone;
  // kJsonSchema: the schema as JSON text; kRegex: the pattern; kGrammar: GBNF text.
  std::string text;
};

// The grammar text for `spec` ("" for kNone), checked by parsing it: InvalidArgument
// naming the problem (the JSON Schema keyword, the regex offset, the grammar line).
absl::StatusOr<std::string> ToGrammar(const StructuredOutput& spec);

}  // namespace folio::structured

#endif  // FOLIO_COMMON_STRUCTURED_STRUCTURED_OUTPUT_H_
