// Strong identifier types and small value types shared by the cache manager's classes.
// Plain values; thread-compatible.
#ifndef FOLIO_SERVICES_CACHEMGR_TYPES_H_
#define FOLIO_SERVICES_CACHEMGR_TYPES_H_

#include <compare>
#include <cstdint>
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

// KV moving between the pool and the host offload tier (host_tier.h), for the workers
// to run in the order given, before the step's block copies: a store copies pool block
// `block` into host slot `host_slot`, a load copies the slot into the block.
struct BlockTransfer {
  enum class Kind { kStore, kLoad };
  Kind kind = Kind::kStore;
  BlockId block;
  int32_t host_slot = 0;
  uint64_t ticket = 0;  // stores: the host tier's ticket (StepRequest::transfers_done)
  bool operator==(const BlockTransfer&) const = default;
};

}  // namespace folio::cachemgr

#endif  // FOLIO_SERVICES_CACHEMGR_TYPES_H_
