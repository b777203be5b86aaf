#include "services/scheduler/speculation.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace folio::scheduler {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(ProposeNgramTest, ProposesWhatFollowedTheMostRecentEarlierOccurrence) {
  // Context: 1 2 3 9 | 1 2 3 7 5 1 2 3  -> the last "1 2 3" occurred last before at 4..6,
  // followed by 7 5 1 2.
  const std::vector<int32_t> prompt = {1, 2, 3, 9};
  const std::vector<int32_t> output = {1, 2, 3, 7, 5, 1, 2, 3};
  EXPECT_THAT(ProposeNgram(prompt, output, 4, 1, 3), ElementsAre(7, 5, 1, 2));
  EXPECT_THAT(ProposeNgram(prompt, output, 2, 1, 3), ElementsAre(7, 5));
  // The continuation stops at the end of the context.
  EXPECT_THAT(ProposeNgram({4, 5, 6, 4, 5}, {}, 8, 2, 2), ElementsAre(6, 4, 5));
}

TEST(ProposeNgramTest, PrefersTheLongestMatchingSuffix) {
  // "8 3" matches at 0 (followed by 1); the longer "5 8 3" matches at 3 (followed by 2).
  const std::vector<int32_t> context = {8, 3, 1, 5, 8, 3, 2, 0, 8, 3, 1, 5, 8, 3};
  // The most recent earlier "5 8 3" is at 3..5 -> 2 0; "8 3" alone would give 1 5 (at 8).
  EXPECT_THAT(ProposeNgram(context, {}, 2, 1, 3), ElementsAre(2, 0));
  EXPECT_THAT(ProposeNgram(context, {}, 2, 1, 2), ElementsAre(1, 5));
}

TEST(ProposeNgramTest, NothingWithoutAMatch) {
  EXPECT_THAT(ProposeNgram({1, 2, 3, 4}, {5}, 4, 1, 3), IsEmpty());
  EXPECT_THAT(ProposeNgram({1}, {}, 4, 1, 3), IsEmpty());
  EXPECT_THAT(ProposeNgram({}, {}, 4, 1, 3), IsEmpty());
  EXPECT_THAT(ProposeNgram({1, 1, 1}, {}, 0, 1, 3), IsEmpty());
  // Below ngram_min nothing is tried.
  EXPECT_THAT(ProposeNgram({7, 1, 2, 7}, {}, 4, 2, 3), IsEmpty());
  EXPECT_THAT(ProposeNgram({7, 1, 2, 7}, {}, 4, 1, 3), ElementsAre(1, 2, 7));
}

TEST(SyntheticAcceptanceTest, MeanLengthIsWhatWasAskedFor) {
  for (int32_t k : {1, 3, 5}) {
    for (double len : {1.0, 1.5, 2.0, 3.0, 4.0}) {
      if (len > k + 1) continue;
      const double rate = SyntheticRate(len, k);
      double sum = 0;
      const int n = 200000;
      for (int i = 0; i < n; ++i) {
        const int32_t a = SyntheticAccepts(rate, k, static_cast<uint64_t>(i) * 7919 + k);
        ASSERT_GE(a, 0);
        ASSERT_LE(a, k);
        sum += a + 1;
      }
      // Standard error of the mean is below 0.005 here; 0.02 is four of them and more.
      EXPECT_NEAR(sum / n, len, 0.02) << "k " << k << " rate " << rate;
    }
  }
  EXPECT_EQ(SyntheticRate(1.0, 4), 0.0);
  EXPECT_EQ(SyntheticRate(5.0, 4), 1.0);
  EXPECT_EQ(SyntheticAccepts(1.0, 4, 3), 4);
  EXPECT_EQ(SyntheticAccepts(0.0, 4, 3), 0);
}

// k after one verification from k = `k`.
int32_t NextK(int32_t k, int32_t proposed, int32_t accepted, int32_t max_k) {
  SpeculativeBranch s{.k = k};
  AdaptSpeculation(proposed, accepted, max_k, &s);
  return s.k;
}

TEST(AdaptSpeculationTest, HalvesOnMissesAndGrowsOnFullAcceptance) {
  EXPECT_EQ(NextK(4, 4, 0, 8), 2);
  EXPECT_EQ(NextK(1, 1, 0, 8), 1);
  EXPECT_EQ(NextK(4, 4, 4, 8), 5);
  EXPECT_EQ(NextK(8, 8, 8, 8), 8);
  EXPECT_EQ(NextK(4, 4, 2, 8), 4);
  EXPECT_EQ(NextK(4, 0, 0, 8), 4);
}

// A proposer that is never right: k falls to 1, then each refused single proposal pauses
// the branch for twice as many steps as the last, up to the cap; one accepted proposal
// ends the backoff.
TEST(AdaptSpeculationTest, ABranchThatIsNeverRightSitsOutLongerAndLonger) {
  SpeculativeBranch s{.k = 4};
  std::vector<int32_t> proposed_at;  // the decode steps that proposed
  for (int32_t step = 0; step < 400; ++step) {
    if (!ProposesThisStep(&s)) continue;
    proposed_at.push_back(step);
    AdaptSpeculation(s.k, 0, 4, &s);
  }
  // k = 4, 2, 1 (steps 0-2), then probes after pauses of 4, 8, 16, 32, 64, 64, ...
  ASSERT_GE(proposed_at.size(), 9u);
  EXPECT_EQ(std::vector<int32_t>(proposed_at.begin(), proposed_at.begin() + 9),
            (std::vector<int32_t>{0, 1, 2, 7, 16, 33, 66, 131, 196}));
  EXPECT_EQ(s.backoff, kMaxSpeculativePause);
  // Accepted at the next probe: no pause, and the next refusal starts again from 4.
  while (!ProposesThisStep(&s)) {
  }
  AdaptSpeculation(1, 1, 4, &s);
  EXPECT_EQ(s.backoff, 0);
  EXPECT_EQ(s.k, 2);
  EXPECT_TRUE(ProposesThisStep(&s));
  AdaptSpeculation(1, 0, 4, &s);  // a short proposal at k = 2 refused: halved, no pause
  EXPECT_EQ(s.k, 1);
  EXPECT_TRUE(ProposesThisStep(&s));
  AdaptSpeculation(1, 0, 4, &s);
  EXPECT_EQ(s.pause, kFirstSpeculativePause);
}

TEST(SpeculativeOptionsTest, BadValuesAreNamed) {
  EXPECT_TRUE(ValidateSpeculativeOptions({}).ok());
  EXPECT_EQ(*ParseSpeculativeMode("draft"), SpeculativeMode::kDraft);
  EXPECT_THAT(ParseSpeculativeMode("eagle").status().message(),
              ::testing::HasSubstr("off, ngram or draft"));
  EXPECT_EQ(*ParseSpeculativeMode("ngram"), SpeculativeMode::kNgram);
  for (SpeculativeMode m : {SpeculativeMode::kOff, SpeculativeMode::kNgram, SpeculativeMode::kDraft}) {
    EXPECT_EQ(*ParseSpeculativeMode(SpeculativeModeName(m)), m);
  }
  SpeculativeOptions o;
  o.num_tokens = 0;
  EXPECT_THAT(ValidateSpeculativeOptions(o).message(),
              ::testing::HasSubstr("--num_speculative_tokens"));
  o = {};
  o.synth_len = 6.0;  // k = 4: at most 5 tokens a step
  EXPECT_THAT(ValidateSpeculativeOptions(o).message(), ::testing::HasSubstr("--spec_synth_len"));
  o = {};
  o.ngram_min = 3;
  o.ngram_max = 2;
  EXPECT_FALSE(ValidateSpeculativeOptions(o).ok());
}

}  // namespace
}  // namespace folio::scheduler
