// AVX-512 BF16 kernels of dequant_bf16.h: q8_0, q4_0, q4_K and q6_K blocks unpacked in
// registers, scaled with the reference dequantizers' f32 operations in their order (this
// file is built with -ffp-contract=off, so a multiply and a subtract stay two roundings,
// as in model/formats/), and rounded to bf16 by vcvtne2ps2bf16 (nearest even, as
// typed::RoundToBf16; it reads an f32 denormal as zero, which these products of an f16
// scale and a small integer never are). Each function carries its target attribute; the
// library itself stays baseline x86-64 (cpu_target.h).
#include "services/worker/kernels/dequant_bf16.h"

#include "services/worker/kernels/cpu_target.h"
#include "services/worker/kernels/typed_dot.h"

#if defined(__x86_64__)
#include <cstring>

namespace folio::worker::kernels::dequant_internal {
namespace {

FOLIO_T_AVX512BF16 inline float F16At(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// 16 bytes at p widened to 16 unsigned 32-bit lanes.
FOLIO_T_AVX512BF16 inline __m512i Bytes16(const uint8_t* p) {
  return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
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

// q4_0 (18 B): f16 d, 16 bytes; value j = d * (nibble j - 8), low nibbles first.
FOLIO_T_AVX512BF16 void Q4_0Row(const uint8_t* src, int64_t blocks, uint16_t* out) {
  const __m512i mask = _mm512_set1_epi32(0x0F), eight = _mm512_set1_epi32(8);
  for (int64_t b = 0; b < blocks; ++b, src += 18, out += 32) {
    const __m512 d = _mm512_set1_ps(F16At(src));
    const __m512i q = Bytes16(src + 2);
    const __m512 lo = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_and_si512(q, mask), eight));
    const __m512 hi = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_srli_epi32(q, 4), eight));
    Store32(out, _mm512_mul_ps(d, lo), _mm512_mul_ps(d, hi));
  }
}

// q4_K (144 B): d, dmin, scales[12], qs[128]; group g = 2 * chunk + nibble of qs[chunk
// * 32 + l]; value = (d * sc) * q - dmin * m.
FOLIO_T_AVX512BF16 void Q4_KRow(const uint8_t* src, int64_t blocks, uint16_t* out) {
  const __m512i mask = _mm512_set1_epi32(0x0F);
  for (int64_t b = 0; b < blocks; ++b, src += 144, out += 256) {
    const float d = F16At(src), dmin = F16At(src + 2);
    int sc[8], m[8];
    typed::ScalesMinsK4(src + 4, sc, m);
    const uint8_t* qs = src + 16;
    for (int c = 0; c < 4; ++c) {
      const __m512i q0 = Bytes16(qs + c * 32), q1 = Bytes16(qs + c * 32 + 16);
      for (int nib = 0; nib < 2; ++nib) {
        const int g = 2 * c + nib;
        const __m512 dg = _mm512_set1_ps(d * static_cast<float>(sc[g]));
        const __m512 mg = _mm512_set1_ps(dmin * static_cast<float>(m[g]));
        const __m512i v0 = nib == 0 ? _mm512_and_si512(q0, mask) : _mm512_srli_epi32(q0, 4);
        const __m512i v1 = nib == 0 ? _mm512_and_si512(q1, mask) : _mm512_srli_epi32(q1, 4);
        Store32(out + (2 * c + nib) * 32,
                _mm512_sub_ps(_mm512_mul_ps(dg, _mm512_cvtepi32_ps(v0)), mg),
                _mm512_sub_ps(_mm512_mul_ps(dg, _mm512_cvtepi32_ps(v1)), mg));
      }
    }
  }
}

// q6_K (210 B): ql[128], qh[64], int8 scales[16], f16 d. Value v = half * 128 + s * 32 +
// l: low 4 bits from ql[half * 64 + (s % 2) * 32 + l] (nibble s / 2), high 2 bits from
// qh[half * 32 + l] >> 2s; value = (d * scales[v / 16]) * (q - 32).
FOLIO_T_AVX512BF16 void Q6_KRow(const uint8_t* src, int64_t blocks, uint16_t* out) {
  const __m512i m4 = _mm512_set1_epi32(0x0F), m2 = _mm512_set1_epi32(3);
  const __m512i k32 = _mm512_set1_epi32(32);
  for (int64_t b = 0; b < blocks; ++b, src += 210, out += 256) {
    const uint8_t* ql = src;
    const uint8_t* qh = src + 128;
    const auto* scales = reinterpret_cast<const int8_t*>(src + 192);
    const float d = F16At(src + 208);
    for (int half = 0; half < 2; ++half) {
      for (int s = 0; s < 4; ++s) {
        __m512 v[2];
        for (int i = 0; i < 2; ++i) {  // l in [16 i, 16 i + 16)
          const __m512i low = _mm512_and_si512(
              _mm512_srli_epi32(Bytes16(ql + half * 64 + (s % 2) * 32 + 16 * i), 4 * (s / 2)),
              m4);
          const __m512i high =
              _mm512_and_si512(_mm512_srli_epi32(Bytes16(qh + half * 32 + 16 * i), 2 * s), m2);
          const __m512i q =
              _mm512_sub_epi32(_mm512_or_si512(low, _mm512_slli_epi32(high, 4)), k32);
          const int g = (half * 128 + s * 32 + 16 * i) / 16;
          const __m512 dg = _mm512_set1_ps(d * static_cast<float>(scales[g]));
          v[i] = _mm512_mul_ps(dg, _mm512_cvtepi32_ps(q));
        }
        Store32(out + half * 128 + s * 32, v[0], v[1]);
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
