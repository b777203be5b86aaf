// Vector math shared by the kernels' AVX-512 paths: attention, SwiGLU, the K-quant GEMMs
// (internal to the kernels library). Every function carries the AVX-512 F/BW/VL target
// attribute, so it may only be called from code that runs after CpuFeatures said the CPU
// has them.
#ifndef FOLIO_SERVICES_WORKER_KERNELS_AVX512_MATH_H_
#define FOLIO_SERVICES_WORKER_KERNELS_AVX512_MATH_H_

#include "services/worker/kernels/cpu_target.h"

#if defined(__x86_64__)

#include <cstdint>

namespace folio::worker::kernels::avx512 {

// 16 KV values at p (f32, f16 bits, or kQ8 int8 values without their row's scale) as f32.
template <typename KvT>
FOLIO_T_AVX512 inline __m512 Load16(const KvT* p) {
  if constexpr (sizeof(KvT) == 1) {
    return _mm512_cvtepi32_ps(
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  } else if constexpr (sizeof(KvT) == 2) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  } else {
    return _mm512_loadu_ps(p);
  }
}

// Transposes the 16 x 16 dwords whose rows are r[0..15], in place: r[c] lane j becomes
// r[j] lane c. Data movement only, so it serves any 32-bit lanes (floats: the overload below).
FOLIO_T_AVX512 __attribute__((always_inline)) inline void Transpose16(__m512i* r) {
  __m512i t[16], u[16];
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k) {  // lane L: rows 2k, 2k+1 at columns 4L.. (lo) / 4L+2.. (hi)
    t[2 * k] = _mm512_unpacklo_epi32(r[2 * k], r[2 * k + 1]);
    t[2 * k + 1] = _mm512_unpackhi_epi32(r[2 * k], r[2 * k + 1]);
  }
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {  // u[4k + c], lane L: column 4L + c of rows 4k .. 4k + 3
    u[4 * k + 0] = _mm512_unpacklo_epi64(t[4 * k], t[4 * k + 2]);
    u[4 * k + 1] = _mm512_unpackhi_epi64(t[4 * k], t[4 * k + 2]);
    u[4 * k + 2] = _mm512_unpacklo_epi64(t[4 * k + 1], t[4 * k + 3]);
    u[4 * k + 3] = _mm512_unpackhi_epi64(t[4 * k + 1], t[4 * k + 3]);
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {  // 4 x 4 transpose of the 128-bit lanes of u[c], u[4 + c], ...
    const __m512i y0 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x44);
    const __m512i y1 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xEE);
    const __m512i y2 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x44);
    const __m512i y3 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xEE);
    r[c] = _mm512_shuffle_i32x4(y0, y2, 0x88);
    r[4 + c] = _mm512_shuffle_i32x4(y0, y2, 0xDD);
    r[8 + c] = _mm512_shuffle_i32x4(y1, y3, 0x88);
    r[12 + c] = _mm512_shuffle_i32x4(y1, y3, 0xDD);
  }
}

FOLIO_T_AVX512 __attribute__((always_inline)) inline void Transpose16(__m512* t) {
  __m512i r[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) r[i] = _mm512_castps_si512(t[i]);
  Transpose16(r);
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) t[i] = _mm512_castsi512_ps(r[i]);
}

// e^x on 16 lanes, x clamped to [-87, 88]; relative error below 2e-7 (avx2::Exp's
// reduction and polynomial, scaled by vscalefps).
FOLIO_T_AVX512 inline __m512 Exp16(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(88.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.0f / 720);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

}  // namespace folio::worker::kernels::avx512

#endif  // __x86_64__
#endif  // FOLIO_SERVICES_WORKER_KERNELS_AVX512_MATH_H_
