// Sequence: the cache manager's record of one sequence. Owned by KvCacheManager and
// changed only by the allocation policy, except that KvCacheManager resolves pending
// tokens (`pending`). Thread-compatible.
#ifndef FOLIO_SERVICES_CACHEMGR_SEQUENCE_H_
#define FOLIO_SERVICES_CACHEMGR_SEQUENCE_H_

#include <cstdint>
#include <vector>

#include "services/cachemgr/block_hash.h"
#include "services/cachemgr/types.h"

namespace folio::cachemgr {

// The blocks of one window layer group (paged_policy.h): layers whose queries see only
// the last `window` positions. blocks[j] holds logical block first_block + j; the blocks
// before first_block went back to the pool once no later query could attend to them.
struct WindowTable {
  int32_t first_block = 0;
  std::vector<BlockId> blocks;
};

struct Sequence {
  SeqId id;
  int32_t max_len = 0;
  std::vector<int32_t> tokens;     // every token granted so far, in position order
  std::vector<BlockId> table;      // logical block i -> physical block; only the last
                                   // entry may be partly filled
  int32_t num_computed = 0;        // tokens whose KV the scheduler reported computed
  std::vector<BlockHash> hashes;   // chained hashes of the first hashes.size() blocks
  // The window layer groups' tables, one per group (CacheConfig::windows); `table` is the
  // full-attention layers'. Each covers the same tokens as `table` from its first_block.
  std::vector<WindowTable> windows;
  // Positions whose token was granted as kPendingToken and not resolved yet, ascending.
  // Kept by KvCacheManager (the only field the policies leave alone).
  std::vector<int32_t> pending;
  // Contiguous policy only: the reserved run [run_start, run_start + run_blocks).
  int32_t run_start = -1;
  int32_t run_blocks = 0;

  int32_t num_tokens() const { return static_cast<int32_t>(tokens.size()); }
};

}  // namespace folio::cachemgr

#endif  // FOLIO_SERVICES_CACHEMGR_SEQUENCE_H_
