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
#include "services/worker/kernels/cpu_target.h"

#if defined(__x86_64__)

#include <algorithm>

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

// The state of a k-blocked tile between blocks: acc0 then acc1, [W][kMaxTileRows] zmm
// each (typed_dot.h kTileStateFloats).
constexpr int kAccFloats = 16;
template <typename Acc, int W, int R>
FOLIO_T_AVX512 FOLIO_INLINE void LoadAcc(const float* state, int half, Acc (&acc)[W][R]) {
#pragma GCC unroll 8
  for (int j = 0; j < W; ++j) {
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      acc[j][i] = _mm512_loadu_ps(state + ((half * W + j) * kMaxTileRows + i) * kAccFloats);
    }
  }
}
template <typename Acc, int W, int R>
FOLIO_T_AVX512 FOLIO_INLINE void StoreAcc(float* state, int half, const Acc (&acc)[W][R]) {
#pragma GCC unroll 8
  for (int j = 0; j < W; ++j) {
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      _mm512_storeu_ps(state + ((half * W + j) * kMaxTileRows + i) * kAccFloats, acc[j][i]);
    }
  }
}
template <int W, int R>
FOLIO_T_AVX512 FOLIO_INLINE void Finish(const __m512 (&acc0)[W][R], const __m512 (&acc1)[W][R], float* out) {
#pragma GCC unroll 8
  for (int j = 0; j < W; ++j) {
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      out[j * kMaxTileRows + i] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[j][i], acc1[j][i]));
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
FOLIO_T_AVX512BF16 FOLIO_INLINE void Bf16Body(const uint8_t* w, int64_t stride,
                                              const Activations& x, int64_t r0, int64_t k0,
                                              int64_t k1, float* state, float* out) {
  constexpr int W = kTileW;
  const int64_t n = x.in, main_end = n / 64 * 64, m_end = std::min(k1, main_end);
  const bool last = k1 == n;
  const uint16_t* xr[R];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) xr[i] = x.bf16 + (r0 + i) * n;
  __m512 acc[W][R], acc0[W][R];
  if (k0 == 0) {
    Zero<W, R>(acc, _mm512_setzero_ps());
  } else {
    LoadAcc(state, 0, acc);
  }
  for (int64_t k = k0; k < m_end; k += 64) {
    Bf16Step<W, R, false>(w, stride, xr, k, ~__mmask32{0}, acc);
  }
  if (last) {
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
  } else {
    StoreAcc(state, 0, acc);
  }
  if (k0 == 0) {
    Zero<W, R>(acc, _mm512_setzero_ps());
  } else {
    LoadAcc(state, 1, acc);
  }
  for (int64_t k = k0 + 32; k < m_end; k += 64) {
    Bf16Step<W, R, false>(w, stride, xr, k, ~__mmask32{0}, acc);
  }
  if (last) {
    Finish(acc0, acc, out);
  } else {
    StoreAcc(state, 1, acc);
  }
}

template <int R>
FOLIO_T_AVX512BF16 void TileBf16Dp(const uint8_t* w, int64_t stride, const Activations& x,
                                   int64_t r0, float* out) {
  Bf16Body<R>(w, stride, x, r0, 0, x.in, nullptr, out);
}
template <int R>
FOLIO_T_AVX512BF16 void TileBf16DpK(const uint8_t* w, int64_t stride, const Activations& x,
                                    int64_t r0, int64_t k0, int64_t k1, float* state, float* out) {
  Bf16Body<R>(w, stride, x, r0, k0, k1, state, out);
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

// k0, k1 in values (k0 a multiple of 128: four blocks).
template <int R>
FOLIO_T_AVX512VNNI FOLIO_INLINE void Q8Body(const uint8_t* w, int64_t stride,
                                            const Activations& x, int64_t r0, int64_t k0,
                                            int64_t k1, float* state, float* out) {
  constexpr int W = kTileW;
  const int64_t blocks = x.in / kQ8Block, main_end = blocks / 4 * 4;
  const int64_t b0 = k0 / kQ8Block, m_end = std::min(k1 / kQ8Block, main_end);
  const bool last = k1 == x.in;
  const int8_t* xq[R];
  const float* xd[R];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) {
    xq[i] = x.q8 + (r0 + i) * x.in;
    xd[i] = x.q8_d + (r0 + i) * blocks;
  }
  __m512 acc[W][R], acc0[W][R];
  if (k0 == 0) {
    Zero<W, R>(acc, _mm512_setzero_ps());
  } else {
    LoadAcc(state, 0, acc);
  }
  for (int64_t b = b0; b < m_end; b += 4) Q8Step<W, R, false>(w, stride, xq, xd, b, acc);
  if (last) {
    int64_t b = main_end;
    for (; b + 2 <= blocks; b += 2) Q8Step<W, R, false>(w, stride, xq, xd, b, acc);
    if (b < blocks) Q8Step<W, R, true>(w, stride, xq, xd, b, acc);
#pragma GCC unroll 8
    for (int j = 0; j < W; ++j) {
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) acc0[j][i] = acc[j][i];
    }
  } else {
    StoreAcc(state, 0, acc);
  }
  if (k0 == 0) {
    Zero<W, R>(acc, _mm512_setzero_ps());
  } else {
    LoadAcc(state, 1, acc);
  }
  for (int64_t b = b0 + 2; b < m_end; b += 4) Q8Step<W, R, false>(w, stride, xq, xd, b, acc);
  if (last) {
    Finish(acc0, acc, out);
  } else {
    StoreAcc(state, 1, acc);
  }
}

template <int R>
FOLIO_T_AVX512VNNI void TileQ8_0Vnni(const uint8_t* w, int64_t stride, const Activations& x,
                                     int64_t r0, float* out) {
  Q8Body<R>(w, stride, x, r0, 0, x.in, nullptr, out);
}
template <int R>
FOLIO_T_AVX512VNNI void TileQ8_0VnniK(const uint8_t* w, int64_t stride, const Activations& x,
                                      int64_t r0, int64_t k0, int64_t k1, float* state,
                                      float* out) {
  Q8Body<R>(w, stride, x, r0, k0, k1, state, out);
}

}  // namespace

#define FOLIO_TILES8(F, ...)                                                                \
  {F<__VA_ARGS__ 1>, F<__VA_ARGS__ 2>, F<__VA_ARGS__ 3>, F<__VA_ARGS__ 4>,                 \
   F<__VA_ARGS__ 5>, F<__VA_ARGS__ 6>, F<__VA_ARGS__ 7>, F<__VA_ARGS__ 8>}

void AddAvx512Tiles(StoredKind kind, SimdPath path, DotKernel* k) {
  if (!k->ok()) return;
  const TileFn* t = nullptr;
  const TileKFn* tk = nullptr;
  int64_t k_step = 0, k_block = 0;
  // k_block: activation columns of 8 token rows in about 8 KiB (L1 with the state); 0 where
  // column blocking measured slower (q8_0: 5-10% more CPU time at M = 32 / 128; bf16
  // vdpbf16ps 0-10% less; docs/benchmarks.md).
  if (path == SimdPath::kAvx512Bf16 && kind == StoredKind::kBF16) {
    static constexpr TileFn f[] = FOLIO_TILES8(TileBf16Dp,);
    static constexpr TileKFn fk[] = FOLIO_TILES8(TileBf16DpK,);
    t = f, tk = fk, k_step = 64, k_block = 512;
  } else if (path == SimdPath::kAvx512Vnni && kind == StoredKind::kQ8_0) {
    static constexpr TileFn f[] = FOLIO_TILES8(TileQ8_0Vnni,);
    static constexpr TileKFn fk[] = FOLIO_TILES8(TileQ8_0VnniK,);
    t = f, tk = fk, k_step = 4 * kQ8Block, k_block = 0;
  } else {
    return;
  }
  // One token row stays on dot[0] (a decode step: streams the weights once either way).
  for (int r = 2; r <= kMaxTileRows; ++r) {
    k->tile[r - 1] = t[r - 1];
    k->ktile[r - 1] = tk[r - 1];
  }
  k->tile_w = kTileW;
  // At 8 token rows and fewer a chunk of weight rows meets one group of token rows and the
  // step streams the weights from memory once either way: there q8_0's tile measured
  // 15-20% more CPU time than dot[] (bf16 equal), so those calls keep dot[].
  k->tile_min_rows = kMaxTileRows;
  k->k_step = k_step;
  k->k_block = k_block;
}
#undef FOLIO_TILES8

}  // namespace folio::worker::kernels::typed

#else  // not x86-64: no vector kernels

namespace folio::worker::kernels::typed {
void AddAvx512Tiles(StoredKind, SimdPath, DotKernel*) {}
}  // namespace folio::worker::kernels::typed

#endif
