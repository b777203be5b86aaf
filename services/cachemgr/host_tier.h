// HostTier: the index of the KV offload tier in host memory (tier 1, issue #50). The
// bytes live with the workers (a shared-memory segment per rank that outlives a worker
// process, services/worker/engine/host_kv_segment.h); this class decides what they hold:
// for each of its num_slots slots, the chained hash and token ids of the full block stored
// there, in least-recently-used order.
//
// Write-through: a full block enters the tier when its KV is committed (PagedPolicy::
// Commit asks for a slot, the worker copies the block out with the next step), so
// evicting a pool block never waits for a copy, and a worker that restarts finds the
// tier as it was. A prefix lookup that misses the pool but hits here gets a fresh pool
// block and a load.
//
// Every store carries a ticket (increasing, never reused). A store is confirmed once the
// scheduler reports that a step carrying it was executed (StepRequest::transfers_done);
// Reset (a lost worker or step) drops the unconfirmed ones, whose bytes may never have
// been written. A tier's tickets start above any an earlier tier could have handed out
// (the wall clock in microseconds, times 2^12), so a scheduler's mark from a tier that was
// replaced (a cache manager restart, a new segment) never confirms this one's stores.
//
// Swap preemption (the scheduler's --preemption=swap) also stores a sequence's last,
// partly computed block: a partial entry of 1 .. block_size - 1 tokens, keyed by the
// chained hash of those tokens under the previous full block's hash. Partial entries are
// the replica's own (never announced to routers, never spilled to disk); a create whose
// prompt goes on through one loads it and computes from its end.
//
// Invariants (CheckInvariants): a slot is either free or holds one hash; the index maps
// each held hash to its slot and nothing else; the LRU list holds exactly the held slots;
// unconfirmed tickets are above the confirmed mark.
//
// Thread-compatible: the cache manager serializes access.
#ifndef FOLIO_SERVICES_CACHEMGR_HOST_TIER_H_
#define FOLIO_SERVICES_CACHEMGR_HOST_TIER_H_

#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "services/cachemgr/block_hash.h"
#include "services/cachemgr/disk_tier.h"

namespace folio::cachemgr {

struct HostTierStats {
  int32_t num_slots = 0;
  int32_t num_used = 0;
  int64_t num_stores = 0;     // blocks written to the tier
  int64_t num_loads = 0;      // blocks read back into the pool
  int64_t num_evictions = 0;  // entries dropped to make room (LRU)
  int64_t num_dropped_unconfirmed = 0;  // stores Reset dropped unconfirmed
  int64_t num_partial_stores = 0;  // of the stores, swap preemption's partial last blocks
  int64_t num_partial_loads = 0;   // of the loads, partial entries (a swapped sequence back)
};

class HostTier {
 public:
  // `id` names the bytes this index describes (the workers' segments); a tier is only
  // kept across a reset while the workers report the same id.
  HostTier(int32_t num_slots, int32_t block_size, std::string id);
  // Tests: tickets start after `first_ticket`.
  HostTier(int32_t num_slots, int32_t block_size, std::string id, uint64_t first_ticket);

  HostTier(const HostTier&) = delete;
  HostTier& operator=(const HostTier&) = delete;

  int32_t num_slots() const { return num_slots_; }
  const std::string& id() const { return id_; }
  // Distinct for every tier this process builds (for metrics that count per tier).
  uint64_t generation() const { return generation_; }

  // The slot holding exactly `tokens` under `hash` (ids compared: a collision is a miss;
  // so is an entry of another length).
  std::optional<int32_t> Find(const BlockHash& hash, absl::Span<const int32_t> tokens) const;
  // Whether any partial entry (fewer than block_size tokens) is held.
  bool has_partial() const { return num_partial_ > 0; }
  bool Contains(const BlockHash& hash) const { return index_.contains(hash); }
  // Marks a slot most recently used (a lookup hit or a block committed again).
  void Touch(int32_t slot);
  // Counts a load out of `slot` (after Find) and touches it. A partial entry's load is
  // counted as one of num_partial_loads too, and makes it the least recently used
  // instead: its sequence is back and will store the block whole.
  void NoteLoad(int32_t slot);

  struct Stored {
    int32_t slot = -1;
    uint64_t ticket = 0;
    std::optional<BlockHash> evicted;  // the entry the store pushed out, if any
    std::vector<int32_t> evicted_tokens;  // its tokens (the slot held them until now)
    // The evicted entry was partial: the routers and the disk tier never knew it.
    bool evicted_partial = false;
  };
  // Takes a slot for a new entry of 1 .. block_size tokens (fewer: a partial entry): a
  // free one, or the least recently used (whose entry is evicted). Requires
  // !Contains(hash) and num_slots() > 0.
  Stored Store(const BlockHash& hash, absl::Span<const int32_t> tokens);

  // Stores with tickets up to `ticket` were executed by the workers (and the disk tier's
  // transfers with them).
  void Confirm(uint64_t ticket);
  // A ticket for a transfer that is not a store (a disk load), in the same sequence.
  uint64_t NextTicket() { return ++last_ticket_; }

  // The disk tier below this one (disk_tier.h), or null. It outlives a host tier: a new
  // segment loses the host tier's blocks, not the disk's.
  void set_disk(std::shared_ptr<DiskTier> disk) { disk_ = std::move(disk); }
  DiskTier* disk() const { return disk_.get(); }
  // A worker or step was lost: entries whose store was never confirmed are dropped.
  void DropUnconfirmed();

  HostTierStats Stats() const;
  // Every full block's hash the tier holds (for the routers' snapshot, with the pool's).
  std::vector<BlockHash> Hashes() const;
  absl::Status CheckInvariants() const;

 private:
  struct Slot {
    bool used = false;
    uint64_t ticket = 0;
    int32_t length = 0;  // tokens held: block_size, or fewer for a partial entry
    BlockHash hash;
    std::list<int32_t>::iterator lru;  // valid while used
  };

  void Evict(int32_t slot);

  const int32_t num_slots_;
  const int32_t block_size_;
  const std::string id_;
  std::vector<Slot> slots_;
  std::vector<int32_t> tokens_;   // [num_slots, block_size]: each slot's first `length`
  int32_t num_partial_ = 0;       // used slots with length < block_size
  std::vector<int32_t> free_;     // free slots, taken from the back
  std::list<int32_t> lru_;        // used slots, least recently used first
  absl::flat_hash_map<BlockHash, int32_t> index_;
  std::deque<Stored> unconfirmed_;  // in ticket order
  const uint64_t generation_;
  const uint64_t first_ticket_;  // tickets of this tier are above it
  uint64_t last_ticket_;
  uint64_t confirmed_;
  HostTierStats counters_;
  std::shared_ptr<DiskTier> disk_;
};

}  // namespace folio::cachemgr

#endif  // FOLIO_SERVICES_CACHEMGR_HOST_TIER_H_
