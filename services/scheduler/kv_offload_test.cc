// The host KV offload tier (issue #50) through the scheduler on stories260K: a pool too
// small to keep conversations between their turns, a host tier that keeps them, and the
// streams held token for token against a cluster without the tier (stories_fixture.h).
#include "services/scheduler/stories_fixture.h"

namespace folio::scheduler::stories {
namespace {

class KvOffloadTest : public StoriesSchedulerTest {
 protected:
  // Eight conversations of a 70-token prompt each (five blocks of 16): their second turns
  // come back after the others pushed them out of a 16-block pool.
  // `reverse`: the second turns come back most recent first.
  std::vector<RequestSpec> Turns(float temperature, bool reverse = false) {
    std::vector<RequestSpec> specs;
    for (int round = 0; round < 2; ++round) {
      for (int i = 0; i < 8; ++i) {
        const int c = reverse && round == 1 ? 7 - i : i;
        std::vector<int32_t> prompt = Prompt(70);
        prompt[1] = 3 + c;  // each conversation its own from the second token on
        specs.push_back(Spec(prompt, 12, temperature));
      }
    }
    return specs;
  }
};

TEST_F(KvOffloadTest, BlocksLoadedBackFromTheHostTierGiveTheSameStreams) {
  for (const float temperature : {0.0f, 0.8f}) {
    Make(16);
    const std::vector<Choices> plain = RunAll(Turns(temperature), /*one_by_one=*/true);
    Make(16, 1, {}, /*host_blocks=*/64);
    const std::vector<Choices> offloaded = RunAll(Turns(temperature), /*one_by_one=*/true);
    ExpectSame(plain, offloaded);
    // Without the tier the second turns found nothing; with it, their four full blocks.
    for (int i = 8; i < 16; ++i) {
      EXPECT_EQ(plain[i].cached_prompt_tokens, 0) << "request " << i;
      EXPECT_EQ(offloaded[i].cached_prompt_tokens, 64) << "request " << i;
    }
    const cachemgr::CacheStats stats = manager_->Stats();
    EXPECT_GE(stats.host.num_loads, 8 * 4);
    EXPECT_GT(stats.host.num_stores, 0);
    ExpectPoolFull(16);
  }
}

TEST_F(KvOffloadTest, AWorkerThatRestartsFindsTheTierAgain) {
  Make(16, 1, {}, /*host_blocks=*/64);
  const RequestSpec spec = Spec(Prompt(70), 12, 0.0f);
  const Choices first = Run(spec);
  // A new runner (an empty, zeroed pool: a restarted worker) that opens the same segment,
  // and a cache manager reset over the same tier index.
  const std::string id = host_->id();
  Make(16, 1, {}, /*host_blocks=*/64);
  ASSERT_EQ(host_->id(), id);
  EXPECT_TRUE(host_->reused());
  const Choices again = Run(spec);
  EXPECT_EQ(again.tokens, first.tokens);
  EXPECT_EQ(again.cached_prompt_tokens, 64);
  EXPECT_EQ(manager_->Stats().pool.num_blocks_used, 0);
  // A transfer out of range is refused before anything is copied.
  worker::StepInput bad;
  using Kind = worker::HostTransfer::Kind;
  bad.host_transfers = {worker::HostTransfer{.kind = Kind::kLoad, .block = 0, .host_slot = 0},
                        worker::HostTransfer{.kind = Kind::kStore, .block = 16, .host_slot = 1}};
  EXPECT_EQ(runner_->Execute(bad).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(KvOffloadTest, ATierSmallerThanTheWorkingSetKeepsTheMostRecentAndStaysExact) {
  Make(16);
  const std::vector<Choices> plain = RunAll(Turns(0.0f, /*reverse=*/true), /*one_by_one=*/true);
  Make(16, 1, {}, /*host_blocks=*/20);  // four conversations' five blocks, not eight
  const std::vector<Choices> offloaded =
      RunAll(Turns(0.0f, /*reverse=*/true), /*one_by_one=*/true);
  ExpectSame(plain, offloaded);
  // The most recent conversations come back from the tier (the last, 7, is still in the
  // pool); the oldest were evicted from both and are recomputed.
  EXPECT_EQ(offloaded[9].cached_prompt_tokens, 64);
  EXPECT_EQ(offloaded[15].cached_prompt_tokens, 0);
  EXPECT_GT(manager_->Stats().host.num_loads, 0);
  EXPECT_GT(manager_->Stats().host.num_evictions, 0);
  EXPECT_TRUE(host_tier_->CheckInvariants().ok());
}

TEST_F(KvOffloadTest, ConcurrentRequestsWithPreemptionStayExact) {
  // All sixteen at once on a pool that preempts: loads, stores and evictions interleave
  // with pipelined steps. (Without the tier this once livelocked: the second turns'
  // prefix hits held the blocks the head of the queue needed, every iteration;
  // StepPlanner now retries the head alone.)
  Make(16);
  const std::vector<Choices> plain = RunAll(Turns(0.8f));

  Make(16, 1, {}, /*host_blocks=*/64);
  const std::vector<Choices> offloaded = RunAll(Turns(0.8f));
  ExpectSame(plain, offloaded);
  ExpectPoolFull(16);
}

TEST_F(KvOffloadTest, SwapPreemptionGivesTheStreamsOfAPoolThatNeverPreempts) {
  // Six requests that grow to 100 tokens (7 blocks) each in a 24-block pool: preempted
  // again and again. Swapped out, a request comes back with the very KV it had computed
  // (the partly filled last block included), so its streams are those of a pool roomy
  // enough never to preempt, bit for bit, even where recomputing by prefill rather than
  // decode could move a near tie.
  std::vector<RequestSpec> specs;
  for (int i = 0; i < 6; ++i) {
    std::vector<int32_t> prompt = Prompt(40);
    prompt[1] = 3 + i;
    specs.push_back(Spec(prompt, 60, 1.0f));
    specs.back().ignore_eos = true;
  }
  Make(256);
  const std::vector<Choices> roomy = RunAll(specs);
  EXPECT_EQ(scheduler_->Stats().num_preemptions, 0);

  SchedulerOptions swap;
  swap.preemption = Preemption::kSwap;
  Make(24, 1, swap, /*host_blocks=*/128);
  const std::vector<Choices> swapped = RunAll(specs);
  ExpectSame(roomy, swapped);
  const int64_t preemptions = scheduler_->Stats().num_preemptions;
  EXPECT_GT(preemptions, 0);
  const cachemgr::CacheStats stats = manager_->Stats();
  EXPECT_EQ(stats.num_swap_outs, preemptions);
  EXPECT_GT(stats.host.num_partial_loads, 0);
  EXPECT_TRUE(host_tier_->CheckInvariants().ok()) << host_tier_->CheckInvariants();
  ExpectPoolFull(24);
}

}  // namespace
}  // namespace folio::scheduler::stories
