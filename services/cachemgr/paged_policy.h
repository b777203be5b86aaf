// PagedPolicy: PagedAttention's allocation. A sequence holds a block table; a block is
// taken from the pool only when the previous one is full; forks share blocks through
// reference counts; writing into a shared partial block first copies it
// (copy-on-write); full, computed blocks enter the prefix cache and are found again by
// their chained hash.
//
//   logical blocks      0         1         2
//   seq A table      [  7  ]   [  3  ]   [ 12 .. ]    <- only the last may be partial
//   seq B (fork)     [  7  ]   [  3  ]   [ 12 .. ]    ref(7) = ref(3) = ref(12) = 2
//   B appends a token: 12 is shared and partial, so B gets a fresh block 5, the worker
//   copies 12 -> 5, and B writes into 5. Then ref(12) = 1 and A writes in place.
//
// Window layer groups (sliding-window attention, Gemma 2/3's local layers): besides the
// full-attention layers' table, a sequence holds one table per window group (`windows`:
// each group's window in tokens), over the same tokens, in blocks of the same pool (a
// block is a page of some layers' KV; which layers is the worker's business). A query at
// position p sees keys p - window + 1 .. p, so once a sequence has computed c tokens no
// later query needs a group's blocks before (c - window + 1) / block_size: Grant releases
// them to the pool (the committed count lags the steps in flight, so what they read is
// kept). A group's full blocks enter the prefix cache under their chained hash salted
// with the group (WindowHash), unlogged (routers follow the full-attention blocks); a
// prefix hit of k blocks needs every group's blocks from its first needed one up to k,
// so a lookup attaches the longest such prefix. Host tiers do not hold window groups
// yet (KvCacheManager refuses the pair).
//
// Thread-compatible.
#ifndef FOLIO_SERVICES_CACHEMGR_PAGED_POLICY_H_
#define FOLIO_SERVICES_CACHEMGR_PAGED_POLICY_H_

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "services/cachemgr/allocation_policy.h"
#include "services/cachemgr/block_pool.h"
#include "services/cachemgr/host_tier.h"

namespace folio::cachemgr {

class PagedPolicy final : public AllocationPolicy {
 public:
  enum class PrefixCaching { kDisabled, kEnabled };

  // `host` (may be null; must outlive the policy) is the offload tier below the pool:
  // committed full blocks are stored there, and prefix lookups that miss the pool load
  // from it. Requires prefix caching.
  PagedPolicy(int32_t num_blocks, int32_t block_size, PrefixCaching prefix_caching,
              HostTier* host = nullptr, std::vector<int32_t> windows = {});

  int32_t CountCachedTokens(absl::Span<const int32_t> prompt) const override;
  SeqResult Create(Sequence& seq, absl::Span<const int32_t> prompt) override;
  SeqResult Fork(const Sequence& parent, Sequence& child) override;
  SeqResult Grant(Sequence& seq, absl::Span<const int32_t> tokens) override;
  void Commit(Sequence& seq, int32_t num_computed) override;
  absl::Status CheckTruncate(const Sequence& seq, int32_t num_tokens) const override;
  void Truncate(Sequence& seq, int32_t num_tokens) override;
  void Free(Sequence& seq) override;
  // With a host tier: the full computed blocks (already written through) are stored
  // again if the tier dropped them and made most recent, first block last; the computed
  // part of the last block is stored as a partial entry (host_tier.h).
  void SwapOut(Sequence& seq) override;
  PoolStats Stats() const override;
  std::vector<BlockTransfer> TakeTransfers() override { return std::move(transfers_); }
  void OnTransfersConfirmed() override;
  const BlockPool* prefix_pool() const override { return &pool_; }
  absl::Status CheckInvariants(const SequenceMap& seqs) const override;

 private:
  // Walks the prefix cache along `prompt`; fills `blocks` and `hashes` with the hits.
  void Lookup(absl::Span<const int32_t> prompt, std::vector<BlockId>* blocks,
              std::vector<BlockHash>* hashes) const;
  // Create's lookup with a host tier: pool hits are attached, host hits get a fresh
  // block and a load (while the pool has a free block); stops at the first miss in both,
  // where a partial entry (a swapped-out sequence's last block) may still go on.
  // Returns the tokens attached.
  int32_t LookupThroughHost(absl::Span<const int32_t> prompt, Sequence& seq);
  // The longest partial entry in the host tier holding prompt[start, start + n) under
  // `parent`, with n < block_size and start + n < prompt.size() (the last prompt token
  // is always computed).
  struct PartialHit {
    int32_t slot = -1;
    int32_t num_tokens = 0;
  };
  std::optional<PartialHit> FindPartial(absl::Span<const int32_t> prompt, int32_t start,
                                        const BlockHash& parent) const;
  // Puts `tokens` (a full block, or a partial entry) of pool block `block` into the host
  // tier under `hash`, or marks it most recent if the tier holds it already. The entry it
  // pushes out spills to disk or leaves the routers' view (full blocks only).
  void StoreInHost(BlockId block, const BlockHash& hash, absl::Span<const int32_t> tokens);
  // Logs the disk tier's changes for the routers: the hashes it dropped
  // (DiskTier::TakeRemoved) as removed and those it now announces (TakeAnnounced) as on
  // disk, each unless memory holds it.
  void LogDiskRemovals();
  // Window layer groups (see the file comment).
  int32_t num_windows() const { return static_cast<int32_t>(windows_.size()); }
  // The first logical block group `group` still needs once `num_computed` tokens are
  // computed.
  int32_t FirstNeededBlock(int32_t group, int32_t num_computed) const;
  // Group `group`'s prefix-cache key for the block whose chained hash is `hash`.
  static BlockHash WindowHash(const BlockHash& hash, int32_t group);
  // How many of the leading blocks of `prompt` whose chained hashes are `hashes` (all
  // cached for the full-attention layers) a lookup may attach: the most k whose window
  // groups hold their needed blocks below k. With `found`, each group's cached blocks
  // (found[g][j] for block j; unset where none).
  int32_t WindowedHits(absl::Span<const int32_t> prompt, absl::Span<const BlockHash> hashes,
                       std::vector<std::vector<BlockId>>* found) const;
  // A sequence's tables for the cached prefix: `blocks` (full-attention) and `found`
  // (WindowedHits') up to `k` blocks, each acquired.
  void AttachPrefix(Sequence& seq, absl::Span<const BlockId> blocks,
                    absl::Span<const BlockHash> hashes,
                    const std::vector<std::vector<BlockId>>& found, int32_t k);
  // Blocks a table holding logical blocks [first_block, first_block + table.size()) needs
  // to grow from `old_len` to `new_len` tokens (a shared partial last block is copied).
  int32_t BlocksToGrow(absl::Span<const BlockId> table, int32_t first_block, int32_t old_len,
                       int32_t new_len) const;
  // Grows it so (the copy into `copies`); returns the first logical block that changed.
  int32_t GrowTable(std::vector<BlockId>& table, int32_t first_block, int32_t old_len,
                    int32_t new_len, std::vector<BlockCopy>* copies);
  // Why the table's block holding position `num_tokens` cannot lose its tokens from there.
  absl::Status CheckCut(const Sequence& seq, const std::vector<BlockId>& table,
                        int32_t first_block, int32_t num_tokens) const;
  // Cuts a table back from `old_len` to `num_tokens` tokens.
  void CutTable(std::vector<BlockId>& table, int32_t first_block, int32_t old_len,
                int32_t num_tokens);
  // Checks one table of a live sequence of `n` tokens against the fills; counts holders.
  absl::Status CheckTable(SeqId id, absl::Span<const BlockId> table, int32_t first_block,
                          int32_t n, std::vector<int32_t>* holders) const;
  BlockId AllocateEmpty();
  // AddRef/Release that keep num_tokens_stored_ in step with blocks entering or leaving use.
  void Acquire(BlockId id);
  void Drop(BlockId id);

  const int32_t block_size_;
  const PrefixCaching prefix_caching_;
  const std::vector<int32_t> windows_;  // per window group: its window in tokens
  int64_t num_window_releases_ = 0;     // PoolStats::num_window_releases
  BlockPool pool_;
  HostTier* const host_;
  std::vector<BlockTransfer> transfers_;  // decided since the last TakeTransfers
  std::vector<int32_t> fill_;  // [num_blocks]: tokens written into each block
  int64_t num_tokens_stored_ = 0;
  int64_t num_shared_refs_ = 0;  // PoolStats::num_shared_refs
};

}  // namespace folio::cachemgr

#endif  // FOLIO_SERVICES_CACHEMGR_PAGED_POLICY_H_
