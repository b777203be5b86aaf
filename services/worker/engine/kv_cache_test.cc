#include "services/worker/engine/kv_cache.h"

#include <cstdint>

#include "gtest/gtest.h"

namespace folio::worker {
namespace {

KvCacheShape Shape(kernels::KvDType dtype) {
  KvCacheShape s;
  s.num_layers = 5;
  s.num_kv_heads = 4;
  s.head_dim = 8;
  s.block_size = 16;
  s.dtype = dtype;
  return s;
}

TEST(KvCacheTest, BytesPerBlockFollowsTheFormula) {
  // 2 (K and V) * 5 layers * 16 slots * 4 heads * 8 dims * 2 bytes.
  EXPECT_EQ(KvBytesPerBlock(Shape(kernels::KvDType::kF16)), 2 * 5 * 16 * 4 * 8 * 2);
  EXPECT_EQ(KvBytesPerBlock(Shape(kernels::KvDType::kF32)), 2 * 5 * 16 * 4 * 8 * 4);
  // q8_0: 8 int8 values and a 4-byte scale per row.
  EXPECT_EQ(KvBytesPerBlock(Shape(kernels::KvDType::kQ8)), 2 * 5 * 16 * 4 * (8 + 4));
}

TEST(KvCacheTest, Q8LayerViewsTileTheAllocation) {
  const KvCacheShape shape = Shape(kernels::KvDType::kQ8);
  absl::StatusOr<std::unique_ptr<KvCache>> kv = KvCache::Create(shape, 7 * KvBytesPerBlock(shape));
  ASSERT_TRUE(kv.ok());
  const uint8_t* base = (*kv)->bytes().data();
  const int64_t tensor_bytes = 7 * 16 * 4 * (8 + 4);
  for (int32_t l = 0; l < shape.num_layers; ++l) {
    kernels::KvCacheView v = (*kv)->layer(l);
    EXPECT_EQ(static_cast<uint8_t*>(v.k) - base, (2 * l) * tensor_bytes);
    EXPECT_EQ(static_cast<uint8_t*>(v.v) - base, (2 * l + 1) * tensor_bytes);
    EXPECT_EQ(v.block_stride(), 16 * 4 * (8 + 4));  // int8 elements = bytes
  }
  EXPECT_EQ((*kv)->size_bytes(), 2 * shape.num_layers * tensor_bytes);
}

TEST(KvCacheTest, AllocatesWhatFitsInTheBudget) {
  const KvCacheShape shape = Shape(kernels::KvDType::kF16);
  const int64_t per_block = KvBytesPerBlock(shape);
  EXPECT_EQ(KvCache::NumBlocksThatFit(shape, 10 * per_block + per_block - 1), 10);
  absl::StatusOr<std::unique_ptr<KvCache>> kv = KvCache::Create(shape, 10 * per_block + 5);
  ASSERT_TRUE(kv.ok()) << kv.status();
  EXPECT_EQ((*kv)->num_blocks(), 10);
  EXPECT_EQ((*kv)->size_bytes(), 10 * per_block);
  for (uint8_t b : (*kv)->bytes()) ASSERT_EQ(b, 0);

  absl::StatusOr<std::unique_ptr<KvCache>> capped = KvCache::Create(shape, 10 * per_block, 3);
  ASSERT_TRUE(capped.ok());
  EXPECT_EQ((*capped)->num_blocks(), 3);
}

TEST(KvCacheTest, LayerViewsTileTheAllocationWithoutOverlap) {
  const KvCacheShape shape = Shape(kernels::KvDType::kF32);
  absl::StatusOr<std::unique_ptr<KvCache>> kv = KvCache::Create(shape, 7 * KvBytesPerBlock(shape));
  ASSERT_TRUE(kv.ok());
  const uint8_t* base = (*kv)->bytes().data();
  const int64_t tensor_bytes = 7 * 16 * 4 * 8 * 4;
  for (int32_t l = 0; l < shape.num_layers; ++l) {
    kernels::KvCacheView v = (*kv)->layer(l);
    EXPECT_EQ(static_cast<uint8_t*>(v.k) - base, (2 * l) * tensor_bytes);
    EXPECT_EQ(static_cast<uint8_t*>(v.v) - base, (2 * l + 1) * tensor_bytes);
    EXPECT_EQ(v.num_blocks, 7);
    EXPECT_EQ(v.block_stride(), 16 * 4 * 8);
  }
}

TEST(KvCacheTest, RejectsBadShapesAndTinyBudgets) {
  KvCacheShape shape = Shape(kernels::KvDType::kF16);
  EXPECT_EQ(KvCache::Create(shape, KvBytesPerBlock(shape) - 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  shape.block_size = 0;
  EXPECT_EQ(KvCache::Create(shape, 1 << 20).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace folio::worker
