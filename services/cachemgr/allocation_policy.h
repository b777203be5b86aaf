// AllocationPolicy: how sequences get KV slots. Two implementations sit behind it:
//  * PagedPolicy (the default): blocks handed out as tokens arrive, shared by forks
//    with copy-on-write, found again by prefix hash.
//  * ContiguousPolicy: the pre-PagedAttention baseline that reserves max_len slots in
//    one contiguous run per sequence at creation.
// KvCacheManager validates every operation before calling the policy, so the policy
// only CHECKs its preconditions. Thread-compatible.
#ifndef FOLIO_SERVICES_CACHEMGR_ALLOCATION_POLICY_H_
#define FOLIO_SERVICES_CACHEMGR_ALLOCATION_POLICY_H_

#include <cstdint>
#include <memory>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "services/cachemgr/block_pool.h"
#include "services/cachemgr/sequence.h"
#include "services/cachemgr/step_types.h"

namespace folio::cachemgr {

using SequenceMap = absl::flat_hash_map<SeqId, Sequence>;

// Pool figures; the source of the cache manager's metrics.
struct PoolStats {
  int32_t num_blocks_total = 0;
  int32_t num_blocks_free = 0;   // includes cached-evictable blocks
  int32_t num_blocks_used = 0;
  int32_t num_blocks_cached_evictable = 0;
  int64_t num_slots_allocated = 0;  // slots held by live sequences
  int64_t num_tokens_stored = 0;    // slots among them that hold a token
  int64_t num_evictions = 0;        // prefix-cache entries evicted for reuse
  // Blocks saved by sharing: over the blocks in use, the sum of (ref count - 1), i.e. how
  // many more blocks the live tables would hold if nothing were shared.
  int64_t num_shared_refs = 0;
  // Blocks window layer groups gave back as their sequences outgrew the window
  // (paged_policy.h).
  int64_t num_window_releases = 0;
};

class AllocationPolicy {
 public:
  virtual ~AllocationPolicy() = default;

  // How many leading tokens of `prompt` a prefix lookup would attach now. Read-only.
  virtual int32_t CountCachedTokens(absl::Span<const int32_t> prompt) const = 0;

  // Sets up a new sequence (seq.id and seq.max_len are filled in) and attaches its
  // cached prefix. kNoRoom leaves nothing allocated.
  virtual SeqResult Create(Sequence& seq, absl::Span<const int32_t> prompt) = 0;

  // Makes `child` (id filled in) a copy of `parent`.
  virtual SeqResult Fork(const Sequence& parent, Sequence& child) = 0;

  // Grants slots for `tokens` after the sequence's current ones.
  virtual SeqResult Grant(Sequence& seq, absl::Span<const int32_t> tokens) = 0;

  // Records that the first `num_computed` tokens have KV.
  virtual void Commit(Sequence& seq, int32_t num_computed) = 0;

  // Why `seq` cannot be cut back to `num_tokens` (in [num_computed, num_tokens()]), or OK.
  // Read-only; KvCacheManager asks before Truncate.
  virtual absl::Status CheckTruncate(const Sequence& seq, int32_t num_tokens) const = 0;
  // Cuts `seq` back to its first `num_tokens` tokens; blocks past them are given back.
  virtual void Truncate(Sequence& seq, int32_t num_tokens) = 0;

  // Returns every block the sequence holds.
  virtual void Free(Sequence& seq) = 0;

  // Swap preemption (a free that keeps the sequence's KV): before Free, the sequence's
  // computed blocks go to the offload tier below the pool, so that a later Create of the
  // same tokens loads them rather than recomputing. A policy without a tier does nothing.
  virtual void SwapOut(Sequence& seq) { (void)seq; }

  virtual PoolStats Stats() const = 0;

  // The host-tier transfers decided since the last call, in order (host_tier.h).
  virtual std::vector<BlockTransfer> TakeTransfers() { return {}; }
  // The workers ran the transfers up to the host tier's confirmed ticket (the disk tier's
  // spills among them): whatever that changes for routers is logged.
  virtual void OnTransfersConfirmed() {}

  // The pool whose prefix-cache index and event log routers follow; null for a policy
  // without a prefix cache.
  virtual const BlockPool* prefix_pool() const { return nullptr; }

  // Checks the pool against the live sequences: ref counts equal table holdings,
  // free + used = total, only last blocks partial.
  virtual absl::Status CheckInvariants(const SequenceMap& seqs) const = 0;
};

}  // namespace folio::cachemgr

#endif  // FOLIO_SERVICES_CACHEMGR_ALLOCATION_POLICY_H_
