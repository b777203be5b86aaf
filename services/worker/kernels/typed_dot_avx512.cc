// The AVX-512 kernels of typed_dot.h: F/BW/VL for f16 and bf16 (16 lanes, masked tails),
// VNNI for q8_0 (two blocks per vpdpbusd), BF16 for bf16 (vdpbf16ps, 32 products per
// instruction). Each function carries its target attribute; the library itself stays
// baseline x86-64.
#include "services/worker/kernels/typed_dot.h"
#include "services/worker/kernels/cpu_target.h"

#if defined(__x86_64__)

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

FOLIO_T_AVX512VNNI inline __m512i LoadPair(const uint8_t* b0) {
  const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b0 + 2));
  const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b0 + kQ8BlockBytes + 2));
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}
FOLIO_T_AVX512VNNI inline __m512 PairScale(float s0, float s1) {
  return _mm512_mask_blend_ps(__mmask16(0xff00), _mm512_set1_ps(s0), _mm512_set1_ps(s1));
}

// 4 consecutive q8_0 blocks' f16 scales (34 bytes apart) as 4 f32.
FOLIO_T_AVX512VNNI inline __m128 Scales4(const uint8_t* b0) {
  uint16_t h[4];
  std::memcpy(&h[0], b0, 2);
  std::memcpy(&h[1], b0 + kQ8BlockBytes, 2);
  std::memcpy(&h[2], b0 + 2 * kQ8BlockBytes, 2);
  std::memcpy(&h[3], b0 + 3 * kQ8BlockBytes, 2);
  __m128i v = _mm_cvtsi32_si128(h[0]);
  v = _mm_insert_epi16(v, h[1], 1);
  v = _mm_insert_epi16(v, h[2], 2);
  v = _mm_insert_epi16(v, h[3], 3);
  return _mm_cvtph_ps(v);
}

// -128 x the 4-quant sums of the 64 activation quants xv (lane l: bytes 4l..4l+3).
FOLIO_T_AVX512VNNI inline __m512i Corr(__m512i xv) {
  return _mm512_sub_epi32(
      _mm512_setzero_si512(),
      _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(static_cast<char>(0x80)), xv));
}

// The q8_0 dot, R = 1..4 token rows. Per step of two blocks in one zmm, each output gets
// the 16 int32 lane sums of w times x over 4 quants (lanes 0-7 the first block's, 8-15
// the second's), widened to f32 and added times (d_w * d_x) of its block; the main loop
// takes two steps (four blocks, into acc0 and acc1) while 4 blocks remain, the rest go
// into acc0 one step (or a last single block) at a time. The lane sums are exact
// integers however they are formed; here as vpdpbusd of the weights made unsigned
// (w ^ 0x80 = w + 128) against the signed activations, starting from -128 x (the sum
// of the lane's 4 activation quants): x.q8_c when TypedLinear has it, else formed here by
// one more vpdpbusd (the tiles' Activations in typed_kernels_test). That is two vector
// operations a step fewer than |w| against x with w's sign (vpmovb2m, a masked
// subtraction, vpabsb), and the four blocks' scales are one conversion and one multiply,
// not four of each: decode at one token row is this loop over every weight (issue 20).
// Any way of forming the same integers and products gives the same bits, so the tiles
// (typed_tile_avx512.cc) still equal it.
template <int R, bool kPre>
FOLIO_T_AVX512VNNI void DotQ8_0VnniBody(const uint8_t* w, const Activations& x, int64_t r0,
                                        float* out) {
  const int64_t blocks = x.in / kQ8Block;
  const int8_t* xq[R];
  const float* xd[R];
  const int32_t* xc[R];
  __m512 acc0[R], acc1[R];
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
    xq[i] = x.q8 + (r0 + i) * x.in;
    xd[i] = x.q8_d + (r0 + i) * blocks;
    xc[i] = kPre ? x.q8_c + (r0 + i) * (x.in / 4) : nullptr;
    acc0[i] = _mm512_setzero_ps();
    acc1[i] = _mm512_setzero_ps();
  }
  const __m512i k80 = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m512i lo_pair = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m512i hi_pair = _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2);
  int64_t b = 0;
  for (; b + 4 <= blocks; b += 4) {
    const uint8_t* b0 = w + b * kQ8BlockBytes;
    const __m512i w01 = _mm512_xor_si512(LoadPair(b0), k80);
    const __m512i w23 = _mm512_xor_si512(LoadPair(b0 + 2 * kQ8BlockBytes), k80);
    const __m128 dw = Scales4(b0);
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      const int8_t* xb = xq[i] + b * kQ8Block;
      const __m512i x01 = _mm512_loadu_si512(xb), x23 = _mm512_loadu_si512(xb + 64);
      const __m512i c01 = kPre ? _mm512_loadu_si512(xc[i] + b * 8) : Corr(x01);
      const __m512i c23 = kPre ? _mm512_loadu_si512(xc[i] + b * 8 + 16) : Corr(x23);
      const __m512 sc = _mm512_castps128_ps512(_mm_mul_ps(dw, _mm_loadu_ps(xd[i] + b)));
      acc0[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(c01, w01, x01)),
                                _mm512_permutexvar_ps(lo_pair, sc), acc0[i]);
      acc1[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(c23, w23, x23)),
                                _mm512_permutexvar_ps(hi_pair, sc), acc1[i]);
    }
  }
  for (; b < blocks; b += 2) {
    // The last one or two blocks; a missing second block reads as zeros with scale 0.
    const uint8_t* b0 = w + b * kQ8BlockBytes;
    const bool two = b + 2 <= blocks;
    const __m512i wv =
        two ? LoadPair(b0)
            : _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b0 + 2)));
    const __m512i w01 = _mm512_xor_si512(wv, k80);
    const float d0 = HalfBits(b0), d1 = two ? HalfBits(b0 + kQ8BlockBytes) : 0.0f;
    const __mmask64 m = two ? ~__mmask64{0} : __mmask64{0xffffffffu};
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      const float* s = xd[i] + b;
      const __m512i xv = _mm512_maskz_loadu_epi8(m, xq[i] + b * kQ8Block);
      const __m512i c =
          kPre ? _mm512_maskz_loadu_epi32(two ? __mmask16(0xffff) : __mmask16(0x00ff), xc[i] + b * 8)
               : Corr(xv);
      acc0[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(c, w01, xv)),
                                PairScale(d0 * s[0], two ? d1 * s[1] : 0.0f), acc0[i]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) out[i] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[i], acc1[i]));
}

template <int R>
FOLIO_T_AVX512VNNI void DotQ8_0Vnni(const uint8_t* w, const Activations& x, int64_t r0,
                                    float* out) {
  if (x.q8_c != nullptr) {
    DotQ8_0VnniBody<R, true>(w, x, r0, out);
  } else {
    DotQ8_0VnniBody<R, false>(w, x, r0, out);
  }
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
    k.needs_q8_c = true;
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
