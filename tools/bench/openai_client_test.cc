#include "tools/bench/openai_client.h"

#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"

namespace folio::bench {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using nlohmann::json;
using Clock = Backend::Clock;

std::string Chunk(const json& choices, const json& usage = nullptr) {
  json c = {{"id", "cmpl-1"}, {"object", "text_completion"}, {"choices", choices}};
  c["usage"] = usage;
  return "data: " + c.dump() + "\n\n";
}

TEST(OpenAiClientTest, RequestBodyAsksForTokenIdsAndUsage) {
  BenchRequest r;
  r.prompt_token_ids = {5, 6, 7};
  r.output_len = 9;
  json body = CompletionRequestBody(r, "m");
  EXPECT_EQ(body["model"], "m");
  EXPECT_EQ(body["prompt"], json::array({5, 6, 7}));
  EXPECT_EQ(body["max_tokens"], 9);
  EXPECT_EQ(body["ignore_eos"], true);
  EXPECT_EQ(body["temperature"], 0);
  EXPECT_EQ(body["stream"], true);
  EXPECT_EQ(body["stream_options"]["include_usage"], true);
  EXPECT_FALSE(body.contains("n"));
  r.n = 3;
  EXPECT_EQ(CompletionRequestBody(r, "m")["n"], 3);
}

TEST(OpenAiClientTest, StreamTimesTextChunksAndTakesTokensFromUsage) {
  RequestResult out;
  const Clock::time_point t0 = Clock::now();
  CompletionStream s(t0, &out);
  using std::chrono::milliseconds;
  // An empty first delta (no text yet) does not count as the first token.
  s.OnBytes(Chunk(json::array({{{"index", 0}, {"text", ""}, {"finish_reason", nullptr}}})),
            t0 + milliseconds(5));
  const std::string second =
      Chunk(json::array({{{"index", 0}, {"text", "Once"}, {"finish_reason", nullptr}}}));
  s.OnBytes(second.substr(0, 10), t0 + milliseconds(9));
  s.OnBytes(second.substr(10), t0 + milliseconds(10));
  s.OnBytes(Chunk(json::array({{{"index", 0}, {"text", " upon"}, {"finish_reason", nullptr}},
                                {{"index", 1}, {"text", " a"}, {"finish_reason", nullptr}}})),
            t0 + milliseconds(14));
  s.OnBytes(Chunk(json::array({{{"index", 0}, {"text", ""}, {"finish_reason", "length"}}})),
            t0 + milliseconds(20));
  EXPECT_FALSE(s.done());
  s.OnBytes(Chunk(json::array(), {{"prompt_tokens", 3}, {"completion_tokens", 7}}) +
                "data: [DONE]\n\n",
            t0 + milliseconds(21));
  EXPECT_TRUE(s.done());
  s.Finish(t0 + milliseconds(22));
  EXPECT_TRUE(out.ok);
  EXPECT_EQ(out.status, "OK");
  EXPECT_NEAR(out.ttft_s, 0.010, 1e-9);
  ASSERT_EQ(out.itl_s.size(), 1u);
  EXPECT_NEAR(out.itl_s[0], 0.004, 1e-9);
  EXPECT_EQ(out.output_tokens, 7);  // usage, not the 3 text pieces
  EXPECT_EQ(out.finish_reason, "length");
  EXPECT_NEAR(out.e2e_s, 0.022, 1e-9);
}

TEST(OpenAiClientTest, WithoutUsageTextPiecesAreCounted) {
  RequestResult out;
  CompletionStream s(Clock::now(), &out);
  s.OnBytes(Chunk(json::array({{{"index", 0}, {"text", "a"}}})) +
                Chunk(json::array({{{"index", 0}, {"text", "b"}}})) + "data: [DONE]\n\n",
            Clock::now());
  s.Finish(Clock::now());
  EXPECT_TRUE(out.ok);
  EXPECT_EQ(out.output_tokens, 2);
}

TEST(OpenAiClientTest, ErrorEventsAndCutStreamsFail) {
  RequestResult out;
  CompletionStream s(Clock::now(), &out);
  s.OnBytes(Chunk(json::array({{{"index", 0}, {"text", "a"}}})) +
                "data: {\"error\": {\"message\": \"worker lost\", \"type\": \"server_error\"}}"
                "\n\ndata: [DONE]\n\n",
            Clock::now());
  s.Finish(Clock::now());
  EXPECT_FALSE(out.ok);
  EXPECT_EQ(out.status, "ERROR_EVENT");
  EXPECT_EQ(out.error_message, "worker lost");
  EXPECT_EQ(out.output_tokens, 1);

  RequestResult cut;
  CompletionStream c(Clock::now(), &cut);
  c.OnBytes(Chunk(json::array({{{"index", 0}, {"text", "a"}}})), Clock::now());
  c.Finish(Clock::now());
  EXPECT_FALSE(cut.ok);
  EXPECT_EQ(cut.status, "UNAVAILABLE");
  EXPECT_THAT(cut.error_message, HasSubstr("before data: [DONE]"));

  RequestResult junk;
  CompletionStream j(Clock::now(), &junk);
  j.OnBytes("data: not json\n\n", Clock::now());
  j.Finish(Clock::now());
  EXPECT_EQ(junk.status, "INVALID_RESPONSE");
}

// A small HTTP server in the test: what the client sends and how it reads answers.
class OpenAiServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
      auth_ = req.get_header_value("Authorization");
      res.set_content(models_, "application/json");
    });
    server_.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      last_body_ = json::parse(req.body);
      if (last_body_["max_tokens"] == 0) {
        res.status = 400;
        res.set_content(
            R"({"error": {"message": "max_tokens must be at least 1", "type": "invalid_request_error"}})",
            "application/json");
        return;
      }
      const int n = last_body_.value("n", 1);
      std::string events;
      for (int i = 0; i < last_body_["max_tokens"].get<int>(); ++i) {
        json choices = json::array();
        for (int c = 0; c < n; ++c) choices.push_back({{"index", c}, {"text", "x"}});
        events += Chunk(choices);
      }
      events += Chunk(json::array(),
                      {{"completion_tokens", n * last_body_["max_tokens"].get<int>()}});
      events += "data: [DONE]\n\n";
      res.set_content(events, "text/event-stream");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    ASSERT_GT(port_, 0);
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  void TearDown() override {
    server_.stop();
    if (thread_.joinable()) thread_.join();
  }
  std::string Url() { return "http://127.0.0.1:" + std::to_string(port_); }

  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  std::string models_ = R"({"object": "list", "data": [{"id": "tiny", "max_model_len": 64}]})";
  std::string auth_;
  json last_body_;
};

TEST_F(OpenAiServerTest, ConnectsRunsAndReportsHttpErrors) {
  OpenAiOptions o;
  o.base_url = Url();
  o.api_key = "k";
  o.vocab_size = 100;
  auto backend = OpenAiBackend::Create(o);
  ASSERT_TRUE(backend.ok()) << backend.status();
  absl::StatusOr<ModelFacts> facts = (*backend)->Connect();
  ASSERT_TRUE(facts.ok()) << facts.status();
  EXPECT_EQ(auth_, "Bearer k");
  EXPECT_EQ(facts->name, "tiny");
  EXPECT_EQ(facts->vocab_size, 100);
  EXPECT_EQ(facts->max_model_len, 64);
  EXPECT_THAT(facts->special_ids, ElementsAre(0, 1, 2));

  BenchRequest r;
  r.prompt_token_ids = {3, 4};
  r.output_len = 5;
  RequestResult out;
  (*backend)->Run(r, std::nullopt, &out);
  EXPECT_TRUE(out.ok) << out.status << " " << out.error_message;
  EXPECT_EQ(out.output_tokens, 5);
  EXPECT_EQ(out.prompt_tokens, 2);
  EXPECT_EQ(last_body_["model"], "tiny");

  // Parallel sampling: n goes out, the tokens of every choice are counted.
  r.n = 2;
  RequestResult two;
  (*backend)->Run(r, std::nullopt, &two);
  EXPECT_TRUE(two.ok);
  EXPECT_EQ(last_body_["n"], 2);
  EXPECT_EQ(two.output_tokens, 10);
  EXPECT_EQ(two.itl_s.size(), 4u);  // 5 chunks, each carrying text

  r.n = 1;
  r.output_len = 0;
  RequestResult bad;
  (*backend)->Run(r, std::nullopt, &bad);
  EXPECT_FALSE(bad.ok);
  EXPECT_TRUE(bad.sent);
  EXPECT_EQ(bad.status, "HTTP_400");
  EXPECT_EQ(bad.error_message, "max_tokens must be at least 1");

  r.beam_width = 2;
  EXPECT_EQ((*backend)->CanSend(r).code(), absl::StatusCode::kUnimplemented);
}

TEST_F(OpenAiServerTest, MissingFactsAndUnreachableServersAreClearErrors) {
  OpenAiOptions o;
  o.base_url = Url();
  auto backend = OpenAiBackend::Create(o);
  ASSERT_TRUE(backend.ok());
  absl::StatusOr<ModelFacts> facts = (*backend)->Connect();
  ASSERT_FALSE(facts.ok());
  EXPECT_THAT(facts.status().message(), HasSubstr("--model_file=PATH.gguf"));

  models_ = R"({"object": "list", "data": [{"id": "tiny"}]})";
  o.vocab_size = 100;
  backend = OpenAiBackend::Create(o);
  facts = (*backend)->Connect();
  ASSERT_FALSE(facts.ok());
  EXPECT_THAT(facts.status().message(), HasSubstr("gives no max_model_len"));
  o.max_model_len = 32;
  o.served_model_name = "other";
  backend = OpenAiBackend::Create(o);
  facts = (*backend)->Connect();
  ASSERT_TRUE(facts.ok()) << facts.status();
  EXPECT_EQ(facts->name, "other");
  EXPECT_EQ(facts->max_model_len, 32);

  o.base_url = "http://127.0.0.1:1";
  backend = OpenAiBackend::Create(o);
  facts = (*backend)->Connect();
  ASSERT_FALSE(facts.ok());
  EXPECT_EQ(facts.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(facts.status().message(), HasSubstr("GET http://127.0.0.1:1/v1/models failed"));
  o.base_url = "127.0.0.1:8000";
  EXPECT_EQ(OpenAiBackend::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace folio::bench
