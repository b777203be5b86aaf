// The scheduler's Prometheus metrics, registered once per scheduler. The metric objects
// are thread-safe (common/metrics.h); the struct only holds references to them.
#ifndef FOLIO_SERVICES_SCHEDULER_SCHEDULER_METRICS_H_
#define FOLIO_SERVICES_SCHEDULER_SCHEDULER_METRICS_H_

#include <memory>
#include <string>

#include "common/metrics.h"

namespace folio::scheduler {

// One proposer's children of the speculative families, looked up once.
struct ProposerMetrics {
  Counter* proposed = nullptr;
  Counter* accepted = nullptr;
  Histogram* accepted_len = nullptr;
};

struct SchedulerMetrics {
  // `registry` must outlive the metrics.
  explicit SchedulerMetrics(MetricsRegistry* registry);

  Gauge& running;
  Gauge& waiting;
  Counter& preemptions;
  Counter& prompt_tokens;
  Counter& generation_tokens;
  Counter& prefix_hits;
  Family<Counter>& finished;
  Histogram& step_duration;
  Counter& steps_planned_ahead;
  Counter& samples_dropped;
  // By proposer (label "proposer": ngram or draft, the scheduler's --speculative).
  Family<Counter>& spec_proposed;
  Family<Counter>& spec_accepted;
  Family<Histogram>& spec_accepted_len;
  // Their children for `proposer` (a sample each from now on: call only when it is on).
  ProposerMetrics ForProposer(const std::string& proposer);
  Histogram& batch_size;
  Histogram& batch_tokens;
  Histogram& ttft;
  Histogram& itl;
  Histogram& e2e;
};

}  // namespace folio::scheduler

#endif  // FOLIO_SERVICES_SCHEDULER_SCHEDULER_METRICS_H_
