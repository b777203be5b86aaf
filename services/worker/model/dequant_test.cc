#include "services/worker/model/dequant.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include <gtest/gtest.h>

namespace folio::worker {
namespace {

TEST(DequantTest, F16KnownValues) {
  EXPECT_EQ(F16ToF32(0x3C00), 1.0f);
  EXPECT_EQ(F16ToF32(0xC000), -2.0f);
  EXPECT_EQ(F16ToF32(0x3555), 0.333251953125f);
  EXPECT_EQ(F16ToF32(0x7BFF), 65504.0f);
  EXPECT_EQ(F16ToF32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(F16ToF32(0x03FF), std::ldexp(1023.0f, -24));  // largest subnormal
  EXPECT_EQ(F16ToF32(0x0400), std::ldexp(1.0f, -14));  // smallest normal
  EXPECT_EQ(F16ToF32(0x7C00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(F16ToF32(0xFC00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(F16ToF32(0x7E00)));
  EXPECT_TRUE(std::signbit(F16ToF32(0x8000)));
  EXPECT_EQ(F16ToF32(0x8000), 0.0f);
}

TEST(DequantTest, F32ToF16RoundsToNearestEven) {
  EXPECT_EQ(F32ToF16(1.0f), 0x3C00);
  EXPECT_EQ(F32ToF16(-2.0f), 0xC000);
  EXPECT_EQ(F32ToF16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);      // tie -> even
  EXPECT_EQ(F32ToF16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);  // tie -> even (up)
  EXPECT_EQ(F32ToF16(65504.0f), 0x7BFF);
  EXPECT_EQ(F32ToF16(65519.0f), 0x7BFF);
  EXPECT_EQ(F32ToF16(65520.0f), 0x7C00);  // rounds up to inf
  EXPECT_EQ(F32ToF16(1e10f), 0x7C00);
  EXPECT_EQ(F32ToF16(-std::numeric_limits<float>::infinity()), 0xFC00);
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -25)), 0x0000);         // tie -> even (zero)
  EXPECT_EQ(F32ToF16(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -14)), 0x0400);
  EXPECT_EQ(F32ToF16(std::ldexp(1023.5f, -24)), 0x0400);  // tie, 1023 odd -> up
  EXPECT_EQ(F32ToF16(-0.0f), 0x8000);
  EXPECT_EQ(F32ToF16(std::nanf("")) & 0x7C00, 0x7C00);
  EXPECT_NE(F32ToF16(std::nanf("")) & 0x03FF, 0);
}

TEST(DequantTest, F16RoundTripsEveryFiniteValue) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0) continue;  // NaN
    ASSERT_EQ(F32ToF16(F16ToF32(static_cast<uint16_t>(h))), h) << std::hex << h;
  }
}

TEST(DequantTest, BF16KnownValues) {
  EXPECT_EQ(BF16ToF32(0x3F80), 1.0f);
  EXPECT_EQ(BF16ToF32(0xC040), -3.0f);
  EXPECT_EQ(BF16ToF32(0x4049), 3.140625f);
  EXPECT_EQ(F32ToBF16(3.14159265f), 0x4049);
  EXPECT_EQ(F32ToBF16(1.0f), 0x3F80);
  // 1 + 2^-8 is halfway between bf16 1.0 and 1.0078125: ties to even (1.0).
  EXPECT_EQ(F32ToBF16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);
  EXPECT_EQ(F32ToBF16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82);
  EXPECT_TRUE(std::isnan(BF16ToF32(F32ToBF16(std::nanf("")))));
}

TEST(DequantTest, NamesAndSizes) {
  EXPECT_STREQ(DTypeName(DType::kF32), "f32");
  EXPECT_STREQ(DTypeName(DType::kF16), "f16");
  EXPECT_STREQ(DTypeName(DType::kBF16), "bf16");
  EXPECT_STREQ(DTypeName(DType::kQ8_0), "q8_0");
  EXPECT_EQ(DTypeBytes(DType::kF32, 10), 40);
  EXPECT_EQ(DTypeBytes(DType::kF16, 10), 20);
  EXPECT_EQ(DTypeBytes(DType::kBF16, 10), 20);
  EXPECT_EQ(DTypeBytes(DType::kQ8_0, 64), 68);
  TensorView t;
  EXPECT_EQ(t.num_elements(), 0);
  t.shape = {7};
  EXPECT_EQ(t.num_elements(), 7);
  t.shape = {3, 5};
  EXPECT_EQ(t.num_elements(), 15);
}

TEST(DequantTest, F16AndBF16Rows) {
  // [2, 3] f16: row 0 = {1, -2, 0.5}, row 1 = {65504, 2^-24, -0}.
  const uint16_t f16[] = {0x3C00, 0xC000, 0x3800, 0x7BFF, 0x0001, 0x8000};
  TensorView t{DType::kF16, f16, {2, 3}};
  float row[3];
  RowToF32(t, 1, row);
  EXPECT_EQ(row[0], 65504.0f);
  EXPECT_EQ(row[1], std::ldexp(1.0f, -24));
  EXPECT_EQ(row[2], 0.0f);
  EXPECT_EQ(ToF32(t), (std::vector<float>{1, -2, 0.5f, 65504, std::ldexp(1.0f, -24), 0}));

  const uint16_t bf16[] = {0x3F80, 0xC040, 0x4049, 0x0000};
  TensorView b{DType::kBF16, bf16, {2, 2}};
  RowToF32(b, 1, row);
  EXPECT_EQ(row[0], 3.140625f);
  EXPECT_EQ(row[1], 0.0f);
}

TEST(DequantTest, Q8_0Rows) {
  // Two rows of 64 values (2 blocks each). Block k of row r has scale d = 0.5 * (k+1)
  // (exact in f16) and quants q[i] = i - 16 + r.
  std::vector<uint8_t> data;
  const uint16_t scales[] = {0x3800 /*0.5*/, 0x3C00 /*1.0*/};
  for (int r = 0; r < 2; ++r) {
    for (int k = 0; k < 2; ++k) {
      data.push_back(scales[k] & 0xFF);
      data.push_back(scales[k] >> 8);
      for (int i = 0; i < 32; ++i) data.push_back(static_cast<uint8_t>(int8_t(i - 16 + r)));
    }
  }
  ASSERT_EQ(data.size(), 2u * 2 * 34);
  // Offset by one byte to check that unaligned blocks are read correctly.
  std::vector<uint8_t> unaligned(1 + data.size());
  std::memcpy(unaligned.data() + 1, data.data(), data.size());
  TensorView t{DType::kQ8_0, unaligned.data() + 1, {2, 64}};
  std::vector<float> row(64);
  RowToF32(t, 1, row.data());
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(row[i], 0.5f * (i - 15)) << i;
    EXPECT_EQ(row[32 + i], 1.0f * (i - 15)) << i;
  }
  const std::vector<float> all = ToF32(t);
  ASSERT_EQ(all.size(), 128u);
  EXPECT_EQ(all[0], 0.5f * -16);
  EXPECT_EQ(all[127], 16.0f);
}

TEST(DequantTest, AppendFromF32RoundTrips) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> x(96);
  for (float& v : x) v = normal(rng);
  x[5] = 0.1f;  // the block maximum, exactly representable after quantization

  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0}) {
    std::vector<uint8_t> bytes;
    AppendFromF32(dtype, x.data(), 96, &bytes);
    ASSERT_EQ(static_cast<int64_t>(bytes.size()), DTypeBytes(dtype, 96));
    const std::vector<float> back = ToF32(TensorView{dtype, bytes.data(), {3, 32}});
    for (size_t i = 0; i < x.size(); ++i) {
      float tol = 0;
      switch (dtype) {
        case DType::kF32: tol = 0; break;
        case DType::kF16: tol = std::fabs(x[i]) * 1e-3f + 1e-7f; break;
        case DType::kBF16: tol = std::fabs(x[i]) * 8e-3f; break;
        case DType::kQ8_0: tol = 0.1f / 127 * 0.6f; break;  // half a step + scale rounding
        default: FAIL() << "not written by AppendFromF32";
      }
      ASSERT_NEAR(back[i], x[i], tol) << DTypeName(dtype) << " element " << i;
    }
  }
  // All-zero q8_0 blocks get scale 0 and dequantize to exact zeros.
  std::vector<float> zeros(32, 0.0f);
  std::vector<uint8_t> bytes;
  AppendFromF32(DType::kQ8_0, zeros.data(), 32, &bytes);
  EXPECT_EQ(ToF32(TensorView{DType::kQ8_0, bytes.data(), {32}}), zeros);
}

}  // namespace
}  // namespace folio::worker
