#include "services/cachemgr/block_pool.h"

#include <vector>

#include "gtest/gtest.h"

namespace folio::cachemgr {
namespace {

TEST(BlockPoolTest, AllocatesInIdOrderAndTracksCounts) {
  BlockPool pool(4, 16);
  EXPECT_EQ(pool.num_free(), 4);
  EXPECT_EQ(pool.Allocate().value, 0);
  EXPECT_EQ(pool.Allocate().value, 1);
  EXPECT_EQ(pool.num_free(), 2);
  EXPECT_EQ(pool.num_used(), 2);
  EXPECT_EQ(pool.ref_count(BlockId{0}), 1);
  EXPECT_TRUE(pool.CheckInvariants().ok());
}

TEST(BlockPoolTest, FreedBlocksQueueAtTheTail) {
  BlockPool pool(3, 16);
  BlockId a = pool.Allocate();
  BlockId b = pool.Allocate();
  BlockId c = pool.Allocate();
  pool.Release(b);
  pool.Release(a);
  pool.Release(c);
  EXPECT_EQ(pool.Allocate(), b);
  EXPECT_EQ(pool.Allocate(), a);
  EXPECT_EQ(pool.Allocate(), c);
  EXPECT_TRUE(pool.CheckInvariants().ok());
}

TEST(BlockPoolTest, SharedBlockFreesOnlyAtZero) {
  BlockPool pool(2, 16);
  BlockId a = pool.Allocate();
  pool.AddRef(a);
  pool.Release(a);
  EXPECT_EQ(pool.num_free(), 1);
  pool.Release(a);
  EXPECT_EQ(pool.num_free(), 2);
  EXPECT_TRUE(pool.CheckInvariants().ok());
}

TEST(BlockPoolTest, CachedBlockIsFoundAfterFreeUntilEvicted) {
  BlockPool pool(2, 2);
  std::vector<int32_t> tokens = {5, 6};
  const BlockHash h = HashBlock(kRootBlockHash, tokens);
  BlockId a = pool.Allocate();
  ASSERT_TRUE(pool.Register(a, h, tokens));
  EXPECT_FALSE(pool.Register(a, h, tokens)) << "a block is hashed once";
  pool.Release(a);
  EXPECT_EQ(pool.num_cached_evictable(), 1);
  ASSERT_EQ(pool.FindCached(h, tokens), a);

  // A hit revives the block: it leaves the free queue.
  pool.AddRef(a);
  EXPECT_EQ(pool.num_free(), 1);
  EXPECT_EQ(pool.num_cached_evictable(), 0);
  pool.Release(a);

  // Allocation reaches the other free block first (LRU order), then evicts `a`.
  BlockId b = pool.Allocate();
  EXPECT_NE(b, a);
  BlockId c = pool.Allocate();
  EXPECT_EQ(c, a);
  EXPECT_EQ(pool.num_evictions(), 1);
  EXPECT_FALSE(pool.FindCached(h, tokens).has_value());
  EXPECT_TRUE(pool.CheckInvariants().ok());
}

TEST(BlockPoolTest, HashCollisionWithOtherTokensIsAMiss) {
  BlockPool pool(1, 2);
  std::vector<int32_t> tokens = {1, 2};
  const BlockHash h = HashBlock(kRootBlockHash, tokens);
  BlockId a = pool.Allocate();
  ASSERT_TRUE(pool.Register(a, h, tokens));
  std::vector<int32_t> other = {1, 3};
  EXPECT_FALSE(pool.FindCached(h, other).has_value());
}

TEST(BlockPoolTest, HashChainsOverParents) {
  std::vector<int32_t> x = {1, 2}, y = {3, 4};
  const BlockHash hx = HashBlock(kRootBlockHash, x);
  const BlockHash hy = HashBlock(kRootBlockHash, y);
  EXPECT_NE(hx, hy);
  EXPECT_NE(HashBlock(hx, y), HashBlock(hy, y)) << "same block, different prefix";
  EXPECT_EQ(HashBlock(hx, y), HashBlock(HashBlock(kRootBlockHash, x), y));
}

TEST(BlockPoolTest, ResetFreesEverything) {
  BlockPool pool(3, 4);
  pool.Allocate();
  pool.Allocate();
  pool.Reset();
  EXPECT_EQ(pool.num_free(), 3);
  EXPECT_EQ(pool.Allocate().value, 0);
  EXPECT_TRUE(pool.CheckInvariants().ok());
}

}  // namespace
}  // namespace folio::cachemgr
