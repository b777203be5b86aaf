// BlockPool: the physical KV blocks of one model replica, as metadata only (the tensors
// live in the workers). It keeps a reference count per block, the free queue in eviction
// order, and the prefix-cache index from content hash to block.
//
// Invariants (CheckInvariants() verifies them):
//  * A block is in the free queue if and only if its ref count is 0.
//  * The free queue is ordered least recently freed first; Allocate() takes the head.
//    A freed block that holds a hash stays in the index (reusable by a prefix lookup)
//    until Allocate() reaches it, which evicts the hash.
//  * Every hashed block's hash maps back to it in the index, and nothing else does.
//
// Thread-compatible: the owner (KvCacheManager) serializes access.
#ifndef FOLIO_SERVICES_CACHEMGR_BLOCK_POOL_H_
#define FOLIO_SERVICES_CACHEMGR_BLOCK_POOL_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "services/cachemgr/block_event_log.h"
#include "services/cachemgr/block_hash.h"
#include "services/cachemgr/types.h"

namespace folio::cachemgr {

class BlockPool {
 public:
  // All blocks start free, in id order.
  BlockPool(int32_t num_blocks, int32_t block_size);

  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  int32_t num_blocks() const { return num_blocks_; }
  int32_t block_size() const { return block_size_; }
  int32_t num_free() const { return num_free_; }
  int32_t num_used() const { return num_blocks_ - num_free_; }
  // Free blocks that still hold a prefix-cache hash.
  int32_t num_cached_evictable() const { return num_cached_free_; }
  int64_t num_evictions() const { return num_evictions_; }

  // Takes the head of the free queue, evicting its hash if it has one, and gives it
  // ref count 1. Requires num_free() > 0.
  BlockId Allocate();

  // Adds a reference. A block at ref count 0 (a freed, cached block found by a prefix
  // lookup) leaves the free queue.
  void AddRef(BlockId id);

  // Drops a reference; at 0 the block goes to the tail of the free queue. Requires a
  // positive ref count.
  void Release(BlockId id);

  int32_t ref_count(BlockId id) const { return blocks_[id.value].ref_count; }

  // The block holding exactly `tokens` under `hash`, if cached. The ids are compared, so
  // a hash collision is a miss, never a wrong answer.
  std::optional<BlockId> FindCached(const BlockHash& hash,
                                    absl::Span<const int32_t> tokens) const;

  // Enters a full, computed, in-use block into the prefix-cache index. Returns false
  // (and changes nothing) when the hash is already cached by another block or the block
  // already has a hash. kUnlogged: the hash is the pool's own business (a window layer
  // group's block, paged_policy.h), never in events() or SnapshotHashes.
  enum class Logged { kLogged, kUnlogged };
  bool Register(BlockId id, const BlockHash& hash, absl::Span<const int32_t> tokens,
                Logged logged = Logged::kLogged);

  bool is_cached(BlockId id) const { return blocks_[id.value].hashed; }

  // Drops every hash and reference: all blocks free, in id order.
  void Reset();

  // The caches below the pool (the host KV tier, host_tier.h, and the disk tier under it,
  // disk_tier.h), as routers see them: the log carries the union of pool and host tier
  // ("memory"), and the hashes only the disk keeps. `below` says where else a hash is
  // held: a hash held in memory below is not logged as entering or leaving the pool; one
  // leaving the pool for the disk alone is kStoredOnDisk. The caches below report their
  // own changes through LogBelow. Set once, before any Register.
  enum class Below { kNone, kMemory, kDisk };
  void set_below(std::function<Below(const BlockHash&)> below) { below_ = std::move(below); }
  // The cache below took `hash` in (kStored) or let it go (kRemoved): logged unless the
  // pool holds it, which already counts for routers.
  void LogBelow(BlockEvent::Kind kind, const BlockHash& hash) {
    if (!cached_.contains(hash)) events_.Append(kind, hash);
  }
  bool holds(const BlockHash& hash) const { return cached_.contains(hash); }

  // The index's changes (block_event_log.h): every hash Register enters and every one
  // eviction or Reset drops (with caches below, set_below: of the union).
  const BlockEventLog& events() const { return events_; }
  // Every hash in the index, as of events().last_seq().
  std::vector<BlockHash> SnapshotHashes() const;

  // Checks the invariants above; returns Internal with a description on violation.
  absl::Status CheckInvariants() const;

 private:
  struct Block {
    int32_t ref_count = 0;
    int32_t prev = -1;  // free-queue links; kSentinel-terminated circular list
    int32_t next = -1;
    bool hashed = false;
    bool logged = false;  // its hash is in the event log (Register's Logged)
    BlockHash hash;
  };

  void PushBack(int32_t id);
  void Unlink(int32_t id);
  void EvictHash(int32_t id);

  const int32_t num_blocks_;
  const int32_t block_size_;
  const int32_t sentinel_;    // index of the free queue's sentinel node: num_blocks_
  std::vector<Block> blocks_;  // [num_blocks + 1]; the last entry is the sentinel
  std::vector<int32_t> block_tokens_;  // [num_blocks, block_size]: ids of hashed blocks
  absl::flat_hash_map<BlockHash, BlockId> cached_;
  BlockEventLog events_;
  std::function<Below(const BlockHash&)> below_;  // set_below
  Below BelowOf(const BlockHash& hash) const { return below_ ? below_(hash) : Below::kNone; }
  // What leaving the pool means for `hash` in the log (nothing while memory below holds it).
  void LogLeaving(const BlockHash& hash);
  int32_t num_free_ = 0;
  int32_t num_cached_free_ = 0;
  int64_t num_evictions_ = 0;
};

}  // namespace folio::cachemgr

#endif  // FOLIO_SERVICES_CACHEMGR_BLOCK_POOL_H_
