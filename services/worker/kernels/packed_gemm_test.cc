// PackedLinear against a double-precision reference, on every path the CPU has (portable,
// AVX2, and for f16 and bf16 panels the AVX-512 tiles), with and without a pool: row counts
// that leave partial tiles and row blocks, feature counts that leave a partial panel,
// strided x and y, beta 0 and 1.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "services/worker/kernels/cpu_isa.h"
#include "services/worker/kernels/half.h"
#include "services/worker/kernels/kernel_test_util.h"
#include "services/worker/kernels/packed_gemm.h"

namespace folio::worker::kernels {
namespace {

using testing::RandomNormal;

using Precision = PackedMatrix::Precision;

// (isa, AVX-512 16-bit tiles) pairs to run `w` on: every isa this CPU has, and the AVX-512
// tiles too for f16 and bf16 panels on a CPU with AVX-512.
std::vector<std::pair<CpuIsa, bool>> PathsFor(const PackedMatrix& w) {
  std::vector<std::pair<CpuIsa, bool>> paths;
  for (CpuIsa isa : SupportedCpuIsas()) paths.push_back({isa, false});
  if (w.precision() != Precision::kF32 && DetectedCpuFeatures().avx512) {
    paths.push_back({CpuIsa::kAvx2, true});
  }
  return paths;
}

const char* PrecisionName(Precision p) {
  return p == Precision::kF16 ? "f16" : p == Precision::kBF16 ? "bf16" : "f32";
}

// v rounded to the nearest value `p` holds (bf16: nearest-even on the top 16 bits).
float RoundTo(Precision p, float v) {
  if (p == Precision::kF16) return HalfToFloat(FloatToHalf(v));
  if (p == Precision::kF32) return v;
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  bits = (bits + 0x7FFFu + ((bits >> 16) & 1u)) & 0xFFFF0000u;
  std::memcpy(&v, &bits, sizeof(v));
  return v;
}

// w [out, in] (values of `p`) packed in `p` by the row constructor.
PackedMatrix Pack(const std::vector<float>& w, int64_t out, int64_t in, Precision p) {
  return PackedMatrix(out, in, p, [&](int64_t o, float* dst) {
    std::memcpy(dst, w.data() + o * in, sizeof(float) * in);
  });
}

TEST(PackedMatrixTest, PanelLayout) {
  const int out = 20, in = 3;  // two panels, the second with 4 features and 12 of padding
  std::vector<float> w(out * in);
  for (int i = 0; i < out * in; ++i) w[i] = static_cast<float>(i);
  const PackedMatrix p(w.data(), out, in);
  EXPECT_EQ(p.num_panels(), 2);
  for (int o = 0; o < out; ++o) {
    for (int k = 0; k < in; ++k) {
      EXPECT_EQ(p.panel(o / 16)[k * 16 + o % 16], w[o * in + k]) << o << " " << k;
    }
  }
  for (int j = 4; j < 16; ++j) EXPECT_EQ(p.panel(1)[2 * 16 + j], 0.0f);
}

TEST(PackedMatrixTest, F16OnlyWhenExact) {
  std::vector<float> w = RandomNormal(40 * 9, 3);
  EXPECT_FALSE(PackedMatrix(w.data(), 40, 9, /*f16_when_exact=*/true).is_f16());
  for (float& x : w) x = HalfToFloat(FloatToHalf(x));
  EXPECT_FALSE(PackedMatrix(w.data(), 40, 9, /*f16_when_exact=*/false).is_f16());
  const PackedMatrix half(w.data(), 40, 9, /*f16_when_exact=*/true);
  ASSERT_TRUE(half.is_f16());
  for (int o = 0; o < 40; ++o) {
    for (int k = 0; k < 9; ++k) {
      EXPECT_EQ(HalfToFloat(half.half_panel(o / 16)[k * 16 + o % 16]), w[o * 9 + k]);
    }
  }
  w[17] = 1e-9f;  // below the smallest f16 subnormal: not exact, so the matrix stays f32
  EXPECT_FALSE(PackedMatrix(w.data(), 40, 9, /*f16_when_exact=*/true).is_f16());
}

TEST(PackedMatrixTest, Bf16RowsAndTheirCheck) {
  std::vector<float> w = RandomNormal(20 * 5, 4);
  for (float& v : w) v = RoundTo(Precision::kBF16, v);
  const PackedMatrix p = Pack(w, 20, 5, Precision::kBF16);
  ASSERT_TRUE(p.is_bf16());
  EXPECT_EQ(p.size_bytes(), 2 * 16 * 5 * 2);
  std::vector<float> row(5);
  for (int o = 0; o < 20; ++o) {
    p.RowToF32(o, row.data());
    for (int k = 0; k < 5; ++k) EXPECT_EQ(row[k], w[o * 5 + k]) << o << "," << k;
  }
  w[7] = 1.0f + 1.0f / 1024;  // not a bf16 value
  EXPECT_DEATH(Pack(w, 20, 5, Precision::kBF16), "row 1 is not bf16");
}

TEST(PackedLinearTest, MatchesReference) {
  ThreadPool pool(3);
  // 90 outputs: six panels, the last of a pair partial (the AVX-512 16-bit tiles run panels
  // two at a time); 100: seven, the partial one alone.
  const std::pair<int, int> shapes[] = {{13, 19}, {48, 64}, {90, 37}, {100, 37}};
  for (int shape = 0; shape < 12; ++shape) {
    const auto [out, in] = shapes[shape / 3];
    const Precision prec = static_cast<Precision>(shape % 3);
    std::vector<float> w = RandomNormal(out * in, out + in);
    for (float& v : w) v = RoundTo(prec, v);
    const PackedMatrix packed = Pack(w, out, in, prec);
    ASSERT_EQ(packed.precision(), prec);
    for (int rows : {1, 2, 5, 6, 7, 32, 50, 101}) {
      const int ldx = in + 3, ldy = out + 2;
      const std::vector<float> x = RandomNormal(rows * ldx, rows);
      for (float beta : {0.0f, 1.0f}) {
        for (const auto& [isa, avx512] : PathsFor(packed)) {
          for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
            std::vector<float> y(rows * ldy, 0.5f);
            PackedLinearWith(x.data(), ldx, rows, packed, beta, y.data(), ldy, isa, avx512, p);
            for (int r = 0; r < rows; ++r) {
              for (int o = 0; o < out; ++o) {
                double s = beta * 0.5;
                for (int i = 0; i < in; ++i) s += double(x[r * ldx + i]) * w[o * in + i];
                ASSERT_NEAR(y[r * ldy + o], s, 1e-4)
                    << "out " << out << " in " << in << " " << PrecisionName(prec) << " rows " << rows
                    << " beta " << beta
                    << " isa " << CpuIsaName(isa) << (avx512 ? " (avx512)" : "")
                    << " pool " << (p != nullptr) << " at "
                    << r << "," << o;
              }
              for (int o = out; o < ldy; ++o) ASSERT_EQ(y[r * ldy + o], 0.5f) << "wrote past out";
            }
          }
        }
      }
    }
  }
}

TEST(PackedLinearTest, RowDoesNotDependOnBatch) {
  // Each output is one chain over k in order (two on the AVX-512 16-bit tiles), so a row's
  // result is bit-identical whether it is computed alone or inside a batch (where it
  // lands in a tile of another height). An odd `in` leaves the 16-bit tiles a last lone k.
  const int out = 40, in = 71, rows = 23;
  const std::vector<float> x = RandomNormal(rows * in, 12);
  for (Precision prec : {Precision::kF32, Precision::kF16, Precision::kBF16}) {
    std::vector<float> w = RandomNormal(out * in, 11);
    for (float& v : w) v = RoundTo(prec, v);
    const PackedMatrix packed = Pack(w, out, in, prec);
    for (const auto& [isa, avx512] : PathsFor(packed)) {
      std::vector<float> batch(rows * out);
      PackedLinearWith(x.data(), in, rows, packed, 0.0f, batch.data(), out, isa, avx512,
                       nullptr);
      for (int r = 0; r < rows; ++r) {
        std::vector<float> one(out);
        PackedLinearWith(x.data() + r * in, in, 1, packed, 0.0f, one.data(), out, isa, avx512,
                         nullptr);
        for (int o = 0; o < out; ++o) {
          ASSERT_EQ(one[o], batch[r * out + o]) << r << "," << o << " " << PrecisionName(prec) << " isa "
                                                << CpuIsaName(isa) << " avx512 " << avx512;
        }
      }
    }
  }
}

TEST(PackedLinearTest, Avx512TilesRunWhereTheCpuHasThem) {
  std::vector<float> w = RandomNormal(32 * 16, 5);
  for (float& v : w) v = HalfToFloat(FloatToHalf(v));  // f16 values
  const PackedMatrix f16(w.data(), 32, 16, /*f16_when_exact=*/true);
  const PackedMatrix f32(w.data(), 32, 16);
  for (float& v : w) v = RoundTo(Precision::kBF16, v);
  const PackedMatrix bf16 = Pack(w, 32, 16, Precision::kBF16);
  const char* off = std::getenv("FOLIO_PACKED_AVX512");
  const bool on = EnabledCpuFeatures().avx512 && (off == nullptr || std::string(off) != "0");
  EXPECT_EQ(PackedAvx512(CpuIsa::kAvx2, f16), on);
  EXPECT_EQ(PackedAvx512(CpuIsa::kAvx2, bf16), on);
  EXPECT_FALSE(PackedAvx512(CpuIsa::kAvx2, f32));
  EXPECT_FALSE(PackedAvx512(CpuIsa::kPortable, f16));
}

}  // namespace
}  // namespace folio::worker::kernels
