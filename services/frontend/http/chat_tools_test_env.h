// Test-only: the fixtures of frontend_chat_tools_test (openai_chat_tools_test.cc, prompts
// with tools against Jinja2, and openai_tool_calls_test.cc, a model's tool calls back as
// OpenAI's tool_calls). ChatToolsTest is FrontendTestEnv (a FrontendService over a
// FakeScheduler with the stories260K tokenizer) plus the real OpenAI HTTP server in front
// of it and Python's Jinja2 (testdata/hf_render.py) rendering llama.cpp's templates;
// ToolCallsTest adds a scripted model output and helpers to post and stream chat requests.
// Both skip without the llama.cpp reference or python3-jinja2 (and fail when the reference
// is required). Thread-compatible (one test at a time); each test owns its server.
#ifndef FOLIO_SERVICES_FRONTEND_HTTP_CHAT_TOOLS_TEST_ENV_H_
#define FOLIO_SERVICES_FRONTEND_HTTP_CHAT_TOOLS_TEST_ENV_H_

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/test_models_dir.h"  // ReadFileOrEmpty
#include "nlohmann/json.hpp"
#include "services/frontend/frontend_test_env.h"
#include "services/frontend/http/openai_server.h"
#include "tests/openai_tools.h"

namespace folio::frontend::testing {

// llama.cpp's models/templates/ used by several tests.
inline constexpr char kQwen25[] = "Qwen-Qwen2.5-7B-Instruct.jinja";
inline constexpr char kQwen3[] = "Qwen-Qwen3-0.6B.jinja";
inline constexpr char kHermesToolUse[] = "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja";

// A model's output in Hermes' format: content, then one call.
inline constexpr char kHermesOutput[] =
    "I'll check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
    "\"Paris\"}}\n</tool_call>";

// llama.cpp's models/templates/<name>.
std::string TemplatePath(const std::string& name);

// The tools list the tests give: get_weather(city).
using ::folio::testing::WeatherTools;
// The conversation as a client sends it: the tool call's arguments as JSON text.
nlohmann::ordered_json ToolMessages();
// What transformers' apply_chat_template gets (as vLLM gives it): arguments as the object.
nlohmann::ordered_json AsTemplateSeesIt(nlohmann::ordered_json messages);

class ChatToolsTest : public FrontendTestEnv {
 protected:
  void SetUp() override;
  void TearDown() override;

  // A FrontendService with `options` over the fixture's fake scheduler, and its HTTP server.
  void StartFrontend(FrontendOptions options, OpenAiServerOptions http_options = {});

  // Jinja2's renderings: {template file name: {conversation name: text}}.
  std::map<std::string, std::map<std::string, std::string>> Jinja2(
      const std::vector<std::string>& templates, const nlohmann::ordered_json& conversations);

  // Posts a chat request; the prompt token ids the scheduler got for it.
  std::vector<int32_t> PromptIdsOf(const nlohmann::ordered_json& body);

  // EncodeChatPrompt of `text` with the fixture's tokenizer.
  std::vector<int32_t> Encoded(const std::string& text);

  MetricsRegistry frontend_registry_;
  std::unique_ptr<FrontendService> frontend_;
  std::unique_ptr<OpenAiServer> http_;
};

class ToolCallsTest : public ChatToolsTest {
 protected:
  // The scheduler answers every request with `tokens`, one per event, then STOP.
  void Play(const std::vector<int32_t>& tokens);
  // The text the scheduler's tokens for `text` decode to (SentencePiece adds a space first).
  std::string Said(const std::string& text) { return Decode(Encode(text)); }
  // That text's content before its first call.
  std::string SaidBefore(const std::string& text, const std::string& marker);
  // A chat request about Paris' weather with the weather tool; `extra` overrides fields.
  nlohmann::ordered_json Body(
      const nlohmann::ordered_json& extra = nlohmann::ordered_json::object());
  // POST /v1/chat/completions; the parsed body and the HTTP status.
  std::pair<int, nlohmann::ordered_json> Post(const nlohmann::ordered_json& body);
  // The stream's chunks (without [DONE], which must close it).
  std::vector<nlohmann::ordered_json> Stream(nlohmann::ordered_json body);
};

}  // namespace folio::frontend::testing

#endif  // FOLIO_SERVICES_FRONTEND_HTTP_CHAT_TOOLS_TEST_ENV_H_
