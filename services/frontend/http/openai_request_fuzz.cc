// libFuzzer target: an OpenAI request body (either endpoint, the first byte picks which)
// parsed and then validated against a small vocabulary must give a request or an
// InvalidArgument, never crash or hang; logit_bias's map form and the penalties included.
// Chat requests with tool_choice "required" or a named function also get the tool-call
// grammar built from their tools (tool_call_grammar.h) in each format, and validated.
// Built only with -DFOLIO_FUZZ=ON (clang); see tools/run_fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "glog/logging.h"
#include "services/frontend/http/openai_json.h"
#include "services/frontend/chat/tool_call_grammar.h"
#include "services/frontend/request_validator.h"
#include "services/frontend/test_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace folio;
  using namespace folio::frontend;
  static const Tokenizer* tokenizer = new Tokenizer(testing::TestTokenizer());
  static const RequestValidator* validator = [] {
    ValidatorOptions options;
    options.max_model_len = 64;
    options.max_n = 4;
    options.max_beam_width = 4;
    options.seed_source = [] { return uint64_t{1}; };
    options.request_id_source = [] { return std::string("fuzz"); };
    return new RequestValidator(*tokenizer, options);
  }();
  if (size == 0) return 0;
  const auto endpoint =
      (data[0] & 1) ? openai::Endpoint::kChatCompletions : openai::Endpoint::kCompletions;
  absl::StatusOr<openai::Request> r = openai::ParseRequest(
      endpoint, std::string_view(reinterpret_cast<const char*>(data) + 1, size - 1));
  if (!r.ok()) {
    CHECK(r.status().code() == absl::StatusCode::kInvalidArgument) << r.status();
    return 0;
  }
  if (endpoint == openai::Endpoint::kCompletions) {
    absl::StatusOr<ValidatedRequest> v = validator->Validate(r->input);
    if (!v.ok()) CHECK(v.status().code() == absl::StatusCode::kInvalidArgument) << v.status();
  }
  using Mode = openai::ToolChoice::Mode;
  if (r->tool_choice.mode == Mode::kRequired || r->tool_choice.mode == Mode::kFunction) {
    for (ToolCallFormat f : {ToolCallFormat::kHermes, ToolCallFormat::kLlama3Json,
                             ToolCallFormat::kMistral}) {
      absl::StatusOr<std::string> g = ToolCallGrammar(
          f, r->tools, r->tool_choice.mode == Mode::kFunction ? r->tool_choice.function : "",
          r->parallel_tool_calls);
      if (!g.ok()) {
        CHECK(g.status().code() == absl::StatusCode::kInvalidArgument) << g.status();
        continue;
      }
      GenerateInput in = r->input;
      if (in.prompt.empty() && in.prompt_token_ids.empty()) in.prompt = "hi";
      in.structured.kind = structured::StructuredOutput::Kind::kGrammar;
      in.structured.text = *g;
      absl::StatusOr<ValidatedRequest> v = validator->Validate(in);
      if (!v.ok()) CHECK(v.status().code() == absl::StatusCode::kInvalidArgument) << v.status();
    }
  } else if (r->tool_choice.mode == Mode::kAuto && r->has_tools) {
    // auto: the lazy grammar and its triggers, through the validator as the server sends them.
    for (ToolCallFormat f : {ToolCallFormat::kHermes, ToolCallFormat::kLlama3Json,
                             ToolCallFormat::kMistral}) {
      absl::StatusOr<LazyToolCallGrammar> g =
          AutoToolCallGrammar(f, r->tools, r->parallel_tool_calls, {});
      if (!g.ok()) {
        CHECK(g.status().code() == absl::StatusCode::kInvalidArgument) << g.status();
        continue;
      }
      CHECK(!g->triggers.empty());
      GenerateInput in = r->input;
      if (in.prompt.empty() && in.prompt_token_ids.empty()) in.prompt = "hi";
      in.structured.kind = structured::StructuredOutput::Kind::kGrammar;
      in.structured.text = g->grammar;
      in.grammar_triggers = g->triggers;
      absl::StatusOr<ValidatedRequest> v = validator->Validate(in);
      if (!v.ok()) CHECK(v.status().code() == absl::StatusCode::kInvalidArgument) << v.status();
    }
  }
  return 0;
}
