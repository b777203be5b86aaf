// The packed-weight GEMM: a 6 x 16 register tile (AVX2/FMA, chosen at run time from
// CpuIsa; f16 and bf16 panels on AVX-512 F/BW/VL: zmm tiles over two panels, 6 x 32) or
// the same loops in plain C++ for the portable path.
//
// Blocking: rows are taken kRowBlock at a time (their x rows, at most 48 x in floats,
// stay in L2 while the panels stream past) and each panel is applied to every row tile
// of the block before the next panel (a panel, 16 x in floats, stays in L1/L2 for the
// block's tiles). Each weight is read from memory once per row block; with several row
// tiles, the tiles of one panel fetch the next panel's lines (Ahead), so that its first
// tile does not wait on memory (the SIMD tiles; the portable reference ignores it).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>

#include "glog/logging.h"
#include "services/worker/kernels/avx2_math.h"
#include "services/worker/kernels/cpu_target.h"
#include "services/worker/kernels/half.h"
#include "services/worker/kernels/packed_gemm.h"

namespace folio::worker::kernels {
namespace {

constexpr int kP = PackedMatrix::kPanel;

// The element type of bf16 panels (the tiles are templates on it: float, uint16_t for f16).
struct Bf16 {
  uint16_t bits;
};

constexpr int kMaxTileRows = 6;
constexpr int64_t kRowBlock = 48;

// Cache lines a tile fetches ahead for the tile that follows it in memory order: the row
// tiles of one panel (or pair) read the panel from memory in the first tile and from L1/L2
// in the others, so without this the first tile of every panel waits on memory while the
// core's FMAs idle. Each tile of a block fetches its share of the next panel's lines, so
// the next panel arrives while this one's later tiles compute. {nullptr, 0}: none.
struct Ahead {
  const char* p = nullptr;
  int64_t lines = 0;
};

// An Ahead spread evenly over a tile's `steps` loop steps: Step() fetches one step's share.
class AheadWalk {
 public:
  AheadWalk(Ahead a, int64_t steps)
      : p_(a.p), end_(a.p + a.lines * 64),
        per_step_((a.lines + std::max<int64_t>(steps, 1) - 1) / std::max<int64_t>(steps, 1)) {}

  FOLIO_INLINE void Step() {
    for (int64_t i = 0; i < per_step_ && p_ < end_; ++i, p_ += 64) __builtin_prefetch(p_);
  }

 private:
  const char* p_;
  const char* const end_;
  const int64_t per_step_;
};

// y[r, j] = tile[r][j] + beta * y[r, j], r < rows, j < cols (beta 0: y is not read).
inline void StoreTile(const float (*tile)[kP], int rows, int cols, float beta, float* y,
                      int64_t ldy) {
  for (int r = 0; r < rows; ++r) {
    float* yr = y + r * ldy;
    if (beta == 0.0f) {
      for (int j = 0; j < cols; ++j) yr[j] = tile[r][j];
    } else {
      for (int j = 0; j < cols; ++j) yr[j] = tile[r][j] + beta * yr[j];
    }
  }
}

inline const float* PanelRow(const float* panel, int64_t k, float*) { return panel + k * kP; }
inline const float* PanelRow(const uint16_t* panel, int64_t k, float* buf) {
  for (int j = 0; j < kP; ++j) buf[j] = HalfToFloat(panel[k * kP + j]);
  return buf;
}
inline const float* PanelRow(const Bf16* panel, int64_t k, float* buf) {
  for (int j = 0; j < kP; ++j) buf[j] = Bf16ToFloat(panel[k * kP + j].bits);
  return buf;
}

template <int R, typename WT>
void TilePortable(const float* x, int64_t ldx, const void* panel_v, int64_t in, float beta,
                  float* y, int64_t ldy, int cols, Ahead) {
  const WT* panel = static_cast<const WT*>(panel_v);
  float acc[R][kP] = {};
  float buf[kP];
  for (int64_t k = 0; k < in; ++k) {
    const float* b = PanelRow(panel, k, buf);
    for (int r = 0; r < R; ++r) {
      const float a = x[r * ldx + k];
      for (int j = 0; j < kP; ++j) acc[r][j] += a * b[j];
    }
  }
  StoreTile(acc, R, cols, beta, y, ldy);
}

#if FOLIO_HAVE_AVX2_PATH
template <typename WT>
FOLIO_T_AVX2 inline __m256 LoadPanel8(const WT* p) {
  if constexpr (std::is_same_v<WT, Bf16>) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
  } else if constexpr (sizeof(WT) == 2) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  } else {
    return _mm256_loadu_ps(p);
  }
}

template <int R, typename WT>
FOLIO_T_AVX2 void TileAvx2(const float* x, int64_t ldx, const void* panel_v, int64_t in,
                                float beta, float* y, int64_t ldy, int cols, Ahead ahead) {
  const WT* panel = static_cast<const WT*>(panel_v);
  AheadWalk fetch(ahead, in);
  __m256 c0[R], c1[R];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    c0[r] = _mm256_setzero_ps();
    c1[r] = _mm256_setzero_ps();
  }
  for (int64_t k = 0; k < in; ++k) {
    fetch.Step();
    const __m256 b0 = LoadPanel8(panel + k * kP);
    const __m256 b1 = LoadPanel8(panel + k * kP + 8);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const __m256 a = _mm256_broadcast_ss(x + r * ldx + k);
      c0[r] = _mm256_fmadd_ps(a, b0, c0[r]);
      c1[r] = _mm256_fmadd_ps(a, b1, c1[r]);
    }
  }
  if (cols == kP) {
    const __m256 vbeta = _mm256_set1_ps(beta);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      float* yr = y + r * ldy;
      if (beta != 0.0f) {
        c0[r] = _mm256_fmadd_ps(vbeta, _mm256_loadu_ps(yr), c0[r]);
        c1[r] = _mm256_fmadd_ps(vbeta, _mm256_loadu_ps(yr + 8), c1[r]);
      }
      _mm256_storeu_ps(yr, c0[r]);
      _mm256_storeu_ps(yr + 8, c1[r]);
    }
    return;
  }
  alignas(32) float tile[R][kP];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    _mm256_store_ps(tile[r], c0[r]);
    _mm256_store_ps(tile[r] + 8, c1[r]);
  }
  StoreTile(tile, R, cols, beta, y, ldy);
}

// f16 and bf16 panels on AVX-512: one 16-value row of the panel is one zmm after vcvtph2ps
// (f16) or a zero extension and a shift (bf16). Each
// output is two chains of fused multiply-adds, over even and over odd k, added at the
// end: one chain alone bounded a one-token row (decode) by the FMA latency, about half
// the memory's rate. Every tile height sums in that order, so a row's result still does
// not depend on its batch.
template <typename WT>
FOLIO_T_AVX512 __attribute__((always_inline)) inline __m512 PanelRow16(const WT* panel,
                                                                        int64_t k) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel + k * kP));
  if constexpr (std::is_same_v<WT, Bf16>) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  } else {
    return _mm512_cvtph_ps(h);
  }
}

// A tile over two panels reads two streams 64 KiB apart (at in = 2048), which the hardware
// prefetcher follows badly: it fetches each 3 KiB ahead (kAheadK values of k; one line
// every two k, as the loop reads it). Without it the one-token step of the 1.1B shape ran
// 28-40 GB/s, below a plain read-only pass; with it 30-56 GB/s, about 15% faster
// alternated in one sitting, and 8 token rows (the first tile of a block reads from
// memory) 20-30% faster, 32 about 15% (typed_matmul_bench BM_StepPanels/f16, 2026-12-02;
// 2 and 4 KiB ahead were a little slower than 3). One panel alone (a single stream) ran
// slower with it, so the odd panel and FOLIO_PACKED_PAIRS=0 fetch nothing.
constexpr int64_t kAheadK = 3072 / (kP * 2);

// NP = 2 runs two adjacent panels (32 outputs) at once: each broadcast activation then
// feeds four FMAs instead of two, and at R = 6 the 24 accumulators, four panel rows and two
// activations fill the 32 zmm registers. Every output keeps its own two chains, so a
// column's result is the same whichever NP and R computed it.
template <int R, int NP, typename WT>
FOLIO_T_AVX512 void TileAvx512Half(const float* x, int64_t ldx, const void* panel_v, int64_t in,
                                   float beta, float* y, int64_t ldy, int cols, Ahead ahead) {
  const WT* panel = static_cast<const WT*>(panel_v);
  const int64_t next = in * kP;  // panel q + 1 follows panel q
  __m512 c0[NP][R], c1[NP][R];
#pragma GCC unroll 2
  for (int q = 0; q < NP; ++q) {
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      c0[q][r] = _mm512_setzero_ps();
      c1[q][r] = _mm512_setzero_ps();
    }
  }
  AheadWalk fetch(ahead, in / 2);
  int64_t k = 0;
  for (; k + 2 <= in; k += 2) {
    fetch.Step();
    __m512 b0[NP], b1[NP];
#pragma GCC unroll 2
    for (int q = 0; q < NP; ++q) {
      if constexpr (NP == 2) {
        _mm_prefetch(reinterpret_cast<const char*>(panel + q * next + (k + kAheadK) * kP),
                     _MM_HINT_T0);
      }
      b0[q] = PanelRow16<WT>(panel + q * next, k);
      b1[q] = PanelRow16<WT>(panel + q * next, k + 1);
    }
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const __m512 a0 = _mm512_set1_ps(x[r * ldx + k]), a1 = _mm512_set1_ps(x[r * ldx + k + 1]);
#pragma GCC unroll 2
      for (int q = 0; q < NP; ++q) {
        c0[q][r] = _mm512_fmadd_ps(a0, b0[q], c0[q][r]);
        c1[q][r] = _mm512_fmadd_ps(a1, b1[q], c1[q][r]);
      }
    }
  }
  if (k < in) {
#pragma GCC unroll 2
    for (int q = 0; q < NP; ++q) {
      const __m512 b0 = PanelRow16<WT>(panel + q * next, k);
#pragma GCC unroll 6
      for (int r = 0; r < R; ++r) {
        c0[q][r] = _mm512_fmadd_ps(_mm512_set1_ps(x[r * ldx + k]), b0, c0[q][r]);
      }
    }
  }
  const __m512 vbeta = _mm512_set1_ps(beta);
#pragma GCC unroll 2
  for (int q = 0; q < NP; ++q) {
    // cols: the outputs of the last panel (the ones before it are whole).
    const __mmask16 lanes =
        q + 1 < NP ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << cols) - 1);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      float* yr = y + r * ldy + q * kP;
      __m512 v = _mm512_add_ps(c0[q][r], c1[q][r]);
      if (beta != 0.0f) v = _mm512_fmadd_ps(vbeta, _mm512_maskz_loadu_ps(lanes, yr), v);
      _mm512_mask_storeu_ps(yr, lanes, v);
    }
  }
}
#endif  // FOLIO_HAVE_AVX2_PATH

using TileFn = void (*)(const float*, int64_t, const void*, int64_t, float, float*, int64_t,
                        int, Ahead);

template <typename WT>
constexpr TileFn kPortableTiles[kMaxTileRows + 1] = {
    nullptr,
    &TilePortable<1, WT>,
    &TilePortable<2, WT>,
    &TilePortable<3, WT>,
    &TilePortable<4, WT>,
    &TilePortable<5, WT>,
    &TilePortable<6, WT>};
#if FOLIO_HAVE_AVX2_PATH
template <typename WT>
constexpr TileFn kAvx2Tiles[kMaxTileRows + 1] = {
    nullptr,          &TileAvx2<1, WT>, &TileAvx2<2, WT>, &TileAvx2<3, WT>,
    &TileAvx2<4, WT>, &TileAvx2<5, WT>, &TileAvx2<6, WT>};
template <int NP, typename WT>
constexpr TileFn kAvx512HalfTiles[kMaxTileRows + 1] = {
    nullptr,
    &TileAvx512Half<1, NP, WT>,
    &TileAvx512Half<2, NP, WT>,
    &TileAvx512Half<3, NP, WT>,
    &TileAvx512Half<4, NP, WT>,
    &TileAvx512Half<5, NP, WT>,
    &TileAvx512Half<6, NP, WT>};
#endif

// Rows [r0, r1) against panels [p0, p1): tiles of nearly equal height (32 rows: 6 6 5 5 5 5),
// so no tile is left with one or two rows to carry a whole panel's loads. With `pairs`
// (tiles over two adjacent panels) the panels go two at a time, an odd last one alone.
void RunBlock(const TileFn* tiles, const TileFn* pairs, const float* x, int64_t ldx,
              int64_t r0, int64_t r1, const PackedMatrix& w, int64_t p0, int64_t p1, float beta,
              float* y, int64_t ldy) {
  const int64_t rows = r1 - r0;
  const int64_t num_tiles = (rows + kMaxTileRows - 1) / kMaxTileRows;
  const int64_t elem = w.precision() != PackedMatrix::Precision::kF32 ? 2 : 4;
  for (int64_t p = p0; p < p1;) {
    const int np = pairs != nullptr && p + 1 < p1 ? 2 : 1;
    const TileFn* run = np == 2 ? pairs : tiles;
    const int64_t o0 = p * kP, last = (p + np - 1) * kP;
    const int cols = static_cast<int>(std::min<int64_t>(kP, w.out() - last));
    const void* panel = w.precision() != PackedMatrix::Precision::kF32
                            ? static_cast<const void*>(w.half_panel(p))
                            : static_cast<const void*>(w.panel(p));
    // The panels of the next step of this loop (contiguous after these), fetched by this
    // step's tiles when there are several (one tile reads its own stream ahead).
    const int64_t next_np = std::min<int64_t>(np, p1 - (p + np));
    const int64_t next_lines =
        num_tiles > 1 && next_np > 0 ? next_np * w.in() * kP * elem / 64 : 0;
    const char* next = static_cast<const char*>(panel) + np * w.in() * kP * elem;
    int64_t r = r0;
    for (int64_t t = 0; t < num_tiles; ++t) {
      const int64_t left = r1 - r;
      const int h = static_cast<int>((left + (num_tiles - t) - 1) / (num_tiles - t));
      const int64_t l0 = next_lines * t / num_tiles, l1 = next_lines * (t + 1) / num_tiles;
      run[h](x + r * ldx, ldx, panel, w.in(), beta, y + r * ldy + o0, ldy, cols,
             Ahead{next + l0 * 64, l1 - l0});
      r += h;
    }
    p += np;
  }
}

}  // namespace

PackedMatrix::PackedMatrix(const float* w, int64_t out, int64_t in, bool f16_when_exact)
    : out_(out), in_(in) {
  bool f16 = f16_when_exact;
  for (int64_t i = 0; f16 && i < out * in; ++i) {
    const float back = HalfToFloat(FloatToHalf(w[i]));
    f16 = back == w[i] && std::signbit(back) == std::signbit(w[i]);
  }
  const size_t size = static_cast<size_t>(num_panels() * in * kP);
  if (f16) {
    precision_ = Precision::kF16;
    half_.assign(size, 0);
  } else {
    data_.assign(size, 0.0f);
  }
  for (int64_t o = 0; o < out; ++o) {
    const int64_t first = (o / kP) * in * kP + o % kP;
    const float* src = w + o * in;
    if (f16) {
      for (int64_t k = 0; k < in; ++k) half_[first + k * kP] = FloatToHalf(src[k]);
    } else {
      for (int64_t k = 0; k < in; ++k) data_[first + k * kP] = src[k];
    }
  }
}

PackedMatrix::PackedMatrix(int64_t out, int64_t in, Precision precision,
                           const std::function<void(int64_t row, float* dst)>& row)
    : out_(out), in_(in), precision_(precision) {
  const size_t size = static_cast<size_t>(num_panels() * in * kP);
  if (precision != Precision::kF32) {
    half_.assign(size, 0);
  } else {
    data_.assign(size, 0.0f);
  }
  std::vector<float> src(static_cast<size_t>(in));
  for (int64_t o = 0; o < out; ++o) {
    row(o, src.data());
    const int64_t first = (o / kP) * in * kP + o % kP;
    if (precision == Precision::kF16) {
      for (int64_t k = 0; k < in; ++k) {
        const uint16_t h = FloatToHalf(src[k]);
        CHECK(HalfToFloat(h) == src[k] || std::isnan(src[k])) << "row " << o << " is not f16";
        half_[first + k * kP] = h;
      }
    } else if (precision == Precision::kBF16) {
      for (int64_t k = 0; k < in; ++k) {
        uint32_t bits;
        std::memcpy(&bits, &src[k], sizeof(bits));
        CHECK((bits & 0xFFFFu) == 0 || std::isnan(src[k])) << "row " << o << " is not bf16";
        half_[first + k * kP] = static_cast<uint16_t>(bits >> 16);
      }
    } else {
      for (int64_t k = 0; k < in; ++k) data_[first + k * kP] = src[k];
    }
  }
}

void PackedMatrix::RowToF32(int64_t o, float* dst) const {
  CHECK_GE(o, 0);
  CHECK_LT(o, out_);
  const int64_t first = (o / kP) * in_ * kP + o % kP;
  if (is_f16()) {
    for (int64_t k = 0; k < in_; ++k) dst[k] = HalfToFloat(half_[first + k * kP]);
  } else if (is_bf16()) {
    for (int64_t k = 0; k < in_; ++k) dst[k] = Bf16ToFloat(half_[first + k * kP]);
  } else {
    for (int64_t k = 0; k < in_; ++k) dst[k] = data_[first + k * kP];
  }
}

bool PackedAvx512(CpuIsa isa, const PackedMatrix& w) {
  // FOLIO_PACKED_AVX512=0 keeps the AVX2 tiles (read once; for measuring).
  static const bool enabled = [] {
    const char* v = std::getenv("FOLIO_PACKED_AVX512");
    return v == nullptr || std::string(v) != "0";
  }();
  return FOLIO_HAVE_AVX2_PATH && enabled && isa == CpuIsa::kAvx2 &&
         w.precision() != PackedMatrix::Precision::kF32 && EnabledCpuFeatures().avx512;
}

void PackedLinear(const float* x, int64_t ldx, int64_t rows, const PackedMatrix& w, float beta,
                  float* y, int64_t ldy, CpuIsa isa, ThreadPool* pool) {
  PackedLinearWith(x, ldx, rows, w, beta, y, ldy, isa, PackedAvx512(isa, w), pool);
}

namespace {

// The table of `tables` (f32, f16, bf16) for w's precision.
const TileFn* ForPrecision(const PackedMatrix& w, const TileFn* f32, const TileFn* f16,
                           const TileFn* bf16) {
  return w.is_f16() ? f16 : w.is_bf16() ? bf16 : f32;
}

}  // namespace

void PackedLinearWith(const float* x, int64_t ldx, int64_t rows, const PackedMatrix& w,
                      float beta, float* y, int64_t ldy, CpuIsa isa, bool avx512,
                      ThreadPool* pool) {
  if (rows <= 0 || w.out() <= 0) return;
  const TileFn* tiles = ForPrecision(w, kPortableTiles<float>, kPortableTiles<uint16_t>,
                                     kPortableTiles<Bf16>);
  const TileFn* pairs = nullptr;
#if FOLIO_HAVE_AVX2_PATH
  if (isa == CpuIsa::kAvx2) {
    tiles = ForPrecision(w, kAvx2Tiles<float>, kAvx2Tiles<uint16_t>, kAvx2Tiles<Bf16>);
  }
  if (avx512) {
    CHECK(isa == CpuIsa::kAvx2 && w.precision() != PackedMatrix::Precision::kF32 &&
          DetectedCpuFeatures().avx512)
        << "the AVX-512 tiles need f16 or bf16 panels, the AVX2 isa and a CPU with AVX-512";
    tiles = ForPrecision(w, nullptr, kAvx512HalfTiles<1, uint16_t>, kAvx512HalfTiles<1, Bf16>);
    // FOLIO_PACKED_PAIRS=0 runs one panel at a time (read once; for measuring).
    static const bool use_pairs = [] {
      const char* v = std::getenv("FOLIO_PACKED_PAIRS");
      return v == nullptr || std::string(v) != "0";
    }();
    if (use_pairs) {
      pairs = ForPrecision(w, nullptr, kAvx512HalfTiles<2, uint16_t>, kAvx512HalfTiles<2, Bf16>);
    }
  }
#else
  (void)isa;
  CHECK(!avx512) << "the AVX-512 tiles need x86-64";
#endif
  const int64_t num_panels = w.num_panels();
  const int64_t num_row_blocks = (rows + kRowBlock - 1) / kRowBlock;
  const int threads = pool == nullptr ? 1 : pool->num_threads();
  // A few panel ranges per thread, claimed dynamically, even out a core that is busy
  // with something else.
  const int64_t num_ranges = std::min<int64_t>(num_panels, threads == 1 ? 1 : threads * 4);
  int64_t range = (num_panels + num_ranges - 1) / num_ranges;
  if (pairs != nullptr) range += range % 2;  // whole pairs
  const int64_t ranges = (num_panels + range - 1) / range;
  ParallelFor(threads == 1 ? nullptr : pool, num_row_blocks * ranges, 1,
              [&](int64_t begin, int64_t end) {
                for (int64_t item = begin; item < end; ++item) {
                  const int64_t rb = item / ranges;
                  const int64_t p0 = (item % ranges) * range;
                  const int64_t r1 = std::min(rows, (rb + 1) * kRowBlock);
                  RunBlock(tiles, pairs, x, ldx, rb * kRowBlock, r1, w, p0,
                           std::min(num_panels, p0 + range), beta, y, ldy);
                }
              });
}

}  // namespace folio::worker::kernels
