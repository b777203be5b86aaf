// The draft model in the worker (drafting_runner.h) on two random models of one
// vocabulary: verifications with drafted proposals give plain greedy decoding's tokens,
// a draft that is the model itself has (nearly) everything accepted, so its KV followed
// the target's through prefill, decode and rejected rows; malformed steps and mismatched
// models are refused; under tensor parallelism every rank verifies rank 0's proposals.
#include "services/worker/engine/drafting_runner.h"

#include <unistd.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "services/worker/dist/gloo_communicator.h"
#include "services/worker/dist/kv_store.h"
#include "services/worker/engine/cpu_model_runner.h"
#include "services/worker/engine/host_kv_segment.h"
#include "services/worker/engine/test_models.h"

namespace folio::worker {
namespace {

constexpr int32_t kBlocks = 64;

// Sequence 1 at its start: one token and two placeholders for the draft to propose.
SequenceStep TwoDraftedTokens(std::vector<int32_t> block_table) {
  SequenceStep s;
  s.seq_id = 1;
  s.token_ids = {1, 0, 0};
  s.num_draft_tokens = 2;
  s.draft_by_model = true;
  s.block_table = std::move(block_table);
  return s;
}

// Runs `body(rank, communicator)` on two threads joined as one Gloo group. The
// communicators outlive the threads, so a test can read their counts afterwards.
std::vector<std::unique_ptr<GlooCommunicator>> OnTwoRanks(
    absl::Duration timeout, const std::function<void(int, GlooCommunicator*)>& body) {
  KvStore store;
  std::vector<std::unique_ptr<GlooCommunicator>> comms(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      LocalGlooStore gloo_store(&store, timeout);
      GlooCommunicatorOptions o;
      o.rank = r;
      o.world_size = 2;
      o.timeout = timeout;
      absl::StatusOr<std::unique_ptr<GlooCommunicator>> comm =
          GlooCommunicator::Create(o, gloo_store);
      CHECK(comm.ok()) << comm.status();
      comms[r] = *std::move(comm);
      body(r, comms[r].get());
    });
  }
  for (std::thread& t : ranks) t.join();
  return comms;
}

std::unique_ptr<ModelRunner> Runner(const ModelWeights& w) {
  CpuModelRunnerOptions o;
  o.block_size = 16;
  o.kv_cache_bytes = int64_t{16} << 20;
  o.max_num_blocks = kBlocks;
  o.num_threads = 2;
  absl::StatusOr<std::unique_ptr<CpuModelRunner>> r = CpuModelRunner::Create(w, o);
  CHECK(r.ok()) << r.status();
  return *std::move(r);
}

std::vector<int32_t> Prompt() { return {1, 17, 45, 200, 33, 9, 120, 77, 5, 61, 240, 12}; }

// Plain greedy decoding of `steps` tokens after the prompt, one token a step.
std::vector<int32_t> Plain(ModelRunner& runner, int steps) {
  SequenceStep s;
  s.seq_id = 1;
  s.sampling.temperature = 0.0f;
  s.block_table = testing::ScatteredBlocks(8, 3);
  s.token_ids = Prompt();
  std::vector<int32_t> out;
  for (int i = 0; i < steps; ++i) {
    StepInput step;
    step.seqs = {s};
    absl::StatusOr<StepOutput> o = runner.Execute(step);
    CHECK(o.ok()) << o.status();
    out.push_back(o->seqs[0].samples[0].token_id);
    s.start_pos += static_cast<int32_t>(s.token_ids.size());
    s.token_ids = {out.back()};
  }
  return out;
}

// The same with k placeholders the draft model fills each step: at least `steps` tokens
// (the last verification may overshoot), and how many proposals were accepted.
struct Drafted {
  std::vector<int32_t> tokens;
  int64_t proposed = 0;
  int64_t accepted = 0;
};
Drafted WithDraft(DraftingRunner& runner, int steps, int32_t k) {
  SequenceStep s;
  s.seq_id = 1;
  s.sampling.temperature = 0.0f;
  s.block_table = testing::ScatteredBlocks(8, 3);
  s.token_ids = Prompt();
  Drafted d;
  {  // the prompt, as plain decoding's first step
    StepInput step;
    step.seqs = {s};
    absl::StatusOr<StepOutput> o = runner.Execute(step);
    CHECK(o.ok()) << o.status();
    d.tokens.push_back(o->seqs[0].samples[0].token_id);
    s.start_pos = static_cast<int32_t>(s.token_ids.size());
  }
  while (static_cast<int>(d.tokens.size()) < steps) {
    s.token_ids.assign(1 + k, 0);  // placeholders after the known token
    s.token_ids[0] = d.tokens.back();
    s.num_draft_tokens = k;
    s.draft_by_model = true;
    StepInput step;
    step.seqs = {s};
    absl::StatusOr<StepOutput> o = runner.Execute(step);
    CHECK(o.ok()) << o.status();
    const std::vector<SampledToken>& got = o->seqs[0].samples;
    CHECK(!got.empty() && static_cast<int32_t>(got.size()) <= k + 1);
    d.proposed += k;
    d.accepted += static_cast<int64_t>(got.size()) - 1;
    s.start_pos += static_cast<int32_t>(got.size());  // the known token and the accepted ones
    for (const SampledToken& t : got) d.tokens.push_back(t.token_id);
  }
  return d;
}

class DraftingRunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    target_weights_ = testing::RandomModelOrDie(1);
    self_weights_ = testing::RandomModelOrDie(1);
    other_weights_ = testing::RandomModelOrDie(2);
  }
  std::unique_ptr<DraftingRunner> Make(const ModelWeights& draft) {
    absl::StatusOr<std::unique_ptr<DraftingRunner>> r =
        DraftingRunner::Create(Runner(*target_weights_), Runner(draft));
    CHECK(r.ok()) << r.status();
    return *std::move(r);
  }
  std::unique_ptr<ModelWeights> target_weights_, self_weights_, other_weights_;
};

TEST_F(DraftingRunnerTest, DraftedVerificationsGivePlainGreedyTokens) {
  std::unique_ptr<ModelRunner> plain = Runner(*target_weights_);
  const std::vector<int32_t> reference = Plain(*plain, 90);
  for (const ModelWeights* draft : {self_weights_.get(), other_weights_.get()}) {
    const bool self = draft == self_weights_.get();
    SCOPED_TRACE(self ? "the model drafting for itself" : "another model drafting");
    std::unique_ptr<DraftingRunner> runner = Make(*draft);
    const Drafted d = WithDraft(*runner, 90, 4);
    ASSERT_GE(d.tokens.size(), reference.size());
    EXPECT_EQ(std::vector<int32_t>(d.tokens.begin(), d.tokens.begin() + reference.size()),
              reference);
    if (self) {
      // Its KV followed the target's through the prompt, the decode rows and the rows of
      // rejected proposals: its greedy pick is the target's (ties between kernels aside).
      EXPECT_GE(d.accepted, d.proposed * 9 / 10) << d.accepted << " of " << d.proposed;
    } else {
      EXPECT_LT(d.accepted, d.proposed) << "another model's proposals are not all right";
    }
  }
}

// Two ranks (rank 0's draft is the model itself, rank 1's another model, so a rank 1 that
// drafted on its own would be refused nearly always): the step's proposals are rank 0's
// on both, so both verify the same tokens and accept as many (without the exchange rank
// 1 would verify its placeholders and its KV and tokens would part from rank 0's).
TEST_F(DraftingRunnerTest, EveryRankOfAGroupVerifiesRankZerosProposals) {
  std::unique_ptr<ModelRunner> plain = Runner(*target_weights_);
  const std::vector<int32_t> reference = Plain(*plain, 60);
  std::vector<Drafted> drafted(2);
  const std::vector<std::unique_ptr<GlooCommunicator>> comms =
      OnTwoRanks(absl::Seconds(30), [&](int r, GlooCommunicator* comm) {
        absl::StatusOr<std::unique_ptr<DraftingRunner>> runner = DraftingRunner::Create(
            Runner(*target_weights_), Runner(r == 0 ? *self_weights_ : *other_weights_), comm);
        CHECK(runner.ok()) << runner.status();
        drafted[r] = WithDraft(**runner, 60, 4);
      });
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE(r);
    ASSERT_GE(drafted[r].tokens.size(), reference.size());
    EXPECT_EQ(std::vector<int32_t>(drafted[r].tokens.begin(),
                                   drafted[r].tokens.begin() + reference.size()),
              reference);
    EXPECT_GE(drafted[r].accepted, drafted[r].proposed * 9 / 10)
        << drafted[r].accepted << " of " << drafted[r].proposed;
  }
  EXPECT_EQ(drafted[0].tokens, drafted[1].tokens);
  EXPECT_EQ(drafted[0].accepted, drafted[1].accepted);
  EXPECT_GT(comms[1]->counts().all_reduces, 10);
}

// A host slot holds the draft's KV after the model's; a store or load the draft cannot
// run (a slot outside the segment) is refused by every rank of a group alike, before the
// proposals' exchange, rather than by rank 0 alone while the others wait for it.
TEST_F(DraftingRunnerTest, EveryRankRefusesABadHostTransferBeforeTheExchange) {
  std::vector<absl::Status> refused(2);
  std::vector<std::string> segments(2);
  for (int r = 0; r < 2; ++r) {
    segments[r] = "folio-drafting-test-" + std::to_string(getpid()) + "-" + std::to_string(r);
  }
  OnTwoRanks(absl::Seconds(5), [&](int r, GlooCommunicator* comm) {
    absl::StatusOr<std::unique_ptr<DraftingRunner>> runner =
        DraftingRunner::Create(Runner(*target_weights_), Runner(*self_weights_), comm);
    CHECK(runner.ok()) << runner.status();
    const int64_t per_block = (*runner)->host_bytes_per_block();
    CHECK_GT(per_block, Runner(*target_weights_)->host_bytes_per_block());
    absl::StatusOr<std::unique_ptr<HostKvSegment>> host = HostKvSegment::Open(
        segments[r], HostKvSegment::kHeaderBytes + 4 * per_block, per_block, "test");
    CHECK(host.ok()) << host.status();
    CHECK((*runner)->SetHostSegment(host->get()).ok());
    StepInput step;
    step.seqs = {TwoDraftedTokens({0})};
    step.host_transfers.push_back({.kind = HostTransfer::Kind::kStore, .block = 1,
                                   .host_slot = 4});  // the segment holds slots 0 .. 3
    refused[r] = (*runner)->Execute(step).status();
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(refused[r].code(), absl::StatusCode::kInvalidArgument) << r << ": " << refused[r];
    EXPECT_TRUE(HostKvSegment::Unlink(segments[r]).ok());
  }
}

TEST_F(DraftingRunnerTest, RefusesMalformedStepsAndMismatchedModels) {
  std::unique_ptr<DraftingRunner> runner = Make(*self_weights_);
  StepInput step;
  SequenceStep s = TwoDraftedTokens({kBlocks});  // outside the pool
  step.seqs = {s};
  EXPECT_EQ(runner->Execute(step).status().code(), absl::StatusCode::kInvalidArgument);
  step.seqs[0].block_table = {0};
  step.seqs[0].num_draft_tokens = 0;
  EXPECT_EQ(runner->Execute(step).status().code(), absl::StatusCode::kInvalidArgument);
  // A runner without a draft model refuses proposals to draft.
  step.seqs[0].num_draft_tokens = 2;
  std::unique_ptr<ModelRunner> plain = Runner(*target_weights_);
  const absl::Status no_draft = plain->Execute(step).status();
  EXPECT_EQ(no_draft.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(no_draft.message().find("no draft model"), std::string::npos) << no_draft;
  EXPECT_TRUE(runner->Execute(step).ok());

  // Pools of another shape.
  CpuModelRunnerOptions o;
  o.max_num_blocks = kBlocks / 2;
  EXPECT_EQ(DraftingRunner::Create(Runner(*target_weights_),
                                   *CpuModelRunner::Create(*self_weights_, o))
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);

  // Vocabularies.
  EXPECT_TRUE(CheckDraftVocabulary(*target_weights_, *other_weights_).ok());
  other_weights_->vocab.pieces[40] = "elsewhere";
  absl::Status piece = CheckDraftVocabulary(*target_weights_, *other_weights_);
  EXPECT_EQ(piece.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(piece.message().find("token 40"), std::string::npos) << piece;
  other_weights_->config.vocab_size += 1;
  absl::Status size = CheckDraftVocabulary(*target_weights_, *other_weights_);
  EXPECT_NE(size.message().find("tokens, the model's"), std::string::npos) << size;
}

}  // namespace
}  // namespace folio::worker
