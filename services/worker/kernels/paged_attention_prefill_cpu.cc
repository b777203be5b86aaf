// Tiled prefill attention on the CPU (see paged_attention_internal.h). One call is one
// tile: R = query_count x group query rows (several query positions times the query
// heads of one kv head) against the keys 0 .. the tile's last position. The keys are
// walked through the block table in pieces of kKeyTile consecutive positions; each
// piece's K and V rows are widened to f32 once (f32 caches are read in place) and used by all R
// rows, with an online softmax:
//
//   per row r:  m_r = running max, l_r = running sum, acc_r = running weighted values
//   per piece:  s_rj = scale * q_r . k_j  for keys j <= pos_r (causal; others weigh 0)
//               m' = max(m_r, max_j s_rj);  a = exp(m_r - m')
//               p_rj = exp(s_rj - m');  l_r = a l_r + sum_j p_rj
//               acc_r = a acc_r + sum_j p_rj v_j;  m_r = m'
//   at the end: out_r = acc_r / l_r
//
// The body (paged_attention_tile_body.h) is written once over a primitives policy:
// portable C++ or AVX2/FMA/F16C here, AVX-512 in paged_attention_prefill_avx512.cc,
// chosen at run time like the per-query kernel. Scratch is per thread.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "services/worker/kernels/avx2_math.h"
#include "services/worker/kernels/half.h"
#include "services/worker/kernels/kv_q8.h"
#include "services/worker/kernels/paged_attention_internal.h"
#include "services/worker/kernels/paged_attention_tile_body.h"

namespace folio::worker::kernels::internal {
namespace {

struct PortableTilePrims {
  static const float* Widen(const float* row, float* /*buf*/, int /*n*/) { return row; }
  static const float* Widen(const uint16_t* row, float* buf, int n) {
    for (int i = 0; i < n; ++i) buf[i] = HalfToFloat(row[i]);
    return buf;
  }
  static const float* Widen(const int8_t* row, float* buf, int n) {
    DequantizeQ8Row(row, n, buf);
    return buf;
  }
  // s[r * kKeyTile + j] = scale * q[r] . k[j] for r < R, j < nk, the key rows given in
  // the cache's type (widened into kbuf, [kKeyTile][hd], when f16).
  template <typename KvT>
  static void Scores(const float* const* q, int R, const KvT* const* kraw, int nk, int hd,
                     float scale, float* kbuf, float* s) {
    const float* k[kKeyTile];
    for (int j = 0; j < nk; ++j) k[j] = Widen(kraw[j], kbuf + static_cast<size_t>(j) * hd, hd);
    for (int r = 0; r < R; ++r) {
      for (int j = 0; j < nk; ++j) {
        float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        int i = 0;
        for (; i + 4 <= hd; i += 4) {
          s0 += q[r][i] * k[j][i];
          s1 += q[r][i + 1] * k[j][i + 1];
          s2 += q[r][i + 2] * k[j][i + 2];
          s3 += q[r][i + 3] * k[j][i + 3];
        }
        for (; i < hd; ++i) s0 += q[r][i] * k[j][i];
        s[r * kKeyTile + j] = ((s0 + s1) + (s2 + s3)) * scale;
      }
    }
  }
  // p[j] = cap * tanh(p[j] / cap) for j < n (a score softcap, Gemma 2).
  static void Softcap(float* p, int n, float cap) {
    for (int j = 0; j < n; ++j) p[j] = cap * std::tanh(p[j] / cap);
  }
  // p[j] = exp(p[j] - max) for j < n; returns their sum.
  static float ExpSum(float* p, int n, float max) {
    float sum = 0.0f;
    for (int j = 0; j < n; ++j) sum += (p[j] = std::exp(p[j] - max));
    return sum;
  }
  // The online softmax step of one piece for row r, whose keys j < nv (of nk) are
  // visible: p[j] = exp(p[j] - m') for j < nv and 0 for nv <= j < nk, with
  // m' = max(m, p[0..nv)); l = a l + sum_j p[j]; m = m'. Returns a = exp(m - m')
  // (1 when nv == 0: the row is unchanged).
  static float Softmax(float* p, int nv, int nk, float& m, float& l) {
    if (nv == 0) {
      std::fill(p, p + nk, 0.0f);
      return 1.0f;
    }
    float mb = p[0];
    for (int j = 1; j < nv; ++j) mb = std::max(mb, p[j]);
    const float m_new = std::max(m, mb);
    const float alpha = m_new == m ? 1.0f : std::exp(m - m_new);  // exp(-inf) = 0 at first
    l = l * alpha + ExpSum(p, nv, m_new);
    m = m_new;
    std::fill(p + nv, p + nk, 0.0f);
    return alpha;
  }
  // acc[r] = alpha[r] * acc[r] + sum_{j < nk} p[r * kKeyTile + j] * v[j].
  static void Accumulate(float* acc, int R, int hd, const float* alpha, const float* p,
                         const float* const* v, int nk) {
    for (int r = 0; r < R; ++r) {
      float* a = acc + static_cast<int64_t>(r) * hd;
      for (int d = 0; d < hd; ++d) a[d] *= alpha[r];
      for (int j = 0; j < nk; ++j) {
        const float w = p[r * kKeyTile + j];
        for (int d = 0; d < hd; ++d) a[d] += w * v[j][d];
      }
    }
  }
};

#if FOLIO_HAVE_AVX2_PATH
FOLIO_T_AVX2 inline __m256 Load8(const float* p) { return _mm256_loadu_ps(p); }
FOLIO_T_AVX2 inline __m256 Load8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// Transposes the 8 x 8 matrix whose rows are t[0..7], in place.
FOLIO_T_AVX2 inline void Transpose8(__m256* t) {
  const __m256 u0 = _mm256_unpacklo_ps(t[0], t[1]), u1 = _mm256_unpackhi_ps(t[0], t[1]);
  const __m256 u2 = _mm256_unpacklo_ps(t[2], t[3]), u3 = _mm256_unpackhi_ps(t[2], t[3]);
  const __m256 u4 = _mm256_unpacklo_ps(t[4], t[5]), u5 = _mm256_unpackhi_ps(t[4], t[5]);
  const __m256 u6 = _mm256_unpacklo_ps(t[6], t[7]), u7 = _mm256_unpackhi_ps(t[6], t[7]);
  const __m256 v0 = _mm256_shuffle_ps(u0, u2, 0x44), v1 = _mm256_shuffle_ps(u0, u2, 0xEE);
  const __m256 v2 = _mm256_shuffle_ps(u1, u3, 0x44), v3 = _mm256_shuffle_ps(u1, u3, 0xEE);
  const __m256 v4 = _mm256_shuffle_ps(u4, u6, 0x44), v5 = _mm256_shuffle_ps(u4, u6, 0xEE);
  const __m256 v6 = _mm256_shuffle_ps(u5, u7, 0x44), v7 = _mm256_shuffle_ps(u5, u7, 0xEE);
  t[0] = _mm256_permute2f128_ps(v0, v4, 0x20);
  t[1] = _mm256_permute2f128_ps(v1, v5, 0x20);
  t[2] = _mm256_permute2f128_ps(v2, v6, 0x20);
  t[3] = _mm256_permute2f128_ps(v3, v7, 0x20);
  t[4] = _mm256_permute2f128_ps(v0, v4, 0x31);
  t[5] = _mm256_permute2f128_ps(v1, v5, 0x31);
  t[6] = _mm256_permute2f128_ps(v2, v6, 0x31);
  t[7] = _mm256_permute2f128_ps(v3, v7, 0x31);
}

// head_dim a multiple of 8. Scores and values in register tiles of six query rows.
static_assert(kKeyTile % 16 == 0, "the AVX2 scores take 16 keys at a time");
struct Avx2TilePrims {
  FOLIO_T_AVX2 static const float* Widen(const float* row, float*, int) { return row; }
  FOLIO_T_AVX2 static const float* Widen(const uint16_t* row, float* buf, int n) {
    for (int i = 0; i < n; i += 8) {
      _mm256_storeu_ps(buf + i,
                       _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + i))));
    }
    return buf;
  }
  FOLIO_T_AVX2 static const float* Widen(const int8_t* row, float* buf, int n) {
    const __m256 s = _mm256_set1_ps(Q8RowScale(row, n));
    for (int i = 0; i < n; i += 8) {
      const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + i));
      _mm256_storeu_ps(buf + i, _mm256_mul_ps(s, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b))));
    }
    return buf;
  }
  // Scores from K transposed: kbuf[d * kKeyTile + j] = k_j[d] (8 x 8 blocks transposed in
  // registers, keys past nk repeat key nk - 1), then six query rows x 16 keys per step:
  // 12 accumulators, each FMA a broadcast q element times 8 keys, no horizontal sums.
  template <typename KvT>
  FOLIO_T_AVX2 static void Scores(const float* const* q, int R, const KvT* const* kraw,
                                       int nk, int hd, float scale, float* kbuf, float* s) {
    const int nk16 = (nk + 15) / 16 * 16;  // <= kKeyTile
    for (int j0 = 0; j0 < nk16; j0 += 8) {
      const KvT* rows[8];
      for (int i = 0; i < 8; ++i) rows[i] = kraw[std::min(j0 + i, nk - 1)];
      for (int d0 = 0; d0 < hd; d0 += 8) {
        __m256 t[8];
        for (int i = 0; i < 8; ++i) t[i] = Load8(rows[i] + d0);
        Transpose8(t);
        for (int i = 0; i < 8; ++i) _mm256_storeu_ps(kbuf + (d0 + i) * kKeyTile + j0, t[i]);
      }
    }
    const __m256 vscale = _mm256_set1_ps(scale);
    for (int r0 = 0; r0 < R; r0 += 6) {
      const float* qr[6];
      for (int i = 0; i < 6; ++i) qr[i] = q[std::min(r0 + i, R - 1)];
      for (int j0 = 0; j0 < nk16; j0 += 16) {
        __m256 a[6][2];
        for (int i = 0; i < 6; ++i) a[i][0] = a[i][1] = _mm256_setzero_ps();
        const float* kt = kbuf + j0;
        for (int d = 0; d < hd; ++d, kt += kKeyTile) {
          const __m256 k0 = _mm256_loadu_ps(kt);
          const __m256 k1 = _mm256_loadu_ps(kt + 8);
#pragma GCC unroll 6
          for (int i = 0; i < 6; ++i) {
            const __m256 b = _mm256_broadcast_ss(qr[i] + d);
            a[i][0] = _mm256_fmadd_ps(b, k0, a[i][0]);
            a[i][1] = _mm256_fmadd_ps(b, k1, a[i][1]);
          }
        }
        for (int i = 0; i < 6 && r0 + i < R; ++i) {
          float* sr = s + (r0 + i) * kKeyTile + j0;
          _mm256_storeu_ps(sr, _mm256_mul_ps(a[i][0], vscale));
          _mm256_storeu_ps(sr + 8, _mm256_mul_ps(a[i][1], vscale));
        }
      }
    }
  }
  FOLIO_T_AVX2 static float ExpSum(float* p, int n, float max) {
    const __m256 vmax = _mm256_set1_ps(max);
    __m256 acc = _mm256_setzero_ps();
    int j = 0;
    for (; j + 8 <= n; j += 8) {
      const __m256 e = avx2::Exp(_mm256_sub_ps(_mm256_loadu_ps(p + j), vmax));
      _mm256_storeu_ps(p + j, e);
      acc = _mm256_add_ps(acc, e);
    }
    float sum = avx2::HorizontalSum(acc);
    for (; j < n; ++j) sum += (p[j] = std::exp(p[j] - max));
    return sum;
  }
  // As PortableTilePrims::Softcap, 8 lanes at a time: tanh(y) = sign(y) (1 - e) / (1 + e)
  // with e = exp(-2|y|) (avx2::Exp; absolute error below 1e-6 of cap). p holds kKeyTile
  // slots, so the last vector may run past n.
  FOLIO_T_AVX2 static void Softcap(float* p, int n, float cap) {
    const __m256 vcap = _mm256_set1_ps(cap);
    const __m256 minus_two_over_cap = _mm256_set1_ps(-2.0f / cap);
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 one = _mm256_set1_ps(1.0f);
    for (int j = 0; j < n; j += 8) {
      const __m256 x = _mm256_loadu_ps(p + j);
      const __m256 e = avx2::Exp(_mm256_mul_ps(_mm256_andnot_ps(sign, x), minus_two_over_cap));
      const __m256 t = _mm256_div_ps(_mm256_sub_ps(one, e), _mm256_add_ps(one, e));
      _mm256_storeu_ps(p + j, _mm256_or_ps(_mm256_mul_ps(vcap, t), _mm256_and_ps(sign, x)));
    }
  }
  // As PortableTilePrims::Softmax, in vectors of 8 keys: hidden keys are masked to -inf
  // for the max and to 0 after the exponential.
  FOLIO_T_AVX2 static float Softmax(float* p, int nv, int nk, float& m, float& l) {
    const int nvec = (nk + 7) / 8;  // p has kKeyTile (a multiple of 8) slots
    if (nv == 0) {
      for (int i = 0; i < nvec; ++i) _mm256_storeu_ps(p + 8 * i, _mm256_setzero_ps());
      return 1.0f;
    }
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256 neg_inf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
    __m256 x[kKeyTile / 8];
    __m256 visible[kKeyTile / 8];
    __m256 vmax = neg_inf;
    for (int i = 0; i < nvec; ++i) {
      visible[i] = _mm256_castsi256_ps(
          _mm256_cmpgt_epi32(_mm256_set1_epi32(nv - 8 * i), lane));  // 8i + lane < nv
      x[i] = _mm256_blendv_ps(neg_inf, _mm256_loadu_ps(p + 8 * i), visible[i]);
      vmax = _mm256_max_ps(vmax, x[i]);
    }
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    const float m_new = std::max(m, _mm_cvtss_f32(h));
    float alpha = 1.0f;
    if (m_new != m) {
      alpha = m == -std::numeric_limits<float>::infinity()
                  ? 0.0f
                  : _mm256_cvtss_f32(avx2::Exp(_mm256_set1_ps(m - m_new)));
    }
    const __m256 vm = _mm256_set1_ps(m_new);
    __m256 sum = _mm256_setzero_ps();
    for (int i = 0; i < nvec; ++i) {
      const __m256 e = _mm256_and_ps(avx2::Exp(_mm256_sub_ps(x[i], vm)), visible[i]);
      _mm256_storeu_ps(p + 8 * i, e);
      sum = _mm256_add_ps(sum, e);
    }
    l = l * alpha + avx2::HorizontalSum(sum);
    m = m_new;
    return alpha;
  }
  // Six query rows x 16 lanes per step (12 accumulators), keys innermost: each FMA a
  // broadcast weight times 8 lanes of a value row; 8 lanes at a time for a head_dim
  // remainder.
  FOLIO_T_AVX2 static void Accumulate(float* acc, int R, int hd, const float* alpha,
                                           const float* p, const float* const* v, int nk) {
    for (int r0 = 0; r0 < R; r0 += 6) {
      const int rows = std::min(6, R - r0);
      const float* pr[6];
      float* ar[6];
      __m256 al[6];
      for (int i = 0; i < 6; ++i) {
        const int r = r0 + std::min(i, rows - 1);  // a short group repeats its last row
        pr[i] = p + r * kKeyTile;
        ar[i] = acc + static_cast<int64_t>(r) * hd;
        al[i] = _mm256_set1_ps(alpha[r]);
      }
      int c = 0;
      for (; c + 16 <= hd; c += 16) {
        __m256 x[6][2];
#pragma GCC unroll 6
        for (int i = 0; i < 6; ++i) {
          x[i][0] = _mm256_mul_ps(al[i], _mm256_loadu_ps(ar[i] + c));
          x[i][1] = _mm256_mul_ps(al[i], _mm256_loadu_ps(ar[i] + c + 8));
        }
        for (int j = 0; j < nk; ++j) {
          const __m256 v0 = _mm256_loadu_ps(v[j] + c);
          const __m256 v1 = _mm256_loadu_ps(v[j] + c + 8);
#pragma GCC unroll 6
          for (int i = 0; i < 6; ++i) {
            const __m256 w = _mm256_broadcast_ss(pr[i] + j);
            x[i][0] = _mm256_fmadd_ps(w, v0, x[i][0]);
            x[i][1] = _mm256_fmadd_ps(w, v1, x[i][1]);
          }
        }
        for (int i = 0; i < rows; ++i) {
          _mm256_storeu_ps(ar[i] + c, x[i][0]);
          _mm256_storeu_ps(ar[i] + c + 8, x[i][1]);
        }
      }
      for (; c < hd; c += 8) {
        __m256 x[6];
        for (int i = 0; i < 6; ++i) x[i] = _mm256_mul_ps(al[i], _mm256_loadu_ps(ar[i] + c));
        for (int j = 0; j < nk; ++j) {
          const __m256 v0 = _mm256_loadu_ps(v[j] + c);
          for (int i = 0; i < 6; ++i) {
            x[i] = _mm256_fmadd_ps(_mm256_broadcast_ss(pr[i] + j), v0, x[i]);
          }
        }
        for (int i = 0; i < rows; ++i) _mm256_storeu_ps(ar[i] + c, x[i]);
      }
    }
  }
};
#endif  // FOLIO_HAVE_AVX2_PATH

template <typename KvT>
void AttendTilePortable(const PagedAttentionArgs& args, const AttentionSeq& seq,
                        int32_t query_begin, int32_t query_count, int32_t kv_head,
                        const KvCacheView& kv) {
  TileBody<PortableTilePrims, KvT>(args, seq, query_begin, query_count, kv_head, kv);
}

#if FOLIO_HAVE_AVX2_PATH
template <typename KvT>
FOLIO_T_AVX2 void AttendTileAvx2(const PagedAttentionArgs& args, const AttentionSeq& seq,
                                      int32_t query_begin, int32_t query_count, int32_t kv_head,
                                      const KvCacheView& kv) {
  TileBody<Avx2TilePrims, KvT>(args, seq, query_begin, query_count, kv_head, kv);
}
#endif

}  // namespace

AttendTileFn PickAttendTileFn(CpuIsa isa, KvDType dtype, int head_dim) {
#if FOLIO_HAVE_AVX2_PATH
  if (isa == CpuIsa::kAvx2 && head_dim % 8 == 0) {
    return dtype == KvDType::kF16  ? &AttendTileAvx2<uint16_t>
           : dtype == KvDType::kQ8 ? &AttendTileAvx2<int8_t>
                                   : &AttendTileAvx2<float>;
  }
#else
  (void)isa;
  (void)head_dim;
#endif
  return dtype == KvDType::kF16  ? &AttendTilePortable<uint16_t>
         : dtype == KvDType::kQ8 ? &AttendTilePortable<int8_t>
                                 : &AttendTilePortable<float>;
}

}  // namespace folio::worker::kernels::internal
