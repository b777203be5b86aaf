// StepExecutor: runs the workers' steps off the scheduler's loop thread, one at a time, so
// the loop can plan the next step (and get its slots from the cache manager) while the
// workers compute this one: pipelined steps (scheduler.h, --async_steps).
//
// Without a thread of its own (inline) Start() runs the step on the caller's thread and
// Wait() only hands the answer over: the scheduler's synchronous mode, with one code path.
//
// Thread-safe; Start() and Wait() alternate, from one thread (the loop's).
#ifndef FOLIO_SERVICES_SCHEDULER_STEP_EXECUTOR_H_
#define FOLIO_SERVICES_SCHEDULER_STEP_EXECUTOR_H_

#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "services/scheduler/clients.h"
#include "services/worker/engine/step.h"

namespace folio::scheduler {

class StepExecutor {
 public:
  // `workers` must outlive the executor. `threaded`: run steps on a thread of its own.
  StepExecutor(WorkerClient* workers, bool threaded);
  ~StepExecutor();

  StepExecutor(const StepExecutor&) = delete;
  StepExecutor& operator=(const StepExecutor&) = delete;

  // Starts a step; none may be in flight.
  void Start(worker::StepInput input, std::vector<std::string> request_ids);
  // Whether a step was started and not waited for.
  bool in_flight() const { return in_flight_; }
  // The answer of the step in flight, once it is there.
  absl::StatusOr<worker::StepOutput> Wait();

 private:
  void Loop();

  WorkerClient* const workers_;
  bool in_flight_ = false;  // the loop thread's own view

  absl::Mutex mu_;
  absl::CondVar cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<worker::StepInput> input_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> request_ids_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::StatusOr<worker::StepOutput>> output_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;  // last: started once the rest is set up
};

}  // namespace folio::scheduler

#endif  // FOLIO_SERVICES_SCHEDULER_STEP_EXECUTOR_H_
