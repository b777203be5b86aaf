// Internal to the paged attention kernels (paged_attention_cpu.cc dispatches, this
// declares the tiled prefill kernel of paged_attention_prefill_cpu.cc). Not for callers
// outside services/worker/kernels: use PagedAttention (paged_attention.h).
//
// Thread-safety: the functions are stateless apart from per-thread scratch; one call
// writes only the output rows of its tile.
#ifndef FOLIO_SERVICES_WORKER_KERNELS_PAGED_ATTENTION_INTERNAL_H_
#define FOLIO_SERVICES_WORKER_KERNELS_PAGED_ATTENTION_INTERNAL_H_

#include <cstdint>

#include "services/worker/kernels/paged_attention.h"

namespace folio::worker::kernels::internal {

// Query rows (query positions x query heads of one kv group) per prefill tile: a tile
// covers up to max(1, kTileRows / group) query positions (fewer when the step's chunks
// would give the pool too few tiles). 96 measured faster than 32 and 48 on long
// contexts (docs/benchmarks.md); the per-tile state (96 x head_dim accumulators) then
// lives in L2.
inline constexpr int kTileRows = 96;
// Keys scored at a time (a piece of consecutive positions, across block boundaries).
inline constexpr int kKeyTile = 32;

inline int TileQueries(int group) { return group >= kTileRows ? 1 : kTileRows / group; }

// Attention for queries [query_begin, query_begin + query_count) of `seq` (a prefill
// chunk), query heads of kv head `kv_head`: one pass over the keys 0 .. the last query's
// position, through the block table, with an online softmax (running max and
// sum per query row), causal within the chunk. Each key and value row is read (and
// widened from f16) once per tile instead of once per query.
using AttendTileFn = void (*)(const PagedAttentionArgs& args, const AttentionSeq& seq,
                              int32_t query_begin, int32_t query_count, int32_t kv_head,
                              const KvCacheView& kv);

// The per-query kernel: kv heads [head_begin, head_begin + head_count) of query row
// `query` of `seq` (scores, softmax, values).
using AttendFn = void (*)(const PagedAttentionArgs& args, const AttentionSeq& seq, int32_t query,
                          int32_t head_begin, int32_t head_count, const KvCacheView& kv);

// The AVX-512 per-query kernel (paged_attention_avx512.cc) for this shape, or nullptr
// when it has none (head_dim % 16 != 0; group not 1..16 nor a multiple of 16; not
// x86-64). Only for a CPU with AVX-512 F/BW/VL (PagedAttentionArgs::avx512).
AttendFn PickAttendAvx512Fn(KvDType dtype, int group, int head_dim);

// The tile kernel for this ISA and cache dtype (AVX2 needs head_dim % 8 == 0; else the
// portable kernel).
AttendTileFn PickAttendTileFn(CpuIsa isa, KvDType dtype, int head_dim);

// The AVX-512 tile kernel (paged_attention_prefill_avx512.cc), or nullptr when
// head_dim % 16 != 0 (or not x86-64). Only for a CPU with AVX-512 F/BW/VL.
AttendTileFn PickAttendTileAvx512Fn(KvDType dtype, int head_dim);

}  // namespace folio::worker::kernels::internal

#endif  // FOLIO_SERVICES_WORKER_KERNELS_PAGED_ATTENTION_INTERNAL_H_
