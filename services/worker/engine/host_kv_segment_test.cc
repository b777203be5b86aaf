#include "services/worker/engine/host_kv_segment.h"

#include <unistd.h>

#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "services/worker/engine/kv_cache.h"

namespace folio::worker {
namespace {

class HostKvSegmentTest : public ::testing::Test {
 protected:
  void TearDown() override { EXPECT_TRUE(HostKvSegment::Unlink(name_).ok()); }
  const std::string name_ = "folio-segment-test-" + std::to_string(getpid());
};

TEST_F(HostKvSegmentTest, AReopenedSegmentKeepsItsIdAndItsBytes) {
  const int64_t budget = HostKvSegment::kHeaderBytes + 10 * 1000 + 999;
  auto first = HostKvSegment::Open(name_, budget, 1000, "model-a");
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ((*first)->num_slots(), 10);
  EXPECT_FALSE((*first)->reused());
  std::memset((*first)->slot(9), 0xab, 1000);
  const std::string id = (*first)->id();
  first->reset();  // the worker process ends; the segment stays

  auto again = HostKvSegment::Open(name_, budget, 1000, "model-a");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE((*again)->reused());
  EXPECT_EQ((*again)->id(), id);
  EXPECT_EQ((*again)->slot(9)[0], 0xab);
  EXPECT_EQ((*again)->slot(9)[999], 0xab);
}

TEST_F(HostKvSegmentTest, AnotherModelOrGeometryMakesItAnew) {
  const int64_t budget = HostKvSegment::kHeaderBytes + 4 * 512;
  auto a = HostKvSegment::Open(name_, budget, 512, "model-a");
  ASSERT_TRUE(a.ok());
  const std::string id = (*a)->id();
  a->reset();
  auto b = HostKvSegment::Open(name_, budget, 512, "model-b");
  ASSERT_TRUE(b.ok());
  EXPECT_FALSE((*b)->reused());
  EXPECT_NE((*b)->id(), id);
  const std::string id_b = (*b)->id();
  b->reset();
  auto c = HostKvSegment::Open(name_, budget, 256, "model-b");  // another block size
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE((*c)->reused());
  EXPECT_NE((*c)->id(), id_b);
  EXPECT_EQ((*c)->num_slots(), 8);
}

TEST_F(HostKvSegmentTest, ASecondOpenWhileOneHoldsItIsRefused) {
  const int64_t budget = HostKvSegment::kHeaderBytes + 4 * 512;
  auto a = HostKvSegment::Open(name_, budget, 512, "m");
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = HostKvSegment::Open(name_, budget, 512, "m");
  EXPECT_EQ(b.status().code(), absl::StatusCode::kFailedPrecondition) << b.status();
  a->reset();
  EXPECT_TRUE(HostKvSegment::Open(name_, budget, 512, "m").ok()) << "free again once closed";
}

TEST_F(HostKvSegmentTest, BadNamesAndBudgetsAreRefused) {
  for (const std::string bad : {"", "a/b", ".hidden", "sp ace"}) {
    EXPECT_EQ(HostKvSegment::Open(bad, 1 << 20, 512, "m").status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
  EXPECT_EQ(HostKvSegment::Open(name_, HostKvSegment::kHeaderBytes + 100, 512, "m").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(KvCacheBlockCopyTest, ABlockCopiedOutAndInIsBitExactInEveryLayer) {
  KvCacheShape shape{.num_layers = 3, .num_kv_heads = 2, .head_dim = 8, .block_size = 4,
                     .dtype = kernels::KvDType::kQ8};
  auto kv = KvCache::Create(shape, 5 * KvBytesPerBlock(shape));
  ASSERT_TRUE(kv.ok());
  // Fill block 1 of every layer with a pattern through the views.
  const int64_t block_bytes = shape.block_size * shape.num_kv_heads * (shape.head_dim + 4);
  for (int32_t l = 0; l < shape.num_layers; ++l) {
    kernels::KvCacheView v = (*kv)->layer(l);
    for (int64_t i = 0; i < block_bytes; ++i) {
      static_cast<uint8_t*>(v.k)[block_bytes + i] = static_cast<uint8_t>(l * 31 + i);
      static_cast<uint8_t*>(v.v)[block_bytes + i] = static_cast<uint8_t>(l * 17 + i * 3);
    }
  }
  std::vector<uint8_t> host((*kv)->bytes_per_block());
  (*kv)->CopyBlockOut(1, host.data());
  (*kv)->CopyBlockIn(3, host.data());
  for (int32_t l = 0; l < shape.num_layers; ++l) {
    kernels::KvCacheView v = (*kv)->layer(l);
    EXPECT_EQ(std::memcmp(static_cast<uint8_t*>(v.k) + block_bytes,
                          static_cast<uint8_t*>(v.k) + 3 * block_bytes, block_bytes), 0);
    EXPECT_EQ(std::memcmp(static_cast<uint8_t*>(v.v) + block_bytes,
                          static_cast<uint8_t*>(v.v) + 3 * block_bytes, block_bytes), 0);
    // Blocks around it untouched.
    EXPECT_EQ(static_cast<uint8_t*>(v.k)[2 * block_bytes], 0);
    EXPECT_EQ(static_cast<uint8_t*>(v.v)[4 * block_bytes], 0);
  }
}

}  // namespace
}  // namespace folio::worker
