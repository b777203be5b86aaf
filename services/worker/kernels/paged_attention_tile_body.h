// The tiled prefill kernel's body (see paged_attention_prefill_cpu.cc for the algorithm),
// written once over a primitives policy (Widen, Scores, Softmax, Accumulate) and
// instantiated by paged_attention_prefill_cpu.cc (portable, AVX2) and
// paged_attention_prefill_avx512.cc (AVX-512). Internal to services/worker/kernels.
//
// Thread-safety: per-thread scratch; one call writes only the output rows of its tile.
#ifndef FOLIO_SERVICES_WORKER_KERNELS_PAGED_ATTENTION_TILE_BODY_H_
#define FOLIO_SERVICES_WORKER_KERNELS_PAGED_ATTENTION_TILE_BODY_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "services/worker/kernels/paged_attention_internal.h"

namespace folio::worker::kernels::internal {

// Per-thread scratch, grown as needed.
inline std::vector<float>& TileScratch() {
  thread_local std::vector<float> scratch;
  return scratch;
}

// Prefetches the K and V rows of kv head `head` for key positions [from, to).
template <typename KvT>
inline void PrefetchKeys(const KvT* k_base, const KvT* v_base, const int32_t* table,
                         int64_t block_size, int64_t block_stride, int64_t slot_stride, int hd,
                         int64_t from, int64_t to) {
  // A kQ8 row's scale sits after its values.
  const int64_t row_bytes = static_cast<int64_t>(hd) * sizeof(KvT) + (sizeof(KvT) == 1 ? 4 : 0);
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
  // Position of the tile's first query; the tile's keys are 0 .. pos0 + query_count - 1,
  // or with a window (PagedAttentionArgs::window) from the first query's window on.
  const int64_t pos0 = static_cast<int64_t>(seq.context_len) - seq.num_queries + query_begin;
  const int64_t num_keys = pos0 + query_count;
  const int64_t window = args.window;
  const int64_t first_key = window > 0 ? std::max<int64_t>(0, pos0 - window + 1) : 0;
  const float softcap = args.softcap;

  std::vector<float>& scratch = TileScratch();
  // kQ8 keys are dequantized (scale applied) into kq before Scores, which then reads f32.
  constexpr bool kQ8 = sizeof(KvT) == 1;
  const size_t need = (kQ8 ? 3 : 2) * static_cast<size_t>(kKeyTile) * hd +  // K, V (, kq)
                      static_cast<size_t>(R) * (kKeyTile + 3 + hd);  // p, m, l, alpha, acc
  if (scratch.size() < need) scratch.resize(need);
  float* kf = scratch.data();
  float* vf = kf + static_cast<size_t>(kKeyTile) * hd;
  float* p = vf + static_cast<size_t>(kKeyTile) * hd;  // [R][kKeyTile]
  float* m = p + static_cast<size_t>(R) * kKeyTile;
  float* l = m + R;
  float* alpha = l + R;
  float* acc = alpha + R;  // [R][hd]
  float* kq = acc + static_cast<size_t>(R) * hd;  // [kKeyTile][hd], kQ8 only
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

  const KvT* k_base = static_cast<const KvT*>(kv.k) + kv_head * kv.row_stride();
  const KvT* v_base = static_cast<const KvT*>(kv.v) + kv_head * kv.row_stride();
  const KvT* kraw[kKeyTile];
  const float* kdeq[kKeyTile];  // kQ8: the dequantized keys
  const float* vrow[kKeyTile];

  // Pieces of kKeyTile consecutive keys (a piece may span table blocks: rows are read
  // through per-key pointers).
  int64_t b = first_key / block_size, r_in_block = first_key % block_size;  // of key0
  for (int64_t key0 = first_key; key0 < num_keys; key0 += kKeyTile) {
    const int nk = static_cast<int>(std::min<int64_t>(kKeyTile, num_keys - key0));
    PrefetchKeys(k_base, v_base, seq.block_table, block_size, block_stride, slot_stride, hd,
                 key0 + nk, std::min<int64_t>(num_keys, key0 + nk + kKeyTile));
    for (int j = 0; j < nk; ++j) {
      const int64_t off = seq.block_table[b] * block_stride + r_in_block * slot_stride;
      kraw[j] = k_base + off;
      if constexpr (kQ8) kdeq[j] = Prims::Widen(kraw[j], kq + static_cast<size_t>(j) * hd, hd);
      vrow[j] = Prims::Widen(v_base + off, vf + static_cast<size_t>(j) * hd, hd);
      if (++r_in_block == block_size) {
        r_in_block = 0;
        ++b;
      }
    }
    // Rows before r0 (query positions before key0) see none of this piece: skipped.
    const int r0 = static_cast<int>(std::clamp<int64_t>((key0 - pos0) * group, 0, R - 1));
    if constexpr (kQ8) {
      Prims::Scores(qrow.data() + r0, R - r0, kdeq, nk, hd, args.scale, kf, p + r0 * kKeyTile);
    } else {
      Prims::Scores(qrow.data() + r0, R - r0, kraw, nk, hd, args.scale, kf, p + r0 * kKeyTile);
    }
    for (int r = r0; r < R; ++r) {
      const int64_t pos = pos0 + r / group;
      int nv = static_cast<int>(std::clamp<int64_t>(pos - key0 + 1, 0, nk));
      float* pr = p + r * kKeyTile;
      if (softcap > 0.0f && nv > 0) Prims::Softcap(pr, nv, softcap);
      if (window > 0) {
        // Keys before pos - window + 1 are hidden from this row: -inf, or none visible
        // in this piece at all (a later row whose window starts past it).
        const int hidden = static_cast<int>(std::clamp<int64_t>(pos - window + 1 - key0, 0, nk));
        if (hidden >= nv) {
          nv = 0;
        } else {
          std::fill(pr, pr + hidden, -std::numeric_limits<float>::infinity());
        }
      }
      alpha[r] = Prims::Softmax(pr, nv, nk, m[r], l[r]);
    }
    Prims::Accumulate(acc + static_cast<int64_t>(r0) * hd, R - r0, hd, alpha + r0,
                      p + r0 * kKeyTile, vrow, nk);
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


}  // namespace folio::worker::kernels::internal

#endif  // FOLIO_SERVICES_WORKER_KERNELS_PAGED_ATTENTION_TILE_BODY_H_
