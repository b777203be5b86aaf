// /v1/chat/completions with tools, assistant tool_calls and tool results, through the real
// HTTP server and FrontendService in front of a FakeScheduler: the prompt token ids the
// scheduler receives must be exactly EncodeChatPrompt of what Python's Jinja2 renders
// (testdata/hf_render.py, Hugging Face's environment) for the same conversation with the
// same template from llama.cpp's models/templates/. Covers --chat_template (which replaces
// the model's named templates too), the GGUF tool_use named template chosen when tools are
// given, and chat_template_kwargs reaching the template.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "grpcpp/create_channel.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "services/frontend/frontend_test_env.h"
#include "services/frontend/http/chat_template.h"
#include "services/frontend/http/openai_server.h"
#include "tests/reference/llama_ref.h"

namespace folio::frontend::testing {
namespace {

using ordered_json = nlohmann::ordered_json;
namespace ipb = folio::internal::v1;

constexpr char kQwen25[] = "Qwen-Qwen2.5-7B-Instruct.jinja";
constexpr char kQwen3[] = "Qwen-Qwen3-0.6B.jinja";
constexpr char kHermesToolUse[] = "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string TemplatePath(const std::string& name) {
  return reference::LlamaCppSourceDir() + "/models/templates/" + name;
}

const ordered_json& Tools() {
  static const auto* tools = new ordered_json(ordered_json::parse(R"([
    {"type": "function", "function": {"name": "get_weather",
      "description": "The weather in a city",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                     "required": ["city"]}}}])"));
  return *tools;
}

// The conversation as a client sends it: the tool call's arguments as JSON text.
ordered_json ToolMessages() {
  return ordered_json::parse(R"([
    {"role": "system", "content": "You are a weather bot."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
      "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp_c\": 21}"}])");
}

// What transformers' apply_chat_template gets (as vLLM gives it): arguments as the object.
ordered_json AsTemplateSeesIt(ordered_json messages) {
  for (ordered_json& m : messages) {
    if (!m.contains("tool_calls")) continue;
    for (ordered_json& call : m["tool_calls"]) {
      call["function"]["arguments"] =
          ordered_json::parse(call["function"]["arguments"].get<std::string>());
    }
  }
  return messages;
}

class ChatToolsTest : public FrontendTestEnv {
 protected:
  void SetUp() override {
    FrontendTestEnv::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    if (!reference::ReferenceAvailable().ok()) {
      if (reference::ReferenceRequired()) FAIL() << reference::ReferenceAvailable();
      GTEST_SKIP() << reference::ReferenceAvailable();
    }
    if (std::system("/usr/bin/python3 -c 'import jinja2' 2>/dev/null") != 0) {
      const char* why = "/usr/bin/python3 with jinja2 is missing (Debian: python3-jinja2)";
      if (reference::ReferenceRequired()) FAIL() << why;
      GTEST_SKIP() << why;
    }
    // Room for a tool-use system prompt in the character-level stories260K vocabulary.
    info_.set_max_model_len(4096);
    info_.mutable_model()->set_max_seq_len(4096);
  }
  void TearDown() override {
    if (http_) http_->Stop();
    http_.reset();
    frontend_.reset();
    FrontendTestEnv::TearDown();
  }

  // A FrontendService with `options` over the fixture's fake scheduler, and its HTTP server.
  void StartFrontend(FrontendOptions options) {
    frontend_ = std::make_unique<FrontendService>(
        std::move(options), MakeSchedulerChannel(fake_->address()), &frontend_registry_);
    ASSERT_TRUE(frontend_->SetClusterInfo(info_).ok());
    OpenAiServerOptions http_options;
    http_options.port = 0;
    auto server = OpenAiServer::Start(
        http_options, [this] { return frontend_->model(); },
        grpc::CreateChannel(fake_->address(), grpc::InsecureChannelCredentials()),
        frontend_->metrics());
    ASSERT_TRUE(server.ok()) << server.status();
    http_ = *std::move(server);
  }

  // Jinja2's renderings: {template file name: {conversation name: text}}.
  std::map<std::string, std::map<std::string, std::string>> Jinja2(
      const std::vector<std::string>& templates, const ordered_json& conversations) {
    const std::string bos(*tokenizer_->TokenToPiece(tokenizer_->bos_id()));
    const std::string eos(*tokenizer_->TokenToPiece(tokenizer_->eos_id()));
    // Unique per process and call: ctest runs the tests of this file in parallel.
    static int calls = 0;
    const std::string path = absl::StrCat(::testing::TempDir(), "/chat_tools_", getpid(), "_",
                                          ++calls, ".json");
    std::ofstream(path) << ordered_json{{"bos_token", bos}, {"eos_token", eos},
                                        {"conversations", conversations}}
                               .dump();
    std::string command = absl::StrCat("/usr/bin/python3 ", FOLIO_CHAT_TEMPLATES_DIR,
                                       "/hf_render.py --conversations ", path,
                                       " --date 2026-07-26");
    for (const std::string& t : templates) absl::StrAppend(&command, " '", TemplatePath(t), "'");
    std::string out;
    FILE* p = popen(command.c_str(), "r");
    EXPECT_NE(p, nullptr);
    if (p == nullptr) return {};
    char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
    EXPECT_EQ(pclose(p), 0) << command;
    std::remove(path.c_str());
    std::map<std::string, std::map<std::string, std::string>> result;
    const ordered_json parsed = ordered_json::parse(out, nullptr, /*allow_exceptions=*/false);
    EXPECT_TRUE(parsed.is_object()) << out;
    if (!parsed.is_object()) return result;
    for (const auto& [name, convs] : parsed.items()) {
      for (const auto& [conv, r] : convs.items()) {
        EXPECT_TRUE(r.at("ok").get<bool>()) << name << " " << conv << ": " << r.dump();
        if (r.at("ok").get<bool>()) result[name][conv] = r.at("text").get<std::string>();
      }
    }
    return result;
  }

  // Posts a chat request; the prompt token ids the scheduler got for it.
  std::vector<int32_t> PromptIdsOf(const ordered_json& body) {
    Script script;
    ipb::ScheduleEvent e;
    e.set_index(0);
    for (int32_t id : Encode("ok")) e.add_tokens()->set_token_id(id);
    e.set_finish_reason(ipb::FINISH_REASON_STOP);
    e.set_num_prompt_tokens(2);
    script.events = {e};
    fake_->SetScript(script);
    const size_t before = fake_->calls().size();
    httplib::Client client("127.0.0.1", http_->port());
    httplib::Result r = client.Post("/v1/chat/completions", body.dump(), "application/json");
    EXPECT_TRUE(r);
    if (!r) return {};
    EXPECT_EQ(r->status, 200) << r->body;
    const auto calls = fake_->calls();
    EXPECT_EQ(calls.size(), before + 1);
    if (calls.size() != before + 1) return {};
    const auto& ids = calls.back().request.prompt_token_ids();
    return std::vector<int32_t>(ids.begin(), ids.end());
  }

  std::vector<int32_t> Encoded(const std::string& text) {
    absl::StatusOr<std::vector<int32_t>> ids = EncodeChatPrompt(*tokenizer_, text);
    EXPECT_TRUE(ids.ok()) << ids.status();
    return ids.ok() ? *ids : std::vector<int32_t>{};
  }

  MetricsRegistry frontend_registry_;
  std::unique_ptr<FrontendService> frontend_;
  std::unique_ptr<OpenAiServer> http_;
};

TEST_F(ChatToolsTest, ChatTemplateFlagRendersToolsAndToolResultsAsJinja2) {
  // A named tool_use template in the model, which --chat_template replaces.
  (*info_.mutable_tokenizer()->mutable_named_chat_templates())["tool_use"] = "{{ 'model' }}";
  FrontendOptions options;
  options.chat_template = ReadFile(TemplatePath(kQwen25));
  ASSERT_FALSE(options.chat_template.empty());
  ASSERT_NO_FATAL_FAILURE(StartFrontend(options));

  ordered_json conversations = ordered_json::array();
  conversations.push_back(
      {{"name", "tools"},
       {"context",
        {{"messages", AsTemplateSeesIt(ToolMessages())}, {"tools", Tools()},
         {"add_generation_prompt", true}}}});
  auto jinja2 = Jinja2({kQwen25}, conversations);
  const std::string want = jinja2[kQwen25]["tools"];
  // What makes this test about tools: the definitions, the call and its result are there.
  ASSERT_NE(want.find("\"get_weather\""), std::string::npos) << want;
  ASSERT_NE(want.find("<tool_call>"), std::string::npos) << want;
  ASSERT_NE(want.find("<tool_response>\n{\"temp_c\": 21}"), std::string::npos) << want;

  const std::vector<int32_t> got =
      PromptIdsOf({{"messages", ToolMessages()}, {"tools", Tools()}, {"max_tokens", 4}});
  EXPECT_EQ(got, Encoded(want)) << "server's prompt: " << Decode(got) << "\njinja2: " << want;
}

TEST_F(ChatToolsTest, ToolUseNamedTemplateWithToolsAndKwargsOtherwise) {
  // The GGUF's default template is Qwen3's; its tokenizer.chat_template.tool_use Hermes'.
  ipb::TokenizerSpec* spec = info_.mutable_tokenizer();
  spec->set_chat_template(ReadFile(TemplatePath(kQwen3)));
  (*spec->mutable_named_chat_templates())["tool_use"] = ReadFile(TemplatePath(kHermesToolUse));
  ASSERT_NO_FATAL_FAILURE(StartFrontend(FrontendOptions{}));

  const ordered_json plain = ordered_json::parse(R"([
    {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}])");
  const ordered_json tools_conv = {
      {"name", "tools"},
      {"context",
       {{"messages", AsTemplateSeesIt(ToolMessages())}, {"tools", Tools()},
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
  EXPECT_EQ(PromptIdsOf({{"messages", ToolMessages()}, {"tools", Tools()}, {"max_tokens", 4}}),
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
  const ordered_json body = {{"prompt", "Hi"}, {"tools", Tools()}};
  httplib::Result r = client.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_NE(r->body.find("tools are only taken by /v1/chat/completions"), std::string::npos)
      << r->body;
}

}  // namespace
}  // namespace folio::frontend::testing
