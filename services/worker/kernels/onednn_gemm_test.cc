// OnednnGemm (oneDNN bf16 matmuls on stored rows) against a double-precision reference
// of the same bf16 products, and against Folio's TypedLinear, over the layouts the runner
// hands it: fused segments back to back (one oneDNN matrix) or apart (one per segment), a
// row-parallel shard's rows (starting mid-row, stride > in), padded x / y rows, beta 0 / 1.
#include "services/worker/kernels/onednn_gemm.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "services/worker/kernels/blocked_bf16.h"
#include "services/worker/kernels/cpu_isa.h"
#include "services/worker/kernels/kquant_gemm.h"
#include "services/worker/kernels/typed_gemm.h"
#include "services/worker/model/weight_format.h"

namespace folio::worker::kernels {
namespace {

uint16_t ToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fff + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}
float FromBf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TypedRows Bf16Rows(const uint16_t* data, int64_t stride, int64_t rows) {
  TypedRows r;
  r.data = reinterpret_cast<const uint8_t*>(data);
  r.row_stride_bytes = stride * 2;
  r.rows = rows;
  r.block_values = 1;
  r.dequantize = kBF16Format.dequantize;
  r.type_name = "bf16";
  r.kind = StoredKind::kBF16;
  return r;
}

std::unique_ptr<OnednnGemm> Engine(int threads) {
  absl::StatusOr<std::unique_ptr<OnednnGemm>> e = OnednnGemm::Create(threads);
  if (!e.ok()) return nullptr;
  return *std::move(e);
}

#define SKIP_WITHOUT_ONEDNN(engine)                                                    \
  if (!OnednnAvailable()) GTEST_SKIP() << "built without oneDNN (libdnnl-dev)";       \
  if ((engine) == nullptr) GTEST_SKIP() << OnednnGemm::Create(2).status().message();

// A weight store: `out` rows of `stride` values, the matrix's rows at column `col0`.
struct Store {
  std::vector<uint16_t> v;
  int64_t stride;
};
Store RandomStore(int64_t rows, int64_t stride, std::mt19937& rng) {
  std::normal_distribution<float> n(0.0f, 0.05f);
  Store s{std::vector<uint16_t>(static_cast<size_t>(rows * stride)), stride};
  for (uint16_t& h : s.v) h = ToBf16(n(rng));
  return s;
}

struct Case {
  int64_t rows;
  float beta;
};

// y (out features of `w` from the plan's views) against sum_k bf16(x) * w in double.
void Check(const TypedMatrix& w, OnednnGemm& engine, int64_t rows, float beta, int64_t ldx,
           int64_t ldy, std::mt19937& rng) {
  const OnednnBf16Matrix plan = OnednnBf16Matrix::Of(w);
  ASSERT_FALSE(plan.empty());
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(rows * ldx)), y0(static_cast<size_t>(rows * ldy));
  for (float& v : x) v = u(rng);
  for (float& v : y0) v = u(rng);
  std::vector<float> y = y0, folio = y0;
  ASSERT_TRUE(engine.Linear(x.data(), ldx, rows, plan, beta, y.data(), ldy));
  TypedLinear(x.data(), ldx, rows, w, beta, folio.data(), ldy, nullptr);
  std::vector<float> wrow(static_cast<size_t>(w.in()));
  double worst = 0;
  for (int64_t o = 0; o < w.out(); ++o) {
    w.RowToF32(o, wrow.data());
    for (int64_t r = 0; r < rows; ++r) {
      double want = beta * static_cast<double>(y0[r * ldy + o]), mag = std::abs(want);
      for (int64_t k = 0; k < w.in(); ++k) {
        const double t = static_cast<double>(FromBf16(ToBf16(x[r * ldx + k]))) * wrow[k];
        want += t;
        mag += std::abs(t);
      }
      const double got = y[r * ldy + o];
      worst = std::max(worst, std::abs(got - want) / (mag + 1e-30));
      ASSERT_NEAR(got, want, 1e-5 * mag + 1e-7) << "row " << r << " feature " << o;
      // Folio's kernels: f32 activations (portable, AVX2) or bf16 ones (avx512_bf16).
      ASSERT_NEAR(got, folio[r * ldy + o], 4e-3 * mag + 1e-6) << "row " << r << " feature " << o;
    }
  }
  // Padding columns of y are never written.
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = w.out(); o < ldy; ++o) ASSERT_EQ(y[r * ldy + o], y0[r * ldy + o]);
  }
}

TEST(OnednnGemmTest, SegmentsBackToBackAreOneMatrix) {
  auto engine = Engine(2);
  SKIP_WITHOUT_ONEDNN(engine);
  std::mt19937 rng(1);
  const int64_t in = 96;
  Store s = RandomStore(80, in, rng);  // Q, K, V of one tensor run: 48 + 16 + 16 rows
  TypedMatrix w(in);
  w.Append(Bf16Rows(s.v.data(), in, 48));
  w.Append(Bf16Rows(s.v.data() + 48 * in, in, 16));
  w.Append(Bf16Rows(s.v.data() + 64 * in, in, 16));
  const OnednnBf16Matrix plan = OnednnBf16Matrix::Of(w);
  ASSERT_EQ(plan.parts.size(), 1u);
  EXPECT_EQ(plan.parts[0].rows, 80);
  for (const Case c : {Case{1, 0.0f}, Case{8, 0.0f}, Case{33, 1.0f}, Case{128, 0.0f}}) {
    SCOPED_TRACE(c.rows);
    Check(w, *engine, c.rows, c.beta, in, 80, rng);
  }
}

TEST(OnednnGemmTest, SeparateSegmentsAndPaddedRows) {
  auto engine = Engine(2);
  SKIP_WITHOUT_ONEDNN(engine);
  std::mt19937 rng(2);
  const int64_t in = 64;
  Store gate = RandomStore(40, in, rng), up = RandomStore(24, in, rng);
  TypedMatrix w(in);
  w.Append(Bf16Rows(gate.v.data(), in, 40));
  w.Append(Bf16Rows(up.v.data(), in, 24));
  ASSERT_EQ(OnednnBf16Matrix::Of(w).parts.size(), 2u);
  for (const Case c : {Case{9, 0.0f}, Case{17, 1.0f}, Case{64, 0.5f}}) {
    SCOPED_TRACE(c.rows);
    Check(w, *engine, c.rows, c.beta, in + 5, 64 + 3, rng);
  }
}

TEST(OnednnGemmTest, RowParallelShardStartsMidRow) {
  auto engine = Engine(2);
  SKIP_WITHOUT_ONEDNN(engine);
  std::mt19937 rng(3);
  // wo / w_down's rank 1 of 2: columns [64, 128) of rows 192 wide.
  Store s = RandomStore(48, 192, rng);
  TypedMatrix w(64);
  w.Append(Bf16Rows(s.v.data() + 64, 192, 48));
  const OnednnBf16Matrix plan = OnednnBf16Matrix::Of(w);
  ASSERT_EQ(plan.parts.size(), 1u);
  EXPECT_EQ(plan.parts[0].ld, 192);
  for (const Case c : {Case{8, 1.0f}, Case{40, 0.0f}}) {
    SCOPED_TRACE(c.rows);
    Check(w, *engine, c.rows, c.beta, 64, 48, rng);
  }
}

// A BlockedBf16Matrix of a row-parallel shard's rows (stride > in) as oneDNN's weights: its
// matmul against the double reference (a block laid out other than oneDNN reads it would
// miss by the size of the products), and Folio's GEMV on the same copy against oneDNN.
TEST(OnednnGemmTest, BlockedLayoutIsOnednns) {
  auto engine = Engine(2);
  SKIP_WITHOUT_ONEDNN(engine);
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  ThreadPool pool(2);
  struct Shape {
    int64_t in, out;
  };
  for (const Shape sh : {Shape{96, 80}, Shape{33, 70}, Shape{256, 192}}) {
    SCOPED_TRACE(std::to_string(sh.in) + " -> " + std::to_string(sh.out));
    if (!engine->BlockedLayoutMatches(sh.in, sh.out)) {
      GTEST_SKIP() << "oneDNN (" << engine->impl()
                   << ") keeps another weights layout on this CPU";
    }
    const Store s = RandomStore(sh.out, sh.in + 7, rng);
    TypedMatrix typed(sh.in);
    typed.Append(Bf16Rows(s.v.data() + 7, sh.in + 7, sh.out));
    const BlockedBf16Matrix w(sh.out, sh.in,
                              [&](int64_t o, float* dst) { typed.RowToF32(o, dst); });
    for (const Case c : {Case{1, 0.0f}, Case{8, 1.0f}, Case{33, 0.0f}}) {
      SCOPED_TRACE(c.rows);
      const int64_t ldx = sh.in + 3, ldy = c.beta == 0.0f ? sh.out : sh.out + 5;
      std::vector<float> x(static_cast<size_t>(c.rows * ldx));
      std::vector<float> y0(static_cast<size_t>(c.rows * ldy));
      for (float& v : x) v = u(rng);
      for (float& v : y0) v = u(rng);
      std::vector<float> y = y0, folio = y0;
      ASSERT_TRUE(engine->LinearBlocked(x.data(), ldx, c.rows, w, c.beta, y.data(), ldy));
      const BlockedBf16Path path = BestBlockedBf16Path(DetectedCpuFeatures());
      BlockedBf16Linear(x.data(), ldx, c.rows, w, c.beta, folio.data(), ldy, path, &pool);
      std::vector<float> wrow(static_cast<size_t>(sh.in));
      for (int64_t o = 0; o < sh.out; ++o) {
        typed.RowToF32(o, wrow.data());
        for (int64_t r = 0; r < c.rows; ++r) {
          double want = c.beta * static_cast<double>(y0[r * ldy + o]), mag = std::abs(want);
          for (int64_t k = 0; k < sh.in; ++k) {
            const double t = static_cast<double>(FromBf16(ToBf16(x[r * ldx + k]))) * wrow[k];
            want += t;
            mag += std::abs(t);
          }
          ASSERT_NEAR(y[r * ldy + o], want, 1e-5 * mag + 1e-7) << "row " << r << " out " << o;
          // The same bf16 products on avx512_bf16 (only the order of the sums differs);
          // f32 activations on the widening path.
          const double tol = path == BlockedBf16Path::kAvx512Bf16 ? 1e-5 : 4e-3;
          ASSERT_NEAR(folio[r * ldy + o], y[r * ldy + o], tol * mag + 1e-7)
              << "row " << r << " out " << o << " (" << BlockedBf16PathName(path) << ")";
        }
      }
      for (int64_t r = 0; r < c.rows; ++r) {
        for (int64_t o = sh.out; o < ldy; ++o) ASSERT_EQ(y[r * ldy + o], y0[r * ldy + o]);
      }
    }
  }
}

TEST(OnednnGemmTest, NotAllBf16HasNoPlan) {
  std::vector<uint16_t> v(64 * 32);
  TypedMatrix w(64);
  w.Append(Bf16Rows(v.data(), 64, 16));
  TypedRows f16 = Bf16Rows(v.data() + 16 * 64, 64, 16);
  f16.kind = StoredKind::kF16;
  w.Append(f16);
  EXPECT_TRUE(OnednnBf16Matrix::Of(w).empty());
}

TEST(OnednnGemmTest, ConcurrentCallsGiveTheSerialResults) {
  auto engine = Engine(1);
  SKIP_WITHOUT_ONEDNN(engine);
  std::mt19937 rng(4);
  const int64_t in = 128, out = 96;
  Store s = RandomStore(out, in, rng);
  TypedMatrix w(in);
  w.Append(Bf16Rows(s.v.data(), in, out));
  const OnednnBf16Matrix plan = OnednnBf16Matrix::Of(w);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int64_t rows[] = {16, 24, 16, 40};
  std::vector<std::vector<float>> x(4), serial(4), parallel(4);
  for (int t = 0; t < 4; ++t) {
    x[t].resize(rows[t] * in);
    for (float& v : x[t]) v = u(rng);
    serial[t].assign(rows[t] * out, 0.0f);
    parallel[t].assign(rows[t] * out, 0.0f);
    ASSERT_TRUE(engine->Linear(x[t].data(), in, rows[t], plan, 0.0f, serial[t].data(), out));
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 20; ++rep) {
        engine->Linear(x[t].data(), in, rows[t], plan, 0.0f, parallel[t].data(), out);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(parallel[t], serial[t]) << "caller " << t;
  EXPECT_EQ(engine->cached_primitives(), 2 * 3);  // matmul + convert for 16, 24, 40 rows
  EXPECT_FALSE(engine->impl().empty());
}

// LinearDequantized: quantized segments (and one dequantize-only type) in one matrix,
// rounded to bf16 by chunks, against sum_k bf16(x) * bf16(w) in double, over ragged chunk
// tails, padded x / y rows, beta 0 / 1, on a 2-thread pool and on the caller alone.
struct QuantSegment {
  const WeightFormat* format;
  StoredKind kind;
  int64_t rows;
};

TEST(OnednnGemmTest, DequantizedMatchesBf16Reference) {
  auto engine = Engine(2);
  SKIP_WITHOUT_ONEDNN(engine);
  std::mt19937 rng(5);
  const int64_t in = 512;
  // The first three have GEMMs (kquant_gemm.h); with the pool's chunks (two a thread, 128
  // rows here) each holds a whole one, and the last chunk mixes the other three.
  constexpr int kWithGemm = 3;
  const std::vector<QuantSegment> segments = {{&kQ4_KFormat, StoredKind::kQ4_K, 128},
                                              {&kQ6_KFormat, StoredKind::kQ6_K, 128},
                                              {&kQ4_0Format, StoredKind::kQ4_0, 128},
                                              {&kQ8_0Format, StoredKind::kQ8_0, 64},
                                              {&kQ4_0Format, StoredKind::kQ4_0, 29},
                                              {&kQ2_KFormat, StoredKind::kOther, 18}};
  std::vector<std::vector<uint8_t>> stores;
  TypedMatrix w(in);
  for (const QuantSegment& seg : segments) {
    const WeightFormat& f = *seg.format;
    stores.emplace_back(static_cast<size_t>(f.BytesFor(in) * seg.rows));
    FillRandomBlocks(f, seg.rows * in / f.block_values, 0.05f, rng(), stores.back().data());
    TypedRows r;
    r.data = stores.back().data();
    r.row_stride_bytes = f.BytesFor(in);
    r.rows = seg.rows;
    r.block_values = f.block_values;
    r.dequantize = f.dequantize;
    r.type_name = f.name;
    r.kind = seg.kind;
    w.Append(r);
  }
  const int64_t out = w.out(), ldx = in + 3, ldy = out + 5;
  std::vector<float> wq(static_cast<size_t>(out * in));  // bf16(dequantized w)
  for (int64_t o = 0; o < out; ++o) {
    w.RowToF32(o, wq.data() + o * in);
    for (int64_t k = 0; k < in; ++k) wq[o * in + k] = FromBf16(ToBf16(wq[o * in + k]));
  }
  ThreadPool pool(2);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (ThreadPool* p : {&pool, static_cast<ThreadPool*>(nullptr)}) {
    for (const Case c : {Case{16, 0.0f}, Case{33, 1.0f}, Case{128, 0.0f}}) {
      SCOPED_TRACE(testing::Message() << c.rows << " rows, pool " << (p != nullptr));
      std::vector<float> x(static_cast<size_t>(c.rows * ldx)), y0(static_cast<size_t>(c.rows * ldy));
      for (float& v : x) v = u(rng);
      for (float& v : y0) v = u(rng);
      std::vector<float> y = y0;
      ASSERT_TRUE(engine->LinearDequantized(x.data(), ldx, c.rows, w, c.beta, y.data(), ldy, p));
      // Chunks of q4_K, q6_K or q4_0 rows may run their GEMM on 8-bit activations
      // (kquant_gemm.h), which gives the portable dot bit for bit; every other output is
      // the bf16 product.
      std::vector<int8_t> k8(c.rows * in), q8(c.rows * in);
      std::vector<float> k8_d(c.rows * in / 256), q8_d(c.rows * in / 32);
      std::vector<int16_t> k8_bsums(c.rows * in / 16);
      for (int64_t r = 0; r < c.rows; ++r) {
        typed::QuantizeQ8_K(x.data() + r * ldx, in, k8.data() + r * in, k8_d.data() + r * in / 256,
                            k8_bsums.data() + r * in / 16);
        typed::QuantizeQ8_0(x.data() + r * ldx, in, q8.data() + r * in, q8_d.data() + r * in / 32);
      }
      typed::Activations acts;
      acts.in = in;
      acts.k8 = k8.data();
      acts.k8_d = k8_d.data();
      acts.k8_bsums = k8_bsums.data();
      acts.q8 = q8.data();
      acts.q8_d = q8_d.data();
      int64_t through_gemm[kWithGemm] = {};  // outputs equal to the portable dot, by segment
      for (int64_t r = 0; r < c.rows; ++r) {
        for (int64_t o = 0; o < out; ++o) {
          const int s = static_cast<int>(o / 128);  // the first segments are 128 rows each
          if (s < kWithGemm) {
            const int64_t row = o - 128 * s;
            float dot;
            typed::PortableQuantKernel(segments[s].kind)
                .dot[0](stores[s].data() + row * w.segments()[s].row_stride_bytes, acts, r, &dot);
            if (y[r * ldy + o] == (c.beta == 0.0f ? dot : dot + c.beta * y0[r * ldy + o])) {
              ++through_gemm[s];
              continue;
            }
          }
          double want = c.beta * static_cast<double>(y0[r * ldy + o]), mag = std::abs(want);
          for (int64_t k = 0; k < in; ++k) {
            const double t = static_cast<double>(FromBf16(ToBf16(x[r * ldx + k]))) * wq[o * in + k];
            want += t;
            mag += std::abs(t);
          }
          ASSERT_NEAR(y[r * ldy + o], want, 1e-5 * mag + 1e-7) << "row " << r << " feature " << o;
        }
        for (int64_t o = out; o < ldy; ++o) ASSERT_EQ(y[r * ldy + o], y0[r * ldy + o]);
      }
      // With the pool's chunks every row of the first three segments goes through its
      // GEMM; alone, the caller's two chunks cross segments.
      if (p != nullptr && typed::HasKQuantGemm(EnabledCpuFeatures()) &&
          std::getenv("FOLIO_KQUANT_GEMM") == nullptr) {
        for (int s = 0; s < kWithGemm; ++s) {
          EXPECT_EQ(through_gemm[s], c.rows * 128) << segments[s].format->name;
        }
      }
    }
  }
}

TEST(OnednnGemmTest, BadThreadCountIsRefused) {
  if (!OnednnAvailable()) {
    EXPECT_EQ(OnednnGemm::Create(2).status().code(), absl::StatusCode::kUnimplemented);
    return;
  }
  EXPECT_EQ(OnednnGemm::Create(0).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace folio::worker::kernels
