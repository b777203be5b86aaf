// HostStagedCommunicator: a host-memory Communicator (Gloo) presented to a CUDA runner,
// whose collectives take device memory. Each collective waits for the runner's stream,
// copies the device data to pinned host memory, runs the host collective, and copies the
// result back.
//
// NCCL is the communicator of CUDA ranks on separate devices. This one serves where NCCL
// cannot: ranks that share one device (NCCL refuses two ranks on the same GPU), so the
// sharded CUDA forward pass is testable on a single GPU, and machines without NCCL's
// transports. It is slower (two copies and a host round trip per collective) but computes
// the same sums.
//
// Thread-compatible, like every Communicator. Does not own the host communicator.
#ifndef FOLIO_SERVICES_WORKER_CUDA_HOST_STAGED_COMMUNICATOR_H_
#define FOLIO_SERVICES_WORKER_CUDA_HOST_STAGED_COMMUNICATOR_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "services/worker/dist/communicator.h"

namespace folio::worker::cuda {

class HostStagedCommunicator final : public Communicator {
 public:
  // `host` must outlive this; collectives order after the work queued on `stream`.
  HostStagedCommunicator(Communicator* host, cudaStream_t stream) : host_(host), stream_(stream) {}
  ~HostStagedCommunicator() override;

  int rank() const override { return host_->rank(); }
  int world_size() const override { return host_->world_size(); }
  absl::Status AllReduceSum(void* data, int64_t count, CommDType dtype) override;
  absl::Status GatherToRoot(const void* send, void* recv, int64_t count, CommDType dtype) override;
  CollectiveCounts counts() const override { return host_->counts(); }

 private:
  // Pinned host memory of at least `bytes`.
  absl::Status Reserve(int64_t bytes);

  Communicator* const host_;
  const cudaStream_t stream_;
  void* staging_ = nullptr;  // pinned
  int64_t staging_bytes_ = 0;
};

}  // namespace folio::worker::cuda

#endif  // FOLIO_SERVICES_WORKER_CUDA_HOST_STAGED_COMMUNICATOR_H_
