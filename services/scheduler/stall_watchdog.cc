#include "services/scheduler/stall_watchdog.h"

#include "glog/logging.h"

namespace folio::scheduler {

StallWatchdog::StallWatchdog(absl::Duration stall_timeout, MetricsRegistry* r)
    : stall_timeout_(stall_timeout),
      stalls_(r->AddCounter("folio_scheduler_stalls_total",
                            "Times the step loop had work but finished no iteration for "
                            "--stall_timeout_s (liveness then reports NOT_SERVING).")),
      stalled_gauge_(r->AddGauge("folio_scheduler_loop_stalled",
                                 "1 while the step loop is stalled (see "
                                 "folio_scheduler_stalls_total), else 0.")) {}

bool StallWatchdog::Check(const LoopHealth& health, absl::Time now) {
  const absl::Duration since = now - health.last_iteration;
  const bool stalled = health.has_work && !health.recovering && since >= stall_timeout_;
  if (stalled && !stalled_) {
    LOG(ERROR) << "the step loop has had work but finished no iteration for "
               << absl::FormatDuration(since) << " (--stall_timeout_s "
               << absl::FormatDuration(stall_timeout_) << "): liveness NOT_SERVING";
    stalls_.Increment();
  } else if (!stalled && stalled_) {
    LOG(WARNING) << "the step loop moves again: liveness SERVING";
  }
  stalled_ = stalled;
  stalled_gauge_.Set(stalled ? 1 : 0);
  return !stalled;
}

}  // namespace folio::scheduler
