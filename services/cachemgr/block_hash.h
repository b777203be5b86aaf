// Content hashes of full KV blocks for prefix caching. A block's hash covers its own
// token ids and, through `parent`, every token before it, so equal hashes mean equal
// prefixes (the pool also verifies the stored ids on a hit, so a collision can never
// hand out the wrong KV). Pure functions; thread-safe.
#ifndef FOLIO_SERVICES_CACHEMGR_BLOCK_HASH_H_
#define FOLIO_SERVICES_CACHEMGR_BLOCK_HASH_H_

#include <climits>
#include <compare>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/types/span.h"

namespace folio::cachemgr {

struct BlockHash {
  uint64_t hi = 0;
  uint64_t lo = 0;
  auto operator<=>(const BlockHash&) const = default;
  template <typename H>
  friend H AbslHashValue(H h, const BlockHash& b) {
    return H::combine(std::move(h), b.hi, b.lo);
  }
};

// The hash of the block before the first one.
inline constexpr BlockHash kRootBlockHash{0x6a09e667f3bcc908ULL, 0xbb67ae8584caa73bULL};

// Hash of a full block holding `tokens`, chained from its parent's hash.
BlockHash HashBlock(const BlockHash& parent, absl::Span<const int32_t> tokens);

// The chained hashes of the first `max_blocks` full blocks of `tokens` (a partial last
// block is left out), exactly as the cache manager computes them when it caches the
// blocks of a sequence holding these tokens: what a router predicts hits with.
std::vector<BlockHash> HashFullBlocks(absl::Span<const int32_t> tokens, int32_t block_size,
                                      int32_t max_blocks = INT32_MAX);

}  // namespace folio::cachemgr

#endif  // FOLIO_SERVICES_CACHEMGR_BLOCK_HASH_H_
