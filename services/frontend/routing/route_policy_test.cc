#include "services/frontend/routing/route_policy.h"

#include <map>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace folio::frontend::routing {
namespace {

using ::testing::HasSubstr;

TEST(RoutePolicyTest, ParsesTheFourPoliciesAndNamesTheChoicesOtherwise) {
  for (const char* name : {"kv", "least-loaded", "round-robin", "random"}) {
    absl::StatusOr<RoutingPolicy> p = ParseRoutingPolicy(name);
    ASSERT_TRUE(p.ok()) << name;
    EXPECT_STREQ(RoutingPolicyName(*p), name);
  }
  absl::StatusOr<RoutingPolicy> bad = ParseRoutingPolicy("fastest");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("\"fastest\""));
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("least-loaded"));
}

TEST(RoutePolicyTest, KvTakesTheReplicaWithTheLongestPrefixWhenLoadsAreEqual) {
  RouteChooser kv(RoutingPolicy::kKv, 1.0);
  // A 100-token prompt in blocks of 16: 7 blocks, at most 6 servable from a cache.
  std::vector<ReplicaLoad> r = {{.matched_blocks = 1}, {.matched_blocks = 6},
                                {.matched_blocks = 3}};
  absl::StatusOr<RouteChoice> c = kv.Choose(r, 100, 16);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->replica, 1);
  EXPECT_EQ(c->predicted_cached_tokens, 96);
  EXPECT_DOUBLE_EQ(c->cost, 1.0);  // one block left to compute, no load
  // A full-prompt match still leaves the last token to compute.
  r[1].matched_blocks = 7;
  EXPECT_EQ(kv.Choose(r, 100, 16)->predicted_cached_tokens, 96);
  EXPECT_EQ(kv.Choose(r, 96, 16)->predicted_cached_tokens, 80);
}

TEST(RoutePolicyTest, KvWeighsTheHitAgainstLoad) {
  // Replica 0 holds 10 of the 20 blocks but has 30 blocks of work queued; replica 1 is
  // idle and holds nothing: 10 + 30 > 20 + 0, so the idle one wins.
  std::vector<ReplicaLoad> r = {{.matched_blocks = 10, .pending_tokens = 30 * 16},
                                {.matched_blocks = 0, .pending_tokens = 0}};
  RouteChooser kv(RoutingPolicy::kKv, 1.0);
  EXPECT_EQ(kv.Choose(r, 320, 16)->replica, 1);
  // With the queue at 5 blocks, the hit wins: 10 + 5 < 20.
  r[0].pending_tokens = 5 * 16;
  EXPECT_EQ(kv.Choose(r, 320, 16)->replica, 0);
  // A heavier prefill weight favours hits: 4 * 10 + 30 < 4 * 20.
  r[0].pending_tokens = 30 * 16;
  RouteChooser heavy(RoutingPolicy::kKv, 4.0);
  EXPECT_EQ(heavy.Choose(r, 320, 16)->replica, 0);
}

TEST(RoutePolicyTest, TiesRotateAndLeastLoadedIgnoresPrefixes) {
  std::vector<ReplicaLoad> r(3);
  RouteChooser kv(RoutingPolicy::kKv, 1.0);
  std::map<int32_t, int> seen;
  for (int i = 0; i < 30; ++i) ++seen[kv.Choose(r, 40, 16)->replica];
  EXPECT_EQ(seen.size(), 3u) << "equal replicas share the work";

  RouteChooser ll(RoutingPolicy::kLeastLoaded, 1.0);
  r = {{.matched_blocks = 9, .pending_tokens = 500}, {.pending_tokens = 20},
       {.pending_tokens = 90}};
  EXPECT_EQ(ll.Choose(r, 160, 16)->replica, 1);
}

TEST(RoutePolicyTest, OnlyEligibleReplicasAndRoundRobinCycles) {
  std::vector<ReplicaLoad> r = {{.eligible = false, .matched_blocks = 50}, {}, {}};
  RouteChooser kv(RoutingPolicy::kKv, 1.0);
  for (int i = 0; i < 10; ++i) EXPECT_NE(kv.Choose(r, 900, 16)->replica, 0);
  RouteChooser rr(RoutingPolicy::kRoundRobin, 1.0);
  std::vector<int32_t> order;
  for (int i = 0; i < 4; ++i) order.push_back(rr.Choose(r, 10, 16)->replica);
  EXPECT_EQ(order, (std::vector<int32_t>{1, 2, 1, 2}));
  RouteChooser random(RoutingPolicy::kRandom, 1.0);
  for (int i = 0; i < 20; ++i) EXPECT_NE(random.Choose(r, 10, 16)->replica, 0);
  for (ReplicaLoad& l : r) l.eligible = false;
  absl::StatusOr<RouteChoice> none = kv.Choose(r, 10, 16);
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(std::string(none.status().message()), HasSubstr("none of the 3 replicas"));
}

// A hit on a replica's disk tier is cheaper than computing the block, dearer than a hit
// in memory: with equal loads, memory beats disk beats nothing; and it is still counted as
// cached tokens (the replica's scheduler reports loaded blocks as cached).
TEST(RoutePolicyTest, KvWeighsADiskHitBetweenAMemoryHitAndAMiss) {
  RouteChooser kv(RoutingPolicy::kKv, 1.0, /*seed=*/1, /*disk_hit_cost=*/0.1);
  // 100 tokens: 7 blocks, 6 servable.
  std::vector<ReplicaLoad> r = {{.matched_blocks = 0},
                                {.matched_blocks = 6, .matched_disk_blocks = 6},
                                {.matched_blocks = 6, .matched_disk_blocks = 2}};
  absl::StatusOr<RouteChoice> c = kv.Choose(r, 100, 16);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->replica, 2);
  EXPECT_EQ(c->predicted_cached_tokens, 96);
  EXPECT_DOUBLE_EQ(c->cost, 1.0 + 0.1 * 2);
  r[2].matched_blocks = 0;
  c = kv.Choose(r, 100, 16);
  EXPECT_EQ(c->replica, 1);
  EXPECT_DOUBLE_EQ(c->cost, 1.0 + 0.1 * 6);
  // A disk hit is not worth a queue: 6 blocks of load outweigh the 5.4 blocks it saves.
  r[1].pending_tokens = 6 * 16;
  r[2].pending_tokens = 16;
  EXPECT_EQ(kv.Choose(r, 100, 16)->replica, 0);
}

}  // namespace
}  // namespace folio::frontend::routing
