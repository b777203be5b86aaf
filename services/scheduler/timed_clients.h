// TimedCacheClient and TimedWorkerClient: decorators over any CacheClient / WorkerClient
// that time each call the scheduler makes to its cache manager and worker ranks, as seen
// from the scheduler (network and serialization included):
//   folio_scheduler_rpc_duration_seconds{service, method}  every call, failed ones too
//   folio_scheduler_rpc_errors_total{service, method, code} calls that returned an error
// `service` is "cachemgr" or "worker"; `method` is the RPC ("Step", "Reset",
// "ExecuteStep") or "Restore" (recovery's probe and set-up, several RPCs). Both decorators share one RpcMetrics, registered once per registry.
// Thread-compatible like the clients they wrap (the loop thread calls them); the metrics
// are thread-safe.
#ifndef FOLIO_SERVICES_SCHEDULER_TIMED_CLIENTS_H_
#define FOLIO_SERVICES_SCHEDULER_TIMED_CLIENTS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/metrics.h"
#include "services/scheduler/clients.h"

namespace folio::scheduler {

class RpcMetrics {
 public:
  // Adds the two families to `registry` (not owned; it must outlive this object).
  explicit RpcMetrics(MetricsRegistry* registry);

  void Record(const std::string& service, const std::string& method, absl::StatusCode code,
              absl::Duration elapsed);

 private:
  Family<Histogram>& duration_;
  Family<Counter>& errors_;
};

class TimedCacheClient final : public CacheClient {
 public:
  // Neither argument is owned; both must outlive this object.
  TimedCacheClient(CacheClient* inner, RpcMetrics* metrics) : inner_(inner), metrics_(metrics) {}
  absl::StatusOr<cachemgr::StepResponse> Step(const cachemgr::StepRequest& request) override;
  absl::Status Reset() override;
  absl::Status Restore() override;
  void CancelRestore() override { inner_->CancelRestore(); }
  absl::Status SetTiers(const OffloadTiers& tiers) override { return inner_->SetTiers(tiers); }
  void NoteBadDiskBlocks(std::vector<std::pair<uint64_t, uint64_t>> blocks) override {
    inner_->NoteBadDiskBlocks(std::move(blocks));
  }

 private:
  CacheClient* const inner_;
  RpcMetrics* const metrics_;
};

class TimedWorkerClient final : public WorkerClient {
 public:
  // Neither argument is owned; both must outlive this object.
  TimedWorkerClient(WorkerClient* inner, RpcMetrics* metrics) : inner_(inner), metrics_(metrics) {}
  absl::StatusOr<worker::StepOutput> Execute(const worker::StepInput& step,
                                             const std::vector<std::string>& request_ids) override;
  void Start(const worker::StepInput& step, const std::vector<std::string>& request_ids) override;
  absl::StatusOr<worker::StepOutput> Finish() override;
  absl::Status Restore() override;
  void CancelRestore() override { inner_->CancelRestore(); }
  OffloadTiers tiers() const override { return inner_->tiers(); }

 private:
  WorkerClient* const inner_;
  RpcMetrics* const metrics_;
  absl::Time started_;  // of the step in flight
};

}  // namespace folio::scheduler

#endif  // FOLIO_SERVICES_SCHEDULER_TIMED_CLIENTS_H_
