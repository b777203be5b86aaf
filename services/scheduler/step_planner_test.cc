// StepPlanner over the real cache manager, no model: budgets and chunks, admission order,
// the max_num_seqs cap, preemption of the last arrival, and what each SequenceStep asks
// the worker to sample.
#include "services/scheduler/step_planner.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/cachemgr/kv_cache_manager.h"
#include "services/scheduler/local_clients.h"

namespace folio::scheduler {
namespace {

using ::testing::ElementsAre;

class StepPlannerTest : public ::testing::Test {
 protected:
  void Make(int32_t num_blocks, SchedulerOptions options) {
    options.block_size = 4;
    options.max_model_len = 64;
    options.vocab_size = 32;
    manager_ = *cachemgr::KvCacheManager::Create(cachemgr::CacheConfig{
        .policy = cachemgr::PolicyKind::kPaged,
        .num_blocks = num_blocks,
        .block_size = 4,
        // Off, so preempted blocks are not found again and the block counts stay plain.
        .prefix_caching = cachemgr::PagedPolicy::PrefixCaching::kDisabled});
    cache_ = std::make_unique<LocalCacheClient>(manager_.get());
    metrics_ = std::make_unique<SchedulerMetrics>(&registry_);
    state_ = std::make_unique<RequestState>(options, cache_.get(), metrics_.get());
    planner_ = std::make_unique<StepPlanner>(state_.get());
  }

  Request* Add(int32_t prompt_len, int32_t max_tokens, int32_t n = 1) {
    auto r = std::make_unique<Request>();
    r->arrival = ++next_arrival_;
    r->spec.request_id = "r" + std::to_string(r->arrival);
    for (int32_t i = 0; i < prompt_len; ++i) r->spec.prompt.push_back(1 + i % 30);
    r->spec.max_tokens = max_tokens;
    r->spec.n = n;
    r->max_len = prompt_len + max_tokens;
    r->branches.emplace_back();
    Request* raw = r.get();
    state_->Queue(std::move(r));
    return raw;
  }

  // What Scheduler::Step does after the workers ran: the KV counts as computed, and a
  // branch at its end gets one more token (7).
  void Complete(const PlannedStep& plan) {
    for (const Granted& g : plan.batch) {
      Branch& b = g.request->branches[g.branch];
      b.num_computed += g.num_tokens;
      state_->pending_commits.push_back({cachemgr::SeqId{b.seq_id}, b.num_computed});
      if (b.num_computed == b.num_tokens(g.request->spec.prompt)) b.output.push_back(7);
    }
    ASSERT_TRUE(manager_->CheckInvariants().ok());
    ASSERT_TRUE(state_->CheckInvariants().ok()) << state_->CheckInvariants();
  }

  MetricsRegistry registry_;
  std::unique_ptr<cachemgr::KvCacheManager> manager_;
  std::unique_ptr<LocalCacheClient> cache_;
  std::unique_ptr<SchedulerMetrics> metrics_;
  std::unique_ptr<RequestState> state_;
  std::unique_ptr<StepPlanner> planner_;
  uint64_t next_arrival_ = 0;
};

TEST_F(StepPlannerTest, PromptsAreChunkedToTheTokenBudget) {
  Make(32, SchedulerOptions{.max_num_batched_tokens = 4});
  Request* r = Add(10, 3);
  PlannedStep plan = planner_->Plan();
  ASSERT_EQ(plan.batch.size(), 1u);
  EXPECT_EQ(plan.num_tokens, 4);
  ASSERT_EQ(plan.input.seqs.size(), 1u);
  EXPECT_EQ(plan.input.seqs[0].start_pos, 0);
  EXPECT_THAT(plan.input.seqs[0].token_ids, ElementsAre(1, 2, 3, 4));
  EXPECT_EQ(plan.input.seqs[0].num_samples, 0) << "no token is drawn mid-prompt";
  EXPECT_EQ(plan.request_ids, std::vector<std::string>{"r1"});
  Complete(plan);
  plan = planner_->Plan();
  EXPECT_EQ(plan.input.seqs[0].start_pos, 4);
  Complete(plan);
  plan = planner_->Plan();
  ASSERT_EQ(plan.num_tokens, 2);
  EXPECT_EQ(plan.input.seqs[0].num_samples, 1) << "the prompt's end draws the first token";
  Complete(plan);
  EXPECT_EQ(r->branches[0].output.size(), 1u);
  plan = planner_->Plan();
  EXPECT_EQ(plan.num_tokens, 1) << "then one token a step";
}

TEST_F(StepPlannerTest, AdmissionKeepsArrivalOrderUnderTheSequenceCap) {
  Make(32, SchedulerOptions{.max_num_seqs = 3});
  Request* a = Add(2, 4);
  Request* b = Add(2, 4, /*n=*/2);
  Request* c = Add(2, 4);
  PlannedStep plan = planner_->Plan();
  EXPECT_THAT(state_->running, ElementsAre(a, b));
  EXPECT_THAT(state_->waiting, ElementsAre(c)) << "c would be a fourth sequence";
  ASSERT_EQ(plan.input.seqs.size(), 2u);
  EXPECT_EQ(plan.input.seqs[1].num_samples, 2) << "a group's root draws every first token";
}

TEST_F(StepPlannerTest, NoRoomPreemptsTheLastArrivalAndItWaitsAtTheFront) {
  // 4 blocks of 4: two requests of 6 prompt tokens fit (2 blocks each); growing past 8
  // tokens each needs a fifth block.
  Make(4, SchedulerOptions{});
  Request* a = Add(6, 8);
  Request* b = Add(6, 8);
  Request* c = Add(6, 8);
  Complete(planner_->Plan());
  EXPECT_THAT(state_->running, ElementsAre(a, b));
  EXPECT_THAT(state_->waiting, ElementsAre(c));
  Complete(planner_->Plan());  // 7 tokens each
  Complete(planner_->Plan());  // 8 tokens each: the blocks are full
  EXPECT_EQ(state_->stats.num_preemptions, 0);
  PlannedStep plan = planner_->Plan();
  EXPECT_EQ(state_->stats.num_preemptions, 1);
  EXPECT_THAT(state_->running, ElementsAre(a));
  EXPECT_THAT(state_->waiting, ElementsAre(b, c)) << "the victim waits before later arrivals";
  ASSERT_EQ(plan.batch.size(), 1u);
  EXPECT_EQ(plan.batch[0].request, a);
  EXPECT_EQ(b->branches[0].output.size(), 3u) << "its tokens are kept for the recompute";
  Complete(plan);
  state_->Flush();
  EXPECT_EQ(manager_->Stats().pool.num_blocks_used, 3);
}

TEST_F(StepPlannerTest, ARootWaitsAtThePromptEndForItsForks) {
  Make(32, SchedulerOptions{});
  Request* r = Add(5, 4, /*n=*/2);
  r->branches.emplace_back();  // a preempted group: branch 1 holds no sequence yet
  r->branches[1].index = 1;
  r->branches[0].output = {7, 7};
  r->branches[1].output = {8, 8};
  r->fanned_out = true;
  PlannedStep plan = planner_->Plan();
  ASSERT_EQ(plan.batch.size(), 1u);
  EXPECT_EQ(plan.num_tokens, 5) << "the root stops at the prompt's end";
  EXPECT_EQ(StepPlanner::Wanted(*r, 1), 0);
}

TEST_F(StepPlannerTest, AFailedCacheRpcIsALossOfTheCache) {
  class DeadCache final : public CacheClient {
   public:
    absl::StatusOr<cachemgr::StepResponse> Step(const cachemgr::StepRequest&) override {
      return absl::UnavailableError("Socket closed");
    }
    absl::Status Reset() override { return absl::UnavailableError("Socket closed"); }
    absl::Status Restore() override { return absl::UnavailableError("Socket closed"); }
  } dead;
  Make(8, SchedulerOptions{});
  RequestState state(SchedulerOptions{.max_model_len = 64, .vocab_size = 32}, &dead,
                     metrics_.get());
  StepPlanner planner(&state);
  auto r = std::make_unique<Request>();
  r->arrival = 1;
  r->spec.prompt = {1, 2};
  r->max_len = 4;
  r->branches.emplace_back();
  state.Queue(std::move(r));
  PlannedStep plan = planner.Plan();
  EXPECT_TRUE(plan.batch.empty());
  ASSERT_TRUE(state.loss.has_value());
  EXPECT_EQ(state.loss->service, LostService::kCache);
  EXPECT_EQ(state.waiting.size(), 1u) << "the request waits for recovery";
}

}  // namespace
}  // namespace folio::scheduler
