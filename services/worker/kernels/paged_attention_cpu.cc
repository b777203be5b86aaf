// CPU paged attention. Each work item is one (sequence, query row, kv head): it scores
// the query heads of that kv head's group against every cached key up to the query's
// position (reading each key row once for the whole group), takes a softmax per head,
// then accumulates the value rows. Both passes walk the block table block by block.
//
// The body is written once (AttendBody) over a "primitives" policy: portable C++ or
// AVX2/FMA/F16C intrinsics. The AVX2 instantiation is compiled through a function with a
// target attribute and chosen at run time from CpuIsa, so the library still runs on any
// x86-64 (and builds on other architectures, where only the portable path exists).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "glog/logging.h"
#include "services/worker/kernels/half.h"
#include "services/worker/kernels/paged_attention.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define FOLIO_HAVE_AVX2_PATH 1
#else
#define FOLIO_HAVE_AVX2_PATH 0
#endif

namespace folio::worker::kernels {
namespace {

struct PortablePrims {
  // Returns a pointer to row as f32: the row itself, or `buf` filled from f16.
  static const float* Widen(const float* row, float* /*buf*/, int /*n*/) { return row; }
  static const float* Widen(const uint16_t* row, float* buf, int n) {
    for (int i = 0; i < n; ++i) buf[i] = HalfToFloat(row[i]);
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
#define FOLIO_AVX2_TARGET __attribute__((target("avx2,fma,f16c")))

struct Avx2Prims {
  FOLIO_AVX2_TARGET static const float* Widen(const float* row, float*, int) { return row; }
  FOLIO_AVX2_TARGET static const float* Widen(const uint16_t* row, float* buf, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + i));
      _mm256_storeu_ps(buf + i, _mm256_cvtph_ps(h));
    }
    for (; i < n; ++i) buf[i] = HalfToFloat(row[i]);
    return buf;
  }
  FOLIO_AVX2_TARGET static float Dot(const float* a, const float* b, int n) {
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
  FOLIO_AVX2_TARGET static void Axpy(float a, const float* x, float* y, int n) {
    const __m256 va = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
      _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    }
    for (; i < n; ++i) y[i] += a * x[i];
  }
  // e^x for x <= 0 (softmax arguments), 8 lanes: Cody-Waite range reduction to
  // r in [-ln2/2, ln2/2] and a degree-6 polynomial; relative error below 2e-7.
  FOLIO_AVX2_TARGET static __m256 Exp(__m256 x) {
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));  // below this e^x is ~0 for softmax
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.0f / 720);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
  }
  FOLIO_AVX2_TARGET static float ExpSum(float* s, int64_t n, float max) {
    const __m256 vmax = _mm256_set1_ps(max);
    __m256 acc = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
      const __m256 e = Exp(_mm256_sub_ps(_mm256_loadu_ps(s + j), vmax));
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
  int32_t query;
  int32_t kv_head;
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
  const int64_t row_bytes = static_cast<int64_t>(hd) * sizeof(KvT);
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
  const int64_t row = static_cast<int64_t>(seq.query_offset) + query;
  const float* q = args.q + row * args.q_row_stride + static_cast<int64_t>(kv_head) * group * hd;
  float* out = args.out + row * args.out_row_stride + static_cast<int64_t>(kv_head) * group * hd;

  std::vector<float>& scratch = Scratch();
  const size_t need = static_cast<size_t>(group) * num_keys + hd + static_cast<size_t>(group) * hd;
  if (scratch.size() < need) scratch.resize(need);
  float* scores = scratch.data();              // [group][num_keys]
  float* widened = scores + group * num_keys;  // [hd]
  float* acc = widened + hd;                   // [group][hd]

  const KvT* k_base = static_cast<const KvT*>(kv.k) + static_cast<int64_t>(kv_head) * hd;
  const KvT* v_base = static_cast<const KvT*>(kv.v) + static_cast<int64_t>(kv_head) * hd;

  // Pass 1: scores, block by block through the table.
  for (int64_t first = 0, b = 0; first < num_keys; first += block_size, ++b) {
    const int64_t rows = std::min(block_size, num_keys - first);
    const KvT* k_block = k_base + seq.block_table[b] * block_stride;
    for (int64_t r = 0; r < rows; ++r) {
      if ((first + r) % kPrefetchRows == 0) {
        const int64_t from = first + r + kPrefetchAhead;
        PrefetchRows(k_base, seq.block_table, block_size, block_stride, slot_stride, hd, from,
                     std::min(num_keys, from + kPrefetchRows));
      }
      const float* k = Prims::Widen(k_block + r * slot_stride, widened, hd);
      for (int g = 0; g < group; ++g) {
        scores[g * num_keys + first + r] = Prims::Dot(q + g * hd, k, hd) * args.scale;
      }
    }
  }
  // Softmax per query head.
  for (int g = 0; g < group; ++g) {
    float* s = scores + g * num_keys;
    float max = s[0];
    for (int64_t j = 1; j < num_keys; ++j) max = std::max(max, s[j]);
    const float sum = Prims::ExpSum(s, num_keys, max);
    const float inv = 1.0f / sum;
    for (int64_t j = 0; j < num_keys; ++j) s[j] *= inv;
  }
  // Pass 2: weighted sum of values.
  std::fill(acc, acc + group * hd, 0.0f);
  for (int64_t first = 0, b = 0; first < num_keys; first += block_size, ++b) {
    const int64_t rows = std::min(block_size, num_keys - first);
    const KvT* v_block = v_base + seq.block_table[b] * block_stride;
    for (int64_t r = 0; r < rows; ++r) {
      if ((first + r) % kPrefetchRows == 0) {
        const int64_t from = first + r + kPrefetchAhead;
        PrefetchRows(v_base, seq.block_table, block_size, block_stride, slot_stride, hd, from,
                     std::min(num_keys, from + kPrefetchRows));
      }
      const float* v = Prims::Widen(v_block + r * slot_stride, widened, hd);
      for (int g = 0; g < group; ++g) {
        Prims::Axpy(scores[g * num_keys + first + r], v, acc + g * hd, hd);
      }
    }
  }
  std::memcpy(out, acc, sizeof(float) * group * hd);
}

template <typename KvT>
void AttendPortable(const PagedAttentionArgs& args, const AttentionSeq& seq, int32_t query,
                    int32_t kv_head, const KvCacheView& kv) {
  AttendBody<PortablePrims, KvT>(args, seq, query, kv_head, kv);
}

#if FOLIO_HAVE_AVX2_PATH
template <typename KvT>
FOLIO_AVX2_TARGET void AttendAvx2(const PagedAttentionArgs& args, const AttentionSeq& seq,
                                  int32_t query, int32_t kv_head, const KvCacheView& kv) {
  AttendBody<Avx2Prims, KvT>(args, seq, query, kv_head, kv);
}
#endif

using AttendFn = void (*)(const PagedAttentionArgs&, const AttentionSeq&, int32_t, int32_t,
                          const KvCacheView&);

AttendFn PickAttendFn(CpuIsa isa, KvDType dtype) {
#if FOLIO_HAVE_AVX2_PATH
  if (isa == CpuIsa::kAvx2) {
    return dtype == KvDType::kF16 ? &AttendAvx2<uint16_t> : &AttendAvx2<float>;
  }
#endif
  return dtype == KvDType::kF16 ? &AttendPortable<uint16_t> : &AttendPortable<float>;
}

}  // namespace

void PagedAttention(const PagedAttentionArgs& args, absl::Span<const AttentionSeq> seqs,
                    const KvCacheView& kv, ThreadPool* pool) {
  CHECK_GT(kv.num_kv_heads, 0);
  CHECK_EQ(args.num_heads % kv.num_kv_heads, 0)
      << "num_heads " << args.num_heads << " not a multiple of num_kv_heads " << kv.num_kv_heads;
  std::vector<Item> items;
  for (size_t s = 0; s < seqs.size(); ++s) {
    DCHECK_GE(seqs[s].context_len, seqs[s].num_queries);
    for (int32_t i = 0; i < seqs[s].num_queries; ++i) {
      for (int32_t h = 0; h < kv.num_kv_heads; ++h) {
        items.push_back({static_cast<int32_t>(s), i, h});
      }
    }
  }
  const AttendFn attend = PickAttendFn(args.isa, kv.dtype);
  ParallelFor(pool, static_cast<int64_t>(items.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const Item& it = items[i];
      attend(args, seqs[it.seq], it.query, it.kv_head, kv);
    }
  });
}

}  // namespace folio::worker::kernels
