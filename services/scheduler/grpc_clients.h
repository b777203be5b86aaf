// gRPC implementations of CacheClient and WorkerClient, and the conversions between the
// services' protobuf messages and the native step types. Every call carries a deadline,
// so a service that does not answer fails the step with UNAVAILABLE or
// DEADLINE_EXCEEDED instead of hanging. Thread-compatible (the loop thread calls them).
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

  folio::internal::v1::CacheManager::Stub& stub() { return *stub_; }

 private:
  std::unique_ptr<folio::internal::v1::CacheManager::Stub> stub_;
  const absl::Duration timeout_;
  uint64_t next_step_ = 1;
};

// Sends each step to every rank at once and answers with rank 0's output.
class GrpcWorkerClient final : public WorkerClient {
 public:
  GrpcWorkerClient(std::vector<std::shared_ptr<grpc::Channel>> ranks, absl::Duration timeout);
  absl::StatusOr<worker::StepOutput> Execute(const worker::StepInput& step,
                                             const std::vector<std::string>& request_ids) override;

  folio::internal::v1::Worker::Stub& stub(int rank) { return *stubs_[rank]; }
  int num_ranks() const { return static_cast<int>(stubs_.size()); }

 private:
  std::vector<std::unique_ptr<folio::internal::v1::Worker::Stub>> stubs_;
  const absl::Duration timeout_;
  uint64_t next_step_ = 1;
};

folio::internal::v1::ExecuteStepRequest ToProto(const worker::StepInput& step);
worker::StepOutput FromProto(const folio::internal::v1::ExecuteStepResponse& response);

}  // namespace folio::scheduler

#endif  // FOLIO_SERVICES_SCHEDULER_GRPC_CLIENTS_H_
