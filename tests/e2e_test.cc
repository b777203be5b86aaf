// End to end: the four services on loopback, driven through the public API.
#include <signal.h>

#include <atomic>
#include <fstream>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cluster.h"
#include "tests/streams.h"

namespace folio {
namespace {

using ::testing::HasSubstr;
using testing::Cluster;
using testing::ClusterOptions;
namespace v1 = folio::v1;

struct Completion {
  grpc::Status status;
  std::string text;
  std::vector<int32_t> token_ids;
  v1::FinishReason finish = v1::FINISH_REASON_UNSPECIFIED;
  v1::Usage usage;
};

v1::GenerateRequest Greedy(const std::string& prompt, int max_tokens) {
  v1::GenerateRequest req;
  req.set_prompt(prompt);
  req.mutable_sampling()->set_max_tokens(max_tokens);
  req.mutable_sampling()->set_temperature(0);
  return req;
}

Completion Generate(v1::TextGeneration::Stub& stub, const v1::GenerateRequest& req,
                    int cancel_after_tokens = -1) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  Completion c;
  auto reader = stub.Generate(&ctx, req);
  v1::GenerateResponse resp;
  while (reader->Read(&resp)) {
    c.text += resp.text();
    for (const auto& t : resp.tokens()) c.token_ids.push_back(t.token_id());
    if (resp.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
      c.finish = resp.finish_reason();
      c.usage = resp.usage();
    }
    if (cancel_after_tokens >= 0 && static_cast<int>(c.token_ids.size()) > cancel_after_tokens) {
      ctx.TryCancel();
    }
  }
  c.status = reader->Finish();
  return c;
}

class E2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::ModelsDir();
    if (!dir_) GTEST_SKIP() << testing::kModelsDirHelp;
    golden_ = testing::GoldenText(*dir_);
  }
  std::unique_ptr<Cluster> StartCluster(ClusterOptions options = {}) {
    options.model = *dir_ + "/stories260K/stories260K.gguf";
    auto cluster = Cluster::Start(options);
    EXPECT_TRUE(cluster.ok()) << cluster.status();
    return cluster.ok() ? std::move(*cluster) : nullptr;
  }
  std::optional<std::string> dir_;
  std::string golden_;
};

TEST_F(E2eTest, GreedyFromBosIsTheGoldenText) {
  auto cluster = StartCluster();
  ASSERT_NE(cluster, nullptr);
  Completion c = Generate(cluster->frontend(), Greedy("", 200));
  ASSERT_TRUE(c.status.ok()) << c.status.error_message();
  EXPECT_EQ(c.text, golden_);
  EXPECT_EQ(c.finish, v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(c.usage.completion_tokens(), 200);
  EXPECT_TRUE(cluster->WaitForEmptyPool(absl::Seconds(10)));
}

// Greedy output does not depend on the TP degree: two worker ranks (Gloo between them),
// the scheduler fanning every step out to both.
TEST_F(E2eTest, GoldenTextWithTwoTensorParallelRanks) {
  auto cluster = StartCluster(ClusterOptions{.tp_size = 2});
  ASSERT_NE(cluster, nullptr);
  Completion c = Generate(cluster->frontend(), Greedy("", 200));
  ASSERT_TRUE(c.status.ok()) << c.status.error_message();
  EXPECT_EQ(c.text, golden_);
  EXPECT_TRUE(cluster->WaitForEmptyPool(absl::Seconds(10)));
}

class E2eBlockSizeTest : public E2eTest, public ::testing::WithParamInterface<int> {};

TEST_P(E2eBlockSizeTest, GoldenTextAtOtherBlockSizes) {
  auto cluster = StartCluster(
      ClusterOptions{.scheduler_args = {"--block_size=" + std::to_string(GetParam())}});
  ASSERT_NE(cluster, nullptr);
  Completion c = Generate(cluster->frontend(), Greedy("", 200));
  ASSERT_TRUE(c.status.ok()) << c.status.error_message();
  EXPECT_EQ(c.text, golden_);
  EXPECT_EQ(cluster->CacheStats().block_size(), GetParam());
}

INSTANTIATE_TEST_SUITE_P(BlockSizes, E2eBlockSizeTest, ::testing::Values(8, 32));

TEST_F(E2eTest, PreemptionUnderATinyPoolKeepsTheGoldenText) {
  // 40 blocks of 16: a 201-token sequence needs 13, so three fit and the rest wait or
  // get preempted.
  auto cluster = StartCluster(ClusterOptions{.scheduler_args = {"--num_blocks=40"}});
  ASSERT_NE(cluster, nullptr);
  std::vector<Completion> results(6);
  std::vector<std::thread> clients;
  for (auto& r : results) {
    clients.emplace_back([&] { r = Generate(cluster->frontend(), Greedy("", 200)); });
  }
  for (auto& t : clients) t.join();
  for (const auto& r : results) {
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.text, golden_);
  }
  const std::string metrics =
      testing::HttpGet(cluster->scheduler_process().metrics_port(), "/metrics");
  EXPECT_GT(testing::MetricValue(metrics, "folio_scheduler_preemptions_total"), 0);
  EXPECT_GT(testing::MetricValue(metrics, "folio_scheduler_generation_tokens_total"), 1000);
  EXPECT_GT(testing::MetricValue(metrics, "folio_scheduler_time_to_first_token_seconds_count"), 0);
  // Every service's page passes promtool.
  for (testing::ServiceProcess* p :
       {&cluster->scheduler_process(), &cluster->frontend_process(), &cluster->worker_process(),
        &cluster->cachemgr_process()}) {
    const std::string file = ::testing::TempDir() + "/metrics.txt";
    std::ofstream(file) << testing::HttpGet(p->metrics_port(), "/metrics");
    testing::CommandResult promtool = testing::RunCommand("promtool check metrics < " + file);
    EXPECT_EQ(promtool.exit_code, 0) << promtool.output;
  }
  EXPECT_TRUE(cluster->WaitForEmptyPool(absl::Seconds(10)));
}

TEST_F(E2eTest, RepeatedPromptHitsThePrefixCache) {
  auto cluster = StartCluster();
  ASSERT_NE(cluster, nullptr);
  const std::string prompt = golden_.substr(0, 300);
  Completion a = Generate(cluster->frontend(), Greedy(prompt, 40));
  Completion b = Generate(cluster->frontend(), Greedy(prompt, 40));
  ASSERT_TRUE(a.status.ok() && b.status.ok());
  EXPECT_EQ(a.text, b.text);
  EXPECT_GT(b.usage.cached_prompt_tokens(), 0);
  const std::string metrics =
      testing::HttpGet(cluster->cachemgr_process().metrics_port(), "/metrics");
  EXPECT_GT(testing::MetricValue(metrics, "folio_cachemgr_prefix_cache_hits_total"), 0);
}

TEST_F(E2eTest, TwoHundredStreamsHalfCancelledLeaveThePoolFull) {
  auto cluster = StartCluster();
  ASSERT_NE(cluster, nullptr);
  constexpr int kClients = 200;
  std::vector<Completion> results(kClients);
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back([&, i] {
      v1::GenerateRequest req = Greedy("Once upon a time", 24);
      results[i] = Generate(cluster->frontend(), req, i % 2 == 0 ? 0 : -1);
    });
  }
  for (auto& t : clients) t.join();
  int completed = 0, cancelled = 0;
  for (int i = 0; i < kClients; ++i) {
    if (i % 2 == 0) {
      // Cancelled after the first token (unless it had already finished).
      EXPECT_TRUE(results[i].status.error_code() == grpc::StatusCode::CANCELLED ||
                  results[i].status.ok())
          << results[i].status.error_message();
      cancelled += results[i].status.error_code() == grpc::StatusCode::CANCELLED;
    } else {
      ASSERT_TRUE(results[i].status.ok()) << results[i].status.error_message();
      EXPECT_EQ(results[i].token_ids.size(), 24u);
      ++completed;
    }
  }
  EXPECT_EQ(completed, kClients / 2);
  EXPECT_GT(cancelled, 0);
  EXPECT_TRUE(cluster->WaitForEmptyPool(absl::Seconds(20)))
      << "free " << cluster->CacheStats().num_blocks_free() << " of "
      << cluster->CacheStats().num_blocks_total();
}

TEST_F(E2eTest, StopStringAcrossTokenBoundaries) {
  auto cluster = StartCluster();
  ASSERT_NE(cluster, nullptr);
  // The stop string spans several tokens and starts mid-word ("ball" ends in "all").
  const size_t at = golden_.find("all. She wanted");
  ASSERT_NE(at, std::string::npos);
  v1::GenerateRequest req = Greedy("", 200);
  req.mutable_sampling()->add_stop("never appears");
  req.mutable_sampling()->add_stop("all. She wanted");
  Completion c = Generate(cluster->frontend(), req);
  ASSERT_TRUE(c.status.ok()) << c.status.error_message();
  EXPECT_EQ(c.finish, v1::FINISH_REASON_STOP);
  EXPECT_EQ(c.text, golden_.substr(0, at));
  EXPECT_TRUE(cluster->WaitForEmptyPool(absl::Seconds(10)));
}

// Pipelined steps (--async_steps=on, the default) against synchronous ones, through the
// whole cluster: the mixed streams (greedy, seeded, n = 3, beams) plus seeded requests that
// end on EOS or on stop strings, which the frontend matches in text, come out token for
// token the same, and the steps really were planned ahead.
TEST_F(E2eTest, AsyncStepsGiveTheSameStreamsAsSynchronousSteps) {
  std::vector<v1::GenerateRequest> requests = testing::MixedRequests();
  for (int i = 0; i < 6; ++i) {
    v1::GenerateRequest req;
    req.set_prompt(i % 2 == 0 ? "Lily and Tom" : "The little dog");
    v1::SamplingOptions* s = req.mutable_sampling();
    s->set_max_tokens(200);
    s->set_temperature(0.9f);
    s->set_seed(31 + i);
    if (i >= 3) {
      s->add_stop(" the");
      s->add_stop(".");
    }
    requests.push_back(std::move(req));
  }
  std::vector<testing::Stream> want;
  for (const char* mode : {"off", "on"}) {
    auto cluster = StartCluster(
        ClusterOptions{.scheduler_args = {std::string("--async_steps=") + mode}});
    ASSERT_NE(cluster, nullptr);
    std::vector<testing::Stream> got = testing::RunStreams(cluster->frontend(), requests);
    const std::string metrics =
        testing::HttpGet(cluster->scheduler_process().metrics_port(), "/metrics");
    const double ahead =
        testing::MetricValue(metrics, "folio_scheduler_steps_planned_ahead_total");
    if (std::string(mode) == "off") {
      EXPECT_EQ(ahead, 0);
      want = std::move(got);
    } else {
      EXPECT_GT(ahead, 50);
      testing::ExpectSameStreams(want, got);
    }
    EXPECT_TRUE(cluster->WaitForEmptyPool(absl::Seconds(10)));
  }
}

// Speculative decoding (--speculative=ngram) streams what plain decoding streams: the
// golden text, and the same tokens for greedy, seeded, stop-string and multi-choice
// requests, several tokens now arriving per step; proposals are counted and accepted.
TEST_F(E2eTest, SpeculativeDecodingGivesTheSameStreams) {
  std::vector<v1::GenerateRequest> requests = testing::MixedRequests();
  requests.push_back(Greedy("", 200));
  for (int i = 0; i < 4; ++i) {
    v1::GenerateRequest req;
    req.set_prompt(i % 2 == 0 ? "Lily and Tom" : "The little dog");
    v1::SamplingOptions* s = req.mutable_sampling();
    s->set_max_tokens(150);
    s->set_temperature(i < 2 ? 0.0f : 0.9f);
    s->set_seed(31 + i);
    if (i % 2 == 1) s->add_stop(" the");
    requests.push_back(std::move(req));
  }
  std::vector<testing::Stream> want;
  for (const char* mode : {"off", "ngram", "draft"}) {
    SCOPED_TRACE(mode);
    ClusterOptions options{
        .scheduler_args = {std::string("--speculative=") + mode, "--spec_ngram_min=1",
                           "--spec_max_batch=64"}};
    // The draft model: stories260K drafting for itself (its greedy picks are the model's).
    if (std::string(mode) == "draft") {
      options.worker_args = {"--draft_model=" + *dir_ + "/stories260K/stories260K.gguf"};
    }
    auto cluster = StartCluster(options);
    ASSERT_NE(cluster, nullptr);
    std::vector<testing::Stream> got = testing::RunStreams(cluster->frontend(), requests);
    const std::string metrics =
        testing::HttpGet(cluster->scheduler_process().metrics_port(), "/metrics");
    // Counted by proposer: the scheduler's --speculative.
    const std::string label = std::string("{proposer=\"") + mode + "\"}";
    const double proposed =
        testing::MetricValue(metrics, "folio_scheduler_speculative_proposed_tokens_total" + label);
    const double accepted =
        testing::MetricValue(metrics, "folio_scheduler_speculative_accepted_tokens_total" + label);
    if (std::string(mode) == "off") {
      EXPECT_EQ(proposed, -1) << "no proposer, no samples";
      EXPECT_EQ(metrics.find("folio_scheduler_speculative_proposed_tokens_total{"),
                std::string::npos);
      want = std::move(got);
    } else {
      EXPECT_GT(accepted, 50) << proposed << " proposed";
      EXPECT_GT(proposed, accepted);
      testing::ExpectSameStreams(want, got);
      // A request may ask for fewer proposals or none; more than 16 is refused.
      v1::GenerateRequest none = Greedy("", 200);
      none.mutable_sampling()->set_num_speculative_tokens(0);
      Completion c = Generate(cluster->frontend(), none);
      ASSERT_TRUE(c.status.ok()) << c.status.error_message();
      EXPECT_EQ(c.text, golden_);
      v1::GenerateRequest bad = Greedy("", 8);
      bad.mutable_sampling()->set_num_speculative_tokens(17);
      c = Generate(cluster->frontend(), bad);
      EXPECT_EQ(c.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
      EXPECT_THAT(c.status.error_message(), HasSubstr("num_speculative_tokens"));
    }
    EXPECT_TRUE(cluster->WaitForEmptyPool(absl::Seconds(10)));
  }
}

// With two tensor-parallel ranks, both proposers stream what plain decoding streams on
// the same ranks (every rank runs the whole draft; rank 0's proposals are the step's).
TEST_F(E2eTest, SpeculativeDecodingWithTwoTensorParallelRanks) {
  std::vector<v1::GenerateRequest> requests = {Greedy("", 200)};
  for (int i = 0; i < 3; ++i) {
    v1::GenerateRequest req;
    req.set_prompt(i == 0 ? "Lily and Tom" : "The little dog");
    v1::SamplingOptions* s = req.mutable_sampling();
    s->set_max_tokens(120);
    s->set_temperature(i == 0 ? 0.0f : 0.9f);
    s->set_seed(7 + i);
    requests.push_back(std::move(req));
  }
  std::vector<testing::Stream> want;
  for (const char* mode : {"off", "ngram", "draft"}) {
    SCOPED_TRACE(mode);
    ClusterOptions options{
        .tp_size = 2,
        .scheduler_args = {std::string("--speculative=") + mode, "--spec_ngram_min=1"}};
    if (std::string(mode) == "draft") {
      options.worker_args = {"--draft_model=" + *dir_ + "/stories260K/stories260K.gguf"};
    }
    auto cluster = StartCluster(options);
    ASSERT_NE(cluster, nullptr);
    std::vector<testing::Stream> got = testing::RunStreams(cluster->frontend(), requests);
    if (std::string(mode) == "off") {
      ASSERT_FALSE(got.empty());
      want = std::move(got);
      continue;
    }
    testing::ExpectSameStreams(want, got);
    const double accepted = testing::MetricValue(
        testing::HttpGet(cluster->scheduler_process().metrics_port(), "/metrics"),
        std::string("folio_scheduler_speculative_accepted_tokens_total{proposer=\"") + mode +
            "\"}");
    EXPECT_GT(accepted, 20);
    EXPECT_TRUE(cluster->WaitForEmptyPool(absl::Seconds(10)));
  }
}

TEST_F(E2eTest, FullWaitingQueueAnswersResourceExhausted) {
  auto cluster = StartCluster(ClusterOptions{
      .scheduler_args = {"--max_num_seqs=1", "--max_waiting_requests=1"}});
  ASSERT_NE(cluster, nullptr);
  std::vector<Completion> results(8);
  std::vector<std::thread> clients;
  for (auto& r : results) {
    clients.emplace_back([&] { r = Generate(cluster->frontend(), Greedy("", 150)); });
  }
  for (auto& t : clients) t.join();
  int exhausted = 0, ok = 0;
  for (const auto& r : results) {
    if (r.status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      ++exhausted;
      EXPECT_THAT(r.status.error_message(), HasSubstr("waiting queue is full"));
    }
    ok += r.status.ok();
  }
  EXPECT_GT(exhausted, 0);
  EXPECT_GT(ok, 0);
}

TEST_F(E2eTest, KilledWorkerTurnsInFlightRequestsIntoUnavailable) {
  // The worker never comes back: requests wait --recovery_timeout_ms for it, then end
  // with UNAVAILABLE (tests/chaos_test.cc has the worker that does come back).
  auto cluster = StartCluster(ClusterOptions{
      .scheduler_args = {"--worker_timeout_ms=5000", "--recovery_timeout_ms=1000"}});
  ASSERT_NE(cluster, nullptr);
  Completion c;
  std::thread client([&] { c = Generate(cluster->frontend(), Greedy("", 200), -1); });
  absl::SleepFor(absl::Milliseconds(300));
  cluster->worker_process().Signal(SIGKILL);
  const absl::Time killed = absl::Now();
  client.join();
  EXPECT_LT(absl::Now() - killed, absl::Seconds(10));
  // Either it finished before the kill, or it failed with UNAVAILABLE.
  if (!c.status.ok()) {
    EXPECT_EQ(c.status.error_code(), grpc::StatusCode::UNAVAILABLE) << c.status.error_message();
    EXPECT_THAT(c.status.error_message(), HasSubstr("worker"));
    EXPECT_THAT(c.status.error_message(), HasSubstr("recovering"));
  }
  Completion after = Generate(cluster->frontend(), Greedy("", 5));
  EXPECT_EQ(after.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_TRUE(cluster->WaitForEmptyPool(absl::Seconds(10)));
}

TEST_F(E2eTest, BadInputGetsClearErrorsAndTheClusterKeepsServing) {
  auto cluster = StartCluster();
  ASSERT_NE(cluster, nullptr);
  struct Case {
    std::string name;
    v1::GenerateRequest req;
    std::string message;
  };
  std::vector<Case> cases;
  auto add = [&](std::string name, auto mutate, std::string message) {
    v1::GenerateRequest req = Greedy("Once", 5);
    mutate(req);
    cases.push_back({std::move(name), std::move(req), std::move(message)});
  };
  add("too long", [](auto& r) { r.mutable_sampling()->set_max_tokens(1000); }, "max_tokens");
  add("negative temperature", [](auto& r) { r.mutable_sampling()->set_temperature(-1); },
      "temperature");
  add("top_p zero", [](auto& r) { r.mutable_sampling()->set_top_p(0); }, "top_p");
  add("top_p above one", [](auto& r) { r.mutable_sampling()->set_top_p(1.5); }, "top_p");
  add("negative top_k", [](auto& r) { r.mutable_sampling()->set_top_k(-2); }, "top_k");
  add("token outside vocab", [](auto& r) {
    r.clear_prompt();
    r.add_prompt_token_ids(1);
    r.add_prompt_token_ids(99999);
  }, "token ids must be in [0, 512)");
  add("too many stop strings", [](auto& r) {
    for (int i = 0; i < 20; ++i) r.mutable_sampling()->add_stop("s" + std::to_string(i));
  }, "stop");
  for (const Case& c : cases) {
    Completion result = Generate(cluster->frontend(), c.req);
    EXPECT_EQ(result.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.name;
    EXPECT_THAT(result.status.error_message(), HasSubstr(c.message)) << c.name << ": " << result.status.error_message();
  }
  // Invalid UTF-8 in the prompt (a proto3 string) never reaches the handler: gRPC's parser
  // refuses the message. Python, Go and Java clients refuse to send it at all.
  v1::GenerateRequest bad_utf8 = Greedy("", 5);
  bad_utf8.set_prompt("bad \xff byte");
  EXPECT_FALSE(Generate(cluster->frontend(), bad_utf8).status.ok());

  Completion ok = Generate(cluster->frontend(), Greedy("", 20));
  ASSERT_TRUE(ok.status.ok()) << ok.status.error_message();
  EXPECT_EQ(ok.text, golden_.substr(0, ok.text.size()));
}

}  // namespace
}  // namespace folio
