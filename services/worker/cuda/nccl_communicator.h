// NcclCommunicator: the Communicator (dist/communicator.h) of CUDA tensor-parallel ranks,
// over NCCL. Buffers are device memory; collectives are enqueued on the stream given at
// creation (the runner's), so they order with the step's kernels without host waits.
//
// Set-up: rank 0 makes a unique id (NewUniqueId) and every rank receives its bytes
// through the worker's rendezvous (the same gRPC-hosted store the Gloo ranks use), then
// each rank calls Create with it. NCCL has no gather: GatherToRoot is one grouped set of
// sends to rank 0 and receives on it.
//
// Every NCCL and CUDA result is checked and turned into a Status carrying NCCL's own
// message. Thread-compatible, like every Communicator.
#ifndef FOLIO_SERVICES_WORKER_CUDA_NCCL_COMMUNICATOR_H_
#define FOLIO_SERVICES_WORKER_CUDA_NCCL_COMMUNICATOR_H_

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "services/worker/dist/communicator.h"

namespace folio::worker::cuda {

absl::Status NcclStatus(ncclResult_t result, const char* what);

class NcclCommunicator final : public Communicator {
 public:
  // NCCL's unique id (ncclGetUniqueId) as bytes, for rank 0 to hand to every rank.
  static absl::StatusOr<std::string> NewUniqueId();

  // Joins the group named by unique_id as `rank` of `world_size` on CUDA device `device`;
  // collectives run on `stream`. Blocks until every rank has joined.
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Create(int rank, int world_size,
                                                                  const std::string& unique_id,
                                                                  int device, cudaStream_t stream);
  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  absl::Status AllReduceSum(void* data, int64_t count, CommDType dtype) override;
  absl::Status GatherToRoot(const void* send, void* recv, int64_t count, CommDType dtype) override;
  CollectiveCounts counts() const override { return counts_; }

 private:
  NcclCommunicator(ncclComm_t comm, int rank, int world_size, cudaStream_t stream)
      : comm_(comm), rank_(rank), world_size_(world_size), stream_(stream) {}
  absl::Status CheckUsable() const;

  ncclComm_t comm_;
  const int rank_;
  const int world_size_;
  cudaStream_t stream_;
  CollectiveCounts counts_;
  absl::Status broken_;  // the first failure; every later call returns it
};

}  // namespace folio::worker::cuda

#endif  // FOLIO_SERVICES_WORKER_CUDA_NCCL_COMMUNICATOR_H_
