// CPU paged attention: the dispatch, and the per-query kernel (decode rows; the tiled
// prefill kernel is in paged_attention_prefill_cpu.cc). Each per-query work item is one
// (sequence, query row, kv head): it scores
// the query heads of that kv head's group against every cached key up to the query's
// position (reading each key row once for the whole group), takes a softmax per head,
// then accumulates the value rows. Both passes walk the block table block by block.
//
// The body is written once (AttendBody) over a "primitives" policy: portable C++ or
// AVX2/FMA/F16C intrinsics. The AVX2 instantiation is compiled through a function with a
// target attribute and chosen at run time from CpuIsa, so the library still runs on any
// x86-64 (and builds on other architectures, where only the portable path exists). With
// PagedAttentionArgs::avx512 the AVX-512 kernels (paged_attention_avx512.cc,
// paged_attention_prefill_avx512.cc) take the shapes they have (head_dim % 16 == 0).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "glog/logging.h"
#include "services/worker/kernels/avx2_math.h"
#include "services/worker/kernels/half.h"
#include "services/worker/kernels/kv_q8.h"
#include "services/worker/kernels/paged_attention.h"
#include "services/worker/kernels/paged_attention_internal.h"


namespace folio::worker::kernels {
namespace {

struct PortablePrims {
  // Returns a pointer to row as f32: the row itself, or `buf` filled from f16.
  static const float* Widen(const float* row, float* /*buf*/, int /*n*/) { return row; }
  static const float* Widen(const uint16_t* row, float* buf, int n) {
    for (int i = 0; i < n; ++i) buf[i] = HalfToFloat(row[i]);
    return buf;
  }
  static const float* Widen(const int8_t* row, float* buf, int n) {
    DequantizeQ8Row(row, n, buf);
    return buf;
  }
  static float Dot(const float* a, const float* b, int n) {
    // Four partial sums let the compiler vectorise without reassociation flags.
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int i = 0;
    for (; i + 4 <= n; i += 4) {
      s0 += a[i] * b[i];
      s1 += a[i + 1] * b[i + 1];
      s2 += a[i + 2] * b[i + 2];
      s3 += a[i + 3] * b[i + 3];
    }
    for (; i < n; ++i) s0 += a[i] * b[i];
    return (s0 + s1) + (s2 + s3);
  }
  static void Axpy(float a, const float* x, float* y, int n) {
    for (int i = 0; i < n; ++i) y[i] += a * x[i];
  }
  // s[i] = exp(s[i] - max); returns the sum.
  static float ExpSum(float* s, int64_t n, float max) {
    float sum = 0.0f;
    for (int64_t j = 0; j < n; ++j) {
      s[j] = std::exp(s[j] - max);
      sum += s[j];
    }
    return sum;
  }
};

#if FOLIO_HAVE_AVX2_PATH
struct Avx2Prims {
  FOLIO_T_AVX2 static const float* Widen(const float* row, float*, int) { return row; }
  FOLIO_T_AVX2 static const float* Widen(const uint16_t* row, float* buf, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + i));
      _mm256_storeu_ps(buf + i, _mm256_cvtph_ps(h));
    }
    for (; i < n; ++i) buf[i] = HalfToFloat(row[i]);
    return buf;
  }
  FOLIO_T_AVX2 static const float* Widen(const int8_t* row, float* buf, int n) {
    const __m256 s = _mm256_set1_ps(Q8RowScale(row, n));
    int i = 0;
    for (; i + 8 <= n; i += 8) {
      const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + i));
      _mm256_storeu_ps(buf + i, _mm256_mul_ps(s, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b))));
    }
    for (; i < n; ++i) buf[i] = Q8RowScale(row, n) * static_cast<float>(row[i]);
    return buf;
  }
  FOLIO_T_AVX2 static float Dot(const float* a, const float* b, int n) {
    __m256 acc0 = _mm256_setzero_ps();
    __m256 acc1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
      acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
      acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
    }
    for (; i + 8 <= n; i += 8) {
      acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    }
    acc0 = _mm256_add_ps(acc0, acc1);
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc0), _mm256_extractf128_ps(acc0, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    float sum = _mm_cvtss_f32(s);
    for (; i < n; ++i) sum += a[i] * b[i];
    return sum;
  }
  FOLIO_T_AVX2 static void Axpy(float a, const float* x, float* y, int n) {
    const __m256 va = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
      _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    }
    for (; i < n; ++i) y[i] += a * x[i];
  }
  FOLIO_T_AVX2 static float ExpSum(float* s, int64_t n, float max) {
    const __m256 vmax = _mm256_set1_ps(max);
    __m256 acc = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
      const __m256 e = avx2::Exp(_mm256_sub_ps(_mm256_loadu_ps(s + j), vmax));
      _mm256_storeu_ps(s + j, e);
      acc = _mm256_add_ps(acc, e);
    }
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    float sum = _mm_cvtss_f32(h);
    for (; j < n; ++j) {
      s[j] = std::exp(s[j] - max);
      sum += s[j];
    }
    return sum;
  }
};
#endif  // FOLIO_HAVE_AVX2_PATH

struct Item {
  int32_t seq;
  int32_t query;         // the (first) query row
  int32_t kv_head;       // the first of heads_per_item, or the tile's kv head
  int32_t tile_queries;  // > 0: a prefill tile of this many queries; 0: a per-query item
  int64_t cost;          // keys x query heads, roughly
};

// Per-thread scratch, grown as needed: scores [group][num_keys], a widened row [head_dim]
// and the output accumulators [group][head_dim].
std::vector<float>& Scratch() {
  thread_local std::vector<float> scratch;
  return scratch;
}

// Software prefetch, kPrefetchAhead positions ahead, kPrefetchRows rows at a time.
// Each row of one kv head is hd elements in a slot of num_kv_heads * hd, so a walk over
// one head is strided and, across blocks, scattered: the hardware prefetcher cannot run
// ahead of it. Both layouts (paged or one block per sequence) get the same treatment.
constexpr int64_t kPrefetchRows = 16;
constexpr int64_t kPrefetchAhead = 64;

template <typename KvT>
inline void PrefetchRows(const KvT* base, const int32_t* table, int64_t block_size,
                         int64_t block_stride, int64_t slot_stride, int hd, int64_t from,
                         int64_t to) {
  // A kQ8 row's scale sits after its values.
  const int64_t row_bytes = static_cast<int64_t>(hd) * sizeof(KvT) + (sizeof(KvT) == 1 ? 4 : 0);
  if (from >= to) return;
  int64_t b = from / block_size;
  int64_t r = from % block_size;
  for (int64_t pos = from; pos < to; ++pos) {
    const char* p = reinterpret_cast<const char*>(base + table[b] * block_stride + r * slot_stride);
    for (int64_t off = 0; off < row_bytes; off += 64) __builtin_prefetch(p + off);
    if (++r == block_size) {
      r = 0;
      ++b;
    }
  }
}

template <typename Prims, typename KvT>
__attribute__((always_inline)) inline void AttendBody(const PagedAttentionArgs& args,
                                                      const AttentionSeq& seq, int32_t query,
                                                      int32_t kv_head, const KvCacheView& kv) {
  const int hd = kv.head_dim;
  const int group = args.num_heads / kv.num_kv_heads;
  const int64_t block_size = kv.block_size;
  const int64_t slot_stride = kv.slot_stride();
  const int64_t block_stride = kv.block_stride();
  const int64_t num_keys = static_cast<int64_t>(seq.context_len) - seq.num_queries + query + 1;
  // Keys [first_key, num_keys): all of them, or the window's.
  const int64_t first_key = args.window > 0 ? std::max<int64_t>(0, num_keys - args.window) : 0;
  const int64_t n = num_keys - first_key;
  const int64_t row = static_cast<int64_t>(seq.query_offset) + query;
  const float* q = args.q + row * args.q_row_stride + static_cast<int64_t>(kv_head) * group * hd;
  float* out = args.out + row * args.out_row_stride + static_cast<int64_t>(kv_head) * group * hd;

  std::vector<float>& scratch = Scratch();
  const size_t need = static_cast<size_t>(group) * n + hd + static_cast<size_t>(group) * hd;
  if (scratch.size() < need) scratch.resize(need);
  float* scores = scratch.data();       // [group][n]
  float* widened = scores + group * n;  // [hd]
  float* acc = widened + hd;            // [group][hd]

  const KvT* k_base = static_cast<const KvT*>(kv.k) + kv_head * kv.row_stride();
  const KvT* v_base = static_cast<const KvT*>(kv.v) + kv_head * kv.row_stride();

  // Pass 1: scores, block by block through the table.
  for (int64_t pos = first_key; pos < num_keys;) {
    const int64_t b = pos / block_size;
    const int64_t r0 = pos % block_size;
    const int64_t rows = std::min(block_size - r0, num_keys - pos);
    const KvT* k_block = k_base + seq.block_table[b] * block_stride;
    for (int64_t r = r0; r < r0 + rows; ++r, ++pos) {
      if (pos % kPrefetchRows == 0) {
        const int64_t from = pos + kPrefetchAhead;
        PrefetchRows(k_base, seq.block_table, block_size, block_stride, slot_stride, hd, from,
                     std::min(num_keys, from + kPrefetchRows));
      }
      const float* k = Prims::Widen(k_block + r * slot_stride, widened, hd);
      for (int g = 0; g < group; ++g) {
        float s = Prims::Dot(q + g * hd, k, hd) * args.scale;
        if (args.softcap > 0.0f) s = args.softcap * std::tanh(s / args.softcap);
        scores[g * n + pos - first_key] = s;
      }
    }
  }
  // Softmax per query head.
  for (int g = 0; g < group; ++g) {
    float* s = scores + g * n;
    float max = s[0];
    for (int64_t j = 1; j < n; ++j) max = std::max(max, s[j]);
    const float sum = Prims::ExpSum(s, n, max);
    const float inv = 1.0f / sum;
    for (int64_t j = 0; j < n; ++j) s[j] *= inv;
  }
  // Pass 2: weighted sum of values.
  std::fill(acc, acc + group * hd, 0.0f);
  for (int64_t pos = first_key; pos < num_keys;) {
    const int64_t b = pos / block_size;
    const int64_t r0 = pos % block_size;
    const int64_t rows = std::min(block_size - r0, num_keys - pos);
    const KvT* v_block = v_base + seq.block_table[b] * block_stride;
    for (int64_t r = r0; r < r0 + rows; ++r, ++pos) {
      if (pos % kPrefetchRows == 0) {
        const int64_t from = pos + kPrefetchAhead;
        PrefetchRows(v_base, seq.block_table, block_size, block_stride, slot_stride, hd, from,
                     std::min(num_keys, from + kPrefetchRows));
      }
      const float* v = Prims::Widen(v_block + r * slot_stride, widened, hd);
      for (int g = 0; g < group; ++g) {
        Prims::Axpy(scores[g * n + pos - first_key], v, acc + g * hd, hd);
      }
    }
  }
  std::memcpy(out, acc, sizeof(float) * group * hd);
}

template <typename KvT>
void AttendPortable(const PagedAttentionArgs& args, const AttentionSeq& seq, int32_t query,
                    int32_t head_begin, int32_t head_count, const KvCacheView& kv) {
  for (int32_t h = head_begin; h < head_begin + head_count; ++h) {
    AttendBody<PortablePrims, KvT>(args, seq, query, h, kv);
  }
}

#if FOLIO_HAVE_AVX2_PATH
template <typename KvT>
FOLIO_T_AVX2 void AttendAvx2(const PagedAttentionArgs& args, const AttentionSeq& seq,
                                  int32_t query, int32_t head_begin, int32_t head_count,
                                  const KvCacheView& kv) {
  for (int32_t h = head_begin; h < head_begin + head_count; ++h) {
    AttendBody<Avx2Prims, KvT>(args, seq, query, h, kv);
  }
}

// The AVX2 path for head_dim a multiple of 8 and G = num_heads / num_kv_heads one of
// 1, 2, 4, 8: G * KB = 8 (query head, key) dot products at a time, KB = 8 / G keys, in
// eight accumulators that one horizontal-add tree turns into eight scores (instead of a
// reduction per dot product), and values summed four keys at a time so each output
// accumulator is loaded and stored once per four keys. The f16 rows are widened in
// registers. One call serves kv heads [head_begin, head_begin + H) of one query: a slot
// holds every kv head's row side by side, so walking the heads inside the row loop reads
// each block front to back (what the hardware prefetcher follows) instead of one 64- or
// 128-byte row per slot. Every output is the same sequence of fused multiply-adds over the keys in
// order as in the generic body; only the score dot products are summed in another order.
// A window starts both walks at the window's first key (keys are grouped from there); a
// softcap bends the scaled scores before the softmax, as in the generic body.
template <typename KvT>
FOLIO_T_AVX2 inline __m256 Load8(const KvT* p) {
  if constexpr (sizeof(KvT) == 1) {  // kQ8 values, unscaled
    return _mm256_cvtepi32_ps(
        _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  } else if constexpr (sizeof(KvT) == 2) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  } else {
    return _mm256_loadu_ps(p);
  }
}

// [sum(v[0]), sum(v[1]), ..., sum(v[7])].
FOLIO_T_AVX2 inline __m256 SumEach(const __m256* v) {
  const __m256 t0 = _mm256_hadd_ps(v[0], v[1]);
  const __m256 t1 = _mm256_hadd_ps(v[2], v[3]);
  const __m256 t2 = _mm256_hadd_ps(v[4], v[5]);
  const __m256 t3 = _mm256_hadd_ps(v[6], v[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1);  // [0a 1a 2a 3a | 0b 1b 2b 3b]
  const __m256 u1 = _mm256_hadd_ps(t2, t3);  // [4a 5a 6a 7a | 4b 5b 6b 7b]
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// cap * tanh(x / cap) in each lane: tanh(y) = sign(y) (1 - e) / (1 + e) with
// e = exp(-2|y|) (avx2::Exp), as the tiled kernel's softcap.
FOLIO_T_AVX2 inline __m256 Softcap8(__m256 x, float cap) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 e =
      avx2::Exp(_mm256_mul_ps(_mm256_andnot_ps(sign, x), _mm256_set1_ps(-2.0f / cap)));
  const __m256 t = _mm256_div_ps(_mm256_sub_ps(one, e), _mm256_add_ps(one, e));
  return _mm256_or_ps(_mm256_mul_ps(_mm256_set1_ps(cap), t), _mm256_and_ps(sign, x));
}

template <int G, typename KvT>
FOLIO_T_AVX2 void AttendAvx2Blocked(const PagedAttentionArgs& args, const AttentionSeq& seq,
                                         int32_t query, int32_t head_begin, int32_t H,
                                         const KvCacheView& kv) {
  constexpr int KB = 8 / G;
  const int hd = kv.head_dim;
  const int64_t block_size = kv.block_size;
  const int64_t slot_stride = kv.slot_stride();
  const int64_t block_stride = kv.block_stride();
  const int64_t num_keys = static_cast<int64_t>(seq.context_len) - seq.num_queries + query + 1;
  // Keys [first_key, num_keys): all of them, or the window's; n of them.
  const int64_t first_key = args.window > 0 ? std::max<int64_t>(0, num_keys - args.window) : 0;
  const int64_t n_keys = num_keys - first_key;
  const int64_t row = static_cast<int64_t>(seq.query_offset) + query;
  const int64_t heads = static_cast<int64_t>(H) * G;  // query heads of this call
  const float* q = args.q + row * args.q_row_stride + static_cast<int64_t>(head_begin) * G * hd;
  float* out = args.out + row * args.out_row_stride + static_cast<int64_t>(head_begin) * G * hd;

  std::vector<float>& scratch = Scratch();
  const size_t need = static_cast<size_t>(heads) * (n_keys + hd);
  if (scratch.size() < need) scratch.resize(need);
  float* scores = scratch.data();        // [H * G][n_keys]
  float* acc = scores + heads * n_keys;  // [H * G][hd]

  const int64_t rs = kv.row_stride();  // hd, or hd + 4 scale bytes for kQ8
  const KvT* k_base = static_cast<const KvT*>(kv.k) + head_begin * rs;
  const KvT* v_base = static_cast<const KvT*>(kv.v) + head_begin * rs;
  // Elements of one slot this call reads (PrefetchRows adds a kQ8 row's scale bytes).
  const int span = static_cast<int>(H * rs - (rs - hd));
  const __m256 vscale = _mm256_set1_ps(args.scale);

  // Pass 1: scores.
  const int64_t first_block = first_key / block_size;
  int64_t next_prefetch = first_key;
  for (int64_t b = first_block, first = b * block_size; first < num_keys;
       first += block_size, ++b) {
    const int64_t rows = std::min(block_size, num_keys - first);
    const KvT* k_block = k_base + seq.block_table[b] * block_stride;
    for (int64_t r = std::max<int64_t>(0, first_key - first); r < rows; r += KB) {
      if (first + r >= next_prefetch) {
        const int64_t from = next_prefetch + kPrefetchAhead;
        PrefetchRows(k_base, seq.block_table, block_size, block_stride, slot_stride, span, from,
                     std::min(num_keys, from + kPrefetchRows));
        next_prefetch += kPrefetchRows;
      }
      const int64_t n = std::min<int64_t>(KB, rows - r);
      const KvT* krow[KB];
#pragma GCC unroll 8
      for (int i = 0; i < KB; ++i) krow[i] = k_block + (r + std::min<int64_t>(i, n - 1)) * slot_stride;
      for (int h = 0; h < H; ++h) {
        const float* qh = q + static_cast<int64_t>(h) * G * hd;
        __m256 dot[8];
#pragma GCC unroll 8
        for (int v = 0; v < 8; ++v) dot[v] = _mm256_setzero_ps();
        for (int c = 0; c < hd; c += 8) {
#pragma GCC unroll 8
          for (int i = 0; i < KB; ++i) {
            const __m256 kc = Load8(krow[i] + h * rs + c);
#pragma GCC unroll 8
            for (int g = 0; g < G; ++g) {
              dot[g * KB + i] =
                  _mm256_fmadd_ps(kc, _mm256_loadu_ps(qh + g * hd + c), dot[g * KB + i]);
            }
          }
        }
        alignas(32) float sums[8];
        _mm256_store_ps(sums, _mm256_mul_ps(SumEach(dot), vscale));
        float* sh = scores + static_cast<int64_t>(h) * G * n_keys + first + r - first_key;
        if constexpr (sizeof(KvT) == 1) {  // kQ8: each key's row scale
          for (int64_t i = 0; i < n; ++i) {
            const float ks = Q8RowScale(krow[i] + h * rs, hd);
            for (int g = 0; g < G; ++g) sums[g * KB + i] *= ks;
          }
        }
        if (args.softcap > 0.0f) {
          _mm256_store_ps(sums, Softcap8(_mm256_load_ps(sums), args.softcap));
        }
        for (int g = 0; g < G; ++g) {
          for (int64_t i = 0; i < n; ++i) sh[g * n_keys + i] = sums[g * KB + i];
        }
      }
    }
  }
  // Softmax per query head.
  for (int64_t g = 0; g < heads; ++g) {
    float* s = scores + g * n_keys;
    float max = s[0];
    for (int64_t j = 1; j < n_keys; ++j) max = std::max(max, s[j]);
    const float inv = 1.0f / Avx2Prims::ExpSum(s, n_keys, max);
    for (int64_t j = 0; j < n_keys; ++j) s[j] *= inv;
  }
  // Pass 2: weighted sum of values, four keys at a time (a missing key weighs 0).
  std::fill(acc, acc + heads * hd, 0.0f);
  next_prefetch = first_key;
  for (int64_t b = first_block, first = b * block_size; first < num_keys;
       first += block_size, ++b) {
    const int64_t rows = std::min(block_size, num_keys - first);
    const KvT* v_block = v_base + seq.block_table[b] * block_stride;
    for (int64_t r = std::max<int64_t>(0, first_key - first); r < rows; r += 4) {
      if (first + r >= next_prefetch) {
        const int64_t from = next_prefetch + kPrefetchAhead;
        PrefetchRows(v_base, seq.block_table, block_size, block_stride, slot_stride, span, from,
                     std::min(num_keys, from + kPrefetchRows));
        next_prefetch += kPrefetchRows;
      }
      const int64_t n = std::min<int64_t>(4, rows - r);
      const KvT* vrow[4];
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) vrow[i] = v_block + (r + std::min<int64_t>(i, n - 1)) * slot_stride;
      for (int h = 0; h < H; ++h) {
        const float* sh = scores + static_cast<int64_t>(h) * G * n_keys + first + r - first_key;
        float* ah = acc + static_cast<int64_t>(h) * G * hd;
        float vs[4] = {1.0f, 1.0f, 1.0f, 1.0f};  // kQ8: each value row's scale
        if constexpr (sizeof(KvT) == 1) {
          for (int i = 0; i < n; ++i) vs[i] = Q8RowScale(vrow[i] + h * rs, hd);
        }
        __m256 p[G][4];
#pragma GCC unroll 4
        for (int i = 0; i < 4; ++i) {
#pragma GCC unroll 8
          for (int g = 0; g < G; ++g) {
            p[g][i] = _mm256_set1_ps(i < n ? sh[g * n_keys + i] * vs[i] : 0.0f);
          }
        }
        for (int c = 0; c < hd; c += 8) {
          const int64_t o = h * rs + c;
          const __m256 v0 = Load8(vrow[0] + o), v1 = Load8(vrow[1] + o);
          const __m256 v2 = Load8(vrow[2] + o), v3 = Load8(vrow[3] + o);
#pragma GCC unroll 8
          for (int g = 0; g < G; ++g) {
            __m256 a = _mm256_loadu_ps(ah + g * hd + c);
            a = _mm256_fmadd_ps(p[g][0], v0, a);
            a = _mm256_fmadd_ps(p[g][1], v1, a);
            a = _mm256_fmadd_ps(p[g][2], v2, a);
            a = _mm256_fmadd_ps(p[g][3], v3, a);
            _mm256_storeu_ps(ah + g * hd + c, a);
          }
        }
      }
    }
  }
  std::memcpy(out, acc, sizeof(float) * heads * hd);
}
#endif

using internal::AttendFn;

template <typename KvT>
AttendFn PickBlocked(int group) {
#if FOLIO_HAVE_AVX2_PATH
  switch (group) {
    case 1:
      return &AttendAvx2Blocked<1, KvT>;
    case 2:
      return &AttendAvx2Blocked<2, KvT>;
    case 4:
      return &AttendAvx2Blocked<4, KvT>;
    case 8:
      return &AttendAvx2Blocked<8, KvT>;
  }
#endif
  (void)group;
  return nullptr;
}

AttendFn PickAttendFn(CpuIsa isa, KvDType dtype, int group, int head_dim) {
#if FOLIO_HAVE_AVX2_PATH
  if (isa == CpuIsa::kAvx2) {
    if (head_dim % 8 == 0) {
      AttendFn blocked = dtype == KvDType::kF16  ? PickBlocked<uint16_t>(group)
                         : dtype == KvDType::kQ8 ? PickBlocked<int8_t>(group)
                                                 : PickBlocked<float>(group);
      if (blocked != nullptr) return blocked;
    }
    return dtype == KvDType::kF16  ? &AttendAvx2<uint16_t>
           : dtype == KvDType::kQ8 ? &AttendAvx2<int8_t>
                                   : &AttendAvx2<float>;
  }
#else
  (void)group;
  (void)head_dim;
#endif
  return dtype == KvDType::kF16  ? &AttendPortable<uint16_t>
         : dtype == KvDType::kQ8 ? &AttendPortable<int8_t>
                                 : &AttendPortable<float>;
}

}  // namespace

void PagedAttention(const PagedAttentionArgs& args, absl::Span<const AttentionSeq> seqs,
                    const KvCacheView& kv, ThreadPool* pool) {
  CHECK_GT(kv.num_kv_heads, 0);
  CHECK_EQ(args.num_heads % kv.num_kv_heads, 0)
      << "num_heads " << args.num_heads << " not a multiple of num_kv_heads " << kv.num_kv_heads;
  const int group = args.num_heads / kv.num_kv_heads;
  // Every kernel has windows and softcaps: the tiled one, the AVX-512 and AVX2 per-query
  // ones, the generic body.
  // How many of a sequence's queries (its first ones) go to the tiled kernel.
  auto tiled = [&](const AttentionSeq& s) -> int32_t {
    if (!args.tiled_prefill) return 0;
    if (s.tiled_queries >= 0) return std::min(s.tiled_queries, s.num_queries);
    return s.num_queries > 1 ? s.num_queries : 0;
  };
  const int threads = pool == nullptr ? 1 : pool->num_threads();
  // Tiles as tall as kTileRows allows, halved while the chunks give fewer than four
  // tiles per thread (a short chunk on a wide pool still spreads).
  int32_t tile_queries = internal::TileQueries(group);
  auto count_tiles = [&](int32_t tq) {
    int64_t n = 0;
    for (const AttentionSeq& s : seqs) n += (tiled(s) + tq - 1) / tq * kv.num_kv_heads;
    return n;
  };
  while (tile_queries > 1 && count_tiles(tile_queries) > 0 &&
         count_tiles(tile_queries) < 4 * threads) {
    tile_queries /= 2;
  }
  // A per-query item is one query row and a run of its kv heads: all of them when there
  // are enough items to keep every thread busy (each slot is then read front to back
  // once), fewer when there are few (batch-1 decode still spreads over the pool).
  int64_t num_rows = 0;
  for (const AttentionSeq& s : seqs) {
    const int32_t t = tiled(s);
    num_rows += (t + tile_queries - 1) / tile_queries + (s.num_queries - t);
  }
  int32_t heads_per_item = kv.num_kv_heads;
  while (heads_per_item > 1 && heads_per_item % 2 == 0 &&
         num_rows * (kv.num_kv_heads / heads_per_item) < 4 * threads) {
    heads_per_item /= 2;
  }
  std::vector<Item> items;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const AttentionSeq& seq = seqs[s];
    DCHECK_GE(seq.context_len, seq.num_queries);
    const int64_t start = static_cast<int64_t>(seq.context_len) - seq.num_queries;
    const int32_t num_tiled = tiled(seq);
    for (int32_t i = 0; i < num_tiled; i += tile_queries) {
      const int32_t n = std::min(tile_queries, num_tiled - i);
      for (int32_t h = 0; h < kv.num_kv_heads; ++h) {
        items.push_back({static_cast<int32_t>(s), i, h, n, (start + i + n) * n * group});
      }
    }
    for (int32_t i = num_tiled; i < seq.num_queries; ++i) {
      for (int32_t h = 0; h < kv.num_kv_heads; h += heads_per_item) {
        items.push_back(
            {static_cast<int32_t>(s), i, h, 0, (start + i + 1) * heads_per_item * group});
      }
    }
  }
  // Costliest first: the pool hands out items in order, so the long tiles of a chunk's
  // end do not arrive last.
  std::stable_sort(items.begin(), items.end(),
                   [](const Item& a, const Item& b) { return a.cost > b.cost; });
  AttendFn attend = nullptr;
  if (args.isa == CpuIsa::kAvx2 && args.avx512) {
    attend = internal::PickAttendAvx512Fn(kv.dtype, group, kv.head_dim);
  }
  if (attend == nullptr) attend = PickAttendFn(args.isa, kv.dtype, group, kv.head_dim);
  internal::AttendTileFn attend_tile = nullptr;
  if (args.isa == CpuIsa::kAvx2 && args.avx512) {
    attend_tile = internal::PickAttendTileAvx512Fn(kv.dtype, kv.head_dim);
  }
  if (attend_tile == nullptr) attend_tile = internal::PickAttendTileFn(args.isa, kv.dtype, kv.head_dim);
  ParallelFor(pool, static_cast<int64_t>(items.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const Item& it = items[i];
      if (it.tile_queries > 0) {
        attend_tile(args, seqs[it.seq], it.query, it.tile_queries, it.kv_head, kv);
      } else {
        attend(args, seqs[it.seq], it.query, it.kv_head, heads_per_item, kv);
      }
    }
  });
}

}  // namespace folio::worker::kernels
