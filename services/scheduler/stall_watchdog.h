// StallWatchdog: liveness that means progress. The scheduler's loop is live unless it
// has work (requests to step) and has not finished an iteration for `stall_timeout`:
// a loop stuck in a step, a lock or a bug. Time spent waiting in a recovery (recovery.h)
// is not a stall: the loop keeps iterating then, and readiness, not liveness, drops.
//
// main.cc polls Check() and reports the answer on the grpc.health.v1 name "liveness",
// which the Kubernetes liveness probe asks (deploy/k8s/base/replica.yaml), while the
// scheduler's own name (readiness) drops during recovery.
//
// Metrics: folio_scheduler_stalls_total (stalls begun) and folio_scheduler_loop_stalled
// (1 while stalled). Thread-compatible (one polling thread).
#ifndef FOLIO_SERVICES_SCHEDULER_STALL_WATCHDOG_H_
#define FOLIO_SERVICES_SCHEDULER_STALL_WATCHDOG_H_

#include "absl/time/time.h"
#include "common/metrics.h"
#include "services/scheduler/scheduler.h"

namespace folio::scheduler {

class StallWatchdog {
 public:
  // `registry` must outlive the watchdog.
  StallWatchdog(absl::Duration stall_timeout, MetricsRegistry* registry);

  // Whether the loop described by `health` is live at `now`. Logs and counts each stall
  // once, when it begins, and logs its end.
  bool Check(const LoopHealth& health, absl::Time now);

 private:
  const absl::Duration stall_timeout_;
  Counter& stalls_;
  Gauge& stalled_gauge_;
  bool stalled_ = false;
};

}  // namespace folio::scheduler

#endif  // FOLIO_SERVICES_SCHEDULER_STALL_WATCHDOG_H_
