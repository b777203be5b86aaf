// Strong identifier types and small value types shared by the cache manager's classes.
// Plain values; thread-compatible.
#ifndef FOLIO_SERVICES_CACHEMGR_TYPES_H_
#define FOLIO_SERVICES_CACHEMGR_TYPES_H_

#include <compare>
#include <cstdint>
#include <vector>
#include <utility>

namespace folio::cachemgr {

// Index of a physical KV block in the pool: [0, num_blocks).
struct BlockId {
  int32_t value = -1;
  auto operator<=>(const BlockId&) const = default;
  template <typename H>
  friend H AbslHashValue(H h, BlockId id) {
    return H::combine(std::move(h), id.value);
  }
};

// A sequence id, assigned by the scheduler.
struct SeqId {
  uint64_t value = 0;
  auto operator<=>(const SeqId&) const = default;
  template <typename H>
  friend H AbslHashValue(H h, SeqId id) {
    return H::combine(std::move(h), id.value);
  }
};

// A block copy the worker must run before the step that writes into `dst`
// (copy-on-write, or a baseline fork that shares nothing).
struct BlockCopy {
  BlockId src;
  BlockId dst;
  bool operator==(const BlockCopy&) const = default;
};

// KV moving between the pool and the offload tiers (host_tier.h, disk_tier.h), for the
// workers to run in the order given, before the step's block copies: a store copies pool
// block `block` into host slot `host_slot`, a load copies the slot into the block; a
// spill writes host slot `host_slot` to the disk file of block hash `hash` (its tokens
// go in the file's header), a disk load reads that file into pool block `block`.
struct BlockTransfer {
  enum class Kind { kStore, kLoad, kSpill, kLoadDisk };
  Kind kind = Kind::kStore;
  BlockId block;
  int32_t host_slot = 0;
  // The host tier's ticket (StepRequest::transfers_done): stores, spills, disk loads.
  uint64_t ticket = 0;
  uint64_t hash_hi = 0;  // spills, disk loads
  uint64_t hash_lo = 0;
  std::vector<int32_t> tokens;  // spills
  bool operator==(const BlockTransfer&) const = default;
};

}  // namespace folio::cachemgr

#endif  // FOLIO_SERVICES_CACHEMGR_TYPES_H_
