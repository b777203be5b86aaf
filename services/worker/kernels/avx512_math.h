// Vector math shared by the attention kernels' AVX-512 paths (internal to the kernels
// library). Every function carries the AVX-512 F/BW/VL target attribute, so it may only be
// called from code that runs after CpuFeatures said the CPU has them.
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
