// The replica's KV usage on the scheduler's /metrics page, so that one endpoint per replica
// carries both the queue (folio_scheduler_requests_waiting) and the KV usage that load
// balancers such as the Gateway API Inference Extension's endpoint picker read.
#ifndef FOLIO_SERVICES_SCHEDULER_POOL_USAGE_GAUGE_H_
#define FOLIO_SERVICES_SCHEDULER_POOL_USAGE_GAUGE_H_

#include <memory>

#include "absl/time/time.h"
#include "common/metrics.h"
#include "grpcpp/channel.h"

namespace folio::scheduler {

// Adds folio_scheduler_kv_usage_ratio to `registry`, refreshed on each scrape by a
// GetStats call to the cache manager behind `cachemgr` (deadline `timeout`). When the
// call fails the gauge keeps its last value and the failure is logged. The hook, which
// the registry owns, holds its own stub on `cachemgr`. Thread-safe.
void AddPoolUsageGauge(MetricsRegistry* registry, std::shared_ptr<grpc::Channel> cachemgr,
                       absl::Duration timeout);

}  // namespace folio::scheduler

#endif  // FOLIO_SERVICES_SCHEDULER_POOL_USAGE_GAUGE_H_
