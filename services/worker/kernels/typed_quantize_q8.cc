// QuantizeQ8_0 (typed_dot.h) by path: the portable loop of typed_dot_portable.cc
// (QuantizeQ8_0Portable) and AVX2 / AVX-512 F+BW versions that give the same quants and
// scales bit for bit (typed_kernels_test Q8_0QuantizerPathsAgree): the same max |x| (max
// is exact in any order and both drop a NaN the way std::max(amax, v) does), the same
// scalar scale and inverse, the same f32 products x * id, and round half away from zero
// done exactly (truncate, then step away from zero where |fraction| >= 0.5).
// QuantizeQ8_0 picks the best path EnabledCpuFeatures() allows, once. QuantizeQ8_K the
// same over QuantizeQ8_KPortable (typed_quant_portable.cc) and an AVX-512 version with its
// bytes (Q8_KQuantizerPathsAgree). Stateless, thread-safe.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "glog/logging.h"
#include "services/worker/kernels/half.h"
#include "services/worker/kernels/typed_dot.h"
#include "services/worker/kernels/cpu_target.h"

namespace folio::worker::kernels::typed {
namespace {

// The block's scale as QuantizeQ8_0Portable computes it, from its max |x|.
inline void Scale(float amax, float* scale, float* id) {
  *scale = amax / 127.0f;
  *id = *scale != 0.0f ? 1.0f / *scale : 0.0f;
}

#if defined(__x86_64__)
FOLIO_T_AVX512 inline __m512 RoundAway512(__m512 t) {
  const __m512 r = _mm512_roundscale_ps(t, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_abs_ps(_mm512_sub_ps(t, r));  // exact
  const __mmask16 away = _mm512_cmp_ps_mask(f, _mm512_set1_ps(0.5f), _CMP_GE_OQ);
  const __m512 one = _mm512_castsi512_ps(_mm512_or_si512(
      _mm512_and_si512(_mm512_castps_si512(t), _mm512_set1_epi32(INT32_MIN)),
      _mm512_castps_si512(_mm512_set1_ps(1.0f))));  // copysign(1, t)
  return _mm512_mask_add_ps(r, away, r, one);
}

FOLIO_T_AVX512 void QuantizeQ8_0Avx512(const float* x, int64_t n, int8_t* q, float* d,
                                       float* s) {
  for (int64_t b = 0; b < n / kQ8Block; ++b) {
    const float* xb = x + b * kQ8Block;
    const __m512 v0 = _mm512_loadu_ps(xb), v1 = _mm512_loadu_ps(xb + 16);
    // max(v, m) returns m where v is NaN, as std::max(amax, v) keeps amax.
    __m512 m = _mm512_max_ps(_mm512_abs_ps(v0), _mm512_setzero_ps());
    m = _mm512_max_ps(_mm512_abs_ps(v1), m);
    float scale, id;
    Scale(_mm512_reduce_max_ps(m), &scale, &id);
    const __m512 vid = _mm512_set1_ps(id);
    const __m512i q0 = _mm512_cvtps_epi32(RoundAway512(_mm512_mul_ps(v0, vid)));
    const __m512i q1 = _mm512_cvtps_epi32(RoundAway512(_mm512_mul_ps(v1, vid)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + b * kQ8Block), _mm512_cvtsepi32_epi8(q0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + b * kQ8Block + 16),
                     _mm512_cvtsepi32_epi8(q1));
    d[b] = HalfToFloat(FloatToHalf(scale));
    if (s != nullptr) {
      s[b] = d[b] * static_cast<float>(_mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1)));
    }
  }
}

// QuantizeQ8_KPortable's bytes: the first value of largest magnitude maps to -127, the
// others round half to even (vcvtps2dq under the default rounding mode), bsums per 16.
FOLIO_T_AVX512 void QuantizeQ8_KAvx512(const float* x, int64_t n, int8_t* q, float* d,
                                       int16_t* bsums) {
  for (int64_t b = 0; b < n / kQ8KBlock; ++b) {
    const float* xb = x + b * kQ8KBlock;
    __m512 m = _mm512_setzero_ps();
    for (int j = 0; j < kQ8KBlock; j += 16) {
      m = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(xb + j)), m);
    }
    const float amax = _mm512_reduce_max_ps(m);
    int8_t* qb = q + b * kQ8KBlock;
    if (amax == 0.0f) {
      d[b] = 0.0f;
      std::memset(qb, 0, kQ8KBlock);
      std::memset(bsums + b * 16, 0, 16 * sizeof(int16_t));
      continue;
    }
    float max = amax;
    for (int j = 0; j < kQ8KBlock; j += 16) {  // the first value at amax, with its sign
      const __mmask16 at = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(xb + j)),
                                              _mm512_set1_ps(amax), _CMP_EQ_OQ);
      if (at != 0) {
        max = xb[j + __builtin_ctz(at)];
        break;
      }
    }
    const float iscale = -127.0f / max;
    const __m512 vs = _mm512_set1_ps(iscale);
    for (int g = 0; g < 16; ++g) {
      const __m512i v = _mm512_min_epi32(
          _mm512_cvtps_epi32(_mm512_mul_ps(vs, _mm512_loadu_ps(xb + 16 * g))),
          _mm512_set1_epi32(127));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(qb + 16 * g), _mm512_cvtepi32_epi8(v));
      bsums[b * 16 + g] = static_cast<int16_t>(_mm512_reduce_add_epi32(v));
    }
    d[b] = 1.0f / iscale;
  }
}

FOLIO_T_AVX2 inline __m256 RoundAway256(__m256 t) {
  const __m256 r = _mm256_round_ps(t, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 f = _mm256_andnot_ps(sign, _mm256_sub_ps(t, r));  // exact
  const __m256 away = _mm256_cmp_ps(f, _mm256_set1_ps(0.5f), _CMP_GE_OQ);
  const __m256 one = _mm256_or_ps(_mm256_and_ps(t, sign), _mm256_set1_ps(1.0f));
  return _mm256_add_ps(r, _mm256_and_ps(away, one));
}

FOLIO_T_AVX2 void QuantizeQ8_0Avx2(const float* x, int64_t n, int8_t* q, float* d, float* s) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < n / kQ8Block; ++b) {
    const float* xb = x + b * kQ8Block;
    __m256 v[4];
    __m256 m = _mm256_setzero_ps();
    for (int k = 0; k < 4; ++k) {
      v[k] = _mm256_loadu_ps(xb + 8 * k);
      m = _mm256_max_ps(_mm256_andnot_ps(sign, v[k]), m);  // NaN v: keeps m
    }
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    float scale, id;
    Scale(_mm_cvtss_f32(h), &scale, &id);
    const __m256 vid = _mm256_set1_ps(id);
    __m256i qi[4];
    for (int k = 0; k < 4; ++k) qi[k] = _mm256_cvtps_epi32(RoundAway256(_mm256_mul_ps(v[k], vid)));
    // packs work per 128-bit lane: 0 1 | 2 3 -> bytes of dwords 0,2,4,6 | 1,3,5,7; fix order.
    const __m256i p16a = _mm256_packs_epi32(qi[0], qi[1]), p16b = _mm256_packs_epi32(qi[2], qi[3]);
    const __m256i p8 = _mm256_packs_epi16(p16a, p16b);
    const __m256i out = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + b * kQ8Block), out);
    d[b] = HalfToFloat(FloatToHalf(scale));
    if (s != nullptr) {
      __m256i t = _mm256_add_epi32(_mm256_add_epi32(qi[0], qi[1]), _mm256_add_epi32(qi[2], qi[3]));
      __m128i u = _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
      u = _mm_add_epi32(u, _mm_shuffle_epi32(u, 0x4e));
      u = _mm_add_epi32(u, _mm_shuffle_epi32(u, 0xb1));
      s[b] = d[b] * static_cast<float>(_mm_cvtsi128_si32(u));
    }
  }
}
#endif

using QuantizeFn = void (*)(const float*, int64_t, int8_t*, float*, float*);

QuantizeFn Q8_0For(SimdPath path) {
#if defined(__x86_64__)
  switch (path) {
    case SimdPath::kAvx512:
    case SimdPath::kAvx512Vnni:
    case SimdPath::kAvx512Bf16:
      return QuantizeQ8_0Avx512;
    case SimdPath::kAvx2:
    case SimdPath::kAvxVnni:
      return QuantizeQ8_0Avx2;
    case SimdPath::kPortable:
      break;
  }
#endif
  return QuantizeQ8_0Portable;
}

using QuantizeKFn = void (*)(const float*, int64_t, int8_t*, float*, int16_t*);

QuantizeKFn Q8_KFor(SimdPath path) {
#if defined(__x86_64__)
  if (path == SimdPath::kAvx512 || path == SimdPath::kAvx512Vnni ||
      path == SimdPath::kAvx512Bf16) {
    return QuantizeQ8_KAvx512;
  }
#endif
  return QuantizeQ8_KPortable;
}

}  // namespace

void QuantizeQ8_KOnPath(SimdPath path, const float* x, int64_t n, int8_t* q, float* d,
                        int16_t* bsums) {
  const char* missing = MissingFeature(path, DetectedCpuFeatures());
  CHECK(missing == nullptr) << "path " << SimdPathName(path) << " needs " << missing;
  Q8_KFor(path)(x, n, q, d, bsums);
}

void QuantizeQ8_K(const float* x, int64_t n, int8_t* q, float* d, int16_t* bsums) {
  static const QuantizeKFn fn =
      Q8_KFor(EnabledCpuFeatures().avx512 ? SimdPath::kAvx512 : SimdPath::kPortable);
  fn(x, n, q, d, bsums);
}

void QuantizeQ8_0OnPath(SimdPath path, const float* x, int64_t n, int8_t* q, float* d,
                        float* s) {
  const char* missing = MissingFeature(path, DetectedCpuFeatures());
  CHECK(missing == nullptr) << "path " << SimdPathName(path) << " needs " << missing;
  Q8_0For(path)(x, n, q, d, s);
}

void QuantizeQ8_0(const float* x, int64_t n, int8_t* q, float* d, float* s) {
  static const QuantizeFn fn = [] {
    const CpuFeatures f = EnabledCpuFeatures();
    return Q8_0For(f.avx512 ? SimdPath::kAvx512 : f.avx2 ? SimdPath::kAvx2 : SimdPath::kPortable);
  }();
  fn(x, n, q, d, s);
}

}  // namespace folio::worker::kernels::typed
