// Randomized property test: thousands of random creates, grants, forks, commits,
// truncates (speculative decoding's rollback) and frees (some grants with a pending
// token, resolved later, as pipelined steps grant them), with every invariant checked
// after each step. A shadow "worker" applies the granted copies and writes every token
// into its slot, then reads each live sequence back through its block table: any write
// into a shared block without a copy, or a prefix-cache hit with the wrong content, shows
// up as a mismatch. With a host tier (offload tier 1) the shadow worker also runs every
// store and load in order, some steps' transfers are lost before a reset (a worker that
// died mid-step), and sequences read back through loaded blocks as through any other.
// Swap-outs (swap preemption) free a sequence after storing its partly filled last block
// as a partial host entry; creates of the same stems load such entries back, and the
// shadow worker's read-back checks their tokens like any other's.
// A shadow router replays the block event log after every step: it must hold exactly the
// hashes the pool and the host tier hold (partial entries never among them). With window
// layer groups every token is written into each group's block too, and each group reads
// back every position from its first held block on (the invariants check that nothing a
// later query could see was released).
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "services/cachemgr/kv_cache_manager.h"

namespace folio::cachemgr {
namespace {

struct Param {
  PolicyKind policy;
  int32_t block_size;
  int32_t num_blocks;
  int32_t host_slots = -1;  // -1: no host tier
  std::vector<int32_t> windows = {};  // window layer groups (CacheConfig::windows)
};

void PrintTo(const Param& p, std::ostream* os) {
  *os << PolicyKindName(p.policy) << " block " << p.block_size << " pool " << p.num_blocks
      << " host " << p.host_slots << " windows {" << absl::StrJoin(p.windows, ",") << "}";
}

class PropertyTest : public ::testing::TestWithParam<Param> {};

TEST_P(PropertyTest, RandomOperationsKeepEveryInvariant) {
  const Param p = GetParam();
  const CacheConfig config{.policy = p.policy, .num_blocks = p.num_blocks,
                           .block_size = p.block_size, .windows = p.windows};
  std::shared_ptr<HostTier> host;
  if (p.host_slots >= 0) host = std::make_shared<HostTier>(p.host_slots, p.block_size, "shm-1");
  auto mgr = *KvCacheManager::Create(config, host);
  std::mt19937 rng(1234 + p.block_size + p.host_slots);
  // Slot contents as a worker would hold them: [num_blocks * block_size], and the host
  // tier's [host_slots * block_size].
  std::vector<int32_t> slots(static_cast<size_t>(p.num_blocks) * p.block_size, -1);
  std::vector<int32_t> host_slots(static_cast<size_t>(std::max(p.host_slots, 0)) * p.block_size, -1);
  uint64_t done = 0;  // the last store ticket the shadow worker ran
  int64_t loads = 0;
  int resets = 0;
  // The shadow worker runs a step's transfers in order; reported back with the next step.
  auto run = [&](const StepResponse& r) {
    for (const BlockTransfer& t : r.transfers) {
      int32_t* block = &slots[static_cast<size_t>(t.block.value) * p.block_size];
      int32_t* slot = &host_slots[static_cast<size_t>(t.host_slot) * p.block_size];
      if (t.kind == BlockTransfer::Kind::kStore) {
        std::copy_n(block, p.block_size, slot);
        done = std::max(done, t.ticket);
      } else {
        std::copy_n(slot, p.block_size, block);
        ++loads;
      }
    }
  };
  auto step = [&](StepRequest req) -> absl::StatusOr<StepResponse> {
    req.transfers_done = done;
    absl::StatusOr<StepResponse> resp = mgr->Step(req);
    if (resp.ok()) run(*resp);
    return resp;
  };
  // Shared prompt stems, so prefix lookups hit.
  std::vector<std::vector<int32_t>> stems(4);
  for (auto& s : stems) {
    for (int i = 0; i < 40; ++i) s.push_back(static_cast<int32_t>(rng() % 7));
  }
  std::vector<uint64_t> live;
  // The ids behind pending tokens: the shadow worker writes them when it computes.
  absl::flat_hash_map<std::pair<uint64_t, int32_t>, int32_t> pending_ids;
  uint64_t next_id = 1;
  int no_room = 0;
  int truncations = 0;
  int shared_cuts = 0;
  int swap_outs = 0;
  std::vector<std::vector<int32_t>> resumes;  // prompts of swapped-out sequences' returns

  // The shadow router: the hashes the event log says are cached, up to router_seq.
  absl::flat_hash_set<BlockHash> router;
  uint64_t router_seq = 0;
  const BlockPool* router_pool = nullptr;
  int64_t copies = 0;       // across resets (each builds a new manager)
  int64_t hit_tokens = 0;
  auto apply = [&](const SeqResult& r, const std::vector<int32_t>& tokens, int32_t start) {
    copies += static_cast<int64_t>(r.copies.size());
    for (const BlockCopy& c : r.copies) {
      std::copy_n(&slots[static_cast<size_t>(c.src.value) * p.block_size], p.block_size,
                  &slots[static_cast<size_t>(c.dst.value) * p.block_size]);
    }
    const Sequence* seq = mgr->Find(r.seq);
    for (size_t i = 0; i < tokens.size(); ++i) {
      const int32_t pos = start + static_cast<int32_t>(i);
      const BlockId b = seq->table[pos / p.block_size];
      slots[static_cast<size_t>(b.value) * p.block_size + pos % p.block_size] = tokens[i];
      for (const WindowTable& w : seq->windows) {
        const BlockId wb = w.blocks[pos / p.block_size - w.first_block];
        slots[static_cast<size_t>(wb.value) * p.block_size + pos % p.block_size] = tokens[i];
      }
    }
  };

  for (int iter = 0; iter < 3000; ++iter) {
    StepRequest req;
    const int op = static_cast<int>(rng() % 11);
    std::vector<int32_t> tokens;
    uint64_t target = 0;
    int32_t start = 0;
    if (op < 2 || live.empty()) {  // create, with a cached-prefix lookup, and prefill
      target = next_id++;
      const auto& stem = stems[rng() % stems.size()];
      const int32_t len = 1 + static_cast<int32_t>(rng() % 30);
      std::vector<int32_t> prompt(stem.begin(), stem.begin() + len);
      if (!resumes.empty() && rng() % 2 == 0) {  // a swapped-out sequence comes back
        prompt = std::move(resumes.back());
        resumes.pop_back();
      }
      req.creates.push_back(CreateOp{.seq = SeqId{target}, .max_len = 64, .prompt = prompt});
      auto resp = step(req);
      ASSERT_TRUE(resp.ok()) << resp.status();
      if (resp->creates[0].status == SeqStatus::kNoRoom) {
        ++no_room;
      } else {
        live.push_back(target);
        start = resp->creates[0].num_cached_tokens;
        hit_tokens += start;
        tokens.assign(prompt.begin() + start, prompt.end());
        if (!tokens.empty()) {
          StepRequest grant;
          grant.grants.push_back(
              GrantOp{.seq = SeqId{target}, .start_pos = start, .token_ids = tokens});
          auto g = step(grant);
          ASSERT_TRUE(g.ok()) << g.status();
          if (g->grants[0].status == SeqStatus::kOk) apply(g->grants[0], tokens, start);
        }
      }
    } else {
      target = live[rng() % live.size()];
      const Sequence* seq = mgr->Find(SeqId{target});
      if (op < 6) {  // grant 1..5 tokens (decode or a chunk)
        const int32_t room = seq->max_len - seq->num_tokens();
        if (room == 0) continue;
        const int32_t n = 1 + static_cast<int32_t>(rng() % std::min(5, room));
        for (int i = 0; i < n; ++i) tokens.push_back(static_cast<int32_t>(rng() % 7));
        start = seq->num_tokens();
        const bool pend = rng() % 3 == 0;
        std::vector<int32_t> granted = tokens;
        if (pend) granted.back() = kPendingToken;
        req.grants.push_back(
            GrantOp{.seq = SeqId{target}, .start_pos = start, .token_ids = granted});
        auto resp = step(req);
        ASSERT_TRUE(resp.ok()) << resp.status();
        if (resp->grants[0].status == SeqStatus::kOk) {
          apply(resp->grants[0], tokens, start);
          if (pend) pending_ids[{target, start + n - 1}] = tokens.back();
        } else {
          ++no_room;
        }
      } else if (op < 7) {  // fork
        const uint64_t child = next_id++;
        req.forks.push_back(ForkOp{SeqId{target}, SeqId{child}});
        auto resp = step(req);
        ASSERT_TRUE(resp.ok()) << resp.status();
        if (resp->forks[0].status == SeqStatus::kOk) {
          apply(resp->forks[0], {}, 0);
          live.push_back(child);
          for (int32_t pos : mgr->Find(SeqId{child})->pending) {
            pending_ids[{child, pos}] = pending_ids.at({target, pos});
          }
        } else {
          ++no_room;
        }
      } else if (op < 8) {  // resolve what is pending and commit everything computed so far
        for (int32_t pos : seq->pending) {
          req.resolves.push_back(ResolveOp{SeqId{target}, pos, pending_ids.at({target, pos})});
        }
        req.commits.push_back(CommitOp{SeqId{target}, seq->num_tokens()});
        auto resp = step(req);
        ASSERT_TRUE(resp.ok()) << resp.status();
      } else if (op == 10) {  // commit part of what was granted, cut the rest back
        const int32_t computed = seq->num_computed +
            static_cast<int32_t>(rng() % (seq->num_tokens() - seq->num_computed + 1));
        const int32_t keep =
            computed + static_cast<int32_t>(rng() % (seq->num_tokens() - computed + 1));
        for (int32_t pos : seq->pending) {
          if (pos < computed) {
            req.resolves.push_back(ResolveOp{SeqId{target}, pos, pending_ids.at({target, pos})});
          }
        }
        req.commits.push_back(CommitOp{SeqId{target}, computed});
        req.truncates.push_back(TruncateOp{SeqId{target}, keep});
        const int32_t blocks_before = mgr->Stats().pool.num_blocks_used;
        const int32_t len_before = seq->num_tokens();
        auto resp = step(req);
        if (!resp.ok()) {
          // Only a cut into a block other sequences share (or shared when a fork of this
          // one committed it into the prefix cache) is refused, changing nothing.
          ASSERT_EQ(resp.status().code(), absl::StatusCode::kFailedPrecondition) << resp.status();
          ASSERT_EQ(mgr->Stats().pool.num_blocks_used, blocks_before);
          ++shared_cuts;
        } else {
          ASSERT_EQ(mgr->Find(SeqId{target})->num_tokens(), keep);
          if (keep < len_before) ++truncations;
        }
      } else if (host != nullptr && rng() % 8 == 0) {  // lose a step, then reset
        // The worker dies before running this step's transfers: the stores it carried are
        // unconfirmed, and the reset drops them with every sequence.
        req.commits.push_back(CommitOp{SeqId{target}, seq->num_computed});
        for (uint64_t id : live) {
          const Sequence* s = mgr->Find(SeqId{id});
          if (s->pending.empty() && s->num_tokens() > s->num_computed) {
            req.commits.clear();
            req.commits.push_back(CommitOp{SeqId{id}, s->num_tokens()});
            break;
          }
        }
        req.transfers_done = done;
        ASSERT_TRUE(mgr->Step(req).ok());  // its transfers never run
        host->DropUnconfirmed();
        mgr = *KvCacheManager::Create(config, host);
        router_pool = nullptr;  // a new pool: the router resyncs from its snapshot
        live.clear();
        pending_ids.clear();
        std::fill(slots.begin(), slots.end(), -1);  // a new worker's pool
        ++resets;
      } else {  // free, or swap out (swap preemption: stores what a free would lose)
        if (rng() % 2 == 0) {
          req.swap_outs.push_back(SeqId{target});
          ++swap_outs;
          // What the scheduler would look up when it resumes: the computed tokens and the
          // next one (resolved, or any).
          std::vector<int32_t> resume(seq->tokens.begin(), seq->tokens.begin() + seq->num_computed);
          resume.push_back(static_cast<int32_t>(rng() % 7));
          if (resume.size() <= 64) resumes.push_back(std::move(resume));
        } else {
          req.frees.push_back(SeqId{target});
        }
        ASSERT_TRUE(step(req).ok());
        live.erase(std::find(live.begin(), live.end(), target));
      }
    }
    ASSERT_TRUE(mgr->CheckInvariants().ok()) << "after op " << iter << ": "
                                             << mgr->CheckInvariants();
    if (const BlockPool* pool = mgr->prefix_pool(); pool != nullptr) {
      if (pool != router_pool) {  // a new pool (a reset): the router takes a snapshot
        router_pool = pool;
        const std::vector<BlockHash> snapshot = mgr->CachedHashes();
        router = {snapshot.begin(), snapshot.end()};
        router_seq = pool->events().last_seq();
      }
      std::optional<std::vector<BlockEvent>> events =
          pool->events().ReadAfter(router_seq, 1 << 20);
      ASSERT_TRUE(events.has_value()) << "the router fell behind the log";
      for (const BlockEvent& e : *events) {
        if (e.kind == BlockEvent::Kind::kStored) {
          ASSERT_TRUE(router.insert(e.hash).second) << "stored twice, op " << iter;
        } else {
          ASSERT_EQ(router.erase(e.hash), 1u) << "removed while not held, op " << iter;
        }
        router_seq = e.seq;
      }
      const std::vector<BlockHash> held = mgr->CachedHashes();
      ASSERT_EQ(router, (absl::flat_hash_set<BlockHash>(held.begin(), held.end())))
          << "the replayed events differ from the pool and tier, op " << iter;
    }
    const PoolStats stats = mgr->Stats().pool;
    ASSERT_EQ(stats.num_blocks_free + stats.num_blocks_used, stats.num_blocks_total);
    // Every live sequence reads back its own tokens through its table.
    for (uint64_t id : live) {
      const Sequence* seq = mgr->Find(SeqId{id});
      ASSERT_NE(seq, nullptr);
      for (int32_t pos = 0; pos < seq->num_tokens(); ++pos) {
        const BlockId b = seq->table[pos / p.block_size];
        const int32_t want = seq->tokens[pos] == kPendingToken ? pending_ids.at({id, pos})
                                                               : seq->tokens[pos];
        ASSERT_EQ(slots[static_cast<size_t>(b.value) * p.block_size + pos % p.block_size],
                  want)
            << "sequence " << id << " position " << pos << " after op " << iter;
        for (size_t g = 0; g < seq->windows.size(); ++g) {
          const WindowTable& w = seq->windows[g];
          // A query at the next position to compute sees this one: it must be held.
          ASSERT_TRUE(pos < seq->num_computed - p.windows[g] + 1 ||
                      pos / p.block_size >= w.first_block)
              << "sequence " << id << " window group " << g << " released position " << pos
              << " with " << seq->num_computed << " computed, after op " << iter;
          if (pos / p.block_size < w.first_block) continue;  // released
          const BlockId wb = w.blocks[pos / p.block_size - w.first_block];
          ASSERT_EQ(slots[static_cast<size_t>(wb.value) * p.block_size + pos % p.block_size],
                    want)
              << "sequence " << id << " window group " << g << " position " << pos
              << " after op " << iter;
        }
      }
    }
  }
  // Free everything: the pool is full again.
  StepRequest all;
  for (uint64_t id : live) all.frees.push_back(SeqId{id});
  ASSERT_TRUE(mgr->Step(all).ok());
  EXPECT_EQ(mgr->Stats().pool.num_blocks_free, p.num_blocks);
  EXPECT_EQ(mgr->Stats().pool.num_tokens_stored, 0);
  EXPECT_TRUE(mgr->CheckInvariants().ok());
  if (p.policy == PolicyKind::kPaged) {
    EXPECT_GT(hit_tokens, 0) << "the test should exercise prefix hits";
    if (p.block_size > 1) {  // with one-token blocks no block is ever partly filled
      EXPECT_GT(copies, 0) << "the test should exercise copy-on-write";
    }
  }
  EXPECT_GT(no_room, 0) << "the test should exercise a full pool";
  EXPECT_GT(truncations, 0) << "the test should exercise truncation";
  if (p.policy == PolicyKind::kContiguous) {
    EXPECT_EQ(shared_cuts, 0);
  }
  if (p.host_slots > 0) {
    EXPECT_GT(loads, 0) << "the test should exercise loads from the host tier";
    EXPECT_GT(resets, 0) << "the test should exercise a lost step";
    EXPECT_GT(mgr->Stats().host.num_evictions, 0) << "the test should fill the host tier";
    EXPECT_GT(mgr->Stats().host.num_dropped_unconfirmed, 0);
    if (p.block_size > 1) {
      EXPECT_GT(mgr->Stats().host.num_partial_loads, 0)
          << "the test should load swapped-out partial blocks back";
    }
  }
  EXPECT_GT(swap_outs, 0);
  if (!p.windows.empty()) {
    EXPECT_GT(mgr->Stats().pool.num_window_releases, 0)
        << "the test should exercise window groups giving blocks back";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Policies, PropertyTest,
    ::testing::Values(Param{PolicyKind::kPaged, 1, 200}, Param{PolicyKind::kPaged, 4, 60},
                      Param{PolicyKind::kPaged, 16, 16}, Param{PolicyKind::kPaged, 4, 40, 0},
                      Param{PolicyKind::kPaged, 4, 40, 30}, Param{PolicyKind::kPaged, 1, 120, 90},
                      Param{PolicyKind::kPaged, 4, 80, -1, {5}},
                      Param{PolicyKind::kPaged, 2, 240, -1, {3, 9, 3, 17, 5, 1, 40}},
                      Param{PolicyKind::kContiguous, 4, 80},
                      Param{PolicyKind::kContiguous, 16, 24}),
    [](const ::testing::TestParamInfo<Param>& info) {
      const Param& p = info.param;
      std::string name = absl::StrCat(PolicyKindName(p.policy), "_block", p.block_size, "_pool",
                                      p.num_blocks);
      if (p.host_slots >= 0) absl::StrAppend(&name, "_host", p.host_slots);
      if (!p.windows.empty()) absl::StrAppend(&name, "_windows_", absl::StrJoin(p.windows, "_"));
      return name;
    });

}  // namespace
}  // namespace folio::cachemgr
