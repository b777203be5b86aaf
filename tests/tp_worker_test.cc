// Tensor-parallel folio-worker processes over loopback: two ranks joined through rank 0's
// gRPC rendezvous and Gloo, driven step by step through the scheduler's GrpcWorkerClient
// (every step to both ranks, rank 0 answers). The stories260K golden text over them; the
// collectives each rank reports per step; each rank's weight bytes against a TP=1 worker;
// a killed rank and a stopped rank fail the step with an error instead of hanging; a
// restarted rank (1, then 0), a group broken by a timeout and ranks out of step (a step
// that reached one rank) are formed again by Restore; a
// TP degree that does not divide the KV heads is refused at start-up, and so are ranks
// handed to the scheduler out of order.
//
// Needs FOLIO_MODELS_DIR (skips with a how-to otherwise) and FOLIO_BUILD_DIR (set by ctest).
#include <signal.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/tokenizer/tokenizer.h"
#include "folio/internal/v1/worker.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "services/scheduler/cluster_setup.h"
#include "services/scheduler/grpc_clients.h"
#include "services/worker/model/random_model.h"
#include "tests/cluster.h"
#include "tests/service_process.h"

namespace folio {
namespace {

namespace pb = folio::internal::v1;
using ::testing::AnyOf;
using ::testing::HasSubstr;
using testing::ServiceProcess;

constexpr int kBlockSize = 16;
constexpr int kNumBlocks = 40;
// Greedy steps after a recovery: their text must begin the 200-step golden text.
constexpr int kShortSteps = 48;

std::unique_ptr<grpc::ClientContext> Ctx() {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  return ctx;
}

// A worker rank's value of folio_worker_collectives_total{op="..."}, or -1.
double Collectives(const ServiceProcess& p, const std::string& op) {
  const std::string page = testing::HttpGet(p.metrics_port(), "/metrics");
  const std::string key = "folio_worker_collectives_total{op=\"" + op + "\"} ";
  const size_t at = page.find(key);
  if (at == std::string::npos) return -1;
  return std::stod(page.substr(at + key.size()));
}

class TpWorkerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::optional<std::string> dir = testing::ModelsDir();
    if (!dir) GTEST_SKIP() << testing::kModelsDirHelp;
    models_dir_ = *dir;
    model_ = models_dir_ + "/stories260K/stories260K.gguf";
  }

  // Starts `tp` ranks (rank 0 first: the others rendezvous at its address).
  void StartRanks(int tp, const std::vector<std::string>& extra = {}) {
    for (int rank = 0; rank < tp; ++rank) {
      std::vector<std::string> args = {"--model=" + model_, "--kv_cache_bytes=4MiB",
                                       "--num_threads=1", "--shutdown_grace_ms=0",
                                       absl::StrCat("--tp_size=", tp),
                                       absl::StrCat("--tp_rank=", rank)};
      if (rank > 0) args.push_back("--tp_rendezvous=" + ranks_[0]->address());
      args.insert(args.end(), extra.begin(), extra.end());
      auto proc = ServiceProcess::Start("folio-worker", args);
      ASSERT_TRUE(proc.ok()) << proc.status();
      ranks_.push_back(std::move(*proc));
    }
  }

  std::unique_ptr<scheduler::GrpcWorkerClient> Client(absl::Duration timeout) {
    std::vector<std::shared_ptr<grpc::Channel>> channels;
    for (auto& r : ranks_) {
      channels.push_back(grpc::CreateChannel(r->address(), grpc::InsecureChannelCredentials()));
    }
    return std::make_unique<scheduler::GrpcWorkerClient>(channels, timeout);
  }

  // As the scheduler's set-up does: every rank joins the group (JoinGroup), then allocates
  // its KV cache, each at once; the client remembers the ranks' incarnations for Restore.
  void AllocateAll(scheduler::GrpcWorkerClient& client) {
    std::vector<std::string> incarnations;
    for (int r = 0; r < client.num_ranks(); ++r) incarnations.push_back(Info(client, r).incarnation_id());
    client.SetAllocation(kNumBlocks, kBlockSize, incarnations);
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    if (client.num_ranks() > 1) {
      absl::Status joined = client.FormGroup(0, deadline);
      ASSERT_TRUE(joined.ok()) << joined;
    }
    absl::Status allocated = client.AllocateEveryRank(deadline);
    ASSERT_TRUE(allocated.ok()) << allocated;
  }

  pb::WorkerInfo Info(scheduler::GrpcWorkerClient& client, int rank) {
    pb::WorkerInfo info;
    grpc::Status s = client.stub(rank).GetWorkerInfo(Ctx().get(), pb::GetWorkerInfoRequest(), &info);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return info;
  }

public:
  // One greedy decode step of sequence 1 at `pos` with token `token`.
  static worker::StepInput DecodeStep(int32_t token, int32_t pos) {
    worker::SequenceStep seq;
    seq.seq_id = 1;
    seq.token_ids = {token};
    seq.start_pos = pos;
    seq.sampling.temperature = 0.0f;
    for (int b = 0; b <= pos / kBlockSize; ++b) seq.block_table.push_back(kNumBlocks - 1 - b);
    worker::StepInput step;
    step.seqs = {seq};
    return step;
  }

protected:
  std::string models_dir_, model_;
  std::vector<std::unique_ptr<ServiceProcess>> ranks_;
};

// Greedy from BOS for `steps` decode steps through the ranks; the decoded text.
std::string GreedyText(scheduler::GrpcWorkerClient& client, const pb::WorkerInfo& info, int steps) {
  const int32_t bos = info.tokenizer().bos_id();
  std::vector<int32_t> ids = {bos};
  for (int pos = 0; pos < steps; ++pos) {
    absl::StatusOr<worker::StepOutput> out =
        client.Execute(TpWorkerTest::DecodeStep(ids.back(), pos), {"golden"});
    EXPECT_TRUE(out.ok()) << "step " << pos << ": " << out.status();
    if (!out.ok() || out->seqs.size() != 1 || out->seqs[0].samples.size() != 1) return "";
    ids.push_back(out->seqs[0].samples[0].token_id);
  }
  Vocab vocab;
  vocab.pieces.assign(info.tokenizer().pieces().begin(), info.tokenizer().pieces().end());
  vocab.scores.assign(info.tokenizer().scores().begin(), info.tokenizer().scores().end());
  for (int32_t t : info.tokenizer().types()) vocab.types.push_back(static_cast<TokenType>(t));
  vocab.bos_id = bos;
  vocab.eos_id = info.tokenizer().eos_id();
  vocab.unk_id = info.tokenizer().unk_id();
  vocab.add_bos = info.tokenizer().add_bos();
  vocab.add_dummy_prefix = info.tokenizer().add_dummy_prefix();
  absl::StatusOr<Tokenizer> tokenizer = Tokenizer::Create(std::move(vocab));
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  if (!tokenizer.ok()) return "";
  absl::StatusOr<std::string> text = tokenizer->Decode(ids);
  EXPECT_TRUE(text.ok()) << text.status();
  return text.ok() ? *text : "";
}

TEST_F(TpWorkerTest, TwoRanksProduceTheGoldenTextAndReportTheirCollectives) {
  StartRanks(2);
  auto client = Client(absl::Seconds(60));
  AllocateAll(*client);
  const pb::WorkerInfo info = Info(*client, 0);
  EXPECT_EQ(info.tp_size(), 2);
  EXPECT_EQ(info.num_kv_heads(), 2);  // stories260K: 4 KV heads over 2 ranks
  const int layers = info.model().num_layers();
  constexpr int kSteps = 200;
  EXPECT_EQ(GreedyText(*client, info, kSteps), testing::GoldenText(models_dir_));

  // Per step: the embedding's all-reduce and two per layer; one gather of the logits.
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(Collectives(*ranks_[r], "all_reduce"), kSteps * (1 + 2 * layers)) << "rank " << r;
    EXPECT_EQ(Collectives(*ranks_[r], "gather"), kSteps) << "rank " << r;
  }
}

// The CUDA backend's tensor parallelism through the worker service: two ranks on one
// device, their Gloo group staged through host memory (NCCL refuses two ranks on one
// GPU). Skips where folio-worker cannot get a CUDA device.
TEST_F(TpWorkerTest, TwoCudaRanksOnOneDeviceProduceTheGoldenText) {
  const std::vector<std::string> cuda = {"--device=cuda", "--cuda_collectives=host", "--dtype=f32",
                                         "--max_num_batched_tokens=64", "--max_num_seqs=4"};
  const testing::CommandResult probe = testing::RunCommand(
      testing::BinDir() + "/folio-worker --model=" + model_ + " --device=cuda --check_flags");
  if (probe.exit_code != 0) GTEST_SKIP() << "folio-worker has no CUDA device here: " << probe.output;
  StartRanks(2, cuda);
  auto client = Client(absl::Seconds(60));
  AllocateAll(*client);
  const pb::WorkerInfo info = Info(*client, 0);
  EXPECT_EQ(info.tp_size(), 2);
  const int layers = info.model().num_layers();
  constexpr int kSteps = 200;
  EXPECT_EQ(GreedyText(*client, info, kSteps), testing::GoldenText(models_dir_));
  // The steps' collectives and the CUDA runner's profiling step at AllocateKvCache.
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(Collectives(*ranks_[r], "all_reduce"), (kSteps + 1) * (1 + 2 * layers)) << "rank " << r;
    EXPECT_EQ(Collectives(*ranks_[r], "gather"), kSteps + 1) << "rank " << r;
  }
}

TEST_F(TpWorkerTest, EachRankHoldsAboutHalfTheLayerWeights) {
  auto single = ServiceProcess::Start(
      "folio-worker", {"--model=" + model_, "--kv_cache_bytes=4MiB", "--num_threads=1",
                       "--shutdown_grace_ms=0"});
  ASSERT_TRUE(single.ok()) << single.status();
  StartRanks(2);
  auto one = std::make_unique<scheduler::GrpcWorkerClient>(
      std::vector<std::shared_ptr<grpc::Channel>>{
          grpc::CreateChannel((*single)->address(), grpc::InsecureChannelCredentials())},
      absl::Seconds(60));
  pb::AllocateKvCacheRequest req;
  req.set_num_blocks(kNumBlocks);
  req.set_block_size(kBlockSize);
  pb::AllocateKvCacheResponse resp;
  ASSERT_TRUE(one->stub(0).AllocateKvCache(Ctx().get(), req, &resp).ok());
  auto two = Client(absl::Seconds(60));
  AllocateAll(*two);

  const pb::WorkerInfo full = Info(*one, 0);
  ASSERT_GT(full.layer_weight_bytes(), 0);
  for (int r = 0; r < 2; ++r) {
    const pb::WorkerInfo info = Info(*two, r);
    EXPECT_EQ(info.tp_rank(), r);
    EXPECT_NEAR(static_cast<double>(info.layer_weight_bytes()) / full.layer_weight_bytes(), 0.5,
                0.02)
        << "rank " << r;
    EXPECT_NEAR(static_cast<double>(info.weight_bytes()) / full.weight_bytes(), 0.5, 0.02)
        << "rank " << r;
    EXPECT_EQ(info.kv_bytes_per_token() * 2, full.kv_bytes_per_token()) << "rank " << r;
  }
}

TEST_F(TpWorkerTest, KilledRankFailsTheStepWithAnError) {
  StartRanks(2);
  auto client = Client(absl::Seconds(20));
  AllocateAll(*client);
  ASSERT_TRUE(client->Execute(DecodeStep(1, 0), {"r"}).ok());
  ranks_[1]->Signal(SIGKILL);
  ASSERT_TRUE(ranks_[1]->Wait(absl::Seconds(10)).ok());
  // The step fails (rank 1 is gone; rank 0's all-reduce loses its peer), within the
  // client's deadline at the latest, naming a rank.
  absl::StatusOr<worker::StepOutput> out = client->Execute(DecodeStep(5, 1), {"r"});
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().code(), AnyOf(absl::StatusCode::kUnavailable,
                                         absl::StatusCode::kDeadlineExceeded));
  EXPECT_THAT(out.status().message(), HasSubstr("worker rank"));
  // And so does every later step: the group is broken until it is formed again.
  absl::StatusOr<worker::StepOutput> again = client->Execute(DecodeStep(5, 1), {"r"});
  EXPECT_FALSE(again.ok());
  // Restore cannot while rank 1 is away.
  absl::Status restored = client->Restore();
  EXPECT_EQ(restored.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(restored.message(), HasSubstr("worker rank 1"));
}

// A rank that died comes back as a new process (its old group's addresses are stale):
// Restore forms the group again under a new generation, allocates on every rank, and the
// ranks produce the golden text again. Rank 1 first, then rank 0 (the rendezvous host).
TEST_F(TpWorkerTest, ARestartedRankRejoinsAFreshGroupThroughRestore) {
  StartRanks(2);
  auto client = Client(absl::Seconds(20));
  AllocateAll(*client);
  const pb::WorkerInfo info = Info(*client, 0);
  EXPECT_EQ(info.group().generation(), 1);
  EXPECT_TRUE(info.group().joined());
  ASSERT_TRUE(client->Restore().ok()) << "nothing to do: the same processes";
  EXPECT_EQ(client->group_generation(), 1);
  for (int victim : {1, 0}) {
    SCOPED_TRACE(absl::StrCat("rank ", victim, " restarted"));
    ranks_[victim]->Signal(SIGKILL);
    ASSERT_TRUE(ranks_[victim]->Wait(absl::Seconds(10)).ok());
    ASSERT_TRUE(ranks_[victim]->Restart().ok());
    const int64_t before = client->group_generation();
    EXPECT_FALSE(client->Execute(DecodeStep(1, 0), {"r"}).ok());
    absl::Status restored = client->Restore();
    ASSERT_TRUE(restored.ok()) << restored;
    EXPECT_GT(client->group_generation(), before);
    for (int r = 0; r < 2; ++r) {
      const pb::WorkerInfo now = Info(*client, r);
      EXPECT_TRUE(now.group().joined()) << "rank " << r << ": " << now.group().error();
      EXPECT_EQ(now.group().generation(), client->group_generation());
      EXPECT_EQ(now.num_blocks(), kNumBlocks);
    }
    const std::string text = GreedyText(*client, info, kShortSteps);
    EXPECT_FALSE(text.empty());
    EXPECT_TRUE(absl::StartsWith(testing::GoldenText(models_dir_), text)) << text;
  }
}

// A group broken without any process dying (rank 1 stopped past the collective timeout):
// the same incarnations, but rank 0 reports its group broken, so Restore forms it again.
TEST_F(TpWorkerTest, AGroupBrokenByATimeoutFormsAgainThroughRestore) {
  StartRanks(2, {"--tp_timeout_ms=300"});
  auto client = Client(absl::Seconds(3));
  AllocateAll(*client);
  const pb::WorkerInfo info = Info(*client, 0);
  ASSERT_TRUE(client->Execute(DecodeStep(1, 0), {"r"}).ok());
  ranks_[1]->Signal(SIGSTOP);
  EXPECT_FALSE(client->Execute(DecodeStep(5, 1), {"r"}).ok());
  ranks_[1]->Signal(SIGCONT);
  // Rank 0's all-reduce timed out: its group is broken.
  bool broken = false;
  for (int i = 0; i < 100 && !broken; ++i) {
    broken = !Info(*client, 0).group().joined();
    if (!broken) absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_TRUE(broken);
  absl::Status restored = client->Restore();
  ASSERT_TRUE(restored.ok()) << restored;
  EXPECT_EQ(client->group_generation(), 2);
  const std::string text = GreedyText(*client, info, kShortSteps);
  EXPECT_FALSE(text.empty());
  EXPECT_TRUE(absl::StartsWith(testing::GoldenText(models_dir_), text)) << text;
}

// A step that reached rank 0 alone (its call to rank 1 failed before delivery): rank 0's
// all-reduce waits for rank 1 (--tp_timeout_ms, 60 s here). Restore sees the ranks out of
// step and forms a new group; rank 1 leaving the old one fails rank 0's wait at once.
TEST_F(TpWorkerTest, AStepThatReachedOneRankIsEndedByANewGroup) {
  StartRanks(2, {"--tp_timeout_ms=60000"});  // not the default: far above the 10 s join
  auto client = Client(absl::Seconds(20));
  AllocateAll(*client);
  const pb::WorkerInfo info = Info(*client, 0);
  ASSERT_TRUE(client->Execute(DecodeStep(1, 0), {"r"}).ok());
  pb::ExecuteStepRequest alone = scheduler::ToProto(DecodeStep(5, 1));
  alone.set_step_id("alone");
  pb::ExecuteStepResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(300));
  EXPECT_EQ(client->stub(0).ExecuteStep(&ctx, alone, &resp).error_code(),
            grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_EQ(Info(*client, 0).group().last_step_id(), "alone");
  EXPECT_NE(Info(*client, 1).group().last_step_id(), "alone");
  EXPECT_TRUE(Info(*client, 0).group().joined()) << "nothing has failed yet: it waits";
  // The join is bounded by 10 s, far below rank 0's 60 s wait: it succeeds only if
  // rank 0 was let go.
  absl::Status restored = client->Restore();
  ASSERT_TRUE(restored.ok()) << restored;
  EXPECT_EQ(client->group_generation(), 2);
  const std::string text = GreedyText(*client, info, kShortSteps);
  EXPECT_FALSE(text.empty());
  EXPECT_TRUE(absl::StartsWith(testing::GoldenText(models_dir_), text)) << text;
}

TEST_F(TpWorkerTest, RankThatDoesNotAnswerFailsTheStepAtTheDeadline) {
  StartRanks(2);
  auto client = Client(absl::Seconds(3));
  AllocateAll(*client);
  ASSERT_TRUE(client->Execute(DecodeStep(1, 0), {"r"}).ok());
  ranks_[1]->Signal(SIGSTOP);  // alive, connected, silent
  absl::StatusOr<worker::StepOutput> out = client->Execute(DecodeStep(5, 1), {"r"});
  ranks_[1]->Signal(SIGCONT);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(out.status().message(), HasSubstr("worker rank"));
  EXPECT_THAT(out.status().message(), HasSubstr("step deadline"));
}

TEST_F(TpWorkerTest, TpDegreeThatDoesNotDivideTheKvHeadsIsRefused) {
  const testing::CommandResult r = testing::RunCommand(
      testing::BinDir() + "/folio-worker --model=" + model_ + " --tp_size=3 --tp_rank=0");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("4 KV heads, which do not divide over 3"));
}

TEST_F(TpWorkerTest, RankAboveZeroNeedsTheRendezvousAddress) {
  const testing::CommandResult r = testing::RunCommand(
      testing::BinDir() + "/folio-worker --model=" + model_ + " --tp_size=2 --tp_rank=1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("--tp_rendezvous is required"));
}

TEST_F(TpWorkerTest, SchedulerRefusesRanksListedOutOfOrder) {
  StartRanks(2);
  scheduler::GrpcWorkerClient reversed(
      {grpc::CreateChannel(ranks_[1]->address(), grpc::InsecureChannelCredentials()),
       grpc::CreateChannel(ranks_[0]->address(), grpc::InsecureChannelCredentials())},
      absl::Seconds(30));
  // No cache manager is needed: the ranks are checked before it is reached.
  scheduler::GrpcCacheClient cache(
      grpc::CreateChannel("127.0.0.1:1", grpc::InsecureChannelCredentials()), absl::Seconds(1));
  scheduler::ClusterSetupOptions options;
  options.startup_timeout = absl::Seconds(30);
  absl::StatusOr<pb::ClusterInfo> info = scheduler::SetUpCluster(options, reversed, cache);
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(info.status().message(),
              HasSubstr("reports itself as tensor-parallel rank 1 of 2"));
}

// Rank 0 drafts for the group (worker::DraftingRunner), so every rank must hold the same
// draft model: ranks with different ones are refused at set-up, naming both.
TEST_F(TpWorkerTest, SchedulerRefusesRanksWithDifferentDraftModels) {
  worker::RandomModelOptions o;
  o.vocab_from = model_;
  o.seed = 11;
  const std::string other = ::testing::TempDir() + "/folio-tp-draft-" + std::to_string(getpid()) + ".gguf";
  ASSERT_TRUE(worker::WriteRandomModel(o, other).ok());
  for (int rank = 0; rank < 2; ++rank) {
    std::vector<std::string> args = {"--model=" + model_, "--kv_cache_bytes=4MiB",
                                     "--num_threads=1", "--shutdown_grace_ms=0", "--tp_size=2",
                                     absl::StrCat("--tp_rank=", rank),
                                     "--draft_model=" + (rank == 0 ? model_ : other)};
    if (rank > 0) args.push_back("--tp_rendezvous=" + ranks_[0]->address());
    auto proc = ServiceProcess::Start("folio-worker", args);
    ASSERT_TRUE(proc.ok()) << proc.status();
    ranks_.push_back(std::move(*proc));
  }
  std::unique_ptr<scheduler::GrpcWorkerClient> client = Client(absl::Seconds(30));
  scheduler::GrpcCacheClient cache(
      grpc::CreateChannel("127.0.0.1:1", grpc::InsecureChannelCredentials()), absl::Seconds(1));
  scheduler::ClusterSetupOptions options;
  options.startup_timeout = absl::Seconds(30);
  options.speculative = true;
  options.draft_model = true;
  absl::StatusOr<pb::ClusterInfo> info = scheduler::SetUpCluster(options, *client, cache);
  std::remove(other.c_str());
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(info.status().message(), HasSubstr("give every rank the same --draft_model"));
  EXPECT_THAT(info.status().message(), HasSubstr("stories260K"));
}

}  // namespace
}  // namespace folio
