// OpenAiServer in front of a scripted FakeScheduler: choices are told apart by the
// scheduler event's index (the n > 1 path, which the real scheduler does not serve yet),
// n reaches the scheduler, and a stop string ends only its own choice.
#include "services/frontend/http/openai_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

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
    OpenAiServerOptions options;
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

  json Post(const json& body, int* status) {
    httplib::Client client("127.0.0.1", http_->port());
    httplib::Result r = client.Post("/v1/completions", body.dump(), "application/json");
    *status = r ? r->status : 0;
    return r ? json::parse(r->body, nullptr, false) : json();
  }

  std::unique_ptr<OpenAiServer> http_;
  absl::Duration resume_timeout_ = absl::ZeroDuration();  // ResumeOptions.recovery_timeout
};

// With resuming on (the frontend's --recovery_timeout_ms).
class OpenAiResumeTest : public OpenAiServerTest {
 protected:
  OpenAiResumeTest() { resume_timeout_ = absl::Seconds(10); }
};

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
  std::string text[2];
  std::string finish[2];
  bool done = false;
  for (absl::string_view event : absl::StrSplit(r->body, "\n\n", absl::SkipEmpty())) {
    if (event == "data: [DONE]") {
      done = true;
      continue;
    }
    json chunk = json::parse(event.substr(6));
    for (const json& c : chunk["choices"]) {
      const int i = c["index"];
      text[i] += c["text"].get<std::string>();
      if (!c["finish_reason"].is_null()) finish[i] = c["finish_reason"];
    }
  }
  EXPECT_TRUE(done);
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
