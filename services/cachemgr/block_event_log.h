// BlockEventLog: the prefix-cache index's changes as a numbered, bounded log, so that
// routers outside the replica can keep a copy of the index (services/frontend/routing/).
//
// Each hash that enters the index is one kStored event and each that leaves it (eviction
// for reuse) one kRemoved event; with a disk tier below (disk_tier.h), a hash the pool and
// host tier let go while the disk keeps it is one kStoredOnDisk event (cheaper to load
// than to compute, dearer than a hit in memory), and kStored again once it is back in
// memory. Numbered 1, 2, 3, ... in the order they happened. The log
// keeps the newest `capacity` events; a reader that asks for events it has already dropped
// gets nothing (ReadAfter answers nullopt) and must take a snapshot of the index instead
// (BlockPool::SnapshotHashes, which is exact as of last_seq()). A pool reset starts a new
// pool (and so a new pool id upstream), never a "cleared" event: readers of the old pool
// resync from the new one's snapshot.
//
// Memory: capacity events of 32 bytes (BlockPool: 8 per block, 1 Ki to 64 Ki), fixed at construction. Appending is O(1) and
// allocation-free, so the step path pays a few stores per block that enters or leaves.
//
// Thread-compatible: the owner (BlockPool, under the cache manager's lock) serializes access.
#ifndef FOLIO_SERVICES_CACHEMGR_BLOCK_EVENT_LOG_H_
#define FOLIO_SERVICES_CACHEMGR_BLOCK_EVENT_LOG_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "services/cachemgr/block_hash.h"

namespace folio::cachemgr {

struct BlockEvent {
  enum class Kind : uint8_t { kStored, kRemoved, kStoredOnDisk };
  uint64_t seq = 0;
  Kind kind = Kind::kStored;
  BlockHash hash;
};

class BlockEventLog {
 public:
  // The default holds a few seconds of a busy pool's churn; a reader polling every 50 ms
  // falls behind it only when stalled.
  static constexpr int32_t kDefaultCapacity = 1 << 16;

  explicit BlockEventLog(int32_t capacity = kDefaultCapacity);

  void Append(BlockEvent::Kind kind, const BlockHash& hash);

  // The number of the newest event (0: none yet).
  uint64_t last_seq() const { return next_seq_ - 1; }

  // The events numbered after `after_seq`, oldest first, at most `max_events` of them.
  // nullopt when some of them were dropped (after_seq + 1 is older than the oldest kept),
  // or when after_seq lies in the future (a reader of another log).
  std::optional<std::vector<BlockEvent>> ReadAfter(uint64_t after_seq, int32_t max_events) const;

 private:
  const int32_t capacity_;
  std::vector<BlockEvent> ring_;  // [capacity_]: event seq s sits at (s - 1) % capacity_
  uint64_t next_seq_ = 1;
};

}  // namespace folio::cachemgr

#endif  // FOLIO_SERVICES_CACHEMGR_BLOCK_EVENT_LOG_H_
