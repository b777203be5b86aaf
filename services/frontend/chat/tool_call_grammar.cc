#include "services/frontend/chat/tool_call_grammar.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/structured/grammar.h"
#include "common/structured/json_schema.h"
#include "common/tokenizer/tokenizer.h"

namespace folio::frontend {

using json = nlohmann::json;

namespace {

// `root_prefix`: grammar text put before the calls (a lazy Llama 3 grammar's optional
// <|python_tag|>).
absl::StatusOr<std::string> CallGrammar(ToolCallFormat format, const json& tools,
                                        std::string_view function, bool parallel,
                                        std::string_view root_prefix) {
  using structured::GbnfLiteral;
  if (!tools.is_array()) return absl::InvalidArgumentError("tools must be an array");
  // The call's text around its arguments.
  const char* args_key = format == ToolCallFormat::kLlama3Json ? "parameters" : "arguments";
  const std::string open = format == ToolCallFormat::kHermes ? "<tool_call>\n" : "";
  const std::string close = format == ToolCallFormat::kHermes ? "}\n</tool_call>" : "}";
  std::vector<std::string> alternatives;
  std::string rules;
  for (size_t i = 0; i < tools.size(); ++i) {
    const json& tool = tools[i];
    const std::string field = absl::StrCat("tools[", i, "].function");
    const json* f = tool.is_object() && tool.contains("function") ? &tool["function"] : nullptr;
    if (f == nullptr || !f->is_object() || !f->contains("name") || !(*f)["name"].is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(field, ".name must be a string"));
    }
    const std::string name = (*f)["name"].get<std::string>();
    if (!function.empty() && name != function) continue;
    const json schema = f->contains("parameters") && !(*f)["parameters"].is_null()
                            ? (*f)["parameters"]
                            : json{{"type", "object"}};
    const std::string rule = absl::StrCat("tool", i, "-args");
    absl::StatusOr<std::string> args = structured::JsonSchemaToRules(schema.dump(), rule, {});
    if (!args.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".parameters: ", args.status().message()));
    }
    absl::StrAppend(&rules, *args, "\n");
    const std::string head =
        absl::StrCat(open, "{\"name\": ", json(name).dump(), ", \"", args_key, "\": ");
    alternatives.push_back(absl::StrCat(GbnfLiteral(head), " ", rule, " ", GbnfLiteral(close)));
  }
  if (alternatives.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tool_choice names the function '", std::string(function).substr(0, 128),
        "', which is not in tools"));
  }
  const std::string separator = format == ToolCallFormat::kHermes       ? "\n"
                                : format == ToolCallFormat::kLlama3Json ? "; "
                                                                        : ", ";
  std::string more = parallel ? absl::StrCat(" (", GbnfLiteral(separator), " call){0,",
                                             kMaxParallelToolCalls - 1, "}")
                              : "";
  std::string root = absl::StrCat("call", more);
  if (format == ToolCallFormat::kMistral) {
    root = absl::StrCat(GbnfLiteral("[TOOL_CALLS]["), " ", root, " ", GbnfLiteral("]"));
  }
  return absl::StrCat("root ::= ", std::string(root_prefix), root, "\ncall ::= ",
                      absl::StrJoin(alternatives, " | "), "\n", rules);
}

constexpr char kPythonTag[] = "<|python_tag|>";

}  // namespace

std::vector<std::pair<std::string, int32_t>> MarkerControlTokens(const Tokenizer& tokenizer,
                                                                 ToolCallFormat format) {
  std::vector<std::pair<std::string, int32_t>> out;
  for (const std::string& marker : ToolCallMarkers(format)) {
    absl::StatusOr<std::vector<int32_t>> encoded =
        tokenizer.Encode(marker, AddBos::kNo, ParseSpecial::kYes);
    if (!encoded.ok() || encoded->size() != 1) continue;
    absl::StatusOr<TokenSurface> surface = tokenizer.Surface(encoded->front());
    if (surface.ok() && surface->kind == TokenSurface::Kind::kControl) {
      out.emplace_back(marker, encoded->front());
    }
  }
  return out;
}

absl::StatusOr<std::string> ToolCallGrammar(ToolCallFormat format, const json& tools,
                                            std::string_view function, bool parallel) {
  return CallGrammar(format, tools, function, parallel, "");
}

absl::StatusOr<LazyToolCallGrammar> AutoToolCallGrammar(
    ToolCallFormat format, const json& tools, bool parallel,
    const std::vector<std::pair<std::string, int32_t>>& control_markers) {
  using structured::GbnfLiteral;
  using structured::GrammarTrigger;
  const bool llama3 = format == ToolCallFormat::kLlama3Json;
  absl::StatusOr<std::string> grammar =
      CallGrammar(format, tools, "", parallel,
                  llama3 ? absl::StrCat("(", GbnfLiteral(kPythonTag), ")? ") : "");
  if (!grammar.ok()) return grammar.status();
  LazyToolCallGrammar out;
  out.grammar = *std::move(grammar);
  const std::string marker = format == ToolCallFormat::kHermes    ? "<tool_call>"
                             : format == ToolCallFormat::kMistral ? "[TOOL_CALLS]"
                                                                  : kPythonTag;
  out.triggers.push_back(GrammarTrigger{.text = marker});
  for (const auto& [text, id] : control_markers) {
    if (text == marker) out.triggers.push_back(GrammarTrigger{.text = marker, .token_id = id});
  }
  if (llama3) out.triggers.push_back(GrammarTrigger{.text = "{\"name\"", .at_start = true});
  return out;
}

}  // namespace folio::frontend
