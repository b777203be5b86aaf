#include "services/scheduler/timed_clients.h"

#include "absl/time/clock.h"

namespace folio::scheduler {

RpcMetrics::RpcMetrics(MetricsRegistry* r)
    : duration_(r->AddHistogramFamily(
          "folio_scheduler_rpc_duration_seconds",
          "Calls from the scheduler to its cache manager and workers, as the scheduler sees "
          "them (network included), by service and method.",
          {"service", "method"}, ExponentialBuckets(5e-5, 2, 20))),
      errors_(r->AddCounterFamily(
          "folio_scheduler_rpc_errors_total",
          "Calls from the scheduler to its cache manager and workers that failed, by service, "
          "method and status code.",
          {"service", "method", "code"})) {}

void RpcMetrics::Record(const std::string& service, const std::string& method,
                        absl::StatusCode code, absl::Duration elapsed) {
  duration_.WithLabels({service, method}).Observe(absl::ToDoubleSeconds(elapsed));
  if (code != absl::StatusCode::kOk) {
    errors_.WithLabels({service, method, absl::StatusCodeToString(code)}).Increment();
  }
}

absl::StatusOr<cachemgr::StepResponse> TimedCacheClient::Step(
    const cachemgr::StepRequest& request) {
  const absl::Time start = absl::Now();
  absl::StatusOr<cachemgr::StepResponse> response = inner_->Step(request);
  metrics_->Record("cachemgr", "Step", response.status().code(), absl::Now() - start);
  return response;
}

absl::Status TimedCacheClient::Reset() {
  const absl::Time start = absl::Now();
  absl::Status status = inner_->Reset();
  metrics_->Record("cachemgr", "Reset", status.code(), absl::Now() - start);
  return status;
}

absl::Status TimedCacheClient::Restore() {
  const absl::Time start = absl::Now();
  absl::Status status = inner_->Restore();
  metrics_->Record("cachemgr", "Restore", status.code(), absl::Now() - start);
  return status;
}

absl::Status TimedWorkerClient::Restore() {
  const absl::Time start = absl::Now();
  absl::Status status = inner_->Restore();
  metrics_->Record("worker", "Restore", status.code(), absl::Now() - start);
  return status;
}

absl::StatusOr<worker::StepOutput> TimedWorkerClient::Execute(
    const worker::StepInput& step, const std::vector<std::string>& request_ids) {
  const absl::Time start = absl::Now();
  absl::StatusOr<worker::StepOutput> output = inner_->Execute(step, request_ids);
  metrics_->Record("worker", "ExecuteStep", output.status().code(), absl::Now() - start);
  return output;
}

void TimedWorkerClient::Start(const worker::StepInput& step,
                              const std::vector<std::string>& request_ids) {
  started_ = absl::Now();
  inner_->Start(step, request_ids);
}

absl::StatusOr<worker::StepOutput> TimedWorkerClient::Finish() {
  absl::StatusOr<worker::StepOutput> output = inner_->Finish();
  metrics_->Record("worker", "ExecuteStep", output.status().code(), absl::Now() - started_);
  return output;
}

}  // namespace folio::scheduler
