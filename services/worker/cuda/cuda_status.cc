#include "services/worker/cuda/cuda_status.h"

#include "absl/strings/str_cat.h"

namespace folio::worker::cuda {

absl::Status CudaStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  const std::string msg =
      absl::StrCat(what, ": ", cudaGetErrorName(err), ": ", cudaGetErrorString(err));
  switch (err) {
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(msg);
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
    case cudaErrorDevicesUnavailable:
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorUnsupportedPtxVersion:
      return absl::FailedPreconditionError(msg);
    default:
      return absl::InternalError(msg);
  }
}

absl::Status CublasStatus(cublasStatus_t err, const char* what) {
  if (err == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  const std::string msg = absl::StrCat(what, ": ", cublasGetStatusName(err), ": ",
                                       cublasGetStatusString(err));
  if (err == CUBLAS_STATUS_ALLOC_FAILED) return absl::ResourceExhaustedError(msg);
  if (err == CUBLAS_STATUS_NOT_INITIALIZED || err == CUBLAS_STATUS_ARCH_MISMATCH) {
    return absl::FailedPreconditionError(msg);
  }
  return absl::InternalError(msg);
}

absl::Status LastLaunchStatus(const char* what) {
  return CudaStatus(cudaGetLastError(), what);
}

}  // namespace folio::worker::cuda
