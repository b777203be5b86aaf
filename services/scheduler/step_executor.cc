#include "services/scheduler/step_executor.h"

#include <utility>

#include "glog/logging.h"

namespace folio::scheduler {

StepExecutor::StepExecutor(WorkerClient* workers, bool threaded) : workers_(workers) {
  if (threaded) thread_ = std::thread([this] { Loop(); });
}

StepExecutor::~StepExecutor() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    cv_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
}

void StepExecutor::Start(worker::StepInput input, std::vector<std::string> request_ids) {
  CHECK(!in_flight_) << "a step is already in flight";
  in_flight_ = true;
  if (!thread_.joinable()) {
    absl::StatusOr<worker::StepOutput> output = workers_->Execute(input, request_ids);
    absl::MutexLock lock(&mu_);
    output_ = std::move(output);
    return;
  }
  absl::MutexLock lock(&mu_);
  input_ = std::move(input);
  request_ids_ = std::move(request_ids);
  cv_.SignalAll();
}

absl::StatusOr<worker::StepOutput> StepExecutor::Wait() {
  CHECK(in_flight_) << "no step in flight";
  in_flight_ = false;
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](std::optional<absl::StatusOr<worker::StepOutput>>* o) { return o->has_value(); },
      &output_));
  absl::StatusOr<worker::StepOutput> output = std::move(*output_);
  output_.reset();
  return output;
}

void StepExecutor::Loop() {
  while (true) {
    worker::StepInput input;
    std::vector<std::string> request_ids;
    {
      absl::MutexLock lock(&mu_);
      while (!stop_ && !input_.has_value()) cv_.Wait(&mu_);
      if (stop_) return;
      input = std::move(*input_);
      request_ids = std::move(request_ids_);
      input_.reset();
    }
    absl::StatusOr<worker::StepOutput> output = workers_->Execute(input, request_ids);
    absl::MutexLock lock(&mu_);
    output_ = std::move(output);
  }
}

}  // namespace folio::scheduler
