// The folio-worker binary over loopback gRPC with stories260K: readiness on
// grpc.health.v1 (NOT_SERVING until AllocateKvCache), GetWorkerInfo, greedy generation
// driven step by step over the RPC reproducing llama2.c's golden text, bad steps
// rejected without harm, /metrics checked by promtool, SIGTERM, and start-up errors.
//
// Needs FOLIO_MODELS_DIR (skips with a how-to otherwise) and FOLIO_BUILD_DIR (set by
// ctest; the binaries are in $FOLIO_BUILD_DIR/bin).
#include <signal.h>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <regex>

#include "common/test_models_dir.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/tokenizer/tokenizer.h"
#include "folio/internal/v1/worker.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
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

constexpr char kService[] = "folio.internal.v1.Worker";
constexpr char kModelsDirHelp[] =
    "no test models: run under ctest (it passes FOLIO_BUILD_DIR, whose test-models/ the "
    "build fills), or set FOLIO_MODELS_DIR to a folder laid out like models/";
constexpr int kBlockSize = 16;

std::optional<std::string> ModelsDir() { return TestModelsDir(); }

std::unique_ptr<grpc::ClientContext> Ctx() {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  return ctx;
}

// The tokenizer the worker reports, as a frontend would rebuild it.
absl::StatusOr<Tokenizer> TokenizerFromSpec(const pb::TokenizerSpec& spec) {
  Vocab vocab;
  vocab.pieces.assign(spec.pieces().begin(), spec.pieces().end());
  vocab.scores.assign(spec.scores().begin(), spec.scores().end());
  for (int32_t t : spec.types()) vocab.types.push_back(static_cast<TokenType>(t));
  vocab.bos_id = spec.bos_id();
  vocab.eos_id = spec.eos_id();
  vocab.unk_id = spec.unk_id();
  vocab.add_bos = spec.add_bos();
  vocab.add_dummy_prefix = spec.add_dummy_prefix();
  return Tokenizer::Create(std::move(vocab));
}

double MetricValue(const std::string& text, const std::string& name) {
  std::smatch m;
  if (!std::regex_search(text, m, std::regex("\n" + name + " ([0-9.e+-]+)\n"))) return -1;
  return std::stod(m[1]);
}

class WorkerServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::optional<std::string> dir = ModelsDir();
    if (!dir) GTEST_SKIP() << kModelsDirHelp;
    models_dir_ = *dir;
    auto proc = ServiceProcess::Start(
        "folio-worker", {"--model=" + models_dir_ + "/stories260K/stories260K.gguf",
                         "--kv_cache_bytes=1MiB", "--num_threads=2", "--shutdown_grace_ms=1500"});
    ASSERT_TRUE(proc.ok()) << proc.status();
    proc_ = std::move(*proc);
    auto channel = grpc::CreateChannel(proc_->address(), grpc::InsecureChannelCredentials());
    stub_ = pb::Worker::NewStub(channel);
    health_ = Health::NewStub(channel);
  }

  HealthCheckResponse::ServingStatus Health() {
    HealthCheckRequest req;
    req.set_service(kService);
    HealthCheckResponse resp;
    grpc::Status s = health_->Check(Ctx().get(), req, &resp);
    return s.ok() ? resp.status() : HealthCheckResponse::UNKNOWN;
  }

  pb::WorkerInfo Info() {
    pb::WorkerInfo info;
    grpc::Status s = stub_->GetWorkerInfo(Ctx().get(), pb::GetWorkerInfoRequest(), &info);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return info;
  }

  grpc::Status Allocate(int num_blocks, int block_size) {
    pb::AllocateKvCacheRequest req;
    req.set_num_blocks(num_blocks);
    req.set_block_size(block_size);
    pb::AllocateKvCacheResponse resp;
    grpc::Status s = stub_->AllocateKvCache(Ctx().get(), req, &resp);
    if (s.ok()) allocated_bytes_ = resp.kv_cache_bytes();
    return s;
  }

  // One decode step of sequence 1: `token` at `pos`, greedy, one sample.
  static pb::ExecuteStepRequest DecodeStep(int32_t token, int32_t pos,
                                           const std::vector<int32_t>& table) {
    pb::ExecuteStepRequest req;
    req.set_step_id(absl::StrCat("step-", pos));
    pb::StepSequence* s = req.add_sequences();
    s->set_seq_id(1);
    s->set_request_id("req-golden");
    s->add_token_ids(token);
    s->set_start_pos(pos);
    for (int32_t b : table) s->add_block_table(b);
    s->mutable_sampling()->set_temperature(0.0f);
    s->set_num_samples(1);
    return req;
  }

  grpc::Status Step(const pb::ExecuteStepRequest& req, pb::ExecuteStepResponse* resp) {
    return stub_->ExecuteStep(Ctx().get(), req, resp);
  }

  std::string models_dir_;
  std::unique_ptr<ServiceProcess> proc_;
  std::unique_ptr<pb::Worker::Stub> stub_;
  std::unique_ptr<Health::Stub> health_;
  int64_t allocated_bytes_ = 0;
};

TEST_F(WorkerServiceTest, InfoAtOnceServingOnlyAfterAllocation) {
  EXPECT_EQ(Health(), HealthCheckResponse::NOT_SERVING);
  const pb::WorkerInfo info = Info();
  EXPECT_EQ(info.model().vocab_size(), 512);
  EXPECT_EQ(info.model().num_layers(), 5);
  EXPECT_EQ(info.model().num_kv_heads(), 4);
  EXPECT_EQ(info.model().head_dim(), 8);
  EXPECT_EQ(info.model().max_seq_len(), 512);
  EXPECT_EQ(info.tokenizer().pieces_size(), 512);
  EXPECT_EQ(info.tokenizer().scores_size(), 512);
  EXPECT_EQ(info.tokenizer().types_size(), 512);
  EXPECT_EQ(info.tokenizer().bos_id(), 1);
  EXPECT_EQ(info.tokenizer().eos_id(), 2);
  // 2 (K and V) * 5 layers * 4 kv heads * head_dim 8 * 2 bytes (f16).
  EXPECT_EQ(info.kv_bytes_per_token(), 640);
  EXPECT_EQ(info.kv_cache_budget_bytes(), 1 << 20);
  EXPECT_EQ(info.kv_dtype(), "f16");
  EXPECT_EQ(info.tp_rank(), 0);
  EXPECT_EQ(info.tp_size(), 1);
  EXPECT_EQ(info.num_blocks(), 0);

  // Over budget: 1 MiB / (640 * 16) = 102 blocks fit.
  grpc::Status s = Allocate(103, kBlockSize);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(), HasSubstr("at most 102"));
  s = Allocate(8, -1);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("block_size"));
  EXPECT_EQ(Health(), HealthCheckResponse::NOT_SERVING);

  ASSERT_TRUE(Allocate(102, kBlockSize).ok());
  EXPECT_EQ(allocated_bytes_, 102 * 640 * kBlockSize);
  EXPECT_EQ(Health(), HealthCheckResponse::SERVING);
  EXPECT_EQ(Info().num_blocks(), 102);
  EXPECT_EQ(Info().block_size(), kBlockSize);
}

TEST_F(WorkerServiceTest, EachStartHasItsOwnIncarnation) {
  const std::string first = Info().incarnation_id();
  EXPECT_EQ(first.size(), 32u);
  ASSERT_TRUE(Allocate(8, 16).ok());
  EXPECT_EQ(Info().incarnation_id(), first) << "the same process keeps its id";
  ASSERT_TRUE(proc_->Restart().ok());
  pb::WorkerInfo again;
  for (int i = 0; i < 200; ++i) {  // until the channel has reconnected
    grpc::ClientContext ctx;
    ctx.set_wait_for_ready(true);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(100));
    if (stub_->GetWorkerInfo(&ctx, pb::GetWorkerInfoRequest(), &again).ok()) break;
  }
  EXPECT_NE(again.incarnation_id(), first) << "a restarted process has a new id";
  EXPECT_EQ(again.num_blocks(), 0) << "and no KV cache until it is allocated again";
}

// Fencing (common/scheduler_epoch.h): once a newer scheduler has allocated, steps and
// allocations from an older one are refused, and GetWorkerInfo names the newest epoch.
TEST_F(WorkerServiceTest, AnOlderSchedulerEpochIsFenced) {
  EXPECT_EQ(Info().scheduler_epoch(), 0u);
  pb::AllocateKvCacheRequest alloc;
  alloc.set_num_blocks(8);
  alloc.set_block_size(16);
  alloc.set_scheduler_epoch(100);
  pb::AllocateKvCacheResponse resp;
  ASSERT_TRUE(stub_->AllocateKvCache(Ctx().get(), alloc, &resp).ok());
  alloc.set_scheduler_epoch(200);  // the newer scheduler takes over
  ASSERT_TRUE(stub_->AllocateKvCache(Ctx().get(), alloc, &resp).ok());
  EXPECT_EQ(Info().scheduler_epoch(), 200u);

  pb::ExecuteStepRequest step = DecodeStep(1, 0, {0});
  step.set_scheduler_epoch(100);
  pb::ExecuteStepResponse out;
  grpc::Status s = Step(step, &out);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("fenced: ExecuteStep from scheduler epoch 100"));
  EXPECT_THAT(s.error_message(), HasSubstr("newer scheduler (epoch 200)"));
  alloc.set_scheduler_epoch(100);
  s = stub_->AllocateKvCache(Ctx().get(), alloc, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("fenced: AllocateKvCache"));
  step.set_scheduler_epoch(200);
  EXPECT_TRUE(Step(step, &out).ok()) << "the newer scheduler steps";
  step.set_scheduler_epoch(0);
  EXPECT_TRUE(Step(step, &out).ok()) << "epoch 0 (tools) is not checked";
}

TEST_F(WorkerServiceTest, StepBeforeAllocateIsFailedPrecondition) {
  pb::ExecuteStepResponse resp;
  grpc::Status s = Step(DecodeStep(1, 0, {0}), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("AllocateKvCache"));
}

// BOS, then 200 greedy decode steps over the RPC with a hand-built, scattered block
// table, decoded with the tokenizer the worker reports: llama2.c's text byte for byte
// (the same comparison as engine/golden_test.cc: the decoded ids plus run.c's "\n").
TEST_F(WorkerServiceTest, GreedyGenerationOverRpcMatchesLlama2c) {
  const std::string expected =
      ReadFileOrEmpty(models_dir_ + "/stories260K/expected_run_c_t0_n200.txt");
  ASSERT_FALSE(expected.empty());
  const int kNumBlocks = 64;
  ASSERT_TRUE(Allocate(kNumBlocks, kBlockSize).ok());
  absl::StatusOr<Tokenizer> tokenizer = TokenizerFromSpec(Info().tokenizer());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();

  const int kSteps = 200;
  // Blocks 63, 61, 59, ...: never contiguous, never starting at 0.
  std::vector<int32_t> table;
  for (int i = 0; i < (kSteps + kBlockSize - 1) / kBlockSize; ++i) {
    table.push_back(kNumBlocks - 1 - 2 * i);
  }
  std::vector<int32_t> ids = {tokenizer->bos_id()};
  for (int pos = 0; pos < kSteps; ++pos) {
    pb::ExecuteStepResponse resp;
    grpc::Status s = Step(DecodeStep(ids.back(), pos, table), &resp);
    ASSERT_TRUE(s.ok()) << "pos " << pos << ": " << s.error_message();
    ASSERT_EQ(resp.outputs_size(), 1);
    EXPECT_EQ(resp.outputs(0).seq_id(), 1u);
    ASSERT_EQ(resp.outputs(0).samples_size(), 1);
    const int32_t next = resp.outputs(0).samples(0).token_id();
    EXPECT_LE(resp.outputs(0).samples(0).logprob(), 0.0f);
    ASSERT_NE(next, tokenizer->bos_id()) << "the golden run never emits BOS";
    ids.push_back(next);
  }
  absl::StatusOr<std::string> text = tokenizer->Decode(ids);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text + "\n", expected);
}

TEST_F(WorkerServiceTest, BadStepsAreInvalidArgumentAndServiceKeepsServing) {
  ASSERT_TRUE(Allocate(8, kBlockSize).ok());
  pb::ExecuteStepResponse resp;
  // Position 16 needs a second block; the table has one.
  grpc::Status s = Step(DecodeStep(1, kBlockSize, {0}), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("outside its block table"));
  // Block 8 is outside a pool of 8 blocks.
  s = Step(DecodeStep(1, 0, {8}), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("outside the pool"));
  // A copy onto a block outside the pool.
  pb::ExecuteStepRequest copy = DecodeStep(1, 0, {0});
  copy.add_copies()->set_src(1);
  copy.mutable_copies(0)->set_dst(99);
  s = Step(copy, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // A token outside the vocabulary.
  s = Step(DecodeStep(512, 0, {0}), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("vocabulary"));

  EXPECT_EQ(Health(), HealthCheckResponse::SERVING) << "bad input never takes it down";
  s = Step(DecodeStep(1, 0, {3}), &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(resp.outputs_size(), 1);
  EXPECT_EQ(resp.outputs(0).samples_size(), 1);
}

TEST_F(WorkerServiceTest, MetricsPassPromtoolAndMove) {
  const std::string before = testing::HttpGet(proc_->metrics_port(), "/metrics");
  ASSERT_FALSE(before.empty());
  EXPECT_EQ(MetricValue(before, "folio_worker_kv_cache_blocks"), 0);
  EXPECT_EQ(MetricValue(before, "folio_worker_steps_total"), 0);

  ASSERT_TRUE(Allocate(32, kBlockSize).ok());
  pb::ExecuteStepResponse resp;
  // A 3-token prefill, then a decode step, then a bad step.
  pb::ExecuteStepRequest prefill = DecodeStep(1, 0, {5});
  prefill.mutable_sequences(0)->add_token_ids(400);
  prefill.mutable_sequences(0)->add_token_ids(401);
  ASSERT_TRUE(Step(prefill, &resp).ok());
  ASSERT_TRUE(Step(DecodeStep(resp.outputs(0).samples(0).token_id(), 3, {5}), &resp).ok());
  EXPECT_FALSE(Step(DecodeStep(1, 0, {32}), &resp).ok());

  const std::string after = testing::HttpGet(proc_->metrics_port(), "/metrics");
  EXPECT_EQ(MetricValue(after, "folio_worker_steps_total"), 2);
  EXPECT_EQ(MetricValue(after, "folio_worker_tokens_total"), 4);
  EXPECT_EQ(MetricValue(after, "folio_worker_sampled_tokens_total"), 2);
  EXPECT_EQ(MetricValue(after, "folio_worker_step_duration_seconds_count"), 2);
  EXPECT_EQ(MetricValue(after, "folio_worker_step_tokens_count"), 2);
  EXPECT_EQ(MetricValue(after, "folio_worker_step_tokens_sum"), 4);
  EXPECT_EQ(MetricValue(after, "folio_worker_kv_cache_blocks"), 32);
  EXPECT_EQ(MetricValue(after, "folio_worker_kv_cache_bytes"), 32 * 640 * kBlockSize);
  EXPECT_THAT(after, HasSubstr("folio_worker_step_errors_total{code=\"INVALID_ARGUMENT\"} 1"));

  const std::string file = ::testing::TempDir() + "/worker_metrics.txt";
  std::ofstream(file) << after;
  testing::CommandResult promtool = testing::RunCommand("promtool check metrics < " + file);
  EXPECT_EQ(promtool.exit_code, 0) << promtool.output;
}

TEST_F(WorkerServiceTest, SigtermDrainsWithNotServingThenExits) {
  ASSERT_TRUE(Allocate(8, kBlockSize).ok());
  ASSERT_EQ(Health(), HealthCheckResponse::SERVING);
  proc_->Signal(SIGTERM);
  absl::SleepFor(absl::Milliseconds(400));
  EXPECT_EQ(Health(), HealthCheckResponse::NOT_SERVING) << "draining is visible";
  absl::StatusOr<int> exit_code = proc_->Wait(absl::Seconds(15));
  ASSERT_TRUE(exit_code.ok()) << exit_code.status();
  EXPECT_EQ(*exit_code, 0);
}

TEST(WorkerStartupTest, MissingOrBadModelExitsWithAMessage) {
  const std::string bin = testing::BinDir() + "/folio-worker";
  // Without --model, FOLIO_MODEL or FOLIO_MODELS_DIR the worker looks for the embedded
  // stories260K beside its binary; a copy of the binary with no models/ near it finds none
  // and names every place it looked.
  const std::string lone = ::testing::TempDir() + "/lone-worker/a/b/bin";
  ASSERT_EQ(testing::RunCommand("mkdir -p " + lone + " && cp " + bin + " " + lone).exit_code, 0);
  testing::CommandResult r = testing::RunCommand("env -u FOLIO_MODEL -u FOLIO_MODELS_DIR " + lone +
                                                 "/folio-worker --metrics_port=-1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("no model: pass --model=PATH"));
  EXPECT_THAT(r.output, HasSubstr("/lone-worker/a/models/stories260K"));

  r = testing::RunCommand(bin + " --model=/nonexistent/model.gguf --metrics_port=-1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("/nonexistent/model.gguf"));

  r = testing::RunCommand(bin + " --model=/nonexistent/model.gguf --kv_dtype=q4");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--kv_dtype must be f16, f32 or q8_0"));

  r = testing::RunCommand(bin + " --model=/nonexistent/model.gguf --kv_cache_bytes=lots");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--kv_cache_bytes"));
}

}  // namespace
}  // namespace folio
