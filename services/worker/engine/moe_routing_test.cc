#include "services/worker/engine/moe_routing.h"

#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace folio::worker {
namespace {

TEST(MoeRoutingTest, TopKOfTheSoftmaxNormalisedAndGroupedByExpert) {
  // Two tokens, four experts.
  const std::vector<float> logits = {0.0f, 2.0f, 1.0f, -1.0f,   //
                                     3.0f, 0.0f, 0.0f, 2.5f};
  MoeRouting r;
  RouteTokens(logits.data(), 2, 4, 2, /*normalize=*/true, /*scale=*/1.0f, &r);
  ASSERT_EQ(r.routes.size(), 4u);
  EXPECT_EQ(r.routes[0].expert, 1);
  EXPECT_EQ(r.routes[1].expert, 2);
  // Normalised softmax weights of the two chosen: e^2 / (e^2 + e^1).
  EXPECT_NEAR(r.routes[0].weight, std::exp(2.0) / (std::exp(2.0) + std::exp(1.0)), 1e-6);
  EXPECT_NEAR(r.routes[0].weight + r.routes[1].weight, 1.0f, 1e-6);
  EXPECT_EQ(r.routes[2].expert, 0);
  EXPECT_EQ(r.routes[3].expert, 3);
  // Grouped: expert 0 has token 1, expert 1 token 0, expert 2 token 0, expert 3 token 1.
  EXPECT_EQ(r.offsets, (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(r.rows, (std::vector<int64_t>{1, 0, 0, 1}));
  EXPECT_FLOAT_EQ(r.weights[1], r.routes[0].weight);
}

TEST(MoeRoutingTest, WithoutNormalisingTheWeightsAreTheSoftmaxProbabilitiesScaled) {
  const std::vector<float> logits = {1.0f, 0.0f, 0.0f};
  MoeRouting r;
  RouteTokens(logits.data(), 1, 3, 1, /*normalize=*/false, /*scale=*/2.5f, &r);
  const double p = std::exp(1.0) / (std::exp(1.0) + 2.0);
  EXPECT_EQ(r.routes[0].expert, 0);
  EXPECT_NEAR(r.routes[0].weight, 2.5 * p, 1e-6);
}

TEST(MoeRoutingTest, TiesGoToTheLowerExpertIndex) {
  const std::vector<float> logits = {0.5f, 1.0f, 1.0f, 1.0f, 0.5f};
  MoeRouting r;
  RouteTokens(logits.data(), 1, 5, 2, true, 1.0f, &r);
  EXPECT_EQ(r.routes[0].expert, 1);
  EXPECT_EQ(r.routes[1].expert, 2);
  EXPECT_FLOAT_EQ(r.routes[0].weight, 0.5f);
}

TEST(MoeRoutingTest, NonFiniteLogitsStillRouteToKDistinctExperts) {
  const std::vector<float> logits = {NAN, 1.0f, INFINITY, 0.0f};
  MoeRouting r;
  RouteTokens(logits.data(), 1, 4, 3, true, 1.0f, &r);
  std::vector<int> seen(4, 0);
  for (const ExpertRoute& x : r.routes) {
    ASSERT_GE(x.expert, 0);
    ASSERT_LT(x.expert, 4);
    ++seen[x.expert];
  }
  for (int n : seen) EXPECT_LE(n, 1);
  EXPECT_EQ(r.offsets.back(), 3);
}

TEST(MoeRoutingTest, ABatchRoutesEachTokenAsItWouldAlone) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  constexpr int kTokens = 37, kExperts = 16, kTopK = 4;
  std::vector<float> logits(kTokens * kExperts);
  for (float& x : logits) x = normal(rng);
  MoeRouting batch;
  RouteTokens(logits.data(), kTokens, kExperts, kTopK, true, 1.0f, &batch);
  int64_t total = 0;
  for (int t = 0; t < kTokens; ++t) {
    MoeRouting one;
    RouteTokens(logits.data() + t * kExperts, 1, kExperts, kTopK, true, 1.0f, &one);
    for (int j = 0; j < kTopK; ++j) {
      EXPECT_EQ(one.routes[j].expert, batch.routes[t * kTopK + j].expert);
      EXPECT_EQ(one.routes[j].weight, batch.routes[t * kTopK + j].weight);
    }
  }
  // Every (token, expert) pair appears once in the grouping, rows ascending per expert.
  for (int e = 0; e < kExperts; ++e) {
    for (int64_t i = batch.offsets[e]; i < batch.offsets[e + 1]; ++i) {
      if (i > batch.offsets[e]) {
        EXPECT_LT(batch.rows[i - 1], batch.rows[i]);
      }
      bool found = false;
      for (int j = 0; j < kTopK; ++j) {
        const ExpertRoute& r = batch.routes[batch.rows[i] * kTopK + j];
        if (r.expert == e) found = r.weight == batch.weights[i];
      }
      EXPECT_TRUE(found) << "expert " << e << " row " << batch.rows[i];
      ++total;
    }
  }
  EXPECT_EQ(total, kTokens * kTopK);
}

}  // namespace
}  // namespace folio::worker
