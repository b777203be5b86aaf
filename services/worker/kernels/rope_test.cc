// The NEOX layout and the scaled frequencies of RoPE against double-precision loops
// (elementwise_test.cc covers the plain interleaved layout).
#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "services/worker/kernels/kernel_test_util.h"
#include "services/worker/kernels/rope.h"

namespace folio::worker::kernels {
namespace {

using testing::RandomNormal;

void ExpectRotated(RopeLayout layout, float freq_scale, const std::vector<float>* factors) {
  const int heads = 2, head_dim = 16, rows = 3, stride = heads * head_dim + 3;
  const float theta = 500000.0f;
  std::vector<float> x = RandomNormal(rows * stride, 5);
  const std::vector<float> orig = x;
  const int32_t positions[] = {0, 9, 300};
  RopeParams p{.theta = theta, .freq_scale = freq_scale,
               .freq_factors = factors != nullptr ? factors->data() : nullptr,
               .layout = layout};
  ApplyRope(x.data(), stride, rows, positions, heads, head_dim, p);
  for (int r = 0; r < rows; ++r) {
    for (int h = 0; h < heads; ++h) {
      for (int q = 0; q < head_dim / 2; ++q) {
        double angle = positions[r] * std::pow(double(theta), -2.0 * q / head_dim);
        if (factors != nullptr) angle /= (*factors)[q];
        angle *= freq_scale;
        const int base = r * stride + h * head_dim;
        const int i0 = layout == RopeLayout::kNeox ? base + q : base + 2 * q;
        const int i1 = layout == RopeLayout::kNeox ? base + q + head_dim / 2 : base + 2 * q + 1;
        const double c = std::cos(angle), s = std::sin(angle);
        EXPECT_NEAR(x[i0], orig[i0] * c - orig[i1] * s, 2e-4) << r << " " << h << " " << q;
        EXPECT_NEAR(x[i1], orig[i0] * s + orig[i1] * c, 2e-4) << r << " " << h << " " << q;
      }
    }
    for (int i = heads * head_dim; i < stride; ++i) {
      EXPECT_EQ(x[r * stride + i], orig[r * stride + i]) << "touched past the heads";
    }
  }
}

TEST(RopeTest, NeoxRotatesHalvesApart) { ExpectRotated(RopeLayout::kNeox, 1.0f, nullptr); }

TEST(RopeTest, LinearScalingScalesPositions) {
  ExpectRotated(RopeLayout::kInterleaved, 0.25f, nullptr);
  ExpectRotated(RopeLayout::kNeox, 0.5f, nullptr);
}

TEST(RopeTest, FrequencyFactorsDivideEachPair) {
  std::vector<float> factors(8);
  for (int i = 0; i < 8; ++i) factors[i] = 1.0f + i * 1.5f;  // Llama 3.1: 1 .. 8
  ExpectRotated(RopeLayout::kInterleaved, 1.0f, &factors);
  ExpectRotated(RopeLayout::kNeox, 1.0f, &factors);
}

}  // namespace
}  // namespace folio::worker::kernels
