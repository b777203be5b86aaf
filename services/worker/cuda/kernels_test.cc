// Every CUDA kernel against its CPU reference (services/worker/kernels) over a grid of
// shapes: head sizes, GQA ratios, block sizes, KV dtypes, single- and multi-partition
// attention, scattered block tables, prefill chunks mixed with decode rows. Skips where
// the machine has no CUDA device.
#include "services/worker/cuda/kernels.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "services/worker/cuda/gpu_test_util.h"
#include "services/worker/engine/test_models.h"
#include "services/worker/kernels/cache_ops.h"
#include "services/worker/kernels/half.h"
#include "services/worker/kernels/paged_attention.h"
#include "services/worker/kernels/rms_norm.h"
#include "services/worker/kernels/rope.h"
#include "services/worker/kernels/swiglu.h"
#include "services/worker/kernels/thread_pool.h"

namespace folio::worker::cuda {
namespace {

namespace k = ::folio::worker::kernels;
using testing::Bf16ToFloat;
using testing::Download;
using testing::FloatToBf16;
using testing::Upload;

std::vector<float> RandomFloats(size_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

float MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

// (head_dim, group, block_size, kv dtype, partition size; 0 = default). A partition of
// 1024 keys holds every row in one block (the single-pass path); smaller ones split the
// long row and exercise the merge.
using AttentionCase = std::tuple<int, int, int, DType, int>;

class PagedAttentionTest : public ::testing::TestWithParam<AttentionCase> {};

// Sequences: (cached prefix, new queries): decode rows, prefill chunks over a cached
// prefix, a chunk from position 0, and one long row that spans several partitions.
TEST_P(PagedAttentionTest, MatchesCpuReference) {
  FOLIO_SKIP_WITHOUT_CUDA_DEVICE();
  const auto [head_dim, group, block_size, dtype, partition] = GetParam();
  const int kv_heads = 2;
  const int heads = kv_heads * group;
  const std::vector<std::pair<int, int>> seqs = {{0, 1}, {40, 1}, {37, 9}, {0, 23}, {700, 1}, {5, 3}};
  // Pool and scattered tables.
  int total_blocks = 0;
  std::vector<std::vector<int32_t>> tables;
  for (auto [prefix, n] : seqs) {
    const int blocks = (prefix + n + block_size - 1) / block_size;
    tables.emplace_back(blocks);
    total_blocks += blocks;
  }
  const std::vector<int32_t> perm = ::folio::worker::testing::ScatteredBlocks(total_blocks + 3, 5);
  int next = 0;
  for (auto& t : tables) {
    for (int32_t& b : t) b = perm[next++];
  }
  const int64_t num_blocks = total_blocks + 3;
  const int64_t slot_stride = int64_t{kv_heads} * head_dim;
  const int64_t cache_elems = num_blocks * block_size * slot_stride;

  // K/V values, rounded to the device dtype; the CPU reference reads the same values
  // (f16 bits directly; bf16 as f32 of the rounded value).
  std::vector<float> kf = RandomFloats(cache_elems, 1);
  std::vector<float> vf = RandomFloats(cache_elems, 2);
  std::vector<uint16_t> kbits(cache_elems), vbits(cache_elems);
  for (int64_t i = 0; i < cache_elems; ++i) {
    if (dtype == DType::kF16) {
      kbits[i] = k::FloatToHalf(kf[i]);
      vbits[i] = k::FloatToHalf(vf[i]);
      kf[i] = k::HalfToFloat(kbits[i]);
      vf[i] = k::HalfToFloat(vbits[i]);
    } else {
      kbits[i] = FloatToBf16(kf[i]);
      vbits[i] = FloatToBf16(vf[i]);
      kf[i] = Bf16ToFloat(kbits[i]);
      vf[i] = Bf16ToFloat(vbits[i]);
    }
  }
  k::KvCacheView cpu_kv;
  cpu_kv.k = kf.data();
  cpu_kv.v = vf.data();
  cpu_kv.dtype = k::KvDType::kF32;
  cpu_kv.num_blocks = num_blocks;
  cpu_kv.block_size = block_size;
  cpu_kv.num_kv_heads = kv_heads;
  cpu_kv.head_dim = head_dim;

  // Rows.
  std::vector<k::AttentionSeq> cpu_seqs;
  std::vector<int32_t> row_seq, row_context;
  int table_stride = 0;
  for (const auto& t : tables) table_stride = std::max<int>(table_stride, t.size());
  std::vector<int32_t> flat_tables(seqs.size() * table_stride, 0);
  int max_context = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    auto [prefix, n] = seqs[s];
    k::AttentionSeq a;
    a.query_offset = static_cast<int32_t>(row_seq.size());
    a.num_queries = n;
    a.context_len = prefix + n;
    a.block_table = tables[s].data();
    cpu_seqs.push_back(a);
    for (int i = 0; i < n; ++i) {
      row_seq.push_back(static_cast<int32_t>(s));
      row_context.push_back(prefix + i + 1);
    }
    std::copy(tables[s].begin(), tables[s].end(), flat_tables.begin() + s * table_stride);
    max_context = std::max(max_context, prefix + n);
  }
  const int rows = static_cast<int>(row_seq.size());
  const int64_t q_dim = int64_t{heads} * head_dim;
  const int64_t q_stride = q_dim + 8;  // rows further apart than their width, as in fused QKV
  const std::vector<float> q = RandomFloats(rows * q_stride, 3);
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));

  std::vector<float> expected(rows * q_dim);
  k::PagedAttentionArgs args;
  args.q = q.data();
  args.q_row_stride = q_stride;
  args.out = expected.data();
  args.out_row_stride = q_dim;
  args.num_heads = heads;
  args.scale = scale;
  args.isa = k::CpuIsa::kPortable;
  k::ThreadPool pool(1);
  k::PagedAttention(args, cpu_seqs, cpu_kv, &pool);

  DeviceBuffer d_k = Upload(kbits), d_v = Upload(vbits), d_q = Upload(q);
  DeviceBuffer d_seq = Upload(row_seq), d_ctx = Upload(row_context), d_tables = Upload(flat_tables);
  DeviceBuffer d_out = Upload(std::vector<float>(rows * q_dim, -1.0f));
  const int64_t ws = PagedAttentionWorkspaceFloats(rows, heads, head_dim, max_context, partition);
  DeviceBuffer d_ws = Upload(std::vector<float>(std::max<int64_t>(ws, 1), 0.0f));
  KvView kv;
  kv.k = d_k.get();
  kv.v = d_v.get();
  kv.dtype = dtype;
  kv.num_blocks = num_blocks;
  kv.block_size = block_size;
  kv.num_kv_heads = kv_heads;
  kv.head_dim = head_dim;
  PagedAttentionParams p;
  p.q = d_q.as<float>();
  p.q_row_stride = q_stride;
  p.out = d_out.as<float>();
  p.out_row_stride = q_dim;
  p.num_rows = rows;
  p.num_heads = heads;
  p.scale = scale;
  p.row_seq = d_seq.as<int32_t>();
  p.row_context = d_ctx.as<int32_t>();
  p.block_tables = d_tables.as<int32_t>();
  p.block_table_stride = table_stride;
  p.max_context = max_context;
  p.partition_size = partition;
  p.workspace = d_ws.as<float>();
  p.workspace_floats = ws;
  ASSERT_TRUE(LaunchPagedAttention(p, kv, nullptr).ok());
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const std::vector<float> got = Download<float>(d_out, rows * q_dim);
  EXPECT_LE(MaxAbsDiff(got, expected), 2e-5f);
}

std::string CaseName(const ::testing::TestParamInfo<AttentionCase>& info) {
  const auto [head_dim, group, block_size, dtype, partition] = info.param;
  return absl::StrCat("d", head_dim, "_g", group, "_bs", block_size, "_", DTypeName(dtype),
                      partition == 0 ? "_default" : absl::StrCat("_p", partition));
}

INSTANTIATE_TEST_SUITE_P(
    Grid, PagedAttentionTest,
    ::testing::Combine(::testing::Values(8, 16, 64, 128), ::testing::Values(1, 2, 4, 8),
                       ::testing::Values(16), ::testing::Values(DType::kF16),
                       ::testing::Values(64, 1024)),
    CaseName);
INSTANTIATE_TEST_SUITE_P(
    BlockSizesAndBf16, PagedAttentionTest,
    ::testing::Combine(::testing::Values(64, 128), ::testing::Values(4),
                       ::testing::Values(8, 32), ::testing::Values(DType::kF16, DType::kBF16),
                       ::testing::Values(0, 96)),
    CaseName);

TEST(PagedAttentionLimitsTest, RefusesUnsupportedShapesWithAReason) {
  EXPECT_TRUE(AttentionSupports(128, 4));
  EXPECT_FALSE(AttentionSupports(96, 4));
  EXPECT_FALSE(AttentionSupports(128, 3));
  PagedAttentionParams p;
  p.num_rows = 1;
  p.num_heads = 6;
  KvView kv;
  kv.num_kv_heads = 4;
  kv.head_dim = 128;
  const absl::Status s = LaunchPagedAttention(p, kv, nullptr);  // refused before any launch
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("do not group"), std::string::npos) << s;
}

class CacheOpsTest : public ::testing::TestWithParam<DType> {};

TEST_P(CacheOpsTest, WriteKvThenCopyBlocksMatchCpu) {
  FOLIO_SKIP_WITHOUT_CUDA_DEVICE();
  const DType dtype = GetParam();
  const int layers = 2, kv_heads = 2, head_dim = 16, block_size = 8, num_blocks = 12;
  const int64_t block_elems = int64_t{block_size} * kv_heads * head_dim;
  const int64_t layer_elems = num_blocks * block_elems;
  const int tokens = 20;
  const int64_t row_stride = 3 * kv_heads * head_dim;
  const std::vector<float> rows = RandomFloats(tokens * row_stride, 7);
  std::vector<int64_t> slots;
  const std::vector<int32_t> perm = ::folio::worker::testing::ScatteredBlocks(num_blocks, 9);
  for (int i = 0; i < tokens; ++i) slots.push_back(int64_t{perm[i / block_size]} * block_size + i % block_size);

  // Device: layer l's K then V, as the runner lays them out.
  DeviceBuffer d_cache = Upload(std::vector<uint16_t>(2 * layers * layer_elems, 0));
  DeviceBuffer d_rows = Upload(rows), d_slots = Upload(slots);
  for (int l = 0; l < layers; ++l) {
    KvView kv;
    kv.k = d_cache.as<uint16_t>() + 2 * l * layer_elems;
    kv.v = d_cache.as<uint16_t>() + (2 * l + 1) * layer_elems;
    kv.dtype = dtype;
    kv.num_blocks = num_blocks;
    kv.block_size = block_size;
    kv.num_kv_heads = kv_heads;
    kv.head_dim = head_dim;
    // Layer l writes rows shifted by l, so layers differ.
    LaunchWriteKv(d_rows.as<float>() + l, d_rows.as<float>() + kv_heads * head_dim + l,
                  row_stride, d_slots.as<int64_t>(), tokens - l, kv, nullptr);
  }
  const std::vector<int32_t> src = {perm[0], perm[1]};
  const std::vector<int32_t> dst = {perm[5], perm[7]};
  DeviceBuffer d_src = Upload(src), d_dst = Upload(dst);
  LaunchCopyBlocks(d_cache.get(), 2 * layer_elems * 2, layer_elems * 2, layers, block_elems * 2,
                   d_src.as<int32_t>(), d_dst.as<int32_t>(), 2, nullptr);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const std::vector<uint16_t> got = Download<uint16_t>(d_cache, 2 * layers * layer_elems);

  // CPU: f32 caches, then the device's rounding applied to compare bits.
  std::vector<float> cpu(2 * layers * layer_elems, 0.0f);
  for (int l = 0; l < layers; ++l) {
    k::KvCacheView kv;
    kv.k = cpu.data() + 2 * l * layer_elems;
    kv.v = cpu.data() + (2 * l + 1) * layer_elems;
    kv.dtype = k::KvDType::kF32;
    kv.num_blocks = num_blocks;
    kv.block_size = block_size;
    kv.num_kv_heads = kv_heads;
    kv.head_dim = head_dim;
    k::WriteKv(rows.data() + l, rows.data() + kv_heads * head_dim + l, row_stride,
               absl::MakeConstSpan(slots).subspan(0, tokens - l), kv);
    k::CopyBlocks({{src[0], dst[0]}, {src[1], dst[1]}}, kv);
  }
  int mismatches = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    const uint16_t want = dtype == DType::kF16 ? k::FloatToHalf(cpu[i]) : FloatToBf16(cpu[i]);
    if (got[i] != want) ++mismatches;
  }
  EXPECT_EQ(mismatches, 0);
}

INSTANTIATE_TEST_SUITE_P(DTypes, CacheOpsTest, ::testing::Values(DType::kF16, DType::kBF16),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

TEST(ElementwiseTest, RmsNormRopeSiluEmbedMatchCpu) {
  FOLIO_SKIP_WITHOUT_CUDA_DEVICE();
  const int rows = 7, dim = 96, heads = 6, head_dim = 16, hidden = 40, vocab = 50;
  const std::vector<float> x = RandomFloats(rows * dim, 11, 2.0f);
  const std::vector<float> w = RandomFloats(dim, 12);
  DeviceBuffer d_x = Upload(x), d_w = Upload(w);

  // RMSNorm, f32 out, all rows; and gathered rows {6, 2} into f32.
  std::vector<float> want(rows * dim);
  k::RmsNorm(x.data(), dim, rows, dim, w.data(), 1e-5f, want.data(), dim);
  DeviceBuffer d_out = Upload(std::vector<float>(rows * dim));
  LaunchRmsNorm(d_x.as<float>(), dim, nullptr, rows, dim, d_w.as<float>(), 1e-5f, d_out.get(),
                dim, DType::kF32, nullptr);
  EXPECT_LE(MaxAbsDiff(Download<float>(d_out, rows * dim), want), 1e-5f) << "rmsnorm";
  const std::vector<int32_t> pick = {6, 2};
  DeviceBuffer d_pick = Upload(pick);
  LaunchRmsNorm(d_x.as<float>(), dim, d_pick.as<int32_t>(), 2, dim, d_w.as<float>(), 1e-5f,
                d_out.get(), dim, DType::kF32, nullptr);
  const std::vector<float> gathered = Download<float>(d_out, 2 * dim);
  EXPECT_LE(MaxAbsDiff(std::vector<float>(gathered.begin(), gathered.begin() + dim),
                       std::vector<float>(want.begin() + 6 * dim, want.begin() + 7 * dim)),
            1e-5f) << "gathered row 6";

  // RMSNorm into f16: the CPU result rounded.
  LaunchRmsNorm(d_x.as<float>(), dim, nullptr, rows, dim, d_w.as<float>(), 1e-5f, d_out.get(),
                dim, DType::kF16, nullptr);
  const std::vector<uint16_t> half_out = Download<uint16_t>(d_out, rows * dim);
  float worst = 0;
  for (int i = 0; i < rows * dim; ++i) {
    worst = std::max(worst, std::abs(k::HalfToFloat(half_out[i]) - want[i]) /
                                std::max(1.0f, std::abs(want[i])));
  }
  EXPECT_LE(worst, 1e-3f) << "rmsnorm f16";

  // RoPE at scattered positions.
  std::vector<int32_t> positions = {0, 1, 17, 300, 4095, 2, 9};
  std::vector<float> rope = x;
  k::ApplyRope(rope.data(), dim, rows, positions.data(), heads, head_dim, 10000.0f);
  DeviceBuffer d_rope = Upload(x), d_pos = Upload(positions);
  LaunchRope(d_rope.as<float>(), dim, rows, d_pos.as<int32_t>(), heads, head_dim, 10000.0f, nullptr);
  EXPECT_LE(MaxAbsDiff(Download<float>(d_rope, rows * dim), rope), 2e-3f) << "rope";

  // SiLU and multiply.
  const std::vector<float> gate_up = RandomFloats(rows * 2 * hidden, 13, 4.0f);
  std::vector<float> swiglu(rows * hidden);
  k::SwiGlu(gate_up.data(), rows, hidden, swiglu.data());
  DeviceBuffer d_gu = Upload(gate_up), d_h = Upload(std::vector<float>(rows * hidden));
  LaunchSiluAndMul(d_gu.as<float>(), rows, hidden, d_h.get(), DType::kF32, nullptr);
  EXPECT_LE(MaxAbsDiff(Download<float>(d_h, rows * hidden), swiglu), 1e-5f) << "silu";

  // Embedding from a bf16 table.
  const std::vector<float> table = RandomFloats(vocab * dim, 14);
  std::vector<uint16_t> table_bits(table.size());
  for (size_t i = 0; i < table.size(); ++i) table_bits[i] = FloatToBf16(table[i]);
  const std::vector<int32_t> tokens = {3, 49, 0, 3, 17, 8, 21};
  DeviceBuffer d_table = Upload(table_bits), d_tok = Upload(tokens);
  LaunchEmbedTokens(d_tok.as<int32_t>(), rows, d_table.get(), DType::kBF16, 0, vocab, dim,
                    d_out.as<float>(), nullptr);
  const std::vector<float> emb = Download<float>(d_out, rows * dim);
  for (int r = 0; r < rows; ++r) {
    for (int i = 0; i < dim; ++i) {
      ASSERT_EQ(emb[r * dim + i], Bf16ToFloat(table_bits[tokens[r] * dim + i])) << r << "," << i;
    }
  }
  // A vocab-parallel slice: rows [8, 24) of the table; other tokens embed as zeros.
  LaunchEmbedTokens(d_tok.as<int32_t>(), rows, d_table.as<uint16_t>() + 8 * dim, DType::kBF16, 8,
                    16, dim, d_out.as<float>(), nullptr);
  const std::vector<float> sliced = Download<float>(d_out, rows * dim);
  for (int r = 0; r < rows; ++r) {
    const bool here = tokens[r] >= 8 && tokens[r] < 24;
    for (int i = 0; i < dim; ++i) {
      ASSERT_EQ(sliced[r * dim + i], here ? Bf16ToFloat(table_bits[tokens[r] * dim + i]) : 0.0f)
          << r << "," << i;
    }
  }
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
}

}  // namespace
}  // namespace folio::worker::cuda
