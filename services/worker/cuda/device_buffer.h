// DeviceBuffer: an owned cudaMalloc allocation (move-only). Allocation failures come back
// as ResourceExhausted naming the size and what it was for.
#ifndef FOLIO_SERVICES_WORKER_CUDA_DEVICE_BUFFER_H_
#define FOLIO_SERVICES_WORKER_CUDA_DEVICE_BUFFER_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "services/worker/cuda/cuda_status.h"

namespace folio::worker::cuda {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() { Reset(); }
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      Reset();
      data_ = std::exchange(other.data_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  static absl::StatusOr<DeviceBuffer> Allocate(int64_t bytes, const char* what) {
    DeviceBuffer b;
    if (bytes <= 0) return b;
    const cudaError_t err = cudaMalloc(&b.data_, static_cast<size_t>(bytes));
    if (err != cudaSuccess) {
      cudaGetLastError();  // clear the sticky allocation error
      return CudaStatus(err, absl::StrCat("allocating ", bytes, " bytes of device memory for ",
                                          what).c_str());
    }
    b.bytes_ = bytes;
    return b;
  }

  void Reset() {
    if (data_ != nullptr) cudaFree(data_);
    data_ = nullptr;
    bytes_ = 0;
  }

  void* get() const { return data_; }
  template <typename T>
  T* as() const { return static_cast<T*>(data_); }
  int64_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  int64_t bytes_ = 0;
};

}  // namespace folio::worker::cuda

#endif  // FOLIO_SERVICES_WORKER_CUDA_DEVICE_BUFFER_H_
