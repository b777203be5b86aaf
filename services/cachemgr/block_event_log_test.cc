// The prefix cache's event log: the log itself, the pool's events replayed against its
// index, and the hashes a router computes against those the cache manager stores.
#include "services/cachemgr/block_event_log.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "gtest/gtest.h"
#include "services/cachemgr/block_pool.h"
#include "services/cachemgr/kv_cache_manager.h"

namespace folio::cachemgr {
namespace {

BlockHash H(uint64_t n) { return BlockHash{n, ~n}; }

TEST(BlockEventLogTest, ReadsInOrderFromAnyPointKept) {
  BlockEventLog log(8);
  EXPECT_EQ(log.last_seq(), 0u);
  ASSERT_TRUE(log.ReadAfter(0, 10).has_value());
  EXPECT_TRUE(log.ReadAfter(0, 10)->empty());
  for (uint64_t i = 1; i <= 5; ++i) log.Append(BlockEvent::Kind::kStored, H(i));
  log.Append(BlockEvent::Kind::kRemoved, H(2));
  EXPECT_EQ(log.last_seq(), 6u);
  auto all = log.ReadAfter(0, 100);
  ASSERT_TRUE(all.has_value());
  ASSERT_EQ(all->size(), 6u);
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ((*all)[i].seq, i + 1);
  EXPECT_EQ((*all)[5].kind, BlockEvent::Kind::kRemoved);
  EXPECT_EQ((*all)[5].hash, H(2));
  auto some = log.ReadAfter(2, 3);
  ASSERT_TRUE(some.has_value());
  ASSERT_EQ(some->size(), 3u);
  EXPECT_EQ(some->front().seq, 3u);
  EXPECT_EQ(some->back().seq, 5u);
  EXPECT_TRUE(log.ReadAfter(6, 10)->empty());
}

TEST(BlockEventLogTest, AReaderBehindTheRingOrAheadOfItMustResync) {
  BlockEventLog log(4);
  for (uint64_t i = 1; i <= 10; ++i) log.Append(BlockEvent::Kind::kStored, H(i));
  // Kept: 7..10. Reading after 6 still works; after 5 lost event 6.
  auto kept = log.ReadAfter(6, 10);
  ASSERT_TRUE(kept.has_value());
  ASSERT_EQ(kept->size(), 4u);
  EXPECT_EQ(kept->front().hash, H(7));
  EXPECT_FALSE(log.ReadAfter(5, 10).has_value());
  EXPECT_FALSE(log.ReadAfter(0, 10).has_value());
  EXPECT_FALSE(log.ReadAfter(11, 10).has_value()) << "a position this log never reached";
}

// Replays a pool's events into a set and checks it against the pool's own index after
// every random operation.
TEST(BlockPoolEventsTest, ReplayedEventsEqualTheIndexAfterEveryOperation) {
  constexpr int32_t kBlocks = 24, kBlockSize = 2;
  BlockPool pool(kBlocks, kBlockSize);
  std::mt19937 rng(7);
  absl::flat_hash_set<BlockHash> replica;
  uint64_t applied = 0;
  std::vector<BlockId> held;
  uint64_t next_hash = 1;
  for (int op = 0; op < 5000; ++op) {
    const int choice = rng() % 10;
    if (choice < 4 && pool.num_free() > 0) {
      held.push_back(pool.Allocate());
    } else if (choice < 7 && !held.empty()) {
      const size_t i = rng() % held.size();
      const BlockId id = held[i];
      const int32_t t = static_cast<int32_t>(next_hash);
      // Sometimes a hash already cached elsewhere: Register refuses and logs nothing.
      const uint64_t h = (rng() % 4 == 0 && next_hash > 1) ? next_hash - 1 : next_hash++;
      std::vector<int32_t> tokens = {t, t + 1};
      pool.Register(id, H(h), tokens);
    } else if (choice < 9 && !held.empty()) {
      const size_t i = rng() % held.size();
      pool.Release(held[i]);
      held.erase(held.begin() + i);
    } else if (op % 997 == 0) {
      pool.Reset();
      held.clear();
    }
    auto events = pool.events().ReadAfter(applied, 1 << 20);
    ASSERT_TRUE(events.has_value()) << "op " << op;
    for (const BlockEvent& e : *events) {
      ASSERT_EQ(e.seq, applied + 1);
      applied = e.seq;
      if (e.kind == BlockEvent::Kind::kStored) {
        ASSERT_TRUE(replica.insert(e.hash).second) << "stored twice without a removal";
      } else {
        ASSERT_EQ(replica.erase(e.hash), 1u) << "removed a hash never stored";
      }
    }
    std::vector<BlockHash> snapshot = pool.SnapshotHashes();
    ASSERT_EQ(snapshot.size(), replica.size()) << "op " << op;
    for (const BlockHash& h : snapshot) ASSERT_TRUE(replica.contains(h)) << "op " << op;
    ASSERT_TRUE(pool.CheckInvariants().ok());
  }
  EXPECT_GT(applied, 1000u) << "the walk should have stored and evicted plenty";
}

// The router's hashes (HashFullBlocks) are the cache manager's: the blocks a sequence
// caches log exactly these, in order, and a prompt sharing them finds them.
TEST(BlockHashAgreementTest, HashFullBlocksEqualsWhatTheCacheManagerStores) {
  constexpr int32_t kBlockSize = 4;
  auto mgr = *KvCacheManager::Create(
      CacheConfig{.policy = PolicyKind::kPaged, .num_blocks = 16, .block_size = kBlockSize});
  std::vector<int32_t> prompt(23);
  std::iota(prompt.begin(), prompt.end(), 1000);
  StepRequest create;
  create.creates.push_back(CreateOp{.seq = SeqId{1}, .max_len = 64});
  create.grants.push_back(GrantOp{.seq = SeqId{1}, .start_pos = 0, .token_ids = prompt});
  ASSERT_TRUE(mgr->Step(create).ok());
  StepRequest commit;
  commit.commits.push_back(CommitOp{SeqId{1}, static_cast<int32_t>(prompt.size())});
  ASSERT_TRUE(mgr->Step(commit).ok());

  const std::vector<BlockHash> expected = HashFullBlocks(prompt, kBlockSize);
  ASSERT_EQ(expected.size(), 5u);  // 23 tokens: 5 full blocks, the partial one left out
  auto events = mgr->prefix_pool()->events().ReadAfter(0, 100);
  ASSERT_TRUE(events.has_value());
  ASSERT_EQ(events->size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ((*events)[i].kind, BlockEvent::Kind::kStored);
    EXPECT_EQ((*events)[i].hash, expected[i]) << "block " << i;
  }
  // A different token in block 2 changes that block's hash and every one after it.
  std::vector<int32_t> other = prompt;
  other[9] = 7;
  const std::vector<BlockHash> diverged = HashFullBlocks(other, kBlockSize);
  EXPECT_EQ(diverged[1], expected[1]);
  for (size_t i = 2; i < diverged.size(); ++i) EXPECT_NE(diverged[i], expected[i]);
  // max_blocks caps the walk.
  EXPECT_EQ(HashFullBlocks(prompt, kBlockSize, 2).size(), 2u);
  EXPECT_TRUE(HashFullBlocks(prompt, 0).empty());
}

}  // namespace
}  // namespace folio::cachemgr
