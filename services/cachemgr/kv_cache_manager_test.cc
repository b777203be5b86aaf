#include "services/cachemgr/kv_cache_manager.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/cachemgr/test_tokens.h"

namespace folio::cachemgr {
namespace {

using ::testing::HasSubstr;

class PagedTest : public ::testing::Test {
 protected:
  void Make(int32_t blocks, int32_t block_size) {
    mgr_ = *KvCacheManager::Create(
        CacheConfig{.policy = PolicyKind::kPaged, .num_blocks = blocks, .block_size = block_size});
  }
  void SetUp() override { Make(8, 4); }

  StepResponse MustStep(const StepRequest& req) {
    auto resp = mgr_->Step(req);
    EXPECT_TRUE(resp.ok()) << resp.status();
    EXPECT_TRUE(mgr_->CheckInvariants().ok()) << mgr_->CheckInvariants();
    return resp.ok() ? *resp : StepResponse{};
  }
  void CreateAndGrant(uint64_t id, const std::vector<int32_t>& prompt, int32_t max_len = 64) {
    StepRequest req;
    req.creates.push_back(CreateOp{.seq = SeqId{id}, .max_len = max_len});
    req.grants.push_back(GrantOp{.seq = SeqId{id}, .start_pos = 0, .token_ids = prompt});
    MustStep(req);
  }
  SeqResult Grant(uint64_t id, std::vector<int32_t> tokens) {
    StepRequest req;
    req.grants.push_back(GrantOp{.seq = SeqId{id},
                                 .start_pos = mgr_->Find(SeqId{id})->num_tokens(),
                                 .token_ids = std::move(tokens)});
    return MustStep(req).grants.at(0);
  }
  void Commit(uint64_t id) {
    StepRequest req;
    req.commits.push_back(CommitOp{SeqId{id}, mgr_->Find(SeqId{id})->num_tokens()});
    MustStep(req);
  }
  void Free(uint64_t id) {
    StepRequest req;
    req.frees.push_back(SeqId{id});
    MustStep(req);
  }
  // Expects `req` to fail with `code` and a message containing `text`, changing nothing.
  void ExpectRejected(const StepRequest& req, absl::StatusCode code, const std::string& text) {
    const CacheStats before = mgr_->Stats();
    auto resp = mgr_->Step(req);
    ASSERT_FALSE(resp.ok());
    EXPECT_EQ(resp.status().code(), code) << resp.status();
    EXPECT_THAT(std::string(resp.status().message()), HasSubstr(text));
    const CacheStats after = mgr_->Stats();
    EXPECT_EQ(after.pool.num_blocks_free, before.pool.num_blocks_free);
    EXPECT_EQ(after.num_sequences, before.num_sequences);
    EXPECT_EQ(after.pool.num_tokens_stored, before.pool.num_tokens_stored);
    EXPECT_TRUE(mgr_->CheckInvariants().ok());
  }

  std::unique_ptr<KvCacheManager> mgr_;
};

TEST_F(PagedTest, BlocksArriveOnlyWhenTheLastIsFull) {
  CreateAndGrant(1, Iota(3));
  EXPECT_EQ(mgr_->Stats().pool.num_blocks_used, 1);
  SeqResult r = Grant(1, {7});
  EXPECT_TRUE(r.entries.empty()) << "the fourth token fits the first block";
  EXPECT_EQ(mgr_->Stats().pool.num_blocks_used, 1);
  r = Grant(1, {8});
  EXPECT_EQ(r.table_offset, 1);
  ASSERT_EQ(r.entries.size(), 1u);
  EXPECT_EQ(mgr_->Stats().pool.num_blocks_used, 2);
  EXPECT_EQ(mgr_->Stats().pool.num_tokens_stored, 5);
  EXPECT_EQ(mgr_->Stats().pool.num_slots_allocated, 8);
}

TEST_F(PagedTest, NoRoomLeavesTheSequenceAsItWas) {
  Make(2, 4);
  CreateAndGrant(1, Iota(6));
  StepRequest req;
  req.grants.push_back(GrantOp{.seq = SeqId{1}, .start_pos = 6, .token_ids = Iota(5)});
  SeqResult r = MustStep(req).grants.at(0);
  EXPECT_EQ(r.status, SeqStatus::kNoRoom);
  EXPECT_EQ(mgr_->Find(SeqId{1})->num_tokens(), 6);
  EXPECT_EQ(mgr_->Find(SeqId{1})->table.size(), 2u);
  EXPECT_EQ(mgr_->Stats().num_grant_failures, 1);
}

TEST_F(PagedTest, ForkSharesAndCopiesOnWrite) {
  CreateAndGrant(1, Iota(6));  // blocks: [full][2 of 4]
  StepRequest fork;
  fork.forks.push_back(ForkOp{SeqId{1}, SeqId{2}});
  SeqResult f = MustStep(fork).forks.at(0);
  EXPECT_EQ(f.entries, mgr_->Find(SeqId{1})->table);
  EXPECT_EQ(mgr_->Stats().pool.num_blocks_used, 2);
  EXPECT_EQ(mgr_->Stats().num_forks, 1);
  EXPECT_EQ(mgr_->Stats().pool.num_shared_refs, 2) << "both blocks held twice";

  const BlockId shared_last = mgr_->Find(SeqId{1})->table[1];
  SeqResult child = Grant(2, {50});
  ASSERT_EQ(child.copies.size(), 1u);
  EXPECT_EQ(child.copies[0].src, shared_last);
  EXPECT_EQ(child.table_offset, 1);
  EXPECT_EQ(child.entries.at(0), child.copies[0].dst);
  EXPECT_EQ(mgr_->Stats().num_cow_copies, 1);

  // The parent is now the only holder: it writes in place.
  SeqResult parent = Grant(1, {60});
  EXPECT_TRUE(parent.copies.empty());
  EXPECT_TRUE(parent.entries.empty());
  EXPECT_EQ(mgr_->Find(SeqId{1})->table[1], shared_last);
  EXPECT_EQ(mgr_->Stats().pool.num_blocks_used, 3);
  EXPECT_EQ(mgr_->Stats().pool.num_shared_refs, 1) << "only the full first block is shared";
  EXPECT_EQ(mgr_->Stats().num_blocks_used_peak, 3);
  Free(1);
  Free(2);
  EXPECT_EQ(mgr_->Stats().pool.num_shared_refs, 0);
  EXPECT_EQ(mgr_->Stats().num_blocks_used_peak, 3) << "the peak stays";
}

TEST_F(PagedTest, ForkOfFullLastBlockNeedsNoCopy) {
  CreateAndGrant(1, Iota(4));
  StepRequest fork;
  fork.forks.push_back(ForkOp{SeqId{1}, SeqId{2}});
  MustStep(fork);
  SeqResult r = Grant(2, {9});
  EXPECT_TRUE(r.copies.empty());
  EXPECT_EQ(r.table_offset, 1);
}

TEST_F(PagedTest, FreeReturnsEveryBlock) {
  CreateAndGrant(1, Iota(9));
  StepRequest fork;
  fork.forks.push_back(ForkOp{SeqId{1}, SeqId{2}});
  MustStep(fork);
  Grant(2, {1, 2, 3, 4});
  Free(1);
  Free(2);
  EXPECT_EQ(mgr_->Stats().pool.num_blocks_free, 8);
  EXPECT_EQ(mgr_->Stats().num_sequences, 0);
  EXPECT_EQ(mgr_->Stats().pool.num_tokens_stored, 0);
}

TEST_F(PagedTest, PrefixCacheAttachesComputedFullBlocks) {
  const std::vector<int32_t> prompt = Iota(10);  // two full blocks and a partial one
  CreateAndGrant(1, prompt);
  // Nothing is cached before the KV is reported computed.
  StepRequest early;
  early.creates.push_back(CreateOp{.seq = SeqId{2}, .max_len = 64, .prompt = prompt});
  EXPECT_EQ(MustStep(early).creates.at(0).num_cached_tokens, 0);
  Free(2);

  Commit(1);
  StepRequest req;
  req.creates.push_back(CreateOp{.seq = SeqId{3}, .max_len = 64, .prompt = prompt});
  req.grants.push_back(GrantOp{.seq = SeqId{3}, .start_pos = 8, .token_ids = {108, 109}});
  StepResponse resp = MustStep(req);
  EXPECT_EQ(resp.creates.at(0).num_cached_tokens, 8);
  const Sequence* a = mgr_->Find(SeqId{1});
  const Sequence* b = mgr_->Find(SeqId{3});
  EXPECT_EQ(b->table[0], a->table[0]);
  EXPECT_EQ(b->table[1], a->table[1]);
  EXPECT_NE(b->table[2], a->table[2]);
  const CacheStats stats = mgr_->Stats();
  EXPECT_EQ(stats.prefix_query_tokens, 20);
  EXPECT_EQ(stats.prefix_hit_tokens, 8);
}

TEST_F(PagedTest, PrefixLookupNeverCoversTheLastPromptToken) {
  const std::vector<int32_t> prompt = Iota(8);  // exactly two blocks
  CreateAndGrant(1, prompt);
  Commit(1);
  StepRequest req;
  req.creates.push_back(CreateOp{.seq = SeqId{2}, .max_len = 64, .prompt = prompt});
  EXPECT_EQ(MustStep(req).creates.at(0).num_cached_tokens, 4);
}

TEST_F(PagedTest, FreedCachedBlocksAreReusedThenEvictedInLruOrder) {
  Make(4, 4);
  const std::vector<int32_t> prompt = Iota(9);
  CreateAndGrant(1, prompt);
  Commit(1);
  Free(1);
  EXPECT_EQ(mgr_->Stats().pool.num_blocks_cached_evictable, 2);
  EXPECT_EQ(mgr_->Stats().pool.num_blocks_free, 4);

  StepRequest again;
  again.creates.push_back(CreateOp{.seq = SeqId{2}, .max_len = 64, .prompt = prompt});
  EXPECT_EQ(MustStep(again).creates.at(0).num_cached_tokens, 8);
  Free(2);

  // Filling the pool with other content evicts the cached blocks.
  CreateAndGrant(3, Iota(16, 500));
  EXPECT_EQ(mgr_->Stats().pool.num_blocks_cached_evictable, 0);
  EXPECT_EQ(mgr_->Stats().pool.num_evictions, 2);
  Free(3);
  StepRequest miss;
  miss.creates.push_back(CreateOp{.seq = SeqId{4}, .max_len = 64, .prompt = prompt});
  EXPECT_EQ(MustStep(miss).creates.at(0).num_cached_tokens, 0);
}

TEST_F(PagedTest, PrefixCachingCanBeDisabled) {
  mgr_ = *KvCacheManager::Create(CacheConfig{
      .num_blocks = 8, .block_size = 4, .prefix_caching = PagedPolicy::PrefixCaching::kDisabled});
  CreateAndGrant(1, Iota(10));
  Commit(1);
  StepRequest req;
  req.creates.push_back(CreateOp{.seq = SeqId{2}, .max_len = 64, .prompt = Iota(10)});
  EXPECT_EQ(MustStep(req).creates.at(0).num_cached_tokens, 0);
}

TEST_F(PagedTest, OrderWithinOneRequestIsFreesForksCreatesGrants) {
  CreateAndGrant(1, Iota(4));
  StepRequest req;
  req.frees.push_back(SeqId{1});
  req.creates.push_back(CreateOp{.seq = SeqId{1}, .max_len = 8});  // id reusable after free
  req.grants.push_back(GrantOp{.seq = SeqId{1}, .start_pos = 0, .token_ids = {3}});
  StepResponse resp = MustStep(req);
  EXPECT_EQ(resp.grants.at(0).status, SeqStatus::kOk);
  EXPECT_EQ(mgr_->Find(SeqId{1})->num_tokens(), 1);
}

// A pipelined step grants the slot of a token still being sampled: the token is pending
// until resolved, a commit may not cover it before, and the prefix cache hashes the
// resolved id, never the placeholder.
TEST_F(PagedTest, PendingTokensAreResolvedBeforeTheyAreCommitted) {
  CreateAndGrant(1, Iota(7));
  Grant(1, {kPendingToken});  // position 7 ends block 1
  EXPECT_EQ(mgr_->Find(SeqId{1})->pending, std::vector<int32_t>{7});
  {
    StepRequest r;
    r.commits.push_back(CommitOp{SeqId{1}, 8});
    ExpectRejected(r, absl::StatusCode::kInvalidArgument,
                   "position 7 still holds a pending token");
  }
  {
    StepRequest r;
    r.resolves.push_back(ResolveOp{SeqId{1}, 6, 5});
    ExpectRejected(r, absl::StatusCode::kInvalidArgument, "no pending token at position 6");
  }
  {
    StepRequest r;
    r.resolves.push_back(ResolveOp{SeqId{1}, 7, 5});
    r.resolves.push_back(ResolveOp{SeqId{1}, 7, 5});
    ExpectRejected(r, absl::StatusCode::kInvalidArgument, "appears twice");
  }
  {
    StepRequest r;
    r.resolves.push_back(ResolveOp{SeqId{1}, 7, -3});
    ExpectRejected(r, absl::StatusCode::kInvalidArgument, "negative");
  }
  {
    StepRequest r;
    r.resolves.push_back(ResolveOp{SeqId{4}, 7, 1});
    ExpectRejected(r, absl::StatusCode::kNotFound, "resolve: sequence 4 is unknown");
  }
  // A fork carries the pending token with it; each sequence resolves its own.
  StepRequest fork;
  fork.forks.push_back(ForkOp{SeqId{1}, SeqId{2}});
  MustStep(fork);
  EXPECT_EQ(mgr_->Find(SeqId{2})->pending, std::vector<int32_t>{7});
  Free(2);
  // Commit up to the pending token is fine; with its resolve in the same request, past it.
  StepRequest part;
  part.commits.push_back(CommitOp{SeqId{1}, 7});
  MustStep(part);
  StepRequest whole;
  whole.resolves.push_back(ResolveOp{SeqId{1}, 7, 107});
  whole.commits.push_back(CommitOp{SeqId{1}, 8});
  MustStep(whole);
  EXPECT_TRUE(mgr_->Find(SeqId{1})->pending.empty());
  EXPECT_EQ(mgr_->Find(SeqId{1})->tokens, Iota(8));
  // Both blocks are cached under their resolved content.
  StepRequest lookup;
  std::vector<int32_t> prompt = Iota(9);
  lookup.creates.push_back(CreateOp{.seq = SeqId{3}, .max_len = 64, .prompt = prompt});
  EXPECT_EQ(MustStep(lookup).creates.at(0).num_cached_tokens, 8);
}

TEST_F(PagedTest, TruncateGivesRejectedTokensBlocksBack) {
  CreateAndGrant(1, Iota(6));  // blocks 0, 1 (2 tokens)
  Commit(1);
  // A verification step: the last sampled token plus 5 proposals, 6 .. 11 -> 3 blocks.
  Grant(1, Iota(6, 200));
  EXPECT_EQ(mgr_->Stats().pool.num_blocks_used, 3);
  // Two proposals accepted: 6 (the input) + 2 computed and kept, the rest cut.
  StepRequest r;
  r.commits.push_back(CommitOp{SeqId{1}, 9});
  r.truncates.push_back(TruncateOp{SeqId{1}, 9});
  MustStep(r);
  const Sequence* seq = mgr_->Find(SeqId{1});
  EXPECT_EQ(seq->num_tokens(), 9);
  EXPECT_EQ(seq->table.size(), 3u);
  EXPECT_EQ(mgr_->Stats().pool.num_tokens_stored, 9);
  // Only accepted tokens were hashed: block 1 (4..7) is full and cached, block 2 is not.
  EXPECT_EQ(seq->hashes.size(), 2u);
  // Granted past a block boundary and cut before it: the new block goes back.
  Grant(1, Iota(4, 300));  // 9 .. 12 -> 4 blocks
  EXPECT_EQ(mgr_->Stats().pool.num_blocks_used, 4);
  StepRequest cut;
  cut.truncates.push_back(TruncateOp{SeqId{1}, 10});
  MustStep(cut);
  EXPECT_EQ(mgr_->Find(SeqId{1})->table.size(), 3u);
  EXPECT_EQ(mgr_->Stats().pool.num_blocks_used, 3);
  // The next grant starts at the cut.
  Grant(1, {7});
  EXPECT_EQ(mgr_->Find(SeqId{1})->num_tokens(), 11);
  // Below the computed tokens, twice, or unknown: refused, nothing changed.
  {
    StepRequest bad;
    bad.truncates.push_back(TruncateOp{SeqId{1}, 8});
    ExpectRejected(bad, absl::StatusCode::kInvalidArgument, "must be in [9, 11]");
  }
  {
    StepRequest bad;
    bad.commits.push_back(CommitOp{SeqId{1}, 10});
    bad.truncates.push_back(TruncateOp{SeqId{1}, 9});
    ExpectRejected(bad, absl::StatusCode::kInvalidArgument, "must be in [10, 11]");
  }
  {
    StepRequest bad;
    bad.truncates.push_back(TruncateOp{SeqId{1}, 10});
    bad.truncates.push_back(TruncateOp{SeqId{1}, 10});
    ExpectRejected(bad, absl::StatusCode::kInvalidArgument, "appears twice");
  }
  {
    StepRequest bad;
    bad.truncates.push_back(TruncateOp{SeqId{7}, 0});
    ExpectRejected(bad, absl::StatusCode::kNotFound, "truncate: sequence 7 is unknown");
  }
  // A grant in the same request sees the truncated length.
  StepRequest both;
  both.truncates.push_back(TruncateOp{SeqId{1}, 9});
  both.grants.push_back(GrantOp{.seq = SeqId{1}, .start_pos = 9, .token_ids = {1, 2}});
  EXPECT_EQ(MustStep(both).grants.at(0).num_tokens, 11);
}

TEST_F(PagedTest, TruncateNeverCutsABlockOthersShare) {
  CreateAndGrant(1, Iota(6));
  StepRequest fork;
  fork.forks.push_back(ForkOp{SeqId{1}, SeqId{2}});
  MustStep(fork);
  StepRequest bad;
  bad.truncates.push_back(TruncateOp{SeqId{2}, 5});
  ExpectRejected(bad, absl::StatusCode::kFailedPrecondition, "other sequences share");
  // Cutting whole shared blocks only drops this sequence's references.
  StepRequest whole;
  whole.truncates.push_back(TruncateOp{SeqId{2}, 4});
  MustStep(whole);
  EXPECT_EQ(mgr_->Find(SeqId{1})->num_tokens(), 6);
  EXPECT_EQ(mgr_->Find(SeqId{2})->table.size(), 1u);
  // Pending positions past the cut are forgotten.
  Grant(2, {1, kPendingToken, kPendingToken});
  StepRequest cut;
  cut.truncates.push_back(TruncateOp{SeqId{2}, 6});
  MustStep(cut);
  EXPECT_EQ(mgr_->Find(SeqId{2})->pending, std::vector<int32_t>{5});
}

TEST_F(PagedTest, BadInputIsRejectedAndChangesNothing) {
  CreateAndGrant(1, Iota(5), /*max_len=*/8);
  {
    StepRequest r;
    r.frees = {SeqId{9}};
    ExpectRejected(r, absl::StatusCode::kNotFound, "free: sequence 9 is unknown");
  }
  {
    StepRequest r;  // double free within one request
    r.frees = {SeqId{1}, SeqId{1}};
    ExpectRejected(r, absl::StatusCode::kNotFound, "already freed");
  }
  {
    StepRequest r;
    r.creates.push_back(CreateOp{.seq = SeqId{1}, .max_len = 8});
    ExpectRejected(r, absl::StatusCode::kInvalidArgument, "sequence 1 already exists");
  }
  {
    StepRequest r;
    r.forks.push_back(ForkOp{SeqId{7}, SeqId{8}});
    ExpectRejected(r, absl::StatusCode::kNotFound, "parent sequence 7 is unknown");
  }
  {
    StepRequest r;
    r.forks.push_back(ForkOp{SeqId{1}, SeqId{1}});
    ExpectRejected(r, absl::StatusCode::kInvalidArgument, "child sequence 1 already exists");
  }
  {
    StepRequest r;
    r.grants.push_back(GrantOp{.seq = SeqId{1}, .start_pos = 5, .token_ids = {}});
    ExpectRejected(r, absl::StatusCode::kInvalidArgument, "zero tokens");
  }
  {
    StepRequest r;
    r.grants.push_back(GrantOp{.seq = SeqId{1}, .start_pos = 5, .token_ids = Iota(4)});
    ExpectRejected(r, absl::StatusCode::kInvalidArgument, "past its max_len 8");
  }
  {
    StepRequest r;
    r.grants.push_back(GrantOp{.seq = SeqId{1}, .start_pos = 3, .token_ids = {1}});
    ExpectRejected(r, absl::StatusCode::kInvalidArgument, "start_pos 3 is not its token count 5");
  }
  {
    StepRequest r;
    r.grants.push_back(GrantOp{.seq = SeqId{1}, .start_pos = 5, .token_ids = {-4}});
    ExpectRejected(r, absl::StatusCode::kInvalidArgument, "negative");
  }
  {
    StepRequest r;
    r.creates.push_back(CreateOp{.seq = SeqId{2}, .max_len = 0});
    ExpectRejected(r, absl::StatusCode::kInvalidArgument, "max_len must be in");
  }
  {
    StepRequest r;
    r.commits.push_back(CommitOp{SeqId{1}, 6});
    ExpectRejected(r, absl::StatusCode::kInvalidArgument, "num_computed_tokens 6");
  }
  {
    // A valid grant followed by a bad free: the grant must not have happened either.
    StepRequest r;
    r.frees = {SeqId{42}};
    r.grants.push_back(GrantOp{.seq = SeqId{1}, .start_pos = 5, .token_ids = {1}});
    ExpectRejected(r, absl::StatusCode::kNotFound, "42");
    EXPECT_EQ(mgr_->Find(SeqId{1})->num_tokens(), 5);
  }
}

// Swap preemption (StepRequest::swap_outs): a sequence of 10 computed tokens in blocks of
// 4 is swapped out; a create of its tokens plus the next one gets all 10 back, the last
// two from a partial host entry, and computes on from there.
TEST(SwapOutTest, ACreateOfTheSameTokensLoadsEverythingTheSequenceHadComputed) {
  auto host = std::make_shared<HostTier>(8, 4, "seg");
  auto mgr = *KvCacheManager::Create(
      CacheConfig{.policy = PolicyKind::kPaged, .num_blocks = 6, .block_size = 4}, host);
  auto step = [&](const StepRequest& req) {
    absl::StatusOr<StepResponse> resp = mgr->Step(req);
    EXPECT_TRUE(resp.ok()) << resp.status();
    EXPECT_TRUE(mgr->CheckInvariants().ok()) << mgr->CheckInvariants();
    return resp.ok() ? *resp : StepResponse{};
  };
  const std::vector<int32_t> tokens = Iota(11);
  const std::vector<int32_t> computed(tokens.begin(), tokens.begin() + 10);
  StepRequest create;
  create.creates.push_back(CreateOp{.seq = SeqId{1}, .max_len = 20});
  create.grants.push_back(GrantOp{.seq = SeqId{1}, .start_pos = 0, .token_ids = computed});
  const BlockId tail = step(create).grants.at(0).entries.at(2);
  StepRequest commit;
  commit.commits.push_back(CommitOp{SeqId{1}, 10});
  EXPECT_EQ(step(commit).transfers.size(), 2u);  // the two full blocks, written through

  StepRequest swap;
  swap.swap_outs.push_back(SeqId{1});
  const StepResponse swapped = step(swap);
  // The partial block is stored (the full ones are in the tier already: touched only).
  ASSERT_EQ(swapped.transfers.size(), 1u);
  EXPECT_EQ(swapped.transfers[0].kind, BlockTransfer::Kind::kStore);
  EXPECT_EQ(swapped.transfers[0].block, tail);
  EXPECT_EQ(mgr->Stats().num_swap_outs, 1);
  EXPECT_EQ(mgr->Stats().host.num_partial_stores, 1);
  EXPECT_EQ(mgr->Stats().pool.num_blocks_used, 0);
  // The routers never hear of the partial entry.
  EXPECT_EQ(mgr->CachedHashes().size(), 2u);

  // Back: the full blocks from the pool's cache, the partial one loaded into a fresh block.
  StepRequest again;
  again.creates.push_back(CreateOp{.seq = SeqId{2}, .max_len = 20, .prompt = tokens});
  const StepResponse back = step(again);
  EXPECT_EQ(back.creates.at(0).num_cached_tokens, 10);
  ASSERT_EQ(back.transfers.size(), 1u);
  EXPECT_EQ(back.transfers[0].kind, BlockTransfer::Kind::kLoad);
  EXPECT_EQ(back.transfers[0].host_slot, swapped.transfers[0].host_slot);
  EXPECT_EQ(back.transfers[0].block, back.creates[0].entries.at(2));
  EXPECT_EQ(mgr->Stats().host.num_partial_loads, 1);
  // It goes on in the loaded block: one more token fills it, then commits hash it.
  StepRequest grant;
  grant.grants.push_back(GrantOp{.seq = SeqId{2}, .start_pos = 10, .token_ids = {tokens[10]}});
  EXPECT_EQ(step(grant).grants.at(0).entries.size(), 0u);  // room in the loaded block
  StepRequest done;
  done.frees.push_back(SeqId{2});
  step(done);
  EXPECT_EQ(mgr->Stats().pool.num_blocks_free, 6);

  // A prompt that differs inside the tail finds the full blocks only.
  std::vector<int32_t> other = tokens;
  other[9] = 7;
  StepRequest differs;
  differs.creates.push_back(CreateOp{.seq = SeqId{3}, .max_len = 20, .prompt = other});
  EXPECT_EQ(step(differs).creates.at(0).num_cached_tokens, 8);
  // A swap-out of a sequence that is not there is refused, naming it.
  StepRequest unknown;
  unknown.swap_outs.push_back(SeqId{9});
  const absl::StatusOr<StepResponse> refused = mgr->Step(unknown);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("swap-out: sequence 9"));
}

TEST(KvCacheManagerCreateTest, RejectsBadConfigurations) {
  auto zero = KvCacheManager::Create(CacheConfig{.num_blocks = 4, .block_size = 0});
  EXPECT_EQ(zero.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(zero.status().message()), HasSubstr("block_size"));
  auto none = KvCacheManager::Create(CacheConfig{.num_blocks = 0});
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  auto huge = KvCacheManager::Create(CacheConfig{.num_blocks = 1 << 30, .block_size = 1024});
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParsePolicyKind("buddy").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*ParsePolicyKind("contiguous"), PolicyKind::kContiguous);
}

}  // namespace
}  // namespace folio::cachemgr
