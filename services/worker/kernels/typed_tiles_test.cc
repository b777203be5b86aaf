// Register tiles (typed_dot.h's TileFn) called directly against dot[]: for every stored
// kind and SIMD path of this CPU whose kernel has tiles, each tile of tile_w weight rows x
// R = 1..8 token rows must give every output bit for bit what dot[0] gives it, over ragged
// row lengths (odd block counts, a last lone block), a row stride wider than a row, and a
// first token row other than 0. Paths the CPU lacks are skipped naming the feature.
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "services/worker/kernels/cpu_isa.h"
#include "services/worker/kernels/kernel_test_util.h"
#include "services/worker/kernels/typed_dot.h"
#include "services/worker/kernels/typed_gemm.h"
#include "services/worker/model/weight_format.h"

namespace folio::worker::kernels {
namespace {

const WeightFormat* FormatOf(StoredKind kind) {
  switch (kind) {
    case StoredKind::kF16:
      return &kF16Format;
    case StoredKind::kBF16:
      return &kBF16Format;
    case StoredKind::kQ8_0:
      return &kQ8_0Format;
    case StoredKind::kQ4_0:
      return &kQ4_0Format;
    case StoredKind::kQ4_1:
      return &kQ4_1Format;
    case StoredKind::kQ5_0:
      return &kQ5_0Format;
    case StoredKind::kQ5_1:
      return &kQ5_1Format;
    case StoredKind::kQ4_K:
      return &kQ4_KFormat;
    case StoredKind::kQ5_K:
      return &kQ5_KFormat;
    case StoredKind::kQ6_K:
      return &kQ6_KFormat;
    default:
      return nullptr;
  }
}

// Row lengths per block size: odd and even block counts, one block alone.
std::vector<int64_t> LengthsFor(int64_t block) {
  if (block == 256) return {256, 768, 1280, 2304};
  if (block == 32) return {32, 96, 352, 2080};
  return {1, 17, 64, 345};
}

// x [rows, in] in every form a kernel reads, owning its buffers.
struct AllActivations {
  std::vector<float> f32;
  std::vector<uint16_t> bf16;
  std::vector<int8_t> q8, k8;
  std::vector<float> q8_d, q8_s, k8_d;
  std::vector<int16_t> k8_bsums;
  typed::Activations acts;

  AllActivations(int64_t rows, int64_t in, uint64_t seed)
      : f32(testing::RandomNormal(rows * in, seed)) {
    acts.in = in;
    acts.f32 = f32.data();
    acts.ldx = in;
    bf16.resize(rows * in);
    typed::RoundToBf16(f32.data(), rows * in, bf16.data());
    acts.bf16 = bf16.data();
    if (in % typed::kQ8Block == 0) {
      const int64_t blocks = in / typed::kQ8Block;
      q8.resize(rows * in);
      q8_d.resize(rows * blocks);
      q8_s.resize(rows * blocks);
      for (int64_t r = 0; r < rows; ++r) {
        typed::QuantizeQ8_0(f32.data() + r * in, in, q8.data() + r * in, q8_d.data() + r * blocks,
                            q8_s.data() + r * blocks);
      }
      acts.q8 = q8.data();
      acts.q8_d = q8_d.data();
      acts.q8_s = q8_s.data();
    }
    if (in % typed::kQ8KBlock == 0) {
      const int64_t blocks = in / typed::kQ8KBlock;
      k8.resize(rows * in);
      k8_d.resize(rows * blocks);
      k8_bsums.resize(rows * in / 16);
      for (int64_t r = 0; r < rows; ++r) {
        typed::QuantizeQ8_K(f32.data() + r * in, in, k8.data() + r * in, k8_d.data() + r * blocks,
                            k8_bsums.data() + r * (in / 16));
      }
      acts.k8 = k8.data();
      acts.k8_d = k8_d.data();
      acts.k8_bsums = k8_bsums.data();
    }
  }
};

using Param = std::tuple<StoredKind, SimdPath>;

class TypedTileTest : public ::testing::TestWithParam<Param> {};

TEST_P(TypedTileTest, EveryTileOutputIsDotsBitForBit) {
  const auto [kind, path] = GetParam();
  if (const char* missing = MissingFeature(path, DetectedCpuFeatures())) {
    GTEST_SKIP() << SimdPathName(path) << " needs " << missing << ", which this CPU lacks";
  }
  const typed::DotKernel k = typed::KernelFor(kind, path);
  if (!k.ok() || k.tile_w == 0) {
    GTEST_SKIP() << StoredKindName(kind) << " has no tiles on " << SimdPathName(path);
  }
  ASSERT_GE(k.tile_w, 1);
  ASSERT_LE(k.tile_w, 16);
  ASSERT_EQ(16 % k.tile_w, 0);
  const WeightFormat& f = *FormatOf(kind);
  int tiles_run = 0;
  uint64_t seed = 7;
  for (const int64_t in : LengthsFor(f.block_values)) {
    SCOPED_TRACE("in " + std::to_string(in));
    const int64_t row_bytes = f.BytesFor(in);
    const int64_t stride = row_bytes + 2 * f.BytesFor(f.block_values);  // rows not adjacent
    std::vector<uint8_t> w(k.tile_w * stride);
    FillRandomBlocks(f, k.tile_w * stride / f.BytesFor(f.block_values) , 0.5f, ++seed, w.data());
    // Token rows r0 = 1 .. 1 + R of 9: a tile starts anywhere in the activations.
    const AllActivations x(1 + typed::kMaxTileRows, in, ++seed);
    for (int r = 1; r <= typed::kMaxTileRows; ++r) {
      const typed::TileFn tile = k.tile[r - 1];
      if (tile == nullptr) continue;
      ++tiles_run;
      std::vector<float> got(16 * typed::kMaxTileRows, -1.0f);
      tile(w.data(), stride, x.acts, 1, got.data());
      for (int j = 0; j < k.tile_w; ++j) {
        for (int i = 0; i < r; ++i) {
          float want;
          k.dot[0](w.data() + j * stride, x.acts, 1 + i, &want);
          const float g = got[j * typed::kMaxTileRows + i];
          EXPECT_EQ(std::memcmp(&g, &want, sizeof(float)), 0)
              << "R " << r << " weight row " << j << " token row " << i << ": tile " << g
              << ", dot " << want;
        }
      }
    }
  }
  EXPECT_GT(tiles_run, 0) << "tile_w is set but no tile[]";
}

std::vector<Param> TiledParams() {
  std::vector<Param> p;
  for (StoredKind k : {StoredKind::kF16, StoredKind::kBF16, StoredKind::kQ8_0, StoredKind::kQ4_0,
                       StoredKind::kQ4_1, StoredKind::kQ5_0, StoredKind::kQ5_1, StoredKind::kQ4_K,
                       StoredKind::kQ5_K, StoredKind::kQ6_K}) {
    for (SimdPath s : TypedPathsOf(k)) p.emplace_back(k, s);
  }
  return p;
}

INSTANTIATE_TEST_SUITE_P(AllPaths, TypedTileTest, ::testing::ValuesIn(TiledParams()),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return std::string(StoredKindName(std::get<0>(info.param))) + "_" +
                                  SimdPathName(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace folio::worker::kernels
