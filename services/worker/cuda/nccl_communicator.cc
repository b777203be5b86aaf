#include "services/worker/cuda/nccl_communicator.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "services/worker/cuda/cuda_status.h"

namespace folio::worker::cuda {
namespace {

ncclDataType_t NcclType(CommDType dtype) {
  switch (dtype) {
    case CommDType::kF32: return ncclFloat32;
    case CommDType::kF16: return ncclFloat16;
    case CommDType::kBF16: return ncclBfloat16;
  }
  return ncclFloat32;
}

}  // namespace

absl::Status NcclStatus(ncclResult_t result, const char* what) {
  if (result == ncclSuccess) return absl::OkStatus();
  const std::string msg = absl::StrCat(what, ": ", ncclGetErrorString(result));
  switch (result) {
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return absl::InvalidArgumentError(msg);
    case ncclSystemError:
    case ncclRemoteError:
      return absl::UnavailableError(msg);
    default:
      return absl::InternalError(msg);
  }
}

absl::StatusOr<std::string> NcclCommunicator::NewUniqueId() {
  ncclUniqueId id;
  if (absl::Status s = NcclStatus(ncclGetUniqueId(&id), "ncclGetUniqueId"); !s.ok()) return s;
  return std::string(id.internal, sizeof(id.internal));
}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(
    int rank, int world_size, const std::string& unique_id, int device, cudaStream_t stream) {
  if (world_size <= 0 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("NCCL rank ", rank, " is not in a group of ", world_size));
  }
  ncclUniqueId id;
  if (unique_id.size() != sizeof(id.internal)) {
    return absl::InvalidArgumentError(absl::StrCat("an NCCL unique id is ", sizeof(id.internal),
                                                   " bytes, got ", unique_id.size()));
  }
  std::memcpy(id.internal, unique_id.data(), sizeof(id.internal));
  FOLIO_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  ncclComm_t comm = nullptr;
  if (absl::Status s = NcclStatus(ncclCommInitRank(&comm, world_size, id, rank),
                                  "ncclCommInitRank");
      !s.ok()) {
    return s;
  }
  return std::unique_ptr<NcclCommunicator>(new NcclCommunicator(comm, rank, world_size, stream));
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_ != nullptr) ncclCommDestroy(comm_);
}

absl::Status NcclCommunicator::CheckUsable() const {
  if (broken_.ok()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("the NCCL group is broken by an earlier failure: ", broken_.message()));
}

absl::Status NcclCommunicator::AllReduceSum(void* data, int64_t count, CommDType dtype) {
  if (absl::Status s = CheckUsable(); !s.ok()) return s;
  ++counts_.all_reduces;
  counts_.bytes += count * CommDTypeBytes(dtype);
  absl::Status s = NcclStatus(
      ncclAllReduce(data, data, static_cast<size_t>(count), NcclType(dtype), ncclSum, comm_, stream_),
      "ncclAllReduce");
  if (!s.ok()) broken_ = s;
  return s;
}

absl::Status NcclCommunicator::GatherToRoot(const void* send, void* recv, int64_t count,
                                            CommDType dtype) {
  if (absl::Status s = CheckUsable(); !s.ok()) return s;
  ++counts_.gathers;
  const int64_t bytes = count * CommDTypeBytes(dtype);
  counts_.bytes += bytes;
  absl::Status s = NcclStatus(ncclGroupStart(), "ncclGroupStart");
  if (s.ok()) {
    if (rank_ == 0) {
      char* out = static_cast<char*>(recv);
      s = CudaStatus(cudaMemcpyAsync(out, send, bytes, cudaMemcpyDeviceToDevice, stream_),
                     "cudaMemcpyAsync (own gather slice)");
      for (int r = 1; r < world_size_ && s.ok(); ++r) {
        s = NcclStatus(ncclRecv(out + r * bytes, static_cast<size_t>(count), NcclType(dtype), r,
                                comm_, stream_),
                       "ncclRecv");
      }
    } else {
      s = NcclStatus(ncclSend(send, static_cast<size_t>(count), NcclType(dtype), 0, comm_, stream_),
                     "ncclSend");
    }
    const absl::Status end = NcclStatus(ncclGroupEnd(), "ncclGroupEnd");
    if (s.ok()) s = end;
  }
  if (!s.ok()) broken_ = s;
  return s;
}

}  // namespace folio::worker::cuda
