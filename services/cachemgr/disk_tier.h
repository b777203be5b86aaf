// DiskTier: the index of the KV offload tier on disk (tier 2, issue #50), below the host
// tier. The bytes are files the workers write and read (common/kv_block_file.h), one per
// full block and rank, in a directory named by the model's identity; this class decides
// what the tier holds, in least-recently-used order, within a budget of blocks.
//
// A block reaches the disk when the host tier evicts it (HostTier::Store): the worker
// writes the evicted slot to its file before the slot is stored again (a SPILL ordered
// before that STORE). A prefix lookup that misses the pool and the host tier and finds
// the block here gets a fresh pool block and a LOAD_DISK. The file system is the truth
// the index is checked against: a lookup finds a block only while all of its files are
// there (a spill that never ran, a disk that was full, a file another replica removed:
// a miss), and it finds blocks this index never held (another replica sharing the
// directory, an earlier run of this cache manager) by reading their headers, which are
// checked against the request's tokens. Open indexes the files already there, oldest
// first, up to the budget.
//
// Removal is the cache manager's: an evicted entry's files are unlinked at once. An entry
// is never evicted while a spill into it or a load out of it may not have run yet (its
// ticket is above the confirmed mark): the files would be written after the unlink, or be
// gone when the load runs. If every entry is held so, a spill is skipped (the block is
// dropped, as without a disk tier); the budget is never exceeded by this index.
//
// Invariants (CheckInvariants): the LRU list holds exactly the indexed hashes, each once;
// at most num_blocks of them.
//
// Thread-compatible: the cache manager serializes access.
#ifndef FOLIO_SERVICES_CACHEMGR_DISK_TIER_H_
#define FOLIO_SERVICES_CACHEMGR_DISK_TIER_H_

#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "services/cachemgr/block_hash.h"

namespace folio::cachemgr {

struct DiskTierStats {
  int32_t num_blocks = 0;
  int32_t num_used = 0;
  int64_t num_spills = 0;     // blocks the host tier evicted, written to disk
  int64_t num_loads = 0;      // blocks read back into the pool
  int64_t num_evictions = 0;  // entries dropped (files removed) to make room
  int64_t num_adopted = 0;    // blocks found on disk that the index did not hold
  int64_t num_missing = 0;    // indexed blocks whose files were gone at a lookup
  int64_t num_bad_files = 0;  // headers found damaged or foreign (the files removed)
  int64_t num_banned = 0;     // blocks a worker could not load (Ban)
};

class DiskTier {
 public:
  // `dir` is a KvNamespaceDir (the workers' kv_disk_dir); it must exist and be visible to
  // this process. Blocks are num_ranks files each.
  static absl::StatusOr<std::unique_ptr<DiskTier>> Open(std::string dir, int32_t num_ranks,
                                                        int32_t block_size, int32_t num_blocks);

  DiskTier(const DiskTier&) = delete;
  DiskTier& operator=(const DiskTier&) = delete;

  const std::string& dir() const { return dir_; }
  int32_t num_blocks() const { return num_blocks_; }
  int32_t num_ranks() const { return num_ranks_; }
  bool Contains(const BlockHash& hash) const { return index_.contains(hash); }

  // Whether the disk holds exactly `tokens` under `hash` now, all ranks' files present and
  // the rank-0 header sound (read at every call). Drops an indexed entry whose files are
  // gone; adopts (indexes) a block it did not hold
  // whose rank-0 header matches, making room as Spill does; removes a file whose header
  // is damaged or foreign.
  bool Find(const BlockHash& hash, absl::Span<const int32_t> tokens);
  // Find without changing the index or the disk (for predictions).
  bool Peek(const BlockHash& hash, absl::Span<const int32_t> tokens) const;
  // A load out of `hash` (after Find) with the host tier's `ticket`: touched, and kept
  // until the ticket is confirmed.
  void NoteLoad(const BlockHash& hash, uint64_t ticket);
  // A prefix lookup's walk is over: the hits Find kept from eviction during it (so that a
  // later block of the chain making room cannot evict an earlier hit) may go again.
  void EndLookup();
  // A worker could not load `hash` (its payload damaged, a file it cannot read, or no
  // disk tier on that worker): its entry goes (its files stay, for other replicas that
  // can read them; the worker removed a damaged one), and it is never found or spilled
  // again by this index (a bounded set), so a block the cache manager can read but the
  // workers cannot never refuses step after step.
  void Ban(const BlockHash& hash);
  // An entry for a block the host tier evicts, written by a spill carrying `ticket`.
  // False (nothing to write) when the tier holds it already (then it is touched) or no
  // entry can be evicted to make room.
  bool Spill(const BlockHash& hash, absl::Span<const int32_t> tokens, uint64_t ticket);
  // Transfers with tickets up to `ticket` were executed by the workers.
  void Confirm(uint64_t ticket);
  // For the block event log (block_pool.h), which tells routers of a block only once its
  // file is written: whether `hash` is held with its spill confirmed (or adopted); every
  // such hash, least recently used first; the hashes that became so since the last call
  // (spills confirmed, blocks adopted); and the hashes Find and Spill dropped from the
  // index since the last call (evicted, files gone or bad).
  bool Announced(const BlockHash& hash) const;
  std::vector<BlockHash> Hashes() const;
  std::vector<BlockHash> TakeAnnounced();
  std::vector<BlockHash> TakeRemoved();

  DiskTierStats Stats() const;
  absl::Status CheckInvariants() const;

 private:
  struct Entry {
    std::vector<int32_t> tokens;  // empty until read from a header (entries Open found)
    uint64_t spill_ticket = 0;    // its files are written once this is confirmed
    uint64_t hold_ticket = 0;     // the newest spill or load into or out of it
    std::list<BlockHash>::iterator lru;
  };

  DiskTier(std::string dir, uint64_t namespace_hash, int32_t num_ranks, int32_t block_size,
           int32_t num_blocks);
  void Index(const std::vector<std::pair<int64_t, BlockHash>>& found);
  bool FilesPresent(const BlockHash& hash) const;
  // The rank-0 header's tokens: NotFound, DataLoss (damaged or foreign) or the tokens.
  absl::StatusOr<std::vector<int32_t>> ReadTokens(const BlockHash& hash) const;
  void RemoveFiles(const BlockHash& hash) const;
  // Removes an entry (and its files when asked), noting it for TakeRemoved.
  void Drop(absl::flat_hash_map<BlockHash, Entry>::iterator it, bool remove_files);
  // Evicts the least recently used entry no unconfirmed transfer holds; false if none.
  bool MakeRoom();
  Entry& Insert(const BlockHash& hash, std::vector<int32_t> tokens, uint64_t spill_ticket);

  const std::string dir_;
  const uint64_t namespace_hash_;
  const int32_t num_ranks_;
  const int32_t block_size_;
  const int32_t num_blocks_;
  absl::flat_hash_map<BlockHash, Entry> index_;
  std::list<BlockHash> lru_;  // least recently used first
  uint64_t confirmed_ = 0;
  DiskTierStats counters_;
  std::vector<BlockHash> removed_;  // TakeRemoved
  std::vector<BlockHash> announced_;  // TakeAnnounced
  std::deque<std::pair<uint64_t, BlockHash>> pending_spills_;  // (ticket, hash), unconfirmed
  absl::flat_hash_set<BlockHash> in_lookup_;  // Find's hits until EndLookup
  static constexpr size_t kMaxBanned = 1 << 16;
  absl::flat_hash_set<BlockHash> banned_;     // Ban
};

}  // namespace folio::cachemgr

#endif  // FOLIO_SERVICES_CACHEMGR_DISK_TIER_H_
