// The AVX-512 register tiles (typed_dot.h TileFn) of f16 / bf16 (F/BW/VL: one
// vcvtph2ps or shift per weight vector, reused by every token row), bf16 on avx512_bf16
// (vdpbf16ps) and q8_0 on avx512_vnni (vpdpbusd): kTileW weight rows x R <= 8 token rows
// of accumulators, so a weight vector is loaded and widened once per R token rows and an
// activation vector once per kTileW weight rows.
//
// Bit-equality with dot[] (typed_dot_avx512.cc): each dot[] output sums into two
// accumulators, acc0 taking the even steps of its main loop and then the tail, acc1 the
// odd steps, and returns reduce_add(acc0 + acc1). Keeping both for a whole tile would take
// 2 x kTileW x R = 32 registers, so a tile makes two passes over its rows: the first
// computes every output's acc0 (even steps, then the tail), which it parks on the stack,
// the second its acc1 (odd steps); each accumulator sees the same operations in the same
// order as in dot[]. The second pass re-reads the rows from L1/L2.
// Each function carries its target attribute; stateless, thread-safe.
#include "services/worker/kernels/typed_dot.h"

#if defined(__x86_64__)
#include <immintrin.h>

// GCC 12 warns inside its own AVX-512 headers (_mm512_undefined_* in the reductions).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#define FOLIO_T_AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl")))
#define FOLIO_T_AVX512VNNI \
  __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#define FOLIO_T_AVX512BF16 \
  __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512bf16")))
#define FOLIO_INLINE inline __attribute__((always_inline))

namespace folio::worker::kernels::typed {
namespace {

// Weight rows per tile: 2 x 8 token rows is 16 accumulators (of 32 zmm registers).
constexpr int kTileW = 2;

template <int W, int R, typename Acc>
FOLIO_INLINE void Zero(Acc (&acc)[W][R], Acc zero) {
#pragma GCC unroll 8
  for (int j = 0; j < W; ++j) {
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) acc[j][i] = zero;
  }
}

// ---- f16 / bf16 weights, f32 activations (DotHalf's order: steps of 16 values, main
// loop pairs of steps while 32 remain, then masked steps of 16 into acc0).

template <StoredKind kKind>
FOLIO_T_AVX512 FOLIO_INLINE __m512 Widen(__m256i h) {
  if constexpr (kKind == StoredKind::kF16) {
    return _mm512_cvtph_ps(h);
  } else {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

template <StoredKind kKind, int W, int R, bool kMasked>
FOLIO_T_AVX512 FOLIO_INLINE void HalfStep(const uint8_t* w, int64_t stride,
                                          const float* const* xr, int64_t k, __mmask16 m,
                                          __m512 (&acc)[W][R]) {
  __m512 wv[W];
#pragma GCC unroll 8
  for (int j = 0; j < W; ++j) {
    const uint8_t* p = w + j * stride + 2 * k;
    wv[j] = Widen<kKind>(kMasked ? _mm256_maskz_loadu_epi16(m, p)
                                 : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) {
    const __m512 xv = kMasked ? _mm512_maskz_loadu_ps(m, xr[i] + k) : _mm512_loadu_ps(xr[i] + k);
#pragma GCC unroll 8
    for (int j = 0; j < W; ++j) acc[j][i] = _mm512_fmadd_ps(wv[j], xv, acc[j][i]);
  }
}

template <StoredKind kKind, int R>
FOLIO_T_AVX512 void TileHalf(const uint8_t* w, int64_t stride, const Activations& x, int64_t r0,
                             float* out) {
  constexpr int W = kTileW;
  const int64_t n = x.in, main_end = n / 32 * 32;
  const float* xr[R];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) xr[i] = x.f32 + (r0 + i) * x.ldx;
  __m512 acc[W][R], acc0[W][R];
  Zero<W, R>(acc, _mm512_setzero_ps());
  for (int64_t k = 0; k < main_end; k += 32) {
    HalfStep<kKind, W, R, false>(w, stride, xr, k, 0xffff, acc);
  }
  for (int64_t k = main_end; k < n; k += 16) {
    const __mmask16 m = n - k >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - k)) - 1);
    HalfStep<kKind, W, R, true>(w, stride, xr, k, m, acc);
  }
#pragma GCC unroll 8
  for (int j = 0; j < W; ++j) {
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) acc0[j][i] = acc[j][i];
  }
  Zero<W, R>(acc, _mm512_setzero_ps());
  for (int64_t k = 16; k < main_end; k += 32) {
    HalfStep<kKind, W, R, false>(w, stride, xr, k, 0xffff, acc);
  }
#pragma GCC unroll 8
  for (int j = 0; j < W; ++j) {
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      out[j * kMaxTileRows + i] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[j][i], acc[j][i]));
    }
  }
}

// ---- bf16 weights, bf16 activations, vdpbf16ps (DotBf16Dp's order: steps of 32 values,
// main loop pairs while 64 remain, then masked steps of 32 into acc0).

template <int W, int R, bool kMasked>
FOLIO_T_AVX512BF16 FOLIO_INLINE void Bf16Step(const uint8_t* w, int64_t stride,
                                              const uint16_t* const* xr, int64_t k, __mmask32 m,
                                              __m512 (&acc)[W][R]) {
  __m512i wv[W];
#pragma GCC unroll 8
  for (int j = 0; j < W; ++j) {
    const uint8_t* p = w + j * stride + 2 * k;
    wv[j] = kMasked ? _mm512_maskz_loadu_epi16(m, p) : _mm512_loadu_si512(p);
  }
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) {
    const __m512i xv =
        kMasked ? _mm512_maskz_loadu_epi16(m, xr[i] + k) : _mm512_loadu_si512(xr[i] + k);
#pragma GCC unroll 8
    for (int j = 0; j < W; ++j) {
      acc[j][i] = _mm512_dpbf16_ps(acc[j][i], (__m512bh)xv, (__m512bh)wv[j]);
    }
  }
}

template <int R>
FOLIO_T_AVX512BF16 void TileBf16Dp(const uint8_t* w, int64_t stride, const Activations& x,
                                   int64_t r0, float* out) {
  constexpr int W = kTileW;
  const int64_t n = x.in, main_end = n / 64 * 64;
  const uint16_t* xr[R];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) xr[i] = x.bf16 + (r0 + i) * n;
  __m512 acc[W][R], acc0[W][R];
  Zero<W, R>(acc, _mm512_setzero_ps());
  for (int64_t k = 0; k < main_end; k += 64) {
    Bf16Step<W, R, false>(w, stride, xr, k, ~__mmask32{0}, acc);
  }
  for (int64_t k = main_end; k < n; k += 32) {
    const __mmask32 m =
        n - k >= 32 ? __mmask32(0xffffffffu) : __mmask32((uint32_t{1} << (n - k)) - 1);
    Bf16Step<W, R, true>(w, stride, xr, k, m, acc);
  }
#pragma GCC unroll 8
  for (int j = 0; j < W; ++j) {
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) acc0[j][i] = acc[j][i];
  }
  Zero<W, R>(acc, _mm512_setzero_ps());
  for (int64_t k = 32; k < main_end; k += 64) {
    Bf16Step<W, R, false>(w, stride, xr, k, ~__mmask32{0}, acc);
  }
#pragma GCC unroll 8
  for (int j = 0; j < W; ++j) {
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      out[j * kMaxTileRows + i] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[j][i], acc[j][i]));
    }
  }
}

// ---- q8_0 weights, q8_0 activations, vpdpbusd (DotQ8_0Vnni's order: steps of two
// blocks in one zmm, main loop pairs of steps while 4 blocks remain, then steps of two
// (or a last single) blocks into acc0). Each step is, per output, the int32 lane sums of
// |w| times x with w's sign, widened to f32 and added times (d_w * d_x) per block.

FOLIO_T_AVX512VNNI FOLIO_INLINE float HalfBits(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}
FOLIO_T_AVX512VNNI FOLIO_INLINE __m512 PairScale(float s0, float s1) {
  return _mm512_mask_blend_ps(__mmask16(0xff00), _mm512_set1_ps(s0), _mm512_set1_ps(s1));
}

// kSingle: the step holds one block (the second reads as zeros with scale 0).
template <int W, int R, bool kSingle>
FOLIO_T_AVX512VNNI FOLIO_INLINE void Q8Step(const uint8_t* w, int64_t stride,
                                            const int8_t* const* xq, const float* const* xd,
                                            int64_t b, __m512 (&acc)[W][R]) {
  __m512i aw[W];
  __mmask64 sign[W];
  __m512 dw[W];
#pragma GCC unroll 8
  for (int j = 0; j < W; ++j) {
    const uint8_t* b0 = w + j * stride + b * kQ8BlockBytes;
    const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b0 + 2));
    const __m512i wv =
        kSingle ? _mm512_zextsi256_si512(lo)
                : _mm512_inserti64x4(_mm512_castsi256_si512(lo),
                                     _mm256_loadu_si256(reinterpret_cast<const __m256i*>(
                                         b0 + kQ8BlockBytes + 2)),
                                     1);
    aw[j] = _mm512_abs_epi8(wv);
    sign[j] = _mm512_movepi8_mask(wv);
    dw[j] = PairScale(HalfBits(b0), kSingle ? 0.0f : HalfBits(b0 + kQ8BlockBytes));
  }
  const __m512i zero = _mm512_setzero_si512();
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) {
    const int8_t* xb = xq[i] + b * kQ8Block;
    const __m512i xv = kSingle ? _mm512_maskz_loadu_epi8(__mmask64{0xffffffffu}, xb)
                               : _mm512_loadu_si512(xb);
    const __m512 dx = PairScale(xd[i][b], kSingle ? 0.0f : xd[i][b + 1]);
#pragma GCC unroll 8
    for (int j = 0; j < W; ++j) {
      const __m512i signed_x = _mm512_mask_sub_epi8(xv, sign[j], zero, xv);
      const __m512i p = _mm512_dpbusd_epi32(zero, aw[j], signed_x);
      acc[j][i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(dw[j], dx), acc[j][i]);
    }
  }
}

template <int R>
FOLIO_T_AVX512VNNI void TileQ8_0Vnni(const uint8_t* w, int64_t stride, const Activations& x,
                                     int64_t r0, float* out) {
  constexpr int W = kTileW;
  const int64_t blocks = x.in / kQ8Block, main_end = blocks / 4 * 4;
  const int8_t* xq[R];
  const float* xd[R];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) {
    xq[i] = x.q8 + (r0 + i) * x.in;
    xd[i] = x.q8_d + (r0 + i) * blocks;
  }
  __m512 acc[W][R], acc0[W][R];
  Zero<W, R>(acc, _mm512_setzero_ps());
  for (int64_t b = 0; b < main_end; b += 4) Q8Step<W, R, false>(w, stride, xq, xd, b, acc);
  int64_t b = main_end;
  for (; b + 2 <= blocks; b += 2) Q8Step<W, R, false>(w, stride, xq, xd, b, acc);
  if (b < blocks) Q8Step<W, R, true>(w, stride, xq, xd, b, acc);
#pragma GCC unroll 8
  for (int j = 0; j < W; ++j) {
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) acc0[j][i] = acc[j][i];
  }
  Zero<W, R>(acc, _mm512_setzero_ps());
  for (int64_t b2 = 2; b2 < main_end; b2 += 4) Q8Step<W, R, false>(w, stride, xq, xd, b2, acc);
#pragma GCC unroll 8
  for (int j = 0; j < W; ++j) {
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      out[j * kMaxTileRows + i] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[j][i], acc[j][i]));
    }
  }
}

}  // namespace

void AddAvx512Tiles(StoredKind kind, SimdPath path, DotKernel* k) {
  if (!k->ok()) return;
  TileFn t[kMaxTileRows] = {};
  if (path == SimdPath::kAvx512 && kind == StoredKind::kF16) {
    TileFn f[] = {TileHalf<StoredKind::kF16, 1>, TileHalf<StoredKind::kF16, 2>,
                  TileHalf<StoredKind::kF16, 3>, TileHalf<StoredKind::kF16, 4>,
                  TileHalf<StoredKind::kF16, 5>, TileHalf<StoredKind::kF16, 6>,
                  TileHalf<StoredKind::kF16, 7>, TileHalf<StoredKind::kF16, 8>};
    std::memcpy(t, f, sizeof(t));
  } else if (path == SimdPath::kAvx512 && kind == StoredKind::kBF16) {
    TileFn f[] = {TileHalf<StoredKind::kBF16, 1>, TileHalf<StoredKind::kBF16, 2>,
                  TileHalf<StoredKind::kBF16, 3>, TileHalf<StoredKind::kBF16, 4>,
                  TileHalf<StoredKind::kBF16, 5>, TileHalf<StoredKind::kBF16, 6>,
                  TileHalf<StoredKind::kBF16, 7>, TileHalf<StoredKind::kBF16, 8>};
    std::memcpy(t, f, sizeof(t));
  } else if (path == SimdPath::kAvx512Bf16 && kind == StoredKind::kBF16) {
    TileFn f[] = {TileBf16Dp<1>, TileBf16Dp<2>, TileBf16Dp<3>, TileBf16Dp<4>,
                  TileBf16Dp<5>, TileBf16Dp<6>, TileBf16Dp<7>, TileBf16Dp<8>};
    std::memcpy(t, f, sizeof(t));
  } else if (path == SimdPath::kAvx512Vnni && kind == StoredKind::kQ8_0) {
    TileFn f[] = {TileQ8_0Vnni<1>, TileQ8_0Vnni<2>, TileQ8_0Vnni<3>, TileQ8_0Vnni<4>,
                  TileQ8_0Vnni<5>, TileQ8_0Vnni<6>, TileQ8_0Vnni<7>, TileQ8_0Vnni<8>};
    std::memcpy(t, f, sizeof(t));
  } else {
    return;
  }
  // One token row stays on dot[0] (a decode step: streams the weights once either way).
  for (int r = 2; r <= kMaxTileRows; ++r) k->tile[r - 1] = t[r - 1];
  k->tile_w = kTileW;
}

}  // namespace folio::worker::kernels::typed

#else  // not x86-64: no vector kernels

namespace folio::worker::kernels::typed {
void AddAvx512Tiles(StoredKind, SimdPath, DotKernel*) {}
}  // namespace folio::worker::kernels::typed

#endif
