#include "services/worker/cuda/host_staged_communicator.h"

#include "services/worker/cuda/cuda_status.h"

namespace folio::worker::cuda {

HostStagedCommunicator::~HostStagedCommunicator() {
  if (staging_ != nullptr) cudaFreeHost(staging_);
}

absl::Status HostStagedCommunicator::Reserve(int64_t bytes) {
  if (bytes <= staging_bytes_) return absl::OkStatus();
  if (staging_ != nullptr) cudaFreeHost(staging_);
  staging_ = nullptr;
  staging_bytes_ = 0;
  FOLIO_CUDA_RETURN_IF_ERROR(cudaMallocHost(&staging_, static_cast<size_t>(bytes)));
  staging_bytes_ = bytes;
  return absl::OkStatus();
}

absl::Status HostStagedCommunicator::AllReduceSum(void* data, int64_t count, CommDType dtype) {
  const int64_t bytes = count * CommDTypeBytes(dtype);
  if (absl::Status s = Reserve(bytes); !s.ok()) return s;
  FOLIO_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(staging_, data, bytes, cudaMemcpyDeviceToHost, stream_));
  FOLIO_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  if (absl::Status s = host_->AllReduceSum(staging_, count, dtype); !s.ok()) return s;
  FOLIO_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(data, staging_, bytes, cudaMemcpyHostToDevice, stream_));
  // The staging buffer is reused by the next collective: the copy must have read it.
  FOLIO_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return absl::OkStatus();
}

absl::Status HostStagedCommunicator::GatherToRoot(const void* send, void* recv, int64_t count,
                                                  CommDType dtype) {
  const int64_t bytes = count * CommDTypeBytes(dtype);
  const bool root = host_->rank() == 0;
  // [send | gathered]: the rank's contribution, then (rank 0) world_size contributions.
  if (absl::Status s = Reserve(bytes * (root ? 1 + host_->world_size() : 1)); !s.ok()) return s;
  char* host_send = static_cast<char*>(staging_);
  char* host_recv = host_send + bytes;
  FOLIO_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(host_send, send, bytes, cudaMemcpyDeviceToHost, stream_));
  FOLIO_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  if (absl::Status s = host_->GatherToRoot(host_send, root ? host_recv : nullptr, count, dtype);
      !s.ok()) {
    return s;
  }
  if (root) {
    FOLIO_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(recv, host_recv, bytes * host_->world_size(),
                                               cudaMemcpyHostToDevice, stream_));
    FOLIO_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  }
  return absl::OkStatus();
}

}  // namespace folio::worker::cuda
