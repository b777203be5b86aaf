// Effective memory bandwidth of a decode step's matmuls on weights kept as stored (f16,
// bf16, q8_0, and the 4/5/6-bit types q4_0, q4_1, q5_0, q5_1, q4_K, q5_K, q6_K),
// against f32 packed panels (the runner's f32 path) and a memcpy of the same weight
// bytes in the same run.
//
// The matrices are two layers of the 1.1B Llama shape (dim 2048, 32/8 heads of 64,
// ffn 8192): fused QKV [2560, 2048], wo [2048, 2048], fused gate/up [16384, 2048], down
// [2048, 8192], random contents, each its own allocation, so one decode step (one token
// row) streams every weight byte from memory once: 478 MB in f32, 240 MB in f16/bf16,
// 128 MB in q8_0, 67-90 MB in the 4/5/6-bit types, well past any cache.
// BM_StepMatmuls runs them through TypedLinearOnPath on each SIMD path the CPU has
// (portable too) on a 2-thread pool (the /threads:1 variants: on the calling thread
// alone); BM_StepPanels runs the same shapes as f32, f16 and bf16
// PackedMatrix panels (PackedLinear: the runner's f32 and default F16 paths);
// BM_StepBlocked as bf16 in oneDNN's blocked layout (the runner's BF16 path where oneDNN
// runs: Folio's GEMV, or oneDNN's matmul); BM_Memcpy copies a type's bytes (the weights
// themselves, into a scratch buffer) on the same pool, split the same way.
// The time per step is the figure to compare across types (q4_K's step against f32's
// and q8_0's of the same run: the ratio is what a decode step gains); bytes_per_second
// is the weight bytes over the wall time, to compare with the type's memcpy line (a
// memcpy also writes what it reads, so its rate is a conservative ceiling for a
// read-only stream) and BM_Read, a plain read-only pass over the same bytes, and
// BM_ReadCeiling, the machine's read-only rate over 1 GiB on 2 (and 1) threads.
//
//   build/bin/typed_matmul_bench [--benchmark_min_time=0.5] [--benchmark_filter=q4_K]
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "benchmark/benchmark.h"
#include "services/worker/kernels/blocked_bf16.h"
#include "services/worker/kernels/cpu_isa.h"
#include "services/worker/kernels/dequant_bf16.h"
#include "services/worker/kernels/half.h"
#include "services/worker/kernels/onednn_gemm.h"
#include "services/worker/kernels/packed_gemm.h"
#include "services/worker/kernels/thread_pool.h"
#include "services/worker/kernels/typed_dot.h"
#include "services/worker/kernels/typed_gemm.h"
#include "services/worker/model/weight_format.h"

namespace folio::worker {
namespace {

namespace k = ::folio::worker::kernels;

constexpr int kThreads = 2;
constexpr int kLayers = 2;

struct Step {
  std::vector<std::unique_ptr<uint8_t[]>> storage;
  std::vector<k::TypedMatrix> matrices;
  int64_t bytes = 0;
  int64_t widest = 0;
};

const WeightFormat& FormatOfKind(k::StoredKind kind) {
  switch (kind) {
    case k::StoredKind::kF16:
      return kF16Format;
    case k::StoredKind::kBF16:
      return kBF16Format;
    case k::StoredKind::kQ4_0:
      return kQ4_0Format;
    case k::StoredKind::kQ4_1:
      return kQ4_1Format;
    case k::StoredKind::kQ5_0:
      return kQ5_0Format;
    case k::StoredKind::kQ5_1:
      return kQ5_1Format;
    case k::StoredKind::kQ4_K:
      return kQ4_KFormat;
    case k::StoredKind::kQ5_K:
      return kQ5_KFormat;
    case k::StoredKind::kQ6_K:
      return kQ6_KFormat;
    default:
      return kQ8_0Format;
  }
}

constexpr int64_t kShapes[4][2] = {{2560, 2048}, {2048, 2048}, {16384, 2048}, {2048, 8192}};

const Step& StepOf(k::StoredKind kind) {
  static auto* steps = new std::map<k::StoredKind, Step>();
  auto it = steps->find(kind);
  if (it != steps->end()) return it->second;
  Step& s = (*steps)[kind];
  const WeightFormat& f = FormatOfKind(kind);
  uint64_t seed = 1;
  for (int l = 0; l < kLayers; ++l) {
    for (const auto& shape : kShapes) {
      const int64_t out = shape[0], in = shape[1], row_bytes = f.BytesFor(in);
      s.storage.emplace_back(new uint8_t[out * row_bytes]);
      FillRandomBlocks(f, out * in / f.block_values, 0.02f, seed++, s.storage.back().get());
      k::TypedMatrix m(in);
      k::TypedRows r;
      r.data = s.storage.back().get();
      r.row_stride_bytes = row_bytes;
      r.rows = out;
      r.block_values = f.block_values;
      r.dequantize = f.dequantize;
      r.type_name = f.name;
      r.kind = kind;
      m.Append(r);
      s.matrices.push_back(std::move(m));
      s.bytes += out * row_bytes;
      s.widest = std::max({s.widest, out, in});
    }
  }
  return s;
}

k::ThreadPool& Pool() {
  static auto* pool = new k::ThreadPool(kThreads);
  return *pool;
}

void BM_StepMatmuls(benchmark::State& state) {
  const auto kind = static_cast<k::StoredKind>(state.range(0));
  const auto path = static_cast<k::SimdPath>(state.range(1));
  if (const char* missing = k::MissingFeature(path, k::DetectedCpuFeatures())) {
    state.SkipWithError((std::string("this CPU lacks ") + missing).c_str());
    return;
  }
  const int64_t rows = state.range(2);
  const bool tiles = state.range(3) != 0;
  const Step& s = StepOf(kind);
  std::vector<float> x(rows * s.widest, 0.5f), y(rows * s.widest);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.001f * static_cast<float>(i % 997) - 0.5f;
  int64_t weights = 0;
  for (const k::TypedMatrix& m : s.matrices) weights += m.in() * m.out();
  for (auto _ : state) {
    for (const k::TypedMatrix& m : s.matrices) {
      k::TypedLinearOnPath(x.data(), m.in(), rows, m, 0.0f, y.data(), m.out(),
                           state.range(4) == 1 ? nullptr : &Pool(), path, tiles);
    }
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * s.bytes);
  // Multiply-adds of the step as GFLOP/s (2 per weight per token row).
  state.counters["GFLOPs"] = benchmark::Counter(2.0 * static_cast<double>(weights * rows) / 1e9,
                                                benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(k::StoredKindName(kind)) + " " + k::SimdPathName(path) + ", " +
                 std::to_string(rows) + " token rows" + (tiles ? "" : " (dot[] only)") + ", " +
                 std::to_string(s.bytes >> 20) +
                 " MiB of weights");
}

// One token row against a matrix that stays in L2 ([rows, 2048], about 256 KiB of
// weights; the same random blocks as the step's), on the calling thread, by the
// kernel's dot[0] row after row: the kernel's
// own cost per byte with memory out of the way, which says how far below the memory's
// rate its per-block work leaves it (a memory-rate kernel must run well above the
// read-only pass's rate here). Thread CPU time; bytes_per_second on it.
void BM_CachedRow(benchmark::State& state) {
  const auto kind = static_cast<k::StoredKind>(state.range(0));
  const auto path = static_cast<k::SimdPath>(state.range(1));
  if (const char* missing = k::MissingFeature(path, k::DetectedCpuFeatures())) {
    state.SkipWithError((std::string("this CPU lacks ") + missing).c_str());
    return;
  }
  const WeightFormat& f = FormatOfKind(kind);
  constexpr int64_t kIn = 2048;
  const int64_t row_bytes = f.BytesFor(kIn), out = (256 << 10) / row_bytes;
  std::unique_ptr<uint8_t[]> data(new uint8_t[out * row_bytes]);
  FillRandomBlocks(f, out * kIn / f.block_values, 0.02f, 7, data.get());
  k::TypedMatrix m(kIn);
  k::TypedRows r;
  r.data = data.get();
  r.row_stride_bytes = row_bytes;
  r.rows = out;
  r.block_values = f.block_values;
  r.dequantize = f.dequantize;
  r.type_name = f.name;
  r.kind = kind;
  m.Append(r);
  std::vector<float> x(kIn), y(out);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.001f * static_cast<float>(i % 997) - 0.5f;
  // The activations quantized once (TypedLinear does that once per call, which at this
  // size would be a third of the time): only the kernel's dot[0] runs per row.
  namespace t = k::typed;
  const t::DotKernel kernel = t::KernelFor(kind, path);
  std::vector<int8_t> q(kIn);
  std::vector<float> d(kIn / t::kQ8Block), qs(kIn / t::kQ8Block), kd(kIn / t::kQ8KBlock);
  std::vector<int16_t> bsums(kIn / 16);
  std::vector<int32_t> corrections(kIn / 4), q4x_off(kIn / 8);
  std::vector<int8_t> q4x(kIn);
  std::vector<float> q4x_d(kIn / 8);
  std::vector<uint16_t> bf16(kIn);
  t::Activations a;
  a.in = kIn;
  a.f32 = x.data();
  a.ldx = kIn;
  if (kernel.needs_bf16) {
    t::RoundToBf16(x.data(), kIn, bf16.data());
    a.bf16 = bf16.data();
  }
  if (kernel.needs_q8) {
    t::QuantizeQ8_0(x.data(), kIn, q.data(), d.data(), qs.data());
    a.q8 = q.data();
    a.q8_d = d.data();
    a.q8_s = qs.data();
    if (kernel.needs_q8_c) {
      t::Q8Corrections(q.data(), kIn, corrections.data());
      a.q8_c = corrections.data();
    }
    if (kernel.needs_q4x) {
      t::Q4_0Activations(q.data(), d.data(), kIn, q4x.data(), q4x_d.data(), q4x_off.data());
      a.q4x = q4x.data();
      a.q4x_d = q4x_d.data();
      a.q4x_off = q4x_off.data();
    }
  }
  if (kernel.needs_q8k) {
    t::QuantizeQ8_K(x.data(), kIn, q.data(), kd.data(), bsums.data());
    a.k8 = q.data();
    a.k8_d = kd.data();
    a.k8_bsums = bsums.data();
  }
  for (auto _ : state) {
    for (int64_t j = 0; j < out; ++j) kernel.dot[0](data.get() + j * row_bytes, a, 0, &y[j]);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * out * row_bytes);
  state.SetLabel(std::string(k::StoredKindName(kind)) + " " + k::SimdPathName(path) +
                 ", 1 token row, " + std::to_string(out * row_bytes >> 10) + " KiB in L2");
}

// v as a value of `p`: f16 by rounding; bf16 as a multiple of 2^-11 below 2^-3 in
// magnitude (at most 8 significant bits, so exact in bf16; the weights are N(0, 0.02)).
float ValueOf(k::PackedMatrix::Precision p, float v) {
  if (p == k::PackedMatrix::Precision::kF16) return k::HalfToFloat(k::FloatToHalf(v));
  if (p == k::PackedMatrix::Precision::kBF16) {
    return std::clamp(std::round(v * 2048.0f), -255.0f, 255.0f) / 2048.0f;
  }
  return v;
}

// The step's matrices (kLayers layers of kShapes), N(0, 0.02) weights as values of
// `precision`, each made by make(out, in, row) from its rows.
template <typename M, typename Make>
std::vector<M> StepMatrices(k::PackedMatrix::Precision precision, const Make& make) {
  std::vector<M> matrices;
  uint64_t seed = 1;
  for (int l = 0; l < kLayers; ++l) {
    for (const auto& shape : kShapes) {
      std::mt19937 rng(static_cast<uint32_t>(seed++));
      std::normal_distribution<float> n(0.0f, 0.02f);
      const int64_t in = shape[1];
      const std::function<void(int64_t, float*)> row = [&](int64_t, float* dst) {
        for (int64_t i = 0; i < in; ++i) dst[i] = ValueOf(precision, n(rng));
      };
      matrices.push_back(make(shape[0], in, row));
    }
  }
  return matrices;
}

// The same step on packed panels, as the runner holds an f32 model (f32 panels) or an F16
// or BF16 file (f16 / bf16 panels, the default on AVX2 machines; the AVX-512 tiles where
// the CPU has them): PackedLinear at 1, 8 and 32 token rows.
void BM_StepPanels(benchmark::State& state) {
  if (!k::EnabledCpuFeatures().avx2) {
    state.SkipWithError("the packed kernels here are the AVX2 / AVX-512 ones");
    return;
  }
  using Precision = k::PackedMatrix::Precision;
  const auto precision = static_cast<Precision>(state.range(0));
  const int64_t rows = state.range(1);
  static auto* made = new std::map<Precision, std::vector<k::PackedMatrix>>();
  std::vector<k::PackedMatrix>& panels = (*made)[precision];
  int64_t bytes = 0, widest = 0;
  if (panels.empty()) {
    panels = StepMatrices<k::PackedMatrix>(precision, [&](int64_t out, int64_t in, auto row) {
      return k::PackedMatrix(out, in, precision, row);
    });
  }
  for (const k::PackedMatrix& m : panels) {
    bytes += m.size_bytes();
    widest = std::max({widest, m.out(), m.in()});
  }
  std::vector<float> x(rows * widest, 0.5f), y(rows * widest);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.001f * static_cast<float>(i % 997) - 0.5f;
  for (auto _ : state) {
    for (const k::PackedMatrix& m : panels) {
      k::PackedLinear(x.data(), m.in(), rows, m, 0.0f, y.data(), m.out(), k::CpuIsa::kAvx2,
                      &Pool());
    }
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * bytes);
  const bool avx512 = k::PackedAvx512(k::CpuIsa::kAvx2, panels.front());
  const char* name = precision == Precision::kF16    ? "f16"
                     : precision == Precision::kBF16 ? "bf16"
                                                     : "f32";
  state.SetLabel(std::string(name) + " panels " + (avx512 ? "avx512" : "avx2") +
                 ", " + std::to_string(rows) + " token rows, " + std::to_string(bytes >> 20) +
                 " MiB of weights");
}

// The same step on BF16 weights in oneDNN's blocked layout (the runner's BF16 path where
// oneDNN runs): Folio's GEMV (BlockedBf16Linear on `path`, range 0) or, with range 0 = -1,
// oneDNN's matmul on the same copy (LinearBlocked), at range 1 token rows.
void BM_StepBlocked(benchmark::State& state) {
  const int64_t rows = state.range(1);
  static auto* blocked = new std::vector<k::BlockedBf16Matrix>();
  if (blocked->empty()) {
    *blocked = StepMatrices<k::BlockedBf16Matrix>(
        k::PackedMatrix::Precision::kBF16,
        [](int64_t out, int64_t in, auto row) { return k::BlockedBf16Matrix(out, in, row); });
  }
  int64_t bytes = 0, widest = 0;
  for (const k::BlockedBf16Matrix& m : *blocked) {
    bytes += m.size_bytes();
    widest = std::max({widest, m.out(), m.in()});
  }
  std::unique_ptr<k::OnednnGemm> onednn;
  const bool use_onednn = state.range(0) < 0;
  const auto path = static_cast<k::BlockedBf16Path>(std::max<int64_t>(0, state.range(0)));
  if (use_onednn) {
    absl::StatusOr<std::unique_ptr<k::OnednnGemm>> e = k::OnednnGemm::Create(kThreads);
    if (!e.ok()) {
      state.SkipWithError(std::string(e.status().message()).c_str());
      return;
    }
    onednn = *std::move(e);
    for (const k::BlockedBf16Matrix& m : *blocked) {
      if (!onednn->BlockedLayoutMatches(m.in(), m.out())) {
        state.SkipWithError("oneDNN keeps another bf16 weights layout on this CPU");
        return;
      }
    }
  } else if (!k::BlockedBf16PathRuns(path)) {
    state.SkipWithError("this CPU lacks the path's features");
    return;
  }
  std::vector<float> x(rows * widest), y(rows * widest);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.001f * static_cast<float>(i % 997) - 0.5f;
  auto step = [&] {
    for (const k::BlockedBf16Matrix& m : *blocked) {
      if (!use_onednn) {
        k::BlockedBf16Linear(x.data(), m.in(), rows, m, 0.0f, y.data(), m.out(), path, &Pool());
      } else if (!onednn->LinearBlocked(x.data(), m.in(), rows, m, 0.0f, y.data(), m.out())) {
        return false;
      }
    }
    return true;
  };
  // Once untimed: oneDNN makes its primitives on the first call of each shape.
  if (!step()) {
    state.SkipWithError("oneDNN refused the matmul");
    return;
  }
  for (auto _ : state) {
    step();
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * bytes);
  state.SetLabel(std::string("bf16 blocked, ") +
                 (use_onednn ? "oneDNN " + onednn->impl() : k::BlockedBf16PathName(path)) +
                 ", " + std::to_string(rows) + " token rows, " + std::to_string(bytes >> 20) +
                 " MiB of weights");
}

void BM_Memcpy(benchmark::State& state) {
  const auto kind = static_cast<k::StoredKind>(state.range(0));
  const Step& s = StepOf(kind);
  int64_t largest = 0;
  const WeightFormat& f = FormatOfKind(kind);
  for (const k::TypedMatrix& m : s.matrices) largest = std::max(largest, f.BytesFor(m.in()) * m.out());
  static auto* scratch = new std::vector<uint8_t>();
  if (static_cast<int64_t>(scratch->size()) < s.bytes) scratch->resize(s.bytes);
  for (auto _ : state) {
    int64_t offset = 0;
    for (size_t i = 0; i < s.matrices.size(); ++i) {
      const int64_t n = f.BytesFor(s.matrices[i].in()) * s.matrices[i].out();
      const uint8_t* src = s.storage[i].get();
      uint8_t* dst = scratch->data() + offset;
      k::ParallelFor(&Pool(), kThreads, 1, [&](int64_t b, int64_t e) {
        for (int64_t p = b; p < e; ++p) {
          const int64_t lo = n * p / kThreads, hi = n * (p + 1) / kThreads;
          std::memcpy(dst + lo, src + lo, hi - lo);
        }
      });
      offset += n;
    }
    benchmark::DoNotOptimize(scratch->data());
  }
  state.SetBytesProcessed(state.iterations() * s.bytes);
  state.SetLabel(std::string("memcpy of the ") + k::StoredKindName(kind) + " step's " +
                 std::to_string(s.bytes >> 20) + " MiB");
}

// A read-only pass over the same bytes (8 independent 64-bit sums per thread): the
// ceiling of a stream that only reads, as a matmul does.
void BM_Read(benchmark::State& state) {
  const auto kind = static_cast<k::StoredKind>(state.range(0));
  const Step& s = StepOf(kind);
  const WeightFormat& f = FormatOfKind(kind);
  uint64_t sink = 0;
  for (auto _ : state) {
    for (size_t i = 0; i < s.matrices.size(); ++i) {
      const int64_t words = f.BytesFor(s.matrices[i].in()) * s.matrices[i].out() / 8;
      const uint8_t* src = s.storage[i].get();
      uint64_t part[kThreads] = {};
      k::ParallelFor(&Pool(), kThreads, 1, [&](int64_t b, int64_t e) {
        for (int64_t p = b; p < e; ++p) {
          uint64_t acc[8] = {};
          for (int64_t w = words * p / kThreads; w + 8 <= words * (p + 1) / kThreads; w += 8) {
            uint64_t v[8];
            std::memcpy(v, src + 8 * w, sizeof(v));
            for (int j = 0; j < 8; ++j) acc[j] += v[j];
          }
          for (int j = 0; j < 8; ++j) part[p] += acc[j];
        }
      });
      for (uint64_t v : part) sink += v;
    }
  }
  benchmark::DoNotOptimize(sink);
  state.SetBytesProcessed(state.iterations() * s.bytes);
  state.SetLabel(std::string("read-only pass over the ") + k::StoredKindName(kind) + " step's " +
                 std::to_string(s.bytes >> 20) + " MiB");
}

// The machine's read-only ceiling: one pass over a 1 GiB buffer (far past any cache),
// split in two (or one) contiguous halves on the pool, 32-byte AVX2 loads into four
// independent sums per thread, one dispatch per pass. The figure a decode step's
// bytes_per_second is to be held against (threads:2 is the decode setting); the per-type
// BM_Read lines walk the step's own matrices, one dispatch each.
constexpr int64_t kCeilingBytes = int64_t{1} << 30;

#if defined(__x86_64__)
__attribute__((target("avx2"))) uint64_t SumAvx2(const uint8_t* p, int64_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 128 <= n; i += 128) {
    a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  const __m256i s = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), s);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}
#else
uint64_t SumAvx2(const uint8_t* p, int64_t n) {
  uint64_t acc = 0;
  for (int64_t i = 0; i < n; ++i) acc += p[i];
  return acc;
}
#endif

void BM_ReadCeiling(benchmark::State& state) {
  if (!k::EnabledCpuFeatures().avx2) {
    state.SkipWithError("the ceiling pass uses AVX2 loads");
    return;
  }
  const int64_t threads = state.range(0);
  static uint8_t* buf = [] {
    auto* b = static_cast<uint8_t*>(std::aligned_alloc(4096, kCeilingBytes));
    for (int64_t i = 0; i < kCeilingBytes; ++i) b[i] = static_cast<uint8_t>(i * 131 + 7);
    return b;
  }();
  uint64_t sink = 0;
  for (auto _ : state) {
    uint64_t part[kThreads] = {};
    k::ParallelFor(threads == 1 ? nullptr : &Pool(), threads, 1, [&](int64_t b, int64_t e) {
      for (int64_t p = b; p < e; ++p) {
        const int64_t lo = kCeilingBytes * p / threads, hi = kCeilingBytes * (p + 1) / threads;
        part[p] = SumAvx2(buf + lo, hi - lo);
      }
    });
    for (uint64_t v : part) sink += v;
  }
  benchmark::DoNotOptimize(sink);
  state.SetBytesProcessed(state.iterations() * kCeilingBytes);
  state.SetLabel("read-only ceiling, 1 GiB, " + std::to_string(threads) + " thread" +
                 (threads == 1 ? "" : "s"));
}

// RowsToBf16 (the oneDNN path's dequantization, dequant_bf16.h) over the step's matrices a
// kDequantChunkBytes chunk of bf16 rows at a time into one buffer per thread, as
// OnednnGemm::LinearDequantized does: /stream walks every weight once (from memory, on
// `threads` threads); /cached redoes each thread's first chunk (its source in cache), the
// kernel's own cost. values_per_second is what a matmul of M rows must beat by M x 2
// flops per value for the dequantization to hide.
void BM_DequantBf16(benchmark::State& state) {
  const auto kind = static_cast<k::StoredKind>(state.range(0));
  const bool cached = state.range(1) != 0;
  const int64_t threads = state.range(2);
  const Step& s = StepOf(kind);
  const k::CpuFeatures& features = k::EnabledCpuFeatures();
  struct Chunk { const k::TypedMatrix* m; int64_t row, n; };
  std::vector<Chunk> chunks;
  int64_t values = 0;
  for (const k::TypedMatrix& m : s.matrices) {
    const int64_t rows =
        std::max<int64_t>(16, k::kDequantChunkBytes / (2 * m.in()) / 16 * 16);
    for (int64_t r = 0; r < m.out(); r += rows) {
      chunks.push_back({&m, r, std::min(rows, m.out() - r)});
      values += chunks.back().n * m.in();
    }
  }
  const int64_t num_chunks = static_cast<int64_t>(chunks.size());
  std::vector<std::vector<uint16_t>> out(threads,
                                         std::vector<uint16_t>(k::kDequantChunkBytes / 2));
  std::vector<std::vector<float>> scratch(threads);
  for (auto _ : state) {
    k::ParallelFor(threads == 1 ? nullptr : &Pool(), threads, 1, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        for (int64_t c = t * num_chunks / threads; c < (t + 1) * num_chunks / threads; ++c) {
          const Chunk& ch = cached ? chunks[t * num_chunks / threads] : chunks[c];
          k::RowsToBf16(*ch.m, ch.row, ch.n, out[t].data(), features, scratch[t]);
        }
        benchmark::DoNotOptimize(out[t].data());
      }
    });
  }
  state.SetBytesProcessed(state.iterations() * s.bytes);
  state.counters["values_per_second"] = benchmark::Counter(
      static_cast<double>(values), benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(k::StoredKindName(kind)) +
                 (k::HasBf16RowKernel(kind, features) ? " row kernel" : " generic") + ", " +
                 (cached ? "source in cache" : "every weight from memory") + ", " +
                 std::to_string(threads) + " thread" + (threads == 1 ? "" : "s"));
}

// The step's matmuls as the CPU runner runs a batch of quantized weights:
// OnednnGemm::LinearDequantized, whose chunks of q4_K and q6_K rows go to GemmQ4K / GemmQ6K
// (kquant_gemm.h), the others through bf16 rows into oneDNN's matmul. FOLIO_KQUANT_GEMM=0
// sends every chunk
// the bf16 way: run the binary with and without it for a same-sitting ratio.
void BM_StepDequantized(benchmark::State& state) {
  const auto kind = static_cast<k::StoredKind>(state.range(0));
  const int64_t rows = state.range(1);
  static auto* engine = [] {
    absl::StatusOr<std::unique_ptr<k::OnednnGemm>> e = k::OnednnGemm::Create(kThreads);
    return e.ok() ? e->release() : nullptr;
  }();
  if (engine == nullptr) {
    state.SkipWithError("built without oneDNN");
    return;
  }
  const Step& s = StepOf(kind);
  std::vector<float> x(rows * s.widest), y(rows * s.widest);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.001f * static_cast<float>(i % 997) - 0.5f;
  int64_t weights = 0;
  for (const k::TypedMatrix& m : s.matrices) weights += m.in() * m.out();
  for (auto _ : state) {
    for (const k::TypedMatrix& m : s.matrices) {
      engine->LinearDequantized(x.data(), m.in(), rows, m, 0.0f, y.data(), m.out(), &Pool());
    }
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOPs"] = benchmark::Counter(2.0 * static_cast<double>(weights * rows) / 1e9,
                                                benchmark::Counter::kIsIterationInvariantRate);
  const char* kq = std::getenv("FOLIO_KQUANT_GEMM");
  state.SetLabel(std::string(k::StoredKindName(kind)) + ", " + std::to_string(rows) +
                 " token rows" +
                 (kq != nullptr && std::string(kq) == "0" ? ", FOLIO_KQUANT_GEMM=0" : ""));
}

// The pool's cost per loop, as a decode step meets it: a loop of two pieces of ~work_us
// each (one per thread), after gap_us of work on the caller alone (the norms, RoPE and
// quantization between two matmuls), on a 2-thread pool with the given spin (0: block at
// once). Ideal time per iteration: gap + work (vs_ideal: the time over it); the excess is the wake-up and the
// finish wait. A loaded machine (fewer free cores than threads) shows the late worker
// as up to a whole extra piece: note the load.
void BusyFor(double us) {
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() <
         us) {
  }
}

void BM_PoolLoop(benchmark::State& state) {
  const int spin = static_cast<int>(state.range(0));
  const double work = static_cast<double>(state.range(1)), gap = static_cast<double>(state.range(2));
  k::ThreadPool pool(kThreads, spin);
  for (auto _ : state) {
    BusyFor(gap);
    pool.ParallelFor(kThreads, 1, [&](int64_t, int64_t) { BusyFor(work); });
  }
  state.counters["vs_ideal"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * (work + gap) * 1e-6,
      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.SetLabel("spin " + std::to_string(spin) + " us, pieces of " + std::to_string(state.range(1)) +
                 " us after " + std::to_string(state.range(2)) + " us alone, ideal " +
                 std::to_string(state.range(1) + state.range(2)) + " us");
}

void Register() {
  for (int64_t spin : {0, 100}) {
    for (const auto& [work, gap] : std::vector<std::pair<int64_t, int64_t>>{{100, 5}, {500, 20}}) {
      benchmark::RegisterBenchmark(("BM_PoolLoop/spin:" + std::to_string(spin) + "/work:" +
                                    std::to_string(work) + "/gap:" + std::to_string(gap))
                                       .c_str(),
                                   BM_PoolLoop)
          ->Args({spin, work, gap})
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond);
    }
  }

  for (k::StoredKind kind : {k::StoredKind::kQ8_0, k::StoredKind::kQ4_0, k::StoredKind::kQ4_K,
                             k::StoredKind::kQ6_K}) {
    for (int64_t cached : {0, 1}) {
      for (int64_t threads : {2, 1}) {
        benchmark::RegisterBenchmark(
            ("BM_DequantBf16/" + std::string(k::StoredKindName(kind)) +
             (cached ? "/cached" : "/stream") + "/threads:" + std::to_string(threads))
                .c_str(),
            BM_DequantBf16)
            ->Args({static_cast<int64_t>(kind), cached, threads})
            ->MeasureProcessCPUTime()
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond);
      }
    }
  }

  for (k::StoredKind kind : {k::StoredKind::kQ4_K, k::StoredKind::kQ6_K}) {
    for (int64_t rows : {8, 32, 128, 512}) {
      benchmark::RegisterBenchmark(("BM_StepDequantized/" + std::string(k::StoredKindName(kind)) +
                                    "/rows:" + std::to_string(rows))
                                       .c_str(),
                                   BM_StepDequantized)
          ->Args({static_cast<int64_t>(kind), rows})
          ->MeasureProcessCPUTime()
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
    }
  }

  for (int64_t threads : {2, 1}) {
    benchmark::RegisterBenchmark(("BM_ReadCeiling/threads:" + std::to_string(threads)).c_str(),
                                 BM_ReadCeiling)
        ->Args({threads})
        ->MeasureProcessCPUTime()
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }

  for (int64_t precision : {0, 1, 2}) {  // PackedMatrix::Precision: f32, f16, bf16
    const char* name = precision == 1 ? "f16" : precision == 2 ? "bf16" : "f32";
    for (int64_t rows : {1, 8, 32}) {
      benchmark::RegisterBenchmark(
          (std::string("BM_StepPanels/") + name + "/rows:" + std::to_string(rows)).c_str(),
          BM_StepPanels)
          ->Args({precision, rows})
          ->MeasureProcessCPUTime()
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
  // BM_StepBlocked/<path or onednn>/rows:N.
  for (int64_t path : {2, 1, -1}) {  // BlockedBf16Path: avx512_bf16, avx512; -1: oneDNN
    const std::string name =
        path < 0 ? "onednn" : k::BlockedBf16PathName(static_cast<k::BlockedBf16Path>(path));
    for (int64_t rows : {1, 2, 4, 8, 32}) {
      benchmark::RegisterBenchmark(
          ("BM_StepBlocked/" + name + "/rows:" + std::to_string(rows)).c_str(), BM_StepBlocked)
          ->Args({path, rows})
          ->MeasureProcessCPUTime()
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
  for (k::StoredKind kind :
       {k::StoredKind::kF16, k::StoredKind::kBF16, k::StoredKind::kQ8_0, k::StoredKind::kQ4_0,
        k::StoredKind::kQ4_1, k::StoredKind::kQ5_0, k::StoredKind::kQ5_1, k::StoredKind::kQ4_K,
        k::StoredKind::kQ5_K, k::StoredKind::kQ6_K}) {
    const std::string name = k::StoredKindName(kind);
    for (k::SimdPath path : k::TypedPathsOf(kind)) {
      // rows:1 is a decode step of one sequence; 8 / 32 a batch of sequences; 128 a
      // prefill chunk.
      // The paths with register tiles (bf16 avx512_bf16, q8_0 avx512_vnni, the 4/5/6-bit
      // types on avx512 and avx512_vnni): their "/dot" twins run dot[] alone (the kernels
      // before the tiles), for a same-run ratio. threads:1 (no pool): the kernels alone,
      // whose process CPU time a loaded machine disturbs least.
      const bool low_bit = kind != k::StoredKind::kF16 && kind != k::StoredKind::kBF16 &&
                           kind != k::StoredKind::kQ8_0;
      const bool tiled =
          (kind == k::StoredKind::kBF16 && path == k::SimdPath::kAvx512Bf16) ||
          (kind == k::StoredKind::kQ8_0 && path == k::SimdPath::kAvx512Vnni) ||
          (low_bit && (path == k::SimdPath::kAvx512 || path == k::SimdPath::kAvx512Vnni));
      for (const auto& [rows, threads] : std::vector<std::pair<int64_t, int64_t>>{
               {1, 2}, {8, 2}, {32, 2}, {128, 2}, {1, 1}, {8, 1}, {32, 1}}) {
        for (int64_t tiles : {1, 0}) {
          if (tiles == 0 && !tiled) continue;
          benchmark::RegisterBenchmark(("BM_StepMatmuls/" + name + "/" + k::SimdPathName(path) +
                                        "/rows:" + std::to_string(rows) +
                                        (threads == 1 ? "/threads:1" : "") + (tiles ? "" : "/dot"))
                                           .c_str(),
                                       BM_StepMatmuls)
              ->Args({static_cast<int64_t>(kind), static_cast<int64_t>(path), rows, tiles,
                      threads})
              // CPU: the process's (both pool threads; the pool blocks, never spins), the
              // figure that a loaded machine disturbs least.
              ->MeasureProcessCPUTime()
              ->UseRealTime()
              ->Unit(benchmark::kMillisecond);
        }
      }
    }
    for (k::SimdPath path : k::TypedPathsOf(kind)) {
      if (path == k::SimdPath::kPortable) continue;
      benchmark::RegisterBenchmark(
          ("BM_CachedRow/" + name + "/" + k::SimdPathName(path)).c_str(), BM_CachedRow)
          ->Args({static_cast<int64_t>(kind), static_cast<int64_t>(path)})
          ->Unit(benchmark::kMicrosecond);
    }
    benchmark::RegisterBenchmark(("BM_Memcpy/" + name).c_str(), BM_Memcpy)
        ->Args({static_cast<int64_t>(kind)})
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("BM_Read/" + name).c_str(), BM_Read)
        ->Args({static_cast<int64_t>(kind)})
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
}

}  // namespace
}  // namespace folio::worker

int main(int argc, char** argv) {
  folio::worker::Register();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
