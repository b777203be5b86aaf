// ReplicaSet over real cache managers (in-process CacheManagerService on loopback) behind
// fake schedulers that relay their block events as the real one does.
#include "services/frontend/routing/replica_set.h"

#include <map>
#include <numeric>
#include <set>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"
#include "services/cachemgr/service.h"
#include "services/frontend/fake_scheduler.h"

namespace folio::frontend::routing {
namespace {

namespace ipb = folio::internal::v1;
using ::testing::HasSubstr;

constexpr int32_t kBlockSize = 4;

std::shared_ptr<grpc::ChannelInterface> Channel(const std::string& address) {
  return grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
}

// One replica: a real cache manager and a fake scheduler in front of it.
struct TestReplica {
  TestReplica() : cachemgr_service(cachemgr::CacheConfig{}, &registry) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &cachemgr_port);
    builder.RegisterService(&cachemgr_service);
    cachemgr_server = builder.BuildAndStart();
    cachemgr_stub = ipb::CacheManager::NewStub(Channel(cachemgr_address()));
    ipb::ConfigureRequest configure;
    configure.set_num_blocks(64);
    configure.set_block_size(kBlockSize);
    grpc::ClientContext ctx;
    ipb::ConfigureResponse r;
    EXPECT_TRUE(cachemgr_stub->Configure(&ctx, configure, &r).ok());
    scheduler = testing::FakeScheduler::Start(ipb::ClusterInfo());
    scheduler->SetReplicaState(0, 0, 0, Channel(cachemgr_address()));
  }
  std::string cachemgr_address() const { return absl::StrCat("127.0.0.1:", cachemgr_port); }

  // Runs `prompt` through the pool as a sequence whose KV is computed, then frees it: its
  // full blocks stay cached.
  void Cache(uint64_t seq, const std::vector<int32_t>& prompt) {
    ipb::CacheStepRequest step;
    ipb::Create* c = step.add_creates();
    c->set_seq_id(seq);
    c->set_max_len(256);
    ipb::Grant* g = step.add_grants();
    g->set_seq_id(seq);
    g->mutable_token_ids()->Assign(prompt.begin(), prompt.end());
    ipb::CacheStepResponse r;
    {
      grpc::ClientContext ctx;
      ASSERT_TRUE(cachemgr_stub->Step(&ctx, step, &r).ok());
    }
    ipb::CacheStepRequest commit;
    ipb::Commit* m = commit.add_commits();
    m->set_seq_id(seq);
    m->set_num_computed_tokens(static_cast<int32_t>(prompt.size()));
    commit.add_frees(seq);
    grpc::ClientContext ctx;
    ASSERT_TRUE(cachemgr_stub->Step(&ctx, commit, &r).ok());
  }
  void ResetPool() {
    grpc::ClientContext ctx;
    ipb::ResetResponse r;
    ASSERT_TRUE(cachemgr_stub->Reset(&ctx, ipb::ResetRequest(), &r).ok());
  }

  MetricsRegistry registry;
  cachemgr::CacheManagerService cachemgr_service;
  int cachemgr_port = 0;
  std::unique_ptr<grpc::Server> cachemgr_server;
  std::unique_ptr<ipb::CacheManager::Stub> cachemgr_stub;
  std::unique_ptr<testing::FakeScheduler> scheduler;
};

std::vector<int32_t> Prompt(int32_t n, int32_t first) {
  std::vector<int32_t> p(n);
  std::iota(p.begin(), p.end(), first);
  return p;
}

ipb::ScheduleRequest Request(const std::vector<int32_t>& prompt, int32_t max_tokens = 8) {
  ipb::ScheduleRequest r;
  r.mutable_prompt_token_ids()->Assign(prompt.begin(), prompt.end());
  r.set_max_tokens(max_tokens);
  return r;
}

class ReplicaSetTest : public ::testing::Test {
 protected:
  void StartReplicas(int n) {
    for (int i = 0; i < n; ++i) replicas_.push_back(std::make_unique<TestReplica>());
  }
  ReplicaSetOptions Options(RoutingPolicy policy) {
    ReplicaSetOptions o;
    for (auto& r : replicas_) o.targets.addresses.push_back(r->scheduler->address());
    o.policy = policy;
    o.block_size = kBlockSize;
    o.poll_interval = absl::Hours(1);  // the tests poll by hand (PollNow)
    o.make_channel = Channel;
    o.registry = &registry_;
    return o;
  }
  int IndexOf(const std::string& address) {
    for (size_t i = 0; i < replicas_.size(); ++i) {
      if (replicas_[i]->scheduler->address() == address) return static_cast<int>(i);
    }
    return -1;
  }

  MetricsRegistry registry_;
  std::vector<std::unique_ptr<TestReplica>> replicas_;
};

TEST(ParseReplicaTargetsTest, ListsDnsNamesAndBadInput) {
  absl::StatusOr<ReplicaTargets> list = ParseReplicaTargets("a:1, b:2,[::1]:3");
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(list->addresses, (std::vector<std::string>{"a:1", "b:2", "[::1]:3"}));
  absl::StatusOr<ReplicaTargets> dns = ParseReplicaTargets("dns:///folio-replica.ns.svc:50052");
  ASSERT_TRUE(dns.ok());
  EXPECT_EQ(dns->dns_name, "folio-replica.ns.svc:50052");
  EXPECT_TRUE(dns->addresses.empty());
  for (const char* bad : {"", "a:1,,b:2", "a", "a:0", "a:70000", "a:1,a:1", "dns:///name",
                          "http://a:1"}) {
    absl::StatusOr<ReplicaTargets> t = ParseReplicaTargets(bad);
    EXPECT_FALSE(t.ok()) << bad;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_THAT(std::string(ParseReplicaTargets("a:1,a:1").status().message()),
              HasSubstr("listed twice"));
}

TEST(ResolveDnsTest, LocalhostResolvesAndAMissingNameIsEmpty) {
  absl::StatusOr<std::vector<std::string>> local = ResolveDns("localhost:5");
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_FALSE(local->empty());
  for (const std::string& a : *local) EXPECT_THAT(a, ::testing::EndsWith(":5"));
  absl::StatusOr<std::vector<std::string>> none = ResolveDns("no-such-host.invalid:5");
  // No address: empty, or a resolver error where the machine has no DNS at all.
  if (none.ok()) {
    EXPECT_TRUE(none->empty());
  }
}

TEST_F(ReplicaSetTest, KvRoutesToTheReplicaHoldingThePrefix) {
  StartReplicas(3);
  const std::vector<int32_t> system = Prompt(40, 1000);  // 10 blocks
  replicas_[2]->Cache(1, system);
  replicas_[0]->Cache(1, Prompt(40, 5000));  // unrelated content elsewhere
  auto set = ReplicaSet::Create(Options(RoutingPolicy::kKv));
  ASSERT_TRUE(set.ok()) << set.status();
  std::vector<ReplicaStatus> status = (*set)->Status();
  ASSERT_EQ(status.size(), 3u);
  EXPECT_EQ(status[2].index_blocks, 10);
  EXPECT_EQ(status[0].index_blocks, 10);
  EXPECT_EQ(status[1].index_blocks, 0);
  for (const ReplicaStatus& s : status) EXPECT_EQ(s.health, ReplicaHealth::kServing);

  std::vector<int32_t> turn = system;
  for (int32_t t : Prompt(9, 7)) turn.push_back(t);
  // Turns that arrive one after another (each finished before the next: the reports say
  // the replicas are idle) all go where the prefix is.
  for (int i = 0; i < 5; ++i) {
    (*set)->PollNow();
    absl::StatusOr<StreamRouter::Target> target = (*set)->Route(Request(turn), "");
    ASSERT_TRUE(target.ok()) << target.status();
    EXPECT_EQ(IndexOf(target->replica), 2) << "request " << i;
    target->lease->ReportCachedTokens(40);
  }
  // Events after the first snapshot: replica 1 caches a longer version; the next poll
  // carries its STORED events, and the cost moves there.
  std::vector<int32_t> longer = turn;
  for (int32_t t : Prompt(20, 300)) longer.push_back(t);
  replicas_[1]->Cache(9, longer);
  (*set)->PollNow();
  EXPECT_EQ((*set)->Status()[1].index_blocks, static_cast<int64_t>(longer.size() / kBlockSize));
  std::vector<int32_t> next = longer;
  next.push_back(1);
  absl::StatusOr<StreamRouter::Target> moved = (*set)->Route(Request(next), "");
  ASSERT_TRUE(moved.ok());
  EXPECT_EQ(IndexOf(moved->replica), 1);
  EXPECT_NE(registry_.Serialize().find("folio_frontend_route_total{replica=\"" +
                                       replicas_[2]->scheduler->address() + "\",policy=\"kv\"} 5"),
            std::string::npos)
      << registry_.Serialize();
}

TEST_F(ReplicaSetTest, APoolResetIsSeenAndTheIndexResyncs) {
  StartReplicas(2);
  replicas_[0]->Cache(1, Prompt(32, 1));
  auto set = ReplicaSet::Create(Options(RoutingPolicy::kKv));
  ASSERT_TRUE(set.ok());
  EXPECT_EQ((*set)->Status()[0].index_blocks, 8);
  replicas_[0]->ResetPool();  // a new pool: the old claims must go
  (*set)->PollNow();
  EXPECT_EQ((*set)->Status()[0].index_blocks, 0);
  replicas_[0]->Cache(2, Prompt(8, 77));
  (*set)->PollNow();
  EXPECT_EQ((*set)->Status()[0].index_blocks, 2);
}

TEST_F(ReplicaSetTest, LeastLoadedSpreadsABurstBetweenReports) {
  StartReplicas(3);
  replicas_[0]->scheduler->SetReplicaState(4, 0, 4000, Channel(replicas_[0]->cachemgr_address()));
  auto set = ReplicaSet::Create(Options(RoutingPolicy::kLeastLoaded));
  ASSERT_TRUE(set.ok());
  std::map<int, int> counts;
  std::vector<std::shared_ptr<RouteLease>> leases;
  for (int i = 0; i < 12; ++i) {
    absl::StatusOr<StreamRouter::Target> t = (*set)->Route(Request(Prompt(30, i * 100), 10), "");
    ASSERT_TRUE(t.ok());
    ++counts[IndexOf(t->replica)];
    leases.push_back(t->lease);
  }
  // No new report arrives during the burst: what was sent counts as load.
  EXPECT_EQ(counts[0], 0) << "the loaded replica is skipped";
  EXPECT_EQ(counts[1], 6);
  EXPECT_EQ(counts[2], 6);
  std::vector<ReplicaStatus> status = (*set)->Status();
  EXPECT_EQ(status[1].in_flight, 6);
  leases.clear();
  EXPECT_EQ((*set)->Status()[1].in_flight, 0);
}

TEST_F(ReplicaSetTest, ADeadReplicaIsAvoidedAndRejoinsWhenItAnswers) {
  StartReplicas(3);
  const std::vector<int32_t> prompt = Prompt(40, 1);
  replicas_[1]->Cache(1, prompt);
  auto set = ReplicaSet::Create(Options(RoutingPolicy::kKv));
  ASSERT_TRUE(set.ok());
  const std::string dead = replicas_[1]->scheduler->address();
  const int port = std::stoi(dead.substr(dead.rfind(':') + 1));
  replicas_[1]->scheduler.reset();  // the replica's scheduler is gone
  (*set)->PollNow();
  EXPECT_EQ((*set)->Status()[1].health, ReplicaHealth::kGone);
  EXPECT_EQ((*set)->Status()[1].index_blocks, 0) << "a gone replica's claims are dropped";
  for (int i = 0; i < 6; ++i) {
    absl::StatusOr<StreamRouter::Target> t = (*set)->Route(Request(prompt), "");
    ASSERT_TRUE(t.ok());
    EXPECT_NE(t->replica, dead);
  }
  // A stream that broke on replica 0 avoids it on its next attempt; the lease's report
  // takes it out of rotation until it answers a poll again.
  absl::StatusOr<StreamRouter::Target> t0 = (*set)->Route(Request(prompt), "");
  ASSERT_TRUE(t0.ok());
  const std::string broke = t0->replica;
  t0->lease->ReportBroken();
  for (int i = 0; i < 4; ++i) {
    absl::StatusOr<StreamRouter::Target> t = (*set)->Route(Request(prompt), broke);
    ASSERT_TRUE(t.ok());
    EXPECT_NE(t->replica, broke);
    EXPECT_NE(t->replica, dead);
  }
  // The scheduler comes back on the same address: serving again, its pool's blocks known.
  replicas_[1]->scheduler = testing::FakeScheduler::Start(ipb::ClusterInfo(), port);
  ASSERT_NE(replicas_[1]->scheduler, nullptr);
  replicas_[1]->scheduler->SetReplicaState(0, 0, 0, Channel(replicas_[1]->cachemgr_address()));
  for (int i = 0; i < 50 && (*set)->Status()[1].health != ReplicaHealth::kServing; ++i) {
    absl::SleepFor(absl::Milliseconds(100));  // the channel reconnects with backoff
    (*set)->PollNow();
  }
  EXPECT_EQ((*set)->Status()[1].health, ReplicaHealth::kServing);
  EXPECT_EQ((*set)->Status()[1].index_blocks, 10);
  absl::StatusOr<StreamRouter::Target> back = (*set)->Route(Request(prompt), "");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->replica, dead) << "its cached prefix draws the request back";
}

TEST_F(ReplicaSetTest, NoReplicaAnsweringIsUnavailableNotACrash) {
  StartReplicas(2);
  auto set = ReplicaSet::Create(Options(RoutingPolicy::kKv));
  ASSERT_TRUE(set.ok());
  replicas_.clear();
  (*set)->PollNow();
  absl::StatusOr<StreamRouter::Target> t = (*set)->Route(Request(Prompt(5, 1)), "");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE((*set)->AnyServing());
}

TEST_F(ReplicaSetTest, DnsMembershipFollowsTheResolver) {
  StartReplicas(3);
  auto answer = std::make_shared<absl::Mutex>();
  auto names = std::make_shared<std::vector<std::string>>();
  ReplicaSetOptions o = Options(RoutingPolicy::kRoundRobin);
  o.targets = ReplicaTargets{.dns_name = "folio-replica.test:50052"};
  o.resolve_interval = absl::ZeroDuration();  // every poll resolves
  o.resolve = [answer, names](const std::string& name) -> absl::StatusOr<std::vector<std::string>> {
    EXPECT_EQ(name, "folio-replica.test:50052");
    absl::MutexLock lock(answer.get());
    return *names;
  };
  auto set = ReplicaSet::Create(o);
  ASSERT_TRUE(set.ok()) << "a name with no address yet is not a start-up error";
  absl::StatusOr<StreamRouter::Target> none = (*set)->Route(Request(Prompt(5, 1)), "");
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(std::string(none.status().message()), HasSubstr("resolves to no address"));

  {
    absl::MutexLock lock(answer.get());
    *names = {replicas_[0]->scheduler->address(), replicas_[1]->scheduler->address()};
  }
  (*set)->PollNow();
  ASSERT_EQ((*set)->Status().size(), 2u);
  {
    absl::MutexLock lock(answer.get());
    names->push_back(replicas_[2]->scheduler->address());  // a replica added while running
  }
  (*set)->PollNow();
  std::set<std::string> used;
  for (int i = 0; i < 6; ++i) used.insert((*set)->Route(Request(Prompt(5, 1)), "")->replica);
  EXPECT_EQ(used.size(), 3u);
  {
    absl::MutexLock lock(answer.get());
    names->erase(names->begin());  // scaled in
  }
  (*set)->PollNow();
  ASSERT_EQ((*set)->Status().size(), 2u);
  for (int i = 0; i < 6; ++i) {
    EXPECT_NE((*set)->Route(Request(Prompt(5, 1)), "")->replica,
              replicas_[0]->scheduler->address());
  }
}

TEST_F(ReplicaSetTest, OneStaticReplicaIsRoutedWithoutPolling) {
  StartReplicas(1);
  auto set = ReplicaSet::Create(Options(RoutingPolicy::kKv));
  ASSERT_TRUE(set.ok());
  EXPECT_EQ((*set)->Status()[0].num_polls, 0) << "one replica costs nothing extra";
  replicas_.clear();  // even with its scheduler gone, the stream's own retries decide
  EXPECT_TRUE((*set)->Route(Request(Prompt(5, 1)), "").ok());
  EXPECT_FALSE(ReplicaSet::Create(ReplicaSetOptions{.make_channel = Channel}).ok());
}

}  // namespace
}  // namespace folio::frontend::routing
