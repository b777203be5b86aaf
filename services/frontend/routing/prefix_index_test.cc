#include "services/frontend/routing/prefix_index.h"

#include <numeric>
#include <vector>

#include "gtest/gtest.h"

namespace folio::frontend::routing {
namespace {

using Event = BlockEventBatch::Event;

std::vector<BlockHash> Chain(int32_t blocks, int32_t first_token = 1) {
  std::vector<int32_t> tokens(static_cast<size_t>(blocks) * 4);
  std::iota(tokens.begin(), tokens.end(), first_token);
  return cachemgr::HashFullBlocks(tokens, 4);
}

BlockEventBatch Snapshot(const std::string& pool, uint64_t last_seq,
                         const std::vector<BlockHash>& hashes) {
  BlockEventBatch b{.pool_id = pool, .snapshot = true, .last_seq = last_seq, .block_size = 4};
  for (const BlockHash& h : hashes) b.events.push_back(Event{last_seq, true, h});
  return b;
}

TEST(PrefixIndexTest, SnapshotThenEventsKeepTheSetAndMatchCountsTheLeadingRun) {
  const std::vector<BlockHash> chain = Chain(5);
  PrefixIndex index;
  EXPECT_EQ(index.cursor().pool_id, "");
  ASSERT_EQ(index.Apply(Snapshot("p1", 10, {chain[0], chain[1]})),
            PrefixIndex::ApplyResult::kApplied);
  EXPECT_EQ(index.cursor().pool_id, "p1");
  EXPECT_EQ(index.cursor().after_seq, 10u);
  EXPECT_EQ(index.block_size(), 4);
  EXPECT_EQ(index.Match(chain), 2);

  BlockEventBatch more{.pool_id = "p1", .last_seq = 13};
  more.events = {Event{11, true, chain[2]}, Event{12, true, chain[4]}, Event{13, false, chain[0]}};
  ASSERT_EQ(index.Apply(more), PrefixIndex::ApplyResult::kApplied);
  EXPECT_EQ(index.size(), 3);
  EXPECT_EQ(index.Match(chain), 0) << "the first block was evicted: nothing leads";
  EXPECT_EQ(index.Match(absl::MakeConstSpan(chain).subspan(1)), 2);
  EXPECT_EQ(index.cursor().after_seq, 13u);

  // An empty answer (nothing new) keeps the cursor.
  ASSERT_EQ(index.Apply(BlockEventBatch{.pool_id = "p1", .last_seq = 13}),
            PrefixIndex::ApplyResult::kApplied);
  EXPECT_EQ(index.size(), 3);
}

TEST(PrefixIndexTest, AGapAnotherPoolOrAStrangeSnapshotEmptiesItForAResync) {
  const std::vector<BlockHash> chain = Chain(3);
  PrefixIndex index;
  ASSERT_EQ(index.Apply(Snapshot("p1", 5, chain)), PrefixIndex::ApplyResult::kApplied);

  BlockEventBatch gap{.pool_id = "p1", .last_seq = 7};
  gap.events = {Event{7, false, chain[0]}};  // event 6 is missing
  EXPECT_EQ(index.Apply(gap), PrefixIndex::ApplyResult::kResync);
  EXPECT_EQ(index.size(), 0);
  EXPECT_EQ(index.cursor().pool_id, "") << "the next request asks for a snapshot";
  EXPECT_EQ(index.Match(chain), 0);

  ASSERT_EQ(index.Apply(Snapshot("p1", 7, chain)), PrefixIndex::ApplyResult::kApplied);
  // Events of a pool reset since (a new pool id) never apply to the old one.
  BlockEventBatch other{.pool_id = "p2", .last_seq = 1};
  other.events = {Event{1, true, chain[0]}};
  EXPECT_EQ(index.Apply(other), PrefixIndex::ApplyResult::kResync);
  EXPECT_EQ(index.size(), 0);

  // A snapshot with a removal in it is not a snapshot.
  BlockEventBatch bad = Snapshot("p2", 3, chain);
  bad.events[1].stored = false;
  EXPECT_EQ(index.Apply(bad), PrefixIndex::ApplyResult::kResync);
  // A last_seq that disagrees with the events.
  ASSERT_EQ(index.Apply(Snapshot("p2", 3, {})), PrefixIndex::ApplyResult::kApplied);
  BlockEventBatch lying{.pool_id = "p2", .last_seq = 9};
  lying.events = {Event{4, true, chain[0]}};
  EXPECT_EQ(index.Apply(lying), PrefixIndex::ApplyResult::kResync);
  EXPECT_EQ(index.num_resyncs(), 4);
}

TEST(PrefixIndexTest, TheSizeBoundIsAResyncNotGrowth) {
  const std::vector<BlockHash> chain = Chain(6);
  PrefixIndex index(/*max_blocks=*/4);
  EXPECT_EQ(index.Apply(Snapshot("p", 6, chain)), PrefixIndex::ApplyResult::kResync);
  ASSERT_EQ(index.Apply(Snapshot("p", 4, {chain[0], chain[1], chain[2], chain[3]})),
            PrefixIndex::ApplyResult::kApplied);
  BlockEventBatch grow{.pool_id = "p", .last_seq = 5};
  grow.events = {Event{5, true, chain[4]}};
  EXPECT_EQ(index.Apply(grow), PrefixIndex::ApplyResult::kResync);
  EXPECT_LE(index.size(), 4);
}

// A block only the replica's disk tier keeps is still a hit, counted apart; it moves
// between memory and disk with STORED and STORED_ON_DISK events, and leaves with REMOVED.
TEST(PrefixIndexTest, BlocksOnDiskAreHitsCountedApart) {
  const std::vector<BlockHash> chain = Chain(4);
  PrefixIndex index;
  BlockEventBatch snap = Snapshot("p1", 5, {chain[0]});
  snap.events.push_back(Event{5, true, chain[1], /*on_disk=*/true});
  ASSERT_EQ(index.Apply(snap), PrefixIndex::ApplyResult::kApplied);
  int32_t on_disk = -1;
  EXPECT_EQ(index.Match(chain, &on_disk), 2);
  EXPECT_EQ(on_disk, 1);

  BlockEventBatch more{.pool_id = "p1", .last_seq = 8};
  more.events = {Event{6, true, chain[2], /*on_disk=*/true},  // spilled
                 Event{7, true, chain[1]},                     // loaded back into memory
                 Event{8, true, chain[0], /*on_disk=*/true}};  // left memory for disk
  ASSERT_EQ(index.Apply(more), PrefixIndex::ApplyResult::kApplied);
  EXPECT_EQ(index.size(), 3);
  EXPECT_EQ(index.Match(chain, &on_disk), 3);
  EXPECT_EQ(on_disk, 2);

  BlockEventBatch gone{.pool_id = "p1", .last_seq = 9};
  gone.events = {Event{9, false, chain[0]}};
  ASSERT_EQ(index.Apply(gone), PrefixIndex::ApplyResult::kApplied);
  EXPECT_EQ(index.Match(chain, &on_disk), 0);
  EXPECT_EQ(on_disk, 0);
}

}  // namespace
}  // namespace folio::frontend::routing
