// Chaos: a replica that heals. The four services on loopback, 16 concurrent streams
// (greedy, sampled, n = 3 samples, beam searches); one service is SIGKILLed mid-stream
// and started again with the same command line and ports, as Kubernetes restarts a
// container; every stream must then complete with exactly the tokens of an undisturbed
// run of the same requests, and the pool must be full afterwards. Also: a worker that
// never returns (streams end UNAVAILABLE at --recovery_timeout_ms; liveness stays SERVING,
// readiness drops), a SIGSTOPped worker (the step is cut at its deadline, the replica
// recovers when it resumes), and rank 1 of a tensor-parallel pair killed and restarted (the
// ranks' group is formed again).
//
// The scheduler too: SIGKILLed and started again, the frontend continues every stream on
// the new one (resumable_stream.h), token for token; one that never returns ends the
// streams UNAVAILABLE at the frontend's --recovery_timeout_ms; one stopped with SIGTERM
// drains first; and a second scheduler started against the replica fences the first
// (common/scheduler_epoch.h).
//
// Each test prints "recovery: process back -> first token N ms", the figure
// docs/benchmarks.md reports.
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <thread>

#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "folio/internal/v1/scheduler.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "tests/cluster.h"
#include "tests/streams.h"

namespace folio {
namespace {

using ::testing::HasSubstr;
using testing::Cluster;
using testing::ClusterOptions;
using testing::Stream;
constexpr auto Requests = testing::MixedRequests;
namespace v1 = folio::v1;

class ChaosTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::ModelsDir();
    if (!dir_) GTEST_SKIP() << testing::kModelsDirHelp;
  }

  void StartCluster(std::vector<std::string> scheduler_args, int tp_size = 1,
                    std::vector<std::string> frontend_args = {},
                    std::vector<std::string> worker_args = {}) {
    ClusterOptions options;
    options.frontend_args = std::move(frontend_args);
    options.tp_size = tp_size;
    options.model = *dir_ + "/stories260K/stories260K.gguf";
    options.scheduler_args = std::move(scheduler_args);
    // A small pool (~3,000 blocks of 16): a restarted worker allocates it quickly.
    options.worker_args = {"--kv_cache_bytes=32MiB"};
    // A surviving rank can sit in a send to the dead one until --tp_timeout_ms (Gloo does
    // not fail a send that waits for a receive the dead peer never posted; 3 kills of 12
    // in one run): short, so that the streams still continue within 5 s of the return.
    if (tp_size > 1) options.worker_args.push_back("--tp_timeout_ms=2000");
    options.worker_args.insert(options.worker_args.end(), worker_args.begin(), worker_args.end());
    auto cluster = Cluster::Start(options);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
  }

  // Runs every request at once; `during` runs on this thread once the streams have
  // delivered `after_tokens` tokens in all.
  std::vector<Stream> RunAll(int after_tokens = 0, std::function<void()> during = nullptr) {
    return testing::RunStreams(cluster_->frontend(), Requests(), after_tokens, std::move(during));
  }

  static void ExpectSame(const std::vector<Stream>& want, const std::vector<Stream>& got) {
    testing::ExpectSameStreams(want, got);
  }

  // The first token any stream received after `t`.
  static absl::Time FirstTokenAfter(const std::vector<Stream>& streams, absl::Time t) {
    absl::Time first = absl::InfiniteFuture();
    for (const Stream& s : streams) {
      for (absl::Time at : s.token_times) {
        if (at > t) {
          first = std::min(first, at);
          break;
        }
      }
    }
    return first;
  }

  void ExpectServedWithin(absl::Duration limit) {
    v1::GenerateRequest req = Requests()[0];
    req.mutable_sampling()->set_max_tokens(5);
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + limit));
    auto reader = cluster_->frontend().Generate(&ctx, req);
    v1::GenerateResponse resp;
    int tokens = 0;
    while (reader->Read(&resp)) tokens += resp.tokens_size();
    const grpc::Status s = reader->Finish();
    EXPECT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(tokens, 5);
  }

  grpc::health::v1::HealthCheckResponse::ServingStatus SchedulerHealth(const std::string& name) {
    return Health(cluster_->scheduler_process(), name);
  }
  static grpc::health::v1::HealthCheckResponse::ServingStatus Health(
      testing::ServiceProcess& process, const std::string& name) {
    auto stub = grpc::health::v1::Health::NewStub(
        grpc::CreateChannel(process.address(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    grpc::health::v1::HealthCheckRequest req;
    req.set_service(name);
    grpc::health::v1::HealthCheckResponse resp;
    if (!stub->Check(&ctx, req, &resp).ok()) return grpc::health::v1::HealthCheckResponse::UNKNOWN;
    return resp.status();
  }

  // Kills `process` mid-stream, starts it again after `down` and checks that every stream
  // continues exactly; returns the time from its restart to the first token after.
  // `before_kill` (optional) runs first, on this thread.
  absl::Duration KillAndRestart(testing::ServiceProcess& process, absl::Duration down,
                                std::function<void()> before_kill = nullptr) {
    const std::vector<Stream> want = RunAll();
    EXPECT_TRUE(cluster_->WaitForEmptyPool(absl::Seconds(10)));
    absl::Time back;
    const std::vector<Stream> got = RunAll(/*after_tokens=*/200, [&] {
      if (before_kill) before_kill();
      process.Signal(SIGKILL);
      EXPECT_TRUE(process.Wait(absl::Seconds(10)).ok());
      absl::SleepFor(down);
      // The return is when the process is started again: taken before Restart, which
      // waits for its port file, since on a loaded machine the streams can continue (and
      // even end) before this thread runs again.
      back = absl::Now();
      EXPECT_TRUE(process.Restart().ok());
    });
    ExpectSame(want, got);
    EXPECT_TRUE(cluster_->WaitForEmptyPool(absl::Seconds(10))) << "the pool is full again";
    const absl::Time first = FirstTokenAfter(got, back);
    if (first == absl::InfiniteFuture()) {
      // No token came after the return, yet every stream is whole: they had all ended
      // before the kill took effect (on a loaded machine `before_kill` can outlast them).
      // Nothing was left to continue; the new request below checks the return.
      std::cout << "every stream had ended before the kill" << std::endl;
    } else {
      EXPECT_LT(first - back, absl::Seconds(5)) << "streams continue within 5 s of the return";
    }
    ExpectServedWithin(absl::Seconds(5));
    const std::string metrics =
        testing::HttpGet(cluster_->scheduler_process().metrics_port(), "/metrics");
    EXPECT_EQ(testing::MetricValue(metrics, "folio_scheduler_recovering"), 0);
    return first - back;
  }

  void NeverReturns(testing::ServiceProcess& process, const std::string& lost);
  void HostTierSurvivesARestart(int tp_size, int killed);

  // A streamed completion over the frontend's HTTP API (OpenAI's SSE): the text of its
  // choices, joined in order, or the HTTP error.
  std::string HttpStreamedText() {
    httplib::Client client("127.0.0.1", cluster_->frontend_process().http_port());
    client.set_read_timeout(60, 0);
    const nlohmann::json body = {{"prompt", "Lily and Tom"}, {"max_tokens", 300},
                                 {"temperature", 0.8}, {"seed", 17}, {"stream", true}};
    httplib::Result r = client.Post("/v1/completions", body.dump(), "application/json");
    if (!r) return "no response";
    if (r->status != 200) return "HTTP " + std::to_string(r->status) + ": " + r->body;
    std::string text;
    for (absl::string_view line : absl::StrSplit(r->body, '\n')) {
      if (!absl::ConsumePrefix(&line, "data: ") || line == "[DONE]") continue;
      const nlohmann::json event = nlohmann::json::parse(line, nullptr, false);
      if (event.contains("error")) return "error: " + event.dump();
      for (const auto& c : event["choices"]) text += c.value("text", "");
    }
    return text;
  }

  std::optional<std::string> dir_;
  std::unique_ptr<Cluster> cluster_;
};

TEST_F(ChaosTest, AKilledWorkerComesBackAndNoStreamIsLost) {
  StartCluster({"--worker_timeout_ms=5000"});
  const absl::Duration d =
      KillAndRestart(cluster_->worker_process(), absl::Milliseconds(1000));
  std::cout << "recovery: worker back -> first token " << absl::ToInt64Milliseconds(d)
            << " ms" << std::endl;
  const std::string metrics =
      testing::HttpGet(cluster_->scheduler_process().metrics_port(), "/metrics");
  EXPECT_THAT(metrics, HasSubstr("folio_scheduler_recoveries_total{service=\"worker\"} 1"));
  // The worker died while steps were pipelined (--async_steps is on by default).
  EXPECT_GT(testing::MetricValue(metrics, "folio_scheduler_steps_planned_ahead_total"), 0);
}

// The host KV tier (--kv_host_bytes): a worker killed and started again opens its
// shared-memory segment again (named after its port by default), so a conversation that
// comes back after the restart loads its prompt's blocks instead of recomputing them; and
// streams cut mid-way by the kill continue exactly, loading what the tier holds. At
// tp_size 2 each rank keeps its own heads' blocks in its own segment and `killed` is one
// of them.
void ChaosTest::HostTierSurvivesARestart(int tp_size, int killed) {
  StartCluster({"--worker_timeout_ms=5000"}, tp_size, {}, {"--kv_host_bytes=16MiB"});
  v1::GenerateRequest req;
  std::string prompt;
  for (int i = 0; i < 8; ++i) prompt += "Lily and Tom went to the park to play with the ball. ";
  req.set_prompt(prompt);
  req.mutable_sampling()->set_max_tokens(24);
  req.mutable_sampling()->set_temperature(0);
  const std::vector<Stream> first = testing::RunStreams(cluster_->frontend(), {req});
  ASSERT_TRUE(first[0].status.ok()) << first[0].status.error_message();
  EXPECT_EQ(first[0].usage.cached_prompt_tokens(), 0);
  ASSERT_TRUE(cluster_->WaitForEmptyPool(absl::Seconds(10)));
  // Every store the request's steps carried has run (a step of transfers alone follows
  // the last one): the kill loses nothing the tier holds.
  absl::SleepFor(absl::Milliseconds(300));

  testing::ServiceProcess& worker = cluster_->worker_process(killed);
  worker.Signal(SIGKILL);
  ASSERT_TRUE(worker.Wait(absl::Seconds(10)).ok());
  ASSERT_TRUE(worker.Restart().ok());
  const std::vector<Stream> again = testing::RunStreams(cluster_->frontend(), {req});
  ASSERT_TRUE(again[0].status.ok()) << again[0].status.error_message();
  EXPECT_EQ(again[0].tokens, first[0].tokens);
  EXPECT_GE(again[0].usage.cached_prompt_tokens(), 64)
      << "the prompt's blocks came back from the host tier";
  EXPECT_GT(cluster_->CacheStats().host_tier_loads(), 0);
  const std::string metrics =
      testing::HttpGet(cluster_->scheduler_process().metrics_port(), "/metrics");
  EXPECT_THAT(metrics, HasSubstr("folio_scheduler_recoveries_total{service=\"worker\"} 1"));

  // Mid-stream, with the tier on: every stream continues exactly.
  KillAndRestart(worker, absl::Milliseconds(300));
  const std::string worker_metrics = testing::HttpGet(worker.metrics_port(), "/metrics");
  EXPECT_GT(testing::MetricValue(worker_metrics, "folio_worker_kv_host_bytes"), 0);
  std::vector<std::string> segments;
  for (int rank = 0; rank < tp_size; ++rank) {
    segments.push_back(absl::StrCat("/folio-kv-", cluster_->worker_process(rank).grpc_port(),
                                    "-rank", rank));
  }
  cluster_.reset();
  for (const std::string& name : segments) shm_unlink(name.c_str());  // clean-up
}

TEST_F(ChaosTest, AWorkerRestartedWithAHostTierServesCachedPromptsFromIt) {
  HostTierSurvivesARestart(/*tp_size=*/1, /*killed=*/0);
}

// A worker that comes back with other offload settings than it had: recovery tells the
// cache manager, which opens the disk tier where the worker now writes (and drops it
// when the worker comes back without one), so no disk hit is promised that the worker
// cannot load and no file it writes goes unindexed.
TEST_F(ChaosTest, AWorkerRestartedWithOtherDiskSettingsMovesTheCacheManagersDiskTier) {
  StartCluster({"--worker_timeout_ms=5000"}, 1, {}, {"--kv_host_bytes=4MiB"});
  v1::GenerateRequest req;
  req.set_prompt("Lily and Tom went to the park to play with the ball.");
  req.mutable_sampling()->set_max_tokens(8);
  req.mutable_sampling()->set_temperature(0);
  ASSERT_TRUE(testing::RunStreams(cluster_->frontend(), {req})[0].status.ok());
  EXPECT_EQ(cluster_->CacheStats().disk_tier_blocks_total(), 0);
  const std::vector<Stream> first = testing::RunStreams(cluster_->frontend(), {req});

  char disk_pattern[] = "/tmp/folio-kv-disk-XXXXXX";
  ASSERT_NE(mkdtemp(disk_pattern), nullptr);
  const std::string disk = disk_pattern;
  testing::ServiceProcess& worker = cluster_->worker_process();
  ASSERT_TRUE(worker.Restart(absl::Seconds(30),
                             {"--kv_disk_dir=" + disk, "--kv_disk_bytes=8MiB"}).ok());
  const std::vector<Stream> with_disk = testing::RunStreams(cluster_->frontend(), {req});
  ASSERT_TRUE(with_disk[0].status.ok()) << with_disk[0].status.error_message();
  EXPECT_EQ(with_disk[0].tokens, first[0].tokens);
  EXPECT_GT(cluster_->CacheStats().disk_tier_blocks_total(), 0)
      << "the cache manager opened the worker's new disk tier";
  EXPECT_GT(cluster_->CacheStats().host_tier_blocks_total(), 0);

  ASSERT_TRUE(worker.Restart().ok());  // the first start's flags: no disk tier
  const std::vector<Stream> without = testing::RunStreams(cluster_->frontend(), {req});
  ASSERT_TRUE(without[0].status.ok()) << without[0].status.error_message();
  EXPECT_EQ(without[0].tokens, first[0].tokens);
  EXPECT_EQ(cluster_->CacheStats().disk_tier_blocks_total(), 0);
  const std::string metrics =
      testing::HttpGet(cluster_->scheduler_process().metrics_port(), "/metrics");
  EXPECT_THAT(metrics, HasSubstr("folio_scheduler_recoveries_total{service=\"worker\"} 2"));
  const std::string segment = absl::StrCat("/folio-kv-", worker.grpc_port(), "-rank0");
  cluster_.reset();
  shm_unlink(segment.c_str());  // clean-up
  std::filesystem::remove_all(disk);
}

TEST_F(ChaosTest, ATensorParallelRankRestartedWithAHostTierServesCachedPromptsFromIt) {
  HostTierSurvivesARestart(/*tp_size=*/2, /*killed=*/1);
}

TEST_F(ChaosTest, AKilledCacheManagerComesBackAndNoStreamIsLost) {
  StartCluster({"--cachemgr_timeout_ms=2000"});
  const absl::Duration d =
      KillAndRestart(cluster_->cachemgr_process(), absl::Milliseconds(1000));
  std::cout << "recovery: cachemgr back -> first token " << absl::ToInt64Milliseconds(d)
            << " ms" << std::endl;
  const std::string metrics =
      testing::HttpGet(cluster_->scheduler_process().metrics_port(), "/metrics");
  EXPECT_THAT(metrics, HasSubstr("folio_scheduler_recoveries_total{service=\"cachemgr\"} 1"));
}

// `process` is killed mid-stream and comes back only after --recovery_timeout_ms.
void ChaosTest::NeverReturns(testing::ServiceProcess& process, const std::string& lost) {
  absl::Time killed;
  const std::vector<Stream> got = RunAll(/*after_tokens=*/100, [&] {
    // Taken before the kill: the scheduler's recovery window opens when it sees the loss,
    // which is after the signal but may be before Signal() returns here.
    killed = absl::Now();
    process.Signal(SIGKILL);
    // While the replica waits: liveness stays SERVING, readiness drops.
    absl::SleepFor(absl::Milliseconds(700));
    EXPECT_EQ(SchedulerHealth("liveness"), grpc::health::v1::HealthCheckResponse::SERVING);
    EXPECT_EQ(SchedulerHealth("folio.internal.v1.Scheduler"),
              grpc::health::v1::HealthCheckResponse::NOT_SERVING);
    // A request whose own deadline comes first hears why, not DEADLINE_EXCEEDED.
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Milliseconds(600)));
    auto reader = cluster_->frontend().Generate(&ctx, Requests()[0]);
    v1::GenerateResponse resp;
    while (reader->Read(&resp)) {
    }
    const grpc::Status s = reader->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr("the replica is recovering: " + lost));
    EXPECT_THAT(s.error_message(), HasSubstr("deadline passes"));
  });
  int unavailable = 0;
  for (const Stream& s : got) {
    if (s.status.ok()) continue;  // finished before the kill
    ++unavailable;
    EXPECT_EQ(s.status.error_code(), grpc::StatusCode::UNAVAILABLE) << s.status.error_message();
    EXPECT_THAT(s.status.error_message(), HasSubstr("the replica is recovering: " + lost));
  }
  EXPECT_GT(unavailable, 0);
  EXPECT_GE(absl::Now() - killed, absl::Milliseconds(1800)) << "they waited for it";
  // Back at last: the replica serves again, with a full pool.
  ASSERT_TRUE(process.Restart().ok());
  ExpectServedWithin(absl::Seconds(5));
  EXPECT_TRUE(cluster_->WaitForEmptyPool(absl::Seconds(10)));
  // Readiness is back too (main.cc polls the loop's health every 250 ms).
  const absl::Time give_up = absl::Now() + absl::Seconds(5);
  while (SchedulerHealth("folio.internal.v1.Scheduler") !=
             grpc::health::v1::HealthCheckResponse::SERVING &&
         absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(SchedulerHealth("folio.internal.v1.Scheduler"),
            grpc::health::v1::HealthCheckResponse::SERVING);
}

TEST_F(ChaosTest, AWorkerThatNeverReturnsEndsStreamsWithUnavailable) {
  StartCluster({"--worker_timeout_ms=5000", "--recovery_timeout_ms=2000"});
  NeverReturns(cluster_->worker_process(), "worker lost");
}

TEST_F(ChaosTest, ACacheManagerThatNeverReturnsEndsStreamsWithUnavailableNotCancelled) {
  StartCluster({"--cachemgr_timeout_ms=1000", "--recovery_timeout_ms=2000"});
  NeverReturns(cluster_->cachemgr_process(), "cachemgr lost");
}

// Tensor parallelism: rank 1 of two dies mid-stream and comes back as a new process. The
// scheduler forms the ranks' Gloo group again (JoinGroup under a new generation, since the
// old group's addresses are stale) and allocates both pools; every stream continues.
TEST_F(ChaosTest, AKilledTensorParallelRankRejoinsAndNoStreamIsLost) {
  StartCluster({"--worker_timeout_ms=5000"}, /*tp_size=*/2);
  const absl::Duration d =
      KillAndRestart(cluster_->worker_process(1), absl::Milliseconds(1000));
  std::cout << "recovery: tp=2 rank 1 back -> first token " << absl::ToInt64Milliseconds(d)
            << " ms" << std::endl;
  const std::string metrics =
      testing::HttpGet(cluster_->scheduler_process().metrics_port(), "/metrics");
  EXPECT_THAT(metrics, HasSubstr("folio_scheduler_recoveries_total{service=\"worker\"} 1"));
}

// The same for rank 0, which also hosts the group's rendezvous table: the restarted rank 0
// starts with an empty one, and rank 1 (whose group broke) joins the new group there.
TEST_F(ChaosTest, AKilledTensorParallelRankZeroRejoinsAndNoStreamIsLost) {
  StartCluster({"--worker_timeout_ms=5000"}, /*tp_size=*/2);
  const absl::Duration d =
      KillAndRestart(cluster_->worker_process(0), absl::Milliseconds(1000));
  std::cout << "recovery: tp=2 rank 0 back -> first token " << absl::ToInt64Milliseconds(d)
            << " ms" << std::endl;
}

TEST_F(ChaosTest, AStoppedWorkerIsCutAtTheStepDeadlineAndRecoversOnResume) {
  StartCluster({"--worker_timeout_ms=1000"});
  const std::vector<Stream> want = RunAll();
  absl::Time resumed;
  const std::vector<Stream> got = RunAll(/*after_tokens=*/200, [&] {
    cluster_->worker_process().Signal(SIGSTOP);
    absl::SleepFor(absl::Milliseconds(2000));  // past the step deadline
    const std::string metrics =
        testing::HttpGet(cluster_->scheduler_process().metrics_port(), "/metrics");
    EXPECT_EQ(testing::MetricValue(metrics, "folio_scheduler_recovering"), 1);
    cluster_->worker_process().Signal(SIGCONT);
    resumed = absl::Now();
  });
  ExpectSame(want, got);
  EXPECT_TRUE(cluster_->WaitForEmptyPool(absl::Seconds(10)));
  const absl::Time first = FirstTokenAfter(got, resumed);
  EXPECT_LT(first - resumed, absl::Seconds(5));
  std::cout << "recovery: SIGCONT -> first token "
            << absl::ToInt64Milliseconds(first - resumed) << " ms" << std::endl;
}

TEST_F(ChaosTest, AKilledSchedulerComesBackAndTheFrontendContinuesEveryStream) {
  StartCluster({}, 1, {"--recovery_timeout_ms=30000"});
  // An HTTP stream too, under way when the scheduler dies.
  const std::string http_want = HttpStreamedText();
  ASSERT_GT(http_want.size(), 200u) << http_want;
  std::string http_got;
  std::thread http;
  const absl::Duration d = KillAndRestart(
      cluster_->scheduler_process(), absl::Milliseconds(1000), [&] {
        http = std::thread([&] { http_got = HttpStreamedText(); });
        absl::SleepFor(absl::Milliseconds(200));
      });
  http.join();
  EXPECT_EQ(http_got, http_want) << "the HTTP stream continued exactly";
  std::cout << "recovery: scheduler back -> first token " << absl::ToInt64Milliseconds(d)
            << " ms" << std::endl;
  // The frontend's readiness follows the scheduler's again (it polls every 250 ms).
  const absl::Time give_up = absl::Now() + absl::Seconds(5);
  while (Health(cluster_->frontend_process(), "") != grpc::health::v1::HealthCheckResponse::SERVING &&
         absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(Health(cluster_->frontend_process(), ""),
            grpc::health::v1::HealthCheckResponse::SERVING);
}

// A scheduler stopped with SIGTERM (a rolling restart) drains its streams before it exits
// (up to --drain_timeout_ms), then its successor serves: no stream is lost either.
TEST_F(ChaosTest, ASchedulerStoppedWithSigtermLosesNoStream) {
  StartCluster({}, 1, {"--recovery_timeout_ms=30000"});
  const std::vector<Stream> want = RunAll();
  const std::vector<Stream> got = RunAll(/*after_tokens=*/200, [&] {
    cluster_->scheduler_process().Signal(SIGTERM);
    EXPECT_TRUE(cluster_->scheduler_process().Wait(absl::Seconds(20)).ok());
    EXPECT_TRUE(cluster_->scheduler_process().Restart().ok());
  });
  ExpectSame(want, got);
  EXPECT_TRUE(cluster_->WaitForEmptyPool(absl::Seconds(10)));
  ExpectServedWithin(absl::Seconds(5));
}

TEST_F(ChaosTest, ASchedulerThatNeverReturnsEndsStreamsWithUnavailable) {
  StartCluster({}, 1, {"--recovery_timeout_ms=1500"});
  absl::Time killed;
  const std::vector<Stream> got = RunAll(/*after_tokens=*/100, [&] {
    // Taken before the kill: the frontend's recovery window opens when it sees the stream
    // break, which is after the signal but may be before Signal() returns here.
    killed = absl::Now();
    cluster_->scheduler_process().Signal(SIGKILL);
    // While the frontend waits: its liveness stays SERVING, its readiness drops.
    absl::SleepFor(absl::Milliseconds(800));
    EXPECT_EQ(Health(cluster_->frontend_process(), "liveness"),
              grpc::health::v1::HealthCheckResponse::SERVING);
    EXPECT_EQ(Health(cluster_->frontend_process(), ""),
              grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  });
  int unavailable = 0;
  for (const Stream& s : got) {
    if (s.status.ok()) continue;  // finished before the kill
    ++unavailable;
    EXPECT_EQ(s.status.error_code(), grpc::StatusCode::UNAVAILABLE) << s.status.error_message();
    EXPECT_THAT(s.status.error_message(), HasSubstr("--recovery_timeout_ms"));
  }
  EXPECT_GT(unavailable, 0);
  EXPECT_GE(absl::Now() - killed, absl::Milliseconds(1500)) << "they waited for it";
  // Back at last: it adopts the replica its predecessor left, and serves.
  ASSERT_TRUE(cluster_->scheduler_process().Restart().ok());
  ExpectServedWithin(absl::Seconds(10));
  EXPECT_TRUE(cluster_->WaitForEmptyPool(absl::Seconds(10)));
}

TEST_F(ChaosTest, ASecondSchedulerFencesTheFirstAndNeverBothStep) {
  StartCluster({}, 1, {"--recovery_timeout_ms=1000"});
  ExpectServedWithin(absl::Seconds(10));  // the first scheduler steps the replica
  auto second = testing::ServiceProcess::Start(
      "folio-scheduler",
      {"--shutdown_grace_ms=0", "--port=0", "--metrics_port=0", "--startup_timeout_s=60",
       "--cachemgr=" + cluster_->cachemgr_process().address(),
       "--workers=" + cluster_->worker_process().address()});
  ASSERT_TRUE(second.ok()) << second.status();
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  while (Health(**second, "") != grpc::health::v1::HealthCheckResponse::SERVING &&
         absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_EQ(Health(**second, ""), grpc::health::v1::HealthCheckResponse::SERVING);

  // The first scheduler (the frontend's) is refused at its first step and steps no more:
  // the stream ends UNAVAILABLE without a token once the frontend gives up on it.
  v1::GenerateRequest req = Requests()[0];
  req.mutable_sampling()->set_max_tokens(5);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  auto reader = cluster_->frontend().Generate(&ctx, req);
  v1::GenerateResponse resp;
  int tokens = 0;
  while (reader->Read(&resp)) tokens += resp.tokens_size();
  const grpc::Status s = reader->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("replaced by a newer one"));
  EXPECT_EQ(tokens, 0) << "a fenced scheduler produced tokens";
  EXPECT_NE(SchedulerHealth(""), grpc::health::v1::HealthCheckResponse::SERVING);
  const std::string cache_metrics =
      testing::HttpGet(cluster_->cachemgr_process().metrics_port(), "/metrics");
  EXPECT_THAT(cache_metrics,
              HasSubstr("folio_cachemgr_step_errors_total{code=\"FAILED_PRECONDITION\"}"));

  // The second one serves the replica.
  auto stub = folio::internal::v1::Scheduler::NewStub(
      grpc::CreateChannel((*second)->address(), grpc::InsecureChannelCredentials()));
  folio::internal::v1::ScheduleRequest sreq;
  sreq.set_request_id("second");
  sreq.add_prompt_token_ids(1);
  sreq.add_prompt_token_ids(403);
  sreq.set_max_tokens(6);
  grpc::ClientContext sctx;
  sctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  auto sreader = stub->Generate(&sctx, sreq);
  folio::internal::v1::ScheduleEvent event;
  int second_tokens = 0;
  while (sreader->Read(&event)) second_tokens += event.tokens_size();
  const grpc::Status ss = sreader->Finish();
  EXPECT_TRUE(ss.ok()) << ss.error_message();
  EXPECT_EQ(second_tokens, 6);
  EXPECT_TRUE(cluster_->WaitForEmptyPool(absl::Seconds(10)));
}

}  // namespace
}  // namespace folio
