// Turning CUDA runtime, cuBLAS and NCCL results into absl::Status, with the library's own
// message and the call that failed:
//
//   FOLIO_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, n));        // Internal: "cudaMalloc(&p, n): out of memory"
//   FOLIO_CUBLAS_RETURN_IF_ERROR(cublasGemmEx(...));
//
// Out-of-memory results map to ResourceExhausted; a missing or unusable device to
// FailedPrecondition; everything else to Internal.
#ifndef FOLIO_SERVICES_WORKER_CUDA_CUDA_STATUS_H_
#define FOLIO_SERVICES_WORKER_CUDA_CUDA_STATUS_H_

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "absl/status/status.h"

namespace folio::worker::cuda {

absl::Status CudaStatus(cudaError_t err, const char* what);
absl::Status CublasStatus(cublasStatus_t err, const char* what);

// Ok when the last kernel launch on this thread succeeded (launch configuration errors);
// clears the error.
absl::Status LastLaunchStatus(const char* what);

}  // namespace folio::worker::cuda

#define FOLIO_CUDA_RETURN_IF_ERROR(expr)                                          \
  do {                                                                            \
    if (absl::Status folio_cuda_s = ::folio::worker::cuda::CudaStatus((expr), #expr); \
        !folio_cuda_s.ok()) {                                                     \
      return folio_cuda_s;                                                        \
    }                                                                             \
  } while (0)

#define FOLIO_CUBLAS_RETURN_IF_ERROR(expr)                                          \
  do {                                                                              \
    if (absl::Status folio_cublas_s = ::folio::worker::cuda::CublasStatus((expr), #expr); \
        !folio_cublas_s.ok()) {                                                     \
      return folio_cublas_s;                                                        \
    }                                                                               \
  } while (0)

#endif  // FOLIO_SERVICES_WORKER_CUDA_CUDA_STATUS_H_
