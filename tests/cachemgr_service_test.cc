// The folio-cachemgr binary over loopback gRPC: readiness and draining on
// grpc.health.v1, the step RPC and its errors, and /metrics checked by promtool.
#include <signal.h>

#include <fstream>
#include <regex>

#include "folio/internal/v1/cachemgr.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpc/reflection/v1/reflection.grpc.pb.h"
#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "google/protobuf/descriptor.pb.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "tests/service_process.h"

namespace folio {
namespace {

namespace pb = folio::internal::v1;
using grpc::health::v1::Health;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;
using ::testing::HasSubstr;
using testing::ServiceProcess;

constexpr char kService[] = "folio.internal.v1.CacheManager";

std::unique_ptr<grpc::ClientContext> Ctx() {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  return ctx;
}

class CacheManagerServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto proc = ServiceProcess::Start("folio-cachemgr", {"--shutdown_grace_ms=1500"});
    ASSERT_TRUE(proc.ok()) << proc.status();
    proc_ = std::move(*proc);
    auto channel = grpc::CreateChannel(proc_->address(), grpc::InsecureChannelCredentials());
    stub_ = pb::CacheManager::NewStub(channel);
    health_ = Health::NewStub(channel);
  }

  HealthCheckResponse::ServingStatus Health() {
    HealthCheckRequest req;
    req.set_service(kService);
    HealthCheckResponse resp;
    grpc::Status s = health_->Check(Ctx().get(), req, &resp);
    return s.ok() ? resp.status() : HealthCheckResponse::UNKNOWN;
  }

  pb::CacheStats Stats() {
    pb::CacheStats stats;
    EXPECT_TRUE(stub_->GetStats(Ctx().get(), pb::GetStatsRequest(), &stats).ok());
    return stats;
  }

  grpc::Status Step(const pb::CacheStepRequest& req, pb::CacheStepResponse* resp) {
    return stub_->Step(Ctx().get(), req, resp);
  }

  void Configure(int blocks, int block_size) {
    pb::ConfigureRequest req;
    req.set_num_blocks(blocks);
    req.set_block_size(block_size);
    pb::ConfigureResponse resp;
    grpc::Status s = stub_->Configure(Ctx().get(), req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }

  std::unique_ptr<ServiceProcess> proc_;
  std::unique_ptr<pb::CacheManager::Stub> stub_;
  std::unique_ptr<Health::Stub> health_;
};

TEST_F(CacheManagerServiceTest, NotServingUntilConfiguredThenServing) {
  EXPECT_EQ(Health(), HealthCheckResponse::NOT_SERVING);
  EXPECT_FALSE(Stats().configured());
  pb::CacheStepResponse resp;
  grpc::Status s = Step(pb::CacheStepRequest(), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("not configured"));

  pb::ConfigureRequest bad;
  bad.set_num_blocks(0);
  pb::ConfigureResponse configured;
  s = stub_->Configure(Ctx().get(), bad, &configured);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("num_blocks"));
  bad.set_num_blocks(8);
  bad.set_block_size(-3);
  s = stub_->Configure(Ctx().get(), bad, &configured);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Health(), HealthCheckResponse::NOT_SERVING);

  Configure(64, 16);
  EXPECT_EQ(Health(), HealthCheckResponse::SERVING);
  EXPECT_EQ(Stats().num_blocks_total(), 64);
}

TEST_F(CacheManagerServiceTest, EachStartHasItsOwnIncarnation) {
  const std::string first = Stats().incarnation_id();
  EXPECT_EQ(first.size(), 32u);
  Configure(8, 16);
  EXPECT_EQ(Stats().incarnation_id(), first) << "the same process keeps its id";
  ASSERT_TRUE(proc_->Restart().ok());
  pb::CacheStats after;
  for (int i = 0; i < 200; ++i) {  // until the channel has reconnected
    grpc::ClientContext ctx;
    ctx.set_wait_for_ready(true);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(100));
    if (stub_->GetStats(&ctx, pb::GetStatsRequest(), &after).ok()) break;
  }
  const std::string second = after.incarnation_id();
  EXPECT_EQ(second.size(), 32u);
  EXPECT_NE(second, first) << "a restarted process has a new id";
  EXPECT_FALSE(after.configured()) << "and no pool";
}

// Fencing (common/scheduler_epoch.h): Configure, Step and Reset from a scheduler older than
// the newest one seen are refused; GetStats names the newest epoch.
TEST_F(CacheManagerServiceTest, AnOlderSchedulerEpochIsFenced) {
  EXPECT_EQ(Stats().scheduler_epoch(), 0u);
  pb::ConfigureRequest configure;
  configure.set_num_blocks(8);
  configure.set_block_size(16);
  configure.set_scheduler_epoch(100);
  pb::ConfigureResponse configured;
  ASSERT_TRUE(stub_->Configure(Ctx().get(), configure, &configured).ok());
  pb::ResetRequest reset;
  reset.set_scheduler_epoch(200);
  pb::ResetResponse reset_resp;
  ASSERT_TRUE(stub_->Reset(Ctx().get(), reset, &reset_resp).ok());
  EXPECT_EQ(Stats().scheduler_epoch(), 200u);

  pb::CacheStepRequest step;
  pb::Create* create = step.add_creates();
  create->set_seq_id(1);
  create->set_max_len(16);
  step.set_scheduler_epoch(100);
  pb::CacheStepResponse out;
  grpc::Status s = stub_->Step(Ctx().get(), step, &out);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("fenced: Step from scheduler epoch 100"));
  EXPECT_EQ(Stats().num_sequences(), 0) << "a refused step changes nothing";
  reset.set_scheduler_epoch(100);
  EXPECT_EQ(stub_->Reset(Ctx().get(), reset, &reset_resp).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(stub_->Configure(Ctx().get(), configure, &configured).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  step.set_scheduler_epoch(200);
  EXPECT_TRUE(stub_->Step(Ctx().get(), step, &out).ok()) << "the newer scheduler steps";
  EXPECT_EQ(Stats().num_sequences(), 1);
}

TEST_F(CacheManagerServiceTest, StepGrantsForksCopiesAndFrees) {
  Configure(16, 4);
  pb::CacheStepRequest req;
  pb::Create* create = req.add_creates();
  create->set_seq_id(1);
  create->set_max_len(32);
  pb::Grant* grant = req.add_grants();
  grant->set_seq_id(1);
  grant->set_start_pos(0);
  for (int t : {5, 6, 7, 8, 9, 10}) grant->add_token_ids(t);
  pb::CacheStepResponse resp;
  ASSERT_TRUE(Step(req, &resp).ok());
  ASSERT_EQ(resp.grants_size(), 1);
  EXPECT_EQ(resp.grants(0).status(), pb::SequenceResult::OK);
  EXPECT_EQ(resp.grants(0).entries_size(), 2);
  EXPECT_EQ(resp.grants(0).num_tokens(), 6);

  pb::CacheStepRequest fork;
  fork.add_forks()->set_parent_seq_id(1);
  fork.mutable_forks(0)->set_child_seq_id(2);
  pb::Grant* child = fork.add_grants();
  child->set_seq_id(2);
  child->set_start_pos(6);
  child->add_token_ids(11);
  ASSERT_TRUE(Step(fork, &resp).ok());
  ASSERT_EQ(resp.grants(0).copies_size(), 1) << "the shared partial block is copied";
  EXPECT_EQ(resp.grants(0).copies(0).src(), resp.forks(0).entries(1));
  EXPECT_EQ(Stats().num_blocks_used(), 3);
  EXPECT_EQ(Stats().num_cow_copies(), 1);

  pb::CacheStepRequest free;
  free.add_frees(1);
  free.add_frees(2);
  ASSERT_TRUE(Step(free, &resp).ok());
  EXPECT_EQ(Stats().num_blocks_free(), 16);
}

// The host KV tier over gRPC: commits store, a lookup that misses the pool loads, a Reset
// keeps what was confirmed and drops the rest, and a new segment id empties the tier.
TEST_F(CacheManagerServiceTest, TheHostTierStoresLoadsAndSurvivesAReset) {
  pb::ConfigureRequest configure;
  configure.set_num_blocks(4);
  configure.set_block_size(2);
  configure.set_host_tier_blocks(8);
  configure.set_host_tier_id("seg-1");
  pb::ConfigureResponse configured;
  ASSERT_TRUE(stub_->Configure(Ctx().get(), configure, &configured).ok());
  // A sequence of 5 tokens, computed: its two full blocks are stored.
  pb::CacheStepRequest req;
  req.add_creates()->set_seq_id(1);
  req.mutable_creates(0)->set_max_len(8);
  pb::Grant* grant = req.add_grants();
  grant->set_seq_id(1);
  for (int t : {5, 6, 7, 8, 9}) grant->add_token_ids(t);
  pb::CacheStepResponse resp;
  ASSERT_TRUE(Step(req, &resp).ok());
  pb::CacheStepRequest commit;
  commit.add_commits()->set_seq_id(1);
  commit.mutable_commits(0)->set_num_computed_tokens(5);
  commit.add_frees(1);
  ASSERT_TRUE(Step(commit, &resp).ok());
  ASSERT_EQ(resp.transfers_size(), 2);
  EXPECT_EQ(resp.transfers(0).kind(), pb::BlockTransfer::STORE);
  EXPECT_EQ(resp.transfers(1).ticket(), resp.transfers(0).ticket() + 1);
  EXPECT_EQ(Stats().host_tier_blocks_used(), 2);

  // The first store confirmed, then a reset (a lost worker): the second is dropped.
  pb::CacheStepRequest confirm;
  confirm.set_transfers_done(resp.transfers(0).ticket());
  ASSERT_TRUE(Step(confirm, &resp).ok());
  pb::ResetRequest reset;
  pb::ResetResponse reset_resp;
  ASSERT_TRUE(stub_->Reset(Ctx().get(), reset, &reset_resp).ok());
  EXPECT_EQ(Stats().host_tier_blocks_used(), 1);
  EXPECT_EQ(Stats().host_tier_dropped_unconfirmed(), 1);
  EXPECT_EQ(Stats().host_tier_id(), "seg-1");

  // The same prompt again: the pool is empty, the first block loads from the tier.
  pb::CacheStepRequest again;
  pb::Create* create = again.add_creates();
  create->set_seq_id(2);
  create->set_max_len(8);
  for (int t : {5, 6, 7, 8, 9}) create->add_prompt_token_ids(t);
  ASSERT_TRUE(Step(again, &resp).ok());
  EXPECT_EQ(resp.creates(0).num_cached_tokens(), 2);
  ASSERT_EQ(resp.transfers_size(), 1);
  EXPECT_EQ(resp.transfers(0).kind(), pb::BlockTransfer::LOAD);
  EXPECT_EQ(resp.transfers(0).block(), resp.creates(0).entries(0));
  EXPECT_EQ(Stats().host_tier_loads(), 1);

  // A worker came back with a new segment: the tier starts empty; then with none.
  pb::CacheStepRequest free;
  free.add_frees(2);
  ASSERT_TRUE(Step(free, &resp).ok());
  reset.set_set_host_tier(true);
  reset.set_host_tier_id("seg-2");
  reset.set_host_tier_blocks(4);
  ASSERT_TRUE(stub_->Reset(Ctx().get(), reset, &reset_resp).ok());
  EXPECT_EQ(Stats().host_tier_blocks_used(), 0);
  EXPECT_EQ(Stats().host_tier_blocks_total(), 4);
  EXPECT_EQ(Stats().host_tier_id(), "seg-2");
  reset.set_host_tier_blocks(1 << 30);  // out of range: refused, nothing changes
  EXPECT_EQ(stub_->Reset(Ctx().get(), reset, &reset_resp).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Stats().host_tier_blocks_total(), 4);
  reset.set_host_tier_blocks(0);
  reset.set_host_tier_id("");
  ASSERT_TRUE(stub_->Reset(Ctx().get(), reset, &reset_resp).ok());
  EXPECT_EQ(Stats().host_tier_blocks_total(), 0);
  // A huge tier is refused before anything is allocated.
  configure.set_host_tier_blocks(1 << 24);
  configure.set_block_size(1024);
  EXPECT_EQ(stub_->Configure(Ctx().get(), configure, &configured).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  configure.set_block_size(2);

  // The tier needs the paged policy with prefix caching: without it, it is left unused.
  configure.set_disable_prefix_caching(true);
  ASSERT_TRUE(stub_->Configure(Ctx().get(), configure, &configured).ok());
  EXPECT_EQ(Stats().host_tier_blocks_total(), 0);
  reset.set_host_tier_blocks(4);
  reset.set_host_tier_id("seg-3");
  ASSERT_TRUE(stub_->Reset(Ctx().get(), reset, &reset_resp).ok()) << "nor does a reset add it";
  EXPECT_EQ(Stats().host_tier_blocks_total(), 0);
}

TEST_F(CacheManagerServiceTest, BadStepsGetTheirStatusAndChangeNothing) {
  Configure(16, 4);
  pb::CacheStepRequest setup;
  setup.add_creates()->set_seq_id(1);
  setup.mutable_creates(0)->set_max_len(8);
  pb::CacheStepResponse resp;
  ASSERT_TRUE(Step(setup, &resp).ok());

  struct Case {
    std::string name;
    std::function<void(pb::CacheStepRequest*)> build;
    grpc::StatusCode code;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"unknown free", [](auto* r) { r->add_frees(99); }, grpc::StatusCode::NOT_FOUND,
       "sequence 99 is unknown"},
      {"double free", [](auto* r) { r->add_frees(1); r->add_frees(1); },
       grpc::StatusCode::NOT_FOUND, "already freed"},
      {"duplicate create",
       [](auto* r) { auto* c = r->add_creates(); c->set_seq_id(1); c->set_max_len(4); },
       grpc::StatusCode::INVALID_ARGUMENT, "already exists"},
      {"fork of unknown parent",
       [](auto* r) { auto* f = r->add_forks(); f->set_parent_seq_id(5); f->set_child_seq_id(6); },
       grpc::StatusCode::NOT_FOUND, "parent sequence 5"},
      {"zero tokens", [](auto* r) { r->add_grants()->set_seq_id(1); },
       grpc::StatusCode::INVALID_ARGUMENT, "zero tokens"},
      {"past max_len",
       [](auto* r) {
         auto* g = r->add_grants();
         g->set_seq_id(1);
         for (int i = 0; i < 9; ++i) g->add_token_ids(3);
       },
       grpc::StatusCode::INVALID_ARGUMENT, "past its max_len 8"},
      {"negative max_len",
       [](auto* r) { auto* c = r->add_creates(); c->set_seq_id(2); c->set_max_len(-1); },
       grpc::StatusCode::INVALID_ARGUMENT, "max_len"},
  };
  for (const Case& c : cases) {
    pb::CacheStepRequest req;
    c.build(&req);
    // A valid grant rides along: it must not happen either.
    pb::Grant* ok = req.add_grants();
    ok->set_seq_id(1);
    ok->add_token_ids(1);
    if (c.name == "zero tokens" || c.name == "past max_len") req.mutable_grants()->RemoveLast();
    const pb::CacheStats before = Stats();
    grpc::Status s = Step(req, &resp);
    EXPECT_EQ(s.error_code(), c.code) << c.name << ": " << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr(c.message)) << c.name;
    const pb::CacheStats after = Stats();
    EXPECT_EQ(after.num_blocks_free(), before.num_blocks_free()) << c.name;
    EXPECT_EQ(after.num_tokens_stored(), before.num_tokens_stored()) << c.name;
    EXPECT_EQ(after.num_sequences(), before.num_sequences()) << c.name;
  }
  EXPECT_EQ(Health(), HealthCheckResponse::SERVING) << "bad input never takes it down";
}

double MetricValue(const std::string& text, const std::string& name) {
  std::smatch m;
  if (!std::regex_search(text, m, std::regex("\n" + name + " ([0-9.e+-]+)\n"))) return -1;
  return std::stod(m[1]);
}

TEST_F(CacheManagerServiceTest, MetricsPassPromtoolAndMove) {
  Configure(32, 16);
  const std::string before = testing::HttpGet(proc_->metrics_port(), "/metrics");
  ASSERT_FALSE(before.empty());
  EXPECT_EQ(MetricValue(before, "folio_cachemgr_blocks_used"), 0);
  EXPECT_EQ(MetricValue(before, "folio_cachemgr_blocks_capacity"), 32);

  pb::CacheStepRequest req;
  pb::Create* c = req.add_creates();
  c->set_seq_id(1);
  c->set_max_len(100);
  pb::Grant* g = req.add_grants();
  g->set_seq_id(1);
  for (int i = 0; i < 20; ++i) g->add_token_ids(i);
  pb::CacheStepResponse resp;
  ASSERT_TRUE(Step(req, &resp).ok());
  pb::CacheStepRequest bad;
  bad.add_frees(77);
  EXPECT_FALSE(Step(bad, &resp).ok());

  const std::string after = testing::HttpGet(proc_->metrics_port(), "/metrics");
  EXPECT_EQ(MetricValue(after, "folio_cachemgr_blocks_used"), 2);
  EXPECT_EQ(MetricValue(after, "folio_cachemgr_blocks_free"), 30);
  EXPECT_DOUBLE_EQ(MetricValue(after, "folio_cachemgr_kv_usage_ratio"), 2.0 / 32);
  EXPECT_DOUBLE_EQ(MetricValue(after, "folio_cachemgr_slot_utilization_ratio"), 20.0 / 32);
  EXPECT_EQ(MetricValue(after, "folio_cachemgr_sequences"), 1);
  EXPECT_EQ(MetricValue(after, "folio_cachemgr_step_latency_seconds_count"), 2);
  EXPECT_EQ(MetricValue(after, "folio_cachemgr_prefix_cache_queries_total"), 0);
  EXPECT_THAT(after, HasSubstr("folio_cachemgr_step_errors_total{code=\"NOT_FOUND\"} 1"));
  for (const char* name : {"folio_cachemgr_blocks_cached_evictable",
                           "folio_cachemgr_prefix_cache_hits_total",
                           "folio_cachemgr_grant_failures_total",
                           "folio_cachemgr_cow_copies_total"}) {
    EXPECT_GE(MetricValue(after, name), 0) << name << " missing";
  }

  const std::string file = ::testing::TempDir() + "/cachemgr_metrics.txt";
  std::ofstream(file) << after;
  testing::CommandResult promtool = testing::RunCommand("promtool check metrics < " + file);
  EXPECT_EQ(promtool.exit_code, 0) << promtool.output;
}

TEST_F(CacheManagerServiceTest, ReflectionListsTheServices) {
  namespace refl = grpc::reflection::v1alpha;
  auto stub = refl::ServerReflection::NewStub(
      grpc::CreateChannel(proc_->address(), grpc::InsecureChannelCredentials()));
  auto ctx = Ctx();
  auto stream = stub->ServerReflectionInfo(ctx.get());
  refl::ServerReflectionRequest req;
  req.set_list_services("");
  ASSERT_TRUE(stream->Write(req));
  stream->WritesDone();
  refl::ServerReflectionResponse resp;
  ASSERT_TRUE(stream->Read(&resp));
  std::vector<std::string> names;
  for (const auto& s : resp.list_services_response().service()) names.push_back(s.name());
  EXPECT_THAT(names, ::testing::IsSupersetOf(
                         std::vector<std::string>{kService, "grpc.health.v1.Health"}));
  EXPECT_TRUE(stream->Finish().ok());
}

// Reflection v1 (common/reflection_v1.h): the services, a service's file with its
// imports (each once per stream), and a clear NOT_FOUND.
TEST_F(CacheManagerServiceTest, ReflectionV1ListsTheServicesAndTheirFiles) {
  namespace refl = grpc::reflection::v1;
  auto stub = refl::ServerReflection::NewStub(
      grpc::CreateChannel(proc_->address(), grpc::InsecureChannelCredentials()));
  auto ctx = Ctx();
  auto stream = stub->ServerReflectionInfo(ctx.get());
  refl::ServerReflectionRequest list;
  list.set_list_services("");
  ASSERT_TRUE(stream->Write(list));
  refl::ServerReflectionResponse resp;
  ASSERT_TRUE(stream->Read(&resp));
  std::vector<std::string> names;
  for (const auto& s : resp.list_services_response().service()) names.push_back(s.name());
  EXPECT_THAT(names, ::testing::IsSupersetOf(std::vector<std::string>{
                         kService, "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection",
                         "grpc.reflection.v1alpha.ServerReflection"}));

  refl::ServerReflectionRequest symbol;
  symbol.set_file_containing_symbol(kService);
  ASSERT_TRUE(stream->Write(symbol));
  ASSERT_TRUE(stream->Read(&resp));
  std::vector<std::string> files;
  for (const std::string& bytes : resp.file_descriptor_response().file_descriptor_proto()) {
    google::protobuf::FileDescriptorProto file;
    ASSERT_TRUE(file.ParseFromString(bytes));
    files.push_back(file.name());
  }
  ASSERT_FALSE(files.empty());
  EXPECT_EQ(files[0], "folio/internal/v1/cachemgr.proto");
  // The same file again on this stream: sent once already.
  ASSERT_TRUE(stream->Write(symbol));
  ASSERT_TRUE(stream->Read(&resp));
  EXPECT_EQ(resp.file_descriptor_response().file_descriptor_proto_size(), 0);

  refl::ServerReflectionRequest missing;
  missing.set_file_containing_symbol("no.such.Service");
  ASSERT_TRUE(stream->Write(missing));
  ASSERT_TRUE(stream->Read(&resp));
  EXPECT_EQ(resp.error_response().error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(resp.error_response().error_message(), HasSubstr("no.such.Service"));
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
}

TEST_F(CacheManagerServiceTest, SigtermDrainsWithNotServingThenExits) {
  Configure(8, 16);
  ASSERT_EQ(Health(), HealthCheckResponse::SERVING);
  proc_->Signal(SIGTERM);
  absl::SleepFor(absl::Milliseconds(400));
  EXPECT_EQ(Health(), HealthCheckResponse::NOT_SERVING) << "draining is visible";
  absl::StatusOr<int> exit_code = proc_->Wait(absl::Seconds(15));
  ASSERT_TRUE(exit_code.ok()) << exit_code.status();
  EXPECT_EQ(*exit_code, 0);
}

}  // namespace
}  // namespace folio
