#include "services/scheduler/scheduler_metrics.h"

namespace folio::scheduler {

SchedulerMetrics::SchedulerMetrics(MetricsRegistry* r)
    : running(r->AddGauge("folio_scheduler_requests_running", "Requests holding KV blocks.")),
      waiting(r->AddGauge("folio_scheduler_requests_waiting",
                          "Requests queued for admission (new or preempted).")),
      preemptions(r->AddCounter("folio_scheduler_preemptions_total",
                                "Requests preempted (blocks freed, recomputed later).")),
      prompt_tokens(r->AddCounter("folio_scheduler_prompt_tokens_total",
                                  "Prompt tokens of admitted requests (first admission).")),
      generation_tokens(r->AddCounter("folio_scheduler_generation_tokens_total",
                                      "Tokens generated.")),
      prefix_hits(r->AddCounter("folio_scheduler_prefix_cache_hit_tokens_total",
                                "Tokens whose KV came from the prefix cache at admission.")),
      finished(r->AddCounterFamily("folio_scheduler_requests_finished_total",
                                   "Requests ended, by reason.", {"reason"})),
      step_duration(r->AddHistogram("folio_scheduler_step_duration_seconds",
                                    "Wall time of one scheduler step, RPCs included.",
                                    ExponentialBuckets(1e-4, 2, 18))),
      steps_planned_ahead(r->AddCounter(
          "folio_scheduler_steps_planned_ahead_total",
          "Steps planned while the one before ran and sent as soon as it answered "
          "(--async_steps).")),
      samples_dropped(r->AddCounter(
          "folio_scheduler_samples_dropped_total",
          "Tokens a pipelined step sampled for a sequence that had ended (or was "
          "preempted) meanwhile, dropped unseen.")),
      spec_proposed(r->AddCounterFamily(
          "folio_scheduler_speculative_proposed_tokens_total",
          "Tokens proposed for verification by speculative decoding (--speculative), by "
          "proposer.",
          {"proposer"})),
      spec_accepted(r->AddCounterFamily(
          "folio_scheduler_speculative_accepted_tokens_total",
          "Proposed tokens the model accepted (the model's own token of each verification "
          "not counted), by proposer.",
          {"proposer"})),
      spec_accepted_len(r->AddHistogramFamily(
          "folio_scheduler_speculative_accepted_length",
          "Tokens a verification step gained for one sequence: accepted proposals plus the "
          "model's own token, by proposer.",
          {"proposer"}, LinearBuckets(1, 1, 17))),
      batch_size(r->AddHistogram("folio_scheduler_batch_sequences",
                                 "Sequences computed per step.", ExponentialBuckets(1, 2, 10))),
      batch_tokens(r->AddHistogram("folio_scheduler_batch_tokens", "Tokens computed per step.",
                                   ExponentialBuckets(1, 2, 14))),
      ttft(r->AddHistogram("folio_scheduler_time_to_first_token_seconds",
                           "From arrival to the first generated token.",
                           ExponentialBuckets(1e-3, 2, 18))),
      itl(r->AddHistogram("folio_scheduler_inter_token_latency_seconds",
                          "Between consecutive tokens of one request.",
                          ExponentialBuckets(1e-4, 2, 18))),
      e2e(r->AddHistogram("folio_scheduler_request_latency_seconds",
                          "From arrival to the end of the request.",
                          ExponentialBuckets(1e-3, 2, 20))) {}

ProposerMetrics SchedulerMetrics::ForProposer(const std::string& proposer) {
  return {&spec_proposed.WithLabels({proposer}), &spec_accepted.WithLabels({proposer}),
          &spec_accepted_len.WithLabels({proposer})};
}

}  // namespace folio::scheduler
