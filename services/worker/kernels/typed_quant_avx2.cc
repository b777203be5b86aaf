// The AVX2 kernels of the 4/5/6-bit ggml block types (typed_dot.h; the portable
// kernels in typed_quant_portable.cc are their reference). Weights are unpacked in
// registers to unsigned bytes (q4_0 / q5_0 then shifted to signed), multiplied with the
// 8-bit activation quants by vpmaddubsw (u8 x s8 -> s16 pairs, which cannot saturate
// for 6-bit weights: 2 * 63 * 127 < 2^15) and widened by vpmaddwd, for the K-quants
// against the group scales, so each super-block's integer sum is exact; it is then
// scaled in f32 as the portable kernel does. Each function carries its target
// attribute; the library itself stays baseline x86-64. Stateless; thread-safe.
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

FOLIO_T_AVX2 inline float HalfAt(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

FOLIO_T_AVX2 inline __m256i Load32(const void* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// Bit j of `bits` as byte j of the result: 0xff when set, 0 when clear.
FOLIO_T_AVX2 inline __m256i BitsToBytes(uint32_t bits) {
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(bits)),
      _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0));
  const __m256i sel = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  return _mm256_cmpeq_epi8(_mm256_and_si256(spread, sel), sel);
}

// ---- the 32-value types -------------------------------------------------------------

struct Legacy {
  int bytes;
  bool has_min;
  bool five_bit;
};
constexpr Legacy LegacyOf(StoredKind k) {
  return k == StoredKind::kQ4_0   ? Legacy{18, false, false}
         : k == StoredKind::kQ4_1 ? Legacy{20, true, false}
         : k == StoredKind::kQ5_0 ? Legacy{22, false, true}
                                  : Legacy{24, true, true};
}

// The block's 32 weights as bytes in value order: unsigned for q4_1 / q5_1, q - 8 /
// q - 16 (signed) for q4_0 / q5_0.
template <StoredKind kKind>
FOLIO_T_AVX2 inline __m256i UnpackLegacy(const uint8_t* blk) {
  constexpr Legacy L = LegacyOf(kKind);
  const uint8_t* qs = blk + (L.has_min ? 4 : 2) + (L.five_bit ? 4 : 0);
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  __m256i w = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0F));
  if constexpr (L.five_bit) {
    uint32_t qh;
    std::memcpy(&qh, blk + (L.has_min ? 4 : 2), 4);
    w = _mm256_or_si256(w, _mm256_and_si256(BitsToBytes(qh), _mm256_set1_epi8(0x10)));
  }
  if constexpr (!L.has_min) w = _mm256_sub_epi8(w, _mm256_set1_epi8(L.five_bit ? 16 : 8));
  return w;
}

// The 8 int32 partial sums of one block: w (signed or unsigned bytes) times x.
template <bool kSigned>
FOLIO_T_AVX2 inline __m256i BlockDot(__m256i w, __m256i x) {
  const __m256i p = kSigned ? _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w))
                            : _mm256_maddubs_epi16(w, x);
  return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

template <StoredKind kKind, int R>
FOLIO_T_AVX2 void DotLegacy(const uint8_t* w, const Activations& x, int64_t r0, float* out) {
  constexpr Legacy L = LegacyOf(kKind);
  const int64_t blocks = x.in / kQ8Block;
  const int8_t* xq[R];
  const float* xd[R];
  const float* xs[R];
  __m256 acc[R];
  float accm[R];
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
    xq[i] = x.q8 + (r0 + i) * x.in;
    xd[i] = x.q8_d + (r0 + i) * blocks;
    xs[i] = x.q8_s + (r0 + i) * blocks;
    acc[i] = _mm256_setzero_ps();
    accm[i] = 0.0f;
  }
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* blk = w + b * L.bytes;
    const __m256i wq = UnpackLegacy<kKind>(blk);
    const float d = HalfAt(blk);
    const float m = L.has_min ? HalfAt(blk + 2) : 0.0f;
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      const __m256i s = BlockDot<!L.has_min>(wq, Load32(xq[i] + b * kQ8Block));
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(d * xd[i][b]), acc[i]);
      if (L.has_min) accm[i] += m * xs[i][b];
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) out[i] = Hsum(acc[i]) + accm[i];
}

// ---- the K-quants ---------------------------------------------------------------------

// q4_K / q5_K: the 8 six-bit scales (16-bit lanes 0..7) and mins (lanes 8..15) of the
// super-block whose 12 packed bytes are at s.
FOLIO_T_AVX2 inline __m256i ScalesMins(const uint8_t* s) {
  uint32_t u0, u1, u2;
  std::memcpy(&u0, s, 4);
  std::memcpy(&u1, s + 4, 4);
  std::memcpy(&u2, s + 8, 4);
  const uint32_t sc_lo = u0 & 0x3F3F3F3Fu, mn_lo = u1 & 0x3F3F3F3Fu;
  const uint32_t sc_hi = (u2 & 0x0F0F0F0Fu) | ((u0 >> 2) & 0x30303030u);
  const uint32_t mn_hi = ((u2 >> 4) & 0x0F0F0F0Fu) | ((u1 >> 2) & 0x30303030u);
  return _mm256_cvtepu8_epi16(_mm_set_epi32(static_cast<int>(mn_hi), static_cast<int>(mn_lo),
                                            static_cast<int>(sc_hi), static_cast<int>(sc_lo)));
}

template <bool kFiveBit, int R>
FOLIO_T_AVX2 void DotQ45K(const uint8_t* w, const Activations& x, int64_t r0, float* out) {
  constexpr int kBytes = kFiveBit ? 176 : 144;
  const int64_t blocks = x.in / kQ8KBlock;
  const int8_t* xq[R];
  const float* xd[R];
  const int16_t* bs[R];
  __m256 acc[R];
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
    xq[i] = x.k8 + (r0 + i) * x.in;
    xd[i] = x.k8_d + (r0 + i) * blocks;
    bs[i] = x.k8_bsums + (r0 + i) * (x.in / 16);
    acc[i] = _mm256_setzero_ps();
  }
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i min_pairs = _mm256_set_epi8(15, 14, 15, 14, 13, 12, 13, 12, 11, 10, 11, 10, 9, 8, 9, 8,
                                            7, 6, 7, 6, 5, 4, 5, 4, 3, 2, 3, 2, 1, 0, 1, 0);
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* blk = w + b * kBytes;
    const uint8_t* qs = blk + (kFiveBit ? 48 : 16);
    const __m256i sm = ScalesMins(blk + 4);
    // Each group's min twice, against the sums of its two 16-value halves of x; each
    // group's scale in all 16 lanes.
    const __m256i mins = _mm256_shuffle_epi8(_mm256_permute4x64_epi64(sm, 0xEE), min_pairs);
    const __m256i scales = _mm256_permute4x64_epi64(sm, 0x44);
    __m256i sc[8];
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) {
      sc[g] = _mm256_shuffle_epi8(scales, _mm256_set1_epi16(static_cast<short>((2 * g + 1) << 8 | 2 * g)));
    }
    const float d = HalfAt(blk), dmin = HalfAt(blk + 2);
    __m256i wlo[4], whi[4];
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const __m256i q = Load32(qs + 32 * c);
      wlo[c] = _mm256_and_si256(q, low4);
      whi[c] = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
      if constexpr (kFiveBit) {
        const __m256i qh = Load32(blk + 16);
        const __m256i one = _mm256_set1_epi8(1);
        const __m128i s0 = _mm_cvtsi32_si128(2 * c), s1 = _mm_cvtsi32_si128(2 * c + 1);
        wlo[c] = _mm256_or_si256(
            wlo[c], _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(qh, s0), one), 4));
        whi[c] = _mm256_or_si256(
            whi[c], _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(qh, s1), one), 4));
      }
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      const int8_t* xb = xq[i] + b * kQ8KBlock;
      __m256i isum = _mm256_setzero_si256();
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        const __m256i plo = _mm256_maddubs_epi16(wlo[c], Load32(xb + 64 * c));
        const __m256i phi = _mm256_maddubs_epi16(whi[c], Load32(xb + 64 * c + 32));
        isum = _mm256_add_epi32(isum, _mm256_madd_epi16(plo, sc[2 * c]));
        isum = _mm256_add_epi32(isum, _mm256_madd_epi16(phi, sc[2 * c + 1]));
      }
      const __m256i msum = _mm256_madd_epi16(Load32(bs[i] + b * 16), mins);
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(d * xd[i][b]), acc[i]);
      acc[i] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum), _mm256_set1_ps(dmin * xd[i][b]), acc[i]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) out[i] = Hsum(acc[i]);
}

template <int R>
FOLIO_T_AVX2 void DotQ6K(const uint8_t* w, const Activations& x, int64_t r0, float* out) {
  const int64_t blocks = x.in / kQ8KBlock;
  const int8_t* xq[R];
  const float* xd[R];
  const int16_t* bs[R];
  __m256 acc[R];
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
    xq[i] = x.k8 + (r0 + i) * x.in;
    xd[i] = x.k8_d + (r0 + i) * blocks;
    bs[i] = x.k8_bsums + (r0 + i) * (x.in / 16);
    acc[i] = _mm256_setzero_ps();
  }
  const __m256i low4 = _mm256_set1_epi8(0x0F), low2 = _mm256_set1_epi8(0x03);
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* blk = w + b * 210;
    const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 192));
    const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);  // the 16 group scales
    const float d = HalfAt(blk + 208);
    // wv[k]: values 32k .. 32k + 31 as unsigned q + 32; scale[k]: their two groups'.
    __m256i wv[8], scale[8];
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m256i l0 = Load32(blk + 64 * h), l1 = Load32(blk + 64 * h + 32);
      const __m256i qh = Load32(blk + 128 + 32 * h);
      const __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(qh, low2), 4);
      const __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), low2), 4);
      const __m256i h2 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), low2), 4);
      const __m256i h3 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), low2), 4);
      wv[4 * h + 0] = _mm256_or_si256(_mm256_and_si256(l0, low4), h0);
      wv[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(l1, low4), h1);
      wv[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4), h2);
      wv[4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low4), h3);
    }
    alignas(32) int16_t s[16];
    _mm256_store_si256(reinterpret_cast<__m256i*>(s), sc16);
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      scale[k] = _mm256_set_m128i(_mm_set1_epi16(s[2 * k + 1]), _mm_set1_epi16(s[2 * k]));
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      const int8_t* xb = xq[i] + b * kQ8KBlock;
      // The weights carry +32: take 32 * sum_g sc_g * bsum_g back out.
      __m256i isum = _mm256_sub_epi32(
          _mm256_setzero_si256(),
          _mm256_slli_epi32(_mm256_madd_epi16(Load32(bs[i] + b * 16), sc16), 5));
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        const __m256i p = _mm256_maddubs_epi16(wv[k], Load32(xb + 32 * k));
        isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p, scale[k]));
      }
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(d * xd[i][b]), acc[i]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) out[i] = Hsum(acc[i]);
}

template <StoredKind kKind, int R>
FOLIO_T_AVX2 void DotLowBit(const uint8_t* w, const Activations& x, int64_t r0, float* out) {
  if constexpr (kKind == StoredKind::kQ4_K) {
    DotQ45K<false, R>(w, x, r0, out);
  } else if constexpr (kKind == StoredKind::kQ5_K) {
    DotQ45K<true, R>(w, x, r0, out);
  } else if constexpr (kKind == StoredKind::kQ6_K) {
    DotQ6K<R>(w, x, r0, out);
  } else {
    DotLegacy<kKind, R>(w, x, r0, out);
  }
}

template <StoredKind kKind>
DotKernel Make() {
  DotKernel k;
  k.dot[0] = DotLowBit<kKind, 1>;
  k.dot[1] = DotLowBit<kKind, 2>;
  k.dot[2] = DotLowBit<kKind, 3>;
  k.dot[3] = DotLowBit<kKind, 4>;
  const bool super = kKind == StoredKind::kQ4_K || kKind == StoredKind::kQ5_K ||
                     kKind == StoredKind::kQ6_K;
  k.needs_q8 = !super;
  k.needs_q8k = super;
  return k;
}

}  // namespace

DotKernel Avx2QuantKernel(StoredKind kind, SimdPath path) {
  if (path != SimdPath::kAvx2) return DotKernel{};
  switch (kind) {
    case StoredKind::kQ4_0:
      return Make<StoredKind::kQ4_0>();
    case StoredKind::kQ4_1:
      return Make<StoredKind::kQ4_1>();
    case StoredKind::kQ5_0:
      return Make<StoredKind::kQ5_0>();
    case StoredKind::kQ5_1:
      return Make<StoredKind::kQ5_1>();
    case StoredKind::kQ4_K:
      return Make<StoredKind::kQ4_K>();
    case StoredKind::kQ5_K:
      return Make<StoredKind::kQ5_K>();
    case StoredKind::kQ6_K:
      return Make<StoredKind::kQ6_K>();
    default:
      return DotKernel{};
  }
}

}  // namespace folio::worker::kernels::typed

#else  // not x86-64: no vector kernels

namespace folio::worker::kernels::typed {
DotKernel Avx2QuantKernel(StoredKind, SimdPath) { return DotKernel{}; }
}  // namespace folio::worker::kernels::typed

#endif
