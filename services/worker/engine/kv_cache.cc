#include "services/worker/engine/kv_cache.h"

#include <algorithm>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace folio::worker {

int32_t KvCacheShape::num_planes() const {
  if (layer_plane.empty()) return num_layers;
  return 1 + *std::max_element(layer_plane.begin(), layer_plane.end());
}

int64_t KvBytesPerBlock(const KvCacheShape& shape) {
  return int64_t{2} * shape.num_planes() * shape.block_size * shape.num_kv_heads *
         kernels::KvRowBytes(shape.dtype, shape.head_dim);
}

int64_t KvCache::NumBlocksThatFit(const KvCacheShape& shape, int64_t byte_budget) {
  const int64_t per_block = KvBytesPerBlock(shape);
  if (per_block <= 0 || byte_budget <= 0) return 0;
  return byte_budget / per_block;
}

absl::StatusOr<std::unique_ptr<KvCache>> KvCache::Create(const KvCacheShape& shape,
                                                         int64_t byte_budget,
                                                         int64_t max_blocks) {
  if (shape.num_layers <= 0 || shape.num_kv_heads <= 0 || shape.head_dim <= 0 ||
      shape.block_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV cache shape needs positive sizes; got layers=", shape.num_layers,
        " kv_heads=", shape.num_kv_heads, " head_dim=", shape.head_dim,
        " block_size=", shape.block_size));
  }
  if (!shape.layer_plane.empty()) {
    if (static_cast<int32_t>(shape.layer_plane.size()) != shape.num_layers ||
        *std::min_element(shape.layer_plane.begin(), shape.layer_plane.end()) < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "KV cache shape: ", shape.layer_plane.size(), " layer planes for ",
          shape.num_layers, " layers (or a negative plane)"));
    }
  }
  int64_t num_blocks = NumBlocksThatFit(shape, byte_budget);
  if (max_blocks > 0 && num_blocks > max_blocks) num_blocks = max_blocks;
  if (num_blocks <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV cache budget of ", byte_budget, " bytes is less than one block (",
                     KvBytesPerBlock(shape), " bytes)"));
  }
  const int64_t bytes = num_blocks * KvBytesPerBlock(shape);
  // Attention walks one kv head's rows (strided) across scattered blocks, which on 4 KiB
  // pages costs a TLB miss every few rows: the pool is 2 MiB aligned with huge pages asked
  // for (aligned_buffer.h).
  kernels::AlignedBuffer<uint8_t> data =
      kernels::MakeHugePaged<uint8_t>(static_cast<size_t>(bytes), kernels::kHugePageBytes);
  if (data == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate ", bytes, " bytes for ", num_blocks, " KV blocks"));
  }
  return std::unique_ptr<KvCache>(
      new KvCache(shape, num_blocks, std::move(data)));
}

kernels::KvCacheView KvCache::layer(int32_t layer) const {
  CHECK_GE(layer, 0);
  CHECK_LT(layer, shape_.num_layers);
  return plane(shape_.layer_plane.empty() ? layer : shape_.layer_plane[layer]);
}

kernels::KvCacheView KvCache::plane(int32_t plane) const {
  CHECK_GE(plane, 0);
  CHECK_LT(plane, shape_.num_planes());
  const int64_t layer_bytes = num_blocks_ * shape_.block_size * shape_.num_kv_heads *
                              kernels::KvRowBytes(shape_.dtype, shape_.head_dim);
  kernels::KvCacheView view;
  view.k = data_.get() + 2 * plane * layer_bytes;
  view.v = data_.get() + (2 * plane + 1) * layer_bytes;
  view.dtype = shape_.dtype;
  view.num_blocks = num_blocks_;
  view.block_size = shape_.block_size;
  view.num_kv_heads = shape_.num_kv_heads;
  view.head_dim = shape_.head_dim;
  return view;
}

void KvCache::CopyBlockOut(int64_t block, uint8_t* bytes) const {
  ForEachBlockPart(block, [&](uint8_t* part, int64_t offset, int64_t n) {
    std::memcpy(bytes + offset, part, static_cast<size_t>(n));
  });
}

void KvCache::CopyBlockIn(int64_t block, const uint8_t* bytes) {
  ForEachBlockPart(block, [&](uint8_t* part, int64_t offset, int64_t n) {
    std::memcpy(part, bytes + offset, static_cast<size_t>(n));
  });
}

}  // namespace folio::worker
