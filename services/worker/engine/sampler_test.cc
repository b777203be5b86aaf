#include "services/worker/engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace folio::worker {
namespace {

// 8 tokens with softmax probabilities roughly .40 .24 .15 .09 .05 .03 .02 .01 (ids
// shuffled so order by id differs from order by probability).
std::vector<float> Logits() {
  return {std::log(0.05f), std::log(0.40f), std::log(0.02f), std::log(0.24f),
          std::log(0.09f), std::log(0.15f), std::log(0.01f), std::log(0.03f)};
}
const std::vector<int32_t> kByProb = {1, 3, 5, 4, 0, 7, 2, 6};

std::vector<double> LogSoftmax(const std::vector<float>& l) {
  double max = *std::max_element(l.begin(), l.end());
  double sum = 0;
  for (float x : l) sum += std::exp(x - max);
  std::vector<double> out;
  for (float x : l) out.push_back(x - max - std::log(sum));
  return out;
}

TEST(CounterUniformTest, IsAPureFunctionOfItsKey) {
  EXPECT_EQ(CounterUniform(7, 0, 100), CounterUniform(7, 0, 100));
  EXPECT_NE(CounterUniform(7, 0, 100), CounterUniform(8, 0, 100));
  EXPECT_NE(CounterUniform(7, 0, 100), CounterUniform(7, 1, 100));
  EXPECT_NE(CounterUniform(7, 0, 100), CounterUniform(7, 0, 101));
  double sum = 0;
  for (int i = 0; i < 100000; ++i) {
    const double u = CounterUniform(42, 0, i);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  EXPECT_NEAR(sum / 100000, 0.5, 0.01);
}

TEST(SamplerTest, DeterministicBySeedIndexAndPosition) {
  const std::vector<float> logits = Logits();
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 1234;
  Sampler a, b;
  std::vector<int32_t> first, again, other_seed, other_index;
  for (int pos = 0; pos < 200; ++pos) first.push_back(a.Sample(logits, p, 0, pos));
  // A fresh sampler, positions visited in another order (as in another batch).
  for (int pos = 199; pos >= 0; --pos) again.insert(again.begin(), b.Sample(logits, p, 0, pos));
  EXPECT_EQ(first, again);
  SamplingParams q = p;
  q.seed = 1235;
  for (int pos = 0; pos < 200; ++pos) other_seed.push_back(a.Sample(logits, q, 0, pos));
  for (int pos = 0; pos < 200; ++pos) other_index.push_back(a.Sample(logits, p, 1, pos));
  EXPECT_NE(first, other_seed);
  EXPECT_NE(first, other_index);
}

TEST(SamplerTest, FrequenciesFollowTheDistribution) {
  const std::vector<float> logits = Logits();
  const std::vector<double> lp = LogSoftmax(logits);
  SamplingParams p;
  p.seed = 99;
  Sampler s;
  const int n = 40000;
  std::vector<int> counts(logits.size());
  for (int pos = 0; pos < n; ++pos) ++counts[s.Sample(logits, p, 0, pos)];
  for (size_t i = 0; i < logits.size(); ++i) {
    const double expect = std::exp(lp[i]);
    // ~5 standard deviations of a binomial proportion.
    EXPECT_NEAR(counts[i] / double(n), expect, 5 * std::sqrt(expect * (1 - expect) / n)) << i;
  }
}

TEST(SamplerTest, GreedyTakesTheArgmaxLowestIdOnTies) {
  SamplingParams p;
  p.temperature = 0.0f;
  Sampler s;
  EXPECT_EQ(s.Sample(Logits(), p, 0, 5), 1);
  EXPECT_EQ(s.Sample(std::vector<float>{0.f, 3.f, 1.f, 3.f}, p, 0, 0), 1);
  p.temperature = 1.0f;
  p.top_k = 1;
  EXPECT_EQ(s.Sample(Logits(), p, 3, 9), 1);
}

std::set<int32_t> Support(const SamplingParams& p, int draws = 5000) {
  Sampler s;
  std::set<int32_t> seen;
  for (int pos = 0; pos < draws; ++pos) seen.insert(s.Sample(Logits(), p, 0, pos));
  return seen;
}

TEST(SamplerTest, TopKKeepsTheKMostLikely) {
  SamplingParams p;
  p.top_k = 3;
  EXPECT_EQ(Support(p), (std::set<int32_t>{1, 3, 5}));
}

TEST(SamplerTest, TopPKeepsTheSmallestNucleus) {
  SamplingParams p;
  p.top_p = 0.7f;  // .40 + .24 = .64 < .7 <= .79 with .15
  EXPECT_EQ(Support(p), (std::set<int32_t>{1, 3, 5}));
  p.top_p = 0.3f;
  EXPECT_EQ(Support(p), (std::set<int32_t>{1}));
  p.top_p = 0.8f;  // over what top-k kept (.40 .24 renormalised: .625 .375)
  p.top_k = 2;
  EXPECT_EQ(Support(p), (std::set<int32_t>{1, 3}));
}

TEST(SamplerTest, MinPDropsTokensBelowAFractionOfTheTop) {
  SamplingParams p;
  p.min_p = 0.2f;  // threshold .08: keeps .40 .24 .15 .09
  EXPECT_EQ(Support(p), (std::set<int32_t>{1, 3, 5, 4}));
  p.min_p = 0.5f;  // .20: keeps .40 .24
  EXPECT_EQ(Support(p), (std::set<int32_t>{1, 3}));
}

TEST(SamplerTest, TemperatureSharpensAndFlattens) {
  SamplingParams cold;
  cold.temperature = 0.05f;
  EXPECT_EQ(Support(cold, 2000), (std::set<int32_t>{1}));
  SamplingParams hot;
  hot.temperature = 5.0f;
  EXPECT_EQ(Support(hot, 2000).size(), 8u);
}

TEST(SamplerTest, LogprobsEqualLogSoftmaxOfRawLogits) {
  const std::vector<float> logits = Logits();
  const std::vector<double> lp = LogSoftmax(logits);
  SequenceStep seq;
  seq.seq_id = 5;
  seq.sampling.temperature = 0.7f;  // must not change the reported log-probs
  seq.sampling.top_k = 4;
  seq.sampling.seed = 3;
  seq.num_samples = 4;
  seq.num_logprobs = 3;
  seq.num_candidates = 5;
  Sampler s;
  SequenceOutput out;
  s.Process(logits, seq, 17, &out);
  EXPECT_EQ(out.seq_id, 5u);
  ASSERT_EQ(out.samples.size(), 4u);
  for (uint32_t i = 0; i < 4; ++i) {
    const SampledToken& t = out.samples[i];
    EXPECT_EQ(t.token_id, Sampler().Sample(logits, seq.sampling, i, 17)) << "sample " << i;
    EXPECT_NEAR(t.logprob, lp[t.token_id], 1e-6);
    ASSERT_EQ(t.top_logprobs.size(), 3u);
    for (int j = 0; j < 3; ++j) {
      EXPECT_EQ(t.top_logprobs[j].token_id, kByProb[j]);
      EXPECT_NEAR(t.top_logprobs[j].logprob, lp[kByProb[j]], 1e-6);
    }
  }
  ASSERT_EQ(out.candidates.size(), 5u);
  for (int j = 0; j < 5; ++j) {
    EXPECT_EQ(out.candidates[j].token_id, kByProb[j]);
    EXPECT_NEAR(out.candidates[j].logprob, lp[kByProb[j]], 1e-6);
  }
  EXPECT_TRUE(out.logits.empty());
}

TEST(SamplerTest, RejectsBadParams) {
  SamplingParams p;
  p.temperature = -1;
  EXPECT_FALSE(ValidateSamplingParams(p).ok());
  p = {};
  p.top_p = 0;
  EXPECT_FALSE(ValidateSamplingParams(p).ok());
  p = {};
  p.min_p = 1.5f;
  EXPECT_FALSE(ValidateSamplingParams(p).ok());
  p = {};
  p.top_k = -2;
  EXPECT_FALSE(ValidateSamplingParams(p).ok());
  EXPECT_TRUE(ValidateSamplingParams(SamplingParams{}).ok());
}

}  // namespace
}  // namespace folio::worker
