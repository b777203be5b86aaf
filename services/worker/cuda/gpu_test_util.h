// Test helpers for the CUDA backend: skipping without a device, device buffers filled
// from host vectors, bf16 rounding on the host, and small runner options.
#ifndef FOLIO_SERVICES_WORKER_CUDA_GPU_TEST_UTIL_H_
#define FOLIO_SERVICES_WORKER_CUDA_GPU_TEST_UTIL_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "glog/logging.h"
#include "gtest/gtest.h"
#include "services/worker/cuda/cuda_model_runner.h"
#include "services/worker/cuda/device_buffer.h"
#include "services/worker/kernels/half.h"

// Skips the test, with the reason, on a machine without a usable CUDA device.
#define FOLIO_SKIP_WITHOUT_CUDA_DEVICE()                                   \
  do {                                                                     \
    std::string folio_why;                                                 \
    if (::folio::worker::cuda::CudaDeviceCount(&folio_why) == 0) {         \
      GTEST_SKIP() << "no CUDA device on this machine (" << folio_why << ")"; \
    }                                                                      \
  } while (0)

namespace folio::worker::cuda::testing {

template <typename T>
DeviceBuffer Upload(const std::vector<T>& host) {
  absl::StatusOr<DeviceBuffer> b = DeviceBuffer::Allocate(host.size() * sizeof(T), "test");
  CHECK(b.ok()) << b.status();
  CHECK_EQ(cudaMemcpy(b->get(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
           cudaSuccess);
  return *std::move(b);
}

template <typename T>
std::vector<T> Download(const DeviceBuffer& b, size_t n) {
  std::vector<T> host(n);
  CHECK_EQ(cudaDeviceSynchronize(), cudaSuccess);
  CHECK_EQ(cudaMemcpy(host.data(), b.get(), n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return host;
}

// Round-to-nearest-even f32 -> bf16 bits (back: kernels::Bf16ToFloat, half.h).
inline uint16_t FloatToBf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}
using kernels::Bf16ToFloat;

// Runner options small enough for any device: 16 MiB of KV, steps of up to 256 tokens in
// 16 sequences.
inline CudaModelRunnerOptions SmallRunnerOptions(DType compute) {
  CudaModelRunnerOptions o;
  o.block_size = 16;
  o.compute_dtype = compute;
  o.kv_cache_bytes = 16 << 20;
  o.max_num_batched_tokens = 256;
  o.max_num_seqs = 16;
  return o;
}

}  // namespace folio::worker::cuda::testing

#endif  // FOLIO_SERVICES_WORKER_CUDA_GPU_TEST_UTIL_H_
