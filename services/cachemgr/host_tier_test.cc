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

}  // namespace
}  // namespace folio::cachemgr
