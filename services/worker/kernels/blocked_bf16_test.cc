// BlockedBf16Linear against a double-precision reference on every path this CPU runs
// (portable, AVX-512, AVX-512 BF16; the others skipped with the reason), over shapes whose
// outputs leave a partial block of 64 and whose inputs leave a partial block of 32, row
// counts that leave a partial group of four, strided x and y, beta 0 and 1, with and
// without a pool. The layout itself is held to oneDNN's reorder in onednn_gemm_test.
#include "services/worker/kernels/blocked_bf16.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "services/worker/kernels/half.h"
#include "services/worker/kernels/kernel_test_util.h"
#include "services/worker/kernels/thread_pool.h"
#include "services/worker/kernels/typed_dot.h"

namespace folio::worker::kernels {
namespace {

using testing::RandomNormal;

constexpr BlockedBf16Path kPaths[] = {BlockedBf16Path::kPortable, BlockedBf16Path::kAvx512,
                                      BlockedBf16Path::kAvx512Bf16};

// v rounded to bf16 (nearest even) and widened back.
std::vector<float> Bf16Values(const std::vector<float>& v) {
  std::vector<uint16_t> bits(v.size());
  typed::RoundToBf16(v.data(), static_cast<int64_t>(v.size()), bits.data());
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = Bf16ToFloat(bits[i]);
  return out;
}

BlockedBf16Matrix Block(const std::vector<float>& w, int64_t out, int64_t in) {
  return BlockedBf16Matrix(out, in, [&](int64_t o, float* dst) {
    std::memcpy(dst, w.data() + o * in, sizeof(float) * in);
  });
}

TEST(BlockedBf16MatrixTest, LayoutPaddingAndRows) {
  const int64_t out = 70, in = 33;  // two blocks of outputs, in padded to 64
  const std::vector<float> w = Bf16Values(RandomNormal(out * in, 1));
  const BlockedBf16Matrix m = Block(w, out, in);
  EXPECT_EQ(m.num_blocks(), 2);
  EXPECT_EQ(m.out_padded(), 128);
  EXPECT_EQ(m.in_padded(), 64);
  EXPECT_EQ(m.size_bytes(), 128 * 64 * 2);
  // W[n, k] where the header says; the padding is zero.
  std::vector<bool> used(static_cast<size_t>(m.out_padded() * m.in_padded()), false);
  for (int64_t n = 0; n < out; ++n) {
    for (int64_t k = 0; k < in; ++k) {
      const int64_t at = (n / 64) * 64 * 64 + (k / 2) * 128 + (n % 64) * 2 + k % 2;
      ASSERT_EQ(m.Offset(n, k), at);
      ASSERT_EQ(Bf16ToFloat(m.data()[at]), w[n * in + k]) << n << "," << k;
      used[at] = true;
    }
  }
  for (size_t i = 0; i < used.size(); ++i) {
    if (!used[i]) {
      ASSERT_EQ(m.data()[i], 0) << "padding at " << i;
    }
  }
  std::vector<float> row(in);
  for (int64_t n : {0, 63, 64, 69}) {
    m.RowToF32(n, row.data());
    for (int64_t k = 0; k < in; ++k) ASSERT_EQ(row[k], w[n * in + k]);
  }
}

TEST(BlockedBf16MatrixTest, RowsThatAreNotBf16DoNotBlock) {
  const std::vector<float> w = {1.0f, 1.0f + 1.0f / 1024};  // the second needs 10 bits
  EXPECT_DEATH(Block(w, 1, 2), "row 0 is not bf16");
}

struct Case {
  int64_t out, in, rows;
};

TEST(BlockedBf16LinearTest, MatchesReferenceOnEveryPath) {
  ThreadPool pool(3);
  const Case cases[] = {{1, 1, 1},    {64, 32, 1},  {65, 33, 2},   {130, 97, 5},
                        {200, 256, 4}, {7, 300, 9}, {256, 2048, 1}, {129, 64, 3}};
  for (BlockedBf16Path path : kPaths) {
    if (!BlockedBf16PathRuns(path)) {
      std::printf("[ SKIPPED  ] path %s: this CPU lacks its features\n",
                  BlockedBf16PathName(path));
      continue;
    }
    for (const Case& c : cases) {
      for (float beta : {0.0f, 1.0f}) {
        for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
          SCOPED_TRACE(std::string(BlockedBf16PathName(path)) + " out " + std::to_string(c.out) +
                       " in " + std::to_string(c.in) + " rows " + std::to_string(c.rows) +
                       " beta " + std::to_string(beta) + (p ? " pool" : " caller"));
          const std::vector<float> w = Bf16Values(RandomNormal(c.out * c.in, 2));
          const BlockedBf16Matrix m = Block(w, c.out, c.in);
          const int64_t ldx = c.in + 3, ldy = c.out + 5;
          const std::vector<float> x = RandomNormal(c.rows * ldx, 3);
          // vdpbf16ps multiplies x rounded to bf16; the other paths x itself.
          const std::vector<float> xr =
              path == BlockedBf16Path::kAvx512Bf16 ? Bf16Values(x) : x;
          const std::vector<float> y0 = RandomNormal(c.rows * ldy, 4);
          std::vector<float> y = y0;
          BlockedBf16Linear(x.data(), ldx, c.rows, m, beta, y.data(), ldy, path, p);
          for (int64_t r = 0; r < c.rows; ++r) {
            for (int64_t o = 0; o < c.out; ++o) {
              double want = beta * static_cast<double>(y0[r * ldy + o]), mag = std::fabs(want);
              for (int64_t k = 0; k < c.in; ++k) {
                const double t = static_cast<double>(w[o * c.in + k]) * xr[r * ldx + k];
                want += t;
                mag += std::fabs(t);
              }
              // f32 sums of in terms: ~sqrt(in) roundings of 6e-8 (one term of 2048 left
              // out or doubled is ~5e-4 of mag).
              ASSERT_NEAR(y[r * ldy + o], want, 2e-6 * std::sqrt(c.in + 1.0) * mag + 1e-6)
                  << "row " << r << " output " << o;
            }
            // Columns past out (y's stride) are not written.
            for (int64_t o = c.out; o < ldy; ++o) ASSERT_EQ(y[r * ldy + o], y0[r * ldy + o]);
          }
        }
      }
    }
  }
}

// A row's outputs are the same bits whatever the batch it rides in and the pool.
TEST(BlockedBf16LinearTest, RowDoesNotDependOnBatch) {
  ThreadPool pool(2);
  const int64_t out = 150, in = 200, rows = 7;
  const std::vector<float> w = Bf16Values(RandomNormal(out * in, 5));
  const BlockedBf16Matrix m = Block(w, out, in);
  const std::vector<float> x = RandomNormal(rows * in, 6);
  for (BlockedBf16Path path : kPaths) {
    if (!BlockedBf16PathRuns(path)) continue;
    SCOPED_TRACE(BlockedBf16PathName(path));
    std::vector<float> batch(rows * out);
    BlockedBf16Linear(x.data(), in, rows, m, 0.0f, batch.data(), out, path, &pool);
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<float> alone(out);
      BlockedBf16Linear(x.data() + r * in, in, 1, m, 0.0f, alone.data(), out, path, nullptr);
      ASSERT_EQ(0, std::memcmp(alone.data(), batch.data() + r * out, sizeof(float) * out))
          << "row " << r;
    }
  }
}

TEST(BlockedBf16LinearTest, BestPathFollowsFeatures) {
  CpuFeatures f;
  EXPECT_EQ(BestBlockedBf16Path(f), BlockedBf16Path::kPortable);
#if defined(__x86_64__)
  f.avx2 = f.avx512 = true;
  EXPECT_EQ(BestBlockedBf16Path(f), BlockedBf16Path::kAvx512);
  f.avx512_bf16 = true;
  EXPECT_EQ(BestBlockedBf16Path(f), BlockedBf16Path::kAvx512Bf16);
#endif
}

}  // namespace
}  // namespace folio::worker::kernels
