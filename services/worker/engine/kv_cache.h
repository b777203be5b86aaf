// KvCache: the worker's paged KV tensors for every layer, allocated once from a byte
// budget. Per plane, K and V are each [num_blocks, block_size, num_kv_heads, head_dim]
// (layout diagram in kernels/paged_attention.h); block id b names the same slot range
// in every plane, so
//   bytes_per_block = 2 * num_planes * block_size * num_kv_heads * row_bytes,
// row_bytes = head_dim * dtype bytes (head_dim + 4 for kQ8: int8 values and a scale).
// A layer's KV lives in one plane: layer l in plane l (num_planes = num_layers), or, with
// window layer groups (kv_layer_groups.h), in plane layer_plane[l] of the blocks its
// group's table names (several layers share a plane, never a block).
// The memory is zeroed at creation and 2 MiB aligned (transparent huge pages where
// the system allows them). KvCache owns it; views handed out stay valid for
// its lifetime. Thread-compatible: the step thread writes; nothing else touches it.
#ifndef FOLIO_SERVICES_WORKER_ENGINE_KV_CACHE_H_
#define FOLIO_SERVICES_WORKER_ENGINE_KV_CACHE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "glog/logging.h"
#include "services/worker/kernels/aligned_buffer.h"
#include "services/worker/kernels/kv_cache_view.h"

namespace folio::worker {

struct KvCacheShape {
  int32_t num_layers = 0;
  int32_t num_kv_heads = 0;  // on this rank
  int32_t head_dim = 0;
  int32_t block_size = 16;   // tokens per block
  kernels::KvDType dtype = kernels::KvDType::kF16;
  // Per layer: its plane (kv_layer_groups.h); empty: layer l in plane l.
  std::vector<int32_t> layer_plane;

  int32_t num_planes() const;
};

// 2 * num_planes * block_size * num_kv_heads * KvRowBytes(dtype, head_dim).
int64_t KvBytesPerBlock(const KvCacheShape& shape);

class KvCache {
 public:
  // How many whole blocks of `shape` fit in `byte_budget` bytes.
  static int64_t NumBlocksThatFit(const KvCacheShape& shape, int64_t byte_budget);

  // Allocates NumBlocksThatFit(shape, byte_budget) blocks, capped at max_blocks when
  // max_blocks > 0. InvalidArgument for a non-positive dimension or a budget too small
  // for one block; ResourceExhausted when the allocation fails.
  static absl::StatusOr<std::unique_ptr<KvCache>> Create(const KvCacheShape& shape,
                                                         int64_t byte_budget,
                                                         int64_t max_blocks = 0);

  const KvCacheShape& shape() const { return shape_; }
  int64_t num_blocks() const { return num_blocks_; }
  int64_t bytes_per_block() const { return KvBytesPerBlock(shape_); }
  int64_t size_bytes() const { return num_blocks_ * bytes_per_block(); }

  // Layer `layer`'s K and V tensors (its plane's), for the kernels.
  kernels::KvCacheView layer(int32_t layer) const;
  // Plane `plane`'s K and V tensors.
  kernels::KvCacheView plane(int32_t plane) const;

  // Block `block`'s bytes in every layer, K then V per layer, to or from `bytes`
  // (bytes_per_block() of them): how the host offload tier stores a block
  // (host_kv_segment.h). Requires block in [0, num_blocks()).
  void CopyBlockOut(int64_t block, uint8_t* bytes) const;
  void CopyBlockIn(int64_t block, const uint8_t* bytes);

  // All K/V bytes (for tests that check a rejected step wrote nothing).
  absl::Span<const uint8_t> bytes() const {
    return absl::MakeConstSpan(data_.get(), static_cast<size_t>(size_bytes()));
  }

 private:
  KvCache(const KvCacheShape& shape, int64_t num_blocks, kernels::AlignedBuffer<uint8_t> data)
      : shape_(shape), num_blocks_(num_blocks), data_(std::move(data)) {}

  // Calls fn(part, offset, bytes) for block `block`'s K and V bytes in every layer, in
  // the host tier's order: `part` points into the pool, `offset` into the block's copy.
  template <typename Fn>
  void ForEachBlockPart(int64_t block, Fn fn) const {
    CHECK_GE(block, 0);
    CHECK_LT(block, num_blocks_);
    const int64_t per_layer = shape_.block_size * shape_.num_kv_heads *
                              kernels::KvRowBytes(shape_.dtype, shape_.head_dim);
    const int64_t layer_bytes = num_blocks_ * per_layer;
    for (int64_t part = 0; part < 2 * shape_.num_planes(); ++part) {
      fn(data_.get() + part * layer_bytes + block * per_layer, part * per_layer, per_layer);
    }
  }

  const KvCacheShape shape_;
  const int64_t num_blocks_;
  // Plane p's K at p * 2 * plane_bytes, its V right after; plane_bytes =
  // num_blocks * block_size * num_kv_heads * row bytes.
  kernels::AlignedBuffer<uint8_t> data_;
};

}  // namespace folio::worker

#endif  // FOLIO_SERVICES_WORKER_ENGINE_KV_CACHE_H_
