// The AVX-512 (F/BW/VL) per-query kernel of paged attention: decode rows (and, with
// tiled_prefill off, every row). Same contract as the AVX2 body of paged_attention_cpu.cc
// (one query row, a run of kv heads, scores then softmax then values, two walks over the
// block table; a window starts both walks at its first key, a softcap bends the scores
// before the softmax); what differs is how each walk is done:
//
//   - Scores: G query heads x KB = 16 / G keys at a time, one 16-lane accumulator per
//     (head, key), reduced by one 4-level shuffle/add tree to a single register of 16
//     scores, stored with masks. Keys are taken in pieces of KB consecutive positions
//     across block boundaries (a row walker follows the block table), so short blocks
//     do not leave lanes idle. The running max is kept per lane in a register.
//   - Softmax: a 16-lane exp (Cody-Waite reduction, degree-6 polynomial, vscalefps),
//     masked tails; the scores are not normalised in place: each output is scaled by
//     1 / sum once at the end.
//   - Values: the output accumulators stay in registers for the whole walk (column
//     pieces of W x 16 dims, G x W <= 16 registers), one f16 row widened per key and
//     piece, the weight broadcast from the scores: no accumulator loads or stores per
//     key.
//
// f16 rows are widened in registers (vcvtph2ps). Rows are prefetched kAhead positions
// ahead of each walk (a walk over one kv head is strided and, across blocks, scattered).
// Needs head_dim % 16 == 0 and a group (query heads per kv head) of 1..16 or a multiple
// of 16; PickAttendAvx512Fn returns nullptr otherwise and the caller runs the AVX2 body.
//
// Thread-safety: stateless apart from per-thread scratch; writes only the output rows of
// its item.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "services/worker/kernels/avx512_math.h"
#include "services/worker/kernels/kv_q8.h"
#include "services/worker/kernels/paged_attention_internal.h"
#include "services/worker/kernels/cpu_target.h"

#if defined(__x86_64__)

namespace folio::worker::kernels::internal {
namespace {

using avx512::Exp16;
using avx512::Load16;

constexpr int64_t kAhead = 48;  // prefetch distance, in positions

std::vector<float>& Scratch() {
  thread_local std::vector<float> scratch;
  return scratch;
}

// Follows one kv head's rows position by position through a block table. Reads a table
// entry only when a position of that block is asked for (the table may end there).
template <typename KvT>
struct RowWalker {
  const KvT* base;  // element 0 of this kv head's row in slot 0
  const int32_t* table;
  int64_t block_size;
  int64_t block_stride;
  int64_t slot_stride;
  int64_t b = -1;
  int64_t r = 0;
  const KvT* block = nullptr;

  RowWalker(const KvT* base_, const int32_t* table_, const KvCacheView& kv)
      : base(base_), table(table_), block_size(kv.block_size), block_stride(kv.block_stride()),
        slot_stride(kv.slot_stride()), r(kv.block_size) {}

  // The next Next() returns position `pos`'s row (a fresh walker: before any Next()).
  void Skip(int64_t pos) {
    b = pos / block_size - 1;
    r = block_size;
    for (int64_t i = 0; i < pos % block_size; ++i) Next();
  }

  // The row of the next position.
  __attribute__((always_inline)) const KvT* Next() {
    if (r == block_size) {
      r = 0;
      ++b;
      block = base + table[b] * block_stride;
    }
    return block + (r++) * slot_stride;
  }
};

template <typename KvT>
__attribute__((always_inline)) inline void PrefetchRow(const KvT* p, int64_t bytes) {
  const char* c = reinterpret_cast<const char*>(p);
  for (int64_t off = 0; off < bytes; off += 64) __builtin_prefetch(c + off);
  __builtin_prefetch(c + bytes - 1);
}

// [sum(a[0]), sum(a[1]), ..., sum(a[15])]: 15 adds, 30 shuffles.
FOLIO_T_AVX512 __attribute__((always_inline)) inline __m512 SumEach16(const __m512* a) {
  __m512 b[8], c[4], d[2];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {  // 128-bit lane l of b[i]: pairs of a[2i], a[2i+1]
    b[i] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]),
                         _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]));
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {  // lane l of c[i]: a[4i..4i+3], each summed over lane l
    c[i] = _mm512_add_ps(_mm512_shuffle_ps(b[2 * i], b[2 * i + 1], 0x44),
                         _mm512_shuffle_ps(b[2 * i], b[2 * i + 1], 0xEE));
  }
#pragma GCC unroll 2
  for (int i = 0; i < 2; ++i) {
    d[i] = _mm512_add_ps(_mm512_shuffle_f32x4(c[2 * i], c[2 * i + 1], 0x88),
                         _mm512_shuffle_f32x4(c[2 * i], c[2 * i + 1], 0xDD));
  }
  return _mm512_add_ps(_mm512_shuffle_f32x4(d[0], d[1], 0x88),
                       _mm512_shuffle_f32x4(d[0], d[1], 0xDD));
}

// s[j] = exp(s[j] - max) for j < n; returns the sum.
FOLIO_T_AVX512 inline float ExpSum16(float* s, int64_t n, float max) {
  const __m512 vmax = _mm512_set1_ps(max);
  __m512 acc = _mm512_setzero_ps();
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m512 e = Exp16(_mm512_sub_ps(_mm512_loadu_ps(s + j), vmax));
    _mm512_storeu_ps(s + j, e);
    acc = _mm512_add_ps(acc, e);
  }
  if (j < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - j)) - 1);
    const __m512 e = Exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, s + j), vmax));
    _mm512_mask_storeu_ps(s + j, m, e);
    acc = _mm512_mask_add_ps(acc, m, acc, e);
  }
  return _mm512_reduce_add_ps(acc);
}

// s[j] = cap * tanh(s[j] / cap) for j < n: tanh(y) = sign(y) (1 - e) / (1 + e) with
// e = exp(-2|y|) (a score softcap, Gemma 2).
FOLIO_T_AVX512 inline void Softcap16(float* s, int64_t n, float cap) {
  const __m512 vcap = _mm512_set1_ps(cap);
  const __m512 minus_two_over_cap = _mm512_set1_ps(-2.0f / cap);
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512i sign_bit = _mm512_set1_epi32(INT32_MIN);
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 m =
        n - j >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << (n - j)) - 1);
    const __m512 x = _mm512_maskz_loadu_ps(m, s + j);
    const __m512 e = Exp16(_mm512_mul_ps(_mm512_abs_ps(x), minus_two_over_cap));
    const __m512 t = _mm512_div_ps(_mm512_sub_ps(one, e), _mm512_add_ps(one, e));
    const __m512i sign = _mm512_and_si512(_mm512_castps_si512(x), sign_bit);
    _mm512_mask_storeu_ps(s + j, m, _mm512_castsi512_ps(_mm512_or_si512(
                                        _mm512_castps_si512(_mm512_mul_ps(vcap, t)), sign)));
  }
}

// What the score walk prefetches kAhead positions ahead: `bytes` from each position's
// K row (none when 0) and, with_v, as many from its V row.
struct PrefetchPlan {
  int64_t bytes = 0;
  bool with_v = false;
};

// Scores of G query heads (q, rows hd apart) against keys 0 .. num_keys - 1 of one kv
// head: scores[g * num_keys + j] = scale * q_g . k_j; max[g] = their maximum.
template <int G, typename KvT>
FOLIO_T_AVX512 void Scores(const float* q, RowWalker<KvT> kw, RowWalker<KvT> pf,
                                RowWalker<KvT> vpf, PrefetchPlan plan, int64_t num_keys, int hd,
                                float scale, float* scores, float* max) {
  constexpr int KB = 16 / G;
  const __m512 vscale = _mm512_set1_ps(scale);
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  // Lane g * KB + i of the score register holds key i (lanes past G * KB: key 0).
  alignas(64) int32_t key_lanes[16] = {};
  for (int l = 0; l < G * KB; ++l) key_lanes[l] = l % KB;
  const __m512i key_of_lane = _mm512_load_si512(key_lanes);
  __m512 vmax = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  // Positions pf (and vpf) have passed; num_keys when nothing is prefetched.
  int64_t ahead = num_keys;
  if (plan.bytes > 0) {
    ahead = std::min(kAhead, num_keys);
    for (int64_t i = 0; i < ahead; ++i) pf.Next();
    if (plan.with_v) {
      for (int64_t i = 0; i < ahead; ++i) vpf.Next();
    }
  }
  for (int64_t p = 0; p < num_keys; p += KB) {
    const int n = static_cast<int>(std::min<int64_t>(KB, num_keys - p));
    const KvT* krow[KB];
    krow[0] = kw.Next();
#pragma GCC unroll 16
    for (int i = 1; i < KB; ++i) krow[i] = i < n ? kw.Next() : krow[i - 1];
    for (int i = 0; i < n && ahead < num_keys; ++i, ++ahead) {
      PrefetchRow(pf.Next(), plan.bytes);
      if (plan.with_v) PrefetchRow(vpf.Next(), plan.bytes);
    }
    __m512 dot[16];
#pragma GCC unroll 16
    for (int v = 0; v < 16; ++v) dot[v] = _mm512_setzero_ps();
    for (int c = 0; c < hd; c += 16) {
#pragma GCC unroll 16
      for (int i = 0; i < KB; ++i) {
        const __m512 kc = Load16(krow[i] + c);
#pragma GCC unroll 16
        for (int g = 0; g < G; ++g) {
          dot[g * KB + i] = _mm512_fmadd_ps(kc, _mm512_loadu_ps(q + g * hd + c), dot[g * KB + i]);
        }
      }
    }
    __m512 sums = _mm512_mul_ps(SumEach16(dot), vscale);
    if constexpr (sizeof(KvT) == 1) {  // kQ8: lane g * KB + i times key i's row scale
      alignas(64) float ks[16] = {};
#pragma GCC unroll 16
      for (int i = 0; i < KB; ++i) ks[i] = Q8RowScale(krow[i], hd);
      sums = _mm512_mul_ps(sums, _mm512_permutexvar_ps(key_of_lane, _mm512_load_ps(ks)));
    }
    const __mmask16 nmask = static_cast<__mmask16>((1u << n) - 1);
    __mmask16 valid = 0;
#pragma GCC unroll 16
    for (int g = 0; g < G; ++g) {
      valid |= static_cast<__mmask16>(nmask << (g * KB));
      const __m512 lanes = _mm512_permutexvar_ps(
          _mm512_add_epi32(iota, _mm512_set1_epi32(g * KB)), sums);  // lane i = key p + i
      _mm512_mask_storeu_ps(scores + g * num_keys + p, nmask, lanes);
    }
    vmax = _mm512_mask_max_ps(vmax, valid, vmax, sums);
  }
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, vmax);
  for (int g = 0; g < G; ++g) {
    max[g] = lanes[g * KB];
    for (int i = 1; i < KB; ++i) max[g] = std::max(max[g], lanes[g * KB + i]);
  }
}

// out[g][c0 .. c0 + 16 W) = inv[g] * sum_j w[g][j] v_j[c0 ..]: accumulators in registers.
template <int G, int W, typename KvT>
FOLIO_T_AVX512 void ValueColumns(const float* w, RowWalker<KvT> vw, RowWalker<KvT> pf,
                                      int64_t pf_bytes, int64_t num_keys, int hd, int c0,
                                      const float* inv, float* out) {
  __m512 acc[G][W];
#pragma GCC unroll 16
  for (int g = 0; g < G; ++g) {
#pragma GCC unroll 8
    for (int x = 0; x < W; ++x) acc[g][x] = _mm512_setzero_ps();
  }
  int64_t ahead = num_keys;  // positions pf has passed; num_keys: no prefetch
  if (pf_bytes > 0) {
    ahead = std::min(kAhead, num_keys);
    for (int64_t i = 0; i < ahead; ++i) pf.Next();
  }
  for (int64_t j = 0; j < num_keys; ++j) {
    const KvT* vrow = vw.Next();
    const KvT* v = vrow + c0;
    float vs = 1.0f;  // kQ8: the row's scale, folded into the weights
    if constexpr (sizeof(KvT) == 1) vs = Q8RowScale(vrow, hd);
    if (ahead < num_keys) {
      PrefetchRow(pf.Next(), pf_bytes);
      ++ahead;
    }
    __m512 vv[W];
#pragma GCC unroll 8
    for (int x = 0; x < W; ++x) vv[x] = Load16(v + 16 * x);
#pragma GCC unroll 16
    for (int g = 0; g < G; ++g) {
      const __m512 p = _mm512_set1_ps(w[g * num_keys + j] * vs);
#pragma GCC unroll 8
      for (int x = 0; x < W; ++x) acc[g][x] = _mm512_fmadd_ps(p, vv[x], acc[g][x]);
    }
  }
#pragma GCC unroll 16
  for (int g = 0; g < G; ++g) {
    const __m512 s = _mm512_set1_ps(inv[g]);
#pragma GCC unroll 8
    for (int x = 0; x < W; ++x) {
      _mm512_storeu_ps(out + static_cast<int64_t>(g) * hd + c0 + 16 * x, _mm512_mul_ps(acc[g][x], s));
    }
  }
}

// Every column of the G outputs: pieces of W x 16 columns while they fit, then narrower.
// pf_bytes: bytes of each V row (from the row's start) prefetched in the first piece.
template <int G, int W, typename KvT>
FOLIO_T_AVX512 void Values(const float* w, const RowWalker<KvT>& vw, int64_t pf_bytes,
                                int64_t num_keys, int hd, int c0, const float* inv, float* out) {
  for (; c0 + 16 * W <= hd; c0 += 16 * W) {
    ValueColumns<G, W, KvT>(w, vw, vw, c0 == 0 ? pf_bytes : 0, num_keys, hd, c0, inv, out);
  }
  if constexpr (W > 1) Values<G, W / 2, KvT>(w, vw, pf_bytes, num_keys, hd, c0, inv, out);
}

// Widest column piece whose G x W accumulators fit in 16 registers (a power of two, at
// most 8 = 128 columns).
constexpr int PieceWidth(int g) { return g == 1 ? 8 : g == 2 ? 8 : g <= 4 ? 4 : g <= 8 ? 2 : 1; }

template <int G, typename KvT>
FOLIO_T_AVX512 void AttendDecodeAvx512(const PagedAttentionArgs& args, const AttentionSeq& seq,
                                            int32_t query, int32_t head_begin, int32_t head_count,
                                            const KvCacheView& kv) {
  const int hd = kv.head_dim;
  const int group = args.num_heads / kv.num_kv_heads;  // G, or a multiple of G = 16
  // The query's position is pos = context_len - num_queries + query; it sees keys
  // first_key .. pos (all of them, or a window's: PagedAttentionArgs::window), walked
  // from first_key on, so every index below is relative to first_key.
  const int64_t pos = static_cast<int64_t>(seq.context_len) - seq.num_queries + query;
  const int64_t first_key = args.window > 0 ? std::max<int64_t>(0, pos - args.window + 1) : 0;
  const int64_t num_keys = pos + 1 - first_key;
  const float softcap = args.softcap;
  const int64_t row = static_cast<int64_t>(seq.query_offset) + query;
  std::vector<float>& scratch = Scratch();
  const size_t need = static_cast<size_t>(G) * num_keys;
  if (scratch.size() < need) scratch.resize(need);
  float* scores = scratch.data();  // [G][num_keys]
  float max[G], inv[G];
  // The first head's walks prefetch the whole span of this item's heads in each slot
  // (contiguous, and what the later heads read): K and, when the sequence's K and V
  // spans fit in L2 beside each other, V during the score walk too; later heads find
  // their rows in L2 and prefetch only those.
  const int64_t row_bytes = static_cast<int64_t>(hd) * sizeof(KvT) + (sizeof(KvT) == 1 ? 4 : 0);
  const int64_t span_bytes = row_bytes * head_count;
  const bool v_early = 2 * num_keys * span_bytes <= (int64_t{256} << 10);
  for (int32_t h = head_begin; h < head_begin + head_count; ++h) {
    const bool first = h == head_begin;
    PrefetchPlan plan;
    plan.bytes = first ? span_bytes : row_bytes;
    plan.with_v = first && v_early;
    const int64_t v_pf = first ? (v_early ? 0 : span_bytes) : row_bytes;
    RowWalker<KvT> kw(static_cast<const KvT*>(kv.k) + h * kv.row_stride(), seq.block_table, kv);
    RowWalker<KvT> vw(static_cast<const KvT*>(kv.v) + h * kv.row_stride(), seq.block_table, kv);
    if (first_key > 0) {
      kw.Skip(first_key);
      vw.Skip(first_key);
    }
    for (int sub = 0; sub < group; sub += G) {
      const int64_t head0 = static_cast<int64_t>(h) * group + sub;
      const float* q = args.q + row * args.q_row_stride + head0 * hd;
      float* out = args.out + row * args.out_row_stride + head0 * hd;
      const bool once = sub == 0;  // prefetch in the first sub-group's walks only
      Scores<G, KvT>(q, kw, kw, vw, once ? plan : PrefetchPlan{}, num_keys, hd, args.scale,
                     scores, max);
      if (softcap > 0.0f) {
        // softcap * tanh(s / softcap) is increasing: the maximum stays the maximum's.
        for (int g = 0; g < G; ++g) {
          Softcap16(scores + g * num_keys, num_keys, softcap);
          max[g] = softcap * std::tanh(max[g] / softcap);
        }
      }
      for (int g = 0; g < G; ++g) inv[g] = 1.0f / ExpSum16(scores + g * num_keys, num_keys, max[g]);
      Values<G, PieceWidth(G), KvT>(scores, vw, once ? v_pf : 0, num_keys, hd, 0, inv, out);
    }
  }
}

template <typename KvT, int... Gs>
AttendFn PickGroup(int group, std::integer_sequence<int, Gs...>) {
  AttendFn fn = nullptr;
  ((group == Gs + 1 ? (fn = &AttendDecodeAvx512<Gs + 1, KvT>, 0) : 0), ...);
  return fn;
}

}  // namespace

AttendFn PickAttendAvx512Fn(KvDType dtype, int group, int head_dim) {
  if (head_dim % 16 != 0 || group < 1) return nullptr;
  if (group > 16) {
    if (group % 16 != 0) return nullptr;
    group = 16;  // sub-groups of 16 heads
  }
  const auto gs = std::make_integer_sequence<int, 16>{};
  switch (dtype) {
    case KvDType::kF16:
      return PickGroup<uint16_t>(group, gs);
    case KvDType::kQ8:
      return PickGroup<int8_t>(group, gs);
    case KvDType::kF32:
      break;
  }
  return PickGroup<float>(group, gs);
}

}  // namespace folio::worker::kernels::internal

#else  // !defined(__x86_64__)

namespace folio::worker::kernels::internal {
AttendFn PickAttendAvx512Fn(KvDType, int, int) { return nullptr; }
}  // namespace folio::worker::kernels::internal

#endif
