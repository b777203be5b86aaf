#include "services/worker/engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "services/worker/engine/logits_processor.h"

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

// A token mask alone that allows few tokens is sampled from the allowed tokens' logits:
// the token must be the one the whole masked row gives (ApplyTokenMask + Sample), bit
// for bit, for every kind of draw; with many allowed, or another transform, the row path.
TEST(SamplerTest, FewAllowedTokensDrawTheMaskedRowsToken) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  const int32_t vocab = 1000;
  std::vector<float> logits(vocab);
  for (float& x : logits) x = normal(rng);
  logits[17] = logits[400] = logits[903] = 5.0f;  // ties, lowest allowed id wins greedy
  std::vector<SamplingParams> params(7);
  params[0].temperature = 0;
  params[1].temperature = 1;
  params[2].temperature = 0.7f;
  params[2].top_k = 5;
  params[3].temperature = 1.3f;
  params[3].top_p = 0.8f;
  params[4].temperature = 1;
  params[4].min_p = 0.2f;
  params[5].temperature = 1;
  params[5].top_k = 300;  // more than allowed: truncation as for the whole vocabulary
  params[6].temperature = 1;
  params[6].top_k = 1;
  int sparse_draws = 0, differ_from_unmasked = 0;
  for (int allowed : {1, 3, 40, 250, 600}) {
    for (int trial = 0; trial < 20; ++trial) {
      SequenceStep seq;
      seq.num_samples = 2;
      seq.history.allowed_token_bitmask.assign((vocab + 31) / 32, 0);
      std::set<int32_t> ids = trial == 0 ? std::set<int32_t>{17, 400, 903} : std::set<int32_t>{};
      while (static_cast<int>(ids.size()) < allowed) ids.insert(rng() % vocab);
      for (int32_t id : ids) seq.history.allowed_token_bitmask[id / 32] |= 1u << (id % 32);
      std::vector<float> masked = logits;
      ApplyTokenMask(seq.history, absl::MakeSpan(masked));
      for (size_t k = 0; k < params.size(); ++k) {
        seq.sampling = params[k];
        seq.sampling.seed = 100 + trial;
        Sampler sampler, reference;
        SequenceOutput out;
        sampler.Process(logits, seq, 50 + trial, &out);
        ASSERT_EQ(out.samples.size(), 2u);
        for (int s = 0; s < 2; ++s) {
          const int32_t want = reference.Sample(masked, seq.sampling, s, 50 + trial);
          ASSERT_EQ(out.samples[s].token_id, want)
              << "allowed " << allowed << " trial " << trial << " params " << k;
          EXPECT_TRUE(ids.count(want));
          if (allowed * 4 <= vocab) ++sparse_draws;
          if (reference.Sample(logits, seq.sampling, s, 50 + trial) != want) ++differ_from_unmasked;
        }
      }
    }
  }
  EXPECT_GT(sparse_draws, 500);
  EXPECT_GT(differ_from_unmasked, 100);  // the mask mattered
}

}  // namespace
}  // namespace folio::worker
