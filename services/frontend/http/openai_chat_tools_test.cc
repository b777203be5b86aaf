// /v1/chat/completions with tools, assistant tool_calls and tool results, through the real
// HTTP server and FrontendService in front of a FakeScheduler: the prompt token ids the
// scheduler receives must be exactly EncodeChatPrompt of what Python's Jinja2 renders
// (testdata/hf_render.py, Hugging Face's environment) for the same conversation with the
// same template from llama.cpp's models/templates/. Covers --chat_template (which replaces
// the model's named templates too), the GGUF tool_use named template chosen when tools are
// given, and chat_template_kwargs reaching the template; then the round trip (a model's
// call back as tool_calls, sent back with its result) and the official openai npm client.
// The model's tool-call output as OpenAI's tool_calls: openai_tool_calls_test.cc. The
// fixtures: chat_tools_test_env.h.
#include <cctype>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "services/frontend/chat/chat_template.h"
#include "services/frontend/http/chat_tools_test_env.h"
#include "services/frontend/chat/tool_call_parser.h"
#include "tests/openai_client.h"
#include "tests/reference/llama_ref.h"

namespace folio::frontend::testing {
namespace {

using ordered_json = nlohmann::ordered_json;
namespace ipb = folio::internal::v1;

TEST_F(ChatToolsTest, ChatTemplateFlagRendersToolsAndToolResultsAsJinja2) {
  // A named tool_use template in the model, which --chat_template replaces.
  (*info_.mutable_tokenizer()->mutable_named_chat_templates())["tool_use"] = "{{ 'model' }}";
  FrontendOptions options;
  options.chat_template = ReadFileOrEmpty(TemplatePath(kQwen25));
  ASSERT_FALSE(options.chat_template.empty());
  ASSERT_NO_FATAL_FAILURE(StartFrontend(options));

  ordered_json conversations = ordered_json::array();
  conversations.push_back(
      {{"name", "tools"},
       {"context",
        {{"messages", AsTemplateSeesIt(ToolMessages())}, {"tools", WeatherTools()},
         {"add_generation_prompt", true}}}});
  auto jinja2 = Jinja2({kQwen25}, conversations);
  const std::string want = jinja2[kQwen25]["tools"];
  // What makes this test about tools: the definitions, the call and its result are there.
  ASSERT_NE(want.find("\"get_weather\""), std::string::npos) << want;
  ASSERT_NE(want.find("<tool_call>"), std::string::npos) << want;
  ASSERT_NE(want.find("<tool_response>\n{\"temp_c\": 21}"), std::string::npos) << want;

  const std::vector<int32_t> got =
      PromptIdsOf({{"messages", ToolMessages()}, {"tools", WeatherTools()}, {"max_tokens", 4}});
  EXPECT_EQ(got, Encoded(want)) << "server's prompt: " << Decode(got) << "\njinja2: " << want;
}

TEST_F(ChatToolsTest, ToolUseNamedTemplateWithToolsAndKwargsOtherwise) {
  // The GGUF's default template is Qwen3's; its tokenizer.chat_template.tool_use Hermes'.
  ipb::TokenizerSpec* spec = info_.mutable_tokenizer();
  spec->set_chat_template(ReadFileOrEmpty(TemplatePath(kQwen3)));
  (*spec->mutable_named_chat_templates())["tool_use"] =
      ReadFileOrEmpty(TemplatePath(kHermesToolUse));
  ASSERT_NO_FATAL_FAILURE(StartFrontend(FrontendOptions{}));

  const ordered_json plain = ordered_json::parse(R"([
    {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}])");
  const ordered_json tools_conv = {
      {"name", "tools"},
      {"context",
       {{"messages", AsTemplateSeesIt(ToolMessages())}, {"tools", WeatherTools()},
        {"add_generation_prompt", true}}}};
  const ordered_json kwargs_conv = {{"name", "no_thinking"},
                                    {"context",
                                     {{"messages", plain}, {"add_generation_prompt", true},
                                      {"enable_thinking", false}}}};
  auto jinja2 = Jinja2({kHermesToolUse}, ordered_json::array({tools_conv}));
  auto qwen3 = Jinja2({kQwen3}, ordered_json::array({kwargs_conv}));
  jinja2[kQwen3] = qwen3[kQwen3];

  const std::string tools_want = jinja2[kHermesToolUse]["tools"];
  ASSERT_NE(tools_want.find("<tools>"), std::string::npos) << tools_want;
  EXPECT_EQ(PromptIdsOf({{"messages", ToolMessages()}, {"tools", WeatherTools()}, {"max_tokens", 4}}),
            Encoded(tools_want));

  // Without tools: the default (Qwen3), with chat_template_kwargs as template variables.
  const std::string kwargs_want = jinja2[kQwen3]["no_thinking"];
  ASSERT_NE(kwargs_want.find("<think>\n\n</think>"), std::string::npos) << kwargs_want;
  EXPECT_EQ(PromptIdsOf({{"messages", plain},
                         {"chat_template_kwargs", {{"enable_thinking", false}}},
                         {"max_tokens", 4}}),
            Encoded(kwargs_want));
  // An empty tools list is no tools: the default template.
  EXPECT_EQ(PromptIdsOf({{"messages", plain},
                         {"tools", ordered_json::array()},
                         {"chat_template_kwargs", {{"enable_thinking", false}}},
                         {"max_tokens", 4}}),
            Encoded(kwargs_want));
}

TEST_F(ChatToolsTest, ToolsOnCompletionsAreRefused) {
  ASSERT_NO_FATAL_FAILURE(StartFrontend(FrontendOptions{}));
  httplib::Client client("127.0.0.1", http_->port());
  const ordered_json body = {{"prompt", "Hi"}, {"tools", WeatherTools()}};
  httplib::Result r = client.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_NE(r->body.find("tools are only taken by /v1/chat/completions"), std::string::npos)
      << r->body;
}

TEST(ToolCallFormatOfTemplateTest, LlamaCppTemplatesByFamily) {
  FOLIO_SKIP_WITHOUT_REFERENCE();
  const std::pair<const char*, std::optional<ToolCallFormat>> cases[] = {
      {kHermesToolUse, ToolCallFormat::kHermes},
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", ToolCallFormat::kHermes},
      {kQwen25, ToolCallFormat::kHermes},
      {kQwen3, ToolCallFormat::kHermes},
      {"meta-llama-Llama-3.1-8B-Instruct.jinja", ToolCallFormat::kLlama3Json},
      {"meta-llama-Llama-3.2-3B-Instruct.jinja", ToolCallFormat::kLlama3Json},
      {"meta-llama-Llama-3.3-70B-Instruct.jinja", ToolCallFormat::kLlama3Json},
      {"mistralai-Mistral-Nemo-Instruct-2407.jinja", ToolCallFormat::kMistral},
      {"mistralai-Ministral-3-14B-Reasoning-2512.jinja", ToolCallFormat::kMistral},
      {"google-gemma-2-2b-it.jinja", std::nullopt},
      {"microsoft-Phi-3.5-mini-instruct.jinja", std::nullopt},
  };
  for (const auto& [name, want] : cases) {
    const std::string source = ReadFileOrEmpty(TemplatePath(name));
    ASSERT_FALSE(source.empty()) << name;
    EXPECT_EQ(ToolCallFormatOfTemplate(source), want) << name;
  }
}

// The round trip of llama.cpp's tool-use templates: the model's call comes back as OpenAI's
// tool_calls; the client sends it back with the tool's result (as OpenAI clients do, the
// call's id in tool_call_id) and the next prompt is exactly what Jinja2 renders for that
// conversation.
struct RoundTrip {
  const char* template_file;
  const char* output;  // the model's call in the template's format
};

class ToolRoundTripTest : public ToolCallsTest, public ::testing::WithParamInterface<RoundTrip> {};

TEST_P(ToolRoundTripTest, ToolResultRendersAsJinja2Renders) {
  FrontendOptions options;
  options.chat_template = ReadFileOrEmpty(TemplatePath(GetParam().template_file));
  ASSERT_FALSE(options.chat_template.empty());
  ASSERT_NO_FATAL_FAILURE(StartFrontend(options));
  Play(Encode(GetParam().output));
  const ordered_json user = {{"role", "user"}, {"content", "Weather in Paris?"}};
  auto [status, r] = Post({{"messages", {user}}, {"tools", WeatherTools()}, {"max_tokens", 200}});
  ASSERT_EQ(status, 200) << r.dump();
  const ordered_json& message = r["choices"][0]["message"];
  ASSERT_EQ(message["tool_calls"].size(), 1u) << r.dump();
  const ordered_json& call = message["tool_calls"][0];
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(ordered_json::parse(call["function"]["arguments"].get<std::string>()),
            ordered_json({{"city", "Paris"}}));

  ordered_json messages = ordered_json::array(
      {user,
       {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", message["tool_calls"]}},
       {{"role", "tool"}, {"tool_call_id", call["id"]}, {"name", "get_weather"},
        {"content", "{\"temp_c\": 21}"}}});
  ordered_json conversations = ordered_json::array(
      {{{"name", "result"},
        {"context",
         {{"messages", AsTemplateSeesIt(messages)}, {"tools", WeatherTools()},
          {"add_generation_prompt", true}}}}});
  auto jinja2 = Jinja2({GetParam().template_file}, conversations);
  const std::string want = jinja2[GetParam().template_file]["result"];
  ASSERT_NE(want.find("temp_c"), std::string::npos) << want;
  ASSERT_NE(want.find("get_weather"), std::string::npos) << want;
  const std::vector<int32_t> got =
      PromptIdsOf({{"messages", messages}, {"tools", WeatherTools()}, {"max_tokens", 4}});
  EXPECT_EQ(got, Encoded(want)) << "server's prompt: " << Decode(got) << "\njinja2: " << want;
}

INSTANTIATE_TEST_SUITE_P(
    LlamaCppTemplates, ToolRoundTripTest,
    ::testing::Values(
        RoundTrip{kHermesToolUse,
                  "<tool_call>\n{\"arguments\": {\"city\": \"Paris\"}, \"name\": "
                  "\"get_weather\"}\n</tool_call>"},
        RoundTrip{kQwen25,
                  "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                  "\"Paris\"}}\n</tool_call>"},
        RoundTrip{"meta-llama-Llama-3.1-8B-Instruct.jinja",
                  "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}"},
        RoundTrip{"mistralai-Mistral-Nemo-Instruct-2407.jinja",
                  "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                  "\"Paris\"}, \"id\": \"a1b2c3d4e\"}]"}),
    [](const ::testing::TestParamInfo<RoundTrip>& info) {
      std::string name = info.param.template_file;
      name = name.substr(0, name.find(".jinja"));
      for (char& c : name) {
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
      }
      return name;
    });

// The official openai npm client (tests/openai/check.mjs) against the server: tool calls
// not streamed, streamed and joined by the client's own stream helper, and sent back with
// their result.
class OfficialClientToolsTest : public ToolCallsTest {
 protected:
  // `chat_template` empty: the model has none, so the frontend's default template (which
  // teaches Hermes calls) renders the tools and the tool-call parser is chosen for it.
  void RunToolLoop(const std::string& chat_template) {
    const std::string dir = FOLIO_OPENAI_NODE_DIR;
    std::string skip;
    if (!::folio::testing::InstallOpenAiClient(dir, FOLIO_OPENAI_CHECK_DIR, &skip)) {
      GTEST_SKIP() << skip;
    }
    FrontendOptions options;
    options.chat_template = chat_template;
    ASSERT_NO_FATAL_FAILURE(StartFrontend(options));
    Play(Encode(kHermesOutput));
    const ordered_json messages = {{{"role", "user"}, {"content", "Weather in Paris?"}}};
    // What the server answers, as the client should see it.
    const std::string expected =
        ordered_json({{"content", SaidBefore(kHermesOutput, "\n<tool_call>")},
                      {"finish_reason", "tool_calls"},
                      {"calls", {{{"name", "get_weather"}, {"arguments", "{\"city\": \"Paris\"}"}}}}})
            .dump();
    ordered_json spec = {{"baseURL", absl::StrCat("http://127.0.0.1:", http_->port(), "/v1")},
                         {"apiKey", "none"},
                         {"model", "stories260K"},
                         {"cases", ordered_json::array()}};
    for (const char* kind : {"chat_tools", "chat_tools_stream", "chat_tools_round_trip"}) {
      spec["cases"].push_back({{"name", kind}, {"kind", kind}, {"messages", messages},
                               {"tools", WeatherTools()}, {"max_tokens", 200},
                               {"tool_result", "{\"temp_c\": 21}"}, {"expected", expected}});
    }
    ::folio::testing::CommandResult run =
        ::folio::testing::RunOpenAiClient(dir, spec.dump(), "openai_tools");
    EXPECT_EQ(run.exit_code, 0) << run.output;
    for (const char* kind : {"OK   chat_tools:", "OK   chat_tools_stream:", "OK   chat_tools_round_trip:"}) {
      EXPECT_NE(run.output.find(kind), std::string::npos) << run.output;
    }
    // The round trip's second request carried the client's tool result.
    const auto calls = fake_->calls();
    ASSERT_FALSE(calls.empty());
    const auto& last = calls.back().request.prompt_token_ids();
    EXPECT_NE(Decode(std::vector<int32_t>(last.begin(), last.end())).find("temp_c"), std::string::npos);
  }
};

TEST_F(OfficialClientToolsTest, OnAQwenTemplate) {
  RunToolLoop(ReadFileOrEmpty(TemplatePath(kQwen25)));
}

// The model has no chat template (the default model's case): no flags needed either.
TEST_F(OfficialClientToolsTest, OnTheDefaultTemplate) { RunToolLoop(""); }

}  // namespace
}  // namespace folio::frontend::testing
