// RMSNorm, RoPE, SwiGLU and Linear against straightforward double-precision loops.
#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "services/worker/kernels/cpu_isa.h"
#include "services/worker/kernels/gemm.h"
#include "services/worker/kernels/kernel_test_util.h"
#include "services/worker/kernels/rms_norm.h"
#include "services/worker/kernels/rope.h"
#include "services/worker/kernels/swiglu.h"

namespace folio::worker::kernels {
namespace {

using testing::RandomNormal;

TEST(RmsNormTest, MatchesFormula) {
  const int rows = 3, dim = 37;
  const float eps = 1e-5f;
  std::vector<float> x = RandomNormal(rows * dim, 1), w = RandomNormal(dim, 2), out(rows * dim);
  RmsNorm(x.data(), dim, rows, dim, w.data(), eps, out.data(), dim);
  for (int r = 0; r < rows; ++r) {
    double ss = 0;
    for (int i = 0; i < dim; ++i) ss += double(x[r * dim + i]) * x[r * dim + i];
    const double scale = 1.0 / std::sqrt(ss / dim + eps);
    for (int i = 0; i < dim; ++i) {
      EXPECT_NEAR(out[r * dim + i], w[i] * x[r * dim + i] * scale, 1e-5);
    }
  }
  // In place.
  RmsNorm(x.data(), dim, rows, dim, w.data(), eps, x.data(), dim);
  for (int i = 0; i < rows * dim; ++i) EXPECT_FLOAT_EQ(x[i], out[i]);
}

TEST(RopeTest, RotatesAdjacentPairsPerHead) {
  const int heads = 3, head_dim = 8, rows = 2, stride = heads * head_dim + 4;
  const float theta = 10000.0f;
  std::vector<float> x = RandomNormal(rows * stride, 3);
  const std::vector<float> orig = x;
  const int32_t positions[] = {0, 17};
  ApplyRope(x.data(), stride, rows, positions, heads, head_dim, theta);
  for (int r = 0; r < rows; ++r) {
    for (int h = 0; h < heads; ++h) {
      for (int p = 0; p < head_dim / 2; ++p) {
        const double angle = positions[r] * std::pow(double(theta), -2.0 * p / head_dim);
        const int i = r * stride + h * head_dim + 2 * p;
        const double c = std::cos(angle), s = std::sin(angle);
        EXPECT_NEAR(x[i], orig[i] * c - orig[i + 1] * s, 1e-4);
        EXPECT_NEAR(x[i + 1], orig[i] * s + orig[i + 1] * c, 1e-4);
      }
    }
    for (int i = heads * head_dim; i < stride; ++i) {
      EXPECT_EQ(x[r * stride + i], orig[r * stride + i]) << "touched past the heads";
    }
  }
}

TEST(GeGluTest, MatchesTheTanhFormulaInDouble) {
  const int64_t rows = 3, hidden = 37;
  std::vector<float> gu(rows * 2 * hidden);
  for (size_t i = 0; i < gu.size(); ++i) gu[i] = std::sin(0.37 * i) * 4.0f;
  std::vector<float> out(rows * hidden, -1.0f);
  GeGlu(gu.data(), rows, hidden, out.data());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < hidden; ++i) {
      const double x = gu[r * 2 * hidden + i];
      const double up = gu[r * 2 * hidden + hidden + i];
      const double g = 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
      EXPECT_NEAR(out[r * hidden + i], g * up, 1e-5 * (1 + std::abs(g * up)));
    }
  }
}

TEST(SwiGluTest, MatchesFormula) {
  const int rows = 2, hidden = 61;  // vectors of 16, then of 8, then a tail
  std::vector<float> gu = RandomNormal(rows * 2 * hidden, 4);
  gu[0] = -100.0f;  // e^-gate overflows a float: silu is -0
  gu[1] = 100.0f;   // silu is the gate itself
  for (CpuIsa isa : SupportedCpuIsas()) {
    for (bool avx512 : {false, isa == CpuIsa::kAvx2 && EnabledCpuFeatures().avx512}) {
      std::vector<float> out(rows * hidden);
      SwiGlu(gu.data(), rows, hidden, out.data(), isa, avx512);
      for (int r = 0; r < rows; ++r) {
        for (int i = 0; i < hidden; ++i) {
          const double g = gu[r * 2 * hidden + i], u = gu[r * 2 * hidden + hidden + i];
          const double want = g / (1 + std::exp(-g)) * u;
          EXPECT_NEAR(out[r * hidden + i], want, 1e-5 + 1e-6 * std::abs(want))
              << CpuIsaName(isa) << (avx512 ? " avx512" : "");
        }
      }
    }
  }
}

TEST(LinearTest, MatchesNaiveForOneAndManyRows) {
  const int in = 19, out_features = 13;
  std::vector<float> w = RandomNormal(out_features * in, 5);
  for (int rows : {1, 5}) {
    const int ldx = in + 2, ldy = out_features + 3;
    std::vector<float> x = RandomNormal(rows * ldx, 6);
    for (float beta : {0.0f, 1.0f}) {
      std::vector<float> y(rows * ldy, 0.5f);
      Linear(x.data(), ldx, rows, in, w.data(), out_features, beta, y.data(), ldy);
      for (int r = 0; r < rows; ++r) {
        for (int o = 0; o < out_features; ++o) {
          double s = beta * 0.5;
          for (int i = 0; i < in; ++i) s += double(x[r * ldx + i]) * w[o * in + i];
          EXPECT_NEAR(y[r * ldy + o], s, 1e-4) << "rows " << rows << " beta " << beta;
        }
        for (int o = out_features; o < ldy; ++o) EXPECT_EQ(y[r * ldy + o], 0.5f);
      }
    }
  }
}

TEST(LinearTest, OnPoolMatchesSingleCall) {
  const int in = 40, out_features = 100;  // slices of 48 + 48 + 4 features on 2 threads
  std::vector<float> w = RandomNormal(out_features * in, 7);
  ThreadPool pool(2);
  SetGemmThreads(1);
  for (int rows : {1, 6}) {
    std::vector<float> x = RandomNormal(rows * in, 8);
    std::vector<float> want(rows * out_features, 0.25f), got = want;
    Linear(x.data(), in, rows, in, w.data(), out_features, 1.0f, want.data(), out_features);
    LinearOnPool(x.data(), in, rows, in, w.data(), out_features, 1.0f, got.data(), out_features,
                 &pool);
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << rows;
  }
}

}  // namespace
}  // namespace folio::worker::kernels
