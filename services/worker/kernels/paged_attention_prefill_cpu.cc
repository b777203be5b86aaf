// Tiled prefill attention on the CPU (see paged_attention_internal.h). One call is one
// tile: R = query_count x group query rows (several query positions times the query
// heads of one kv head) against the keys 0 .. the tile's last position. The keys are
// walked block by block through the table in pieces of at most kKeyTile; each piece's
// K and V rows are widened to f32 once (f32 caches are read in place) and used by all R
// rows, with an online softmax:
//
//   per row r:  m_r = running max, l_r = running sum, acc_r = running weighted values
//   per piece:  s_rj = scale * q_r . k_j  for keys j <= pos_r (causal; others weigh 0)
//               m' = max(m_r, max_j s_rj);  a = exp(m_r - m')
//               p_rj = exp(s_rj - m');  l_r = a l_r + sum_j p_rj
//               acc_r = a acc_r + sum_j p_rj v_j;  m_r = m'
//   at the end: out_r = acc_r / l_r
//
// The body is written once over a primitives policy (portable C++ or AVX2/FMA/F16C,
// chosen at run time like the per-query kernel). Scratch is per thread.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "services/worker/kernels/avx2_math.h"
#include "services/worker/kernels/half.h"
#include "services/worker/kernels/paged_attention_internal.h"

namespace folio::worker::kernels::internal {
namespace {

struct PortableTilePrims {
  static const float* Widen(const float* row, float* /*buf*/, int /*n*/) { return row; }
  static const float* Widen(const uint16_t* row, float* buf, int n) {
    for (int i = 0; i < n; ++i) buf[i] = HalfToFloat(row[i]);
    return buf;
  }
  // s[r * kKeyTile + j] = scale * q[r] . k[j] for r < R, j < nk.
  static void Scores(const float* const* q, int R, const float* const* k, int nk, int hd,
                     float scale, float* s) {
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
  // p[j] = exp(p[j] - max) for j < n; returns their sum.
  static float ExpSum(float* p, int n, float max) {
    float sum = 0.0f;
    for (int j = 0; j < n; ++j) sum += (p[j] = std::exp(p[j] - max));
    return sum;
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
// [sum(v[0]), ..., sum(v[7])].
FOLIO_AVX2_TARGET inline __m256 SumEach8(const __m256* v) {
  const __m256 t0 = _mm256_hadd_ps(v[0], v[1]);
  const __m256 t1 = _mm256_hadd_ps(v[2], v[3]);
  const __m256 t2 = _mm256_hadd_ps(v[4], v[5]);
  const __m256 t3 = _mm256_hadd_ps(v[6], v[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1);
  const __m256 u1 = _mm256_hadd_ps(t2, t3);
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// head_dim a multiple of 8. Scores: two query rows x four keys per step (8 accumulators,
// 6 loads per 8 FMAs). Values: two query rows x 32 lanes per step, keys innermost.
struct Avx2TilePrims {
  FOLIO_AVX2_TARGET static const float* Widen(const float* row, float*, int) { return row; }
  FOLIO_AVX2_TARGET static const float* Widen(const uint16_t* row, float* buf, int n) {
    for (int i = 0; i < n; i += 8) {
      _mm256_storeu_ps(buf + i,
                       _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + i))));
    }
    return buf;
  }
  FOLIO_AVX2_TARGET static void Scores(const float* const* q, int R, const float* const* k,
                                       int nk, int hd, float scale, float* s) {
    const __m256 vscale = _mm256_set1_ps(scale);
    for (int r = 0; r < R; r += 2) {
      const bool two = r + 1 < R;
      const float* q0 = q[r];
      const float* q1 = q[two ? r + 1 : r];
      for (int j = 0; j < nk; j += 4) {
        const int n = std::min(4, nk - j);
        const float* k0 = k[j];
        const float* k1 = k[j + std::min(1, n - 1)];
        const float* k2 = k[j + std::min(2, n - 1)];
        const float* k3 = k[j + std::min(3, n - 1)];
        __m256 d[8];
        for (int i = 0; i < 8; ++i) d[i] = _mm256_setzero_ps();
        for (int c = 0; c < hd; c += 8) {
          const __m256 a0 = _mm256_loadu_ps(q0 + c);
          const __m256 a1 = _mm256_loadu_ps(q1 + c);
          const __m256 b0 = _mm256_loadu_ps(k0 + c);
          const __m256 b1 = _mm256_loadu_ps(k1 + c);
          const __m256 b2 = _mm256_loadu_ps(k2 + c);
          const __m256 b3 = _mm256_loadu_ps(k3 + c);
          d[0] = _mm256_fmadd_ps(a0, b0, d[0]);
          d[1] = _mm256_fmadd_ps(a0, b1, d[1]);
          d[2] = _mm256_fmadd_ps(a0, b2, d[2]);
          d[3] = _mm256_fmadd_ps(a0, b3, d[3]);
          d[4] = _mm256_fmadd_ps(a1, b0, d[4]);
          d[5] = _mm256_fmadd_ps(a1, b1, d[5]);
          d[6] = _mm256_fmadd_ps(a1, b2, d[6]);
          d[7] = _mm256_fmadd_ps(a1, b3, d[7]);
        }
        alignas(32) float sums[8];
        _mm256_store_ps(sums, _mm256_mul_ps(SumEach8(d), vscale));
        for (int i = 0; i < n; ++i) s[r * kKeyTile + j + i] = sums[i];
        if (two) {
          for (int i = 0; i < n; ++i) s[(r + 1) * kKeyTile + j + i] = sums[4 + i];
        }
      }
    }
  }
  FOLIO_AVX2_TARGET static float ExpSum(float* p, int n, float max) {
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
  FOLIO_AVX2_TARGET static void Accumulate(float* acc, int R, int hd, const float* alpha,
                                           const float* p, const float* const* v, int nk) {
    for (int r = 0; r < R; r += 2) {
      const int r1 = std::min(r + 1, R - 1);  // an odd last row is done twice, identically
      float* a0p = acc + static_cast<int64_t>(r) * hd;
      float* a1p = acc + static_cast<int64_t>(r1) * hd;
      const float* p0 = p + r * kKeyTile;
      const float* p1 = p + r1 * kKeyTile;
      const __m256 al0 = _mm256_set1_ps(alpha[r]);
      const __m256 al1 = _mm256_set1_ps(alpha[r1]);
      int c = 0;
      for (; c + 32 <= hd; c += 32) {
        __m256 x0 = _mm256_mul_ps(al0, _mm256_loadu_ps(a0p + c));
        __m256 x1 = _mm256_mul_ps(al0, _mm256_loadu_ps(a0p + c + 8));
        __m256 x2 = _mm256_mul_ps(al0, _mm256_loadu_ps(a0p + c + 16));
        __m256 x3 = _mm256_mul_ps(al0, _mm256_loadu_ps(a0p + c + 24));
        __m256 y0 = _mm256_mul_ps(al1, _mm256_loadu_ps(a1p + c));
        __m256 y1 = _mm256_mul_ps(al1, _mm256_loadu_ps(a1p + c + 8));
        __m256 y2 = _mm256_mul_ps(al1, _mm256_loadu_ps(a1p + c + 16));
        __m256 y3 = _mm256_mul_ps(al1, _mm256_loadu_ps(a1p + c + 24));
        for (int j = 0; j < nk; ++j) {
          const float* vj = v[j] + c;
          const __m256 w0 = _mm256_set1_ps(p0[j]);
          const __m256 w1 = _mm256_set1_ps(p1[j]);
          const __m256 v0 = _mm256_loadu_ps(vj);
          const __m256 v1 = _mm256_loadu_ps(vj + 8);
          const __m256 v2 = _mm256_loadu_ps(vj + 16);
          const __m256 v3 = _mm256_loadu_ps(vj + 24);
          x0 = _mm256_fmadd_ps(w0, v0, x0);
          x1 = _mm256_fmadd_ps(w0, v1, x1);
          x2 = _mm256_fmadd_ps(w0, v2, x2);
          x3 = _mm256_fmadd_ps(w0, v3, x3);
          y0 = _mm256_fmadd_ps(w1, v0, y0);
          y1 = _mm256_fmadd_ps(w1, v1, y1);
          y2 = _mm256_fmadd_ps(w1, v2, y2);
          y3 = _mm256_fmadd_ps(w1, v3, y3);
        }
        _mm256_storeu_ps(a0p + c, x0);
        _mm256_storeu_ps(a0p + c + 8, x1);
        _mm256_storeu_ps(a0p + c + 16, x2);
        _mm256_storeu_ps(a0p + c + 24, x3);
        _mm256_storeu_ps(a1p + c, y0);
        _mm256_storeu_ps(a1p + c + 8, y1);
        _mm256_storeu_ps(a1p + c + 16, y2);
        _mm256_storeu_ps(a1p + c + 24, y3);
      }
      for (; c < hd; c += 8) {
        __m256 x0 = _mm256_mul_ps(al0, _mm256_loadu_ps(a0p + c));
        __m256 y0 = _mm256_mul_ps(al1, _mm256_loadu_ps(a1p + c));
        for (int j = 0; j < nk; ++j) {
          const __m256 v0 = _mm256_loadu_ps(v[j] + c);
          x0 = _mm256_fmadd_ps(_mm256_set1_ps(p0[j]), v0, x0);
          y0 = _mm256_fmadd_ps(_mm256_set1_ps(p1[j]), v0, y0);
        }
        _mm256_storeu_ps(a0p + c, x0);
        _mm256_storeu_ps(a1p + c, y0);
      }
    }
  }
};
#endif  // FOLIO_HAVE_AVX2_PATH

// Per-thread scratch, grown as needed.
std::vector<float>& TileScratch() {
  thread_local std::vector<float> scratch;
  return scratch;
}

// Prefetches the K and V rows of kv head `head` for key positions [from, to).
template <typename KvT>
inline void PrefetchKeys(const KvT* k_base, const KvT* v_base, const int32_t* table,
                         int64_t block_size, int64_t block_stride, int64_t slot_stride, int hd,
                         int64_t from, int64_t to) {
  const int64_t row_bytes = static_cast<int64_t>(hd) * sizeof(KvT);
  for (int64_t pos = from; pos < to; ++pos) {
    const int64_t off = table[pos / block_size] * block_stride + (pos % block_size) * slot_stride;
    const char* kp = reinterpret_cast<const char*>(k_base + off);
    const char* vp = reinterpret_cast<const char*>(v_base + off);
    for (int64_t b = 0; b < row_bytes; b += 64) {
      __builtin_prefetch(kp + b);
      __builtin_prefetch(vp + b);
    }
  }
}

template <typename Prims, typename KvT>
__attribute__((always_inline)) inline void TileBody(const PagedAttentionArgs& args,
                                                    const AttentionSeq& seq, int32_t query_begin,
                                                    int32_t query_count, int32_t kv_head,
                                                    const KvCacheView& kv) {
  const int hd = kv.head_dim;
  const int group = args.num_heads / kv.num_kv_heads;
  const int R = query_count * group;
  const int64_t block_size = kv.block_size;
  const int64_t slot_stride = kv.slot_stride();
  const int64_t block_stride = kv.block_stride();
  // Position of the tile's first query; the tile's keys are 0 .. pos0 + query_count - 1.
  const int64_t pos0 = static_cast<int64_t>(seq.context_len) - seq.num_queries + query_begin;
  const int64_t num_keys = pos0 + query_count;

  std::vector<float>& scratch = TileScratch();
  const size_t need = 2 * static_cast<size_t>(kKeyTile) * hd +      // widened K, V
                      static_cast<size_t>(R) * (kKeyTile + 3 + hd);   // p, m, l, alpha, acc
  if (scratch.size() < need) scratch.resize(need);
  float* kf = scratch.data();
  float* vf = kf + static_cast<size_t>(kKeyTile) * hd;
  float* p = vf + static_cast<size_t>(kKeyTile) * hd;  // [R][kKeyTile]
  float* m = p + static_cast<size_t>(R) * kKeyTile;
  float* l = m + R;
  float* alpha = l + R;
  float* acc = alpha + R;  // [R][hd]
  thread_local std::vector<const float*> qrow;
  qrow.resize(R);
  for (int qi = 0; qi < query_count; ++qi) {
    const int64_t row = static_cast<int64_t>(seq.query_offset) + query_begin + qi;
    for (int g = 0; g < group; ++g) {
      qrow[qi * group + g] = args.q + row * args.q_row_stride +
                             (static_cast<int64_t>(kv_head) * group + g) * hd;
    }
  }
  std::fill(m, m + R, -std::numeric_limits<float>::infinity());
  std::fill(l, l + R, 0.0f);
  std::fill(acc, acc + static_cast<size_t>(R) * hd, 0.0f);

  const KvT* k_base = static_cast<const KvT*>(kv.k) + static_cast<int64_t>(kv_head) * hd;
  const KvT* v_base = static_cast<const KvT*>(kv.v) + static_cast<int64_t>(kv_head) * hd;
  const float* krow[kKeyTile];
  const float* vrow[kKeyTile];

  for (int64_t first = 0, b = 0; first < num_keys; first += block_size, ++b) {
    const int64_t rows = std::min(block_size, num_keys - first);
    const int64_t block_off = seq.block_table[b] * block_stride;
    for (int64_t sub = 0; sub < rows; sub += kKeyTile) {
      const int64_t key0 = first + sub;
      const int nk = static_cast<int>(std::min<int64_t>(kKeyTile, rows - sub));
      PrefetchKeys(k_base, v_base, seq.block_table, block_size, block_stride, slot_stride, hd,
                   key0 + nk, std::min<int64_t>(num_keys, key0 + nk + kKeyTile));
      for (int j = 0; j < nk; ++j) {
        const int64_t off = block_off + (sub + j) * slot_stride;
        krow[j] = Prims::Widen(k_base + off, kf + static_cast<size_t>(j) * hd, hd);
        vrow[j] = Prims::Widen(v_base + off, vf + static_cast<size_t>(j) * hd, hd);
      }
      Prims::Scores(qrow.data(), R, krow, nk, hd, args.scale, p);
      for (int r = 0; r < R; ++r) {
        float* pr = p + r * kKeyTile;
        const int64_t pos = pos0 + r / group;
        const int nv = static_cast<int>(std::clamp<int64_t>(pos - key0 + 1, 0, nk));
        if (nv == 0) {  // every key of this piece lies after the query: no change
          alpha[r] = 1.0f;
          std::fill(pr, pr + nk, 0.0f);
          continue;
        }
        float mb = pr[0];
        for (int j = 1; j < nv; ++j) mb = std::max(mb, pr[j]);
        const float m_new = std::max(m[r], mb);
        alpha[r] = std::exp(m[r] - m_new);  // exp(-inf) = 0 on the first piece
        l[r] = l[r] * alpha[r] + Prims::ExpSum(pr, nv, m_new);
        m[r] = m_new;
        std::fill(pr + nv, pr + nk, 0.0f);  // masked keys weigh 0
      }
      Prims::Accumulate(acc, R, hd, alpha, p, vrow, nk);
    }
  }
  for (int qi = 0; qi < query_count; ++qi) {
    const int64_t row = static_cast<int64_t>(seq.query_offset) + query_begin + qi;
    float* out = args.out + row * args.out_row_stride + static_cast<int64_t>(kv_head) * group * hd;
    for (int g = 0; g < group; ++g) {
      const int r = qi * group + g;
      const float inv = 1.0f / l[r];
      const float* a = acc + static_cast<int64_t>(r) * hd;
      for (int d = 0; d < hd; ++d) out[g * hd + d] = a[d] * inv;
    }
  }
}

template <typename KvT>
void AttendTilePortable(const PagedAttentionArgs& args, const AttentionSeq& seq,
                        int32_t query_begin, int32_t query_count, int32_t kv_head,
                        const KvCacheView& kv) {
  TileBody<PortableTilePrims, KvT>(args, seq, query_begin, query_count, kv_head, kv);
}

#if FOLIO_HAVE_AVX2_PATH
template <typename KvT>
FOLIO_AVX2_TARGET void AttendTileAvx2(const PagedAttentionArgs& args, const AttentionSeq& seq,
                                      int32_t query_begin, int32_t query_count, int32_t kv_head,
                                      const KvCacheView& kv) {
  TileBody<Avx2TilePrims, KvT>(args, seq, query_begin, query_count, kv_head, kv);
}
#endif

}  // namespace

AttendTileFn PickAttendTileFn(CpuIsa isa, KvDType dtype, int head_dim) {
#if FOLIO_HAVE_AVX2_PATH
  if (isa == CpuIsa::kAvx2 && head_dim % 8 == 0) {
    return dtype == KvDType::kF16 ? &AttendTileAvx2<uint16_t> : &AttendTileAvx2<float>;
  }
#else
  (void)isa;
  (void)head_dim;
#endif
  return dtype == KvDType::kF16 ? &AttendTilePortable<uint16_t> : &AttendTilePortable<float>;
}

}  // namespace folio::worker::kernels::internal
