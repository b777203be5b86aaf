// Window layer groups (paged_policy.h, "Window layer groups"): blocks a sliding window no
// longer reaches go back to the pool at the token counts the window says, others reuse
// them, a long windowed sequence runs in a pool its dense form could never fit, prefix
// hits attach the window blocks they need (and only as far as those are cached), and bad
// configurations are refused by name.
#include <algorithm>
#include <iostream>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/cachemgr/kv_cache_manager.h"
#include "services/cachemgr/test_tokens.h"

namespace folio::cachemgr {
namespace {

using ::testing::HasSubstr;

class WindowGroupsTest : public ::testing::Test {
 protected:
  void Make(int32_t blocks, std::vector<int32_t> windows, int32_t block_size = 4) {
    absl::StatusOr<std::unique_ptr<KvCacheManager>> mgr = KvCacheManager::Create(
        CacheConfig{.policy = PolicyKind::kPaged, .num_blocks = blocks,
                    .block_size = block_size, .windows = std::move(windows)});
    ASSERT_TRUE(mgr.ok()) << mgr.status();
    mgr_ = *std::move(mgr);
  }
  StepResponse MustStep(const StepRequest& req) {
    absl::StatusOr<StepResponse> resp = mgr_->Step(req);
    EXPECT_TRUE(resp.ok()) << resp.status();
    EXPECT_TRUE(mgr_->CheckInvariants().ok()) << mgr_->CheckInvariants();
    return resp.ok() ? *resp : StepResponse{};
  }
  SeqResult Create(uint64_t id, std::vector<int32_t> prompt, int32_t max_len = 256) {
    StepRequest req;
    req.creates.push_back(CreateOp{.seq = SeqId{id}, .max_len = max_len, .prompt = prompt});
    return MustStep(req).creates.at(0);
  }
  // Grants `tokens` after what the sequence has, committing what it had first.
  SeqResult CommitAndGrant(uint64_t id, std::vector<int32_t> tokens) {
    const Sequence* seq = mgr_->Find(SeqId{id});
    StepRequest req;
    req.commits.push_back(CommitOp{SeqId{id}, seq->num_tokens()});
    req.grants.push_back(GrantOp{.seq = SeqId{id}, .start_pos = seq->num_tokens(),
                                 .token_ids = std::move(tokens)});
    return MustStep(req).grants.at(0);
  }
  void CommitAll(uint64_t id) {
    StepRequest req;
    req.commits.push_back(CommitOp{SeqId{id}, mgr_->Find(SeqId{id})->num_tokens()});
    MustStep(req);
  }
  void Free(uint64_t id) {
    StepRequest req;
    req.frees.push_back(SeqId{id});
    MustStep(req);
  }

  std::unique_ptr<KvCacheManager> mgr_;
};

// Window 8, blocks of 4: with c tokens computed the next query sees c - 7 .. c, so the
// group needs blocks from (c - 7) / 4 on. Grants one token at a time, committing each.
TEST_F(WindowGroupsTest, BlocksGoBackAtTheTokenCountsTheWindowSays) {
  Make(64, {8});
  Create(1, {});
  const std::vector<int32_t> tokens = Iota(40);
  for (int32_t c = 0; c < 40; ++c) {
    const SeqResult r = CommitAndGrant(1, {tokens[c]});
    ASSERT_EQ(r.status, SeqStatus::kOk);
    const int32_t first_needed = std::max(0, c - 7) / 4;  // c tokens were computed
    ASSERT_EQ(r.windows.size(), 1u);
    EXPECT_EQ(r.windows[0].first_block, first_needed) << "after " << c << " computed";
    const Sequence* seq = mgr_->Find(SeqId{1});
    EXPECT_EQ(seq->windows[0].first_block, first_needed);
    // The full-attention table keeps every block.
    EXPECT_EQ(seq->table.size(), static_cast<size_t>(c / 4 + 1));
    EXPECT_EQ(mgr_->Stats().pool.num_blocks_used,
              static_cast<int32_t>(seq->table.size() + seq->windows[0].blocks.size()));
  }
  // 40 tokens: 10 full-attention blocks; the window group holds blocks 8 and 9 only
  // ((39 - 7) / 4 = 8), and gave back 8.
  EXPECT_EQ(mgr_->Stats().pool.num_blocks_used, 12);
  EXPECT_EQ(mgr_->Stats().pool.num_window_releases, 8);
  Free(1);
  EXPECT_EQ(mgr_->Stats().pool.num_blocks_free, 64);
}

// Gemma 3's shape: five local groups per global one. In a pool of 40 blocks a dense
// model (six full tables) holds at most 26 tokens; the windowed sequence runs to 100 (25
// full-attention blocks, and one per group: with 99 computed the next query sees 96 ..
// 99), while another sequence took blocks its groups gave back for the first half.
TEST_F(WindowGroupsTest, ALongSequenceRunsInAPoolItsDenseFormCouldNotHold) {
  Make(40, {4, 4, 4, 4, 4});
  Create(1, {});
  Create(2, {});
  const std::vector<int32_t> tokens = Iota(100);
  for (int32_t c = 0; c < 100; ++c) {
    ASSERT_EQ(CommitAndGrant(1, {tokens[c]}).status, SeqStatus::kOk) << "token " << c;
    if (c < 48 && c % 4 == 3) {
      ASSERT_EQ(CommitAndGrant(2, {tokens[c]}).status, SeqStatus::kOk) << "token " << c;
    }
    if (c == 48) Free(2);
  }
  EXPECT_EQ(mgr_->Find(SeqId{1})->num_tokens(), 100);
  EXPECT_EQ(mgr_->Stats().pool.num_blocks_used, 25 + 5);
  EXPECT_EQ(mgr_->Stats().pool.num_window_releases, 5 * 24 + 5 * 2);  // and sequence 2's
  EXPECT_LE(mgr_->Stats().num_blocks_used_peak, 40);
}

// A grant that does not fit releases nothing: the sequence is left as it was.
TEST_F(WindowGroupsTest, NoRoomReleasesNothing) {
  Make(6, {4});
  Create(1, {});
  const std::vector<int32_t> tokens = Iota(16);
  ASSERT_EQ(CommitAndGrant(1, std::vector<int32_t>(tokens.begin(), tokens.begin() + 12)).status,
            SeqStatus::kOk);  // 3 + 3 blocks: the pool is full
  const SeqResult r = CommitAndGrant(1, {1, 2, 3, 4, 5});  // 2 + 2 more; only 2 come back
  EXPECT_EQ(r.status, SeqStatus::kNoRoom);
  EXPECT_TRUE(r.windows.empty());
  EXPECT_EQ(mgr_->Find(SeqId{1})->windows[0].first_block, 0);
  EXPECT_EQ(mgr_->Stats().pool.num_window_releases, 0);
  // One block fits: blocks 0 and 1 of the window go back ((12 - 3) / 4 = 2), 2 come in.
  const SeqResult ok = CommitAndGrant(1, {1, 2, 3, 4});
  ASSERT_EQ(ok.status, SeqStatus::kOk);
  EXPECT_EQ(ok.windows[0].first_block, 2);
  EXPECT_EQ(ok.windows[0].table_offset, 3);
  EXPECT_EQ(ok.windows[0].entries.size(), 1u);
}

// A prefix hit attaches the window blocks its next query needs; once those are evicted
// the hit is cut back to where they are still cached, though the full-attention blocks
// are all there.
TEST_F(WindowGroupsTest, PrefixHitsNeedTheWindowsBlocks) {
  Make(16, {4});
  Create(1, {});
  const std::vector<int32_t> prompt = Iota(33);
  for (int32_t c = 0; c < 32; ++c) ASSERT_EQ(CommitAndGrant(1, {prompt[c]}).status, SeqStatus::kOk);
  CommitAll(1);
  Free(1);
  // 32 cached tokens: the next query (position 32) sees 29 .. 32, in window block 7.
  EXPECT_EQ(mgr_->CountCachedTokens(prompt), 32);
  const SeqResult hit = Create(2, prompt);
  EXPECT_EQ(hit.num_cached_tokens, 32);
  EXPECT_EQ(hit.entries.size(), 8u);
  ASSERT_EQ(hit.windows.size(), 1u);
  EXPECT_EQ(hit.windows[0].first_block, 7);
  EXPECT_EQ(hit.windows[0].entries.size(), 1u);
  Free(2);
  // Routers see the full-attention blocks only.
  EXPECT_EQ(mgr_->CachedHashes().size(), 8u);

  // Sequence 3 takes blocks until the window's block 7 is evicted. The free queue held
  // the window blocks released on the way (0 .. 6) first, then block 7, then the
  // full-attention blocks: once 7 goes no shorter hit is left either (a hit of k blocks
  // needs block k - 1), though the full-attention blocks are all still cached.
  Create(3, {});
  int32_t cached = 32;
  for (int32_t i = 0; cached == 32 && i < 40; ++i) {
    ASSERT_EQ(CommitAndGrant(3, {7}).status, SeqStatus::kOk);
    cached = mgr_->CountCachedTokens(prompt);
  }
  EXPECT_EQ(cached, 0);
  const std::vector<BlockHash> routed = mgr_->CachedHashes();
  for (const BlockHash& h : HashFullBlocks(prompt, 4, 8)) {
    EXPECT_NE(std::find(routed.begin(), routed.end(), h), routed.end());
  }
  const SeqResult miss = Create(4, prompt);
  EXPECT_EQ(miss.num_cached_tokens, 0);
  EXPECT_TRUE(miss.entries.empty());
}

TEST_F(WindowGroupsTest, ForksShareWindowBlocksAndCopyOnWrite) {
  Make(32, {4});
  Create(1, {});
  const std::vector<int32_t> tokens = Iota(10);
  for (int32_t t : tokens) ASSERT_EQ(CommitAndGrant(1, {t}).status, SeqStatus::kOk);
  StepRequest fork;
  fork.forks.push_back(ForkOp{SeqId{1}, SeqId{2}});
  const SeqResult f = MustStep(fork).forks.at(0);
  ASSERT_EQ(f.windows.size(), 1u);
  EXPECT_EQ(f.windows[0].entries, mgr_->Find(SeqId{1})->windows[0].blocks);
  // The child writes on: the shared partial last block is copied in both tables.
  const SeqResult g = CommitAndGrant(2, {5});
  EXPECT_EQ(g.copies.size(), 2u);
  EXPECT_NE(mgr_->Find(SeqId{2})->windows[0].blocks.back(),
            mgr_->Find(SeqId{1})->windows[0].blocks.back());
}

// Gemma 3 1B's shape: 26 layers, 4 global and 22 local with a window of 512, one KV head
// of 256, f16. A dense block of 16 tokens holds 2 * 26 * 16 * 256 * 2 = 425,984 bytes; in
// window groups a block is a page of 4 layers (65,536 bytes) and the locals fill 6 groups.
// One sequence prefills 8,192 tokens in chunks of 512, then decodes 64: the KV it holds
// then, and at its peak (a 512-token chunk's window blocks), against the dense pool's.
TEST_F(WindowGroupsTest, ALongGemma3ContextHoldsAFifthOfTheDenseKv) {
  constexpr int64_t kDenseBlockBytes = 2 * 26 * 16 * 256 * 2;
  constexpr int64_t kPageBytes = 2 * 4 * 16 * 256 * 2;
  Make(8192, std::vector<int32_t>(6, 512), 16);
  Create(1, {}, 8192 + 64);
  const std::vector<int32_t> tokens = Iota(8192 + 64);
  for (int32_t at = 0; at < 8192; at += 512) {
    ASSERT_EQ(CommitAndGrant(1, std::vector<int32_t>(tokens.begin() + at,
                                                     tokens.begin() + at + 512)).status,
              SeqStatus::kOk);
  }
  for (int32_t at = 8192; at < 8192 + 64; ++at) {
    ASSERT_EQ(CommitAndGrant(1, {tokens[at]}).status, SeqStatus::kOk);
  }
  const int64_t dense_bytes = int64_t{(8192 + 64) / 16} * kDenseBlockBytes;
  const int64_t held_bytes = mgr_->Stats().pool.num_blocks_used * kPageBytes;
  const int64_t peak_bytes = mgr_->Stats().num_blocks_used_peak * kPageBytes;
  std::cout << "8,256 tokens of Gemma 3 1B: dense " << dense_bytes << " bytes ("
            << dense_bytes / (8192 + 64) << " a token); window groups " << held_bytes
            << " bytes (" << held_bytes / (8192 + 64) << " a token), " << peak_bytes
            << " at the peak\n";
  // 516 full-attention blocks, and per group the blocks from that of position 8,255 - 511
  // (block 484) on: 32.
  EXPECT_EQ(mgr_->Stats().pool.num_blocks_used, 516 + 6 * 32);
  EXPECT_LT(held_bytes * 4, dense_bytes);
  EXPECT_LT(peak_bytes * 3, dense_bytes);
}

TEST_F(WindowGroupsTest, BadConfigurationsAreRefusedByName) {
  auto refused = [](CacheConfig c, bool with_host, const std::string& text) {
    const absl::Status s = KvCacheManager::CheckConfig(c, with_host);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(s.message(), HasSubstr(text));
  };
  refused({.num_blocks = 8, .windows = {0}}, false, "window layer group 0");
  refused({.num_blocks = 8, .windows = {4, -2}}, false, "window layer group 1");
  refused({.policy = PolicyKind::kContiguous, .num_blocks = 8, .windows = {4}}, false,
          "paged policy");
  refused({.num_blocks = 8, .windows = {4}}, true, "host KV tier");
  refused({.num_blocks = 8, .windows = std::vector<int32_t>(65, 4)}, false, "at most 64");
  EXPECT_TRUE(KvCacheManager::CheckConfig({.num_blocks = 8, .windows = {4}}, false).ok());
}

}  // namespace
}  // namespace folio::cachemgr
