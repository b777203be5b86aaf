// CUDA kernels of the worker, as host-callable launchers. Every launcher enqueues its
// work on `stream` and returns at once; none synchronizes. Inputs are validated by the
// engine before any launch (as on the CPU), so launchers only check their own limits
// (supported head sizes, group sizes) and report those as InvalidArgument.
//
// Each kernel has a CPU reference in services/worker/kernels/ that its tests compare
// against over a grid of shapes (kernels_test.cc):
//   WriteKv             <- kernels::WriteKv        (cache_ops.h)
//   CopyBlocks          <- kernels::CopyBlocks     (cache_ops.h)
//   PagedAttention      <- kernels::PagedAttention (paged_attention.h)
//   RmsNorm             <- kernels::RmsNorm        (rms_norm.h)
//   ApplyRope           <- kernels::ApplyRope      (rope.h)
//   SiluAndMul          <- kernels::SwiGlu         (swiglu.h)
//   EmbedTokens         <- a row copy
//
// Data types. Activations flowing between GEMMs are in the model's compute dtype
// (f32, f16 or bf16: the weights' dtype on the device); the residual stream, q, the
// attention output before conversion and logits are f32; the KV cache is f16 or bf16.
// The KV layout is the CPU one (paged_attention.h): per layer, K and V are each
// [num_blocks, block_size, num_kv_heads, head_dim].
#ifndef FOLIO_SERVICES_WORKER_CUDA_KERNELS_H_
#define FOLIO_SERVICES_WORKER_CUDA_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"

namespace folio::worker::cuda {

enum class DType : int32_t { kF32, kF16, kBF16 };

inline int DTypeBytes(DType dtype) { return dtype == DType::kF32 ? 4 : 2; }
const char* DTypeName(DType dtype);

// One layer's paged K and V on the device (non-owning).
struct KvView {
  void* k = nullptr;
  void* v = nullptr;
  DType dtype = DType::kF16;  // kF16 or kBF16
  int64_t num_blocks = 0;
  int32_t block_size = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
};

// Head sizes and GQA group sizes (num_heads / num_kv_heads) with compiled attention
// kernels. Others are refused with InvalidArgument.
bool AttentionSupports(int32_t head_dim, int32_t group_size);

// Token i's K row at k + i * row_stride and V row at v + i * row_stride (f32,
// num_kv_heads * head_dim values each) go to slot slots[i] of `kv`.
void LaunchWriteKv(const float* k, const float* v, int64_t row_stride, const int64_t* slots,
                   int32_t num_tokens, const KvView& kv, cudaStream_t stream);

// Copies block src[i] to dst[i] (K and V) in every layer. Layer l's K starts at
// base + l * layer_stride_bytes, its V at base + l * layer_stride_bytes + v_offset_bytes;
// each block is block_bytes long. Copies run in order only where they do not overlap
// (the cachemgr never asks for a chain within one step).
void LaunchCopyBlocks(void* base, int64_t layer_stride_bytes, int64_t v_offset_bytes,
                      int32_t num_layers, int64_t block_bytes, const int32_t* src,
                      const int32_t* dst, int32_t num_copies, cudaStream_t stream);

// Paged attention over query rows. Row r belongs to sequence row_seq[r], sits at
// position row_context[r] - 1 and attends keys 0 .. row_context[r] - 1 of that sequence
// (decode rows and the rows of a prefill chunk alike: a chunk's rows are causal over the
// cached prefix plus the chunk). Block tables are rows of a padded
// [num_seqs, block_table_stride] matrix.
struct PagedAttentionParams {
  const float* q = nullptr;  // [num_rows, num_heads * head_dim], rows q_row_stride apart
  int64_t q_row_stride = 0;
  float* out = nullptr;      // [num_rows, num_heads * head_dim], rows out_row_stride apart
  int64_t out_row_stride = 0;
  int32_t num_rows = 0;
  int32_t num_heads = 0;
  float scale = 1.0f;
  const int32_t* row_seq = nullptr;
  const int32_t* row_context = nullptr;
  const int32_t* block_tables = nullptr;
  int32_t block_table_stride = 0;
  int32_t max_context = 0;     // the largest row_context (sizes the grid)
  int32_t partition_size = 0;  // keys per thread block; 0 = chosen (see below)
  float* workspace = nullptr;  // PagedAttentionWorkspaceFloats() floats, or null for one partition
  int64_t workspace_floats = 0;  // its size
};

// Keys one thread block handles. A row whose context fits one partition is finished by
// one block (the "v1" path); longer rows are split into partitions whose partial
// softmax results a second kernel merges (the "v2" path), so long contexts still fill
// the device. Must be a multiple of 32. With partition_size 0 the launcher starts from
// kDefaultPartitionSize and halves it, down to kMinPartitionSize, while the grid has
// fewer than two blocks per multiprocessor and the workspace holds the partitions (a
// single long sequence then spreads over the whole device).
inline constexpr int32_t kDefaultPartitionSize = 512;
inline constexpr int32_t kMinPartitionSize = 64;

// Workspace for params of these sizes. With partition_size 0 it includes room for the
// smaller partitions of small grids (kSmallGridPartitions row-partitions).
inline constexpr int64_t kSmallGridPartitions = 512;
int64_t PagedAttentionWorkspaceFloats(int32_t num_rows, int32_t num_heads, int32_t head_dim,
                                      int32_t max_context, int32_t partition_size);

absl::Status LaunchPagedAttention(const PagedAttentionParams& params, const KvView& kv,
                                  cudaStream_t stream);

// out[r] = weight * x[i] / sqrt(mean(x[i]^2) + eps) with i = row_index[r] (or r when
// row_index is null: gathering the rows that need logits); x f32, weight f32, out in
// out_dtype.
void LaunchRmsNorm(const float* x, int64_t x_stride, const int32_t* row_index, int32_t rows,
                   int32_t dim,
                   const float* weight, float eps, void* out, int64_t out_stride,
                   DType out_dtype, cudaStream_t stream);

// RoPE in place on the first num_heads * head_dim values of each f32 row (llama2.c
// convention: adjacent pairs), row r at positions[r].
void LaunchRope(float* x, int64_t row_stride, int32_t rows, const int32_t* positions,
                int32_t num_heads, int32_t head_dim, float theta, cudaStream_t stream);

// out[r, i] = silu(gate_up[r, i]) * gate_up[r, hidden + i]; gate_up f32 [rows, 2 * hidden],
// out [rows, hidden] in out_dtype.
void LaunchSiluAndMul(const float* gate_up, int32_t rows, int32_t hidden, void* out,
                      DType out_dtype, cudaStream_t stream);

// x[r] = table[tokens[r] - vocab_begin] widened to f32; table [vocab_rows, dim] in
// table_dtype holds vocabulary rows [vocab_begin, vocab_begin + vocab_rows) (a
// vocab-parallel rank's slice, or the whole vocabulary from 0). A token outside them
// embeds as zeros (another rank holds its row).
void LaunchEmbedTokens(const int32_t* tokens, int32_t rows, const void* table,
                       DType table_dtype, int32_t vocab_begin, int32_t vocab_rows, int32_t dim,
                       float* x, cudaStream_t stream);

// For each of `rows` rows of `vocab` f32 logits: lse[r] = log(sum(exp(logits[r])))
// (computed stably, max first) and argmax[r] = the index of the largest logit, the lowest
// index on a tie (as the CPU sampler's greedy choice), with its log-prob
// argmax_logprob[r] = logits[r][argmax[r]] - lse[r].
void LaunchLogSumExpArgmax(const float* logits, int32_t rows, int32_t vocab, float* lse,
                           int32_t* argmax, float* argmax_logprob, cudaStream_t stream);

// Converts n f32 values to dtype (a plain copy for kF32).
void LaunchConvert(const float* in, int64_t n, void* out, DType dtype, cudaStream_t stream);

// Fills n values with a deterministic pseudo-random uniform in [lo, hi), keyed by
// (seed, index): weights for benchmarks made on the device, with no host copy.
void LaunchFillUniform(void* data, int64_t n, DType dtype, uint64_t seed, float lo, float hi,
                       cudaStream_t stream);

}  // namespace folio::worker::cuda

#endif  // FOLIO_SERVICES_WORKER_CUDA_KERNELS_H_
