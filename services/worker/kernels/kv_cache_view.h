// KvCacheView: a non-owning view of one layer's paged K and V tensors, as the kernels
// see them. The engine's KvCache owns the memory; see paged_attention.h for the slot
// layout diagram. Plain value type; the view itself is thread-compatible, and kernels
// write through it only to the slots the engine validated for the step.
#ifndef FOLIO_SERVICES_WORKER_KERNELS_KV_CACHE_VIEW_H_
#define FOLIO_SERVICES_WORKER_KERNELS_KV_CACHE_VIEW_H_

#include <cstdint>

namespace folio::worker::kernels {

enum class KvDType : int32_t {
  kF32,
  kF16,  // stored as uint16_t IEEE binary16 bit patterns (see half.h)
};

inline int KvDTypeBytes(KvDType dtype) { return dtype == KvDType::kF32 ? 4 : 2; }
const char* KvDTypeName(KvDType dtype);

struct KvCacheView {
  void* k = nullptr;  // [num_blocks, block_size, num_kv_heads, head_dim]
  void* v = nullptr;  // [num_blocks, block_size, num_kv_heads, head_dim]
  KvDType dtype = KvDType::kF16;
  int64_t num_blocks = 0;
  int32_t block_size = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;

  // Elements from one slot (token) to the next.
  int64_t slot_stride() const { return static_cast<int64_t>(num_kv_heads) * head_dim; }
  // Elements from one block to the next.
  int64_t block_stride() const { return block_size * slot_stride(); }
  int64_t num_slots() const { return num_blocks * block_size; }
};

}  // namespace folio::worker::kernels

#endif  // FOLIO_SERVICES_WORKER_KERNELS_KV_CACHE_VIEW_H_
