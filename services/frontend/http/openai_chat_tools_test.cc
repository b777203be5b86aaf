// /v1/chat/completions with tools, assistant tool_calls and tool results, through the real
// HTTP server and FrontendService in front of a FakeScheduler: the prompt token ids the
// scheduler receives must be exactly EncodeChatPrompt of what Python's Jinja2 renders
// (testdata/hf_render.py, Hugging Face's environment) for the same conversation with the
// same template from llama.cpp's models/templates/. Covers --chat_template (which replaces
// the model's named templates too), the GGUF tool_use named template chosen when tools are
// given, and chat_template_kwargs reaching the template.
//
// Then the other way: the scheduler plays a model's tool-call output and the client gets
// OpenAI's tool_calls, streamed and not, for each template family's format (the Llama 3
// one on llama.cpp's llama-bpe vocabulary, whose <|python_tag|> is a control token), with
// tool_choice and parallel_tool_calls validated and honoured.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/structured/grammar_matcher.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "grpcpp/create_channel.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "services/frontend/frontend_test_env.h"
#include "services/frontend/http/chat_template.h"
#include "services/frontend/http/openai_server.h"
#include "services/worker/model/gguf_vocab.h"
#include "services/worker/service.h"
#include "tests/reference/llama_ref.h"
#include "tests/service_process.h"

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
  void StartFrontend(FrontendOptions options, OpenAiServerOptions http_options = {}) {
    frontend_ = std::make_unique<FrontendService>(
        std::move(options), MakeSchedulerChannel(fake_->address()), &frontend_registry_);
    ASSERT_TRUE(frontend_->SetClusterInfo(info_).ok());
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

// --- Tool calls in the output ---

constexpr char kHermesOutput[] =
    "I'll check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
    "\"Paris\"}}\n</tool_call>";
constexpr char kTwoCalls[] =
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
    "</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
    "\"Rome\"}}\n</tool_call>";

class ToolCallsTest : public ChatToolsTest {
 protected:
  // The scheduler answers every request with `tokens`, one per event, then STOP.
  void Play(const std::vector<int32_t>& tokens) {
    fake_->SetScript(TokensScript(tokens, ipb::FINISH_REASON_STOP, 7));
  }
  // The text the scheduler's tokens for `text` decode to (SentencePiece adds a space first).
  std::string Said(const std::string& text) { return Decode(Encode(text)); }
  // That text's content before its first call.
  std::string SaidBefore(const std::string& text, const std::string& marker) {
    const std::string said = Said(text);
    return said.substr(0, said.find(marker));
  }
  ordered_json Body(const ordered_json& extra = ordered_json::object()) {
    ordered_json body = {{"messages", {{{"role", "user"}, {"content", "Weather in Paris?"}}}},
                         {"tools", Tools()},
                         {"max_tokens", 200}};
    for (const auto& [k, v] : extra.items()) body[k] = v;
    return body;
  }
  // POST /v1/chat/completions; the parsed body and the HTTP status.
  std::pair<int, ordered_json> Post(const ordered_json& body) {
    httplib::Client client("127.0.0.1", http_->port());
    httplib::Result r = client.Post("/v1/chat/completions", body.dump(), "application/json");
    EXPECT_TRUE(r);
    if (!r) return {0, nullptr};
    return {r->status, ordered_json::parse(r->body, nullptr, false)};
  }
  // The stream's chunks (without [DONE], which must close it).
  std::vector<ordered_json> Stream(ordered_json body) {
    body["stream"] = true;
    httplib::Client client("127.0.0.1", http_->port());
    httplib::Result r = client.Post("/v1/chat/completions", body.dump(), "application/json");
    EXPECT_TRUE(r);
    if (!r) return {};
    EXPECT_EQ(r->status, 200) << r->body;
    std::vector<ordered_json> out;
    bool done = false;
    for (absl::string_view event : absl::StrSplit(r->body, "\n\n", absl::SkipEmpty())) {
      EXPECT_TRUE(absl::StartsWith(event, "data: ")) << event;
      const std::string data(event.substr(6));
      if (data == "[DONE]") {
        done = true;
        continue;
      }
      out.push_back(ordered_json::parse(data));
    }
    EXPECT_TRUE(done);
    return out;
  }
};

// A stream's chunks joined as OpenAI's client libraries join them, checking OpenAI's shape
// on the way: a call's first delta has index, id, type "function" and function.name (and
// arguments ""); later ones only index and function.arguments.
struct Joined {
  std::string content;
  ordered_json calls = ordered_json::array();  // [{"id", "name", "arguments"}]
  std::string finish_reason;
};
Joined Join(const std::vector<ordered_json>& chunks) {
  Joined j;
  for (const ordered_json& chunk : chunks) {
    EXPECT_EQ(chunk["object"], "chat.completion.chunk");
    for (const ordered_json& choice : chunk["choices"]) {
      const ordered_json& delta = choice["delta"];
      if (delta.contains("content") && delta["content"].is_string()) {
        j.content += delta["content"].get<std::string>();
      }
      if (choice["finish_reason"].is_string()) j.finish_reason = choice["finish_reason"];
      if (!delta.contains("tool_calls")) continue;
      for (const ordered_json& c : delta["tool_calls"]) {
        const size_t index = c["index"].get<size_t>();
        if (c.contains("id")) {
          EXPECT_EQ(index, j.calls.size()) << c.dump();
          EXPECT_EQ(c["type"], "function") << c.dump();
          EXPECT_TRUE(c["function"]["name"].is_string()) << c.dump();
          j.calls.push_back({{"id", c["id"]},
                             {"name", c["function"]["name"]},
                             {"arguments", c["function"].value("arguments", "")}});
        } else {
          EXPECT_FALSE(c.contains("type")) << c.dump();
          EXPECT_FALSE(c["function"].contains("name")) << c.dump();
          EXPECT_LT(index, j.calls.size()) << c.dump();
          if (index >= j.calls.size()) continue;
          j.calls[index]["arguments"] =
              j.calls[index]["arguments"].get<std::string>() +
              c["function"]["arguments"].get<std::string>();
        }
      }
    }
  }
  return j;
}

TEST_F(ToolCallsTest, HermesFormatBecomesToolCallsStreamedAndNot) {
  FrontendOptions options;
  options.chat_template = ReadFile(TemplatePath(kQwen25));
  ASSERT_NO_FATAL_FAILURE(StartFrontend(options));
  Play(Encode(kHermesOutput));

  auto [status, r] = Post(Body());
  ASSERT_EQ(status, 200) << r.dump();
  const ordered_json& choice = r["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_EQ(choice["message"]["content"], SaidBefore(kHermesOutput, "\n<tool_call>"));
  EXPECT_EQ(SaidBefore(kHermesOutput, "\n<tool_call>"), " I'll check.");
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << r.dump();
  const ordered_json& call = choice["message"]["tool_calls"][0];
  EXPECT_THAT(call["id"].get<std::string>(), ::testing::StartsWith("call_"));
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(ordered_json::parse(call["function"]["arguments"].get<std::string>()),
            ordered_json({{"city", "Paris"}}));

  const std::vector<ordered_json> chunks = Stream(Body());
  const Joined j = Join(chunks);
  EXPECT_EQ(j.content, " I'll check.");
  EXPECT_EQ(j.finish_reason, "tool_calls");
  ASSERT_EQ(j.calls.size(), 1u);
  EXPECT_EQ(j.calls[0]["name"], "get_weather");
  EXPECT_EQ(j.calls[0]["arguments"], call["function"]["arguments"]);
  // The arguments arrive in pieces as the tokens do, not all at the end.
  int argument_chunks = 0;
  for (const ordered_json& c : chunks) {
    for (const ordered_json& choice : c["choices"]) {
      if (choice["delta"].contains("tool_calls") &&
          !choice["delta"]["tool_calls"][0].contains("id")) {
        ++argument_chunks;
      }
    }
  }
  EXPECT_GT(argument_chunks, 5);
}

TEST_F(ToolCallsTest, ToolChoiceNoneNoToolsAndParallelToolCalls) {
  FrontendOptions options;
  options.chat_template = ReadFile(TemplatePath(kQwen25));
  ASSERT_NO_FATAL_FAILURE(StartFrontend(options));
  Play(Encode(kHermesOutput));
  // tool_choice none: no parsing, the text as the model wrote it.
  auto [s1, none] = Post(Body({{"tool_choice", "none"}}));
  ASSERT_EQ(s1, 200);
  EXPECT_EQ(none["choices"][0]["message"]["content"], Said(kHermesOutput));
  EXPECT_FALSE(none["choices"][0]["message"].contains("tool_calls"));
  EXPECT_EQ(none["choices"][0]["finish_reason"], "stop");
  // No tools: no parsing either.
  ordered_json no_tools = Body();
  no_tools.erase("tools");
  auto [s2, plain] = Post(no_tools);
  ASSERT_EQ(s2, 200);
  EXPECT_EQ(plain["choices"][0]["message"]["content"], Said(kHermesOutput));

  Play(Encode(kTwoCalls));
  auto [s3, two] = Post(Body({{"tool_choice", "auto"}}));
  ASSERT_EQ(s3, 200);
  ASSERT_EQ(two["choices"][0]["message"]["tool_calls"].size(), 2u) << two.dump();
  EXPECT_TRUE(two["choices"][0]["message"]["content"].is_null());
  EXPECT_NE(two["choices"][0]["message"]["tool_calls"][0]["id"],
            two["choices"][0]["message"]["tool_calls"][1]["id"]);
  auto [s4, one] = Post(Body({{"parallel_tool_calls", false}}));
  ASSERT_EQ(s4, 200);
  ASSERT_EQ(one["choices"][0]["message"]["tool_calls"].size(), 1u) << one.dump();
  EXPECT_EQ(Join(Stream(Body({{"parallel_tool_calls", false}}))).calls.size(), 1u);
}

TEST_F(ToolCallsTest, BadToolChoiceIs400NamingIt) {
  ASSERT_NO_FATAL_FAILURE(StartFrontend(FrontendOptions{}));
  Play(Encode("ok"));
  struct Case {
    ordered_json extra;
    bool drop_tools;
    const char* message;
    const char* param;
  };
  const Case cases[] = {
      {{{"tool_choice", "sometimes"}}, false,
       "tool_choice must be \"auto\", \"none\", \"required\" or", "tool_choice"},
      {{{"tool_choice", {{"type", "function"}}}}, false, "tool_choice must be", "tool_choice"},
      {{{"tool_choice", 3}}, false, "tool_choice must be", "tool_choice"},
      {{{"tool_choice", {{"type", "function"}, {"function", {{"name", "get_time"}}}}}}, false,
       "tool_choice names the function 'get_time', which is not in tools", "tool_choice"},
      {{{"tool_choice", "required"}}, true, "tool_choice \"required\" needs tools", "tool_choice"},
      {{{"parallel_tool_calls", "yes"}}, false, "parallel_tool_calls must be true or false",
       "parallel_tool_calls"},
  };
  for (const Case& c : cases) {
    ordered_json body = Body(c.extra);
    if (c.drop_tools) body.erase("tools");
    auto [status, r] = Post(body);
    EXPECT_EQ(status, 400) << c.extra.dump() << " " << r.dump();
    EXPECT_THAT(r["error"]["message"].get<std::string>(), ::testing::HasSubstr(c.message))
        << c.extra.dump();
    EXPECT_EQ(r["error"]["param"], c.param) << r.dump();
  }
  httplib::Client client("127.0.0.1", http_->port());
  httplib::Result r = client.Post(
      "/v1/completions", ordered_json({{"prompt", "x"}, {"tool_choice", "auto"}}).dump(),
      "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_THAT(r->body, ::testing::HasSubstr("tool_choice is only taken by /v1/chat/completions"));
}

TEST_F(ToolCallsTest, RequiredAndNamedFunctionSendTheCallsGrammar) {
  FrontendOptions options;
  options.chat_template = ReadFile(TemplatePath(kQwen25));
  ASSERT_NO_FATAL_FAILURE(StartFrontend(options));
  Play(Encode(kHermesOutput));
  for (const ordered_json& choice :
       {ordered_json("required"),
        ordered_json({{"type", "function"}, {"function", {{"name", "get_weather"}}}})}) {
    auto [status, r] = Post(Body({{"tool_choice", choice}}));
    ASSERT_EQ(status, 200) << r.dump();
    EXPECT_EQ(r["choices"][0]["finish_reason"], "tool_calls");
    // The scheduler got the grammar of Hermes' call with get_weather's parameters.
    const std::string grammar = fake_->calls().back().request.grammar();
    EXPECT_NE(grammar.find("<tool_call>"), std::string::npos) << grammar;
    EXPECT_NE(grammar.find("get_weather"), std::string::npos) << grammar;
    EXPECT_NE(grammar.find("city"), std::string::npos) << grammar;
  }
  // auto sends the same calls grammar, lazy: triggered by <tool_call> in the output (text:
  // no control token here), and from the trigger on it accepts what a call looks like.
  ASSERT_EQ(Post(Body()).first, 200);
  const ipb::ScheduleRequest lazy = fake_->calls().back().request;
  ASSERT_EQ(lazy.grammar_triggers_size(), 1) << lazy.DebugString();
  EXPECT_EQ(lazy.grammar_triggers(0).text(), "<tool_call>");
  EXPECT_FALSE(lazy.grammar_triggers(0).has_token_id());
  EXPECT_FALSE(lazy.grammar_triggers(0).at_start());
  {
    auto compiled = structured::CompiledGrammar::Create(
        lazy.grammar(), std::make_shared<structured::TokenVocabulary>(
                            std::vector<std::string>{"x"}, std::vector<int32_t>{}));
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    const std::string text = kTwoCalls;
    structured::GrammarMatcher m(*compiled);
    EXPECT_TRUE(m.AcceptBytes(text)) << lazy.grammar();
    EXPECT_TRUE(m.IsComplete());
    structured::GrammarMatcher wrong_name(*compiled);
    EXPECT_FALSE(wrong_name.AcceptBytes("<tool_call>\n{\"name\": \"get_time\""));
  }
  // parallel_tool_calls false: one call, then the grammar is done.
  ASSERT_EQ(Post(Body({{"parallel_tool_calls", false}})).first, 200);
  EXPECT_EQ(fake_->calls().back().request.grammar_triggers_size(), 1);
  EXPECT_NE(fake_->calls().back().request.grammar(), lazy.grammar());
  // none: neither grammar nor triggers; auto with response_format: response_format's.
  ASSERT_EQ(Post(Body({{"tool_choice", "none"}})).first, 200);
  EXPECT_EQ(fake_->calls().back().request.grammar(), "");
  EXPECT_EQ(fake_->calls().back().request.grammar_triggers_size(), 0);
  ASSERT_EQ(Post(Body({{"response_format", {{"type", "json_object"}}}})).first, 200);
  EXPECT_NE(fake_->calls().back().request.grammar(), "");
  EXPECT_EQ(fake_->calls().back().request.grammar_triggers_size(), 0);
  // Both a tool choice and a response format constrain the output: one is enough.
  auto [s1, both] = Post(Body({{"tool_choice", "required"},
                               {"response_format", {{"type", "json_object"}}}}));
  EXPECT_EQ(s1, 400);
  EXPECT_EQ(both["error"]["param"], "tool_choice") << both.dump();
  // A parameters schema the grammar compiler does not take is named.
  ordered_json tools = Tools();
  tools[0]["function"]["parameters"]["patternProperties"] = ordered_json::object();
  for (const char* mode : {"required", "auto"}) {
    auto [s2, bad] = Post(Body({{"tool_choice", mode}, {"tools", tools}}));
    EXPECT_EQ(s2, 400) << mode;
    EXPECT_THAT(bad["error"]["message"].get<std::string>(),
                ::testing::StartsWith("tools[0].function.parameters: "));
    EXPECT_EQ(bad["error"]["param"], "tools") << bad.dump();
  }
}

TEST_F(ToolCallsTest, RequiredNeedsATemplateWithAFormat) {
  ASSERT_NO_FATAL_FAILURE(StartFrontend(FrontendOptions{}));  // the default template
  Play(Encode("ok"));
  auto [status, r] = Post(Body({{"tool_choice", "required"}}));
  EXPECT_EQ(status, 400) << r.dump();
  EXPECT_THAT(r["error"]["message"].get<std::string>(),
              ::testing::HasSubstr("--tool_call_parser"));
}

constexpr char kMistralOutput[] =
    "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, "
    "\"id\": \"abcdefghi\"}]";

TEST_F(ToolCallsTest, TemplateWithoutAFormatLeavesTheOutputContent) {
  ASSERT_NO_FATAL_FAILURE(StartFrontend(FrontendOptions{}));  // the default template
  Play(Encode(kMistralOutput));
  auto [status, r] = Post(Body());
  ASSERT_EQ(status, 200);
  EXPECT_EQ(r["choices"][0]["message"]["content"], Said(kMistralOutput));
  EXPECT_FALSE(r["choices"][0]["message"].contains("tool_calls"));
}

TEST_F(ToolCallsTest, ToolCallParserOptionForcesAFormat) {
  OpenAiServerOptions http_options;
  http_options.tool_call_parser = ToolCallFormat::kMistral;
  ASSERT_NO_FATAL_FAILURE(StartFrontend(FrontendOptions{}, http_options));
  Play(Encode(kMistralOutput));
  auto [status, r] = Post(Body());
  ASSERT_EQ(status, 200) << r.dump();
  ASSERT_EQ(r["choices"][0]["message"]["tool_calls"].size(), 1u) << r.dump();
  const ordered_json& call = r["choices"][0]["message"]["tool_calls"][0];
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(call["id"].get<std::string>().size(), 9u);  // Mistral's templates want 9
}

// Llama 3.1 on llama.cpp's llama-bpe vocabulary: <|python_tag|> is a control token, which
// decodes to nothing, except here, where the parser must see it.
TEST_F(ToolCallsTest, Llama3PythonTagControlTokenIsSeenByTheParser) {
  absl::StatusOr<Vocab> vocab =
      worker::LoadGgufVocab(reference::LlamaCppSourceDir() + "/models/ggml-vocab-llama-bpe.gguf");
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  // That file is Llama 3.0's vocabulary; Llama 3.1's is the same with two reserved control
  // tokens named.
  ASSERT_EQ(vocab->pieces[128008], "<|reserved_special_token_4|>");
  ASSERT_EQ(vocab->pieces[128010], "<|reserved_special_token_5|>");
  vocab->pieces[128008] = "<|eom_id|>";
  vocab->pieces[128010] = "<|python_tag|>";
  absl::StatusOr<Tokenizer> tok = Tokenizer::Create(*vocab);
  ASSERT_TRUE(tok.ok()) << tok.status();
  *info_.mutable_tokenizer() = worker::TokenizerSpecFromVocab(*vocab);
  info_.mutable_model()->set_vocab_size(vocab->size());
  FrontendOptions options;
  options.chat_template = ReadFile(TemplatePath("meta-llama-Llama-3.1-8B-Instruct.jinja"));
  ASSERT_NO_FATAL_FAILURE(StartFrontend(options));

  const std::string text =
      "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}<|eom_id|>";
  absl::StatusOr<std::vector<int32_t>> ids = tok->Encode(text, AddBos::kNo, ParseSpecial::kYes);
  ASSERT_TRUE(ids.ok()) << ids.status();
  absl::StatusOr<TokenSurface> tag = tok->Surface(ids->front());
  ASSERT_TRUE(tag.ok());
  ASSERT_EQ(tag->kind, TokenSurface::Kind::kControl) << "<|python_tag|> is not one control token";
  fake_->SetScript(TokensScript(*ids, ipb::FINISH_REASON_STOP, 7));

  auto [status, r] = Post(Body());
  ASSERT_EQ(status, 200) << r.dump();
  ASSERT_EQ(r["choices"][0]["message"]["tool_calls"].size(), 1u) << r.dump();
  EXPECT_EQ(r["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
            "{\"city\": \"Paris\"}");
  // auto's lazy grammar starts at <|python_tag|>, as text or as its control token, or at a
  // {"name" opening the output.
  const ipb::ScheduleRequest lazy = fake_->calls().back().request;
  ASSERT_EQ(lazy.grammar_triggers_size(), 3) << lazy.DebugString();
  EXPECT_EQ(lazy.grammar_triggers(0).text(), "<|python_tag|>");
  EXPECT_FALSE(lazy.grammar_triggers(0).has_token_id());
  EXPECT_EQ(lazy.grammar_triggers(1).text(), "<|python_tag|>");
  EXPECT_EQ(lazy.grammar_triggers(1).token_id(), 128010);
  EXPECT_EQ(lazy.grammar_triggers(2).text(), "{\"name\"");
  EXPECT_TRUE(lazy.grammar_triggers(2).at_start());
  {
    auto compiled = structured::CompiledGrammar::Create(
        lazy.grammar(), std::make_shared<structured::TokenVocabulary>(
                            std::vector<std::string>{"x"}, std::vector<int32_t>{}));
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    for (const char* from : {"<|python_tag|>", ""}) {
      structured::GrammarMatcher m(*compiled);
      EXPECT_TRUE(m.AcceptBytes(absl::StrCat(
          from, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}")))
          << from << "\n" << lazy.grammar();
      EXPECT_TRUE(m.IsComplete());
    }
  }
  EXPECT_EQ(r["choices"][0]["finish_reason"], "tool_calls");
  const Joined j = Join(Stream(Body()));
  ASSERT_EQ(j.calls.size(), 1u);
  EXPECT_EQ(j.calls[0]["name"], "get_weather");
  EXPECT_EQ(j.content, "");
  // Without tools the control tokens decode to nothing, as always.
  ordered_json no_tools = Body();
  no_tools.erase("tools");
  auto [s2, plain] = Post(no_tools);
  ASSERT_EQ(s2, 200);
  EXPECT_EQ(plain["choices"][0]["message"]["content"],
            "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}");
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
    const std::string source = ReadFile(TemplatePath(name));
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
  options.chat_template = ReadFile(TemplatePath(GetParam().template_file));
  ASSERT_FALSE(options.chat_template.empty());
  ASSERT_NO_FATAL_FAILURE(StartFrontend(options));
  Play(Encode(GetParam().output));
  const ordered_json user = {{"role", "user"}, {"content", "Weather in Paris?"}};
  auto [status, r] = Post({{"messages", {user}}, {"tools", Tools()}, {"max_tokens", 200}});
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
         {{"messages", AsTemplateSeesIt(messages)}, {"tools", Tools()},
          {"add_generation_prompt", true}}}}});
  auto jinja2 = Jinja2({GetParam().template_file}, conversations);
  const std::string want = jinja2[GetParam().template_file]["result"];
  ASSERT_NE(want.find("temp_c"), std::string::npos) << want;
  ASSERT_NE(want.find("get_weather"), std::string::npos) << want;
  const std::vector<int32_t> got =
      PromptIdsOf({{"messages", messages}, {"tools", Tools()}, {"max_tokens", 4}});
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
TEST_F(ToolCallsTest, OfficialOpenAiClientGetsTheToolCalls) {
  if (::folio::testing::RunCommand("command -v node && command -v npm").exit_code != 0) {
    GTEST_SKIP() << "node and npm are needed for the openai client check";
  }
  const std::string dir = FOLIO_OPENAI_NODE_DIR;
  const std::string src = FOLIO_OPENAI_CHECK_DIR;
  ::folio::testing::CommandResult copy = ::folio::testing::RunCommand(absl::StrCat(
      "mkdir -p ", dir, " && cp ", src, "/package.json ", src, "/package-lock.json ", src,
      "/check.mjs ", dir, "/"));
  ASSERT_EQ(copy.exit_code, 0) << copy.output;
  if (::folio::testing::RunCommand(absl::StrCat("test -d ", dir, "/node_modules/openai"))
          .exit_code != 0) {
    ::folio::testing::CommandResult install = ::folio::testing::RunCommand(
        absl::StrCat("cd ", dir, " && npm ci --no-audit --no-fund --loglevel=error"));
    if (install.exit_code != 0) {
      GTEST_SKIP() << "npm could not install the openai package (is the registry reachable?): "
                   << install.output;
    }
  }
  FrontendOptions options;
  options.chat_template = ReadFile(TemplatePath(kQwen25));
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
                             {"tools", Tools()}, {"max_tokens", 200},
                             {"tool_result", "{\"temp_c\": 21}"}, {"expected", expected}});
  }
  const std::string spec_path = absl::StrCat(::testing::TempDir(), "/openai_tools_", getpid(), ".json");
  std::ofstream(spec_path) << spec.dump();
  ::folio::testing::CommandResult run =
      ::folio::testing::RunCommand(absl::StrCat("node ", dir, "/check.mjs ", spec_path));
  std::remove(spec_path.c_str());
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

}  // namespace
}  // namespace folio::frontend::testing
