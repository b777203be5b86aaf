// Device-side helpers shared by the .cu files: loading 16-bit values as f32, storing f32
// as each dtype, and warp reductions. Internal to services/worker/cuda.
#ifndef FOLIO_SERVICES_WORKER_CUDA_DEVICE_TYPES_CUH_
#define FOLIO_SERVICES_WORKER_CUDA_DEVICE_TYPES_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace folio::worker::cuda {

__device__ __forceinline__ float ToFloat(float x) { return x; }
__device__ __forceinline__ float ToFloat(__half x) { return __half2float(x); }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
__device__ __forceinline__ T FromFloat(float x);
template <>
__device__ __forceinline__ float FromFloat<float>(float x) { return x; }
template <>
__device__ __forceinline__ __half FromFloat<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// Eight 16-bit values of type T packed in 16 bytes, widened to f32.
template <typename T>
__device__ __forceinline__ void Unpack8(const uint4& raw, float* out) {
  const T* v = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int i = 0; i < 8; ++i) out[i] = ToFloat(v[i]);
}

// Eight 16-bit values (one 16-byte load; p must be 16-byte aligned) widened to f32.
template <typename T>
__device__ __forceinline__ void Load8(const T* p, float (&out)[8]) {
  Unpack8<T>(*reinterpret_cast<const uint4*>(p), out);
}

__device__ __forceinline__ float WarpSum(float x) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(0xffffffffu, x, off);
  return x;
}

__device__ __forceinline__ float WarpMax(float x) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, off));
  return x;
}

// Calls f with the device type of `dtype` as a null pointer of that type.
template <typename F>
void DispatchDType(int dtype, F&& f) {
  switch (dtype) {
    case 0: f(static_cast<float*>(nullptr)); break;
    case 1: f(static_cast<__half*>(nullptr)); break;
    default: f(static_cast<__nv_bfloat16*>(nullptr)); break;
  }
}

}  // namespace folio::worker::cuda

#endif  // FOLIO_SERVICES_WORKER_CUDA_DEVICE_TYPES_CUH_
