#include "services/cachemgr/disk_tier.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/kv_block_file.h"
#include "gtest/gtest.h"

namespace folio::cachemgr {
namespace {

constexpr int32_t kBlockSize = 4;
constexpr uint64_t kNamespace = 0x00c0ffee00c0ffeeULL;

// What a worker rank does with a spill: the file, written in this test's place.
class DiskTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/disk_tier_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    dir_ = KvNamespaceDir(root_, kNamespace);
    ASSERT_EQ(mkdir(dir_.c_str(), 0755), 0);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  std::unique_ptr<DiskTier> Open(int32_t blocks, int32_t ranks = 1) {
    absl::StatusOr<std::unique_ptr<DiskTier>> t = DiskTier::Open(dir_, ranks, kBlockSize, blocks);
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? *std::move(t) : nullptr;
  }
  static std::vector<int32_t> Tokens(int32_t i) { return {i, i + 1, i + 2, i + 3}; }
  static BlockHash Hash(int32_t i) { return HashBlock(kRootBlockHash, Tokens(i)); }
  void Write(int32_t i, int32_t ranks = 1, uint64_t ns = kNamespace) {
    const BlockHash h = Hash(i);
    std::vector<uint8_t> payload(64, static_cast<uint8_t>(i));
    for (int32_t r = 0; r < ranks; ++r) {
      ASSERT_TRUE(WriteKvBlockFile(dir_, KvBlockFileKey{ns, h.hi, h.lo, r, ranks}, Tokens(i),
                                   payload)
                      .ok());
    }
  }
  bool FileExists(int32_t i, int32_t rank = 0) const {
    const BlockHash h = Hash(i);
    return access(absl::StrCat(dir_, "/", KvBlockFileName(h.hi, h.lo, rank)).c_str(), F_OK) == 0;
  }
  int CountFiles() const {
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir_)) n += e.is_regular_file();
    return n;
  }

  std::string root_;
  std::string dir_;
};

TEST_F(DiskTierTest, ADirectoryThatIsNotANamespaceOrIsAbsentIsRefused) {
  EXPECT_FALSE(DiskTier::Open(root_, 1, kBlockSize, 4).ok());
  EXPECT_EQ(DiskTier::Open(KvNamespaceDir(root_, 7), 1, kBlockSize, 4).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(DiskTier::Open(dir_, 1, kBlockSize, 0).ok());
}

TEST_F(DiskTierTest, ASpillIsAHitOnlyOnceConfirmedAndWritten) {
  std::unique_ptr<DiskTier> t = Open(4);
  ASSERT_TRUE(t->Spill(Hash(1), Tokens(1), /*ticket=*/10));
  EXPECT_FALSE(t->Spill(Hash(1), Tokens(1), 11));  // held already
  EXPECT_FALSE(t->Find(Hash(1), Tokens(1)));       // not confirmed: its spill may not have run
  EXPECT_TRUE(t->Contains(Hash(1)));
  t->Confirm(10);
  EXPECT_FALSE(t->Find(Hash(1), Tokens(1)));  // confirmed, but no file (a failed write): missing
  EXPECT_FALSE(t->Contains(Hash(1)));
  EXPECT_EQ(t->Stats().num_missing, 1);
  ASSERT_TRUE(t->Spill(Hash(1), Tokens(1), 12));
  Write(1);
  t->Confirm(12);
  EXPECT_TRUE(t->Peek(Hash(1), Tokens(1)));
  EXPECT_TRUE(t->Find(Hash(1), Tokens(1)));
  EXPECT_FALSE(t->Find(Hash(1), Tokens(2)));  // other tokens under the hash: a miss
  ASSERT_TRUE(t->CheckInvariants().ok());
}

TEST_F(DiskTierTest, BlocksOthersWroteAreAdoptedAndBadOnesRemoved) {
  std::unique_ptr<DiskTier> t = Open(4);
  Write(5);  // another replica's
  EXPECT_TRUE(t->Peek(Hash(5), Tokens(5)));
  EXPECT_FALSE(t->Contains(Hash(5)));  // Peek changes nothing
  EXPECT_TRUE(t->Find(Hash(5), Tokens(5)));
  EXPECT_TRUE(t->Contains(Hash(5)));
  EXPECT_EQ(t->Stats().num_adopted, 1);
  // A file of another model under a hash this tier would look for: removed, a miss.
  Write(6, 1, /*ns=*/kNamespace + 1);
  EXPECT_FALSE(t->Peek(Hash(6), Tokens(6)));
  EXPECT_FALSE(t->Find(Hash(6), Tokens(6)));
  EXPECT_FALSE(FileExists(6));
  EXPECT_EQ(t->Stats().num_bad_files, 1);
  // A header cut short: the same.
  Write(7);
  const BlockHash h7 = Hash(7);
  ASSERT_EQ(truncate(absl::StrCat(dir_, "/", KvBlockFileName(h7.hi, h7.lo, 0)).c_str(), 30), 0);
  EXPECT_FALSE(t->Find(Hash(7), Tokens(7)));
  EXPECT_FALSE(FileExists(7));
  EXPECT_EQ(t->Stats().num_bad_files, 2);
  ASSERT_TRUE(t->CheckInvariants().ok());
}

TEST_F(DiskTierTest, EveryRanksFileMustBeThere) {
  std::unique_ptr<DiskTier> t = Open(4, /*ranks=*/2);
  Write(3, 2);
  EXPECT_TRUE(t->Find(Hash(3), Tokens(3)));
  const BlockHash h = Hash(3);
  ASSERT_EQ(unlink(absl::StrCat(dir_, "/", KvBlockFileName(h.hi, h.lo, 1)).c_str()), 0);
  EXPECT_FALSE(t->Find(Hash(3), Tokens(3)));
  EXPECT_FALSE(t->Contains(Hash(3)));
}

TEST_F(DiskTierTest, OpenIndexesWhatIsThereOldestFirstWithinTheBudget) {
  for (int i = 0; i < 5; ++i) {
    Write(i);
    usleep(20000);  // distinct modification times (file times are coarse)
  }
  std::unique_ptr<DiskTier> t = Open(3);
  EXPECT_EQ(t->Stats().num_used, 3);
  EXPECT_FALSE(FileExists(0));  // the two oldest went
  EXPECT_FALSE(FileExists(1));
  EXPECT_TRUE(t->Find(Hash(4), Tokens(4)));  // its tokens read from the header
  EXPECT_EQ(t->Stats().num_adopted, 0);
  // The least recently used now is block 2: a spill evicts it and removes its file.
  ASSERT_TRUE(t->Spill(Hash(9), Tokens(9), 1));
  EXPECT_FALSE(FileExists(2));
  EXPECT_TRUE(FileExists(3));
  ASSERT_TRUE(t->CheckInvariants().ok());
}

TEST_F(DiskTierTest, AnEntryAnUnconfirmedTransferHoldsIsNeverEvicted) {
  std::unique_ptr<DiskTier> t = Open(2);
  Write(1);
  Write(2);
  ASSERT_TRUE(t->Find(Hash(1), Tokens(1)));
  ASSERT_TRUE(t->Find(Hash(2), Tokens(2)));
  t->NoteLoad(Hash(1), 5);
  t->NoteLoad(Hash(2), 6);
  t->EndLookup();
  EXPECT_FALSE(t->Spill(Hash(3), Tokens(3), 7));  // both held: the spill is skipped
  EXPECT_TRUE(FileExists(1));
  EXPECT_TRUE(FileExists(2));
  t->Confirm(5);
  ASSERT_TRUE(t->Spill(Hash(3), Tokens(3), 7));  // block 1's load ran: it may go
  EXPECT_FALSE(FileExists(1));
  EXPECT_TRUE(FileExists(2));
  ASSERT_TRUE(t->CheckInvariants().ok());
}

// A writer's temporary file left by a worker that died mid-write is removed by the next
// Open once it is old; a young one may still be renamed into place and stays.
TEST_F(DiskTierTest, OpenRemovesStaleTemporaryFilesOnly) {
  const std::string old_tmp = dir_ + "/." + KvBlockFileName(1, 2, 0) + ".tmp.99.1";
  const std::string new_tmp = dir_ + "/." + KvBlockFileName(3, 4, 0) + ".tmp.99.2";
  std::ofstream(old_tmp) << "partial";
  std::ofstream(new_tmp) << "partial";
  const timespec hour_ago[2] = {{time(nullptr) - 3600, 0}, {time(nullptr) - 3600, 0}};
  ASSERT_EQ(utimensat(AT_FDCWD, old_tmp.c_str(), hour_ago, 0), 0);
  std::unique_ptr<DiskTier> t = Open(4);
  EXPECT_NE(access(old_tmp.c_str(), F_OK), 0);
  EXPECT_EQ(access(new_tmp.c_str(), F_OK), 0);
  EXPECT_EQ(t->Stats().num_used, 0);
}

// Routers hear of a block on disk once its file is written: a spill is announced when its
// ticket is confirmed (not when it is decided), an adopted file at once, and a block
// spilled again under a newer ticket only for that one.
TEST_F(DiskTierTest, BlocksAreAnnouncedOnceTheirFilesAreWritten) {
  std::unique_ptr<DiskTier> t = Open(4);
  ASSERT_TRUE(t->Spill(Hash(1), Tokens(1), 10));
  EXPECT_FALSE(t->Announced(Hash(1)));
  EXPECT_TRUE(t->Hashes().empty());
  EXPECT_TRUE(t->TakeAnnounced().empty());
  t->Confirm(10);
  EXPECT_TRUE(t->Announced(Hash(1)));
  EXPECT_EQ(t->TakeAnnounced(), std::vector<BlockHash>{Hash(1)});
  EXPECT_EQ(t->Hashes(), std::vector<BlockHash>{Hash(1)});
  Write(2);
  ASSERT_TRUE(t->Find(Hash(2), Tokens(2)));  // adopted: its file is there
  t->EndLookup();
  EXPECT_EQ(t->TakeAnnounced(), std::vector<BlockHash>{Hash(2)});
  // Block 1's file vanished; the next spill writes it again under ticket 11.
  ASSERT_TRUE(t->Spill(Hash(1), Tokens(1), 11));
  EXPECT_FALSE(t->Announced(Hash(1)));
  t->Confirm(11);
  EXPECT_EQ(t->TakeAnnounced(), std::vector<BlockHash>{Hash(1)});
  EXPECT_TRUE(t->CheckInvariants().ok());
}

// A lookup walks a chain: a hit found first is not evicted to make room for a block the
// same walk adopts later (its load is noted after the walk), whatever the budget.
TEST_F(DiskTierTest, ALookupsOwnAdoptionsNeverEvictItsEarlierHits) {
  std::unique_ptr<DiskTier> t = Open(2);
  Write(1);
  Write(2);
  ASSERT_TRUE(t->Find(Hash(1), Tokens(1)));  // indexed by Open, the LRU's front
  ASSERT_TRUE(t->Find(Hash(2), Tokens(2)));
  Write(3);  // another replica's block, the chain's third
  EXPECT_FALSE(t->Find(Hash(3), Tokens(3)));  // no room: both are this walk's hits
  t->NoteLoad(Hash(1), 1);
  t->NoteLoad(Hash(2), 2);
  t->EndLookup();
  t->Confirm(2);
  ASSERT_TRUE(t->Find(Hash(3), Tokens(3)));  // a later walk: the oldest hit makes room
  EXPECT_FALSE(t->Contains(Hash(1)));
  EXPECT_EQ(t->TakeRemoved(), std::vector<BlockHash>{Hash(1)});
  EXPECT_TRUE(t->CheckInvariants().ok());
}

// A block a worker could not load goes with its files and is never found, adopted or
// spilled again; an entry whose files vanished is written again by the next spill.
TEST_F(DiskTierTest, ABannedBlockIsGoneForGoodAndAVanishedOneIsSpilledAgain) {
  std::unique_ptr<DiskTier> t = Open(4);
  Write(1);
  ASSERT_TRUE(t->Find(Hash(1), Tokens(1)));
  t->EndLookup();
  t->Ban(Hash(1));
  EXPECT_TRUE(FileExists(1));  // kept for replicas that can read it
  EXPECT_FALSE(t->Contains(Hash(1)));
  EXPECT_TRUE(t->TakeRemoved().empty());
  Write(1);  // another replica writes it again
  EXPECT_FALSE(t->Find(Hash(1), Tokens(1)));
  EXPECT_FALSE(t->Peek(Hash(1), Tokens(1)));
  EXPECT_FALSE(t->Spill(Hash(1), Tokens(1), 1));
  EXPECT_EQ(t->Stats().num_banned, 1);

  ASSERT_TRUE(t->Spill(Hash(2), Tokens(2), 2));
  t->Confirm(2);  // the write failed: no file
  EXPECT_TRUE(t->Spill(Hash(2), Tokens(2), 3));  // written again under the new ticket
  EXPECT_FALSE(t->Find(Hash(2), Tokens(2)));     // not confirmed yet
  t->Confirm(3);
  Write(2);
  EXPECT_TRUE(t->Find(Hash(2), Tokens(2)));
  t->EndLookup();
  EXPECT_TRUE(t->CheckInvariants().ok());
}

// Random spills, writes that succeed or fail, confirmations, lookups, foreign writers and
// deletions: the invariants hold after every operation, the index never passes its budget,
// and a hit is always a block whose files hold exactly the tokens asked for.
TEST_F(DiskTierTest, RandomizedOperationsKeepTheInvariantsAndTheBudget) {
  std::mt19937 rng(1234);
  constexpr int32_t kBudget = 6;
  std::unique_ptr<DiskTier> t = Open(kBudget);
  uint64_t ticket = 0;
  std::vector<std::pair<uint64_t, int32_t>> pending;  // spills not yet run: (ticket, block)
  for (int step = 0; step < 3000; ++step) {
    const int32_t i = static_cast<int32_t>(rng() % 16);
    switch (rng() % 6) {
      case 0:
        if (t->Spill(Hash(i), Tokens(i), ++ticket)) pending.emplace_back(ticket, i);
        break;
      case 1: {  // the workers run the pending transfers (some writes fail) and confirm
        for (const auto& [tk, b] : pending) {
          if (rng() % 4 != 0) Write(b);
        }
        pending.clear();
        t->Confirm(ticket);
        break;
      }
      case 2:
        if (t->Find(Hash(i), Tokens(i))) {
          ASSERT_TRUE(FileExists(i));
          t->NoteLoad(Hash(i), ++ticket);
        }
        t->EndLookup();
        break;
      case 3:
        EXPECT_FALSE(t->Find(Hash(i), Tokens(i + 1)));
        t->EndLookup();
        break;
      case 4:
        if (rng() % 3 == 0) Write(i);  // another replica
        break;
      case 5:
        if (rng() % 3 == 0) std::filesystem::remove(dir_ + "/" + KvBlockFileName(Hash(i).hi, Hash(i).lo, 0));
        break;
    }
    ASSERT_TRUE(t->CheckInvariants().ok()) << "step " << step;
    ASSERT_LE(t->Stats().num_used, kBudget);
  }
  EXPECT_GT(t->Stats().num_spills, 0);
  EXPECT_GT(t->Stats().num_evictions, 0);
}

}  // namespace
}  // namespace folio::cachemgr
