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
  // 8-bit (the worker's --kv_dtype=q8_0): each row (one token, one kv head) is head_dim
  // int8 values followed by its f32 scale (4 bytes, unaligned), value = scale * q with
  // scale = max|x| / 127 (see kv_q8.h). At head_dim 64 a row takes 68 bytes, as much as
  // llama.cpp's q8_0 (two 32-value blocks of 34 bytes); one scale per row keeps the
  // scale out of the kernels' inner loops (scores and weights are scaled once per key).
  kQ8,
};

// Elements (of the stored type: float, uint16_t or int8_t) from one kv head's row to the
// next in a slot: head_dim, plus the 4 scale bytes for kQ8.
inline int KvRowStride(KvDType dtype, int head_dim) {
  return dtype == KvDType::kQ8 ? head_dim + 4 : head_dim;
}
// Bytes of one row (one token, one kv head) in the cache.
inline int64_t KvRowBytes(KvDType dtype, int head_dim) {
  switch (dtype) {
    case KvDType::kF32:
      return int64_t{4} * head_dim;
    case KvDType::kF16:
      return int64_t{2} * head_dim;
    case KvDType::kQ8:
      return int64_t{head_dim} + 4;
  }
  return 0;
}
const char* KvDTypeName(KvDType dtype);  // "f32", "f16", "q8_0"
// Parses a --kv_dtype value ("f16", "f32", "q8_0"); false for anything else.
bool ParseKvDType(const char* name, KvDType* dtype);

struct KvCacheView {
  // [num_blocks, block_size, num_kv_heads, row_stride()] elements of the stored type
  // (row_stride() = head_dim, or head_dim int8 + 4 scale bytes for kQ8).
  void* k = nullptr;
  void* v = nullptr;  // laid out like k
  KvDType dtype = KvDType::kF16;
  int64_t num_blocks = 0;
  int32_t block_size = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;

  // Elements from one kv head's row to the next within a slot.
  int64_t row_stride() const { return KvRowStride(dtype, head_dim); }
  // Elements from one slot (token) to the next.
  int64_t slot_stride() const { return static_cast<int64_t>(num_kv_heads) * row_stride(); }
  // Elements from one block to the next.
  int64_t block_stride() const { return block_size * slot_stride(); }
  int64_t num_slots() const { return num_blocks * block_size; }
};

}  // namespace folio::worker::kernels

#endif  // FOLIO_SERVICES_WORKER_KERNELS_KV_CACHE_VIEW_H_
