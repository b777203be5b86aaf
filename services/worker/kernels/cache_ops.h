// Kernels that write the paged KV cache: storing a step's new K/V rows into their slots,
// and copying whole blocks (copy-on-write). Callers validate slots and block ids first
// (the engine rejects bad steps before any kernel runs); the kernels only DCHECK.
// Stateless functions; concurrent calls must touch disjoint slots.
#ifndef FOLIO_SERVICES_WORKER_KERNELS_CACHE_OPS_H_
#define FOLIO_SERVICES_WORKER_KERNELS_CACHE_OPS_H_

#include <cstdint>

#include "absl/types/span.h"
#include "services/worker/kernels/kv_cache_view.h"

namespace folio::worker::kernels {

// Slot of the token at `pos` in a sequence whose block table is `block_table`:
//   slot = block_table[pos / block_size] * block_size + pos % block_size
inline int64_t SlotForPosition(const int32_t* block_table, int32_t block_size, int64_t pos) {
  return static_cast<int64_t>(block_table[pos / block_size]) * block_size + pos % block_size;
}

// Writes token i's K row k[i * row_stride .. + num_kv_heads * head_dim) and V row
// likewise into slot slots[i] of `kv`, converting to the cache dtype.
void WriteKv(const float* k, const float* v, int64_t row_stride,
             absl::Span<const int64_t> slots, const KvCacheView& kv);

struct BlockCopy {
  int32_t src = 0;
  int32_t dst = 0;
};

// Copies every slot of block src to block dst, K and V, in the order given.
void CopyBlocks(absl::Span<const BlockCopy> copies, const KvCacheView& kv);

}  // namespace folio::worker::kernels

#endif  // FOLIO_SERVICES_WORKER_KERNELS_CACHE_OPS_H_
