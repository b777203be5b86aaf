// Paged attention on the CPU: causal multi-head attention (with grouped-query heads)
// whose keys and values are read from the paged KV cache through each sequence's block
// table. One call serves a whole step: decode rows (one query per sequence) and prefill
// chunks (several queries, causal over the cached prefix plus the chunk) alike.
//
// Slot layout (one layer; V is laid out exactly like K). K and V are each
// [num_blocks, block_size, num_kv_heads, head_dim]; here block_size = 4:
//
//   one sequence, by position      block table           physical blocks of K
//   [ 0  1  2  3 ] logical blk 0 -> table[0] = 5 -> block 5 = slots 20..23 [ 0  1  2  3 ]
//   [ 4  5  6  7 ] logical blk 1 -> table[1] = 2 -> block 2 = slots  8..11 [ 4  5  6  7 ]
//   [ 8  9  .  . ] logical blk 2 -> table[2] = 7 -> block 7 = slots 28..31 [ 8  9  .  . ]
//                                                  (other blocks belong to other sequences)
//
//   slot(pos) = table[pos / block_size] * block_size + pos % block_size
//             e.g. pos 9 -> table[2] * 4 + 1 = 29
//
//   one slot = all kv heads of one token, contiguous:
//   slot 29: [ kv head 0: d0 .. d(head_dim-1) | kv head 1: d0 .. | ... ]
//   element (slot, kv_head, d) = base + (slot * num_kv_heads + kv_head) * row_stride + d
//   (row_stride = head_dim; for the 8-bit cache head_dim + 4: int8 values, then the
//   row's f32 scale, kv_q8.h)
//
// Each slot holds the K (or V) rows of all kv heads for one token, contiguous; one block
// id names the same slot range in every layer. The kernel walks the table block by block
// and reads rows in place: nothing is gathered into a contiguous copy (an f16 or int8
// row is widened to f32 in registers, or a head_dim-sized buffer, just before it is used).
//
// Two kernels share the work. Decode rows (and every row when tiled_prefill is off) run
// the per-query kernel: it scores one query against all its keys, takes the softmax,
// then sums the values (two passes over the keys per query). Prefill chunks (two or more
// queries of one sequence) run the tiled kernel: a tile of several query positions x the
// query heads of one kv group walks the keys once, block by block, with an online
// softmax and the causal mask inside the chunk, so each key/value block is read (and
// widened) once per tile rather than once per query. Both kernels have portable, AVX2
// and (for head_dim % 16 == 0) AVX-512 versions, picked at run time.
//
// A window or a softcap (PagedAttentionArgs): prefill chunks run on the tiled kernel as
// any other (every ISA's tile has both: a window starts the tile's key walk at its first
// query's window and hides older keys row by row; a softcap bends each score before the
// online softmax), decode rows (and every row with tiled_prefill off) on the per-query
// AVX-512 kernel (its walks start at the window; scores softcapped before the softmax),
// else the AVX2 one specialised by group (the same), else the generic body. A one-query
// tile would serve decode too, but is slower at a serving batch
// (bench/worker_attention_bench's BM_WindowAttention).
//
// Thread-safety: stateless; reads the cache and q, writes only `out`. Work is split over
// items on the given pool, costliest first: prefill tiles (sequence, query tile, kv head),
// and decode (sequence, query, run of kv heads) items: every kv head of a query in one
// item when the step has rows enough for the threads, so each slot is read front to back
// once, else fewer.
#ifndef FOLIO_SERVICES_WORKER_KERNELS_PAGED_ATTENTION_H_
#define FOLIO_SERVICES_WORKER_KERNELS_PAGED_ATTENTION_H_

#include <cstdint>

#include "absl/types/span.h"
#include "services/worker/kernels/cpu_isa.h"
#include "services/worker/kernels/kv_cache_view.h"
#include "services/worker/kernels/thread_pool.h"

namespace folio::worker::kernels {

// One sequence's part of the step. Its queries sit at positions
// context_len - num_queries .. context_len - 1, and their K/V must already be in the
// cache (WriteKv runs first), so query i attends keys 0 .. its own position.
struct AttentionSeq {
  int32_t query_offset = 0;  // first row of this sequence in q and out
  int32_t num_queries = 0;   // 1 for decode, the chunk length for prefill
  int32_t context_len = 0;   // tokens in the cache after this step, for this sequence
  const int32_t* block_table = nullptr;  // >= ceil(context_len / block_size) entries
  // Queries [0, tiled_queries) on the tiled kernel, the rest on the per-query kernel, each
  // as a decode row at its position runs; -1: the tiled kernel for a chunk of two or more
  // queries, the per-query kernel for one. The two kernels' sums differ in their last bits
  // (the tiled one's online softmax), so rows the scheduler first computed one at a time
  // (sampled tokens, verified proposals) keep the per-query kernel when a chunk computes
  // them again (a recompute after preemption or recovery): the bits, hence every later
  // draw, are the ones step-by-step decoding gave.
  int32_t tiled_queries = -1;
};

struct PagedAttentionArgs {
  const float* q = nullptr;  // [num_tokens, num_heads * head_dim], rows q_row_stride apart
  int64_t q_row_stride = 0;
  float* out = nullptr;      // [num_tokens, num_heads * head_dim], rows out_row_stride apart
  int64_t out_row_stride = 0;
  int32_t num_heads = 0;     // query heads; a multiple of the cache's num_kv_heads
  float scale = 1.0f;        // usually 1 / sqrt(head_dim)
  CpuIsa isa = BestCpuIsa();
  // With isa kAvx2: also use the AVX-512 (F/BW/VL) kernels where the shape has one
  // (head_dim % 16 == 0). Defaults to what the CPU has under FOLIO_CPU_FEATURES; tests
  // and bench/worker_attention_bench set false to run the AVX2 kernels.
  bool avx512 = EnabledCpuFeatures().avx512;
  // Prefill chunks on the tiled kernel (default); false runs every query on the per-query
  // kernel (kept for comparison: tests and bench/worker_attention_bench).
  bool tiled_prefill = true;
  // Sliding-window layers (Gemma 2/3's local layers): > 0, a query at position p sees
  // only the keys at positions p - window + 1 .. p (window of them, itself included, as
  // llama.cpp's mask: hidden when p - key_pos >= window).
  int32_t window = 0;
  // > 0: each score s (after `scale`) becomes softcap * tanh(s / softcap) before the
  // softmax (Gemma 2).
  float softcap = 0.0f;
};

// out[row, h] = softmax(scale * q[row, h] . K[0..pos]) . V[0..pos], with K/V of kv head
// h / (num_heads / num_kv_heads) read through each sequence's block table.
void PagedAttention(const PagedAttentionArgs& args, absl::Span<const AttentionSeq> seqs,
                    const KvCacheView& kv, ThreadPool* pool);

}  // namespace folio::worker::kernels

#endif  // FOLIO_SERVICES_WORKER_KERNELS_PAGED_ATTENTION_H_
