#include "services/scheduler/beam_search.h"

#include <cmath>

#include "gtest/gtest.h"

namespace folio::scheduler {
namespace {

std::vector<int32_t> Tokens(const std::vector<Expansion>& es) {
  std::vector<int32_t> out;
  for (const Expansion& e : es) out.push_back(e.token_id);
  return out;
}

TEST(BeamSearchTest, RanksByScoreThenTokenIdThenParent) {
  std::vector<Expansion> all = {
      {.parent = 1, .token_id = 9, .cum_logprob = -1.0},
      {.parent = 0, .token_id = 9, .cum_logprob = -1.0},
      {.parent = 0, .token_id = 4, .cum_logprob = -1.0},
      {.parent = 0, .token_id = 7, .cum_logprob = -0.5},
  };
  std::vector<Expansion> survivors, finished;
  SelectExpansions(all, 3, [](int32_t) { return false; }, &survivors, &finished);
  EXPECT_EQ(Tokens(survivors), (std::vector<int32_t>{7, 4, 9}));
  EXPECT_EQ(survivors[2].parent, 0) << "a tie on score and token goes to the lower parent";
  EXPECT_TRUE(finished.empty());
}

TEST(BeamSearchTest, EndingTokensFinishOnlyWithinTheFirstWidthRanks) {
  const int32_t kEos = 2;
  std::vector<Expansion> all = {
      {.token_id = kEos, .cum_logprob = -0.1},  // rank 0: finishes
      {.token_id = 10, .cum_logprob = -0.2},
      {.parent = 1, .token_id = kEos, .cum_logprob = -0.3},  // rank 2 >= width 2: dropped
      {.token_id = 11, .cum_logprob = -0.4},
      {.token_id = 12, .cum_logprob = -0.5},
  };
  std::vector<Expansion> survivors, finished;
  SelectExpansions(all, 2, [](int32_t t) { return t == kEos; }, &survivors, &finished);
  EXPECT_EQ(Tokens(survivors), (std::vector<int32_t>{10, 11}));
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_DOUBLE_EQ(finished[0].cum_logprob, -0.1);
}

TEST(BeamSearchTest, LengthPenaltyDividesByLengthToThePower) {
  EXPECT_DOUBLE_EQ(BeamScore(-6.0, 4, 1.0f), -1.5);
  EXPECT_DOUBLE_EQ(BeamScore(-6.0, 4, 0.0f), -6.0);
  EXPECT_DOUBLE_EQ(BeamScore(-6.0, 4, 0.5f), -3.0);
  // Positive penalty: a longer beam could still score higher, up to max_length.
  EXPECT_DOUBLE_EQ(BestReachableScore(-6.0, 4, 12, 1.0f), -0.5);
  // Zero or negative: the current score is the best it can reach.
  EXPECT_DOUBLE_EQ(BestReachableScore(-6.0, 4, 12, 0.0f), -6.0);
  EXPECT_DOUBLE_EQ(BestReachableScore(-6.0, 4, 12, -1.0f), -24.0);
}

TEST(BeamSearchTest, FinishedBeamsKeepTheBestAndStopOnlyWhenNoLiveBeamCanWin) {
  FinishedBeams fb;
  fb.set_capacity(2);
  auto h = [](std::vector<int32_t> tokens, double score) {
    Hypothesis x;
    x.tokens = std::move(tokens);
    x.score = score;
    return x;
  };
  EXPECT_FALSE(fb.Done({-1.0})) << "fewer than capacity finished";
  EXPECT_TRUE(fb.Done({})) << "no live beam left";
  fb.Add(h({5}, -2.0));
  fb.Add(h({4}, -3.0));
  fb.Add(h({3}, -4.0));  // worse than both: not kept
  fb.Add(h({1}, -2.0));  // ties with {5}: the smaller token list first
  ASSERT_EQ(fb.size(), 2);
  std::vector<Hypothesis> best = fb.Best(5);
  ASSERT_EQ(best.size(), 2u);
  EXPECT_EQ(best[0].tokens, std::vector<int32_t>{1});
  EXPECT_EQ(best[1].tokens, std::vector<int32_t>{5});
  EXPECT_FALSE(fb.Done({-1.5})) << "a live beam could still beat the worst kept";
  EXPECT_TRUE(fb.Done({-2.0, -7.0}));
}

}  // namespace
}  // namespace folio::scheduler
