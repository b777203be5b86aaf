// gRPC implementations of CacheClient and WorkerClient, and the conversions between the
// services' protobuf messages and the native step types. Every call carries a deadline,
// so a service that does not answer fails the step with UNAVAILABLE or
// DEADLINE_EXCEEDED instead of hanging. Restore()'s probes have a short deadline of
// their own (kProbeTimeout), so a recovery wait polls a stopped process quickly. Thread-compatible (the loop thread calls them).
#ifndef FOLIO_SERVICES_SCHEDULER_GRPC_CLIENTS_H_
#define FOLIO_SERVICES_SCHEDULER_GRPC_CLIENTS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "folio/internal/v1/cachemgr.grpc.pb.h"
#include "folio/internal/v1/worker.grpc.pb.h"
#include "services/scheduler/clients.h"

namespace folio::scheduler {

class GrpcCacheClient final : public CacheClient {
 public:
  GrpcCacheClient(std::shared_ptr<grpc::Channel> channel, absl::Duration timeout);
  absl::StatusOr<cachemgr::StepResponse> Step(const cachemgr::StepRequest& request) override;
  absl::Status Reset() override;
  // Probes GetStats; a new incarnation (or an unconfigured pool) is configured again with
  // the start-up request, the same process is reset.
  absl::Status Restore() override;

  // What start-up configured and the incarnation that answered (cluster_setup.cc).
  void SetConfiguration(const folio::internal::v1::ConfigureRequest& configure,
                        const std::string& incarnation_id);

  folio::internal::v1::CacheManager::Stub& stub() { return *stub_; }

  // This scheduler's epoch, sent with Configure, Step and Reset (common/scheduler_epoch.h).
  void set_epoch(uint64_t epoch) { epoch_ = epoch; }
  uint64_t epoch() const { return epoch_; }

 private:
  std::unique_ptr<folio::internal::v1::CacheManager::Stub> stub_;
  uint64_t epoch_ = 0;
  const absl::Duration timeout_;
  uint64_t next_step_ = 1;
  folio::internal::v1::ConfigureRequest configure_;
  std::string incarnation_id_;
};

// Sends each step to every rank at once and answers with rank 0's output.
class GrpcWorkerClient final : public WorkerClient {
 public:
  GrpcWorkerClient(std::vector<std::shared_ptr<grpc::Channel>> ranks, absl::Duration timeout);
  absl::StatusOr<worker::StepOutput> Execute(const worker::StepInput& step,
                                             const std::vector<std::string>& request_ids) override;
  // Probes every rank's GetWorkerInfo; a rank with a new incarnation (or without a pool)
  // gets AllocateKvCache with the start-up block count and size.
  absl::Status Restore() override;

  // What start-up allocated and the incarnation of each rank (cluster_setup.cc).
  void SetAllocation(int32_t num_blocks, int32_t block_size,
                     std::vector<std::string> incarnation_ids);

  folio::internal::v1::Worker::Stub& stub(int rank) { return *stubs_[rank]; }
  int num_ranks() const { return static_cast<int>(stubs_.size()); }

  // This scheduler's epoch, sent with AllocateKvCache and ExecuteStep.
  void set_epoch(uint64_t epoch) { epoch_ = epoch; }
  uint64_t epoch() const { return epoch_; }

 private:
  std::vector<std::unique_ptr<folio::internal::v1::Worker::Stub>> stubs_;
  uint64_t epoch_ = 0;
  const absl::Duration timeout_;
  uint64_t next_step_ = 1;
  int32_t num_blocks_ = 0;
  int32_t block_size_ = 0;
  std::vector<std::string> incarnation_ids_;  // by rank
};

folio::internal::v1::ExecuteStepRequest ToProto(const worker::StepInput& step);
worker::StepOutput FromProto(const folio::internal::v1::ExecuteStepResponse& response);

}  // namespace folio::scheduler

#endif  // FOLIO_SERVICES_SCHEDULER_GRPC_CLIENTS_H_
