// Many replicas, one cluster: three replicas of stories260K behind one frontend
// (--replicas), on loopback.
//   * kv routing: every turn of a conversation lands where its blocks are (the scheduler
//     reports cached prompt tokens from turn 2 on), for several conversations at once;
//   * least-loaded spreads a burst of unrelated requests over every replica;
//   * a replica SIGKILLed (all its processes) under 16 streams: every stream completes with
//     exactly the tokens of an undisturbed run (continued on the others), new requests
//     are served at once, and the replica takes work again once it is started again;
//   * the host KV tier keeps a conversation's replica; the disk KV tier is shared by the
//     replicas and outlives the cluster.
#include <signal.h>
#include <sys/mman.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "folio/internal/v1/scheduler.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "tests/cluster.h"
#include "tests/streams.h"

namespace folio {
namespace {

namespace v1 = folio::v1;
namespace ipb = folio::internal::v1;
using testing::Cluster;
using testing::ClusterOptions;

class RoutingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::ModelsDir();
    if (!dir_) GTEST_SKIP() << testing::kModelsDirHelp;
  }

  void StartCluster(const std::string& routing, int num_replicas = 3,
                    std::vector<std::string> worker_args = {"--kv_cache_bytes=32MiB"},
                    std::vector<std::string> scheduler_args = {}) {
    ClusterOptions options;
    options.model = *dir_ + "/stories260K/stories260K.gguf";
    options.num_replicas = num_replicas;
    options.worker_args = std::move(worker_args);
    options.scheduler_args = std::move(scheduler_args);
    options.frontend_args = {"--routing=" + routing, "--recovery_timeout_ms=30000"};
    auto cluster = Cluster::Start(options);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    // The frontend serves once one replica answers; a replica whose scheduler was still
    // starting at the router's first poll is "recovering" until the next. Wait until the
    // router sees all three serving, so a burst can reach each of them.
    int serving = 0;
    for (int i = 0; i < 200 && serving < options.num_replicas; ++i) {
      const std::string page =
          testing::HttpGet(cluster_->frontend_process().metrics_port(), "/metrics");
      serving = 0;
      for (size_t at = page.find("state=\"serving\"} 1\n"); at != std::string::npos;
           at = page.find("state=\"serving\"} 1\n", at + 1)) {
        ++serving;
      }
      if (serving < options.num_replicas) absl::SleepFor(absl::Milliseconds(50));
    }
    ASSERT_EQ(serving, options.num_replicas) << "replicas the router sees serving";
  }

  // The scheduler's own counters of replica `i`.
  ipb::SchedulerStats SchedulerStats(int i) {
    auto stub = ipb::Scheduler::NewStub(grpc::CreateChannel(
        cluster_->scheduler_process(i).address(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    ipb::SchedulerStats stats;
    const grpc::Status s = stub->GetSchedulerStats(&ctx, ipb::GetSchedulerStatsRequest(), &stats);
    EXPECT_TRUE(s.ok()) << "replica " << i << ": " << s.error_message();
    return stats;
  }

  struct Completion {
    std::vector<int32_t> tokens;
    v1::Usage usage;
    grpc::Status status;
  };
  Completion Generate(const std::vector<int32_t>& prompt, int32_t max_tokens) {
    v1::GenerateRequest req;
    req.mutable_prompt_token_ids()->Assign(prompt.begin(), prompt.end());
    req.mutable_sampling()->set_max_tokens(max_tokens);
    req.mutable_sampling()->set_temperature(0);
    req.mutable_sampling()->set_ignore_eos(true);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    auto reader = cluster_->frontend().Generate(&ctx, req);
    Completion c;
    v1::GenerateResponse resp;
    while (reader->Read(&resp)) {
      for (const auto& t : resp.tokens()) c.tokens.push_back(t.token_id());
      if (resp.has_usage()) c.usage = resp.usage();
    }
    c.status = reader->Finish();
    return c;
  }

  // A conversation's first turn (BOS, 60 user tokens, 24 generated) becomes `history`;
  // the replica whose scheduler served it, or -1.
  int FirstTurn(int conversation, std::vector<int32_t>* history);

  std::optional<std::string> dir_;
  std::unique_ptr<Cluster> cluster_;
};

// Token ids of a user turn (stories260K's vocabulary has 512; 1 is BOS).
std::vector<int32_t> UserTurn(int conversation, int turn, int n) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = 3 + (conversation * 97 + turn * 31 + i * 7) % 500;
  return t;
}

int RoutingTest::FirstTurn(int conversation, std::vector<int32_t>* history) {
  *history = {1};
  const std::vector<int32_t> user = UserTurn(conversation, 0, 60);
  history->insert(history->end(), user.begin(), user.end());
  const Completion first = Generate(*history, 24);
  EXPECT_TRUE(first.status.ok()) << first.status.error_message();
  history->insert(history->end(), first.tokens.begin(), first.tokens.end());
  int home = -1;
  for (int i = 0; i < cluster_->num_replicas(); ++i) {
    if (SchedulerStats(i).prompt_tokens() > 0) home = i;
  }
  return home;
}

TEST_F(RoutingTest, KvRoutingKeepsEachConversationWhereItsBlocksAre) {
  StartCluster("kv");
  constexpr int kConversations = 4, kTurns = 4;
  std::vector<std::vector<int32_t>> history(kConversations, std::vector<int32_t>{1});
  for (int turn = 0; turn < kTurns; ++turn) {
    for (int c = 0; c < kConversations; ++c) {
      std::vector<int32_t> user = UserTurn(c, turn, 40);
      history[c].insert(history[c].end(), user.begin(), user.end());
      const Completion out = Generate(history[c], 24);
      ASSERT_TRUE(out.status.ok()) << out.status.error_message();
      ASSERT_EQ(out.tokens.size(), 24u);
      if (turn > 0) {
        // The whole previous turn's full blocks (prompt and output) are cached where it ran.
        EXPECT_GE(out.usage.cached_prompt_tokens(), 16 * ((history[c].size() - 40 - 1) / 16 - 1))
            << "conversation " << c << " turn " << turn << " of " << history[c].size()
            << " prompt tokens";
      }
      history[c].insert(history[c].end(), out.tokens.begin(), out.tokens.end());
    }
    absl::SleepFor(absl::Milliseconds(300));  // a few polls: the router sees the new blocks
  }
  // The conversations were spread, not all piled on one replica.
  int used = 0;
  for (int i = 0; i < 3; ++i) used += SchedulerStats(i).prompt_tokens() > 0;
  EXPECT_GE(used, 2);
  const std::string metrics =
      testing::HttpGet(cluster_->frontend_process().metrics_port(), "/metrics");
  // The router's hashes are the cache managers': what it predicted each turn would find in
  // its replica's cache is what that replica's scheduler found, token for token.
  const double predicted =
      testing::MetricValue(metrics, "folio_frontend_route_predicted_cached_tokens_total");
  EXPECT_GT(predicted, 0);
  EXPECT_EQ(predicted,
            testing::MetricValue(metrics, "folio_frontend_route_actual_cached_tokens_total"));
  EXPECT_TRUE(cluster_->WaitForEmptyPool(absl::Seconds(10)));
}

// The host KV tier (--kv_host_bytes) seen by the router: two replicas with pools of 24
// blocks. A conversation's first turn runs on one of them; then unrelated requests (ten
// blocks each, spread over both) push its blocks out of that pool, but its host tier keeps
// them, and the cache manager's block events count the tier with the pool. So its next
// turn is routed back there and loads its history instead of recomputing it, and the
// router's prediction is what the replica found. (Without the tier the blocks' REMOVED
// events would leave the router nothing to go by.)
TEST_F(RoutingTest, KvRoutingFollowsAConversationTheHostTierKeeps) {
  // Each worker's segment is named after its port (folio-kv-PORT-rank0): one per replica.
  StartCluster("kv", 2, {"--kv_cache_bytes=240KiB", "--kv_host_bytes=4MiB"},
               {"--max_model_len=256"});
  std::vector<int32_t> history;
  const int home = FirstTurn(7, &history);
  ASSERT_GE(home, 0);
  for (int i = 0; i < 8; ++i) {
    const Completion noise = Generate(UserTurn(100 + i, 0, 150), 8);
    ASSERT_TRUE(noise.status.ok()) << noise.status.error_message();
  }
  absl::SleepFor(absl::Milliseconds(300));  // a few polls: the router sees the events
  const ipb::CacheStats before = cluster_->CacheStats(home);
  EXPECT_GT(before.host_tier_blocks_used(), 0);
  const std::vector<int32_t> next = UserTurn(7, 1, 20);
  history.insert(history.end(), next.begin(), next.end());
  const int64_t home_prompt_tokens = SchedulerStats(home).prompt_tokens();
  const Completion second = Generate(history, 8);
  ASSERT_TRUE(second.status.ok()) << second.status.error_message();
  EXPECT_GT(SchedulerStats(home).prompt_tokens(), home_prompt_tokens)
      << "the second turn went back to replica " << home;
  // Its first turn's full blocks (prompt and output: 85 tokens, 5 blocks) came back from
  // the tier, the pool having evicted them.
  EXPECT_GE(second.usage.cached_prompt_tokens(), 64);
  EXPECT_GT(cluster_->CacheStats(home).host_tier_loads(), before.host_tier_loads());
  const std::string metrics =
      testing::HttpGet(cluster_->frontend_process().metrics_port(), "/metrics");
  EXPECT_EQ(testing::MetricValue(metrics, "folio_frontend_route_predicted_cached_tokens_total"),
            testing::MetricValue(metrics, "folio_frontend_route_actual_cached_tokens_total"));
  std::vector<std::string> segments;
  for (int i = 0; i < 2; ++i) {
    segments.push_back(
        absl::StrCat("/folio-kv-", cluster_->worker_process(0, i).grpc_port(), "-rank0"));
  }
  cluster_.reset();
  for (const std::string& name : segments) shm_unlink(name.c_str());  // clean-up
}

// The disk KV tier (--kv_disk_dir) under two replicas that share its directory, with
// pools and host tiers too small to keep a conversation while unrelated requests run: the
// conversation's blocks spill to disk, its home replica's block events say so, and its next
// turn is routed back there and loads them. Then the whole cluster stops and starts again (new processes, new host
// segments): the same turn loads its history from the files. Then again, every file's
// payload damaged: each load the workers find bad refuses its step (DATA_LOSS), the
// replica resets its pool and recomputes, and the answer is the same tokens.
TEST_F(RoutingTest, TheDiskTierIsSharedByReplicasAndOutlivesTheCluster) {
  char root_pattern[] = "/tmp/folio-kv-disk-XXXXXX";
  ASSERT_NE(mkdtemp(root_pattern), nullptr);
  const std::string root = root_pattern;
  const std::vector<std::string> worker_args = {
      "--kv_cache_bytes=240KiB", "--kv_host_bytes=200KiB", "--kv_disk_dir=" + root,
      "--kv_disk_bytes=8MiB"};
  auto ports = [&] {
    std::vector<int> p;
    for (int i = 0; i < 2; ++i) p.push_back(cluster_->worker_process(0, i).grpc_port());
    return p;
  };
  auto unlink_segments = [](const std::vector<int>& ports) {
    for (int port : ports) shm_unlink(absl::StrCat("/folio-kv-", port, "-rank0").c_str());
  };
  auto disk_loads = [&] {
    int64_t n = 0;
    for (int i = 0; i < 2; ++i) n += cluster_->CacheStats(i).disk_tier_loads();
    return n;
  };
  // A labelled counter summed over both replicas' workers.
  auto worker_counter = [&](const std::string& series) {
    double sum = 0;
    for (int i = 0; i < 2; ++i) {
      const std::string page =
          testing::HttpGet(cluster_->worker_process(0, i).metrics_port(), "/metrics");
      const size_t at = page.find("\n" + series + " ");
      if (at != std::string::npos) sum += std::stod(page.substr(at + series.size() + 2));
    }
    return sum;
  };

  StartCluster("kv", 2, worker_args, {"--max_model_len=256"});
  EXPECT_GT(cluster_->CacheStats(0).disk_tier_blocks_total(), 0);
  std::vector<int32_t> history;
  const int home = FirstTurn(9, &history);
  ASSERT_GE(home, 0);
  const std::vector<int32_t> next = UserTurn(9, 1, 20);
  history.insert(history.end(), next.begin(), next.end());
  for (int i = 0; i < 8; ++i) {
    const Completion noise = Generate(UserTurn(200 + i, 0, 150), 8);
    ASSERT_TRUE(noise.status.ok()) << noise.status.error_message();
  }
  int64_t spilled = 0;
  for (int i = 0; i < 2; ++i) spilled += cluster_->CacheStats(i).disk_tier_spills();
  EXPECT_GT(spilled, 0);
  const int64_t loads_before = disk_loads();
  absl::SleepFor(absl::Milliseconds(300));  // a few polls: the router sees the events
  const int64_t home_prompt_tokens = SchedulerStats(home).prompt_tokens();
  const Completion second = Generate(history, 8);
  ASSERT_TRUE(second.status.ok()) << second.status.error_message();
  // Its home's block events said its blocks are on that replica's disk (STORED_ON_DISK):
  // cheaper there than computing them elsewhere, and predicted as what the replica found.
  EXPECT_GT(SchedulerStats(home).prompt_tokens(), home_prompt_tokens)
      << "the second turn went back to replica " << home;
  const std::string route_metrics =
      testing::HttpGet(cluster_->frontend_process().metrics_port(), "/metrics");
  EXPECT_EQ(
      testing::MetricValue(route_metrics, "folio_frontend_route_predicted_cached_tokens_total"),
      testing::MetricValue(route_metrics, "folio_frontend_route_actual_cached_tokens_total"));
  // The first turn's full blocks (85 tokens: 5 blocks) were gone from both pools and
  // host tiers; they came back from the files.
  EXPECT_GE(second.usage.cached_prompt_tokens(), 64);
  EXPECT_GT(disk_loads(), loads_before);
  EXPECT_GT(worker_counter("folio_worker_kv_disk_files_total{outcome=\"load\"}"), 0);
  std::vector<int> old_ports = ports();
  cluster_.reset();
  unlink_segments(old_ports);

  // Every process again: the pools and host tiers are empty, the files are not.
  StartCluster("kv", 2, worker_args, {"--max_model_len=256"});
  const Completion after_restart = Generate(history, 8);
  ASSERT_TRUE(after_restart.status.ok()) << after_restart.status.error_message();
  EXPECT_EQ(after_restart.tokens, second.tokens);
  EXPECT_GE(after_restart.usage.cached_prompt_tokens(), 64);
  old_ports = ports();
  cluster_.reset();
  unlink_segments(old_ports);

  // Every payload damaged (the headers intact, so the cache managers find the blocks).
  int damaged = 0;
  for (const auto& ns : std::filesystem::directory_iterator(root)) {
    for (const auto& f : std::filesystem::directory_iterator(ns.path())) {
      std::fstream io(f.path(), std::ios::in | std::ios::out | std::ios::binary);
      io.seekp(-1, std::ios::end);
      io.put('\x7f');
      ++damaged;
    }
  }
  ASSERT_GT(damaged, 0);
  StartCluster("kv", 2, worker_args, {"--max_model_len=256"});
  const Completion damaged_run = Generate(history, 8);
  ASSERT_TRUE(damaged_run.status.ok()) << damaged_run.status.error_message();
  EXPECT_EQ(damaged_run.tokens, second.tokens);
  EXPECT_GT(worker_counter("folio_worker_kv_disk_files_total{outcome=\"load_failed\"}"), 0);
  // The blocks the workers could not load were dropped for good: no refusal loop.
  int64_t banned = 0;
  for (int i = 0; i < 2; ++i) banned += cluster_->CacheStats(i).disk_tier_banned();
  EXPECT_GT(banned, 0);
  old_ports = ports();
  cluster_.reset();
  unlink_segments(old_ports);
  std::filesystem::remove_all(root);
}

TEST_F(RoutingTest, LeastLoadedSpreadsABurstOverEveryReplica) {
  StartCluster("least-loaded");
  std::vector<std::thread> clients;
  std::vector<Completion> out(12);
  for (int i = 0; i < 12; ++i) {
    clients.emplace_back([&, i] { out[i] = Generate(UserTurn(i, 0, 20), 48); });
  }
  for (std::thread& t : clients) t.join();
  for (const Completion& c : out) EXPECT_TRUE(c.status.ok()) << c.status.error_message();
  for (int i = 0; i < 3; ++i) {
    EXPECT_GE(SchedulerStats(i).generation_tokens(), 48 * 2) << "replica " << i;
  }
}

TEST_F(RoutingTest, AKilledReplicasStreamsContinueOnTheOthersTokenForToken) {
  StartCluster("round-robin");
  const std::vector<v1::GenerateRequest> requests = testing::MixedRequests();
  const std::vector<testing::Stream> want = testing::RunStreams(cluster_->frontend(), requests);
  ASSERT_TRUE(cluster_->WaitForEmptyPool(absl::Seconds(10)));
  const int64_t victim_tokens_before = SchedulerStats(1).generation_tokens();
  const std::vector<testing::Stream> got =
      testing::RunStreams(cluster_->frontend(), requests, /*after_tokens=*/200, [&] {
        // The whole replica: scheduler, worker and cache manager.
        for (testing::ServiceProcess* p :
             {&cluster_->scheduler_process(1), &cluster_->worker_process(0, 1),
              &cluster_->cachemgr_process(1)}) {
          p->Signal(SIGKILL);
          EXPECT_TRUE(p->Wait(absl::Seconds(10)).ok());
        }
      });
  EXPECT_GT(victim_tokens_before, 0) << "round-robin gave the victim work";
  testing::ExpectSameStreams(want, got);

  // New requests are served at once by the others.
  for (int i = 0; i < 3; ++i) {
    const absl::Time start = absl::Now();
    const Completion c = Generate(UserTurn(i, 9, 10), 5);
    EXPECT_TRUE(c.status.ok()) << c.status.error_message();
    EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  }

  // Started again (as Kubernetes restarts its pod's containers), it takes work again.
  ASSERT_TRUE(cluster_->cachemgr_process(1).Restart().ok());
  ASSERT_TRUE(cluster_->worker_process(0, 1).Restart().ok());
  ASSERT_TRUE(cluster_->scheduler_process(1).Restart().ok());
  int64_t served = 0;
  for (int attempt = 0; attempt < 60 && served == 0; ++attempt) {
    absl::SleepFor(absl::Milliseconds(500));
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(Generate(UserTurn(i, 10 + attempt, 10), 4).status.ok());
    served = SchedulerStats(1).generation_tokens();
  }
  EXPECT_GT(served, 0) << "the restarted replica never took work again";
  EXPECT_TRUE(cluster_->WaitForEmptyPool(absl::Seconds(10))) << "every pool is full again";
}

}  // namespace
}  // namespace folio
