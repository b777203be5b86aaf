// PrefixIndex: the router's copy of one replica's prefix cache, as the set of chained
// block hashes its cache manager holds (each marked when only its disk tier holds it), kept by the cache manager's block events
// (services/cachemgr/block_event_log.h, relayed by the scheduler's GetReplicaState).
//
// The cache manager is the one source of truth; this is a cache of it that knows when it
// is stale. It follows one pool (pool_id) from one event (last_seq) to the next. A batch
// for another pool, or one whose first event does not follow last_seq (a gap), is not
// applied: the index empties and asks for a snapshot (cursor() names no pool), so it never
// keeps claims of a pool that was reset or a process that restarted. Because hashes are
// chained, a request's cached prefix is the run of its block hashes, from the first, that
// the set holds (Match), exactly the blocks the cache manager's lookup would find.
//
// Memory: at most max_blocks hashes (16 bytes each plus the set's overhead); a snapshot or
// event past the bound is a resync too (a pool never holds more hashes than blocks, so the
// bound only guards against a misbehaving peer).
//
// Thread-compatible: ReplicaSet guards each replica's index with its lock.
#ifndef FOLIO_SERVICES_FRONTEND_ROUTING_PREFIX_INDEX_H_
#define FOLIO_SERVICES_FRONTEND_ROUTING_PREFIX_INDEX_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"
#include "services/cachemgr/block_hash.h"

namespace folio::frontend::routing {

using cachemgr::BlockHash;

// One answer of the cache manager's GetBlockEvents, in native types.
struct BlockEventBatch {
  struct Event {
    uint64_t seq = 0;
    bool stored = true;    // false: removed
    BlockHash hash;
    bool on_disk = false;  // stored, but only on the replica's disk tier (a dearer hit)
  };
  std::string pool_id;
  bool snapshot = false;  // `events` are the whole index (all stored) as of last_seq
  std::vector<Event> events;
  uint64_t last_seq = 0;
  int32_t block_size = 0;
};

// Where the index stands, for the next GetBlockEvents request.
struct EventCursor {
  std::string pool_id;  // empty: send a snapshot
  uint64_t after_seq = 0;
};

class PrefixIndex {
 public:
  enum class ApplyResult {
    kApplied,  // the index now reflects the batch
    kResync,   // a gap, another pool or the size bound: emptied; the next batch must be a snapshot
  };

  explicit PrefixIndex(int64_t max_blocks = int64_t{1} << 22) : max_blocks_(max_blocks) {}

  ApplyResult Apply(const BlockEventBatch& batch);

  // Drops everything and asks for a snapshot (the replica is gone or restarted).
  void Clear();

  // How many of `hashes` (a request's full blocks, first to last) the replica holds as a
  // prefix: the first index i with hashes[i] not held. `on_disk` (optional): how many of
  // those only its disk tier holds.
  int32_t Match(absl::Span<const BlockHash> hashes, int32_t* on_disk = nullptr) const;

  EventCursor cursor() const { return EventCursor{pool_id_, last_seq_}; }
  int64_t size() const { return static_cast<int64_t>(hashes_.size()); }
  int32_t block_size() const { return block_size_; }
  // Batches refused since construction (gaps, other pools, the bound): for metrics.
  int64_t num_resyncs() const { return num_resyncs_; }

 private:
  ApplyResult Resync();

  const int64_t max_blocks_;
  absl::flat_hash_map<BlockHash, bool> hashes_;  // hash -> only on disk
  std::string pool_id_;
  uint64_t last_seq_ = 0;
  int32_t block_size_ = 0;
  int64_t num_resyncs_ = 0;
};

}  // namespace folio::frontend::routing

#endif  // FOLIO_SERVICES_FRONTEND_ROUTING_PREFIX_INDEX_H_
