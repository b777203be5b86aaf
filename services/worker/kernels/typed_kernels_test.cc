// The typed-weight kernels (typed_dot.h) on every SIMD path this CPU has, against the
// portable kernels, and the portable kernels against a double-precision product of the
// dequantized weights (weight_format.h's dequantizers, bit-exact with gguf-py's); each
// kernel's register tiles called directly against its dot[] (TilesEqualDot, bit for bit).
// Paths the CPU lacks, and kernels without tiles, are skipped naming the reason.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "services/worker/kernels/cpu_isa.h"
#include "services/worker/kernels/kernel_test_util.h"
#include "services/worker/kernels/typed_dot.h"
#include "services/worker/kernels/typed_gemm.h"
#include "services/worker/model/dequant.h"
#include "services/worker/model/weight_format.h"

namespace folio::worker::kernels {
namespace {

using testing::RandomNormal;

const WeightFormat& FormatOfKind(StoredKind kind) {
  switch (kind) {
    case StoredKind::kF16:
      return kF16Format;
    case StoredKind::kBF16:
      return kBF16Format;
    case StoredKind::kQ4_0:
      return kQ4_0Format;
    case StoredKind::kQ4_1:
      return kQ4_1Format;
    case StoredKind::kQ5_0:
      return kQ5_0Format;
    case StoredKind::kQ5_1:
      return kQ5_1Format;
    case StoredKind::kQ4_K:
      return kQ4_KFormat;
    case StoredKind::kQ5_K:
      return kQ5_KFormat;
    case StoredKind::kQ6_K:
      return kQ6_KFormat;
    default:
      return kQ8_0Format;
  }
}

// The stored kinds with their own kernels, and the values of one block of each.
const std::vector<StoredKind>& KernelKinds() {
  static const std::vector<StoredKind> kinds = {
      StoredKind::kF16,  StoredKind::kBF16, StoredKind::kQ8_0, StoredKind::kQ4_0,
      StoredKind::kQ4_1, StoredKind::kQ5_0, StoredKind::kQ5_1, StoredKind::kQ4_K,
      StoredKind::kQ5_K, StoredKind::kQ6_K};
  return kinds;
}
int64_t BlockOf(StoredKind kind) { return FormatOfKind(kind).block_values; }
bool IsKQuant(StoredKind kind) { return BlockOf(kind) == 256; }

// Activations as the kernel of `kind` multiplies them: q8_0 / q8_K quantized and
// dequantized for the integer kernels, x itself for f16 / bf16.
std::vector<float> KernelActivations(StoredKind kind, const std::vector<float>& x, int64_t in) {
  std::vector<float> xq = x;
  const int64_t rows = static_cast<int64_t>(x.size()) / in;
  if (IsKQuant(kind)) {
    std::vector<int8_t> q(in);
    std::vector<float> d(in / 256);
    std::vector<int16_t> bs(in / 16);
    for (int64_t r = 0; r < rows; ++r) {
      typed::QuantizeQ8_K(x.data() + r * in, in, q.data(), d.data(), bs.data());
      for (int64_t k = 0; k < in; ++k) xq[r * in + k] = d[k / 256] * q[k];
    }
  } else if (BlockOf(kind) == 32) {
    std::vector<int8_t> q(in);
    std::vector<float> d(in / 32);
    for (int64_t r = 0; r < rows; ++r) {
      typed::QuantizeQ8_0(x.data() + r * in, in, q.data(), d.data());
      for (int64_t k = 0; k < in; ++k) xq[r * in + k] = d[k / 32] * q[k];
    }
  }
  return xq;
}

// A stored matrix [out, stored_in] of `kind` with random values, read from column
// `col0` (a block boundary) for `in` columns.
struct StoredMatrix {
  StoredKind kind;
  int64_t out, in, col0, stored_in;
  std::vector<uint8_t> bytes;
  TypedMatrix view;
  std::vector<float> dense;  // [out, in] dequantized

  StoredMatrix(StoredKind k, int64_t out_, int64_t in_, int64_t col0_, uint64_t seed)
      : kind(k), out(out_), in(in_), col0(col0_), stored_in(in_ + col0_ + 2 * (col0_ > 0)) {
    const WeightFormat& f = FormatOfKind(kind);
    if (f.block_values > 1) stored_in = (stored_in + f.block_values - 1) / f.block_values * f.block_values;
    const int64_t row_bytes = f.BytesFor(stored_in);
    bytes.resize(out * row_bytes + 64);
    FillRandomBlocks(f, out * stored_in / f.block_values, 0.5f, seed, bytes.data());
    view = TypedMatrix(in);
    TypedRows r;
    r.data = bytes.data() + f.BytesFor(col0);
    r.row_stride_bytes = row_bytes;
    r.rows = out;
    r.block_values = f.block_values;
    r.dequantize = f.dequantize;
    r.type_name = f.name;
    r.kind = kind;
    view.Append(r);
    dense.resize(out * in);
    for (int64_t o = 0; o < out; ++o) view.RowToF32(o, dense.data() + o * in);
  }
};

// The tolerance of one output: a few ulps of the sum of |terms| (summation order).
double Tolerance(const float* x, const float* w, int64_t in, double rel) {
  double s = 0;
  for (int64_t k = 0; k < in; ++k) s += std::abs(double(x[k]) * w[k]);
  return rel * s + 1e-30;
}

struct Shape {
  int64_t out, in, rows, col0;
};

std::vector<Shape> ShapesFor(StoredKind kind) {
  if (IsKQuant(kind)) {  // in: whole super-blocks; column offsets on super-block bounds
    return {{1, 256, 1, 0},   {5, 512, 3, 256},  {17, 768, 5, 0}, {33, 1280, 4, 512},
            {7, 256, 9, 256}, {40, 4096, 2, 0},  {3, 2304, 7, 0}};
  }
  if (BlockOf(kind) == 32) {  // in: whole blocks, odd and even block counts
    return {{1, 32, 1, 0},   {5, 64, 3, 32},    {17, 96, 5, 0},  {33, 160, 4, 64},
            {7, 224, 9, 32}, {40, 2080, 2, 0},  {3, 288, 7, 96}, {64, 4096, 1, 0},
            {9, 192, 3, 0},  {6, 448, 2, 64}, {16, 256, 20, 0}, {12, 512, 8, 0}};
  }
  return {{1, 1, 1, 0},    {5, 7, 3, 1},      {17, 15, 5, 0},  {33, 16, 4, 3},
          {7, 17, 9, 0},   {9, 31, 2, 5},     {3, 33, 7, 0},   {11, 100, 4, 2},
          {13, 257, 6, 1}, {40, 1000, 1, 0},  {21, 2048, 3, 0}, {8, 4099, 2, 1}};
}

using Param = std::tuple<StoredKind, SimdPath>;

class TypedKernelTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    const auto [kind, path] = GetParam();
    if (const char* missing = MissingFeature(path, DetectedCpuFeatures())) {
      GTEST_SKIP() << SimdPathName(path) << " needs " << missing << ", which this CPU lacks ("
                   << CpuFeaturesString(DetectedCpuFeatures()) << ")";
    }
    if (!typed::KernelFor(kind, path).ok()) {
      GTEST_SKIP() << StoredKindName(kind) << " has no " << SimdPathName(path) << " kernel";
    }
  }
};

// Every path against the portable kernel: same shapes, ragged tails, a column offset,
// odd row counts, 1..9 token rows; beta 0 and 1; with a pool.
TEST_P(TypedKernelTest, MatchesPortable) {
  const auto [kind, path] = GetParam();
  // The vdpbf16ps path multiplies bf16-rounded activations: its reference is the portable
  // kernel on those. Only the summation order differs then (q8_0: the integer block sums
  // are exact on every path; the f32 scaling and summation order differ).
  const bool bf16_x = path == SimdPath::kAvx512Bf16;
  const double rel = BlockOf(kind) > 1 ? 1e-5 : 4e-6;
  ThreadPool pool(2);
  int seed = 1;
  for (const Shape& s : ShapesFor(kind)) {
    SCOPED_TRACE("out " + std::to_string(s.out) + " in " + std::to_string(s.in) + " rows " +
                 std::to_string(s.rows) + " col0 " + std::to_string(s.col0));
    StoredMatrix m(kind, s.out, s.in, s.col0, ++seed);
    const int64_t ldx = s.in + 3, ldy = s.out + 2;
    const std::vector<float> x = RandomNormal(s.rows * ldx, ++seed);
    std::vector<float> x_ref = x;
    if (bf16_x) {
      std::vector<uint16_t> h(x.size());
      typed::RoundToBf16(x.data(), x.size(), h.data());
      for (size_t i = 0; i < x.size(); ++i) x_ref[i] = Bf16ToFloat(h[i]);
    }
    std::vector<float> want(s.rows * ldy, 0.25f), got = want, got_beta = want;
    TypedLinearOnPath(x_ref.data(), ldx, s.rows, m.view, 0.0f, want.data(), ldy, nullptr,
                      SimdPath::kPortable);
    TypedLinearOnPath(x.data(), ldx, s.rows, m.view, 0.0f, got.data(), ldy, &pool, path);
    TypedLinearOnPath(x.data(), ldx, s.rows, m.view, 1.0f, got_beta.data(), ldy, nullptr, path);
    for (int64_t r = 0; r < s.rows; ++r) {
      for (int64_t o = 0; o < s.out; ++o) {
        const double tol = Tolerance(x.data() + r * ldx, m.dense.data() + o * s.in, s.in, rel);
        EXPECT_NEAR(got[r * ldy + o], want[r * ldy + o], tol) << r << " " << o;
        EXPECT_FLOAT_EQ(got_beta[r * ldy + o], got[r * ldy + o] + 0.25f) << r << " " << o;
      }
      EXPECT_EQ(got[r * ldy + s.out], 0.25f) << "wrote past out()";
    }
  }
}

// One token row at a time gives exactly what a batch gives (each output is one ordered
// sum whatever R, through dot[] or a kernel's register tiles: 19 rows are two whole groups
// of kMaxTileRows and a ragged one, 37 outputs whole tiles and a remainder; f16 / bf16 rows
// of 1100 values run column-blocked tiles, ragged last block), and a pool
// changes nothing.
TEST_P(TypedKernelTest, BatchAndPoolDoNotChangeResults) {
  const auto [kind, path] = GetParam();
  ThreadPool pool(3);
  const int64_t out = 37, rows = 19;
  const int64_t in = IsKQuant(kind) ? 768 : BlockOf(kind) == 32 ? 352 : 1100;
  StoredMatrix m(kind, out, in, 0, 11);
  const std::vector<float> x = RandomNormal(rows * in, 12);
  std::vector<float> batch(rows * out), single(rows * out);
  TypedLinearOnPath(x.data(), in, rows, m.view, 0.0f, batch.data(), out, &pool, path);
  for (int64_t r = 0; r < rows; ++r) {
    TypedLinearOnPath(x.data() + r * in, in, 1, m.view, 0.0f, single.data() + r * out, out,
                      nullptr, path);
  }
  EXPECT_EQ(batch, single);
}

// Row lengths of the tile test: at and around every step of the f16 / bf16 kernels'
// loops; for block types odd and even block counts, one block alone and a last lone block.
std::vector<int64_t> TileLengthsFor(StoredKind kind) {
  if (BlockOf(kind) == 1) {
    return {1, 15, 16, 17, 31, 32, 33, 47, 63, 64, 65, 95, 96, 129, 257, 345, 1000, 1100};
  }
  std::vector<int64_t> ins;
  for (int64_t b : {1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 13, 64, 65, 97}) {
    ins.push_back(b * BlockOf(kind));
  }
  return ins;
}

// x [rows, in] (f32 row r at r * ldx) in every form a kernel reads, as TypedLinear
// prepares them, owning its buffers.
struct TileActivations {
  std::vector<float> f32;
  std::vector<uint16_t> bf16;
  std::vector<int8_t> q8, k8;
  std::vector<float> q8_d, q8_s, k8_d;
  std::vector<int16_t> k8_bsums;
  std::vector<int32_t> q8_c, q4x_off;
  std::vector<int8_t> q4x;
  std::vector<float> q4x_d;
  typed::Activations acts;

  TileActivations(int64_t rows, int64_t in, int64_t ldx, int seed)
      : f32(RandomNormal(rows * ldx, seed)),
        bf16(rows * in),
        q8(rows * in),
        k8(rows * in),
        q8_d(rows * in / typed::kQ8Block + 1),
        q8_s(rows * in / typed::kQ8Block + 1),
        k8_d(rows * in / typed::kQ8KBlock + 1),
        k8_bsums(rows * in / 16 + 1),
        q8_c(rows * in / 4 + 1),
        q4x_off(rows * in / 8 + 1),
        q4x(rows * in),
        q4x_d(rows * in / 8 + 1) {
    acts.in = in;
    acts.f32 = f32.data();
    acts.ldx = ldx;
    for (int64_t r = 0; r < rows; ++r) {
      const float* x = f32.data() + r * ldx;
      typed::RoundToBf16(x, in, bf16.data() + r * in);
      if (in % typed::kQ8Block == 0) {
        const int64_t blocks = in / typed::kQ8Block;
        typed::QuantizeQ8_0(x, in, q8.data() + r * in, q8_d.data() + r * blocks,
                            q8_s.data() + r * blocks);
        typed::Q8Corrections(q8.data() + r * in, in, q8_c.data() + r * (in / 4));
        typed::Q4_0Activations(q8.data() + r * in, q8_d.data() + r * blocks, in,
                               q4x.data() + r * in, q4x_d.data() + r * (in / 8),
                               q4x_off.data() + r * (in / 8));
      }
      if (in % typed::kQ8KBlock == 0) {
        typed::QuantizeQ8_K(x, in, k8.data() + r * in, k8_d.data() + r * (in / typed::kQ8KBlock),
                            k8_bsums.data() + r * (in / 16));
      }
    }
    acts.bf16 = bf16.data();
    acts.q8 = q8.data();
    acts.q8_d = q8_d.data();
    acts.q8_s = q8_s.data();
    acts.k8 = k8.data();
    acts.k8_d = k8_d.data();
    acts.k8_bsums = k8_bsums.data();
    if (in % typed::kQ8Block == 0) {
      acts.q8_c = q8_c.data();
      acts.q4x = q4x.data();
      acts.q4x_d = q4x_d.data();
      acts.q4x_off = q4x_off.data();
    }
  }
};

// Each register tile (typed_dot.h TileFn) called directly against dot[]: every output of
// a tile equals, bit for bit, what dot[0] gives it alone and what dot[R - 1] gives it
// among R <= 4 rows, for R = 1..8 token rows from three row offsets (a tile starts
// anywhere in the activations), rows whose lengths end at and around every step of the
// kernels' loops, weight rows adjacent and apart (a column offset and a row stride wider
// than the row read); the k-blocked tiles (ktile) too, over column blocks of one step,
// three and k_block.
TEST_P(TypedKernelTest, TilesEqualDot) {
  const auto [kind, path] = GetParam();
  const typed::DotKernel kernel = typed::KernelFor(kind, path);
  if (kernel.tile_w == 0) {
    GTEST_SKIP() << StoredKindName(kind) << " has no tiles on " << SimdPathName(path);
  }
  ASSERT_GE(kernel.tile_w, 1);
  ASSERT_LE(kernel.tile_w, 16);
  ASSERT_EQ(16 % kernel.tile_w, 0);
  const int64_t total_rows = 11, w = kernel.tile_w;
  int tiles_run = 0, seed = 40;
  for (const int64_t col0 : {int64_t{0}, BlockOf(kind)}) {
    for (const int64_t in : TileLengthsFor(kind)) {
      SCOPED_TRACE("in " + std::to_string(in) + " col0 " + std::to_string(col0));
      StoredMatrix m(kind, w, in, col0, ++seed);
      const TileActivations x(total_rows, in, in + 3, ++seed);
      const TypedRows& seg = m.view.segments()[0];
      // dot[0] of every weight row and token row: the one-row sum each output must be.
      std::vector<float> single(w * total_rows);
      for (int64_t j = 0; j < w; ++j) {
        for (int64_t t = 0; t < total_rows; ++t) {
          kernel.dot[0](seg.data + j * seg.row_stride_bytes, x.acts, t,
                        &single[j * total_rows + t]);
        }
      }
      // Without x.q8_c (the kernels that read it form it themselves) the same bits.
      if (x.acts.q8_c != nullptr) {
        typed::Activations no_c = x.acts;
        no_c.q8_c = nullptr;
        for (int64_t j = 0; j < w; ++j) {
          for (int64_t t = 0; t < total_rows; ++t) {
            float v;
            kernel.dot[0](seg.data + j * seg.row_stride_bytes, no_c, t, &v);
            EXPECT_EQ(std::memcmp(&v, &single[j * total_rows + t], sizeof(float)), 0)
                << "weight row " << j << " token row " << t << ": without q8_c " << v
                << ", with it " << single[j * total_rows + t];
          }
        }
      }
      for (int r = 1; r <= typed::kMaxTileRows; ++r) {
        const typed::TileFn tile = kernel.tile[r - 1];
        if (tile == nullptr) continue;
        ++tiles_run;
        // The whole tile, then the k-blocked one over blocks of several sizes (0: none).
        std::vector<int64_t> blockings = {0};
        if (kernel.ktile[r - 1] != nullptr) {
          blockings.insert(blockings.end(), {kernel.k_step, 3 * kernel.k_step, kernel.k_block});
        }
        for (const int64_t r0 : {int64_t{0}, int64_t{1}, total_rows - r}) {
          // dot[qn - 1] over the same rows in groups of kMaxDotRows.
          std::vector<float> grouped(w * r);
          for (int64_t j = 0; j < w; ++j) {
            for (int64_t q0 = 0; q0 < r; q0 += typed::kMaxDotRows) {
              const int64_t qn = std::min<int64_t>(typed::kMaxDotRows, r - q0);
              kernel.dot[qn - 1](seg.data + j * seg.row_stride_bytes, x.acts, r0 + q0,
                                 &grouped[j * r + q0]);
            }
          }
          for (const int64_t kb : blockings) {
            SCOPED_TRACE("k block " + std::to_string(kb));
            std::vector<float> got(16 * typed::kMaxTileRows, -1.0f);
            if (kb == 0) {
              tile(seg.data, seg.row_stride_bytes, x.acts, r0, got.data());
            } else {
              std::vector<float> state(w * typed::kTileStateFloatsPerRow, NAN);
              for (int64_t k0 = 0; k0 < in; k0 += kb) {
                kernel.ktile[r - 1](seg.data, seg.row_stride_bytes, x.acts, r0, k0,
                                    std::min(in, k0 + kb), state.data(), got.data());
              }
            }
            for (int64_t j = 0; j < w; ++j) {
              for (int64_t i = 0; i < r; ++i) {
                const float g = got[j * typed::kMaxTileRows + i];
                const float one = single[j * total_rows + r0 + i], many = grouped[j * r + i];
                EXPECT_EQ(std::memcmp(&g, &one, sizeof(float)), 0)
                    << "R " << r << " r0 " << r0 << " weight row " << j << " token row " << i
                    << ": tile " << g << ", dot[0] " << one;
                EXPECT_EQ(std::memcmp(&g, &many, sizeof(float)), 0)
                    << "R " << r << " r0 " << r0 << " weight row " << j << " token row " << i
                    << ": tile " << g << ", dot[] of rows in groups of " << typed::kMaxDotRows << " "
                    << many;
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(tiles_run, 0) << "tile_w is set but no tile[]";
}

std::vector<Param> AllParams() {
  std::vector<Param> p;
  for (StoredKind k : KernelKinds()) {
    for (SimdPath s : TypedPathsOf(k)) p.emplace_back(k, s);
  }
  return p;
}

INSTANTIATE_TEST_SUITE_P(AllPaths, TypedKernelTest, ::testing::ValuesIn(AllParams()),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return std::string(StoredKindName(std::get<0>(info.param))) + "_" +
                                  SimdPathName(std::get<1>(info.param));
                         });

// The portable kernels against double-precision products of the dequantized weights
// (and, for q8_0, of the dequantized q8_0 activations, which llama.cpp's format defines).
TEST(TypedKernelReferenceTest, PortableMatchesDequantizedProduct) {
  for (StoredKind kind : KernelKinds()) {
    SCOPED_TRACE(StoredKindName(kind));
    const int64_t out = 19, rows = 3, block = BlockOf(kind);
    const int64_t in = block == 256 ? 768 : block == 32 ? 320 : 301;
    StoredMatrix m(kind, out, in, block == 256 ? 256 : block == 32 ? 32 : 3, 21);
    const std::vector<float> x = RandomNormal(rows * in, 22);
    const std::vector<float> xq = KernelActivations(kind, x, in);
    if (block > 1) {
      // The quantization itself: within half a step of x plus, for q8_0, the f16
      // rounding of d (q is computed with the f32 scale, as llama.cpp does).
      for (int64_t k = 0; k < rows * in; ++k) {
        float amax = 0;
        const int64_t qb = block;  // q8_K for the K-quants, q8_0 for the 32-value types
        for (int64_t j = k / qb * qb; j < k / qb * qb + qb; ++j) amax = std::max(amax, std::abs(x[j]));
        const double step = amax / 127.0;
        EXPECT_LE(std::abs(xq[k] - x[k]), (0.5 + 127.0 / 2048) * step * 1.001 + 1e-30) << k;
      }
    }
    std::vector<float> y(rows * out);
    TypedLinearOnPath(x.data(), in, rows, m.view, 0.0f, y.data(), out, nullptr,
                      SimdPath::kPortable);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t o = 0; o < out; ++o) {
        double want = 0;
        for (int64_t k = 0; k < in; ++k) want += double(xq[r * in + k]) * m.dense[o * in + k];
        EXPECT_NEAR(y[r * out + o], want, Tolerance(xq.data() + r * in, m.dense.data() + o * in, in, 1e-5))
            << r << " " << o;
      }
    }
  }
}

TEST(TypedKernelReferenceTest, Q8_KActivationsAreLlamaCppsBlocks) {
  // q8_K super-blocks as ggml's quantize_row_q8_K_ref writes them: the value of largest
  // magnitude becomes -127 (d = max / -127, kept f32), q = round-half-even(x / d) at most
  // 127, bsums per 16; an all-zero super-block has d = 0 and zero quants and sums.
  std::vector<float> x(768, 0.0f);
  for (int j = 0; j < 256; ++j) x[j] = (j % 37 - 18) * 0.125f;  // |x| <= 2.25
  x[100] = 3.0f;                        // block 0's largest, positive: becomes -127
  x[256] = -127.0f;                     // block 1: d = 1 exactly, q = x rounded
  x[257] = 2.5f;                        // half to even: 2, not 3
  x[258] = -3.5f;                       // -4
  x[259] = 0.5f;                        // 0
  x[260] = 126.6f;                      // 127
  std::vector<int8_t> q(768);
  std::vector<float> d(3);
  std::vector<int16_t> bs(48);
  typed::QuantizeQ8_K(x.data(), 768, q.data(), d.data(), bs.data());
  EXPECT_EQ(d[0], 1.0f / (-127.0f / 3.0f));
  EXPECT_EQ(q[100], -127);
  EXPECT_EQ(q[0], static_cast<int8_t>(std::nearbyint((-127.0f / 3.0f) * x[0])));
  EXPECT_GT(q[0], 0);  // x[0] < 0 and d < 0
  EXPECT_EQ(d[1], 1.0f);
  EXPECT_EQ(q[256], -127);
  EXPECT_EQ(q[257], 2);
  EXPECT_EQ(q[258], -4);
  EXPECT_EQ(q[259], 0);
  EXPECT_EQ(q[260], 127);
  for (int g = 0; g < 32; ++g) {
    int s = 0;
    for (int l = 0; l < 16; ++l) s += q[g * 16 + l];
    EXPECT_EQ(bs[g], s) << g;
  }
  EXPECT_EQ(d[2], 0.0f);
  for (int j = 512; j < 768; ++j) EXPECT_EQ(q[j], 0);
  for (int g = 32; g < 48; ++g) EXPECT_EQ(bs[g], 0);
}

TEST(TypedKernelReferenceTest, Q8_0ActivationsAreLlamaCppsBlocks) {
  // q8_0 activation blocks as ggml's quantize_row_q8_0_ref writes them: d = amax / 127
  // rounded to f16, q = round(x / d) half away from zero; an all-zero block has d = 0.
  std::vector<float> x(64, 0.0f);
  for (int j = 0; j < 32; ++j) x[j] = (j - 16) * 0.25f;  // amax 4 at j = 0
  std::vector<int8_t> q(64);
  std::vector<float> d(2);
  typed::QuantizeQ8_0(x.data(), 64, q.data(), d.data());
  EXPECT_EQ(d[0], F16ToF32(F32ToF16(4.0f / 127.0f)));
  EXPECT_EQ(q[0], -127);
  EXPECT_EQ(q[16], 0);
  EXPECT_EQ(q[24], static_cast<int8_t>(std::round(2.0f * (127.0f / 4.0f))));
  EXPECT_EQ(d[1], 0.0f);
  for (int j = 32; j < 64; ++j) EXPECT_EQ(q[j], 0);
}

TEST(TypedKernelReferenceTest, Q8_0QuantizerPathsAgree) {
  // Every path's QuantizeQ8_0 against the portable loop, byte for byte: random blocks of
  // several magnitudes, an all-zero block, blocks with amax 127 (id = 1) holding exact
  // halves (+-0.5, +-2.5, -3.5, 126.5: round half away from zero), negative amax, tiny values.
  // (A block whose max |x| is below ~4e-37 overflows 1 / scale: its quants are unspecified,
  // its d is 0 on every path, so its products are 0 either way.)
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int64_t n = 32 * 40;
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = u(rng) * std::pow(10.0f, static_cast<float>(i / 32 % 7) - 3);
  for (int j = 0; j < 32; ++j) x[32 + j] = 0.0f;
  const float halves[] = {0.5f, -0.5f, 2.5f, -2.5f, -3.5f, 126.5f, -126.5f, 1.5f, 63.5f, -0.49999997f};
  for (int j = 0; j < 32; ++j) x[64 + j] = j == 5 ? 127.0f : halves[j % 10];
  for (int j = 0; j < 32; ++j) x[96 + j] = j == 9 ? -127.0f : halves[(j + 3) % 10] * 0.5f;
  for (int j = 0; j < 32; ++j) x[128 + j] = (j - 15) * 1e-30f;  // tiny (d rounds to 0)
  for (int j = 0; j < 32; ++j) x[160 + j] = (j - 16) * 0.25f;
  std::vector<int8_t> q_ref(n), q(n);
  std::vector<float> d_ref(n / 32), s_ref(n / 32), d(n / 32), s(n / 32);
  typed::QuantizeQ8_0Portable(x.data(), n, q_ref.data(), d_ref.data(), s_ref.data());
  int ran = 0;
  for (SimdPath path : {SimdPath::kPortable, SimdPath::kAvx2, SimdPath::kAvx512}) {
    if (MissingFeature(path, DetectedCpuFeatures()) != nullptr) continue;
    ++ran;
    SCOPED_TRACE(SimdPathName(path));
    std::fill(q.begin(), q.end(), int8_t{99});
    typed::QuantizeQ8_0OnPath(path, x.data(), n, q.data(), d.data(), s.data());
    EXPECT_EQ(std::memcmp(q.data(), q_ref.data(), n), 0);
    EXPECT_EQ(std::memcmp(d.data(), d_ref.data(), d.size() * 4), 0);
    EXPECT_EQ(std::memcmp(s.data(), s_ref.data(), s.size() * 4), 0);
    for (int64_t i = 0; i < n; ++i) {
      if (q[i] != q_ref[i]) {
        ADD_FAILURE() << "value " << i << " = " << x[i] << ": " << int{q[i]} << " vs " << int{q_ref[i]};
        break;
      }
    }
    // Without s, the quants and scales are the same.
    typed::QuantizeQ8_0OnPath(path, x.data(), n, q.data(), d.data());
    EXPECT_EQ(std::memcmp(q.data(), q_ref.data(), n), 0);
  }
  EXPECT_GE(ran, 1);
  // The exact halves really are rounded away from zero (the reference itself).
  EXPECT_EQ(q_ref[64 + 0], 1);
  EXPECT_EQ(q_ref[64 + 1], -1);
  EXPECT_EQ(q_ref[64 + 2], 3);
  EXPECT_EQ(q_ref[64 + 4], -4);
  EXPECT_EQ(q_ref[64 + 5], 127);
  EXPECT_EQ(q_ref[64 + 9], 0);
}

// Every q8_K quantizer path writes the portable bytes: random rows with outliers, ties
// at x.5 after scaling, a super-block whose largest magnitude appears with both signs
// (the first one sets the sign of d), one of tiny values and one all zero.
TEST(TypedKernelReferenceTest, Q8_KQuantizerPathsAgree) {
  const int64_t n = 256 * 6;
  std::vector<float> x = RandomNormal(n, 21);
  for (int64_t i = 0; i < 256; i += 13) x[i] *= 30.0f;
  for (int j = 0; j < 256; ++j) x[256 + j] = (j % 9 - 4) * 0.5f;   // max 2: q = x * 63.5
  x[256 + 200] = -127.0f;                                          // d = 1: ties stay ties
  for (int j = 0; j < 256; ++j) x[512 + j] = (j % 7) * 0.5f + 0.5f;  // ties at 127 / 4 steps
  x[768 + 10] = -5.0f;
  x[768 + 20] = 5.0f;  // same magnitude, later: d from the -5
  for (int j = 0; j < 256; ++j) x[1024 + j] = (j - 128) * 1e-30f;
  std::fill(x.begin() + 1280, x.end(), 0.0f);
  std::vector<int8_t> q_ref(n), q(n);
  std::vector<float> d_ref(n / 256), d(n / 256);
  std::vector<int16_t> bs_ref(n / 16), bs(n / 16);
  typed::QuantizeQ8_KPortable(x.data(), n, q_ref.data(), d_ref.data(), bs_ref.data());
  EXPECT_GT(d_ref[3], 0.0f);  // -5 first: d = -5 / -127
  int ran = 0;
  for (SimdPath path : {SimdPath::kPortable, SimdPath::kAvx512}) {
    if (MissingFeature(path, DetectedCpuFeatures()) != nullptr) continue;
    ++ran;
    SCOPED_TRACE(SimdPathName(path));
    std::fill(q.begin(), q.end(), int8_t{99});
    typed::QuantizeQ8_KOnPath(path, x.data(), n, q.data(), d.data(), bs.data());
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(q[i], q_ref[i]) << "value " << i << " = " << x[i];
    }
    EXPECT_EQ(std::memcmp(d.data(), d_ref.data(), d.size() * 4), 0);
    EXPECT_EQ(bs, bs_ref);
  }
  EXPECT_GE(ran, 1);
}

TEST(CpuIsaTest, FeaturesNarrowAndNameWhatIsMissing) {
  CpuFeatures all;
  all.avx2 = all.avx512 = all.avx512_vnni = all.avx512_bf16 = all.avx_vnni = true;
  EXPECT_EQ(NarrowCpuFeatures(all, "none"), NoCpuFeatures());
  EXPECT_EQ(NarrowCpuFeatures(all, "portable"), NoCpuFeatures());
  const CpuFeatures avx2 = NarrowCpuFeatures(all, "avx2");
  EXPECT_TRUE(avx2.avx2);
  EXPECT_FALSE(avx2.avx512);
  // avx512 without avx2 allowed is off: every AVX-512 path also uses AVX2/FMA/F16C.
  EXPECT_FALSE(NarrowCpuFeatures(all, "avx512").avx512);
  EXPECT_EQ(NarrowCpuFeatures(all, "avx2,avx512,avx512_vnni,avx512_bf16,avx_vnni"), all);
  CpuFeatures none_detected;
  EXPECT_EQ(NarrowCpuFeatures(none_detected, "avx2,avx512"), NoCpuFeatures());

  EXPECT_EQ(MissingFeature(SimdPath::kPortable, NoCpuFeatures()), nullptr);
  EXPECT_STREQ(MissingFeature(SimdPath::kAvx512Vnni, avx2), "avx512");
  CpuFeatures z4 = all;
  z4.avx_vnni = false;  // an AMD Zen 4
  EXPECT_STREQ(MissingFeature(SimdPath::kAvxVnni, z4), "avx_vnni");
  EXPECT_EQ(MissingFeature(SimdPath::kAvx512Bf16, z4), nullptr);
  EXPECT_EQ(TypedPathFor(StoredKind::kQ8_0, z4), SimdPath::kAvx512Vnni);
  EXPECT_EQ(TypedPathFor(StoredKind::kBF16, z4), SimdPath::kAvx512Bf16);
  EXPECT_EQ(TypedPathFor(StoredKind::kF16, z4), SimdPath::kAvx512);
  EXPECT_EQ(TypedPathFor(StoredKind::kQ8_0, avx2), SimdPath::kAvx2);
  EXPECT_EQ(TypedPathFor(StoredKind::kF16, NoCpuFeatures()), SimdPath::kPortable);

  // What the CPU reports is self-consistent, and the f32 kernels' path follows it.
  const CpuFeatures d = DetectedCpuFeatures();
  EXPECT_TRUE(!d.avx512 || d.avx2);
  EXPECT_TRUE(!(d.avx512_vnni || d.avx512_bf16) || d.avx512);
  EXPECT_TRUE(!d.avx_vnni || d.avx2);
  EXPECT_EQ(BestCpuIsa() == CpuIsa::kAvx2, EnabledCpuFeatures().avx2);
  std::cout << "this CPU: " << CpuFeaturesString(d) << "; kernels use "
            << CpuFeaturesString(EnabledCpuFeatures()) << "\n";
}

}  // namespace
}  // namespace folio::worker::kernels
