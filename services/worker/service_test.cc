// WorkerService in process, over a loopback gRPC server, on a small random model (no
// model files needed): byte-size parsing, the proto <-> native mapping, allocation
// checks, the step thread, and sample_index keying of forked samples.
#include "services/worker/service.h"

#include <chrono>
#include <iostream>
#include <memory>

#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "absl/strings/str_cat.h"
#include "folio/internal/v1/scheduler.pb.h"
#include "services/worker/engine/test_models.h"
#include "common/tokenizer/tokenizer.h"
#include "common/tokenizer_spec.h"
#include "services/worker/model/gguf_vocab.h"
#include "services/worker/model/hf_tokenizer.h"
#include "services/worker/model/random_hf_model.h"
#include "tests/reference/llama_ref.h"

namespace folio::worker {
namespace {

namespace pb = folio::internal::v1;
using ::testing::HasSubstr;

// The byte-level vocabularies on the wire: merges as id pairs, no scores, and a size that
// fits the frontend's 64 MiB message limit with room to spare. Prints the sizes.
TEST(TokenizerSpecTest, ByteLevelVocabulariesFitTheWire) {
  FOLIO_SKIP_WITHOUT_REFERENCE();
  for (const char* name : {"llama-bpe", "qwen2"}) {
    absl::StatusOr<Vocab> v = LoadGgufVocab(
        absl::StrCat(reference::LlamaCppSourceDir(), "/models/ggml-vocab-", name, ".gguf"));
    ASSERT_TRUE(v.ok()) << v.status();
    const pb::TokenizerSpec spec = TokenizerSpecFromVocab(*v);
    EXPECT_EQ(spec.kind(), pb::TOKENIZER_KIND_BYTE_LEVEL_BPE);
    EXPECT_EQ(spec.pieces_size(), v->size());
    EXPECT_EQ(spec.scores_size(), 0);
    EXPECT_EQ(spec.merges_size(), 2 * static_cast<int>(v->merges.size()));
    EXPECT_EQ(spec.merges(2), v->merges[1].first);
    EXPECT_EQ(spec.merges(3), v->merges[1].second);
    EXPECT_EQ(spec.pre_tokenizer(), v->pre_tokenizer);
    EXPECT_EQ(std::vector<int32_t>(spec.eog_ids().begin(), spec.eog_ids().end()), v->eog_ids);
    pb::ClusterInfo info;
    *info.mutable_tokenizer() = spec;
    info.mutable_model()->set_name(name);
    info.set_max_model_len(8192);
    const size_t bytes = info.ByteSizeLong();
    std::cout << name << ": ClusterInfo " << bytes << " bytes (" << v->size() << " pieces, "
              << v->merges.size() << " merges)\n";
    EXPECT_LT(bytes, size_t{16} << 20);
  }
}

// A SentencePiece vocabulary's dummy-prefix rule (a tokenizer.json Metaspace pre-tokenizer)
// travels in TokenizerSpec.pre_tokenizer and comes back the same; an older worker's empty
// field reads as llama.cpp's rule.
TEST(TokenizerSpecTest, SentencePiecePrefixRuleTravels) {
  absl::StatusOr<Vocab> v = ParseHfTokenizerJson(
      *MetaspaceTokenizerJson(MakeSentencePieceTokenizerJson(), "first", false), "tokenizer.json");
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_TRUE(ApplyHfTokenizerConfig(R"({"bos_token": "<s>", "eos_token": "</s>"})",
                                     "tokenizer_config.json", &*v)
                  .ok());
  ASSERT_EQ(v->pre_tokenizer, "metaspace-first");
  pb::TokenizerSpec spec = TokenizerSpecFromVocab(*v);
  EXPECT_EQ(spec.kind(), pb::TOKENIZER_KIND_SENTENCEPIECE);
  EXPECT_EQ(spec.pre_tokenizer(), "metaspace-first");
  absl::StatusOr<Vocab> back = VocabFromSpec(spec);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->pre_tokenizer, "metaspace-first");
  absl::StatusOr<Tokenizer> t = Tokenizer::Create(*back);
  ASSERT_TRUE(t.ok()) << t.status();
  // "</s>hello": no "▁" after the special token under "first".
  EXPECT_EQ(t->vocab().pieces[(*t->Encode("</s>hello", AddBos::kNo, ParseSpecial::kYes))[1]], "hello");
  spec.set_pre_tokenizer("");
  back = VocabFromSpec(spec);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->pre_tokenizer, "default");
  spec.set_pre_tokenizer("metaspace-sometimes");
  back = VocabFromSpec(spec);
  ASSERT_TRUE(back.ok());
  EXPECT_THAT(std::string(Tokenizer::Create(*back).status().message()),
              HasSubstr("\"metaspace-sometimes\" is unknown"));
}

TEST(ParseByteSizeTest, AcceptsIntegersAndUnits) {
  EXPECT_EQ(*ParseByteSize("0"), 0);
  EXPECT_EQ(*ParseByteSize("268435456"), 268435456);
  EXPECT_EQ(*ParseByteSize("512MiB"), int64_t{512} << 20);
  EXPECT_EQ(*ParseByteSize("2GiB"), int64_t{2} << 30);
  EXPECT_EQ(*ParseByteSize("2 gib"), int64_t{2} << 30);
  EXPECT_EQ(*ParseByteSize("1.5GB"), 1500000000);
  EXPECT_EQ(*ParseByteSize("64KiB"), 65536);
  EXPECT_EQ(*ParseByteSize("10b"), 10);
  EXPECT_EQ(*ParseByteSize("1TiB"), int64_t{1} << 40);
}

TEST(ParseByteSizeTest, RejectsGarbage) {
  for (const char* bad : {"", "MiB", "-5", "12 parsecs", "1.2.3GB", "99999999999TiB", "0x10"}) {
    absl::StatusOr<int64_t> v = ParseByteSize(bad);
    ASSERT_FALSE(v.ok()) << bad;
    EXPECT_THAT(v.status().message(), HasSubstr("512MiB")) << bad;
  }
}

// The worker keeps window layer groups only where nothing needs whole blocks of every
// layer: not with a host tier, a draft model (its dense pool shares the block ids) or
// another backend.
TEST(PoolLayerGroupsTest, OnlyWhereEveryBlockNeedNotHoldEveryLayer) {
  ModelConfig gemma;
  gemma.num_layers = 4;
  gemma.sliding_window = 8;
  gemma.local_layers = {true, false, true, false};
  WorkerServiceOptions options;
  EXPECT_EQ(PoolLayerGroups(gemma, options).windows, std::vector<int32_t>{8});
  WorkerServiceOptions off = options;
  off.window_layer_groups = false;
  EXPECT_TRUE(PoolLayerGroups(gemma, off).windows.empty());
  WorkerServiceOptions host = options;
  host.kv_host_bytes = 1 << 20;
  EXPECT_TRUE(PoolLayerGroups(gemma, host).windows.empty());
  WorkerServiceOptions draft = options;
  draft.draft_weights = testing::RandomModelOrDie(/*seed=*/3);
  EXPECT_TRUE(PoolLayerGroups(gemma, draft).windows.empty());
  WorkerServiceOptions other = options;
  other.make_runner = [](const ModelWeights&, const RunnerRequest&) {
    return absl::StatusOr<RunnerResources>(absl::UnimplementedError("none"));
  };
  EXPECT_TRUE(PoolLayerGroups(gemma, other).windows.empty());
  EXPECT_EQ(PoolLayerGroups(gemma, other).num_planes, 4);
}

TEST(StepMappingTest, MapsFieldsAndDefaultsTopP) {
  pb::ExecuteStepRequest req;
  pb::BlockCopy* copy = req.add_copies();
  copy->set_src(3);
  copy->set_dst(4);
  pb::StepSequence* s = req.add_sequences();
  s->set_seq_id(7);
  s->add_token_ids(1);
  s->add_token_ids(2);
  s->set_start_pos(5);
  s->add_block_table(9);
  s->set_num_samples(1);
  s->set_num_logprobs(2);
  s->set_num_candidates(3);
  s->mutable_sampling()->set_top_k(4);
  s->mutable_sampling()->set_seed(11);
  absl::StatusOr<NativeStep> step = StepFromProto(req);
  ASSERT_TRUE(step.ok()) << step.status();
  ASSERT_EQ(step->input.block_copies.size(), 1u);
  EXPECT_EQ(step->input.block_copies[0].src_block, 3);
  EXPECT_EQ(step->input.block_copies[0].dst_block, 4);
  ASSERT_EQ(step->input.seqs.size(), 1u);
  const SequenceStep& seq = step->input.seqs[0];
  EXPECT_EQ(seq.seq_id, 7u);
  EXPECT_EQ(seq.token_ids, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(seq.start_pos, 5);
  EXPECT_EQ(seq.block_table, (std::vector<int32_t>{9}));
  EXPECT_EQ(seq.sampling.temperature, 0.0f) << "proto3 default: greedy";
  EXPECT_EQ(seq.sampling.top_p, 1.0f) << "unset top_p means off";
  EXPECT_EQ(seq.sampling.top_k, 4);
  EXPECT_EQ(seq.sampling.seed, 11u);
  EXPECT_EQ(seq.num_samples, 1);
  EXPECT_EQ(seq.num_logprobs, 2);
  EXPECT_EQ(seq.num_candidates, 3);
  EXPECT_EQ(seq.first_sample_index, 0);
}

TEST(StepMappingTest, SampleIndexBecomesTheFirstSampleIndex) {
  pb::ExecuteStepRequest req;
  pb::StepSequence* s = req.add_sequences();
  s->add_token_ids(1);
  s->add_block_table(0);
  s->set_num_samples(1);
  s->set_sample_index(3);
  s->mutable_sampling()->set_temperature(0.8f);
  absl::StatusOr<NativeStep> step = StepFromProto(req);
  ASSERT_TRUE(step.ok());
  EXPECT_EQ(step->input.seqs[0].num_samples, 1);
  EXPECT_EQ(step->input.seqs[0].first_sample_index, 3);

  s->set_sample_index(-1);
  EXPECT_EQ(StepFromProto(req).status().code(), absl::StatusCode::kInvalidArgument);
}

std::unique_ptr<grpc::ClientContext> Ctx() {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  return ctx;
}

class WorkerServiceTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(WorkerServiceOptions()); }
  // Serves the random model with `options` (1 MiB of KV budget, one thread) over
  // loopback; `connect`, when given, is its group connector (tp_size > 1).
  void Start(WorkerServiceOptions options, WorkerService::ConnectFn connect = nullptr) {
    options.kv_cache_budget_bytes = 1 << 20;
    options.num_threads = 1;
    service_ = std::make_unique<WorkerService>(testing::RandomModelOrDie(5), options, &registry_);
    service_->SetServingCallback([this](ServingState s) { last_state_ = s; });
    if (connect) service_->SetGroupConnector(std::move(connect));
    ServerOptions server;
    server.service_name = "folio.internal.v1.Worker";
    server.metrics_port = -1;
    auto runner = ServiceRunner::Start(server, {service_.get()}, nullptr);
    ASSERT_TRUE(runner.ok()) << runner.status();
    runner_ = std::move(*runner);
    stub_ = pb::Worker::NewStub(
        grpc::CreateChannel(runner_->address(), grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    if (runner_) runner_->Shutdown();
  }

  grpc::Status Allocate(int num_blocks, int block_size) {
    pb::AllocateKvCacheRequest req;
    req.set_num_blocks(num_blocks);
    req.set_block_size(block_size);
    pb::AllocateKvCacheResponse resp;
    return stub_->AllocateKvCache(Ctx().get(), req, &resp);
  }

  MetricsRegistry registry_;
  std::unique_ptr<WorkerService> service_;
  std::unique_ptr<ServiceRunner> runner_;
  std::unique_ptr<pb::Worker::Stub> stub_;
  std::atomic<ServingState> last_state_{ServingState::kNotServing};
};

TEST_F(WorkerServiceTest, InfoAndAllocationChecks) {
  pb::WorkerInfo info;
  ASSERT_TRUE(stub_->GetWorkerInfo(Ctx().get(), pb::GetWorkerInfoRequest(), &info).ok());
  EXPECT_EQ(info.model().vocab_size(), 300);
  EXPECT_EQ(info.model().num_layers(), 2);
  EXPECT_EQ(info.tokenizer().pieces_size(), 300);
  // 2 (K, V) * 2 layers * 2 kv heads * head_dim 16 * 2 bytes.
  EXPECT_EQ(info.kv_bytes_per_token(), 2 * 2 * 2 * 16 * 2);
  EXPECT_EQ(info.kv_cache_budget_bytes(), 1 << 20);
  EXPECT_EQ(info.kv_dtype(), "f16");
  EXPECT_EQ(info.num_blocks(), 0);

  grpc::Status s = Allocate(0, 16);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("num_blocks"));
  s = Allocate(8, 0);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("block_size"));
  // 1 MiB / (256 bytes * 16) = 256 blocks fit.
  s = Allocate(257, 16);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(), HasSubstr("at most 256"));
  EXPECT_EQ(last_state_.load(), ServingState::kNotServing);

  ASSERT_TRUE(Allocate(256, 16).ok());
  EXPECT_EQ(last_state_.load(), ServingState::kServing);
  ASSERT_TRUE(stub_->GetWorkerInfo(Ctx().get(), pb::GetWorkerInfoRequest(), &info).ok());
  EXPECT_EQ(info.num_blocks(), 256);
  EXPECT_EQ(info.block_size(), 16);
  ASSERT_TRUE(Allocate(10, 8).ok()) << "re-allocation";
  ASSERT_TRUE(stub_->GetWorkerInfo(Ctx().get(), pb::GetWorkerInfoRequest(), &info).ok());
  EXPECT_EQ(info.num_blocks(), 10);
  EXPECT_EQ(info.block_size(), 8);
}

// The same service with an 8-bit KV cache (--kv_dtype=q8_0).
class WorkerServiceQ8Test : public WorkerServiceTest {
 protected:
  void SetUp() override {
    WorkerServiceOptions options;
    options.kv_dtype = kernels::KvDType::kQ8;
    Start(options);
  }
};

TEST_F(WorkerServiceQ8Test, ReportsItsBytesPerTokenAndSizesBlocksByThem) {
  pb::WorkerInfo info;
  ASSERT_TRUE(stub_->GetWorkerInfo(Ctx().get(), pb::GetWorkerInfoRequest(), &info).ok());
  // 2 (K, V) * 2 layers * 2 kv heads * (16 int8 values + a 4-byte scale).
  EXPECT_EQ(info.kv_bytes_per_token(), 2 * 2 * 2 * (16 + 4));
  EXPECT_EQ(info.kv_dtype(), "q8_0");
  // The block count is sized by those bytes: 1 MiB / (16 tokens * 160 bytes) = 409 blocks.
  const grpc::Status s = Allocate(410, 16);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(), HasSubstr("at most 409"));
  ASSERT_TRUE(Allocate(409, 16).ok());
}

TEST_F(WorkerServiceTest, StepBeforeAllocationFailsPrecondition) {
  pb::ExecuteStepRequest req;
  pb::StepSequence* s = req.add_sequences();
  s->add_token_ids(1);
  s->add_block_table(0);
  s->set_num_samples(1);
  pb::ExecuteStepResponse resp;
  grpc::Status st = stub_->ExecuteStep(Ctx().get(), req, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(st.error_message(), HasSubstr("AllocateKvCache"));
}

// A request's sample k, forked into its own sequence, draws what sample k of the
// unforked sequence draws.
TEST_F(WorkerServiceTest, ForkedSampleIndexMatchesNWaySample) {
  ASSERT_TRUE(Allocate(16, 4).ok());
  auto make = [](uint64_t seq_id, int first_block, int num_samples, int sample_index) {
    pb::StepSequence s;
    s.set_seq_id(seq_id);
    for (int t : {1, 17, 42, 99, 5}) s.add_token_ids(t);
    s.add_block_table(first_block);
    s.add_block_table(first_block + 1);
    s.set_num_samples(num_samples);
    s.set_sample_index(sample_index);
    s.mutable_sampling()->set_temperature(1.5f);
    s.mutable_sampling()->set_seed(1234);
    return s;
  };
  pb::ExecuteStepRequest req;
  *req.add_sequences() = make(1, 0, 6, 0);
  for (int k = 1; k < 6; ++k) *req.add_sequences() = make(10 + k, 2 * k, 1, k);
  pb::ExecuteStepResponse resp;
  grpc::Status st = stub_->ExecuteStep(Ctx().get(), req, &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  ASSERT_EQ(resp.outputs_size(), 6);
  ASSERT_EQ(resp.outputs(0).samples_size(), 6);
  bool any_differs = false;
  for (int k = 1; k < 6; ++k) {
    ASSERT_EQ(resp.outputs(k).samples_size(), 1);
    EXPECT_EQ(resp.outputs(k).seq_id(), 10u + k);
    EXPECT_EQ(resp.outputs(k).samples(0).token_id(), resp.outputs(0).samples(k).token_id()) << k;
    any_differs |= resp.outputs(0).samples(k).token_id() != resp.outputs(0).samples(0).token_id();
  }
  EXPECT_TRUE(any_differs) << "temperature 1.5 over 6 draws should not all agree";
  EXPECT_GT(resp.compute_seconds(), 0.0);
}

TEST_F(WorkerServiceTest, ReportsWeightBytesOnceAllocated) {
  pb::WorkerInfo info;
  ASSERT_TRUE(stub_->GetWorkerInfo(Ctx().get(), pb::GetWorkerInfoRequest(), &info).ok());
  EXPECT_EQ(info.weight_bytes(), 0);
  EXPECT_EQ(info.num_kv_heads(), 2);
  ASSERT_TRUE(Allocate(16, 4).ok());
  ASSERT_TRUE(stub_->GetWorkerInfo(Ctx().get(), pb::GetWorkerInfoRequest(), &info).ok());
  EXPECT_GT(info.layer_weight_bytes(), 0);
  EXPECT_GT(info.weight_bytes(), info.layer_weight_bytes());
}

// A rank of a tensor-parallel group joins no group until JoinGroup, and cannot build its
// runner without one; a failed join is the allocation's error and shows in GetWorkerInfo.
// Generations only grow. Its KV heads are its share.
// Rank 1 of 2, started by each test with the group connector it needs.
class WorkerServiceTpTest : public WorkerServiceTest {
 protected:
  void SetUp() override {}
  void StartRankOne(WorkerService::ConnectFn connect) {
    WorkerServiceOptions options;
    options.tp_size = 2;
    options.tp_rank = 1;
    ASSERT_NO_FATAL_FAILURE(Start(options, std::move(connect)));
  }
};

TEST_F(WorkerServiceTpTest, JoinGroupIsNeededBeforeAllocationAndReportsAFailedJoin) {
  std::vector<int64_t> joins;
  absl::Duration last_timeout;
  ASSERT_NO_FATAL_FAILURE(StartRankOne([&](int64_t generation, absl::Duration timeout)
                                           -> absl::StatusOr<std::unique_ptr<Communicator>> {
    joins.push_back(generation);
    last_timeout = timeout;
    return absl::UnavailableError("rank 0 never answered");
  }));
  pb::Worker::Stub* stub = stub_.get();
  pb::WorkerInfo info;
  ASSERT_TRUE(stub->GetWorkerInfo(Ctx().get(), pb::GetWorkerInfoRequest(), &info).ok());
  EXPECT_EQ(info.num_kv_heads(), 1);  // the random model's 2 KV heads over 2 ranks
  EXPECT_EQ(info.tp_rank(), 1);
  EXPECT_EQ(info.group().generation(), 0);
  EXPECT_FALSE(info.group().joined());
  EXPECT_TRUE(joins.empty()) << "no group is joined at start-up";

  pb::AllocateKvCacheRequest req;
  req.set_num_blocks(8);
  req.set_block_size(4);
  pb::AllocateKvCacheResponse resp;
  grpc::Status s = stub->AllocateKvCache(Ctx().get(), req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("has not joined a group yet"));

  pb::JoinGroupRequest join;
  pb::JoinGroupResponse joined;
  join.set_generation(3);
  s = stub->JoinGroup(Ctx().get(), join, &joined);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(s.error_message(), HasSubstr("rank 0 never answered"));
  ASSERT_EQ(joins, std::vector<int64_t>{3});
  EXPECT_GT(last_timeout, absl::Seconds(20)) << "bounded by the call's 30 s deadline";
  EXPECT_LE(last_timeout, absl::Seconds(31));  // the server counts from when it heard
  ASSERT_TRUE(stub->GetWorkerInfo(Ctx().get(), pb::GetWorkerInfoRequest(), &info).ok());
  EXPECT_EQ(info.group().generation(), 3);
  EXPECT_FALSE(info.group().joined());
  EXPECT_THAT(info.group().error(), HasSubstr("rank 0 never answered"));
  s = stub->AllocateKvCache(Ctx().get(), req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("rank 0 never answered"));

  // Not newer than 3: refused without calling the connector.
  s = stub->JoinGroup(Ctx().get(), join, &joined);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("not newer than generation 3"));
  join.set_generation(0);
  s = stub->JoinGroup(Ctx().get(), join, &joined);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(joins.size(), 1u);
}

TEST_F(WorkerServiceTest, JoinGroupIsRefusedByASingleRank) {
  pb::JoinGroupRequest join;
  join.set_generation(1);
  pb::JoinGroupResponse joined;
  grpc::Status s = stub_->JoinGroup(Ctx().get(), join, &joined);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("--tp_size=1"));
  pb::WorkerInfo info;
  ASSERT_TRUE(stub_->GetWorkerInfo(Ctx().get(), pb::GetWorkerInfoRequest(), &info).ok());
  EXPECT_FALSE(info.has_group());
}

// A group member that issues nothing: JoinGroup's bookkeeping is what is tested here.
class IdleCommunicator : public Communicator {
 public:
  IdleCommunicator(int rank, int world_size) : rank_(rank), world_size_(world_size) {}
  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  absl::Status AllReduceSum(void*, int64_t, CommDType) override {
    return absl::UnimplementedError("IdleCommunicator issues no collectives");
  }
  absl::Status GatherToRoot(const void*, void*, int64_t, CommDType) override {
    return absl::UnimplementedError("IdleCommunicator issues no collectives");
  }
  CollectiveCounts counts() const override { return {}; }

 private:
  const int rank_;
  const int world_size_;
};

// JoinGroup is fenced like AllocateKvCache: a stale scheduler's join (older epoch) is
// refused with "fenced" before the rank leaves its group, so the newer scheduler's group
// and pool stay as they were. Epoch 0 is unchecked; a newer epoch takes over.
TEST_F(WorkerServiceTpTest, JoinGroupFromAnOlderSchedulerEpochIsFencedAndLeavesTheGroup) {
  std::vector<int64_t> joins;
  ASSERT_NO_FATAL_FAILURE(StartRankOne([&](int64_t generation, absl::Duration)
                                           -> absl::StatusOr<std::unique_ptr<Communicator>> {
    joins.push_back(generation);
    return std::make_unique<IdleCommunicator>(1, 2);
  }));
  pb::Worker::Stub* stub = stub_.get();

  // The newer scheduler (epoch 200) forms generation 1 and allocates.
  pb::JoinGroupRequest join;
  pb::JoinGroupResponse joined;
  join.set_generation(1);
  join.set_scheduler_epoch(200);
  grpc::Status s = stub->JoinGroup(Ctx().get(), join, &joined);
  ASSERT_TRUE(s.ok()) << s.error_message();
  pb::AllocateKvCacheRequest alloc;
  alloc.set_num_blocks(8);
  alloc.set_block_size(4);
  alloc.set_scheduler_epoch(200);
  pb::AllocateKvCacheResponse allocated;
  s = stub->AllocateKvCache(Ctx().get(), alloc, &allocated);
  ASSERT_TRUE(s.ok()) << s.error_message();

  // The stale one (epoch 100) tries to form generation 2: refused, nothing changes.
  join.set_generation(2);
  join.set_scheduler_epoch(100);
  s = stub->JoinGroup(Ctx().get(), join, &joined);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("fenced: JoinGroup from scheduler epoch 100"));
  EXPECT_THAT(s.error_message(), HasSubstr("epoch 200"));
  EXPECT_EQ(joins, std::vector<int64_t>{1}) << "the stale join reached the connector";
  pb::WorkerInfo info;
  ASSERT_TRUE(stub->GetWorkerInfo(Ctx().get(), pb::GetWorkerInfoRequest(), &info).ok());
  EXPECT_EQ(info.group().generation(), 1);
  EXPECT_TRUE(info.group().joined());
  EXPECT_EQ(info.num_blocks(), 8) << "the pool was dropped by a fenced join";
  EXPECT_EQ(info.scheduler_epoch(), 200u);

  // Epoch 0 (tools, tests) is not checked; a newer scheduler (300) is admitted.
  join.set_scheduler_epoch(0);
  s = stub->JoinGroup(Ctx().get(), join, &joined);
  EXPECT_TRUE(s.ok()) << s.error_message();
  join.set_generation(3);
  join.set_scheduler_epoch(300);
  s = stub->JoinGroup(Ctx().get(), join, &joined);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(joins, (std::vector<int64_t>{1, 2, 3}));
  ASSERT_TRUE(stub->GetWorkerInfo(Ctx().get(), pb::GetWorkerInfoRequest(), &info).ok());
  EXPECT_EQ(info.scheduler_epoch(), 300u);
  EXPECT_EQ(info.group().generation(), 3);
}

}  // namespace
}  // namespace folio::worker
