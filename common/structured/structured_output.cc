#include "common/structured/structured_output.h"

#include "absl/status/status.h"
#include "common/structured/grammar.h"
#include "common/structured/json_schema.h"
#include "common/structured/regex.h"

namespace folio::structured {

absl::StatusOr<std::string> ToGrammar(const StructuredOutput& spec) {
  absl::StatusOr<std::string> text;
  switch (spec.kind) {
    case StructuredOutput::Kind::kNone:
      return std::string();
    case StructuredOutput::Kind::kJsonObject:
      text = JsonObjectGrammar();
      break;
    case StructuredOutput::Kind::kJsonSchema:
      text = JsonSchemaToGrammar(spec.text, JsonSchemaOptions{});
      break;
    case StructuredOutput::Kind::kRegex:
      text = RegexToGrammar(spec.text);
      break;
    case StructuredOutput::Kind::kGrammar:
      text = spec.text;
      break;
  }
  if (!text.ok()) return text.status();
  // The compilers' output must parse too; a failure there names the generated rule.
  absl::StatusOr<Grammar> parsed = Grammar::Parse(*text);
  if (!parsed.ok()) return parsed.status();
  return text;
}

}  // namespace folio::structured
