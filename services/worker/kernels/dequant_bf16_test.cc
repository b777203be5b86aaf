// RowsToBf16 (dequant_bf16.h): the generic path is TypedMatrix::RowToF32 rounded to bf16
// to nearest even, and every kernel of this CPU writes the same bits, over every stored
// type, windows of rows that cross segments, and a segment that starts mid-row.
#include "services/worker/kernels/dequant_bf16.h"

#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "services/worker/model/weight_format.h"

namespace folio::worker::kernels {
namespace {

struct Kind {
  const WeightFormat* format;
  StoredKind kind;
};

const Kind kKinds[] = {
    {&kF16Format, StoredKind::kF16},   {&kBF16Format, StoredKind::kBF16},
    {&kQ8_0Format, StoredKind::kQ8_0}, {&kQ4_0Format, StoredKind::kQ4_0},
    {&kQ4_1Format, StoredKind::kQ4_1}, {&kQ5_0Format, StoredKind::kQ5_0},
    {&kQ5_1Format, StoredKind::kQ5_1}, {&kQ2_KFormat, StoredKind::kOther},
    {&kQ3_KFormat, StoredKind::kOther}, {&kQ4_KFormat, StoredKind::kQ4_K},
    {&kQ5_KFormat, StoredKind::kQ5_K}, {&kQ6_KFormat, StoredKind::kQ6_K},
};

// 512 values a row: 7 whole rows, then 9 rows that start one block into stored rows of
// 768 values (a row-parallel shard's layout).
struct Matrix {
  std::vector<uint8_t> a, b;
  TypedMatrix w{512};

  explicit Matrix(const Kind& k) {
    const WeightFormat& f = *k.format;
    const int64_t block = f.block_values;
    a.resize(static_cast<size_t>(f.BytesFor(512) * 7));
    b.resize(static_cast<size_t>(f.BytesFor(768) * 9));
    FillRandomBlocks(f, 7 * 512 / block, 0.5f, 11, a.data());
    FillRandomBlocks(f, 9 * 768 / block, 0.5f, 12, b.data());
    w.Append(Rows(k, a.data(), f.BytesFor(512), 7));
    w.Append(Rows(k, b.data() + f.BytesFor(block), f.BytesFor(768), 9));
  }
  static TypedRows Rows(const Kind& k, const uint8_t* data, int64_t stride, int64_t rows) {
    TypedRows r;
    r.data = data;
    r.row_stride_bytes = stride;
    r.rows = rows;
    r.block_values = k.format->block_values;
    r.dequantize = k.format->dequantize;
    r.type_name = k.format->name;
    r.kind = k.kind;
    return r;
  }
};

uint16_t RoundBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

class DequantBf16Test : public ::testing::TestWithParam<Kind> {};

TEST_P(DequantBf16Test, GenericPathIsRowToF32RoundedToNearestEven) {
  Matrix m(GetParam());
  std::vector<float> scratch, row(512);
  std::vector<uint16_t> got(16 * 512);
  RowsToBf16(m.w, 0, 16, got.data(), NoCpuFeatures(), scratch);
  for (int64_t r = 0; r < 16; ++r) {
    m.w.RowToF32(r, row.data());
    for (int64_t k = 0; k < 512; ++k) {
      ASSERT_EQ(got[r * 512 + k], RoundBf16(row[k])) << "row " << r << " value " << k;
    }
  }
}

TEST_P(DequantBf16Test, EveryPathWritesTheGenericBits) {
  const Kind& k = GetParam();
  const CpuFeatures detected = DetectedCpuFeatures();
  if (!HasBf16RowKernel(k.kind, detected)) {
    GTEST_SKIP() << k.format->name << ": no bf16 row kernel on this CPU (avx512_bf16 "
                 << (detected.avx512_bf16 ? "present" : "absent") << ")";
  }
  Matrix m(k);
  std::vector<float> scratch;
  // Windows: all rows, one inside each segment, and one across the boundary.
  for (const auto& [row, n] : {std::pair<int64_t, int64_t>{0, 16}, {2, 3}, {10, 4}, {5, 6}}) {
    std::vector<uint16_t> want(n * 512), got(n * 512, 0xdead);
    RowsToBf16(m.w, row, n, want.data(), NoCpuFeatures(), scratch);
    RowsToBf16(m.w, row, n, got.data(), detected, scratch);
    for (int64_t i = 0; i < n * 512; ++i) {
      ASSERT_EQ(got[i], want[i]) << k.format->name << " rows [" << row << ", " << row + n
                                 << "): row " << row + i / 512 << " value " << i % 512;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, DequantBf16Test, ::testing::ValuesIn(kKinds),
                         [](const ::testing::TestParamInfo<Kind>& i) {
                           return std::string(i.param.format->name);
                         });

}  // namespace
}  // namespace folio::worker::kernels
