// The AVX-512 kernels of typed_dot.h: F/BW/VL for f16 and bf16 (16 lanes, masked tails),
// VNNI for q8_0 (two blocks per vpdpbusd), BF16 for bf16 (vdpbf16ps, 32 products per
// instruction). Each function carries its target attribute; the library itself stays
// baseline x86-64.
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

namespace folio::worker::kernels::typed {
namespace {

// 16 stored f16 / bf16 values at p (only the first `mask` lanes read), widened to f32.
template <StoredKind kKind>
FOLIO_T_AVX512 inline __m512 Widen(__m256i h) {
  if constexpr (kKind == StoredKind::kF16) {
    return _mm512_cvtph_ps(h);
  } else {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}
template <StoredKind kKind>
FOLIO_T_AVX512 inline __m512 Load16(const uint8_t* p) {
  return Widen<kKind>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
template <StoredKind kKind>
FOLIO_T_AVX512 inline __m512 Load16Masked(const uint8_t* p, __mmask16 m) {
  return Widen<kKind>(_mm256_maskz_loadu_epi16(m, p));
}

template <StoredKind kKind, int R>
FOLIO_T_AVX512 void DotHalf(const uint8_t* w, const Activations& x, int64_t r0, float* out) {
  const int64_t n = x.in;
  const float* xr[R];
  __m512 acc0[R], acc1[R];
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
    xr[i] = x.f32 + (r0 + i) * x.ldx;
    acc0[i] = _mm512_setzero_ps();
    acc1[i] = _mm512_setzero_ps();
  }
  int64_t k = 0;
  for (; k + 32 <= n; k += 32) {
    const __m512 w0 = Load16<kKind>(w + 2 * k), w1 = Load16<kKind>(w + 2 * k + 32);
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      acc0[i] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(xr[i] + k), acc0[i]);
      acc1[i] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(xr[i] + k + 16), acc1[i]);
    }
  }
  for (; k < n; k += 16) {
    const __mmask16 m = n - k >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - k)) - 1);
    const __m512 w0 = Load16Masked<kKind>(w + 2 * k, m);
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      acc0[i] = _mm512_fmadd_ps(w0, _mm512_maskz_loadu_ps(m, xr[i] + k), acc0[i]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) out[i] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[i], acc1[i]));
}

// bf16 weights against bf16-rounded activations: vdpbf16ps, 32 products per instruction
// (pairs summed into 16 f32 lanes).
template <int R>
FOLIO_T_AVX512BF16 void DotBf16Dp(const uint8_t* w, const Activations& x, int64_t r0,
                                  float* out) {
  const int64_t n = x.in;
  const uint16_t* xr[R];
  __m512 acc0[R], acc1[R];
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
    xr[i] = x.bf16 + (r0 + i) * n;
    acc0[i] = _mm512_setzero_ps();
    acc1[i] = _mm512_setzero_ps();
  }
  int64_t k = 0;
  for (; k + 64 <= n; k += 64) {
    const __m512i w0 = _mm512_loadu_si512(w + 2 * k), w1 = _mm512_loadu_si512(w + 2 * k + 64);
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      acc0[i] = _mm512_dpbf16_ps(acc0[i], (__m512bh)_mm512_loadu_si512(xr[i] + k), (__m512bh)w0);
      acc1[i] =
          _mm512_dpbf16_ps(acc1[i], (__m512bh)_mm512_loadu_si512(xr[i] + k + 32), (__m512bh)w1);
    }
  }
  for (; k < n; k += 32) {
    const __mmask32 m =
        n - k >= 32 ? __mmask32(0xffffffffu) : __mmask32((uint32_t{1} << (n - k)) - 1);
    const __m512i w0 = _mm512_maskz_loadu_epi16(m, w + 2 * k);
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      acc0[i] = _mm512_dpbf16_ps(acc0[i], (__m512bh)_mm512_maskz_loadu_epi16(m, xr[i] + k),
                                 (__m512bh)w0);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) out[i] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[i], acc1[i]));
}

FOLIO_T_AVX512VNNI inline float HalfBits(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// Two q8_0 blocks' int32 partial sums (8 lanes each): |w| times x with w's sign.
FOLIO_T_AVX512VNNI inline __m512i PairDot(__m512i w, __m512i x) {
  const __m512i neg = _mm512_mask_sub_epi8(x, _mm512_movepi8_mask(w), _mm512_setzero_si512(), x);
  return _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(w), neg);
}
FOLIO_T_AVX512VNNI inline __m512i LoadPair(const uint8_t* b0) {
  const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b0 + 2));
  const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b0 + kQ8BlockBytes + 2));
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}
FOLIO_T_AVX512VNNI inline __m512 PairScale(float s0, float s1) {
  return _mm512_mask_blend_ps(__mmask16(0xff00), _mm512_set1_ps(s0), _mm512_set1_ps(s1));
}

template <int R>
FOLIO_T_AVX512VNNI void DotQ8_0Vnni(const uint8_t* w, const Activations& x, int64_t r0,
                                    float* out) {
  const int64_t blocks = x.in / kQ8Block;
  const int8_t* xq[R];
  const float* xd[R];
  __m512 acc0[R], acc1[R];
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
    xq[i] = x.q8 + (r0 + i) * x.in;
    xd[i] = x.q8_d + (r0 + i) * blocks;
    acc0[i] = _mm512_setzero_ps();
    acc1[i] = _mm512_setzero_ps();
  }
  int64_t b = 0;
  for (; b + 4 <= blocks; b += 4) {
    const uint8_t* b0 = w + b * kQ8BlockBytes;
    const __m512i w01 = LoadPair(b0), w23 = LoadPair(b0 + 2 * kQ8BlockBytes);
    const float d0 = HalfBits(b0), d1 = HalfBits(b0 + kQ8BlockBytes);
    const float d2 = HalfBits(b0 + 2 * kQ8BlockBytes), d3 = HalfBits(b0 + 3 * kQ8BlockBytes);
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      const int8_t* xb = xq[i] + b * kQ8Block;
      const float* s = xd[i] + b;
      acc0[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(PairDot(w01, _mm512_loadu_si512(xb))),
                                PairScale(d0 * s[0], d1 * s[1]), acc0[i]);
      acc1[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(PairDot(w23, _mm512_loadu_si512(xb + 64))),
                                PairScale(d2 * s[2], d3 * s[3]), acc1[i]);
    }
  }
  for (; b < blocks; b += 2) {
    // The last one or two blocks; a missing second block reads as zeros with scale 0.
    const uint8_t* b0 = w + b * kQ8BlockBytes;
    const bool two = b + 2 <= blocks;
    const __m512i w01 =
        two ? LoadPair(b0)
            : _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b0 + 2)));
    const float d0 = HalfBits(b0), d1 = two ? HalfBits(b0 + kQ8BlockBytes) : 0.0f;
    const __mmask64 m = two ? ~__mmask64{0} : __mmask64{0xffffffffu};
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      const float* s = xd[i] + b;
      const __m512i xv = _mm512_maskz_loadu_epi8(m, xq[i] + b * kQ8Block);
      acc0[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(PairDot(w01, xv)),
                                PairScale(d0 * s[0], two ? d1 * s[1] : 0.0f), acc0[i]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) out[i] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[i], acc1[i]));
}

}  // namespace

DotKernel Avx512Kernel(StoredKind kind, SimdPath path) {
  if (IsLowBitKind(kind)) return Avx512QuantKernel(kind, path);
  DotKernel k;
  if (path == SimdPath::kAvx512 && kind == StoredKind::kF16) {
    k.dot[0] = DotHalf<StoredKind::kF16, 1>;
    k.dot[1] = DotHalf<StoredKind::kF16, 2>;
    k.dot[2] = DotHalf<StoredKind::kF16, 3>;
    k.dot[3] = DotHalf<StoredKind::kF16, 4>;
  } else if (path == SimdPath::kAvx512 && kind == StoredKind::kBF16) {
    k.dot[0] = DotHalf<StoredKind::kBF16, 1>;
    k.dot[1] = DotHalf<StoredKind::kBF16, 2>;
    k.dot[2] = DotHalf<StoredKind::kBF16, 3>;
    k.dot[3] = DotHalf<StoredKind::kBF16, 4>;
  } else if (path == SimdPath::kAvx512Bf16 && kind == StoredKind::kBF16) {
    k.dot[0] = DotBf16Dp<1>;
    k.dot[1] = DotBf16Dp<2>;
    k.dot[2] = DotBf16Dp<3>;
    k.dot[3] = DotBf16Dp<4>;
    k.needs_bf16 = true;
  } else if (path == SimdPath::kAvx512Vnni && kind == StoredKind::kQ8_0) {
    k.dot[0] = DotQ8_0Vnni<1>;
    k.dot[1] = DotQ8_0Vnni<2>;
    k.dot[2] = DotQ8_0Vnni<3>;
    k.dot[3] = DotQ8_0Vnni<4>;
    k.needs_q8 = true;
  }
  AddAvx512Tiles(kind, path, &k);
  return k;
}

}  // namespace folio::worker::kernels::typed

#else  // not x86-64: no vector kernels

namespace folio::worker::kernels::typed {
DotKernel Avx512Kernel(StoredKind, SimdPath) { return DotKernel{}; }
DotKernel Avx512QuantKernel(StoredKind, SimdPath) { return DotKernel{}; }
}  // namespace folio::worker::kernels::typed

#endif
