// AVX-512 BF16 kernels of dequant_bf16.h: q8_0, q4_0, q4_K and q6_K blocks unpacked in
// registers, scaled with the reference dequantizers' f32 operations in their order (this
// file is built with -ffp-contract=off, so a multiply and a subtract stay two roundings,
// as in model/formats/), and rounded to bf16 by vcvtne(2)ps2bf16 (nearest even, as
// typed::RoundToBf16; it reads an f32 denormal as zero, which these products of an f16
// scale and a small integer never are). The 4-bit types round a group's 16 possible
// results once and look their values up (Table16), which gives the same bits. Each
// function carries its target attribute; the library itself stays baseline x86-64
// (cpu_target.h).
#include "services/worker/kernels/dequant_bf16.h"

#include "services/worker/kernels/cpu_target.h"

#if defined(__x86_64__)
#include <cstring>

namespace folio::worker::kernels::dequant_internal {
namespace {

FOLIO_T_AVX512BF16 inline float F16At(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// Values [0, 16) from lo and [16, 32) from hi, as 32 bf16 at out.
FOLIO_T_AVX512BF16 inline void Store32(uint16_t* out, __m512 lo, __m512 hi) {
  _mm512_storeu_si512(out, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
}

// q8_0 (34 B): f16 d, 32 int8; value = q * d.
FOLIO_T_AVX512BF16 void Q8_0Row(const uint8_t* src, int64_t blocks, uint16_t* out) {
  for (int64_t b = 0; b < blocks; ++b, src += 34, out += 32) {
    const __m512 d = _mm512_set1_ps(F16At(src));
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 2));
    const __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(q)));
    const __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(q, 1)));
    Store32(out, _mm512_mul_ps(lo, d), _mm512_mul_ps(hi, d));
  }
}

// A 4-bit value's 16 possible bf16 results, table[q] = bf16(scale * float(q) - min) (or
// scale * (q - 8): `iota` holds the values q maps to), for vpermw: the products are the
// reference dequantizer's f32 operations, so each lookup is bit-equal to computing it.
FOLIO_T_AVX512BF16 inline __m512i Table16(__m512 iota, __m512 scale, __m512 min) {
  const __m256bh t = _mm512_cvtneps_pbh(_mm512_sub_ps(_mm512_mul_ps(scale, iota), min));
  return _mm512_castsi256_si512(reinterpret_cast<__m256i>(t));
}

// 32 bytes at p split into two sets of 32 word indices: low nibbles, high nibbles.
FOLIO_T_AVX512BF16 inline void Nibbles32(const uint8_t* p, __m512i* lo, __m512i* hi) {
  const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  const __m256i mask = _mm256_set1_epi8(0x0F);
  *lo = _mm512_cvtepu8_epi16(_mm256_and_si256(q, mask));
  *hi = _mm512_cvtepu8_epi16(_mm256_and_si256(_mm256_srli_epi16(q, 4), mask));
}

FOLIO_T_AVX512BF16 inline __m512 Iota16(float offset) {
  return _mm512_add_ps(_mm512_set_ps(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                       _mm512_set1_ps(offset));
}

// q4_0 (18 B): f16 d, 16 bytes; value j = d * (nibble j - 8), low nibbles first: one
// vpermw per block on its table of d * (q - 8).
FOLIO_T_AVX512BF16 void Q4_0Row(const uint8_t* src, int64_t blocks, uint16_t* out) {
  const __m512 iota = Iota16(-8.0f), zero = _mm512_setzero_ps();
  const __m128i mask = _mm_set1_epi8(0x0F);
  for (int64_t b = 0; b < blocks; ++b, src += 18, out += 32) {
    const __m512i table = Table16(iota, _mm512_set1_ps(F16At(src)), zero);
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2));
    const __m256i nibbles = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_and_si128(q, mask)), _mm_and_si128(_mm_srli_epi16(q, 4), mask),
        1);
    _mm512_storeu_si512(out, _mm512_permutexvar_epi16(_mm512_cvtepu8_epi16(nibbles), table));
  }
}

// typed::ScalesMinsK4 in one vector: the 12 bytes at s (and 4 more that are read and
// not used) as 32-bit words u0, u1, u2 give sc[0..4) = u0 & 0x3f.., sc[4..8) = (u2 &
// 0x0f..) | ((u0 >> 2) & 0x30..), m[0..4) = u1 & 0x3f.., m[4..8) = ((u2 >> 4) & 0x0f..) |
// ((u1 >> 2) & 0x30..) (per byte: the top two bits of the first word's byte are bits 4
// and 5). Returns sc[0..8), m[0..8) as 16 32-bit lanes.
FOLIO_T_AVX512BF16 inline __m512i ScalesMinsK4(const uint8_t* s) {
  const __m128i u = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
  const __m128i a = _mm_srlv_epi32(_mm_shuffle_epi32(u, _MM_SHUFFLE(2, 1, 2, 0)),
                                   _mm_set_epi32(4, 0, 0, 0));  // u0, u2, u1, u2 >> 4
  const __m128i b = _mm_srli_epi32(_mm_shuffle_epi32(u, _MM_SHUFFLE(1, 1, 0, 0)), 2);
  const __m128i low = _mm_set_epi32(0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f);
  const __m128i high = _mm_set_epi32(0x30303030, 0, 0x30303030, 0);
  return _mm512_cvtepu8_epi32(_mm_or_si128(_mm_and_si128(a, low), _mm_and_si128(b, high)));
}

// q4_K (144 B): d, dmin, scales[12], qs[128]; group g = 2 * chunk + nibble of qs[chunk
// * 32 + l]; value = (d * sc) * q - dmin * m: the 8 groups' d * sc and dmin * m in one
// vector, then a table of 16 per group (Table16) and one vpermw per 32 values.
FOLIO_T_AVX512BF16 void Q4_KRow(const uint8_t* src, int64_t blocks, uint16_t* out) {
  const __m512 iota = Iota16(0.0f);
  for (int64_t b = 0; b < blocks; ++b, src += 144, out += 256) {
    const __m512 dd = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(F16At(src)),
                                           _mm512_set1_ps(F16At(src + 2)));
    const __m512 scaled = _mm512_mul_ps(dd, _mm512_cvtepi32_ps(ScalesMinsK4(src + 4)));
    const uint8_t* qs = src + 16;
    for (int c = 0; c < 4; ++c) {
      __m512i lo, hi;
      Nibbles32(qs + c * 32, &lo, &hi);
      for (int nib = 0; nib < 2; ++nib) {
        const int g = 2 * c + nib;
        const __m512i table =
            Table16(iota, _mm512_permutexvar_ps(_mm512_set1_epi32(g), scaled),
                    _mm512_permutexvar_ps(_mm512_set1_epi32(8 + g), scaled));
        _mm512_storeu_si512(out + g * 32, _mm512_permutexvar_epi16(nib == 0 ? lo : hi, table));
      }
    }
  }
}

// q6_K (210 B): ql[128], qh[64], int8 scales[16], f16 d. Value v = half * 128 + s * 32 +
// l: low 4 bits from ql[half * 64 + (s % 2) * 32 + l] (nibble s / 2), high 2 bits from
// qh[half * 32 + l] >> 2s; value = (d * scales[v / 16]) * (q - 32). The 6-bit values are
// assembled 64 bytes at a time (s 0 and 1, then s 2 and 3), then widened 16 at a time.
FOLIO_T_AVX512BF16 void Q6_KRow(const uint8_t* src, int64_t blocks, uint16_t* out) {
  const __m512i m4 = _mm512_set1_epi8(0x0F), m2 = _mm512_set1_epi8(3), k32 = _mm512_set1_epi8(32);
  // qh's shift per 256-bit half: s 0 and 1, then s 2 and 3 (16-bit lanes; the masks drop
  // what crosses bytes).
  const __m512i shift01 = _mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(2), 1);
  const __m512i shift23 = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(6), 1);
  for (int64_t b = 0; b < blocks; ++b, src += 210, out += 256) {
    const uint8_t* ql = src;
    const uint8_t* qh = src + 128;
    const __m512 scales = _mm512_mul_ps(
        _mm512_set1_ps(F16At(src + 208)),
        _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 192)))));
    for (int half = 0; half < 2; ++half) {
      const __m512i low = _mm512_loadu_si512(ql + half * 64);
      const __m512i high = _mm512_broadcast_i64x4(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh + half * 32)));
      __m512i q[2];  // values half * 128 + [0, 64) and [64, 128), minus 32, as int8
      const __m512i high01 = _mm512_and_si512(_mm512_srlv_epi16(high, shift01), m2);
      const __m512i high23 = _mm512_and_si512(_mm512_srlv_epi16(high, shift23), m2);
      q[0] = _mm512_sub_epi8(
          _mm512_or_si512(_mm512_and_si512(low, m4), _mm512_slli_epi16(high01, 4)), k32);
      q[1] = _mm512_sub_epi8(
          _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(low, 4), m4),
                          _mm512_slli_epi16(high23, 4)),
          k32);
      for (int i = 0; i < 8; i += 2) {  // 32 values: groups of 16 i and i + 1
        __m512 v[2];
        for (int j = 0; j < 2; ++j) {
          const int g = i + j;
          const __m128i bytes = g % 4 == 0   ? _mm512_extracti32x4_epi32(q[g / 4], 0)
                                : g % 4 == 1 ? _mm512_extracti32x4_epi32(q[g / 4], 1)
                                : g % 4 == 2 ? _mm512_extracti32x4_epi32(q[g / 4], 2)
                                             : _mm512_extracti32x4_epi32(q[g / 4], 3);
          const __m512 dg = _mm512_permutexvar_ps(_mm512_set1_epi32(half * 8 + g), scales);
          v[j] = _mm512_mul_ps(dg, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(bytes)));
        }
        Store32(out + half * 128 + i * 16, v[0], v[1]);
      }
    }
  }
}

}  // namespace

RowToBf16Fn Avx512Bf16RowKernel(StoredKind kind) {
  switch (kind) {
    case StoredKind::kQ8_0:
      return Q8_0Row;
    case StoredKind::kQ4_0:
      return Q4_0Row;
    case StoredKind::kQ4_K:
      return Q4_KRow;
    case StoredKind::kQ6_K:
      return Q6_KRow;
    default:
      return nullptr;
  }
}

}  // namespace folio::worker::kernels::dequant_internal

#else  // !__x86_64__

namespace folio::worker::kernels::dequant_internal {
RowToBf16Fn Avx512Bf16RowKernel(StoredKind) { return nullptr; }
}  // namespace folio::worker::kernels::dequant_internal

#endif
