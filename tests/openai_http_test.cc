// The frontend's OpenAI-compatible HTTP API on a real local cluster: the same greedy text
// as the gRPC API, every error case with its HTTP status and OpenAI error object, API keys
// on both APIs, and a client that disconnects mid-stream cancelling its request.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "folio/internal/v1/scheduler.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "tests/cluster.h"
#include "tests/openai_client.h"

namespace folio {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using json = nlohmann::json;
using testing::Cluster;
using testing::ClusterOptions;
namespace v1 = folio::v1;

constexpr char kKey[] = "test-key-1";

struct HttpResult {
  int status = 0;
  std::string body;
  json parsed;  // null when the body is not JSON
};

HttpResult Send(int port, const std::string& method, const std::string& path,
                const std::string& body, const char* key = kKey) {
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(120, 0);
  httplib::Headers headers;
  if (key != nullptr) headers.emplace("Authorization", absl::StrCat("Bearer ", key));
  httplib::Result r = method == "GET" ? client.Get(path.c_str(), headers)
                                      : client.Post(path.c_str(), headers, body, "application/json");
  HttpResult out;
  if (!r) return out;
  out.status = r->status;
  out.body = r->body;
  out.parsed = json::parse(r->body, nullptr, /*allow_exceptions=*/false);
  return out;
}

HttpResult Post(int port, const std::string& path, const json& body, const char* key = kKey) {
  return Send(port, "POST", path, body.dump(), key);
}

// The JSON events of an SSE body; `done` tells whether it ended with [DONE].
std::vector<json> SseEvents(const std::string& body, bool* done) {
  std::vector<json> out;
  *done = false;
  for (absl::string_view event : absl::StrSplit(body, "\n\n", absl::SkipEmpty())) {
    EXPECT_TRUE(absl::StartsWith(event, "data: ")) << event;
    const std::string data(event.substr(6));
    if (data == "[DONE]") {
      *done = true;
      continue;
    }
    EXPECT_FALSE(*done) << "event after [DONE]";
    out.push_back(json::parse(data));
  }
  return out;
}

struct GrpcResult {
  grpc::Status status;
  std::string text;
  v1::CompleteResponse response;
};

GrpcResult GrpcComplete(v1::TextGeneration::Stub& stub, const v1::GenerateRequest& req,
                        const char* key = kKey) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  if (key != nullptr) ctx.AddMetadata("authorization", absl::StrCat("Bearer ", key));
  GrpcResult r;
  r.status = stub.Complete(&ctx, req, &r.response);
  r.text = r.response.text();
  return r;
}

v1::GenerateRequest Greedy(const std::string& prompt, int max_tokens) {
  v1::GenerateRequest req;
  req.set_prompt(prompt);
  req.mutable_sampling()->set_max_tokens(max_tokens);
  req.mutable_sampling()->set_temperature(0);
  return req;
}

std::unique_ptr<Cluster> StartCluster(const std::string& model, ClusterOptions options = {}) {
  options.model = model;
  auto cluster = Cluster::Start(options);
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  return cluster.ok() ? std::move(*cluster) : nullptr;
}

// One cluster with API keys on, shared by the tests that do not break it.
class OpenAiHttpTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::optional<std::string> dir = testing::ModelsDir();
    if (!dir) return;
    ClusterOptions options;
    options.frontend_args = {absl::StrCat("--api_key=", kKey, ",test-key-2"),
                             "--http_max_body_bytes=65536"};
    cluster_ = StartCluster(*dir + "/stories260K/stories260K.gguf", options).release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override {
    if (!testing::ModelsDir()) GTEST_SKIP() << testing::kModelsDirHelp;
    ASSERT_NE(cluster_, nullptr);
    port_ = cluster_->frontend_process().http_port();
    ASSERT_GT(port_, 0);
  }
  static Cluster* cluster_;
  int port_ = 0;
};
Cluster* OpenAiHttpTest::cluster_ = nullptr;

TEST_F(OpenAiHttpTest, CompletionIsTheGrpcGreedyText) {
  for (const std::string& prompt : {std::string("Once upon a time"), std::string()}) {
    GrpcResult g = GrpcComplete(cluster_->frontend(), Greedy(prompt, 40));
    ASSERT_TRUE(g.status.ok()) << g.status.error_message();
    HttpResult h = Post(port_, "/v1/completions",
                        {{"model", "stories260K"}, {"prompt", prompt}, {"max_tokens", 40},
                         {"temperature", 0}, {"logprobs", 2}});
    ASSERT_EQ(h.status, 200) << h.body;
    EXPECT_EQ(h.parsed["object"], "text_completion");
    EXPECT_EQ(h.parsed["choices"][0]["text"], g.text) << "prompt '" << prompt << "'";
    EXPECT_EQ(h.parsed["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(h.parsed["usage"]["completion_tokens"], g.response.usage().completion_tokens());
    EXPECT_EQ(h.parsed["usage"]["prompt_tokens"], g.response.usage().prompt_tokens());
    EXPECT_EQ(h.parsed["choices"][0]["logprobs"]["tokens"].size(), 40u);
    EXPECT_EQ(h.parsed["choices"][0]["logprobs"]["top_logprobs"][0].size(), 2u);
  }
}

TEST_F(OpenAiHttpTest, StreamedCompletionIsTheGrpcGreedyText) {
  GrpcResult g = GrpcComplete(cluster_->frontend(), Greedy("The little dog", 50));
  ASSERT_TRUE(g.status.ok()) << g.status.error_message();
  HttpResult h = Post(port_, "/v1/completions",
                      {{"prompt", "The little dog"}, {"max_tokens", 50}, {"temperature", 0},
                       {"stream", true}, {"stream_options", {{"include_usage", true}}}});
  ASSERT_EQ(h.status, 200) << h.body;
  bool done = false;
  std::vector<json> events = SseEvents(h.body, &done);
  EXPECT_TRUE(done);
  ASSERT_GE(events.size(), 3u);
  std::string text;
  std::string finish;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    EXPECT_TRUE(events[i]["usage"].is_null());
    ASSERT_EQ(events[i]["choices"].size(), 1u);
    text += events[i]["choices"][0]["text"].get<std::string>();
    if (!events[i]["choices"][0]["finish_reason"].is_null()) finish = events[i]["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(text, g.text);
  EXPECT_EQ(finish, "length");
  const json& last = events.back();
  EXPECT_TRUE(last["choices"].empty());
  EXPECT_EQ(last["usage"]["completion_tokens"], 50);
}

TEST_F(OpenAiHttpTest, TokenIdPromptsEchoAndStopStrings) {
  GrpcResult ids = GrpcComplete(cluster_->frontend(), Greedy("Once upon a time", 20));
  ASSERT_TRUE(ids.status.ok());
  v1::GenerateRequest by_ids = Greedy("", 20);
  by_ids.clear_prompt();
  for (int id : {1, 403, 407, 261, 378}) by_ids.add_prompt_token_ids(id);
  GrpcResult g = GrpcComplete(cluster_->frontend(), by_ids);
  ASSERT_TRUE(g.status.ok()) << g.status.error_message();
  HttpResult h = Post(port_, "/v1/completions",
                      {{"prompt", {1, 403, 407, 261, 378}}, {"max_tokens", 20}, {"temperature", 0}});
  ASSERT_EQ(h.status, 200) << h.body;
  EXPECT_EQ(h.parsed["choices"][0]["text"], g.text);

  HttpResult echo = Post(port_, "/v1/completions",
                         {{"prompt", "Once upon a time"}, {"max_tokens", 20}, {"temperature", 0},
                          {"echo", true}});
  ASSERT_EQ(echo.status, 200) << echo.body;
  EXPECT_EQ(echo.parsed["choices"][0]["text"], "Once upon a time" + ids.text);

  // A stop string taken from the greedy text cuts it there, as on the gRPC API.
  const std::string stop = ids.text.substr(ids.text.size() / 2, 4);
  v1::GenerateRequest with_stop = Greedy("Once upon a time", 20);
  with_stop.mutable_sampling()->add_stop(stop);
  GrpcResult gs = GrpcComplete(cluster_->frontend(), with_stop);
  HttpResult hs = Post(port_, "/v1/completions",
                       {{"prompt", "Once upon a time"}, {"max_tokens", 20}, {"temperature", 0},
                        {"stop", stop}});
  ASSERT_EQ(hs.status, 200) << hs.body;
  EXPECT_EQ(hs.parsed["choices"][0]["text"], gs.text);
  EXPECT_EQ(hs.parsed["choices"][0]["finish_reason"], "stop");
}

// stories260K carries no chat template: the documented default renders the messages.
TEST_F(OpenAiHttpTest, ChatCompletionRendersTheDefaultTemplate) {
  GrpcResult g = GrpcComplete(cluster_->frontend(),
                              Greedy("system: Be brief.\nuser: Tell me a story\nassistant:", 30));
  ASSERT_TRUE(g.status.ok()) << g.status.error_message();
  const json messages = {{{"role", "system"}, {"content", "Be brief."}},
                         {{"role", "user"}, {"content", "Tell me a story"}}};
  HttpResult h = Post(port_, "/v1/chat/completions",
                      {{"messages", messages}, {"max_tokens", 30}, {"temperature", 0}});
  ASSERT_EQ(h.status, 200) << h.body;
  EXPECT_EQ(h.parsed["object"], "chat.completion");
  EXPECT_EQ(h.parsed["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(h.parsed["choices"][0]["message"]["content"], g.text);

  HttpResult s = Post(port_, "/v1/chat/completions",
                      {{"messages", messages}, {"max_tokens", 30}, {"temperature", 0},
                       {"stream", true}});
  ASSERT_EQ(s.status, 200) << s.body;
  bool done = false;
  std::vector<json> events = SseEvents(s.body, &done);
  EXPECT_TRUE(done);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events[0]["choices"][0]["delta"]["role"], "assistant");
  std::string text;
  for (const json& e : events) {
    EXPECT_EQ(e["object"], "chat.completion.chunk");
    const json& delta = e["choices"][0]["delta"];
    if (delta.contains("content")) text += delta["content"].get<std::string>();
  }
  EXPECT_EQ(text, g.text);
  EXPECT_EQ(events.back()["choices"][0]["finish_reason"], "length");
}

// The tool-call loop on a model without a chat template (stories260K), with no flags: the
// default template teaches Hermes calls, so tool_choice "required" yields a call; the
// client's own assistant message (content null, tool_calls) and the tool's result go back
// and get an answer. Streamed and not.
TEST_F(OpenAiHttpTest, TheToolLoopWorksOnAModelWithoutATemplate) {
  const json tools = json::array(
      {{{"type", "function"},
        {"function",
         {{"name", "get_weather"},
          {"parameters",
           {{"type", "object"},
            {"properties", {{"city", {{"type", "string"}, {"maxLength", 12}}}}},
            {"required", {"city"}}}}}}}});
  json messages = json::array({{{"role", "user"}, {"content", "Weather in Paris?"}}});
  for (bool stream : {false, true}) {
    json body = {{"messages", messages}, {"tools", tools}, {"tool_choice", "required"},
                 {"parallel_tool_calls", false},
                 {"max_tokens", 200}, {"temperature", 0}};
    HttpResult h = Post(port_, "/v1/chat/completions", body);
    ASSERT_EQ(h.status, 200) << h.body;
    const json& choice = h.parsed["choices"][0];
    ASSERT_EQ(choice["finish_reason"], "tool_calls") << h.body;
    const json& call = choice["message"]["tool_calls"][0];
    EXPECT_EQ(call["function"]["name"], "get_weather");
    const json args = json::parse(call["function"]["arguments"].get<std::string>());
    EXPECT_TRUE(args.contains("city")) << args.dump();

    json loop = messages;
    loop.push_back({{"role", "assistant"}, {"content", nullptr},
                    {"tool_calls", choice["message"]["tool_calls"]}});
    loop.push_back({{"role", "tool"}, {"tool_call_id", call["id"]}, {"content", "22 C"}});
    json again = {{"messages", loop}, {"tools", tools}, {"max_tokens", 8}, {"temperature", 0},
                  {"stream", stream}};
    HttpResult answer = Post(port_, "/v1/chat/completions", again);
    ASSERT_EQ(answer.status, 200) << answer.body;
    if (stream) {
      bool done = false;
      EXPECT_FALSE(SseEvents(answer.body, &done).empty());
      EXPECT_TRUE(done);
    } else {
      EXPECT_EQ(answer.parsed["object"], "chat.completion");
    }
  }
}

// The same request on both APIs gets the same validation message: HTTP 400 with OpenAI's
// error object, gRPC INVALID_ARGUMENT.
TEST_F(OpenAiHttpTest, ValidationErrorsMatchTheGrpcApi) {
  struct Case {
    json http;
    std::function<void(v1::GenerateRequest*)> grpc;
  };
  std::vector<std::string> nine_stops(9, "x");
  json big_bias = json::object();
  for (int t = 0; t < 301; ++t) big_bias[std::to_string(t)] = 1;
  const std::vector<Case> cases = {
      {{{"temperature", 3}}, [](auto* r) { r->mutable_sampling()->set_temperature(3); }},
      {{{"top_p", 0}}, [](auto* r) { r->mutable_sampling()->set_top_p(0); }},
      {{{"top_k", -1}}, [](auto* r) { r->mutable_sampling()->set_top_k(-1); }},
      {{{"min_p", 2}}, [](auto* r) { r->mutable_sampling()->set_min_p(2); }},
      {{{"max_tokens", 0}}, [](auto* r) { r->mutable_sampling()->set_max_tokens(0); }},
      {{{"max_tokens", 100000}}, [](auto* r) { r->mutable_sampling()->set_max_tokens(100000); }},
      {{{"logprobs", 50}}, [](auto* r) { r->mutable_sampling()->set_logprobs(50); }},
      {{{"stop", nine_stops}},
       [&](auto* r) { for (const auto& s : nine_stops) r->mutable_sampling()->add_stop(s); }},
      {{{"stop", {""}}}, [](auto* r) { r->mutable_sampling()->add_stop(""); }},
      {{{"stop_token_ids", {9999}}}, [](auto* r) { r->mutable_sampling()->add_stop_token_ids(9999); }},
      {{{"prompt", {1, 99999}}}, [](auto* r) {
         r->clear_prompt();
         r->add_prompt_token_ids(1);
         r->add_prompt_token_ids(99999);
       }},
      {{{"presence_penalty", 3}}, [](auto* r) { r->mutable_sampling()->set_presence_penalty(3); }},
      {{{"frequency_penalty", -2.5}},
       [](auto* r) { r->mutable_sampling()->set_frequency_penalty(-2.5); }},
      {{{"repetition_penalty", 0}},
       [](auto* r) { r->mutable_sampling()->set_repetition_penalty(0); }},
      {{{"logit_bias", {{"9999", 1}}}},
       [](auto* r) { (*r->mutable_sampling()->mutable_logit_bias())[9999] = 1; }},
      {{{"logit_bias", {{"5", 150}}}},
       [](auto* r) { (*r->mutable_sampling()->mutable_logit_bias())[5] = 150; }},
      {{{"logit_bias", big_bias}},
       [](auto* r) {
         for (int t = 0; t < 301; ++t) (*r->mutable_sampling()->mutable_logit_bias())[t] = 1;
       }},
      {{{"max_tokens", 4}, {"min_tokens", 5}}, [](auto* r) {
         r->mutable_sampling()->set_max_tokens(4);
         r->mutable_sampling()->set_min_tokens(5);
       }},
  };
  for (const Case& c : cases) {
    json body = {{"prompt", "Once"}};
    body.update(c.http);
    v1::GenerateRequest req;
    req.set_prompt("Once");
    c.grpc(&req);
    GrpcResult g = GrpcComplete(cluster_->frontend(), req);
    ASSERT_EQ(g.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << body.dump();
    HttpResult h = Post(port_, "/v1/completions", body);
    EXPECT_EQ(h.status, 400) << body.dump();
    EXPECT_EQ(h.parsed["error"]["message"], g.status.error_message()) << body.dump();
    EXPECT_EQ(h.parsed["error"]["type"], "invalid_request_error");
  }
  HttpResult p = Post(port_, "/v1/completions", {{"prompt", "x"}, {"temperature", 3}});
  EXPECT_EQ(p.parsed["error"]["param"], "temperature");
}

TEST_F(OpenAiHttpTest, ErrorStatusesAndMalformedRequests) {
  HttpResult unknown_model = Post(port_, "/v1/completions", {{"model", "gpt-4"}, {"prompt", "x"}});
  EXPECT_EQ(unknown_model.status, 404);
  EXPECT_EQ(unknown_model.parsed["error"]["code"], "model_not_found");
  EXPECT_THAT(unknown_model.parsed["error"]["message"].get<std::string>(), HasSubstr("'gpt-4'"));

  for (const std::string& bad : std::vector<std::string>{"{", "[1, 2]", "{\"prompt\": \"x\",}",
                                                          "\xff\xfe", "", std::string(10000, '[')}) {
    HttpResult h = Send(port_, "POST", "/v1/completions", bad);
    EXPECT_EQ(h.status, 400) << bad.substr(0, 20);
    EXPECT_EQ(h.parsed["error"]["type"], "invalid_request_error");
  }
  HttpResult wrong_type = Post(port_, "/v1/chat/completions", {{"messages", "hi"}});
  EXPECT_EQ(wrong_type.status, 400);
  EXPECT_EQ(wrong_type.parsed["error"]["message"], "messages must be an array");

  HttpResult oversize = Send(port_, "POST", "/v1/completions",
                             json{{"prompt", std::string(70000, 'a')}}.dump());
  EXPECT_EQ(oversize.status, 413);
  EXPECT_EQ(oversize.parsed["error"]["code"], "request_too_large");

  HttpResult no_route = Send(port_, "GET", "/v1/nothing", "");
  EXPECT_EQ(no_route.status, 404);
  EXPECT_THAT(no_route.parsed["error"]["message"].get<std::string>(), HasSubstr("/v1/nothing"));

  // The frontend survived all of it.
  HttpResult after = Post(port_, "/v1/completions", {{"prompt", "x"}, {"max_tokens", 2}});
  EXPECT_EQ(after.status, 200) << after.body;
}

TEST_F(OpenAiHttpTest, ApiKeysGuardHttpAndGrpc) {
  HttpResult missing = Post(port_, "/v1/completions", {{"prompt", "x"}}, nullptr);
  EXPECT_EQ(missing.status, 401);
  EXPECT_EQ(missing.parsed["error"]["type"], "authentication_error");
  EXPECT_THAT(missing.parsed["error"]["message"].get<std::string>(), HasSubstr("missing API key"));
  HttpResult wrong = Post(port_, "/v1/completions", {{"prompt", "x"}}, "nope");
  EXPECT_EQ(wrong.status, 401);
  EXPECT_EQ(wrong.parsed["error"]["message"], "invalid API key");
  EXPECT_EQ(Send(port_, "GET", "/v1/models", "", nullptr).status, 401);
  EXPECT_EQ(Post(port_, "/v1/completions", {{"prompt", "x"}, {"max_tokens", 1}}, "test-key-2").status,
            200);

  HttpResult health = Send(port_, "GET", "/health", "", nullptr);
  EXPECT_EQ(health.status, 200) << health.body;
  HttpResult models = Send(port_, "GET", "/v1/models", "");
  ASSERT_EQ(models.status, 200);
  EXPECT_EQ(models.parsed["data"][0]["id"], "stories260K");
  // Carried from the worker's file (general.file_type 0) through the scheduler.
  EXPECT_EQ(models.parsed["data"][0]["stored_type"], "F32");

  GrpcResult no_key = GrpcComplete(cluster_->frontend(), Greedy("x", 2), nullptr);
  EXPECT_EQ(no_key.status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  GrpcResult bad_key = GrpcComplete(cluster_->frontend(), Greedy("x", 2), "nope");
  EXPECT_EQ(bad_key.status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(bad_key.status.error_message(), "invalid API key");
  grpc::ClientContext ctx;
  v1::ModelInfo info;
  EXPECT_EQ(cluster_->frontend().GetModelInfo(&ctx, v1::GetModelInfoRequest(), &info).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
}

// The official openai npm client (tests/openai/check.mjs), installed into the build folder
// on first use: true, or false with *skip saying why not (no node/npm, no registry).
bool InstallOpenAiClient(std::string* skip) {
  return testing::InstallOpenAiClient(FOLIO_OPENAI_NODE_DIR, FOLIO_OPENAI_CHECK_DIR, skip);
}

// Runs check.mjs on `spec` (its JSON format is in check.mjs).
testing::CommandResult RunOpenAiClient(const json& spec, const std::string& name) {
  return testing::RunOpenAiClient(FOLIO_OPENAI_NODE_DIR, spec.dump(), name);
}

TEST_F(OpenAiHttpTest, OfficialOpenAiClientGetsTheGrpcText) {
  std::string skip;
  if (!InstallOpenAiClient(&skip)) GTEST_SKIP() << skip;
  const std::string chat_prompt = "user: Where is the cat?\nassistant:";
  GrpcResult completion = GrpcComplete(cluster_->frontend(), Greedy("Once upon a time", 40));
  GrpcResult streamed = GrpcComplete(cluster_->frontend(), Greedy("Lily went", 40));
  GrpcResult chat = GrpcComplete(cluster_->frontend(), Greedy(chat_prompt, 40));
  ASSERT_TRUE(completion.status.ok() && streamed.status.ok() && chat.status.ok());
  // Penalties, logit_bias (OpenAI's map) and vLLM's min_tokens through the client, against
  // the gRPC text of the same request; sampled with a seed.
  const json extra = {{"presence_penalty", 0.6}, {"frequency_penalty", 0.8},
                      {"logit_bias", {{"13", -100}, {"300", 3}}}, {"min_tokens", 30},
                      {"repetition_penalty", 1.2}, {"temperature", 0.7}, {"seed", 11}};
  auto with_extra = [](v1::GenerateRequest req) {
    v1::SamplingOptions* s = req.mutable_sampling();
    s->set_presence_penalty(0.6f);
    s->set_frequency_penalty(0.8f);
    (*s->mutable_logit_bias())[13] = -100;
    (*s->mutable_logit_bias())[300] = 3;
    s->set_min_tokens(30);
    s->set_repetition_penalty(1.2f);
    s->set_temperature(0.7f);
    s->set_seed(11);
    return req;
  };
  GrpcResult penalised = GrpcComplete(cluster_->frontend(), with_extra(Greedy("Once upon a time", 40)));
  GrpcResult penalised_chat = GrpcComplete(cluster_->frontend(), with_extra(Greedy(chat_prompt, 40)));
  ASSERT_TRUE(penalised.status.ok() && penalised_chat.status.ok());
  EXPECT_NE(penalised.text, completion.text) << "the penalties changed nothing";
  json spec = {
      {"baseURL", absl::StrCat("http://127.0.0.1:", port_, "/v1")},
      {"apiKey", kKey},
      {"model", "stories260K"},
      {"cases",
       {{{"name", "completion"}, {"kind", "completion"}, {"prompt", "Once upon a time"},
         {"max_tokens", 40}, {"expected", completion.text}},
        {{"name", "streamed completion"}, {"kind", "completion_stream"}, {"prompt", "Lily went"},
         {"max_tokens", 40}, {"expected", streamed.text}},
        {{"name", "streamed chat"}, {"kind", "chat_stream"},
         {"messages", {{{"role", "user"}, {"content", "Where is the cat?"}}}},
         {"max_tokens", 40}, {"expected", chat.text}},
        {{"name", "penalised completion"}, {"kind", "completion"}, {"prompt", "Once upon a time"},
         {"max_tokens", 40}, {"extra", extra}, {"expected", penalised.text}},
        {{"name", "penalised chat"}, {"kind", "chat"},
         {"messages", {{{"role", "user"}, {"content", "Where is the cat?"}}}},
         {"max_tokens", 40}, {"extra", extra}, {"expected", penalised_chat.text}},
        {{"name", "logit_bias key not a token"}, {"kind", "completion_error"}, {"prompt", "x"},
         {"max_tokens", 4}, {"extra", {{"logit_bias", {{"99999", 1}}}}}, {"expected", "logit_bias"}},
        {{"name", "presence_penalty out of range"}, {"kind", "completion_error"}, {"prompt", "x"},
         {"max_tokens", 4}, {"extra", {{"presence_penalty", 2.5}}},
         {"expected", "presence_penalty"}}}}};
  testing::CommandResult run = RunOpenAiClient(spec, "openai_cases");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("OK   streamed chat"));
  EXPECT_THAT(run.output, HasSubstr("OK   penalised chat"));
  EXPECT_THAT(run.output, HasSubstr("OK   presence_penalty out of range"));
}

// Whether `instance` (JSON text) validates against `schema` by Python's jsonschema
// (Draft 2020-12 with formats), an independent validator; *why has its errors.
bool ValidatesWithJsonschema(const json& schema, const std::string& instance, std::string* why) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/jsonschema_", getpid(), ".json");
  std::ofstream(path) << json{{"schema", schema}, {"instance", instance}}.dump();
  testing::CommandResult r = testing::RunCommand(absl::StrCat(
      "python3 -c 'import json, sys, jsonschema\n"
      "d = json.load(open(sys.argv[1]))\n"
      "v = jsonschema.Draft202012Validator(d[\"schema\"], format_checker=jsonschema.FormatChecker())\n"
      "e = [x.message for x in v.iter_errors(json.loads(d[\"instance\"]))]\n"
      "print(e); sys.exit(1 if e else 0)' ",
      path));
  std::remove(path.c_str());
  *why = r.output;
  return r.exit_code == 0;
}

// The openai client's response_format json_schema call (create, the client's own parse
// helper, and its stream helper) on a real model: the content is the gRPC text of the
// same constrained request, parses, and validates against the schema.
TEST_F(OpenAiHttpTest, OfficialOpenAiClientGetsSchemaValidJson) {
  std::string skip;
  if (!InstallOpenAiClient(&skip)) GTEST_SKIP() << skip;
  if (testing::RunCommand("python3 -c 'import jsonschema'").exit_code != 0) {
    GTEST_SKIP() << "python3-jsonschema is needed to validate the completions";
  }
  const std::string chat_prompt = "user: Tell me about the cat.\nassistant:";
  const std::vector<std::pair<std::string, json>> schemas = {
      {"person", json::parse(R"({"type": "object", "properties": {
          "name": {"type": "string", "minLength": 1, "maxLength": 8},
          "age": {"type": "integer", "minimum": 0, "maximum": 120},
          "pet": {"enum": ["cat", "dog", null]}},
          "required": ["name", "age", "pet"], "additionalProperties": false})")},
      {"tags", json::parse(R"({"type": "array", "items": {"type": "string", "maxLength": 5},
          "minItems": 1, "maxItems": 3})")},
      {"event", json::parse(R"({"type": "object", "properties": {
          "when": {"type": "string", "format": "date"},
          "score": {"type": "number", "minimum": -1, "maximum": 1},
          "ok": {"type": "boolean"}}, "required": ["when", "score", "ok"]})")},
  };
  json cases = json::array();
  for (const auto& [name, schema] : schemas) {
    v1::GenerateRequest req = Greedy(chat_prompt, 200);
    req.mutable_sampling()->mutable_structured()->set_json_schema(schema.dump());
    GrpcResult grpc = GrpcComplete(cluster_->frontend(), req);
    ASSERT_TRUE(grpc.status.ok()) << name << ": " << grpc.status.error_message();
    std::string why;
    EXPECT_TRUE(ValidatesWithJsonschema(schema, grpc.text, &why))
        << name << ": " << grpc.text << "\n" << why;
    const json response_format = {
        {"type", "json_schema"},
        {"json_schema", {{"name", name}, {"schema", schema}, {"strict", true}}}};
    for (const char* kind : {"chat_json_schema", "chat_json_schema_parse", "chat_json_schema_stream"}) {
      cases.push_back({{"name", absl::StrCat(name, " ", kind)}, {"kind", kind},
                       {"messages", {{{"role", "user"}, {"content", "Tell me about the cat."}}}},
                       {"max_tokens", 200}, {"response_format", response_format},
                       {"expected", grpc.text}});
    }
  }
  const json spec = {{"baseURL", absl::StrCat("http://127.0.0.1:", port_, "/v1")},
                     {"apiKey", kKey},
                     {"model", "stories260K"},
                     {"cases", cases}};
  testing::CommandResult run = RunOpenAiClient(spec, "openai_json_schema");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  for (const char* line : {"OK   person chat_json_schema_parse", "OK   tags chat_json_schema_stream",
                           "OK   event chat_json_schema"}) {
    EXPECT_THAT(run.output, HasSubstr(line));
  }
}


// Scheduler stats of a cluster (through its /metrics page).
double SchedulerMetric(Cluster& cluster, const std::string& name) {
  return testing::MetricValue(
      testing::HttpGet(cluster.scheduler_process().metrics_port(), "/metrics"), name);
}

TEST(OpenAiHttpClusterTest, FullWaitingQueueIs429) {
  const std::optional<std::string> dir = testing::ModelsDir();
  if (!dir) GTEST_SKIP() << testing::kModelsDirHelp;
  ClusterOptions options;
  options.scheduler_args = {"--max_waiting_requests=0"};
  std::unique_ptr<Cluster> cluster = StartCluster(*dir + "/stories260K/stories260K.gguf", options);
  ASSERT_NE(cluster, nullptr);
  const int port = cluster->frontend_process().http_port();
  GrpcResult g = GrpcComplete(cluster->frontend(), Greedy("x", 4), nullptr);
  ASSERT_EQ(g.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  for (bool stream : {false, true}) {
    HttpResult h = Post(port, "/v1/completions", {{"prompt", "x"}, {"max_tokens", 4}, {"stream", stream}},
                        nullptr);
    EXPECT_EQ(h.status, 429) << h.body;
    EXPECT_EQ(h.parsed["error"]["type"], "rate_limit_error");
    EXPECT_EQ(h.parsed["error"]["message"], g.status.error_message());
  }
}

TEST(OpenAiHttpClusterTest, NoSchedulerIs503AndUnhealthy) {
  const std::optional<std::string> dir = testing::ModelsDir();
  if (!dir) GTEST_SKIP() << testing::kModelsDirHelp;
  // The frontend waits 300 ms for a scheduler to take a request over, then gives up.
  std::unique_ptr<Cluster> cluster =
      StartCluster(*dir + "/stories260K/stories260K.gguf",
                   ClusterOptions{.frontend_args = {"--recovery_timeout_ms=300"}});
  ASSERT_NE(cluster, nullptr);
  const int port = cluster->frontend_process().http_port();
  EXPECT_EQ(Send(port, "GET", "/health", "", nullptr).status, 200);
  cluster->scheduler_process().Signal(SIGKILL);
  ASSERT_TRUE(cluster->scheduler_process().Wait(absl::Seconds(20)).ok());
  for (bool stream : {false, true}) {
    HttpResult h = Post(port, "/v1/completions", {{"prompt", "x"}, {"max_tokens", 4}, {"stream", stream}},
                        nullptr);
    EXPECT_EQ(h.status, 503) << h.body;
    EXPECT_THAT(h.parsed["error"]["message"].get<std::string>(), StartsWith("scheduler unavailable"));
  }
  HttpResult health = Send(port, "GET", "/health", "", nullptr);
  EXPECT_EQ(health.status, 503);
  EXPECT_THAT(health.parsed["error"]["message"].get<std::string>(), HasSubstr("scheduler is not serving"));
}

// A streaming client that closes its connection: the request is cancelled (it stops well
// short of max_tokens) and every block goes back to the pool. bench-28m (4096 context)
// makes the request long enough to still be running when the client leaves.
TEST(OpenAiHttpClusterTest, ClientDisconnectCancelsTheRequest) {
  const std::optional<std::string> dir = testing::ModelsDir();
  if (!dir) GTEST_SKIP() << testing::kModelsDirHelp;
  std::unique_ptr<Cluster> cluster = StartCluster(*dir + "/bench-28m-f16.gguf");
  ASSERT_NE(cluster, nullptr);
  const int port = cluster->frontend_process().http_port();
  constexpr int kMaxTokens = 4000;

  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const std::string body = json{{"prompt", "Once upon a time"}, {"max_tokens", kMaxTokens},
                                {"ignore_eos", true}, {"stream", true}}.dump();
  const std::string request = absl::StrCat(
      "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
      "Content-Length: ", body.size(), "\r\n\r\n", body);
  ASSERT_EQ(write(fd, request.data(), request.size()), static_cast<ssize_t>(request.size()));
  // Read until a few events have arrived: the request is running.
  std::string received;
  char buf[4096];
  while (std::count(received.begin(), received.end(), '\n') < 12) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    ASSERT_GT(n, 0) << received;
    received.append(buf, static_cast<size_t>(n));
  }
  EXPECT_THAT(received, StartsWith("HTTP/1.1 200"));
  EXPECT_THAT(received, HasSubstr("data: {"));
  EXPECT_EQ(cluster->CacheStats().num_sequences(), 1);
  close(fd);

  EXPECT_TRUE(cluster->WaitForEmptyPool(absl::Seconds(120)));
  const double generated = SchedulerMetric(*cluster, "folio_scheduler_generation_tokens_total");
  EXPECT_GT(generated, 0);
  EXPECT_LT(generated, kMaxTokens);
  const std::string frontend_metrics =
      testing::HttpGet(cluster->frontend_process().metrics_port(), "/metrics");
  EXPECT_THAT(frontend_metrics, HasSubstr("method=\"http_completions\""));
}

// A model file that carries the published Llama-2 chat template: the chat API renders it
// (with <s> as the BOS token, not as text) and generates what the gRPC API does for the
// same token ids.
TEST(OpenAiHttpClusterTest, ChatUsesTheTemplateInTheModelFile) {
  if (!testing::ModelsDir()) GTEST_SKIP() << testing::kModelsDirHelp;
  const std::string model = ::testing::TempDir() + "/llama2_chat_model.gguf";
  testing::CommandResult made = testing::RunCommand(absl::StrCat(
      testing::BinDir(), "/folio-make-model --out=", model, " --vocab=512 --context=256 --seed=3 ",
      "--chat_template_file=", FOLIO_CHAT_TEMPLATES_DIR, "/llama2_chat.jinja"));
  ASSERT_EQ(made.exit_code, 0) << made.output;
  std::unique_ptr<Cluster> cluster = StartCluster(model);
  ASSERT_NE(cluster, nullptr);
  const int port = cluster->frontend_process().http_port();

  // <s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST]: BOS, then the text after it.
  grpc::ClientContext ctx;
  v1::TokenizeRequest tok_req;
  tok_req.set_text("[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST]");
  tok_req.set_add_bos(false);  // BOS is added below, as the template writes it
  v1::TokenizeResponse tok;
  ASSERT_TRUE(cluster->frontend().Tokenize(&ctx, tok_req, &tok).ok());
  v1::GenerateRequest req = Greedy("", 12);
  req.clear_prompt();
  req.add_prompt_token_ids(1);
  for (int id : tok.token_ids()) req.add_prompt_token_ids(id);
  GrpcResult g = GrpcComplete(cluster->frontend(), req, nullptr);
  ASSERT_TRUE(g.status.ok()) << g.status.error_message();

  const json messages = {{{"role", "system"}, {"content", "Be brief."}},
                         {{"role", "user"}, {"content", "Hi"}}};
  HttpResult h = Post(port, "/v1/chat/completions",
                      {{"messages", messages}, {"max_tokens", 12}, {"temperature", 0},
                       {"ignore_eos", true}},
                      nullptr);
  ASSERT_EQ(h.status, 200) << h.body;
  EXPECT_EQ(h.parsed["usage"]["prompt_tokens"], req.prompt_token_ids_size());
  EXPECT_EQ(h.parsed["choices"][0]["message"]["content"], g.text);

  // The template's own error reaches the client as a 400.
  HttpResult bad = Post(port, "/v1/chat/completions",
                        {{"messages", {{{"role", "user"}, {"content", "a"}},
                                       {{"role", "user"}, {"content", "b"}}}}},
                        nullptr);
  EXPECT_EQ(bad.status, 400);
  EXPECT_THAT(bad.parsed["error"]["message"].get<std::string>(),
              HasSubstr("Conversation roles must alternate"));
  std::remove(model.c_str());
}

}  // namespace
}  // namespace folio
