// GemmQ4K, GemmQ6K and GemmQ4_0 (kquant_gemm.h) against the portable dot kernels, bit for
// bit: random bytes for every scale, min and quant (so the integer sums reach their
// extremes), activation rows quantized to q8_K and q8_0, tile edges in both directions
// (weight rows not a multiple of 16 nor of a pass's 64, activation rows not a multiple of
// 8), beta = 0 and beta != 0.
#include "services/worker/kernels/kquant_gemm.h"

#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "services/worker/kernels/half.h"
#include "services/worker/kernels/kernel_test_util.h"

namespace folio::worker::kernels::typed {
namespace {

struct Format {
  const char* name;
  StoredKind kind;
  int64_t values, bytes;  // per block
  KQuantGemmFn gemm;
  // Where the block's f16 scales sit (q4_K: d, dmin first; q6_K: d last; q4_0: d first).
  int64_t first_half, halves;
};
const Format kFormats[] = {{"q4_K", StoredKind::kQ4_K, 256, 144, GemmQ4K, 0, 2},
                           {"q6_K", StoredKind::kQ6_K, 256, 210, GemmQ6K, 208, 1},
                           {"q4_0", StoredKind::kQ4_0, 32, 18, GemmQ4_0, 0, 1}};

// `rows` weight rows of `in` values: random bytes, the f16 scales small positive halves.
std::vector<uint8_t> RandomBlocks(const Format& f, int64_t rows, int64_t in, int seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(1e-4f, 2e-2f);
  std::vector<uint8_t> w(rows * (in / f.values) * f.bytes);
  for (size_t b = 0; b < w.size() / f.bytes; ++b) {
    uint8_t* blk = w.data() + b * f.bytes;
    for (int64_t i = 0; i < f.bytes; ++i) blk[i] = static_cast<uint8_t>(byte(rng));
    for (int64_t h = 0; h < f.halves; ++h) {
      const uint16_t v = FloatToHalf(scale(rng));
      std::memcpy(blk + f.first_half + 2 * h, &v, 2);
    }
  }
  return w;
}

// Activation rows as q8_K (the K-quants') and as q8_0 with block sums (q4_0's).
struct Quantized {
  std::vector<int8_t> q, q8;
  std::vector<float> d, q8_d;
  std::vector<int16_t> bsums;
  std::vector<int32_t> q8_isum;
  Activations acts;
  Quantized(int64_t rows, int64_t in, int seed)
      : q(rows * in), q8(rows * in), d(rows * in / 256), q8_d(rows * in / 32),
        bsums(rows * in / 16), q8_isum(rows * in / 32) {
    std::vector<float> x = testing::RandomNormal(rows * in, seed);
    for (size_t i = 0; i < x.size(); i += 97) x[i] *= 20.0f;  // outliers, as activations have
    for (int64_t r = 0; r < rows; ++r) {
      QuantizeQ8_K(x.data() + r * in, in, q.data() + r * in, d.data() + r * (in / 256),
                   bsums.data() + r * (in / 16));
      QuantizeQ8_0(x.data() + r * in, in, q8.data() + r * in, q8_d.data() + r * (in / 32));
    }
    for (size_t b = 0; b < q8_isum.size(); ++b) {
      for (int i = 0; i < 32; ++i) q8_isum[b] += q8[32 * b + i];
    }
    acts.in = in;
    acts.k8 = q.data();
    acts.k8_d = d.data();
    acts.k8_bsums = bsums.data();
    acts.q8 = q8.data();
    acts.q8_d = q8_d.data();
    acts.q8_isum = q8_isum.data();
  }
};

class KQuantGemmTest : public ::testing::TestWithParam<Format> {};

TEST_P(KQuantGemmTest, EqualsThePortableDotBitForBit) {
  const Format& f = GetParam();
  if (!HasKQuantGemm(DetectedCpuFeatures())) {
    GTEST_SKIP() << "the block-quant GEMMs need AVX-512 VNNI, which this CPU lacks";
  }
  const DotKernel portable = PortableQuantKernel(f.kind);
  for (const int64_t in : {256, 768}) {
    for (const int64_t n : {1, 16, 37, 100}) {
      for (const int64_t rows : {1, 7, 8, 9, 20}) {
        SCOPED_TRACE(::testing::Message() << "in " << in << ", " << n << " weight rows, " << rows
                                        << " activation rows");
        const int64_t stride = in / f.values * f.bytes;
        const std::vector<uint8_t> w = RandomBlocks(f, n, in, static_cast<int>(in + n));
        const Quantized x(rows, in, static_cast<int>(rows));
        std::vector<float> want(rows * n);
        for (int64_t j = 0; j < n; ++j) {
          for (int64_t r = 0; r < rows; ++r) {
            portable.dot[0](w.data() + j * stride, x.acts, r, &want[r * n + j]);
          }
        }
        // y has a wider row stride than n: the columns past n must stay untouched.
        const int64_t ldy = n + 3;
        for (const float beta : {0.0f, 0.5f}) {
          std::vector<float> y(rows * ldy, 2.0f);
          f.gemm(w.data(), stride, n, x.acts, rows, beta, y.data(), ldy);
          for (int64_t r = 0; r < rows; ++r) {
            for (int64_t j = 0; j < ldy; ++j) {
              const float expected = j >= n ? 2.0f : beta == 0.0f ? want[r * n + j]
                                                                  : want[r * n + j] + beta * 2.0f;
              ASSERT_EQ(y[r * ldy + j], expected) << "beta " << beta << ", row " << r
                                                  << ", column " << j;
            }
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, KQuantGemmTest, ::testing::ValuesIn(kFormats),
                         [](const ::testing::TestParamInfo<Format>& i) {
                           return std::string(i.param.name);
                         });

}  // namespace
}  // namespace folio::worker::kernels::typed
