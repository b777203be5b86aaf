#include "services/cachemgr/contiguous_policy.h"

#include "gtest/gtest.h"
#include "services/cachemgr/kv_cache_manager.h"

namespace folio::cachemgr {
namespace {

std::unique_ptr<KvCacheManager> MakeContiguous(int32_t blocks, int32_t block_size,
                                               ContiguousPolicy::Rounding rounding) {
  CacheConfig config{.policy = PolicyKind::kContiguous, .num_blocks = blocks,
                     .block_size = block_size, .rounding = rounding};
  return *KvCacheManager::Create(config);
}

TEST(ContiguousPolicyTest, ReservesMaxLenAtCreation) {
  auto mgr = MakeContiguous(16, 4, ContiguousPolicy::Rounding::kExact);
  StepRequest req;
  req.creates.push_back(CreateOp{.seq = SeqId{1}, .max_len = 20});
  req.grants.push_back(GrantOp{.seq = SeqId{1}, .start_pos = 0, .token_ids = {1, 2, 3, 4, 5}});
  auto resp = mgr->Step(req);
  ASSERT_TRUE(resp.ok()) << resp.status();
  EXPECT_EQ(mgr->Stats().pool.num_blocks_used, 5);   // ceil(20 / 4)
  EXPECT_EQ(mgr->Stats().pool.num_slots_allocated, 20);
  EXPECT_EQ(mgr->Stats().pool.num_tokens_stored, 5);
  ASSERT_EQ(resp->grants.size(), 1u);
  EXPECT_EQ(resp->grants[0].entries, (std::vector<BlockId>{BlockId{0}, BlockId{1}}));
  EXPECT_TRUE(mgr->CheckInvariants().ok());
}

TEST(ContiguousPolicyTest, ExternalFragmentationRefusesAFittingTotal) {
  // 64 blocks; runs of 16, 8, 32 blocks and 8 free. Free the 8-block run: 16 blocks are
  // free in two runs of 8, so a 16-block sequence is refused.
  auto mgr = MakeContiguous(64, 16, ContiguousPolicy::Rounding::kPowerOfTwo);
  StepRequest req;
  req.creates.push_back(CreateOp{.seq = SeqId{1}, .max_len = 16 * 16});
  req.creates.push_back(CreateOp{.seq = SeqId{2}, .max_len = 8 * 16});
  req.creates.push_back(CreateOp{.seq = SeqId{3}, .max_len = 20 * 16});  // rounds up to 32
  ASSERT_TRUE(mgr->Step(req).ok());
  EXPECT_EQ(mgr->Stats().pool.num_blocks_free, 8);
  StepRequest free_req;
  free_req.frees.push_back(SeqId{2});
  ASSERT_TRUE(mgr->Step(free_req).ok());
  EXPECT_EQ(mgr->Stats().pool.num_blocks_free, 16);
  StepRequest big;
  big.creates.push_back(CreateOp{.seq = SeqId{4}, .max_len = 16 * 16});
  auto resp = mgr->Step(big);
  ASSERT_TRUE(resp.ok());
  EXPECT_EQ(resp->creates[0].status, SeqStatus::kNoRoom);
  EXPECT_EQ(mgr->Find(SeqId{4}), nullptr);
  EXPECT_EQ(mgr->Stats().num_grant_failures, 1);
  EXPECT_TRUE(mgr->CheckInvariants().ok());
}

TEST(ContiguousPolicyTest, FreedRunsCoalesce) {
  auto mgr = MakeContiguous(8, 1, ContiguousPolicy::Rounding::kExact);
  StepRequest req;
  for (uint64_t i = 1; i <= 4; ++i) req.creates.push_back(CreateOp{.seq = SeqId{i}, .max_len = 2});
  ASSERT_TRUE(mgr->Step(req).ok());
  StepRequest free_req;
  free_req.frees = {SeqId{2}, SeqId{1}, SeqId{3}};
  ASSERT_TRUE(mgr->Step(free_req).ok());
  StepRequest big;
  big.creates.push_back(CreateOp{.seq = SeqId{9}, .max_len = 6});
  auto resp = mgr->Step(big);
  ASSERT_TRUE(resp.ok());
  EXPECT_EQ(resp->creates[0].status, SeqStatus::kOk);
  EXPECT_TRUE(mgr->CheckInvariants().ok());
}

TEST(ContiguousPolicyTest, ForkCopiesEveryFilledBlock) {
  auto mgr = MakeContiguous(8, 2, ContiguousPolicy::Rounding::kExact);
  StepRequest req;
  req.creates.push_back(CreateOp{.seq = SeqId{1}, .max_len = 8});
  req.grants.push_back(GrantOp{.seq = SeqId{1}, .start_pos = 0, .token_ids = {1, 2, 3}});
  ASSERT_TRUE(mgr->Step(req).ok());
  StepRequest fork;
  fork.forks.push_back(ForkOp{SeqId{1}, SeqId{2}});
  auto resp = mgr->Step(fork);
  ASSERT_TRUE(resp.ok());
  EXPECT_EQ(resp->forks[0].copies,
            (std::vector<BlockCopy>{{BlockId{0}, BlockId{4}}, {BlockId{1}, BlockId{5}}}));
  EXPECT_EQ(mgr->Stats().pool.num_blocks_used, 8);
  EXPECT_TRUE(mgr->CheckInvariants().ok());
}

}  // namespace
}  // namespace folio::cachemgr
