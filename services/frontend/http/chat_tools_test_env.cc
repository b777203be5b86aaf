// The fixtures of frontend_chat_tools_test (see chat_tools_test_env.h).
#include "services/frontend/http/chat_tools_test_env.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "grpcpp/create_channel.h"
#include "httplib.h"
#include "services/frontend/chat/chat_template.h"
#include "tests/reference/llama_ref.h"

namespace folio::frontend::testing {

using ordered_json = nlohmann::ordered_json;
namespace ipb = folio::internal::v1;

std::string TemplatePath(const std::string& name) {
  return reference::LlamaCppSourceDir() + "/models/templates/" + name;
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

void ChatToolsTest::SetUp() {
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
void ChatToolsTest::TearDown() {
  if (http_) http_->Stop();
  http_.reset();
  frontend_.reset();
  FrontendTestEnv::TearDown();
}

// A FrontendService with `options` over the fixture's fake scheduler, and its HTTP server.
void ChatToolsTest::StartFrontend(FrontendOptions options, OpenAiServerOptions http_options) {
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
std::map<std::string, std::map<std::string, std::string>> ChatToolsTest::Jinja2(
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
std::vector<int32_t> ChatToolsTest::PromptIdsOf(const ordered_json& body) {
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

std::vector<int32_t> ChatToolsTest::Encoded(const std::string& text) {
  absl::StatusOr<std::vector<int32_t>> ids = EncodeChatPrompt(*tokenizer_, text);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : std::vector<int32_t>{};
}

// The scheduler answers every request with `tokens`, one per event, then STOP.
void ToolCallsTest::Play(const std::vector<int32_t>& tokens) {
  fake_->SetScript(TokensScript(tokens, ipb::FINISH_REASON_STOP, 7));
}
// That text's content before its first call.
std::string ToolCallsTest::SaidBefore(const std::string& text, const std::string& marker) {
  const std::string said = Said(text);
  return said.substr(0, said.find(marker));
}
ordered_json ToolCallsTest::Body(const ordered_json& extra) {
  ordered_json body = {{"messages", {{{"role", "user"}, {"content", "Weather in Paris?"}}}},
                       {"tools", WeatherTools()},
                       {"max_tokens", 200}};
  for (const auto& [k, v] : extra.items()) body[k] = v;
  return body;
}
// POST /v1/chat/completions; the parsed body and the HTTP status.
std::pair<int, ordered_json> ToolCallsTest::Post(const ordered_json& body) {
  httplib::Client client("127.0.0.1", http_->port());
  httplib::Result r = client.Post("/v1/chat/completions", body.dump(), "application/json");
  EXPECT_TRUE(r);
  if (!r) return {0, nullptr};
  return {r->status, ordered_json::parse(r->body, nullptr, false)};
}
// The stream's chunks (without [DONE], which must close it).
std::vector<ordered_json> ToolCallsTest::Stream(ordered_json body) {
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
}  // namespace folio::frontend::testing
