// The AVX-512 (F/BW/VL) primitives of the tiled prefill kernel (paged_attention_tile_body.h;
// the algorithm is described in paged_attention_prefill_cpu.cc). Same shape as the AVX2
// primitives, in 16 lanes and with the 32 vector registers AVX-512 has:
//
//   - Scores: each 32-key piece of K is transposed once per tile (16 x 16 register
//     transposes, f16 widened on load) into kbuf[d][32]; then register tiles of 12 query
//     rows x 32 keys (24 accumulators): per head dimension two key loads, twelve
//     broadcasts and 24 FMAs, no horizontal sums.
//   - Softmax: the 32 scores of a row in two registers, hidden keys masked (-inf for the
//     max, 0 after the exponential, vscalefps for 2^n).
//   - Values: register tiles of 12 query rows x 32 lanes (16 for a head-dim remainder),
//     keys innermost: each FMA a broadcast weight times 16 lanes of a value row.
//
// Needs head_dim % 16 == 0 (PickAttendTileAvx512Fn returns nullptr otherwise). Thread-
// safety: as TileBody (per-thread scratch; writes only its tile's rows).
#include <algorithm>
#include <cstdint>
#include <limits>

#include "services/worker/kernels/avx512_math.h"
#include "services/worker/kernels/kv_q8.h"
#include "services/worker/kernels/paged_attention_internal.h"
#include "services/worker/kernels/paged_attention_tile_body.h"
#include "services/worker/kernels/cpu_target.h"

#if defined(__x86_64__)

namespace folio::worker::kernels::internal {
namespace {

using avx512::Exp16;
using avx512::Load16;
using avx512::Transpose16;

static_assert(kKeyTile == 32, "the AVX-512 tile primitives hold a piece in two registers");

constexpr int kRows = 12;  // query rows per register tile

// Scores of rows [r0, r0 + kRows) (short tiles repeat their last row) against J x 16 keys
// of the transposed piece.
template <int J>
FOLIO_T_AVX512 __attribute__((always_inline)) inline void ScoreTile(
    const float* const* q, int r0, int R, const float* kbuf, int hd, __m512 vscale, float* s) {
  const float* qr[kRows];
#pragma GCC unroll 12
  for (int i = 0; i < kRows; ++i) qr[i] = q[std::min(r0 + i, R - 1)];
  __m512 a[kRows][J];
#pragma GCC unroll 12
  for (int i = 0; i < kRows; ++i) {
#pragma GCC unroll 2
    for (int j = 0; j < J; ++j) a[i][j] = _mm512_setzero_ps();
  }
  const float* kt = kbuf;
  for (int d = 0; d < hd; ++d, kt += kKeyTile) {
    __m512 k[J];
#pragma GCC unroll 2
    for (int j = 0; j < J; ++j) k[j] = _mm512_loadu_ps(kt + 16 * j);
#pragma GCC unroll 12
    for (int i = 0; i < kRows; ++i) {
      const __m512 b = _mm512_set1_ps(qr[i][d]);
#pragma GCC unroll 2
      for (int j = 0; j < J; ++j) a[i][j] = _mm512_fmadd_ps(b, k[j], a[i][j]);
    }
  }
  for (int i = 0; i < kRows && r0 + i < R; ++i) {
#pragma GCC unroll 2
    for (int j = 0; j < J; ++j) {
      _mm512_storeu_ps(s + (r0 + i) * kKeyTile + 16 * j, _mm512_mul_ps(a[i][j], vscale));
    }
  }
}

// acc rows [r0, r0 + kRows) (short tiles repeat their last row; only real rows are
// stored), columns [c, c + 16 C): alpha * acc + sum_j p[j] v[j].
template <int C>
FOLIO_T_AVX512 __attribute__((always_inline)) inline void AccumulateTile(
    float* const* ar, const float* const* pr, const __m512* al, int rows, int c,
    const float* const* v, int nk) {
  __m512 x[kRows][C];
#pragma GCC unroll 12
  for (int i = 0; i < kRows; ++i) {
#pragma GCC unroll 2
    for (int y = 0; y < C; ++y) x[i][y] = _mm512_mul_ps(al[i], _mm512_loadu_ps(ar[i] + c + 16 * y));
  }
  for (int j = 0; j < nk; ++j) {
    __m512 vv[C];
#pragma GCC unroll 2
    for (int y = 0; y < C; ++y) vv[y] = _mm512_loadu_ps(v[j] + c + 16 * y);
#pragma GCC unroll 12
    for (int i = 0; i < kRows; ++i) {
      const __m512 w = _mm512_set1_ps(pr[i][j]);
#pragma GCC unroll 2
      for (int y = 0; y < C; ++y) x[i][y] = _mm512_fmadd_ps(w, vv[y], x[i][y]);
    }
  }
  for (int i = 0; i < rows; ++i) {
#pragma GCC unroll 2
    for (int y = 0; y < C; ++y) _mm512_storeu_ps(ar[i] + c + 16 * y, x[i][y]);
  }
}

struct Avx512TilePrims {
  FOLIO_T_AVX512 static const float* Widen(const float* row, float*, int) { return row; }
  FOLIO_T_AVX512 static const float* Widen(const uint16_t* row, float* buf, int n) {
    for (int i = 0; i < n; i += 16) _mm512_storeu_ps(buf + i, Load16(row + i));
    return buf;
  }
  FOLIO_T_AVX512 static const float* Widen(const int8_t* row, float* buf, int n) {
    const __m512 s = _mm512_set1_ps(Q8RowScale(row, n));
    for (int i = 0; i < n; i += 16) _mm512_storeu_ps(buf + i, _mm512_mul_ps(s, Load16(row + i)));
    return buf;
  }
  // kbuf[d * kKeyTile + j] = k_j[d] (keys past nk repeat key nk - 1), then register
  // tiles of kRows rows x 16 or 32 keys.
  template <typename KvT>
  FOLIO_T_AVX512 static void Scores(const float* const* q, int R, const KvT* const* kraw,
                                         int nk, int hd, float scale, float* kbuf, float* s) {
    const int nk16 = (nk + 15) / 16 * 16;  // 16 or 32
    for (int j0 = 0; j0 < nk16; j0 += 16) {
      const KvT* rows[16];
      for (int i = 0; i < 16; ++i) rows[i] = kraw[std::min(j0 + i, nk - 1)];
      for (int d0 = 0; d0 < hd; d0 += 16) {
        __m512 t[16];
#pragma GCC unroll 16
        for (int i = 0; i < 16; ++i) t[i] = Load16(rows[i] + d0);
        Transpose16(t);
#pragma GCC unroll 16
        for (int i = 0; i < 16; ++i) _mm512_storeu_ps(kbuf + (d0 + i) * kKeyTile + j0, t[i]);
      }
    }
    const __m512 vscale = _mm512_set1_ps(scale);
    for (int r0 = 0; r0 < R; r0 += kRows) {
      if (nk16 == 32) {
        ScoreTile<2>(q, r0, R, kbuf, hd, vscale, s);
      } else {
        ScoreTile<1>(q, r0, R, kbuf, hd, vscale, s);
      }
    }
  }
  // As Avx2TilePrims::Softcap, 16 lanes at a time (p holds kKeyTile slots).
  FOLIO_T_AVX512 static void Softcap(float* p, int n, float cap) {
    const __m512 vcap = _mm512_set1_ps(cap);
    const __m512 minus_two_over_cap = _mm512_set1_ps(-2.0f / cap);
    const __m512 one = _mm512_set1_ps(1.0f);
    for (int j = 0; j < n; j += 16) {
      const __m512 x = _mm512_loadu_ps(p + j);
      const __m512 e = avx512::Exp16(_mm512_mul_ps(_mm512_abs_ps(x), minus_two_over_cap));
      const __m512 t = _mm512_div_ps(_mm512_sub_ps(one, e), _mm512_add_ps(one, e));
      // |cap * t| with x's sign.
      const __m512i sign = _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(INT32_MIN));
      _mm512_storeu_ps(p + j, _mm512_castsi512_ps(_mm512_or_si512(
                                  _mm512_castps_si512(_mm512_mul_ps(vcap, t)), sign)));
    }
  }
  // As PortableTilePrims::Softmax over the piece's two registers: hidden keys are
  // masked to -inf for the max and to 0 after the exponential.
  FOLIO_T_AVX512 static float Softmax(float* p, int nv, int nk, float& m, float& l) {
    (void)nk;  // p has kKeyTile slots; all are written
    if (nv == 0) {
      _mm512_storeu_ps(p, _mm512_setzero_ps());
      _mm512_storeu_ps(p + 16, _mm512_setzero_ps());
      return 1.0f;
    }
    const uint32_t bits = nv >= 32 ? ~0u : (1u << nv) - 1;
    const __mmask16 m0 = static_cast<__mmask16>(bits), m1 = static_cast<__mmask16>(bits >> 16);
    const __m512 neg_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    const __m512 x0 = _mm512_mask_loadu_ps(neg_inf, m0, p);
    const __m512 x1 = _mm512_mask_loadu_ps(neg_inf, m1, p + 16);
    const float m_new = std::max(m, _mm512_reduce_max_ps(_mm512_max_ps(x0, x1)));
    float alpha = 1.0f;
    if (m_new != m) {
      alpha = m == -std::numeric_limits<float>::infinity()
                  ? 0.0f
                  : _mm512_cvtss_f32(Exp16(_mm512_set1_ps(m - m_new)));
    }
    const __m512 vm = _mm512_set1_ps(m_new);
    const __m512 e0 = _mm512_maskz_mov_ps(m0, Exp16(_mm512_sub_ps(x0, vm)));
    const __m512 e1 = _mm512_maskz_mov_ps(m1, Exp16(_mm512_sub_ps(x1, vm)));
    _mm512_storeu_ps(p, e0);
    _mm512_storeu_ps(p + 16, e1);
    l = l * alpha + _mm512_reduce_add_ps(_mm512_add_ps(e0, e1));
    m = m_new;
    return alpha;
  }
  FOLIO_T_AVX512 static void Accumulate(float* acc, int R, int hd, const float* alpha,
                                             const float* p, const float* const* v, int nk) {
    for (int r0 = 0; r0 < R; r0 += kRows) {
      const int rows = std::min(kRows, R - r0);
      const float* pr[kRows];
      float* ar[kRows];
      __m512 al[kRows];
      for (int i = 0; i < kRows; ++i) {
        const int r = r0 + std::min(i, rows - 1);  // a short tile repeats its last row
        pr[i] = p + r * kKeyTile;
        ar[i] = acc + static_cast<int64_t>(r) * hd;
        al[i] = _mm512_set1_ps(alpha[r]);
      }
      int c = 0;
      for (; c + 32 <= hd; c += 32) AccumulateTile<2>(ar, pr, al, rows, c, v, nk);
      if (c < hd) AccumulateTile<1>(ar, pr, al, rows, c, v, nk);
    }
  }
};

template <typename KvT>
FOLIO_T_AVX512 void AttendTileAvx512(const PagedAttentionArgs& args, const AttentionSeq& seq,
                                          int32_t query_begin, int32_t query_count,
                                          int32_t kv_head, const KvCacheView& kv) {
  TileBody<Avx512TilePrims, KvT>(args, seq, query_begin, query_count, kv_head, kv);
}

}  // namespace

AttendTileFn PickAttendTileAvx512Fn(KvDType dtype, int head_dim) {
  if (head_dim % 16 != 0) return nullptr;
  return dtype == KvDType::kF16  ? &AttendTileAvx512<uint16_t>
         : dtype == KvDType::kQ8 ? &AttendTileAvx512<int8_t>
                                 : &AttendTileAvx512<float>;
}

}  // namespace folio::worker::kernels::internal

#else  // !defined(__x86_64__)

namespace folio::worker::kernels::internal {
AttendTileFn PickAttendTileAvx512Fn(KvDType, int) { return nullptr; }
}  // namespace folio::worker::kernels::internal

#endif
