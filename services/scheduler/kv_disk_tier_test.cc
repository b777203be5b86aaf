// The disk KV offload tier (issue #50, tier 2) through the scheduler on stories260K: a pool
// and a host tier too small to keep conversations between their turns, a disk tier that
// keeps them, and the streams held token for token against a cluster without any tier
// (stories_fixture.h). The worker's store writes and reads real files; the cache manager's
// index is checked against them.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <utility>

#include "services/scheduler/stories_fixture.h"

namespace folio::scheduler::stories {
namespace {

namespace fs = std::filesystem;

class KvDiskTierTest : public StoriesSchedulerTest {
 protected:
  // Eight conversations of a 70-token prompt each (five blocks of 16 with the output):
  // their second turns come back after the others pushed them out of a 16-block pool
  // and a 10-block host tier (two conversations).
  std::vector<RequestSpec> Round(int round, float temperature) {
    std::vector<RequestSpec> specs;
    for (int c = 0; c < 8; ++c) {
      std::vector<int32_t> prompt = Prompt(70);
      prompt[1] = 3 + c;  // each conversation its own from the second token on
      RequestSpec spec = Spec(prompt, 12, temperature);
      spec.request_id = absl::StrCat("r", round, "c", c);
      specs.push_back(spec);
    }
    return specs;
  }
  std::vector<RequestSpec> Turns(float temperature) {
    std::vector<RequestSpec> specs = Round(0, temperature);
    for (RequestSpec& s : Round(1, temperature)) specs.push_back(s);
    return specs;
  }

  std::vector<fs::path> BlockFiles() const {
    std::vector<fs::path> files;
    for (const fs::directory_entry& e : fs::directory_iterator(disk_->dir())) {
      if (e.path().extension() == ".kv") files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    return files;
  }

  // The cache manager's block events, replayed from the pool's first, describe its tiers
  // as routers must see them: every hash in the pool or host tier as stored, every hash
  // only the disk keeps as stored on disk, nothing else.
  void ExpectEventsDescribeTheTiers() {
    const cachemgr::BlockPool* pool = manager_->prefix_pool();
    ASSERT_NE(pool, nullptr);
    std::optional<std::vector<cachemgr::BlockEvent>> events = pool->events().ReadAfter(0, 1 << 20);
    ASSERT_TRUE(events.has_value());
    std::map<std::pair<uint64_t, uint64_t>, bool> replayed, expected;
    for (const cachemgr::BlockEvent& e : *events) {
      const auto key = std::make_pair(e.hash.hi, e.hash.lo);
      if (e.kind == cachemgr::BlockEvent::Kind::kRemoved) {
        replayed.erase(key);
      } else {
        replayed[key] = e.kind == cachemgr::BlockEvent::Kind::kStoredOnDisk;
      }
    }
    for (const cachemgr::BlockHash& h : manager_->CachedHashes()) expected[{h.hi, h.lo}] = false;
    for (const cachemgr::BlockHash& h : manager_->DiskOnlyHashes()) expected[{h.hi, h.lo}] = true;
    EXPECT_EQ(replayed, expected);
    int on_disk = 0;
    for (const auto& [key, disk] : expected) on_disk += disk ? 1 : 0;
    EXPECT_GT(on_disk, 0);
  }

  static void FlipByte(const fs::path& file, int64_t offset) {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good()) << file;
    f.seekg(offset);
    char c = 0;
    f.read(&c, 1);
    c ^= 0x5a;
    f.seekp(offset);
    f.write(&c, 1);
  }

  static constexpr int32_t kPool = 16;
  static constexpr int32_t kHost = 10;
  static constexpr int32_t kDisk = 64;
};

TEST_F(KvDiskTierTest, BlocksSpilledToDiskComeBackExact) {
  for (const float temperature : {0.0f, 0.8f}) {
    Make(kPool);
    const std::vector<Choices> plain = RunAll(Turns(temperature), /*one_by_one=*/true);
    Make(kPool, 1, {}, kHost, kDisk);
    const std::vector<Choices> tiered = RunAll(Turns(temperature), /*one_by_one=*/true);
    ExpectSame(plain, tiered);
    // Without tiers the second turns found nothing; with them, their four full blocks,
    // which for the oldest conversations only the disk still held.
    for (int i = 8; i < 16; ++i) {
      EXPECT_EQ(plain[i].cached_prompt_tokens, 0) << "request " << i;
      EXPECT_EQ(tiered[i].cached_prompt_tokens, 64) << "request " << i;
    }
    const cachemgr::CacheStats stats = manager_->Stats();
    EXPECT_GT(stats.disk.num_spills, 0);
    EXPECT_GE(stats.disk.num_loads, 4);
    EXPECT_LE(stats.disk.num_used, kDisk);
    EXPECT_EQ(disk_->stats().num_loads, stats.disk.num_loads);
    EXPECT_EQ(disk_->stats().num_spill_failures, 0);
    EXPECT_EQ(static_cast<int64_t>(BlockFiles().size()), stats.disk.num_used);
    ExpectEventsDescribeTheTiers();
    ExpectPoolFull(kPool);
    RestartEverything();
    fs::remove_all(disk_root_);  // the next temperature starts with an empty disk
  }
}

TEST_F(KvDiskTierTest, AFullRestartLoadsThePromptsFromDisk) {
  Make(kPool);
  const std::vector<Choices> plain = RunAll(Turns(0.0f), /*one_by_one=*/true);
  Make(kPool, 1, {}, kHost, kDisk);
  const std::vector<Choices> first = RunAll(Round(0, 0.0f), /*one_by_one=*/true);
  // Every process again, the host tier's segment gone: the index is rebuilt from the
  // files, and every conversation the disk keeps is a hit.
  RestartEverything();
  Make(kPool, 1, {}, kHost, kDisk);
  const int32_t on_disk = disk_tier_->Stats().num_used;
  EXPECT_GT(on_disk, 0);
  const std::vector<Choices> second = RunAll(Round(1, 0.0f), /*one_by_one=*/true);
  int hits = 0;
  for (int c = 0; c < 8; ++c) {
    EXPECT_EQ(second[c].tokens, plain[8 + c].tokens) << "conversation " << c;
    EXPECT_EQ(first[c].tokens, plain[c].tokens) << "conversation " << c;
    hits += second[c].cached_prompt_tokens == 64 ? 1 : 0;
  }
  // The six conversations the host tier had spilled (the last two it still held died
  // with it) come back from disk.
  EXPECT_GE(hits, 6);
  EXPECT_GE(manager_->Stats().disk.num_loads, 6 * 4);
}

TEST_F(KvDiskTierTest, AnotherReplicaSharingTheDirectoryLoadsItsBlocks) {
  Make(kPool);
  const std::vector<Choices> plain = RunAll(Turns(0.0f), /*one_by_one=*/true);
  // Replica B's cache manager indexes the directory before replica A writes anything.
  Make(kPool, 1, {}, kHost, kDisk);
  const std::string dir = disk_->dir();
  std::shared_ptr<cachemgr::DiskTier> b = *cachemgr::DiskTier::Open(dir, 1, 16, kDisk);
  EXPECT_EQ(b->Stats().num_used, 0);
  RunAll(Round(0, 0.0f), /*one_by_one=*/true);  // on replica A
  // Replica B: its own pool and host tier, the shared directory.
  RestartEverything();
  disk_tier_ = b;
  Make(kPool, 1, {}, kHost, kDisk);
  const std::vector<Choices> second = RunAll(Round(1, 0.0f), /*one_by_one=*/true);
  for (int c = 0; c < 8; ++c) {
    EXPECT_EQ(second[c].tokens, plain[8 + c].tokens) << "conversation " << c;
  }
  EXPECT_EQ(second[0].cached_prompt_tokens, 64);  // written by A, never indexed by B
  EXPECT_GE(b->Stats().num_adopted, 4);
  EXPECT_TRUE(b->CheckInvariants().ok());
}

TEST_F(KvDiskTierTest, DamagedCutAndForeignFilesAreMissesAndTheStreamsStayExact) {
  Make(kPool);
  const std::vector<Choices> plain = RunAll(Turns(0.0f), /*one_by_one=*/true);
  Make(kPool, 1, {}, kHost, kDisk);
  const std::vector<RequestSpec> first = Round(0, 0.0f);
  RunAll(first, /*one_by_one=*/true);
  // The first block of conversations 0-3 (all four on disk only: the host tier keeps the
  // last two conversations) gets a flipped header byte, a cut, another block's file under
  // its name, and a file of another model's namespace. The cache manager reads each
  // header at its lookup and removes the file; the worker never sees one.
  std::vector<fs::path> files;
  for (int c = 0; c < 4; ++c) {
    const auto tokens = absl::MakeConstSpan(first[c].prompt).subspan(0, 16);
    const cachemgr::BlockHash h = cachemgr::HashBlock(cachemgr::kRootBlockHash, tokens);
    files.push_back(fs::path(disk_->dir()) / KvBlockFileName(h.hi, h.lo, 0));
    ASSERT_TRUE(fs::exists(files.back())) << files.back();
  }
  const uintmax_t whole = fs::file_size(files[0]);
  FlipByte(files[0], 20);
  fs::resize_file(files[1], whole / 2);
  fs::copy_file(files[3], files[2], fs::copy_options::overwrite_existing);
  {
    std::unique_ptr<worker::KvDiskStore> other = *worker::KvDiskStore::Open(
        worker::KvDiskStoreOptions{.root = disk_root_,
                                   .budget_bytes = int64_t{1} << 30,
                                   .identity = "another model",
                                   .block_size = 16,
                                   .bytes_per_block = disk_->bytes_per_block()});
    uint64_t hi = 0, lo = 0;
    ASSERT_TRUE(ParseKvBlockFileName(files[3].filename().string(), &hi, &lo));
    const std::vector<uint8_t> payload(static_cast<size_t>(disk_->bytes_per_block()), 7);
    other->Spill(hi, lo, absl::MakeConstSpan(first[3].prompt).subspan(0, 16), payload.data());
    ASSERT_EQ(other->stats().num_spills, 1);
    fs::copy_file(fs::path(other->dir()) / files[3].filename(), files[3],
                  fs::copy_options::overwrite_existing);
  }
  const int64_t bad_before = disk_tier_->Stats().num_bad_files;
  const std::vector<Choices> second = RunAll(Round(1, 0.0f), /*one_by_one=*/true);
  for (int c = 0; c < 8; ++c) {
    EXPECT_EQ(second[c].tokens, plain[8 + c].tokens) << "conversation " << c;
    if (c < 4) {
      EXPECT_EQ(second[c].cached_prompt_tokens, 0) << "conversation " << c;
    }
  }
  EXPECT_EQ(second[4].cached_prompt_tokens, 64);  // its files were left alone
  EXPECT_EQ(disk_tier_->Stats().num_bad_files - bad_before, 4);
  for (const fs::path& f : files) {
    // Removed, or written again whole by the recompute's spill.
    if (fs::exists(f)) {
      EXPECT_EQ(fs::file_size(f), whole) << f;
    }
  }
  EXPECT_EQ(disk_->stats().num_load_failures, 0);  // none reached the worker
  ExpectPoolFull(kPool);
}

TEST_F(KvDiskTierTest, AnUnwritableDirectoryStopsSpillsAndRequestsGoOn) {
  Make(kPool);
  const std::vector<Choices> plain = RunAll(Turns(0.8f), /*one_by_one=*/true);
  Make(kPool, 1, {}, kHost, kDisk);
  // The directory is gone and a file stands in its place: every write fails (as on a
  // full or read-only disk, whoever runs the test).
  const std::string dir = disk_->dir();
  fs::remove_all(dir);
  std::ofstream(dir) << "not a directory";
  const std::vector<Choices> tiered = RunAll(Turns(0.8f), /*one_by_one=*/true);
  ExpectSame(plain, tiered);
  EXPECT_EQ(disk_->stats().num_spill_failures, 1);  // logged once, then writes stop
  EXPECT_TRUE(disk_->stats().writes_disabled);
  EXPECT_EQ(disk_->stats().num_spills, 0);
  EXPECT_EQ(manager_->Stats().disk.num_loads, 0);
  EXPECT_GT(manager_->Stats().disk.num_missing, 0);  // the index's entries were misses
  ExpectPoolFull(kPool);
  fs::remove(dir);
}

// A disk load that fails does not stop the step (every tensor-parallel rank must reach the
// same collectives): its block is zeroed, the rest runs, and the step is refused at its
// end, DATA_LOSS naming the blocks for the cache manager to drop.
TEST_F(KvDiskTierTest, AFailedLoadRunsTheStepAndRefusesItNamingTheBlock) {
  Make(kPool, 1, {}, kHost, kDisk);
  auto& runner = static_cast<worker::CpuModelRunner&>(*runner_);
  const int64_t bytes = disk_->bytes_per_block();
  std::vector<uint8_t> payload(static_cast<size_t>(bytes));
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i * 7 + 1);
  const std::vector<int32_t> tokens(16, 9);
  disk_->Spill(1, 2, tokens, payload.data());
  ASSERT_EQ(disk_->stats().num_spills, 1);
  using Kind = worker::HostTransfer::Kind;
  worker::StepInput step;
  step.host_transfers = {
      worker::HostTransfer{.kind = Kind::kLoadDisk, .block = 3, .hash_hi = 1, .hash_lo = 2},
      worker::HostTransfer{.kind = Kind::kLoadDisk, .block = 4, .hash_hi = 5, .hash_lo = 6}};
  worker::SequenceStep seq;
  seq.token_ids = Prompt(20);
  seq.block_table = {0, 1};
  step.seqs.push_back(seq);
  const absl::StatusOr<worker::StepOutput> out = runner.Execute(step);
  ASSERT_EQ(out.status().code(), absl::StatusCode::kDataLoss) << out.status();
  EXPECT_EQ(KvDiskBlocksOf(out.status()),
            (std::vector<std::pair<uint64_t, uint64_t>>{{5, 6}}));
  std::vector<uint8_t> got(static_cast<size_t>(bytes));
  runner.kv_cache().CopyBlockOut(3, got.data());
  EXPECT_EQ(got, payload);  // the good load ran
  runner.kv_cache().CopyBlockOut(4, got.data());
  EXPECT_EQ(got, std::vector<uint8_t>(got.size(), 0));  // the failed one holds zeros
  EXPECT_EQ(disk_->stats().num_load_failures, 1);
}

}  // namespace
}  // namespace folio::scheduler::stories
