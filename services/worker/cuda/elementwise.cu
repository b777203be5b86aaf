// Row-wise and elementwise kernels of the forward pass on the GPU (see kernels.h):
// RMSNorm, RoPE, SiLU-and-multiply, embedding lookup, dtype conversion and the
// deterministic fill used to make benchmark weights on the device.
#include <cmath>
#include <type_traits>

#include "services/worker/cuda/device_types.cuh"
#include "services/worker/cuda/kernels.h"

namespace folio::worker::cuda {

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
  }
  return "?";
}

namespace {

constexpr int kRowThreads = 256;

// One block per row: sum of squares over the block, then the scaled write.
template <typename OutT>
__global__ void RmsNormKernel(const float* __restrict__ x, int64_t x_stride,
                              const int32_t* __restrict__ row_index, int32_t dim,
                              const float* __restrict__ weight, float eps, OutT* __restrict__ out,
                              int64_t out_stride) {
  const int64_t in_row = row_index != nullptr ? row_index[blockIdx.x] : blockIdx.x;
  const float* row = x + in_row * x_stride;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) ss += row[i] * row[i];
  __shared__ float partial[kRowThreads / 32];
  ss = WarpSum(ss);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = ss;
  __syncthreads();
  if (threadIdx.x < 32) {
    float v = threadIdx.x < blockDim.x / 32 ? partial[threadIdx.x] : 0.0f;
    v = WarpSum(v);
    if (threadIdx.x == 0) partial[0] = v;
  }
  __syncthreads();
  const float inv = 1.0f / sqrtf(partial[0] / dim + eps);
  OutT* o = out + blockIdx.x * out_stride;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) o[i] = FromFloat<OutT>(weight[i] * (row[i] * inv));
}

// One block per row; threads over (head, pair).
__global__ void RopeKernel(float* __restrict__ x, int64_t row_stride,
                           const int32_t* __restrict__ positions, int32_t num_heads,
                           int32_t head_dim, float theta) {
  float* row = x + blockIdx.x * row_stride;
  const float pos = static_cast<float>(positions[blockIdx.x]);
  const int pairs = head_dim / 2;
  for (int i = threadIdx.x; i < num_heads * pairs; i += blockDim.x) {
    const int p = i % pairs;
    const int h = i / pairs;
    const float freq = 1.0f / powf(theta, static_cast<float>(2 * p) / head_dim);
    float s, c;
    sincosf(pos * freq, &s, &c);
    float* v = row + h * head_dim + 2 * p;
    const float v0 = v[0];
    const float v1 = v[1];
    v[0] = v0 * c - v1 * s;
    v[1] = v0 * s + v1 * c;
  }
}

template <typename OutT>
__global__ void SiluAndMulKernel(const float* __restrict__ gate_up, int32_t hidden,
                                 OutT* __restrict__ out) {
  const float* g = gate_up + static_cast<int64_t>(blockIdx.x) * 2 * hidden;
  OutT* o = out + static_cast<int64_t>(blockIdx.x) * hidden;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
    const float a = g[i];
    o[i] = FromFloat<OutT>(a / (1.0f + expf(-a)) * g[hidden + i]);
  }
}

// One block per row: block max (with the lowest index holding it), then block sum of
// exp(x - max).
__global__ void LogSumExpArgmaxKernel(const float* __restrict__ logits, int32_t vocab,
                                      float* __restrict__ lse, int32_t* __restrict__ argmax,
                                      float* __restrict__ argmax_logprob) {
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  __shared__ float part_val[kRowThreads / 32];
  __shared__ int part_idx[kRowThreads / 32];
  __shared__ float row_max;
  float m = -INFINITY;
  int best = vocab;
  for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
    if (row[i] > m) {  // strictly greater: within a thread indices only grow
      m = row[i];
      best = i;
    }
  }
  auto better = [](float v, int i, float w, int j) { return w > v || (w == v && j < i); };
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const float w = __shfl_xor_sync(0xffffffffu, m, off);
    const int j = __shfl_xor_sync(0xffffffffu, best, off);
    if (better(m, best, w, j)) {
      m = w;
      best = j;
    }
  }
  if (threadIdx.x % 32 == 0) {
    part_val[threadIdx.x / 32] = m;
    part_idx[threadIdx.x / 32] = best;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kRowThreads / 32; ++w) {
      if (better(m, best, part_val[w], part_idx[w])) {
        m = part_val[w];
        best = part_idx[w];
      }
    }
    row_max = m;
    argmax[blockIdx.x] = best;
  }
  __syncthreads();
  m = row_max;
  float sum = 0.0f;
  for (int i = threadIdx.x; i < vocab; i += blockDim.x) sum += expf(row[i] - m);
  sum = WarpSum(sum);
  if (threadIdx.x % 32 == 0) part_val[threadIdx.x / 32] = sum;
  __syncthreads();
  if (threadIdx.x < 32) {
    float v = threadIdx.x < kRowThreads / 32 ? part_val[threadIdx.x] : 0.0f;
    v = WarpSum(v);
    if (threadIdx.x == 0) {
      lse[blockIdx.x] = m + logf(v);
      argmax_logprob[blockIdx.x] = -logf(v);  // m - (m + log(v))
    }
  }
}

template <typename T>
__global__ void EmbedKernel(const int32_t* __restrict__ tokens, const T* __restrict__ table,
                            int32_t vocab_begin, int32_t vocab_rows, int32_t dim,
                            float* __restrict__ x) {
  const int32_t local = tokens[blockIdx.x] - vocab_begin;
  float* dst = x + static_cast<int64_t>(blockIdx.x) * dim;
  if (local < 0 || local >= vocab_rows) {  // another rank's row
    for (int i = threadIdx.x; i < dim; i += blockDim.x) dst[i] = 0.0f;
    return;
  }
  const T* src = table + static_cast<int64_t>(local) * dim;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) dst[i] = ToFloat(src[i]);
}

template <typename T>
__global__ void ConvertKernel(const float* __restrict__ in, int64_t n, T* __restrict__ out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = FromFloat<T>(in[i]);
  }
}

// splitmix64 of (seed, index): a counter-based generator, so any element can be made
// by any thread in any order.
__device__ __forceinline__ uint64_t Mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

template <typename T>
__global__ void FillUniformKernel(T* __restrict__ data, int64_t n, uint64_t seed, float lo,
                                  float hi) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float u = static_cast<float>(Mix(seed ^ Mix(i)) >> 40) * (1.0f / 16777216.0f);
    data[i] = FromFloat<T>(lo + (hi - lo) * u);
  }
}

int GridFor(int64_t n) {
  const int64_t blocks = (n + 255) / 256;
  return static_cast<int>(blocks < 65536 ? (blocks > 0 ? blocks : 1) : 65536);
}

}  // namespace

void LaunchRmsNorm(const float* x, int64_t x_stride, const int32_t* row_index, int32_t rows,
                   int32_t dim,
                   const float* weight, float eps, void* out, int64_t out_stride,
                   DType out_dtype, cudaStream_t stream) {
  if (rows == 0) return;
  DispatchDType(static_cast<int>(out_dtype), [&](auto* type) {
    using T = std::remove_pointer_t<decltype(type)>;
    RmsNormKernel<T><<<rows, kRowThreads, 0, stream>>>(x, x_stride, row_index, dim, weight, eps,
                                                       static_cast<T*>(out), out_stride);
  });
}

void LaunchRope(float* x, int64_t row_stride, int32_t rows, const int32_t* positions,
                int32_t num_heads, int32_t head_dim, float theta, cudaStream_t stream) {
  if (rows == 0) return;
  RopeKernel<<<rows, kRowThreads, 0, stream>>>(x, row_stride, positions, num_heads, head_dim,
                                              theta);
}

void LaunchSiluAndMul(const float* gate_up, int32_t rows, int32_t hidden, void* out,
                      DType out_dtype, cudaStream_t stream) {
  if (rows == 0) return;
  DispatchDType(static_cast<int>(out_dtype), [&](auto* type) {
    using T = std::remove_pointer_t<decltype(type)>;
    SiluAndMulKernel<T><<<rows, kRowThreads, 0, stream>>>(gate_up, hidden, static_cast<T*>(out));
  });
}

void LaunchEmbedTokens(const int32_t* tokens, int32_t rows, const void* table,
                       DType table_dtype, int32_t vocab_begin, int32_t vocab_rows, int32_t dim,
                       float* x, cudaStream_t stream) {
  if (rows == 0) return;
  DispatchDType(static_cast<int>(table_dtype), [&](auto* type) {
    using T = std::remove_pointer_t<decltype(type)>;
    EmbedKernel<T><<<rows, kRowThreads, 0, stream>>>(tokens, static_cast<const T*>(table),
                                                     vocab_begin, vocab_rows, dim, x);
  });
}

void LaunchLogSumExpArgmax(const float* logits, int32_t rows, int32_t vocab, float* lse,
                           int32_t* argmax, float* argmax_logprob, cudaStream_t stream) {
  if (rows == 0) return;
  LogSumExpArgmaxKernel<<<rows, kRowThreads, 0, stream>>>(logits, vocab, lse, argmax,
                                                          argmax_logprob);
}

void LaunchConvert(const float* in, int64_t n, void* out, DType dtype, cudaStream_t stream) {
  if (n == 0) return;
  DispatchDType(static_cast<int>(dtype), [&](auto* type) {
    using T = std::remove_pointer_t<decltype(type)>;
    ConvertKernel<T><<<GridFor(n), 256, 0, stream>>>(in, n, static_cast<T*>(out));
  });
}

void LaunchFillUniform(void* data, int64_t n, DType dtype, uint64_t seed, float lo, float hi,
                       cudaStream_t stream) {
  if (n == 0) return;
  DispatchDType(static_cast<int>(dtype), [&](auto* type) {
    using T = std::remove_pointer_t<decltype(type)>;
    FillUniformKernel<T><<<GridFor(n), 256, 0, stream>>>(static_cast<T*>(data), n, seed, lo, hi);
  });
}

}  // namespace folio::worker::cuda
