// Paged attention on the GPU (see kernels.h for the contract).
//
// Grid: (partition, kv head, query row); 128 threads per block. One block computes the
// attention of every query head of one GQA group (num_heads / num_kv_heads heads share
// one kv head) for one row over one partition of its keys, so each K and V row is read
// from memory once per group rather than once per query head.
//
// Threads are split into token groups: each thread of a group owns one or two 16-byte
// chunks (8 or 16 values) of a K or V row, so a group reads one token's row with
// coalesced 16-byte loads, and each thread has four 16-byte loads issued before their
// first use (kept as raw words until then). Two chunks per thread halve the threads per token and so the shuffle steps
// and address arithmetic per byte, which is what bounds this kernel on a fast memory
// system; groups of 8 heads keep one chunk to stay within registers.
//   1. q . k for each token of the partition and each head of the group (partial dot
//      products reduced across the token group with shuffles) into shared memory;
//   2. per head, the partition's max and the sum of exp(logit - max) (one warp per head);
//   3. sum of exp(logit - max) * v, accumulated in registers per thread, reduced across
//      token groups (shuffles within a warp, shared memory across warps).
// With one partition the block writes the normalized output (the "v1" path). With
// several it writes its normalized partial output with its max and sum, and
// MergePartitions combines them with the usual log-sum-exp rescaling (the "v2" path).
#include <algorithm>
#include <atomic>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "services/worker/cuda/device_types.cuh"
#include "services/worker/cuda/kernels.h"

namespace folio::worker::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;

// CHUNKS: 16-byte chunks of a K/V row per thread (2 where registers allow, so a token
// needs fewer threads and fewer shuffle steps).
template <typename KvT, int HEAD_DIM, int GROUP>
__host__ __device__ constexpr int ChunksPerThread() {
  return (GROUP <= 4 && HEAD_DIM >= 16) ? 2 : 1;
}

template <typename KvT, int HEAD_DIM, int GROUP>
__global__ void __launch_bounds__(kThreads) PagedAttentionKernel(
    const float* __restrict__ q, int64_t q_row_stride, float* __restrict__ out,
    int64_t out_row_stride, float* __restrict__ part_out, float* __restrict__ part_max,
    float* __restrict__ part_sum, const int32_t* __restrict__ row_seq,
    const int32_t* __restrict__ row_context, const int32_t* __restrict__ block_tables,
    int32_t table_stride, const KvT* __restrict__ k_cache, const KvT* __restrict__ v_cache,
    int32_t block_size, int32_t block_shift, int32_t num_kv_heads, float scale,
    int32_t partition_size, int32_t num_partitions) {
  constexpr int kChunks = ChunksPerThread<KvT, HEAD_DIM, GROUP>();
  constexpr int kVec = 8 * kChunks;                 // values of a row per thread
  constexpr int kGroupThreads = HEAD_DIM / kVec;    // threads per token
  static_assert(32 % kGroupThreads == 0, "a token group must sit inside one warp");
  constexpr int kTokenGroups = kThreads / kGroupThreads;
  constexpr int kUnroll = 4 / kChunks;              // 4 16-byte loads in flight per thread

  const int part = blockIdx.x;
  const int kv_head = blockIdx.y;
  const int row = blockIdx.z;
  const int context = row_context[row];
  const int start = part * partition_size;
  if (start >= context) return;  // MergePartitions reads only partitions below context
  const int end = min(start + partition_size, context);
  const int n = end - start;

  extern __shared__ float smem[];
  float* logits = smem;                              // [GROUP][partition_size]
  float* reduce = smem + GROUP * partition_size;     // [kWarps][GROUP][HEAD_DIM]
  __shared__ float s_max[GROUP];
  __shared__ float s_sum[GROUP];

  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int chunk = tid % kGroupThreads;
  const int token_group = tid / kGroupThreads;
  const int32_t* table = block_tables + static_cast<int64_t>(row_seq[row]) * table_stride;
  const int64_t slot_stride = static_cast<int64_t>(num_kv_heads) * HEAD_DIM;
  const int64_t head_offset = static_cast<int64_t>(kv_head) * HEAD_DIM + chunk * kVec;
  // Slot of token t: a shift and a mask for power-of-two block sizes, else a division.
  auto slot_of = [&](int t) -> int64_t {
    if (block_shift >= 0) {
      return (static_cast<int64_t>(table[t >> block_shift]) << block_shift) + (t & (block_size - 1));
    }
    return static_cast<int64_t>(table[t / block_size]) * block_size + t % block_size;
  };

  float qr[GROUP][kVec];
#pragma unroll
  for (int g = 0; g < GROUP; ++g) {
    const float* qp = q + static_cast<int64_t>(row) * q_row_stride +
                      static_cast<int64_t>(kv_head * GROUP + g) * HEAD_DIM + chunk * kVec;
#pragma unroll
    for (int e = 0; e < kVec; ++e) qr[g][e] = qp[e] * scale;
  }

  // 1. Logits. Every thread runs the same number of iterations (shuffles need the whole
  // warp); tokens past the end load nothing and write nothing.
  for (int base = start; base < end; base += kTokenGroups * kUnroll) {
    // Raw 16-byte words are kept in flight (4 registers each, not 8 floats), then widened.
    uint4 kraw[kUnroll][kChunks];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int t = base + u * kTokenGroups + token_group;
      if (t < end) {
        const KvT* p = k_cache + slot_of(t) * slot_stride + head_offset;
#pragma unroll
        for (int c = 0; c < kChunks; ++c) kraw[u][c] = *reinterpret_cast<const uint4*>(p + 8 * c);
      } else {
#pragma unroll
        for (int c = 0; c < kChunks; ++c) kraw[u][c] = make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int t = base + u * kTokenGroups + token_group;
      float kf[kVec];
#pragma unroll
      for (int c = 0; c < kChunks; ++c) Unpack8<KvT>(kraw[u][c], kf + 8 * c);
#pragma unroll
      for (int g = 0; g < GROUP; ++g) {
        float s = 0.0f;
#pragma unroll
        for (int e = 0; e < kVec; ++e) s += qr[g][e] * kf[e];
#pragma unroll
        for (int off = kGroupThreads / 2; off > 0; off >>= 1) {
          s += __shfl_xor_sync(0xffffffffu, s, off);
        }
        if (chunk == 0 && t < end) logits[g * partition_size + (t - start)] = s;
      }
    }
  }
  __syncthreads();

  // 2. Softmax statistics, one warp per head of the group.
  for (int g = warp; g < GROUP; g += kWarps) {
    float* lg = logits + g * partition_size;
    float m = -INFINITY;
    for (int i = lane; i < n; i += 32) m = fmaxf(m, lg[i]);
    m = WarpMax(m);
    float sum = 0.0f;
    for (int i = lane; i < n; i += 32) {
      const float e = expf(lg[i] - m);
      lg[i] = e;
      sum += e;
    }
    sum = WarpSum(sum);
    if (lane == 0) {
      s_max[g] = m;
      s_sum[g] = sum;
    }
  }
  __syncthreads();

  // 3. Weighted sum of V rows.
  float acc[GROUP][kVec];
#pragma unroll
  for (int g = 0; g < GROUP; ++g) {
#pragma unroll
    for (int e = 0; e < kVec; ++e) acc[g][e] = 0.0f;
  }
  for (int base = start; base < end; base += kTokenGroups * kUnroll) {
    uint4 vraw[kUnroll][kChunks];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int t = base + u * kTokenGroups + token_group;
      if (t < end) {
        const KvT* p = v_cache + slot_of(t) * slot_stride + head_offset;
#pragma unroll
        for (int c = 0; c < kChunks; ++c) vraw[u][c] = *reinterpret_cast<const uint4*>(p + 8 * c);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int t = base + u * kTokenGroups + token_group;
      if (t >= end) continue;
      float vf[kVec];
#pragma unroll
      for (int c = 0; c < kChunks; ++c) Unpack8<KvT>(vraw[u][c], vf + 8 * c);
#pragma unroll
      for (int g = 0; g < GROUP; ++g) {
        const float p = logits[g * partition_size + (t - start)];
#pragma unroll
        for (int e = 0; e < kVec; ++e) acc[g][e] += p * vf[e];
      }
    }
  }
  // Token groups of one warp hold the same chunk in lanes kGroupThreads apart.
#pragma unroll
  for (int off = kGroupThreads; off < 32; off <<= 1) {
#pragma unroll
    for (int g = 0; g < GROUP; ++g) {
#pragma unroll
      for (int e = 0; e < kVec; ++e) acc[g][e] += __shfl_xor_sync(0xffffffffu, acc[g][e], off);
    }
  }
  if (lane < kGroupThreads) {
#pragma unroll
    for (int g = 0; g < GROUP; ++g) {
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        reduce[(warp * GROUP + g) * HEAD_DIM + chunk * kVec + e] = acc[g][e];
      }
    }
  }
  __syncthreads();

  const int num_heads = num_kv_heads * GROUP;
  for (int i = tid; i < GROUP * HEAD_DIM; i += kThreads) {
    const int g = i / HEAD_DIM;
    const int d = i % HEAD_DIM;
    float v = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) v += reduce[(w * GROUP + g) * HEAD_DIM + d];
    v /= s_sum[g];
    const int head = kv_head * GROUP + g;
    if (num_partitions == 1) {
      out[static_cast<int64_t>(row) * out_row_stride + head * HEAD_DIM + d] = v;
    } else {
      const int64_t idx =
          (static_cast<int64_t>(row) * num_heads + head) * num_partitions + part;
      part_out[idx * HEAD_DIM + d] = v;
      if (d == 0) {
        part_max[idx] = s_max[g];
        part_sum[idx] = s_sum[g];
      }
    }
  }
}

// Grid (head, row): merges a row's partitions of one head.
__global__ void MergePartitions(const float* __restrict__ part_out,
                                const float* __restrict__ part_max,
                                const float* __restrict__ part_sum,
                                const int32_t* __restrict__ row_context, float* __restrict__ out,
                                int64_t out_row_stride, int32_t num_heads, int32_t head_dim,
                                int32_t partition_size, int32_t num_partitions) {
  const int head = blockIdx.x;
  const int row = blockIdx.y;
  const int parts = (row_context[row] + partition_size - 1) / partition_size;
  const int64_t base = (static_cast<int64_t>(row) * num_heads + head) * num_partitions;
  float m = -INFINITY;
  for (int p = 0; p < parts; ++p) m = fmaxf(m, part_max[base + p]);
  float total = 0.0f;
  for (int p = 0; p < parts; ++p) total += part_sum[base + p] * expf(part_max[base + p] - m);
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float v = 0.0f;
    for (int p = 0; p < parts; ++p) {
      v += part_out[(base + p) * head_dim + d] * part_sum[base + p] *
           expf(part_max[base + p] - m);
    }
    out[static_cast<int64_t>(row) * out_row_stride + static_cast<int64_t>(head) * head_dim + d] =
        v / total;
  }
}

// log2(block_size) for a power of two, else -1.
int32_t BlockShift(int32_t block_size) {
  if (block_size <= 0 || (block_size & (block_size - 1)) != 0) return -1;
  int32_t shift = 0;
  while ((1 << shift) < block_size) ++shift;
  return shift;
}

// Multiprocessors of the current device (cached per device).
int MultiprocessorCount() {
  static std::atomic<int> cached[64] = {};
  int device = 0;
  cudaGetDevice(&device);
  if (device < 0 || device >= 64) return 132;
  if (cached[device] == 0) {
    int n = 0;
    cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device);
    cached[device] = n > 0 ? n : 132;
  }
  return cached[device];
}

int32_t PartitionSize(int32_t requested) {
  return requested > 0 ? requested : kDefaultPartitionSize;
}

template <typename KvT, int HEAD_DIM, int GROUP>
absl::Status Launch(const PagedAttentionParams& p, const KvView& kv, int32_t partition_size,
                    int32_t num_partitions, cudaStream_t stream) {
  const size_t smem =
      sizeof(float) * (static_cast<size_t>(GROUP) * partition_size + kWarps * GROUP * HEAD_DIM);
  auto kernel = PagedAttentionKernel<KvT, HEAD_DIM, GROUP>;
  // Dynamic plus static shared memory above 48 KiB needs the opt-in limit.
  if (smem + 2 * GROUP * sizeof(float) > 48 * 1024) {
    int device = 0, max_smem = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
    if (smem > static_cast<size_t>(max_smem)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "paged attention: partition of ", partition_size, " keys needs ", smem,
          " bytes of shared memory; the device allows ", max_smem));
    }
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         static_cast<int>(smem));
  }
  float* part_out = p.workspace;
  const int64_t parts_total =
      static_cast<int64_t>(p.num_rows) * p.num_heads * num_partitions;
  float* part_max = part_out + parts_total * HEAD_DIM;
  float* part_sum = part_max + parts_total;
  const dim3 grid(num_partitions, kv.num_kv_heads, p.num_rows);
  kernel<<<grid, kThreads, smem, stream>>>(
      p.q, p.q_row_stride, p.out, p.out_row_stride, part_out, part_max, part_sum, p.row_seq,
      p.row_context, p.block_tables, p.block_table_stride, static_cast<const KvT*>(kv.k),
      static_cast<const KvT*>(kv.v), kv.block_size, BlockShift(kv.block_size), kv.num_kv_heads,
      p.scale, partition_size,
      num_partitions);
  if (num_partitions > 1) {
    MergePartitions<<<dim3(p.num_heads, p.num_rows), HEAD_DIM < 32 ? 32 : HEAD_DIM, 0,
                      stream>>>(part_out, part_max, part_sum, p.row_context, p.out,
                                p.out_row_stride, p.num_heads, HEAD_DIM, partition_size,
                                num_partitions);
  }
  return absl::OkStatus();
}

template <typename KvT, int HEAD_DIM>
absl::Status DispatchGroup(const PagedAttentionParams& p, const KvView& kv, int32_t group,
                           int32_t partition_size, int32_t num_partitions, cudaStream_t s) {
  switch (group) {
    case 1: return Launch<KvT, HEAD_DIM, 1>(p, kv, partition_size, num_partitions, s);
    case 2: return Launch<KvT, HEAD_DIM, 2>(p, kv, partition_size, num_partitions, s);
    case 4: return Launch<KvT, HEAD_DIM, 4>(p, kv, partition_size, num_partitions, s);
    case 8: return Launch<KvT, HEAD_DIM, 8>(p, kv, partition_size, num_partitions, s);
  }
  return absl::InvalidArgumentError(absl::StrCat("paged attention: no kernel for GQA group ",
                                                 group, " (compiled: 1, 2, 4, 8)"));
}

template <typename KvT>
absl::Status DispatchHead(const PagedAttentionParams& p, const KvView& kv, int32_t group,
                          int32_t partition_size, int32_t num_partitions, cudaStream_t s) {
  switch (kv.head_dim) {
    case 8: return DispatchGroup<KvT, 8>(p, kv, group, partition_size, num_partitions, s);
    case 16: return DispatchGroup<KvT, 16>(p, kv, group, partition_size, num_partitions, s);
    case 64: return DispatchGroup<KvT, 64>(p, kv, group, partition_size, num_partitions, s);
    case 128: return DispatchGroup<KvT, 128>(p, kv, group, partition_size, num_partitions, s);
  }
  return absl::InvalidArgumentError(absl::StrCat("paged attention: no kernel for head size ",
                                                 kv.head_dim, " (compiled: 8, 16, 64, 128)"));
}

}  // namespace

bool AttentionSupports(int32_t head_dim, int32_t group_size) {
  const bool head_ok = head_dim == 8 || head_dim == 16 || head_dim == 64 || head_dim == 128;
  const bool group_ok = group_size == 1 || group_size == 2 || group_size == 4 || group_size == 8;
  return head_ok && group_ok;
}

int64_t PagedAttentionWorkspaceFloats(int32_t num_rows, int32_t num_heads, int32_t head_dim,
                                      int32_t max_context, int32_t partition_size) {
  const int32_t size = PartitionSize(partition_size);
  const int64_t parts = (max_context + size - 1) / size;
  int64_t floats = parts <= 1 ? 0 : static_cast<int64_t>(num_rows) * num_heads * parts * (head_dim + 2);
  if (partition_size == 0 && max_context > kMinPartitionSize) {
    floats = std::max<int64_t>(floats, kSmallGridPartitions * num_heads * (head_dim + 2));
  }
  return floats;
}

absl::Status LaunchPagedAttention(const PagedAttentionParams& p, const KvView& kv,
                                  cudaStream_t stream) {
  if (p.num_rows == 0) return absl::OkStatus();
  if (kv.num_kv_heads <= 0 || p.num_heads % kv.num_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("paged attention: ", p.num_heads,
                                                   " query heads do not group over ",
                                                   kv.num_kv_heads, " kv heads"));
  }
  int32_t partition_size = PartitionSize(p.partition_size);
  if (p.partition_size == 0) {
    // Small grids: halve the partitions while the device would sit mostly idle and the
    // workspace holds them.
    const int64_t target_blocks = 2 * static_cast<int64_t>(MultiprocessorCount());
    auto parts = [&](int32_t size) { return int64_t{(p.max_context + size - 1) / size}; };
    while (partition_size > kMinPartitionSize &&
           int64_t{p.num_rows} * kv.num_kv_heads * parts(partition_size) < target_blocks &&
           int64_t{p.num_rows} * p.num_heads * parts(partition_size / 2) * (kv.head_dim + 2) <=
               p.workspace_floats) {
      partition_size /= 2;
    }
  }
  if (partition_size % 32 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "paged attention: partition size must be a multiple of 32, got ", partition_size));
  }
  const int32_t num_partitions = (p.max_context + partition_size - 1) / partition_size;
  if (num_partitions > 1 && p.workspace == nullptr) {
    return absl::InvalidArgumentError(
        "paged attention: contexts longer than one partition need a workspace");
  }
  const int32_t group = p.num_heads / kv.num_kv_heads;
  if (kv.dtype == DType::kF16) {
    return DispatchHead<__half>(p, kv, group, partition_size, num_partitions, stream);
  }
  if (kv.dtype == DType::kBF16) {
    return DispatchHead<__nv_bfloat16>(p, kv, group, partition_size, num_partitions, stream);
  }
  return absl::InvalidArgumentError("paged attention: the KV cache must be f16 or bf16");
}

}  // namespace folio::worker::cuda
