// In-process CacheClient and WorkerClient over a KvCacheManager and a ModelRunner: the
// scheduler's tests run the real pool and the real model without gRPC.
// Thread-compatible, like the clients they implement.
#ifndef FOLIO_SERVICES_SCHEDULER_LOCAL_CLIENTS_H_
#define FOLIO_SERVICES_SCHEDULER_LOCAL_CLIENTS_H_

#include "services/cachemgr/kv_cache_manager.h"
#include "services/scheduler/clients.h"
#include "services/worker/engine/model_runner.h"

namespace folio::scheduler {

class LocalCacheClient final : public CacheClient {
 public:
  // `manager` must outlive the client.
  explicit LocalCacheClient(cachemgr::KvCacheManager* manager) : manager_(manager) {}
  absl::StatusOr<cachemgr::StepResponse> Step(const cachemgr::StepRequest& request) override {
    return manager_->Step(request);
  }
  absl::Status Reset() override {
    return absl::UnimplementedError("an in-process pool is never lost");
  }
  absl::Status Restore() override {
    return absl::UnimplementedError("an in-process pool is never lost");
  }

 private:
  cachemgr::KvCacheManager* manager_;
};

class LocalWorkerClient final : public WorkerClient {
 public:
  // `runner` must outlive the client.
  explicit LocalWorkerClient(worker::ModelRunner* runner) : runner_(runner) {}
  absl::StatusOr<worker::StepOutput> Execute(const worker::StepInput& step,
                                             const std::vector<std::string>&) override {
    return runner_->Execute(step);
  }
  absl::Status Restore() override { return absl::OkStatus(); }  // an in-process runner stays

 private:
  worker::ModelRunner* runner_;
};

}  // namespace folio::scheduler

#endif  // FOLIO_SERVICES_SCHEDULER_LOCAL_CLIENTS_H_
