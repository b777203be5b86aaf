// Vector math shared by the kernels' AVX2 paths (internal to the kernels library).
// Every function carries the AVX2/FMA target attribute, so it may only be called from
// code that runs after CpuIsa said the CPU has them.
#ifndef FOLIO_SERVICES_WORKER_KERNELS_AVX2_MATH_H_
#define FOLIO_SERVICES_WORKER_KERNELS_AVX2_MATH_H_

#include "services/worker/kernels/cpu_target.h"

#if defined(__x86_64__)

#define FOLIO_HAVE_AVX2_PATH 1

namespace folio::worker::kernels::avx2 {

// e^x, 8 lanes, x clamped to [-87, 88] (beyond, e^x under- or overflows a float):
// Cody-Waite range reduction to r in [-ln2/2, ln2/2] and a degree-6 polynomial;
// relative error below 2e-7.
FOLIO_T_AVX2 inline __m256 Exp(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.0f / 720);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

// Sum of the 8 lanes.
FOLIO_T_AVX2 inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

}  // namespace folio::worker::kernels::avx2

#else
#define FOLIO_HAVE_AVX2_PATH 0
#endif  // defined(__x86_64__)

#endif  // FOLIO_SERVICES_WORKER_KERNELS_AVX2_MATH_H_
