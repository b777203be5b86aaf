// GemmQ4K, GemmQ6K and GemmQ4_0 (kquant_gemm.h) on AVX-512 VNNI. Compiled with
// -ffp-contract=off: the f32 scaling must be the portable kernels' multiplies and adds,
// not fused ones.
//
// A q4_K super-block of one weight row: f16 d, f16 dmin, 12 bytes of six-bit scales and
// mins (8 groups of 32 values), 128 bytes of nibbles: bytes 32p .. 32p + 31 hold group 2p
// in their low nibbles and group 2p + 1 in their high ones. Read as 32 dwords, dword q of
// 16 rows is one 16 x 32 transpose away from vpdpbusd's layout; its low nibbles are then
// the values 64p + 4(q % 8) .. + 3 (p = q / 8) of each row, its high ones 32 further on:
// the weight vector of activation dword t (values 4t .. 4t + 3) for t = 0 .. 63.
// A q6_K super-block: 128 bytes ql (low 4 bits), 64 bytes qh (high 2 bits), 16 int8
// scales (groups of 16), f16 d; value = d * sc_g * (q - 32). Half h (values 128h ..) takes
// ql bytes 64h .. 64h + 63 and qh bytes 32h .. 32h + 31: with l < 32, values 128h + l,
// + 32, + 64, + 96 are ql[64h + l] & 15, ql[64h + 32 + l] & 15, ql[64h + l] >> 4,
// ql[64h + 32 + l] >> 4, each with qh[32h + l]'s bits 0-1, 2-3, 4-5, 6-7 above them. The
// integer sum is sum_g sc_g (sum_i q_i x_i - 32 bsum_g), exactly the portable kernel's.
// A q4_0 block: f16 d, 16 bytes of nibbles (values 0 .. 15 low, 16 .. 31 high); value =
// d * (q - 8). Eight consecutive blocks (144 bytes) are taken as one super-block of 256
// values; block k's 16 bytes, as 4 dwords u, hold values 4u .. 4u + 3 in their low
// nibbles and 16 + 4u .. in their high ones, so one 16 x 16 transpose of 4 blocks of 16
// rows gives vpdpbusd's layout, and each block's integer sum is scaled into the f32 sum
// on its own (the portable kernel's sum_b (d_w * d_x) * isum_b).
#include "services/worker/kernels/kquant_gemm.h"

#include "glog/logging.h"
#include "services/worker/kernels/avx512_math.h"
#include "services/worker/kernels/cpu_target.h"

#if defined(__x86_64__)

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

namespace folio::worker::kernels::typed {
namespace {

using avx512::Transpose16;

constexpr int kLanes = 16;     // weight rows a tile
constexpr int kMaxRows = 8;    // activation rows a register tile
constexpr int kTilesPerPass = 4;
constexpr int kQ4KBytes = 144;
constexpr int kQ6KBytes = 210;
constexpr int kQ4_0Bytes = 18;  // per block of 32 values; 8 blocks a super-block

// One super-block of a 16-row q4_K tile, unpacked. 78 vectors (4992 bytes).
struct alignas(64) Q4KBlock {
  __m512i q[64];     // q[t] lane j: row j's values 4t .. 4t + 3 (0 .. 15 each)
  __m512i sc[8];     // sc[g] lane j: row j's scale of group g (int32)
  __m512i mins[4];   // mins[p] lane j: row j's mins of groups 2p, 2p + 1 (int16 pair)
  __m512 d, dmin;    // lane j: row j's d and dmin
};

// One super-block of a 16-row q6_K tile, unpacked. 89 vectors (5696 bytes).
struct alignas(64) Q6KBlock {
  __m512i q[64];     // q[t] lane j: row j's values 4t .. 4t + 3 (0 .. 63 each)
  __m512i sc[16];    // sc[g] lane j: row j's scale of group g (int32)
  __m512i off[8];    // off[p] lane j: 32 x row j's scales of groups 2p, 2p + 1 (int16 pair)
  __m512 d;          // lane j: row j's d
};

// Eight q4_0 blocks (256 values) of a 16-row tile, unpacked. 72 vectors (4608 bytes).
struct alignas(64) Q4_0Block {
  __m512i q[64];  // q[8k + t] lane j: row j's values 4t .. 4t + 3 of block k (0 .. 15 each)
  __m512 d[8];    // d[k] lane j: row j's d of block k
};

// Read in place of the rows past the matrix's end in a tile.
const uint8_t kZeroBlock[256] = {};

// j * stride for lanes j = 0 .. 15: the rows' offsets for the gathers.
FOLIO_T_AVX512 FOLIO_INLINE __m512i RowOffsets(int64_t stride) {
  return _mm512_mullo_epi32(
      _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
      _mm512_set1_epi32(static_cast<int32_t>(stride)));
}

// Unpacks rows [0, rows) (rows <= 16; the others read as zero blocks) of `blocks`
// super-blocks each into tiles[0 .. blocks).
FOLIO_T_AVX512 void UnpackQ4K(const uint8_t* w, int64_t stride, int rows, int64_t blocks,
                              Q4KBlock* tiles) {
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  const __m512i six = _mm512_set1_epi32(0x3F), four = _mm512_set1_epi32(0x0F),
                top2 = _mm512_set1_epi32(0x30), zero = _mm512_setzero_si512();
  const __mmask16 valid = static_cast<__mmask16>((1u << rows) - 1);
  const __m512i offsets = RowOffsets(stride);
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* blk[kLanes];
    for (int j = 0; j < kLanes; ++j) {
      blk[j] = j < rows ? w + j * stride + b * kQ4KBytes : kZeroBlock;
    }
    Q4KBlock& t = tiles[b];
    for (int half = 0; half < 2; ++half) {
      __m512i r[16];
#pragma GCC unroll 16
      for (int j = 0; j < kLanes; ++j) r[j] = _mm512_loadu_si512(blk[j] + 16 + 64 * half);
      Transpose16(r);
#pragma GCC unroll 16
      for (int c = 0; c < 16; ++c) {
        const int q = 16 * half + c, p = q / 8;
        t.q[16 * p + q % 8] = _mm512_and_si512(r[c], low4);
        t.q[16 * p + 8 + q % 8] = _mm512_and_si512(_mm512_srli_epi16(r[c], 4), low4);
      }
    }
    // d, dmin and the 12 bytes of scales and mins as dwords u0, u1, u2, one row a lane
    // (rows past `rows` read as zeros). For g < 4: sc_g = u0 >> 8g & 0x3f, m_g = u1 >> 8g &
    // 0x3f; sc_g+4 = (u2 >> 8g & 0x0f) | (u0 >> 8g + 2 & 0x30), m_g+4 the same with
    // u2 >> 4 and u1.
    const uint8_t* at = w + b * kQ4KBytes;
    const __m512i dd = _mm512_mask_i32gather_epi32(zero, valid, offsets, at, 1);
    const __m512i u0 = _mm512_mask_i32gather_epi32(zero, valid, offsets, at + 4, 1);
    const __m512i u1 = _mm512_mask_i32gather_epi32(zero, valid, offsets, at + 8, 1);
    const __m512i u2 = _mm512_mask_i32gather_epi32(zero, valid, offsets, at + 12, 1);
    __m512i m[8];
#pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) {
      const __m512i lo0 = _mm512_srli_epi32(u0, 8 * g), lo1 = _mm512_srli_epi32(u1, 8 * g);
      const __m512i hi = _mm512_srli_epi32(u2, 8 * g);
      t.sc[g] = _mm512_and_si512(lo0, six);
      m[g] = _mm512_and_si512(lo1, six);
      t.sc[g + 4] = _mm512_or_si512(_mm512_and_si512(hi, four),
                                    _mm512_and_si512(_mm512_srli_epi32(lo0, 2), top2));
      m[g + 4] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(hi, 4), four),
                                 _mm512_and_si512(_mm512_srli_epi32(lo1, 2), top2));
    }
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) {
      t.mins[p] = _mm512_or_si512(m[2 * p], _mm512_slli_epi32(m[2 * p + 1], 16));
    }
    t.d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dd));
    t.dmin = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dd, 16)));
  }
}

FOLIO_T_AVX512 void UnpackQ6K(const uint8_t* w, int64_t stride, int rows, int64_t blocks,
                              Q6KBlock* tiles) {
  const __m512i low4 = _mm512_set1_epi8(0x0F), bits45 = _mm512_set1_epi8(0x30),
                zero = _mm512_setzero_si512();
  const __mmask16 valid = static_cast<__mmask16>((1u << rows) - 1);
  const __m512i offsets = RowOffsets(stride);
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* blk[kLanes];
    for (int j = 0; j < kLanes; ++j) {
      blk[j] = j < rows ? w + j * stride + b * kQ6KBytes : kZeroBlock;
    }
    Q6KBlock& t = tiles[b];
    // ql as 32 dwords (two transposes), qh as 16.
    __m512i ql[32], qh[16];
#pragma GCC unroll 16
    for (int j = 0; j < kLanes; ++j) ql[j] = _mm512_loadu_si512(blk[j]);
#pragma GCC unroll 16
    for (int j = 0; j < kLanes; ++j) ql[16 + j] = _mm512_loadu_si512(blk[j] + 64);
#pragma GCC unroll 16
    for (int j = 0; j < kLanes; ++j) qh[j] = _mm512_loadu_si512(blk[j] + 128);
    Transpose16(&ql[0]);
    Transpose16(&ql[16]);
    Transpose16(qh);
#pragma GCC unroll 8
    for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        const __m512i a = ql[16 * h + k], c = ql[16 * h + 8 + k], hb = qh[8 * h + k];
        const int t0 = 32 * h + k;  // value dword of quarter 0
        t.q[t0] = _mm512_or_si512(_mm512_and_si512(a, low4),
                                  _mm512_and_si512(_mm512_slli_epi16(hb, 4), bits45));
        t.q[t0 + 8] = _mm512_or_si512(_mm512_and_si512(c, low4),
                                      _mm512_and_si512(_mm512_slli_epi16(hb, 2), bits45));
        t.q[t0 + 16] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(a, 4), low4),
                                       _mm512_and_si512(hb, bits45));
        t.q[t0 + 24] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(c, 4), low4),
                                       _mm512_and_si512(_mm512_srli_epi16(hb, 2), bits45));
      }
    }
    // The 16 int8 scales as 4 dwords, one row a lane, sign-extended byte by byte; d is
    // the upper half of the dword at 206 (the block's last 4 bytes).
    const uint8_t* at = w + b * kQ6KBytes;
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      const __m512i u = _mm512_mask_i32gather_epi32(zero, valid, offsets, at + 192 + 4 * k, 1);
#pragma GCC unroll 4
      for (int byte = 0; byte < 4; ++byte) {
        t.sc[4 * k + byte] = _mm512_srai_epi32(_mm512_slli_epi32(u, 24 - 8 * byte), 24);
      }
    }
#pragma GCC unroll 8
    for (int p = 0; p < 8; ++p) {
      t.off[p] = _mm512_or_si512(
          _mm512_and_si512(_mm512_slli_epi32(t.sc[2 * p], 5), _mm512_set1_epi32(0xFFFF)),
          _mm512_slli_epi32(t.sc[2 * p + 1], 21));
    }
    const __m512i dd = _mm512_mask_i32gather_epi32(zero, valid, offsets, at + 206, 1);
    t.d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dd, 16)));
  }
}

FOLIO_T_AVX512 void UnpackQ4_0(const uint8_t* w, int64_t stride, int rows, int64_t blocks,
                               Q4_0Block* tiles) {
  const __m512i low4 = _mm512_set1_epi8(0x0F), zero = _mm512_setzero_si512();
  const __mmask16 valid = static_cast<__mmask16>((1u << rows) - 1);
  const __m512i offsets = RowOffsets(stride);
  constexpr int64_t kSuperBytes = 8 * kQ4_0Bytes;
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* blk[kLanes];
    for (int j = 0; j < kLanes; ++j) {
      blk[j] = j < rows ? w + j * stride + b * kSuperBytes : kZeroBlock;
    }
    Q4_0Block& t = tiles[b];
    for (int half = 0; half < 2; ++half) {  // blocks 4 half .. 4 half + 3
      __m512i r[16];
#pragma GCC unroll 16
      for (int j = 0; j < kLanes; ++j) {
        const uint8_t* q = blk[j] + 4 * half * kQ4_0Bytes + 2;
        const auto at = [q](int k) {
          return _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + k * kQ4_0Bytes));
        };
        __m512i v = _mm512_castsi128_si512(at(0));
        v = _mm512_inserti32x4(v, at(1), 1);
        v = _mm512_inserti32x4(v, at(2), 2);
        r[j] = _mm512_inserti32x4(v, at(3), 3);
      }
      Transpose16(r);  // r[m] lane j: row j's dword m % 4 of block 4 half + m / 4
#pragma GCC unroll 16
      for (int m = 0; m < 16; ++m) {
        const int k = 4 * half + m / 4, u = m % 4;
        t.q[8 * k + u] = _mm512_and_si512(r[m], low4);
        t.q[8 * k + 4 + u] = _mm512_and_si512(_mm512_srli_epi16(r[m], 4), low4);
      }
    }
    const uint8_t* at = w + b * kSuperBytes;
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      const __m512i dd = _mm512_mask_i32gather_epi32(zero, valid, offsets, at + k * kQ4_0Bytes, 1);
      t.d[k] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dd));
    }
  }
}

// The three formats for the kernels below: the unpacked block, the groups of a super-block
// (each kSteps = 64 / kGroups activation dwords long, weighted by sc[g]), and how a row's
// integer sum becomes its f32 contribution (Finish: the portable kernel's arithmetic).
struct Q4K {
  using Block = Q4KBlock;
  static constexpr int kGroups = 8;
  static void Unpack(const uint8_t* w, int64_t stride, int rows, int64_t blocks, Block* t) {
    UnpackQ4K(w, stride, rows, blocks, t);
  }
  // d dx sumi - dmin dx sum_g m_g bsum_g, the mins through the q8_K sums of 16 values
  // (two a group).
  FOLIO_T_AVX512VNNI static FOLIO_INLINE __m512 Finish(const Block& t, const int16_t* bsums,
                                                       __m512 dx, __m512i sumi, __m512 out) {
    __m512i summ = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) {
      const uint32_t lo = static_cast<uint16_t>(bsums[4 * p] + bsums[4 * p + 1]);
      const uint32_t hi = static_cast<uint16_t>(bsums[4 * p + 2] + bsums[4 * p + 3]);
      summ = _mm512_dpwssd_epi32(summ, _mm512_load_si512(&t.mins[p]),
                                 _mm512_set1_epi32(static_cast<int32_t>(lo | hi << 16)));
    }
    const __m512 pos = _mm512_mul_ps(_mm512_mul_ps(t.d, dx), _mm512_cvtepi32_ps(sumi));
    const __m512 neg = _mm512_mul_ps(_mm512_mul_ps(t.dmin, dx), _mm512_cvtepi32_ps(summ));
    return _mm512_add_ps(out, _mm512_sub_ps(pos, neg));
  }
};
struct Q6K {
  using Block = Q6KBlock;
  static constexpr int kGroups = 16;
  static void Unpack(const uint8_t* w, int64_t stride, int rows, int64_t blocks, Block* t) {
    UnpackQ6K(w, stride, rows, blocks, t);
  }
  // d dx (sumi - 32 sum_g sc_g bsum_g).
  FOLIO_T_AVX512VNNI static FOLIO_INLINE __m512 Finish(const Block& t, const int16_t* bsums,
                                                       __m512 dx, __m512i sumi, __m512 out) {
    __m512i offset = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int p = 0; p < 8; ++p) {
      int32_t pair;
      std::memcpy(&pair, bsums + 2 * p, 4);
      offset = _mm512_dpwssd_epi32(offset, _mm512_load_si512(&t.off[p]), _mm512_set1_epi32(pair));
    }
    const __m512 sum = _mm512_cvtepi32_ps(_mm512_sub_epi32(sumi, offset));
    return _mm512_add_ps(out, _mm512_mul_ps(_mm512_mul_ps(t.d, dx), sum));
  }
};

struct Q4_0 {
  using Block = Q4_0Block;
  static void Unpack(const uint8_t* w, int64_t stride, int rows, int64_t blocks, Block* t) {
    UnpackQ4_0(w, stride, rows, blocks, t);
  }
};

// Rows for q4_0 against q8_0 activations: each block's integer sum (vpdpbusd of the
// nibbles, less 8 x the block's quant sum) scaled by d_w * d_x into the f32 sum.
template <int R>
FOLIO_T_AVX512VNNI void RowsQ4_0(const Q4_0Block* tiles, int64_t blocks, const Activations& x,
                                 int64_t r0, __m512 (&out)[R]) {
  const int64_t nb = x.in / 32;
  const int8_t* a[R];
  const float* xd[R];
  const int32_t* xs[R];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) {
    a[i] = x.q8 + (r0 + i) * x.in;
    xd[i] = x.q8_d + (r0 + i) * nb;
    xs[i] = x.q8_isum + (r0 + i) * nb;
    out[i] = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < blocks; ++b) {
    const Q4_0Block& t = tiles[b];
    for (int k = 0; k < 8; ++k) {
      __m512i dot[R];
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) dot[i] = _mm512_set1_epi32(-8 * xs[i][8 * b + k]);
#pragma GCC unroll 8
      for (int u = 0; u < 8; ++u) {
        const __m512i wv = _mm512_load_si512(&t.q[8 * k + u]);
#pragma GCC unroll 8
        for (int i = 0; i < R; ++i) {
          int32_t av;
          std::memcpy(&av, a[i] + b * 256 + 32 * k + 4 * u, 4);
          dot[i] = _mm512_dpbusd_epi32(dot[i], wv, _mm512_set1_epi32(av));
        }
      }
      const __m512 dw = _mm512_load_ps(&t.d[k]);
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        const __m512 scale = _mm512_mul_ps(dw, _mm512_set1_ps(xd[i][8 * b + k]));
        out[i] = _mm512_add_ps(out[i], _mm512_mul_ps(scale, _mm512_cvtepi32_ps(dot[i])));
      }
    }
  }
}

// out[i] lane j = dot(weight row j of the tile, activation row r0 + i), i < R: per group
// R chains of vpdpbusd, each scaled by the group's scale into its row's integer sum.
template <typename F, int R>
FOLIO_T_AVX512VNNI void Rows(const typename F::Block* tiles, int64_t blocks,
                             const Activations& x, int64_t r0, __m512 (&out)[R]) {
  constexpr int kSteps = 64 / F::kGroups;
  const int8_t* a[R];
  const int16_t* bs[R];
  const float* xd[R];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) {
    a[i] = x.k8 + (r0 + i) * x.in;
    bs[i] = x.k8_bsums + (r0 + i) * (x.in / 16);
    xd[i] = x.k8_d + (r0 + i) * blocks;
    out[i] = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < blocks; ++b) {
    const typename F::Block& t = tiles[b];
    __m512i sumi[R];
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) sumi[i] = _mm512_setzero_si512();
    for (int g = 0; g < F::kGroups; ++g) {
      __m512i dot[R];
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) dot[i] = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int k = 0; k < kSteps; ++k) {
        const int tq = kSteps * g + k;
        const __m512i wv = _mm512_load_si512(&t.q[tq]);
#pragma GCC unroll 8
        for (int i = 0; i < R; ++i) {
          int32_t av;
          std::memcpy(&av, a[i] + b * 256 + 4 * tq, 4);
          dot[i] = _mm512_dpbusd_epi32(dot[i], wv, _mm512_set1_epi32(av));
        }
      }
      const __m512i scale = _mm512_load_si512(&t.sc[g]);
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        sumi[i] = _mm512_add_epi32(sumi[i], _mm512_mullo_epi32(dot[i], scale));
      }
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      out[i] = F::Finish(t, bs[i] + b * 16, _mm512_set1_ps(xd[i][b]), sumi[i], out[i]);
    }
  }
}

template <typename F, int R>
FOLIO_T_AVX512VNNI void TileStore(const typename F::Block* tiles, int64_t blocks,
                                  const Activations& x, int64_t r0, __mmask16 lanes, float beta,
                                  float* y, int64_t ldy) {
  __m512 out[R];
  if constexpr (std::is_same_v<F, Q4_0>) {
    RowsQ4_0<R>(tiles, blocks, x, r0, out);
  } else {
    Rows<F, R>(tiles, blocks, x, r0, out);
  }
  const __m512 vbeta = _mm512_set1_ps(beta);
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) {
    float* yr = y + (r0 + i) * ldy;
    __m512 v = out[i];
    if (beta != 0.0f) {
      v = _mm512_add_ps(v, _mm512_mul_ps(vbeta, _mm512_maskz_loadu_ps(lanes, yr)));
    }
    _mm512_mask_storeu_ps(yr, lanes, v);
  }
}

// kTilesPerPass tiles (64 weight rows) are unpacked, then each group of 8 activation rows
// meets all of them while it is in L1: at a prefill's 512 rows the activations (512 x in
// bytes) are read from the outer caches once per 64 weight rows, not per 16.
template <typename F>
void Gemm(const uint8_t* w, int64_t stride, int64_t n, const Activations& x, int64_t rows,
          float beta, float* y, int64_t ldy) {
  using TileStoreFn = void (*)(const typename F::Block*, int64_t, const Activations&, int64_t,
                               __mmask16, float, float*, int64_t);
  static constexpr TileStoreFn kTileStore[kMaxRows] = {
      TileStore<F, 1>, TileStore<F, 2>, TileStore<F, 3>, TileStore<F, 4>,
      TileStore<F, 5>, TileStore<F, 6>, TileStore<F, 7>, TileStore<F, 8>};
  CHECK_EQ(x.in % 256, 0);
  CHECK_LE(stride, INT32_MAX / kLanes);  // the unpackers gather at 32-bit row offsets
  const int64_t blocks = x.in / 256;
  thread_local std::vector<typename F::Block> tiles;
  if (static_cast<int64_t>(tiles.size()) < kTilesPerPass * blocks) {
    tiles.resize(kTilesPerPass * blocks);
  }
  for (int64_t p0 = 0; p0 < n; p0 += kTilesPerPass * kLanes) {
    const int64_t pass = std::min<int64_t>(kTilesPerPass * kLanes, n - p0);
    const int64_t num_tiles = (pass + kLanes - 1) / kLanes;
    for (int64_t t = 0; t < num_tiles; ++t) {
      const int nr = static_cast<int>(std::min<int64_t>(kLanes, pass - t * kLanes));
      F::Unpack(w + (p0 + t * kLanes) * stride, stride, nr, blocks, &tiles[t * blocks]);
    }
    for (int64_t r0 = 0; r0 < rows; r0 += kMaxRows) {
      const int64_t nrows = std::min<int64_t>(kMaxRows, rows - r0);
      for (int64_t t = 0; t < num_tiles; ++t) {
        const int64_t j0 = p0 + t * kLanes;
        const int nr = static_cast<int>(std::min<int64_t>(kLanes, n - j0));
        const __mmask16 lanes = static_cast<__mmask16>((1u << nr) - 1);
        kTileStore[nrows - 1](&tiles[t * blocks], blocks, x, r0, lanes, beta, y + j0, ldy);
      }
    }
  }
}

}  // namespace

bool HasKQuantGemm(const CpuFeatures& features) { return features.avx512_vnni; }

void GemmQ4K(const uint8_t* w, int64_t stride, int64_t n, const Activations& x, int64_t rows,
             float beta, float* y, int64_t ldy) {
  Gemm<Q4K>(w, stride, n, x, rows, beta, y, ldy);
}

void GemmQ6K(const uint8_t* w, int64_t stride, int64_t n, const Activations& x, int64_t rows,
             float beta, float* y, int64_t ldy) {
  Gemm<Q6K>(w, stride, n, x, rows, beta, y, ldy);
}

void GemmQ4_0(const uint8_t* w, int64_t stride, int64_t n, const Activations& x, int64_t rows,
              float beta, float* y, int64_t ldy) {
  Gemm<Q4_0>(w, stride, n, x, rows, beta, y, ldy);
}

KQuantGemmFn KQuantGemmFor(StoredKind kind) {
  switch (kind) {
    case StoredKind::kQ4_K:
      return GemmQ4K;
    case StoredKind::kQ6_K:
      return GemmQ6K;
    case StoredKind::kQ4_0:
      return GemmQ4_0;
    default:
      return nullptr;
  }
}

}  // namespace folio::worker::kernels::typed

#else  // !defined(__x86_64__)

namespace folio::worker::kernels::typed {

bool HasKQuantGemm(const CpuFeatures&) { return false; }

void GemmQ4K(const uint8_t*, int64_t, int64_t, const Activations&, int64_t, float, float*,
             int64_t) {
  LOG(FATAL) << "GemmQ4K needs AVX-512 VNNI";
}

void GemmQ6K(const uint8_t*, int64_t, int64_t, const Activations&, int64_t, float, float*,
             int64_t) {
  LOG(FATAL) << "GemmQ6K needs AVX-512 VNNI";
}

void GemmQ4_0(const uint8_t*, int64_t, int64_t, const Activations&, int64_t, float, float*,
              int64_t) {
  LOG(FATAL) << "GemmQ4_0 needs AVX-512 VNNI";
}

KQuantGemmFn KQuantGemmFor(StoredKind) { return nullptr; }

}  // namespace folio::worker::kernels::typed

#endif
