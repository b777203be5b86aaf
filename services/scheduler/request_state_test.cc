// RequestState over the real cache manager, no model: how requests end, are preempted
// and give their sequences back, and the invariants it keeps.
#include "services/scheduler/request_state.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/cachemgr/kv_cache_manager.h"
#include "services/scheduler/local_clients.h"

namespace folio::scheduler {
namespace {

using ::testing::HasSubstr;

class RequestStateTest : public ::testing::Test {
 protected:
  RequestStateTest()
      : manager_(*cachemgr::KvCacheManager::Create(cachemgr::CacheConfig{
            .policy = cachemgr::PolicyKind::kPaged, .num_blocks = 16, .block_size = 4})),
        cache_(manager_.get()),
        metrics_(&registry_),
        state_(SchedulerOptions{.block_size = 4, .max_model_len = 64, .vocab_size = 32}, &cache_,
               &metrics_) {}

  Request* Add(uint64_t arrival, int32_t n = 1) {
    auto r = std::make_unique<Request>();
    r->spec.request_id = "r" + std::to_string(arrival);
    r->spec.prompt = {1, 2, 3, 4, 5};
    r->spec.n = n;
    r->arrival = arrival;
    r->sink = [this, arrival](const RequestEvent& e) { events_[arrival].push_back(e); };
    r->branches.emplace_back();
    Request* raw = r.get();
    state_.Queue(std::move(r));
    return raw;
  }

  // Creates the root's sequence and grants its prompt, as the planner would.
  void Start(Request* r) {
    const uint64_t seq = state_.NewSeqId();
    cachemgr::StepRequest req;
    req.creates.push_back({.seq = cachemgr::SeqId{seq}, .max_len = 16, .request_id = "x"});
    req.grants.push_back({.seq = cachemgr::SeqId{seq}, .start_pos = 0, .token_ids = r->spec.prompt});
    auto resp = state_.CacheStep(req);
    ASSERT_TRUE(resp.ok()) << resp.status();
    r->branches[0].seq_id = seq;
    RequestState::ApplyTable(&r->branches[0], resp->grants[0]);
    r->branches[0].num_computed = 5;
    state_.MarkRunning(r);
  }

  MetricsRegistry registry_;
  std::unique_ptr<cachemgr::KvCacheManager> manager_;
  LocalCacheClient cache_;
  SchedulerMetrics metrics_;
  RequestState state_;
  std::map<uint64_t, std::vector<RequestEvent>> events_;
};

TEST_F(RequestStateTest, ValidateRequestNamesWhatIsWrong) {
  SchedulerOptions options{.block_size = 4, .max_model_len = 64, .vocab_size = 32,
                           .num_blocks = 8};
  RequestSpec spec;
  spec.prompt = {1, 2};
  EXPECT_TRUE(ValidateRequest(spec, options).ok());
  spec.prompt = {1, 40};
  EXPECT_THAT(ValidateRequest(spec, options).message(), HasSubstr("outside the vocabulary"));
  spec.prompt = {1, 2};
  spec.max_tokens = 63;
  EXPECT_THAT(ValidateRequest(spec, options).message(), HasSubstr("context of 64"));
  spec.max_tokens = 30;
  spec.n = 4;
  EXPECT_THAT(ValidateRequest(spec, options).message(), HasSubstr("KV blocks"));
  spec.n = 1;
  spec.beam_width = 2;
  spec.n = 3;
  EXPECT_THAT(ValidateRequest(spec, options).message(), HasSubstr("must not exceed beam_width"));
}

// With window layer groups each branch also holds each group's blocks: at most what the
// group holds at once, or the branch's whole length when it is shorter.
TEST_F(RequestStateTest, ValidateRequestCountsWindowGroupsBlocks) {
  SchedulerOptions options{.block_size = 4, .max_model_len = 64, .vocab_size = 32,
                           .num_blocks = 40, .window_held_blocks = {4, 4}};
  RequestSpec spec;
  spec.prompt = {1, 2};
  spec.max_tokens = 6;  // 8 tokens: 2 blocks a table
  spec.n = 4;
  EXPECT_TRUE(ValidateRequest(spec, options).ok());  // 4 x (2 + 2 + 2) = 24
  spec.max_tokens = 18;  // 20 tokens: 5 blocks, windows 4 each
  EXPECT_THAT(ValidateRequest(spec, options).message(),
              HasSubstr("may need 52 KV blocks"));  // 4 x (5 + 4 + 4)
  options.window_held_blocks.clear();
  EXPECT_TRUE(ValidateRequest(spec, options).ok());  // 4 x 5
}

TEST_F(RequestStateTest, MarkRunningKeepsArrivalOrder) {
  Request* a = Add(1);
  Request* b = Add(2);
  Request* c = Add(3);
  Start(c);
  Start(a);
  Start(b);
  EXPECT_THAT(state_.running, ::testing::ElementsAre(a, b, c));
  EXPECT_TRUE(state_.waiting.empty());
  EXPECT_TRUE(state_.CheckInvariants().ok()) << state_.CheckInvariants();
}

TEST_F(RequestStateTest, PreemptFreesBlocksAndQueuesAtTheFront) {
  Request* a = Add(1);
  Request* b = Add(2);
  Start(a);
  EXPECT_GT(manager_->Stats().pool.num_blocks_used, 0);
  state_.Preempt(a);
  EXPECT_THAT(state_.waiting, ::testing::ElementsAre(a, b));
  EXPECT_EQ(a->branches[0].seq_id, 0u);
  EXPECT_TRUE(a->branches[0].block_table.empty());
  EXPECT_EQ(state_.stats.num_preemptions, 1);
  EXPECT_TRUE(state_.CheckInvariants().ok()) << state_.CheckInvariants();
  state_.Flush();
  EXPECT_EQ(manager_->Stats().pool.num_blocks_used, 0);
  EXPECT_TRUE(events_.empty()) << "a preempted request sends nothing";
}

TEST_F(RequestStateTest, FinishSendsOneLastEventAndForgets) {
  Request* a = Add(1);
  Start(a);
  state_.Finish(a, FinishReason::kCancelled);
  ASSERT_EQ(events_[1].size(), 1u);
  EXPECT_TRUE(events_[1][0].request_done);
  EXPECT_EQ(events_[1][0].finish, FinishReason::kCancelled);
  EXPECT_EQ(state_.Find(1), nullptr);
  EXPECT_TRUE(state_.empty());
  state_.Flush();
  EXPECT_EQ(manager_->Stats().num_sequences, 0);
}

TEST_F(RequestStateTest, ReleasingAQueuedForkDropsTheFork) {
  Request* a = Add(1);
  Start(a);
  const uint64_t child = state_.NewSeqId();
  state_.pending_forks.push_back({a, a->branches[0].seq_id, child});
  state_.ReleaseSeq(child);
  EXPECT_TRUE(state_.pending_forks.empty());
  EXPECT_TRUE(state_.pending_frees.empty()) << "the fork never reached the cache manager";
  state_.ReleaseSeq(0);
  EXPECT_TRUE(state_.pending_frees.empty());
}

TEST_F(RequestStateTest, LoseRequeuesRunningInArrivalOrderKeepingTokens) {
  Request* a = Add(1);
  Request* b = Add(2);
  Request* c = Add(3);
  Start(a);
  Start(b);
  a->branches[0].output = {9, 8};
  state_.pending_commits.push_back({cachemgr::SeqId{a->branches[0].seq_id}, 5});
  state_.pending_frees.push_back(cachemgr::SeqId{99});
  state_.Lose(LostService::kWorker, absl::UnavailableError("Socket closed"));
  ASSERT_TRUE(state_.loss.has_value());
  EXPECT_EQ(state_.loss->service, LostService::kWorker);
  EXPECT_TRUE(state_.running.empty());
  EXPECT_THAT(state_.waiting, ::testing::ElementsAre(a, b, c));
  EXPECT_EQ(a->branches[0].output, (std::vector<int32_t>{9, 8})) << "tokens kept for recompute";
  EXPECT_EQ(a->branches[0].seq_id, 0u);
  EXPECT_FALSE(state_.HasPendingCacheOps()) << "the pool is rebuilt, nothing to tell it";
  EXPECT_TRUE(events_.empty()) << "no request ends";
  EXPECT_TRUE(state_.CheckInvariants().ok()) << state_.CheckInvariants();
  EXPECT_EQ(state_.stats.num_preemptions, 0) << "a loss is not a preemption";
  state_.Lose(LostService::kCache, absl::UnavailableError("later"));
  EXPECT_EQ(state_.loss->service, LostService::kWorker) << "the first loss is the cause";
}

TEST_F(RequestStateTest, FailRunningEndsRunningRequestsOnly) {
  Request* a = Add(1);
  Add(2);
  Start(a);
  state_.FailRunning(absl::InternalError("malformed step"));
  ASSERT_EQ(events_[1].size(), 1u);
  EXPECT_EQ(events_[1][0].error.code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(events_[2].empty()) << "a waiting request keeps waiting";
  EXPECT_EQ(state_.waiting.size(), 1u);
  EXPECT_FALSE(state_.loss.has_value());
}

TEST_F(RequestStateTest, CheckInvariantsCatchesAWaitingRequestHoldingASequence) {
  Request* a = Add(1);
  a->branches[0].seq_id = 7;
  EXPECT_THAT(state_.CheckInvariants().message(), HasSubstr("holds a sequence"));
  a->branches[0].seq_id = 0;
  EXPECT_TRUE(state_.CheckInvariants().ok());
}

}  // namespace
}  // namespace folio::scheduler
