// OpenAiServer in front of a scripted FakeScheduler: choices are told apart by the
// scheduler event's index (the n > 1 path, which the real scheduler does not serve yet),
// n reaches the scheduler, and a stop string ends only its own choice.
#include "services/frontend/http/openai_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "services/frontend/frontend_test_env.h"

namespace folio::frontend::testing {
namespace {

using json = nlohmann::json;
namespace ipb = folio::internal::v1;

class OpenAiServerTest : public FrontendTestEnv {
 protected:
  void SetUp() override {
    FrontendTestEnv::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    OpenAiServerOptions options = options_;
    options.port = 0;
    options.resume.recovery_timeout = resume_timeout_;  // off unless a test turns it on
    auto server = OpenAiServer::Start(
        options, [this] { return service_->model(); },
        grpc::CreateChannel(fake_->address(), grpc::InsecureChannelCredentials()),
        service_->metrics());
    ASSERT_TRUE(server.ok()) << server.status();
    http_ = *std::move(server);
  }
  void TearDown() override {
    if (http_) http_->Stop();
    FrontendTestEnv::TearDown();
  }

  ipb::ScheduleEvent Event(int32_t index, const std::string& text,
                           ipb::FinishReason finish = ipb::FINISH_REASON_UNSPECIFIED) {
    ipb::ScheduleEvent e;
    e.set_index(index);
    for (int32_t id : Encode(text)) e.add_tokens()->set_token_id(id);
    e.set_finish_reason(finish);
    e.set_num_prompt_tokens(2);
    return e;
  }

  // A streamed completions response, per choice index: its text and finish reason, and
  // whether the stream ended with [DONE].
  struct Streamed {
    std::map<int, std::string> text;
    std::map<int, std::string> finish;
    bool done = false;
  };
  static Streamed ParseStream(const std::string& body) {
    Streamed out;
    for (absl::string_view event : absl::StrSplit(body, "\n\n", absl::SkipEmpty())) {
      if (event == "data: [DONE]") {
        out.done = true;
        continue;
      }
      json chunk = json::parse(event.substr(6));
      for (const json& c : chunk["choices"]) {
        const int i = c["index"];
        out.text[i] += c["text"].get<std::string>();
        if (!c["finish_reason"].is_null()) out.finish[i] = c["finish_reason"];
      }
    }
    return out;
  }

  json Post(const json& body, int* status) {
    httplib::Client client("127.0.0.1", http_->port());
    httplib::Result r = client.Post("/v1/completions", body.dump(), "application/json");
    *status = r ? r->status : 0;
    return r ? json::parse(r->body, nullptr, false) : json();
  }

  std::unique_ptr<OpenAiServer> http_;
  absl::Duration resume_timeout_ = absl::ZeroDuration();  // ResumeOptions.recovery_timeout
  OpenAiServerOptions options_;  // what a derived fixture sets before SetUp
};

// Served names, the open endpoints and CORS.
class OpenAiServerSurfaceTest : public OpenAiServerTest {
 protected:
  OpenAiServerSurfaceTest() {
    options_.served_model_names = {"tiny-llama", "alias"};
    options_.allowed_origins = "http://ui.example, http://other.example";
    options_.api_keys = *ApiKeys::Create({"sekret"}, "");
    options_.metrics_text = [] { return std::string("folio_test_metric 1\n"); };
  }
  httplib::Client Client() { return httplib::Client("127.0.0.1", http_->port()); }
  static std::string Header(const httplib::Result& r, const std::string& name) {
    return r && r->has_header(name) ? r->get_header_value(name) : "";
  }
};

// With resuming on (the frontend's --recovery_timeout_ms).
class OpenAiResumeTest : public OpenAiServerTest {
 protected:
  OpenAiResumeTest() { resume_timeout_ = absl::Seconds(10); }
};

// A reasoning model: --reasoning_parser=think over the default template (the output opens
// with <think>), and a chat template that mentions <think> (auto) and ends the prompt in it.
class OpenAiReasoningTest : public OpenAiServerTest {
 protected:
  OpenAiReasoningTest() { options_.reasoning_parser = ReasoningParserMode::kThink; }

  json PostChat(const json& body, int* status) {
    httplib::Client client("127.0.0.1", http_->port());
    httplib::Result r = client.Post("/v1/chat/completions", body.dump(), "application/json");
    *status = r ? r->status : 0;
    if (!r) return json();
    if (!body.value("stream", false)) return json::parse(r->body, nullptr, false);
    // Streamed: the chunks' deltas, as a list.
    json deltas = json::array();
    for (absl::string_view event : absl::StrSplit(r->body, "\n\n", absl::SkipEmpty())) {
      if (event == "data: [DONE]") continue;
      json chunk = json::parse(event.substr(6));
      for (const json& c : chunk["choices"]) deltas.push_back(c["delta"]);
    }
    return deltas;
  }
  // The model writes `text` (decoded with a leading space), one token per event.
  Script OneTokenPerEvent(const std::string& text) {
    Script script;
    const std::vector<int32_t> ids = Encode(text);
    for (size_t i = 0; i < ids.size(); ++i) {
      ipb::ScheduleEvent e;
      e.add_tokens()->set_token_id(ids[i]);
      e.set_num_prompt_tokens(2);
      if (i + 1 == ids.size()) e.set_finish_reason(ipb::FINISH_REASON_STOP);
      script.events.push_back(std::move(e));
    }
    return script;
  }
  static const json& Messages() {
    static const json* m = new json{{{"role", "user"}, {"content", "Hi"}}};
    return *m;
  }
};

class OpenAiReasoningTemplateTest : public OpenAiReasoningTest {
 protected:
  OpenAiReasoningTemplateTest() {
    options_.reasoning_parser = ReasoningParserMode::kAuto;
    frontend_options_.chat_template =
        "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|><think>\n{% endif %}";
  }
};

class OpenAiReasoningToolsTest : public OpenAiReasoningTest {
 protected:
  OpenAiReasoningToolsTest() { options_.tool_call_parser = ToolCallFormat::kHermes; }
};

TEST_F(OpenAiReasoningTest, ReasoningContentIsSplitFromTheAnswer) {
  // " <think> hmm, sum</think> Four", one token per event: the tokenizer spells the tags
  // out in several tokens, so they arrive split.
  Script script = OneTokenPerEvent("<think> hmm, sum</think> Four");
  ASSERT_GT(script.events.size(), 10u);
  fake_->SetScript(script);
  int status = 0;
  json r = PostChat({{"messages", Messages()}}, &status);
  ASSERT_EQ(status, 200) << r.dump();
  json message = r["choices"][0]["message"];  // a copy: a missing key is null, not UB
  EXPECT_EQ(message["reasoning_content"], " hmm, sum") << r.dump();
  EXPECT_EQ(message["content"], "Four") << r.dump();  // the space after </think> dropped
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");

  fake_->SetScript(script);
  json deltas = PostChat({{"messages", Messages()}, {"stream", true}}, &status);
  ASSERT_EQ(status, 200);
  std::string reasoning, content;
  for (const json& d : deltas) {
    if (d.contains("reasoning_content")) reasoning += d["reasoning_content"].get<std::string>();
    if (d.contains("content")) content += d["content"].get<std::string>();
    // No delta carries a tag.
    EXPECT_EQ(d.dump().find("think>"), std::string::npos) << d.dump();
  }
  EXPECT_EQ(reasoning, " hmm, sum") << deltas.dump();
  EXPECT_EQ(content, "Four") << deltas.dump();
  // The reasoning streams as it comes, in several deltas before the answer's.
  int reasoning_deltas = 0;
  for (const json& d : deltas) {
    if (d.contains("content") && !d["content"].get<std::string>().empty()) break;
    reasoning_deltas += d.contains("reasoning_content") ? 1 : 0;
  }
  EXPECT_GT(reasoning_deltas, 1) << deltas.dump();
}

TEST_F(OpenAiReasoningToolsTest, ToolCallsAreReadFromTheAnswerOnly) {
  fake_->SetScript(OneTokenPerEvent(
      "<think>maybe <tool_call> f</think>\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n"
      "</tool_call>"));
  const json tools = json::parse(
      R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}])");
  int status = 0;
  json r = PostChat({{"messages", Messages()}, {"tools", tools}}, &status);
  ASSERT_EQ(status, 200) << r.dump();
  json message = r["choices"][0]["message"];
  EXPECT_EQ(message["reasoning_content"], "maybe <tool_call> f") << r.dump();
  EXPECT_TRUE(message["content"].is_null()) << r.dump();
  ASSERT_EQ(message["tool_calls"].size(), 1u) << r.dump();
  EXPECT_EQ(message["tool_calls"][0]["function"]["name"], "f");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "tool_calls");
}

TEST_F(OpenAiReasoningTest, AnOutputWithoutTagsIsAllContent) {
  Script script;
  script.events = {Event(0, "Hello"), Event(0, "world", ipb::FINISH_REASON_STOP)};
  fake_->SetScript(script);
  int status = 0;
  json r = PostChat({{"messages", Messages()}}, &status);
  ASSERT_EQ(status, 200) << r.dump();
  EXPECT_EQ(r["choices"][0]["message"]["content"], " Hello world");
  EXPECT_FALSE(r["choices"][0]["message"].contains("reasoning_content")) << r.dump();
}

TEST_F(OpenAiReasoningTemplateTest, APromptEndingInThinkStartsTheOutputInside) {
  fake_->SetScript(OneTokenPerEvent("hmm </think>\n\nFour"));
  int status = 0;
  json r = PostChat({{"messages", Messages()}}, &status);
  ASSERT_EQ(status, 200) << r.dump();
  EXPECT_EQ(r["choices"][0]["message"]["reasoning_content"], " hmm ") << r.dump();
  EXPECT_EQ(r["choices"][0]["message"]["content"], "Four") << r.dump();
}

TEST_F(OpenAiServerTest, ChoicesFollowTheSchedulerEventIndex) {
  Script script;
  // Each piece is encoded on its own, so it decodes with a leading space.
  script.events = {Event(0, "Hello"), Event(1, "Bye"), Event(1, "now", ipb::FINISH_REASON_STOP),
                   Event(0, "world", ipb::FINISH_REASON_LENGTH)};
  fake_->SetScript(script);
  int status = 0;
  json r = Post({{"prompt", "Once"}, {"n", 2}, {"max_tokens", 4}}, &status);
  ASSERT_EQ(status, 200) << r.dump();
  ASSERT_EQ(r["choices"].size(), 2u);
  EXPECT_EQ(r["choices"][0]["index"], 0);
  EXPECT_EQ(r["choices"][0]["text"], " Hello world");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r["choices"][1]["index"], 1);
  EXPECT_EQ(r["choices"][1]["text"], " Bye now");
  EXPECT_EQ(r["choices"][1]["finish_reason"], "stop");
  EXPECT_EQ(r["usage"]["completion_tokens"],
            static_cast<int>(Encode("Hello").size() + Encode("world").size() +
                             Encode("Bye").size() + Encode("now").size()));
  ASSERT_EQ(fake_->calls().size(), 1u);
  EXPECT_EQ(fake_->calls()[0].request.n(), 2);
}

// A list of prompts: each its own scheduler call with n choices; prompt k's choices are
// k * n ..., echo is per prompt, usage sums, streamed and not.
TEST_F(OpenAiServerTest, APromptListRunsEachPromptWithItsOwnChoices) {
  Script script;
  script.events = {Event(0, "Hello"), Event(1, "Bye"), Event(1, "now", ipb::FINISH_REASON_STOP),
                   Event(0, "world", ipb::FINISH_REASON_LENGTH)};
  fake_->SetScript(script);
  int status = 0;
  json r = Post({{"prompt", {"Once", "Twice"}}, {"n", 2}, {"max_tokens", 4}, {"echo", true}},
                &status);
  ASSERT_EQ(status, 200) << r.dump();
  ASSERT_EQ(r["choices"].size(), 4u);
  const char* want[] = {"Once Hello world", "Once Bye now", "Twice Hello world", "Twice Bye now"};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(r["choices"][i]["index"], i);
    EXPECT_EQ(r["choices"][i]["text"], want[i]);
  }
  const int per_call = static_cast<int>(Encode("Hello").size() + Encode("world").size() +
                                        Encode("Bye").size() + Encode("now").size());
  EXPECT_EQ(r["usage"]["completion_tokens"], 2 * per_call);
  EXPECT_EQ(r["usage"]["prompt_tokens"], 4);
  ASSERT_EQ(fake_->calls().size(), 2u);
  EXPECT_NE(fake_->calls()[0].request.prompt_token_ids_size(), 0);
  EXPECT_EQ(fake_->calls()[0].request.n(), 2);

  Script one_choice;
  one_choice.events = {Event(0, "Hello"), Event(0, "world", ipb::FINISH_REASON_LENGTH)};
  fake_->SetScript(one_choice);
  httplib::Client client("127.0.0.1", http_->port());
  httplib::Result streamed = client.Post(
      "/v1/completions",
      json{{"prompt", {json::array({5, 6}), "Twice"}}, {"stream", true}}.dump(),
      "application/json");
  ASSERT_TRUE(streamed);
  ASSERT_EQ(streamed->status, 200) << streamed->body;
  Streamed st = ParseStream(streamed->body);
  EXPECT_TRUE(st.done);
  EXPECT_EQ(st.text.size(), 2u);
  EXPECT_EQ(st.text[0], " Hello world");
  EXPECT_EQ(st.text[1], " Hello world");
  ASSERT_EQ(fake_->calls().size(), 4u);
  // The group's calls start concurrently, so either may reach the scheduler first.
  std::multiset<int> sizes = {fake_->calls()[2].request.prompt_token_ids_size(),
                              fake_->calls()[3].request.prompt_token_ids_size()};
  EXPECT_EQ(sizes.count(2), 1u) << "the token-id prompt [5, 6] reaches the scheduler as given";

  // A bad prompt of the list is named.
  json bad = Post({{"prompt", {"fine", json::array({-1})}}}, &status);
  EXPECT_EQ(status, 400) << bad.dump();
  EXPECT_THAT(bad["error"]["message"].get<std::string>(), ::testing::HasSubstr("prompt[1]"));
}

TEST_F(OpenAiServerTest, StreamedChoicesCarryTheirIndex) {
  Script script;
  script.events = {Event(1, "Bye"), Event(0, "Hello", ipb::FINISH_REASON_LENGTH),
                   Event(1, "now", ipb::FINISH_REASON_LENGTH)};
  fake_->SetScript(script);
  httplib::Client client("127.0.0.1", http_->port());
  httplib::Result r = client.Post(
      "/v1/completions", json{{"prompt", "Once"}, {"n", 2}, {"stream", true}}.dump(),
      "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  Streamed st = ParseStream(r->body);
  std::map<int, std::string>& text = st.text;
  std::map<int, std::string>& finish = st.finish;
  EXPECT_TRUE(st.done);
  EXPECT_EQ(text[0], " Hello");
  EXPECT_EQ(text[1], " Bye now");
  EXPECT_EQ(finish[0], "length");
  EXPECT_EQ(finish[1], "length");
}

TEST_F(OpenAiServerTest, AStopStringEndsOnlyItsChoiceAndTheLastOneCancels) {
  Script script;
  script.events = {Event(0, "Hello world"), Event(1, "Bye now"), Event(1, "and then"),
                   Event(0, "again")};
  script.hang_after_events = true;  // the scheduler would go on: the frontend must cancel
  fake_->SetScript(script);
  int status = 0;
  json r = Post({{"prompt", "Once"}, {"n", 2}, {"stop", {"world", "then"}}}, &status);
  ASSERT_EQ(status, 200) << r.dump();
  EXPECT_EQ(r["choices"][0]["text"], " Hello ");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(r["choices"][1]["text"], " Bye now and ");
  EXPECT_EQ(r["choices"][1]["finish_reason"], "stop");
  ASSERT_TRUE(fake_->WaitForDoneCalls(1, absl::Seconds(30)));
  EXPECT_TRUE(fake_->calls()[0].cancelled);
}

// The client closing its connection while a non-streamed request runs cancels the
// scheduler call at once (the fake would otherwise hang for 30 s).
TEST_F(OpenAiServerTest, AClientLeavingCancelsANonStreamedRequest) {
  Script script;
  script.events = {Event(0, "Hello")};
  script.hang_after_events = true;
  fake_->SetScript(script);
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(http_->port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const std::string body = json{{"prompt", "Once"}, {"max_tokens", 8}}.dump();
  const std::string request = absl::StrCat(
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: ", body.size(),
      "\r\n\r\n", body);
  ASSERT_EQ(write(fd, request.data(), request.size()), static_cast<ssize_t>(request.size()));
  const absl::Time end = absl::Now() + absl::Seconds(10);
  while (fake_->calls().empty() && absl::Now() < end) absl::SleepFor(absl::Milliseconds(5));
  ASSERT_EQ(fake_->calls().size(), 1u);
  close(fd);
  ASSERT_TRUE(fake_->WaitForDoneCalls(1, absl::Seconds(20)));
  EXPECT_TRUE(fake_->calls()[0].cancelled);
}

// The scheduler going away mid-request, or ending a stream without finishing it, is an
// upstream loss: 503 with OpenAI's error object.
// A scheduler lost mid-stream: the request is continued on the next one, which gets the
// tokens already streamed; the client sees one response, its usage the whole run's.
TEST_F(OpenAiResumeTest, ABrokenStreamIsContinuedOnTheNextScheduler) {
  Script first;
  first.events = {Event(0, "Hello"), Event(1, "Bye", ipb::FINISH_REASON_STOP),
                  Event(0, "there")};
  first.final_status = grpc::Status(grpc::StatusCode::UNAVAILABLE, "Socket closed");
  Script second;
  second.events = {Event(0, "world", ipb::FINISH_REASON_LENGTH)};
  fake_->QueueScript(first);
  fake_->QueueScript(second);
  {
    int status = 0;
    json r = Post({{"prompt", "Once"}, {"n", 2}, {"max_tokens", 8}}, &status);
    ASSERT_EQ(status, 200) << r.dump();
    ASSERT_EQ(r["choices"].size(), 2u);
    EXPECT_EQ(r["choices"][0]["text"], " Hello there world");
    EXPECT_EQ(r["choices"][1]["text"], " Bye");
    const int completion = static_cast<int>(Encode("Hello").size() + Encode("there").size() +
                                            Encode("world").size() + Encode("Bye").size());
    EXPECT_EQ(r["usage"]["completion_tokens"], completion);
  }
  const std::vector<FakeScheduler::CallRecord> calls = fake_->calls();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_FALSE(calls[0].request.has_continuation());
  const ipb::Continuation& c = calls[1].request.continuation();
  ASSERT_EQ(c.choices_size(), 1) << "the finished choice is left out";
  EXPECT_EQ(c.choices(0).index(), 0);
  std::vector<int32_t> want = Encode("Hello");
  for (int32_t t : Encode("there")) want.push_back(t);
  EXPECT_EQ(std::vector<int32_t>(c.choices(0).token_ids().begin(), c.choices(0).token_ids().end()),
            want);
  EXPECT_EQ(calls[1].request.prompt_token_ids_size(), calls[0].request.prompt_token_ids_size());
}

TEST_F(OpenAiServerSurfaceTest, ServedNamesAreTheModelsIdsAndOthersAre404) {
  fake_->SetScript(TokensScript(Encode("Hello"), ipb::FINISH_REASON_LENGTH, 2));
  httplib::Client client = Client();
  const httplib::Headers key = {{"Authorization", "Bearer sekret"}};
  for (const char* name : {"tiny-llama", "alias"}) {
    const json body = {{"model", name}, {"prompt", "Once"}, {"max_tokens", 4}};
    httplib::Result r = client.Post("/v1/completions", key, body.dump(), "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << name << ": " << r->body;
    EXPECT_EQ(json::parse(r->body)["model"], "tiny-llama") << "responses carry the first name";
  }
  const json other = {{"model", "gpt-4"}, {"prompt", "Once"}, {"max_tokens", 4}};
  httplib::Result r = client.Post("/v1/completions", key, other.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_THAT(r->body, ::testing::HasSubstr("this server serves 'tiny-llama'"));
  r = client.Get("/v1/models", key);
  ASSERT_TRUE(r);
  const json models = json::parse(r->body);
  ASSERT_EQ(models["data"].size(), 2u);
  EXPECT_EQ(models["data"][0]["id"], "tiny-llama");
  EXPECT_EQ(models["data"][1]["id"], "alias");
}

TEST_F(OpenAiServerSurfaceTest, MetricsAndVersionAreOpenAndTheApiStillNeedsItsKey) {
  httplib::Client client = Client();
  httplib::Result metrics = client.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  EXPECT_EQ(metrics->body, "folio_test_metric 1\n");
  EXPECT_THAT(Header(metrics, "Content-Type"), ::testing::HasSubstr("text/plain"));
  httplib::Result version = client.Get("/version");
  ASSERT_TRUE(version);
  EXPECT_EQ(version->status, 200);
  EXPECT_FALSE(json::parse(version->body)["version"].get<std::string>().empty());
  httplib::Result models = client.Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 401) << "the API itself keeps its key";
  httplib::Result post = client.Post("/metrics", "", "text/plain");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 405);
}

TEST_F(OpenAiServerSurfaceTest, TheChatPageIsServedWithoutAKeyAndIsSelfContained) {
  httplib::Client client = Client();
  httplib::Result page = client.Get("/");
  ASSERT_TRUE(page);
  ASSERT_EQ(page->status, 200) << "the page is open even with API keys: " << page->body;
  EXPECT_THAT(Header(page, "Content-Type"), ::testing::StartsWith("text/html"));
  EXPECT_THAT(Header(page, "Content-Security-Policy"), ::testing::HasSubstr("connect-src 'self'"));
  const std::string& html = page->body;
  EXPECT_THAT(html, ::testing::HasSubstr("<form id=\"chat-form\""));
  EXPECT_THAT(html, ::testing::HasSubstr("/v1/chat/completions"));
  EXPECT_THAT(html, ::testing::HasSubstr("/v1/models"));
  // Nothing from elsewhere: no scripts, styles, images or fonts of another origin.
  for (const char* external : {"src=\"http", "href=\"http", "src='http", "href='http",
                               "@import", "url(http", "//cdn"}) {
    const size_t at = html.find(external);
    if (at != std::string::npos) ADD_FAILURE() << external << " in: " << html.substr(at, 80);
  }
  // The binary serves the page in the source tree (CMake re-embeds it when it changes).
  std::ifstream source(FOLIO_CHAT_PAGE_FILE, std::ios::binary);
  ASSERT_TRUE(source) << FOLIO_CHAT_PAGE_FILE;
  const std::string tree(std::istreambuf_iterator<char>(source), {});
  EXPECT_TRUE(html == tree) << "the page served (" << html.size() << " bytes) is not "
                            << FOLIO_CHAT_PAGE_FILE << " (" << tree.size() << " bytes)";

  httplib::Result index = client.Get("/index.html");
  ASSERT_TRUE(index);
  EXPECT_EQ(index->status, 200);
  EXPECT_TRUE(index->body == html) << "/index.html is another page";
  EXPECT_THAT(Header(index, "Content-Type"), ::testing::StartsWith("text/html"));

  httplib::Result post = client.Post("/", "", "text/plain");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 405);
  EXPECT_EQ(Header(post, "Allow"), "GET");
  httplib::Result models = client.Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 401) << "the API the page calls keeps its key";
}

TEST_F(OpenAiServerSurfaceTest, CorsPreflightAndHeadersForAllowedOriginsOnly) {
  httplib::Client client = Client();
  const httplib::Headers preflight = {{"Origin", "http://ui.example"},
                                      {"Access-Control-Request-Method", "POST"},
                                      {"Access-Control-Request-Headers", "authorization, content-type"}};
  httplib::Result r = client.Options("/v1/chat/completions", preflight);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 204) << "a preflight needs no API key";
  EXPECT_EQ(Header(r, "Access-Control-Allow-Origin"), "http://ui.example");
  EXPECT_THAT(Header(r, "Access-Control-Allow-Methods"), ::testing::HasSubstr("POST"));
  EXPECT_EQ(Header(r, "Access-Control-Allow-Headers"), "authorization, content-type");

  // The request itself: the CORS header on the answer, errors included.
  r = client.Get("/v1/models", {{"Origin", "http://ui.example"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(Header(r, "Access-Control-Allow-Origin"), "http://ui.example");
  r = client.Get("/v1/models",
                 {{"Origin", "http://ui.example"}, {"Authorization", "Bearer sekret"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(Header(r, "Access-Control-Allow-Origin"), "http://ui.example");
  EXPECT_EQ(Header(r, "Vary"), "Origin");

  // An origin not on the list gets no CORS header, and its preflight is no preflight.
  const httplib::Headers stranger = {{"Origin", "http://evil.example"},
                                     {"Access-Control-Request-Method", "POST"}};
  r = client.Options("/v1/chat/completions", stranger);
  ASSERT_TRUE(r);
  EXPECT_NE(r->status, 204);
  EXPECT_EQ(Header(r, "Access-Control-Allow-Origin"), "");
}

TEST_F(OpenAiServerTest, TokenizeAndDetokenizeRoundTrip) {
  httplib::Client client("127.0.0.1", http_->port());
  httplib::Result r = client.Post("/tokenize", json({{"prompt", "Once upon a time"}}).dump(),
                                  "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json t = json::parse(r->body);
  std::vector<int32_t> want = Encode("Once upon a time");
  const std::vector<int32_t> got = t["tokens"].get<std::vector<int32_t>>();
  // The model's own BOS rule: the test vocabulary adds BOS, so it leads.
  ASSERT_EQ(got.size(), want.size() + 1);
  EXPECT_EQ(std::vector<int32_t>(got.begin() + 1, got.end()), want);
  EXPECT_EQ(t["count"], got.size());
  EXPECT_GT(t["max_model_len"].get<int>(), 0);
  r = client.Post("/tokenize",
                  json({{"prompt", "Once upon a time"}, {"add_special_tokens", false}}).dump(),
                  "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(json::parse(r->body)["tokens"].get<std::vector<int32_t>>(), want);

  r = client.Post("/detokenize", json({{"tokens", want}}).dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["prompt"], Decode(want));

  // Chat messages go through the chat template.
  r = client.Post("/tokenize",
                  json({{"messages", json::array({{{"role", "user"}, {"content", "Hi"}}})}}).dump(),
                  "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_GT(json::parse(r->body)["count"].get<int>(), 1);

  // Bad bodies name what is wrong.
  struct Bad {
    const char* path;
    json body;
    const char* message;
  } bad[] = {{"/tokenize", json::object(), "give one of prompt and messages"},
             {"/tokenize", {{"prompt", 5}}, "prompt must be a string"},
             {"/tokenize", {{"prompt", "x"}, {"add_special_tokens", "yes"}}, "add_special_tokens"},
             {"/tokenize", {{"prompt", "x"}, {"bogus", 1}}, "unknown field"},
             {"/detokenize", {{"tokens", {1, -4}}}, "tokens[1] is -4"},
             {"/detokenize", {{"tokens", "1 2"}}, "tokens must be an array"}};
  for (const Bad& b : bad) {
    r = client.Post(b.path, b.body.dump(), "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << b.body.dump();
    EXPECT_THAT(r->body, ::testing::HasSubstr(b.message)) << b.body.dump();
  }
  r = client.Post("/tokenize", "{not json", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
}

TEST_F(OpenAiServerTest, ErrorsNameTheFieldTheClientSent) {
  httplib::Client client("127.0.0.1", http_->port());
  auto param_of = [&](const std::string& path, const json& body, std::string* message) {
    httplib::Result r = client.Post(path, body.dump(), "application/json");
    if (!r || r->status != 400) return std::string("status ") + (r ? std::to_string(r->status) : "none");
    const json e = json::parse(r->body)["error"];
    *message = e["message"].get<std::string>();
    return e["param"].is_null() ? std::string("null") : e["param"].get<std::string>();
  };
  const json user = json::array({{{"role", "user"}, {"content", "Hi"}}});
  std::string message;
  EXPECT_EQ(param_of("/v1/chat/completions",
                     {{"messages", user}, {"logprobs", true}, {"top_logprobs", 50}}, &message),
            "top_logprobs");
  EXPECT_THAT(message, ::testing::HasSubstr("top_logprobs is 50"));
  EXPECT_EQ(param_of("/v1/completions", {{"prompt", "Once"}, {"n", 1000}}, &message), "n");
  EXPECT_EQ(param_of("/v1/completions", {{"prompt", "Once"}, {"max_tokens", 100000}}, &message),
            "max_tokens");
  EXPECT_THAT(message, ::testing::HasSubstr("may be at most"));
  const std::vector<int32_t> long_prompt(kMaxModelLen + 5, 300);
  EXPECT_EQ(param_of("/v1/completions", {{"prompt", long_prompt}, {"max_tokens", 1}}, &message),
            "prompt");
  EXPECT_THAT(message, ::testing::HasSubstr(absl::StrCat("prompt has ", kMaxModelLen + 5, " tokens")));
  EXPECT_THAT(message, ::testing::HasSubstr(absl::StrCat("is ", kMaxModelLen, " tokens")));
}

TEST_F(OpenAiServerTest, UpstreamLossIs503) {
  for (const grpc::Status& end :
       {grpc::Status(grpc::StatusCode::UNAVAILABLE, "connection lost"),
        grpc::Status(grpc::StatusCode::CANCELLED, "the peer went away"), grpc::Status::OK}) {
    Script script;
    script.events = {Event(0, "Hello")};
    script.final_status = end;
    fake_->SetScript(script);
    int status = 0;
    json r = Post({{"prompt", "Once"}, {"max_tokens", 8}}, &status);
    EXPECT_EQ(status, 503) << r.dump();
    EXPECT_EQ(r["error"]["type"], "service_unavailable_error") << r.dump();
  }
}

}  // namespace
}  // namespace folio::frontend::testing
