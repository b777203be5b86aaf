// Paged attention against a plain contiguous attention written here from the formula,
// over a grid of block sizes, head dims, GQA ratios, KV dtypes and ISA paths, with block
// tables scattered randomly over the pool, for decode and prefill chunks in one batch.
#include "services/worker/kernels/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "services/worker/kernels/cache_ops.h"
#include "services/worker/kernels/half.h"
#include "services/worker/kernels/kv_q8.h"

namespace folio::worker::kernels {
namespace {

// Tolerance on each output element: the kernel accumulates in f32 in a different order
// than the double-precision reference; outputs are O(1). For kQ8 the reference reads the
// dequantized cache (scale * q, as f16 runs read the f16-rounded values), so the same
// bound holds: the kernels apply each row's scale once per key (to the score, to the
// weight) instead of per element, a difference of f32 rounding only.
constexpr double kTolerance = 2e-5;

// How CheckAgainstReference checks (defaults: the reference reads what the cache holds).
struct CheckOptions {
  // kQ8 only: multiply every stored scale by this after WriteKv (a deliberately wrong
  // scale, to show the comparison catches one), while the reference keeps the right one.
  float corrupt_scales = 1.0f;
  // Compare with the reference on the unquantized f32 inputs instead, within tolerance.
  bool unquantized_reference = false;
  double tolerance = kTolerance;
  bool expect_match = true;    // false: only measure (max_error), do not fail
  double* max_error = nullptr;  // the largest |out - ref| seen, when set
  int window = 0;               // PagedAttentionArgs::window (the reference honours it too)
  float softcap = 0.0f;         // PagedAttentionArgs::softcap
  int tiled_queries = -1;       // AttentionSeq::tiled_queries of every sequence
};

// Contiguous reference. k, v: [context_len, num_kv_heads, head_dim]; q: [num_queries,
// num_heads, head_dim] for the last num_queries positions. Returns [num_queries,
// num_heads, head_dim].
std::vector<double> ReferenceAttention(const std::vector<float>& q, const std::vector<float>& k,
                                       const std::vector<float>& v, int context_len,
                                       int num_queries, int num_heads, int num_kv_heads,
                                       int head_dim, int window = 0, double softcap = 0) {
  const int group = num_heads / num_kv_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  std::vector<double> out(static_cast<size_t>(num_queries) * num_heads * head_dim, 0.0);
  for (int i = 0; i < num_queries; ++i) {
    const int pos = context_len - num_queries + i;
    for (int h = 0; h < num_heads; ++h) {
      const int kvh = h / group;
      std::vector<double> w(pos + 1);
      double max = -1e300;
      // A window hides the keys with pos - j >= window.
      const int first = window > 0 ? std::max(0, pos - window + 1) : 0;
      for (int j = first; j <= pos; ++j) {
        double s = 0;
        for (int d = 0; d < head_dim; ++d) {
          s += static_cast<double>(q[(i * num_heads + h) * head_dim + d]) *
               k[(static_cast<size_t>(j) * num_kv_heads + kvh) * head_dim + d];
        }
        w[j] = s * scale;
        if (softcap > 0) w[j] = softcap * std::tanh(w[j] / softcap);
        max = std::max(max, w[j]);
      }
      double sum = 0;
      for (int j = first; j <= pos; ++j) sum += (w[j] = std::exp(w[j] - max));
      for (int j = first; j <= pos; ++j) {
        for (int d = 0; d < head_dim; ++d) {
          out[(i * num_heads + h) * head_dim + d] +=
              w[j] / sum * v[(static_cast<size_t>(j) * num_kv_heads + kvh) * head_dim + d];
        }
      }
    }
  }
  return out;
}

// The kernel paths: portable, AVX2, and AVX2 + the AVX-512 kernels (isa kAvx2 with
// PagedAttentionArgs::avx512).
enum class Path { kPortable, kAvx2, kAvx512 };

const char* PathName(Path p) {
  return p == Path::kPortable ? "portable" : p == Path::kAvx2 ? "avx2" : "avx512";
}

// Why this machine cannot run `p`, or nullptr.
const char* MissingPath(Path p) {
  if (p != Path::kPortable && BestCpuIsa() != CpuIsa::kAvx2) return "no AVX2 here";
  if (p == Path::kAvx512 && !EnabledCpuFeatures().avx512) return "no AVX-512 here";
  return nullptr;
}

// Every path this machine runs, portable first.
std::vector<Path> SupportedPaths() {
  std::vector<Path> paths;
  for (Path p : {Path::kPortable, Path::kAvx2, Path::kAvx512}) {
    if (MissingPath(p) == nullptr) paths.push_back(p);
  }
  return paths;
}

struct SeqCase {
  int context_len;
  int num_queries;  // 1 = decode; == context_len = prefill from scratch; else a later chunk
};

using Param =
    std::tuple<int /*block_size*/, int /*head_dim*/, int /*gqa*/, KvDType, Path, bool /*tiled*/>;

class PagedAttentionTest : public ::testing::TestWithParam<Param> {};

// Runs one batch of `cases` through PagedAttention on a pool of two threads (prefill
// chunks on the tiled kernel or, tiled = false, on the per-query kernel) and compares
// every output row with the double-precision reference. Returns the outputs, rows
// out_stride = num_heads * head_dim + 5 apart.
std::vector<float> CheckAgainstReference(int block_size, int head_dim, int gqa, KvDType dtype,
                                         Path path, int num_kv_heads,
                                         const std::vector<SeqCase>& cases, bool tiled = true,
                                         uint32_t seed = 0, const CheckOptions& opt = {}) {
  const int num_heads = num_kv_heads * gqa;

  std::mt19937 rng(seed != 0 ? seed : block_size * 1000 + head_dim * 10 + gqa);
  std::normal_distribution<float> normal(0.0f, 1.0f);

  // Scatter every sequence's blocks over a pool with spare blocks, in random order.
  std::vector<int> blocks_needed;
  int total_blocks = 0;
  for (const SeqCase& c : cases) {
    blocks_needed.push_back((c.context_len + block_size - 1) / block_size);
    total_blocks += blocks_needed.back();
  }
  const int num_blocks = total_blocks + 7;
  std::vector<int32_t> perm(num_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);

  KvCacheView kv;
  kv.dtype = dtype;
  kv.num_blocks = num_blocks;
  kv.block_size = block_size;
  kv.num_kv_heads = num_kv_heads;
  kv.head_dim = head_dim;
  const size_t elems = static_cast<size_t>(num_blocks) * kv.block_stride();
  const size_t bytes = elems * (KvRowBytes(dtype, head_dim) / kv.row_stride());
  std::vector<char> kbuf(bytes), vbuf(bytes);
  // Poison the pool: any read outside the table's slots would show up as NaN.
  if (dtype == KvDType::kQ8) {  // values -1, scales 0xffffffff (NaN)
    std::fill(kbuf.begin(), kbuf.end(), '\xff');
    std::fill(vbuf.begin(), vbuf.end(), '\xff');
  } else if (dtype == KvDType::kF32) {
    std::fill_n(reinterpret_cast<float*>(kbuf.data()), elems, NAN);
    std::fill_n(reinterpret_cast<float*>(vbuf.data()), elems, NAN);
  } else {
    std::fill_n(reinterpret_cast<uint16_t*>(kbuf.data()), elems, uint16_t{0x7e00});
    std::fill_n(reinterpret_cast<uint16_t*>(vbuf.data()), elems, uint16_t{0x7e00});
  }
  kv.k = kbuf.data();
  kv.v = vbuf.data();

  const int q_width = num_heads * head_dim;
  const int kv_width = num_kv_heads * head_dim;
  int num_tokens = 0;
  for (const SeqCase& c : cases) num_tokens += c.num_queries;
  const int64_t q_stride = q_width + 3;  // rows need not be packed
  std::vector<float> q(num_tokens * q_stride);
  for (float& x : q) x = normal(rng);

  std::vector<std::vector<int32_t>> tables;
  std::vector<std::vector<float>> ks, vs;
  std::vector<AttentionSeq> seqs;
  int next_block = 0;
  int row = 0;
  for (size_t s = 0; s < cases.size(); ++s) {
    const SeqCase& c = cases[s];
    tables.emplace_back(perm.begin() + next_block, perm.begin() + next_block + blocks_needed[s]);
    next_block += blocks_needed[s];
    std::vector<float> k(static_cast<size_t>(c.context_len) * kv_width);
    std::vector<float> v(k.size());
    for (float& x : k) x = normal(rng);
    for (float& x : v) x = normal(rng);
    std::vector<int64_t> slots;
    for (int pos = 0; pos < c.context_len; ++pos) {
      slots.push_back(SlotForPosition(tables.back().data(), block_size, pos));
    }
    WriteKv(k.data(), v.data(), kv_width, slots, kv);
    if (dtype == KvDType::kF16 && !opt.unquantized_reference) {  // what the cache holds
      for (float& x : k) x = HalfToFloat(FloatToHalf(x));
      for (float& x : v) x = HalfToFloat(FloatToHalf(x));
    }
    if (dtype == KvDType::kQ8) {
      for (int pos = 0; pos < c.context_len; ++pos) {
        for (int h = 0; h < num_kv_heads; ++h) {
          const int64_t off = slots[pos] * kv.slot_stride() + h * kv.row_stride();
          for (char* buf : {kbuf.data(), vbuf.data()}) {
            int8_t* row = reinterpret_cast<int8_t*>(buf) + off;
            float* x = (buf == kbuf.data() ? k : v).data() +
                       (static_cast<size_t>(pos) * num_kv_heads + h) * head_dim;
            if (!opt.unquantized_reference) DequantizeQ8Row(row, head_dim, x);
            if (opt.corrupt_scales != 1.0f) {
              const float s = Q8RowScale(row, head_dim) * opt.corrupt_scales;
              std::memcpy(row + head_dim, &s, sizeof(s));
            }
          }
        }
      }
    }
    ks.push_back(std::move(k));
    vs.push_back(std::move(v));
    seqs.push_back(
        {row, c.num_queries, c.context_len, tables.back().data(), opt.tiled_queries});
    row += c.num_queries;
  }

  const int64_t out_stride = q_width + 5;
  std::vector<float> out(num_tokens * out_stride, -7.0f);
  PagedAttentionArgs args;
  args.q = q.data();
  args.q_row_stride = q_stride;
  args.out = out.data();
  args.out_row_stride = out_stride;
  args.num_heads = num_heads;
  args.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  args.isa = path == Path::kPortable ? CpuIsa::kPortable : CpuIsa::kAvx2;
  args.avx512 = path == Path::kAvx512;
  args.tiled_prefill = tiled;
  args.window = opt.window;
  args.softcap = opt.softcap;
  ThreadPool pool(2);
  PagedAttention(args, seqs, kv, &pool);

  for (size_t s = 0; s < cases.size(); ++s) {
    const SeqCase& c = cases[s];
    std::vector<float> qs;
    for (int i = 0; i < c.num_queries; ++i) {
      const float* r = q.data() + (seqs[s].query_offset + i) * q_stride;
      qs.insert(qs.end(), r, r + q_width);
    }
    const std::vector<double> ref = ReferenceAttention(qs, ks[s], vs[s], c.context_len,
                                                       c.num_queries, num_heads, num_kv_heads,
                                                       head_dim, opt.window, opt.softcap);
    for (int i = 0; i < c.num_queries; ++i) {
      const float* r = out.data() + (seqs[s].query_offset + i) * out_stride;
      for (int j = 0; j < q_width; ++j) {
        const double err = std::abs(r[j] - ref[i * q_width + j]);
        if (opt.max_error != nullptr && !(err <= *opt.max_error)) *opt.max_error = err;
        if (!opt.expect_match) continue;
        EXPECT_NEAR(r[j], ref[i * q_width + j], opt.tolerance)
            << "seq " << s << " query " << i << " element " << j;
        if (!(err <= opt.tolerance)) return out;  // one is enough
      }
      EXPECT_EQ(r[q_width], -7.0f) << "wrote past the row";
    }
  }
  return out;
}

TEST_P(PagedAttentionTest, MatchesContiguousReference) {
  const auto [block_size, head_dim, gqa, dtype, path, tiled] = GetParam();
  if (const char* missing = MissingPath(path)) GTEST_SKIP() << missing;
  CheckAgainstReference(block_size, head_dim, gqa, dtype, path, /*num_kv_heads=*/2,
                        {{37, 1}, {1, 1}, {23, 23}, {50, 9}, {block_size, 1},
                         {2 * block_size + 1, block_size + 1}},
                        tiled);
}

// The tiled prefill kernel against the per-query kernel and the reference over random
// shapes: GQA groups 1..16 (tiles of 32 down to 2 query positions), head dims that take
// the AVX2 body (multiples of 8, with and without a 32-lane remainder) or the portable
// one (12), blocks shorter and longer than a key piece (kKeyTile = 32), ragged chunk
// lengths, chunks from position 0 and after a cached prefix, chunks that start or end
// on a block boundary, and decode rows in the same step.
TEST(PagedAttentionTiledTest, MatchesPerQueryKernelOnRandomShapes) {
  std::mt19937 rng(2026);
  const int kGroups[] = {1, 2, 3, 4, 8, 16};
  const int kHeadDims[] = {8, 12, 40, 64, 128};
  const int kBlockSizes[] = {1, 4, 16, 48, 100};
  for (int trial = 0; trial < 24; ++trial) {
    const int gqa = kGroups[rng() % 6];
    const int head_dim = kHeadDims[rng() % 5];
    const int block_size = kBlockSizes[rng() % 5];
    const int num_kv_heads = 1 + rng() % 3;
    const KvDType kDtypes[] = {KvDType::kF16, KvDType::kF32, KvDType::kQ8};
    const KvDType dtype = kDtypes[rng() % 3];
    std::vector<SeqCase> cases;
    const int num_seqs = 1 + rng() % 4;
    for (int s = 0; s < num_seqs; ++s) {
      const int kind = rng() % 5;
      const int chunk = 2 + rng() % 70;
      if (kind == 0) {  // from position 0
        cases.push_back({chunk, chunk});
      } else if (kind == 1) {  // after a cached prefix of whole blocks: starts on a boundary
        cases.push_back({block_size * (1 + static_cast<int>(rng() % 3)) + chunk, chunk});
      } else if (kind == 2) {  // ends on a block boundary
        const int ctx = block_size * ((chunk + block_size - 1) / block_size + 1);
        cases.push_back({ctx, chunk});
      } else if (kind == 3) {  // decode row
        cases.push_back({1 + static_cast<int>(rng() % 90), 1});
      } else {  // anywhere
        cases.push_back({chunk + static_cast<int>(rng() % 90), chunk});
      }
    }
    for (Path path : SupportedPaths()) {
      std::string shape = std::string(PathName(path)) + " " + KvDTypeName(dtype) + " gqa " +
                          std::to_string(gqa) + " hd " + std::to_string(head_dim) + " bs " +
                          std::to_string(block_size) + " kv " + std::to_string(num_kv_heads) +
                          " seqs";
      for (const SeqCase& c : cases) {
        shape += " " + std::to_string(c.context_len) + "/" + std::to_string(c.num_queries);
      }
      SCOPED_TRACE(shape);
      const uint32_t seed = 1 + trial;
      const std::vector<float> tiled = CheckAgainstReference(
          block_size, head_dim, gqa, dtype, path, num_kv_heads, cases, true, seed);
      const std::vector<float> per_query = CheckAgainstReference(
          block_size, head_dim, gqa, dtype, path, num_kv_heads, cases, false, seed);
      ASSERT_EQ(tiled.size(), per_query.size());
      for (size_t i = 0; i < tiled.size(); ++i) {
        ASSERT_NEAR(tiled[i], per_query[i], 2e-5) << "element " << i;
      }
    }
  }
}

// AttentionSeq::tiled_queries splits a chunk: its first rows on the tiled kernel, bit for
// bit as the whole chunk tiled gives them, the rest on the per-query kernel, bit for bit
// the rows of tiled_prefill off, i.e. what decode rows at those positions compute (the
// tiled kernel's online softmax differs in the last bits).
TEST(PagedAttentionTiledTest, TiledQueriesSplitAChunkBitForBit) {
  const std::vector<SeqCase> cases = {{37, 5}, {16, 3}, {90, 6}, {12, 1}};
  const int kRowFloats = 8 * 64 + 5;  // out_stride: 2 kv heads x group 4 x head_dim 64, + 5
  for (Path path : SupportedPaths()) {
    SCOPED_TRACE(PathName(path));
    const std::vector<float> decode =
        CheckAgainstReference(16, 64, 4, KvDType::kF16, path, 2, cases, false, 5);
    const std::vector<float> tiled =
        CheckAgainstReference(16, 64, 4, KvDType::kF16, path, 2, cases, true, 5);
    // The comparison can tell: the kernels' sums differ somewhere.
    EXPECT_NE(std::memcmp(tiled.data(), decode.data(), tiled.size() * sizeof(float)), 0);
    for (int split : {0, 2}) {
      SCOPED_TRACE("tiled_queries " + std::to_string(split));
      CheckOptions opt;
      opt.tiled_queries = split;
      const std::vector<float> mixed =
          CheckAgainstReference(16, 64, 4, KvDType::kF16, path, 2, cases, true, 5, opt);
      ASSERT_EQ(mixed.size(), decode.size());
      int row = 0;
      for (const SeqCase& c : cases) {
        for (int i = 0; i < c.num_queries; ++i, ++row) {
          // A lone query asked to be tiled is a tile of one (checked against the reference
          // only): neither run above has it.
          if (i < split && c.num_queries == 1) continue;
          const std::vector<float>& want = i < split ? tiled : decode;
          EXPECT_EQ(std::memcmp(mixed.data() + row * kRowFloats, want.data() + row * kRowFloats,
                                kRowFloats * sizeof(float)),
                    0)
              << "row " << i << " of the chunk of " << c.num_queries;
        }
      }
    }
  }
}

// Decode rows on every path against the reference and the portable kernel: every GQA
// group 1..16 (and 32: sub-groups of 16 on AVX-512), head dims that take the AVX-512
// body (multiples of 16) or fall back to AVX2 (8, 40, 72), block sizes that split the
// 16-lane key pieces (1, 3, 17) or not, contexts shorter and longer than the prefetch
// distance, ragged last blocks, 1-4 kv heads, rows that get all kv heads of a query in
// one item and rows that get them split.
TEST(PagedAttentionDecodeTest, MatchesPortableOnRandomShapes) {
  std::mt19937 rng(21);
  const int kHeadDims[] = {8, 16, 32, 40, 64, 72, 96, 128};
  const int kBlockSizes[] = {1, 3, 16, 17, 32, 100};
  for (int trial = 0; trial < 40; ++trial) {
    const int gqa = trial < 32 ? 1 + trial % 16 : 32;
    const int head_dim = kHeadDims[rng() % 8];
    const int block_size = kBlockSizes[rng() % 6];
    const int num_kv_heads = 1 + rng() % 4;
    const KvDType kDtypes[] = {KvDType::kF16, KvDType::kF32, KvDType::kQ8};
    const KvDType dtype = kDtypes[rng() % 3];
    std::vector<SeqCase> cases;
    const int num_seqs = 1 + rng() % 6;
    for (int s = 0; s < num_seqs; ++s) {
      cases.push_back({1 + static_cast<int>(rng() % (s == 0 ? 300 : 90)), 1});
    }
    std::string shape = std::string(KvDTypeName(dtype)) + " gqa " + std::to_string(gqa) + " hd " +
                        std::to_string(head_dim) + " bs " + std::to_string(block_size) +
                        " kv " + std::to_string(num_kv_heads) + " ctx";
    for (const SeqCase& c : cases) shape += " " + std::to_string(c.context_len);
    SCOPED_TRACE(shape);
    const uint32_t seed = 100 + trial;
    const std::vector<float> portable = CheckAgainstReference(
        block_size, head_dim, gqa, dtype, Path::kPortable, num_kv_heads, cases, true, seed);
    for (Path path : SupportedPaths()) {
      if (path == Path::kPortable) continue;
      SCOPED_TRACE(PathName(path));
      const std::vector<float> out = CheckAgainstReference(block_size, head_dim, gqa, dtype, path,
                                                           num_kv_heads, cases, true, seed);
      ASSERT_EQ(out.size(), portable.size());
      for (size_t i = 0; i < out.size(); ++i) {
        ASSERT_NEAR(out[i], portable[i], 2e-5) << "element " << i;
      }
    }
  }
}

// Sliding windows (Gemma's local layers) and score softcaps (Gemma 2), decode and
// prefill chunks, windows inside a block, across blocks and wider than the context.
// Both kernels: the tiled one (decode rows as one-query tiles; the default) and the
// per-query one (tiled_prefill off: AVX-512's, AVX2's for group 2, or the generic body).
TEST(PagedAttentionWindowTest, WindowsAndSoftcapsMatchTheReference) {
  for (Path path : SupportedPaths()) {
    for (bool tiled : {true, false}) {
      for (KvDType dtype : {KvDType::kF32, KvDType::kF16, KvDType::kQ8}) {
        for (int window : {1, 5, 16, 23, 40, 500}) {
          for (float softcap : {0.0f, 2.0f}) {
            SCOPED_TRACE(::testing::Message() << PathName(path) << (tiled ? " tiled" : " per-query")
                                              << " window " << window << " softcap " << softcap);
            CheckOptions opt;
            opt.window = window;
            opt.softcap = softcap;
            CheckAgainstReference(16, 64, 2, dtype, path, 2,
                                  {{70, 1}, {40, 40}, {90, 17}, {3, 1}, {300, 64}}, tiled, 31, opt);
          }
        }
        CheckOptions cap_only;
        cap_only.softcap = 0.5f;
        CheckAgainstReference(8, 32, 4, dtype, path, 1, {{33, 1}, {20, 20}}, tiled, 32, cap_only);
      }
    }
  }
}

// The per-query kernels specialised by group (AVX2: 1, 2, 4, 8 query heads a kv head, so
// 8, 4, 2, 1 keys a group), with windows that start inside a block, between groups of keys
// and at a block's start, with and without a softcap; group 3 takes the generic body.
TEST(PagedAttentionWindowTest, EveryGroupWidthHasWindowsAndSoftcaps) {
  for (Path path : SupportedPaths()) {
    for (int gqa : {1, 3, 4, 8}) {
      for (KvDType dtype : {KvDType::kF16, KvDType::kQ8}) {
        for (int window : {7, 16, 37}) {
          for (float softcap : {0.0f, 2.0f}) {
            SCOPED_TRACE(::testing::Message() << PathName(path) << " gqa " << gqa << " "
                                              << KvDTypeName(dtype) << " window " << window
                                              << " softcap " << softcap);
            CheckOptions opt;
            opt.window = window;
            opt.softcap = softcap;
            CheckAgainstReference(16, 64, gqa, dtype, path, 2, {{70, 1}, {90, 3}, {5, 1}},
                                  /*tiled=*/false, 34, opt);
          }
        }
      }
    }
  }
}

// The window is not ignored: a window of 1 differs from full attention.
TEST(PagedAttentionWindowTest, AWindowChangesTheOutput) {
  CheckOptions one;
  one.window = 1;
  const std::vector<float> windowed =
      CheckAgainstReference(16, 64, 2, KvDType::kF32, Path::kPortable, 2, {{40, 1}}, true, 33, one);
  const std::vector<float> full =
      CheckAgainstReference(16, 64, 2, KvDType::kF32, Path::kPortable, 2, {{40, 1}}, true, 33);
  EXPECT_NE(windowed, full);
}

TEST(PagedAttentionFewRowsTest, SplitsHeadsAndWideGroups) {
  // One or two decode rows with four kv heads leave too few items for whole-query work,
  // so the heads are split across items; groups of 3 and 8 take the generic and the
  // widest blocked AVX2 bodies.
  for (Path path : SupportedPaths()) {
    for (int gqa : {3, 8}) {
      for (KvDType dtype : {KvDType::kF32, KvDType::kF16, KvDType::kQ8}) {
        SCOPED_TRACE(std::string(PathName(path)) + " gqa " + std::to_string(gqa) + " " +
                     KvDTypeName(dtype));
        CheckAgainstReference(16, 64, gqa, dtype, path, /*num_kv_heads=*/4, {{70, 1}});
        CheckAgainstReference(16, 64, gqa, dtype, path, /*num_kv_heads=*/4, {{5, 1}, {33, 1}});
      }
    }
  }
}

TEST(PagedAttentionTiledTest, GroupWiderThanATile) {
  // 100 query heads per kv head: a tile is one query position of 100 rows (more than
  // kTileRows, not a multiple of the AVX2 kernels' 6-row tiles).
  for (Path path : SupportedPaths()) {
    SCOPED_TRACE(PathName(path));
    CheckAgainstReference(16, 64, 100, KvDType::kF16, path, /*num_kv_heads=*/1,
                          {{40, 17}, {3, 2}, {1, 1}});
  }
}

// kQ8 against the reference on the unquantized inputs. Each stored value is within
// half a step (max|row| / 254) of its input: for N(0, 1) rows of 64 that is <= ~0.015,
// mean-square error step^2 / 12 (~0.0065 rms). V's errors average over the softmax
// weights (at most one half step); K's errors move each score by about
// scale * |q| * rms(e) ~ 0.0065 and so the weights by that fraction, moving the output
// by ~0.0065 * spread of v (~1). 0.05 holds both with room (measured max below: about
// 0.02 on these shapes, printed); a scale 2% off fails the stored-value check (2e-5)
// below by orders of magnitude.
TEST(PagedAttentionQ8Test, CloseToUnquantizedReference) {
  for (Path path : SupportedPaths()) {
    for (bool tiled : {true, false}) {
      SCOPED_TRACE(std::string(PathName(path)) + (tiled ? " tiled" : " per-query"));
      double max_error = 0;
      CheckOptions opt;
      opt.unquantized_reference = true;
      opt.tolerance = 0.05;
      opt.max_error = &max_error;
      CheckAgainstReference(16, 64, 4, KvDType::kQ8, path, 2,
                            {{300, 1}, {1, 1}, {77, 77}, {120, 40}, {17, 1}}, tiled, 9, opt);
      CheckAgainstReference(7, 128, 1, KvDType::kQ8, path, 3, {{200, 1}, {64, 33}}, tiled, 10,
                            opt);
      EXPECT_GT(max_error, 1e-3) << "the quantization error should be visible";
      std::printf("%s %s: max |q8 - f32 reference| = %.4f\n", PathName(path),
                  tiled ? "tiled" : "per-query", max_error);
    }
  }
}

// The stored-value comparison catches a scale off by 2% (K and V) on every path, for
// decode rows and prefill chunks: the tolerance is no rubber stamp.
TEST(PagedAttentionQ8Test, WrongScaleIsCaught) {
  for (Path path : SupportedPaths()) {
    for (float f : {1.02f, 0.98f}) {
      SCOPED_TRACE(std::string(PathName(path)) + " scale x " + std::to_string(f));
      double decode_error = 0, prefill_error = 0;
      CheckOptions opt;
      opt.corrupt_scales = f;
      opt.expect_match = false;
      opt.max_error = &decode_error;
      CheckAgainstReference(16, 64, 2, KvDType::kQ8, path, 2, {{90, 1}, {33, 1}}, true, 11, opt);
      opt.max_error = &prefill_error;
      CheckAgainstReference(16, 64, 2, KvDType::kQ8, path, 2, {{60, 60}}, true, 12, opt);
      EXPECT_GT(decode_error, 100 * kTolerance);
      EXPECT_GT(prefill_error, 100 * kTolerance);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Grid, PagedAttentionTest,
    ::testing::Combine(::testing::Values(1, 8, 16, 32), ::testing::Values(8, 64, 128),
                       ::testing::Values(1, 2, 4),
                       ::testing::Values(KvDType::kF32, KvDType::kF16, KvDType::kQ8),
                       ::testing::Values(Path::kPortable, Path::kAvx2, Path::kAvx512),
                       ::testing::Bool()),
    [](const ::testing::TestParamInfo<Param>& info) {
      return "bs" + std::to_string(std::get<0>(info.param)) + "_hd" +
             std::to_string(std::get<1>(info.param)) + "_gqa" +
             std::to_string(std::get<2>(info.param)) + "_" +
             KvDTypeName(std::get<3>(info.param)) + "_" + PathName(std::get<4>(info.param)) +
             (std::get<5>(info.param) ? "_tiled" : "_perquery");
    });

}  // namespace
}  // namespace folio::worker::kernels
