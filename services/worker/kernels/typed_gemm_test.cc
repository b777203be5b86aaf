// TypedLinear against a double-precision product of the dequantized weights, over
// segments of different block types, a column offset and a pool.
#include "services/worker/kernels/typed_gemm.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "services/worker/kernels/kernel_test_util.h"

namespace folio::worker::kernels {
namespace {

using testing::RandomNormal;

// A toy block type: 4 values per block, an f32 scale and 4 int8s (8 bytes).
void DequantizeToy(const uint8_t* src, int64_t num_blocks, float* out) {
  for (int64_t b = 0; b < num_blocks; ++b, src += 8, out += 4) {
    float d;
    std::memcpy(&d, src, 4);
    for (int j = 0; j < 4; ++j) out[j] = d * static_cast<int8_t>(src[4 + j]);
  }
}
void DequantizeF32(const uint8_t* src, int64_t n, float* out) { std::memcpy(out, src, 4 * n); }

TEST(TypedGemmTest, MatchesDequantizedProduct) {
  const int64_t in = 40, rows = 5;
  std::mt19937 rng(3);
  // Segment 1: 7 toy rows stored 48 values wide; the matrix reads columns [8, 48).
  const int64_t stored = 48, toy_rows = 7;
  std::vector<uint8_t> toy(toy_rows * stored / 4 * 8);
  for (int64_t b = 0; b < toy_rows * stored / 4; ++b) {
    const float d = std::uniform_real_distribution<float>(-0.1f, 0.1f)(rng);
    std::memcpy(toy.data() + 8 * b, &d, 4);
    for (int j = 0; j < 4; ++j) toy[8 * b + 4 + j] = static_cast<uint8_t>(rng());
  }
  // Segment 2: 12 f32 rows.
  const std::vector<float> f32 = RandomNormal(12 * in, 4);
  TypedMatrix w(in);
  w.Append({toy.data() + 8 / 4 * 8, stored / 4 * 8, toy_rows, 4, DequantizeToy, "toy"});
  w.Append({reinterpret_cast<const uint8_t*>(f32.data()), in * 4, 12, 1, DequantizeF32, "f32"});
  ASSERT_EQ(w.out(), 19);
  std::vector<float> dense(w.out() * in);
  for (int64_t o = 0; o < w.out(); ++o) w.RowToF32(o, dense.data() + o * in);
  for (int64_t k = 0; k < in; ++k) EXPECT_EQ(dense[(toy_rows + 2) * in + k], f32[2 * in + k]);

  const std::vector<float> x = RandomNormal(rows * in, 5);
  std::vector<float> y0(rows * 21, 0.5f), y1 = y0;
  ThreadPool pool(2);
  TypedLinear(x.data(), in, rows, w, 0.0f, y0.data(), 21, nullptr);
  TypedLinear(x.data(), in, rows, w, 1.0f, y1.data(), 21, &pool);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < w.out(); ++o) {
      double want = 0;
      for (int64_t k = 0; k < in; ++k) want += double(x[r * in + k]) * dense[o * in + k];
      EXPECT_NEAR(y0[r * 21 + o], want, 1e-4) << r << " " << o;
      EXPECT_FLOAT_EQ(y1[r * 21 + o], y0[r * 21 + o] + 0.5f);
    }
    EXPECT_EQ(y0[r * 21 + 19], 0.5f) << "wrote past out()";
  }
}

}  // namespace
}  // namespace folio::worker::kernels
