#include "services/cachemgr/host_tier.h"

#include <vector>

#include "gtest/gtest.h"

namespace folio::cachemgr {
namespace {

std::vector<int32_t> Block(int32_t first) { return {first, first + 1}; }
BlockHash HashOf(int32_t first) { return HashBlock(kRootBlockHash, Block(first)); }

TEST(HostTierTest, StoresFindsAndEvictsTheLeastRecentlyUsed) {
  HostTier tier(2, 2, "seg");
  const HostTier::Stored a = tier.Store(HashOf(10), Block(10));
  const HostTier::Stored b = tier.Store(HashOf(20), Block(20));
  EXPECT_NE(a.slot, b.slot);
  EXPECT_LT(a.ticket, b.ticket);
  EXPECT_EQ(tier.Find(HashOf(10), Block(10)), a.slot);
  // The ids are compared: the right hash with other tokens is a miss.
  EXPECT_FALSE(tier.Find(HashOf(10), Block(11)).has_value());
  tier.Touch(a.slot);  // b is now the least recently used
  const HostTier::Stored c = tier.Store(HashOf(30), Block(30));
  EXPECT_EQ(c.slot, b.slot);
  EXPECT_FALSE(tier.Contains(HashOf(20)));
  EXPECT_TRUE(tier.Contains(HashOf(10)));
  EXPECT_EQ(tier.Stats().num_evictions, 1);
  EXPECT_EQ(tier.Stats().num_used, 2);
  EXPECT_TRUE(tier.CheckInvariants().ok()) << tier.CheckInvariants();
}

TEST(HostTierTest, ResetDropsOnlyUnconfirmedStores) {
  HostTier tier(4, 2, "seg");
  const HostTier::Stored a = tier.Store(HashOf(10), Block(10));
  const HostTier::Stored b = tier.Store(HashOf(20), Block(20));
  tier.Confirm(a.ticket);
  tier.DropUnconfirmed();
  EXPECT_TRUE(tier.Contains(HashOf(10)));
  EXPECT_FALSE(tier.Contains(HashOf(20)));
  EXPECT_EQ(tier.Stats().num_dropped_unconfirmed, 1);
  // A ticket past the last store (another tier's) confirms nothing here, not even b.
  tier.Confirm(b.ticket + 100);
  const HostTier::Stored d = tier.Store(HashOf(40), Block(40));
  tier.DropUnconfirmed();
  EXPECT_FALSE(tier.Contains(HashOf(40))) << d.ticket;
  EXPECT_TRUE(tier.CheckInvariants().ok()) << tier.CheckInvariants();
}

TEST(HostTierTest, AStoreEvictedAndReusedBeforeTheResetLeavesTheNewEntryAlone) {
  HostTier tier(1, 2, "seg");
  const HostTier::Stored a = tier.Store(HashOf(10), Block(10));
  const HostTier::Stored b = tier.Store(HashOf(20), Block(20));  // evicts a, same slot
  EXPECT_EQ(a.slot, b.slot);
  tier.Confirm(b.ticket);
  tier.DropUnconfirmed();
  EXPECT_TRUE(tier.Contains(HashOf(20)));
  EXPECT_EQ(tier.Stats().num_dropped_unconfirmed, 0);
  EXPECT_TRUE(tier.CheckInvariants().ok()) << tier.CheckInvariants();
}

TEST(HostTierTest, PartialEntriesAreFoundByTheirOwnTokensAndKeptFromTheRouters) {
  HostTier tier(2, 4, "seg");
  const std::vector<int32_t> full = {1, 2, 3, 4};
  const std::vector<int32_t> part = {5, 6};
  const BlockHash full_hash = HashBlock(kRootBlockHash, full);
  const BlockHash part_hash = HashBlock(full_hash, part);
  EXPECT_FALSE(tier.has_partial());
  tier.Store(full_hash, full);
  const HostTier::Stored p = tier.Store(part_hash, part);
  EXPECT_TRUE(tier.has_partial());
  EXPECT_EQ(tier.Find(part_hash, part), p.slot);
  // Another length under the same hash is a miss, either way round.
  EXPECT_FALSE(tier.Find(part_hash, std::vector<int32_t>{5}).has_value());
  EXPECT_FALSE(tier.Find(part_hash, std::vector<int32_t>{5, 6, 0, 0}).has_value());
  // Routers hear of full blocks only.
  EXPECT_EQ(tier.Hashes(), std::vector<BlockHash>{full_hash});
  tier.NoteLoad(p.slot);
  EXPECT_EQ(tier.Stats().num_partial_stores, 1);
  EXPECT_EQ(tier.Stats().num_partial_loads, 1);
  EXPECT_EQ(tier.Stats().num_loads, 1);
  // The loaded partial entry goes first (its sequence is back), and says so; then
  // full_hash, although it was stored before it.
  const HostTier::Stored a = tier.Store(HashOf(10), std::vector<int32_t>{10, 11, 12, 13});
  EXPECT_TRUE(a.evicted_partial);
  EXPECT_EQ(a.evicted, part_hash);
  EXPECT_EQ(a.evicted_tokens, part);
  EXPECT_FALSE(tier.has_partial());
  const HostTier::Stored b = tier.Store(HashOf(20), std::vector<int32_t>{20, 21, 22, 23});
  EXPECT_FALSE(b.evicted_partial);
  EXPECT_EQ(b.evicted, full_hash);
  EXPECT_TRUE(tier.CheckInvariants().ok()) << tier.CheckInvariants();
  // A reset drops an unconfirmed partial entry like any other.
  tier.Store(part_hash, part);
  EXPECT_TRUE(tier.has_partial());
  tier.DropUnconfirmed();
  EXPECT_FALSE(tier.has_partial());
  EXPECT_TRUE(tier.CheckInvariants().ok()) << tier.CheckInvariants();
}

}  // namespace
}  // namespace folio::cachemgr
