// ToolCallGrammar: the structured-output grammar (common/structured/grammar.h text) that
// makes the model write a tool call, for tool_choice "required" (any of the tools) or a
// named function (that one): the call's wrapper in the template family's format with the
// function's name as a literal and its "parameters" JSON Schema as the arguments
// (structured::JsonSchemaToRules, which refuses what it does not support by name):
//
//   hermes       <tool_call>\n{"name": "f", "arguments": ARGS}\n</tool_call>  (\n between calls)
//   llama3_json  {"name": "f", "parameters": ARGS}                            ("; " between calls)
//   mistral      [TOOL_CALLS][{"name": "f", "arguments": ARGS}, ...]
//
// With parallel calls allowed, up to kMaxParallelToolCalls calls; otherwise exactly one.
// The output still goes through ToolCallParser, which reads what the grammar lets through.
//
// AutoToolCallGrammar is tool_choice "auto"'s: the same grammar made lazy
// (common/structured/grammar_trigger.h): free text until the format's opening marker,
// then the calls. Triggers: hermes <tool_call>, mistral [TOOL_CALLS], llama3_json
// <|python_tag|> (its grammar may open with it) and {"name" opening the output; a marker
// that is a control token of the model's vocabulary also triggers as that token.
//
// Free functions; thread-safe.
#ifndef FOLIO_SERVICES_FRONTEND_CHAT_TOOL_CALL_GRAMMAR_H_
#define FOLIO_SERVICES_FRONTEND_CHAT_TOOL_CALL_GRAMMAR_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/structured/grammar_trigger.h"
#include "nlohmann/json.hpp"
#include "services/frontend/chat/tool_call_parser.h"

namespace folio {
class Tokenizer;
}

namespace folio::frontend {

inline constexpr int kMaxParallelToolCalls = 16;

// `tools` is the request's tools array (OpenAI's shape); `function` the named function, or
// empty for any. InvalidArgument naming the tool ("tools[1].function.parameters: ...") for a
// schema the grammar compiler does not take, or when `function` is not among the tools.
absl::StatusOr<std::string> ToolCallGrammar(ToolCallFormat format, const nlohmann::json& tools,
                                            std::string_view function, bool parallel);

// The format's markers that are one control token of `tokenizer`'s vocabulary, with its
// id (<|python_tag|>, [TOOL_CALLS] in their models): the decoder must render them for the
// parser, and a lazy grammar triggers on them.
std::vector<std::pair<std::string, int32_t>> MarkerControlTokens(const Tokenizer& tokenizer,
                                                                 ToolCallFormat format);

struct LazyToolCallGrammar {
  std::string grammar;
  std::vector<structured::GrammarTrigger> triggers;
};
// `control_markers`: the format's markers that are one control token of the model's
// vocabulary, with that token's id. The errors of ToolCallGrammar.
absl::StatusOr<LazyToolCallGrammar> AutoToolCallGrammar(
    ToolCallFormat format, const nlohmann::json& tools, bool parallel,
    const std::vector<std::pair<std::string, int32_t>>& control_markers);

}  // namespace folio::frontend

#endif  // FOLIO_SERVICES_FRONTEND_CHAT_TOOL_CALL_GRAMMAR_H_
