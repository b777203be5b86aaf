// The AVX2 (+ FMA + F16C) and AVX-VNNI kernels of typed_dot.h. Each function carries
// its target attribute; the library itself stays baseline x86-64.
#include "services/worker/kernels/typed_dot.h"
#include "services/worker/kernels/cpu_target.h"

#if defined(__x86_64__)

namespace folio::worker::kernels::typed {
namespace {

FOLIO_T_AVX2 inline float Hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// 8 stored f16 / bf16 values at p, widened to f32.
template <StoredKind kKind>
FOLIO_T_AVX2 inline __m256 Load8(const uint8_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if constexpr (kKind == StoredKind::kF16) {
    return _mm256_cvtph_ps(h);
  } else {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
}

template <StoredKind kKind>
FOLIO_T_AVX2 inline float Scalar(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  if constexpr (kKind == StoredKind::kF16) {
    return _cvtsh_ss(h);
  } else {
    return Bf16ToFloat(h);
  }
}

template <StoredKind kKind, int R>
FOLIO_T_AVX2 void DotHalf(const uint8_t* w, const Activations& x, int64_t r0, float* out) {
  const int64_t n = x.in;
  const float* xr[R];
  __m256 acc0[R], acc1[R];
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
    xr[i] = x.f32 + (r0 + i) * x.ldx;
    acc0[i] = _mm256_setzero_ps();
    acc1[i] = _mm256_setzero_ps();
  }
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) {
    const __m256 w0 = Load8<kKind>(w + 2 * k), w1 = Load8<kKind>(w + 2 * k + 16);
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      acc0[i] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xr[i] + k), acc0[i]);
      acc1[i] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xr[i] + k + 8), acc1[i]);
    }
  }
  if (k + 8 <= n) {
    const __m256 w0 = Load8<kKind>(w + 2 * k);
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) acc0[i] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xr[i] + k), acc0[i]);
    k += 8;
  }
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
    float s = Hsum(_mm256_add_ps(acc0[i], acc1[i]));
    for (int64_t t = k; t < n; ++t) s += Scalar<kKind>(w + 2 * t) * xr[i][t];
    out[i] = s;
  }
}

FOLIO_T_AVX2 inline float HalfBits(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// One q8_0 block's 8 int32 partial sums of w * x (32 int8 each): |w| times x with w's
// sign, so the unsigned-by-signed products are exact (|w| <= 128, |x| <= 127).
FOLIO_T_AVX2 inline __m256i BlockDotMaddubs(__m256i w, __m256i x) {
  const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
  return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}
FOLIO_T_AVXVNNI inline __m256i BlockDotVnni(__m256i w, __m256i x) {
  return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(w, w),
                                 _mm256_sign_epi8(x, w));
}

// The q8_0 kernel body, for both block-dot flavours (a macro: the target attribute
// differs, and the block dot must inline into the loop).
#define FOLIO_Q8_0_AVX2_KERNEL(NAME, TARGET, BLOCK_DOT)                                     \
  template <int R>                                                                          \
  TARGET void NAME(const uint8_t* w, const Activations& x, int64_t r0, float* out) {        \
    const int64_t blocks = x.in / kQ8Block;                                                 \
    const int8_t* xq[R];                                                                    \
    const float* xd[R];                                                                     \
    __m256 acc0[R], acc1[R];                                                                \
    _Pragma("GCC unroll 4") for (int i = 0; i < R; ++i) {                                   \
      xq[i] = x.q8 + (r0 + i) * x.in;                                                       \
      xd[i] = x.q8_d + (r0 + i) * blocks;                                                   \
      acc0[i] = _mm256_setzero_ps();                                                        \
      acc1[i] = _mm256_setzero_ps();                                                        \
    }                                                                                       \
    int64_t b = 0;                                                                          \
    for (; b + 2 <= blocks; b += 2) {                                                       \
      const uint8_t* b0 = w + b * kQ8BlockBytes;                                            \
      const uint8_t* b1 = b0 + kQ8BlockBytes;                                               \
      const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b0 + 2));      \
      const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b1 + 2));      \
      const float d0 = HalfBits(b0), d1 = HalfBits(b1);                                     \
      _Pragma("GCC unroll 4") for (int i = 0; i < R; ++i) {                                 \
        const __m256i x0 =                                                                  \
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq[i] + b * kQ8Block));     \
        const __m256i x1 = _mm256_loadu_si256(                                              \
            reinterpret_cast<const __m256i*>(xq[i] + (b + 1) * kQ8Block));                  \
        acc0[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(BLOCK_DOT(w0, x0)),                    \
                                  _mm256_set1_ps(d0 * xd[i][b]), acc0[i]);                  \
        acc1[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(BLOCK_DOT(w1, x1)),                    \
                                  _mm256_set1_ps(d1 * xd[i][b + 1]), acc1[i]);              \
      }                                                                                     \
    }                                                                                       \
    if (b < blocks) {                                                                       \
      const uint8_t* b0 = w + b * kQ8BlockBytes;                                            \
      const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b0 + 2));      \
      const float d0 = HalfBits(b0);                                                        \
      _Pragma("GCC unroll 4") for (int i = 0; i < R; ++i) {                                 \
        const __m256i x0 =                                                                  \
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq[i] + b * kQ8Block));     \
        acc0[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(BLOCK_DOT(w0, x0)),                    \
                                  _mm256_set1_ps(d0 * xd[i][b]), acc0[i]);                  \
      }                                                                                     \
    }                                                                                       \
    _Pragma("GCC unroll 4") for (int i = 0; i < R; ++i) {                                   \
      out[i] = Hsum(_mm256_add_ps(acc0[i], acc1[i]));                                       \
    }                                                                                       \
  }

FOLIO_Q8_0_AVX2_KERNEL(DotQ8_0Maddubs, FOLIO_T_AVX2, BlockDotMaddubs)
FOLIO_Q8_0_AVX2_KERNEL(DotQ8_0Vnni, FOLIO_T_AVXVNNI, BlockDotVnni)

}  // namespace

DotKernel Avx2Kernel(StoredKind kind, SimdPath path) {
  if (IsLowBitKind(kind)) return Avx2QuantKernel(kind, path);
  DotKernel k;
  if (path == SimdPath::kAvx2 && kind == StoredKind::kF16) {
    k.dot[0] = DotHalf<StoredKind::kF16, 1>;
    k.dot[1] = DotHalf<StoredKind::kF16, 2>;
    k.dot[2] = DotHalf<StoredKind::kF16, 3>;
    k.dot[3] = DotHalf<StoredKind::kF16, 4>;
  } else if (path == SimdPath::kAvx2 && kind == StoredKind::kBF16) {
    k.dot[0] = DotHalf<StoredKind::kBF16, 1>;
    k.dot[1] = DotHalf<StoredKind::kBF16, 2>;
    k.dot[2] = DotHalf<StoredKind::kBF16, 3>;
    k.dot[3] = DotHalf<StoredKind::kBF16, 4>;
  } else if (path == SimdPath::kAvx2 && kind == StoredKind::kQ8_0) {
    k.dot[0] = DotQ8_0Maddubs<1>;
    k.dot[1] = DotQ8_0Maddubs<2>;
    k.dot[2] = DotQ8_0Maddubs<3>;
    k.dot[3] = DotQ8_0Maddubs<4>;
    k.needs_q8 = true;
  } else if (path == SimdPath::kAvxVnni && kind == StoredKind::kQ8_0) {
    k.dot[0] = DotQ8_0Vnni<1>;
    k.dot[1] = DotQ8_0Vnni<2>;
    k.dot[2] = DotQ8_0Vnni<3>;
    k.dot[3] = DotQ8_0Vnni<4>;
    k.needs_q8 = true;
  }
  return k;
}

}  // namespace folio::worker::kernels::typed

#else  // not x86-64: no vector kernels

namespace folio::worker::kernels::typed {
DotKernel Avx2Kernel(StoredKind, SimdPath) { return DotKernel{}; }
DotKernel Avx2QuantKernel(StoredKind, SimdPath) { return DotKernel{}; }
}  // namespace folio::worker::kernels::typed

#endif
