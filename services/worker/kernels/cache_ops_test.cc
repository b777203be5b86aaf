#include "services/worker/kernels/cache_ops.h"
#include "services/worker/kernels/cpu_isa.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "services/worker/kernels/half.h"
#include "services/worker/kernels/kv_q8.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace folio::worker::kernels {
namespace {

TEST(HalfTest, RoundTripsEveryHalf) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(f))));
      continue;
    }
    ASSERT_EQ(FloatToHalf(f), h) << std::hex << h;
  }
}

TEST(HalfTest, KnownValues) {
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(1e6f), 0x7c00);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000);  // tie rounds to even
  EXPECT_EQ(HalfToFloat(0x3555), 0.333251953125f);
}

#if defined(__x86_64__)
__attribute__((target("f16c"))) uint16_t F16cFromFloat(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}
__attribute__((target("f16c"))) float F16cToFloat(uint16_t h) { return _cvtsh_ss(h); }

TEST(HalfTest, MatchesF16cBitForBit) {
  if (!HasF16c()) GTEST_SKIP() << "CPU has no F16C";
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 2000000; ++i) {
    uint32_t b = bits(rng);
    float f;
    std::memcpy(&f, &b, sizeof(f));
    if (std::isnan(f)) continue;
    ASSERT_EQ(FloatToHalf(f), F16cFromFloat(f)) << std::hexfloat << f;
  }
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float a = HalfToFloat(static_cast<uint16_t>(h));
    const float b = F16cToFloat(static_cast<uint16_t>(h));
    if (std::isnan(a)) {
      EXPECT_TRUE(std::isnan(b));
    } else {
      ASSERT_EQ(a, b) << std::hex << h;
    }
  }
}
#endif

class CacheOpsTest : public ::testing::TestWithParam<KvDType> {};

TEST_P(CacheOpsTest, WriteKvThenCopyBlocks) {
  const KvDType dtype = GetParam();
  KvCacheView kv;
  kv.dtype = dtype;
  kv.num_blocks = 6;
  kv.block_size = 4;
  kv.num_kv_heads = 2;
  kv.head_dim = 8;
  const int64_t elems = kv.num_blocks * kv.block_stride();
  const int64_t bytes = KvRowBytes(dtype, kv.head_dim) / kv.head_dim;
  std::vector<char> kbuf(elems * bytes, 0), vbuf(elems * bytes, 0);
  kv.k = kbuf.data();
  kv.v = vbuf.data();
  auto read = [&](const std::vector<char>& buf, int64_t i) {
    if (dtype == KvDType::kF32) return reinterpret_cast<const float*>(buf.data())[i];
    return HalfToFloat(reinterpret_cast<const uint16_t*>(buf.data())[i]);
  };

  // Three tokens at positions 3, 4, 5 of a sequence with table {4, 1}.
  const int32_t table[] = {4, 1};
  std::vector<int64_t> slots;
  for (int pos = 3; pos < 6; ++pos) slots.push_back(SlotForPosition(table, kv.block_size, pos));
  EXPECT_EQ(slots, (std::vector<int64_t>{19, 4, 5}));
  const int64_t row_stride = 40;  // wider than a row: rows come from a fused QKV buffer
  std::vector<float> k(3 * row_stride), v(3 * row_stride);
  for (size_t i = 0; i < k.size(); ++i) {
    k[i] = 0.25f * static_cast<float>(i);
    v[i] = -0.5f * static_cast<float>(i);
  }
  WriteKv(k.data(), v.data(), row_stride, slots, kv);
  for (int t = 0; t < 3; ++t) {
    for (int64_t j = 0; j < kv.slot_stride(); ++j) {
      EXPECT_EQ(read(kbuf, slots[t] * kv.slot_stride() + j), k[t * row_stride + j]);
      EXPECT_EQ(read(vbuf, slots[t] * kv.slot_stride() + j), v[t * row_stride + j]);
    }
  }
  // Untouched slots stay zero.
  EXPECT_EQ(read(kbuf, 0), 0.0f);
  EXPECT_EQ(read(vbuf, 3 * kv.block_stride()), 0.0f);

  const BlockCopy copies[] = {{1, 3}, {4, 0}};
  CopyBlocks(copies, kv);
  for (int64_t j = 0; j < kv.block_stride(); ++j) {
    EXPECT_EQ(read(kbuf, 3 * kv.block_stride() + j), read(kbuf, 1 * kv.block_stride() + j));
    EXPECT_EQ(read(vbuf, 3 * kv.block_stride() + j), read(vbuf, 1 * kv.block_stride() + j));
    EXPECT_EQ(read(kbuf, 0 * kv.block_stride() + j), read(kbuf, 4 * kv.block_stride() + j));
  }
  EXPECT_NE(read(kbuf, 3 * kv.block_stride()), 0.0f);
}

TEST(WriteKvTest, F16BitsMatchFloatToHalf) {
  // Values that need rounding, subnormals and out-of-range ones: the vectorised store
  // (F16C, when the CPU has it) must give FloatToHalf's bits exactly.
  KvCacheView kv;
  kv.dtype = KvDType::kF16;
  kv.num_blocks = 1;
  kv.block_size = 2;
  kv.num_kv_heads = 3;
  kv.head_dim = 7;  // 21 values per row: two vectors of 8 and a tail
  std::vector<uint16_t> kbuf(kv.block_stride()), vbuf(kv.block_stride());
  kv.k = kbuf.data();
  kv.v = vbuf.data();
  const int64_t n = kv.slot_stride();
  std::vector<float> k(2 * n), v(2 * n);
  for (int64_t i = 0; i < 2 * n; ++i) {
    k[i] = 1.0f / 3.0f * static_cast<float>(i - 20) * (i % 5 == 0 ? 1e-6f : 1.0f);
    v[i] = i % 7 == 0 ? 70000.0f * static_cast<float>(i % 2 ? 1 : -1) : 0.1f * static_cast<float>(i);
  }
  const std::vector<int64_t> slots = {1, 0};
  WriteKv(k.data(), v.data(), n, slots, kv);
  for (int t = 0; t < 2; ++t) {
    for (int64_t j = 0; j < n; ++j) {
      ASSERT_EQ(kbuf[slots[t] * n + j], FloatToHalf(k[t * n + j])) << t << " " << j;
      ASSERT_EQ(vbuf[slots[t] * n + j], FloatToHalf(v[t * n + j])) << t << " " << j;
    }
  }
}

// kQ8 rows: each (slot, kv head) row is head_dim int8 values and an f32 scale; the
// written values are checked against quantization done here in double precision.
TEST(WriteKvTest, Q8RoundTripWithinHalfAStep) {
  KvCacheView kv;
  kv.dtype = KvDType::kQ8;
  kv.num_blocks = 3;
  kv.block_size = 4;
  kv.num_kv_heads = 3;
  kv.head_dim = 7;  // odd: rows and scales unaligned
  ASSERT_EQ(kv.row_stride(), 11);
  ASSERT_EQ(kv.slot_stride(), 33);
  ASSERT_EQ(kv.block_stride(), 132);
  const int64_t bytes = kv.num_blocks * kv.block_stride();
  std::vector<int8_t> kbuf(bytes, 0), vbuf(bytes, 0);
  kv.k = kbuf.data();
  kv.v = vbuf.data();
  const int hd = kv.head_dim;
  const int width = kv.num_kv_heads * hd;
  const int64_t row_stride = width + 2;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const std::vector<int64_t> slots = {9, 0, 5};
  std::vector<float> k(slots.size() * row_stride), v(k.size());
  for (size_t i = 0; i < k.size(); ++i) {
    const float mag = i % 3 == 0 ? 1e-3f : i % 3 == 1 ? 1.0f : 300.0f;  // per-row magnitudes
    k[i] = mag * normal(rng);
    v[i] = mag * normal(rng);
  }
  for (int d = 0; d < hd; ++d) k[row_stride + hd + d] = 0.0f;  // an all-zero row
  WriteKv(k.data(), v.data(), row_stride, slots, kv);
  for (size_t t = 0; t < slots.size(); ++t) {
    for (int h = 0; h < kv.num_kv_heads; ++h) {
      for (int which = 0; which < 2; ++which) {
        const float* x = (which == 0 ? k : v).data() + t * row_stride + h * hd;
        const int8_t* row = (which == 0 ? kbuf : vbuf).data() + slots[t] * kv.slot_stride() +
                            h * kv.row_stride();
        double amax = 0;
        for (int d = 0; d < hd; ++d) amax = std::max(amax, std::fabs(static_cast<double>(x[d])));
        const float scale = Q8RowScale(row, hd);
        ASSERT_NEAR(scale, amax / 127, amax / 127 * 1e-6) << t << " " << h << " " << which;
        std::vector<float> deq(hd);
        DequantizeQ8Row(row, hd, deq.data());
        bool saw_127 = amax == 0;
        for (int d = 0; d < hd; ++d) {
          ASSERT_LE(std::abs(row[d]), 127);
          saw_127 |= std::abs(row[d]) == 127;
          const double q = amax == 0 ? 0 : std::nearbyint(x[d] / (amax / 127));
          ASSERT_LE(std::fabs(row[d] - q), 1.0) << d;  // a tie may round either way
          ASSERT_LE(std::fabs(deq[d] - x[d]), scale * 0.5001 + 1e-30) << t << " " << h << " " << d;
        }
        EXPECT_TRUE(saw_127) << "the largest value maps to +-127";
      }
    }
  }
  // Slots not written stay zero (values and scales).
  for (int64_t slot : {1, 4, 11}) {
    for (int64_t j = 0; j < kv.slot_stride(); ++j) ASSERT_EQ(kbuf[slot * kv.slot_stride() + j], 0);
  }
}

TEST(CopyBlocksTest, Q8BlocksCopiedByteForByte) {
  KvCacheView kv;
  kv.dtype = KvDType::kQ8;
  kv.num_blocks = 5;
  kv.block_size = 3;
  kv.num_kv_heads = 2;
  kv.head_dim = 16;
  const int64_t bs = kv.block_stride();  // bytes per block per tensor
  ASSERT_EQ(bs, 3 * 2 * (16 + 4));
  std::vector<int8_t> kbuf(kv.num_blocks * bs), vbuf(kbuf.size());
  std::mt19937 rng(3);
  for (auto& b : kbuf) b = static_cast<int8_t>(rng());
  for (auto& b : vbuf) b = static_cast<int8_t>(rng());
  const std::vector<int8_t> k0 = kbuf, v0 = vbuf;
  kv.k = kbuf.data();
  kv.v = vbuf.data();
  const BlockCopy copies[] = {{1, 3}, {4, 0}, {2, 2}};
  CopyBlocks(copies, kv);
  for (int64_t j = 0; j < bs; ++j) {
    ASSERT_EQ(kbuf[3 * bs + j], k0[1 * bs + j]) << j;
    ASSERT_EQ(vbuf[3 * bs + j], v0[1 * bs + j]) << j;
    ASSERT_EQ(kbuf[0 * bs + j], k0[4 * bs + j]) << j;
    ASSERT_EQ(vbuf[0 * bs + j], v0[4 * bs + j]) << j;
    for (int b : {1, 2, 4}) {  // sources and the self-copy untouched
      ASSERT_EQ(kbuf[b * bs + j], k0[b * bs + j]);
      ASSERT_EQ(vbuf[b * bs + j], v0[b * bs + j]);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CacheOpsTest, ::testing::Values(KvDType::kF32, KvDType::kF16),
                         [](const auto& info) { return KvDTypeName(info.param); });

}  // namespace
}  // namespace folio::worker::kernels
