// Kernels that write the paged KV cache on the GPU: new K/V rows into their slots, and
// whole-block copies for copy-on-write (see kernels.h).
#include "services/worker/cuda/device_types.cuh"
#include "services/worker/cuda/kernels.h"

namespace folio::worker::cuda {
namespace {

// Grid: one block per token. Threads stride over the row's kv_dim values.
template <typename KvT>
__global__ void WriteKvKernel(const float* __restrict__ k, const float* __restrict__ v,
                              int64_t row_stride, const int64_t* __restrict__ slots,
                              int32_t kv_dim, KvT* __restrict__ k_cache,
                              KvT* __restrict__ v_cache) {
  const int token = blockIdx.x;
  const int64_t dst = slots[token] * kv_dim;
  const int64_t src = static_cast<int64_t>(token) * row_stride;
  for (int i = threadIdx.x; i < kv_dim; i += blockDim.x) {
    k_cache[dst + i] = FromFloat<KvT>(k[src + i]);
    v_cache[dst + i] = FromFloat<KvT>(v[src + i]);
  }
}

// Grid: (copy, layer * 2 + {K, V}). Each block copies one block's bytes as 16-byte words
// (blocks are 16-byte multiples: head_dim is a multiple of 8 16-bit values).
__global__ void CopyBlocksKernel(char* base, int64_t layer_stride_bytes, int64_t v_offset_bytes,
                                 int64_t block_bytes, const int32_t* __restrict__ src,
                                 const int32_t* __restrict__ dst) {
  const int copy = blockIdx.x;
  const int layer = blockIdx.y / 2;
  char* tensor = base + layer * layer_stride_bytes + (blockIdx.y % 2) * v_offset_bytes;
  const uint4* from = reinterpret_cast<const uint4*>(tensor + src[copy] * block_bytes);
  uint4* to = reinterpret_cast<uint4*>(tensor + dst[copy] * block_bytes);
  const int64_t words = block_bytes / 16;
  for (int64_t i = threadIdx.x; i < words; i += blockDim.x) to[i] = from[i];
}

}  // namespace

void LaunchWriteKv(const float* k, const float* v, int64_t row_stride, const int64_t* slots,
                   int32_t num_tokens, const KvView& kv, cudaStream_t stream) {
  if (num_tokens == 0) return;
  const int32_t kv_dim = kv.num_kv_heads * kv.head_dim;
  const int threads = kv_dim < 256 ? ((kv_dim + 31) / 32) * 32 : 256;
  if (kv.dtype == DType::kBF16) {
    WriteKvKernel<__nv_bfloat16><<<num_tokens, threads, 0, stream>>>(
        k, v, row_stride, slots, kv_dim, static_cast<__nv_bfloat16*>(kv.k),
        static_cast<__nv_bfloat16*>(kv.v));
  } else {
    WriteKvKernel<__half><<<num_tokens, threads, 0, stream>>>(
        k, v, row_stride, slots, kv_dim, static_cast<__half*>(kv.k), static_cast<__half*>(kv.v));
  }
}

void LaunchCopyBlocks(void* base, int64_t layer_stride_bytes, int64_t v_offset_bytes,
                      int32_t num_layers, int64_t block_bytes, const int32_t* src,
                      const int32_t* dst, int32_t num_copies, cudaStream_t stream) {
  if (num_copies == 0) return;
  CopyBlocksKernel<<<dim3(num_copies, 2 * num_layers), 256, 0, stream>>>(
      static_cast<char*>(base), layer_stride_bytes, v_offset_bytes, block_bytes, src, dst);
}

}  // namespace folio::worker::cuda
